/* 64-bit atomics on a uint64 inside any writable buffer (a shared file mapping).
 *
 * The shm transport executes REMOTE_ATOMIC verbs with these: two processes that map the same
 * file see one coherent word, as two RNIC clients do on a registered region.  Every call takes
 * (buffer, offset) rather than a raw address so bounds and alignment are checked here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <setjmp.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "_atomic64_api.h"

static uint64_t *word_at(Py_buffer *view, Py_ssize_t off) {
    if (off < 0 || off + 8 > view->len) {
        PyErr_SetString(PyExc_IndexError, "atomic word out of bounds");
        return NULL;
    }
    char *p = (char *)view->buf + off;
    if (((uintptr_t)p & 7) != 0) {
        PyErr_SetString(PyExc_ValueError, "atomic word not 8-byte aligned");
        return NULL;
    }
    return (uint64_t *)p;
}

/* The arguments of a METH_FASTCALL function (these run once or more per datapath operation, and
 * PyArg_ParseTuple's format parsing costs as much as the work): one letter per argument, as its
 * format units - 'w' writable buffer (Py_buffer *, released by the caller once this succeeded),
 * 'y' readable buffer, 'n' Py_ssize_t, 'K' unsigned long long and 'I' unsigned int (masked, as
 * "K" and "I"), 'O' an object (borrowed). On failure nothing is left acquired. */
static int parse(const char *name, PyObject *const *args, Py_ssize_t nargs, const char *spec, ...) {
    Py_ssize_t want = (Py_ssize_t)strlen(spec);
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, want, nargs);
        return 0;
    }
    Py_buffer *held[4];
    int nheld = 0, ok = 1;
    va_list ap;
    va_start(ap, spec);
    for (Py_ssize_t i = 0; ok && i < want; i++) {
        PyObject *o = args[i];
        switch (spec[i]) {
        case 'w':
        case 'y': {
            Py_buffer *b = va_arg(ap, Py_buffer *);
            ok = PyObject_GetBuffer(o, b, spec[i] == 'w' ? PyBUF_WRITABLE : PyBUF_SIMPLE) == 0;
            if (ok) held[nheld++] = b;
            break;
        }
        case 'n': {
            Py_ssize_t *v = va_arg(ap, Py_ssize_t *);
            *v = PyNumber_AsSsize_t(o, PyExc_OverflowError);
            ok = !(*v == -1 && PyErr_Occurred());
            break;
        }
        case 'K': {
            unsigned long long *v = va_arg(ap, unsigned long long *);
            ok = PyLong_Check(o);
            if (ok) *v = PyLong_AsUnsignedLongLongMask(o);
            else PyErr_Format(PyExc_TypeError, "%s(): an int is required", name);
            ok = ok && !(*v == (unsigned long long)-1 && PyErr_Occurred());
            break;
        }
        case 'I': {
            unsigned int *v = va_arg(ap, unsigned int *);
            ok = PyLong_Check(o);
            if (ok) *v = (unsigned int)PyLong_AsUnsignedLongMask(o);
            else PyErr_Format(PyExc_TypeError, "%s(): an int is required", name);
            ok = ok && !(*v == (unsigned int)-1 && PyErr_Occurred());
            break;
        }
        case 'O':
            *va_arg(ap, PyObject **) = o;
            break;
        }
    }
    va_end(ap);
    if (!ok)
        while (nheld) PyBuffer_Release(held[--nheld]);
    return ok;
}

static PyObject *fetch_add(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer view;
    Py_ssize_t off;
    unsigned long long add;
    if (!parse("fetch_add", args, nargs, "wnK", &view, &off, &add)) return NULL;
    uint64_t *w = word_at(&view, off);
    uint64_t old = 0;
    if (w) old = __atomic_fetch_add(w, (uint64_t)add, __ATOMIC_SEQ_CST);
    PyBuffer_Release(&view);
    return w ? PyLong_FromUnsignedLongLong(old) : NULL;
}

static PyObject *compare_swap(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer view;
    Py_ssize_t off;
    unsigned long long expected, desired;
    if (!parse("compare_swap", args, nargs, "wnKK", &view, &off, &expected, &desired))
        return NULL;
    uint64_t *w = word_at(&view, off);
    uint64_t cur = expected;
    if (w)  /* on failure cur receives the current value; on success it stays == expected */
        __atomic_compare_exchange_n(w, &cur, (uint64_t)desired, 0, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST);
    PyBuffer_Release(&view);
    return w ? PyLong_FromUnsignedLongLong(cur) : NULL;
}

