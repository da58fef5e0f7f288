/* The native consumer's hot loop in C: the whole uncompressed v2 record batches of a READ,
 * decoded into records.
 *
 * take(buf, pos, end, offset, room, topic, partition, record_type, out) walks the batches of
 *              buf[pos:end] as the consumer's _take does and stops at the first one it does not
 *              finish (see take()); decode_plain(buf, pos, size, base_offset, base_ts, max_ts,
 *              log_append, count, min_offset, topic, partition, record_type, out, limit) decodes
 *              one batch whose header the caller read. Both append record_type(topic, partition,
 *              offset, timestamp, key, value, headers, timestamp_type) to the list `out` for every
 *              record whose offset is >= the minimum, at most the limit (a poll's max_records).
 * `record_type` is a tuple subclass with exactly eight fields (the consumer's NamedTuple);
 * rdmalog/rdma/client/consumer.py holds the same logic in Python.
 * headers is a tuple of (str, bytes | None) pairs.  Records hold only strings, numbers, bytes and such
 * tuples, so they are kept off the cyclic garbage collector's lists: a poll of thousands of records
 * otherwise triggers collections that traverse every one of them (40% of decoding time measured).
 * Malformed records raise ValueError; nothing is read outside the range given.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../../store/crc32c.h" /* crc32c(), crc_init(): the batch CRC */
#include "../transport/_atomic64_api.h" /* read_take's checked copy */
#include "_record_fields.h"                /* cursor, varint, field, headers */
#include "_lazy_records.h"                 /* read_take's records */

#define BATCH_OVERHEAD 61

/* An 8-item instance of the record type, its items unset: made only once nothing else can fail.
 * Never GC-tracked (tp_alloc would track it, to be untracked at once) - up to 3.13, whose tuples
 * have no other field; 3.14's cache their hash, which tp_alloc initialises. */
static PyObject *new_record(PyTypeObject *tp) {
#if PY_VERSION_HEX < 0x030E0000
    return (PyObject *)PyObject_GC_NewVar(PyTupleObject, tp, 8);
#else
    PyObject *rec = tp->tp_alloc(tp, 8);
    if (rec) PyObject_GC_UnTrack(rec);
    return rec;
#endif
}

/* Append the records of one uncompressed batch's record section [c->p, c->end) to `out`: those
 * with offsets >= min_offset, at most `limit`. Returns how many were appended, -1 with an
 * exception set (records appended before the fault stay in `out`: the caller drops them). */
static Py_ssize_t decode_records(cursor c, long long base, long long base_ts, long long max_ts,
                                 int log_append, long count, long long min_offset,
                                 Py_ssize_t limit, PyObject *topic, PyObject *partition,
                                 PyTypeObject *tp, PyObject *out, long long *last) {
    Py_ssize_t appended = 0;
    int ok = 1;
    PyObject *last_ts = NULL; /* the previous record's timestamp object, reused while it repeats */
    long long last_ts_value = 0;
    for (long i = 0; i < count && appended < limit; i++) {
        int64_t len, ts_delta, off_delta;
        if (varint(&c, &len) < 0) { ok = 0; break; }
        if (len < 1 || len > c.end - c.p) {
            PyErr_SetString(PyExc_ValueError, "record extends past its batch");
            ok = 0;
            break;
        }
        cursor r = {c.p + 1, c.p + len}; /* skip the attributes byte */
        c.p += len;
        if (varint(&r, &ts_delta) < 0 || varint(&r, &off_delta) < 0) { ok = 0; break; }
        long long off = base + off_delta;
        PyObject *key = field(&r);
        PyObject *value = key ? field(&r) : NULL;
        PyObject *hdrs = value ? headers(&r) : NULL;
        if (hdrs && r.p != r.end) {
            PyErr_SetString(PyExc_ValueError, "record length does not match its fields");
            Py_CLEAR(hdrs);
        }
        if (!hdrs) {
            Py_XDECREF(key);
            Py_XDECREF(value);
            ok = 0;
            break;
        }
        if (off < min_offset) {
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(hdrs);
            continue;
        }
        PyObject *o = PyLong_FromLongLong(off);
        long long ts_value = log_append ? max_ts : base_ts + ts_delta;
        if (last_ts == NULL || ts_value != last_ts_value) { /* a batch's records mostly share one */
            Py_XDECREF(last_ts);
            last_ts = PyLong_FromLongLong(ts_value);
            last_ts_value = ts_value;
        }
        PyObject *ts = last_ts;
        Py_XINCREF(ts);
        PyObject *rec = o && ts ? new_record(tp) : NULL;
        if (!rec) {
            Py_XDECREF(o);
            Py_XDECREF(ts);
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(hdrs);
            ok = 0;
            break;
        }
        Py_INCREF(topic);
        Py_INCREF(partition);
        PyTuple_SET_ITEM(rec, 0, topic);
        PyTuple_SET_ITEM(rec, 1, partition);
        PyTuple_SET_ITEM(rec, 2, o);
        PyTuple_SET_ITEM(rec, 3, ts);
        PyTuple_SET_ITEM(rec, 4, key);
        PyTuple_SET_ITEM(rec, 5, value);
        PyTuple_SET_ITEM(rec, 6, hdrs);
        PyTuple_SET_ITEM(rec, 7, PyLong_FromLong(log_append ? 1 : 0)); /* small int: cached */
        int failed = PyList_Append(out, rec) < 0;
        Py_DECREF(rec);
        if (failed) { ok = 0; break; }
        *last = off;
        appended++;
    }
    Py_XDECREF(last_ts);
    return ok ? appended : -1;
}

