/*
 * test_crypt_tamper.c -- every way a version-4 encrypted checkpoint must
 * refuse to load (docs/encryption.md): a changed byte (with and without
 * its checksum mended), segments swapped, chunks swapped between tensors,
 * a chunk moved to another offset, a step moved to another step's place, a
 * chunk spliced in from another save of the same step, a truncated file,
 * the segment size or the tag table edited, and metadata.json that lies
 * about the encryption.  Each edit of metadata.json is tried twice: sealed
 * with its unkeyed checksum only, as anyone can (its MAC refuses it), and
 * authenticated again under the key (the chunks' own tags refuse it).
 * Version 3: test_crypt_v3.c; downgrades: test_crypt_downgrade.c.
 */
#include "crypt_fixture.h"

#define SEG (1u << 20)

/* No edit: edit_meta_keyed(dir, keep_as_is, NULL) authenticates what an
   earlier edit_meta left. */
static void keep_as_is(json_t *root, void *arg)
{
    (void)root;
    (void)arg;
}

/* Save cstate(base) encrypted at `step` into a new save path `name`. */
static char *saved(const char *name, cstate *s, float base, int64_t step)
{
    char *sp = tu_subdir(name);
    cstate_make(s, base);
    TU_OK(save_keyed(sp, s->st, step, g_key_file, NULL, 0));
    return sp;
}

static void done_with(char *sp, cstate *s)
{
    cstate_free(s);
    tu_rmtree(sp);
    free(sp);
}

/* dir, restored from its copy `keep`, is intact (so each edit was what
   failed); then everything freed. */
static void done_keeping(char *sp, cstate *s, char *dir, char *keep)
{
    TU_OK(shs_checkpoint_verify(dir, k_key, 32));
    tu_rmtree(keep);
    free(keep);
    free(dir);
    done_with(sp, s);
}

static void test_tampered_byte(void **state)
{
    (void)state;
    cstate s;
    char *sp = saved("tamper", &s, 5.0f, 3);
    char *dir = strdup(tu_step_dir(sp, 3));
    size_t b0, b1;
    chunk_range(dir, "a", &b0, &b1);
    /* a changed byte: its checksum catches it, key or no key */
    flip_byte(dir, b0 + 5);
    expect_refused(sp, s.st, dir, SHS_ECHECKSUM, "tensor 'a'");
    assert_int_equal(shs_checkpoint_verify(dir, NULL, 0), SHS_ECHECKSUM);
    /* the checksum mended (anyone can): the MAC of metadata.json refuses
       it with the key; without it, only the key could tell */
    mend_ctx x = { dir, "a" };
    edit_meta(dir, mend_hash, &x);
    expect_refused(sp, s.st, dir, SHS_ECHECKSUM, "metadata.json: does not authenticate");
    assert_int_equal(shs_checkpoint_verify(dir, NULL, 0), SHS_EKEY);
    TU_ASSERT_MSG_HAS("checksums match");
    /* mended and authenticated again: the segment's tag refuses it, in
       load, verify and the read API */
    edit_meta_keyed(dir, mend_hash, &x);
    expect_refused(sp, s.st, dir, SHS_ECHECKSUM, "does not authenticate");
    TU_ASSERT_MSG_HAS("tensor 'a'");
    TU_ASSERT_MSG_HAS("segment 0 of 1");
    shs_checkpoint *ck = open_keyed(sp, 0);
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
    shs_checkpoint_free(ck);
    free(dir);
    done_with(sp, &s);
}

typedef struct seg_swap {
    size_t i, j; /* segments of "big" */
} seg_swap;

/* Swap tags i and j of "big" in "gcm_tags". */
static void swap_tags(json_t *root, void *arg)
{
    seg_swap *w = arg;
    json_t *c = chunk_of(root, "big");
    char *t = strdup(json_string_value(json_object_get(c, "gcm_tags")));
    assert_non_null(t);
    for (size_t k = 0; k < 32; k++) {
        char x = t[32 * w->i + k];
        t[32 * w->i + k] = t[32 * w->j + k];
        t[32 * w->j + k] = x;
    }
    json_object_set_new(c, "gcm_tags", json_string(t));
    free(t);
}

static void mend_big(json_t *root, void *arg)
{
    mend_hash(root, arg);
}

