/*
 * config.c -- the checkpoint configuration: defaults and a table-driven
 * setter keyed by the exact field names (plus the names torchtitan uses
 * for some of them).  Reading a YAML file is in config_yaml.c.
 */
#include "manager/config_impl.h"

#include "common/opts.h"
#include "source/hf_load.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* ---- the field table: the one place that lists the accepted names ---- */

#define FLAG(n)                                                                                    \
    {                                                                                              \
#n, F_FLAG, offsetof(shs_config, n), 0, NULL                                               \
    }
#define INT(n, lo)                                                                                 \
    {                                                                                              \
#n, F_INT, offsetof(shs_config, n), lo, NULL                                               \
    }
#define I64(n, lo)                                                                                 \
    {                                                                                              \
#n, F_I64, offsetof(shs_config, n), lo, NULL                                               \
    }
#define STR(n, d)                                                                                  \
    {                                                                                              \
#n, F_STR, offsetof(shs_config, n), 0, d                                                   \
    }

static const field g_fields[] = {
    FLAG(enable_save),
    STR(save_path, ""),
    I64(save_interleaved_steps, 1),
    INT(save_max, 0),
    INT(keep_latest_k, 0),
    STR(prefix, "checkpoint"),
    FLAG(no_save_optim),
    FLAG(async_save),
    FLAG(remove_redundancy),
    FLAG(save_global_layout_cache),
    FLAG(enable_first_step_checkpoint),
    FLAG(last_save_model_only),
    FLAG(incremental),
    FLAG(fsync),
    FLAG(load_only),
    FLAG(create_seed_checkpoint),
    STR(load_path, ""),
    I64(load_step, -1),
    FLAG(no_load_optim),
    { "exclude_from_loading", F_EXCLUDE, offsetof(shs_config, exclude_from_loading), 0, NULL },
    STR(initial_load_path, ""),
    FLAG(initial_load_model_only),
    FLAG(resume_fallback),
    FLAG(load_balanced),
    INT(load_worker_number, 1),
    FLAG(strict),
    /* version 2 */
    FLAG(initial_load_in_hf),
    STR(hf_assets_path, ""),
    { "hf_name_map", F_RULES, offsetof(shs_config, hf_name_map), 0, "" },
    STR(hf_name_map_file, ""),
    /* version 3 */
    STR(encrypt_key_file, ""),
    STR(encrypt_key_env, ""),
    FLAG(last_save_in_hf),
    { "export_dtype", F_DTYPE, offsetof(shs_config, export_dtype), 0, "" },
    /* version 4 */
    FLAG(allow_unencrypted_resume),
    FLAG(enable),
    FLAG(initial_load_in_hf_quantized),
};
#define N_FIELDS (sizeof g_fields / sizeof g_fields[0])

static const struct {
    const char *name;
    unsigned bit;
} g_exclude_items[] = {
    { "optimizer", SHS_EXCLUDE_OPTIMIZER },
    { "lr_scheduler", SHS_EXCLUDE_LR_SCHEDULER },
    { "dataloader", SHS_EXCLUDE_DATALOADER },
    { "train_state", SHS_EXCLUDE_TRAIN_STATE },
    { "rng", SHS_EXCLUDE_RNG },
};

/* ---- names other frameworks use for our fields ----
 * torchtitan's [checkpoint] section names some fields differently; they
 * are accepted as aliases.  Options we do not implement yet are accepted
 * only at their default value, so that a config relying on them fails
 * loudly instead of being half-honoured. */

static const alias g_aliases[] = {
    { "folder", A_RENAME, "save_path", NULL, 0 },
    { "interval", A_RENAME, "save_interleaved_steps", NULL, 0 },
    { "async_mode", A_ASYNC_MODE, "async_save", NULL, 0 },
};
#define N_ALIASES (sizeof g_aliases / sizeof g_aliases[0])
/* "seen" bits: one per field, then one per reserved name */
_Static_assert(N_FIELDS + N_ALIASES <= 64, "duplicate-key mask is a uint64_t");

