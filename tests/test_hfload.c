/*
 * test_hfload.c -- starting a job from Hugging Face weights
 * (initial_load_in_hf, docs/hf.md): a single model.safetensors and a
 * sharded model with its index, BF16 files into F32 (and BF16) registered
 * tensors and refreshed master weights, 1 to 4 ranks as threads with
 * different chunkings (bytes read per rank checked: each rank reads its
 * boxes only; load_balanced: every byte once in total), the name map
 * (rules, JSON file, collisions), strict missing/unused, hf_assets_path,
 * the config checks, and every hostile index we could think of.
 */
#include "testutil.h"

#include "io.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static size_t numel(int k)
{
    return (size_t)(k_t[k].nd == 2 ? k_t[k].shape[0] * k_t[k].shape[1] : k_t[k].shape[0]);
}

/* Element i of tensor k: (64k + i + 1) / 4, exact in BF16 (8 significant
   bits), different for every element of every tensor. */
static float ref(int k, size_t i)
{
    return (float)(64 * k + (int)i + 1) / 4.0f;
}

static float g_f32[NT][64];
static uint16_t g_bf16[NT][64];

static void make_refs(void)
{
    for (int k = 0; k < NT; k++)
        for (size_t i = 0; i < numel(k); i++) {
            g_f32[k][i] = ref(k, i);
            g_bf16[k][i] = shs_f32_to_bf16(ref(k, i));
        }
}

static shs_tensor_view view(int k)
{
    shs_tensor_view v = { k_t[k].name, k_t[k].dt, k_t[k].nd, k_t[k].shape,
                          k_t[k].dt == SHS_BF16 ? (const void *)g_bf16[k] : g_f32[k] };
    return v;
}

static const char *k_shard1 = "model-00001-of-00002.safetensors";
static const char *k_shard2 = "model-00002-of-00002.safetensors";

/* A folder with model.safetensors holding all four tensors. */
static char *make_single(const char *name)
{
    char *dir = tu_subdir(name);
    shs_tensor_view v[NT];
    for (int k = 0; k < NT; k++)
        v[k] = view(k);
    const char *meta[] = { "format", "pt" };
    TU_OK(shs_save_file(tu_path(dir, "model.safetensors"), v, NT, meta, 1, NULL));
    return dir;
}

static void put_index(const char *dir, const char *weight_map)
{
    char text[2048];
    snprintf(text, sizeof text, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": %s}\n",
             weight_map);
    assert_int_equal(
        tu_write_file(tu_path(dir, "model.safetensors.index.json"), text, strlen(text)), 0);
}

static const char *k_good_map = "{\"model.embed.weight\": \"model-00001-of-00002.safetensors\", "
                                "\"model.layers.0.w\": \"model-00001-of-00002.safetensors\", "
                                "\"model.norm\": \"model-00002-of-00002.safetensors\", "
                                "\"lm_head.weight\": \"model-00002-of-00002.safetensors\"}";

/* A folder with two shards and the index; a stray .safetensors file the
   index does not name (it must never be opened). */
static char *make_sharded(const char *name)
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
static void box_of(int k, int r, int nr, uint64_t *off, uint64_t *shape)
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

static uint64_t box_numel(int k, const uint64_t *shape)
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

static void run_job(job *j)
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
        rc = shs_manager_load(m, &p, &res);
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

static job job_default(const char *path)
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

static void expect_ok(const job *j)
{
    if (j->rc != SHS_OK)
        fail_msg("rank %d: %d %s", j->rank, j->rc, j->msg);
    if (j->bad)
        fail_msg("rank %d: %d wrong values", j->rank, j->bad);
}

/* Bytes of the boxes rank r of nr holds, in the files' dtypes (lm_head
   not registered). */
static uint64_t box_bytes(int r, int nr)
{
    uint64_t off[2], shape[2], total = 0;
    for (int k = 0; k < T_HEAD; k++) {
        box_of(k, r, nr, off, shape);
        total += box_numel(k, shape) * shs_dtype_bits(k_t[k].dt) / 8;
    }
    return total;
}

/* ------------------------------------------------------------------ */
/* Threads as ranks, with point-to-point messages (load_balanced)      */
/* ------------------------------------------------------------------ */

#define MAXR 4

typedef struct msg {
    struct msg *next;
    int tag;
    size_t len;
    char data[];
} msg;

typedef struct tshared {
    int n;
    pthread_barrier_t bar;
    const void *slot[MAXR];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    msg *q[MAXR][MAXR]; /* [src][dst], FIFO */
} tshared;

typedef struct tcomm {
    tshared *sh;
    int rank;
} tcomm;

static int t_barrier(void *ctx)
{
    pthread_barrier_wait(&((tcomm *)ctx)->sh->bar);
    return SHS_OK;
}

static int t_bcast(void *ctx, void *buf, size_t len, int root)
{
    tcomm *c = ctx;
    if (c->rank == root)
        c->sh->slot[root] = buf;
    t_barrier(c);
    if (c->rank != root && len)
        memcpy(buf, c->sh->slot[root], len);
    return t_barrier(c);
}

