/*
 * hf_load.c -- Hugging Face weights for the manager's initial load
 * (initial_load_in_hf): which file describes the model (the index or
 * model.safetensors, never a directory listing), and the renaming of
 * the files' tensor names to the registered ones (hf_name_map,
 * hf_name_map_file).  The model built here is loaded by the common
 * loader (load.c), so chunking, dtype conversion, load_balanced and the
 * strict checks are the same as for any other checkpoint.  docs/hf.md.
 */
#include "source/hf_load.h"

#include "source/source.h"

#include "store/io.h"
#include "source/stepdir.h"

#include "format/json_doc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAP_FILE_MAX (64u << 20) /* a larger name-map file is refused */
#define HF_SINGLE "model.safetensors"

/* ---- the rules of hf_name_map ---- */

typedef struct rule {
    const char *from, *to;
    size_t flen, tlen;
} rule;

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* [*b, *e) without surrounding blanks. */
static void trim(const char **b, const char **e)
{
    while (*b < *e && is_space(**b))
        (*b)++;
    while (*e > *b && is_space((*e)[-1]))
        (*e)--;
}

/* Parse `text` into rules pointing into it (*out: caller frees; NULL
   when there is none). */
static int parse_rules(rule **out, size_t *n_out, const char *text, const char *field)
{
    const char *p = text, *end = text + strlen(text);
    size_t cap = 1, n = 0;
    *out = NULL;
    *n_out = 0;
    trim(&p, &end);
    if (p == end)
        return SHS_OK; /* no rules: nothing to allocate */
    if (p < end && *p == '[') {
        if (end[-1] != ']')
            return shs__err(SHS_ECONFIG, "%s: unbalanced '[' in '%s'", field, text);
        p++;
        end--;
    }
    for (const char *q = p; q < end; q++)
        cap += *q == ',';
    rule *r = shs__calloc(cap, sizeof *r);
    if (!r)
        return shs__err(SHS_ENOMEM, "%s: out of memory", field);
    while (p < end) {
        const char *b = p, *e = p;
        while (e < end && *e != ',')
            e++;
        p = e < end ? e + 1 : e;
        trim(&b, &e);
        if (e - b >= 2 && (*b == '\'' || *b == '"') && e[-1] == *b) {
            b++;
            e--;
        }
        if (b == e)
            continue; /* "a=b," */
        const char *eq = memchr(b, '=', (size_t)(e - b));
        if (!eq || memchr(eq + 1, '=', (size_t)(e - eq - 1))) {
            int rc = shs__err(SHS_ECONFIG,
                              "%s: rule '%.*s' is not from=to (one '=', e.g. "
                              "\"model.=backbone.\")",
                              field, (int)(e - b), b);
            shs__free(r);
            return rc;
        }
        const char *fb = b, *fe = eq, *tb = eq + 1, *te = e;
        trim(&fb, &fe);
        trim(&tb, &te);
        rule x = { fb, tb, (size_t)(fe - fb), (size_t)(te - tb) };
        for (size_t i = 0; i < n; i++)
            if (r[i].flen == x.flen && memcmp(r[i].from, x.from, x.flen) == 0) {
                int rc = shs__err(SHS_ECONFIG, "%s: two rules for the prefix '%.*s'", field,
                                  (int)x.flen, x.from);
                shs__free(r);
                return rc;
            }
        r[n++] = x;
    }
    if (n == 0) {
        shs__free(r);
        r = NULL;
    }
    *out = r;
    *n_out = n;
    return SHS_OK;
}

int shs__hf_rules_check(const char *rules, const char *field)
{
    rule *r = NULL;
    size_t n = 0;
    int rc = parse_rules(&r, &n, rules ? rules : "", field);
    shs__free(r);
    return rc;
}

/* ---- the map file ---- */

/* The map file, a JSON object {"name in the files": "registered name"},
   read by the strict reader (json_doc.h) as every document from disk. */
static int load_map(shs__jdoc *d, const char *path)
{
    int rc = shs__jdoc_load(d, path, MAP_FILE_MAX);
    if (rc == SHS_ECORRUPT)
        return shs__err_prefix(SHS_ECONFIG, "hf_name_map_file");
    if (rc < 0)
        return shs__err_prefix(rc, "hf_name_map_file");
    const shs__jnode *root = shs__jroot(d);
    if (!shs__jis(root, SHS__J_OBJ))
        return shs__err(SHS_ECONFIG,
                        "hf_name_map_file %s: expected an object {\"file name\": "
                        "\"registered name\"}",
                        path);
    for (const shs__jnode *v = shs__jfirst(d, root); v; v = shs__jnext(d, v))
        if (!shs__jis(v, SHS__J_STR) || !v->len || strlen(v->s) != v->len)
            return shs__err(SHS_ECONFIG,
                            "hf_name_map_file %s: the entry of '%.*s' is not a tensor name", path,
                            (int)(v->key_len < 200 ? v->key_len : 200), v->key);
    return SHS_OK;
}

