/*
 * test_chunk_read.c -- the one checksum path (chunk_read.h): a byte
 * flipped in each kind of stored thing -- a model chunk, an optimizer
 * chunk, a block of a large chunk, a blob, a segment of an encrypted
 * chunk -- is reported by the load (the manager's), the read API (mapped
 * and with pread) and verify in the same words, naming the file, the
 * tensor or blob, the chunk, the bytes of the file and what mismatched.
 */
#include "crypt_fixture.h"

#include <string.h>

#define SEG ((size_t)1 << 20)
#define OPT_FILE "checkpoint-opt-0000000-0000001.safetensors"

/* What metadata.json records of a chunk (of `tensor`, the first) or,
   with tensor NULL, of the blob `blob`. */
typedef struct stored {
    char file[128];
    size_t b0, b1;
    uint64_t hash;
} stored;

static stored stored_of(const char *dir, const char *tensor, const char *blob)
{
    stored s;
    json_error_t je;
    json_t *root = json_load_file(tu_path(dir, "metadata.json"), 0, &je);
    assert_non_null(root);
    json_t *c = NULL;
    if (tensor) {
        c = chunk_of(root, tensor);
    } else {
        size_t i;
        json_t *b;
        json_array_foreach(json_object_get(root, "blobs"), i, b)
        {
            if (strcmp(json_string_value(json_object_get(b, "name")), blob) == 0)
                c = b;
        }
    }
    assert_non_null(c);
    json_t *f = json_array_get(json_object_get(root, "files"),
                               (size_t)json_integer_value(json_object_get(c, "file")));
    snprintf(s.file, sizeof s.file, "%s", json_string_value(json_object_get(f, "name")));
    json_t *br = json_object_get(c, "byte_range");
    s.b0 = (size_t)json_integer_value(json_array_get(br, 0));
    s.b1 = (size_t)json_integer_value(json_array_get(br, 1));
    s.hash = strtoull(json_string_value(json_object_get(c, "xxh3")), NULL, 16);
    json_decref(root);
    return s;
}

/* Flip one bit of byte `at` of dir/file; returns the XXH3 of bytes
   [b0, b1) after the flip. */
static uint64_t flip_in(const char *dir, const char *file, size_t at, size_t b0, size_t b1)
{
    size_t len;
    char *data = tu_read_file(tu_path(dir, file), &len);
    assert_non_null(data);
    assert_true(at < len && b1 <= len);
    data[at] ^= 0x10;
    assert_int_equal(tu_write_file(tu_path(dir, file), data, len), 0);
    uint64_t h = shs__xxh3(data + b0, b1 - b0);
    free(data);
    return h;
}

/* rc is `want` and the message holds `needle` (the whole expected
   message, less any prefix naming what was being done). */
static void expect_msg(const char *who, int rc, int want, const char *needle)
{
    if (rc != want || !strstr(shs_last_error(), needle))
        fail_msg("%s: %d (want %d)\n  got:  %s\n  want: ...%s", who, rc, want, shs_last_error(),
                 needle);
}

/* The read API on `path` (with the key when keyed): tensor `tensor`
   whole, then its rows [r0, r0 + nr) (columns all), both mapped and with
   pread: each fails with `want` and `needle`. */
static void expect_read(const char *path, int keyed, const char *tensor, uint64_t r0, uint64_t nr,
                        int want, const char *needle)
{
    static const unsigned flags[2] = { 0, SHS_CHECKPOINT_OPEN_NO_MMAP };
    for (int k = 0; k < 2; k++) {
        shs_checkpoint *ck = NULL;
        if (keyed) {
            ck = open_keyed(path, flags[k]);
        } else {
            shs_checkpoint_open_opts o = SHS_CHECKPOINT_OPEN_OPTS_INIT;
            o.flags = flags[k];
            TU_OK(shs_checkpoint_open(&ck, path, &o));
        }
        size_t ti;
        TU_OK(shs_checkpoint_find(&ti, ck, tensor));
        const shs_checkpoint_tensor_info *info = shs_checkpoint_tensor(ck, ti);
        uint64_t cols = info->ndim == 2 ? info->shape[1] : 1;
        size_t bytes = (size_t)(info->shape[0] * cols * 4);
        char *buf = malloc(bytes);
        assert_non_null(buf);
        char who[64];
        snprintf(who, sizeof who, "read '%s' whole%s", tensor, k ? " (pread)" : "");
        expect_msg(who, shs_checkpoint_read(ck, ti, NULL, NULL, SHS_F32, buf, bytes), want, needle);
        if (nr) {
            uint64_t start[2] = { r0, 0 }, count[2] = { nr, cols };
            snprintf(who, sizeof who, "read '%s' rows %llu+%llu%s", tensor, (unsigned long long)r0,
                     (unsigned long long)nr, k ? " (pread)" : "");
            expect_msg(
                who,
                shs_checkpoint_read(ck, ti, start, count, SHS_F32, buf, (size_t)(nr * cols * 4)),
                want, needle);
        }
        free(buf);
        shs_checkpoint_free(ck);
    }
}

