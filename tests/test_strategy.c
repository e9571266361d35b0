/*
 * test_strategy.c -- MindSpore strategy files as reshard targets: a
 * checkpoint saved by one rank is resharded (shs_reshard, strategy_file)
 * for 4 ranks laid out as dp 2 x tp 2 (a tensor split by tp, an
 * optimizer moment cut again by the optimizer shard, a nested tensor_map,
 * a replicated bias, a tensor the file does not name) and as two merged
 * pipeline stages with a rank list; the output is then loaded by 4 ranks
 * (threads), each registering the box the strategy gives it: every value
 * is the source's, and each rank reads exactly the bytes of its own boxes
 * (the output's chunks are the target layout).  The strategy files are
 * packed with the protobuf-c code generated from src/tools/strategy.proto
 * (tests/cli/strategy.sh writes them byte by byte in Python instead).
 * Also: the layout document of each, refusals, and an allocation sweep of
 * the parser.
 */
#include "testutil.h"
#include "threadcomm.h"

#include "tools/strategy.h"
#include "tools/strategy.pb-c.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define NR 4

/* ---- strategy files, packed with the generated code ---- */

typedef struct sparam_def {
    const char *name;
    size_t ndev;
    uint32_t dev[3];
    int nested;    /* tmap as one TensorMap per dimension */
    size_t ndim;   /* flat: values in tmap; nested: dims */
    int32_t tm[4]; /* flat values */
    size_t nax[2]; /* nested: per dimension */
    int32_t ax[2][2];
    int32_t step, size;
    int32_t field;
} sparam_def;

static size_t pack_strategy(unsigned char **out, const sparam_def *p, size_t n)
{
    ShsStrategy__ParallelStrategyMap map = SHS_STRATEGY__PARALLEL_STRATEGY_MAP__INIT;
    ShsStrategy__ParallelLayoutItem items[8], *pitems[8];
    ShsStrategy__ParallelLayouts lay[8];
    ShsStrategy__DevMatrix dm[8], *pdm[8];
    ShsStrategy__TensorMap tm[8][2], *ptm[8][2];
    ShsStrategy__ParamSplitShape ps = SHS_STRATEGY__PARAM_SPLIT_SHAPE__INIT, *pps = &ps;
    ShsStrategy__IndicesOffset io = SHS_STRATEGY__INDICES_OFFSET__INIT, *pio = &io;
    uint32_t devs[8][3];
    int32_t maps[8][2][4];
    assert_true(n <= 8);
    map.current_stage = 1;
    for (size_t i = 0; i < n; i++) {
        shs_strategy__parallel_layout_item__init(&items[i]);
        shs_strategy__parallel_layouts__init(&lay[i]);
        shs_strategy__dev_matrix__init(&dm[i]);
        memcpy(devs[i], p[i].dev, sizeof devs[i]);
        dm[i].n_dim = p[i].ndev;
        dm[i].dim = devs[i];
        pdm[i] = &dm[i];
        lay[i].n_dev_matrix = 1;
        lay[i].dev_matrix = &pdm[i];
        size_t nmaps = p[i].nested ? (p[i].ndim == 1 ? 2 : p[i].ndim) : 1;
        for (size_t k = 0; k < nmaps; k++) {
            shs_strategy__tensor_map__init(&tm[i][k]);
            if (p[i].nested) {
                tm[i][k].n_dim = k < p[i].ndim ? p[i].nax[k] : 0;
                memcpy(maps[i][k], p[i].ax[k < 2 ? k : 0], sizeof p[i].ax[0]);
            } else {
                tm[i][k].n_dim = p[i].ndim;
                memcpy(maps[i][k], p[i].tm, sizeof p[i].tm);
            }
            tm[i][k].dim = maps[i][k];
            ptm[i][k] = &tm[i][k];
        }
        lay[i].n_tensor_map = nmaps;
        lay[i].tensor_map = ptm[i];
        lay[i].n_param_split_shape = 1;
        lay[i].param_split_shape = &pps;
        lay[i].n_indices_offset = 1;
        lay[i].indices_offset = &pio;
        lay[i].field = p[i].field;
        lay[i].opt_weight_shard_step = p[i].step;
        lay[i].opt_weight_shard_size = p[i].size;
        items[i].param_name = (char *)p[i].name;
        items[i].parallel_layouts = &lay[i];
        pitems[i] = &items[i];
    }
    map.n_parallel_layout_item = n;
    map.parallel_layout_item = pitems;
    size_t len = shs_strategy__parallel_strategy_map__get_packed_size(&map);
    *out = malloc(len + 1);
    assert_non_null(*out);
    assert_int_equal(shs_strategy__parallel_strategy_map__pack(&map, *out), len);
    return len;
}

