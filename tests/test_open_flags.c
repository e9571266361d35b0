/*
 * test_open_flags.c -- SHS_OPEN_PRIVATE_WRITABLE: a private, writable
 * (copy-on-write) mapping made by the library through the io seam, for
 * the Python binding (issue 19.7).  Writes stay in the handle; the file
 * and other handles never see them; without the mapping (an io layer
 * without the op, a failing mmap, SHS_OPEN_NO_MMAP) reads use pread.
 */
#include "testutil.h"

#include "store/io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *g_dir;
static const char *g_file;
static float g_a[1024];

static int setup(void **state)
{
    (void)state;
    g_dir = tu_mkdtemp();
    if (!g_dir)
        return -1;
    for (int i = 0; i < 1024; i++)
        g_a[i] = (float)i;
    uint8_t b[3] = { 1, 2, 3 };
    uint64_t sa[1] = { 1024 }, sb[1] = { 3 };
    shs_tensor_view tv[2] = { { "a", SHS_F32, 1, sa, g_a }, { "b", SHS_U8, 1, sb, b } };
    g_file = tu_path_dup(g_dir, "t.safetensors");
    return shs_save_file(g_file, tv, 2, NULL, 0, NULL) == SHS_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tu_rmtree(g_dir);
    free((void *)g_file);
    free(g_dir);
    return 0;
}

/* The permissions /proc/self/maps gives the mapping that holds `p`
   ("r--p", "rw-p"), or "" when no mapping does. */
static void perms_of(const void *p, char out[5])
{
    out[0] = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perm[5];
        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perm) == 3 && (uintptr_t)p >= lo &&
            (uintptr_t)p < hi) {
            memcpy(out, perm, 5);
            break;
        }
    }
    fclose(f);
}

static shs_file *open_with(unsigned flags)
{
    shs_open_opts o = SHS_OPEN_OPTS_INIT;
    o.flags = flags;
    shs_file *f = NULL;
    TU_OK(shs_file_open(&f, g_file, &o));
    return f;
}

static void test_writes_stay_in_the_handle(void **state)
{
    (void)state;
    size_t before_len = 0;
    void *before = tu_read_file(g_file, &before_len);
    assert_non_null(before);

    shs_file *w = open_with(SHS_OPEN_PRIVATE_WRITABLE);
    size_t ia;
    TU_OK(shs_file_find(&ia, w, "a"));
    float *p = (float *)shs_file_tensor_data(w, ia);
    assert_non_null(p);
    char perm[5];
    perms_of(p, perm);
    assert_string_equal(perm, "rw-p");
    p[0] = -1.0f;
    p[1023] = -2.0f;
    /* reads through this handle see the writes */
    float back[1024];
    TU_OK(shs_file_read(w, ia, back, sizeof back));
    assert_true(back[0] == -1.0f && back[1023] == -2.0f && back[1] == 1.0f);
    uint64_t s[1] = { 1023 }, n[1] = { 1 };
    float one;
    TU_OK(shs_file_read_slice(w, ia, s, n, &one, sizeof one));
    assert_true(one == -2.0f);

    /* another handle, the default read-only mapping: the file's bytes */
    shs_file *r = open_with(0);
    const float *q = shs_file_tensor_data(r, ia);
    assert_non_null(q);
    perms_of(q, perm);
    assert_string_equal(perm, "r--p");
    assert_true(q[0] == 0.0f && q[1023] == 1023.0f);
    shs_file_free(r);
    shs_file_free(w);

    size_t after_len = 0;
    void *after = tu_read_file(g_file, &after_len);
    assert_non_null(after);
    assert_int_equal(after_len, before_len);
    assert_memory_equal(after, before, before_len);
    free(after);
    free(before);
}

static void *null_map(int fd, size_t len)
{
    (void)fd;
    (void)len;
    return NULL;
}

static void read_without_mapping(void)
{
    shs_file *f = open_with(SHS_OPEN_PRIVATE_WRITABLE);
    size_t ib;
    TU_OK(shs_file_find(&ib, f, "b"));
    assert_null(shs_file_tensor_data(f, ib));
    uint8_t b[3];
    TU_OK(shs_file_read(f, ib, b, sizeof b));
    assert_true(b[0] == 1 && b[2] == 3);
    shs_file_free(f);
}

/* An io layer without the op, or one whose mapping fails: the file opens
   unmapped and reads with pread, as when mmap is unavailable. */
static void test_no_mapping_reads_with_pread(void **state)
{
    (void)state;
    shs__io_ops ops = shs__io_posix;
    ops.mmap_private_writable = NULL;
    shs__io_set(&ops);
    read_without_mapping();
    ops.mmap_private_writable = null_map;
    shs__io_set(&ops);
    read_without_mapping();
    shs__io_set(NULL);

    shs_file *f = open_with(SHS_OPEN_PRIVATE_WRITABLE | SHS_OPEN_NO_MMAP);
    assert_null(shs_file_tensor_data(f, 0));
    shs_file_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writes_stay_in_the_handle),
        cmocka_unit_test(test_no_mapping_reads_with_pread),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
