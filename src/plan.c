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
#include <stdlib.h>
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

/* Greedy placement order of unique ids: by `major` ascending (the number of
   holders for a save, 0 for a load), then bytes descending, then id
   ascending (= tensor, then box order).  Real states have few distinct
   (major, bytes) pairs, so this is a stable counting sort over those
   classes (a small hash table, two passes over the ids, one u32 array);
   with too many distinct pairs it falls back to a merge sort. */
typedef struct order_ctx {
    const analysis *a;
    bool by_holders;
} order_ctx;

static inline uint64_t order_major(const order_ctx *c, uint32_t u)
{
    return c->by_holders ? (uint64_t)(c->a->ustart[u + 1] - c->a->ustart[u]) : 0;
}

static int cmp_order(const void *vctx, uint32_t x, uint32_t y)
{
    const order_ctx *c = vctx;
    uint64_t mx = order_major(c, x), my = order_major(c, y);
    if (mx != my)
        return mx < my ? -1 : 1;
    uint64_t bx = unique_bytes(c->a, x), by = unique_bytes(c->a, y);
    if (bx != by)
        return bx > by ? -1 : 1;
    return x < y ? -1 : x > y;
}

typedef struct oclass {
    uint64_t major, bytes;
    size_t pos;   /* count, then placement cursor */
    uint32_t used;
} oclass;

static int cmp_oclass(const void *x, const void *y)
{
    const oclass *a = *(const oclass *const *)x, *b = *(const oclass *const *)y;
    if (a->major != b->major)
        return a->major < b->major ? -1 : 1;
    if (a->bytes != b->bytes)
        return a->bytes > b->bytes ? -1 : 1;
    return 0;
}

#define ORDER_MAX_CLASSES 65536

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* The unique ids u < a->nu with sel == NULL or sel[u + 1] != 0, in greedy
   order, into a new array *out (count *out_k). */
static int order_uniques(uint32_t **out, size_t *out_k, const analysis *a,
                         const uint32_t *sel, bool by_holders)
{
    order_ctx c = { a, by_holders };
    size_t k = 0;
    for (size_t u = 0; u < a->nu; u++)
        k += !sel || sel[u + 1];
    *out = NULL;
    *out_k = k;
    uint32_t *ids = shs__malloc((k ? k : 1) * sizeof *ids);
    if (!ids)
        return shs__err(SHS_ENOMEM, "plan: out of memory ordering %zu chunks", k);
    size_t cap = 16;
    while (cap < 2 * k && cap < 2 * ORDER_MAX_CLASSES)
        cap *= 2;
    oclass *tab = shs__calloc(cap, sizeof *tab);
    oclass **cls = shs__malloc(cap / 2 * sizeof *cls);
    size_t nc = 0;
    bool fallback = !tab || !cls;
    oclass *last = NULL;
    for (size_t u = 0; u < a->nu && !fallback; u++) {
        if (sel && !sel[u + 1])
            continue;
        uint64_t mj = order_major(&c, (uint32_t)u), nb = unique_bytes(a, u);
        if (!last || last->major != mj || last->bytes != nb) {
            size_t h = mix64(mj * 0x9e3779b97f4a7c15ull ^ nb) & (cap - 1);
            while (tab[h].used && (tab[h].major != mj || tab[h].bytes != nb))
                h = (h + 1) & (cap - 1);
            if (!tab[h].used) {
                if (nc == cap / 2) {
                    fallback = true;
                    break;
                }
                tab[h] = (oclass){ mj, nb, 0, 1 };
                cls[nc++] = &tab[h];
            }
            last = &tab[h];
        }
        last->pos++;
    }
    if (!fallback) {
        qsort(cls, nc, sizeof *cls, cmp_oclass);
        size_t sum = 0;
        for (size_t i = 0; i < nc; i++) {
            size_t n = cls[i]->pos;
            cls[i]->pos = sum;
            sum += n;
        }
        last = NULL;
        for (size_t u = 0; u < a->nu; u++) {
            if (sel && !sel[u + 1])
                continue;
            uint64_t mj = order_major(&c, (uint32_t)u), nb = unique_bytes(a, u);
            if (!last || last->major != mj || last->bytes != nb) {
                size_t h = mix64(mj * 0x9e3779b97f4a7c15ull ^ nb) & (cap - 1);
                while (tab[h].major != mj || tab[h].bytes != nb)
                    h = (h + 1) & (cap - 1);
                last = &tab[h];
            }
            ids[last->pos++] = (uint32_t)u;
        }
    }
    shs__free(tab);
    shs__free(cls);
    if (fallback) {
        size_t j = 0;
        for (size_t u = 0; u < a->nu; u++)
            if (!sel || sel[u + 1])
                ids[j++] = (uint32_t)u;
        uint32_t *tmp = shs__malloc((k ? k : 1) * sizeof *tmp);
        if (!tmp) {
            shs__free(ids);
            return shs__err(SHS_ENOMEM, "plan: out of memory ordering %zu chunks", k);
        }
        msort_u32(ids, tmp, k, cmp_order, &c);
        shs__free(tmp);
    }
    *out = ids;
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
        size_t nids;
        if ((rc = order_uniques(&ids, &nids, &a, NULL, true)) < 0)
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

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)0)
#endif

