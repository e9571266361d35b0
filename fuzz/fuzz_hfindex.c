/*
 * fuzz_hfindex.c -- libFuzzer target for Hugging Face weights
 * (docs/hf.md): a folder made once at startup holds two small valid
 * shards (model-00001-of-00002.safetensors: a F32 [2,3], b BF16 [4];
 * model-00002-of-00002.safetensors: c I32 [2], d F16 [], e U8 [0,2]), a
 * shard whose name contains "-opt-" (facebook-opt-125m.safetensors: o
 * F32 [2]; model weights all the same), a stray valid file
 * (consolidated.safetensors: z F32 [2,3]), a file that is not
 * safetensors (config.json) and entries that are no regular file (a
 * directory "subdir", a FIFO "fifo", links "zero" to /dev/zero and "loop"
 * to itself, "dangling" to nothing).  The first byte picks the mode
 * (byte % 4), the rest is the input:
 *
 *   0, 1  the input is model.safetensors.index.json, opened with
 *         shs_checkpoint_open (0: the folder, 1: the index's path).  A
 *         failure is a documented status with a message.  A success means
 *         the index and the files agree exactly: every weight_map entry
 *         names a plain file name (shs_file_name_problem == NULL) that
 *         holds that tensor, the view holds exactly the weight_map's
 *         tensors, as model tensors of their dtype and shape, each reads back
 *         (shs_checkpoint_read) equal to the file's bytes.
 *   2     the input is an hf_name_map_file, applied by the manager's
 *         initial_load_in_hf load of the folder (a fixed valid index;
 *         registered, strict off: a, x F32 [2,3], b BF16 [4], y F32 [4],
 *         sc F32 [], c I32 [2], o F32 [2]).  The outcome is predicted from the
 *         input (parsed with jansson): a map that is not an object of
 *         non-empty strings is SHS_ECONFIG, two tensors of the files
 *         onto one name or a registered tensor fed a tensor of another
 *         shape or an incompatible dtype is SHS_EMISMATCH, anything else
 *         loads; on success each registered tensor holds the (converted)
 *         bytes of the file tensor renamed to it, or is untouched.
 *   3     the input (up to a NUL byte) is the hf_name_map rules
 *         (shs_config_set, then the same load), the outcome predicted
 *         the same way from the rules as docs/hf.md words them (an
 *         unbalanced '[', an item without exactly one '=', two rules for
 *         one prefix, a name that becomes empty: SHS_ECONFIG; the longest
 *         matching prefix wins).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shardsafe.h"

#define F1 "model-00001-of-00002.safetensors"
#define F2 "model-00002-of-00002.safetensors"
#define FZ "consolidated.safetensors"
#define FO "facebook-opt-125m.safetensors" /* "-opt-": still model weights */
#define INDEX "model.safetensors.index.json"

/* The tensors of the files. */
typedef struct ftensor {
    const char *name, *file;
    shs_dtype dt;
    size_t nd;
    uint64_t shape[2];
    unsigned char bytes[32];
    size_t len;
} ftensor;

#define NF 7
#define NIDX 6 /* the first NIDX are in the manager modes' index */
static ftensor g_f[NF] = {
    { "a", F1, SHS_F32, 2, { 2, 3 }, { 0 }, 24 }, { "b", F1, SHS_BF16, 1, { 4, 0 }, { 0 }, 8 },
    { "c", F2, SHS_I32, 1, { 2, 0 }, { 0 }, 8 },  { "d", F2, SHS_F16, 0, { 0, 0 }, { 0 }, 2 },
    { "e", F2, SHS_U8, 2, { 0, 2 }, { 0 }, 0 },   { "o", FO, SHS_F32, 1, { 2, 0 }, { 0 }, 8 },
    { "z", FZ, SHS_F32, 2, { 2, 3 }, { 0 }, 24 },
};

/* The registered tensors of the manager modes. */
typedef struct rtensor {
    const char *name;
    shs_dtype dt;
    size_t nd;
    uint64_t shape[2];
    size_t len;
} rtensor;

#define NR 7
static const rtensor k_r[NR] = {
    { "a", SHS_F32, 2, { 2, 3 }, 24 }, { "x", SHS_F32, 2, { 2, 3 }, 24 },
    { "b", SHS_BF16, 1, { 4, 0 }, 8 }, { "y", SHS_F32, 1, { 4, 0 }, 16 },
    { "sc", SHS_F32, 0, { 0, 0 }, 4 }, { "c", SHS_I32, 1, { 2, 0 }, 8 },
    { "o", SHS_F32, 1, { 2, 0 }, 8 },
};

