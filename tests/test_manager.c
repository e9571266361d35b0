/*
 * test_manager.c -- the checkpoint policy: config errors, save interval,
 * retention, same-step re-save, no_save_optim / no_load_optim with master
 * weights, exclude_from_loading, batch-size rescaling, load resolution
 * (auto-resume, load_path, initial_load_path, load_step), async save
 * (staging copies, fence, last tracker update, background failures),
 * loading with several reader threads and incremental save with hard
 * links.
 */
#include "testutil.h"

#include "checkpoint/checkpoint.h"
#include "source/savepath.h"
#include "store/io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int step_exists(const char *sp, int64_t step)
{
    return tu_path_exists(tu_step_dir(sp, step));
}

static ino_t inode_of(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? st.st_ino : 0;
}

/* The manager of the last load_with: it owns the strings of the load
   result (and holds the save path's lock), so it lives until the next
   load_with or load_with_done. */
static shs_manager *g_load_manager;

static void load_with_done(void)
{
    shs_manager_free(g_load_manager);
    g_load_manager = NULL;
}

static void cfg_loading(shs_config *c, const char *load_path)
{
    shs_config_init(c);
    c->enable_save = 0;
    c->load_path = load_path;
}

/* ------------------------------------------------------------------ */
/* A state: model w (F32 [4,3]), b (F32 [3]); optimizer w.exp_avg;    */
/* blobs rng, lr_scheduler, dataloader                                */
/* ------------------------------------------------------------------ */

typedef tu_small st3;

static void set_blobs(shs_state *st, const char *tag)
{
    char buf[64];
    snprintf(buf, sizeof buf, "rng-%s", tag);
    TU_OK(shs_state_set_blob(st, "rng", buf, strlen(buf)));
    snprintf(buf, sizeof buf, "{\"lr\": \"%s\"}", tag);
    TU_OK(shs_state_set_blob(st, "lr_scheduler", buf, strlen(buf)));
    snprintf(buf, sizeof buf, "{\"cursor\": \"%s\"}", tag);
    TU_OK(shs_state_set_blob(st, "dataloader", buf, strlen(buf)));
}

static void assert3(const st3 *s, float base, int check_opt)
{
    for (int i = 0; i < 12; i++) {
        if (s->w[i] != base + (float)i)
            fail_msg("w[%d] = %g, want %g", i, s->w[i], base + (float)i);
        if (check_opt && s->wm[i] != base * 2 + (float)i * 0.5f)
            fail_msg("wm[%d] = %g, want %g", i, s->wm[i], base * 2 + (float)i * 0.5f);
    }
    for (int i = 0; i < 3; i++)
        assert_true(s->b[i] == base - (float)i);
}

/* Save base-valued state at `step` into sp with a one-shot manager. */
static void save3(const char *sp, int64_t step, float base)
{
    st3 s;
    tu_small_make(&s, base, 1);
    set_blobs(s.st, "saved");
    shs_progress p = tu_prog(step);
    TU_OK(tu_save_once(sp, s.st, &p, 0));
    shs_state_free(s.st);
}

/* ------------------------------------------------------------------ */
/* Config errors                                                      */
/* ------------------------------------------------------------------ */

static void test_config_errors(void **state)
{
    (void)state;
    st3 s;
    tu_small_make(&s, 1, 1);
    shs_config c;
    shs_config_init(&c);
    shs_manager *m = (shs_manager *)&c; /* must be reset to NULL */
    assert_int_equal(shs_manager_create(&m, &c, s.st), SHS_ECONFIG);
    TU_ASSERT_MSG_HAS("save_path");
    assert_null(m);

    /* enable_save false: an empty save_path is fine, nothing is written */
    char *sp = tu_subpath("cfg_nosave");
    shs_config_init(&c);
    c.enable_save = 0;
    c.save_interleaved_steps = 1;
    TU_OK(shs_manager_create(&m, &c, s.st));
    /* run in an empty directory: relative paths would land there */
    char cwd_before[4096];
    assert_non_null(getcwd(cwd_before, sizeof cwd_before));
    char *cwd_tmp = tu_subpath("cfg_cwd");
    assert_int_equal(mkdir(cwd_tmp, 0755), 0);
    assert_int_equal(chdir(cwd_tmp), 0);
    int before = tu_count_entries(".");
    assert_int_equal(before, 0);
    for (int64_t step = 1; step <= 5; step++) {
        shs_progress p = tu_prog(step);
        int saved = -1;
        TU_OK(shs_manager_step(&saved, m, &p));
        assert_int_equal(saved, 0);
    }
    shs_progress p = tu_prog(5);
    TU_OK(shs_manager_finish(m, &p));
    assert_int_equal(tu_count_entries("."), before);
    assert_false(tu_path_exists(TU_TRACKER));
    shs_manager_free(m);
    assert_int_equal(tu_count_entries("."), 0);
    assert_int_equal(chdir(cwd_before), 0);
    free(cwd_tmp);

    /* enable_save false with a save_path: still nothing written there */
    c.save_path = sp;
    TU_OK(shs_manager_create(&m, &c, s.st));
    TU_OK(shs_manager_step(NULL, m, &p));
    TU_OK(shs_manager_finish(m, &p));
    shs_manager_free(m);
    assert_false(tu_path_exists(sp));

    /* interval 0 */
    tu_cfg_saving(&c, sp);
    c.save_interleaved_steps = 0;
    assert_int_equal(shs_manager_create(&m, &c, s.st), SHS_ECONFIG);
    TU_ASSERT_MSG_HAS("save_interleaved_steps");
    /* through shs_config_set as well */
    shs_config_init(&c);
    assert_true(shs_config_set(&c, "save_max", "-1") < 0);
    shs_config_release(&c);
    free(sp);
    shs_state_free(s.st);
}

/* ------------------------------------------------------------------ */
/* Interval                                                           */
/* ------------------------------------------------------------------ */

static void run_interval(const char *name, int first, int64_t *saved_steps, size_t *n_saved)
{
    char *sp = tu_subpath(name);
    st3 s;
    tu_small_make(&s, 1, 1);
    shs_config c;
    tu_cfg_saving(&c, sp);
    c.save_interleaved_steps = 3;
    c.enable_first_step_checkpoint = first;
    shs_manager *m;
    TU_OK(shs_manager_create(&m, &c, s.st));
    *n_saved = 0;
    for (int64_t step = 1; step <= 10; step++) {
        shs_progress p = tu_prog(step);
        int saved = -1;
        TU_OK(shs_manager_step(&saved, m, &p));
        assert_true(saved == 0 || saved == 1);
        if (saved)
            saved_steps[(*n_saved)++] = step;
    }
    shs_progress p = tu_prog(10);
    TU_OK(shs_manager_finish(m, &p));
    shs_manager_free(m);
    /* directories match what was reported */
    for (int64_t step = 1; step <= 10; step++) {
        int want = step == 10;
        for (size_t i = 0; i < *n_saved; i++)
            want |= saved_steps[i] == step;
        if (step_exists(sp, step) != want)
            fail_msg("%s: step %lld: directory %s", name, (long long)step,
                     want ? "missing" : "unexpected");
    }
    assert_int_equal(tu_tracker_step(sp), 10);
    shs_state_free(s.st);
    free(sp);
}

static void test_interval(void **state)
{
    (void)state;
    int64_t v[16];
    size_t n;
    run_interval("int_plain", 0, v, &n);
    assert_int_equal(n, 3);
    assert_int_equal(v[0], 3);
    assert_int_equal(v[1], 6);
    assert_int_equal(v[2], 9);
    run_interval("int_first", 1, v, &n);
    assert_int_equal(n, 4);
    assert_int_equal(v[0], 1);
    assert_int_equal(v[1], 3);
    assert_int_equal(v[2], 6);
    assert_int_equal(v[3], 9);

    /* finish right after a save of the same step: no second save */
    char *sp = tu_subpath("int_finish");
    st3 s;
    tu_small_make(&s, 1, 1);
    shs_config c;
    tu_cfg_saving(&c, sp);
    c.save_interleaved_steps = 3;
    shs_manager *m;
    TU_OK(shs_manager_create(&m, &c, s.st));
    shs_progress p = tu_prog(9);
    int saved = 0;
    TU_OK(shs_manager_step(&saved, m, &p));
    assert_int_equal(saved, 1);
    char *d9 = strdup(tu_path(sp, tu_step_name(9)));
    ino_t ino = inode_of(d9);
    struct stat sb0, sb1;
    assert_int_equal(stat(tu_path(d9, "metadata.json"), &sb0), 0);
    assert_true(ino != 0);
    s.w[0] = 1000; /* a second save would hold this */
    TU_OK(shs_manager_finish(m, &p));
    shs_manager_free(m);
    assert_int_equal(inode_of(d9), ino);
    assert_int_equal(stat(tu_path(d9, "metadata.json"), &sb1), 0);
    assert_int_equal(sb0.st_ino, sb1.st_ino);
    assert_int_equal(tu_count_prefixed(sp, "iteration_"), 1);
    st3 l;
    tu_small_make(&l, 0, 1);
    cfg_loading(&c, sp);
    TU_OK(shs_manager_create(&m, &c, l.st));
    shs_progress q = SHS_PROGRESS_INIT;
    TU_OK(shs_manager_load(NULL, m, &q));
    shs_manager_free(m);
    assert_true(l.w[0] == 1.0f);
    load_with_done();
    shs_state_free(l.st);
    shs_state_free(s.st);
    free(d9);
    free(sp);
}

