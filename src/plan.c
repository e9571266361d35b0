/*
 * plan.c -- who writes, reads and sends what (see plan.h).
 *
 * Both plans start with the same analysis of a chunk list: validate, group
 * by tensor (counting sort), order each tensor's chunks canonically by box
 * content (radix sort on the offset in the tensor's sweep dimension, full
 * comparison only inside ties that are not replicas), merge identical boxes
 * into "uniques" and check that distinct uniques do not overlap.  Nothing
 * depends on the input order except which of several identical entries is
 * looked at first, and no decision depends on that.
 */
#include "plan.h"
#include "layout.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Small helpers
 * ---------------------------------------------------------------------- */

static unsigned bits_for(uint64_t v) /* bits needed to hold 0..v */
{
    unsigned b = 0;
    while (b < 64 && (v >> b) != 0)
        b++;
    return b;
}

static inline uint64_t box_start(const shs_plan_chunk *c, uint32_t ndim, uint32_t d)
{
    return ndim ? c->box[d] : 0;
}

static inline uint64_t box_len(const shs_plan_chunk *c, uint32_t ndim, uint32_t d)
{
    return ndim ? c->box[ndim + d] : 1;
}

static inline uint64_t box_volume(const uint64_t *shape, uint32_t ndim)
{
    uint64_t v = 1;
    for (uint32_t d = 0; d < ndim; d++)
        v *= shape[d];
    return v;
}

/* Bytes of `numel` elements; overflow excluded by the tensor check. */
static inline uint64_t elem_bytes(const shs_plan_tensor *t, uint64_t numel)
{
    return numel * shs_dtype_bits(t->dtype) / 8;
}

static inline bool box_eq(const uint64_t *a, const uint64_t *b, uint32_t ndim)
{
    return a == b || memcmp(a, b, 2 * (size_t)ndim * sizeof *a) == 0;
}

/* "[o0:e0, o1:e1]" (half-open ranges per dimension) into buf. */
static const char *fmt_box(char *buf, size_t cap, const uint64_t *off,
                           const uint64_t *shape, uint32_t ndim)
{
    size_t n = 0;
    int w = snprintf(buf, cap, "[");
    n = w > 0 ? (size_t)w : 0;
    for (uint32_t d = 0; d < ndim && n < cap; d++) {
        w = snprintf(buf + n, cap - n, "%s%" PRIu64 ":%" PRIu64, d ? ", " : "",
                     off[d], off[d] + shape[d]);
        if (w < 0)
            break;
        n += (size_t)w;
    }
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
    return buf;
}

#define BOXSTR 256

/* LSD radix sort of 64-bit keys, 8 bits per pass; passes whose digit is the
   same for every key are skipped, so small key ranges cost few passes. */
static void radix_u64(uint64_t *a, uint64_t *tmp, size_t n)
{
    size_t i;
    for (i = 1; i < n; i++)
        if (a[i - 1] > a[i])
            break;
    if (i >= n)
        return;
    if (n <= 32) {
        for (i = 1; i < n; i++) {
            uint64_t v = a[i];
            size_t j = i;
            for (; j > 0 && a[j - 1] > v; j--)
                a[j] = a[j - 1];
            a[j] = v;
        }
        return;
    }
    size_t cnt[8][256];
    memset(cnt, 0, sizeof cnt);
    for (i = 0; i < n; i++) {
        uint64_t v = a[i];
        for (int p = 0; p < 8; p++)
            cnt[p][(v >> (8 * p)) & 0xff]++;
    }
    uint64_t *src = a, *dst = tmp;
    for (int p = 0; p < 8; p++) {
        if (cnt[p][(a[0] >> (8 * p)) & 0xff] == n)
            continue;
        size_t sum = 0;
        for (int b = 0; b < 256; b++) {
            size_t c = cnt[p][b];
            cnt[p][b] = sum;
            sum += c;
        }
        for (i = 0; i < n; i++) {
            uint64_t v = src[i];
            dst[cnt[p][(v >> (8 * p)) & 0xff]++] = v;
        }
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != a)
        memcpy(a, src, n * sizeof *a);
}

/* Stable merge sort of u32 ids with a context comparator. */
typedef int (*cmp_fn)(const void *ctx, uint32_t a, uint32_t b);

static void msort_u32(uint32_t *a, uint32_t *tmp, size_t n, cmp_fn cmp,
                      const void *ctx)
{
    if (n <= 16) {
        for (size_t i = 1; i < n; i++) {
            uint32_t v = a[i];
            size_t j = i;
            for (; j > 0 && cmp(ctx, a[j - 1], v) > 0; j--)
                a[j] = a[j - 1];
            a[j] = v;
        }
        return;
    }
    size_t h = n / 2;
    msort_u32(a, tmp, h, cmp, ctx);
    msort_u32(a + h, tmp, n - h, cmp, ctx);
    if (cmp(ctx, a[h - 1], a[h]) <= 0)
        return;
    memcpy(tmp, a, h * sizeof *a);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        a[k++] = cmp(ctx, a[j], tmp[i]) < 0 ? a[j++] : tmp[i++];
    while (i < h)
        a[k++] = tmp[i++];
}

/* Canonical box order of one tensor: sweep dimension first, then the other
   offsets, then the shapes. */
typedef struct box_cmp_ctx {
    const uint64_t *const *boxes;
    uint32_t ndim, ds;
} box_cmp_ctx;