static const char k_index[] = "{\"metadata\": {\"total_size\": 42}, \"weight_map\": {\"a\": \"" F1
                              "\", \"b\": \"" F1 "\", \"c\": \"" F2 "\", \"d\": \"" F2
                              "\", \"e\": \"" F2 "\", \"o\": \"" FO "\"}}";

static char g_root[256], g_dir[300], g_index[400], g_map[300];

static void cleanup(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_root);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz_hfindex: could not remove %s\n", g_root);
}

static void put(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    if (len)
        fwrite(data, 1, len, f);
    fclose(f);
}

static void save(const char *file, int first, int n)
{
    char p[400];
    shs_tensor_view v[3];
    for (int i = 0; i < n; i++)
        v[i] = (shs_tensor_view){ g_f[first + i].name, g_f[first + i].dt, g_f[first + i].nd,
                                  g_f[first + i].shape, g_f[first + i].bytes };
    snprintf(p, sizeof p, "%s/%s", g_dir, file);
    if (shs_save_file(p, v, (size_t)n, NULL, 0, NULL) != SHS_OK)
        abort();
}

static void setup(void)
{
    if (g_root[0])
        return;
    snprintf(g_root, sizeof g_root, "/tmp/shs-fuzz-hfindex-%d", (int)getpid());
    snprintf(g_dir, sizeof g_dir, "%s/hf", g_root);
    snprintf(g_index, sizeof g_index, "%s/" INDEX, g_dir);
    snprintf(g_map, sizeof g_map, "%s/names.json", g_root);
    if (mkdir(g_root, 0755) != 0 || mkdir(g_dir, 0755) != 0)
        abort();
    atexit(cleanup);
    float a[6] = { 1.5f, -2, 3, 4.25f, 5, 6 }, z[6] = { 9, 8, 7, 6, 5, 4 };
    uint16_t b[4] = { 0x3f80, 0x4000, 0xc040, 0x4080 }; /* 1 2 -3 4 */
    int32_t c[2] = { 7, -9 };
    uint16_t d = 0x3c00; /* 1.0 */
    memcpy(g_f[0].bytes, a, sizeof a);
    memcpy(g_f[1].bytes, b, sizeof b);
    memcpy(g_f[2].bytes, c, sizeof c);
    memcpy(g_f[3].bytes, &d, sizeof d);
    float o[2] = { -0.5f, 0.25f };
    memcpy(g_f[5].bytes, o, sizeof o);
    memcpy(g_f[6].bytes, z, sizeof z);
    save(F1, 0, 2);
    save(F2, 2, 3);
    save(FO, 5, 1);
    save(FZ, 6, 1);
    char p[400];
    snprintf(p, sizeof p, "%s/config.json", g_dir);
    put(p, "{\"architectures\": [\"X\"], \"hidden_size\": 6}", 42);
    /* no regular files: never read, never waited on (a FIFO) */
    snprintf(p, sizeof p, "%s/subdir", g_dir);
    if (mkdir(p, 0755) != 0)
        abort();
    snprintf(p, sizeof p, "%s/fifo", g_dir);
    if (mkfifo(p, 0644) != 0)
        abort();
    static const char *const links[3][2] = { { "/dev/zero", "zero" },
                                             { "loop", "loop" },
                                             { "missing", "dangling" } };
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", g_dir, links[i][1]);
        if (symlink(links[i][0], p) != 0)
            abort();
    }
}

static const ftensor *file_tensor(const char *name)
{
    for (int i = 0; i < NF; i++)
        if (!strcmp(g_f[i].name, name))
            return &g_f[i];
    return NULL;
}

static int same_shape(size_t nd, const uint64_t *s, size_t nd2, const uint64_t *s2)
{
    if (nd != nd2)
        return 0;
    for (size_t d = 0; d < nd; d++)
        if (s[d] != s2[d])
            return 0;
    return 1;
}

static int is_float(shs_dtype t)
{
    return t == SHS_F32 || t == SHS_BF16 || t == SHS_F16 || t == SHS_F64;
}

/* ---- modes 0 and 1: the index through the read API ---- */

