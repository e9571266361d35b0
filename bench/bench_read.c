/*
 * bench_read.c -- the public read API against the manager's own load.
 *
 *   bench_read DIR [MIB]   (default 1024)
 *
 * Saves MIB of F32 state (16 matrices [rows, 4096], rows split over 4
 * ranks: 4 files) with 4 ranks in one process (threads over a small
 * communicator), then, warm cache:
 *   1. shs_checkpoint_read of every whole tensor vs shs_manager_load into
 *      whole tensors (world 1) from the same checkpoint;   target >= 0.9x
 *   2. the box of rank 1 of 3 (rows split in 3) of every tensor:
 *      shs_checkpoint_read vs a manager loading that box (4 -> 3
 *      reshard);                                             target >= 0.8x
 * and saves a second copy with rows split over 3 ranks for
 * `shardsafe diff` (timed with /usr/bin/time -v by bench/run.sh or by
 * hand: the command is printed).
 */
#include "shardsafe.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *g_mode = "read";

#define BENCH_NAME "bench_read"
#include "benchutil.h"

#define NT 16
#define COLS 4096u
#define REPS 5 /* best of REPS: the machine may be shared */

#include "../tests/threadcomm.h"

static uint64_t g_rows;

typedef struct job {
    tshared *sh;
    int rank, nranks;
    const char *sp;
} job;

/* Rows [r0, r1) of tensor i when `rows` are split over n ranks. */
static void split(uint64_t rows, int n, int r, uint64_t *r0, uint64_t *r1)
{
    *r0 = rows * (uint64_t)r / (uint64_t)n;
    *r1 = rows * (uint64_t)(r + 1) / (uint64_t)n;
}

static void *save_rank(void *arg)
{
    job *j = arg;
    shs_state *st;
    shs_comm *comm;
    shs_manager *m;
    tcomm tc = { j->sh, j->rank };
    uint64_t r0, r1;
    split(g_rows, j->nranks, j->rank, &r0, &r1);
    uint64_t g[2] = { g_rows, COLS }, off[2] = { r0, 0 }, sh[2] = { r1 - r0, COLS };
    float *buf = malloc((size_t)(r1 - r0) * COLS * 4 * NT);
    CHECK(shs_state_create(&st));
    for (int i = 0; i < NT; i++) {
        float *p = buf + (size_t)i * (r1 - r0) * COLS;
        for (uint64_t k = 0; k < (r1 - r0) * COLS; k++)
            p[k] = (float)((r0 * COLS + k) % 1000003) * 0.5f + (float)i;
        char name[32];
        snprintf(name, sizeof name, "layer%02d.weight", i);
        shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
        s.name = name;
        s.ndim = 2;
        s.shape = sh;
        s.global_shape = g;
        s.global_offset = off;
        s.data = p;
        CHECK(shs_state_add_tensor(st, &s));
    }
    shs_config c;
    shs_config_init(&c);
    c.save_path = j->sp;
    c.fsync = 0;
    c.save_interleaved_steps = 1000000;
    shs_progress pr = { SHS_PROGRESS_VERSION, 1, 1, 1, 1.0, 1, 1, "" };
    CHECK(shs_comm_create(&comm, j->rank, j->nranks, &k_tops, &tc));
    CHECK(shs_manager_create_comm(&m, &c, st, comm));
    CHECK(shs_manager_save(m, &pr, 0));
    CHECK(shs_manager_wait(m));
    shs_manager_free(m);
    shs_comm_free(comm);
    shs_state_free(st);
    free(buf);
    return NULL;
}

