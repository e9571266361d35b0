/*
 * manager.c -- the checkpoint policy of a training run (MindSpore
 * Transformers' CheckpointCallback + Trainer loading, torchtitan's
 * CheckpointManager): when to save, what to keep, what to load, and the
 * asynchronous save pipeline.
 *
 * Async save: one background thread and one job slot.  A save copies the
 * registered tensors into staging buffers (allocated once per layout,
 * pre-faulted) -- in the caller's thread, or with SHS_SAVE_DEFER_SNAPSHOT
 * in the worker while the caller runs compute that only reads the state
 * (shs_manager_fence() waits for the copy) -- then the worker writes and
 * commits.  A new save first waits for the one in flight; the error of a
 * background save is reported by the next call.
 */
#include "checkpoint.h"

#include "comm.h"
#include "io.h"
#include "lock.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef struct job {
    shs_progress progress;
    int64_t step;
    int with_optim;
    int defer_snapshot;
    size_t split;            /* caller copies [0, split), the worker the rest */
    shs__blob *blobs;        /* snapshot of the state's blobs */
    size_t n_blobs;
} job;

struct shs_manager {
    shs_config cfg;          /* strings below are the manager's copies */
    char *save_path, *prefix, *load_path, *initial_load_path;
    shs_state *state;
    shs_comm *comm;          /* every rank calls the manager collectively */
    shs_comm *own_comm;      /* the one-process comm when none was given */
    shs_savepath_lock_handle *lock; /* rank 0 of a saving manager: one writer per
                                save path */
    int keep;                /* retention: 0 = keep all */
    shs__layout_cache layout_cache;

    int64_t *run_steps;      /* this run's committed saves, oldest first */
    size_t n_run, cap_run;
    int64_t last_saved_step; /* -1: none yet */
    char last_dir[4096];     /* this run's newest committed save */
    shs_save_stats last_stats;
    int has_stats;
    double blocked_seconds;  /* of the save in flight (guarded by mu) */

    /* async */
    int async;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int busy;                /* a job is queued or running */
    int snapshot_done;       /* the worker's part of the snapshot is taken */
    int caller_done;         /* the caller's part is taken */
    int stop;
    job cur;
    int bg_status;           /* error of the last background save */
    char bg_msg[1024];
    void **staging;          /* per tensor */
    char *staging_mem;
    uint64_t staging_bytes;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void free_blobs(shs__blob *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        shs__free(b[i].name);
        shs__free(b[i].data);
    }
    shs__free(b);
}

static int snapshot_blobs(shs_manager *m, shs__blob **out, size_t *n)
{
    const shs_state *st = m->state;
    *out = NULL;
    *n = 0;
    if (!st->nb)
        return SHS_OK;
    shs__blob *b = shs__calloc(st->nb, sizeof *b);
    if (!b)
        return shs__err(SHS_ENOMEM, "out of memory copying blobs");
    for (size_t i = 0; i < st->nb; i++) {
        b[i].name = shs__strdup(st->b[i].name);
        b[i].data = shs__malloc(st->b[i].len ? st->b[i].len : 1);
        b[i].len = st->b[i].len;
        if (!b[i].name || !b[i].data) {
            free_blobs(b, st->nb);
            return shs__err(SHS_ENOMEM, "out of memory copying blobs");
        }
        memcpy(b[i].data, st->b[i].data, st->b[i].len);
    }
    *out = b;
    *n = st->nb;
    return SHS_OK;
}

/* ------------------------------------------------------------------ */
/* Retention                                                          */
/* ------------------------------------------------------------------ */

