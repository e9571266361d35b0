/* dtype.c -- dtype names and sizes, tensor byte sizes, and conversions
 * between the floating-point formats.
 *
 * Conversion design.  Every supported source format other than F64 is
 * exactly representable in F32 (F16, BF16, all F8 kinds, E8M0 including its
 * 2^-127), so a conversion decodes a chunk of the source into F32 bit
 * patterns (exact) and encodes that chunk into the target with a single
 * rounding.  An F64 source is encoded straight from its bits, never through
 * F32, so F64 -> narrow types round once and cannot double-round.
 *
 * Rounding is to nearest, ties to even, for every narrowing.  Special
 * values:
 *   - NaN stays NaN.  Narrowing to an IEEE-like target (F32, F16, BF16,
 *     F8_E5M2) keeps the sign and the top payload bits and sets the quiet
 *     bit; F8_E4M3 has S.1111.111 (sign kept); the FNUZ kinds have the one
 *     NaN 0x80; E8M0 has 0xFF.  Widening (F16/BF16 -> F32) keeps NaN bits
 *     exactly.
 *   - Infinity and overflow go to infinity in targets that have one (F16,
 *     BF16, F8_E5M2: IEEE overflow, i.e. values that round to at least
 *     2^(emax+1)).  Targets without infinity (F8_E4M3, F8_E4M3FNUZ,
 *     F8_E5M2FNUZ, E8M0) SATURATE: +-Inf and out-of-range finite values
 *     become the largest finite value of the same sign.  This is the
 *     "satfinite" mode of CUDA's __nv_cvt_*_to_fp8 and ONNX Cast's default
 *     (saturate=1), and what quantisation code gets by clamping before a
 *     cast; a plain torch `.to(torch.float8_e4m3fn)` gives NaN for
 *     |x| >= 480 instead, which would silently poison a whole block of a
 *     scaled tensor.
 *   - The FNUZ kinds have no -0: -0.0 and negative values that round to
 *     zero become +0 (0x00), since 0x80 is their NaN.
 *   - E8M0 (unsigned, value 2^(e-127), 0xFF = NaN, no zero, no sign):
 *     positive values round to the nearest power of two in value (the
 *     midpoint of 2^k and 2^(k+1) is 1.5 * 2^k), ties to the even encoding
 *     (as ml_dtypes; torch rounds those ties up).  Values above 2^127 and
 *     +Inf saturate to 0xFE (2^127); +0, -0 and positive values below
 *     2^-127 go to the smallest value 0x00 (2^-127), the nearest
 *     representable one.  Negative non-zero values (and -Inf) have no
 *     meaningful nearest value in an unsigned format and become NaN (0xFF)
 *     rather than silently losing their sign.
 *
 * The F32 <-> F16/BF16 loops are written as branch-free bit manipulation
 * over fixed-size chunks so that the compiler can vectorise them.  They
 * assume the default floating-point environment (round to nearest), like
 * the compiler's own float <-> double conversions used for F32 <-> F64.
 */
#include "common/internal.h"

#include <inttypes.h>
#include <ctype.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Names and sizes
 * ---------------------------------------------------------------------- */

static const char *const k_names[SHS_DTYPE_COUNT] = {
    [SHS_BOOL] = "BOOL",
    [SHS_F4] = "F4",
    [SHS_F6_E2M3] = "F6_E2M3",
    [SHS_F6_E3M2] = "F6_E3M2",
    [SHS_U8] = "U8",
    [SHS_I8] = "I8",
    [SHS_F8_E5M2] = "F8_E5M2",
    [SHS_F8_E4M3] = "F8_E4M3",
    [SHS_F8_E8M0] = "F8_E8M0",
    [SHS_F8_E4M3FNUZ] = "F8_E4M3FNUZ",
    [SHS_F8_E5M2FNUZ] = "F8_E5M2FNUZ",
    [SHS_I16] = "I16",
    [SHS_U16] = "U16",
    [SHS_F16] = "F16",
    [SHS_BF16] = "BF16",
    [SHS_I32] = "I32",
    [SHS_U32] = "U32",
    [SHS_F32] = "F32",
    [SHS_C64] = "C64",
    [SHS_F64] = "F64",
    [SHS_I64] = "I64",
    [SHS_U64] = "U64",
};

