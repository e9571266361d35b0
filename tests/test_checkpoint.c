/*
 * test_checkpoint.c -- the step-directory engine through the public API:
 * round trips of every kind of tensor and blob, the on-disk layout,
 * hostile metadata/common.json/tracker/data files, path resolution
 * (tracker, newest, explicit step, step-N, plain directories), resharding
 * within one process, state/checkpoint mismatches, and I/O fault injection
 * at every write/fsync/rename/open/mkdir/link/exchange of a save.
 */
#include "testutil.h"

#include "checkpoint/checkpoint.h"
#include "store/io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

/* The manager of the last load_from: it owns the strings of the load
   result, so it lives until the next load_from. */
static shs_manager *g_last_manager;

/* Load `path` (save path or step directory) into `st` through a manager. */
static int load_from(const char *path, shs_state *st, shs_progress *p, shs_load_result *res,
                     int strict, int64_t step)
{
    shs_config c;
    shs_config_init(&c);
    c.enable_save = 0;
    c.load_path = path;
    c.strict = strict;
    c.load_step = step;
    shs_manager_free(g_last_manager);
    g_last_manager = NULL;
    int rc = shs_manager_create(&g_last_manager, &c, st);
    if (rc < 0)
        return rc;
    shs_progress local = SHS_PROGRESS_INIT;
    return shs_manager_load(res, g_last_manager, p ? p : &local);
}

/* Whether the load result lists `name` as skipped. */
static int skipped_has(const shs_load_result *res, const char *name)
{
    for (size_t i = 0; i < res->n_skipped; i++)
        if (strcmp(res->skipped[i], name) == 0)
            return 1;
    return 0;
}

/* Name of the first file in `dir` containing `part` (static buffer). */
static const char *find_file_with(const char *dir, const char *part)
{
    static char name[512];
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    struct dirent *e;
    const char *r = NULL;
    while ((e = readdir(d)))
        if (strstr(e->d_name, part)) {
            snprintf(name, sizeof name, "%s", e->d_name);
            r = name;
            break;
        }
    closedir(d);
    return r;
}

/* ------------------------------------------------------------------ */
/* A state with many kinds of tensors                                 */
/* ------------------------------------------------------------------ */

typedef struct tdef {
    const char *name;
    shs_kind kind;
    shs_dtype dtype;
    size_t ndim;
    uint64_t shape[4];
} tdef;

static const tdef k_defs[] = {
    { "model.layers.0.w", SHS_KIND_MODEL, SHS_F32, 2, { 4, 5 } },
    { "model.layers.0.b", SHS_KIND_MODEL, SHS_BF16, 1, { 7 } },
    { "model.emb", SHS_KIND_MODEL, SHS_F16, 3, { 3, 2, 2 } },
    { "model.scale", SHS_KIND_MODEL, SHS_F64, 0, { 0 } }, /* scalar */
    { "model.empty", SHS_KIND_MODEL, SHS_F32, 1, { 0 } }, /* empty */
    { "model.q", SHS_KIND_MODEL, SHS_I8, 1, { 9 } },
    { "model.ids", SHS_KIND_MODEL, SHS_U64, 1, { 2 } },
    { "model.mask", SHS_KIND_MODEL, SHS_BOOL, 2, { 1, 5 } },
    { "model.fp8", SHS_KIND_MODEL, SHS_F8_E4M3, 1, { 6 } },
    /* optimizer: only some parameters have state; one is empty */
    { "optimizer.model.layers.0.w.exp_avg", SHS_KIND_OPTIMIZER, SHS_F32, 2, { 4, 5 } },
    { "optimizer.model.layers.0.w.exp_avg_sq", SHS_KIND_OPTIMIZER, SHS_F32, 2, { 4, 5 } },
    { "optimizer.model.layers.0.b.exp_avg", SHS_KIND_OPTIMIZER, SHS_F32, 1, { 7 } },
    { "optimizer.model.empty.exp_avg", SHS_KIND_OPTIMIZER, SHS_F32, 1, { 0 } },
    { "optimizer.step", SHS_KIND_OPTIMIZER, SHS_I64, 0, { 0 } },
};
#define NDEFS (sizeof k_defs / sizeof *k_defs)

static const uint8_t k_rng[] = { 0, 1, 2, 0xff, 0, 0, 0x80, 0x7f, 0, 9, 0, 0, 0, 0, 0, 1 };
static const char k_lr[] = "{\"last_epoch\": 5, \"base_lrs\": [0.001], \"_step_count\": 6}";
static const char k_dl[] = "{\"cursor\": 12345, \"epoch\": 2}";

typedef struct bundle {
    shs_state *st;
    uint8_t *buf[NDEFS];
    size_t nb[NDEFS];
} bundle;

static size_t def_nbytes(const tdef *d)
{
    uint64_t n = 0;
    assert_int_equal(shs_tensor_nbytes(&n, d->dtype, d->ndim, d->shape), SHS_OK);
    return (size_t)n;
}

/* seed 0: zero-filled buffers and no blobs (a "fresh" state). */
static void bundle_make(bundle *b, unsigned seed)
{
    memset(b, 0, sizeof *b);
    assert_int_equal(shs_state_create(&b->st), SHS_OK);
    for (size_t k = 0; k < NDEFS; k++) {
        const tdef *d = &k_defs[k];
        b->nb[k] = def_nbytes(d);
        b->buf[k] = calloc(1, b->nb[k] + 1);
        assert_non_null(b->buf[k]);
        for (size_t i = 0; seed && i < b->nb[k]; i++) {
            uint8_t v = (uint8_t)(seed * 131u + k * 17u + i * 7u + 1u);
            if (d->dtype == SHS_BOOL)
                v &= 1;
            b->buf[k][i] = v;
        }
        shs_tensor_spec sp = SHS_TENSOR_SPEC_INIT;
        sp.name = d->name;
        sp.kind = d->kind;
        sp.dtype = d->dtype;
        sp.ndim = d->ndim;
        sp.shape = d->shape;
        sp.data = b->buf[k];
        assert_int_equal(shs_state_add_tensor(b->st, &sp), SHS_OK);
    }
    if (seed) {
        assert_int_equal(shs_state_set_blob(b->st, "rng", k_rng, sizeof k_rng), SHS_OK);
        assert_int_equal(shs_state_set_blob(b->st, "lr_scheduler", k_lr, strlen(k_lr)), SHS_OK);
        assert_int_equal(shs_state_set_blob(b->st, "dataloader", k_dl, strlen(k_dl)), SHS_OK);
    }
}

static void bundle_free(bundle *b)
{
    shs_state_free(b->st);
    for (size_t k = 0; k < NDEFS; k++)
        free(b->buf[k]);
}

static void bundle_assert_equal(const bundle *a, const bundle *b, int with_optim)
{
    for (size_t k = 0; k < NDEFS; k++) {
        if (k_defs[k].kind == SHS_KIND_OPTIMIZER && !with_optim)
            continue;
        assert_int_equal(a->nb[k], b->nb[k]);
        if (memcmp(a->buf[k], b->buf[k], a->nb[k]) != 0)
            fail_msg("tensor '%s' differs after load", k_defs[k].name);
    }
}

static void assert_blob(shs_state *st, const char *name, const void *want, size_t len)
{
    const void *d = NULL;
    size_t n = 0;
    if (shs_state_get_blob(st, name, &d, &n) != SHS_OK)
        fail_msg("blob '%s' missing: %s", name, shs_last_error());
    assert_int_equal(n, len);
    if (len)
        assert_memory_equal(d, want, len);
}

static shs_progress progress_sample(int64_t step)
{
    shs_progress p = SHS_PROGRESS_INIT;
    p.epoch_num = 2;
    p.step_num = 17;
    p.global_step = step;
    p.loss_scale = 65536.5;
    p.global_batch_size = 32;
    p.consumed_samples = step * 32;
    return p;
}

/* ------------------------------------------------------------------ */
/* Round trip and layout                                              */
/* ------------------------------------------------------------------ */

static void test_roundtrip(void **state)
{
    (void)state;
    char *sp = tu_subpath("rt");
    bundle a, b;
    bundle_make(&a, 3);
    shs_progress p = progress_sample(123);
    assert_int_equal(tu_save_once(sp, a.st, &p, 1), SHS_OK);

    bundle_make(&b, 0);
    shs_progress q = SHS_PROGRESS_INIT;
    q.global_batch_size = 32;
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    int rc = load_from(sp, b.st, &q, &res, 1, -1);
    if (rc != SHS_OK)
        fail_msg("load: %d %s", rc, shs_last_error());
    assert_int_equal(res.loaded, 1);
    assert_int_equal(res.step, 123);
    assert_true(res.optimizer_loaded);
    assert_true(res.progress_loaded);
    assert_true(res.rank_state_restored);
    assert_int_equal(res.batch_size_changed, 0);
    assert_int_equal(res.n_skipped, 0);
    assert_non_null(strstr(res.path, "iteration_00000123"));
    bundle_assert_equal(&a, &b, 1);
    assert_blob(b.st, "rng", k_rng, sizeof k_rng);
    assert_blob(b.st, "lr_scheduler", k_lr, strlen(k_lr));
    assert_blob(b.st, "dataloader", k_dl, strlen(k_dl));
    assert_int_equal(q.epoch_num, 2);
    assert_int_equal(q.step_num, 17);
    assert_int_equal(q.global_step, 123);
    assert_true(q.loss_scale == 65536.5);
    assert_int_equal(q.global_batch_size, 32);
    assert_int_equal(q.consumed_samples, 123 * 32);
    assert_string_equal(q.ckpt_status, "");

    /* ckpt_status "" is written as null, a string round trips */
    size_t len;
    char *dir = strdup(tu_path(sp, "iteration_00000123"));
    char *common = tu_read_file(tu_path(dir, "common.json"), &len);
    assert_non_null(common);
    json_error_t je;
    json_t *o = json_loads(common, 0, &je);
    assert_non_null(o);
    assert_true(json_is_null(json_object_get(o, "ckpt_status")));
    json_decref(o);
    free(common);

    p = progress_sample(124);
    snprintf(p.ckpt_status, sizeof p.ckpt_status, "%s", "saved");
    p.loss_scale = 0.125;
    assert_int_equal(tu_save_once(sp, a.st, &p, 0), SHS_OK);
    q = (shs_progress)SHS_PROGRESS_INIT;
    assert_int_equal(load_from(sp, b.st, &q, NULL, 1, -1), SHS_OK);
    assert_string_equal(q.ckpt_status, "saved");
    assert_true(q.loss_scale == 0.125);
    assert_int_equal(q.global_step, 124);

    bundle_free(&a);
    bundle_free(&b);
    free(dir);
    free(sp);
}

