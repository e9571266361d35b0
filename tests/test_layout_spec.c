/*
 * test_layout_spec.c -- the layout vocabulary of the offline reshard
 * (layout_spec.c), white-box: resolving MindSpore's device_matrix /
 * tensor_map (nested) / rank_list and the short forms into boxes per
 * rank, deriving the spec of saved boxes (mesh order, rank_list, 2-D
 * grids, uneven and unequally replicated boxes), scaling to another world
 * size and what cannot be scaled.
 */
#include "testutil.h"

#include "tools/layout_spec.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static json_t *J(const char *text)
{
    json_error_t e;
    json_t *v = json_loads(text, 0, &e);
    if (!v)
        fail_msg("bad test JSON %s: %s", text, e.text);
    return v;
}

static void assert_json(const json_t *v, const char *want)
{
    json_error_t e;
    json_t *w = json_loads(want, 0, &e);
    assert_non_null(w);
    if (!json_equal(v, w)) {
        char *have = json_dumps(v, JSON_COMPACT);
        fail_msg("layout %s, expected %s", have, want);
    }
    json_decref(w);
}


/* Resolve `spec` for an [8, 6] tensor over `world` ranks; the row
   offset of each box, in box order, into rows[]. */
static void resolve_rows(const char *spec, int world, const int *ranks, const uint64_t *rows,
                         size_t n)
{
    static const uint64_t g[2] = { 8, 6 };
    shs__lboxes b = { .ndim = 2 };
    json_t *s = J(spec);
    TU_OK(shs__layout_resolve(&b, s, "t", 2, g, world, "test"));
    assert_int_equal(b.n, n);
    for (size_t k = 0; k < n; k++) {
        assert_int_equal(b.rank[k], ranks[k]);
        assert_int_equal(b.off[2 * k], rows[k]);
        assert_int_equal(b.off[2 * k + 1], 0);
    }
    /* derive gives back an equivalent layout: resolving it gives the same
       boxes */
    json_t *d = shs__layout_derive(&b, g);
    assert_non_null(d);
    shs__lboxes b2 = { .ndim = 2 };
    TU_OK(shs__layout_resolve(&b2, d, "t", 2, g, world, "test"));
    assert_int_equal(b2.n, b.n);
    for (size_t k = 0; k < b.n; k++) {
        size_t m = 0;
        while (m < b2.n && b2.rank[m] != b.rank[k])
            m++;
        assert_true(m < b2.n);
        assert_memory_equal(b2.off + 2 * m, b.off + 2 * k, 16);
        assert_memory_equal(b2.shape + 2 * m, b.shape + 2 * k, 16);
    }
    json_decref(d);
    json_decref(s);
    shs__lboxes_release(&b);
    shs__lboxes_release(&b2);
}

static void test_resolve_mesh(void **state)
{
    (void)state;
    /* dim 0 over mesh axes 0 then 1 ([[1, 0]]): slice = c0 * 2 + c1 = k */
    resolve_rows("{\"device_matrix\": [2, 2], \"tensor_map\": [[1, 0], -1]}", 4,
                 (const int[]){ 0, 1, 2, 3 }, (const uint64_t[]){ 0, 2, 4, 6 }, 4);
    /* axes 1 then 0: slice = c1 * 2 + c0 */
    resolve_rows("{\"device_matrix\": [2, 2], \"tensor_map\": [[0, 1], -1]}", 4,
                 (const int[]){ 0, 1, 2, 3 }, (const uint64_t[]){ 0, 4, 2, 6 }, 4);
    /* TP 2 x DP 2, TP the slow axis, a rank_list */
    resolve_rows("{\"device_matrix\": [2, 2], \"tensor_map\": [1, -1], \"rank_list\": [3, 2, 1, "
                 "0]}",
                 4, (const int[]){ 3, 2, 1, 0 }, (const uint64_t[]){ 0, 0, 4, 4 }, 4);
    /* split over 2 of 4 ranks: rank r holds slice r % 2 */
    resolve_rows("{\"split_dim\": 0, \"ranks\": 2}", 4, (const int[]){ 0, 1, 2, 3 },
                 (const uint64_t[]){ 0, 4, 0, 4 }, 4);
    /* only 2 of 4 ranks hold it */
    resolve_rows("{\"device_matrix\": [2], \"tensor_map\": [0, -1], \"rank_list\": [1, 3]}", 4,
                 (const int[]){ 1, 3 }, (const uint64_t[]){ 0, 4 }, 2);
}

