/* A v2 record's fields, for the native consumer's decoders (_batch.c, _lazy_records.c): a cursor
 * over bytes, its varints, a length-prefixed byte string and a record's headers as Python objects.
 * Malformed input raises ValueError; nothing is read outside the cursor's range. */
#ifndef RDMALOG_RECORD_FIELDS_H
#define RDMALOG_RECORD_FIELDS_H

#include <Python.h>
#include <stdint.h>

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
static inline PyObject *field(cursor *c) {
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

static inline PyObject *headers(cursor *c) {
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

#endif
