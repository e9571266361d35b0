/* test_dtype.c -- dtype names, sizes and conversions (src/format/dtype.c).
 *
 * Conversions are checked against references computed a different way:
 * values decoded from the bit fields with ldexp, and rounding done by
 * comparing distances to the two neighbouring representable values (or
 * by brute force over all 256 values of an 8-bit format), plus the
 * compiler's own _Float16 conversions where gcc has them.
 */
#include "testutil.h"
#include "common/internal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

static const char *const k_all_names[SHS_DTYPE_COUNT] = {
    "BOOL",    "F4",          "F6_E2M3",     "F6_E3M2", "U8",  "I8",  "F8_E5M2", "F8_E4M3",
    "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16",     "U16", "F16", "BF16",    "I32",
    "U32",     "F32",         "C64",         "F64",     "I64", "U64",
};

static const unsigned k_all_bits[SHS_DTYPE_COUNT] = {
    8, 4, 6, 6, 8, 8, 8, 8, 8, 8, 8, 16, 16, 16, 16, 32, 32, 32, 64, 64, 64, 64,
};

static const shs_dtype k_float_types[] = {
    SHS_F64,     SHS_F32,         SHS_F16,         SHS_BF16,    SHS_F8_E4M3,
    SHS_F8_E5M2, SHS_F8_E4M3FNUZ, SHS_F8_E5M2FNUZ, SHS_F8_E8M0,
};
#define N_FLOAT_TYPES (sizeof k_float_types / sizeof k_float_types[0])

static const shs_dtype k_f8_types[] = {
    SHS_F8_E4M3, SHS_F8_E5M2, SHS_F8_E4M3FNUZ, SHS_F8_E5M2FNUZ, SHS_F8_E8M0,
};
#define N_F8_TYPES (sizeof k_f8_types / sizeof k_f8_types[0])

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * UINT64_C(0x2545F4914F6CDD1D);
}

static uint32_t bits_of_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float f32_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Element size in bytes of a convertible type. */
static size_t esize(shs_dtype t)
{
    return shs_dtype_bits(t) / 8;
}

/* Load element i of a buffer of type t as a code (for <= 16-bit types). */
static unsigned load_code(const void *buf, shs_dtype t, size_t i)
{
    const unsigned char *p = buf;
    if (esize(t) == 1)
        return p[i];
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return h;
}

static void store_code(void *buf, shs_dtype t, size_t i, unsigned code)
{
    unsigned char *p = buf;
    if (esize(t) == 1) {
        p[i] = (unsigned char)code;
    } else {
        uint16_t h = (uint16_t)code;
        memcpy(p + 2 * i, &h, 2);
    }
}

/* Field layout of the narrow formats, for the reference decoder. */
typedef struct narrow_fmt {
    shs_dtype t;
    int mant; /* stored mantissa bits */
    int bias;
    unsigned total; /* 8 or 16 bits */
    int kind;       /* 0 IEEE (Inf/NaN at all-ones exponent), 1 FN, 2 FNUZ,
                        3 E8M0 */
    unsigned maxcode;
} narrow_fmt;

static const narrow_fmt k_narrow[] = {
    { SHS_F16, 10, 15, 16, 0, 0x7BFF },    { SHS_BF16, 7, 127, 16, 0, 0x7F7F },
    { SHS_F8_E5M2, 2, 15, 8, 0, 0x7B },    { SHS_F8_E4M3, 3, 7, 8, 1, 0x7E },
    { SHS_F8_E4M3FNUZ, 3, 8, 8, 2, 0x7F }, { SHS_F8_E5M2FNUZ, 2, 16, 8, 2, 0x7F },
    { SHS_F8_E8M0, 0, 127, 8, 3, 0xFE },
};
#define N_NARROW (sizeof k_narrow / sizeof k_narrow[0])

static const narrow_fmt *narrow(shs_dtype t)
{
    for (size_t i = 0; i < N_NARROW; i++)
        if (k_narrow[i].t == t)
            return &k_narrow[i];
    return NULL;
}

/* Reference value of a code, from its fields with ldexp. */
static double ref_value(const narrow_fmt *f, unsigned c)
{
    if (f->kind == 3)
        return c == 0xFF ? NAN : ldexp(1.0, (int)c - 127);
    unsigned sbit = 1u << (f->total - 1);
    int neg = (c & sbit) != 0;
    unsigned mag = c & (sbit - 1);
    unsigned ebits = f->total - 1 - (unsigned)f->mant;
    unsigned e = mag >> f->mant;
    unsigned m = mag & ((1u << f->mant) - 1);
    double v;
    if (f->kind == 2 && c == 0x80)
        return NAN;
    if (f->kind == 1 && mag == 0x7F)
        return NAN;
    if (f->kind == 0 && e == (1u << ebits) - 1)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp((double)m, 1 - f->bias - f->mant);
    else
        v = ldexp((double)((1u << f->mant) + m), (int)e - f->bias - f->mant);
    return neg ? -v : v;
}

static int code_is_nan(const narrow_fmt *f, unsigned c)
{
    return isnan(ref_value(f, c));
}

/* Sign bit as it should be applied to a positive magnitude code. */
static unsigned with_sign(const narrow_fmt *f, unsigned c, int neg)
{
    if (!neg || f->kind == 3)
        return c;
    if (f->kind == 2 && c == 0)
        return 0; /* FNUZ has no -0 */
    return c | (1u << (f->total - 1));
}

/* Largest finite value of f and, for formats with Inf, the overflow
   threshold (values >= it round to Inf). */
static double ref_max(const narrow_fmt *f)
{
    return ref_value(f, f->maxcode);
}

static double ref_overflow_threshold(const narrow_fmt *f)
{
    /* max + half an ulp of max */
    double max = ref_max(f);
    double below = ref_value(f, f->maxcode - 1);
    return max + (max - below) / 2;
}

/*
 * Reference rounding of a double to a narrow format by comparing the
 * distances to neighbours: `lo` = the largest non-negative code whose value
 * is <= |x| (binary search; codes 0..maxcode are increasing), hi = lo + 1.
 */
static unsigned ref_round(const narrow_fmt *f, double x)
{
    int neg = signbit(x) != 0;
    double ax = fabs(x);
    if (isnan(x)) {
        if (f->kind == 3 || f->kind == 2)
            return f->kind == 3 ? 0xFF : 0x80;
        if (f->kind == 1)
            return neg ? 0xFF : 0x7F;
        return with_sign(f, (f->maxcode + 1) | (1u << (f->mant - 1)), neg);
    }
    if (f->kind == 3) {
        if (neg && ax != 0)
            return 0xFF;
        if (ax == 0)
            return 0;
    }
    if (f->kind == 0 && ax >= ref_overflow_threshold(f))
        return with_sign(f, f->maxcode + 1, neg); /* Inf */
    if (ax >= ref_max(f))
        return with_sign(f, f->maxcode, neg); /* saturate */
    unsigned lo = 0, hi = f->maxcode;         /* value(lo) <= ax < value(hi) */
    if (ref_value(f, 0) > ax)
        return with_sign(f, 0, neg); /* E8M0 only */
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        if (ref_value(f, mid) <= ax)
            lo = mid;
        else
            hi = mid;
    }
    double dlo = ax - ref_value(f, lo), dhi = ref_value(f, hi) - ax;
    unsigned r = dlo < dhi ? lo : dhi < dlo ? hi : (lo & 1) ? hi : lo;
    return with_sign(f, r, neg);
}

/* Convert one value with shs_convert and return the code. */
static unsigned conv1_f64(shs_dtype t, double x)
{
    unsigned char out[2] = { 0, 0 };
    assert_int_equal(shs_convert(out, t, &x, SHS_F64, 1), SHS_OK);
    return load_code(out, t, 0);
}

static unsigned conv1_f32(shs_dtype t, float x)
{
    unsigned char out[2] = { 0, 0 };
    assert_int_equal(shs_convert(out, t, &x, SHS_F32, 1), SHS_OK);
    return load_code(out, t, 0);
}

static void check_code(const narrow_fmt *f, unsigned got, unsigned want, double x, const char *what)
{
    if (got == want || (code_is_nan(f, got) && code_is_nan(f, want)))
        return;
    fail_msg("%s -> %s: x = %a: got 0x%X, want 0x%X", what, shs_dtype_name(f->t), x, got, want);
}

/* ------------------------------------------------------------------------
 * Names, parsing, sizes
 * ---------------------------------------------------------------------- */

