/*
 * benchutil.h -- helpers shared by the benchmark programs (bench_io,
 * bench_ckpt, bench/mpi/bench_dist).  Every bench program is its own
 * executable, so the helpers are static inline functions in this header.
 *
 * Before including it, a benchmark defines:
 *   BENCH_NAME  the program name in error messages ("bench_io")
 *   g_mode      the mode string (const char * or char array) that every
 *               "@@ {json}" result line carries
 * and, for an MPI benchmark, BENCH_MPI (with g_rank declared): fatal errors
 * then MPI_Abort, errors name the rank, and only rank 0 prints results.
 *
 * The "@@ " lines are parsed by bench/report.py: keep their format.
 */
#ifndef SHS_BENCHUTIL_H
#define SHS_BENCHUTIL_H

#include "shardsafe.h"

#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef BENCH_NAME
#error "define BENCH_NAME before including benchutil.h"
#endif

#ifdef BENCH_MPI
/* MPI_Abort does not return; exit() tells the compiler so */
#define BENCH_FATAL() (MPI_Abort(MPI_COMM_WORLD, 1), exit(1))
#define BENCH_PRINTS (g_rank == 0)
#else
#define BENCH_FATAL() exit(1)
#define BENCH_PRINTS 1
#endif

/* ---- time ---------------------------------------------------------- */

static inline double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Process CPU time (user + system) next to wall time: on a shared machine
   a run can wait for a CPU; its CPU time does not count that wait. */
static inline double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- errors and memory ------------------------------------------------ */

static inline void die(const char *what, int rc)
{
#ifdef BENCH_MPI
    fprintf(stderr, BENCH_NAME " %s rank %d: %s failed: %s (%s)\n", g_mode, g_rank, what,
            rc < 0 ? shs_strerror(rc) : strerror(errno), rc < 0 ? shs_last_error() : "");
#else
    fprintf(stderr, BENCH_NAME " %s: %s failed: %s (%s)\n", g_mode, what,
            rc < 0 ? shs_strerror(rc) : strerror(errno), rc < 0 ? shs_last_error() : "");
#endif
    BENCH_FATAL();
}

#define CHECK(call)                                                                                \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ < 0)                                                                               \
            die(#call, rc_);                                                                       \
    } while (0)

static inline void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, BENCH_NAME ": out of memory (%zu bytes)\n", n);
        BENCH_FATAL();
    }
    return p;
}

/* ---- results and statistics ------------------------------------------ */

/* One machine-readable result line (bench/report.py). */
static inline void result(const char *key, double value, const char *unit, const char *label)
{
    if (BENCH_PRINTS) {
        printf("@@ {\"mode\":\"%s\",\"key\":\"%s\",\"value\":%.9g,\"unit\":\"%s\","
               "\"label\":\"%s\"}\n",
               g_mode, key, value, unit, label);
        fflush(stdout);
    }
}

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static inline double best_of(const double *t, int n)
{
    double b = t[0];
    for (int i = 1; i < n; i++)
        if (t[i] < b)
            b = t[i];
    return b;
}

/* n <= 64 */
static inline double median_of(const double *t, int n)
{
    double s[64];
    memcpy(s, t, (size_t)n * sizeof *t);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* This process's peak RSS (getrusage ru_maxrss) in MiB. */
static inline double maxrss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

#ifndef BENCH_MPI
/* Print (human line and "@@" line) the process's peak RSS. */
static inline void peak_rss(void)
{
    double mib = maxrss_mib();
    printf("peak RSS (ru_maxrss): %.1f MiB\n", mib);
    result("peak_rss", mib, "MiB", "peak RSS of the process");
}
#endif

/* ---- files --------------------------------------------------------- */

/* "<dir>/<name>", malloc'd. */
static inline char *path_in(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = xmalloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static inline void write_full(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t r = write(fd, p, n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            die("write", 1);
        }
        p += r;
        n -= (size_t)r;
    }
}

static inline int bench_rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

/* Remove a directory tree (best effort). */
static inline void rmtree(const char *p)
{
    nftw(p, bench_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- the benchmark model layout -------------------------------------- */

/* Tensor i of the n model tensors of bench_io and bench_ckpt (bench_torch.py
   and bench_torch_ckpt.py build the same): named
   "model.layers.<i / 4>.<kind>"; every fourth (i % 4 == 3) is a vector of
   64 (i + 1) elements, the others are matrices [rows, 1024] whose rows sum
   to total_rows (the second last takes what is left).  *rows_left starts at
   total_rows.  Returns the element count. */
static inline size_t model_tensor(int i, int n, unsigned total_rows, unsigned *rows_left,
                                  char *name, size_t name_cap, size_t *ndim, uint64_t shape[2])
{
    static const char *const kind[4] = { "attn.qkv.weight", "mlp.up.weight", "mlp.down.weight",
                                         "norm.weight" };
    unsigned wsum = 0;
    for (int k = 0; k < n; k++)
        if (k % 4 != 3)
            wsum += 1u + (unsigned)(k * 37) % 64u;
    snprintf(name, name_cap, "model.layers.%d.%s", i / 4, kind[i % 4]);
    if (i % 4 == 3) {
        *ndim = 1;
        shape[0] = 64u * (unsigned)(i + 1);
        return (size_t)shape[0];
    }
    unsigned w = 1u + (unsigned)(i * 37) % 64u;
    unsigned rows = i == n - 2 ? *rows_left : (unsigned)((uint64_t)total_rows * w / wsum);
    *rows_left -= rows;
    *ndim = 2;
    shape[0] = rows;
    shape[1] = 1024;
    return (size_t)(shape[0] * shape[1]);
}

/* ---- checkpoints --------------------------------------------------- */

/* The progress saved at `step` (batch 32). */
static inline shs_progress progress_at(int64_t step)
{
    shs_progress p = SHS_PROGRESS_INIT;
    p.global_step = step;
    p.step_num = step;
    p.loss_scale = 1.0;
    p.global_batch_size = 32;
    p.consumed_samples = step * 32;
    return p;
}

#endif
