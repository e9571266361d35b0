/*
 * mpi_ckpt.c -- distributed checkpoint driver for the MPI tests.
 *
 *   mpi_ckpt save SAVE_PATH STEP LAYOUT [--remove-redundancy]
 *   mpi_ckpt load SAVE_PATH LAYOUT
 *
 * Every rank registers its chunk of two global tensors, chosen by LAYOUT
 * (rows | cols | grid | replicated) from its rank and the world size:
 *   "w"  F32 [10, 6]  value 100*i + j + step
 *   "b"  I64 [7]      replicated on every rank, value 1000*i + step
 * plus the optimizer moment of "w" (value -(100*i + j)) and a rank-local
 * blob.  `load` fills its (possibly different) chunks from any saved
 * layout and checks every element.  With SHS_FAIL_RANK=r in the
 * environment, rank r's writes fail with ENOSPC: every rank must report an
 * error naming rank r and nothing may be committed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/comm.h"
#include "store/io.h"
#include "shardsafe_mpi.h"

#define R 10
#define C 6
#define NB 7

static int g_rank, g_size;

static void box_for(const char *layout, uint64_t off[2], uint64_t shape[2])
{
    off[0] = off[1] = 0;
    shape[0] = R;
    shape[1] = C;
    if (strcmp(layout, "rows") == 0 || (strcmp(layout, "grid") == 0 && g_size != 4)) {
        /* uneven: 10 rows over size ranks, the first ones get one more */
        uint64_t base = R / (uint64_t)g_size, extra = R % (uint64_t)g_size;
        off[0] = (uint64_t)g_rank * base + ((uint64_t)g_rank < extra ? (uint64_t)g_rank : extra);
        shape[0] = base + ((uint64_t)g_rank < extra);
    } else if (strcmp(layout, "cols") == 0) {
        uint64_t base = C / (uint64_t)g_size, extra = C % (uint64_t)g_size;
        off[1] = (uint64_t)g_rank * base + ((uint64_t)g_rank < extra ? (uint64_t)g_rank : extra);
        shape[1] = base + ((uint64_t)g_rank < extra);
    } else if (strcmp(layout, "grid") == 0) {
        off[0] = (uint64_t)(g_rank / 2) * 5;
        off[1] = (uint64_t)(g_rank % 2) * 3;
        shape[0] = 5;
        shape[1] = 3;
    } else if (strcmp(layout, "replicated") != 0) {
        fprintf(stderr, "unknown layout %s\n", layout);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

/* A comm that counts the gathers it forwards to the MPI one: a save that
   reuses its cached layout gathers once (the metadata), not twice. */
static shs_comm *g_inner;
static int g_gathers;
static int c_barrier(void *x)
{
    (void)x;
    return g_inner->ops.barrier(g_inner->ctx);
}
static int c_bcast(void *x, void *b, size_t n, int r)
{
    (void)x;
    return g_inner->ops.broadcast(g_inner->ctx, b, n, r);
}
static int c_allgather(void *x, const void *s, size_t n, void *r)
{
    (void)x;
    return g_inner->ops.allgather(g_inner->ctx, s, n, r);
}
static int c_gatherv(void *x, const void *s, const size_t *l, void *r, int root)
{
    (void)x;
    g_gathers++;
    return g_inner->ops.gatherv(g_inner->ctx, s, l, r, root);
}
static int c_send(void *x, const void *b, size_t n, int d, int t)
{
    (void)x;
    return g_inner->ops.send(g_inner->ctx, b, n, d, t);
}
static int c_recv(void *x, void *b, size_t n, int s, int t)
{
    (void)x;
    return g_inner->ops.recv(g_inner->ctx, b, n, s, t);
}
static const shs_comm_ops k_counting = {
    SHS_COMM_OPS_VERSION, c_barrier, c_bcast, c_allgather, c_gatherv, c_send, c_recv, NULL
};

static ssize_t failing_pwrite(int fd, const void *b, size_t n, off_t o)
{
    (void)fd;
    (void)b;
    (void)n;
    (void)o;
    errno = ENOSPC;
    return -1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    int save = argc >= 5 && strcmp(argv[1], "save") == 0;
    if (!(save || (argc >= 4 && strcmp(argv[1], "load") == 0))) {
        if (g_rank == 0)
            fprintf(stderr, "usage: mpi_ckpt save PATH STEP LAYOUT | load PATH LAYOUT\n");
        MPI_Finalize();
        return 2;
    }
    const char *path = argv[2], *layout = save ? argv[4] : argv[3];
    long step = save ? atol(argv[3]) : 0;
    int remove_redundancy = save && argc >= 6 && strcmp(argv[5], "--remove-redundancy") == 0;
    int balanced = !save && argc >= 5 && strcmp(argv[4], "--balanced") == 0;

    uint64_t off[2], shape[2], gshape[2] = { R, C }, bshape[1] = { NB };
    box_for(layout, off, shape);
    /* SHS_BAD_SHAPE: register "w" with another global shape (a mismatch
       the load must report by name) */
    if (getenv("SHS_BAD_SHAPE"))
        gshape[1] = C + 1;
    size_t n = (size_t)(shape[0] * shape[1]);
    float *w = calloc(n + 1, sizeof *w), *m = calloc(n + 1, sizeof *m);
    int64_t b[NB];
    for (uint64_t i = 0; i < shape[0]; i++)
        for (uint64_t j = 0; j < shape[1]; j++) {
            w[i * shape[1] + j] = save ? (float)(100 * (off[0] + i) + off[1] + j + (uint64_t)step)
                                       : -1;
            m[i * shape[1] + j] = save ? -(float)(100 * (off[0] + i) + off[1] + j) : 1;
        }
    for (int i = 0; i < NB; i++)
        b[i] = save ? 1000 * i + step : -7;

    shs_comm *comm = NULL;
    shs_state *st = NULL;
    shs_manager *mgr = NULL;
    int rc = shs_comm_create_mpi(&g_inner, MPI_COMM_WORLD);
    if (rc == SHS_OK)
        rc = shs_comm_create(&comm, g_inner->rank, g_inner->size, &k_counting, NULL);
    if (rc == SHS_OK)
        rc = shs_state_create(&st);
    shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
    s.name = "w";
    s.ndim = 2;
    s.shape = shape;
    s.global_shape = gshape;
    s.global_offset = off;
    s.data = w;
    if (rc == SHS_OK)
        rc = shs_state_add_tensor(st, &s);
    s.name = "optimizer.exp_avg.w";
    s.kind = SHS_KIND_OPTIMIZER;
    s.data = m;
    if (rc == SHS_OK)
        rc = shs_state_add_tensor(st, &s);
    shs_tensor_spec sb = SHS_TENSOR_SPEC_INIT;
    sb.name = "b";
    sb.dtype = SHS_I64;
    sb.ndim = 1;
    sb.shape = bshape;
    sb.data = b;
    if (rc == SHS_OK)
        rc = shs_state_add_tensor(st, &sb);
    char blob[64];
    snprintf(blob, sizeof blob, "rank %d of %d", g_rank, g_size);
    if (rc == SHS_OK && save)
        rc = shs_state_set_blob(st, "rng", blob, strlen(blob));
    shs_config cfg;
    shs_config_init(&cfg);
    cfg.save_path = path;
    cfg.save_interleaved_steps = 1;
    cfg.save_max = 0;
    cfg.remove_redundancy = remove_redundancy;
    cfg.load_balanced = balanced;
    if (rc == SHS_OK)
        rc = shs_manager_create_comm(&mgr, &cfg, st, comm);
    if (rc != SHS_OK) {
        fprintf(stderr, "rank %d: setup: %s\n", g_rank, shs_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    int status = 0;
    if (save) {
        static shs__io_ops failing;
        const char *fr = getenv("SHS_FAIL_RANK");
        if (fr && atoi(fr) == g_rank) {
            failing = shs__io_posix;
            failing.pwrite = failing_pwrite;
            shs__io_set(&failing);
        }
        shs_progress p = SHS_PROGRESS_INIT;
        p.global_step = step;
        p.global_batch_size = 8;
        p.loss_scale = 1.0;
        rc = shs_manager_save(mgr, &p, 0);
        int first = g_gathers;
        /* the same layout again: the cached plan needs no layout gather */
        if (rc == SHS_OK && remove_redundancy) {
            p.global_step = ++step;
            for (uint64_t i = 0; i < shape[0]; i++)
                for (uint64_t j = 0; j < shape[1]; j++)
                    w[i * shape[1] + j] = (float)(100 * (off[0] + i) + off[1] + j + (uint64_t)step);
            for (int i = 0; i < NB; i++)
                b[i] = 1000 * i + step;
            rc = shs_manager_save(mgr, &p, 0);
        }
        shs__io_set(NULL);
        shs_save_stats ss = SHS_SAVE_STATS_INIT;
        if (rc != SHS_OK) {
            printf("rank %d: save failed: %s\n", g_rank, shs_last_error());
            status = 1;
        } else {
            shs_manager_last_save(&ss, mgr);
            printf("rank %d: saved step %ld (%s): %llu of %llu bytes, balance %.3f, gathers "
                   "%d then %d\n",
                   g_rank, step, layout, (unsigned long long)ss.bytes_written,
                   (unsigned long long)ss.state_bytes, ss.write_balance, first, g_gathers - first);
        }
    } else {
        shs_progress p = SHS_PROGRESS_INIT;
        shs_load_result res = SHS_LOAD_RESULT_INIT;
        rc = shs_manager_load(&res, mgr, &p);
        if (rc != SHS_OK) {
            printf("rank %d: load failed: %s\n", g_rank, shs_last_error());
            status = 1;
        } else {
            long lstep = (long)p.global_step;
            size_t bad = 0;
            for (uint64_t i = 0; i < shape[0]; i++)
                for (uint64_t j = 0; j < shape[1]; j++) {
                    float want = (float)(100 * (off[0] + i) + off[1] + j + (uint64_t)lstep);
                    bad += w[i * shape[1] + j] != want;
                    bad += m[i * shape[1] + j] != -(float)(100 * (off[0] + i) + off[1] + j);
                }
            for (int i = 0; i < NB; i++)
                bad += b[i] != 1000 * i + lstep;
            const void *bp;
            size_t bl;
            int blob_ok = shs_state_get_blob(st, "rng", &bp, &bl) == SHS_OK && bl == strlen(blob) &&
                          memcmp(bp, blob, bl) == 0;
            if (res.rank_state_restored != blob_ok)
                bad++;
            printf("rank %d: loaded step %ld (%s): %zu wrong values, rank state %s, read %llu "
                   "bytes\n",
                   g_rank, lstep, layout, bad,
                   res.rank_state_restored ? "restored" : "not restored",
                   (unsigned long long)res.bytes_read);
            status = bad != 0;
        }
    }
    shs_manager_free(mgr);
    shs_state_free(st);
    shs_comm_free(comm);
    shs_comm_free(g_inner);
    free(w);
    free(m);
    int any = 0;
    MPI_Allreduce(&status, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
}
