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
 * Each prints the metadata.json size, the open time (best of 3) next to
 * the baseline of jansson's json_loadb of the same bytes (interleaved),
 * whether it was accepted and the peak RSS, plus "@@ {json}" lines for
 * bench/report.py.  The data files are not written: parsing does not open
 * them.
 */
#include "common/internal.h"
#include "source/meta.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_mode[32] = "";

#define BENCH_NAME "bench_meta"
#include "benchutil.h"

#define REPS 3 /* best of REPS: the machine may be shared */

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
    put(b,
        "{\n\"format\":\"shardsafe.checkpoint\",\n\"version\":2,\n\"step\":1,\n"
        "\"world_size\":%d,\n\"common_xxh3\":\"%s\",\n",
        ranks, HX);
}

static void chunk(sbuf *b, int first, const char *name, uint64_t r0, uint64_t rows, uint64_t c0,
                  uint64_t cols, long file, uint64_t bytes)
{
    put(b,
        "%s{\"offset\":[%llu,%llu],\"shape\":[%llu,%llu],\"file\":%ld,\"key\":\"%s\","
        "\"byte_range\":[128,%llu],\"xxh3\":\"%s\"}",
        first ? "" : ",", (unsigned long long)r0, (unsigned long long)c0, (unsigned long long)rows,
        (unsigned long long)cols, file, name, (unsigned long long)(128 + bytes), HX);
}

static void gen_ranks(sbuf *b, int ranks)
{
    header(b, ranks);
    put(b, "\"files\":[");
    static const char *const kinds[3] = { "model", "opt", "state" };
    for (int r = 0; r < ranks; r++)
        for (int k = 0; k < 3; k++)
            put(b,
                "%s{\"name\":\"checkpoint-%s-%07d-%07d.safetensors\",\"rank\":%d,"
                "\"size\":4096,\"header_xxh3\":\"%s\"}",
                r || k ? "," : "", kinds[k], r, ranks, r, HX);
    put(b, "],\n\"tensors\":{");
    for (int t = 0; t < 9; t++) {
        char name[32];
        int opt = t >= 4 && t < 8, repl = t == 8;
        snprintf(name, sizeof name, "%s.%d", opt ? "optimizer" : "model", t);
        uint64_t rows = repl ? 64 : (uint64_t)ranks * 2;
        put(b, "%s\"%s\":{\"kind\":\"%s\",\"dtype\":\"F32\",\"shape\":[%llu,64],\"chunks\":[",
            t ? "," : "", name, opt ? "opt" : "model", (unsigned long long)rows);
        for (int r = 0; r < ranks; r++)
            chunk(b, r == 0, name, repl ? 0 : (uint64_t)r * 2, repl ? 64 : 2, 0, 64, 3L * r + opt,
                  (repl ? 64 : 2) * 64 * 4);
        put(b, "]}");
    }
    put(b, "},\n\"blobs\":[");
    for (int r = 0; r < ranks; r++)
        put(b,
            "%s{\"name\":\"rng\",\"rank\":%d,\"file\":%d,\"key\":\"rng\","
            "\"byte_range\":[128,144],\"xxh3\":\"%s\"}",
            r ? "," : "", r, 3 * r + 2, HX);
    put(b, "]\n}");
}

/* One tensor [rows, width] cut into n boxes on one file of rank 0. */
static void gen_boxes(sbuf *b, long n, int stagger)
{
    long rows = 1;
    while (rows * rows < n)
        rows++;
    long per = (n + rows - 1) / rows, width = per * 16;
    /* rows actually used: the last one may hold fewer bricks */
    long total_rows = stagger ? (n + per - 1) / per : n + 1;
    header(b, 1);
    put(b,
        "\"files\":[{\"name\":\"checkpoint-model-0000000-0000001.safetensors\",\"rank\":0,"
        "\"size\":4096,\"header_xxh3\":\"%s\"}],\n\"tensors\":{\"t\":{\"kind\":\"model\","
        "\"dtype\":\"F32\",\"shape\":[%ld,%ld],\"chunks\":[",
        HX, total_rows, stagger ? width : 16L);
    long k = 0;
    if (stagger) {
        /* row r: a first brick of width 1 + r % 15, then bricks of 16,
           then the rest: disjoint, covering, and no two rows cut alike */
        for (long r = 0; r < total_rows && k < n; r++) {
            long at = 0, first = 1 + r % 15;
            for (long i = 0; i < per && k < n; i++, k++) {
                /* the last brick of a row, also of a short last row, takes
                   the rest so that every row is covered */
                long w = i == per - 1 || k == n - 1 ? width - at : i == 0 ? first : 16;
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
    snprintf(g_mode, sizeof g_mode, "meta_%s", mode);
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
    /* Open = read + parse + validate, best of REPS; baseline, interleaved:
       jansson's json_loadb of the same bytes alone (the parse every open
       must do), so the ratio is what validation and the tables add. */
    double t_open[REPS], t_json[REPS], c_open[REPS];
    int rc = SHS_OK;
    char why[512] = "accepted";
    for (int k = 0; k < REPS; k++) {
        shs__meta m;
        double c0 = cpu_now(), t0 = now();
        rc = shs__meta_parse(&m, dir, 0);
        t_open[k] = now() - t0;
        c_open[k] = cpu_now() - c0;
        if (rc == SHS_OK)
            shs__meta_free(&m);
        else
            snprintf(why, sizeof why, "refused: %s", shs_last_error());
        json_error_t err;
        t0 = now();
        json_t *j = json_loadb(sealed, len, 0, &err);
        t_json[k] = now() - t0;
        if (!j)
            die("json_loadb", 1);
        json_decref(j);
    }
    double to = best_of(t_open, REPS), tj = best_of(t_json, REPS);
    double mib = (double)len / (1 << 20);
    printf("%s N=%ld: metadata.json %.1f MiB, open (parse + validate) best %.3f s (median "
           "%.3f, CPU %.3f) vs json_loadb alone %.3f s: ratio %.2f; %s\n",
           mode, n, mib, to, median_of(t_open, REPS), best_of(c_open, REPS), tj, to / tj, why);
    char key[64], label[160];
    snprintf(key, sizeof key, "open_%ld", n);
    snprintf(label, sizeof label, "open metadata.json (%s, N=%ld, %.1f MiB)", mode, n, mib);
    result(key, to, "s", label);
    snprintf(key, sizeof key, "open_cpu_%ld", n);
    result(key, best_of(c_open, REPS), "s", "CPU time of the open (best)");
    snprintf(key, sizeof key, "json_%ld", n);
    result(key, tj, "s", "jansson json_loadb of the same bytes");
    snprintf(key, sizeof key, "mib_%ld", n);
    result(key, mib, "MiB", "metadata.json size");
    snprintf(key, sizeof key, "accepted_%ld", n);
    result(key, rc == SHS_OK, "", "1: the metadata was accepted");
    snprintf(key, sizeof key, "peak_rss_%ld", n);
    result(key, maxrss_mib(), "MiB", "peak RSS of the process");
    if (getenv("BENCH_META_KEEP"))
        printf("kept %s\n", path);
    else
        unlink(path);
    rmdir(dir);
    rmdir(root);
    shs__free(sealed);
    free(b.p);
    return 0;
}
