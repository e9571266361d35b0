/* test_layout.c -- N-d box math (src/format/layout.c).
 *
 * shs__box_copy / shs__box_runs2 / shs__box_runs are checked against a
 * naive element-by-element reference (index arithmetic per element), on
 * thousands of random shapes with a fixed seed.  The runs themselves are
 * checked structurally: in increasing source order, never overlapping on
 * either side, inside both arrays, covering exactly the box, and as few as
 * possible (compared with a greedy count over the element mapping).
 */
#include "testutil.h"
#include "common/internal.h"
#include "format/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SENTINEL 0xA5

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * UINT64_C(0x2545F4914F6CDD1D);
}

/* uniform-ish in [lo, hi] */
static uint64_t rng_range(uint64_t lo, uint64_t hi)
{
    return lo + rng_next() % (hi - lo + 1);
}

typedef struct run {
    uint64_t src, dst, len;
} run;

typedef struct run_log {
    run *runs;
    size_t n, cap;
    long stop_at; /* return -77 on this call index (0-based); -1 = never */
    int ret_pos;  /* return this (non-negative) value otherwise */
} run_log;

static void log_init(run_log *l)
{
    l->runs = NULL;
    l->n = l->cap = 0;
    l->stop_at = -1;
    l->ret_pos = 0;
}

static void log_free(run_log *l)
{
    free(l->runs);
    log_init(l);
}

static int log_run(void *ctx, uint64_t src_off, uint64_t dst_off, uint64_t len)
{
    run_log *l = ctx;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->runs = realloc(l->runs, l->cap * sizeof *l->runs);
        assert_non_null(l->runs);
    }
    l->runs[l->n].src = src_off;
    l->runs[l->n].dst = dst_off;
    l->runs[l->n].len = len;
    l->n++;
    if (l->stop_at >= 0 && (long)(l->n - 1) == l->stop_at)
        return -77;
    return l->ret_pos;
}

static uint64_t prod(size_t ndim, const uint64_t *v)
{
    uint64_t p = 1;
    for (size_t d = 0; d < ndim; d++)
        p *= v[d];
    return p;
}

/* Linear (element) index of `start + idx` inside an array of `shape`. */
static uint64_t lin(size_t ndim, const uint64_t *shape, const uint64_t *start, const uint64_t *idx)
{
    uint64_t o = 0;
    for (size_t d = 0; d < ndim; d++)
        o = o * shape[d] + start[d] + idx[d];
    return o;
}

/* Advance an odometer over `count`; returns 0 when it wraps around. */
static int odo_next(size_t ndim, uint64_t *idx, const uint64_t *count)
{
    for (size_t d = ndim; d-- > 0;) {
        if (++idx[d] < count[d])
            return 1;
        idx[d] = 0;
    }
    return 0;
}

/* Naive reference copy: element by element, `es` bytes each. */
static void ref_copy(unsigned char *dst, const uint64_t *dshape, const uint64_t *dstart,
                     const unsigned char *src, const uint64_t *sshape, const uint64_t *sstart,
                     const uint64_t *count, size_t ndim, size_t es)
{
    uint64_t idx[SHS_MAX_DIMS] = { 0 };
    if (prod(ndim, count) == 0)
        return;
    do {
        uint64_t s = lin(ndim, sshape, sstart, idx);
        uint64_t t = lin(ndim, dshape, dstart, idx);
        memcpy(dst + t * es, src + s * es, es);
    } while (odo_next(ndim, idx, count));
}

/* Minimal number of runs: walk the box's elements in row-major (= source)
   order and count the places where the next element is not contiguous
   with the previous one in both arrays. */
static uint64_t ref_min_runs(size_t ndim, const uint64_t *sshape, const uint64_t *sstart,
                             const uint64_t *dshape, const uint64_t *dstart, const uint64_t *count)
{
    uint64_t idx[SHS_MAX_DIMS] = { 0 };
    if (prod(ndim, count) == 0)
        return 0;
    uint64_t runs = 1;
    uint64_t ps = lin(ndim, sshape, sstart, idx), pt = lin(ndim, dshape, dstart, idx);
    while (odo_next(ndim, idx, count)) {
        uint64_t s = lin(ndim, sshape, sstart, idx);
        uint64_t t = lin(ndim, dshape, dstart, idx);
        if (s != ps + 1 || t != pt + 1)
            runs++;
        ps = s;
        pt = t;
    }
    return runs;
}

/* Structural checks on a run log: non-empty runs, strictly increasing and
   non-overlapping source ranges, non-overlapping destination ranges, all
   inside the arrays, total length == box bytes, minimal count. */
static void check_runs(const run_log *l, size_t ndim, const uint64_t *sshape,
                       const uint64_t *sstart, const uint64_t *dshape, const uint64_t *dstart,
                       const uint64_t *count, unsigned bits)
{
    uint64_t sbytes = prod(ndim, sshape) * bits / 8;
    uint64_t dbytes = prod(ndim, dshape) * bits / 8;
    uint64_t total = 0;
    for (size_t i = 0; i < l->n; i++) {
        const run *r = &l->runs[i];
        assert_true(r->len > 0);
        assert_true(r->src + r->len <= sbytes);
        assert_true(r->dst + r->len <= dbytes);
        if (i > 0)
            assert_true(l->runs[i - 1].src + l->runs[i - 1].len <= r->src);
        total += r->len;
    }
    /* destination ranges disjoint: sort a copy by dst */
    if (l->n > 1) {
        run *c = malloc(l->n * sizeof *c);
        assert_non_null(c);
        memcpy(c, l->runs, l->n * sizeof *c);
        for (size_t i = 1; i < l->n; i++) { /* insertion sort; n is small */
            run x = c[i];
            size_t j = i;
            while (j > 0 && c[j - 1].dst > x.dst) {
                c[j] = c[j - 1];
                j--;
            }
            c[j] = x;
        }
        for (size_t i = 1; i < l->n; i++)
            assert_true(c[i - 1].dst + c[i - 1].len <= c[i].dst);
        free(c);
    }
    assert_true(total == prod(ndim, count) * bits / 8);
    uint64_t want = ref_min_runs(ndim, sshape, sstart, dshape, dstart, count);
    if (l->n != want)
        fail_msg("got %zu runs, minimal is %llu", l->n, (unsigned long long)want);
}

static void print_case(size_t ndim, const uint64_t *sshape, const uint64_t *sstart,
                       const uint64_t *dshape, const uint64_t *dstart, const uint64_t *count,
                       unsigned bits)
{
    fprintf(stderr, "case: bits=%u ndim=%zu", bits, ndim);
    const char *nm[5] = { "src_shape", "src_start", "dst_shape", "dst_start", "count" };
    const uint64_t *v[5] = { sshape, sstart, dshape, dstart, count };
    for (int k = 0; k < 5; k++) {
        fprintf(stderr, " %s=[", nm[k]);
        for (size_t d = 0; d < ndim; d++)
            fprintf(stderr, "%s%llu", d ? "," : "", (unsigned long long)v[k][d]);
        fprintf(stderr, "]");
    }
    fprintf(stderr, "\n");
}

