/*
 * test_export.c -- export at train end (last_save_in_hf, export_dtype):
 * shs_manager_finish writes the final step's model tensors in the
 * Hugging Face layout into <save_path>/hf-<step dir name>, on one rank and
 * on 2-3 in-process ranks (threads over a test communicator); the export
 * opens with shs_checkpoint_open and equals the trained tensors, dtype
 * converted; a failure on one rank fails finish on every rank and leaves
 * no export directory; retention keeps hf-*; the save-path entry kinds.
 */
#include "testutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------ */
/* A communicator of up to 4 threads                                   */
/* ------------------------------------------------------------------ */

#define MAXR 4

#include "threadcomm.h"

/* ------------------------------------------------------------------ */
/* Checks                                                              */
/* ------------------------------------------------------------------ */

/* The value an element has in the export: converted to `dt` (-1: kept),
   read back as F32. */
static float as_exported(float x, int dt)
{
    return dt == SHS_BF16 ? shs_bf16_to_f32(shs_f32_to_bf16(x)) : x;
}

/* Tensor `name` of the export `dir` has dtype `dt` (F32 when -1) and the
   values `want` (n elements, F32 before conversion). */
static void check_tensor(shs_checkpoint *ck, const char *name, int dt, const float *want, size_t n)
{
    size_t i;
    if (shs_checkpoint_find(&i, ck, name) != SHS_OK)
        fail_msg("export lacks tensor '%s': %s", name, shs_last_error());
    const shs_checkpoint_tensor_info *ti = shs_checkpoint_tensor(ck, i);
    assert_int_equal(ti->dtype, dt < 0 ? SHS_F32 : dt);
    assert_int_equal(ti->kind, SHS_KIND_MODEL);
    uint64_t start[2] = { 0, 0 }, numel = 1;
    for (size_t d = 0; d < ti->ndim; d++)
        numel *= ti->shape[d];
    assert_int_equal(numel, n);
    float *got = calloc(n, sizeof *got);
    assert_non_null(got);
    TU_OK(shs_checkpoint_read(ck, i, start, ti->shape, SHS_F32, got, n * sizeof *got));
    for (size_t k = 0; k < n; k++)
        if (got[k] != as_exported(want[k], dt))
            fail_msg("%s[%zu] = %g, want %g", name, k, (double)got[k],
                     (double)as_exported(want[k], dt));
    free(got);
}

/* The export of `step` in sp: a plain (Hugging Face) checkpoint of
   exactly `n` tensors in model.safetensors, no index, nothing left
   beside it. */
static shs_checkpoint *open_export(const char *sp, int64_t step, size_t n)
{
    char name[64];
    snprintf(name, sizeof name, "hf-%s", tu_step_name(step));
    char *dir = tu_path_dup(sp, name);
    assert_true(tu_path_exists(tu_path(dir, "model.safetensors")));
    assert_false(tu_path_exists(tu_path(dir, "model.safetensors.index.json")));
    assert_int_equal(tu_count_entries(dir), 1);
    assert_int_equal(tu_count_prefixed(sp, "hf-"), 1); /* no part, tmp, old */
    assert_int_equal(tu_count_leftovers(sp), 0);
    shs_checkpoint *ck = NULL;
    TU_OK(shs_checkpoint_open(&ck, dir, NULL));
    assert_int_equal((shs_checkpoint_format(ck) == SHS_FORMAT_PLAIN), 1);
    assert_int_equal(shs_checkpoint_tensor_count(ck), n);
    free(dir);
    return ck;
}

static void cfg_export(shs_config *c, const char *sp, const char *dtype)
{
    tu_cfg_saving(c, sp);
    c->last_save_in_hf = 1;
    c->export_dtype = dtype;
}

/* ------------------------------------------------------------------ */
/* One rank                                                            */
/* ------------------------------------------------------------------ */

/* Train state with optimizer, finish at step 5 with export_dtype bf16:
   hf-iteration_00000005 holds w and b (no optimizer tensor) in BF16;
   finish again in a new run with other values replaces it. */
