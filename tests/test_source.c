/*
 * test_source.c -- "what is at this path" (src/source/): shs_path_kind for
 * every kind, the same reading of a save path by resume, verify, ls,
 * prune and cleanup (a parked re-save copy IS its step), the public save
 * path listing, the Hugging Face index reader (every problem listed), the
 * cheap file check, and the strict JSON tree under all of them.
 */
#include "testutil.h"

#include "format/json_doc.h"
#include "source/savepath.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void put_st(const char *path, const char *name, float v)
{
    float x[2] = { v, v + 1 };
    uint64_t shape[1] = { 2 };
    shs_tensor_view t = { name, SHS_F32, 1, shape, x };
    TU_OK(shs_save_file(path, &t, 1, NULL, 0, NULL));
}

static shs_source_kind kind(const char *path)
{
    shs_source_kind k = (shs_source_kind)-1;
    TU_OK(shs_path_kind(&k, path));
    return k;
}

/* A save path with committed steps 1 and 2 of a small state. */
static char *make_save_path(const char *name)
{
    char *sp = tu_subdir(name);
    tu_small s;
    tu_small_make(&s, 1.0f, 1);
    for (int64_t step = 1; step <= 2; step++) {
        shs_progress p = tu_prog(step);
        TU_OK(tu_save_once(sp, s.st, &p, 0));
    }
    shs_state_free(s.st);
    return sp;
}