static int t_allgather(void *ctx, const void *send, size_t len, void *recv)
{
    tcomm *c = ctx;
    c->sh->slot[c->rank] = send;
    t_barrier(c);
    for (int i = 0; i < c->sh->n; i++)
        if (len)
            memcpy((char *)recv + (size_t)i * len, c->sh->slot[i], len);
    return t_barrier(c);
}

static int t_gatherv(void *ctx, const void *send, const size_t *lens, void *recv, int root)
{
    tcomm *c = ctx;
    c->sh->slot[c->rank] = send;
    t_barrier(c);
    if (c->rank == root) {
        size_t at = 0;
        for (int i = 0; i < c->sh->n; i++) {
            if (lens[i])
                memcpy((char *)recv + at, c->sh->slot[i], lens[i]);
            at += lens[i];
        }
    }
    return t_barrier(c);
}

/* Buffered: the sender never waits. */
static int t_send(void *ctx, const void *buf, size_t len, int dest, int tag)
{
    tcomm *c = ctx;
    msg *x = malloc(sizeof *x + len + 1);
    if (!x)
        return SHS_ENOMEM;
    x->next = NULL;
    x->tag = tag;
    x->len = len;
    if (len)
        memcpy(x->data, buf, len);
    pthread_mutex_lock(&c->sh->mu);
    msg **pp = &c->sh->q[c->rank][dest];
    while (*pp)
        pp = &(*pp)->next;
    *pp = x;
    pthread_cond_broadcast(&c->sh->cv);
    pthread_mutex_unlock(&c->sh->mu);
    return SHS_OK;
}

static int t_recv(void *ctx, void *buf, size_t len, int src, int tag)
{
    tcomm *c = ctx;
    pthread_mutex_lock(&c->sh->mu);
    while (!c->sh->q[src][c->rank])
        pthread_cond_wait(&c->sh->cv, &c->sh->mu);
    msg *x = c->sh->q[src][c->rank];
    c->sh->q[src][c->rank] = x->next;
    pthread_mutex_unlock(&c->sh->mu);
    int rc = x->tag == tag && x->len == len ? SHS_OK : SHS_EIO;
    if (rc == SHS_OK && len)
        memcpy(buf, x->data, len);
    free(x);
    return rc;
}

static const shs_comm_ops k_tops = {
    SHS_COMM_OPS_VERSION, t_barrier, t_bcast, t_allgather, t_gatherv, t_send, t_recv, NULL
};

typedef struct rank_arg {
    tshared *sh;
    job *j;
} rank_arg;

static void *rank_main(void *arg)
{
    rank_arg *a = arg;
    tcomm tc = { a->sh, a->j->rank };
    shs_comm *comm = NULL;
    if (shs_comm_create(&comm, a->j->rank, a->j->nr, &k_tops, &tc) != SHS_OK) {
        a->j->rc = SHS_ENOMEM;
        return NULL;
    }
    a->j->comm = comm;
    run_job(a->j);
    shs_comm_free(comm);
    a->j->comm = NULL;
    return NULL;
}

/* Run `proto` on nr ranks (threads); js[r] get the outcomes. */
static void run_ranks(const job *proto, int nr, job *js)
{
    tshared sh;
    memset(&sh, 0, sizeof sh);
    sh.n = nr;
    pthread_barrier_init(&sh.bar, NULL, (unsigned)nr);
    pthread_mutex_init(&sh.mu, NULL);
    pthread_cond_init(&sh.cv, NULL);
    pthread_t th[MAXR];
    rank_arg a[MAXR];
    for (int r = 0; r < nr; r++) {
        js[r] = *proto;
        js[r].rank = r;
        js[r].nr = nr;
        a[r] = (rank_arg){ &sh, &js[r] };
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &a[r]), 0);
    }
    for (int r = 0; r < nr; r++)
        pthread_join(th[r], NULL);
    for (int s = 0; s < MAXR; s++)
        for (int d = 0; d < MAXR; d++) {
            assert_null(sh.q[s][d]); /* every message was received */
        }
    pthread_cond_destroy(&sh.cv);
    pthread_mutex_destroy(&sh.mu);
    pthread_barrier_destroy(&sh.bar);
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */
/* ------------------------------------------------------------------ */

