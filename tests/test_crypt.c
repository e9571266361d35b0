/*
 * test_crypt.c -- encryption at rest (src/crypto/crypt.c, docs/encryption.md):
 * keys from files and environment variables, round trips through the
 * manager (sync, async, two ranks as threads), the read API and verify,
 * and every allocation and every write of an encrypted save failing in
 * turn.  Tampering, swapped and spliced chunks, truncation and lying
 * metadata: test_crypt_tamper.c.
 */
#include "crypt_fixture.h"
#include "threadcomm.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <pthread.h>

/* k_key in hex */
static const char *const k_key_hex =
    "0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20";

/* ---- keys ---- */

static void expect_key_error(const char *file, const char *env, const char *needle)
{
    unsigned char k[32];
    assert_int_equal(shs_key_load(k, file, env), SHS_EKEY);
    TU_ASSERT_MSG_HAS(needle);
}

static void test_key_sources(void **state)
{
    (void)state;
    unsigned char k[32];
    char *p = tu_subpath("keys");
    assert_int_equal(mkdir(p, 0755), 0);
    /* raw 32 bytes, 64 hex digits, 64 hex digits + newline: one key */
    TU_OK(shs_key_load(k, g_key_file, NULL));
    assert_memory_equal(k, k_key, 32);
    const char *hex = tu_path(p, "hex");
    assert_int_equal(tu_write_file(hex, k_key_hex, 64), 0);
    memset(k, 0, sizeof k);
    TU_OK(shs_key_load(k, hex, NULL));
    assert_memory_equal(k, k_key, 32);
    char line[66];
    snprintf(line, sizeof line, "%s\n", k_key_hex);
    assert_int_equal(tu_write_file(hex, line, 65), 0);
    memset(k, 0, sizeof k);
    TU_OK(shs_key_load(k, hex, NULL));
    assert_memory_equal(k, k_key, 32);
    setenv("SHS_TEST_KEY", k_key_hex, 1);
    memset(k, 0, sizeof k);
    TU_OK(shs_key_load(k, NULL, "SHS_TEST_KEY"));
    assert_memory_equal(k, k_key, 32);

    /* missing, short, too long, not hex */
    expect_key_error(tu_path(p, "missing"), NULL, "missing");
    const char *bad = tu_path(p, "bad");
    assert_int_equal(tu_write_file(bad, k_key, 31), 0);
    expect_key_error(bad, NULL, "not 31 bytes");
    unsigned char long_key[33] = { 0 };
    assert_int_equal(tu_write_file(bad, long_key, 33), 0);
    expect_key_error(bad, NULL, "not 33 bytes");
    assert_int_equal(tu_write_file(bad, k_key_hex, 63), 0);
    expect_key_error(bad, NULL, "not 63 bytes");
    char nothex[65];
    memcpy(nothex, k_key_hex, 65);
    nothex[10] = 'g';
    assert_int_equal(tu_write_file(bad, nothex, 64), 0);
    expect_key_error(bad, NULL, "hex digits");
    assert_int_equal(tu_write_file(bad, "", 0), 0);
    expect_key_error(bad, NULL, "not 0 bytes");
    /* the environment: unset, empty, short, not hex */
    unsetenv("SHS_TEST_UNSET");
    expect_key_error(NULL, "SHS_TEST_UNSET", "SHS_TEST_UNSET (the encryption key) is not set");
    setenv("SHS_TEST_BAD", "", 1);
    expect_key_error(NULL, "SHS_TEST_BAD", "is not set");
    setenv("SHS_TEST_BAD", "0102", 1);
    expect_key_error(NULL, "SHS_TEST_BAD", "environment variable SHS_TEST_BAD");
    setenv("SHS_TEST_BAD", nothex, 1);
    expect_key_error(NULL, "SHS_TEST_BAD", "hex digits");
    /* exactly one source */
    expect_key_error(NULL, NULL, "exactly one");
    expect_key_error(g_key_file, "SHS_TEST_KEY", "exactly one");
    assert_int_equal(shs_key_load(NULL, g_key_file, NULL), SHS_EINVAL);
    assert_string_equal(shs_strerror(SHS_EKEY), "encryption key missing, wrong or malformed");
    tu_rmtree(p);
    free(p);
}