static const unsigned char k_bits[SHS_DTYPE_COUNT] = {
    [SHS_BOOL] = 8,    [SHS_F4] = 4,          [SHS_F6_E2M3] = 6,     [SHS_F6_E3M2] = 6,
    [SHS_U8] = 8,      [SHS_I8] = 8,          [SHS_F8_E5M2] = 8,     [SHS_F8_E4M3] = 8,
    [SHS_F8_E8M0] = 8, [SHS_F8_E4M3FNUZ] = 8, [SHS_F8_E5M2FNUZ] = 8, [SHS_I16] = 16,
    [SHS_U16] = 16,    [SHS_F16] = 16,        [SHS_BF16] = 16,       [SHS_I32] = 32,
    [SHS_U32] = 32,    [SHS_F32] = 32,        [SHS_C64] = 64,        [SHS_F64] = 64,
    [SHS_I64] = 64,    [SHS_U64] = 64,
};

static int dtype_valid(shs_dtype dtype)
{
    return (unsigned)dtype < SHS_DTYPE_COUNT;
}

const char *shs_dtype_name(shs_dtype dtype)
{
    return dtype_valid(dtype) ? k_names[dtype] : NULL;
}

unsigned shs_dtype_bits(shs_dtype dtype)
{
    return dtype_valid(dtype) ? k_bits[dtype] : 0;
}

/*
 * The reader calls this once per tensor of a header that may hold 100,000
 * tensors, so pick the single candidate from the length and one or two
 * distinguishing bytes, then confirm it with one memcmp.
 */
static int dtype_lookup(const char *s, size_t len)
{
    int d = -1;
    switch (len) {
    case 2: d = s[0] == 'U' ? SHS_U8 : s[0] == 'I' ? SHS_I8 : SHS_F4; break;
    case 3: {
        int w = s[1] == '1' ? 0 : s[1] == '3' ? 1 : s[1] == '6' ? 2 : -1;
        if (w < 0)
            return -1;
        switch (s[0]) {
        case 'I': d = w == 0 ? SHS_I16 : w == 1 ? SHS_I32 : SHS_I64; break;
        case 'U': d = w == 0 ? SHS_U16 : w == 1 ? SHS_U32 : SHS_U64; break;
        case 'F': d = w == 0 ? SHS_F16 : w == 1 ? SHS_F32 : SHS_F64; break;
        case 'C': d = SHS_C64; break;
        default: return -1;
        }
        break;
    }
    case 4: d = s[1] == 'O' ? SHS_BOOL : SHS_BF16; break;
    case 7:
        /* F6_E2M3 F6_E3M2 F8_E5M2 F8_E4M3 F8_E8M0: byte 4 tells them apart
           within each of F6 / F8. */
        if (s[1] == '6')
            d = s[4] == '2' ? SHS_F6_E2M3 : SHS_F6_E3M2;
        else
            d = s[4] == '5' ? SHS_F8_E5M2 : s[4] == '4' ? SHS_F8_E4M3 : SHS_F8_E8M0;
        break;
    case 11: d = s[4] == '4' ? SHS_F8_E4M3FNUZ : SHS_F8_E5M2FNUZ; break;
    default: return -1;
    }
    return memcmp(s, k_names[d], len) == 0 ? d : -1;
}

int shs_dtype_parse(shs_dtype *out, const char *name, size_t len)
{
    if (!out || (!name && len))
        return shs__err(SHS_EINVAL, "shs_dtype_parse: NULL argument");
    int d = name ? dtype_lookup(name, len) : -1;
    if (d < 0) {
        /* A name is at most 11 bytes; show a bounded prefix of junk. */
        int show = len > 32 ? 32 : (int)len;
        return shs__err(SHS_EDTYPE, "unknown dtype \"%.*s\"%s", show, name ? name : "",
                        len > 32 ? "..." : "");
    }
    *out = (shs_dtype)d;
    return SHS_OK;
}

