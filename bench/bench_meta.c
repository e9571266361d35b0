/*
 * bench_meta.c -- time to open (parse and fully validate) a metadata.json,
 * white-box through shs__meta_parse, on one core.
 *
 *   bench_meta ranks [RANKS]       RANKS x 3 files (model, opt, state):
 *                                  4 model + 4 optimizer tensors split
 *                                  along dim 0 over every rank, 1 tensor
 *                                  replicated on every rank, 1 blob per
 *                                  rank.  Default 16,384 ranks.
 *   bench_meta overlap [N]         hostile: one tensor of N boxes, each
 *                                  overlapping the next (refused).
 *   bench_meta stagger [N]         hostile: N disjoint boxes laid like
 *                                  bricks (each row shifted), valid, so
 *                                  that no small grid exists and the sweep
 *                                  runs: its worst realistic shape.
 *
 * Each prints the metadata.json size, the parse time and whether it was
 * accepted, plus a "@@ {json}" line for bench/report.py.  The data files
 * are not written: parsing does not open them.
 */
#include "internal.h"
#include "meta.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static void put(sbuf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        b->cap = b->cap ? b->cap * 2 : 1u << 20;
        if (!(b->p = realloc(b->p, b->cap))) {
            fprintf(stderr, "bench_meta: out of memory\n");
            exit(1);
        }
    }
}

static const char HX[] = "0123456789abcdef";

static void header(sbuf *b, int ranks)
{
    put(b, "{\n\"format\":\"shardsafe.checkpoint\",\n\"version\":2,\n\"step\":1,\n"
           "\"world_size\":%d,\n\"common_xxh3\":\"%s\",\n", ranks, HX);
}

static void chunk(sbuf *b, int first, const char *name, uint64_t r0, uint64_t rows,
                  uint64_t c0, uint64_t cols, long file, uint64_t bytes)
{
    put(b, "%s{\"offset\":[%llu,%llu],\"shape\":[%llu,%llu],\"file\":%ld,\"key\":\"%s\","
           "\"byte_range\":[128,%llu],\"xxh3\":\"%s\"}", first ? "" : ",",
        (unsigned long long)r0, (unsigned long long)c0, (unsigned long long)rows,
        (unsigned long long)cols, file, name, (unsigned long long)(128 + bytes), HX);
}

static void gen_ranks(sbuf *b, int ranks)
{
    header(b, ranks);
    put(b, "\"files\":[");
    static const char *const kinds[3] = { "model", "opt", "state" };
    for (int r = 0; r < ranks; r++)
        for (int k = 0; k < 3; k++)
            put(b, "%s{\"name\":\"checkpoint-%s-%07d-%07d.safetensors\",\"rank\":%d,"
                   "\"size\":4096,\"header_xxh3\":\"%s\"}", r || k ? "," : "", kinds[k], r,
                ranks, r, HX);
    put(b, "],\n\"tensors\":{");
    for (int t = 0; t < 9; t++) {
        char name[32];
        int opt = t >= 4 && t < 8, repl = t == 8;
        snprintf(name, sizeof name, "%s.%d", opt ? "optimizer" : "model", t);
        uint64_t rows = repl ? 64 : (uint64_t)ranks * 2;
        put(b, "%s\"%s\":{\"kind\":\"%s\",\"dtype\":\"F32\",\"shape\":[%llu,64],\"chunks\":[",
            t ? "," : "", name, opt ? "opt" : "model", (unsigned long long)rows);
        for (int r = 0; r < ranks; r++)
            chunk(b, r == 0, name, repl ? 0 : (uint64_t)r * 2, repl ? 64 : 2, 0, 64,
                  3L * r + opt, (repl ? 64 : 2) * 64 * 4);
        put(b, "]}");
    }
    put(b, "},\n\"blobs\":[");
    for (int r = 0; r < ranks; r++)
        put(b, "%s{\"name\":\"rng\",\"rank\":%d,\"file\":%d,\"key\":\"rng\","
               "\"byte_range\":[128,144],\"xxh3\":\"%s\"}", r ? "," : "", r, 3 * r + 2, HX);
    put(b, "]\n}");
}

