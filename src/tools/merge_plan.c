/*
 * merge_plan.c -- what shs_merge writes, decided before any byte is read:
 * the selection (kind, include/exclude globs), the output names (rename
 * rules, collisions), the output dtype, the packing of tensors into files
 * (transformers' rule), the parts of a split merge, and the index JSON.
 * Every input problem is found here, so that a bad option never leaves a
 * half-written output.
 */
#include "tools/merge.h"

#include "common/opts.h"

#include <ctype.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int shs_parse_size(uint64_t *out, const char *text)
{
    static const struct {
        const char *unit;
        uint64_t mul;
    } units[] = { { "", 1 },
                  { "B", 1 },
                  { "KB", 1000ull },
                  { "MB", 1000000ull },
                  { "GB", 1000000000ull },
                  { "TB", 1000000000000ull },
                  { "KIB", 1ull << 10 },
                  { "MIB", 1ull << 20 },
                  { "GIB", 1ull << 30 },
                  { "TIB", 1ull << 40 } };
    if (!out || !text)
        return shs__err(SHS_EINVAL, "shs_parse_size: NULL argument");
    const char *p = text;
    uint64_t v = 0;
    if (!isdigit((unsigned char)*p))
        return shs__err(SHS_EINVAL, "'%s' is not a size (e.g. 5GB, 500MiB, 1000000)", text);
    for (; isdigit((unsigned char)*p); p++)
        if (shs__mul_u64(v, 10, &v) || shs__add_u64(v, (uint64_t)(*p - '0'), &v))
            return shs__err(SHS_EINVAL, "size '%s' is too large", text);
    char unit[8];
    size_t n = strlen(p);
    if (n >= sizeof unit)
        return shs__err(SHS_EINVAL, "'%s' is not a size (e.g. 5GB, 500MiB, 1000000)", text);
    for (size_t i = 0; i < n && i < sizeof unit - 1; i++)
        unit[i] = (char)toupper((unsigned char)p[i]);
    unit[n] = '\0';
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(unit, units[i].unit) != 0)
            continue;
        if (shs__mul_u64(v, units[i].mul, &v))
            return shs__err(SHS_EINVAL, "size '%s' is too large", text);
        if (v == 0)
            return shs__err(SHS_EINVAL, "size '%s' is zero", text);
        *out = v;
        return SHS_OK;
    }
    return shs__err(
        SHS_EINVAL,
        "'%s' is not a size: unknown unit '%s' (use KB, MB, GB, TB, KiB, MiB, GiB, TiB)", text, p);
}

int shs__merge_check_opts(const shs_merge_opts *o, int finish, const char *what)
{
    if (o->flags & ~(unsigned)(SHS_MERGE_FORCE | SHS_MERGE_WITH_OPTIMIZER | SHS_MERGE_FSYNC))
        return shs__err(SHS_EINVAL, "%s: unknown flags 0x%x", what, o->flags);
    if (o->dtype != -1 &&
        (o->dtype < 0 || o->dtype >= SHS_DTYPE_COUNT || !shs_dtype_is_float((shs_dtype)o->dtype)))
        return shs__err(SHS_EINVAL,
                        "%s: dtype %d is not a floating-point type to convert to (F64, F32, "
                        "F16, BF16, F8_*)",
                        what, o->dtype);
    if (o->jobs < 0 || o->jobs > 1024)
        return shs__err(SHS_EINVAL, "%s: jobs must be 1 to 1024, not %d", what, o->jobs);
    if (o->part_count < 0 || o->part_count > 100000)
        return shs__err(SHS_EINVAL, "%s: part count must be 1 to 100000, not %d", what,
                        o->part_count);
    if (finish && o->part_count == 0)
        return shs__err(SHS_EINVAL, "%s: needs the number of parts (part_count)", what);
    if (!finish && o->part_count && (o->part_index < 0 || o->part_index >= o->part_count))
        return shs__err(SHS_EINVAL, "%s: part %d is out of range: parts are 0 to %d of %d", what,
                        o->part_index, o->part_count - 1, o->part_count);
    if ((o->n_include && !o->include) || (o->n_exclude && !o->exclude) ||
        (o->n_rename && !o->rename))
        return shs__err(SHS_EINVAL, "%s: a glob or rename list is NULL", what);
    for (size_t i = 0; i < o->n_include; i++)
        if (!o->include[i] || !*o->include[i])
            return shs__err(SHS_EINVAL, "%s: include glob %zu is empty", what, i + 1);
    for (size_t i = 0; i < o->n_exclude; i++)
        if (!o->exclude[i] || !*o->exclude[i])
            return shs__err(SHS_EINVAL, "%s: exclude glob %zu is empty", what, i + 1);
    for (size_t i = 0; i < o->n_rename; i++) {
        const char *r = o->rename[i], *eq = r ? strchr(r, '=') : NULL;
        if (!eq || eq == r)
            return shs__err(SHS_EINVAL, "%s: rename rule '%s' is not FROM=TO with FROM non-empty",
                            what, r ? r : "(null)");
    }
    if (o->progress == NULL && o->progress_ctx != NULL)
        return shs__err(SHS_EINVAL, "%s: progress_ctx without progress", what);
    if (o->version >= 3 && o->grouping != SHS_MERGE_GROUPING_CURRENT &&
        o->grouping != SHS_MERGE_GROUPING_LEGACY)
        return shs__err(SHS_EINVAL,
                        "%s: grouping %d is neither SHS_MERGE_GROUPING_CURRENT nor _LEGACY", what,
                        o->grouping);
    return SHS_OK;
}

