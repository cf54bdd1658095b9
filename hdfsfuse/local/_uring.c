/*
 * hdfsfuse._uring: local file reads for the trio loop through io_uring, with no thread hop.
 *
 *   Ring(slots) -> a ring of `slots` read slots, and an eventfd that turns readable when reads complete
 *   ring.eventfd -> the eventfd (for trio.lowlevel.wait_readable)
 *   ring.read(slot, fd, buffer, offset) -> queue a read of len(buffer) bytes at offset into buffer
 *   ring.submit() -> hand the queued reads to the kernel; the number it took
 *   ring.reap() -> [(slot, result), ...]: result is the bytes read, or -errno
 *   ring.in_flight -> reads queued or submitted and not reaped yet
 *   ring.close() -> cancels the reads in flight, waits for them, frees the ring (also on deallocation)
 *
 * A thread that hands a read to a worker thread and waits for it pays for two hand-overs: the
 * worker's wake-up and the waiter's. Through io_uring the kernel reads into the buffer itself and
 * posts a completion; the eventfd wakes the trio loop once. On a virtual machine, where a sleeping
 * CPU costs tens of microseconds to wake, that is most of a cold 4 KiB read.
 *
 *   trio loop             kernel
 *   read(slot, ...) --->  SQ: IORING_OP_READ {fd, addr, len, off, user_data = slot}
 *   submit()        --->  io_uring_enter(to_submit)
 *                         ... the disk ...
 *   eventfd readable <--  CQ: {user_data = slot, res}
 *   reap()
 *
 * The buffer of each slot is held (PyObject_GetBuffer) from `read` until its completion is reaped,
 * so it cannot be freed or resized while the kernel may write into it. One thread uses a ring.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <linux/io_uring.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct {
    PyObject_HEAD
    int fd;      /* the ring; -1 once closed */
    int eventfd; /* registered for completions */
    unsigned slots;
    unsigned in_flight;
    unsigned queued; /* in the SQ, not submitted yet */
    void *sq_ring, *cq_ring;
    size_t sq_ring_size, cq_ring_size;
    struct io_uring_sqe *sqes;
    size_t sqes_size;
    unsigned *sq_tail, *sq_mask, *sq_array;
    unsigned *cq_head, *cq_tail, *cq_mask;
    struct io_uring_cqe *cqes;
    Py_buffer *buffers; /* per slot; .obj is NULL when the slot is free */
} Ring;

#define CANCEL_TAG UINT64_MAX /* the user_data of a cancel request (not a slot) */

static int enter(int fd, unsigned to_submit, unsigned min_complete, unsigned flags) {
    return (int)syscall(__NR_io_uring_enter, fd, to_submit, min_complete, flags, NULL, 0);
}

/* Take every completion posted; with `out`, append (slot, result) to it. */
static int reap_into(Ring *r, PyObject *out) {
    unsigned head = *r->cq_head;
    unsigned tail = __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE);
    int failed = 0;
    while (head != tail) {
        struct io_uring_cqe *cqe = &r->cqes[head & *r->cq_mask];
        unsigned slot = (unsigned)cqe->user_data;
        int res = cqe->res;
        head++;
        if (slot < r->slots && r->buffers[slot].obj != NULL) {
            PyBuffer_Release(&r->buffers[slot]);
            r->buffers[slot].obj = NULL;
            r->in_flight--;
        }
        if (out != NULL && !failed) {
            PyObject *item = Py_BuildValue("(Ii)", slot, res);
            if (item == NULL || PyList_Append(out, item) < 0) failed = 1;
            Py_XDECREF(item);
        }
    }
    __atomic_store_n(r->cq_head, head, __ATOMIC_RELEASE);
    return failed ? -1 : 0;
}