/* Elements in the intersection of two boxes (offset[nd], shape[nd]); 0 when
   they do not intersect (same rule as shs__box_intersect). */
static inline uint64_t isect_vol(const uint64_t *a, const uint64_t *b, uint32_t nd)
{
    uint64_t v = 1;
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t lo = a[d] > b[d] ? a[d] : b[d];
        uint64_t ae = a[d] + a[nd + d], be = b[d] + b[nd + d];
        uint64_t hi = ae < be ? ae : be;
        if (hi <= lo)
            return 0;
        v *= hi - lo;
    }
    return v;
}

/* What the first pass found for one request (in tensor-major order): its
   first intersecting unique and how many intersect; QRUN_GAPS when
   non-intersecting uniques lie between them (later passes then re-test). */
typedef struct qrun {
    uint32_t first, n;
} qrun;
#define QRUN_GAPS 0x80000000u

/* Everything shs__plan_load works with, passed from phase to phase.  The
   temporaries are freed by the phase that last needs them (set to NULL),
   the rest at the end of shs__plan_load. */
/* Free a temporary as soon as it is no longer needed (see load_ctx). */
#define FREE_NULL(p) do { shs__free(p); (p) = NULL; } while (0)

typedef struct load_ctx {
    const shs_plan_tensor *tensors;
    uint32_t ntensors;
    const shs_plan_chunk *saved;
    const shs_plan_chunk *requests;
    size_t nrequests;
    uint32_t nranks;
    bool load_balanced;
    analysis a;
    uint32_t *rep;           /* [nu] representative chunk of each unique */
    uint32_t *tord;          /* [nrequests] requests in (tensor, rank, box) order */
    uint32_t *tmp, *tstamp, *ucnt, *uranks, *uorder, *reader;
    uint8_t *tdup, *uneed;
    size_t *pos, *qt;        /* qt: [ntensors + 1] start of each tensor in tord */
    uint64_t *ukey, *maxlen;
    qrun *runs;              /* [nrequests] pass 1's result, in tord order */
    size_t total;            /* items (request x unique intersections) */
} load_ctx;

static int load_nomem(const load_ctx *c)
{
    return shs__err(SHS_ENOMEM, "plan: out of memory planning a load of %zu requests",
                    c->nrequests);
}

/* Phase 1, order the requests: (tensor, rank, box) order by a counting
   sort by rank, a stable counting sort by tensor, then boxes inside the
   (tensor, rank) groups that have several requests (noticed during the
   second sort).  Also allocates the per-rank arrays of the plan. */
