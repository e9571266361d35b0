/* test_trust.c -- crash safety without RENAME_EXCHANGE, links inside a
 * step never followed, the tracker's error, the save-path entry kinds, the
 * lock held by the deleting entry points, and sweeps failing the N-th io
 * call and the N-th allocation over save, load, verify, list and cleanup.
 */
#include "testutil.h"

#include "store/io.h"
#include "threadcomm.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* helpers                                                            */
/* ------------------------------------------------------------------ */

static void save_step(const char *sp, int64_t step, float base)
{
    tu_small s;
    tu_small_make(&s, base, 1);
    shs_progress p = tu_prog(step);
    TU_OK(tu_save_once(sp, s.st, &p, 1));
    shs_state_free(s.st);
}

/* Load the save path's tracked step (a fresh manager: it cleans first).
   Returns the status; *step and *w0 get the loaded step and w[0]. */
static int load_sp(const char *sp, int64_t *step, float *w0)
{
    tu_small s;
    tu_small_make(&s, -1000.0f, 1);
    shs_config c;
    tu_cfg_saving(&c, sp);
    shs_manager *m = NULL;
    shs_progress p = tu_prog(0);
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    int rc = shs_manager_create(&m, &c, s.st);
    if (rc == SHS_OK)
        rc = shs_manager_load(&res, m, &p);
    if (rc == SHS_OK && !res.loaded)
        rc = SHS_ENOCHECKPOINT;
    *step = res.step;
    *w0 = s.w[0];
    shs_manager_free(m);
    shs_state_free(s.st);
    return rc;
}

static int count_prefix(const char *dir, const char *prefix)
{
    return tu_count_prefixed(dir, prefix);
}

/* ------------------------------------------------------------------ */
/* a test io layer: exchange fails with EINVAL; once "dead", every call  */
/* fails with EIO (the process lives on, its disk is gone)               */
/* ------------------------------------------------------------------ */

static struct {
    int dead;
    int die_after_displace; /* die right after target -> .replaced- */
    long calls, fail_at;    /* fail_at > 0: the N-th call fails (EIO) */
    char failed_op[16];
} g;

static shs__io_ops g_ops;

static int gate(const char *op)
{
    if (g.dead) {
        errno = EIO;
        return -1;
    }
    if (g.fail_at > 0 && ++g.calls == g.fail_at) {
        snprintf(g.failed_op, sizeof g.failed_op, "%s", op);
        errno = EIO;
        return -1;
    }
    return 0;
}

static int t_open(const char *p, int f, mode_t m)
{
    return gate("open") ? -1 : shs__io_posix.open(p, f, m);
}
static ssize_t t_pread(int fd, void *b, size_t n, off_t o)
{
    return gate("pread") ? -1 : shs__io_posix.pread(fd, b, n, o);
}
static ssize_t t_pwrite(int fd, const void *b, size_t n, off_t o)
{
    return gate("pwrite") ? -1 : shs__io_posix.pwrite(fd, b, n, o);
}
static int t_fsync(int fd)
{
    return gate("fsync") ? -1 : shs__io_posix.fsync(fd);
}
static int t_ftruncate(int fd, off_t l)
{
    return gate("ftruncate") ? -1 : shs__io_posix.ftruncate(fd, l);
}
static int t_fstat(int fd, struct stat *s)
{
    return gate("fstat") ? -1 : shs__io_posix.fstat(fd, s);
}
static int t_unlink(const char *p)
{
    return gate("unlink") ? -1 : shs__io_posix.unlink(p);
}
static int t_mkdir(const char *p, mode_t m)
{
    return gate("mkdir") ? -1 : shs__io_posix.mkdir(p, m);
}
static int t_rmdir(const char *p)
{
    return gate("rmdir") ? -1 : shs__io_posix.rmdir(p);
}
static int t_link(const char *a, const char *b)
{
    return gate("link") ? -1 : shs__io_posix.link(a, b);
}
static void *t_mmap(int fd, size_t n)
{
    return gate("mmap") ? NULL : shs__io_posix.mmap(fd, n);
}
static int t_reserve(int fd, uint64_t n)
{
    return gate("reserve") ? -1 : shs__io_posix.reserve(fd, n);
}
static int t_stat(const char *p, struct stat *s)
{
    return gate("stat") ? -1 : shs__io_posix.stat(p, s);
}
static int t_lstat(const char *p, struct stat *s)
{
    return gate("lstat") ? -1 : shs__io_posix.lstat(p, s);
}
static int t_list_dir(const char *p, char ***n, size_t *k)
{
    return gate("list_dir") ? -1 : shs__io_posix.list_dir(p, n, k);
}
static int t_lock(int fd, int t)
{
    return gate("lock") ? -1 : shs__io_posix.lock(fd, t);
}

