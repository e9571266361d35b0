/*
 * test_snapshot.c -- the snapshot of an async save: the copy-free one over
 * userfaultfd (snapshot.c) where this machine permits it, the staging copy
 * where it does not; either way the checkpoint holds the state as it was
 * when shs_manager_save returned, whatever the caller writes afterwards.
 *
 * The save is held at its first file-system call (the mkdir of its
 * temporary directory, through the io seam) while the "training thread"
 * writes into many pages of the state, some twice; then it goes on, and its
 * files must be byte for byte those of a synchronous save of the snapshot.
 * Runs under ThreadSanitizer too (label threads).
 */
#include "testutil.h"

#include "checkpoint/snapshot.h"
#include "store/io.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE 4096u

/* ---- holding the save at its first mkdir ---- */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_hold, g_held;
static shs__io_ops g_ops;

static const char *g_open_pattern; /* NULL: hold at the mkdir */

/* The io seam is installed once, before any manager thread runs; holds are
   armed and released under g_mu. */
static void hold_if(const char *path, int is_open)
{
    pthread_mutex_lock(&g_mu);
    const char *want = g_open_pattern ? g_open_pattern : "/.tmp-";
    if (g_hold && !g_held && !is_open == !g_open_pattern && strstr(path, want)) {
        g_held = 1;
        pthread_cond_broadcast(&g_cv);
        while (g_hold)
            pthread_cond_wait(&g_cv, &g_mu);
    }
    pthread_mutex_unlock(&g_mu);
}

static int hold_mkdir(const char *path, mode_t mode)
{
    hold_if(path, 0);
    return shs__io_posix.mkdir(path, mode);
}

static int hold_open(const char *path, int flags, mode_t mode)
{
    hold_if(path, 1);
    return shs__io_posix.open(path, flags, mode);
}

static void hold_setup(void)
{
    g_ops = shs__io_posix;
    g_ops.mkdir = hold_mkdir;
    g_ops.open = hold_open;
    shs__io_set(&g_ops);
}

/* Hold the next save at its mkdir (pattern NULL) or at the open of a file
   whose path holds `pattern`. */
static void hold_install_at(const char *pattern)
{
    pthread_mutex_lock(&g_mu);
    g_open_pattern = pattern;
    g_hold = 1;
    g_held = 0;
    pthread_mutex_unlock(&g_mu);
}

static void hold_install(void)
{
    hold_install_at(NULL);
}

static void hold_wait_held(void)
{
    pthread_mutex_lock(&g_mu);
    while (!g_held)
        pthread_cond_wait(&g_cv, &g_mu);
    pthread_mutex_unlock(&g_mu);
}