static int order_requests(load_ctx *c, shs__load_plan *out)
{
    const shs_plan_chunk *requests = c->requests;
    const size_t nrequests = c->nrequests;
    const uint32_t nranks = c->nranks, ntensors = c->ntensors;
    out->item_start = shs__calloc((size_t)nranks + 1, sizeof *out->item_start);
    out->read_start = shs__calloc((size_t)nranks + 1, sizeof *out->read_start);
    out->send_start = shs__calloc((size_t)nranks + 1, sizeof *out->send_start);
    out->rank_read_bytes = shs__calloc(nranks, sizeof *out->rank_read_bytes);
    c->pos = shs__calloc((size_t)(nranks > ntensors ? nranks : ntensors) + 1, sizeof *c->pos);
    c->qt = shs__calloc((size_t)ntensors + 1, sizeof *c->qt);
    c->tord = shs__malloc((nrequests ? nrequests : 1) * sizeof *c->tord);
    c->tmp = shs__malloc((nrequests ? nrequests : 1) * sizeof *c->tmp);
    c->tstamp = shs__calloc((size_t)ntensors + 1, sizeof *c->tstamp);
    c->tdup = shs__calloc((size_t)ntensors + 1, 1);
    if (!out->item_start || !out->read_start || !out->send_start ||
        !out->rank_read_bytes || !c->pos || !c->qt || !c->tord || !c->tmp || !c->tstamp ||
        !c->tdup)
        return load_nomem(c);
    size_t *pos = c->pos, *qt = c->qt;
    uint32_t *tord = c->tord, *tmp = c->tmp, *tstamp = c->tstamp;
    uint8_t *tdup = c->tdup;

    for (size_t i = 0; i < nrequests; i++)
        pos[requests[i].rank + 1]++;
    for (uint32_t r = 0; r < nranks; r++)
        pos[r + 1] += pos[r];
    for (size_t i = 0; i < nrequests; i++)
        tmp[pos[requests[i].rank]++] = (uint32_t)i;
    for (size_t i = 0; i < nrequests; i++)
        qt[requests[i].tensor + 1]++;
    for (uint32_t t = 0; t < ntensors; t++)
        qt[t + 1] += qt[t];
    memcpy(pos, qt, ((size_t)ntensors + 1) * sizeof *pos);
    for (size_t k = 0; k < nrequests; k++) {
        const shs_plan_chunk *q = &requests[tmp[k]];
        if (tstamp[q->tensor] == q->rank + 1)
            tdup[q->tensor] = 1;
        tstamp[q->tensor] = q->rank + 1;
        tord[pos[q->tensor]++] = tmp[k];
    }
    {
        req_cmp_ctx rc_ctx = { requests, c->tensors };
        for (uint32_t t = 0; t < ntensors; t++) {
            if (!tdup[t])
                continue;
            for (size_t g = qt[t]; g < qt[t + 1];) {
                uint32_t r = requests[tord[g]].rank;
                size_t e = g + 1;
                while (e < qt[t + 1] && requests[tord[e]].rank == r)
                    e++;
                if (e - g > 1)
                    msort_u32(tord + g, tmp, e - g, cmp_req_box, &rc_ctx);
                g = e;
            }
        }
    }
    FREE_NULL(c->tmp);
    FREE_NULL(c->tstamp);
    FREE_NULL(c->tdup);
    return SHS_OK;
}

/* Phase 2, index the saved chunks: the sweep key of each saved unique
   (ascending within each tensor) and the longest unique per tensor, so
   that pass 1 finds a request's candidates by binary search. */
