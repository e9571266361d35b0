/*
 * test_mindspore.c -- MindSpore Transformers "Checkpoint 2.0" directories
 * (src/source/meta_ms.c), made by tests/gen_mscp2.py from the documented format:
 * saved on 1 and 4 ranks (tensor_map splits, nested maps, replicated
 * tensors, layout-less ones), read through the public read API (every
 * tensor, boxes across slices, dtype conversion, progress, verify) and
 * loaded by the manager on 1, 2 and 3 ranks (threads over a test
 * communicator), every value compared with the generator's reference
 * file.  Then the hostile variants, each refused with a message naming
 * the tensor or the file, our own damaged directories still refused, and
 * an allocation-failure sweep over the open.
 */
#include "testutil.h"

#include "source/meta_ms.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEP 2000
#define QKV "decoder.layers.0.self_attention.linear_qkv.weight"

static int g_have_py = -1;

/* The generator needs Debian's python3 with numpy. */
static int have_python(void)
{
    if (g_have_py < 0)
        g_have_py = system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
    return g_have_py;
}

/* Generate a save path `sp` of `ranks` ranks (variant `variant`, more
   options `extra`), and the reference file `ref` when not NULL. */
static void gen_ex(const char *sp, int ranks, const char *variant, const char *ref,
                   const char *extra)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s/tests/gen_mscp2.py '%s' --ranks %d --variant %s %s%s%s%s",
             SHS_TEST_SOURCE_DIR, sp, ranks, variant, extra, ref ? " --ref '" : "", ref ? ref : "",
             ref ? "'" : "");
    if (system(cmd) != 0)
        fail_msg("generator failed: %s", cmd);
}

static void gen(const char *sp, int ranks, const char *variant, const char *ref)
{
    gen_ex(sp, ranks, variant, ref, "");
}

/* ------------------------------------------------------------------ */
/* The reference: every global tensor whole, in one plain file          */
/* ------------------------------------------------------------------ */

typedef struct refset {
    shs_file *f;
    char *path;
} refset;

static refset g_ref;

static int group_setup(void **state)
{
    tu_setup_root(state);
    if (!have_python())
        return 0;
    g_ref.path = tu_subpath("ref.safetensors");
    char *sp = tu_subpath("ref_sp");
    gen(sp, 4, "good", g_ref.path);
    free(sp);
    return shs_file_open(&g_ref.f, g_ref.path, NULL) == SHS_OK ? 0 : -1;
}

static int group_teardown(void **state)
{
    shs_file_free(g_ref.f);
    free(g_ref.path);
    return tu_teardown_root(state);
}

/* The reference bytes of tensor `name` (and its info). */
static const uint8_t *ref_of(const char *name, const shs_tensor_info **ti)
{
    size_t idx;
    if (shs_file_find(&idx, g_ref.f, name) != SHS_OK)
        fail_msg("no reference for '%s'", name);
    *ti = shs_file_tensor(g_ref.f, idx);
    const void *p = shs_file_tensor_data(g_ref.f, idx);
    assert_non_null(p);
    return p;
}

static uint64_t numel(const uint64_t *shape, size_t nd)
{
    uint64_t n = 1;
    for (size_t d = 0; d < nd; d++)
        n *= shape[d];
    return n;
}

/* Copy the box [off, off + shape) of a row-major tensor of global shape g
   (element size es, 1 or 2 dimensions) into dst. */
static void ref_box(void *dst, const uint8_t *src, size_t es, size_t nd, const uint64_t *g,
                    const uint64_t *off, const uint64_t *shape)
{
    if (nd == 1) {
        memcpy(dst, src + off[0] * es, shape[0] * es);
        return;
    }
    for (uint64_t i = 0; i < shape[0]; i++)
        memcpy((uint8_t *)dst + i * shape[1] * es, src + ((off[0] + i) * g[1] + off[1]) * es,
               shape[1] * es);
}

/* ------------------------------------------------------------------ */
/* Read API                                                            */
/* ------------------------------------------------------------------ */