static int cmp_box(const void *vctx, uint32_t ia, uint32_t ib)
{
    const box_cmp_ctx *c = vctx;
    const uint64_t *a = c->boxes[ia], *b = c->boxes[ib];
    uint32_t nd = c->ndim;
    if (nd == 0 || a == b)
        return 0;
    if (a[c->ds] != b[c->ds])
        return a[c->ds] < b[c->ds] ? -1 : 1;
    for (uint32_t d = 0; d < 2 * nd; d++)
        if (a[d] != b[d])
            return a[d] < b[d] ? -1 : 1;
    return 0;
}

/* ------------------------------------------------------------------------
 * Validation
 * ---------------------------------------------------------------------- */

static int check_tensors(const shs_plan_tensor *tensors, uint32_t nt)
{
    if (nt && !tensors)
        return shs__err(SHS_EINVAL, "plan: tensors is NULL");
    for (uint32_t t = 0; t < nt; t++) {
        const shs_plan_tensor *T = &tensors[t];
        uint64_t numel = 1, nb;
        if (T->ndim > SHS_PLAN_MAX_NDIM)
            return shs__err(SHS_EINVAL, "plan: tensor %" PRIu32 " has %" PRIu32
                            " dimensions (at most %d)", t, T->ndim, SHS_PLAN_MAX_NDIM);
        if (T->ndim && !T->shape)
            return shs__err(SHS_EINVAL, "plan: tensor %" PRIu32 " has no shape", t);
        if (shs_dtype_bits(T->dtype) == 0)
            return shs__err(SHS_EINVAL, "plan: tensor %" PRIu32 " has invalid dtype %d",
                            t, (int)T->dtype);
        for (uint32_t d = 0; d < T->ndim; d++)
            if (shs__mul_u64(numel, T->shape[d], &numel))
                return shs__err(SHS_EOVERFLOW, "plan: tensor %" PRIu32
                                " has more than 2^64 elements", t);
        int rc = shs__nbytes_from_numel(&nb, T->dtype, numel);
        if (rc < 0) {
            char p[64];
            snprintf(p, sizeof p, "plan: tensor %" PRIu32, t);
            return shs__err_prefix(rc, p);
        }
    }
    return SHS_OK;
}

/* One chunk: tensor id, rank (when nranks != 0), box inside the tensor,
   whole bytes. */
static int check_chunk(const shs_plan_tensor *tensors, uint32_t nt,
                       const shs_plan_chunk *c, size_t i, uint32_t nranks,
                       const char *what)
{
    if (c->tensor >= nt)
        return shs__err(SHS_EINVAL, "plan: %s %zu: tensor id %" PRIu32
                        " out of range (%" PRIu32 " tensors)", what, i, c->tensor, nt);
    if (nranks && c->rank >= nranks)
        return shs__err(SHS_EINVAL, "plan: %s %zu (tensor %" PRIu32 "): rank %" PRIu32
                        " out of range (%" PRIu32 " ranks)", what, i, c->tensor,
                        c->rank, nranks);
    const shs_plan_tensor *T = &tensors[c->tensor];
    if (T->ndim == 0)
        return SHS_OK;
    if (!c->box)
        return shs__err(SHS_EINVAL, "plan: %s %zu (tensor %" PRIu32 "): box is NULL",
                        what, i, c->tensor);
    uint64_t vol = 1;
    for (uint32_t d = 0; d < T->ndim; d++) {
        uint64_t end;
        if (shs__add_u64(c->box[d], c->box[T->ndim + d], &end) || end > T->shape[d]) {
            char b[BOXSTR], s[BOXSTR];
            uint64_t zero[SHS_PLAN_MAX_NDIM] = { 0 };
            return shs__err(SHS_EINVAL, "plan: %s %zu: box %s of rank %" PRIu32
                            " is outside tensor %" PRIu32 " %s", what, i,
                            fmt_box(b, sizeof b, c->box, c->box + T->ndim, T->ndim),
                            c->rank, c->tensor,
                            fmt_box(s, sizeof s, zero, T->shape, T->ndim));
        }
        vol *= c->box[T->ndim + d];
    }
    if (vol * shs_dtype_bits(T->dtype) % 8 != 0)
        return shs__err(SHS_EINVAL, "plan: %s %zu (tensor %" PRIu32 "): box is not a "
                        "whole number of bytes", what, i, c->tensor);
    return SHS_OK;
}

/* ------------------------------------------------------------------------
 * Analysis shared by both plans
 * ---------------------------------------------------------------------- */

typedef struct analysis {
    const shs_plan_tensor *tensors;
    uint32_t nt;
    const shs_plan_chunk *chunks;
    size_t n;
    uint32_t *ord;     /* [n] chunk ids grouped by tensor, canonical order */
    uint32_t *ustart;  /* [nu + 1] position in ord where each unique starts */
    uint32_t *tu;      /* [nt + 1] first unique of each tensor */
    uint32_t *ds;      /* [nt] sweep dimension of each tensor */
    uint64_t *ubytes;  /* [nu] bytes of each unique */
    size_t nu;
} analysis;

static void analysis_release(analysis *a)
{
    shs__free(a->ord);
    shs__free(a->ustart);
    shs__free(a->tu);
    shs__free(a->ds);
    shs__free(a->ubytes);
    memset(a, 0, sizeof *a);
}

