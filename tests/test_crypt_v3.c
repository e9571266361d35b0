/*
 * test_crypt_v3.c -- checkpoints encrypted as metadata version 3 (one
 * AES-256-GCM message per chunk, written by the release before version 4:
 * tests/golden/crypt_v3) still resume, load, read (whole and a box),
 * verify, merge and reshard with the key, and fail every tampering case
 * that applies to them: a changed byte (with and without its checksum
 * mended), a truncated file, chunks swapped, a step moved, the save id
 * changed, a nonce or a tag edited, version-4 members added.  (Version 3
 * has no segments and no MAC: its metadata.json is sealed by its unkeyed
 * checksum only, so every edit here is resealed, and the chunks' tags
 * refuse it.)
 */
#include "crypt_fixture.h"

#define GOLDEN SHS_TEST_SOURCE_DIR "/tests/golden/crypt_v3"
#define STEP 3
#define BIG_R 128
#define BIG_C 256

/* The golden checkpoint's state (tests/golden/crypt_v3/README.md). */
typedef struct v3state {
    shs_state *st;
    float a[12], b[12], opt[12], big[BIG_R * BIG_C];
} v3state;

static void v3_make(v3state *s)
{
    static const uint64_t shp[2] = { 4, 3 }, bshp[2] = { BIG_R, BIG_C };
    memset(s, 0, sizeof *s);
    TU_OK(shs_state_create(&s->st));
    tu_add_tensor(s->st, "a", SHS_KIND_MODEL, SHS_F32, 2, shp, s->a, NULL);
    tu_add_tensor(s->st, "b", SHS_KIND_MODEL, SHS_F32, 2, shp, s->b, NULL);
    tu_add_tensor(s->st, "big", SHS_KIND_MODEL, SHS_F32, 2, bshp, s->big, NULL);
    tu_add_tensor(s->st, "opt.a", SHS_KIND_OPTIMIZER, SHS_F32, 2, shp, s->opt, NULL);
}

static void v3_assert(const v3state *s)
{
    for (int i = 0; i < 12; i++) {
        assert_true(s->a[i] == 3.0f + (float)i);
        assert_true(s->b[i] == -3.0f - (float)i);
        assert_true(s->opt[i] == 6.0f + (float)i);
    }
    for (int i = 0; i < BIG_R * BIG_C; i++)
        assert_true(s->big[i] == 3.0f + (float)(i % 1000));
}

/* A copy of the golden save path, to change. */
static char *v3_copy(const char *name)
{
    char *sp = tu_subpath(name);
    copy_tree(GOLDEN, sp);
    assert_int_equal(unlink(tu_path(sp, "README.md")), 0);
    return sp;
}