static int remember_save(shs_manager *m, int64_t step)
{
    for (size_t i = 0; i < m->n_run; i++)
        if (m->run_steps[i] == step) {
            /* re-saved: it is now the newest */
            memmove(&m->run_steps[i], &m->run_steps[i + 1],
                    (m->n_run - i - 1) * sizeof *m->run_steps);
            m->n_run--;
            break;
        }
    if (m->n_run == m->cap_run) {
        size_t cap = m->cap_run ? m->cap_run * 2 : 16;
        int64_t *v = shs__realloc(m->run_steps, cap * sizeof *v);
        if (!v)
            return shs__err(SHS_ENOMEM, "out of memory");
        m->run_steps = v;
        m->cap_run = cap;
    }
    m->run_steps[m->n_run++] = step;
    return SHS_OK;
}

/* Delete this run's oldest saves beyond `keep`; never another run's, never
   the newest committed one (keep >= 1). */
static int apply_retention(shs_manager *m)
{
    int rc = SHS_OK;
    while (m->keep > 0 && m->n_run > (size_t)m->keep) {
        int64_t victim = m->run_steps[0];
        memmove(&m->run_steps[0], &m->run_steps[1], (m->n_run - 1) * sizeof *m->run_steps);
        m->n_run--;
        int r = m->comm->rank == 0 ? shs__remove_step(m->save_path, victim) : SHS_OK;
        if (r < 0 && rc == SHS_OK)
            rc = r;
    }
    return rc;
}

/* ------------------------------------------------------------------ */
/* Saving                                                             */
/* ------------------------------------------------------------------ */

static int do_save(shs_manager *m, const job *j, void *const *data)
{
    double t0 = now_s();
    shs__save_req req = {
        .save_path = m->save_path,
        .step = j->step,
        .prefix = m->prefix,
        .rank = m->comm->rank,
        .world_size = m->comm->size,
        .with_optim = j->with_optim,
        .fsync = m->cfg.fsync,
        .incremental = m->cfg.incremental,
        .prev_dir = m->last_dir[0] ? m->last_dir : NULL,
        .progress = &j->progress,
        .data = data,
        .blobs = j->blobs,
        .n_blobs = j->n_blobs,
        .remove_redundancy = m->cfg.remove_redundancy,
        .layout_cache = m->cfg.save_global_layout_cache ? &m->layout_cache : NULL,
    };
    shs_save_stats s;
    char dir[4096];
    int rc = shs__ckpt_save(m->state, &req, m->comm, &s, dir, sizeof dir);
    if (rc < 0)
        return rc;
    snprintf(m->last_dir, sizeof m->last_dir, "%s", dir);
    m->last_saved_step = j->step;
    s.total_seconds = now_s() - t0;
    pthread_mutex_lock(&m->mu);
    s.blocked_seconds = m->blocked_seconds; /* measured by the caller */
    m->last_stats = s;
    m->has_stats = 1;
    pthread_mutex_unlock(&m->mu);
    /* every rank hears if one failed its bookkeeping (comm.h): retention
       that follows is collective */
    char msg[256];
    rc = remember_save(m, j->step);
    snprintf(msg, sizeof msg, "%s", shs_last_error());
    if ((rc = shs__comm_agree(m->comm, rc, msg)) < 0)
        return rc;
    return apply_retention(m);
}

static int ensure_staging(shs_manager *m)
{
    const shs_state *st = m->state;
    uint64_t total = 0;
    for (size_t i = 0; i < st->n; i++)
        total += (st->t[i].nbytes + 63) & ~(uint64_t)63;
    if (m->staging && m->staging_bytes == total)
        return SHS_OK;
    shs__free(m->staging);
    shs__free(m->staging_mem);
    m->staging = shs__calloc(st->n + 1, sizeof *m->staging);
    m->staging_mem = total ? shs__malloc((size_t)total) : NULL;
    if (!m->staging || (total && !m->staging_mem)) {
        shs__free(m->staging);
        shs__free(m->staging_mem);
        m->staging = NULL;
        m->staging_mem = NULL;
        return shs__err(SHS_ENOMEM, "out of memory for %llu bytes of async staging buffers",
                        (unsigned long long)total);
    }
    /* pre-fault once so later snapshots are plain memory copies */
    if (total)
        memset(m->staging_mem, 0, (size_t)total);
    uint64_t at = 0;
    for (size_t i = 0; i < st->n; i++) {
        m->staging[i] = m->staging_mem + at;
        at += (st->t[i].nbytes + 63) & ~(uint64_t)63;
    }
    m->staging_bytes = total;
    return SHS_OK;
}

