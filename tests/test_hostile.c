/*
 * test_hostile.c -- the safetensors reader against hostile file images.
 *
 * Every case is a complete file image built in memory (8-byte little-endian
 * header length + header bytes + data bytes) with the exact status the
 * reader must return.  Each image is opened four ways and all must agree:
 * shs_file_open_memory (also on a thread with a small stack, so that deep
 * nesting cannot be handled by recursion), shs_file_open on a temp file,
 * and shs_file_open with SHS_OPEN_NO_MMAP.  Cases follow the reference
 * implementation's checking order; positive controls check the tensor info.
 *
 * Expected statuses follow include/shardsafe.h and DESIGN.md section 2
 * ("safetensors rules"), i.e. the Hugging Face reference (Rust crate
 * safetensors + serde_json) plus the duplicate-key rule.  Notes on the
 * reference that decide some cases:
 *   - serde_json's recursion limit: remaining_depth starts at 128 and is
 *     decremented before the check `== 0`, so 127 nested containers in
 *     total (the top-level object counts as one) parse and the 128th fails.
 *     HashMetadata uses #[serde(flatten)], so every tensor value, including
 *     ignored extra fields, is buffered with the limit applied.
 *   - numel is a checked try_fold over the shape in order: [0, 2^64-1,
 *     2^64-1] is 0 elements, [2^64-1, 2^64-1, 0] overflows.
 *   - `"__metadata__": null` is None (valid).
 *
 * With SHS_HOSTILE_DUMP=<dir> in the environment the program writes every
 * image to <dir>/<case name> instead of running the tests: that is how the
 * fuzz seed corpus fuzz/corpus/header/ is generated (huge images skipped).
 */
#include "testutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------- */
/* Building images                                                         */
/* ---------------------------------------------------------------------- */

typedef struct img {
    uint8_t *p;
    size_t len;
} img;

/* Image with an explicit header-length field, `hdr_len` header bytes and
   `data_len` pattern-filled data bytes. */
static img img_make_len(uint64_t len_field, const void *hdr, size_t hdr_len, size_t data_len)
{
    img m;
    m.len = 8 + hdr_len + data_len;
    m.p = malloc(m.len);
    assert_non_null(m.p);
    for (int i = 0; i < 8; i++)
        m.p[i] = (uint8_t)(len_field >> (8 * i));
    if (hdr_len)
        memcpy(m.p + 8, hdr, hdr_len);
    for (size_t i = 0; i < data_len; i++)
        m.p[8 + hdr_len + i] = (uint8_t)(i * 131u + 7u);
    return m;
}

/* The usual image: the length field is the header's length. */
static img img_make(const void *hdr, size_t hdr_len, size_t data_len)
{
    return img_make_len(hdr_len, hdr, hdr_len, data_len);
}

/* A growable string for the generated headers. */
typedef struct sb {
    char *p;
    size_t len, cap;
} sb;

static void sb_add(sb *s, const char *d, size_t n)
{
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (s->len + n + 1 > cap)
            cap *= 2;
        s->p = realloc(s->p, cap);
        if (!s->p)
            abort();
        s->cap = cap;
    }
    memcpy(s->p + s->len, d, n);
    s->len += n;
    s->p[s->len] = '\0';
}
static void sb_adds(sb *s, const char *d)
{
    sb_add(s, d, strlen(d));
}
static void sb_rep(sb *s, const char *d, size_t times)
{
    size_t n = strlen(d);
    for (size_t i = 0; i < times; i++)
        sb_add(s, d, n);
}
static img sb_img(sb *s, size_t data_len)
{
    img m = img_make(s->p ? s->p : "", s->len, data_len);
    free(s->p);
    return m;
}

/* {"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":[[...]]}}:
   total nesting depth 2 + `arrays`; `closed` = 0 leaves them open. */
