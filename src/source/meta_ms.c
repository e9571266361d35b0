/*
 * meta_ms.c -- MindSpore Transformers "Checkpoint 2.0" step directories in
 * the checkpoint model of meta.h (meta_ms.h).  Its metadata.json says, for
 * each parameter, a global shape, how many parts each dimension is cut in
 * (axis_fragmentations, from its layout), and which slices exist (a slice
 * id, row-major over those parts); storage_data says which files hold each
 * slice.  It has no byte ranges and no checksums: the ranges come from the
 * files' own headers, which must agree with the metadata.  The result is
 * ordinary chunks, so load, reshard, the read API and verify need nothing
 * of their own.  Format: docs/format.md.
 */
#include "source/meta_ms.h"

#include "common/namemap.h"
#include "format/json_doc.h"

#include "source/common_json.h"
#include "store/io.h"
#include "checkpoint/loader.h"
#include "source/meta_int.h"
#include "source/stepdir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MS_TUPLE_MAX SHS__MS_TUPLE_MAX
#define MS_RANK_LIMIT (1 << 24) /* ranks and parts above this are refused */

/* A storage_data key, "('name', (i, ...))", parsed. */
typedef struct skey {
    char *name;
    size_t n;
    uint64_t v[MS_TUPLE_MAX];
    const char *text;       /* the key as written (the document's) */
    const shs__jnode *list; /* its entries (borrowed) */
    int used;
} skey;

typedef struct msctx {
    shs__meta *m;
    const char *dir, *path;
    skey *k;
    size_t nk;
    const shs__jdoc *d;  /* metadata.json */
    shs__namemap fmap;   /* file name -> index into m->f */
    shs_file **fh;       /* parallel to m->f, opened on first use */
    size_t cap_f;        /* of m->f and fh */
    size_t *stamp;       /* per file: 1 + the tensor that last used it */
    uint64_t *stamp_sid; /* ... and for which slice */
    size_t cur;          /* index of the tensor being read */
} msctx;

#define BAD(...)                                                                                   \
    do {                                                                                           \
        rc = shs__err(SHS_ECORRUPT, __VA_ARGS__);                                                  \
        goto done;                                                                                 \
    } while (0)
#define OOM()                                                                                      \
    do {                                                                                           \
        rc = shs__err(SHS_ENOMEM, "out of memory reading %s", x->path);                            \
        goto done;                                                                                 \
    } while (0)

/* ---- names ---------------------------------------------------------- */

static const struct {
    const char *ms;
    shs_dtype dt;
} k_ms_dtypes[] = { { "Bool", SHS_BOOL },    { "Int8", SHS_I8 },     { "Int16", SHS_I16 },
                    { "Int32", SHS_I32 },    { "Int64", SHS_I64 },   { "UInt8", SHS_U8 },
                    { "UInt16", SHS_U16 },   { "UInt32", SHS_U32 },  { "UInt64", SHS_U64 },
                    { "Float16", SHS_F16 },  { "Float32", SHS_F32 }, { "Float64", SHS_F64 },
                    { "BFloat16", SHS_BF16 } };

/* MindSpore's dtype names (str(mindspore dtype)), matched without case as
   its loader does. */
static int ms_dtype(shs_dtype *out, const char *s)
{
    for (size_t i = 0; i < sizeof k_ms_dtypes / sizeof k_ms_dtypes[0]; i++)
        if (strcasecmp(s, k_ms_dtypes[i].ms) == 0) {
            *out = k_ms_dtypes[i].dt;
            return 0;
        }
    return -1;
}

/* Optimizer files: "{prefix}-opt-%07d-%07d.safetensors", or without a
   prefix "opt-...". */
static int is_opt_file(const char *name)
{
    return strncmp(name, "opt-", 4) == 0 || strstr(name, "-opt-") != NULL;
}

/* *step = the step of the directory's name, else common.json's
   global_step, else -1; only running out of memory is an error. */