static int record_type_ok(PyObject *rtype) {
    if (!PyType_Check(rtype) || !PyType_IsSubtype((PyTypeObject *)rtype, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "record_type must be a tuple subclass");
        return 0;
    }
    return 1;
}

static PyObject *decode_plain(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, size;
    long long base, base_ts, max_ts, min_offset;
    int log_append, count;
    Py_ssize_t limit;
    PyObject *topic, *partition, *rtype, *out;
    if (!PyArg_ParseTuple(args, "y*nnLLLpiLOOOO!n", &view, &pos, &size, &base, &base_ts, &max_ts,
                          &log_append, &count, &min_offset, &topic, &partition, &rtype,
                          &PyList_Type, &out, &limit))
        return NULL;
    if (!record_type_ok(rtype)) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (pos < 0 || size < BATCH_OVERHEAD || pos + size > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "batch outside the buffer");
        return NULL;
    }
    const unsigned char *start = (const unsigned char *)view.buf;
    cursor c = {start + pos + BATCH_OVERHEAD, start + pos + size};
    long long last;
    Py_ssize_t n = decode_records(c, base, base_ts, max_ts, log_append, count, min_offset, limit,
                                  topic, partition, (PyTypeObject *)rtype, out, &last);
    PyBuffer_Release(&view);
    if (n < 0) return NULL;
    Py_RETURN_NONE;
}

static inline uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t be64(const unsigned char *p) {
    return (uint64_t)be32(p) << 32 | be32(p + 4);
}

/* The v2 batch header fields take reads (Kafka's RecordBatch layout). */
#define LENGTH_AT 8
#define ATTRIBUTES_AT 21
#define LAST_DELTA_AT 23
#define BASE_TS_AT 27
#define MAX_TS_AT 35
#define COUNT_AT 57
#define CODEC_MASK 0x07
#define TIMESTAMP_TYPE_BIT 0x08
#define CONTROL_BIT 0x20

/* take(buf, pos, end, offset, room, topic, partition, record_type, out) -> (pos, offset, room)
 *
 * The native consumer's _take for the common case, in one call: walks the whole batches of
 * buf[pos:end], skips those below `offset`, decodes uncompressed data batches into `out` (records
 * at offsets >= `offset`, at most `room`), and returns where it stopped, the next offset to
 * return and the room left. It stops, leaving the rest to the caller's Python loop (which does
 * the same and more), at the first batch it does not finish: a partial one, one past the room,
 * an impossible length, a compressed or control batch, or records that do not decode (those of
 * that batch are taken back out of `out`, and the caller's decode raises again). */
/* take()'s walk over buf[pos:end]: returns where it stopped (-1 with an exception set), with
 * *offset and *room updated. With a chunk (read_take), lazy records over it instead of tuples. */