static void ring_close(Ring *r) {
    if (r->fd < 0) return;
    /* Reads that could wait for long (a pipe, a hung file system) are asked to stop; then the
     * kernel may still write into the buffers of the others: wait for every one. */
    unsigned cancels = 0;
    for (unsigned i = 0; i < r->slots; i++) {
        if (r->buffers[i].obj == NULL) continue;
        unsigned tail = *r->sq_tail;
        unsigned index = tail & *r->sq_mask;
        struct io_uring_sqe *sqe = &r->sqes[index];
        memset(sqe, 0, sizeof *sqe);
        sqe->opcode = IORING_OP_ASYNC_CANCEL;
        sqe->addr = i; /* the user_data of the read to cancel */
        sqe->user_data = CANCEL_TAG;
        r->sq_array[index] = index;
        __atomic_store_n(r->sq_tail, tail + 1, __ATOMIC_RELEASE);
        cancels++;
    }
    /* the reads still queued go first, then the cancels */
    if (cancels) {
        int n = enter(r->fd, r->queued + cancels, 0, 0);
        if (n > 0) r->queued -= (unsigned)n < r->queued ? (unsigned)n : r->queued;
    }
    while (r->in_flight > r->queued) {
        int n;
        Py_BEGIN_ALLOW_THREADS
        n = enter(r->fd, 0, 1, IORING_ENTER_GETEVENTS);
        Py_END_ALLOW_THREADS
        reap_into(r, NULL);
        if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EBUSY) break;
    }
    for (unsigned i = 0; i < r->slots; i++)
        if (r->buffers[i].obj != NULL) {
            PyBuffer_Release(&r->buffers[i]);
            r->buffers[i].obj = NULL;
        }
    if (r->sqes != NULL) munmap(r->sqes, r->sqes_size);
    if (r->cq_ring != NULL && r->cq_ring != r->sq_ring) munmap(r->cq_ring, r->cq_ring_size);
    if (r->sq_ring != NULL) munmap(r->sq_ring, r->sq_ring_size);
    r->sqes = NULL;
    r->sq_ring = r->cq_ring = NULL;
    close(r->fd);
    if (r->eventfd >= 0) close(r->eventfd);
    r->fd = r->eventfd = -1;
    r->in_flight = r->queued = 0;
}

static int ring_init(Ring *r, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"slots", NULL};
    unsigned slots;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "I", kwlist, &slots)) return -1;
    if (r->fd >= 0 || r->buffers != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Ring already initialised");
        return -1;
    }
    if (slots < 1 || slots > 4096) {
        PyErr_SetString(PyExc_ValueError, "slots must be 1..4096");
        return -1;
    }
    r->buffers = PyMem_Calloc(slots, sizeof(Py_buffer));
    if (r->buffers == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    r->slots = slots;
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    int fd = (int)syscall(__NR_io_uring_setup, slots, &p);
    if (fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    r->fd = fd;
    if (p.sq_entries < slots) { /* the kernel never gives fewer, but the SQ must hold every slot */
        ring_close(r);
        PyErr_SetString(PyExc_OSError, "io_uring: submission queue smaller than asked");
        return -1;
    }
    r->sq_ring_size = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    r->cq_ring_size = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    int single = (p.features & IORING_FEAT_SINGLE_MMAP) != 0;
    if (single && r->cq_ring_size > r->sq_ring_size) r->sq_ring_size = r->cq_ring_size;
    r->sq_ring = mmap(NULL, r->sq_ring_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQ_RING);
    if (r->sq_ring == MAP_FAILED) {
        r->sq_ring = NULL;
        goto fail;
    }
    if (single) {
        r->cq_ring = r->sq_ring;
    } else {
        r->cq_ring = mmap(NULL, r->cq_ring_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_CQ_RING);
        if (r->cq_ring == MAP_FAILED) {
            r->cq_ring = NULL;
            goto fail;
        }
    }
    r->sqes_size = p.sq_entries * sizeof(struct io_uring_sqe);
    r->sqes = mmap(NULL, r->sqes_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQES);
    if (r->sqes == MAP_FAILED) {
        r->sqes = NULL;
        goto fail;
    }
    char *sq = r->sq_ring, *cq = r->cq_ring;
    r->sq_tail = (unsigned *)(sq + p.sq_off.tail);
    r->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    r->sq_array = (unsigned *)(sq + p.sq_off.array);
    r->cq_head = (unsigned *)(cq + p.cq_off.head);
    r->cq_tail = (unsigned *)(cq + p.cq_off.tail);
    r->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
    r->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    r->eventfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (r->eventfd < 0) goto fail;
    if (syscall(__NR_io_uring_register, fd, IORING_REGISTER_EVENTFD, &r->eventfd, 1) < 0) goto fail;
    return 0;
fail:
    PyErr_SetFromErrno(PyExc_OSError);
    ring_close(r);
    return -1;
}

static PyObject *ring_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Ring *r = (Ring *)type->tp_alloc(type, 0);
    if (r != NULL) r->fd = r->eventfd = -1;
    return (PyObject *)r;
}

