/* The store's record batch check in C: `validate(buf, max_batch_size, from_client, allow_control,
 * info_type)`, what `records.validate_batches` checks (length, magic, CRC-32C, codec, count,
 * flags), without a Python call per batch. It returns the list of `info_type` (BatchInfo) tuples
 * when every batch is good, and None when any is not: the Python function then runs its own loop,
 * which raises the precise Kafka error (bad input is rare; the error text has one home).
 * `validate_client` adds the record checks of `records.check_records` for a client's batches, with
 * the same scanner (record_scan.h), so a produce request's batches are checked in one call;
 * compressed records are decompressed piece by piece into one reused buffer and scanned as they
 * come, never held whole nor re-encoded: gzip (zlib) always, lz4 (frame format), zstd (streamed
 * frames) and snappy (raw or xerial-framed) when their libraries were found at build time
 * (`CHECKED_CODECS`; setup.py defines HAVE_LZ4 / HAVE_ZSTD / HAVE_SNAPPY). `patch` sets the
 * offsets, leader epoch and timestamps of validated batches in place (the append's loop,
 * `records.patch_batches`).
 * Optional: records.py falls back to Python without it, and tests compare the two.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <limits.h>
#include <string.h>
#include "crc32c.h"
#include "record_scan.h"

#define BATCH_OVERHEAD 61
#define LOG_OVERHEAD 12
#define MIN_BATCH_LENGTH (BATCH_OVERHEAD - LOG_OVERHEAD)
#define CODEC_MASK 0x07
#define MAX_CODEC 4 /* zstd */
#define TRANSACTIONAL_BIT 0x10
#define CONTROL_BIT 0x20
#define TIMESTAMP_TYPE_BIT 0x08
#define GZIP 1
#define SNAPPY 2
#define LZ4 3
#define ZSTD 4
#define INFLATE_PIECE (64 * 1024) /* decompressed bytes scanned at a time: stays in cache */
#define WHOLE_KEPT (1 << 20)      /* a whole raw snappy block or zstd frame: kept between calls */

#include "record_codecs.h"

/* A batch header's fields, as check_header reads them. */
typedef struct {
    Py_ssize_t size;
    int16_t attrs, epoch;
    int32_t lod, count, seq;
    int64_t base_ts, max_ts, pid;
} Header;

/* The header checks of one batch at `h` (`left` bytes to the buffer's end), as
 * records._validate_batches makes them: 0 and `o` filled when it passes, -1 when it does not.
 * Inline: `validate` and `validate_client` each get their own copy (from_client a constant). */
static inline int check_header(const unsigned char *h, Py_ssize_t left, Py_ssize_t max_size,
                               int from_client, int allow_control, Header *o) {
    if (left < BATCH_OVERHEAD) return -1;
    int32_t length = (int32_t)be(h + 8, 4);
    Py_ssize_t size = (Py_ssize_t)length + LOG_OVERHEAD;
    if (length < MIN_BATCH_LENGTH || size > left) return -1;
    if (h[16] != 2) return -1; /* magic */
    if (max_size >= 0 && size > max_size) return -1;
    if (crc32c(h + 21, (size_t)(size - 21)) != (uint32_t)be(h + 17, 4)) return -1;
    int16_t attrs = (int16_t)be(h + 21, 2);
    int32_t lod = (int32_t)be(h + 23, 4), count = (int32_t)be(h + 57, 4);
    int64_t pid = (int64_t)be(h + 43, 8);
    int32_t seq = (int32_t)be(h + 53, 4);
    if ((attrs & CODEC_MASK) > MAX_CODEC) return -1;
    if (lod < 0 || count < 0 || (from_client && count != (int64_t)lod + 1)) return -1;
    if (from_client && (((attrs & CONTROL_BIT) && !allow_control) ||
                        ((attrs & TRANSACTIONAL_BIT) && pid < 0) ||
                        (pid >= 0 && seq < 0 && !(attrs & CONTROL_BIT))))
        return -1;
    o->size = size;
    o->attrs = attrs;
    o->lod = lod;
    o->count = count;
    o->base_ts = (int64_t)be(h + 27, 8);
    o->max_ts = (int64_t)be(h + 35, 8);
    o->pid = pid;
    o->epoch = (int16_t)be(h + 51, 2);
    o->seq = seq;
    return 0;
}

