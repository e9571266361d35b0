/*
 * hf_index.c -- a Hugging Face model.safetensors.index.json: the one
 * reader of it (the library's loads and `shardsafe inspect/verify` alike),
 * with one size cap, one file-name rule (shs_file_name_problem) and one
 * rule for how the index and its shards must agree.  Public API in
 * shardsafe.h ("Hugging Face index"); the checkpoint model of an index is
 * meta_plain.c's.
 */
#include "source/hf_index.h"

#include "format/json_doc.h"
#include "source/stepdir.h"
#include "store/io.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INDEX_MAX (256u << 20) /* a larger index file is refused */

struct shs_hf_index {
    char *path;
    shs__jdoc doc;
    shs_hf_index_entry *e; /* sorted by file, then tensor */
    size_t n;
    char **problems; /* of entries, owned */
    const shs_hf_index_entry **by_tensor;
    const char **files; /* distinct usable file names, sorted (borrowed) */
    size_t nfiles;
    int total_rc;
    uint64_t total;
    const char *metadata; /* raw JSON text of "metadata", or NULL */
    size_t metadata_len;
};

static int cmp_bytes(const char *a, size_t an, const char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : (an > bn) - (an < bn);
}

static int cmp_entry(const void *pa, const void *pb)
{
    const shs_hf_index_entry *a = pa, *b = pb;
    int c = strcmp(a->file ? a->file : "", b->file ? b->file : "");
    return c ? c : cmp_bytes(a->tensor, a->tensor_len, b->tensor, b->tensor_len);
}

static int cmp_by_tensor(const void *pa, const void *pb)
{
    const shs_hf_index_entry *a = *(const shs_hf_index_entry *const *)pa;
    const shs_hf_index_entry *b = *(const shs_hf_index_entry *const *)pb;
    return cmp_bytes(a->tensor, a->tensor_len, b->tensor, b->tensor_len);
}

/* The problem of entry e as an allocated message, or NULL. */
static char *entry_problem(const char *key, const shs__jnode *v, const char **file)
{
    char buf[768];
    *file = NULL;
    if (v->type != SHS__J_STR) {
        snprintf(buf, sizeof buf, "weight_map[\"%.200s\"] is not a string (is not a file name)",
                 key);
        return shs__strdup(buf);
    }
    if (strlen(v->s) != v->len) {
        snprintf(buf, sizeof buf, "weight_map[\"%.200s\"]: file name contains NUL", key);
        return shs__strdup(buf);
    }
    const char *why = shs_file_name_problem(v->s);
    if (why) {
        snprintf(buf, sizeof buf, "weight_map[\"%.200s\"]: file name '%.300s' %s", key, v->s, why);
        return shs__strdup(buf);
    }
    *file = v->s;
    return NULL;
}

static int index_fail(shs_hf_index *ix, int rc, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    shs_hf_index_free(ix);
    return shs__err(rc, "%s", buf);
}

int shs_hf_index_open(shs_hf_index **out, const char *path)
{
    if (!out || !path || !*path)
        return shs__err(SHS_EINVAL, "shs_hf_index_open: NULL or empty argument");
    *out = NULL;
    shs_hf_index *ix = shs__calloc(1, sizeof *ix);
    if (!ix || !(ix->path = shs__strdup(path))) {
        shs__free(ix);
        return shs__err(SHS_ENOMEM, "out of memory");
    }
    int rc = shs__jdoc_load(&ix->doc, path, INDEX_MAX);
    if (rc == SHS_ECORRUPT) {
        /* "<path>: invalid JSON at ..." -> "<path>: index is not valid JSON: ..." */
        const char *msg = shs_last_error();
        size_t pl = strlen(path);
        if (!strncmp(msg, path, pl) && msg[pl] == ':')
            msg += pl + 2;
        return index_fail(ix, rc, "%s: index is not valid JSON: %s", path, msg);
    }
    if (rc < 0) {
        shs_hf_index_free(ix);
        return rc;
    }
    const shs__jdoc *d = &ix->doc;
    const shs__jnode *root = shs__jroot(d);
    if (!shs__jis(root, SHS__J_OBJ))
        return index_fail(ix, SHS_ECORRUPT, "%s: index is not a JSON object", path);
    const shs__jnode *md = shs__jget(d, root, "metadata");
    if (md && md->type != SHS__J_NULL && md->type != SHS__J_OBJ)
        return index_fail(ix, SHS_ECORRUPT, "%s: \"metadata\" is not an object", path);
    if (md && md->type == SHS__J_OBJ) {
        ix->metadata = d->text + md->raw;
        ix->metadata_len = md->raw_len;
    }
    const shs__jnode *ts = shs__jget(d, md, "total_size");
    ix->total_rc = !ts ? SHS_ENOENT : ts->type == SHS__J_NUM && ts->is_uint ? SHS_OK : SHS_ECORRUPT;
    ix->total = ts ? ts->u : 0;
    const shs__jnode *wm = shs__jget(d, root, "weight_map");
    if (!wm || wm->type != SHS__J_OBJ)
        return index_fail(ix, SHS_ECORRUPT, "%s: index has no \"weight_map\" object", path);
    ix->e = shs__calloc(wm->n + 1, sizeof *ix->e);
    ix->problems = shs__calloc(wm->n + 1, sizeof *ix->problems);
    ix->by_tensor = shs__calloc(wm->n + 1, sizeof *ix->by_tensor);
    ix->files = shs__calloc(wm->n + 1, sizeof *ix->files);
    if (!ix->e || !ix->problems || !ix->by_tensor || !ix->files)
        return index_fail(ix, SHS_ENOMEM, "out of memory reading %s", path);
    for (const shs__jnode *v = shs__jfirst(d, wm); v; v = shs__jnext(d, v)) {
        shs_hf_index_entry *e = &ix->e[ix->n];
        e->tensor = v->key;
        e->tensor_len = v->key_len;
        char *why = entry_problem(v->key, v, &e->file);
        if (!e->file && !why)
            return index_fail(ix, SHS_ENOMEM, "out of memory reading %s", path);
        ix->problems[ix->n++] = why;
        e->problem = why;
    }
    qsort(ix->e, ix->n, sizeof *ix->e, cmp_entry);
    for (size_t i = 0; i < ix->n; i++) {
        ix->by_tensor[i] = &ix->e[i];
        const char *f = ix->e[i].file;
        if (f && (!ix->nfiles || strcmp(ix->files[ix->nfiles - 1], f) != 0))
            ix->files[ix->nfiles++] = f;
    }
    qsort(ix->by_tensor, ix->n, sizeof *ix->by_tensor, cmp_by_tensor);
    *out = ix;
    return SHS_OK;
}