static void test_roundtrip(void **state)
{
    (void)state;
    char *sp = tu_subdir("rt");
    cstate s;
    cstate_make(&s, 3.0f);
    TU_OK(save_keyed(sp, s.st, 5, g_key_file, NULL, 0));
    const char *dir = tu_step_dir(sp, 5);

    /* metadata.json says so: version 4, cipher, key id, segment size, a
       salt and one tag per 1 MiB segment per chunk, and its MAC; the files
       hold no plaintext run of the weights */
    json_error_t je;
    json_t *root = json_load_file(tu_path(dir, "metadata.json"), 0, &je);
    assert_non_null(root);
    assert_int_equal(json_integer_value(json_object_get(root, "version")), 4);
    assert_string_equal(json_string_value(json_object_get(root, "cipher")), "AES-256-GCM-STREAM");
    assert_int_equal(strlen(json_string_value(json_object_get(root, "key_id"))), 16);
    assert_int_equal(json_integer_value(json_object_get(root, "segment_bytes")), 1 << 20);
    assert_int_equal(strlen(json_string_value(json_object_get(root, "metadata_mac"))), 64);
    json_t *ta = json_object_get(json_object_get(root, "tensors"), "big");
    json_t *c0 = json_array_get(json_object_get(ta, "chunks"), 0);
    assert_int_equal(strlen(json_string_value(json_object_get(c0, "gcm_salt"))), 32);
    assert_int_equal(strlen(json_string_value(json_object_get(c0, "gcm_tags"))), 12 * 32);
    assert_null(json_object_get(c0, "aes_gcm"));
    assert_null(json_object_get(c0, "xxh3_blocks"));
    c0 = json_array_get(
        json_object_get(json_object_get(json_object_get(root, "tensors"), "a"), "chunks"), 0);
    assert_int_equal(strlen(json_string_value(json_object_get(c0, "gcm_tags"))), 32);
    json_decref(root);
    size_t len;
    char *f = tu_read_file(tu_path(dir, "checkpoint-model-0000000-0000001.safetensors"), &len);
    assert_non_null(f);
    assert_false(memmem_found(f, len, s.big + 100, 64));
    assert_false(memmem_found(f, len, s.a, 16));
    /* names and shapes stay readable, and the file says it is encrypted */
    assert_true(memmem_found(f, len, "\"big\"", 5));
    assert_true(memmem_found(f, len, "\"shardsafe_cipher\":\"AES-256-GCM-STREAM\"", 39));
    free(f);

    /* a load with the key gives every tensor back */
    cstate_zero(&s);
    TU_OK(load_keyed(sp, s.st, g_key_file));
    cstate_assert(&s, 3.0f);
    /* without a key, or with another: a clear error, nothing read */
    cstate_zero(&s);
    assert_int_equal(load_keyed(sp, s.st, NULL), SHS_EKEY);
    TU_ASSERT_MSG_HAS("encrypted (AES-256-GCM-STREAM, key id ");
    TU_ASSERT_MSG_HAS("key required");
    assert_int_equal(load_keyed(sp, s.st, g_other_file), SHS_EKEY);
    TU_ASSERT_MSG_HAS("wrong key");
    float zero[12] = { 0 };
    assert_memory_equal(s.a, zero, sizeof zero);

    /* verify: with the key; without it the checksums pass and the key is
       asked for; a wrong one is named */
    TU_OK(shs_checkpoint_verify(dir, k_key, 32));
    assert_int_equal(shs_checkpoint_verify(dir, NULL, 0), SHS_EKEY);
    TU_ASSERT_MSG_HAS("checksums match");
    TU_ASSERT_MSG_HAS("key required");
    unsigned char other[32];
    TU_OK(shs_key_load(other, g_other_file, NULL));
    assert_int_equal(shs_checkpoint_verify(dir, other, 32), SHS_EKEY);
    TU_ASSERT_MSG_HAS("wrong key");
    assert_int_equal(shs_checkpoint_verify(dir, k_key, 16), SHS_EKEY);

    /* an unencrypted checkpoint loads with a key configured through
       load_path (pretrained weights); verify with a key refuses it: the
       key authenticates nothing in it (docs/encryption.md, downgrades) */
    char *plain = tu_subdir("rt-plain");
    cstate_free(&s);
    cstate_make(&s, 3.0f);
    TU_OK(save_keyed(plain, s.st, 5, NULL, NULL, 0));
    cstate_zero(&s);
    TU_OK(load_keyed(plain, s.st, g_key_file));
    cstate_assert(&s, 3.0f);
    assert_int_equal(shs_checkpoint_verify(tu_step_dir(plain, 5), k_key, 32), SHS_EKEY);
    TU_ASSERT_MSG_HAS("not encrypted, but a key was given");
    TU_OK(shs_checkpoint_verify(tu_step_dir(plain, 5), NULL, 0));
    tu_rmtree(plain);
    free(plain);
    cstate_free(&s);
    tu_rmtree(sp);
    free(sp);
}