static img gen_nest_extra(size_t arrays, int closed)
{
    sb s = { 0 };
    sb_adds(&s, "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":");
    sb_rep(&s, "[", arrays);
    if (closed) {
        sb_rep(&s, "]", arrays);
        sb_adds(&s, "}}");
    }
    return sb_img(&s, 1);
}

/* {"a":{"a":...{"a":1}...}}: total depth `levels`. */
static img gen_nest_obj(size_t levels)
{
    sb s = { 0 };
    sb_rep(&s, "{\"a\":", levels);
    sb_adds(&s, "1");
    sb_rep(&s, "}", levels);
    return sb_img(&s, 0);
}

static img gen_total127(void)
{
    return gen_nest_extra(125, 1);
}
static img gen_total128(void)
{
    return gen_nest_extra(126, 1);
}
static img gen_extra200(void)
{
    return gen_nest_extra(200, 1);
}
static img gen_arr500k(void)
{
    return gen_nest_extra(500000, 1);
}
static img gen_arr500k_open(void)
{
    return gen_nest_extra(500000, 0);
}
static img gen_obj500k(void)
{
    return gen_nest_obj(500000);
}
static img gen_obj600(void)
{
    return gen_nest_obj(600);
}
static img gen_obj127(void)
{
    /* depth 127, innermost value 1: the outer key "a" is a tensor whose
       value is not a tensor object, so the schema check fails -- after
       the nesting check passed. */
    return gen_nest_obj(127);
}
static img gen_obj128(void)
{
    return gen_nest_obj(128);
}

/* A tensor with an ignored field "x" holding `pre` + `digits` copies of
   `digit` + `post`: numbers too long to write out in the table. */
static img gen_long_number(const char *pre, const char *digit, size_t digits, const char *post)
{
    sb s = { 0 };
    sb_adds(&s, "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":");
    sb_adds(&s, pre);
    sb_rep(&s, digit, digits);
    sb_adds(&s, post);
    sb_adds(&s, "}}");
    return sb_img(&s, 1);
}
/* serde_json parses an integer beyond u64 as an f64: fine while it fits */
static img gen_int_1e308(void)
{
    return gen_long_number("1", "0", 308, "");
}
static img gen_int_1e309(void)
{
    return gen_long_number("1", "0", 309, "");
}
static img gen_int_neg_1e400(void)
{
    return gen_long_number("-1", "0", 400, "");
}
/* 0.000...001e400 is 1e(400-1000): tiny, fine */
static img gen_small_frac_big_exp(void)
{
    return gen_long_number("0.", "0", 999, "1e400");
}
/* 1000...0e-400 with 700 zeros is 1e300: fine; with 709 zeros 1e309 */
static img gen_big_int_neg_exp_ok(void)
{
    return gen_long_number("1", "0", 700, "e-400");
}
static img gen_big_int_neg_exp_bad(void)
{
    return gen_long_number("1", "0", 709, "e-400");
}

static img gen_dims(size_t ndim)
{
    sb s = { 0 };
    sb_adds(&s, "{\"t\":{\"dtype\":\"U8\",\"shape\":[");
    for (size_t i = 0; i < ndim; i++)
        sb_adds(&s, i ? ",1" : "1");
    sb_adds(&s, "],\"data_offsets\":[0,1]}}");
    return sb_img(&s, 1);
}
static img gen_dims64(void)
{
    return gen_dims(64);
}
static img gen_dims65(void)
{
    return gen_dims(65);
}

/* Every dtype, in reverse order of data, shape [4] (or [8] so that the
   sub-byte types fill whole bytes). */
static const char *const k_dtypes[] = {
    "BOOL",    "F4",          "F6_E2M3",     "F6_E3M2", "U8",  "I8",  "F8_E5M2", "F8_E4M3",
    "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16",     "U16", "F16", "BF16",    "I32",
    "U32",     "F32",         "C64",         "F64",     "I64", "U64"
};
static const unsigned k_bits[] = { 8,  4,  6,  6,  8,  8,  8,  8,  8,  8,  8,
                                   16, 16, 16, 16, 32, 32, 32, 64, 64, 64, 64 };
#define N_DTYPES (sizeof k_dtypes / sizeof k_dtypes[0])

static img gen_all_dtypes(void)
{
    sb s = { 0 };
    uint64_t off = 0, offs[N_DTYPES];
    for (size_t i = 0; i < N_DTYPES; i++) {
        offs[i] = off;
        off += 8 * k_bits[i] / 8; /* shape [8] */
    }
    sb_adds(&s, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (size_t j = N_DTYPES; j-- > 0;) {
        char buf[160];
        snprintf(buf, sizeof buf,
                 ",\"t_%s\":{\"dtype\":\"%s\",\"shape\":[8],"
                 "\"data_offsets\":[%llu,%llu]}",
                 k_dtypes[j], k_dtypes[j], (unsigned long long)offs[j],
                 (unsigned long long)(offs[j] + k_bits[j]));
        sb_adds(&s, buf);
    }
    sb_adds(&s, "}");
    return sb_img(&s, (size_t)off);
}

/* A header padded with spaces so that data starts at 4096. */
static img gen_page_padded(void)
{
    sb s = { 0 };
    sb_adds(&s, "{\"t\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}");
    sb_rep(&s, " ", 4088 - s.len);
    return sb_img(&s, 4);
}

/* ---------------------------------------------------------------------- */
/* Positive-control checks                                                 */
/* ---------------------------------------------------------------------- */

static void expect_tensor(const shs_file *f, size_t idx, const char *name, size_t name_len,
                          shs_dtype dtype, size_t ndim, const uint64_t *shape, uint64_t numel,
                          uint64_t offset, uint64_t nbytes)
{
    const shs_tensor_info *t = shs_file_tensor(f, idx);
    assert_non_null(t);
    assert_int_equal(t->name_len, name_len);
    assert_memory_equal(t->name, name, name_len);
    assert_int_equal(t->name[name_len], '\0');
    assert_int_equal(t->dtype, dtype);
    assert_int_equal(t->ndim, ndim);
    for (size_t d = 0; d < ndim; d++)
        assert_true(t->shape[d] == shape[d]);
    assert_true(t->numel == numel);
    assert_true(t->offset == offset);
    assert_true(t->nbytes == nbytes);
    if (strlen(name) == name_len) {
        size_t found = (size_t)-1;
        assert_int_equal(shs_file_find(&found, f, name), SHS_OK);
        assert_int_equal(found, idx);
    }
}

static void chk_empty(const shs_file *f)
{
    assert_int_equal(shs_file_tensor_count(f), 0);
    assert_int_equal(shs_file_has_metadata(f), 0);
    assert_int_equal(shs_file_metadata_count(f), 0);
    assert_true(shs_file_header_len(f) == 8);
    assert_true(shs_file_data_start(f) == 16);
    assert_true(shs_file_size(f) == 16);
    size_t idx;
    assert_int_equal(shs_file_find(&idx, f, "x"), SHS_ENOTFOUND);
}

static void chk_meta_only(const shs_file *f)
{
    const char *k, *v;
    assert_int_equal(shs_file_tensor_count(f), 0);
    assert_int_equal(shs_file_has_metadata(f), 1);
    assert_int_equal(shs_file_metadata_count(f), 3);
    assert_int_equal(shs_file_metadata_at(&k, &v, f, 0), SHS_OK);
    assert_string_equal(k, "a");
    assert_string_equal(v, "x\"y\n");
    assert_int_equal(shs_file_metadata_at(&k, &v, f, 1), SHS_OK);
    assert_string_equal(k, "format");
    assert_string_equal(v, "pt");
    assert_int_equal(shs_file_metadata_at(&k, &v, f, 2), SHS_OK);
    assert_string_equal(k, "z\xc3\xa9");
    assert_string_equal(v, "");
    assert_string_equal(shs_file_metadata_get(f, "format"), "pt");
    assert_null(shs_file_metadata_get(f, "missing"));
}

/* keys that differ only after a NUL are distinct; lengths are exact */
static void chk_meta_nul(const shs_file *f)
{
    const char *k, *v;
    size_t kl, vl;
    assert_int_equal(shs_file_metadata_count(f), 3);
    assert_int_equal(shs_file_metadata_at_n(&k, &kl, &v, &vl, f, 0), SHS_OK);
    assert_int_equal(kl, 1);
    assert_memory_equal(k, "a", 1);
    assert_int_equal(vl, 1);
    assert_memory_equal(v, "w", 1);
    assert_int_equal(shs_file_metadata_at_n(&k, &kl, &v, &vl, f, 1), SHS_OK);
    assert_int_equal(kl, 3);
    assert_memory_equal(k, "a\0b", 3);
    assert_int_equal(vl, 3);
    assert_memory_equal(v, "x\0y", 4); /* and NUL-terminated */
    assert_int_equal(shs_file_metadata_at_n(&k, &kl, &v, &vl, f, 2), SHS_OK);
    assert_int_equal(kl, 3);
    assert_memory_equal(k, "a\0c", 4);
    assert_int_equal(vl, 1);
    assert_memory_equal(v, "z", 2);
    assert_int_equal(shs_file_metadata_at_n(&k, &kl, &v, &vl, f, 3), SHS_ERANGE);
    /* the C-string accessors see them cut at the NUL */
    assert_int_equal(shs_file_metadata_at(&k, &v, f, 1), SHS_OK);
    assert_string_equal(k, "a");
    assert_string_equal(v, "x");
    vl = 99;
    v = shs_file_metadata_get_n(f, "a\0c", 3, &vl);
    assert_non_null(v);
    assert_int_equal(vl, 1);
    assert_string_equal(v, "z");
    assert_non_null(shs_file_metadata_get_n(f, "a\0b", 3, NULL));
    assert_null(shs_file_metadata_get_n(f, "a\0d", 3, &vl));
    assert_null(shs_file_metadata_get_n(f, "a\0", 2, &vl));
    assert_string_equal(shs_file_metadata_get(f, "a"), "w");
}

static void chk_meta_null(const shs_file *f)
{
    assert_int_equal(shs_file_has_metadata(f), 0);
    assert_int_equal(shs_file_metadata_count(f), 0);
    assert_int_equal(shs_file_tensor_count(f), 0);
}

static void chk_meta_empty(const shs_file *f)
{
    assert_int_equal(shs_file_has_metadata(f), 1);
    assert_int_equal(shs_file_metadata_count(f), 0);
    assert_int_equal(shs_file_tensor_count(f), 0);
}

static void chk_scalar(const shs_file *f)
{
    assert_int_equal(shs_file_tensor_count(f), 1);
    expect_tensor(f, 0, "s", 1, SHS_F32, 0, NULL, 1, 0, 4);
}

static void chk_zero_size(const shs_file *f)
{
    static const uint64_t s2[] = { 2 }, s0[] = { 0 };
    assert_int_equal(shs_file_tensor_count(f), 2);
    expect_tensor(f, 0, "a", 1, SHS_F32, 1, s2, 2, 0, 8);
    expect_tensor(f, 1, "z", 1, SHS_F32, 1, s0, 0, 8, 0);
}

static void chk_unicode(const shs_file *f)
{
    static const uint64_t s[] = { 1 };
    static const char name[] = "w\xc3\xa9ight.\xf0\x9f\x98\x80";
    assert_int_equal(shs_file_tensor_count(f), 1);
    expect_tensor(f, 0, name, sizeof name - 1, SHS_U8, 1, s, 1, 0, 1);
}

static void chk_escaped(const shs_file *f)
{
    static const uint64_t s[] = { 1 };
    static const char name[] = "a\"b\\c\xc3\xa9\xf0\x9f\x98\x80/\t";
    assert_int_equal(shs_file_tensor_count(f), 1);
    expect_tensor(f, 0, name, sizeof name - 1, SHS_U8, 1, s, 1, 0, 1);
}

static void chk_nul_name(const shs_file *f)
{
    static const uint64_t s[] = { 1 };
    assert_int_equal(shs_file_tensor_count(f), 1);
    expect_tensor(f, 0, "a\0b", 3, SHS_U8, 1, s, 1, 0, 1);
}

static void chk_extra(const shs_file *f)
{
    static const uint64_t s[] = { 1 };
    assert_int_equal(shs_file_tensor_count(f), 1);
    expect_tensor(f, 0, "t", 1, SHS_U8, 1, s, 1, 0, 1);
}

static void chk_f32_1(const shs_file *f)
{
    static const uint64_t s[] = { 1 };
    assert_int_equal(shs_file_tensor_count(f), 1);
    expect_tensor(f, 0, "t", 1, SHS_F32, 1, s, 1, 0, 4);
}

static void chk_meta_kv(const shs_file *f)
{
    assert_int_equal(shs_file_tensor_count(f), 0);
    assert_int_equal(shs_file_has_metadata(f), 1);
    assert_int_equal(shs_file_metadata_count(f), 1);
    assert_string_equal(shs_file_metadata_get(f, "k"), "v");
}

static void chk_ws(const shs_file *f)
{
    static const uint64_t s[] = { 2, 1 };
    assert_int_equal(shs_file_tensor_count(f), 1);
    expect_tensor(f, 0, "t", 1, SHS_I16, 2, s, 2, 0, 4);
}

static void chk_order(const shs_file *f)
{
    static const uint64_t s2[] = { 2 }, s22[] = { 2, 2 };
    assert_int_equal(shs_file_tensor_count(f), 3);
    expect_tensor(f, 0, "a", 1, SHS_BF16, 1, s2, 2, 0, 4);
    expect_tensor(f, 1, "c", 1, SHS_U8, 1, s2, 2, 4, 2);
    expect_tensor(f, 2, "b", 1, SHS_F32, 2, s22, 4, 6, 16);
}

static void chk_depth127(const shs_file *f)
{
    static const uint64_t s[] = { 1 };
    assert_int_equal(shs_file_tensor_count(f), 1);
    expect_tensor(f, 0, "t", 1, SHS_U8, 1, s, 1, 0, 1);
}

static void chk_dims64(const shs_file *f)
{
    const shs_tensor_info *t = shs_file_tensor(f, 0);
    assert_int_equal(shs_file_tensor_count(f), 1);
    assert_int_equal(t->ndim, 64);
    assert_true(t->numel == 1 && t->nbytes == 1);
}

static void chk_zero_big(const shs_file *f)
{
    static const uint64_t s[] = { 0, UINT64_MAX, UINT64_MAX };
    assert_int_equal(shs_file_tensor_count(f), 1);
    expect_tensor(f, 0, "t", 1, SHS_U8, 3, s, 0, 0, 0);
}

static void chk_subbyte(const shs_file *f)
{
    static const uint64_t s4[] = { 4 }, s2[] = { 2 };
    assert_int_equal(shs_file_tensor_count(f), 2);
    expect_tensor(f, 0, "f6", 2, SHS_F6_E2M3, 1, s4, 4, 0, 3);
    expect_tensor(f, 1, "f4", 2, SHS_F4, 1, s2, 2, 3, 1);
}

static void chk_all_dtypes(const shs_file *f)
{
    static const uint64_t s8[] = { 8 };
    uint64_t off = 0;
    assert_int_equal(shs_file_tensor_count(f), N_DTYPES);
    assert_string_equal(shs_file_metadata_get(f, "format"), "pt");
    for (size_t i = 0; i < N_DTYPES; i++) {
        char name[32];
        shs_dtype dt;
        snprintf(name, sizeof name, "t_%s", k_dtypes[i]);
        assert_int_equal(shs_dtype_parse(&dt, k_dtypes[i], strlen(k_dtypes[i])), SHS_OK);
        expect_tensor(f, i, name, strlen(name), dt, 1, s8, 8, off, k_bits[i]);
        off += k_bits[i];
    }
}

static void chk_page(const shs_file *f)
{
    static const uint64_t s[] = { 2 };
    assert_true(shs_file_data_start(f) == 4096);
    expect_tensor(f, 0, "t", 1, SHS_F16, 1, s, 2, 0, 4);
}

/* ---------------------------------------------------------------------- */
/* The table                                                               */
/* ---------------------------------------------------------------------- */

enum {
    K_RAW,
    K_HDR,
    K_LEN,
    K_GEN
};

typedef struct hcase {
    const char *name; /* also the seed file name */
    int kind;
    const char *bytes; /* K_RAW: the file; K_HDR/K_LEN: header */
    size_t len;
    uint64_t len_field; /* K_LEN */
    size_t data_len;    /* K_HDR/K_LEN */
    img (*gen)(void);   /* K_GEN */
    int expect;
    const char *msg_has;              /* expected in the message (any case) */
    void (*check)(const shs_file *f); /* positive controls */
} hcase;

#define RAW(n, s, e, m)                                                                            \
    {                                                                                              \
        n, K_RAW, s, sizeof(s) - 1, 0, 0, NULL, e, m, NULL                                         \
    }
#define HDR(n, s, d, e)                                                                            \
    {                                                                                              \
        n, K_HDR, s, sizeof(s) - 1, 0, d, NULL, e, NULL, NULL                                      \
    }
#define LEN(n, lf, s, d, e)                                                                        \
    {                                                                                              \
        n, K_LEN, s, sizeof(s) - 1, lf, d, NULL, e, NULL, NULL                                     \
    }
#define GEN(n, g, e)                                                                               \
    {                                                                                              \
        n, K_GEN, NULL, 0, 0, 0, g, e, NULL, NULL                                                  \
    }
#define HDRM(n, s, d, e, m)                                                                        \
    {                                                                                              \
        n, K_HDR, s, sizeof(s) - 1, 0, d, NULL, e, m, NULL                                         \
    }
#define GENM(n, g, e, m)                                                                           \
    {                                                                                              \
        n, K_GEN, NULL, 0, 0, 0, g, e, m, NULL                                                     \
    }
#define OK(n, s, d, chk)                                                                           \
    {                                                                                              \
        n, K_HDR, s, sizeof(s) - 1, 0, d, NULL, SHS_OK, NULL, chk                                  \
    }
#define OKGEN(n, g, chk)                                                                           \
    {                                                                                              \
        n, K_GEN, NULL, 0, 0, 0, g, SHS_OK, NULL, chk                                              \
    }

/* A well-formed one-byte tensor, for building wrappers. */
#define T1 "{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}"

static const hcase k_cases[] = {
    /* -- 1. file shorter than 8 bytes ---------------------------------- */
    RAW("small_0", "", SHS_EHEADER_TOO_SMALL, NULL),
    RAW("small_1", "\x01", SHS_EHEADER_TOO_SMALL, NULL),
    RAW("small_7", "\x02\0\0\0\0\0\0", SHS_EHEADER_TOO_SMALL, NULL),

    /* -- 2. header length > 100,000,000 -------------------------------- */
    LEN("large_100000001", 100000001u, "{}", 0, SHS_EHEADER_TOO_LARGE),
    LEN("large_2p63", UINT64_C(1) << 63, "{}", 0, SHS_EHEADER_TOO_LARGE),
    LEN("large_u64max", UINT64_MAX, "{}", 0, SHS_EHEADER_TOO_LARGE),

    /* -- 3. header past end of file ------------------------------------ */
    LEN("length_100000000", 100000000u, "{}", 0, SHS_EHEADER_LENGTH),
    LEN("length_past_eof", 100, "{}      ", 4, SHS_EHEADER_LENGTH),
    LEN("length_one_past", 9, "{}      ", 0, SHS_EHEADER_LENGTH),
    RAW("length_only_prefix", "\x01\0\0\0\0\0\0\0", SHS_EHEADER_LENGTH, NULL),

    /* -- 4. UTF-8 ------------------------------------------------------ */
    HDR("utf8_lone_cont", "{\"__metadata__\":{\"k\":\"\x80\"}}", 0, SHS_EUTF8),
    HDR("utf8_overlong", "{\"__metadata__\":{\"k\":\"\xc0\xaf\"}}", 0, SHS_EUTF8),
    HDR("utf8_surrogate", "{\"__metadata__\":{\"k\":\"\xed\xa0\x80\"}}", 0, SHS_EUTF8),
    HDR("utf8_f5", "{\"__metadata__\":{\"k\":\"\xf5\x80\x80\x80\"}}", 0, SHS_EUTF8),
    HDR("utf8_truncated", "{\"__metadata__\":{\"k\":\"\xe2\x82\"}}", 0, SHS_EUTF8),
    HDR("utf8_truncated_end", "{}    \xf0\x9f", 0, SHS_EUTF8),
    HDR("utf8_above_10ffff", "{\"__metadata__\":{\"k\":\"\xf4\x90\x80\x80\"}}", 0, SHS_EUTF8),
    /* UTF-8 comes before JSON: invalid JSON with a bad byte is EUTF8 */
    HDR("utf8_before_json", "[\xff", 0, SHS_EUTF8),

    /* -- 5. strict JSON ------------------------------------------------ */
    HDR("json_top_array", "[]", 0, SHS_EJSON),
    HDR("json_top_number", "1", 0, SHS_EJSON),
    HDR("json_top_string", "\"x\"", 0, SHS_EJSON),
    HDR("json_top_null", "null", 0, SHS_EJSON),
    HDR("json_trailing_comma_obj", "{\"__metadata__\":{\"a\":\"b\"},}", 0, SHS_EJSON),
    HDR("json_trailing_comma_arr",
        "{\"t\":{\"dtype\":\"U8\",\"shape\":[1,],\"data_offsets\":[0,1]}}", 1, SHS_EJSON),
    HDR("json_line_comment", "{} // c", 0, SHS_EJSON),
    HDR("json_block_comment", "{/* c */}", 0, SHS_EJSON),
    HDR("json_nan", "{\"t\":{\"dtype\":\"U8\",\"shape\":[NaN],\"data_offsets\":[0,1]}}", 1,
        SHS_EJSON),
    HDR("json_infinity", "{\"t\":{\"dtype\":\"U8\",\"shape\":[Infinity],\"data_offsets\":[0,1]}}",
        1, SHS_EJSON),
    HDR("json_neg_infinity",
        "{\"t\":{\"dtype\":\"U8\",\"shape\":[-Infinity],\"data_offsets\":[0,1]}}", 1, SHS_EJSON),
    HDR("json_single_quotes", "{'__metadata__':{}}", 0, SHS_EJSON),
    HDR("json_unquoted_key", "{__metadata__:{}}", 0, SHS_EJSON),
    HDR("json_ctrl_0x01",
        "{\"__metadata__\":{\"k\":\"a\x01"
        "b\"}}",
        0, SHS_EJSON),
    HDR("json_raw_newline", "{\"__metadata__\":{\"k\":\"a\nb\"}}", 0, SHS_EJSON),
    HDR("json_raw_tab_in_key", "{\"__meta\tdata__\":{}}", 0, SHS_EJSON),
    HDR("json_bom", "\xef\xbb\xbf{}", 0, SHS_EJSON),
    HDR("json_bad_escape", "{\"__metadata__\":{\"k\":\"\\x41\"}}", 0, SHS_EJSON),
    HDR("json_bad_u_hex", "{\"__metadata__\":{\"k\":\"\\u12G4\"}}", 0, SHS_EJSON),
    HDR("json_short_u", "{\"__metadata__\":{\"k\":\"\\u12\"}}", 0, SHS_EJSON),
    HDR("json_lone_high", "{\"__metadata__\":{\"k\":\"\\ud800\"}}", 0, SHS_EJSON),
    HDR("json_lone_low", "{\"__metadata__\":{\"k\":\"\\udc00\"}}", 0, SHS_EJSON),
    HDR("json_high_then_bmp", "{\"__metadata__\":{\"k\":\"\\ud800\\u0041\"}}", 0, SHS_EJSON),
    HDR("json_trailing_garbage", "{}x", 0, SHS_EJSON),
    HDR("json_two_objects", "{}{}", 0, SHS_EJSON),
    HDR("json_empty", "", 0, SHS_EJSON),
    HDR("json_only_spaces", "        ", 0, SHS_EJSON),
    HDR("json_leading_zero", "{\"t\":{\"dtype\":\"U8\",\"shape\":[01],\"data_offsets\":[0,1]}}", 1,
        SHS_EJSON),
    HDR("json_plus_sign", "{\"t\":{\"dtype\":\"U8\",\"shape\":[+1],\"data_offsets\":[0,1]}}", 1,
        SHS_EJSON),
    HDR("json_unterminated_obj", "{\"__metadata__\":{}", 0, SHS_EJSON),
    HDR("json_unterminated_str", "{\"__metadata__", 0, SHS_EJSON),
    HDR("json_missing_colon", "{\"__metadata__\" {}}", 0, SHS_EJSON),
    HDR("json_capital_true",
        "{\"t\":"
        "{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":True}}",
        1, SHS_EJSON),
    HDR("json_nul_byte", "{}\0     ", 0, SHS_EJSON),
    HDR("json_vertical_tab_ws", "{}\v", 0, SHS_EJSON),

    /* -- 6. nesting (serde_json: 127 containers in total parse) -------- */
    GEN("nest_arr_500k", gen_arr500k, SHS_ENESTING),
    GEN("nest_arr_500k_open", gen_arr500k_open, SHS_ENESTING),
    GEN("nest_obj_500k", gen_obj500k, SHS_ENESTING),
    GEN("nest_obj_600", gen_obj600, SHS_ENESTING),
    GEN("nest_extra_200", gen_extra200, SHS_ENESTING),
    GEN("nest_total_128", gen_total128, SHS_ENESTING),
    GEN("nest_obj_128", gen_obj128, SHS_ENESTING),
    GEN("nest_obj_127_schema", gen_obj127, SHS_ESCHEMA),

    /* -- 7. schema ----------------------------------------------------- */
    HDR("schema_tensor_number", "{\"t\":1}", 0, SHS_ESCHEMA),
    HDR("schema_tensor_array", "{\"t\":[]}", 0, SHS_ESCHEMA),
    HDR("schema_tensor_string", "{\"t\":\"x\"}", 0, SHS_ESCHEMA),
    HDR("schema_tensor_null", "{\"t\":null}", 0, SHS_ESCHEMA),
    HDR("schema_no_dtype", "{\"t\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, SHS_ESCHEMA),
    HDR("schema_no_shape", "{\"t\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, SHS_ESCHEMA),
    HDR("schema_no_offsets", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, SHS_ESCHEMA),
    HDR("schema_shape_negative", "{\"t\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}",
        1, SHS_ESCHEMA),
    HDR("schema_shape_float", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}",
        1, SHS_ESCHEMA),
    HDR("schema_shape_exponent",
        "{\"t\":{\"dtype\":\"U8\",\"shape\":[1e2],\"data_offsets\":[0,100]}}", 100, SHS_ESCHEMA),
    HDR("schema_shape_2p64",
        "{\"t\":{\"dtype\":\"U8\",\"shape\":[18446744073709551616],\"data_offsets\":[0,1]}}", 1,
        SHS_ESCHEMA),
    HDR("schema_shape_not_array", "{\"t\":{\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]}}",
        1, SHS_ESCHEMA),
    HDR("schema_shape_string_elem",
        "{\"t\":{\"dtype\":\"U8\",\"shape\":[\"1\"],\"data_offsets\":[0,1]}}", 1, SHS_ESCHEMA),
    HDR("schema_offsets_one", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1]}}", 1,
        SHS_ESCHEMA),
    HDR("schema_offsets_three", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,1]}}",
        1, SHS_ESCHEMA),
    HDR("schema_offsets_float", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1.5]}}",
        1, SHS_ESCHEMA),
    HDR("schema_offsets_object", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":{}}}", 1,
        SHS_ESCHEMA),
    HDR("schema_dtype_number", "{\"t\":{\"dtype\":8,\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
        SHS_ESCHEMA),
    HDR("schema_meta_value_number", "{\"__metadata__\":{\"k\":1}}", 0, SHS_ESCHEMA),
    HDR("schema_meta_value_object", "{\"__metadata__\":{\"k\":{}}}", 0, SHS_ESCHEMA),
    HDR("schema_meta_value_null", "{\"__metadata__\":{\"k\":null}}", 0, SHS_ESCHEMA),
    HDR("schema_meta_string", "{\"__metadata__\":\"x\"}", 0, SHS_ESCHEMA),
    HDR("schema_meta_array", "{\"__metadata__\":[]}", 0, SHS_ESCHEMA),
    GEN("schema_65_dims", gen_dims65, SHS_ESCHEMA),

    /* -- 8. dtype ------------------------------------------------------ */
    HDR("dtype_f33", "{\"t\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
        SHS_EDTYPE),
    HDR("dtype_lowercase", "{\"t\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
        SHS_EDTYPE),
    HDR("dtype_empty", "{\"t\":{\"dtype\":\"\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
        SHS_EDTYPE),
    HDR("dtype_space", "{\"t\":{\"dtype\":\"F32 \",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
        SHS_EDTYPE),

    /* -- 9. duplicates (stricter than the reference) ------------------- */
    HDR("dup_tensor",
        "{\"a\":" T1 ",\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2,
        SHS_EDUPLICATE),
    HDR("dup_tensor_escaped",
        "{\"a\":" T1 ",\"\\u0061\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2,
        SHS_EDUPLICATE),
    HDR("dup_meta_key", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, SHS_EDUPLICATE),
    HDR("dup_meta_key_nul", "{\"__metadata__\":{\"a\\u0000b\":\"1\",\"a\\u0000b\":\"2\"}}", 0,
        SHS_EDUPLICATE),
    HDR("dup_metadata", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, SHS_EDUPLICATE),
    HDR("dup_dtype_field",
        "{\"t\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
        SHS_EDUPLICATE),
    /* duplicates anywhere: inside objects nested in an ignored field too,
       also when one spelling is escaped */
    HDR("dup_nested_in_extra",
        "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":{\"a\":1,\"b\":[{"
        "\"c\":1,\"c\":2}]}}}",
        1, SHS_EDUPLICATE),
    HDR("dup_nested_escaped",
        "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":{\"a\":1,\"\\u0061\":"
        "2}}}",
        1, SHS_EDUPLICATE),
    HDR("dup_shape_field_escaped",
        "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"sh\\u0061pe\":[1],\"data_offsets\":[0,1]}}", 1,
        SHS_EDUPLICATE),

    /* -- 10. offsets --------------------------------------------------- */
    HDR("offset_not_zero", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2,
        SHS_EOFFSET),
    HDR("offset_gap",
        "{\"a\":" T1 ",\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,3]}}", 3,
        SHS_EOFFSET),
    HDR("offset_overlap",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},\"b\":{\"dtype\":\"U8\","
        "\"shape\":[2],\"data_offsets\":[1,3]}}",
        3, SHS_EOFFSET),
    HDR("offset_end_before_start",
        "{\"a\":" T1 ",\"b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[1,0]}}", 1,
        SHS_EOFFSET),
    HDR("offset_same_range_twice", "{\"a\":" T1 ",\"b\":" T1 "}", 1, SHS_EOFFSET),

    /* -- 11. overflow -------------------------------------------------- */
    HDR("overflow_shape",
        "{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,2],\"data_offsets\":[0,0]}}", 0,
        SHS_EOVERFLOW),
    HDR("overflow_bits",
        "{\"t\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,0]}}", 0,
        SHS_EOVERFLOW),
    HDR("overflow_u64max_u8",
        "{\"t\":{\"dtype\":\"U8\",\"shape\":[18446744073709551615],\"data_offsets\":[0,0]}}", 0,
        SHS_EOVERFLOW),
    HDR("overflow_before_zero",
        "{\"t\":{\"dtype\":\"U8\",\"shape\":[18446744073709551615,18446744073709551615,0],\"data_"
        "offsets\":[0,0]}}",
        0, SHS_EOVERFLOW),

    /* -- 12. sub-byte misalignment ------------------------------------- */
    HDR("misaligned_f4_odd", "{\"t\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2,
        SHS_EMISALIGNED),
    HDR("misaligned_f6_one", "{\"t\":{\"dtype\":\"F6_E3M2\",\"shape\":[1],\"data_offsets\":[0,1]}}",
        1, SHS_EMISALIGNED),

    /* -- 13. byte range vs shape x dtype ------------------------------- */
    HDR("size_short", "{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,12]}}", 12,
        SHS_ETENSOR_SIZE),
    HDR("size_long", "{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,20]}}", 20,
        SHS_ETENSOR_SIZE),
    HDR("size_huge_end",
        "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,18446744073709551615]}}", 1,
        SHS_ETENSOR_SIZE),
    HDR("size_second_tensor",
        "{\"a\":" T1 ",\"b\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[1,4]}}", 4,
        SHS_ETENSOR_SIZE),

    /* -- 14. data must end at end of file ------------------------------ */
    HDR("trailing_short", "{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 12,
        SHS_ETRAILING),
    HDR("trailing_long", "{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 20,
        SHS_ETRAILING),
    HDR("trailing_after_empty", "{}      ", 1, SHS_ETRAILING),
    HDR("trailing_huge_offsets",
        "{\"t\":{\"dtype\":\"U8\",\"shape\":[4294967296],\"data_offsets\":[0,4294967296]}}", 16,
        SHS_ETRAILING),

    /* -- 15. other formats --------------------------------------------- */
    RAW("fmt_git_lfs",
        "version https://git-lfs.github.com/spec/v1\n"
        "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
        "size 123\n",
        SHS_EWRONG_FORMAT, "lfs"),
    RAW("fmt_torch_zip", "PK\x03\x04\x14\0\0\0\x08\0\0\0!\0archive/data.pkl\x80\x02}q\0",
        SHS_EWRONG_FORMAT, "zip"),
    RAW("fmt_pickle",
        "\x80\x02\x8a\x0al\xfc\x9c"
        "F\xf9 j\xa8P\x19.\x80\x02M\xe9\x03.",
        SHS_EWRONG_FORMAT, "pickle"),
    RAW("fmt_gguf", "GGUF\x03\0\0\0\x01\0\0\0\0\0\0\0\x00\0\0\0\0\0\0\0", SHS_EWRONG_FORMAT,
        "gguf"),
    RAW("fmt_hdf5", "\x89HDF\r\n\x1a\n\0\0\0\0\0\x08\x08\0\x04\0\x10\0\0\0\0\0", SHS_EWRONG_FORMAT,
        "hdf5"),

    /* -- check order between the classes (first failing check wins) --- */
    HDR("order_json_over_schema", "{\"t\":1,}", 0, SHS_EJSON),
    HDR("order_json_over_dup", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}} x", 0, SHS_EJSON),
    HDR("order_nesting_over_schema",
        "{\"t\":1,\"u\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":"
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
        "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
        "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
        "}}",
        1, SHS_ENESTING),
    HDR("order_nesting_in_meta_value",
        "{\"__metadata__\":{\"k\":"
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
        "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
        "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
        "}}",
        0, SHS_ENESTING),
    HDR("order_schema_over_offset",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[5,6]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}}",
        6, SHS_ESCHEMA),
    HDR("order_dtype_over_offset",
        "{\"a\":{\"dtype\":\"U9\",\"shape\":[1],\"data_offsets\":[5,6]}}", 6, SHS_EDTYPE),
    HDR("order_dup_tensor_over_offset",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[5,6]},\"a\":" T1 "}", 6,
        SHS_EDUPLICATE),
    HDR("order_dup_meta_over_offset",
        "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"},"
        "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
        2, SHS_EDUPLICATE),
    HDR("order_dup_meta_over_trailing", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 3,
        SHS_EDUPLICATE),
    HDR("order_per_tensor",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,1]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[5,6]}}",
        6, SHS_ETENSOR_SIZE),
    HDR("order_offset_over_trailing",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 7, SHS_EOFFSET),
    LEN("order_length_over_utf8", 64, "{\"\xff\"}", 0, SHS_EHEADER_LENGTH),
    HDR("schema_shape_minus_zero",
        "{\"t\":{\"dtype\":\"U8\",\"shape\":[-0],\"data_offsets\":[0,0]}}", 0, SHS_ESCHEMA),

    /* -- numbers beyond the f64 range (serde_json: "number out of range",
          a syntax error wherever the number is) ------------------------- */
    HDRM("num_1e400_ignored",
         "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":1e400}}", 1,
         SHS_EJSON, "out of range"),
    HDRM("num_neg_1e400_nested",
         "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],"
         "\"x\":{\"y\":[true,{\"z\":-1e400}]}}}",
         1, SHS_EJSON, "at byte 72"),
    HDRM("num_1e400_in_shape",
         "{\"t\":{\"dtype\":\"U8\",\"shape\":[1e400],\"data_offsets\":[0,1]}}", 1, SHS_EJSON,
         "out of range"),
    HDRM("num_1e400_in_offsets",
         "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1E+400]}}", 1, SHS_EJSON,
         "out of range"),
    HDRM("num_1e400_in_meta", "{\"__metadata__\":{\"k\":1e400}}", 0, SHS_EJSON, "out of range"),
    HDRM("num_1e400_as_tensor", "{\"t\":1e400}", 0, SHS_EJSON, "out of range"),
    /* the syntax error wins over an earlier schema error */
    HDRM("num_order_over_schema",
         "{\"a\":1,\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],"
         "\"x\":[0.1e310]}}",
         1, SHS_EJSON, "out of range"),
    HDRM("num_exp_huge",
         "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],"
         "\"data_offsets\":[0,1],\"x\":1e99999999999999999999999}}",
         1, SHS_EJSON, NULL),
    /* 2^1024 - 2^970, the first value that rounds to infinity */
    HDRM("num_f64_above_limit",
         "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],"
         "\"data_offsets\":[0,1],\"x\":1.797693134862315807937289714053034150799342e308}}",
         1, SHS_EJSON, NULL),
    HDRM("num_f64_limit_exact",
         "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],"
         "\"data_offsets\":[0,1],\"x\":"
         "1797693134862315807937289714053034150799341327100378269361737789"
         "8044496829276475094664901797758720709633028641669288791094655554"
         "7851940402630657488671505820681908902000708383676273854845817711"
         "5317644757302700698555713669596228429148198608349364752927190741"
         "68444365510704342711559699508093042880177904174497792"
         "}}",
         1, SHS_EJSON, NULL),
    HDRM("num_f64_1p8e308",
         "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],"
         "\"data_offsets\":[0,1],\"x\":-1.8e308}}",
         1, SHS_EJSON, NULL),
    GENM("num_int_1e309", gen_int_1e309, SHS_EJSON, "out of range"),
    GENM("num_int_neg_1e400", gen_int_neg_1e400, SHS_EJSON, "out of range"),
    GENM("num_big_int_neg_exp", gen_big_int_neg_exp_bad, SHS_EJSON, "out of range"),

    /* -- positive controls --------------------------------------------- */
    OK("ok_num_f64_edges",
       "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],"
       "\"x\":[1.7976931348623157e308,-1.7976931348623157e308,"
       "1.797693134862315807937289714053034150799340e308,1e-400,-1e-99999999999,"
       "0e400,0.0e400,-0.000E+999,0.001e311,10e307,18446744073709551616,"
       "-18446744073709551616]}}",
       1, chk_extra),
    OK("ok_num_f64_below_limit",
       "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],"
       "\"data_offsets\":[0,1],\"x\":"
       "1797693134862315807937289714053034150799341327100378269361737789"
       "8044496829276475094664901797758720709633028641669288791094655554"
       "7851940402630657488671505820681908902000708383676273854845817711"
       "5317644757302700698555713669596228429148198608349364752927190741"
       "68444365510704342711559699508093042880177904174497791"
       "}}",
       1, chk_extra),
    OKGEN("ok_num_int_1e308", gen_int_1e308, chk_extra),
    OKGEN("ok_num_tiny", gen_small_frac_big_exp, chk_extra),
    OKGEN("ok_num_big_int_neg_exp", gen_big_int_neg_exp_ok, chk_extra),
    OK("ok_meta_nul",
       "{\"__metadata__\":{\"a\\u0000c\":\"z\",\"a\\u0000b\":\"x\\u0000y\",\"a\":\"w\"}}", 0,
       chk_meta_nul),
    OK("ok_empty_padded", "{}      ", 0, chk_empty),
    OK("ok_metadata_only",
       "{\"__metadata__\":{\"format\":\"pt\",\"z\\u00e9\":\"\",\"a\":\"x\\\"y\\n\"}}", 0,
       chk_meta_only),
    OK("ok_metadata_null", "{\"__metadata__\":null}", 0, chk_meta_null),
    OK("ok_metadata_empty", "{\"__metadata__\":{}}", 0, chk_meta_empty),
    OK("ok_scalar", "{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
       chk_scalar),
    OK("ok_zero_size",
       "{\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]},"
       "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
       8, chk_zero_size),
    OK("ok_unicode_name", "{\"w\xc3\xa9ight.\xf0\x9f\x98\x80\":" T1 "}", 1, chk_unicode),
    OK("ok_escaped_name", "{\"a\\\"b\\\\c\\u00e9\\ud83d\\ude00\\/\\t\":" T1 "}", 1, chk_escaped),
    OK("ok_nul_in_name", "{\"a\\u0000b\":" T1 "}", 1, chk_nul_name),
    /* the same key in two different nested objects is fine */
    OK("ok_same_key_two_objects",
       "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],"
       "\"x\":[{\"a\":1},{\"a\":2}],\"y\":{\"a\":{\"a\":3}}}}",
       1, chk_extra),
    OK("ok_extra_field",
       "{\"t\":{\"dtype\":\"U8\",\"extra\":{\"x\":[1,2.5e-3,{\"y\":null}],\"z\":true,"
       "\"dtype\":\"not checked\"},\"shape\":[1],\"data_offsets\":[0,1],\"w\":-7}}",
       1, chk_extra),
    OK("ok_whitespace",
       " \n\t\r{ \"t\" :\n{\"dtype\" : \"I16\" , \"shape\":[ 2 ,\t1 ],"
       "\"data_offsets\":[0,4]}\r\n}\t \n ",
       4, chk_ws),
    OK("ok_order_by_offset",
       "{\"b\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[6,22]},"
       "\"c\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]},"
       "\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}",
       22, chk_order),
    OK("ok_zero_dim_first",
       "{\"t\":{\"dtype\":\"U8\",\"shape\":[0,18446744073709551615,18446744073709551615],"
       "\"data_offsets\":[0,0]}}",
       0, chk_zero_big),
    OK("ok_subbyte",
       "{\"f6\":{\"dtype\":\"F6_E2M3\",\"shape\":[4],\"data_offsets\":[0,3]},"
       "\"f4\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[3,4]}}",
       4, chk_subbyte),
    /* serde matches field names and dtype strings after unescaping */
    OK("ok_escaped_field_names",
       "{\"t\":{\"dt\\u0079pe\":\"U8\",\"sh\\u0061pe\":[1],"
       "\"data_\\u006fffsets\":[0,1]}}",
       1, chk_extra),
    OK("ok_escaped_dtype_value",
       "{\"t\":{\"dtype\":\"F\\u0033\\u0032\",\"shape\":[1],"
       "\"data_offsets\":[0,4]}}",
       4, chk_f32_1),
    OK("ok_escaped_metadata_key", "{\"__m\\u0065tadata__\":{\"k\":\"v\"}}", 0, chk_meta_kv),
    OKGEN("ok_depth_127", gen_total127, chk_depth127),
    OKGEN("ok_64_dims", gen_dims64, chk_dims64),
    OKGEN("ok_all_dtypes", gen_all_dtypes, chk_all_dtypes),
    OKGEN("ok_page_padded", gen_page_padded, chk_page),
};
#define N_CASES (sizeof k_cases / sizeof k_cases[0])