/* ------------------------------------------------------------------------
 * shs__box_intersect
 * ---------------------------------------------------------------------- */

/* Reference: per dimension, scan (small) coordinates for membership. */
static int ref_intersect(size_t ndim, const uint64_t *ao, const uint64_t *as, const uint64_t *bo,
                         const uint64_t *bs, uint64_t *oo, uint64_t *os)
{
    for (size_t d = 0; d < ndim; d++) {
        uint64_t first = 0, n = 0;
        for (uint64_t x = 0; x < 64; x++) {
            int in = x >= ao[d] && x < ao[d] + as[d] && x >= bo[d] && x < bo[d] + bs[d];
            if (in) {
                if (n == 0)
                    first = x;
                n++;
            }
        }
        if (n == 0)
            return 0;
        oo[d] = first;
        os[d] = n;
    }
    return 1;
}

static void expect_isect(size_t ndim, const uint64_t *ao, const uint64_t *as, const uint64_t *bo,
                         const uint64_t *bs, int want, const uint64_t *wo, const uint64_t *ws)
{
    uint64_t oo[8], os[8];
    /* both argument orders give the same answer */
    for (int swap = 0; swap < 2; swap++) {
        memset(oo, 0xEE, sizeof oo);
        memset(os, 0xEE, sizeof os);
        int r = swap ? shs__box_intersect(ndim, bo, bs, ao, as, oo, os)
                     : shs__box_intersect(ndim, ao, as, bo, bs, oo, os);
        assert_int_equal(r, want);
        if (want)
            for (size_t d = 0; d < ndim; d++) {
                assert_true(oo[d] == wo[d]);
                assert_true(os[d] == ws[d]);
            }
    }
}

static void test_intersect_disjoint(void **state)
{
    (void)state;
    /* 1-d */
    {
        uint64_t ao[] = { 0 }, as[] = { 3 }, bo[] = { 10 }, bs[] = { 5 };
        expect_isect(1, ao, as, bo, bs, 0, NULL, NULL);
    }
    /* 2-d: overlapping in dim 0, disjoint in dim 1 */
    {
        uint64_t ao[] = { 0, 0 }, as[] = { 10, 3 }, bo[] = { 2, 7 }, bs[] = { 3, 3 };
        expect_isect(2, ao, as, bo, bs, 0, NULL, NULL);
    }
    /* 3-d: disjoint only in the last dim */
    {
        uint64_t ao[] = { 0, 0, 0 }, as[] = { 4, 4, 4 }, bo[] = { 1, 1, 9 }, bs[] = { 2, 2, 2 };
        expect_isect(3, ao, as, bo, bs, 0, NULL, NULL);
    }
    /* 4-d: disjoint only in the first dim */
    {
        uint64_t ao[] = { 0, 0, 0, 0 }, as[] = { 2, 9, 9, 9 }, bo[] = { 5, 1, 1, 1 },
                 bs[] = { 2, 2, 2, 2 };
        expect_isect(4, ao, as, bo, bs, 0, NULL, NULL);
    }
}

static void test_intersect_touching(void **state)
{
    (void)state;
    /* [0,5) and [5,9): share an edge only -> empty */
    {
        uint64_t ao[] = { 0 }, as[] = { 5 }, bo[] = { 5 }, bs[] = { 4 };
        expect_isect(1, ao, as, bo, bs, 0, NULL, NULL);
    }
    /* touching in dim 1 of 2, overlapping in dim 0 */
    {
        uint64_t ao[] = { 0, 0 }, as[] = { 4, 4 }, bo[] = { 1, 4 }, bs[] = { 2, 4 };
        expect_isect(2, ao, as, bo, bs, 0, NULL, NULL);
    }
    /* touching in a corner (3-d) */
    {
        uint64_t ao[] = { 0, 0, 0 }, as[] = { 2, 2, 2 }, bo[] = { 2, 2, 2 }, bs[] = { 2, 2, 2 };
        expect_isect(3, ao, as, bo, bs, 0, NULL, NULL);
    }
    /* touching in dim 3 of 4 */
    {
        uint64_t ao[] = { 0, 0, 0, 0 }, as[] = { 3, 3, 3, 3 }, bo[] = { 1, 1, 1, 3 },
                 bs[] = { 1, 1, 1, 1 };
        expect_isect(4, ao, as, bo, bs, 0, NULL, NULL);
    }
    /* overlapping by exactly one element */
    {
        uint64_t ao[] = { 0 }, as[] = { 5 }, bo[] = { 4 }, bs[] = { 4 };
        uint64_t wo[] = { 4 }, ws[] = { 1 };
        expect_isect(1, ao, as, bo, bs, 1, wo, ws);
    }
}

static void test_intersect_nested(void **state)
{
    (void)state;
    {
        uint64_t ao[] = { 0 }, as[] = { 100 }, bo[] = { 10 }, bs[] = { 20 };
        uint64_t wo[] = { 10 }, ws[] = { 20 };
        expect_isect(1, ao, as, bo, bs, 1, wo, ws);
    }
    {
        uint64_t ao[] = { 0, 0, 0 }, as[] = { 8, 8, 8 }, bo[] = { 1, 2, 3 }, bs[] = { 4, 5, 5 };
        uint64_t wo[] = { 1, 2, 3 }, ws[] = { 4, 5, 5 };
        expect_isect(3, ao, as, bo, bs, 1, wo, ws);
    }
    /* identical boxes */
    {
        uint64_t ao[] = { 3, 4, 5, 6 }, as[] = { 1, 2, 3, 4 };
        expect_isect(4, ao, as, ao, as, 1, ao, as);
    }
    /* nested sharing one edge */
    {
        uint64_t ao[] = { 0, 0 }, as[] = { 10, 10 }, bo[] = { 0, 6 }, bs[] = { 10, 4 };
        uint64_t wo[] = { 0, 6 }, ws[] = { 10, 4 };
        expect_isect(2, ao, as, bo, bs, 1, wo, ws);
    }
}

static void test_intersect_partial(void **state)
{
    (void)state;
    {
        uint64_t ao[] = { 2 }, as[] = { 6 }, bo[] = { 5 }, bs[] = { 10 };
        uint64_t wo[] = { 5 }, ws[] = { 3 };
        expect_isect(1, ao, as, bo, bs, 1, wo, ws);
    }
    {
        uint64_t ao[] = { 0, 4 }, as[] = { 6, 6 }, bo[] = { 3, 0 }, bs[] = { 6, 6 };
        uint64_t wo[] = { 3, 4 }, ws[] = { 3, 2 };
        expect_isect(2, ao, as, bo, bs, 1, wo, ws);
    }
    {
        uint64_t ao[] = { 0, 0, 0 }, as[] = { 5, 5, 5 }, bo[] = { 4, 1, 3 }, bs[] = { 3, 2, 9 };
        uint64_t wo[] = { 4, 1, 3 }, ws[] = { 1, 2, 2 };
        expect_isect(3, ao, as, bo, bs, 1, wo, ws);
    }
    {
        uint64_t ao[] = { 1, 2, 3, 4 }, as[] = { 4, 4, 4, 4 }, bo[] = { 0, 3, 6, 2 },
                 bs[] = { 2, 10, 2, 3 };
        uint64_t wo[] = { 1, 3, 6, 4 }, ws[] = { 1, 3, 1, 1 };
        expect_isect(4, ao, as, bo, bs, 1, wo, ws);
    }
    /* ndim 0: two scalars always intersect */
    {
        uint64_t z[1] = { 0 };
        expect_isect(0, z, z, z, z, 1, z, z);
    }
}

