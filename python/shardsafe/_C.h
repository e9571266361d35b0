/*
 * _C.h -- shared by the C files of the extension module shardsafe._C.
 * Private to the binding: the Python API is in shardsafe/__init__.py.
 */
#ifndef SHARDSAFE_PY_C_H
#define SHARDSAFE_PY_C_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "shardsafe.h"

/* Raise the Python exception for library status `status` (< 0) with the
   calling thread's shs_last_error() (or shs_strerror when that is empty).
   Returns NULL, for `return pyshs_raise(rc);`. */
PyObject *pyshs_raise(int status);
/* Raise the exception class of `status` with a message of the binding. */
PyObject *pyshs_raise_msg(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A Python str -> UTF-8 bytes (borrowed from the str; NULL + exception). */
const char *pyshs_utf8(PyObject *str, Py_ssize_t *len, const char *what);

/* A sequence of non-negative ints -> uint64 array of exactly `ndim`
   entries (ndim <= SHS_MAX_DIMS). */
int pyshs_u64_seq(PyObject *seq, uint64_t *out, size_t ndim, const char *what);

/* tuple of ints from `n` uint64. */
PyObject *pyshs_shape_tuple(const uint64_t *shape, size_t n);

/* Get a C-contiguous buffer of exactly `len` bytes (writable or not). */
int pyshs_get_buffer(PyObject *obj, Py_buffer *view, size_t len, int writable, const char *what);

int pyshs_file_init_type(PyObject *module);
int pyshs_ckpt_init_type(PyObject *module);
int pyshs_manager_init_type(PyObject *module);
int pyshs_tools_init(PyObject *module);
PyObject *pyshs_save_file(PyObject *self, PyObject *args, PyObject *kw);

#endif
