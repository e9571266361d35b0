/*
 * crypt_fixture.h -- what the encryption tests share (test_crypt.c,
 * test_crypt_tamper.c): two key files, a state with a tensor large enough
 * for several pieces of the save's encryption pipeline, saving and loading
 * it with a key through the manager, and editing metadata.json (re-sealed,
 * as the writer seals it) so that only the intended change remains.
 */
#ifndef SHS_CRYPT_FIXTURE_H
#define SHS_CRYPT_FIXTURE_H

#include "testutil.h"

#include "crypto/crypt.h"
#include "common/hash.h"
#include "store/io.h"
#include "source/meta.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static const unsigned char k_key[32] = { 1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                         12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                                         23, 24, 25, 26, 27, 28, 29, 30, 31, 32 };

static char *g_key_file;   /* k_key, raw */
static char *g_other_file; /* another key */

static inline int setup(void **state)
{
    int rc = tu_setup_root(state);
    if (rc)
        return rc;
    unsigned char other[32];
    for (int i = 0; i < 32; i++)
        other[i] = (unsigned char)(200 + i);
    g_key_file = tu_path_dup(tu_root, "key.bin");
    g_other_file = tu_path_dup(tu_root, "other.bin");
    if (tu_write_file(g_key_file, k_key, 32) || tu_write_file(g_other_file, other, 32))
        return -1;
    return 0;
}

static inline int teardown(void **state)
{
    free(g_key_file);
    free(g_other_file);
    return tu_teardown_root(state);
}


/* ---- a state of two same-shaped tensors, one large enough for several
   writer pieces ---- */

#define BIG (3u << 20) /* floats: 12 MiB, three 4 MiB pieces */

typedef struct cstate {
    shs_state *st;
    float a[12], b[12], *big, opt[12];
} cstate;

static inline void cstate_make(cstate *s, float base)
{
    memset(s, 0, sizeof *s);
    static const uint64_t shp[2] = { 4, 3 }, bigshape[2] = { 1024, BIG / 1024 };
    s->big = malloc(BIG * sizeof(float));
    assert_non_null(s->big);
    for (int i = 0; i < 12; i++) {
        s->a[i] = base + (float)i;
        s->b[i] = -base - (float)i;
        s->opt[i] = base * 2 + (float)i;
    }
    for (size_t i = 0; i < BIG; i++)
        s->big[i] = base + (float)(i % 1000);
    TU_OK(shs_state_create(&s->st));
    tu_add_tensor(s->st, "a", SHS_KIND_MODEL, SHS_F32, 2, shp, s->a, NULL);
    tu_add_tensor(s->st, "b", SHS_KIND_MODEL, SHS_F32, 2, shp, s->b, NULL);
    tu_add_tensor(s->st, "big", SHS_KIND_MODEL, SHS_F32, 2, bigshape, s->big, NULL);
    tu_add_tensor(s->st, "opt.a", SHS_KIND_OPTIMIZER, SHS_F32, 2, shp, s->opt, NULL);
    TU_OK(shs_state_set_blob(s->st, "rng", "seed-42", 7));
}

static inline void cstate_free(cstate *s)
{
    shs_state_free(s->st);
    free(s->big);
}

static inline void cstate_zero(cstate *s)
{
    memset(s->a, 0, sizeof s->a);
    memset(s->b, 0, sizeof s->b);
    memset(s->opt, 0, sizeof s->opt);
    memset(s->big, 0, BIG * sizeof(float));
}

static inline void cstate_assert(const cstate *s, float base)
{
    cstate want;
    cstate_make(&want, base);
    assert_memory_equal(s->a, want.a, sizeof s->a);
    assert_memory_equal(s->b, want.b, sizeof s->b);
    assert_memory_equal(s->opt, want.opt, sizeof s->opt);
    assert_memory_equal(s->big, want.big, BIG * sizeof(float));
    cstate_free(&want);
}