static void test_intersect_zero_size(void **state)
{
    (void)state;
    /* a zero-size box inside the other */
    {
        uint64_t ao[] = { 5 }, as[] = { 0 }, bo[] = { 0 }, bs[] = { 10 };
        expect_isect(1, ao, as, bo, bs, 0, NULL, NULL);
    }
    /* both zero-size at the same place */
    {
        uint64_t ao[] = { 5, 5 }, as[] = { 0, 0 };
        expect_isect(2, ao, as, ao, as, 0, NULL, NULL);
    }
    /* zero in one dimension only, overlapping in all others */
    {
        uint64_t ao[] = { 0, 0, 0 }, as[] = { 4, 0, 4 }, bo[] = { 0, 0, 0 }, bs[] = { 4, 4, 4 };
        expect_isect(3, ao, as, bo, bs, 0, NULL, NULL);
    }
    /* zero-size at 0 against a box at 0 */
    {
        uint64_t ao[] = { 0 }, as[] = { 0 }, bo[] = { 0 }, bs[] = { 1 };
        expect_isect(1, ao, as, bo, bs, 0, NULL, NULL);
    }
}

static void test_intersect_huge_offsets(void **state)
{
    (void)state;
    const uint64_t T63 = UINT64_C(1) << 63;
    {
        uint64_t ao[] = { T63 - 10 }, as[] = { 20 }, bo[] = { T63 }, bs[] = { 1000 };
        uint64_t wo[] = { T63 }, ws[] = { 10 };
        expect_isect(1, ao, as, bo, bs, 1, wo, ws);
    }
    {
        uint64_t ao[] = { T63 + 5, 0 }, as[] = { 1u << 20, 3 }, bo[] = { T63 + 100, 1 },
                 bs[] = { UINT64_C(1) << 40, 1 };
        uint64_t wo[] = { T63 + 100, 1 }, ws[] = { (1u << 20) + 5 - 100, 1 };
        expect_isect(2, ao, as, bo, bs, 1, wo, ws);
    }
    /* disjoint and touching near 2^63 */
    {
        uint64_t ao[] = { T63 - 4 }, as[] = { 4 }, bo[] = { T63 }, bs[] = { 4 };
        expect_isect(1, ao, as, bo, bs, 0, NULL, NULL);
        uint64_t co[] = { T63 + 100 };
        expect_isect(1, ao, as, co, bs, 0, NULL, NULL);
    }
    /* ends close to 2^64 without wrapping */
    {
        uint64_t big = UINT64_MAX - 1000;
        uint64_t ao[] = { big }, as[] = { 1000 }, bo[] = { big + 500 }, bs[] = { 500 };
        uint64_t wo[] = { big + 500 }, ws[] = { 500 };
        expect_isect(1, ao, as, bo, bs, 1, wo, ws);
    }
    /* a huge box (offset 0, size 2^63 + 2^62) and a small one far out */
    {
        uint64_t ao[] = { 0, T63 }, as[] = { T63 + (T63 >> 1), 8 }, bo[] = { T63 + 7, T63 + 6 },
                 bs[] = { 3, 4 };
        uint64_t wo[] = { T63 + 7, T63 + 6 }, ws[] = { 3, 2 };
        expect_isect(2, ao, as, bo, bs, 1, wo, ws);
    }
}

static void test_intersect_random(void **state)
{
    (void)state;
    rng_state = UINT64_C(0x1234567887654321);
    for (int iter = 0; iter < 5000; iter++) {
        size_t ndim = (size_t)rng_range(1, 4);
        uint64_t ao[4], as[4], bo[4], bs[4], wo[4], ws[4];
        for (size_t d = 0; d < ndim; d++) {
            ao[d] = rng_range(0, 20);
            as[d] = rng_range(0, 12);
            bo[d] = rng_range(0, 20);
            bs[d] = rng_range(0, 12);
        }
        int want = ref_intersect(ndim, ao, as, bo, bs, wo, ws);
        expect_isect(ndim, ao, as, bo, bs, want, wo, ws);
        /* the same boxes shifted to near 2^63 */
        uint64_t sh = (UINT64_C(1) << 63) - 10;
        for (size_t d = 0; d < ndim; d++) {
            ao[d] += sh;
            bo[d] += sh;
            wo[d] += sh;
        }
        expect_isect(ndim, ao, as, bo, bs, want, wo, ws);
    }
}

/* ------------------------------------------------------------------------
 * shs__box_check
 * ---------------------------------------------------------------------- */

static int check(uint64_t *bytes, shs_dtype dt, size_t ndim, const uint64_t *shape,
                 const uint64_t *start, const uint64_t *count)
{
    *bytes = UINT64_C(0xDEADBEEF);
    return shs__box_check(bytes, dt, ndim, shape, start, count);
}

