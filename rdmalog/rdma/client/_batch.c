/* The native consumer's hot loop: the records of one uncompressed v2 record batch, decoded in C.
 *
 * decode_plain(buf, pos, size, base_offset, base_ts, max_ts, log_append, count, min_offset,
 *              topic, partition, record_type, out, limit) appends record_type(topic, partition,
 *              offset, timestamp, key, value, headers, timestamp_type) to the list `out` for every
 *              record whose offset is >= min_offset, at most `limit` of them (a poll's max_records).  `record_type` is a tuple subclass with exactly eight fields (the
 *              consumer's NamedTuple); rdmalog/rdma/client/consumer.py holds the same logic in Python.
 * headers is a tuple of (str, bytes | None) pairs.  Records hold only strings, numbers, bytes and such
 * tuples, so they are kept off the cyclic garbage collector's lists: a poll of thousands of records
 * otherwise triggers collections that traverse every one of them (40% of decoding time measured).
 * Malformed records raise ValueError; nothing is read outside [pos, pos + size).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define BATCH_OVERHEAD 61

typedef struct {
    const unsigned char *p, *end;
} cursor;

static inline int varint(cursor *c, int64_t *out) {
    uint64_t r = 0;
    int shift = 0;
    while (c->p < c->end) {
        unsigned char b = *c->p++;
        r |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = (int64_t)(r >> 1) ^ -(int64_t)(r & 1);
            return 0;
        }
        shift += 7;
        if (shift > 63) break;
    }
    PyErr_SetString(PyExc_ValueError, "bad varint in record");
    return -1;
}

/* A length-prefixed byte string: new bytes, Py_None for length -1, NULL on error. */
static PyObject *field(cursor *c) {
    int64_t n;
    if (varint(c, &n) < 0) return NULL;
    if (n < 0) Py_RETURN_NONE;
    if (n > c->end - c->p) {
        PyErr_SetString(PyExc_ValueError, "record field extends past its record");
        return NULL;
    }
    PyObject *b = PyBytes_FromStringAndSize((const char *)c->p, (Py_ssize_t)n);
    c->p += n;
    return b;
}

static PyObject *headers(cursor *c) {
    int64_t n;
    if (varint(c, &n) < 0) return NULL;
    if (n < 0 || n > c->end - c->p) {
        PyErr_SetString(PyExc_ValueError, "bad header count");
        return NULL;
    }
    if (n == 0) return PyTuple_New(0); /* the shared empty tuple */
    PyObject *list = PyTuple_New(n);
    for (int64_t i = 0; list && i < n; i++) {
        int64_t kn;
        if (varint(c, &kn) < 0 || kn < -1 || kn > c->end - c->p) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad header key");
            Py_CLEAR(list);
            break;
        }
        PyObject *key = kn < 0 ? PyUnicode_FromString("")
                               : PyUnicode_DecodeUTF8((const char *)c->p, kn, "replace");
        if (kn > 0) c->p += kn;
        PyObject *val = key ? field(c) : NULL;
        PyObject *pair = val ? PyTuple_Pack(2, key, val) : NULL;
        Py_XDECREF(key);
        Py_XDECREF(val);
        if (!pair) {
            Py_CLEAR(list);
            break;
        }
        PyObject_GC_UnTrack(pair); /* a str and bytes: never part of a cycle */
        PyTuple_SET_ITEM(list, i, pair);
    }
    if (list) PyObject_GC_UnTrack(list);
    return list;
}

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
    PyTypeObject *tp = (PyTypeObject *)rtype;
    if (!PyType_Check(rtype) || !PyType_IsSubtype(tp, &PyTuple_Type)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "record_type must be a tuple subclass");
        return NULL;
    }
    if (pos < 0 || size < BATCH_OVERHEAD || pos + size > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "batch outside the buffer");
        return NULL;
    }
    const unsigned char *start = (const unsigned char *)view.buf;
    cursor c = {start + pos + BATCH_OVERHEAD, start + pos + size};
    int ok = 1;
    PyObject *last_ts = NULL; /* the previous record's timestamp object, reused while it repeats */
    long long last_ts_value = 0;
    for (int i = 0; ok && i < count && limit > 0; i++) {
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
        if (PyList_Append(out, rec) < 0) ok = 0;
        Py_DECREF(rec);
        limit--;
    }
    Py_XDECREF(last_ts);
    PyBuffer_Release(&view);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode_plain", decode_plain, METH_VARARGS,
     "decode_plain(buf, pos, size, base_offset, base_ts, max_ts, log_append, count, min_offset, "
     "topic, partition, record_type, out, limit): append the batch's records (at most limit) to out"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_batch",
                                    "decode an uncompressed v2 record batch", -1, methods};

PyMODINIT_FUNC PyInit__batch(void) { return PyModule_Create(&module); }