static void test_read_api(void **state)
{
    (void)state;
    char *sp = tu_subdir("api");
    cstate s;
    cstate_make(&s, 7.0f);
    TU_OK(save_keyed(sp, s.st, 2, g_key_file, NULL, 0));
    size_t ti;
    float box[6];
    /* unkeyed: opens (names and shapes), every read asks for the key */
    shs_checkpoint *ck = NULL;
    TU_OK(shs_checkpoint_open(&ck, sp, NULL));
    assert_int_equal(shs_checkpoint_encrypted(ck), 1);
    assert_int_equal(strlen(shs_checkpoint_key_id(ck)), 16);
    TU_OK(shs_checkpoint_find(&ti, ck, "a"));
    assert_int_equal(shs_checkpoint_tensor(ck, ti)->shape[1], 3);
    assert_int_equal(shs_checkpoint_read(ck, ti, NULL, NULL, SHS_F32, s.a, sizeof s.a), SHS_EKEY);
    TU_ASSERT_MSG_HAS("key required");
    shs_checkpoint_free(ck);
    /* a wrong key fails the open */
    unsigned char other[32];
    TU_OK(shs_key_load(other, g_other_file, NULL));
    shs_checkpoint_open_opts o = SHS_CHECKPOINT_OPEN_OPTS_INIT;
    o.key = other;
    o.key_len = 32;
    assert_int_equal(shs_checkpoint_open(&ck, sp, &o), SHS_EKEY);
    TU_ASSERT_MSG_HAS("wrong key");
    assert_null(ck);
    o.key_len = 31;
    assert_int_equal(shs_checkpoint_open(&ck, sp, &o), SHS_EKEY);
    /* the key: whole tensors, a box inside one (only the segments it
       touches are decrypted), a dtype conversion, mapped and with pread */
    for (int nommap = 0; nommap < 2; nommap++) {
        unsigned char key[32];
        memcpy(key, k_key, 32);
        o.key = key;
        o.key_len = 32;
        o.flags = nommap ? SHS_CHECKPOINT_OPEN_NO_MMAP : 0;
        TU_OK(shs_checkpoint_open(&ck, sp, &o));
        memset(key, 0, sizeof key); /* the handle keeps its own copy */
        TU_OK(shs_checkpoint_find(&ti, ck, "b"));
        float whole[12];
        TU_OK(shs_checkpoint_read(ck, ti, NULL, NULL, SHS_F32, whole, sizeof whole));
        assert_memory_equal(whole, s.b, sizeof whole);
        uint64_t st[2] = { 1, 1 }, n[2] = { 3, 2 };
        TU_OK(shs_checkpoint_read(ck, ti, st, n, SHS_F32, box, sizeof box));
        for (int r = 0; r < 3; r++)
            for (int c = 0; c < 2; c++)
                assert_true(box[r * 2 + c] == s.b[(1 + r) * 3 + 1 + c]);
        uint16_t half[6];
        TU_OK(shs_checkpoint_read(ck, ti, st, n, SHS_BF16, half, sizeof half));
        assert_int_equal(half[0], shs_f32_to_bf16(s.b[4]));
        TU_OK(shs_checkpoint_find(&ti, ck, "big"));
        uint64_t bs[2] = { 500, 7 }, bn[2] = { 2, 3 };
        TU_OK(shs_checkpoint_read(ck, ti, bs, bn, SHS_F32, box, sizeof box));
        assert_true(box[4] == s.big[501 * (BIG / 1024) + 8]);
        /* blobs are not encrypted: read as before */
        char rng[7];
        TU_OK(shs_checkpoint_read_blob(ck, 0, rng, sizeof rng));
        assert_memory_equal(rng, "seed-42", 7);
        shs_checkpoint_free(ck);
    }
    /* a data file alone (no metadata.json: no salts, no tags), through
       the read API and the file API */
    char *one = tu_path_dup(tu_step_dir(sp, 2), "checkpoint-model-0000000-0000001.safetensors");
    TU_OK(shs_checkpoint_open(&ck, one, NULL));
    TU_OK(shs_checkpoint_find(&ti, ck, "a"));
    for (int again = 0; again < 2; again++) { /* the refusal is not cached away */
        assert_int_equal(shs_checkpoint_read(ck, ti, NULL, NULL, SHS_F32, s.a, sizeof s.a),
                         SHS_EKEY);
        TU_ASSERT_MSG_HAS("without the metadata.json");
    }
    shs_checkpoint_free(ck);
    for (int nommap = 0; nommap < 2; nommap++) {
        shs_file *f = NULL;
        shs_open_opts fo = SHS_OPEN_OPTS_INIT;
        fo.flags = nommap ? SHS_OPEN_NO_MMAP : 0;
        TU_OK(shs_file_open(&f, one, &fo));
        TU_OK(shs_file_find(&ti, f, "a"));
        assert_int_equal(shs_file_tensor(f, ti)->nbytes, sizeof s.a); /* names and shapes */
        assert_null(shs_file_tensor_data(f, ti));
        assert_int_equal(shs_file_read(f, ti, s.a, sizeof s.a), SHS_EKEY);
        TU_ASSERT_MSG_HAS("its tensors are ciphertext");
        uint64_t st[2] = { 0, 0 }, n[2] = { 1, 1 };
        assert_int_equal(shs_file_read_slice(f, ti, st, n, s.a, sizeof s.a), SHS_EKEY);
        shs_file_free(f);
    }
    /* a box read decrypts only the segments it touches: a byte changed in
       the first segment of "big" (12 of them) fails a read of the whole
       tensor, not one of rows 500-501 (segment 5) */
    const char *dir = tu_step_dir(sp, 2);
    size_t b0, b1;
    chunk_range(dir, "big", &b0, &b1);
    flip_byte(dir, b0 + 10);
    o.key = k_key;
    o.flags = 0;
    TU_OK(shs_checkpoint_open(&ck, sp, &o));
    TU_OK(shs_checkpoint_find(&ti, ck, "big"));
    uint64_t bs[2] = { 500, 7 }, bn[2] = { 2, 3 };
    TU_OK(shs_checkpoint_read(ck, ti, bs, bn, SHS_F32, box, sizeof box));
    assert_true(box[4] == s.big[501 * (BIG / 1024) + 8]);
    uint64_t bs0[2] = { 0, 7 };
    assert_int_equal(shs_checkpoint_read(ck, ti, bs0, bn, SHS_F32, box, sizeof box), SHS_ECHECKSUM);
    TU_ASSERT_MSG_HAS("segment 0 of 12");
    assert_int_equal(shs_checkpoint_read(ck, ti, NULL, NULL, SHS_F32, s.big, BIG * sizeof(float)),
                     SHS_ECHECKSUM);
    shs_checkpoint_free(ck);
    free(one);
    cstate_free(&s);
    tu_rmtree(sp);
    free(sp);
}

static void test_async_env(void **state)
{
    (void)state;
    char *sp = tu_subdir("async");
    cstate s;
    cstate_make(&s, 11.0f);
    setenv("SHS_TEST_KEY", k_key_hex, 1);
    TU_OK(save_keyed(sp, s.st, 9, NULL, "SHS_TEST_KEY", 1));
    cstate_zero(&s);
    TU_OK(load_keyed(sp, s.st, g_key_file)); /* the same key from a file */
    cstate_assert(&s, 11.0f);
    /* the variable unset: the manager refuses at create */
    unsetenv("SHS_TEST_KEY");
    assert_int_equal(save_keyed(sp, s.st, 10, NULL, "SHS_TEST_KEY", 1), SHS_EKEY);
    TU_ASSERT_MSG_HAS("SHS_TEST_KEY (the encryption key) is not set");
    /* a missing key file too, and the config rules */
    assert_int_equal(save_keyed(sp, s.st, 10, tu_path(sp, "nokey"), NULL, 0), SHS_EKEY);
    TU_ASSERT_MSG_HAS("nokey");
    assert_int_equal(save_keyed(sp, s.st, 10, g_key_file, "SHS_TEST_KEY", 0), SHS_ECONFIG);
    TU_ASSERT_MSG_HAS("set one, not both");
    shs_config c;
    tu_cfg_saving(&c, sp);
    TU_OK(shs_config_set(&c, "encrypt_key_file", g_key_file));
    TU_OK(shs_config_set(&c, "incremental", "true"));
    shs_manager *m = NULL;
    assert_int_equal(shs_manager_create(&m, &c, s.st), SHS_ECONFIG);
    TU_ASSERT_MSG_HAS("incremental cannot be combined with encryption");
    shs_config_release(&c);
    assert_int_equal(tu_tracker_step(sp), 9);
    cstate_free(&s);
    tu_rmtree(sp);
    free(sp);
}

/* ---- two ranks as threads, a tensor split by rows ---- */

typedef struct tc_rank {
    tcomm tc; /* threadcomm.h, with point-to-point (load_balanced) */
    int rc;
    char msg[512];
    const char *key_file;
    int async;
    int swapped; /* load only, the other rank's rows, load_balanced */
} tc_rank;

static const char *g_rank_sp;
static const uint64_t k_gshape[2] = { 4, 3 };

