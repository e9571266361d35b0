/*
 * test_hfquant.c -- initial_load_in_hf_quantized: FP8 (F8_E4M3) Hugging
 * Face weights with DeepSeek-V3's block scales ("<weight>_scale_inv",
 * one F32 per 128x128 block) dequantized into F32, BF16 and F16 boxes on
 * 1 to 4 ranks (threads), with and without load_balanced; partial blocks
 * at the edges, boxes that start inside a block; the scales consumed,
 * never reported unused; and every refusal: a missing scale, a scale of
 * the wrong shape or dtype, a scale next to a weight that is not
 * F8_E4M3, a weight registered as FP8, the option without
 * initial_load_in_hf or initial_load_path.
 *
 * The files are generated here (the weight bytes walk through every
 * finite E4M3 code; the scales are distinct and not powers of two, so a
 * wrong block shows), and the expected values come from an E4M3 decoder
 * written from the format's definition (1 sign, 4 exponent bits biased
 * by 7, 3 mantissa bits; S.1111.111 is NaN), not from the library's.
 */
#include "testutil.h"
#include "threadcomm.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXR 4
#define ROWS 300 /* 2 blocks + 44 rows */
#define COLS 260 /* 2 blocks + 4 columns */
#define SR 3
#define SC 3

static unsigned char g_w[ROWS * COLS]; /* F8_E4M3 codes */
static float g_scale[SR * SC];
static unsigned char g_v[64 * 40]; /* a small second weight: one block */
static uint16_t g_vscale_bf16;     /* its scale, stored as BF16 */

/* E4M3 (OCP "fn": no infinities) from the definition. */
static float e4m3(unsigned char c)
{
    int sign = c >> 7, e = (c >> 3) & 15, m = c & 7;
    float v = e == 0 ? ldexpf((float)m / 8.0f, -6) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return sign ? -v : v;
}

/* Walk the finite codes (0x7F and 0xFF are NaN). */
static unsigned char code_at(size_t i)
{
    unsigned char c = (unsigned char)((i * 37u + i / 7u) & 0xFF);
    return (c & 0x7F) == 0x7F ? (unsigned char)(c ^ 0x01) : c;
}

static void make_data(void)
{
    for (size_t i = 0; i < sizeof g_w; i++)
        g_w[i] = code_at(i);
    for (int k = 0; k < SR * SC; k++)
        g_scale[k] = 0.75f + 0.3125f * (float)k + 1.0f / 1024.0f * (float)(k * k);
    for (size_t i = 0; i < sizeof g_v; i++)
        g_v[i] = code_at(i + 5);
    g_vscale_bf16 = 0x3FA0; /* 1.25 */
}

/* The dequantized value of w[i][j], in F32: the F32 product, as PyTorch's
   reader computes weight.to(float32) * scale. */
static float want_w(uint64_t i, uint64_t j)
{
    return e4m3(g_w[i * COLS + j]) * g_scale[(i / 128) * SC + j / 128];
}

static const uint64_t k_wshape[2] = { ROWS, COLS }, k_sshape[2] = { SR, SC };
static const uint64_t k_vshape[2] = { 64, 40 }, k_vsshape[2] = { 1, 1 };
static float g_norm[COLS];

/* The model: the weight and the norm in shard 1, the scales and the
   second weight in shard 2 (a weight and its scale in different files),
   and the index. */
static char *make_model(const char *name)
{
    char *dir = tu_subdir(name);
    for (int j = 0; j < COLS; j++)
        g_norm[j] = (float)j / 8.0f;
    static const uint64_t nshape[1] = { COLS };
    shs_tensor_view a[2] = { { "model.w.weight", SHS_F8_E4M3, 2, k_wshape, g_w },
                             { "model.norm", SHS_F32, 1, nshape, g_norm } };
    shs_tensor_view b[3] = { { "model.w.weight_scale_inv", SHS_F32, 2, k_sshape, g_scale },
                             { "model.v.weight", SHS_F8_E4M3, 2, k_vshape, g_v },
                             { "model.v.weight_scale_inv", SHS_BF16, 2, k_vsshape,
                               &g_vscale_bf16 } };
    const char *meta[] = { "format", "pt" };
    TU_OK(shs_save_file(tu_path(dir, "model-00001-of-00002.safetensors"), a, 2, meta, 1, NULL));
    TU_OK(shs_save_file(tu_path(dir, "model-00002-of-00002.safetensors"), b, 3, meta, 1, NULL));
    const char *ix = "{\"metadata\": {\"total_size\": 1}, \"weight_map\": {"
                     "\"model.w.weight\": \"model-00001-of-00002.safetensors\", "
                     "\"model.norm\": \"model-00001-of-00002.safetensors\", "
                     "\"model.w.weight_scale_inv\": \"model-00002-of-00002.safetensors\", "
                     "\"model.v.weight\": \"model-00002-of-00002.safetensors\", "
                     "\"model.v.weight_scale_inv\": \"model-00002-of-00002.safetensors\"}}\n";
    assert_int_equal(tu_write_file(tu_path(dir, "model.safetensors.index.json"), ix, strlen(ix)),
                     0);
    return dir;
}

