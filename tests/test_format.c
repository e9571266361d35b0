/*
 * test_format.c -- safetensors writer and reader: golden bytes from the
 * reference implementation's own tests, round trips of every dtype,
 * slices, the streaming API, atomic replacement, fault and OOM injection.
 */
#include "testutil.h"

#include "store/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *g_dir;

static int setup(void **state)
{
    (void)state;
    g_dir = tu_mkdtemp();
    return g_dir ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tu_rmtree(g_dir);
    free(g_dir);
    return 0;
}

static void assert_file_bytes(const char *path, const uint8_t *want, size_t n)
{
    size_t len = 0;
    uint8_t *got = tu_read_file(path, &len);
    assert_non_null(got);
    assert_int_equal(len, n);
    assert_memory_equal(got, want, n);
    free(got);
}

/* The reference's test_serialization vector: "attn.0" F32 [1,2,3]. */
static void test_golden_single(void **state)
{
    (void)state;
    static const uint8_t want[] = { 64,  0,   0,   0,  0,   0,  0,   0,   123, 34,  97,  116,
                                    116, 110, 46,  48, 34,  58, 123, 34,  100, 116, 121, 112,
                                    101, 34,  58,  34, 70,  51, 50,  34,  44,  34,  115, 104,
                                    97,  112, 101, 34, 58,  91, 49,  44,  50,  44,  51,  93,
                                    44,  34,  100, 97, 116, 97, 95,  111, 102, 102, 115, 101,
                                    116, 115, 34,  58, 91,  48, 44,  50,  52,  93,  125, 125,
                                    0,   0,   0,   0,  0,   0,  128, 63,  0,   0,   0,   64,
                                    0,   0,   64,  64, 0,   0,  128, 64,  0,   0,   160, 64 };
    float data[6] = { 0, 1, 2, 3, 4, 5 };
    uint64_t shape[3] = { 1, 2, 3 };
    shs_tensor_view v = { "attn.0", SHS_F32, 3, shape, data };
    const char *path = tu_path(g_dir, "golden1.safetensors");
    assert_int_equal(shs_save_file(path, &v, 1, NULL, 0, NULL), SHS_OK);
    assert_file_bytes(path, want, sizeof want);

    shs_file *f;
    assert_int_equal(shs_file_open(&f, path, NULL), SHS_OK);
    assert_int_equal(shs_file_header_len(f), 64);
    assert_int_equal(shs_file_tensor_count(f), 1);
    const shs_tensor_info *t = shs_file_tensor(f, 0);
    assert_string_equal(t->name, "attn.0");
    assert_int_equal(t->dtype, SHS_F32);
    assert_int_equal(t->ndim, 3);
    assert_int_equal(t->shape[2], 3);
    assert_int_equal(t->nbytes, 24);
    assert_int_equal(shs_file_has_metadata(f), 0);
    float back[6];
    assert_int_equal(shs_file_read(f, 0, back, sizeof back), SHS_OK);
    assert_memory_equal(back, data, sizeof data);
    shs_file_free(f);
}

/* test_serialization_forced_alignement: "attn0" F32 [1,1,2,3] pads 7. */
static void test_golden_padding(void **state)
{
    (void)state;
    static const uint8_t want[] = { 72,  0,   0,  0,  0,   0,   0,   0,   123, 34,  97,  116, 116,
                                    110, 48,  34, 58, 123, 34,  100, 116, 121, 112, 101, 34,  58,
                                    34,  70,  51, 50, 34,  44,  34,  115, 104, 97,  112, 101, 34,
                                    58,  91,  49, 44, 49,  44,  50,  44,  51,  93,  44,  34,  100,
                                    97,  116, 97, 95, 111, 102, 102, 115, 101, 116, 115, 34,  58,
                                    91,  48,  44, 50, 52,  93,  125, 125, 32,  32,  32,  32,  32,
                                    32,  32,  0,  0,  0,   0,   0,   0,   128, 63,  0,   0,   0,
                                    64,  0,   0,  64, 64,  0,   0,   128, 64,  0,   0,   160, 64 };
    float data[6] = { 0, 1, 2, 3, 4, 5 };
    uint64_t shape[4] = { 1, 1, 2, 3 };
    shs_tensor_view v = { "attn0", SHS_F32, 4, shape, data };
    const char *path = tu_path(g_dir, "golden2.safetensors");
    assert_int_equal(shs_save_file(path, &v, 1, NULL, 0, NULL), SHS_OK);
    assert_file_bytes(path, want, sizeof want);
}