static void check_index_view(const shs_checkpoint *c, const uint8_t *data, size_t size)
{
    json_error_t je;
    json_t *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    json_t *wm = json_object_get(root, "weight_map");
    const char *key;
    json_t *v;
    if (!json_is_object(wm))
        abort(); /* opened without a weight_map */
    json_object_foreach(wm, key, v)
    {
        const char *fname = json_string_value(v);
        const ftensor *t = file_tensor(key);
        if (!fname || shs_file_name_problem(fname) != NULL || !t || strcmp(t->file, fname) != 0) {
            fprintf(stderr, "fuzz_hfindex: opened, but maps '%s' to '%s'\n", key,
                    fname ? fname : "(not a string)");
            abort();
        }
    }
    if (shs_checkpoint_tensor_count(c) != json_object_size(wm) || shs_checkpoint_world_size(c) != 1)
        abort();
    for (size_t i = 0; i < shs_checkpoint_file_count(c); i++)
        if (shs_file_name_problem(shs_checkpoint_file_name(c, i)) != NULL)
            abort();
    for (size_t i = 0; i < shs_checkpoint_tensor_count(c); i++) {
        const shs_checkpoint_tensor_info *ti = shs_checkpoint_tensor(c, i);
        const ftensor *t = file_tensor(ti->name);
        /* Hugging Face weights are model weights, whatever the file name */
        if (!t || !json_object_get(wm, ti->name) || ti->dtype != t->dt || ti->n_chunks != 1 ||
            ti->kind != SHS_KIND_MODEL || !same_shape(ti->ndim, ti->shape, t->nd, t->shape))
            abort();
        shs_chunk_info ci = SHS_CHUNK_INFO_INIT;
        if (shs_checkpoint_chunk(&ci, c, i, 0) != SHS_OK ||
            ci.file >= shs_checkpoint_file_count(c) ||
            strcmp(shs_checkpoint_file_name(c, ci.file), t->file) != 0)
            abort();
        uint64_t zero[2] = { 0, 0 };
        unsigned char buf[32];
        memset(buf, 0xee, sizeof buf);
        if (shs_checkpoint_read(c, i, zero, t->shape, t->dt, buf, t->len) != SHS_OK) {
            fprintf(stderr, "fuzz_hfindex: '%s' does not read back: %s\n", t->name,
                    shs_last_error());
            abort();
        }
        if (memcmp(buf, t->bytes, t->len) != 0)
            abort();
    }
    json_decref(root);
}

static void run_index(const uint8_t *data, size_t size, int by_file)
{
    put(g_index, data, size);
    shs_checkpoint *c = NULL;
    int rc = shs_checkpoint_open(&c, by_file ? g_index : g_dir);
    if (getenv("SHS_FUZZ_VERBOSE"))
        fprintf(stderr, "fuzz_hfindex: open %d %s\n", rc, rc ? shs_last_error() : "");
    if (rc == SHS_OK) {
        check_index_view(c, data, size);
        shs_checkpoint_free(c);
        return;
    }
    if (shs_last_error()[0] == '\0')
        abort(); /* a failure always says why */
    /* docs/hf.md: SHS_ECORRUPT, an empty weight_map SHS_ENOCHECKPOINT, a
       file that is not safetensors the reader's own status (the format
       statuses; SHS_EINVAL for no regular file, SHS_EIO when it cannot be
       opened) */
    if (rc != SHS_ECORRUPT && rc != SHS_ENOCHECKPOINT && rc != SHS_EINVAL && rc != SHS_EIO &&
        !(rc <= SHS_EHEADER_TOO_SMALL && rc >= SHS_ECONVERT)) {
        fprintf(stderr, "fuzz_hfindex: status %d: %s\n", rc, shs_last_error());
        abort();
    }
}

/* ---- modes 2 and 3: renaming through the manager's load ---- */

/* The bytes registered tensor r gets from file tensor t. */
static void expected(unsigned char *out, const rtensor *r, const ftensor *t)
{
    size_t n = 1;
    for (size_t d = 0; d < r->nd; d++)
        n *= r->shape[d];
    if (r->dt == t->dt)
        memcpy(out, t->bytes, r->len);
    else if (shs_convert(out, r->dt, t->bytes, t->dt, n) != SHS_OK)
        abort();
}

