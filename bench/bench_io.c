/*
 * bench_io.c -- I/O benchmarks of libshardsafe against physical baselines
 * measured in the same process run (see bench/README.md).
 *
 *   bench_io write  DIR   shs_save_file vs write(2) of the same bytes,
 *                         without and with fsync
 *   bench_io read   DIR   shs_file_open + shs_file_read (mmap and pread
 *                         paths) vs memcpy and raw pread; open time of the
 *                         1 GiB file vs a tiny-data file with the same names
 *   bench_io header DIR [--keep]
 *                         open of a 100,000-tensor (~10 MB header) file
 *   bench_io profile OP DIR [ITERS]
 *                         one operation in a loop, for perf / callgrind
 *
 * Every mode is meant to run as its own process so that its peak RSS
 * (getrusage ru_maxrss) is its own.  Results are printed as human-readable
 * lines and as machine-readable lines starting with "@@ " (one JSON object
 * each) that bench/report.py turns into the results table.
 *
 * The 1 GiB state is 64 F32 tensors: 48 matrices [rows, 1024] whose rows
 * sum to 262,144 (exactly 1 GiB), plus 16 small vectors of 256..4096
 * elements (~136 KiB).  bench_torch.py builds the same shapes.
 */
#include "shardsafe.h"
#include "common/internal.h" /* shs__utf8_check, for the header breakdown */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define N_TENSORS 64
#define TOTAL_ROWS 262144u /* x 1024 floats x 4 bytes = 1 GiB */
#define REPS 5             /* best of REPS: the machine may be shared */

/* ------------------------------------------------------------------ */
/* helpers                                                            */
/* ------------------------------------------------------------------ */

static const char *g_mode = "";

#define BENCH_NAME "bench_io"
#include "benchutil.h"

static double g_cpu0, g_last_cpu; /* CPU seconds of the last tic..toc */

static double tic(void)
{
    g_cpu0 = cpu_now();
    return now();
}

static double toc(double t0)
{
    double t = now() - t0;
    g_last_cpu = cpu_now() - g_cpu0;
    return t;
}

static void pread_full(int fd, void *buf, size_t n, off_t off)
{
    char *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            die("pread", 1);
        }
        if (r == 0) {
            fprintf(stderr, "bench_io: unexpected end of file\n");
            exit(1);
        }
        p += r;
        n -= (size_t)r;
        off += r;
    }
}

/* VmHWM can be reset (Linux >= 4.0: "5" to clear_refs), unlike ru_maxrss:
   used for the peak RSS of one phase within a mode. */
static void hwm_reset(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
}

static double hwm_mib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0)
            kb = strtod(line + 6, NULL);
    if (f)
        fclose(f);
    return kb / 1024.0;
}

static void touch(void *p, size_t n, int byte)
{
    memset(p, byte, n); /* pre-fault */
}

/* ------------------------------------------------------------------ */
/* the 1 GiB state                                                    */
/* ------------------------------------------------------------------ */

typedef struct btensor {
    char name[64];
    size_t ndim;
    uint64_t shape[2];
    size_t nbytes;
    float *data;
} btensor;

typedef struct state {
    btensor t[N_TENSORS];
    size_t total;
} state;

static void make_state(state *s, int fill)
{
    unsigned rows_left = TOTAL_ROWS;
    s->total = 0;
    uint32_t x = 2463534242u;
    for (int i = 0; i < N_TENSORS; i++) {
        btensor *t = &s->t[i];
        size_t numel = model_tensor(i, N_TENSORS, TOTAL_ROWS, &rows_left, t->name, sizeof t->name,
                                    &t->ndim, t->shape);
        t->nbytes = numel * 4;
        s->total += t->nbytes;
        t->data = NULL;
        if (fill) {
            t->data = xmalloc(t->nbytes);
            /* non-zero floats in [1, 2): every page is real */
            for (size_t k = 0; k < numel; k++) {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                uint32_t bits = 0x3f800000u | (x >> 9);
                memcpy(&t->data[k], &bits, 4);
            }
        }
    }
}

static void free_state(state *s)
{
    for (int i = 0; i < N_TENSORS; i++)
        free(s->t[i].data);
}

static void views_of(shs_tensor_view *v, const state *s, int tiny)
{
    static const uint64_t one[2] = { 1, 1 };
    for (int i = 0; i < N_TENSORS; i++) {
        v[i].name = s->t[i].name;
        v[i].dtype = SHS_F32;
        v[i].ndim = s->t[i].ndim;
        v[i].shape = tiny ? one : s->t[i].shape;
        v[i].data = s->t[i].data;
    }
}

/* File order of the state's tensors: order[k] = index in s of the k-th
   tensor of the file, plus its byte offset from the start of the file. */