static void test_name_parse_roundtrip(void **state)
{
    (void)state;
    for (int d = 0; d < SHS_DTYPE_COUNT; d++) {
        const char *name = shs_dtype_name((shs_dtype)d);
        assert_non_null(name);
        assert_string_equal(name, k_all_names[d]);

        shs_dtype out = SHS_DTYPE_COUNT;
        assert_int_equal(shs_dtype_parse(&out, name, strlen(name)), SHS_OK);
        assert_int_equal(out, d);

        /* Not NUL-terminated: the name followed by junk, with len. */
        char buf[32];
        memset(buf, 'X', sizeof buf);
        memcpy(buf, name, strlen(name));
        out = SHS_DTYPE_COUNT;
        assert_int_equal(shs_dtype_parse(&out, buf, strlen(name)), SHS_OK);
        assert_int_equal(out, d);
    }
    assert_null(shs_dtype_name(SHS_DTYPE_COUNT));
    assert_null(shs_dtype_name((shs_dtype)-1));
    assert_null(shs_dtype_name((shs_dtype)1000));
}

static void expect_reject(const char *s, size_t len)
{
    shs_dtype out = SHS_F32;
    int rc = shs_dtype_parse(&out, s, len);
    if (rc != SHS_EDTYPE)
        fail_msg("parse(\"%.*s\", %zu) = %d, want SHS_EDTYPE", (int)len, s, len, rc);
    assert_int_equal(out, SHS_F32); /* untouched on failure */
    assert_true(strlen(shs_last_error()) > 0);
    assert_true(strlen(shs_last_error()) < 200);
}

static int is_valid_name(const char *s, size_t len)
{
    for (int d = 0; d < SHS_DTYPE_COUNT; d++)
        if (strlen(k_all_names[d]) == len && memcmp(k_all_names[d], s, len) == 0)
            return 1;
    return 0;
}

static void test_parse_rejects(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "f32",     "F32 ",    " F32",    "",           "BF8",          "bf16",
        "Bf16",    "F3",      "F",       "F8_E4M3FNU", "F8_E4M3FNUZZ", "F8_E4M3fnuz",
        "F8_E3M4", "F6_E2M2", "F8_E5M3", "F8_E8M1",    "I128",         "C32",
        "C128",    "U1",      "F2",      "I4",         "BOOL\n",       "BOO",
        "BF32",    "F16_",    "F8E4M3",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_reject(bad[i], strlen(bad[i]));
    expect_reject("F64\0", 4);       /* embedded NUL */
    expect_reject("F32", 2);         /* prefix of a name */
    expect_reject("F8_E4M3FNUZ", 6); /* "F8_E4M", not a name */

    char *big = malloc(1000);
    assert_non_null(big);
    memset(big, 'F', 1000);
    expect_reject(big, 1000);
    memcpy(big, "F32", 3);
    expect_reject(big, 1000);
    free(big);

    /* Every single-byte mutation of every name is rejected unless it
       happens to be another name. */
    static const char subst[] = "ABCEFIMNOUZ_0123456789afz \x80";
    for (int d = 0; d < SHS_DTYPE_COUNT; d++) {
        char buf[16];
        size_t len = strlen(k_all_names[d]);
        for (size_t pos = 0; pos < len; pos++) {
            for (size_t k = 0; k < sizeof subst - 1; k++) {
                memcpy(buf, k_all_names[d], len);
                buf[pos] = subst[k];
                if (!is_valid_name(buf, len))
                    expect_reject(buf, len);
            }
        }
    }

    /* Bad arguments */
    shs_dtype out;
    assert_int_equal(shs_dtype_parse(NULL, "F32", 3), SHS_EINVAL);
    assert_int_equal(shs_dtype_parse(&out, NULL, 3), SHS_EINVAL);
    assert_int_equal(shs_dtype_parse(&out, NULL, 0), SHS_EDTYPE);
}

static void test_bits(void **state)
{
    (void)state;
    for (int d = 0; d < SHS_DTYPE_COUNT; d++)
        assert_int_equal(shs_dtype_bits((shs_dtype)d), k_all_bits[d]);
    assert_int_equal(shs_dtype_bits(SHS_F4), 4);
    assert_int_equal(shs_dtype_bits(SHS_F6_E3M2), 6);
    assert_int_equal(shs_dtype_bits(SHS_BOOL), 8);
    assert_int_equal(shs_dtype_bits(SHS_C64), 64);
    assert_int_equal(shs_dtype_bits(SHS_DTYPE_COUNT), 0);
    assert_int_equal(shs_dtype_bits((shs_dtype)-1), 0);
}

static void test_nbytes(void **state)
{
    (void)state;
    uint64_t n = 12345;

    /* shs__nbytes_from_numel */
    assert_int_equal(shs__nbytes_from_numel(&n, SHS_F4, 3), SHS_EMISALIGNED);
    assert_true(strlen(shs_last_error()) > 0);
    assert_int_equal(shs__nbytes_from_numel(&n, SHS_F4, 4), SHS_OK);
    assert_int_equal(n, 2);
    assert_int_equal(shs__nbytes_from_numel(&n, SHS_F6_E2M3, 4), SHS_OK);
    assert_int_equal(n, 3);
    assert_int_equal(shs__nbytes_from_numel(&n, SHS_F6_E3M2, 2), SHS_EMISALIGNED);
    assert_int_equal(shs__nbytes_from_numel(&n, SHS_F32, 0), SHS_OK);
    assert_int_equal(n, 0);
    assert_int_equal(shs__nbytes_from_numel(&n, SHS_U8, UINT64_MAX / 8), SHS_OK);
    assert_true(n == UINT64_MAX / 8);
    assert_int_equal(shs__nbytes_from_numel(&n, SHS_U8, UINT64_MAX / 8 + 1), SHS_EOVERFLOW);
    assert_int_equal(shs__nbytes_from_numel(&n, SHS_F64, UINT64_MAX / 64 + 1), SHS_EOVERFLOW);
    assert_int_equal(shs__nbytes_from_numel(&n, SHS_F64, UINT64_MAX / 64), SHS_OK);
    assert_true(n == (UINT64_MAX / 64) * 8);
    assert_int_equal(shs__nbytes_from_numel(&n, SHS_DTYPE_COUNT, 1), SHS_EINVAL);

    /* shs_tensor_nbytes */
    const uint64_t odd[] = { 3, 5 };
    const uint64_t even[] = { 3, 4 };
    assert_int_equal(shs_tensor_nbytes(&n, SHS_F4, 2, odd), SHS_EMISALIGNED);
    assert_int_equal(shs_tensor_nbytes(&n, SHS_F4, 2, even), SHS_OK);
    assert_int_equal(n, 6);

    const uint64_t huge[] = { UINT64_C(1) << 32, UINT64_C(1) << 32, 2 };
    assert_int_equal(shs_tensor_nbytes(&n, SHS_U8, 3, huge), SHS_EOVERFLOW);
    assert_true(strlen(shs_last_error()) > 0);
    assert_int_equal(shs_tensor_nbytes(&n, SHS_U8, 2, huge), SHS_EOVERFLOW);

    /* numel fits, numel x bits does not */
    const uint64_t big[] = { UINT64_C(1) << 31, UINT64_C(1) << 31, 2 };
    assert_int_equal(shs_tensor_nbytes(&n, SHS_U8, 3, big), SHS_EOVERFLOW);
    const uint64_t fits[] = { UINT64_C(1) << 30, UINT64_C(1) << 30 };
    assert_int_equal(shs_tensor_nbytes(&n, SHS_U8, 2, fits), SHS_OK);
    assert_true(n == UINT64_C(1) << 60);
    assert_int_equal(shs_tensor_nbytes(&n, SHS_F32, 2, fits), SHS_EOVERFLOW);

    /* scalar: numel 1 */
    assert_int_equal(shs_tensor_nbytes(&n, SHS_F32, 0, NULL), SHS_OK);
    assert_int_equal(n, 4);
    assert_int_equal(shs_tensor_nbytes(&n, SHS_F4, 0, NULL), SHS_EMISALIGNED);
    assert_int_equal(shs_tensor_nbytes(&n, SHS_C64, 0, NULL), SHS_OK);
    assert_int_equal(n, 8);

    const uint64_t zero[] = { 7, 0, 9 };
    assert_int_equal(shs_tensor_nbytes(&n, SHS_BF16, 3, zero), SHS_OK);
    assert_int_equal(n, 0);

    const uint64_t shape[] = { 2, 3, 4 };
    assert_int_equal(shs_tensor_nbytes(&n, SHS_BF16, 3, shape), SHS_OK);
    assert_int_equal(n, 48);
    assert_int_equal(shs_tensor_nbytes(&n, SHS_F6_E2M3, 3, shape), SHS_OK);
    assert_int_equal(n, 18);

    assert_int_equal(shs_tensor_nbytes(NULL, SHS_F32, 0, NULL), SHS_EINVAL);
    assert_int_equal(shs_tensor_nbytes(&n, SHS_F32, 2, NULL), SHS_EINVAL);
    assert_int_equal(shs_tensor_nbytes(&n, SHS_DTYPE_COUNT, 3, shape), SHS_EINVAL);
}

