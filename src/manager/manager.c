/*
 * manager.c -- the checkpoint policy of a training run (MindSpore
 * Transformers' CheckpointCallback + Trainer loading, torchtitan's
 * CheckpointManager): when to save, what to keep, and the asynchronous
 * save pipeline; what to load is manager_load.c.
 *
 * Async save: one background thread and one job slot.  A save copies the
 * registered tensors into staging buffers (allocated once per layout,
 * pre-faulted) -- in the caller's thread, or with SHS_SAVE_DEFER_SNAPSHOT
 * in the worker while the caller runs compute that only reads the state
 * (shs_manager_fence() waits for the copy) -- then the worker writes and
 * commits.  A new save first waits for the one in flight; the error of a
 * background save is reported by the next call.
 */
#include "manager/manager_int.h"

#include "dist/comm.h"
#include "manager/config_impl.h"
#include "source/hf_load.h"
#include "crypto/crypt.h"
#include "store/io.h"
#include "store/lock.h"
#include "source/meta.h"
#include "source/savepath.h"
#include "source/source.h"
#include "common/opts.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

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
        .key = m->key,
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
    char msg[SHS__AGREE_MSG];
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
int shs__manager_wait_idle(shs_manager *m)
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
    return shs__manager_wait_idle(m);
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
    return m->cfg.enable && m->cfg.enable_save && !m->cfg.load_only;
}