static int index_saved(load_ctx *c)
{
    const analysis *a = &c->a;
    /* The readers live until the end: allocated before the temporaries of
       the passes so that, freed, those leave no hole below it (with glibc,
       freed blocks below a live one stay in the process). */
    if (c->load_balanced && !(c->reader = shs__malloc((a->nu ? a->nu : 1) * sizeof *c->reader)))
        return load_nomem(c);

    c->ukey = shs__malloc((a->nu ? a->nu : 1) * sizeof *c->ukey);
    c->maxlen = shs__calloc((size_t)c->ntensors + 1, sizeof *c->maxlen);
    c->runs = shs__malloc((c->nrequests ? c->nrequests : 1) * sizeof *c->runs);
    /* balanced: requests per unique; otherwise only whether it is needed */
    if (c->load_balanced)
        c->ucnt = shs__calloc(a->nu + 1, sizeof *c->ucnt);
    else
        c->uneed = shs__calloc(a->nu + 1, 1);
    if (!c->ukey || !c->maxlen || !c->runs || (!c->ucnt && !c->uneed))
        return load_nomem(c);
    for (uint32_t t = 0; t < c->ntensors; t++) {
        uint32_t nd = c->tensors[t].ndim, ds = a->ds[t];
        for (size_t u = a->tu[t]; u < a->tu[t + 1]; u++) {
            const shs_plan_chunk *ch = &c->saved[c->rep[u]];
            c->ukey[u] = box_start(ch, nd, ds);
            if (box_len(ch, nd, ds) > c->maxlen[t])
                c->maxlen[t] = box_len(ch, nd, ds);
        }
    }
    return SHS_OK;
}

/* Phase 3, match requests to saved chunks (pass 1, count): per request,
   the intersecting uniques, its coverage, items per rank, and requests
   per unique (balanced) or the read bytes per rank (not balanced).  The
   first uncovered request in (rank, tensor, box) order is the one
   reported: tensors come in order and, inside one, ranks and boxes do, so
   a later find wins only with a lower rank. */
static int match_requests(load_ctx *c, shs__load_plan *out)
{
    const shs_plan_tensor *tensors = c->tensors;
    const shs_plan_chunk *saved = c->saved, *requests = c->requests;
    const size_t nrequests = c->nrequests;
    const bool load_balanced = c->load_balanced;
    const analysis *a = &c->a;
    const uint32_t *rep = c->rep, *tord = c->tord;
    const size_t *qt = c->qt;
    const uint64_t *ukey = c->ukey, *maxlen = c->maxlen;
    qrun *runs = c->runs;
    uint32_t *ucnt = c->ucnt;
    uint8_t *uneed = c->uneed;
    size_t total = 0;
    bool bad = false;
    uint32_t bad_q = 0;
    uint64_t bad_got = 0, bad_want = 0;
    for (uint32_t t = 0; t < c->ntensors; t++) {
        const shs_plan_tensor *T = &tensors[t];
        uint32_t nd = T->ndim, ds = a->ds[t];
        size_t ub = a->tu[t], ue = a->tu[t + 1], prev = ue;
        for (size_t k = qt[t]; k < qt[t + 1]; k++) {
            if (k + 16 < nrequests)
                PREFETCH(&requests[tord[k + 16]]);
            if (k + 8 < nrequests)
                PREFETCH(requests[tord[k + 8]].box);
            uint32_t qi = tord[k];
            const shs_plan_chunk *q = &requests[qi];
            uint64_t qs = box_start(q, nd, ds), qe = qs + box_len(q, nd, ds);
            uint64_t want = nd ? box_volume(q->box + nd, nd) : 1, got = 0;
            runs[k] = (qrun){ 0, 0 };
            if (want == 0)
                continue;
            /* first unique whose start could reach qs: galloping
               from the previous request's, as consecutive requests of
               a tensor (rank order) usually move forward */
            uint64_t lo = qs >= maxlen[t] ? qs - maxlen[t] + 1 : 0;
            size_t l = ub, h = ue;
            if (prev < ue && ukey[prev] < lo) {
                size_t step = 1;
                l = prev + 1;
                while (l + step < ue && ukey[l + step] < lo) {
                    l += step + 1;
                    step *= 2;
                }
                h = l + step < ue ? l + step + 1 : ue;
            } else if (prev < ue) {
                h = prev + 1;
            }
            while (l < h) {
                size_t mid = l + (h - l) / 2;
                if (ukey[mid] < lo)
                    l = mid + 1;
                else
                    h = mid;
            }
            prev = l;
            uint32_t first = 0, n = 0;
            bool gap = false, gaps = false;
            for (size_t u = l; u < ue && ukey[u] < qe; u++) {
                uint64_t vol = nd ? isect_vol(saved[rep[u]].box, q->box, nd) : 1;
                if (!vol) {
                    gap = n != 0;
                    continue;
                }
                if (!n)
                    first = (uint32_t)u;
                gaps |= gap;
                n++;
                got += vol;
                if (load_balanced) {
                    ucnt[u + 1]++;
                } else {
                    uneed[u] = 1;
                    out->rank_read_bytes[q->rank] += elem_bytes(T, vol);
                }
            }
            if (got != want && (!bad || q->rank < requests[bad_q].rank)) {
                bad = true;
                bad_q = qi;
                bad_got = got;
                bad_want = want;
            }
            total += n;
            if (total >= UINT32_MAX - 1 || (gaps && n >= QRUN_GAPS))
                return shs__err(SHS_EUNSUPPORTED, "plan: more than 2^32-2 intersections");
            runs[k] = (qrun){ first, gaps ? n | QRUN_GAPS : n };
            out->item_start[q->rank + 1] += n;
        }
    }
    c->total = total;
    if (bad) {
        const shs_plan_chunk *q = &requests[bad_q];
        uint32_t nd = tensors[q->tensor].ndim;
        char b[BOXSTR];
        return shs__err(SHS_EINVAL, "plan: tensor %" PRIu32 ": box %s requested by rank %"
                        PRIu32 " is not covered by the saved chunks (%" PRIu64 " of %"
                        PRIu64 " elements covered)", q->tensor,
                        fmt_box(b, sizeof b, q->box, q->box + nd, nd), q->rank,
                        bad_got, bad_want);
    }
    FREE_NULL(c->ukey);
    FREE_NULL(c->maxlen);
    for (uint32_t r = 0; r < c->nranks; r++)
        out->item_start[r + 1] += out->item_start[r];
    out->nitems = total;
    for (size_t u = 0; u < a->nu; u++)
        if (load_balanced ? ucnt[u + 1] != 0 : uneed[u] != 0)
            out->needed_bytes += unique_bytes(a, u);
    FREE_NULL(c->uneed);
    return SHS_OK;
}

