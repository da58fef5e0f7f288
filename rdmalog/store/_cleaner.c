/* The log cleaner's per-record work in C: Kafka's offset map and its record filter.
 *
 * OffsetMap(memory) is Kafka's SkimpyOffsetMap: `memory` bytes of 24-byte slots, each the MD5 of a
 * key (16 bytes) and the latest offset seen for it (8), open addressing with Kafka's probe
 * sequence. Its memory is an anonymous mapping; clear() gives the pages back (they read as zeros
 * again), so a map costs resident memory only for what a cleaning round used.
 *
 * Methods (all bounds-checked; malformed records raise ValueError; the loops run without the GIL):
 *   put(key, offset), get(key) -> offset or -1, clear(); slots, size, latest_offset, utilization
 *   add_batches(buf, pos, end, start_offset, max_entries) -> (pos, status, records_read)
 *       Kafka's buildOffsetMapForSegment over the whole uncompressed data batches of buf[pos:end]:
 *       every keyed record at or after start_offset goes into the map, latest_offset follows the
 *       batches. It stops at a batch it leaves to the caller (STATUS_PYTHON: control,
 *       transactional or compressed), at a partial batch (STATUS_PARTIAL), when the map holds
 *       max_entries (STATUS_FULL, pos at that batch) or at end (STATUS_DONE).
 *   add_records(body, base_offset, count, start_offset, max_entries) -> (full, records_read)
 *       the same for the (decompressed) records of one batch.
 *   filter_batches(buf, pos, end, out, out_pos, protected, upper_bound, now, new_horizon)
 *       -> (pos, out_pos, status, written, stats)
 *       Kafka's cleaner filter (MemoryRecords.filterTo with the cleaner's RecordFilter) over the
 *       whole uncompressed non-transactional data batches of buf[pos:end], into out[out_pos:]:
 *       a batch whose records all stay is copied byte for byte; one that loses records is
 *       re-built as Kafka's MemoryRecordsBuilder builds it (same base offset, last offset
 *       delta, producer fields and leader epoch; base timestamp the first record's or the
 *       delete horizon, deltas re-encoded); one that loses them all is dropped, or kept as an
 *       empty header when it is the last batch of an active producer (its last offset is in the
 *       sorted int64 array `protected` and it has a producer id) or ends the cleaning round
 *       (next offset == upper_bound). A retained tombstone in a batch without a delete horizon
 *       gives it one (new_horizon); a batch whose horizon has passed (now) loses its tombstones.
 *       `written` lists (position in out, size, last offset, max timestamp, crc_due) of each
 *       batch written; re-built ones (crc_due) still need their CRC. Statuses as above, plus
 *       STATUS_OUT_FULL when out has no room for the next batch. stats: (messages read,
 *       messages retained, bytes read, bytes retained, records without a key).
 *   filter_records(body, count, base_offset, base_ts, fixed_ts, flags, existing_horizon,
 *       new_horizon, now) -> (kept, records_body or None, max_timestamp, base_timestamp,
 *       horizon_set, max_kept_offset, invalid)
 *       the filter for the (decompressed) records of one batch the caller handles: None when
 *       every record stays and the batch needs no new horizon (copy it as it is); b"" when none
 *       stays; else the re-built records. flags: FIXED_TIMESTAMP (LogAppendTime: every record's
 *       timestamp is fixed_ts), RETAIN_ALL (control batches), FORCE_HORIZON (a marker of an
 *       empty transaction: set the horizon even without a tombstone).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HASH_SIZE 16
#define ENTRY_SIZE 24
#define BATCH_OVERHEAD 61
#define LOG_OVERHEAD 12
#define MIN_BATCH_LENGTH 49

#define ATTR_CODEC 0x07
#define ATTR_TIMESTAMP_TYPE 0x08
#define ATTR_TRANSACTIONAL 0x10
#define ATTR_CONTROL 0x20
#define ATTR_DELETE_HORIZON 0x40

enum { STATUS_DONE, STATUS_PARTIAL, STATUS_PYTHON, STATUS_FULL, STATUS_OUT_FULL };
enum { FIXED_TIMESTAMP = 1, RETAIN_ALL = 2, FORCE_HORIZON = 4 };

#include "_cleaner_records.h"

/* --- the map ---------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    uint8_t *mem;
    size_t memory;
    int64_t slots, entries, latest_offset;
    EVP_MD_CTX *ctx;
    EVP_MD *md5;
    uint8_t *keep;  /* scratch: one flag per record of the batch being filtered */
    size_t keep_cap;
    int busy;       /* a method runs (without the GIL): another thread may not use the map */
} OffsetMap;