/* ------------------------------------------------------------------ */
/* Retention                                                          */
/* ------------------------------------------------------------------ */

static void run_steps(const char *sp, int save_max, int keep_k, int64_t from, int64_t to, st3 *s)
{
    shs_config c;
    tu_cfg_saving(&c, sp);
    c.save_interleaved_steps = 1;
    c.save_max = save_max;
    c.keep_latest_k = keep_k;
    shs_manager *m;
    TU_OK(shs_manager_create(&m, &c, s->st));
    for (int64_t step = from; step <= to; step++) {
        tu_small_fill(s, (float)step);
        shs_progress p = tu_prog(step);
        TU_OK(shs_manager_step(NULL, m, &p));
    }
    shs_manager_free(m);
}

static void test_retention(void **state)
{
    (void)state;
    char *sp = tu_subpath("ret");
    save3(sp, 999, 999); /* another run's checkpoint */
    st3 s;
    tu_small_make(&s, 1, 1);
    run_steps(sp, 2, 0, 1, 6, &s);
    for (int64_t step = 1; step <= 4; step++)
        if (step_exists(sp, step))
            fail_msg("save_max=2: step %lld kept", (long long)step);
    assert_true(step_exists(sp, 5));
    assert_true(step_exists(sp, 6));
    assert_true(step_exists(sp, 999)); /* never another run's */
    assert_int_equal(tu_tracker_step(sp), 6);
    assert_int_equal(tu_count_leftovers(sp), 0);
    TU_OK(shs_checkpoint_verify(tu_path(sp, tu_step_name(999)), NULL, 0));

    /* keep_latest_k wins over save_max */
    char *sp2 = tu_subpath("ret_k");
    run_steps(sp2, 1, 3, 1, 6, &s);
    assert_int_equal(tu_count_prefixed(sp2, "iteration_"), 3);
    assert_true(step_exists(sp2, 4) && step_exists(sp2, 5) && step_exists(sp2, 6));

    /* keep 1: the newest always remains and loads */
    char *sp3 = tu_subpath("ret_1");
    run_steps(sp3, 1, 0, 1, 4, &s);
    assert_int_equal(tu_count_prefixed(sp3, "iteration_"), 1);
    assert_true(step_exists(sp3, 4));
    assert_int_equal(tu_tracker_step(sp3), 4);
    st3 l;
    tu_small_make(&l, 0, 1);
    shs_config c;
    cfg_loading(&c, sp3);
    shs_manager *m;
    TU_OK(shs_manager_create(&m, &c, l.st));
    shs_progress q = SHS_PROGRESS_INIT;
    TU_OK(shs_manager_load(NULL, m, &q));
    shs_manager_free(m);
    assert3(&l, 4, 1);
    assert_int_equal(q.global_step, 4);
    load_with_done();
    shs_state_free(l.st);

    /* save_max 0 keeps all */
    char *sp4 = tu_subpath("ret_all");
    run_steps(sp4, 0, 0, 1, 5, &s);
    assert_int_equal(tu_count_prefixed(sp4, "iteration_"), 5);

    shs_state_free(s.st);
    free(sp);
    free(sp2);
    free(sp3);
    free(sp4);
}

/* ------------------------------------------------------------------ */
/* Same-step re-save                                                  */
/* ------------------------------------------------------------------ */

static void test_resave_same_step(void **state)
{
    (void)state;
    char *sp = tu_subpath("resave");
    st3 s;
    tu_small_make(&s, 1, 1);
    set_blobs(s.st, "first");
    shs_config c;
    tu_cfg_saving(&c, sp);
    shs_manager *m;
    TU_OK(shs_manager_create(&m, &c, s.st));
    shs_progress p = tu_prog(5);
    TU_OK(shs_manager_save(m, &p, 0));
    tu_small_fill(&s, 50);
    set_blobs(s.st, "second");
    p.consumed_samples = 4242;
    TU_OK(shs_manager_save(m, &p, 0));
    shs_manager_free(m);
    /* the step, the tracker and the (kept, unlocked) lock file */
    assert_int_equal(tu_count_entries(sp), 3);
    assert_int_equal(tu_count_leftovers(sp), 0);
    TU_OK(shs_checkpoint_verify(tu_path(sp, tu_step_name(5)), NULL, 0));
    st3 l;
    tu_small_make(&l, 0, 1);
    cfg_loading(&c, sp);
    TU_OK(shs_manager_create(&m, &c, l.st));
    shs_progress q = SHS_PROGRESS_INIT;
    TU_OK(shs_manager_load(NULL, m, &q));
    shs_manager_free(m);
    assert3(&l, 50, 1);
    tu_assert_blob_str(l.st, "rng", "rng-second");
    assert_int_equal(q.consumed_samples, 4242);
    load_with_done();
    shs_state_free(l.st);
    shs_state_free(s.st);
    free(sp);
}

/* ------------------------------------------------------------------ */
/* no_save_optim, no_load_optim and master weights                    */
/* ------------------------------------------------------------------ */

static void test_no_optim(void **state)
{
    (void)state;
    char *sp = tu_subpath("noopt");
    /* a BF16 model weight with an F32 master copy and an Adam moment */
    uint16_t wb[12];
    float master[12], moment[12];
    for (int i = 0; i < 12; i++) {
        wb[i] = shs_f32_to_bf16(1.0f + (float)i * 0.3f);
        master[i] = -1;
        moment[i] = (float)i;
    }
    shs_state *st;
    TU_OK(shs_state_create(&st));
    tu_add_tensor(st, "w", SHS_KIND_MODEL, SHS_BF16, 2, tu_w_shape, wb, NULL);
    tu_add_tensor(st, "opt.w.master", SHS_KIND_OPTIMIZER, SHS_F32, 2, tu_w_shape, master, "w");
    tu_add_tensor(st, "opt.w.exp_avg", SHS_KIND_OPTIMIZER, SHS_F32, 2, tu_w_shape, moment, NULL);
    TU_OK(shs_state_set_blob(st, "rng", "saved-rng", 9));
    shs_config c;
    tu_cfg_saving(&c, sp);
    c.no_save_optim = 1;
    shs_manager *m;
    TU_OK(shs_manager_create(&m, &c, st));
    shs_progress p = tu_prog(8);
    TU_OK(shs_manager_save(m, &p, 0));
    shs_manager_free(m);
    char *dir = strdup(tu_path(sp, tu_step_name(8)));
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, "-opt-"))
            fail_msg("no_save_optim wrote %s", e->d_name);
    closedir(d);
    TU_OK(shs_checkpoint_verify(dir, NULL, 0));

    /* a fresh state: master and moment hold sentinels */
    uint16_t wb2[12] = { 0 };
    float master2[12], moment2[12];
    for (int i = 0; i < 12; i++) {
        master2[i] = -7;
        moment2[i] = -9;
    }
    shs_state *st2;
    TU_OK(shs_state_create(&st2));
    tu_add_tensor(st2, "w", SHS_KIND_MODEL, SHS_BF16, 2, tu_w_shape, wb2, NULL);
    tu_add_tensor(st2, "opt.w.master", SHS_KIND_OPTIMIZER, SHS_F32, 2, tu_w_shape, master2, "w");
    tu_add_tensor(st2, "opt.w.exp_avg", SHS_KIND_OPTIMIZER, SHS_F32, 2, tu_w_shape, moment2, NULL);
    TU_OK(shs_state_set_blob(st2, "rng", "mine", 4));

    /* strict, with optimizer: fails naming the optimizer tensors */
    cfg_loading(&c, sp);
    TU_OK(shs_manager_create(&m, &c, st2));
    shs_progress q = SHS_PROGRESS_INIT;
    q.global_step = 3;
    int rc = shs_manager_load(NULL, m, &q);
    assert_int_equal(rc, SHS_EMISMATCH);
    TU_ASSERT_MSG_HAS("opt.w.master");
    TU_ASSERT_MSG_HAS("opt.w.exp_avg");
    shs_manager_free(m);

    /* no_load_optim: weights only, masters refreshed, progress kept */
    memset(wb2, 0, sizeof wb2);
    cfg_loading(&c, sp);
    c.no_load_optim = 1;
    TU_OK(shs_manager_create(&m, &c, st2));
    q = tu_prog(3);
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    TU_OK(shs_manager_load(&res, m, &q));
    shs_manager_free(m);
    assert_int_equal(res.loaded, 1);
    assert_int_equal(res.optimizer_loaded, 0);
    assert_int_equal(res.progress_loaded, 0);
    assert_int_equal(q.global_step, 3);
    assert_int_equal(q.consumed_samples, 3 * 32);
    assert_memory_equal(wb2, wb, sizeof wb);
    for (int i = 0; i < 12; i++) {
        if (master2[i] != shs_bf16_to_f32(wb[i]))
            fail_msg("master[%d] = %g, want %g", i, master2[i], shs_bf16_to_f32(wb[i]));
        assert_true(moment2[i] == -9); /* untouched */
    }
    shs_state_free(st2);
    shs_state_free(st);
    free(dir);
    free(sp);
}