static void save_n(const char *sp, int n)
{
    tshared sh;
    job j[8];
    pthread_t th[8];
    tshared_init(&sh, n, 0);
    for (int r = 0; r < n; r++) {
        j[r] = (job){ &sh, r, n, sp };
        pthread_create(&th[r], NULL, save_rank, &j[r]);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    tshared_destroy(&sh);
}

/* The manager's load of rows [r0, r1) of every tensor from sp. */
static double manager_load(const char *sp, uint64_t r0, uint64_t r1, float *dst)
{
    shs_state *st;
    shs_manager *m;
    uint64_t g[2] = { g_rows, COLS }, off[2] = { r0, 0 }, sh[2] = { r1 - r0, COLS };
    CHECK(shs_state_create(&st));
    for (int i = 0; i < NT; i++) {
        char name[32];
        snprintf(name, sizeof name, "layer%02d.weight", i);
        shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
        s.name = name;
        s.ndim = 2;
        s.shape = sh;
        s.global_shape = g;
        s.global_offset = off;
        s.data = dst + (size_t)i * (r1 - r0) * COLS;
        CHECK(shs_state_add_tensor(st, &s));
    }
    shs_config c;
    shs_config_init(&c);
    c.enable_save = 0;
    c.load_path = sp;
    CHECK(shs_manager_create(&m, &c, st));
    shs_progress pr = SHS_PROGRESS_INIT;
    double t = now();
    CHECK(shs_manager_load(NULL, m, &pr));
    t = now() - t;
    shs_manager_free(m);
    shs_state_free(st);
    return t;
}

static double public_read(const char *sp, uint64_t r0, uint64_t r1, float *dst)
{
    shs_checkpoint *ck;
    double t = now();
    CHECK(shs_checkpoint_open(&ck, sp, NULL));
    uint64_t s[2] = { r0, 0 }, n[2] = { r1 - r0, COLS };
    for (size_t i = 0; i < NT; i++)
        CHECK(shs_checkpoint_read(ck, i, s, n, SHS_F32, dst + i * (r1 - r0) * COLS,
                                  (size_t)((r1 - r0) * COLS * 4)));
    shs_checkpoint_free(ck);
    return now() - t;
}

static double best(double a, double b)
{
    return a < b ? a : b;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_read DIR [MIB]\n");
        return 2;
    }
    uint64_t mib = argc > 2 ? strtoull(argv[2], NULL, 10) : 1024;
    g_rows = mib * (1u << 20) / 4 / COLS / NT;
    g_rows -= g_rows % 12;
    double gb = (double)g_rows * COLS * 4 * NT / 1e9;
    char sp4[4096], sp3[4096];
    snprintf(sp4, sizeof sp4, "%s/read4", argv[1]);
    snprintf(sp3, sizeof sp3, "%s/read3", argv[1]);
    mkdir(argv[1], 0755);
    save_n(sp4, 4);
    save_n(sp3, 3);
    float *a = malloc((size_t)(g_rows * COLS * 4 * NT));
    float *b = malloc((size_t)(g_rows * COLS * 4 * NT));
    if (!a || !b)
        die("malloc", SHS_ENOMEM);
    /* warm the page cache, then best of REPS, interleaved */
    manager_load(sp4, 0, g_rows, a);
    double tm = 1e9, tr = 1e9;
    for (int k = 0; k < REPS; k++) {
        tm = best(tm, manager_load(sp4, 0, g_rows, a));
        tr = best(tr, public_read(sp4, 0, g_rows, b));
    }
    if (memcmp(a, b, (size_t)(g_rows * COLS * 4 * NT)) != 0)
        die("whole read differs from the manager's load", SHS_ECORRUPT);
    printf("whole %.2f GB, 4 files: manager load %.3f s (%.2f GB/s), public read %.3f s "
           "(%.2f GB/s), ratio %.2f\n",
           gb, tm, gb / tm, tr, gb / tr, tm / tr);
    uint64_t r0, r1;
    split(g_rows, 3, 1, &r0, &r1);
    double bgb = (double)(r1 - r0) * COLS * 4 * NT / 1e9, bm = 1e9, br = 1e9;
    for (int k = 0; k < REPS; k++) {
        bm = best(bm, manager_load(sp4, r0, r1, a));
        br = best(br, public_read(sp4, r0, r1, b));
    }
    if (memcmp(a, b, (size_t)((r1 - r0) * COLS * 4 * NT)) != 0)
        die("resharded read differs from the manager's load", SHS_ECORRUPT);
    printf("reshard 4->3 box of rank 1, %.2f GB: manager load %.3f s, public read %.3f s, "
           "ratio %.2f\n",
           bgb, bm, br, bm / br);
    result("state_bytes", (double)g_rows * COLS * 4 * NT, "B", "tensor bytes of one checkpoint");
    result("manager_whole", gb / tm, "GB/s", "shs_manager_load of every whole tensor");
    result("manager_whole_s", tm, "s", "shs_manager_load, whole");
    result("read_whole", gb / tr, "GB/s", "open + shs_checkpoint_read of every whole tensor");
    result("read_whole_s", tr, "s", "public read, whole");
    result("box_bytes", bgb * 1e9, "B", "bytes of the 4 -> 3 box of rank 1");
    result("manager_box", bgb / bm, "GB/s", "manager load of the box (4 -> 3 reshard)");
    result("manager_box_s", bm, "s", "manager load of the box");
    result("read_box", bgb / br, "GB/s", "open + shs_checkpoint_read of the box");
    result("read_box_s", br, "s", "public read of the box");
    peak_rss();
    printf("diff: /usr/bin/time -v shardsafe diff --full %s %s\n", sp4, sp3);
    free(a);
    free(b);
    return 0;
}
