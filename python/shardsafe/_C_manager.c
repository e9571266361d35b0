/*
 * _C_manager.c -- shardsafe._C.Manager: one process's checkpoint manager
 * (shs_config + shs_state + shs_manager) for Python.  The registered
 * tensors' memory is the caller's: the manager holds a writable buffer of
 * each (so it stays alive) and saves from / loads into it in place.
 */
#include "_C.h"
#include "_C_comm.h"

#include <string.h>

typedef struct {
    PyObject_HEAD shs_config cfg;
    int cfg_ready;
    shs_state *state;
    shs_manager *m;
    Py_buffer *bufs; /* one per registered tensor */
    size_t n_bufs;
    int busy;       /* a call is running without the GIL */
    PyObject *comm; /* shardsafe._C.Comm or NULL (one process) */
} ManagerObject;

/* Raise for status rc, adding the text of a failed collective of the
   Python communicator (the library only sees SHS_EIO). */
static PyObject *raise_rc(ManagerObject *self, int rc)
{
    char cerr[512];
    pyshs_comm_take_error(self->comm, cerr, sizeof cerr);
    if (!cerr[0])
        return pyshs_raise(rc);
    const char *msg = shs_last_error();
    return pyshs_raise_msg(rc, "%s (%s)", msg && *msg ? msg : shs_strerror(rc), cerr);
}

static void manager_release(ManagerObject *self)
{
    if (self->m) {
        Py_BEGIN_ALLOW_THREADS;
        shs_manager_free(self->m); /* waits for an async save in flight */
        Py_END_ALLOW_THREADS;
        self->m = NULL;
    }
    shs_state_free(self->state);
    self->state = NULL;
    for (size_t i = 0; i < self->n_bufs; i++)
        PyBuffer_Release(&self->bufs[i]);
    PyMem_Free(self->bufs);
    self->bufs = NULL;
    self->n_bufs = 0;
    if (self->cfg_ready)
        shs_config_release(&self->cfg);
    self->cfg_ready = 0;
    Py_CLEAR(self->comm);
}

/* config: list of (key, value) strings, set in order */
static int apply_config(ManagerObject *self, PyObject *yaml, PyObject *items)
{
    int rc;
    if (yaml != Py_None) {
        PyObject *path = NULL;
        if (!PyUnicode_FSConverter(yaml, &path))
            return -1;
        rc = shs_config_load_yaml(&self->cfg, PyBytes_AS_STRING(path));
        Py_DECREF(path);
        if (rc < 0)
            return pyshs_raise(rc), -1;
    }
    PyObject *fast = PySequence_Fast(items, "config must be a sequence of (key, value)");
    if (!fast)
        return -1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++) {
        const char *k, *v;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "ss", &k, &v)) {
            Py_DECREF(fast);
            return -1;
        }
        if ((rc = shs_config_set(&self->cfg, k, v)) < 0) {
            Py_DECREF(fast);
            return pyshs_raise(rc), -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

/* tensors: list of (name, kind 0/1, dtype, shape, writable buffer, master_of|None,
   global_shape|None, global_offset|None) */
static int register_tensors(ManagerObject *self, PyObject *tensors)
{
    PyObject *fast = PySequence_Fast(tensors, "tensors must be a sequence");
    if (!fast)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    int rc = -1;
    self->bufs = PyMem_Calloc((size_t)n + 1, sizeof *self->bufs);
    if (!self->bufs) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *name, *dname, *master;
        int kind;
        PyObject *shape_o, *buf_o, *gshape_o = Py_None, *goff_o = Py_None;
        uint64_t shape[SHS_MAX_DIMS], gshape[SHS_MAX_DIMS], goff[SHS_MAX_DIMS], nbytes;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "sisOOz|OO", &name, &kind, &dname,
                              &shape_o, &buf_o, &master, &gshape_o, &goff_o))
            goto done;
        shs_tensor_spec spec = SHS_TENSOR_SPEC_INIT;
        Py_ssize_t ndim = PySequence_Size(shape_o);
        int st = shs_dtype_parse(&spec.dtype, dname, strlen(dname));
        if (st < 0) {
            pyshs_raise(st);
            goto done;
        }
        if (ndim < 0 || ndim > SHS_MAX_DIMS ||
            pyshs_u64_seq(shape_o, shape, (size_t)ndim, "shape") < 0)
            goto done;
        if (gshape_o != Py_None &&
            pyshs_u64_seq(gshape_o, gshape, (size_t)ndim, "global_shape") < 0)
            goto done;
        if (goff_o != Py_None && pyshs_u64_seq(goff_o, goff, (size_t)ndim, "offsets") < 0)
            goto done;
        if ((st = shs_tensor_nbytes(&nbytes, spec.dtype, (size_t)ndim, shape)) < 0) {
            pyshs_raise(st);
            goto done;
        }
        if (pyshs_get_buffer(buf_o, &self->bufs[i], (size_t)nbytes, 1, name) < 0)
            goto done;
        self->n_bufs++;
        spec.name = name;
        spec.kind = kind ? SHS_KIND_OPTIMIZER : SHS_KIND_MODEL;
        spec.ndim = (size_t)ndim;
        spec.shape = shape;
        spec.data = self->bufs[i].buf;
        spec.master_of = master;
        spec.global_shape = gshape_o != Py_None ? gshape : NULL;
        spec.global_offset = goff_o != Py_None ? goff : NULL;
        if ((st = shs_state_add_tensor(self->state, &spec)) < 0) {
            pyshs_raise(st);
            goto done;
        }
    }
    rc = 0;
