/*
 * scan.c -- what a command-line PATH names: one safetensors file, a
 * directory of them, or a Hugging Face model.safetensors.index.json, and
 * the consistency checks between an index and its shards.
 *
 * The index is hostile input like any file: it is parsed with jansson
 * (duplicate keys rejected), its size is capped, every shard name must be
 * a plain relative path that stays inside the index's directory, and the
 * weight_map is compared with the shards' own headers in both directions.
 */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* An index larger than a safetensors header may be is not plausible. */
#define MAX_INDEX_BYTES 100000000ll

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

cli_kind cli_classify(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return CLI_KIND_DIR;
    if (ends_with(path, ".json"))
        return CLI_KIND_INDEX;
    return CLI_KIND_FILE;
}

int cli_open_file(shs_file **out, const char *path, char **why)
{
    struct stat st;
    *out = NULL;
    *why = NULL;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        *why = cli_fmt("%s: %s, not a safetensors file", path,
                       S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
        return SHS_EINVAL;
    }
    shs_open_opts o = SHS_OPEN_OPTS_INIT;
    o.flags = SHS_OPEN_NO_MMAP;
    return shs_file_open(out, path, &o);
}

/* ------------------------------------------------------------------ */
/* String lists                                                       */
/* ------------------------------------------------------------------ */