static void file_order(const char *path, const state *s, int *order, uint64_t *file_off,
                       uint64_t *data_start)
{
    shs_file *f;
    CHECK(shs_file_open(&f, path, NULL));
    if (shs_file_tensor_count(f) != N_TENSORS) {
        fprintf(stderr, "bench_io: %s has %zu tensors\n", path, shs_file_tensor_count(f));
        exit(1);
    }
    *data_start = shs_file_data_start(f);
    for (size_t k = 0; k < N_TENSORS; k++) {
        const shs_tensor_info *ti = shs_file_tensor(f, k);
        int found = -1;
        for (int i = 0; i < N_TENSORS; i++)
            if (strcmp(s->t[i].name, ti->name) == 0)
                found = i;
        if (found < 0 || ti->nbytes != s->t[found].nbytes) {
            fprintf(stderr, "bench_io: tensor %s does not match\n", ti->name);
            exit(1);
        }
        order[k] = found;
        file_off[k] = *data_start + ti->offset;
    }
    shs_file_free(f);
}

/* ------------------------------------------------------------------ */
/* write                                                              */
/* ------------------------------------------------------------------ */

/* The same bytes as the shardsafe file (8-byte length + header, then each
   tensor in file order), one write(2) per buffer the caller holds. */
static double write_baseline(const char *path, const char *prefix, size_t prefix_len,
                             const state *s, const int *order, int do_fsync, int prealloc)
{
    double t0 = tic();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        die("open", 1);
    /* diagnostic: reserve the extents first, as numpy's tofile does
       (fallocate KEEP_SIZE), which spares ext4 its per-page delayed
       allocation work */
    if (prealloc && fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)(prefix_len + s->total)) != 0)
        die("fallocate", 1);
    write_full(fd, prefix, prefix_len);
    for (int k = 0; k < N_TENSORS; k++)
        write_full(fd, s->t[order[k]].data, s->t[order[k]].nbytes);
    if (do_fsync && fsync(fd) != 0)
        die("fsync", 1);
    if (close(fd) != 0)
        die("close", 1);
    return toc(t0);
}

static double write_shs(const char *path, const shs_tensor_view *v, int do_fsync)
{
    shs_writer_opts o = SHS_WRITER_OPTS_INIT;
    o.fsync = do_fsync;
    double t0 = tic();
    CHECK(shs_save_file(path, v, N_TENSORS, NULL, 0, &o));
    return toc(t0);
}

/* Byte comparison through pread with small buffers, so that it adds
   nothing to the peak RSS of the write mode (a mapping would count). */
static void files_equal(const char *a, const char *b)
{
    enum {
        CHUNK = 8 << 20
    };
    int fa = open(a, O_RDONLY | O_CLOEXEC), fb = open(b, O_RDONLY | O_CLOEXEC);
    struct stat sa, sb;
    if (fa < 0 || fb < 0 || fstat(fa, &sa) || fstat(fb, &sb))
        die("open for compare", 1);
    int same = sa.st_size == sb.st_size;
    char *ba = xmalloc(CHUNK), *bb = xmalloc(CHUNK);
    for (off_t off = 0; same && off < sa.st_size; off += CHUNK) {
        size_t n = sa.st_size - off < CHUNK ? (size_t)(sa.st_size - off) : CHUNK;
        pread_full(fa, ba, n, off);
        pread_full(fb, bb, n, off);
        same = memcmp(ba, bb, n) == 0;
    }
    free(ba);
    free(bb);
    close(fa);
    close(fb);
    if (!same) {
        fprintf(stderr, "bench_io: baseline file differs from the shardsafe file\n");
        exit(1);
    }
}

