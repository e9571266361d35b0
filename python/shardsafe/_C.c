/*
 * _C.c -- the extension module shardsafe._C: module setup, errors, shared
 * helpers and save_file (over shs_save_file).  The binding adds no format
 * code: files are read with shs_file_* and shs_checkpoint_*, written with
 * shs_save_file (the streaming shs_writer_*).  Every call that does I/O
 * runs with the GIL released.
 */
#include "_C.h"
#include "_C_comm.h"

#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>

/* shardsafe._errors.make_error(status, message) -> exception instance */
static PyObject *make_error_fn;

static PyObject *raise_with(int status, const char *message)
{
    if (!make_error_fn)
        return PyErr_Format(PyExc_RuntimeError, "shardsafe: %s", message);
    PyObject *exc = PyObject_CallFunction(make_error_fn, "is", status, message);
    if (!exc) {
        /* a message that is not valid UTF-8 (bytes of a bad header):
           the status still selects the class */
        PyErr_Clear();
        exc = PyObject_CallFunction(make_error_fn, "is", status, shs_strerror(status));
        if (!exc)
            return NULL;
    }
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    return NULL;
}

PyObject *pyshs_raise(int status)
{
    const char *msg = shs_last_error();
    return raise_with(status, (msg && *msg) ? msg : shs_strerror(status));
}

PyObject *pyshs_raise_msg(int status, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return raise_with(status, buf);
}

const char *pyshs_utf8(PyObject *str, Py_ssize_t *len, const char *what)
{
    if (!PyUnicode_Check(str)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str, not %.80s", what, Py_TYPE(str)->tp_name);
        return NULL;
    }
    return PyUnicode_AsUTF8AndSize(str, len);
}

int pyshs_u64_seq(PyObject *seq, uint64_t *out, size_t ndim, const char *what)
{
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast)
        return -1;
    int rc = -1;
    if ((size_t)PySequence_Fast_GET_SIZE(fast) != ndim) {
        pyshs_raise_msg(SHS_EINVAL, "%s: %zd entries, expected %zu", what,
                        PySequence_Fast_GET_SIZE(fast), ndim);
        goto done;
    }
    for (size_t d = 0; d < ndim; d++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, (Py_ssize_t)d);
        unsigned long long v = PyLong_AsUnsignedLongLong(item);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            pyshs_raise_msg(SHS_EINVAL, "%s[%zu]: not a non-negative 64-bit integer", what, d);
            goto done;
        }
        out[d] = (uint64_t)v;
    }
    rc = 0;
done:
    Py_DECREF(fast);
    return rc;
}

PyObject *pyshs_shape_tuple(const uint64_t *shape, size_t n)
{
    PyObject *t = PyTuple_New((Py_ssize_t)n);
    if (!t)
        return NULL;
    for (size_t d = 0; d < n; d++) {
        PyObject *v = PyLong_FromUnsignedLongLong(shape[d]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, (Py_ssize_t)d, v);
    }
    return t;
}