static void mend_big_and_swap_tags(json_t *root, void *arg)
{
    void **v = arg;
    mend_hash(root, v[0]);
    swap_tags(root, v[1]);
}

/* Two segments of "big" (12 of 1 MiB) swapped in the file, checksum
   mended: their tags (by index), with or without the tags swapped too. */
static void test_swapped_segments(void **state)
{
    (void)state;
    cstate s;
    char *sp = saved("segswap", &s, 1.0f, 2);
    char *dir = strdup(tu_step_dir(sp, 2));
    size_t b0, b1;
    chunk_range(dir, "big", &b0, &b1);
    assert_int_equal(b1 - b0, 12u * SEG);
    swap_bytes(dir, b0 + 2 * SEG, b0 + 5 * SEG, SEG);
    expect_refused(sp, s.st, dir, SHS_ECHECKSUM, "checksum mismatch (stored 0x");
    mend_ctx x = { dir, "big" };
    edit_meta(dir, mend_big, &x);
    expect_refused(sp, s.st, dir, SHS_ECHECKSUM, "metadata.json: does not authenticate");
    edit_meta_keyed(dir, mend_big, &x);
    expect_refused(sp, s.st, dir, SHS_ECHECKSUM, "does not authenticate");
    TU_ASSERT_MSG_HAS("segment 2 of 12");
    seg_swap w = { 2, 5 };
    void *both[2] = { &x, &w };
    edit_meta_keyed(dir, mend_big_and_swap_tags, both);
    expect_refused(sp, s.st, dir, SHS_ECHECKSUM, "does not authenticate");
    TU_ASSERT_MSG_HAS("segment 2 of 12");
    /* swapped back, with the tags: it loads again */
    swap_bytes(dir, b0 + 2 * SEG, b0 + 5 * SEG, SEG);
    edit_meta_keyed(dir, mend_big_and_swap_tags, both);
    cstate_zero(&s);
    TU_OK(load_keyed(sp, s.st, g_key_file));
    cstate_assert(&s, 1.0f);
    free(dir);
    done_with(sp, &s);
}

