/*
 * test_merge.c -- shs_merge / shs_merge_finish: checkpoints saved by 4
 * ranks (threads over a test communicator), with and without
 * remove_redundancy, merged into the Hugging Face layout and read back
 * element by element; tiny buffers so that tensors are cut into many
 * boxes (rows, pieces of rows, 3-D); shard packing and the index text;
 * dtype conversion; jobs and parts give byte-identical files; every bad
 * option; a corrupted chunk, an existing destination, cancellation and
 * the N-th I/O call failing (every call, in turn) leave no output and no
 * temporary behind.
 */
#include "testutil.h"

#include "store/io.h"
#include "tools/merge.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- a communicator of 4 threads ---- */

#define NR 4

#include "threadcomm.h"

/* ---- the 4-rank checkpoint ----
     model.w  F32  [8, 6]     rows 2r..2r+1
     model.e  F32  [5, 7]     2 x 2 grid, uneven
     model.h  BF16 [4, 8]     columns 2r..2r+1
     model.r  F32  [3]        replicated on every rank
     model.c  F32  [4, 3, 5]  dim 0 split: rank r holds [r]
     model.i  I32  [4, 2]     rows
     opt.w    F32  [8, 6]     optimizer, rows                          */
static const uint64_t k_w[2] = { 8, 6 }, k_e[2] = { 5, 7 }, k_h[2] = { 4, 8 }, k_r[1] = { 3 },
                      k_c[3] = { 4, 3, 5 }, k_i[2] = { 4, 2 };
static float g_w[48], g_e[35], g_r[3], g_c[60], g_o[48];
static uint16_t g_h[32];
static int32_t g_i[8];

static void make_refs(void)
{
    for (int i = 0; i < 48; i++) {
        g_w[i] = 1.0f + (float)i * 0.5f;
        g_o[i] = -(float)i * 0.125f;
    }
    for (int i = 0; i < 35; i++)
        g_e[i] = -3.0f + (float)i * 0.25f + 1.0f / 3.0f; /* not exact in BF16 */
    for (int i = 0; i < 32; i++)
        g_h[i] = shs_f32_to_bf16((float)i * 1.5f - 7.0f);
    for (int i = 0; i < 3; i++)
        g_r[i] = 100.0f + (float)i;
    for (int i = 0; i < 60; i++)
        g_c[i] = (float)i * 7.0f;
    for (int i = 0; i < 8; i++)
        g_i[i] = 1000 * i - 3;
}

typedef struct rank_job {
    tshared *sh;
    int rank;
    const char *sp;
    int dedup;
    int rc;
    char msg[512];
} rank_job;

/* Register the box [off, off + shape) of a global tensor of up to 3
   dimensions, copied out of `whole` into `buf`. */
static void add_box(shs_state *st, const char *name, shs_kind kind, shs_dtype dt, size_t nd,
                    const uint64_t *g, const uint64_t *off, const uint64_t *shape,
                    const void *whole, void *buf)
{
    unsigned es = shs_dtype_bits(dt) / 8;
    uint64_t G[3] = { 1, 1, 1 }, O[3] = { 0, 0, 0 }, S[3] = { 1, 1, 1 };
    for (size_t d = 0; d < nd; d++) {
        G[3 - nd + d] = g[d];
        O[3 - nd + d] = off[d];
        S[3 - nd + d] = shape[d];
    }
    char *out = buf;
    for (uint64_t a = 0; a < S[0]; a++)
        for (uint64_t b = 0; b < S[1]; b++) {
            uint64_t src = ((O[0] + a) * G[1] + O[1] + b) * G[2] + O[2];
            memcpy(out, (const char *)whole + src * es, S[2] * es);
            out += S[2] * es;
        }
    shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
    s.name = name;
    s.kind = kind;
    s.dtype = dt;
    s.ndim = nd;
    s.shape = shape;
    s.global_shape = g;
    s.global_offset = off;
    s.data = buf;
    assert_int_equal(shs_state_add_tensor(st, &s), SHS_OK);
}