/* ------------------------------------------------------------------------
 * Byte sizes
 * ---------------------------------------------------------------------- */

int shs__nbytes_from_numel(uint64_t *out, shs_dtype dtype, uint64_t numel)
{
    uint64_t nbits;
    *out = 0;
    if (!dtype_valid(dtype))
        return shs__err(SHS_EINVAL, "invalid dtype value %d", (int)dtype);
    if (shs__mul_u64(numel, k_bits[dtype], &nbits))
        return shs__err(SHS_EOVERFLOW, "%" PRIu64 " elements x %u bits (%s) overflows 64 bits",
                        numel, (unsigned)k_bits[dtype], k_names[dtype]);
    if (nbits % 8 != 0)
        return shs__err(SHS_EMISALIGNED,
                        "%" PRIu64 " elements x %u bits (%s) is not a whole "
                        "number of bytes",
                        numel, (unsigned)k_bits[dtype], k_names[dtype]);
    *out = nbits / 8;
    return SHS_OK;
}

/*
 * Like the reference implementation, the shape product is checked one
 * dimension at a time, so [2^32, 2^32, 2^32, 0] overflows even though its
 * true product is 0.
 */
int shs_tensor_nbytes(uint64_t *out, shs_dtype dtype, size_t ndim, const uint64_t *shape)
{
    uint64_t numel = 1;
    if (!out || (ndim && !shape)) {
        if (out)
            *out = 0;
        return shs__err(SHS_EINVAL, "shs_tensor_nbytes: NULL argument");
    }
    for (size_t i = 0; i < ndim; i++) {
        if (shs__mul_u64(numel, shape[i], &numel)) {
            *out = 0;
            return shs__err(SHS_EOVERFLOW, "shape product overflows 64 bits at dimension %zu", i);
        }
    }
    return shs__nbytes_from_numel(out, dtype, numel);
}

/* ------------------------------------------------------------------------
 * Bit patterns
 * ---------------------------------------------------------------------- */

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float f32_from(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/*
 * Branch-free select.  A plain `?:` lets gcc sink the float operation of
 * the F16 paths into a branch, and with -ftrapping-math (the default) it
 * will not if-convert a float operation back, so the loop stays scalar.
 */
static inline uint32_t select_u32(uint32_t cond, uint32_t x, uint32_t y)
{
    uint32_t m = 0u - cond;
    return (x & m) | (y & ~m);
}

/* F32 -> BF16.  Adding 0x7FFF plus the kept LSB rounds to nearest even; a
   carry out of the mantissa bumps the exponent, up to infinity. */
static inline uint16_t bf16_from_f32_bits(uint32_t u)
{
    uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    uint32_t quiet = (u >> 16) | 0x0040u;
    return (uint16_t)((u & 0x7FFFFFFFu) > 0x7F800000u ? quiet : rounded);
}

static inline uint32_t f32_bits_from_bf16(uint16_t h)
{
    return (uint32_t)h << 16;
}

/*
 * F32 -> F16.  Normal results: rebias the exponent and round the low 13
 * bits to nearest even with an add.  Subnormal results (|x| < 2^-14): add
 * 0.5f, whose ulp is 2^-24 = the F16 subnormal step, so the FPU rounds |x|
 * to a multiple of 2^-24 once, and the low bits of the sum are the F16
 * code.  (An F32 subnormal input flushed by DAZ still gives the right
 * answer, 0.)
 */
static inline uint16_t f16_from_f32_bits(uint32_t u)
{
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7FFFFFFFu;
    uint32_t n = a - 0x38000000u; /* exponent 127 -> 15 */
    n = (n + 0x0FFFu + ((n >> 13) & 1u)) >> 13;
    uint32_t sub = f32_bits(f32_from(a) + 0.5f) - 0x3F000000u;
    uint32_t r = select_u32(a < 0x38800000u, sub, n); /* below 2^-14 */
    r = select_u32(a >= 0x477FF000u, 0x7C00u, r);     /* rounds >= 65520 */
    r = select_u32(a > 0x7F800000u, 0x7E00u | ((a >> 13) & 0x03FFu), r);
    return (uint16_t)(sign | r);
}

static inline uint32_t f32_bits_from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t a = h & 0x7FFFu;
    uint32_t norm = (a << 13) + 0x38000000u;      /* exponent 15 -> 127 */
    uint32_t special = (a << 13) | 0x7F800000u;   /* Inf and NaN bits kept */
    uint32_t sub = f32_bits((float)a * 0x1p-24f); /* exact */
    uint32_t r = select_u32(a >= 0x7C00u, special, norm);
    return sign | select_u32(a < 0x0400u, sub, r);
}