/* Every tensor of ck equals the reference, read whole. */
static void check_all_tensors(const shs_checkpoint *ck)
{
    assert_int_equal(shs_checkpoint_tensor_count(ck), shs_file_tensor_count(g_ref.f));
    for (size_t i = 0; i < shs_checkpoint_tensor_count(ck); i++) {
        const shs_checkpoint_tensor_info *t = shs_checkpoint_tensor(ck, i);
        const shs_tensor_info *ri;
        const uint8_t *want = ref_of(t->name, &ri);
        assert_int_equal(t->dtype, ri->dtype);
        assert_int_equal(t->ndim, ri->ndim);
        assert_memory_equal(t->shape, ri->shape, t->ndim * sizeof(uint64_t));
        uint8_t *got = malloc(ri->nbytes);
        assert_non_null(got);
        TU_OK(shs_checkpoint_read(ck, i, NULL, NULL, t->dtype, got, ri->nbytes));
        if (memcmp(got, want, ri->nbytes) != 0)
            fail_msg("tensor '%s' differs from the reference", t->name);
        free(got);
        shs_chunk_info c = SHS_CHUNK_INFO_INIT;
        TU_OK(shs_checkpoint_chunk(&c, ck, i, 0));
        assert_int_equal(c.has_xxh3, 0); /* MindSpore files carry none */
    }
}

/* Flip one bit of the first byte of tensor `name`'s data in file `path`. */
static void flip_tensor_byte(const char *path, const char *name)
{
    shs_file *f = NULL;
    size_t idx;
    TU_OK(shs_file_open(&f, path, NULL));
    TU_OK(shs_file_find(&idx, f, name));
    uint64_t at = shs_file_data_start(f) + shs_file_tensor(f, idx)->offset;
    shs_file_free(f);
    size_t len;
    uint8_t *b = tu_read_file(path, &len);
    assert_non_null(b);
    assert_true(at < len);
    b[at] ^= 0x10;
    assert_int_equal(tu_write_file(path, b, len), 0);
    free(b);
}

static size_t find(const shs_checkpoint *ck, const char *name)
{
    size_t i;
    TU_OK(shs_checkpoint_find(&i, ck, name));
    return i;
}

