/* What _atomic64 exports to other extensions in a capsule: the checked copy of a shm READ or
 * WRITE (copy_checked's work on raw memory). Import it with
 *     checked_copy_fn *f = PyCapsule_Import(ATOMIC64_CAPSULE, 0);
 * and call (*f)(...) with the GIL held. */
#ifndef RDMALOG_ATOMIC64_API_H
#define RDMALOG_ATOMIC64_API_H

#include <Python.h>
#include <stdint.h>

#define ATOMIC64_CAPSULE "rdmalog.rdma.transport._atomic64._copy_checked"

/* (table, table_len, entry_off, rkey, dst, dst_len, dst_off, src, src_len, src_off, n, qp,
 * remote_off) -> 1 copied, 0 a check failed or the copy faulted (no exception set) */
typedef int (*checked_copy_fn)(const char *, Py_ssize_t, Py_ssize_t, uint64_t, char *, Py_ssize_t,
                               Py_ssize_t, const char *, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                               uint64_t, Py_ssize_t);

#endif