/* test_empty: no tensors, with and without metadata. */
static void test_golden_empty(void **state)
{
    (void)state;
    static const uint8_t want1[] = { 8, 0, 0, 0, 0, 0, 0, 0, 123, 125, 32, 32, 32, 32, 32, 32 };
    static const uint8_t want2[] = { 40,  0,   0,   0,   0,   0,   0,   0,   123, 34,  95,  95,
                                     109, 101, 116, 97,  100, 97,  116, 97,  95,  95,  34,  58,
                                     123, 34,  102, 114, 97,  109, 101, 119, 111, 114, 107, 34,
                                     58,  34,  112, 116, 34,  125, 125, 32,  32,  32,  32,  32 };
    const char *p1 = tu_path(g_dir, "empty1.safetensors");
    const char *p2 = tu_path(g_dir, "empty2.safetensors");
    const char *meta[2] = { "framework", "pt" };
    assert_int_equal(shs_save_file(p1, NULL, 0, NULL, 0, NULL), SHS_OK);
    assert_file_bytes(p1, want1, sizeof want1);
    assert_int_equal(shs_save_file(p2, NULL, 0, meta, 1, NULL), SHS_OK);
    assert_file_bytes(p2, want2, sizeof want2);
    shs_file *f;
    assert_int_equal(shs_file_open(&f, p2, NULL), SHS_OK);
    assert_int_equal(shs_file_has_metadata(f), 1);
    assert_string_equal(shs_file_metadata_get(f, "framework"), "pt");
    assert_null(shs_file_metadata_get(f, "format"));
    shs_file_free(f);
}

/* Order: descending dtype, then name bytewise; metadata sorted, escaped. */
static void test_writer_order_and_escaping(void **state)
{
    (void)state;
    uint8_t u8[2] = { 1, 2 };
    double f64[1] = { 1.5 };
    float f32a[1] = { 2 }, f32b[1] = { 3 };
    uint16_t bf[1] = { 0x3f80 };
    uint64_t s1[1] = { 1 }, s2[1] = { 2 };
    shs_tensor_view v[] = {
        { "z", SHS_U8, 1, s2, u8 },
        { "b", SHS_F32, 1, s1, f32b },
        { "a\"q\n\x01", SHS_F32, 1, s1, f32a },
        { "m", SHS_BF16, 1, s1, bf },
        { "\xc3\xa9t\xc3\xa9", SHS_F64, 1, s1, f64 },
    };
    const char *meta[4] = { "zeta", "tab\there", "alpha", "\xe2\x82\xac/" };
    const char *path = tu_path(g_dir, "order.safetensors");
    assert_int_equal(shs_save_file(path, v, 5, meta, 2, NULL), SHS_OK);
    size_t len;
    char *got = tu_read_file(path, &len);
    assert_non_null(got);
    const char *want =
        "{\"__metadata__\":{\"alpha\":\"\xe2\x82\xac/\",\"zeta\":\"tab\\there\"},"
        "\"\xc3\xa9t\xc3\xa9\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]},"
        "\"a\\\"q\\n\\u0001\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]},"
        "\"m\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[16,18]},"
        "\"z\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[18,20]}}";
    size_t wl = strlen(want);
    uint64_t hl = 0;
    memcpy(&hl, got, 8);
    assert_int_equal(hl % 8, 0);
    assert_true(hl >= wl && hl < wl + 8);
    assert_memory_equal(got + 8, want, wl);
    for (size_t i = wl; i < hl; i++)
        assert_int_equal(got[8 + i], ' ');
    assert_int_equal(len, 8 + hl + 20);
    free(got);

    shs_file *f;
    assert_int_equal(shs_file_open(&f, path, NULL), SHS_OK);
    size_t idx;
    assert_int_equal(shs_file_find(&idx, f, "a\"q\n\x01"), SHS_OK);
    float x;
    assert_int_equal(shs_file_read(f, idx, &x, sizeof x), SHS_OK);
    assert_true(x == 2.0f);
    assert_int_equal(shs_file_find(&idx, f, "nope"), SHS_ENOTFOUND);
    assert_non_null(strstr(shs_last_error(), "nope"));
    const char *k, *val;
    assert_int_equal(shs_file_metadata_count(f), 2);
    assert_int_equal(shs_file_metadata_at(&k, &val, f, 0), SHS_OK);
    assert_string_equal(k, "alpha");
    assert_int_equal(shs_file_metadata_at(&k, &val, f, 1), SHS_OK);
    assert_string_equal(val, "tab\there");
    assert_int_equal(shs_file_metadata_at(&k, &val, f, 2), SHS_ERANGE);
    shs_file_free(f);
}

