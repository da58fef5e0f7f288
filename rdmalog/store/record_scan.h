/* The record scanner of `_record_scan.c` (see there for what it checks), as static functions so
 * that `_records.c` runs it too: its one-call check of a produce request's plain batches
 * (`validate_client`) uses the same parser as `RecordScan`. Include after <Python.h>.
 */
#ifndef RDMALOG_RECORD_SCAN_H
#define RDMALOG_RECORD_SCAN_H
#include <stdint.h>

#define CHECK_TIMESTAMPS 1
#define KEYS_REQUIRED 2
#define FIXED_TIMESTAMP 4

enum {
    S_LENGTH, S_ATTRIBUTES, S_TIMESTAMP, S_OFFSET, S_KEY_LENGTH, S_KEY, S_VALUE_LENGTH, S_VALUE,
    S_HEADER_COUNT, S_HEADER_KEY_LENGTH, S_HEADER_KEY, S_HEADER_VALUE_LENGTH, S_HEADER_VALUE
};

typedef struct {
    PyObject_HEAD
    int64_t count, base_ts, min_ts, max_ts_allowed;
    int flags;
    Py_ssize_t max_errors;
    int state;
    uint64_t vacc; /* the varint being read */
    int vshift;
    int64_t body_left; /* bytes of the current record's body not consumed yet */
    int64_t skip;      /* bytes of the current key / value / header field still to pass */
    int64_t headers_left;
    int64_t index; /* the current record */
    int64_t ts;
    int key_null;
    int64_t max_ts;
    int64_t error_count;
    PyObject *errors;
} RecordScan;

static int fail(RecordScan *s, const char *what) {
    PyErr_Format(PyExc_ValueError, "record %lld: %s", (long long)s->index, what);
    return -1;
}

/* The record that just ended: its length must be used up; then the checks. */
/* The rule a whole record breaks: 1 a null key where keys are required (compacted topics), 2 a
 * timestamp outside [low, high], 0 none. record_done and fast_records' common case both ask it. */
static inline int broken_rule(int flags, int key_null, int64_t ts, int64_t low, int64_t high) {
    if ((flags & KEYS_REQUIRED) && key_null) return 1;
    if ((flags & CHECK_TIMESTAMPS) && ts != -1 && (ts < low || ts > high)) return 2;
    return 0;
}

static int record_done(RecordScan *s) {
    if (s->body_left != 0) return fail(s, "its fields end before its length does");
    int64_t ts = s->ts;
    if (ts > s->max_ts) s->max_ts = ts;
    int kind = broken_rule(s->flags, s->key_null, ts, s->min_ts, s->max_ts_allowed);
    if (kind) {
        if (s->error_count < s->max_errors) {
            PyObject *e = Py_BuildValue("(LiL)", (long long)s->index, kind, (long long)ts);
            if (!e || PyList_Append(s->errors, e) < 0) {
                Py_XDECREF(e);
                return -1;
            }
            Py_DECREF(e);
        }
        s->error_count++;
    }
    s->index++;
    s->state = S_LENGTH;
    return 0;
}

/* A varint-valued field is complete: act on `v`. */
static int field_done(RecordScan *s, int64_t v) {
    switch (s->state) {
    case S_LENGTH:
        if (s->index >= s->count) return fail(s, "more records than the batch's count");
        if (v < 6) return fail(s, "invalid record length");
        s->body_left = v;
        s->state = S_ATTRIBUTES;
        return 0;
    case S_TIMESTAMP:
        s->ts = (s->flags & FIXED_TIMESTAMP) ? s->base_ts : (int64_t)((uint64_t)s->base_ts + (uint64_t)v);
        s->state = S_OFFSET;
        return 0;
    case S_OFFSET:
        if (v != s->index) return fail(s, "its offset delta is not its position in the batch");
        s->state = S_KEY_LENGTH;
        return 0;
    case S_KEY_LENGTH:
        s->key_null = v < 0;
        s->skip = v < 0 ? 0 : v;
        s->state = S_KEY;
        break;
    case S_VALUE_LENGTH:
        s->skip = v < 0 ? 0 : v;
        s->state = S_VALUE;
        break;
    case S_HEADER_COUNT:
        if (v < 0) return fail(s, "invalid number of record headers");
        s->headers_left = v;
        if (v == 0) return record_done(s);
        s->state = S_HEADER_KEY_LENGTH;
        return 0;
    case S_HEADER_KEY_LENGTH:
        if (v < 0) return fail(s, "negative header key size");
        s->skip = v;
        s->state = S_HEADER_KEY;
        break;
    case S_HEADER_VALUE_LENGTH:
        s->skip = v < 0 ? 0 : v;
        s->state = S_HEADER_VALUE;
        break;
    }
    if (s->skip > s->body_left) return fail(s, "a field extends past the record");
    return 0;
}

