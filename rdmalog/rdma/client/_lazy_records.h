/* The native consumer's lazy records (_lazy_records.c): what _batch.c's read_take makes. */
#ifndef RDMALOG_LAZY_RECORDS_H
#define RDMALOG_LAZY_RECORDS_H

#include <Python.h>

#include "_record_fields.h"

/* The bytes of one read_take's whole batches in the consumer's read buffer, shared by their
 * records; detach() copies them out before that buffer is read into again. */
typedef struct {
    PyObject_HEAD
    const unsigned char *base; /* where offsets into the read buffer point: its memory, or mem's */
    Py_ssize_t lo, hi;         /* the range of the read buffer the records use */
    PyObject *mem;             /* detached: a bytes copy of [lo, hi) */
    Py_buffer view;            /* attached: the read buffer's export (keeps it mapped) */
    int attached;
    Py_ssize_t live; /* records that still read it (not yet made, not deallocated) */
} Chunk;

extern PyTypeObject ChunkType, LazyRecordType;

/* Types ready and added to the module; -1 with an exception set. */
int lazy_records_init(PyObject *module);
/* A chunk over buffer `buf` (exported until detached) whose records start at `lo`; `rtype` is
 * the record NamedTuple lazy records pickle and copy as. */
Chunk *chunk_new(PyObject *buf, Py_ssize_t lo, PyObject *rtype);
/* Copy the chunk's bytes out of the read buffer if records still use them; release the buffer. */
int chunk_detach(Chunk *c);
/* Append lazy records of one uncompressed batch's record section [c.p, c.end), as _batch.c's
 * decode_records does tuples: those at offsets >= min_offset, at most `limit`; returns how many
 * (and the last one's offset in *last), -1 with an exception set. */
Py_ssize_t decode_lazy(cursor c, long long base, long long base_ts, long long max_ts,
                       int log_append, long count, long long min_offset, Py_ssize_t limit,
                       PyObject *topic, PyObject *partition, Chunk *chunk, PyObject *out,
                       long long *last);

#endif