uint16_t shs_f32_to_bf16(float x)
{
    return bf16_from_f32_bits(f32_bits(x));
}

float shs_bf16_to_f32(uint16_t x)
{
    return f32_from(f32_bits_from_bf16(x));
}

uint16_t shs_f32_to_f16(float x)
{
    return f16_from_f32_bits(f32_bits(x));
}

float shs_f16_to_f32(uint16_t x)
{
    return f32_from(f32_bits_from_f16(x));
}

/* ------------------------------------------------------------------------
 * Narrow formats, described by a table
 * ---------------------------------------------------------------------- */

enum fkind {
    FK_IEEE, /* all-ones exponent: Inf (mantissa 0) and NaN */
    FK_FN,   /* no Inf; NaN = S.1111.111 (OCP e4m3fn) */
    FK_FNUZ  /* no Inf, no -0; the one NaN is 0x80 */
};

typedef struct fmt {
    unsigned mant; /* stored mantissa bits */
    int bias;
    unsigned sign_shift; /* 15 for 16-bit formats, 7 for 8-bit */
    uint32_t maxcode;    /* largest finite magnitude encoding */
    uint32_t infcode;    /* FK_IEEE: infinity; else unused */
    enum fkind kind;
} fmt;

static const fmt k_f16 = { 10, 15, 15, 0x7BFF, 0x7C00, FK_IEEE };
static const fmt k_bf16 = { 7, 127, 15, 0x7F7F, 0x7F80, FK_IEEE };
static const fmt k_e5m2 = { 2, 15, 7, 0x7B, 0x7C, FK_IEEE };
static const fmt k_e4m3 = { 3, 7, 7, 0x7E, 0, FK_FN };
static const fmt k_e4m3fnuz = { 3, 8, 7, 0x7F, 0, FK_FNUZ };
static const fmt k_e5m2fnuz = { 2, 16, 7, 0x7F, 0, FK_FNUZ };

/*
 * Encode a double (as bits) into a format of at most 16 bits, rounding to
 * nearest even once, from the exact value.  Works in integers only.
 */
static uint32_t encode_from_f64_bits(uint64_t bits, const fmt *f)
{
    const uint64_t frac_mask = (UINT64_C(1) << 52) - 1;
    uint32_t sign = (uint32_t)(bits >> 63) << f->sign_shift;
    uint64_t a = bits & ~(UINT64_C(1) << 63);
    uint32_t mmask = (1u << f->mant) - 1;

    if (a > UINT64_C(0x7FF0000000000000)) { /* NaN */
        if (f->kind == FK_FNUZ)
            return 0x80;
        if (f->kind == FK_FN)
            return sign | 0x7F;
        return sign | f->infcode | (1u << (f->mant - 1)) |
               ((uint32_t)((a & frac_mask) >> (52 - f->mant)) & mmask);
    }
    if (a == UINT64_C(0x7FF0000000000000)) /* Inf */
        return sign | (f->kind == FK_IEEE ? f->infcode : f->maxcode);

    int e = (int)(a >> 52);
    if (e == 0) /* zero, or an F64 subnormal: far below every target's
                     smallest subnormal, so it rounds to zero */
        return f->kind == FK_FNUZ ? 0 : sign;

    uint64_t m = (a & frac_mask) | (UINT64_C(1) << 52); /* 53 bits */
    e -= 1023;
    int emin = 1 - f->bias;
    /* Shift that leaves the target's mantissa (with implicit bit) in m,
       or, below emin, its subnormal multiple of 2^(emin - mant). */
    int shift = 52 - (int)f->mant + (e < emin ? emin - e : 0);
    uint64_t q;
    if (shift > 54) {
        q = 0; /* below half the smallest subnormal */
    } else {
        uint64_t rem = m & ((UINT64_C(1) << shift) - 1);
        uint64_t half = UINT64_C(1) << (shift - 1);
        q = m >> shift;
        q += rem > half || (rem == half && (q & 1));
    }
    /* Normal: (e - emin) << mant plus q (which holds the implicit bit)
       is the biased exponent and fraction; a rounding carry moves into
       the exponent by itself.  Subnormal: q is the code. */
    uint64_t code = e >= emin ? ((uint64_t)(e - emin) << f->mant) + q : q;
    if (code > f->maxcode)
        return sign | (f->kind == FK_IEEE ? f->infcode : f->maxcode);
    if (code == 0 && f->kind == FK_FNUZ)
        return 0;
    return sign | (uint32_t)code;
}