/* Copy tensors [from, to) into the staging buffers. */
static void snapshot_tensors(shs_manager *m, int with_optim, size_t from, size_t to)
{
    const shs_state *st = m->state;
    for (size_t i = from; i < to; i++)
        if (st->t[i].nbytes && (st->t[i].kind == SHS_KIND_MODEL || with_optim))
            memcpy(m->staging[i], st->t[i].data, (size_t)st->t[i].nbytes);
}

/* Index splitting the tensors into two halves of about equal bytes, so the
   caller's thread and the worker copy one half each. */
static size_t half_split(const shs_state *st)
{
    uint64_t total = 0, acc = 0;
    for (size_t i = 0; i < st->n; i++)
        total += st->t[i].nbytes;
    size_t i = 0;
    while (i < st->n && acc + st->t[i].nbytes / 2 < total / 2)
        acc += st->t[i++].nbytes;
    return i;
}

static void *worker_main(void *arg)
{
    shs_manager *m = arg;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        while (!m->stop && !m->busy)
            pthread_cond_wait(&m->cv, &m->mu);
        if (m->stop && !m->busy)
            break;
        job j = m->cur;
        pthread_mutex_unlock(&m->mu);
        /* the whole snapshot (deferred), or the worker's half of it; then
           wait for the caller's half before reading the staging buffers */
        snapshot_tensors(m, j.with_optim, j.defer_snapshot ? 0 : j.split, m->state->n);
        pthread_mutex_lock(&m->mu);
        m->snapshot_done = 1;
        pthread_cond_broadcast(&m->cv);
        while (!m->caller_done)
            pthread_cond_wait(&m->cv, &m->mu);
        pthread_mutex_unlock(&m->mu);
        int rc = do_save(m, &j, m->staging);
        char msg[900];
        snprintf(msg, sizeof msg, "%s", rc < 0 ? shs_last_error() : "");
        free_blobs(j.blobs, j.n_blobs);
        pthread_mutex_lock(&m->mu);
        if (rc < 0 && m->bg_status == SHS_OK) {
            m->bg_status = rc;
            snprintf(m->bg_msg, sizeof m->bg_msg, "async save of step %lld failed: %s",
                     (long long)j.step, msg);
        }
        m->busy = 0;
        m->snapshot_done = 1;
        pthread_cond_broadcast(&m->cv);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* Wait for the save in flight; report (and clear) a background error. */
static int wait_idle(shs_manager *m)
{
    if (!m->thread_started)
        return SHS_OK;
    pthread_mutex_lock(&m->mu);
    while (m->busy)
        pthread_cond_wait(&m->cv, &m->mu);
    int rc = m->bg_status;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", m->bg_msg);
    m->bg_status = SHS_OK;
    m->bg_msg[0] = '\0';
    pthread_mutex_unlock(&m->mu);
    return rc < 0 ? shs__err(rc, "%s", msg) : SHS_OK;
}

int shs_manager_wait(shs_manager *m)
{
    if (!m)
        return shs__err(SHS_EINVAL, "manager is NULL");
    return wait_idle(m);
}

int shs_manager_fence(shs_manager *m)
{
    if (!m)
        return shs__err(SHS_EINVAL, "manager is NULL");
    if (!m->thread_started)
        return SHS_OK;
    pthread_mutex_lock(&m->mu);
    while (m->busy && !m->snapshot_done)
        pthread_cond_wait(&m->cv, &m->mu);
    pthread_mutex_unlock(&m->mu);
    return SHS_OK;
}

static int saving_enabled(const shs_manager *m)
{
    return m->cfg.enable_save && !m->cfg.load_only;
}

int shs_manager_save(shs_manager *m, const shs_progress *progress, unsigned flags)
{
    int rc;
    if (!m || !progress)
        return shs__err(SHS_EINVAL, "shs_manager_save: NULL argument");
    if (!saving_enabled(m))
        return shs__err(SHS_ESTATE, "saving is disabled (enable_save false or load_only true)");
    if (progress->global_step < 0)
        return shs__err(SHS_EINVAL, "global_step %lld is negative",
                        (long long)progress->global_step);
    double t0 = now_s();
    /* at most one save in flight; an earlier failure surfaces here */
    if ((rc = wait_idle(m)) < 0)
        return rc;
    job j = { 0 };
    j.progress = *progress;
    j.step = progress->global_step;
    j.with_optim = !m->cfg.no_save_optim && !(flags & SHS_SAVE_MODEL_ONLY) &&
                   !m->cfg.create_seed_checkpoint;
    if ((rc = snapshot_blobs(m, &j.blobs, &j.n_blobs)) < 0)
        return rc;
    if (!m->async) {
        rc = do_save(m, &j, NULL);
        free_blobs(j.blobs, j.n_blobs);
        m->last_stats.blocked_seconds = now_s() - t0; /* all of it */
        return rc;
    }
    if ((rc = ensure_staging(m)) < 0) {
        free_blobs(j.blobs, j.n_blobs);
        return rc;
    }
    j.defer_snapshot = (flags & SHS_SAVE_DEFER_SNAPSHOT) != 0;
    j.split = j.defer_snapshot ? 0 : half_split(m->state);
    if (!m->thread_started) {
        if (pthread_create(&m->thread, NULL, worker_main, m) != 0) {
            free_blobs(j.blobs, j.n_blobs);
            return shs__err(SHS_EIO, "cannot start the async save thread");
        }
        m->thread_started = 1;
    }
    pthread_mutex_lock(&m->mu);
    m->cur = j;
    m->busy = 1;
    m->snapshot_done = 0;
    m->caller_done = j.defer_snapshot;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    if (!j.defer_snapshot) {
        /* copy our half while the worker copies the other; return only
           when the whole snapshot is taken */
        snapshot_tensors(m, j.with_optim, 0, j.split);
        pthread_mutex_lock(&m->mu);
        m->caller_done = 1;
        pthread_cond_broadcast(&m->cv);
        while (!m->snapshot_done)
            pthread_cond_wait(&m->cv, &m->mu);
        pthread_mutex_unlock(&m->mu);
    }
    pthread_mutex_lock(&m->mu);
    m->blocked_seconds = now_s() - t0;
    pthread_mutex_unlock(&m->mu);
    return SHS_OK;
}

int shs_manager_step(shs_manager *m, const shs_progress *progress, int *saved)
{
    if (saved)
        *saved = 0;
    if (!m || !progress)
        return shs__err(SHS_EINVAL, "shs_manager_step: NULL argument");
    if (!saving_enabled(m))
        return SHS_OK;
    int64_t gs = progress->global_step;
    int due = (gs > 0 && gs % m->cfg.save_interleaved_steps == 0) ||
              (m->cfg.enable_first_step_checkpoint && gs == 1);
    if (!due) {
        /* still report a background failure as soon as it is known */
        if (m->thread_started) {
            pthread_mutex_lock(&m->mu);
            int rc = m->busy ? SHS_OK : m->bg_status;
            pthread_mutex_unlock(&m->mu);
            if (rc < 0)
                return wait_idle(m);
        }
        return SHS_OK;
    }
    int rc = shs_manager_save(m, progress, 0);
    if (rc == SHS_OK && saved)
        *saved = 1;
    return rc;
}

int shs_manager_finish(shs_manager *m, const shs_progress *progress)
{
    if (!m || !progress)
        return shs__err(SHS_EINVAL, "shs_manager_finish: NULL argument");
    int rc = wait_idle(m);
    if (rc < 0)
        return rc;
    if (!saving_enabled(m))
        return SHS_OK;
    if (m->last_saved_step != progress->global_step ||
        m->cfg.last_save_model_only /* the final save has another content */) {
        unsigned flags = m->cfg.last_save_model_only ? SHS_SAVE_MODEL_ONLY : 0;
        if ((rc = shs_manager_save(m, progress, flags)) < 0)
            return rc;
    }
    return wait_idle(m);
}

int shs_manager_last_save(const shs_manager *m, shs_save_stats *out)
{
    if (!m || !out)
        return shs__err(SHS_EINVAL, "NULL argument");
    shs_manager *mm = (shs_manager *)m;
    pthread_mutex_lock(&mm->mu);
    int has = m->has_stats;
    if (has)
        *out = m->last_stats;
    pthread_mutex_unlock(&mm->mu);
    return has ? SHS_OK : shs__err(SHS_ENOTFOUND, "no save committed yet");
}

/* ------------------------------------------------------------------ */
/* Loading                                                            */
/* ------------------------------------------------------------------ */

/* no_load_optim: fp32 master weights follow the loaded model weights. */
static int refresh_masters(shs_manager *m)
{
    shs_state *st = m->state;
    for (size_t i = 0; i < st->n; i++) {
        shs__tensor *t = &st->t[i];
        if (!t->master_of)
            continue;
        long j = shs__state_find(st, t->master_of, strlen(t->master_of));
        if (j < 0)
            return shs__err(SHS_EMISMATCH, "tensor '%s': master_of names '%s', which is not "
                            "registered", t->name, t->master_of);
        const shs__tensor *src = &st->t[j];
        int same = src->ndim == t->ndim;
        for (size_t d = 0; same && d < t->ndim; d++)
            same = src->shape[d] == t->shape[d] && src->goff[d] == t->goff[d];
        if (!same)
            return shs__err(SHS_EMISMATCH, "tensor '%s' and its model tensor '%s' have "
                            "different local shapes", t->name, src->name);
        uint64_t numel = 1;
        for (size_t d = 0; d < t->ndim; d++)
            numel *= t->shape[d];
        int rc = shs_convert(t->data, t->dtype, src->data, src->dtype, (size_t)numel);
        if (rc < 0)
            return shs__err_prefix(rc, t->name);
    }
    return SHS_OK;
}

/* 1: the save path holds a committed step; 0: it does not (or does not
   exist); < 0: it could not be read -- only ENOENT means "nothing there",
   an EIO must not make a crashed job start from scratch. */
static int has_checkpoint(const char *save_path)
{
    if (!save_path || !*save_path)
        return 0;
    struct stat st;
    if (shs__io->stat(save_path, &st) != 0)
        return errno == ENOENT ? 0 : shs__err_errno(errno, "cannot stat save path", save_path);
    int64_t *steps = NULL;
    size_t n = 0;
    int rc = shs__list_steps(&steps, &n, save_path);
    shs__free(steps);
    return rc < 0 ? rc : n > 0;
}

static int load_local(shs_manager *m, shs_progress *progress, shs_load_result *result);

int shs_manager_load(shs_manager *m, shs_progress *progress, shs_load_result *result)
{
    if (!m || !progress)
        return shs__err(SHS_EINVAL, "shs_manager_load: NULL argument");
    /* an async save in flight uses the communicator from its thread: let
       it finish before this thread's collectives */
    int rc = wait_idle(m);
    if (rc < 0)
        return rc;
    rc = load_local(m, progress, result);
    /* every rank hears if any rank failed */
    char msg[256];
    snprintf(msg, sizeof msg, "%s", shs_last_error());
    return shs__comm_agree(m->comm, rc, msg);
}

/* A rank failing before shs__ckpt_load of a balanced load: that load is
   collective, and its first agreement must hear this rank (comm.h). */
static int fail_before_load(shs_manager *m, int rc)
{
    if (m->cfg.load_balanced && m->comm->size > 1) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", shs_last_error());
        return shs__comm_agree(m->comm, rc, msg);
    }
    return rc;
}