static int hash_key(OffsetMap *m, const uint8_t *key, int32_t n, uint8_t out[HASH_SIZE]) {
    unsigned int len = 0;
    return EVP_DigestInit_ex2(m->ctx, m->md5, NULL) && EVP_DigestUpdate(m->ctx, key, (size_t)n) &&
           EVP_DigestFinal_ex(m->ctx, out, &len) ? 0 : -1;
}

/* Kafka's positionOf: probe from the hash's int at `attempt` (then linear), slot * entry size. */
static inline size_t position_of(OffsetMap *m, const uint8_t *hash, int64_t attempt) {
    int64_t at = attempt < HASH_SIZE - 4 ? attempt : HASH_SIZE - 4;
    int32_t probe = (int32_t)((uint32_t)be32(hash + at) + (uint32_t)(attempt - at));
    int32_t a = probe == INT32_MIN ? 0 : (probe < 0 ? -probe : probe);
    return (size_t)(a % m->slots) * ENTRY_SIZE;
}
static inline int slot_empty(const uint8_t *e) {
    static const uint8_t zero[ENTRY_SIZE];
    return memcmp(e, zero, ENTRY_SIZE) == 0;
}

/* Kafka's SkimpyOffsetMap.put of a hashed key (the caller checks the map is not full). */
static void map_put_hash(OffsetMap *m, const uint8_t hash[HASH_SIZE], int64_t offset) {
    for (int64_t attempt = 0;; attempt++) {
        uint8_t *e = m->mem + position_of(m, hash, attempt);
        if (slot_empty(e)) {
            memcpy(e, hash, HASH_SIZE);
            m->entries++;
        } else if (memcmp(e, hash, HASH_SIZE) != 0) {
            continue;
        }
        put64(e + HASH_SIZE, offset);
        m->latest_offset = offset;
        return;
    }
}

/* Kafka's SkimpyOffsetMap.get of a hashed key: the offset stored for it, -1 when none. */
static int64_t map_get_hash(OffsetMap *m, const uint8_t hash[HASH_SIZE]) {
    for (int64_t attempt = 0; attempt < m->slots; attempt++) {
        const uint8_t *e = m->mem + position_of(m, hash, attempt);
        if (slot_empty(e)) return -1;
        if (memcmp(e, hash, HASH_SIZE) == 0) return be64(e + HASH_SIZE);
    }
    return -1;
}

static int map_put(OffsetMap *m, const uint8_t *key, int32_t n, int64_t offset) {
    uint8_t hash[HASH_SIZE];
    if (hash_key(m, key, n, hash) < 0) return -1;
    map_put_hash(m, hash, offset);
    return 0;
}

/* -1 when the key is not mapped, -2 on error. */
static int64_t map_get(OffsetMap *m, const uint8_t *key, int32_t n) {
    uint8_t hash[HASH_SIZE];
    if (hash_key(m, key, n, hash) < 0) return -2;
    return map_get_hash(m, hash);
}

/* Records are handled in runs of AHEAD: parsed and hashed first, the slot each one probes first
 * prefetched, then put or looked up in order. The map is far larger than the caches, and a
 * probe is a cache (and TLB) miss: overlapping them is most of the cleaner's speed. */
#define AHEAD 16

typedef struct {
    Rec r;
    int64_t offset;
    int hashed;
    uint8_t hash[HASH_SIZE];
} Ahead;

/* Parse (and hash, when `want(...)`) up to AHEAD records from *pp; returns how many, -1 on error. */
static int parse_ahead(OffsetMap *m, const uint8_t **pp, const uint8_t *end, int32_t left, int64_t base,
                       Ahead *run, int (*want)(const Ahead *, const void *), const void *arg,
                       const char **err) {
    int n = left < AHEAD ? left : AHEAD;
    for (int i = 0; i < n; i++) {
        Ahead *a = &run[i];
        if ((*err = parse_record(*pp, end, &a->r)) != NULL) return -1;
        *pp = a->r.next;
        a->offset = base + a->r.offset_delta;
        a->hashed = a->r.klen >= 0 && want(a, arg);
        if (a->hashed) {
            if (hash_key(m, a->r.key, a->r.klen, a->hash) < 0) { *err = "MD5 failed"; return -1; }
            __builtin_prefetch(m->mem + position_of(m, a->hash, 0));
        }
    }
    return n;
}