static int ms_step(const char *dir, int64_t *step)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    size_t b = n;
    while (b && dir[b - 1] != '/')
        b--;
    char name[48];
    if (n - b < sizeof name) {
        memcpy(name, dir + b, n - b);
        name[n - b] = '\0';
        if ((*step = shs__step_of_name(name)) >= 0)
            return SHS_OK;
    }
    shs_progress p = SHS_PROGRESS_INIT;
    int rc = shs__common_read(&p, dir);
    if (rc == SHS_ENOMEM)
        return rc;
    *step = rc == SHS_OK && p.global_step >= 0 ? p.global_step : -1;
    shs__err_clear();
    return SHS_OK;
}

/* ---- storage_data keys (parsed by meta_ms_key.c) ----------------- */

static int cmp_tuple(const uint64_t *a, size_t na, const uint64_t *b, size_t nb)
{
    for (size_t i = 0; i < na && i < nb; i++)
        if (a[i] != b[i])
            return a[i] < b[i] ? -1 : 1;
    return (na > nb) - (na < nb);
}

static int cmp_skey(const void *pa, const void *pb)
{
    const skey *a = pa, *b = pb;
    int c = strcmp(a->name, b->name);
    return c ? c : cmp_tuple(a->v, a->n, b->v, b->n);
}

/* Every key of storage_data parsed and sorted; one that is not a shard id
   or repeats another is an error naming it. */
static int read_storage(msctx *x, const shs__jnode *sd)
{
    int rc = SHS_OK;
    if (!(x->k = shs__calloc(shs__jsize(sd) + 1, sizeof *x->k)))
        return shs__err(SHS_ENOMEM, "out of memory reading %s", x->path);
    for (const shs__jnode *v = shs__jfirst(x->d, sd); v; v = shs__jnext(x->d, v)) {
        const char *key = v->key;
        skey *k = &x->k[x->nk];
        if (strlen(key) != v->key_len)
            BAD("%s: a storage_data key holds a NUL byte", x->path);
        int r = shs__ms_parse_key(key, &k->name, k->v, &k->n);
        if (r == -2)
            OOM();
        if (r < 0)
            BAD("%s: storage_data key \"%s\" is not a shard id ('name', (slice,))", x->path, key);
        x->nk++;
        k->text = key;
        k->list = v;
        if (!shs__jis(v, SHS__J_ARR) || shs__jsize(v) == 0)
            BAD("%s: storage_data \"%s\" must be a non-empty list of files", x->path, key);
    }
    if (x->nk > 1)
        qsort(x->k, x->nk, sizeof *x->k, cmp_skey);
    for (size_t i = 1; i < x->nk; i++)
        if (cmp_skey(&x->k[i - 1], &x->k[i]) == 0)
            BAD("%s: storage_data lists one shard twice: \"%s\" and \"%s\"", x->path,
                x->k[i - 1].text, x->k[i].text);
done:
    return rc;
}

static skey *find_key(msctx *x, const char *name, const uint64_t *v, size_t n)
{
    skey want = { (char *)name, n, { 0 }, NULL, NULL, 0 };
    memcpy(want.v, v, n * sizeof *v);
    return bsearch(&want, x->k, x->nk, sizeof *x->k, cmp_skey);
}

/* ---- files ---------------------------------------------------------- */

static const char *file_name_of(const void *ctx, uint32_t i, size_t *len)
{
    const shs__meta *m = ctx;
    *len = strlen(m->f[i].name);
    return m->f[i].name;
}

/* *fi = the index of file `name` in the model (added with `rank` when
   new; a file listed for two storage ranks is an error), opened. */