/* Phase 4 (balanced only), choose readers balanced by bytes: the ranks
   needing each unique, then one reader per unique in greedy order (the
   least loaded rank that needs it, lowest rank on ties). */
static int choose_readers(load_ctx *c, shs__load_plan *out)
{
    analysis *a = &c->a;
    const size_t nrequests = c->nrequests;
    const shs_plan_chunk *saved = c->saved, *requests = c->requests;
    const uint32_t *rep = c->rep, *tord = c->tord;
    const size_t *qt = c->qt;
    const qrun *runs = c->runs;
    uint32_t *ucnt = c->ucnt, *reader = c->reader;
    int rc;
    /* The ranks that need each unique: uranks[ucnt[u-1] .. ucnt[u]). */
    size_t nneeded;
    if ((rc = order_uniques(&c->uorder, &nneeded, a, ucnt, false)) < 0)
        return rc;
    FREE_NULL(a->ubytes); /* bytes come from the boxes from here on */
    for (size_t u = 0; u < a->nu; u++)
        ucnt[u + 1] += ucnt[u];
    c->uranks = shs__malloc((c->total ? c->total : 1) * sizeof *c->uranks);
    if (!c->uranks)
        return load_nomem(c);
    uint32_t *uranks = c->uranks, *uorder = c->uorder;
    for (uint32_t t = 0; t < c->ntensors; t++) {
        uint32_t nd = c->tensors[t].ndim;
        for (size_t k = qt[t]; k < qt[t + 1]; k++) {
            if (k + 16 < nrequests)
                PREFETCH(&requests[tord[k + 16]]);
            uint32_t n = runs[k].n & ~QRUN_GAPS, u = runs[k].first;
            if (!n)
                continue;
            const shs_plan_chunk *q = &requests[tord[k]];
            for (; n; u++) {
                if ((runs[k].n & QRUN_GAPS) && nd &&
                    !isect_vol(saved[rep[u]].box, q->box, nd))
                    continue;
                uranks[ucnt[u]++] = q->rank;
                n--;
            }
        }
    }
    /* ucnt[u] is now the end of u's ranks (= start of u + 1) */
    uint64_t *load = out->rank_read_bytes;
    for (size_t u = 0; u < a->nu; u++)
        reader[u] = UINT32_MAX;
    for (size_t j = 0; j < nneeded; j++) {
        uint32_t u = uorder[j];
        size_t b = u ? ucnt[u - 1] : 0, e = ucnt[u];
        uint32_t best = uranks[b];
        for (size_t p = b + 1; p < e; p++) {
            uint32_t r = uranks[p];
            if (load[r] < load[best] || (load[r] == load[best] && r < best))
                best = r;
        }
        const shs_plan_chunk *ch = &saved[rep[u]];
        const shs_plan_tensor *T = &c->tensors[ch->tensor];
        reader[u] = best;
        load[best] += elem_bytes(T, T->ndim ? box_volume(ch->box + T->ndim, T->ndim) : 1);
    }
    out->nreads = nneeded;
    FREE_NULL(c->uranks);
    FREE_NULL(c->uorder);
    return SHS_OK;
}

