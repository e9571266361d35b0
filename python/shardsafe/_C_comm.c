/*
 * _C_comm.c -- shardsafe._C.Comm: a communicator (shs_comm_ops) whose
 * collectives call back into a Python object (shardsafe.dist: over
 * torch.distributed or mpi4py).  Every op takes the GIL
 * (PyGILState_Ensure), so it may be called from any thread of the
 * library while the caller released the GIL.  A Python exception in an
 * op becomes SHS_EIO; its text is kept in the Comm and added to the
 * error the manager raises.
 */
#include "_C_comm.h"

#include <string.h>

struct CommObject {
    PyObject_HEAD shs_comm *comm;
    PyObject *backend; /* barrier, broadcast, allgather, gatherv, send, recv */
    int rank, size;
    char err[512]; /* the first op failure since the last take_error */
};

/* Record the pending Python exception (GIL held) and clear it. */
static int op_failed(CommObject *c, const char *op)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *s = value ? PyObject_Str(value) : NULL;
    const char *msg = s ? PyUnicode_AsUTF8(s) : NULL;
    if (!msg)
        PyErr_Clear();
    if (!c->err[0])
        snprintf(c->err, sizeof c->err, "rank %d: communicator %s failed: %s: %s", c->rank, op,
                 type ? ((PyTypeObject *)type)->tp_name : "?", msg ? msg : "?");
    Py_XDECREF(s);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return SHS_EIO;
}

/* Copy a bytes-like result of exactly `len` bytes into dst (GIL held). */
static int take_bytes(CommObject *c, PyObject *res, void *dst, size_t len, const char *op)
{
    Py_buffer b;
    if (!res)
        return op_failed(c, op);
    if (PyObject_GetBuffer(res, &b, PyBUF_SIMPLE) < 0) {
        Py_DECREF(res);
        return op_failed(c, op);
    }
    int rc = SHS_OK;
    if ((size_t)b.len != len) {
        PyErr_Format(PyExc_ValueError, "returned %zd bytes, expected %zu", b.len, len);
        rc = op_failed(c, op);
    } else if (len) {
        memcpy(dst, b.buf, len);
    }
    PyBuffer_Release(&b);
    Py_DECREF(res);
    return rc;
}

static PyObject *bytes_of(const void *p, size_t len)
{
    return PyBytes_FromStringAndSize(len ? p : "", (Py_ssize_t)len);
}

static int c_barrier(void *ctx)
{
    CommObject *c = ctx;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *res = PyObject_CallMethod(c->backend, "barrier", NULL);
    int rc = res ? SHS_OK : op_failed(c, "barrier");
    Py_XDECREF(res);
    PyGILState_Release(g);
    return rc;
}

static int c_broadcast(void *ctx, void *buf, size_t len, int root)
{
    CommObject *c = ctx;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *data = c->rank == root ? bytes_of(buf, len) : (Py_INCREF(Py_None), Py_None);
    int rc = SHS_OK;
    if (!data) {
        rc = op_failed(c, "broadcast");
    } else {
        PyObject *res = PyObject_CallMethod(c->backend, "broadcast", "Nni", data, (Py_ssize_t)len,
                                            root);
        rc = take_bytes(c, res, buf, len, "broadcast");
    }
    PyGILState_Release(g);
    return rc;
}

static int c_allgather(void *ctx, const void *send, size_t len, void *recv)
{
    CommObject *c = ctx;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *data = bytes_of(send, len);
    int rc = SHS_OK;
    if (!data) {
        rc = op_failed(c, "allgather");
    } else {
        PyObject *res = PyObject_CallMethod(c->backend, "allgather", "N", data);
        rc = take_bytes(c, res, recv, len * (size_t)c->size, "allgather");
    }
    PyGILState_Release(g);
    return rc;
}

static int c_gatherv(void *ctx, const void *send, const size_t *lens, void *recv, int root)
{
    CommObject *c = ctx;
    PyGILState_STATE g = PyGILState_Ensure();
    int rc = SHS_OK;
    size_t total = 0;
    PyObject *lst = PyList_New(c->size);
    for (int i = 0; lst && i < c->size; i++) {
        PyObject *n = PyLong_FromSize_t(lens[i]);
        if (!n)
            Py_CLEAR(lst);
        else
            PyList_SET_ITEM(lst, i, n);
        total += lens[i];
    }
    PyObject *data = lst ? bytes_of(send, lens[c->rank]) : NULL;
    if (!data) {
        Py_XDECREF(lst);
        rc = op_failed(c, "gatherv");
    } else {
        PyObject *res = PyObject_CallMethod(c->backend, "gatherv", "NNi", data, lst, root);
        if (c->rank == root && recv)
            rc = take_bytes(c, res, recv, total, "gatherv");
        else if (!res)
            rc = op_failed(c, "gatherv");
        else
            Py_DECREF(res);
    }
    PyGILState_Release(g);
    return rc;
}

static int c_send(void *ctx, const void *buf, size_t len, int dest, int tag)
{
    CommObject *c = ctx;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *data = bytes_of(buf, len);
    PyObject *res = data ? PyObject_CallMethod(c->backend, "send", "Nii", data, dest, tag) : NULL;
    int rc = res ? SHS_OK : op_failed(c, "send");
    Py_XDECREF(res);
    PyGILState_Release(g);
    return rc;
}

static int c_recv(void *ctx, void *buf, size_t len, int src, int tag)
{
    CommObject *c = ctx;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *res = PyObject_CallMethod(c->backend, "recv", "nii", (Py_ssize_t)len, src, tag);
    int rc = take_bytes(c, res, buf, len, "recv");
    PyGILState_Release(g);
    return rc;
}

static const shs_comm_ops py_ops = {
    SHS_COMM_OPS_VERSION, c_barrier, c_broadcast, c_allgather, c_gatherv, c_send, c_recv, NULL
};

static int Comm_init(CommObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "backend", "rank", "size", NULL };
    PyObject *backend;
    int rank, size;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Oii", kwlist, &backend, &rank, &size))
        return -1;
    if (self->comm) {
        PyErr_SetString(PyExc_ValueError, "Comm: already initialised");
        return -1;
    }
    int rc = shs_comm_create(&self->comm, rank, size, &py_ops, self);
    if (rc < 0)
        return pyshs_raise(rc), -1;
    Py_INCREF(backend);
    self->backend = backend;
    self->rank = rank;
    self->size = size;
    return 0;
}

static void Comm_dealloc(CommObject *self)
{
    shs_comm_free(self->comm);
    Py_XDECREF(self->backend);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject Comm_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shardsafe._C.Comm",
    .tp_basicsize = sizeof(CommObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Comm(backend, rank, size): shs_comm over a Python object's collectives",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Comm_init,
    .tp_dealloc = (destructor)Comm_dealloc,
};

shs_comm *pyshs_comm_get(PyObject *obj)
{
    if (!PyObject_TypeCheck(obj, &Comm_Type) || !((CommObject *)obj)->comm) {
        PyErr_SetString(PyExc_TypeError, "comm must be a shardsafe._C.Comm");
        return NULL;
    }
    return ((CommObject *)obj)->comm;
}

void pyshs_comm_take_error(PyObject *obj, char *out, size_t cap)
{
    out[0] = 0;
    if (obj && PyObject_TypeCheck(obj, &Comm_Type)) {
        CommObject *c = (CommObject *)obj;
        snprintf(out, cap, "%s", c->err);
        c->err[0] = 0;
    }
}

int pyshs_comm_init_type(PyObject *module)
{
    if (PyType_Ready(&Comm_Type) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "Comm", (PyObject *)&Comm_Type);
}
