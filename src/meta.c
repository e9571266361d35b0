/*
 * meta.c -- metadata.json of a step directory, parsed and validated into
 * the model of meta.h (files without metadata.json: meta_plain.c), read
 * with the strict scanner of the safetensors header (st_json.h).
 * Format: docs/checkpoint.md.
 */
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#include "meta.h"

#include "hash.h"
#include "io.h"
#include "st_json.h"
#include "stepdir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define META_MAX (1u << 30)   /* metadata.json larger than this is refused */
#define COMMON_MAX (1u << 16) /* as common_json.c */

/* The seal of a version-2 metadata.json: its last bytes are
   SEAL_KEY <16 hex digits> SEAL_END. */
#define SEAL_KEY "\"metadata_xxh3\":\""
#define SEAL_END "\"\n}\n"
#define SEAL_TAIL (sizeof SEAL_KEY - 1 + 16 + sizeof SEAL_END - 1)

const char *const shs__kind_name[2] = { "model", "opt" };

void shs__meta_free(shs__meta *m)
{
    for (size_t i = 0; i < m->nf; i++)
        shs__free(m->f[i].name);
    for (size_t i = 0; i < m->nt; i++) {
        for (size_t k = 0; k < m->t[i].nc; k++) {
            shs__free(m->t[i].c[k].off);
            shs__free(m->t[i].c[k].shape);
            shs__free(m->t[i].c[k].key);
            shs__free(m->t[i].c[k].blocks);
        }
        shs__free(m->t[i].c);
        shs__free(m->t[i].name);
        shs__free(m->t[i].gshape);
    }
    for (size_t i = 0; i < m->nb; i++) {
        shs__free(m->b[i].name);
        shs__free(m->b[i].key);
    }
    shs__free(m->f);
    shs__free(m->t);
    shs__free(m->b);
    memset(m, 0, sizeof *m);
}

const shs__mtensor *shs__meta_find(const shs__meta *m, const char *name)
{
    return shs__meta_find_n(m, name, strlen(name));
}

/* Bytewise order, a prefix first: strcmp's order for names without NUL. */
static int cmp_name_n(const char *a, const char *b, size_t blen)
{
    size_t alen = strlen(a);
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : (alen > blen) - (alen < blen);
}

const shs__mtensor *shs__meta_find_n(const shs__meta *m, const char *name, size_t len)
{
    /* metadata tensors are kept sorted by name */
    size_t lo = 0, hi = m->nt;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = cmp_name_n(m->t[mid].name, name, len);
        if (c == 0)
            return &m->t[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static int cmp_mtensor(const void *a, const void *b)
{
    return strcmp(((const shs__mtensor *)a)->name, ((const shs__mtensor *)b)->name);
}

/* A file name inside a step directory: plain, no path, not hidden. */
static int plain_file_name(const char *s)
{
    if (!*s || *s == '.' || strlen(s) > 255)
        return 0;
    for (const char *p = s; *p; p++)
        if (*p == '/' || *p == '\\' || (unsigned char)*p < 0x20)
            return 0;
    return 1;
}

void shs__hex64(char out[17], uint64_t v)
{
    snprintf(out, 17, "%016llx", (unsigned long long)v);
}

int shs__parse_hex64(uint64_t *out, const char *s)
{
    if (strlen(s) != 16)
        return -1;
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = (v << 4) | (uint64_t)d;
    }
    *out = v;
    return 0;
}

uint64_t shs__header_hash(const shs_file *f)
{
    /* streamed: the length prefix and the header are not contiguous in
       memory, and a checksum must never depend on an allocation */
    uint64_t n = shs_file_header_len(f);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)(n >> (8 * i));
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, len8, sizeof len8);
    XXH3_64bits_update(&st, shs_file_header(f), (size_t)n);
    return XXH3_64bits_digest(&st);
}

char *shs__meta_seal(const char *text, size_t len, size_t *out_len)
{
    size_t n = len;
    while (n && text[n - 1] != '}')
        n--;
    if (!n)
        return NULL;
    n--; /* the closing brace */
    while (n && (text[n - 1] == ' ' || text[n - 1] == '\n' || text[n - 1] == '\t' ||
                 text[n - 1] == '\r'))
        n--;
    int members = n && text[n - 1] != '{';
    size_t cap = n + 2 + SEAL_TAIL + 1;
    char *out = shs__malloc(cap);
    if (!out)
        return NULL;
    memcpy(out, text, n);
    size_t at = n;
    if (members)
        out[at++] = ',';
    out[at++] = '\n';
    memcpy(out + at, SEAL_KEY "0000000000000000" SEAL_END, SEAL_TAIL + 1);
    at += SEAL_TAIL;
    char hex[17];
    shs__hex64(hex, shs__xxh3(out, at));
    memcpy(out + at - SEAL_TAIL + sizeof SEAL_KEY - 1, hex, 16);
    *out_len = at;
    return out;
}

/* Version 2: the file's last bytes are the seal, which is also the value
   of the top-level "metadata_xxh3" (`value`, NULL when it is not a
   string): a valid JSON text ending with the seal's closing brace has it
   as a member of the outermost object, and duplicate keys are refused, so
   the seal is found without ambiguity.  `buf` is hashed in place, its
   digits read as '0' and then put back. */
static int check_seal(char *buf, size_t len, const char *value, const char *path)
{
    size_t at = len - SEAL_TAIL + sizeof SEAL_KEY - 1;
    uint64_t want;
    if (len < SEAL_TAIL || memcmp(buf + len - SEAL_TAIL, SEAL_KEY, sizeof SEAL_KEY - 1) != 0 ||
        memcmp(buf + len - (sizeof SEAL_END - 1), SEAL_END, sizeof SEAL_END - 1) != 0 ||
        !value || strlen(value) != 16 || memcmp(value, buf + at, 16) != 0 ||
        shs__parse_hex64(&want, value) < 0)
        return shs__err(SHS_ECORRUPT, "%s: version 2 ends with \"metadata_xxh3\", its checksum "
                        "(16 hex digits), as the last key", path);
    char digits[16];
    memcpy(digits, buf + at, 16);
    memset(buf + at, '0', 16);
    uint64_t got = shs__xxh3(buf, len);
    memcpy(buf + at, digits, 16);
    if (got != want)
        return shs__err(SHS_ECHECKSUM, "%s: the file does not match its metadata_xxh3 checksum",
                        path);
    return SHS_OK;
}

/* The step of the directory's own name (iteration_N, step-N), or -1. */
static int64_t step_of_dir(const char *dir)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    size_t b = n;
    while (b && dir[b - 1] != '/')
        b--;
    char name[48];
    if (n - b >= sizeof name)
        return -1;
    memcpy(name, dir + b, n - b);
    name[n - b] = '\0';
    return shs__step_of_name(name);
}