int shs_manager_save(shs_manager *m, const shs_progress *progress, unsigned flags)
{
    int rc;
    if (!m || !progress)
        return shs__err(SHS_EINVAL, "shs_manager_save: NULL argument");
    if (shs__check_progress(progress, "shs_manager_save") < 0)
        return SHS_EINVAL;
    if (!saving_enabled(m))
        return shs__err(SHS_ESTATE,
                        "saving is disabled (enable false, enable_save false or load_only true)");
    if (progress->global_step < 0)
        return shs__err(SHS_EINVAL, "global_step %lld is negative",
                        (long long)progress->global_step);
    /* checked here too so that an async save reports it at this call */
    if (!isfinite(progress->loss_scale))
        return shs__err(SHS_EINVAL,
                        "step %lld: loss_scale %g is not a finite number (JSON "
                        "cannot hold it in common.json); nothing was saved",
                        (long long)progress->global_step, progress->loss_scale);
    double t0 = now_s();
    /* at most one save in flight; an earlier failure surfaces here */
    if ((rc = shs__manager_wait_idle(m)) < 0)
        return rc;
    job j = { 0 };
    j.progress = (shs_progress)SHS_PROGRESS_INIT;
    shs__copy_in(&j.progress, progress, SHS__V_PROGRESS);
    j.step = progress->global_step;
    j.with_optim = !m->cfg.no_save_optim && !(flags & SHS_SAVE_MODEL_ONLY) &&
                   !m->cfg.create_seed_checkpoint;
    /* Every rank prepares, then all agree before the save's collectives:
       a rank that ran out of memory here would otherwise leave the others
       waiting in them. */
    rc = snapshot_blobs(m, &j.blobs, &j.n_blobs);
    if (rc == SHS_OK && m->async)
        rc = ensure_staging(m);
    if (rc == SHS_OK && m->async && !m->thread_started) {
        if (pthread_create(&m->thread, NULL, worker_main, m) != 0)
            rc = shs__err(SHS_EIO, "cannot start the async save thread");
        else
            m->thread_started = 1;
    }
    if ((rc = shs__comm_agree(m->comm, rc, shs_last_error())) < 0) {
        free_blobs(j.blobs, j.n_blobs);
        return rc;
    }
    if (!m->async) {
        rc = do_save(m, &j, NULL);
        free_blobs(j.blobs, j.n_blobs);
        m->last_stats.blocked_seconds = now_s() - t0; /* all of it */
        return rc;
    }
    j.defer_snapshot = (flags & SHS_SAVE_DEFER_SNAPSHOT) != 0;
    j.split = j.defer_snapshot ? 0 : half_split(m->state);
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
    if (shs__check_progress(progress, "shs_manager_step") < 0)
        return SHS_EINVAL;
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
                return shs__manager_wait_idle(m);
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
    char msg[SHS__AGREE_MSG] = "";
    if (m->comm->rank == 0) {
        char *dir = NULL;
        shs__meta meta;
        v[1] = shs__step_dir_find(&dir, m->save_path, step);
        if (v[1] == SHS_OK &&
            (v[1] = shs__source_open_step(&meta, dir, SHS__SRC_STEPS)) == SHS_OK) {
            v[0] = !meta.model_only;
            shs__meta_free(&meta);
        } else if (v[1] == SHS_ENOCHECKPOINT) {
            /* no committed save of that step */
            shs__err_clear();
            v[1] = SHS_OK;
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
    if (shs__check_progress(progress, "shs_manager_finish") < 0)
        return SHS_EINVAL;
    int rc = shs__manager_wait_idle(m);
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
    if ((rc = shs__manager_wait_idle(m)) < 0 || !m->cfg.last_save_in_hf)
        return rc;
    return shs__manager_export(m, step);
}

int shs_manager_last_save(const shs_manager *m, shs_save_stats *out)
{
    if (!m || !out)
        return shs__err(SHS_EINVAL, "NULL argument");
    shs_manager *mm = (shs_manager *)m;
    int rc = shs__check_version(out, SHS__V_SAVE_STATS, "shs_manager_last_save");
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&mm->mu);
    int has = m->has_stats;
    if (has)
        shs__copy_out(out, &m->last_stats, SHS__V_SAVE_STATS);
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
        char msg[SHS__AGREE_MSG];
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
    if ((rc = shs__check_version(config, SHS__V_CONFIG, "shs_manager_create")) < 0)
        return rc;
    /* the fields of the caller's version; defaults for the later ones:
       from here on only this whole copy is read */
    shs_config whole;
    shs_config_init(&whole);
    shs__copy_in(&whole, config, SHS__V_CONFIG);
    whole.version = SHS_CONFIG_VERSION;
    config = &whole;
    /* torchtitan's enable off: nothing is saved or loaded */
    int enabled = config->enable;
    int saving = enabled && config->enable_save && !config->load_only;
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
    const char *key_file = config->encrypt_key_file, *key_env = config->encrypt_key_env;
    int has_key = (key_file && *key_file) || (key_env && *key_env);
    if (key_file && *key_file && key_env && *key_env)
        return shs__err(SHS_ECONFIG, "encrypt_key_file and encrypt_key_env: set one, not both");
    if (has_key && config->incremental)
        return shs__err(SHS_ECONFIG, "incremental cannot be combined with encryption "
                                     "(encrypt_key_file / encrypt_key_env): every encrypted "
                                     "save writes every chunk under a fresh key");
    int export_dtype = -1;
    if ((rc = shs__export_check_config(config, has_key, &export_dtype)) < 0)
        return rc;
    shs_manager *m = shs__calloc(1, sizeof *m);
    if (!m)
        return create_failed(comm, shs__err(SHS_ENOMEM, "out of memory creating the manager"));
    m->cfg = whole;
    m->cfg.owned_ = NULL;
    if ((rc = shs__hf_config_check(&m->cfg)) < 0) {
        shs_manager_free(m);
        /* a config error is every rank's; out of memory is this one's */
        return rc == SHS_ENOMEM ? create_failed(comm, rc) : rc;
    }
    m->cfg.encrypt_key_file = ""; /* the key itself is kept (m->key) */
    m->cfg.encrypt_key_env = "";
    m->save_path = dup_or_empty(config->save_path);
    m->prefix = dup_or_empty(config->prefix);
    m->load_path = dup_or_empty(config->load_path);
    m->initial_load_path = dup_or_empty(config->initial_load_path);
    m->hf_assets_path = dup_or_empty(m->cfg.hf_assets_path);
    m->hf_name_map = dup_or_empty(m->cfg.hf_name_map);
    m->hf_name_map_file = dup_or_empty(m->cfg.hf_name_map_file);
    m->export_dtype_name = dup_or_empty(m->cfg.export_dtype);
    m->export_dtype = export_dtype;
    if (!m->save_path || !m->prefix || !m->load_path || !m->initial_load_path ||
        !m->hf_assets_path || !m->hf_name_map || !m->hf_name_map_file || !m->export_dtype_name) {
        shs_manager_free(m);
        return create_failed(comm, shs__err(SHS_ENOMEM, "out of memory creating the manager"));
    }
    m->cfg.save_path = m->save_path;
    m->cfg.prefix = m->prefix;
    m->cfg.load_path = m->load_path;
    m->cfg.initial_load_path = m->initial_load_path;
    m->cfg.hf_assets_path = m->hf_assets_path;
    m->cfg.hf_name_map = m->hf_name_map;
    m->cfg.hf_name_map_file = m->hf_name_map_file;
    m->cfg.export_dtype = m->export_dtype_name;
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
    /* the key is read on every rank (a file missing on one host fails
       the job on all, in the agreement below) */
    rc = SHS_OK;
    if (has_key) {
        if (!(m->key = shs__calloc(1, sizeof *m->key)))
            rc = shs__err(SHS_ENOMEM, "out of memory creating the manager");
        else
            rc = shs__key_load(m->key, key_file, key_env);
    }
    if (rc == SHS_OK && saving && *m->save_path && comm->rank == 0) {
        rc = shs__savepath_lock_take(&m->lock, m->save_path, 1);
        /* leftovers of a save that crashed (the root cleans, all hear) */
        if (rc == SHS_OK)
            rc = shs__clean_leftovers(m->save_path, NULL, NULL);
    }
    char msg[SHS__AGREE_MSG];
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
        shs__manager_wait_idle(m);
        pthread_mutex_lock(&m->mu);
        m->stop = 1;
        pthread_cond_broadcast(&m->cv);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->thread, NULL);
    }
    /* after the save in flight is committed, never before */
    shs_lock_free(m->lock);
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
    shs__free(m->hf_assets_path);
    shs__free(m->hf_name_map);
    shs__free(m->hf_name_map_file);
    shs__free(m->export_dtype_name);
    shs_comm_free(m->own_comm);
    shs__layout_cache_release(&m->layout_cache);
    shs__key_wipe(m->key);
    shs__free(m->key);
    shs__free(m);
}
