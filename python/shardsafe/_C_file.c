/*
 * _C_file.c -- shardsafe._C.File (an open safetensors file, shs_file) and
 * shardsafe._C.View (a buffer over one tensor's bytes in the file's
 * mapping, which keeps the file open while it lives).
 *
 * Every file is opened by the library (shs_file_open, or
 * shs_file_open_memory over a bytes-like object the File keeps): the
 * binding never opens or maps anything itself.  Modes:
 *   MODE_MAP   the library's read-only mapping: views are read-only
 *              buffers (numpy marks the arrays read-only);
 *   MODE_COW   SHS_OPEN_PRIVATE_WRITABLE: the library maps the file
 *              private and writable (copy-on-write), so views are
 *              writable and a write never reaches the file (torch has no
 *              read-only tensors; the reference's arrays are writable);
 *   MODE_PREAD SHS_OPEN_NO_MMAP: no views, reads copy with pread.
 * Over memory, views are writable when the object's buffer is.
 */
#include "_C.h"

#include <string.h>

enum {
    MODE_MAP = 0,
    MODE_COW = 1,
    MODE_PREAD = 2
};

typedef struct {
    PyObject_HEAD shs_file *f;
    Py_buffer mem; /* opened over memory: the object's buffer (mem.obj) */
    int mode;
    int closed;       /* close() called: no further use */
    Py_ssize_t users; /* live Views into the mapping + reads running
                           without the GIL: close() waits for them */
} FileObject;

typedef struct {
    PyObject_HEAD FileObject *owner;
    void *buf;
    Py_ssize_t len;
    int readonly;
} ViewObject;

static PyTypeObject File_Type;
static PyTypeObject View_Type;

static void file_release(FileObject *self)
{
    shs_file_free(self->f);
    self->f = NULL;
    if (self->mem.obj)
        PyBuffer_Release(&self->mem);
}

/* File(path, mode=MODE_MAP, data=None): `path` names the file, or, with
   `data` (a bytes-like object, kept while the File lives), is only the
   name used in messages. */
static int File_init(FileObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "path", "mode", "data", NULL };
    PyObject *path_obj, *data = Py_None;
    int mode = MODE_MAP, rc;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|iO", kwlist, PyUnicode_FSConverter, &path_obj,
                                     &mode, &data))
        return -1;
    if (self->f || mode < MODE_MAP || mode > MODE_PREAD) {
        Py_DECREF(path_obj);
        PyErr_SetString(PyExc_ValueError, "File: bad mode or already initialised");
        return -1;
    }
    const char *path = PyBytes_AS_STRING(path_obj);
    if (data != Py_None) {
        /* a writable buffer when the object has one (bytearray): views
           are then writable; else read-only (bytes) */
        if (PyObject_GetBuffer(data, &self->mem, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
            PyErr_Clear();
            if (PyObject_GetBuffer(data, &self->mem, PyBUF_C_CONTIGUOUS) < 0) {
                Py_DECREF(path_obj);
                return -1;
            }
        }
        Py_BEGIN_ALLOW_THREADS;
        rc = shs_file_open_memory(&self->f, self->mem.buf, (size_t)self->mem.len, path);
        Py_END_ALLOW_THREADS;
    } else {
        shs_open_opts opts = SHS_OPEN_OPTS_INIT;
        opts.flags = mode == MODE_PREAD ? SHS_OPEN_NO_MMAP
                     : mode == MODE_COW ? SHS_OPEN_PRIVATE_WRITABLE
                                        : 0;
        Py_BEGIN_ALLOW_THREADS;
        rc = shs_file_open(&self->f, path, &opts);
        Py_END_ALLOW_THREADS;
    }
    Py_DECREF(path_obj);
    if (rc < 0) {
        file_release(self);
        pyshs_raise(rc);
        return -1;
    }
    self->mode = mode;
    return 0;
}