static void test_check_in_range(void **state)
{
    (void)state;
    uint64_t b;
    uint64_t shape[] = { 4, 5, 6 };
    {
        uint64_t st[] = { 0, 0, 0 }, ct[] = { 4, 5, 6 };
        assert_int_equal(check(&b, SHS_F32, 3, shape, st, ct), SHS_OK);
        assert_true(b == 4 * 5 * 6 * 4);
        assert_int_equal(check(&b, SHS_U8, 3, shape, st, ct), SHS_OK);
        assert_true(b == 120);
        assert_int_equal(check(&b, SHS_F64, 3, shape, st, ct), SHS_OK);
        assert_true(b == 960);
        assert_int_equal(check(&b, SHS_BF16, 3, shape, st, ct), SHS_OK);
        assert_true(b == 240);
    }
    {
        uint64_t st[] = { 1, 2, 3 }, ct[] = { 3, 3, 3 }; /* ends exactly at the edge */
        assert_int_equal(check(&b, SHS_I16, 3, shape, st, ct), SHS_OK);
        assert_true(b == 27 * 2);
    }
    {
        /* empty box at the very end of every dimension */
        uint64_t st[] = { 4, 5, 6 }, ct[] = { 0, 0, 0 };
        assert_int_equal(check(&b, SHS_F32, 3, shape, st, ct), SHS_OK);
        assert_true(b == 0);
    }
    {
        /* zero count in one dimension: zero bytes */
        uint64_t st[] = { 0, 1, 0 }, ct[] = { 4, 0, 6 };
        assert_int_equal(check(&b, SHS_F32, 3, shape, st, ct), SHS_OK);
        assert_true(b == 0);
    }
    {
        /* scalar */
        uint64_t z[1] = { 0 };
        assert_int_equal(check(&b, SHS_F64, 0, z, z, z), SHS_OK);
        assert_true(b == 8);
        assert_int_equal(check(&b, SHS_BOOL, 0, z, z, z), SHS_OK);
        assert_true(b == 1);
    }
    {
        /* zero-size tensor, zero-size box */
        uint64_t sh[] = { 0, 7 }, st[] = { 0, 7 }, ct[] = { 0, 0 };
        assert_int_equal(check(&b, SHS_C64, 2, sh, st, ct), SHS_OK);
        assert_true(b == 0);
    }
    {
        /* huge but realistic shapes: a 2^40 x 2^10 tensor, box near its end */
        uint64_t sh[] = { UINT64_C(1) << 40, 1024 };
        uint64_t st[] = { (UINT64_C(1) << 40) - 3, 1000 }, ct[] = { 3, 24 };
        assert_int_equal(check(&b, SHS_F64, 2, sh, st, ct), SHS_OK);
        assert_true(b == 3 * 24 * 8);
    }
    {
        /* SHS_MAX_DIMS dimensions of size 1 are fine */
        uint64_t ones[SHS_MAX_DIMS], zeros[SHS_MAX_DIMS] = { 0 };
        for (int d = 0; d < SHS_MAX_DIMS; d++)
            ones[d] = 1;
        assert_int_equal(check(&b, SHS_I32, SHS_MAX_DIMS, ones, zeros, ones), SHS_OK);
        assert_true(b == 4);
    }
}

static void test_check_out_of_range(void **state)
{
    (void)state;
    uint64_t b;
    uint64_t shape[] = { 4, 5, 6 };
    /* start > shape in each dimension (count 0) */
    for (int d = 0; d < 3; d++) {
        uint64_t st[] = { 0, 0, 0 }, ct[] = { 1, 1, 1 };
        st[d] = shape[d] + 1;
        ct[d] = 0;
        assert_int_equal(check(&b, SHS_F32, 3, shape, st, ct), SHS_ERANGE);
        assert_non_null(shs_last_error());
        assert_true(shs_last_error()[0] != '\0');
    }
    /* start + count > shape by one, in each dimension */
    for (int d = 0; d < 3; d++) {
        uint64_t st[] = { 1, 1, 1 }, ct[] = { 1, 1, 1 };
        ct[d] = shape[d]; /* 1 + shape > shape */
        assert_int_equal(check(&b, SHS_F32, 3, shape, st, ct), SHS_ERANGE);
        uint64_t st2[] = { 0, 0, 0 }, ct2[] = { 4, 5, 6 };
        ct2[d] = shape[d] + 1;
        assert_int_equal(check(&b, SHS_F32, 3, shape, st2, ct2), SHS_ERANGE);
    }
    /* start == shape with a non-zero count */
    {
        uint64_t st[] = { 0, 5, 0 }, ct[] = { 1, 1, 1 };
        assert_int_equal(check(&b, SHS_U8, 3, shape, st, ct), SHS_ERANGE);
    }
    /* start + count wraps around 2^64 */
    {
        uint64_t st[] = { 2, 0, 0 }, ct[] = { UINT64_MAX - 1, 1, 1 }; /* sum = 0 */
        assert_int_equal(check(&b, SHS_F32, 3, shape, st, ct), SHS_ERANGE);
        uint64_t st2[] = { 0, 0, 3 }, ct2[] = { 1, 1, UINT64_MAX }; /* sum = 2 */
        assert_int_equal(check(&b, SHS_F32, 3, shape, st2, ct2), SHS_ERANGE);
        uint64_t st3[] = { UINT64_MAX, 0, 0 }, ct3[] = { 2, 1, 1 }; /* sum = 1 */
        assert_int_equal(check(&b, SHS_F32, 3, shape, st3, ct3), SHS_ERANGE);
        uint64_t st4[] = { UINT64_MAX, 0, 0 }, ct4[] = { 0, 1, 1 };
        assert_int_equal(check(&b, SHS_F32, 3, shape, st4, ct4), SHS_ERANGE);
    }
    /* huge shape and start, count just past the end */
    {
        uint64_t sh[] = { UINT64_C(1) << 62 }, st[] = { (UINT64_C(1) << 62) - 1 }, ct[] = { 2 };
        assert_int_equal(check(&b, SHS_U8, 1, sh, st, ct), SHS_ERANGE);
        ct[0] = 1;
        assert_int_equal(check(&b, SHS_U8, 1, sh, st, ct), SHS_OK);
        assert_true(b == 1);
    }
    /* too many dimensions */
    {
        uint64_t ones[SHS_MAX_DIMS + 1], zeros[SHS_MAX_DIMS + 1] = { 0 };
        for (int d = 0; d < SHS_MAX_DIMS + 1; d++)
            ones[d] = 1;
        assert_int_equal(check(&b, SHS_U8, SHS_MAX_DIMS + 1, ones, zeros, ones), SHS_EINVAL);
    }
}

