/*
 * hf_fixture.h -- the Hugging Face model of the initial_load_in_hf tests
 * (test_hfload.c, test_hfload_ranks.c): four tensors written as one
 * model.safetensors or two shards with an index, and one rank's job:
 * register its boxes (under other names, in F32 or BF16), load through
 * the manager, compare every element.  Header-only (static functions).
 */
#ifndef SHS_TEST_HF_FIXTURE_H
#define SHS_TEST_HF_FIXTURE_H

#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* not every test program uses every helper */
#define HF_FN static __attribute__((unused))

/* ------------------------------------------------------------------ */
/* The Hugging Face model                                              */
/* ------------------------------------------------------------------ */

enum {
    T_EMBED,
    T_LAYER,
    T_NORM,
    T_HEAD,
    NT
};

static const struct {
    const char *name;
    shs_dtype dt;
    size_t nd;
    uint64_t shape[2];
} k_t[NT] = {
    { "model.embed.weight", SHS_BF16, 2, { 8, 6 } },
    { "model.layers.0.w", SHS_BF16, 2, { 5, 7 } },
    { "model.norm", SHS_F32, 1, { 6 } },
    { "lm_head.weight", SHS_BF16, 2, { 4, 6 } },
};

HF_FN size_t numel(int k)
{
    return (size_t)(k_t[k].nd == 2 ? k_t[k].shape[0] * k_t[k].shape[1] : k_t[k].shape[0]);
}

/* Element i of tensor k: (64k + i + 1) / 4, exact in BF16 (8 significant
   bits), different for every element of every tensor. */
HF_FN float ref(int k, size_t i)
{
    return (float)(64 * k + (int)i + 1) / 4.0f;
}

static float g_f32[NT][64];
static uint16_t g_bf16[NT][64];

HF_FN void make_refs(void)
{
    for (int k = 0; k < NT; k++)
        for (size_t i = 0; i < numel(k); i++) {
            g_f32[k][i] = ref(k, i);
            g_bf16[k][i] = shs_f32_to_bf16(ref(k, i));
        }
}

HF_FN shs_tensor_view view(int k)
{
    shs_tensor_view v = { k_t[k].name, k_t[k].dt, k_t[k].nd, k_t[k].shape,
                          k_t[k].dt == SHS_BF16 ? (const void *)g_bf16[k] : g_f32[k] };
    return v;
}

#define k_shard1 "model-00001-of-00002.safetensors"
#define k_shard2 "model-00002-of-00002.safetensors"

/* A folder with model.safetensors holding all four tensors. */
HF_FN char *make_single(const char *name)
{
    char *dir = tu_subdir(name);
    shs_tensor_view v[NT];
    for (int k = 0; k < NT; k++)
        v[k] = view(k);
    const char *meta[] = { "format", "pt" };
    TU_OK(shs_save_file(tu_path(dir, "model.safetensors"), v, NT, meta, 1, NULL));
    return dir;
}

HF_FN void put_index(const char *dir, const char *weight_map)
{
    char text[2048];
    snprintf(text, sizeof text, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": %s}\n",
             weight_map);
    assert_int_equal(
        tu_write_file(tu_path(dir, "model.safetensors.index.json"), text, strlen(text)), 0);
}

static const char k_good_map[]
    __attribute__((unused)) = "{\"model.embed.weight\": \"model-00001-of-00002.safetensors\", "
                              "\"model.layers.0.w\": \"model-00001-of-00002.safetensors\", "
                              "\"model.norm\": \"model-00002-of-00002.safetensors\", "
                              "\"lm_head.weight\": \"model-00002-of-00002.safetensors\"}";

/* A folder with two shards and the index; a stray .safetensors file the
   index does not name (it must never be opened). */
HF_FN char *make_sharded(const char *name)
{
    char *dir = tu_subdir(name);
    shs_tensor_view a[2] = { view(T_EMBED), view(T_LAYER) }, b[2] = { view(T_NORM), view(T_HEAD) };
    TU_OK(shs_save_file(tu_path(dir, k_shard1), a, 2, NULL, 0, NULL));
    TU_OK(shs_save_file(tu_path(dir, k_shard2), b, 2, NULL, 0, NULL));
    assert_int_equal(tu_write_file(tu_path(dir, "consolidated.safetensors"), "garbage", 7), 0);
    put_index(dir, k_good_map);
    return dir;
}

