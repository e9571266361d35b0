/*
 * bench_ckpt.c -- checkpoint manager benchmarks (bench/README.md, section 3):
 * shs_manager_save / shs_manager_load of a ~1 GiB training state against
 * physical baselines measured in the same process.
 *
 *   bench_ckpt save        DIR  sync save (fsync=1) vs write(2)+fsync of the
 *                               same bytes to one file
 *   bench_ckpt async       DIR  async save: time the caller is blocked (plain
 *                               and SHS_SAVE_DEFER_SNAPSHOT + fence) vs the
 *                               sync save time; background commit time
 *   bench_ckpt incremental DIR  90% frozen / 10% changing, 5 incremental saves:
 *                               bytes written / state bytes, time vs full save
 *   bench_ckpt resume      DIR  shs_manager_load into the registered buffers
 *                               (warm cache) vs memcpy of the same bytes
 *   bench_ckpt encrypt     DIR  encryption at rest (AES-256-GCM, encrypt_key_file):
 *                               encrypted vs unencrypted sync save (fsync=1),
 *                               interleaved, and the warm-cache load and
 *                               verify of each
 *   bench_ckpt profile-load DIR [ITERS [WORKERS]]   load in a loop, for perf record
 *   bench_ckpt profile-load-enc DIR [ITERS [WORKERS]]  the same, saved and loaded with a key
 *
 * Each mode is its own process (peak RSS per mode).  Results: human lines
 * plus "@@ {json}" lines for bench/report.py, like bench_io.
 *
 * The state (bench_torch_ckpt.py builds the same): model = 48 F32 matrices
 * [rows, 1024] whose rows sum to 131,072 (512 MiB) + 16 small F32 vectors;
 * optimizer = Adam moments exp_avg and exp_avg_sq of every model tensor in
 * BF16 (2 x 256 MiB); blobs lr_scheduler, dataloader (JSON) and rng (5 KiB).
 */
#include "shardsafe.h"

#include <xxhash.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define N_MODEL 64
#define N_T (3 * N_MODEL)
#define MODEL_ROWS 131072u /* x 1024 x 4 bytes = 512 MiB */

static const char *g_mode = "";

#define BENCH_NAME "bench_ckpt"
#include "benchutil.h"

/* ------------------------------------------------------------------ */
/* helpers                                                            */
/* ------------------------------------------------------------------ */

/* Remove every step directory of a save path (untimed), keep the path. */
static void clear_save_path(const char *sp)
{
    rmtree(sp);
    mkdir(sp, 0755);
}

/* ------------------------------------------------------------------ */
/* the training state                                                 */
/* ------------------------------------------------------------------ */

typedef struct btensor {
    char name[96];
    shs_kind kind;
    shs_dtype dtype;
    size_t ndim;
    uint64_t shape[2];
    size_t nbytes;
    void *data;
} btensor;

typedef struct bstate {
    btensor t[N_T];
    size_t total, model_bytes, opt_bytes;
    shs_state *st;
} bstate;

static uint32_t g_x = 2463534242u;

static uint32_t rnd(void)
{
    g_x ^= g_x << 13;
    g_x ^= g_x >> 17;
    g_x ^= g_x << 5;
    return g_x;
}

static void fill(btensor *t)
{
    size_t numel = t->nbytes / (t->dtype == SHS_F32 ? 4 : 2);
    if (t->dtype == SHS_F32) {
        uint32_t *p = t->data;
        for (size_t k = 0; k < numel; k++)
            p[k] = 0x3f800000u | (rnd() >> 9); /* [1, 2) */
    } else {
        uint16_t *p = t->data;
        for (size_t k = 0; k < numel; k++)
            p[k] = (uint16_t)(0x3c00u | (rnd() >> 25)); /* bf16 in (0, 0.02) */
    }
}

static void make_state(bstate *s)
{
    unsigned rows_left = MODEL_ROWS;
    memset(s, 0, sizeof *s);
    for (int i = 0; i < N_MODEL; i++) {
        btensor *t = &s->t[i];
        t->kind = SHS_KIND_MODEL;
        t->dtype = SHS_F32;
        size_t numel = model_tensor(i, N_MODEL, MODEL_ROWS, &rows_left, t->name, sizeof t->name,
                                    &t->ndim, t->shape);
        t->nbytes = numel * 4;
        for (int m = 0; m < 2; m++) {
            btensor *o = &s->t[N_MODEL + 2 * i + m];
            snprintf(o->name, sizeof o->name, "optimizer.state.%s.%s", t->name,
                     m ? "exp_avg_sq" : "exp_avg");
            o->kind = SHS_KIND_OPTIMIZER;
            o->dtype = SHS_BF16;
            o->ndim = t->ndim;
            memcpy(o->shape, t->shape, sizeof o->shape);
            o->nbytes = numel * 2;
        }
    }
    CHECK(shs_state_create(&s->st));
    for (int i = 0; i < N_T; i++) {
        btensor *t = &s->t[i];
        t->data = xmalloc(t->nbytes);
        fill(t);
        s->total += t->nbytes;
        if (t->kind == SHS_KIND_MODEL)
            s->model_bytes += t->nbytes;
        else
            s->opt_bytes += t->nbytes;
        shs_tensor_spec sp = SHS_TENSOR_SPEC_INIT;
        sp.name = t->name;
        sp.kind = t->kind;
        sp.dtype = t->dtype;
        sp.ndim = t->ndim;
        sp.shape = t->shape;
        sp.data = t->data;
        CHECK(shs_state_add_tensor(s->st, &sp));
    }
    static const char lr[] = "{\"last_epoch\": 300, \"base_lrs\": [0.0003], "
                             "\"_last_lr\": [0.00029]}";
    static const char dl[] = "{\"epoch\": 0, \"consumed_samples\": 9600, \"shard\": 3}";
    char rng[5120];
    for (size_t k = 0; k < sizeof rng; k++)
        rng[k] = (char)rnd();
    CHECK(shs_state_set_blob(s->st, "lr_scheduler", lr, sizeof lr - 1));
    CHECK(shs_state_set_blob(s->st, "dataloader", dl, sizeof dl - 1));
    CHECK(shs_state_set_blob(s->st, "rng", rng, sizeof rng));
    printf("state: %d tensors, %zu bytes (model %zu, optimizer %zu), 3 blobs\n", N_T, s->total,
           s->model_bytes, s->opt_bytes);
    result("state_bytes", (double)s->total, "B", "tensor bytes of the state");
}