static void test_check_subbyte(void **state)
{
    (void)state;
    uint64_t b;
    /* F4: 4 bits; last-dim start, count and row length must be even */
    {
        uint64_t sh[] = { 3, 8 };
        uint64_t st[] = { 1, 2 }, ct[] = { 2, 4 };
        assert_int_equal(check(&b, SHS_F4, 2, sh, st, ct), SHS_OK);
        assert_true(b == 2 * 4 / 2);
        /* whole tensor */
        uint64_t z[] = { 0, 0 };
        assert_int_equal(check(&b, SHS_F4, 2, sh, z, sh), SHS_OK);
        assert_true(b == 12);
        /* odd start in the last dim */
        uint64_t st1[] = { 0, 1 }, ct1[] = { 1, 2 };
        assert_int_equal(check(&b, SHS_F4, 2, sh, st1, ct1), SHS_EINVAL);
        /* odd count in the last dim */
        uint64_t st2[] = { 0, 2 }, ct2[] = { 1, 3 };
        assert_int_equal(check(&b, SHS_F4, 2, sh, st2, ct2), SHS_EINVAL);
        /* odd start and count in outer dims are fine */
        uint64_t st3[] = { 1, 0 }, ct3[] = { 1, 8 };
        assert_int_equal(check(&b, SHS_F4, 2, sh, st3, ct3), SHS_OK);
        assert_true(b == 4);
        /* zero count in the last dim: even, fine */
        uint64_t st4[] = { 0, 4 }, ct4[] = { 3, 0 };
        assert_int_equal(check(&b, SHS_F4, 2, sh, st4, ct4), SHS_OK);
        assert_true(b == 0);
    }
    /* odd row length: even a whole-row box is rejected */
    {
        uint64_t sh[] = { 2, 7 }, st[] = { 0, 0 }, ct[] = { 1, 6 };
        assert_int_equal(check(&b, SHS_F4, 2, sh, st, ct), SHS_EINVAL);
        uint64_t st2[] = { 0, 2 }, ct2[] = { 2, 4 };
        assert_int_equal(check(&b, SHS_F4, 2, sh, st2, ct2), SHS_EINVAL);
    }
    /* 1-d F4 */
    {
        uint64_t sh[] = { 10 }, st[] = { 4 }, ct[] = { 6 };
        assert_int_equal(check(&b, SHS_F4, 1, sh, st, ct), SHS_OK);
        assert_true(b == 3);
        ct[0] = 5;
        assert_int_equal(check(&b, SHS_F4, 1, sh, st, ct), SHS_EINVAL);
    }
    /* out of range wins or not, it must still be an error */
    {
        uint64_t sh[] = { 10 }, st[] = { 4 }, ct[] = { 8 };
        assert_int_not_equal(check(&b, SHS_F4, 1, sh, st, ct), SHS_OK);
    }
    /* F6 (6 bits): multiples of 4 elements in the last dim */
    {
        uint64_t sh[] = { 2, 12 }, st[] = { 0, 4 }, ct[] = { 2, 8 };
        assert_int_equal(check(&b, SHS_F6_E2M3, 2, sh, st, ct), SHS_OK);
        assert_true(b == 2 * 8 * 6 / 8);
        uint64_t st2[] = { 0, 2 }, ct2[] = { 2, 8 };
        assert_int_equal(check(&b, SHS_F6_E3M2, 2, sh, st2, ct2), SHS_EINVAL);
        uint64_t st3[] = { 0, 4 }, ct3[] = { 2, 6 };
        assert_int_equal(check(&b, SHS_F6_E3M2, 2, sh, st3, ct3), SHS_EINVAL);
        uint64_t sh4[] = { 2, 10 }, st4[] = { 0, 0 }, ct4[] = { 1, 8 };
        assert_int_equal(check(&b, SHS_F6_E3M2, 2, sh4, st4, ct4), SHS_EINVAL);
    }
}

/* Byte count agrees with numel * bits / 8 for every dtype on random boxes;
   in-range verdict agrees with a direct (wide) comparison. */
static void test_check_random(void **state)
{
    (void)state;
    rng_state = UINT64_C(0xC0FFEE1234);
    for (int iter = 0; iter < 5000; iter++) {
        size_t ndim = (size_t)rng_range(0, 5);
        uint64_t sh[5], st[5], ct[5];
        int in = 1;
        for (size_t d = 0; d < ndim; d++) {
            sh[d] = rng_range(0, 9);
            st[d] = rng_range(0, 10);
            ct[d] = rng_range(0, 10);
            if (st[d] > sh[d] || st[d] + ct[d] > sh[d])
                in = 0;
        }
        shs_dtype dt = (shs_dtype)rng_range(0, SHS_DTYPE_COUNT - 1);
        unsigned bits = shs_dtype_bits(dt);
        uint64_t b;
        int rc = check(&b, dt, ndim, sh, st, ct);
        if (!in) {
            assert_int_not_equal(rc, SHS_OK);
            continue;
        }
        int whole = 1;
        if (bits % 8) {
            uint64_t is = ndim ? st[ndim - 1] : 0, ic = ndim ? ct[ndim - 1] : 1,
                     row = ndim ? sh[ndim - 1] : 1;
            whole = (is * bits) % 8 == 0 && (ic * bits) % 8 == 0 && (row * bits) % 8 == 0;
        }
        if (!whole) {
            assert_int_equal(rc, SHS_EINVAL);
            continue;
        }
        assert_int_equal(rc, SHS_OK);
        assert_true(b == prod(ndim, ct) * bits / 8);
    }
}

/* ------------------------------------------------------------------------
 * shs__box_runs2 / shs__box_copy / shs__box_runs against the reference
 * ---------------------------------------------------------------------- */

static void fill_random(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)rng_next();
}

/* One case: runs2 checked structurally, box_copy checked byte for byte
   against the reference (dst pre-filled with a sentinel). */
static void one_copy_case(size_t ndim, const uint64_t *sshape, const uint64_t *sstart,
                          const uint64_t *dshape, const uint64_t *dstart, const uint64_t *count,
                          unsigned bits)
{
    size_t es = bits / 8;
    size_t sn = (size_t)prod(ndim, sshape) * es, dn = (size_t)prod(ndim, dshape) * es;
    unsigned char *src = malloc(sn ? sn : 1);
    unsigned char *dst = malloc(dn ? dn : 1);
    unsigned char *want = malloc(dn ? dn : 1);
    assert_non_null(src);
    assert_non_null(dst);
    assert_non_null(want);
    fill_random(src, sn);
    memset(dst, SENTINEL, dn);
    memset(want, SENTINEL, dn);

    run_log l;
    log_init(&l);
    int rc = shs__box_runs2(bits, ndim, sshape, sstart, dshape, dstart, count, log_run, &l);
    if (rc != SHS_OK)
        print_case(ndim, sshape, sstart, dshape, dstart, count, bits);
    assert_int_equal(rc, SHS_OK);
    uint64_t want_runs = ref_min_runs(ndim, sshape, sstart, dshape, dstart, count);
    if (l.n != want_runs)
        print_case(ndim, sshape, sstart, dshape, dstart, count, bits);
    check_runs(&l, ndim, sshape, sstart, dshape, dstart, count, bits);

    /* the runs, applied by hand, give the reference result */
    ref_copy(want, dshape, dstart, src, sshape, sstart, count, ndim, es);
    for (size_t i = 0; i < l.n; i++)
        memcpy(dst + l.runs[i].dst, src + l.runs[i].src, (size_t)l.runs[i].len);
    if (memcmp(dst, want, dn) != 0) {
        print_case(ndim, sshape, sstart, dshape, dstart, count, bits);
        fail_msg("runs2 result differs from the reference");
    }
    log_free(&l);

    /* shs__box_copy itself */
    memset(dst, SENTINEL, dn);
    shs__box_copy(dst, dshape, dstart, src, sshape, sstart, count, ndim, bits);
    if (memcmp(dst, want, dn) != 0) {
        print_case(ndim, sshape, sstart, dshape, dstart, count, bits);
        fail_msg("shs__box_copy result differs from the reference");
    }
    free(src);
    free(dst);
    free(want);
}

