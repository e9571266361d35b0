/*
 * bench_plan.c -- time and memory of the save and load planners (src/dist/plan.c)
 * at scale, on one core, without MPI.
 *
 *   bench_plan save [RANKS [CHUNKS_PER_RANK]]   save plan of RANKS x CHUNKS
 *   bench_plan load [RANKS [CHUNKS_PER_RANK]]   load plan RANKS -> RANKS/2
 *                                               (balanced and not)
 *
 * Defaults: 16,384 ranks x 1,000 chunks.  The state is 1,000 tensors (one
 * chunk of each per rank): even ids are 2-d [16384*k + r, 1024] F32 split
 * along dim 0 over all ranks (uneven: FSDP-like), odd ids are [1024 + t,
 * 256] BF16 replicated on every rank (DP-like).  Replicas share one box
 * array, as a gathered layout would.
 *
 * Each mode should run as its own process so that its peak RSS (getrusage
 * ru_maxrss) is its own; the RSS includes the input lists themselves, so
 * the planner's own heap peak is reported too (counted through the
 * library's allocator hook), and so is each plan's own RSS peak (VmHWM,
 * reset before it through /proc/self/clear_refs).  bench/run.sh runs both
 * modes; bench/report.py shows them in section 6.  Results: human-readable lines plus "@@ {json}"
 * lines {"mode","key","value","unit","label"} for bench/report.py.
 */
#include "shardsafe.h"
#include "common/internal.h"
#include "dist/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static const char *g_mode = "";

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double g_rss_before_reset; /* process peak before the last VmHWM reset */

/* Process peak RSS: ru_maxrss follows VmHWM (it is reset with it), so the
   peaks seen before each reset are kept apart. */
static double peak_rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double v = (double)ru.ru_maxrss / 1024.0;
    return v > g_rss_before_reset ? v : g_rss_before_reset;
}

/* VmHWM can be reset (Linux >= 4.0: "5" to clear_refs), unlike ru_maxrss:
   used for the peak RSS of each plan within a mode. */