/* Names of other frameworks that are not aliases here but close to one of
   ours, for the "did you mean" of an unknown key. */
static const struct {
    const char *foreign, *ours;
} g_hints[] = {
    { "save_checkpoint_steps", "save_interleaved_steps" },
    { "keep_checkpoint_max", "save_max" },
    { "load_checkpoint", "load_path" },
    { "enable_checkpoint", "enable_save" },
    { "directory", "save_path" },
    { "save_dir", "save_path" },
    { "async_checkpoint", "async_save" },
    /* MindSpore's load_checkpoint / load_distributed_checkpoint arguments
       and CheckpointConfig names (seeds 000, 004) */
    { "strict_load", "strict" },
    { "checkpoint_path", "load_path" },
    { "ckpt_file_name", "load_path" },
    { "reshard_worker_num", "load_worker_number" },
    { "max_process_num", "load_worker_number" },
};

#define FIELD_PTR(cfg, f, type) ((type *)(void *)((char *)(cfg) + (f)->offset))

void shs_config_init(shs_config *config)
{
    if (!config)
        return;
    *config = (shs_config){
        .version = SHS_CONFIG_VERSION,
        .enable_save = 1,
        .save_path = "",
        .save_interleaved_steps = 1000,
        .save_max = 5,
        .keep_latest_k = 0,
        .prefix = "checkpoint",
        .no_save_optim = 0,
        .async_save = 0,
        .remove_redundancy = 0,
        .save_global_layout_cache = 1,
        .enable_first_step_checkpoint = 0,
        .last_save_model_only = 0,
        .incremental = 0,
        .fsync = 1,
        .load_only = 0,
        .create_seed_checkpoint = 0,
        .load_path = "",
        .load_step = -1,
        .no_load_optim = 0,
        .exclude_from_loading = 0,
        .initial_load_path = "",
        .initial_load_model_only = 1,
        .resume_fallback = 0,
        .load_balanced = 0,
        .load_worker_number = 1,
        .strict = 1,
        .strings = NULL,
        .initial_load_in_hf = 0,
        .hf_assets_path = "",
        .hf_name_map = "",
        .hf_name_map_file = "",
        .encrypt_key_file = "",
        .encrypt_key_env = "",
        .last_save_in_hf = 0,
        .export_dtype = "",
        .allow_unencrypted_resume = 0,
        .enable = 1,
        .initial_load_in_hf_quantized = 0,
    };
}

size_t shs__config_size(const shs_config *cfg)
{
    return shs__version_size(cfg, SHS__V_CONFIG);
}

/* The field exists in the caller's version of the struct. */
static int has_field(const shs_config *cfg, const field *f)
{
    return f->offset < shs__config_size(cfg);
}

static int is_string(const field *f)
{
    return f->kind == F_STR || f->kind == F_RULES || f->kind == F_DTYPE;
}

int shs__config_is_referenced(const shs_config *cfg, const char *s)
{
    for (size_t i = 0; i < N_FIELDS; i++)
        if (is_string(&g_fields[i]) && has_field(cfg, &g_fields[i]) &&
            *FIELD_PTR(cfg, &g_fields[i], const char *const) == s)
            return 1;
    return 0;
}

void shs__config_free_owned(owned_str *n)
{
    while (n) {
        owned_str *next = n->next;
        shs__free(n);
        n = next;
    }
}

void shs_config_release(shs_config *config)
{
    if (!config)
        return;
    for (owned_str *n = config->strings; n; n = n->next)
        for (size_t i = 0; i < N_FIELDS; i++) {
            const field *f = &g_fields[i];
            if (is_string(f) && has_field(config, f) && *FIELD_PTR(config, f, const char *) == n->s)
                *FIELD_PTR(config, f, const char *) = f->str_default;
        }
    shs__config_free_owned(config->strings);
    config->strings = NULL;
}