static PyObject *load(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer view;
    Py_ssize_t off;
    if (!parse("load", args, nargs, "yn", &view, &off)) return NULL;
    uint64_t *w = word_at(&view, off);
    uint64_t v = w ? __atomic_load_n(w, __ATOMIC_ACQUIRE) : 0;
    PyBuffer_Release(&view);
    return w ? PyLong_FromUnsignedLongLong(v) : NULL;
}

static PyObject *store(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer view;
    Py_ssize_t off;
    unsigned long long v;
    if (!parse("store", args, nargs, "wnK", &view, &off, &v)) return NULL;
    uint64_t *w = word_at(&view, off);
    if (w) __atomic_store_n(w, (uint64_t)v, __ATOMIC_RELEASE);
    PyBuffer_Release(&view);
    if (!w) return NULL;
    Py_RETURN_NONE;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Spin (GIL released) until the word differs from `old` or `spin_ns` pass; returns the word.
 * Lets a poller wait for a ring tail without a syscall and without starving other threads. */
/* A memcpy that survives SIGBUS: a peer may truncate a mapped file (a segment trimmed when it is
 * sealed) while we copy into or out of it. Like an RNIC's protection fault, that access fails
 * (returns False) instead of killing the process. Signals that are not ours go to the previous
 * handler: we restore it and let the faulting instruction run again. */
static __thread sigjmp_buf copy_jmp;
static __thread volatile sig_atomic_t copy_active;
static struct sigaction prev_bus;
static int bus_installed;

static void on_bus(int sig, siginfo_t *si, void *uc) {
    (void)sig; (void)si; (void)uc;
    if (copy_active) {
        copy_active = 0;
        siglongjmp(copy_jmp, 1);
    }
    sigaction(SIGBUS, &prev_bus, NULL);
    bus_installed = 0;
}

static void install_bus(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_bus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;  /* NODEFER: leaving by longjmp keeps SIGBUS usable */
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &prev_bus) == 0) bus_installed = 1;
}

static int do_copy(char *d, const char *s, size_t n) {
    if (sigsetjmp(copy_jmp, 0) != 0) return 0;  /* savemask 0: no syscall per copy */
    copy_active = 1;
    memcpy(d, s, n);
    copy_active = 0;
    return 1;
}

static PyObject *guarded_copy(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer dst, src;
    Py_ssize_t doff, soff, n;
    if (!parse("copy", args, nargs, "wnynn", &dst, &doff, &src, &soff, &n)) return NULL;
    if (n < 0 || doff < 0 || soff < 0 || doff + n > dst.len || soff + n > src.len) {
        PyBuffer_Release(&dst);
        PyBuffer_Release(&src);
        PyErr_SetString(PyExc_IndexError, "copy out of bounds");
        return NULL;
    }
    if (!bus_installed) install_bus();
    int ok;
    char *d = (char *)dst.buf + doff;
    const char *s = (const char *)src.buf + soff;
    if (n >= 65536) {
        Py_BEGIN_ALLOW_THREADS
        ok = do_copy(d, s, (size_t)n);
        Py_END_ALLOW_THREADS
    } else {
        ok = do_copy(d, s, (size_t)n);
    }
    PyBuffer_Release(&dst);
    PyBuffer_Release(&src);
    return PyBool_FromLong(ok);
}

/* Buffer arguments of the METH_FASTCALL functions below; released by release_all. */
static int get_buffers(PyObject *const *objs, Py_buffer *views, const int *writable, int n) {
    for (int i = 0; i < n; i++) {
        if (PyObject_GetBuffer(objs[i], &views[i], writable[i] ? PyBUF_WRITABLE : PyBUF_SIMPLE) <
            0) {
            while (--i >= 0) PyBuffer_Release(&views[i]);
            return -1;
        }
    }
    return 0;
}

static void release_all(Py_buffer *views, int n) {
    for (int i = 0; i < n; i++) PyBuffer_Release(&views[i]);
}

/* sync_words(src, dst, start, end) -> bool: copy the 64-bit words in bytes [start, end) of a
 * shared mapping into dst at the same offsets, each an acquire load as the peer stores them;
 * True when any of them differed from what dst held. The native consumer's look at its metadata
 * slots: while it has read everything they showed, an empty poll is this one call. */