static void hwm_reset(void)
{
    g_rss_before_reset = peak_rss_mib();
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

static void result(const char *key, double value, const char *unit, const char *label)
{
    printf("@@ {\"mode\":\"%s\",\"key\":\"%s\",\"value\":%.9g,\"unit\":\"%s\","
           "\"label\":\"%s\"}\n",
           g_mode, key, value, unit, label);
    fflush(stdout);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "bench_plan: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* ---- counting allocator: the planner's own heap high-water mark ---- */

static size_t g_cur, g_peak;

static void *cnt_malloc(void *ctx, size_t n)
{
    (void)ctx;
    size_t *p = malloc(n + 16);
    if (!p)
        return NULL;
    p[0] = n;
    g_cur += n;
    if (g_cur > g_peak)
        g_peak = g_cur;
    return (char *)p + 16;
}

static void cnt_free(void *ctx, void *q)
{
    (void)ctx;
    if (!q)
        return;
    size_t *p = (size_t *)((char *)q - 16);
    g_cur -= p[0];
    free(p);
}

static void *cnt_realloc(void *ctx, void *q, size_t n)
{
    if (!q)
        return cnt_malloc(ctx, n);
    size_t *p = (size_t *)((char *)q - 16), old = p[0];
    size_t *np = realloc(p, n + 16);
    if (!np)
        return NULL;
    np[0] = n;
    g_cur = g_cur - old + n;
    if (g_cur > g_peak)
        g_peak = g_cur;
    return (char *)np + 16;
}

/* ---- the synthetic state ---- */

typedef struct state {
    uint32_t nt;
    shs_plan_tensor *T;
    uint64_t *shapes;     /* [nt][2] */
    uint64_t *full_boxes; /* [nt][4]: offset 0 + full shape */
} state;

static void state_init(state *s, uint32_t nt, uint32_t ranks)
{
    s->nt = nt;
    s->T = xmalloc(nt * sizeof *s->T);
    s->shapes = xmalloc(nt * 2 * sizeof *s->shapes);
    s->full_boxes = xmalloc(nt * 4 * sizeof *s->full_boxes);
    for (uint32_t t = 0; t < nt; t++) {
        uint64_t *sh = s->shapes + 2 * t;
        if (t % 2 == 0) {
            sh[0] = (uint64_t)ranks * (1 + t % 4) + t % 13;
            sh[1] = 1024;
            s->T[t] = (shs_plan_tensor){ 2, SHS_F32, sh };
        } else {
            sh[0] = 1024 + t;
            sh[1] = 256;
            s->T[t] = (shs_plan_tensor){ 2, SHS_BF16, sh };
        }
        uint64_t *b = s->full_boxes + 4 * t;
        b[0] = b[1] = 0;
        b[2] = sh[0];
        b[3] = sh[1];
    }
}

static void state_free(state *s)
{
    free(s->T);
    free(s->shapes);
    free(s->full_boxes);
}

static void split(uint64_t len, uint32_t parts, uint32_t i, uint64_t *off, uint64_t *n)
{
    uint64_t base = len / parts, rem = len % parts;
    *off = i * base + (i < rem ? i : rem);
    *n = base + (i < rem);
}

/* Every rank's chunk of every tensor, rank-major (as an all-gather gives
   them).  Boxes of split tensors go to *pool (4 values each). */
static shs_plan_chunk *gather_layout(const state *s, uint32_t ranks, size_t *n, uint64_t **pool)
{
    size_t nsplit = (s->nt + 1) / 2;
    shs_plan_chunk *c = xmalloc((size_t)ranks * s->nt * sizeof *c);
    uint64_t *p = xmalloc((size_t)ranks * nsplit * 4 * sizeof *p);
    size_t k = 0, pk = 0;
    for (uint32_t r = 0; r < ranks; r++)
        for (uint32_t t = 0; t < s->nt; t++) {
            const uint64_t *box = s->full_boxes + 4 * t;
            if (t % 2 == 0) {
                uint64_t *b = p + pk;
                split(s->shapes[2 * t], ranks, r, &b[0], &b[2]);
                b[1] = 0;
                b[3] = s->shapes[2 * t + 1];
                pk += 4;
                box = b;
            }
            c[k++] = (shs_plan_chunk){ t, r, box };
        }
    *n = k;
    *pool = p;
    return c;
}

static void print_heap(const char *what, double hwm)
{
    printf("  %-12s planner heap peak %8.1f MiB, RSS peak during this plan %8.1f MiB, "
           "process peak RSS %8.1f MiB\n",
           what, (double)g_peak / 1048576.0, hwm, peak_rss_mib());
}

static int bench_save(uint32_t ranks, uint32_t per_rank)
{
    state s;
    state_init(&s, per_rank, ranks);
    size_t n;
    uint64_t *pool;
    shs_plan_chunk *c = gather_layout(&s, ranks, &n, &pool);
    double rss_in = peak_rss_mib();
    printf("save plan: %u ranks x %u chunks = %zu chunks (input %.1f MiB RSS)\n", ranks, per_rank,
           n, rss_in);
    result("input_rss_mib", rss_in, "MiB", "peak RSS after building the input");

    for (int rr = 1; rr >= 0; rr--) {
        shs__save_plan p;
        g_peak = g_cur;
        hwm_reset();
        double c0 = cpu_now(), t0 = now();
        int rc = shs__plan_save(&p, s.T, s.nt, c, n, ranks, rr);
        double t = now() - t0, cpu = cpu_now() - c0;
        if (rc < 0) {
            fprintf(stderr, "shs__plan_save: %s\n", shs_last_error());
            return 1;
        }
        const char *tag = rr ? "dedup" : "nodedup";
        char key[64];
        printf("  remove_redundancy=%d: %.3f s (cpu %.3f s), %zu unique, written %.3g of "
               "%.3g bytes, max/mean %.4f\n",
               rr, t, cpu, p.nunique, (double)p.written_bytes, (double)p.total_bytes,
               p.max_over_mean);
        double hwm = hwm_mib();
        print_heap(tag, hwm);
        snprintf(key, sizeof key, "save_%s_rss_mib", tag);
        result(key, hwm, "MiB", "VmHWM during this plan (input included)");
        snprintf(key, sizeof key, "save_%s_seconds", tag);
        result(key, t, "s", "shs__plan_save wall time");
        snprintf(key, sizeof key, "save_%s_cpu_seconds", tag);
        result(key, cpu, "s", "shs__plan_save CPU time");
        snprintf(key, sizeof key, "save_%s_heap_peak_mib", tag);
        result(key, (double)g_peak / 1048576.0, "MiB", "planner allocations, peak");
        snprintf(key, sizeof key, "save_%s_max_over_mean", tag);
        result(key, p.max_over_mean, "x", "written bytes per rank, max / mean");
        shs__save_plan_release(&p);
    }
    result("save_peak_rss_mib", peak_rss_mib(), "MiB", "process peak RSS (input included)");
    free(c);
    free(pool);
    state_free(&s);
    return 0;
}

static int bench_load(uint32_t ranks, uint32_t per_rank)
{
    state s;
    state_init(&s, per_rank, ranks);
    uint32_t target = ranks / 2 ? ranks / 2 : 1;
    /* saved: the unique chunks (what a deduplicated save wrote) */
    size_t nsplit = (per_rank + 1) / 2, nrep = per_rank / 2;
    size_t nsaved = nsplit * ranks + nrep, k = 0, pk = 0;
    shs_plan_chunk *saved = xmalloc(nsaved * sizeof *saved);
    uint64_t *spool = xmalloc(nsplit * ranks * 4 * sizeof *spool);
    for (uint32_t t = 0; t < per_rank; t++) {
        if (t % 2) {
            saved[k++] = (shs_plan_chunk){ t, 0, s.full_boxes + 4 * t };
            continue;
        }
        for (uint32_t r = 0; r < ranks; r++) {
            uint64_t *b = spool + pk;
            split(s.shapes[2 * t], ranks, r, &b[0], &b[2]);
            b[1] = 0;
            b[3] = s.shapes[2 * t + 1];
            pk += 4;
            saved[k++] = (shs_plan_chunk){ t, r, b };
        }
    }
    size_t nreq;
    uint64_t *rpool;
    shs_plan_chunk *req = gather_layout(&s, target, &nreq, &rpool);
    double rss_in = peak_rss_mib();
    printf("load plan: %zu saved chunks of %u ranks -> %u ranks x %u requests = %zu "
           "(input %.1f MiB RSS)\n",
           nsaved, ranks, target, per_rank, nreq, rss_in);
    result("input_rss_mib", rss_in, "MiB", "peak RSS after building the input");
    result("target_ranks", target, "", "ranks of the load");

    for (int lb = 1; lb >= 0; lb--) {
        shs__load_plan p;
        g_peak = g_cur;
        hwm_reset();
        double c0 = cpu_now(), t0 = now();
        int rc = shs__plan_load(&p, s.T, s.nt, saved, nsaved, req, nreq, target, lb);
        double t = now() - t0, cpu = cpu_now() - c0;
        if (rc < 0) {
            fprintf(stderr, "shs__plan_load: %s\n", shs_last_error());
            return 1;
        }
        const char *tag = lb ? "balanced" : "unbalanced";
        char key[64];
        printf("  load_balanced=%d: %.3f s (cpu %.3f s), %zu items, %zu reads, %zu sends, "
               "read %.3g bytes (needed %.3g), sent %.3g, max/mean %.3f\n",
               lb, t, cpu, p.nitems, p.nreads, p.nsends, (double)p.read_bytes,
               (double)p.needed_bytes, (double)p.sent_bytes, p.max_over_mean);
        double hwm = hwm_mib();
        print_heap(tag, hwm);
        snprintf(key, sizeof key, "load_%s_rss_mib", tag);
        result(key, hwm, "MiB", "VmHWM during this plan (input included)");
        snprintf(key, sizeof key, "load_%s_seconds", tag);
        result(key, t, "s", "shs__plan_load wall time");
        snprintf(key, sizeof key, "load_%s_cpu_seconds", tag);
        result(key, cpu, "s", "shs__plan_load CPU time");
        snprintf(key, sizeof key, "load_%s_heap_peak_mib", tag);
        result(key, (double)g_peak / 1048576.0, "MiB", "planner allocations, peak");
        snprintf(key, sizeof key, "load_%s_max_over_mean", tag);
        result(key, p.max_over_mean, "x", "read bytes per rank, max / mean");
        shs__load_plan_release(&p);
    }
    result("load_peak_rss_mib", peak_rss_mib(), "MiB", "process peak RSS (input included)");
    free(saved);
    free(spool);
    free(req);
    free(rpool);
    state_free(&s);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "save";
    uint32_t ranks = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 16384;
    uint32_t per_rank = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 1000;
    if (!ranks || !per_rank || (strcmp(mode, "save") && strcmp(mode, "load"))) {
        fprintf(stderr, "usage: bench_plan save|load [RANKS [CHUNKS_PER_RANK]]\n");
        return 2;
    }
    shs_allocator a = { cnt_malloc, cnt_realloc, cnt_free, NULL };
    shs_set_allocator(&a);
    g_mode = strcmp(mode, "save") ? "plan_load" : "plan_save";
    result("ranks", ranks, "", "");
    result("chunks_per_rank", per_rank, "", "");
    return strcmp(mode, "save") ? bench_load(ranks, per_rank) : bench_save(ranks, per_rank);
}
