/*
 * _C_tools.c -- the library's offline tools for Python: shs_merge /
 * shs_merge_finish, shs_reshard, shs_reshard_saved_layout, and the small
 * helpers their options need (shs_parse_size, shs_key_load).  The
 * Python-level API (shardsafe/tools.py) turns keyword arguments into
 * these calls; this file only converts and releases the GIL.
 */
#include "_C.h"

#include <string.h>

/* A list of str -> array of C strings borrowed from the list's items
   (the list is kept alive by the caller).  *out is PyMem_Malloc'd. */
static int str_array(PyObject *seq, const char ***out, size_t *n_out, const char *what)
{
    *out = NULL;
    *n_out = 0;
    if (seq == Py_None)
        return 0;
    if (!PyList_Check(seq))
        return PyErr_Format(PyExc_TypeError, "%s must be a list of str", what), -1;
    Py_ssize_t n = PyList_GET_SIZE(seq);
    const char **a = PyMem_Calloc((size_t)n + 1, sizeof *a);
    if (!a)
        return PyErr_NoMemory(), -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len;
        a[i] = pyshs_utf8(PyList_GET_ITEM(seq, i), &len, what);
        if (!a[i] || strlen(a[i]) != (size_t)len) {
            if (a[i])
                pyshs_raise_msg(SHS_EINVAL, "%s: an entry contains a NUL byte", what);
            PyMem_Free(a);
            return -1;
        }
    }
    *out = a;
    *n_out = (size_t)n;
    return 0;
}

/* A key argument: None, or exactly SHS_KEY_BYTES bytes. */
static int key_arg(PyObject *key, Py_buffer *b)
{
    memset(b, 0, sizeof *b);
    if (key == Py_None)
        return 0;
    if (PyObject_GetBuffer(key, b, PyBUF_SIMPLE) < 0)
        return -1;
    Py_ssize_t len = b->len;
    if (len != SHS_KEY_BYTES) {
        PyBuffer_Release(b);
        memset(b, 0, sizeof *b);
        return pyshs_raise_msg(SHS_EKEY, "a key has %d bytes, not %zd", SHS_KEY_BYTES, len), -1;
    }
    return 0;
}

/* The progress callable, called from the library's merging threads. */
typedef struct {
    PyObject *fn;
    PyObject *exc_type, *exc_value, *exc_tb; /* its exception, if it raised */
} progress_ctx;

static int progress_cb(void *ctx, uint64_t done, uint64_t total)
{
    progress_ctx *p = ctx;
    PyGILState_STATE g = PyGILState_Ensure();
    int stop = 0;
    if (p->exc_type) {
        stop = 1;
    } else {
        PyObject *r = PyObject_CallFunction(p->fn, "KK", (unsigned long long)done,
                                            (unsigned long long)total);
        if (!r) {
            PyErr_Fetch(&p->exc_type, &p->exc_value, &p->exc_tb);
            stop = 1;
        } else {
            stop = r != Py_None && PyObject_IsTrue(r) == 1; /* a true result cancels */
            Py_DECREF(r);
        }
    }
    PyGILState_Release(g);
    return stop;
}

/* merge(src, dst, max_shard_size, dtype, include, exclude, rename, flags,
         jobs, part_index, part_count, step, key, progress, finish)
   -> {"n_tensors", "n_files", "total_size", "files_written",
       "bytes_written"} */