/* ------------------------------------------------------------------ */

typedef struct qjob {
    int rank, nr;
    shs_comm *comm;
    const char *path;
    shs_dtype dt; /* registered dtype of w and v */
    int cols;     /* split w by columns (at 70: inside block 0) instead of rows */
    int balanced; /* load_balanced */
    int quant;    /* initial_load_in_hf_quantized */
    int only_w;   /* register w only (the others unused) */
    /* out */
    int rc;
    char msg[1024];
    int bad;
    size_t n_skipped;
    char skipped[512];
    uint64_t bytes_read;
} qjob;

/* The box of w rank r of nr holds: rows cut at 1/nr (not on block
   bounds), or columns cut at 70 and the rest for 2+ ranks. */
static void w_box(const qjob *j, uint64_t *off, uint64_t *shape)
{
    if (!j->cols) {
        off[0] = (uint64_t)ROWS * (uint64_t)j->rank / (uint64_t)j->nr;
        shape[0] = (uint64_t)ROWS * (uint64_t)(j->rank + 1) / (uint64_t)j->nr - off[0];
        off[1] = 0;
        shape[1] = COLS;
        return;
    }
    uint64_t cut[MAXR + 1] = { 0 };
    for (int r = 1; r < j->nr; r++)
        cut[r] = r == 1 ? 70
                        : 70 + (uint64_t)(COLS - 70) * (uint64_t)(r - 1) / (uint64_t)(j->nr - 1);
    cut[j->nr] = COLS;
    off[0] = 0;
    shape[0] = ROWS;
    off[1] = cut[j->rank];
    shape[1] = cut[j->rank + 1] - cut[j->rank];
}

static float as_f32(shs_dtype dt, const void *p, uint64_t e)
{
    if (dt == SHS_F32)
        return ((const float *)p)[e];
    uint16_t h = ((const uint16_t *)p)[e];
    return dt == SHS_BF16 ? shs_bf16_to_f32(h) : shs_f16_to_f32(h);
}

/* want (F32) rounded to dt, as a float */
static float rounded(shs_dtype dt, float want)
{
    if (dt == SHS_F32)
        return want;
    return dt == SHS_BF16 ? shs_bf16_to_f32(shs_f32_to_bf16(want))
                          : shs_f16_to_f32(shs_f32_to_f16(want));
}

static void run_qjob(qjob *j)
{
    shs_state *st = NULL;
    shs_manager *m = NULL;
    uint64_t woff[2], wshape[2];
    w_box(j, woff, wshape);
    size_t es = shs_dtype_bits(j->dt) / 8;
    void *w = calloc((size_t)(wshape[0] * wshape[1]) + 1, es);
    void *v = calloc(64 * 40, es);
    float norm[COLS];
    static const uint64_t zero[2] = { 0, 0 }, nshape[1] = { COLS };
    int rc = w && v ? shs_state_create(&st) : SHS_ENOMEM;
    shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
    s.name = "model.w.weight";
    s.dtype = j->dt;
    s.ndim = 2;
    s.shape = wshape;
    s.global_shape = k_wshape;
    s.global_offset = woff;
    s.data = w;
    if (rc == SHS_OK)
        rc = shs_state_add_tensor(st, &s);
    if (rc == SHS_OK && !j->only_w) {
        s.name = "model.v.weight";
        s.shape = s.global_shape = k_vshape;
        s.global_offset = zero;
        s.data = v;
        rc = shs_state_add_tensor(st, &s);
        s.name = "model.norm";
        s.dtype = SHS_F32;
        s.ndim = 1;
        s.shape = s.global_shape = nshape;
        s.data = norm;
        if (rc == SHS_OK)
            rc = shs_state_add_tensor(st, &s);
    }
    shs_config c;
    shs_config_init(&c);
    c.enable_save = 0;
    c.initial_load_in_hf = 1;
    c.initial_load_path = j->path;
    c.initial_load_in_hf_quantized = j->quant;
    c.load_balanced = j->balanced;
    if (rc == SHS_OK)
        rc = j->comm ? shs_manager_create_comm(&m, &c, st, j->comm)
                     : shs_manager_create(&m, &c, st);
    shs_progress p = SHS_PROGRESS_INIT;
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    if (rc == SHS_OK)
        rc = shs_manager_load(&res, m, &p);
    j->rc = rc;
    snprintf(j->msg, sizeof j->msg, "%s", rc < 0 ? shs_last_error() : "");
    if (rc == SHS_OK) {
        j->bytes_read = res.bytes_read;
        j->n_skipped = res.n_skipped;
        j->skipped[0] = 0;
        for (size_t i = 0; i < res.n_skipped; i++)
            snprintf(j->skipped + strlen(j->skipped), sizeof j->skipped - strlen(j->skipped), "%s;",
                     res.skipped[i]);
        for (uint64_t e = 0; e < wshape[0] * wshape[1]; e++) {
            uint64_t i = woff[0] + e / wshape[1], jj = woff[1] + e % wshape[1];
            float want = j->quant ? want_w(i, jj) : e4m3(g_w[i * COLS + jj]);
            float got = as_f32(j->dt, w, e);
            if (got != rounded(j->dt, want) && j->bad++ < 3)
                print_message("rank %d: w[%llu][%llu] = %.9g, want %.9g\n", j->rank,
                              (unsigned long long)i, (unsigned long long)jj, (double)got,
                              (double)rounded(j->dt, want));
        }
        for (uint64_t e = 0; !j->only_w && e < 64 * 40; e++) {
            float want = e4m3(g_v[e]) * (j->quant ? 1.25f : 1.0f);
            j->bad += as_f32(j->dt, v, e) != rounded(j->dt, want);
        }
        for (int k = 0; !j->only_w && k < COLS; k++)
            j->bad += norm[k] != g_norm[k];
    }
    shs_manager_free(m);
    shs_state_free(st);
    free(w);
    free(v);
}