static char *write_strategy(const char *name, const sparam_def *p, size_t n)
{
    unsigned char *data;
    size_t len = pack_strategy(&data, p, n);
    char *path = tu_subpath(name);
    assert_int_equal(tu_write_file(path, data, len), 0);
    free(data);
    return path;
}

/* dp 2 x tp 2: w split by tp (axis value 0, the inner axis), its moment
   cut again by the optimizer over dp (step 2: dp peers are 2 apart), v
   over both axes (nested: dp outer), b replicated; "gone" is not in the
   checkpoint. */
static const sparam_def k_dptp[] = {
    { .name = "w", .ndev = 2, .dev = { 2, 2 }, .ndim = 2, .tm = { 0, -1 } },
    { .name = "adam_m.w",
      .ndev = 2,
      .dev = { 2, 2 },
      .ndim = 2,
      .tm = { 0, -1 },
      .step = 2,
      .size = 2 },
    { .name = "v",
      .ndev = 2,
      .dev = { 2, 2 },
      .nested = 1,
      .ndim = 2,
      .nax = { 2, 1 },
      .ax = { { 1, 0 }, { -1 } } },
    { .name = "b", .ndev = 2, .dev = { 2, 2 }, .ndim = 1, .tm = { -1 } },
    { .name = "gone", .ndev = 2, .dev = { 2, 2 }, .ndim = 1, .tm = { 0 } },
};

/* two merged pipeline stages of 2 devices: w and its moment on stage 0
   (split), b on stage 1 (split), v on both (replicated) */
static const sparam_def k_pipe[] = {
    { .name = "0-w", .ndev = 1, .dev = { 2 }, .ndim = 2, .tm = { 0, -1 } },
    { .name = "0-adam_m.w", .ndev = 1, .dev = { 2 }, .ndim = 2, .tm = { -1, 0 } },
    { .name = "1-b", .ndev = 1, .dev = { 2 }, .ndim = 1, .tm = { 0 } },
    { .name = "0-v", .ndev = 1, .dev = { 2 }, .ndim = 2, .tm = { -1, -1 } },
    { .name = "1-v", .ndev = 1, .dev = { 2 }, .ndim = 2, .tm = { -1, -1 } },
};

/* ---- the source checkpoint ---- */

enum {
    T_W,
    T_M,
    T_V,
    T_B,
    T_O,
    NT
};
static const char *const k_names[NT] = { "w", "adam_m.w", "v", "b", "other" };
static const uint64_t k_shape[NT][2] = { { 8, 6 }, { 8, 6 }, { 4, 4 }, { 6, 0 }, { 3, 0 } };
static const size_t k_nd[NT] = { 2, 2, 2, 1, 1 };
static float g_val[NT][48];

static float val(int t, uint64_t i)
{
    return (float)(100 * t) + (float)i * 0.5f;
}

static char *g_src; /* a save path, one rank, step 3 */

static int setup(void **state)
{
    int rc = tu_setup_root(state);
    if (rc)
        return rc;
    g_src = tu_subpath("src");
    shs_state *st;
    TU_OK(shs_state_create(&st));
    for (int t = 0; t < NT; t++) {
        for (uint64_t i = 0; i < 48; i++)
            g_val[t][i] = val(t, i);
        shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
        s.name = k_names[t];
        s.kind = t == T_M ? SHS_KIND_OPTIMIZER : SHS_KIND_MODEL;
        s.ndim = k_nd[t];
        s.shape = k_shape[t];
        s.data = g_val[t];
        TU_OK(shs_state_add_tensor(st, &s));
    }
    shs_config c;
    shs_config_init(&c);
    c.save_path = g_src;
    c.fsync = 0;
    shs_manager *m;
    TU_OK(shs_manager_create(&m, &c, st));
    shs_progress p = SHS_PROGRESS_INIT;
    p.global_step = p.step_num = 3;
    TU_OK(shs_manager_save(m, &p, 0));
    TU_OK(shs_manager_wait(m));
    shs_manager_free(m);
    shs_state_free(st);
    return 0;
}