static int load_local(shs_manager *m, shs_progress *progress, shs_load_result *result)
{
    shs_load_result local;
    shs_load_result *res = result ? result : &local;
    memset(res, 0, sizeof *res);
    if (!m || !progress)
        return shs__err(SHS_EINVAL, "shs_manager_load: NULL argument");
    const shs_config *c = &m->cfg;
    const char *from = NULL;
    if (c->create_seed_checkpoint)
        return SHS_OK; /* the seed is a fresh initialisation */
    int initial = 0;
    /* torchtitan: resume from the save path when it holds a checkpoint;
       otherwise the explicit load_path (MindSpore), otherwise the initial
       checkpoint; otherwise start fresh */
    int have = c->load_path && *c->load_path ? 0 : has_checkpoint(m->save_path);
    if (have < 0)
        return fail_before_load(m, have);
    if (c->load_path && *c->load_path)
        from = c->load_path;
    else if (have)
        from = m->save_path;
    else if (c->initial_load_path && *c->initial_load_path) {
        from = c->initial_load_path;
        initial = 1;
    }
    if (!from)
        return SHS_OK;
    char dir[4096];
    int rc = shs_checkpoint_resolve(dir, sizeof dir, from, initial ? -1 : c->load_step);
    if (rc < 0)
        return fail_before_load(m, rc);
    int model_only = c->no_load_optim || (initial && c->initial_load_model_only);
    shs__load_req req = {
        .with_optim = !model_only && !(c->exclude_from_loading & SHS_EXCLUDE_OPTIMIZER),
        .exclude = c->exclude_from_loading,
        .strict = c->strict,
        .rank = m->comm->rank,
        .world_size = m->comm->size,
        .workers = c->load_worker_number,
        .balanced = c->load_balanced,
    };
    if (model_only)
        req.exclude |= SHS_EXCLUDE_TRAIN_STATE | SHS_EXCLUDE_DATALOADER |
                       SHS_EXCLUDE_LR_SCHEDULER | SHS_EXCLUDE_RNG;
    int64_t new_gbs = progress->global_batch_size;
    if ((rc = shs__ckpt_load(m->state, dir, &req, m->comm, progress, res)) < 0)
        return rc;
    if (model_only && (rc = refresh_masters(m)) < 0)
        return rc;
    /* MindSpore: a changed global batch size rescales the step; the data
       cursor then comes from consumed_samples */
    if (res->progress_loaded && new_gbs > 0 && progress->global_batch_size > 0 &&
        new_gbs != progress->global_batch_size) {
        progress->global_step = progress->global_step * progress->global_batch_size / new_gbs;
        progress->global_batch_size = new_gbs;
        res->batch_size_changed = 1;
    }
    return SHS_OK;
}

