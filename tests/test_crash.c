/* test_crash.c -- kill -9 at random points during checkpoint saves, then
 * reopen the save path and check that nothing committed was lost.
 *
 * Each iteration forks a "trainer" child that saves step after step into
 * one save path (fsync on, save_max 2 so retention deletions are also
 * interrupted; SYNC and ASYNC iterations alternate; some iterations are
 * incremental; some saves re-save the step just saved, which takes the
 * atomic-replacement path).  The state's content is a deterministic
 * function of (step, gen), where gen counts the re-saves of a step, so any
 * mix of two saves is detected.  After each save is known committed the
 * child appends (step, gen) to a record file.  The parent sleeps a random
 * time (seeded PRNG), SIGKILLs the child, and then:
 *   - creates a manager on the save path (which must remove .tmp-* /
 *     .trash-* / tracker temp files) and checks nothing of them remains;
 *   - checks every iteration_* directory left verifies (a directory appears
 *     under its final name only once complete);
 *   - resolves the newest checkpoint (SHS_ENOCHECKPOINT is valid only while
 *     nothing was ever committed), verifies it, loads it into a fresh state
 *     with the same registration, and checks every tensor, blob and
 *     progress field equals the deterministic function of the loaded
 *     (step, gen), and that (step, gen) is at least the newest one the child
 *     reported committed and at least the previous iteration's load.
 * Crashes pile up: every iteration continues in the same save path (the
 * parent prunes directories well below the loaded step to bound disk use).
 *
 * A random delay lands between saves or while files are written most of
 * the time, rarely in the short windows of a replacement, a retention
 * delete or a tracker update.  So one iteration in three is aimed: the
 * child SIGKILLs itself right after the k-th (random k) io call of one
 * kind -- a file opened in a .tmp-iteration_* directory, a rename to a
 * .trash-* or .replaced-* name, the tracker's temporary file opened --
 * through the io seam.  Every kill is classified by what it left in the
 * save path (.tmp- directory: killed while writing; .trash- / .replaced-:
 * while replacing or deleting; tracker temp file: while updating the
 * tracker; nothing: between saves), the counts are printed, and a default
 * run (>= 20 iterations) fails if some kind was never seen.
 *
 * Environment: SHS_CRASH_ITERS (default 100), SHS_CRASH_SEED (default: time
 * and pid; printed), SHS_CRASH_KEEP=1 keeps the save path.  On a failure
 * the seed, iteration, what was expected and an `ls -la` of the save path
 * are printed, and the save path is kept.
 */
#include "testutil.h"

#include "store/io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GBS 32

/* ------------------------------------------------------------------ */
/* The deterministic state                                            */
/* ------------------------------------------------------------------ */

typedef struct tspec {
    const char *name;
    shs_kind kind;
    shs_dtype dtype;
    size_t ndim;
    uint64_t shape[3];
    int frozen; /* content depends on step / 4 only (incremental links it) */
} tspec;

/* ~1.2 MB in total: model and optimizer kinds, several dtypes, an empty
   optimizer slot, a tensor that changes only every 4 steps. */
static const tspec k_tensors[] = {
    { "model.embed.weight", SHS_KIND_MODEL, SHS_F32, 2, { 256, 128, 0 }, 1 },
    { "model.layer0.weight", SHS_KIND_MODEL, SHS_BF16, 2, { 384, 256, 0 }, 0 },
    { "model.layer0.bias", SHS_KIND_MODEL, SHS_F32, 1, { 384, 0, 0 }, 0 },
    { "model.norm.scale", SHS_KIND_MODEL, SHS_F16, 3, { 2, 3, 77 }, 0 },
    { "optimizer.exp_avg.layer0.weight", SHS_KIND_OPTIMIZER, SHS_F32, 2, { 384, 256, 0 }, 0 },
    { "optimizer.exp_avg_sq.layer0.weight", SHS_KIND_OPTIMIZER, SHS_F32, 2, { 384, 256, 0 }, 0 },
    { "optimizer.step", SHS_KIND_OPTIMIZER, SHS_I64, 1, { 1, 0, 0 }, 0 },
    { "optimizer.empty_slot", SHS_KIND_OPTIMIZER, SHS_F32, 1, { 0, 0, 0 }, 0 },
};
#define NT (sizeof k_tensors / sizeof k_tensors[0])

