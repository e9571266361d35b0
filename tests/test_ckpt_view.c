/*
 * test_ckpt_view.c -- the public read-only checkpoint view
 * (shs_checkpoint_open and its accessors, shs_checkpoint_read_progress) and
 * the save-path maintenance API (shs_checkpoint_list, _read_tracker,
 * _remove, _clean), on checkpoints written through the manager, a plain
 * directory of safetensors files and hostile metadata.json files.
 */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

/* ------------------------------------------------------------------ */
/* A checkpoint through the manager: model w (F32 [4,3]), b (F32 [3]), */
/* optimizer w.exp_avg (F32 [4,3]); blobs rng, lr_scheduler, dataloader */
/* ------------------------------------------------------------------ */

static const char *const k_blob_names[3] = { "rng", "lr_scheduler", "dataloader" };

static void blob_value(char *buf, size_t cap, const char *name, int64_t step)
{
    snprintf(buf, cap, "%s-of-step-%lld", name, (long long)step);
}

/* Save a checkpoint of `step` (values from `base`) into save path sp. */
static void save3(const char *sp, int64_t step, float base)
{
    tu_small s;
    tu_small_make(&s, base, 1);
    for (int i = 0; i < 3; i++) {
        char buf[64];
        blob_value(buf, sizeof buf, k_blob_names[i], step);
        TU_OK(shs_state_set_blob(s.st, k_blob_names[i], buf, strlen(buf)));
    }
    shs_progress p = tu_prog(step);
    TU_OK(tu_save_once(sp, s.st, &p, 0));
    shs_state_free(s.st);
}

/* The bytes [b0, b1) of dir/name. */
static void *read_range(const char *dir, const char *name, uint64_t b0, uint64_t b1)
{
    size_t len;
    unsigned char *all = tu_read_file(tu_path(dir, name), &len);
    assert_non_null(all);
    assert_true(b0 <= b1 && b1 <= len);
    void *out = malloc(b1 - b0 + 1);
    assert_non_null(out);
    memcpy(out, all + b0, b1 - b0);
    free(all);
    return out;
}

/* Every chunk of tensor `ti`: its byte range is where shs_file_find puts
   its key in the named file, and its xxh3 is that of those bytes. */
static void check_chunks(const shs_checkpoint *ck, const char *dir, size_t ti, int want_hash)
{
    const shs_checkpoint_tensor_info *t = shs_checkpoint_tensor(ck, ti);
    assert_non_null(t);
    for (size_t c = 0; c < t->n_chunks; c++) {
        shs_chunk_info ci = SHS_CHUNK_INFO_INIT;
        TU_OK(shs_checkpoint_chunk(&ci, ck, ti, c));
        assert_true(ci.file < shs_checkpoint_file_count(ck));
        const char *fname = shs_checkpoint_file_name(ck, ci.file);
        assert_non_null(fname);
        for (size_t d = 0; d < t->ndim; d++)
            assert_true(ci.offset[d] + ci.shape[d] <= t->shape[d]);
        shs_file *f;
        shs_open_opts oo = SHS_OPEN_OPTS_INIT;
        oo.flags = SHS_OPEN_NO_MMAP;
        TU_OK(shs_file_open(&f, tu_path(dir, fname), &oo));
        size_t k;
        TU_OK(shs_file_find(&k, f, ci.key));
        const shs_tensor_info *fi = shs_file_tensor(f, k);
        assert_non_null(fi);
        assert_int_equal(fi->dtype, t->dtype);
        assert_int_equal(fi->ndim, t->ndim);
        for (size_t d = 0; d < t->ndim; d++)
            assert_true(fi->shape[d] == ci.shape[d]);
        assert_true(ci.byte_begin == shs_file_data_start(f) + fi->offset);
        assert_true(ci.byte_end == ci.byte_begin + fi->nbytes);
        shs_file_free(f);
        assert_int_equal(ci.has_xxh3, want_hash);
        if (want_hash) {
            void *bytes = read_range(dir, fname, ci.byte_begin, ci.byte_end);
            assert_true(XXH3_64bits(bytes, (size_t)(ci.byte_end - ci.byte_begin)) == ci.xxh3);
            free(bytes);
        }
    }
    shs_chunk_info ci = SHS_CHUNK_INFO_INIT;
    assert_int_equal(shs_checkpoint_chunk(&ci, ck, ti, t->n_chunks), SHS_ERANGE);
}