/* ------------------------------------------------------------------ */
/* One rank's job: register, load, compare                             */
/* ------------------------------------------------------------------ */

/* The box of tensor k this rank holds out of nr: embed split by rows,
   the layer by columns (both uneven for 3 ranks), the norm replicated. */
HF_FN void box_of(int k, int r, int nr, uint64_t *off, uint64_t *shape)
{
    const uint64_t *g = k_t[k].shape;
    if (k == T_EMBED) {
        off[0] = g[0] * (uint64_t)r / (uint64_t)nr;
        shape[0] = g[0] * (uint64_t)(r + 1) / (uint64_t)nr - off[0];
        off[1] = 0;
        shape[1] = g[1];
    } else if (k == T_LAYER) {
        off[0] = 0;
        shape[0] = g[0];
        off[1] = g[1] * (uint64_t)r / (uint64_t)nr;
        shape[1] = g[1] * (uint64_t)(r + 1) / (uint64_t)nr - off[1];
    } else {
        for (size_t d = 0; d < k_t[k].nd; d++) {
            off[d] = 0;
            shape[d] = g[d];
        }
    }
}

HF_FN uint64_t box_numel(int k, const uint64_t *shape)
{
    return k_t[k].nd == 2 ? shape[0] * shape[1] : shape[0];
}

typedef struct job {
    /* in */
    int rank, nr;
    shs_comm *comm;      /* NULL: one process */
    const char *path;    /* initial_load_path ("" to use hf_assets_path) */
    const char *assets;  /* hf_assets_path */
    const char *rules;   /* hf_name_map */
    const char *mapfile; /* hf_name_map_file */
    const char *prefix;  /* registered prefix replacing "model." */
    shs_dtype dt;        /* registered dtype of the BF16 tensors */
    int balanced, workers, strict;
    int register_head;  /* also register lm_head.weight (as "head.weight") */
    int register_extra; /* also register "extra.bias", absent from the files */
    /* out */
    int rc;
    char msg[1024];
    char res_msg[1024];
    char warning[1024];
    uint64_t bytes_read;
    int source, optimizer_loaded, progress_loaded;
    char path_loaded[1024];
    size_t n_skipped;
    char skipped[1024];
    int bad; /* values that differ */
    int master_ok;
    float extra[2];
} job;