/* Apply every rename rule in order; *out is newly allocated. */
static int rename_one(char **out, const char *name, const shs_merge_opts *o)
{
    shs__buf cur = SHS__BUF_INIT;
    if (shs__buf_add(&cur, name, strlen(name) + 1) < 0)
        return shs__err(SHS_ENOMEM, "out of memory");
    for (size_t r = 0; r < o->n_rename; r++) {
        const char *eq = strchr(o->rename[r], '=');
        size_t fl = (size_t)(eq - o->rename[r]), tl = strlen(eq + 1);
        shs__buf next = SHS__BUF_INIT;
        const char *s = cur.data, *hit;
        int bad = 0;
        for (;;) {
            const char *h = s;
            hit = NULL;
            for (; *h; h++)
                if (strncmp(h, o->rename[r], fl) == 0) {
                    hit = h;
                    break;
                }
            if (!hit)
                break;
            bad |= shs__buf_add(&next, s, (size_t)(hit - s)) < 0;
            bad |= shs__buf_add(&next, eq + 1, tl) < 0;
            s = hit + fl;
        }
        bad |= shs__buf_add(&next, s, strlen(s) + 1) < 0;
        shs__buf_release(&cur);
        cur = next;
        if (bad) {
            shs__buf_release(&cur);
            return shs__err(SHS_ENOMEM, "out of memory");
        }
    }
    *out = cur.data;
    return SHS_OK;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const shs__mtensor *)a)->name, ((const shs__mtensor *)b)->name);
}

static int matches_any(const char *const *globs, size_t n, const char *name, unsigned char *hit)
{
    int any = 0;
    for (size_t g = 0; g < n; g++)
        if (fnmatch(globs[g], name, 0) == 0) {
            hit[g] = 1;
            any = 1;
        }
    return any;
}