static PyObject *py_merge(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "src",     "dst",        "max_shard_size", "dtype",
                              "include", "exclude",    "rename",         "flags",
                              "jobs",    "part_index", "part_count",     "step",
                              "key",     "progress",   "finish",         NULL };
    PyObject *src_o, *dst_o, *dtype_o = Py_None, *inc_o = Py_None, *exc_o = Py_None;
    PyObject *ren_o = Py_None, *key_o = Py_None, *prog_o = Py_None, *result = NULL;
    unsigned long long max_shard = 0;
    unsigned int flags = 0;
    int jobs = 1, part_index = 0, part_count = 0, finish = 0, rc;
    long long step = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&|KOOOOIiiiLOOp", kwlist, PyUnicode_FSConverter,
                                     &src_o, PyUnicode_FSConverter, &dst_o, &max_shard, &dtype_o,
                                     &inc_o, &exc_o, &ren_o, &flags, &jobs, &part_index,
                                     &part_count, &step, &key_o, &prog_o, &finish))
        return NULL;
    shs_merge_opts o = SHS_MERGE_OPTS_INIT;
    shs_merge_result r = SHS_MERGE_RESULT_INIT;
    progress_ctx pc = { NULL, NULL, NULL, NULL };
    Py_buffer key = { 0 };
    const char **inc = NULL, **exc = NULL, **ren = NULL;
    if (str_array(inc_o, &inc, &o.n_include, "include") < 0 ||
        str_array(exc_o, &exc, &o.n_exclude, "exclude") < 0 ||
        str_array(ren_o, &ren, &o.n_rename, "rename") < 0 || key_arg(key_o, &key) < 0)
        goto done;
    if (dtype_o != Py_None) {
        Py_ssize_t len;
        const char *d = pyshs_utf8(dtype_o, &len, "dtype");
        shs_dtype dt;
        if (!d)
            goto done;
        if ((rc = shs_dtype_parse_alias(&dt, d)) < 0) {
            pyshs_raise(rc);
            goto done;
        }
        o.dtype = (int)dt;
    }
    o.flags = flags;
    o.max_shard_size = max_shard;
    o.include = inc;
    o.exclude = exc;
    o.rename = ren;
    o.jobs = jobs;
    o.part_index = part_index;
    o.part_count = part_count;
    o.step = step;
    o.key = key.buf;
    o.key_len = (size_t)key.len;
    if (prog_o != Py_None) {
        pc.fn = prog_o;
        o.progress = progress_cb;
        o.progress_ctx = &pc;
    }
    const char *src = PyBytes_AS_STRING(src_o), *dst = PyBytes_AS_STRING(dst_o);
    Py_BEGIN_ALLOW_THREADS;
    rc = finish ? shs_merge_finish(&r, src, dst, &o) : shs_merge(&r, src, dst, &o);
    Py_END_ALLOW_THREADS;
    if (pc.exc_type) {
        PyErr_Restore(pc.exc_type, pc.exc_value, pc.exc_tb); /* the callback's own error */
        goto done;
    }
    if (rc < 0) {
        pyshs_raise(rc);
        goto done;
    }
    result = Py_BuildValue("{snsnsKsnsK}", "n_tensors", (Py_ssize_t)r.n_tensors, "n_files",
                           (Py_ssize_t)r.n_files, "total_size", (unsigned long long)r.total_size,
                           "files_written", (Py_ssize_t)r.files_written, "bytes_written",
                           (unsigned long long)r.bytes_written);
done:
    if (key.obj)
        PyBuffer_Release(&key);
    PyMem_Free(inc);
    PyMem_Free(exc);
    PyMem_Free(ren);
    Py_DECREF(src_o);
    Py_DECREF(dst_o);
    return result;
}

/* reshard(src, dst, layout, world_size, step, prefix, fsync, key) -> dict */
static PyObject *py_reshard(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "src",    "dst",   "layout", "world_size", "step",
                              "prefix", "fsync", "key",    NULL };
    PyObject *src_o, *dst_o, *layout_o = Py_None, *prefix_o = Py_None, *key_o = Py_None;
    PyObject *layout_b = NULL, *result = NULL;
    int world_size = 0, fsync = 1, rc;
    long long step = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&|OiLOpO", kwlist, PyUnicode_FSConverter, &src_o,
                                     PyUnicode_FSConverter, &dst_o, &layout_o, &world_size, &step,
                                     &prefix_o, &fsync, &key_o))
        return NULL;
    shs_reshard_opts o = SHS_RESHARD_OPTS_INIT;
    shs_reshard_result r = SHS_RESHARD_RESULT_INIT;
    Py_buffer key = { 0 };
    Py_ssize_t plen;
    if (layout_o != Py_None && !PyUnicode_FSConverter(layout_o, &layout_b))
        goto done;
    if (prefix_o != Py_None && !(o.prefix = pyshs_utf8(prefix_o, &plen, "prefix")))
        goto done;
    if (key_arg(key_o, &key) < 0)
        goto done;
    o.world_size = world_size;
    o.step = step;
    o.fsync = fsync;
    o.key = key.buf;
    o.key_len = (size_t)key.len;
    const char *src = PyBytes_AS_STRING(src_o), *dst = PyBytes_AS_STRING(dst_o);
    const char *layout = layout_b ? PyBytes_AS_STRING(layout_b) : NULL;
    Py_BEGIN_ALLOW_THREADS;
    rc = shs_reshard(&r, src, dst, layout, &o);
    Py_END_ALLOW_THREADS;
    if (rc < 0) {
        pyshs_raise(rc);
        goto done;
    }
    result = Py_BuildValue("{sisisLsnsKsKsnsnsOsO}", "world_size", r.world_size, "saved_world_size",
                           r.saved_world_size, "step", (long long)r.step, "n_tensors",
                           (Py_ssize_t)r.n_tensors, "bytes_read", (unsigned long long)r.bytes_read,
                           "bytes_written", (unsigned long long)r.bytes_written, "blobs_carried",
                           (Py_ssize_t)r.blobs_carried, "blobs_dropped",
                           (Py_ssize_t)r.blobs_dropped, "scaled", r.scaled ? Py_True : Py_False,
                           "layout_recorded", r.layout_recorded ? Py_True : Py_False);