static void test_layout(void **state)
{
    (void)state;
    char *sp = tu_subpath("layout");
    bundle a;
    bundle_make(&a, 5);
    shs_progress p = progress_sample(7);
    assert_int_equal(tu_save_once(sp, a.st, &p, 0), SHS_OK);
    char *dir = strdup(tu_path(sp, "iteration_00000007"));
    struct stat sb;
    assert_int_equal(stat(dir, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));

    size_t len;
    char *tr = tu_read_file(tu_path(sp, TU_TRACKER), &len);
    assert_non_null(tr);
    assert_true(strcmp(tr, "7") == 0 || strcmp(tr, "7\n") == 0);
    free(tr);

    /* common.json: exactly the seven keys */
    char *common = tu_read_file(tu_path(dir, "common.json"), &len);
    assert_non_null(common);
    json_error_t je;
    json_t *o = json_loads(common, JSON_REJECT_DUPLICATES, &je);
    assert_non_null(o);
    assert_int_equal(json_object_size(o), 7);
    static const char *const keys[] = { "epoch_num",  "step_num",          "global_step",
                                        "loss_scale", "global_batch_size", "consumed_samples",
                                        "ckpt_status" };
    for (size_t i = 0; i < 7; i++)
        if (!json_object_get(o, keys[i]))
            fail_msg("common.json lacks '%s': %s", keys[i], common);
    assert_int_equal(json_integer_value(json_object_get(o, "global_step")), 7);
    assert_true(json_is_number(json_object_get(o, "loss_scale")));
    json_decref(o);
    free(common);

    /* metadata.json names the data files; each is a safetensors file
       holding the tensors under their full names */
    char *meta = tu_read_file(tu_path(dir, "metadata.json"), &len);
    assert_non_null(meta);
    json_t *mj = json_loads(meta, 0, &je);
    assert_non_null(mj);
    json_t *files = json_object_get(mj, "files");
    assert_true(json_is_array(files));
    assert_true(json_array_size(files) >= 2);
    int found[NDEFS] = { 0 };
    int saw_model = 0, saw_opt = 0;
    for (size_t i = 0; i < json_array_size(files); i++) {
        const char *fname = json_string_value(json_object_get(json_array_get(files, i), "name"));
        assert_non_null(fname);
        shs_file *f = NULL;
        int rc = shs_file_open(&f, tu_path(dir, fname), NULL);
        if (rc != SHS_OK)
            fail_msg("%s does not open: %s", fname, shs_last_error());
        int is_model = strstr(fname, "checkpoint-model-") != NULL;
        int is_opt = strstr(fname, "checkpoint-opt-") != NULL;
        saw_model |= is_model;
        saw_opt |= is_opt;
        for (size_t k = 0; k < NDEFS; k++) {
            size_t idx;
            if (shs_file_find(&idx, f, k_defs[k].name) != SHS_OK)
                continue;
            found[k]++;
            /* model tensors in model files, optimizer tensors in opt files */
            if (k_defs[k].kind == SHS_KIND_MODEL)
                assert_true(is_model);
            else
                assert_true(is_opt);
            const shs_tensor_info *ti = shs_file_tensor(f, idx);
            assert_int_equal(ti->dtype, k_defs[k].dtype);
            assert_int_equal(ti->ndim, k_defs[k].ndim);
            assert_int_equal(ti->nbytes, a.nb[k]);
            uint8_t *got = malloc(a.nb[k] + 1);
            assert_int_equal(shs_file_read(f, idx, got, a.nb[k]), SHS_OK);
            if (a.nb[k])
                assert_memory_equal(got, a.buf[k], a.nb[k]);
            free(got);
        }
        shs_file_free(f);
    }
    assert_true(saw_model);
    assert_true(saw_opt);
    for (size_t k = 0; k < NDEFS; k++)
        if (found[k] != 1)
            fail_msg("tensor '%s' found in %d data files", k_defs[k].name, found[k]);
    json_decref(mj);
    free(meta);
    assert_true(tu_path_exists(tu_path(dir, "metadata.json")));
    int rc = shs_checkpoint_verify(dir, NULL, 0);
    if (rc != SHS_OK)
        fail_msg("verify: %s", shs_last_error());
    /* no temporary entries left behind */
    assert_int_equal(tu_count_leftovers(sp), 0);
    assert_int_equal(tu_count_prefixed(dir, "."), 2); /* "." and ".." only */
    bundle_free(&a);
    free(dir);
    free(sp);
}

/* ------------------------------------------------------------------ */
/* A small state for the hostile-input, resolve and mismatch tests   */
/* ------------------------------------------------------------------ */

typedef tu_small small;

static void small_make(small *s, float base)
{
    tu_small_make(s, base, 1);
    if (base != 0) {
        uint8_t rng[8] = { 1, 2, 3, 4, 5, 6, 7, (uint8_t)base };
        assert_int_equal(shs_state_set_blob(s->st, "rng", rng, sizeof rng), SHS_OK);
    }
}

/* A save path holding one committed checkpoint of `small` at `step`;
   returns the step directory (caller frees), *save_path set too. */
static char *make_ckpt(const char *name, int64_t step, float base, char **save_path)
{
    char *sp = tu_subpath(name);
    small s;
    small_make(&s, base);
    shs_progress p = progress_sample(step);
    int rc = tu_save_once(sp, s.st, &p, 0);
    if (rc != SHS_OK)
        fail_msg("save: %s", shs_last_error());
    shs_state_free(s.st);
    char *dir = strdup(tu_step_dir(sp, step));
    if (save_path)
        *save_path = sp;
    else
        free(sp);
    return dir;
}

/* Load `dir` into a fresh small state; returns the status. */
static int load_small(const char *dir)
{
    small s;
    small_make(&s, 0);
    shs_progress p = SHS_PROGRESS_INIT;
    int rc = load_from(dir, s.st, &p, NULL, 1, -1);
    shs_state_free(s.st);
    return rc;
}

static json_t *read_json(const char *path)
{
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    if (!o)
        fail_msg("%s: %s", path, je.text);
    return o;
}

static void write_json(const char *path, json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT);
    assert_non_null(s);
    assert_int_equal(tu_write_file(path, s, strlen(s)), 0);
    free(s);
}

/* An independent implementation of the metadata.json seal (format version
   2, docs/checkpoint.md): the file ends with
   "metadata_xxh3":"<16 hex>"\n}\n and the hex is the XXH3-64 of the file
   with those 16 digits read as zeros.  Written sealed only when the
   document was sealed before (a version-1 document has no seal). */
static void write_meta(const char *path, json_t *o)
{
    if (!json_object_get(o, "metadata_xxh3")) {
        write_json(path, o);
        return;
    }
    json_object_del(o, "metadata_xxh3");
    char *s = json_dumps(o, JSON_INDENT(1) | JSON_COMPACT);
    assert_non_null(s);
    size_t n = strlen(s);
    while (n && s[n - 1] != '}')
        n--;
    assert_true(n > 1);
    n--; /* drop the closing brace */
    static const char tail[] = ",\n\"metadata_xxh3\":\"0000000000000000\"\n}\n";
    char *t = malloc(n + sizeof tail);
    assert_non_null(t);
    memcpy(t, s, n);
    memcpy(t + n, tail, sizeof tail);
    size_t len = n + sizeof tail - 1;
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH3_64bits(t, len));
    memcpy(t + len - 20, hex, 16);
    assert_int_equal(tu_write_file(path, t, len), 0);
    free(t);
    free(s);
}

/* After common.json of `dir` was edited: record its new checksum in a
   sealed metadata.json, so that the edit is judged on its content. */
static void reseal_common(const char *dir)
{
    char *mp = strdup(tu_path(dir, "metadata.json"));
    json_t *m = read_json(mp);
    if (json_object_get(m, "common_xxh3")) {
        size_t len;
        char *c = tu_read_file(tu_path(dir, "common.json"), &len);
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH3_64bits(c, len));
        json_object_set_new(m, "common_xxh3", json_string(hex));
        write_meta(mp, m);
        free(c);
    }
    json_decref(m);
    free(mp);
}

static void write_text(const char *path, const char *s)
{
    assert_int_equal(tu_write_file(path, s, strlen(s)), 0);
}

/* Expect load and verify of `dir` to fail with `status` (0: any error) and
   messages containing `needle`. */
static void expect_bad(const char *dir, int status, const char *needle, const char *what)
{
    int rc = load_small(dir);
    if (rc == SHS_OK || (status && rc != status))
        fail_msg("%s: load gave %d (%s), expected %d", what, rc, shs_last_error(), status);
    if (needle && !strstr(shs_last_error(), needle))
        fail_msg("%s: load message lacks '%s': %s", what, needle, shs_last_error());
    rc = shs_checkpoint_verify(dir, NULL, 0);
    if (rc == SHS_OK || (status && rc != status))
        fail_msg("%s: verify gave %d (%s), expected %d", what, rc, shs_last_error(), status);
    if (needle && !strstr(shs_last_error(), needle))
        fail_msg("%s: verify message lacks '%s': %s", what, needle, shs_last_error());
}

typedef void (*meta_edit)(json_t *root);

/* A fresh checkpoint `name` (step 5) whose `file` (a JSON file of the step
   directory) is edited by `edit`; with `verify_first` it must verify before
   the edit.  Then load and verify must fail as corrupt, with messages naming
   `needle` and then `file`. */
static void expect_bad_edit(const char *name, const char *file, int verify_first, meta_edit edit,
                            const char *needle, const char *what)
{
    char *dir = make_ckpt(name, 5, 1.0f, NULL);
    char *fp = strdup(tu_path(dir, file));
    if (verify_first)
        assert_int_equal(shs_checkpoint_verify(dir, NULL, 0), SHS_OK);
    json_t *r = read_json(fp);
    edit(r);
    if (strcmp(file, "metadata.json") == 0) {
        write_meta(fp, r);
    } else {
        write_json(fp, r);
        reseal_common(dir);
    }
    json_decref(r);
    expect_bad(dir, SHS_ECORRUPT, needle, what);
    expect_bad(dir, SHS_ECORRUPT, file, what);
    free(fp);
    free(dir);
}

static void edit_file0_dotdot(json_t *r)
{
    json_object_set_new(json_array_get(json_object_get(r, "files"), 0), "name",
                        json_string("../x.safetensors"));
}
static void edit_file0_abs(json_t *r)
{
    json_object_set_new(json_array_get(json_object_get(r, "files"), 0), "name",
                        json_string("/etc/passwd"));
}
static void edit_file0_hidden(json_t *r)
{
    json_object_set_new(json_array_get(json_object_get(r, "files"), 0), "name",
                        json_string(".hidden"));
}
static void edit_version(json_t *r)
{
    json_object_set_new(r, "version", json_integer(3));
}
static json_t *w_chunk0(json_t *r)
{
    return json_array_get(
        json_object_get(json_object_get(json_object_get(r, "tensors"), "w"), "chunks"), 0);
}
static void edit_chunk_outside(json_t *r)
{
    json_t *off = json_array(); /* [1, 0] with shape [4, 3] in a [4, 3] tensor */
    json_array_append_new(off, json_integer(1));
    json_array_append_new(off, json_integer(0));
    json_object_set_new(w_chunk0(r), "offset", off);
}
static void edit_byte_range(json_t *r)
{
    json_t *br = json_object_get(w_chunk0(r), "byte_range");
    json_array_set_new(br, 1, json_integer(json_integer_value(json_array_get(br, 1)) + 4));
}

