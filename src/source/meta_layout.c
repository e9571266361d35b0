/*
 * meta_layout.c -- the layout rule of metadata.json: the distinct chunks
 * of a tensor tile its global shape exactly (no overlap, no gap), checked
 * without comparing every pair of chunks.  Format: docs/checkpoint.md.
 */
#include "source/meta_int.h"

#include <stdlib.h>
#include <string.h>


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
    uint64_t start; /* in the sweep dimension */
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
int shs__meta_check_tiling(shs__mtensor *t, const char *path)
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
        if (k && cmp_box(&(box_ref){ bx[k].c, t->ndim, 0 },
                         &(box_ref){ bx[k - 1].c, t->ndim, 0 }) == 0) {
            t->c[bx[k].idx].replica = 1;
            continue;
        }
        uint64_t vol = 1;
        for (size_t d = 0; d < t->ndim; d++)
            vol *= bx[k].c->shape[d]; /* <= total: the box is inside */
        if (!vol)
            continue;
        if (vol > total - sum) {
            rc = shs__err(SHS_ECORRUPT,
                          "%s: tensor '%s': its chunks overlap (they hold more "
                          "than its %llu elements)",
                          path, t->name, (unsigned long long)total);
            goto done;
        }
        sum += vol;
        bx[n++] = bx[k];
    }
    if (sum < total) {
        rc = shs__err(SHS_ECORRUPT,
                      "%s: tensor '%s': the saved chunks cover %llu of its "
                      "%llu elements",
                      path, t->name, (unsigned long long)sum, (unsigned long long)total);
        goto done;
    }
    int r = total ? boxes_disjoint(t, bx, n) : 1;
    if (r < 0)
        rc = shs__err(SHS_ENOMEM, "out of memory reading %s", path);
    else if (r == 0)
        rc = shs__err(SHS_ECORRUPT, "%s: tensor '%s': its chunks overlap and leave a gap", path,
                      t->name);
done:
    shs__free(bx);
    return rc;
}
