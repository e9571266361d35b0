/* alloc.c -- the allocator hook: every allocation of the library. */
#include "common/internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static void *default_malloc(void *ctx, size_t size)
{
    (void)ctx;
    return malloc(size);
}
static void *default_realloc(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    return realloc(ptr, size);
}
static void default_free(void *ctx, void *ptr)
{
    (void)ctx;
    free(ptr);
}

static shs_allocator g_alloc = { default_malloc, default_realloc, default_free, NULL };

/* jansson allocates the JSON trees of metadata.json, common.json and the
   safetensors headers; its memory must come from the hook too, or a
   program that bounds or accounts memory with shs_set_allocator misses
   it, and an allocation-failure sweep never reaches jansson's failure
   paths.  jansson has no per-call allocator, only the process-global
   json_set_alloc_funcs(), so the forwarders are installed by
   shs_set_allocator() (not at first use, not by a constructor): a program
   that never sets an allocator keeps jansson exactly as it was.  A program
   that does set one and also uses jansson itself gets its own JSON values
   allocated through the hook as well; it must set the allocator before it
   creates any JSON value (a value made with plain malloc would be released
   through the hook's free), and if it installs its own jansson functions
   afterwards, those win and the library's JSON memory leaves the hook. */
static void *json_malloc_fwd(size_t size)
{
    return shs__malloc(size);
}
static void json_free_fwd(void *ptr)
{
    shs__free(ptr);
}

/* json_dumps() through a buffer whose failure is sticky.  jansson ignores
   the result of some of its own writes (an object key's, in 2.14), so with
   json_dumps() one failed allocation mid-dump drops a piece and the dump
   goes on: malformed JSON returned as success.  Here the first failed
   append fails every later one and the whole dump.  The result is the
   library's (shs__free); NULL on out of memory. */
typedef struct dump_buf {
    char *p;
    size_t len, cap;
    int failed;
} dump_buf;

static int dump_append(const char *data, size_t n, void *ctx)
{
    dump_buf *b = ctx;
    if (b->failed)
        return -1;
    if (b->cap - b->len <= n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len <= n && cap <= SIZE_MAX / 2)
            cap *= 2;
        char *q = cap - b->len > n ? shs__realloc(b->p, cap) : NULL;
        if (!q) {
            b->failed = 1;
            return -1;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

char *shs__json_dumps(const json_t *json, size_t flags)
{
    dump_buf b = { NULL, 0, 0, 0 };
    int rc = json_dump_callback(json, dump_append, &b, flags);
    if (rc == 0 && !b.failed && !b.p)
        rc = dump_append("", 0, &b); /* nothing written: still a string */
    if (rc != 0 || b.failed) {
        shs__free(b.p);
        return NULL;
    }
    return b.p;
}

/* json_loadb() that fails whole when an allocation failed during the parse.
   jansson does not check every one of its buffer appends: after a failed
   one it can return a value with a character missing from a string (seen:
   a file name in metadata.json), or report a syntax error.  *oom tells the
   caller which. */
json_t *shs__json_loadb(const char *buf, size_t len, size_t flags, json_error_t *err, int *oom)
{
    unsigned long before = shs__alloc_failures();
    json_t *j = json_loadb(buf, len, flags, err);
    *oom = shs__alloc_failures() != before;
    if (*oom) {
        json_decref(j);
        j = NULL;
    }
    return j;
}

void shs_set_allocator(const shs_allocator *allocator)
{
    if (allocator && allocator->malloc_fn && allocator->realloc_fn && allocator->free_fn)
        g_alloc = *allocator;
    else
        g_alloc = (shs_allocator){ default_malloc, default_realloc, default_free, NULL };
    json_set_alloc_funcs(json_malloc_fwd, json_free_fwd);
}

/* Failed allocations of this thread: jansson reports an out-of-memory
   parse as a syntax error (or with no message), so its callers compare
   this count before and after to tell the two apart. */
static _Thread_local unsigned long t_alloc_failures;

unsigned long shs__alloc_failures(void)
{
    return t_alloc_failures;
}

void *shs__malloc(size_t size)
{
    void *p = g_alloc.malloc_fn(g_alloc.ctx, size ? size : 1);
    if (!p)
        t_alloc_failures++;
    return p;
}

void *shs__calloc(size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total))
        return NULL;
    void *p = shs__malloc(total);
    if (p)
        memset(p, 0, total);
    return p;
}

void *shs__realloc(void *ptr, size_t size)
{
    void *p = g_alloc.realloc_fn(g_alloc.ctx, ptr, size ? size : 1);
    if (!p)
        t_alloc_failures++;
    return p;
}

void shs_free(void *ptr)
{
    shs__free(ptr);
}

void shs__free(void *ptr)
{
    if (ptr)
        g_alloc.free_fn(g_alloc.ctx, ptr);
}

char *shs__strndup(const char *s, size_t n)
{
    char *p = shs__malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

char *shs__strdup(const char *s)
{
    return shs__strndup(s, strlen(s));
}