/* Decode an 8-bit code of `f` to F32 bits (exact). */
static uint32_t f8_to_f32_bits(unsigned c, const fmt *f)
{
    uint32_t sign = (uint32_t)(c & 0x80u) << 24;
    unsigned mag = c & 0x7Fu;
    unsigned mmask = (1u << f->mant) - 1;
    unsigned emax_field = 0x7Fu >> f->mant;
    unsigned fr = mag & mmask;
    int e = (int)(mag >> f->mant);

    switch (f->kind) {
    case FK_FNUZ:
        if (c == 0x80)
            return 0x7FC00000u;
        break;
    case FK_FN:
        if (mag == 0x7F)
            return sign | 0x7FC00000u;
        break;
    case FK_IEEE:
        if ((unsigned)e == emax_field) /* Inf, or NaN with its payload */
            return sign | 0x7F800000u | ((uint32_t)fr << (23 - f->mant));
        break;
    }
    if (e == 0) {
        if (fr == 0)
            return sign;
        e = 1;
        while (!(fr & (1u << f->mant))) { /* normalise the subnormal */
            fr <<= 1;
            e--;
        }
        fr &= mmask;
    }
    return sign | ((uint32_t)(e - f->bias + 127) << 23) | ((uint32_t)fr << (23 - f->mant));
}

static uint32_t e8m0_to_f32_bits(unsigned c)
{
    if (c == 0xFF)
        return 0x7FC00000u;
    if (c == 0)
        return 0x00400000u; /* 2^-127 is an F32 subnormal */
    return (uint32_t)c << 23;
}

/* See the file comment for the E8M0 rules. */
static uint32_t e8m0_from_f64_bits(uint64_t bits)
{
    uint64_t a = bits & ~(UINT64_C(1) << 63);
    if (a > UINT64_C(0x7FF0000000000000))
        return 0xFF; /* NaN */
    if (a == 0)
        return 0x00; /* +-0 */
    if (bits >> 63)
        return 0xFF; /* negative */
    if (a == UINT64_C(0x7FF0000000000000))
        return 0xFE; /* +Inf saturates */
    int e = (int)(a >> 52);
    if (e == 0)
        return 0x00; /* F64 subnormal */
    uint64_t frac = a & ((UINT64_C(1) << 52) - 1);
    const uint64_t half = UINT64_C(1) << 51; /* 1.5 * 2^k */
    int code = e - 1023 + 127;
    code += frac > half || (frac == half && (code & 1));
    if (code < 0)
        return 0x00;
    if (code > 0xFE)
        return 0xFE;
    return (uint32_t)code;
}

int shs_dtype_is_float(shs_dtype t)
{
    switch (t) {
    case SHS_F64:
    case SHS_F32:
    case SHS_F16:
    case SHS_BF16:
    case SHS_F8_E4M3:
    case SHS_F8_E5M2:
    case SHS_F8_E4M3FNUZ:
    case SHS_F8_E5M2FNUZ:
    case SHS_F8_E8M0: return 1;
    default: return 0;
    }
}

