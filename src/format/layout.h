/*
 * layout.h -- pure N-d box math (no I/O): boxes inside row-major tensors,
 * and the contiguous byte runs that a strided copy of a box consists of.
 */
#ifndef SHS_LAYOUT_H
#define SHS_LAYOUT_H

#include "common/internal.h"

/* Check that the box [start, start + count) lies inside `shape` and that
   its innermost runs are whole bytes; *out_bytes = the box's dense size. */
int shs__box_check(uint64_t *out_bytes, shs_dtype dtype, size_t ndim, const uint64_t *shape,
                   const uint64_t *start, const uint64_t *count);

/* Called for each contiguous run: `len` bytes at byte `src_off` of the
   tensor go to byte `dst_off` of the dense box buffer. */
typedef int (*shs__run_fn)(void *ctx, uint64_t src_off, uint64_t dst_off, uint64_t len);

/* Enumerate the runs of a box (checked with shs__box_check first), in
   increasing source order.  Trailing dimensions that the box covers fully
   are merged so runs are as long as possible.  Stops at the first
   negative return of `fn`. */
int shs__box_runs(shs_dtype dtype, size_t ndim, const uint64_t *shape, const uint64_t *start,
                  const uint64_t *count, shs__run_fn fn, void *ctx);

/* Runs of a copy between two dense row-major arrays: the box `count` at
   `src_start` of an array shaped `src_shape` goes to `dst_start` of one
   shaped `dst_shape`.  Element size in bits (whole-byte runs assumed). */
int shs__box_runs2(unsigned bits, size_t ndim, const uint64_t *src_shape, const uint64_t *src_start,
                   const uint64_t *dst_shape, const uint64_t *dst_start, const uint64_t *count,
                   shs__run_fn fn, void *ctx);

/* The strided copy itself, memory to memory. */
void shs__box_copy(void *dst, const uint64_t *dst_shape, const uint64_t *dst_start, const void *src,
                   const uint64_t *src_shape, const uint64_t *src_start, const uint64_t *count,
                   size_t ndim, unsigned bits);

/* Intersection of two boxes (offset + shape); returns 0 when empty. */
int shs__box_intersect(size_t ndim, const uint64_t *a_off, const uint64_t *a_shape,
                       const uint64_t *b_off, const uint64_t *b_shape, uint64_t *out_off,
                       uint64_t *out_shape);

#endif