static Py_ssize_t walk(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t end, long long *offset,
                       Py_ssize_t *room, PyObject *topic, PyObject *partition, PyTypeObject *tp,
                       PyObject *out, Chunk *chunk) {
    while (end - pos >= BATCH_OVERHEAD && *room > 0) {
        const unsigned char *h = buf + pos;
        long long size = (long long)(int32_t)be32(h + LENGTH_AT) + 12;
        if (size < BATCH_OVERHEAD || size > end - pos) break;
        long long base = (long long)be64(h);
        long long last = base + (int32_t)be32(h + LAST_DELTA_AT);
        if (last >= *offset) {
            int attributes = (int)(int16_t)((uint16_t)h[ATTRIBUTES_AT] << 8 | h[ATTRIBUTES_AT + 1]);
            if (attributes & (CODEC_MASK | CONTROL_BIT)) break;
            Py_ssize_t before = PyList_GET_SIZE(out);
            cursor c = {h + BATCH_OVERHEAD, h + size};
            long long got = last, base_ts = (long long)be64(h + BASE_TS_AT);
            long long max_ts = (long long)be64(h + MAX_TS_AT);
            int log_append = (attributes & TIMESTAMP_TYPE_BIT) != 0;
            long count = (long)(int32_t)be32(h + COUNT_AT);
            Py_ssize_t n =
                chunk ? decode_lazy(c, base, base_ts, max_ts, log_append, count, *offset, *room,
                                    topic, partition, chunk, out, &got)
                      : decode_records(c, base, base_ts, max_ts, log_append, count, *offset,
                                       *room, topic, partition, tp, out, &got);
            if (n < 0) { /* this batch's records come out again; malformed ones are the
                            caller's to report (its decode raises the same), others propagate */
                PyObject *type, *value, *tb;
                PyErr_Fetch(&type, &value, &tb);
                int malformed = PyErr_GivenExceptionMatches(type, PyExc_ValueError);
                if (PyList_SetSlice(out, before, PyList_GET_SIZE(out), NULL) < 0 || !malformed) {
                    if (!PyErr_Occurred()) {
                        PyErr_Restore(type, value, tb);
                    } else {
                        Py_XDECREF(type);
                        Py_XDECREF(value);
                        Py_XDECREF(tb);
                    }
                    return -1;
                }
                Py_XDECREF(type);
                Py_XDECREF(value);
                Py_XDECREF(tb);
                break;
            }
            *room -= n;
            if (*room <= 0 && n > 0) {
                if (got < last) { /* the batch's other records: the next poll */
                    *offset = got + 1;
                    break;
                }
            }
            *offset = last + 1;
        }
        pos += size;
    }
    return pos;
}

static int record_args_ok(PyObject *rtype, PyObject *out) {
    if (!record_type_ok(rtype)) return 0;
    if (!PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "out must be a list");
        return 0;
    }
    return 1;
}

static PyObject *take(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError,
                        "take(buf, pos, end, offset, room, topic, partition, record_type, out)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]), end = PyLong_AsSsize_t(args[2]);
    long long offset = PyLong_AsLongLong(args[3]);
    Py_ssize_t room = PyLong_AsSsize_t(args[4]);
    if (PyErr_Occurred()) return NULL;
    if (!record_args_ok(args[7], args[8])) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    if (pos < 0 || end < pos || end > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "range outside the buffer");
        return NULL;
    }
    pos = walk((const unsigned char *)view.buf, pos, end, &offset, &room, args[5], args[6],
               (PyTypeObject *)args[7], args[8], NULL);
    PyBuffer_Release(&view);
    if (pos < 0) return NULL;
    return Py_BuildValue("(nLn)", pos, offset, room);
}

/* -- one READ and its records: the shm consumer's fetch in one call -------------------------- */

static checked_copy_fn *copy_api; /* _atomic64's checked copy (NULL: read_take is unavailable) */

/* read_take(plan, dst, fetch_size, pos, lrb, head, have, offset, room, topic, partition,
 *           record_type, out, chunk) -> (pos, head, have, offset, room, more, chunk) | int | None
 *
 * The consumer's _fetch and _take for a shm READ of a region read before, in one call. `plan` is
 * the queue pair's read_plan(): (table, entry_off, rkey, src, qp_num, remote_off of the file's
 * byte 0). READs min(max(fetch_size, what a kept partial batch still needs), lrb - pos) bytes
 * behind the kept bytes dst[head : head + have] (moved to the front first when there is no room
 * behind them), then walks the whole batches as take() does, into lazy records
 * (_lazy_records.c) over a new chunk of dst. The previous READ's chunk (or None) is detached
 * first: dst is written only after that. Returns the new state; `more` is
 * True when whole batches are left at dst[head:] that take() did not finish (the caller's _take
 * goes on from there). None: nothing was done (the buffer must grow); an int: the READ failed
 * after the kept bytes were moved to the front (the int is their new head): the caller's general
 * path tells why. The chunk returned (None when no record was made) is the next call's. */