static int teardown(void **state)
{
    free(g_src);
    return tu_teardown_root(state);
}

/* ---- loading the output on 4 ranks ---- */

typedef struct box {
    int has;
    uint64_t off[2], shape[2];
} box;

typedef struct rjob {
    int rank;
    const char *path;
    box b[NT];
    /* out */
    int rc;
    char msg[512];
    int bad;
    uint64_t bytes_read, want_bytes;
} rjob;

static void run_rank(rjob *j, shs_comm *comm)
{
    shs_state *st = NULL;
    float buf[NT][48];
    int rc = shs_state_create(&st);
    memset(buf, 0, sizeof buf);
    j->want_bytes = 0;
    for (int t = 0; t < NT && rc == SHS_OK; t++) {
        if (!j->b[t].has)
            continue;
        shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
        s.name = k_names[t];
        s.kind = t == T_M ? SHS_KIND_OPTIMIZER : SHS_KIND_MODEL;
        s.ndim = k_nd[t];
        s.shape = j->b[t].shape;
        s.global_shape = k_shape[t];
        s.global_offset = j->b[t].off;
        s.data = buf[t];
        rc = shs_state_add_tensor(st, &s);
        j->want_bytes += 4 * j->b[t].shape[0] * (k_nd[t] == 2 ? j->b[t].shape[1] : 1);
    }
    shs_config c;
    shs_config_init(&c);
    c.enable_save = 0;
    c.load_path = j->path;
    c.strict = 0; /* a rank that holds nothing of a tensor does not register it */
    shs_manager *m = NULL;
    if (rc == SHS_OK)
        rc = shs_manager_create_comm(&m, &c, st, comm);
    shs_progress p = SHS_PROGRESS_INIT;
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    if (rc == SHS_OK)
        rc = shs_manager_load(&res, m, &p);
    j->rc = rc;
    snprintf(j->msg, sizeof j->msg, "%s", rc < 0 ? shs_last_error() : "");
    j->bytes_read = res.bytes_read;
    for (int t = 0; t < NT && rc == SHS_OK; t++) {
        if (!j->b[t].has)
            continue;
        uint64_t cols = k_nd[t] == 2 ? k_shape[t][1] : 1;
        uint64_t bc = k_nd[t] == 2 ? j->b[t].shape[1] : 1;
        for (uint64_t e = 0; e < j->b[t].shape[0] * bc; e++) {
            uint64_t r = j->b[t].off[0] + e / bc, cc = (k_nd[t] == 2 ? j->b[t].off[1] : 0) + e % bc;
            j->bad += buf[t][e] != val(t, r * cols + cc);
        }
    }
    if (rc == SHS_OK && p.global_step != 3)
        j->bad++;
    shs_manager_free(m);
    shs_state_free(st);
}

static void rank_main(int rank, shs_comm *comm, void *arg)
{
    (void)rank;
    run_rank(arg, comm);
}

static void load_on_ranks(rjob *js)
{
    void *args[NR];
    for (int r = 0; r < NR; r++)
        args[r] = &js[r];
    assert_int_equal(tcomm_run(NR, rank_main, args), 0);
    for (int r = 0; r < NR; r++) {
        if (js[r].rc != SHS_OK || js[r].bad)
            fail_msg("rank %d: %d %s; %d wrong values", r, js[r].rc, js[r].msg, js[r].bad);
        /* the output's chunks are the ranks' boxes: nothing else is read */
        if (js[r].bytes_read != js[r].want_bytes)
            fail_msg("rank %d read %llu bytes, its boxes are %llu", r,
                     (unsigned long long)js[r].bytes_read, (unsigned long long)js[r].want_bytes);
    }
}

static box rows(uint64_t first, uint64_t n, int t)
{
    box b = { 1, { first, 0 }, { n, k_shape[t][1] } };
    return b;
}

static box whole(int t)
{
    box b = { 1, { 0, 0 }, { k_shape[t][0], k_shape[t][1] } };
    return b;
}