static void *rank_main(void *arg)
{
    rank_job *j = arg;
    uint64_t r = (uint64_t)j->rank;
    shs_state *st = NULL;
    shs_comm *comm = NULL;
    shs_manager *m = NULL;
    tcomm tc = { j->sh, j->rank };
    float wb[12], eb[12], rb[3], cb[15], ob[12];
    uint16_t hb[8];
    int32_t ib[2];
    uint64_t woff[2] = { 2 * r, 0 }, wsh[2] = { 2, 6 };
    uint64_t eoff[2] = { r / 2 ? 3u : 0u, r % 2 ? 4u : 0u };
    uint64_t esh[2] = { r / 2 ? 2u : 3u, r % 2 ? 3u : 4u };
    uint64_t hoff[2] = { 0, 2 * r }, hsh[2] = { 4, 2 };
    uint64_t roff[1] = { 0 };
    uint64_t coff[3] = { r, 0, 0 }, csh[3] = { 1, 3, 5 };
    uint64_t ioff[2] = { r, 0 }, ish[2] = { 1, 2 };
    shs_state_create(&st);
    add_box(st, "model.w", SHS_KIND_MODEL, SHS_F32, 2, k_w, woff, wsh, g_w, wb);
    add_box(st, "model.e", SHS_KIND_MODEL, SHS_F32, 2, k_e, eoff, esh, g_e, eb);
    add_box(st, "model.h", SHS_KIND_MODEL, SHS_BF16, 2, k_h, hoff, hsh, g_h, hb);
    add_box(st, "model.r", SHS_KIND_MODEL, SHS_F32, 1, k_r, roff, k_r, g_r, rb);
    add_box(st, "model.c", SHS_KIND_MODEL, SHS_F32, 3, k_c, coff, csh, g_c, cb);
    add_box(st, "model.i", SHS_KIND_MODEL, SHS_I32, 2, k_i, ioff, ish, g_i, ib);
    add_box(st, "opt.w", SHS_KIND_OPTIMIZER, SHS_F32, 2, k_w, woff, wsh, g_o, ob);
    shs_config c;
    tu_cfg_saving(&c, j->sp);
    c.remove_redundancy = j->dedup;
    shs_progress p = tu_prog(12);
    int rc = shs_comm_create(&comm, j->rank, NR, &k_tops, &tc);
    if (rc == SHS_OK)
        rc = shs_manager_create_comm(&m, &c, st, comm);
    if (rc == SHS_OK)
        rc = shs_manager_save(m, &p, 0);
    if (rc == SHS_OK)
        rc = shs_manager_wait(m);
    j->rc = rc;
    snprintf(j->msg, sizeof j->msg, "%s", shs_last_error());
    shs_manager_free(m);
    shs_comm_free(comm);
    shs_state_free(st);
    return NULL;
}

static void save4(const char *sp, int dedup)
{
    tshared sh;
    rank_job j[NR];
    pthread_t th[NR];
    tshared_init(&sh, NR, 0);
    for (int r = 0; r < NR; r++) {
        j[r] = (rank_job){ &sh, r, sp, dedup, 0, "" };
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &j[r]), 0);
    }
    for (int r = 0; r < NR; r++)
        pthread_join(th[r], NULL);
    tshared_destroy(&sh);
    for (int r = 0; r < NR; r++)
        if (j[r].rc != SHS_OK)
            fail_msg("rank %d save: %d %s", r, j[r].rc, j[r].msg);
}

static char *g_sp, *g_spd; /* without / with remove_redundancy */

static int setup(void **state)
{
    tu_setup_root(state);
    make_refs();
    g_sp = tu_subpath("plain");
    g_spd = tu_subpath("dedup");
    save4(g_sp, 0);
    save4(g_spd, 1);
    return 0;
}

static int teardown(void **state)
{
    free(g_sp);
    free(g_spd);
    return tu_teardown_root(state);
}

/* ---- checks ---- */

typedef struct ref {
    const char *name;
    shs_dtype dt;
    const void *data;
    size_t len;
} ref;

static const ref k_refs[] = {
    { "model.c", SHS_F32, g_c, sizeof g_c },  { "model.e", SHS_F32, g_e, sizeof g_e },
    { "model.h", SHS_BF16, g_h, sizeof g_h }, { "model.i", SHS_I32, g_i, sizeof g_i },
    { "model.r", SHS_F32, g_r, sizeof g_r },  { "model.w", SHS_F32, g_w, sizeof g_w },
    { "opt.w", SHS_F32, g_o, sizeof g_o },
};
#define N_REFS (sizeof k_refs / sizeof k_refs[0])

/* The merged output at dst holds exactly the model tensors (and opt.w
   when with_opt), under their names with `prefix` replacing "model.",
   float ones converted to `to` (-1: unchanged). */
static void check_output(const char *dst, int with_opt, const char *prefix, int to)
{
    shs_checkpoint *ck;
    TU_OK(shs_checkpoint_open(&ck, dst, NULL));
    assert_int_equal(shs_checkpoint_tensor_count(ck), with_opt ? N_REFS : N_REFS - 1);
    for (size_t k = 0; k < N_REFS; k++) {
        const ref *r = &k_refs[k];
        if (!with_opt && strncmp(r->name, "opt.", 4) == 0)
            continue;
        char name[64];
        snprintf(name, sizeof name, "%s%s", strncmp(r->name, "model.", 6) == 0 ? prefix : "",
                 strncmp(r->name, "model.", 6) == 0 ? r->name + 6 : r->name);
        size_t i;
        if (shs_checkpoint_find(&i, ck, name) < 0)
            fail_msg("%s: no tensor '%s'", dst, name);
        const shs_checkpoint_tensor_info *ti = shs_checkpoint_tensor(ck, i);
        shs_dtype want = to >= 0 && shs_dtype_is_float(r->dt) ? (shs_dtype)to : r->dt;
        assert_int_equal(ti->dtype, want);
        size_t n = r->len / (shs_dtype_bits(r->dt) / 8), len = n * shs_dtype_bits(want) / 8;
        unsigned char got[256], exp[256];
        TU_OK(shs_checkpoint_read(ck, i, NULL, NULL, want, got, len));
        TU_OK(shs_convert(exp, want, r->data, r->dt, n));
        if (memcmp(got, exp, len) != 0)
            fail_msg("%s: tensor '%s' differs", dst, name);
    }
    shs_checkpoint_free(ck);
}