static void test_view_of_saved_step(void **state)
{
    (void)state;
    char *sp = tu_subpath("view");
    save3(sp, 7, 10.0f);
    char *dir = strdup(tu_step_dir(sp, 7));
    shs_checkpoint *ck = NULL;
    TU_OK(shs_checkpoint_open(&ck, dir, NULL));
    assert_non_null(ck);
    assert_int_equal(shs_checkpoint_step(ck), 7);
    assert_int_equal(shs_checkpoint_world_size(ck), 1);
    assert_int_equal((shs_checkpoint_format(ck) == SHS_FORMAT_PLAIN), 0);

    /* files: exactly the .safetensors files of the directory, rank 0 */
    size_t nf = shs_checkpoint_file_count(ck);
    assert_true(nf >= 2);
    for (size_t i = 0; i < nf; i++) {
        const char *name = shs_checkpoint_file_name(ck, i);
        assert_non_null(name);
        assert_non_null(strstr(name, ".safetensors"));
        assert_true(tu_path_exists(tu_path(dir, name)));
        assert_int_equal(shs_checkpoint_file_rank(ck, i), 0);
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(name, shs_checkpoint_file_name(ck, j));
    }
    assert_int_equal(tu_count_prefixed(dir, "checkpoint-"), (int)nf);
    assert_null(shs_checkpoint_file_name(ck, nf));
    assert_int_equal(shs_checkpoint_file_rank(ck, nf), -1);

    /* tensors, sorted by name */
    assert_int_equal(shs_checkpoint_tensor_count(ck), 3);
    static const char *const names[3] = { "b", "w", "w.exp_avg" };
    static const shs_kind kinds[3] = { SHS_KIND_MODEL, SHS_KIND_MODEL, SHS_KIND_OPTIMIZER };
    for (size_t i = 0; i < 3; i++) {
        const shs_checkpoint_tensor_info *t = shs_checkpoint_tensor(ck, i);
        assert_non_null(t);
        assert_string_equal(t->name, names[i]);
        assert_int_equal(t->kind, kinds[i]);
        assert_int_equal(t->dtype, SHS_F32);
        const uint64_t *want = i == 0 ? tu_b_shape : tu_w_shape;
        assert_int_equal(t->ndim, i == 0 ? 1 : 2);
        for (size_t d = 0; d < t->ndim; d++)
            assert_true(t->shape[d] == want[d]);
        assert_true(t->n_chunks >= 1);
        check_chunks(ck, dir, i, 1);
    }
    assert_null(shs_checkpoint_tensor(ck, 3));
    shs_chunk_info ci = SHS_CHUNK_INFO_INIT;
    assert_int_equal(shs_checkpoint_chunk(&ci, ck, 3, 0), SHS_ERANGE);

    /* the data of w is the saved values (one whole chunk, world size 1) */
    size_t wi;
    TU_OK(shs_checkpoint_find(&wi, ck, "w"));
    assert_int_equal(wi, 1);
    TU_OK(shs_checkpoint_chunk(&ci, ck, wi, 0));
    assert_int_equal(shs_checkpoint_tensor(ck, wi)->n_chunks, 1);
    assert_true(ci.offset[0] == 0 && ci.offset[1] == 0);
    assert_true(ci.shape[0] == 4 && ci.shape[1] == 3);
    assert_string_equal(ci.key, "w");
    float *wd = read_range(dir, shs_checkpoint_file_name(ck, ci.file), ci.byte_begin, ci.byte_end);
    assert_true(ci.byte_end - ci.byte_begin == sizeof(float) * 12);
    for (int i = 0; i < 12; i++)
        assert_true(wd[i] == 10.0f + (float)i);
    free(wd);

    /* find: hit and miss */
    size_t idx = 99;
    TU_OK(shs_checkpoint_find(&idx, ck, "w.exp_avg"));
    assert_int_equal(idx, 2);
    TU_OK(shs_checkpoint_find(&idx, ck, "b"));
    assert_int_equal(idx, 0);
    idx = 99;
    assert_int_equal(shs_checkpoint_find(&idx, ck, "nope"), SHS_ENOTFOUND);
    assert_int_equal(shs_checkpoint_find(&idx, ck, ""), SHS_ENOTFOUND);
    assert_int_equal(idx, 99);

    /* blobs */
    assert_int_equal(shs_checkpoint_blob_count(ck), 3);
    int seen[3] = { 0 };
    for (size_t i = 0; i < 3; i++) {
        shs_blob_info b = SHS_BLOB_INFO_INIT;
        TU_OK(shs_checkpoint_blob(&b, ck, i));
        int which = -1;
        for (int k = 0; k < 3; k++)
            if (strcmp(b.name, k_blob_names[k]) == 0)
                which = k;
        assert_true(which >= 0);
        seen[which]++;
        assert_int_equal(b.rank, 0);
        assert_true(b.file < nf);
        assert_non_null(b.key);
        char want[64];
        blob_value(want, sizeof want, b.name, 7);
        assert_true(b.byte_end - b.byte_begin == strlen(want));
        char *got = read_range(dir, shs_checkpoint_file_name(ck, b.file), b.byte_begin, b.byte_end);
        assert_memory_equal(got, want, strlen(want));
        assert_true(XXH3_64bits(got, strlen(want)) == b.xxh3);
        free(got);
    }
    assert_true(seen[0] == 1 && seen[1] == 1 && seen[2] == 1);
    shs_blob_info b = SHS_BLOB_INFO_INIT;
    assert_int_equal(shs_checkpoint_blob(&b, ck, 3), SHS_ERANGE);
    shs_checkpoint_free(ck);
    shs_checkpoint_free(NULL);

    /* common.json */
    shs_progress p = SHS_PROGRESS_INIT, want = tu_prog(7);
    TU_OK(shs_checkpoint_read_progress(&p, dir));
    assert_int_equal(p.epoch_num, want.epoch_num);
    assert_int_equal(p.step_num, want.step_num);
    assert_int_equal(p.global_step, want.global_step);
    assert_true(p.loss_scale == want.loss_scale);
    assert_int_equal(p.global_batch_size, want.global_batch_size);
    assert_int_equal(p.consumed_samples, want.consumed_samples);
    assert_string_equal(p.ckpt_status, "");
    /* an extra key is refused */
    TU_OK(tu_write_file(tu_path(dir, "common.json"),
                        "{\"epoch_num\":0,\"step_num\":0,\"global_step\":0,\"loss_scale\":1,"
                        "\"global_batch_size\":1,\"consumed_samples\":0,\"ckpt_status\":null,"
                        "\"x\":1}",
                        strlen("{\"epoch_num\":0,\"step_num\":0,\"global_step\":0,\"loss_scale\":1,"
                               "\"global_batch_size\":1,\"consumed_samples\":0,\"ckpt_status\":"
                               "null,\"x\":1}")));
    assert_int_equal(shs_checkpoint_read_progress(&p, dir), SHS_ECORRUPT);
    unlink(tu_path(dir, "common.json"));
    assert_true(shs_checkpoint_read_progress(&p, dir) < 0);
    free(dir);
    free(sp);
}