static void ring_dealloc(Ring *r) {
    ring_close(r);
    PyMem_Free(r->buffers);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static int check_open(Ring *r) {
    if (r->fd < 0) {
        PyErr_SetString(PyExc_ValueError, "the ring is closed");
        return -1;
    }
    return 0;
}

static PyObject *ring_read(Ring *r, PyObject *args) {
    unsigned slot;
    int fd;
    PyObject *target;
    long long offset;
    if (!PyArg_ParseTuple(args, "IiOL", &slot, &fd, &target, &offset)) return NULL;
    if (check_open(r) < 0) return NULL;
    if (slot >= r->slots) return PyErr_Format(PyExc_ValueError, "slot %u out of range", slot);
    if (r->buffers[slot].obj != NULL) return PyErr_Format(PyExc_ValueError, "slot %u is busy", slot);
    if (offset < 0) return PyErr_Format(PyExc_ValueError, "negative offset");
    Py_buffer *b = &r->buffers[slot];
    if (PyObject_GetBuffer(target, b, PyBUF_WRITABLE) < 0) {
        b->obj = NULL;
        return NULL;
    }
    if (b->len > UINT32_MAX) {
        PyBuffer_Release(b);
        b->obj = NULL;
        return PyErr_Format(PyExc_ValueError, "a read of more than 4 GiB");
    }
    unsigned tail = *r->sq_tail;
    unsigned index = tail & *r->sq_mask;
    struct io_uring_sqe *sqe = &r->sqes[index];
    memset(sqe, 0, sizeof *sqe);
    sqe->opcode = IORING_OP_READ;
    sqe->fd = fd;
    sqe->addr = (uint64_t)(uintptr_t)b->buf;
    sqe->len = (uint32_t)b->len;
    sqe->off = (uint64_t)offset;
    sqe->user_data = slot;
    r->sq_array[index] = index;
    __atomic_store_n(r->sq_tail, tail + 1, __ATOMIC_RELEASE);
    r->queued++;
    r->in_flight++;
    Py_RETURN_NONE;
}

static PyObject *ring_submit(Ring *r, PyObject *unused) {
    if (check_open(r) < 0) return NULL;
    if (r->queued == 0) return PyLong_FromLong(0);
    int n = enter(r->fd, r->queued, 0, 0);
    if (n < 0) return PyErr_SetFromErrno(PyExc_OSError);
    r->queued -= (unsigned)n < r->queued ? (unsigned)n : r->queued;
    return PyLong_FromLong(n);
}

static PyObject *ring_reap(Ring *r, PyObject *unused) {
    if (check_open(r) < 0) return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    if (reap_into(r, out) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *ring_close_method(Ring *r, PyObject *unused) {
    ring_close(r);
    Py_RETURN_NONE;
}

static PyObject *ring_get_eventfd(Ring *r, void *closure) { return PyLong_FromLong(r->eventfd); }
static PyObject *ring_get_in_flight(Ring *r, void *closure) { return PyLong_FromUnsignedLong(r->in_flight); }

static PyMethodDef ring_methods[] = {
    {"read", (PyCFunction)ring_read, METH_VARARGS,
     "read(slot, fd, buffer, offset): queue a read of len(buffer) bytes at offset into buffer"},
    {"submit", (PyCFunction)ring_submit, METH_NOARGS, "submit() -> how many queued reads the kernel took"},
    {"reap", (PyCFunction)ring_reap, METH_NOARGS, "reap() -> [(slot, bytes read or -errno), ...]"},
    {"close", (PyCFunction)ring_close_method, METH_NOARGS, "close(): wait for the reads in flight, free the ring"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef ring_getset[] = {
    {"eventfd", (getter)ring_get_eventfd, NULL, "readable when completions wait (-1 once closed)", NULL},
    {"in_flight", (getter)ring_get_in_flight, NULL, "reads queued or submitted, not reaped", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hdfsfuse.local._uring.Ring",
    .tp_basicsize = sizeof(Ring),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Ring(slots): file reads through io_uring, completions signalled on an eventfd",
    .tp_new = ring_new,
    .tp_init = (initproc)ring_init,
    .tp_dealloc = (destructor)ring_dealloc,
    .tp_methods = ring_methods,
    .tp_getset = ring_getset,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_uring",
                                    "Local file reads through io_uring, for the trio loop.", -1, NULL};

PyMODINIT_FUNC PyInit__uring(void) {
    if (PyType_Ready(&RingType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&RingType);
    if (PyModule_AddObject(m, "Ring", (PyObject *)&RingType) < 0) {
        Py_DECREF(&RingType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