static void test_single(void **state)
{
    (void)state;
    char *sp = tu_subdir("single");
    tu_small s;
    tu_small_make(&s, 1.25f, 1);
    shs_config c;
    cfg_export(&c, sp, "bfloat16");
    shs_manager *m = NULL;
    TU_OK(shs_manager_create(&m, &c, s.st));
    assert_null(shs_manager_export_dir(m));
    shs_progress p = tu_prog(5);
    TU_OK(shs_manager_finish(m, &p));
    const char *ed = shs_manager_export_dir(m);
    assert_non_null(ed);
    assert_string_equal(ed, tu_path(sp, "hf-iteration_00000005"));
    shs_manager_free(m);
    assert_int_equal(tu_tracker_step(sp), 5);
    shs_checkpoint *ck = open_export(sp, 5, 2);
    check_tensor(ck, "w", SHS_BF16, s.w, 12);
    check_tensor(ck, "b", SHS_BF16, s.b, 3);
    shs_checkpoint_free(ck);
    /* the export is never a step: listing still shows step 5 alone */
    int64_t steps[4];
    size_t n = 0;
    TU_OK(shs_checkpoint_list(steps, 4, &n, sp));
    assert_int_equal(n, 1);
    assert_int_equal(steps[0], 5);

    /* a re-run of the same step, async, as saved: the export is replaced */
    tu_small_fill(&s, -4.0f);
    cfg_export(&c, sp, "");
    c.async_save = 1;
    TU_OK(shs_manager_create(&m, &c, s.st));
    TU_OK(shs_manager_finish(m, &p));
    shs_manager_free(m);
    ck = open_export(sp, 5, 2);
    check_tensor(ck, "w", -1, s.w, 12);
    check_tensor(ck, "b", -1, s.b, 3);
    shs_checkpoint_free(ck);
    shs_state_free(s.st);
    free(sp);
}

/* One rank: an export that cannot be written (a foreign directory of its
   name) fails finish with a message naming it; the final save is
   committed, the foreign directory kept whole, nothing left beside it. */
static void plant(const char *dir);
static void test_single_failure(void **state)
{
    (void)state;
    char *sp = tu_subdir("single_fail");
    tu_small s;
    tu_small_make(&s, 1.5f, 0);
    shs_config c;
    cfg_export(&c, sp, "bf16");
    shs_manager *m = NULL;
    TU_OK(shs_manager_create(&m, &c, s.st));
    plant(tu_path(sp, "hf-iteration_00000009"));
    shs_progress p = tu_prog(9);
    int rc = shs_manager_finish(m, &p);
    assert_true(rc < 0);
    TU_ASSERT_MSG_HAS("export of step 9 to ");
    TU_ASSERT_MSG_HAS("notes.txt");
    assert_null(shs_manager_export_dir(m));
    shs_manager_free(m);
    assert_int_equal(tu_tracker_step(sp), 9);
    assert_int_equal(tu_count_prefixed(sp, "hf-"), 1);
    assert_int_equal(tu_count_entries(tu_path(sp, "hf-iteration_00000009")), 1);
    assert_int_equal(tu_count_leftovers(sp), 0);
    shs_state_free(s.st);
    free(sp);
}

/* last_save_in_hf off: finish exports nothing. */
static void test_off(void **state)
{
    (void)state;
    char *sp = tu_subdir("off");
    tu_small s;
    tu_small_make(&s, 2.0f, 0);
    shs_config c;
    tu_cfg_saving(&c, sp);
    c.export_dtype = "bf16"; /* ignored without last_save_in_hf */
    shs_manager *m = NULL;
    TU_OK(shs_manager_create(&m, &c, s.st));
    shs_progress p = tu_prog(3);
    TU_OK(shs_manager_finish(m, &p));
    assert_null(shs_manager_export_dir(m));
    shs_manager_free(m);
    assert_int_equal(tu_count_prefixed(sp, "hf-"), 0);
    shs_state_free(s.st);
    free(sp);
}