/* ------------------------------------------------------------------ */
/* A plain directory of safetensors files                             */
/* ------------------------------------------------------------------ */

static void write_st(const char *path, const char *const *names, const shs_dtype *dts,
                     const uint64_t (*shapes)[2], const size_t *ndims, size_t n)
{
    shs_writer *w;
    TU_OK(shs_writer_create(&w, path, NULL));
    for (size_t i = 0; i < n; i++)
        TU_OK(shs_writer_add_tensor(w, names[i], dts[i], ndims[i], shapes[i]));
    for (size_t i = 0; i < n; i++) {
        uint64_t numel = 1;
        for (size_t d = 0; d < ndims[i]; d++)
            numel *= shapes[i][d];
        size_t len = (size_t)numel * 4;
        unsigned char *buf = malloc(len ? len : 1);
        assert_non_null(buf);
        for (size_t k = 0; k < len; k++)
            buf[k] = (unsigned char)(k * 7 + i);
        TU_OK(shs_writer_write(w, names[i], buf, len));
        free(buf);
    }
    TU_OK(shs_writer_commit(w));
    shs_writer_free(w);
}

static void test_view_of_plain_dir(void **state)
{
    (void)state;
    char *dir = tu_subpath("plain");
    assert_int_equal(mkdir(dir, 0755), 0);
    {
        const char *names[2] = { "y", "x" };
        const shs_dtype dts[2] = { SHS_I32, SHS_F32 };
        const uint64_t shapes[2][2] = { { 5, 0 }, { 2, 3 } };
        const size_t nd[2] = { 1, 2 };
        write_st(tu_path(dir, "model-1.safetensors"), names, dts, shapes, nd, 2);
    }
    {
        const char *names[1] = { "a.exp_avg" };
        const shs_dtype dts[1] = { SHS_F32 };
        const uint64_t shapes[1][2] = { { 4, 0 } };
        const size_t nd[1] = { 1 };
        write_st(tu_path(dir, "run-opt-0.safetensors"), names, dts, shapes, nd, 1);
    }
    TU_OK(tu_write_file(tu_path(dir, "README.txt"), "hi", 2));

    shs_checkpoint *ck;
    TU_OK(shs_checkpoint_open(&ck, dir, NULL));
    assert_int_equal((shs_checkpoint_format(ck) == SHS_FORMAT_PLAIN), 1);
    assert_int_equal(shs_checkpoint_step(ck), -1);
    assert_int_equal(shs_checkpoint_world_size(ck), 1);
    assert_int_equal(shs_checkpoint_file_count(ck), 2);
    assert_string_equal(shs_checkpoint_file_name(ck, 0), "model-1.safetensors");
    assert_string_equal(shs_checkpoint_file_name(ck, 1), "run-opt-0.safetensors");
    assert_int_equal(shs_checkpoint_file_rank(ck, 0), 0);
    assert_int_equal(shs_checkpoint_file_rank(ck, 1), 0);
    assert_int_equal(shs_checkpoint_tensor_count(ck), 3);
    static const char *const want[3] = { "a.exp_avg", "x", "y" };
    static const shs_kind kinds[3] = { SHS_KIND_OPTIMIZER, SHS_KIND_MODEL, SHS_KIND_MODEL };
    static const shs_dtype dts[3] = { SHS_F32, SHS_F32, SHS_I32 };
    for (size_t i = 0; i < 3; i++) {
        const shs_checkpoint_tensor_info *t = shs_checkpoint_tensor(ck, i);
        assert_string_equal(t->name, want[i]);
        assert_int_equal(t->kind, kinds[i]);
        assert_int_equal(t->dtype, dts[i]);
        assert_int_equal(t->n_chunks, 1);
        shs_chunk_info ci = SHS_CHUNK_INFO_INIT;
        TU_OK(shs_checkpoint_chunk(&ci, ck, i, 0));
        assert_string_equal(ci.key, t->name);
        assert_int_equal(ci.file, i == 0 ? 1 : 0);
        for (size_t d = 0; d < t->ndim; d++) {
            assert_true(ci.offset[d] == 0);
            assert_true(ci.shape[d] == t->shape[d]);
        }
        check_chunks(ck, dir, i, 0);
    }
    const shs_checkpoint_tensor_info *x = shs_checkpoint_tensor(ck, 1);
    assert_true(x->ndim == 2 && x->shape[0] == 2 && x->shape[1] == 3);
    assert_int_equal(shs_checkpoint_blob_count(ck), 0);
    shs_blob_info b = SHS_BLOB_INFO_INIT;
    assert_int_equal(shs_checkpoint_blob(&b, ck, 0), SHS_ERANGE);
    size_t idx;
    TU_OK(shs_checkpoint_find(&idx, ck, "y"));
    assert_int_equal(idx, 2);
    assert_int_equal(shs_checkpoint_find(&idx, ck, "z"), SHS_ENOTFOUND);
    shs_checkpoint_free(ck);

    free(dir);
}