static const field *find_field(const char *name, size_t len)
{
    for (size_t i = 0; i < N_FIELDS; i++)
        if (strlen(g_fields[i].name) == len && memcmp(g_fields[i].name, name, len) == 0)
            return &g_fields[i];
    return NULL;
}


int shs__config_resolve_key(key_ref *out, const char *name, size_t len)
{
    const field *f = find_field(name, len);
    if (f) {
        *out = (key_ref){ f, NULL, (unsigned)(f - g_fields) };
        return 1;
    }
    for (size_t i = 0; i < N_ALIASES; i++) {
        const alias *a = &g_aliases[i];
        if (strlen(a->name) != len || memcmp(a->name, name, len) != 0)
            continue;
        if (a->kind == A_RESERVED) {
            *out = (key_ref){ NULL, a, (unsigned)(N_FIELDS + i) };
        } else {
            /* a target missing from g_fields would be a bug of the tables
               (every alias is tested): the name is then unknown */
            if (!(f = find_field(a->target, strlen(a->target))))
                return 0;
            *out = (key_ref){ f, a, (unsigned)(f - g_fields) };
        }
        return 1;
    }
    return 0;
}

/* Levenshtein distance, for names of at most 63 bytes. */
static size_t edit_distance(const char *a, size_t al, const char *b, size_t bl)
{
    size_t row[64];
    for (size_t j = 0; j <= bl; j++)
        row[j] = j;
    for (size_t i = 1; i <= al; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= bl; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[bl];
}

static void consider(const char **best, size_t *best_d, const char *cand, const char *key,
                     size_t len)
{
    size_t cl = strlen(cand);
    if (cl >= 64)
        return;
    size_t d = edit_distance(key, len, cand, cl);
    if (d < *best_d) {
        *best_d = d;
        *best = cand;
    }
}

const char *shs__config_suggest(const char *key, size_t len, const char *const *extra,
                                size_t n_extra)
{
    for (size_t i = 0; i < sizeof g_hints / sizeof g_hints[0]; i++)
        if (strlen(g_hints[i].foreign) == len && memcmp(g_hints[i].foreign, key, len) == 0)
            return g_hints[i].ours;
    if (len >= 64)
        return NULL;
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (size_t i = 0; i < N_FIELDS; i++)
        consider(&best, &best_d, g_fields[i].name, key, len);
    for (size_t i = 0; i < N_ALIASES; i++)
        consider(&best, &best_d, g_aliases[i].name, key, len);
    for (size_t i = 0; i < n_extra; i++)
        consider(&best, &best_d, extra[i], key, len);
    size_t limit = len / 3 > 2 ? len / 3 : 2;
    return best_d <= limit ? best : NULL;
}

/* "unknown checkpoint field 'x'" with a suggestion; `where` is "" or
   "file:line: ". */
int shs__config_unknown_key(const char *where, const char *key, size_t len)
{
    const char *s = shs__config_suggest(key, len, NULL, 0);
    int shown = len > 200 ? 200 : (int)len;
    if (s)
        return shs__err(SHS_ECONFIG, "%sunknown checkpoint field '%.*s' (did you mean '%s'?)",
                        where, shown, key, s);
    return shs__err(SHS_ECONFIG, "%sunknown checkpoint field '%.*s'", where, shown, key);
}

static int ascii_ieq(const char *a, const char *b)
{
    for (; *a && *b; a++, b++) {
        char x = *a, y = *b;
        if (x >= 'A' && x <= 'Z')
            x = (char)(x - 'A' + 'a');
        if (y >= 'A' && y <= 'Z')
            y = (char)(y - 'A' + 'a');
        if (x != y)
            return 0;
    }
    return *a == *b;
}

/* YAML 1.1 booleans as training configs write them. */
int shs__config_parse_flag(int *out, const char *v)
{
    if (!strcmp(v, "1") || ascii_ieq(v, "true") || ascii_ieq(v, "yes")) {
        *out = 1;
        return 0;
    }
    if (!strcmp(v, "0") || ascii_ieq(v, "false") || ascii_ieq(v, "no")) {
        *out = 0;
        return 0;
    }
    return -1;
}

/* Strict decimal: optional '-', digits only.  Returns 0, -1 (syntax) or
   -2 (does not fit int64_t). */
static int parse_i64(int64_t *out, const char *v)
{
    const char *p = v;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    if (!*p)
        return -1;
    uint64_t acc = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    int overflow = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        unsigned d = (unsigned)(*p - '0');
        if (acc > (limit - d) / 10)
            overflow = 1; /* keep scanning: "9999x" is a syntax error */
        else
            acc = acc * 10 + d;
    }
    if (overflow)
        return -2;
    *out = neg ? (acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc) : (int64_t)acc;
    return 0;
}