/* ------------------------------------------------------------------------
 * Exhaustive round trips
 * ---------------------------------------------------------------------- */

static void roundtrip_16(shs_dtype t)
{
    const narrow_fmt *f = narrow(t);
    uint16_t *src = malloc(65536 * 2), *back = malloc(65536 * 2);
    float *wide = malloc(65536 * 4);
    assert_non_null(src);
    assert_non_null(back);
    assert_non_null(wide);
    for (unsigned i = 0; i < 65536; i++)
        src[i] = (uint16_t)i;
    assert_int_equal(shs_convert(wide, SHS_F32, src, t, 65536), SHS_OK);
    assert_int_equal(shs_convert(back, t, wide, SHS_F32, 65536), SHS_OK);

    for (unsigned i = 0; i < 65536; i++) {
        double want = ref_value(f, i);
        float w = wide[i];
        float ws = t == SHS_F16 ? shs_f16_to_f32((uint16_t)i) : shs_bf16_to_f32((uint16_t)i);
        uint16_t bs = t == SHS_F16 ? shs_f32_to_f16(w) : shs_f32_to_bf16(w);
        if (bits_of_f32(ws) != bits_of_f32(w))
            fail_msg("%s 0x%04X: scalar widen 0x%08X != bulk 0x%08X", shs_dtype_name(t), i,
                     bits_of_f32(ws), bits_of_f32(w));
        if (bs != back[i])
            fail_msg("%s 0x%04X: scalar narrow 0x%04X != bulk 0x%04X", shs_dtype_name(t), i, bs,
                     back[i]);
        if (isnan(want)) {
            if (!isnan(w) || !code_is_nan(f, back[i]) || (back[i] & 0x8000) != (i & 0x8000) ||
                !signbit(w) != !signbit(want))
                fail_msg("%s NaN 0x%04X -> 0x%08X -> 0x%04X", shs_dtype_name(t), i, bits_of_f32(w),
                         back[i]);
            /* Quiet NaNs come back bit-exactly; signalling ones are
               quietened by the narrowing. */
            unsigned quiet = 1u << (f->mant - 1);
            if ((i & quiet) && back[i] != i)
                fail_msg("%s quiet NaN 0x%04X came back as 0x%04X", shs_dtype_name(t), i, back[i]);
            continue;
        }
        if ((double)w != want || !signbit(w) != !signbit(want))
            fail_msg("%s 0x%04X: got %a, want %a", shs_dtype_name(t), i, (double)w, want);
        if (back[i] != i)
            fail_msg("%s 0x%04X -> %a -> 0x%04X", shs_dtype_name(t), i, (double)w, back[i]);
    }
    /* BF16 widening is exactly a 16-bit shift, NaN payloads included. */
    if (t == SHS_BF16)
        for (unsigned i = 0; i < 65536; i++)
            assert_int_equal(bits_of_f32(wide[i]), (uint32_t)i << 16);
    free(src);
    free(back);
    free(wide);
}

static void test_bf16_exhaustive(void **state)
{
    (void)state;
    roundtrip_16(SHS_BF16);
}

static void test_f16_exhaustive(void **state)
{
    (void)state;
    roundtrip_16(SHS_F16);
}

static void test_f8_exhaustive(void **state)
{
    (void)state;
    for (size_t k = 0; k < N_F8_TYPES; k++) {
        shs_dtype t = k_f8_types[k];
        const narrow_fmt *f = narrow(t);
        unsigned char codes[256], back[256], back64[256];
        float wide[256];
        double wide64[256];
        for (unsigned i = 0; i < 256; i++)
            codes[i] = (unsigned char)i;
        assert_int_equal(shs_convert(wide, SHS_F32, codes, t, 256), SHS_OK);
        assert_int_equal(shs_convert(back, t, wide, SHS_F32, 256), SHS_OK);
        assert_int_equal(shs_convert(wide64, SHS_F64, codes, t, 256), SHS_OK);
        assert_int_equal(shs_convert(back64, t, wide64, SHS_F64, 256), SHS_OK);
        for (unsigned i = 0; i < 256; i++) {
            double want = ref_value(f, i);
            if (isnan(want)) {
                if (!isnan(wide[i]) || !isnan(wide64[i]) || !code_is_nan(f, back[i]) ||
                    !code_is_nan(f, back64[i]))
                    fail_msg("%s NaN 0x%02X -> %a -> 0x%02X", shs_dtype_name(t), i, (double)wide[i],
                             back[i]);
                continue;
            }
            if ((double)wide[i] != want || !signbit(wide[i]) != !signbit(want) ||
                wide64[i] != want || !signbit(wide64[i]) != !signbit(want))
                fail_msg("%s 0x%02X: got %a / %a, want %a", shs_dtype_name(t), i, (double)wide[i],
                         wide64[i], want);
            if (back[i] != i || back64[i] != i)
                fail_msg("%s 0x%02X -> %a -> 0x%02X / 0x%02X", shs_dtype_name(t), i, want, back[i],
                         back64[i]);
        }
    }
}

/* Known constants of the formats (independent of ref_value). */
static void test_f8_constants(void **state)
{
    (void)state;
    static const struct {
        shs_dtype t;
        unsigned code;
        double v;
    } k[] = {
        { SHS_F8_E4M3, 0x7E, 448.0 },       { SHS_F8_E4M3, 0xFE, -448.0 },
        { SHS_F8_E4M3, 0x01, 0x1p-9 },      { SHS_F8_E4M3, 0x08, 0x1p-6 },
        { SHS_F8_E4M3, 0x38, 1.0 },         { SHS_F8_E5M2, 0x7B, 57344.0 },
        { SHS_F8_E5M2, 0x7C, INFINITY },    { SHS_F8_E5M2, 0xFC, -INFINITY },
        { SHS_F8_E5M2, 0x01, 0x1p-16 },     { SHS_F8_E5M2, 0x3C, 1.0 },
        { SHS_F8_E4M3FNUZ, 0x7F, 240.0 },   { SHS_F8_E4M3FNUZ, 0xFF, -240.0 },
        { SHS_F8_E4M3FNUZ, 0x01, 0x1p-10 }, { SHS_F8_E4M3FNUZ, 0x40, 1.0 },
        { SHS_F8_E5M2FNUZ, 0x7F, 57344.0 }, { SHS_F8_E5M2FNUZ, 0x01, 0x1p-17 },
        { SHS_F8_E5M2FNUZ, 0x40, 1.0 },     { SHS_F8_E8M0, 0x7F, 1.0 },
        { SHS_F8_E8M0, 0x00, 0x1p-127 },    { SHS_F8_E8M0, 0xFE, 0x1p127 },
        { SHS_F16, 0x7BFF, 65504.0 },       { SHS_F16, 0x0001, 0x1p-24 },
        { SHS_F16, 0x3C00, 1.0 },           { SHS_BF16, 0x7F7F, 0x1.FEp127 },
        { SHS_BF16, 0x0001, 0x1p-133 },     { SHS_BF16, 0x3F80, 1.0 },
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        unsigned char in[2];
        double out = 0;
        store_code(in, k[i].t, 0, k[i].code);
        assert_int_equal(shs_convert(&out, SHS_F64, in, k[i].t, 1), SHS_OK);
        if (out != k[i].v)
            fail_msg("%s 0x%X = %a, want %a", shs_dtype_name(k[i].t), k[i].code, out, k[i].v);
        assert_int_equal(conv1_f64(k[i].t, k[i].v), k[i].code);
    }
    /* NaN encodings decode to NaN */
    static const struct {
        shs_dtype t;
        unsigned code;
    } nans[] = {
        { SHS_F8_E4M3, 0x7F },     { SHS_F8_E4M3, 0xFF }, { SHS_F8_E5M2, 0x7D },
        { SHS_F8_E5M2, 0x7E },     { SHS_F8_E5M2, 0xFF }, { SHS_F8_E4M3FNUZ, 0x80 },
        { SHS_F8_E5M2FNUZ, 0x80 }, { SHS_F8_E8M0, 0xFF },
    };
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        unsigned char in = (unsigned char)nans[i].code;
        float out = 0;
        assert_int_equal(shs_convert(&out, SHS_F32, &in, nans[i].t, 1), SHS_OK);
        assert_true(isnan(out));
    }
}