/* One BatchInfo: a tuple subclass filled as tuple.__new__ fills one (its nine numbers, then
 * stale_max_timestamp False: the record checks, in Python, set it). */
static PyObject *info_new(PyTypeObject *type, const long long v[9], int stale) {
    PyObject *t = type->tp_alloc(type, 10);
    if (!t) return NULL;
    for (int i = 0; i < 9; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (!x) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    PyObject *b = stale ? Py_True : Py_False;
    Py_INCREF(b);
    PyTuple_SET_ITEM(t, 9, b);
    return t;
}

static PyObject *validate(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyType_Check(args[4]) ||
        !PyType_IsSubtype((PyTypeObject *)args[4], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError,
                        "validate(buf, max_batch_size, from_client, allow_control, info_type)");
        return NULL;
    }
    Py_ssize_t max_size = PyLong_AsSsize_t(args[1]);
    if (max_size == -1 && PyErr_Occurred()) return NULL;
    int from_client = PyObject_IsTrue(args[2]), allow_control = PyObject_IsTrue(args[3]);
    if (from_client < 0 || allow_control < 0) return NULL;
    PyTypeObject *info_type = (PyTypeObject *)args[4];
    Py_buffer v;
    if (PyObject_GetBuffer(args[0], &v, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *buf = (const unsigned char *)v.buf;
    Py_ssize_t end = v.len, pos = 0;
    PyObject *out = PyList_New(0);
    if (!out) goto fail;
    if (end == 0) goto bad;
    while (pos < end) {
        Header b;
        if (check_header(buf + pos, end - pos, max_size, from_client, allow_control, &b) < 0)
            goto bad;
        long long f[9] = {pos, b.size, b.lod, b.max_ts, b.count, b.attrs, b.pid, b.epoch, b.seq};
        PyObject *info = info_new(info_type, f, 0);
        if (!info) goto fail;
        int r = PyList_Append(out, info);
        Py_DECREF(info);
        if (r < 0) goto fail;
        pos += b.size;
    }
    PyBuffer_Release(&v);
    return out;
bad:
    PyBuffer_Release(&v);
    Py_DECREF(out);
    Py_RETURN_NONE;
fail:
    PyBuffer_Release(&v);
    Py_XDECREF(out);
    return NULL;
}

/* validate_client(buf, max_batch_size, allow_control, info_type, min_ts, max_ts, flags,
 * log_append_time): `validate` of a client's batches (from_client) plus, for each data batch, the
 * record checks of `records.check_records` (flags: the scanner's CHECK_TIMESTAMPS and
 * KEYS_REQUIRED; min_ts/max_ts the CreateTime bounds; log_append_time: the topic stamps
 * LogAppendTime). The infos carry the records' max timestamp and whether the header's is stale.
 * Batches of the codecs in CHECKED_CODECS have their records checked here (a raw snappy block
 * inflates whole, bounded by max(max_batch_size, 1 MiB): a larger one is left to Python). A list
 * when every batch was checked; a tuple of the same infos when some are of a codec whose library
 * was missing at build time (their records not checked yet: the Python check takes those, as they
 * decompress); None when any batch or record fails a check, or a snappy block is past the bound
 * (Python then names the error, or checks that batch as before). */
static PyObject *validate_client(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8 || !PyType_Check(args[3]) ||
        !PyType_IsSubtype((PyTypeObject *)args[3], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError,
                        "validate_client(buf, max_batch_size, allow_control, info_type, min_ts, "
                        "max_ts, flags, log_append_time)");
        return NULL;
    }
    Py_ssize_t max_size = PyLong_AsSsize_t(args[1]);
    if (max_size == -1 && PyErr_Occurred()) return NULL;
    int allow_control = PyObject_IsTrue(args[2]);
    if (allow_control < 0) return NULL;
    PyTypeObject *info_type = (PyTypeObject *)args[3];
    long long min_ts = PyLong_AsLongLong(args[4]);
    if (min_ts == -1 && PyErr_Occurred()) return NULL;
    long long max_allowed = PyLong_AsLongLong(args[5]);
    if (max_allowed == -1 && PyErr_Occurred()) return NULL;
    long flags = PyLong_AsLong(args[6]);
    if (flags == -1 && PyErr_Occurred()) return NULL;
    int log_append_time = PyObject_IsTrue(args[7]);
    if (log_append_time < 0) return NULL;
    flags &= CHECK_TIMESTAMPS | KEYS_REQUIRED;
    Py_buffer v;
    if (PyObject_GetBuffer(args[0], &v, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *buf = (const unsigned char *)v.buf;
    Py_ssize_t end = v.len, pos = 0;
    RecordScan scanner;
    size_t snappy_limit = max_size > WHOLE_KEPT ? (size_t)max_size : WHOLE_KEPT;
    int unchecked = 0;
    PyObject *out = PyList_New(0);
    if (!out) goto fail;
    if (end == 0) goto bad;
    while (pos < end) {
        const unsigned char *h = buf + pos;
        Header b;
        if (check_header(h, end - pos, max_size, 1, allow_control, &b) < 0) goto bad;
        int stale = 0;
        int codec = b.attrs & CODEC_MASK;
        if (!(b.attrs & CONTROL_BIT) && !checked_codec(codec)) {
            unchecked = 1; /* the Python check decompresses and scans it */
        } else if (!(b.attrs & CONTROL_BIT)) {
            int stamped = (b.attrs & TIMESTAMP_TYPE_BIT) != 0;
            /* Kafka refuses a producer's LogAppendTime unless a CreateTime topic range-checks it */
            if (stamped && (log_append_time || b.max_ts == -1)) goto bad;
            scan_start(&scanner, b.count, stamped ? b.max_ts : b.base_ts, min_ts, max_allowed,
                       (int)flags | (stamped ? FIXED_TIMESTAMP : 0), 0);
            scanner.errors = NULL;
            if (scan_section(&scanner, codec, h + BATCH_OVERHEAD, b.size - BATCH_OVERHEAD,
                             snappy_limit) < 0 ||
                !scan_complete(&scanner) || scanner.error_count)
                goto bad;
            stale = scanner.max_ts != b.max_ts || stamped;
            b.max_ts = scanner.max_ts;
        }
        long long f[9] = {pos, b.size, b.lod, b.max_ts, b.count, b.attrs, b.pid, b.epoch, b.seq};
        PyObject *info = info_new(info_type, f, stale);
        if (!info) goto fail;
        int r = PyList_Append(out, info);
        Py_DECREF(info);
        if (r < 0) goto fail;
        pos += b.size;
    }
    PyBuffer_Release(&v);
    if (unchecked) {
        PyObject *t = PyList_AsTuple(out);
        Py_DECREF(out);
        return t;
    }
    return out;
bad:
    PyBuffer_Release(&v);
    Py_DECREF(out);
    Py_RETURN_NONE;
fail:
    PyBuffer_Release(&v);
    Py_XDECREF(out);
    return NULL;
}

static inline void put_be(unsigned char *p, uint64_t v, int n) {
    for (int i = n - 1; i >= 0; i--, v >>= 8) p[i] = (unsigned char)v;
}

static inline long long item_ll(PyObject *t, Py_ssize_t i) {
    return PyLong_AsLongLong(PyTuple_GET_ITEM(t, i));
}

/* patch(buf, infos, base_offset, leader_epoch, append_time): `records.patch_batches` in one call:
 * give each validated batch of `infos` (BatchInfo tuples over `buf`) its offsets and the leader
 * epoch in place; append_time >= 0 stamps LogAppendTime (type bit, maxTimestamp), otherwise a batch
 * whose header maxTimestamp is stale gets its records' (CreateTime); either rewrites the CRC.
 * Returns (batches, next_offset, top_ts, attributes or'ed, any producer id): batches as the
 * segment indexes them, (position, size, last offset, max timestamp) tuples. */
static PyObject *patch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "patch(buf, infos, base_offset, leader_epoch, append_time)");
        return NULL;
    }
    long long nxt = PyLong_AsLongLong(args[2]);
    if (nxt == -1 && PyErr_Occurred()) return NULL;
    long epoch = PyLong_AsLong(args[3]);
    if (epoch == -1 && PyErr_Occurred()) return NULL;
    long long append_time = PyLong_AsLongLong(args[4]);
    if (append_time == -1 && PyErr_Occurred()) return NULL;
    PyObject *infos = args[1];
    Py_ssize_t n = PyList_GET_SIZE(infos);
    Py_buffer v;
    if (PyObject_GetBuffer(args[0], &v, PyBUF_WRITABLE) < 0) return NULL;
    unsigned char *buf = (unsigned char *)v.buf;
    PyObject *batches = PyList_New(n);
    if (!batches) goto fail;
    long long top_ts = -1, attrs_or = 0;
    int producers = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *info = PyList_GET_ITEM(infos, i);
        if (!PyTuple_Check(info) || PyTuple_GET_SIZE(info) < 10) {
            PyErr_SetString(PyExc_TypeError, "patch: infos must be BatchInfo tuples");
            goto fail;
        }
        long long pos = item_ll(info, 0), size = item_ll(info, 1), lod = item_ll(info, 2);
        long long max_ts = item_ll(info, 3), attrs = item_ll(info, 5), pid = item_ll(info, 6);
        if (PyErr_Occurred()) goto fail;
        int stale = PyObject_IsTrue(PyTuple_GET_ITEM(info, 9));
        if (stale < 0) goto fail;
        if (pos < 0 || size < BATCH_OVERHEAD || pos + size > v.len) {
            PyErr_SetString(PyExc_ValueError, "patch: a batch lies outside the buffer");
            goto fail;
        }
        unsigned char *h = buf + pos;
        put_be(h, (uint64_t)nxt, 8);
        put_be(h + 12, (uint64_t)(uint32_t)epoch, 4);
        if (append_time >= 0 || stale) {
            uint16_t a = (uint16_t)be(h + 21, 2);
            if (append_time >= 0) {
                a |= TIMESTAMP_TYPE_BIT;
                max_ts = append_time;
            } else {
                a &= (uint16_t)~TIMESTAMP_TYPE_BIT;
            }
            put_be(h + 21, a, 2);
            put_be(h + 35, (uint64_t)max_ts, 8);
            put_be(h + 17, crc32c(h + 21, (size_t)(size - 21)), 4);
        }
        long long last = nxt + lod;
        PyObject *b = PyTuple_New(4);
        if (!b) goto fail;
        PyList_SET_ITEM(batches, i, b);
        long long f[4] = {pos, size, last, max_ts};
        for (int j = 0; j < 4; j++) {
            PyObject *x = PyLong_FromLongLong(f[j]);
            if (!x) goto fail;
            PyTuple_SET_ITEM(b, j, x);
        }
        if (max_ts > top_ts) top_ts = max_ts;
        attrs_or |= attrs;
        producers |= pid >= 0;
        nxt = last + 1;
    }
    PyBuffer_Release(&v);
    PyObject *out = PyTuple_New(5);
    if (!out) goto done;
    PyTuple_SET_ITEM(out, 0, batches);
    batches = NULL;
    long long g[3] = {nxt, top_ts, attrs_or};
    for (int j = 0; j < 3; j++) {
        PyObject *x = PyLong_FromLongLong(g[j]);
        if (!x) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, j + 1, x);
    }
    PyObject *p = producers ? Py_True : Py_False;
    Py_INCREF(p);
    PyTuple_SET_ITEM(out, 4, p);
    return out;
