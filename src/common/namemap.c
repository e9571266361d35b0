/* namemap.c -- open-addressing name -> index hash (see namemap.h). */
#include "common/namemap.h"

#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

/* Names come from files (safetensors headers, metadata.json): with a fixed
   hash, a file could be written so that every name probes the same slots
   (hash flooding, quadratic inserts).  The seed is drawn once per process,
   so a file cannot be prepared against it. */
static uint64_t g_seed;
static pthread_once_t g_seed_once = PTHREAD_ONCE_INIT;

static void seed_init(void)
{
    uint64_t s = 0;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) != (ssize_t)sizeof s) {
        /* no entropy yet (early boot): still differs between processes */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        s = XXH3_64bits_withSeed(&ts, sizeof ts, (uint64_t)getpid());
    }
    g_seed = s;
}

int shs__namemap_init(shs__namemap *m, size_t n)
{
    size_t cap = 16;
    while (cap < n * 2 + 1) {
        if (cap > SIZE_MAX / 4)
            return shs__err(SHS_ENOMEM, "too many names");
        cap *= 2;
    }
    m->slots = shs__calloc(cap, sizeof *m->slots);
    if (!m->slots)
        return shs__err(SHS_ENOMEM, "out of memory for a name table of %zu slots", cap);
    m->mask = cap - 1;
    m->count = 0;
    return SHS_OK;
}

void shs__namemap_release(shs__namemap *m)
{
    shs__free(m->slots);
    m->slots = NULL;
    m->mask = m->count = 0;
}

static size_t probe_start(const shs__namemap *m, const char *name, size_t len)
{
    pthread_once(&g_seed_once, seed_init);
    return (size_t)XXH3_64bits_withSeed(name, len, g_seed) & m->mask;
}

static int grow(shs__namemap *m, shs__name_fn fn, const void *ctx)
{
    shs__namemap bigger;
    int rc = shs__namemap_init(&bigger, (m->mask + 1));
    if (rc < 0)
        return rc;
    for (size_t i = 0; i <= m->mask; i++) {
        uint32_t v = m->slots[i];
        if (!v)
            continue;
        size_t len;
        const char *name = fn(ctx, v - 1, &len);
        size_t j = probe_start(&bigger, name, len);
        while (bigger.slots[j])
            j = (j + 1) & bigger.mask;
        bigger.slots[j] = v;
    }
    bigger.count = m->count;
    shs__free(m->slots);
    *m = bigger;
    return SHS_OK;
}

int shs__namemap_insert(shs__namemap *m, const char *name, size_t len, uint32_t idx,
                        shs__name_fn fn, const void *ctx, uint32_t *existing)
{
    if ((m->count + 1) * 2 > m->mask + 1) {
        int rc = grow(m, fn, ctx);
        if (rc < 0)
            return rc;
    }
    size_t j = probe_start(m, name, len);
    for (;;) {
        uint32_t v = m->slots[j];
        if (!v)
            break;
        size_t olen;
        const char *other = fn(ctx, v - 1, &olen);
        if (olen == len && memcmp(other, name, len) == 0) {
            if (existing)
                *existing = v - 1;
            return 0;
        }
        j = (j + 1) & m->mask;
    }
    m->slots[j] = idx + 1;
    m->count++;
    return 1;
}

long shs__namemap_find(const shs__namemap *m, const char *name, size_t len, shs__name_fn fn,
                       const void *ctx)
{
    if (!m->slots)
        return -1;
    size_t j = probe_start(m, name, len);
    for (;;) {
        uint32_t v = m->slots[j];
        if (!v)
            return -1;
        size_t olen;
        const char *other = fn(ctx, v - 1, &olen);
        if (olen == len && memcmp(other, name, len) == 0)
            return (long)(v - 1);
        j = (j + 1) & m->mask;
    }
}

void shs__namemap_remap(shs__namemap *m, const uint32_t *perm)
{
    for (size_t i = 0; i <= m->mask; i++)
        if (m->slots[i])
            m->slots[i] = perm[m->slots[i] - 1] + 1;
}
