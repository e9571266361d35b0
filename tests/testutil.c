/* testutil.c -- helpers shared by the unit tests. */
#include "testutil.h"

#include "common/hash.h"
#include "source/meta.h"

#include <jansson.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

char *tu_mkdtemp(void)
{
    const char *base = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/shs-test-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpl))
        return NULL;
    return strdup(tmpl);
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(p);
}

void tu_rmtree(const char *path)
{
    if (path)
        nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

int tu_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t n = len ? fwrite(data, 1, len, f) : 0;
    int rc = fclose(f);
    return (n == len && rc == 0) ? 0 : -1;
}

void *tu_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        *len = (size_t)n;
    }
    return buf;
}

const char *tu_path(const char *dir, const char *name)
{
    static char slots[8][4096];
    static int next;
    char *s = slots[next++ & 7];
    snprintf(s, 4096, "%s/%s", dir, name);
    return s;
}

int tu_skipped;

int tu_exit_code(int failed)
{
    if (failed)
        return failed;
    return tu_skipped ? 77 : 0;
}

static long g_fail_at, g_count, g_live;

static void *fa_malloc(void *ctx, size_t n)
{
    (void)ctx;
    if (g_fail_at && ++g_count == g_fail_at)
        return NULL;
    void *p = malloc(n);
    if (p)
        g_live++;
    return p;
}

static void *fa_realloc(void *ctx, void *p, size_t n)
{
    (void)ctx;
    if (g_fail_at && ++g_count == g_fail_at)
        return NULL;
    void *q = realloc(p, n);
    if (q && !p)
        g_live++;
    return q;
}

static void fa_free(void *ctx, void *p)
{
    (void)ctx;
    if (p)
        g_live--;
    free(p);
}

void tu_failalloc_install(void)
{
    shs_allocator a = { fa_malloc, fa_realloc, fa_free, NULL };
    g_fail_at = g_count = g_live = 0;
    shs_set_allocator(&a);
}

void tu_failalloc_arm(long fail_at)
{
    g_fail_at = fail_at;
    g_count = 0;
}

long tu_failalloc_count(void)
{
    return g_count;
}
long tu_failalloc_live(void)
{
    return g_live;
}

void tu_failalloc_uninstall(void)
{
    shs_set_allocator(NULL);
}

long tu_failalloc_sweep(const tu_sweep *s)
{
    long n, failures = 0;
    for (n = 1;; n++) {
        if (s->before)
            s->before(s->ctx);
        tu_failalloc_install();
        tu_failalloc_arm(n);
        int rc = s->run(s->ctx);
        long count = tu_failalloc_count();
        tu_failalloc_arm(0);
        long live = tu_failalloc_live();
        tu_failalloc_uninstall();
        if (s->after)
            s->after(s->ctx, rc);
        if (live != 0)
            fail_msg("%s: N=%ld: %ld allocations leaked", s->what, n, live);
        if (count < n) {
            if (rc != SHS_OK)
                fail_msg("%s: failed with no allocation failing: %d %s", s->what, rc,
                         shs_last_error());
            break;
        }
        if (rc != SHS_OK) {
            failures++;
            if (rc != SHS_ENOMEM && !strstr(shs_last_error(), "out of memory"))
                fail_msg("%s: N=%ld: %d %s", s->what, n, rc, shs_last_error());
        }
    }
    printf("alloc sweep: %s: %ld allocations, each failed once: %ld errors\n", s->what, n - 1,
           failures);
    return failures;
}

/* ---- checkpoint-test helpers ------------------------------------------ */

char *tu_root;

int tu_setup_root(void **state)
{
    (void)state;
    tu_root = tu_mkdtemp();
    return tu_root ? 0 : -1;
}

int tu_teardown_root(void **state)
{
    (void)state;
    tu_rmtree(tu_root);
    free(tu_root);
    tu_root = NULL;
    return 0;
}

char *tu_path_dup(const char *dir, const char *name)
{
    char *p = strdup(tu_path(dir, name));
    assert_non_null(p);
    return p;
}

char *tu_subpath(const char *name)
{
    return tu_path_dup(tu_root, name);
}

char *tu_subdir(const char *name)
{
    char *p = tu_subpath(name);
    assert_int_equal(mkdir(p, 0755), 0);
    return p;
}

int tu_path_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Entries of `dir` whose name starts with `prefix` (NULL: all but "." and
   ".."); -1 when `dir` cannot be opened. */
