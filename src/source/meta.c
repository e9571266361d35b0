/*
 * meta.c -- metadata.json of a step directory, parsed and validated into
 * the model of meta.h (files without metadata.json: meta_plain.c), read
 * with the strict scanner of the safetensors header (st_json.h).  The scan
 * is meta_scan.c, the tiling rule meta_layout.c, the checksums and the
 * seal meta_seal.c; this file holds the rules and the parse itself.
 * Format: docs/checkpoint.md.
 */
#include "source/meta_int.h"

#include "crypto/crypt.h"
#include "store/io.h"
#include "source/meta_ms.h"
#include "source/stepdir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define META_MAX (1u << 30) /* metadata.json larger than this is refused */

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
            shs__free(m->t[i].c[k].tags);
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

#define BAD(...)                                                                                   \
    do {                                                                                           \
        rc = shs__err(SHS_ECORRUPT, __VA_ARGS__);                                                  \
        goto done;                                                                                 \
    } while (0)
#define OOM()                                                                                      \
    do {                                                                                           \
        rc = shs__err(SHS_ENOMEM, "out of memory reading %s", path);                               \
        goto done;                                                                                 \
    } while (0)

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
            rc = shs__err(SHS_ECORRUPT, "%s: invalid JSON: duplicate key '%s' in \"tensors\"", path,
                          v[i]);
    shs__free(v);
    return rc;
}

/* The top-level members: which format and version, which step (the
   directory's name must agree), how many ranks, and model_only. */
static int check_root(mparse *s, const char *dir, const char *path)
{
    int rc = SHS_OK;
    shs__meta *m = s->m;
    if (s->root_k != V_OBJ)
        BAD("%s: not a JSON object", path);
    if (s->format_k != V_STR || strcmp(s->format, "shardsafe.checkpoint") != 0)
        BAD("%s: \"format\" must be \"shardsafe.checkpoint\"", path);
    uint64_t ver = s->version.v, step = s->step.v, ws = s->world_size.v;
    if (s->version.k != V_UINT || ver < 1 || ver > SHS__META_VERSION_STREAM)
        BAD("%s: unsupported \"version\" (this build reads versions 1 to %d)", path,
            SHS__META_VERSION_STREAM);
    m->version = (int)ver;
    /* versions 3 and 4 are version 2 encrypted (crypt.h), and only that */
    if ((rc = shs__meta_check_cipher(s, path)) < 0)
        goto done;
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
done:
    return rc;
}

/* "files": each a plain name inside the directory, of a rank below
   world_size (and the rank its name says), listed once. */