static void File_dealloc(FileObject *self)
{
    file_release(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int check_open(FileObject *self)
{
    if (!self->f || self->closed) {
        pyshs_raise_msg(SHS_ESTATE, "the file is closed");
        return -1;
    }
    return 0;
}

/* tensor index of `name` (a str), or -1 with an exception set */
static Py_ssize_t file_find(FileObject *self, PyObject *name)
{
    Py_ssize_t len;
    if (check_open(self) < 0)
        return -1;
    const char *s = pyshs_utf8(name, &len, "tensor name");
    if (!s)
        return -1;
    size_t i;
    int rc = shs_file_find_n(&i, self->f, s, (size_t)len);
    if (rc < 0)
        return pyshs_raise(rc), -1;
    return (Py_ssize_t)i;
}

static PyObject *File_close(FileObject *self, PyObject *unused)
{
    self->closed = 1;
    if (self->users == 0)
        file_release(self);
    Py_RETURN_NONE;
}

/* With the GIL held: the last user of a closed file releases it. */
static void file_unuse(FileObject *self)
{
    if (--self->users == 0 && self->closed)
        file_release(self);
}

static PyObject *File_names(FileObject *self, PyObject *unused)
{
    if (check_open(self) < 0)
        return NULL;
    size_t n = shs_file_tensor_count(self->f);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        const shs_tensor_info *t = shs_file_tensor(self->f, i);
        PyObject *s = PyUnicode_DecodeUTF8(t->name, (Py_ssize_t)t->name_len, "strict");
        if (!s) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, s);
    }
    return list;
}

/* info(name) -> (dtype name, shape tuple, nbytes) */
static PyObject *File_info(FileObject *self, PyObject *name)
{
    Py_ssize_t i = file_find(self, name);
    if (i < 0)
        return NULL;
    const shs_tensor_info *t = shs_file_tensor(self->f, (size_t)i);
    PyObject *shape = pyshs_shape_tuple(t->shape, t->ndim);
    if (!shape)
        return NULL;
    return Py_BuildValue("(sNK)", shs_dtype_name(t->dtype), shape, (unsigned long long)t->nbytes);
}

static PyObject *File_metadata(FileObject *self, PyObject *unused)
{
    if (check_open(self) < 0)
        return NULL;
    if (!shs_file_has_metadata(self->f))
        Py_RETURN_NONE;
    PyObject *d = PyDict_New();
    size_t n = shs_file_metadata_count(self->f);
    for (size_t i = 0; d && i < n; i++) {
        const char *k, *v;
        size_t kl, vl;
        int rc = shs_file_metadata_at_n(&k, &kl, &v, &vl, self->f, i);
        if (rc < 0) {
            Py_CLEAR(d);
            return pyshs_raise(rc);
        }
        PyObject *ko = PyUnicode_DecodeUTF8(k, (Py_ssize_t)kl, "strict");
        PyObject *vo = ko ? PyUnicode_DecodeUTF8(v, (Py_ssize_t)vl, "strict") : NULL;
        if (!vo || PyDict_SetItem(d, ko, vo) < 0)
            Py_CLEAR(d);
        Py_XDECREF(ko);
        Py_XDECREF(vo);
    }
    return d;
}

/* view(name) -> View over the tensor's bytes in the mapping, or None when
   the file is not mapped */
static PyObject *File_view(FileObject *self, PyObject *name)
{
    Py_ssize_t i = file_find(self, name);
    if (i < 0)
        return NULL;
    const shs_tensor_info *t = shs_file_tensor(self->f, (size_t)i);
    /* writable only where the bytes are this process's own: a
       SHS_OPEN_PRIVATE_WRITABLE mapping, or a writable object's buffer */
    void *p = (void *)shs_file_tensor_data(self->f, (size_t)i);
    int readonly = self->mem.obj ? self->mem.readonly : self->mode != MODE_COW;
    if (!p)
        Py_RETURN_NONE;
    ViewObject *v = PyObject_New(ViewObject, &View_Type);
    if (!v)
        return NULL;
    v->owner = (FileObject *)Py_NewRef(self);
    v->buf = p;
    v->len = (Py_ssize_t)t->nbytes;
    v->readonly = readonly;
    self->users++;
    return (PyObject *)v;
}

/* read(name, buffer): copy the whole tensor into a writable buffer of
   exactly its size */
static PyObject *File_read(FileObject *self, PyObject *args)
{
    PyObject *name, *dst;
    if (!PyArg_ParseTuple(args, "OO", &name, &dst))
        return NULL;
    Py_ssize_t i = file_find(self, name);
    if (i < 0)
        return NULL;
    const shs_tensor_info *t = shs_file_tensor(self->f, (size_t)i);
    Py_buffer b;
    if (pyshs_get_buffer(dst, &b, (size_t)t->nbytes, 1, "read") < 0)
        return NULL;
    int rc;
    self->users++;
    Py_BEGIN_ALLOW_THREADS;
    rc = shs_file_read(self->f, (size_t)i, b.buf, (size_t)b.len);
    Py_END_ALLOW_THREADS;
    file_unuse(self);
    PyBuffer_Release(&b);
    if (rc < 0)
        return pyshs_raise(rc);
    Py_RETURN_NONE;
}