done:
    Py_XDECREF(batches);
    return NULL;
fail:
    PyBuffer_Release(&v);
    Py_XDECREF(batches);
    return NULL;
}

/* commit_plain(buf, position, end, max_batch_size, now, before_max_ms, after_max_ms,
 * keys_required, log_append_time, base_offset, leader_epoch, info_type): the in-place commit's
 * common case in one call (`PartitionLog.commit_written`'s fast path): the batches at
 * [position, end) of the writable `buf` (a head file's mapping) checked as `validate_client`
 * checks a client's batches (headers, CRC, every record against the bounds
 * `records._record_bounds` derives from now and the topic's timestamp limits, keys on a
 * compacted topic), and when every one is a plain data batch without a producer id, patched as
 * `patch` patches them (offsets from base_offset, the leader epoch; LogAppendTime stamped with
 * `now` when log_append_time, else a stale maxTimestamp set to the records'). Returns (batches,
 * next offset, top timestamp) with the batches as the segment indexes them ((position -
 * `position`, size, last offset, max timestamp) tuples). When some carry a producer id (an
 * idempotent producer's), nothing is written and the list of their `info_type` (BatchInfo) is
 * returned, as `validate_client` gives it: the general path checks their sequences and commits
 * them. None, nothing written, for everything else (a bad batch, a compressed, control or
 * transactional one): the general path takes those, and names the errors.
 * write_ends (optional, None: one write): a run of consecutive writes committed together, as
 * the ends of its writes relative to `position` (ascending, the last at end - position): each
 * write must hold whole batches (None when a batch crosses a write's end or a write holds none),
 * and the answer gets a fourth item, the number of offsets each write took. */