void shs_hf_index_free(shs_hf_index *ix)
{
    if (!ix)
        return;
    for (size_t i = 0; ix->problems && i < ix->n; i++)
        shs__free(ix->problems[i]);
    shs__free(ix->problems);
    shs__free(ix->e);
    shs__free(ix->by_tensor);
    shs__free(ix->files);
    shs__jdoc_free(&ix->doc);
    shs__free(ix->path);
    shs__free(ix);
}

const char *shs_hf_index_path(const shs_hf_index *ix)
{
    return ix ? ix->path : NULL;
}

size_t shs_hf_index_count(const shs_hf_index *ix)
{
    return ix ? ix->n : 0;
}

const shs_hf_index_entry *shs_hf_index_entry_at(const shs_hf_index *ix, size_t i)
{
    return ix && i < ix->n ? &ix->e[i] : NULL;
}

size_t shs_hf_index_file_count(const shs_hf_index *ix)
{
    return ix ? ix->nfiles : 0;
}

const char *shs_hf_index_file(const shs_hf_index *ix, size_t i)
{
    return ix && i < ix->nfiles ? ix->files[i] : NULL;
}

const char *shs_hf_index_metadata(const shs_hf_index *ix, size_t *len)
{
    if (len)
        *len = ix ? ix->metadata_len : 0;
    return ix ? ix->metadata : NULL;
}

int shs_hf_index_total_size(uint64_t *out, const shs_hf_index *ix)
{
    if (!out || !ix)
        return shs__err(SHS_EINVAL, "shs_hf_index_total_size: NULL argument");
    *out = ix->total;
    if (ix->total_rc == SHS_ECORRUPT)
        return shs__err(SHS_ECORRUPT, "%s: metadata.total_size is not a non-negative integer",
                        ix->path);
    return ix->total_rc;
}

const shs_hf_index_entry *shs__hf_index_find(const shs_hf_index *ix, const char *tensor, size_t len)
{
    size_t lo = 0, hi = ix->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const shs_hf_index_entry *e = ix->by_tensor[mid];
        int c = cmp_bytes(e->tensor, e->tensor_len, tensor, len);
        if (!c)
            return e;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* report() a formatted problem; counts it. */
static void say(size_t *n, shs_problem_fn report, void *ctx, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    (*n)++;
    if (report)
        report(ctx, buf);
}

size_t shs_hf_index_check_file(const shs_hf_index *ix, const char *file, const shs_file *f,
                               shs_problem_fn report, void *ctx)
{
    size_t n = 0;
    if (!ix || !file || !f)
        return 0;
    /* weight_map -> shard: the entries of this file are contiguous */
    for (size_t i = 0; i < ix->n; i++) {
        const shs_hf_index_entry *e = &ix->e[i];
        size_t idx;
        if (!e->file || strcmp(e->file, file) != 0)
            continue;
        if (shs_file_find_n(&idx, f, e->tensor, e->tensor_len) < 0)
            say(&n, report, ctx,
                "%s: weight_map names tensor '%.*s' in '%s', but that shard has no such tensor",
                ix->path, (int)(e->tensor_len > 300 ? 300 : e->tensor_len), e->tensor, file);
    }
    /* shard -> weight_map */
    for (size_t t = 0; t < shs_file_tensor_count(f); t++) {
        const shs_tensor_info *ti = shs_file_tensor(f, t);
        const shs_hf_index_entry *e = shs__hf_index_find(ix, ti->name, ti->name_len);
        if (!e)
            say(&n, report, ctx, "%s: tensor '%s' of shard '%s' is not in the weight_map", ix->path,
                ti->name, file);
        else if (e->file && strcmp(e->file, file) != 0)
            say(&n, report, ctx,
                "%s: tensor '%s' is stored in shard '%s', but the weight_map names '%s'", ix->path,
                ti->name, file, e->file);
    }
    shs__err_clear();
    return n;
}