/* A directory with neither metadata.json nor safetensors files fails
   cleanly (under ASan: without leaking). */
static void test_open_empty_dir(void **state)
{
    (void)state;
    char *empty = tu_subpath("plain_empty");
    assert_int_equal(mkdir(empty, 0755), 0);
    shs_checkpoint *ck = (shs_checkpoint *)1;
    assert_int_equal(shs_checkpoint_open(&ck, empty, NULL), SHS_ENOCHECKPOINT);
    assert_null(ck);
    free(empty);
}

/* ------------------------------------------------------------------ */
/* Listing and tracker                                                */
/* ------------------------------------------------------------------ */

static void test_list_and_tracker(void **state)
{
    (void)state;
    char *sp = tu_subpath("list");
    save3(sp, 9, 1.0f);
    save3(sp, 3, 2.0f);
    save3(sp, 5, 3.0f);
    /* an incomplete directory and a plain file named like a step */
    assert_int_equal(mkdir(tu_step_dir(sp, 11), 0755), 0);
    TU_OK(tu_write_file(tu_path(tu_step_dir(sp, 11), "metadata.json"), "{}", 2));
    TU_OK(tu_write_file(tu_path(sp, "iteration_00000012"), "x", 1));

    int64_t steps[4] = { -7, -7, -7, -7 };
    size_t n = 0;
    TU_OK(shs_checkpoint_list(steps, 2, &n, sp));
    assert_int_equal(n, 3);
    assert_int_equal(steps[0], 3);
    assert_int_equal(steps[1], 5);
    assert_int_equal(steps[2], -7); /* beyond cap: untouched */
    n = 0;
    TU_OK(shs_checkpoint_list(NULL, 0, &n, sp));
    assert_int_equal(n, 3);
    TU_OK(shs_checkpoint_list(steps, 4, &n, sp));
    assert_int_equal(n, 3);
    assert_true(steps[0] == 3 && steps[1] == 5 && steps[2] == 9);

    /* a step-N directory of a step already listed counts once */
    char *dup = strdup(tu_path(sp, "step-5"));
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cp -a '%s' '%s'", tu_step_dir(sp, 5), dup);
    assert_int_equal(system(cmd), 0);
    TU_OK(shs_checkpoint_list(steps, 4, &n, sp));
    assert_int_equal(n, 3);
    free(dup);

    assert_int_equal(shs_checkpoint_list(steps, 4, &n, tu_path(tu_root, "nope")), SHS_ENOENT);

    /* tracker: the last save wrote it */
    int64_t t = -1;
    TU_OK(shs_checkpoint_read_tracker(&t, sp));
    assert_int_equal(t, 5);
    TU_OK(tu_write_file(tu_path(sp, TU_TRACKER), "12\n", 3));
    TU_OK(shs_checkpoint_read_tracker(&t, sp));
    assert_int_equal(t, 12);
    static const char *const bad[] = {
        "abc", "", "12\n\n", "-3", " 4", "4x", "1234567890123456789012"
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        TU_OK(tu_write_file(tu_path(sp, TU_TRACKER), bad[i], strlen(bad[i])));
        t = 77;
        if (shs_checkpoint_read_tracker(&t, sp) != SHS_ECORRUPT)
            fail_msg("tracker '%s' not refused as corrupt", bad[i]);
        assert_int_equal(t, 77);
    }
    unlink(tu_path(sp, TU_TRACKER));
    assert_int_equal(shs_checkpoint_read_tracker(&t, sp), SHS_ENOENT);
    char *empty = tu_subpath("list_empty");
    assert_int_equal(mkdir(empty, 0755), 0);
    assert_int_equal(shs_checkpoint_read_tracker(&t, empty), SHS_ENOENT);
    TU_OK(shs_checkpoint_list(steps, 4, &n, empty));
    assert_int_equal(n, 0);
    free(empty);
    free(sp);
}