done:
    Py_DECREF(fast);
    return rc;
}

static int Manager_init(ManagerObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "config", "yaml", "tensors", "comm", "async_comm", NULL };
    PyObject *items, *yaml, *tensors, *comm_o = Py_None, *async_fn = Py_None;
    shs_comm *comm = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|OO", kwlist, &items, &yaml, &tensors, &comm_o,
                                     &async_fn))
        return -1;
    if (comm_o != Py_None && !(comm = pyshs_comm_get(comm_o)))
        return -1;
    if (self->cfg_ready) {
        PyErr_SetString(PyExc_ValueError, "Manager: already initialised");
        return -1;
    }
    shs_config_init(&self->cfg);
    self->cfg_ready = 1;
    int rc = shs_state_create(&self->state);
    if (rc < 0)
        return pyshs_raise(rc), -1;
    if (apply_config(self, yaml, items) < 0 || register_tensors(self, tensors) < 0)
        goto fail;
    if (comm && async_fn != Py_None) {
        /* async_comm(wants_async) -- collective, on every rank: a
           communicator of its own channel (a new process group, a
           duplicated MPI communicator) for the library's async worker, or
           None.  The manager then runs all its collectives there, never
           interleaved with the training loop's on the caller's group. */
        PyObject *ac = PyObject_CallFunction(async_fn, "i", self->cfg.async_save ? 1 : 0);
        if (!ac)
            goto fail;
        if (ac != Py_None) {
            shs_comm *acomm = pyshs_comm_get(ac);
            if (!acomm) {
                Py_DECREF(ac);
                goto fail;
            }
            comm = acomm;
            self->comm = ac; /* our reference */
        } else {
            Py_DECREF(ac);
        }
    }
    if (comm) {
        /* Without a channel of its own, the library's async worker would
           run collectives on its own thread, interleaved with the training
           loop's own collectives on the same process group: saves are then
           synchronous (docs/python.md). */
        if (self->cfg.async_save && !self->comm) {
            if (PyErr_WarnEx(PyExc_RuntimeWarning,
                             "shardsafe: async_save is off: the communicator has no channel "
                             "of its own for the background save (for_async() gave None): "
                             "saves are synchronous",
                             1) < 0)
                goto fail;
            if ((rc = shs_config_set(&self->cfg, "async_save", "false")) < 0) {
                pyshs_raise(rc);
                goto fail;
            }
        }
        if (!self->comm) {
            Py_INCREF(comm_o);
            self->comm = comm_o;
        }
    }
    Py_BEGIN_ALLOW_THREADS;
    rc = comm ? shs_manager_create_comm(&self->m, &self->cfg, self->state, comm)
              : shs_manager_create(&self->m, &self->cfg, self->state);
    Py_END_ALLOW_THREADS;
    if (rc < 0) {
        raise_rc(self, rc);
        goto fail;
    }
    return 0;
fail:
    manager_release(self);
    return -1;
}