done:
    if (key.obj)
        PyBuffer_Release(&key);
    Py_XDECREF(layout_b);
    Py_DECREF(src_o);
    Py_DECREF(dst_o);
    return result;
}

/* saved_layout(src, step=-1) -> the layout document (str) */
static PyObject *py_saved_layout(PyObject *self, PyObject *args)
{
    PyObject *src_o;
    long long step = -1;
    if (!PyArg_ParseTuple(args, "O&|L", PyUnicode_FSConverter, &src_o, &step))
        return NULL;
    char *text = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = shs_reshard_saved_layout(&text, PyBytes_AS_STRING(src_o), step);
    Py_END_ALLOW_THREADS;
    Py_DECREF(src_o);
    if (rc < 0)
        return pyshs_raise(rc);
    PyObject *out = PyUnicode_FromString(text);
    shs_free(text);
    return out;
}

static PyObject *py_parse_size(PyObject *self, PyObject *arg)
{
    Py_ssize_t len;
    const char *s = pyshs_utf8(arg, &len, "size");
    if (!s)
        return NULL;
    uint64_t v;
    int rc = strlen(s) != (size_t)len ? SHS_EINVAL : shs_parse_size(&v, s);
    if (rc < 0)
        return pyshs_raise(rc);
    return PyLong_FromUnsignedLongLong(v);
}

/* key_load(key_file, key_env) -> 32 bytes (exactly one of them not None) */
static PyObject *py_key_load(PyObject *self, PyObject *args)
{
    PyObject *file_o, *env_o, *file_b = NULL;
    if (!PyArg_ParseTuple(args, "OO", &file_o, &env_o))
        return NULL;
    if (file_o != Py_None && !PyUnicode_FSConverter(file_o, &file_b))
        return NULL;
    Py_ssize_t len;
    const char *env = env_o == Py_None ? NULL : pyshs_utf8(env_o, &len, "key_env");
    if (env_o != Py_None && !env) {
        Py_XDECREF(file_b);
        return NULL;
    }
    unsigned char key[SHS_KEY_BYTES];
    int rc = shs_key_load(key, file_b ? PyBytes_AS_STRING(file_b) : NULL, env);
    Py_XDECREF(file_b);
    if (rc < 0)
        return pyshs_raise(rc);
    PyObject *out = PyBytes_FromStringAndSize((const char *)key, sizeof key);
    memset(key, 0, sizeof key);
    return out;
}

static PyMethodDef tools_methods[] = {
    { "merge", (PyCFunction)(void (*)(void))py_merge, METH_VARARGS | METH_KEYWORDS,
      "merge(src, dst, ...) -> result dict (shs_merge / shs_merge_finish)" },
    { "reshard", (PyCFunction)(void (*)(void))py_reshard, METH_VARARGS | METH_KEYWORDS,
      "reshard(src, dst, layout=None, ...) -> result dict (shs_reshard)" },
    { "saved_layout", py_saved_layout, METH_VARARGS,
      "saved_layout(src, step=-1) -> layout document (shs_reshard_saved_layout)" },
    { "parse_size", py_parse_size, METH_O, "parse_size('5GB') -> bytes (shs_parse_size)" },
    { "key_load", py_key_load, METH_VARARGS, "key_load(key_file, key_env) -> 32-byte key" },
    { NULL, NULL, 0, NULL }
};

int pyshs_tools_init(PyObject *module)
{
    if (PyModule_AddFunctions(module, tools_methods) < 0 ||
        PyModule_AddIntConstant(module, "MERGE_FORCE", SHS_MERGE_FORCE) < 0 ||
        PyModule_AddIntConstant(module, "MERGE_WITH_OPTIMIZER", SHS_MERGE_WITH_OPTIMIZER) < 0 ||
        PyModule_AddIntConstant(module, "MERGE_FSYNC", SHS_MERGE_FSYNC) < 0)
        return -1;
    return 0;
}