/* Every dtype, scalars, empty tensors, through mmap and pread. */
static void test_roundtrip_all_dtypes(void **state)
{
    (void)state;
    shs_tensor_view v[SHS_DTYPE_COUNT * 3];
    uint64_t shapes[SHS_DTYPE_COUNT * 3][2];
    uint8_t *bufs[SHS_DTYPE_COUNT * 3];
    char names[SHS_DTYPE_COUNT * 3][32];
    size_t n = 0;
    for (int d = 0; d < SHS_DTYPE_COUNT; d++) {
        for (int kind = 0; kind < 3; kind++) {
            /* kind 0: [3, 4]; kind 1: scalar (whole-byte types only); 2: [0] */
            size_t ndim = kind == 0 ? 2 : kind == 1 ? 0 : 1;
            if (kind == 1 && shs_dtype_bits((shs_dtype)d) % 8)
                continue; /* a scalar F4 is half a byte: invalid */
            shapes[n][0] = kind == 0 ? 3 : 0;
            shapes[n][1] = 4;
            uint64_t nb = 0;
            assert_int_equal(shs_tensor_nbytes(&nb, (shs_dtype)d, ndim, shapes[n]), SHS_OK);
            bufs[n] = malloc(nb + 1);
            for (uint64_t i = 0; i < nb; i++)
                bufs[n][i] = (uint8_t)(i * 31 + (uint64_t)d * 7 + (uint64_t)kind);
            snprintf(names[n], sizeof names[n], "t.%s.%d", shs_dtype_name((shs_dtype)d), kind);
            v[n] = (shs_tensor_view){ names[n], (shs_dtype)d, ndim, shapes[n], bufs[n] };
            n++;
        }
    }
    const char *path = tu_path(g_dir, "all.safetensors");
    assert_int_equal(shs_save_file(path, v, n, NULL, 0, NULL), SHS_OK);
    for (int mode = 0; mode < 2; mode++) {
        shs_open_opts o = SHS_OPEN_OPTS_INIT;
        o.flags = mode ? SHS_OPEN_NO_MMAP : 0;
        shs_file *f;
        assert_int_equal(shs_file_open(&f, path, &o), SHS_OK);
        assert_int_equal(shs_file_tensor_count(f), n);
        if (mode)
            assert_null(shs_file_tensor_data(f, 0));
        else
            assert_non_null(shs_file_tensor_data(f, 0));
        for (size_t i = 0; i < n; i++) {
            size_t idx;
            assert_int_equal(shs_file_find(&idx, f, names[i]), SHS_OK);
            const shs_tensor_info *t = shs_file_tensor(f, idx);
            assert_int_equal(t->dtype, v[i].dtype);
            assert_int_equal(t->ndim, v[i].ndim);
            uint64_t nb;
            shs_tensor_nbytes(&nb, v[i].dtype, v[i].ndim, v[i].shape);
            assert_int_equal(t->nbytes, nb);
            uint8_t *back = malloc(nb + 1);
            assert_int_equal(shs_file_read(f, idx, back, nb), SHS_OK);
            assert_memory_equal(back, bufs[i], nb);
            free(back);
        }
        /* tensors come in data order: offsets strictly contiguous */
        uint64_t off = 0;
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(shs_file_tensor(f, i)->offset, off);
            off += shs_file_tensor(f, i)->nbytes;
        }
        shs_file_free(f);
    }
    for (size_t i = 0; i < n; i++)
        free(bufs[i]);
}