static int mode_write(const char *dir)
{
    state s;
    make_state(&s, 1);
    shs_tensor_view v[N_TENSORS];
    views_of(v, &s, 0);
    char *p_shs = path_in(dir, "bench_write.safetensors");
    char *p_base = path_in(dir, "bench_write_baseline.bin");
    int order[N_TENSORS];
    uint64_t off[N_TENSORS], data_start;

    /* One untimed round: learn the file layout and check that the baseline
       writes exactly the same bytes. */
    write_shs(p_shs, v, 0);
    file_order(p_shs, &s, order, off, &data_start);
    char *prefix = xmalloc(data_start);
    {
        int fd = open(p_shs, O_RDONLY);
        if (fd < 0)
            die("open", 1);
        pread_full(fd, prefix, data_start, 0);
        close(fd);
    }
    write_baseline(p_base, prefix, data_start, &s, order, 0, 0);
    files_equal(p_shs, p_base);
    /* GB/s everywhere = tensor payload bytes / time (both sides write the
       same file, so the ratio is the same with file bytes) */
    double bytes = (double)s.total;
    printf("write: %d tensors, %zu payload bytes, %" PRIu64 " bytes per file (header %" PRIu64
           " bytes), baseline output verified byte-identical\n",
           N_TENSORS, s.total, data_start + s.total, data_start - 8);
    result("bytes", bytes, "B", "tensor payload bytes");
    result("file_bytes", (double)(data_start + s.total), "B", "file size");

    for (int fs = 0; fs <= 1; fs++) {
        double tb[REPS], ts[REPS], cb[REPS], cs[REPS], tf[REPS];
        for (int r = 0; r < REPS; r++) {
            /* every run starts from a fresh file and no dirty page cache */
            unlink(p_shs);
            unlink(p_base);
            sync();
            tb[r] = write_baseline(p_base, prefix, data_start, &s, order, fs, 0);
            cb[r] = g_last_cpu;
            unlink(p_base);
            sync();
            tf[r] = write_baseline(p_base, prefix, data_start, &s, order, fs, 1);
            unlink(p_shs);
            unlink(p_base);
            sync();
            ts[r] = write_shs(p_shs, v, fs);
            cs[r] = g_last_cpu;
        }
        double gb = bytes / best_of(tb, REPS) / 1e9, gs = bytes / best_of(ts, REPS) / 1e9;
        const char *tag = fs ? "fsync" : "nofsync";
        printf("write %-8s write(2) baseline: best %.3f s  %.2f GB/s (median %.3f s)\n", tag,
               best_of(tb, REPS), gb, median_of(tb, REPS));
        printf("write %-8s shs_save_file    : best %.3f s  %.2f GB/s (median %.3f s)  "
               "ratio shs/write(2) = %.3f\n",
               tag, best_of(ts, REPS), gs, median_of(ts, REPS), gs / gb);
        char key[64];
        snprintf(key, sizeof key, "base_%s", tag);
        result(key, gb, "GB/s", fs ? "write(2) + fsync" : "write(2)");
        snprintf(key, sizeof key, "shs_%s", tag);
        result(key, gs, "GB/s", fs ? "shs_save_file, opts.fsync=1" : "shs_save_file");
        snprintf(key, sizeof key, "shs_%s_median_s", tag);
        result(key, median_of(ts, REPS), "s", "median time");
        snprintf(key, sizeof key, "base_%s_median_s", tag);
        result(key, median_of(tb, REPS), "s", "median time");
        double gf = bytes / best_of(tf, REPS) / 1e9;
        printf("write %-8s diagnostic: write(2) after fallocate(KEEP_SIZE): %.2f GB/s, "
               "%.3f x write(2) alone\n",
               tag, gf, gf / gb);
        snprintf(key, sizeof key, "base_falloc_%s", tag);
        result(key, gf, "GB/s", "write(2) after fallocate of the whole file (diagnostic)");
        snprintf(key, sizeof key, "cpu_ratio_%s", tag);
        result(key, best_of(cb, REPS) / best_of(cs, REPS), "",
               "ratio of best CPU times, baseline / shardsafe");
        printf("write %-8s best CPU time: write(2) %.3f s, shs_save_file %.3f s  "
               "ratio %.3f\n",
               tag, best_of(cb, REPS), best_of(cs, REPS), best_of(cb, REPS) / best_of(cs, REPS));
    }
    unlink(p_shs);
    unlink(p_base);
    free(prefix);
    free(p_shs);
    free(p_base);
    free_state(&s);
    peak_rss();
    return 0;
}

/* ------------------------------------------------------------------ */
/* read                                                               */
/* ------------------------------------------------------------------ */

static double read_memcpy(const state *s, float *const *dst, const int *order)
{
    double t0 = tic();
    for (int k = 0; k < N_TENSORS; k++)
        memcpy(dst[order[k]], s->t[order[k]].data, s->t[order[k]].nbytes);
    return toc(t0);
}

static double read_shs(const char *path, unsigned flags, const state *s, float *const *dst,
                       const int *order)
{
    shs_open_opts o = SHS_OPEN_OPTS_INIT;
    o.flags = flags;
    double t0 = tic();
    shs_file *f;
    CHECK(shs_file_open(&f, path, &o));
    for (size_t k = 0; k < N_TENSORS; k++)
        CHECK(shs_file_read(f, k, dst[order[k]], s->t[order[k]].nbytes));
    shs_file_free(f);
    return toc(t0);
}

/* Into buffers allocated inside the timed region (allocation and first-touch
   page faults included): what torch.load / np.load users get in a fresh
   process. */
/* Fresh memory for the "into new memory" variants: an anonymous mapping of
   its own, so that every run first-touches new pages whatever the state of
   malloc (glibc recycles freed heap memory once its dynamic mmap threshold
   has grown, which would make some runs fault and others not).  No huge
   pages: on this VM, fresh huge pages mostly measure the hypervisor backing
   guest memory (clear_page_erms at ~1.5 GB/s), not the copy. */