static void test_hostile_metadata(void **state)
{
    (void)state;
    struct {
        meta_edit fn;
        const char *needle;
        const char *what;
    } cases[] = {
        { edit_file0_dotdot, "../x.safetensors", "file ../x" },
        { edit_file0_abs, "/etc/passwd", "file /etc/passwd" },
        { edit_file0_hidden, ".hidden", "file .hidden" },
        { edit_version, "version", "version 3" },
        { edit_chunk_outside, "'w'", "chunk outside" },
        { edit_byte_range, "'w'", "byte_range" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char name[32];
        snprintf(name, sizeof name, "hm%zu", i);
        expect_bad_edit(name, "metadata.json", 1, cases[i].fn, cases[i].needle, cases[i].what);
    }

    /* invalid JSON */
    char *dir = make_ckpt("hm_json", 5, 1.0f, NULL);
    char *mp = strdup(tu_path(dir, "metadata.json"));
    size_t len;
    char *text = tu_read_file(mp, &len);
    assert_int_equal(tu_write_file(mp, text, len / 2), 0);
    expect_bad(dir, SHS_ECORRUPT, "metadata.json", "truncated JSON");
    /* a duplicate key */
    assert_true(text[0] == '{');
    char *dup = malloc(len + 64);
    snprintf(dup, len + 64, "{\"step\": 5, %s", text + 1);
    write_text(mp, dup);
    expect_bad(dir, SHS_ECORRUPT, "metadata.json", "duplicate key");
    /* not an object, empty */
    write_text(mp, "[]");
    expect_bad(dir, SHS_ECORRUPT, "metadata.json", "array");
    write_text(mp, "");
    expect_bad(dir, SHS_ECORRUPT, "metadata.json", "empty");
    /* the original again: loads */
    assert_int_equal(tu_write_file(mp, text, len), 0);
    assert_int_equal(load_small(dir), SHS_OK);
    assert_int_equal(shs_checkpoint_verify(dir, NULL, 0), SHS_OK);
    free(dup);
    free(text);
    free(mp);
    free(dir);
}

/* ------------------------------------------------------------------ */
/* Layout rules of metadata.json: each one broken in a checkpoint whose */
/* data files are intact, so only the validation of metadata.json can   */
/* catch it (before it, verify said OK and a load left part of the      */
/* caller's buffer unwritten).                                          */
/* ------------------------------------------------------------------ */

static json_t *w_entry(json_t *r)
{
    return json_object_get(json_object_get(r, "tensors"), "w");
}
static json_t *dims2(uint64_t a, uint64_t b)
{
    json_t *d = json_array();
    json_array_append_new(d, json_integer((json_int_t)a));
    json_array_append_new(d, json_integer((json_int_t)b));
    return d;
}
/* "w" (saved whole, [4,3]) declared [rows,3] with chunks at the given
   first rows, each a copy of the saved [4,3] chunk */
static void w_rows(json_t *r, uint64_t rows, const uint64_t *at, size_t n)
{
    json_t *t = w_entry(r), *c0 = json_deep_copy(w_chunk0(r)), *chunks = json_array();
    json_object_set_new(t, "shape", dims2(rows, 3));
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_deep_copy(c0);
        json_object_set_new(c, "offset", dims2(at[i], 0));
        json_array_append_new(chunks, c);
    }
    json_object_set_new(t, "chunks", chunks);
    json_decref(c0);
}
static void edit_overlap_gap(json_t *r)
{
    /* rows 0-3 and 2-5 of 8: the volumes sum to 24 = 8 x 3, rows 2-3 are
       listed twice and rows 6-7 never */
    w_rows(r, 8, (const uint64_t[]){ 0, 2 }, 2);
}
static void edit_gap(json_t *r)
{
    w_rows(r, 8, (const uint64_t[]){ 0 }, 1);
}
static void edit_overlap(json_t *r)
{
    w_rows(r, 6, (const uint64_t[]){ 0, 2 }, 2);
}
static void edit_no_chunks(json_t *r)
{
    json_object_set_new(w_entry(r), "chunks", json_array());
}
static void edit_no_xxh3(json_t *r)
{
    json_object_del(w_chunk0(r), "xxh3");
}
static void edit_key_not_name(json_t *r)
{
    /* tensor "b" renamed "bb"; its chunk still holds key "b" */
    json_t *t = json_object_get(r, "tensors"), *b = json_incref(json_object_get(t, "b"));
    json_object_del(t, "b");
    json_object_set_new(t, "bb", b);
}
static void edit_world_size(json_t *r)
{
    json_object_set_new(r, "world_size", json_integer(3));
}
static void edit_step(json_t *r)
{
    json_object_set_new(r, "step", json_integer(6));
}
static void edit_blob_name(json_t *r)
{
    json_object_set_new(json_array_get(json_object_get(r, "blobs"), 0), "name", json_string("rnf"));
}
static void edit_blob_dup(json_t *r)
{
    json_t *b = json_object_get(r, "blobs");
    json_array_append_new(b, json_deep_copy(json_array_get(b, 0)));
}
static void edit_file_dup(json_t *r)
{
    json_t *f = json_object_get(r, "files");
    json_array_append_new(f, json_deep_copy(json_array_get(f, 0)));
}
static void edit_step_too_big(json_t *r)
{
    json_object_set_new(r, "step", json_integer(1000000000000000000LL));
}

/* A checkpoint (step 5) whose metadata.json is edited by `edit`: verify
   must fail as corrupt naming `needle`, and a load must fail. */
static void expect_bad_layout(const char *name, meta_edit edit, const char *needle)
{
    char *dir = make_ckpt(name, 5, 1.0f, NULL);
    char *mp = strdup(tu_path(dir, "metadata.json"));
    json_t *r = read_json(mp);
    edit(r);
    write_meta(mp, r);
    json_decref(r);
    int rc = shs_checkpoint_verify(dir, NULL, 0);
    if (rc != SHS_ECORRUPT || !strstr(shs_last_error(), needle))
        fail_msg("%s: verify gave %d (%s), expected SHS_ECORRUPT naming '%s'", name, rc,
                 shs_last_error(), needle);
    if (!strstr(shs_last_error(), "metadata.json"))
        fail_msg("%s: the message does not name metadata.json: %s", name, shs_last_error());
    shs_checkpoint *ck = NULL;
    assert_int_equal(shs_checkpoint_open(&ck, dir, NULL), SHS_ECORRUPT);
    assert_null(ck);
    rc = load_small(dir);
    if (rc == SHS_OK)
        fail_msg("%s: load succeeded", name);
    free(mp);
    free(dir);
}

static void test_hostile_layout(void **state)
{
    (void)state;
    expect_bad_layout("hl_overlap_gap", edit_overlap_gap, "overlap");
    expect_bad_layout("hl_gap", edit_gap, "cover");
    expect_bad_layout("hl_overlap", edit_overlap, "overlap");
    expect_bad_layout("hl_nochunks", edit_no_chunks, "cover");
    expect_bad_layout("hl_noxxh3", edit_no_xxh3, "xxh3");
    expect_bad_layout("hl_key", edit_key_not_name, "key");
    expect_bad_layout("hl_world", edit_world_size, "world_size");
    expect_bad_layout("hl_step", edit_step, "step");
    expect_bad_layout("hl_blobname", edit_blob_name, "rnf");
    expect_bad_layout("hl_blobdup", edit_blob_dup, "rng");
    expect_bad_layout("hl_filedup", edit_file_dup, "twice");
    expect_bad_layout("hl_bigstep", edit_step_too_big, "step");

    /* replicas (the same box listed twice, as several ranks write a
       replicated tensor without remove_redundancy) verify and load */
    char *dir = make_ckpt("hl_replica", 5, 1.0f, NULL);
    char *mp = strdup(tu_path(dir, "metadata.json"));
    json_t *r = read_json(mp);
    w_rows(r, 4, (const uint64_t[]){ 0, 0, 0 }, 3);
    write_meta(mp, r);
    json_decref(r);
    if (shs_checkpoint_verify(dir, NULL, 0) != SHS_OK)
        fail_msg("replicas: %s", shs_last_error());
    small s;
    small_make(&s, 0);
    shs_progress p = SHS_PROGRESS_INIT;
    if (load_from(dir, s.st, &p, NULL, 1, -1) != SHS_OK)
        fail_msg("replicas: load: %s", shs_last_error());
    assert_true(s.w[11] == 1.0f + 11);
    shs_state_free(s.st);
    shs_checkpoint *ck;
    TU_OK(shs_checkpoint_open(&ck, dir, NULL));
    size_t wi;
    TU_OK(shs_checkpoint_find(&wi, ck, "w"));
    assert_int_equal(shs_checkpoint_tensor(ck, wi)->n_chunks, 3);
    shs_checkpoint_free(ck);
    free(mp);
    free(dir);
}

/* ------------------------------------------------------------------ */
/* JSON edges of metadata.json: what its reader accepts and refuses     */
/* beyond the schema (the rules jansson applied before the strict       */
/* scanner replaced it).  Version 1, so that a text edit needs no seal.  */
/* ------------------------------------------------------------------ */

/* Every object of `v` rebuilt with its members in reverse order. */
static json_t *reversed(json_t *v)
{
    if (json_is_array(v)) {
        json_t *a = json_array();
        for (size_t i = 0; i < json_array_size(v); i++)
            json_array_append_new(a, reversed(json_array_get(v, i)));
        return a;
    }
    if (!json_is_object(v))
        return json_incref(v);
    const char *keys[64];
    size_t n = 0;
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x)
    {
        assert_true(n < 64);
        keys[n++] = k;
    }
    json_t *o = json_object();
    while (n--)
        json_object_set_new(o, keys[n], reversed(json_object_get(v, keys[n])));
    return o;
}

/* `s` with its first `find` replaced by `repl` (caller frees). */
static char *text_splice(const char *s, const char *find, const char *repl)
{
    const char *at = strstr(s, find);
    if (!at)
        fail_msg("'%s' not found in metadata.json", find);
    size_t a = (size_t)(at - s), f = strlen(find), r = strlen(repl), n = strlen(s);
    char *out = malloc(n - f + r + 1);
    assert_non_null(out);
    memcpy(out, s, a);
    memcpy(out + a, repl, r);
    memcpy(out + a + r, at + f, n - a - f + 1);
    return out;
}

