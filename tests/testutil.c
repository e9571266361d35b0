/* testutil.c -- helpers shared by the unit tests. */
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    (void)st; (void)flag; (void)ftw;
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

long tu_failalloc_count(void) { return g_count; }
long tu_failalloc_live(void) { return g_live; }

void tu_failalloc_uninstall(void)
{
    shs_set_allocator(NULL);
}