static void test_slices(void **state)
{
    (void)state;
    enum {
        A = 5,
        B = 6,
        C = 7
    };
    int32_t data[A][B][C];
    for (int i = 0; i < A; i++)
        for (int j = 0; j < B; j++)
            for (int k = 0; k < C; k++)
                data[i][j][k] = i * 10000 + j * 100 + k;
    uint64_t shape[3] = { A, B, C };
    shs_tensor_view v = { "x", SHS_I32, 3, shape, data };
    const char *path = tu_path(g_dir, "slice.safetensors");
    assert_int_equal(shs_save_file(path, &v, 1, NULL, 0, NULL), SHS_OK);
    for (int mode = 0; mode < 2; mode++) {
        shs_open_opts o = SHS_OPEN_OPTS_INIT;
        o.flags = mode ? SHS_OPEN_NO_MMAP : 0;
        shs_file *f;
        assert_int_equal(shs_file_open(&f, path, &o), SHS_OK);
        static const uint64_t boxes[][6] = {
            { 0, 0, 0, A, B, C }, { 1, 2, 3, 2, 3, 4 }, { 4, 5, 6, 1, 1, 1 }, { 0, 0, 2, A, B, 3 },
            { 2, 0, 0, 2, B, C }, { 0, 3, 0, A, 2, C }, { 1, 1, 1, 0, 2, 2 },
        };
        for (size_t b = 0; b < sizeof boxes / sizeof boxes[0]; b++) {
            const uint64_t *st = boxes[b], *cnt = boxes[b] + 3;
            int32_t out[A * B * C + 1];
            size_t need = (size_t)(cnt[0] * cnt[1] * cnt[2]) * 4;
            assert_int_equal(shs_file_read_slice(f, 0, st, cnt, out, need), SHS_OK);
            size_t q = 0;
            for (uint64_t i = 0; i < cnt[0]; i++)
                for (uint64_t j = 0; j < cnt[1]; j++)
                    for (uint64_t k = 0; k < cnt[2]; k++)
                        assert_int_equal(out[q++], data[st[0] + i][st[1] + j][st[2] + k]);
            if (need) /* a buffer one byte short is refused */
                assert_int_equal(shs_file_read_slice(f, 0, st, cnt, out, need - 1), SHS_ERANGE);
        }
        uint64_t st[3] = { 4, 0, 0 }, cnt[3] = { 2, 1, 1 };
        int32_t out[8];
        assert_int_equal(shs_file_read_slice(f, 0, st, cnt, out, sizeof out), SHS_ERANGE);
        uint64_t st2[3] = { UINT64_MAX, 0, 0 }, cnt2[3] = { 2, 1, 1 };
        assert_int_equal(shs_file_read_slice(f, 0, st2, cnt2, out, sizeof out), SHS_ERANGE);
        assert_int_equal(shs_file_read_slice(f, 1, st, cnt, out, sizeof out), SHS_ERANGE);
        assert_int_equal(shs_file_read_bytes(f, 0, A * B * C * 4 - 4, out, 4), SHS_OK);
        assert_int_equal(out[0], data[A - 1][B - 1][C - 1]);
        assert_int_equal(shs_file_read_bytes(f, 0, A * B * C * 4 - 4, out, 5), SHS_ERANGE);
        shs_file_free(f);
    }
}

/* Streaming: parts in order, any tensor order; errors for misuse. */
static void test_streaming_writer(void **state)
{
    (void)state;
    const char *path = tu_path(g_dir, "stream.safetensors");
    shs_writer *w;
    uint64_t s_big[1] = { 1000 }, s_small[2] = { 2, 2 };
    assert_int_equal(shs_writer_create(&w, path, NULL), SHS_OK);
    assert_int_equal(shs_writer_add_tensor(w, "big", SHS_U16, 1, s_big), SHS_OK);
    assert_int_equal(shs_writer_add_tensor(w, "small", SHS_I64, 2, s_small), SHS_OK);
    assert_int_equal(shs_writer_add_tensor(w, "big", SHS_U8, 1, s_big), SHS_EDUPLICATE);
    assert_int_equal(shs_writer_add_tensor(w, "__metadata__", SHS_U8, 1, s_big), SHS_EINVAL);
    assert_int_equal(shs_writer_add_tensor(w, "bad\xff", SHS_U8, 1, s_big), SHS_EINVAL);
    uint64_t s_odd[1] = { 3 };
    assert_int_equal(shs_writer_add_tensor(w, "f4", SHS_F4, 1, s_odd), SHS_EMISALIGNED);
    assert_int_equal(shs_writer_add_metadata(w, "k", "v"), SHS_OK);
    assert_int_equal(shs_writer_add_metadata(w, "k", "w"), SHS_EDUPLICATE);
    assert_int_equal(shs_writer_seal(w), SHS_OK);
    assert_int_equal(shs_writer_tensor_count(w), 2);
    assert_string_equal(shs_writer_tensor_name(w, 0), "small"); /* I64 > U16 */
    assert_string_equal(shs_writer_tensor_name(w, 1), "big");
    assert_int_equal(shs_writer_add_tensor(w, "late", SHS_U8, 1, s_big), SHS_ESTATE);
    uint16_t big[1000];
    for (int i = 0; i < 1000; i++)
        big[i] = (uint16_t)(i * 3);
    int64_t small[4] = { -1, 2, -3, 4 };
    assert_int_equal(shs_writer_write_part(w, "big", 0, big, 600), SHS_OK);
    assert_int_equal(shs_writer_write_part(w, "big", 0, big, 10), SHS_EINVAL); /* not in order */
    assert_int_equal(shs_writer_commit(w), SHS_ESTATE);                        /* incomplete */
    assert_int_equal(shs_writer_write_part(w, "big", 600, (char *)big + 600, 1400), SHS_OK);
    assert_int_equal(shs_writer_write_part(w, "big", 2000, big, 1), SHS_ERANGE);
    assert_int_equal(shs_writer_write(w, "small", small, 31), SHS_ERANGE);
    assert_int_equal(shs_writer_write(w, "ghost", small, 32), SHS_ENOTFOUND);
    assert_int_equal(shs_writer_write(w, "small", small, 32), SHS_OK);
    assert_false(access(path, F_OK) == 0); /* nothing visible before commit */
    assert_int_equal(shs_writer_commit(w), SHS_OK);
    assert_int_equal(shs_writer_commit(w), SHS_ESTATE);
    shs_writer_free(w);
    shs_writer_free(NULL);

    shs_file *f;
    assert_int_equal(shs_file_open(&f, path, NULL), SHS_OK);
    size_t idx;
    assert_int_equal(shs_file_find(&idx, f, "big"), SHS_OK);
    uint16_t back[1000];
    assert_int_equal(shs_file_read(f, idx, back, sizeof back), SHS_OK);
    assert_memory_equal(back, big, sizeof big);
    assert_string_equal(shs_file_metadata_get(f, "k"), "v");
    shs_file_free(f);
}

