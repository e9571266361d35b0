/*
 * config_yaml.c -- shs_config_load_yaml: a YAML file's `checkpoint:`
 * section and the MindSpore Transformers forms (top-level
 * `load_checkpoint` and `resume_training`, a `CheckpointMonitor` entry of
 * `callbacks:`, the checkpoint keys of `train:`), read with libyaml's
 * event API and applied through the setters of config.c.  With
 * shs_config_load_yaml_ex every other key is offered to the program,
 * which honours it or has it refused: no key goes unread.
 */
#include "manager/config_impl.h"
#include "common/opts.h"
#include "store/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <yaml.h>

/* A YAML file larger than this is refused: a config is a few KiB. */
#define CONFIG_MAX_FILE_SIZE (1u << 20)

/* ---- YAML ----
 * The event API (not the document API) is used on purpose: nothing is
 * expanded, so an alias bomb elsewhere in the file costs nothing, and
 * aliases inside `checkpoint:` are refused outright. */

typedef struct yaml_loader {
    yaml_parser_t parser;
    const char *path;
    shs_config *tmp;
    const shs_yaml_opts *opts; /* NULL: the program's keys are not offered */
    uint64_t seen;             /* key_ref bits already set by this file */
    size_t seen_line[64];      /* where each was set */
    int have_checkpoint, have_callbacks, have_train, have_model;
    size_t integrated_line; /* MindSpore's integrated_save: where it was set */
    /* MindSpore Transformers top-level keys, resolved after the whole file
       was read (their meaning depends on each other) */
    char *load_checkpoint; /* NULL when absent, null or "" */
    size_t load_checkpoint_line, resume_line;
    int resume; /* resume_training: -1 absent or null, 0, 1 */
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
        return shs__err(SHS_ECONFIG, "%s:%zu:%zu: YAML syntax error: %s (%s at line %zu)", yl->path,
                        p->problem_mark.line + 1, p->problem_mark.column + 1,
                        p->problem ? p->problem : "unknown problem", p->context,
                        p->context_mark.line + 1);
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
        if (ev.type == YAML_MAPPING_START_EVENT || ev.type == YAML_SEQUENCE_START_EVENT)
            depth++;
        else if (ev.type == YAML_MAPPING_END_EVENT || ev.type == YAML_SEQUENCE_END_EVENT)
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
    return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL");
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

/* The program takes the keys the library does not read (program_key). */
static int yl_offers(const yaml_loader *yl)
{
    return yl->opts && yl->opts->program_key;
}

static void yl_note(yaml_loader *yl, size_t line, const char *fmt, ...)
{
    if (!yl->opts || !yl->opts->note)
        return;
    char msg[1024];
    int n = snprintf(msg, sizeof msg, "%s:%zu: ", yl->path, line);
    if (n < 0 || (size_t)n >= sizeof msg)
        n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    yl->opts->note(yl->opts->ctx, msg);
}

/* The checkpoint keys MindSpore puts under `train:` (seed 002).  Only
   these: `train:` is mostly the program's, and a key of its own that
   happens to share a name with a checkpoint field (`interval`, `prefix`)
   must not be read as one. */
static const struct {
    const char *name, *field; /* field NULL: integrated_save */
} g_train_keys[] = {
    { "save_checkpoint_steps", "save_interleaved_steps" },
    { "keep_checkpoint_max", "save_max" },
    { "integrated_save", NULL },
    { "async_save", "async_save" },
};
static const char *const g_train_names[] = { "save_checkpoint_steps", "keep_checkpoint_max",
                                             "integrated_save", "async_save" };

/* Offer key `key` of `section` ("" for a top-level key) to the program;
   its refusal is the load's error. */
static int yl_offer(yaml_loader *yl, const char *section, const char *key, const char *value,
                    size_t line)
{
    if (!yl_offers(yl))
        return SHS_OK;
    char why[512] = "";
    if (yl->opts->program_key(yl->opts->ctx, section, key, value, line, why, sizeof why) > 0)
        return SHS_OK;
    why[sizeof why - 1] = '\0';
    char where[300];
    snprintf(where, sizeof where, "%s%s%.200s", section, *section ? ": " : "", key);
    if (!strcmp(section, "train")) {
        const char *s = shs__config_suggest(key, strlen(key), g_train_names,
                                            sizeof g_train_names / sizeof g_train_names[0]);
        char hint[128] = "";
        if (s)
            snprintf(hint, sizeof hint, " (did you mean '%s'?)", s);
        return shs__err(SHS_ECONFIG,
                        "%s:%zu: %s: not a checkpoint setting%s, and this program does not read "
                        "it%s%s (shardsafe reads save_checkpoint_steps, keep_checkpoint_max, "
                        "integrated_save and async_save in train:; the other checkpoint fields "
                        "go under checkpoint:)",
                        yl->path, line, where, hint, *why ? ": " : "", why);
    }
    if (!strcmp(section, "callbacks"))
        return shs__err(SHS_ECONFIG,
                        "%s:%zu: callbacks: an entry of type '%.200s' is not read by this "
                        "program%s%s (shardsafe reads the CheckpointMonitor entry)",
                        yl->path, line, key, *why ? ": " : "", why);
    return shs__err(SHS_ECONFIG, "%s:%zu: %s: not read by this program%s%s", yl->path, line, where,
                    *why ? ": " : "", why);
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
                            "already set on line %zu)",
                            yl->path, line, name, k->f->name, yl->seen_line[k->bit]);
        return shs__err(SHS_ECONFIG,
                        "%s:%zu: duplicate checkpoint field '%s' (already set on "
                        "line %zu)",
                        yl->path, line, name, yl->seen_line[k->bit]);
    }
    yl->seen |= bit;
    yl->seen_line[k->bit] = line;
    return SHS_OK;
}