/* dst and every "<dst>.*" sibling (temporaries) are absent. */
static void assert_nothing_left(const char *dst)
{
    char *dir = strdup(dst), *slash = strrchr(dir, '/');
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s.", slash + 1);
    *slash = '\0';
    assert_false(tu_path_exists(dst));
    assert_int_equal(tu_count_prefixed(dir, prefix), 0);
    free(dir);
}

static void *read_all(const char *path, size_t *len)
{
    void *d = tu_read_file(path, len);
    if (!d)
        fail_msg("cannot read %s", path);
    return d;
}

static void assert_same_file(const char *a, const char *b)
{
    size_t la, lb;
    void *da = read_all(a, &la), *db = read_all(b, &lb);
    if (la != lb || memcmp(da, db, la) != 0)
        fail_msg("%s and %s differ", a, b);
    free(da);
    free(db);
}

/* ---- tests ---- */

static void test_one_file(void **state)
{
    (void)state;
    const char *srcs[2] = { g_sp, g_spd };
    char *plain = tu_subpath("one_plain");
    for (int k = 0; k < 2; k++) {
        char *dst = k ? tu_subpath("one_dedup") : strdup(plain);
        shs_merge_result r = SHS_MERGE_RESULT_INIT;
        TU_OK(shs_merge(&r, srcs[k], dst, NULL));
        assert_int_equal(r.n_tensors, N_REFS - 1);
        assert_int_equal(r.n_files, 1);
        assert_int_equal(r.files_written, 1);
        assert_int_equal(r.total_size, sizeof g_c + sizeof g_e + sizeof g_h + sizeof g_i +
                                           sizeof g_r + sizeof g_w);
        assert_int_equal(r.bytes_written, r.total_size);
        assert_int_equal(tu_count_entries(dst), 1);
        const char *f = tu_path(dst, "model.safetensors");
        check_output(f, 0, "model.", -1);
        /* __metadata__ {"format": "pt"} */
        shs_file *sf;
        TU_OK(shs_file_open(&sf, f, NULL));
        assert_string_equal(shs_file_metadata_get(sf, "format"), "pt");
        assert_int_equal(shs_file_metadata_count(sf), 1);
        shs_file_free(sf);
        if (k == 1)
            assert_same_file(f, tu_path(plain, "model.safetensors"));
        free(dst);
    }
    free(plain);
}

/* Tiny buffers: every tensor is cut into boxes of rows, pieces of rows,
   single elements; the file is the same as with the default buffer. */
static void test_boxes(void **state)
{
    (void)state;
    char *ref_dst = tu_subpath("box_ref");
    TU_OK(shs_merge(NULL, g_sp, ref_dst, NULL));
    size_t sizes[] = { 4, 8, 16, 24, 40, 100, 1000 };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        char name[32];
        snprintf(name, sizeof name, "box_%zu", sizes[s]);
        char *dst = tu_subpath(name);
        size_t old = shs__merge_buf_bytes;
        shs__merge_buf_bytes = sizes[s];
        int rc = shs_merge(NULL, g_spd, dst, NULL);
        shs__merge_buf_bytes = old;
        TU_OK(rc);
        assert_same_file(tu_path(dst, "model.safetensors"), tu_path(ref_dst, "model.safetensors"));
        free(dst);
    }
    free(ref_dst);
}

static const char k_index3[] = "{\n"
                               "  \"metadata\": {\n"
                               "    \"total_size\": 700\n"
                               "  },\n"
                               "  \"weight_map\": {\n"
                               "    \"x.c\": \"model-00001-of-00004.safetensors\",\n"
                               "    \"x.e\": \"model-00002-of-00004.safetensors\",\n"
                               "    \"x.h\": \"model-00002-of-00004.safetensors\",\n"
                               "    \"x.i\": \"model-00003-of-00004.safetensors\",\n"
                               "    \"x.r\": \"model-00003-of-00004.safetensors\",\n"
                               "    \"x.w\": \"model-00004-of-00004.safetensors\"\n"
                               "  }\n"
                               "}\n";

/* Packing: sizes c 240, e 140, h 64, i 32, r 12, w 192 with 210 bytes per
   file: c alone (larger), e + h, i + r, w; the index as transformers
   < 4.42 (legacy grouping; test_merge_group covers the current one). */