static int use_file(msctx *x, const shs__mtensor *t, const char *name, uint64_t rank, uint32_t *fi)
{
    int rc = SHS_OK;
    shs__meta *m = x->m;
    long have = shs__namemap_find(&x->fmap, name, strlen(name), file_name_of, m);
    if (have >= 0) {
        *fi = (uint32_t)have;
        if ((uint64_t)m->f[*fi].rank != rank)
            BAD("%s: tensor '%s': file '%s' is listed with storage_rank %d and %llu", x->path,
                t->name, name, m->f[*fi].rank, (unsigned long long)rank);
        return SHS_OK;
    }
    if (m->nf == x->cap_f) {
        size_t c = x->cap_f ? x->cap_f * 2 : 16;
        shs__mfile *nf = shs__realloc(m->f, c * sizeof *nf);
        if (nf)
            m->f = nf;
        shs_file **nh = nf ? shs__realloc(x->fh, c * sizeof *nh) : NULL;
        if (nh)
            x->fh = nh;
        size_t *ns = nh ? shs__realloc(x->stamp, c * sizeof *ns) : NULL;
        if (ns)
            x->stamp = ns;
        uint64_t *nsi = ns ? shs__realloc(x->stamp_sid, c * sizeof *nsi) : NULL;
        if (!nsi)
            OOM();
        x->stamp_sid = nsi;
        x->cap_f = c;
    }
    *fi = (uint32_t)m->nf;
    memset(&m->f[*fi], 0, sizeof m->f[*fi]);
    x->fh[*fi] = NULL;
    x->stamp[*fi] = 0;
    if (!(m->f[*fi].name = shs__strdup(name)))
        OOM();
    m->f[*fi].rank = (int)rank;
    m->nf++;
    uint32_t dup;
    if (shs__namemap_insert(&x->fmap, name, strlen(name), *fi, file_name_of, m, &dup) < 0)
        OOM();
    char *fp = shs__path_join(x->dir, name);
    if (!fp)
        OOM();
    shs_open_opts oo = SHS_OPEN_OPTS_INIT;
    oo.flags = SHS_OPEN_NO_MMAP | SHS_OPEN_NO_FOLLOW;
    rc = shs_file_open(&x->fh[*fi], fp, &oo);
    shs__free(fp);
    if (rc == SHS_ENOENT)
        BAD("%s: tensor '%s': storage_data names the file '%s', which does not exist", x->path,
            t->name, name);
done:
    return rc;
}

/* "[a, b, c]" of a shape, for messages. */
static const char *fmt_dims(char *buf, size_t cap, const uint64_t *v, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && at + 24 < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%llu", i ? ", " : "",
                               (unsigned long long)v[i]);
    return buf;
}

/* One storage entry of slice `sid` (chunk box off/shape) of tensor t: the
   file holds the tensor under its name, of its dtype and the slice's
   shape; it becomes a chunk (no checksum). */
static int add_entry(msctx *x, shs__mtensor *t, uint64_t sid, const uint64_t *off,
                     const uint64_t *shape, const shs__jnode *e)
{
    int rc = SHS_OK;
    char a[128], b[128], c3[128];
    const shs__jnode *fn = shs__jget(x->d, e, "file_name"),
                     *sr = shs__jget(x->d, e, "storage_rank");
    const shs__jnode *rg = shs__jget(x->d, e, "rank_group");
    int64_t srv = -1;
    if (!shs__jis(e, SHS__J_OBJ) || !shs__jis(fn, SHS__J_STR) || strlen(fn->s) != fn->len ||
        !shs__jint(sr, &srv) || srv < 0 || srv >= MS_RANK_LIMIT ||
        (rg && !shs__jis(rg, SHS__J_ARR)))
        BAD("%s: tensor '%s': slice %llu: a storage entry needs \"file_name\" and "
            "\"storage_rank\"",
            x->path, t->name, (unsigned long long)sid);
    const char *name = fn->s;
    const char *why = shs_file_name_problem(name);
    if (why)
        BAD("%s: tensor '%s': '%s' is not a file name inside the checkpoint directory: it %s",
            x->path, t->name, name, why);
    uint64_t rank = (uint64_t)srv;
    if (rank + 1 > (uint64_t)x->m->world_size)
        x->m->world_size = (int)(rank + 1);
    uint32_t fi = 0;
    if ((rc = use_file(x, t, name, rank, &fi)) < 0)
        goto done;
    /* a file holds a parameter once, under its name: one slice of it */
    if (x->stamp[fi] == x->cur + 1)
        BAD("%s: tensor '%s': file '%s' is named for slices %llu and %llu; a file holds one "
            "slice of a tensor",
            x->path, t->name, name, (unsigned long long)x->stamp_sid[fi], (unsigned long long)sid);
    x->stamp[fi] = x->cur + 1;
    x->stamp_sid[fi] = sid;
    shs_kind kind = is_opt_file(name) ? SHS_KIND_OPTIMIZER : SHS_KIND_MODEL;
    if (t->nc && kind != t->kind)
        BAD("%s: tensor '%s' is stored in both model and optimizer files ('%s')", x->path, t->name,
            name);
    t->kind = kind;
    const shs_file *f = x->fh[fi];
    size_t idx;
    if (shs_file_find(&idx, f, t->name) != SHS_OK)
        BAD("%s: tensor '%s': file '%s' does not hold it (storage_data says it holds slice "
            "%llu)",
            x->path, t->name, name, (unsigned long long)sid);
    shs__err_clear();
    const shs_tensor_info *ti = shs_file_tensor(f, idx);
    if (ti->dtype != t->dtype)
        BAD("%s: tensor '%s' is %s in file '%s' but %s in metadata.json", x->path, t->name,
            shs_dtype_name(ti->dtype), name, shs_dtype_name(t->dtype));
    if (ti->ndim != t->ndim || (t->ndim && memcmp(ti->shape, shape, t->ndim * sizeof *shape)))
        BAD("%s: tensor '%s': file '%s' holds shape [%s], but slice %llu of global_shape "
            "[%s] is [%s]",
            x->path, t->name, name, fmt_dims(a, sizeof a, ti->shape, ti->ndim),
            (unsigned long long)sid, fmt_dims(b, sizeof b, t->gshape, t->ndim),
            fmt_dims(c3, sizeof c3, shape, t->ndim));
    if (t->nc % 8 == 0) {
        shs__mchunk *nc = shs__realloc(t->c, (t->nc + 8) * sizeof *nc);
        if (!nc)
            OOM();
        t->c = nc;
    }
    shs__mchunk *c = &t->c[t->nc++];
    memset(c, 0, sizeof *c);
    size_t nd = t->ndim ? t->ndim : 1;
    c->off = shs__calloc(nd, sizeof *c->off);
    c->shape = shs__calloc(nd, sizeof *c->shape);
    c->key = shs__strdup(t->name);
    if (!c->off || !c->shape || !c->key)
        OOM();
    memcpy(c->off, off, t->ndim * sizeof *off);
    memcpy(c->shape, shape, t->ndim * sizeof *shape);
    c->file = fi;
    c->b0 = shs_file_data_start(f) + ti->offset;
    c->b1 = c->b0 + ti->nbytes;
done:
    return rc;
}