static void free_state(bstate *s)
{
    shs_state_free(s->st);
    for (int i = 0; i < N_T; i++)
        free(s->t[i].data);
}

static int g_load_workers = 1;      /* load_worker_number of loading managers */
static const char *g_key_file = ""; /* encrypt_key_file of new managers */

static shs_manager *make_manager(bstate *s, const char *save_path, int async, int incremental,
                                 int do_fsync, const char *load_path)
{
    shs_config c;
    shs_config_init(&c);
    c.load_worker_number = g_load_workers;
    c.save_path = save_path;
    c.save_max = 0; /* keep all: the benchmark removes old steps, untimed */
    c.async_save = async;
    c.incremental = incremental;
    c.fsync = do_fsync;
    c.save_interleaved_steps = 1000000;
    c.encrypt_key_file = g_key_file;
    if (load_path)
        c.load_path = load_path;
    shs_manager *m;
    CHECK(shs_manager_create(&m, &c, s->st));
    return m;
}

/* write(2) of every tensor buffer into one file + fsync, from no file. */
static double dd_baseline(const char *path, const bstate *s, double *cpu)
{
    double c0 = cpu_now(), t0 = now();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        die("open", 1);
    for (int i = 0; i < N_T; i++)
        write_full(fd, s->t[i].data, s->t[i].nbytes);
    if (fsync(fd) != 0)
        die("fsync", 1);
    close(fd);
    double t = now() - t0;
    if (cpu)
        *cpu = cpu_now() - c0;
    return t;
}

static double timed_sync_save(shs_manager *m, const char *sp, int64_t step, double *cpu)
{
    clear_save_path(sp);
    sync();
    shs_progress p = progress_at(step);
    double c0 = cpu_now(), t0 = now();
    CHECK(shs_manager_save(m, &p, 0));
    double t = now() - t0;
    if (cpu)
        *cpu = cpu_now() - c0;
    return t;
}

static double xxh3_all(const bstate *s)
{
    double t0 = now();
    uint64_t h = 0;
    for (int i = 0; i < N_T; i++)
        h ^= XXH3_64bits(s->t[i].data, s->t[i].nbytes);
    double t = now() - t0;
    if (h == 42)
        printf(" ");
    return t;
}

/* ------------------------------------------------------------------ */
/* save                                                               */
/* ------------------------------------------------------------------ */

#define SAVE_REPS 3

static int mode_save(const char *dir)
{
    bstate s;
    make_state(&s);
    char *sp = path_in(dir, "ckpt_save");
    char *pb = path_in(dir, "ckpt_dd_baseline.bin");
    shs_manager *m = make_manager(&s, sp, 0, 0, 1, NULL);
    double tb[SAVE_REPS], ts[SAVE_REPS], cb[SAVE_REPS], cs[SAVE_REPS];
    shs_save_stats st = SHS_SAVE_STATS_INIT;
    for (int r = 0; r < SAVE_REPS; r++) {
        unlink(pb);
        clear_save_path(sp);
        sync();
        tb[r] = dd_baseline(pb, &s, &cb[r]);
        unlink(pb);
        ts[r] = timed_sync_save(m, sp, 100 * (r + 1), &cs[r]);
        CHECK(shs_manager_last_save(&st, m));
        printf("save rep %d: write(2)+fsync %.3f s, shs_manager_save %.3f s "
               "(stats: total %.3f s, blocked %.3f s, written %" PRIu64 " B)\n",
               r, tb[r], ts[r], st.total_seconds, st.blocked_seconds, st.bytes_written);
    }
    double bytes = (double)s.total;
    double gb = bytes / best_of(tb, SAVE_REPS) / 1e9, gs = bytes / best_of(ts, SAVE_REPS) / 1e9;
    printf("save: write(2)+fsync best %.3f s %.2f GB/s; shs_manager_save (sync, fsync=1) best "
           "%.3f s %.2f GB/s; ratio %.3f\n",
           best_of(tb, SAVE_REPS), gb, best_of(ts, SAVE_REPS), gs, gs / gb);
    result("base_fsync", gb, "GB/s", "write(2) of the same buffers to one file + fsync");
    result("base_fsync_median_s", median_of(tb, SAVE_REPS), "s", "median time");
    result("shs_sync", gs, "GB/s", "shs_manager_save, sync, fsync=1");
    result("shs_sync_s", best_of(ts, SAVE_REPS), "s", "best time");
    result("shs_sync_median_s", median_of(ts, SAVE_REPS), "s", "median time");
    result("cpu_ratio", best_of(cb, SAVE_REPS) / best_of(cs, SAVE_REPS), "",
           "ratio of best CPU times, baseline / shardsafe");
    result("bytes_written", (double)st.bytes_written, "B", "bytes written by the last save");
    /* diagnostic: the checksum pass the save makes over the state */
    double th[3];
    for (int r = 0; r < 3; r++)
        th[r] = xxh3_all(&s);
    printf("save: diagnostic XXH3-64 of the whole state: best %.3f s (%.2f GB/s), %.0f%% of the "
           "best save\n",
           best_of(th, 3), bytes / best_of(th, 3) / 1e9,
           100.0 * best_of(th, 3) / best_of(ts, SAVE_REPS));
    result("xxh3_s", best_of(th, 3), "s", "XXH3-64 of the whole state (diagnostic)");
    shs_manager_free(m);
    rmtree(sp);
    unlink(pb);
    free(sp);
    free(pb);
    free_state(&s);
    peak_rss();
    return 0;
}