static void *alloc_dst(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        die("mmap (anonymous)", 1);
    return p;
}

static void free_dst(void *p, size_t n)
{
    munmap(p, n);
}

static double read_shs_alloc(const char *path, unsigned flags, const state *s, const int *order)
{
    float *dst[N_TENSORS];
    shs_open_opts o = SHS_OPEN_OPTS_INIT;
    o.flags = flags;
    double t0 = tic();
    shs_file *f;
    CHECK(shs_file_open(&f, path, &o));
    for (size_t k = 0; k < N_TENSORS; k++) {
        size_t n = s->t[order[k]].nbytes;
        dst[order[k]] = alloc_dst(n);
        CHECK(shs_file_read(f, k, dst[order[k]], n));
    }
    shs_file_free(f);
    double t = toc(t0);
    for (int i = 0; i < N_TENSORS; i++)
        free_dst(dst[i], s->t[i].nbytes);
    return t;
}

static double read_memcpy_alloc(const state *s, const int *order)
{
    float *dst[N_TENSORS];
    double t0 = tic();
    for (int k = 0; k < N_TENSORS; k++) {
        size_t n = s->t[order[k]].nbytes;
        dst[order[k]] = alloc_dst(n);
        memcpy(dst[order[k]], s->t[order[k]].data, n);
    }
    double t = toc(t0);
    for (int i = 0; i < N_TENSORS; i++)
        free_dst(dst[i], s->t[i].nbytes);
    return t;
}

/* Second pass over a mapping whose pages are already faulted in: the copy
   alone, without page-fault and unmap costs (diagnostic). */
static double read_shs_hot(const char *path, const state *s, float *const *dst, const int *order)
{
    shs_file *f;
    CHECK(shs_file_open(&f, path, NULL));
    if (!shs_file_tensor_data(f, 0)) {
        fprintf(stderr, "bench_io: file is not mapped\n");
        exit(1);
    }
    for (size_t k = 0; k < N_TENSORS; k++)
        CHECK(shs_file_read(f, k, dst[order[k]], s->t[order[k]].nbytes));
    double t0 = tic();
    for (size_t k = 0; k < N_TENSORS; k++)
        CHECK(shs_file_read(f, k, dst[order[k]], s->t[order[k]].nbytes));
    double t = toc(t0);
    shs_file_free(f);
    return t;
}

static double read_raw_pread(const char *path, const state *s, float *const *dst, const int *order,
                             const uint64_t *off)
{
    double t0 = tic();
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        die("open", 1);
    for (int k = 0; k < N_TENSORS; k++)
        pread_full(fd, dst[order[k]], s->t[order[k]].nbytes, (off_t)off[k]);
    close(fd);
    return toc(t0);
}

/* Raw mmap + memcpy, optionally with MAP_POPULATE (diagnostic: what the
   mmap path costs without the library, and what pre-populating gives). */
static double read_raw_mmap(const char *path, int populate, const state *s, float *const *dst,
                            const int *order, const uint64_t *off)
{
    double t0 = tic();
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st))
        die("open", 1);
    char *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | (populate ? MAP_POPULATE : 0),
                   fd, 0);
    if (m == MAP_FAILED)
        die("mmap", 1);
    for (int k = 0; k < N_TENSORS; k++)
        memcpy(dst[order[k]], m + off[k], s->t[order[k]].nbytes);
    munmap(m, (size_t)st.st_size);
    close(fd);
    return toc(t0);
}

static void time_open(const char *path, unsigned flags, int reps, double *best, double *med)
{
    double t[64];
    shs_open_opts o = SHS_OPEN_OPTS_INIT;
    o.flags = flags;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        shs_file *f;
        CHECK(shs_file_open(&f, path, &o));
        shs_file_free(f);
        t[r] = now() - t0;
    }
    *best = best_of(t, reps);
    *med = median_of(t, reps);
}