static inline uint32_t urep(const analysis *a, size_t u)
{
    return a->ord[a->ustart[u]];
}

/* Validate, group and order `chunks`; merge identical boxes.  With
   nranks != 0 ranks are checked and one rank holding a box twice is an
   error (save side). */
static int analyze(analysis *a, const shs_plan_tensor *tensors, uint32_t nt,
                   const shs_plan_chunk *chunks, size_t n, uint32_t nranks,
                   const char *what)
{
    int rc = SHS_OK;
    size_t *tstart = NULL, *nzbase = NULL;
    uint64_t *nz = NULL, *keys = NULL, *ktmp = NULL;
    uint32_t *seg = NULL, *mtmp = NULL, *stamp = NULL, *perm = NULL, *lrank = NULL;
    uint64_t *lkey = NULL;
    const uint64_t **lbox = NULL;
    size_t maxm = 0, sumdim = 0;

    memset(a, 0, sizeof *a);
    a->tensors = tensors;
    a->nt = nt;
    a->chunks = chunks;
    a->n = n;
    if ((rc = check_tensors(tensors, nt)) < 0)
        return rc;
    if (n && !chunks)
        return shs__err(SHS_EINVAL, "plan: %s list is NULL", what);
    if (n >= UINT32_MAX - 1 || nt == UINT32_MAX)
        return shs__err(SHS_EUNSUPPORTED, "plan: %zu %ss (at most 2^32-2)", n, what);

    tstart = shs__calloc((size_t)nt + 1, sizeof *tstart);
    nzbase = shs__calloc((size_t)nt + 1, sizeof *nzbase);
    a->ds = shs__calloc((size_t)nt + 1, sizeof *a->ds);
    a->tu = shs__calloc((size_t)nt + 1, sizeof *a->tu);
    a->ord = shs__malloc((n ? n : 1) * sizeof *a->ord);
    a->ustart = shs__malloc((n + 1) * sizeof *a->ustart);
    a->ubytes = shs__malloc((n ? n : 1) * sizeof *a->ubytes);
    if (!tstart || !nzbase || !a->ds || !a->tu || !a->ord || !a->ustart || !a->ubytes)
        goto nomem;
    for (uint32_t t = 0; t < nt; t++) {
        nzbase[t] = sumdim;
        sumdim += tensors[t].ndim;
    }
    nzbase[nt] = sumdim;
    if (!(nz = shs__calloc(sumdim ? sumdim : 1, sizeof *nz)))
        goto nomem;

    /* Pass 1: validate, count per tensor, count nonzero offsets per dim. */
    for (size_t i = 0; i < n; i++) {
        const shs_plan_chunk *c = &chunks[i];
        if ((rc = check_chunk(tensors, nt, c, i, nranks, what)) < 0)
            goto done;
        tstart[c->tensor + 1]++;
        uint32_t nd = tensors[c->tensor].ndim;
        uint64_t *z = nz + nzbase[c->tensor];
        for (uint32_t d = 0; d < nd; d++)
            z[d] += c->box[d] != 0;
    }
    for (uint32_t t = 0; t < nt; t++) {
        size_t m = tstart[t + 1];
        if (m > maxm)
            maxm = m;
        tstart[t + 1] += tstart[t];
        /* Sweep along the dimension with the most split points: in a grid,
           ties in that dimension are then as few as possible. */
        uint32_t best = 0;
        for (uint32_t d = 1; d < tensors[t].ndim; d++)
            if (nz[nzbase[t] + d] > nz[nzbase[t] + best])
                best = d;
        a->ds[t] = best;
    }
    {
        /* counting sort by tensor (stable) */
        size_t *pos = nzbase; /* reuse: nzbase no longer needed */
        memcpy(pos, tstart, ((size_t)nt + 1) * sizeof *pos);
        for (size_t i = 0; i < n; i++)
            a->ord[pos[chunks[i].tensor]++] = (uint32_t)i;
    }

    keys = shs__malloc((maxm ? maxm : 1) * sizeof *keys);
    ktmp = shs__malloc((maxm ? maxm : 1) * sizeof *ktmp);
    seg = shs__malloc((maxm ? maxm : 1) * sizeof *seg);
    mtmp = shs__malloc((maxm ? maxm : 1) * sizeof *mtmp);
    perm = shs__malloc((maxm ? maxm : 1) * sizeof *perm);
    lrank = shs__malloc((maxm ? maxm : 1) * sizeof *lrank);
    lkey = shs__malloc((maxm ? maxm : 1) * sizeof *lkey);
    lbox = shs__malloc((maxm ? maxm : 1) * sizeof *lbox);
    if (!keys || !ktmp || !seg || !mtmp || !perm || !lrank || !lkey || !lbox)
        goto nomem;
    if (nranks && !(stamp = shs__calloc(nranks, sizeof *stamp)))
        goto nomem;

    size_t nu = 0;
    for (uint32_t t = 0; t < nt; t++) {
        uint32_t *o = a->ord + tstart[t];
        size_t m = tstart[t + 1] - tstart[t];
        uint32_t nd = tensors[t].ndim, ds = a->ds[t];
        a->tu[t] = (uint32_t)nu;
        if (m == 0)
            continue;

        /* One pass over the (scattered) chunks of this tensor; everything
           after works on these contiguous local copies. */
        uint64_t maxkey = 0;
        for (size_t i = 0; i < m; i++) {
            const shs_plan_chunk *c = &chunks[o[i]];
            lbox[i] = c->box;
            lrank[i] = c->rank;
            lkey[i] = nd ? c->box[ds] : 0;
            if (lkey[i] > maxkey)
                maxkey = lkey[i];
        }
        box_cmp_ctx cc = { lbox, nd, ds };
        /* Order by start in the sweep dimension: radix on (start, local
           index) packed in 64 bits when it fits. */
        unsigned lb = bits_for(m - 1);
        if (lb < 64 && (lb == 0 || (maxkey >> (64 - lb)) == 0)) {
            for (size_t i = 0; i < m; i++)
                keys[i] = (lkey[i] << lb) | i;
            radix_u64(keys, ktmp, m);
            uint64_t mask = lb ? (UINT64_MAX >> (64 - lb)) : 0;
            for (size_t i = 0; i < m; i++)
                perm[i] = (uint32_t)(keys[i] & mask);
            /* inside ties of the sweep start, replicas need no sorting */
            for (size_t g = 0; g < m;) {
                uint64_t k0 = lkey[perm[g]];
                size_t e = g + 1;
                bool same = true;
                for (; e < m && lkey[perm[e]] == k0; e++)
                    if (same && !box_eq(lbox[perm[g]], lbox[perm[e]], nd))
                        same = false;
                if (!same)
                    msort_u32(perm + g, mtmp, e - g, cmp_box, &cc);
                g = e;
            }
        } else {
            for (size_t i = 0; i < m; i++)
                perm[i] = (uint32_t)i;
            msort_u32(perm, mtmp, m, cmp_box, &cc);
        }
        memcpy(seg, o, m * sizeof *o);
        for (size_t i = 0; i < m; i++)
            o[i] = seg[perm[i]];

        /* Merge identical boxes into uniques. */
        size_t u0 = nu;
        uint64_t bits = shs_dtype_bits(tensors[t].dtype);
        for (size_t i = 0; i < m; i++) {
            const uint64_t *box = lbox[perm[i]];
            uint32_t rank = lrank[perm[i]];
            if (i == 0 || (nd && !box_eq(lbox[perm[i - 1]], box, nd))) {
                a->ubytes[nu] = (nd ? box_volume(box + nd, nd) : 1) * bits / 8;
                a->ustart[nu++] = (uint32_t)(tstart[t] + i);
            }
            if (stamp) {
                if (stamp[rank] == nu) {
                    char b[BOXSTR];
                    rc = shs__err(SHS_EINVAL, "plan: tensor %" PRIu32 ": rank %" PRIu32
                                  " holds box %s twice", t, rank,
                                  fmt_box(b, sizeof b, box, box + nd, nd));
                    goto done;
                }
                stamp[rank] = (uint32_t)nu;
            }
        }

        /* Distinct uniques must not overlap.  In sweep order only the ones
           that start before this one ends can. */
        uint64_t io[SHS_PLAN_MAX_NDIM], is[SHS_PLAN_MAX_NDIM];
        for (size_t u = u0; u < nu && nd; u++) {
            const shs_plan_chunk *A = &chunks[urep(a, u)];
            uint64_t end = A->box[ds] + A->box[nd + ds];
            for (size_t v = u + 1; v < nu; v++) {
                const shs_plan_chunk *B = &chunks[urep(a, v)];
                if (B->box[ds] >= end)
                    break;
                if (shs__box_intersect(nd, A->box, A->box + nd, B->box, B->box + nd,
                                       io, is)) {
                    char b1[BOXSTR], b2[BOXSTR];
                    rc = shs__err(SHS_EINVAL, "plan: tensor %" PRIu32 ": %s of rank %"
                                  PRIu32 " %s and of rank %" PRIu32 " %s overlap but "
                                  "are not identical", t, what, A->rank,
                                  fmt_box(b1, sizeof b1, A->box, A->box + nd, nd),
                                  B->rank, fmt_box(b2, sizeof b2, B->box, B->box + nd, nd));
                    goto done;
                }
            }
        }
    }
    a->tu[nt] = (uint32_t)nu;
    a->ustart[nu] = (uint32_t)n;
    a->nu = nu;
    if (nu < n) { /* give back what the uniques did not use */
        uint32_t *us = shs__realloc(a->ustart, (nu + 1) * sizeof *us);
        uint64_t *ub = shs__realloc(a->ubytes, (nu ? nu : 1) * sizeof *ub);
        if (us)
            a->ustart = us;
        if (ub)
            a->ubytes = ub;
    }
    goto done;

nomem:
    rc = shs__err(SHS_ENOMEM, "plan: out of memory analysing %zu %ss", n, what);
done:
    shs__free(tstart);
    shs__free(nzbase);
    shs__free(nz);
    shs__free(keys);
    shs__free(ktmp);
    shs__free(seg);
    shs__free(mtmp);
    shs__free(stamp);
    shs__free(perm);
    shs__free(lrank);
    shs__free(lkey);
    shs__free(lbox);
    if (rc < 0)
        analysis_release(a);
    return rc;
}