/* The field being skipped has been passed: the next state. */
static int skipped(RecordScan *s) {
    switch (s->state) {
    case S_KEY: s->state = S_VALUE_LENGTH; return 0;
    case S_VALUE: s->state = S_HEADER_COUNT; return 0;
    case S_HEADER_KEY: s->state = S_HEADER_VALUE_LENGTH; return 0;
    default: /* S_HEADER_VALUE */
        if (--s->headers_left > 0) {
            s->state = S_HEADER_KEY_LENGTH;
            return 0;
        }
        return record_done(s);
    }
}

/* A varint read straight from memory (the fast path); NULL when malformed or past `end`. */
static inline const unsigned char *fast_varint(const unsigned char *p, const unsigned char *end,
                                               int max_shift, int64_t *out) {
    if (p < end && *p < 0x80) { /* the common case: one byte */
        unsigned char b = *p;
        *out = (int64_t)(b >> 1) ^ -(int64_t)(b & 1);
        return p + 1;
    }
    if (end - p >= 2 && p[1] < 0x80) { /* two (a 100-byte value's length, a record's) */
        uint64_t r = (uint64_t)(p[0] & 0x7F) | (uint64_t)p[1] << 7;
        *out = (int64_t)(r >> 1) ^ -(int64_t)(r & 1);
        return p + 2;
    }
    uint64_t r = 0;
    for (int shift = 0; shift <= max_shift && p < end; shift += 7) {
        unsigned char b = *p++;
        r |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = (int64_t)(r >> 1) ^ -(int64_t)(r & 1);
            return p;
        }
    }
    return NULL;
}

/* Whole records that lie entirely in [*pp, end), parsed straight-line; stops (leaving *pp at the
 * record's start) at the first record that does not, or that is malformed, for the state machine
 * to take over (and name the error). The scanner's fields are kept in locals (no store per
 * record); a record that breaks a rule goes through record_done, which lists it. */
static int fast_records(RecordScan *s, const unsigned char **pp, const unsigned char *end) {
    const unsigned char *p = *pp;
    const int flags = s->flags;
    const int64_t count = s->count, base_ts = s->base_ts;
    const int64_t low = s->min_ts, high = s->max_ts_allowed;
    int64_t index = s->index, max_ts = s->max_ts;
    int rc = 0;
    while (p < end && index < count) {
        int64_t len, ts, off, klen, vlen, nh, n;
        const unsigned char *q = fast_varint(p, end, 28, &len);
        if (!q || (int32_t)len < 6 || (int32_t)len > end - q) break;
        const unsigned char *stop = q + (int32_t)len;
        q++; /* attributes */
        if (!(q = fast_varint(q, stop, 63, &ts))) break;
        if (!(q = fast_varint(q, stop, 28, &off)) || (int32_t)off != index) break;
        if (!(q = fast_varint(q, stop, 28, &klen))) break;
        klen = (int32_t)klen;
        if (klen > stop - q) break;
        if (klen > 0) q += klen;
        if (!(q = fast_varint(q, stop, 28, &vlen))) break;
        vlen = (int32_t)vlen;
        if (vlen > stop - q) break;
        if (vlen > 0) q += vlen;
        if (!(q = fast_varint(q, stop, 28, &nh)) || (int32_t)nh < 0) break;
        for (n = (int32_t)nh; n > 0 && q; n--) {
            int64_t hk, hv;
            if (!(q = fast_varint(q, stop, 28, &hk)) || (int32_t)hk < 0 || (int32_t)hk > stop - q) {
                q = NULL;
                break;
            }
            q += (int32_t)hk;
            if (!(q = fast_varint(q, stop, 28, &hv))) break;
            hv = (int32_t)hv;
            if (hv > stop - q) {
                q = NULL;
                break;
            }
            if (hv > 0) q += hv;
        }
        if (q != stop) break;
        int64_t t =
            (flags & FIXED_TIMESTAMP) ? base_ts : (int64_t)((uint64_t)base_ts + (uint64_t)ts);
        if (broken_rule(flags, klen < 0, t, low, high)) {
            s->index = index; /* a broken rule: record_done lists it */
            s->max_ts = max_ts;
            s->ts = t;
            s->key_null = klen < 0;
            s->body_left = 0;
            if (record_done(s) < 0) {
                rc = -1;
                break;
            }
            index = s->index;
            max_ts = s->max_ts;
        } else {
            if (t > max_ts) max_ts = t;
            index++;
        }
        p = stop;
    }
    s->index = index;
    s->max_ts = max_ts;
    *pp = p;
    return rc;
}