/* ------------------------------------------------------------------------
 * Chunked conversion loops.  `k` is at most CHUNK; the loops are inlined
 * once with k == CHUNK (a constant trip count, which even gcc's -O2 cost
 * model vectorises) and once for the tail.
 * ---------------------------------------------------------------------- */

#define CHUNK 256

/* The F8 formats are named case by case in the switches below (rather
   than looked up from the dtype) so that each loop gets its format as a
   constant. */
static inline void decode_f8(uint32_t *restrict out, const unsigned char *restrict s, const fmt *f,
                             size_t k)
{
    for (size_t i = 0; i < k; i++)
        out[i] = f8_to_f32_bits(s[i], f);
}

static inline void decode_f32(uint32_t *restrict out, const unsigned char *restrict s, shs_dtype st,
                              size_t k)
{
    switch (st) {
    case SHS_F32: memcpy(out, s, k * 4); break;
    case SHS_BF16:
        for (size_t i = 0; i < k; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            out[i] = f32_bits_from_bf16(h);
        }
        break;
    case SHS_F16:
        for (size_t i = 0; i < k; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            out[i] = f32_bits_from_f16(h);
        }
        break;
    case SHS_F8_E8M0:
        for (size_t i = 0; i < k; i++)
            out[i] = e8m0_to_f32_bits(s[i]);
        break;
    case SHS_F8_E5M2: decode_f8(out, s, &k_e5m2, k); break;
    case SHS_F8_E4M3: decode_f8(out, s, &k_e4m3, k); break;
    case SHS_F8_E4M3FNUZ: decode_f8(out, s, &k_e4m3fnuz, k); break;
    case SHS_F8_E5M2FNUZ: decode_f8(out, s, &k_e5m2fnuz, k); break;
    default: break; /* shs_convert admits no other source */
    }
}

static inline uint64_t f64_bits_from_f32_bits(uint32_t u)
{
    double d = (double)f32_from(u);
    uint64_t b;
    memcpy(&b, &d, sizeof b);
    return b;
}

static inline void encode_f8_from_f32(unsigned char *restrict d, const uint32_t *restrict in,
                                      const fmt *f, size_t k)
{
    for (size_t i = 0; i < k; i++)
        d[i] = (unsigned char)encode_from_f64_bits(f64_bits_from_f32_bits(in[i]), f);
}

static inline void encode_f32(unsigned char *restrict d, shs_dtype dt, const uint32_t *restrict in,
                              size_t k)
{
    switch (dt) {
    case SHS_F32: memcpy(d, in, k * 4); break;
    case SHS_F64:
        for (size_t i = 0; i < k; i++) {
            double v = (double)f32_from(in[i]);
            memcpy(d + 8 * i, &v, 8);
        }
        break;
    case SHS_BF16:
        for (size_t i = 0; i < k; i++) {
            uint16_t h = bf16_from_f32_bits(in[i]);
            memcpy(d + 2 * i, &h, 2);
        }
        break;
    case SHS_F16:
        for (size_t i = 0; i < k; i++) {
            uint16_t h = f16_from_f32_bits(in[i]);
            memcpy(d + 2 * i, &h, 2);
        }
        break;
    case SHS_F8_E8M0:
        for (size_t i = 0; i < k; i++)
            d[i] = (unsigned char)e8m0_from_f64_bits(f64_bits_from_f32_bits(in[i]));
        break;
    case SHS_F8_E5M2: encode_f8_from_f32(d, in, &k_e5m2, k); break;
    case SHS_F8_E4M3: encode_f8_from_f32(d, in, &k_e4m3, k); break;
    case SHS_F8_E4M3FNUZ: encode_f8_from_f32(d, in, &k_e4m3fnuz, k); break;
    case SHS_F8_E5M2FNUZ: encode_f8_from_f32(d, in, &k_e5m2fnuz, k); break;
    default: break; /* shs_convert admits no other target */
    }
}