static void *rank_main(void *arg)
{
    tc_rank *r = arg;
    int rank = r->tc.rank, holds = r->swapped ? 1 - rank : rank;
    shs_comm *comm = NULL;
    shs_state *st = NULL;
    float rows[6], got[6];
    uint64_t shape[2] = { 2, 3 }, off[2] = { (uint64_t)(2 * holds), 0 };
    for (int i = 0; i < 6; i++)
        rows[i] = r->swapped ? 0.0f : (float)(100 * rank + i);
    if (shs_comm_create(&comm, rank, 2, &k_tops, &r->tc) != SHS_OK || shs_state_create(&st) < 0)
        abort();
    shs_tensor_spec w = SHS_TENSOR_SPEC_INIT;
    w.name = "w";
    w.ndim = 2;
    w.shape = shape;
    w.global_shape = k_gshape;
    w.global_offset = off;
    w.data = rows;
    shs_config c;
    tu_cfg_saving(&c, g_rank_sp);
    c.async_save = r->async;
    c.encrypt_key_file = r->key_file;
    c.load_balanced = r->swapped;
    shs_manager *m = NULL;
    shs_progress p = tu_prog(4);
    int rc = shs_state_add_tensor(st, &w);
    if (rc == SHS_OK)
        rc = shs_manager_create_comm(&m, &c, st, comm);
    if (rc == SHS_OK && r->swapped) {
        /* every saved chunk is read once, decrypted, and sent to the
           rank that holds those rows now */
        shs_progress q = tu_prog(0);
        shs_load_result res = SHS_LOAD_RESULT_INIT;
        rc = shs_manager_load(&res, m, &q);
        for (int i = 0; rc == SHS_OK && i < 6; i++)
            if (rows[i] != (float)(100 * holds + i))
                rc = SHS_ECORRUPT;
        goto done;
    }
    if (rc == SHS_OK)
        rc = shs_manager_save(m, &p, 0);
    if (rc == SHS_OK)
        rc = shs_manager_wait(m);
    if (rc == SHS_OK) {
        /* load back into another buffer: each rank its own rows */
        memcpy(got, rows, sizeof got);
        memset(rows, 0, sizeof rows);
        shs_progress q = tu_prog(0);
        shs_load_result res = SHS_LOAD_RESULT_INIT;
        rc = shs_manager_load(&res, m, &q);
        if (rc == SHS_OK && memcmp(got, rows, sizeof got) != 0)
            rc = SHS_ECORRUPT;
    }
done:
    r->rc = rc;
    snprintf(r->msg, sizeof r->msg, "%s", rc ? shs_last_error() : "");
    shs_manager_free(m);
    shs_comm_free(comm);
    shs_state_free(st);
    return NULL;
}

