/* test_lock.c -- one writer per save path: the manager's lock on its save
 * path, the public lock API for tools, and their error paths. */
#include "testutil.h"

#include "store/io.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char *lock_file_of(const char *sp)
{
    return tu_path_dup(sp, SHS_SAVEPATH_LOCK_NAME);
}

static int create_saving(shs_manager **m, const char *sp, shs_state *st)
{
    shs_config c;
    tu_cfg_saving(&c, sp);
    return shs_manager_create(m, &c, st);
}

static void test_status_text(void **state)
{
    (void)state;
    assert_int_equal(SHS_ELOCKED, -55);
    assert_string_equal(shs_strerror(SHS_ELOCKED), "save path is locked by another writer");
}

/* A second manager of the same process is refused, naming the holder;
   the first one's free releases the lock and keeps the file. */
static void test_second_manager_same_process(void **state)
{
    (void)state;
    char *sp = tu_subpath("same_process"); /* created by the manager */
    tu_small s;
    tu_small_make(&s, 1, 1);
    shs_manager *m1 = NULL, *m2 = NULL;
    TU_OK(create_saving(&m1, sp, s.st));
    char *lf = lock_file_of(sp);
    assert_true(tu_path_exists(lf));

    assert_int_equal(create_saving(&m2, sp, s.st), SHS_ELOCKED);
    assert_null(m2);
    char want[128], host[256];
    snprintf(want, sizeof want, "is locked by pid %lld on host ", (long long)getpid());
    TU_ASSERT_MSG_HAS(want);
    TU_ASSERT_MSG_HAS(sp);
    TU_ASSERT_MSG_HAS("another job writes there");
    assert_int_equal(gethostname(host, sizeof host), 0);
    host[sizeof host - 1] = '\0';
    TU_ASSERT_MSG_HAS(host);
    TU_ASSERT_MSG_HAS(" since 20");

    /* the holder as tools see it */
    shs_lock_holder h;
    TU_OK(shs_savepath_lock_holder(&h, sp));
    assert_int_equal(h.held, 1);
    assert_int_equal(h.pid, (int64_t)getpid());
    assert_string_equal(h.host, host);
    assert_int_equal(strlen(h.since), 20); /* 2026-03-01T12:00:00Z */
    assert_int_equal(h.since[10], 'T');
    assert_int_equal(h.since[19], 'Z');
    assert_non_null(strstr(h.text, "since 20"));

    /* a tool cannot take it either */
    shs_lock *lk = NULL;
    assert_int_equal(shs_savepath_lock(&lk, sp), SHS_ELOCKED);
    assert_null(lk);
    TU_ASSERT_MSG_HAS(want);

    shs_manager_free(m1);
    assert_true(tu_path_exists(lf)); /* never deleted */
    TU_OK(shs_savepath_lock_holder(&h, sp));
    assert_int_equal(h.held, 0);
    TU_OK(create_saving(&m2, sp, s.st));
    shs_manager_free(m2);
    shs_state_free(s.st);
    free(lf);
    free(sp);
}

/* A tool's lock (prune) keeps a trainer out, and the other way round. */
static void test_tool_lock(void **state)
{
    (void)state;
    char *sp = tu_subdir("tool");
    tu_small s;
    tu_small_make(&s, 1, 1);
    shs_lock *lk = NULL;
    TU_OK(shs_savepath_lock(&lk, sp));
    assert_non_null(lk);
    shs_manager *m = NULL;
    assert_int_equal(create_saving(&m, sp, s.st), SHS_ELOCKED);
    shs_lock *lk2 = NULL;
    assert_int_equal(shs_savepath_lock(&lk2, sp), SHS_ELOCKED);
    shs_lock_free(lk);
    shs_lock_free(NULL);
    TU_OK(create_saving(&m, sp, s.st));
    shs_manager_free(m);
    TU_OK(shs_savepath_lock(&lk, sp));
    shs_lock_free(lk);
    shs_state_free(s.st);
    free(sp);
}

/* Leftovers are cleaned only under the lock: a refused manager must not
   delete the save in progress of the job that holds it. */