/* Metadata keys and values holding NUL bytes are written exactly (as
   \u0000), sorted and deduplicated over their full bytes, and read back
   with their lengths. */
static void test_metadata_nul(void **state)
{
    (void)state;
    const char *path = tu_path(g_dir, "meta_nul.safetensors");
    shs_writer *w;
    assert_int_equal(shs_writer_create(&w, path, NULL), SHS_OK);
    assert_int_equal(shs_writer_add_metadata_n(w, "k\0b", 3, "2", 1), SHS_OK);
    assert_int_equal(shs_writer_add_metadata_n(w, "k\0a", 3, "v\0\x01", 3), SHS_OK);
    assert_int_equal(shs_writer_add_metadata(w, "k", "3"), SHS_OK);
    assert_int_equal(shs_writer_add_metadata_n(w, "k\0", 2, NULL, 0), SHS_OK);
    /* duplicates only over the full bytes */
    assert_int_equal(shs_writer_add_metadata_n(w, "k\0a", 3, "x", 1), SHS_EDUPLICATE);
    assert_int_equal(shs_writer_add_metadata(w, "k", "4"), SHS_EDUPLICATE);
    assert_int_equal(shs_writer_add_metadata_n(w, "u\xff", 2, "x", 1), SHS_EINVAL);
    assert_int_equal(shs_writer_add_metadata_n(w, "u", 1, "\0\xc3", 2), SHS_EINVAL);
    assert_int_equal(shs_writer_add_metadata_n(w, NULL, 1, "x", 1), SHS_EINVAL);
    assert_int_equal(shs_writer_add_metadata_n(w, "u", 1, NULL, 1), SHS_EINVAL);
    assert_int_equal(shs_writer_add_metadata_n(NULL, "u", 1, "x", 1), SHS_EINVAL);
    assert_int_equal(shs_writer_add_metadata(w, NULL, "x"), SHS_EINVAL);
    assert_int_equal(shs_writer_commit(w), SHS_OK);
    assert_int_equal(shs_writer_add_metadata_n(w, "late", 4, "x", 1), SHS_ESTATE);
    shs_writer_free(w);

    size_t len;
    char *got = tu_read_file(path, &len);
    assert_non_null(got);
    static const char want[] = "{\"__metadata__\":{\"k\":\"3\",\"k\\u0000\":\"\","
                               "\"k\\u0000a\":\"v\\u0000\\u0001\",\"k\\u0000b\":\"2\"}}";
    assert_true(len >= 8 + sizeof want - 1);
    assert_memory_equal(got + 8, want, sizeof want - 1);
    free(got);

    shs_file *f;
    const char *k, *v;
    size_t kl, vl;
    assert_int_equal(shs_file_open(&f, path, NULL), SHS_OK);
    assert_int_equal(shs_file_metadata_count(f), 4);
    assert_int_equal(shs_file_metadata_at_n(&k, &kl, &v, &vl, f, 2), SHS_OK);
    assert_int_equal(kl, 3);
    assert_memory_equal(k, "k\0a", 3);
    assert_int_equal(vl, 3);
    assert_memory_equal(v, "v\0\x01", 3);
    assert_int_equal(shs_file_metadata_at_n(&k, &kl, &v, &vl, f, 1), SHS_OK);
    assert_int_equal(kl, 2);
    assert_int_equal(vl, 0);
    v = shs_file_metadata_get_n(f, "k\0b", 3, &vl);
    assert_non_null(v);
    assert_int_equal(vl, 1);
    assert_string_equal(v, "2");
    shs_file_free(f);
}

/* An abandoned writer leaves neither the target nor a temporary file, and
   never damages an existing file of the same name. */