static int t_exchange(const char *a, const char *b)
{
    (void)a;
    (void)b;
    if (gate("exchange"))
        return -1;
    errno = EINVAL; /* NFS, Lustre, CIFS */
    return -1;
}

static int t_rename(const char *a, const char *b)
{
    if (gate("rename"))
        return -1;
    int r = shs__io_posix.rename(a, b);
    const char *base = strrchr(b, '/');
    if (r == 0 && g.die_after_displace && base && strncmp(base + 1, ".replaced-", 10) == 0)
        g.dead = 1;
    return r;
}

static void ops_install(void)
{
    g_ops = shs__io_posix;
    g_ops.open = t_open;
    g_ops.pread = t_pread;
    g_ops.pwrite = t_pwrite;
    g_ops.fsync = t_fsync;
    g_ops.ftruncate = t_ftruncate;
    g_ops.fstat = t_fstat;
    g_ops.rename = t_rename;
    g_ops.unlink = t_unlink;
    g_ops.mkdir = t_mkdir;
    g_ops.rmdir = t_rmdir;
    g_ops.link = t_link;
    g_ops.mmap = t_mmap;
    g_ops.reserve = t_reserve;
    g_ops.exchange = t_exchange;
    g_ops.stat = t_stat;
    g_ops.lstat = t_lstat;
    g_ops.list_dir = t_list_dir;
    g_ops.lock = t_lock;
    shs__io_set(&g_ops);
}

static void ops_reset(void)
{
    shs__io_set(NULL);
    memset(&g, 0, sizeof g);
}

/* ------------------------------------------------------------------ */
/* point 7: two renames                                                */
/* ------------------------------------------------------------------ */

/* A re-save "crashes" right after the old step was renamed away: the
   next cleanup must put it back, and it must load. */
static void test_two_renames_crash_restores(void **state)
{
    (void)state;
    char *sp = tu_subdir("tworen");
    save_step(sp, 1, 1.0f);
    save_step(sp, 2, 2.0f);

    tu_small s;
    tu_small_make(&s, 3.0f, 1);
    shs_progress p = tu_prog(2);
    g.die_after_displace = 1;
    ops_install();
    int rc = tu_save_once(sp, s.st, &p, 1);
    int died = g.dead;
    ops_reset();
    shs_state_free(s.st);
    assert_true(died);
    assert_int_not_equal(rc, SHS_OK);
    /* the state the crash left: the step has no name, the old copy is
       parked, the new one is a .tmp- */
    assert_false(tu_path_exists(tu_step_dir(sp, 2)));
    assert_int_equal(count_prefix(sp, ".replaced-iteration_00000002-"), 1);
    assert_int_equal(tu_tracker_step(sp), 2);

    TU_OK(shs_checkpoint_clean(sp));
    assert_true(tu_path_exists(tu_step_dir(sp, 2)));
    assert_int_equal(tu_count_leftovers(sp), 0);
    TU_OK(shs_checkpoint_verify(tu_step_dir(sp, 2), NULL, 0));
    int64_t step = -1;
    float w0 = 0;
    TU_OK(load_sp(sp, &step, &w0));
    assert_int_equal(step, 2);
    assert_true(w0 == 2.0f);
    tu_rmtree(sp);
    free(sp);
}

/* The same through a manager's create (the next start), and the re-save
   without a crash takes the two-rename path and leaves nothing behind. */
