/*
 * test_crypt_tamper.c -- every way an encrypted checkpoint must refuse to
 * load (docs/encryption.md): a changed byte (with and without its checksum
 * mended), chunks swapped between tensors, a step moved to another step's
 * place, a chunk spliced in from another save of the same step, a
 * truncated file, and metadata.json that lies about the encryption.
 */
#include "crypt_fixture.h"

static void test_tampered_byte(void **state)
{
    (void)state;
    char *sp = tu_subdir("tamper");
    cstate s;
    cstate_make(&s, 5.0f);
    TU_OK(save_keyed(sp, s.st, 3, g_key_file, NULL, 0));
    char *dir = strdup(tu_step_dir(sp, 3));
    size_t b0, b1;
    chunk_range(dir, "a", &b0, &b1);
    /* a changed byte: its checksum catches it, key or no key */
    flip_byte(dir, b0 + 5);
    assert_int_equal(load_keyed(sp, s.st, g_key_file), SHS_ECHECKSUM);
    TU_ASSERT_MSG_HAS("tensor 'a'");
    assert_int_equal(shs_checkpoint_verify(dir), SHS_ECHECKSUM);
    /* the checksum mended too (an attacker who can write metadata.json):
       the GCM tag still refuses it, in load, verify and the read API */
    mend_ctx x = { dir, "a" };
    edit_meta(dir, mend_hash, &x);
    assert_int_equal(load_keyed(sp, s.st, g_key_file), SHS_ECHECKSUM);
    TU_ASSERT_MSG_HAS("does not authenticate");
    TU_ASSERT_MSG_HAS("tensor 'a'");
    assert_int_equal(shs_checkpoint_verify_key(dir, k_key, 32), SHS_ECHECKSUM);
    TU_ASSERT_MSG_HAS("does not authenticate");
    /* without the key, verify finds the checksums whole: only the key can
       tell */
    assert_int_equal(shs_checkpoint_verify(dir), SHS_EKEY);
    shs_checkpoint *ck;
    shs_ckpt_open_opts o = SHS_CKPT_OPEN_OPTS_INIT;
    o.key = k_key;
    o.key_len = 32;
    TU_OK(shs_checkpoint_open_ex(&ck, sp, &o));
    size_t ti;
    TU_OK(shs_checkpoint_find(&ti, ck, "a"));
    float out[12];
    memset(out, 0x55, sizeof out);
    uint64_t st[2] = { 1, 0 }, n[2] = { 2, 2 };
    assert_int_equal(shs_checkpoint_read(ck, ti, st, n, SHS_F32, out, 16), SHS_ECHECKSUM);
    assert_int_equal(shs_checkpoint_read(ck, ti, NULL, NULL, SHS_F32, out, sizeof out),
                     SHS_ECHECKSUM);
    /* no unauthenticated plaintext reaches the caller */
    for (int i = 0; i < 12; i++)
        assert_true(out[i] != 5.0f + (float)i);
    shs_checkpoint_close(ck);
    free(dir);
    cstate_free(&s);
    tu_rmtree(sp);
    free(sp);
}

/* Swap the "xxh3" and "aes_gcm" of chunks a and b. */
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

static void set_step(json_t *root, void *arg)
{
    json_object_set_new(root, "step", json_integer(*(int *)arg));
}