/* ------------------------------------------------------------------ */
/* Remove and clean                                                   */
/* ------------------------------------------------------------------ */

static void test_remove_and_clean(void **state)
{
    (void)state;
    char *sp = tu_subpath("rm");
    save3(sp, 3, 1.0f);
    save3(sp, 5, 2.0f);
    save3(sp, 8, 3.0f);
    char *d3 = strdup(tu_step_dir(sp, 3));
    assert_true(tu_path_exists(d3));
    TU_OK(shs_checkpoint_remove(sp, 3));
    assert_false(tu_path_exists(d3));
    assert_int_equal(tu_count_prefixed(sp, ".trash-"), 0);
    /* removing a missing step is fine */
    TU_OK(shs_checkpoint_remove(sp, 3));
    TU_OK(shs_checkpoint_remove(sp, 4));
    assert_int_equal(shs_checkpoint_remove(sp, -1), SHS_EINVAL);

    /* a torchtitan-style step-N directory */
    char *s5 = strdup(tu_path(sp, "step-5"));
    assert_int_equal(rename(tu_step_dir(sp, 5), s5), 0);
    TU_OK(shs_checkpoint_remove(sp, 5));
    assert_false(tu_path_exists(s5));
    assert_int_equal(tu_count_prefixed(sp, ".trash-"), 0);
    assert_true(tu_path_exists(tu_step_dir(sp, 8)));
    int64_t steps[4];
    size_t n;
    TU_OK(shs_checkpoint_list(steps, 4, &n, sp));
    assert_int_equal(n, 1);
    assert_int_equal(steps[0], 8);

    /* clean: leftovers go, everything else stays */
    char tmpd[4096];
    snprintf(tmpd, sizeof tmpd, "%s", tu_path(sp, ".tmp-iteration_00000009-abc"));
    assert_int_equal(mkdir(tmpd, 0755), 0);
    TU_OK(tu_write_file(tu_path(tmpd, "part.safetensors"), "xyz", 3));
    assert_int_equal(mkdir(tu_path(tmpd, "sub"), 0755), 0);
    TU_OK(tu_write_file(tu_path(sp, ".trash-iteration_00000001-0123"), "t", 1));
    TU_OK(tu_write_file(tu_path(sp, TU_TRACKER ".tmp.abcd"), "9", 1));
    TU_OK(tu_write_file(tu_path(sp, "notes.txt"), "keep", 4));
    TU_OK(tu_write_file(tu_path(sp, "tmp-not-a-leftover"), "keep", 4));
    TU_OK(tu_write_file(tu_path(sp, ".tmpx"), "keep", 4));
    TU_OK(shs_checkpoint_clean(sp));
    assert_false(tu_path_exists(tmpd));
    assert_false(tu_path_exists(tu_path(sp, ".trash-iteration_00000001-0123")));
    assert_false(tu_path_exists(tu_path(sp, TU_TRACKER ".tmp.abcd")));
    assert_true(tu_path_exists(tu_path(sp, "notes.txt")));
    assert_true(tu_path_exists(tu_path(sp, "tmp-not-a-leftover")));
    assert_true(tu_path_exists(tu_path(sp, ".tmpx")));
    assert_true(tu_path_exists(tu_path(sp, TU_TRACKER)));
    assert_true(tu_path_exists(tu_path(tu_step_dir(sp, 8), "metadata.json")));
    TU_OK(shs_checkpoint_verify(tu_step_dir(sp, 8), NULL, 0));
    /* a missing save path has nothing to clean */
    TU_OK(shs_checkpoint_clean(tu_path(tu_root, "nope")));
    free(s5);
    free(d3);
    free(sp);
}