static int map_clear(OffsetMap *m) {
    if (madvise(m->mem, m->memory, MADV_DONTNEED) != 0) memset(m->mem, 0, m->memory);
    m->entries = 0;
    m->latest_offset = -1;
    return 0;
}

static int claim(OffsetMap *m) {
    if (m->busy) {
        PyErr_SetString(PyExc_RuntimeError, "OffsetMap used by two threads at once");
        return -1;
    }
    m->busy = 1;
    return 0;
}

static int OffsetMap_init(OffsetMap *m, PyObject *args, PyObject *kw) {
    static char *names[] = {"memory", NULL};
    Py_ssize_t memory;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "n", names, &memory)) return -1;
    if (m->mem != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "OffsetMap already initialised");
        return -1;
    }
    if (memory < ENTRY_SIZE) {
        PyErr_SetString(PyExc_ValueError, "an offset map needs room for at least one entry");
        return -1;
    }
    m->slots = memory / ENTRY_SIZE;
    m->memory = (size_t)memory;
    void *mem = mmap(NULL, m->memory, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    m->mem = mem;
    m->ctx = EVP_MD_CTX_new();
    m->md5 = EVP_MD_fetch(NULL, "MD5", NULL);
    if (m->ctx == NULL || m->md5 == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "MD5 (the offset map's key hash, as Kafka's) is unavailable");
        return -1;
    }
    m->latest_offset = -1;
    return 0;
}

static void OffsetMap_dealloc(OffsetMap *m) {
    if (m->mem != NULL) munmap(m->mem, m->memory);
    if (m->ctx != NULL) EVP_MD_CTX_free(m->ctx);
    if (m->md5 != NULL) EVP_MD_free(m->md5);
    free(m->keep);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static int ready(OffsetMap *m) {
    if (m->mem == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "OffsetMap not initialised");
        return -1;
    }
    return 0;
}

