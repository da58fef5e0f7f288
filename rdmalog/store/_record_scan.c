/* Record-level checks of one v2 record batch, as Kafka's LogValidator makes them, fed the batch's
 * records section in any number of pieces: a plain batch in one piece, a compressed one chunk by
 * chunk as it decompresses, so validation never holds more than one chunk of decompressed records
 * whatever the batch decompresses to.
 *
 * RecordScan(count, base_timestamp, min_timestamp, max_timestamp, flags, max_errors)
 *   flags: CHECK_TIMESTAMPS (1): record timestamps other than -1 must lie in
 *          [min_timestamp, max_timestamp]; KEYS_REQUIRED (2): a null key is an error (compacted
 *          topics); FIXED_TIMESTAMP (4): every record's timestamp is base_timestamp (a batch
 *          stamped LogAppendTime).
 *   feed(buffer): parse the next bytes. Every record is parsed to its end (length, attributes,
 *          timestamp delta, offset delta, key, value, headers) and must end where its length says;
 *          offset deltas must run 0..count-1. ValueError (naming the record) when they do not.
 *   finish() -> (max_timestamp, error_count, errors): ValueError unless exactly `count` records
 *          ended where the data did. max_timestamp is the largest record timestamp (-1 for none);
 *          errors lists (record index, kind, timestamp) of records failing a check, kind 1 = null
 *          key, 2 = timestamp out of range (the key is checked first, as Kafka does), at most
 *          max_errors of them; error_count counts them all.
 * Nothing is read outside the buffers given; no record field is copied.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "record_scan.h"

static int RecordScan_init(RecordScan *s, PyObject *args, PyObject *kwds) {
    if (!PyArg_ParseTuple(args, "LLLLin", &s->count, &s->base_ts, &s->min_ts, &s->max_ts_allowed,
                          &s->flags, &s->max_errors))
        return -1;
    scan_start(s, s->count, s->base_ts, s->min_ts, s->max_ts_allowed, s->flags, s->max_errors);
    Py_XSETREF(s->errors, PyList_New(0));
    return s->errors ? 0 : -1;
}

static void RecordScan_dealloc(RecordScan *s) {
    Py_XDECREF(s->errors);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *RecordScan_feed(RecordScan *s, PyObject *arg) {
    Py_buffer view;
    if (!s->errors) {
        PyErr_SetString(PyExc_RuntimeError, "RecordScan not initialised");
        return NULL;
    }
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *p = view.buf;
    int rc = scan(s, p, p + view.len);
    PyBuffer_Release(&view);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *RecordScan_finish(RecordScan *s, PyObject *unused) {
    if (!s->errors) {
        PyErr_SetString(PyExc_RuntimeError, "RecordScan not initialised");
        return NULL;
    }
    if (s->state != S_LENGTH || s->vshift != 0) {
        fail(s, "truncated");
        return NULL;
    }
    if (s->index != s->count)
        return PyErr_Format(PyExc_ValueError, "the batch holds %lld records, its count says %lld",
                            (long long)s->index, (long long)s->count);
    return Py_BuildValue("(LLO)", (long long)s->max_ts, (long long)s->error_count, s->errors);
}

static PyMethodDef RecordScan_methods[] = {
    {"feed", (PyCFunction)RecordScan_feed, METH_O, "Parse the next bytes of the records section."},
    {"finish", (PyCFunction)RecordScan_finish, METH_NOARGS,
     "(max_timestamp, error_count, errors) once every record has been fed."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RecordScanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rdmalog.store._record_scan.RecordScan",
    .tp_basicsize = sizeof(RecordScan),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Record-level checks of one v2 batch, fed its records section in pieces.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)RecordScan_init,
    .tp_dealloc = (destructor)RecordScan_dealloc,
    .tp_methods = RecordScan_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record_scan",
                                    "Record-level checks of v2 record batches.", -1, NULL};

PyMODINIT_FUNC PyInit__record_scan(void) {
    if (PyType_Ready(&RecordScanType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&RecordScanType);
    if (PyModule_AddObject(m, "RecordScan", (PyObject *)&RecordScanType) < 0) {
        Py_DECREF(&RecordScanType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "CHECK_TIMESTAMPS", CHECK_TIMESTAMPS);
    PyModule_AddIntConstant(m, "KEYS_REQUIRED", KEYS_REQUIRED);
    PyModule_AddIntConstant(m, "FIXED_TIMESTAMP", FIXED_TIMESTAMP);
    return m;
}
