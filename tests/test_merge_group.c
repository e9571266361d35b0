/*
 * test_merge_group.c -- which tensors share a file in shs_merge's output:
 * the current grouping (huggingface_hub >= 0.21: a tensor larger than the
 * maximum is the next file at once, the open file stays open) with
 * "total_parameters" in the index, the legacy one (transformers < 4.42:
 * the larger tensor closes the open file), legacy for a caller of the
 * version-2 options struct (which has no `grouping`), a bad value, and a
 * split merge (--part / finish) of the current grouping, whose files are
 * not in name order, equal to one merge.  tests/cli/merge.sh checks the
 * bytes against an independent Python model; this checks the library's
 * contract directly.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* a 40 bytes, b 120 (larger than 100), c 48, d 16 (as F32); opt.e is
   optimizer state (a "-opt-" file): total_parameters does not count it */
static char *g_src;

static int setup(void **state)
{
    int rc = tu_setup_root(state);
    if (rc)
        return rc;
    static float a[10], b[30], c[12], d[4], e[5];
    static const uint64_t sa[1] = { 10 }, sb[2] = { 5, 6 }, sc[2] = { 3, 4 }, sd[1] = { 4 },
                          se[1] = { 5 };
    shs_tensor_view m[4] = { { "a", SHS_F32, 1, sa, a },
                             { "b", SHS_F32, 2, sb, b },
                             { "c", SHS_F32, 2, sc, c },
                             { "d", SHS_F32, 1, sd, d } };
    shs_tensor_view o[1] = { { "opt.e", SHS_F32, 1, se, e } };
    g_src = tu_subdir("src");
    TU_OK(shs_save_file(tu_path(g_src, "model.safetensors"), m, 4, NULL, 0, NULL));
    TU_OK(shs_save_file(tu_path(g_src, "x-opt-0.safetensors"), o, 1, NULL, 0, NULL));
    return 0;
}

static int teardown(void **state)
{
    free(g_src);
    return tu_teardown_root(state);
}

static char *index_of(const char *dst)
{
    size_t len;
    char *text = tu_read_file(tu_path(dst, "model.safetensors.index.json"), &len);
    assert_non_null(text);
    return text;
}

static void test_current(void **state)
{
    (void)state;
    char *dst = tu_subpath("current");
    shs_merge_opts o = SHS_MERGE_OPTS_INIT;
    shs_merge_result r = SHS_MERGE_RESULT_INIT;
    o.max_shard_size = 100;
    o.flags = SHS_MERGE_WITH_OPTIMIZER;
    TU_OK(shs_merge(&r, g_src, dst, &o));
    /* a: open; b: larger, file 1 at once; c: 88; d would make 104: the
       open file (a, c) is file 2; d and opt.e: file 3 */
    assert_int_equal(r.n_files, 3);
    char *ix = index_of(dst);
    const char *want = "{\n"
                       "  \"metadata\": {\n"
                       "    \"total_parameters\": 56,\n"
                       "    \"total_size\": 244\n"
                       "  },\n"
                       "  \"weight_map\": {\n"
                       "    \"a\": \"model-00002-of-00003.safetensors\",\n"
                       "    \"b\": \"model-00001-of-00003.safetensors\",\n"
                       "    \"c\": \"model-00002-of-00003.safetensors\",\n"
                       "    \"d\": \"model-00003-of-00003.safetensors\",\n"
                       "    \"opt.e\": \"model-00003-of-00003.safetensors\"\n"
                       "  }\n"
                       "}\n";
    assert_string_equal(ix, want);
    free(ix);
    /* a split merge of it: files not in name order, the same output */
    char *split = tu_subpath("current_split");
    o.part_count = 2;
    for (o.part_index = 0; o.part_index < 2; o.part_index++)
        TU_OK(shs_merge(NULL, g_src, split, &o));
    TU_OK(shs_merge_finish(NULL, g_src, split, &o));
    for (int k = 1; k <= 3; k++) {
        char f[64];
        snprintf(f, sizeof f, "model-%05d-of-00003.safetensors", k);
        size_t la, lb;
        char *x = tu_read_file(tu_path(dst, f), &la), *y = tu_read_file(tu_path(split, f), &lb);
        assert_non_null(x);
        assert_non_null(y);
        assert_int_equal(la, lb);
        assert_memory_equal(x, y, la);
        free(x);
        free(y);
    }
    char *ix2 = index_of(split);
    assert_string_equal(ix2, want);
    free(ix2);
    free(split);
    free(dst);
}

static void test_legacy_and_old_struct(void **state)
{
    (void)state;
    const char *want = "{\n"
                       "  \"metadata\": {\n"
                       "    \"total_size\": 224\n"
                       "  },\n"
                       "  \"weight_map\": {\n"
                       "    \"a\": \"model-00001-of-00003.safetensors\",\n"
                       "    \"b\": \"model-00002-of-00003.safetensors\",\n"
                       "    \"c\": \"model-00003-of-00003.safetensors\",\n"
                       "    \"d\": \"model-00003-of-00003.safetensors\"\n"
                       "  }\n"
                       "}\n";
    for (int old = 0; old < 2; old++) {
        char *dst = tu_subpath(old ? "v2" : "legacy");
        shs_merge_opts o = SHS_MERGE_OPTS_INIT;
        o.max_shard_size = 100;
        if (old) {
            o.version = 2; /* built before `grouping`: its output does not change */
            o.grouping = SHS_MERGE_GROUPING_CURRENT;
        } else {
            o.grouping = SHS_MERGE_GROUPING_LEGACY;
        }
        TU_OK(shs_merge(NULL, g_src, dst, &o));
        char *ix = index_of(dst);
        assert_string_equal(ix, want);
        free(ix);
        free(dst);
    }
}

static void test_bad_grouping(void **state)
{
    (void)state;
    char *dst = tu_subpath("bad");
    shs_merge_opts o = SHS_MERGE_OPTS_INIT;
    o.grouping = 2;
    assert_int_equal(shs_merge(NULL, g_src, dst, &o), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("grouping 2");
    /* a strategy file that does not exist */
    o.grouping = SHS_MERGE_GROUPING_CURRENT;
    o.src_strategy_file = tu_path(g_src, "nosuch.ckpt");
    assert_int_not_equal(shs_merge(NULL, g_src, dst, &o), SHS_OK);
    TU_ASSERT_MSG_HAS("nosuch.ckpt");
    free(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_current),
        cmocka_unit_test(test_legacy_and_old_struct),
        cmocka_unit_test(test_bad_grouping),
    };
    return TU_RUN_GROUP(tests, setup, teardown);
}