static int compatible(const rtensor *r, const ftensor *t)
{
    return same_shape(r->nd, r->shape, t->nd, t->shape) &&
           (r->dt == t->dt || (is_float(r->dt) && is_float(t->dt)));
}

/* The outcome of the new names of the index's tensors: two onto one
   name, or a registered tensor fed a tensor of another shape or an
   incompatible dtype, is SHS_EMISMATCH; from[k] is the file tensor
   registered tensor k gets (NULL: none). */
static int settle(char *const *newname, const ftensor **from)
{
    for (int i = 0; i < NIDX; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(newname[i], newname[j]))
                return SHS_EMISMATCH;
    int rc = SHS_OK;
    for (int k = 0; k < NR; k++) {
        from[k] = NULL;
        for (int i = 0; i < NIDX; i++)
            if (!strcmp(newname[i], k_r[k].name))
                from[k] = &g_f[i];
        if (from[k] && !compatible(&k_r[k], from[k]))
            rc = SHS_EMISMATCH;
    }
    return rc;
}

/* The new names by map file `map` (NULL: unparsable); a map that is not
   an object of non-empty strings is SHS_ECONFIG. */
static int predict_map(const json_t *map, char **newname)
{
    const char *key;
    json_t *v;
    if (!json_is_object(map))
        return SHS_ECONFIG;
    json_object_foreach((json_t *)map, key, v)
    {
        if (!json_is_string(v) || json_string_length(v) == 0 ||
            strlen(json_string_value(v)) != json_string_length(v))
            return SHS_ECONFIG;
    }
    for (int i = 0; i < NIDX; i++) {
        const char *s = json_string_value(json_object_get(map, g_f[i].name));
        if (!(newname[i] = strdup(s ? s : g_f[i].name)))
            abort();
    }
    return SHS_OK;
}

static int blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static void strip(const char **b, const char **e)
{
    while (*b < *e && blank(**b))
        (*b)++;
    while (*e > *b && blank((*e)[-1]))
        (*e)--;
}

/* The new names by the rules `text`, read as docs/hf.md words them:
   items separated by commas, optionally in [ ], each optionally quoted,
   blanks around items and around both sides of its one '=' ignored,
   empty items skipped; the longest matching prefix wins.  SHS_ECONFIG:
   an unbalanced '[', an item without exactly one '=', two rules with
   the same prefix, a name that becomes empty. */
static int predict_rules(const char *text, char **newname)
{
    const char *p = text, *end = text + strlen(text);
    size_t n = 0, cap = 1;
    int rc = SHS_OK;
    for (const char *q = text; *q; q++)
        cap += *q == ',';
    const char **from = calloc(cap, sizeof *from), **to = calloc(cap, sizeof *to);
    size_t *flen = calloc(cap, sizeof *flen), *tlen = calloc(cap, sizeof *tlen);
    if (!from || !to || !flen || !tlen)
        abort();
    strip(&p, &end);
    if (p < end && *p == '[') {
        if (end[-1] != ']')
            rc = SHS_ECONFIG;
        p++;
        end--;
    }
    while (rc == SHS_OK && p < end) {
        const char *b = p, *e = memchr(p, ',', (size_t)(end - p));
        e = e ? e : end;
        p = e < end ? e + 1 : end;
        strip(&b, &e);
        if (e - b >= 2 && (*b == '"' || *b == '\'') && e[-1] == *b) {
            b++;
            e--;
        }
        if (b == e)
            continue;
        const char *eq = memchr(b, '=', (size_t)(e - b));
        if (!eq || memchr(eq + 1, '=', (size_t)(e - eq - 1))) {
            rc = SHS_ECONFIG;
            break;
        }
        const char *fb = b, *fe = eq, *tb = eq + 1, *te = e;
        strip(&fb, &fe);
        strip(&tb, &te);
        for (size_t i = 0; i < n; i++)
            if (flen[i] == (size_t)(fe - fb) && !memcmp(from[i], fb, flen[i]))
                rc = SHS_ECONFIG;
        from[n] = fb;
        flen[n] = (size_t)(fe - fb);
        to[n] = tb;
        tlen[n++] = (size_t)(te - tb);
    }
    for (int i = 0; rc == SHS_OK && i < NIDX; i++) {
        const char *name = g_f[i].name;
        size_t len = strlen(name), best = SIZE_MAX;
        for (size_t k = 0; k < n; k++)
            if (flen[k] <= len && !memcmp(from[k], name, flen[k]) &&
                (best == SIZE_MAX || flen[k] > flen[best]))
                best = k;
        size_t keep = best == SIZE_MAX ? 0 : flen[best], add = best == SIZE_MAX ? 0 : tlen[best];
        if (!(newname[i] = malloc(add + len - keep + 1)))
            abort();
        memcpy(newname[i], best == SIZE_MAX ? "" : to[best], add);
        memcpy(newname[i] + add, name + keep, len - keep + 1);
        if (!newname[i][0])
            rc = SHS_ECONFIG;
    }
    free(from);
    free(to);
    free(flen);
    free(tlen);
    return rc;
}