static PyObject *OffsetMap_put(OffsetMap *m, PyObject *args) {
    Py_buffer key;
    long long offset;
    if (ready(m) < 0 || !PyArg_ParseTuple(args, "y*L", &key, &offset)) return NULL;
    int rc = -1;
    if (m->entries >= m->slots) PyErr_SetString(PyExc_ValueError, "attempt to add a new entry to a full offset map");
    else if (key.len > INT32_MAX) PyErr_SetString(PyExc_ValueError, "key too long");
    else if ((rc = map_put(m, key.buf, (int32_t)key.len, offset)) < 0) PyErr_SetString(PyExc_RuntimeError, "MD5 failed");
    PyBuffer_Release(&key);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *OffsetMap_get(OffsetMap *m, PyObject *args) {
    Py_buffer key;
    if (ready(m) < 0 || !PyArg_ParseTuple(args, "y*", &key)) return NULL;
    int64_t found = key.len > INT32_MAX ? -1 : map_get(m, key.buf, (int32_t)key.len);
    PyBuffer_Release(&key);
    if (found == -2) {
        PyErr_SetString(PyExc_RuntimeError, "MD5 failed");
        return NULL;
    }
    return PyLong_FromLongLong(found);
}

static PyObject *OffsetMap_clear(OffsetMap *m, PyObject *unused) {
    if (ready(m) < 0 || claim(m) < 0) return NULL;
    Py_BEGIN_ALLOW_THREADS
    map_clear(m);
    Py_END_ALLOW_THREADS
    m->busy = 0;
    Py_RETURN_NONE;
}

/* --- building the map ------------------------------------------------------------------------- */

static int at_or_after(const Ahead *a, const void *start) { return a->offset >= *(const int64_t *)start; }

/* Put every keyed record at or after start into the map; -1 with *err on malformed records, 1 when
 * the map reached max_entries (Kafka checks before each put), else 0. *read counts records seen. */
static int add_records(OffsetMap *m, const uint8_t *p, const uint8_t *end, int64_t base, int32_t count,
                       int64_t start, int64_t max_entries, int64_t *read, const char **err) {
    Ahead run[AHEAD];
    for (int32_t done = 0; done < count;) {
        int n = parse_ahead(m, &p, end, count - done, base, run, at_or_after, &start, err);
        if (n < 0) return -1;
        for (int i = 0; i < n; i++) {
            if (run[i].hashed) {
                if (m->entries >= max_entries) return 1;
                map_put_hash(m, run[i].hash, run[i].offset);
            }
            (*read)++;
        }
        done += n;
    }
    if (p != end) { *err = "incorrect declared batch size, records still remaining"; return -1; }
    return 0;
}

static PyObject *OffsetMap_add_records(OffsetMap *m, PyObject *args) {
    Py_buffer body;
    long long base, start, max_entries;
    int count;
    if (ready(m) < 0 || !PyArg_ParseTuple(args, "y*LiLL", &body, &base, &count, &start, &max_entries)) return NULL;
    if (claim(m) < 0) { PyBuffer_Release(&body); return NULL; }
    const char *err = NULL;
    int64_t read = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = add_records(m, body.buf, (const uint8_t *)body.buf + body.len, base, count, start, max_entries, &read, &err);
    Py_END_ALLOW_THREADS
    m->busy = 0;
    PyBuffer_Release(&body);
    if (rc < 0) { PyErr_SetString(PyExc_ValueError, err); return NULL; }
    return Py_BuildValue("OL", rc ? Py_True : Py_False, (long long)read);
}

/* A whole batch header at p (within end): its size, 0 for a partial one, -1 for a corrupt one. */
static int64_t batch_size(const uint8_t *p, const uint8_t *end, const char **err) {
    if (end - p < BATCH_OVERHEAD) return 0;
    int32_t length = be32(p + 8);
    if (length < MIN_BATCH_LENGTH || p[16] != 2) { *err = "not a v2 record batch"; return -1; }
    if ((int64_t)length + LOG_OVERHEAD > end - p) return 0;
    return (int64_t)length + LOG_OVERHEAD;
}

static PyObject *OffsetMap_add_batches(OffsetMap *m, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t pos, end;
    long long start, max_entries;
    if (ready(m) < 0 || !PyArg_ParseTuple(args, "y*nnLL", &buf, &pos, &end, &start, &max_entries)) return NULL;
    if (pos < 0 || end > buf.len || pos > end) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "range outside the buffer");
        return NULL;
    }
    if (claim(m) < 0) { PyBuffer_Release(&buf); return NULL; }
    const uint8_t *b = buf.buf;
    const char *err = NULL;
    int status = STATUS_DONE;
    int64_t read = 0;
    Py_BEGIN_ALLOW_THREADS
    while (pos < end) {
        int64_t size = batch_size(b + pos, b + end, &err);
        if (size <= 0) { status = size ? -1 : STATUS_PARTIAL; break; }
        const uint8_t *h = b + pos;
        int16_t attrs = be16(h + 21);
        if (attrs & (ATTR_CONTROL | ATTR_TRANSACTIONAL | ATTR_CODEC)) { status = STATUS_PYTHON; break; }
        int64_t base = be64(h), last = base + be32(h + 23);
        int rc = add_records(m, h + BATCH_OVERHEAD, h + size, base, be32(h + 57), start, max_entries, &read, &err);
        if (rc) { status = rc < 0 ? -1 : STATUS_FULL; break; }
        if (last >= start) m->latest_offset = last;
        pos += size;
    }
    Py_END_ALLOW_THREADS
    m->busy = 0;
    PyBuffer_Release(&buf);
    if (status < 0) { PyErr_Format(PyExc_ValueError, "%s at byte %zd", err, pos); return NULL; }
    return Py_BuildValue("niL", pos, status, (long long)read);
}

/* --- filtering -------------------------------------------------------------------------------- */

typedef struct {
    int64_t read, kept, invalid, max_kept_offset;
    int tombstones, all_kept;
} Verdict;

static int looked_up(const Ahead *a, const void *ctx) {
    const int64_t *c = ctx; /* {flags, latest offset} */
    return !(c[0] & RETAIN_ALL) && a->offset <= c[1];
}