/* ---- parameters ----------------------------------------------------- */

/* The layout (device_matrix, tensor_map, ...) must split each dimension
   in as many parts as axis_fragmentations says.  tensor_map value v
   names mesh axis len(device_matrix) - 1 - v; -1 leaves the dimension
   whole; a list names several axes. */
static int check_layout(msctx *x, const shs__mtensor *t, const shs__jnode *lay,
                        const uint64_t *frag)
{
    int rc = SHS_OK;
    const shs__jdoc *D = x->d;
    const shs__jnode *dm = shs__jget(D, lay, "device_matrix"),
                     *tm = shs__jget(D, lay, "tensor_map");
    const shs__jnode *il = shs__jget(D, lay, "interleaved_parallel"),
                     *rl = shs__jget(D, lay, "rank_list");
    size_t ndm = shs__jsize(dm);
    uint64_t dev[64], ndev = 1, used = 0;
    int64_t iv;
    if (!shs__jis(dm, SHS__J_ARR) || !shs__jis(tm, SHS__J_ARR) || ndm == 0 || ndm > 64 ||
        shs__jsize(tm) != t->ndim || (rl && !shs__jis(rl, SHS__J_ARR)))
        BAD("%s: tensor '%s': its layout needs \"device_matrix\" and a \"tensor_map\" of one "
            "entry per dimension",
            x->path, t->name);
    if (shs__jis(il, SHS__J_TRUE)) {
        rc = shs__err(SHS_EUNSUPPORTED,
                      "%s: tensor '%s': interleaved_parallel layouts are not supported", x->path,
                      t->name);
        goto done;
    }
    for (size_t i = 0; i < ndm; i++) {
        if (!shs__jint(shs__jat(D, dm, i), &iv) || iv < 1 || iv > MS_RANK_LIMIT)
            BAD("%s: tensor '%s': device_matrix[%zu] is not a positive integer", x->path, t->name,
                i);
        dev[i] = (uint64_t)iv;
        if ((ndev *= dev[i]) > MS_RANK_LIMIT)
            BAD("%s: tensor '%s': its device_matrix has more than %d devices", x->path, t->name,
                MS_RANK_LIMIT);
    }
    if (rl && shs__jsize(rl) != ndev)
        BAD("%s: tensor '%s': rank_list has %zu ranks, its device_matrix %llu", x->path, t->name,
            shs__jsize(rl), (unsigned long long)ndev);
    for (size_t d = 0; d < t->ndim; d++) {
        const shs__jnode *e = shs__jat(D, tm, d);
        int list = shs__jis(e, SHS__J_ARR);
        size_t ne = list ? shs__jsize(e) : 1;
        uint64_t split = 1;
        for (size_t i = 0; i < ne; i++) {
            const shs__jnode *v = list ? shs__jat(D, e, i) : e;
            int64_t a = shs__jint(v, &iv) ? iv : -2;
            if (a == -1 && !list)
                continue;
            if (a < 0 || (size_t)a >= ndm || (used & (1ull << a)))
                BAD("%s: tensor '%s': tensor_map[%zu] names no mesh axis, or one already "
                    "used",
                    x->path, t->name, d);
            used |= 1ull << a;
            split *= dev[ndm - 1 - (size_t)a];
        }
        if (split != frag[d])
            BAD("%s: tensor '%s': axis_fragmentations[%zu] is %llu, but its layout cuts that "
                "dimension in %llu",
                x->path, t->name, d, (unsigned long long)frag[d], (unsigned long long)split);
    }
    for (size_t i = 0; rl && i < shs__jsize(rl); i++) {
        if (!shs__jint(shs__jat(D, rl, i), &iv) || iv < 0 || iv >= MS_RANK_LIMIT)
            BAD("%s: tensor '%s': rank_list[%zu] is not a rank", x->path, t->name, i);
        if (iv >= x->m->world_size)
            x->m->world_size = (int)iv + 1;
    }
done:
    return rc;
}

