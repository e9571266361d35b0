/*
 * bench_dist.c -- distributed (MPI) checkpoint benchmarks (bench/README.md,
 * section 5).  Run under mpirun; every mode prints human lines (rank 0) and
 * "@@ {json}" lines for bench/report.py.
 *
 *   mpirun -np 4 bench_dist save   DIR  4 ranks save 1 GiB (256 MiB shard
 *                                       each, 8 F32 tensors sharded on dim 0)
 *                                       through the manager, with and without
 *                                       fsync, vs every rank write(2)-ing the
 *                                       same bytes into its own file at the
 *                                       same time (+ fsync); leaves the fsync
 *                                       checkpoint in DIR/dist_ckpt
 *   mpirun -np N bench_dist load   DIR  load DIR/dist_ckpt into N ranks (N=4:
 *                                       the saved layout; N=3: rows
 *                                       redistributed), warm page cache,
 *                                       load_worker_number 1 and 2, vs every
 *                                       rank memcpy-ing its bytes at once
 *   mpirun -np 4 bench_dist dedup  DIR  a fully replicated state of 64
 *                                       tensors (4 KiB .. 8 MiB) saved with
 *                                       and without remove_redundancy:
 *                                       bytes written vs unique bytes, balance
 *
 * Times are "all ranks": each rank starts after a barrier, the time is the
 * latest end minus the earliest start (one machine, one monotonic clock).
 * The benchmark's own barriers and reductions poll with sleeps
 * (MPI_Ibarrier + MPI_Test + nanosleep) so that, with more ranks than
 * cores, a rank that is done does not spin on a core another rank needs;
 * the library's collectives are the MPI backend's (what users get).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shardsafe_mpi.h"

#define REPS 3
#define NT 8 /* save/load: tensors */
#define COLS 1024u
#define ND 64 /* dedup: tensors */

static int g_rank, g_size;
static char g_mode[64] = "";

#define BENCH_NAME "bench_dist"
#define BENCH_MPI
#include "../benchutil.h"

/* ------------------------------------------------------------------ */
/* helpers                                                            */
/* ------------------------------------------------------------------ */

/* rank 0 prints */
#define say(...)                                                                                   \
    do {                                                                                           \
        if (g_rank == 0) {                                                                         \
            printf(__VA_ARGS__);                                                                   \
            fflush(stdout);                                                                        \
        }                                                                                          \
    } while (0)

static void wait_quietly(MPI_Request *req)
{
    int done = 0;
    struct timespec ts = { 0, 200000 }; /* 0.2 ms */
    for (;;) {
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done)
            return;
        nanosleep(&ts, NULL);
    }
}

static void quiet_barrier(void)
{
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    wait_quietly(&req);
}

static void quiet_allreduce(const void *in, void *out, int n, MPI_Datatype t, MPI_Op op)
{
    MPI_Request req;
    MPI_Iallreduce(in, out, n, t, op, MPI_COMM_WORLD, &req);
    wait_quietly(&req);
}

/* After a timed section that started at t0 on this rank: latest end minus
   earliest start over the ranks. */
static double span_since(double t0)
{
    double in[2] = { now(), -t0 }, out[2];
    quiet_allreduce(in, out, 2, MPI_DOUBLE, MPI_MAX);
    return out[0] + out[1];
}

/* Untimed: rank 0 empties the save paths, every rank removes its baseline
   file, sync (no dirty pages left for the next timed section), barrier. */
static void prepare(char *const *save_paths, int n_paths, const char *own_file)
{
    if (g_rank == 0)
        for (int i = 0; i < n_paths; i++) {
            rmtree(save_paths[i]);
            mkdir(save_paths[i], 0755);
        }
    if (own_file)
        unlink(own_file);
    quiet_barrier();
    if (g_rank == 0)
        sync();
    quiet_barrier();
}

