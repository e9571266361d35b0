/*
 * chunk_read.h -- the one place where the stored bytes of a chunk or a
 * blob are read and checked against what metadata.json recorded: the
 * whole-chunk XXH3, the per-block XXH3s, the GCM tags of an encrypted
 * chunk (crypt.h), a blob's XXH3.  The load (load.c, load_balanced.c),
 * the public read API (read.c) and verify (view.c) all read through it,
 * so every damaged byte is reported by one message:
 *
 *   <dir>/<file>: tensor '<name>' (chunk K, bytes A..B of the file):
 *       checksum mismatch (stored 0x<16 hex>, read 0x<16 hex>)
 *   <dir>/<file>: tensor '<name>' (chunk K, block Q, bytes A..B of the file): ...
 *   <dir>/<file>: tensor '<name>' (chunk K, segment S of N, bytes A..B of
 *       the file): does not authenticate (AES-256-GCM-STREAM tag mismatch): ...
 *   <dir>/<file>: blob '<name>' (rank R, bytes A..B of the file):
 *       checksum mismatch (stored 0x..., read 0x...)
 *
 * where K is the chunk's index in the tensor's list in metadata.json and
 * A..B the bytes of the file that failed (the whole chunk, the block, the
 * segment), a half-open range.
 */
#ifndef SHS_CHUNK_READ_H
#define SHS_CHUNK_READ_H

#include "source/meta.h"

struct shs__loader;

/* The error (status rc) of bytes [at, at + len) of chunk c of tensor t
   (offsets within the chunk; `part` "" for the whole chunk, else e.g.
   "block 3" or "segment 2 of 5"), `what` and the arguments after it
   saying what mismatched.  Returns rc. */
int shs__chunk_err(int rc, const char *dir, const shs__meta *m, const shs__mtensor *t,
                   const shs__mchunk *c, const char *part, uint64_t at, uint64_t len,
                   const char *what, ...) __attribute__((format(printf, 9, 10)));

/* Chunk c of tensor t found in its file (opened on first use): the key
   at the byte range metadata.json records, with its dtype and shape. */
int shs__chunk_open(struct shs__loader *L, const shs__mtensor *t, const shs__mchunk *c,
                    shs_file **out_f, size_t *out_idx);

/* Read the whole chunk c of t (opened at f/idx) into dst (n bytes) and
   check it: its XXH3 (of the ciphertext when encrypted), then, encrypted,
   decrypt it in place and authenticate it (SHS_EKEY without the key). */
int shs__chunk_read(const struct shs__loader *L, const shs__mtensor *t, const shs__mchunk *c,
                    shs_file *f, size_t idx, void *dst, uint64_t n);

/* The part [ioff, +ishape) of chunk c of t (opened at f/idx) into the
   box [boff, +bshape) held in dst, as `dtype`; only what the part needs
   is read and checked (the blocks or segments it touches when the chunk
   has them).  *read_bytes grows by the bytes read from storage. */
int shs__chunk_fill(struct shs__loader *L, const shs__mtensor *t, const shs__mchunk *c, shs_file *f,
                    size_t idx, const uint64_t *boff, const uint64_t *bshape, const uint64_t *ioff,
                    const uint64_t *ishape, shs_dtype dtype, void *dst, uint64_t *read_bytes);

/* Verify: every stored byte of chunk c (opened at f/idx) against every
   record of it -- the whole XXH3 and each block's, in one pass, and with
   L->key the tags of an encrypted chunk (no plaintext leaves it).  *bytes
   gets the chunk's stored bytes: the mapping, or *scratch (reallocated
   here, the caller frees it). */
int shs__chunk_verify(const struct shs__loader *L, const shs__mtensor *t, const shs__mchunk *c,
                      shs_file *f, size_t idx, const void **bytes, void **scratch);

/* Blob b read into dst (exactly its b1 - b0 bytes) and checked against its
   XXH3; *out_idx (may be NULL) gets its index in its file. */
int shs__blob_read(struct shs__loader *L, const shs__mblob *b, void *dst, size_t *out_idx);

#endif
