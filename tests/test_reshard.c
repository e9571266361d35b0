/*
 * test_reshard.c -- offline reshard (shs_reshard) and the layouts every
 * save records: a checkpoint saved by 4 ranks (threads over a test
 * communicator, with remove_redundancy), its recorded layout, resharded
 * to 2 ranks by scaling it and to 3 ranks by a layout file (split, mesh,
 * replicated, explicit boxes); the output loaded by that many ranks whose
 * registered chunks are the target boxes, reading exactly the bytes they
 * need; the chunks of the output equal the target boxes; every bad input an error
 * naming the tensor, with nothing left behind, also under failed
 * allocations.  The layout vocabulary alone: test_layout_spec.c.
 */
#include "testutil.h"

#include "tools/layout_spec.h"
#include "source/meta.h"

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* A communicator of up to 8 threads                                   */
/* ------------------------------------------------------------------ */

#define MAXR 8

#include "threadcomm.h"

/* ------------------------------------------------------------------ */
/* The global tensors and the layouts                                  */
/* ------------------------------------------------------------------ */

enum {
    T_W,
    T_H,
    T_R,
    T_OW,
    NT
};
typedef struct tdef {
    const char *name;
    shs_kind kind;
    shs_dtype dt;
    size_t nd;
    uint64_t g[2];
} tdef;
static const tdef k_t[NT] = {
    { "w", SHS_KIND_MODEL, SHS_F32, 2, { 8, 6 } },
    { "h", SHS_KIND_MODEL, SHS_BF16, 2, { 4, 8 } },
    { "r", SHS_KIND_MODEL, SHS_F32, 1, { 3, 0 } },
    { "opt.w", SHS_KIND_OPTIMIZER, SHS_F32, 2, { 8, 6 } },
};
static float g_w[48], g_r[3], g_ow[48];
static uint16_t g_h[32];
static const void *const g_ref[NT] = { g_w, g_h, g_r, g_ow };

static void make_refs(void)
{
    for (int i = 0; i < 48; i++) {
        g_w[i] = 1.0f + (float)i * 0.5f;
        g_ow[i] = -2.0f - (float)i * 0.125f;
    }
    for (int i = 0; i < 32; i++)
        g_h[i] = shs_f32_to_bf16((float)i * 1.5f - 7.0f);
    for (int i = 0; i < 3; i++)
        g_r[i] = 100.0f + (float)i;
}

/* The box of tensor t on `rank`; 0 when the rank holds none. */
typedef int (*box_fn)(int t, int rank, uint64_t *off, uint64_t *shape);

/* Saved: TP 4 -- w and opt.w by rows, h by columns, r replicated. */
static int box_tp4(int t, int r, uint64_t *off, uint64_t *shape)
{
    const uint64_t *g = k_t[t].g;
    off[0] = off[1] = 0;
    shape[0] = g[0], shape[1] = g[1];
    if (t == T_W || t == T_OW)
        off[0] = 2u * (unsigned)r, shape[0] = 2;
    if (t == T_H)
        off[1] = 2u * (unsigned)r, shape[1] = 2;
    return 1;
}

/* The same scaled to TP 2. */
static int box_tp2(int t, int r, uint64_t *off, uint64_t *shape)
{
    const uint64_t *g = k_t[t].g;
    off[0] = off[1] = 0;
    shape[0] = g[0], shape[1] = g[1];
    if (t == T_W || t == T_OW)
        off[0] = 4u * (unsigned)r, shape[0] = 4;
    if (t == T_H)
        off[1] = 4u * (unsigned)r, shape[1] = 4;
    return 1;
}

/* k_layout3 on 3 ranks: w and opt.w by columns, h one row on rank 0 and
   three rows replicated on ranks 1 and 2, r replicated. */
static const char k_layout3[] =
    "{\"world_size\": 3, \"tensors\": {"
    " \"w\": {\"split_dim\": 1, \"ranks\": 3},"
    " \"opt.*\": {\"device_matrix\": [3], \"tensor_map\": [-1, 0], \"alias_name\": [\"tp\"]},"
    " \"h\": {\"boxes\": [{\"rank\": 0, \"offset\": [0, 0], \"shape\": [1, 8]},"
    "                   {\"rank\": 1, \"offset\": [1, 0], \"shape\": [3, 8]},"
    "                   {\"rank\": 2, \"offset\": [1, 0], \"shape\": [3, 8]}]},"
    " \"*\": {\"replicated\": true}}}";