/* Select and rename: p->t gets the chosen tensors (unsorted). */
static int select_tensors(shs__mplan *p, const shs_checkpoint *ck, const shs_merge_opts *o)
{
    size_t nt = shs_checkpoint_tensor_count(ck), n_kind = 0;
    const char *src = shs_checkpoint_path(ck);
    int with_opt = (o->flags & SHS_MERGE_WITH_OPTIMIZER) != 0, rc = SHS_OK;
    unsigned char *hit_in = shs__calloc(o->n_include + 1, 1);
    unsigned char *hit_ex = shs__calloc(o->n_exclude + 1, 1);
    p->t = shs__calloc(nt ? nt : 1, sizeof *p->t);
    if (!hit_in || !hit_ex || !p->t) {
        rc = shs__err(SHS_ENOMEM, "out of memory planning the merge of %s", src);
        goto done;
    }
    for (size_t i = 0; i < nt; i++) {
        const shs_checkpoint_tensor_info *ti = shs_checkpoint_tensor(ck, i);
        if (ti->kind != SHS_KIND_MODEL && !with_opt)
            continue;
        n_kind++;
        int in = o->n_include == 0 || matches_any(o->include, o->n_include, ti->name, hit_in);
        int ex = matches_any(o->exclude, o->n_exclude, ti->name, hit_ex);
        if (!in || ex)
            continue;
        shs__mtensor *t = &p->t[p->n++];
        t->src = i;
        t->src_name = ti->name;
        t->src_dtype = ti->dtype;
        t->dtype = o->dtype >= 0 && shs_dtype_is_float(ti->dtype) ? (shs_dtype)o->dtype : ti->dtype;
        t->ndim = ti->ndim;
        t->shape = ti->shape;
        if ((rc = shs_tensor_nbytes(&t->nbytes, t->dtype, t->ndim, t->shape)) < 0) {
            rc = shs__err(rc, "%s: tensor '%s': its size as %s is not a whole number of bytes", src,
                          ti->name, shs_dtype_name(t->dtype));
            goto done;
        }
        /* transformers' total_parameters counts the model's parameters,
           not optimizer state (the elements fit: nbytes did) */
        uint64_t numel = 1;
        for (size_t d = 0; d < t->ndim; d++)
            numel *= t->shape[d];
        if (ti->kind == SHS_KIND_MODEL)
            p->params += numel;
        if ((rc = rename_one(&t->name, ti->name, o)) < 0)
            goto done;
        if (!*t->name || strcmp(t->name, "__metadata__") == 0) {
            rc = shs__err(SHS_EINVAL, "%s: tensor '%s': the rename rules make its name '%s'", src,
                          ti->name, t->name);
            goto done;
        }
    }
    const char *what = with_opt ? "tensor"
                                : "model tensor (optimizer tensors are merged only with "
                                  "--with-optimizer)";
    for (size_t g = 0; g < o->n_include; g++)
        if (!hit_in[g]) {
            rc = shs__err(SHS_EINVAL, "%s: include glob '%s' matches no %s", src, o->include[g],
                          what);
            goto done;
        }
    for (size_t g = 0; g < o->n_exclude; g++)
        if (!hit_ex[g]) {
            rc = shs__err(SHS_EINVAL, "%s: exclude glob '%s' matches no %s", src, o->exclude[g],
                          what);
            goto done;
        }
    if (p->n == 0)
        rc = shs__err(SHS_EINVAL, "%s: nothing to merge: %s", src,
                      n_kind ? "the globs exclude every tensor"
                             : (with_opt ? "the checkpoint has no tensors"
                                         : "the checkpoint has no model tensors"));
done:
    shs__free(hit_in);
    shs__free(hit_ex);
    return rc;
}

/* transformers < 4.42 (shard_checkpoint): a new file when the next
   tensor would take the current one past the maximum, so a larger tensor
   closes the current file and stands alone. */
static void group_legacy(shs__mplan *p, uint64_t max)
{
    uint64_t cur = 0;
    size_t nf = 0;
    for (size_t i = 0; i < p->n; i++) {
        shs__mtensor *t = &p->t[i];
        uint64_t grown = cur > UINT64_MAX - t->nbytes ? UINT64_MAX : cur + t->nbytes;
        if (nf == 0 || grown > max) {
            nf++;
            grown = t->nbytes;
        }
        cur = grown;
        t->file = nf - 1;
    }
    p->nf = nf;
}

#define OPEN_FILE SIZE_MAX /* t->file of the tensors of the open file */

/* huggingface_hub >= 0.21 (split_state_dict_into_shards_factory, used by
   transformers >= 4.42): a tensor larger than the maximum becomes the
   next file at once and the open file stays open for the tensors after
   it; a tensor that would take the open file past the maximum closes it
   first.  Files are numbered in the order they are complete. */
static void group_current(shs__mplan *p, uint64_t max)
{
    uint64_t cur = 0;
    size_t nf = 0, open_from = 0, n_open = 0;
    for (size_t i = 0; i < p->n; i++) {
        shs__mtensor *t = &p->t[i];
        if (t->nbytes > max) {
            t->file = nf++;
            continue;
        }
        if (cur + t->nbytes > max) { /* no overflow: both are at most max */
            for (size_t j = open_from; j < i; j++)
                if (p->t[j].file == OPEN_FILE)
                    p->t[j].file = nf;
            nf++;
            cur = 0;
            n_open = 0;
            open_from = i;
        }
        t->file = OPEN_FILE;
        cur += t->nbytes;
        n_open++;
    }
    if (n_open) {
        for (size_t j = open_from; j < p->n; j++)
            if (p->t[j].file == OPEN_FILE)
                p->t[j].file = nf;
        nf++;
    }
    p->nf = nf;
}

/* Put the tensors of each file together (by file, then by name: stable)
   and keep the name order in p->by_name; fill the files. */