static void run_ranks(tc_rank *r, const char *key0, const char *key1, int async, int swapped)
{
    tshared sh;
    tshared_init(&sh, 2, 1);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        memset(&r[i], 0, sizeof r[i]);
        r[i].tc = (tcomm){ &sh, i };
        r[i].key_file = i ? key1 : key0;
        r[i].async = async;
        r[i].swapped = swapped;
        assert_int_equal(pthread_create(&th[i], NULL, rank_main, &r[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(tshared_destroy(&sh), 0); /* every message was received */
}

static void test_two_ranks(void **state)
{
    (void)state;
    alarm(120); /* a deadlock fails the test instead of hanging it */
    for (int async = 0; async < 2; async++) {
        char *sp = tu_subdir("ranks");
        g_rank_sp = sp;
        tc_rank r[2];
        run_ranks(r, g_key_file, g_key_file, async, 0);
        for (int i = 0; i < 2; i++)
            if (r[i].rc)
                fail_msg("rank %d: %s", i, r[i].msg);
        /* load_balanced: each rank now holds the other's rows */
        run_ranks(r, g_key_file, g_key_file, async, 1);
        for (int i = 0; i < 2; i++)
            if (r[i].rc)
                fail_msg("balanced load, rank %d: %s", i, r[i].msg);
        run_ranks(r, g_other_file, g_other_file, async, 1);
        assert_int_equal(r[0].rc, SHS_EKEY);
        assert_int_equal(r[1].rc, SHS_EKEY);
        /* one process reads the whole tensor back through the read API */
        shs_checkpoint *ck;
        shs_checkpoint_open_opts o = SHS_CHECKPOINT_OPEN_OPTS_INIT;
        o.key = k_key;
        o.key_len = 32;
        TU_OK(shs_checkpoint_open(&ck, sp, &o));
        assert_int_equal(shs_checkpoint_world_size(ck), 2);
        float all[12];
        TU_OK(shs_checkpoint_read(ck, 0, NULL, NULL, SHS_F32, all, sizeof all));
        for (int i = 0; i < 12; i++)
            assert_true(all[i] == (float)(100 * (i / 6) + i % 6));
        shs_checkpoint_free(ck);
        TU_OK(shs_checkpoint_verify(tu_step_dir(sp, 4), k_key, 32));
        /* ranks with different keys: the save fails on both, nothing
           committed */
        run_ranks(r, g_key_file, g_other_file, async, 0);
        assert_int_equal(r[0].rc, SHS_EKEY);
        assert_int_equal(r[1].rc, SHS_EKEY);
        if (!strstr(r[0].msg, "same key"))
            fail_msg("rank 0: %s", r[0].msg);
        /* rank 1 cannot read its key: the create fails on both ranks */
        char *missing = tu_path_dup(sp, "no-such-key");
        run_ranks(r, g_key_file, missing, async, 0);
        free(missing);
        assert_int_equal(r[1].rc, SHS_EKEY);
        if (r[0].rc >= 0 || !strstr(r[0].msg, "rank 1") || !strstr(r[0].msg, "no-such-key"))
            fail_msg("rank 0: %d %s", r[0].rc, r[0].msg);
        tu_rmtree(sp);
        free(sp);
    }
    alarm(0);
}

/* ---- a write failing at every point of an encrypted save ---- */

static long g_pwrite_left; /* writes until the failure; < 0: never */

static ssize_t failing_pwrite(int fd, const void *b, size_t n, off_t o)
{
    if (g_pwrite_left >= 0 && g_pwrite_left-- == 0) {
        errno = ENOSPC;
        return -1;
    }
    return shs__io_posix.pwrite(fd, b, n, o);
}

static void test_write_failures(void **state)
{
    (void)state;
    cstate s;
    cstate_make(&s, 6.0f);
    long n, failed = 0;
    /* the big tensor's pieces are encrypted by a helper thread while this
       one writes: a failed write must stop it, and nothing is committed */
    for (n = 0;; n++) {
        char *sp = tu_subdir("wfail");
        shs__io_ops ops = shs__io_posix;
        ops.pwrite = failing_pwrite;
        g_pwrite_left = n;
        shs__io_set(&ops);
        int rc = save_keyed(sp, s.st, 2, g_key_file, NULL, 0);
        int hit = g_pwrite_left < 0;
        g_pwrite_left = -1;
        shs__io_set(NULL);
        if (!hit) {
            TU_OK(rc);
            tu_rmtree(sp);
            free(sp);
            break;
        }
        if (rc != SHS_ENOSPC)
            fail_msg("N=%ld: %d %s", n, rc, shs_last_error());
        failed++;
        assert_int_equal(tu_tracker_step(sp), -1);
        assert_int_equal(tu_count_leftovers(sp), 0);
        tu_rmtree(sp);
        free(sp);
    }
    print_message("encrypted save: %ld write failures, each ENOSPC, nothing committed\n", failed);
    assert_true(failed > 5);
    cstate_free(&s);
}

/* ---- every allocation of an encrypted save and load failed in turn ---- */

typedef struct oom_ctx {
    int load; /* 0: save, 1: load */
    char *sp;
    tu_small s;
} oom_ctx;

static void oom_before(void *arg)
{
    oom_ctx *x = arg;
    x->sp = tu_subdir("oom");
    tu_small_make(&x->s, 9.0f, 1);
    if (x->load)
        TU_OK(save_keyed(x->sp, x->s.st, 2, g_key_file, NULL, 0));
}

static int oom_run(void *arg)
{
    oom_ctx *x = arg;
    return x->load ? load_keyed(x->sp, x->s.st, g_key_file)
                   : save_keyed(x->sp, x->s.st, 2, g_key_file, NULL, 0);
}

static void oom_after(void *arg, int rc)
{
    oom_ctx *x = arg;
    (void)rc;
    shs_state_free(x->s.st);
    tu_rmtree(x->sp);
    free(x->sp);
}

static void test_alloc_failures(void **state)
{
    (void)state;
    for (int op = 0; op < 2; op++) {
        oom_ctx x = { .load = op };
        tu_sweep sw = { op ? "encrypted load" : "encrypted save", oom_run, oom_before, oom_after,
                        &x };
        assert_true(tu_failalloc_sweep(&sw) > 0);
    }
}

/* merge and reshard take the key: an encrypted source needs it (and a v1
   option struct, which has no key, cannot pass one); merge writes plain
   files, reshard an output encrypted with the same key. */
static void test_tools(void **state)
{
    (void)state;
    char *sp = tu_subdir("tools");
    cstate s;
    cstate_make(&s, 3.0f);
    TU_OK(save_keyed(sp, s.st, 4, g_key_file, NULL, 0));
    unsigned char other[32];
    TU_OK(shs_key_load(other, g_other_file, NULL));

    /* merge */
    char *hf = tu_path_dup(tu_root, "tools-hf");
    shs_merge_opts mo = SHS_MERGE_OPTS_INIT;
    assert_int_equal(shs_merge(NULL, sp, hf, &mo), SHS_EKEY);
    TU_ASSERT_MSG_HAS("key required");
    assert_false(tu_path_exists(hf));
    mo.key = other;
    mo.key_len = 32;
    assert_int_equal(shs_merge(NULL, sp, hf, &mo), SHS_EKEY);
    TU_ASSERT_MSG_HAS("wrong key");
    mo.key = k_key;
    mo.version = 1; /* a caller built against version 1: no key fields */
    assert_int_equal(shs_merge(NULL, sp, hf, &mo), SHS_EKEY);
    assert_false(tu_path_exists(hf));
    mo.version = SHS_MERGE_OPTS_VERSION;
    TU_OK(shs_merge(NULL, sp, hf, &mo));
    shs_file *f = NULL;
    size_t ti;
    TU_OK(shs_file_open(&f, tu_path(hf, "model.safetensors"), NULL));
    assert_null(shs_file_metadata_get(f, "shardsafe_cipher")); /* plain */
    TU_OK(shs_file_find(&ti, f, "big"));
    assert_memory_equal(shs_file_tensor_data(f, ti), s.big, BIG * sizeof(float));
    TU_OK(shs_file_find(&ti, f, "b"));
    assert_memory_equal(shs_file_tensor_data(f, ti), s.b, sizeof s.b);
    shs_file_free(f);

    /* reshard */
    char *rs = tu_path_dup(tu_root, "tools-rs");
    char *dst = tu_path_dup(rs, "iteration_00000004");
    assert_int_equal(mkdir(rs, 0755), 0);
    shs_reshard_opts ro = SHS_RESHARD_OPTS_INIT;
    ro.world_size = 2;
    assert_int_equal(shs_reshard(NULL, sp, dst, NULL, &ro), SHS_EKEY);
    TU_ASSERT_MSG_HAS("key required");
    ro.key = other;
    ro.key_len = 32;
    assert_int_equal(shs_reshard(NULL, sp, dst, NULL, &ro), SHS_EKEY);
    TU_ASSERT_MSG_HAS("wrong key");
    ro.key = k_key;
    ro.version = 1;
    assert_int_equal(shs_reshard(NULL, sp, dst, NULL, &ro), SHS_EKEY);
    assert_false(tu_path_exists(dst));
    ro.version = SHS_RESHARD_OPTS_VERSION;
    TU_OK(shs_reshard(NULL, sp, dst, NULL, &ro));
    shs_checkpoint *ck = NULL, *src = NULL;
    TU_OK(shs_checkpoint_open(&ck, dst, NULL));
    TU_OK(shs_checkpoint_open(&src, sp, NULL));
    assert_int_equal(shs_checkpoint_world_size(ck), 2);
    assert_int_equal(shs_checkpoint_encrypted(ck), 1);
    assert_string_equal(shs_checkpoint_key_id(ck), shs_checkpoint_key_id(src));
    shs_checkpoint_free(src);
    shs_checkpoint_free(ck);
    assert_int_equal(shs_checkpoint_verify(dst, NULL, 0), SHS_EKEY);
    TU_OK(shs_checkpoint_verify(dst, k_key, 32));
    cstate_zero(&s);
    assert_int_equal(load_keyed(rs, s.st, NULL), SHS_EKEY);
    TU_OK(load_keyed(rs, s.st, g_key_file));
    cstate_assert(&s, 3.0f);

    /* a plain source with a key: refused (the key would authenticate
       nothing: an encrypted source stripped of its encryption looks like
       this); without the key, a plain output */
    char *plain = tu_subdir("tools-plain");
    char *pdst = tu_path_dup(rs, "iteration_00000009");
    TU_OK(save_keyed(plain, s.st, 9, NULL, NULL, 0));
    assert_int_equal(shs_reshard(NULL, plain, pdst, NULL, &ro), SHS_EKEY);
    TU_ASSERT_MSG_HAS("not encrypted, but a key was given");
    assert_false(tu_path_exists(pdst));
    char *hf2 = tu_path_dup(tu_root, "tools-hf2");
    assert_int_equal(shs_merge(NULL, plain, hf2, &mo), SHS_EKEY);
    assert_false(tu_path_exists(hf2));
    free(hf2);
    ro.key = NULL;
    ro.key_len = 0;
    TU_OK(shs_reshard(NULL, plain, pdst, NULL, &ro));
    TU_OK(shs_checkpoint_open(&ck, pdst, NULL));
    assert_int_equal(shs_checkpoint_encrypted(ck), 0);
    shs_checkpoint_free(ck);

    cstate_free(&s);
    tu_rmtree(sp);
    tu_rmtree(plain);
    tu_rmtree(hf);
    tu_rmtree(rs);
    free(sp);
    free(plain);
    free(hf);
    free(rs);
    free(dst);
    free(pdst);
}

/* ---- opening a chunk (crypt.c, crypt_segs.c), and authenticating it
   alone (verify: decrypted into scratch buffers, version 4 on two
   threads) ---- */

/* One chunk of n bytes of tensor "w" (U8, 1-D) sealed as `version`
   writes it (4: by the save's own shs__seal_chunk; 3: one GCM message,
   as the releases before wrote it), and what it takes to open it. */
typedef struct sealed {
    shs__key key;
    shs__meta m;
    shs__mfile f;
    shs__mtensor t;
    shs__mchunk c;
    uint64_t gshape[1], off[1], shape[1];
    unsigned char *plain, *ct;
    uint64_t n;
} sealed;

static int copy_sink(void *ctx, uint64_t at, const void *data, size_t len)
{
    memcpy((unsigned char *)ctx + at, data, len);
    return SHS_OK;
}

/* Version 3's writer, for the tests: one GCM message under a random
   nonce. */
static void seal_v3(sealed *x, const unsigned char *aad, size_t alen)
{
    int len = 0;
    unsigned char fin[16];
    assert_int_equal(RAND_bytes(x->c.nonce, 12), 1);
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    assert_non_null(ctx);
    assert_int_equal(EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, x->key.k, x->c.nonce), 1);
    assert_int_equal(EVP_EncryptUpdate(ctx, NULL, &len, aad, (int)alen), 1);
    if (x->n)
        assert_int_equal(EVP_EncryptUpdate(ctx, x->ct, &len, x->plain, (int)x->n), 1);
    assert_int_equal(EVP_EncryptFinal_ex(ctx, fin, &len), 1);
    assert_int_equal(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, x->c.tag), 1);
    EVP_CIPHER_CTX_free(ctx);
}

static void sealed_make(sealed *x, uint64_t n, int version)
{
    unsigned char aad[SHS__AAD_MAX];
    memset(x, 0, sizeof *x);
    TU_OK(shs__key_from_bytes(&x->key, k_key, 32));
    x->n = n;
    x->gshape[0] = x->shape[0] = n;
    x->f.name = "w.safetensors";
    x->m.f = &x->f;
    x->m.nf = 1;
    x->m.step = 7;
    x->m.version = version;
    x->m.segment = version >= 4 ? SHS__SEGMENT : 0;
    x->m.encrypted = 1;
    memcpy(x->m.key_id, x->key.id, sizeof x->m.key_id);
    memcpy(x->m.save_id, "0123456789abcdef", 17);
    x->t = (shs__mtensor){ .name = "w", .dtype = SHS_U8, .ndim = 1, .gshape = x->gshape };
    x->c.off = x->off;
    x->c.shape = x->shape;
    x->c.b1 = n;
    x->c.enc = 1;
    x->plain = malloc(n + 1);
    x->ct = malloc(n + 1);
    assert_non_null(x->plain);
    assert_non_null(x->ct);
    for (uint64_t i = 0; i < n; i++)
        x->plain[i] = (unsigned char)(i * 131 + (i >> 9) + 7);
    size_t alen = shs__crypt_aad(aad, x->m.save_id, "w", SHS_U8, 1, x->gshape, x->off, x->shape,
                                 x->m.step, x->m.segment);
    if (version < 4) {
        seal_v3(x, aad, alen);
    } else {
        unsigned char *ring = malloc(SHS__SEAL_RING * SHS__SEGMENT);
        assert_non_null(ring);
        TU_OK(shs__seal_chunk(&x->key, aad, alen, x->plain, n, ring, x->c.salt, &x->c.tags,
                              copy_sink, x->ct));
        x->c.ntags = shs__crypt_nsegs(n, SHS__SEGMENT);
        free(ring);
    }
    x->c.has_hash = 1;
    x->c.hash = shs__xxh3(x->ct, (size_t)n);
}

static void sealed_free(sealed *x)
{
    free(x->plain);
    free(x->ct);
    shs__free(x->c.tags);
}

static int all_bytes(const unsigned char *p, uint64_t n, unsigned char v)
{
    for (uint64_t i = 0; i < n; i++)
        if (p[i] != v)
            return 0;
    return 1;
}

static int open_w(sealed *x, const void *src, void *buf)
{
    return shs__crypt_open_chunk(&x->key, &x->m, "D", &x->t, &x->c, src, buf, x->n);
}

static int auth_w(sealed *x)
{
    return shs__crypt_auth_chunk(&x->key, &x->m, "D", &x->t, &x->c, x->ct, x->n);
}

#define SEG SHS__SEGMENT

/* Lengths around the 16-byte blocks and the segments: what was sealed
   opens to the same bytes, out of place and in place, and authenticates
   alone; version 4 has one tag per segment (an empty chunk one). */
static void test_open_lengths(void **state)
{
    (void)state;
    static const uint64_t lens[] = { 0,       1,           15,          16,
                                     17,      31,          33,          1000,
                                     SEG - 1, SEG,         SEG + 1,     SEG + 17,
                                     2 * SEG, 3 * SEG + 5, 5 * SEG + 9, 5 * SEG + 32 };
    for (int version = 3; version <= 4; version++)
        for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
            sealed x;
            sealed_make(&x, lens[k], version);
            if (version == 4)
                assert_int_equal(x.c.ntags, lens[k] ? (lens[k] + SEG - 1) / SEG : 1);
            unsigned char *buf = malloc(x.n + 1);
            assert_non_null(buf);
            memset(buf, 0x5a, x.n + 1);
            if (open_w(&x, x.ct, buf) != SHS_OK)
                fail_msg("v%d n=%llu: %s", version, (unsigned long long)x.n, shs_last_error());
            assert_memory_equal(buf, x.plain, x.n);
            assert_int_equal(buf[x.n], 0x5a);
            assert_true(x.n < 64 || memcmp(x.ct, x.plain, 64) != 0);
            memcpy(buf, x.ct, x.n);
            if (open_w(&x, buf, buf) != SHS_OK)
                fail_msg("v%d n=%llu in place: %s", version, (unsigned long long)x.n,
                         shs_last_error());
            assert_memory_equal(buf, x.plain, x.n);
            if (auth_w(&x) != SHS_OK)
                fail_msg("v%d n=%llu authenticated alone: %s", version, (unsigned long long)x.n,
                         shs_last_error());
            free(buf);
            sealed_free(&x);
        }
}