static int box_3(int t, int r, uint64_t *off, uint64_t *shape)
{
    const uint64_t *g = k_t[t].g;
    off[0] = off[1] = 0;
    shape[0] = g[0], shape[1] = g[1];
    if (t == T_W || t == T_OW)
        off[1] = 2u * (unsigned)r, shape[1] = 2;
    if (t == T_H) {
        off[0] = r ? 1 : 0;
        shape[0] = r ? 3 : 1;
    }
    return 1;
}

/* Copy box (off, shape) of a 1-D or 2-D global tensor out of / into
   `whole`. */
static void box_copy(int t, const uint64_t *off, const uint64_t *shape, void *box, int out)
{
    const tdef *d = &k_t[t];
    size_t es = shs_dtype_bits(d->dt) / 8;
    uint64_t rows = d->nd == 2 ? shape[0] : 1, cols = d->nd == 2 ? shape[1] : shape[0];
    for (uint64_t i = 0; i < rows; i++) {
        uint64_t at = d->nd == 2 ? (off[0] + i) * d->g[1] + off[1] : off[0];
        char *b = (char *)box + i * cols * es;
        char *w = (char *)g_ref[t] + at * es;
        if (out)
            memcpy(b, w, cols * es);
        else if (memcmp(b, w, cols * es) != 0)
            fail_msg("tensor %s differs in row %llu", d->name, (unsigned long long)i);
    }
}

/* ------------------------------------------------------------------ */
/* Ranks as threads: save, or load and compare                        */
/* ------------------------------------------------------------------ */

typedef struct job {
    tshared *sh;
    int rank;
    box_fn box;
    const char *path;
    int save, remove_redundancy;
    int rc;
    char msg[512];
    uint64_t needed;
    shs_load_result res;
    float buf_f[NT][48];
    uint16_t buf_h[32];
    uint64_t off[NT][2], shape[NT][2];
    int held[NT];
    char blob[64];
    size_t blob_len;
} job;

static void *rank_main(void *arg)
{
    job *j = arg;
    shs_state *st = NULL;
    shs_comm *comm = NULL;
    shs_manager *m = NULL;
    tcomm tc = { j->sh, j->rank };
    shs_config c;
    shs_progress p = tu_prog(12);
    shs_state_create(&st);
    for (int t = 0; t < NT; t++) {
        if (!(j->held[t] = j->box(t, j->rank, j->off[t], j->shape[t])))
            continue;
        void *buf = t == T_H ? (void *)j->buf_h : (void *)j->buf_f[t];
        memset(buf, 0, t == T_H ? sizeof j->buf_h : sizeof j->buf_f[0]);
        if (j->save)
            box_copy(t, j->off[t], j->shape[t], buf, 1);
        shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
        s.name = k_t[t].name;
        s.kind = k_t[t].kind;
        s.dtype = k_t[t].dt;
        s.ndim = k_t[t].nd;
        s.shape = j->shape[t];
        s.global_shape = k_t[t].g;
        s.global_offset = j->off[t];
        s.data = buf;
        shs_state_add_tensor(st, &s);
        j->needed += (k_t[t].nd == 2 ? j->shape[t][0] * j->shape[t][1] : j->shape[t][0]) *
                     (shs_dtype_bits(k_t[t].dt) / 8);
    }
    char blob[32];
    snprintf(blob, sizeof blob, "rng-of-rank-%d", j->rank);
    shs_state_set_blob(st, "rng", blob, strlen(blob));
    if (j->save) {
        tu_cfg_saving(&c, j->path);
        c.remove_redundancy = j->remove_redundancy;
    } else {
        shs_config_init(&c);
        c.enable_save = 0;
        c.load_path = j->path;
        p = (shs_progress)SHS_PROGRESS_INIT;
        p.global_batch_size = 32;
    }
    j->res = (shs_load_result)SHS_LOAD_RESULT_INIT;
    int rc = shs_comm_create(&comm, j->rank, j->sh->n, &k_tops, &tc);
    if (rc == SHS_OK)
        rc = shs_manager_create_comm(&m, &c, st, comm);
    if (rc == SHS_OK && j->save && (rc = shs_manager_save(m, &p, 0)) == SHS_OK)
        rc = shs_manager_wait(m);
    if (rc == SHS_OK && !j->save)
        rc = shs_manager_load(&j->res, m, &p);
    const void *bd = NULL;
    if (rc == SHS_OK && !j->save && shs_state_get_blob(st, "rng", &bd, &j->blob_len) == SHS_OK &&
        j->blob_len < sizeof j->blob)
        memcpy(j->blob, bd, j->blob_len);
    j->rc = rc;
    snprintf(j->msg, sizeof j->msg, "%s", shs_last_error());
    shs_manager_free(m);
    shs_comm_free(comm);
    shs_state_free(st);
    return NULL;
}

