/*
 * config.c -- the checkpoint configuration: defaults, a table-driven
 * setter keyed by the exact field names (plus the names torchtitan uses
 * for some of them), and a YAML file's `checkpoint:` section and the
 * MindSpore Transformers top-level forms (`load_checkpoint`,
 * `resume_training`, a `CheckpointMonitor` entry of `callbacks:`), read
 * with libyaml's event API.
 */
#include "internal.h"
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <yaml.h>

/* A YAML file larger than this is refused: a config is a few KiB. */
#define CONFIG_MAX_FILE_SIZE (1u << 20)

/* ---- owned strings ----
 * Every string set through shs_config_set lives in its own node of a
 * singly linked list hanging off config->owned_.  Replacing a field frees
 * the node it pointed to, so setting a key twice does not leak; strings the
 * caller assigned directly are never in the list and never freed. */
typedef struct owned_str {
    struct owned_str *next;
    char s[];
} owned_str;

/* ---- the field table: the one place that lists the accepted names ---- */
typedef enum field_kind {
    F_FLAG,     /* int, 0 or 1 */
    F_INT,      /* int, >= min */
    F_I64,      /* int64_t, >= min */
    F_STR,      /* const char *, owned copy */
    F_EXCLUDE   /* unsigned, SHS_EXCLUDE_* */
} field_kind;

typedef struct field {
    const char *name;
    field_kind kind;
    size_t offset;
    int64_t min;            /* F_INT / F_I64 */
    const char *str_default; /* F_STR: what release resets the field to */
} field;

#define FLAG(n) { #n, F_FLAG, offsetof(shs_config, n), 0, NULL }
#define INT(n, lo) { #n, F_INT, offsetof(shs_config, n), lo, NULL }
#define I64(n, lo) { #n, F_I64, offsetof(shs_config, n), lo, NULL }
#define STR(n, d) { #n, F_STR, offsetof(shs_config, n), 0, d }

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
    { "exclude_from_loading", F_EXCLUDE,
      offsetof(shs_config, exclude_from_loading), 0, NULL },
    STR(initial_load_path, ""),
    FLAG(initial_load_model_only),
    FLAG(resume_fallback),
    FLAG(load_balanced),
    INT(load_worker_number, 1),
    FLAG(strict),
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
typedef enum alias_kind {
    A_RENAME,      /* same value as field `target` */
    A_ASYNC_MODE,  /* disabled / async / async_with_pinned_mem -> async_save */
    A_RESERVED     /* not implemented: only `dflt` is accepted */
} alias_kind;

typedef struct alias {
    const char *name;
    alias_kind kind;
    const char *target;     /* A_RENAME, A_ASYNC_MODE: a g_fields name */
    const char *dflt;       /* A_RESERVED: the only accepted value */
    int is_flag;            /* A_RESERVED: dflt is a boolean */
} alias;

static const alias g_aliases[] = {
    { "enable", A_RENAME, "enable_save", NULL, 0 },
    { "folder", A_RENAME, "save_path", NULL, 0 },
    { "interval", A_RENAME, "save_interleaved_steps", NULL, 0 },
    { "async_mode", A_ASYNC_MODE, "async_save", NULL, 0 },
    { "export_dtype", A_RESERVED, NULL, "float32", 0 },
    { "initial_load_in_hf", A_RESERVED, NULL, "false", 1 },
    { "last_save_in_hf", A_RESERVED, NULL, "false", 1 },
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
        .owned_ = NULL,
    };
}

static int is_referenced(const shs_config *cfg, const char *s)
{
    for (size_t i = 0; i < N_FIELDS; i++)
        if (g_fields[i].kind == F_STR &&
            *FIELD_PTR(cfg, &g_fields[i], const char *const) == s)
            return 1;
    return 0;
}

static void free_owned_list(owned_str *n)
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
    for (owned_str *n = config->owned_; n; n = n->next)
        for (size_t i = 0; i < N_FIELDS; i++) {
            const field *f = &g_fields[i];
            if (f->kind == F_STR && *FIELD_PTR(config, f, const char *) == n->s)
                *FIELD_PTR(config, f, const char *) = f->str_default;
        }
    free_owned_list(config->owned_);
    config->owned_ = NULL;
}

static const field *find_field(const char *name, size_t len)
{
    for (size_t i = 0; i < N_FIELDS; i++)
        if (strlen(g_fields[i].name) == len &&
            memcmp(g_fields[i].name, name, len) == 0)
            return &g_fields[i];
    return NULL;
}

/* What a key names: a field (directly or through an alias) or a reserved
   name; `bit` is its bit in the duplicate mask. */
