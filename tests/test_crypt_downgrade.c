/*
 * test_crypt_downgrade.c -- an encrypted checkpoint stripped of its
 * encryption (issue 19, 8a; docs/encryption.md "Downgrades"): the cipher
 * fields dropped from metadata.json, version 2 set and its unkeyed seal
 * recomputed.  Before version 4 `verify --key-file` said OK, `merge
 * --key-file` wrote ciphertext as weights and the trainer, key
 * configured, resumed on garbage.  Now: a data file whose header marks it
 * encrypted is never read as plain data (load, verify, merge, reshard,
 * the read and file APIs, plain folders); a key given to verify or to the
 * read API (merge, reshard, diff) takes encrypted checkpoints only; with a
 * key configured, the manager's resume from save_path takes encrypted
 * checkpoints only unless allow_unencrypted_resume is set, while
 * load_path and initial_load_path still take plain weights.
 */
#include "crypt_fixture.h"

#define GOLDEN_V3 SHS_TEST_SOURCE_DIR "/tests/golden/crypt_v3"

/* Every trace of the encryption out of metadata.json, version 2. */
static void strip(json_t *root, void *arg)
{
    (void)arg;
    static const char *const top[] = { "cipher", "key_id", "save_id", "segment_bytes",
                                       "metadata_mac" };
    for (size_t i = 0; i < sizeof top / sizeof *top; i++)
        json_object_del(root, top[i]);
    json_object_set_new(root, "version", json_integer(2));
    const char *name;
    json_t *t;
    json_object_foreach(json_object_get(root, "tensors"), name, t)
    {
        size_t k;
        json_t *c;
        json_array_foreach(json_object_get(t, "chunks"), k, c)
        {
            json_object_del(c, "aes_gcm");
            json_object_del(c, "gcm_salt");
            json_object_del(c, "gcm_tags");
        }
    }
}

/* The manager resumes from save path sp (key from key_file, or none). */
static int resume(const char *sp, shs_state *st, const char *key_file, int allow)
{
    return manager_load(sp, NULL, st, key_file, allow);
}

#define EXPECT(call, want, needle)                                                                 \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != (want) || !strstr(shs_last_error(), (needle)))                                  \
            fail_msg("%s: %d (want %d) %s", #call, rc_, (want), shs_last_error());                 \
    } while (0)

#define MARKED "its header says it is encrypted"

/* The three downgrades of the issue, on a version-4 save and on the
   version-3 golden one. */
static void downgraded_is_refused(const char *sp, const char *dir, shs_state *st)
{
    edit_meta(dir, strip, NULL);
    /* verify: with the key, nothing is authenticated; without, the data
       files say what they hold */
    EXPECT(shs_checkpoint_verify(dir, k_key, 32), SHS_EKEY,
           "not encrypted, but a key was given");
    EXPECT(shs_checkpoint_verify(dir, NULL, 0), SHS_ECORRUPT, MARKED);
    /* merge and reshard, key or no key: nothing written */
    char *hf = tu_subpath("dg-hf");
    shs_merge_opts mo = SHS_MERGE_OPTS_INIT;
    mo.key = k_key;
    mo.key_len = 32;
    EXPECT(shs_merge(NULL, sp, hf, &mo), SHS_EKEY, "not encrypted, but a key was given");
    assert_false(tu_path_exists(hf));
    mo.key = NULL;
    mo.key_len = 0;
    EXPECT(shs_merge(NULL, sp, hf, &mo), SHS_ECORRUPT, MARKED);
    assert_false(tu_path_exists(hf));
    char *rs = tu_subdir("dg-rs");
    char *dst = tu_path_dup(rs, "iteration_00000003");
    shs_reshard_opts ro = SHS_RESHARD_OPTS_INIT;
    ro.world_size = 2;
    EXPECT(shs_reshard(NULL, sp, dst, NULL, &ro), SHS_ECORRUPT, MARKED);
    assert_false(tu_path_exists(dst));
    /* the read API opens it (names, shapes) and refuses its data */
    shs_checkpoint *ck;
    TU_OK(shs_checkpoint_open(&ck, sp, NULL));
    assert_int_equal(shs_checkpoint_encrypted(ck), 0);
    float a[12];
    EXPECT(shs_checkpoint_read(ck, 0, NULL, NULL, SHS_F32, a, sizeof a), SHS_ECORRUPT, MARKED);
    shs_checkpoint_free(ck);
    /* the trainer: with the key configured it does not resume from an
       unencrypted save path; allowed to, it still never reads the data
       files as plain; without a key neither */
    EXPECT(resume(sp, st, g_key_file, 0), SHS_EKEY, "allow_unencrypted_resume");
    EXPECT(resume(sp, st, g_key_file, 1), SHS_ECORRUPT, MARKED);
    EXPECT(resume(sp, st, NULL, 0), SHS_ECORRUPT, MARKED);
    EXPECT(load_keyed(sp, st, g_key_file), SHS_ECORRUPT, MARKED);
    tu_rmtree(rs);
    free(rs);
    free(dst);
    free(hf);
}