/* ------------------------------------------------------------------ */
/* exclude_from_loading                                               */
/* ------------------------------------------------------------------ */

static void test_exclude(void **state)
{
    (void)state;
    char *sp = tu_subpath("excl");
    save3(sp, 4, 4);
    st3 l;
    tu_small_make(&l, 0, 1);
    set_blobs(l.st, "mine");
    shs_config c;
    cfg_loading(&c, sp);
    TU_OK(shs_config_set(&c, "exclude_from_loading", "rng,lr_scheduler"));
    shs_manager *m;
    TU_OK(shs_manager_create(&m, &c, l.st));
    shs_progress q = SHS_PROGRESS_INIT;
    TU_OK(shs_manager_load(NULL, m, &q));
    shs_manager_free(m);
    shs_config_release(&c);
    assert3(&l, 4, 1);
    tu_assert_blob_str(l.st, "rng", "rng-mine");
    tu_assert_blob_str(l.st, "lr_scheduler", "{\"lr\": \"mine\"}");
    tu_assert_blob_str(l.st, "dataloader", "{\"cursor\": \"saved\"}");
    assert_int_equal(q.global_step, 4);
    load_with_done();
    shs_state_free(l.st);

    /* optimizer excluded: optimizer buffers untouched */
    tu_small_make(&l, 0, 1);
    for (int i = 0; i < 12; i++)
        l.wm[i] = -5;
    cfg_loading(&c, sp);
    TU_OK(shs_config_set(&c, "exclude_from_loading", "optimizer"));
    TU_OK(shs_manager_create(&m, &c, l.st));
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    TU_OK(shs_manager_load(&res, m, &q));
    shs_manager_free(m);
    shs_config_release(&c);
    assert3(&l, 4, 0);
    assert_int_equal(res.optimizer_loaded, 0);
    for (int i = 0; i < 12; i++)
        assert_true(l.wm[i] == -5);
    tu_assert_blob_str(l.st, "rng", "rng-saved");
    load_with_done();
    shs_state_free(l.st);
    free(sp);
}

/* ------------------------------------------------------------------ */
/* Batch size change                                                  */
/* ------------------------------------------------------------------ */

static void test_batch_size_change(void **state)
{
    (void)state;
    char *sp = tu_subpath("gbs");
    save3(sp, 100, 1); /* gbs 32, consumed 3200 */
    st3 l;
    tu_small_make(&l, 0, 1);
    shs_config c;
    cfg_loading(&c, sp);
    shs_manager *m;
    TU_OK(shs_manager_create(&m, &c, l.st));
    shs_progress q = SHS_PROGRESS_INIT;
    q.global_batch_size = 64;
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    TU_OK(shs_manager_load(&res, m, &q));
    assert_int_equal(q.global_step, 50);
    assert_int_equal(q.global_batch_size, 64);
    assert_int_equal(q.consumed_samples, 3200);
    assert_int_equal(res.batch_size_changed, 1);
    /* same batch size: unchanged */
    q = (shs_progress)SHS_PROGRESS_INIT;
    q.global_batch_size = 32;
    TU_OK(shs_manager_load(&res, m, &q));
    assert_int_equal(q.global_step, 100);
    assert_int_equal(res.batch_size_changed, 0);
    shs_manager_free(m);
    load_with_done();
    shs_state_free(l.st);
    free(sp);
}

/* ------------------------------------------------------------------ */
/* Load resolution                                                    */
/* ------------------------------------------------------------------ */

static int load_with(shs_config *c, st3 *l, shs_progress *q, shs_load_result *res)
{
    load_with_done();
    int rc = shs_manager_create(&g_load_manager, c, l->st);
    if (rc < 0)
        return rc;
    return shs_manager_load(res, g_load_manager, q);
}

static void test_auto_resume(void **state)
{
    (void)state;
    char *sp = tu_subpath("ar_save"), *other = tu_subpath("ar_other"),
         *init = tu_subpath("ar_init"), *empty = tu_subpath("ar_empty");
    save3(sp, 10, 10);
    save3(sp, 20, 20);
    save3(other, 30, 30);
    save3(init, 40, 40);
    st3 l;
    tu_small_make(&l, 0, 1);
    shs_config c;
    shs_progress q = SHS_PROGRESS_INIT;
    shs_load_result res = SHS_LOAD_RESULT_INIT;

    /* nothing anywhere: fresh start */
    tu_cfg_saving(&c, empty);
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.loaded, 0);
    assert_true(l.w[0] == 0);

    /* load_path empty, save_path has checkpoints: newest */
    tu_cfg_saving(&c, sp);
    c.initial_load_path = init;
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.loaded, 1);
    assert_int_equal(res.step, 20);
    assert3(&l, 20, 1);
    assert_int_equal(q.global_step, 20);

    /* load_step */
    c.load_step = 10;
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.step, 10);
    assert3(&l, 10, 1);
    c.load_step = 15;
    assert_int_equal(load_with(&c, &l, &q, &res), SHS_ENOCHECKPOINT);

    /* the job's own progress wins over load_path */
    tu_cfg_saving(&c, sp);
    c.load_path = other;
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.step, 20);
    assert_int_equal(res.source, SHS_LOAD_SAVE_PATH);
    assert3(&l, 20, 1);
    /* load_path when the save path holds nothing */
    tu_cfg_saving(&c, empty);
    c.load_path = other;
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.step, 30);
    assert_int_equal(res.source, SHS_LOAD_LOAD_PATH);
    assert3(&l, 30, 1);

    /* initial_load_path only when save_path holds nothing; model only */
    tu_cfg_saving(&c, empty);
    c.initial_load_path = init;
    tu_small_fill(&l, 0);
    for (int i = 0; i < 12; i++)
        l.wm[i] = -3;
    q = (shs_progress)SHS_PROGRESS_INIT;
    q.global_step = 0;
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.loaded, 1);
    assert_int_equal(res.step, 40);
    assert_int_equal(res.optimizer_loaded, 0);
    assert3(&l, 40, 0);
    for (int i = 0; i < 12; i++)
        assert_true(l.wm[i] == -3);
    assert_int_equal(q.global_step, 0); /* progress not taken from it */
    /* with initial_load_model_only false: optimizer too */
    c.initial_load_model_only = 0;
    TU_OK(load_with(&c, &l, &q, &res));
    assert3(&l, 40, 1);
    /* a save path with only an incomplete directory still counts as empty */
    assert_int_equal(mkdir(empty, 0755) == 0 || errno == EEXIST, 1);
    assert_int_equal(mkdir(tu_path(empty, "iteration_00000099"), 0755), 0);
    c.initial_load_model_only = 1;
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.step, 40);
    /* the save path wins over initial_load_path once it has a checkpoint */
    tu_cfg_saving(&c, sp);
    c.initial_load_path = init;
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.step, 20);

    load_with_done();
    shs_state_free(l.st);
    free(sp);
    free(other);
    free(init);
    free(empty);
}

/* ------------------------------------------------------------------ */
/* Resume: order, errors, damaged and lagging trackers                */
/* ------------------------------------------------------------------ */

/* Flip the last byte of the model file of a step (its tensor data). */
static void damage_step(const char *sp, int64_t step)
{
    const char *dir = tu_step_dir(sp, step);
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    char name[256] = "";
    while ((e = readdir(d)))
        if (strstr(e->d_name, "-model-") && strstr(e->d_name, ".safetensors"))
            snprintf(name, sizeof name, "%s", e->d_name);
    closedir(d);
    assert_true(name[0] != '\0');
    char *path = tu_path_dup(dir, name);
    size_t len;
    unsigned char *b = tu_read_file(path, &len);
    assert_non_null(b);
    b[len - 1] ^= 0x5a;
    assert_int_equal(tu_write_file(path, b, len), 0);
    free(b);
    free(path);
}

static void set_tracker(const char *sp, const char *text)
{
    assert_int_equal(tu_write_file(tu_path(sp, TU_TRACKER), text, strlen(text)), 0);
}