static PyObject *sync_words(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "sync_words(src, dst, start, end)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[2]), end = PyLong_AsSsize_t(args[3]);
    if ((start == -1 || end == -1) && PyErr_Occurred()) return NULL;
    Py_buffer v[2];
    static const int writable[2] = {0, 1};
    if (get_buffers(args, v, writable, 2) < 0) return NULL;
    const char *src = (const char *)v[0].buf;
    char *dst = (char *)v[1].buf;
    if (start < 0 || end < start || end > v[0].len || end > v[1].len || (start | end) & 7 ||
        ((uintptr_t)src & 7) || ((uintptr_t)dst & 7)) {
        release_all(v, 2);
        PyErr_SetString(PyExc_IndexError, "sync_words: range outside the buffers or unaligned");
        return NULL;
    }
    int changed = 0;
    for (Py_ssize_t off = start; off < end; off += 8) {
        uint64_t w = __atomic_load_n((const uint64_t *)(src + off), __ATOMIC_ACQUIRE);
        uint64_t *d = (uint64_t *)(dst + off);
        if (*d != w) {
            *d = w;
            changed = 1;
        }
    }
    release_all(v, 2);
    return PyBool_FromLong(changed);
}

/* Where a shm region table entry keeps a memory window's start, end and bound queue pair (0: a
 * region, any queue pair); see shm.py's entry layout. */
#define E_START 224
#define E_END 232
#define E_QP 240
#define MR_ENTRY 256

/* copy_checked(table, entry_off, rkey, dst, dst_off, src, src_off, n, qp, remote_off) -> bool:
 * a shm READ or WRITE of a peer region already mapped, in one call: the peer's region table
 * word at entry_off still holds rkey (acquire: a deregistered region fails as a revoked RNIC key
 * does), a window entry is bound to queue pair qp and holds [remote_off, remote_off + n), both
 * ranges lie in their buffers, and the copy did not fault. False for any of those; the caller's
 * general path tells them apart. */
/* The check and copy of copy_checked on raw memory: also what other extensions call through the
 * capsule `_copy_checked` (the native consumer's one-call READ, client/_batch.c). 1: copied, 0:
 * a check failed or the copy faulted. Takes the GIL as held (a large copy releases it). */
static int checked_copy(const char *table, Py_ssize_t table_len, Py_ssize_t eoff, uint64_t rkey,
                        char *dst, Py_ssize_t dst_len, Py_ssize_t doff, const char *src,
                        Py_ssize_t src_len, Py_ssize_t soff, Py_ssize_t n, uint64_t qp,
                        Py_ssize_t roff) {
    const uint64_t *w = eoff >= 0 && eoff + MR_ENTRY <= table_len &&
                                !(((uintptr_t)table + eoff) & 7)
                            ? (const uint64_t *)(table + eoff)
                            : NULL;
    int window_ok = 0;
    if (w && rkey && __atomic_load_n(w, __ATOMIC_ACQUIRE) == rkey) {
        uint64_t bound = __atomic_load_n(w + E_QP / 8, __ATOMIC_ACQUIRE);
        uint64_t lo = __atomic_load_n(w + E_START / 8, __ATOMIC_ACQUIRE);
        uint64_t hi = __atomic_load_n(w + E_END / 8, __ATOMIC_ACQUIRE);
        window_ok = bound == 0 || (bound == qp && roff >= 0 && n >= 0 && (uint64_t)roff >= lo &&
                                   (uint64_t)(roff + n) <= hi);
    }
    if (!(window_ok && n >= 0 && doff >= 0 && soff >= 0 && doff + n <= dst_len &&
          soff + n <= src_len))
        return 0;
    if (!bus_installed) install_bus();
    int ok;
    if (n >= 65536) { /* as copy(): a large copy lets other threads run */
        Py_BEGIN_ALLOW_THREADS
        ok = do_copy(dst + doff, src + soff, (size_t)n);
        Py_END_ALLOW_THREADS
    } else {
        ok = do_copy(dst + doff, src + soff, (size_t)n);
    }
    return ok;
}