static void test_dptp(void **state)
{
    (void)state;
    char *s = write_strategy("dptp.ckpt", k_dptp, sizeof k_dptp / sizeof k_dptp[0]);
    char *dst = tu_subpath("dptp_out");
    shs_reshard_opts o = SHS_RESHARD_OPTS_INIT;
    shs_reshard_result r = SHS_RESHARD_RESULT_INIT;
    o.strategy_file = s;
    o.fsync = 0;
    TU_OK(shs_reshard(&r, g_src, dst, NULL, &o));
    assert_int_equal(r.world_size, 4);
    assert_int_equal(r.n_tensors, NT);
    rjob js[NR];
    memset(js, 0, sizeof js);
    for (int k = 0; k < NR; k++) {
        uint64_t dp = (uint64_t)k / 2, tp = (uint64_t)k % 2;
        js[k].rank = k;
        js[k].path = dst;
        js[k].b[T_W] = rows(tp * 4, 4, T_W);
        js[k].b[T_M] = rows((tp * 2 + dp) * 2, 2, T_M); /* model index outer, optimizer inner */
        js[k].b[T_V] = rows(dp * 2 + tp, 1, T_V);
        js[k].b[T_B] = whole(T_B);
        js[k].b[T_O] = whole(T_O); /* not in the file: replicated */
    }
    load_on_ranks(js);
    /* the layout document */
    char *text = NULL;
    TU_OK(shs_strategy_layout(&text, s, NULL, 0));
    assert_non_null(strstr(text, "\"adam_m.w\": {\"device_matrix\": [2, 2], \"tensor_map\": [[0, "
                                 "1], -1]}"));
    assert_non_null(strstr(text, "\"v\": {\"device_matrix\": [2, 2], \"tensor_map\": [[1, 0], "
                                 "-1]}"));
    assert_non_null(strstr(text, "\"world_size\": 4"));
    shs_free(text);
    free(dst);
    free(s);
}

static void test_pipeline_rank_list(void **state)
{
    (void)state;
    char *s = write_strategy("pipe.ckpt", k_pipe, sizeof k_pipe / sizeof k_pipe[0]);
    char *dst = tu_subpath("pipe_out");
    static const int map[NR] = { 1, 0, 3, 2 }; /* device k is rank map[k] */
    shs_reshard_opts o = SHS_RESHARD_OPTS_INIT;
    o.strategy_file = s;
    o.rank_list = map;
    o.n_rank_list = NR;
    o.fsync = 0;
    TU_OK(shs_reshard(NULL, g_src, dst, NULL, &o));
    rjob js[NR];
    memset(js, 0, sizeof js);
    for (int dev = 0; dev < NR; dev++) {
        int k = map[dev], stage = dev / 2, p = dev % 2;
        js[k].rank = k;
        js[k].path = dst;
        if (stage == 0) {
            js[k].b[T_W] = rows((uint64_t)p * 4, 4, T_W);
            js[k].b[T_M] = (box){ 1, { 0, (uint64_t)p * 3 }, { 8, 3 } };
        } else {
            js[k].b[T_B] = (box){ 1, { (uint64_t)p * 3, 0 }, { 3, 0 } };
        }
        js[k].b[T_V] = whole(T_V);
        js[k].b[T_O] = whole(T_O);
    }
    load_on_ranks(js);
    free(dst);
    free(s);
}

static void expect_doc_fail(const sparam_def *p, size_t n, int want, const char *needle)
{
    unsigned char *data;
    size_t len = pack_strategy(&data, p, n);
    json_t *doc = NULL;
    int rc = shs__strategy_doc(&doc, data, len, "t.ckpt", NULL, 0);
    free(data);
    assert_null(doc);
    if (rc != want || !strstr(shs_last_error(), needle))
        fail_msg("want %d '%s', got %d: %s", want, needle, rc, shs_last_error());
}