static int order_by_file(shs__mplan *p)
{
    shs__mtensor *t = shs__calloc(p->n, sizeof *t);
    size_t *start = shs__calloc(p->nf + 1, sizeof *start);
    int rc = SHS_OK;
    if (!t || !start || !(p->by_name = shs__calloc(p->n, sizeof *p->by_name))) {
        rc = shs__err(SHS_ENOMEM, "out of memory planning the merge");
        goto done;
    }
    for (size_t i = 0; i < p->n; i++)
        start[p->t[i].file + 1]++;
    for (size_t k = 0; k < p->nf; k++) {
        p->f[k].first = start[k];
        p->f[k].n = start[k + 1];
        start[k + 1] += start[k];
    }
    for (size_t i = 0; i < p->n; i++) {
        size_t at = start[p->t[i].file]++;
        t[at] = p->t[i];
        p->by_name[i] = at;
        p->f[t[at].file].bytes += t[at].nbytes;
    }
    shs__free(p->t);
    p->t = t;
    t = NULL;
done:
    shs__free(t);
    shs__free(start);
    return rc;
}

/* Pack the sorted tensors into files and spread the files over parts. */
static int pack(shs__mplan *p, const shs_merge_opts *o)
{
    uint64_t max = o->max_shard_size ? o->max_shard_size : SHS__MERGE_DEFAULT_SHARD;
    int rc;
    p->f = shs__calloc(p->n, sizeof *p->f);
    if (!p->f)
        return shs__err(SHS_ENOMEM, "out of memory planning the merge");
    for (size_t i = 0; i < p->n; i++)
        if (shs__add_u64(p->total, p->t[i].nbytes, &p->total))
            return shs__err(SHS_EOVERFLOW, "merge: total size overflows 64 bits");
    if (p->grouping == SHS_MERGE_GROUPING_LEGACY)
        group_legacy(p, max);
    else
        group_current(p, max);
    if ((rc = order_by_file(p)) < 0)
        return rc;
    if (p->nf > 99999)
        return shs__err(SHS_EINVAL,
                        "merge: %zu output files (more than 99999): raise the shard size", p->nf);
    for (size_t k = 0; k < p->nf; k++) {
        if (p->nf == 1)
            snprintf(p->f[k].name, sizeof p->f[k].name, "model.safetensors");
        else
            snprintf(p->f[k].name, sizeof p->f[k].name, "model-%05zu-of-%05zu.safetensors", k + 1,
                     p->nf);
    }
    if (o->part_count <= 1)
        return SHS_OK;
    /* largest file first to the least loaded part (ties: lowest part;
       equal files: lowest index), so that the parts' bytes are even */
    uint64_t *load = shs__calloc((size_t)o->part_count, sizeof *load);
    unsigned char *done = shs__calloc(p->nf, 1);
    if (!load || !done) {
        shs__free(load);
        shs__free(done);
        return shs__err(SHS_ENOMEM, "out of memory planning the merge");
    }
    for (size_t step = 0; step < p->nf; step++) {
        size_t best = 0;
        int found = 0;
        for (size_t k = 0; k < p->nf; k++)
            if (!done[k] && (!found || p->f[k].bytes > p->f[best].bytes)) {
                best = k;
                found = 1;
            }
        int part = 0;
        for (int q = 1; q < o->part_count; q++)
            if (load[q] < load[part])
                part = q;
        done[best] = 1;
        p->f[best].part = part;
        load[part] += p->f[best].bytes;
    }
    shs__free(load);
    shs__free(done);
    return SHS_OK;
}

int shs__merge_plan(shs__mplan *p, const shs_checkpoint *ck, const shs_merge_opts *o)
{
    memset(p, 0, sizeof *p);
    p->grouping = o->version >= 3 ? o->grouping : SHS_MERGE_GROUPING_LEGACY;
    int rc = select_tensors(p, ck, o);
    if (rc < 0)
        goto fail;
    qsort(p->t, p->n, sizeof *p->t, by_name);
    for (size_t i = 1; i < p->n; i++)
        if (strcmp(p->t[i - 1].name, p->t[i].name) == 0) {
            rc = shs__err(SHS_EINVAL, "%s: tensors '%s' and '%s' would both be named '%s'",
                          shs_checkpoint_path(ck), p->t[i - 1].src_name, p->t[i].src_name,
                          p->t[i].name);
            goto fail;
        }
    if ((rc = pack(p, o)) < 0)
        goto fail;
    return SHS_OK;
fail:
    shs__merge_plan_free(p);
    return rc;
}

void shs__merge_plan_free(shs__mplan *p)
{
    for (size_t i = 0; p->t && i < p->n; i++)
        shs__free(p->t[i].name);
    shs__free(p->t);
    shs__free(p->by_name);
    shs__free(p->f);
    memset(p, 0, sizeof *p);
}