/* The io seam failing calls on paths containing g_needle with g_errno. */
static const char *g_needle;
static int g_ferrno;
static unsigned g_fops_mask; /* 1 stat and lstat, 2 list_dir, 4 open, 8 rename */
static int rf_stat(const char *p, struct stat *st)
{
    if ((g_fops_mask & 1) && strstr(p, g_needle)) {
        errno = g_ferrno;
        return -1;
    }
    return shs__io_posix.stat(p, st);
}
static int rf_lstat(const char *p, struct stat *st)
{
    if ((g_fops_mask & 1) && strstr(p, g_needle)) {
        errno = g_ferrno;
        return -1;
    }
    return shs__io_posix.lstat(p, st);
}
static int rf_list(const char *p, char ***names, size_t *n)
{
    if ((g_fops_mask & 2) && strstr(p, g_needle)) {
        errno = g_ferrno;
        return -1;
    }
    return shs__io_posix.list_dir(p, names, n);
}
static int rf_open(const char *p, int flags, mode_t mode)
{
    if ((g_fops_mask & 4) && strstr(p, g_needle)) {
        errno = g_ferrno;
        return -1;
    }
    return shs__io_posix.open(p, flags, mode);
}
static int rf_rename(const char *a, const char *b)
{
    if ((g_fops_mask & 8) && strstr(a, g_needle)) {
        errno = g_ferrno;
        return -1;
    }
    return shs__io_posix.rename(a, b);
}
static void faults_on(const char *needle, int err, unsigned mask)
{
    static shs__io_ops ops;
    ops = shs__io_posix;
    ops.stat = rf_stat;
    ops.lstat = rf_lstat;
    ops.list_dir = rf_list;
    ops.open = rf_open;
    ops.rename = rf_rename;
    g_needle = needle;
    g_ferrno = err;
    g_fops_mask = mask;
    shs__io_set(&ops);
}
static void faults_off(void)
{
    shs__io_set(NULL);
}

/* Point 9: the job's own progress wins; which options apply where. */
static void test_resume_order(void **state)
{
    (void)state;
    char *sp = tu_subpath("ro_save"), *pre = tu_subpath("ro_pre"), *none = tu_subpath("ro_none");
    save3(pre, 30, 30);
    save3(sp, 20, 20);
    st3 l;
    tu_small_make(&l, 0, 1);
    shs_config c;
    shs_progress q = SHS_PROGRESS_INIT;
    shs_load_result res = SHS_LOAD_RESULT_INIT;

    /* a crashed fine-tune: load_path = pretrained, no_load_optim; the
       job's own save (with its optimizer state and progress) wins */
    tu_cfg_saving(&c, sp);
    c.load_path = pre;
    c.no_load_optim = 1;
    c.load_step = 30; /* load_step belongs to load_path: ignored here */
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.source, SHS_LOAD_SAVE_PATH);
    assert_int_equal(res.step, 20);
    assert_int_equal(res.optimizer_loaded, 1);
    assert_int_equal(res.progress_loaded, 1);
    assert3(&l, 20, 1);
    assert_int_equal(q.global_step, 20);

    /* fresh fine-tune (empty save path): load_path, weights only */
    tu_small_fill(&l, 0);
    for (int i = 0; i < 12; i++)
        l.wm[i] = -1;
    q = (shs_progress)SHS_PROGRESS_INIT;
    tu_cfg_saving(&c, none);
    c.load_path = pre;
    c.no_load_optim = 1;
    c.load_step = 30;
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.source, SHS_LOAD_LOAD_PATH);
    assert_int_equal(res.step, 30);
    assert_int_equal(res.optimizer_loaded, 0);
    assert_int_equal(l.wm[0], -1);
    assert_int_equal(q.global_step, 0);
    /* load_step naming a missing step of load_path is an error */
    c.load_step = 31;
    assert_int_equal(load_with(&c, &l, &q, &res), SHS_ENOCHECKPOINT);
    TU_ASSERT_MSG_HAS("load_path");
    TU_ASSERT_MSG_HAS("31");

    /* a load_path that does not exist is an error, not a fresh start */
    char *gone = tu_subpath("ro_gone");
    tu_cfg_saving(&c, none);
    c.load_path = gone;
    assert_int_equal(load_with(&c, &l, &q, &res), SHS_ENOENT);
    TU_ASSERT_MSG_HAS("load_path");
    TU_ASSERT_MSG_HAS("ro_gone");
    /* and so is an initial_load_path that does not exist */
    tu_cfg_saving(&c, none);
    c.initial_load_path = gone;
    assert_int_equal(load_with(&c, &l, &q, &res), SHS_ENOENT);
    TU_ASSERT_MSG_HAS("initial_load_path");
    /* a save path that does not exist: nothing there, fresh start */
    char *nosp = tu_subpath("ro_nosp");
    shs_config_init(&c);
    c.enable_save = 0;
    c.save_path = nosp;
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.loaded, 0);
    assert_int_equal(res.source, SHS_LOAD_NONE);
    assert_non_null(strstr(res.message, "fresh start"));
    /* load_step without load_path applies to the save path */
    tu_cfg_saving(&c, sp);
    c.load_step = 21;
    assert_int_equal(load_with(&c, &l, &q, &res), SHS_ENOCHECKPOINT);
    TU_ASSERT_MSG_HAS("21");

    /* an uninitialised result is refused (its version is checked) */
    shs_load_result bad;
    memset(&bad, 0, sizeof bad);
    tu_cfg_saving(&c, sp);
    assert_int_equal(load_with(&c, &l, &q, &bad), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("SHS_LOAD_RESULT_INIT");
    load_with_done();
    shs_state_free(l.st);
    free(sp);
    free(pre);
    free(none);
    free(gone);
    free(nosp);
}

/* torchtitan's enable: false loads nothing, not even the job's own save
   path, and saves nothing; load_step that cannot be honoured is an error;
   load_path naming the save path itself (MindSpore's resume_training with
   load_checkpoint = its own folder) starts fresh while it is empty. */
static void test_enable_and_own_folder(void **state)
{
    (void)state;
    char *sp = tu_subpath("en_save"), *nosp = tu_subpath("en_none");
    save3(sp, 40, 40);
    st3 l;
    tu_small_make(&l, 0, 1);
    shs_config c;
    shs_progress q = SHS_PROGRESS_INIT;
    shs_load_result res = SHS_LOAD_RESULT_INIT;

    tu_cfg_saving(&c, sp);
    c.enable = 0;
    c.initial_load_path = sp;
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.loaded, 0);
    assert_int_equal(res.source, SHS_LOAD_NONE);
    assert_non_null(strstr(res.message, "enable: false"));
    assert_int_equal(q.global_step, 0);
    assert_true(l.w[0] == 0);
    /* ... and saves nothing: no step, and the save path is not locked */
    shs_progress p50 = tu_prog(50);
    c.save_interleaved_steps = 10;
    int saved = 1;
    TU_OK(shs_manager_step(&saved, g_load_manager, &p50));
    assert_int_equal(saved, 0);
    TU_OK(shs_manager_finish(g_load_manager, &p50));
    assert_false(step_exists(sp, 50));
    assert_int_equal(shs_manager_save(g_load_manager, &p50, 0), SHS_ESTATE);
    TU_ASSERT_MSG_HAS("enable false");
    shs_manager *other = NULL;
    shs_config c2;
    tu_cfg_saving(&c2, sp);
    TU_OK(shs_manager_create(&other, &c2, l.st));
    shs_manager_free(other);

    /* load_step with nothing to load it from: an error, never a fresh
       start (a save path that does not exist, an empty one, none) */
    tu_cfg_saving(&c, nosp);
    c.enable_save = 0; /* a saving manager creates its save path */
    c.load_step = 40;
    assert_int_equal(load_with(&c, &l, &q, &res), SHS_ENOCHECKPOINT);
    TU_ASSERT_MSG_HAS("load_step 40: save_path");
    TU_ASSERT_MSG_HAS("en_none");
    assert_false(tu_path_exists(nosp));
    c.enable_save = 1;
    assert_int_equal(load_with(&c, &l, &q, &res), SHS_ENOCHECKPOINT);
    TU_ASSERT_MSG_HAS("holds no checkpoint");
    shs_config_init(&c);
    c.enable_save = 0;
    c.load_step = 40;
    assert_int_equal(load_with(&c, &l, &q, &res), SHS_ENOCHECKPOINT);
    TU_ASSERT_MSG_HAS("no save_path or load_path");
    /* ... even with an initial_load_path to fall back on */
    tu_cfg_saving(&c, nosp);
    c.load_step = 40;
    c.initial_load_path = sp;
    assert_int_equal(load_with(&c, &l, &q, &res), SHS_ENOCHECKPOINT);

    /* load_path = the save path, written another way: empty -> fresh start */
    char own[4200];
    snprintf(own, sizeof own, "%s/./", nosp);
    tu_cfg_saving(&c, nosp);
    c.load_path = own;
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.loaded, 0);
    assert_non_null(strstr(res.message, "fresh start"));
    assert_non_null(strstr(res.message, "load_path names it too"));
    /* neither exists yet: the same path once tidied */
    char *later = tu_subpath("en_later");
    snprintf(own, sizeof own, "%s//", later);
    tu_cfg_saving(&c, later);
    c.load_path = own;
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.loaded, 0);
    /* with a checkpoint there it resumes, load_step applying to it */
    load_with_done();
    save3(nosp, 60, 60);
    save3(nosp, 70, 70);
    snprintf(own, sizeof own, "%s/./", nosp);
    tu_cfg_saving(&c, nosp);
    c.load_path = own;
    c.load_step = 60;
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.source, SHS_LOAD_SAVE_PATH);
    assert_int_equal(res.step, 60);
    assert3(&l, 60, 1);
    load_with_done();
    shs_state_free(l.st);
    free(sp);
    free(nosp);
    free(later);
}