/* Phase 5, build the per-rank items (pass 3): items straight into their
   final rank-major place (per-rank cursors; a rank's items come out in
   tensor, box order), counting the sends per source. */
static int place_items(load_ctx *c, shs__load_plan *out)
{
    const shs_plan_tensor *tensors = c->tensors;
    const shs_plan_chunk *saved = c->saved, *requests = c->requests;
    const size_t nrequests = c->nrequests;
    const uint32_t *rep = c->rep, *tord = c->tord, *reader = c->reader;
    const size_t *qt = c->qt;
    const qrun *runs = c->runs;
    size_t *pos = c->pos;
    if (!(out->items = shs__malloc((c->total ? c->total : 1) * sizeof *out->items)))
        return load_nomem(c);
    memcpy(pos, out->item_start, ((size_t)c->nranks + 1) * sizeof *pos);
    for (uint32_t t = 0; t < c->ntensors; t++) {
        const shs_plan_tensor *T = &tensors[t];
        uint32_t nd = T->ndim;
        for (size_t k = qt[t]; k < qt[t + 1]; k++) {
            if (k + 16 < nrequests)
                PREFETCH(&requests[tord[k + 16]]);
            uint32_t n = runs[k].n & ~QRUN_GAPS, u = runs[k].first;
            if (!n)
                continue;
            uint32_t qi = tord[k];
            const shs_plan_chunk *q = &requests[qi];
            uint32_t r = q->rank;
            shs__load_item *it = out->items + pos[r];
            pos[r] += n;
            for (; n; u++) {
                uint64_t vol = 1;
                const uint64_t *sb = saved[rep[u]].box;
                if ((runs[k].n & QRUN_GAPS) && nd && !isect_vol(sb, q->box, nd))
                    continue;
                uint32_t src = c->load_balanced ? reader[u] : r;
                *it++ = (shs__load_item){ rep[u], qi, src };
                n--;
                if (src != r) {
                    if (nd)
                        vol = isect_vol(sb, q->box, nd);
                    out->nsends++;
                    out->send_start[src + 1]++;
                    out->sent_bytes += elem_bytes(T, vol);
                }
            }
        }
    }
    FREE_NULL(c->runs);
    FREE_NULL(c->tord);
    return SHS_OK;
}

/* Phase 6 (balanced only), build the per-rank reads and sends: reads per
   reader in unique (tensor, box) order, sends per source in item order
   (= destination rank order). */