/* model.safetensors alone: BF16 into F32, renamed, lm_head unused. */
static void test_single_file(void **state)
{
    (void)state;
    char *dir = make_single("single");
    for (int workers = 1; workers <= 2; workers++) {
        job j = job_default(dir);
        j.workers = workers;
        run_job(&j);
        expect_ok(&j);
        assert_int_equal(j.source, SHS_LOAD_INITIAL);
        assert_int_equal(j.optimizer_loaded, 0);
        assert_int_equal(j.progress_loaded, 0);
        assert_non_null(strstr(j.path_loaded, "/single/model.safetensors"));
        /* unused, not an error even when strict: reported */
        assert_int_equal(j.n_skipped, 1);
        assert_string_equal(j.skipped, "lm_head.weight;");
        assert_non_null(strstr(j.res_msg, "1 tensor(s) of the files unused: lm_head.weight"));
        assert_non_null(strstr(j.warning, "lm_head.weight"));
        /* the whole of each registered tensor, in the file's dtype */
        assert_int_equal(j.bytes_read, box_bytes(0, 1));
    }
    /* a folder of symbolic links (a Hugging Face cache snapshot) */
    char *snap = tu_subdir("snapshot");
    char target[1024];
    snprintf(target, sizeof target, "%s/model.safetensors", dir);
    assert_int_equal(symlink(target, tu_path(snap, "model.safetensors")), 0);
    job js = job_default(snap);
    run_job(&js);
    expect_ok(&js);
    free(snap);
    /* the file named directly; BF16 registered as BF16, masters refreshed */
    job j = job_default(tu_path(dir, "model.safetensors"));
    j.dt = SHS_BF16;
    j.register_head = 1;
    j.rules = "model.=backbone.,lm_head.=head.";
    run_job(&j);
    expect_ok(&j);
    assert_int_equal(j.master_ok, 1);
    assert_int_equal(j.n_skipped, 0);
    assert_string_equal(j.warning, "");
    free(dir);
}

/* The index chooses the files; initial_load_path may name it or its
   folder; hf_assets_path is the fallback when initial_load_path is "". */
static void test_sharded_index(void **state)
{
    (void)state;
    char *dir = make_sharded("sharded");
    const char *idx = tu_path(dir, "model.safetensors.index.json");
    char idx_copy[1024];
    snprintf(idx_copy, sizeof idx_copy, "%s", idx);
    for (int via = 0; via < 3; via++) {
        job j = job_default(via == 0 ? dir : via == 1 ? idx_copy : "");
        if (via == 2)
            j.assets = dir;
        run_job(&j);
        expect_ok(&j);
        assert_non_null(strstr(j.path_loaded, "model.safetensors.index.json"));
        assert_non_null(
            strstr(j.res_msg, via == 2 ? "from hf_assets_path" : "from initial_load_path"));
        assert_int_equal(j.bytes_read, box_bytes(0, 1));
    }
    /* initial_load_path wins over hf_assets_path */
    job j = job_default(dir);
    j.assets = "/nonexistent/assets";
    run_job(&j);
    expect_ok(&j);
    /* hf_assets_path alone without initial_load_in_hf is not a source */
    free(dir);
}

/* 1 to 4 ranks, rows / columns / replicated; bytes read per rank are the
   bytes of its boxes; with load_balanced every byte is read once. */
static void test_ranks(void **state)
{
    (void)state;
    char *dir = make_sharded("ranks");
    job js[MAXR];
    for (int nr = 1; nr <= MAXR; nr++)
        for (int balanced = 0; balanced < 2; balanced++)
            for (int bf = 0; bf < 2; bf++) {
                job proto = job_default(dir);
                proto.balanced = balanced;
                proto.dt = bf ? SHS_BF16 : SHS_F32;
                run_ranks(&proto, nr, js);
                uint64_t total = 0;
                for (int r = 0; r < nr; r++) {
                    expect_ok(&js[r]);
                    if (bf)
                        assert_int_equal(js[r].master_ok, 1);
                    total += js[r].bytes_read;
                    if (!balanced || nr == 1) {
                        if (js[r].bytes_read != box_bytes(r, nr))
                            fail_msg("nr %d rank %d: read %llu bytes, its boxes are %llu", nr, r,
                                     (unsigned long long)js[r].bytes_read,
                                     (unsigned long long)box_bytes(r, nr));
                    }
                }
                print_message("%d rank(s)%s %s: %llu bytes read in total\n", nr,
                              balanced ? " balanced" : "", bf ? "bf16" : "f32",
                              (unsigned long long)total);
                if (balanced && nr > 1 && total != box_bytes(0, 1))
                    fail_msg("balanced on %d ranks: %llu bytes read, the model is %llu", nr,
                             (unsigned long long)total, (unsigned long long)box_bytes(0, 1));
                if (nr > 1 && !balanced)
                    assert_true(js[0].bytes_read < box_bytes(0, 1));
            }
    free(dir);
}