static int yl_apply(yaml_loader *yl, const key_ref *k, const char *name, const char *v, size_t line)
{
    int rc = shs__config_set_key(yl->tmp, k, name, v);
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
        return shs__err(SHS_ECONFIG, "%s:%zu: %s: value contains a NUL byte", yl->path, ev_line(ev),
                        name);
    return yl_apply(yl, k, name, is_null_scalar(ev) ? "" : (const char *)ev->data.scalar.value,
                    ev_line(ev));
}

/* exclude_from_loading written as a YAML sequence: join the items with
   commas and hand the text to the setter (one validation path). */
static int yl_sequence_value(yaml_loader *yl, const key_ref *k, const char *name, size_t line)
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
            rc = shs__err(SHS_ECONFIG, "%s:%zu: %s: aliases are not supported", yl->path,
                          ev_line(&ev), name);
        else if (ev.type != YAML_SCALAR_EVENT)
            rc = shs__err(SHS_ECONFIG, "%s:%zu: %s: list items must be plain values", yl->path,
                          ev_line(&ev), name);
        else if (scalar_has_nul(&ev))
            rc = shs__err(SHS_ECONFIG, "%s:%zu: %s: value contains a NUL byte", yl->path,
                          ev_line(&ev), name);
        else if (!b.len || (rc = shs__buf_addc(&b, ',')) >= 0)
            rc = shs__buf_add(&b, ev.data.scalar.value, ev.data.scalar.length);
        yaml_event_delete(&ev);
    }
    shs__buf_release(&b);
    return rc;
}

/* The value of a checkpoint key `name` (resolved to `k`): a scalar, or a
   list for the list-valued fields. */