static int build_reads_sends(load_ctx *c, shs__load_plan *out)
{
    const uint32_t nranks = c->nranks;
    const uint32_t *rep = c->rep, *reader = c->reader;
    size_t *pos = c->pos;
    out->reads = shs__malloc((out->nreads ? out->nreads : 1) * sizeof *out->reads);
    out->sends = shs__malloc((out->nsends ? out->nsends : 1) * sizeof *out->sends);
    if (!out->reads || !out->sends)
        return load_nomem(c);
    for (size_t u = 0; u < c->a.nu; u++)
        if (reader[u] != UINT32_MAX)
            out->read_start[reader[u] + 1]++;
    for (uint32_t r = 0; r < nranks; r++)
        out->read_start[r + 1] += out->read_start[r];
    memcpy(pos, out->read_start, ((size_t)nranks + 1) * sizeof *pos);
    for (size_t u = 0; u < c->a.nu; u++)
        if (reader[u] != UINT32_MAX)
            out->reads[pos[reader[u]]++] = rep[u];
    FREE_NULL(c->reader);

    for (uint32_t r = 0; r < nranks; r++)
        out->send_start[r + 1] += out->send_start[r];
    memcpy(pos, out->send_start, ((size_t)nranks + 1) * sizeof *pos);
    for (uint32_t r = 0; r < nranks; r++)
        for (size_t i = out->item_start[r]; i < out->item_start[r + 1]; i++) {
            uint32_t src = out->items[i].src;
            if (src != r)
                out->sends[pos[src]++] = (uint32_t)i;
        }
    return SHS_OK;
}

/*
 * The load plan works tensor by tensor (requests ordered by tensor, rank,
 * box), so that each pass walks one tensor's uniques, keys and boxes nearly
 * sequentially instead of jumping between tensors for every request; the
 * phases above run in order.  Arrays are sized exactly from the counts and
 * freed as soon as they are no longer needed.
 */
int shs__plan_load(shs__load_plan *out, const shs_plan_tensor *tensors,
                   uint32_t ntensors, const shs_plan_chunk *saved,
                   size_t nsaved, const shs_plan_chunk *requests,
                   size_t nrequests, uint32_t nranks, bool load_balanced)
{
    load_ctx c = { .tensors = tensors, .ntensors = ntensors, .saved = saved,
                   .requests = requests, .nrequests = nrequests, .nranks = nranks,
                   .load_balanced = load_balanced };
    analysis *a = &c.a;
    int rc;

    memset(out, 0, sizeof *out);
    if (nranks == 0)
        return shs__err(SHS_EINVAL, "plan: load with 0 ranks");
    if ((rc = analyze(a, tensors, ntensors, saved, nsaved, 0, "saved chunk")) < 0)
        return rc;
    /* Only each unique's representative chunk is needed from here on:
       ustart becomes rep[u] = that chunk's id, ord goes. */
    c.rep = a->ustart;
    for (size_t u = 0; u < a->nu; u++)
        c.rep[u] = a->ord[a->ustart[u]];
    FREE_NULL(a->ord);

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

    if ((rc = order_requests(&c, out)) < 0 || (rc = index_saved(&c)) < 0 ||
        (rc = match_requests(&c, out)) < 0 ||
        (load_balanced && (rc = choose_readers(&c, out)) < 0))
        goto done;
    FREE_NULL(c.ucnt);
    FREE_NULL(a->ubytes);
    if ((rc = place_items(&c, out)) < 0 ||
        (load_balanced && (rc = build_reads_sends(&c, out)) < 0))
        goto done;
    for (uint32_t r = 0; r < nranks; r++)
        out->read_bytes += out->rank_read_bytes[r];
    out->max_over_mean = max_over_mean(out->rank_read_bytes, nranks);
    rc = SHS_OK;

done:
    shs__free(c.tord);
    shs__free(c.tmp);
    shs__free(c.tstamp);
    shs__free(c.tdup);
    shs__free(c.ucnt);
    shs__free(c.uneed);
    shs__free(c.uranks);
    shs__free(c.uorder);
    shs__free(c.reader);
    shs__free(c.pos);
    shs__free(c.qt);
    shs__free(c.ukey);
    shs__free(c.maxlen);
    shs__free(c.runs);
    analysis_release(a);
    if (rc < 0)
        shs__load_plan_release(out);
    return rc;
}