static void test_shards_index_rename(void **state)
{
    (void)state;
    char *dst = tu_subpath("shards");
    const char *ren[] = { "model.=x." };
    shs_merge_opts o = SHS_MERGE_OPTS_INIT;
    o.grouping = SHS_MERGE_GROUPING_LEGACY;
    o.max_shard_size = 210;
    o.rename = ren;
    o.n_rename = 1;
    o.jobs = 3;
    shs_merge_result r = SHS_MERGE_RESULT_INIT;
    TU_OK(shs_merge(&r, g_sp, dst, &o));
    assert_int_equal(r.n_files, 4);
    assert_int_equal(r.total_size, 680);
    assert_int_equal(tu_count_entries(dst), 5);
    size_t len;
    char *ix = read_all(tu_path(dst, "model.safetensors.index.json"), &len);
    char want[sizeof k_index3];
    memcpy(want, k_index3, sizeof want);
    memcpy(strstr(want, "700"), "680", 3);
    assert_int_equal(len, strlen(want));
    assert_memory_equal(ix, want, len);
    free(ix);
    check_output(dst, 0, "x.", -1);
    /* more jobs than tensors, and jobs 1, write the same bytes */
    char *dst_many = tu_subpath("shards_many");
    o.jobs = 1024;
    TU_OK(shs_merge(NULL, g_sp, dst_many, &o));
    for (int k = 1; k <= 4; k++) {
        char f[64];
        snprintf(f, sizeof f, "model-%05d-of-00004.safetensors", k);
        assert_same_file(tu_path(dst, f), tu_path(dst_many, f));
    }
    free(dst_many);
    char *dst1 = tu_subpath("shards1");
    o.jobs = 1;
    TU_OK(shs_merge(NULL, g_spd, dst1, &o));
    for (int k = 1; k <= 4; k++) {
        char f[64];
        snprintf(f, sizeof f, "model-%05d-of-00004.safetensors", k);
        assert_same_file(tu_path(dst, f), tu_path(dst1, f));
    }
    free(dst1);
    free(dst);
}

static void test_dtype_optimizer_globs(void **state)
{
    (void)state;
    char *dst = tu_subpath("bf16");
    shs_merge_opts o = SHS_MERGE_OPTS_INIT;
    o.dtype = SHS_BF16;
    o.flags = SHS_MERGE_WITH_OPTIMIZER;
    TU_OK(shs_merge(NULL, g_sp, dst, &o));
    check_output(tu_path(dst, "model.safetensors"), 1, "model.", SHS_BF16);
    free(dst);
    /* include + exclude */
    dst = tu_subpath("globs");
    const char *inc[] = { "model.[ew]", "opt.*" }, *exc[] = { "*.e" };
    o = (shs_merge_opts)SHS_MERGE_OPTS_INIT;
    o.flags = SHS_MERGE_WITH_OPTIMIZER;
    o.include = inc;
    o.n_include = 2;
    o.exclude = exc;
    o.n_exclude = 1;
    shs_merge_result r = SHS_MERGE_RESULT_INIT;
    TU_OK(shs_merge(&r, g_spd, dst, &o));
    assert_int_equal(r.n_tensors, 2);
    shs_checkpoint *ck;
    TU_OK(shs_checkpoint_open(&ck, dst, NULL));
    size_t i;
    TU_OK(shs_checkpoint_find(&i, ck, "model.w"));
    TU_OK(shs_checkpoint_find(&i, ck, "opt.w"));
    assert_int_equal(shs_checkpoint_tensor_count(ck), 2);
    shs_checkpoint_free(ck);
    free(dst);
}

/* Three parts, then the final step: the same files as one merge. */
static void test_parts(void **state)
{
    (void)state;
    char *whole = tu_subpath("parts_whole"), *dst = tu_subpath("parts");
    shs_merge_opts o = SHS_MERGE_OPTS_INIT;
    o.max_shard_size = 100;
    TU_OK(shs_merge(NULL, g_sp, whole, &o));
    o.part_count = 3;
    /* the final step before the parts: names the missing part */
    assert_int_equal(shs_merge_finish(NULL, g_sp, dst, &o), SHS_ENOENT);
    TU_ASSERT_MSG_HAS("part 0 of 3 is missing");
    size_t files = 0;
    for (int q = 0; q < 3; q++) {
        shs_merge_result r = SHS_MERGE_RESULT_INIT;
        o.part_index = q;
        TU_OK(shs_merge(&r, g_spd, dst, &o));
        files += r.files_written;
        assert_int_equal(r.n_files, 5);
    }
    assert_int_equal(files, 5);
    assert_false(tu_path_exists(dst));
    shs_merge_result r = SHS_MERGE_RESULT_INIT;
    TU_OK(shs_merge_finish(&r, g_sp, dst, &o));
    assert_int_equal(r.files_written, 5);
    assert_int_equal(tu_count_entries(dst), 6);
    assert_int_equal(tu_count_prefixed(tu_root, "parts."), 0); /* parts removed */
    char **names = NULL;
    size_t n = 0;
    TU_OK(shs__io_list_dir(&names, &n, whole));
    for (size_t k = 0; k < n; k++)
        assert_same_file(tu_path(whole, names[k]), tu_path(dst, names[k]));
    shs__io_names_free(names, n);
    check_output(dst, 0, "model.", -1);
    free(whole);
    free(dst);
}