static void test_refused_manager_cleans_nothing(void **state)
{
    (void)state;
    char *sp = tu_subdir("inflight");
    tu_small s;
    tu_small_make(&s, 1, 1);
    shs_manager *m1 = NULL, *m2 = NULL;
    TU_OK(create_saving(&m1, sp, s.st));
    char *inflight = tu_path_dup(sp, ".tmp-iteration_00000007-0123456789abcdef");
    assert_int_equal(mkdir(inflight, 0755), 0);
    assert_int_equal(create_saving(&m2, sp, s.st), SHS_ELOCKED);
    assert_true(tu_path_exists(inflight));
    shs_manager_free(m1);
    /* the next manager that gets the lock cleans it */
    TU_OK(create_saving(&m2, sp, s.st));
    assert_false(tu_path_exists(inflight));
    shs_manager_free(m2);
    shs_state_free(s.st);
    free(inflight);
    free(sp);
}

/* Managers that do not save take no lock. */
static void test_no_lock_without_saving(void **state)
{
    (void)state;
    char *sp = tu_subdir("readers");
    tu_small s;
    tu_small_make(&s, 1, 1);
    shs_config c;
    tu_cfg_saving(&c, sp);
    c.load_only = 1;
    shs_manager *a = NULL, *b = NULL;
    TU_OK(shs_manager_create(&a, &c, s.st));
    TU_OK(shs_manager_create(&b, &c, s.st));
    c.load_only = 0;
    c.enable_save = 0;
    shs_manager *d = NULL;
    TU_OK(shs_manager_create(&d, &c, s.st));
    char *lf = lock_file_of(sp);
    assert_false(tu_path_exists(lf));
    /* and they do not keep a saving manager out */
    shs_manager *w = NULL;
    TU_OK(create_saving(&w, sp, s.st));
    shs_manager_free(w);
    shs_manager_free(a);
    shs_manager_free(b);
    shs_manager_free(d);
    shs_state_free(s.st);
    free(lf);
    free(sp);
}

/* A forked child holds the lock: the parent is refused, naming the child;
   once the child is killed with SIGKILL the kernel has released it. */
static void test_child_holds_then_killed(void **state)
{
    (void)state;
    char *sp = tu_subdir("child");
    tu_small s;
    tu_small_make(&s, 1, 1);
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        shs_lock *lk = NULL;
        char ok = shs_savepath_lock(&lk, sp) == SHS_OK ? 'y' : 'n';
        if (write(pfd[1], &ok, 1) != 1)
            _exit(2);
        for (;;)
            pause();
    }
    close(pfd[1]);
    char ok = 0;
    assert_int_equal(read(pfd[0], &ok, 1), 1);
    close(pfd[0]);
    assert_int_equal(ok, 'y');

    shs_manager *m = NULL;
    int rc = create_saving(&m, sp, s.st);
    char want[64];
    snprintf(want, sizeof want, "locked by pid %lld on host", (long long)pid);
    int named = strstr(shs_last_error(), want) != NULL;
    shs_lock_holder h;
    int hrc = shs_savepath_lock_holder(&h, sp);
    kill(pid, SIGKILL);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_int_equal(rc, SHS_ELOCKED);
    assert_true(named);
    TU_OK(hrc);
    assert_int_equal(h.held, 1);
    assert_int_equal(h.pid, (int64_t)pid);

    /* the dead child's details remain, but nobody holds the lock */
    TU_OK(shs_savepath_lock_holder(&h, sp));
    assert_int_equal(h.held, 0);
    assert_int_equal(h.pid, (int64_t)pid);
    TU_OK(create_saving(&m, sp, s.st));
    TU_OK(shs_savepath_lock_holder(&h, sp));
    assert_int_equal(h.held, 1);
    assert_int_equal(h.pid, (int64_t)getpid());
    shs_manager_free(m);
    shs_state_free(s.st);
    free(sp);
}

/* A stale lock file (content, no lock) is taken over and rewritten;
   nothing of the old holder's (longer) details remains. */
static void test_stale_lock_file_taken_over(void **state)
{
    (void)state;
    char *sp = tu_subdir("stale");
    char *lf = lock_file_of(sp);
    const char *stale = "pid 4000000\nhost a-very-long-host-name-of-a-dead-job.example.org\n"
                        "since 2001-01-01T00:00:00Z\n";
    assert_int_equal(tu_write_file(lf, stale, strlen(stale)), 0);
    shs_lock_holder h;
    TU_OK(shs_savepath_lock_holder(&h, sp));
    assert_int_equal(h.held, 0);
    assert_int_equal(h.pid, 4000000);
    assert_string_equal(h.host, "a-very-long-host-name-of-a-dead-job.example.org");
    assert_string_equal(h.since, "2001-01-01T00:00:00Z");

    tu_small s;
    tu_small_make(&s, 1, 1);
    shs_manager *m = NULL;
    TU_OK(create_saving(&m, sp, s.st));
    size_t len = 0;
    char *text = tu_read_file(lf, &len);
    assert_non_null(text);
    char want[64];
    snprintf(want, sizeof want, "pid %lld\nhost ", (long long)getpid());
    assert_true(strncmp(text, want, strlen(want)) == 0);
    assert_null(strstr(text, "dead-job"));
    assert_null(strstr(text, "2001"));
    free(text);
    shs_manager_free(m);
    shs_state_free(s.st);
    free(lf);
    free(sp);
}