static void test_two_renames_manager(void **state)
{
    (void)state;
    char *sp = tu_subdir("tworen2");
    save_step(sp, 5, 5.0f);
    tu_small s;
    tu_small_make(&s, 6.0f, 1);
    shs_progress p = tu_prog(5);
    ops_install();
    TU_OK(tu_save_once(sp, s.st, &p, 1));
    ops_reset();
    assert_int_equal(tu_count_leftovers(sp), 0);
    int64_t step = -1;
    float w0 = 0;
    TU_OK(load_sp(sp, &step, &w0));
    assert_true(step == 5 && w0 == 6.0f);

    g.die_after_displace = 1;
    ops_install();
    tu_small_fill(&s, 7.0f);
    assert_int_not_equal(tu_save_once(sp, s.st, &p, 1), SHS_OK);
    ops_reset();
    shs_state_free(s.st);
    assert_false(tu_path_exists(tu_step_dir(sp, 5)));
    TU_OK(load_sp(sp, &step, &w0)); /* its create cleans and restores */
    assert_true(step == 5 && w0 == 6.0f);
    assert_int_equal(tu_count_leftovers(sp), 0);
    tu_rmtree(sp);
    free(sp);
}

static void copy_tree(const char *from, const char *to)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", from, to);
    assert_int_equal(system(cmd), 0);
}

/* A .replaced- whose step exists is garbage; an incomplete one is never
   restored; a name that is not ours is never touched. */
static void test_replaced_garbage(void **state)
{
    (void)state;
    char *sp = tu_subdir("replgarbage");
    save_step(sp, 3, 3.0f);
    const char *dup = tu_path(sp, ".replaced-iteration_00000003-0123456789abcdef");
    copy_tree(tu_step_dir(sp, 3), dup);
    const char *half = tu_path(sp, ".replaced-iteration_00000009-0123456789abcdef");
    assert_int_equal(mkdir(half, 0755), 0);
    assert_int_equal(tu_write_file(tu_path(half, "metadata.json"), "{}", 2), 0);
    const char *odd = tu_path(sp, ".replaced-notastep");
    assert_int_equal(mkdir(odd, 0755), 0);
    const char *mine = tu_path(sp, "notes.txt");
    assert_int_equal(tu_write_file(mine, "x", 1), 0);
    TU_OK(shs_checkpoint_clean(sp));
    assert_int_equal(tu_count_leftovers(sp), 0);
    assert_false(tu_path_exists(tu_step_dir(sp, 9)));
    assert_true(tu_path_exists(mine));
    int64_t step = -1;
    float w0 = 0;
    TU_OK(load_sp(sp, &step, &w0));
    assert_true(step == 3 && w0 == 3.0f);
    tu_rmtree(sp);
    free(sp);
}

/* ------------------------------------------------------------------ */
/* point 7: no symlink following inside a step                        */
/* ------------------------------------------------------------------ */

/* Move `name` of step dir out of the save path and link it back. */
static void linkify(const char *dir, const char *name, const char *outside)
{
    char *from = tu_path_dup(dir, name);
    assert_int_equal(rename(from, outside), 0);
    assert_int_equal(symlink(outside, from), 0);
    free(from);
}

static const char *first_safetensors(const char *dir)
{
    static char name[512];
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -m1 'model.*safetensors'", dir);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    assert_non_null(fgets(name, sizeof name, f));
    pclose(f);
    name[strcspn(name, "\n")] = 0;
    return name;
}

static void test_symlinks_refused(void **state)
{
    (void)state;
    const char *which[3] = { "metadata.json", "common.json", NULL };
    for (int k = 0; k < 3; k++) {
        char *sp = tu_subdir(k == 0 ? "lnk0" : k == 1 ? "lnk1" : "lnk2");
        char *outside = tu_subpath(k == 0 ? "lnk0.out" : k == 1 ? "lnk1.out" : "lnk2.out");
        save_step(sp, 1, 1.0f);
        const char *dir = tu_step_dir(sp, 1);
        const char *name = which[k] ? which[k] : first_safetensors(dir);
        char keep[512];
        snprintf(keep, sizeof keep, "%s", name);
        linkify(dir, keep, outside);
        int64_t step;
        float w0;
        int rc = load_sp(sp, &step, &w0);
        if (rc == SHS_OK)
            fail_msg("%s as a symlink: the load followed it", keep);
        TU_ASSERT_MSG_HAS("symbolic link");
        if (k != 1) { /* verify reads metadata.json and the data files */
            assert_int_not_equal(shs_checkpoint_verify(tu_step_dir(sp, 1), NULL, 0), SHS_OK);
            TU_ASSERT_MSG_HAS("symbolic link");
        }
        unlink(outside);
        tu_rmtree(sp);
        free(sp);
        free(outside);
    }
}