/* Point 3: only ENOENT of the save path means "nothing to resume". */
static void test_resume_io_errors(void **state)
{
    (void)state;
    /* EIO on stat of the save path at create: the errno, not "exists and
       is not a directory" */
    {
        char *eio = tu_subpath("eio_save");
        st3 e;
        tu_small_make(&e, 0, 1);
        shs_config c;
        tu_cfg_saving(&c, eio);
        shs_manager *m = NULL;
        faults_on("eio_save", EIO, 1);
        int rc = shs_manager_create(&m, &c, e.st);
        faults_off();
        assert_int_equal(rc, SHS_EIO);
        TU_ASSERT_MSG_HAS("eio_save");
        TU_ASSERT_MSG_HAS(strerror(EIO));
        assert_null(strstr(shs_last_error(), "not a directory"));
        assert_null(m);
        shs_state_free(e.st);
        free(eio);
    }
    char *sp = tu_subpath("rio");
    save3(sp, 7, 7);
    st3 l;
    tu_small_make(&l, 0, 1);
    shs_config c;
    shs_progress q = SHS_PROGRESS_INIT;
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    static const struct {
        const char *needle;
        int err;
        unsigned mask;
        const char *msg;
    } cases[] = {
        { "rio", EACCES, 1, "Permission denied" }, /* stat of the save path */
        { "rio", EIO, 2, "Input/output error" },   /* its listing */
        { "iteration_00000007/metadata.json", EIO, 1, "Input/output error" },
        { TU_TRACKER, EACCES, 1, "Permission denied" }, /* the tracker's stat */
        { TU_TRACKER, EIO, 4, "Input/output error" },   /* reading the tracker */
        { "rio", ESTALE, 1, "Stale" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        shs_config_init(&c);
        c.enable_save = 0; /* no lock: the fault must hit the load */
        c.save_path = sp;
        shs_manager *m;
        TU_OK(shs_manager_create(&m, &c, l.st));
        faults_on(cases[k].needle, cases[k].err, cases[k].mask);
        int rc = shs_manager_load(&res, m, &q);
        faults_off();
        shs_manager_free(m);
        if (rc == SHS_OK)
            fail_msg("case %zu: load succeeded (loaded=%d) despite %s", k, res.loaded,
                     cases[k].msg);
        if (!strstr(shs_last_error(), cases[k].msg))
            fail_msg("case %zu: message lacks errno text '%s': %s", k, cases[k].msg,
                     shs_last_error());
        assert_int_equal(tu_tracker_step(sp), 7); /* untouched */
    }
    /* a save path that is a file: ENOTDIR, an error */
    char *file = tu_subpath("rio_file");
    assert_int_equal(tu_write_file(file, "x", 1), 0);
    shs_config_init(&c);
    c.enable_save = 0;
    c.save_path = file;
    assert_true(load_with(&c, &l, &q, &res) < 0);
    TU_ASSERT_MSG_HAS("Not a directory");
    /* a malformed tracker fails, naming it */
    char *sp2 = tu_subpath("rio_trk");
    save3(sp2, 7, 7);
    set_tracker(sp2, "7x");
    tu_cfg_saving(&c, sp2);
    assert_int_equal(load_with(&c, &l, &q, &res), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS(TU_TRACKER);
    load_with_done();
    shs_state_free(l.st);
    free(sp);
    free(sp2);
    free(file);
}

/* Point 3 with real permissions.  Root bypasses them, so as root the load
   runs with the effective uid of "nobody" (65534), the test root made
   traversable for it meanwhile; the real uid stays 0 to switch back. */
static void test_resume_chmod(void **state)
{
    (void)state;
    char *sp = tu_subpath("rchmod");
    save3(sp, 7, 7);
    assert_int_equal(chmod(sp, 0), 0);
    st3 l;
    tu_small_make(&l, 0, 1);
    shs_config c;
    shs_config_init(&c);
    c.enable_save = 0;
    c.save_path = sp;
    shs_progress q = SHS_PROGRESS_INIT;
    int as_root = geteuid() == 0;
    if (as_root) {
        assert_int_equal(chmod(tu_root, 0711), 0);
        assert_int_equal(seteuid(65534), 0);
    }
    int rc = load_with(&c, &l, &q, NULL);
    if (as_root) {
        int back = seteuid(0);
        assert_int_equal(back, 0);
        assert_int_equal(chmod(tu_root, 0700), 0);
    }
    assert_int_equal(chmod(sp, 0755), 0);
    assert_true(rc < 0);
    TU_ASSERT_MSG_HAS("Permission denied");
    TU_ASSERT_MSG_HAS("rchmod"); /* denied at the save path, not above it */
    load_with_done();
    shs_state_free(l.st);
    free(sp);
}

/* Point 2: a step directory is never read as a plain folder. */
static void test_step_dir_never_plain(void **state)
{
    (void)state;
    char *sp = tu_subpath("np");
    save3(sp, 5, 5);
    const char *src = tu_step_dir(sp, 5);
    char model[256] = "";
    DIR *d = opendir(src);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, "-model-"))
            snprintf(model, sizeof model, "%s", e->d_name);
    closedir(d);
    size_t len;
    void *bytes = tu_read_file(tu_path(src, model), &len);
    assert_non_null(bytes);
    st3 l;
    tu_small_make(&l, 0, 0);
    shs_config c;
    shs_progress q = SHS_PROGRESS_INIT;
    shs_load_result res = SHS_LOAD_RESULT_INIT;

    /* a plain folder of safetensors files, named as load_path: loads */
    char *hf = tu_subdir("np_hf");
    assert_int_equal(tu_write_file(tu_path(hf, "model.safetensors"), bytes, len), 0);
    cfg_loading(&c, hf);
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.loaded, 1);
    assert3(&l, 5, 0);

    /* iteration_* without metadata.json: damaged, load and verify fail */
    char *it = tu_subdir("np_sp");
    char *itd = tu_subdir("np_sp/iteration_00000009");
    assert_int_equal(tu_write_file(tu_path(itd, "model.safetensors"), bytes, len), 0);
    cfg_loading(&c, itd);
    assert_int_equal(load_with(&c, &l, &q, &res), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("iteration_00000009");
    TU_ASSERT_MSG_HAS("without metadata.json");
    assert_int_equal(shs_checkpoint_verify(itd, NULL, 0), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("without metadata.json");
    /* its save path is not a plain folder either (the step dir is not
       complete, so there is no checkpoint) */
    cfg_loading(&c, it);
    assert_int_equal(load_with(&c, &l, &q, &res), SHS_ENOCHECKPOINT);
    /* a directory of any name holding common.json but no metadata.json */
    char *cj = tu_subdir("np_cj");
    assert_int_equal(tu_write_file(tu_path(cj, "model.safetensors"), bytes, len), 0);
    assert_int_equal(tu_write_file(tu_path(cj, "common.json"), "{}", 2), 0);
    cfg_loading(&c, cj);
    assert_int_equal(load_with(&c, &l, &q, &res), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("common.json");
    assert_int_equal(shs_checkpoint_verify(cj, NULL, 0), SHS_ECORRUPT);
    /* a save path whose tracker names a step: never plain, even with
       stray safetensors files beside */
    char *sp2 = tu_subdir("np_sp2");
    assert_int_equal(tu_write_file(tu_path(sp2, "model.safetensors"), bytes, len), 0);
    set_tracker(sp2, "3");
    tu_cfg_saving(&c, sp2);
    assert_true(load_with(&c, &l, &q, &res) < 0);
    TU_ASSERT_MSG_HAS("step 3");
    free(bytes);
    load_with_done();
    shs_state_free(l.st);
    free(sp);
    free(hf);
    free(it);
    free(itd);
    free(cj);
    free(sp2);
}

/* Point 10: a damaged or missing latest step, a lagging tracker. */
static void test_resume_recovery(void **state)
{
    (void)state;
    st3 l;
    tu_small_make(&l, 0, 1);
    shs_config c;
    shs_progress q = SHS_PROGRESS_INIT;
    shs_load_result res = SHS_LOAD_RESULT_INIT;

    /* the tracker behind the newest complete step (a crash between the
       commit rename and the tracker update): the newest step loads and
       the tracker is rewritten, and the result says so */
    char *sp = tu_subpath("rr_behind");
    save3(sp, 10, 10);
    save3(sp, 20, 20);
    set_tracker(sp, "10");
    tu_cfg_saving(&c, sp);
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.step, 20);
    assert_int_equal(res.tracker_repaired, 1);
    assert_non_null(strstr(res.message, "tracker"));
    assert_int_equal(tu_tracker_step(sp), 20);
    assert3(&l, 20, 1);
    /* no tracker at all: the same */
    assert_int_equal(unlink(tu_path(sp, TU_TRACKER)), 0);
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.step, 20);
    assert_int_equal(res.tracker_repaired, 1);
    assert_int_equal(tu_tracker_step(sp), 20);
    /* the newest is damaged: down to the tracker's step, automatically */
    load_with_done();
    save3(sp, 30, 30);
    set_tracker(sp, "20");
    damage_step(sp, 30);
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.step, 20);
    assert_int_equal(res.fell_back, 0);
    assert_int_equal(tu_tracker_step(sp), 20);

    /* the tracker's step damaged: an error naming the step that verifies */
    char *sp2 = tu_subpath("rr_damaged");
    save3(sp2, 10, 10);
    save3(sp2, 20, 20);
    damage_step(sp2, 20);
    tu_cfg_saving(&c, sp2);
    assert_int_equal(load_with(&c, &l, &q, &res), SHS_ECHECKSUM);
    TU_ASSERT_MSG_HAS("load_step: 10");
    TU_ASSERT_MSG_HAS("resume_fallback: true");
    assert_int_equal(tu_tracker_step(sp2), 20);
    /* resume_fallback: loads it and says so; the tracker stays */
    c.resume_fallback = 1;
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.step, 10);
    assert_int_equal(res.fell_back, 1);
    assert_non_null(strstr(res.message, "resume_fallback"));
    assert3(&l, 10, 1);
    assert_int_equal(tu_tracker_step(sp2), 20);
    /* load_step: 10 as the message says */
    tu_cfg_saving(&c, sp2);
    c.load_step = 10;
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.step, 10);

    /* the tracker naming a missing step: an error, with the way out */
    char *sp3 = tu_subpath("rr_missing");
    save3(sp3, 10, 10);
    set_tracker(sp3, "40");
    tu_cfg_saving(&c, sp3);
    assert_int_equal(load_with(&c, &l, &q, &res), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("40");
    TU_ASSERT_MSG_HAS("load_step: 10");
    c.resume_fallback = 1;
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.step, 10);
    assert_int_equal(res.fell_back, 1);
    /* ... even when no step directory is left: never a fresh start that
       would overwrite the tracker */
    char *sp4 = tu_subdir("rr_none");
    set_tracker(sp4, "40");
    tu_cfg_saving(&c, sp4);
    c.resume_fallback = 1;
    assert_int_equal(load_with(&c, &l, &q, &res), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("no earlier step");
    assert_int_equal(tu_tracker_step(sp4), 40);
    load_with_done();
    shs_state_free(l.st);
    free(sp);
    free(sp2);
    free(sp3);
    free(sp4);
}