int pyshs_get_buffer(PyObject *obj, Py_buffer *view, size_t len, int writable, const char *what)
{
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    if ((size_t)view->len != len) {
        pyshs_raise_msg(SHS_ERANGE, "%s: buffer of %zd bytes, expected %zu", what, view->len, len);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* One tensor of save_file's list: (name, dtype name, shape, buffer). */
static int parse_item(PyObject *item, shs_tensor_view *v, uint64_t *shape, Py_buffer *buf)
{
    PyObject *name, *dtype, *shp, *data;
    if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "OOOO", &name, &dtype, &shp, &data)) {
        PyErr_Clear();
        pyshs_raise_msg(SHS_EINVAL, "save_file: each tensor must be (name, dtype, shape, buffer)");
        return -1;
    }
    Py_ssize_t nlen, dlen;
    const char *n = pyshs_utf8(name, &nlen, "tensor name");
    const char *d = n ? pyshs_utf8(dtype, &dlen, "dtype") : NULL;
    if (!d)
        return -1;
    if (strlen(n) != (size_t)nlen)
        return pyshs_raise_msg(SHS_EINVAL, "save_file: tensor name contains a NUL byte"), -1;
    int rc = shs_dtype_parse(&v->dtype, d, (size_t)dlen);
    if (rc < 0)
        return pyshs_raise(rc), -1;
    Py_ssize_t ndim = PySequence_Size(shp);
    if (ndim < 0 || ndim > SHS_MAX_DIMS) {
        PyErr_Clear();
        return pyshs_raise_msg(SHS_EINVAL,
                               "tensor '%s': shape must be a sequence of at most %d ints", n,
                               SHS_MAX_DIMS),
               -1;
    }
    if (pyshs_u64_seq(shp, shape, (size_t)ndim, "shape") < 0)
        return -1;
    uint64_t nbytes;
    if ((rc = shs_tensor_nbytes(&nbytes, v->dtype, (size_t)ndim, shape)) < 0)
        return pyshs_raise(rc), -1;
    if (nbytes > (uint64_t)PY_SSIZE_T_MAX)
        return pyshs_raise_msg(SHS_EOVERFLOW, "tensor '%s': too large", n), -1;
    if (pyshs_get_buffer(data, buf, (size_t)nbytes, 0, n) < 0)
        return -1;
    v->name = n;
    v->ndim = (size_t)ndim;
    v->shape = shape;
    v->data = buf->buf;
    return 0;
}

/* metadata dict -> 2n C strings (borrowed from the dict's str objects) */
static int parse_metadata(PyObject *md, const char ***out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (md == Py_None)
        return 0;
    if (!PyDict_Check(md))
        return pyshs_raise_msg(SHS_EINVAL, "metadata must be a dict of str to str or None"), -1;
    Py_ssize_t n = PyDict_Size(md), pos = 0, i = 0;
    const char **kv = PyMem_Calloc((size_t)n * 2 + 1, sizeof *kv);
    if (!kv)
        return PyErr_NoMemory(), -1;
    PyObject *k, *v;
    while (PyDict_Next(md, &pos, &k, &v)) {
        Py_ssize_t kl, vl;
        if (!PyUnicode_Check(k) || !PyUnicode_Check(v)) {
            PyMem_Free(kv);
            return pyshs_raise_msg(SHS_EINVAL, "metadata must be a dict of str to str"), -1;
        }
        kv[2 * i] = PyUnicode_AsUTF8AndSize(k, &kl);
        kv[2 * i + 1] = kv[2 * i] ? PyUnicode_AsUTF8AndSize(v, &vl) : NULL;
        if (!kv[2 * i + 1]) {
            PyMem_Free(kv);
            return -1;
        }
        if (strlen(kv[2 * i]) != (size_t)kl || strlen(kv[2 * i + 1]) != (size_t)vl) {
            PyMem_Free(kv);
            return pyshs_raise_msg(SHS_EINVAL, "metadata key or value contains a NUL byte"), -1;
        }
        i++;
    }
    *out = kv;
    *n_out = (size_t)n;
    return 0;
}

/* save_file(path, tensors, metadata, fsync, align): tensors a list of
   (name, dtype name, shape, C-contiguous buffer of the exact size) */
PyObject *pyshs_save_file(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "path", "tensors", "metadata", "fsync", "align", NULL };
    PyObject *path_obj, *list, *md = Py_None, *result = NULL;
    int fsync = 0;
    unsigned int align = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O|OpI", kwlist, PyUnicode_FSConverter, &path_obj,
                                     &list, &md, &fsync, &align))
        return NULL;
    PyObject *fast = PySequence_Fast(list, "tensors must be a sequence");
    if (!fast) {
        Py_DECREF(path_obj);
        return NULL;
    }
    size_t n = (size_t)PySequence_Fast_GET_SIZE(fast), got = 0, n_md = 0;
    shs_tensor_view *views = PyMem_Calloc(n + 1, sizeof *views);
    uint64_t *shapes = PyMem_Calloc(n * SHS_MAX_DIMS + 1, sizeof *shapes);
    Py_buffer *bufs = PyMem_Calloc(n + 1, sizeof *bufs);
    const char **kv = NULL;
    if (!views || !shapes || !bufs) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < n; got++)
        if (parse_item(PySequence_Fast_GET_ITEM(fast, (Py_ssize_t)got), &views[got],
                       &shapes[got * SHS_MAX_DIMS], &bufs[got]) < 0)
            goto done;
    if (parse_metadata(md, &kv, &n_md) < 0)
        goto done;
    shs_writer_opts opts = SHS_WRITER_OPTS_INIT;
    opts.fsync = fsync;
    opts.align = align;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = shs_save_file(PyBytes_AS_STRING(path_obj), views, n, md == Py_None ? NULL : kv, n_md,
                       &opts);
    Py_END_ALLOW_THREADS;
    if (rc < 0)
        pyshs_raise(rc);
    else
        result = Py_NewRef(Py_None);