/* A JSON string as Python's json.dumps writes it (ensure_ascii): the
   ASCII printables as is, except " and \; the short escapes; everything
   else as \uXXXX in lowercase hex, surrogate pairs above U+FFFF.  `s` is
   valid UTF-8 (checked by the checkpoint's reader). */
static int py_json_str(shs__buf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    int bad = shs__buf_addc(b, '"') < 0;
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        uint32_t cp = *u;
        size_t len = 1;
        if (cp >= 0xF0) {
            cp = ((cp & 0x07u) << 18) | ((u[1] & 0x3Fu) << 12) | ((u[2] & 0x3Fu) << 6) |
                 (u[3] & 0x3Fu);
            len = 4;
        } else if (cp >= 0xE0) {
            cp = ((cp & 0x0Fu) << 12) | ((u[1] & 0x3Fu) << 6) | (u[2] & 0x3Fu);
            len = 3;
        } else if (cp >= 0xC0) {
            cp = ((cp & 0x1Fu) << 6) | (u[1] & 0x3Fu);
            len = 2;
        }
        u += len;
        const char *esc = cp == '"'    ? "\\\""
                          : cp == '\\' ? "\\\\"
                          : cp == '\n' ? "\\n"
                          : cp == '\r' ? "\\r"
                          : cp == '\t' ? "\\t"
                          : cp == '\b' ? "\\b"
                          : cp == '\f' ? "\\f"
                                       : NULL;
        if (esc) {
            bad |= shs__buf_add(b, esc, 2) < 0;
            continue;
        }
        if (cp >= 0x20 && cp < 0x7F) {
            bad |= shs__buf_addc(b, (char)cp) < 0;
            continue;
        }
        uint32_t units[2] = { cp, 0 };
        int nu = 1;
        if (cp > 0xFFFF) {
            units[0] = 0xD800 + ((cp - 0x10000) >> 10);
            units[1] = 0xDC00 + ((cp - 0x10000) & 0x3FF);
            nu = 2;
        }
        for (int k = 0; k < nu; k++) {
            char e[6] = { '\\',
                          'u',
                          hex[(units[k] >> 12) & 15],
                          hex[(units[k] >> 8) & 15],
                          hex[(units[k] >> 4) & 15],
                          hex[units[k] & 15] };
            bad |= shs__buf_add(b, e, 6) < 0;
        }
    }
    bad |= shs__buf_addc(b, '"') < 0;
    return bad ? shs__err(SHS_ENOMEM, "out of memory") : SHS_OK;
}

int shs__merge_index_json(shs__buf *out, const shs__mplan *p)
{
    /* keys are sorted: "metadata" < "weight_map", and p->t is sorted by
       name bytewise, which is Python's code point order for UTF-8 */
    int bad = shs__buf_addf(out, "{\n  \"metadata\": {\n") < 0;
    /* transformers >= 4.53 writes {"total_parameters": P, **split.metadata}:
       sorted, it comes before "total_size" */
    if (p->grouping != SHS_MERGE_GROUPING_LEGACY)
        bad |= shs__buf_addf(out, "    \"total_parameters\": %llu,\n",
                             (unsigned long long)p->params) < 0;
    bad |= shs__buf_addf(out, "    \"total_size\": %llu\n  },\n  \"weight_map\": {\n",
                         (unsigned long long)p->total) < 0;
    for (size_t k = 0; k < p->n && !bad; k++) {
        const shs__mtensor *t = &p->t[p->by_name[k]];
        bad |= shs__buf_add(out, "    ", 4) < 0;
        bad |= py_json_str(out, t->name) < 0;
        bad |= shs__buf_add(out, ": ", 2) < 0;
        bad |= py_json_str(out, p->f[t->file].name) < 0;
        if (k + 1 < p->n)
            bad |= shs__buf_addc(out, ',') < 0;
        bad |= shs__buf_addc(out, '\n') < 0;
    }
    bad |= shs__buf_add(out, "  }\n}\n", 6) < 0;
    return bad ? shs__err(SHS_ENOMEM, "out of memory writing the index") : SHS_OK;
}

int shs__merge_own_name(const char *name)
{
    unsigned a, b;
    int end = 0;
    if (strcmp(name, "model.safetensors") == 0 || strcmp(name, SHS__MERGE_INDEX) == 0)
        return 1;
    if (strlen(name) != strlen("model-00001-of-00002.safetensors"))
        return 0;
    return sscanf(name, "model-%5u-of-%5u.safetensors%n", &a, &b, &end) == 2 &&
           (size_t)end == strlen(name) && isdigit((unsigned char)name[6]) &&
           isdigit((unsigned char)name[15]);
}