static const char *int_expectation(int64_t min)
{
    switch (min) {
    case 0: return "a non-negative integer";
    case 1: return "a positive integer";
    case -1: return "an integer >= -1";
    default: return "an integer";
    }
}

/* A comma/space separated list, optionally in YAML flow brackets, items
   optionally quoted: "optimizer, rng", "[optimizer, 'rng']", "". */
static int parse_exclude(unsigned *out, const char *name, const char *v)
{
    const char *p = v, *end = v + strlen(v);
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if (p < end && *p == '[') {
        if (end[-1] != ']')
            return shs__err(SHS_ECONFIG, "%s: unbalanced '[' in '%s'", name, v);
        p++;
        end--;
    }
    unsigned mask = 0;
    while (p < end) {
        if (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') {
            p++;
            continue;
        }
        const char *tok = p;
        while (p < end && *p != ',' && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            p++;
        size_t len = (size_t)(p - tok);
        if (len >= 2 && (tok[0] == '\'' || tok[0] == '"') && tok[len - 1] == tok[0]) {
            tok++;
            len -= 2;
        }
        size_t i;
        for (i = 0; i < sizeof g_exclude_items / sizeof g_exclude_items[0]; i++)
            if (strlen(g_exclude_items[i].name) == len &&
                memcmp(g_exclude_items[i].name, tok, len) == 0)
                break;
        if (i == sizeof g_exclude_items / sizeof g_exclude_items[0])
            return shs__err(SHS_ECONFIG,
                            "%s: unknown item '%.*s' (expected optimizer, "
                            "lr_scheduler, dataloader, train_state, rng)",
                            name, (int)len, tok);
        mask |= g_exclude_items[i].bit;
    }
    *out = mask;
    return SHS_OK;
}

static int set_string(shs_config *cfg, const field *f, const char *v)
{
    size_t len = strlen(v);
    owned_str *node = shs__malloc(sizeof *node + len + 1);
    if (!node)
        return shs__err(SHS_ENOMEM, "%s: out of memory", f->name);
    memcpy(node->s, v, len + 1);

    const char **slot = FIELD_PTR(cfg, f, const char *);
    /* Unlink and free the string this field owned before, unless another
       field still points at it (it cannot today, but stay safe). */
    const char *old = *slot;
    *slot = node->s;
    owned_str **pp = (owned_str **)&cfg->strings;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->s == old) {
            if (!shs__config_is_referenced(cfg, old)) {
                owned_str *dead = *pp;
                *pp = dead->next;
                shs__free(dead);
            }
            break;
        }
    node->next = cfg->strings;
    cfg->strings = node;
    return SHS_OK;
}

/* Parse `v` for field `f` and store it; the config is unchanged on error.
   Messages name the key as the user wrote it (`name`, maybe an alias). */
