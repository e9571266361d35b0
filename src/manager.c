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
#include "meta.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
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
    shs__layout_cache layout_cache;

    int64_t *run_steps;      /* this run's committed saves, oldest first */
    size_t n_run, cap_run;
    int64_t last_saved_step; /* -1: none yet */
    int64_t last_full_step;  /* this run's newest save with optimizer state */
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

    /* the strings of the last load result (shs_load_result says whose) */
    shs_load_result held;
    char *held_path, *held_msg;
    /* shs_manager_warning (guarded by mu: retention runs in the worker) */
    char warning[1024];
    char warning_out[1024];  /* the copy handed out */
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

static void warn(shs_manager *m, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&m->mu);
    va_start(ap, fmt);
    vsnprintf(m->warning, sizeof m->warning, fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&m->mu);
}

/* Delete one old step for retention (rank 0).  A failure is a warning: the
   save that triggered it is committed and the job goes on. */
static void retire(shs_manager *m, int64_t victim, size_t *failures)
{
    if (shs__remove_step(m->save_path, victim) == SHS_OK)
        return;
    (*failures)++;
    warn(m, "retention could not delete step %lld of %s: %s", (long long)victim, m->save_path,
         shs_last_error());
    shs__err_clear();
}

/*
 * keep_latest_k (torchtitan): the newest k committed steps of the whole
 * save path stay, whoever wrote them.  save_max (MindSpore): the newest n
 * saves of this run stay; another run's are never touched.  Neither
 * deletes `committed` (the tracker's step, just written), a save in flight
 * (a .tmp- directory, not a step) or a symlinked step (shs__remove_step
 * refuses it).  Returns the number of failed deletions.
 */
