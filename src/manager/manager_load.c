/*
 * manager_load.c -- what shs_manager_load loads (MindSpore Transformers'
 * Trainer loading, torchtitan's CheckpointManager.load): the job's own
 * save path first, with its tracker repaired and damaged steps skipped by
 * policy, then load_path, then initial_load_path.  Every rank runs it
 * collectively: each agreement below is reached by every rank.
 */
#include "manager/manager_int.h"

#include "dist/comm.h"
#include "source/hf_load.h"
#include "crypto/crypt.h"
#include "store/io.h"
#include "source/meta.h"
#include "source/savepath.h"
#include "source/source.h"
#include "common/opts.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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
            return shs__err(SHS_EMISMATCH,
                            "tensor '%s': master_of names '%s', which is not "
                            "registered",
                            t->name, t->master_of);
        const shs__tensor *src = &st->t[j];
        int same = src->ndim == t->ndim;
        for (size_t d = 0; same && d < t->ndim; d++)
            same = src->shape[d] == t->shape[d] && src->goff[d] == t->goff[d];
        if (!same)
            return shs__err(SHS_EMISMATCH,
                            "tensor '%s' and its model tensor '%s' have "
                            "different local shapes",
                            t->name, src->name);
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
    char msg[SHS__AGREE_MSG];
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
        char msg[SHS__AGREE_MSG];
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

/* Load the model `meta` of what source.h opened, its files in `dir`,
   with the options of its source; `hf`: Hugging Face weights
   (hf_load.c): dtypes converted, tensors of the files that are not
   registered skipped and listed even when strict; `dq`: FP8 weights of
   those dequantized with their block scales (NULL: none). */
static int load_dir(shs_manager *m, const char *dir, const shs__meta *meta, int hf,
                    const shs__dequant *dq, int source, int weights_only, shs_progress *progress,
                    shs_load_result *res)
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
        .meta = meta,
        .convert = hf,
        .unused_ok = hf,
        .key = m->key,
        /* with a key, the job's own save path holds encrypted saves only,
           unless the user says otherwise */
        .encrypted_only = source == SHS_LOAD_SAVE_PATH && !c->allow_unencrypted_resume,
        .dequant = dq,
    };
    if (weights_only)
        req.exclude |= SHS_EXCLUDE_TRAIN_STATE | SHS_EXCLUDE_DATALOADER | SHS_EXCLUDE_LR_SCHEDULER |
                       SHS_EXCLUDE_RNG;
    shs__load_result_release_names(res);
    res->loaded = 0;
    res->progress_loaded = 0;
    res->consumed_samples_derived = 0;
    int64_t new_gbs = progress->global_batch_size;
    shs_progress p = SHS_PROGRESS_INIT;
    shs__copy_in(&p, progress, SHS__V_PROGRESS);
    int rc = shs__ckpt_load(m->state, dir, &req, m->comm, &p, res);
    if (rc == SHS_OK && weights_only)
        rc = refresh_masters(m);
    /* MindSpore: a changed global batch size rescales the step; the data
       cursor then comes from consumed_samples */
    if (rc == SHS_OK && res->progress_loaded && new_gbs > 0 && p.global_batch_size > 0 &&
        new_gbs != p.global_batch_size) {
        int64_t prod;
        if (__builtin_mul_overflow(p.global_step, p.global_batch_size, &prod))
            rc = shs__err(SHS_ERANGE,
                          "%s: global_step %lld x global_batch_size %lld overflows "
                          "while rescaling to global_batch_size %lld",
                          dir, (long long)p.global_step, (long long)p.global_batch_size,
                          (long long)new_gbs);
        else {
            p.global_step = prod / new_gbs;
            p.global_batch_size = new_gbs;
            res->batch_size_changed = 1;
        }
    }
    if (rc < 0)
        return rc;
    shs__copy_out(progress, &p, SHS__V_PROGRESS);
    shs__free(m->held_path);
    if (!(m->held_path = shs__strdup(dir)))
        return shs__err(SHS_ENOMEM, "out of memory");
    res->path = m->held_path;
    res->source = source;
    res->optimizer_loaded = req.with_optim;
    return SHS_OK;
}