static int mode_read(const char *dir)
{
    state s;
    make_state(&s, 1);
    shs_tensor_view v[N_TENSORS];
    views_of(v, &s, 0);
    char *p = path_in(dir, "bench_read.safetensors");
    char *p_tiny = path_in(dir, "bench_read_tiny.safetensors");
    CHECK(shs_save_file(p, v, N_TENSORS, NULL, 0, NULL));
    views_of(v, &s, 1);
    CHECK(shs_save_file(p_tiny, v, N_TENSORS, NULL, 0, NULL));
    int order[N_TENSORS];
    uint64_t off[N_TENSORS], data_start;
    file_order(p, &s, order, off, &data_start);
    double bytes = (double)s.total; /* tensor bytes copied per pass */
    result("bytes", bytes, "B", "tensor bytes copied per pass");

    float *dst[N_TENSORS];
    for (int i = 0; i < N_TENSORS; i++) {
        dst[i] = xmalloc(s.t[i].nbytes);
        touch(dst[i], s.t[i].nbytes, 0xA5);
    }
    /* warm the page cache, and check the data once */
    read_shs(p, SHS_OPEN_NO_MMAP, &s, dst, order);
    for (int i = 0; i < N_TENSORS; i++)
        if (memcmp(dst[i], s.t[i].data, s.t[i].nbytes) != 0) {
            fprintf(stderr, "bench_io: tensor %s read back wrong\n", s.t[i].name);
            exit(1);
        }
    read_shs(p, 0, &s, dst, order);
    for (int i = 0; i < N_TENSORS; i++)
        if (memcmp(dst[i], s.t[i].data, s.t[i].nbytes) != 0) {
            fprintf(stderr, "bench_io: tensor %s read back wrong (mmap)\n", s.t[i].name);
            exit(1);
        }

    /* (c) open cost: 1 GiB file vs same names with tiny data */
    {
        struct stat st_big, st_tiny;
        stat(p, &st_big);
        stat(p_tiny, &st_tiny);
        double bb, bm, nb, nm, tb, tm;
        time_open(p, 0, 50, &bb, &bm);
        time_open(p, SHS_OPEN_NO_MMAP, 50, &nb, &nm);
        time_open(p_tiny, 0, 50, &tb, &tm);
        printf("open+close %s (%lld bytes): best %.1f us, median %.1f us\n", p,
               (long long)st_big.st_size, bb * 1e6, bm * 1e6);
        printf("open+close same, NO_MMAP          : best %.1f us, median %.1f us\n", nb * 1e6,
               nm * 1e6);
        printf("open+close %s (%lld bytes, same names): best %.1f us, median %.1f us  "
               "ratio big/tiny = %.2f\n",
               p_tiny, (long long)st_tiny.st_size, tb * 1e6, tm * 1e6, bm / tm);
        result("open_big_us", bb * 1e6, "us", "shs_file_open+close, 1 GiB file (best of 50)");
        result("open_big_median_us", bm * 1e6, "us", "median of 50");
        result("open_big_nommap_us", nb * 1e6, "us", "NO_MMAP, best of 50");
        result("open_tiny_us", tb * 1e6, "us", "same names, tiny data (best of 50)");
        result("open_tiny_median_us", tm * 1e6, "us", "median of 50");
        result("open_file_bytes", (double)st_big.st_size, "B", "");
        result("open_tiny_bytes", (double)st_tiny.st_size, "B", "");
    }

    /* peak RSS of one pass of each path, over the 2 GiB of source + dst */
    {
        hwm_reset();
        double base = hwm_mib();
        read_shs(p, SHS_OPEN_NO_MMAP, &s, dst, order);
        double rp = hwm_mib();
        hwm_reset();
        read_shs(p, 0, &s, dst, order);
        double rm = hwm_mib();
        printf("peak RSS during one read pass: before %.0f MiB, pread path %.0f MiB, "
               "mmap path %.0f MiB (mapped file pages count in RSS)\n",
               base, rp, rm);
        result("rss_before_read_mib", base, "MiB", "VmHWM with state + dst allocated");
        result("rss_pread_pass_mib", rp, "MiB", "VmHWM during a pread-path pass");
        result("rss_mmap_pass_mib", rm, "MiB", "VmHWM during an mmap-path pass");
    }

    enum {
        MEMCPY,
        SHS_MMAP,
        SHS_PREAD,
        RAW_PREAD,
        SHS_HOT,
        RAW_MMAP,
        RAW_POPULATE,
        SHS_MMAP_ALLOC,
        SHS_PREAD_ALLOC,
        MEMCPY_ALLOC,
        NV
    };
    static const char *const key[NV] = {
        "memcpy",   "shs_mmap",          "shs_pread",      "raw_pread",       "shs_mmap_hot",
        "raw_mmap", "raw_mmap_populate", "shs_mmap_alloc", "shs_pread_alloc", "memcpy_alloc"
    };
    static const char *const label[NV] = {
        "memcpy between pre-faulted buffers",
        "shs_file_open + shs_file_read all + close (mmap path)",
        "same with SHS_OPEN_NO_MMAP (pread path)",
        "raw open + pread of each tensor (no library)",
        "shs_file_read, 2nd pass on an already faulted mapping",
        "raw mmap + memcpy + munmap (no library)",
        "raw mmap(MAP_POPULATE) + memcpy + munmap (no library)",
        "mmap path into fresh buffers allocated in the timed region (faults included)",
        "pread path into fresh buffers allocated in the timed region (faults included)",
        "memcpy into fresh buffers allocated in the timed region (faults included)",
    };
    double t[NV][REPS], c[NV][REPS];
#define RUN(i, call)                                                                               \
    do {                                                                                           \
        t[i][r] = (call);                                                                          \
        c[i][r] = g_last_cpu;                                                                      \
    } while (0)
    for (int r = 0; r < REPS; r++) {
        RUN(MEMCPY, read_memcpy(&s, dst, order));
        RUN(SHS_MMAP, read_shs(p, 0, &s, dst, order));
        RUN(SHS_PREAD, read_shs(p, SHS_OPEN_NO_MMAP, &s, dst, order));
        RUN(RAW_PREAD, read_raw_pread(p, &s, dst, order, off));
        RUN(SHS_HOT, read_shs_hot(p, &s, dst, order));
        RUN(RAW_MMAP, read_raw_mmap(p, 0, &s, dst, order, off));
        RUN(RAW_POPULATE, read_raw_mmap(p, 1, &s, dst, order, off));
    }
    /* without the preallocated buffers, so that the peak RSS of the mode
       stays source + one destination + the mapping */
    for (int i = 0; i < N_TENSORS; i++) {
        free(dst[i]);
        dst[i] = NULL;
    }
    for (int r = 0; r < REPS; r++) {
        RUN(SHS_MMAP_ALLOC, read_shs_alloc(p, 0, &s, order));
        RUN(SHS_PREAD_ALLOC, read_shs_alloc(p, SHS_OPEN_NO_MMAP, &s, order));
        RUN(MEMCPY_ALLOC, read_memcpy_alloc(&s, order));
    }
    double gbs[NV];
    for (int i = 0; i < NV; i++)
        gbs[i] = bytes / best_of(t[i], REPS) / 1e9;
    for (int i = 0; i < NV; i++) {
        int base = i >= SHS_MMAP_ALLOC ? MEMCPY_ALLOC : MEMCPY;
        printf("read %-19s best %.3f s %6.2f GB/s (median %.3f s)  ratio vs %s %.3f "
               "(by CPU time %.3f)  -- %s\n",
               key[i], best_of(t[i], REPS), gbs[i], median_of(t[i], REPS), key[base],
               gbs[i] / gbs[base], best_of(c[base], REPS) / best_of(c[i], REPS), label[i]);
        result(key[i], gbs[i], "GB/s", label[i]);
        char k[64];
        snprintf(k, sizeof k, "%s_median_s", key[i]);
        result(k, median_of(t[i], REPS), "s", "median time");
        snprintf(k, sizeof k, "%s_cpu", key[i]);
        result(k, bytes / best_of(c[i], REPS) / 1e9, "GB/s", "payload / best CPU time");
    }
#undef RUN
    if (gbs[SHS_MMAP] < gbs[SHS_PREAD])
        printf("NOTE: the mmap path (%.2f GB/s) is SLOWER than the pread path (%.2f GB/s) "
               "for whole-tensor reads into caller memory (%.2fx); a fresh mapping pays page "
               "faults and the munmap; a 2nd pass over the faulted mapping copies at "
               "%.2f GB/s.\n",
               gbs[SHS_MMAP], gbs[SHS_PREAD], gbs[SHS_PREAD] / gbs[SHS_MMAP], gbs[SHS_HOT]);
    else
        printf("NOTE: the mmap path (%.2f GB/s) is not slower than the pread path "
               "(%.2f GB/s) for whole-tensor reads.\n",
               gbs[SHS_MMAP], gbs[SHS_PREAD]);
    result("mmap_slower_than_pread", gbs[SHS_MMAP] < gbs[SHS_PREAD], "bool",
           "mmap path slower than pread path");

    for (int i = 0; i < N_TENSORS; i++)
        free(dst[i]);
    unlink(p);
    unlink(p_tiny);
    free(p);
    free(p_tiny);
    free_state(&s);
    peak_rss();
    return 0;
}