static void test_v3_reads(void **state)
{
    (void)state;
    char *sp = v3_copy("v3");
    const char *dir = tu_step_dir(sp, STEP);
    v3state s;
    v3_make(&s);
    /* the manager resumes from it (an encrypted save path, key given) */
    shs_config c;
    tu_cfg_saving(&c, sp);
    c.encrypt_key_file = g_key_file;
    shs_manager *m = NULL;
    TU_OK(shs_manager_create(&m, &c, s.st));
    shs_progress p = tu_prog(0);
    shs_load_result r = SHS_LOAD_RESULT_INIT;
    TU_OK(shs_manager_load(&r, m, &p));
    assert_int_equal(r.source, SHS_LOAD_SAVE_PATH);
    assert_int_equal(p.global_step, STEP);
    assert_int_equal(p.consumed_samples, 96);
    shs_manager_free(m);
    v3_assert(&s);
    memset(s.big, 0, sizeof s.big);
    TU_OK(load_keyed(sp, s.st, g_key_file));
    v3_assert(&s);
    assert_int_equal(load_keyed(sp, s.st, NULL), SHS_EKEY);
    TU_ASSERT_MSG_HAS("encrypted (AES-256-GCM, key id ");
    assert_int_equal(load_keyed(sp, s.st, g_other_file), SHS_EKEY);
    TU_ASSERT_MSG_HAS("wrong key");

    /* verify: with the key every chunk is authenticated (one message each,
       through a scratch buffer) */
    TU_OK(shs_checkpoint_verify(dir, k_key, 32));
    assert_int_equal(shs_checkpoint_verify(dir, NULL, 0), SHS_EKEY);
    TU_ASSERT_MSG_HAS("checksums match");

    /* the read API: whole tensors and boxes, mapped and with pread */
    for (int nommap = 0; nommap < 2; nommap++) {
        shs_checkpoint *ck = open_keyed(sp, nommap ? SHS_CHECKPOINT_OPEN_NO_MMAP : 0);
        assert_int_equal(shs_checkpoint_format_version(ck), 3);
        assert_int_equal(shs_checkpoint_encrypted(ck), 1);
        size_t ti;
        TU_OK(shs_checkpoint_find(&ti, ck, "big"));
        float box[6];
        uint64_t st[2] = { 100, 250 }, n[2] = { 2, 3 };
        TU_OK(shs_checkpoint_read(ck, ti, st, n, SHS_F32, box, sizeof box));
        assert_true(box[4] == s.big[101 * BIG_C + 251]);
        TU_OK(shs_checkpoint_find(&ti, ck, "b"));
        float b[12];
        TU_OK(shs_checkpoint_read(ck, ti, NULL, NULL, SHS_F32, b, sizeof b));
        assert_memory_equal(b, s.b, sizeof b);
        char rng[7];
        TU_OK(shs_checkpoint_read_blob(ck, 0, rng, sizeof rng));
        assert_memory_equal(rng, "seed-42", 7);
        shs_checkpoint_free(ck);
    }

    /* merge: plain weights; reshard: a version-4 checkpoint, same key */
    char *hf = tu_subpath("v3-hf");
    shs_merge_opts mo = SHS_MERGE_OPTS_INIT;
    mo.key = k_key;
    mo.key_len = 32;
    TU_OK(shs_merge(NULL, sp, hf, &mo));
    shs_file *f = NULL;
    size_t ti;
    TU_OK(shs_file_open(&f, tu_path(hf, "model.safetensors"), NULL));
    TU_OK(shs_file_find(&ti, f, "big"));
    assert_memory_equal(shs_file_tensor_data(f, ti), s.big, sizeof s.big);
    shs_file_free(f);
    char *rs = tu_subdir("v3-rs");
    char *dst = tu_path_dup(rs, "iteration_00000003");
    shs_reshard_opts ro = SHS_RESHARD_OPTS_INIT;
    ro.world_size = 2;
    ro.key = k_key;
    ro.key_len = 32;
    TU_OK(shs_reshard(NULL, sp, dst, NULL, &ro));
    shs_checkpoint *ck;
    TU_OK(shs_checkpoint_open(&ck, dst, NULL));
    assert_int_equal(shs_checkpoint_format_version(ck), 4);
    shs_checkpoint_free(ck);
    TU_OK(shs_checkpoint_verify(dst, k_key, 32));
    memset(s.big, 0, sizeof s.big);
    TU_OK(load_keyed(rs, s.st, g_key_file));
    v3_assert(&s);

    shs_state_free(s.st);
    tu_rmtree(rs);
    tu_rmtree(hf);
    tu_rmtree(sp);
    free(dst);
    free(rs);
    free(hf);
    free(sp);
}

/* ---- tampering ---- */

static void swap_ab(json_t *root, void *arg)
{
    (void)arg;
    json_t *a = chunk_of(root, "a"), *b = chunk_of(root, "b");
    const char *keys[2] = { "xxh3", "aes_gcm" };
    for (int i = 0; i < 2; i++) {
        json_t *va = json_incref(json_object_get(a, keys[i]));
        json_object_set(a, keys[i], json_object_get(b, keys[i]));
        json_object_set_new(b, keys[i], va);
    }
}

static void set_step4(json_t *root, void *arg)
{
    (void)arg;
    json_object_set_new(root, "step", json_integer(4));
}

static void set_save_id(json_t *root, void *arg)
{
    (void)arg;
    json_object_set_new(root, "save_id", json_string("0123456789abcdef"));
}

/* Flip a hex digit of big's "aes_gcm": at 5 the nonce, at 50 the tag. */
static void edit_nt(json_t *root, void *arg)
{
    json_t *c = chunk_of(root, "big");
    char *v = strdup(json_string_value(json_object_get(c, "aes_gcm")));
    assert_non_null(v);
    size_t at = (size_t)(uintptr_t)arg;
    v[at] = v[at] == '0' ? '1' : '0';
    json_object_set_new(c, "aes_gcm", json_string(v));
    free(v);
}

static void add_salt(json_t *root, void *arg)
{
    (void)arg;
    json_object_set_new(chunk_of(root, "a"), "gcm_salt",
                        json_string("000102030405060708090a0b0c0d0e0f"));
}

static void add_segment(json_t *root, void *arg)
{
    (void)arg;
    json_object_set_new(root, "segment_bytes", json_integer(1 << 20));
}