/* ------------------------------------------------------------------ */
/* async                                                              */
/* ------------------------------------------------------------------ */

#define ASYNC_SAVES 4    /* 1 first + 3 steady */
#define COMPUTE_PASSES 8 /* ~1.3 s of read-only compute on the dev machine */

static volatile double g_sink;

/* Read-only compute standing in for forward/backward: sums every tensor. */
static double compute(const bstate *s, int passes)
{
    double t0 = now();
    double acc = 0;
    for (int p = 0; p < passes; p++)
        for (int i = 0; i < N_T; i++) {
            const btensor *t = &s->t[i];
            if (t->dtype == SHS_F32) {
                const float *f = t->data;
                size_t n = t->nbytes / 4;
                float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
                for (size_t k = 0; k + 4 <= n; k += 4) {
                    a0 += f[k];
                    a1 += f[k + 1];
                    a2 += f[k + 2];
                    a3 += f[k + 3];
                }
                acc += a0 + a1 + a2 + a3;
            } else {
                const uint16_t *h = t->data;
                size_t n = t->nbytes / 2;
                uint64_t a = 0;
                for (size_t k = 0; k < n; k++)
                    a += h[k];
                acc += (double)a;
            }
        }
    g_sink = acc;
    return now() - t0;
}

/* Simulated optimizer update: writes every model tensor and moment. */
static void update(bstate *s, int step)
{
    for (int i = 0; i < N_T; i++) {
        btensor *t = &s->t[i];
        if (t->dtype == SHS_F32) {
            float *f = t->data;
            for (size_t k = 0; k < t->nbytes / 4; k += 16)
                f[k] += 1e-3f * (float)step;
        } else {
            uint16_t *h = t->data;
            for (size_t k = 0; k < t->nbytes / 2; k += 32)
                h[k] ^= 1;
        }
    }
}