/* ------------------------------------------------------------------ */
/* header                                                             */
/* ------------------------------------------------------------------ */

#define HDR_TENSORS 100000
#define HDR_REPS 10

static int mode_header(const char *dir, int keep)
{
    static const shs_dtype dts[] = { SHS_F32, SHS_BF16, SHS_F16,  SHS_F64,     SHS_I64,
                                     SHS_I32, SHS_U8,   SHS_BOOL, SHS_F8_E4M3, SHS_I16 };
    static const char *const kinds[] = { "mlp.weight", "mlp.bias", "attn.q.weight",
                                         "attn.kv.weight", "ln.weight" };
    const size_t ndt = sizeof dts / sizeof dts[0];
    shs_tensor_view *v = xmalloc(HDR_TENSORS * sizeof *v);
    uint64_t *shapes = xmalloc(HDR_TENSORS * 3 * sizeof *shapes);
    char *names = xmalloc((size_t)HDR_TENSORS * 48);
    static uint8_t data[8 * 4 * 4 * 2];
    memset(data, 0x3c, sizeof data);
    for (size_t i = 0; i < HDR_TENSORS; i++) {
        char *nm = names + i * 48;
        /* mostly "model.layers.{i}.mlp.weight", a few other suffixes */
        snprintf(nm, 48, "model.layers.%zu.%s", i, kinds[(i / 7) % 5 == 4 ? (i % 5) : 0]);
        uint64_t *sh = shapes + 3 * i;
        size_t nd = 2 + (i % 3 == 0);
        sh[0] = 1 + i % 4;
        sh[1] = 1 + (i / 4) % 4;
        sh[2] = 1 + (i / 16) % 2;
        v[i].name = nm;
        v[i].dtype = dts[i % ndt];
        v[i].ndim = nd;
        v[i].shape = sh;
        v[i].data = data;
    }
    char *p = path_in(dir, "bench_header_100k.safetensors");
    double t0 = now();
    CHECK(shs_save_file(p, v, HDR_TENSORS, NULL, 0, NULL));
    double t_write = now() - t0;

    /* whole file in memory, for the no-I/O variant */
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st))
        die("open", 1);
    char *img = xmalloc((size_t)st.st_size);
    pread_full(fd, img, (size_t)st.st_size, 0);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | (uint8_t)img[i];

    shs_file *f;
    CHECK(shs_file_open(&f, p, NULL));
    if (shs_file_tensor_count(f) != HDR_TENSORS) {
        fprintf(stderr, "bench_io: %zu tensors in the header file\n", shs_file_tensor_count(f));
        exit(1);
    }
    shs_file_free(f);

    enum {
        OPEN,
        OPEN_MEM,
        PREAD_HDR,
        UTF8,
        NV
    };
    static const char *const key[NV] = { "hdr_open", "hdr_open_memory", "hdr_pread", "hdr_utf8" };
    static const char *const label[NV] = {
        "shs_file_open + shs_file_free",
        "shs_file_open_memory + close (file image already in memory: no I/O)",
        "pread of the header bytes alone (I/O floor)",
        "UTF-8 check of the header alone (shs__utf8_check)",
    };
    double t[NV][HDR_REPS], c[NV][HDR_REPS];
    char *hbuf = xmalloc(hlen);
    for (int r = 0; r < HDR_REPS; r++) {
        double a = tic();
        CHECK(shs_file_open(&f, p, NULL));
        shs_file_free(f);
        t[OPEN][r] = toc(a);
        c[OPEN][r] = g_last_cpu;
        a = tic();
        CHECK(shs_file_open_memory(&f, img, (size_t)st.st_size, p));
        shs_file_free(f);
        t[OPEN_MEM][r] = toc(a);
        c[OPEN_MEM][r] = g_last_cpu;
        a = tic();
        pread_full(fd, hbuf, hlen, 8);
        t[PREAD_HDR][r] = toc(a);
        c[PREAD_HDR][r] = g_last_cpu;
        a = tic();
        volatile size_t ok = shs__utf8_check((const unsigned char *)hbuf, hlen);
        t[UTF8][r] = toc(a);
        c[UTF8][r] = g_last_cpu;
        if (ok != hlen) {
            fprintf(stderr, "bench_io: header is not UTF-8?\n");
            exit(1);
        }
    }
    close(fd);
    printf("header file: %d tensors, header %" PRIu64 " bytes, file %lld bytes, "
           "written by shs_save_file in %.1f ms\n",
           HDR_TENSORS, hlen, (long long)st.st_size, t_write * 1e3);
    result("hdr_tensors", HDR_TENSORS, "", "tensors");
    result("hdr_bytes", (double)hlen, "B", "header length");
    result("hdr_write_ms", t_write * 1e3, "ms", "shs_save_file of the 100k-tensor file (once)");
    for (int i = 0; i < NV; i++) {
        char k[64];
        printf("header %-16s best %8.2f ms  median %8.2f ms  (CPU median %8.2f ms)  -- %s\n",
               key[i], best_of(t[i], HDR_REPS) * 1e3, median_of(t[i], HDR_REPS) * 1e3,
               median_of(c[i], HDR_REPS) * 1e3, label[i]);
        snprintf(k, sizeof k, "%s_ms", key[i]);
        result(k, best_of(t[i], HDR_REPS) * 1e3, "ms", label[i]);
        snprintf(k, sizeof k, "%s_median_ms", key[i]);
        result(k, median_of(t[i], HDR_REPS) * 1e3, "ms", label[i]);
        snprintf(k, sizeof k, "%s_cpu_median_ms", key[i]);
        result(k, median_of(c[i], HDR_REPS) * 1e3, "ms", "CPU time, median");
    }
    if (keep) {
        printf("kept %s for the Python json.loads baseline\n", p);
    } else {
        unlink(p);
    }
    free(hbuf);
    free(img);
    free(p);
    free(v);
    free(shapes);
    free(names);
    peak_rss();
    return 0;
}