/* `text` as metadata.json of `dir`: verify accepts it (needle NULL) or
   refuses it as corrupt with a message naming metadata.json and `needle`. */
static void expect_meta_text(const char *dir, const char *text, const char *needle,
                             const char *what)
{
    assert_int_equal(tu_write_file(tu_path(dir, "metadata.json"), text, strlen(text)), 0);
    int rc = shs_checkpoint_verify(dir, NULL, 0);
    if (!needle) {
        if (rc != SHS_OK)
            fail_msg("%s: verify gave %d (%s), expected OK", what, rc, shs_last_error());
        return;
    }
    if (rc != SHS_ECORRUPT || !strstr(shs_last_error(), needle) ||
        !strstr(shs_last_error(), "metadata.json"))
        fail_msg("%s: verify gave %d (%s), expected SHS_ECORRUPT naming metadata.json and "
                 "'%s'",
                 what, rc, shs_last_error(), needle);
}

/* `text` with `len` brackets of nesting in an unknown first member. */
static char *nested_member(const char *text, size_t len)
{
    size_t n = strlen(text);
    char *out = malloc(n + 2 * len + 16);
    assert_non_null(out);
    size_t k = 0;
    memcpy(out, "{\"x\":", 5);
    k = 5;
    memset(out + k, '[', len);
    k += len;
    memset(out + k, ']', len);
    k += len;
    out[k++] = ',';
    memcpy(out + k, text + 1, n); /* the NUL too */
    return out;
}

static void edit_blob_negative_end(json_t *r)
{
    json_array_set_new(
        json_object_get(json_array_get(json_object_get(r, "blobs"), 0), "byte_range"), 1,
        json_integer(-1));
}

static void test_hostile_json_edges(void **state)
{
    (void)state;
    char *dir = make_ckpt("hj", 5, 1.0f, NULL);
    char *mp = strdup(tu_path(dir, "metadata.json"));
    json_t *r = read_json(mp);
    json_object_set_new(r, "version", json_integer(1));
    json_object_del(r, "metadata_xxh3");
    char *t = json_dumps(r, JSON_COMPACT);
    assert_non_null(t);
    expect_meta_text(dir, t, NULL, "version 1 as written");

    /* members in any order: "files" after the chunks naming them, keys of
       every object reversed */
    json_t *rev = reversed(r);
    char *s = json_dumps(rev, JSON_COMPACT);
    assert_true(strstr(s, "\"tensors\"") < strstr(s, "\"files\""));
    expect_meta_text(dir, s, NULL, "members reversed");
    free(s);
    json_decref(rev);

    /* escapes: the tensor "w" and its chunk's key spelled "\u0077" */
    char *a = text_splice(t, "\"w\":{", "\"\\u0077\":{");
    s = text_splice(a, "\"key\":\"w\"", "\"key\":\"\\u0077\"");
    expect_meta_text(dir, s, NULL, "escaped name");
    shs_checkpoint *ck;
    size_t wi;
    TU_OK(shs_checkpoint_open(&ck, dir, NULL));
    TU_OK(shs_checkpoint_find(&wi, ck, "w"));
    shs_checkpoint_free(ck);
    free(s);
    free(a);
    /* ... but not "\u0000" (a name is a C string), nor bytes that are not
       UTF-8 */
    s = text_splice(t, "\"key\":\"w\"", "\"key\":\"w\\u0000\"");
    expect_meta_text(dir, s, "u0000", "\\u0000 in a key");
    free(s);
    s = text_splice(t, "\"key\":\"w\"", "\"key\":\"w\xff\"");
    expect_meta_text(dir, s, "UTF-8", "invalid UTF-8");
    free(s);

    /* nesting in an unknown member: 2048 containers with the top-level
       object, not one more */
    s = nested_member(t, 2047);
    expect_meta_text(dir, s, NULL, "2048 levels");
    free(s);
    s = nested_member(t, 2048);
    expect_meta_text(dir, s, "nested", "2049 levels");
    free(s);

    /* integers only where integers are required, and within int64 */
    s = text_splice(t, "\"step\":5", "\"step\":5e0");
    expect_meta_text(dir, s, "step", "step 5e0");
    free(s);
    s = text_splice(t, "\"step\":5", "\"step\":5.0");
    expect_meta_text(dir, s, "step", "step 5.0");
    free(s);
    s = text_splice(t, "\"step\":5", "\"step\":9223372036854775808");
    expect_meta_text(dir, s, "int64", "step 2^63");
    free(s);
    s = text_splice(t, "{", "{\"x\":-9223372036854775809,");
    expect_meta_text(dir, s, "int64", "-2^63-1 in an unknown member");
    free(s);
    s = text_splice(t, "{", "{\"x\":[9223372036854775807,-9223372036854775808,1e308,-0.5],");
    expect_meta_text(dir, s, NULL, "int64 bounds and reals in an unknown member");
    free(s);
    s = text_splice(t, "\"rank\":0", "\"rank\":-0");
    expect_meta_text(dir, s, NULL, "rank -0 (the integer 0)");
    free(s);

    /* nothing before or after the object but whitespace */
    size_t n = strlen(t);
    s = malloc(n + 8);
    assert_non_null(s);
    snprintf(s, n + 8, "%s \n\t\r", t);
    expect_meta_text(dir, s, NULL, "trailing whitespace");
    snprintf(s, n + 8, "%s x", t);
    expect_meta_text(dir, s, "end of file expected", "trailing garbage");
    snprintf(s, n + 8, "%s{}", t);
    expect_meta_text(dir, s, "end of file expected", "two objects");
    snprintf(s, n + 8, "\xef\xbb\xbf%s", t);
    expect_meta_text(dir, s, "expected", "byte order mark");
    free(s);

    /* a repeated key anywhere: at the top, among tensor names, inside an
       unknown member */
    s = text_splice(t, "{", "{\"x\":1,\"x\":1,");
    expect_meta_text(dir, s, "duplicate key", "unknown key twice");
    free(s);
    s = text_splice(t, "\"tensors\":{", "\"tensors\":{\"w\":{},");
    expect_meta_text(dir, s, "duplicate key", "tensor name twice");
    free(s);
    s = text_splice(t, "{", "{\"x\":[{\"a\":{},\"b\":1,\"a\":2}],");
    expect_meta_text(dir, s, "duplicate key", "a key twice inside an unknown member");
    free(s);
    s = text_splice(t, "\"rank\":0", "\"rank\":0,\"rank\":0");
    expect_meta_text(dir, s, "duplicate key", "rank twice");
    free(s);
    s = text_splice(t, "\"step\":5", "\"step\":5,\"x\":{\"a\":1},\"y\":{\"a\":1}");
    expect_meta_text(dir, s, NULL, "one key in two objects");
    free(s);

    expect_meta_text(dir, t, NULL, "version 1 again");
    free(t);
    json_decref(r);
    free(mp);
    free(dir);

    /* a blob's byte range ending at a negative offset */
    expect_bad_layout("hj_blob_end", edit_blob_negative_end, "byte_range");
}

/* Bytes the loader reads besides chunk data: common.json and the
   safetensors headers.  A change that keeps them valid (a step counter, a
   header's __metadata__) must still fail the load, not resume silently. */
static void test_hostile_load_checks(void **state)
{
    (void)state;
    /* common.json: global_step 5 -> 7 */
    char *dir = make_ckpt("hlc_common", 5, 1.0f, NULL);
    char *cp = strdup(tu_path(dir, "common.json"));
    size_t len;
    char *text = tu_read_file(cp, &len);
    char *at = strstr(text, "\"global_step\": 5");
    assert_non_null(at);
    at[strlen("\"global_step\": ")] = '7';
    assert_int_equal(tu_write_file(cp, text, len), 0);
    expect_bad(dir, SHS_ECHECKSUM, "common.json", "common.json global_step changed");
    free(text);
    free(cp);
    free(dir);

    /* a data file's header: __metadata__ "pt" -> "pu" (still valid) */
    dir = make_ckpt("hlc_header", 5, 1.0f, NULL);
    const char *model = find_file_with(dir, "-model-");
    assert_non_null(model);
    char *mname = strdup(model);
    char *mf = strdup(tu_path(dir, model));
    uint8_t *bytes = tu_read_file(mf, &len);
    char *pt = memmem(bytes, len, "\"pt\"", 4);
    assert_non_null(pt);
    pt[2] = 'u';
    assert_int_equal(tu_write_file(mf, bytes, len), 0);
    expect_bad(dir, SHS_ECHECKSUM, mname, "header __metadata__ changed");
    free(bytes);
    free(mf);
    free(mname);
    free(dir);
}

/* Steps the save accepts are the steps the loader finds: the directory
   name holds at most 18 digits, so a step of 10^18 is refused at save,
   and 10^18 - 1 round-trips. */
static void test_step_limits(void **state)
{
    (void)state;
    char *sp = tu_subpath("steplim");
    small s;
    small_make(&s, 1.0f);
    shs_progress p = progress_sample(1); /* step x 32 would overflow */
    p.global_step = 1000000000000000000LL;
    int rc = tu_save_once(sp, s.st, &p, 0);
    if (rc != SHS_EINVAL || !strstr(shs_last_error(), "step"))
        fail_msg("step 10^18 saved: %d (%s)", rc, shs_last_error());
    p.global_step = 999999999999999999LL;
    TU_OK(tu_save_once(sp, s.st, &p, 0));
    char dir[4096];
    TU_OK(shs_checkpoint_resolve(dir, sizeof dir, sp, -1));
    assert_non_null(strstr(dir, "iteration_999999999999999999"));
    if (shs_checkpoint_verify(dir, NULL, 0) != SHS_OK)
        fail_msg("step 10^18-1: %s", shs_last_error());
    shs_progress q = SHS_PROGRESS_INIT;
    small t;
    small_make(&t, 0);
    TU_OK(load_from(sp, t.st, &q, NULL, 1, -1));
    assert_int_equal(q.global_step, 999999999999999999LL);
    shs_state_free(t.st);
    shs_state_free(s.st);
    free(sp);
}