/* The "model_only" marker of a committed step; errors read as "full" (the
   load then reports them). */
static int step_is_weights_only(const char *sp, int64_t step)
{
    char *dir = NULL;
    shs__meta meta;
    int r = 0;
    if (shs__step_dir_find(&dir, sp, step) == SHS_OK &&
        shs__source_open_step(&meta, dir, SHS__SRC_STEPS) == SHS_OK) {
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
    int rc = SHS_OK;
    if (m->comm->rank == 0) {
        for (size_t i = n; i-- > 0 && v < 0 && rc == SHS_OK;) {
            char *dir = NULL;
            if (steps[i] >= below || (rc = shs__step_dir_find(&dir, m->save_path, steps[i])) < 0)
                continue;
            int r = shs_checkpoint_verify(dir, m->key ? m->key->k : NULL, SHS_KEY_BYTES);
            /* an unencrypted step verifies without the key, when allowed */
            if (r == SHS_EKEY && m->key && m->cfg.allow_unencrypted_resume)
                r = shs_checkpoint_verify(dir, NULL, 0);
            if (r == SHS_OK)
                v = steps[i];
            shs__free(dir);
        }
        if (rc == SHS_OK)
            shs__err_clear();
    }
    /* rank 0's own failure reaches every rank before the broadcast */
    char msg[SHS__AGREE_MSG];
    snprintf(msg, sizeof msg, "%s", shs_last_error());
    if ((rc = shs__comm_agree(m->comm, rc, msg)) < 0)
        return rc;
    rc = shs__comm_bcast(m->comm, &v, sizeof v, 0);
    *out = v;
    return rc;
}

/* What a resume from the save path found and chose. */
typedef struct resume_plan {
    const char *sp; /* the save path */
    int64_t *steps; /* its committed steps, oldest first */
    size_t n;
    int64_t tracked;     /* the tracker's step, -1 without one */
    int64_t target;      /* the step to load */
    int64_t floor;       /* -1, or the oldest step as good as target */
    int repair;          /* the tracker is rewritten after the load */
    int explicit_step;   /* load_step chose target: no fallback */
    int has_target;      /* target is a committed step */
    char first_err[512]; /* why target could not be loaded */
} resume_plan;

/* What the save path holds, as this rank sees it (the caller agrees on
   the outcome): its committed steps and the tracker's step; *absent when
   the path does not exist. */
static int scan_save_path(resume_plan *p, int *absent)
{
    const char *sp = p->sp;
    struct stat st;
    int rc = SHS_OK;
    if (shs__io->stat(sp, &st) != 0) {
        if (errno == ENOENT)
            *absent = 1;
        else
            rc = shs__err_errno(errno, "cannot read save_path", sp);
    } else if (!S_ISDIR(st.st_mode)) {
        rc = shs__err_errno(ENOTDIR, "save_path is not a directory:", sp);
    } else if ((rc = shs__list_steps(&p->steps, &p->n, sp)) == SHS_OK) {
        rc = shs__read_tracker(&p->tracked, sp);
        if (rc == SHS_ENOENT) {
            shs__err_clear();
            rc = SHS_OK;
            p->tracked = -1;
        } else if (rc < 0) {
            rc = shs__err_prefix(rc, "cannot resume");
        }
    }
    return rc;
}

/* Which step to load: load_step when set, else the newest complete step
   when the tracker is behind or missing, else the tracker's; a
   weights-only step there gives way to the newest full one.  No
   collective: it reads the save path only. */
static int choose_target(shs_manager *m, resume_plan *p, shs_load_result *res)
{
    const shs_config *c = &m->cfg;
    const char *sp = p->sp;
    const int64_t *steps = p->steps;
    size_t n = p->n;
    int64_t newest = n ? steps[n - 1] : -1;
    /* load_step belongs to load_path when one is set (the step of the
       pretrained weights), else to the save path */
    int64_t want = *c->load_path && !m->load_path_is_own ? -1 : c->load_step;
    p->explicit_step = want >= 0;
    if (p->explicit_step) {
        for (size_t i = 0; i < n; i++)
            p->has_target |= steps[i] == want;
        if (!p->has_target)
            return shs__err(SHS_ENOCHECKPOINT, "%s: no complete checkpoint of load_step %lld", sp,
                            (long long)want);
        p->target = want;
    } else if (p->tracked >= 0 && newest > p->tracked) {
        /* a crash between the commit rename and the tracker update, or a
           tracker set back: the newest complete step wins, and any step
           down to the tracker's is as good */
        p->target = newest;
        p->floor = p->tracked;
        p->repair = 1;
        p->has_target = 1;
    } else if (p->tracked >= 0) {
        for (size_t i = 0; i < n; i++)
            p->has_target |= steps[i] == p->tracked;
        p->target = p->tracked;
        p->floor = p->tracked;
        if (!p->has_target)
            snprintf(p->first_err, sizeof p->first_err,
                     "%s/" SHS__TRACKER " names step %lld, "
                     "but its directory is missing or incomplete",
                     sp, (long long)p->tracked);
    } else {
        /* committed steps but no tracker: the first save's tracker update
           never happened */
        p->target = newest;
        p->repair = 1;
        p->has_target = 1;
    }
    if (p->has_target && !p->explicit_step && step_is_weights_only(sp, p->target)) {
        /* a weights-only final save: resume from the newest full step if
           there is one, or the optimizer state would be lost */
        for (size_t i = n; i-- > 0;)
            if (steps[i] < p->target && !step_is_weights_only(sp, steps[i])) {
                say(m, res,
                    "%s: step %lld holds weights only; resuming from step %lld, the "
                    "newest full checkpoint",
                    sp, (long long)p->target, (long long)steps[i]);
                p->target = steps[i];
                p->repair = 0;
                p->floor = -1;
                break;
            }
    }
    return SHS_OK;
}

/* Step `step` of the save path into the state, the outcome agreed by all
   ranks; *dir becomes its directory. */
static int load_saved_step(shs_manager *m, const char *sp, int64_t step, char **dir,
                           shs_progress *progress, shs_load_result *res)
{
    int rc;
    shs__free(*dir);
    *dir = NULL;
    shs__meta meta;
    memset(&meta, 0, sizeof meta);
    if ((rc = shs__step_dir_find(dir, sp, step)) < 0 ||
        (rc = shs__source_open_step(&meta, *dir, SHS__SRC_STEPS)) < 0)
        rc = fail_before_load(m, rc);
    else
        rc = load_dir(m, *dir, &meta, 0, NULL, SHS_LOAD_SAVE_PATH, meta.model_only, progress, res);
    shs__meta_free(&meta);
    return agree(m, rc);
}

/* The target is missing or damaged (first_rc): the newest earlier step
   that verifies is the way out, taken automatically only while it is not
   behind the tracker's step, else only with resume_fallback. */
static int fall_back(shs_manager *m, resume_plan *p, int first_rc, char **dir,
                     shs_progress *progress, shs_load_result *res)
{
    const shs_config *c = &m->cfg;
    int64_t alt = -1;
    int rc;
    if ((rc = newest_verified(m, p->steps, p->n, p->target, &alt)) < 0)
        return rc;
    /* the original error comes first: messages are cut when ranks agree */
    if (alt < 0)
        return shs__err(first_rc, "%s (and no earlier step of %s verifies)", p->first_err, p->sp);
    int automatic = p->floor >= 0 ? alt >= p->floor : p->tracked < 0;
    if (!automatic && !c->resume_fallback)
        return shs__err(first_rc,
                        "%s; the newest earlier step that verifies is %lld: set "
                        "load_step: %lld to load it, or resume_fallback: true",
                        p->first_err, (long long)alt, (long long)alt);
    p->target = alt;
    if ((rc = load_saved_step(m, p->sp, alt, dir, progress, res)) < 0)
        return rc;
    if (!automatic) {
        res->fell_back = 1;
        say(m, res,
            "resume_fallback: %s; loaded step %lld, the newest earlier step that "
            "verifies",
            p->first_err, (long long)alt);
    }
    p->repair = p->tracked >= 0 ? alt > p->tracked : 1;
    return SHS_OK;
}

/* After the load: the tracker rewritten when it was behind or missing
   (rank 0 writes, every rank agrees), and the result's message. */
static int finish_resume(shs_manager *m, const resume_plan *p, const char *dir,
                         shs_load_result *res)
{
    const shs_config *c = &m->cfg;
    if (p->repair) {
        /* the tracker never moves backwards, and never stays behind */
        int r = SHS_OK, rc;
        if (m->comm->rank == 0 && c->enable_save && !c->load_only) {
            char *tp = shs__tracker_path(p->sp);
            r = tp ? shs__write_tracker(tp, p->target, c->fsync)
                   : shs__err(SHS_ENOMEM, "out of memory");
            shs__free(tp);
        }
        if ((rc = agree(m, r)) < 0)
            return rc;
        res->tracker_repaired = c->enable_save && !c->load_only;
        say(m, res, "%s: the tracker %s; resumed from step %lld, the newest complete step%s", p->sp,
            p->tracked >= 0 ? "was behind" : "was missing", (long long)p->target,
            res->tracker_repaired ? ", and rewrote the tracker" : "");
    } else if (!res->message || !*res->message) {
        say(m, res, "resumed from %s (step %lld)", dir, (long long)p->target);
    }
    return SHS_OK;
}

/*
 * 1. The job's own committed checkpoints in save_path.  *found: something
 * was loaded (or an error stops the load).  See shs_manager_load.
 */
static int resume_save_path(shs_manager *m, shs_progress *progress, shs_load_result *res,
                            int *found)
{
    resume_plan p = { .sp = m->save_path, .tracked = -1, .target = -1, .floor = -1 };
    char *dir = NULL;
    int absent = 0, first_rc = SHS_ECORRUPT;
    *found = 0;
    int rc = scan_save_path(&p, &absent);
    if ((rc = agree(m, rc)) < 0 || absent || (p.n == 0 && p.tracked < 0))
        goto done;
    *found = 1;
    if ((rc = choose_target(m, &p, res)) < 0)
        goto done;
    if (p.has_target)
        rc = load_saved_step(m, p.sp, p.target, &dir, progress, res);
    /* only damage to a step the policy chose is a reason to look further */
    if (!p.has_target || (rc < 0 && !p.explicit_step && is_damage(rc))) {
        if (p.has_target) {
            snprintf(p.first_err, sizeof p.first_err, "%s", shs_last_error());
            first_rc = rc;
        }
        rc = fall_back(m, &p, first_rc, &dir, progress, res);
    }
    if (rc == SHS_OK)
        rc = finish_resume(m, &p, dir, res);
done:
    shs__free(dir);
    shs__free(p.steps);
    return rc;
}

/* "a, b, c" of the skipped names that are (registered = 1) or are not
   (0) registered tensors, cut to fit; returns how many there are. */
static size_t list_skipped(char *out, size_t cap, const shs_manager *m, const shs_load_result *res,
                           int registered)
{
    size_t n = 0, at = 0;
    int cut = 0;
    out[0] = 0;
    for (size_t i = 0; i < res->n_skipped; i++) {
        const char *name = res->skipped[i];
        if ((shs__state_find(m->state, name, strlen(name)) >= 0) != registered)
            continue;
        n++;
        if (!cut && at + strlen(name) + 8 < cap) {
            at += (size_t)snprintf(out + at, cap - at, "%s%s", at ? ", " : "", name);
        } else if (!cut) {
            snprintf(out + at, cap - at, "%s...", at ? ", " : "");
            cut = 1;
        }
    }
    return n;
}

/* initial_load_in_hf: the Hugging Face weights at `from` (a folder, its
   index or model.safetensors), renamed by the name map, loaded as model
   weights into any chunking; what went unused is reported. */
static int load_hf(shs_manager *m, const char *from, const char *field, shs_progress *progress,
                   shs_load_result *res)
{
    const shs_config *c = &m->cfg;
    shs__meta meta;
    shs__dequant dq = { 0 };
    char *dir = NULL, *src = NULL;
    int rc = shs__hf_open(&meta, &dir, &src, from, field);
    if (rc == SHS_OK && (rc = shs__hf_rename(&meta, c->hf_name_map, c->hf_name_map_file)) < 0)
        rc = shs__err_prefix(rc, src);
    if (rc == SHS_OK && c->initial_load_in_hf_quantized)
        rc = shs__hf_dequant_pair(&dq, &meta, src);
    if (rc < 0) {
        rc = fail_before_load(m, rc);
        goto done;
    }
    if ((rc = load_dir(m, dir, &meta, 1, c->initial_load_in_hf_quantized ? &dq : NULL,
                       SHS_LOAD_INITIAL, 1, progress, res)) < 0)
        goto done;
    shs__free(m->held_path);
    m->held_path = src;
    src = NULL;
    res->path = m->held_path;
    char unused[384], missing[384];
    size_t n_unused = list_skipped(unused, sizeof unused, m, res, 0);
    size_t n_missing = list_skipped(missing, sizeof missing, m, res, 1);
    char a[448] = "", b[448] = "";
    if (n_unused)
        snprintf(a, sizeof a, "; %zu tensor(s) of the files unused: %s", n_unused, unused);
    if (n_missing)
        snprintf(b, sizeof b, "; %zu registered tensor(s) not in the files, left as they were: %s",
                 n_missing, missing);
    say(m, res, "loaded Hugging Face weights %s from %s%s%s", res->path, field, a, b);
    if (n_unused || n_missing) {
        pthread_mutex_lock(&m->mu);
        snprintf(m->warning, sizeof m->warning, "%s", res->message);
        pthread_mutex_unlock(&m->mu);
    }
done:
    shs__hf_dequant_release(&dq);
    shs__meta_free(&meta);
    shs__free(dir);
    shs__free(src);
    return rc;
}

/* "a/./b//" -> "a/b": the same path written two ways (no "..": a symbolic
   link makes it mean something else). */
static void path_tidy(char *p)
{
    char *w = p;
    for (const char *r = p; *r;) {
        if (r[0] == '.' && r[1] == '/' && (w == p || w[-1] == '/')) {
            r += 2;
            continue;
        }
        if (*r == '/' && w > p && w[-1] == '/') {
            r++;
            continue;
        }
        *w++ = *r++;
    }
    while (w > p + 1 && w[-1] == '/')
        w--;
    if (w > p + 1 && w[-1] == '.' && w[-2] == '/')
        w -= 2;
    *w = '\0';
}

/* load_path names the save path itself (MindSpore's resume_training with
   load_checkpoint = the job's own folder): the same directory, or, while
   neither exists, the same path once "./" and "//" are tidied away. */
static int same_directory(const char *a, const char *b)
{
    struct stat sa, sb;
    int ea = shs__io->stat(a, &sa) == 0 ? 0 : errno;
    int eb = shs__io->stat(b, &sb) == 0 ? 0 : errno;
    if (!ea && !eb)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (ea != ENOENT || eb != ENOENT)
        return 0; /* one exists, or an error the load itself will report */
    char *x = shs__strdup(a), *y = shs__strdup(b);
    int same = 0;
    if (x && y) {
        path_tidy(x);
        path_tidy(y);
        same = strcmp(x, y) == 0;
    }
    shs__free(x);
    shs__free(y);
    return same;
}

static int load_local(shs_manager *m, shs_progress *progress, shs_load_result *res)
{
    const shs_config *c = &m->cfg;
    int rc, found = 0;
    if (!c->enable) {
        say(m, res, "checkpointing is disabled (enable: false): nothing loaded, nothing saved");
        return SHS_OK;
    }
    if (c->create_seed_checkpoint) {
        res->source = SHS_LOAD_SEED;
        say(m, res, "create_seed_checkpoint: nothing loaded");
        return SHS_OK; /* the seed is a fresh initialisation */
    }
    m->load_path_is_own = *c->load_path && *m->save_path &&
                          same_directory(c->load_path, m->save_path);
    /* 1. the job's own progress always wins */
    if (*m->save_path && ((rc = resume_save_path(m, progress, res, &found)) < 0 || found))
        return rc;
    /* load_step names a step of the save path (or of load_path): with
       nothing there it cannot be honoured, and a fresh start would hide
       that */
    if (c->load_step >= 0 && (!*c->load_path || m->load_path_is_own))
        return fail_before_load(
            m, *m->save_path
                   ? shs__err(SHS_ENOCHECKPOINT,
                              "load_step %lld: save_path '%s' holds no checkpoint (it is empty "
                              "or does not exist)",
                              (long long)c->load_step, m->save_path)
                   : shs__err(SHS_ENOCHECKPOINT,
                              "load_step %lld: there is no save_path or load_path to load it from",
                              (long long)c->load_step));
    /* 2. load_path; 3. initial_load_path: explicit choices, so a path that
       does not exist is an error, and a plain folder of safetensors files
       is read as such */
    const char *from = NULL, *field = NULL;
    int source, weights_only;
    if (*c->load_path && m->load_path_is_own) {
        say(m, res,
            "nothing to resume in save_path '%s' (load_path names it too): fresh start, "
            "saving there",
            m->save_path);
        return SHS_OK;
    } else if (*c->load_path) {
        from = c->load_path;
        field = "load_path";
        source = SHS_LOAD_LOAD_PATH;
        weights_only = c->no_load_optim;
    } else if (*c->initial_load_path || (c->initial_load_in_hf && *c->hf_assets_path)) {
        /* torchtitan: hf_assets_path when initial_load_path is empty */
        int own = *c->initial_load_path != 0;
        from = own ? c->initial_load_path : c->hf_assets_path;
        field = own ? "initial_load_path" : "hf_assets_path";
        source = SHS_LOAD_INITIAL;
        weights_only = c->initial_load_model_only;
        if (c->initial_load_in_hf)
            return load_hf(m, from, field, progress, res);
    } else {
        say(m, res, "nothing to resume in save_path '%s' and no load_path: fresh start",
            m->save_path);
        return SHS_OK;
    }
    shs__source src;
    shs__source_req req = SHS__SOURCE_REQ_INIT;
    req.step = source == SHS_LOAD_LOAD_PATH ? c->load_step : -1;
    if ((rc = shs__source_open(&src, from, &req)) < 0) {
        shs__source_release(&src);
        return fail_before_load(m, shs__err_prefix(rc, field));
    }
    rc = load_dir(m, src.dir, &src.m, 0, NULL, source, weights_only, progress, res);
    if (rc == SHS_OK)
        say(m, res, "loaded %s (step %lld) from %s", src.path, (long long)res->step, field);
    shs__source_release(&src);
    return rc;
}

int shs_manager_load(shs_manager *m, shs_progress *progress, shs_load_result *result)
{
    if (!m || !progress)
        return shs__err(SHS_EINVAL, "shs_manager_load: NULL argument");
    if (shs__check_progress(progress, "shs_manager_load") < 0)
        return SHS_EINVAL;
    if (result && shs__check_version(result, SHS__V_LOAD_RESULT, "shs_manager_load") < 0)
        return SHS_EINVAL;
    /* an async save in flight uses the communicator from its thread: let
       it finish before this thread's collectives */
    int rc = shs__manager_wait_idle(m);
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
        shs__copy_out(result, &m->held, SHS__V_LOAD_RESULT);
    return rc;
}