static int check_files(mparse *s, const char *path)
{
    int rc = SHS_OK;
    shs__meta *m = s->m;
    uint64_t ws = (uint64_t)m->world_size;
    name_ref *names = NULL;
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
        const char *why = shs_file_name_problem(fname);
        if (why)
            BAD("%s: files[%zu]: '%s' is not a plain file name inside the checkpoint directory: "
                "it %s",
                path, i, fname, why);
        /* the name a rank gives its files says which rank of which world */
        if (rank_world_of_name(fname, &nrank, &nworld) && (nrank != rank || nworld != ws))
            BAD("%s: files[%zu]: '%s' is named for rank %llu of %llu, but is listed for rank "
                "%llu with world_size %llu",
                path, i, fname, (unsigned long long)nrank, (unsigned long long)nworld,
                (unsigned long long)rank, (unsigned long long)ws);
        if (m->version >= 2) {
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
done:
    shs__free(names);
    return rc;
}

/* Chunk k of tensor t: a box inside the tensor, stored under the
   tensor's name in a listed file, whose byte range fits its shape, with
   its checksum and well-formed block checksums. */
static int check_chunk(const mparse *s, shs__mtensor *t, const rchunk *q, size_t k,
                       const char *path)
{
    int rc = SHS_OK;
    const shs__meta *m = s->m;
    shs__mchunk *c = &t->c[k];
    const char *tname = t->name;
    uint64_t file = q->file.v;
    if (!q->obj || q->key_k != V_STR || q->file.k != V_UINT || file >= m->nf || q->br_k != V_ARR ||
        q->br_n != 2)
        BAD("%s: tensor '%s': chunk %zu needs \"file\", \"key\", \"byte_range\"", path, tname, k);
    /* data files hold each chunk under the tensor's own name */
    if (strcmp(c->key, tname) != 0)
        BAD("%s: tensor '%s': chunk %zu has key '%s', not the tensor's name", path, tname, k,
            c->key);
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
    if (shs_tensor_nbytes(&cbytes, t->dtype, t->ndim, c->shape) < 0 || cbytes != c->b1 - c->b0)
        BAD("%s: tensor '%s': chunk %zu: byte_range does not match its shape", path, tname, k);
    if (q->hash_k != H_OK)
        BAD("%s: tensor '%s': chunk %zu: \"xxh3\" (16 hex digits) is required", path, tname, k);
    c->has_hash = 1;
    if ((rc = shs__meta_check_chunk_cipher(s, t, q, k, path)) < 0)
        goto done;
    if (q->block.k != V_NONE || q->blocks_k != V_NONE) {
        uint64_t b = q->block.k == V_UINT ? q->block.v : 0;
        uint64_t n = c->b1 - c->b0;
        if (b < 4096 || b > (1u << 30) || (b & (b - 1)) || q->blocks_k != V_ARR ||
            q->nblocks != (n + b - 1) / b)
            BAD("%s: tensor '%s': chunk %zu: \"xxh3_block\" must be a power of two "
                "from 4096 and \"xxh3_blocks\" hold one checksum per block",
                path, tname, k);
        if (q->bad_block != SIZE_MAX)
            BAD("%s: tensor '%s': chunk %zu: block checksum %zu must be 16 hex "
                "digits",
                path, tname, k, q->bad_block);
        if (!c->blocks && !(c->blocks = shs__calloc(1, sizeof *c->blocks)))
            OOM();
        c->block = b;
        c->nblocks = q->nblocks;
    }
done:
    return rc;
}

/* Tensor i: a known kind and dtype, a shape whose size fits, valid
   chunks that tile it. */
static int check_tensor(mparse *s, size_t i, const char *path)
{
    int rc = SHS_OK;
    shs__meta *m = s->m;
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
    for (size_t k = 0; k < t->nc; k++)
        if ((rc = check_chunk(s, t, &r->rc[k], k, path)) < 0)
            goto done;
    rc = shs__meta_check_tiling(t, path);
done:
    return rc;
}

/* "blobs": each stored under its own name in a file of its own rank,
   with a byte range and a checksum, listed once per rank. */
static int check_blobs(mparse *s, const char *path)
{
    int rc = SHS_OK;
    shs__meta *m = s->m;
    uint64_t ws = (uint64_t)m->world_size;
    name_ref *names = NULL;
    if ((s->blobs_k != V_NONE || m->version >= 2) && s->blobs_k != V_ARR)
        BAD("%s: \"blobs\" must be an array", path);
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
                "\"byte_range\" and \"xxh3\")",
                path, i);
        if (!*b->name || strcmp(b->name, b->key) != 0)
            BAD("%s: blobs[%zu]: blob '%s' is stored under key '%s', not its own name", path, i,
                b->name, b->key);
        if ((uint64_t)m->f[file].rank != rank)
            BAD("%s: blobs[%zu]: blob '%s' of rank %llu is in a file of rank %d", path, i, b->name,
                (unsigned long long)rank, m->f[file].rank);
        b->rank = (int)rank;
        b->file = (uint32_t)file;
        if (r->b0.k == V_NEG || r->b1.k == V_NEG || r->b1.v < r->b0.v)
            BAD("%s: blobs[%zu]: bad byte_range", path, i);
        b->b0 = r->b0.v;
        b->b1 = r->b1.v;
        names[i] = (name_ref){ b->name, b->rank, i };
    }
    const char *dup = first_duplicate(names, m->nb);
    if (dup)
        BAD("%s: blob '%s' is listed twice for one rank", path, dup);
done:
    shs__free(names);
    return rc;
}

/* Phase two: every rule, in a fixed order, on what the scan found. */
static int check_meta(mparse *s, const char *dir, const char *path)
{
    shs__meta *m = s->m;
    int rc;
    if ((rc = check_tensor_names(m, path)) < 0 || (rc = check_root(s, dir, path)) < 0 ||
        (rc = check_files(s, path)) < 0)
        return rc;
    if (s->tensors_k != V_OBJ)
        return shs__err(SHS_ECORRUPT, "%s: \"tensors\" must be an object", path);
    if (!m->t && !(m->t = shs__calloc(1, sizeof *m->t)))
        return shs__err(SHS_ENOMEM, "out of memory reading %s", path);
    for (size_t i = 0; i < m->nt; i++)
        if ((rc = check_tensor(s, i, path)) < 0)
            return rc;
    qsort(m->t, m->nt, sizeof *m->t, cmp_mtensor);
    return check_blobs(s, path);
}