static void test_downgrade_v4(void **state)
{
    (void)state;
    char *sp = tu_subdir("dg4");
    cstate s;
    cstate_make(&s, 2.0f);
    TU_OK(save_keyed(sp, s.st, 3, g_key_file, NULL, 0));
    downgraded_is_refused(sp, tu_step_dir(sp, 3), s.st);
    cstate_free(&s);
    tu_rmtree(sp);
    free(sp);
}

static void test_downgrade_v3(void **state)
{
    (void)state;
    char *sp = tu_subpath("dg3");
    copy_tree(GOLDEN_V3, sp);
    shs_state *st;
    static float a[12], b[12], opt[12], big[128 * 256];
    static const uint64_t shp[2] = { 4, 3 }, bshp[2] = { 128, 256 };
    TU_OK(shs_state_create(&st));
    tu_add_tensor(st, "a", SHS_KIND_MODEL, SHS_F32, 2, shp, a, NULL);
    tu_add_tensor(st, "b", SHS_KIND_MODEL, SHS_F32, 2, shp, b, NULL);
    tu_add_tensor(st, "big", SHS_KIND_MODEL, SHS_F32, 2, bshp, big, NULL);
    tu_add_tensor(st, "opt.a", SHS_KIND_OPTIMIZER, SHS_F32, 2, shp, opt, NULL);
    downgraded_is_refused(sp, tu_step_dir(sp, 3), st);
    shs_state_free(st);
    tu_rmtree(sp);
    free(sp);
}

typedef struct hh_ctx {
    const char *dir;
} hh_ctx;

/* Every file's "size" and "header_xxh3" from the files as they are. */
static void mend_headers(json_t *root, void *arg)
{
    hh_ctx *x = arg;
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(root, "files"), i, f)
    {
        shs_file *fh = NULL;
        TU_OK(shs_file_open(&fh, tu_path(x->dir, json_string_value(json_object_get(f, "name"))),
                            NULL));
        char hx[17];
        shs__hex64(hx, shs__header_hash(fh));
        json_object_set_new(f, "header_xxh3", json_string(hx));
        shs_file_free(fh);
    }
}

/* The mark renamed in a data file (same length: nothing moves). */
static void unmark(const char *path)
{
    size_t len;
    char *d = tu_read_file(path, &len);
    assert_non_null(d);
    for (size_t i = 0; i + 16 <= len; i++)
        if (memcmp(d + i, "shardsafe_cipher", 16) == 0)
            memcpy(d + i, "shardsafe_c1pher", 16);
    assert_int_equal(tu_write_file(path, d, len), 0);
    free(d);
}

/* The data files' marks removed too: what is left is an unencrypted
   checkpoint of someone else's making, which no key authenticates.  A
   key given refuses it; only allow_unencrypted_resume takes it. */