static void test_swapped_chunks(void **state)
{
    (void)state;
    char *sp = tu_subdir("swap");
    cstate s;
    cstate_make(&s, 1.0f);
    TU_OK(save_keyed(sp, s.st, 1, g_key_file, NULL, 0));
    char *dir = strdup(tu_step_dir(sp, 1));
    /* the ciphertexts of a and b swapped in the file, with their checksums,
       nonces and tags in metadata.json: every checksum matches, the AAD
       (the tensor's name) does not */
    size_t a0, a1, b0, b1, len;
    chunk_range(dir, "a", &a0, &a1);
    chunk_range(dir, "b", &b0, &b1);
    assert_int_equal(a1 - a0, b1 - b0);
    char *data = tu_read_file(tu_path(dir, MODEL_FILE), &len);
    char tmp[48];
    memcpy(tmp, data + a0, 48);
    memcpy(data + a0, data + b0, 48);
    memcpy(data + b0, tmp, 48);
    assert_int_equal(tu_write_file(tu_path(dir, MODEL_FILE), data, len), 0);
    free(data);
    edit_meta(dir, swap_ab, NULL);
    int rc = load_keyed(sp, s.st, g_key_file);
    if (rc != SHS_ECHECKSUM)
        fail_msg("%d %s", rc, shs_last_error());
    TU_ASSERT_MSG_HAS("does not authenticate");
    assert_int_equal(shs_checkpoint_verify_key(dir, k_key, 32), SHS_ECHECKSUM);

    /* a whole step moved to another step's place (directory renamed,
       "step" edited and resealed): the AAD's step does not match */
    char *sp2 = tu_subdir("swap2");
    TU_OK(save_keyed(sp2, s.st, 1, g_key_file, NULL, 0));
    char *from = strdup(tu_step_dir(sp2, 1)), *to = strdup(tu_step_dir(sp2, 2));
    assert_int_equal(rename(from, to), 0);
    int two = 2;
    edit_meta(to, set_step, &two);
    rc = load_keyed(to, s.st, g_key_file);
    if (rc != SHS_ECHECKSUM)
        fail_msg("%d %s", rc, shs_last_error());
    TU_ASSERT_MSG_HAS("does not authenticate");
    free(from);
    free(to);
    tu_rmtree(sp2);
    free(sp2);
    free(dir);
    cstate_free(&s);
    tu_rmtree(sp);
    free(sp);
}

typedef struct splice_ctx {
    char xxh3[17], aes_gcm[57];
} splice_ctx;

static void splice_a(json_t *root, void *arg)
{
    splice_ctx *x = arg;
    json_t *c = chunk_of(root, "a");
    json_object_set_new(c, "xxh3", json_string(x->xxh3));
    json_object_set_new(c, "aes_gcm", json_string(x->aes_gcm));
}

/* A chunk of an earlier save of the same step (same key, same place),
   spliced into a re-save with its checksum, nonce and tag: the save id in
   the AAD refuses it (a rollback of one tensor, or a chunk of another run
   that saved the same step under the same key). */
static void test_spliced_from_other_save(void **state)
{
    (void)state;
    char *sp = tu_subdir("splice");
    cstate s;
    cstate_make(&s, 1.0f);
    TU_OK(save_keyed(sp, s.st, 1, g_key_file, NULL, 0));
    char *dir = strdup(tu_step_dir(sp, 1));
    size_t a0, a1, b0, b1, len, len2;
    chunk_range(dir, "a", &a0, &a1);
    char *old = tu_read_file(tu_path(dir, MODEL_FILE), &len);
    assert_non_null(old);
    json_error_t je;
    json_t *root = json_load_file(tu_path(dir, "metadata.json"), 0, &je);
    assert_non_null(root);
    splice_ctx x;
    snprintf(x.xxh3, sizeof x.xxh3, "%s",
             json_string_value(json_object_get(chunk_of(root, "a"), "xxh3")));
    snprintf(x.aes_gcm, sizeof x.aes_gcm, "%s",
             json_string_value(json_object_get(chunk_of(root, "a"), "aes_gcm")));
    json_decref(root);
    cstate s2;
    cstate_make(&s2, 2.0f);
    TU_OK(save_keyed(sp, s2.st, 1, g_key_file, NULL, 0)); /* the same step again */
    chunk_range(dir, "a", &b0, &b1);
    assert_int_equal(a0, b0);
    assert_int_equal(a1, b1);
    char *cur = tu_read_file(tu_path(dir, MODEL_FILE), &len2);
    assert_non_null(cur);
    memcpy(cur + a0, old + a0, a1 - a0);
    assert_int_equal(tu_write_file(tu_path(dir, MODEL_FILE), cur, len2), 0);
    edit_meta(dir, splice_a, &x);
    int rc = load_keyed(sp, s.st, g_key_file);
    if (rc != SHS_ECHECKSUM || !strstr(shs_last_error(), "does not authenticate") ||
        !strstr(shs_last_error(), "tensor 'a'"))
        fail_msg("%d %s", rc, shs_last_error());
    free(old);
    free(cur);
    free(dir);
    cstate_free(&s);
    cstate_free(&s2);
    tu_rmtree(sp);
    free(sp);
}