/* A part made with other options is refused by the final step. */
static void test_parts_mismatch(void **state)
{
    (void)state;
    char *dst = tu_subpath("mism");
    shs_merge_opts o = SHS_MERGE_OPTS_INIT;
    o.max_shard_size = 100;
    o.part_count = 2;
    const char *ren[] = { "model.e=model.f" }; /* same sizes, same order */
    o.rename = ren;
    o.n_rename = 1;
    for (int q = 0; q < 2; q++) {
        o.part_index = q;
        TU_OK(shs_merge(NULL, g_sp, dst, &o));
    }
    o.n_rename = 0;
    assert_int_equal(shs_merge_finish(NULL, g_sp, dst, &o), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("tensor 'model.e' is missing or differs");
    assert_false(tu_path_exists(dst));
    /* the parts are still there, untouched */
    char *p0 = tu_subpath("mism.part-0-of-2");
    assert_true(tu_path_exists(p0));
    free(p0);
    free(dst);
}

static void expect_bad(const char *src, const shs_merge_opts *o, int want, const char *msg)
{
    char *dst = tu_subpath("bad");
    int rc = shs_merge(NULL, src, dst, o);
    if (rc != want)
        fail_msg("want %d, got %d: %s", want, rc, shs_last_error());
    TU_ASSERT_MSG_HAS(msg);
    assert_nothing_left(dst);
    free(dst);
}

static void test_bad_options(void **state)
{
    (void)state;
    shs_merge_opts o = SHS_MERGE_OPTS_INIT;
    const char *nomatch[] = { "decoder.*" }, *all[] = { "*" }, *optonly[] = { "opt.*" };
    o.include = nomatch;
    o.n_include = 1;
    expect_bad(g_sp, &o, SHS_EINVAL, "include glob 'decoder.*' matches no model tensor");
    o.include = optonly; /* optimizer tensors without the flag */
    expect_bad(g_sp, &o, SHS_EINVAL, "optimizer tensors are merged only with --with-optimizer");
    o = (shs_merge_opts)SHS_MERGE_OPTS_INIT;
    o.exclude = nomatch;
    o.n_exclude = 1;
    expect_bad(g_sp, &o, SHS_EINVAL, "exclude glob 'decoder.*' matches no");
    o.exclude = all;
    expect_bad(g_sp, &o, SHS_EINVAL, "nothing to merge");
    o = (shs_merge_opts)SHS_MERGE_OPTS_INIT;
    const char *collide[] = { "model.e=model.w" };
    o.rename = collide;
    o.n_rename = 1;
    expect_bad(g_sp, &o, SHS_EINVAL, "tensors 'model.e' and 'model.w' would both be named");
    const char *empty[] = { "model.r=", "model.=" };
    o.rename = empty;
    o.n_rename = 1;
    expect_bad(g_sp, &o, SHS_EINVAL, "make its name ''");
    const char *syntax[] = { "=x" };
    o.rename = syntax;
    expect_bad(g_sp, &o, SHS_EINVAL, "is not FROM=TO");
    o = (shs_merge_opts)SHS_MERGE_OPTS_INIT;
    o.part_count = 4;
    o.part_index = 4;
    expect_bad(g_sp, &o, SHS_EINVAL, "part 4 is out of range: parts are 0 to 3 of 4");
    o.part_index = -1;
    expect_bad(g_sp, &o, SHS_EINVAL, "out of range");
    o = (shs_merge_opts)SHS_MERGE_OPTS_INIT;
    o.jobs = 1025;
    expect_bad(g_sp, &o, SHS_EINVAL, "jobs must be 1 to 1024");
    o = (shs_merge_opts)SHS_MERGE_OPTS_INIT;
    o.dtype = SHS_I32;
    expect_bad(g_sp, &o, SHS_EINVAL, "not a floating-point type");
    o = (shs_merge_opts)SHS_MERGE_OPTS_INIT;
    o.version = 0;
    expect_bad(g_sp, &o, SHS_EINVAL, "version");
    o.version = SHS_MERGE_OPTS_VERSION + 1;
    expect_bad(g_sp, &o, SHS_EINVAL, "this library knows 1 to");
    o = (shs_merge_opts)SHS_MERGE_OPTS_INIT;
    o.step = 99;
    expect_bad(g_sp, &o, SHS_ENOCHECKPOINT, "99");
    char *missing = tu_subpath("no_such_ckpt");
    assert_int_equal(shs_merge(NULL, missing, "x", NULL), SHS_ENOENT);
    free(missing);
    shs_merge_result r = { 0, 0, 0, 0, 0, 0 };
    char *dst = tu_subpath("bad");
    assert_int_equal(shs_merge(&r, g_sp, dst, NULL), SHS_EINVAL);
    assert_nothing_left(dst);
    assert_int_equal(shs_merge_finish(NULL, g_sp, dst, NULL), SHS_EINVAL);
    o = (shs_merge_opts)SHS_MERGE_OPTS_INIT;
    assert_int_equal(shs_merge_finish(NULL, g_sp, dst, &o), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("part_count");
    free(dst);
}

static void test_parse_size(void **state)
{
    (void)state;
    uint64_t v;
    TU_OK(shs_parse_size(&v, "5GB"));
    assert_int_equal(v, 5000000000ull);
    TU_OK(shs_parse_size(&v, "500mib"));
    assert_int_equal(v, 500ull << 20);
    TU_OK(shs_parse_size(&v, "1000"));
    assert_int_equal(v, 1000);
    TU_OK(shs_parse_size(&v, "2KB"));
    assert_int_equal(v, 2000);
    TU_OK(shs_parse_size(&v, "3TiB"));
    assert_int_equal(v, 3ull << 40);
    const char *bad[] = { "",          "GB",  "5 GB",  "-5GB", "5XB",
                          "0",         "0GB", "1.5GB", "5GBs", "99999999999999999999",
                          "20000000TB" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (shs_parse_size(&v, bad[i]) != SHS_EINVAL)
            fail_msg("'%s' parsed as a size", bad[i]);
    assert_int_equal(shs_parse_size(&v, "5ZB"), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("unknown unit 'ZB'");
}

static void test_existing_destination(void **state)
{
    (void)state;
    char *dst = tu_subpath("exists");
    TU_OK(shs_merge(NULL, g_sp, dst, NULL));
    assert_int_equal(shs_merge(NULL, g_sp, dst, NULL), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("exists");
    /* force replaces an earlier merge's output (1 file -> 4 + index) */
    shs_merge_opts o = SHS_MERGE_OPTS_INIT;
    o.flags = SHS_MERGE_FORCE;
    o.max_shard_size = 210;
    TU_OK(shs_merge(NULL, g_sp, dst, &o));
    assert_int_equal(tu_count_entries(dst), 5);
    assert_int_equal(tu_count_prefixed(tu_root, "exists."), 0);
    /* ... but not a directory holding anything else */
    assert_int_equal(tu_write_file(tu_path(dst, "notes.txt"), "mine", 4), 0);
    assert_int_equal(shs_merge(NULL, g_sp, dst, &o), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("'notes.txt' is not a file that a merge writes");
    assert_int_equal(tu_count_entries(dst), 6);
    assert_int_equal(tu_count_prefixed(tu_root, "exists."), 0);
    free(dst);
    /* nor a file */
    dst = tu_subpath("exists_file");
    assert_int_equal(tu_write_file(dst, "x", 1), 0);
    assert_int_equal(shs_merge(NULL, g_sp, dst, &o), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("not a directory");
    free(dst);
}

/* Flip one byte of the data of model.e in every file that holds it. */
static void corrupt_copy(const char *from, const char *to)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", from, to);
    assert_int_equal(system(cmd), 0);
    shs_checkpoint *ck;
    TU_OK(shs_checkpoint_open(&ck, to, NULL));
    size_t t;
    TU_OK(shs_checkpoint_find(&t, ck, "model.e"));
    shs_chunk_info ci = SHS_CHUNK_INFO_INIT;
    TU_OK(shs_checkpoint_chunk(&ci, ck, t, 1));
    char *dir = strdup(shs_checkpoint_path(ck));
    const char *file = tu_path(dir, shs_checkpoint_file_name(ck, ci.file));
    int fd = open(file, O_RDWR);
    assert_true(fd >= 0);
    unsigned char b;
    assert_int_equal(pread(fd, &b, 1, (off_t)ci.byte_begin + 2), 1);
    b ^= 0x10;
    assert_int_equal(pwrite(fd, &b, 1, (off_t)ci.byte_begin + 2), 1);
    close(fd);
    free(dir);
    shs_checkpoint_free(ck);
}

static void test_corrupt_chunk(void **state)
{
    (void)state;
    char *bad = tu_subpath("corrupt");
    corrupt_copy(g_sp, bad);
    shs_merge_opts o = SHS_MERGE_OPTS_INIT;
    o.max_shard_size = 100; /* model.e is in the 2nd of 5 files */
    o.jobs = 2;
    expect_bad(bad, &o, SHS_ECHECKSUM, "checkpoint-model-");
    /* a selection without the damaged tensor merges */
    const char *exc[] = { "model.e" };
    o.exclude = exc;
    o.n_exclude = 1;
    char *dst = tu_subpath("corrupt_out");
    TU_OK(shs_merge(NULL, bad, dst, &o));
    free(dst);
    free(bad);
}

static int g_cancel_after;
static int cancel_cb(void *ctx, uint64_t done, uint64_t total)
{
    int *calls = ctx;
    assert_true(done <= total);
    return ++*calls >= g_cancel_after;
}

static void test_cancel_and_readonly(void **state)
{
    (void)state;
    int calls = 0;
    shs_merge_opts o = SHS_MERGE_OPTS_INIT;
    o.progress = cancel_cb;
    o.progress_ctx = &calls;
    o.max_shard_size = 100;
    g_cancel_after = 3;
    expect_bad(g_sp, &o, SHS_ESTATE, "cancelled");
    assert_int_equal(calls, 3);
    /* three jobs, many small boxes: no box is written after the cancel */
    size_t old = shs__merge_buf_bytes;
    shs__merge_buf_bytes = 8;
    o.jobs = 3;
    calls = 0;
    g_cancel_after = 10;
    expect_bad(g_spd, &o, SHS_ESTATE, "cancelled");
    shs__merge_buf_bytes = old;
    assert_int_equal(calls, 10);
    /* a read-only parent: nothing can be created */
    if (geteuid() == 0) {
        /* root ignores permissions: covered by the I/O fault sweep */
        return;
    }
    char *ro = tu_subdir("ro");
    chmod(ro, 0555);
    char *dst = tu_path_dup(ro, "out");
    assert_int_equal(shs_merge(NULL, g_sp, dst, NULL), SHS_EIO);
    assert_int_equal(tu_count_entries(ro), 0);
    chmod(ro, 0755);
    free(dst);
    free(ro);
}

/* ---- the N-th I/O call fails, for every N ---- */

static long g_calls, g_fail_at;
static int count_fail(void)
{
    if (g_fail_at && ++g_calls == g_fail_at) {
        errno = (g_fail_at % 2) ? EIO : ENOSPC;
        return 1;
    }
    return 0;
}
static ssize_t f_pwrite(int fd, const void *b, size_t n, off_t o)
{
    return count_fail() ? -1 : shs__io_posix.pwrite(fd, b, n, o);
}
static ssize_t f_pread(int fd, void *b, size_t n, off_t o)
{
    return count_fail() ? -1 : shs__io_posix.pread(fd, b, n, o);
}
static int f_fsync(int fd)
{
    return count_fail() ? -1 : shs__io_posix.fsync(fd);
}
static int f_rename(const char *a, const char *b)
{
    return count_fail() ? -1 : shs__io_posix.rename(a, b);
}
static int f_open(const char *p, int fl, mode_t m)
{
    return count_fail() ? -1 : shs__io_posix.open(p, fl, m);
}
static int f_mkdir(const char *p, mode_t m)
{
    return count_fail() ? -1 : shs__io_posix.mkdir(p, m);
}
static int f_link(const char *a, const char *b)
{
    return count_fail() ? -1 : shs__io_posix.link(a, b);
}
/* Run `fn` with the N-th call failing for N = 1, 2, ... until it
   succeeds; every failure must leave nothing at dst. */
static void sweep(const char *what, int (*fn)(const char *dst), const char *dst)
{
    shs__io_ops ops = shs__io_posix;
    ops.pwrite = f_pwrite;
    ops.pread = f_pread;
    ops.fsync = f_fsync;
    ops.rename = f_rename;
    ops.open = f_open;
    ops.mkdir = f_mkdir;
    ops.link = f_link;
    long n;
    for (n = 1; n < 10000; n++) {
        g_calls = 0;
        g_fail_at = n;
        shs__io_set(&ops);
        int rc = fn(dst);
        shs__io_set(NULL);
        g_fail_at = 0;
        if (rc == SHS_OK && g_calls < n)
            break;
        if (rc == SHS_OK)
            fail_msg("%s: call %ld failed, but the merge reported success", what, n);
        if (rc != SHS_EIO && rc != SHS_ENOSPC && rc != SHS_ENOMEM)
            fail_msg("%s: call %ld: status %d: %s", what, n, rc, shs_last_error());
        if (tu_path_exists(dst)) {
            /* only the last call, the fsync of the parent directory after
               the rename, fails with the output complete in place, and
               says so (docs/merge.md) */
            TU_ASSERT_MSG_HAS("is complete, but the fsync of its parent directory failed: its "
                              "name may not survive a power loss");
            check_output(dst, 0, "model.", -1);
            TU_OK(shs__rmtree(dst));
        }
        assert_nothing_left(dst);
    }
    assert_true(n > 10);
    check_output(dst, 0, "model.", -1);
}

static int merge_fsync(const char *dst)
{
    shs_merge_opts o = SHS_MERGE_OPTS_INIT;
    o.flags = SHS_MERGE_FSYNC;
    o.max_shard_size = 210;
    return shs_merge(NULL, g_spd, dst, &o);
}

static int merge_force(const char *dst)
{
    /* replaces the 4-file output made before the sweep */
    shs_merge_opts o = SHS_MERGE_OPTS_INIT;
    o.flags = SHS_MERGE_FORCE;
    return shs_merge(NULL, g_sp, dst, &o);
}

static int merge_finish(const char *dst)
{
    shs_merge_opts o = SHS_MERGE_OPTS_INIT;
    o.max_shard_size = 210;
    o.part_count = 2;
    o.flags = SHS_MERGE_FSYNC;
    return shs_merge_finish(NULL, g_sp, dst, &o);
}

static void test_io_faults(void **state)
{
    (void)state;
    char *dst = tu_subpath("fault");
    sweep("merge", merge_fsync, dst);
    free(dst);
    /* forced replacement: a failure leaves the old output whole */
    dst = tu_subpath("fault_force");
    shs_merge_opts o = SHS_MERGE_OPTS_INIT;
    o.max_shard_size = 210;
    TU_OK(shs_merge(NULL, g_sp, dst, &o));
    shs__io_ops ops = shs__io_posix;
    ops.rename = f_rename;
    ops.pwrite = f_pwrite;
    ops.open = f_open;
    ops.mkdir = f_mkdir;
    long n;
    for (n = 1; n < 1000; n++) {
        g_calls = 0;
        g_fail_at = n;
        shs__io_set(&ops);
        int rc = merge_force(dst);
        shs__io_set(NULL);
        g_fail_at = 0;
        if (rc == SHS_OK)
            break;
        /* the old output (4 files + index) is intact, no temporary */
        assert_int_equal(tu_count_entries(dst), 5);
        assert_int_equal(tu_count_prefixed(tu_root, "fault_force."), 0);
        check_output(dst, 0, "model.", -1);
    }
    assert_true(n > 3);
    assert_int_equal(tu_count_entries(dst), 1);
    assert_int_equal(tu_count_prefixed(tu_root, "fault_force."), 0);
    free(dst);
    /* the final step of a split merge */
    dst = tu_subpath("fault_parts");
    o.part_count = 2;
    for (int q = 0; q < 2; q++) {
        o.part_index = q;
        TU_OK(shs_merge(NULL, g_sp, dst, &o));
    }
    ops.link = f_link;
    ops.fsync = f_fsync;
    for (n = 1; n < 1000; n++) {
        g_calls = 0;
        g_fail_at = n;
        shs__io_set(&ops);
        int rc = merge_finish(dst);
        shs__io_set(NULL);
        g_fail_at = 0;
        if (rc == SHS_OK)
            break;
        if (tu_path_exists(dst)) { /* the parent's fsync after the rename */
            TU_ASSERT_MSG_HAS("may not survive a power loss");
            check_output(dst, 0, "model.", -1);
            TU_OK(shs__rmtree(dst));
        }
        assert_int_equal(tu_count_prefixed(tu_root, "fault_parts.tmp"), 0);
        assert_int_equal(tu_count_prefixed(tu_root, "fault_parts.part-"), 2);
    }
    assert_true(n > 3);
    check_output(dst, 0, "model.", -1);
    assert_int_equal(tu_count_prefixed(tu_root, "fault_parts."), 0);
    free(dst);
}

/* The index escapes names as Python's json.dumps (ensure_ascii). */
static void test_index_escaping(void **state)
{
    (void)state;
    shs__mtensor t[2];
    shs__mfile f[2];
    memset(t, 0, sizeof t);
    memset(f, 0, sizeof f);
    t[0].name = (char *)"a\"b\\c\n\x01\x7f";
    t[0].file = 0;
    t[1].name = (char *)"z\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
    t[1].file = 1;
    snprintf(f[0].name, sizeof f[0].name, "model-00001-of-00002.safetensors");
    snprintf(f[1].name, sizeof f[1].name, "model-00002-of-00002.safetensors");
    size_t order[2] = { 0, 1 };
    shs__mplan p = { .t = t,
                     .n = 2,
                     .by_name = order,
                     .f = f,
                     .nf = 2,
                     .total = 12,
                     .grouping = SHS_MERGE_GROUPING_LEGACY };
    shs__buf b = SHS__BUF_INIT;
    TU_OK(shs__merge_index_json(&b, &p));
    const char *want =
        "{\n  \"metadata\": {\n    \"total_size\": 12\n  },\n  \"weight_map\": {\n"
        "    \"a\\\"b\\\\c\\n\\u0001\\u007f\": \"model-00001-of-00002.safetensors\",\n"
        "    \"z\\u00e9\\u20ac\\ud83d\\ude00\": \"model-00002-of-00002.safetensors\"\n"
        "  }\n}\n";
    assert_int_equal(b.len, strlen(want));
    assert_memory_equal(b.data, want, b.len);
    shs__buf_release(&b);
    assert_true(shs__merge_own_name("model-00001-of-00002.safetensors"));
    assert_true(shs__merge_own_name("model.safetensors"));
    assert_true(shs__merge_own_name("model.safetensors.index.json"));
    assert_false(shs__merge_own_name("model-0001-of-00002.safetensors"));
    assert_false(shs__merge_own_name("model-00001-of-00002.safetensorz"));
    assert_false(shs__merge_own_name("model-0000x-of-00002.safetensors"));
    assert_false(shs__merge_own_name("notes.txt"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_file),
        cmocka_unit_test(test_boxes),
        cmocka_unit_test(test_shards_index_rename),
        cmocka_unit_test(test_dtype_optimizer_globs),
        cmocka_unit_test(test_parts),
        cmocka_unit_test(test_parts_mismatch),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_existing_destination),
        cmocka_unit_test(test_corrupt_chunk),
        cmocka_unit_test(test_cancel_and_readonly),
        cmocka_unit_test(test_io_faults),
        cmocka_unit_test(test_index_escaping),
    };
    return TU_RUN_GROUP(tests, setup, teardown);
}