static img case_image(const hcase *c)
{
    switch (c->kind) {
    case K_RAW: {
        img m = { malloc(c->len ? c->len : 1), c->len };
        assert_non_null(m.p);
        memcpy(m.p, c->bytes, c->len);
        return m;
    }
    case K_HDR: return img_make(c->bytes, c->len, c->data_len);
    case K_LEN: return img_make_len(c->len_field, c->bytes, c->len, c->data_len);
    default: return c->gen();
    }
}

/* ---------------------------------------------------------------------- */
/* Running a case                                                          */
/* ---------------------------------------------------------------------- */

static char *g_dir;

static int ci_contains(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && (hay[i] | 0x20) == (needle[i] | 0x20))
            i++;
        if (i == n)
            return 1;
    }
    return n == 0;
}

/* Open on a thread with a 256 KiB stack: a parser that recursed per JSON
   level would overflow it on the deep cases. */
typedef struct small_stack_job {
    const img *m;
    const char *name;
    int rc;
} small_stack_job;

static void *small_stack_main(void *arg)
{
    small_stack_job *j = arg;
    shs_file *f = NULL;
    j->rc = shs_file_open_memory(&f, j->m->p, j->m->len, j->name);
    shs_file_free(f);
    return NULL;
}

static int open_on_small_stack(const img *m, const char *name)
{
    pthread_attr_t attr;
    pthread_t th;
    small_stack_job j = { m, name, 1 };
    assert_int_equal(pthread_attr_init(&attr), 0);
    assert_int_equal(pthread_attr_setstacksize(&attr, 256 * 1024), 0);
    assert_int_equal(pthread_create(&th, &attr, small_stack_main, &j), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    pthread_attr_destroy(&attr);
    return j.rc;
}

/* Checks common to every successful open. */
static void check_opened(const hcase *c, const shs_file *f, const img *m, int mapped_expected)
{
    assert_true(shs_file_size(f) == m->len);
    uint64_t hl = (uint64_t)m->p[0] | (uint64_t)m->p[1] << 8 | (uint64_t)m->p[2] << 16 |
                  (uint64_t)m->p[3] << 24 | (uint64_t)m->p[4] << 32 | (uint64_t)m->p[5] << 40 |
                  (uint64_t)m->p[6] << 48 | (uint64_t)m->p[7] << 56;
    assert_true(shs_file_header_len(f) == hl);
    assert_true(shs_file_data_start(f) == 8 + hl);
    assert_memory_equal(shs_file_header(f), m->p + 8, (size_t)hl);
    uint64_t next = 0;
    size_t n = shs_file_tensor_count(f);
    for (size_t i = 0; i < n; i++) {
        const shs_tensor_info *t = shs_file_tensor(f, i);
        uint64_t nb = 0;
        assert_non_null(t);
        assert_true(t->offset == next);
        assert_int_equal(shs_tensor_nbytes(&nb, t->dtype, t->ndim, t->shape), SHS_OK);
        assert_true(nb == t->nbytes);
        next = t->offset + t->nbytes;
        const uint8_t *want = m->p + 8 + hl + t->offset;
        uint8_t *buf = malloc((size_t)t->nbytes + 1);
        assert_non_null(buf);
        assert_int_equal(shs_file_read(f, i, buf, (size_t)t->nbytes), SHS_OK);
        assert_memory_equal(buf, want, (size_t)t->nbytes);
        if (t->nbytes > 0)
            assert_int_equal(shs_file_read(f, i, buf, (size_t)t->nbytes - 1), SHS_ERANGE);
        free(buf);
        const void *z = shs_file_tensor_data(f, i);
        if (mapped_expected < 0)
            assert_null(z);
        if (z)
            assert_memory_equal(z, want, (size_t)t->nbytes);
    }
    assert_true(8 + hl + next == m->len);
    if (c->check)
        c->check(f);
}

static void check_failed(const hcase *c, int rc, const shs_file *f, const char *name,
                         const char *how)
{
    const char *msg = shs_last_error();
    if (rc != c->expect)
        fail_msg("%s (%s): expected %d (%s), got %d (%s): %s", c->name, how, c->expect,
                 shs_strerror(c->expect), rc, shs_strerror(rc), msg);
    assert_null(f);
    assert_non_null(msg);
    if (msg[0] == '\0')
        fail_msg("%s (%s): empty shs_last_error()", c->name, how);
    if (!strstr(msg, name))
        fail_msg("%s (%s): message does not name '%s': %s", c->name, how, name, msg);
    if (c->msg_has && !ci_contains(msg, c->msg_has))
        fail_msg("%s (%s): message does not mention '%s': %s", c->name, how, c->msg_has, msg);
}

/* The image of the running case, freed by case_teardown even when an
   assertion jumps out of run_case. */
static img g_cur;
static shs_file *g_open; /* handle to close if an assertion fails */

static int case_teardown(void **state)
{
    (void)state;
    shs_file_free(g_open);
    g_open = NULL;
    tu_failalloc_arm(0);
    tu_failalloc_uninstall();
    free(g_cur.p);
    g_cur.p = NULL;
    return 0;
}

static void run_case(void **state)
{
    const hcase *c = *state;
    img m = g_cur = case_image(c);
    char memname[128], fname[128];
    snprintf(memname, sizeof memname, "mem-%s.safetensors", c->name);
    snprintf(fname, sizeof fname, "%s.safetensors", c->name);
    const char *path = tu_path(g_dir, fname);
    assert_int_equal(tu_write_file(path, m.p, m.len), 0);

    /* 1. memory, on a small stack */
    int rc = open_on_small_stack(&m, memname);
    if (rc != c->expect)
        fail_msg("%s (memory, small stack): expected %d (%s), got %d (%s)", c->name, c->expect,
                 shs_strerror(c->expect), rc, shs_strerror(rc));

    /* 2. memory */
    shs_file *f = (shs_file *)&rc; /* must be reset to NULL on failure */
    rc = shs_file_open_memory(&f, m.p, m.len, memname);
    if (c->expect == SHS_OK) {
        if (rc != SHS_OK)
            fail_msg("%s (memory): expected success, got %d (%s): %s", c->name, rc,
                     shs_strerror(rc), shs_last_error());
        g_open = f;
        assert_string_equal(shs_file_path(f), memname);
        check_opened(c, f, &m, 0);
        g_open = NULL;
        shs_file_free(f);
    } else {
        check_failed(c, rc, f, memname, "memory");
    }

    /* 3. file (mmap) and 4. file (pread) */
    for (int nomap = 0; nomap < 2; nomap++) {
        shs_open_opts o = SHS_OPEN_OPTS_INIT;
        o.flags = nomap ? SHS_OPEN_NO_MMAP : 0;
        const char *how = nomap ? "file, no mmap" : "file";
        f = (shs_file *)&rc;
        rc = shs_file_open(&f, path, &o);
        if (c->expect == SHS_OK) {
            if (rc != SHS_OK)
                fail_msg("%s (%s): expected success, got %d (%s): %s", c->name, how, rc,
                         shs_strerror(rc), shs_last_error());
            g_open = f;
            assert_string_equal(shs_file_path(f), path);
            check_opened(c, f, &m, nomap ? -1 : 0);
            g_open = NULL;
            shs_file_free(f);
        } else {
            check_failed(c, rc, f, fname, how);
        }
    }
}

/* ---------------------------------------------------------------------- */
/* Allocation failure                                                      */
/* ---------------------------------------------------------------------- */

static const char k_multi[] =
    "{\"__metadata__\":{\"format\":\"pt\",\"z\\u00e9\":\"v\\n\",\"b\":\"\"},"
    "\"b\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[8,24]},"
    "\"a\\u0041\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]},"
    "\"c\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[24,32],"
    "\"x\":[1,{\"y\":[2,3]}]},"
    "\"d\\ud83d\\ude00\":{\"dtype\":\"U8\",\"shape\":[0,3],\"data_offsets\":[32,32]}}";

/* Open `m` with the N-th allocation failing, N = 1, 2, ... until no
   allocation fails.  Every N at which an allocation did fail must give
   SHS_ENOMEM (or the image's own status, when its check fires without
   needing that allocation), and no allocation may be left behind.  The
   status of a clean open must be `expect`.  Returns the number of
   allocations of a clean open. */
static long failalloc_sweep(const char *label, const img *m, const char *path, int expect,
                            int use_file)
{
    long n;
    tu_failalloc_install();
    long start = tu_failalloc_live();
    for (n = 1;; n++) {
        shs_file *f = NULL;
        tu_failalloc_arm(n);
        int rc = use_file ? shs_file_open(&f, path, NULL)
                          : shs_file_open_memory(&f, m->p, m->len, "fa");
        long used = tu_failalloc_count();
        int injected = used >= n;
        if (rc == SHS_OK) {
            assert_non_null(f);
            if (injected)
                fail_msg("%s: N=%ld: open succeeded although allocation %ld "
                         "failed",
                         label, n, n);
        } else {
            assert_null(f);
            if (injected && rc != SHS_ENOMEM && rc != expect)
                fail_msg("%s: N=%ld: expected SHS_ENOMEM, got %d (%s): %s", label, n, rc,
                         shs_strerror(rc), shs_last_error());
            if (injected && rc == SHS_ENOMEM && shs_last_error()[0] == '\0')
                fail_msg("%s: N=%ld: SHS_ENOMEM with an empty message", label, n);
        }
        shs_file_free(f);
        tu_failalloc_arm(0);
        if (tu_failalloc_live() != start)
            fail_msg("%s: N=%ld: %ld allocation(s) leaked (status %d)", label, n,
                     tu_failalloc_live() - start, rc);
        if (!injected) {
            if (rc != expect)
                fail_msg("%s: clean open: expected %d, got %d", label, expect, rc);
            break;
        }
        if (n > 100000)
            fail_msg("%s: no end to allocations", label);
    }
    tu_failalloc_uninstall();
    return n - 1;
}

static void test_failalloc_valid(void **state)
{
    (void)state;
    img m = g_cur = img_make(k_multi, sizeof k_multi - 1, 32);
    const char *path = tu_path(g_dir, "failalloc.safetensors");
    assert_int_equal(tu_write_file(path, m.p, m.len), 0);

    shs_file *f = NULL;
    assert_int_equal(shs_file_open_memory(&f, m.p, m.len, "multi"), SHS_OK);
    assert_int_equal(shs_file_tensor_count(f), 4);
    assert_int_equal(shs_file_metadata_count(f), 3);
    shs_file_free(f);

    long a = failalloc_sweep("multi (memory)", &m, NULL, SHS_OK, 0);
    long b = failalloc_sweep("multi (file)", &m, path, SHS_OK, 1);
    assert_true(a >= 1);
    assert_true(b >= 1);
    print_message("failalloc: memory open makes %ld allocations, file open "
                  "%ld\n",
                  a, b);
}

/* NULL data with length 0 is an empty image, not a crash. */
static void test_null_empty(void **state)
{
    (void)state;
    shs_file *f = (shs_file *)&f;
    assert_int_equal(shs_file_open_memory(&f, NULL, 0, "null"), SHS_EHEADER_TOO_SMALL);
    assert_null(f);
    assert_true(strstr(shs_last_error(), "null") != NULL);
}

/* The same sweep over every hostile case (error paths must not leak). */
static void test_failalloc_hostile(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_CASES; i++) {
        const hcase *c = &k_cases[i];
        free(g_cur.p);
        img m = g_cur = case_image(c);
        if (m.len <= 64 * 1024) {
            /* status disagreements are run_case's business: sweep against
               whatever a clean open returns */
            shs_file *f = NULL;
            int base = shs_file_open_memory(&f, m.p, m.len, "fa");
            shs_file_free(f);
            failalloc_sweep(c->name, &m, NULL, base, 0);
        }
        free(g_cur.p);
        g_cur.p = NULL;
    }
}