static PyObject *copy_checked(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "copy_checked(table, entry_off, rkey, dst, dst_off, src, "
                                         "src_off, n, qp, remote_off)");
        return NULL;
    }
    Py_ssize_t eoff = PyLong_AsSsize_t(args[1]), doff = PyLong_AsSsize_t(args[4]);
    Py_ssize_t soff = PyLong_AsSsize_t(args[6]), n = PyLong_AsSsize_t(args[7]);
    Py_ssize_t roff = PyLong_AsSsize_t(args[9]);
    unsigned long long rkey = PyLong_AsUnsignedLongLong(args[2]);
    unsigned long long qp = PyLong_AsUnsignedLongLong(args[8]);
    if (PyErr_Occurred()) return NULL;
    PyObject *objs[3] = {args[0], args[3], args[5]};
    Py_buffer v[3];
    static const int writable[3] = {0, 1, 0};
    if (get_buffers(objs, v, writable, 3) < 0) return NULL;
    int ok = checked_copy((const char *)v[0].buf, v[0].len, eoff, rkey, (char *)v[1].buf, v[1].len,
                          doff, (const char *)v[2].buf, v[2].len, soff, n, qp, roff);
    release_all(v, 3);
    return PyBool_FromLong(ok);
}

/* The shm completion ring (shm.py's _Ring): a header of three words on separate cache lines
 * (reserve @0, head @64, waiting @128), then slots of `slot_size` bytes: seq u64, then kind,
 * qp_num, imm, byte_len (u32 each), then a SEND's payload. One call per push or pop instead of
 * five Python-level atomics and struct calls: the datapath does one of each per write. */
#define RING_HDR 256
#define SLOT_HDR 24

static int ring_ok(Py_buffer *v, Py_ssize_t nslots, Py_ssize_t slot_size) {
    if (nslots <= 0 || slot_size < SLOT_HDR || (slot_size & 7) || ((uintptr_t)v->buf & 7) ||
        RING_HDR + nslots * slot_size > v->len) {
        PyErr_SetString(PyExc_ValueError, "not a ring of that geometry");
        return 0;
    }
    return 1;
}

/* ring_push(buf, nslots, slot_size, kind, qp_num, imm, byte_len, payload) -> -1 when full,
 * else 1 if the owner announced it sleeps (ring its doorbell), 0 if not. Payload: bytes-like
 * (a SEND) or None; at most slot_size - 24 bytes. */