/* ------------------------------------------------------------------ */
/* profile: one operation in a loop, for perf record / callgrind        */
/* ------------------------------------------------------------------ */

static int mode_profile(const char *what, const char *dir, int iters)
{
    if (strcmp(what, "header") == 0) {
        /* reuse the header mode's file: build it, then open it in a loop */
        char *p = path_in(dir, "bench_header_100k.safetensors");
        struct stat st;
        if (stat(p, &st) != 0) {
            fprintf(stderr, "bench_io profile header: run 'bench_io header %s --keep' first\n",
                    dir);
            return 1;
        }
        double t0 = now();
        for (int i = 0; i < iters; i++) {
            shs_file *f;
            CHECK(shs_file_open(&f, p, NULL));
            shs_file_free(f);
        }
        printf("%d opens: %.2f ms each\n", iters, (now() - t0) / iters * 1e3);
        free(p);
        return 0;
    }
    state s;
    make_state(&s, 1);
    shs_tensor_view v[N_TENSORS];
    views_of(v, &s, 0);
    char *p = path_in(dir, "bench_profile.safetensors");
    CHECK(shs_save_file(p, v, N_TENSORS, NULL, 0, NULL));
    int order[N_TENSORS];
    uint64_t off[N_TENSORS], data_start;
    file_order(p, &s, order, off, &data_start);
    float *dst[N_TENSORS];
    for (int i = 0; i < N_TENSORS; i++) {
        dst[i] = xmalloc(s.t[i].nbytes);
        touch(dst[i], s.t[i].nbytes, 0xA5);
    }
    double t0 = now();
    for (int i = 0; i < iters; i++) {
        if (strcmp(what, "pread") == 0)
            read_shs(p, SHS_OPEN_NO_MMAP, &s, dst, order);
        else if (strcmp(what, "mmap") == 0)
            read_shs(p, 0, &s, dst, order);
        else if (strcmp(what, "memcpy") == 0)
            read_memcpy(&s, dst, order);
        else if (strcmp(what, "mmap_alloc") == 0)
            read_shs_alloc(p, 0, &s, order);
        else if (strcmp(what, "pread_alloc") == 0)
            read_shs_alloc(p, SHS_OPEN_NO_MMAP, &s, order);
        else if (strcmp(what, "memcpy_alloc") == 0)
            read_memcpy_alloc(&s, order);
        else if (strcmp(what, "write") == 0) {
            unlink(p);
            write_shs(p, v, 0);
        } else {
            fprintf(stderr, "bench_io profile: unknown operation %s\n", what);
            return 2;
        }
    }
    printf("%d x %s: %.3f s each\n", iters, what, (now() - t0) / iters);
    unlink(p);
    for (int i = 0; i < N_TENSORS; i++)
        free(dst[i]);
    free(p);
    free_state(&s);
    return 0;
}