static inline uint64_t unique_bytes(const analysis *a, size_t u)
{
    return a->ubytes[u];
}

/* Order `ids` (unique ids, ascending) by decreasing bytes, ties kept in id
   order (= tensor, then box order). */
typedef struct size_cmp_ctx {
    const analysis *a;
} size_cmp_ctx;

static int cmp_size_desc(const void *vctx, uint32_t x, uint32_t y)
{
    const analysis *a = ((const size_cmp_ctx *)vctx)->a;
    uint64_t bx = unique_bytes(a, x), by = unique_bytes(a, y);
    if (bx != by)
        return bx > by ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int order_by_size(uint32_t *ids, size_t k, const analysis *a)
{
    uint64_t maxb = 0;
    for (size_t i = 0; i < k; i++) {
        uint64_t b = unique_bytes(a, ids[i]);
        if (b > maxb)
            maxb = b;
    }
    unsigned ib = bits_for(a->nu ? a->nu - 1 : 0);
    if (k < 2)
        return SHS_OK;
    if (ib < 64 && (ib == 0 || (maxb >> (64 - ib)) == 0)) {
        uint64_t *keys = shs__malloc(k * sizeof *keys);
        uint64_t *tmp = shs__malloc(k * sizeof *tmp);
        if (!keys || !tmp) {
            shs__free(keys);
            shs__free(tmp);
            return shs__err(SHS_ENOMEM, "plan: out of memory ordering %zu chunks", k);
        }
        for (size_t i = 0; i < k; i++)
            keys[i] = ((maxb - unique_bytes(a, ids[i])) << ib) | ids[i];
        radix_u64(keys, tmp, k);
        uint64_t mask = ib ? (UINT64_MAX >> (64 - ib)) : 0;
        for (size_t i = 0; i < k; i++)
            ids[i] = (uint32_t)(keys[i] & mask);
        shs__free(keys);
        shs__free(tmp);
        return SHS_OK;
    }
    uint32_t *tmp = shs__malloc(k * sizeof *tmp);
    if (!tmp)
        return shs__err(SHS_ENOMEM, "plan: out of memory ordering %zu chunks", k);
    size_cmp_ctx c = { a };
    msort_u32(ids, tmp, k, cmp_size_desc, &c);
    shs__free(tmp);
    return SHS_OK;
}

static double max_over_mean(const uint64_t *v, uint32_t n)
{
    uint64_t mx = 0;
    double sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        sum += (double)v[i];
        if (v[i] > mx)
            mx = v[i];
    }
    return sum > 0 ? (double)mx * n / sum : 1.0;
}