static char *g_plain_sp; /* an unencrypted save, step 1, kept intact */

static void copy_plain(const char *name, char **sp, char **dir)
{
    if (!g_plain_sp) {
        cstate s;
        g_plain_sp = tu_subdir("plain");
        cstate_make(&s, 1.0f);
        TU_OK(save_keyed(g_plain_sp, s.st, 1, NULL, NULL, 0));
        cstate_free(&s);
    }
    *sp = tu_subpath(name);
    copy_tree(g_plain_sp, *sp);
    *dir = strdup(tu_step_dir(*sp, 1));
}

/* A byte of a small chunk (no blocks): load, read and verify all say
   "<dir>/<file>: tensor '<t>' (chunk 0, bytes A..B of the file): checksum
   mismatch (stored 0x..., read 0x...)". */
static void small_chunk(const char *name, const char *tensor)
{
    char *sp, *dir, want[1024];
    copy_plain(name, &sp, &dir);
    stored s = stored_of(dir, tensor, NULL);
    uint64_t got = flip_in(dir, s.file, s.b0 + 5, s.b0, s.b1);
    snprintf(want, sizeof want,
             "%s/%s: tensor '%s' (chunk 0, bytes %zu..%zu of the file): checksum mismatch "
             "(stored 0x%016llx, read 0x%016llx)",
             dir, s.file, tensor, s.b0, s.b1, (unsigned long long)s.hash, (unsigned long long)got);
    cstate c;
    cstate_make(&c, 0.0f);
    expect_msg("load", load_keyed(sp, c.st, NULL), SHS_ECHECKSUM, want);
    expect_read(sp, 0, tensor, 1, 2, SHS_ECHECKSUM, want);
    expect_msg("verify", shs_checkpoint_verify(dir, NULL, 0), SHS_ECHECKSUM, want);
    cstate_free(&c);
    tu_rmtree(sp);
    free(sp);
    free(dir);
}

static void test_model_chunk(void **state)
{
    (void)state;
    small_chunk("model", "a");
}

static void test_optimizer_chunk(void **state)
{
    (void)state;
    small_chunk("opt", "opt.a");
    /* it is the optimizer's file that was named */
    char *sp, *dir;
    copy_plain("opt2", &sp, &dir);
    assert_string_equal(stored_of(dir, "opt.a", NULL).file, OPT_FILE);
    tu_rmtree(sp);
    free(sp);
    free(dir);
}

/* A byte in block 1 of "big" (12 MiB, 4 MiB blocks): the whole load, a
   read of rows in block 1 only (mapped: the blocks it touches; pread:
   block windows) and verify (whole and blocks in one pass) all name
   block 1 and its bytes. */
static void test_block(void **state)
{
    (void)state;
    char *sp, *dir, want[1024];
    copy_plain("block", &sp, &dir);
    stored s = stored_of(dir, "big", NULL);
    size_t blk = (size_t)SHS__HASH_BLOCK;
    assert_int_equal(s.b1 - s.b0, 3 * blk);
    uint64_t got = flip_in(dir, s.file, s.b0 + blk + 100, s.b0 + blk, s.b0 + 2 * blk);
    json_error_t je;
    json_t *root = json_load_file(tu_path(dir, "metadata.json"), 0, &je);
    uint64_t rec = strtoull(
        json_string_value(json_array_get(json_object_get(chunk_of(root, "big"), "xxh3_blocks"), 1)),
        NULL, 16);
    json_decref(root);
    snprintf(want, sizeof want,
             "%s/%s: tensor 'big' (chunk 0, block 1, bytes %zu..%zu of the file): checksum "
             "mismatch (stored 0x%016llx, read 0x%016llx)",
             dir, s.file, s.b0 + blk, s.b0 + 2 * blk, (unsigned long long)rec,
             (unsigned long long)got);
    cstate c;
    cstate_make(&c, 0.0f);
    expect_msg("load", load_keyed(sp, c.st, NULL), SHS_ECHECKSUM, want);
    /* rows of 3072 floats = 12 KiB: block 1 is rows [341.33, 682.67) */
    expect_read(sp, 0, "big", 400, 10, SHS_ECHECKSUM, want);
    expect_msg("verify", shs_checkpoint_verify(dir, NULL, 0), SHS_ECHECKSUM, want);
    /* rows in block 0 only are still read (only what is read is checked) */
    shs_checkpoint *ck = NULL;
    TU_OK(shs_checkpoint_open(&ck, sp, NULL));
    size_t ti;
    TU_OK(shs_checkpoint_find(&ti, ck, "big"));
    uint64_t start[2] = { 0, 0 }, count[2] = { 10, BIG / 1024 };
    float *buf = malloc(10 * (BIG / 1024) * sizeof(float));
    assert_non_null(buf);
    TU_OK(shs_checkpoint_read(ck, ti, start, count, SHS_F32, buf, 10 * (BIG / 1024) * 4));
    free(buf);
    shs_checkpoint_free(ck);
    cstate_free(&c);
    tu_rmtree(sp);
    free(sp);
    free(dir);
}