static int count_where(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (prefix ? strncmp(e->d_name, prefix, strlen(prefix)) == 0
                   : strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

int tu_count_entries(const char *dir)
{
    return count_where(dir, NULL);
}

int tu_count_prefixed(const char *dir, const char *prefix)
{
    return count_where(dir, prefix);
}

int tu_count_leftovers(const char *dir)
{
    return tu_count_prefixed(dir, ".tmp-") + tu_count_prefixed(dir, ".trash-") +
           tu_count_prefixed(dir, ".replaced-") + tu_count_prefixed(dir, TU_TRACKER ".tmp");
}

const char *tu_step_name(int64_t step)
{
    static char buf[4][40];
    static int k;
    char *b = buf[k++ & 3];
    snprintf(b, 40, "iteration_%08lld", (long long)step);
    return b;
}

const char *tu_step_dir(const char *sp, int64_t step)
{
    return tu_path(sp, tu_step_name(step));
}

int tu_read_progress(shs_progress *out, const char *dir)
{
    shs_checkpoint *c;
    int rc = shs_checkpoint_open(&c, dir, NULL);
    if (rc < 0)
        return rc;
    rc = shs_checkpoint_progress(out, c);
    shs_checkpoint_free(c);
    return rc;
}

char *tu_read_tracker(const char *sp)
{
    size_t len;
    char *t = tu_read_file(tu_path(sp, TU_TRACKER), &len);
    if (t && len && t[len - 1] == '\n')
        t[len - 1] = 0;
    return t;
}

int64_t tu_tracker_step(const char *sp)
{
    char *t = tu_read_tracker(sp);
    if (!t)
        return -1;
    int64_t v = strtoll(t, NULL, 10);
    free(t);
    return v;
}

void tu_cfg_saving(shs_config *c, const char *save_path)
{
    shs_config_init(c);
    c->save_path = save_path;
    c->save_max = 0;
    c->fsync = 0;
    c->save_interleaved_steps = 1000000;
}

int tu_save_once(const char *save_path, shs_state *st, const shs_progress *p, int fsync_on)
{
    shs_config c;
    tu_cfg_saving(&c, save_path);
    c.fsync = fsync_on;
    shs_manager *m = NULL;
    int rc = shs_manager_create(&m, &c, st);
    if (rc < 0)
        return rc;
    rc = shs_manager_save(m, p, 0);
    if (rc == SHS_OK)
        rc = shs_manager_wait(m);
    shs_manager_free(m);
    return rc;
}

shs_progress tu_prog(int64_t step)
{
    shs_progress p = SHS_PROGRESS_INIT;
    p.epoch_num = 1;
    p.step_num = step;
    p.global_step = step;
    p.loss_scale = 1024.0;
    p.global_batch_size = 32;
    p.consumed_samples = step * 32;
    return p;
}

const uint64_t tu_w_shape[2] = { 4, 3 }, tu_b_shape[1] = { 3 };

void tu_small_fill(tu_small *s, float base)
{
    for (int i = 0; i < 12; i++) {
        s->w[i] = base + (float)i;
        s->wm[i] = base * 2 + (float)i * 0.5f;
    }
    for (int i = 0; i < 3; i++)
        s->b[i] = base - (float)i;
}

void tu_add_tensor(shs_state *st, const char *name, shs_kind kind, shs_dtype dt, size_t nd,
                   const uint64_t *shape, void *data, const char *master_of)
{
    shs_tensor_spec sp = SHS_TENSOR_SPEC_INIT;
    sp.name = name;
    sp.kind = kind;
    sp.dtype = dt;
    sp.ndim = nd;
    sp.shape = shape;
    sp.data = data;
    sp.master_of = master_of;
    TU_OK(shs_state_add_tensor(st, &sp));
}

void tu_small_make(tu_small *s, float base, int with_opt)
{
    memset(s, 0, sizeof *s);
    tu_small_fill(s, base);
    TU_OK(shs_state_create(&s->st));
    tu_add_tensor(s->st, "w", SHS_KIND_MODEL, SHS_F32, 2, tu_w_shape, s->w, NULL);
    tu_add_tensor(s->st, "b", SHS_KIND_MODEL, SHS_F32, 1, tu_b_shape, s->b, NULL);
    if (with_opt)
        tu_add_tensor(s->st, "w.exp_avg", SHS_KIND_OPTIMIZER, SHS_F32, 2, tu_w_shape, s->wm, NULL);
}

void tu_assert_blob_str(shs_state *st, const char *name, const char *want)
{
    const void *d;
    size_t n;
    if (shs_state_get_blob(st, name, &d, &n) != SHS_OK)
        fail_msg("no blob '%s'", name);
    if (n != strlen(want) || memcmp(d, want, n) != 0)
        fail_msg("blob '%s' = '%.*s', want '%s'", name, (int)n, (const char *)d, want);
}

void tu_reseal_common(const char *dir)
{
    char *mp = strdup(tu_path(dir, "metadata.json"));
    json_t *m = json_load_file(mp, 0, NULL);
    assert_non_null(m);
    if (json_object_get(m, "common_xxh3")) {
        size_t len;
        char *c = tu_read_file(tu_path(dir, "common.json"), &len);
        assert_non_null(c);
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)shs__xxh3(c, len));
        json_object_set_new(m, "common_xxh3", json_string(hex));
        tu_meta_reseal(mp, m);
        free(c);
    }
    json_decref(m);
    free(mp);
}

void tu_meta_reseal(const char *path, json_t *root)
{
    json_object_del(root, "metadata_xxh3");
    char *plain = json_dumps(root, JSON_COMPACT);
    assert_non_null(plain);
    size_t len = 0;
    char *sealed = shs__meta_seal(plain, strlen(plain), &len);
    free(plain);
    assert_non_null(sealed);
    assert_int_equal(tu_write_file(path, sealed, len), 0);
    shs__free(sealed);
}