/* Save st at `step` into sp with the key from `file` or `env`. */
static inline int save_keyed(const char *sp, shs_state *st, int64_t step, const char *file,
                             const char *env, int async)
{
    shs_config c;
    tu_cfg_saving(&c, sp);
    c.encrypt_key_file = file ? file : "";
    c.encrypt_key_env = env ? env : "";
    c.async_save = async;
    shs_manager *m = NULL;
    int rc = shs_manager_create(&m, &c, st);
    if (rc < 0)
        return rc;
    shs_progress p = tu_prog(step);
    rc = shs_manager_save(m, &p, 0);
    if (rc == SHS_OK)
        rc = shs_manager_wait(m);
    shs_manager_free(m);
    return rc;
}

/* A manager's load into st with the key from `file` (NULL: none): the
   save path `save_path` resumed (allow: allow_unencrypted_resume), or
   with save_path NULL, `load_path` (its newest step) loaded.  SHS_EINVAL
   when the load found nothing at the path it was given. */
static inline int manager_load(const char *save_path, const char *load_path, shs_state *st,
                               const char *file, int allow)
{
    shs_config c;
    if (save_path) {
        tu_cfg_saving(&c, save_path);
    } else {
        shs_config_init(&c);
        c.enable_save = 0;
        c.load_path = load_path;
    }
    c.encrypt_key_file = file ? file : "";
    c.allow_unencrypted_resume = allow;
    shs_manager *m = NULL;
    int rc = shs_manager_create(&m, &c, st);
    if (rc < 0)
        return rc;
    shs_progress p = tu_prog(0);
    shs_load_result r = SHS_LOAD_RESULT_INIT;
    rc = shs_manager_load(&r, m, &p);
    if (rc == SHS_OK && r.source != (save_path ? SHS_LOAD_SAVE_PATH : SHS_LOAD_LOAD_PATH))
        rc = SHS_EINVAL;
    shs_manager_free(m);
    return rc;
}

/* Load sp (its newest step) into st with the key from `file`. */
static inline int load_keyed(const char *sp, shs_state *st, const char *file)
{
    return manager_load(NULL, sp, st, file, 0);
}

/* The read API's handle of `path` opened with k_key (flags:
   SHS_CKPT_OPEN_*). */
static inline shs_checkpoint *open_keyed(const char *path, unsigned flags)
{
    shs_checkpoint *ck = NULL;
    shs_checkpoint_open_opts o = SHS_CHECKPOINT_OPEN_OPTS_INIT;
    o.key = k_key;
    o.key_len = 32;
    o.flags = flags;
    TU_OK(shs_checkpoint_open(&ck, path, &o));
    return ck;
}

static inline int memmem_found(const void *hay, size_t n, const void *needle, size_t k)
{
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp((const char *)hay + i, needle, k) == 0)
            return 1;
    return 0;
}


/* ---- tampering ---- */

/* Edit metadata.json of dir with `fn` and seal it again with its
   unkeyed checksum, as anyone can (so only the edit is different; the
   MAC of a version-4 file, where it stays, no longer matches). */
static inline void edit_meta(const char *dir, void (*fn)(json_t *root, void *ctx), void *ctx)
{
    const char *mp = tu_path(dir, "metadata.json");
    json_error_t je;
    json_t *root = json_load_file(mp, 0, &je);
    assert_non_null(root);
    fn(root, ctx);
    /* a member added stays before the MAC, as the writer puts it */
    json_t *mac = json_incref(json_object_get(root, "metadata_mac"));
    if (mac && json_object_del(root, "metadata_mac") == 0)
        json_object_set_new(root, "metadata_mac", mac);
    tu_meta_reseal(mp, root);
    json_decref(root);
}

/* The same, and authenticated again under k_key, as only a holder of the
   key can: what is left to catch it is the chunks' own tags. */
static inline void edit_meta_keyed(const char *dir, void (*fn)(json_t *root, void *ctx), void *ctx)
{
    const char *mp = tu_path(dir, "metadata.json");
    json_error_t je;
    json_t *root = json_load_file(mp, 0, &je);
    assert_non_null(root);
    fn(root, ctx);
    json_object_del(root, "metadata_mac");
    json_object_del(root, "metadata_xxh3");
    char *plain = json_dumps(root, JSON_COMPACT);
    assert_non_null(plain);
    shs__key k;
    TU_OK(shs__key_from_bytes(&k, k_key, 32));
    char *sealed = NULL;
    size_t len = 0;
    TU_OK(shs__crypt_meta_seal(&sealed, &len, plain, strlen(plain), &k));
    free(plain);
    assert_int_equal(tu_write_file(mp, sealed, len), 0);
    shs__free(sealed);
    json_decref(root);
}