/* The JSON map first, then the longest matching rule; collisions. */
static void test_name_map(void **state)
{
    (void)state;
    char *dir = make_single("names");
    char *mapf = tu_path_dup(dir, "names.json");
    /* the map renames the head; the rules the rest, longest prefix first */
    const char *mj = "{\"lm_head.weight\": \"head.weight\", \"model.norm\": \"net.norm\", "
                     "\"not.in.files\": \"x\"}";
    assert_int_equal(tu_write_file(mapf, mj, strlen(mj)), 0);
    job j = job_default(dir);
    /* model.norm: the map file's entry wins over the rule "model." */
    j.rules = "[model.=wrong., 'model.layers.=net.layers.', model.embed.=net.embed.]";
    j.prefix = "net.";
    j.mapfile = mapf;
    j.register_head = 1;
    run_job(&j);
    expect_ok(&j);
    assert_int_equal(j.n_skipped, 0);
    /* without the map file the head is not registered under its file name */
    j = job_default(dir);
    j.register_head = 1;
    run_job(&j);
    assert_int_equal(j.rc, SHS_EMISMATCH);
    assert_non_null(strstr(j.msg, "head.weight"));
    /* two tensors of the files onto one name */
    j = job_default(dir);
    j.rules = "model.=,lm_head.=embed.";
    j.prefix = "";
    run_job(&j);
    assert_int_equal(j.rc, SHS_EMISMATCH);
    assert_non_null(strstr(j.msg, "'lm_head.weight' and 'model.embed.weight'"));
    assert_non_null(strstr(j.msg, "become 'embed.weight'"));
    /* the map onto a name a rule also produces */
    const char *mj2 = "{\"lm_head.weight\": \"backbone.norm\"}";
    assert_int_equal(tu_write_file(mapf, mj2, strlen(mj2)), 0);
    j = job_default(dir);
    j.mapfile = mapf;
    run_job(&j);
    assert_int_equal(j.rc, SHS_EMISMATCH);
    assert_non_null(strstr(j.msg, "become 'backbone.norm'"));
    /* bad map files: each error names the file */
    static const char *bad[] = { "not json", "[1, 2]", "{\"a\": 3}", "{\"a\": \"\"}",
                                 "{\"a\": \"x\", \"a\": \"y\"}" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(tu_write_file(mapf, bad[i], strlen(bad[i])), 0);
        j = job_default(dir);
        j.mapfile = mapf;
        run_job(&j);
        if (j.rc != SHS_ECONFIG || !strstr(j.msg, "names.json"))
            fail_msg("map file '%s': %d %s", bad[i], j.rc, j.msg);
    }
    j = job_default(dir);
    j.mapfile = "/nonexistent/names.json";
    run_job(&j);
    assert_int_equal(j.rc, SHS_ENOENT);
    assert_non_null(strstr(j.msg, "/nonexistent/names.json"));
    free(mapf);
    free(dir);
}

/* strict: a registered tensor missing from the files is an error naming
   it; not strict: left as it was, listed and warned about. */
static void test_strict(void **state)
{
    (void)state;
    char *dir = make_sharded("strict");
    job j = job_default(dir);
    j.register_extra = 1;
    run_job(&j);
    assert_int_equal(j.rc, SHS_EMISMATCH);
    assert_non_null(strstr(j.msg, "not in the checkpoint: extra.bias"));
    j = job_default(dir);
    j.register_extra = 1;
    j.strict = 0;
    run_job(&j);
    expect_ok(&j);
    assert_true(j.extra[0] == 7.0f && j.extra[1] == 7.0f);
    assert_int_equal(j.n_skipped, 2);
    assert_non_null(strstr(j.skipped, "extra.bias;"));
    assert_non_null(strstr(j.skipped, "lm_head.weight;"));
    assert_non_null(strstr(j.res_msg, "1 registered tensor(s) not in the files, left as they "
                                      "were: extra.bias"));
    assert_non_null(strstr(j.warning, "extra.bias"));
    /* a wrong name map shows up as missing tensors, named */
    j = job_default(dir);
    j.rules = "model.=backbone_";
    run_job(&j);
    assert_int_equal(j.rc, SHS_EMISMATCH);
    assert_non_null(strstr(j.msg, "backbone.embed.weight"));
    free(dir);
}

/* Many unused tensors: all listed in skipped, the message cut. */
static void test_many_unused(void **state)
{
    (void)state;
    char *dir = tu_subdir("many");
    enum {
        NPAD = 80
    };
    static char names[NPAD + 1][32];
    static float vals[NPAD + 1];
    static const uint64_t one[1] = { 1 };
    shs_tensor_view tv[NPAD + 1];
    for (int i = 0; i <= NPAD; i++) {
        snprintf(names[i], sizeof names[i], i < NPAD ? "model.rotary.%02d.inv_freq" : "w", i);
        vals[i] = (float)i;
        tv[i] = (shs_tensor_view){ names[i], SHS_F32, 1, one, &vals[i] };
    }
    TU_OK(shs_save_file(tu_path(dir, "model.safetensors"), tv, NPAD + 1, NULL, 0, NULL));
    shs_state *st;
    TU_OK(shs_state_create(&st));
    float w = -1;
    tu_add_tensor(st, "w", SHS_KIND_MODEL, SHS_F32, 1, one, &w, NULL);
    shs_config c;
    shs_config_init(&c);
    c.enable_save = 0;
    c.initial_load_in_hf = 1;
    c.initial_load_path = dir;
    shs_manager *m;
    TU_OK(shs_manager_create(&m, &c, st));
    shs_progress p = SHS_PROGRESS_INIT;
    shs_load_result r = SHS_LOAD_RESULT_INIT;
    TU_OK(shs_manager_load(m, &p, &r));
    assert_true(w == (float)NPAD);
    assert_int_equal(r.n_skipped, NPAD);
    assert_string_equal(r.skipped[NPAD - 1], "model.rotary.79.inv_freq");
    assert_non_null(
        strstr(r.message, "80 tensor(s) of the files unused: model.rotary.00.inv_freq"));
    assert_non_null(strstr(r.message, ", ..."));
    assert_true(strlen(r.message) < 1024);
    assert_int_equal(r.bytes_read, 4); /* w only */
    shs_manager_free(m);
    shs_state_free(st);
    free(dir);
}