/* Hostile or empty lock files: clear text, never a crash. */
static void test_hostile_lock_file(void **state)
{
    (void)state;
    char *sp = tu_subdir("hostile");
    char *lf = lock_file_of(sp);
    shs_lock_holder h;

    char big[5000];
    memset(big, 'x', sizeof big);
    static const char head[] = "pid 12x\nhost \033[31mevil\x01\nsince ";
    memcpy(big, head, sizeof head - 1);
    assert_int_equal(tu_write_file(lf, big, sizeof big), 0);
    TU_OK(shs_savepath_lock_holder(&h, sp));
    assert_int_equal(h.pid, -1);             /* not a number */
    assert_string_equal(h.host, "[31mevil"); /* control bytes dropped */
    assert_true(strlen(h.since) < sizeof h.since);
    for (const char *p = h.text; *p; p++)
        assert_true(*p >= 0x20 && *p < 0x7f);

    assert_int_equal(tu_write_file(lf, "", 0), 0);
    TU_OK(shs_savepath_lock_holder(&h, sp));
    assert_int_equal(h.pid, -1);
    assert_non_null(strstr(h.text, "unknown"));

    /* held with empty details (a holder that has not written them yet) */
    int fd = open(lf, O_RDWR);
    assert_true(fd >= 0);
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    assert_int_equal(fcntl(fd, F_OFD_SETLK, &fl), 0);
    shs_lock *lk = NULL;
    assert_int_equal(shs_savepath_lock(&lk, sp), SHS_ELOCKED);
    TU_ASSERT_MSG_HAS("locked by an unknown process");
    close(fd);
    TU_OK(shs_savepath_lock(&lk, sp));
    shs_lock_free(lk);
    free(lf);
    free(sp);
}

