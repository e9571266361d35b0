/* hash.c -- XXH3-64 dispatched on the CPU's vector unit (see hash.h). */
#include "common/hash.h"

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t's size */
#include <xxhash.h>

#include <stdalign.h>

_Static_assert(sizeof(XXH3_state_t) <= sizeof(((shs__xxh3_state *)0)->opaque) &&
                   alignof(XXH3_state_t) <= 64,
               "shs__xxh3_state must hold an XXH3_state_t");

static int have_avx2(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    /* idempotent, but threads (readers of one checkpoint, merge jobs)
       get here at once: relaxed atomics make that race well defined */
    static int avx2 = -1;
    int v = __atomic_load_n(&avx2, __ATOMIC_RELAXED);
    if (v < 0) {
        v = __builtin_cpu_supports("avx2") ? 1 : 0;
        __atomic_store_n(&avx2, v, __ATOMIC_RELAXED);
    }
    return v;
#else
    return 0;
#endif
}

uint64_t shs__xxh3(const void *data, size_t len)
{
    if (have_avx2())
        return shs__xxh3_avx2(data, len);
    return XXH3_64bits(data, len);
}

uint64_t shs__xxh3_blocks(const void *data, uint64_t len, uint64_t block, uint64_t *blocks)
{
    if (have_avx2())
        return shs__xxh3_blocks_avx2(data, len, block, blocks);
    /* on the stack (its alignment is the type's): no allocation outside
       the allocator hook */
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    for (uint64_t at = 0, q = 0; at < len; at += block, q++) {
        size_t n = (size_t)(len - at < block ? len - at : block);
        blocks[q] = XXH3_64bits((const char *)data + at, n);
        XXH3_64bits_update(&st, (const char *)data + at, n);
    }
    return XXH3_64bits_digest(&st);
}

/* The state is the same struct in the library's build and in the inline
   AVX2 one (one xxhash header); only the accumulation loop differs, and
   have_avx2() does not change within a process. */
void shs__xxh3_reset(shs__xxh3_state *s)
{
    XXH3_64bits_reset((XXH3_state_t *)(void *)s->opaque);
}

void shs__xxh3_update(shs__xxh3_state *s, const void *data, size_t len)
{
    if (have_avx2())
        shs__xxh3_update_avx2(s, data, len);
    else
        XXH3_64bits_update((XXH3_state_t *)(void *)s->opaque, data, len);
}

uint64_t shs__xxh3_digest(const shs__xxh3_state *s)
{
    return XXH3_64bits_digest((const XXH3_state_t *)(const void *)s->opaque);
}