static int yl_field_value(yaml_loader *yl, const key_ref *k, const char *name)
{
    yaml_event_t ev;
    int rc = yl_next(yl, &ev);
    if (rc < 0)
        return rc;
    size_t vline = ev_line(&ev);
    switch (ev.type) {
    case YAML_SCALAR_EVENT: rc = yl_apply_scalar(yl, k, name, &ev); break;
    case YAML_SEQUENCE_START_EVENT:
        if (k->f && (k->f->kind == F_EXCLUDE || k->f->kind == F_RULES))
            rc = yl_sequence_value(yl, k, name, vline);
        else
            rc = shs__err(SHS_ECONFIG, "%s:%zu: %s: expected a single value, got a list", yl->path,
                          vline, name);
        break;
    case YAML_MAPPING_START_EVENT:
        rc = shs__err(SHS_ECONFIG,
                      "%s:%zu: %s: expected a single value, got a nested "
                      "mapping",
                      yl->path, vline, name);
        break;
    case YAML_ALIAS_EVENT:
        rc = shs__err(SHS_ECONFIG, "%s:%zu: %s: aliases are not supported", yl->path, vline, name);
        break;
    default:
        rc = shs__err(SHS_ECONFIG, "%s:%zu: %s: unexpected YAML event", yl->path, vline, name);
        break;
    }
    yaml_event_delete(&ev);
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
            rc = shs__err(SHS_ECONFIG, "%s:%zu: aliases are not supported", yl->path, line);
        } else if (ev.type != YAML_SCALAR_EVENT) {
            rc = shs__err(SHS_ECONFIG, "%s:%zu: keys of 'checkpoint' must be plain names", yl->path,
                          line);
        } else if (!shs__config_resolve_key(&k, (const char *)ev.data.scalar.value,
                                            ev.data.scalar.length)) {
            char where[4200];
            snprintf(where, sizeof where, "%s:%zu: ", yl->path, line);
            rc = shs__config_unknown_key(where, (const char *)ev.data.scalar.value,
                                         ev.data.scalar.length);
        } else {
            /* a known name: shorter than the buffer */
            memcpy(name, ev.data.scalar.value, ev.data.scalar.length + 1);
        }
        yaml_event_delete(&ev);
        if (rc < 0 || (rc = yl_claim(yl, &k, name, line)) < 0 ||
            (rc = yl_field_value(yl, &k, name)) < 0)
            return rc;
    }
}

/* MindSpore's integrated_save (under `train:` or in the CheckpointMonitor
   entry): a boolean, accepted either way, with a note saying how it is
   met.  MindSpore gathers sharded parameters into whole tensors so that
   the checkpoint loads under another layout; shardsafe's checkpoints load
   under any layout as they are. */
static int yl_integrated_value(yaml_loader *yl, const char *where, size_t line,
                               const yaml_event_t *ev)
{
    int on = 0;
    if (yl->integrated_line)
        return shs__err(SHS_ECONFIG,
                        "%s:%zu: duplicate checkpoint field 'integrated_save' (already set on "
                        "line %zu)",
                        yl->path, line, yl->integrated_line);
    if (ev->type != YAML_SCALAR_EVENT || scalar_has_nul(ev) ||
        shs__config_parse_flag(&on, (const char *)ev->data.scalar.value) < 0)
        return shs__err(SHS_ECONFIG,
                        "%s:%zu: %s: integrated_save: expected a boolean (true/false/yes/no/1/0)",
                        yl->path, line, where);
    yl->integrated_line = line;
    if (on)
        yl_note(yl, line,
                "%s: integrated_save: true: each rank saves its own slice and metadata.json "
                "describes the whole tensors, so the checkpoint loads on any number of ranks "
                "in any layout (what MindSpore's integrated save is for); 'shardsafe merge' "
                "writes whole tensors",
                where);
    else
        yl_note(yl, line, "%s: integrated_save: false: each rank saves its own slice", where);
    return SHS_OK;
}

static int yl_integrated(yaml_loader *yl, const char *where, size_t line)
{
    yaml_event_t ev;
    int rc = yl_next(yl, &ev);
    if (rc < 0)
        return rc;
    rc = yl_integrated_value(yl, where, line, &ev);
    yaml_event_delete(&ev);
    return rc;
}

/* The value of a key that is not the library's: offered to the program
   (the scalar's text, NULL for a list or a mapping), or skipped. */
static int yl_program_value(yaml_loader *yl, const char *section, const char *key, size_t line)
{
    yaml_event_t ev;
    int rc = yl_next(yl, &ev);
    if (rc < 0)
        return rc;
    yaml_event_type_t t = ev.type;
    if (t == YAML_SCALAR_EVENT && scalar_has_nul(&ev))
        rc = shs__err(SHS_ECONFIG, "%s:%zu: %s: value contains a NUL byte", yl->path, line, key);
    else if (t == YAML_ALIAS_EVENT && yl_offers(yl))
        rc = shs__err(SHS_ECONFIG, "%s:%zu: %s: aliases are not supported", yl->path, line, key);
    else if (t == YAML_SCALAR_EVENT)
        rc = yl_offer(yl, section, key, (const char *)ev.data.scalar.value, line);
    yaml_event_delete(&ev);
    if (rc < 0 || t == YAML_SCALAR_EVENT || t == YAML_ALIAS_EVENT)
        return rc;
    if ((rc = yl_skip(yl, t)) < 0)
        return rc;
    return yl_offer(yl, section, key, NULL, line);
}