typedef struct key_ref {
    const field *f;     /* NULL for a reserved name */
    const alias *a;     /* NULL for a field's own name */
    unsigned bit;
} key_ref;

static int resolve_key(key_ref *out, const char *name, size_t len)
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
            f = find_field(a->target, strlen(a->target));
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

static void consider(const char **best, size_t *best_d, const char *cand,
                     const char *key, size_t len)
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

/* The known name closest to an unknown `key`, or NULL when none is close
   (a third of the key's length, at least 2 edits). */
static const char *suggest(const char *key, size_t len)
{
    for (size_t i = 0; i < sizeof g_hints / sizeof g_hints[0]; i++)
        if (strlen(g_hints[i].foreign) == len &&
            memcmp(g_hints[i].foreign, key, len) == 0)
            return g_hints[i].ours;
    if (len >= 64)
        return NULL;
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (size_t i = 0; i < N_FIELDS; i++)
        consider(&best, &best_d, g_fields[i].name, key, len);
    for (size_t i = 0; i < N_ALIASES; i++)
        consider(&best, &best_d, g_aliases[i].name, key, len);
    size_t limit = len / 3 > 2 ? len / 3 : 2;
    return best_d <= limit ? best : NULL;
}

/* "unknown checkpoint field 'x'" with a suggestion; `where` is "" or
   "file:line: ". */
static int unknown_key(const char *where, const char *key, size_t len)
{
    const char *s = suggest(key, len);
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
static int parse_flag(int *out, const char *v)
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
    *out = neg ? (acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc)
               : (int64_t)acc;
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
            return shs__err(SHS_ECONFIG, "%s: unbalanced '[' in '%s'",
                            name, v);
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
        while (p < end && *p != ',' && *p != ' ' && *p != '\t' &&
               *p != '\n' && *p != '\r')
            p++;
        size_t len = (size_t)(p - tok);
        if (len >= 2 && (tok[0] == '\'' || tok[0] == '"') &&
            tok[len - 1] == tok[0]) {
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
    owned_str **pp = (owned_str **)&cfg->owned_;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->s == old) {
            if (!is_referenced(cfg, old)) {
                owned_str *dead = *pp;
                *pp = dead->next;
                shs__free(dead);
            }
            break;
        }
    node->next = cfg->owned_;
    cfg->owned_ = node;
    return SHS_OK;
}

/* Parse `v` for field `f` and store it; the config is unchanged on error.
   Messages name the key as the user wrote it (`name`, maybe an alias). */
