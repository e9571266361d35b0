/*
 * meta.c -- metadata.json of a step directory, parsed and validated into
 * the model of meta.h (files without metadata.json: meta_plain.c).
 * Format: docs/checkpoint.md.
 */
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#include "meta.h"

#include "hash.h"
#include "io.h"
#include "stepdir.h"

#include <errno.h>
#include <jansson.h>
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

/* json helpers: a non-negative integer below 2^63 */
static int get_u64(const json_t *o, const char *key, uint64_t *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int get_hex(const json_t *o, const char *key, uint64_t *out)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? shs__parse_hex64(out, json_string_value(v)) : -1;
}

static int get_dims(const json_t *a, size_t ndim, uint64_t **out)
{
    if (!json_is_array(a) || json_array_size(a) != ndim)
        return -1;
    uint64_t *v = shs__calloc(ndim ? ndim : 1, sizeof *v);
    if (!v)
        return -2;
    for (size_t d = 0; d < ndim; d++) {
        json_t *x = json_array_get(a, d);
        if (!json_is_integer(x) || json_integer_value(x) < 0) {
            shs__free(v);
            return -1;
        }
        v[d] = (uint64_t)json_integer_value(x);
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
   of the top-level "metadata_xxh3" (a valid JSON text ending with the
   seal's closing brace has it as a member of the outermost object, and
   duplicate keys are refused, so the seal is found without ambiguity). */
static int check_seal(const char *buf, size_t len, const json_t *root, const char *path)
{
    size_t at = len - SEAL_TAIL + sizeof SEAL_KEY - 1;
    json_t *v = json_object_get(root, "metadata_xxh3");
    uint64_t want;
    if (len < SEAL_TAIL || memcmp(buf + len - SEAL_TAIL, SEAL_KEY, sizeof SEAL_KEY - 1) != 0 ||
        memcmp(buf + len - (sizeof SEAL_END - 1), SEAL_END, sizeof SEAL_END - 1) != 0 ||
        !json_is_string(v) || strlen(json_string_value(v)) != 16 ||
        memcmp(json_string_value(v), buf + at, 16) != 0 ||
        shs__parse_hex64(&want, json_string_value(v)) < 0)
        return shs__err(SHS_ECORRUPT, "%s: version 2 ends with \"metadata_xxh3\", its checksum "
                        "(16 hex digits), as the last key", path);
    char *copy = shs__malloc(len + 1);
    if (!copy)
        return shs__err(SHS_ENOMEM, "out of memory reading %s", path);
    memcpy(copy, buf, len);
    memset(copy + at, '0', 16);
    uint64_t got = shs__xxh3(copy, len);
    shs__free(copy);
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

#define BAD(...) do { rc = shs__err(SHS_ECORRUPT, __VA_ARGS__); goto fail; } while (0)
#define OOM() do { rc = shs__err(SHS_ENOMEM, "out of memory reading %s", path); goto fail; } while (0)

int shs__meta_parse(shs__meta *m, const char *dir)
{
    int rc = SHS_OK;
    json_t *root = NULL;
    char *buf = NULL;
    name_ref *names = NULL;
    size_t len;
    memset(m, 0, sizeof *m);
    char *path = shs__path_join(dir, "metadata.json");
    if (!path)
        return shs__err(SHS_ENOMEM, "out of memory");
    if ((rc = shs__read_file_nofollow(&buf, &len, path, META_MAX)) < 0)
        goto fail;
    json_error_t jerr;
    root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        BAD("%s: invalid JSON at line %d: %s", path, jerr.line, jerr.text);
    if (!json_is_object(root))
        BAD("%s: not a JSON object", path);
    json_t *fmt = json_object_get(root, "format");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "shardsafe.checkpoint") != 0)
        BAD("%s: \"format\" must be \"shardsafe.checkpoint\"", path);
    uint64_t ver, step, ws;
    if (get_u64(root, "version", &ver) || ver < 1 || ver > SHS__META_VERSION)
        BAD("%s: unsupported \"version\" (this build reads versions 1 to %d)", path,
            SHS__META_VERSION);
    m->version = (int)ver;
    if (ver >= 2) {
        if (get_hex(root, "common_xxh3", &m->common_hash) < 0)
            BAD("%s: \"common_xxh3\" (16 hex digits) is required in version 2", path);
        m->has_common_hash = 1;
    }
    if (get_u64(root, "step", &step) || get_u64(root, "world_size", &ws) || ws < 1 ||
        ws > (1u << 24))
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
    json_t *mo = json_object_get(root, "model_only");
    if (mo && !json_is_boolean(mo))
        BAD("%s: \"model_only\" must be true or false", path);
    m->model_only = mo && json_is_true(mo);
    json_t *files = json_object_get(root, "files");
    if (!json_is_array(files))
        BAD("%s: \"files\" must be an array", path);
    size_t nf = json_array_size(files);
    m->f = shs__calloc(nf ? nf : 1, sizeof *m->f);
    names = shs__calloc(nf + 1, sizeof *names);
    if (!m->f || !names)
        OOM();
    m->nf = nf; /* only now: shs__meta_free walks m->f[0..nf) */
    for (size_t i = 0; i < m->nf; i++) {
        json_t *f = json_array_get(files, i);
        json_t *name = json_object_get(f, "name");
        uint64_t rank, nrank, nworld;
        if (!json_is_object(f) || !json_is_string(name) || get_u64(f, "rank", &rank) ||
            rank >= ws)
            BAD("%s: files[%zu] needs a \"name\" and a \"rank\" below world_size", path, i);
        const char *fname = json_string_value(name);
        if (!plain_file_name(fname))
            BAD("%s: files[%zu]: '%s' is not a plain file name inside the checkpoint directory",
                path, i, fname);
        /* the name a rank gives its files says which rank of which world */
        if (rank_world_of_name(fname, &nrank, &nworld) && (nrank != rank || nworld != ws))
            BAD("%s: files[%zu]: '%s' is named for rank %llu of %llu, but is listed for rank "
                "%llu with world_size %llu", path, i, fname, (unsigned long long)nrank,
                (unsigned long long)nworld, (unsigned long long)rank, (unsigned long long)ws);
        if (ver >= 2) {
            if (get_hex(f, "header_xxh3", &m->f[i].header_hash) < 0 ||
                get_u64(f, "size", &m->f[i].size))
                BAD("%s: files[%zu] ('%s') needs \"size\" and \"header_xxh3\" (16 hex digits)",
                    path, i, fname);
            m->f[i].has_header_hash = 1;
        }
        if (!(m->f[i].name = shs__strdup(fname)))
            OOM();
        m->f[i].rank = (int)rank;
        names[i] = (name_ref){ m->f[i].name, 0, i };
    }
    const char *dup = first_duplicate(names, m->nf);
    if (dup)
        BAD("%s: file '%s' listed twice", path, dup);
    json_t *tensors = json_object_get(root, "tensors");
    if (!json_is_object(tensors))
        BAD("%s: \"tensors\" must be an object", path);
    m->t = shs__calloc(json_object_size(tensors) + 1, sizeof *m->t);
    if (!m->t)
        OOM();
    const char *tname;
    json_t *tv;
    json_object_foreach(tensors, tname, tv) {
        shs__mtensor *t = &m->t[m->nt];
        if (!(t->name = shs__strdup(tname)))
            OOM();
        m->nt++;
        json_t *kind = json_object_get(tv, "kind"), *dt = json_object_get(tv, "dtype");
        json_t *shape = json_object_get(tv, "shape"), *chunks = json_object_get(tv, "chunks");
        if (!json_is_object(tv) || !json_is_string(kind) || !json_is_string(dt) ||
            !json_is_array(shape) || !json_is_array(chunks))
            BAD("%s: tensor '%s' needs \"kind\", \"dtype\", \"shape\" and \"chunks\"", path, tname);
        if (strcmp(json_string_value(kind), "model") == 0)
            t->kind = SHS_KIND_MODEL;
        else if (strcmp(json_string_value(kind), "opt") == 0)
            t->kind = SHS_KIND_OPTIMIZER;
        else
            BAD("%s: tensor '%s': unknown kind '%s'", path, tname, json_string_value(kind));
        const char *ds = json_string_value(dt);
        if (shs_dtype_parse(&t->dtype, ds, strlen(ds)) < 0)
            BAD("%s: tensor '%s': unknown dtype '%s'", path, tname, ds);
        t->ndim = json_array_size(shape);
        if (t->ndim > SHS_MAX_DIMS)
            BAD("%s: tensor '%s': too many dimensions", path, tname);
        int r = get_dims(shape, t->ndim, &t->gshape);
        if (r == -2)
            OOM();
        if (r < 0)
            BAD("%s: tensor '%s': bad shape", path, tname);
        uint64_t gbytes;
        if (shs_tensor_nbytes(&gbytes, t->dtype, t->ndim, t->gshape) < 0)
            BAD("%s: tensor '%s': shape overflows", path, tname);
        size_t nc = json_array_size(chunks);
        t->c = shs__calloc(nc ? nc : 1, sizeof *t->c);
        if (!t->c)
            OOM();
        t->nc = nc; /* only now, as m->nf above */
        for (size_t k = 0; k < t->nc; k++) {
            json_t *cj = json_array_get(chunks, k);
            shs__mchunk *c = &t->c[k];
            json_t *key = json_object_get(cj, "key");
            json_t *br = json_object_get(cj, "byte_range");
            uint64_t file;
            if (!json_is_object(cj) || !json_is_string(key) || get_u64(cj, "file", &file) ||
                file >= m->nf || !json_is_array(br) || json_array_size(br) != 2)
                BAD("%s: tensor '%s': chunk %zu needs \"file\", \"key\", \"byte_range\"", path,
                    tname, k);
            /* data files hold each chunk under the tensor's own name */
            if (strcmp(json_string_value(key), tname) != 0)
                BAD("%s: tensor '%s': chunk %zu has key '%s', not the tensor's name", path,
                    tname, k, json_string_value(key));
            c->file = (uint32_t)file;
            if ((r = get_dims(json_object_get(cj, "offset"), t->ndim, &c->off)) == -2 ||
                (r == 0 && (r = get_dims(json_object_get(cj, "shape"), t->ndim, &c->shape)) == -2))
                OOM();
            if (r < 0)
                BAD("%s: tensor '%s': chunk %zu: bad offset or shape", path, tname, k);
            for (size_t d = 0; d < t->ndim; d++)
                if (c->off[d] > t->gshape[d] || c->shape[d] > t->gshape[d] - c->off[d])
                    BAD("%s: tensor '%s': chunk %zu lies outside the tensor", path, tname, k);
            json_t *b0 = json_array_get(br, 0), *b1 = json_array_get(br, 1);
            if (!json_is_integer(b0) || !json_is_integer(b1) || json_integer_value(b0) < 0 ||
                json_integer_value(b1) < json_integer_value(b0))
                BAD("%s: tensor '%s': chunk %zu: bad byte_range", path, tname, k);
            c->b0 = (uint64_t)json_integer_value(b0);
            c->b1 = (uint64_t)json_integer_value(b1);
            uint64_t cbytes;
            if (shs_tensor_nbytes(&cbytes, t->dtype, t->ndim, c->shape) < 0 ||
                cbytes != c->b1 - c->b0)
                BAD("%s: tensor '%s': chunk %zu: byte_range does not match its shape", path,
                    tname, k);
            if (!(c->key = shs__strdup(json_string_value(key))))
                OOM();
            if (get_hex(cj, "xxh3", &c->hash) < 0)
                BAD("%s: tensor '%s': chunk %zu: \"xxh3\" (16 hex digits) is required", path,
                    tname, k);
            c->has_hash = 1;
            json_t *bs = json_object_get(cj, "xxh3_block"), *bl = json_object_get(cj, "xxh3_blocks");
            if (bs || bl) {
                uint64_t b = json_is_integer(bs) ? (uint64_t)json_integer_value(bs) : 0;
                uint64_t n = c->b1 - c->b0;
                if (b < 4096 || b > (1u << 30) || (b & (b - 1)) || !json_is_array(bl) ||
                    json_array_size(bl) != (n + b - 1) / b)
                    BAD("%s: tensor '%s': chunk %zu: \"xxh3_block\" must be a power of two "
                        "from 4096 and \"xxh3_blocks\" hold one checksum per block", path, tname,
                        k);
                c->block = b;
                c->nblocks = json_array_size(bl);
                if (!(c->blocks = shs__calloc(c->nblocks + 1, sizeof *c->blocks)))
                    OOM();
                for (size_t q = 0; q < c->nblocks; q++) {
                    json_t *x = json_array_get(bl, q);
                    if (!json_is_string(x) ||
                        shs__parse_hex64(&c->blocks[q], json_string_value(x)) < 0)
                        BAD("%s: tensor '%s': chunk %zu: block checksum %zu must be 16 hex "
                            "digits", path, tname, k, q);
                }
            }
        }
        if ((rc = check_tiling(t, path)) < 0)
            goto fail;
    }
    qsort(m->t, m->nt, sizeof *m->t, cmp_mtensor);
    json_t *blobs = json_object_get(root, "blobs");
    if ((blobs || ver >= 2) && !json_is_array(blobs))
        BAD("%s: \"blobs\" must be an array", path);
    size_t nb = blobs ? json_array_size(blobs) : 0;
    m->b = shs__calloc(nb ? nb : 1, sizeof *m->b);
    shs__free(names);
    names = shs__calloc(nb + 1, sizeof *names);
    if (!m->b || !names)
        OOM();
    m->nb = nb; /* only now, as m->nf above */
    for (size_t i = 0; i < m->nb; i++) {
        json_t *bj = json_array_get(blobs, i);
        shs__mblob *b = &m->b[i];
        json_t *name = json_object_get(bj, "name"), *key = json_object_get(bj, "key");
        json_t *br = json_object_get(bj, "byte_range");
        uint64_t rank, file;
        if (!json_is_object(bj) || !json_is_string(name) || !json_is_string(key) ||
            get_u64(bj, "rank", &rank) || rank >= ws || get_u64(bj, "file", &file) ||
            file >= m->nf || !json_is_array(br) || json_array_size(br) != 2 ||
            !json_is_integer(json_array_get(br, 0)) || !json_is_integer(json_array_get(br, 1)) ||
            get_hex(bj, "xxh3", &b->hash) < 0)
            BAD("%s: blobs[%zu] is malformed (it needs \"name\", \"rank\", \"file\", \"key\", "
                "\"byte_range\" and \"xxh3\")", path, i);
        if (!*json_string_value(name) ||
            strcmp(json_string_value(name), json_string_value(key)) != 0)
            BAD("%s: blobs[%zu]: blob '%s' is stored under key '%s', not its own name", path, i,
                json_string_value(name), json_string_value(key));
        if ((uint64_t)m->f[file].rank != rank)
            BAD("%s: blobs[%zu]: blob '%s' of rank %llu is in a file of rank %d", path, i,
                json_string_value(name), (unsigned long long)rank, m->f[file].rank);
        b->rank = (int)rank;
        b->file = (uint32_t)file;
        b->b0 = (uint64_t)json_integer_value(json_array_get(br, 0));
        b->b1 = (uint64_t)json_integer_value(json_array_get(br, 1));
        if (json_integer_value(json_array_get(br, 0)) < 0 || b->b1 < b->b0)
            BAD("%s: blobs[%zu]: bad byte_range", path, i);
        if (!(b->name = shs__strdup(json_string_value(name))) ||
            !(b->key = shs__strdup(json_string_value(key))))
            OOM();
        names[i] = (name_ref){ b->name, b->rank, i };
    }
    if ((dup = first_duplicate(names, m->nb)))
        BAD("%s: blob '%s' is listed twice for one rank", path, dup);
    /* the seal last: a file edited by hand is told what rule it breaks
       before it is told that it was edited */
    if (ver >= 2 && (rc = check_seal(buf, len, root, path)) < 0)
        goto fail;
    json_decref(root);
    shs__free(names);
    shs__free(buf);
    shs__free(path);
    return SHS_OK;
fail:
    json_decref(root);
    shs__free(names);
    shs__free(buf);
    shs__free(path);
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

#undef OOM
#undef BAD