static void Manager_dealloc(ManagerObject *self)
{
    manager_release(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int enter(ManagerObject *self)
{
    if (!self->m)
        return pyshs_raise_msg(SHS_ESTATE, "the checkpoint manager is closed"), -1;
    if (self->busy)
        return pyshs_raise_msg(SHS_ESTATE, "the checkpoint manager is in use by another thread"),
               -1;
    self->busy = 1;
    return 0;
}

static int progress_from(shs_progress *p, PyObject *d)
{
    static const char *ints[] = { "epoch_num",         "step_num",         "global_step",
                                  "global_batch_size", "consumed_samples", NULL };
    int64_t *dst[] = { &p->epoch_num,         &p->step_num,         &p->global_step,
                       &p->global_batch_size, &p->consumed_samples, NULL };
    if (!PyDict_Check(d))
        return pyshs_raise_msg(SHS_EINVAL, "progress must be a dict"), -1;
    for (int i = 0; ints[i]; i++) {
        PyObject *v = PyDict_GetItemString(d, ints[i]);
        if (v && (*dst[i] = PyLong_AsLongLong(v)) == -1 && PyErr_Occurred())
            return -1;
    }
    PyObject *ls = PyDict_GetItemString(d, "loss_scale");
    if (ls && (p->loss_scale = PyFloat_AsDouble(ls)) == -1.0 && PyErr_Occurred())
        return -1;
    PyObject *cs = PyDict_GetItemString(d, "ckpt_status");
    if (cs && cs != Py_None) {
        Py_ssize_t len;
        const char *s = pyshs_utf8(cs, &len, "ckpt_status");
        if (!s)
            return -1;
        if ((size_t)len >= sizeof p->ckpt_status)
            return pyshs_raise_msg(SHS_EINVAL, "ckpt_status longer than %zu bytes",
                                   sizeof p->ckpt_status - 1),
                   -1;
        memcpy(p->ckpt_status, s, (size_t)len + 1);
    }
    return 0;
}

static PyObject *progress_to(const shs_progress *p)
{
    return Py_BuildValue(
        "{sLsLsLsdsLsLsz}", "epoch_num", (long long)p->epoch_num, "step_num",
        (long long)p->step_num, "global_step", (long long)p->global_step, "loss_scale",
        p->loss_scale, "global_batch_size", (long long)p->global_batch_size, "consumed_samples",
        (long long)p->consumed_samples, "ckpt_status", p->ckpt_status[0] ? p->ckpt_status : NULL);
}

/* load(progress) -> (progress, result dict) */
static PyObject *Manager_load(ManagerObject *self, PyObject *d)
{
    shs_progress p = SHS_PROGRESS_INIT;
    shs_load_result r = SHS_LOAD_RESULT_INIT;
    if (progress_from(&p, d) < 0 || enter(self) < 0)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = shs_manager_load(&r, self->m, &p);
    Py_END_ALLOW_THREADS;
    self->busy = 0;
    if (rc < 0)
        return raise_rc(self, rc);
    PyObject *skipped = PyList_New((Py_ssize_t)r.n_skipped);
    for (size_t i = 0; skipped && i < r.n_skipped; i++) {
        PyObject *s = PyUnicode_FromString(r.skipped[i]);
        if (!s) {
            Py_CLEAR(skipped);
            break;
        }
        PyList_SET_ITEM(skipped, (Py_ssize_t)i, s);
    }
    if (!skipped)
        return NULL;
    static const char *sources[] = { "none", "save_path", "load_path", "initial_load_path",
                                     "seed" };
    PyObject *res = Py_BuildValue(
        "{sOsssssLsOsOsOsOsisKsNsOsOsOss}", "loaded", r.loaded ? Py_True : Py_False, "source",
        r.source >= 0 && r.source <= 4 ? sources[r.source] : "?", "path", r.path ? r.path : "",
        "step", (long long)r.step, "optimizer_loaded", r.optimizer_loaded ? Py_True : Py_False,
        "progress_loaded", r.progress_loaded ? Py_True : Py_False, "batch_size_changed",
        r.batch_size_changed ? Py_True : Py_False, "rank_state_restored",
        r.rank_state_restored ? Py_True : Py_False, "saved_world_size", r.saved_world_size,
        "bytes_read", (unsigned long long)r.bytes_read, "skipped", skipped, "fell_back",
        r.fell_back ? Py_True : Py_False, "tracker_repaired",
        r.tracker_repaired ? Py_True : Py_False, "consumed_samples_derived",
        r.consumed_samples_derived ? Py_True : Py_False, "message", r.message ? r.message : "");
    if (!res)
        return NULL;
    PyObject *prog = progress_to(&p);
    if (!prog) {
        Py_DECREF(res);
        return NULL;
    }
    return Py_BuildValue("(NN)", prog, res);
}

/* step(progress) -> bool saved; save(progress, flags); finish(progress) */
static PyObject *Manager_call(ManagerObject *self, PyObject *args)
{
    PyObject *d;
    int what;
    unsigned flags = 0;
    if (!PyArg_ParseTuple(args, "iO|I", &what, &d, &flags))
        return NULL;
    shs_progress p = SHS_PROGRESS_INIT;
    if (progress_from(&p, d) < 0 || enter(self) < 0)
        return NULL;
    int rc, saved = 0;
    Py_BEGIN_ALLOW_THREADS;
    if (what == 0)
        rc = shs_manager_step(&saved, self->m, &p);
    else if (what == 1)
        rc = shs_manager_save(self->m, &p, flags);
    else
        rc = shs_manager_finish(self->m, &p);
    Py_END_ALLOW_THREADS;
    self->busy = 0;
    if (rc < 0)
        return raise_rc(self, rc);
    return PyBool_FromLong(saved);
}

/* wait() / fence() */
static PyObject *Manager_wait(ManagerObject *self, PyObject *arg)
{
    int fence = PyObject_IsTrue(arg);
    if (fence < 0 || enter(self) < 0)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = fence ? shs_manager_fence(self->m) : shs_manager_wait(self->m);
    Py_END_ALLOW_THREADS;
    self->busy = 0;
    if (rc < 0)
        return raise_rc(self, rc);
    Py_RETURN_NONE;
}

static PyObject *Manager_set_blob(ManagerObject *self, PyObject *args)
{
    const char *name;
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "sy*", &name, &b))
        return NULL;
    int rc = self->m ? shs_state_set_blob(self->state, name, b.buf, (size_t)b.len) : SHS_ESTATE;
    PyBuffer_Release(&b);
    if (rc == SHS_ESTATE && !self->m)
        return pyshs_raise_msg(rc, "the checkpoint manager is closed");
    if (rc < 0)
        return pyshs_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *Manager_get_blob(ManagerObject *self, PyObject *arg)
{
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    if (!self->m)
        return pyshs_raise_msg(SHS_ESTATE, "the checkpoint manager is closed");
    const void *data;
    size_t len;
    int rc = shs_state_get_blob(self->state, name, &data, &len);
    if (rc == SHS_ENOTFOUND)
        Py_RETURN_NONE;
    if (rc < 0)
        return pyshs_raise(rc);
    return PyBytes_FromStringAndSize(data, (Py_ssize_t)len);
}

static PyObject *Manager_last_save(ManagerObject *self, PyObject *unused)
{
    if (!self->m)
        return pyshs_raise_msg(SHS_ESTATE, "the checkpoint manager is closed");
    shs_save_stats s = SHS_SAVE_STATS_INIT;
    int rc = shs_manager_last_save(&s, self->m);
    if (rc == SHS_ENOTFOUND || rc == SHS_ENOCHECKPOINT)
        Py_RETURN_NONE;
    if (rc < 0)
        return pyshs_raise(rc);
    const char *w = shs_manager_warning(self->m);
    return Py_BuildValue("{sLsKsKsKsdsdsnsz}", "step", (long long)s.step, "state_bytes",
                         (unsigned long long)s.state_bytes, "bytes_written",
                         (unsigned long long)s.bytes_written, "bytes_linked",
                         (unsigned long long)s.bytes_linked, "blocked_seconds", s.blocked_seconds,
                         "total_seconds", s.total_seconds, "retention_failures",
                         (Py_ssize_t)s.retention_failures, "warning", w);
}

static PyObject *Manager_close(ManagerObject *self, PyObject *unused)
{
    if (self->busy)
        return pyshs_raise_msg(SHS_ESTATE, "the checkpoint manager is in use by another thread");
    manager_release(self);
    Py_RETURN_NONE;
}

static PyMethodDef Manager_methods[] = {
    { "load", (PyCFunction)Manager_load, METH_O, "load(progress) -> (progress, result)" },
    { "call", (PyCFunction)Manager_call, METH_VARARGS,
      "call(0: step / 1: save / 2: finish, progress, flags=0) -> saved" },
    { "wait", (PyCFunction)Manager_wait, METH_O, "wait(fence: bool)" },
    { "set_blob", (PyCFunction)Manager_set_blob, METH_VARARGS, "set_blob(name, bytes)" },
    { "get_blob", (PyCFunction)Manager_get_blob, METH_O, "get_blob(name) -> bytes or None" },
    { "last_save", (PyCFunction)Manager_last_save, METH_NOARGS, "stats of the last save" },
    { "close", (PyCFunction)Manager_close, METH_NOARGS, "wait and free" },
    { NULL, NULL, 0, NULL }
};

static PyTypeObject Manager_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shardsafe._C.Manager",
    .tp_basicsize = sizeof(ManagerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Manager(config, yaml, tensors): shs_manager over registered buffers",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Manager_init,
    .tp_dealloc = (destructor)Manager_dealloc,
    .tp_methods = Manager_methods,
};

int pyshs_manager_init_type(PyObject *module)
{
    if (PyType_Ready(&Manager_Type) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "Manager", (PyObject *)&Manager_Type);
}