static void test_marks_removed(void **state)
{
    (void)state;
    char *sp = tu_subdir("dgm");
    cstate s;
    cstate_make(&s, 2.0f);
    TU_OK(save_keyed(sp, s.st, 3, g_key_file, NULL, 0));
    const char *dir = tu_step_dir(sp, 3);
    edit_meta(dir, strip, NULL);
    unmark(tu_path(dir, MODEL_FILE));
    unmark(tu_path(dir, "checkpoint-opt-0000000-0000001.safetensors"));
    hh_ctx x = { dir };
    edit_meta(dir, mend_headers, &x);
    TU_OK(shs_checkpoint_verify(dir, NULL, 0)); /* a valid unencrypted checkpoint */
    EXPECT(shs_checkpoint_verify(dir, k_key, 32), SHS_EKEY,
           "not encrypted, but a key was given");
    char *hf = tu_subpath("dgm-hf");
    shs_merge_opts mo = SHS_MERGE_OPTS_INIT;
    mo.key = k_key;
    mo.key_len = 32;
    EXPECT(shs_merge(NULL, sp, hf, &mo), SHS_EKEY, "not encrypted, but a key was given");
    assert_false(tu_path_exists(hf));
    shs_checkpoint *ck = NULL;
    shs_checkpoint_open_opts o = SHS_CHECKPOINT_OPEN_OPTS_INIT;
    o.key = k_key;
    o.key_len = 32;
    EXPECT(shs_checkpoint_open(&ck, sp, &o), SHS_EKEY, "not encrypted, but a key was given");
    EXPECT(resume(sp, s.st, g_key_file, 0), SHS_EKEY, "allow_unencrypted_resume");
    TU_OK(resume(sp, s.st, g_key_file, 1)); /* the user said so: ciphertext */
    assert_true(s.a[0] != 2.0f);
    free(hf);
    cstate_free(&s);
    tu_rmtree(sp);
    free(sp);
}

/* An unencrypted save path with a key configured: refused unless
   allow_unencrypted_resume (by the struct or by name); the same
   checkpoint through load_path or initial_load_path loads as before. */
static void test_unencrypted_save_path(void **state)
{
    (void)state;
    char *sp = tu_subdir("plain-sp");
    cstate s;
    cstate_make(&s, 6.0f);
    TU_OK(save_keyed(sp, s.st, 4, NULL, NULL, 0));
    cstate_zero(&s);
    EXPECT(resume(sp, s.st, g_key_file, 0), SHS_EKEY,
           "not encrypted, but a key is configured: an unencrypted checkpoint in save_path");
    TU_OK(resume(sp, s.st, NULL, 0)); /* no key: as ever */
    cstate_zero(&s);
    TU_OK(resume(sp, s.st, g_key_file, 1));
    cstate_assert(&s, 6.0f);
    shs_config c;
    tu_cfg_saving(&c, sp);
    TU_OK(shs_config_set(&c, "encrypt_key_file", g_key_file));
    TU_OK(shs_config_set(&c, "allow_unencrypted_resume", "true"));
    assert_int_equal(c.allow_unencrypted_resume, 1);
    shs_manager *m = NULL;
    TU_OK(shs_manager_create(&m, &c, s.st));
    shs_progress p = tu_prog(0);
    shs_load_result r = SHS_LOAD_RESULT_INIT;
    cstate_zero(&s);
    TU_OK(shs_manager_load(&r, m, &p));
    cstate_assert(&s, 6.0f);
    /* and the next save is encrypted: the save path then holds both */
    p = tu_prog(8);
    TU_OK(shs_manager_save(m, &p, 0));
    shs_manager_free(m);
    shs_config_release(&c);
    shs_checkpoint *ck;
    TU_OK(shs_checkpoint_open(&ck, sp, NULL));
    assert_int_equal(shs_checkpoint_encrypted(ck), 1);
    shs_checkpoint_free(ck);
    /* (the newest step, 8, is encrypted: it resumes without the flag) */
    TU_OK(resume(sp, s.st, g_key_file, 0));
    /* a struct of version 3 has no such field: refused as by default */
    char *sp2 = tu_subdir("plain-sp2");
    TU_OK(save_keyed(sp2, s.st, 4, NULL, NULL, 0));
    shs_config_init(&c);
    c.save_path = sp2;
    c.save_max = 0;
    c.fsync = 0;
    c.encrypt_key_file = g_key_file;
    c.allow_unencrypted_resume = 1;
    c.version = 3;
    TU_OK(shs_manager_create(&m, &c, s.st));
    EXPECT(shs_manager_load(&r, m, &p), SHS_EKEY, "allow_unencrypted_resume");
    shs_manager_free(m);
    tu_rmtree(sp2);
    free(sp2);
    TU_OK(shs_checkpoint_remove(sp, 8));
    TU_OK(tu_write_file(tu_path(sp, "latest_checkpointed_iteration.txt"), "4", 1));
    /* pretrained weights stay easy: load_path and initial_load_path */
    char *fresh = tu_subpath("plain-fresh");
    cstate_zero(&s);
    TU_OK(load_keyed(sp, s.st, g_key_file)); /* load_path */
    cstate_assert(&s, 6.0f);
    tu_cfg_saving(&c, fresh);
    c.initial_load_path = sp;
    c.initial_load_model_only = 0;
    c.encrypt_key_file = g_key_file;
    TU_OK(shs_manager_create(&m, &c, s.st));
    cstate_zero(&s);
    TU_OK(shs_manager_load(&r, m, &p));
    assert_int_equal(r.source, SHS_LOAD_INITIAL);
    shs_manager_free(m);
    cstate_assert(&s, 6.0f);
    free(fresh);
    cstate_free(&s);
    tu_rmtree(sp);
    free(sp);
}