static int set_field(shs_config *cfg, const field *f, const char *name,
                     const char *v)
{
    switch (f->kind) {
    case F_FLAG: {
        int b;
        if (parse_flag(&b, v) < 0)
            return shs__err(SHS_ECONFIG,
                            "%s: expected a boolean (true/false/yes/no/1/0), "
                            "got '%s'", name, v);
        *FIELD_PTR(cfg, f, int) = b;
        return SHS_OK;
    }
    case F_INT:
    case F_I64: {
        int64_t x;
        int r = parse_i64(&x, v);
        int64_t max = f->kind == F_INT ? INT32_MAX : INT64_MAX;
        if (r == -1)
            return shs__err(SHS_ECONFIG, "%s: expected %s, got '%s'", name,
                            int_expectation(f->min), v);
        if (r == -2 || x > max)
            return shs__err(SHS_ECONFIG,
                            "%s: expected %s, got '%s' (out of range)",
                            name, int_expectation(f->min), v);
        if (x < f->min)
            return shs__err(SHS_ECONFIG, "%s: expected %s, got '%s'", name,
                            int_expectation(f->min), v);
        if (f->kind == F_INT)
            *FIELD_PTR(cfg, f, int) = (int)x;
        else
            *FIELD_PTR(cfg, f, int64_t) = x;
        return SHS_OK;
    }
    case F_STR:
        return set_string(cfg, f, v);
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

/* Set the field (or check the reserved name) `k` refers to. */
static int set_key(shs_config *cfg, const key_ref *k, const char *name, const char *v)
{
    if (!k->a || k->a->kind == A_RENAME)
        return set_field(cfg, k->f, name, v);
    if (k->a->kind == A_ASYNC_MODE) {
        int on;
        if (!strcmp(v, "disabled"))
            on = 0;
        else if (!strcmp(v, "async") || !strcmp(v, "async_with_pinned_mem"))
            on = 1;
        else
            return shs__err(SHS_ECONFIG,
                            "%s: expected disabled, async or async_with_pinned_mem, got '%s'",
                            name, v);
        *FIELD_PTR(cfg, k->f, int) = on;
        return SHS_OK;
    }
    int is_default;
    if (k->a->is_flag) {
        int b;
        if (parse_flag(&b, v) < 0)
            return shs__err(SHS_ECONFIG,
                            "%s: expected a boolean (true/false/yes/no/1/0), got '%s'",
                            name, v);
        is_default = b == 0;
    } else {
        is_default = !*v || !strcmp(v, k->a->dflt);
    }
    if (!is_default)
        return shs__err(SHS_ECONFIG,
                        "%s: '%s' is not yet supported by shardsafe (only %s is "
                        "accepted); remove the key", name, v, k->a->dflt);
    return SHS_OK;
}

int shs_config_set(shs_config *config, const char *key, const char *value)
{
    if (!config || !key || !value)
        return shs__err(SHS_EINVAL, "shs_config_set: NULL argument");
    key_ref k;
    if (!resolve_key(&k, key, strlen(key)))
        return unknown_key("", key, strlen(key));
    return set_key(config, &k, key, value);
}

/* ---- YAML ----
 * The event API (not the document API) is used on purpose: nothing is
 * expanded, so an alias bomb elsewhere in the file costs nothing, and
 * aliases inside `checkpoint:` are refused outright. */

typedef struct yaml_loader {
    yaml_parser_t parser;
    const char *path;
    shs_config *tmp;
    uint64_t seen;          /* key_ref bits already set by this file */
    size_t seen_line[64];   /* where each was set */
    int have_checkpoint, have_callbacks;
    /* MindSpore Transformers top-level keys, resolved after the whole file
       was read (their meaning depends on each other) */
    char *load_checkpoint;  /* NULL when absent, null or "" */
    size_t load_checkpoint_line, resume_line;
    int resume;             /* resume_training: -1 absent or null, 0, 1 */
} yaml_loader;

static size_t ev_line(const yaml_event_t *ev)
{
    return ev->start_mark.line + 1;
}

static int yl_next(yaml_loader *yl, yaml_event_t *ev)
{
    if (yaml_parser_parse(&yl->parser, ev))
        return SHS_OK;
    const yaml_parser_t *p = &yl->parser;
    if (p->error == YAML_MEMORY_ERROR)
        return shs__err(SHS_ENOMEM, "%s: out of memory parsing YAML", yl->path);
    if (p->context)
        return shs__err(SHS_ECONFIG,
                        "%s:%zu:%zu: YAML syntax error: %s (%s at line %zu)",
                        yl->path, p->problem_mark.line + 1,
                        p->problem_mark.column + 1,
                        p->problem ? p->problem : "unknown problem",
                        p->context, p->context_mark.line + 1);
    return shs__err(SHS_ECONFIG, "%s:%zu:%zu: YAML syntax error: %s", yl->path,
                    p->problem_mark.line + 1, p->problem_mark.column + 1,
                    p->problem ? p->problem : "unknown problem");
}

/* Skip the rest of a node whose first event had type `first`. */
static int yl_skip(yaml_loader *yl, yaml_event_type_t first)
{
    if (first != YAML_MAPPING_START_EVENT && first != YAML_SEQUENCE_START_EVENT)
        return SHS_OK;
    size_t depth = 1;
    while (depth) {
        yaml_event_t ev;
        int rc = yl_next(yl, &ev);
        if (rc < 0)
            return rc;
        if (ev.type == YAML_MAPPING_START_EVENT ||
            ev.type == YAML_SEQUENCE_START_EVENT)
            depth++;
        else if (ev.type == YAML_MAPPING_END_EVENT ||
                 ev.type == YAML_SEQUENCE_END_EVENT)
            depth--;
        yaml_event_delete(&ev);
    }
    return SHS_OK;
}

/* A plain scalar spelling null: "", "~", "null", "Null", "NULL". */
static int is_null_scalar(const yaml_event_t *ev)
{
    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    const char *v = (const char *)ev->data.scalar.value;
    return !*v || !strcmp(v, "~") || !strcmp(v, "null") ||
           !strcmp(v, "Null") || !strcmp(v, "NULL");
}

static int scalar_has_nul(const yaml_event_t *ev)
{
    return memchr(ev->data.scalar.value, '\0', ev->data.scalar.length) != NULL;
}

static int scalar_is(const yaml_event_t *ev, const char *s)
{
    return ev->type == YAML_SCALAR_EVENT && ev->data.scalar.length == strlen(s) &&
           memcmp(ev->data.scalar.value, s, ev->data.scalar.length) == 0;
}

/* Record that key `name` on `line` sets what `k` names: one field may be
   set once per file, under whichever of its names. */
static int yl_claim(yaml_loader *yl, const key_ref *k, const char *name, size_t line)
{
    uint64_t bit = UINT64_C(1) << k->bit;
    if (yl->seen & bit) {
        if (k->f && strcmp(name, k->f->name) != 0)
            return shs__err(SHS_ECONFIG,
                            "%s:%zu: duplicate checkpoint field '%s' (it sets %s, "
                            "already set on line %zu)", yl->path, line, name,
                            k->f->name, yl->seen_line[k->bit]);
        return shs__err(SHS_ECONFIG,
                        "%s:%zu: duplicate checkpoint field '%s' (already set on "
                        "line %zu)", yl->path, line, name, yl->seen_line[k->bit]);
    }
    yl->seen |= bit;
    yl->seen_line[k->bit] = line;
    return SHS_OK;
}

static int yl_apply(yaml_loader *yl, const key_ref *k, const char *name,
                    const char *v, size_t line)
{
    int rc = set_key(yl->tmp, k, name, v);
    if (rc < 0) {
        char where[4200];
        snprintf(where, sizeof where, "%s:%zu", yl->path, line);
        return shs__err_prefix(rc, where);
    }
    return SHS_OK;
}

/* A scalar value: a null is "" here, fine for strings and
   exclude_from_loading, an error for ints and flags. */
static int yl_apply_scalar(yaml_loader *yl, const key_ref *k, const char *name,
                           const yaml_event_t *ev)
{
    if (scalar_has_nul(ev))
        return shs__err(SHS_ECONFIG, "%s:%zu: %s: value contains a NUL byte",
                        yl->path, ev_line(ev), name);
    return yl_apply(yl, k, name,
                    is_null_scalar(ev) ? "" : (const char *)ev->data.scalar.value,
                    ev_line(ev));
}

/* exclude_from_loading written as a YAML sequence: join the items with
   commas and hand the text to the setter (one validation path). */
static int yl_sequence_value(yaml_loader *yl, const key_ref *k, const char *name,
                             size_t line)
{
    shs__buf b = SHS__BUF_INIT;
    int rc = shs__buf_add(&b, "", 0);
    while (rc >= 0) {
        yaml_event_t ev;
        if ((rc = yl_next(yl, &ev)) < 0)
            break;
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            rc = yl_apply(yl, k, name, b.data, line);
            break;
        }
        if (ev.type == YAML_ALIAS_EVENT)
            rc = shs__err(SHS_ECONFIG, "%s:%zu: %s: aliases are not supported",
                          yl->path, ev_line(&ev), name);
        else if (ev.type != YAML_SCALAR_EVENT)
            rc = shs__err(SHS_ECONFIG,
                          "%s:%zu: %s: list items must be plain values",
                          yl->path, ev_line(&ev), name);
        else if (scalar_has_nul(&ev))
            rc = shs__err(SHS_ECONFIG, "%s:%zu: %s: value contains a NUL byte",
                          yl->path, ev_line(&ev), name);
        else if (!b.len || (rc = shs__buf_addc(&b, ',')) >= 0)
            rc = shs__buf_add(&b, ev.data.scalar.value, ev.data.scalar.length);
        yaml_event_delete(&ev);
    }
    shs__buf_release(&b);
    return rc;
}

/* The body of `checkpoint:`, after its MAPPING_START. */
static int yl_checkpoint(yaml_loader *yl)
{
    for (;;) {
        yaml_event_t ev;
        int rc = yl_next(yl, &ev);
        if (rc < 0)
            return rc;
        if (ev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&ev);
            return SHS_OK;
        }
        size_t line = ev_line(&ev);
        char name[64] = "";
        key_ref k;
        if (ev.type == YAML_ALIAS_EVENT) {
            rc = shs__err(SHS_ECONFIG, "%s:%zu: aliases are not supported",
                          yl->path, line);
        } else if (ev.type != YAML_SCALAR_EVENT) {
            rc = shs__err(SHS_ECONFIG,
                          "%s:%zu: keys of 'checkpoint' must be plain names",
                          yl->path, line);
        } else if (!resolve_key(&k, (const char *)ev.data.scalar.value,
                                ev.data.scalar.length)) {
            char where[4200];
            snprintf(where, sizeof where, "%s:%zu: ", yl->path, line);
            rc = unknown_key(where, (const char *)ev.data.scalar.value,
                             ev.data.scalar.length);
        } else {
            /* a known name: shorter than the buffer */
            memcpy(name, ev.data.scalar.value, ev.data.scalar.length + 1);
        }
        yaml_event_delete(&ev);
        if (rc < 0 || (rc = yl_claim(yl, &k, name, line)) < 0)
            return rc;

        if ((rc = yl_next(yl, &ev)) < 0)
            return rc;
        size_t vline = ev_line(&ev);
        switch (ev.type) {
        case YAML_SCALAR_EVENT:
            rc = yl_apply_scalar(yl, &k, name, &ev);
            break;
        case YAML_SEQUENCE_START_EVENT:
            if (k.f && k.f->kind == F_EXCLUDE)
                rc = yl_sequence_value(yl, &k, name, vline);
            else
                rc = shs__err(SHS_ECONFIG,
                              "%s:%zu: %s: expected a single value, got a list",
                              yl->path, vline, name);
            break;
        case YAML_MAPPING_START_EVENT:
            rc = shs__err(SHS_ECONFIG,
                          "%s:%zu: %s: expected a single value, got a nested "
                          "mapping", yl->path, vline, name);
            break;
        case YAML_ALIAS_EVENT:
            rc = shs__err(SHS_ECONFIG, "%s:%zu: %s: aliases are not supported",
                          yl->path, vline, name);
            break;
        default:
            rc = shs__err(SHS_ECONFIG, "%s:%zu: %s: unexpected YAML event",
                          yl->path, vline, name);
            break;
        }
        yaml_event_delete(&ev);
        if (rc < 0)
            return rc;
    }
}