/* Retention (keep_latest_k, save_max) never deletes an export. */
static void test_retention(void **state)
{
    (void)state;
    char *sp = tu_subdir("retention");
    tu_small s;
    tu_small_make(&s, 3.0f, 1);
    shs_config c;
    cfg_export(&c, sp, "bf16");
    c.keep_latest_k = 1;
    shs_manager *m = NULL;
    TU_OK(shs_manager_create(&m, &c, s.st));
    shs_progress p = tu_prog(1);
    TU_OK(shs_manager_save(m, &p, 0));
    p = tu_prog(2);
    TU_OK(shs_manager_finish(m, &p));
    shs_manager_free(m);
    assert_true(tu_path_exists(tu_path(sp, "hf-iteration_00000002")));
    /* the next run saves steps 3 and 4 with keep_latest_k 1, then one
       with save_max 1 saves 5 and 6 */
    c.last_save_in_hf = 0;
    TU_OK(shs_manager_create(&m, &c, s.st));
    for (int64_t st = 3; st <= 4; st++) {
        p = tu_prog(st);
        TU_OK(shs_manager_save(m, &p, 0));
    }
    shs_manager_free(m);
    c.keep_latest_k = 0;
    c.save_max = 1;
    TU_OK(shs_manager_create(&m, &c, s.st));
    for (int64_t st = 5; st <= 6; st++) {
        p = tu_prog(st);
        TU_OK(shs_manager_save(m, &p, 0));
    }
    shs_manager_free(m);
    assert_false(tu_path_exists(tu_step_dir(sp, 2)));
    assert_false(tu_path_exists(tu_step_dir(sp, 5)));
    assert_true(tu_path_exists(tu_step_dir(sp, 6)));
    shs_checkpoint *ck = open_export(sp, 2, 2);
    check_tensor(ck, "w", SHS_BF16, s.w, 12);
    shs_checkpoint_free(ck);
    /* cleaning the save path keeps it too */
    TU_OK(shs_checkpoint_clean(sp));
    assert_true(tu_path_exists(tu_path(sp, "hf-iteration_00000002")));
    shs_state_free(s.st);
    free(sp);
}

/* Bad configs are refused at create, naming the key. */
static void test_config_errors(void **state)
{
    (void)state;
    char *sp = tu_subdir("cfg");
    tu_small s;
    tu_small_make(&s, 1.0f, 0);
    shs_config c;
    cfg_export(&c, sp, "int8"); /* assigned directly: not checked by set */
    shs_manager *m = NULL;
    assert_int_equal(shs_manager_create(&m, &c, s.st), SHS_ECONFIG);
    assert_null(m);
    TU_ASSERT_MSG_HAS("export_dtype: unknown dtype 'int8'");
    cfg_export(&c, sp, "bf16");
    c.encrypt_key_env = "SHS_TEST_EXPORT_KEY";
    assert_int_equal(shs_manager_create(&m, &c, s.st), SHS_ECONFIG);
    TU_ASSERT_MSG_HAS("last_save_in_hf cannot be combined with encryption");
    /* the alias table */
    shs_dtype d;
    TU_OK(shs_dtype_parse_alias(&d, "BFloat16"));
    assert_int_equal(d, SHS_BF16);
    TU_OK(shs_dtype_parse_alias(&d, "fp32"));
    assert_int_equal(d, SHS_F32);
    TU_OK(shs_dtype_parse_alias(&d, "half"));
    assert_int_equal(d, SHS_F16);
    assert_int_equal(shs_dtype_parse_alias(&d, ""), SHS_EDTYPE);
    assert_int_equal(shs_dtype_parse_alias(&d, "I32"), SHS_EDTYPE);
    TU_ASSERT_MSG_HAS("I32");
    assert_int_equal(shs_dtype_parse_alias(NULL, "bf16"), SHS_EINVAL);
    shs_state_free(s.st);
    free(sp);
}