/* A data file of an encrypted save in a plain folder (Hugging Face
   weights, one file): never read as weights, key or no key. */
static void test_marked_file_in_folder(void **state)
{
    (void)state;
    char *sp = tu_subdir("mk");
    cstate s;
    cstate_make(&s, 2.0f);
    TU_OK(save_keyed(sp, s.st, 3, g_key_file, NULL, 0));
    char *hf = tu_subdir("mk-hf");
    size_t len;
    char *d = tu_read_file(tu_path(tu_step_dir(sp, 3), MODEL_FILE), &len);
    assert_non_null(d);
    assert_int_equal(tu_write_file(tu_path(hf, "model.safetensors"), d, len), 0);
    free(d);
    shs_config c;
    tu_cfg_saving(&c, tu_path(tu_root, "mk-fresh"));
    c.initial_load_path = hf;
    c.initial_load_in_hf = 1;
    c.strict = 0;
    for (int keyed = 0; keyed < 2; keyed++) {
        c.encrypt_key_file = keyed ? g_key_file : "";
        shs_manager *m = NULL;
        TU_OK(shs_manager_create(&m, &c, s.st));
        shs_progress p = tu_prog(0);
        shs_load_result r = SHS_LOAD_RESULT_INIT;
        EXPECT(shs_manager_load(&r, m, &p), SHS_EKEY, "without the metadata.json");
        shs_manager_free(m);
    }
    shs_checkpoint *ck;
    TU_OK(shs_checkpoint_open(&ck, hf, NULL));
    float a[12];
    size_t ti;
    TU_OK(shs_checkpoint_find(&ti, ck, "a"));
    EXPECT(shs_checkpoint_read(ck, ti, NULL, NULL, SHS_F32, a, sizeof a), SHS_EKEY,
           "without the metadata.json");
    shs_checkpoint_free(ck);
    tu_rmtree(hf);
    free(hf);
    cstate_free(&s);
    tu_rmtree(sp);
    free(sp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_downgrade_v4),          cmocka_unit_test(test_downgrade_v3),
        cmocka_unit_test(test_marks_removed),         cmocka_unit_test(test_unencrypted_save_path),
        cmocka_unit_test(test_marked_file_in_folder),
    };
    return TU_RUN_GROUP(tests, setup, teardown);
}