/* ------------------------------------------------------------------------
 * Hand-picked rounding cases
 * ---------------------------------------------------------------------- */

static void test_bf16_rounding(void **state)
{
    (void)state;
    /* 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: to even, 1.0 */
    assert_int_equal(shs_f32_to_bf16(1.0f + 0x1p-8f), 0x3F80);
    /* 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up */
    assert_int_equal(shs_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);
    /* just above halfway rounds up, just below rounds down */
    assert_int_equal(shs_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-23f), 0x3F81);
    assert_int_equal(shs_f32_to_bf16(1.0f + 0x1p-8f - 0x1p-23f), 0x3F80);
    assert_int_equal(shs_f32_to_bf16(-(1.0f + 0x1p-8f)), 0xBF80);
    assert_int_equal(shs_f32_to_bf16(-(1.0f + 3 * 0x1p-8f)), 0xBF82);
    /* overflow: FLT_MAX rounds up to Inf (bf16 has F32's exponent range) */
    assert_int_equal(shs_f32_to_bf16(FLT_MAX), 0x7F80);
    assert_int_equal(shs_f32_to_bf16(-FLT_MAX), 0xFF80);
    assert_int_equal(shs_f32_to_bf16(0x1.FEp127f), 0x7F7F);
    assert_int_equal(shs_f32_to_bf16(INFINITY), 0x7F80);
    assert_int_equal(shs_f32_to_bf16(-INFINITY), 0xFF80);
    /* subnormals: F32 subnormals round into bf16 subnormals */
    assert_int_equal(shs_f32_to_bf16(0x1p-133f), 0x0001);
    assert_int_equal(shs_f32_to_bf16(0x1p-134f), 0x0000); /* tie -> 0 */
    assert_int_equal(shs_f32_to_bf16(0x1.8p-134f), 0x0001);
    assert_int_equal(shs_f32_to_bf16(0x1p-149f), 0x0000);
    assert_int_equal(shs_f32_to_bf16(-0x1p-149f), 0x8000);
    assert_int_equal(shs_f32_to_bf16(-0.0f), 0x8000);
    /* NaN stays NaN, quiet, sign kept, even if the payload is only in the
       low 16 bits (plain truncation would make it Inf) */
    uint16_t h = shs_f32_to_bf16(f32_of_bits(0x7F800001u));
    assert_true((h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0 && !(h & 0x8000));
    h = shs_f32_to_bf16(f32_of_bits(0xFF800001u));
    assert_true((h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0 && (h & 0x8000));
    assert_int_equal(shs_f32_to_bf16(f32_of_bits(0x7FC00000u)), 0x7FC0);
    assert_int_equal(shs_f32_to_bf16(f32_of_bits(0xFFFFFFFFu)), 0xFFFF);
}

static void test_f16_rounding(void **state)
{
    (void)state;
    assert_int_equal(shs_f32_to_f16(1.0f), 0x3C00);
    assert_int_equal(shs_f32_to_f16(1.0f + 0x1p-11f), 0x3C00);     /* tie */
    assert_int_equal(shs_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02); /* tie up */
    assert_int_equal(shs_f32_to_f16(1.0f + 0x1p-11f + 0x1p-23f), 0x3C01);
    /* overflow */
    assert_int_equal(shs_f32_to_f16(65504.0f), 0x7BFF);
    assert_int_equal(shs_f32_to_f16(65519.99f), 0x7BFF);
    assert_int_equal(shs_f32_to_f16(65520.0f), 0x7C00); /* tie -> Inf */
    assert_int_equal(shs_f32_to_f16(-65520.0f), 0xFC00);
    assert_int_equal(shs_f32_to_f16(1e10f), 0x7C00);
    assert_int_equal(shs_f32_to_f16(FLT_MAX), 0x7C00);
    assert_int_equal(shs_f32_to_f16(INFINITY), 0x7C00);
    assert_int_equal(shs_f32_to_f16(-INFINITY), 0xFC00);
    /* subnormals */
    assert_int_equal(shs_f32_to_f16(0x1p-24f), 0x0001);
    assert_int_equal(shs_f32_to_f16(0x1p-25f), 0x0000); /* tie -> 0 */
    assert_int_equal(shs_f32_to_f16(-0x1p-25f), 0x8000);
    assert_int_equal(shs_f32_to_f16(0x1.8p-25f), 0x0001);
    assert_int_equal(shs_f32_to_f16(0x1.000002p-25f), 0x0001);
    assert_int_equal(shs_f32_to_f16(3 * 0x1p-25f), 0x0002);        /* tie up */
    assert_int_equal(shs_f32_to_f16(5 * 0x1p-25f), 0x0002);        /* tie down */
    assert_int_equal(shs_f32_to_f16(0x1p-14f), 0x0400);            /* min normal */
    assert_int_equal(shs_f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400); /* tie up */
    assert_int_equal(shs_f32_to_f16(0x1p-14f - 0x1p-24f), 0x03FF);
    assert_int_equal(shs_f32_to_f16(0x1p-149f), 0x0000);
    assert_int_equal(shs_f32_to_f16(-0.0f), 0x8000);
    assert_true(shs_f16_to_f32(0x0001) == 0x1p-24f);
    assert_true(shs_f16_to_f32(0x03FF) == 0x3FFp-24f);
    assert_true(shs_f16_to_f32(0x8001) == -0x1p-24f);
    /* NaN */
    uint16_t h = shs_f32_to_f16(f32_of_bits(0x7F800001u));
    assert_true((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0);
    h = shs_f32_to_f16(-NAN);
    assert_true((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0 && (h & 0x8000));
    assert_true(isnan(shs_f16_to_f32(0x7C01)));
    assert_true(isinf(shs_f16_to_f32(0xFC00)) && shs_f16_to_f32(0xFC00) < 0);
}

static void test_f8_saturation_and_specials(void **state)
{
    (void)state;
    /* e4m3fn: saturate, no Inf */
    assert_int_equal(conv1_f32(SHS_F8_E4M3, 1000.0f), 0x7E);
    assert_int_equal(conv1_f32(SHS_F8_E4M3, -1000.0f), 0xFE);
    assert_int_equal(conv1_f32(SHS_F8_E4M3, 464.0f), 0x7E); /* past the top */
    assert_int_equal(conv1_f32(SHS_F8_E4M3, 448.0f), 0x7E);
    assert_int_equal(conv1_f32(SHS_F8_E4M3, INFINITY), 0x7E);
    assert_int_equal(conv1_f32(SHS_F8_E4M3, -INFINITY), 0xFE);
    assert_int_equal(conv1_f32(SHS_F8_E4M3, FLT_MAX), 0x7E);
    assert_int_equal(conv1_f64(SHS_F8_E4M3, DBL_MAX), 0x7E);
    assert_int_equal(conv1_f64(SHS_F8_E4M3, -1e300), 0xFE);
    assert_int_equal(conv1_f32(SHS_F8_E4M3, NAN), 0x7F);
    assert_int_equal(conv1_f32(SHS_F8_E4M3, -NAN), 0xFF);
    assert_int_equal(conv1_f32(SHS_F8_E4M3, -0.0f), 0x80);
    assert_int_equal(conv1_f32(SHS_F8_E4M3, 0x1p-10f), 0x00); /* tie -> 0 */
    assert_int_equal(conv1_f32(SHS_F8_E4M3, 0x1.8p-10f), 0x01);

    /* e5m2: IEEE-like, overflow to Inf */
    assert_int_equal(conv1_f32(SHS_F8_E5M2, 57344.0f), 0x7B);
    assert_int_equal(conv1_f32(SHS_F8_E5M2, 61439.0f), 0x7B);
    assert_int_equal(conv1_f32(SHS_F8_E5M2, 61440.0f), 0x7C);
    assert_int_equal(conv1_f32(SHS_F8_E5M2, -1e6f), 0xFC);
    assert_int_equal(conv1_f32(SHS_F8_E5M2, INFINITY), 0x7C);
    assert_int_equal(conv1_f32(SHS_F8_E5M2, -INFINITY), 0xFC);
    unsigned c = conv1_f32(SHS_F8_E5M2, NAN);
    assert_true((c & 0x7C) == 0x7C && (c & 3) != 0);
    c = conv1_f32(SHS_F8_E5M2, -NAN);
    assert_true((c & 0xFC) == 0xFC && (c & 3) != 0);
    /* a NaN whose payload sits only in bits the narrowing drops */
    c = conv1_f32(SHS_F8_E5M2, f32_of_bits(0x7F800001u));
    assert_true((c & 0x7C) == 0x7C && (c & 3) != 0);
    double snan64;
    uint64_t snan64_bits = UINT64_C(0xFFF0000000000001);
    memcpy(&snan64, &snan64_bits, 8);
    c = conv1_f64(SHS_F8_E5M2, snan64);
    assert_true(c == 0xFE || c == 0xFF);
    c = conv1_f64(SHS_F16, snan64);
    assert_true((c & 0xFC00) == 0xFC00 && (c & 0x3FF) != 0);
    c = conv1_f64(SHS_BF16, snan64);
    assert_true((c & 0xFF80) == 0xFF80 && (c & 0x7F) != 0);
    assert_int_equal(conv1_f64(SHS_F8_E4M3, snan64), 0xFF);
    assert_int_equal(conv1_f64(SHS_F8_E5M2FNUZ, snan64), 0x80);
    assert_int_equal(conv1_f64(SHS_F8_E8M0, snan64), 0xFF);
    assert_int_equal(conv1_f32(SHS_F8_E5M2, 0x1p-17f), 0x00);     /* tie -> 0 */
    assert_int_equal(conv1_f32(SHS_F8_E5M2, 3 * 0x1p-17f), 0x02); /* tie up */

    /* fnuz: the one NaN is 0x80, no -0, saturate */
    static const shs_dtype fnuz[] = { SHS_F8_E4M3FNUZ, SHS_F8_E5M2FNUZ };
    for (int i = 0; i < 2; i++) {
        shs_dtype t = fnuz[i];
        assert_int_equal(conv1_f32(t, NAN), 0x80);
        assert_int_equal(conv1_f32(t, -NAN), 0x80);
        assert_int_equal(conv1_f64(t, -NAN), 0x80);
        assert_int_equal(conv1_f32(t, -0.0f), 0x00);
        assert_int_equal(conv1_f64(t, -0.0), 0x00);
        assert_int_equal(conv1_f32(t, -1e-30f), 0x00);
        assert_int_equal(conv1_f32(t, INFINITY), 0x7F);
        assert_int_equal(conv1_f32(t, -INFINITY), 0xFF);
        assert_int_equal(conv1_f32(t, 1e6f), 0x7F);
        assert_int_equal(conv1_f32(t, -1e6f), 0xFF);
        assert_int_equal(conv1_f32(t, 1.0f), 0x40);
        assert_int_equal(conv1_f32(t, -1.0f), 0xC0);
    }
    assert_int_equal(conv1_f32(SHS_F8_E4M3FNUZ, 240.0f), 0x7F);
    assert_int_equal(conv1_f32(SHS_F8_E4M3FNUZ, 248.0f), 0x7F);
    assert_int_equal(conv1_f32(SHS_F8_E5M2FNUZ, 57344.0f), 0x7F);
    /* smallest negative subnormal survives, half of it goes to +0 */
    assert_int_equal(conv1_f32(SHS_F8_E4M3FNUZ, -0x1p-10f), 0x81);
    assert_int_equal(conv1_f32(SHS_F8_E4M3FNUZ, -0x1p-11f), 0x00);

    /* F16/BF16 targets from F64 keep Inf and overflow to it */
    assert_int_equal(conv1_f64(SHS_F16, 1e300), 0x7C00);
    assert_int_equal(conv1_f64(SHS_BF16, -1e300), 0xFF80);
    assert_int_equal(conv1_f64(SHS_F16, 1e-300), 0x0000);
    assert_int_equal(conv1_f64(SHS_F16, -DBL_TRUE_MIN), 0x8000);
    assert_int_equal(conv1_f64(SHS_BF16, INFINITY), 0x7F80);
}

static void test_e8m0(void **state)
{
    (void)state;
    assert_int_equal(conv1_f32(SHS_F8_E8M0, 1.0f), 0x7F);
    assert_int_equal(conv1_f32(SHS_F8_E8M0, 2.0f), 0x80);
    assert_int_equal(conv1_f32(SHS_F8_E8M0, 0.5f), 0x7E);
    assert_int_equal(conv1_f32(SHS_F8_E8M0, 1.4f), 0x7F);
    assert_int_equal(conv1_f32(SHS_F8_E8M0, 1.6f), 0x80);
    /* ties between 2^k and 2^(k+1) (at 1.5 * 2^k) go to the even code */
    assert_int_equal(conv1_f32(SHS_F8_E8M0, 1.5f), 0x80); /* 0x7F/0x80 */
    assert_int_equal(conv1_f32(SHS_F8_E8M0, 3.0f), 0x80); /* 0x80/0x81 */
    assert_int_equal(conv1_f32(SHS_F8_E8M0, 6.0f), 0x82); /* 0x81/0x82 */
    assert_int_equal(conv1_f32(SHS_F8_E8M0, 0x1.800002p1f), 0x81);
    /* F64 source: just above the tie rounds up (no rounding via F32) */
    assert_int_equal(conv1_f64(SHS_F8_E8M0, 3.0 * (1 + 0x1p-40)), 0x81);
    assert_int_equal(conv1_f64(SHS_F8_E8M0, 3.0), 0x80);
    /* specials: NaN -> 0xFF; +Inf and overflow saturate to 2^127; zero and
       tiny positive values go to 2^-127; negative values are NaN */
    assert_int_equal(conv1_f32(SHS_F8_E8M0, NAN), 0xFF);
    assert_int_equal(conv1_f32(SHS_F8_E8M0, -NAN), 0xFF);
    assert_int_equal(conv1_f32(SHS_F8_E8M0, INFINITY), 0xFE);
    assert_int_equal(conv1_f32(SHS_F8_E8M0, FLT_MAX), 0xFE);
    assert_int_equal(conv1_f32(SHS_F8_E8M0, 0x1.8p127f), 0xFE);
    assert_int_equal(conv1_f64(SHS_F8_E8M0, 1e300), 0xFE);
    assert_int_equal(conv1_f32(SHS_F8_E8M0, 0.0f), 0x00);
    assert_int_equal(conv1_f32(SHS_F8_E8M0, -0.0f), 0x00);
    assert_int_equal(conv1_f32(SHS_F8_E8M0, 0x1p-127f), 0x00);
    assert_int_equal(conv1_f32(SHS_F8_E8M0, 0x1p-126f), 0x01);
    assert_int_equal(conv1_f32(SHS_F8_E8M0, 0x1p-149f), 0x00);
    assert_int_equal(conv1_f64(SHS_F8_E8M0, 1e-300), 0x00);
    assert_int_equal(conv1_f64(SHS_F8_E8M0, DBL_TRUE_MIN), 0x00);
    assert_int_equal(conv1_f32(SHS_F8_E8M0, -1.0f), 0xFF);
    assert_int_equal(conv1_f32(SHS_F8_E8M0, -1e-30f), 0xFF);
    assert_int_equal(conv1_f32(SHS_F8_E8M0, -INFINITY), 0xFF);
    assert_int_equal(conv1_f64(SHS_F8_E8M0, -DBL_TRUE_MIN), 0xFF);
    /* out of E8M0: 2^-127 is a subnormal in F32, Inf in nothing */
    unsigned char e = 0x00;
    float f = 0;
    assert_int_equal(shs_convert(&f, SHS_F32, &e, SHS_F8_E8M0, 1), SHS_OK);
    assert_true(bits_of_f32(f) == 0x00400000u);
    uint16_t h = 0;
    assert_int_equal(shs_convert(&h, SHS_F16, &e, SHS_F8_E8M0, 1), SHS_OK);
    assert_int_equal(h, 0x0000); /* underflows F16 */
    e = 0xFE;
    assert_int_equal(shs_convert(&h, SHS_F16, &e, SHS_F8_E8M0, 1), SHS_OK);
    assert_int_equal(h, 0x7C00); /* overflows F16 to Inf */
    unsigned char e4 = 0;
    assert_int_equal(shs_convert(&e4, SHS_F8_E4M3, &e, SHS_F8_E8M0, 1), SHS_OK);
    assert_int_equal(e4, 0x7E); /* saturates */
}

/*
 * F64 -> narrow must round once.  d is just above an F16 halfway point but
 * rounds to exactly that halfway point in F32, so F64 -> F32 -> F16 would
 * round to even (down) where the correct answer is up.
 */
static void test_f64_no_double_rounding(void **state)
{
    (void)state;
    double d = 1.0 + 0x1p-11 + 0x1p-40;
    assert_true((double)(float)d == 1.0 + 0x1p-11); /* the trap is real */
    assert_int_equal(shs_f32_to_f16((float)d), 0x3C00);
    assert_int_equal(conv1_f64(SHS_F16, d), 0x3C01);
    assert_int_equal(conv1_f64(SHS_F16, -d), 0xBC01);
    assert_int_equal(conv1_f64(SHS_F16, 1.0 + 0x1p-11 - 0x1p-40), 0x3C00);
    assert_int_equal(conv1_f64(SHS_BF16, 1.0 + 0x1p-8 + 0x1p-40), 0x3F81);
    assert_int_equal(conv1_f64(SHS_F8_E4M3, 1.0 + 0x1p-4 + 0x1p-40), 0x39);
    assert_int_equal(conv1_f64(SHS_F8_E5M2, 1.0 + 0x1p-3 + 0x1p-40), 0x3D);
    assert_int_equal(conv1_f64(SHS_F8_E4M3FNUZ, 1.0 + 0x1p-4 + 0x1p-40), 0x41);
    assert_int_equal(conv1_f64(SHS_F8_E5M2FNUZ, 1.0 + 0x1p-3 + 0x1p-40), 0x41);
    /* subnormal F16 halfway point 2^-25, plus a little */
    assert_int_equal(conv1_f64(SHS_F16, 0x1p-25 * (1 + 0x1p-40)), 0x0001);
    assert_int_equal(conv1_f64(SHS_F16, 0x1p-25), 0x0000);
    /* F64 -> F32 is correctly rounded too */
    float f;
    d = 1.0 + 0x1p-24; /* halfway: to even */
    assert_int_equal(shs_convert(&f, SHS_F32, &d, SHS_F64, 1), SHS_OK);
    assert_true(f == 1.0f);
    d = 1.0 + 0x1p-24 + 0x1p-50;
    assert_int_equal(shs_convert(&f, SHS_F32, &d, SHS_F64, 1), SHS_OK);
    assert_true(f == 1.0f + 0x1p-23f);
}

/*
 * Every rounding boundary of every narrow format, from F32 and F64: for
 * each pair of neighbours (lo, hi) the exact midpoint goes to the even one,
 * the next value above it (F32 and F64 ulps) to hi, the one below to lo,
 * for both signs; and above the largest value, Inf or saturation.
 */
static void test_all_midpoints(void **state)
{
    (void)state;
    for (size_t k = 0; k < N_NARROW; k++) {
        const narrow_fmt *f = &k_narrow[k];
        size_t cap = (f->maxcode + 2) * 6 * 2;
        double *x64 = malloc(cap * sizeof *x64);
        float *x32 = malloc(cap * sizeof *x32);
        unsigned *want = malloc(cap * sizeof *want);
        int *use32 = malloc(cap * sizeof *use32);
        unsigned char *out = malloc(cap * 2);
        assert_non_null(x64);
        assert_non_null(x32);
        assert_non_null(want);
        assert_non_null(use32);
        assert_non_null(out);
        size_t n = 0;
        for (int neg = 0; neg < 2; neg++) {
            if (neg && f->kind == 3)
                break;
            for (unsigned c = 0; c <= f->maxcode; c++) {
                double lo = ref_value(f, c);
                double hi;
                int top = c == f->maxcode;
                if (!top)
                    hi = ref_value(f, c + 1);
                else if (f->kind == 3)
                    hi = 2 * lo;
                else /* the would-be next value above the max */
                    hi = lo + (lo - ref_value(f, c - 1));
                double mid = lo + (hi - lo) / 2;
                unsigned even = top       ? (f->kind == 0 ? f->maxcode + 1 : f->maxcode)
                                : (c & 1) ? c + 1
                                          : c;
                unsigned up = top ? (f->kind == 0 ? f->maxcode + 1 : f->maxcode) : c + 1;
                double pts[6] = { mid,
                                  nextafter(mid, INFINITY),
                                  nextafter(mid, 0),
                                  (double)nextafterf((float)mid, INFINITY),
                                  (double)nextafterf((float)mid, 0),
                                  lo };
                unsigned wants[6] = { even, up, c, up, c, c };
                for (int p = 0; p < 6; p++) {
                    double v = neg ? -pts[p] : pts[p];
                    x64[n] = v;
                    x32[n] = (float)v;
                    use32[n] = (double)(float)v == v;
                    want[n] = with_sign(f, wants[p], neg);
                    /* the reference must agree with the construction */
                    unsigned r = ref_round(f, v);
                    if (r != want[n])
                        fail_msg("test bug: %s ref_round(%a) = 0x%X, want 0x%X",
                                 shs_dtype_name(f->t), v, r, want[n]);
                    n++;
                }
            }
        }
        assert_true(n <= cap);
        assert_int_equal(shs_convert(out, f->t, x64, SHS_F64, n), SHS_OK);
        for (size_t i = 0; i < n; i++)
            check_code(f, load_code(out, f->t, i), want[i], x64[i], "F64");
        assert_int_equal(shs_convert(out, f->t, x32, SHS_F32, n), SHS_OK);
        for (size_t i = 0; i < n; i++)
            if (use32[i])
                check_code(f, load_code(out, f->t, i), want[i], x64[i], "F32");
        free(x64);
        free(x32);
        free(want);
        free(use32);
        free(out);
    }
}

/* ------------------------------------------------------------------------
 * Randomised cross-checks
 * ---------------------------------------------------------------------- */

#define N_RANDOM 1000000

/* Random F32 bit pattern: half uniformly random bits, half with an
   exponent near the range of the narrow formats. */
static uint32_t random_f32_bits(void)
{
    uint64_t r = rng_next();
    uint32_t u = (uint32_t)r;
    if (r >> 63) {
        uint32_t e = 100 + (uint32_t)((r >> 40) % 46); /* 2^-27..2^18 */
        u = (u & 0x807FFFFFu) | ((e & 0xFF) << 23);
    }
    return u;
}

static double random_f64_near(int emin, int emax)
{
    uint64_t r = rng_next();
    int e = emin + (int)((r >> 52) % (uint64_t)(emax - emin + 1));
    double m = 1.0 + (double)(rng_next() >> 11) * 0x1p-53;
    double v = ldexp(m, e);
    return (r & 1) ? -v : v;
}

static void test_random_f16(void **state)
{
    (void)state;
    const narrow_fmt *f = narrow(SHS_F16);
    uint32_t *in = malloc(N_RANDOM * 4);
    double *in64 = malloc(N_RANDOM * 8);
    uint16_t *out = malloc(N_RANDOM * 2);
    assert_non_null(in);
    assert_non_null(in64);
    assert_non_null(out);
    rng_state = UINT64_C(0x9E3779B97F4A7C15);
    for (size_t i = 0; i < N_RANDOM; i++)
        in[i] = random_f32_bits();
    assert_int_equal(shs_convert(out, SHS_F16, in, SHS_F32, N_RANDOM), SHS_OK);
    for (size_t i = 0; i < N_RANDOM; i++) {
        float x = f32_of_bits(in[i]);
        check_code(f, out[i], ref_round(f, x), x, "F32 (reference)");
        if (shs_f32_to_f16(x) != out[i])
            fail_msg("scalar/bulk mismatch at %a", (double)x);
    }
    for (size_t i = 0; i < N_RANDOM; i++)
        in64[i] = random_f64_near(-27, 17);
    assert_int_equal(shs_convert(out, SHS_F16, in64, SHS_F64, N_RANDOM), SHS_OK);
    for (size_t i = 0; i < N_RANDOM; i++)
        check_code(f, out[i], ref_round(f, in64[i]), in64[i], "F64 (reference)");

#ifdef __FLT16_MAX__
    /* The compiler's own conversions (libgcc / F16C). */
    assert_int_equal(shs_convert(out, SHS_F16, in, SHS_F32, N_RANDOM), SHS_OK);
    for (size_t i = 0; i < N_RANDOM; i++) {
        float x = f32_of_bits(in[i]);
        __extension__ _Float16 h = (_Float16)x;
        uint16_t hb;
        memcpy(&hb, &h, 2);
        check_code(f, out[i], hb, x, "F32 (_Float16)");
    }
    assert_int_equal(shs_convert(out, SHS_F16, in64, SHS_F64, N_RANDOM), SHS_OK);
    for (size_t i = 0; i < N_RANDOM; i++) {
        __extension__ _Float16 h = (_Float16)in64[i];
        uint16_t hb;
        memcpy(&hb, &h, 2);
        check_code(f, out[i], hb, in64[i], "F64 (_Float16)");
    }
    for (unsigned i = 0; i < 65536; i++) {
        uint16_t hb = (uint16_t)i;
        __extension__ _Float16 h;
        memcpy(&h, &hb, 2);
        float want = (float)h, got = shs_f16_to_f32(hb);
        if (!(isnan(want) && isnan(got)) && bits_of_f32(want) != bits_of_f32(got))
            fail_msg("F16 0x%04X: got %a, _Float16 gives %a", i, (double)got, (double)want);
    }
#endif
    free(in);
    free(in64);
    free(out);
#ifndef __FLT16_MAX__
    print_message("no _Float16 in this compiler: the cross-check did not run\n");
    TU_SKIP();
#endif
}

/* F32 -> BF16 reference by distances, computed in double. */
static uint16_t ref_bf16(float x)
{
    uint32_t u = bits_of_f32(x);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    if (isnan(x))
        return (uint16_t)(sign | 0x7FC0);
    if (a == 0x7F800000u)
        return (uint16_t)(sign | 0x7F80);
    uint32_t lo = a >> 16, hi = lo + 1;
    double vlo = (double)f32_of_bits(lo << 16);
    double vhi = hi == 0x7F80 ? 0x1p128 : (double)f32_of_bits(hi << 16);
    double ax = fabs((double)x);
    double dlo = ax - vlo, dhi = vhi - ax;
    uint32_t r = dlo < dhi ? lo : dhi < dlo ? hi : (lo & 1) ? hi : lo;
    return (uint16_t)(sign | r);
}

static void test_random_bf16(void **state)
{
    (void)state;
    const narrow_fmt *f = narrow(SHS_BF16);
    uint32_t *in = malloc(N_RANDOM * 4);
    double *in64 = malloc(N_RANDOM * 8);
    uint16_t *out = malloc(N_RANDOM * 2);
    assert_non_null(in);
    assert_non_null(in64);
    assert_non_null(out);
    rng_state = UINT64_C(0xD1B54A32D192ED03);
    for (size_t i = 0; i < N_RANDOM; i++)
        in[i] = (i & 1) ? (uint32_t)rng_next() : random_f32_bits();
    assert_int_equal(shs_convert(out, SHS_BF16, in, SHS_F32, N_RANDOM), SHS_OK);
    for (size_t i = 0; i < N_RANDOM; i++) {
        float x = f32_of_bits(in[i]);
        check_code(f, out[i], ref_bf16(x), x, "F32 (reference)");
        check_code(f, out[i], ref_round(f, x), x, "F32 (search reference)");
        if (shs_f32_to_bf16(x) != out[i])
            fail_msg("scalar/bulk mismatch at %a", (double)x);
    }
    for (size_t i = 0; i < N_RANDOM; i++)
        in64[i] = random_f64_near(-136, 129);
    assert_int_equal(shs_convert(out, SHS_BF16, in64, SHS_F64, N_RANDOM), SHS_OK);
    for (size_t i = 0; i < N_RANDOM; i++)
        check_code(f, out[i], ref_round(f, in64[i]), in64[i], "F64 (reference)");
    free(in);
    free(in64);
    free(out);
}

/* Every 8-bit format from random F32 and F64 values, against brute force
   over all 256 codes. */
static unsigned brute_f8(const narrow_fmt *f, double x)
{
    if (isnan(x) || isinf(x) || (f->kind == 3 && (x < 0 || x == 0)))
        return ref_round(f, x); /* specials: covered by hand above */
    if (f->kind == 0 && fabs(x) >= ref_overflow_threshold(f))
        return ref_round(f, x);
    int best = -1;
    double bestd = 0;
    for (unsigned c = 0; c < 256; c++) {
        double v = ref_value(f, c);
        if (isnan(v) || isinf(v))
            continue;
        if (f->kind != 3 && !signbit(v) != !signbit(x) && !(f->kind == 2 && c == 0))
            continue;
        double d = fabs(x - v);
        if (best < 0 || d < bestd || (d == bestd && !(c & 1) && (best & 1))) {
            best = (int)c;
            bestd = d;
        }
    }
    return (unsigned)best;
}

static void test_random_f8(void **state)
{
    (void)state;
    enum {
        N = 100000
    };
    float *in = malloc(N * 4);
    double *in64 = malloc(N * 8);
    unsigned char *out = malloc(N), *out64 = malloc(N);
    assert_non_null(in);
    assert_non_null(in64);
    assert_non_null(out);
    assert_non_null(out64);
    rng_state = UINT64_C(0x0123456789ABCDEF);
    for (size_t k = 0; k < N_F8_TYPES; k++) {
        const narrow_fmt *f = narrow(k_f8_types[k]);
        int emin = f->kind == 3 ? -130 : -20, emax = f->kind == 3 ? 128 : 17;
        for (size_t i = 0; i < N; i++) {
            in64[i] = random_f64_near(emin, emax);
            if (f->kind == 3)
                in64[i] = fabs(in64[i]);
            in[i] = (float)random_f64_near(emin, emax);
            if (f->kind == 3)
                in[i] = fabsf(in[i]);
        }
        assert_int_equal(shs_convert(out, f->t, in, SHS_F32, N), SHS_OK);
        assert_int_equal(shs_convert(out64, f->t, in64, SHS_F64, N), SHS_OK);
        for (size_t i = 0; i < N; i++) {
            check_code(f, out[i], brute_f8(f, in[i]), in[i], "F32 (brute)");
            check_code(f, out64[i], brute_f8(f, in64[i]), in64[i], "F64 (brute)");
        }
    }
    free(in);
    free(in64);
    free(out);
    free(out64);
}

/* ------------------------------------------------------------------------
 * shs_convert over every pair, buffers and errors
 * ---------------------------------------------------------------------- */

/* Sample values of a type: every code for 8/16-bit types, random bit
   patterns plus specials for F32/F64. */
static size_t sample_values(void *buf, shs_dtype t, size_t cap)
{
    size_t n = 0;
    if (t == SHS_F32 || t == SHS_F64) {
        static const double special[] = { 0.0,  -0.0,  1.0,   -1.0,    INFINITY, -INFINITY, NAN,
                                          -NAN, 1e-40, 1e300, -1e-300, 65520.0,  448.0,     1.5 };
        for (size_t i = 0; i < sizeof special / sizeof special[0]; i++, n++) {
            if (t == SHS_F32) {
                float v = (float)special[i];
                memcpy((char *)buf + 4 * n, &v, 4);
            } else {
                memcpy((char *)buf + 8 * n, &special[i], 8);
            }
        }
        for (; n < cap; n++) {
            if (t == SHS_F32) {
                uint32_t u = random_f32_bits();
                memcpy((char *)buf + 4 * n, &u, 4);
            } else {
                double v = random_f64_near(-140, 130);
                memcpy((char *)buf + 8 * n, &v, 8);
            }
        }
        return n;
    }
    size_t count = esize(t) == 1 ? 256 : 65536;
    for (; n < count && n < cap; n++)
        store_code(buf, t, n, (unsigned)n);
    return n;
}

static int is_nan_of(shs_dtype t, const void *buf, size_t i)
{
    double v;
    const char *p = buf;
    if (t == SHS_F64) {
        memcpy(&v, p + 8 * i, 8);
        return isnan(v);
    }
    if (t == SHS_F32) {
        float fv;
        memcpy(&fv, p + 4 * i, 4);
        return isnan(fv);
    }
    return code_is_nan(narrow(t), load_code(buf, t, i));
}

/* Direct conversion == conversion through F64 (exact for every source),
   for all 81 pairs, with misaligned buffers. */
static void test_all_pairs(void **state)
{
    (void)state;
    enum {
        CAP = 65536
    };
    unsigned char *src = malloc(CAP * 8 + 1), *mid = malloc(CAP * 8);
    unsigned char *direct = malloc(CAP * 8 + 3), *via = malloc(CAP * 8);
    assert_non_null(src);
    assert_non_null(mid);
    assert_non_null(direct);
    assert_non_null(via);
    rng_state = 42;
    for (size_t a = 0; a < N_FLOAT_TYPES; a++) {
        shs_dtype st = k_float_types[a];
        size_t n = sample_values(mid, st, 3000);
        if (esize(st) <= 2)
            n = sample_values(mid, st, CAP);
        memcpy(src + 1, mid, n * esize(st)); /* misaligned source */
        for (size_t b = 0; b < N_FLOAT_TYPES; b++) {
            shs_dtype dt = k_float_types[b];
            size_t dsz = esize(dt);
            memset(direct, 0xA5, n * dsz + 3);
            assert_int_equal(shs_convert(direct + 1, dt, src + 1, st, n), SHS_OK);
            /* nothing written outside [1, 1 + n * dsz) */
            assert_int_equal(direct[0], 0xA5);
            assert_int_equal(direct[1 + n * dsz], 0xA5);
            assert_int_equal(shs_convert(mid, SHS_F64, src + 1, st, n), SHS_OK);
            assert_int_equal(shs_convert(via, dt, mid, SHS_F64, n), SHS_OK);
            for (size_t i = 0; i < n; i++) {
                const unsigned char *p = direct + 1 + i * dsz, *q = via + i * dsz;
                if (memcmp(p, q, dsz) == 0)
                    continue;
                if (is_nan_of(dt, direct + 1, i) && is_nan_of(dt, via, i))
                    continue;
                fail_msg("%s -> %s element %zu differs from the path via F64", shs_dtype_name(st),
                         shs_dtype_name(dt), i);
            }
        }
    }
    free(src);
    free(mid);
    free(direct);
    free(via);
}

/* Lengths around the internal chunk size give the same results as the
   scalar helpers. */
static void test_lengths(void **state)
{
    (void)state;
    enum {
        MAXN = 1100
    };
    float in[MAXN];
    uint16_t out[MAXN + 1];
    rng_state = 7;
    for (size_t i = 0; i < MAXN; i++)
        in[i] = f32_of_bits(random_f32_bits());
    static const size_t lens[] = { 0,   1,   2,   3,   7,   8,   15,   16,  17,
                                   255, 256, 257, 511, 512, 513, 1000, MAXN };
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
        size_t n = lens[l];
        for (int which = 0; which < 2; which++) {
            shs_dtype t = which ? SHS_F16 : SHS_BF16;
            for (size_t i = 0; i <= MAXN; i++)
                out[i] = 0x5A5A;
            assert_int_equal(shs_convert(out, t, in, SHS_F32, n), SHS_OK);
            for (size_t i = 0; i < n; i++) {
                uint16_t want = which ? shs_f32_to_f16(in[i]) : shs_f32_to_bf16(in[i]);
                assert_int_equal(out[i], want);
            }
            assert_int_equal(out[n], 0x5A5A);
        }
    }
}

static void test_convert_errors(void **state)
{
    (void)state;
    unsigned char a[64] = { 0 }, b[64] = { 0 };
    static const shs_dtype unsupported[] = {
        SHS_BOOL, SHS_F4,  SHS_F6_E2M3, SHS_F6_E3M2, SHS_U8,  SHS_I8,  SHS_I16,
        SHS_U16,  SHS_I32, SHS_U32,     SHS_C64,     SHS_I64, SHS_U64,
    };
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++) {
        shs_dtype u = unsupported[i];
        for (size_t k = 0; k < N_FLOAT_TYPES; k++) {
            shs_dtype f = k_float_types[k];
            assert_int_equal(shs_convert(a, f, b, u, 4), SHS_ECONVERT);
            assert_non_null(strstr(shs_last_error(), shs_dtype_name(u)));
            assert_non_null(strstr(shs_last_error(), shs_dtype_name(f)));
            assert_int_equal(shs_convert(a, u, b, f, 4), SHS_ECONVERT);
            assert_non_null(strstr(shs_last_error(), shs_dtype_name(u)));
            assert_non_null(strstr(shs_last_error(), shs_dtype_name(f)));
        }
    }
    assert_int_equal(shs_convert(a, SHS_I32, b, SHS_F32, 1), SHS_ECONVERT);
    assert_int_equal(shs_convert(a, SHS_I32, b, SHS_U32, 1), SHS_ECONVERT);
    assert_string_equal(shs_strerror(SHS_ECONVERT), "unsupported dtype conversion");

    /* identical types: a byte copy, for every type */
    for (size_t i = 0; i < sizeof b; i++)
        b[i] = (unsigned char)(i * 37 + 1);
    for (int d = 0; d < SHS_DTYPE_COUNT; d++) {
        memset(a, 0, sizeof a);
        assert_int_equal(shs_convert(a, (shs_dtype)d, b, (shs_dtype)d, 4), SHS_OK);
        size_t nb = 4 * k_all_bits[d] / 8;
        assert_memory_equal(a, b, nb);
        if (nb < sizeof a)
            assert_int_equal(a[nb], 0);
    }
    /* identical sub-byte type with a partial byte */
    assert_int_equal(shs_convert(a, SHS_F4, b, SHS_F4, 3), SHS_EMISALIGNED);
    assert_int_equal(shs_convert(a, SHS_F4, b, SHS_F4, 2), SHS_OK);
    /* NaN payloads survive an identical-type copy */
    uint32_t snan = 0x7F800001u, copy = 0;
    assert_int_equal(shs_convert(&copy, SHS_F32, &snan, SHS_F32, 1), SHS_OK);
    assert_true(copy == snan);

    /* nothing to do */
    assert_int_equal(shs_convert(NULL, SHS_F16, NULL, SHS_F32, 0), SHS_OK);
    assert_int_equal(shs_convert(NULL, SHS_F32, NULL, SHS_F32, 0), SHS_OK);
    /* bad arguments */
    assert_int_equal(shs_convert(NULL, SHS_F16, b, SHS_F32, 1), SHS_EINVAL);
    assert_int_equal(shs_convert(a, SHS_F16, NULL, SHS_F32, 1), SHS_EINVAL);
    assert_int_equal(shs_convert(a, SHS_DTYPE_COUNT, b, SHS_F32, 1), SHS_EINVAL);
    assert_int_equal(shs_convert(a, SHS_F32, b, (shs_dtype)-1, 1), SHS_EINVAL);
}

/* shs_dtype_is_float says exactly which dtypes shs_convert converts
   between; out-of-range values are not floats. */
static void test_is_float(void **state)
{
    (void)state;
    int n_float = 0;
    for (int t = 0; t < SHS_DTYPE_COUNT; t++) {
        unsigned char src[8] = { 0 }, dst[8];
        int converts = shs_convert(dst, (shs_dtype)t, src, SHS_F32, 1) == SHS_OK;
        assert_int_equal(shs_dtype_is_float((shs_dtype)t), converts);
        n_float += converts;
    }
    assert_int_equal(n_float, 9); /* F64 F32 F16 BF16 and the five F8 kinds */
    assert_false(shs_dtype_is_float((shs_dtype)SHS_DTYPE_COUNT));
    assert_false(shs_dtype_is_float((shs_dtype)-1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_name_parse_roundtrip),
        cmocka_unit_test(test_parse_rejects),
        cmocka_unit_test(test_bits),
        cmocka_unit_test(test_is_float),
        cmocka_unit_test(test_nbytes),
        cmocka_unit_test(test_bf16_exhaustive),
        cmocka_unit_test(test_f16_exhaustive),
        cmocka_unit_test(test_f8_exhaustive),
        cmocka_unit_test(test_f8_constants),
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_f16_rounding),
        cmocka_unit_test(test_f8_saturation_and_specials),
        cmocka_unit_test(test_e8m0),
        cmocka_unit_test(test_f64_no_double_rounding),
        cmocka_unit_test(test_all_midpoints),
        cmocka_unit_test(test_random_f16),
        cmocka_unit_test(test_random_bf16),
        cmocka_unit_test(test_random_f8),
        cmocka_unit_test(test_all_pairs),
        cmocka_unit_test(test_lengths),
        cmocka_unit_test(test_convert_errors),
    };
    return TU_RUN_GROUP(tests, NULL, NULL);
}