/* Point 11: keep_latest_k covers the whole save path, save_max this run;
   neither deletes the tracker's step or a symlinked step; a failed
   deletion is a warning. */
static void test_retention_rules(void **state)
{
    (void)state;
    st3 s;
    tu_small_make(&s, 1, 1);
    /* another run's steps 1, 2; this run saves 3, 4, 5 */
    char *sp = tu_subpath("rr_k");
    save3(sp, 1, 1);
    save3(sp, 2, 2);
    run_steps(sp, 0, 2, 3, 5, &s);
    assert_false(step_exists(sp, 1) || step_exists(sp, 2) || step_exists(sp, 3));
    assert_true(step_exists(sp, 4) && step_exists(sp, 5));
    char *sp2 = tu_subpath("rr_max");
    save3(sp2, 1, 1);
    save3(sp2, 2, 2);
    run_steps(sp2, 2, 0, 3, 5, &s);
    assert_true(step_exists(sp2, 1) && step_exists(sp2, 2)); /* another run's */
    assert_false(step_exists(sp2, 3));
    assert_true(step_exists(sp2, 4) && step_exists(sp2, 5));

    /* keep 1 with a newer step of another run: the tracker's step stays */
    char *sp3 = tu_subpath("rr_trk");
    save3(sp3, 50, 50);
    run_steps(sp3, 0, 1, 7, 7, &s);
    assert_int_equal(tu_tracker_step(sp3), 7);
    assert_true(step_exists(sp3, 7) && step_exists(sp3, 50));

    /* a symlinked step is not deleted, nor what it points to */
    char *sp4 = tu_subpath("rr_link"), *ext = tu_subpath("rr_ext");
    save3(ext, 1, 1);
    assert_int_equal(mkdir(sp4, 0755), 0);
    assert_int_equal(symlink(tu_step_dir(ext, 1), tu_step_dir(sp4, 1)), 0);
    shs_config c;
    tu_cfg_saving(&c, sp4);
    c.keep_latest_k = 1;
    shs_manager *m;
    TU_OK(shs_manager_create(&m, &c, s.st));
    assert_null(shs_manager_warning(m));
    shs_progress p = tu_prog(2);
    TU_OK(shs_manager_save(m, &p, 0));
    shs_save_stats st = SHS_SAVE_STATS_INIT;
    TU_OK(shs_manager_last_save(&st, m));
    assert_int_equal(st.retention_failures, 1);
    assert_non_null(shs_manager_warning(m));
    assert_non_null(strstr(shs_manager_warning(m), "symbolic link"));
    shs_manager_free(m);
    struct stat lst;
    assert_int_equal(lstat(tu_step_dir(sp4, 1), &lst), 0);
    assert_true(S_ISLNK(lst.st_mode));
    TU_OK(shs_checkpoint_verify(tu_step_dir(ext, 1), NULL, 0));

    /* a failed deletion (EACCES on the rename away) is a warning: the save
       is committed and the job goes on */
    char *sp5 = tu_subpath("rr_fail");
    tu_cfg_saving(&c, sp5);
    c.save_max = 1;
    TU_OK(shs_manager_create(&m, &c, s.st));
    p = tu_prog(1);
    TU_OK(shs_manager_save(m, &p, 0));
    faults_on("iteration_00000001", EACCES, 8);
    p = tu_prog(2);
    int rc = shs_manager_save(m, &p, 0);
    faults_off();
    TU_OK(rc);
    st = (shs_save_stats)SHS_SAVE_STATS_INIT;
    TU_OK(shs_manager_last_save(&st, m));
    assert_int_equal(st.step, 2);
    assert_int_equal(st.retention_failures, 1);
    assert_non_null(strstr(shs_manager_warning(m), "Permission denied"));
    assert_non_null(strstr(shs_manager_warning(m), "step 1"));
    /* an uninitialised stats struct is refused */
    shs_save_stats bad;
    memset(&bad, 0, sizeof bad);
    assert_int_equal(shs_manager_last_save(&bad, m), SHS_EINVAL);
    shs_manager_free(m);
    assert_int_equal(tu_tracker_step(sp5), 2);
    assert_true(step_exists(sp5, 1) && step_exists(sp5, 2));
    shs_state_free(s.st);
    free(sp);
    free(sp2);
    free(sp3);
    free(sp4);
    free(ext);
    free(sp5);
}

/* Point 13: last_save_model_only never replaces a full save, and
   auto-resume prefers a full step. */