/* An array of integers >= 0 into v (at most cap); -1 when it is none. */
static int read_dims(const shs__jdoc *d, const shs__jnode *a, uint64_t *v, size_t cap, size_t *n)
{
    if (!shs__jis(a, SHS__J_ARR) || shs__jsize(a) > cap)
        return -1;
    *n = shs__jsize(a);
    for (size_t i = 0; i < *n; i++) {
        const shs__jnode *e = shs__jat(d, a, i);
        if (!shs__jis(e, SHS__J_NUM) || !e->is_uint)
            return -1;
        v[i] = e->u;
    }
    return 0;
}

/* Chunk k of the "chunk" list: its slice id names a box of the tensor,
   of the shape local_shape says, and every file storage_data names for
   it holds that box. */
static int read_chunk(msctx *x, shs__mtensor *t, const uint64_t *frag, uint64_t nslices, size_t k,
                      const shs__jnode *jc)
{
    int rc = SHS_OK;
    uint64_t go[MS_TUPLE_MAX], ls[SHS_MAX_DIMS], off[SHS_MAX_DIMS], part[SHS_MAX_DIMS];
    size_t ngo, nls;
    char a[128], b[128], c3[128];
    if (!shs__jis(jc, SHS__J_OBJ) ||
        read_dims(x->d, shs__jget(x->d, jc, "global_offset"), go, MS_TUPLE_MAX, &ngo) < 0 ||
        read_dims(x->d, shs__jget(x->d, jc, "local_shape"), ls, SHS_MAX_DIMS, &nls) < 0)
        BAD("%s: tensor '%s': chunk %zu needs \"global_offset\" and \"local_shape\"", x->path,
            t->name, k);
    if (ngo > 1) {
        rc = shs__err(SHS_EUNSUPPORTED,
                      "%s: tensor '%s': chunk %zu: a global_offset of %zu elements (this "
                      "library reads one slice id)",
                      x->path, t->name, k, ngo);
        goto done;
    }
    uint64_t sid = ngo ? go[0] : 0;
    if (sid >= nslices)
        BAD("%s: tensor '%s': chunk %zu: slice %llu is outside the tensor (its "
            "axis_fragmentations make %llu slices)",
            x->path, t->name, k, (unsigned long long)sid, (unsigned long long)nslices);
    /* the slice id is row-major over the parts of each dimension */
    uint64_t r = sid;
    for (size_t d = t->ndim; d-- > 0;) {
        part[d] = t->gshape[d] / frag[d];
        off[d] = (r % frag[d]) * part[d];
        r /= frag[d];
    }
    if (nls != t->ndim || (t->ndim && memcmp(ls, part, t->ndim * sizeof *ls) != 0))
        BAD("%s: tensor '%s': chunk %zu: local_shape [%s] is not [%s], the shape of a slice "
            "of global_shape [%s] cut by axis_fragmentations",
            x->path, t->name, k, fmt_dims(a, sizeof a, ls, nls),
            fmt_dims(c3, sizeof c3, part, t->ndim), fmt_dims(b, sizeof b, t->gshape, t->ndim));
    skey *sk = find_key(x, t->name, go, ngo);
    if (!sk)
        BAD("%s: tensor '%s': slice %llu has no storage_data entry", x->path, t->name,
            (unsigned long long)sid);
    if (sk->used)
        BAD("%s: tensor '%s': slice %llu is listed twice in \"chunk\"", x->path, t->name,
            (unsigned long long)sid);
    sk->used = 1;
    for (size_t i = 0; i < shs__jsize(sk->list) && rc == SHS_OK; i++)
        rc = add_entry(x, t, sid, off, part, shs__jat(x->d, sk->list, i));
done:
    return rc;
}

