/* test_version.c -- the library's version (shs_version, shs_version_number,
 * the header's SHS_VERSION_*) and the option-struct version check
 * (shs__check_opts_version, src/common/opts.c).
 */
#include "testutil.h"
#include "common/opts.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_version_number(void **state)
{
    (void)state;
    assert_int_equal(shs_version_number(), SHS_VERSION_NUMBER);
    assert_int_equal(SHS_VERSION_NUMBER,
                     SHS_VERSION_MAJOR * 10000 + SHS_VERSION_MINOR * 100 + SHS_VERSION_PATCH);
    /* the string and the number tell the same version */
    char want[32];
    snprintf(want, sizeof want, "%u.%u.%u", shs_version_number() / 10000,
             shs_version_number() / 100 % 100, shs_version_number() % 100);
    assert_string_equal(shs_version(), want);
    assert_string_equal(SHS_VERSION_STRING, want);
    /* every part fits its two decimal digits, so the number orders versions */
    assert_true(SHS_VERSION_MINOR < 100 && SHS_VERSION_PATCH < 100);
}

static void test_opts_version_accepted(void **state)
{
    (void)state;
    /* every version from 1 up to the library's own */
    shs_checkpoint_open_opts o = SHS_CHECKPOINT_OPEN_OPTS_INIT;
    for (unsigned v = 1; v <= SHS_CHECKPOINT_OPEN_OPTS_VERSION; v++) {
        o.version = v;
        assert_int_equal(shs__check_version(&o, SHS__V_CHECKPOINT_OPEN_OPTS, "shs_test"), SHS_OK);
    }
    /* the size read of version 1 ends before the key of version 2 */
    o.version = 1;
    assert_int_equal(shs__version_size(&o, SHS__V_CHECKPOINT_OPEN_OPTS),
                     offsetof(shs_checkpoint_open_opts, key));
    o.version = 2;
    assert_int_equal(shs__version_size(&o, SHS__V_CHECKPOINT_OPEN_OPTS), sizeof o);
}

static void test_opts_version_newer(void **state)
{
    (void)state;
    shs_open_opts o = SHS_OPEN_OPTS_INIT;
    o.version = 3;
    assert_int_equal(shs__check_version(&o, SHS__V_OPEN_OPTS, "shs_file_open"), SHS_EINVAL);
    assert_string_equal(shs_last_error(), "shs_file_open: shs_open_opts version 3 (this library "
                                          "knows 1 to 1): initialise it with SHS_OPEN_OPTS_INIT");
    o.version = ~0u;
    assert_int_equal(shs__check_version(&o, SHS__V_OPEN_OPTS, "shs_writer_create"), SHS_EINVAL);
    assert_non_null(
        strstr(shs_last_error(), "shs_writer_create: shs_open_opts version 4294967295"));
    assert_int_equal(shs__version_size(&o, SHS__V_OPEN_OPTS), 0);
}

static void test_opts_version_zero(void **state)
{
    (void)state;
    shs_open_opts o = SHS_OPEN_OPTS_INIT;
    o.version = 0;
    assert_int_equal(shs__check_version(&o, SHS__V_OPEN_OPTS, "shs_file_open"), SHS_EINVAL);
    assert_non_null(strstr(shs_last_error(), "shs_file_open: shs_open_opts version 0"));
    assert_non_null(strstr(shs_last_error(), "_INIT"));
}

/* ---- the public functions that take a versioned struct ---------------- */

/* A small valid file in a fresh directory; returns the directory. */
static char *make_file(const char **path)
{
    char *dir = tu_mkdtemp();
    assert_non_null(dir);
    *path = tu_path(dir, "a.safetensors");
    shs_writer *w = NULL;
    TU_OK(shs_writer_create(&w, *path, NULL));
    uint32_t v = 7;
    uint64_t shape[1] = { 1 };
    TU_OK(shs_writer_add_tensor(w, "t", SHS_U32, 1, shape));
    TU_OK(shs_writer_write(w, "t", &v, sizeof v));
    TU_OK(shs_writer_commit(w));
    shs_writer_free(w);
    return dir;
}

