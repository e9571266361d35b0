/*
 * plan_analyze.c -- the analysis both plans start with (see plan_impl.h):
 * sorts, validation, grouping of a chunk list into uniques, and the
 * greedy placement order of the uniques.
 */
#include "format/layout.h"
#include "dist/plan_impl.h"

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

/* "[o0:e0, o1:e1]" (half-open ranges per dimension) into buf. */
const char *shs__plan_fmt_box(char *buf, size_t cap, const uint64_t *off, const uint64_t *shape,
                              uint32_t ndim)
{
    size_t n = 0;
    int w = snprintf(buf, cap, "[");
    n = w > 0 ? (size_t)w : 0;
    for (uint32_t d = 0; d < ndim && n < cap; d++) {
        w = snprintf(buf + n, cap - n, "%s%" PRIu64 ":%" PRIu64, d ? ", " : "", off[d],
                     off[d] + shape[d]);
        if (w < 0)
            break;
        n += (size_t)w;
    }
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
    return buf;
}

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

void shs__plan_msort_u32(uint32_t *a, uint32_t *tmp, size_t n, shs__plan_cmp_fn cmp,
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
    shs__plan_msort_u32(a, tmp, h, cmp, ctx);
    shs__plan_msort_u32(a + h, tmp, n - h, cmp, ctx);
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
            return shs__err(SHS_EINVAL,
                            "plan: tensor %" PRIu32 " has %" PRIu32 " dimensions (at most %d)", t,
                            T->ndim, SHS_PLAN_MAX_NDIM);
        if (T->ndim && !T->shape)
            return shs__err(SHS_EINVAL, "plan: tensor %" PRIu32 " has no shape", t);
        if (shs_dtype_bits(T->dtype) == 0)
            return shs__err(SHS_EINVAL, "plan: tensor %" PRIu32 " has invalid dtype %d", t,
                            (int)T->dtype);
        for (uint32_t d = 0; d < T->ndim; d++)
            if (shs__mul_u64(numel, T->shape[d], &numel))
                return shs__err(SHS_EOVERFLOW,
                                "plan: tensor %" PRIu32 " has more than 2^64 elements", t);
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
int shs__plan_check_chunk(const shs_plan_tensor *tensors, uint32_t nt, const shs_plan_chunk *c,
                          size_t i, uint32_t nranks, const char *what)
{
    if (c->tensor >= nt)
        return shs__err(SHS_EINVAL,
                        "plan: %s %zu: tensor id %" PRIu32 " out of range (%" PRIu32 " tensors)",
                        what, i, c->tensor, nt);
    if (nranks && c->rank >= nranks)
        return shs__err(SHS_EINVAL,
                        "plan: %s %zu (tensor %" PRIu32 "): rank %" PRIu32 " out of range (%" PRIu32
                        " ranks)",
                        what, i, c->tensor, c->rank, nranks);
    const shs_plan_tensor *T = &tensors[c->tensor];
    if (T->ndim == 0)
        return SHS_OK;
    if (!c->box)
        return shs__err(SHS_EINVAL, "plan: %s %zu (tensor %" PRIu32 "): box is NULL", what, i,
                        c->tensor);
    uint64_t vol = 1;
    for (uint32_t d = 0; d < T->ndim; d++) {
        uint64_t end;
        if (shs__add_u64(c->box[d], c->box[T->ndim + d], &end) || end > T->shape[d]) {
            char b[BOXSTR], s[BOXSTR];
            uint64_t zero[SHS_PLAN_MAX_NDIM] = { 0 };
            return shs__err(
                SHS_EINVAL,
                "plan: %s %zu: box %s of rank %" PRIu32 " is outside tensor %" PRIu32 " %s", what,
                i, shs__plan_fmt_box(b, sizeof b, c->box, c->box + T->ndim, T->ndim), c->rank,
                c->tensor, shs__plan_fmt_box(s, sizeof s, zero, T->shape, T->ndim));
        }
        vol *= c->box[T->ndim + d];
    }
    if (vol * shs_dtype_bits(T->dtype) % 8 != 0)
        return shs__err(SHS_EINVAL,
                        "plan: %s %zu (tensor %" PRIu32 "): box is not a "
                        "whole number of bytes",
                        what, i, c->tensor);
    return SHS_OK;
}

/* ------------------------------------------------------------------------
 * Analysis shared by both plans
 * ---------------------------------------------------------------------- */

void shs__plan_analysis_release(shs__plan_analysis *a)
{
    shs__free(a->ord);
    shs__free(a->ustart);
    shs__free(a->tu);
    shs__free(a->ds);
    shs__free(a->ubytes);
    memset(a, 0, sizeof *a);
}

/* Scratch arrays of the per-tensor steps, sized for the tensor with the
   most chunks (m below). */
typedef struct scratch {
    uint64_t *keys, *ktmp; /* radix keys (start << bits | local index) */
    uint64_t *lkey;        /* [m] start of each chunk in the sweep dim */
    const uint64_t **lbox; /* [m] box of each chunk */
    uint32_t *lrank;       /* [m] rank of each chunk */
    uint32_t *perm;        /* [m] local indices in canonical order */
    uint32_t *seg, *mtmp;
    uint32_t *stamp; /* [nranks] (save side): last unique per rank */
} scratch;

static void scratch_release(scratch *s)
{
    shs__free(s->keys);
    shs__free(s->ktmp);
    shs__free(s->lkey);
    shs__free(s->lbox);
    shs__free(s->lrank);
    shs__free(s->perm);
    shs__free(s->seg);
    shs__free(s->mtmp);
    shs__free(s->stamp);
}

static int scratch_alloc(scratch *s, size_t maxm, uint32_t nranks)
{
    size_t m = maxm ? maxm : 1;
    s->keys = shs__malloc(m * sizeof *s->keys);
    s->ktmp = shs__malloc(m * sizeof *s->ktmp);
    s->lkey = shs__malloc(m * sizeof *s->lkey);
    s->lbox = shs__malloc(m * sizeof *s->lbox);
    s->lrank = shs__malloc(m * sizeof *s->lrank);
    s->perm = shs__malloc(m * sizeof *s->perm);
    s->seg = shs__malloc(m * sizeof *s->seg);
    s->mtmp = shs__malloc(m * sizeof *s->mtmp);
    if (nranks)
        s->stamp = shs__calloc(nranks, sizeof *s->stamp);
    if (!s->keys || !s->ktmp || !s->lkey || !s->lbox || !s->lrank || !s->perm || !s->seg ||
        !s->mtmp || (nranks && !s->stamp))
        return SHS_ENOMEM;
    return SHS_OK;
}

/* Step 1: validate every chunk, then group the chunk ids by tensor in
   a->ord (stable counting sort; tstart[t] = where tensor t starts) and
   choose each tensor's sweep dimension.  *maxm = most chunks of a tensor. */
static int group_by_tensor(shs__plan_analysis *a, size_t *tstart, uint32_t nranks, const char *what,
                           size_t *maxm)
{
    const shs_plan_tensor *tensors = a->tensors;
    const uint32_t nt = a->nt;
    size_t sumdim = 0;
    int rc = SHS_OK;
    /* nz[nzbase[t] + d]: chunks of tensor t with a nonzero offset in d */
    size_t *nzbase = shs__calloc((size_t)nt + 1, sizeof *nzbase);
    uint64_t *nz = NULL;
    if (!nzbase)
        return shs__err(SHS_ENOMEM, "plan: out of memory analysing %zu %ss", a->n, what);
    for (uint32_t t = 0; t < nt; t++) {
        nzbase[t] = sumdim;
        sumdim += tensors[t].ndim;
    }
    nzbase[nt] = sumdim;
    if (!(nz = shs__calloc(sumdim ? sumdim : 1, sizeof *nz))) {
        rc = shs__err(SHS_ENOMEM, "plan: out of memory analysing %zu %ss", a->n, what);
        goto done;
    }
    for (size_t i = 0; i < a->n; i++) {
        const shs_plan_chunk *c = &a->chunks[i];
        if ((rc = shs__plan_check_chunk(tensors, nt, c, i, nranks, what)) < 0)
            goto done;
        tstart[c->tensor + 1]++;
        uint32_t nd = tensors[c->tensor].ndim;
        uint64_t *z = nz + nzbase[c->tensor];
        for (uint32_t d = 0; d < nd; d++)
            z[d] += c->box[d] != 0;
    }
    *maxm = 0;
    for (uint32_t t = 0; t < nt; t++) {
        size_t m = tstart[t + 1];
        if (m > *maxm)
            *maxm = m;
        tstart[t + 1] += tstart[t];
        /* Sweep along the dimension with the most split points: in a grid,
           ties in that dimension are then as few as possible. */
        uint32_t best = 0;
        for (uint32_t d = 1; d < tensors[t].ndim; d++)
            if (nz[nzbase[t] + d] > nz[nzbase[t] + best])
                best = d;
        a->ds[t] = best;
    }
    size_t *pos = nzbase; /* reuse: nzbase is no longer needed */
    memcpy(pos, tstart, ((size_t)nt + 1) * sizeof *pos);
    for (size_t i = 0; i < a->n; i++)
        a->ord[pos[a->chunks[i].tensor]++] = (uint32_t)i;
done:
    shs__free(nzbase);
    shs__free(nz);
    return rc;
}

/* Step 2, per tensor: put its m chunks o[0..m) in canonical box order.
   One pass over the (scattered) chunks; everything after works on the
   contiguous local copies in s (s->perm = the order, in local indices). */
static void sort_tensor(const shs__plan_analysis *a, uint32_t t, uint32_t *o, size_t m, scratch *s)
{
    uint32_t nd = a->tensors[t].ndim, ds = a->ds[t];
    uint64_t maxkey = 0;
    for (size_t i = 0; i < m; i++) {
        const shs_plan_chunk *c = &a->chunks[o[i]];
        s->lbox[i] = c->box;
        s->lrank[i] = c->rank;
        s->lkey[i] = nd ? c->box[ds] : 0;
        if (s->lkey[i] > maxkey)
            maxkey = s->lkey[i];
    }
    box_cmp_ctx cc = { s->lbox, nd, ds };
    uint32_t *perm = s->perm;
    /* Order by start in the sweep dimension: radix on (start, local
       index) packed in 64 bits when it fits. */
    unsigned lb = bits_for(m - 1);
    if (lb < 64 && (lb == 0 || (maxkey >> (64 - lb)) == 0)) {
        for (size_t i = 0; i < m; i++)
            s->keys[i] = (s->lkey[i] << lb) | i;
        radix_u64(s->keys, s->ktmp, m);
        uint64_t mask = lb ? (UINT64_MAX >> (64 - lb)) : 0;
        for (size_t i = 0; i < m; i++)
            perm[i] = (uint32_t)(s->keys[i] & mask);
        /* inside ties of the sweep start, replicas need no sorting */
        for (size_t g = 0; g < m;) {
            uint64_t k0 = s->lkey[perm[g]];
            size_t e = g + 1;
            bool same = true;
            for (; e < m && s->lkey[perm[e]] == k0; e++)
                if (same && !box_eq(s->lbox[perm[g]], s->lbox[perm[e]], nd))
                    same = false;
            if (!same)
                shs__plan_msort_u32(perm + g, s->mtmp, e - g, cmp_box, &cc);
            g = e;
        }
    } else {
        for (size_t i = 0; i < m; i++)
            perm[i] = (uint32_t)i;
        shs__plan_msort_u32(perm, s->mtmp, m, cmp_box, &cc);
    }
    memcpy(s->seg, o, m * sizeof *o);
    for (size_t i = 0; i < m; i++)
        o[i] = s->seg[perm[i]];
}

/* Step 3, per tensor: merge identical boxes of the sorted chunks (which
   start at position `base` of a->ord) into uniques, counted in *nu.  On
   the save side (s->stamp) a rank holding the same box twice is an
   error. */
static int merge_uniques(shs__plan_analysis *a, uint32_t t, size_t base, size_t m, const scratch *s,
                         size_t *nu)
{
    uint32_t nd = a->tensors[t].ndim;
    uint64_t bits = shs_dtype_bits(a->tensors[t].dtype);
    for (size_t i = 0; i < m; i++) {
        const uint64_t *box = s->lbox[s->perm[i]];
        uint32_t rank = s->lrank[s->perm[i]];
        if (i == 0 || (nd && !box_eq(s->lbox[s->perm[i - 1]], box, nd))) {
            a->ubytes[*nu] = (nd ? box_volume(box + nd, nd) : 1) * bits / 8;
            a->ustart[(*nu)++] = (uint32_t)(base + i);
        }
        if (s->stamp) {
            if (s->stamp[rank] == *nu) {
                char b[BOXSTR];
                return shs__err(SHS_EINVAL,
                                "plan: tensor %" PRIu32 ": rank %" PRIu32 " holds box %s twice", t,
                                rank, shs__plan_fmt_box(b, sizeof b, box, box + nd, nd));
            }
            s->stamp[rank] = (uint32_t)*nu;
        }
    }
    return SHS_OK;
}

/* Step 4, per tensor: distinct uniques u0..nu must not overlap.  In sweep
   order only the ones that start before this one ends can. */
static int check_overlaps(const shs__plan_analysis *a, uint32_t t, size_t u0, size_t nu,
                          const char *what)
{
    uint32_t nd = a->tensors[t].ndim, ds = a->ds[t];
    uint64_t io[SHS_PLAN_MAX_NDIM], is[SHS_PLAN_MAX_NDIM];
    for (size_t u = u0; u < nu && nd; u++) {
        const shs_plan_chunk *A = &a->chunks[urep(a, u)];
        uint64_t end = A->box[ds] + A->box[nd + ds];
        for (size_t v = u + 1; v < nu; v++) {
            const shs_plan_chunk *B = &a->chunks[urep(a, v)];
            if (B->box[ds] >= end)
                break;
            if (shs__box_intersect(nd, A->box, A->box + nd, B->box, B->box + nd, io, is)) {
                char b1[BOXSTR], b2[BOXSTR];
                return shs__err(SHS_EINVAL,
                                "plan: tensor %" PRIu32 ": %s of rank %" PRIu32
                                " %s and of rank %" PRIu32 " %s overlap but are not "
                                "identical",
                                t, what, A->rank,
                                shs__plan_fmt_box(b1, sizeof b1, A->box, A->box + nd, nd), B->rank,
                                shs__plan_fmt_box(b2, sizeof b2, B->box, B->box + nd, nd));
            }
        }
    }
    return SHS_OK;
}

int shs__plan_analyze(shs__plan_analysis *a, const shs_plan_tensor *tensors, uint32_t nt,
                      const shs_plan_chunk *chunks, size_t n, uint32_t nranks, const char *what)
{
    int rc = SHS_OK;
    size_t *tstart = NULL, maxm = 0, nu = 0;
    scratch s;
    memset(&s, 0, sizeof s);

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
    a->ds = shs__calloc((size_t)nt + 1, sizeof *a->ds);
    a->tu = shs__calloc((size_t)nt + 1, sizeof *a->tu);
    a->ord = shs__malloc((n ? n : 1) * sizeof *a->ord);
    a->ustart = shs__malloc((n + 1) * sizeof *a->ustart);
    a->ubytes = shs__malloc((n ? n : 1) * sizeof *a->ubytes);
    if (!tstart || !a->ds || !a->tu || !a->ord || !a->ustart || !a->ubytes)
        goto nomem;
    if ((rc = group_by_tensor(a, tstart, nranks, what, &maxm)) < 0)
        goto done;
    if (scratch_alloc(&s, maxm, nranks) < 0)
        goto nomem;
    for (uint32_t t = 0; t < nt; t++) {
        size_t m = tstart[t + 1] - tstart[t], u0 = nu;
        a->tu[t] = (uint32_t)nu;
        if (m == 0)
            continue;
        sort_tensor(a, t, a->ord + tstart[t], m, &s);
        if ((rc = merge_uniques(a, t, tstart[t], m, &s, &nu)) < 0 ||
            (rc = check_overlaps(a, t, u0, nu, what)) < 0)
            goto done;
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
    scratch_release(&s);
    if (rc < 0)
        shs__plan_analysis_release(a);
    return rc;
}

/* Greedy placement order of unique ids: by `major` ascending (the number of
   holders for a save, 0 for a load), then bytes descending, then id
   ascending (= tensor, then box order).  Real states have few distinct
   (major, bytes) pairs, so this is a stable counting sort over those
   classes (a small hash table, two passes over the ids, one u32 array);
   with too many distinct pairs it falls back to a merge sort. */
typedef struct order_ctx {
    const shs__plan_analysis *a;
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
    size_t pos; /* count, then placement cursor */
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
int shs__plan_order_uniques(uint32_t **out, size_t *out_k, const shs__plan_analysis *a,
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
        shs__plan_msort_u32(ids, tmp, k, cmp_order, &c);
        shs__free(tmp);
    }
    *out = ids;
    return SHS_OK;
}

double shs__plan_max_over_mean(const uint64_t *v, uint32_t n)
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