/* Rank and world size in a file name ending "-%07d-%07d.safetensors", as
   this library names every data file; 0 if the name has another form. */
static int rank_world_of_name(const char *s, uint64_t *rank, uint64_t *world)
{
    static const char ext[] = ".safetensors";
    size_t n = strlen(s), e = sizeof ext - 1;
    if (n < e + 16 || strcmp(s + n - e, ext) != 0)
        return 0;
    const char *p = s + n - e - 16;
    uint64_t v[2] = { 0, 0 };
    for (int k = 0; k < 2; k++) {
        if (p[8 * k] != '-')
            return 0;
        for (int i = 1; i < 8; i++) {
            char c = p[8 * k + i];
            if (c < '0' || c > '9')
                return 0;
            v[k] = v[k] * 10 + (uint64_t)(c - '0');
        }
    }
    *rank = v[0];
    *world = v[1];
    return 1;
}

typedef struct box_ref {
    const shs__mchunk *c;
    size_t ndim, idx;
} box_ref;

static int cmp_box(const void *a, const void *b)
{
    const box_ref *x = a, *y = b;
    for (size_t d = 0; d < x->ndim; d++) {
        if (x->c->off[d] != y->c->off[d])
            return x->c->off[d] < y->c->off[d] ? -1 : 1;
        if (x->c->shape[d] != y->c->shape[d])
            return x->c->shape[d] < y->c->shape[d] ? -1 : 1;
    }
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static size_t lower_bound(const uint64_t *v, size_t n, uint64_t x)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (v[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

typedef struct sweep_ent {
    uint64_t start;           /* in the sweep dimension */
    const shs__mchunk *c;
} sweep_ent;

static int cmp_sweep(const void *a, const void *b)
{
    uint64_t p = ((const sweep_ent *)a)->start, q = ((const sweep_ent *)b)->start;
    return (p > q) - (p < q);
}

/*
 * Are the n boxes pairwise disjoint?  1 yes, 0 no, <0 out of memory.
 * Boxes lie inside the tensor and their volumes sum to its volume, so
 * disjoint means they tile it exactly.
 *
 * Cost.  The cut points of the boxes split every dimension into
 * intervals; when the grid of those cells is small (at most 4n + 64
 * cells: every regular or uneven grid of shards, in any number of
 * dimensions) each box marks its cells and a cell marked twice is an
 * overlap: O(n log n + cells).  Otherwise (staggered layouts) a sweep
 * along the dimension with the most cuts compares each box with the boxes
 * whose interval in that dimension contains its start: O(n log n + n a
 * ndim), a the largest such set.  Overlapping input stops at the first
 * overlap; the worst case, a = O(n), needs n pairwise disjoint boxes all
 * crossing one plane in every dimension without forming a grid, i.e. a
 * file written to be slow, and costs O(n^2 ndim) box comparisons.
 */
static int boxes_disjoint(const shs__mtensor *t, const box_ref *bx, size_t n)
{
    size_t nd = t->ndim, best = 0;
    int rc = 1;
    uint64_t *cuts = shs__calloc(nd * (2 * n + 2) + 1, sizeof *cuts);
    size_t *ncut = shs__calloc(nd + 1, sizeof *ncut);
    uint8_t *mark = NULL;
    sweep_ent *sw = NULL;
    size_t *active = NULL;
    if (!cuts || !ncut) {
        rc = -1;
        goto done;
    }
    uint64_t cells = 1, budget = 4 * (uint64_t)n + 64;
    for (size_t d = 0; d < nd; d++) {
        uint64_t *c = cuts + d * (2 * n + 2);
        size_t k = 0;
        c[k++] = 0;
        c[k++] = t->gshape[d];
        for (size_t i = 0; i < n; i++) {
            c[k++] = bx[i].c->off[d];
            c[k++] = bx[i].c->off[d] + bx[i].c->shape[d];
        }
        qsort(c, k, sizeof *c, cmp_u64);
        size_t u = 0;
        for (size_t i = 0; i < k; i++)
            if (!u || c[u - 1] != c[i])
                c[u++] = c[i];
        ncut[d] = u;
        if (u > ncut[best])
            best = d;
        if (cells <= budget)
            cells = cells * (u - 1) > budget ? budget + 1 : cells * (u - 1);
    }
    if (cells <= budget) {
        if (!(mark = shs__calloc((size_t)cells + 1, 1))) {
            rc = -1;
            goto done;
        }
        uint64_t lo[SHS_MAX_DIMS], hi[SHS_MAX_DIMS], at[SHS_MAX_DIMS];
        for (size_t i = 0; i < n && rc == 1; i++) {
            for (size_t d = 0; d < nd; d++) {
                const uint64_t *c = cuts + d * (2 * n + 2);
                lo[d] = at[d] = lower_bound(c, ncut[d], bx[i].c->off[d]);
                hi[d] = lower_bound(c, ncut[d], bx[i].c->off[d] + bx[i].c->shape[d]);
            }
            for (;;) {
                uint64_t cell = 0;
                for (size_t d = 0; d < nd; d++)
                    cell = cell * (ncut[d] - 1) + at[d];
                if (mark[cell]) {
                    rc = 0;
                    break;
                }
                mark[cell] = 1;
                size_t d = nd;
                while (d && ++at[d - 1] == hi[d - 1]) {
                    at[d - 1] = lo[d - 1];
                    d--;
                }
                if (!d)
                    break;
            }
        }
        goto done;
    }
    sw = shs__malloc(n * sizeof *sw);
    active = shs__malloc(n * sizeof *active);
    if (!sw || !active) {
        rc = -1;
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        sw[i] = (sweep_ent){ bx[i].c->off[best], bx[i].c };
    qsort(sw, n, sizeof *sw, cmp_sweep);
    size_t na = 0;
    for (size_t i = 0; i < n && rc == 1; i++) {
        const shs__mchunk *c = sw[i].c;
        size_t keep = 0;
        for (size_t j = 0; j < na && rc == 1; j++) {
            const shs__mchunk *o = sw[active[j]].c;
            if (o->off[best] + o->shape[best] <= c->off[best])
                continue; /* ended before this box starts */
            active[keep++] = active[j];
            int meet = 1;
            for (size_t d = 0; d < nd && meet; d++)
                meet = o->off[d] < c->off[d] + c->shape[d] && c->off[d] < o->off[d] + o->shape[d];
            if (meet)
                rc = 0;
        }
        na = keep;
        active[na++] = i;
    }
done:
    shs__free(active);
    shs__free(sw);
    shs__free(mark);
    shs__free(ncut);
    shs__free(cuts);
    return rc;
}

/* Replicas marked; the distinct non-empty boxes must tile the tensor. */
static int check_tiling(shs__mtensor *t, const char *path)
{
    int rc = SHS_OK;
    box_ref *bx = shs__calloc(t->nc + 1, sizeof *bx);
    if (!bx)
        return shs__err(SHS_ENOMEM, "out of memory reading %s", path);
    for (size_t k = 0; k < t->nc; k++)
        bx[k] = (box_ref){ &t->c[k], t->ndim, k };
    qsort(bx, t->nc, sizeof *bx, cmp_box);
    uint64_t total = 1, sum = 0;
    for (size_t d = 0; d < t->ndim; d++)
        total *= t->gshape[d]; /* cannot overflow: shs_tensor_nbytes passed */
    size_t n = 0;
    for (size_t k = 0; k < t->nc; k++) {
        if (k && cmp_box(&(box_ref){ bx[k].c, t->ndim, 0 }, &(box_ref){ bx[k - 1].c, t->ndim, 0 }) == 0) {
            t->c[bx[k].idx].replica = 1;
            continue;
        }
        uint64_t vol = 1;
        for (size_t d = 0; d < t->ndim; d++)
            vol *= bx[k].c->shape[d]; /* <= total: the box is inside */
        if (!vol)
            continue;
        if (vol > total - sum) {
            rc = shs__err(SHS_ECORRUPT, "%s: tensor '%s': its chunks overlap (they hold more "
                          "than its %llu elements)", path, t->name, (unsigned long long)total);
            goto done;
        }
        sum += vol;
        bx[n++] = bx[k];
    }
    if (sum < total) {
        rc = shs__err(SHS_ECORRUPT, "%s: tensor '%s': the saved chunks cover %llu of its "
                      "%llu elements", path, t->name, (unsigned long long)sum,
                      (unsigned long long)total);
        goto done;
    }
    int r = total ? boxes_disjoint(t, bx, n) : 1;
    if (r < 0)
        rc = shs__err(SHS_ENOMEM, "out of memory reading %s", path);
    else if (r == 0)
        rc = shs__err(SHS_ECORRUPT, "%s: tensor '%s': its chunks overlap and leave a gap",
                      path, t->name);
done:
    shs__free(bx);
    return rc;
}

typedef struct name_ref {
    const char *name;
    int rank;
    size_t idx;
} name_ref;

static int cmp_name_ref(const void *a, const void *b)
{
    const name_ref *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->idx > y->idx) - (x->idx < y->idx);
}

/* The first name listed twice (for the same rank), or NULL; sorted, so a
   file with many entries costs O(n log n), not O(n^2).  *oom on failure. */
static const char *first_duplicate(name_ref *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_name_ref);
    for (size_t i = 1; i < n; i++)
        if (v[i].rank == v[i - 1].rank && strcmp(v[i].name, v[i - 1].name) == 0)
            return v[i].name;
    return NULL;
}

/* ---- reading metadata.json ----
 *
 * Two phases.  The scan reads the whole text once with the strict scanner
 * (st_json.h, metadata.json's dialect) straight into the model, noting for
 * each value the model needs what kind of JSON value it was (mparse and
 * the r* records below); it reports only syntax errors, duplicate keys
 * among them.  The checks then apply every rule in a fixed order.  So a
 * syntax error anywhere wins over a broken rule, as with a parser building
 * a tree, and the members of an object may come in any order (a chunk may
 * name a file listed after it).
 */

/* What kind of JSON value a member held. */
enum { V_NONE, V_UINT, V_NEG, V_REAL, V_OTHER, V_STR, V_ARR, V_OBJ, V_TRUE, V_FALSE };
/* A string as a checksum: absent, 16 hex digits, or anything else. */
enum { H_NONE, H_OK, H_BAD };

typedef struct jnum {
    uint64_t v;               /* V_UINT: the value; V_NEG: its magnitude */
    uint8_t k;
} jnum;

typedef struct rfile {
    jnum rank, size;
    uint8_t obj, name_k, hh_k;
} rfile;

typedef struct rchunk {
    jnum file, b0, b1, block;
    size_t off_n, shape_n, br_n, nblocks, bad_block;
    uint8_t obj, key_k, off_k, off_ok, shape_k, shape_ok, br_k, hash_k, blocks_k;
} rchunk;

typedef struct rtensor {
    const char *kind, *dtype; /* in the arena */
    size_t shape_n;
    rchunk *rc;
    size_t cap;
    uint8_t obj, kind_k, dtype_k, shape_k, shape_ok, chunks_k;
} rtensor;

typedef struct rblob {
    jnum rank, file, b0, b1;
    size_t br_n;
    uint8_t obj, name_k, key_k, br_k, hash_k;
} rblob;

typedef struct mparse {
    shs__json js;
    shs__meta *m;
    int root_k;               /* V_OBJ, or V_ARR for a top-level array */
    const char *format, *seal; /* in the arena */
    jnum version, step, world_size;
    uint8_t format_k, seal_k, common_k, model_only_k, files_k, tensors_k, blobs_k;
    rfile *rf;
    rtensor *rt;
    rblob *rb;
    size_t cap_f, cap_t, cap_b;
} mparse;

#define DUP_MSG_MAX 64

static int oom(mparse *s)
{
    return shs__err(SHS_ENOMEM, "out of memory reading %s", s->js.fname);
}

/* Grow *v (n used, *cap allocated, elements of `size` bytes, the new ones
   zeroed) to hold n + 1. */
static int grow(void **v, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 16;
    void *p = shs__realloc(*v, c * size);
    if (!p)
        return -1;
    memset((char *)p + *cap * size, 0, (c - *cap) * size);
    *v = p;
    *cap = c;
    return 0;
}

/* After '{' or '[': 1 when the container is empty (and closed). */
static int closes_at_once(shs__json *js, char close)
{
    js->p++;
    shs__json_skip_ws(js);
    if (js->p < js->end && *js->p == close) {
        js->p++;
        return 1;
    }
    return 0;
}

/* Whether the next value starts with `c` (whitespace before it skipped). */
static int at(shs__json *js, char c)
{
    shs__json_skip_ws(js);
    return js->p < js->end && *js->p == c;
}

/* The next member's key of object `obj` whose known keys are `names`:
   *which is its index, or -1 for another key (kept in the arena for the
   duplicate check; the caller skips its value).  A known key seen twice
   is a syntax error, as is any repeated key. */
static int member(mparse *s, uint32_t obj, const char *const *names, int n, uint32_t *seen,
                  int *which)
{
    shs__json *js = &s->js;
    size_t mark = js->arena_len;
    shs__json_skip_ws(js);
    const char *kp = js->p, *k;
    size_t len;
    int rc = shs__json_key(js, &k, &len);
    if (rc < 0)
        return rc;
    for (int i = 0; i < n; i++) {
        if (strlen(names[i]) != len || memcmp(names[i], k, len) != 0)
            continue;
        if (*seen & (1u << i)) {
            char what[DUP_MSG_MAX];
            snprintf(what, sizeof what, "duplicate key '%s'", names[i]);
            js->p = kp;
            return shs__json_syntax_err(js, what);
        }
        *seen |= 1u << i;
        js->arena_len = mark;
        *which = i;
        return SHS_OK;
    }
    *which = -1;
    return shs__json_note_key(js, obj, k, len);
}

/* Any value, read as a number (V_OTHER when it is none, then skipped).
   `depth`: the nesting of the container holding it. */
static int scan_num(mparse *s, int depth, jnum *out)
{
    shs__json *js = &s->js;
    if (!at(js, '-') && !(js->p < js->end && *js->p >= '0' && *js->p <= '9')) {
        out->k = V_OTHER;
        return shs__json_skip_value(js, depth);
    }
    const char *start = js->p;
    int u;
    int rc = shs__json_number(js, &u, &out->v);
    if (rc < 0)
        return rc;
    out->k = V_UINT;
    if (!u) {
        out->k = V_NEG;
        for (const char *q = start; q < js->p; q++)
            if (*q == '.' || *q == 'e' || *q == 'E')
                out->k = V_REAL;
        if (out->k == V_NEG && out->v == 0)
            out->k = V_UINT; /* "-0": the integer 0, as jansson read it */
    }
    return SHS_OK;
}

/* Any value, read as a string: decoded into the arena (the caller may
   take the arena back) or skipped (V_OTHER). */
static int scan_str(mparse *s, int depth, const char **out, uint8_t *k)
{
    shs__json *js = &s->js;
    size_t len;
    if (!at(js, '"')) {
        *k = V_OTHER;
        return shs__json_skip_value(js, depth);
    }
    *k = V_STR;
    return shs__json_string(js, out, &len);
}

/* A string held only as a copy (*out, caller frees with the model). */
static int scan_strdup(mparse *s, int depth, char **out, uint8_t *k)
{
    size_t mark = s->js.arena_len;
    const char *v;
    int rc = scan_str(s, depth, &v, k);
    if (rc == SHS_OK && *k == V_STR && !(*out = shs__strdup(v)))
        rc = oom(s);
    s->js.arena_len = mark;
    return rc;
}

/* Any value, read as a checksum. */
static int scan_hex(mparse *s, int depth, uint64_t *out, uint8_t *k)
{
    size_t mark = s->js.arena_len;
    const char *v;
    uint8_t sk;
    int rc = scan_str(s, depth, &v, &sk);
    *k = rc == SHS_OK && sk == V_STR && shs__parse_hex64(out, v) == 0 ? H_OK : H_BAD;
    s->js.arena_len = mark;
    return rc;
}

/* Any value, read as an array of numbers: *k V_ARR or V_OTHER, *n its
   length, *ok whether every element is an integer >= 0.  The first `cap`
   values go to v (when not NULL), their kinds to nums (when not NULL). */
static int scan_nums(mparse *s, int depth, uint8_t *k, size_t *n, uint8_t *ok, uint64_t *v,
                     jnum *nums, size_t cap)
{
    shs__json *js = &s->js;
    int rc;
    *n = 0;
    *ok = 1;
    if (!at(js, '[')) {
        *k = V_OTHER;
        return shs__json_skip_value(js, depth);
    }
    *k = V_ARR;
    if (closes_at_once(js, ']'))
        return SHS_OK;
    for (;;) {
        jnum x;
        if ((rc = scan_num(s, depth + 1, &x)) < 0)
            return rc;
        if (x.k != V_UINT)
            *ok = 0;
        if (*n < cap) {
            if (v)
                v[*n] = x.v;
            if (nums)
                nums[*n] = x;
        }
        ++*n;
        if ((rc = shs__json_next_member(js, ']')) <= 0)
            return rc;
    }
}

/* Dimensions: an array of integers, kept when it can be a shape. */
static int scan_dims(mparse *s, int depth, uint8_t *k, size_t *n, uint8_t *ok, uint64_t **out)
{
    uint64_t v[SHS_MAX_DIMS];
    int rc = scan_nums(s, depth, k, n, ok, v, NULL, SHS_MAX_DIMS);
    if (rc < 0 || *k != V_ARR || *n > SHS_MAX_DIMS)
        return rc;
    if (!(*out = shs__malloc((*n ? *n : 1) * sizeof **out)))
        return oom(s);
    memcpy(*out, v, *n * sizeof *v);
    return SHS_OK;
}

static const char *const k_file_keys[] = { "name", "rank", "size", "header_xxh3" };

static int scan_file(mparse *s, size_t i)
{
    shs__json *js = &s->js;
    shs__mfile *f = &s->m->f[i];
    rfile *r = &s->rf[i];
    uint32_t obj = ++js->next_obj, seen = 0;
    int rc, which;
    r->obj = 1;
    if (closes_at_once(js, '}'))
        return SHS_OK;
    for (;;) {
        if ((rc = member(s, obj, k_file_keys, 4, &seen, &which)) < 0)
            return rc;
        switch (which) {
        case 0: rc = scan_strdup(s, 3, &f->name, &r->name_k); break;
        case 1: rc = scan_num(s, 3, &r->rank); break;
        case 2: rc = scan_num(s, 3, &r->size); break;
        case 3: rc = scan_hex(s, 3, &f->header_hash, &r->hh_k); break;
        default: rc = shs__json_skip_value(js, 3);
        }
        if (rc < 0 || (rc = shs__json_next_member(js, '}')) <= 0)
            return rc;
    }
}

static int scan_files(mparse *s)
{
    shs__json *js = &s->js;
    int rc;
    if (!at(js, '[')) {
        s->files_k = V_OTHER;
        return shs__json_skip_value(js, 1);
    }
    s->files_k = V_ARR;
    if (closes_at_once(js, ']'))
        return SHS_OK;
    for (;;) {
        size_t cf = s->cap_f;
        if (grow((void **)&s->m->f, &cf, s->m->nf, sizeof *s->m->f) < 0 ||
            grow((void **)&s->rf, &s->cap_f, s->m->nf, sizeof *s->rf) < 0)
            return oom(s);
        size_t i = s->m->nf++;
        if (at(js, '{'))
            rc = scan_file(s, i);
        else
            rc = shs__json_skip_value(js, 2);
        if (rc < 0 || (rc = shs__json_next_member(js, ']')) <= 0)
            return rc;
    }
}

/* "xxh3_blocks": checksums into c->blocks, the index of the first that
   is not one in r->bad_block (SIZE_MAX: none). */
static int scan_blocks(mparse *s, shs__mchunk *c, rchunk *r)
{
    shs__json *js = &s->js;
    size_t cap = 0;
    int rc;
    r->bad_block = SIZE_MAX;
    if (!at(js, '[')) {
        r->blocks_k = V_OTHER;
        return shs__json_skip_value(js, 5);
    }
    r->blocks_k = V_ARR;
    if (closes_at_once(js, ']'))
        return SHS_OK;
    for (;;) {
        uint64_t h = 0;
        uint8_t k;
        if ((rc = scan_hex(s, 6, &h, &k)) < 0)
            return rc;
        if (k != H_OK && r->bad_block == SIZE_MAX)
            r->bad_block = r->nblocks;
        if (grow((void **)&c->blocks, &cap, r->nblocks, sizeof *c->blocks) < 0)
            return oom(s);
        c->blocks[r->nblocks++] = h;
        if ((rc = shs__json_next_member(js, ']')) <= 0)
            return rc;
    }
}

static const char *const k_chunk_keys[] = { "offset", "shape",      "file", "key",
                                             "byte_range", "xxh3", "xxh3_block",
                                             "xxh3_blocks" };

static int scan_chunk(mparse *s, shs__mchunk *c, rchunk *r)
{
    shs__json *js = &s->js;
    uint32_t obj = ++js->next_obj, seen = 0;
    int rc, which;
    r->obj = 1;
    r->bad_block = SIZE_MAX;
    if (closes_at_once(js, '}'))
        return SHS_OK;
    for (;;) {
        if ((rc = member(s, obj, k_chunk_keys, 8, &seen, &which)) < 0)
            return rc;
        switch (which) {
        case 0: rc = scan_dims(s, 5, &r->off_k, &r->off_n, &r->off_ok, &c->off); break;
        case 1: rc = scan_dims(s, 5, &r->shape_k, &r->shape_n, &r->shape_ok, &c->shape); break;
        case 2: rc = scan_num(s, 5, &r->file); break;
        case 3: rc = scan_strdup(s, 5, &c->key, &r->key_k); break;
        case 4: {
            jnum b[2] = { { 0, V_NONE }, { 0, V_NONE } };
            uint8_t ok;
            rc = scan_nums(s, 5, &r->br_k, &r->br_n, &ok, NULL, b, 2);
            r->b0 = b[0];
            r->b1 = b[1];
            break;
        }
        case 5: rc = scan_hex(s, 5, &c->hash, &r->hash_k); break;
        case 6: rc = scan_num(s, 5, &r->block); break;
        case 7: rc = scan_blocks(s, c, r); break;
        default: rc = shs__json_skip_value(js, 5);
        }
        if (rc < 0 || (rc = shs__json_next_member(js, '}')) <= 0)
            return rc;
    }
}

static int scan_chunks(mparse *s, shs__mtensor *t, rtensor *r)
{
    shs__json *js = &s->js;
    int rc;
    if (!at(js, '[')) {
        r->chunks_k = V_OTHER;
        return shs__json_skip_value(js, 3);
    }
    r->chunks_k = V_ARR;
    if (closes_at_once(js, ']'))
        return SHS_OK;
    for (;;) {
        size_t cc = r->cap;
        if (grow((void **)&t->c, &cc, t->nc, sizeof *t->c) < 0 ||
            grow((void **)&r->rc, &r->cap, t->nc, sizeof *r->rc) < 0)
            return oom(s);
        size_t k = t->nc++;
        if (at(js, '{'))
            rc = scan_chunk(s, &t->c[k], &r->rc[k]);
        else
            rc = shs__json_skip_value(js, 4);
        if (rc < 0 || (rc = shs__json_next_member(js, ']')) <= 0)
            return rc;
    }
}

static const char *const k_tensor_keys[] = { "kind", "dtype", "shape", "chunks" };

static int scan_tensor(mparse *s, shs__mtensor *t, rtensor *r)
{
    shs__json *js = &s->js;
    uint32_t obj = ++js->next_obj, seen = 0;
    int rc, which;
    r->obj = 1;
    if (closes_at_once(js, '}'))
        return SHS_OK;
    for (;;) {
        if ((rc = member(s, obj, k_tensor_keys, 4, &seen, &which)) < 0)
            return rc;
        switch (which) {
        case 0: rc = scan_str(s, 3, &r->kind, &r->kind_k); break;
        case 1: rc = scan_str(s, 3, &r->dtype, &r->dtype_k); break;
        case 2: rc = scan_dims(s, 3, &r->shape_k, &r->shape_n, &r->shape_ok, &t->gshape); break;
        case 3: rc = scan_chunks(s, t, r); break;
        default: rc = shs__json_skip_value(js, 3);
        }
        if (rc < 0 || (rc = shs__json_next_member(js, '}')) <= 0)
            return rc;
    }
}

static int scan_tensors(mparse *s)
{
    shs__json *js = &s->js;
    shs__meta *m = s->m;
    int rc;
    if (!at(js, '{')) {
        s->tensors_k = V_OTHER;
        return shs__json_skip_value(js, 1);
    }
    s->tensors_k = V_OBJ;
    if (closes_at_once(js, '}'))
        return SHS_OK;
    for (;;) {
        size_t ct = s->cap_t;
        if (grow((void **)&m->t, &ct, m->nt, sizeof *m->t) < 0 ||
            grow((void **)&s->rt, &s->cap_t, m->nt, sizeof *s->rt) < 0)
            return oom(s);
        shs__mtensor *t = &m->t[m->nt];
        size_t mark = js->arena_len;
        const char *name;
        size_t len;
        if ((rc = shs__json_key(js, &name, &len)) < 0)
            return rc;
        t->name = shs__strdup(name);
        js->arena_len = mark;
        if (!t->name)
            return oom(s);
        m->nt++;
        if (at(js, '{'))
            rc = scan_tensor(s, t, &s->rt[m->nt - 1]);
        else
            rc = shs__json_skip_value(js, 2);
        if (rc < 0 || (rc = shs__json_next_member(js, '}')) <= 0)
            return rc;
    }
}

static const char *const k_blob_keys[] = { "name", "rank", "file", "key", "byte_range",
                                            "xxh3" };

static int scan_blob(mparse *s, shs__mblob *b, rblob *r)
{
    shs__json *js = &s->js;
    uint32_t obj = ++js->next_obj, seen = 0;
    int rc, which;
    r->obj = 1;
    if (closes_at_once(js, '}'))
        return SHS_OK;
    for (;;) {
        if ((rc = member(s, obj, k_blob_keys, 6, &seen, &which)) < 0)
            return rc;
        switch (which) {
        case 0: rc = scan_strdup(s, 3, &b->name, &r->name_k); break;
        case 1: rc = scan_num(s, 3, &r->rank); break;
        case 2: rc = scan_num(s, 3, &r->file); break;
        case 3: rc = scan_strdup(s, 3, &b->key, &r->key_k); break;
        case 4: {
            jnum v[2] = { { 0, V_NONE }, { 0, V_NONE } };
            uint8_t ok;
            rc = scan_nums(s, 3, &r->br_k, &r->br_n, &ok, NULL, v, 2);
            r->b0 = v[0];
            r->b1 = v[1];
            break;
        }
        case 5: rc = scan_hex(s, 3, &b->hash, &r->hash_k); break;
        default: rc = shs__json_skip_value(js, 3);
        }
        if (rc < 0 || (rc = shs__json_next_member(js, '}')) <= 0)
            return rc;
    }
}

static int scan_blobs(mparse *s)
{
    shs__json *js = &s->js;
    shs__meta *m = s->m;
    int rc;
    if (!at(js, '[')) {
        s->blobs_k = V_OTHER;
        return shs__json_skip_value(js, 1);
    }
    s->blobs_k = V_ARR;
    if (closes_at_once(js, ']'))
        return SHS_OK;
    for (;;) {
        size_t cb = s->cap_b;
        if (grow((void **)&m->b, &cb, m->nb, sizeof *m->b) < 0 ||
            grow((void **)&s->rb, &s->cap_b, m->nb, sizeof *s->rb) < 0)
            return oom(s);
        size_t i = m->nb++;
        if (at(js, '{'))
            rc = scan_blob(s, &m->b[i], &s->rb[i]);
        else
            rc = shs__json_skip_value(js, 2);
        if (rc < 0 || (rc = shs__json_next_member(js, ']')) <= 0)
            return rc;
    }
}

enum { R_FORMAT, R_VERSION, R_STEP, R_WORLD, R_COMMON, R_MODEL_ONLY, R_FILES, R_TENSORS,
       R_BLOBS, R_SEAL, R_N };
static const char *const k_root_keys[R_N] = { "format", "version", "step", "world_size",
                                              "common_xxh3", "model_only", "files",
                                              "tensors", "blobs", "metadata_xxh3" };

static int scan_model_only(mparse *s)
{
    shs__json *js = &s->js;
    if (at(js, 't')) {
        s->model_only_k = V_TRUE;
        return shs__json_literal(js, "true", 4);
    }
    if (at(js, 'f')) {
        s->model_only_k = V_FALSE;
        return shs__json_literal(js, "false", 5);
    }
    s->model_only_k = V_OTHER;
    return shs__json_skip_value(js, 1);
}

/* Phase one: the whole text, syntax errors only. */
static int scan_root(mparse *s)
{
    shs__json *js = &s->js;
    int rc, which;
    size_t bad = shs__utf8_check((const unsigned char *)js->start, (size_t)(js->end - js->start));
    if (bad != (size_t)(js->end - js->start)) {
        js->p = js->start + bad;
        return shs__json_syntax_err(js, "not UTF-8");
    }
    shs__json_skip_ws(js);
    if (at(js, '[')) {
        s->root_k = V_ARR;
        if ((rc = shs__json_skip_value(js, 0)) < 0)
            return rc;
        goto end;
    }
    if (!at(js, '{'))
        return shs__json_syntax_err(js, js->p < js->end ? "'{' or '[' expected"
                                                        : "empty file, '{' or '[' expected");
    s->root_k = V_OBJ;
    uint32_t obj = ++js->next_obj, seen = 0;
    if (closes_at_once(js, '}'))
        goto end;
    for (;;) {
        if ((rc = member(s, obj, k_root_keys, R_N, &seen, &which)) < 0)
            return rc;
        switch (which) {
        case R_FORMAT: rc = scan_str(s, 1, &s->format, &s->format_k); break;
        case R_VERSION: rc = scan_num(s, 1, &s->version); break;
        case R_STEP: rc = scan_num(s, 1, &s->step); break;
        case R_WORLD: rc = scan_num(s, 1, &s->world_size); break;
        case R_COMMON: rc = scan_hex(s, 1, &s->m->common_hash, &s->common_k); break;
        case R_MODEL_ONLY: rc = scan_model_only(s); break;
        case R_FILES: rc = scan_files(s); break;
        case R_TENSORS: rc = scan_tensors(s); break;
        case R_BLOBS: rc = scan_blobs(s); break;
        case R_SEAL: rc = scan_str(s, 1, &s->seal, &s->seal_k); break;
        default: rc = shs__json_skip_value(js, 1);
        }
        if (rc < 0 || (rc = shs__json_next_member(js, '}')) < 0)
            return rc;
        if (rc == 0)
            break;
    }
end:
    shs__json_skip_ws(js);
    if (js->p != js->end)
        return shs__json_syntax_err(js, "end of file expected");
    const struct nested_key *d = shs__json_nested_dup(js);
    if (d)
        return shs__err(SHS_ECORRUPT, "%s: invalid JSON: duplicate key '%.*s' in an object",
                        js->fname, (int)(d->len > 200 ? 200 : d->len), d->key);
    return SHS_OK;
}

#define BAD(...) do { rc = shs__err(SHS_ECORRUPT, __VA_ARGS__); goto done; } while (0)
#define OOM() do { rc = shs__err(SHS_ENOMEM, "out of memory reading %s", path); goto done; } while (0)

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Tensor names are the keys of "tensors": one repeated is a syntax error,
   reported before any rule. */
static int check_tensor_names(const shs__meta *m, const char *path)
{
    int rc = SHS_OK;
    const char **v = shs__malloc((m->nt + 1) * sizeof *v);
    if (!v)
        return shs__err(SHS_ENOMEM, "out of memory reading %s", path);
    for (size_t i = 0; i < m->nt; i++)
        v[i] = m->t[i].name;
    qsort(v, m->nt, sizeof *v, cmp_str_ptr);
    for (size_t i = 1; i < m->nt && rc == SHS_OK; i++)
        if (strcmp(v[i - 1], v[i]) == 0)
            rc = shs__err(SHS_ECORRUPT, "%s: invalid JSON: duplicate key '%s' in \"tensors\"",
                          path, v[i]);
    shs__free(v);
    return rc;
}

/* Phase two: every rule, in a fixed order, on what the scan found. */
static int check_meta(mparse *s, const char *dir, const char *path)
{
    shs__meta *m = s->m;
    name_ref *names = NULL;
    int rc = check_tensor_names(m, path);
    if (rc < 0)
        return rc;
    if (s->root_k != V_OBJ)
        BAD("%s: not a JSON object", path);
    if (s->format_k != V_STR || strcmp(s->format, "shardsafe.checkpoint") != 0)
        BAD("%s: \"format\" must be \"shardsafe.checkpoint\"", path);
    uint64_t ver = s->version.v, step = s->step.v, ws = s->world_size.v;
    if (s->version.k != V_UINT || ver < 1 || ver > SHS__META_VERSION)
        BAD("%s: unsupported \"version\" (this build reads versions 1 to %d)", path,
            SHS__META_VERSION);
    m->version = (int)ver;
    if (ver >= 2) {
        if (s->common_k != H_OK)
            BAD("%s: \"common_xxh3\" (16 hex digits) is required in version 2", path);
        m->has_common_hash = 1;
    } else {
        m->common_hash = 0;
    }
    if (s->step.k != V_UINT || s->world_size.k != V_UINT || ws < 1 || ws > (1u << 24))
        BAD("%s: \"step\" and \"world_size\" must be positive integers", path);
    if (step >= (uint64_t)SHS__STEP_LIMIT)
        BAD("%s: \"step\" %llu is not below 10^18 (step directory names hold 18 digits)", path,
            (unsigned long long)step);
    int64_t dstep = step_of_dir(dir);
    if (dstep >= 0 && (uint64_t)dstep != step)
        BAD("%s: \"step\" is %llu but the directory is named for step %lld", path,
            (unsigned long long)step, (long long)dstep);
    m->step = (int64_t)step;
    m->world_size = (int)ws;
    if (s->model_only_k != V_NONE && s->model_only_k != V_TRUE && s->model_only_k != V_FALSE)
        BAD("%s: \"model_only\" must be true or false", path);
    m->model_only = s->model_only_k == V_TRUE;
    if (s->files_k != V_ARR)
        BAD("%s: \"files\" must be an array", path);
    if ((!m->f && !(m->f = shs__calloc(1, sizeof *m->f))) ||
        !(names = shs__calloc(m->nf + 1, sizeof *names)))
        OOM();
    for (size_t i = 0; i < m->nf; i++) {
        shs__mfile *f = &m->f[i];
        const rfile *r = &s->rf[i];
        uint64_t rank = r->rank.v, nrank, nworld;
        if (!r->obj || r->name_k != V_STR || r->rank.k != V_UINT || rank >= ws)
            BAD("%s: files[%zu] needs a \"name\" and a \"rank\" below world_size", path, i);
        const char *fname = f->name;
        if (!plain_file_name(fname))
            BAD("%s: files[%zu]: '%s' is not a plain file name inside the checkpoint directory",
                path, i, fname);
        /* the name a rank gives its files says which rank of which world */
        if (rank_world_of_name(fname, &nrank, &nworld) && (nrank != rank || nworld != ws))
            BAD("%s: files[%zu]: '%s' is named for rank %llu of %llu, but is listed for rank "
                "%llu with world_size %llu", path, i, fname, (unsigned long long)nrank,
                (unsigned long long)nworld, (unsigned long long)rank, (unsigned long long)ws);
        if (ver >= 2) {
            if (r->hh_k != H_OK || r->size.k != V_UINT)
                BAD("%s: files[%zu] ('%s') needs \"size\" and \"header_xxh3\" (16 hex digits)",
                    path, i, fname);
            f->size = r->size.v;
            f->has_header_hash = 1;
        } else {
            f->header_hash = 0;
        }
        f->rank = (int)rank;
        names[i] = (name_ref){ f->name, 0, i };
    }
    const char *dup = first_duplicate(names, m->nf);
    if (dup)
        BAD("%s: file '%s' listed twice", path, dup);
    if (s->tensors_k != V_OBJ)
        BAD("%s: \"tensors\" must be an object", path);
    if (!m->t && !(m->t = shs__calloc(1, sizeof *m->t)))
        OOM();
    for (size_t i = 0; i < m->nt; i++) {
        shs__mtensor *t = &m->t[i];
        const rtensor *r = &s->rt[i];
        const char *tname = t->name;
        if (!r->obj || r->kind_k != V_STR || r->dtype_k != V_STR || r->shape_k != V_ARR ||
            r->chunks_k != V_ARR)
            BAD("%s: tensor '%s' needs \"kind\", \"dtype\", \"shape\" and \"chunks\"", path, tname);
        if (strcmp(r->kind, "model") == 0)
            t->kind = SHS_KIND_MODEL;
        else if (strcmp(r->kind, "opt") == 0)
            t->kind = SHS_KIND_OPTIMIZER;
        else
            BAD("%s: tensor '%s': unknown kind '%s'", path, tname, r->kind);
        if (shs_dtype_parse(&t->dtype, r->dtype, strlen(r->dtype)) < 0)
            BAD("%s: tensor '%s': unknown dtype '%s'", path, tname, r->dtype);
        t->ndim = r->shape_n;
        if (t->ndim > SHS_MAX_DIMS)
            BAD("%s: tensor '%s': too many dimensions", path, tname);
        if (!r->shape_ok)
            BAD("%s: tensor '%s': bad shape", path, tname);
        uint64_t gbytes;
        if (shs_tensor_nbytes(&gbytes, t->dtype, t->ndim, t->gshape) < 0)
            BAD("%s: tensor '%s': shape overflows", path, tname);
        if (!t->c && !(t->c = shs__calloc(1, sizeof *t->c)))
            OOM();
        for (size_t k = 0; k < t->nc; k++) {
            shs__mchunk *c = &t->c[k];
            const rchunk *q = &r->rc[k];
            uint64_t file = q->file.v;
            if (!q->obj || q->key_k != V_STR || q->file.k != V_UINT || file >= m->nf ||
                q->br_k != V_ARR || q->br_n != 2)
                BAD("%s: tensor '%s': chunk %zu needs \"file\", \"key\", \"byte_range\"", path,
                    tname, k);
            /* data files hold each chunk under the tensor's own name */
            if (strcmp(c->key, tname) != 0)
                BAD("%s: tensor '%s': chunk %zu has key '%s', not the tensor's name", path,
                    tname, k, c->key);
            c->file = (uint32_t)file;
            if (q->off_k != V_ARR || q->off_n != t->ndim || !q->off_ok || q->shape_k != V_ARR ||
                q->shape_n != t->ndim || !q->shape_ok)
                BAD("%s: tensor '%s': chunk %zu: bad offset or shape", path, tname, k);
            for (size_t d = 0; d < t->ndim; d++)
                if (c->off[d] > t->gshape[d] || c->shape[d] > t->gshape[d] - c->off[d])
                    BAD("%s: tensor '%s': chunk %zu lies outside the tensor", path, tname, k);
            if (q->b0.k != V_UINT || q->b1.k != V_UINT || q->b1.v < q->b0.v)
                BAD("%s: tensor '%s': chunk %zu: bad byte_range", path, tname, k);
            c->b0 = q->b0.v;
            c->b1 = q->b1.v;
            uint64_t cbytes;
            if (shs_tensor_nbytes(&cbytes, t->dtype, t->ndim, c->shape) < 0 ||
                cbytes != c->b1 - c->b0)
                BAD("%s: tensor '%s': chunk %zu: byte_range does not match its shape", path,
                    tname, k);
            if (q->hash_k != H_OK)
                BAD("%s: tensor '%s': chunk %zu: \"xxh3\" (16 hex digits) is required", path,
                    tname, k);
            c->has_hash = 1;
            if (q->block.k != V_NONE || q->blocks_k != V_NONE) {
                uint64_t b = q->block.k == V_UINT ? q->block.v : 0;
                uint64_t n = c->b1 - c->b0;
                if (b < 4096 || b > (1u << 30) || (b & (b - 1)) || q->blocks_k != V_ARR ||
                    q->nblocks != (n + b - 1) / b)
                    BAD("%s: tensor '%s': chunk %zu: \"xxh3_block\" must be a power of two "
                        "from 4096 and \"xxh3_blocks\" hold one checksum per block", path, tname,
                        k);
                if (q->bad_block != SIZE_MAX)
                    BAD("%s: tensor '%s': chunk %zu: block checksum %zu must be 16 hex "
                        "digits", path, tname, k, q->bad_block);
                if (!c->blocks && !(c->blocks = shs__calloc(1, sizeof *c->blocks)))
                    OOM();
                c->block = b;
                c->nblocks = q->nblocks;
            }
        }
        if ((rc = check_tiling(t, path)) < 0)
            goto done;
    }
    qsort(m->t, m->nt, sizeof *m->t, cmp_mtensor);
    if ((s->blobs_k != V_NONE || ver >= 2) && s->blobs_k != V_ARR)
        BAD("%s: \"blobs\" must be an array", path);
    shs__free(names);
    names = NULL;
    if ((!m->b && !(m->b = shs__calloc(1, sizeof *m->b))) ||
        !(names = shs__calloc(m->nb + 1, sizeof *names)))
        OOM();
    for (size_t i = 0; i < m->nb; i++) {
        shs__mblob *b = &m->b[i];
        const rblob *r = &s->rb[i];
        uint64_t rank = r->rank.v, file = r->file.v;
        if (!r->obj || r->name_k != V_STR || r->key_k != V_STR || r->rank.k != V_UINT ||
            rank >= ws || r->file.k != V_UINT || file >= m->nf || r->br_k != V_ARR ||
            r->br_n != 2 || (r->b0.k != V_UINT && r->b0.k != V_NEG) ||
            (r->b1.k != V_UINT && r->b1.k != V_NEG) || r->hash_k != H_OK)
            BAD("%s: blobs[%zu] is malformed (it needs \"name\", \"rank\", \"file\", \"key\", "
                "\"byte_range\" and \"xxh3\")", path, i);
        if (!*b->name || strcmp(b->name, b->key) != 0)
            BAD("%s: blobs[%zu]: blob '%s' is stored under key '%s', not its own name", path, i,
                b->name, b->key);
        if ((uint64_t)m->f[file].rank != rank)
            BAD("%s: blobs[%zu]: blob '%s' of rank %llu is in a file of rank %d", path, i,
                b->name, (unsigned long long)rank, m->f[file].rank);
        b->rank = (int)rank;
        b->file = (uint32_t)file;
        if (r->b0.k == V_NEG || r->b1.k == V_NEG || r->b1.v < r->b0.v)
            BAD("%s: blobs[%zu]: bad byte_range", path, i);
        b->b0 = r->b0.v;
        b->b1 = r->b1.v;
        names[i] = (name_ref){ b->name, b->rank, i };
    }
    if ((dup = first_duplicate(names, m->nb)))
        BAD("%s: blob '%s' is listed twice for one rank", path, dup);
done:
    shs__free(names);
    return rc;
}

#undef OOM
#undef BAD

/* The bytes of <dir>/metadata.json (kept apart from the parse: how the
   file is opened is a matter of its own): never read through a link. */
static int meta_read(const char *path, char **buf, size_t *len)
{
    return shs__read_file_nofollow(buf, len, path, META_MAX);
}

int shs__meta_parse(shs__meta *m, const char *dir)
{
    int rc = SHS_OK;
    char *buf = NULL;
    size_t len = 0;
    mparse s;
    memset(&s, 0, sizeof s);
    memset(m, 0, sizeof *m);
    char *path = shs__path_join(dir, "metadata.json");
    if (!path)
        return shs__err(SHS_ENOMEM, "out of memory");
    if ((rc = meta_read(path, &buf, &len)) < 0)
        goto done;
    s.m = m;
    s.js.p = s.js.start = buf;
    s.js.end = buf + len;
    s.js.fname = path;
    s.js.meta = 1;
    if (!(s.js.arena = shs__malloc(len + 1))) {
        rc = shs__err(SHS_ENOMEM, "out of memory reading %s", path);
        goto done;
    }
    if ((rc = scan_root(&s)) < 0 || (rc = check_meta(&s, dir, path)) < 0)
        goto done;
    /* the seal last: a file edited by hand is told what rule it breaks
       before it is told that it was edited */
    if (m->version >= 2)
        rc = check_seal(buf, len, s.seal_k == V_STR ? s.seal : NULL, path);
done:
    for (size_t i = 0; i < s.cap_t; i++)
        shs__free(s.rt[i].rc);
    shs__free(s.rt);
    shs__free(s.rf);
    shs__free(s.rb);
    shs__free(s.js.nk);
    shs__free(s.js.arena);
    shs__free(buf);
    shs__free(path);
    if (rc < 0)
        shs__meta_free(m);
    return rc;
}

int shs__meta_check_common(const shs__meta *m, const char *dir)
{
    if (!m->has_common_hash)
        return SHS_OK;
    char *path = shs__path_join(dir, "common.json"), *buf = NULL;
    size_t len;
    if (!path)
        return shs__err(SHS_ENOMEM, "out of memory");
    int rc = shs__read_file_nofollow(&buf, &len, path, COMMON_MAX);
    if (rc == SHS_OK && shs__xxh3(buf, len) != m->common_hash)
        rc = shs__err(SHS_ECHECKSUM, "%s: does not match its checksum (common_xxh3 in "
                      "metadata.json)", path);
    shs__free(buf);
    shs__free(path);
    return rc;
}

int shs__meta_check_file(const shs__meta *m, const char *dir, uint32_t fi, const shs_file *f)
{
    const shs__mfile *e = &m->f[fi];
    if (!e->has_header_hash)
        return SHS_OK;
    if (shs_file_size(f) != e->size)
        return shs__err(SHS_ECORRUPT, "%s/%s: %llu bytes, metadata.json says %llu", dir,
                        e->name, (unsigned long long)shs_file_size(f),
                        (unsigned long long)e->size);
    if (shs__header_hash(f) != e->header_hash)
        return shs__err(SHS_ECHECKSUM, "%s/%s: the safetensors header does not match its "
                        "checksum (header_xxh3 in metadata.json)", dir, e->name);
    return SHS_OK;
}