/* A dtype the loader cannot convert (I32 file into F32) is an error. */
static void test_unconvertible(void **state)
{
    (void)state;
    char *dir = tu_subdir("i32");
    int32_t v[6] = { 1, 2, 3, 4, 5, 6 };
    uint64_t shape[1] = { 6 };
    shs_tensor_view tv = { "model.norm", SHS_I32, 1, shape, v };
    TU_OK(shs_save_file(tu_path(dir, "model.safetensors"), &tv, 1, NULL, 0, NULL));
    shs_state *st;
    TU_OK(shs_state_create(&st));
    float f[6];
    tu_add_tensor(st, "model.norm", SHS_KIND_MODEL, SHS_F32, 1, shape, f, NULL);
    shs_config c;
    shs_config_init(&c);
    c.enable_save = 0;
    c.initial_load_in_hf = 1;
    c.initial_load_path = dir;
    shs_manager *m;
    TU_OK(shs_manager_create(&m, &c, st));
    shs_progress p = SHS_PROGRESS_INIT;
    assert_int_equal(shs_manager_load(m, &p, NULL), SHS_EMISMATCH);
    TU_ASSERT_MSG_HAS("registered as model F32 [6], saved as model I32 [6]");
    shs_manager_free(m);
    shs_state_free(st);
    free(dir);
}

/* Every index that must be refused, with the file named. */
static void test_hostile_index(void **state)
{
    (void)state;
    char *dir = make_sharded("hostile");
    static const struct {
        const char *map; /* NULL: raw text below */
        const char *raw;
        int rc;
        const char *needle;
    } cases[] = {
        { "{\"model.norm\": \"../model-00002-of-00002.safetensors\"}", NULL, SHS_ECORRUPT,
          "../model-00002-of-00002.safetensors" },
        { "{\"model.norm\": \"sub/model-00002-of-00002.safetensors\"}", NULL, SHS_ECORRUPT,
          "sub/model-00002-of-00002.safetensors" },
        { "{\"model.norm\": \"/etc/passwd\"}", NULL, SHS_ECORRUPT, "/etc/passwd" },
        { "{\"model.norm\": \".hidden.safetensors\"}", NULL, SHS_ECORRUPT, ".hidden" },
        { "{\"model.norm\": \"model-00003-of-00003.safetensors\"}", NULL, SHS_ECORRUPT,
          "model-00003-of-00003.safetensors" },
        /* a tensor its file does not hold */
        { "{\"model.embed.weight\": \"model-00002-of-00002.safetensors\", "
          "\"model.layers.0.w\": \"model-00001-of-00002.safetensors\", "
          "\"model.norm\": \"model-00002-of-00002.safetensors\", "
          "\"lm_head.weight\": \"model-00002-of-00002.safetensors\"}",
          NULL, SHS_ECORRUPT, "'model.embed.weight' is mapped to 'model-00002-of-00002" },
        /* a tensor of a named file that the index does not list */
        { "{\"model.embed.weight\": \"model-00001-of-00002.safetensors\", "
          "\"model.norm\": \"model-00002-of-00002.safetensors\", "
          "\"lm_head.weight\": \"model-00002-of-00002.safetensors\"}",
          NULL, SHS_ECORRUPT, "tensor 'model.layers.0.w' of the file 'model-00001-of-00002" },
        { "{\"model.norm\": 3}", NULL, SHS_ECORRUPT, "is not a file name" },
        { "{}", NULL, SHS_ENOCHECKPOINT, "weight_map is empty" },
        { NULL, "{\"weight_map\": [1]}", SHS_ECORRUPT, "no \"weight_map\" object" },
        { NULL, "{\"weight_map\": {\"a\": \"b\",}}", SHS_ECORRUPT, "not valid JSON" },
        { NULL, "{\"weight_map\": {\"model.norm\": \"x\", \"model.norm\": \"y\"}}", SHS_ECORRUPT,
          "not valid JSON" },
        { NULL, "", SHS_ECORRUPT, "not valid JSON" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].map)
            put_index(dir, cases[i].map);
        else
            assert_int_equal(tu_write_file(tu_path(dir, "model.safetensors.index.json"),
                                           cases[i].raw, strlen(cases[i].raw)),
                             0);
        job j = job_default(dir);
        run_job(&j);
        if (j.rc != cases[i].rc || !strstr(j.msg, cases[i].needle) ||
            !strstr(j.msg, "model.safetensors.index.json") || !strstr(j.msg, "initial_load_path"))
            fail_msg("case %zu: %d %s (want %d, '%s')", i, j.rc, j.msg, cases[i].rc,
                     cases[i].needle);
    }
    /* a shard that is not a safetensors file */
    put_index(dir, k_good_map);
    assert_int_equal(tu_write_file(tu_path(dir, k_shard2), "not a safetensors file", 22), 0);
    job j = job_default(dir);
    run_job(&j);
    assert_true(j.rc < 0);
    assert_non_null(strstr(j.msg, k_shard2));
    free(dir);
}