static void hold_release(void)
{
    pthread_mutex_lock(&g_mu);
    g_hold = 0;
    g_open_pattern = NULL;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

/* ---- the state ---- */

enum {
    NT = 5
};

typedef struct tstate {
    shs_state *st;
    unsigned char *data[NT];
    uint64_t nbytes[NT];
    int mapped[NT]; /* 1: anonymous mmap, 2: a shared file mapping */
    unsigned char *expect[NT];
} tstate;

static const char *const k_names[NT] = { "a.unaligned", "b.mapped", "c.small", "d.exp_avg",
                                         "e.filemap" };

/* a: 4 MiB + 100 (malloc: not page aligned), b: 8 MiB (mmap), c: 1000
   bytes (no whole page), d: 2 MiB + 8 optimizer state; e (file_backed
   only): 1 MiB in a shared file mapping, which userfaultfd cannot
   write-protect. */
static void make_state(tstate *s, int file_backed, const char *dir)
{
    memset(s, 0, sizeof *s);
    TU_OK(shs_state_create(&s->st));
    const uint64_t sizes[NT] = { (4u << 20) + 100, 8u << 20, 1000, (2u << 20) + 8, 1u << 20 };
    for (int i = 0; i < NT; i++) {
        if (i == NT - 1 && !file_backed)
            break;
        s->nbytes[i] = sizes[i];
        if (i == 1) {
            s->data[i] = mmap(NULL, sizes[i], PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                              -1, 0);
            assert_true(s->data[i] != MAP_FAILED);
            s->mapped[i] = 1;
        } else if (i == 4) {
            const char *p = tu_path(dir, "filemap.bin");
            int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
            assert_true(fd >= 0);
            assert_int_equal(ftruncate(fd, (off_t)sizes[i]), 0);
            s->data[i] = mmap(NULL, sizes[i], PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            close(fd);
            assert_true(s->data[i] != MAP_FAILED);
            s->mapped[i] = 2;
        } else {
            s->data[i] = malloc(sizes[i]);
            assert_non_null(s->data[i]);
        }
        s->expect[i] = malloc(sizes[i]);
        assert_non_null(s->expect[i]);
        uint64_t shape[1] = { sizes[i] };
        tu_add_tensor(s->st, k_names[i], i == 3 ? SHS_KIND_OPTIMIZER : SHS_KIND_MODEL, SHS_U8, 1,
                      shape, s->data[i], NULL);
    }
}

static void fill(tstate *s, unsigned seed)
{
    for (int i = 0; i < NT; i++)
        for (uint64_t k = 0; k < s->nbytes[i]; k++)
            s->data[i][k] = (unsigned char)((k * 131u + (uint64_t)i * 7u + seed) >> 3 ^ seed);
}

static void keep_expected(tstate *s)
{
    for (int i = 0; i < NT; i++)
        if (s->nbytes[i])
            memcpy(s->expect[i], s->data[i], s->nbytes[i]);
}

static void free_state(tstate *s)
{
    for (int i = 0; i < NT; i++) {
        if (s->mapped[i])
            munmap(s->data[i], s->nbytes[i]);
        else
            free(s->data[i]);
        free(s->expect[i]);
    }
    shs_state_free(s->st);
}

/* Pages written by the training step, to count the distinct whole ones. */
static uintptr_t g_pages[8192];
static size_t g_npages;

static void poke(tstate *s, int i, uint64_t off)
{
    unsigned char *p = s->data[i] + off;
    *p += 1;
    uintptr_t pg = (uintptr_t)p & ~(uintptr_t)(PAGE - 1);
    uintptr_t a = (uintptr_t)s->data[i], e = a + s->nbytes[i];
    /* a page wholly inside its tensor is write-protected; the others were
       copied when the snapshot was taken */
    if (pg >= a && pg + PAGE <= e && g_npages < sizeof g_pages / sizeof g_pages[0])
        g_pages[g_npages++] = pg;
}

static int cmp_uptr(const void *x, const void *y)
{
    uintptr_t a = *(const uintptr_t *)x, b = *(const uintptr_t *)y;
    return a < b ? -1 : a > b;
}

/* The training step: writes into every third page of each tensor (half of
   them twice) and at the tensors' very ends.  Returns the bytes of the
   distinct whole pages written: what a copy-free snapshot must copy. */
static uint64_t train_writes(tstate *s)
{
    g_npages = 0;
    for (int i = 0; i < NT; i++) {
        uint64_t n = s->nbytes[i];
        if (!n)
            continue;
        poke(s, i, 0);
        poke(s, i, n - 1);
        for (uint64_t off = 0, k = 0; off < n; off += PAGE, k++) {
            if (k % 3)
                continue;
            uint64_t at = off + 123 < n ? off + 123 : n - 1;
            poke(s, i, at);
            if (k % 2 == 0) /* again: the page is no longer protected */
                poke(s, i, at);
        }
    }
    qsort(g_pages, g_npages, sizeof *g_pages, cmp_uptr);
    uint64_t whole = 0;
    for (size_t k = 0; k < g_npages; k++)
        if (k == 0 || g_pages[k] != g_pages[k - 1])
            whole += PAGE;
    return whole;
}

/* Byte-compare the safetensors files of two step directories. */
static void assert_same_files(const char *got_dir, const char *want_dir)
{
    const char *files[] = { "checkpoint-model-0000000-0000001.safetensors",
                            "checkpoint-opt-0000000-0000001.safetensors" };
    for (size_t k = 0; k < 2; k++) {
        char *a = tu_path_dup(got_dir, files[k]), *b = tu_path_dup(want_dir, files[k]);
        size_t la = 0, lb = 0;
        unsigned char *da = tu_read_file(a, &la), *db = tu_read_file(b, &lb);
        assert_non_null(da);
        assert_non_null(db);
        assert_int_equal(la, lb);
        if (memcmp(da, db, la) != 0)
            fail_msg("%s differs from a synchronous save of the snapshot", a);
        free(da);
        free(db);
        free(a);
        free(b);
    }
}

/* A synchronous save of the expected bytes, as the reference. */
static void save_reference(tstate *s, const char *sp, int64_t step)
{
    shs_state *ref;
    TU_OK(shs_state_create(&ref));
    for (int i = 0; i < NT; i++) {
        if (!s->nbytes[i])
            continue;
        uint64_t shape[1] = { s->nbytes[i] };
        tu_add_tensor(ref, k_names[i], i == 3 ? SHS_KIND_OPTIMIZER : SHS_KIND_MODEL, SHS_U8, 1,
                      shape, s->expect[i], NULL);
    }
    shs_progress p = tu_prog(step);
    TU_OK(tu_save_once(sp, ref, &p, 0));
    shs_state_free(ref);
}

/* Does this machine let the library write-protect memory?  The test says
   which path it checks. */
static int copy_free_permitted(void)
{
    shs__snap *s = NULL;
    int rc = shs__snap_create(&s);
    if (rc < 0)
        print_message("copy-free snapshot not permitted here (%s): checking the copy fallback\n",
                      shs_last_error());
    shs__snap_free(s);
    shs__err_clear();
    return rc == SHS_OK;
}

/* One async save held at its start while the state is written; `want`
   the snapshot mode expected. */
static void held_save(const char *name, int file_backed, unsigned flags, int want)
{
    char *sp = tu_subdir(name);
    char *ref = tu_path_dup(sp, "ref");
    char *run = tu_path_dup(sp, "run");
    tstate s;
    make_state(&s, file_backed, sp);
    fill(&s, 1);
    shs_config c;
    tu_cfg_saving(&c, run);
    c.async_save = 1;
    shs_manager *m;
    TU_OK(shs_manager_create(&m, &c, s.st));
    for (int64_t step = 1; step <= 2; step++) {
        fill(&s, (unsigned)step * 17u);
        keep_expected(&s);
        hold_install();
        shs_progress p = tu_prog(step);
        TU_OK(shs_manager_save(m, &p, flags));
        if (flags & SHS_SAVE_DEFER_SNAPSHOT && want != SHS_SNAPSHOT_COPY_FREE)
            TU_OK(shs_manager_fence(m));
        if (want == SHS_SNAPSHOT_COPY_FREE)
            hold_wait_held(); /* the writer has read nothing yet */
        uint64_t whole = train_writes(&s);
        hold_release();
        TU_OK(shs_manager_wait(m));
        shs_save_stats st = SHS_SAVE_STATS_INIT;
        TU_OK(shs_manager_last_save(&st, m));
        assert_int_equal(st.snapshot_mode, want);
        if (want == SHS_SNAPSHOT_COPY_FREE) {
            /* exactly the whole pages written, each once */
            assert_int_equal(st.snapshot_copied_bytes, whole);
            assert_true(st.snapshot_extra_bytes >= whole);
            assert_true(st.snapshot_extra_bytes < whole + (1u << 20));
            assert_int_equal(st.staging_bytes, 0);
        } else {
            assert_int_equal(st.snapshot_copied_bytes, 0);
            assert_true(st.staging_bytes >= shs_state_nbytes(s.st));
        }
        save_reference(&s, ref, step);
        TU_OK(shs_checkpoint_verify(tu_step_dir(run, step), NULL, 0));
        char *want_dir = tu_path_dup(ref, tu_step_name(step));
        assert_same_files(tu_step_dir(run, step), want_dir);
        free(want_dir);
        /* the caller's writes went through */
        assert_true(memcmp(s.data[1], s.expect[1], s.nbytes[1]) != 0);
    }
    shs_manager_free(m);
    free_state(&s);
    free(ref);
    free(run);
    free(sp);
}

static void test_writes_during_save(void **state)
{
    (void)state;
    int cf = copy_free_permitted();
    held_save("held", 0, 0, cf ? SHS_SNAPSHOT_COPY_FREE : SHS_SNAPSHOT_COPY);
}

static void test_writes_during_deferred_save(void **state)
{
    (void)state;
    int cf = copy_free_permitted();
    held_save("held_defer", 0, SHS_SAVE_DEFER_SNAPSHOT,
              cf ? SHS_SNAPSHOT_COPY_FREE : SHS_SNAPSHOT_DEFERRED);
}

/* SHS_ASYNC_SNAPSHOT=copy: the staging copy, allocated at create. */
static void test_forced_copy(void **state)
{
    (void)state;
    setenv("SHS_ASYNC_SNAPSHOT", "copy", 1);
    held_save("forced_copy", 0, 0, SHS_SNAPSHOT_COPY);
    unsetenv("SHS_ASYNC_SNAPSHOT");
}

/* Memory userfaultfd cannot protect (a shared file mapping): the copy. */
static void test_unprotectable_memory(void **state)
{
    (void)state;
    held_save("filemap", 1, 0, SHS_SNAPSHOT_COPY);
}

/* Out of memory for a page written during the save: the save fails,
   nothing of it is committed, the caller's write still goes through. */
static int g_fail_pages;
static void *page_failing_malloc(void *ctx, size_t n)
{
    (void)ctx;
    if (n == PAGE && __atomic_load_n(&g_fail_pages, __ATOMIC_SEQ_CST))
        return NULL;
    return malloc(n);
}
static void *plain_realloc(void *ctx, void *p, size_t n)
{
    (void)ctx;
    return realloc(p, n);
}
static void plain_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static void test_copy_oom(void **state)
{
    (void)state;
    if (!copy_free_permitted())
        return;
    char *sp = tu_subdir("copy_oom");
    tstate s;
    make_state(&s, 0, sp);
    fill(&s, 5);
    shs_config c;
    tu_cfg_saving(&c, sp);
    c.async_save = 1;
    shs_allocator a = { page_failing_malloc, plain_realloc, plain_free, NULL };
    shs_set_allocator(&a);
    shs_manager *m;
    TU_OK(shs_manager_create(&m, &c, s.st));
    shs_progress p = tu_prog(1);
    TU_OK(shs_manager_save(m, &p, 0));
    TU_OK(shs_manager_wait(m));
    hold_install();
    p = tu_prog(2);
    TU_OK(shs_manager_save(m, &p, 0));
    hold_wait_held();
    /* while the writer is held, the fault handler is the only thread that
       allocates: its page copy fails */
    __atomic_store_n(&g_fail_pages, 1, __ATOMIC_SEQ_CST);
    s.data[1][PAGE * 5] = 42;
    __atomic_store_n(&g_fail_pages, 0, __ATOMIC_SEQ_CST);
    hold_release();
    int rc = shs_manager_wait(m);
    assert_int_equal(rc, SHS_ENOMEM);
    TU_ASSERT_MSG_HAS("written during the save");
    assert_int_equal(s.data[1][PAGE * 5], 42);
    assert_int_equal(tu_tracker_step(sp), 1);
    assert_int_equal(tu_path_exists(tu_step_dir(sp, 2)), 0);
    shs_manager_free(m);
    shs_set_allocator(NULL);
    free_state(&s);
    free(sp);
}

/* Once the writer has passed a tensor, its pages are released: held at
   the optimizer file (the model's is written), writes into the model cost
   no copy, writes into the optimizer state do. */
static void test_release_after_write(void **state)
{
    (void)state;
    if (!copy_free_permitted())
        return;
    char *sp = tu_subdir("release");
    char *ref = tu_path_dup(sp, "ref");
    char *run = tu_path_dup(sp, "run");
    tstate s;
    make_state(&s, 0, sp);
    fill(&s, 3);
    keep_expected(&s);
    shs_config c;
    tu_cfg_saving(&c, run);
    c.async_save = 1;
    shs_manager *m;
    TU_OK(shs_manager_create(&m, &c, s.st));
    hold_install_at("checkpoint-opt-");
    shs_progress p = tu_prog(1);
    TU_OK(shs_manager_save(m, &p, 0));
    hold_wait_held();
    uint64_t whole = train_writes(&s);
    /* the optimizer tensor's share of it */
    uint64_t opt_pages = 0;
    for (size_t k = 0; k < g_npages; k++)
        if ((k == 0 || g_pages[k] != g_pages[k - 1]) && g_pages[k] >= (uintptr_t)s.data[3] &&
            g_pages[k] < (uintptr_t)s.data[3] + s.nbytes[3])
            opt_pages += PAGE;
    hold_release();
    TU_OK(shs_manager_wait(m));
    shs_save_stats st = SHS_SAVE_STATS_INIT;
    TU_OK(shs_manager_last_save(&st, m));
    assert_int_equal(st.snapshot_mode, SHS_SNAPSHOT_COPY_FREE);
    assert_true(opt_pages > 0 && opt_pages < whole);
    assert_int_equal(st.snapshot_copied_bytes, opt_pages);
    save_reference(&s, ref, 1);
    char *want_dir = tu_path_dup(ref, tu_step_name(1));
    assert_same_files(tu_step_dir(run, 1), want_dir);
    shs_manager_free(m);
    free_state(&s);
    free(want_dir);
    free(ref);
    free(run);
    free(sp);
}

/* SHS_SAVE_IF_DUE: the interval rule of shs_manager_step with the save's
   flags; 1 when a save started. */
static void test_if_due(void **state)
{
    (void)state;
    char *sp = tu_subdir("if_due");
    tstate s;
    make_state(&s, 0, sp);
    shs_config c;
    tu_cfg_saving(&c, sp);
    c.async_save = 1;
    c.save_interleaved_steps = 2;
    shs_manager *m;
    TU_OK(shs_manager_create(&m, &c, s.st));
    for (int64_t step = 1; step <= 4; step++) {
        fill(&s, (unsigned)step);
        keep_expected(&s);
        shs_progress p = tu_prog(step);
        int rc = shs_manager_save(m, &p, SHS_SAVE_IF_DUE | SHS_SAVE_DEFER_SNAPSHOT);
        assert_int_equal(rc, step % 2 == 0);
        TU_OK(shs_manager_fence(m));
        fill(&s, 99);
        TU_OK(shs_manager_wait(m));
        assert_int_equal(tu_tracker_step(sp), step < 2 ? -1 : step & ~(int64_t)1);
    }
    char *ref = tu_path_dup(sp, "ref");
    save_reference(&s, ref, 4);
    char *want_dir = tu_path_dup(ref, tu_step_name(4));
    assert_same_files(tu_step_dir(sp, 4), want_dir);
    /* a progress of a wrong version is still refused */
    shs_progress bad = tu_prog(6);
    bad.version = 99;
    assert_int_equal(shs_manager_save(m, &bad, SHS_SAVE_IF_DUE), SHS_EINVAL);
    assert_int_equal(shs_manager_save(m, NULL, SHS_SAVE_IF_DUE), SHS_EINVAL);
    shs_manager_free(m);
    free_state(&s);
    free(want_dir);
    free(ref);
    free(sp);
}

int main(void)
{
    hold_setup();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writes_during_save),
        cmocka_unit_test(test_writes_during_deferred_save),
        cmocka_unit_test(test_forced_copy),
        cmocka_unit_test(test_unprotectable_memory),
        cmocka_unit_test(test_copy_oom),
        cmocka_unit_test(test_release_after_write),
        cmocka_unit_test(test_if_due),
    };
    return TU_RUN_GROUP(tests, tu_setup_root, tu_teardown_root);
}