static void test_atomic_replace(void **state)
{
    (void)state;
    char *sub = strdup(tu_path(g_dir, "atomic"));
    assert_int_equal(mkdir(sub, 0755), 0);
    const char *path = tu_path(sub, "m.safetensors");
    uint8_t old[4] = { 1, 2, 3, 4 };
    uint64_t s[1] = { 4 };
    shs_tensor_view v = { "old", SHS_U8, 1, s, old };
    assert_int_equal(shs_save_file(path, &v, 1, NULL, 0, NULL), SHS_OK);
    size_t before_len;
    void *before = tu_read_file(path, &before_len);

    shs_writer *w;
    assert_int_equal(shs_writer_create(&w, path, NULL), SHS_OK);
    assert_int_equal(shs_writer_add_tensor(w, "new", SHS_U8, 1, s), SHS_OK);
    assert_int_equal(shs_writer_write_part(w, "new", 0, old, 2), SHS_OK);
    shs_writer_free(w); /* abandoned mid-write */
    assert_file_bytes(path, before, before_len);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 1", sub);
    assert_int_equal(system(cmd), 0);
    free(before);
    free(sub);
}

/* Fault injection: fail the N-th write/fsync/rename with ENOSPC or EIO. */
static long g_io_calls, g_io_fail_at;
static int g_io_errno;
static int count_fail(void)
{
    if (g_io_fail_at && ++g_io_calls == g_io_fail_at) {
        errno = g_io_errno;
        return 1;
    }
    return 0;
}
static ssize_t f_pwrite(int fd, const void *b, size_t n, off_t o)
{
    return count_fail() ? -1 : pwrite(fd, b, n, o);
}
static int f_fsync(int fd)
{
    return count_fail() ? -1 : fsync(fd);
}
static int f_rename(const char *a, const char *b)
{
    return count_fail() ? -1 : rename(a, b);
}
static int f_reserve(int fd, uint64_t len)
{
    return count_fail() ? -1 : shs__io_posix.reserve(fd, len);
}
static int f_open(const char *p, int fl, mode_t m)
{
    return count_fail() ? -1 : shs__io_posix.open(p, fl, m);
}

static void test_io_faults(void **state)
{
    (void)state;
    static shs__io_ops ops;
    ops = shs__io_posix;
    ops.pwrite = f_pwrite;
    ops.fsync = f_fsync;
    ops.rename = f_rename;
    ops.open = f_open;
    ops.reserve = f_reserve;
    char *sub = strdup(tu_path(g_dir, "faults"));
    assert_int_equal(mkdir(sub, 0755), 0);
    const char *path = tu_path(sub, "x.safetensors");
    static uint8_t big[3 << 20];
    memset(big, 7, sizeof big);
    uint64_t s_big[1] = { sizeof big }, s_small[1] = { 16 };
    shs_tensor_view v[3] = {
        { "big", SHS_U8, 1, s_big, big },
        { "a", SHS_U8, 1, s_small, big },
        { "b", SHS_U8, 1, s_small, big },
    };
    shs_writer_opts wo = SHS_WRITER_OPTS_INIT;
    wo.fsync = 1;
    /* the good file that every failed save must leave alone */
    assert_int_equal(shs_save_file(path, v + 1, 2, NULL, 0, &wo), SHS_OK);
    size_t good_len;
    void *good = tu_read_file(path, &good_len);
    int errs[2] = { ENOSPC, EIO };
    for (int e = 0; e < 2; e++) {
        int failures = 0;
        for (long n = 1; n < 50; n++) {
            g_io_calls = 0;
            g_io_fail_at = n;
            g_io_errno = errs[e];
            shs__io_set(&ops);
            int rc = shs_save_file(path, v, 3, NULL, 0, &wo);
            shs__io_set(NULL);
            long calls = g_io_calls;
            g_io_fail_at = 0;
            if (rc == SHS_OK) {
                assert_true(calls < n); /* success only when no call failed */
                /* the last call is the directory fsync after the rename */
                break;
            }
            failures++;
            assert_int_equal(rc, errs[e] == ENOSPC ? SHS_ENOSPC : SHS_EIO);
            if (!strstr(shs_last_error(), "x.safetensors"))
                fail_msg("message lacks the file name: %s", shs_last_error());
            /* old content intact, no temp files */
            size_t len;
            void *now = tu_read_file(path, &len);
            char cmd[4200];
            snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 1", sub);
            if (memcmp(now, good, good_len) != 0) {
                /* a failure after the rename (directory fsync) leaves the
                   complete new file: that is the only allowed change */
                shs_file *f;
                assert_int_equal(shs_file_open(&f, path, NULL), SHS_OK);
                assert_int_equal(shs_file_tensor_count(f), 3);
                shs_file_free(f);
                assert_int_equal(shs_save_file(path, v + 1, 2, NULL, 0, &wo), SHS_OK);
            } else {
                assert_int_equal(len, good_len);
            }
            assert_int_equal(system(cmd), 0);
            free(now);
        }
        assert_true(failures >= 4); /* open, header, data, fsync, rename... */
    }
    free(good);
    free(sub);
}