/* Decide which records of a batch stay (Kafka's Cleaner.shouldRetainRecord), into m->keep. */
static int decide(OffsetMap *m, const uint8_t *p, const uint8_t *end, int64_t base, int32_t count,
                  int flags, int retain_deletes, Verdict *v, const char **err) {
    /* a record takes at least 7 bytes: a count beyond that is corrupt (and no allocation) */
    if (count < 0 || count > (end - p) / 7) { *err = "record count does not fit the batch"; return -1; }
    if ((size_t)count > m->keep_cap) {
        uint8_t *k = realloc(m->keep, (size_t)count);
        if (k == NULL) { *err = "out of memory"; return -1; }
        m->keep = k;
        m->keep_cap = (size_t)count;
    }
    memset(v, 0, sizeof *v);
    v->all_kept = 1;
    v->max_kept_offset = -1;
    const int64_t ctx[2] = {flags, m->latest_offset};
    Ahead run[AHEAD];
    for (int32_t done = 0; done < count;) {
        int n = parse_ahead(m, &p, end, count - done, base, run, looked_up, ctx, err);
        if (n < 0) return -1;
        for (int i = 0; i < n; i++) {
            const Ahead *a = &run[i];
            int keep;
            if ((flags & RETAIN_ALL) || a->offset > m->latest_offset) {
                keep = 1;  /* past what the map covers */
            } else if (a->r.klen < 0) {
                keep = 0;  /* no key: invalid on a compacted log */
                v->invalid++;
            } else {
                keep = a->offset >= map_get_hash(m, a->hash) && (a->r.vlen >= 0 || retain_deletes);
            }
            m->keep[done + i] = (uint8_t)keep;
            if (keep) {
                v->kept++;
                if (a->offset > v->max_kept_offset) v->max_kept_offset = a->offset;
                if (a->r.vlen < 0) v->tombstones = 1;
            } else {
                v->all_kept = 0;
            }
            v->read++;
        }
        done += n;
    }
    if (p != end) { *err = "incorrect declared batch size, records still remaining"; return -1; }
    return 0;
}

/* Encode the kept records (into out, or only count their bytes when out is NULL); their
 * timestamps are re-based on new_base. Returns the bytes, and the largest timestamp in *max_ts. */
static Py_ssize_t encode_kept(OffsetMap *m, const uint8_t *p, const uint8_t *end, int32_t count,
                              int64_t base_ts, int flags, int64_t fixed_ts, int64_t new_base,
                              uint8_t *out, int64_t *max_ts) {
    Py_ssize_t n = 0;
    *max_ts = -1;  /* NO_TIMESTAMP, as MemoryRecordsBuilder starts */
    for (int32_t i = 0; i < count; i++) {
        Rec r;
        parse_record(p, end, &r);  /* checked by decide() */
        if (m->keep[i]) {
            int64_t ts = (flags & FIXED_TIMESTAMP) ? fixed_ts : base_ts + r.ts_delta;
            if (ts > *max_ts) *max_ts = ts;
            n += encode_record(&r, ts - new_base, out ? out + n : NULL);
        }
        p = r.next;
    }
    return n;
}

/* The first kept record's timestamp (MemoryRecordsBuilder's base timestamp without a horizon). */
static int64_t first_kept_ts(OffsetMap *m, const uint8_t *p, const uint8_t *end, int32_t count,
                             int64_t base_ts, int flags, int64_t fixed_ts) {
    for (int32_t i = 0; i < count; i++) {
        Rec r;
        parse_record(p, end, &r);
        if (m->keep[i]) return (flags & FIXED_TIMESTAMP) ? fixed_ts : base_ts + r.ts_delta;
        p = r.next;
    }
    return -1;
}