static void test_hostile_data_files(void **state)
{
    (void)state;
    /* truncated data file */
    char *dir = make_ckpt("hd_trunc", 5, 1.0f, NULL);
    const char *model = find_file_with(dir, "-model-");
    assert_non_null(model);
    char *mf = strdup(tu_path(dir, model));
    char *mname = strdup(model);
    struct stat sb;
    assert_int_equal(stat(mf, &sb), 0);
    assert_int_equal(truncate(mf, sb.st_size - 1), 0);
    expect_bad(dir, 0, mname, "truncated data file");
    free(mf);
    free(mname);
    free(dir);

    /* one byte of tensor data flipped */
    dir = make_ckpt("hd_flip", 5, 1.0f, NULL);
    model = find_file_with(dir, "-model-");
    mf = strdup(tu_path(dir, model));
    shs_file *f = NULL;
    assert_int_equal(shs_file_open(&f, mf, NULL), SHS_OK);
    size_t idx;
    assert_int_equal(shs_file_find(&idx, f, "w"), SHS_OK);
    uint64_t at = shs_file_data_start(f) + shs_file_tensor(f, idx)->offset + 5;
    shs_file_free(f);
    size_t len;
    uint8_t *bytes = tu_read_file(mf, &len);
    bytes[at] ^= 0x10;
    assert_int_equal(tu_write_file(mf, bytes, len), 0);
    free(bytes);
    expect_bad(dir, SHS_ECHECKSUM, "'w'", "flipped byte");
    free(mf);
    free(dir);

    /* a flipped byte in a blob */
    dir = make_ckpt("hd_blob", 5, 1.0f, NULL);
    const char *sf = find_file_with(dir, "-state-");
    assert_non_null(sf);
    mf = strdup(tu_path(dir, sf));
    bytes = tu_read_file(mf, &len);
    bytes[len - 1] ^= 0x01;
    assert_int_equal(tu_write_file(mf, bytes, len), 0);
    free(bytes);
    expect_bad(dir, SHS_ECHECKSUM, "rng", "flipped blob byte");
    free(mf);
    free(dir);

    /* a referenced file missing */
    dir = make_ckpt("hd_missing", 5, 1.0f, NULL);
    const char *opt = find_file_with(dir, "-opt-");
    assert_non_null(opt);
    char *oname = strdup(opt);
    assert_int_equal(unlink(tu_path(dir, oname)), 0);
    expect_bad(dir, SHS_ECORRUPT, oname, "missing file");
    free(oname);
    free(dir);
}

typedef void (*common_edit)(json_t *o);
static void ce_gs_string(json_t *o)
{
    json_object_set_new(o, "global_step", json_string("100"));
}
static void ce_extra(json_t *o)
{
    json_object_set_new(o, "foo_unknown", json_integer(1));
}
static void ce_missing(json_t *o)
{
    json_object_del(o, "global_step");
}
static void ce_ls_inf(json_t *o)
{
    json_object_set_new(o, "loss_scale", json_string("inf"));
}
static void ce_ls_nan(json_t *o)
{
    json_object_set_new(o, "loss_scale", json_string("nan"));
}
static void ce_ls_neg(json_t *o)
{
    json_object_set_new(o, "loss_scale", json_real(-2.0));
}
/* no consumed_samples, and global_step x global_batch_size overflows */
static void ce_derive_overflow(json_t *o)
{
    json_object_del(o, "consumed_samples");
    json_object_set_new(o, "global_step", json_integer(INT64_MAX / 2));
    json_object_set_new(o, "global_batch_size", json_integer(3));
}
static void ce_negative(json_t *o)
{
    json_object_set_new(o, "epoch_num", json_integer(-1));
}
static void ce_ls_string(json_t *o)
{
    json_object_set_new(o, "loss_scale", json_string("1.0"));
}
static void ce_ls_bad(json_t *o)
{
    json_object_set_new(o, "loss_scale", json_string("abc"));
}