/* ------------------------------------------------------------------ */
/* Lifecycle                                                          */
/* ------------------------------------------------------------------ */

static char *dup_or_empty(const char *s)
{
    return shs__strdup(s ? s : "");
}

/* A local failure (out of memory) before create's agreement: the other
   ranks wait in it, so this rank joins it with its error (comm.h).  The
   config checks need not: every rank has the same config. */
static int create_failed(shs_comm *comm, int rc)
{
    if (comm && comm->size > 1) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", shs_last_error());
        return shs__comm_agree(comm, rc, msg);
    }
    return rc;
}

int shs_manager_create(shs_manager **out, const shs_config *config, shs_state *state)
{
    return shs_manager_create_comm(out, config, state, NULL);
}

int shs_manager_create_comm(shs_manager **out, const shs_config *config, shs_state *state,
                            shs_comm *comm)
{
    int rc;
    if (!out || !config || !state)
        return shs__err(SHS_EINVAL, "shs_manager_create: NULL argument");
    *out = NULL;
    if (config->version != SHS_CONFIG_VERSION)
        return shs__err(SHS_ECONFIG, "config version %u (expected %u): use shs_config_init",
                        config->version, SHS_CONFIG_VERSION);
    int saving = config->enable_save && !config->load_only;
    if (saving && (!config->save_path || !*config->save_path))
        return shs__err(SHS_ECONFIG, "save_path must be provided when enable_save is true");
    if (saving && config->save_interleaved_steps < 1)
        return shs__err(SHS_ECONFIG, "save_interleaved_steps must be at least 1");
    if (config->save_max < 0 || config->keep_latest_k < 0)
        return shs__err(SHS_ECONFIG, "save_max and keep_latest_k must not be negative");
    if (config->create_seed_checkpoint && comm && comm->size != 1)
        return shs__err(SHS_ECONFIG, "create_seed_checkpoint runs on one process, not %d",
                        comm->size);
    if (!config->prefix || !*config->prefix || strchr(config->prefix, '/'))
        return shs__err(SHS_ECONFIG, "prefix must be a non-empty file name part");
    shs_manager *m = shs__calloc(1, sizeof *m);
    if (!m)
        return create_failed(comm, shs__err(SHS_ENOMEM, "out of memory creating the manager"));
    m->cfg = *config;
    m->cfg.owned_ = NULL;
    m->save_path = dup_or_empty(config->save_path);
    m->prefix = dup_or_empty(config->prefix);
    m->load_path = dup_or_empty(config->load_path);
    m->initial_load_path = dup_or_empty(config->initial_load_path);
    if (!m->save_path || !m->prefix || !m->load_path || !m->initial_load_path) {
        shs_manager_free(m);
        return create_failed(comm, shs__err(SHS_ENOMEM, "out of memory creating the manager"));
    }
    m->cfg.save_path = m->save_path;
    m->cfg.prefix = m->prefix;
    m->cfg.load_path = m->load_path;
    m->cfg.initial_load_path = m->initial_load_path;
    m->state = state;
    if (!comm) {
        if ((rc = shs_comm_create_self(&m->own_comm)) < 0) {
            shs_manager_free(m);
            return rc;
        }
        comm = m->own_comm;
    }
    m->comm = comm;
    m->keep = config->keep_latest_k > 0 ? config->keep_latest_k : config->save_max;
    m->last_saved_step = -1;
    m->async = config->async_save;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    /* One writer per save path: rank 0 locks it for the whole job (the
       other ranks, on this host or others, write under that lock and need
       none of their own; they learn its outcome from the agreement below).
       The lock comes first: the leftovers cleaned next may otherwise be
       the save in progress of another job. */
    rc = SHS_OK;
    if (saving && *m->save_path && comm->rank == 0) {
        rc = shs__savepath_lock_take(&m->lock, m->save_path, 1);
        /* leftovers of a save that crashed (the root cleans, all hear) */
        if (rc == SHS_OK)
            rc = shs__clean_leftovers(m->save_path);
    }
    char msg[256];
    snprintf(msg, sizeof msg, "%s", shs_last_error());
    if ((rc = shs__comm_agree(comm, rc, msg)) < 0) {
        shs_manager_free(m);
        return rc;
    }
    *out = m;
    return SHS_OK;
}

void shs_manager_free(shs_manager *m)
{
    if (!m)
        return;
    if (m->thread_started) {
        wait_idle(m);
        pthread_mutex_lock(&m->mu);
        m->stop = 1;
        pthread_cond_broadcast(&m->cv);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->thread, NULL);
    }
    /* after the save in flight is committed, never before */
    shs_savepath_unlock(m->lock);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    shs__free(m->staging);
    shs__free(m->staging_mem);
    shs__free(m->run_steps);
    shs__free(m->save_path);
    shs__free(m->prefix);
    shs__free(m->load_path);
    shs__free(m->initial_load_path);
    shs_comm_free(m->own_comm);
    shs__layout_cache_release(&m->layout_cache);
    shs__free(m);
}