static void test_kinds(void **state)
{
    (void)state;
    char *sp = make_save_path("kinds-sp");
    assert_int_equal(kind(sp), SHS_SOURCE_SAVE_PATH);
    assert_int_equal(kind(tu_step_dir(sp, 2)), SHS_SOURCE_STEP);
    assert_int_equal(kind(tu_path(tu_step_dir(sp, 2), "metadata.json")), SHS_SOURCE_STEP_PART);
    assert_int_equal(kind(tu_path(tu_step_dir(sp, 2), "common.json")), SHS_SOURCE_STEP_PART);
    assert_int_equal(kind(tu_path(sp, TU_TRACKER)), SHS_SOURCE_STEP_PART);
    assert_int_equal(kind(tu_path(sp, "nope")), SHS_SOURCE_NONE);
    /* a save path that lost its steps is still one: the tracker says so */
    char *tracker_only = tu_subdir("kinds-tracker");
    assert_int_equal(tu_write_file(tu_path(tracker_only, TU_TRACKER), "3", 1), 0);
    assert_int_equal(kind(tracker_only), SHS_SOURCE_SAVE_PATH);
    /* folders */
    char *folder = tu_subdir("kinds-folder");
    put_st(tu_path(folder, "a.safetensors"), "a", 1);
    assert_int_equal(kind(folder), SHS_SOURCE_FOLDER);
    assert_int_equal(kind(tu_path(folder, "a.safetensors")), SHS_SOURCE_FILE);
    char *hf = tu_subdir("kinds-hf");
    put_st(tu_path(hf, "m.safetensors"), "a", 1);
    const char *ix = "{\"weight_map\": {\"a\": \"m.safetensors\"}}";
    assert_int_equal(tu_write_file(tu_path(hf, "model.safetensors.index.json"), ix, strlen(ix)), 0);
    assert_int_equal(kind(hf), SHS_SOURCE_HF_INDEX);
    assert_int_equal(kind(tu_path(hf, "model.safetensors.index.json")), SHS_SOURCE_HF_INDEX);
    /* a safetensors file under another name is told by its bytes */
    char *other = tu_subdir("kinds-other");
    put_st(tu_path(other, "weights.bin"), "a", 1);
    assert_int_equal(kind(tu_path(other, "weights.bin")), SHS_SOURCE_FILE);
    assert_int_equal(tu_write_file(tu_path(other, "notes.txt"), "hello, not a checkpoint", 23), 0);
    assert_int_equal(kind(tu_path(other, "notes.txt")), SHS_SOURCE_OTHER);
    char *empty = tu_subdir("kinds-empty");
    assert_int_equal(kind(empty), SHS_SOURCE_OTHER_FOLDER);
    /* damaged: a step directory by its name or its common.json */
    free(tu_subdir("kinds-damaged"));
    char *dmg = tu_subdir("kinds-damaged/iteration_00000004");
    put_st(tu_path(dmg, "a.safetensors"), "a", 1);
    assert_int_equal(kind(dmg), SHS_SOURCE_DAMAGED_STEP);
    shs_checkpoint *ck = NULL;
    assert_int_equal(shs_checkpoint_open(&ck, dmg, NULL), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("without metadata.json");
    /* every kind has a name, and only kinds do */
    for (int k = SHS_SOURCE_NONE; k <= SHS_SOURCE_OTHER_FOLDER; k++)
        assert_non_null(shs_source_kind_name((shs_source_kind)k));
    assert_null(shs_source_kind_name((shs_source_kind)99));
    assert_int_equal(shs_path_kind(NULL, sp), SHS_EINVAL);
    /* the read API names the kind it cannot read */
    assert_int_equal(shs_checkpoint_open(&ck, tu_path(tu_step_dir(sp, 2), "metadata.json"), NULL),
                     SHS_EINVAL);
    TU_ASSERT_MSG_HAS("give the folder it is in");
    assert_int_equal(shs_checkpoint_open(&ck, empty, NULL), SHS_ENOCHECKPOINT);
    free(sp);
    free(tracker_only);
    free(folder);
    free(hf);
    free(other);
    free(empty);
    free(dmg);
}

/* Park step 2 as a re-save without RENAME_EXCHANGE killed between its two
   renames leaves it. */
static char *park_step2(const char *sp)
{
    char *parked = tu_path_dup(sp, ".replaced-iteration_00000002-0123456789abcdef");
    assert_int_equal(rename(tu_step_dir(sp, 2), parked), 0);
    return parked;
}

/* Resume, verify, the listing, the read API, remove and clean all read a
   parked copy as its step. */
static void test_parked_is_its_step(void **state)
{
    (void)state;
    char *sp = make_save_path("parked");
    char *parked = park_step2(sp);
    /* the listing */
    int64_t steps[4];
    size_t n = 0;
    TU_OK(shs_checkpoint_list(steps, 4, &n, sp));
    assert_int_equal(n, 2);
    assert_int_equal(steps[1], 2);
    shs_savepath *list = NULL;
    TU_OK(shs_savepath_open(&list, sp));
    int seen = 0;
    for (size_t i = 0; i < shs_savepath_count(list); i++) {
        const shs_savepath_item *it = shs_savepath_item_at(list, i);
        if (strncmp(it->name, ".replaced-", 10) == 0) {
            assert_int_equal(it->kind, SHS_ENTRY_STEP);
            assert_int_equal(it->step, 2);
            assert_true(it->parked && it->selected && it->complete && it->latest);
            seen++;
        }
    }
    assert_int_equal(seen, 1);
    int64_t tracked = -1;
    TU_OK(shs_savepath_tracker(&tracked, list));
    assert_int_equal(tracked, 2);
    shs_savepath_free(list);
    /* resolve, the read API and verify: the parked copy, by name */
    char dir[4096];
    TU_OK(shs_checkpoint_resolve(dir, sizeof dir, sp, -1));
    assert_string_equal(dir, parked);
    shs_checkpoint *ck = NULL;
    TU_OK(shs_checkpoint_open(&ck, sp, NULL));
    assert_int_equal(shs_checkpoint_step(ck), 2);
    shs_checkpoint_free(ck);
    TU_OK(shs_checkpoint_verify(dir, NULL, 0));
    /* a resume loads it */
    tu_small s;
    tu_small_make(&s, 0.0f, 1);
    shs_config cfg;
    tu_cfg_saving(&cfg, sp);
    shs_manager *m = NULL;
    TU_OK(shs_manager_create(&m, &cfg, s.st)); /* cleanup restores it */
    assert_true(tu_path_exists(tu_step_dir(sp, 2)));
    assert_false(tu_path_exists(parked));
    shs_progress p = SHS_PROGRESS_INIT;
    shs_load_result r = SHS_LOAD_RESULT_INIT;
    TU_OK(shs_manager_load(&r, m, &p));
    assert_int_equal(r.step, 2);
    shs_manager_free(m);
    shs_config_release(&cfg);
    shs_state_free(s.st);
    /* clean restores (and says nothing else is removed); remove removes it */
    free(park_step2(sp));
    TU_OK(shs_checkpoint_clean(sp));
    assert_true(tu_path_exists(tu_step_dir(sp, 2)));
    free(park_step2(sp));
    TU_OK(shs_checkpoint_remove(sp, 2));
    assert_false(tu_path_exists(parked));
    TU_OK(shs_checkpoint_list(steps, 4, &n, sp));
    assert_int_equal(n, 1);
    /* a parked copy beside an existing iteration_N is garbage */
    char *sp2 = make_save_path("parked2");
    free(park_step2(sp2));
    free(sp2);
    free(parked);
    free(sp);
}

/* Both a parked copy and a new iteration_N: the new one is the step. */
static void test_parked_beside_new(void **state)
{
    (void)state;
    char *sp = make_save_path("parked-new");
    char *parked = tu_path_dup(sp, ".replaced-iteration_00000002-fedcba9876543210");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", tu_step_dir(sp, 2), parked);
    assert_int_equal(system(cmd), 0);
    shs_savepath *list = NULL;
    TU_OK(shs_savepath_open(&list, sp));
    for (size_t i = 0; i < shs_savepath_count(list); i++) {
        const shs_savepath_item *it = shs_savepath_item_at(list, i);
        if (strncmp(it->name, ".replaced-", 10) == 0) {
            assert_int_equal(it->kind, SHS_ENTRY_LEFTOVER);
            assert_false(it->selected || it->parked);
        }
    }
    shs_savepath_free(list);
    TU_OK(shs_checkpoint_clean(sp));
    assert_false(tu_path_exists(parked));
    assert_true(tu_path_exists(tu_step_dir(sp, 2)));
    free(parked);
    free(sp);
}

static void count_problem(void *ctx, const char *msg)
{
    (void)msg;
    (*(int *)ctx)++;
}

static void test_hf_index(void **state)
{
    (void)state;
    char *dir = tu_subdir("hfix");
    put_st(tu_path(dir, "a.safetensors"), "x", 1);
    const char *text = "{\"metadata\": {\"total_size\": 8, \"note\": [1, 2]},\n"
                       " \"weight_map\": {\"x\": \"a.safetensors\", \"y\": \"a.safetensors\",\n"
                       "  \"bad\": \"../a.safetensors\", \"num\": 5}}";
    const char *ip = tu_path(dir, "model.safetensors.index.json");
    assert_int_equal(tu_write_file(ip, text, strlen(text)), 0);
    shs_hf_index *ix = NULL;
    TU_OK(shs_hf_index_open(&ix, ip));
    assert_int_equal(shs_hf_index_count(ix), 4);
    size_t problems = 0;
    for (size_t i = 0; i < shs_hf_index_count(ix); i++)
        problems += shs_hf_index_entry_at(ix, i)->problem != NULL;
    assert_int_equal(problems, 2);
    assert_int_equal(shs_hf_index_file_count(ix), 1);
    assert_string_equal(shs_hf_index_file(ix, 0), "a.safetensors");
    uint64_t total = 0;
    TU_OK(shs_hf_index_total_size(&total, ix));
    assert_int_equal(total, 8);
    size_t mlen = 0;
    const char *md = shs_hf_index_metadata(ix, &mlen);
    assert_non_null(md);
    assert_int_equal(mlen, strlen("{\"total_size\": 8, \"note\": [1, 2]}"));
    assert_memory_equal(md, "{\"total_size\": 8, \"note\": [1, 2]}", mlen);
    /* the shard lacks y: one problem; the load refuses the index */
    shs_file *f = NULL;
    TU_OK(shs_file_open(&f, tu_path(dir, "a.safetensors"), NULL));
    int said = 0;
    assert_int_equal(shs_hf_index_check_file(ix, "a.safetensors", f, count_problem, &said), 1);
    assert_int_equal(said, 1);
    shs_file_free(f);
    shs_hf_index_free(ix);
    shs_checkpoint *ck = NULL;
    assert_int_equal(shs_checkpoint_open(&ck, ip, NULL), SHS_ECORRUPT);
    /* documents that are no index */
    static const char *const bad[] = { "[1]", "{\"weight_map\": 3}", "{\"a\": 1, \"a\": 2}",
                                       "{\"weight_map\": {}} x", "" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(tu_write_file(ip, bad[i], strlen(bad[i])), 0);
        assert_int_equal(shs_hf_index_open(&ix, ip), SHS_ECORRUPT);
        assert_null(ix);
    }
    free(dir);
}

static void test_check_files(void **state)
{
    (void)state;
    char *sp = make_save_path("checkfiles");
    shs_checkpoint *ck = NULL;
    TU_OK(shs_checkpoint_open(&ck, sp, NULL));
    TU_OK(shs_checkpoint_check_files(ck));
    /* a data file cut short: the size metadata.json records differs */
    const char *f = tu_path(tu_step_dir(sp, 2), shs_checkpoint_file_name(ck, 0));
    struct stat st;
    assert_int_equal(stat(f, &st), 0);
    assert_int_equal(truncate(f, st.st_size - 1), 0);
    assert_int_equal(shs_checkpoint_check_files(ck), SHS_ECHECKSUM);
    /* ... or gone */
    assert_int_equal(unlink(f), 0);
    assert_int_equal(shs_checkpoint_check_files(ck), SHS_ENOENT);
    TU_ASSERT_MSG_HAS("missing file");
    shs_checkpoint_free(ck);
    assert_int_equal(shs_checkpoint_check_files(NULL), SHS_EINVAL);
    free(sp);
}

/* The strict JSON tree: what parses, what is refused. */
static void test_json_doc(void **state)
{
    (void)state;
    shs__jdoc d;
    const char *ok = " {\"b\": [1, -2, 2.5e1, \"s\\u0041\", true, null], \"a\": {}} ";
    TU_OK(shs__jdoc_parse(&d, ok, strlen(ok), "t.json"));
    const shs__jnode *r = shs__jroot(&d);
    assert_int_equal(r->type, SHS__J_OBJ);
    assert_int_equal(r->n, 2);
    const shs__jnode *b = shs__jget(&d, r, "b");
    assert_non_null(b);
    assert_int_equal(b->n, 6);
    const shs__jnode *e = shs__jfirst(&d, b);
    assert_true(e->is_uint && e->u == 1);
    e = shs__jnext(&d, e);
    assert_true(!e->is_uint && e->is_integer && e->d == -2.0);
    e = shs__jnext(&d, e);
    assert_true(!e->is_integer && e->d == 25.0);
    e = shs__jnext(&d, e);
    assert_string_equal(e->s, "sA");
    assert_null(shs__jget(&d, r, "zz"));
    assert_non_null(shs__jget(&d, r, "a"));
    assert_int_equal(shs__jget(&d, r, "a")->raw_len, 2);
    shs__jdoc_free(&d);
    static const char *const bad[] = {
        "{\"a\": 1,}",
        "[1 2]",
        "{\"a\" 1}",
        "NaN",
        "{\"a\": 1} {}",
        "{\"a\": 1, \"a\": 1}",
        "\"\\ud800\"",
        "[01]",
        "{\"a\": \"\\u0000\"}",
        "[",
        "{",
        "\xef\xbb\xbf{}",
        "// c\n{}",
        "[1e99999]",
        "{\"\xe3\xe3\": 1}",  /* not UTF-8 (a fuzzer's find) */
        "[\"\xc0\xaf\"]",     /* overlong */
        "[\"\xed\xa0\x80\"]", /* an encoded surrogate */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = shs__jdoc_parse(&d, bad[i], strlen(bad[i]), "t.json");
        if (rc != SHS_ECORRUPT)
            fail_msg("'%s' parsed (%d)", bad[i], rc);
        assert_null(shs__jroot(&d));
        shs__jdoc_free(&d);
    }
    /* deep nesting fails without recursion; 2048 levels still parse */
    size_t deep = 100000;
    char *t = malloc(2 * deep + 1);
    memset(t, '[', deep);
    memset(t + deep, ']', deep);
    t[2 * deep] = '\0';
    assert_int_equal(shs__jdoc_parse(&d, t, 2 * deep, "deep.json"), SHS_ECORRUPT);
    shs__jdoc_free(&d);
    TU_OK(shs__jdoc_parse(&d, t + deep - 2048, 2 * 2048, "ok.json"));
    shs__jdoc_free(&d);
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kinds),
        cmocka_unit_test(test_parked_is_its_step),
        cmocka_unit_test(test_parked_beside_new),
        cmocka_unit_test(test_hf_index),
        cmocka_unit_test(test_check_files),
        cmocka_unit_test(test_json_doc),
    };
    return TU_RUN_GROUP(tests, tu_setup_root, tu_teardown_root);
}