/* ---------------------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    g_dir = tu_mkdtemp();
    return g_dir ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    tu_rmtree(g_dir);
    free(g_dir);
    g_dir = NULL;
    return 0;
}

/* Seed corpus: every image up to 4 KiB plus the 500k-bracket one. */
static int dump_corpus(const char *dir)
{
    size_t total = 0;
    int files = 0;
    for (size_t i = 0; i < N_CASES; i++) {
        const hcase *c = &k_cases[i];
        img m = case_image(c);
        if (m.len <= 4096 || strcmp(c->name, "nest_arr_500k_open") == 0) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", dir, c->name);
            if (tu_write_file(p, m.p, m.len) != 0) {
                fprintf(stderr, "cannot write %s\n", p);
                return 1;
            }
            total += m.len;
            files++;
        }
        free(m.p);
    }
    img m = img_make(k_multi, sizeof k_multi - 1, 32);
    char p[4096];
    snprintf(p, sizeof p, "%s/ok_multi", dir);
    if (tu_write_file(p, m.p, m.len) != 0)
        return 1;
    total += m.len;
    files++;
    free(m.p);
    printf("wrote %d seeds (%zu bytes) to %s\n", files, total, dir);
    return 0;
}

int main(void)
{
    const char *dump = getenv("SHS_HOSTILE_DUMP");
    if (dump && *dump)
        return dump_corpus(dump);

    struct CMUnitTest *t = calloc(N_CASES + 3, sizeof *t);
    if (!t)
        return 1;
    size_t n = 0;
    for (size_t i = 0; i < N_CASES; i++) {
        t[n].name = k_cases[i].name;
        t[n].test_func = run_case;
        t[n].teardown_func = case_teardown;
        t[n].initial_state = (void *)&k_cases[i];
        n++;
    }
    t[n].name = "failalloc_valid_multi";
    t[n].teardown_func = case_teardown;
    t[n++].test_func = test_failalloc_valid;
    t[n].name = "failalloc_hostile_sweep";
    t[n].teardown_func = case_teardown;
    t[n++].test_func = test_failalloc_hostile;
    /* last: under UBSan a failure here aborts the process */
    t[n].name = "null_data_zero_len";
    t[n++].test_func = test_null_empty;
    int rc = _cmocka_run_group_tests("hostile", t, n, group_setup, group_teardown);
    free(t);
    return tu_exit_code(rc);
}
