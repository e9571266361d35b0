/*
 * _C_ckpt.c -- shardsafe._C.Checkpoint: the public checkpoint read API
 * (shs_checkpoint_open_ex / _tensor / _read / _read_blob / _progress) for
 * Python.  Every read is checked against the checkpoint's checksums by
 * the library; the binding only allocates the destination.
 */
#include "_C.h"

#include <string.h>

typedef struct {
    PyObject_HEAD shs_checkpoint *c;
    int closed;
    Py_ssize_t users; /* reads running without the GIL */
} CkptObject;

static int Ckpt_init(CkptObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "path", "step", "no_mmap", "key", NULL };
    PyObject *path_obj, *key_obj = Py_None;
    long long step = -1;
    int no_mmap = 0, rc;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|LpO", kwlist, PyUnicode_FSConverter, &path_obj,
                                     &step, &no_mmap, &key_obj))
        return -1;
    if (self->c) {
        Py_DECREF(path_obj);
        PyErr_SetString(PyExc_ValueError, "Checkpoint: already initialised");
        return -1;
    }
    Py_buffer key = { 0 };
    if (key_obj != Py_None && PyObject_GetBuffer(key_obj, &key, PyBUF_SIMPLE) < 0) {
        Py_DECREF(path_obj);
        return -1;
    }
    shs_checkpoint_open_opts opts = SHS_CHECKPOINT_OPEN_OPTS_INIT;
    opts.step = step;
    opts.flags = no_mmap ? SHS_CHECKPOINT_OPEN_NO_MMAP : 0;
    opts.key = key.buf; /* its length is checked by the library */
    opts.key_len = (size_t)key.len;
    Py_BEGIN_ALLOW_THREADS;
    rc = shs_checkpoint_open(&self->c, PyBytes_AS_STRING(path_obj), &opts);
    Py_END_ALLOW_THREADS;
    if (key.obj)
        PyBuffer_Release(&key);
    Py_DECREF(path_obj);
    if (rc < 0) {
        pyshs_raise(rc);
        return -1;
    }
    return 0;
}

static void Ckpt_dealloc(CkptObject *self)
{
    shs_checkpoint_free(self->c);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int check_open(CkptObject *self)
{
    if (!self->c || self->closed) {
        pyshs_raise_msg(SHS_ESTATE, "the checkpoint is closed");
        return -1;
    }
    return 0;
}

static PyObject *Ckpt_close(CkptObject *self, PyObject *unused)
{
    self->closed = 1;
    if (self->users == 0) {
        shs_checkpoint_free(self->c);
        self->c = NULL;
    }
    Py_RETURN_NONE;
}

static void ckpt_unuse(CkptObject *self)
{
    if (--self->users == 0 && self->closed) {
        shs_checkpoint_free(self->c);
        self->c = NULL;
    }
}

static Py_ssize_t ckpt_find(CkptObject *self, PyObject *name)
{
    Py_ssize_t len;
    if (check_open(self) < 0)
        return -1;
    const char *s = pyshs_utf8(name, &len, "tensor name");
    if (!s)
        return -1;
    if (strlen(s) != (size_t)len)
        return pyshs_raise_msg(SHS_ENOTFOUND, "no tensor named '%s\\0...' in the checkpoint", s),
               -1;
    size_t i;
    int rc = shs_checkpoint_find(&i, self->c, s);
    if (rc < 0)
        return pyshs_raise(rc), -1;
    return (Py_ssize_t)i;
}

static PyObject *Ckpt_names(CkptObject *self, PyObject *unused)
{
    if (check_open(self) < 0)
        return NULL;
    size_t n = shs_checkpoint_tensor_count(self->c);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        PyObject *s = PyUnicode_FromString(shs_checkpoint_tensor(self->c, i)->name);
        if (!s) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, s);
    }
    return list;
}

/* info(name) -> (dtype, shape, kind, n_chunks) */
static PyObject *Ckpt_info(CkptObject *self, PyObject *name)
{
    Py_ssize_t i = ckpt_find(self, name);
    if (i < 0)
        return NULL;
    const shs_checkpoint_tensor_info *t = shs_checkpoint_tensor(self->c, (size_t)i);
    PyObject *shape = pyshs_shape_tuple(t->shape, t->ndim);
    if (!shape)
        return NULL;
    return Py_BuildValue("(sNsn)", shs_dtype_name(t->dtype), shape,
                         t->kind == SHS_KIND_OPTIMIZER ? "optimizer" : "model",
                         (Py_ssize_t)t->n_chunks);
}