static PyObject *read_take(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 14) {
        PyErr_SetString(PyExc_TypeError, "read_take(plan, dst, fetch_size, pos, lrb, head, have, "
                                         "offset, room, topic, partition, record_type, out, chunk)");
        return NULL;
    }
    if (args[13] != Py_None) {
        if (!PyObject_TypeCheck(args[13], &ChunkType)) {
            PyErr_SetString(PyExc_TypeError, "read_take: chunk must be a Chunk or None");
            return NULL;
        }
        if (chunk_detach((Chunk *)args[13]) < 0) return NULL;
    }
    if (copy_api == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "read_take: _atomic64's checked copy is not loaded");
        return NULL;
    }
    PyObject *plan = args[0];
    if (!PyTuple_Check(plan) || PyTuple_GET_SIZE(plan) != 6) {
        PyErr_SetString(PyExc_TypeError, "plan: (table, entry_off, rkey, src, qp_num, remote_off)");
        return NULL;
    }
    Py_ssize_t eoff = PyLong_AsSsize_t(PyTuple_GET_ITEM(plan, 1));
    unsigned long long rkey = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(plan, 2));
    unsigned long long qp = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(plan, 4));
    Py_ssize_t roff0 = PyLong_AsSsize_t(PyTuple_GET_ITEM(plan, 5));
    Py_ssize_t fetch = PyLong_AsSsize_t(args[2]);
    long long pos = PyLong_AsLongLong(args[3]), lrb = PyLong_AsLongLong(args[4]);
    Py_ssize_t head = PyLong_AsSsize_t(args[5]), have = PyLong_AsSsize_t(args[6]);
    long long offset = PyLong_AsLongLong(args[7]);
    Py_ssize_t room = PyLong_AsSsize_t(args[8]);
    if (PyErr_Occurred()) return NULL;
    if (!record_args_ok(args[11], args[12])) return NULL;
    Py_buffer v[3]; /* table, src, dst */
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(plan, 0), &v[0], PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(plan, 3), &v[1], PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&v[0]);
        return NULL;
    }
    if (PyObject_GetBuffer(args[1], &v[2], PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&v[0]);
        PyBuffer_Release(&v[1]);
        return NULL;
    }
    unsigned char *dst = (unsigned char *)v[2].buf;
    Py_ssize_t dlen = v[2].len;
    PyObject *result = NULL;
    if (head < 0 || have < 0 || head + have > dlen || pos < 0 || lrb < pos || fetch < 1) {
        PyErr_SetString(PyExc_ValueError, "read_take: state outside the buffer");
        goto done;
    }
    long long want = fetch;
    if (have >= 12) { /* the kept partial batch says how much it still needs */
        long long need = (long long)(int32_t)be32(dst + head + LENGTH_AT) + 12 - have;
        if (need > want) want = need;
    }
    long long n = lrb - pos < want ? lrb - pos : want;
    if (have + n > dlen) {
        result = Py_NewRef(Py_None); /* the buffer must grow: the caller's general path */
        goto done;
    }
    if (head + have + n > dlen) { /* no room behind the kept bytes: move them first */
        memmove(dst, dst + head, (size_t)have);
        head = 0;
    }
    if (!(*copy_api)((const char *)v[0].buf, v[0].len, eoff, rkey, (char *)dst, dlen, head + have,
                     (const char *)v[1].buf, v[1].len, roff0 + pos, n, qp, roff0 + pos)) {
        result = PyLong_FromSsize_t(head);
        goto done;
    }
    pos += n;
    have += n;
    Py_ssize_t end = head + have;
    Chunk *chunk = chunk_new(args[1], head, args[11]);
    if (!chunk) goto done;
    Py_ssize_t before = PyList_GET_SIZE(args[12]);
    Py_ssize_t p = walk(dst, head, end, &offset, &room, args[9], args[10],
                        (PyTypeObject *)args[11], args[12], chunk);
    if (p < 0) {
        Py_DECREF(chunk);
        goto done;
    }
    chunk->hi = p;
    PyObject *made = (PyObject *)chunk;
    if (PyList_GET_SIZE(args[12]) == before) { /* no record: nothing to keep */
        Py_DECREF(chunk);
        made = Py_NewRef(Py_None);
    }
    int more = 0;
    if (end - p >= BATCH_OVERHEAD) { /* a whole batch left there: the caller's _take decides */
        long long size = (long long)(int32_t)be32(dst + p + LENGTH_AT) + 12;
        more = size <= end - p;
    }
    Py_ssize_t new_head = more || p < end ? p : 0;
    result = Py_BuildValue("(LnnLnON)", pos, new_head, end - p, offset, room,
                           more ? Py_True : Py_False, made);