/* ---- MindSpore Transformers: `callbacks:` ----
 * Its CheckpointMonitor entry holds the save policy.  The keys we can
 * honour map to our fields; any other key of that entry is refused, so a
 * setting never silently does nothing.  Entries of other types are not
 * looked into. */
static const struct {
    const char *name, *field;
} g_monitor_keys[] = {
    { "save_checkpoint_steps", "save_interleaved_steps" },
    { "keep_checkpoint_max", "save_max" },
    { "prefix", "prefix" },
    { "directory", "save_path" },
    { "async_checkpoint", "async_save" },
    { "remove_redundancy", "remove_redundancy" },
};

#define MAX_ENTRY_KEYS 64

typedef struct cb_pair {
    yaml_event_t key, val;
} cb_pair;

/* The keys of one CheckpointMonitor entry, all scalars (checked). */
static int yl_monitor(yaml_loader *yl, cb_pair *pairs, size_t n)
{
    int rc = SHS_OK;
    int have_type = 0;
    for (size_t i = 0; i < n && rc >= 0; i++) {
        const yaml_event_t *kev = &pairs[i].key, *vev = &pairs[i].val;
        const char *name = (const char *)kev->data.scalar.value;
        size_t line = ev_line(kev);
        if (scalar_is(kev, "type")) {
            if (have_type++)
                rc = shs__err(SHS_ECONFIG, "%s:%zu: CheckpointMonitor: duplicate key 'type'",
                              yl->path, line);
            continue;
        }
        if (vev->type != YAML_SCALAR_EVENT) {
            rc = shs__err(SHS_ECONFIG, "%s:%zu: CheckpointMonitor: %s: expected a single "
                          "value", yl->path, line, name);
            continue;
        }
        if (scalar_is(kev, "checkpoint_format")) {
            /* we only write safetensors */
            if (!is_null_scalar(vev) && !scalar_is(vev, "safetensors"))
                rc = shs__err(SHS_ECONFIG, "%s:%zu: CheckpointMonitor: checkpoint_format "
                              "'%s' is not supported (shardsafe writes safetensors)",
                              yl->path, line, (const char *)vev->data.scalar.value);
            continue;
        }
        size_t j;
        for (j = 0; j < sizeof g_monitor_keys / sizeof g_monitor_keys[0]; j++)
            if (scalar_is(kev, g_monitor_keys[j].name))
                break;
        if (j == sizeof g_monitor_keys / sizeof g_monitor_keys[0]) {
            rc = shs__err(SHS_ECONFIG,
                          "%s:%zu: CheckpointMonitor: '%.200s' is not supported by "
                          "shardsafe (it reads save_checkpoint_steps, keep_checkpoint_max, "
                          "prefix, directory, async_checkpoint, remove_redundancy and "
                          "checkpoint_format: safetensors); remove it or set the "
                          "equivalent under 'checkpoint:'", yl->path, line, name);
            continue;
        }
        key_ref k;
        resolve_key(&k, g_monitor_keys[j].field, strlen(g_monitor_keys[j].field));
        if ((rc = yl_claim(yl, &k, g_monitor_keys[j].name, line)) >= 0)
            rc = yl_apply_scalar(yl, &k, g_monitor_keys[j].name, vev);
    }
    return rc;
}