static void test_refused(void **state)
{
    (void)state;
    sparam_def p = k_dptp[0];
    p.tm[0] = 2; /* two axes: values 0 and 1 */
    expect_doc_fail(&p, 1, SHS_EINVAL, "tensor_map value 2 is out of range");
    p = k_dptp[0];
    p.tm[1] = 0;
    expect_doc_fail(&p, 1, SHS_EINVAL, "uses mesh axis value 0 twice");
    p = k_dptp[0];
    p.dev[1] = 0;
    expect_doc_fail(&p, 1, SHS_EINVAL, "positive sizes");
    p = k_dptp[0];
    p.ndev = 0;
    expect_doc_fail(&p, 1, SHS_EINVAL, "no dev_matrix");
    p = k_dptp[1];
    p.step = 1; /* dp peers are 2 apart */
    expect_doc_fail(&p, 1, SHS_EINVAL, "opt_weight_shard_step 1");
    p = k_dptp[1];
    p.size = 4; /* only dp (2) repeats it */
    expect_doc_fail(&p, 1, SHS_EINVAL, "opt_weight_shard_size 4");
    p = k_dptp[3];
    p.tm[0] = 0;
    p.ndev = 1;
    p.dev[0] = 4;
    p.step = 1;
    p.size = 2; /* split over every device: nothing repeats it */
    expect_doc_fail(&p, 1, SHS_EINVAL, "no device axis repeats it");
    p = k_dptp[0];
    p.field = 2;
    expect_doc_fail(&p, 1, SHS_EUNSUPPORTED, "field split");
    sparam_def two[2] = { k_dptp[0], k_dptp[3] };
    two[1].ndev = 1;
    two[1].dev[0] = 2;
    expect_doc_fail(two, 2, SHS_EINVAL, "'w' is laid out on 4 devices, 'b' on 2");
    sparam_def st[2] = { k_pipe[0], k_pipe[2] };
    st[1].name = "2-b"; /* stage 1 missing */
    expect_doc_fail(st, 2, SHS_EINVAL, "pipeline stage 1 of 0..2 has no parameter");
    sparam_def dup[2] = { k_pipe[3], k_pipe[4] };
    dup[1].name = "0-v";
    expect_doc_fail(dup, 2, SHS_EINVAL, "'v' appears twice in stage 0");
    dup[1].name = "1-v";
    dup[1].tm[0] = 0;
    expect_doc_fail(dup, 2, SHS_EINVAL, "'v' has one layout in stage 0 and another in stage 1");
    p = k_dptp[0];
    p.name = "w*";
    expect_doc_fail(&p, 1, SHS_EINVAL, "glob characters");
    /* bytes that are no ParallelStrategyMap */
    json_t *doc = NULL;
    assert_int_equal(shs__strategy_doc(&doc, "\x0a\xff\xff\xff\xff\x0f", 6, "t.ckpt", NULL, 0),
                     SHS_EINVAL);
    TU_ASSERT_MSG_HAS("t.ckpt: not a strategy file");
    assert_int_equal(shs__strategy_doc(&doc, "", 0, "t.ckpt", NULL, 0), SHS_EINVAL);
    /* a rank list that is not a permutation of the devices */
    unsigned char *data;
    size_t len = pack_strategy(&data, k_dptp, 1);
    static const int bad_map[4] = { 0, 1, 1, 3 };
    assert_int_equal(shs__strategy_doc(&doc, data, len, "t.ckpt", bad_map, 4), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("each of the ranks 0 to 3 once");
    assert_int_equal(shs__strategy_doc(&doc, data, len, "t.ckpt", bad_map, 3), SHS_EINVAL);
    free(data);
    /* reshard: a layout file and a strategy at once; a rank list alone */
    shs_reshard_opts o = SHS_RESHARD_OPTS_INIT;
    char *dst = tu_subpath("refused_out");
    char *s = write_strategy("ok.ckpt", k_dptp, 1);
    o.strategy_file = s;
    assert_int_equal(shs_reshard(NULL, g_src, dst, s, &o), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("not both");
    o.strategy_file = NULL;
    o.rank_list = bad_map;
    o.n_rank_list = 4;
    assert_int_equal(shs_reshard(NULL, g_src, dst, NULL, &o), SHS_EINVAL);
    struct stat sb;
    assert_int_not_equal(stat(dst, &sb), 0); /* nothing written */
    free(s);
    free(dst);
}

typedef struct sweep_ctx {
    unsigned char *data;
    size_t len;
} sweep_ctx;

static int sweep_run(void *ctx)
{
    sweep_ctx *c = ctx;
    json_t *doc = NULL;
    int rc = shs__strategy_doc(&doc, c->data, c->len, "t.ckpt", NULL, 0);
    json_decref(doc);
    return rc;
}

static void test_alloc_sweep(void **state)
{
    (void)state;
    sweep_ctx c;
    c.len = pack_strategy(&c.data, k_pipe, sizeof k_pipe / sizeof k_pipe[0]);
    tu_sweep s = { "strategy file", sweep_run, NULL, NULL, &c };
    assert_true(tu_failalloc_sweep(&s) > 0);
    free(c.data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dptp),
        cmocka_unit_test(test_pipeline_rank_list),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_alloc_sweep),
    };
    return TU_RUN_GROUP(tests, setup, teardown);
}
