/* The native consumer's lazy records: what a shm poll returns for uncompressed batches.
 *
 * A LazyRecord is a ConsumerRecord (the same eight fields, read by name, index, iteration or
 * unpacking; equal to and hashing as the tuple of them) whose key, value, headers and numbers are
 * made when first asked for, from the batch bytes in the consumer's read buffer: a poll makes one
 * small object per record and copies nothing per record. The bytes are shared through a Chunk
 * (one per READ): before the consumer reads into that buffer again, it detaches the chunk, which
 * copies the range out (one copy for the whole READ) if any of its records is alive and has not
 * made its key, value and headers yet, and releases the buffer. So records stay valid and immutable for as long as they are held, and an
 * application that keeps one keeps its READ's bytes (up to the fetch size) until it lets go.
 * Records and chunks hold only strings, ints, bytes and tuples of them: never in a cycle, so they
 * stay off the cyclic garbage collector's lists.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_lazy_records.h"

/* The record NamedTuple (ConsumerRecord) lazy records pickle and copy as: the last chunk's. */
static PyObject *record_type;

/* -- Chunk ------------------------------------------------------------------------------------- */

static void chunk_dealloc(Chunk *c) {
    if (c->attached) PyBuffer_Release(&c->view);
    Py_XDECREF(c->mem);
    PyObject_Free(c);
}

Chunk *chunk_new(PyObject *buf, Py_ssize_t lo, PyObject *rtype) {
    Chunk *c = PyObject_New(Chunk, &ChunkType);
    if (!c) return NULL;
    c->mem = NULL;
    c->attached = 0;
    c->live = 0;
    c->lo = c->hi = lo;
    if (record_type != rtype) Py_XSETREF(record_type, Py_NewRef(rtype));
    if (PyObject_GetBuffer(buf, &c->view, PyBUF_SIMPLE) < 0) {
        Py_DECREF(c);
        return NULL;
    }
    c->attached = 1;
    c->base = (const unsigned char *)c->view.buf + lo;
    return c;
}

int chunk_detach(Chunk *c) {
    if (!c->attached) return 0;
    if (c->live > 0) { /* records that may still read it: copy their bytes out */
        PyObject *mem = PyBytes_FromStringAndSize((const char *)c->base, c->hi - c->lo);
        if (!mem) return -1;
        c->mem = mem;
        c->base = (const unsigned char *)PyBytes_AS_STRING(mem);
    } else {
        c->base = NULL; /* no record left to read it */
    }
    PyBuffer_Release(&c->view);
    c->attached = 0;
    return 0;
}