/* A key event of a mapping the program may read: a plain name (a copy in
   *out, the caller frees it), else an error when the program is offered
   keys, or *out NULL (the pair is skipped). */
static int yl_program_key_name(yaml_loader *yl, const char *section, yaml_event_t *ev, char **out)
{
    *out = NULL;
    if (ev->type == YAML_SCALAR_EVENT && !scalar_has_nul(ev)) {
        if (!(*out = shs__strndup((const char *)ev->data.scalar.value, ev->data.scalar.length)))
            return shs__err(SHS_ENOMEM, "%s: out of memory", yl->path);
        return SHS_OK;
    }
    if (yl_offers(yl))
        return shs__err(SHS_ECONFIG, "%s:%zu: keys of '%s' must be plain names", yl->path,
                        ev_line(ev), *section ? section : "the top level");
    return SHS_OK;
}

/* A key of `train:` the library reads (g_train_keys), after the key
   event: its value applied.  0 when `key` is not one of them (nothing
   consumed). */
static int yl_train_key(yaml_loader *yl, const char *key, size_t line, int *rc)
{
    size_t j, nk = sizeof g_train_keys / sizeof g_train_keys[0];
    for (j = 0; j < nk && strcmp(key, g_train_keys[j].name) != 0; j++)
        ;
    key_ref k;
    if (j == nk)
        return 0;
    if (!g_train_keys[j].field)
        *rc = yl_integrated(yl, "train", line);
    else if (!shs__config_resolve_key(&k, g_train_keys[j].field, strlen(g_train_keys[j].field)))
        *rc = shs__err(SHS_ECONFIG, "%s: not a field", g_train_keys[j].field); /* a table bug */
    else if ((*rc = yl_claim(yl, &k, key, line)) >= 0)
        *rc = yl_field_value(yl, &k, key);
    return 1;
}

/* A mapping that is (partly) the program's, after its MAPPING_START:
   `train:` (seed 002: its checkpoint keys are applied) or `model:`; every
   other key is offered to the program. */
static int yl_program_mapping(yaml_loader *yl, const char *section)
{
    int train = strcmp(section, "train") == 0;
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
        yaml_event_type_t kt = ev.type;
        char *key = NULL;
        rc = yl_program_key_name(yl, section, &ev, &key);
        yaml_event_delete(&ev);
        if (rc < 0)
            return rc;
        if (key && !(train && yl_train_key(yl, key, line, &rc)))
            rc = yl_program_value(yl, section, key, line);
        else if (!key && (rc = yl_skip(yl, kt)) >= 0 && (rc = yl_next(yl, &ev)) >= 0) {
            /* a complex key nobody reads: the pair is skipped */
            kt = ev.type;
            yaml_event_delete(&ev);
            rc = yl_skip(yl, kt);
        }
        shs__free(key);
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
    { "save_dir", "save_path" }, /* seed 002 */
    { "async_checkpoint", "async_save" },
    { "async_save", "async_save" },
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
            rc = shs__err(SHS_ECONFIG,
                          "%s:%zu: CheckpointMonitor: %s: expected a single "
                          "value",
                          yl->path, line, name);
            continue;
        }
        if (scalar_is(kev, "integrated_save")) {
            rc = yl_integrated_value(yl, "CheckpointMonitor", line, vev);
            continue;
        }
        if (scalar_is(kev, "checkpoint_format")) {
            /* we only write safetensors */
            if (!is_null_scalar(vev) && !scalar_is(vev, "safetensors"))
                rc = shs__err(SHS_ECONFIG,
                              "%s:%zu: CheckpointMonitor: checkpoint_format "
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
                          "prefix, directory or save_dir, async_checkpoint or async_save, "
                          "remove_redundancy, integrated_save and checkpoint_format: "
                          "safetensors); remove it or set the equivalent under 'checkpoint:'",
                          yl->path, line, name);
            continue;
        }
        key_ref k;
        shs__config_resolve_key(&k, g_monitor_keys[j].field, strlen(g_monitor_keys[j].field));
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
        rc = shs__err(SHS_ECONFIG,
                      "%s:%zu: callbacks: aliases are not supported "
                      "(the entry's type must be readable)",
                      yl->path, ev_line(type));
    else if (!type || !scalar_is(type, "CheckpointMonitor"))
        rc = yl_offer(yl, "callbacks",
                      type && type->type == YAML_SCALAR_EVENT && !scalar_has_nul(type)
                          ? (const char *)type->data.scalar.value
                          : "(no type)",
                      NULL, entry_line);
    else if (odd_key)
        rc = shs__err(SHS_ECONFIG, "%s:%zu: CheckpointMonitor: keys must be plain names", yl->path,
                      entry_line);
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
        if (type == YAML_SCALAR_EVENT) /* `- SomeCallback` */
            rc = yl_offer(yl, "callbacks",
                          scalar_has_nul(&ev) ? "(invalid)" : (const char *)ev.data.scalar.value,
                          NULL, line);
        yaml_event_delete(&ev);
        if (rc < 0)
            return rc;
        if (type == YAML_SEQUENCE_END_EVENT)
            return SHS_OK;
        if (type == YAML_ALIAS_EVENT)
            return shs__err(SHS_ECONFIG,
                            "%s:%zu: callbacks: aliases are not supported "
                            "(one could be a CheckpointMonitor)",
                            yl->path, line);
        rc = type == YAML_MAPPING_START_EVENT ? yl_callback_entry(yl, line) : yl_skip(yl, type);
        if (rc < 0)
            return rc;
    }
}