static void test_v3_tamper(void **state)
{
    (void)state;
    v3state s;
    v3_make(&s);
    /* a changed byte: the checksum; mended: the tag, in every reader */
    {
        char *sp = v3_copy("v3-byte");
        const char *dir = tu_step_dir(sp, STEP);
        size_t b0, b1;
        chunk_range(dir, "big", &b0, &b1);
        flip_byte(dir, b0 + 70000);
        expect_refused(sp, s.st, dir, SHS_ECHECKSUM, "checksum mismatch (stored 0x");
        mend_ctx x = { dir, "big" };
        edit_meta(dir, mend_hash, &x);
        expect_refused(sp, s.st, dir, SHS_ECHECKSUM, "does not authenticate (AES-256-GCM tag");
        TU_ASSERT_MSG_HAS("tensor 'big'");
        shs_checkpoint *ck = open_keyed(sp, 0);
        size_t ti;
        TU_OK(shs_checkpoint_find(&ti, ck, "big"));
        float box[2];
        uint64_t st[2] = { 0, 0 }, n[2] = { 1, 2 };
        memset(box, 0x55, sizeof box);
        /* one message per chunk: any box reads it whole, and fails */
        assert_int_equal(shs_checkpoint_read(ck, ti, st, n, SHS_F32, box, sizeof box),
                         SHS_ECHECKSUM);
        assert_true(box[0] != 3.0f);
        shs_checkpoint_free(ck);
        tu_rmtree(sp);
        free(sp);
    }
    /* a truncated file */
    {
        char *sp = v3_copy("v3-trunc");
        const char *dir = tu_step_dir(sp, STEP);
        struct stat stt;
        assert_int_equal(stat(tu_path(dir, MODEL_FILE), &stt), 0);
        assert_int_equal(truncate(tu_path(dir, MODEL_FILE), stt.st_size - 5), 0);
        assert_true(load_keyed(sp, s.st, g_key_file) < 0);
        TU_ASSERT_MSG_HAS(MODEL_FILE);
        assert_true(shs_checkpoint_verify(dir, k_key, 32) < 0);
        TU_ASSERT_MSG_HAS(MODEL_FILE);
        tu_rmtree(sp);
        free(sp);
    }
    /* chunks swapped between tensors, with checksums, nonces and tags */
    {
        char *sp = v3_copy("v3-swap");
        const char *dir = tu_step_dir(sp, STEP);
        size_t a0, a1, b0, b1;
        chunk_range(dir, "a", &a0, &a1);
        chunk_range(dir, "b", &b0, &b1);
        swap_bytes(dir, a0, b0, a1 - a0);
        edit_meta(dir, swap_ab, NULL);
        expect_refused(sp, s.st, dir, SHS_ECHECKSUM, "does not authenticate");
        tu_rmtree(sp);
        free(sp);
    }
    /* the step moved to another step's place */
    {
        char *sp = v3_copy("v3-move");
        char *to = strdup(tu_step_dir(sp, 4));
        assert_int_equal(rename(tu_step_dir(sp, STEP), to), 0);
        edit_meta(to, set_step4, NULL);
        expect_refused(to, s.st, to, SHS_ECHECKSUM, "does not authenticate");
        free(to);
        tu_rmtree(sp);
        free(sp);
    }
    /* the AAD's save id, a nonce, a tag */
    static const struct {
        void (*fn)(json_t *, void *);
        uintptr_t arg;
        int rc;
        const char *needle;
    } cases[] = {
        { set_save_id, 0, SHS_ECHECKSUM, "does not authenticate" },
        { edit_nt, 5, SHS_ECHECKSUM,
          "tensor 'big' (chunk 0, bytes 352..131424 of the file): does not authenticate" },
        { edit_nt, 50, SHS_ECHECKSUM,
          "tensor 'big' (chunk 0, bytes 352..131424 of the file): does not authenticate" },
        /* version 4's members in version 3 */
        { add_salt, 0, SHS_ECORRUPT, "\"gcm_salt\" and \"gcm_tags\" are only valid in version 4" },
        { add_segment, 0, SHS_ECORRUPT,
          "\"segment_bytes\" and \"metadata_mac\" belong to version 4" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *sp = v3_copy("v3-case");
        const char *dir = tu_step_dir(sp, STEP);
        edit_meta(dir, cases[i].fn, (void *)cases[i].arg);
        int rc = shs_checkpoint_verify(dir, k_key, 32);
        if (rc != cases[i].rc || !strstr(shs_last_error(), cases[i].needle))
            fail_msg("case %zu: verify %d %s", i, rc, shs_last_error());
        rc = load_keyed(sp, s.st, g_key_file);
        if (rc != cases[i].rc || !strstr(shs_last_error(), cases[i].needle))
            fail_msg("case %zu: load %d %s", i, rc, shs_last_error());
        tu_rmtree(sp);
        free(sp);
    }
    shs_state_free(s.st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v3_reads),
        cmocka_unit_test(test_v3_tamper),
    };
    return TU_RUN_GROUP(tests, setup, teardown);
}
