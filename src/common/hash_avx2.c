/*
 * hash_avx2.c -- XXH3-64 compiled for AVX2 (this file alone gets -mavx2 on
 * x86-64; see CMakeLists.txt).  xxhash picks its vector code when it is
 * compiled, so the inline build here is the AVX2 one.
 */
#include "common/hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t shs__xxh3_avx2(const void *data, size_t len)
{
    return XXH3_64bits(data, len);
}

void shs__xxh3_update_avx2(shs__xxh3_state *s, const void *data, size_t len)
{
    XXH3_64bits_update((XXH3_state_t *)(void *)s->opaque, data, len);
}

uint64_t shs__xxh3_blocks_avx2(const void *data, uint64_t len, uint64_t block, uint64_t *blocks)
{
    XXH3_state_t st;
    XXH3_INITSTATE(&st);
    XXH3_64bits_reset(&st);
    for (uint64_t at = 0, q = 0; at < len; at += block, q++) {
        size_t n = (size_t)(len - at < block ? len - at : block);
        blocks[q] = XXH3_64bits((const char *)data + at, n);
        XXH3_64bits_update(&st, (const char *)data + at, n);
    }
    return XXH3_64bits_digest(&st);
}
