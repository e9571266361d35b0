/*
 * bench_hfquant.c -- initial_load_in_hf_quantized: what dequantizing FP8
 * weights costs on load, against loading the same model stored in BF16.
 *
 *   bench_hfquant DIR [MIB]   (default 256: MiB of the BF16 model)
 *
 * Writes two Hugging Face folders into DIR/hfquant-models (removed at the
 * end): the model as BF16 (NT weights [rows, 4096]) and the same model as
 * F8_E4M3 with DeepSeek-V3's block scales (half the bytes plus 1/4096 of
 * F32 scales).  Then, warm cache,
 * best of REPS, one process loading whole tensors into BF16:
 *   bf16   initial_load_in_hf of the BF16 folder (a copy): the baseline;
 *   fp8    initial_load_in_hf of the FP8 folder without the option (the
 *          E4M3 -> BF16 conversion alone);
 *   quant  initial_load_in_hf_quantized (conversion and block scales).
 * Reports each time, the ratios to bf16, and peak RSS.  The machine may be
 * shared: CPU time is reported too.
 */
#include "shardsafe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *g_mode = "hfquant";

#define BENCH_NAME "bench_hfquant"
#include "benchutil.h"

#define NT 8
#define COLS 4096u
#define REPS 5

static uint64_t g_rows;

static void make_folders(const char *bf_dir, const char *q_dir)
{
    uint64_t g[2] = { g_rows, COLS }, sg[2] = { (g_rows + 127) / 128, COLS / 128 };
    size_t n = (size_t)(g_rows * COLS);
    shs_tensor_view bv[NT], qv[2 * NT];
    char names[NT][32], snames[NT][48];
    uint16_t *bf[NT];
    unsigned char *q[NT];
    float *sc[NT];
    for (int t = 0; t < NT; t++) {
        bf[t] = xmalloc(n * 2);
        q[t] = xmalloc(n);
        sc[t] = xmalloc((size_t)(sg[0] * sg[1]) * sizeof(float));
        for (uint64_t k = 0; k < sg[0] * sg[1]; k++)
            sc[t][k] = 0.001f * (float)(1 + (k + (uint64_t)t) % 97);
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)((i * 37u + (size_t)t) & 0xFF);
            if ((c & 0x7F) == 0x7F)
                c ^= 1; /* no NaN */
            q[t][i] = c;
        }
        /* the BF16 model: the same values, dequantized by the library */
        float *f = xmalloc(n * sizeof *f);
        CHECK(shs_convert(f, SHS_F32, q[t], SHS_F8_E4M3, n));
        for (size_t i = 0; i < n; i++) {
            uint64_t r = i / COLS, c = i % COLS;
            f[i] *= sc[t][(r / 128) * sg[1] + c / 128];
        }
        CHECK(shs_convert(bf[t], SHS_BF16, f, SHS_F32, n));
        free(f);
        snprintf(names[t], sizeof names[t], "layers.%d.weight", t);
        snprintf(snames[t], sizeof snames[t], "layers.%d.weight_scale_inv", t);
        bv[t] = (shs_tensor_view){ names[t], SHS_BF16, 2, g, bf[t] };
        qv[2 * t] = (shs_tensor_view){ names[t], SHS_F8_E4M3, 2, g, q[t] };
        qv[2 * t + 1] = (shs_tensor_view){ snames[t], SHS_F32, 2, sg, sc[t] };
    }
    char *p = path_in(bf_dir, "model.safetensors");
    CHECK(shs_save_file(p, bv, NT, NULL, 0, NULL));
    free(p);
    p = path_in(q_dir, "model.safetensors");
    CHECK(shs_save_file(p, qv, 2 * NT, NULL, 0, NULL));
    free(p);
    for (int t = 0; t < NT; t++) {
        free(bf[t]);
        free(q[t]);
        free(sc[t]);
    }
}