/* A byte of the blob "rng": the load restoring it, shs_checkpoint_read_blob
   and verify say "<dir>/<file>: blob 'rng' (rank 0, bytes A..B of the
   file): checksum mismatch (stored 0x..., read 0x...)". */
static void test_blob(void **state)
{
    (void)state;
    char *sp, *dir, want[1024];
    copy_plain("blob", &sp, &dir);
    stored s = stored_of(dir, NULL, "rng");
    uint64_t got = flip_in(dir, s.file, s.b0 + 2, s.b0, s.b1);
    snprintf(want, sizeof want,
             "%s/%s: blob 'rng' (rank 0, bytes %zu..%zu of the file): checksum mismatch "
             "(stored 0x%016llx, read 0x%016llx)",
             dir, s.file, s.b0, s.b1, (unsigned long long)s.hash, (unsigned long long)got);
    cstate c;
    cstate_make(&c, 0.0f);
    expect_msg("load", load_keyed(sp, c.st, NULL), SHS_ECHECKSUM, want);
    shs_checkpoint *ck = NULL;
    TU_OK(shs_checkpoint_open(&ck, sp, NULL));
    char buf[7];
    expect_msg("read_blob", shs_checkpoint_read_blob(ck, 0, buf, sizeof buf), SHS_ECHECKSUM, want);
    shs_checkpoint_free(ck);
    expect_msg("verify", shs_checkpoint_verify(dir, NULL, 0), SHS_ECHECKSUM, want);
    cstate_free(&c);
    tu_rmtree(sp);
    free(sp);
    free(dir);
}

/* A byte of segment 3 of the encrypted "big" (12 segments of 1 MiB), its
   checksum mended so that only the segment's tag can see it: the load,
   the read API (whole, and rows inside segment 3) and verify all name
   segment 3 and its bytes. */
static void test_encrypted_segment(void **state)
{
    (void)state;
    char *sp = tu_subdir("enc"), want[1024];
    cstate c;
    cstate_make(&c, 1.0f);
    TU_OK(save_keyed(sp, c.st, 2, g_key_file, NULL, 0));
    char *dir = strdup(tu_step_dir(sp, 2));
    stored s = stored_of(dir, "big", NULL);
    assert_int_equal(s.b1 - s.b0, 12 * SEG);
    flip_in(dir, s.file, s.b0 + 3 * SEG + 77, s.b0, s.b1);
    mend_ctx x = { dir, "big" };
    edit_meta_keyed(dir, mend_hash, &x);
    snprintf(want, sizeof want,
             "%s/%s: tensor 'big' (chunk 0, segment 3 of 12, bytes %zu..%zu of the file): does "
             "not authenticate (AES-256-GCM-STREAM tag mismatch)",
             dir, s.file, s.b0 + 3 * SEG, s.b0 + 4 * SEG);
    cstate_zero(&c);
    expect_msg("load", load_keyed(sp, c.st, g_key_file), SHS_ECHECKSUM, want);
    /* rows of 12 KiB: segment 3 is bytes [3, 4) MiB = rows [256, 341.33) */
    expect_read(sp, 1, "big", 300, 5, SHS_ECHECKSUM, want);
    expect_msg("verify", shs_checkpoint_verify(dir, k_key, 32), SHS_ECHECKSUM, want);
    cstate_free(&c);
    tu_rmtree(sp);
    free(sp);
    free(dir);
}

/* Nothing flipped: every reader takes the copy (so each failure above is
   the flipped byte's). */
static void test_intact(void **state)
{
    (void)state;
    char *sp, *dir;
    copy_plain("intact", &sp, &dir);
    cstate c;
    cstate_make(&c, 0.0f);
    TU_OK(load_keyed(sp, c.st, NULL));
    cstate_assert(&c, 1.0f);
    TU_OK(shs_checkpoint_verify(dir, NULL, 0));
    cstate_free(&c);
    tu_rmtree(sp);
    free(sp);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_intact),
        cmocka_unit_test(test_model_chunk),
        cmocka_unit_test(test_optimizer_chunk),
        cmocka_unit_test(test_block),
        cmocka_unit_test(test_blob),
        cmocka_unit_test(test_encrypted_segment),
    };
    int rc = TU_RUN_GROUP(tests, setup, teardown);
    free(g_plain_sp);
    return rc;
}