done:
    for (int i = 0; i < 3; i++) PyBuffer_Release(&v[i]);
    return result;
}

/* -- encoding: the native producer's batches of uncompressed records -------------------------- */

static inline uint64_t zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

static inline Py_ssize_t varint_len(int64_t v) {
    uint64_t z = zigzag(v);
    Py_ssize_t n = 1;
    while (z >= 0x80) {
        z >>= 7;
        n++;
    }
    return n;
}

static inline unsigned char *put_varint(unsigned char *p, int64_t v) {
    uint64_t z = zigzag(v);
    while (z >= 0x80) {
        *p++ = (unsigned char)(z | 0x80);
        z >>= 7;
    }
    *p++ = (unsigned char)z;
    return p;
}

static inline unsigned char *put_be(unsigned char *p, uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; i--) *p++ = (unsigned char)(v >> (8 * i));
    return p;
}

/* A key, value or header field: bytes-like, str (UTF-8) or None (length -1). */
typedef struct {
    const char *p;
    Py_ssize_t n;
    Py_buffer view;
    int has_view;
} field_t;

static int get_field(PyObject *o, field_t *f) {
    f->has_view = 0;
    f->p = NULL;
    f->n = -1;
    if (o == Py_None) return 0;
    if (PyUnicode_Check(o)) {
        f->p = PyUnicode_AsUTF8AndSize(o, &f->n);
        return f->p ? 0 : -1;
    }
    if (PyObject_GetBuffer(o, &f->view, PyBUF_SIMPLE) < 0) return -1;
    f->has_view = 1;
    f->p = (const char *)f->view.buf;
    f->n = f->view.len;
    return 0;
}

static Py_ssize_t field_len(const field_t *f) { return varint_len(f->n) + (f->n > 0 ? f->n : 0); }

static unsigned char *put_field(unsigned char *p, const field_t *f) {
    p = put_varint(p, f->n);
    if (f->n > 0) {
        memcpy(p, f->p, (size_t)f->n);
        p += f->n;
    }
    return p;
}

static PyObject *str_key, *str_value, *str_headers, *str_timestamp; /* a Record's fields */

typedef struct {
    field_t key, value;
    Py_ssize_t first_header, nheaders, body;
    long long ts;
} rec_t;

/* encode_plain(records, now_ms) -> bytearray: records.build_batch(records, now_ms=now_ms) for
 * uncompressed batches, in C: Records (key, value, headers, timestamp: None is now_ms) or
 * (key, value) pairs; base offset 0, CreateTime, no producer id, and the batch's CRC-32C. */