/* One load of `dir` into whole BF16 tensors; its wall and CPU time. */
static void load_once(const char *dir, int quant, uint16_t **bufs, double *wall, double *cpu)
{
    shs_state *st;
    shs_manager *m;
    uint64_t g[2] = { g_rows, COLS };
    char names[NT][32];
    CHECK(shs_state_create(&st));
    for (int t = 0; t < NT; t++) {
        snprintf(names[t], sizeof names[t], "layers.%d.weight", t);
        shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
        s.name = names[t];
        s.dtype = SHS_BF16;
        s.ndim = 2;
        s.shape = g;
        s.data = bufs[t];
        CHECK(shs_state_add_tensor(st, &s));
    }
    shs_config c;
    shs_config_init(&c);
    c.enable_save = 0;
    c.initial_load_in_hf = 1;
    c.initial_load_path = dir;
    c.initial_load_in_hf_quantized = quant;
    CHECK(shs_manager_create(&m, &c, st));
    shs_progress p = SHS_PROGRESS_INIT;
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    double w0 = now(), c0 = cpu_now();
    CHECK(shs_manager_load(&res, m, &p));
    *wall = now() - w0;
    *cpu = cpu_now() - c0;
    shs_manager_free(m);
    shs_state_free(st);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_hfquant DIR [MIB]\n");
        return 2;
    }
    unsigned mib = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 256;
    g_rows = (uint64_t)mib * 1024 * 1024 / 2 / COLS / NT;
    g_rows -= g_rows % 128;
    if (g_rows == 0)
        g_rows = 128;
    char *root = path_in(argv[1], "hfquant-models");
    char *bf_dir = path_in(root, "bf16"), *q_dir = path_in(root, "fp8");
    rmtree(root);
    if (mkdir(root, 0755) != 0 || mkdir(bf_dir, 0755) != 0 || mkdir(q_dir, 0755) != 0)
        die("mkdir", 0);
    make_folders(bf_dir, q_dir);
    uint16_t *bufs[NT], *ref[NT];
    size_t n = (size_t)(g_rows * COLS);
    for (int t = 0; t < NT; t++) {
        bufs[t] = xmalloc(n * 2);
        ref[t] = xmalloc(n * 2);
    }
    printf("model: %d BF16 tensors [%llu, %u] = %.0f MiB (FP8: %.0f MiB + scales)\n", NT,
           (unsigned long long)g_rows, COLS, (double)NT * (double)n * 2 / 1048576.0,
           (double)NT * (double)n / 1048576.0);
    static const char *const what[3] = { "bf16", "fp8", "quant" };
    double best[3], cpu_best[3];
    for (int k = 0; k < 3; k++) {
        double w[REPS], c[REPS];
        for (int r = 0; r < REPS; r++)
            load_once(k == 0 ? bf_dir : q_dir, k == 2, k == 0 ? ref : bufs, &w[r], &c[r]);
        best[k] = best_of(w, REPS);
        cpu_best[k] = best_of(c, REPS);
    }
    /* the dequantized load equals the BF16 model bit for bit */
    for (int t = 0; t < NT; t++)
        if (memcmp(bufs[t], ref[t], n * 2) != 0)
            die("the dequantized weights differ from the BF16 model", 0);
    for (int k = 0; k < 3; k++) {
        printf("%-6s %.3f s wall (%.3f s CPU), %.2f x bf16\n", what[k], best[k], cpu_best[k],
               best[k] / best[0]);
        result(what[k], best[k], "s", "best wall time of a whole load");
        result(k == 0   ? "bf16_ratio"
               : k == 1 ? "fp8_ratio"
                        : "quant_ratio",
               best[k] / best[0], "x", "time / the BF16 load's");
    }
    peak_rss();
    for (int t = 0; t < NT; t++) {
        free(bufs[t]);
        free(ref[t]);
    }
    rmtree(root);
    free(bf_dir);
    free(q_dir);
    free(root);
    return 0;
}