static size_t apply_retention(shs_manager *m, int64_t committed)
{
    size_t failures = 0;
    if (m->cfg.keep_latest_k > 0) {
        if (m->comm->rank != 0)
            return 0;
        int64_t *steps = NULL;
        size_t n = 0;
        if (shs__list_steps(&steps, &n, m->save_path) < 0) {
            warn(m, "retention could not list %s: %s", m->save_path, shs_last_error());
            shs__err_clear();
            return 1;
        }
        size_t keep = (size_t)m->cfg.keep_latest_k;
        for (size_t i = 0; n > keep && i < n - keep; i++)
            if (steps[i] != committed)
                retire(m, steps[i], &failures);
        shs__free(steps);
        return failures;
    }
    while (m->cfg.save_max > 0 && m->n_run > (size_t)m->cfg.save_max) {
        int64_t victim = m->run_steps[0];
        memmove(&m->run_steps[0], &m->run_steps[1], (m->n_run - 1) * sizeof *m->run_steps);
        m->n_run--;
        if (m->comm->rank == 0 && victim != committed)
            retire(m, victim, &failures);
    }
    return failures;
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
    shs_save_stats s = SHS_SAVE_STATS_INIT;
    char dir[4096];
    int rc = shs__ckpt_save(m->state, &req, m->comm, &s, dir, sizeof dir);
    if (rc < 0)
        return rc;
    s.version = SHS_SAVE_STATS_VERSION;
    snprintf(m->last_dir, sizeof m->last_dir, "%s", dir);
    m->last_saved_step = j->step;
    if (j->with_optim)
        m->last_full_step = j->step;
    else if (m->last_full_step == j->step)
        m->last_full_step = -1; /* replaced by a weights-only save */
    /* every rank hears if one failed its bookkeeping (comm.h): the
       retention that follows is collective */
    char msg[256];
    rc = remember_save(m, j->step);
    snprintf(msg, sizeof msg, "%s", shs_last_error());
    if ((rc = shs__comm_agree(m->comm, rc, msg)) < 0)
        return rc;
    size_t failures = apply_retention(m, j->step);
    s.total_seconds = now_s() - t0;
    s.retention_failures = failures;
    pthread_mutex_lock(&m->mu);
    s.blocked_seconds = m->blocked_seconds; /* measured by the caller */
    m->last_stats = s;
    m->has_stats = 1;
    pthread_mutex_unlock(&m->mu);
    return SHS_OK;
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
    /* checked here too so that an async save reports it at this call */
    if (!isfinite(progress->loss_scale))
        return shs__err(SHS_EINVAL, "step %lld: loss_scale %g is not a finite number (JSON "
                        "cannot hold it in common.json); nothing was saved",
                        (long long)progress->global_step, progress->loss_scale);
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

/* Whether the save path holds a committed full (not weights-only) save of
   `step`.  Rank 0 looks and tells the others, so that every rank makes the
   same decision. */
static int full_save_on_disk(shs_manager *m, int64_t step, int *full)
{
    int32_t v[2] = { 0, SHS_OK };
    char msg[256] = "";
    if (m->comm->rank == 0) {
        char *dir = shs__step_dir_path(m->save_path, step);
        int is_step = 0;
        if (!dir) {
            v[1] = shs__err(SHS_ENOMEM, "out of memory");
        } else if (shs__io->stat(dir, &(struct stat){ 0 }) == 0) {
            shs__meta meta;
            if ((v[1] = shs__step_dir_probe(dir, &is_step)) == SHS_OK && is_step &&
                (v[1] = shs__meta_parse(&meta, dir)) == SHS_OK) {
                v[0] = !meta.model_only;
                shs__meta_free(&meta);
            }
        } else if (errno != ENOENT) {
            v[1] = shs__err_errno(errno, "cannot stat", dir);
        }
        shs__free(dir);
        snprintf(msg, sizeof msg, "%s", v[1] < 0 ? shs_last_error() : "");
    }
    int rc = shs__comm_bcast(m->comm, v, sizeof v, 0);
    if (rc == SHS_OK)
        rc = shs__comm_agree(m->comm, v[1], msg);
    *full = v[0];
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
    int64_t step = progress->global_step;
    int save_it = m->last_saved_step != step;
    if (m->cfg.last_save_model_only) {
        /* weights only, unless this step already has a full save: never
           replace a full checkpoint by a weights-only one */
        int full = m->last_full_step == step;
        if (!full && (rc = full_save_on_disk(m, step, &full)) < 0)
            return rc;
        save_it = !full;
    }
    if (save_it) {
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
    if (out->version != SHS_SAVE_STATS_VERSION)
        return shs__err(SHS_EINVAL, "shs_save_stats version %u (expected %u): initialise it "
                        "with SHS_SAVE_STATS_INIT", out->version, SHS_SAVE_STATS_VERSION);
    pthread_mutex_lock(&mm->mu);
    int has = m->has_stats;
    if (has)
        *out = m->last_stats;
    pthread_mutex_unlock(&mm->mu);
    return has ? SHS_OK : shs__err(SHS_ENOTFOUND, "no save committed yet");
}

const char *shs_manager_warning(const shs_manager *m)
{
    if (!m)
        return NULL;
    shs_manager *mm = (shs_manager *)m;
    pthread_mutex_lock(&mm->mu);
    snprintf(mm->warning_out, sizeof mm->warning_out, "%s", m->warning);
    pthread_mutex_unlock(&mm->mu);
    return mm->warning_out[0] ? mm->warning_out : NULL;
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

/* The outcome of one rank's step, agreed by all: every rank takes the same
   branch afterwards, so the collectives below stay matched. */
static int agree(shs_manager *m, int rc)
{
    char msg[256];
    snprintf(msg, sizeof msg, "%s", rc < 0 ? shs_last_error() : "");
    return shs__comm_agree(m->comm, rc, msg);
}

/* A rank that fails before load_dir while the others go into it: a
   balanced load is collective from its first agreement on (load.c), so
   this rank meets the others there with its error; any other load has
   no collective before the agreement that follows load_dir. */
static int fail_before_load(shs_manager *m, int rc)
{
    if (m->cfg.load_balanced && m->comm->size > 1) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", shs_last_error());
        return shs__comm_agree(m->comm, rc, msg);
    }
    return rc;
}

static void say(shs_manager *m, shs_load_result *res, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    shs__free(m->held_msg);
    m->held_msg = shs__strdup(buf);
    res->message = m->held_msg ? m->held_msg : "";
}

/* Load one step directory with the options of its source. */
static int load_dir(shs_manager *m, const char *dir, int source, int weights_only,
                    shs_progress *progress, shs_load_result *res)
{
    const shs_config *c = &m->cfg;
    shs__load_req req = {
        .with_optim = !weights_only && !(c->exclude_from_loading & SHS_EXCLUDE_OPTIMIZER),
        .exclude = c->exclude_from_loading,
        .strict = c->strict,
        .rank = m->comm->rank,
        .world_size = m->comm->size,
        .workers = c->load_worker_number,
        .balanced = c->load_balanced,
    };
    if (weights_only)
        req.exclude |= SHS_EXCLUDE_TRAIN_STATE | SHS_EXCLUDE_DATALOADER |
                       SHS_EXCLUDE_LR_SCHEDULER | SHS_EXCLUDE_RNG;
    shs__load_result_release_names(res);
    res->loaded = 0;
    res->progress_loaded = 0;
    res->consumed_samples_derived = 0;
    int64_t new_gbs = progress->global_batch_size;
    shs_progress p = *progress;
    int rc = shs__ckpt_load(m->state, dir, &req, m->comm, &p, res);
    if (rc == SHS_OK && weights_only)
        rc = refresh_masters(m);
    /* MindSpore: a changed global batch size rescales the step; the data
       cursor then comes from consumed_samples */
    if (rc == SHS_OK && res->progress_loaded && new_gbs > 0 && p.global_batch_size > 0 &&
        new_gbs != p.global_batch_size) {
        int64_t prod;
        if (__builtin_mul_overflow(p.global_step, p.global_batch_size, &prod))
            rc = shs__err(SHS_ERANGE, "%s: global_step %lld x global_batch_size %lld overflows "
                          "while rescaling to global_batch_size %lld", dir,
                          (long long)p.global_step, (long long)p.global_batch_size,
                          (long long)new_gbs);
        else {
            p.global_step = prod / new_gbs;
            p.global_batch_size = new_gbs;
            res->batch_size_changed = 1;
        }
    }
    if (rc < 0)
        return rc;
    *progress = p;
    shs__free(m->held_path);
    if (!(m->held_path = shs__strdup(dir)))
        return shs__err(SHS_ENOMEM, "out of memory");
    res->path = m->held_path;
    res->source = source;
    res->optimizer_loaded = req.with_optim;
    return SHS_OK;
}

/* Step directory of `step` in the save path (iteration_N, else step-N). */
static char *step_dir_of(const char *sp, int64_t step)
{
    char *dir = shs__step_dir_path(sp, step);
    if (dir && shs__step_dir_has_metadata(dir) == 0) {
        char alt[40];
        shs__step_dir_alt_name(alt, sizeof alt, step);
        shs__free(dir);
        dir = shs__path_join(sp, alt);
    }
    return dir;
}

/* The "model_only" marker of a committed step; errors read as "full" (the
   load then reports them). */
static int step_is_weights_only(const char *sp, int64_t step)
{
    char *dir = step_dir_of(sp, step);
    shs__meta meta;
    int r = 0;
    if (dir && shs__meta_parse(&meta, dir) == SHS_OK) {
        r = meta.model_only;
        shs__meta_free(&meta);
    }
    shs__err_clear();
    shs__free(dir);
    return r;
}

/* Damage found while reading a step (as opposed to a state that does not
   match, or a failing device): a reason to look at earlier steps. */
static int is_damage(int rc)
{
    return rc == SHS_ECHECKSUM || rc == SHS_ECORRUPT || rc == SHS_ENOENT;
}

/* The newest step below `below` that shs_checkpoint_verify accepts, or -1.
   Rank 0 verifies, every rank hears its answer. */
static int newest_verified(shs_manager *m, const int64_t *steps, size_t n, int64_t below,
                           int64_t *out)
{
    int64_t v = -1;
    if (m->comm->rank == 0) {
        for (size_t i = n; i-- > 0 && v < 0;) {
            if (steps[i] >= below)
                continue;
            char *dir = step_dir_of(m->save_path, steps[i]);
            if (!dir)
                return shs__err(SHS_ENOMEM, "out of memory");
            if (shs_checkpoint_verify(dir) == SHS_OK)
                v = steps[i];
            shs__free(dir);
        }
        shs__err_clear();
    }
    int rc = shs__comm_bcast(m->comm, &v, sizeof v, 0);
    *out = v;
    return rc;
}

/*
 * 1. The job's own committed checkpoints in save_path.  *found: something
 * was loaded (or an error stops the load).  See shs_manager_load.
 */
static int resume_save_path(shs_manager *m, shs_progress *progress, shs_load_result *res,
                            int *found)
{
    const shs_config *c = &m->cfg;
    const char *sp = m->save_path;
    int64_t *steps = NULL;
    size_t n = 0;
    int64_t tracked = -1;
    struct stat st;
    char *dir = NULL;
    char first_err[512] = "";
    int rc = SHS_OK, absent = 0;
    *found = 0;
    if (shs__io->stat(sp, &st) != 0) {
        if (errno == ENOENT)
            absent = 1;
        else
            rc = shs__err_errno(errno, "cannot read save_path", sp);
    } else if (!S_ISDIR(st.st_mode)) {
        rc = shs__err_errno(ENOTDIR, "save_path is not a directory:", sp);
    } else if ((rc = shs__list_steps(&steps, &n, sp)) == SHS_OK) {
        rc = shs__read_tracker(&tracked, sp);
        if (rc == SHS_ENOENT) {
            shs__err_clear();
            rc = SHS_OK;
            tracked = -1;
        } else if (rc < 0) {
            rc = shs__err_prefix(rc, "cannot resume");
        }
    }
    if ((rc = agree(m, rc)) < 0 || absent || (n == 0 && tracked < 0))
        goto done;
    *found = 1;
    int64_t newest = n ? steps[n - 1] : -1;
    /* load_step belongs to load_path when one is set (the step of the
       pretrained weights), else to the save path */
    int64_t want = *c->load_path ? -1 : c->load_step;
    int64_t target = -1, floor = -1;
    int repair = 0, explicit_step = want >= 0, has_target = 0;
    if (explicit_step) {
        for (size_t i = 0; i < n; i++)
            has_target |= steps[i] == want;
        if (!has_target) {
            rc = shs__err(SHS_ENOCHECKPOINT, "%s: no complete checkpoint of load_step %lld",
                          sp, (long long)want);
            goto done;
        }
        target = want;
    } else if (tracked >= 0 && newest > tracked) {
        /* a crash between the commit rename and the tracker update, or a
           tracker set back: the newest complete step wins, and any step
           down to the tracker's is as good */
        target = newest;
        floor = tracked;
        repair = 1;
        has_target = 1;
    } else if (tracked >= 0) {
        for (size_t i = 0; i < n; i++)
            has_target |= steps[i] == tracked;
        target = tracked;
        floor = tracked;
        if (!has_target)
            snprintf(first_err, sizeof first_err, "%s/" SHS__TRACKER " names step %lld, but "
                     "its directory is missing or incomplete", sp, (long long)tracked);
    } else {
        /* committed steps but no tracker: the first save's tracker update
           never happened */
        target = newest;
        repair = 1;
        has_target = 1;
    }
    if (has_target && !explicit_step && step_is_weights_only(sp, target)) {
        /* a weights-only final save: resume from the newest full step if
           there is one, or the optimizer state would be lost */
        for (size_t i = n; i-- > 0;)
            if (steps[i] < target && !step_is_weights_only(sp, steps[i])) {
                say(m, res, "%s: step %lld holds weights only; resuming from step %lld, the "
                    "newest full checkpoint", sp, (long long)target, (long long)steps[i]);
                target = steps[i];
                repair = 0;
                floor = -1;
                break;
            }
    }
    if (has_target) {
        shs__free(dir);
        if (!(dir = step_dir_of(sp, target)))
            rc = fail_before_load(m, shs__err(SHS_ENOMEM, "out of memory"));
        else
            rc = load_dir(m, dir, SHS_LOAD_SAVE_PATH, step_is_weights_only(sp, target),
                          progress, res);
        rc = agree(m, rc);
        if (rc == SHS_OK || explicit_step || !is_damage(rc))
            goto loaded;
        snprintf(first_err, sizeof first_err, "%s", shs_last_error());
    }
    /* the target is missing or damaged: the newest earlier step that
       verifies is the way out, taken automatically only while it is not
       behind the tracker's step */
    int first_rc = has_target ? rc : SHS_ECORRUPT;
    int64_t alt = -1;
    if ((rc = newest_verified(m, steps, n, target, &alt)) < 0)
        goto done;
    /* the original error comes first: messages are cut when ranks agree */
    if (alt < 0) {
        rc = shs__err(first_rc, "%s (and no earlier step of %s verifies)", first_err, sp);
        goto done;
    }
    int automatic = floor >= 0 ? alt >= floor : tracked < 0;
    if (!automatic && !c->resume_fallback) {
        rc = shs__err(first_rc, "%s; the newest earlier step that verifies is %lld: set "
                      "load_step: %lld to load it, or resume_fallback: true", first_err,
                      (long long)alt, (long long)alt);
        goto done;
    }
    shs__free(dir);
    target = alt;
    if (!(dir = step_dir_of(sp, alt)))
        rc = fail_before_load(m, shs__err(SHS_ENOMEM, "out of memory"));
    else
        rc = load_dir(m, dir, SHS_LOAD_SAVE_PATH, step_is_weights_only(sp, alt), progress,
                      res);
    if ((rc = agree(m, rc)) < 0)
        goto done;
    if (!automatic) {
        res->fell_back = 1;
        say(m, res, "resume_fallback: %s; loaded step %lld, the newest earlier step that "
            "verifies", first_err, (long long)alt);
    }
    repair = tracked >= 0 ? alt > tracked : 1;
loaded:
    if (rc < 0)
        goto done;
    if (repair) {
        /* the tracker never moves backwards, and never stays behind */
        int r = SHS_OK;
        if (m->comm->rank == 0 && c->enable_save && !c->load_only) {
            char *tp = shs__tracker_path(sp);
            r = tp ? shs__write_tracker(tp, target, c->fsync)
                   : shs__err(SHS_ENOMEM, "out of memory");
            shs__free(tp);
        }
        if ((rc = agree(m, r)) < 0)
            goto done;
        res->tracker_repaired = c->enable_save && !c->load_only;
        say(m, res, "%s: the tracker %s; resumed from step %lld, the newest complete step%s", sp,
            tracked >= 0 ? "was behind" : "was missing", (long long)target,
            res->tracker_repaired ? ", and rewrote the tracker" : "");
    } else if (!res->message || !*res->message) {
        say(m, res, "resumed from %s (step %lld)", dir, (long long)target);
    }
done:
    shs__free(dir);
    shs__free(steps);
    return rc;
}

static int load_local(shs_manager *m, shs_progress *progress, shs_load_result *res)
{
    const shs_config *c = &m->cfg;
    char dir[4096];
    int rc, found = 0;
    if (c->create_seed_checkpoint) {
        res->source = SHS_LOAD_SEED;
        say(m, res, "create_seed_checkpoint: nothing loaded");
        return SHS_OK; /* the seed is a fresh initialisation */
    }
    /* 1. the job's own progress always wins */
    if (*m->save_path && ((rc = resume_save_path(m, progress, res, &found)) < 0 || found))
        return rc;
    /* 2. load_path; 3. initial_load_path: explicit choices, so a path that
       does not exist is an error, and a plain folder of safetensors files
       is read as such */
    const char *from = NULL, *field = NULL;
    int source, weights_only;
    if (*c->load_path) {
        from = c->load_path;
        field = "load_path";
        source = SHS_LOAD_LOAD_PATH;
        weights_only = c->no_load_optim;
    } else if (*c->initial_load_path) {
        from = c->initial_load_path;
        field = "initial_load_path";
        source = SHS_LOAD_INITIAL;
        weights_only = c->initial_load_model_only;
    } else {
        say(m, res, "nothing to resume in save_path '%s' and no load_path: fresh start",
            m->save_path);
        return SHS_OK;
    }
    rc = shs_checkpoint_resolve(dir, sizeof dir, from, source == SHS_LOAD_LOAD_PATH ? c->load_step
                                                                                   : -1);
    if (rc < 0)
        return fail_before_load(m, shs__err_prefix(rc, field));
    if ((rc = load_dir(m, dir, source, weights_only, progress, res)) < 0)
        return rc;
    say(m, res, "loaded %s (step %lld) from %s", dir, (long long)res->step, field);
    return SHS_OK;
}

int shs_manager_load(shs_manager *m, shs_progress *progress, shs_load_result *result)
{
    if (!m || !progress)
        return shs__err(SHS_EINVAL, "shs_manager_load: NULL argument");
    if (result && result->version != SHS_LOAD_RESULT_VERSION)
        return shs__err(SHS_EINVAL, "shs_load_result version %u (expected %u): initialise it "
                        "with SHS_LOAD_RESULT_INIT", result->version, SHS_LOAD_RESULT_VERSION);
    /* an async save in flight uses the communicator from its thread: let
       it finish before this thread's collectives */
    int rc = wait_idle(m);
    if (rc < 0)
        return rc;
    /* the previous result's strings die here, as documented */
    shs__load_result_release_names(&m->held);
    shs__free(m->held_path);
    shs__free(m->held_msg);
    m->held_path = m->held_msg = NULL;
    m->held = (shs_load_result)SHS_LOAD_RESULT_INIT;
    rc = load_local(m, progress, &m->held);
    /* every rank hears if any rank failed */
    rc = agree(m, rc);
    if (result)
        *result = m->held;
    return rc;
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
    m->last_saved_step = -1;
    m->last_full_step = -1;
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
    shs__load_result_release_names(&m->held);
    shs__free(m->held_path);
    shs__free(m->held_msg);
    shs__free(m->save_path);
    shs__free(m->prefix);
    shs__free(m->load_path);
    shs__free(m->initial_load_path);
    shs_comm_free(m->own_comm);
    shs__layout_cache_release(&m->layout_cache);
    shs__free(m);
}