static PyObject *OffsetMap_filter_records(OffsetMap *m, PyObject *args) {
    Py_buffer body;
    int count, flags;
    long long base, base_ts, fixed_ts, existing_horizon, new_horizon, now;
    if (ready(m) < 0 || !PyArg_ParseTuple(args, "y*iLLLiLLL", &body, &count, &base, &base_ts, &fixed_ts,
                                          &flags, &existing_horizon, &new_horizon, &now))
        return NULL;
    if (claim(m) < 0) { PyBuffer_Release(&body); return NULL; }
    const uint8_t *p = body.buf, *end = p + body.len;
    const char *err = NULL;
    Verdict v;
    int rc;
    int retain_deletes = existing_horizon < 0 || now < existing_horizon;
    Py_BEGIN_ALLOW_THREADS
    rc = decide(m, p, end, base, count, flags, retain_deletes, &v, &err);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL;
    int64_t max_ts = -1, new_base = -1;
    int horizon = 0;
    if (rc < 0) {
        PyErr_SetString(PyExc_ValueError, err);
        goto done;
    }
    int set_horizon = existing_horizon < 0 && (v.tombstones || (flags & FORCE_HORIZON)) && new_horizon >= 0;
    if (v.kept == 0) {
        out = PyBytes_FromStringAndSize(NULL, 0);
    } else if (v.all_kept && !set_horizon) {
        out = Py_NewRef(Py_None);
    } else {
        horizon = existing_horizon >= 0 || set_horizon;
        new_base = existing_horizon >= 0 ? existing_horizon
                   : set_horizon ? new_horizon
                   : first_kept_ts(m, p, end, count, base_ts, flags, fixed_ts);
        Py_ssize_t n = encode_kept(m, p, end, count, base_ts, flags, fixed_ts, new_base, NULL, &max_ts);
        out = PyBytes_FromStringAndSize(NULL, n);
        if (out != NULL)
            encode_kept(m, p, end, count, base_ts, flags, fixed_ts, new_base, (uint8_t *)PyBytes_AS_STRING(out), &max_ts);
    }
done:
    m->busy = 0;
    PyBuffer_Release(&body);
    if (out == NULL) return NULL;
    return Py_BuildValue("LNLLiLL", (long long)v.kept, out, (long long)max_ts, (long long)new_base, horizon,
                         (long long)v.max_kept_offset, (long long)v.invalid);
}

typedef struct {
    int64_t pos, size, last, max_ts;
    int crc_due;
} Written;

static int in_sorted(const int64_t *a, Py_ssize_t n, int64_t x) {
    Py_ssize_t lo = 0, hi = n - 1;
    while (lo <= hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        int64_t v;
        memcpy(&v, a + mid, sizeof v);  /* the caller's buffer need not be aligned */
        if (v == x) return 1;
        if (v < x) lo = mid + 1; else hi = mid - 1;
    }
    return 0;
}

/* The 61-byte header of a re-built (or empty) batch, as DefaultRecordBatch.writeHeader writes it;
 * the CRC is left for the caller. */
static void write_header(uint8_t *o, const uint8_t *h, int64_t size, int16_t attrs, int64_t base_ts,
                         int64_t max_ts, int32_t count) {
    memcpy(o, h, 8);                      /* base offset */
    put32(o + 8, (int32_t)(size - LOG_OVERHEAD));
    memcpy(o + 12, h + 12, 4);            /* partition leader epoch */
    o[16] = 2;
    put32(o + 17, 0);
    put16(o + 21, attrs);
    memcpy(o + 23, h + 23, 4);            /* last offset delta: the batch keeps its last offset */
    put64(o + 27, base_ts);
    put64(o + 35, max_ts);
    memcpy(o + 43, h + 43, 14);           /* producer id, epoch, base sequence */
    put32(o + 57, count);
}