HF_FN void run_job(job *j)
{
    shs_state *st = NULL;
    shs_manager *m = NULL;
    uint64_t off[NT][2], shape[NT][2];
    float f[NT][64];
    uint16_t h[NT][64];
    float master[64];
    char names[NT][128], mname[512];
    static const uint64_t extra_shape[1] = { 2 };
    int rc = shs_state_create(&st);
    memset(f, 0xff, sizeof f);
    memset(h, 0xff, sizeof h);
    memset(master, 0, sizeof master);
    j->extra[0] = j->extra[1] = 7.0f;
    for (int k = 0; k < NT && rc == SHS_OK; k++) {
        if (k == T_HEAD && !j->register_head)
            continue;
        box_of(k, j->rank, j->nr, off[k], shape[k]);
        if (k == T_HEAD)
            snprintf(names[k], sizeof names[k], "head.weight");
        else
            snprintf(names[k], sizeof names[k], "%s%s", j->prefix, k_t[k].name + 6);
        shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
        s.name = names[k];
        s.dtype = k_t[k].dt == SHS_BF16 ? j->dt : SHS_F32;
        s.ndim = k_t[k].nd;
        s.shape = shape[k];
        s.global_shape = k_t[k].shape;
        s.global_offset = off[k];
        s.data = s.dtype == SHS_BF16 ? (void *)h[k] : (void *)f[k];
        rc = shs_state_add_tensor(st, &s);
        if (rc == SHS_OK && k == T_LAYER && j->dt == SHS_BF16) {
            /* fp32 master weights of the BF16 layer, refreshed on load */
            snprintf(mname, sizeof mname, "master.%s", names[k]);
            s.name = mname;
            s.kind = SHS_KIND_OPTIMIZER;
            s.dtype = SHS_F32;
            s.data = master;
            s.master_of = names[k];
            rc = shs_state_add_tensor(st, &s);
        }
    }
    if (rc == SHS_OK && j->register_extra) {
        shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
        s.name = "extra.bias";
        s.ndim = 1;
        s.shape = extra_shape;
        s.data = j->extra;
        rc = shs_state_add_tensor(st, &s);
    }
    shs_config c;
    shs_config_init(&c);
    c.enable_save = 0;
    c.initial_load_in_hf = 1;
    c.initial_load_path = j->path;
    c.hf_assets_path = j->assets ? j->assets : "";
    c.hf_name_map = j->rules ? j->rules : "";
    c.hf_name_map_file = j->mapfile ? j->mapfile : "";
    c.load_balanced = j->balanced;
    c.load_worker_number = j->workers ? j->workers : 1;
    c.strict = j->strict;
    if (rc == SHS_OK)
        rc = j->comm ? shs_manager_create_comm(&m, &c, st, j->comm)
                     : shs_manager_create(&m, &c, st);
    shs_progress p = SHS_PROGRESS_INIT;
    p.global_step = 99;
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    if (rc == SHS_OK)
        rc = shs_manager_load(&res, m, &p);
    j->rc = rc;
    snprintf(j->msg, sizeof j->msg, "%s", rc < 0 ? shs_last_error() : "");
    if (rc == SHS_OK) {
        snprintf(j->res_msg, sizeof j->res_msg, "%s", res.message);
        snprintf(j->path_loaded, sizeof j->path_loaded, "%s", res.path);
        const char *w = shs_manager_warning(m);
        snprintf(j->warning, sizeof j->warning, "%s", w ? w : "");
        j->bytes_read = res.bytes_read;
        j->source = res.source;
        j->optimizer_loaded = res.optimizer_loaded;
        j->progress_loaded = res.progress_loaded;
        j->n_skipped = res.n_skipped;
        j->skipped[0] = 0;
        for (size_t i = 0; i < res.n_skipped; i++)
            snprintf(j->skipped + strlen(j->skipped), sizeof j->skipped - strlen(j->skipped), "%s;",
                     res.skipped[i]);
        if (p.global_step != 99)
            j->bad++;
        /* every element of every box, against the reference */
        for (int k = 0; k < NT; k++) {
            if (k == T_HEAD && !j->register_head)
                continue;
            uint64_t cols = k_t[k].nd == 2 ? shape[k][1] : shape[k][0];
            uint64_t gcols = k_t[k].nd == 2 ? k_t[k].shape[1] : k_t[k].shape[0];
            for (uint64_t e = 0; e < box_numel(k, shape[k]); e++) {
                uint64_t row = k_t[k].nd == 2 ? e / cols + off[k][0] : 0;
                uint64_t col = e % cols + off[k][k_t[k].nd - 1];
                float want = ref(k, (size_t)(row * gcols + col));
                int bf = k_t[k].dt == SHS_BF16 && j->dt == SHS_BF16;
                float got = bf ? shs_bf16_to_f32(h[k][e]) : f[k][e];
                j->bad += got != want;
                if (bf && k == T_LAYER)
                    j->bad += master[e] != want;
            }
        }
        j->master_ok = j->dt == SHS_BF16 && !j->bad;
    }
    shs_manager_free(m);
    shs_state_free(st);
}

HF_FN job job_default(const char *path)
{
    job j;
    memset(&j, 0, sizeof j);
    j.nr = 1;
    j.path = path;
    j.prefix = "backbone.";
    j.rules = "model.=backbone.";
    j.dt = SHS_F32;
    j.strict = 1;
    return j;
}

HF_FN void expect_ok(const job *j)
{
    if (j->rc != SHS_OK)
        fail_msg("rank %d: %d %s", j->rank, j->rc, j->msg);
    if (j->bad)
        fail_msg("rank %d: %d wrong values", j->rank, j->bad);
}

/* Bytes of the boxes rank r of nr holds, in the files' dtypes (lm_head
   not registered). */
HF_FN uint64_t box_bytes(int r, int nr)
{
    uint64_t off[2], shape[2], total = 0;
    for (int k = 0; k < T_HEAD; k++) {
        box_of(k, r, nr, off, shape);
        total += box_numel(k, shape) * shs_dtype_bits(k_t[k].dt) / 8;
    }
    return total;
}

#endif
