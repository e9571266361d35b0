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

/* One pass over `len` bytes giving both the XXH3-64 of the whole and of
   each `block`-byte block (ceil(len / block) entries in `blocks`): every
   block is hashed while it is in the cache, then folded into the whole. */
uint64_t shs__xxh3_blocks(const void *data, uint64_t len, uint64_t block, uint64_t *blocks);

/* Streaming XXH3-64 of one message seen in pieces (the value shs__xxh3
   gives for the whole), with the same vector unit.  The state is
   xxhash's XXH3_state_t, held opaquely (hash.c checks that it fits). */
typedef struct shs__xxh3_state {
    _Alignas(64) unsigned char opaque[640];
} shs__xxh3_state;
void shs__xxh3_reset(shs__xxh3_state *s);
void shs__xxh3_update(shs__xxh3_state *s, const void *data, size_t len);
uint64_t shs__xxh3_digest(const shs__xxh3_state *s);

/* The AVX2 builds (hash_avx2.c); only called when the CPU has AVX2. */
uint64_t shs__xxh3_avx2(const void *data, size_t len);
uint64_t shs__xxh3_blocks_avx2(const void *data, uint64_t len, uint64_t block, uint64_t *blocks);
void shs__xxh3_update_avx2(shs__xxh3_state *s, const void *data, size_t len);

#endif