static PyObject *OffsetMap_filter_batches(OffsetMap *m, PyObject *args) {
    Py_buffer buf, out, prot;
    Py_ssize_t pos, end, out_pos;
    long long upper, now, new_horizon;
    if (ready(m) < 0 || !PyArg_ParseTuple(args, "y*nnw*ny*LLL", &buf, &pos, &end, &out, &out_pos, &prot,
                                          &upper, &now, &new_horizon))
        return NULL;
    PyObject *result = NULL;
    Written *written = NULL;
    Py_ssize_t nwritten = 0, cap = 0;
    if (pos < 0 || end > buf.len || pos > end || out_pos < 0 || out_pos > out.len) {
        PyErr_SetString(PyExc_ValueError, "range outside the buffer");
        goto release;
    }
    if (claim(m) < 0) goto release;
    const uint8_t *b = buf.buf;
    uint8_t *o = out.buf;
    const int64_t *protected = prot.buf;
    Py_ssize_t nprot = prot.len / (Py_ssize_t)sizeof(int64_t);
    const char *err = NULL;
    int status = STATUS_DONE;
    int64_t msgs_read = 0, msgs_kept = 0, bytes_read = 0, bytes_kept = 0, invalid = 0;
    Py_BEGIN_ALLOW_THREADS
    while (pos < end) {
        int64_t size = batch_size(b + pos, b + end, &err);
        if (size <= 0) { status = size ? -1 : STATUS_PARTIAL; break; }
        const uint8_t *h = b + pos;
        int16_t attrs = be16(h + 21);
        if (attrs & (ATTR_CONTROL | ATTR_TRANSACTIONAL | ATTR_CODEC)) { status = STATUS_PYTHON; break; }
        int64_t base = be64(h), last = base + be32(h + 23), pid = be64(h + 43), base_ts = be64(h + 27);
        int32_t count = be32(h + 57);
        int has_horizon = (attrs & ATTR_DELETE_HORIZON) != 0;
        int retain_empty = (pid >= 0 && in_sorted(protected, nprot, last)) || last + 1 == upper;
        Verdict v;
        if (decide(m, h + BATCH_OVERHEAD, h + size, base, count, 0, !has_horizon || now < base_ts, &v, &err) < 0) {
            status = -1;
            break;
        }
        int log_append = (attrs & ATTR_TIMESTAMP_TYPE) != 0;
        int64_t fixed_ts = be64(h + 35), max_ts = fixed_ts, new_base = 0, wsize = 0;
        int set_horizon = !has_horizon && v.tombstones && new_horizon >= 0;
        int mode; /* 0 drop, 1 copy, 2 re-build, 3 empty header */
        if (v.kept == 0) mode = retain_empty ? 3 : 0;
        else if (v.all_kept && !set_horizon) mode = 1;
        else mode = 2;
        const uint8_t *rb = h + BATCH_OVERHEAD, *re = h + size;
        int flags = log_append ? FIXED_TIMESTAMP : 0;
        if (mode == 1) wsize = size;
        else if (mode == 3) wsize = BATCH_OVERHEAD;
        else if (mode == 2) {
            new_base = has_horizon ? base_ts : set_horizon ? new_horizon
                       : first_kept_ts(m, rb, re, count, base_ts, flags, fixed_ts);
            int64_t records_max;
            wsize = BATCH_OVERHEAD + encode_kept(m, rb, re, count, base_ts, flags, fixed_ts, new_base, NULL, &records_max);
            if (!log_append) max_ts = records_max;
        }
        if (mode && wsize > out.len - out_pos) { status = STATUS_OUT_FULL; break; }
        if (mode && nwritten == cap) {
            Py_ssize_t ncap = cap ? cap * 2 : 256;
            Written *w = realloc(written, (size_t)ncap * sizeof *w);
            if (w == NULL) { err = "out of memory"; status = -1; break; }
            written = w;
            cap = ncap;
        }
        uint8_t *dst = o + out_pos;
        if (mode == 1) {
            memcpy(dst, h, size);
            max_ts = be64(h + 35);
        } else if (mode == 3) {
            int16_t a = attrs & (ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL);
            write_header(dst, h, wsize, a, -1, fixed_ts, 0);  /* writeEmptyHeader: no base time */
        } else if (mode == 2) {
            int64_t records_max;
            encode_kept(m, rb, re, count, base_ts, flags, fixed_ts, new_base, dst + BATCH_OVERHEAD, &records_max);
            int16_t a = attrs & (ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL);
            if (has_horizon || set_horizon) a |= ATTR_DELETE_HORIZON;
            write_header(dst, h, wsize, a, new_base, max_ts, (int32_t)v.kept);
        }
        if (mode) {
            written[nwritten++] = (Written){out_pos, wsize, last, max_ts, mode != 1};
            out_pos += wsize;
            bytes_kept += wsize;
        }
        msgs_read += v.read;
        msgs_kept += v.kept;
        invalid += v.invalid;
        bytes_read += size;
        pos += size;
    }
    Py_END_ALLOW_THREADS
    m->busy = 0;
    if (status < 0) {
        PyErr_Format(PyExc_ValueError, "%s at byte %zd", err, pos);
        goto release;
    }
    PyObject *list = PyList_New(nwritten);
    if (list == NULL) goto release;
    for (Py_ssize_t i = 0; i < nwritten; i++) {
        Written *w = &written[i];
        PyObject *t = Py_BuildValue("LLLLO", (long long)w->pos, (long long)w->size, (long long)w->last,
                                    (long long)w->max_ts, w->crc_due ? Py_True : Py_False);
        if (t == NULL) { Py_DECREF(list); goto release; }
        PyList_SET_ITEM(list, i, t);
    }
    result = Py_BuildValue("nniN(LLLLL)", pos, out_pos, status, list, (long long)msgs_read,
                           (long long)msgs_kept, (long long)bytes_read, (long long)bytes_kept, (long long)invalid);
release:
    free(written);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&out);
    PyBuffer_Release(&prot);
    return result;
}