static void test_last_save_model_only(void **state)
{
    (void)state;
    st3 s;
    tu_small_make(&s, 4, 1);
    char *sp = tu_subpath("lsmo");
    shs_config c;
    tu_cfg_saving(&c, sp);
    c.save_interleaved_steps = 4;
    c.last_save_model_only = 1;
    shs_manager *m;
    TU_OK(shs_manager_create(&m, &c, s.st));
    shs_progress p = tu_prog(4);
    int saved = 0;
    TU_OK(shs_manager_step(&saved, m, &p));
    assert_int_equal(saved, 1);
    TU_OK(shs_manager_finish(m, &p)); /* step 4 already has a full save */
    shs_manager_free(m);
    assert_int_equal(tu_count_prefixed(tu_step_dir(sp, 4), "checkpoint-opt-"), 1);
    size_t len;
    char *meta = tu_read_file(tu_path(tu_step_dir(sp, 4), "metadata.json"), &len);
    assert_null(strstr(meta, "model_only"));
    free(meta);
    /* the same from another manager (the full save is found on disk) */
    TU_OK(shs_manager_create(&m, &c, s.st));
    TU_OK(shs_manager_finish(m, &p));
    shs_manager_free(m);
    assert_int_equal(tu_count_prefixed(tu_step_dir(sp, 4), "checkpoint-opt-"), 1);
    /* finish at an unsaved step: weights only, marked */
    tu_small_fill(&s, 6);
    TU_OK(shs_manager_create(&m, &c, s.st));
    p = tu_prog(6);
    TU_OK(shs_manager_finish(m, &p));
    shs_manager_free(m);
    assert_int_equal(tu_count_prefixed(tu_step_dir(sp, 6), "checkpoint-opt-"), 0);
    meta = tu_read_file(tu_path(tu_step_dir(sp, 6), "metadata.json"), &len);
    assert_non_null(strstr(meta, "\"model_only\""));
    free(meta);
    assert_int_equal(tu_tracker_step(sp), 6);
    /* auto-resume lands on the full step 4, not the weights-only 6 */
    st3 l;
    tu_small_make(&l, 0, 1);
    shs_progress q = SHS_PROGRESS_INIT;
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    tu_cfg_saving(&c, sp);
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.step, 4);
    assert_int_equal(res.optimizer_loaded, 1);
    assert_non_null(strstr(res.message, "weights only"));
    assert3(&l, 4, 1);
    /* only weights-only steps: it loads them, without optimizer state */
    char *sp2 = tu_subpath("lsmo2");
    tu_cfg_saving(&c, sp2);
    c.last_save_model_only = 1;
    TU_OK(shs_manager_create(&m, &c, s.st));
    p = tu_prog(6);
    TU_OK(shs_manager_finish(m, &p));
    shs_manager_free(m);
    tu_cfg_saving(&c, sp2);
    for (int i = 0; i < 12; i++)
        l.wm[i] = -2;
    TU_OK(load_with(&c, &l, &q, &res));
    assert_int_equal(res.step, 6);
    assert_int_equal(res.optimizer_loaded, 0);
    assert_true(l.wm[0] == -2);
    load_with_done();
    shs_state_free(l.st);
    shs_state_free(s.st);
    free(sp);
    free(sp2);
}

/* Point 5: numbers from files and callers are checked. */
static void test_checked_numbers(void **state)
{
    (void)state;
    st3 s;
    tu_small_make(&s, 1, 1);
    char *sp = tu_subpath("cn");
    shs_config c;
    tu_cfg_saving(&c, sp);
    for (int async = 0; async <= 1; async++) {
        c.async_save = async;
        shs_manager *m;
        TU_OK(shs_manager_create(&m, &c, s.st));
        shs_progress p = tu_prog(3);
        p.loss_scale = INFINITY;
        assert_int_equal(shs_manager_save(m, &p, 0), SHS_EINVAL);
        TU_ASSERT_MSG_HAS("loss_scale");
        TU_ASSERT_MSG_HAS("inf");
        p.loss_scale = NAN;
        assert_int_equal(shs_manager_save(m, &p, 0), SHS_EINVAL);
        TU_ASSERT_MSG_HAS("nan");
        TU_OK(shs_manager_wait(m));
        shs_manager_free(m);
        assert_false(step_exists(sp, 3));
    }
    /* the batch-size rescale overflows: a clear error */
    char *sp2 = tu_subpath("cn_gbs");
    shs_progress p = tu_prog((int64_t)1 << 40);
    p.global_batch_size = (int64_t)1 << 30;
    p.consumed_samples = 0;
    TU_OK(tu_save_once(sp2, s.st, &p, 0));
    st3 l;
    tu_small_make(&l, 0, 1);
    cfg_loading(&c, sp2);
    shs_progress q = SHS_PROGRESS_INIT;
    q.global_batch_size = 64;
    assert_int_equal(load_with(&c, &l, &q, NULL), SHS_ERANGE);
    TU_ASSERT_MSG_HAS("overflows");
    load_with_done();
    shs_state_free(l.st);
    shs_state_free(s.st);
    free(sp);
    free(sp2);
}

/* ------------------------------------------------------------------ */
/* Async                                                              */
/* ------------------------------------------------------------------ */

static void load_step3(const char *sp, int64_t step, st3 *l, shs_progress *q)
{
    shs_config c;
    cfg_loading(&c, sp);
    c.load_step = step;
    *q = (shs_progress)SHS_PROGRESS_INIT;
    TU_OK(load_with(&c, l, q, NULL));
}

static void test_async(void **state)
{
    (void)state;
    char *sp = tu_subpath("async");
    st3 s;
    tu_small_make(&s, 1, 1);
    set_blobs(s.st, "a1");
    shs_config c;
    tu_cfg_saving(&c, sp);
    c.async_save = 1;
    c.save_interleaved_steps = 2;
    shs_manager *m;
    TU_OK(shs_manager_create(&m, &c, s.st));
    for (int64_t step = 1; step <= 8; step++) {
        tu_small_fill(&s, (float)step);
        shs_progress p = tu_prog(step);
        int saved;
        TU_OK(shs_manager_step(&saved, m, &p));
        assert_int_equal(saved, step % 2 == 0);
    }
    TU_OK(shs_manager_wait(m));
    /* every save committed, the last one tracked */
    assert_int_equal(tu_tracker_step(sp), 8);
    shs_save_stats stats = SHS_SAVE_STATS_INIT;
    TU_OK(shs_manager_last_save(&stats, m));
    assert_int_equal(stats.step, 8);
    for (int64_t step = 2; step <= 8; step += 2) {
        TU_OK(shs_checkpoint_verify(tu_path(sp, tu_step_name(step)), NULL, 0));
        st3 l;
        tu_small_make(&l, 0, 1);
        shs_progress q = SHS_PROGRESS_INIT;
        load_step3(sp, step, &l, &q);
        assert3(&l, (float)step, 1);
        assert_int_equal(q.global_step, step);
        load_with_done();
        shs_state_free(l.st);
    }

    /* the snapshot is taken before shs_manager_save returns */
    tu_small_fill(&s, 100);
    shs_progress p = tu_prog(100);
    TU_OK(shs_manager_save(m, &p, 0));
    tu_small_fill(&s, 666);
    set_blobs(s.st, "changed");
    TU_OK(shs_manager_wait(m));
    assert_int_equal(tu_tracker_step(sp), 100);
    st3 l;
    tu_small_make(&l, 0, 1);
    shs_progress q = SHS_PROGRESS_INIT;
    load_step3(sp, 100, &l, &q);
    assert3(&l, 100, 1);
    tu_assert_blob_str(l.st, "rng", "rng-a1");
    load_with_done();
    shs_state_free(l.st);

    /* deferred snapshot: fence, then modify */
    tu_small_fill(&s, 200);
    p = tu_prog(200);
    TU_OK(shs_manager_save(m, &p, SHS_SAVE_DEFER_SNAPSHOT));
    TU_OK(shs_manager_fence(m));
    tu_small_fill(&s, 777);
    TU_OK(shs_manager_wait(m));
    tu_small_make(&l, 0, 1);
    load_step3(sp, 200, &l, &q);
    assert3(&l, 200, 1);
    load_with_done();
    shs_state_free(l.st);

    /* finish saves the last step and waits */
    tu_small_fill(&s, 201);
    p = tu_prog(201);
    TU_OK(shs_manager_finish(m, &p));
    assert_int_equal(tu_tracker_step(sp), 201);
    shs_manager_free(m);
    tu_small_make(&l, 0, 1);
    load_step3(sp, -1, &l, &q);
    assert3(&l, 201, 1);
    assert_int_equal(q.global_step, 201);
    load_with_done();
    shs_state_free(l.st);
    assert_int_equal(tu_count_leftovers(sp), 0);

    /* freeing the manager with a save in flight completes it */
    TU_OK(shs_manager_create(&m, &c, s.st));
    tu_small_fill(&s, 300);
    p = tu_prog(300);
    TU_OK(shs_manager_save(m, &p, 0));
    shs_manager_free(m);
    assert_int_equal(tu_tracker_step(sp), 300);
    shs_state_free(s.st);
    free(sp);
}

/* load_worker_number > 1: the tensors are filled by several threads that
   share the opened files (also run under ThreadSanitizer, label threads). */
static void test_load_workers(void **state)
{
    (void)state;
    char *sp = tu_subpath("load_workers");
    save3(sp, 7, 7);
    for (int workers = 2; workers <= 8; workers *= 2) {
        st3 l;
        tu_small_make(&l, 0, 1);
        shs_config c;
        cfg_loading(&c, sp);
        c.load_worker_number = workers;
        shs_progress q = SHS_PROGRESS_INIT;
        q = (shs_progress)SHS_PROGRESS_INIT;
        shs_load_result res = SHS_LOAD_RESULT_INIT;
        TU_OK(load_with(&c, &l, &q, &res));
        assert_int_equal(res.loaded, 1);
        assert3(&l, 7, 1);
        assert_int_equal(q.global_step, 7);
        tu_assert_blob_str(l.st, "rng", "rng-saved");
        shs_state_free(l.st);
    }
    free(sp);
}