/* Parameter `name` of state_dict_metadata into tensor t. */
static int read_param(msctx *x, shs__mtensor *t, const char *name, const shs__jnode *jt)
{
    int rc = SHS_OK;
    uint64_t frag[SHS_MAX_DIMS], nslices = 1, gbytes;
    size_t nfrag;
    if (!(t->name = shs__strdup(name)))
        OOM();
    const shs__jdoc *D = x->d;
    const shs__jnode *props = shs__jget(D, jt, "properties"),
                     *gs = shs__jget(D, jt, "global_shape");
    const shs__jnode *af = shs__jget(D, jt, "axis_fragmentations"),
                     *lay = shs__jget(D, jt, "layout");
    const shs__jnode *ch = shs__jget(D, jt, "chunk");
    const shs__jnode *dt = shs__jget(D, props, "dtype");
    if (!shs__jis(jt, SHS__J_OBJ) || !shs__jis(dt, SHS__J_STR) || !shs__jis(gs, SHS__J_ARR) ||
        !shs__jis(ch, SHS__J_ARR) || !(shs__jis(lay, SHS__J_OBJ) || shs__jis(lay, SHS__J_NULL)))
        BAD("%s: tensor '%s' needs \"properties\" (with \"dtype\"), \"global_shape\", "
            "\"axis_fragmentations\", \"layout\" and \"chunk\"",
            x->path, name);
    if (ms_dtype(&t->dtype, dt->s) < 0)
        BAD("%s: tensor '%s': unknown dtype '%s'", x->path, name, dt->s);
    uint64_t g[SHS_MAX_DIMS];
    if (read_dims(D, gs, g, SHS_MAX_DIMS, &t->ndim) < 0)
        BAD("%s: tensor '%s': bad global_shape", x->path, name);
    if (!(t->gshape = shs__calloc(t->ndim ? t->ndim : 1, sizeof *t->gshape)))
        OOM();
    memcpy(t->gshape, g, t->ndim * sizeof *g);
    if (shs_tensor_nbytes(&gbytes, t->dtype, t->ndim, t->gshape) < 0)
        BAD("%s: tensor '%s': global_shape overflows", x->path, name);
    if (read_dims(D, af, frag, SHS_MAX_DIMS, &nfrag) < 0 || nfrag != t->ndim)
        BAD("%s: tensor '%s': axis_fragmentations must hold one count per dimension", x->path,
            name);
    for (size_t d = 0; d < t->ndim; d++) {
        if (frag[d] < 1 || frag[d] > MS_RANK_LIMIT)
            BAD("%s: tensor '%s': axis_fragmentations[%zu] is not a positive count", x->path, name,
                d);
        if (t->gshape[d] % frag[d]) {
            rc = shs__err(SHS_EUNSUPPORTED,
                          "%s: tensor '%s': dimension %zu of size %llu is cut in %llu uneven "
                          "parts (MindSpore splits evenly)",
                          x->path, name, d, (unsigned long long)t->gshape[d],
                          (unsigned long long)frag[d]);
            goto done;
        }
        if ((nslices *= frag[d]) > MS_RANK_LIMIT)
            BAD("%s: tensor '%s': more than %d slices", x->path, name, MS_RANK_LIMIT);
    }
    if (shs__jis(lay, SHS__J_OBJ) && (rc = check_layout(x, t, lay, frag)) < 0)
        goto done;
    for (size_t k = 0; k < shs__jsize(ch); k++)
        if ((rc = read_chunk(x, t, frag, nslices, k, shs__jat(D, ch, k))) < 0)
            goto done;
    if (!t->c && !(t->c = shs__calloc(1, sizeof *t->c)))
        OOM();
    /* slices missing, or (whatever the ids) overlapping: named here */
    rc = shs__meta_check_tiling(t, x->path);
done:
    return rc;
}