static int mode_async(const char *dir)
{
    bstate s;
    make_state(&s);
    char *sp_sync = path_in(dir, "ckpt_sync");
    char *sp_a = path_in(dir, "ckpt_async");
    char *sp_d = path_in(dir, "ckpt_defer");
    shs_manager *msync = make_manager(&s, sp_sync, 0, 0, 1, NULL);
    double tsync[2 * ASYNC_SAVES];
    int nsync = 0;
    shs_save_stats st = SHS_SAVE_STATS_INIT;

    /* (a) plain async save: blocked = staging copy (+ first-time allocation) */
    shs_manager *ma = make_manager(&s, sp_a, 1, 0, 1, NULL);
    double blk[ASYNC_SAVES], bstat[ASYNC_SAVES], waitt[ASYNC_SAVES], commit[ASYNC_SAVES];
    for (int r = 0; r < ASYNC_SAVES; r++) {
        tsync[nsync++] = timed_sync_save(msync, sp_sync, 10 + r, NULL);
        clear_save_path(sp_a);
        sync();
        shs_progress p = progress_at(1000 + r);
        double t0 = now();
        CHECK(shs_manager_save(ma, &p, 0));
        blk[r] = now() - t0;
        double t1 = now();
        CHECK(shs_manager_wait(ma));
        waitt[r] = now() - t1;
        CHECK(shs_manager_last_save(&st, ma));
        bstat[r] = st.blocked_seconds;
        commit[r] = st.total_seconds;
        printf("async save %d%s: blocked in save() %.4f s (stats %.4f s), then wait %.3f s, "
               "background commit %.3f s; sync save %.3f s\n",
               r, r ? "" : " (first)", blk[r], bstat[r], waitt[r], commit[r], tsync[r]);
        update(&s, r);
    }
    shs_manager_free(ma);
    rmtree(sp_a);

    /* (b) deferred snapshot: save, read-only compute, fence, update */
    double alone[3];
    for (int r = 0; r < 3; r++)
        alone[r] = compute(&s, COMPUTE_PASSES);
    shs_manager *md = make_manager(&s, sp_d, 1, 0, 1, NULL);
    double dsave[ASYNC_SAVES], dfence[ASYNC_SAVES], dcomp[ASYNC_SAVES], dwait[ASYNC_SAVES],
        dcommit[ASYNC_SAVES];
    for (int r = 0; r < ASYNC_SAVES; r++) {
        if (r)
            tsync[nsync++] = timed_sync_save(msync, sp_sync, 20 + r, NULL);
        clear_save_path(sp_d);
        sync();
        shs_progress p = progress_at(2000 + r);
        double t0 = now();
        CHECK(shs_manager_save(md, &p, SHS_SAVE_DEFER_SNAPSHOT));
        dsave[r] = now() - t0;
        dcomp[r] = compute(&s, COMPUTE_PASSES);
        double t2 = now();
        CHECK(shs_manager_fence(md));
        dfence[r] = now() - t2;
        update(&s, 100 + r);
        double t3 = now();
        CHECK(shs_manager_wait(md));
        dwait[r] = now() - t3;
        CHECK(shs_manager_last_save(&st, md));
        dcommit[r] = st.total_seconds;
        printf("defer save %d%s: in save() %.4f s + in fence() %.4f s = blocked %.4f s; "
               "compute during save %.3f s (alone best %.3f s); wait %.3f s, background "
               "commit %.3f s\n",
               r, r ? "" : " (first)", dsave[r], dfence[r], dsave[r] + dfence[r], dcomp[r],
               best_of(alone, 3), dwait[r], dcommit[r]);
    }
    shs_manager_free(md);
    rmtree(sp_d);
    shs_manager_free(msync);
    rmtree(sp_sync);

    double sync_best = best_of(tsync, nsync), sync_med = median_of(tsync, nsync);
    double steady_blk = median_of(blk + 1, ASYNC_SAVES - 1);
    double dblk[ASYNC_SAVES];
    for (int r = 0; r < ASYNC_SAVES; r++)
        dblk[r] = dsave[r] + dfence[r];
    double steady_dblk = median_of(dblk + 1, ASYNC_SAVES - 1);
    printf("async: sync save best %.3f s median %.3f s (%d runs)\n", sync_best, sync_med, nsync);
    printf("async (a): blocked first %.4f s (%.1f%% of sync median), steady median %.4f s "
           "(%.1f%%)\n",
           blk[0], 100 * blk[0] / sync_med, steady_blk, 100 * steady_blk / sync_med);
    printf("async (b): blocked first %.4f s (%.1f%%), steady median %.4f s (%.2f%%)\n", dblk[0],
           100 * dblk[0] / sync_med, steady_dblk, 100 * steady_dblk / sync_med);
    result("sync_s", sync_best, "s", "sync save (fsync=1), best");
    result("sync_median_s", sync_med, "s", "sync save, median (the denominator)");
    result("a_first_s", blk[0], "s", "async, 1st save: time in shs_manager_save");
    result("a_steady_s", steady_blk, "s", "async, 2nd+ saves: time in shs_manager_save, median");
    result("a_steady_best_s", best_of(blk + 1, ASYNC_SAVES - 1), "s", "best");
    result("a_commit_s", median_of(commit + 1, ASYNC_SAVES - 1), "s",
           "background commit (total_seconds), 2nd+ median");
    result("a_commit_first_s", commit[0], "s", "background commit, 1st save");
    result("b_first_s", dblk[0], "s", "deferred, 1st save: in save() + in fence()");
    result("b_first_save_s", dsave[0], "s", "of which in save()");
    result("b_steady_s", steady_dblk, "s", "deferred, 2nd+ saves: save() + fence(), median");
    result("b_steady_save_s", median_of(dsave + 1, ASYNC_SAVES - 1), "s", "in save(), median");
    result("b_steady_fence_s", median_of(dfence + 1, ASYNC_SAVES - 1), "s", "in fence(), median");
    result("b_commit_s", median_of(dcommit + 1, ASYNC_SAVES - 1), "s",
           "background commit, 2nd+ median");
    result("b_compute_s", median_of(dcomp + 1, ASYNC_SAVES - 1), "s",
           "simulated compute while the snapshot is taken, median");
    result("b_compute_alone_s", best_of(alone, 3), "s", "same compute alone, best");
    free(sp_sync);
    free(sp_a);
    free(sp_d);
    free_state(&s);
    peak_rss();
    return 0;
}

/* ------------------------------------------------------------------ */
/* incremental                                                        */
/* ------------------------------------------------------------------ */

#define INC_SAVES 5