static PyObject *encode_plain(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "encode_plain(records, now_ms)");
        return NULL;
    }
    long long now = PyLong_AsLongLong(args[1]);
    if (now == -1 && PyErr_Occurred()) return NULL;
    PyObject *seq = PySequence_Fast(args[0], "records must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n == 0) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "a batch needs at least one record");
        return NULL;
    }
    rec_t *recs = PyMem_Calloc((size_t)n, sizeof(rec_t));
    field_t *hdrs = NULL;
    Py_ssize_t nh = 0, hcap = 0, got = 0, size = BATCH_OVERHEAD;
    PyObject *held = PyList_New(0); /* the header lists and pairs, alive while their fields are */
    PyObject *result = NULL;
    long long base_ts = 0, max_ts = 0;
    if (!recs || !held) goto done;
    for (; got < n; got++) {
        PyObject *item = PySequence_Fast_ITEMS(seq)[got];
        rec_t *r = &recs[got];
        PyObject *key, *value, *headers = NULL, *ts = NULL;
        r->key.has_view = r->value.has_view = 0;
        if ((PyTuple_Check(item) || PyList_Check(item)) && PySequence_Fast_GET_SIZE(item) == 2) {
            key = Py_NewRef(PySequence_Fast_ITEMS(item)[0]);
            value = Py_NewRef(PySequence_Fast_ITEMS(item)[1]);
        } else {
            key = PyObject_GetAttr(item, str_key);
            value = key ? PyObject_GetAttr(item, str_value) : NULL;
            headers = value ? PyObject_GetAttr(item, str_headers) : NULL;
            ts = headers ? PyObject_GetAttr(item, str_timestamp) : NULL;
            if (!ts) {
                Py_XDECREF(key);
                Py_XDECREF(value);
                Py_XDECREF(headers);
                goto done;
            }
        }
        int bad = PyList_Append(held, key) < 0 || PyList_Append(held, value) < 0 ||
                  get_field(key, &r->key) < 0 || get_field(value, &r->value) < 0;
        Py_DECREF(key);
        Py_DECREF(value);
        r->ts = now;
        if (!bad && ts && ts != Py_None) {
            r->ts = PyLong_AsLongLong(ts);
            bad = r->ts == -1 && PyErr_Occurred();
        }
        Py_XDECREF(ts);
        r->first_header = nh;
        PyObject *hseq = NULL;
        if (!bad && headers && headers != Py_None) {
            hseq = PySequence_Fast(headers, "headers must be a sequence of (key, value) pairs");
            bad = !hseq || PyList_Append(held, hseq) < 0;
        }
        Py_XDECREF(headers);
        if (bad) {
            Py_XDECREF(hseq);
            got++; /* its fields (if any) are released below */
            goto done;
        }
        Py_ssize_t h = hseq ? PySequence_Fast_GET_SIZE(hseq) : 0;
        if (nh + 2 * h > hcap) {
            Py_ssize_t cap = 2 * (nh + 2 * h) + 8;
            field_t *grown = PyMem_Realloc(hdrs, (size_t)cap * sizeof(field_t));
            if (!grown) {
                Py_XDECREF(hseq);
                PyErr_NoMemory();
                got++;
                goto done;
            }
            hdrs = grown;
            hcap = cap;
        }
        Py_ssize_t body = 1 + field_len(&r->key) + field_len(&r->value) + varint_len(h);
        for (Py_ssize_t i = 0; i < h; i++) {
            PyObject *pair = PySequence_Fast_ITEMS(hseq)[i];
            if (!(PyTuple_Check(pair) || PyList_Check(pair)) || PySequence_Fast_GET_SIZE(pair) != 2) {
                PyErr_SetString(PyExc_TypeError, "a header is a (key, value) pair");
                bad = 1;
            } else if (get_field(PySequence_Fast_ITEMS(pair)[0], &hdrs[nh]) < 0) {
                bad = 1;
            } else if (get_field(PySequence_Fast_ITEMS(pair)[1], &hdrs[nh + 1]) < 0) {
                if (hdrs[nh].has_view) PyBuffer_Release(&hdrs[nh].view);
                bad = 1;
            }
            if (bad) break;
            body += field_len(&hdrs[nh]) + field_len(&hdrs[nh + 1]);
            nh += 2;
        }
        Py_XDECREF(hseq); /* `held` keeps it alive */
        r->nheaders = (nh - r->first_header) / 2;
        if (bad) {
            got++;
            goto done;
        }
        if (got == 0) base_ts = max_ts = r->ts;
        if (r->ts > max_ts) max_ts = r->ts;
        r->body = body; /* without the offset and timestamp deltas: base_ts is known only now */
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        rec_t *r = &recs[i];
        r->body += varint_len(r->ts - base_ts) + varint_len(i);
        size += varint_len(r->body) + r->body;
    }
    if (size > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "batch too large");
        goto done;
    }
    result = PyByteArray_FromStringAndSize(NULL, size);
    if (!result) goto done;
    unsigned char *out = (unsigned char *)PyByteArray_AS_STRING(result), *p = out;
    p = put_be(p, 0, 8);                        /* base offset */
    p = put_be(p, (uint64_t)(size - 12), 4);    /* batch length */
    p = put_be(p, (uint64_t)-1, 4);             /* partition leader epoch */
    *p++ = 2;                                   /* magic */
    p = put_be(p, 0, 4);                        /* CRC, below */
    p = put_be(p, 0, 2);                        /* attributes */
    p = put_be(p, (uint64_t)(n - 1), 4);        /* last offset delta */
    p = put_be(p, (uint64_t)base_ts, 8);
    p = put_be(p, (uint64_t)max_ts, 8);
    p = put_be(p, (uint64_t)-1, 8);             /* producer id */
    p = put_be(p, (uint64_t)-1, 2);             /* producer epoch */
    p = put_be(p, (uint64_t)-1, 4);             /* base sequence */
    p = put_be(p, (uint64_t)n, 4);              /* record count */
    for (Py_ssize_t i = 0; i < n; i++) {
        rec_t *r = &recs[i];
        p = put_varint(p, r->body);
        *p++ = 0; /* record attributes */
        p = put_varint(p, r->ts - base_ts);
        p = put_varint(p, i);
        p = put_field(p, &r->key);
        p = put_field(p, &r->value);
        p = put_varint(p, r->nheaders);
        for (Py_ssize_t k = 0; k < 2 * r->nheaders; k++) p = put_field(p, &hdrs[r->first_header + k]);
    }
    put_be(out + 17, crc32c(out + 21, (size_t)(size - 21)), 4);