static void random_box_case(unsigned bits, int allow_zero)
{
    size_t ndim = (size_t)rng_range(1, 5);
    uint64_t ss[5], sst[5], ds[5], dst[5], ct[5];
    for (size_t d = 0; d < ndim; d++) {
        ss[d] = rng_range(1, 7);
        ds[d] = rng_range(1, 7);
        /* bias towards equal extents so whole-dimension merging is exercised */
        switch (rng_next() % 4) {
        case 0: ds[d] = ss[d]; break;
        default: break;
        }
        uint64_t maxc = ss[d] < ds[d] ? ss[d] : ds[d];
        ct[d] = rng_range(allow_zero ? 0 : 1, maxc);
        if (rng_next() % 3 == 0)
            ct[d] = maxc; /* full in the smaller array */
        sst[d] = rng_range(0, ss[d] - ct[d]);
        dst[d] = rng_range(0, ds[d] - ct[d]);
    }
    one_copy_case(ndim, ss, sst, ds, dst, ct, bits);
}

static void test_copy_random(void **state)
{
    (void)state;
    static const unsigned k_bits[] = { 8, 16, 32, 64 };
    rng_state = UINT64_C(0x5EED5EED5EED5EED);
    for (int iter = 0; iter < 8000; iter++)
        random_box_case(k_bits[iter % 4], iter % 10 == 9);
}

/* Same-shape source and destination (the most merge-friendly case). */
static void test_copy_random_same_shape(void **state)
{
    (void)state;
    static const unsigned k_bits[] = { 8, 16, 32, 64 };
    rng_state = UINT64_C(0xABCDEF0123456789);
    for (int iter = 0; iter < 4000; iter++) {
        size_t ndim = (size_t)rng_range(1, 5);
        uint64_t sh[5], a[5], b[5], ct[5];
        for (size_t d = 0; d < ndim; d++) {
            sh[d] = rng_range(1, 7);
            ct[d] = rng_next() % 2 ? sh[d] : rng_range(1, sh[d]);
            a[d] = rng_range(0, sh[d] - ct[d]);
            b[d] = rng_range(0, sh[d] - ct[d]);
        }
        one_copy_case(ndim, sh, a, sh, b, ct, k_bits[iter % 4]);
    }
}

/* shs__box_runs: the destination is the dense box buffer, runs in order
   and back to back there. */
static void test_runs_random(void **state)
{
    (void)state;
    static const shs_dtype k_dt[] = { SHS_U8, SHS_F16, SHS_F32, SHS_F64, SHS_F4 };
    rng_state = UINT64_C(0x0DDBA11CAFEF00D);
    for (int iter = 0; iter < 4000; iter++) {
        shs_dtype dt = k_dt[iter % 5];
        unsigned bits = shs_dtype_bits(dt);
        size_t ndim = (size_t)rng_range(1, 5);
        uint64_t sh[5], st[5], ct[5], zero[5] = { 0 };
        for (size_t d = 0; d < ndim; d++) {
            sh[d] = rng_range(1, 7);
            ct[d] = rng_next() % 2 ? sh[d] : rng_range(1, sh[d]);
            st[d] = rng_range(0, sh[d] - ct[d]);
        }
        if (bits % 8) { /* F4: make the last dim whole bytes */
            size_t L = ndim - 1;
            sh[L] = 2 * rng_range(1, 4);
            ct[L] = 2 * rng_range(1, sh[L] / 2);
            st[L] = 2 * rng_range(0, (sh[L] - ct[L]) / 2);
        }
        uint64_t bytes;
        assert_int_equal(shs__box_check(&bytes, dt, ndim, sh, st, ct), SHS_OK);
        run_log l;
        log_init(&l);
        assert_int_equal(shs__box_runs(dt, ndim, sh, st, ct, log_run, &l), SHS_OK);
        check_runs(&l, ndim, sh, st, ct, zero, ct, bits);
        uint64_t at = 0;
        for (size_t i = 0; i < l.n; i++) {
            assert_true(l.runs[i].dst == at);
            at += l.runs[i].len;
        }
        assert_true(at == bytes);
        /* element-level check of the mapping (byte-sized types) */
        if (bits % 8 == 0) {
            size_t es = bits / 8;
            size_t sn = (size_t)prod(ndim, sh) * es, bn = (size_t)bytes;
            unsigned char *src = malloc(sn), *got = malloc(bn), *want = malloc(bn);
            assert_non_null(src);
            assert_non_null(got);
            assert_non_null(want);
            fill_random(src, sn);
            memset(got, SENTINEL, bn);
            memset(want, SENTINEL, bn);
            for (size_t i = 0; i < l.n; i++)
                memcpy(got + l.runs[i].dst, src + l.runs[i].src, (size_t)l.runs[i].len);
            ref_copy(want, ct, zero, src, sh, st, ct, ndim, es);
            assert_memory_equal(got, want, bn);
            free(src);
            free(got);
            free(want);
        } else {
            /* F4: byte offsets from nibble indices */
            uint64_t idx[5] = { 0 };
            size_t r = 0;
            uint64_t in_run = 0;
            do {
                uint64_t s = lin(ndim, sh, st, idx);
                if (idx[ndim - 1] % 2 == 0) {
                    /* each byte-pair of elements lies in some run at the
                       right source byte */
                    while (r < l.n && in_run >= l.runs[r].len) {
                        r++;
                        in_run = 0;
                    }
                    assert_true(r < l.n);
                    assert_true(l.runs[r].src + in_run == s / 2);
                    in_run++;
                }
            } while (odo_next(ndim, idx, ct));
        }
        log_free(&l);
    }
}

/* Sub-byte (F4) runs2/copy on random boxes whose last dimension is even. */
static void test_copy_random_f4(void **state)
{
    (void)state;
    rng_state = UINT64_C(0xF4F4F4F4F4F4F4F4);
    for (int iter = 0; iter < 2000; iter++) {
        size_t ndim = (size_t)rng_range(1, 4);
        uint64_t ss[4], a[4], ds[4], b[4], ct[4];
        for (size_t d = 0; d < ndim; d++) {
            ss[d] = rng_range(1, 6);
            ds[d] = rng_next() % 3 ? ss[d] : rng_range(1, 6);
            if (d == ndim - 1) {
                ss[d] = 2 * rng_range(1, 3);
                ds[d] = rng_next() % 2 ? ss[d] : 2 * rng_range(1, 3);
            }
            uint64_t m = ss[d] < ds[d] ? ss[d] : ds[d];
            ct[d] = rng_next() % 2 ? m : rng_range(1, m);
            if (d == ndim - 1 && ct[d] % 2)
                ct[d]--;
            if (ct[d] == 0)
                ct[d] = 2;
            a[d] = rng_range(0, ss[d] - ct[d]);
            b[d] = rng_range(0, ds[d] - ct[d]);
            if (d == ndim - 1) {
                a[d] &= ~UINT64_C(1);
                b[d] &= ~UINT64_C(1);
            }
        }
        /* reference on "byte elements": halve the last dimension */
        uint64_t ss2[4], a2[4], ds2[4], b2[4], ct2[4];
        memcpy(ss2, ss, sizeof ss2);
        memcpy(a2, a, sizeof a2);
        memcpy(ds2, ds, sizeof ds2);
        memcpy(b2, b, sizeof b2);
        memcpy(ct2, ct, sizeof ct2);
        size_t L = ndim - 1;
        ss2[L] /= 2;
        a2[L] /= 2;
        ds2[L] /= 2;
        b2[L] /= 2;
        ct2[L] /= 2;
        size_t sn = (size_t)prod(ndim, ss2), dn = (size_t)prod(ndim, ds2);
        unsigned char *src = malloc(sn), *dst = malloc(dn), *want = malloc(dn);
        assert_non_null(src);
        assert_non_null(dst);
        assert_non_null(want);
        fill_random(src, sn);
        memset(dst, SENTINEL, dn);
        memset(want, SENTINEL, dn);
        ref_copy(want, ds2, b2, src, ss2, a2, ct2, ndim, 1);
        shs__box_copy(dst, ds, b, src, ss, a, ct, ndim, 4);
        if (memcmp(dst, want, dn) != 0) {
            print_case(ndim, ss, a, ds, b, ct, 4);
            fail_msg("F4 box_copy differs from the reference");
        }
        run_log l;
        log_init(&l);
        assert_int_equal(shs__box_runs2(4, ndim, ss, a, ds, b, ct, log_run, &l), SHS_OK);
        check_runs(&l, ndim, ss2, a2, ds2, b2, ct2, 8);
        log_free(&l);
        free(src);
        free(dst);
        free(want);
    }
}

