/* Kafka's v2 record format for the log cleaner (_cleaner.c): big-endian fields, zigzag varints,
 * one record (DefaultRecord) parsed as Kafka's readFrom checks it and encoded as its writeTo
 * writes it. Static functions: included by _cleaner.c only. */
#ifndef RDMALOG_CLEANER_RECORDS_H
#define RDMALOG_CLEANER_RECORDS_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

/* --- big-endian fields and varints -------------------------------------------------------- */

static inline int64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}
static inline int32_t be32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}
static inline int16_t be16(const uint8_t *p) { return (int16_t)((p[0] << 8) | p[1]); }
static inline void put64(uint8_t *p, int64_t v) {
    for (int i = 7; i >= 0; i--, v = (int64_t)((uint64_t)v >> 8)) p[i] = (uint8_t)v;
}
static inline void put32(uint8_t *p, int32_t v) {
    p[0] = (uint8_t)((uint32_t)v >> 24); p[1] = (uint8_t)((uint32_t)v >> 16);
    p[2] = (uint8_t)((uint32_t)v >> 8); p[3] = (uint8_t)v;
}
static inline void put16(uint8_t *p, int16_t v) { p[0] = (uint8_t)((uint16_t)v >> 8); p[1] = (uint8_t)v; }

/* Kafka's ByteUtils.readVarint: at most 5 bytes, zigzag. */
static inline int read_varint(const uint8_t **pp, const uint8_t *end, int32_t *out) {
    const uint8_t *p = *pp;
    uint32_t v = 0;
    for (int shift = 0; p < end; shift += 7) {
        uint8_t b = *p++;
        if (!(b & 0x80)) {
            v |= (uint32_t)b << shift;
            *out = (int32_t)(v >> 1) ^ -(int32_t)(v & 1);
            *pp = p;
            return 0;
        }
        v |= (uint32_t)(b & 0x7F) << shift;
        if (shift + 7 > 28) return -1;
    }
    return -1;
}
/* Kafka's ByteUtils.readVarlong: at most 10 bytes, zigzag. */
static inline int read_varlong(const uint8_t **pp, const uint8_t *end, int64_t *out) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int shift = 0; p < end; shift += 7) {
        uint8_t b = *p++;
        if (!(b & 0x80)) {
            v |= (uint64_t)b << shift;
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            *pp = p;
            return 0;
        }
        v |= (uint64_t)(b & 0x7F) << shift;
        if (shift + 7 > 63) return -1;
    }
    return -1;
}
static inline int uvarint_size(uint64_t z) {
    int n = 1;
    while (z >= 0x80) { z >>= 7; n++; }
    return n;
}
static inline uint64_t zz32(int32_t v) { return (uint32_t)(((uint32_t)v << 1) ^ (uint32_t)(v >> 31)); }
static inline uint64_t zz64(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static inline uint8_t *write_uvarint(uint8_t *p, uint64_t z) {
    while (z >= 0x80) { *p++ = (uint8_t)(z | 0x80); z >>= 7; }
    *p++ = (uint8_t)z;
    return p;
}

/* --- one record (DefaultRecord) ------------------------------------------------------------- */

typedef struct {
    const uint8_t *next;  /* the byte after the record */
    int64_t ts_delta;
    int32_t offset_delta;
    const uint8_t *key; int32_t klen;  /* klen < 0: null */
    const uint8_t *val; int32_t vlen;  /* vlen < 0: null (a tombstone) */
    const uint8_t *hdrs; int32_t nhdrs;
} Rec;

/* Parse the record at p (checked as Kafka's DefaultRecord.readFrom checks it); NULL or a reason. */
static const char *parse_record(const uint8_t *p, const uint8_t *end, Rec *r) {
    int32_t size;
    if (read_varint(&p, end, &size) < 0) return "invalid varint for the record size";
    if (size < 0 || size > end - p) return "invalid record size";
    const uint8_t *rend = p + size;
    if (rend - p < 1) return "invalid record size";
    p++; /* attributes: unused */
    if (read_varlong(&p, rend, &r->ts_delta) < 0) return "invalid timestamp delta";
    if (read_varint(&p, rend, &r->offset_delta) < 0) return "invalid offset delta";
    if (read_varint(&p, rend, &r->klen) < 0) return "invalid key size";
    if (r->klen >= 0) {
        if (r->klen > rend - p) return "key extends past its record";
        r->key = p; p += r->klen;
    }
    if (read_varint(&p, rend, &r->vlen) < 0) return "invalid value size";
    if (r->vlen >= 0) {
        if (r->vlen > rend - p) return "value extends past its record";
        r->val = p; p += r->vlen;
    }
    if (read_varint(&p, rend, &r->nhdrs) < 0) return "invalid header count";
    if (r->nhdrs < 0) return "found invalid number of record headers";
    r->hdrs = p;
    for (int32_t i = 0; i < r->nhdrs; i++) {
        int32_t n;
        if (read_varint(&p, rend, &n) < 0 || n < 0) return "invalid header key size";
        if (n > rend - p) return "header key extends past its record";
        p += n;
        if (read_varint(&p, rend, &n) < 0) return "invalid header value size";
        if (n >= 0) {
            if (n > rend - p) return "header value extends past its record";
            p += n;
        }
    }
    if (p != rend) return "record size does not match its fields";
    r->next = rend;
    return NULL;
}

/* Bytes of `r` encoded as Kafka's DefaultRecord.writeTo writes it with timestamp delta `ts`;
 * written at out unless out is NULL. Headers are re-encoded field by field (minimal varints). */
static Py_ssize_t encode_record(const Rec *r, int64_t ts, uint8_t *out) {
    const uint8_t *h = r->hdrs, *hend = r->next;
    int64_t body = 1 + uvarint_size(zz64(ts)) + uvarint_size(zz32(r->offset_delta));
    body += r->klen < 0 ? 1 : uvarint_size(zz32(r->klen)) + r->klen;
    body += r->vlen < 0 ? 1 : uvarint_size(zz32(r->vlen)) + r->vlen;
    body += uvarint_size(zz32(r->nhdrs));
    for (int32_t i = 0; i < r->nhdrs; i++) {
        int32_t kn = 0, vn = 0;
        read_varint(&h, hend, &kn); h += kn;
        read_varint(&h, hend, &vn);
        if (vn >= 0) h += vn;
        body += uvarint_size(zz32(kn)) + kn + (vn < 0 ? 1 : uvarint_size(zz32(vn)) + vn);
    }
    Py_ssize_t total = uvarint_size(zz32((int32_t)body)) + body;
    if (out == NULL) return total;
    uint8_t *p = write_uvarint(out, zz32((int32_t)body));
    *p++ = 0;
    p = write_uvarint(p, zz64(ts));
    p = write_uvarint(p, zz32(r->offset_delta));
    p = write_uvarint(p, zz32(r->klen < 0 ? -1 : r->klen));
    if (r->klen > 0) { memcpy(p, r->key, r->klen); p += r->klen; }
    p = write_uvarint(p, zz32(r->vlen < 0 ? -1 : r->vlen));
    if (r->vlen > 0) { memcpy(p, r->val, r->vlen); p += r->vlen; }
    p = write_uvarint(p, zz32(r->nhdrs));
    h = r->hdrs;
    for (int32_t i = 0; i < r->nhdrs; i++) {
        int32_t kn = 0, vn = 0;
        read_varint(&h, hend, &kn);
        p = write_uvarint(p, zz32(kn));
        memcpy(p, h, kn); p += kn; h += kn;
        read_varint(&h, hend, &vn);
        p = write_uvarint(p, zz32(vn < 0 ? -1 : vn));
        if (vn > 0) { memcpy(p, h, vn); p += vn; h += vn; }
    }
    return total;
}

#endif