/* Run n ranks; each must succeed.  Loading: each rank's buffers hold the
   global values of its boxes and it read exactly the bytes it needs. */
static void run_ranks(int n, box_fn box, const char *path, int save, int rr, job *jobs)
{
    tshared sh;
    pthread_t th[MAXR];
    tshared_init(&sh, n, 0);
    for (int r = 0; r < n; r++) {
        memset(&jobs[r], 0, sizeof jobs[r]);
        jobs[r].sh = &sh;
        jobs[r].rank = r;
        jobs[r].box = box;
        jobs[r].path = path;
        jobs[r].save = save;
        jobs[r].remove_redundancy = rr;
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &jobs[r]), 0);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    tshared_destroy(&sh);
    for (int r = 0; r < n; r++) {
        if (jobs[r].rc != SHS_OK)
            fail_msg("rank %d: %d %s", r, jobs[r].rc, jobs[r].msg);
        if (save)
            continue;
        assert_int_equal(jobs[r].res.loaded, 1);
        /* no reshard: every rank reads exactly its own chunks */
        assert_int_equal(jobs[r].res.bytes_read, jobs[r].needed);
        for (int t = 0; t < NT; t++)
            if (jobs[r].held[t])
                box_copy(t, jobs[r].off[t], jobs[r].shape[t],
                         t == T_H ? (void *)jobs[r].buf_h : (void *)jobs[r].buf_f[t], 0);
    }
}

/* Every chunk of `dir` is the box its file's rank should hold, and every
   rank's box is there. */
static void assert_chunks(const char *dir, int world, box_fn box)
{
    shs_checkpoint *ck;
    TU_OK(shs_checkpoint_open(&ck, dir, NULL));
    assert_int_equal(shs_checkpoint_world_size(ck), world);
    assert_int_equal(shs_checkpoint_tensor_count(ck), NT);
    for (int t = 0; t < NT; t++) {
        size_t i;
        TU_OK(shs_checkpoint_find(&i, ck, k_t[t].name));
        const shs_checkpoint_tensor_info *ti = shs_checkpoint_tensor(ck, i);
        int seen[MAXR] = { 0 };
        for (size_t c = 0; c < ti->n_chunks; c++) {
            shs_chunk_info ci = SHS_CHUNK_INFO_INIT;
            uint64_t off[2], shape[2];
            TU_OK(shs_checkpoint_chunk(&ci, ck, i, c));
            int r = shs_checkpoint_file_rank(ck, ci.file);
            assert_true(r >= 0 && r < world);
            assert_true(box(t, r, off, shape));
            assert_memory_equal(ci.offset, off, k_t[t].nd * 8);
            assert_memory_equal(ci.shape, shape, k_t[t].nd * 8);
            seen[r]++;
        }
        for (int r = 0; r < world; r++)
            assert_int_equal(seen[r], 1);
    }
    shs_checkpoint_free(ck);
    TU_OK(shs_checkpoint_verify(dir, NULL, 0));
}

static char *g_sp; /* the 4-rank save path, step 12 */

static int setup(void **state)
{
    if (tu_setup_root(state) != 0)
        return -1;
    make_refs();
    g_sp = tu_subpath("tp4");
    job jobs[4];
    run_ranks(4, box_tp4, g_sp, 1, 1, jobs);
    return 0;
}