static int mode_incremental(const char *dir)
{
    bstate s;
    make_state(&s);
    /* the changing set: tensors taken in order from the end until ~10% of
       the bytes (a trainable head + its optimizer state); the rest is
       frozen */
    int changing[N_T] = { 0 };
    size_t chg = 0;
    for (int i = N_MODEL - 1; i >= 0 && chg < s.total / 10; i--) {
        int ids[3] = { i, N_MODEL + 2 * i, N_MODEL + 2 * i + 1 };
        size_t add = 0;
        for (int k = 0; k < 3; k++)
            add += s.t[ids[k]].nbytes;
        if (chg + add > s.total / 10 + s.total / 200)
            continue; /* keep close to 10% */
        for (int k = 0; k < 3; k++)
            changing[ids[k]] = 1;
        chg += add;
    }
    printf("incremental: changing %zu bytes (%.1f%%), frozen %zu bytes\n", chg,
           100.0 * (double)chg / (double)s.total, s.total - chg);
    result("changing_frac", (double)chg / (double)s.total, "", "share of bytes that change");
    char *sp_i = path_in(dir, "ckpt_incr");
    char *sp_f = path_in(dir, "ckpt_full");
    clear_save_path(sp_i);
    shs_manager *mi = make_manager(&s, sp_i, 0, 1, 1, NULL);
    shs_manager *mf = make_manager(&s, sp_f, 0, 0, 1, NULL);
    double ti[INC_SAVES], tf[INC_SAVES];
    for (int r = 0; r < INC_SAVES; r++) {
        /* a training step: the changing tensors change everywhere */
        for (int i = 0; i < N_T; i++)
            if (changing[i] && r) {
                uint32_t *w = s.t[i].data;
                for (size_t k = 0; k < s.t[i].nbytes / 4; k++)
                    w[k] ^= 1;
            }
        sync();
        shs_progress p = progress_at(100 * (r + 1));
        double t0 = now();
        CHECK(shs_manager_save(mi, &p, 0));
        ti[r] = now() - t0;
        shs_save_stats st = SHS_SAVE_STATS_INIT;
        CHECK(shs_manager_last_save(&st, mi));
        tf[r] = timed_sync_save(mf, sp_f, 100 * (r + 1), NULL);
        double frac = (double)st.bytes_written / (double)st.state_bytes;
        printf("incremental save %d: %.3f s, bytes_written %" PRIu64 " / state_bytes %" PRIu64
               " = %.3f, bytes_linked %" PRIu64 "; full save %.3f s; time ratio %.3f\n",
               r + 1, ti[r], st.bytes_written, st.state_bytes, frac, st.bytes_linked, tf[r],
               ti[r] / tf[r]);
        char key[64], label[128];
        snprintf(key, sizeof key, "s%d_written_frac", r + 1);
        snprintf(label, sizeof label, "save %d: bytes_written / state_bytes", r + 1);
        result(key, frac, "", label);
        snprintf(key, sizeof key, "s%d_linked_frac", r + 1);
        result(key, (double)st.bytes_linked / (double)st.state_bytes, "", "bytes_linked share");
        snprintf(key, sizeof key, "s%d_s", r + 1);
        result(key, ti[r], "s", "incremental save time");
        snprintf(key, sizeof key, "s%d_full_s", r + 1);
        result(key, tf[r], "s", "full save time, same step");
    }
    result("full_best_s", best_of(tf, INC_SAVES), "s", "full save, best");
    result("full_median_s", median_of(tf, INC_SAVES), "s", "full save, median");
    result("steady_median_s", median_of(ti + 2, INC_SAVES - 2), "s",
           "incremental saves 3+, median");
    shs_manager_free(mi);
    shs_manager_free(mf);
    rmtree(sp_i);
    rmtree(sp_f);
    free(sp_i);
    free(sp_f);
    free_state(&s);
    peak_rss();
    return 0;
}

/* ------------------------------------------------------------------ */
/* resume                                                             */
/* ------------------------------------------------------------------ */

#define LOAD_REPS 5

static double timed_load(shs_manager *m)
{
    shs_progress p = progress_at(0);
    shs_load_result lr = SHS_LOAD_RESULT_INIT;
    double t0 = now();
    CHECK(shs_manager_load(&lr, m, &p));
    double t = now() - t0;
    if (!lr.loaded || !lr.optimizer_loaded) {
        fprintf(stderr, "bench_ckpt: nothing loaded\n");
        exit(1);
    }
    return t;
}

static int setup_resume(const char *dir, bstate *s, char **sp, shs_manager **ml, void ***copy)
{
    make_state(s);
    *sp = path_in(dir, "ckpt_resume");
    clear_save_path(*sp);
    shs_manager *ms = make_manager(s, *sp, 0, 0, 0, NULL);
    shs_progress p = progress_at(500);
    CHECK(shs_manager_save(ms, &p, 0));
    shs_manager_free(ms);
    /* the source of the memcpy baseline: a pre-faulted copy of the state */
    void **c = xmalloc(N_T * sizeof *c);
    for (int i = 0; i < N_T; i++) {
        c[i] = xmalloc(s->t[i].nbytes);
        memcpy(c[i], s->t[i].data, s->t[i].nbytes);
    }
    *copy = c;
    *ml = make_manager(s, *sp, 0, 0, 0, *sp);
    /* warm the page cache and check the data once */
    for (int i = 0; i < N_T; i++)
        memset(s->t[i].data, 0xA5, s->t[i].nbytes);
    timed_load(*ml);
    for (int i = 0; i < N_T; i++)
        if (memcmp(s->t[i].data, c[i], s->t[i].nbytes) != 0) {
            fprintf(stderr, "bench_ckpt: tensor %s loaded wrong\n", s->t[i].name);
            exit(1);
        }
    return 0;
}