static int scan(RecordScan *s, const unsigned char *p, const unsigned char *end) {
    while (p < end) {
        if (s->state == S_LENGTH && s->vshift == 0) {
            if (fast_records(s, &p, end) < 0) return -1;
            if (p >= end) break;
        }
        int st = s->state;
        if (st == S_KEY || st == S_VALUE || st == S_HEADER_KEY || st == S_HEADER_VALUE) {
            int64_t n = end - p;
            if (n > s->skip) n = s->skip;
            p += n;
            s->skip -= n;
            s->body_left -= n;
            if (s->skip == 0 && skipped(s) < 0) return -1;
            continue;
        }
        unsigned char b = *p++;
        if (st != S_LENGTH && --s->body_left < 0) return fail(s, "its fields run past its length");
        if (st == S_ATTRIBUTES) {
            s->state = S_TIMESTAMP;
            continue;
        }
        s->vacc |= (uint64_t)(b & 0x7F) << s->vshift;
        if (b & 0x80) {
            s->vshift += 7;
            if (s->vshift > (st == S_TIMESTAMP ? 63 : 28)) return fail(s, "varint too long");
            continue;
        }
        int64_t v = (int64_t)(s->vacc >> 1) ^ -(int64_t)(s->vacc & 1);
        if (st != S_TIMESTAMP) v = (int32_t)v; /* a varint: 32 bits, as Kafka reads it */
        s->vacc = 0;
        s->vshift = 0;
        if (field_done(s, v) < 0) return -1;
        /* a skipped field of length 0 ends at once */
        if (s->skip == 0 && (s->state == S_KEY || s->state == S_VALUE || s->state == S_HEADER_KEY ||
                             s->state == S_HEADER_VALUE)) {
            if (skipped(s) < 0) return -1;
        }
    }
    return 0;
}

/* Set up `s` for a batch of `count` records (what RecordScan.__init__ does); `errors` may be NULL
 * when max_errors is 0 (only error_count is kept then). */
static inline void scan_start(RecordScan *s, int64_t count, int64_t base_ts, int64_t min_ts,
                              int64_t max_ts_allowed, int flags, Py_ssize_t max_errors) {
    s->count = count;
    s->base_ts = base_ts;
    s->min_ts = min_ts;
    s->max_ts_allowed = max_ts_allowed;
    s->flags = flags;
    s->max_errors = max_errors;
    s->state = S_LENGTH;
    s->vacc = 0;
    s->vshift = 0;
    s->body_left = s->skip = s->headers_left = s->index = 0;
    s->ts = -1;
    s->key_null = 0;
    s->max_ts = -1;
    s->error_count = 0;
}

/* Whether the records fed so far end exactly after `count` whole records. */
static inline int scan_complete(const RecordScan *s) {
    return s->state == S_LENGTH && s->vshift == 0 && s->index == s->count;
}

#endif