static void test_read_4_ranks(void **state)
{
    (void)state;
    if (!have_python())
        TU_SKIP();
    char *sp = tu_subpath("read4");
    gen(sp, 4, "good", NULL);
    shs_checkpoint *ck = NULL;
    TU_OK(shs_checkpoint_open(&ck, sp, NULL)); /* the save path: its tracker */
    assert_int_equal(shs_checkpoint_format(ck), SHS_FORMAT_MINDSPORE);
    assert_string_equal(shs_format_name(shs_checkpoint_format(ck)), "mindspore");
    assert_int_equal(shs_checkpoint_step(ck), STEP);
    assert_int_equal(shs_checkpoint_world_size(ck), 4);
    assert_int_equal((shs_checkpoint_format(ck) == SHS_FORMAT_PLAIN), 0);
    assert_int_equal(shs_checkpoint_format_version(ck), 0);
    assert_int_equal(shs_checkpoint_file_count(ck), 8);
    assert_string_equal(shs_checkpoint_file_name(ck, 0),
                        "checkpoint-model-0000000-0000004.safetensors");
    assert_int_equal(shs_checkpoint_file_rank(ck, 5), 1); /* opt-0000001 */
    check_all_tensors(ck);

    /* kinds from the file types; replicas: one chunk per holding rank */
    const shs_checkpoint_tensor_info *t = shs_checkpoint_tensor(ck, find(ck, QKV));
    assert_int_equal(t->kind, SHS_KIND_MODEL);
    assert_int_equal(t->n_chunks, 4); /* 2 slices x 2 dp replicas */
    t = shs_checkpoint_tensor(ck, find(ck, "decoder.final_layernorm.weight"));
    assert_int_equal(t->n_chunks, 4);
    t = shs_checkpoint_tensor(ck, find(ck, "global_step"));
    assert_int_equal(t->kind, SHS_KIND_OPTIMIZER);

    /* slice 1 of qkv (tp coordinate 1) is rows 4..7, held by ranks 1, 3 */
    shs_chunk_info c = SHS_CHUNK_INFO_INIT;
    size_t qi = find(ck, QKV);
    int seen = 0;
    for (size_t k = 0; k < 4; k++) {
        TU_OK(shs_checkpoint_chunk(&c, ck, qi, k));
        if (c.offset[0] == 4) {
            int r = shs_checkpoint_file_rank(ck, c.file);
            assert_true(r == 1 || r == 3);
            assert_int_equal(c.shape[0], 4);
            seen++;
        }
    }
    assert_int_equal(seen, 2);

    /* a box across the slices of a 2 x 2 split (linear_fc1: dp rows, tp
       columns) */
    const shs_tensor_info *ri;
    const uint8_t *want = ref_of("decoder.layers.0.mlp.linear_fc1.weight", &ri);
    uint64_t start[2] = { 2, 1 }, count[2] = { 3, 2 };
    float got[6], exp[6];
    TU_OK(shs_checkpoint_read(ck, find(ck, "decoder.layers.0.mlp.linear_fc1.weight"), start, count,
                              SHS_F32, got, sizeof got));
    ref_box(exp, want, 4, 2, ri->shape, start, count);
    assert_memory_equal(got, exp, sizeof got);

    /* BF16 (nested tensor_map: rows over dp x tp) converted to F32 */
    want = ref_of("embedding.word_embeddings.weight", &ri);
    uint64_t s2[2] = { 1, 0 }, c2[2] = { 6, 4 };
    float bf[24];
    uint16_t raw[24];
    TU_OK(shs_checkpoint_read(ck, find(ck, "embedding.word_embeddings.weight"), s2, c2, SHS_F32, bf,
                              sizeof bf));
    ref_box(raw, want, 2, 2, ri->shape, s2, c2);
    for (int i = 0; i < 24; i++)
        assert_true(bf[i] == shs_bf16_to_f32(raw[i]));

    /* common.json: MindSpore's seven keys */
    shs_progress p = SHS_PROGRESS_INIT;
    TU_OK(shs_checkpoint_progress(&p, ck));
    assert_int_equal(p.global_step, STEP);
    assert_int_equal(p.global_batch_size, 64);
    assert_int_equal(p.consumed_samples, STEP * 64);
    assert_int_equal(p.step_num, 3000);
    shs_checkpoint_free(ck);

    /* the step directory itself, and verify (no checksums to check) */
    const char *dir = tu_step_dir(sp, STEP);
    TU_OK(shs_checkpoint_open(&ck, dir, NULL));
    assert_int_equal(shs_checkpoint_format(ck), SHS_FORMAT_MINDSPORE);
    shs_checkpoint_free(ck);
    TU_OK(shs_checkpoint_verify(dir, NULL, 0));
    /* no checksums: a changed byte in a replicated slice (rank 3's copy
       of qkv's slice 1, rank 1 holding the other) fails verify, naming
       both files; in a slice stored once (linear_fc1, cut over all four
       ranks) nothing can see it */
    flip_tensor_byte(tu_path(dir, "checkpoint-model-0000003-0000004.safetensors"), QKV);
    assert_int_equal(shs_checkpoint_verify(dir, NULL, 0), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("its copies in 'checkpoint-model-0000001-0000004.safetensors' and "
                      "'checkpoint-model-0000003-0000004.safetensors' differ");
    TU_ASSERT_MSG_HAS(QKV);
    flip_tensor_byte(tu_path(dir, "checkpoint-model-0000003-0000004.safetensors"), QKV);
    TU_OK(shs_checkpoint_verify(dir, NULL, 0));
    flip_tensor_byte(tu_path(dir, "checkpoint-model-0000003-0000004.safetensors"),
                     "decoder.layers.0.mlp.linear_fc1.weight");
    TU_OK(shs_checkpoint_verify(dir, NULL, 0));
    /* under another name, the step comes from common.json */
    char *moved = tu_subpath("renamed4");
    assert_int_equal(rename(dir, moved), 0);
    TU_OK(shs_checkpoint_open(&ck, moved, NULL));
    assert_int_equal(shs_checkpoint_step(ck), STEP);
    shs_checkpoint_free(ck);
    free(moved);
    assert_int_equal(shs_checkpoint_format(NULL), SHS_EINVAL);
    assert_null(shs_format_name(7));
    free(sp);
}

static void test_read_1_rank(void **state)
{
    (void)state;
    if (!have_python())
        TU_SKIP();
    char *sp = tu_subpath("read1");
    gen(sp, 1, "good", NULL);
    const char *dir = tu_step_dir(sp, STEP);
    assert_false(tu_path_exists(tu_path(dir, "metadata.json")));
    int64_t steps[4];
    size_t n = 0;
    TU_OK(shs_checkpoint_list(steps, 4, &n, sp)); /* committed without metadata.json */
    assert_int_equal(n, 1);
    assert_int_equal(steps[0], STEP);
    shs_checkpoint *ck = NULL;
    TU_OK(shs_checkpoint_open(&ck, sp, NULL));
    assert_int_equal(shs_checkpoint_format(ck), SHS_FORMAT_MINDSPORE);
    assert_int_equal(shs_checkpoint_world_size(ck), 1);
    assert_int_equal(shs_checkpoint_step(ck), STEP);
    assert_int_equal(shs_checkpoint_file_count(ck), 2);
    check_all_tensors(ck);
    assert_int_equal(shs_checkpoint_tensor(ck, find(ck, "global_step"))->kind, SHS_KIND_OPTIMIZER);
    shs_progress p = SHS_PROGRESS_INIT;
    TU_OK(shs_checkpoint_progress(&p, ck));
    assert_int_equal(p.global_step, STEP);
    shs_checkpoint_free(ck);
    TU_OK(shs_checkpoint_verify(dir, NULL, 0));
    char *moved = tu_subpath("renamed1");
    assert_int_equal(rename(dir, moved), 0);
    TU_OK(shs_checkpoint_open(&ck, moved, NULL));
    assert_int_equal(shs_checkpoint_step(ck), STEP);
    assert_int_equal(shs_checkpoint_format(ck), SHS_FORMAT_MINDSPORE);
    shs_checkpoint_free(ck);
    free(moved);
    free(sp);
}

/* Our own files (format "pt") in a step directory without metadata.json
   are still a damaged checkpoint, never read as MindSpore's; a MindSpore
   single-card directory with one foreign file is refused too. */
static void test_not_mindspore(void **state)
{
    (void)state;
    tu_small s;
    tu_small_make(&s, 1.0f, 1);
    char *sp = tu_subpath("ours");
    shs_progress p = tu_prog(7);
    TU_OK(tu_save_once(sp, s.st, &p, 0));
    const char *dir = tu_step_dir(sp, 7);
    assert_int_equal(unlink(tu_path(dir, "metadata.json")), 0);
    shs_checkpoint *ck = NULL;
    assert_int_equal(shs_checkpoint_open(&ck, dir, NULL), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("without metadata.json");
    assert_int_equal(shs_checkpoint_verify(dir, NULL, 0), SHS_ECORRUPT);
    shs_state_free(s.st);
    free(sp);
    if (!have_python())
        TU_SKIP();
    sp = tu_subpath("mixed");
    gen(sp, 1, "good", NULL);
    dir = tu_step_dir(sp, STEP);
    /* a file of ours beside MindSpore's */
    shs_writer *w = NULL;
    TU_OK(shs_writer_create(&w, tu_path(dir, "extra.safetensors"), NULL));
    uint64_t one = 1;
    TU_OK(shs_writer_add_metadata(w, "format", "pt"));
    TU_OK(shs_writer_add_tensor(w, "x", SHS_U8, 1, &one));
    TU_OK(shs_writer_write(w, "x", "a", 1));
    TU_OK(shs_writer_commit(w));
    shs_writer_free(w);
    assert_int_equal(shs_checkpoint_open(&ck, dir, NULL), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("without metadata.json");
    free(sp);
}

/* ------------------------------------------------------------------ */
/* The manager: saved on 1 or 4 ranks, loaded on 1, 2 or 3             */
/* ------------------------------------------------------------------ */

#define MAXR 4

#include "threadcomm.h"

#define NT 9

typedef struct rank_job {
    tshared *sh;
    int rank;
    const char *sp;
    int rc;
    char msg[512];
    shs_load_result res;
    shs_progress prog;
    void *buf[NT];
    uint64_t off[NT][2], shape[NT][2];
} rank_job;

/* This rank's part of every tensor of the reference: rows (the first
   dimension) cut in n nearly equal parts, a split MindSpore never made;
   tensors of fewer rows than ranks whole on every rank. */
static void *rank_main(void *arg)
{
    rank_job *j = arg;
    int r = j->rank, n = j->sh->n;
    shs_state *st = NULL;
    shs_comm *comm = NULL;
    shs_manager *m = NULL;
    tcomm tc = { j->sh, r };
    shs_state_create(&st);
    for (size_t i = 0; i < shs_file_tensor_count(g_ref.f) && i < NT; i++) {
        const shs_tensor_info *ti = shs_file_tensor(g_ref.f, i);
        uint64_t rows = ti->shape[0];
        uint64_t a = rows >= (uint64_t)n ? rows * (uint64_t)r / (uint64_t)n : 0;
        uint64_t b = rows >= (uint64_t)n ? rows * (uint64_t)(r + 1) / (uint64_t)n : rows;
        j->off[i][0] = a;
        j->off[i][1] = 0;
        j->shape[i][0] = b - a;
        j->shape[i][1] = ti->ndim > 1 ? ti->shape[1] : 0;
        uint64_t bytes = (b - a) * (ti->ndim > 1 ? ti->shape[1] : 1) * shs_dtype_bits(ti->dtype) /
                         8;
        j->buf[i] = calloc(1, bytes ? bytes : 1);
        shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
        s.name = ti->name;
        s.kind = strncmp(ti->name, "adam_", 5) == 0 || strcmp(ti->name, "global_step") == 0
                     ? SHS_KIND_OPTIMIZER
                     : SHS_KIND_MODEL;
        s.dtype = ti->dtype;
        s.ndim = ti->ndim;
        s.shape = j->shape[i];
        s.global_shape = ti->shape;
        s.global_offset = j->off[i];
        s.data = j->buf[i];
        if (shs_state_add_tensor(st, &s) != SHS_OK)
            j->rc = -100;
    }
    shs_config c;
    shs_config_init(&c);
    c.enable_save = 0;
    c.load_path = j->sp;
    int rc = j->rc ? j->rc : shs_comm_create(&comm, r, n, &k_tops, &tc);
    if (rc == SHS_OK)
        rc = shs_manager_create_comm(&m, &c, st, comm);
    if (rc == SHS_OK)
        rc = shs_manager_load(&j->res, m, &j->prog);
    j->rc = rc;
    snprintf(j->msg, sizeof j->msg, "%s", shs_last_error());
    shs_manager_free(m);
    shs_comm_free(comm);
    shs_state_free(st);
    return NULL;
}

/* Load save path sp on n ranks; every rank's part equals the reference. */
static void load_on(const char *sp, int n, int saved_ranks, int derived)
{
    tshared sh;
    rank_job j[MAXR];
    pthread_t th[MAXR];
    tshared_init(&sh, n, 0);
    for (int r = 0; r < n; r++) {
        memset(&j[r], 0, sizeof j[r]);
        j[r].sh = &sh;
        j[r].rank = r;
        j[r].sp = sp;
        j[r].res = (shs_load_result)SHS_LOAD_RESULT_INIT;
        j[r].prog = (shs_progress)SHS_PROGRESS_INIT;
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &j[r]), 0);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    tshared_destroy(&sh);
    for (int r = 0; r < n; r++) {
        if (j[r].rc != SHS_OK)
            fail_msg("%d ranks, rank %d: load: %d %s", n, r, j[r].rc, j[r].msg);
        assert_int_equal(j[r].res.loaded, 1);
        assert_int_equal(j[r].res.step, STEP);
        assert_int_equal(j[r].res.optimizer_loaded, 1);
        assert_int_equal(j[r].res.saved_world_size, saved_ranks);
        assert_int_equal(j[r].prog.global_step, STEP);
        assert_int_equal(j[r].prog.consumed_samples, STEP * 64);
        assert_int_equal(j[r].res.consumed_samples_derived, derived);
        for (size_t i = 0; i < shs_file_tensor_count(g_ref.f) && i < NT; i++) {
            const shs_tensor_info *ti = shs_file_tensor(g_ref.f, i);
            const uint8_t *want = shs_file_tensor_data(g_ref.f, i);
            size_t es = shs_dtype_bits(ti->dtype) / 8;
            uint64_t shape[2] = { j[r].shape[i][0], j[r].shape[i][1] };
            uint64_t bytes = numel(shape, ti->ndim) * es;
            uint8_t *exp = malloc(bytes ? bytes : 1);
            assert_non_null(exp);
            ref_box(exp, want, es, ti->ndim, ti->shape, j[r].off[i], shape);
            if (memcmp(exp, j[r].buf[i], bytes) != 0)
                fail_msg("saved on %d, loaded on %d: rank %d: '%s' differs", saved_ranks, n, r,
                         ti->name);
            free(exp);
        }
        for (size_t i = 0; i < NT; i++)
            free(j[r].buf[i]);
    }
}

static void test_manager_load(void **state)
{
    (void)state;
    if (!have_python())
        TU_SKIP();
    assert_int_equal(shs_file_tensor_count(g_ref.f), NT);
    char *sp4 = tu_subpath("load4"), *sp1 = tu_subpath("load1");
    gen(sp4, 4, "good", NULL);
    gen(sp1, 1, "good", NULL);
    for (int n = 1; n <= 3; n++) {
        load_on(sp4, n, 4, 0);
        load_on(sp1, n, 1, 0);
    }
    /* the step directory as load_path, too */
    load_on(tu_step_dir(sp4, STEP), 2, 4, 0);
    free(sp4);
    free(sp1);
}

/* remove_redundancy: each shard in one file, the files numbered among
   the ranks that got shards (opt-0000000-0000002 is rank 2's); graph
   mode's integer ckpt_status; the documentation's six-key common.json. */
static void test_remove_redundancy(void **state)
{
    (void)state;
    if (!have_python())
        TU_SKIP();
    char *sp = tu_subpath("rr"), *sp6 = tu_subpath("six");
    gen_ex(sp, 4, "good", NULL, "--remove-redundancy --ckpt-status 1");
    shs_checkpoint *ck = NULL;
    TU_OK(shs_checkpoint_open(&ck, sp, NULL));
    assert_int_equal(shs_checkpoint_file_count(ck), 6);
    assert_string_equal(shs_checkpoint_file_name(ck, 4),
                        "checkpoint-opt-0000000-0000002.safetensors");
    assert_int_equal(shs_checkpoint_file_rank(ck, 4), 2);
    assert_int_equal(shs_checkpoint_tensor(ck, find(ck, QKV))->n_chunks, 2);
    check_all_tensors(ck);
    shs_progress p = SHS_PROGRESS_INIT;
    TU_OK(shs_checkpoint_progress(&p, ck));
    assert_string_equal(p.ckpt_status, "1");
    shs_checkpoint_free(ck);
    TU_OK(shs_checkpoint_verify(tu_step_dir(sp, STEP), NULL, 0));
    load_on(sp, 3, 4, 0);
    gen_ex(sp6, 1, "good", NULL, "--six-keys");
    load_on(sp6, 2, 1, 1);
    free(sp);
    free(sp6);
}

/* ------------------------------------------------------------------ */
/* Hostile variants                                                    */
/* ------------------------------------------------------------------ */

typedef struct hostile {
    const char *variant;
    int status;
    const char *needle1, *needle2;
} hostile;

static const hostile k_hostile[] = {
    { "wrong_shape", SHS_ECORRUPT, QKV "': chunk 0: local_shape [4, 6] is not [5, 6]", NULL },
    { "local_shape", SHS_ECORRUPT, QKV "': chunk 1: local_shape [3, 6]", NULL },
    { "slice_outside", SHS_ECORRUPT, QKV "': chunk 1: slice 7 is outside the tensor",
      "make 2 slices" },
    { "missing_file", SHS_ECORRUPT,
      "'checkpoint-model-0000003-0000004.safetensors', which does "
      "not exist",
      "tensor '" },
    { "not_covering", SHS_ECORRUPT, QKV "': the saved chunks cover 24 of its 48", NULL },
    { "slice_twice", SHS_ECORRUPT, QKV "': slice 0 is listed twice", NULL },
    { "key_twice", SHS_ECORRUPT, "storage_data lists one shard twice", QKV },
    { "bad_key", SHS_ECORRUPT, "is not a shard id", QKV "(0,)" },
    { "wrong_dtype", SHS_ECORRUPT, QKV "' is F32 in file 'checkpoint-model-0000000", "but F16" },
    { "fragments", SHS_ECORRUPT, QKV "': axis_fragmentations[0] is 1, but its layout cuts", NULL },
    { "interleaved", SHS_EUNSUPPORTED, QKV "': interleaved_parallel", NULL },
    { "file_lacks", SHS_ECORRUPT,
      "file 'checkpoint-model-0000000-0000004.safetensors' does not "
      "hold it",
      QKV },
    { "file_shape", SHS_ECORRUPT,
      "holds shape [6, 4], but slice 0 of global_shape [8, 6] is [4, 6]", QKV },
    { "two_slices", SHS_ECORRUPT, "is named for slices 0 and 1", QKV },
    { "unused_key", SHS_ECORRUPT, "(9,))\" is no chunk of state_dict_metadata",
      "linear_fc1.weight" },
    { "mixed_kind", SHS_ECORRUPT, QKV "' is stored in both model and optimizer files",
      "checkpoint-opt-0000003-0000004.safetensors" },
    { "uneven", SHS_EUNSUPPORTED, QKV "': dimension 0 of size 7 is cut in 2 uneven parts", NULL },
    { "no_storage", SHS_ECORRUPT, QKV "': slice 1 has no storage_data entry", NULL },
};

static void test_hostile(void **state)
{
    (void)state;
    if (!have_python())
        TU_SKIP();
    for (size_t i = 0; i < sizeof k_hostile / sizeof k_hostile[0]; i++) {
        const hostile *h = &k_hostile[i];
        char name[64];
        snprintf(name, sizeof name, "h_%s", h->variant);
        char *sp = tu_subpath(name);
        gen(sp, 4, h->variant, NULL);
        const char *dir = tu_step_dir(sp, STEP);
        shs_checkpoint *ck = NULL;
        /* the read API, verify and the manager's load: one rule, one message */
        for (int how = 0; how < 3; how++) {
            int rc;
            if (how == 0) {
                rc = shs_checkpoint_open(&ck, sp, NULL);
                assert_null(ck);
            } else if (how == 1) {
                rc = shs_checkpoint_verify(dir, NULL, 0);
            } else {
                tu_small s;
                tu_small_make(&s, 1.0f, 0);
                shs_config c;
                shs_config_init(&c);
                c.enable_save = 0;
                c.load_path = sp;
                shs_manager *m = NULL;
                shs_progress p = SHS_PROGRESS_INIT;
                rc = shs_manager_create(&m, &c, s.st);
                if (rc == SHS_OK)
                    rc = shs_manager_load(NULL, m, &p);
                char msg[1024];
                snprintf(msg, sizeof msg, "%s", shs_last_error());
                shs_manager_free(m);
                shs_state_free(s.st);
                if (!strstr(msg, h->needle1))
                    fail_msg("%s (load): message lacks '%s': %s", h->variant, h->needle1, msg);
                if (rc != h->status)
                    fail_msg("%s (load): status %d, expected %d: %s", h->variant, rc, h->status,
                             msg);
                continue;
            }
            if (rc != h->status)
                fail_msg("%s (%s): status %d, expected %d: %s", h->variant, how ? "verify" : "open",
                         rc, h->status, shs_last_error());
            TU_ASSERT_MSG_HAS(h->needle1);
            if (h->needle2)
                TU_ASSERT_MSG_HAS(h->needle2);
        }
        free(sp);
    }
}

/* ------------------------------------------------------------------ */
/* storage_data keys: Python's repr of (name, (slice, ...))            */
/* ------------------------------------------------------------------ */

static void test_shard_keys(void **state)
{
    (void)state;
    static const struct {
        const char *key, *name;
        size_t n;
        uint64_t v0, v1;
    } good[] = {
        { "('a.b', (3,))", "a.b", 1, 3, 0 },
        { "(\"it's\", (0, 1))", "it's", 2, 0, 1 },
        { "('x', ())", "x", 0, 0, 0 },
        { "('q\\\\\\'t\\n', (0, ))", "q\\'t\n", 1, 0, 0 },
        { "('x', (5, 999999999999999999,))", "x", 2, 5, 999999999999999999ull },
        { "('\xe5\x90\x8d', (2,))", "\xe5\x90\x8d", 1, 2, 0 },
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char *name = NULL;
        uint64_t v[SHS__MS_TUPLE_MAX];
        size_t n;
        if (shs__ms_parse_key(good[i].key, &name, v, &n) != 0)
            fail_msg("refused: %s", good[i].key);
        assert_string_equal(name, good[i].name);
        assert_int_equal(n, good[i].n);
        if (n > 0)
            assert_int_equal(v[0], good[i].v0);
        if (n > 1)
            assert_int_equal(v[1], good[i].v1);
        free(name);
    }
    static const char *const bad[] = {
        "('a', (3))", /* no tuple */
        "('a', 3)",
        "('a' (3,))",
        "('a', (3,)) x",
        "'a', (3,)",
        "('a', (3,)",
        "('a', (-1,))",
        "('a', (1.5,))",
        "('a\\x41', (1,))",                   /* \x is not read */
        "('a', (1, 2, 3, 4, 5, 6, 7, 8, 9))", /* more than 8 */
        "('a', (1000000000000000000,))",      /* 10^18 */
        "('a', (1,,))",
        "('a, (1,))",
        "(a, (1,))",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *name = NULL;
        uint64_t v[SHS__MS_TUPLE_MAX];
        size_t n;
        if (shs__ms_parse_key(bad[i], &name, v, &n) != -1)
            fail_msg("accepted: %s", bad[i]);
        assert_null(name);
    }
}

/* ------------------------------------------------------------------ */
/* Mutations: metadata.json damaged at random, never a crash           */
/* ------------------------------------------------------------------ */

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* 600 copies of a good metadata.json, each with a few bytes replaced by
   JSON punctuation or digits, or a span cut out (seeded: the same every
   run): every open fails with a message or succeeds, and what opens
   reads (the sanitizer build runs this too). */
static void test_mutations(void **state)
{
    (void)state;
    if (!have_python())
        TU_SKIP();
    char *sp = tu_subpath("mut");
    gen(sp, 4, "good", NULL);
    const char *dir = tu_step_dir(sp, STEP);
    char *mp = tu_path_dup(dir, "metadata.json");
    size_t len;
    char *good = tu_read_file(mp, &len);
    assert_non_null(good);
    char *buf = malloc(len + 1);
    assert_non_null(buf);
    static const char k_alphabet[] = "{}[],:\"'()0123456789-. e";
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    int opened = 0, refused = 0;
    for (int it = 0; it < 600; it++) {
        memcpy(buf, good, len);
        size_t n = len;
        int edits = 1 + (int)(rnd(&seed) % 3);
        for (int e = 0; e < edits; e++) {
            size_t at = (size_t)(rnd(&seed) % n);
            if (rnd(&seed) % 4 == 0) {
                size_t cut = 1 + (size_t)(rnd(&seed) % 16);
                if (cut > n - at)
                    cut = n - at;
                memmove(buf + at, buf + at + cut, n - at - cut);
                n -= cut;
            } else {
                buf[at] = k_alphabet[rnd(&seed) % (sizeof k_alphabet - 1)];
            }
        }
        assert_int_equal(tu_write_file(mp, buf, n), 0);
        shs_checkpoint *ck = NULL;
        int rc = shs_checkpoint_open(&ck, dir, NULL);
        if (rc != SHS_OK) {
            assert_null(ck);
            assert_true(rc < 0);
            assert_true(shs_last_error()[0] != '\0');
            refused++;
            continue;
        }
        opened++;
        for (size_t i = 0; i < shs_checkpoint_tensor_count(ck); i++) {
            const shs_checkpoint_tensor_info *t = shs_checkpoint_tensor(ck, i);
            uint64_t bytes;
            TU_OK(shs_tensor_nbytes(&bytes, t->dtype, t->ndim, t->shape));
            void *dst = malloc(bytes + 1);
            assert_non_null(dst);
            (void)shs_checkpoint_read(ck, i, NULL, NULL, t->dtype, dst, (size_t)bytes);
            free(dst);
        }
        shs_checkpoint_free(ck);
    }
    assert_true(refused > 300); /* most edits break a rule */
    assert_int_equal(tu_write_file(mp, good, len), 0);
    TU_OK(shs_checkpoint_verify(dir, NULL, 0));
    (void)opened;
    free(buf);
    free(good);
    free(mp);
    free(sp);
}

/* ------------------------------------------------------------------ */
/* Out of memory at every allocation of an open                        */
/* ------------------------------------------------------------------ */

static void test_open_failalloc(void **state)
{
    (void)state;
    if (!have_python())
        TU_SKIP();
    char *sp4 = tu_subpath("fa4"), *sp1 = tu_subpath("fa1");
    gen(sp4, 4, "good", NULL);
    gen(sp1, 1, "good", NULL);
    const char *paths[2] = { sp4, sp1 };
    tu_failalloc_install();
    for (int k = 0; k < 2; k++) {
        long start = tu_failalloc_live(), n;
        for (n = 1; n < 100000; n++) {
            shs_checkpoint *ck = NULL;
            tu_failalloc_arm(n);
            int rc = shs_checkpoint_open(&ck, paths[k], NULL);
            int injected = tu_failalloc_count() >= n;
            tu_failalloc_arm(0);
            if (rc == SHS_OK) {
                assert_int_equal(shs_checkpoint_format(ck), SHS_FORMAT_MINDSPORE);
                shs_checkpoint_free(ck);
                if (injected)
                    fail_msg("%s: open succeeded although allocation %ld failed", paths[k], n);
                break;
            }
            assert_null(ck);
            if (rc != SHS_ENOMEM)
                fail_msg("%s: allocation %ld failed: status %d, not SHS_ENOMEM: %s", paths[k], n,
                         rc, shs_last_error());
            if (tu_failalloc_live() != start)
                fail_msg("%s: allocation %ld failed: %ld allocations leaked", paths[k], n,
                         tu_failalloc_live() - start);
        }
        assert_true(n > 20); /* the sweep ran through the whole open */
    }
    tu_failalloc_uninstall();
    free(sp4);
    free(sp1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_4_ranks),      cmocka_unit_test(test_read_1_rank),
        cmocka_unit_test(test_not_mindspore),     cmocka_unit_test(test_manager_load),
        cmocka_unit_test(test_remove_redundancy), cmocka_unit_test(test_shard_keys),
        cmocka_unit_test(test_mutations),         cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_open_failalloc),
    };
    return TU_RUN_GROUP(tests, group_setup, group_teardown);
}