static size_t tensor_bytes(size_t i)
{
    uint64_t n = 1;
    for (size_t d = 0; d < k_tensors[i].ndim; d++)
        n *= k_tensors[i].shape[d];
    return (size_t)(n * shs_dtype_bits(k_tensors[i].dtype) / 8);
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Bytes of tensor i at (step, gen).  Raw pseudo-random bits: the library
   copies bytes (same dtype on save and load), so NaN patterns are fine. */
static void fill_tensor(void *dst, size_t i, int64_t step, int64_t gen)
{
    size_t n = tensor_bytes(i);
    uint64_t s = k_tensors[i].frozen ? (uint64_t)(step / 4) * 1000003u + i
                                     : ((uint64_t)step << 20) ^ ((uint64_t)gen << 8) ^ i;
    s = s * 0x2545F4914F6CDD1Dull + 0x1234567;
    unsigned char *p = dst;
    size_t k = 0;
    for (; k + 8 <= n; k += 8) {
        uint64_t v = splitmix(&s);
        memcpy(p + k, &v, 8);
    }
    if (k < n) {
        uint64_t v = splitmix(&s);
        memcpy(p + k, &v, n - k);
    }
    if (strcmp(k_tensors[i].name, "optimizer.step") == 0)
        memcpy(dst, &step, 8);
}

static void blob_rng(unsigned char out[64], int64_t step, int64_t gen)
{
    uint64_t s = (uint64_t)step * 7919u + (uint64_t)gen * 104729u;
    for (int k = 0; k < 8; k++) {
        uint64_t v = splitmix(&s);
        memcpy(out + 8 * k, &v, 8);
    }
}

static int blob_dataloader(char *out, size_t cap, int64_t step, int64_t gen)
{
    return snprintf(out, cap, "{\"step\":%lld,\"gen\":%lld,\"consumed_samples\":%lld}",
                    (long long)step, (long long)gen, (long long)(step * GBS));
}

/* A text blob whose length varies with the step. */
static int blob_sched(char *out, size_t cap, int64_t step, int64_t gen)
{
    int n = snprintf(out, cap, "{\"last_epoch\":%lld,\"gen\":%lld,\"pad\":\"", (long long)step,
                     (long long)gen);
    int pad = (int)(step % 97);
    for (int k = 0; k < pad && (size_t)n + 3 < cap; k++)
        out[n++] = (char)('a' + (step + k) % 26);
    n += snprintf(out + n, cap - (size_t)n, "\"}");
    return n;
}

static void make_progress(shs_progress *p, int64_t step, int64_t gen)
{
    *p = (shs_progress)SHS_PROGRESS_INIT;
    p->epoch_num = step / 100;
    p->step_num = step % 100;
    p->global_step = step;
    p->loss_scale = 65536.0 / (double)(1 + step % 7);
    p->global_batch_size = GBS;
    p->consumed_samples = step * GBS + gen;
    if (gen) /* "" (gen 0) is written as null */
        snprintf(p->ckpt_status, sizeof p->ckpt_status, "gen%lld", (long long)gen);
}

typedef struct tstate {
    shs_state *st;
    void *buf[NT];
} tstate;

/* Returns 0 or a status; used in the child too (no cmocka asserts). */
static int tstate_init(tstate *ts)
{
    memset(ts, 0, sizeof *ts);
    int rc = shs_state_create(&ts->st);
    for (size_t i = 0; rc == SHS_OK && i < NT; i++) {
        ts->buf[i] = calloc(1, tensor_bytes(i) + 8);
        if (!ts->buf[i])
            return SHS_ENOMEM;
        shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
        s.name = k_tensors[i].name;
        s.kind = k_tensors[i].kind;
        s.dtype = k_tensors[i].dtype;
        s.ndim = k_tensors[i].ndim;
        s.shape = k_tensors[i].shape;
        s.data = ts->buf[i];
        rc = shs_state_add_tensor(ts->st, &s);
    }
    return rc;
}

static void tstate_free(tstate *ts)
{
    shs_state_free(ts->st);
    for (size_t i = 0; i < NT; i++)
        free(ts->buf[i]);
    memset(ts, 0, sizeof *ts);
}

static int tstate_set(tstate *ts, int64_t step, int64_t gen)
{
    unsigned char rng[64];
    char text[512];
    int rc = SHS_OK;
    for (size_t i = 0; i < NT; i++)
        fill_tensor(ts->buf[i], i, step, gen);
    blob_rng(rng, step, gen);
    rc = shs_state_set_blob(ts->st, "rng", rng, sizeof rng);
    int n = blob_dataloader(text, sizeof text, step, gen);
    if (rc == SHS_OK)
        rc = shs_state_set_blob(ts->st, "dataloader", text, (size_t)n);
    n = blob_sched(text, sizeof text, step, gen);
    if (rc == SHS_OK)
        rc = shs_state_set_blob(ts->st, "lr_scheduler", text, (size_t)n);
    return rc;
}

static void base_config(shs_config *c, const char *save_path, int async, int incremental)
{
    shs_config_init(c);
    c->save_path = save_path;
    c->save_interleaved_steps = 1;
    c->save_max = 2;
    c->fsync = 1;
    c->async_save = async;
    c->incremental = incremental;
}

/* ------------------------------------------------------------------ */
/* The child: a trainer that saves until it is killed                 */
/* ------------------------------------------------------------------ */

typedef struct rec {
    int64_t step, gen;
} rec;

static uint64_t g_rng;

static uint64_t rnd(void)
{
    return splitmix(&g_rng);
}

static double rnd01(void)
{
    return (double)(rnd() >> 11) * (1.0 / 9007199254740992.0);
}

static void child_fail(int errfd, const char *what, int rc)
{
    char msg[1200];
    int n = snprintf(msg, sizeof msg, "child: %s: %s (%s)\n", what, shs_strerror(rc),
                     shs_last_error());
    if (errfd >= 0 && n > 0 && write(errfd, msg, (size_t)n) < 0) {
        /* nothing more to do */
    }
    _exit(3);
}

static void child_report(int recfd, int errfd, int64_t step, int64_t gen)
{
    rec r = { step, gen };
    if (write(recfd, &r, sizeof r) != (ssize_t)sizeof r)
        child_fail(errfd, "cannot write the record file", SHS_EIO);
}

/* Aimed kills: the child dies right after the k-th io call of one kind. */
enum {
    AIM_NONE,
    AIM_WRITE,
    AIM_REPLACE,
    AIM_TRACKER,
    AIM_N
};
static int g_aim;
static long g_aim_left;

static const char *base_name(const char *path)
{
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

static void aim_hit(int kind)
{
    if (g_aim == kind && --g_aim_left == 0)
        kill(getpid(), SIGKILL); /* the whole process, from any thread */
}

static int aim_open(const char *path, int flags, mode_t mode)
{
    int fd = shs__io_posix.open(path, flags, mode);
    if (fd >= 0 && (flags & (O_WRONLY | O_RDWR))) {
        if (strstr(path, "/.tmp-iteration_"))
            aim_hit(AIM_WRITE);
        else if (strncmp(base_name(path), TU_TRACKER ".tmp.", sizeof TU_TRACKER + 4) == 0)
            aim_hit(AIM_TRACKER);
    }
    return fd;
}

static int aim_rename(const char *from, const char *to)
{
    int rc = shs__io_posix.rename(from, to);
    if (rc == 0 && (strncmp(base_name(to), ".trash-", 7) == 0 ||
                    strncmp(base_name(to), ".replaced-", 10) == 0))
        aim_hit(AIM_REPLACE);
    return rc;
}

static shs__io_ops g_aim_ops;

static void child_main(const char *save_path, int recfd, int errfd, int64_t start, int async,
                       int incremental, uint64_t seed, int aim, long aim_k)
{
    if (aim != AIM_NONE) {
        g_aim = aim;
        g_aim_left = aim_k;
        g_aim_ops = shs__io_posix;
        g_aim_ops.open = aim_open;
        g_aim_ops.rename = aim_rename;
        shs__io_set(&g_aim_ops);
    }
    tstate ts;
    shs_config c;
    shs_manager *m = NULL;
    int rc;
    g_rng = seed;
    if ((rc = tstate_init(&ts)) != SHS_OK)
        child_fail(errfd, "state", rc);
    base_config(&c, save_path, async, incremental);
    if ((rc = shs_manager_create(&m, &c, ts.st)) != SHS_OK)
        child_fail(errfd, "shs_manager_create", rc);
    int64_t step = start, gen = 0;
    int have_pending = 0;
    rec pending = { 0, 0 };
    for (long n = 0; n < 100000; n++) {
        if ((rc = tstate_set(&ts, step, gen)) != SHS_OK)
            child_fail(errfd, "set blobs", rc);
        shs_progress p = SHS_PROGRESS_INIT;
        make_progress(&p, step, gen);
        int defer = async && rnd() % 3 == 0;
        if (gen == 0 && !defer && rnd() % 2 == 0) {
            int saved = 0;
            if ((rc = shs_manager_step(&saved, m, &p)) != SHS_OK)
                child_fail(errfd, "shs_manager_step", rc);
            if (!saved)
                child_fail(errfd, "shs_manager_step did not save with interval 1", SHS_EINVAL);
        } else if ((rc = shs_manager_save(m, &p, defer ? SHS_SAVE_DEFER_SNAPSHOT : 0)) != SHS_OK) {
            child_fail(errfd, "shs_manager_save", rc);
        }
        if (!async) {
            child_report(recfd, errfd, step, gen);
        } else {
            /* the save returned only after the previous one committed */
            if (have_pending)
                child_report(recfd, errfd, pending.step, pending.gen);
            pending = (rec){ step, gen };
            have_pending = 1;
            if (defer && (rc = shs_manager_fence(m)) != SHS_OK)
                child_fail(errfd, "shs_manager_fence", rc);
            if (rnd() % 3 == 0) {
                if ((rc = shs_manager_wait(m)) != SHS_OK)
                    child_fail(errfd, "shs_manager_wait", rc);
                child_report(recfd, errfd, pending.step, pending.gen);
                have_pending = 0;
            }
        }
        /* re-save the same step now and then (atomic replacement) */
        if (rnd() % 5 == 0) {
            gen++;
        } else {
            step++;
            gen = 0;
        }
    }
    _exit(0); /* not reached in practice: the parent kills us first */
}

/* ------------------------------------------------------------------ */
/* The parent                                                         */
/* ------------------------------------------------------------------ */

typedef struct run {
    uint64_t seed;
    long iter;
    const char *save_path;
    /* statistics */
    long n_none, n_saves, n_resaves_seen, n_ahead, n_tmp_left, n_trash_left, n_trk_tmp_left,
        n_exchange_dirs, n_nothing_left;
} run;

static void dump_dir(const char *path)
{
    char cmd[4400];
    fflush(stdout);
    snprintf(cmd, sizeof cmd,
             "ls -la '%s' 1>&2; for d in '%s'/*/ '%s'/.[a-z]*/; do "
             "[ -d \"$d\" ] && { echo \"$d:\"; ls -la \"$d\"; }; done 1>&2; "
             "echo 'tracker:' 1>&2; cat '%s/" TU_TRACKER "' 1>&2; echo 1>&2",
             path, path, path, path);
    if (system(cmd) != 0) {
        /* best effort */
    }
}

#define FAILF(R, ...)                                                                              \
    do {                                                                                           \
        fprintf(stderr, "CRASH TEST FAILURE (seed %" PRIu64 ", iteration %ld): ", (R)->seed,       \
                (R)->iter);                                                                        \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\nlast error: %s\nsave path (kept): %s\n", shs_last_error(),              \
                (R)->save_path);                                                                   \
        dump_dir((R)->save_path);                                                                  \
        fail();                                                                                    \
    } while (0)

static int64_t step_of_dirname(const char *name)
{
    if (strncmp(name, "iteration_", 10) != 0 || !name[10])
        return -1;
    int64_t v = 0;
    for (const char *p = name + 10; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

/* Count leftovers before the manager cleans them (statistics: where did
   the kill land?). */
static void count_leftovers(run *r, long *tmp, long *trash, long *trk)
{
    *tmp = *trash = *trk = 0;
    DIR *d = opendir(r->save_path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, ".tmp-", 5) == 0)
            (*tmp)++;
        else if (strncmp(e->d_name, ".trash-", 7) == 0 || strncmp(e->d_name, ".replaced-", 10) == 0)
            (*trash)++;
        else if (strncmp(e->d_name, TU_TRACKER ".", sizeof TU_TRACKER) == 0)
            (*trk)++;
    }
    closedir(d);
}

/* Parse the "gen" out of the dataloader blob. */
static int parse_dataloader(const void *data, size_t len, int64_t *step, int64_t *gen)
{
    char buf[256];
    if (len >= sizeof buf)
        return -1;
    memcpy(buf, data, len);
    buf[len] = '\0';
    long long s, g, c;
    if (sscanf(buf, "{\"step\":%lld,\"gen\":%lld,\"consumed_samples\":%lld}", &s, &g, &c) != 3)
        return -1;
    *step = s;
    *gen = g;
    return 0;
}

/* Which (step', gen') near (step, gen) does tensor i's content match?  For
   the failure message. */
static void diagnose_tensor(char *out, size_t cap, const void *got, size_t i, int64_t step)
{
    void *want = malloc(tensor_bytes(i) + 8);
    snprintf(out, cap, "matches no (step, gen) near step %lld", (long long)step);
    for (int64_t s = step - 3; want && s <= step + 3; s++)
        for (int64_t g = 0; g < 8; g++) {
            if (s < 0)
                continue;
            fill_tensor(want, i, s, g);
            if (memcmp(want, got, tensor_bytes(i)) == 0) {
                snprintf(out, cap, "matches step %lld gen %lld instead", (long long)s,
                         (long long)g);
                free(want);
                return;
            }
        }
    int zero = 1;
    for (size_t k = 0; k < tensor_bytes(i) && zero; k++)
        zero = ((const unsigned char *)got)[k] == 0;
    if (zero && tensor_bytes(i))
        snprintf(out, cap, "is all zero (not loaded)");
    free(want);
}

/* Remove step directories well below `keep_from` (bounds disk use over
   long soaks; these are not the tracker's target). */
static void prune(const char *save_path, int64_t keep_from)
{
    DIR *d = opendir(save_path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t s = step_of_dirname(e->d_name);
        if (s >= 0 && s < keep_from)
            tu_rmtree(tu_path(save_path, e->d_name));
    }
    closedir(d);
}

/* Every iteration_* directory must be complete and valid: a step directory
   gets its final name only once everything in it is written. */
static int verify_all_dirs(run *r, int64_t *max_dir_step)
{
    DIR *d = opendir(r->save_path);
    *max_dir_step = -1;
    if (!d)
        return 1; /* killed before the save path was created */
    struct dirent *e;
    int ok = 1;
    char bad[300] = "";
    int bad_rc = 0;
    while ((e = readdir(d))) {
        int64_t s = step_of_dirname(e->d_name);
        if (s < 0)
            continue;
        if (s > *max_dir_step)
            *max_dir_step = s;
        int rc = shs_checkpoint_verify(tu_path(r->save_path, e->d_name), NULL, 0);
        if (rc != SHS_OK && ok) {
            ok = 0;
            bad_rc = rc;
            snprintf(bad, sizeof bad, "%s", e->d_name);
        }
    }
    closedir(d);
    if (!ok)
        FAILF(r, "step directory %s does not verify: %s", bad, shs_strerror(bad_rc));
    return ok;
}

/* The check after a kill.  *loaded_step / *loaded_gen: in = the previous
   iteration's load (-1: none), out = this one's. */
static void check_after_kill(run *r, const rec *reported, int have_reported, int64_t *loaded_step,
                             int64_t *loaded_gen)
{
    long lt, ltr, lk;
    count_leftovers(r, &lt, &ltr, &lk);
    r->n_tmp_left += lt > 0;
    r->n_trash_left += ltr > 0;
    r->n_trk_tmp_left += lk > 0;
    r->n_nothing_left += lt == 0 && ltr == 0 && lk == 0;

    /* 1. a manager on the save path removes the leftovers */
    tstate ts;
    assert_int_equal(tstate_init(&ts), SHS_OK);
    shs_config c;
    base_config(&c, r->save_path, 0, 0);
    shs_manager *m = NULL;
    int rc = shs_manager_create(&m, &c, ts.st);
    if (rc != SHS_OK)
        FAILF(r, "shs_manager_create after the kill: %s", shs_strerror(rc));
    DIR *d = opendir(r->save_path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strncmp(e->d_name, ".tmp-", 5) == 0 || strncmp(e->d_name, ".trash-", 7) == 0 ||
                strncmp(e->d_name, ".replaced-", 10) == 0 ||
                strncmp(e->d_name, TU_TRACKER ".", sizeof TU_TRACKER) == 0) {
                closedir(d);
                FAILF(r, "leftover %s remains after shs_manager_create", e->d_name);
            }
        }
        closedir(d);
    }

    /* 2. every step directory present is complete */
    int64_t max_dir;
    if (!verify_all_dirs(r, &max_dir))
        return;

    /* 3. resolve */
    char dir[4096];
    rc = shs_checkpoint_resolve(dir, sizeof dir, r->save_path, -1);
    struct stat sb;
    int path_exists = stat(r->save_path, &sb) == 0;
    /* killed before the save path was even created: resolve reports the
       path missing (SHS_ENOENT); with the path present and no complete step
       directory it must be SHS_ENOCHECKPOINT */
    if (rc == SHS_ENOCHECKPOINT || (rc == SHS_ENOENT && !path_exists)) {
        if (have_reported || *loaded_step >= 0)
            FAILF(r, "no checkpoint resolved, but step %lld gen %lld was committed",
                  (long long)(have_reported ? reported->step : *loaded_step),
                  (long long)(have_reported ? reported->gen : *loaded_gen));
        if (max_dir >= 0)
            FAILF(r, "no checkpoint resolved, but iteration_%08lld exists", (long long)max_dir);
        r->n_none++;
        /* the manager agrees: a fresh start */
        shs_progress p = SHS_PROGRESS_INIT;
        p.global_batch_size = GBS;
        shs_load_result res = SHS_LOAD_RESULT_INIT;
        rc = shs_manager_load(&res, m, &p);
        if (rc != SHS_OK || res.loaded)
            FAILF(r, "shs_manager_load with no checkpoint: %s, loaded=%d", shs_strerror(rc),
                  res.loaded);
        shs_manager_free(m);
        tstate_free(&ts);
        return;
    }
    if (rc != SHS_OK)
        FAILF(r, "shs_checkpoint_resolve: %s", shs_strerror(rc));
    rc = shs_checkpoint_verify(dir, NULL, 0);
    if (rc != SHS_OK)
        FAILF(r, "resolved %s does not verify: %s", dir, shs_strerror(rc));
    const char *base = strrchr(dir, '/');
    int64_t dstep = step_of_dirname(base ? base + 1 : dir);
    if (dstep < 0)
        FAILF(r, "resolved %s is not an iteration_ directory", dir);

    /* 4. load it (auto-resume from the save path) into a fresh state */
    shs_progress p = SHS_PROGRESS_INIT;
    p.global_batch_size = GBS;
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    rc = shs_manager_load(&res, m, &p);
    if (rc != SHS_OK)
        FAILF(r, "shs_manager_load: %s", shs_strerror(rc));
    if (res.tracker_repaired) {
        /* killed between the commit rename and the tracker update: the
           newest complete step is loaded and the tracker catches up */
        if (res.step != max_dir || tu_tracker_step(r->save_path) != max_dir)
            FAILF(r, "tracker repaired to step %lld (tracker %lld), newest directory %lld",
                  (long long)res.step, (long long)tu_tracker_step(r->save_path),
                  (long long)max_dir);
        snprintf(dir, sizeof dir, "%s", res.path);
        dstep = res.step;
    }
    if (!res.loaded || strcmp(res.path, dir) != 0 || res.step != dstep || !res.optimizer_loaded ||
        !res.progress_loaded || !res.rank_state_restored || res.batch_size_changed)
        FAILF(r,
              "load result: loaded=%d path=%s (resolved %s) step=%lld optimizer=%d "
              "progress=%d rank_state=%d batch_size_changed=%d",
              res.loaded, res.path, dir, (long long)res.step, res.optimizer_loaded,
              res.progress_loaded, res.rank_state_restored, res.batch_size_changed);

    /* 5. everything is the function of one (step, gen) */
    const void *data;
    size_t len;
    int64_t bstep = -1, gen = -1;
    rc = shs_state_get_blob(ts.st, "dataloader", &data, &len);
    if (rc != SHS_OK || parse_dataloader(data, len, &bstep, &gen) != 0)
        FAILF(r, "dataloader blob missing or malformed (%s)", shs_strerror(rc));
    if (bstep != dstep || p.global_step != dstep)
        FAILF(r, "directory step %lld, dataloader blob step %lld, common.json global_step %lld",
              (long long)dstep, (long long)bstep, (long long)p.global_step);
    shs_progress want = SHS_PROGRESS_INIT;
    make_progress(&want, dstep, gen);
    if (p.epoch_num != want.epoch_num || p.step_num != want.step_num ||
        p.loss_scale != want.loss_scale || p.global_batch_size != want.global_batch_size ||
        p.consumed_samples != want.consumed_samples || strcmp(p.ckpt_status, want.ckpt_status) != 0)
        FAILF(r,
              "progress of step %lld gen %lld: epoch %lld step_num %lld loss_scale %g "
              "gbs %lld consumed %lld status '%s'",
              (long long)dstep, (long long)gen, (long long)p.epoch_num, (long long)p.step_num,
              p.loss_scale, (long long)p.global_batch_size, (long long)p.consumed_samples,
              p.ckpt_status);
    for (size_t i = 0; i < NT; i++) {
        void *w = malloc(tensor_bytes(i) + 8);
        assert_non_null(w);
        fill_tensor(w, i, dstep, gen);
        int same = memcmp(w, ts.buf[i], tensor_bytes(i)) == 0;
        free(w);
        if (!same) {
            char why[200];
            diagnose_tensor(why, sizeof why, ts.buf[i], i, dstep);
            FAILF(r, "tensor %s of step %lld gen %lld: wrong content: %s", k_tensors[i].name,
                  (long long)dstep, (long long)gen, why);
        }
    }
    unsigned char rngw[64];
    char textw[512];
    blob_rng(rngw, dstep, gen);
    rc = shs_state_get_blob(ts.st, "rng", &data, &len);
    if (rc != SHS_OK || len != sizeof rngw || memcmp(data, rngw, len) != 0)
        FAILF(r, "rng blob of step %lld gen %lld wrong (%zu bytes)", (long long)dstep,
              (long long)gen, len);
    int n = blob_sched(textw, sizeof textw, dstep, gen);
    rc = shs_state_get_blob(ts.st, "lr_scheduler", &data, &len);
    if (rc != SHS_OK || len != (size_t)n || memcmp(data, textw, len) != 0)
        FAILF(r, "lr_scheduler blob of step %lld gen %lld wrong", (long long)dstep, (long long)gen);

    /* 6. nothing committed was lost */
    if (have_reported &&
        (dstep < reported->step || (dstep == reported->step && gen < reported->gen)))
        FAILF(r, "loaded step %lld gen %lld, but step %lld gen %lld was reported committed",
              (long long)dstep, (long long)gen, (long long)reported->step,
              (long long)reported->gen);
    if (dstep < *loaded_step || (dstep == *loaded_step && gen < *loaded_gen))
        FAILF(r,
              "loaded step %lld gen %lld, older than the previous iteration's step %lld gen "
              "%lld",
              (long long)dstep, (long long)gen, (long long)*loaded_step, (long long)*loaded_gen);
    if (have_reported && (dstep > reported->step || gen > reported->gen))
        r->n_ahead++; /* committed, killed before it was reported */
    if (gen > 0)
        r->n_resaves_seen++;
    if (max_dir > dstep)
        r->n_exchange_dirs++; /* a newer directory, tracker not yet moved */
    *loaded_step = dstep;
    *loaded_gen = gen;
    shs_manager_free(m);
    tstate_free(&ts);
}

static long env_long(const char *name, long def)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    long x = strtol(v, &end, 10);
    return *end || x < 0 ? def : x;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Time of one synchronous fsynced save (sets the kill-delay scale). */
static double calibrate(const char *base)
{
    char *path = tu_path_dup(base, "calib");
    tstate ts;
    shs_config c;
    shs_manager *m = NULL;
    assert_int_equal(tstate_init(&ts), SHS_OK);
    base_config(&c, path, 0, 0);
    assert_int_equal(shs_manager_create(&m, &c, ts.st), SHS_OK);
    double best = 1e9;
    for (int64_t s = 1; s <= 4; s++) {
        assert_int_equal(tstate_set(&ts, s, 0), SHS_OK);
        shs_progress p = SHS_PROGRESS_INIT;
        make_progress(&p, s, 0);
        double t0 = now_s();
        assert_int_equal(shs_manager_save(m, &p, 0), SHS_OK);
        double t = now_s() - t0;
        if (t < best)
            best = t;
    }
    shs_manager_free(m);
    tstate_free(&ts);
    tu_rmtree(path);
    free(path);
    return best;
}

static void sleep_us(long us)
{
    struct timespec t = { us / 1000000, (us % 1000000) * 1000 };
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

static void test_kill9_during_saves(void **unused)
{
    (void)unused;
    long iters = env_long("SHS_CRASH_ITERS", 100);
    uint64_t seed = (uint64_t)env_long("SHS_CRASH_SEED", 0);
    if (!seed)
        seed = ((uint64_t)time(NULL) << 16) ^ (uint64_t)getpid();
    char *base = tu_mkdtemp();
    assert_non_null(base);
    char *save_path = tu_path_dup(base, "ckpt");
    char *recpath = tu_path_dup(base, "committed.rec");
    char *errpath = tu_path_dup(base, "child.err");
    run r = { .seed = seed, .save_path = save_path };
    double t_save = calibrate(base);
    /* kill delays: mostly spread over a few saves, sometimes tiny (during
       start-up or the first file write) */
    long scale_us = (long)(t_save * 1e6);
    if (scale_us < 200)
        scale_us = 200;
    printf("crash test: seed %" PRIu64 ", %ld iterations, one save %.2f ms, save path %s\n", seed,
           iters, t_save * 1e3, save_path);
    fflush(stdout);

    g_rng = seed;
    int64_t loaded_step = -1, loaded_gen = -1;
    double t0 = now_s();
    long n_child_saves = 0, n_kill_before_any = 0, n_aimed = 0, n_aim_missed = 0;
    for (long it = 0; it < iters; it++) {
        r.iter = it;
        alarm(120); /* a hang anywhere in an iteration fails the test */
        int recfd = open(recpath, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
        int errfd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
        assert_true(recfd >= 0 && errfd >= 0);
        int async = it % 2 == 1;
        int incremental = (it / 2) % 2 == 1;
        int64_t start = loaded_step < 0 ? 1 : loaded_step + 1;
        uint64_t child_seed = rnd();
        long delay;
        int aim = it % 3 == 2 ? 1 + (int)((it / 3) % (AIM_N - 1)) : AIM_NONE;
        long aim_k = 1 + (long)(rnd() % (aim == AIM_WRITE ? 12 : 3));
        double u = rnd01();
        if (aim != AIM_NONE)
            delay = 40 * scale_us; /* a fallback: the child kills itself first */
        else if (u < 0.15)
            delay = 5 + (long)(rnd01() * 500); /* 5 us .. 0.5 ms */
        else if (u < 0.3)
            delay = 500 + (long)(rnd01() * (double)scale_us); /* within the 1st save */
        else
            delay = (long)((0.5 + 4.5 * rnd01()) * (double)scale_us); /* a few saves */
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            alarm(0);
            child_main(save_path, recfd, errfd, start, async, incremental, child_seed, aim, aim_k);
            _exit(4);
        }
        close(recfd);
        close(errfd);
        int status = 0;
        pid_t got = 0;
        if (aim == AIM_NONE) {
            sleep_us(delay);
        } else {
            n_aimed++;
            for (long waited = 0; waited < delay && got == 0; waited += 200) {
                sleep_us(200);
                while ((got = waitpid(pid, &status, WNOHANG)) < 0 && errno == EINTR) {
                }
            }
            if (got == 0)
                n_aim_missed++;
        }
        if (got == 0) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
        }
        if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
            size_t elen = 0;
            char *emsg = tu_read_file(errpath, &elen);
            FAILF(&r, "the child was not killed but ended (status 0x%x): %s", status,
                  emsg ? emsg : "");
        }
        /* the newest (step, gen) the child reported committed */
        size_t rlen = 0;
        rec *recs = tu_read_file(recpath, &rlen);
        rec best = { -1, -1 };
        int have = 0;
        for (size_t k = 0; recs && k < rlen / sizeof(rec); k++) {
            if (!have || recs[k].step > best.step ||
                (recs[k].step == best.step && recs[k].gen > best.gen))
                best = recs[k];
            have = 1;
        }
        n_child_saves += (long)(rlen / sizeof(rec));
        if (!have)
            n_kill_before_any++;
        free(recs);
        check_after_kill(&r, &best, have, &loaded_step, &loaded_gen);
        if (loaded_step > 4)
            prune(save_path, loaded_step - 4);
    }
    alarm(0);
    double el = now_s() - t0;
    printf("crash test: %ld iterations in %.1f s: %ld saves reported committed, %ld kills "
           "before the first commit of their run, final step %lld gen %lld; kill left "
           ".tmp- dirs %ld times, .trash- %ld, tracker temp %ld; newer directory than the "
           "tracker %ld times; loaded a committed-but-unreported save %ld times; loaded a "
           "re-saved step %ld times; no checkpoint yet %ld times\n",
           iters, el, n_child_saves, n_kill_before_any, (long long)loaded_step,
           (long long)loaded_gen, r.n_tmp_left, r.n_trash_left, r.n_trk_tmp_left, r.n_exchange_dirs,
           r.n_ahead, r.n_resaves_seen, r.n_none);
    printf("crash test: what the kills left: .tmp-iteration_* (killed writing) %ld, .trash-* / "
           ".replaced-* (killed replacing or deleting) %ld, tracker temp file (killed updating "
           "the tracker) %ld, nothing (killed between saves) %ld; %ld kills aimed at an io "
           "call, %ld of them fell back to the timer\n",
           r.n_tmp_left, r.n_trash_left, r.n_trk_tmp_left, r.n_nothing_left, n_aimed, n_aim_missed);
    if (iters >= 20) {
        assert_true(loaded_step > 0); /* the test made progress at all */
        /* the kills landed inside saves, in every phase */
        assert_true(r.n_tmp_left > 0);
        assert_true(r.n_trash_left > 0);
        assert_true(r.n_trk_tmp_left > 0);
        assert_true(r.n_nothing_left > 0);
    }
    if (!getenv("SHS_CRASH_KEEP") || strcmp(getenv("SHS_CRASH_KEEP"), "1") != 0)
        tu_rmtree(base);
    free(save_path);
    free(recpath);
    free(errpath);
    free(base);
}

/* A child killed at once in a fresh save path: afterwards there is either
   no checkpoint (SHS_ENOCHECKPOINT, not garbage) or a valid one. */
static void test_kill9_at_start(void **unused)
{
    (void)unused;
    char *base = tu_mkdtemp();
    assert_non_null(base);
    for (int k = 0; k < 4; k++) {
        char name[32];
        snprintf(name, sizeof name, "fresh%d", k);
        char *save_path = tu_path_dup(base, name);
        run r = { .seed = 0, .iter = k, .save_path = save_path };
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            child_main(save_path, -1, -1, 1, k % 2, 0, (uint64_t)k + 1, AIM_NONE, 0);
        sleep_us(k * 300);
        kill(pid, SIGKILL);
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        /* no record file: nothing counts as reported (a child that got as
           far as reporting fails on the closed descriptor and ends with 3,
           which is fine here too) */
        int64_t ls = -1, lg = -1;
        rec none = { -1, -1 };
        check_after_kill(&r, &none, 0, &ls, &lg);
        free(save_path);
    }
    tu_rmtree(base);
    free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill9_at_start),
        cmocka_unit_test(test_kill9_during_saves),
    };
    return TU_RUN_GROUP(tests, NULL, NULL);
}