/* One entry of `callbacks:`, after its MAPPING_START.  Its keys are
   gathered first: `type` may come last. */
static int yl_callback_entry(yaml_loader *yl, size_t entry_line)
{
    cb_pair pairs[MAX_ENTRY_KEYS];
    size_t n = 0;
    int rc, odd_key = 0;
    const yaml_event_t *type = NULL;
    for (;;) {
        yaml_event_t kev, vev;
        if ((rc = yl_next(yl, &kev)) < 0)
            goto done;
        if (kev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&kev);
            break;
        }
        if (kev.type != YAML_SCALAR_EVENT) {
            /* an alias or a complex key: only matters in a CheckpointMonitor */
            yaml_event_type_t t = kev.type;
            odd_key = 1;
            yaml_event_delete(&kev);
            if ((rc = yl_skip(yl, t)) < 0 || (rc = yl_next(yl, &vev)) < 0)
                goto done;
            t = vev.type;
            yaml_event_delete(&vev);
            if ((rc = yl_skip(yl, t)) < 0)
                goto done;
            continue;
        }
        if ((rc = yl_next(yl, &vev)) < 0) {
            yaml_event_delete(&kev);
            goto done;
        }
        if (n == MAX_ENTRY_KEYS) {
            rc = shs__err(SHS_ECONFIG, "%s:%zu: callbacks: an entry with more than %d keys",
                          yl->path, entry_line, MAX_ENTRY_KEYS);
            yaml_event_delete(&kev);
            yaml_event_delete(&vev);
            goto done;
        }
        pairs[n].key = kev;
        pairs[n].val = vev;
        n++;
        if ((rc = yl_skip(yl, vev.type)) < 0)
            goto done;
    }
    for (size_t i = 0; i < n; i++)
        if (scalar_is(&pairs[i].key, "type"))
            type = &pairs[i].val;
    if (type && type->type == YAML_ALIAS_EVENT)
        rc = shs__err(SHS_ECONFIG, "%s:%zu: callbacks: aliases are not supported "
                      "(the entry's type must be readable)", yl->path, ev_line(type));
    else if (!type || !scalar_is(type, "CheckpointMonitor"))
        rc = SHS_OK;
    else if (odd_key)
        rc = shs__err(SHS_ECONFIG, "%s:%zu: CheckpointMonitor: keys must be plain names",
                      yl->path, entry_line);
    else
        rc = yl_monitor(yl, pairs, n);