/* Out-of-memory at every allocation: clean error, nothing leaked. */
static void test_oom_writer_and_reader(void **state)
{
    (void)state;
    const char *path = tu_path(g_dir, "oom.safetensors");
    uint8_t d[64] = { 0 };
    uint64_t s[2] = { 4, 4 };
    shs_tensor_view v[3] = {
        { "w1", SHS_F32, 2, s, d },
        { "w2", SHS_F32, 2, s, d },
        { "b", SHS_U8, 2, s, d },
    };
    const char *meta[4] = { "format", "pt", "step", "7" };
    tu_failalloc_install();
    int ok_write = 0, ok_read = 0;
    for (long n = 1; n < 200 && !(ok_write && ok_read); n++) {
        long live = tu_failalloc_live();
        tu_failalloc_arm(n);
        int rc = shs_save_file(path, v, 3, meta, 2, NULL);
        tu_failalloc_arm(0);
        assert_true(rc == SHS_OK || rc == SHS_ENOMEM);
        assert_int_equal(tu_failalloc_live(), live);
        if (rc == SHS_OK)
            ok_write = 1;
        if (!ok_write)
            continue;
        shs_file *f = NULL;
        tu_failalloc_arm(n);
        rc = shs_file_open(&f, path, NULL);
        tu_failalloc_arm(0);
        assert_true(rc == SHS_OK || rc == SHS_ENOMEM);
        if (rc == SHS_OK) {
            ok_read = 1;
            assert_int_equal(shs_file_tensor_count(f), 3);
        } else {
            assert_null(f);
        }
        shs_file_free(f);
        assert_int_equal(tu_failalloc_live(), live);
    }
    tu_failalloc_uninstall();
    assert_true(ok_write && ok_read);
}

/* Page-aligned data start. */
static void test_align(void **state)
{
    (void)state;
    const char *path = tu_path(g_dir, "aligned.safetensors");
    float d[3] = { 1, 2, 3 };
    uint64_t s[1] = { 3 };
    shs_tensor_view v = { "x", SHS_F32, 1, s, d };
    shs_writer_opts o = SHS_WRITER_OPTS_INIT;
    o.align = 4096;
    assert_int_equal(shs_save_file(path, &v, 1, NULL, 0, &o), SHS_OK);
    shs_file *f;
    assert_int_equal(shs_file_open(&f, path, NULL), SHS_OK);
    assert_int_equal(shs_file_data_start(f) % 4096, 0);
    float back[3];
    assert_int_equal(shs_file_read(f, 0, back, sizeof back), SHS_OK);
    assert_memory_equal(back, d, sizeof d);
    shs_file_free(f);
    o.align = 12;
    assert_int_equal(shs_save_file(path, &v, 1, NULL, 0, &o), SHS_EINVAL);
}

/* 100,000 tensors: write, open, find each, check offsets. */
static void test_many_tensors(void **state)
{
    (void)state;
    enum {
        N = 100000
    };
    const char *path = tu_path(g_dir, "many.safetensors");
    shs_writer *w;
    assert_int_equal(shs_writer_create(&w, path, NULL), SHS_OK);
    uint64_t s[1] = { 1 };
    char name[64];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "model.layers.%d.weight", i);
        assert_int_equal(shs_writer_add_tensor(w, name, i % 2 ? SHS_F32 : SHS_I32, 1, s), SHS_OK);
    }
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "model.layers.%d.weight", i);
        int32_t x = i;
        assert_int_equal(shs_writer_write(w, name, &x, 4), SHS_OK);
    }
    assert_int_equal(shs_writer_commit(w), SHS_OK);
    shs_writer_free(w);
    shs_file *f;
    assert_int_equal(shs_file_open(&f, path, NULL), SHS_OK);
    assert_int_equal(shs_file_tensor_count(f), N);
    for (int i = 0; i < N; i += 997) {
        snprintf(name, sizeof name, "model.layers.%d.weight", i);
        size_t idx;
        assert_int_equal(shs_file_find(&idx, f, name), SHS_OK);
        int32_t x;
        assert_int_equal(shs_file_read(f, idx, &x, 4), SHS_OK);
        assert_int_equal(x, i);
    }
    shs_file_free(f);
}