static void convert_via_f32(unsigned char *d, shs_dtype dt, const unsigned char *s, shs_dtype st,
                            size_t n)
{
    uint32_t buf[CHUNK];
    size_t dsz = k_bits[dt] / 8, ssz = k_bits[st] / 8;
    while (n >= CHUNK) {
        decode_f32(buf, s, st, CHUNK);
        encode_f32(d, dt, buf, CHUNK);
        s += CHUNK * ssz;
        d += CHUNK * dsz;
        n -= CHUNK;
    }
    if (n) {
        decode_f32(buf, s, st, n);
        encode_f32(d, dt, buf, n);
    }
}

static void encode_f8_from_f64(unsigned char *d, const unsigned char *s, const fmt *f, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t b;
        memcpy(&b, s + 8 * i, 8);
        d[i] = (unsigned char)encode_from_f64_bits(b, f);
    }
}

/* F64 source: every target is encoded from the F64 bits directly. */
static void convert_from_f64(unsigned char *d, shs_dtype dt, const unsigned char *s, size_t n)
{
    switch (dt) {
    case SHS_F32:
        for (size_t i = 0; i < n; i++) {
            double v;
            memcpy(&v, s + 8 * i, 8);
            float f = (float)v; /* one IEEE rounding, to nearest even */
            memcpy(d + 4 * i, &f, 4);
        }
        break;
    case SHS_F16:
    case SHS_BF16: {
        const fmt *f = dt == SHS_F16 ? &k_f16 : &k_bf16;
        for (size_t i = 0; i < n; i++) {
            uint64_t b;
            memcpy(&b, s + 8 * i, 8);
            uint16_t h = (uint16_t)encode_from_f64_bits(b, f);
            memcpy(d + 2 * i, &h, 2);
        }
        break;
    }
    case SHS_F8_E8M0:
        for (size_t i = 0; i < n; i++) {
            uint64_t b;
            memcpy(&b, s + 8 * i, 8);
            d[i] = (unsigned char)e8m0_from_f64_bits(b);
        }
        break;
    case SHS_F8_E5M2: encode_f8_from_f64(d, s, &k_e5m2, n); break;
    case SHS_F8_E4M3: encode_f8_from_f64(d, s, &k_e4m3, n); break;
    case SHS_F8_E4M3FNUZ: encode_f8_from_f64(d, s, &k_e4m3fnuz, n); break;
    case SHS_F8_E5M2FNUZ: encode_f8_from_f64(d, s, &k_e5m2fnuz, n); break;
    default: break; /* shs_convert admits no other target */
    }
}

int shs_convert(void *dst, shs_dtype dst_type, const void *src, shs_dtype src_type, size_t n)
{
    if (!dtype_valid(dst_type) || !dtype_valid(src_type))
        return shs__err(SHS_EINVAL, "shs_convert: invalid dtype value (%d -> %d)", (int)src_type,
                        (int)dst_type);
    if (src_type == dst_type) {
        uint64_t nbytes;
        int rc = shs__nbytes_from_numel(&nbytes, src_type, n);
        if (rc < 0)
            return rc;
        if (nbytes > SIZE_MAX)
            return shs__err(SHS_EOVERFLOW, "shs_convert: %" PRIu64 " bytes", nbytes);
        if (nbytes && (!dst || !src))
            return shs__err(SHS_EINVAL, "shs_convert: NULL buffer");
        if (nbytes)
            memcpy(dst, src, (size_t)nbytes);
        return SHS_OK;
    }
    if (!shs_dtype_is_float(src_type) || !shs_dtype_is_float(dst_type))
        return shs__err(SHS_ECONVERT, "cannot convert %s to %s", k_names[src_type],
                        k_names[dst_type]);
    if (n == 0)
        return SHS_OK;
    if (!dst || !src)
        return shs__err(SHS_EINVAL, "shs_convert: NULL buffer");
    if (n > SIZE_MAX / 8)
        return shs__err(SHS_EOVERFLOW, "shs_convert: %zu elements", n);

    if (src_type == SHS_F64)
        convert_from_f64(dst, dst_type, src, n);
    else
        convert_via_f32(dst, dst_type, src, src_type, n);
    return SHS_OK;
}