/* ---- MindSpore Transformers: top-level load_checkpoint / resume_training ---- */
static int yl_mindspore_scalar(yaml_loader *yl, const char *key, const yaml_event_t *ev)
{
    size_t line = ev_line(ev);
    if (ev->type == YAML_ALIAS_EVENT)
        return shs__err(SHS_ECONFIG, "%s:%zu: %s: aliases are not supported", yl->path, line, key);
    if (ev->type != YAML_SCALAR_EVENT)
        return shs__err(SHS_ECONFIG, "%s:%zu: %s: expected a single value", yl->path, line, key);
    if (scalar_has_nul(ev))
        return shs__err(SHS_ECONFIG, "%s:%zu: %s: value contains a NUL byte", yl->path, line, key);
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
    if (shs__config_parse_flag(&yl->resume, v) < 0)
        return shs__err(SHS_ECONFIG,
                        "%s:%zu: resume_training: '%.200s': resuming from a checkpoint "
                        "named here is not supported; set checkpoint: load_path to its "
                        "directory and load_step to its step",
                        yl->path, line, v);
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
    shs__config_resolve_key(&k, target, strlen(target));
    if ((rc = yl_claim(yl, &k, "load_checkpoint", yl->load_checkpoint_line)) < 0 ||
        (rc = yl_apply(yl, &k, "load_checkpoint", yl->load_checkpoint, yl->load_checkpoint_line)) <
            0)
        return rc;
    if (yl->resume != 1) {
        shs__config_resolve_key(&k, "initial_load_model_only", strlen("initial_load_model_only"));
        if (!(yl->seen & (UINT64_C(1) << k.bit)))
            yl->tmp->initial_load_model_only = 1;
    }
    return SHS_OK;
}

enum {
    TOP_OTHER,
    TOP_CHECKPOINT,
    TOP_LOAD_CHECKPOINT,
    TOP_RESUME,
    TOP_CALLBACKS,
    TOP_HF_ASSETS, /* torchtitan's top-level hf_assets_path */
    TOP_TRAIN,     /* seed 002: checkpoint keys among the program's */
    TOP_MODEL      /* the program's */
};

/* torchtitan's top-level `hf_assets_path: DIR`, the same field as in
   `checkpoint:` (set once in the file, under either). */
