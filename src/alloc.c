/* alloc.c -- the allocator hook: every allocation of the library. */
#include "internal.h"

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

static shs_allocator g_alloc = { default_malloc, default_realloc,
                                 default_free, NULL };

void shs_set_allocator(const shs_allocator *allocator)
{
    if (allocator && allocator->malloc_fn && allocator->realloc_fn &&
        allocator->free_fn)
        g_alloc = *allocator;
    else
        g_alloc = (shs_allocator){ default_malloc, default_realloc,
                                   default_free, NULL };
}

void *shs__malloc(size_t size)
{
    return g_alloc.malloc_fn(g_alloc.ctx, size ? size : 1);
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
    return g_alloc.realloc_fn(g_alloc.ctx, ptr, size ? size : 1);
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
