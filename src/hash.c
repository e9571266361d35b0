/* hash.c -- XXH3-64 dispatched on the CPU's vector unit (see hash.h). */
#include "hash.h"

#include <xxhash.h>

uint64_t shs__xxh3(const void *data, size_t len)
{
#if defined(__x86_64__) && defined(__GNUC__)
    static int avx2 = -1;
    if (avx2 < 0)
        avx2 = __builtin_cpu_supports("avx2") ? 1 : 0; /* idempotent: races are benign */
    if (avx2)
        return shs__xxh3_avx2(data, len);
#endif
    return XXH3_64bits(data, len);
}