static int set_field(shs_config *cfg, const field *f, const char *name, const char *v)
{
    switch (f->kind) {
    case F_FLAG: {
        int b;
        if (shs__config_parse_flag(&b, v) < 0)
            return shs__err(SHS_ECONFIG,
                            "%s: expected a boolean (true/false/yes/no/1/0), "
                            "got '%s'",
                            name, v);
        *FIELD_PTR(cfg, f, int) = b;
        return SHS_OK;
    }
    case F_INT:
    case F_I64: {
        int64_t x;
        int r = parse_i64(&x, v);
        int64_t max = f->kind == F_INT ? INT32_MAX : INT64_MAX;
        if (r == -1)
            return shs__err(SHS_ECONFIG, "%s: expected %s, got '%s'", name, int_expectation(f->min),
                            v);
        if (r == -2 || x > max)
            return shs__err(SHS_ECONFIG, "%s: expected %s, got '%s' (out of range)", name,
                            int_expectation(f->min), v);
        if (x < f->min)
            return shs__err(SHS_ECONFIG, "%s: expected %s, got '%s'", name, int_expectation(f->min),
                            v);
        if (f->kind == F_INT)
            *FIELD_PTR(cfg, f, int) = (int)x;
        else
            *FIELD_PTR(cfg, f, int64_t) = x;
        return SHS_OK;
    }
    case F_STR: return set_string(cfg, f, v);
    case F_RULES: {
        int rc = shs__hf_rules_check(v, name);
        return rc < 0 ? rc : set_string(cfg, f, v);
    }
    case F_DTYPE: {
        shs_dtype d;
        if (*v && shs_dtype_parse_alias(&d, v) < 0)
            return shs__err(SHS_ECONFIG,
                            "%s: unknown dtype '%s' (expected bfloat16/bf16, float16/fp16, "
                            "float32/fp32, float64, float8_e4m3fn, float8_e5m2, or \"\" to keep "
                            "the saved dtypes)",
                            name, v);
        return set_string(cfg, f, v);
    }
    case F_EXCLUDE: {
        unsigned mask = 0;
        int rc = parse_exclude(&mask, name, v);
        if (rc < 0)
            return rc;
        *FIELD_PTR(cfg, f, unsigned) = mask;
        return SHS_OK;
    }
    }
    return shs__err(SHS_EINVAL, "%s: bad field kind", f->name);
}

/* A reserved name (not implemented): only its default is accepted. */
static int check_reserved(const alias *a, const char *name, const char *v)
{
    int is_default;
    if (a->is_flag) {
        int b;
        if (shs__config_parse_flag(&b, v) < 0)
            return shs__err(SHS_ECONFIG, "%s: expected a boolean (true/false/yes/no/1/0), got '%s'",
                            name, v);
        is_default = b == 0;
    } else {
        is_default = !*v || !strcmp(v, a->dflt);
    }
    if (!is_default)
        return shs__err(SHS_ECONFIG,
                        "%s: '%s' is not yet supported by shardsafe (only %s is "
                        "accepted); remove the key",
                        name, v, a->dflt);
    return SHS_OK;
}

/* Set the field (or check the reserved name) `k` refers to. */
int shs__config_set_key(shs_config *cfg, const key_ref *k, const char *name, const char *v)
{
    if (!k->f)
        return check_reserved(k->a, name, v);
    if (!has_field(cfg, k->f))
        return shs__err(SHS_ECONFIG,
                        "%s: not in a shs_config of version %u (this library's is %u): "
                        "initialise the config with shs_config_init",
                        name, cfg->version, (unsigned)SHS_CONFIG_VERSION);
    if (k->a && k->a->kind == A_ASYNC_MODE) {
        int on;
        if (!strcmp(v, "disabled"))
            on = 0;
        else if (!strcmp(v, "async") || !strcmp(v, "async_with_pinned_mem"))
            on = 1;
        else
            return shs__err(SHS_ECONFIG,
                            "%s: expected disabled, async or async_with_pinned_mem, got '%s'", name,
                            v);
        *FIELD_PTR(cfg, k->f, int) = on;
        return SHS_OK;
    }
    return set_field(cfg, k->f, name, v);
}

int shs_config_set(shs_config *config, const char *key, const char *value)
{
    if (!config || !key || !value)
        return shs__err(SHS_EINVAL, "shs_config_set: NULL argument");
    key_ref k;
    if (!shs__config_resolve_key(&k, key, strlen(key)))
        return shs__config_unknown_key("", key, strlen(key));
    return shs__config_set_key(config, &k, key, value);
}