done:
    for (size_t i = 0; i < n; i++) {
        yaml_event_delete(&pairs[i].key);
        yaml_event_delete(&pairs[i].val);
    }
    return rc;
}

/* `callbacks:`, after its SEQUENCE_START. */
static int yl_callbacks(yaml_loader *yl)
{
    for (;;) {
        yaml_event_t ev;
        int rc = yl_next(yl, &ev);
        if (rc < 0)
            return rc;
        yaml_event_type_t type = ev.type;
        size_t line = ev_line(&ev);
        yaml_event_delete(&ev);
        if (type == YAML_SEQUENCE_END_EVENT)
            return SHS_OK;
        if (type == YAML_ALIAS_EVENT)
            return shs__err(SHS_ECONFIG, "%s:%zu: callbacks: aliases are not supported "
                            "(one could be a CheckpointMonitor)", yl->path, line);
        rc = type == YAML_MAPPING_START_EVENT ? yl_callback_entry(yl, line)
                                              : yl_skip(yl, type);
        if (rc < 0)
            return rc;
    }
}

/* ---- MindSpore Transformers: top-level load_checkpoint / resume_training ---- */
static int yl_mindspore_scalar(yaml_loader *yl, const char *key, const yaml_event_t *ev)
{
    size_t line = ev_line(ev);
    if (ev->type == YAML_ALIAS_EVENT)
        return shs__err(SHS_ECONFIG, "%s:%zu: %s: aliases are not supported", yl->path,
                        line, key);
    if (ev->type != YAML_SCALAR_EVENT)
        return shs__err(SHS_ECONFIG, "%s:%zu: %s: expected a single value", yl->path,
                        line, key);
    if (scalar_has_nul(ev))
        return shs__err(SHS_ECONFIG, "%s:%zu: %s: value contains a NUL byte", yl->path,
                        line, key);
    const char *v = (const char *)ev->data.scalar.value;
    if (!strcmp(key, "load_checkpoint")) {
        yl->load_checkpoint_line = line;
        if (is_null_scalar(ev))
            return SHS_OK;
        yl->load_checkpoint = shs__strndup(v, ev->data.scalar.length);
        if (!yl->load_checkpoint)
            return shs__err(SHS_ENOMEM, "%s: out of memory", yl->path);
        return SHS_OK;
    }
    yl->resume_line = line;
    if (is_null_scalar(ev))
        return SHS_OK;
    if (parse_flag(&yl->resume, v) < 0)
        return shs__err(SHS_ECONFIG,
                        "%s:%zu: resume_training: '%.200s': resuming from a checkpoint "
                        "named here is not supported; set checkpoint: load_path to its "
                        "directory and load_step to its step", yl->path, line, v);
    return SHS_OK;
}