#define COMMIT_PLAIN_KEPT 64

static PyObject *commit_plain(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 12 || nargs > 13 || !PyType_Check(args[11]) ||
        !PyType_IsSubtype((PyTypeObject *)args[11], &PyTuple_Type) ||
        (nargs == 13 && args[12] != Py_None && !PyList_Check(args[12]))) {
        PyErr_SetString(PyExc_TypeError,
                        "commit_plain(buf, position, end, max_batch_size, now, before_max_ms, "
                        "after_max_ms, keys_required, log_append_time, base_offset, leader_epoch, "
                        "info_type, write_ends=None)");
        return NULL;
    }
    /* a run's write ends, absolute; 0 of them: one write */
    long long ends[COMMIT_PLAIN_KEPT];
    Py_ssize_t n_ends = 0;
    if (nargs == 13 && args[12] != Py_None) {
        n_ends = PyList_GET_SIZE(args[12]);
        if (n_ends < 1 || n_ends > COMMIT_PLAIN_KEPT) Py_RETURN_NONE;
        for (Py_ssize_t w = 0; w < n_ends; w++) {
            ends[w] = PyLong_AsLongLong(PyList_GET_ITEM(args[12], w));
            if (ends[w] == -1 && PyErr_Occurred()) return NULL;
        }
    }
    long long a[11];
    for (int i = 1; i < 11; i++) {
        if (i == 7 || i == 8) continue;
        a[i] = PyLong_AsLongLong(args[i]);
        if (a[i] == -1 && PyErr_Occurred()) return NULL;
    }
    int keys_required = PyObject_IsTrue(args[7]), log_append_time = PyObject_IsTrue(args[8]);
    if (keys_required < 0 || log_append_time < 0) return NULL;
    long long position = a[1], end = a[2], max_size = a[3], now = a[4], nxt = a[9];
    long long low, high;
    if (__builtin_sub_overflow(now, a[5], &low)) low = LLONG_MIN; /* as _record_bounds clamps */
    if (__builtin_add_overflow(now, a[6], &high)) high = LLONG_MAX;
    int flags = keys_required ? KEYS_REQUIRED : 0;
    if (!log_append_time && (low > LLONG_MIN || high < LLONG_MAX)) flags |= CHECK_TIMESTAMPS;
    uint32_t epoch = (uint32_t)a[10];
    PyObject *batches = NULL, *counts = NULL;
    int64_t maxes[COMMIT_PLAIN_KEPT]; /* the first batches' records' max timestamps */
    Py_buffer v;
    if (PyObject_GetBuffer(args[0], &v, PyBUF_WRITABLE) < 0) return NULL;
    if (position < 0 || position >= end || end > v.len) goto general;
    if (n_ends && ends[n_ends - 1] != end - position) goto general;
    for (Py_ssize_t w = 0; w < n_ends; w++) ends[w] += position;
    unsigned char *buf = (unsigned char *)v.buf;
    Py_ssize_t w = 0; /* the write the batch at pos belongs to */
    /* First pass: check every batch (nothing is written unless all pass). */
    long long pos = position, n = 0;
    int producers = 0;
    RecordScan scanner;
    while (pos < end) {
        const unsigned char *h = buf + pos;
        Header hd; /* a client's batch, as validate_client checks its header */
        if (check_header(h, (Py_ssize_t)(end - pos), (Py_ssize_t)max_size, 1, 0, &hd) < 0)
            goto general;
        long long size = hd.size;
        /* the general path's cases: compressed, transactional or control */
        if (hd.attrs & (CODEC_MASK | TRANSACTIONAL_BIT | CONTROL_BIT)) goto general;
        producers |= hd.pid >= 0; /* a producer id: its sequence is the general path's */
        int stamped = (hd.attrs & TIMESTAMP_TYPE_BIT) != 0;
        if (stamped && (log_append_time || hd.max_ts == -1)) goto general;
        scan_start(&scanner, hd.count, stamped ? hd.max_ts : hd.base_ts, low, high,
                   flags | (stamped ? FIXED_TIMESTAMP : 0), 0);
        scanner.errors = NULL;
        if (scan(&scanner, h + BATCH_OVERHEAD, h + size) < 0) {
            PyErr_Clear();
            goto general;
        }
        if (!scan_complete(&scanner) || scanner.error_count) goto general;
        if (n < COMMIT_PLAIN_KEPT) maxes[n] = scanner.max_ts;
        pos += size;
        n++;
        if (n_ends) { /* the batch must end inside its write, a write's last at its end */
            if (pos > ends[w]) goto general;
            if (pos == ends[w]) w++;
        }
    }
    if (w != n_ends) goto general; /* a write that held no batch */
    if (producers) { /* checked, not written: the infos validate_client gives */
        if (n > COMMIT_PLAIN_KEPT) goto general;
        PyTypeObject *info_type = (PyTypeObject *)args[11];
        batches = PyList_New(n);
        if (!batches) goto fail;
        pos = position;
        for (Py_ssize_t i = 0; i < n; i++) {
            const unsigned char *h = buf + pos;
            long long size = (long long)(int32_t)be(h + 8, 4) + LOG_OVERHEAD;
            int16_t attrs = (int16_t)be(h + 21, 2);
            int64_t max_ts = (int64_t)be(h + 35, 8);
            long long f[9] = {pos - position, size, (int32_t)be(h + 23, 4), maxes[i],
                              (int32_t)be(h + 57, 4), attrs, (int64_t)be(h + 43, 8),
                              (int16_t)be(h + 51, 2), (int32_t)be(h + 53, 4)};
            PyObject *info =
                info_new(info_type, f, maxes[i] != max_ts || (attrs & TIMESTAMP_TYPE_BIT));
            if (!info) goto fail;
            PyList_SET_ITEM(batches, i, info);
            pos += size;
        }
        PyBuffer_Release(&v);
        return batches;
    }
    /* Second pass: patch, as `patch` does. */
    batches = PyList_New(n);
    if (!batches) goto fail;
    if (n_ends && !(counts = PyList_New(n_ends))) goto fail;
    long long top_ts = -1, write_base = nxt;
    pos = position;
    w = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char *h = buf + pos;
        long long size = (long long)(int32_t)be(h + 8, 4) + LOG_OVERHEAD;
        uint16_t attrs = (uint16_t)be(h + 21, 2);
        int32_t lod = (int32_t)be(h + 23, 4), count = (int32_t)be(h + 57, 4);
        int64_t base_ts = (int64_t)be(h + 27, 8), max_ts = (int64_t)be(h + 35, 8);
        int stamped = (attrs & TIMESTAMP_TYPE_BIT) != 0;
        int64_t records_max = max_ts;
        if (i < COMMIT_PLAIN_KEPT) {
            records_max = maxes[i];
        } else { /* scanned again: bytes just read, in cache (no heap list of them) */
            scan_start(&scanner, count, stamped ? max_ts : base_ts, low, high,
                       flags | (stamped ? FIXED_TIMESTAMP : 0), 0);
            scanner.errors = NULL;
            scan(&scanner, h + BATCH_OVERHEAD, h + size); /* passed above */
            records_max = scanner.max_ts;
        }
        put_be(h, (uint64_t)nxt, 8);
        put_be(h + 12, epoch, 4);
        if (log_append_time || records_max != max_ts || stamped) {
            if (log_append_time) {
                attrs |= TIMESTAMP_TYPE_BIT;
                records_max = now;
            } else {
                attrs &= (uint16_t)~TIMESTAMP_TYPE_BIT;
            }
            put_be(h + 21, attrs, 2);
            put_be(h + 35, (uint64_t)records_max, 8);
            put_be(h + 17, crc32c(h + 21, (size_t)(size - 21)), 4);
        }
        long long last = nxt + lod;
        PyObject *b = Py_BuildValue("(LLLL)", pos - position, size, last, (long long)records_max);
        if (!b) goto fail;
        PyList_SET_ITEM(batches, i, b);
        if (records_max > top_ts) top_ts = records_max;
        nxt = last + 1;
        pos += size;
        if (n_ends && pos == ends[w]) { /* checked above: every write ends on a batch's end */
            PyObject *c = PyLong_FromLongLong(nxt - write_base);
            if (!c) goto fail;
            PyList_SET_ITEM(counts, w++, c);
            write_base = nxt;
        }
    }
    PyBuffer_Release(&v);
    if (n_ends) return Py_BuildValue("(NLLN)", batches, nxt, top_ts, counts);
    return Py_BuildValue("(NLL)", batches, nxt, top_ts);