static int yl_hf_assets(yaml_loader *yl, const yaml_event_t *ev, size_t key_line)
{
    key_ref k;
    if (ev->type != YAML_SCALAR_EVENT)
        return shs__err(SHS_ECONFIG, "%s:%zu: hf_assets_path: expected a single value", yl->path,
                        ev_line(ev));
    if (!shs__config_resolve_key(&k, "hf_assets_path", strlen("hf_assets_path")))
        return shs__err(SHS_ECONFIG, "hf_assets_path: not a field"); /* a table bug */
    int rc = yl_claim(yl, &k, "hf_assets_path", key_line);
    return rc < 0 ? rc : yl_apply_scalar(yl, &k, "hf_assets_path", ev);
}

static const char *const g_top_names[] = {
    "",          "checkpoint",     "load_checkpoint", "resume_training",
    "callbacks", "hf_assets_path", "train",           "model"
};

/* Whether top-level key `which` was seen already; marks it seen. */
static int yl_top_seen(yaml_loader *yl, int which)
{
    int *flag = which == TOP_CHECKPOINT  ? &yl->have_checkpoint
                : which == TOP_CALLBACKS ? &yl->have_callbacks
                : which == TOP_TRAIN     ? &yl->have_train
                : which == TOP_MODEL     ? &yl->have_model
                                         : NULL;
    if (which == TOP_LOAD_CHECKPOINT)
        return yl->load_checkpoint_line != 0;
    if (which == TOP_RESUME)
        return yl->resume_line != 0;
    if (!flag)
        return 0;
    int was = *flag;
    *flag = 1;
    return was;
}

/* The value of top-level key `which` (its first event in *ev, consumed by
   the caller); `key` is the name as written for a TOP_OTHER key. */
static int yl_top_value(yaml_loader *yl, int which, const char *key, size_t line,
                        const yaml_event_t *ev, int *descend)
{
    yaml_event_type_t type = ev->type;
    *descend = 0;
    switch (which) {
    case TOP_CHECKPOINT:
        if (type == YAML_ALIAS_EVENT)
            return shs__err(SHS_ECONFIG, "%s:%zu: checkpoint: aliases are not supported", yl->path,
                            ev_line(ev));
        if (type == YAML_SCALAR_EVENT && !is_null_scalar(ev))
            return shs__err(SHS_ECONFIG, "%s:%zu: 'checkpoint' must be a mapping, got a value",
                            yl->path, ev_line(ev));
        if (type == YAML_SEQUENCE_START_EVENT)
            return shs__err(SHS_ECONFIG, "%s:%zu: 'checkpoint' must be a mapping, got a list",
                            yl->path, ev_line(ev));
        *descend = type == YAML_MAPPING_START_EVENT;
        return SHS_OK;
    case TOP_LOAD_CHECKPOINT:
    case TOP_RESUME: return yl_mindspore_scalar(yl, g_top_names[which], ev);
    case TOP_HF_ASSETS: return yl_hf_assets(yl, ev, line);
    case TOP_CALLBACKS:
        if (type == YAML_ALIAS_EVENT)
            return shs__err(SHS_ECONFIG, "%s:%zu: callbacks: aliases are not supported", yl->path,
                            ev_line(ev));
        *descend = type == YAML_SEQUENCE_START_EVENT;
        return SHS_OK;
    case TOP_TRAIN:
    case TOP_MODEL:
        if (type == YAML_MAPPING_START_EVENT) {
            *descend = 1;
            return SHS_OK;
        }
        if (type == YAML_SCALAR_EVENT && is_null_scalar(ev))
            return SHS_OK;
        break; /* not a mapping: the program's, as a top-level key */
    default: break;
    }
    if (type == YAML_ALIAS_EVENT && yl_offers(yl))
        return shs__err(SHS_ECONFIG, "%s:%zu: %s: aliases are not supported", yl->path, line, key);
    if (type == YAML_SCALAR_EVENT) {
        if (scalar_has_nul(ev))
            return shs__err(SHS_ECONFIG, "%s:%zu: %s: value contains a NUL byte", yl->path, line,
                            key);
        return yl_offer(yl, "", key, (const char *)ev->data.scalar.value, line);
    }
    *descend = -1; /* skip the list or mapping, then offer the key */
    return SHS_OK;
}