static PyObject *ring_push(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer v, pay = {0};
    Py_ssize_t nslots, slot_size;
    unsigned int kind, qpn, imm, blen;
    PyObject *payload;
    if (!parse("ring_push", args, nargs, "wnnIIIIO", &v, &nslots, &slot_size, &kind, &qpn, &imm,
               &blen, &payload))
        return NULL;
    if (!ring_ok(&v, nslots, slot_size)) goto fail;
    if (payload != Py_None) {
        if (PyObject_GetBuffer(payload, &pay, PyBUF_SIMPLE) < 0) goto fail;
        if (pay.len > slot_size - SLOT_HDR) {
            PyErr_SetString(PyExc_ValueError, "payload larger than a ring slot");
            PyBuffer_Release(&pay);
            goto fail;
        }
    }
    char *base = (char *)v.buf;
    uint64_t *reserve = (uint64_t *)base, *head = (uint64_t *)(base + 64);
    uint64_t *waiting = (uint64_t *)(base + 128);
    uint64_t s = __atomic_load_n(reserve, __ATOMIC_ACQUIRE);
    for (;;) {
        if (s - __atomic_load_n(head, __ATOMIC_ACQUIRE) >= (uint64_t)nslots) {
            if (pay.buf) PyBuffer_Release(&pay);
            PyBuffer_Release(&v);
            return PyLong_FromLong(-1);  /* full: the consumer is behind */
        }
        if (__atomic_compare_exchange_n(reserve, &s, s + 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            break;
    }
    char *slot = base + RING_HDR + (Py_ssize_t)(s % (uint64_t)nslots) * slot_size;
    uint32_t hdr[4] = {kind, qpn, imm, blen};
    memcpy(slot + 8, hdr, sizeof hdr);  /* little-endian hosts only, as the Python side ("<") */
    if (pay.buf) {
        memcpy(slot + SLOT_HDR, pay.buf, (size_t)pay.len);
        PyBuffer_Release(&pay);
    }
    __atomic_store_n((uint64_t *)slot, s + 1, __ATOMIC_RELEASE);  /* publish */
    /* An RMW is a full barrier between publishing and reading `waiting` (Dekker with wait()). */
    int bell = __atomic_fetch_add(waiting, 0, __ATOMIC_SEQ_CST) != 0;
    PyBuffer_Release(&v);
    return PyLong_FromLong(bell);
fail:
    PyBuffer_Release(&v);
    return NULL;
}

/* The (kind, qp_num, imm, byte_len, payload) tuple of a published slot (payload: bytes for a
 * SEND (kind 1), else None). */
static PyObject *slot_entry(const char *slot, Py_ssize_t slot_size) {
    uint32_t hdr[4];
    memcpy(hdr, slot + 8, sizeof hdr);
    PyObject *payload;
    if (hdr[0] == 1) {
        uint32_t n = hdr[3];
        if ((Py_ssize_t)n > slot_size - SLOT_HDR) n = (uint32_t)(slot_size - SLOT_HDR);
        payload = PyBytes_FromStringAndSize(slot + SLOT_HDR, n);
    } else {
        payload = Py_NewRef(Py_None);
    }
    if (!payload) return NULL;
    PyObject *r = PyTuple_New(5);
    if (!r) {
        Py_DECREF(payload);
        return NULL;
    }
    PyTuple_SET_ITEM(r, 4, payload);
    for (int i = 0; i < 4; i++) {
        PyObject *x = PyLong_FromUnsignedLong(hdr[i]);
        if (!x) {
            Py_DECREF(r);
            return NULL;
        }
        PyTuple_SET_ITEM(r, i, x);
    }
    return r;
}

/* Up to `max` published slots from `head` on, as a list of slot_entry tuples, the ring's head
 * advanced past them; with none published, None when nothing is claimed at `head`, False when it
 * is claimed but not yet published (a push under way, or its producer died mid-push). */
static PyObject *ring_entries(Py_buffer *v, Py_ssize_t nslots, Py_ssize_t slot_size, uint64_t h,
                              Py_ssize_t max) {
    char *base = (char *)v->buf;
    PyObject *out = NULL;
    uint64_t n = 0;
    while ((Py_ssize_t)n < max) {
        char *slot = base + RING_HDR + (Py_ssize_t)((h + n) % (uint64_t)nslots) * slot_size;
        if (__atomic_load_n((uint64_t *)slot, __ATOMIC_ACQUIRE) != h + n + 1) break;
        if (!out && !(out = PyList_New(0))) return NULL;
        PyObject *e = slot_entry(slot, slot_size);
        if (!e || PyList_Append(out, e) < 0) {
            Py_XDECREF(e);
            Py_DECREF(out); /* the slots stay: taken again by the next call */
            return NULL;
        }
        Py_DECREF(e);
        n++;
    }
    if (out) {
        __atomic_store_n((uint64_t *)(base + 64), h + n, __ATOMIC_RELEASE);
        return out;
    }
    if (__atomic_load_n((uint64_t *)base, __ATOMIC_ACQUIRE) != h) Py_RETURN_FALSE;
    Py_RETURN_NONE;
}

/* ring_pop(buf, nslots, slot_size, head) -> the entry at `head` once published (the ring's head
 * advanced), else None (nothing claimed there) or False (claimed, not yet published). */
static PyObject *ring_pop(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer v;
    Py_ssize_t nslots, slot_size;
    unsigned long long h;
    if (!parse("ring_pop", args, nargs, "wnnK", &v, &nslots, &slot_size, &h)) return NULL;
    PyObject *r = ring_ok(&v, nslots, slot_size) ? ring_entries(&v, nslots, slot_size, h, 1) : NULL;
    PyBuffer_Release(&v);
    if (r && PyList_Check(r)) {
        PyObject *e = Py_NewRef(PyList_GET_ITEM(r, 0));
        Py_DECREF(r);
        return e;
    }
    return r;
}

/* ring_take(buf, nslots, slot_size, head, max) -> a list of up to `max` published entries from
 * `head` on (the ring's head advanced past them), else None or False as ring_pop: a completion
 * poll in one call. */
static PyObject *ring_take(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer v;
    Py_ssize_t nslots, slot_size, max;
    unsigned long long h;
    if (!parse("ring_take", args, nargs, "wnnKn", &v, &nslots, &slot_size, &h, &max)) return NULL;
    PyObject *r = ring_ok(&v, nslots, slot_size) ? ring_entries(&v, nslots, slot_size, h, max) : NULL;
    PyBuffer_Release(&v);
    return r;
}

/* ring_wait(buf, nslots, slot_size, head, spin_ns) -> bool: spin without the GIL until the slot
 * at `head` is published (True) or spin_ns pass (False). What a completion wait does before it
 * sleeps on the doorbell: a peer's push is seen within a few hundred nanoseconds. Every 4th pause
 * it yields the core: when the peer it waits for runs on the same core (2 shared cores), each
 * hand-over waits for the spinner's next yield (measured: a produce took 3-5 us longer p50 with
 * a yield every 64 pauses, no difference when the two run on different cores). */
static PyObject *ring_wait(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer v;
    Py_ssize_t nslots, slot_size;
    unsigned long long h, spin_ns;
    if (!parse("ring_wait", args, nargs, "ynnKK", &v, &nslots, &slot_size, &h, &spin_ns))
        return NULL;
    if (!ring_ok(&v, nslots, slot_size)) {
        PyBuffer_Release(&v);
        return NULL;
    }
    uint64_t *w = (uint64_t *)((char *)v.buf + RING_HDR + (Py_ssize_t)(h % (uint64_t)nslots) * slot_size);
    int published = __atomic_load_n(w, __ATOMIC_ACQUIRE) == h + 1;
    if (!published && spin_ns) {
        Py_BEGIN_ALLOW_THREADS
        uint64_t deadline = now_ns() + spin_ns;
        unsigned n = 0;
        while (!(published = __atomic_load_n(w, __ATOMIC_ACQUIRE) == h + 1)) {
            __builtin_ia32_pause();
            if ((++n & 3) == 0) {
                if (now_ns() >= deadline) break;
                sched_yield(); /* on a busy host, let the peer we wait for have the core */
            }
        }
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&v);
    return PyBool_FromLong(published);
}

static PyMethodDef methods[] = {
    {"copy", (PyCFunction)(void (*)(void))guarded_copy, METH_FASTCALL,
     "copy(dst, dst_off, src, src_off, n) -> bool; False if the mapping faulted (SIGBUS)"},
    {"fetch_add", (PyCFunction)(void (*)(void))fetch_add, METH_FASTCALL, "fetch_add(buf, off, add) -> old value"},
    {"compare_swap", (PyCFunction)(void (*)(void))compare_swap, METH_FASTCALL,
     "compare_swap(buf, off, expected, desired) -> old value (swapped iff old == expected)"},
    {"load", (PyCFunction)(void (*)(void))load, METH_FASTCALL, "load(buf, off) -> value (acquire)"},
    {"store", (PyCFunction)(void (*)(void))store, METH_FASTCALL, "store(buf, off, value) (release)"},
    {"ring_push", (PyCFunction)(void (*)(void))ring_push, METH_FASTCALL,
     "ring_push(buf, nslots, slot_size, kind, qp_num, imm, byte_len, payload) -> -1 full, "
     "1 doorbell needed, 0 not"},
    {"sync_words", (PyCFunction)(void (*)(void))sync_words, METH_FASTCALL,
     "sync_words(src, dst, start, end) -> bool: copy words, True if any differed"},
    {"copy_checked", (PyCFunction)(void (*)(void))copy_checked, METH_FASTCALL,
     "copy_checked(table, entry_off, rkey, dst, dst_off, src, src_off, n, qp, remote_off) -> bool"},
    {"ring_pop", (PyCFunction)(void (*)(void))ring_pop, METH_FASTCALL,
     "ring_pop(buf, nslots, slot_size, head) -> (kind, qp_num, imm, byte_len, payload), None "
     "(nothing claimed) or False (claimed, not published)"},
    {"ring_take", (PyCFunction)(void (*)(void))ring_take, METH_FASTCALL,
     "ring_take(buf, nslots, slot_size, head, max) -> list of up to max entries, None or False"},
    {"ring_wait", (PyCFunction)(void (*)(void))ring_wait, METH_FASTCALL,
     "ring_wait(buf, nslots, slot_size, head, spin_ns) -> bool: the slot at head published"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_atomic64",
                                    "64-bit atomics on shared mappings", -1, methods};

PyMODINIT_FUNC PyInit__atomic64(void) {
    PyObject *m = PyModule_Create(&module);
    static checked_copy_fn api = checked_copy; /* see _atomic64_api.h */
    PyObject *cap = m ? PyCapsule_New((void *)&api, ATOMIC64_CAPSULE, NULL) : NULL;
    if (!cap || PyModule_AddObject(m, "_copy_checked", cap) < 0) {
        Py_XDECREF(cap);
        Py_XDECREF(m);
        return NULL;
    }
    return m;
}
