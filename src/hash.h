/*
 * hash.h -- XXH3-64 of tensor bytes, with the widest vector unit the CPU
 * offers (Debian's libxxhash is built for baseline x86-64: SSE2).  Every
 * variant gives the same value.
 */
#ifndef SHS_HASH_H
#define SHS_HASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t shs__xxh3(const void *data, size_t len);

/* Chunks larger than this also get a checksum per block of this size. */
#define SHS__HASH_BLOCK (4ull << 20)

/* The AVX2 build of XXH3 (hash_avx2.c); only called when the CPU has it. */
uint64_t shs__xxh3_avx2(const void *data, size_t len);

#endif
