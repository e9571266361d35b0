/*
 * scan.c -- walking what a command-line PATH names for `inspect` and
 * `verify`: one safetensors file, a directory of them, or a Hugging Face
 * model.safetensors.index.json.  What a path is comes from the library
 * (shs_path_kind), the index and its agreement with the shards from the
 * library's one reader (shs_hf_index_*); this file only lists every
 * problem instead of stopping at the first, as a load does.
 */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

cli_kind cli_classify(const char *path)
{
    shs_source_kind k = SHS_SOURCE_NONE;
    (void)shs_path_kind(&k, path); /* a failure to look: the open reports it */
    switch (k) {
    case SHS_SOURCE_HF_INDEX: return ends_with(path, ".json") ? CLI_KIND_INDEX : CLI_KIND_DIR;
    case SHS_SOURCE_FILE:
    case SHS_SOURCE_NONE:
    case SHS_SOURCE_STEP_PART: return CLI_KIND_FILE;
    case SHS_SOURCE_OTHER: return CLI_KIND_FILE;
    default: return CLI_KIND_DIR;
    }
}

char *cli_wrong_kind(const char *cmd, const char *path)
{
    shs_source_kind k = SHS_SOURCE_NONE;
    if (shs_path_kind(&k, path) != SHS_OK || k != SHS_SOURCE_STEP_PART)
        return NULL;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char *dir = slash ? cli_fmt("%.*s", (int)(slash - path), path) : cli_fmt(".");
    char *msg = cli_fmt(
        "%s is the %s of %s %s, not a checkpoint by itself: shardsafe %s %s", path, base,
        !strcmp(base, "latest_checkpointed_iteration.txt") ? "the save path" : "the step directory",
        dir ? dir : "", cmd, dir ? dir : "");
    free(dir);
    return msg;
}

int cli_open_file(shs_file **out, const char *path, char **why)
{
    /* the library refuses what is no regular file (a FIFO is never
       opened blocking) and reads with pread: see cli.h */
    *why = NULL;
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
/* Index: the library's reader (shs_hf_index), every problem listed     */
/* ------------------------------------------------------------------ */

static char *dirname_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return cli_fmt(".");
    if (slash == path)
        return cli_fmt("/");
    return cli_fmt("%.*s", (int)(slash - path), path);
}

static void add_problem(void *ctx, const char *msg)
{
    cli_strs_addf(ctx, "%s", msg);
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
    if (shs_hf_index_open(&ix->ix, path) != SHS_OK) {
        cli_strs_addf(problems, "%s", shs_last_error());
        return CLI_FAIL;
    }
    for (size_t i = 0; i < shs_hf_index_count(ix->ix); i++) {
        const shs_hf_index_entry *e = shs_hf_index_entry_at(ix->ix, i);
        if (e->problem)
            cli_strs_addf(problems, "%s: %s", path, e->problem);
    }
    for (size_t i = 0; i < shs_hf_index_file_count(ix->ix); i++) {
        const char *f = shs_hf_index_file(ix->ix, i);
        if (cli_strs_add(&ix->shards, cli_fmt("%s", f)) < 0 ||
            cli_strs_add(&ix->shard_paths,
                         strchr(path, '/') ? join(ix->dir, f) : cli_fmt("%s", f)) < 0) {
            cli_strs_addf(problems, "%s: out of memory", path);
            return CLI_FAIL;
        }
    }
    if (shs_hf_index_count(ix->ix) == 0)
        cli_strs_addf(problems, "%s: weight_map is empty", path);
    ix->shard_bytes_valid = 1;
    return CLI_OK;
}

size_t cli_index_tensor_count(const cli_index *ix)
{
    return shs_hf_index_count(ix->ix);
}

json_t *cli_index_metadata(const cli_index *ix)
{
    size_t len = 0;
    const char *text = shs_hf_index_metadata(ix->ix, &len);
    /* the library read and validated it; this only re-formats it */
    return text ? json_loadb(text, len, 0, NULL) : NULL;
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
    shs_hf_index_check_file(ix->ix, shard, f, add_problem, problems);
    for (size_t t = 0; t < shs_file_tensor_count(f); t++)
        ix->shard_bytes = cli_add_sat(ix->shard_bytes, shs_file_tensor(f, t)->nbytes);
}

void cli_index_finish(cli_index *ix, cli_strs *warnings)
{
    uint64_t want;
    if (!ix->ix || !ix->shard_bytes_valid)
        return;
    int rc = shs_hf_index_total_size(&want, ix->ix);
    if (rc == SHS_ENOENT)
        return;
    if (rc != SHS_OK) {
        cli_strs_addf(warnings, "%s", shs_last_error());
        return;
    }
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
    cli_strs_release(&ix->shards);
    cli_strs_release(&ix->shard_paths);
    shs_hf_index_free(ix->ix);
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
    shs_file_free(f);
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
            shs_file_free(f);
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