static int mode_resume(const char *dir)
{
    bstate s;
    char *sp;
    shs_manager *m;
    void **c;
    setup_resume(dir, &s, &sp, &m, &c);
    double tl[LOAD_REPS], tm[LOAD_REPS], th[LOAD_REPS];
    for (int r = 0; r < LOAD_REPS; r++) {
        double t0 = now();
        for (int i = 0; i < N_T; i++)
            memcpy(s.t[i].data, c[i], s.t[i].nbytes);
        tm[r] = now() - t0;
        tl[r] = timed_load(m);
        th[r] = xxh3_all(&s);
    }
    double bytes = (double)s.total;
    double gm = bytes / best_of(tm, LOAD_REPS) / 1e9, gl = bytes / best_of(tl, LOAD_REPS) / 1e9;
    printf("resume: memcpy best %.3f s %.2f GB/s; shs_manager_load best %.3f s %.2f GB/s "
           "(median %.3f s); ratio %.3f\n",
           best_of(tm, LOAD_REPS), gm, best_of(tl, LOAD_REPS), gl, median_of(tl, LOAD_REPS),
           gl / gm);
    printf("resume: diagnostic XXH3-64 of the state: best %.3f s = %.0f%% of the best load\n",
           best_of(th, LOAD_REPS), 100 * best_of(th, LOAD_REPS) / best_of(tl, LOAD_REPS));
    result("memcpy", gm, "GB/s", "memcpy of the same bytes between pre-faulted buffers");
    result("shs_load", gl, "GB/s", "shs_manager_load into the registered buffers, warm cache");
    result("shs_load_s", best_of(tl, LOAD_REPS), "s", "best time");
    result("shs_load_median_s", median_of(tl, LOAD_REPS), "s", "median time");
    result("xxh3_s", best_of(th, LOAD_REPS), "s", "XXH3-64 of the state (diagnostic)");
    /* the same load with one reader thread per core (load_worker_number) */
    shs_manager_free(m);
    g_load_workers = 2;
    m = make_manager(&s, sp, 0, 0, 0, sp);
    for (int r = 0; r < LOAD_REPS; r++) {
        double t0 = now();
        for (int i = 0; i < N_T; i++)
            memcpy(s.t[i].data, c[i], s.t[i].nbytes);
        tm[r] = now() - t0;
        tl[r] = timed_load(m);
    }
    gm = bytes / best_of(tm, LOAD_REPS) / 1e9;
    gl = bytes / best_of(tl, LOAD_REPS) / 1e9;
    printf("resume: load_worker_number=2: memcpy %.2f GB/s; shs_manager_load %.2f GB/s; "
           "ratio %.3f\n",
           gm, gl, gl / gm);
    result("memcpy_w2", gm, "GB/s", "memcpy of the same bytes (run next to the 2-worker load)");
    result("shs_load_w2", gl, "GB/s", "shs_manager_load with load_worker_number=2");
    shs_manager_free(m);
    rmtree(sp);
    for (int i = 0; i < N_T; i++)
        free(c[i]);
    free(c);
    free(sp);
    free_state(&s);
    peak_rss();
    return 0;
}

/* ------------------------------------------------------------------ */
/* encrypt                                                            */
/* ------------------------------------------------------------------ */

static shs_manager *make_manager_key(bstate *s, const char *sp, const char *key_file, int do_fsync,
                                     const char *load_path)
{
    g_key_file = key_file;
    shs_manager *m = make_manager(s, sp, 0, 0, do_fsync, load_path);
    g_key_file = "";
    return m;
}

#define ENC_LOAD_REPS 7

