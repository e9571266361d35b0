/*
 * bench_merge_gen.c -- the input of bench/bench_merge.sh: a checkpoint
 * saved by 4 ranks (threads over a small communicator, one process).
 *
 *   bench_merge_gen SAVE_PATH [MIB]   (default 2048)
 *
 * 16 F32 tensors [rows, 4096] ("layerNN.weight", MIB/16 each), rows split
 * unevenly over the 4 ranks, plus one tensor "norm.weight" [4096]
 * replicated on every rank: 4 model files of ~MIB/4 each.
 */
#include "shardsafe.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_mode = "gen";

#define BENCH_NAME "bench_merge_gen"
#include "benchutil.h"

#define NR 4
#define NT 16
#define COLS 4096u

#include "../tests/threadcomm.h"

static uint64_t g_rows;

typedef struct job {
    tshared *sh;
    int rank;
    const char *sp;
} job;

static void *save_rank(void *arg)
{
    job *j = arg;
    shs_state *st;
    shs_comm *comm;
    shs_manager *m;
    tcomm tc = { j->sh, j->rank };
    /* uneven: rank r gets (2 + r) / 14 of the rows */
    static const unsigned cut[NR + 1] = { 0, 2, 5, 9, 14 };
    uint64_t r0 = g_rows * cut[j->rank] / 14, r1 = g_rows * cut[j->rank + 1] / 14;
    uint64_t g[2] = { g_rows, COLS }, off[2] = { r0, 0 }, sh[2] = { r1 - r0, COLS };
    uint64_t ng[1] = { COLS }, noff[1] = { 0 };
    float *buf = malloc((size_t)(r1 - r0) * COLS * 4 * NT + 1), norm[COLS];
    if (!buf)
        die("malloc", 0);
    for (unsigned k = 0; k < COLS; k++)
        norm[k] = 1.0f + (float)k / COLS;
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
    shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
    s.name = "norm.weight";
    s.ndim = 1;
    s.shape = ng;
    s.global_shape = ng;
    s.global_offset = noff;
    s.data = norm;
    CHECK(shs_state_add_tensor(st, &s));
    shs_config c;
    shs_config_init(&c);
    c.save_path = j->sp;
    c.fsync = 0;
    c.save_interleaved_steps = 1000000;
    c.remove_redundancy = 1;
    shs_progress pr = SHS_PROGRESS_INIT;
    pr.global_step = 1;
    CHECK(shs_comm_create(&comm, j->rank, NR, &k_tops, &tc));
    CHECK(shs_manager_create_comm(&m, &c, st, comm));
    CHECK(shs_manager_save(m, &pr, 0));
    CHECK(shs_manager_wait(m));
    shs_manager_free(m);
    shs_comm_free(comm);
    shs_state_free(st);
    free(buf);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_merge_gen SAVE_PATH [MIB]\n");
        return 2;
    }
    uint64_t mib = argc > 2 ? strtoull(argv[2], NULL, 10) : 2048;
    g_rows = mib * 1024 * 1024 / NT / (COLS * 4);
    if (g_rows < 14) {
        fprintf(stderr, "bench_merge_gen: MIB too small\n");
        return 2;
    }
    tshared sh;
    job j[NR];
    pthread_t th[NR];
    tshared_init(&sh, NR, 0);
    for (int r = 0; r < NR; r++) {
        j[r] = (job){ &sh, r, argv[1] };
        pthread_create(&th[r], NULL, save_rank, &j[r]);
    }
    for (int r = 0; r < NR; r++)
        pthread_join(th[r], NULL);
    tshared_destroy(&sh);
    printf("saved %s: %d ranks, %d tensors [%llu, %u] F32 + norm.weight\n", argv[1], NR, NT,
           (unsigned long long)g_rows, COLS);
    return 0;
}