/* ---- names other tools use ---- */

/* ---- dtype names of frameworks ---- */

static const struct {
    const char *alias;
    shs_dtype dtype;
} k_aliases[] = {
    { "BF16", SHS_BF16 },       { "BFLOAT16", SHS_BF16 },
    { "F16", SHS_F16 },         { "FP16", SHS_F16 },
    { "FLOAT16", SHS_F16 },     { "HALF", SHS_F16 },
    { "F32", SHS_F32 },         { "FP32", SHS_F32 },
    { "FLOAT32", SHS_F32 },     { "FLOAT", SHS_F32 },
    { "F64", SHS_F64 },         { "FP64", SHS_F64 },
    { "FLOAT64", SHS_F64 },     { "DOUBLE", SHS_F64 },
    { "F8_E4M3", SHS_F8_E4M3 }, { "FLOAT8_E4M3FN", SHS_F8_E4M3 },
    { "F8_E5M2", SHS_F8_E5M2 }, { "FLOAT8_E5M2", SHS_F8_E5M2 },
};

int shs_dtype_parse_alias(shs_dtype *out, const char *name)
{
    if (!out || !name)
        return shs__err(SHS_EINVAL, "shs_dtype_parse_alias: NULL argument");
    char up[32];
    size_t n = strlen(name);
    if (n > 0 && n < sizeof up) {
        for (size_t i = 0; i <= n; i++)
            up[i] = (char)toupper((unsigned char)name[i]);
        for (size_t i = 0; i < sizeof k_aliases / sizeof k_aliases[0]; i++)
            if (strcmp(up, k_aliases[i].alias) == 0) {
                *out = k_aliases[i].dtype;
                return SHS_OK;
            }
    }
    int show = n > 32 ? 32 : (int)n;
    return shs__err(SHS_EDTYPE, "unknown dtype \"%.*s\"%s", show, name, n > 32 ? "..." : "");
}

/* ------------------------------------------------------------------------
 * Block-wise dequantization (initial_load_in_hf_quantized)
 * ---------------------------------------------------------------------- */

/* n elements of dtype at p, each times s (rounded to F32, then to the
   dtype); one loop per dtype so that the compiler can vectorise it. */
static void scale_run(unsigned char *p, shs_dtype dt, size_t n, float s)
{
    switch (dt) {
    case SHS_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            h = bf16_from_f32_bits(f32_bits(f32_from(f32_bits_from_bf16(h)) * s));
            memcpy(p + 2 * i, &h, 2);
        }
        break;
    case SHS_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            h = f16_from_f32_bits(f32_bits(f32_from(f32_bits_from_f16(h)) * s));
            memcpy(p + 2 * i, &h, 2);
        }
        break;
    default:
        for (size_t i = 0; i < n; i++) {
            float f;
            memcpy(&f, p + 4 * i, 4);
            f *= s;
            memcpy(p + 4 * i, &f, 4);
        }
        break;
    }
}

/* The product is an F32 multiplication (one rounding) and the result is
   then rounded to the target, as PyTorch's reader does (weight.to(float32)
   * scale, then copied into the parameter): the same bits. */
void shs__dequant_blocks(void *data, shs_dtype dtype, const uint64_t off[2],
                         const uint64_t shape[2], const float *scale, uint64_t scale_cols,
                         uint64_t block)
{
    unsigned char *p = data;
    size_t es = k_bits[dtype] / 8;
    uint64_t b0 = off[0] / block, b1 = off[1] / block;
    for (uint64_t i = 0; i < shape[0]; i++) {
        const float *srow = scale + ((off[0] + i) / block - b0) * scale_cols;
        /* a run of the row inside one block shares its scale */
        for (uint64_t j = 0; j < shape[1];) {
            uint64_t g = off[1] + j, end = (g / block + 1) * block - off[1];
            if (end > shape[1])
                end = shape[1];
            scale_run(p, dtype, (size_t)(end - j), srow[g / block - b1]);
            p += (end - j) * es;
            j = end;
        }
    }
}