/*
 * MindSpore's meaning, mapped once the file is read: with resume_training
 * true, load_checkpoint is where training resumes from (our load_path);
 * otherwise it holds pretrained weights to start from (our
 * initial_load_path, model weights only).  Resuming from save_path when it
 * holds a checkpoint is what the manager always does.
 */
static int yl_mindspore_finish(yaml_loader *yl)
{
    if (!yl->load_checkpoint)
        return SHS_OK;
    const char *target = yl->resume == 1 ? "load_path" : "initial_load_path";
    key_ref k;
    int rc;
    resolve_key(&k, target, strlen(target));
    if ((rc = yl_claim(yl, &k, "load_checkpoint", yl->load_checkpoint_line)) < 0 ||
        (rc = yl_apply(yl, &k, "load_checkpoint", yl->load_checkpoint,
                       yl->load_checkpoint_line)) < 0)
        return rc;
    if (yl->resume != 1) {
        resolve_key(&k, "initial_load_model_only", strlen("initial_load_model_only"));
        if (!(yl->seen & (UINT64_C(1) << k.bit)))
            yl->tmp->initial_load_model_only = 1;
    }
    return SHS_OK;
}

enum { TOP_OTHER, TOP_CHECKPOINT, TOP_LOAD_CHECKPOINT, TOP_RESUME, TOP_CALLBACKS };

/* The top-level mapping, after its MAPPING_START: find `checkpoint` and
   the MindSpore keys, skip everything else without looking inside. */
static int yl_top_mapping(yaml_loader *yl)
{
    for (;;) {
        yaml_event_t ev;
        int rc = yl_next(yl, &ev);
        if (rc < 0)
            return rc;
        if (ev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&ev);
            return SHS_OK;
        }
        int which = scalar_is(&ev, "checkpoint") ? TOP_CHECKPOINT
                  : scalar_is(&ev, "load_checkpoint") ? TOP_LOAD_CHECKPOINT
                  : scalar_is(&ev, "resume_training") ? TOP_RESUME
                  : scalar_is(&ev, "callbacks") ? TOP_CALLBACKS : TOP_OTHER;
        size_t line = ev_line(&ev);
        yaml_event_type_t key_type = ev.type;
        yaml_event_delete(&ev);
        if ((rc = yl_skip(yl, key_type)) < 0)
            return rc;

        static const char *const top_names[] = { "", "checkpoint", "load_checkpoint",
                                                  "resume_training", "callbacks" };
        int dup = (which == TOP_CHECKPOINT && yl->have_checkpoint) ||
                  (which == TOP_LOAD_CHECKPOINT && yl->load_checkpoint_line) ||
                  (which == TOP_RESUME && yl->resume_line) ||
                  (which == TOP_CALLBACKS && yl->have_callbacks);
        if (dup)
            return shs__err(SHS_ECONFIG, "%s:%zu: duplicate key '%s'", yl->path, line,
                            top_names[which]);

        if ((rc = yl_next(yl, &ev)) < 0)
            return rc;
        yaml_event_type_t type = ev.type;
        if (which == TOP_CHECKPOINT) {
            if (type == YAML_ALIAS_EVENT)
                rc = shs__err(SHS_ECONFIG,
                              "%s:%zu: checkpoint: aliases are not supported",
                              yl->path, ev_line(&ev));
            else if (type == YAML_SCALAR_EVENT && !is_null_scalar(&ev))
                rc = shs__err(SHS_ECONFIG,
                              "%s:%zu: 'checkpoint' must be a mapping, got a "
                              "value", yl->path, ev_line(&ev));
            else if (type == YAML_SEQUENCE_START_EVENT)
                rc = shs__err(SHS_ECONFIG,
                              "%s:%zu: 'checkpoint' must be a mapping, got a "
                              "list", yl->path, ev_line(&ev));
            yl->have_checkpoint = 1;
        } else if (which == TOP_LOAD_CHECKPOINT || which == TOP_RESUME) {
            rc = yl_mindspore_scalar(yl, top_names[which], &ev);
        } else if (which == TOP_CALLBACKS) {
            if (type == YAML_ALIAS_EVENT)
                rc = shs__err(SHS_ECONFIG,
                              "%s:%zu: callbacks: aliases are not supported",
                              yl->path, ev_line(&ev));
            yl->have_callbacks = 1;
        }
        yaml_event_delete(&ev);
        if (rc < 0)
            return rc;
        if (which == TOP_CHECKPOINT && type == YAML_MAPPING_START_EVENT)
            rc = yl_checkpoint(yl);
        else if (which == TOP_CALLBACKS && type == YAML_SEQUENCE_START_EVENT)
            rc = yl_callbacks(yl);
        else
            rc = yl_skip(yl, type);
        if (rc < 0)
            return rc;
    }
}