done:
    for (size_t i = 0; i < got; i++)
        PyBuffer_Release(&bufs[i]);
    PyMem_Free(kv);
    PyMem_Free(bufs);
    PyMem_Free(shapes);
    PyMem_Free(views);
    Py_DECREF(fast);
    Py_DECREF(path_obj);
    return result;
}

static PyObject *py_dtype_info(PyObject *self, PyObject *arg)
{
    Py_ssize_t len;
    const char *name = pyshs_utf8(arg, &len, "dtype");
    if (!name)
        return NULL;
    shs_dtype d;
    int rc = shs_dtype_parse(&d, name, (size_t)len);
    if (rc < 0)
        return pyshs_raise(rc);
    return Py_BuildValue("(Ii)", shs_dtype_bits(d), shs_dtype_is_float(d));
}

static PyObject *py_strerror(PyObject *self, PyObject *arg)
{
    int status;
    if (!PyArg_Parse(arg, "i", &status))
        return NULL;
    return PyUnicode_FromString(shs_strerror(status));
}

/* advise_huge(buffer): ask for transparent huge pages on the 2 MiB-aligned
   inside of a writable buffer nobody has touched yet (a new tensor a load
   is about to fill).  With 4 KiB pages, filling fresh memory costs one page
   fault per 4 KiB (allocate, zero, map: most of a load_file's time); with
   huge pages one per 2 MiB.  numpy already does this for its own arrays
   of 4 MiB and more, torch 1.13 does not.  Only advice: ignored where THP
   is off ("never"), and no error is raised if madvise refuses. */
static PyObject *py_advise_huge(PyObject *self, PyObject *arg)
{
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE | PyBUF_WRITABLE) < 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    if ((size_t)b.len >= 2 * huge) {
        uintptr_t a = (uintptr_t)b.buf, s = (a + huge - 1) & ~(huge - 1),
                  e = (a + (uintptr_t)b.len) & ~(huge - 1);
        if (e > s)
            (void)madvise((void *)s, (size_t)(e - s), MADV_HUGEPAGE);
    }
#endif
    PyBuffer_Release(&b);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    { "advise_huge", py_advise_huge, METH_O,
      "advise_huge(buffer): madvise(MADV_HUGEPAGE) on a fresh buffer's aligned inside" },
    { "save_file", (PyCFunction)(void (*)(void))pyshs_save_file, METH_VARARGS | METH_KEYWORDS,
      "save_file(path, tensors, metadata=None, fsync=False, align=0)" },
    { "dtype_info", py_dtype_info, METH_O, "dtype_info(name) -> (bits, is_float)" },
    { "strerror", py_strerror, METH_O, "strerror(status) -> static description" },
    { NULL, NULL, 0, NULL }
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "shardsafe._C",
    .m_doc = "libshardsafe, for the shardsafe package",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__C(void);
PyMODINIT_FUNC PyInit__C(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    PyObject *errors = PyImport_ImportModule("shardsafe._errors");
    if (!errors)
        goto fail;
    Py_XSETREF(make_error_fn, PyObject_GetAttrString(errors, "make_error"));
    Py_DECREF(errors);
    if (!make_error_fn)
        goto fail;
    if (PyModule_AddStringConstant(m, "version", shs_version()) < 0 ||
        pyshs_file_init_type(m) < 0 || pyshs_ckpt_init_type(m) < 0 ||
        pyshs_manager_init_type(m) < 0 || pyshs_comm_init_type(m) < 0 || pyshs_tools_init(m) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