static int cmp_mtensor(const void *a, const void *b)
{
    return strcmp(((const shs__mtensor *)a)->name, ((const shs__mtensor *)b)->name);
}

static int cmp_file_idx(const void *a, const void *b, void *ctx)
{
    const shs__mfile *f = ctx;
    return strcmp(f[*(const uint32_t *)a].name, f[*(const uint32_t *)b].name);
}

/* Files in name order (as listed by the tools), chunks renumbered. */
static int sort_files(shs__meta *m)
{
    uint32_t *ord = shs__calloc(m->nf + 1, sizeof *ord), *pos = shs__calloc(m->nf + 1, sizeof *pos);
    shs__mfile *nf = shs__calloc(m->nf + 1, sizeof *nf);
    if (!ord || !pos || !nf) {
        shs__free(ord);
        shs__free(pos);
        shs__free(nf);
        return shs__err(SHS_ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < m->nf; i++)
        ord[i] = i;
    qsort_r(ord, m->nf, sizeof *ord, cmp_file_idx, m->f);
    for (uint32_t i = 0; i < m->nf; i++) {
        nf[i] = m->f[ord[i]];
        pos[ord[i]] = i;
    }
    for (size_t i = 0; i < m->nt; i++)
        for (size_t k = 0; k < m->t[i].nc; k++)
            m->t[i].c[k].file = pos[m->t[i].c[k].file];
    shs__free(m->f);
    m->f = nf;
    shs__free(ord);
    shs__free(pos);
    return SHS_OK;
}

static void set_model_only(shs__meta *m)
{
    m->model_only = 1;
    for (size_t i = 0; i < m->nt; i++)
        if (m->t[i].kind == SHS_KIND_OPTIMIZER)
            m->model_only = 0;
}

int shs__meta_from_ms(shs__meta *m, const char *dir, const char *path, const char *text, size_t len)
{
    int rc = SHS_OK;
    shs__jdoc doc;
    msctx xc;
    msctx *x = &xc;
    memset(&xc, 0, sizeof xc);
    xc.m = m;
    xc.dir = dir;
    xc.path = path;
    xc.d = &doc;
    memset(m, 0, sizeof *m);
    if ((rc = shs__jdoc_parse(&doc, text, len, path)) < 0)
        goto done;
    const shs__jnode *root = shs__jroot(&doc);
    const shs__jnode *sdm = shs__jget(&doc, root, "state_dict_metadata");
    const shs__jnode *sd = shs__jget(&doc, root, "storage_data");
    if (!shs__jis(sdm, SHS__J_OBJ) || !shs__jis(sd, SHS__J_OBJ))
        BAD("%s: MindSpore metadata needs the objects \"state_dict_metadata\" and "
            "\"storage_data\"",
            path);
    m->mindspore = 1;
    m->world_size = 1;
    if (shs__namemap_init(&x->fmap, 64) < 0)
        OOM();
    if ((rc = read_storage(x, sd)) < 0)
        goto done;
    if (!(m->t = shs__calloc(shs__jsize(sdm) + 1, sizeof *m->t)))
        OOM();
    for (const shs__jnode *jt = shs__jfirst(&doc, sdm); jt; jt = shs__jnext(&doc, jt)) {
        const char *name = jt->key;
        if (strlen(name) != jt->key_len)
            BAD("%s: a parameter name holds a NUL byte", path);
        x->cur = m->nt;
        if ((rc = read_param(x, &m->t[m->nt++], name, jt)) < 0)
            goto done;
    }
    for (size_t i = 0; i < x->nk; i++)
        if (!x->k[i].used)
            BAD("%s: storage_data \"%s\" is no chunk of state_dict_metadata", path, x->k[i].text);
    if (!m->f && !(m->f = shs__calloc(1, sizeof *m->f)))
        OOM();
    if ((rc = sort_files(m)) < 0)
        goto done;
    if (m->nt > 1)
        qsort(m->t, m->nt, sizeof *m->t, cmp_mtensor);
    set_model_only(m);
    rc = ms_step(dir, &m->step);
done:
    for (size_t i = 0; i < m->nf && x->fh; i++)
        shs_file_free(x->fh[i]);
    for (size_t i = 0; i < x->nk; i++)
        shs__free(x->k[i].name);
    shs__free(x->k);
    shs__free(x->fh);
    shs__free(x->stamp);
    shs__free(x->stamp_sid);
    shs__namemap_release(&x->fmap);
    shs__jdoc_free(&doc);
    if (rc < 0)
        shs__meta_free(m);
    return rc;
}

#undef OOM
#undef BAD

/* ---- single card: no metadata.json ---------------------------------- */

int shs__meta_ms_single_probe(const char *dir)
{
    char **names = NULL;
    size_t n = 0, ms = 0, other = 0;
    int rc = shs__io_list_dir(&names, &n, dir);
    if (rc == SHS_ENOENT) {
        shs__err_clear();
        return 0;
    }
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n && rc == SHS_OK; i++) {
        if (!shs__is_safetensors_name(names[i]) || shs_file_name_problem(names[i]))
            continue;
        char *fp = shs__path_join(dir, names[i]);
        shs_file *f = NULL;
        shs_open_opts oo = SHS_OPEN_OPTS_INIT;
        oo.flags = SHS_OPEN_NO_MMAP | SHS_OPEN_NO_FOLLOW;
        int r = fp ? shs_file_open(&f, fp, &oo) : SHS_ENOMEM;
        shs__free(fp);
        if (r == SHS_ENOMEM) {
            rc = shs__err(SHS_ENOMEM, "out of memory");
            break;
        }
        /* an unreadable file decides nothing here: reading it later
           names its problem */
        if (r == SHS_OK) {
            const char *v = shs_file_metadata_get(f, "format");
            if (v && strcmp(v, "ms") == 0)
                ms++;
            else
                other++;
        }
        shs_file_free(f);
    }
    shs__io_names_free(names, n);
    shs__err_clear();
    return rc < 0 ? rc : ms > 0 && other == 0;
}