static int yl_stream(yaml_loader *yl)
{
    int ndocs = 0;
    for (;;) {
        yaml_event_t ev;
        int rc = yl_next(yl, &ev);
        if (rc < 0)
            return rc;
        yaml_event_type_t type = ev.type;
        size_t line = ev_line(&ev);
        yaml_event_delete(&ev);
        switch (type) {
        case YAML_STREAM_END_EVENT:
            return SHS_OK;
        case YAML_DOCUMENT_START_EVENT:
            if (++ndocs > 1)
                return shs__err(SHS_ECONFIG,
                                "%s:%zu: more than one YAML document",
                                yl->path, line);
            break;
        case YAML_MAPPING_START_EVENT:
            rc = yl_top_mapping(yl);
            break;
        default:
            /* STREAM_START, DOCUMENT_END, a root that is not a mapping
               (no `checkpoint:` section then). */
            rc = yl_skip(yl, type);
            break;
        }
        if (rc < 0)
            return rc;
    }
}

static int read_config_file(char **out, size_t *out_len, const char *path)
{
    int fd, rc;
    *out = NULL;
    if ((rc = shs__io_open(&fd, path, O_RDONLY | O_CLOEXEC, 0)) < 0)
        return rc;
    struct stat st;
    char *data = NULL;
    if (shs__io->fstat(fd, &st) < 0) {
        rc = shs__err_errno(errno, "cannot stat", path);
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = shs__err(SHS_ECONFIG, "%s: not a regular file", path);
        goto done;
    }
    if ((uint64_t)st.st_size > CONFIG_MAX_FILE_SIZE) {
        rc = shs__err(SHS_ECONFIG,
                      "%s: config file too large (%lld bytes, limit %u)", path,
                      (long long)st.st_size, CONFIG_MAX_FILE_SIZE);
        goto done;
    }
    size_t len = (size_t)st.st_size;
    if (!(data = shs__malloc(len + 1))) {
        rc = shs__err(SHS_ENOMEM, "%s: out of memory reading the file", path);
        goto done;
    }
    if ((rc = shs__io_pread_full(fd, data, len, 0, path)) < 0)
        goto done;
    data[len] = '\0';
    *out = data;
    *out_len = len;
    data = NULL;
done:
    shs__free(data);
    shs__io->close(fd);
    return rc;
}

/*
 * The file is applied to a copy of *config that owns its own new strings;
 * only when the whole file was valid does the copy replace *config (the old
 * owned strings it no longer uses are freed then).  On any error *config is
 * exactly as it was, even if some fields had been read already.
 */
int shs_config_load_yaml(shs_config *config, const char *path)
{
    if (!config || !path)
        return shs__err(SHS_EINVAL, "shs_config_load_yaml: NULL argument");
    char *text = NULL;
    size_t len = 0;
    int rc = read_config_file(&text, &len, path);
    if (rc < 0)
        return rc;

    shs_config tmp = *config;
    tmp.owned_ = NULL;
    yaml_loader yl = { .path = path, .tmp = &tmp, .resume = -1 };
    if (!yaml_parser_initialize(&yl.parser)) {
        shs__free(text);
        return shs__err(SHS_ENOMEM, "%s: out of memory creating a YAML parser",
                        path);
    }
    yaml_parser_set_input_string(&yl.parser, (const unsigned char *)text, len);
    rc = yl_stream(&yl);
    if (rc >= 0)
        rc = yl_mindspore_finish(&yl);
    yaml_parser_delete(&yl.parser);
    shs__free(yl.load_checkpoint);
    shs__free(text);

    if (rc < 0) {
        free_owned_list(tmp.owned_);
        return rc;
    }
    /* Commit: keep the old owned strings tmp still points at, free the rest. */
    owned_str *old = config->owned_;
    while (old) {
        owned_str *next = old->next;
        if (is_referenced(&tmp, old->s)) {
            old->next = tmp.owned_;
            tmp.owned_ = old;
        } else {
            shs__free(old);
        }
        old = next;
    }
    *config = tmp;
    return SHS_OK;
}