static void rank_main(int rank, shs_comm *comm, void *arg)
{
    qjob *j = arg;
    (void)rank;
    j->comm = comm;
    run_qjob(j);
    j->comm = NULL;
}

static void run_ranks(const qjob *proto, int nr, qjob *js)
{
    void *args[MAXR];
    for (int r = 0; r < nr; r++) {
        js[r] = *proto;
        js[r].rank = r;
        js[r].nr = nr;
        args[r] = &js[r];
    }
    assert_int_equal(tcomm_run(nr, rank_main, args), 0);
}

static qjob qjob_default(const char *path)
{
    qjob j;
    memset(&j, 0, sizeof j);
    j.nr = 1;
    j.path = path;
    j.dt = SHS_F32;
    j.quant = 1;
    return j;
}

static void expect_ok(const qjob *j)
{
    if (j->rc != SHS_OK)
        fail_msg("rank %d of %d: %d %s", j->rank, j->nr, j->rc, j->msg);
    if (j->bad)
        fail_msg("rank %d of %d: %d wrong values", j->rank, j->nr, j->bad);
}

/* Every registered dtype, 1 to 4 ranks, rows or columns, with and
   without load_balanced: every element is the F32 product rounded to the
   registered dtype; the scales are never "unused". */
static void test_dequant_ranks(void **state)
{
    (void)state;
    char *dir = make_model("model");
    static const shs_dtype dts[3] = { SHS_F32, SHS_BF16, SHS_F16 };
    qjob js[MAXR];
    for (int d = 0; d < 3; d++)
        for (int nr = 1; nr <= MAXR; nr++)
            for (int cols = 0; cols < 2; cols++)
                for (int balanced = 0; balanced < 2; balanced++) {
                    qjob proto = qjob_default(dir);
                    proto.dt = dts[d];
                    proto.cols = cols;
                    proto.balanced = balanced;
                    run_ranks(&proto, nr, js);
                    for (int r = 0; r < nr; r++) {
                        expect_ok(&js[r]);
                        if (js[r].n_skipped)
                            fail_msg("%s, %d ranks: skipped %s", shs_dtype_name(dts[d]), nr,
                                     js[r].skipped);
                    }
                }
    free(dir);
}

/* Without the option the FP8 values load as they are (converted, not
   scaled) and the scales are unused tensors: the default is unchanged. */
static void test_without_option(void **state)
{
    (void)state;
    char *dir = make_model("plain");
    qjob j = qjob_default(dir);
    j.quant = 0;
    j.dt = SHS_BF16;
    run_qjob(&j);
    expect_ok(&j);
    assert_non_null(strstr(j.skipped, "model.w.weight_scale_inv;"));
    assert_non_null(strstr(j.skipped, "model.v.weight_scale_inv;"));
    /* with it, an unregistered weight's scale is not listed either */
    j = qjob_default(dir);
    j.only_w = 1;
    run_qjob(&j);
    expect_ok(&j);
    assert_null(strstr(j.skipped, "scale_inv"));
    assert_non_null(strstr(j.skipped, "model.v.weight;"));
    free(dir);
}

/* A folder with model.safetensors holding `n` tensors. */
static char *one_file(const char *name, const shs_tensor_view *v, size_t n)
{
    char *dir = tu_subdir(name);
    TU_OK(shs_save_file(tu_path(dir, "model.safetensors"), v, n, NULL, 0, NULL));
    return dir;
}