/* A changed byte anywhere (in any segment, in the last partial block), a
   changed tag, nonce or salt, place or key: opening leaves no plaintext
   (the buffer is wiped), authenticating alone refuses it. */
static void test_open_tampered(void **state)
{
    (void)state;
    static const uint64_t lens[] = { 40, 3 * SEG + 5 };
    for (int version = 3; version <= 4; version++)
        for (size_t k = 0; k < 2; k++) {
            sealed x;
            sealed_make(&x, lens[k], version);
            uint64_t n = x.n;
            unsigned char *buf = malloc(n + 1);
            assert_non_null(buf);
            const uint64_t at[] = { 0, n / 4, n / 2 - 1, n / 2, n * 3 / 4, n - 1 };
            for (size_t i = 0; i < sizeof at / sizeof *at; i++) {
                x.ct[at[i]] ^= 0x10;
                memset(buf, 0x5a, n);
                assert_int_equal(open_w(&x, x.ct, buf), SHS_ECHECKSUM);
                TU_ASSERT_MSG_HAS("does not authenticate");
                TU_ASSERT_MSG_HAS("D/w.safetensors: tensor 'w'");
                if (version == 4) {
                    char seg[64];
                    snprintf(seg, sizeof seg, "segment %llu of %llu",
                             (unsigned long long)(at[i] / SEG), (unsigned long long)x.c.ntags);
                    TU_ASSERT_MSG_HAS(seg);
                }
                assert_true(all_bytes(buf, n, 0));
                memcpy(buf, x.ct, n);
                assert_int_equal(open_w(&x, buf, buf), SHS_ECHECKSUM);
                assert_true(all_bytes(buf, n, 0));
                assert_int_equal(auth_w(&x), SHS_ECHECKSUM);
                TU_ASSERT_MSG_HAS("does not authenticate");
                TU_ASSERT_MSG_HAS("D/w.safetensors: tensor 'w'");
                x.ct[at[i]] ^= 0x10;
            }
            /* a tag (v4: the last segment's), the nonce or the salt */
            unsigned char *fields[2] = { version == 4 ? x.c.tags + 16 * (x.c.ntags - 1) : x.c.tag,
                                         version == 4 ? x.c.salt : x.c.nonce };
            for (int f = 0; f < 2; f++) {
                fields[f][3] ^= 1;
                memset(buf, 0x5a, n);
                assert_int_equal(open_w(&x, x.ct, buf), SHS_ECHECKSUM);
                assert_true(all_bytes(buf, n, 0));
                assert_int_equal(auth_w(&x), SHS_ECHECKSUM);
                fields[f][3] ^= 1;
            }
            /* the step and the save id (in the AAD) */
            x.m.step++;
            assert_int_equal(open_w(&x, x.ct, buf), SHS_ECHECKSUM);
            assert_int_equal(auth_w(&x), SHS_ECHECKSUM);
            x.m.step--;
            x.m.save_id[0] ^= 1;
            assert_int_equal(auth_w(&x), SHS_ECHECKSUM);
            x.m.save_id[0] ^= 1;
            /* another key with the right id (only the tag can tell), no key */
            shs__key right = x.key;
            x.key.k[0] ^= 1;
            assert_int_equal(open_w(&x, x.ct, buf), SHS_ECHECKSUM);
            assert_int_equal(auth_w(&x), SHS_ECHECKSUM);
            x.key = right;
            assert_int_equal(shs__crypt_auth_chunk(NULL, &x.m, "D", &x.t, &x.c, x.ct, n), SHS_EKEY);
            TU_ASSERT_MSG_HAS("key required");
            /* and untouched, it opens */
            TU_OK(auth_w(&x));
            TU_OK(open_w(&x, x.ct, buf));
            assert_memory_equal(buf, x.plain, n);
            free(buf);
            sealed_free(&x);
        }
}