/* ------------------------------------------------------------------------
 * Save plan
 * ---------------------------------------------------------------------- */

void shs__save_plan_release(shs__save_plan *p)
{
    if (!p)
        return;
    shs__free(p->write);
    shs__free(p->rank_bytes);
    memset(p, 0, sizeof *p);
}

int shs__plan_save(shs__save_plan *out, const shs_plan_tensor *tensors,
                   uint32_t ntensors, const shs_plan_chunk *chunks,
                   size_t nchunks, uint32_t nranks, bool remove_redundancy)
{
    analysis a;
    uint32_t *ids = NULL;
    int rc;

    memset(out, 0, sizeof *out);
    if (nranks == 0)
        return shs__err(SHS_EINVAL, "plan: save with 0 ranks");
    if ((rc = analyze(&a, tensors, ntensors, chunks, nchunks, nranks, "chunk")) < 0)
        return rc;
    out->nchunks = nchunks;
    out->nranks = nranks;
    out->nunique = a.nu;
    out->first_incomplete = UINT32_MAX;
    out->write = shs__calloc(nchunks ? nchunks : 1, 1);
    out->rank_bytes = shs__calloc(nranks, sizeof *out->rank_bytes);
    if (!out->write || !out->rank_bytes)
        goto nomem;

    for (uint32_t t = 0; t < ntensors; t++) {
        const shs_plan_tensor *T = &tensors[t];
        uint64_t vol = 0;
        for (size_t u = a.tu[t]; u < a.tu[t + 1]; u++) {
            uint64_t nb = unique_bytes(&a, u);
            out->unique_bytes += nb;
            out->total_bytes += nb * (a.ustart[u + 1] - a.ustart[u]);
            vol += nb * 8 / shs_dtype_bits(T->dtype); /* = element count */
        }
        if (out->first_incomplete == UINT32_MAX && vol != box_volume(T->shape, T->ndim))
            out->first_incomplete = t;
    }

    if (!remove_redundancy) {
        for (size_t u = 0; u < a.nu; u++) {
            uint64_t nb = unique_bytes(&a, u);
            for (size_t p = a.ustart[u]; p < a.ustart[u + 1]; p++) {
                out->write[a.ord[p]] = 1;
                out->rank_bytes[chunks[a.ord[p]].rank] += nb;
            }
        }
    } else {
        if (!(ids = shs__malloc((a.nu ? a.nu : 1) * sizeof *ids)))
            goto nomem;
        for (size_t u = 0; u < a.nu; u++)
            ids[u] = (uint32_t)u;
        if ((rc = order_by_size(ids, a.nu, &a)) < 0)
            goto done;
        uint64_t *load = out->rank_bytes;
        for (size_t k = 0; k < a.nu; k++) {
            uint32_t u = ids[k];
            uint64_t nb = unique_bytes(&a, u);
            uint32_t best = a.ord[a.ustart[u]];
            for (size_t p = a.ustart[u] + 1; p < a.ustart[u + 1]; p++) {
                uint32_t c = a.ord[p];
                uint32_t r = chunks[c].rank, br = chunks[best].rank;
                if (load[r] < load[br] || (load[r] == load[br] && r < br))
                    best = c;
            }
            out->write[best] = 1;
            load[chunks[best].rank] += nb;
        }
    }
    for (uint32_t r = 0; r < nranks; r++)
        out->written_bytes += out->rank_bytes[r];
    out->max_over_mean = max_over_mean(out->rank_bytes, nranks);
    rc = SHS_OK;
    goto done;

nomem:
    rc = shs__err(SHS_ENOMEM, "plan: out of memory planning a save of %zu chunks",
                  nchunks);
done:
    shs__free(ids);
    analysis_release(&a);
    if (rc < 0)
        shs__save_plan_release(out);
    return rc;
}