static int teardown(void **state)
{
    free(g_sp);
    return tu_teardown_root(state);
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */
/* ------------------------------------------------------------------ */

static json_t *spec_of(const json_t *doc, const char *name)
{
    json_t *s = json_object_get(json_object_get(doc, "tensors"), name);
    if (!s)
        fail_msg("no layout for '%s'", name);
    return s;
}

static void assert_json(const json_t *v, const char *want)
{
    json_error_t e;
    json_t *w = json_loads(want, 0, &e);
    assert_non_null(w);
    if (!json_equal(v, w)) {
        char *have = json_dumps(v, JSON_COMPACT);
        fail_msg("layout %s, expected %s", have, want);
    }
    json_decref(w);
}

/* The save recorded the layout of every tensor in MindSpore's
   vocabulary, replicas included although remove_redundancy wrote r once. */
static void test_recorded_layout(void **state)
{
    (void)state;
    char *text = NULL;
    TU_OK(shs_reshard_saved_layout(&text, g_sp, -1));
    json_error_t e;
    json_t *doc = json_loads(text, 0, &e);
    shs_free(text);
    assert_non_null(doc);
    assert_int_equal(json_integer_value(json_object_get(doc, "world_size")), 4);
    assert_json(spec_of(doc, "w"), "{\"device_matrix\": [4], \"tensor_map\": [0, -1]}");
    assert_json(spec_of(doc, "opt.w"), "{\"device_matrix\": [4], \"tensor_map\": [0, -1]}");
    assert_json(spec_of(doc, "h"), "{\"device_matrix\": [4], \"tensor_map\": [-1, 0]}");
    assert_json(spec_of(doc, "r"), "{\"device_matrix\": [4], \"tensor_map\": [-1]}");
    json_decref(doc);
    /* r is written once (remove_redundancy): the chunks alone would not
       say who holds it */
    shs_checkpoint *ck;
    size_t i;
    TU_OK(shs_checkpoint_open(&ck, g_sp, NULL));
    TU_OK(shs_checkpoint_find(&i, ck, "r"));
    assert_int_equal(shs_checkpoint_tensor(ck, i)->n_chunks, 1);
    shs_checkpoint_free(ck);
}

/* "Same as saved, TP 4 -> 2": the recorded layout scaled to 2 ranks. */
static void test_scale_to_2(void **state)
{
    (void)state;
    char *dst = tu_subpath("tp2");
    shs_reshard_opts o = SHS_RESHARD_OPTS_INIT;
    shs_reshard_result r = SHS_RESHARD_RESULT_INIT;
    o.world_size = 2;
    o.fsync = 0;
    TU_OK(shs_reshard(&r, g_sp, dst, NULL, &o));
    assert_int_equal(r.world_size, 2);
    assert_int_equal(r.saved_world_size, 4);
    assert_int_equal(r.step, 12);
    assert_int_equal(r.scaled, 1);
    assert_int_equal(r.layout_recorded, 1);
    assert_int_equal(r.n_tensors, NT);
    /* w, opt.w, h once; r on both ranks */
    assert_int_equal(r.bytes_written, 48 * 4 * 2 + 32 * 2 + 3 * 4 * 2);
    assert_int_equal(r.bytes_read, r.bytes_written);
    assert_int_equal(r.blobs_carried, 2);
    assert_int_equal(r.blobs_dropped, 2);
    assert_chunks(dst, 2, box_tp2);
    /* the output records its own layout */
    char *text = NULL;
    TU_OK(shs_reshard_saved_layout(&text, dst, -1));
    json_error_t e;
    json_t *doc = json_loads(text, 0, &e);
    shs_free(text);
    assert_json(spec_of(doc, "h"), "{\"device_matrix\": [2], \"tensor_map\": [-1, 0]}");
    json_decref(doc);
    /* progress carried over */
    shs_progress p = SHS_PROGRESS_INIT;
    TU_OK(shs_checkpoint_read_progress(&p, dst));
    assert_int_equal(p.global_step, 12);
    assert_int_equal(p.consumed_samples, 12 * 32);
    /* 2 ranks load it, each reading exactly its chunks */
    job jobs[2];
    run_ranks(2, box_tp2, dst, 0, 0, jobs);
    assert_int_equal(jobs[0].res.saved_world_size, 2);
    assert_int_equal(jobs[0].res.optimizer_loaded, 1);
    free(dst);
}

/* A layout file: split, mesh (by glob), explicit boxes with a replica,
   replicated by "*", on 3 ranks. */
static void test_layout_file_3(void **state)
{
    (void)state;
    char *dst = tu_subpath("three"), *lf = tu_subpath("layout3.json");
    assert_int_equal(tu_write_file(lf, k_layout3, strlen(k_layout3)), 0);
    shs_reshard_result r = SHS_RESHARD_RESULT_INIT;
    TU_OK(shs_reshard(&r, g_sp, dst, lf, NULL));
    assert_int_equal(r.world_size, 3);
    assert_int_equal(r.scaled, 0);
    assert_int_equal(r.blobs_carried, 3);
    assert_int_equal(r.blobs_dropped, 1);
    assert_chunks(dst, 3, box_3);
    job jobs[3];
    run_ranks(3, box_3, dst, 0, 0, jobs);
    assert_int_equal(tu_count_entries(tu_root) >= 0, 1);
    assert_int_equal(tu_count_prefixed(tu_root, ".tmp-"), 0);
    free(dst);
    free(lf);
}

/* Back to 4 ranks from the 2-rank output, by its recorded layout: the
   same world as saved, the same blobs. */
static void test_roundtrip_world(void **state)
{
    (void)state;
    char *mid = tu_subpath("rt2"), *back = tu_subpath("rt4");
    shs_reshard_opts o = SHS_RESHARD_OPTS_INIT;
    o.world_size = 2;
    o.fsync = 0;
    TU_OK(shs_reshard(NULL, g_sp, mid, NULL, &o));
    o.world_size = 4;
    TU_OK(shs_reshard(NULL, mid, back, NULL, &o));
    assert_chunks(back, 4, box_tp4);
    /* same world as the original: the copy keeps every rank's blob */
    char *dst = tu_subpath("same4");
    shs_reshard_result r = SHS_RESHARD_RESULT_INIT;
    TU_OK(shs_reshard(&r, g_sp, dst, NULL, &o));
    assert_int_equal(r.scaled, 0);
    assert_int_equal(r.blobs_carried, 4);
    job jobs[4];
    run_ranks(4, box_tp4, dst, 0, 0, jobs);
    for (int k = 0; k < 4; k++) {
        char want[32];
        snprintf(want, sizeof want, "rng-of-rank-%d", k);
        assert_int_equal(jobs[k].res.rank_state_restored, 1);
        assert_int_equal(jobs[k].blob_len, strlen(want));
        assert_memory_equal(jobs[k].blob, want, strlen(want));
    }
    free(mid);
    free(back);
    free(dst);
}

/* A plain safetensors file (no metadata.json) split over 2 ranks. */
static void test_plain_source(void **state)
{
    (void)state;
    char *f = tu_subpath("plain.safetensors"), *dst = tu_subpath("plain2");
    char *lf = tu_subpath("plain.json");
    shs_tensor_view v = { "w", SHS_F32, 2, k_t[T_W].g, g_w };
    TU_OK(shs_save_file(f, &v, 1, NULL, 0, NULL));
    const char *lay = "{\"tensors\": {\"w\": {\"split_dim\": 0}}}";
    assert_int_equal(tu_write_file(lf, lay, strlen(lay)), 0);
    /* no world_size anywhere */
    assert_int_equal(shs_reshard(NULL, f, dst, lf, NULL), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("world_size");
    shs_reshard_opts o = SHS_RESHARD_OPTS_INIT;
    o.world_size = 2;
    TU_OK(shs_reshard(NULL, f, dst, lf, &o));
    shs_checkpoint *ck;
    TU_OK(shs_checkpoint_open(&ck, dst, NULL));
    assert_int_equal(shs_checkpoint_world_size(ck), 2);
    float all[48];
    TU_OK(shs_checkpoint_read(ck, 0, NULL, NULL, SHS_F32, all, sizeof all));
    assert_memory_equal(all, g_w, sizeof all);
    assert_int_equal(shs_checkpoint_tensor(ck, 0)->n_chunks, 2);
    shs_checkpoint_free(ck);
    free(f);
    free(dst);
    free(lf);
}

/* Each bad input: its status, a message naming the problem, and nothing
   left behind (no destination, no temporary). */
typedef struct bad_case {
    const char *layout; /* NULL: the saved one */
    int world;
    const char *needle;
} bad_case;

static void test_bad_input(void **state)
{
    (void)state;
    static const bad_case cases[] = {
        { "{\"world_size\": 4, \"tensors\": {\"w\": {\"replicated\": true}}}", 0,
          "does not cover tensor 'h'" },
        { "{\"world_size\": 3, \"tensors\": {\"w\": {\"split_dim\": 0}, \"*\": {\"replicated\": "
          "true}}}",
          0, "tensor 'w': dimension 0 (size 8) does not divide into 3" },
        { "{\"world_size\": 2, \"tensors\": {\"nope\": {\"replicated\": true}, \"*\": "
          "{\"replicated\": true}}}",
          0, "tensor 'nope' is not in the checkpoint" },
        { "{\"world_size\": 2, \"tensors\": {\"model.*\": {\"replicated\": true}, \"*\": "
          "{\"replicated\": true}}}",
          0, "'model.*' matches no tensor" },
        { "{\"world_size\": 2, \"tensors\": {\"h\": {\"boxes\": [{\"rank\": 0, \"offset\": [0, "
          "0], \"shape\": [2, 8]}, {\"rank\": 1, \"offset\": [3, 0], \"shape\": [1, 8]}]}, \"*\": "
          "{\"replicated\": true}}}",
          0, "tensor 'h': the boxes cover 24 of its 32 elements" },
        { "{\"world_size\": 2, \"tensors\": {\"h\": {\"boxes\": [{\"rank\": 0, \"offset\": [0, "
          "0], \"shape\": [3, 8]}, {\"rank\": 1, \"offset\": [2, 0], \"shape\": [2, 8]}]}, \"*\": "
          "{\"replicated\": true}}}",
          0, "tensor 'h': the boxes of ranks 0 and 1 overlap" },
        { "{\"world_size\": 2, \"tensors\": {\"h\": {\"boxes\": [{\"rank\": 0, \"offset\": [0, "
          "0], \"shape\": [5, 8]}]}, \"*\": {\"replicated\": true}}}",
          0, "tensor 'h': box 0 is outside the tensor" },
        { "{\"world_size\": 2, \"tensors\": {\"*\": {\"device_matrix\": [2], \"tensor_map\": "
          "[0]}}}",
          0, "tensor 'h': \"tensor_map\" must be an array of 2 entries" },
        { "{\"world_size\": 2, \"tensors\": {\"*\": {\"device_matrix\": [2], \"tensor_map\": "
          "[0, 0], \"rank_list\": [0, 1]}}}",
          0, "each axis used once" },
        { "{\"world_size\": 2, \"tensors\": {\"*\": {\"device_matrix\": [2], \"tensor_map\": "
          "[-1, 0], \"rank_list\": [0, 2]}}}",
          0, "\"rank_list\" entry 1 must be a rank from 0 to 1" },
        { "{\"world_size\": 2, \"tensors\": {\"*\": {\"device_matrix\": [2], \"tensor_map\": "
          "[-1, 0], \"interleaved_parallel\": true}}}",
          0, "\"interleaved_parallel\" layouts are not supported" },
        { "{\"world_size\": 2, \"tensors\": {\"*\": {\"replicated\": true, \"colour\": 1}}}", 0,
          "{\"replicated\": true}" },
        { "{\"world_size\": 2, \"tensors\": {\"*\": {\"device_matrix\": [4], \"tensor_map\": "
          "[-1, 0]}}}",
          0, "device_matrix has 4 positions but the world has 2 ranks" },
        { "{\"world_size\": 2, \"tensorz\": {}}", 0, "\"tensors\"" },
        { "{\"world_size\": 0, \"tensors\": {}}", 0, "\"world_size\" must be an integer" },
        { "{\"world_size\": 2, \"tensors\": {\"*\": 5}}", 0, "a layout must be a JSON object" },
        { "{\"world_size\": 2, \"tensors\": {\"w\": {}, \"w\": {}}}", 0, "invalid JSON" },
        { "[1, 2", 0, "invalid JSON" },
        /* the saved layout scaled to a world its splits do not take */
        { NULL, 3, "the saved layout: tensor 'h': dimension 1 (size 8) does not divide into 3" },
        /* explicit boxes cannot be scaled */
        { "{\"world_size\": 2, \"tensors\": {\"*\": {\"boxes\": [{\"rank\": 0, \"offset\": [0, "
          "0], \"shape\": [8, 6]}]}}}",
          4, "explicit boxes cannot be scaled" },
    };
    char *lf = tu_subpath("bad.json"), *dst = tu_subpath("bad_out");
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const bad_case *c = &cases[k];
        if (c->layout)
            assert_int_equal(tu_write_file(lf, c->layout, strlen(c->layout)), 0);
        shs_reshard_opts o = SHS_RESHARD_OPTS_INIT;
        o.world_size = c->world;
        int rc = shs_reshard(NULL, g_sp, dst, c->layout ? lf : NULL, &o);
        if (rc != SHS_EINVAL || !strstr(shs_last_error(), c->needle))
            fail_msg("case %zu: %d '%s', expected '%s'", k, rc, shs_last_error(), c->needle);
        assert_false(tu_path_exists(dst));
        assert_int_equal(tu_count_prefixed(tu_root, ".tmp-"), 0);
    }
    /* an existing destination is never replaced */
    assert_int_equal(shs_reshard(NULL, g_sp, tu_root, NULL, NULL), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("exists");
    /* a destination named for another step */
    char *it = tu_subpath("iteration_00000005");
    assert_int_equal(shs_reshard(NULL, g_sp, it, NULL, NULL), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("named for step 5 but the checkpoint is of step 12");
    assert_false(tu_path_exists(it));
    /* a destination whose folder is missing; a missing source */
    assert_int_equal(shs_reshard(NULL, g_sp, tu_path(lf, "x"), NULL, NULL) < 0, 1);
    char *none = tu_subpath("none");
    assert_int_equal(shs_reshard(NULL, none, dst, NULL, NULL) < 0, 1);
    assert_false(tu_path_exists(dst));
    /* option structs are versioned */
    shs_reshard_opts o = SHS_RESHARD_OPTS_INIT;
    o.version = 0;
    assert_int_equal(shs_reshard(NULL, g_sp, dst, NULL, &o), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("SHS_RESHARD_OPTS_INIT");
    shs_reshard_result r = SHS_RESHARD_RESULT_INIT;
    r.version = 99;
    assert_int_equal(shs_reshard(&r, g_sp, dst, NULL, NULL), SHS_EINVAL);
    assert_int_equal(tu_count_prefixed(tu_root, ".tmp-"), 0);
    free(lf);
    free(dst);
    free(it);
    free(none);
}

/* A corrupted chunk of the source: the checksum error, nothing written. */
static void test_corrupt_source(void **state)
{
    (void)state;
    char *src = tu_subpath("corrupt"), *dst = tu_subpath("corrupt_out");
    shs_reshard_opts o = SHS_RESHARD_OPTS_INIT;
    o.fsync = 0;
    TU_OK(shs_reshard(NULL, g_sp, src, NULL, &o));
    /* flip the last byte of rank 1's model file (tensor data) */
    const char *mf = tu_path(src, "checkpoint-model-0000001-0000004.safetensors");
    size_t len;
    unsigned char *d = tu_read_file(mf, &len);
    assert_non_null(d);
    d[len - 1] ^= 1;
    assert_int_equal(tu_write_file(mf, d, len), 0);
    free(d);
    o.world_size = 2;
    assert_int_equal(shs_reshard(NULL, src, dst, NULL, &o), SHS_ECHECKSUM);
    assert_false(tu_path_exists(dst));
    assert_int_equal(tu_count_prefixed(tu_root, ".tmp-"), 0);
    free(src);
    free(dst);
}

static json_t *J(const char *text);
/* metadata.json of `dir` with "layouts" replaced by `layouts` (JSON
   text), resealed as a save would. */
static void set_recorded(const char *dir, const char *layouts)
{
    const char *mp = tu_path(dir, "metadata.json");
    json_error_t e;
    json_t *m = json_load_file(mp, 0, &e);
    assert_non_null(m);
    assert_int_equal(json_object_set_new(m, "layouts", J(layouts)), 0);
    tu_meta_reseal(mp, m);
    json_decref(m);
}

/* A recorded layout is input like any other: validated when used, and
   ignored by loading and verify. */
static void test_hostile_recorded(void **state)
{
    (void)state;
    char *src = tu_subpath("hr"), *dst = tu_subpath("hr_out");
    shs_reshard_opts o = SHS_RESHARD_OPTS_INIT;
    o.fsync = 0;
    TU_OK(shs_reshard(NULL, g_sp, src, NULL, &o));
    set_recorded(src, "{\"world_size\": 4, \"tensors\": {\"w\": {\"boxes\": [{\"rank\": 0, "
                      "\"offset\": [0, 0], \"shape\": [7, 6]}]}, \"*\": {\"replicated\": "
                      "true}}}");
    TU_OK(shs_checkpoint_verify(src, NULL, 0));
    assert_int_equal(shs_reshard(NULL, src, dst, NULL, &o), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("the saved layout: tensor 'w': the boxes cover 42 of its 48 elements");
    set_recorded(src, "[4]");
    assert_int_equal(shs_reshard(NULL, src, dst, NULL, &o), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("the saved layout: a layout is a JSON object");
    set_recorded(src, "{\"world_size\": 4, \"tensors\": {\"x\": {\"replicated\": true}}}");
    assert_int_equal(shs_reshard(NULL, src, dst, NULL, &o), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("tensor 'x' is not in the checkpoint");
    assert_false(tu_path_exists(dst));
    assert_int_equal(tu_count_prefixed(tu_root, ".tmp-"), 0);
    /* a layout file still works on it */
    char *lf = tu_subpath("hr.json");
    assert_int_equal(tu_write_file(lf, k_layout3, strlen(k_layout3)), 0);
    TU_OK(shs_reshard(NULL, src, dst, lf, &o));
    assert_chunks(dst, 3, box_3);
    free(src);
    free(dst);
    free(lf);
}

/* Allocations failing in turn: an error, never a crash, nothing left
   behind, no leak. */
static void test_failalloc(void **state)
{
    (void)state;
    char *dst = tu_subpath("fa_out");
    shs_reshard_opts o = SHS_RESHARD_OPTS_INIT;
    o.world_size = 2;
    o.fsync = 0;
    tu_failalloc_install();
    long live = tu_failalloc_live();
    tu_failalloc_arm(LONG_MAX); /* counts, never fails */
    TU_OK(shs_reshard(NULL, g_sp, dst, NULL, &o));
    long total = tu_failalloc_count();
    tu_rmtree(dst);
    assert_true(total > 10);
    /* every allocation takes ~45 s here; by default every k-th (about
       400 of them, the first 64 all), every one with
       SHS_TEST_LONG=1 */
    long stride = getenv("SHS_TEST_LONG") ? 1 : total / 400 + 1;
    for (long n = 1; n <= total; n += (n < 64 ? 1 : stride)) {
        tu_failalloc_arm(n);
        int rc = shs_reshard(NULL, g_sp, dst, NULL, &o);
        tu_failalloc_arm(0);
        if (rc == SHS_OK) {
            tu_rmtree(dst);
            continue;
        }
        assert_true(rc < 0);
        assert_false(tu_path_exists(dst));
        assert_int_equal(tu_count_prefixed(tu_root, ".tmp-"), 0);
        assert_int_equal(tu_failalloc_live(), live);
    }
    tu_failalloc_uninstall();
    free(dst);
}

static json_t *J(const char *text)
{
    json_error_t e;
    json_t *v = json_loads(text, 0, &e);
    if (!v)
        fail_msg("bad test JSON %s: %s", text, e.text);
    return v;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recorded_layout), cmocka_unit_test(test_scale_to_2),
        cmocka_unit_test(test_layout_file_3),   cmocka_unit_test(test_roundtrip_world),
        cmocka_unit_test(test_plain_source),    cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_corrupt_source),  cmocka_unit_test(test_hostile_recorded),
        cmocka_unit_test(test_failalloc),
    };
    return TU_RUN_GROUP(tests, setup, teardown);
}
