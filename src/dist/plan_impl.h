/*
 * plan_impl.h -- what the save plan (plan.c) and the load plan
 * (plan_load.c) share, implemented in plan_analyze.c: box helpers, sorts,
 * validation and the analysis of a chunk list.
 *
 * The analysis: validate, group by tensor (counting sort), order each
 * tensor's chunks canonically by box content (radix sort on the offset in
 * the tensor's sweep dimension, full comparison only inside ties that are
 * not replicas), merge identical boxes into "uniques" and check that
 * distinct uniques do not overlap.  Nothing depends on the input order
 * except which of several identical entries is looked at first, and no
 * decision depends on that.
 */
#ifndef SHS_PLAN_IMPL_H
#define SHS_PLAN_IMPL_H

#include "dist/plan.h"

#include <string.h>

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

/* Room for a box formatted by shs__plan_fmt_box in an error message. */
#define BOXSTR 256

/* "[o0:e0, o1:e1]" (half-open ranges per dimension) into buf; returns buf. */
const char *shs__plan_fmt_box(char *buf, size_t cap, const uint64_t *off, const uint64_t *shape,
                              uint32_t ndim);

/* Stable merge sort of u32 ids with a context comparator; tmp holds at
   least n / 2 ids. */
typedef int (*shs__plan_cmp_fn)(const void *ctx, uint32_t a, uint32_t b);
void shs__plan_msort_u32(uint32_t *a, uint32_t *tmp, size_t n, shs__plan_cmp_fn cmp,
                         const void *ctx);

/* One chunk: tensor id, rank (when nranks != 0), box inside the tensor,
   whole bytes.  `what` ("chunk", "request") and `i` name it in the
   error. */
int shs__plan_check_chunk(const shs_plan_tensor *tensors, uint32_t nt, const shs_plan_chunk *c,
                          size_t i, uint32_t nranks, const char *what);

typedef struct shs__plan_analysis {
    const shs_plan_tensor *tensors;
    uint32_t nt;
    const shs_plan_chunk *chunks;
    size_t n;
    uint32_t *ord;    /* [n] chunk ids grouped by tensor, canonical order */
    uint32_t *ustart; /* [nu + 1] position in ord where each unique starts */
    uint32_t *tu;     /* [nt + 1] first unique of each tensor */
    uint32_t *ds;     /* [nt] sweep dimension of each tensor */
    uint64_t *ubytes; /* [nu] bytes of each unique */
    size_t nu;
} shs__plan_analysis;

static inline uint32_t urep(const shs__plan_analysis *a, size_t u)
{
    return a->ord[a->ustart[u]];
}

static inline uint64_t unique_bytes(const shs__plan_analysis *a, size_t u)
{
    return a->ubytes[u];
}

/* Validate, group and order `chunks`; merge identical boxes.  With
   nranks != 0 ranks are checked and one rank holding a box twice is an
   error (save side).  On failure *a is released. */
int shs__plan_analyze(shs__plan_analysis *a, const shs_plan_tensor *tensors, uint32_t nt,
                      const shs_plan_chunk *chunks, size_t n, uint32_t nranks, const char *what);
void shs__plan_analysis_release(shs__plan_analysis *a);

/* The unique ids u < a->nu with sel == NULL or sel[u + 1] != 0, in greedy
   placement order (see plan_analyze.c), into a new array *out (count
   *out_k). */
int shs__plan_order_uniques(uint32_t **out, size_t *out_k, const shs__plan_analysis *a,
                            const uint32_t *sel, bool by_holders);

/* max(v) / mean(v) over n values; 1 when they are all 0. */
double shs__plan_max_over_mean(const uint64_t *v, uint32_t n);

#endif