#undef OOM
#undef BAD

/* The bytes of <dir>/metadata.json (kept apart from the parse: how the
   file is opened is a matter of its own): never read through a link. */
static int meta_read(const char *path, char **buf, size_t *len)
{
    return shs__read_file_nofollow(buf, len, path, META_MAX);
}

static void scan_release(mparse *s)
{
    for (size_t i = 0; i < s->cap_t; i++)
        shs__free(s->rt[i].rc);
    shs__free(s->rt);
    shs__free(s->rf);
    shs__free(s->rb);
    shs__free(s->js.nk);
    shs__free(s->js.arena);
}

/* Phase one over <dir>/metadata.json into *m: *buf, *len hold its bytes
   (the caller frees them and releases *s). */
static int scan_file(mparse *s, shs__meta *m, const char *path, char **buf, size_t *len)
{
    int rc;
    memset(s, 0, sizeof *s);
    memset(m, 0, sizeof *m);
    if ((rc = meta_read(path, buf, len)) < 0)
        return rc;
    s->m = m;
    s->js.p = s->js.start = *buf;
    s->js.end = *buf + *len;
    s->js.fname = path;
    s->js.meta = 1;
    if (!(s->js.arena = shs__malloc(*len + 1)))
        return shs__err(SHS_ENOMEM, "out of memory reading %s", path);
    return shs__meta_scan(s);
}

/* THE rule telling MindSpore's metadata.json from ours: an object with
   its keys and without our "format". */
static int is_ms_form(const mparse *s)
{
    return s->root_k == V_OBJ && s->format_k == V_NONE && s->ms_k;
}

int shs__meta_form(const char *dir, int *mindspore)
{
    char *buf = NULL;
    size_t len = 0;
    mparse s;
    shs__meta m;
    *mindspore = 0;
    char *path = shs__path_join(dir, "metadata.json");
    if (!path)
        return shs__err(SHS_ENOMEM, "out of memory");
    int rc = scan_file(&s, &m, path, &buf, &len);
    if (rc == SHS_OK)
        *mindspore = is_ms_form(&s);
    /* a file that does not scan is ours to report when it is opened */
    if (rc == SHS_ECORRUPT || rc == SHS_ECHECKSUM) {
        shs__err_clear();
        rc = SHS_OK;
    }
    scan_release(&s);
    shs__meta_free(&m);
    shs__free(buf);
    shs__free(path);
    return rc;
}

int shs__meta_parse(shs__meta *m, const char *dir, unsigned flags)
{
    char *buf = NULL;
    size_t len = 0;
    mparse s;
    char *path = shs__path_join(dir, "metadata.json");
    memset(m, 0, sizeof *m);
    memset(&s, 0, sizeof s);
    if (!path)
        return shs__err(SHS_ENOMEM, "out of memory");
    int rc = scan_file(&s, m, path, &buf, &len);
    if (rc < 0)
        goto done;
    if (is_ms_form(&s)) {
        shs__meta_free(m);
        rc = (flags & SHS__META_MINDSPORE)
                 ? shs__meta_from_ms(m, dir, path, buf, len)
                 : shs__err(SHS_EUNSUPPORTED,
                            "%s: MindSpore's metadata.json, not a shardsafe checkpoint's", path);
        goto done;
    }
    if ((rc = check_meta(&s, dir, path)) < 0)
        goto done;
    /* the seal last: a file edited by hand is told what rule it breaks
       before it is told that it was edited */
    if (m->version >= 2)
        rc = shs__meta_check_seal(buf, len, s.seal_k == V_STR ? s.seal : NULL, path);
    if (rc == SHS_OK)
        rc = shs__meta_check_mac(&s, buf, len, path);
done:
    scan_release(&s);
    shs__free(buf);
    shs__free(path);
    if (rc < 0)
        shs__meta_free(m);
    return rc;
}