/* One tensor [rows, width] cut into n boxes on one file of rank 0. */
static void gen_boxes(sbuf *b, long n, int stagger)
{
    long rows = 1;
    while (rows * rows < n)
        rows++;
    long per = (n + rows - 1) / rows, width = per * 16;
    long total_rows = stagger ? rows : n + 1;
    header(b, 1);
    put(b, "\"files\":[{\"name\":\"checkpoint-model-0000000-0000001.safetensors\",\"rank\":0,"
           "\"size\":4096,\"header_xxh3\":\"%s\"}],\n\"tensors\":{\"t\":{\"kind\":\"model\","
           "\"dtype\":\"F32\",\"shape\":[%ld,%ld],\"chunks\":[", HX, total_rows,
        stagger ? width : 16L);
    long k = 0;
    if (stagger) {
        /* row r: a first brick of width 1 + r % 15, then bricks of 16,
           then the rest: disjoint, covering, and no two rows cut alike */
        for (long r = 0; r < rows && k < n; r++) {
            long at = 0, first = 1 + r % 15;
            for (long i = 0; i < per && k < n; i++, k++) {
                long w = i == 0 ? first : i == per - 1 ? width - at : 16;
                chunk(b, k == 0, "t", (uint64_t)r, 1, (uint64_t)at, (uint64_t)w, 0,
                      (uint64_t)w * 4);
                at += w;
            }
        }
    } else {
        for (; k < n; k++) /* rows k and k+1: each box overlaps the next */
            chunk(b, k == 0, "t", (uint64_t)k, 2, 0, 16, 0, 2 * 16 * 4);
    }
    put(b, "]}},\n\"blobs\":[]\n}");
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "ranks";
    long n = argc > 2 ? strtol(argv[2], NULL, 10) : 16384;
    if (n < 1 || n > 100000000) {
        fprintf(stderr, "usage: bench_meta ranks|overlap|stagger [N]\n");
        return 2;
    }
    sbuf b = { 0 };
    if (strcmp(mode, "ranks") == 0)
        gen_ranks(&b, (int)n);
    else if (strcmp(mode, "overlap") == 0 || strcmp(mode, "stagger") == 0)
        gen_boxes(&b, n, mode[0] == 's');
    else {
        fprintf(stderr, "bench_meta: unknown mode '%s'\n", mode);
        return 2;
    }
    size_t len;
    char *sealed = shs__meta_seal(b.p, b.n, &len);
    char root[] = "/tmp/bench-meta-XXXXXX", dir[64], path[96];
    if (!sealed || !mkdtemp(root))
        return 1;
    snprintf(dir, sizeof dir, "%s/iteration_00000001", root);
    snprintf(path, sizeof path, "%s/metadata.json", dir);
    FILE *f = NULL;
    if (mkdir(dir, 0755) != 0 || !(f = fopen(path, "wb")) || fwrite(sealed, 1, len, f) != len)
        return 1;
    fclose(f);
    shs__meta m;
    double t0 = now();
    int rc = shs__meta_parse(&m, dir);
    double dt = now() - t0;
    printf("%s N=%ld: metadata.json %.1f MiB, parsed and validated in %.3f s: %s\n", mode, n,
           (double)len / (1 << 20), dt, rc == SHS_OK ? "accepted" : shs_last_error());
    printf("@@ {\"mode\":\"meta_%s\",\"key\":\"open_%ld\",\"value\":%.4f,\"unit\":\"s\","
           "\"label\":\"open metadata.json (%s, N=%ld, %.1f MiB)\"}\n", mode, n, dt, mode, n,
           (double)len / (1 << 20));
    if (rc == SHS_OK)
        shs__meta_free(&m);
    if (getenv("BENCH_META_KEEP")) printf("kept %s\n", path); else unlink(path);
    rmdir(dir);
    rmdir(root);
    shs__free(sealed);
    free(b.p);
    return 0;
}