/* ---- renaming ---- */

static int cmp_mtensor(const void *a, const void *b)
{
    return strcmp(((const shs__mtensor *)a)->name, ((const shs__mtensor *)b)->name);
}

/* The name a tensor of the files is registered under (caller frees), or
   NULL with *same = 1 when it keeps its name. */
static char *new_name(const char *name, const shs__jdoc *map, const rule *r, size_t nr, int *same)
{
    const char *exact = map ? shs__jstr(map, shs__jroot(map), name) : NULL;
    *same = 0;
    if (exact)
        return shs__strdup(exact);
    const rule *best = NULL;
    size_t len = strlen(name);
    for (size_t i = 0; i < nr; i++)
        if (r[i].flen <= len && memcmp(r[i].from, name, r[i].flen) == 0 &&
            (!best || r[i].flen > best->flen))
            best = &r[i];
    if (!best) {
        *same = 1;
        return NULL;
    }
    size_t rest = len - best->flen;
    char *s = shs__malloc(best->tlen + rest + 1);
    if (s) {
        memcpy(s, best->to, best->tlen);
        memcpy(s + best->tlen, name + best->flen, rest + 1);
    }
    return s;
}

static const char *file_name_of(const shs__mtensor *t)
{
    return t->nc ? t->c[0].key : t->name;
}

int shs__hf_rename(shs__meta *m, const char *rules, const char *map_file)
{
    rule *r = NULL;
    size_t nr = 0;
    shs__jdoc doc = { 0 }, *map = NULL;
    int rc = parse_rules(&r, &nr, rules ? rules : "", "hf_name_map");
    if (rc == SHS_OK && map_file && *map_file && (rc = load_map(&doc, map_file)) == SHS_OK)
        map = &doc;
    if (rc < 0 || (!nr && !map))
        goto done;
    for (size_t i = 0; i < m->nt; i++) {
        int same;
        char *s = new_name(m->t[i].name, map, r, nr, &same);
        if (same)
            continue;
        if (!s) {
            rc = shs__err(SHS_ENOMEM, "out of memory renaming tensors");
            goto done;
        }
        if (!*s) {
            rc = shs__err(SHS_ECONFIG, "hf_name_map: tensor '%s' would get an empty name",
                          m->t[i].name);
            shs__free(s);
            goto done;
        }
        shs__free(m->t[i].name);
        m->t[i].name = s;
    }
    if (m->nt > 1)
        qsort(m->t, m->nt, sizeof *m->t, cmp_mtensor);
    for (size_t i = 1; i < m->nt; i++)
        if (strcmp(m->t[i - 1].name, m->t[i].name) == 0) {
            rc = shs__err(SHS_EMISMATCH,
                          "hf_name_map: the tensors '%s' and '%s' of the files both become "
                          "'%s'",
                          file_name_of(&m->t[i - 1]), file_name_of(&m->t[i]), m->t[i].name);
            goto done;
        }
done:
    shs__jdoc_free(&doc);
    shs__free(r);
    return rc;
}

/* ---- the source ---- */

int shs__hf_open(shs__meta *m, char **dir, char **source, const char *path, const char *field)
{
    shs__source src;
    shs__source_req req = SHS__SOURCE_REQ_INIT;
    req.accept = SHS__SRC(SHS_SOURCE_HF_INDEX) | SHS__SRC(SHS_SOURCE_FOLDER) |
                 SHS__SRC(SHS_SOURCE_FILE);
    req.wants = "Hugging Face weights";
    req.hint = "unset initial_load_in_hf to load it";
    req.hf = 1;
    int rc = shs__source_open(&src, path, &req);
    if (rc < 0) {
        shs__source_release(&src);
        memset(m, 0, sizeof *m);
        *dir = *source = NULL;
        return shs__err_prefix(rc, field);
    }
    *m = src.m;
    *dir = src.dir;
    *source = src.path;
    return SHS_OK;
}

/* ---- FP8 block scales (initial_load_in_hf_quantized) ---- */

typedef struct named {
    const char *name; /* the file's name of tensor idx */
    size_t idx;
} named;