/* read(name, start, count, dtype, buffer): start/count None = whole */
static PyObject *Ckpt_read(CkptObject *self, PyObject *args)
{
    PyObject *name, *start_o, *count_o, *dtype_o, *dst;
    if (!PyArg_ParseTuple(args, "OOOOO", &name, &start_o, &count_o, &dtype_o, &dst))
        return NULL;
    Py_ssize_t i = ckpt_find(self, name);
    if (i < 0)
        return NULL;
    const shs_checkpoint_tensor_info *t = shs_checkpoint_tensor(self->c, (size_t)i);
    uint64_t start[SHS_MAX_DIMS], count[SHS_MAX_DIMS];
    int whole = start_o == Py_None && count_o == Py_None;
    if (!whole && (pyshs_u64_seq(start_o, start, t->ndim, "start") < 0 ||
                   pyshs_u64_seq(count_o, count, t->ndim, "count") < 0))
        return NULL;
    Py_ssize_t dlen;
    const char *dname = pyshs_utf8(dtype_o, &dlen, "dtype");
    if (!dname)
        return NULL;
    shs_dtype dtype;
    int rc = shs_dtype_parse(&dtype, dname, (size_t)dlen);
    if (rc < 0)
        return pyshs_raise(rc);
    Py_buffer b;
    if (PyObject_GetBuffer(dst, &b, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0)
        return NULL;
    self->users++;
    Py_BEGIN_ALLOW_THREADS;
    rc = shs_checkpoint_read(self->c, (size_t)i, whole ? NULL : start, whole ? NULL : count, dtype,
                             b.buf, (size_t)b.len);
    Py_END_ALLOW_THREADS;
    ckpt_unuse(self);
    PyBuffer_Release(&b);
    if (rc < 0)
        return pyshs_raise(rc);
    Py_RETURN_NONE;
}

/* blobs() -> [(name, rank, size), ...] in index order */
static PyObject *Ckpt_blobs(CkptObject *self, PyObject *unused)
{
    if (check_open(self) < 0)
        return NULL;
    size_t n = shs_checkpoint_blob_count(self->c);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        shs_blob_info bi = SHS_BLOB_INFO_INIT;
        int rc = shs_checkpoint_blob(&bi, self->c, i);
        if (rc < 0) {
            Py_CLEAR(list);
            return pyshs_raise(rc);
        }
        PyObject *item = Py_BuildValue("(siK)", bi.name, bi.rank, (unsigned long long)bi.size);
        if (!item) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    return list;
}

/* read_blob(index) -> bytes, checked against its checksum */
static PyObject *Ckpt_read_blob(CkptObject *self, PyObject *arg)
{
    Py_ssize_t index = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    if (index == -1 && PyErr_Occurred())
        return NULL;
    if (check_open(self) < 0)
        return NULL;
    shs_blob_info bi = SHS_BLOB_INFO_INIT;
    int rc = index < 0 ? SHS_ERANGE : shs_checkpoint_blob(&bi, self->c, (size_t)index);
    if (rc < 0)
        return index < 0 ? pyshs_raise_msg(rc, "blob index %zd out of range", index)
                         : pyshs_raise(rc);
    if (bi.size > (uint64_t)PY_SSIZE_T_MAX)
        return pyshs_raise_msg(SHS_EOVERFLOW, "blob '%s' too large", bi.name);
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)bi.size);
    if (!out)
        return NULL;
    self->users++;
    Py_BEGIN_ALLOW_THREADS;
    rc = shs_checkpoint_read_blob(self->c, (size_t)index, PyBytes_AS_STRING(out), (size_t)bi.size);
    Py_END_ALLOW_THREADS;
    ckpt_unuse(self);
    if (rc < 0) {
        Py_DECREF(out);
        return pyshs_raise(rc);
    }
    return out;
}

/* progress() -> dict of common.json's seven keys, or None (plain) */
static PyObject *Ckpt_progress(CkptObject *self, PyObject *unused)
{
    if (check_open(self) < 0)
        return NULL;
    shs_progress p = SHS_PROGRESS_INIT;
    int rc = shs_checkpoint_progress(&p, self->c);
    if (rc == SHS_ENOTFOUND)
        Py_RETURN_NONE;
    if (rc < 0)
        return pyshs_raise(rc);
    return Py_BuildValue(
        "{sLsLsLsdsLsLsz}", "epoch_num", (long long)p.epoch_num, "step_num", (long long)p.step_num,
        "global_step", (long long)p.global_step, "loss_scale", p.loss_scale, "global_batch_size",
        (long long)p.global_batch_size, "consumed_samples", (long long)p.consumed_samples,
        "ckpt_status", p.ckpt_status[0] ? p.ckpt_status : NULL);
}

static PyObject *Ckpt_describe(CkptObject *self, PyObject *unused)
{
    if (check_open(self) < 0)
        return NULL;
    PyObject *path = PyUnicode_DecodeFSDefault(shs_checkpoint_path(self->c));
    if (!path)
        return NULL;
    return Py_BuildValue(
        "{sNsLsisisi}", "path", path, "step", (long long)shs_checkpoint_step(self->c), "world_size",
        shs_checkpoint_world_size(self->c), "is_plain", (shs_checkpoint_format(self->c) == SHS_FORMAT_PLAIN),
        "format_version", shs_checkpoint_format_version(self->c));
}

static PyMethodDef Ckpt_methods[] = {
    { "close", (PyCFunction)Ckpt_close, METH_NOARGS, "close the checkpoint" },
    { "names", (PyCFunction)Ckpt_names, METH_NOARGS, "tensor names, sorted" },
    { "info", (PyCFunction)Ckpt_info, METH_O, "info(name) -> (dtype, shape, kind, n_chunks)" },
    { "read", (PyCFunction)Ckpt_read, METH_VARARGS, "read(name, start, count, dtype, buffer)" },
    { "blobs", (PyCFunction)Ckpt_blobs, METH_NOARGS, "[(name, rank, size)]" },
    { "read_blob", (PyCFunction)Ckpt_read_blob, METH_O, "read_blob(index) -> bytes" },
    { "progress", (PyCFunction)Ckpt_progress, METH_NOARGS, "common.json as a dict, or None" },
    { "describe", (PyCFunction)Ckpt_describe, METH_NOARGS,
      "{path, step, world_size, is_plain, format_version}" },
    { NULL, NULL, 0, NULL }
};

static PyTypeObject Ckpt_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shardsafe._C.Checkpoint",
    .tp_basicsize = sizeof(CkptObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Checkpoint(path, step=-1, no_mmap=False, key=None): shs_checkpoint_open_ex",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Ckpt_init,
    .tp_dealloc = (destructor)Ckpt_dealloc,
    .tp_methods = Ckpt_methods,
};

int pyshs_ckpt_init_type(PyObject *module)
{
    if (PyType_Ready(&Ckpt_Type) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "Checkpoint", (PyObject *)&Ckpt_Type);
}