/* Swap the "xxh3", "gcm_salt" and "gcm_tags" of chunks a and b. */
static void swap_ab(json_t *root, void *arg)
{
    (void)arg;
    json_t *a = chunk_of(root, "a"), *b = chunk_of(root, "b");
    const char *keys[3] = { "xxh3", "gcm_salt", "gcm_tags" };
    for (int i = 0; i < 3; i++) {
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
    cstate s;
    char *sp = saved("swap", &s, 1.0f, 1);
    char *dir = strdup(tu_step_dir(sp, 1));
    /* the ciphertexts of a and b swapped in the file, with their checksums,
       salts and tags in metadata.json: every checksum matches, the AAD
       (the tensor's name) does not */
    size_t a0, a1, b0, b1;
    chunk_range(dir, "a", &a0, &a1);
    chunk_range(dir, "b", &b0, &b1);
    assert_int_equal(a1 - a0, b1 - b0);
    swap_bytes(dir, a0, b0, a1 - a0);
    edit_meta(dir, swap_ab, NULL);
    expect_refused(sp, s.st, dir, SHS_ECHECKSUM, "metadata.json: does not authenticate");
    edit_meta_keyed(dir, keep_as_is, NULL);
    expect_refused(sp, s.st, dir, SHS_ECHECKSUM, "does not authenticate");

    /* a whole step moved to another step's place (directory renamed,
       "step" edited): the MAC, then the AAD's step */
    char *sp2 = tu_subdir("swap2");
    TU_OK(save_keyed(sp2, s.st, 1, g_key_file, NULL, 0));
    char *from = strdup(tu_step_dir(sp2, 1)), *to = strdup(tu_step_dir(sp2, 2));
    assert_int_equal(rename(from, to), 0);
    int two = 2;
    edit_meta(to, set_step, &two);
    expect_refused(to, s.st, to, SHS_ECHECKSUM, "metadata.json: does not authenticate");
    edit_meta_keyed(to, set_step, &two);
    expect_refused(to, s.st, to, SHS_ECHECKSUM, "does not authenticate");
    TU_ASSERT_MSG_HAS("tensor '");
    free(from);
    free(to);
    tu_rmtree(sp2);
    free(sp2);
    free(dir);
    done_with(sp, &s);
}

/* Swap the "offset" of chunks 0 and 1 of tensor `arg`. */
static void swap_offsets(json_t *root, void *arg)
{
    json_t *chunks = json_object_get(json_object_get(json_object_get(root, "tensors"), arg),
                                     "chunks");
    assert_int_equal(json_array_size(chunks), 2);
    json_t *c0 = json_array_get(chunks, 0), *c1 = json_array_get(chunks, 1);
    json_t *o0 = json_incref(json_object_get(c0, "offset"));
    json_object_set(c0, "offset", json_object_get(c1, "offset"));
    json_object_set_new(c1, "offset", o0);
}

/* Chunks of one tensor (a checkpoint resharded to two ranks) trading
   places: rank 0's rows claimed to be rank 1's and back.  The layout
   still tiles; the AAD (the chunk's offset) refuses it. */
static void test_moved_chunk(void **state)
{
    (void)state;
    cstate s;
    char *sp = saved("moved", &s, 2.0f, 4);
    char *rs = tu_subdir("moved-rs");
    char *dst = tu_path_dup(rs, "iteration_00000004");
    char *lf = tu_path_dup(tu_root, "moved-layout.json");
    static const char layout[] = "{\"world_size\": 2, \"tensors\": {\"*\": {\"split_dim\": 0}}}";
    assert_int_equal(tu_write_file(lf, layout, sizeof layout - 1), 0);
    shs_reshard_opts ro = SHS_RESHARD_OPTS_INIT;
    ro.key = k_key;
    ro.key_len = 32;
    TU_OK(shs_reshard(NULL, sp, dst, lf, &ro));
    free(lf);
    TU_OK(shs_checkpoint_verify(dst, k_key, 32));
    edit_meta(dst, swap_offsets, "a");
    expect_refused(rs, s.st, dst, SHS_ECHECKSUM, "metadata.json: does not authenticate");
    edit_meta_keyed(dst, keep_as_is, NULL);
    expect_refused(rs, s.st, dst, SHS_ECHECKSUM, "does not authenticate");
    TU_ASSERT_MSG_HAS("tensor 'a'");
    /* the read API too, for a box in either half */
    shs_checkpoint *ck = open_keyed(dst, 0);
    size_t ti;
    TU_OK(shs_checkpoint_find(&ti, ck, "a"));
    float out[3];
    for (uint64_t row = 0; row < 4; row += 3) {
        uint64_t st[2] = { row, 0 }, n[2] = { 1, 3 };
        assert_int_equal(shs_checkpoint_read(ck, ti, st, n, SHS_F32, out, sizeof out),
                         SHS_ECHECKSUM);
    }
    shs_checkpoint_free(ck);
    tu_rmtree(rs);
    free(rs);
    free(dst);
    done_with(sp, &s);
}

typedef struct splice_ctx {
    char xxh3[17], salt[33];
    char *tags;
} splice_ctx;

static void splice_a(json_t *root, void *arg)
{
    splice_ctx *x = arg;
    json_t *c = chunk_of(root, "a");
    json_object_set_new(c, "xxh3", json_string(x->xxh3));
    json_object_set_new(c, "gcm_salt", json_string(x->salt));
    json_object_set_new(c, "gcm_tags", json_string(x->tags));
}

/* A chunk of an earlier save of the same step (same key, same place),
   spliced into a re-save with its checksum, salt and tags: the save id in
   the AAD refuses it (a rollback of one tensor, or a chunk of another run
   that saved the same step under the same key). */
static void test_spliced_from_other_save(void **state)
{
    (void)state;
    cstate s;
    char *sp = saved("splice", &s, 1.0f, 1);
    char *dir = strdup(tu_step_dir(sp, 1));
    size_t a0, a1, b0, b1, len, len2;
    chunk_range(dir, "a", &a0, &a1);
    char *old = tu_read_file(tu_path(dir, MODEL_FILE), &len);
    assert_non_null(old);
    json_error_t je;
    json_t *root = json_load_file(tu_path(dir, "metadata.json"), 0, &je);
    assert_non_null(root);
    splice_ctx x;
    json_t *c = chunk_of(root, "a");
    snprintf(x.xxh3, sizeof x.xxh3, "%s", json_string_value(json_object_get(c, "xxh3")));
    snprintf(x.salt, sizeof x.salt, "%s", json_string_value(json_object_get(c, "gcm_salt")));
    x.tags = strdup(json_string_value(json_object_get(c, "gcm_tags")));
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
    expect_refused(sp, s.st, dir, SHS_ECHECKSUM, "metadata.json: does not authenticate");
    edit_meta_keyed(dir, splice_a, &x);
    expect_refused(sp, s.st, dir, SHS_ECHECKSUM, "does not authenticate");
    TU_ASSERT_MSG_HAS("tensor 'a'");
    free(x.tags);
    free(old);
    free(cur);
    free(dir);
    cstate_free(&s2);
    done_with(sp, &s);
}

static void test_truncated(void **state)
{
    (void)state;
    cstate s;
    char *sp = saved("trunc", &s, 2.0f, 6);
    char *dir = strdup(tu_step_dir(sp, 6));
    const char *file = tu_path(dir, MODEL_FILE);
    struct stat stt;
    assert_int_equal(stat(file, &stt), 0);
    /* a byte, the last segment of "big" and more, half the file */
    size_t cuts[3] = { 1, SEG + 100, (size_t)stt.st_size / 2 };
    for (int i = 0; i < 3; i++) {
        assert_int_equal(truncate(tu_path(dir, MODEL_FILE), stt.st_size - (off_t)cuts[i]), 0);
        int rc = load_keyed(sp, s.st, g_key_file);
        assert_true(rc < 0);
        TU_ASSERT_MSG_HAS(MODEL_FILE);
        assert_true(shs_checkpoint_verify(dir, k_key, 32) < 0);
        TU_ASSERT_MSG_HAS(MODEL_FILE);
    }
    free(dir);
    done_with(sp, &s);
}

/* ---- the AAD's fields, the segment size, the tag table, the MAC ---- */

static void set_save_id(json_t *root, void *arg)
{
    (void)arg;
    json_object_set_new(root, "save_id", json_string("0123456789abcdef"));
}
static void set_model_only(json_t *root, void *arg)
{
    (void)arg;
    json_object_set_new(root, "model_only", json_true());
}
static void set_segment(json_t *root, void *arg)
{
    json_object_set_new(root, "segment_bytes", json_integer(*(json_int_t *)arg));
}

typedef struct tag_edit {
    const char *tensor;
    int how; /* 0: flip a bit of tag k, 1: drop the last tag, 2: add one, 3: not hex */
    size_t k;
} tag_edit;

static void edit_tags(json_t *root, void *arg)
{
    tag_edit *e = arg;
    json_t *c = chunk_of(root, e->tensor);
    const char *t = json_string_value(json_object_get(c, "gcm_tags"));
    size_t n = strlen(t);
    char *v = calloc(n + 33, 1);
    assert_non_null(v);
    memcpy(v, t, n);
    if (e->how == 0)
        v[32 * e->k + 7] = v[32 * e->k + 7] == '0' ? '1' : '0';
    else if (e->how == 1)
        v[n - 32] = '\0';
    else if (e->how == 2)
        memcpy(v + n, t, 32);
    else
        v[3] = 'G';
    json_object_set_new(c, "gcm_tags", json_string(v));
    free(v);
}

static void test_fields_and_tags(void **state)
{
    (void)state;
    cstate s;
    char *sp = saved("fields", &s, 3.0f, 5);
    char *dir = strdup(tu_step_dir(sp, 5));
    char *keep = tu_path_dup(tu_root, "fields-orig");
    copy_tree(dir, keep);
    static const json_int_t seg2 = 2 << 20, seg3 = 3 << 20;
    static const tag_edit flip7 = { "big", 0, 7 }, flip_a = { "a", 0, 0 }, drop = { "big", 1, 0 },
                          add = { "a", 2, 0 }, nothex = { "big", 3, 0 };
    static const struct {
        void (*fn)(json_t *, void *);
        const void *arg;
        int keyed_rc; /* authenticated again under the key */
        const char *keyed_needle;
    } cases[] = {
        /* the save id in the AAD: every chunk fails */
        { set_save_id, NULL, SHS_ECHECKSUM, "does not authenticate" },
        /* not in the AAD, only in the MAC: once re-authenticated it is what
           the key holder wrote */
        { set_model_only, NULL, SHS_OK, "" },
        /* the segment size: the tag table no longer fits "big" */
        { set_segment, &seg2, SHS_ECORRUPT, "\"gcm_tags\" must hold 6 tags" },
        { set_segment, &seg3, SHS_ECORRUPT, "must be a power of two" },
        /* the tag table */
        { edit_tags, &flip7, SHS_ECHECKSUM, "segment 7 of 12" },
        { edit_tags, &flip_a, SHS_ECHECKSUM, "segment 0 of 1" },
        { edit_tags, &drop, SHS_ECORRUPT, "must hold 12 tags" },
        { edit_tags, &add, SHS_ECORRUPT, "must hold 1 tags" },
        { edit_tags, &nothex, SHS_ECORRUPT, "must hold 12 tags" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* sealed without the key: the MAC refuses it, unless the rules do
           first */
        edit_meta(dir, cases[i].fn, (void *)(uintptr_t)cases[i].arg);
        int want = cases[i].keyed_rc == SHS_ECORRUPT ? SHS_ECORRUPT : SHS_ECHECKSUM;
        const char *needle = want == SHS_ECORRUPT ? cases[i].keyed_needle
                                                  : "metadata.json: does not authenticate";
        int rc = shs_checkpoint_verify(dir, k_key, 32);
        if (rc != want || !strstr(shs_last_error(), needle))
            fail_msg("case %zu unkeyed: %d %s", i, rc, shs_last_error());
        restore_tree(dir, keep);
        edit_meta_keyed(dir, cases[i].fn, (void *)(uintptr_t)cases[i].arg);
        rc = shs_checkpoint_verify(dir, k_key, 32);
        if (rc != cases[i].keyed_rc || !strstr(shs_last_error(), cases[i].keyed_needle))
            fail_msg("case %zu keyed: %d %s", i, rc, shs_last_error());
        rc = load_keyed(sp, s.st, g_key_file);
        if (rc != cases[i].keyed_rc)
            fail_msg("case %zu keyed load: %d %s", i, rc, shs_last_error());
        restore_tree(dir, keep);
    }
    done_keeping(sp, &s, dir, keep);
}

static void flip_mac(json_t *root, void *arg)
{
    (void)arg;
    char *m = strdup(json_string_value(json_object_get(root, "metadata_mac")));
    assert_non_null(m);
    m[20] = m[20] == '0' ? '1' : '0';
    json_object_set_new(root, "metadata_mac", json_string(m));
    free(m);
}

static void drop_mac(json_t *root, void *arg)
{
    (void)arg;
    json_object_del(root, "metadata_mac");
}

/* Move "metadata_mac" to the front of the file. */
static void mac_first(json_t *root, void *arg)
{
    (void)arg;
    json_t *mac = json_incref(json_object_get(root, "metadata_mac"));
    json_t *fmt = json_incref(json_object_get(root, "format"));
    json_object_del(root, "metadata_mac");
    json_object_del(root, "format");
    json_t *front = json_object();
    json_object_set_new(front, "metadata_mac", mac);
    json_object_set_new(front, "format", fmt);
    json_object_update(front, root);
    json_object_clear(root);
    json_object_update(root, front);
    json_decref(front);
}

static void test_metadata_mac(void **state)
{
    (void)state;
    cstate s;
    char *sp = saved("mac", &s, 3.0f, 5);
    char *dir = strdup(tu_step_dir(sp, 5));
    char *keep = tu_path_dup(tu_root, "mac-orig");
    copy_tree(dir, keep);
    /* a digit of the MAC */
    edit_meta(dir, flip_mac, NULL);
    expect_refused(sp, s.st, dir, SHS_ECHECKSUM, "metadata.json: does not authenticate");
    /* the read API checks it at open, with the key; without, it opens */
    shs_checkpoint *ck = NULL;
    shs_checkpoint_open_opts o = SHS_CHECKPOINT_OPEN_OPTS_INIT;
    o.key = k_key;
    o.key_len = 32;
    assert_int_equal(shs_checkpoint_open(&ck, sp, &o), SHS_ECHECKSUM);
    assert_null(ck);
    TU_OK(shs_checkpoint_open(&ck, sp, NULL));
    shs_checkpoint_free(ck);
    restore_tree(dir, keep);
    /* the MAC dropped, or not where it belongs */
    edit_meta(dir, drop_mac, NULL);
    expect_refused(sp, s.st, dir, SHS_ECORRUPT, "\"metadata_mac\" belong to version 4");
    restore_tree(dir, keep);
    json_error_t je;
    json_t *root = json_load_file(tu_path(dir, "metadata.json"), 0, &je);
    assert_non_null(root);
    mac_first(root, NULL);
    tu_meta_reseal(tu_path(dir, "metadata.json"), root); /* not edit_meta: it keeps the order */
    json_decref(root);
    expect_refused(sp, s.st, dir, SHS_ECORRUPT, "ends with \"metadata_mac\"");
    restore_tree(dir, keep);
    done_keeping(sp, &s, dir, keep);
}

/* ---- metadata.json that lies about the encryption ---- */

static void drop_cipher(json_t *root, void *arg)
{
    (void)arg;
    json_object_del(root, "cipher");
}
static void drop_salt(json_t *root, void *arg)
{
    (void)arg;
    json_object_del(chunk_of(root, "b"), "gcm_salt");
}
static void bad_salt(json_t *root, void *arg)
{
    (void)arg;
    json_object_set_new(chunk_of(root, "b"), "gcm_salt", json_string("00zz"));
}
static void add_aes_gcm(json_t *root, void *arg)
{
    (void)arg;
    json_object_set_new(chunk_of(root, "b"), "aes_gcm", json_string("00"));
}
static void as_version(json_t *root, void *arg)
{
    json_object_set_new(root, "version", json_integer(*(int *)arg));
}
static void v3_cipher(json_t *root, void *arg)
{
    (void)arg;
    json_object_set_new(root, "cipher", json_string("AES-256-GCM"));
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
        int arg;
        int rc;
        const char *needle;
        int plain; /* an unencrypted save edited */
    } cases[] = {
        { other_key_id, 0, SHS_ECORRUPT, "\"save_id\" belong to the encrypted versions", 1 },
        { add_aes_gcm, 0, SHS_ECORRUPT, "\"aes_gcm\" (56 hex digits: nonce and tag) is only valid",
          1 },
        { bad_salt, 0, SHS_ECORRUPT, "\"gcm_salt\" and \"gcm_tags\" are only valid in version 4",
          1 },
        { drop_cipher, 0, SHS_ECORRUPT, "\"save_id\" belong to the encrypted versions", 0 },
        { drop_salt, 0, SHS_ECORRUPT, "\"gcm_salt\" (32 hex digits) is required", 0 },
        { bad_salt, 0, SHS_ECORRUPT, "tensor 'b': chunk 0: \"gcm_salt\"", 0 },
        { add_aes_gcm, 0, SHS_ECORRUPT, "\"aes_gcm\" (56 hex digits: nonce and tag) is only valid",
          0 },
        { as_version, 3, SHS_ECORRUPT, "\"metadata_mac\" belong to version 4", 0 },
        { as_version, 2, SHS_ECORRUPT, "\"save_id\" belong to the encrypted versions", 0 },
        { as_version, 5, SHS_ECORRUPT, "reads versions 1 to 4", 0 },
        { v3_cipher, 0, SHS_ECORRUPT, "\"cipher\" must be \"AES-256-GCM-STREAM\" in version 4", 0 },
        { other_key_id, 0, SHS_EKEY, "wrong key", 0 },
    };
    cstate s;
    cstate_make(&s, 4.0f);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *sp = tu_subdir("hostile");
        TU_OK(save_keyed(sp, s.st, 8, cases[i].plain ? NULL : g_key_file, NULL, 0));
        const char *dir = tu_step_dir(sp, 8);
        int arg = cases[i].arg;
        edit_meta(dir, cases[i].fn, &arg);
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
        cmocka_unit_test(test_tampered_byte),           cmocka_unit_test(test_swapped_segments),
        cmocka_unit_test(test_swapped_chunks),          cmocka_unit_test(test_moved_chunk),
        cmocka_unit_test(test_spliced_from_other_save), cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_fields_and_tags),         cmocka_unit_test(test_metadata_mac),
        cmocka_unit_test(test_hostile_metadata),
    };
    return TU_RUN_GROUP(tests, setup, teardown);
}
