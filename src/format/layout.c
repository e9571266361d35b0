/* layout.c -- N-d box math (see layout.h). */
#include "format/layout.h"

#include <string.h>

int shs__box_check(uint64_t *out_bytes, shs_dtype dtype, size_t ndim, const uint64_t *shape,
                   const uint64_t *start, const uint64_t *count)
{
    uint64_t numel = 1;
    if (ndim > SHS_MAX_DIMS)
        return shs__err(SHS_EINVAL, "%zu dimensions (at most %d)", ndim, SHS_MAX_DIMS);
    for (size_t d = 0; d < ndim; d++) {
        if (start[d] > shape[d] || count[d] > shape[d] - start[d])
            return shs__err(SHS_ERANGE, "box [%llu, +%llu) is outside dimension %zu of size %llu",
                            (unsigned long long)start[d], (unsigned long long)count[d], d,
                            (unsigned long long)shape[d]);
        numel *= count[d]; /* cannot overflow: bounded by the tensor's numel */
    }
    unsigned bits = shs_dtype_bits(dtype);
    if (bits % 8) {
        /* sub-byte elements: every innermost run must start and end on a
           byte boundary */
        uint64_t inner_start = ndim ? start[ndim - 1] : 0;
        uint64_t inner_count = ndim ? count[ndim - 1] : 1;
        uint64_t row = ndim ? shape[ndim - 1] : 1;
        if ((inner_start * bits) % 8 || (inner_count * bits) % 8 || (row * bits) % 8)
            return shs__err(SHS_EINVAL,
                            "a box of %s elements must cover whole bytes in its last dimension",
                            shs_dtype_name(dtype));
    }
    *out_bytes = numel * bits / 8;
    return SHS_OK;
}

int shs__box_runs2(unsigned bits, size_t ndim, const uint64_t *src_shape, const uint64_t *src_start,
                   const uint64_t *dst_shape, const uint64_t *dst_start, const uint64_t *count,
                   shs__run_fn fn, void *ctx)
{
    for (size_t d = 0; d < ndim; d++)
        if (count[d] == 0)
            return SHS_OK;
    /* Merge trailing dimensions that both arrays hold whole into one run;
       the first partial dimension (from the end) still joins the run. */
    size_t inner = ndim; /* dims [inner, ndim) form the run */
    uint64_t run_elems = 1;
    while (inner > 0) {
        size_t d = inner - 1;
        run_elems *= count[d];
        inner = d;
        if (count[d] != src_shape[d] || count[d] != dst_shape[d])
            break;
    }
    uint64_t sstride[SHS_MAX_DIMS + 1], dstride[SHS_MAX_DIMS + 1];
    uint64_t sa = 1, da = 1;
    for (size_t d = ndim; d-- > 0;) {
        sstride[d] = sa;
        dstride[d] = da;
        sa *= src_shape[d];
        da *= dst_shape[d];
    }
    uint64_t run_bytes = run_elems * bits / 8;
    uint64_t idx[SHS_MAX_DIMS] = { 0 };
    for (;;) {
        uint64_t s = 0, t = 0;
        for (size_t d = 0; d < ndim; d++) {
            uint64_t i = d < inner ? idx[d] : 0;
            s += (src_start[d] + i) * sstride[d];
            t += (dst_start[d] + i) * dstride[d];
        }
        int rc = fn(ctx, s * bits / 8, t * bits / 8, run_bytes);
        if (rc < 0)
            return rc;
        /* odometer over the outer dims [0, inner) */
        size_t d = inner;
        for (;;) {
            if (d == 0)
                return SHS_OK;
            d--;
            if (++idx[d] < count[d])
                break;
            idx[d] = 0;
        }
    }
}

int shs__box_runs(shs_dtype dtype, size_t ndim, const uint64_t *shape, const uint64_t *start,
                  const uint64_t *count, shs__run_fn fn, void *ctx)
{
    uint64_t zero[SHS_MAX_DIMS] = { 0 };
    return shs__box_runs2(shs_dtype_bits(dtype), ndim, shape, start, count, zero, count, fn, ctx);
}

int shs__box_intersect(size_t ndim, const uint64_t *a_off, const uint64_t *a_shape,
                       const uint64_t *b_off, const uint64_t *b_shape, uint64_t *out_off,
                       uint64_t *out_shape)
{
    for (size_t d = 0; d < ndim; d++) {
        uint64_t lo = a_off[d] > b_off[d] ? a_off[d] : b_off[d];
        uint64_t ae = a_off[d] + a_shape[d], be = b_off[d] + b_shape[d];
        uint64_t hi = ae < be ? ae : be;
        if (hi <= lo)
            return 0;
        out_off[d] = lo;
        out_shape[d] = hi - lo;
    }
    return 1;
}

typedef struct copy_ctx {
    char *dst;
    const char *src;
} copy_ctx;

static int copy_run(void *ctx, uint64_t s, uint64_t d, uint64_t len)
{
    copy_ctx *c = ctx;
    memcpy(c->dst + d, c->src + s, (size_t)len);
    return SHS_OK;
}

void shs__box_copy(void *dst, const uint64_t *dst_shape, const uint64_t *dst_start, const void *src,
                   const uint64_t *src_shape, const uint64_t *src_start, const uint64_t *count,
                   size_t ndim, unsigned bits)
{
    copy_ctx c = { dst, src };
    shs__box_runs2(bits, ndim, src_shape, src_start, dst_shape, dst_start, count, copy_run, &c);
}