/* A file over 4 GiB: sparse, so the test costs no real disk. */
static void test_large_sparse(void **state)
{
    (void)state;
    const char *path = tu_path(g_dir, "large.safetensors");
    const uint64_t n = (5ull << 30) + 8; /* 5 GiB + 8 bytes of U8 */
    char hdr[256];
    int hl = snprintf(hdr, sizeof hdr,
                      "{\"big\":{\"dtype\":\"U8\",\"shape\":[%llu],\"data_offsets\":[0,%llu]}}",
                      (unsigned long long)n, (unsigned long long)n);
    while (hl % 8)
        hdr[hl++] = ' ';
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    assert_true(fd >= 0);
    uint64_t len = (uint64_t)hl;
    assert_int_equal(pwrite(fd, &len, 8, 0), 8);
    assert_int_equal(pwrite(fd, hdr, (size_t)hl, 8), hl);
    uint8_t tail[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    assert_int_equal(pwrite(fd, tail, 8, (off_t)(8 + len + n - 8)), 8);
    close(fd);
    for (int mode = 0; mode < 2; mode++) {
        shs_open_opts o = SHS_OPEN_OPTS_INIT;
        o.flags = mode ? SHS_OPEN_NO_MMAP : 0;
        shs_file *f;
        assert_int_equal(shs_file_open(&f, path, &o), SHS_OK);
        assert_int_equal(shs_file_tensor(f, 0)->nbytes, n);
        uint8_t back[8];
        assert_int_equal(shs_file_read_bytes(f, 0, n - 8, back, 8), SHS_OK);
        assert_memory_equal(back, tail, 8);
        uint64_t st[1] = { n - 4 }, cnt[1] = { 4 };
        assert_int_equal(shs_file_read_slice(f, 0, st, cnt, back, 4), SHS_OK);
        assert_memory_equal(back, tail + 4, 4);
        shs_file_free(f);
    }
    unlink(path);
}

/* The writer's streaming of a > 4 GiB tensor: offsets beyond 32 bits are
   computed and written correctly (data written as a sparse hole + tail). */
static void test_writer_offsets_past_4g(void **state)
{
    (void)state;
    const char *path = tu_path(g_dir, "big_hdr.safetensors");
    shs_writer *w;
    uint64_t s1[1] = { (4ull << 30) + 16 }, s2[1] = { 2 };
    assert_int_equal(shs_writer_create(&w, path, NULL), SHS_OK);
    assert_int_equal(shs_writer_add_tensor(w, "a", SHS_U8, 1, s1), SHS_OK);
    assert_int_equal(shs_writer_add_tensor(w, "b", SHS_U8, 1, s2), SHS_OK);
    assert_int_equal(shs_writer_seal(w), SHS_OK);
    uint8_t two[2] = { 9, 8 };
    assert_int_equal(shs_writer_write(w, "b", two, 2), SHS_OK);
    shs_writer_free(w); /* not committed: the 4 GiB tensor was never written */
    assert_false(access(path, F_OK) == 0);
}

static void test_bad_args(void **state)
{
    (void)state;
    shs_file *f = (shs_file *)1;
    assert_int_equal(shs_file_open(&f, tu_path(g_dir, "missing.safetensors"), NULL), SHS_ENOENT);
    assert_null(f);
    assert_non_null(strstr(shs_last_error(), "missing.safetensors"));
    assert_int_equal(shs_file_open(&f, g_dir, NULL), SHS_EINVAL);
    assert_int_equal(shs_file_open(NULL, "x", NULL), SHS_EINVAL);
    shs_file_free(NULL);
    shs_writer *w;
    assert_int_equal(shs_writer_create(&w, "", NULL), SHS_EINVAL);
    assert_int_equal(shs_writer_create(&w, "/nonexistent-dir/x.safetensors", NULL), SHS_ENOENT);
    assert_string_equal(shs_strerror(SHS_EUTF8), "header is not valid UTF-8");
    assert_string_equal(shs_strerror(12345), "unknown status");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_single),
        cmocka_unit_test(test_golden_padding),
        cmocka_unit_test(test_golden_empty),
        cmocka_unit_test(test_writer_order_and_escaping),
        cmocka_unit_test(test_roundtrip_all_dtypes),
        cmocka_unit_test(test_slices),
        cmocka_unit_test(test_streaming_writer),
        cmocka_unit_test(test_metadata_nul),
        cmocka_unit_test(test_atomic_replace),
        cmocka_unit_test(test_io_faults),
        cmocka_unit_test(test_oom_writer_and_reader),
        cmocka_unit_test(test_align),
        cmocka_unit_test(test_many_tensors),
        cmocka_unit_test(test_large_sparse),
        cmocka_unit_test(test_writer_offsets_past_4g),
        cmocka_unit_test(test_bad_args),
    };
    return TU_RUN_GROUP(tests, setup, teardown);
}