static void test_tracker_symlink_and_content(void **state)
{
    (void)state;
    char *sp = tu_subdir("trk");
    char *outside = tu_subpath("trk.secret");
    save_step(sp, 1, 1.0f);
    int64_t step;
    /* malformed: the message gives its length, never its bytes */
    const char *tp = tu_path(sp, TU_TRACKER);
    assert_int_equal(tu_write_file(tp, "SECRET-TOKEN", 12), 0);
    assert_int_equal(shs_checkpoint_read_tracker(&step, sp), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("not a decimal step");
    TU_ASSERT_MSG_HAS("12 bytes");
    assert_null(strstr(shs_last_error(), "SECRET"));
    /* a link: refused, whatever it points at */
    assert_int_equal(tu_write_file(outside, "1", 1), 0);
    assert_int_equal(unlink(tp), 0);
    assert_int_equal(symlink(outside, tp), 0);
    assert_int_not_equal(shs_checkpoint_read_tracker(&step, sp), SHS_OK);
    TU_ASSERT_MSG_HAS("symbolic link");
    float w0;
    assert_int_not_equal(load_sp(sp, &step, &w0), SHS_OK);
    unlink(outside);
    tu_rmtree(sp);
    free(sp);
    free(outside);
}

/* ------------------------------------------------------------------ */
/* entry kinds, step names, the lock of remove/clean                  */
/* ------------------------------------------------------------------ */

static void test_entry_kinds(void **state)
{
    (void)state;
    assert_int_equal(shs_savepath_entry_kind("iteration_00000007"), SHS_ENTRY_STEP);
    assert_int_equal(shs_savepath_entry_kind("step-7"), SHS_ENTRY_STEP);
    assert_int_equal(shs_savepath_entry_kind(".tmp-iteration_00000007-ab"), SHS_ENTRY_LEFTOVER);
    assert_int_equal(shs_savepath_entry_kind(".trash-x"), SHS_ENTRY_LEFTOVER);
    assert_int_equal(shs_savepath_entry_kind(".replaced-iteration_00000007-0123456789abcdef"),
                     SHS_ENTRY_LEFTOVER);
    assert_int_equal(shs_savepath_entry_kind(TU_TRACKER ".tmp.0123"), SHS_ENTRY_LEFTOVER);
    assert_int_equal(shs_savepath_entry_kind(TU_TRACKER), SHS_ENTRY_TRACKER);
    assert_int_equal(shs_savepath_entry_kind(SHS_SAVEPATH_LOCK_NAME), SHS_ENTRY_LOCK);
    assert_int_equal(shs_savepath_entry_kind("iteration_7x"), SHS_ENTRY_OTHER);
    /* only the names a save writes: the loader looks no other up */
    assert_int_equal(shs_savepath_entry_kind("iteration_7"), SHS_ENTRY_OTHER);
    assert_int_equal(shs_savepath_entry_kind("step-07"), SHS_ENTRY_OTHER);
    assert_int_equal(shs_checkpoint_step_of_name("iteration_123456789"), 123456789);
    assert_int_equal(shs_checkpoint_step_of_name("iteration_0123456789"), -1);
    assert_int_equal(shs_checkpoint_step_of_name("step-0"), 0);
    /* the one file name rule */
    assert_null(shs_file_name_problem("model-00001-of-00002.safetensors"));
    assert_string_equal(shs_file_name_problem(""), "is empty");
    assert_string_equal(shs_file_name_problem("/etc/passwd"), "is an absolute path");
    assert_string_equal(shs_file_name_problem("../x"), "escapes the folder ('..')");
    assert_string_equal(shs_file_name_problem("sub/x"),
                        "is a path, not a file name in the same folder");
    assert_string_equal(shs_file_name_problem("a\\b"), "contains a backslash");
    assert_string_equal(shs_file_name_problem("a\tb"), "contains a control character");
    assert_string_equal(shs_file_name_problem(".hidden"), "starts with '.' (a hidden name)");
    char longname[300];
    memset(longname, 'a', 256);
    longname[256] = '\0';
    assert_string_equal(shs_file_name_problem(longname), "is longer than 255 bytes");
    longname[255] = '\0';
    assert_null(shs_file_name_problem(longname));
    assert_int_equal(shs_savepath_entry_kind("README"), SHS_ENTRY_OTHER);
    assert_int_equal(shs_savepath_entry_kind(NULL), SHS_ENTRY_OTHER);
    char b[40];
    assert_int_equal(shs_checkpoint_step_dir_name(b, sizeof b, 42, 0), 18);
    assert_string_equal(b, "iteration_00000042");
    shs_checkpoint_step_dir_name(b, sizeof b, 42, 1);
    assert_string_equal(b, "step-42");
    assert_int_equal(shs_checkpoint_step_dir_name(b, sizeof b, -1, 0), -1);
}

static void test_remove_clean_take_lock(void **state)
{
    (void)state;
    char *sp = tu_subdir("lockrc");
    save_step(sp, 1, 1.0f);
    save_step(sp, 2, 2.0f);
    tu_small s;
    tu_small_make(&s, 0, 1);
    shs_config c;
    tu_cfg_saving(&c, sp);
    shs_manager *m = NULL;
    TU_OK(shs_manager_create(&m, &c, s.st));
    /* a trainer holds the save path: nothing deletes under it */
    assert_int_equal(shs_checkpoint_remove(sp, 1), SHS_ELOCKED);
    TU_ASSERT_MSG_HAS("locked by pid");
    assert_int_equal(shs_checkpoint_clean(sp), SHS_ELOCKED);
    assert_true(tu_path_exists(tu_step_dir(sp, 1)));
    shs_manager_free(m);
    shs_state_free(s.st);
    /* a tool holding the lock itself works under it */
    shs_lock *lk = NULL;
    TU_OK(shs_savepath_lock(&lk, sp));
    TU_OK(shs_checkpoint_remove(sp, 1));
    TU_OK(shs_checkpoint_clean(sp));
    assert_false(tu_path_exists(tu_step_dir(sp, 1)));
    shs_lock_free(lk);
    /* and without any holder, they take and release it */
    TU_OK(shs_checkpoint_clean(sp));
    lk = NULL;
    TU_OK(shs_savepath_lock(&lk, sp));
    shs_lock_free(lk);
    /* no save path at all: nothing to do */
    TU_OK(shs_checkpoint_clean(tu_path(sp, "nope")));
    TU_OK(shs_checkpoint_remove(tu_path(sp, "nope"), 3));
    tu_rmtree(sp);
    free(sp);
}

/* ------------------------------------------------------------------ */
/* point 17: the N-th io call fails, over load, verify, list, clean    */
/* ------------------------------------------------------------------ */

enum {
    OP_LOAD,
    OP_VERIFY,
    OP_LIST,
    OP_CLEAN,
    OP_RESOLVE,
    OP_SAVE,
    OP_N
};
static const char *const k_op[OP_N] = { "load", "verify", "list", "clean", "resolve", "save" };

static int run_op(int op, const char *sp)
{
    int64_t step, steps[8];
    size_t n;
    float w0;
    char out[4096];
    switch (op) {
    case OP_LOAD: return load_sp(sp, &step, &w0);
    case OP_VERIFY: return shs_checkpoint_verify(tu_step_dir(sp, 2), NULL, 0);
    case OP_LIST: return shs_checkpoint_list(steps, 8, &n, sp);
    case OP_CLEAN: return shs_checkpoint_clean(sp);
    case OP_RESOLVE: return shs_checkpoint_resolve(out, sizeof out, sp, -1);
    default: {
        tu_small s;
        tu_small_make(&s, 9.0f, 1);
        shs_progress p = tu_prog(3);
        int rc = tu_save_once(sp, s.st, &p, 1);
        shs_state_free(s.st);
        return rc;
    }
    }
}

static void test_io_sweep(void **state)
{
    (void)state;
    for (int op = 0; op < OP_N; op++) {
        long n, failures = 0;
        for (n = 1;; n++) {
            char *sp = tu_subdir("iosweep");
            save_step(sp, 1, 1.0f);
            save_step(sp, 2, 2.0f);
            /* leftovers for clean to work on */
            assert_int_equal(mkdir(tu_path(sp, ".tmp-iteration_00000003-x"), 0755), 0);
            g.fail_at = n;
            ops_install();
            g.fail_at = n;
            int rc = run_op(op, sp);
            int hit = g.calls >= n;
            char failed[16];
            snprintf(failed, sizeof failed, "%s", g.failed_op);
            ops_reset();
            if (!hit) {
                if (rc != SHS_OK)
                    fail_msg("%s: no injected fault, yet: %s", k_op[op], shs_last_error());
                tu_rmtree(sp);
                free(sp);
                break;
            }
            /* mmap has a pread fallback, link (incremental) writes the
               data instead; anything else fails the read paths */
            int fallback = strcmp(failed, "mmap") == 0 || strcmp(failed, "link") == 0 ||
                           strcmp(failed, "reserve") == 0;
            if (rc == SHS_OK && !fallback && op != OP_SAVE && op != OP_LOAD && op != OP_CLEAN) {
                fail_msg("%s: N=%ld (%s) failed, but it reported success", k_op[op], n, failed);
            }
            if (rc != SHS_OK) {
                failures++;
                if (!*shs_last_error())
                    fail_msg("%s: N=%ld (%s): empty error message", k_op[op], n, failed);
                if (rc == SHS_ENOCHECKPOINT || strstr(shs_last_error(), "nothing to resume"))
                    fail_msg("%s: N=%ld (%s): EIO reported as no checkpoint: %s", k_op[op], n,
                             failed, shs_last_error());
            }
            /* reopen: nothing committed was lost */
            int64_t step = -1;
            float w0 = 0;
            if (load_sp(sp, &step, &w0) != SHS_OK)
                fail_msg("%s: N=%ld (%s): the save path no longer loads: %s", k_op[op], n, failed,
                         shs_last_error());
            int ok = (step == 2 && w0 == 2.0f) || (op == OP_SAVE && step == 3 && w0 == 9.0f);
            if (!ok)
                fail_msg("%s: N=%ld (%s): loaded step %lld w0 %g", k_op[op], n, failed,
                         (long long)step, (double)w0);
            tu_rmtree(sp);
            free(sp);
        }
        printf("io sweep: %-8s %3ld io calls, each failed once: %ld errors\n", k_op[op], n - 1,
               failures);
        assert_true(n > 1);
    }
}

/* ------------------------------------------------------------------ */
/* point 19: the N-th allocation fails, over save, load, the manager   */
/* ------------------------------------------------------------------ */

enum {
    AS_SAVE,
    AS_LOAD,
    AS_LIFECYCLE,
    AS_N
};
static const char *const k_as[AS_N] = { "save", "load", "manager lifecycle" };

static int alloc_op(int op, const char *sp, tu_small *s)
{
    shs_config c;
    tu_cfg_saving(&c, sp);
    c.fsync = 1;
    shs_manager *m = NULL;
    shs_progress p = tu_prog(3);
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    int rc = shs_manager_create(&m, &c, s->st);
    if (rc < 0)
        return rc;
    if (op == AS_SAVE || op == AS_LIFECYCLE)
        rc = shs_manager_save(m, &p, 0);
    if (rc == SHS_OK && (op == AS_SAVE || op == AS_LIFECYCLE))
        rc = shs_manager_wait(m);
    if (rc == SHS_OK && (op == AS_LOAD || op == AS_LIFECYCLE)) {
        shs_progress q = tu_prog(0);
        rc = shs_manager_load(&res, m, &q);
    }
    shs_manager_free(m);
    return rc;
}

typedef struct sweep_ctx {
    int op;
    char *sp;
    tu_small s;
} sweep_ctx;

static void sweep_before(void *arg)
{
    sweep_ctx *x = arg;
    x->sp = tu_subdir("allocsweep");
    save_step(x->sp, 2, 2.0f);
    tu_small_make(&x->s, 9.0f, 1);
}

static int sweep_run(void *arg)
{
    sweep_ctx *x = arg;
    return alloc_op(x->op, x->sp, &x->s);
}

/* whatever failed, the save path still loads: step 2, or step 3 saved */
static void sweep_after(void *arg, int rc)
{
    sweep_ctx *x = arg;
    int64_t step = -1;
    float w0 = 0;
    (void)rc;
    shs_state_free(x->s.st);
    if (load_sp(x->sp, &step, &w0) != SHS_OK)
        fail_msg("%s: the save path no longer loads: %s", k_as[x->op], shs_last_error());
    if (!((step == 2 && w0 == 2.0f) || (step == 3 && w0 == 9.0f)))
        fail_msg("%s: loaded step %lld w0 %g", k_as[x->op], (long long)step, (double)w0);
    tu_rmtree(x->sp);
    free(x->sp);
}

static void test_alloc_sweep(void **state)
{
    (void)state;
    for (int op = 0; op < AS_N; op++) {
        sweep_ctx x = { .op = op };
        tu_sweep sw = { k_as[op], sweep_run, sweep_before, sweep_after, &x };
        assert_true(tu_failalloc_sweep(&sw) > 0);
    }
}

/* jansson's allocations (the metadata trees a save builds) go through the
   hook too: the sweep above then also fails inside json_* calls. */
static void test_alloc_json_through_hook(void **state)
{
    (void)state;
    tu_failalloc_install();
    tu_failalloc_arm(1000000);
    json_t *o = json_pack("{s:i, s:s}", "step", 3, "name", "a longer string value");
    long made = tu_failalloc_count(), live = tu_failalloc_live();
    assert_non_null(o);
    json_decref(o);
    long live_after = tu_failalloc_live();
    tu_failalloc_arm(1); /* the first allocation fails: json_object() too */
    json_t *none = json_object();
    tu_failalloc_arm(0);
    tu_failalloc_uninstall();
    assert_true(made > 0);
    assert_true(live > 0);
    assert_int_equal(live_after, 0);
    assert_null(none);

    /* a save builds its metadata with jansson: count the allocations a
       save makes, then those left when json_object() is made to fail */
    char *sp = tu_subdir("allocjson");
    tu_small s;
    tu_small_make(&s, 9.0f, 1);
    tu_failalloc_install();
    tu_failalloc_arm(1000000);
    TU_OK(alloc_op(AS_SAVE, sp, &s));
    long with_json = tu_failalloc_count();
    tu_failalloc_arm(0);
    assert_int_equal(tu_failalloc_live(), 0);
    tu_failalloc_uninstall();
    print_message("a save makes %ld allocations through the hook\n", with_json);
    assert_true(with_json > 0);
    shs_state_free(s.st);
    tu_rmtree(sp);
    free(sp);
}

/* ------------------------------------------------------------------ */
/* point 8: two ranks as threads; allocations fail on rank 1 only     */
/* ------------------------------------------------------------------ */

typedef struct tc_rank {
    tcomm tc; /* threadcomm.h */
    int rc;
    char msg[512];
    long count;
} tc_rank;

static _Thread_local int t_armed_rank1;
static _Thread_local long t_count;
static long g_rank_fail_at;

static void *ra_malloc(void *ctx, size_t n)
{
    (void)ctx;
    if (t_armed_rank1 && g_rank_fail_at && ++t_count == g_rank_fail_at)
        return NULL;
    return malloc(n);
}
static void *ra_realloc(void *ctx, void *p, size_t n)
{
    (void)ctx;
    if (t_armed_rank1 && g_rank_fail_at && ++t_count == g_rank_fail_at)
        return NULL;
    return realloc(p, n);
}
static void ra_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static const char *g_rank_sp;
static int g_rank_async; /* async_save: the staging buffers and thread too */

static void *rank_main(void *arg)
{
    tc_rank *r = arg;
    shs_comm *comm = NULL;
    tu_small s;
    tu_small_make(&s, 9.0f, 1);
    if (shs_comm_create(&comm, r->tc.rank, 2, &k_tops, &r->tc) != SHS_OK)
        abort();
    t_count = 0;
    t_armed_rank1 = r->tc.rank == 1;
    shs_config c;
    tu_cfg_saving(&c, g_rank_sp);
    c.async_save = g_rank_async;
    shs_manager *m = NULL;
    shs_progress p = tu_prog(3);
    int rc = shs_manager_create_comm(&m, &c, s.st, comm);
    if (rc == SHS_OK)
        rc = shs_manager_save(m, &p, 0);
    if (rc == SHS_OK)
        rc = shs_manager_wait(m);
    if (rc == SHS_OK) {
        shs_progress q = tu_prog(0);
        shs_load_result res = SHS_LOAD_RESULT_INIT;
        rc = shs_manager_load(&res, m, &q);
    }
    r->rc = rc;
    snprintf(r->msg, sizeof r->msg, "%s", rc ? shs_last_error() : "");
    shs_manager_free(m);
    r->count = t_count;
    t_armed_rank1 = 0;
    shs_comm_free(comm);
    shs_state_free(s.st);
    return NULL;
}

static void collectives_local_oom(int async)
{
    long n, failures = 0;
    g_rank_async = async;
    alarm(300); /* a deadlock fails the test instead of hanging it */
    for (n = 1;; n++) {
        char *sp = tu_subdir("ranks");
        g_rank_sp = sp;
        tshared sh;
        tshared_init(&sh, 2, 0);
        tc_rank r[2];
        memset(r, 0, sizeof r);
        pthread_t th[2];
        shs_allocator a = { ra_malloc, ra_realloc, ra_free, NULL };
        shs_set_allocator(&a);
        g_rank_fail_at = n;
        for (int i = 0; i < 2; i++) {
            r[i].tc = (tcomm){ &sh, i };
            assert_int_equal(pthread_create(&th[i], NULL, rank_main, &r[i]), 0);
        }
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        g_rank_fail_at = 0;
        shs_set_allocator(NULL);
        tshared_destroy(&sh);
        int hit = r[1].count >= n;
        tu_rmtree(sp);
        free(sp);
        if (!hit) {
            if (r[0].rc || r[1].rc)
                fail_msg("no failure injected, yet: %s / %s", r[0].msg, r[1].msg);
            break;
        }
        if (r[1].rc != SHS_OK) {
            failures++;
            /* rank 0 hears it, naming rank 1 */
            if (r[0].rc == SHS_OK || !strstr(r[0].msg, "rank 1"))
                fail_msg("N=%ld: rank 1 failed (%s) but rank 0 got %d '%s'", n, r[1].msg, r[0].rc,
                         r[0].msg);
        }
    }
    alarm(0);
    printf("ranks (%s): %ld allocations of rank 1 failed one at a time: %ld errors, no hang\n",
           async ? "async_save" : "sync", n - 1, failures);
    assert_true(n > 1);
}

static void test_collectives_local_oom(void **state)
{
    (void)state;
    collectives_local_oom(0);
    collectives_local_oom(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_renames_crash_restores),
        cmocka_unit_test(test_two_renames_manager),
        cmocka_unit_test(test_replaced_garbage),
        cmocka_unit_test(test_symlinks_refused),
        cmocka_unit_test(test_tracker_symlink_and_content),
        cmocka_unit_test(test_entry_kinds),
        cmocka_unit_test(test_remove_clean_take_lock),
        cmocka_unit_test(test_io_sweep),
        cmocka_unit_test(test_alloc_sweep),
        cmocka_unit_test(test_alloc_json_through_hook),
        cmocka_unit_test(test_collectives_local_oom),
    };
    return TU_RUN_GROUP(tests, tu_setup_root, tu_teardown_root);
}