static void run_manager(const uint8_t *data, size_t size, int rules)
{
    static unsigned char buf[NR][32];
    char *text = NULL;
    shs_config c;
    shs_config_init(&c);
    c.enable_save = 0;
    c.initial_load_in_hf = 1;
    c.initial_load_path = g_dir;
    c.strict = 0;
    put(g_index, k_index, sizeof k_index - 1);
    if (rules) {
        if (!(text = malloc(size + 1)))
            abort();
        memcpy(text, data, size);
        text[size] = '\0';
        int rc = shs_config_set(&c, "hf_name_map", text);
        if (rc != SHS_OK) {
            char *nn[NIDX] = { NULL };
            if (rc != SHS_ECONFIG || shs_last_error()[0] == '\0' ||
                predict_rules(text, nn) != SHS_ECONFIG)
                abort();
            for (int i = 0; i < NIDX; i++)
                free(nn[i]);
            free(text);
            shs_config_release(&c);
            return;
        }
    } else {
        put(g_map, data, size);
        c.hf_name_map_file = g_map;
    }
    shs_state *st = NULL;
    if (shs_state_create(&st) != SHS_OK)
        abort();
    for (int k = 0; k < NR; k++) {
        shs_tensor_spec sp = SHS_TENSOR_SPEC_INIT;
        memset(buf[k], 0xee, sizeof buf[k]);
        sp.name = k_r[k].name;
        sp.dtype = k_r[k].dt;
        sp.ndim = k_r[k].nd;
        sp.shape = k_r[k].shape;
        sp.data = buf[k];
        if (shs_state_add_tensor(st, &sp) != SHS_OK)
            abort();
    }
    shs_manager *m = NULL;
    shs_progress p = SHS_PROGRESS_INIT;
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    int rc = shs_manager_create(&m, &c, st);
    if (rc == SHS_OK)
        rc = shs_manager_load(&res, m, &p);
    if (getenv("SHS_FUZZ_VERBOSE"))
        fprintf(stderr, "fuzz_hfindex: load %d %s\n", rc, rc ? shs_last_error() : "");

    const ftensor *from[NR] = { NULL };
    char *newname[NIDX] = { NULL };
    int want;
    if (rules) {
        want = predict_rules(text, newname);
    } else {
        json_error_t je;
        json_t *map = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
        want = predict_map(map, newname);
        json_decref(map);
    }
    if (want == SHS_OK)
        want = settle(newname, from);
    for (int i = 0; i < NIDX; i++)
        free(newname[i]);
    free(text);
    if (rc != want) {
        fprintf(stderr, "fuzz_hfindex: the %s should give %d, got %d: %s\n",
                rules ? "rules" : "map", want, rc, rc ? shs_last_error() : "");
        abort();
    }
    if (rc == SHS_OK) {
        if (!res.loaded || res.source != SHS_LOAD_INITIAL)
            abort();
        for (int k = 0; k < NR; k++) {
            unsigned char e[32], untouched[32];
            memset(untouched, 0xee, sizeof untouched);
            if (from[k])
                expected(e, &k_r[k], from[k]);
            if (memcmp(buf[k], from[k] ? e : untouched, k_r[k].len) != 0) {
                fprintf(stderr, "fuzz_hfindex: registered '%s' holds wrong bytes\n", k_r[k].name);
                abort();
            }
        }
    } else if (shs_last_error()[0] == '\0') {
        abort(); /* a failure always says why */
    }
    shs_manager_free(m);
    shs_state_free(st);
    shs_config_release(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size == 0)
        return 0;
    int mode = data[0] % 4;
    if (mode < 2)
        run_index(data + 1, size - 1, mode);
    else
        run_manager(data + 1, size - 1, mode == 3);
    return 0;
}