/* Paths that are not Hugging Face weights. */
static void test_not_hf(void **state)
{
    (void)state;
    /* a folder with neither file (a loose .safetensors is not globbed) */
    char *empty = tu_subdir("nohf");
    assert_int_equal(tu_write_file(tu_path(empty, "weights.safetensors"), "x", 1), 0);
    job j = job_default(empty);
    run_job(&j);
    assert_int_equal(j.rc, SHS_ENOCHECKPOINT);
    assert_non_null(strstr(j.msg, "no model.safetensors.index.json and no model.safetensors"));
    /* does not exist */
    j = job_default("/nonexistent/hf/model");
    run_job(&j);
    assert_int_equal(j.rc, SHS_ENOENT);
    assert_non_null(strstr(j.msg, "/nonexistent/hf/model"));
    /* another kind of file */
    j = job_default(tu_path(empty, "weights.safetensors") /* exists */);
    run_job(&j);
    assert_true(j.rc < 0);
    assert_non_null(strstr(j.msg, "weights.safetensors"));
    assert_int_equal(tu_write_file(tu_path(empty, "config.txt"), "x", 1), 0);
    j = job_default(tu_path(empty, "config.txt"));
    run_job(&j);
    assert_int_equal(j.rc, SHS_EINVAL);
    /* a save path of ours, and one of its step directories */
    char *sp = tu_subdir("ours");
    tu_small s;
    tu_small_make(&s, 1.0f, 0);
    shs_progress p = tu_prog(5);
    TU_OK(tu_save_once(sp, s.st, &p, 0));
    shs_state_free(s.st);
    j = job_default(sp);
    run_job(&j);
    assert_int_equal(j.rc, SHS_EINVAL);
    assert_non_null(strstr(j.msg, "is a save path holding checkpoints"));
    j = job_default(tu_step_dir(sp, 5));
    run_job(&j);
    assert_int_equal(j.rc, SHS_EINVAL);
    assert_non_null(strstr(j.msg, "is a checkpoint step directory"));
    free(sp);
    free(empty);
}

/* The options as config fields: names, YAML, checks at create, and a
   version-1 config. */