general:
    PyBuffer_Release(&v);
    Py_RETURN_NONE;
fail:
    PyBuffer_Release(&v);
    Py_XDECREF(batches);
    Py_XDECREF(counts);
    return NULL;
}

/* crc32c(buf) -> int: the CRC-32C of crc32c.h that `validate` and the native client use, exposed so
 * tests can check it against the crc32c package and bench/crc32c_speed.py can time it */
static PyObject *crc32c_of(PyObject *self, PyObject *arg) {
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t c = crc32c((const unsigned char *)v.buf, (size_t)v.len);
    PyBuffer_Release(&v);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef methods[] = {
    {"crc32c", crc32c_of, METH_O,
     "crc32c(buf) -> int: the C extensions' CRC-32C (crc32c.h), for tests and bench/crc32c_speed.py"},
    {"validate", (PyCFunction)(void (*)(void))validate, METH_FASTCALL,
     "validate(buf, max_batch_size (-1: none), from_client, allow_control, info_type) -> list of "
     "info_type, or None when a batch is not valid (records.validate_batches says why)"},
    {"validate_client", (PyCFunction)(void (*)(void))validate_client, METH_FASTCALL,
     "validate_client(buf, max_batch_size, allow_control, info_type, min_ts, max_ts, flags, "
     "log_append_time) -> validate's infos with the record checks of batches of CHECKED_CODECS made "
     "(a list; a tuple when batches of other codecs are left to check), None when a check fails"},
    {"patch", (PyCFunction)(void (*)(void))patch, METH_FASTCALL,
     "patch(buf, infos, base_offset, leader_epoch, append_time) -> (batches, next_offset, top_ts, "
     "attributes, producers): offsets, epoch and timestamps of validated batches set in place"},
    {"commit_plain", (PyCFunction)(void (*)(void))commit_plain, METH_FASTCALL,
     "commit_plain(buf, position, end, max_batch_size, now, before_max_ms, after_max_ms, "
     "keys_required, log_append_time, base_offset, leader_epoch, info_type, write_ends=None) -> "
     "(batches, next_offset, top_ts[, offsets per write]): plain client batches checked and "
     "patched in place; their infos when some have a producer id; None for the general path"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_records",
                                    "record batch checks of the store's append path", -1, methods};

PyMODINIT_FUNC PyInit__records(void) {
    crc_init();
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    PyObject *list = PyList_New(0), *codecs = NULL;
    for (int c = 0; list && c <= MAX_CODEC; c++) {
        PyObject *x = checked_codec(c) ? PyLong_FromLong(c) : NULL;
        if (x && PyList_Append(list, x) < 0) Py_CLEAR(list);
        Py_XDECREF(x);
    }
    if (list) codecs = PyList_AsTuple(list);
    Py_XDECREF(list);
    /* the codecs whose records validate_client checks (records._C_CHECKED) */
    if (!codecs || PyModule_AddObject(m, "CHECKED_CODECS", codecs) < 0) {
        Py_XDECREF(codecs);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