/* ------------------------------------------------------------------------
 * Run counts, scalars, zero counts, callback protocol
 * ---------------------------------------------------------------------- */

static void test_runs_minimal_456(void **state)
{
    (void)state;
    uint64_t sh[] = { 4, 5, 6 };
    run_log l;
    static const unsigned k_bits[] = { 8, 16, 32, 64 };
    for (int k = 0; k < 4; k++) {
        unsigned bits = k_bits[k];
        uint64_t es = bits / 8;
        /* whole array: one run */
        {
            uint64_t st[] = { 0, 0, 0 };
            log_init(&l);
            assert_int_equal(shs__box_runs2(bits, 3, sh, st, sh, st, sh, log_run, &l), SHS_OK);
            assert_int_equal(l.n, 1);
            assert_true(l.runs[0].src == 0 && l.runs[0].dst == 0);
            assert_true(l.runs[0].len == 120 * es);
            log_free(&l);
        }
        /* rows 1..2 with full trailing dims: one run */
        {
            uint64_t st[] = { 1, 0, 0 }, ct[] = { 2, 5, 6 };
            log_init(&l);
            assert_int_equal(shs__box_runs2(bits, 3, sh, st, sh, st, ct, log_run, &l), SHS_OK);
            assert_int_equal(l.n, 1);
            assert_true(l.runs[0].src == 30 * es && l.runs[0].dst == 30 * es);
            assert_true(l.runs[0].len == 60 * es);
            log_free(&l);
        }
        /* count[2] = 3: 4 * 5 = 20 runs of 3 elements */
        {
            uint64_t st[] = { 0, 0, 2 }, ct[] = { 4, 5, 3 };
            log_init(&l);
            assert_int_equal(shs__box_runs2(bits, 3, sh, st, sh, st, ct, log_run, &l), SHS_OK);
            assert_int_equal(l.n, 20);
            for (size_t i = 0; i < 20; i++) {
                assert_true(l.runs[i].src == (i * 6 + 2) * es);
                assert_true(l.runs[i].dst == (i * 6 + 2) * es);
                assert_true(l.runs[i].len == 3 * es);
            }
            log_free(&l);
        }
        /* partial middle dim: 4 runs of 2 rows */
        {
            uint64_t st[] = { 0, 1, 0 }, ct[] = { 4, 2, 6 };
            log_init(&l);
            assert_int_equal(shs__box_runs2(bits, 3, sh, st, sh, st, ct, log_run, &l), SHS_OK);
            assert_int_equal(l.n, 4);
            for (size_t i = 0; i < 4; i++) {
                assert_true(l.runs[i].src == (i * 30 + 6) * es);
                assert_true(l.runs[i].len == 12 * es);
            }
            log_free(&l);
        }
        /* the same three boxes through shs__box_runs (dense destination) */
        {
            shs_dtype dt = bits == 8    ? SHS_U8
                           : bits == 16 ? SHS_F16
                           : bits == 32 ? SHS_F32
                                        : SHS_F64;
            uint64_t st0[] = { 0, 0, 0 }, st1[] = { 1, 0, 0 }, ct1[] = { 2, 5, 6 };
            uint64_t st2[] = { 0, 0, 2 }, ct2[] = { 4, 5, 3 };
            log_init(&l);
            assert_int_equal(shs__box_runs(dt, 3, sh, st0, sh, log_run, &l), SHS_OK);
            assert_int_equal(l.n, 1);
            log_free(&l);
            log_init(&l);
            assert_int_equal(shs__box_runs(dt, 3, sh, st1, ct1, log_run, &l), SHS_OK);
            assert_int_equal(l.n, 1);
            assert_true(l.runs[0].src == 30 * es && l.runs[0].dst == 0);
            log_free(&l);
            log_init(&l);
            assert_int_equal(shs__box_runs(dt, 3, sh, st2, ct2, log_run, &l), SHS_OK);
            assert_int_equal(l.n, 20);
            for (size_t i = 0; i < 20; i++) {
                assert_true(l.runs[i].src == (i * 6 + 2) * es);
                assert_true(l.runs[i].dst == i * 3 * es);
            }
            log_free(&l);
        }
    }
    /* different array shapes: full rows in both -> merged; not in dst -> not */
    {
        uint64_t ssh[] = { 4, 5, 6 }, dsh[] = { 9, 5, 6 }, a[] = { 1, 0, 0 }, b[] = { 6, 0, 0 },
                 ct[] = { 3, 5, 6 };
        log_init(&l);
        assert_int_equal(shs__box_runs2(8, 3, ssh, a, dsh, b, ct, log_run, &l), SHS_OK);
        assert_int_equal(l.n, 1);
        assert_true(l.runs[0].src == 30 && l.runs[0].dst == 180 && l.runs[0].len == 90);
        log_free(&l);
        uint64_t dsh2[] = { 4, 5, 7 };
        uint64_t b2[] = { 0, 0, 1 };
        log_init(&l);
        assert_int_equal(shs__box_runs2(8, 3, ssh, a, dsh2, b2, ct, log_run, &l), SHS_OK);
        assert_int_equal(l.n, 15);
        log_free(&l);
    }
}