static void test_truncated(void **state)
{
    (void)state;
    char *sp = tu_subdir("trunc");
    cstate s;
    cstate_make(&s, 2.0f);
    TU_OK(save_keyed(sp, s.st, 6, g_key_file, NULL, 0));
    char *dir = strdup(tu_step_dir(sp, 6));
    const char *file = tu_path(dir, MODEL_FILE);
    struct stat stt;
    assert_int_equal(stat(file, &stt), 0);
    size_t cuts[2] = { 1, (size_t)stt.st_size / 2 };
    for (int i = 0; i < 2; i++) {
        assert_int_equal(truncate(tu_path(dir, MODEL_FILE), stt.st_size - (off_t)cuts[i]), 0);
        int rc = load_keyed(sp, s.st, g_key_file);
        assert_true(rc < 0);
        TU_ASSERT_MSG_HAS(MODEL_FILE);
        assert_true(shs_checkpoint_verify_key(dir, k_key, 32) < 0);
        TU_ASSERT_MSG_HAS(MODEL_FILE);
    }
    free(dir);
    cstate_free(&s);
    tu_rmtree(sp);
    free(sp);
}

/* ---- metadata.json that lies about the encryption ---- */

static void drop_cipher(json_t *root, void *arg)
{
    (void)arg;
    json_object_del(root, "cipher");
}
static void drop_nonce(json_t *root, void *arg)
{
    (void)arg;
    json_object_del(chunk_of(root, "b"), "aes_gcm");
}
static void bad_nonce(json_t *root, void *arg)
{
    (void)arg;
    json_object_set_new(chunk_of(root, "b"), "aes_gcm", json_string("00zz"));
}
static void as_version2(json_t *root, void *arg)
{
    (void)arg;
    json_object_set_new(root, "version", json_integer(2));
}
static void other_key_id(json_t *root, void *arg)
{
    (void)arg;
    json_object_set_new(root, "key_id", json_string("0123456789abcdef"));
}
static void test_hostile_metadata(void **state)
{
    (void)state;
    static const struct {
        void (*fn)(json_t *, void *);
        int rc;
        const char *needle;
        int plain; /* an unencrypted save edited */
    } cases[] = {
        { other_key_id, SHS_ECORRUPT, "\"save_id\" belong to version 3", 1 },
        { bad_nonce, SHS_ECORRUPT, "\"aes_gcm\" (56 hex digits: nonce and tag) is only valid", 1 },
        { drop_cipher, SHS_ECORRUPT, "\"save_id\" belong to version 3", 0 },
        { drop_nonce, SHS_ECORRUPT, "\"aes_gcm\" (56 hex digits: nonce and tag) is required", 0 },
        { bad_nonce, SHS_ECORRUPT, "tensor 'b': chunk 0: \"aes_gcm\"", 0 },
        { as_version2, SHS_ECORRUPT, "\"save_id\" belong to version 3", 0 },
        { other_key_id, SHS_EKEY, "wrong key", 0 },
    };
    cstate s;
    cstate_make(&s, 4.0f);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *sp = tu_subdir("hostile");
        TU_OK(save_keyed(sp, s.st, 8, cases[i].plain ? NULL : g_key_file, NULL, 0));
        const char *dir = tu_step_dir(sp, 8);
        edit_meta(dir, cases[i].fn, NULL);
        int rc = load_keyed(sp, s.st, g_key_file);
        if (rc != cases[i].rc || !strstr(shs_last_error(), cases[i].needle))
            fail_msg("case %zu: %d %s", i, rc, shs_last_error());
        tu_rmtree(sp);
        free(sp);
    }
    cstate_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tampered_byte),           cmocka_unit_test(test_swapped_chunks),
        cmocka_unit_test(test_spliced_from_other_save), cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_hostile_metadata),
    };
    return TU_RUN_GROUP(tests, setup, teardown);
}