static void swap_mem(unsigned char *a, unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char t = a[i];
        a[i] = b[i];
        b[i] = t;
    }
}

/* Version 4's STREAM: segments swapped (with their tags or without),
   dropped from the end, a segment added, the segment size changed: each
   fails to authenticate, or the tag table no longer fits the chunk. */
static void test_segments(void **state)
{
    (void)state;
    sealed x;
    sealed_make(&x, 4 * SEG + 100, 4);
    unsigned char *buf = malloc(x.n + 1);
    assert_non_null(buf);
    /* segments 1 and 2 swapped, tags along, and without */
    swap_mem(x.ct + SEG, x.ct + 2 * SEG, SEG);
    assert_int_equal(auth_w(&x), SHS_ECHECKSUM);
    swap_mem(x.c.tags + 16, x.c.tags + 32, 16);
    assert_int_equal(auth_w(&x), SHS_ECHECKSUM);
    TU_ASSERT_MSG_HAS("segment 1 of 5");
    assert_int_equal(open_w(&x, x.ct, buf), SHS_ECHECKSUM);
    swap_mem(x.ct + SEG, x.ct + 2 * SEG, SEG);
    swap_mem(x.c.tags + 16, x.c.tags + 32, 16);
    TU_OK(auth_w(&x));
    /* the stream cut after a whole segment (the chunk's shape, in the
       AAD, kept): the new last one was not sealed as the last (its flag
       is in its nonce) */
    uint64_t n = x.n;
    x.n = x.c.b1 = 3 * SEG;
    x.c.ntags = 3;
    assert_int_equal(auth_w(&x), SHS_ECHECKSUM);
    TU_ASSERT_MSG_HAS("segment 2 of 3");
    /* a segment more than the tags: the table does not fit */
    x.n = x.c.b1 = n;
    x.c.ntags = 4;
    assert_int_equal(auth_w(&x), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("4 segment tags for");
    x.c.ntags = 5;
    TU_OK(auth_w(&x));
    /* the segment size doubled: the table no longer fits */
    x.m.segment = 2 * SEG;
    assert_int_equal(auth_w(&x), SHS_ECORRUPT);
    x.m.segment = SEG;
    sealed_free(&x);
    /* a chunk of one segment under any size: the size is in the AAD */
    sealed_make(&x, 1000, 4);
    x.m.segment = 2 * SEG;
    assert_int_equal(auth_w(&x), SHS_ECHECKSUM);
    x.m.segment = SEG;
    TU_OK(auth_w(&x));
    /* the salt of another chunk (each chunk has a key of its own) */
    sealed y;
    sealed_make(&y, 1000, 4);
    memcpy(x.c.salt, y.c.salt, 16);
    assert_int_equal(auth_w(&x), SHS_ECHECKSUM);
    sealed_free(&y);
    sealed_free(&x);
    free(buf);
}

/* A box read decrypts only the segments it touches: the others are left
   as they were in the buffer, and damage in them goes unseen; damage in a
   touched one fails the window, which is wiped. */
static void test_open_segments(void **state)
{
    (void)state;
    sealed x;
    sealed_make(&x, 6 * SEG + 10, 4);
    unsigned char *buf = malloc(x.n + 1);
    assert_non_null(buf);
    uint8_t marks[4] = { 1, 0, 1, 1 }; /* segments 2, 4 and 5 of [2, 6) */
    memset(buf, 0x5a, x.n);
    x.ct[3 * SEG + 7] ^= 1; /* segment 3: not touched */
    TU_OK(shs__crypt_open_segments(&x.key, &x.m, "D", &x.t, &x.c, 2, 4, marks, x.ct + 2 * SEG,
                                   buf + 2 * SEG));
    assert_memory_equal(buf + 2 * SEG, x.plain + 2 * SEG, SEG);
    assert_true(all_bytes(buf + 3 * SEG, SEG, 0x5a));
    assert_memory_equal(buf + 4 * SEG, x.plain + 4 * SEG, 2 * SEG);
    assert_true(all_bytes(buf, 2 * SEG, 0x5a));
    /* in place, the last (short) segment alone */
    uint8_t last = 1;
    memcpy(buf + 6 * SEG, x.ct + 6 * SEG, 10);
    TU_OK(shs__crypt_open_segments(&x.key, &x.m, "D", &x.t, &x.c, 6, 1, &last, buf + 6 * SEG,
                                   buf + 6 * SEG));
    assert_memory_equal(buf + 6 * SEG, x.plain + 6 * SEG, 10);
    /* damage in a touched segment: the window is wiped */
    x.ct[5 * SEG + 1] ^= 1;
    memset(buf, 0x5a, x.n);
    assert_int_equal(shs__crypt_open_segments(&x.key, &x.m, "D", &x.t, &x.c, 2, 4, marks,
                                              x.ct + 2 * SEG, buf + 2 * SEG),
                     SHS_ECHECKSUM);
    TU_ASSERT_MSG_HAS("segment 5 of 7");
    assert_true(all_bytes(buf + 2 * SEG, 4 * SEG, 0));
    assert_true(all_bytes(buf, 2 * SEG, 0x5a));
    /* out of range, no key */
    assert_int_equal(shs__crypt_open_segments(&x.key, &x.m, "D", &x.t, &x.c, 6, 2, NULL, x.ct, buf),
                     SHS_ECORRUPT);
    assert_int_equal(shs__crypt_open_segments(NULL, &x.m, "D", &x.t, &x.c, 0, 1, NULL, x.ct, buf),
                     SHS_EKEY);
    free(buf);
    sealed_free(&x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_sources),    cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_read_api),       cmocka_unit_test(test_async_env),
        cmocka_unit_test(test_two_ranks),      cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_write_failures), cmocka_unit_test(test_tools),
        cmocka_unit_test(test_open_lengths),   cmocka_unit_test(test_open_tampered),
        cmocka_unit_test(test_segments),       cmocka_unit_test(test_open_segments),
    };
    return TU_RUN_GROUP(tests, setup, teardown);
}
