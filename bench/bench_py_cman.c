/*
 * bench_py_cman.c -- the C side of bench/bench_py_manager.py's "Python
 * overhead" row: the C checkpoint manager (shs_manager_save) saving the
 * same state as the Python CheckpointManager, from a spec the Python
 * bench writes.
 *
 *   bench_py_cman SPEC SAVE_PATH REPS
 *
 * SPEC, one item a line:
 *   c KEY VALUE                        a config field (shs_config_set)
 *   t KIND DTYPE NDIM D0 .. Dn-1 NAME  a tensor (KIND 0 model, 1 optimizer;
 *                                      DTYPE a safetensors dtype name)
 *   b SIZE NAME                        a blob of SIZE bytes
 * Every tensor gets its own malloc'd, filled (so faulted-in) buffer, as a
 * torch tensor is.  Each rep: remove the step directories under SAVE_PATH
 * and sync (not timed), then time one shs_manager_save of step 100 * rep.
 * Prints one line "@@ {json}" (op "cman": per-rep wall and CPU times, the
 * manager's own total_seconds, bytes, peak RSS), like bench_py.py.
 */
#include "shardsafe.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_mode = "cman";

#define BENCH_NAME "bench_py_cman"
#include "benchutil.h"

#define MAX_ITEMS 65536
#define MAX_REPS 64

typedef struct item {
    char *name;
    void *data;
    size_t nbytes;
} item;

static void fill(unsigned char *p, size_t n, uint32_t seed)
{
    uint32_t x = seed | 1u;
    for (size_t k = 0; k + 4 <= n; k += 4) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        memcpy(p + k, &x, 4);
    }
    for (size_t k = n & ~(size_t)3; k < n; k++)
        p[k] = (unsigned char)k;
}

static void clear_save_path(const char *sp)
{
    rmtree(sp);
    mkdir(sp, 0755);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: bench_py_cman SPEC SAVE_PATH REPS\n");
        return 2;
    }
    const char *sp = argv[2];
    int reps = atoi(argv[3]);
    if (reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "bench_py_cman: REPS must be 1..%d\n", MAX_REPS);
        return 2;
    }
    FILE *fh = fopen(argv[1], "r");
    if (!fh)
        die("fopen SPEC", 1);
    shs_config c;
    shs_config_init(&c);
    shs_state *st;
    CHECK(shs_state_create(&st));
    static item items[MAX_ITEMS];
    size_t n = 0, total = 0;
    char line[4096];
    while (fgets(line, sizeof line, fh)) {
        line[strcspn(line, "\n")] = '\0';
        if (n == MAX_ITEMS) {
            fprintf(stderr, "bench_py_cman: more than %d items\n", MAX_ITEMS);
            return 1;
        }
        char *save = NULL, *tok = strtok_r(line, " ", &save);
        if (!tok)
            continue;
        if (strcmp(tok, "c") == 0) {
            char *key = strtok_r(NULL, " ", &save), *val = strtok_r(NULL, "", &save);
            if (!key)
                goto bad;
            if (strcmp(key, "save_path") != 0)
                CHECK(shs_config_set(&c, key, val ? val : ""));
        } else if (strcmp(tok, "t") == 0) {
            shs_tensor_spec ts = SHS_TENSOR_SPEC_INIT;
            uint64_t shape[SHS_MAX_DIMS];
            char *kind = strtok_r(NULL, " ", &save), *dt = strtok_r(NULL, " ", &save),
                 *nd = strtok_r(NULL, " ", &save);
            if (!kind || !dt || !nd)
                goto bad;
            ts.kind = atoi(kind) ? SHS_KIND_OPTIMIZER : SHS_KIND_MODEL;
            CHECK(shs_dtype_parse(&ts.dtype, dt, strlen(dt)));
            ts.ndim = (size_t)atoi(nd);
            if (ts.ndim > SHS_MAX_DIMS)
                goto bad;
            uint64_t numel = 1;
            for (size_t d = 0; d < ts.ndim; d++) {
                char *v = strtok_r(NULL, " ", &save);
                if (!v)
                    goto bad;
                shape[d] = strtoull(v, NULL, 10);
                numel *= shape[d];
            }
            char *name = strtok_r(NULL, "", &save);
            if (!name)
                goto bad;
            item *it = &items[n++];
            it->name = strdup(name);
            it->nbytes = (size_t)(numel * shs_dtype_bits(ts.dtype) / 8);
            it->data = xmalloc(it->nbytes);
            fill(it->data, it->nbytes, (uint32_t)n);
            total += it->nbytes;
            ts.name = it->name;
            ts.shape = shape;
            ts.data = it->data;
            CHECK(shs_state_add_tensor(st, &ts));
        } else if (strcmp(tok, "b") == 0) {
            char *size = strtok_r(NULL, " ", &save), *name = strtok_r(NULL, "", &save);
            if (!size || !name)
                goto bad;
            item *it = &items[n++];
            it->name = strdup(name);
            it->nbytes = (size_t)strtoull(size, NULL, 10);
            it->data = xmalloc(it->nbytes);
            fill(it->data, it->nbytes, (uint32_t)n);
            CHECK(shs_state_set_blob(st, it->name, it->data, it->nbytes));
        } else {
            goto bad;
        }
    }
    fclose(fh);
    c.save_path = sp;
    shs_manager *m;
    CHECK(shs_manager_create(&m, &c, st));
    double t[MAX_REPS], cpu[MAX_REPS], tot[MAX_REPS];
    shs_save_stats stats = SHS_SAVE_STATS_INIT;
    for (int r = 0; r < reps; r++) {
        clear_save_path(sp);
        sync();
        shs_progress p = progress_at(100 * (r + 1));
        double c0 = cpu_now(), t0 = now();
        CHECK(shs_manager_save(m, &p, 0));
        t[r] = now() - t0;
        cpu[r] = cpu_now() - c0;
        CHECK(shs_manager_last_save(&stats, m));
        tot[r] = stats.total_seconds;
    }
    shs_manager_free(m);
    rmtree(sp);
    printf("@@ {\"op\": \"cman\", \"nbytes\": %zu, \"bytes_written\": %" PRIu64 ", \"t\": [", total,
           stats.bytes_written);
    for (int r = 0; r < reps; r++)
        printf("%s%.6f", r ? ", " : "", t[r]);
    printf("], \"cpu\": [");
    for (int r = 0; r < reps; r++)
        printf("%s%.6f", r ? ", " : "", cpu[r]);
    printf("], \"total_seconds\": [");
    for (int r = 0; r < reps; r++)
        printf("%s%.6f", r ? ", " : "", tot[r]);
    printf("], \"peak_rss_mib\": %.1f}\n", maxrss_mib());
    shs_state_free(st);
    for (size_t i = 0; i < n; i++) {
        free(items[i].name);
        free(items[i].data);
    }
    return 0;
bad:
    fprintf(stderr, "bench_py_cman: bad spec line in %s\n", argv[1]);
    return 1;
}
