/*
 * config_impl.h -- what the two halves of the configuration share:
 * config.c (defaults, the field table, shs_config_set) and config_yaml.c
 * (a YAML file's `checkpoint:` section and the MindSpore forms, applied
 * through the same setters).
 */
#ifndef SHS_CONFIG_IMPL_H
#define SHS_CONFIG_IMPL_H

#include "common/internal.h"

/* ---- owned strings ----
 * Every string set through shs_config_set lives in its own node of a
 * singly linked list hanging off config->strings.  Replacing a field frees
 * the node it pointed to, so setting a key twice does not leak; strings the
 * caller assigned directly are never in the list and never freed. */
typedef struct owned_str {
    struct owned_str *next;
    char s[];
} owned_str;

/* ---- the field table (config.c): the one place that lists the accepted
   names ---- */
typedef enum field_kind {
    F_FLAG,    /* int, 0 or 1 */
    F_INT,     /* int, >= min */
    F_I64,     /* int64_t, >= min */
    F_STR,     /* const char *, owned copy */
    F_EXCLUDE, /* unsigned, SHS_EXCLUDE_* */
    F_RULES,   /* const char *, owned copy, checked as name-map rules */
    F_DTYPE    /* const char *, owned copy, "" or a dtype name
                  (shs_dtype_parse_alias) */
} field_kind;

typedef struct field {
    const char *name;
    field_kind kind;
    size_t offset;
    int64_t min;             /* F_INT / F_I64 */
    const char *str_default; /* F_STR: what release resets the field to */
} field;

/* ---- names other frameworks use for our fields (config.c) ---- */
typedef enum alias_kind {
    A_RENAME,     /* same value as field `target` */
    A_ASYNC_MODE, /* disabled / async / async_with_pinned_mem -> async_save */
    A_RESERVED    /* not implemented: only `dflt` is accepted */
} alias_kind;

typedef struct alias {
    const char *name;
    alias_kind kind;
    const char *target; /* A_RENAME, A_ASYNC_MODE: a g_fields name */
    const char *dflt;   /* A_RESERVED: the only accepted value */
    int is_flag;        /* A_RESERVED: dflt is a boolean */
} alias;

/* What a key names: a field (directly or through an alias) or a reserved
   name; `bit` is its bit in the duplicate mask. */
typedef struct key_ref {
    const field *f; /* NULL for a reserved name */
    const alias *a; /* NULL for a field's own name */
    unsigned bit;
} key_ref;

/* 1 and *out set when `name` (len bytes) is a field, an alias or a
   reserved name; 0 when it is unknown. */
int shs__config_resolve_key(key_ref *out, const char *name, size_t len);
/* Set what `k` names from the text `v`; `name` is the key as written (for
   the message). */
int shs__config_set_key(shs_config *cfg, const key_ref *k, const char *name, const char *v);
/* The known name closest to an unknown `key` (len bytes): a field, an
   alias, one of `extra`, or the field a name of another framework stands
   for; NULL when none is close (a third of the key's length, at least 2
   edits). */
const char *shs__config_suggest(const char *key, size_t len, const char *const *extra,
                                size_t n_extra);
/* SHS_ECONFIG for an unknown key, with a "did you mean" when one is close;
   `where` prefixes the message. */
int shs__config_unknown_key(const char *where, const char *key, size_t len);
/* A boolean as YAML or a command line writes it (true/false, 1/0, ...). */
int shs__config_parse_flag(int *out, const char *v);
/* Free a list of owned strings. */
void shs__config_free_owned(owned_str *n);
/* Whether some string field of cfg points at s. */
int shs__config_is_referenced(const shs_config *cfg, const char *s);
/* Bytes of the caller's struct: a version-1 config ends before
   initial_load_in_hf, a version-3 one before enable (fields of a later
   version are never touched). */
size_t shs__config_size(const shs_config *cfg);

#endif