static void expect_fail(const char *dir, shs_dtype dt, int want, const char *needle)
{
    qjob j = qjob_default(dir);
    j.dt = dt;
    j.only_w = 1;
    run_qjob(&j);
    if (j.rc != want || !strstr(j.msg, needle))
        fail_msg("want %d '%s', got %d: %s", want, needle, j.rc, j.msg);
}

static void test_refused(void **state)
{
    (void)state;
    static const uint64_t wrong[2] = { 3, 2 }, flat[1] = { 9 };
    static int32_t ints[9];
    static uint16_t bf[ROWS * COLS];
    /* no scale for an FP8 weight */
    shs_tensor_view only[1] = { { "model.w.weight", SHS_F8_E4M3, 2, k_wshape, g_w } };
    char *d = one_file("noscale", only, 1);
    expect_fail(d, SHS_F32, SHS_ECORRUPT, "no block scale 'model.w.weight_scale_inv'");
    free(d);
    /* a scale of the wrong shape: [3, 2] for [300, 260] */
    shs_tensor_view shp[2] = { only[0],
                               { "model.w.weight_scale_inv", SHS_F32, 2, wrong, g_scale } };
    d = one_file("shape", shp, 2);
    expect_fail(d, SHS_BF16, SHS_ECORRUPT,
                "has shape [3, 2]; weight 'model.w.weight' [300, 260] "
                "needs [3, 3]");
    free(d);
    /* a 1-D scale */
    shs_tensor_view one_d[2] = { only[0],
                                 { "model.w.weight_scale_inv", SHS_F32, 1, flat, g_scale } };
    d = one_file("flat", one_d, 2);
    expect_fail(d, SHS_F32, SHS_ECORRUPT, "has shape [9]");
    free(d);
    /* a scale of an integer dtype */
    shs_tensor_view idt[2] = { only[0],
                               { "model.w.weight_scale_inv", SHS_I32, 2, k_sshape, ints } };
    d = one_file("idtype", idt, 2);
    expect_fail(d, SHS_F32, SHS_ECORRUPT, "is I32, not F32");
    free(d);
    /* a scale next to a weight that is not F8_E4M3 */
    shs_tensor_view nbf[2] = { { "model.w.weight", SHS_BF16, 2, k_wshape, bf },
                               { "model.w.weight_scale_inv", SHS_F32, 2, k_sshape, g_scale } };
    d = one_file("notfp8", nbf, 2);
    expect_fail(d, SHS_F32, SHS_ECORRUPT,
                "has a block scale 'model.w.weight_scale_inv' but is BF16");
    free(d);
    /* an E5M2 weight with a scale: the layout is E4M3's */
    nbf[0].dtype = SHS_F8_E5M2;
    nbf[0].data = g_w;
    d = one_file("e5m2", nbf, 2);
    expect_fail(d, SHS_F32, SHS_ECORRUPT, "but is F8_E5M2");
    free(d);
    /* registered as FP8: nothing to dequantize into */
    d = make_model("asfp8");
    expect_fail(d, SHS_F8_E4M3, SHS_EMISMATCH, "registered as F8_E4M3");
    free(d);
}

static void test_config(void **state)
{
    (void)state;
    shs_config c;
    shs_config_init(&c);
    assert_int_equal(c.initial_load_in_hf_quantized, 0);
    TU_OK(shs_config_set(&c, "initial_load_in_hf_quantized", "true"));
    assert_int_equal(c.initial_load_in_hf_quantized, 1);
    shs_state *st;
    shs_manager *m = NULL;
    TU_OK(shs_state_create(&st));
    c.enable_save = 0;
    /* without initial_load_in_hf */
    c.initial_load_path = "/nowhere";
    assert_int_equal(shs_manager_create(&m, &c, st), SHS_ECONFIG);
    TU_ASSERT_MSG_HAS("initial_load_in_hf_quantized requires initial_load_in_hf");
    /* hf_assets_path does not do for it (torchtitan's rule) */
    c.initial_load_in_hf = 1;
    c.initial_load_path = "";
    c.hf_assets_path = "/nowhere";
    assert_int_equal(shs_manager_create(&m, &c, st), SHS_ECONFIG);
    TU_ASSERT_MSG_HAS("and initial_load_path");
    assert_null(m);
    shs_config_release(&c);
    /* a version-3 struct has no such field */
    shs_config_init(&c);
    c.version = 3;
    assert_int_equal(shs_config_set(&c, "initial_load_in_hf_quantized", "true"), SHS_ECONFIG);
    shs_config_release(&c);
    shs_state_free(st);
}

int main(void)
{
    make_data();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dequant_ranks),
        cmocka_unit_test(test_without_option),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_config),
    };
    return TU_RUN_GROUP(tests, tu_setup_root, tu_teardown_root);
}
