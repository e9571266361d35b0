/* layout.c -- N-d box math (see layout.h). */
#include "layout.h"

int shs__box_check(uint64_t *out_bytes, shs_dtype dtype, size_t ndim,
                   const uint64_t *shape, const uint64_t *start,
                   const uint64_t *count)
{
    uint64_t numel = 1;
    if (ndim > SHS_MAX_DIMS)
        return shs__err(SHS_EINVAL, "%zu dimensions (at most %d)", ndim, SHS_MAX_DIMS);
    for (size_t d = 0; d < ndim; d++) {
        if (start[d] > shape[d] || count[d] > shape[d] - start[d])
            return shs__err(SHS_ERANGE,
                            "box [%llu, +%llu) is outside dimension %zu of size %llu",
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

int shs__box_runs(shs_dtype dtype, size_t ndim, const uint64_t *shape,
                  const uint64_t *start, const uint64_t *count,
                  shs__run_fn fn, void *ctx)
{
    unsigned bits = shs_dtype_bits(dtype);
    for (size_t d = 0; d < ndim; d++)
        if (count[d] == 0)
            return SHS_OK;
    /* Merge trailing dimensions the box covers fully into one run. */
    size_t inner = ndim; /* dims [inner, ndim) are merged into the run */
    uint64_t run_elems = 1;
    while (inner > 0) {
        size_t d = inner - 1;
        run_elems *= count[d];
        inner = d;
        if (count[d] != shape[d])
            break;
    }
    /* row strides in elements */
    uint64_t stride[SHS_MAX_DIMS + 1];
    uint64_t acc = 1;
    for (size_t d = ndim; d-- > 0;) {
        stride[d] = acc;
        acc *= shape[d];
    }
    uint64_t run_bytes = run_elems * bits / 8;
    uint64_t idx[SHS_MAX_DIMS] = { 0 };
    uint64_t dst = 0;
    for (;;) {
        uint64_t src = 0;
        for (size_t d = 0; d < ndim; d++)
            src += (start[d] + (d < inner ? idx[d] : 0)) * stride[d];
        int rc = fn(ctx, src * bits / 8, dst, run_bytes);
        if (rc < 0)
            return rc;
        dst += run_bytes;
        /* odometer over the outer dims [0, inner) */
        size_t d = inner;
        while (d > 0) {
            d--;
            if (++idx[d] < count[d])
                break;
            idx[d] = 0;
            if (d == 0)
                return SHS_OK;
        }
        if (inner == 0)
            return SHS_OK;
    }
}