int cli_strs_add(cli_strs *s, char *owned)
{
    if (!owned)
        return -1;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        char **v = realloc(s->v, cap * sizeof *v);
        if (!v) {
            free(owned);
            return -1;
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = owned;
    return 0;
}

int cli_strs_addf(cli_strs *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *m = cli_vfmt(fmt, ap);
    va_end(ap);
    return cli_strs_add(s, m);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void cli_strs_sort(cli_strs *s)
{
    if (s->n > 1)
        qsort(s->v, s->n, sizeof *s->v, cmp_str);
}

void cli_strs_release(cli_strs *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

/* ------------------------------------------------------------------ */
/* Directories                                                        */
/* ------------------------------------------------------------------ */

static char *join(const char *dir, const char *name)
{
    size_t dl = strlen(dir);
    int slash = dl > 0 && dir[dl - 1] == '/';
    return cli_fmt("%s%s%s", dir, slash ? "" : "/", name);
}

int cli_list_dir(const char *dir, cli_strs *files, cli_strs *indexes)
{
    DIR *d = opendir(dir);
    if (!d) {
        cli_err("cannot open directory '%s': %s", dir, strerror(errno));
        return CLI_FAIL;
    }
    struct dirent *e;
    int rc = CLI_OK;
    errno = 0;
    while ((e = readdir(d)) != NULL) {
        const char *name = e->d_name;
        if (name[0] == '.')
            continue;
        cli_strs *into = NULL;
        if (ends_with(name, ".safetensors") && strlen(name) > strlen(".safetensors"))
            into = files;
        else if (ends_with(name, ".safetensors.index.json"))
            into = indexes;
        if (!into)
            continue;
        /* Directories named *.safetensors are listed too, so that the user
           hears about them (opening reports "is a directory"). */
        if (cli_strs_add(into, join(dir, name)) < 0) {
            cli_err("out of memory listing '%s'", dir);
            rc = CLI_FAIL;
            break;
        }
        errno = 0;
    }
    if (rc == CLI_OK && errno) {
        cli_err("cannot read directory '%s': %s", dir, strerror(errno));
        rc = CLI_FAIL;
    }
    closedir(d);
    cli_strs_sort(files);
    cli_strs_sort(indexes);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Index                                                              */
/* ------------------------------------------------------------------ */

static int cmp_entry(const void *a, const void *b)
{
    const cli_index_entry *x = a, *y = b;
    int c = strcmp(x->file, y->file);
    if (c)
        return c;
    size_t n = x->tensor_len < y->tensor_len ? x->tensor_len : y->tensor_len;
    c = memcmp(x->tensor, y->tensor, n);
    if (c)
        return c;
    return x->tensor_len < y->tensor_len ? -1 : x->tensor_len > y->tensor_len;
}

static char *dirname_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return cli_fmt(".");
    if (slash == path)
        return cli_fmt("/");
    return cli_fmt("%.*s", (int)(slash - path), path);
}

int cli_index_load(cli_index *ix, const char *path, cli_strs *problems)
{
    memset(ix, 0, sizeof *ix);
    ix->path = cli_fmt("%s", path);
    ix->dir = dirname_of(path);
    if (!ix->path || !ix->dir) {
        cli_strs_addf(problems, "%s: out of memory", path);
        return CLI_FAIL;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        cli_strs_addf(problems, "%s: cannot open index: %s", path, strerror(errno));
        return CLI_FAIL;
    }
    if (!S_ISREG(st.st_mode)) {
        cli_strs_addf(problems, "%s: not a regular file", path);
        return CLI_FAIL;
    }
    if (st.st_size > MAX_INDEX_BYTES) {
        cli_strs_addf(problems, "%s: index of %lld bytes is larger than the limit of %lld", path,
                      (long long)st.st_size, MAX_INDEX_BYTES);
        return CLI_FAIL;
    }
    json_error_t jerr;
    ix->root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!ix->root) {
        cli_strs_addf(problems, "%s: index is not valid JSON: %s (line %d, column %d)", path,
                      jerr.text, jerr.line, jerr.column);
        return CLI_FAIL;
    }
    if (!json_is_object(ix->root)) {
        cli_strs_addf(problems, "%s: index is not a JSON object", path);
        return CLI_FAIL;
    }
    json_t *md = json_object_get(ix->root, "metadata");
    if (md && !json_is_null(md) && !json_is_object(md)) {
        cli_strs_addf(problems, "%s: \"metadata\" is not an object", path);
        return CLI_FAIL;
    }
    ix->metadata = json_is_object(md) ? md : NULL;
    ix->weight_map = json_object_get(ix->root, "weight_map");
    if (!ix->weight_map) {
        cli_strs_addf(problems, "%s: index has no \"weight_map\"", path);
        return CLI_FAIL;
    }
    if (!json_is_object(ix->weight_map)) {
        cli_strs_addf(problems, "%s: \"weight_map\" is not an object", path);
        return CLI_FAIL;
    }
    size_t n = json_object_size(ix->weight_map);
    ix->entries = calloc(n ? n : 1, sizeof *ix->entries);
    if (!ix->entries) {
        cli_strs_addf(problems, "%s: out of memory", path);
        return CLI_FAIL;
    }
    const char *key;
    size_t key_len;
    json_t *val;
    json_object_keylen_foreach(ix->weight_map, key, key_len, val)
    {
        if (!json_is_string(val)) {
            cli_strs_addf(problems, "%s: weight_map[\"%s\"] is not a string", path, key);
            continue;
        }
        const char *file = json_string_value(val);
        if (strlen(file) != json_string_length(val)) {
            cli_strs_addf(problems, "%s: weight_map[\"%s\"]: file name contains NUL", path, key);
            continue;
        }
        const char *bad = shs_file_name_problem(file);
        if (bad) {
            cli_strs_addf(problems, "%s: weight_map[\"%s\"]: file name '%s' %s", path, key, file,
                          bad);
            continue;
        }
        cli_index_entry *e = &ix->entries[ix->n_entries++];
        e->tensor = key;
        e->tensor_len = key_len;
        e->file = file;
    }
    if (ix->n_entries > 1)
        qsort(ix->entries, ix->n_entries, sizeof *ix->entries, cmp_entry);
    for (size_t i = 0; i < ix->n_entries; i++) {
        if (i && strcmp(ix->entries[i].file, ix->entries[i - 1].file) == 0)
            continue;
        if (cli_strs_add(&ix->shards, cli_fmt("%s", ix->entries[i].file)) < 0 ||
            cli_strs_add(&ix->shard_paths, strchr(path, '/')
                                               ? join(ix->dir, ix->entries[i].file)
                                               : cli_fmt("%s", ix->entries[i].file)) < 0) {
            cli_strs_addf(problems, "%s: out of memory", path);
            return CLI_FAIL;
        }
    }
    if (json_object_size(ix->weight_map) == 0)
        cli_strs_addf(problems, "%s: weight_map is empty", path);
    ix->shard_bytes_valid = 1;
    return CLI_OK;
}

void cli_index_check_shard(cli_index *ix, size_t k, const shs_file *f, const char *why,
                           cli_strs *problems)
{
    const char *shard = ix->shards.v[k];
    if (!f) {
        cli_strs_addf(problems, "%s: shard '%s' named by the weight_map cannot be read: %s",
                      ix->path, shard, why && *why ? why : "unknown error");
        ix->shard_bytes_valid = 0;
        return;
    }
    /* weight_map -> shard: the entries of this file are contiguous */
    cli_index_entry probe = { "", 0, shard };
    size_t lo = 0, hi = ix->n_entries;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp_entry(&ix->entries[mid], &probe) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < ix->n_entries && strcmp(ix->entries[i].file, shard) == 0; i++) {
        const cli_index_entry *e = &ix->entries[i];
        size_t idx;
        if (strlen(e->tensor) != e->tensor_len || shs_file_find(&idx, f, e->tensor) < 0)
            cli_strs_addf(problems,
                          "%s: weight_map names tensor '%s' in '%s', but that shard has no "
                          "such tensor",
                          ix->path, e->tensor, shard);
    }
    /* shard -> weight_map */
    size_t nt = shs_file_tensor_count(f);
    for (size_t t = 0; t < nt; t++) {
        const shs_tensor_info *ti = shs_file_tensor(f, t);
        ix->shard_bytes = cli_add_sat(ix->shard_bytes, ti->nbytes);
        json_t *v = json_object_getn(ix->weight_map, ti->name, ti->name_len);
        if (!v) {
            cli_strs_addf(problems, "%s: tensor '%s' of shard '%s' is not in the weight_map",
                          ix->path, ti->name, shard);
        } else if (json_is_string(v) && strcmp(json_string_value(v), shard) != 0) {
            cli_strs_addf(problems,
                          "%s: tensor '%s' is stored in shard '%s', but the weight_map "
                          "names '%s'",
                          ix->path, ti->name, shard, json_string_value(v));
        }
    }
}

void cli_index_finish(cli_index *ix, cli_strs *warnings)
{
    if (!ix->metadata || !ix->shard_bytes_valid)
        return;
    json_t *ts = json_object_get(ix->metadata, "total_size");
    if (!ts)
        return;
    if (!json_is_integer(ts) || json_integer_value(ts) < 0) {
        cli_strs_addf(warnings, "%s: metadata.total_size is not a non-negative integer", ix->path);
        return;
    }
    uint64_t want = (uint64_t)json_integer_value(ts);
    if (want != ix->shard_bytes)
        cli_strs_addf(warnings,
                      "%s: metadata.total_size is %llu, but the shards hold %llu bytes "
                      "of tensor data",
                      ix->path, (unsigned long long)want, (unsigned long long)ix->shard_bytes);
}

void cli_index_release(cli_index *ix)
{
    free(ix->path);
    free(ix->dir);
    free(ix->entries);
    cli_strs_release(&ix->shards);
    cli_strs_release(&ix->shard_paths);
    json_decref(ix->root);
    memset(ix, 0, sizeof *ix);
}

/* ------------------------------------------------------------------ */
/* Walking a PATH                                                     */
/* ------------------------------------------------------------------ */

const char *cli_strip_path(const char *msg, const char *path)
{
    size_t n = strlen(path);
    if (strncmp(msg, path, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ')
        return msg + n + 2;
    return msg;
}

/* Open `path`; on failure return NULL with a message in *msg (caller
   frees).  The library's message is copied at once: later calls into the
   library overwrite it. */
static shs_file *open_for_walk(const char *path, char **msg)
{
    shs_file *f;
    char *why;
    *msg = NULL;
    if (cli_open_file(&f, path, &why) < 0) {
        *msg = why ? why : cli_fmt("%s", shs_last_error());
        return NULL;
    }
    return f;
}

static void walk_file(const char *path, const cli_walk_ops *ops, void *ctx)
{
    char *msg;
    shs_file *f = open_for_walk(path, &msg);
    ops->file(ctx, path, f, msg ? msg : "out of memory");
    shs_file_close(f);
    free(msg);
}

static int listed(const cli_strs *files, const char *path)
{
    for (size_t i = 0; files && i < files->n; i++)
        if (strcmp(files->v[i], path) == 0)
            return 1;
    return 0;
}

static void walk_index(const char *path, const cli_strs *files, const cli_walk_ops *ops, void *ctx)
{
    cli_index ix;
    cli_strs problems = { 0 }, warnings = { 0 };
    if (cli_index_load(&ix, path, &problems) == CLI_OK) {
        if (ops->index_begin)
            ops->index_begin(ctx, &ix);
        for (size_t k = 0; k < ix.shards.n; k++) {
            const char *sp = ix.shard_paths.v[k];
            char *msg;
            shs_file *f = open_for_walk(sp, &msg);
            if (!listed(files, sp))
                ops->file(ctx, sp, f, msg ? msg : "out of memory");
            cli_index_check_shard(&ix, k, f, msg ? cli_strip_path(msg, sp) : NULL, &problems);
            shs_file_close(f);
            free(msg);
        }
        cli_index_finish(&ix, &warnings);
    }
    ops->index_done(ctx, &ix, &problems, &warnings);
    cli_index_release(&ix);
    cli_strs_release(&problems);
    cli_strs_release(&warnings);
}

int cli_walk(const char *path, const cli_walk_ops *ops, void *ctx)
{
    switch (cli_classify(path)) {
    case CLI_KIND_FILE: walk_file(path, ops, ctx); return CLI_OK;
    case CLI_KIND_INDEX: walk_index(path, NULL, ops, ctx); return CLI_OK;
    case CLI_KIND_DIR: break;
    }
    cli_strs files = { 0 }, indexes = { 0 };
    int rc = cli_list_dir(path, &files, &indexes);
    if (rc == CLI_OK && files.n == 0 && indexes.n == 0) {
        cli_err("%s: directory holds no *.safetensors files", path);
        rc = CLI_FAIL;
    }
    if (rc == CLI_OK) {
        for (size_t i = 0; i < files.n; i++)
            walk_file(files.v[i], ops, ctx);
        for (size_t i = 0; i < indexes.n; i++)
            walk_index(indexes.v[i], &files, ops, ctx);
    }
    cli_strs_release(&files);
    cli_strs_release(&indexes);
    return rc;
}