static int mode_encrypt(const char *dir)
{
    bstate s;
    make_state(&s);
    char *sp = path_in(dir, "ckpt_plain"), *se = path_in(dir, "ckpt_enc");
    char *kf = path_in(dir, "ckpt_key.bin");
    unsigned char key[32];
    for (int i = 0; i < 32; i++)
        key[i] = (unsigned char)(37 * i + 11);
    int fd = open(kf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        die("open", 1);
    write_full(fd, key, sizeof key);
    close(fd);
    shs_manager *mp = make_manager_key(&s, sp, "", 1, NULL);
    shs_manager *me = make_manager_key(&s, se, kf, 1, NULL);
    double tp[SAVE_REPS], te[SAVE_REPS], cp[SAVE_REPS], ce[SAVE_REPS];
    /* interleaved, so that a change of the machine's load hits both; the
       CPU time (user + system) of each save is less noisy on a busy
       machine than its wall time */
    for (int r = 0; r < SAVE_REPS; r++) {
        tp[r] = timed_sync_save(mp, sp, 100 * (r + 1), &cp[r]);
        te[r] = timed_sync_save(me, se, 100 * (r + 1), &ce[r]);
        printf("encrypt rep %d: plain save %.3f s (cpu %.3f s), encrypted save %.3f s (cpu %.3f "
               "s)\n",
               r, tp[r], cp[r], te[r], ce[r]);
    }
    double bytes = (double)s.total;
    double gp = bytes / best_of(tp, SAVE_REPS) / 1e9, ge = bytes / best_of(te, SAVE_REPS) / 1e9;
    printf("encrypt: save plain best %.3f s %.2f GB/s; encrypted best %.3f s %.2f GB/s; ratio "
           "%.3f (target >= 0.8)\n",
           best_of(tp, SAVE_REPS), gp, best_of(te, SAVE_REPS), ge, ge / gp);
    result("plain_save", gp, "GB/s", "shs_manager_save, sync, fsync=1, unencrypted");
    result("enc_save", ge, "GB/s", "the same save with encrypt_key_file (AES-256-GCM)");
    result("enc_save_ratio", ge / gp, "", "encrypted / unencrypted save throughput");
    result("enc_save_median_ratio", median_of(tp, SAVE_REPS) / median_of(te, SAVE_REPS), "",
           "the same from median times");
    result("enc_save_cpu_ratio", best_of(cp, SAVE_REPS) / best_of(ce, SAVE_REPS), "",
           "best CPU time of the unencrypted save / of the encrypted save");
    printf("encrypt: CPU time per save: plain best %.3f s, encrypted best %.3f s; ratio %.3f\n",
           best_of(cp, SAVE_REPS), best_of(ce, SAVE_REPS),
           best_of(cp, SAVE_REPS) / best_of(ce, SAVE_REPS));
    shs_manager_free(mp);
    shs_manager_free(me);
    /* the same without fsync: into the page cache, where the CPU cost of
       encryption shows most */
    mp = make_manager_key(&s, sp, "", 0, NULL);
    me = make_manager_key(&s, se, kf, 0, NULL);
    for (int r = 0; r < SAVE_REPS; r++) {
        tp[r] = timed_sync_save(mp, sp, 100 * (r + 1), &cp[r]);
        te[r] = timed_sync_save(me, se, 100 * (r + 1), &ce[r]);
    }
    gp = bytes / best_of(tp, SAVE_REPS) / 1e9;
    ge = bytes / best_of(te, SAVE_REPS) / 1e9;
    printf("encrypt: save without fsync: plain %.2f GB/s; encrypted %.2f GB/s; ratio %.3f; CPU "
           "time ratio %.3f\n",
           gp, ge, ge / gp, best_of(cp, SAVE_REPS) / best_of(ce, SAVE_REPS));
    result("plain_save_nofsync", gp, "GB/s", "unencrypted save, fsync=0 (page cache)");
    result("enc_save_nofsync", ge, "GB/s", "encrypted save, fsync=0 (page cache)");
    result("enc_save_nofsync_ratio", ge / gp, "", "encrypted / unencrypted, fsync=0");
    result("enc_save_nofsync_cpu_ratio", best_of(cp, SAVE_REPS) / best_of(ce, SAVE_REPS), "",
           "CPU time ratio, fsync=0");
    shs_manager_free(mp);
    shs_manager_free(me);
    /* the loads of the last saves, warm cache; the state must come back */
    uint64_t h0 = 0, h1 = 0;
    for (int i = 0; i < N_T; i++)
        h0 ^= XXH3_64bits(s.t[i].data, s.t[i].nbytes) + (uint64_t)i;
    mp = make_manager_key(&s, sp, "", 0, sp);
    me = make_manager_key(&s, se, kf, 0, se);
    /* more repetitions than the saves: a load is short, and its CPU time
       (the decryption runs on a helper thread too) is the steadier number
       on a shared machine */
    double lp[ENC_LOAD_REPS], le[ENC_LOAD_REPS], clp[ENC_LOAD_REPS], cle[ENC_LOAD_REPS];
    for (int r = 0; r < ENC_LOAD_REPS; r++) {
        double c0 = cpu_now();
        lp[r] = timed_load(mp);
        double c1 = cpu_now();
        le[r] = timed_load(me);
        clp[r] = c1 - c0;
        cle[r] = cpu_now() - c1;
    }
    for (int i = 0; i < N_T; i++)
        h1 ^= XXH3_64bits(s.t[i].data, s.t[i].nbytes) + (uint64_t)i;
    if (h0 != h1) {
        fprintf(stderr, "bench_ckpt: the encrypted state loaded wrong\n");
        exit(1);
    }
    gp = bytes / best_of(lp, ENC_LOAD_REPS) / 1e9;
    ge = bytes / best_of(le, ENC_LOAD_REPS) / 1e9;
    double mr = median_of(lp, ENC_LOAD_REPS) / median_of(le, ENC_LOAD_REPS);
    double cr = best_of(clp, ENC_LOAD_REPS) / best_of(cle, ENC_LOAD_REPS);
    printf("encrypt: load (warm cache) plain %.2f GB/s; encrypted %.2f GB/s; ratio %.3f (best of "
           "%d), %.3f (medians %.3f s / %.3f s); CPU time ratio %.3f (best %.3f s / %.3f s)\n",
           gp, ge, ge / gp, ENC_LOAD_REPS, mr, median_of(lp, ENC_LOAD_REPS),
           median_of(le, ENC_LOAD_REPS), cr, best_of(clp, ENC_LOAD_REPS),
           best_of(cle, ENC_LOAD_REPS));
    result("plain_load", gp, "GB/s", "shs_manager_load, warm cache, unencrypted");
    result("enc_load", ge, "GB/s", "shs_manager_load of the encrypted save, warm cache");
    result("enc_load_ratio", ge / gp, "", "encrypted / unencrypted load throughput");
    result("enc_load_median_ratio", mr, "", "the same from median times");
    result("enc_load_cpu_ratio", cr, "",
           "best CPU time of the unencrypted load / of the encrypted load");
    shs_manager_free(mp);
    shs_manager_free(me);
    /* verify (warm cache): the checksums of the unencrypted step against
       the checksums, the MAC and every segment authenticated (decrypted
       into scratch buffers, two threads per chunk) of the encrypted one */
    char dp[4096], de[4096];
    snprintf(dp, sizeof dp, "%s/iteration_%08d", sp, 100 * SAVE_REPS);
    snprintf(de, sizeof de, "%s/iteration_%08d", se, 100 * SAVE_REPS);
    double vp[ENC_LOAD_REPS], ve[ENC_LOAD_REPS], cvp[ENC_LOAD_REPS], cve[ENC_LOAD_REPS];
    for (int r = 0; r < ENC_LOAD_REPS; r++) {
        double c0 = cpu_now(), t0 = now();
        CHECK(shs_checkpoint_verify(dp, NULL, 0));
        double c1 = cpu_now(), t1 = now();
        CHECK(shs_checkpoint_verify(de, key, sizeof key));
        vp[r] = t1 - t0;
        cvp[r] = c1 - c0;
        ve[r] = now() - t1;
        cve[r] = cpu_now() - c1;
    }
    gp = bytes / best_of(vp, ENC_LOAD_REPS) / 1e9;
    ge = bytes / best_of(ve, ENC_LOAD_REPS) / 1e9;
    printf("encrypt: verify (warm cache) plain %.2f GB/s; encrypted with the key %.2f GB/s; ratio "
           "%.3f (best of %d); CPU time %.3f s / %.3f s (the encrypted verify's CPU over its "
           "wall time: %.2f threads busy)\n",
           gp, ge, ge / gp, ENC_LOAD_REPS, best_of(cvp, ENC_LOAD_REPS), best_of(cve, ENC_LOAD_REPS),
           best_of(cve, ENC_LOAD_REPS) / best_of(ve, ENC_LOAD_REPS));
    result("plain_verify", gp, "GB/s", "shs_checkpoint_verify, warm cache, unencrypted");
    result("enc_verify", ge, "GB/s", "shs_checkpoint_verify_key of the encrypted save");
    result("enc_verify_ratio", ge / gp, "", "encrypted / unencrypted verify throughput");
    result("enc_verify_threads", best_of(cve, ENC_LOAD_REPS) / best_of(ve, ENC_LOAD_REPS), "",
           "CPU time / wall time of the encrypted verify");
    rmtree(sp);
    rmtree(se);
    unlink(kf);
    free(sp);
    free(se);
    free(kf);
    free_state(&s);
    peak_rss();
    return 0;
}

/* profile-load-enc: the same state saved and loaded with a key (its file
   in DIR), so that perf shows the encrypted load alone */
static int mode_profile_load(const char *dir, int iters, int encrypted)
{
    bstate s;
    char *sp;
    shs_manager *m;
    void **c;
    char *kf = path_in(dir, "ckpt_key.bin");
    if (encrypted) {
        unsigned char key[32];
        for (int i = 0; i < 32; i++)
            key[i] = (unsigned char)(37 * i + 11);
        int fd = open(kf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
            die("open", 1);
        write_full(fd, key, sizeof key);
        close(fd);
        g_key_file = kf;
    }
    setup_resume(dir, &s, &sp, &m, &c);
    g_key_file = "";
    double t0 = now(), c0 = cpu_now();
    for (int r = 0; r < iters; r++)
        timed_load(m);
    printf("profile-load%s: %d loads, %.3f s each (CPU %.3f s each), load_worker_number %d\n",
           encrypted ? "-enc" : "", iters, (now() - t0) / iters, (cpu_now() - c0) / iters,
           g_load_workers);
    shs_manager_free(m);
    rmtree(sp);
    if (encrypted)
        unlink(kf);
    free(kf);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_ckpt save|async|incremental|resume|encrypt DIR\n"
                        "       bench_ckpt profile-load|profile-load-enc DIR [ITERS [WORKERS]]\n");
        return 2;
    }
    static const struct {
        const char *arg, *mode; /* command-line name, "mode" of the @@ lines */
        int (*run)(const char *dir);
    } modes[] = {
        { "save", "ckpt_save", mode_save },
        { "async", "ckpt_async", mode_async },
        { "incremental", "ckpt_incr", mode_incremental },
        { "resume", "ckpt_resume", mode_resume },
        { "encrypt", "ckpt_encrypt", mode_encrypt },
    };
    g_mode = argv[1];
    const char *dir = argv[2];
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
        if (strcmp(g_mode, modes[i].arg) == 0) {
            g_mode = modes[i].mode;
            return modes[i].run(dir);
        }
    /* profile modes: a 4th argument sets load_worker_number */
    if (argc > 4)
        g_load_workers = atoi(argv[4]) > 0 ? atoi(argv[4]) : 1;
    if (strcmp(g_mode, "profile-load") == 0)
        return mode_profile_load(dir, argc > 3 ? atoi(argv[3]) : 10, 0);
    if (strcmp(g_mode, "profile-load-enc") == 0)
        return mode_profile_load(dir, argc > 3 ? atoi(argv[3]) : 10, 1);
    fprintf(stderr, "bench_ckpt: unknown mode %s\n", argv[1]);
    return 2;
}