/* The top-level mapping, after its MAPPING_START: `checkpoint`, the
   MindSpore and torchtitan keys; everything else is the program's (offered
   to it, or skipped without looking inside). */
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
        int which = TOP_OTHER;
        for (int i = 1; i < (int)(sizeof g_top_names / sizeof g_top_names[0]); i++)
            if (scalar_is(&ev, g_top_names[i]))
                which = i;
        size_t line = ev_line(&ev);
        yaml_event_type_t key_type = ev.type;
        char *key = NULL;
        rc = yl_program_key_name(yl, "", &ev, &key);
        yaml_event_delete(&ev);
        if (rc < 0 || (rc = yl_skip(yl, key_type)) < 0)
            goto next;
        if (which != TOP_OTHER && yl_top_seen(yl, which)) {
            rc = shs__err(SHS_ECONFIG, "%s:%zu: duplicate key '%s'", yl->path, line,
                          g_top_names[which]);
            goto next;
        }
        if ((rc = yl_next(yl, &ev)) < 0)
            goto next;
        int descend = 0;
        yaml_event_type_t type = ev.type;
        rc = !key && which == TOP_OTHER ? (descend = -1, SHS_OK) /* a complex key: skipped */
                                        : yl_top_value(yl, which, key, line, &ev, &descend);
        yaml_event_delete(&ev);
        if (rc < 0)
            goto next;
        if (descend > 0)
            rc = which == TOP_CHECKPOINT  ? yl_checkpoint(yl)
                 : which == TOP_CALLBACKS ? yl_callbacks(yl)
                                          : yl_program_mapping(yl, g_top_names[which]);
        else if (descend < 0 && (rc = yl_skip(yl, type)) >= 0 && key)
            rc = yl_offer(yl, "", key, NULL, line);
        else if (descend == 0)
            rc = yl_skip(yl, type);
    next:
        shs__free(key);
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
        case YAML_STREAM_END_EVENT: return SHS_OK;
        case YAML_DOCUMENT_START_EVENT:
            if (++ndocs > 1)
                return shs__err(SHS_ECONFIG, "%s:%zu: more than one YAML document", yl->path, line);
            break;
        case YAML_MAPPING_START_EVENT: rc = yl_top_mapping(yl); break;
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
        rc = shs__err(SHS_ECONFIG, "%s: config file too large (%lld bytes, limit %u)", path,
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
    return shs_config_load_yaml_ex(config, path, NULL);
}

int shs_config_load_yaml_ex(shs_config *config, const char *path, const shs_yaml_opts *opts)
{
    if (!config || !path)
        return shs__err(SHS_EINVAL, "shs_config_load_yaml: NULL argument");
    int rc;
    if (opts && (rc = shs__check_version(opts, SHS__V_YAML_OPTS, "shs_config_load_yaml_ex")) < 0)
        return rc;
    char *text = NULL;
    size_t len = 0;
    rc = read_config_file(&text, &len, path);
    if (rc < 0)
        return rc;

    /* only the fields of the caller's version of the struct are read and
       written back */
    shs_config tmp;
    shs_config_init(&tmp);
    memcpy(&tmp, config, shs__config_size(config));
    tmp.strings = NULL;
    yaml_loader yl = { .path = path, .tmp = &tmp, .opts = opts, .resume = -1 };
    if (!yaml_parser_initialize(&yl.parser)) {
        shs__free(text);
        return shs__err(SHS_ENOMEM, "%s: out of memory creating a YAML parser", path);
    }
    yaml_parser_set_input_string(&yl.parser, (const unsigned char *)text, len);
    rc = yl_stream(&yl);
    if (rc >= 0)
        rc = yl_mindspore_finish(&yl);
    yaml_parser_delete(&yl.parser);
    shs__free(yl.load_checkpoint);
    shs__free(text);

    if (rc < 0) {
        shs__config_free_owned(tmp.strings);
        return rc;
    }
    /* Commit: keep the old owned strings tmp still points at, free the rest. */
    owned_str *old = config->strings;
    while (old) {
        owned_str *next = old->next;
        if (shs__config_is_referenced(&tmp, old->s)) {
            old->next = tmp.strings;
            tmp.strings = old;
        } else {
            shs__free(old);
        }
        old = next;
    }
    memcpy(config, &tmp, shs__config_size(config));
    return SHS_OK;
}