static void test_derive(void **state)
{
    (void)state;
    static const uint64_t g[2] = { 8, 6 };
    shs__lboxes b = { .ndim = 2 };
    /* TP 2 fastest x DP 2: identity, no rank_list */
    for (int r = 0; r < 4; r++)
        TU_OK(shs__lboxes_add(&b, r, (const uint64_t[]){ 4u * (unsigned)(r % 2), 0 },
                              (const uint64_t[]){ 4, 6 }));
    json_t *d = shs__layout_derive(&b, g);
    assert_json(d, "{\"device_matrix\": [2, 2], \"tensor_map\": [0, -1]}");
    json_decref(d);
    shs__lboxes_release(&b);
    /* TP the slow axis: a rank_list */
    for (int r = 0; r < 4; r++)
        TU_OK(shs__lboxes_add(&b, r, (const uint64_t[]){ 4u * (unsigned)(r / 2), 0 },
                              (const uint64_t[]){ 4, 6 }));
    d = shs__layout_derive(&b, g);
    assert_json(d, "{\"device_matrix\": [2, 2], \"tensor_map\": [0, -1], \"rank_list\": [0, 2, "
                   "1, 3]}");
    json_decref(d);
    shs__lboxes_release(&b);
    /* 2-D grid: rows over 2, columns over 3 */
    for (int r = 0; r < 6; r++)
        TU_OK(shs__lboxes_add(&b, r, (const uint64_t[]){ 4u * (unsigned)(r / 3), 2u * (r % 3) },
                              (const uint64_t[]){ 4, 2 }));
    d = shs__layout_derive(&b, g);
    assert_json(d, "{\"device_matrix\": [2, 3], \"tensor_map\": [1, 0]}");
    json_decref(d);
    shs__lboxes_release(&b);
    /* uneven: explicit boxes */
    TU_OK(shs__lboxes_add(&b, 0, (const uint64_t[]){ 0, 0 }, (const uint64_t[]){ 5, 6 }));
    TU_OK(shs__lboxes_add(&b, 1, (const uint64_t[]){ 5, 0 }, (const uint64_t[]){ 3, 6 }));
    d = shs__layout_derive(&b, g);
    assert_json(d, "{\"boxes\": [{\"rank\": 0, \"offset\": [0, 0], \"shape\": [5, 6]}, "
                   "{\"rank\": 1, \"offset\": [5, 0], \"shape\": [3, 6]}]}");
    json_decref(d);
    shs__lboxes_release(&b);
    /* unequal replication: explicit boxes */
    TU_OK(shs__lboxes_add(&b, 0, (const uint64_t[]){ 0, 0 }, (const uint64_t[]){ 4, 6 }));
    TU_OK(shs__lboxes_add(&b, 1, (const uint64_t[]){ 4, 0 }, (const uint64_t[]){ 4, 6 }));
    TU_OK(shs__lboxes_add(&b, 2, (const uint64_t[]){ 4, 0 }, (const uint64_t[]){ 4, 6 }));
    d = shs__layout_derive(&b, g);
    assert_non_null(json_object_get(d, "boxes"));
    json_decref(d);
    shs__lboxes_release(&b);
}

static void scale_ok(const char *spec, int from, int to, const char *want)
{
    json_t *s = J(spec), *o = NULL;
    TU_OK(shs__layout_scale(&o, s, "t", 2, from, to, "test"));
    assert_json(o, want);
    json_decref(s);
    json_decref(o);
}

static void test_scale(void **state)
{
    (void)state;
    /* TP 4 x DP 2 (8 ranks) -> 4 ranks: TP 2, DP stays */
    scale_ok("{\"device_matrix\": [2, 4], \"tensor_map\": [0, -1], \"alias_name\": [\"dp\", "
             "\"tp\"]}",
             8, 4,
             "{\"device_matrix\": [2, 2], \"tensor_map\": [0, -1], \"alias_name\": [\"dp\", "
             "\"tp\"]}");
    /* replicated stays replicated on the new world */
    scale_ok("{\"device_matrix\": [2, 4], \"tensor_map\": [-1, -1]}", 8, 2,
             "{\"device_matrix\": [2], \"tensor_map\": [-1, -1]}");
    /* 2-D split: the innermost axis that can take the factor */
    scale_ok("{\"device_matrix\": [2, 3], \"tensor_map\": [1, 0]}", 6, 2,
             "{\"device_matrix\": [2, 1], \"tensor_map\": [1, 0]}");
    scale_ok("{\"device_matrix\": [2, 3], \"tensor_map\": [1, 0]}", 6, 12,
             "{\"device_matrix\": [2, 6], \"tensor_map\": [1, 0]}");
    /* split only over an axis of size 1: replicated in truth, and stays so
       (the tensor_map named an axis the scaled one-axis mesh lacks) */
    scale_ok("{\"device_matrix\": [1, 2], \"tensor_map\": [1, -1]}", 2, 1,
             "{\"device_matrix\": [1], \"tensor_map\": [-1, -1]}");
    scale_ok("{\"device_matrix\": [1, 2], \"tensor_map\": [1, -1]}", 2, 4,
             "{\"device_matrix\": [4], \"tensor_map\": [-1, -1]}");
    scale_ok("{\"split_dim\": 1, \"ranks\": 2}", 4, 8, "{\"split_dim\": 1, \"ranks\": 4}");
    scale_ok("{\"split_dim\": 1}", 4, 8, "{\"split_dim\": 1}");
    /* what cannot be scaled */
    json_t *o = NULL, *s = J("{\"device_matrix\": [2, 4], \"tensor_map\": [0, -1]}");
    assert_int_equal(shs__layout_scale(&o, s, "t", 2, 8, 3, "test"), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("tensor 't'");
    json_decref(s);
    s = J("{\"device_matrix\": [2], \"tensor_map\": [0, -1], \"rank_list\": [1, 0]}");
    assert_int_equal(shs__layout_scale(&o, s, "t", 2, 2, 4, "test"), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("explicit \"rank_list\"");
    json_decref(s);
    assert_null(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resolve_mesh),
        cmocka_unit_test(test_derive),
        cmocka_unit_test(test_scale),
    };
    return TU_RUN_GROUP(tests, NULL, NULL);
}