static PyObject *chunk_detach_py(Chunk *c, PyObject *unused) {
    if (chunk_detach(c) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef chunk_methods[] = {
    {"detach", (PyCFunction)chunk_detach_py, METH_NOARGS,
     "detach(): copy the records' bytes out of the read buffer (if any record is alive) and "
     "release it; call before reading into that buffer again"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject ChunkType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rdmalog.rdma.client._batch.Chunk",
    .tp_basicsize = sizeof(Chunk),
    .tp_dealloc = (destructor)chunk_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "the bytes of one READ's batches, shared by their lazy records",
    .tp_methods = chunk_methods,
};

/* -- LazyRecord -------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Chunk *chunk; /* NULL once key, value and headers are made */
    PyObject *topic, *partition;
    long long offset, timestamp;
    Py_ssize_t key_at, key_len, value_at, value_len, headers_at, headers_end; /* from chunk->base;
                                                                    a length of -1 is None */
    int timestamp_type;
    PyObject *key, *value, *headers; /* made on first access */
} LazyRecord;

static void record_dealloc(LazyRecord *r) {
    if (r->chunk != NULL) {
        r->chunk->live--;
        Py_DECREF(r->chunk);
    }
    Py_DECREF(r->topic);
    Py_DECREF(r->partition);
    Py_XDECREF(r->key);
    Py_XDECREF(r->value);
    Py_XDECREF(r->headers);
    PyObject_Free(r);
}

static int make_bytes(LazyRecord *r, PyObject **cache, Py_ssize_t at, Py_ssize_t len) {
    if (*cache == NULL)
        *cache = len < 0 ? Py_NewRef(Py_None)
                         : PyBytes_FromStringAndSize((const char *)r->chunk->base + at, len);
    return *cache ? 0 : -1;
}

/* The first read of a key, value or headers makes all three and lets go of the chunk: records an
 * application has looked at before its next poll keep nothing of the read buffer, which is then
 * not copied out (chunk_detach). A record's key and headers are mostly None and (), which cost
 * no allocation. */
static int materialize(LazyRecord *r) {
    if (r->chunk == NULL) return 0;
    if (make_bytes(r, &r->key, r->key_at, r->key_len) < 0 ||
        make_bytes(r, &r->value, r->value_at, r->value_len) < 0)
        return -1;
    if (r->headers == NULL) { /* validated when the record was made */
        cursor c = {r->chunk->base + r->headers_at, r->chunk->base + r->headers_end};
        r->headers = headers(&c);
        if (r->headers == NULL) return -1;
    }
    r->chunk->live--;
    Py_CLEAR(r->chunk);
    return 0;
}

static PyObject *get_topic(LazyRecord *r, void *x) { return Py_NewRef(r->topic); }
static PyObject *get_partition(LazyRecord *r, void *x) { return Py_NewRef(r->partition); }
static PyObject *get_offset(LazyRecord *r, void *x) { return PyLong_FromLongLong(r->offset); }
static PyObject *get_timestamp(LazyRecord *r, void *x) { return PyLong_FromLongLong(r->timestamp); }
static PyObject *get_key(LazyRecord *r, void *x) {
    return materialize(r) < 0 ? NULL : Py_NewRef(r->key);
}
static PyObject *get_value(LazyRecord *r, void *x) {
    return materialize(r) < 0 ? NULL : Py_NewRef(r->value);
}
static PyObject *get_timestamp_type(LazyRecord *r, void *x) {
    return PyLong_FromLong(r->timestamp_type);
}
static PyObject *get_headers(LazyRecord *r, void *x) {
    return materialize(r) < 0 ? NULL : Py_NewRef(r->headers);
}

typedef PyObject *(*getter_fn)(LazyRecord *, void *);
static const getter_fn FIELDS[8] = {get_topic,     get_partition, get_offset,
                                    get_timestamp, get_key,       get_value,
                                    get_headers,   get_timestamp_type};
#define NFIELDS 8

static PyObject *as_tuple(LazyRecord *r) {
    PyObject *t = PyTuple_New(NFIELDS);
    for (int i = 0; t && i < NFIELDS; i++) {
        PyObject *v = FIELDS[i](r, NULL);
        if (!v) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

static Py_ssize_t record_len(PyObject *r) { return NFIELDS; }

static PyObject *record_subscript(LazyRecord *r, PyObject *key) {
    if (PyLong_Check(key)) {
        Py_ssize_t i = PyLong_AsSsize_t(key);
        if (i == -1 && PyErr_Occurred()) return NULL;
        if (i < 0) i += NFIELDS;
        if (i < 0 || i >= NFIELDS) {
            PyErr_SetString(PyExc_IndexError, "ConsumerRecord index out of range");
            return NULL;
        }
        return FIELDS[i](r, NULL);
    }
    PyObject *t = as_tuple(r); /* slices */
    PyObject *v = t ? PyObject_GetItem(t, key) : NULL;
    Py_XDECREF(t);
    return v;
}

static PyObject *record_iter(LazyRecord *r) {
    PyObject *t = as_tuple(r);
    PyObject *it = t ? PyObject_GetIter(t) : NULL;
    Py_XDECREF(t);
    return it;
}

static PyObject *record_richcompare(PyObject *a, PyObject *b, int op) {
    PyObject *ta = PyObject_TypeCheck(a, &LazyRecordType) ? as_tuple((LazyRecord *)a) : Py_NewRef(a);
    PyObject *tb = PyObject_TypeCheck(b, &LazyRecordType) ? as_tuple((LazyRecord *)b) : Py_NewRef(b);
    PyObject *res = ta && tb ? PyObject_RichCompare(ta, tb, op) : NULL;
    Py_XDECREF(ta);
    Py_XDECREF(tb);
    return res;
}

static Py_hash_t record_hash(LazyRecord *r) {
    PyObject *t = as_tuple(r);
    Py_hash_t h = t ? PyObject_Hash(t) : -1;
    Py_XDECREF(t);
    return h;
}

static PyObject *record_repr(LazyRecord *r) {
    PyObject *t = as_tuple(r);
    if (!t) return NULL;
    PyObject *s = PyUnicode_FromFormat(
        "ConsumerRecord(topic=%R, partition=%R, offset=%R, timestamp=%R, key=%R, value=%R, "
        "headers=%R, timestamp_type=%R)",
        PyTuple_GET_ITEM(t, 0), PyTuple_GET_ITEM(t, 1), PyTuple_GET_ITEM(t, 2),
        PyTuple_GET_ITEM(t, 3), PyTuple_GET_ITEM(t, 4), PyTuple_GET_ITEM(t, 5),
        PyTuple_GET_ITEM(t, 6), PyTuple_GET_ITEM(t, 7));
    Py_DECREF(t);
    return s;
}

/* pickle and copy: the record NamedTuple the consumer declares (ConsumerRecord) */
static PyObject *record_reduce(LazyRecord *r, PyObject *unused) {
    PyObject *t = as_tuple(r);
    return t ? Py_BuildValue("(ON)", record_type, t) : NULL;
}

static PyObject *record_asdict(LazyRecord *r, PyObject *unused) {
    static const char *names[NFIELDS] = {"topic", "partition", "offset",  "timestamp",
                                         "key",   "value",     "headers", "timestamp_type"};
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < NFIELDS; i++) {
        PyObject *v = FIELDS[i](r, NULL);
        if (!v || PyDict_SetItemString(d, names[i], v) < 0) Py_CLEAR(d);
        Py_XDECREF(v);
    }
    return d;
}

static PyGetSetDef record_getset[] = {
    {"topic", (getter)get_topic, NULL, NULL, NULL},
    {"partition", (getter)get_partition, NULL, NULL, NULL},
    {"offset", (getter)get_offset, NULL, NULL, NULL},
    {"timestamp", (getter)get_timestamp, NULL, NULL, NULL},
    {"key", (getter)get_key, NULL, NULL, NULL},
    {"value", (getter)get_value, NULL, NULL, NULL},
    {"headers", (getter)get_headers, NULL, NULL, NULL},
    {"timestamp_type", (getter)get_timestamp_type, NULL, NULL, NULL},
    {NULL},
};

static PyMethodDef record_methods[] = {
    {"__reduce__", (PyCFunction)record_reduce, METH_NOARGS, NULL},
    {"_asdict", (PyCFunction)record_asdict, METH_NOARGS, "the fields as a dict"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods record_seq = {.sq_length = record_len};
static PyMappingMethods record_map = {.mp_length = record_len,
                                      .mp_subscript = (binaryfunc)record_subscript};

PyTypeObject LazyRecordType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rdmalog.rdma.client._batch.LazyRecord",
    .tp_basicsize = sizeof(LazyRecord),
    .tp_dealloc = (destructor)record_dealloc,
    .tp_repr = (reprfunc)record_repr,
    .tp_as_sequence = &record_seq,
    .tp_as_mapping = &record_map,
    .tp_hash = (hashfunc)record_hash,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "a ConsumerRecord whose fields are made from its batch's bytes when first read",
    .tp_richcompare = record_richcompare,
    .tp_iter = (getiterfunc)record_iter,
    .tp_methods = record_methods,
    .tp_getset = record_getset,
};

int lazy_records_init(PyObject *module) {
    if (PyType_Ready(&ChunkType) < 0 || PyType_Ready(&LazyRecordType) < 0) return -1;
    PyObject *fields = Py_BuildValue("(ssssssss)", "topic", "partition", "offset", "timestamp",
                                     "key", "value", "headers", "timestamp_type");
    if (!fields || PyDict_SetItemString(LazyRecordType.tp_dict, "_fields", fields) < 0) {
        Py_XDECREF(fields);
        return -1;
    }
    Py_DECREF(fields);
    PyType_Modified(&LazyRecordType);
    if (PyModule_AddObjectRef(module, "LazyRecord", (PyObject *)&LazyRecordType) < 0) return -1;
    return PyModule_AddObjectRef(module, "Chunk", (PyObject *)&ChunkType);
}

/* -- decoding ---------------------------------------------------------------------------------- */

/* Skip a length-prefixed field, checking it lies in the record: its start (relative to `base`)
 * and length (-1: null) in *at, *len. */
static int skip_field(cursor *c, const unsigned char *base, Py_ssize_t *at, Py_ssize_t *len) {
    int64_t n;
    if (varint(c, &n) < 0) return -1;
    *at = c->p - base;
    *len = n < 0 ? -1 : (Py_ssize_t)n;
    if (n < 0) return 0;
    if (n > c->end - c->p) {
        PyErr_SetString(PyExc_ValueError, "record field extends past its record");
        return -1;
    }
    c->p += n;
    return 0;
}

/* Check the headers as headers() reads them, making nothing. */
static int skip_headers(cursor *c) {
    int64_t n;
    if (varint(c, &n) < 0) return -1;
    if (n < 0 || n > c->end - c->p) {
        PyErr_SetString(PyExc_ValueError, "bad header count");
        return -1;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t kn;
        if (varint(c, &kn) < 0) return -1;
        if (kn < -1 || kn > c->end - c->p) {
            PyErr_SetString(PyExc_ValueError, "bad header key");
            return -1;
        }
        if (kn > 0) c->p += kn;
        Py_ssize_t at, len;
        if (skip_field(c, c->p, &at, &len) < 0) return -1;
    }
    return 0;
}

Py_ssize_t decode_lazy(cursor c, long long base, long long base_ts, long long max_ts,
                       int log_append, long count, long long min_offset, Py_ssize_t limit,
                       PyObject *topic, PyObject *partition, Chunk *chunk, PyObject *out,
                       long long *last) {
    const unsigned char *b0 = chunk->base;
    Py_ssize_t appended = 0;
    for (long i = 0; i < count && appended < limit; i++) {
        int64_t len, ts_delta, off_delta;
        if (varint(&c, &len) < 0) return -1;
        if (len < 1 || len > c.end - c.p) {
            PyErr_SetString(PyExc_ValueError, "record extends past its batch");
            return -1;
        }
        cursor r = {c.p + 1, c.p + len}; /* skip the attributes byte */
        c.p += len;
        if (varint(&r, &ts_delta) < 0 || varint(&r, &off_delta) < 0) return -1;
        Py_ssize_t key_at, key_len, value_at, value_len;
        if (skip_field(&r, b0, &key_at, &key_len) < 0 ||
            skip_field(&r, b0, &value_at, &value_len) < 0)
            return -1;
        Py_ssize_t headers_at = r.p - b0;
        if (skip_headers(&r) < 0) return -1;
        if (r.p != r.end) {
            PyErr_SetString(PyExc_ValueError, "record length does not match its fields");
            return -1;
        }
        long long off = base + off_delta;
        if (off < min_offset) continue;
        LazyRecord *rec = PyObject_New(LazyRecord, &LazyRecordType);
        if (!rec) return -1;
        rec->chunk = (Chunk *)Py_NewRef(chunk);
        chunk->live++;
        rec->topic = Py_NewRef(topic);
        rec->partition = Py_NewRef(partition);
        rec->offset = off;
        rec->timestamp = log_append ? max_ts : base_ts + ts_delta;
        rec->timestamp_type = log_append ? 1 : 0;
        rec->key_at = key_at;
        rec->key_len = key_len;
        rec->value_at = value_at;
        rec->value_len = value_len;
        rec->headers_at = headers_at;
        rec->headers_end = r.end - b0;
        rec->key = rec->value = rec->headers = NULL;
        int failed = PyList_Append(out, (PyObject *)rec) < 0;
        Py_DECREF(rec);
        if (failed) return -1;
        *last = off;
        appended++;
    }
    return appended;
}