static void test_bad_paths(void **state)
{
    (void)state;
    shs_lock *lk = (shs_lock *)1;
    char *missing = tu_subpath("missing");
    assert_int_equal(shs_savepath_lock(&lk, missing), SHS_ENOENT);
    assert_null(lk);
    TU_ASSERT_MSG_HAS("does not exist");
    shs_lock_holder h;
    TU_OK(shs_savepath_lock_holder(&h, missing));
    assert_int_equal(h.held, 0);
    assert_int_equal(shs_savepath_lock(NULL, missing), SHS_EINVAL);
    assert_int_equal(shs_savepath_lock(&lk, ""), SHS_EINVAL);
    assert_int_equal(shs_savepath_lock_holder(NULL, missing), SHS_EINVAL);

    /* a save path that is a file */
    char *file = tu_subpath("afile");
    assert_int_equal(tu_write_file(file, "x", 1), 0);
    assert_int_equal(shs_savepath_lock(&lk, file), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("not a directory");

    /* the lock file a symbolic link: never followed (it could point at
       anything the trainer may write) */
    char *sp = tu_subdir("symlinked");
    char *lf = lock_file_of(sp);
    char *target = tu_subpath("symlink_target");
    assert_int_equal(symlink(target, lf), 0);
    assert_int_equal(shs_savepath_lock(&lk, sp), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("symbolic link");
    assert_false(tu_path_exists(target));
    tu_small s;
    tu_small_make(&s, 1, 1);
    shs_manager *m = NULL;
    assert_int_equal(create_saving(&m, sp, s.st), SHS_EINVAL);
    assert_int_equal(shs_savepath_lock_holder(&h, sp), SHS_EINVAL);

    /* the lock file a directory */
    char *sp2 = tu_subdir("dirlock");
    char *lf2 = lock_file_of(sp2);
    assert_int_equal(mkdir(lf2, 0755), 0);
    assert_int_equal(shs_savepath_lock(&lk, sp2), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("not a regular file");
    assert_int_equal(shs_savepath_lock_holder(&h, sp2), SHS_EINVAL);

    shs_state_free(s.st);
    free(missing);
    free(file);
    free(sp);
    free(lf);
    free(target);
    free(sp2);
    free(lf2);
}

/* ---- faults through the io seam ---- */

static int g_lock_errno, g_fail_pwrite;

static int f_lock(int fd, int test_only)
{
    if (g_lock_errno) {
        errno = g_lock_errno;
        return -1;
    }
    return shs__io_posix.lock(fd, test_only);
}

static ssize_t f_pwrite(int fd, const void *b, size_t n, off_t o)
{
    if (g_fail_pwrite) {
        errno = ENOSPC;
        return -1;
    }
    return shs__io_posix.pwrite(fd, b, n, o);
}

static void install_faults(void)
{
    static shs__io_ops ops;
    ops = shs__io_posix;
    ops.lock = f_lock;
    ops.pwrite = f_pwrite;
    shs__io_set(&ops);
}

/* A file system without locks (NFSv3 without lockd, Lustre without
   -o flock): a clear refusal, not an unprotected run. */
static void test_no_lock_support(void **state)
{
    (void)state;
    char *sp = tu_subdir("nolocks");
    tu_small s;
    tu_small_make(&s, 1, 1);
    install_faults();
    g_lock_errno = ENOLCK;
    shs_manager *m = NULL;
    int rc = create_saving(&m, sp, s.st);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", shs_last_error());
    shs_lock_holder h;
    int hrc = shs_savepath_lock_holder(&h, sp);
    g_lock_errno = EIO;
    shs_lock *lk = NULL;
    int rc_eio = shs_savepath_lock(&lk, sp);
    g_lock_errno = 0;
    shs__io_set(NULL);
    assert_int_equal(rc, SHS_EUNSUPPORTED);
    assert_null(m);
    assert_non_null(strstr(msg, "does not support locks"));
    assert_non_null(strstr(msg, SHS_SAVEPATH_LOCK_NAME));
    assert_int_equal(hrc, SHS_EUNSUPPORTED);
    assert_int_equal(rc_eio, SHS_EIO);
    assert_null(lk);
    /* nothing stays locked after the failures */
    TU_OK(shs_savepath_lock(&lk, sp));
    shs_lock_free(lk);
    shs_state_free(s.st);
    free(sp);
}

/* Writing the holder's details fails (disk full): the lock is not kept. */
static void test_details_write_fails(void **state)
{
    (void)state;
    char *sp = tu_subdir("fullfs");
    install_faults();
    g_fail_pwrite = 1;
    shs_lock *lk = NULL;
    int rc = shs_savepath_lock(&lk, sp);
    g_fail_pwrite = 0;
    shs__io_set(NULL);
    assert_int_equal(rc, SHS_ENOSPC);
    assert_null(lk);
    TU_OK(shs_savepath_lock(&lk, sp));
    shs_lock_free(lk);
    free(sp);
}

/* Out of memory at every allocation of a lock: an error, no leak. */
static void test_lock_oom(void **state)
{
    (void)state;
    char *sp = tu_subdir("oom");
    tu_failalloc_install();
    for (long n = 1; n < 20; n++) {
        tu_failalloc_arm(n);
        shs_lock *lk = NULL;
        int rc = shs_savepath_lock(&lk, sp);
        shs_lock_free(lk);
        tu_failalloc_arm(0);
        assert_true(rc == SHS_OK || rc == SHS_ENOMEM);
        assert_int_equal(tu_failalloc_live(), 0);
        if (rc == SHS_OK)
            break;
    }
    tu_failalloc_uninstall();
    free(sp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_text),
        cmocka_unit_test(test_second_manager_same_process),
        cmocka_unit_test(test_tool_lock),
        cmocka_unit_test(test_refused_manager_cleans_nothing),
        cmocka_unit_test(test_no_lock_without_saving),
        cmocka_unit_test(test_child_holds_then_killed),
        cmocka_unit_test(test_stale_lock_file_taken_over),
        cmocka_unit_test(test_hostile_lock_file),
        cmocka_unit_test(test_bad_paths),
        cmocka_unit_test(test_no_lock_support),
        cmocka_unit_test(test_details_write_fails),
        cmocka_unit_test(test_lock_oom),
    };
    return TU_RUN_GROUP(tests, tu_setup_root, tu_teardown_root);
}