/* read_slice(name, start, count, buffer): the box, dense row-major */
static PyObject *File_read_slice(FileObject *self, PyObject *args)
{
    PyObject *name, *start_o, *count_o, *dst;
    if (!PyArg_ParseTuple(args, "OOOO", &name, &start_o, &count_o, &dst))
        return NULL;
    Py_ssize_t i = file_find(self, name);
    if (i < 0)
        return NULL;
    const shs_tensor_info *t = shs_file_tensor(self->f, (size_t)i);
    uint64_t start[SHS_MAX_DIMS], count[SHS_MAX_DIMS];
    if (pyshs_u64_seq(start_o, start, t->ndim, "start") < 0 ||
        pyshs_u64_seq(count_o, count, t->ndim, "count") < 0)
        return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(dst, &b, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0)
        return NULL;
    int rc;
    self->users++;
    Py_BEGIN_ALLOW_THREADS;
    rc = shs_file_read_slice(self->f, (size_t)i, start, count, b.buf, (size_t)b.len);
    Py_END_ALLOW_THREADS;
    file_unuse(self);
    PyBuffer_Release(&b);
    if (rc < 0)
        return pyshs_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *File_path(FileObject *self, void *unused)
{
    if (check_open(self) < 0)
        return NULL;
    return PyUnicode_DecodeFSDefault(shs_file_path(self->f));
}

static PyMethodDef File_methods[] = {
    { "close", (PyCFunction)File_close, METH_NOARGS, "close the file (views keep it mapped)" },
    { "names", (PyCFunction)File_names, METH_NOARGS, "tensor names in file order" },
    { "info", (PyCFunction)File_info, METH_O, "info(name) -> (dtype, shape, nbytes)" },
    { "metadata", (PyCFunction)File_metadata, METH_NOARGS, "__metadata__ as a dict, or None" },
    { "view", (PyCFunction)File_view, METH_O, "view(name) -> View or None (not mapped)" },
    { "read", (PyCFunction)File_read, METH_VARARGS, "read(name, buffer)" },
    { "read_slice", (PyCFunction)File_read_slice, METH_VARARGS,
      "read_slice(name, start, count, buffer)" },
    { NULL, NULL, 0, NULL }
};

static PyGetSetDef File_getset[] = { { "path", (getter)File_path, NULL,
                                       "the path the file was opened with", NULL },
                                     { NULL, NULL, NULL, NULL, NULL } };

static PyTypeObject File_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shardsafe._C.File",
    .tp_basicsize = sizeof(FileObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "File(path, mode=0, data=None): a validated safetensors file (shs_file), or "
              "a file image in a bytes-like object",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)File_init,
    .tp_dealloc = (destructor)File_dealloc,
    .tp_methods = File_methods,
    .tp_getset = File_getset,
};

static void View_dealloc(ViewObject *self)
{
    FileObject *owner = self->owner;
    file_unuse(owner);
    Py_DECREF(owner);
    PyObject_Free(self);
}

static int View_getbuffer(ViewObject *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->buf, self->len, self->readonly, flags);
}

static PyBufferProcs View_as_buffer = { (getbufferproc)View_getbuffer, NULL };

static PyTypeObject View_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shardsafe._C.View",
    .tp_basicsize = sizeof(ViewObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "bytes of one tensor in a mapped file; keeps the file mapped",
    .tp_dealloc = (destructor)View_dealloc,
    .tp_as_buffer = &View_as_buffer,
};

int pyshs_file_init_type(PyObject *module)
{
    if (PyType_Ready(&File_Type) < 0 || PyType_Ready(&View_Type) < 0)
        return -1;
    if (PyModule_AddObjectRef(module, "File", (PyObject *)&File_Type) < 0 ||
        PyModule_AddObjectRef(module, "View", (PyObject *)&View_Type) < 0 ||
        PyModule_AddIntConstant(module, "MODE_MAP", MODE_MAP) < 0 ||
        PyModule_AddIntConstant(module, "MODE_COW", MODE_COW) < 0 ||
        PyModule_AddIntConstant(module, "MODE_PREAD", MODE_PREAD) < 0)
        return -1;
    return 0;
}