static void peak_rss(void)
{
    double mine = maxrss_mib(), all[64] = { 0 }, mx = 0;
    MPI_Gather(&mine, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (g_rank == 0) {
        printf("peak RSS per rank (ru_maxrss):");
        for (int r = 0; r < g_size && r < 64; r++) {
            printf(" %.1f", all[r]);
            if (all[r] > mx)
                mx = all[r];
        }
        printf(" MiB; max %.1f MiB\n", mx);
    }
    result("peak_rss", mx, "MiB", "peak RSS, max over ranks");
}

static shs_comm *g_comm;

/* ------------------------------------------------------------------ */
/* the sharded state: 8 F32 tensors [rows, 1024], 1 GiB in all        */
/* ------------------------------------------------------------------ */

/* rows = 4096 * k, sum 262,144 rows = 1 GiB; all divisible by 4, most not
   by 3, so a 3-rank load splits them unevenly and across saved chunks */
static const unsigned K_ROWS[NT] = { 4, 5, 7, 8, 10, 11, 13, 6 };

typedef struct shard {
    char name[64];
    uint64_t gshape[2], off[2], shape[2];
    size_t nbytes;
    uint32_t *data;
} shard;

typedef struct sstate {
    shard t[NT];
    size_t bytes;   /* this rank's */
    uint64_t total; /* all ranks' (the global tensors) */
    shs_state *st;
} sstate;

static inline uint32_t value_at(unsigned t, uint64_t g)
{
    uint32_t x = (uint32_t)(g * 2654435761u) ^ (t * 0x9e3779b9u);
    x ^= x >> 15;
    x *= 0x2c1b3c6du;
    x ^= x >> 12;
    return 0x3f800000u | (x >> 9); /* a float in [1, 2) */
}

/* Rows of tensor t for this rank: the first (rows % size) ranks get one
   row more (with 4 ranks every split is even). */
static void make_sharded(sstate *s, int fill)
{
    memset(s, 0, sizeof *s);
    CHECK(shs_state_create(&s->st));
    for (unsigned i = 0; i < NT; i++) {
        shard *t = &s->t[i];
        uint64_t rows = 4096u * K_ROWS[i];
        uint64_t base = rows / (uint64_t)g_size, extra = rows % (uint64_t)g_size;
        uint64_t r = (uint64_t)g_rank;
        snprintf(t->name, sizeof t->name, "model.layers.%u.mlp.weight", i);
        t->gshape[0] = rows;
        t->gshape[1] = COLS;
        t->off[0] = r * base + (r < extra ? r : extra);
        t->off[1] = 0;
        t->shape[0] = base + (r < extra);
        t->shape[1] = COLS;
        t->nbytes = (size_t)(t->shape[0] * COLS * 4);
        t->data = xmalloc(t->nbytes);
        uint64_t g0 = t->off[0] * COLS, n = t->shape[0] * COLS;
        if (fill)
            for (uint64_t k = 0; k < n; k++)
                t->data[k] = value_at(i, g0 + k);
        else
            memset(t->data, 0, t->nbytes); /* pre-faulted */
        s->bytes += t->nbytes;
        s->total += rows * COLS * 4;
        shs_tensor_spec sp = SHS_TENSOR_SPEC_INIT;
        sp.name = t->name;
        sp.dtype = SHS_F32;
        sp.ndim = 2;
        sp.shape = t->shape;
        sp.global_shape = t->gshape;
        sp.global_offset = t->off;
        sp.data = t->data;
        CHECK(shs_state_add_tensor(s->st, &sp));
    }
}

static void free_sharded(sstate *s)
{
    shs_state_free(s->st);
    for (int i = 0; i < NT; i++)
        free(s->t[i].data);
}

static shs_manager *make_manager(shs_state *st, const char *save_path, int do_fsync,
                                 int remove_redundancy, const char *load_path, int workers)
{
    shs_config c;
    shs_config_init(&c);
    c.save_max = 0; /* the benchmark removes old steps, untimed */
    c.save_interleaved_steps = 1000000;
    c.fsync = do_fsync;
    c.remove_redundancy = remove_redundancy;
    c.load_worker_number = workers;
    if (load_path) {
        c.enable_save = 0;
        c.load_path = load_path;
    } else {
        c.save_path = save_path;
    }
    shs_manager *m;
    CHECK(shs_manager_create_comm(&m, &c, st, g_comm));
    return m;
}

/* ------------------------------------------------------------------ */
/* save                                                               */
/* ------------------------------------------------------------------ */

/* every rank: write(2) of its tensor buffers into its own file (+ fsync) */
static double dd_all(const char *file, const sstate *s, int do_fsync)
{
    quiet_barrier();
    double t0 = now();
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        die("open", 1);
    for (int i = 0; i < NT; i++)
        write_full(fd, s->t[i].data, s->t[i].nbytes);
    if (do_fsync && fsync(fd) != 0)
        die("fsync", 1);
    close(fd);
    return span_since(t0);
}

static double save_all(shs_manager *m, int64_t step)
{
    shs_progress p = progress_at(step);
    quiet_barrier();
    double t0 = now();
    CHECK(shs_manager_save(m, &p, 0));
    return span_since(t0);
}

static int mode_save(const char *dir)
{
    sstate s;
    make_sharded(&s, 1);
    say("save: %d ranks, %d F32 tensors sharded on dim 0, %" PRIu64 " bytes in all, "
        "%zu on rank 0\n",
        g_size, NT, s.total, s.bytes);
    result("ranks", g_size, "", "MPI ranks");
    result("state_bytes", (double)s.total, "B", "bytes of the global tensors");
    char *sp[2] = { path_in(dir, "dist_ckpt"), path_in(dir, "dist_ckpt_nofsync") };
    char own[64];
    snprintf(own, sizeof own, "dist_dd.%d.bin", g_rank);
    char *pb = path_in(dir, own);
    shs_manager *mf = make_manager(s.st, sp[0], 1, 0, NULL, 1);
    shs_manager *mn = make_manager(s.st, sp[1], 0, 0, NULL, 1);
    double bf[REPS], sf[REPS], bn[REPS], sn[REPS];
    shs_save_stats st = SHS_SAVE_STATS_INIT;
    for (int r = 0; r < REPS; r++) {
        prepare(sp, 2, pb);
        bn[r] = dd_all(pb, &s, 0);
        prepare(sp, 2, pb);
        sn[r] = save_all(mn, 100 * r + 1);
        prepare(sp, 2, pb);
        bf[r] = dd_all(pb, &s, 1);
        prepare(sp, 2, pb);
        sf[r] = save_all(mf, 100 * r + 2); /* the last one stays for `load` */
        CHECK(shs_manager_last_save(&st, mf));
        say("save rep %d: no fsync: write(2) %.3f s, shs_manager_save %.3f s; fsync: "
            "write(2)+fsync %.3f s, shs_manager_save %.3f s (rank 0 stats: total %.3f s, "
            "%" PRIu64 " B written, max rank %" PRIu64 " B, balance %.3f)\n",
            r, bn[r], sn[r], bf[r], sf[r], st.total_seconds, st.bytes_written, st.max_rank_bytes,
            st.write_balance);
    }
    unlink(pb);
    if (g_rank == 0)
        rmtree(sp[1]);
    double B = (double)s.total;
    double gbf = B / best_of(bf, REPS) / 1e9, gsf = B / best_of(sf, REPS) / 1e9;
    double gbn = B / best_of(bn, REPS) / 1e9, gsn = B / best_of(sn, REPS) / 1e9;
    say("save, fsync: %d x write(2)+fsync best %.3f s %.2f GB/s; shs_manager_save best %.3f s "
        "%.2f GB/s; ratio %.3f\n",
        g_size, best_of(bf, REPS), gbf, best_of(sf, REPS), gsf, gsf / gbf);
    say("save, no fsync: %d x write(2) best %.3f s %.2f GB/s; shs_manager_save best %.3f s "
        "%.2f GB/s; ratio %.3f\n",
        g_size, best_of(bn, REPS), gbn, best_of(sn, REPS), gsn, gsn / gbn);
    result("base_fsync", gbf, "GB/s", "every rank write(2)+fsync of its shard, aggregate");
    result("shs_fsync", gsf, "GB/s", "shs_manager_save fsync=1, aggregate");
    result("base_nofsync", gbn, "GB/s", "every rank write(2) of its shard, aggregate");
    result("shs_nofsync", gsn, "GB/s", "shs_manager_save fsync=0, aggregate");
    result("base_fsync_s", best_of(bf, REPS), "s", "best");
    result("shs_fsync_s", best_of(sf, REPS), "s", "best");
    result("base_nofsync_s", best_of(bn, REPS), "s", "best");
    result("shs_nofsync_s", best_of(sn, REPS), "s", "best");
    result("shs_fsync_median_s", median_of(sf, REPS), "s", "median");
    result("base_fsync_median_s", median_of(bf, REPS), "s", "median");
    result("write_balance", st.write_balance, "", "max / mean bytes written per rank");
    result("max_rank_bytes", (double)st.max_rank_bytes, "B", "most bytes written by one rank");
    uint64_t sum = 0;
    MPI_Allreduce(&st.bytes_written, &sum, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    result("bytes_written", (double)sum, "B", "bytes written, sum over ranks");
    shs_manager_free(mf);
    shs_manager_free(mn);
    free_sharded(&s);
    peak_rss();
    free(sp[0]);
    free(sp[1]);
    free(pb);
    return 0;
}

/* ------------------------------------------------------------------ */
/* load (same layout / resharded)                                     */
/* ------------------------------------------------------------------ */

static double load_all(shs_manager *m)
{
    shs_progress p = progress_at(0);
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    quiet_barrier();
    double t0 = now();
    CHECK(shs_manager_load(&res, m, &p));
    double t = span_since(t0);
    if (!res.loaded)
        die("load (nothing loaded)", SHS_ENOCHECKPOINT);
    return t;
}

static uint64_t check_values(const sstate *s)
{
    uint64_t bad = 0, all = 0;
    for (unsigned i = 0; i < NT; i++) {
        const shard *t = &s->t[i];
        uint64_t g0 = t->off[0] * COLS, n = t->shape[0] * COLS;
        for (uint64_t k = 0; k < n; k++)
            bad += t->data[k] != value_at(i, g0 + k);
    }
    MPI_Allreduce(&bad, &all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    return all;
}

static double memcpy_all(const sstate *s, uint32_t *const *src)
{
    quiet_barrier();
    double t0 = now();
    for (int i = 0; i < NT; i++)
        memcpy(s->t[i].data, src[i], s->t[i].nbytes);
    return span_since(t0);
}

static int mode_load(const char *dir)
{
    char *ck = path_in(dir, "dist_ckpt");
    sstate s;
    make_sharded(&s, 0);
    char msg[256];
    int n = 0;
    for (int i = 0; i < NT; i++)
        n += snprintf(msg + n, sizeof msg - (size_t)n, "%s%" PRIu64, i ? "," : "", s.t[i].shape[0]);
    say("load: %d ranks load %s (saved by 4 ranks), %" PRIu64 " bytes; rank 0 rows per "
        "tensor: %s\n",
        g_size, ck, s.total, msg);
    result("ranks", g_size, "", "MPI ranks");
    result("state_bytes", (double)s.total, "B", "bytes of the global tensors");
    size_t mine = s.bytes, mx = 0;
    MPI_Allreduce(&mine, &mx, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    result("balance", (double)mx * g_size / (double)s.total, "",
           "max / mean bytes per rank of the layout");
    /* bytes of the saved chunks (4 even row blocks) that overlap this
       rank's rows: what a load that verifies whole chunks must hash */
    uint64_t touched = 0, touched_all = 0;
    for (int i = 0; i < NT; i++) {
        uint64_t rows = s.t[i].gshape[0], b = rows / 4, a0 = s.t[i].off[0],
                 a1 = a0 + s.t[i].shape[0];
        for (uint64_t c = 0; c < 4; c++)
            if (c * b < a1 && (c + 1) * b > a0)
                touched += b * COLS * 4;
    }
    MPI_Allreduce(&touched, &touched_all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    say("load: saved-chunk bytes overlapping the ranks' boxes: %" PRIu64 " (%.2f x the "
        "state)\n",
        touched_all, (double)touched_all / (double)s.total);
    result("chunk_bytes_touched", (double)touched_all, "B",
           "bytes of saved chunks overlapping the ranks' boxes, sum over ranks");
    shs_manager *m1 = make_manager(s.st, NULL, 1, 0, ck, 1);
    shs_manager *m2 = make_manager(s.st, NULL, 1, 0, ck, 2);
    /* warm the page cache and check every value */
    load_all(m1);
    uint64_t bad = check_values(&s);
    say("load: first (untimed) load: %" PRIu64 " wrong values\n", bad);
    result("wrong_values", (double)bad, "", "values differing from the saved ones");
    uint32_t *src[NT];
    for (int i = 0; i < NT; i++) {
        src[i] = xmalloc(s.t[i].nbytes);
        memcpy(src[i], s.t[i].data, s.t[i].nbytes);
    }
    double tm[REPS], t1[REPS], t2[REPS];
    for (int r = 0; r < REPS; r++) {
        tm[r] = memcpy_all(&s, src);
        t1[r] = load_all(m1);
        t2[r] = load_all(m2);
        say("load rep %d: memcpy %.3f s, shs_manager_load workers=1 %.3f s, workers=2 "
            "%.3f s\n",
            r, tm[r], t1[r], t2[r]);
    }
    bad = check_values(&s);
    double B = (double)s.total;
    double gm = B / best_of(tm, REPS) / 1e9, g1 = B / best_of(t1, REPS) / 1e9,
           g2 = B / best_of(t2, REPS) / 1e9;
    say("load: %d x memcpy best %.2f GB/s; shs_manager_load best %.2f GB/s (workers=1), "
        "%.2f GB/s (workers=2); ratios to memcpy %.3f / %.3f; %" PRIu64 " wrong values\n",
        g_size, gm, g1, g2, g1 / gm, g2 / gm, bad);
    result("memcpy", gm, "GB/s", "every rank memcpy of its bytes, aggregate");
    result("shs_load", g1, "GB/s", "shs_manager_load, load_worker_number=1, aggregate");
    result("shs_load_w2", g2, "GB/s", "shs_manager_load, load_worker_number=2, aggregate");
    result("memcpy_s", best_of(tm, REPS), "s", "best");
    result("shs_load_s", best_of(t1, REPS), "s", "best");
    result("shs_load_w2_s", best_of(t2, REPS), "s", "best");
    result("shs_load_median_s", median_of(t1, REPS), "s", "median");
    result("wrong_values_after", (double)bad, "", "after the timed loads");
    shs_manager_free(m1);
    shs_manager_free(m2);
    for (int i = 0; i < NT; i++)
        free(src[i]);
    free_sharded(&s);
    peak_rss();
    free(ck);
    return bad != 0;
}

/* ------------------------------------------------------------------ */
/* dedup: a fully replicated state                                    */
/* ------------------------------------------------------------------ */

/* Sizes spread geometrically from 4 KiB to 8 MiB (multiples of 4 bytes),
   in a scrambled order of names. */
static size_t dedup_bytes(int i)
{
    int j = (i * 37) % ND;
    size_t n = (size_t)(4096.0 * pow(2048.0, j / 63.0) + 0.5) & ~(size_t)3;
    return n > 8388608 ? 8388608 : n;
}

typedef struct dstate {
    char name[ND][48];
    uint64_t shape[ND][1];
    uint32_t *data[ND];
    uint64_t unique;
    shs_state *st;
} dstate;

static void make_replicated(dstate *d)
{
    memset(d, 0, sizeof *d);
    CHECK(shs_state_create(&d->st));
    for (int i = 0; i < ND; i++) {
        size_t nb = dedup_bytes(i);
        snprintf(d->name[i], sizeof d->name[i], "model.layers.%d.weight", i);
        d->shape[i][0] = nb / 4;
        d->data[i] = xmalloc(nb);
        for (size_t k = 0; k < nb / 4; k++)
            d->data[i][k] = value_at((unsigned)i + 100u, k);
        d->unique += nb;
        shs_tensor_spec sp = SHS_TENSOR_SPEC_INIT;
        sp.name = d->name[i];
        sp.dtype = SHS_F32;
        sp.ndim = 1;
        sp.shape = d->shape[i];
        sp.data = d->data[i];
        CHECK(shs_state_add_tensor(d->st, &sp));
    }
}

/* Payload bytes on disk: chunk byte ranges of the step directory, in all
   and per writing rank (rank 0 only). */
static void disk_bytes(const char *save_path, uint64_t *total, uint64_t *per_rank,
                       uint64_t *files_bytes)
{
    char step[4096];
    shs_checkpoint *c = NULL;
    CHECK(shs_checkpoint_resolve(step, sizeof step, save_path, -1));
    CHECK(shs_checkpoint_open(&c, step, NULL));
    *total = 0;
    *files_bytes = 0;
    for (int r = 0; r < g_size; r++)
        per_rank[r] = 0;
    for (size_t i = 0; i < shs_checkpoint_tensor_count(c); i++) {
        const shs_checkpoint_tensor_info *ti = shs_checkpoint_tensor(c, i);
        for (size_t k = 0; k < ti->n_chunks; k++) {
            shs_chunk_info ci = SHS_CHUNK_INFO_INIT;
            CHECK(shs_checkpoint_chunk(&ci, c, i, k));
            uint64_t b = ci.byte_end - ci.byte_begin;
            *total += b;
            int r = shs_checkpoint_file_rank(c, ci.file);
            if (r >= 0 && r < g_size)
                per_rank[r] += b;
        }
    }
    for (size_t f = 0; f < shs_checkpoint_file_count(c); f++) {
        char *p = path_in(step, shs_checkpoint_file_name(c, f));
        struct stat sb;
        if (stat(p, &sb) == 0)
            *files_bytes += (uint64_t)sb.st_size;
        free(p);
    }
    shs_checkpoint_free(c);
}

static int mode_dedup(const char *dir)
{
    dstate d;
    make_replicated(&d);
    size_t lo = SIZE_MAX, hi = 0;
    for (int i = 0; i < ND; i++) {
        lo = dedup_bytes(i) < lo ? dedup_bytes(i) : lo;
        hi = dedup_bytes(i) > hi ? dedup_bytes(i) : hi;
    }
    say("dedup: %d ranks, %d replicated F32 tensors (%zu B .. %zu B), %" PRIu64 " unique bytes\n",
        g_size, ND, lo, hi, d.unique);
    result("ranks", g_size, "", "MPI ranks");
    result("tensors", ND, "", "replicated tensors");
    result("unique_bytes", (double)d.unique, "B", "bytes of the distinct tensors");
    int fail = 0;
    for (int rr = 1; rr >= 0; rr--) {
        char *sp = path_in(dir, rr ? "dist_dedup" : "dist_nodedup");
        shs_manager *m = make_manager(d.st, sp, 1, rr, NULL, 1);
        double t[REPS];
        shs_save_stats st = SHS_SAVE_STATS_INIT;
        for (int r = 0; r < REPS; r++) {
            prepare(&sp, 1, NULL);
            t[r] = save_all(m, r + 1);
        }
        CHECK(shs_manager_last_save(&st, m));
        uint64_t mine = st.bytes_written, sum = 0, per[64] = { 0 }, dt = 0, fb = 0;
        MPI_Allreduce(&mine, &sum, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        uint64_t all[64] = { 0 };
        MPI_Gather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
        double dbal = 0;
        if (g_rank == 0) {
            disk_bytes(sp, &dt, per, &fb);
            uint64_t mx = 0;
            for (int r = 0; r < g_size; r++)
                if (per[r] > mx)
                    mx = per[r];
            dbal = dt ? (double)mx * g_size / (double)dt : 0;
            printf("dedup remove_redundancy=%d: save best %.3f s; bytes_written per rank:", rr,
                   best_of(t, REPS));
            for (int r = 0; r < g_size; r++)
                printf(" %" PRIu64, all[r]);
            printf(" (sum %" PRIu64 " = %.3f x unique); write_balance %.4f; on disk: chunk "
                   "bytes %" PRIu64 " (%.3f x unique), per rank file:",
                   sum, (double)sum / (double)d.unique, st.write_balance, dt,
                   (double)dt / (double)d.unique);
            for (int r = 0; r < g_size; r++)
                printf(" %" PRIu64, per[r]);
            printf(", balance %.4f; files incl. headers %" PRIu64 " B\n", dbal, fb);
        }
        char k[64];
        const char *p = rr ? "rr" : "norr";
        snprintf(k, sizeof k, "%s_bytes_written", p);
        result(k, (double)sum, "B", "sum over ranks of shs_save_stats.bytes_written");
        snprintf(k, sizeof k, "%s_disk_bytes", p);
        result(k, (double)dt, "B", "chunk payload bytes in the step directory");
        snprintf(k, sizeof k, "%s_file_bytes", p);
        result(k, (double)fb, "B", "file sizes incl. headers");
        snprintf(k, sizeof k, "%s_balance", p);
        result(k, st.write_balance, "", "write_balance (max / mean per rank)");
        snprintf(k, sizeof k, "%s_disk_balance", p);
        result(k, dbal, "", "max / mean chunk bytes per rank file");
        snprintf(k, sizeof k, "%s_max_rank_bytes", p);
        result(k, (double)st.max_rank_bytes, "B", "max_rank_bytes");
        snprintf(k, sizeof k, "%s_s", p);
        result(k, best_of(t, REPS), "s", "best save time");
        if (rr && (sum != d.unique || st.write_balance > 1.05))
            fail = 1;
        shs_manager_free(m);
        if (g_rank == 0)
            rmtree(sp);
        free(sp);
    }
    shs_state_free(d.st);
    for (int i = 0; i < ND; i++)
        free(d.data[i]);
    peak_rss();
    (void)fail; /* targets are judged by report.py */
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    if (argc < 3 || g_size > 64) {
        say("usage: mpirun -np N bench_dist save|load|dedup DIR (N <= 64)\n");
        MPI_Finalize();
        return 2;
    }
    const char *mode = argv[1], *dir = argv[2];
    if (strcmp(mode, "load") == 0)
        snprintf(g_mode, sizeof g_mode, "dist_load_np%d", g_size);
    else
        snprintf(g_mode, sizeof g_mode, "dist_%s", mode);
    CHECK(shs_comm_create_mpi(&g_comm, MPI_COMM_WORLD));
    int rc;
    if (strcmp(mode, "save") == 0)
        rc = mode_save(dir);
    else if (strcmp(mode, "load") == 0)
        rc = mode_load(dir);
    else if (strcmp(mode, "dedup") == 0)
        rc = mode_dedup(dir);
    else {
        say("unknown mode %s\n", mode);
        rc = 2;
    }
    shs_comm_free(g_comm);
    int any = 0;
    MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
}