static void test_scalar(void **state)
{
    (void)state;
    static const unsigned k_bits[] = { 8, 16, 32, 64 };
    uint64_t z[1] = { 0 };
    for (int k = 0; k < 4; k++) {
        run_log l;
        log_init(&l);
        assert_int_equal(shs__box_runs2(k_bits[k], 0, z, z, z, z, z, log_run, &l), SHS_OK);
        assert_int_equal(l.n, 1);
        assert_true(l.runs[0].src == 0 && l.runs[0].dst == 0);
        assert_true(l.runs[0].len == k_bits[k] / 8);
        log_free(&l);

        unsigned char src[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, dst[16];
        memset(dst, SENTINEL, sizeof dst);
        shs__box_copy(dst, z, z, src, z, z, z, 0, k_bits[k]);
        assert_memory_equal(dst, src, k_bits[k] / 8);
        for (size_t i = k_bits[k] / 8; i < sizeof dst; i++)
            assert_int_equal(dst[i], SENTINEL);
    }
    /* shs__box_runs on a scalar */
    run_log l;
    log_init(&l);
    assert_int_equal(shs__box_runs(SHS_C64, 0, z, z, z, log_run, &l), SHS_OK);
    assert_int_equal(l.n, 1);
    assert_true(l.runs[0].src == 0 && l.runs[0].dst == 0 && l.runs[0].len == 8);
    log_free(&l);
}

static void test_zero_count(void **state)
{
    (void)state;
    for (size_t ndim = 1; ndim <= 5; ndim++)
        for (size_t zd = 0; zd < ndim; zd++) {
            uint64_t sh[5], st[5], ct[5];
            for (size_t d = 0; d < ndim; d++) {
                sh[d] = 3;
                st[d] = 1;
                ct[d] = d == zd ? 0 : 2;
            }
            run_log l;
            log_init(&l);
            assert_int_equal(shs__box_runs2(32, ndim, sh, st, sh, st, ct, log_run, &l), SHS_OK);
            assert_int_equal(l.n, 0);
            assert_int_equal(shs__box_runs(SHS_F32, ndim, sh, st, ct, log_run, &l), SHS_OK);
            assert_int_equal(l.n, 0);
            /* zero at the very end of the dimension too */
            st[zd] = 3;
            assert_int_equal(shs__box_runs(SHS_F32, ndim, sh, st, ct, log_run, &l), SHS_OK);
            assert_int_equal(l.n, 0);
            log_free(&l);

            unsigned char src[243 * 4], dst[243 * 4];
            memset(src, 0x11, sizeof src);
            memset(dst, SENTINEL, sizeof dst);
            shs__box_copy(dst, sh, st, src, sh, st, ct, ndim, 32);
            for (size_t i = 0; i < sizeof dst; i++)
                assert_int_equal(dst[i], SENTINEL);
        }
    /* all counts zero, and zero with other dims huge (no run, no overflow) */
    {
        uint64_t sh[] = { UINT64_C(1) << 40, UINT64_C(1) << 40, 0 };
        uint64_t st[] = { 0, 0, 0 }, ct[] = { UINT64_C(1) << 40, UINT64_C(1) << 40, 0 };
        run_log l;
        log_init(&l);
        assert_int_equal(shs__box_runs2(8, 3, sh, st, sh, st, ct, log_run, &l), SHS_OK);
        assert_int_equal(l.n, 0);
        log_free(&l);
    }
}

static void test_callback_protocol(void **state)
{
    (void)state;
    uint64_t sh[] = { 4, 5, 6 }, st[] = { 0, 0, 0 }, ct[] = { 4, 5, 3 };
    run_log l;
    /* a negative return stops at once and is passed through */
    for (long stop = 0; stop < 20; stop += 7) {
        log_init(&l);
        l.stop_at = stop;
        assert_int_equal(shs__box_runs2(8, 3, sh, st, sh, st, ct, log_run, &l), -77);
        assert_int_equal(l.n, (size_t)stop + 1);
        log_free(&l);
        log_init(&l);
        l.stop_at = stop;
        assert_int_equal(shs__box_runs(SHS_U8, 3, sh, st, ct, log_run, &l), -77);
        assert_int_equal(l.n, (size_t)stop + 1);
        log_free(&l);
    }
    /* a positive return does not stop the walk */
    log_init(&l);
    l.ret_pos = 5;
    int rc = shs__box_runs2(8, 3, sh, st, sh, st, ct, log_run, &l);
    assert_true(rc >= 0);
    assert_int_equal(l.n, 20);
    log_free(&l);
    /* scalar: the single run's error is passed through */
    uint64_t z[1] = { 0 };
    log_init(&l);
    l.stop_at = 0;
    assert_int_equal(shs__box_runs2(8, 0, z, z, z, z, z, log_run, &l), -77);
    log_free(&l);
}

/* Large (but realistic) tensors: offsets computed without truncation. */
static void test_runs_large_offsets(void **state)
{
    (void)state;
    uint64_t sh[] = { UINT64_C(1) << 36, UINT64_C(1) << 20 };
    uint64_t st[] = { (UINT64_C(1) << 36) - 2, 7 }, ct[] = { 2, 3 };
    run_log l;
    log_init(&l);
    assert_int_equal(shs__box_runs(SHS_F32, 2, sh, st, ct, log_run, &l), SHS_OK);
    assert_int_equal(l.n, 2);
    for (size_t i = 0; i < 2; i++) {
        uint64_t e = (((UINT64_C(1) << 36) - 2 + i) << 20) + 7;
        assert_true(l.runs[i].src == e * 4);
        assert_true(l.runs[i].dst == i * 12);
        assert_true(l.runs[i].len == 12);
    }
    log_free(&l);
    /* 5-d with a huge outer dim and full inner dims: one run per outer row */
    uint64_t sh5[] = { UINT64_C(1) << 30, 2, 3, 4, 5 };
    uint64_t st5[] = { (UINT64_C(1) << 30) - 5, 0, 0, 0, 0 }, ct5[] = { 3, 2, 3, 4, 5 };
    log_init(&l);
    assert_int_equal(shs__box_runs(SHS_F64, 5, sh5, st5, ct5, log_run, &l), SHS_OK);
    assert_int_equal(l.n, 1);
    assert_true(l.runs[0].src == ((UINT64_C(1) << 30) - 5) * 120 * 8);
    assert_true(l.runs[0].len == 3 * 120 * 8);
    log_free(&l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_intersect_disjoint),
        cmocka_unit_test(test_intersect_touching),
        cmocka_unit_test(test_intersect_nested),
        cmocka_unit_test(test_intersect_partial),
        cmocka_unit_test(test_intersect_zero_size),
        cmocka_unit_test(test_intersect_huge_offsets),
        cmocka_unit_test(test_intersect_random),
        cmocka_unit_test(test_check_in_range),
        cmocka_unit_test(test_check_out_of_range),
        cmocka_unit_test(test_check_subbyte),
        cmocka_unit_test(test_check_random),
        cmocka_unit_test(test_copy_random),
        cmocka_unit_test(test_copy_random_same_shape),
        cmocka_unit_test(test_runs_random),
        cmocka_unit_test(test_copy_random_f4),
        cmocka_unit_test(test_runs_minimal_456),
        cmocka_unit_test(test_scalar),
        cmocka_unit_test(test_zero_count),
        cmocka_unit_test(test_callback_protocol),
        cmocka_unit_test(test_runs_large_offsets),
    };
    return TU_RUN_GROUP(tests, NULL, NULL);
}