int shs__plan_covers(uint32_t *out_tensor, const shs_plan_tensor *tensors,
                     uint32_t ntensors, const shs_plan_chunk *chunks,
                     size_t nchunks, uint32_t nranks)
{
    shs__save_plan p;
    int rc = shs__plan_save(&p, tensors, ntensors, chunks, nchunks, nranks, false);
    if (out_tensor)
        *out_tensor = UINT32_MAX;
    if (rc < 0)
        return rc;
    uint32_t t = p.first_incomplete;
    shs__save_plan_release(&p);
    if (out_tensor)
        *out_tensor = t;
    if (t == UINT32_MAX)
        return 1;
    shs__err(SHS_EINVAL, "plan: the chunks do not cover tensor %" PRIu32 " completely", t);
    return 0;
}

/* ------------------------------------------------------------------------
 * Load plan
 * ---------------------------------------------------------------------- */

void shs__load_plan_release(shs__load_plan *p)
{
    if (!p)
        return;
    shs__free(p->items);
    shs__free(p->item_start);
    shs__free(p->reads);
    shs__free(p->read_start);
    shs__free(p->sends);
    shs__free(p->send_start);
    shs__free(p->rank_read_bytes);
    memset(p, 0, sizeof *p);
}

uint64_t shs__load_item_box(const shs__load_plan *plan, const shs__load_item *it,
                            uint64_t *off, uint64_t *shape)
{
    const shs_plan_chunk *s = &plan->saved[it->chunk], *q = &plan->requests[it->req];
    const shs_plan_tensor *T = &plan->tensors[q->tensor];
    if (T->ndim == 0)
        return elem_bytes(T, 1);
    if (!shs__box_intersect(T->ndim, s->box, s->box + T->ndim, q->box, q->box + T->ndim,
                            off, shape))
        return 0;
    return elem_bytes(T, box_volume(shape, T->ndim));
}

typedef struct req_cmp_ctx {
    const shs_plan_chunk *req;
    const shs_plan_tensor *tensors;
} req_cmp_ctx;

/* Requests of one (rank, tensor) group, by box. */
static int cmp_req_box(const void *vctx, uint32_t x, uint32_t y)
{
    const req_cmp_ctx *c = vctx;
    uint32_t nd = c->tensors[c->req[x].tensor].ndim;
    const uint64_t *a = c->req[x].box, *b = c->req[y].box;
    for (uint32_t d = 0; d < 2 * nd; d++)
        if (a[d] != b[d])
            return a[d] < b[d] ? -1 : 1;
    return 0;
}