static long g_calls, g_fail_at;
static int g_errno;
static int count_fail(void)
{
    if (g_fail_at && __atomic_add_fetch(&g_calls, 1, __ATOMIC_SEQ_CST) == g_fail_at) {
        errno = g_errno;
        return 1;
    }
    return 0;
}
static int f_rename(const char *a, const char *b)
{
    return count_fail() ? -1 : shs__io_posix.rename(a, b);
}
static ssize_t f_pwrite(int fd, const void *b, size_t n, off_t o)
{
    return count_fail() ? -1 : shs__io_posix.pwrite(fd, b, n, o);
}

static void test_async_failure(void **state)
{
    (void)state;
    static shs__io_ops ops;
    ops = shs__io_posix;
    ops.rename = f_rename;
    ops.pwrite = f_pwrite;
    int where[2] = { 1, 3 }; /* the first write; a later call */
    for (int k = 0; k < 2; k++) {
        char name[32];
        snprintf(name, sizeof name, "async_fail%d", k);
        char *sp = tu_subpath(name);
        st3 s;
        tu_small_make(&s, 1, 1);
        shs_config c;
        tu_cfg_saving(&c, sp);
        c.async_save = 1;
        c.save_interleaved_steps = 5;
        shs_manager *m;
        TU_OK(shs_manager_create(&m, &c, s.st));
        shs_progress p = tu_prog(5);
        TU_OK(shs_manager_step(NULL, m, &p));
        TU_OK(shs_manager_wait(m));

        tu_small_fill(&s, 10);
        g_calls = 0;
        g_errno = EIO;
        g_fail_at = where[k];
        shs__io_set(&ops);
        p = tu_prog(10);
        int rc = shs_manager_step(NULL, m, &p);
        assert_int_equal(rc, SHS_OK); /* started */
        if (k == 0) {
            rc = shs_manager_wait(m);
        } else {
            /* reported by the next call once known */
            TU_OK(shs_manager_fence(m));
            while (__atomic_load_n(&g_calls, __ATOMIC_SEQ_CST) < g_fail_at)
                usleep(1000);
            usleep(20000);
            shs_progress p11 = tu_prog(11);
            rc = shs_manager_step(NULL, m, &p11);
            if (rc == SHS_OK)
                rc = shs_manager_wait(m);
        }
        shs__io_set(NULL);
        g_fail_at = 0;
        if (rc != SHS_EIO)
            fail_msg("async failure %d: got %d (%s)", k, rc, shs_last_error());
        TU_ASSERT_MSG_HAS("10");
        /* reported once */
        TU_OK(shs_manager_wait(m));
        assert_int_equal(tu_tracker_step(sp), 5);
        assert_false(step_exists(sp, 10));
        st3 l;
        tu_small_make(&l, 0, 1);
        shs_progress q = SHS_PROGRESS_INIT;
        load_step3(sp, -1, &l, &q);
        assert3(&l, 1, 1);
        assert_int_equal(q.global_step, 5);
        load_with_done();
        shs_state_free(l.st);
        /* the manager still works */
        p = tu_prog(15);
        TU_OK(shs_manager_step(NULL, m, &p));
        TU_OK(shs_manager_wait(m));
        assert_int_equal(tu_tracker_step(sp), 15);
        shs_manager_free(m);
        assert_int_equal(tu_count_leftovers(sp), 0);
        shs_state_free(s.st);
        free(sp);
    }
}

/* ------------------------------------------------------------------ */
/* Incremental                                                        */
/* ------------------------------------------------------------------ */

static void test_incremental(void **state)
{
    (void)state;
    char *sp = tu_subpath("incr");
    enum {
        NF = 90000,
        NT = 10000
    };
    float *frozen = malloc(NF * sizeof(float)), *trained = malloc(NT * sizeof(float));
    for (int i = 0; i < NF; i++)
        frozen[i] = (float)i * 0.001f;
    static const uint64_t sf[1] = { NF }, stt[1] = { NT };
    shs_state *st;
    TU_OK(shs_state_create(&st));
    tu_add_tensor(st, "base.frozen", SHS_KIND_MODEL, SHS_F32, 1, sf, frozen, NULL);
    tu_add_tensor(st, "lora.a", SHS_KIND_MODEL, SHS_F32, 1, stt, trained, NULL);
    shs_config c;
    tu_cfg_saving(&c, sp);
    c.incremental = 1;
    shs_manager *m;
    TU_OK(shs_manager_create(&m, &c, st));
    const int nsaves = 5;
    for (int k = 1; k <= nsaves; k++) {
        for (int i = 0; i < NT; i++)
            trained[i] = (float)k + (float)i;
        shs_progress p = tu_prog(k);
        TU_OK(shs_manager_save(m, &p, 0));
        shs_save_stats s = SHS_SAVE_STATS_INIT;
        TU_OK(shs_manager_last_save(&s, m));
        assert_int_equal(s.step, k);
        assert_int_equal(s.state_bytes, shs_state_nbytes(st));
        if (k >= 3) {
            if (s.bytes_written * 100 > s.state_bytes * 15)
                fail_msg("save %d wrote %llu of %llu bytes", k, (unsigned long long)s.bytes_written,
                         (unsigned long long)s.state_bytes);
            assert_true(s.bytes_linked > 0);
            assert_true(s.bytes_linked >= (uint64_t)NF * sizeof(float));
        }
    }
    shs_manager_free(m);
    /* delete every older step: the newest is self-contained */
    for (int k = 1; k < nsaves; k++)
        TU_OK(shs__remove_step(sp, k));
    assert_int_equal(tu_count_prefixed(sp, "iteration_"), 1);
    TU_OK(shs_checkpoint_verify(tu_path(sp, tu_step_name(nsaves)), NULL, 0));
    float *f2 = calloc(NF, sizeof(float)), *t2 = calloc(NT, sizeof(float));
    shs_state *st2;
    TU_OK(shs_state_create(&st2));
    tu_add_tensor(st2, "base.frozen", SHS_KIND_MODEL, SHS_F32, 1, sf, f2, NULL);
    tu_add_tensor(st2, "lora.a", SHS_KIND_MODEL, SHS_F32, 1, stt, t2, NULL);
    cfg_loading(&c, sp);
    TU_OK(shs_manager_create(&m, &c, st2));
    shs_progress q = SHS_PROGRESS_INIT;
    TU_OK(shs_manager_load(NULL, m, &q));
    shs_manager_free(m);
    assert_memory_equal(f2, frozen, NF * sizeof(float));
    assert_memory_equal(t2, trained, NT * sizeof(float));
    assert_int_equal(q.global_step, nsaves);

    /* changing the frozen tensor is noticed (not linked stale data) */
    tu_cfg_saving(&c, sp);
    c.incremental = 1;
    TU_OK(shs_manager_create(&m, &c, st));
    shs_progress p = tu_prog(10);
    TU_OK(shs_manager_save(m, &p, 0));
    frozen[7] = 12345.0f;
    p = tu_prog(11);
    TU_OK(shs_manager_save(m, &p, 0));
    p = tu_prog(12);
    frozen[8] = 54321.0f;
    TU_OK(shs_manager_save(m, &p, 0));
    shs_manager_free(m);
    cfg_loading(&c, sp);
    c.load_step = 11;
    TU_OK(shs_manager_create(&m, &c, st2));
    TU_OK(shs_manager_load(NULL, m, &q));
    shs_manager_free(m);
    assert_true(f2[7] == 12345.0f);
    assert_true(f2[8] == 8 * 0.001f);
    c.load_step = 12;
    TU_OK(shs_manager_create(&m, &c, st2));
    TU_OK(shs_manager_load(NULL, m, &q));
    shs_manager_free(m);
    assert_memory_equal(f2, frozen, NF * sizeof(float));
    shs_state_free(st2);
    shs_state_free(st);
    free(f2);
    free(t2);
    free(frozen);
    free(trained);
    free(sp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_interval),
        cmocka_unit_test(test_retention),
        cmocka_unit_test(test_resave_same_step),
        cmocka_unit_test(test_no_optim),
        cmocka_unit_test(test_exclude),
        cmocka_unit_test(test_batch_size_change),
        cmocka_unit_test(test_auto_resume),
        cmocka_unit_test(test_resume_order),
        cmocka_unit_test(test_enable_and_own_folder),
        cmocka_unit_test(test_resume_io_errors),
        cmocka_unit_test(test_resume_chmod),
        cmocka_unit_test(test_step_dir_never_plain),
        cmocka_unit_test(test_resume_recovery),
        cmocka_unit_test(test_retention_rules),
        cmocka_unit_test(test_last_save_model_only),
        cmocka_unit_test(test_checked_numbers),
        cmocka_unit_test(test_async),
        cmocka_unit_test(test_async_failure),
        cmocka_unit_test(test_load_workers),
        cmocka_unit_test(test_incremental),
    };
    return TU_RUN_GROUP(tests, tu_setup_root, tu_teardown_root);
}