/* The library's one rule for save-path names. */
static void test_entry_kinds(void **state)
{
    (void)state;
    assert_int_equal(shs_savepath_entry_kind("hf-iteration_00000600"), SHS_ENTRY_EXPORT);
    assert_int_equal(shs_savepath_entry_kind("hf-step-600"), SHS_ENTRY_EXPORT);
    assert_int_equal(shs_savepath_entry_kind("hf-iteration_00000600.tmp-0123abcd"),
                     SHS_ENTRY_LEFTOVER);
    assert_int_equal(shs_savepath_entry_kind("hf-iteration_00000600.part-1-of-2"),
                     SHS_ENTRY_LEFTOVER);
    assert_int_equal(shs_savepath_entry_kind("hf-iteration_00000600.part-1-of-2.tmp-ab"),
                     SHS_ENTRY_LEFTOVER);
    assert_int_equal(shs_savepath_entry_kind("hf-iteration_00000600.old-ab"), SHS_ENTRY_LEFTOVER);
    assert_int_equal(shs_savepath_entry_kind("hf-iteration_00000600.bak"), SHS_ENTRY_OTHER);
    assert_int_equal(shs_savepath_entry_kind("hf-iteration_6x"), SHS_ENTRY_OTHER);
    assert_int_equal(shs_savepath_entry_kind("hf-model"), SHS_ENTRY_OTHER);
    assert_int_equal(shs_savepath_entry_kind("hf-"), SHS_ENTRY_OTHER);
    assert_int_equal(shs_savepath_entry_kind("iteration_00000600"), SHS_ENTRY_STEP);
}

/* ------------------------------------------------------------------ */
/* Several ranks                                                       */
/* ------------------------------------------------------------------ */

/* Global tensors: w F32 [2n, 5], rows 2r..2r+1 on rank r; b F32 [4]
   replicated; w.m optimizer, sharded as w. */
#define WCOLS 5
static float g_w[2 * MAXR * WCOLS], g_b[4];

typedef enum fault {
    NO_FAULT,
    PART_FAULT,
    FINISH_FAULT
} fault;

typedef struct rank_job {
    tshared *sh;
    int rank;
    const char *sp;
    const char *dtype;
    fault fault;
    int rc;
    char msg[1024];
} rank_job;

static void add_rows(shs_state *st, const char *name, shs_kind kind, int r, int n, float *buf)
{
    static uint64_t shape[2] = { 2, WCOLS };
    uint64_t gs[2] = { (uint64_t)(2 * n), WCOLS }, go[2] = { (uint64_t)(2 * r), 0 };
    memcpy(buf, &g_w[2 * r * WCOLS], 2 * WCOLS * sizeof *buf);
    shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
    s.name = name;
    s.kind = kind;
    s.dtype = SHS_F32;
    s.ndim = 2;
    s.shape = shape;
    s.global_shape = gs;
    s.global_offset = go;
    s.data = buf;
    assert_int_equal(shs_state_add_tensor(st, &s), SHS_OK);
}

/* Make a directory holding one foreign file (a fault the merge refuses). */
static void plant(const char *dir)
{
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_int_equal(tu_write_file(tu_path(dir, "notes.txt"), "mine", 4), 0);
}

static void *rank_main(void *arg)
{
    rank_job *j = arg;
    int r = j->rank, n = j->sh->n;
    shs_state *st = NULL;
    shs_comm *comm = NULL;
    shs_manager *m = NULL;
    tcomm tc = { j->sh, r };
    float wb[2 * WCOLS], mb[2 * WCOLS], bb[4];
    static const uint64_t bshape[1] = { 4 };
    memcpy(bb, g_b, sizeof bb);
    shs_state_create(&st);
    add_rows(st, "w", SHS_KIND_MODEL, r, n, wb);
    add_rows(st, "w.m", SHS_KIND_OPTIMIZER, r, n, mb);
    tu_add_tensor(st, "b", SHS_KIND_MODEL, SHS_F32, 1, bshape, bb, NULL);
    shs_config c;
    cfg_export(&c, j->sp, j->dtype);
    shs_progress p = tu_prog(7);
    int rc = shs_comm_create(&comm, r, n, &k_tops, &tc);
    if (rc == SHS_OK)
        rc = shs_manager_create_comm(&m, &c, st, comm);
    /* faults are planted after create (which cleans part leftovers) */
    if (rc == SHS_OK && r == 1 && j->fault == PART_FAULT) {
        char name[96];
        snprintf(name, sizeof name, "hf-iteration_00000007.part-1-of-%d", n);
        plant(tu_path(j->sp, name));
    }
    if (rc == SHS_OK && r == 0 && j->fault == FINISH_FAULT)
        plant(tu_path(j->sp, "hf-iteration_00000007"));
    t_barrier(&tc);
    if (rc == SHS_OK)
        rc = shs_manager_finish(m, &p);
    j->rc = rc;
    snprintf(j->msg, sizeof j->msg, "%s", shs_last_error());
    if (rc == SHS_OK && !shs_manager_export_dir(m))
        j->rc = -1000;
    shs_manager_free(m);
    shs_comm_free(comm);
    shs_state_free(st);
    return NULL;
}