static void test_config(void **state)
{
    (void)state;
    shs_config c;
    shs_config_init(&c);
    assert_int_equal(c.initial_load_in_hf, 0);
    assert_string_equal(c.hf_assets_path, "");
    assert_string_equal(c.hf_name_map, "");
    assert_string_equal(c.hf_name_map_file, "");
    TU_OK(shs_config_set(&c, "initial_load_in_hf", "true"));
    TU_OK(shs_config_set(&c, "hf_assets_path", "/hf/llama"));
    TU_OK(shs_config_set(&c, "hf_name_map", "model.=backbone., =all."));
    TU_OK(shs_config_set(&c, "hf_name_map_file", "/hf/map.json"));
    assert_int_equal(c.initial_load_in_hf, 1);
    assert_string_equal(c.hf_assets_path, "/hf/llama");
    static const struct {
        const char *v, *needle;
    } bad[] = {
        { "model.", "rule 'model.' is not from=to" },
        { "a=b=c", "rule 'a=b=c' is not from=to" },
        { "a=b, a=c", "two rules for the prefix 'a'" },
        { "[a=b", "unbalanced '['" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(shs_config_set(&c, "hf_name_map", bad[i].v), SHS_ECONFIG);
        TU_ASSERT_MSG_HAS(bad[i].needle);
        TU_ASSERT_MSG_HAS("hf_name_map");
    }
    assert_string_equal(c.hf_name_map, "model.=backbone., =all."); /* unchanged */
    shs_config_release(&c);
    assert_string_equal(c.hf_assets_path, "");

    /* YAML: the map as a list */
    char *y = tu_subpath("hf.yaml");
    const char *text = "checkpoint:\n"
                       "  initial_load_in_hf: true\n"
                       "  hf_assets_path: /models/qwen\n"
                       "  hf_name_map:\n"
                       "    - \"model.=backbone.\"\n"
                       "    - lm_head.=head.\n";
    assert_int_equal(tu_write_file(y, text, strlen(text)), 0);
    shs_config_init(&c);
    TU_OK(shs_config_load_yaml(&c, y));
    assert_int_equal(c.initial_load_in_hf, 1);
    assert_string_equal(c.hf_assets_path, "/models/qwen");
    assert_string_equal(c.hf_name_map, "model.=backbone.,lm_head.=head.");
    shs_config_release(&c);
    const char *badyaml = "checkpoint:\n  hf_name_map: [model.]\n";
    assert_int_equal(tu_write_file(y, badyaml, strlen(badyaml)), 0);
    shs_config_init(&c);
    assert_int_equal(shs_config_load_yaml(&c, y), SHS_ECONFIG);
    TU_ASSERT_MSG_HAS("hf.yaml:2: hf_name_map: rule 'model.' is not from=to");
    shs_config_release(&c);
    free(y);

    /* checks at create */
    shs_state *st;
    TU_OK(shs_state_create(&st));
    shs_manager *m = NULL;
    shs_config_init(&c);
    c.enable_save = 0;
    c.initial_load_in_hf = 1;
    c.initial_load_model_only = 0;
    assert_int_equal(shs_manager_create(&m, &c, st), SHS_ECONFIG);
    TU_ASSERT_MSG_HAS("initial_load_model_only must be true");
    c.initial_load_model_only = 1;
    assert_int_equal(shs_manager_create(&m, &c, st), SHS_ECONFIG);
    TU_ASSERT_MSG_HAS("neither initial_load_path nor hf_assets_path");
    shs_config_init(&c);
    c.enable_save = 0;
    c.initial_load_path = "/models/x";
    c.hf_name_map = "model.=x.";
    assert_int_equal(shs_manager_create(&m, &c, st), SHS_ECONFIG);
    TU_ASSERT_MSG_HAS("set initial_load_in_hf");
    c.initial_load_in_hf = 1;
    c.hf_name_map = "model."; /* assigned directly: checked at create */
    assert_int_equal(shs_manager_create(&m, &c, st), SHS_ECONFIG);
    TU_ASSERT_MSG_HAS("hf_name_map: rule 'model.'");
    assert_null(m);

    /* a version-1 config: its fields only (the later ones are defaults,
       whatever the bytes beyond it hold), and no setting of later ones */
    shs_config_init(&c);
    c.version = 1;
    c.enable_save = 0;
    c.initial_load_in_hf = 1;
    c.initial_load_model_only = 0; /* would be refused in version 2 */
    c.hf_name_map = "garbage";
    TU_OK(shs_manager_create(&m, &c, st));
    shs_manager_free(m);
    assert_int_equal(shs_config_set(&c, "hf_assets_path", "/x"), SHS_ECONFIG);
    TU_ASSERT_MSG_HAS("version 1");
    TU_OK(shs_config_set(&c, "save_path", "/y"));
    shs_config_release(&c);
    shs_state_free(st);
}

/* Without initial_load_in_hf a folder of plain files still loads as one
   (the earlier behaviour), and hf_assets_path is not a source. */
static void test_without_flag(void **state)
{
    (void)state;
    char *dir = make_single("noflag");
    shs_state *st;
    TU_OK(shs_state_create(&st));
    uint16_t h[48];
    tu_add_tensor(st, "model.embed.weight", SHS_KIND_MODEL, SHS_BF16, 2, k_t[T_EMBED].shape, h,
                  NULL);
    shs_config c;
    shs_config_init(&c);
    c.enable_save = 0;
    c.strict = 0;
    c.hf_assets_path = dir;
    shs_manager *m;
    TU_OK(shs_manager_create(&m, &c, st));
    shs_progress p = SHS_PROGRESS_INIT;
    shs_load_result r = SHS_LOAD_RESULT_INIT;
    TU_OK(shs_manager_load(m, &p, &r));
    assert_int_equal(r.loaded, 0); /* fresh start */
    shs_manager_free(m);
    c.initial_load_path = dir;
    TU_OK(shs_manager_create(&m, &c, st));
    TU_OK(shs_manager_load(m, &p, &r));
    assert_int_equal(r.loaded, 1);
    assert_int_equal(r.source, SHS_LOAD_INITIAL);
    assert_int_equal(memcmp(h, g_bf16[T_EMBED], sizeof h), 0);
    shs_manager_free(m);
    shs_state_free(st);
    free(dir);
}

/* Without mmap (the pread fallback): each rank reads its rows of a
   256 KiB BF16 tensor through small windows, not the whole tensor. */
static atomic_ullong g_pread_bytes;
static shs__io_ops g_io;

static void *no_mmap(int fd, size_t len)
{
    (void)fd, (void)len;
    return NULL;
}

static ssize_t counting_pread(int fd, void *buf, size_t n, off_t off)
{
    ssize_t got = shs__io_posix.pread(fd, buf, n, off);
    if (got > 0)
        atomic_fetch_add(&g_pread_bytes, (unsigned long long)got);
    return got;
}

typedef struct big_rank {
    int rank, nr;
    const char *dir;
    int rc;
    char msg[512];
    uint64_t bytes_read;
    int bad;
} big_rank;

static tshared g_big_sh;

static void *big_main(void *arg)
{
    big_rank *b = arg;
    tcomm tc = { &g_big_sh, b->rank };
    shs_comm *comm = NULL;
    shs_state *st = NULL;
    shs_manager *m = NULL;
    static const uint64_t g[2] = { 256, 512 };
    uint64_t off[2] = { 256 / (uint64_t)b->nr * (uint64_t)b->rank, 0 };
    uint64_t shape[2] = { 256 / (uint64_t)b->nr, 512 };
    float *buf = calloc((size_t)(shape[0] * shape[1]), sizeof *buf);
    int rc = buf ? shs_comm_create(&comm, b->rank, b->nr, &k_tops, &tc) : SHS_ENOMEM;
    if (rc == SHS_OK)
        rc = shs_state_create(&st);
    if (rc == SHS_OK) {
        shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
        s.name = "w";
        s.ndim = 2;
        s.shape = shape;
        s.global_shape = g;
        s.global_offset = off;
        s.data = buf;
        rc = shs_state_add_tensor(st, &s);
    }
    shs_config c;
    shs_config_init(&c);
    c.enable_save = 0;
    c.initial_load_in_hf = 1;
    c.initial_load_path = b->dir;
    if (rc == SHS_OK)
        rc = shs_manager_create_comm(&m, &c, st, comm);
    shs_progress p = SHS_PROGRESS_INIT;
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    if (rc == SHS_OK)
        rc = shs_manager_load(m, &p, &res);
    b->rc = rc;
    snprintf(b->msg, sizeof b->msg, "%s", rc < 0 ? shs_last_error() : "");
    b->bytes_read = res.bytes_read;
    for (uint64_t i = 0; rc == SHS_OK && i < shape[0] * shape[1]; i++)
        b->bad += buf[i] != (float)((off[0] * 512 + i) % 251);
    shs_manager_free(m);
    shs_state_free(st);
    shs_comm_free(comm);
    free(buf);
    return NULL;
}

static void test_pread_boxes(void **state)
{
    (void)state;
    char *dir = tu_subdir("big");
    static const uint64_t g[2] = { 256, 512 };
    uint16_t *w = malloc(256 * 512 * sizeof *w);
    assert_non_null(w);
    for (size_t i = 0; i < 256 * 512; i++)
        w[i] = shs_f32_to_bf16((float)(i % 251));
    shs_tensor_view tv = { "w", SHS_BF16, 2, g, w };
    TU_OK(shs_save_file(tu_path(dir, "model.safetensors"), &tv, 1, NULL, 0, NULL));
    free(w);
    g_io = shs__io_posix;
    g_io.mmap = no_mmap;
    g_io.pread = counting_pread;
    for (int nr = 1; nr <= MAXR; nr *= 2) {
        big_rank b[MAXR];
        pthread_t th[MAXR];
        memset(&g_big_sh, 0, sizeof g_big_sh);
        g_big_sh.n = nr;
        pthread_barrier_init(&g_big_sh.bar, NULL, (unsigned)nr);
        pthread_mutex_init(&g_big_sh.mu, NULL);
        pthread_cond_init(&g_big_sh.cv, NULL);
        atomic_store(&g_pread_bytes, 0);
        shs__io_set(&g_io);
        for (int r = 0; r < nr; r++) {
            b[r] = (big_rank){ r, nr, dir, 0, "", 0, 0 };
            assert_int_equal(pthread_create(&th[r], NULL, big_main, &b[r]), 0);
        }
        for (int r = 0; r < nr; r++)
            pthread_join(th[r], NULL);
        shs__io_set(NULL);
        pthread_cond_destroy(&g_big_sh.cv);
        pthread_mutex_destroy(&g_big_sh.mu);
        pthread_barrier_destroy(&g_big_sh.bar);
        uint64_t box = 256 * 512 * 2 / (uint64_t)nr;
        for (int r = 0; r < nr; r++) {
            if (b[r].rc != SHS_OK || b[r].bad)
                fail_msg("%d ranks, rank %d: %d %s, %d wrong", nr, r, b[r].rc, b[r].msg, b[r].bad);
            if (b[r].bytes_read != box)
                fail_msg("%d ranks, rank %d: read %llu bytes, its box is %llu", nr, r,
                         (unsigned long long)b[r].bytes_read, (unsigned long long)box);
        }
        /* what the ranks pread in all: the tensor once, plus the headers
           (each rank reads the header of the file twice: the model, then
           the load) */
        unsigned long long all = atomic_load(&g_pread_bytes);
        print_message("%d rank(s), pread: %llu bytes in all (tensor: %d)\n", nr, all,
                      256 * 512 * 2);
        assert_true(all >= 256 * 512 * 2);
        assert_true(all < 256 * 512 * 2 + (unsigned long long)nr * 1024);
    }
    free(dir);
}

int main(void)
{
    make_refs();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_file),   cmocka_unit_test(test_sharded_index),
        cmocka_unit_test(test_ranks),         cmocka_unit_test(test_name_map),
        cmocka_unit_test(test_strict),        cmocka_unit_test(test_unconvertible),
        cmocka_unit_test(test_hostile_index), cmocka_unit_test(test_not_hf),
        cmocka_unit_test(test_config),        cmocka_unit_test(test_without_flag),
        cmocka_unit_test(test_pread_boxes),   cmocka_unit_test(test_many_unused),
    };
    return TU_RUN_GROUP(tests, tu_setup_root, tu_teardown_root);
}