int shs__meta_from_ms_single(shs__meta *m, const char *dir)
{
    int rc = shs__meta_from_plain(m, dir);
    if (rc < 0)
        return rc;
    m->plain = 0;
    m->mindspore = 1;
    m->world_size = 1;
    for (size_t i = 0; i < m->nt; i++)
        m->t[i].kind = is_opt_file(m->f[m->t[i].c[0].file].name) ? SHS_KIND_OPTIMIZER
                                                                 : SHS_KIND_MODEL;
    set_model_only(m);
    if ((rc = ms_step(dir, &m->step)) < 0)
        shs__meta_free(m);
    return rc;
}

/* ---- public --------------------------------------------------------- */

int shs_checkpoint_format(const shs_checkpoint *c)
{
    if (!c)
        return shs__err(SHS_EINVAL, "shs_checkpoint_format: NULL checkpoint");
    return c->m.plain       ? SHS_FORMAT_PLAIN
           : c->m.mindspore ? SHS_FORMAT_MINDSPORE
                            : SHS_FORMAT_SHARDSAFE;
}

const char *shs_format_name(int format)
{
    switch (format) {
    case SHS_FORMAT_SHARDSAFE: return "shardsafe";
    case SHS_FORMAT_PLAIN: return "plain";
    case SHS_FORMAT_MINDSPORE: return "mindspore";
    default: return NULL;
    }
}