int shs__plan_load(shs__load_plan *out, const shs_plan_tensor *tensors,
                   uint32_t ntensors, const shs_plan_chunk *saved,
                   size_t nsaved, const shs_plan_chunk *requests,
                   size_t nrequests, uint32_t nranks, bool load_balanced)
{
    analysis a;
    int rc;
    uint32_t *rord = NULL, *rtmp = NULL, *cnt32 = NULL, *by_u = NULL, *needed = NULL;
    uint32_t *reader = NULL;
    size_t *pos = NULL;
    uint64_t *ukey = NULL, *maxlen = NULL;
    size_t cap = 0;

    memset(out, 0, sizeof *out);
    if (nranks == 0)
        return shs__err(SHS_EINVAL, "plan: load with 0 ranks");
    if ((rc = analyze(&a, tensors, ntensors, saved, nsaved, 0, "saved chunk")) < 0)
        return rc;
    out->tensors = tensors;
    out->saved = saved;
    out->requests = requests;
    out->nranks = nranks;
    out->load_balanced = load_balanced;
    if (nrequests && !requests) {
        rc = shs__err(SHS_EINVAL, "plan: request list is NULL");
        goto done;
    }
    if (nrequests >= UINT32_MAX - 1) {
        rc = shs__err(SHS_EUNSUPPORTED, "plan: %zu requests (at most 2^32-2)", nrequests);
        goto done;
    }
    for (size_t i = 0; i < nrequests; i++)
        if ((rc = check_chunk(tensors, ntensors, &requests[i], i, nranks, "request")) < 0)
            goto done;

    out->item_start = shs__calloc((size_t)nranks + 1, sizeof *out->item_start);
    out->read_start = shs__calloc((size_t)nranks + 1, sizeof *out->read_start);
    out->send_start = shs__calloc((size_t)nranks + 1, sizeof *out->send_start);
    out->rank_read_bytes = shs__calloc(nranks, sizeof *out->rank_read_bytes);
    pos = shs__calloc((size_t)(nranks > ntensors ? nranks : ntensors) + 1, sizeof *pos);
    rord = shs__malloc((nrequests ? nrequests : 1) * sizeof *rord);
    rtmp = shs__malloc((nrequests ? nrequests : 1) * sizeof *rtmp);
    ukey = shs__malloc((a.nu ? a.nu : 1) * sizeof *ukey);
    maxlen = shs__calloc((size_t)ntensors + 1, sizeof *maxlen);
    if (!out->item_start || !out->read_start || !out->send_start ||
        !out->rank_read_bytes || !pos || !rord || !rtmp || !ukey || !maxlen)
        goto nomem;

    /* Requests in (rank, tensor, box) order: counting sort by tensor, then
       stable counting sort by rank, then boxes inside each group. */
    memset(pos, 0, ((size_t)ntensors + 1) * sizeof *pos);
    for (size_t i = 0; i < nrequests; i++)
        pos[requests[i].tensor + 1]++;
    for (uint32_t t = 0; t < ntensors; t++)
        pos[t + 1] += pos[t];
    for (size_t i = 0; i < nrequests; i++)
        rtmp[pos[requests[i].tensor]++] = (uint32_t)i;
    memset(pos, 0, ((size_t)nranks + 1) * sizeof *pos);
    for (size_t i = 0; i < nrequests; i++)
        pos[requests[i].rank + 1]++;
    for (uint32_t r = 0; r < nranks; r++)
        pos[r + 1] += pos[r];
    for (size_t i = 0; i < nrequests; i++)
        rord[pos[requests[rtmp[i]].rank]++] = rtmp[i];
    {
        req_cmp_ctx rc_ctx = { requests, tensors };
        for (size_t g = 0; g < nrequests;) {
            const shs_plan_chunk *q = &requests[rord[g]];
            size_t e = g + 1;
            while (e < nrequests && requests[rord[e]].rank == q->rank &&
                   requests[rord[e]].tensor == q->tensor)
                e++;
            if (e - g > 1)
                msort_u32(rord + g, rtmp, e - g, cmp_req_box, &rc_ctx);
            g = e;
        }
    }
    shs__free(rtmp);
    rtmp = NULL;

    /* Sweep keys of the saved uniques (ascending within each tensor). */
    for (uint32_t t = 0; t < ntensors; t++) {
        uint32_t nd = tensors[t].ndim, ds = a.ds[t];
        for (size_t u = a.tu[t]; u < a.tu[t + 1]; u++) {
            const shs_plan_chunk *c = &saved[urep(&a, u)];
            ukey[u] = box_start(c, nd, ds);
            if (box_len(c, nd, ds) > maxlen[t])
                maxlen[t] = box_len(c, nd, ds);
        }
    }

    /* Intersections, request by request. */
    cap = nrequests + nrequests / 2 + 16;
    if (!(out->items = shs__malloc(cap * sizeof *out->items)))
        goto nomem;
    for (size_t k = 0; k < nrequests; k++) {
        uint32_t qi = rord[k];
        const shs_plan_chunk *q = &requests[qi];
        const shs_plan_tensor *T = &tensors[q->tensor];
        uint32_t nd = T->ndim, ds = a.ds[q->tensor];
        uint64_t qs = box_start(q, nd, ds), qe = qs + box_len(q, nd, ds);
        uint64_t want = nd ? box_volume(q->box + nd, nd) : 1, got = 0;
        uint64_t io[SHS_PLAN_MAX_NDIM], is[SHS_PLAN_MAX_NDIM];
        if (want == 0)
            continue;
        /* first unique whose start could reach qs */
        uint64_t lo = qs >= maxlen[q->tensor] ? qs - maxlen[q->tensor] + 1 : 0;
        size_t l = a.tu[q->tensor], h = a.tu[q->tensor + 1];
        while (l < h) {
            size_t mid = l + (h - l) / 2;
            if (ukey[mid] < lo)
                l = mid + 1;
            else
                h = mid;
        }
        for (size_t u = l; u < a.tu[q->tensor + 1] && ukey[u] < qe; u++) {
            const shs_plan_chunk *s = &saved[urep(&a, u)];
            uint64_t vol = 1;
            if (nd) {
                if (!shs__box_intersect(nd, s->box, s->box + nd, q->box, q->box + nd,
                                        io, is))
                    continue;
                vol = box_volume(is, nd);
            }
            if (out->nitems == cap) {
                size_t ncap = cap + cap / 2;
                shs__load_item *ni = shs__realloc(out->items, ncap * sizeof *ni);
                if (!ni)
                    goto nomem;
                out->items = ni;
                cap = ncap;
            }
            if (out->nitems >= UINT32_MAX - 1) {
                rc = shs__err(SHS_EUNSUPPORTED, "plan: more than 2^32-2 intersections");
                goto done;
            }
            /* src holds the unique id until the readers are chosen */
            out->items[out->nitems++] = (shs__load_item){ urep(&a, u), qi, (uint32_t)u };
            got += vol;
            if (!load_balanced)
                out->rank_read_bytes[q->rank] += elem_bytes(T, vol);
        }
        if (got != want) {
            char b[BOXSTR];
            rc = shs__err(SHS_EINVAL, "plan: tensor %" PRIu32 ": box %s requested by rank %"
                          PRIu32 " is not covered by the saved chunks (%" PRIu64 " of %"
                          PRIu64 " elements covered)", q->tensor,
                          fmt_box(b, sizeof b, q->box, q->box + nd, nd), q->rank, got, want);
            goto done;
        }
        out->item_start[q->rank + 1] = out->nitems;
    }
    for (uint32_t r = 0; r < nranks; r++)
        if (out->item_start[r + 1] < out->item_start[r])
            out->item_start[r + 1] = out->item_start[r];
    shs__free(rord);
    rord = NULL;
    shs__free(ukey);
    ukey = NULL;

    /* Items grouped by saved unique. */
    size_t ni = out->nitems;
    if (!(cnt32 = shs__calloc(a.nu + 1, sizeof *cnt32)))
        goto nomem;
    for (size_t i = 0; i < ni; i++)
        cnt32[out->items[i].src + 1]++;
    size_t nneeded = 0;
    for (size_t u = 0; u < a.nu; u++) {
        if (cnt32[u + 1]) {
            nneeded++;
            out->needed_bytes += unique_bytes(&a, u);
        }
        cnt32[u + 1] += cnt32[u];
    }

    if (!load_balanced) {
        for (size_t i = 0; i < ni; i++)
            out->items[i].src = requests[out->items[i].req].rank;
    } else {
        by_u = shs__malloc((ni ? ni : 1) * sizeof *by_u);
        needed = shs__malloc((nneeded ? nneeded : 1) * sizeof *needed);
        reader = shs__malloc((a.nu ? a.nu : 1) * sizeof *reader);
        if (!by_u || !needed || !reader)
            goto nomem;
        for (size_t i = 0; i < ni; i++)
            by_u[cnt32[out->items[i].src]++] = (uint32_t)i;
        /* cnt32[u] is now the end of u's group (= start of u + 1) */
        size_t k = 0;
        for (size_t u = 0; u < a.nu; u++) {
            reader[u] = UINT32_MAX;
            if (cnt32[u] != (u ? cnt32[u - 1] : 0))
                needed[k++] = (uint32_t)u;
        }
        if ((rc = order_by_size(needed, nneeded, &a)) < 0)
            goto done;
        uint64_t *load = out->rank_read_bytes;
        for (k = 0; k < nneeded; k++) {
            uint32_t u = needed[k];
            size_t b = u ? cnt32[u - 1] : 0, e = cnt32[u];
            uint32_t best = requests[out->items[by_u[b]].req].rank;
            for (size_t p = b + 1; p < e; p++) {
                uint32_t r = requests[out->items[by_u[p]].req].rank;
                if (load[r] < load[best] || (load[r] == load[best] && r < best))
                    best = r;
            }
            reader[u] = best;
            load[best] += unique_bytes(&a, u);
            out->nreads++;
        }
        for (size_t i = 0; i < ni; i++) {
            shs__load_item *it = &out->items[i];
            it->src = reader[it->src];
            if (it->src != requests[it->req].rank)
                out->nsends++;
        }
        shs__free(by_u);
        by_u = NULL;
        shs__free(needed);
        needed = NULL;

        /* reads per reader, in unique (tensor, box) order */
        out->reads = shs__malloc((out->nreads ? out->nreads : 1) * sizeof *out->reads);
        out->sends = shs__malloc((out->nsends ? out->nsends : 1) * sizeof *out->sends);
        if (!out->reads || !out->sends)
            goto nomem;
        for (size_t u = 0; u < a.nu; u++)
            if (reader[u] != UINT32_MAX)
                out->read_start[reader[u] + 1]++;
        for (uint32_t r = 0; r < nranks; r++)
            out->read_start[r + 1] += out->read_start[r];
        memcpy(pos, out->read_start, ((size_t)nranks + 1) * sizeof *pos);
        for (size_t u = 0; u < a.nu; u++)
            if (reader[u] != UINT32_MAX)
                out->reads[pos[reader[u]]++] = urep(&a, u);

        /* sends per source, in item order (= destination rank order) */
        for (size_t i = 0; i < ni; i++) {
            const shs__load_item *it = &out->items[i];
            if (it->src != requests[it->req].rank)
                out->send_start[it->src + 1]++;
        }
        for (uint32_t r = 0; r < nranks; r++)
            out->send_start[r + 1] += out->send_start[r];
        memcpy(pos, out->send_start, ((size_t)nranks + 1) * sizeof *pos);
        for (size_t i = 0; i < ni; i++) {
            const shs__load_item *it = &out->items[i];
            if (it->src != requests[it->req].rank) {
                uint64_t io[SHS_PLAN_MAX_NDIM], is[SHS_PLAN_MAX_NDIM];
                out->sends[pos[it->src]++] = (uint32_t)i;
                out->sent_bytes += shs__load_item_box(out, it, io, is);
            }
        }
    }
    for (uint32_t r = 0; r < nranks; r++)
        out->read_bytes += out->rank_read_bytes[r];
    out->max_over_mean = max_over_mean(out->rank_read_bytes, nranks);
    if (ni && ni < cap) { /* give back the growth slack */
        shs__load_item *shrunk = shs__realloc(out->items, ni * sizeof *shrunk);
        if (shrunk)
            out->items = shrunk;
    }
    rc = SHS_OK;
    goto done;

nomem:
    rc = shs__err(SHS_ENOMEM, "plan: out of memory planning a load of %zu requests",
                  nrequests);
done:
    shs__free(rord);
    shs__free(rtmp);
    shs__free(cnt32);
    shs__free(by_u);
    shs__free(needed);
    shs__free(reader);
    shs__free(pos);
    shs__free(ukey);
    shs__free(maxlen);
    analysis_release(&a);
    if (rc < 0)
        shs__load_plan_release(out);
    return rc;
}