static void run_ranks(rank_job *j, int n, const char *sp, const char *dtype, fault f)
{
    tshared sh;
    pthread_t th[MAXR];
    for (int i = 0; i < 2 * MAXR * WCOLS; i++)
        g_w[i] = 0.5f + (float)i * 0.37f;
    for (int i = 0; i < 4; i++)
        g_b[i] = -2.0f + (float)i * 1.01f;
    tshared_init(&sh, n, 0);
    for (int r = 0; r < n; r++) {
        j[r] = (rank_job){ &sh, r, sp, dtype, f, 0, "" };
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &j[r]), 0);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    tshared_destroy(&sh);
}

static void ranks_ok(int n, const char *dtype, int dt)
{
    char name[32];
    snprintf(name, sizeof name, "ranks%d", n);
    char *sp = tu_subdir(name);
    rank_job j[MAXR];
    run_ranks(j, n, sp, dtype, NO_FAULT);
    for (int r = 0; r < n; r++)
        if (j[r].rc != SHS_OK)
            fail_msg("rank %d finish: %d %s", r, j[r].rc, j[r].msg);
    shs_checkpoint *ck = open_export(sp, 7, 2);
    check_tensor(ck, "w", dt, g_w, (size_t)(2 * n * WCOLS));
    check_tensor(ck, "b", dt, g_b, 4);
    shs_checkpoint_free(ck);
    free(sp);
}

static void test_two_ranks(void **state)
{
    (void)state;
    ranks_ok(2, "bf16", SHS_BF16);
}

static void test_three_ranks(void **state)
{
    (void)state;
    ranks_ok(3, "", -1);
}

/* A fault on one rank fails finish on every rank with its message, and
   leaves no export and no part directory. */
static void ranks_fail(int n, fault f, const char *want)
{
    char name[32];
    snprintf(name, sizeof name, "fail%d-%d", n, (int)f);
    char *sp = tu_subdir(name);
    rank_job j[MAXR];
    run_ranks(j, n, sp, "bf16", f);
    for (int r = 0; r < n; r++) {
        if (j[r].rc == SHS_OK)
            fail_msg("rank %d finish succeeded despite the fault", r);
        if (!strstr(j[r].msg, want) || !strstr(j[r].msg, "export of step 7"))
            fail_msg("rank %d message lacks '%s': %s", r, want, j[r].msg);
    }
    /* the final save itself is committed */
    assert_int_equal(tu_tracker_step(sp), 7);
    assert_int_equal(tu_count_leftovers(sp), 0);
    if (f == FINISH_FAULT) {
        /* the foreign directory in the way is kept whole, nothing else */
        assert_int_equal(tu_count_prefixed(sp, "hf-"), 1);
        const char *d = tu_path(sp, "hf-iteration_00000007");
        assert_int_equal(tu_count_entries(d), 1);
        assert_true(tu_path_exists(tu_path(d, "notes.txt")));
    } else {
        assert_int_equal(tu_count_prefixed(sp, "hf-"), 0);
    }
    free(sp);
}

static void test_rank_fault_part(void **state)
{
    (void)state;
    ranks_fail(2, PART_FAULT, "rank 1");
    ranks_fail(3, PART_FAULT, "notes.txt");
}

static void test_rank_fault_finish(void **state)
{
    (void)state;
    ranks_fail(3, FINISH_FAULT, "notes.txt");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single),
        cmocka_unit_test(test_single_failure),
        cmocka_unit_test(test_off),
        cmocka_unit_test(test_retention),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_entry_kinds),
        cmocka_unit_test(test_two_ranks),
        cmocka_unit_test(test_three_ranks),
        cmocka_unit_test(test_rank_fault_part),
        cmocka_unit_test(test_rank_fault_finish),
    };
    return TU_RUN_GROUP(tests, tu_setup_root, tu_teardown_root);
}