/* Load sp (its newest step) and verify dir with k_key: both fail with
   `rc`, the message holding `needle`. */
static inline void expect_refused(const char *sp, shs_state *st, const char *dir, int rc,
                                  const char *needle)
{
    int got = load_keyed(sp, st, g_key_file);
    if (got != rc || !strstr(shs_last_error(), needle))
        fail_msg("load: %d (want %d) %s", got, rc, shs_last_error());
    got = shs_checkpoint_verify(dir, k_key, 32);
    if (got != rc || !strstr(shs_last_error(), needle))
        fail_msg("verify: %d (want %d) %s", got, rc, shs_last_error());
}

static inline json_t *chunk_of(json_t *root, const char *tensor)
{
    return json_array_get(
        json_object_get(json_object_get(json_object_get(root, "tensors"), tensor), "chunks"), 0);
}

typedef struct mend_ctx {
    const char *dir;
    const char *tensor;
} mend_ctx;

/* The chunk's "xxh3" recomputed from the bytes now in its file. */
static inline void mend_hash(json_t *root, void *arg)
{
    mend_ctx *x = arg;
    json_t *c = chunk_of(root, x->tensor);
    json_t *files = json_object_get(root, "files");
    const char *fname = json_string_value(json_object_get(
        json_array_get(files, (size_t)json_integer_value(json_object_get(c, "file"))), "name"));
    json_t *br = json_object_get(c, "byte_range");
    size_t b0 = (size_t)json_integer_value(json_array_get(br, 0));
    size_t b1 = (size_t)json_integer_value(json_array_get(br, 1));
    size_t len;
    char *data = tu_read_file(tu_path(x->dir, fname), &len);
    assert_non_null(data);
    char hx[17];
    shs__hex64(hx, shs__xxh3(data + b0, b1 - b0));
    free(data);
    json_object_set_new(c, "xxh3", json_string(hx));
}

/* Byte range of `tensor`'s chunk in the model file of dir. */
static inline void chunk_range(const char *dir, const char *tensor, size_t *b0, size_t *b1)
{
    json_error_t je;
    json_t *root = json_load_file(tu_path(dir, "metadata.json"), 0, &je);
    assert_non_null(root);
    json_t *br = json_object_get(chunk_of(root, tensor), "byte_range");
    *b0 = (size_t)json_integer_value(json_array_get(br, 0));
    *b1 = (size_t)json_integer_value(json_array_get(br, 1));
    json_decref(root);
}

#define MODEL_FILE "checkpoint-model-0000000-0000001.safetensors"

static inline void flip_byte(const char *dir, size_t at)
{
    size_t len;
    char *data = tu_read_file(tu_path(dir, MODEL_FILE), &len);
    assert_non_null(data);
    assert_true(at < len);
    data[at] ^= 0x01;
    assert_int_equal(tu_write_file(tu_path(dir, MODEL_FILE), data, len), 0);
    free(data);
}

/* Swap n bytes at a and b of the model file of dir. */
static inline void swap_bytes(const char *dir, size_t a, size_t b, size_t n)
{
    size_t len;
    char *data = tu_read_file(tu_path(dir, MODEL_FILE), &len);
    assert_non_null(data);
    assert_true(a + n <= len && b + n <= len);
    for (size_t i = 0; i < n; i++) {
        char t = data[a + i];
        data[a + i] = data[b + i];
        data[b + i] = t;
    }
    assert_int_equal(tu_write_file(tu_path(dir, MODEL_FILE), data, len), 0);
    free(data);
}

/* Copy the tree at `from` (files and directories only) to `to`. */
static inline void copy_tree(const char *from, const char *to)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cp -R '%s' '%s'", from, to);
    assert_int_equal(system(cmd), 0);
}

/* dir as it was when copied to `keep` (copy_tree). */
static inline void restore_tree(const char *dir, const char *keep)
{
    tu_rmtree(dir);
    copy_tree(keep, dir);
}


#endif
