/*
 * hash_avx2.c -- XXH3-64 compiled for AVX2 (this file alone gets -mavx2 on
 * x86-64; see CMakeLists.txt).  xxhash picks its vector code when it is
 * compiled, so the inline build here is the AVX2 one.
 */
#include "hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t shs__xxh3_avx2(const void *data, size_t len)
{
    return XXH3_64bits(data, len);
}