done:
    for (Py_ssize_t i = 0; recs && i < got; i++) {
        if (recs[i].key.has_view) PyBuffer_Release(&recs[i].key.view);
        if (recs[i].value.has_view) PyBuffer_Release(&recs[i].value.view);
    }
    for (Py_ssize_t i = 0; i < nh; i++)
        if (hdrs[i].has_view) PyBuffer_Release(&hdrs[i].view);
    PyMem_Free(hdrs);
    PyMem_Free(recs);
    Py_XDECREF(held);
    Py_DECREF(seq);
    return result;
}

static PyMethodDef methods[] = {
    {"take", (PyCFunction)(void (*)(void))take, METH_FASTCALL,
     "take(buf, pos, end, offset, room, topic, partition, record_type, out) -> (pos, offset, "
     "room): decode the whole uncompressed batches of buf[pos:end] into out"},
    {"read_take", (PyCFunction)(void (*)(void))read_take, METH_FASTCALL,
     "read_take(plan, dst, fetch_size, pos, lrb, head, have, offset, room, topic, partition, "
     "record_type, out): a shm READ and its whole batches' records, in one call"},
    {"encode_plain", (PyCFunction)(void (*)(void))encode_plain, METH_FASTCALL,
     "encode_plain(records, now_ms) -> bytearray: build_batch of uncompressed records, in C"},
    {"decode_plain", decode_plain, METH_VARARGS,
     "decode_plain(buf, pos, size, base_offset, base_ts, max_ts, log_append, count, min_offset, "
     "topic, partition, record_type, out, limit): append the batch's records (at most limit) to out"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_batch",
                                    "decode an uncompressed v2 record batch", -1, methods};

PyMODINIT_FUNC PyInit__batch(void) {
    crc_init();
    str_key = PyUnicode_InternFromString("key");
    str_value = PyUnicode_InternFromString("value");
    str_headers = PyUnicode_InternFromString("headers");
    str_timestamp = PyUnicode_InternFromString("timestamp");
    if (!str_key || !str_value || !str_headers || !str_timestamp) return NULL;
    /* read_take's copy; without it (a build without _atomic64) read_take raises */
    PyObject *atomic64 = PyImport_ImportModule("rdmalog.rdma.transport._atomic64"); /* first:
        PyCapsule_Import reaches it by attribute from the package, which imports it lazily */
    copy_api = atomic64 ? (checked_copy_fn *)PyCapsule_Import(ATOMIC64_CAPSULE, 0) : NULL;
    Py_XDECREF(atomic64);
    if (!copy_api) PyErr_Clear();
    PyObject *m = PyModule_Create(&module);
    if (m && lazy_records_init(m) < 0) Py_CLEAR(m);
    return m;
}