static void test_hostile_common(void **state)
{
    (void)state;
    struct {
        common_edit fn;
        const char *needle;
    } bad[] = {
        { ce_gs_string, "global_step" },     { ce_extra, "foo_unknown" },
        { ce_missing, "global_step" },       { ce_negative, "epoch_num" },
        { ce_ls_bad, "loss_scale" },         { ce_ls_inf, "loss_scale" },
        { ce_ls_nan, "loss_scale" },         { ce_ls_neg, "loss_scale" },
        { ce_derive_overflow, "overflows" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char name[32];
        snprintf(name, sizeof name, "hc%zu", i);
        expect_bad_edit(name, "common.json", 0, bad[i].fn, bad[i].needle, bad[i].needle);
    }
    /* MindSpore writes loss_scale as a string: accepted */
    char *dir = make_ckpt("hc_ls", 5, 1.0f, NULL);
    char *cp = strdup(tu_path(dir, "common.json"));
    json_t *o = read_json(cp);
    ce_ls_string(o);
    write_json(cp, o);
    reseal_common(dir);
    json_decref(o);
    small s;
    small_make(&s, 0);
    shs_progress p = SHS_PROGRESS_INIT;
    p.loss_scale = 7;
    int rc = load_from(dir, s.st, &p, NULL, 1, -1);
    if (rc != SHS_OK)
        fail_msg("loss_scale \"1.0\" refused: %s", shs_last_error());
    assert_true(p.loss_scale == 1.0);
    assert_int_equal(p.global_step, 5);
    assert_int_equal(shs_checkpoint_verify(dir, NULL, 0), SHS_OK);
    shs_state_free(s.st);
    free(cp);
    free(dir);
}

/* MindSpore Transformers' six-key common.json (no consumed_samples, the
   loss scale as a string, written by hand per formats/mindspore-cp2.md):
   it loads, the cursor is global_step x global_batch_size, and the load
   result says it was derived. */
static void test_common_six_keys(void **state)
{
    (void)state;
    char *dir = make_ckpt("c6", 5, 1.0f, NULL);
    write_text(tu_path(dir, "common.json"),
               "{\n    \"epoch_num\": 1,\n    \"step_num\": 3000,\n    \"global_step\": 5,\n"
               "    \"loss_scale\": \"1.0\",\n    \"global_batch_size\": 64,\n"
               "    \"ckpt_status\": null\n}");
    reseal_common(dir); /* metadata.json records common.json's checksum */
    small s;
    small_make(&s, 0);
    shs_progress p = SHS_PROGRESS_INIT;
    p.global_batch_size = 64;
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    TU_OK(load_from(dir, s.st, &p, &res, 1, -1));
    assert_int_equal(res.consumed_samples_derived, 1);
    assert_int_equal(res.progress_loaded, 1);
    assert_int_equal(p.consumed_samples, 5 * 64);
    assert_int_equal(p.step_num, 3000);
    assert_true(p.loss_scale == 1.0);
    TU_OK(shs_checkpoint_read_progress(&p, dir));
    assert_int_equal(p.consumed_samples, 5 * 64);
    /* with the seventh key, nothing is derived */
    char *dir2 = make_ckpt("c7", 5, 1.0f, NULL);
    TU_OK(load_from(dir2, s.st, &p, &res, 1, -1));
    assert_int_equal(res.consumed_samples_derived, 0);
    assert_int_equal(p.consumed_samples, 5 * 32);
    shs_state_free(s.st);
    free(dir);
    free(dir2);
}

static void test_hostile_tracker(void **state)
{
    (void)state;
    char *sp = NULL;
    char *dir = make_ckpt("ht", 5, 1.0f, &sp);
    char *tp = strdup(tu_path(sp, TU_TRACKER));
    char out[4096];
    const char *bad[] = { "abc", "12x", "", "-5", " 5", "5\n\n", "99999999999999999999" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_text(tp, bad[i]);
        int rc = shs_checkpoint_resolve(out, sizeof out, sp, -1);
        if (rc != SHS_ECORRUPT)
            fail_msg("tracker '%s': resolve gave %d (%s)", bad[i], rc, shs_last_error());
        TU_ASSERT_MSG_HAS(TU_TRACKER);
        /* and a load through the manager fails the same way */
        assert_int_equal(load_small(sp), SHS_ECORRUPT);
    }
    /* a step with no directory */
    write_text(tp, "42");
    assert_int_equal(shs_checkpoint_resolve(out, sizeof out, sp, -1), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("42");
    /* a step whose directory is incomplete */
    assert_int_equal(mkdir(tu_path(sp, "iteration_00000042"), 0755), 0);
    assert_int_equal(shs_checkpoint_resolve(out, sizeof out, sp, -1), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("42");
    /* the good tracker, with or without newline */
    write_text(tp, "5\n");
    assert_int_equal(shs_checkpoint_resolve(out, sizeof out, sp, -1), SHS_OK);
    assert_string_equal(out, dir);
    write_text(tp, "5");
    assert_int_equal(shs_checkpoint_resolve(out, sizeof out, sp, -1), SHS_OK);
    assert_string_equal(out, dir);

    /* only incomplete directories: no checkpoint */
    char *sp2 = tu_subdir("ht_incomplete");
    assert_int_equal(mkdir(tu_path(sp2, "iteration_00000003"), 0755), 0);
    write_text(tu_path(sp2, "iteration_00000003/common.json"), "{}");
    assert_int_equal(mkdir(tu_path(sp2, "step-4"), 0755), 0);
    int rc = shs_checkpoint_resolve(out, sizeof out, sp2, -1);
    if (rc != SHS_ENOCHECKPOINT)
        fail_msg("incomplete dirs: resolve gave %d (%s)", rc, shs_last_error());
    TU_ASSERT_MSG_HAS("ht_incomplete");
    assert_int_equal(shs_checkpoint_resolve(out, sizeof out, sp2, 3), SHS_ENOCHECKPOINT);
    /* a missing path */
    rc = shs_checkpoint_resolve(out, sizeof out, tu_path(sp2, "nope"), -1);
    assert_true(rc < 0);
    TU_ASSERT_MSG_HAS("nope");
    free(sp2);
    free(tp);
    free(sp);
    free(dir);
}

/* ------------------------------------------------------------------ */
/* Resolve                                                            */
/* ------------------------------------------------------------------ */

static void test_resolve(void **state)
{
    (void)state;
    char *sp = tu_subpath("res");
    small s;
    for (int step = 1; step <= 3; step++) {
        small_make(&s, (float)step * 10);
        shs_progress p = progress_sample(step);
        assert_int_equal(tu_save_once(sp, s.st, &p, 0), SHS_OK);
        shs_state_free(s.st);
    }
    char out[4096];
    char *d1 = strdup(tu_path(sp, "iteration_00000001"));
    char *d2 = strdup(tu_path(sp, "iteration_00000002"));
    char *d3 = strdup(tu_path(sp, "iteration_00000003"));
    /* tracker */
    assert_int_equal(shs_checkpoint_resolve(out, sizeof out, sp, -1), SHS_OK);
    assert_string_equal(out, d3);
    /* a buffer too small: SHS_ERANGE, never a cut path */
    char tiny[16];
    assert_int_equal(shs_checkpoint_resolve(tiny, sizeof tiny, sp, -1), SHS_ERANGE);
    TU_ASSERT_MSG_HAS("does not fit");
    assert_int_equal(shs_checkpoint_resolve(out, strlen(d3), sp, -1), SHS_ERANGE);
    assert_int_equal(shs_checkpoint_resolve(out, strlen(d3) + 1, sp, -1), SHS_OK);
    assert_int_equal(shs_checkpoint_resolve(tiny, sizeof tiny, d1, -1), SHS_ERANGE);
    /* a save path whose step directories are all incomplete is never read
       as a plain folder, even with safetensors files beside them */
    char *inc = tu_subdir("res_incomplete");
    char *incs = tu_subdir("res_incomplete/iteration_00000004");
    size_t flen;
    void *fbytes = tu_read_file(tu_path(d3, find_file_with(d3, "-model-")), &flen);
    assert_non_null(fbytes);
    assert_int_equal(tu_write_file(tu_path(inc, "model.safetensors"), fbytes, flen), 0);
    assert_int_equal(shs_checkpoint_resolve(out, sizeof out, inc, -1), SHS_ENOCHECKPOINT);
    TU_ASSERT_MSG_HAS("no complete checkpoint");
    assert_int_equal(shs_checkpoint_resolve(out, sizeof out, incs, -1), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("without metadata.json");
    free(fbytes);
    free(inc);
    free(incs);
    write_text(tu_path(sp, TU_TRACKER), "2");
    assert_int_equal(shs_checkpoint_resolve(out, sizeof out, sp, -1), SHS_OK);
    assert_string_equal(out, d2);
    /* the manager loads what the tracker says */
    small_make(&s, 0);
    shs_progress p = SHS_PROGRESS_INIT;
    assert_int_equal(load_from(sp, s.st, &p, NULL, 1, -1), SHS_OK);
    assert_true(s.w[0] == 20.0f);
    assert_int_equal(p.global_step, 2);
    shs_state_free(s.st);
    /* explicit step wins over the tracker */
    assert_int_equal(shs_checkpoint_resolve(out, sizeof out, sp, 1), SHS_OK);
    assert_string_equal(out, d1);
    assert_int_equal(shs_checkpoint_resolve(out, sizeof out, sp, 3), SHS_OK);
    assert_string_equal(out, d3);
    assert_int_equal(shs_checkpoint_resolve(out, sizeof out, sp, 4), SHS_ENOCHECKPOINT);
    TU_ASSERT_MSG_HAS("4");
    /* no tracker: the newest complete directory (an incomplete newer one
       and a temporary one are ignored) */
    assert_int_equal(unlink(tu_path(sp, TU_TRACKER)), 0);
    assert_int_equal(mkdir(tu_path(sp, "iteration_00000009"), 0755), 0);
    assert_int_equal(mkdir(tu_path(sp, ".tmp-iteration_00000010-abc"), 0755), 0);
    assert_int_equal(shs_checkpoint_resolve(out, sizeof out, sp, -1), SHS_OK);
    assert_string_equal(out, d3);
    /* a step directory passed directly */
    assert_int_equal(shs_checkpoint_resolve(out, sizeof out, d1, -1), SHS_OK);
    assert_string_equal(out, d1);
    small_make(&s, 0);
    p = (shs_progress)SHS_PROGRESS_INIT;
    assert_int_equal(load_from(d1, s.st, &p, NULL, 1, -1), SHS_OK);
    assert_true(s.w[3] == 13.0f);
    assert_int_equal(p.global_step, 1);
    shs_state_free(s.st);

    /* torchtitan-style step-N directories */
    char *sp2 = tu_subdir("res_stepn");
    assert_int_equal(rename(d2, tu_path(sp2, "step-2")), 0);
    assert_int_equal(rename(d3, tu_path(sp2, "step-30")), 0);
    /* step-30 holds step 3's data, but the name is what counts */
    assert_int_equal(shs_checkpoint_resolve(out, sizeof out, sp2, -1), SHS_OK);
    assert_string_equal(out, tu_path(sp2, "step-30"));
    assert_int_equal(shs_checkpoint_resolve(out, sizeof out, sp2, 2), SHS_OK);
    assert_string_equal(out, tu_path(sp2, "step-2"));
    write_text(tu_path(sp2, TU_TRACKER), "2");
    assert_int_equal(shs_checkpoint_resolve(out, sizeof out, sp2, -1), SHS_OK);
    assert_string_equal(out, tu_path(sp2, "step-2"));
    small_make(&s, 0);
    assert_int_equal(load_from(sp2, s.st, NULL, NULL, 1, -1), SHS_OK);
    assert_true(s.w[1] == 21.0f);
    assert_true(s.b[2] == 18.0f);
    shs_state_free(s.st);
    assert_int_equal(shs_checkpoint_verify(tu_path(sp2, "step-2"), NULL, 0), SHS_OK);

    /* a plain directory of safetensors files */
    char *pd = tu_subdir("res_plain");
    float w[12], b[3];
    for (int i = 0; i < 12; i++)
        w[i] = (float)i * 1.5f;
    for (int i = 0; i < 3; i++)
        b[i] = -(float)i;
    shs_tensor_view v1 = { "w", SHS_F32, 2, tu_w_shape, w };
    shs_tensor_view v2 = { "b", SHS_F32, 1, tu_b_shape, b };
    assert_int_equal(
        shs_save_file(tu_path(pd, "model-00001-of-00002.safetensors"), &v1, 1, NULL, 0, NULL),
        SHS_OK);
    assert_int_equal(
        shs_save_file(tu_path(pd, "model-00002-of-00002.safetensors"), &v2, 1, NULL, 0, NULL),
        SHS_OK);
    assert_int_equal(shs_checkpoint_resolve(out, sizeof out, pd, -1), SHS_OK);
    assert_string_equal(out, pd);
    shs_state *ps;
    float gw[12] = { 0 }, gb[3] = { 0 };
    assert_int_equal(shs_state_create(&ps), SHS_OK);
    tu_add_tensor(ps, "w", SHS_KIND_MODEL, SHS_F32, 2, tu_w_shape, gw, NULL);
    tu_add_tensor(ps, "b", SHS_KIND_MODEL, SHS_F32, 1, tu_b_shape, gb, NULL);
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    p = (shs_progress)SHS_PROGRESS_INIT;
    p.global_step = 77;
    int rc = load_from(pd, ps, &p, &res, 1, -1);
    if (rc != SHS_OK)
        fail_msg("plain dir: %s", shs_last_error());
    assert_memory_equal(gw, w, sizeof w);
    assert_memory_equal(gb, b, sizeof b);
    assert_int_equal(res.progress_loaded, 0);
    assert_int_equal(p.global_step, 77);
    shs_state_free(ps);
    /* a name in two files of a plain directory */
    assert_int_equal(shs_save_file(tu_path(pd, "model-extra.safetensors"), &v2, 1, NULL, 0, NULL),
                     SHS_OK);
    assert_int_equal(shs_state_create(&ps), SHS_OK);
    tu_add_tensor(ps, "w", SHS_KIND_MODEL, SHS_F32, 2, tu_w_shape, gw, NULL);
    tu_add_tensor(ps, "b", SHS_KIND_MODEL, SHS_F32, 1, tu_b_shape, gb, NULL);
    rc = load_from(pd, ps, NULL, NULL, 1, -1);
    assert_int_equal(rc, SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("'b'");
    shs_state_free(ps);

    free(pd);
    free(sp2);
    free(d1);
    free(d2);
    free(d3);
    free(sp);
}

/* ------------------------------------------------------------------ */
/* Reshard within one process                                         */
/* ------------------------------------------------------------------ */

/* Chunks above 4 MiB carry per-block checksums: a load that needs part of
   a chunk reads and checks only the blocks it touches; verify checks all. */
static void test_block_checksums(void **state)
{
    (void)state;
    enum {
        ROWS = 2048,
        COLS = 2048
    }; /* F32: 16 MiB = 4 blocks of 512 rows */
    char *sp = tu_subpath("blocks");
    float *whole = malloc((size_t)ROWS * COLS * sizeof *whole);
    assert_non_null(whole);
    for (size_t i = 0; i < (size_t)ROWS * COLS; i++)
        whole[i] = (float)(i % 9973);
    static const uint64_t gshape[2] = { ROWS, COLS };
    shs_state *st;
    assert_int_equal(shs_state_create(&st), SHS_OK);
    tu_add_tensor(st, "big", SHS_KIND_MODEL, SHS_F32, 2, gshape, whole, NULL);
    shs_progress p = progress_sample(2);
    assert_int_equal(tu_save_once(sp, st, &p, 0), SHS_OK);
    shs_state_free(st);

    char dir[4096];
    assert_int_equal(shs_checkpoint_resolve(dir, sizeof dir, sp, -1), SHS_OK);
    shs_checkpoint *c;
    assert_int_equal(shs_checkpoint_open(&c, dir, NULL), SHS_OK);
    shs_chunk_info ci = SHS_CHUNK_INFO_INIT;
    assert_int_equal(shs_checkpoint_chunk(&ci, c, 0, 0), SHS_OK);
    char file[4200];
    snprintf(file, sizeof file, "%s/%s", dir, shs_checkpoint_file_name(c, ci.file));
    uint64_t b0 = ci.byte_begin;
    shs_checkpoint_free(c);

    /* the whole-chunk checksum (hashed in the same pass as the blocks)
       and every block checksum agree with the bytes */
    if (shs_checkpoint_verify(dir, NULL, 0) != SHS_OK)
        fail_msg("clean checkpoint does not verify: %s", shs_last_error());

    /* corrupt one byte in the last block (rows 1536..2047) */
    FILE *f = fopen(file, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, (long)(b0 + 3 * (4u << 20) + 100), SEEK_SET), 0);
    int ch = fgetc(f);
    assert_int_equal(fseek(f, (long)(b0 + 3 * (4u << 20) + 100), SEEK_SET), 0);
    fputc(ch ^ 0x5a, f);
    fclose(f);

    /* rows 0..99 live in block 0: they load, and only that block is read */
    static const uint64_t rshape[2] = { 100, COLS }, roff[2] = { 0, 0 };
    float *rows = malloc(100 * COLS * sizeof *rows);
    assert_non_null(rows);
    shs_tensor_spec spec = SHS_TENSOR_SPEC_INIT;
    spec.name = "big";
    spec.ndim = 2;
    spec.shape = rshape;
    spec.global_shape = gshape;
    spec.global_offset = roff;
    spec.data = rows;
    assert_int_equal(shs_state_create(&st), SHS_OK);
    assert_int_equal(shs_state_add_tensor(st, &spec), SHS_OK);
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    int rc = load_from(sp, st, NULL, &res, 1, -1);
    if (rc != SHS_OK)
        fail_msg("partial load of clean blocks: %s", shs_last_error());
    assert_memory_equal(rows, whole, 100 * COLS * sizeof *rows);
    assert_int_equal(res.bytes_read, 4u << 20);
    shs_state_free(st);

    /* rows 1600..1699 live in the damaged block */
    static const uint64_t roff2[2] = { 1600, 0 };
    spec.global_offset = roff2;
    assert_int_equal(shs_state_create(&st), SHS_OK);
    assert_int_equal(shs_state_add_tensor(st, &spec), SHS_OK);
    rc = load_from(sp, st, NULL, NULL, 1, -1);
    if (rc != SHS_ECHECKSUM)
        fail_msg("damaged block: got %d (%s)", rc, shs_last_error());
    TU_ASSERT_MSG_HAS("block 3");
    shs_state_free(st);

    /* verify reads everything */
    assert_int_equal(shs_checkpoint_verify(dir, NULL, 0), SHS_ECHECKSUM);
    free(rows);
    free(whole);
    free(sp);
}

static void test_reshard(void **state)
{
    (void)state;
    char *sp = tu_subpath("reshard");
    float whole[60];
    for (int i = 0; i < 60; i++)
        whole[i] = (float)i + 0.25f;
    static const uint64_t gshape[2] = { 10, 6 };
    shs_state *st;
    assert_int_equal(shs_state_create(&st), SHS_OK);
    tu_add_tensor(st, "t", SHS_KIND_MODEL, SHS_F32, 2, gshape, whole, NULL);
    shs_progress p = progress_sample(4);
    assert_int_equal(tu_save_once(sp, st, &p, 0), SHS_OK);
    shs_state_free(st);

    /* a [4, 3] chunk at [3, 2] of the global [10, 6] */
    float chunk[12];
    memset(chunk, 0xff, sizeof chunk);
    static const uint64_t off[2] = { 3, 2 }, cshape[2] = { 4, 3 };
    assert_int_equal(shs_state_create(&st), SHS_OK);
    shs_tensor_spec spec = SHS_TENSOR_SPEC_INIT;
    spec.name = "t";
    spec.dtype = SHS_F32;
    spec.ndim = 2;
    spec.shape = cshape;
    spec.global_shape = gshape;
    spec.global_offset = off;
    spec.data = chunk;
    assert_int_equal(shs_state_add_tensor(st, &spec), SHS_OK);
    int rc = load_from(sp, st, NULL, NULL, 1, -1);
    if (rc != SHS_OK)
        fail_msg("chunk load: %s", shs_last_error());
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 3; c++)
            if (chunk[r * 3 + c] != whole[(r + 3) * 6 + (c + 2)])
                fail_msg("chunk[%d][%d] = %g, want %g", r, c, chunk[r * 3 + c],
                         whole[(r + 3) * 6 + c + 2]);
    shs_state_free(st);

    /* a save whose ranks leave part of a tensor unsaved (here one rank
       holding only [5, 6] at [0, 0] of [10, 6]) is refused before the
       commit: a checkpoint that cannot be loaded whole is never written */
    char *sp2 = tu_subpath("reshard_partial");
    static const uint64_t hshape[2] = { 5, 6 }, hoff[2] = { 0, 0 };
    assert_int_equal(shs_state_create(&st), SHS_OK);
    spec.shape = hshape;
    spec.global_offset = hoff;
    spec.data = whole;
    assert_int_equal(shs_state_add_tensor(st, &spec), SHS_OK);
    rc = tu_save_once(sp2, st, &p, 0);
    if (rc != SHS_ECORRUPT)
        fail_msg("uncovered chunk saved: got %d (%s)", rc, shs_last_error());
    TU_ASSERT_MSG_HAS("cover");
    TU_ASSERT_MSG_HAS("'t'");
    TU_ASSERT_MSG_HAS("nothing committed");
    shs_state_free(st);
    assert_int_equal(tu_count_leftovers(sp2), 0);
    int64_t none;
    assert_int_equal(shs_checkpoint_read_tracker(&none, sp2), SHS_ENOENT);
    free(sp2);
    free(sp);
}

/* ------------------------------------------------------------------ */
/* Mismatches                                                         */
/* ------------------------------------------------------------------ */

/* `name` appears in `msg` delimited by non-name characters. */
static int has_token(const char *msg, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(msg, name); p; p = strstr(p + 1, name)) {
        int before = p == msg || !(p[-1] == '_' || p[-1] == '.' || (p[-1] >= 'a' && p[-1] <= 'z') ||
                                   (p[-1] >= '0' && p[-1] <= '9'));
        char a = p[n];
        int after = !(a == '_' || a == '.' || (a >= 'a' && a <= 'z') || (a >= '0' && a <= '9'));
        if (before && after)
            return 1;
    }
    return 0;
}

static int load_nonstrict(const char *path, shs_state *st, shs_load_result *res)
{
    return load_from(path, st, NULL, res, 0, -1);
}

static void test_mismatch(void **state)
{
    (void)state;
    char *sp = NULL;
    char *dir = make_ckpt("mm", 5, 3.0f, &sp);
    float w[12], b[3], wm[12], extra[2], w16[12];
    shs_state *st;

    /* registered tensor missing from the checkpoint */
    assert_int_equal(shs_state_create(&st), SHS_OK);
    tu_add_tensor(st, "w", SHS_KIND_MODEL, SHS_F32, 2, tu_w_shape, w, NULL);
    tu_add_tensor(st, "b", SHS_KIND_MODEL, SHS_F32, 1, tu_b_shape, b, NULL);
    tu_add_tensor(st, "w.exp_avg", SHS_KIND_OPTIMIZER, SHS_F32, 2, tu_w_shape, wm, NULL);
    static const uint64_t two[1] = { 2 };
    tu_add_tensor(st, "extra_registered", SHS_KIND_MODEL, SHS_F32, 1, two, extra, NULL);
    assert_int_equal(load_from(sp, st, NULL, NULL, 1, -1), SHS_EMISMATCH);
    TU_ASSERT_MSG_HAS("extra_registered");
    shs_state_free(st);

    /* tensor in the checkpoint not registered */
    assert_int_equal(shs_state_create(&st), SHS_OK);
    tu_add_tensor(st, "w", SHS_KIND_MODEL, SHS_F32, 2, tu_w_shape, w, NULL);
    tu_add_tensor(st, "w.exp_avg", SHS_KIND_OPTIMIZER, SHS_F32, 2, tu_w_shape, wm, NULL);
    assert_int_equal(load_from(sp, st, NULL, NULL, 1, -1), SHS_EMISMATCH);
    if (!has_token(shs_last_error(), "b"))
        fail_msg("extra tensor 'b' not named: %s", shs_last_error());
    if (!strstr(shs_last_error(), "not registered"))
        fail_msg("extra tensor: %s", shs_last_error());
    shs_state_free(st);

    /* mis-shaped */
    static const uint64_t t34[2] = { 3, 4 };
    assert_int_equal(shs_state_create(&st), SHS_OK);
    tu_add_tensor(st, "w", SHS_KIND_MODEL, SHS_F32, 2, t34, w, NULL);
    tu_add_tensor(st, "b", SHS_KIND_MODEL, SHS_F32, 1, tu_b_shape, b, NULL);
    tu_add_tensor(st, "w.exp_avg", SHS_KIND_OPTIMIZER, SHS_F32, 2, tu_w_shape, wm, NULL);
    assert_int_equal(load_from(sp, st, NULL, NULL, 1, -1), SHS_EMISMATCH);
    TU_ASSERT_MSG_HAS("'w'");
    TU_ASSERT_MSG_HAS("3,4");
    TU_ASSERT_MSG_HAS("4,3");
    shs_state_free(st);

    /* wrong dtype */
    assert_int_equal(shs_state_create(&st), SHS_OK);
    tu_add_tensor(st, "w", SHS_KIND_MODEL, SHS_F16, 2, tu_w_shape, w16, NULL);
    tu_add_tensor(st, "b", SHS_KIND_MODEL, SHS_F32, 1, tu_b_shape, b, NULL);
    tu_add_tensor(st, "w.exp_avg", SHS_KIND_OPTIMIZER, SHS_F32, 2, tu_w_shape, wm, NULL);
    assert_int_equal(load_from(sp, st, NULL, NULL, 1, -1), SHS_EMISMATCH);
    TU_ASSERT_MSG_HAS("'w'");
    TU_ASSERT_MSG_HAS("F16");
    TU_ASSERT_MSG_HAS("F32");
    shs_state_free(st);

    /* non-strict: loads the rest, reports what it skipped */
    memset(w, 0, sizeof w);
    memset(wm, 0, sizeof wm);
    assert_int_equal(shs_state_create(&st), SHS_OK);
    tu_add_tensor(st, "w", SHS_KIND_MODEL, SHS_F32, 2, tu_w_shape, w, NULL);
    tu_add_tensor(st, "w.exp_avg", SHS_KIND_OPTIMIZER, SHS_F32, 2, tu_w_shape, wm, NULL);
    extra[0] = 42.0f;
    extra[1] = 43.0f;
    tu_add_tensor(st, "extra_registered", SHS_KIND_MODEL, SHS_F32, 1, two, extra, NULL);
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    int rc = load_nonstrict(sp, st, &res);
    if (rc != SHS_OK)
        fail_msg("non-strict: %s", shs_last_error());
    assert_int_equal(res.n_skipped, 2);
    assert_true(skipped_has(&res, "extra_registered"));
    assert_true(skipped_has(&res, "b"));
    /* many long names: every one listed (no fixed-size buffer to cut) */
    {
        shs_state *st2;
        assert_int_equal(shs_state_create(&st2), SHS_OK);
        tu_add_tensor(st2, "w", SHS_KIND_MODEL, SHS_F32, 2, tu_w_shape, w, NULL);
        tu_add_tensor(st2, "b", SHS_KIND_MODEL, SHS_F32, 1, tu_b_shape, b, NULL);
        tu_add_tensor(st2, "w.exp_avg", SHS_KIND_OPTIMIZER, SHS_F32, 2, tu_w_shape, wm, NULL);
        static float many[40][2];
        char nm[100];
        for (int i = 0; i < 40; i++) {
            snprintf(nm, sizeof nm, "model.layers.%02d.a_rather_long_registered_parameter_name", i);
            tu_add_tensor(st2, nm, SHS_KIND_MODEL, SHS_F32, 1, two, many[i], NULL);
        }
        shs_load_result r2 = SHS_LOAD_RESULT_INIT;
        TU_OK(load_nonstrict(sp, st2, &r2));
        assert_int_equal(r2.n_skipped, 40);
        for (int i = 0; i < 40; i++) {
            snprintf(nm, sizeof nm, "model.layers.%02d.a_rather_long_registered_parameter_name", i);
            assert_true(skipped_has(&r2, nm));
        }
        shs_state_free(st2);
    }
    for (int i = 0; i < 12; i++) {
        assert_true(w[i] == 3.0f + (float)i);
        assert_true(wm[i] == 6.0f + (float)i * 0.5f);
    }
    assert_true(extra[0] == 42.0f && extra[1] == 43.0f); /* untouched */
    shs_state_free(st);
    free(dir);
    free(sp);
}

/* ------------------------------------------------------------------ */
/* Fault injection                                                    */
/* ------------------------------------------------------------------ */

static long g_calls, g_fail_at;
static int g_errno, g_tracker_renamed;
static char g_failed_op[32];

static int count_fail(const char *op)
{
    if (g_fail_at && ++g_calls == g_fail_at) {
        snprintf(g_failed_op, sizeof g_failed_op, "%s", op);
        errno = g_errno;
        return 1;
    }
    return 0;
}
static ssize_t f_pwrite(int fd, const void *b, size_t n, off_t o)
{
    return count_fail("pwrite") ? -1 : shs__io_posix.pwrite(fd, b, n, o);
}
static int f_fsync(int fd)
{
    return count_fail("fsync") ? -1 : shs__io_posix.fsync(fd);
}
static int f_rename(const char *a, const char *b)
{
    if (count_fail("rename"))
        return -1;
    int r = shs__io_posix.rename(a, b);
    size_t lb = strlen(b), lt = strlen(TU_TRACKER);
    if (r == 0 && lb >= lt && strcmp(b + lb - lt, TU_TRACKER) == 0)
        g_tracker_renamed = 1;
    return r;
}
/* Opens for writing and directory opens (fsync) fail; a read-only open of
   a file (the previous save's metadata.json, read for an incremental
   save) is not a write-path call: its failure may degrade to a full
   save. */
static int f_open(const char *p, int fl, mode_t m)
{
    int writes = (fl & (O_WRONLY | O_RDWR | O_CREAT)) || (fl & O_DIRECTORY);
    return writes && count_fail("open") ? -1 : shs__io_posix.open(p, fl, m);
}
static int f_mkdir(const char *p, mode_t m)
{
    return count_fail("mkdir") ? -1 : shs__io_posix.mkdir(p, m);
}
static int f_link(const char *a, const char *b)
{
    return count_fail("link") ? -1 : shs__io_posix.link(a, b);
}
static int f_exchange(const char *a, const char *b)
{
    return count_fail("exchange") ? -1 : shs__io_posix.exchange(a, b);
}

static shs__io_ops g_fops;
static void fops_init(void)
{
    g_fops = shs__io_posix;
    g_fops.pwrite = f_pwrite;
    g_fops.fsync = f_fsync;
    g_fops.rename = f_rename;
    g_fops.open = f_open;
    g_fops.mkdir = f_mkdir;
    g_fops.link = f_link;
    g_fops.exchange = f_exchange;
}

/* One failure run: good saves (step 1; with incremental also step 2, so
   that the faulty save hard-links the frozen file), then a save with the
   N-th I/O call failing: of the next step, or (resave) of the last good
   step again (the exchange path).  Each save adds 100 to w; b and the
   blob never change.  Returns 1 when the faulty save succeeded. */
static int fault_run(const char *name, long n, int err, int incremental, int resave,
                     long *calls_out)
{
    char *sp = tu_subpath(name);
    small s;
    small_make(&s, 1.0f);
    shs_config c;
    tu_cfg_saving(&c, sp);
    c.fsync = 1;
    c.incremental = incremental;
    shs_manager *m;
    assert_int_equal(shs_manager_create(&m, &c, s.st), SHS_OK);
    int64_t good = incremental ? 2 : 1;
    for (int64_t k = 1; k <= good; k++) {
        if (k > 1)
            for (int i = 0; i < 12; i++)
                s.w[i] += 100.0f;
        shs_progress pk = progress_sample(k);
        assert_int_equal(shs_manager_save(m, &pk, 0), SHS_OK);
    }
    float good_off = 100.0f * (float)(good - 1), new_off = good_off + 100.0f;
    for (int i = 0; i < 12; i++)
        s.w[i] += 100.0f;
    int64_t fstep = resave ? good : good + 1;
    shs_progress p2 = progress_sample(fstep);
    g_calls = 0;
    g_fail_at = n;
    g_errno = err;
    g_tracker_renamed = 0;
    g_failed_op[0] = 0;
    shs__io_set(&g_fops);
    int rc = shs_manager_save(m, &p2, 0);
    if (rc == SHS_OK)
        rc = shs_manager_wait(m);
    shs__io_set(NULL);
    long calls = g_calls;
    g_fail_at = 0;
    *calls_out = calls;
    int ok = rc == SHS_OK;
    char good_s[32], new_s[32];
    snprintf(good_s, sizeof good_s, "%lld", (long long)good);
    snprintf(new_s, sizeof new_s, "%lld", (long long)fstep);
    if (ok) {
        /* success only when no call failed, or when the failed call was a
           hard link (incremental falls back to writing the data) */
        if (calls >= n && strcmp(g_failed_op, "link") != 0)
            fail_msg("%s: N=%ld: %s failed, but the save reported success", name, n, g_failed_op);
    } else {
        int want = err == ENOSPC ? SHS_ENOSPC : SHS_EIO;
        if (rc != want)
            fail_msg("%s: N=%ld (%s) gave %d (%s), expected %d", name, n, g_failed_op, rc,
                     shs_last_error(), want);
        if (!*shs_last_error())
            fail_msg("%s: N=%ld: empty message", name, n);
        char *t = tu_read_tracker(sp);
        assert_non_null(t);
        const char *want_t = g_tracker_renamed ? new_s : good_s;
        if (strcmp(t, want_t) != 0)
            fail_msg("%s: N=%ld (%s): tracker says '%s', expected '%s'", name, n, g_failed_op, t,
                     want_t);
        free(t);
    }
    shs_manager_free(m);

    /* the good step loads (explicitly and through the tracker) */
    small l;
    small_make(&l, 0);
    shs_progress q = SHS_PROGRESS_INIT;
    rc = load_from(sp, l.st, &q, NULL, 1, good);
    if (rc != SHS_OK)
        fail_msg("%s: N=%ld (%s): step %lld no longer loads: %s", name, n, g_failed_op,
                 (long long)good, shs_last_error());
    /* a re-save is either the old or the new content, whole */
    int is_new = resave && l.w[0] == 1.0f + new_off;
    for (int i = 0; i < 12; i++)
        if (l.w[i] != 1.0f + (float)i + (is_new ? new_off : good_off))
            fail_msg("%s: N=%ld (%s): w[%d] = %g", name, n, g_failed_op, i, l.w[i]);
    for (int i = 0; i < 3; i++)
        assert_true(l.b[i] == 1.0f - (float)i);
    if (resave && ok)
        assert_true(is_new);
    char gdir[64];
    snprintf(gdir, sizeof gdir, "iteration_%08lld", (long long)good);
    rc = shs_checkpoint_verify(tu_path(sp, gdir), NULL, 0);
    if (rc != SHS_OK)
        fail_msg("%s: N=%ld (%s): verify: %s", name, n, g_failed_op, shs_last_error());
    rc = load_from(sp, l.st, &q, NULL, 1, -1);
    if (rc != SHS_OK)
        fail_msg("%s: N=%ld (%s): tracker target does not load: %s", name, n, g_failed_op,
                 shs_last_error());
    shs_state_free(l.st);

    /* a new manager removes the leftovers */
    assert_int_equal(shs_manager_create(&m, &c, s.st), SHS_OK);
    int left = tu_count_leftovers(sp);
    if (left)
        fail_msg("%s: N=%ld (%s): %d leftovers after shs_manager_create", name, n, g_failed_op,
                 left);
    shs_manager_free(m);
    shs_state_free(s.st);
    tu_rmtree(sp);
    free(sp);
    return ok && calls < n;
}

static void fault_loop(const char *tag, int incremental, int resave)
{
    int errs[2] = { ENOSPC, EIO };
    for (int e = 0; e < 2; e++) {
        int failures = 0, done = 0;
        for (long n = 1; n < 400 && !done; n++) {
            char name[64];
            snprintf(name, sizeof name, "fault-%s-%d-%ld", tag, e, n);
            long calls;
            done = fault_run(name, n, errs[e], incremental, resave, &calls);
            if (!done)
                failures++;
        }
        assert_true(done);
        assert_true(failures >= 8);
    }
}

static void test_fault_injection(void **state)
{
    (void)state;
    fops_init();
    fault_loop("plain", 0, 0);
}

static void test_fault_injection_incremental(void **state)
{
    (void)state;
    fops_init();
    fault_loop("incr", 1, 0);
}

static void test_fault_injection_resave(void **state)
{
    (void)state;
    fops_init();
    fault_loop("resave", 0, 1);
}

static void test_leftovers_cleaned(void **state)
{
    (void)state;
    char *sp = NULL;
    char *dir = make_ckpt("left", 3, 1.0f, &sp);
    assert_int_equal(mkdir(tu_path(sp, ".tmp-iteration_00000004-0123456789abcdef"), 0755), 0);
    write_text(tu_path(sp, ".tmp-iteration_00000004-0123456789abcdef/metadata.json"), "{}");
    assert_int_equal(mkdir(tu_path(sp, ".trash-iteration_00000002-0123456789abcdef"), 0755), 0);
    assert_int_equal(mkdir(tu_path(sp, ".trash-iteration_00000002-0123456789abcdef/sub"), 0755), 0);
    write_text(tu_path(sp, ".trash-iteration_00000002-0123456789abcdef/sub/x"), "x");
    write_text(tu_path(sp, TU_TRACKER ".tmp.0123456789abcdef"), "4");
    /* not ours: stays */
    write_text(tu_path(sp, "notes.txt"), "keep me");
    assert_int_equal(tu_count_leftovers(sp), 3);
    small s;
    small_make(&s, 1.0f);
    shs_config c;
    tu_cfg_saving(&c, sp);
    shs_manager *m;
    assert_int_equal(shs_manager_create(&m, &c, s.st), SHS_OK);
    assert_int_equal(tu_count_leftovers(sp), 0);
    assert_true(tu_path_exists(tu_path(sp, "notes.txt")));
    assert_true(tu_path_exists(dir));
    assert_int_equal(shs_checkpoint_verify(dir, NULL, 0), SHS_OK);
    shs_manager_free(m);
    shs_state_free(s.st);
    free(dir);
    free(sp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_hostile_metadata),
        cmocka_unit_test(test_hostile_layout),
        cmocka_unit_test(test_hostile_json_edges),
        cmocka_unit_test(test_hostile_load_checks),
        cmocka_unit_test(test_step_limits),
        cmocka_unit_test(test_hostile_data_files),
        cmocka_unit_test(test_hostile_common),
        cmocka_unit_test(test_common_six_keys),
        cmocka_unit_test(test_hostile_tracker),
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_reshard),
        cmocka_unit_test(test_block_checksums),
        cmocka_unit_test(test_mismatch),
        cmocka_unit_test(test_fault_injection),
        cmocka_unit_test(test_fault_injection_incremental),
        cmocka_unit_test(test_fault_injection_resave),
        cmocka_unit_test(test_leftovers_cleaned),
    };
    return TU_RUN_GROUP(tests, tu_setup_root, tu_teardown_root);
}