static int cmp_named(const void *a, const void *b)
{
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

/* Weight w and its scale s agree (DeepSeek-V3's layout). */
static int check_pair(const shs__mtensor *w, const shs__mtensor *s, const char *src)
{
    const char *wn = file_name_of(w), *sn = file_name_of(s);
    char a[96], b[96];
    if (w->dtype != SHS_F8_E4M3 || w->ndim != 2)
        return shs__err(SHS_ECORRUPT,
                        "%s: tensor '%s' has a block scale '%s' but is %s with %zu dimension(s): "
                        "initial_load_in_hf_quantized dequantizes 2-D F8_E4M3 weights",
                        src, wn, sn, shs_dtype_name(w->dtype), w->ndim);
    uint64_t want[2] = { (w->gshape[0] + SHS__HF_QUANT_BLOCK - 1) / SHS__HF_QUANT_BLOCK,
                         (w->gshape[1] + SHS__HF_QUANT_BLOCK - 1) / SHS__HF_QUANT_BLOCK };
    if (s->ndim != 2 || s->gshape[0] != want[0] || s->gshape[1] != want[1]) {
        shs__dims_text(a, sizeof a, s->gshape, s->ndim);
        shs__dims_text(b, sizeof b, want, 2);
        return shs__err(SHS_ECORRUPT,
                        "%s: block scale '%s' has shape [%s]; weight '%s' [%llu, %llu] needs "
                        "[%s] (one scale per %dx%d block)",
                        src, sn, a, wn, (unsigned long long)w->gshape[0],
                        (unsigned long long)w->gshape[1], b, SHS__HF_QUANT_BLOCK,
                        SHS__HF_QUANT_BLOCK);
    }
    if (s->dtype != SHS_F32 && s->dtype != SHS_BF16 && s->dtype != SHS_F16)
        return shs__err(SHS_ECORRUPT, "%s: block scale '%s' is %s, not F32 (or BF16, F16)", src, sn,
                        shs_dtype_name(s->dtype));
    return SHS_OK;
}

int shs__hf_dequant_pair(shs__dequant *q, const shs__meta *m, const char *src)
{
    named *order = shs__calloc(m->nt + 1, sizeof *order);
    char *want = NULL;
    int rc = SHS_OK;
    memset(q, 0, sizeof *q);
    q->block = SHS__HF_QUANT_BLOCK;
    q->scale_of = shs__calloc(m->nt + 1, sizeof *q->scale_of);
    q->is_scale = shs__calloc(m->nt + 1, 1);
    if (!order || !q->scale_of || !q->is_scale) {
        rc = shs__err(SHS_ENOMEM, "out of memory pairing block scales");
        goto done;
    }
    for (size_t i = 0; i < m->nt; i++) {
        order[i] = (named){ file_name_of(&m->t[i]), i };
        q->scale_of[i] = -1;
    }
    qsort(order, m->nt, sizeof *order, cmp_named);
    for (size_t i = 0; i < m->nt && rc == SHS_OK; i++) {
        const char *wn = file_name_of(&m->t[i]);
        size_t len = strlen(wn);
        shs__free(want);
        if (!(want = shs__malloc(len + sizeof SHS__HF_SCALE_SUFFIX))) {
            rc = shs__err(SHS_ENOMEM, "out of memory pairing block scales");
            break;
        }
        memcpy(want, wn, len);
        memcpy(want + len, SHS__HF_SCALE_SUFFIX, sizeof SHS__HF_SCALE_SUFFIX);
        named key = { want, 0 };
        const named *hit = bsearch(&key, order, m->nt, sizeof *order, cmp_named);
        if (!hit)
            continue;
        if ((rc = check_pair(&m->t[i], &m->t[hit->idx], src)) == SHS_OK) {
            q->scale_of[i] = (long)hit->idx;
            q->is_scale[hit->idx] = 1;
        }
    }
done:
    shs__free(want);
    shs__free(order);
    if (rc < 0)
        shs__hf_dequant_release(q);
    return rc;
}

void shs__hf_dequant_release(shs__dequant *q)
{
    shs__free(q->scale_of);
    shs__free(q->is_scale);
    memset(q, 0, sizeof *q);
}

int shs__hf_config_check(const shs_config *c)
{
    int maps = (c->hf_name_map && *c->hf_name_map) || (c->hf_name_map_file && *c->hf_name_map_file);
    if (c->initial_load_in_hf && !c->initial_load_model_only)
        return shs__err(SHS_ECONFIG,
                        "initial_load_in_hf: Hugging Face weights hold model weights only; "
                        "initial_load_model_only must be true");
    if (c->initial_load_in_hf && !(c->initial_load_path && *c->initial_load_path) &&
        !(c->hf_assets_path && *c->hf_assets_path))
        return shs__err(SHS_ECONFIG,
                        "initial_load_in_hf: neither initial_load_path nor hf_assets_path "
                        "names the Hugging Face weights");
    if (maps && !c->initial_load_in_hf)
        return shs__err(SHS_ECONFIG,
                        "hf_name_map / hf_name_map_file apply only to Hugging Face weights: "
                        "set initial_load_in_hf");
    /* torchtitan's rule: quantized weights are named by initial_load_path
       (hf_assets_path is not read for them) */
    if (c->initial_load_in_hf_quantized &&
        !(c->initial_load_in_hf && c->initial_load_path && *c->initial_load_path))
        return shs__err(SHS_ECONFIG, "initial_load_in_hf_quantized requires initial_load_in_hf "
                                     "and initial_load_path");
    return shs__hf_rules_check(c->hf_name_map, "hf_name_map");
}