/* ------------------------------------------------------------------ */
/* Hostile metadata.json                                              */
/* ------------------------------------------------------------------ */

#define HDR "\"format\":\"shardsafe.checkpoint\",\"version\":1,\"step\":1,\"world_size\":1"
#define FILES "\"files\":[{\"name\":\"a.safetensors\",\"rank\":0}]"
#define CHUNK(extra) "{\"file\":0,\"key\":\"t\",\"offset\":[0],\"shape\":[2]," extra "}"

static void test_hostile_metadata(void **state)
{
    (void)state;
    char *dir = tu_subpath("hostile");
    assert_int_equal(mkdir(dir, 0755), 0);
    static const char *const docs[] = {
        "",
        "[]",
        "nul\x01",
        "{\"format\":\"other\"}",
        "{" HDR ",\"step\":2}",
        "{\"format\":\"shardsafe.checkpoint\",\"version\":99,\"step\":1,\"world_size\":1,"
        "\"files\":[],\"tensors\":{}}",
        "{\"format\":\"shardsafe.checkpoint\",\"version\":1,\"step\":\"x\",\"world_size\":1}",
        "{\"format\":\"shardsafe.checkpoint\",\"version\":1,\"step\":-1,\"world_size\":1}",
        "{\"format\":\"shardsafe.checkpoint\",\"version\":1,\"step\":1,\"world_size\":0}",
        "{" HDR ",\"files\":{},\"tensors\":{}}",
        "{" HDR ",\"files\":[{\"name\":\"../evil.safetensors\",\"rank\":0}],\"tensors\":{}}",
        "{" HDR ",\"files\":[{\"name\":\".hidden\",\"rank\":0}],\"tensors\":{}}",
        "{" HDR ",\"files\":[{\"name\":\"a\",\"rank\":1}],\"tensors\":{}}",
        "{" HDR ",\"files\":[{\"name\":\"a\",\"rank\":0},{\"name\":\"a\",\"rank\":0}],"
        "\"tensors\":{}}",
        "{" HDR "," FILES ",\"tensors\":[]}",
        "{" HDR "," FILES ",\"tensors\":{\"t\":7}}",
        "{" HDR "," FILES ",\"tensors\":{\"t\":{\"kind\":\"weird\",\"dtype\":\"F32\","
        "\"shape\":[2],\"chunks\":[]}}}",
        "{" HDR "," FILES ",\"tensors\":{\"t\":{\"kind\":\"model\",\"dtype\":\"F99\","
        "\"shape\":[2],\"chunks\":[]}}}",
        "{" HDR "," FILES ",\"tensors\":{\"t\":{\"kind\":\"model\",\"dtype\":\"F32\","
        "\"shape\":[-1],\"chunks\":[]}}}",
        "{" HDR "," FILES ",\"tensors\":{\"t\":{\"kind\":\"model\",\"dtype\":\"F32\","
        "\"shape\":[2],\"chunks\":[{\"file\":5,\"key\":\"t\",\"offset\":[0],\"shape\":[2],"
        "\"byte_range\":[0,8]}]}}}",
        "{" HDR "," FILES ",\"tensors\":{\"t\":{\"kind\":\"model\",\"dtype\":\"F32\","
        "\"shape\":[2],\"chunks\":[" CHUNK("\"byte_range\":[8,0]") "]}}}",
        "{" HDR "," FILES ",\"tensors\":{\"t\":{\"kind\":\"model\",\"dtype\":\"F32\","
        "\"shape\":[2],\"chunks\":[" CHUNK("\"byte_range\":[0,12]") "]}}}",
        "{" HDR "," FILES ",\"tensors\":{\"t\":{\"kind\":\"model\",\"dtype\":\"F32\","
        "\"shape\":[2],\"chunks\":[{\"file\":0,\"key\":\"t\",\"offset\":[1],\"shape\":[2],"
        "\"byte_range\":[0,8]}]}}}",
        "{" HDR "," FILES ",\"tensors\":{\"t\":{\"kind\":\"model\",\"dtype\":\"F32\","
        "\"shape\":[2],\"chunks\":[" CHUNK("\"byte_range\":[0,8],\"xxh3\":\"zz\"") "]}}}",
        "{" HDR "," FILES ",\"tensors\":{},\"blobs\":[7]}",
        "{" HDR "," FILES ",\"tensors\":{},\"blobs\":{}}",
        "{" HDR "," FILES ",\"tensors\":{},\"blobs\":[{\"name\":\"rng\",\"rank\":0,\"file\":0,"
        "\"key\":\"k\",\"byte_range\":[4,2],\"xxh3\":\"0000000000000000\"}]}",
        "{" HDR "," FILES ",\"tensors\":{},\"blobs\":[{\"name\":\"rng\",\"rank\":3,\"file\":0,"
        "\"key\":\"k\",\"byte_range\":[0,2],\"xxh3\":\"0000000000000000\"}]}",
    };
    for (size_t i = 0; i < sizeof docs / sizeof *docs; i++) {
        TU_OK(tu_write_file(tu_path(dir, "metadata.json"), docs[i], strlen(docs[i])));
        shs_checkpoint *ck = (shs_checkpoint *)1;
        int rc = shs_checkpoint_open(&ck, dir, NULL);
        if (rc != SHS_ECORRUPT)
            fail_msg("doc %zu: rc %d (%s), want SHS_ECORRUPT: %s", i, rc, shs_last_error(),
                     docs[i]);
        assert_null(ck);
        assert_non_null(strstr(shs_last_error(), "metadata.json"));
    }
    /* the same shape of document, valid, opens */
    static const char good[] = "{" HDR "," FILES
                               ",\"tensors\":{\"t\":{\"kind\":\"model\",\"dtype\":\"F32\","
                               "\"shape\":[2],\"chunks\":[" CHUNK(
                                   "\"byte_range\":[8,16],\"xxh3\":\"00000000000000ff\"") "]}}}";
    TU_OK(tu_write_file(tu_path(dir, "metadata.json"), good, strlen(good)));
    shs_checkpoint *ck;
    TU_OK(shs_checkpoint_open(&ck, dir, NULL));
    assert_int_equal(shs_checkpoint_step(ck), 1);
    shs_chunk_info ci = SHS_CHUNK_INFO_INIT;
    TU_OK(shs_checkpoint_chunk(&ci, ck, 0, 0));
    assert_true(ci.has_xxh3 && ci.xxh3 == 0xff && ci.byte_begin == 8 && ci.byte_end == 16);
    shs_checkpoint_free(ck);
    /* a metadata.json that is a directory */
    unlink(tu_path(dir, "metadata.json"));
    assert_int_equal(mkdir(tu_path(dir, "metadata.json"), 0755), 0);
    ck = (shs_checkpoint *)1;
    assert_true(shs_checkpoint_open(&ck, dir, NULL) < 0);
    assert_null(ck);
    assert_int_equal(shs_checkpoint_open(NULL, dir, NULL), SHS_EINVAL);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_view_of_saved_step), cmocka_unit_test(test_view_of_plain_dir),
        cmocka_unit_test(test_open_empty_dir),     cmocka_unit_test(test_list_and_tracker),
        cmocka_unit_test(test_remove_and_clean),   cmocka_unit_test(test_hostile_metadata),
    };
    return TU_RUN_GROUP(tests, tu_setup_root, tu_teardown_root);
}