static size_t dir_entries(const char *dir)
{
    size_t n = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static void test_file_open_version(void **state)
{
    (void)state;
    const char *path;
    char *dir = make_file(&path);
    shs_file *f = (shs_file *)&f; /* must be reset to NULL */
    shs_open_opts o = SHS_OPEN_OPTS_INIT;
    o.version = SHS_OPEN_OPTS_VERSION + 1;
    assert_int_equal(shs_file_open(&f, path, &o), SHS_EINVAL);
    assert_null(f);
    TU_ASSERT_MSG_HAS("shs_file_open: shs_open_opts version 2 (this library knows 1 to 1)");
    o.version = 0;
    assert_int_equal(shs_file_open(&f, path, &o), SHS_EINVAL);
    assert_null(f);
    TU_ASSERT_MSG_HAS("shs_file_open: shs_open_opts version 0");
    /* version 1 is read: its flag is honoured */
    o.version = 1;
    o.flags = SHS_OPEN_NO_MMAP;
    TU_OK(shs_file_open(&f, path, &o));
    assert_null(shs_file_tensor_data(f, 0)); /* not mapped */
    shs_file_free(f);
    tu_rmtree(dir);
    free(dir);
}

static void test_writer_create_version(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp();
    const char *path = tu_path(dir, "w.safetensors");
    shs_writer *w = (shs_writer *)&w;
    shs_writer_opts o = SHS_WRITER_OPTS_INIT;
    o.version = SHS_WRITER_OPTS_VERSION + 1;
    assert_int_equal(shs_writer_create(&w, path, &o), SHS_EINVAL);
    assert_null(w);
    TU_ASSERT_MSG_HAS("shs_writer_create: shs_writer_opts version 2 (this library knows 1 to 1)");
    o.version = 0;
    assert_int_equal(shs_writer_create(&w, path, &o), SHS_EINVAL);
    assert_null(w);
    TU_ASSERT_MSG_HAS("shs_writer_create: shs_writer_opts version 0");
    assert_int_equal(dir_entries(dir), 0); /* not even a temporary file */
    /* version 1: its fields are read (align) */
    o.version = 1;
    o.align = 4096;
    TU_OK(shs_writer_create(&w, path, &o));
    TU_OK(shs_writer_commit(w));
    shs_writer_free(w);
    shs_file *f = NULL;
    TU_OK(shs_file_open(&f, path, NULL));
    assert_int_equal(shs_file_data_start(f) % 4096, 0);
    shs_file_free(f);
    tu_rmtree(dir);
    free(dir);
}

static int g_destroyed;
static int nop_barrier(void *ctx)
{
    (void)ctx;
    return SHS_OK;
}
static int nop_bcast(void *ctx, void *b, size_t n, int root)
{
    (void)ctx;
    (void)b;
    (void)n;
    (void)root;
    return SHS_OK;
}
static int nop_allgather(void *ctx, const void *s, size_t n, void *r)
{
    (void)ctx;
    (void)s;
    (void)n;
    (void)r;
    return SHS_OK;
}
static int nop_gatherv(void *ctx, const void *s, const size_t *l, void *r, int root)
{
    (void)ctx;
    (void)s;
    (void)l;
    (void)r;
    (void)root;
    return SHS_OK;
}
static int nop_send(void *ctx, const void *b, size_t n, int d, int t)
{
    (void)ctx;
    (void)b;
    (void)n;
    (void)d;
    (void)t;
    return SHS_OK;
}
static int nop_recv(void *ctx, void *b, size_t n, int s, int t)
{
    (void)ctx;
    (void)b;
    (void)n;
    (void)s;
    (void)t;
    return SHS_OK;
}
static void count_destroy(void *ctx)
{
    (void)ctx;
    g_destroyed++;
}

static void test_comm_create_version(void **state)
{
    (void)state;
    shs_comm_ops ops = { SHS_COMM_OPS_VERSION + 1,
                         nop_barrier,
                         nop_bcast,
                         nop_allgather,
                         nop_gatherv,
                         nop_send,
                         nop_recv,
                         count_destroy };
    shs_comm *c = (shs_comm *)&c;
    g_destroyed = 0;
    assert_int_equal(shs_comm_create(&c, 0, 2, &ops, NULL), SHS_EINVAL);
    assert_null(c);
    TU_ASSERT_MSG_HAS("shs_comm_create: shs_comm_ops version 2 (this library knows 1 to 1)");
    ops.version = 0;
    assert_int_equal(shs_comm_create(&c, 0, 2, &ops, NULL), SHS_EINVAL);
    assert_null(c);
    TU_ASSERT_MSG_HAS("shs_comm_create: shs_comm_ops version 0");
    assert_int_equal(g_destroyed, 0); /* a refused backend is not torn down */
    ops.version = 1;
    ops.send = NULL;
    assert_int_equal(shs_comm_create(&c, 0, 2, &ops, NULL), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("incomplete ops");
    ops.send = nop_send;
    TU_OK(shs_comm_create(&c, 1, 2, &ops, NULL));
    assert_int_equal(shs_comm_rank(c), 1);
    shs_comm_free(c);
    assert_int_equal(g_destroyed, 1);
}

static void test_state_add_tensor_version(void **state)
{
    (void)state;
    shs_state *s = NULL;
    TU_OK(shs_state_create(&s));
    float x[2] = { 1, 2 };
    uint64_t shape[1] = { 2 };
    shs_tensor_spec sp = SHS_TENSOR_SPEC_INIT;
    sp.name = "w";
    sp.ndim = 1;
    sp.shape = shape;
    sp.data = x;
    sp.version = SHS_TENSOR_SPEC_VERSION + 1;
    assert_int_equal(shs_state_add_tensor(s, &sp), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("shs_state_add_tensor: shs_tensor_spec version 2 (this library knows 1 to "
                      "1)");
    sp.version = 0;
    assert_int_equal(shs_state_add_tensor(s, &sp), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("shs_state_add_tensor: shs_tensor_spec version 0");
    assert_int_equal(shs_state_tensor_count(s), 0);
    sp.version = 1;
    TU_OK(shs_state_add_tensor(s, &sp));
    assert_int_equal(shs_state_tensor_count(s), 1);
    assert_int_equal(shs_state_nbytes(s), 8);
    shs_state_free(s);
}

static void test_manager_create_version(void **state)
{
    (void)state;
    tu_small s;
    tu_small_make(&s, 1, 0);
    shs_config c;
    shs_config_init(&c);
    c.enable_save = 0;
    shs_manager *m = (shs_manager *)&c; /* must be reset to NULL */
    c.version = SHS_CONFIG_VERSION + 1;
    assert_int_equal(shs_manager_create(&m, &c, s.st), SHS_EINVAL);
    assert_null(m);
    char want[128];
    snprintf(want, sizeof want,
             "shs_manager_create: shs_config version %u (this library knows 1 to %u)",
             (unsigned)SHS_CONFIG_VERSION + 1, (unsigned)SHS_CONFIG_VERSION);
    TU_ASSERT_MSG_HAS(want);
    c.version = 0;
    assert_int_equal(shs_manager_create(&m, &c, s.st), SHS_EINVAL);
    assert_null(m);
    TU_ASSERT_MSG_HAS("shs_manager_create: shs_config version 0");
    /* every older version is accepted (its fields only) */
    for (unsigned v = 1; v < SHS_CONFIG_VERSION; v++) {
        c.version = v;
        TU_OK(shs_manager_create(&m, &c, s.st));
        shs_manager_free(m);
    }
    shs_state_free(s.st);
}

/* shs_progress is versioned like the option structs: a zeroed or newer
   struct is refused with a message saying how to initialise it, and a
   ckpt_status without its NUL is refused, never read past. */
static void test_progress_version(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp();
    tu_small s;
    tu_small_make(&s, 1, 0);
    shs_config c;
    tu_cfg_saving(&c, dir);
    shs_manager *m;
    TU_OK(shs_manager_create(&m, &c, s.st));
    shs_progress p = tu_prog(1);
    p.version = 0;
    assert_int_equal(shs_manager_save(m, &p, 0), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("shs_manager_save: shs_progress version 0");
    TU_ASSERT_MSG_HAS("SHS_PROGRESS_INIT");
    p.version = SHS_PROGRESS_VERSION + 1;
    assert_int_equal(shs_manager_step(NULL, m, &p), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("shs_manager_step: shs_progress version 2");
    assert_int_equal(shs_manager_finish(m, &p), SHS_EINVAL);
    shs_load_result r = SHS_LOAD_RESULT_INIT;
    assert_int_equal(shs_manager_load(&r, m, &p), SHS_EINVAL);
    p = tu_prog(1);
    memset(p.ckpt_status, 'x', sizeof p.ckpt_status);
    assert_int_equal(shs_manager_save(m, &p, 0), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("ckpt_status is not a NUL-terminated string");
    size_t n = 9;
    int64_t steps[1];
    TU_OK(shs_checkpoint_list(steps, 1, &n, dir));
    assert_int_equal(n, 0); /* nothing was committed */
    p = tu_prog(2);
    TU_OK(shs_manager_save(m, &p, 0));
    shs_manager_free(m);
    shs_progress q = SHS_PROGRESS_INIT;
    q.version = 0;
    assert_int_equal(shs_checkpoint_read_progress(&q, tu_step_dir(dir, 2)), SHS_EINVAL);
    shs_checkpoint *ck;
    TU_OK(shs_checkpoint_open(&ck, dir, NULL));
    assert_int_equal(shs_checkpoint_progress(&q, ck), SHS_EINVAL);
    q = (shs_progress)SHS_PROGRESS_INIT;
    TU_OK(shs_checkpoint_progress(&q, ck));
    assert_int_equal(q.version, SHS_PROGRESS_VERSION);
    assert_int_equal(q.global_step, 2);
    shs_checkpoint_free(ck);
    shs_state_free(s.st);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_number),
        cmocka_unit_test(test_opts_version_accepted),
        cmocka_unit_test(test_opts_version_newer),
        cmocka_unit_test(test_opts_version_zero),
        cmocka_unit_test(test_file_open_version),
        cmocka_unit_test(test_writer_create_version),
        cmocka_unit_test(test_comm_create_version),
        cmocka_unit_test(test_state_add_tensor_version),
        cmocka_unit_test(test_manager_create_version),
        cmocka_unit_test(test_progress_version),
    };
    return TU_RUN_GROUP(tests, NULL, NULL);
}