/* ------------------------------------------------------------------ */

static void usage(void)
{
    fprintf(stderr,
            "usage: bench_io write|read|header [DIR] [--keep]\n"
            "       bench_io profile OP DIR [ITERS]   (one operation in a loop, for perf)\n"
            "         OP: pread mmap memcpy write header mmap_alloc pread_alloc memcpy_alloc\n"
            "  DIR defaults to $TMPDIR or /tmp; needs ~2.2 GiB free for write/read.\n"
            "  --keep (header mode) leaves bench_header_100k.safetensors in DIR.\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    if (strcmp(argv[1], "profile") == 0) {
        if (argc < 4)
            usage();
        g_mode = "profile";
        long iters = argc > 4 ? strtol(argv[4], NULL, 10) : 10;
        return mode_profile(argv[2], argv[3], iters > 0 && iters < 100000 ? (int)iters : 10);
    }
    const char *dir = NULL;
    int keep = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--keep") == 0)
            keep = 1;
        else if (!dir)
            dir = argv[i];
        else
            usage();
    }
    if (!dir) {
        dir = getenv("TMPDIR");
        if (!dir || !*dir)
            dir = "/tmp";
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_mode = argv[1];
    if (strcmp(argv[1], "write") == 0)
        return mode_write(dir);
    if (strcmp(argv[1], "read") == 0)
        return mode_read(dir);
    if (strcmp(argv[1], "header") == 0)
        return mode_header(dir, keep);
    usage();
    return 2;
}