/* --- attributes and the type ------------------------------------------------------------------ */

static PyObject *get_slots(OffsetMap *m, void *c) { return PyLong_FromLongLong(m->slots); }
static PyObject *get_size(OffsetMap *m, void *c) { return PyLong_FromLongLong(m->entries); }
static PyObject *get_latest(OffsetMap *m, void *c) { return PyLong_FromLongLong(m->latest_offset); }
static int set_latest(OffsetMap *m, PyObject *v, void *c) {
    if (v == NULL) { PyErr_SetString(PyExc_AttributeError, "cannot delete latest_offset"); return -1; }
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    m->latest_offset = x;
    return 0;
}
static PyObject *get_util(OffsetMap *m, void *c) {
    return PyFloat_FromDouble(m->slots ? (double)m->entries / (double)m->slots : 0.0);
}

static PyGetSetDef OffsetMap_getset[] = {
    {"slots", (getter)get_slots, NULL, "entries the map can hold", NULL},
    {"size", (getter)get_size, NULL, "entries it holds", NULL},
    {"latest_offset", (getter)get_latest, (setter)set_latest, "the last offset mapped", NULL},
    {"utilization", (getter)get_util, NULL, "size / slots", NULL},
    {NULL},
};

static PyMethodDef OffsetMap_methods[] = {
    {"put", (PyCFunction)OffsetMap_put, METH_VARARGS, "put(key, offset)"},
    {"get", (PyCFunction)OffsetMap_get, METH_VARARGS, "get(key) -> offset, or -1"},
    {"clear", (PyCFunction)OffsetMap_clear, METH_NOARGS, "forget every entry"},
    {"add_records", (PyCFunction)OffsetMap_add_records, METH_VARARGS, "map one batch's records"},
    {"add_batches", (PyCFunction)OffsetMap_add_batches, METH_VARARGS, "map whole plain batches"},
    {"filter_records", (PyCFunction)OffsetMap_filter_records, METH_VARARGS, "filter one batch's records"},
    {"filter_batches", (PyCFunction)OffsetMap_filter_batches, METH_VARARGS, "filter whole plain batches"},
    {NULL},
};

static PyTypeObject OffsetMapType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rdmalog.store._cleaner.OffsetMap",
    .tp_basicsize = sizeof(OffsetMap),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Kafka's SkimpyOffsetMap: MD5 of a key -> its latest offset, in fixed memory.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)OffsetMap_init,
    .tp_dealloc = (destructor)OffsetMap_dealloc,
    .tp_methods = OffsetMap_methods,
    .tp_getset = OffsetMap_getset,
};

static PyMethodDef module_methods[] = {
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_cleaner", .m_doc = "The log cleaner's per-record work.", .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__cleaner(void) {
    if (PyType_Ready(&OffsetMapType) < 0) return NULL;
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL) return NULL;
    Py_INCREF(&OffsetMapType);
    if (PyModule_AddObject(mod, "OffsetMap", (PyObject *)&OffsetMapType) < 0 ||
        PyModule_AddIntConstant(mod, "ENTRY_SIZE", ENTRY_SIZE) < 0 ||
        PyModule_AddIntConstant(mod, "STATUS_DONE", STATUS_DONE) < 0 ||
        PyModule_AddIntConstant(mod, "STATUS_PARTIAL", STATUS_PARTIAL) < 0 ||
        PyModule_AddIntConstant(mod, "STATUS_PYTHON", STATUS_PYTHON) < 0 ||
        PyModule_AddIntConstant(mod, "STATUS_FULL", STATUS_FULL) < 0 ||
        PyModule_AddIntConstant(mod, "STATUS_OUT_FULL", STATUS_OUT_FULL) < 0 ||
        PyModule_AddIntConstant(mod, "FIXED_TIMESTAMP", FIXED_TIMESTAMP) < 0 ||
        PyModule_AddIntConstant(mod, "RETAIN_ALL", RETAIN_ALL) < 0 ||
        PyModule_AddIntConstant(mod, "FORCE_HORIZON", FORCE_HORIZON) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
