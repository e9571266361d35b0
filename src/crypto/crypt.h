/*
 * crypt.h -- encryption at rest (crypt.c, crypt_segs.c): AES-256-GCM
 * through OpenSSL's libcrypto.  Format and threat model:
 * docs/encryption.md.
 *
 * What is encrypted: the bytes of every tensor chunk of a save (the
 * payload of the safetensors files).  What stays readable: file names,
 * the safetensors headers (tensor names, dtypes, shapes, byte ranges),
 * metadata.json and common.json, and the rank-local blobs.
 *
 * Version 4 (written): each chunk is a STREAM of fixed-size segments
 * (SHS__SEGMENT, recorded as "segment_bytes"), each its own GCM message
 * under a key of the chunk's own (HKDF from the key and a random salt of
 * the chunk), with the nonce prefix || be32(segment index) || last-flag
 * and the chunk's AAD -- tensor name, dtype, global shape, the chunk's
 * offset and shape, the step, a random id of the save, the segment size --
 * on every segment; one tag per segment in metadata.json.  So segments are
 * encrypted, decrypted and verified in parallel, a box read decrypts only
 * the segments it touches, and truncated, reordered, swapped or moved
 * segments and chunks fail to authenticate.  metadata.json itself carries
 * an HMAC under a subkey of the key ("metadata_mac"): a reader with the
 * key accepts nothing the key did not write.
 *
 * Version 3 (read only): each chunk one GCM message, a random 96-bit
 * nonce and one tag ("aes_gcm"), the AAD without the segment size; no
 * metadata MAC.
 *
 * The xxh3 checksums of an encrypted chunk are of its ciphertext: they
 * leak nothing about the weights, and a checkpoint can be checked for
 * damage without the key.
 */
#ifndef SHS_CRYPT_H
#define SHS_CRYPT_H

#include "source/meta.h"

#define SHS__NONCE_BYTES 12
#define SHS__TAG_BYTES 16
#define SHS__SALT_BYTES 16
#define SHS__MAC_BYTES 32
#define SHS__CIPHER_NAME "AES-256-GCM"          /* version 3 */
#define SHS__CIPHER_STREAM "AES-256-GCM-STREAM" /* version 4 */
/* The __metadata__ key of every data file of an encrypted save (its value
   the cipher): such a file is never read as plain data. */
#define SHS__FILE_MARK "shardsafe_cipher"
/* The segment size a save writes (metadata.json "segment_bytes"); a
   reader takes any power of two in [SHS__SEGMENT_MIN, SHS__SEGMENT_MAX]. */
#define SHS__SEGMENT ((uint64_t)1 << 20)
#define SHS__SEGMENT_MIN ((uint64_t)1 << 12)
#define SHS__SEGMENT_MAX ((uint64_t)1 << 26)

/* A loaded key and its public identifier ("key_id" in metadata.json: 16
   hex digits of SHA-256 over a fixed label and the key; it names the key
   without revealing it, so a wrong key is told apart from damage). */
typedef struct shs__key {
    unsigned char k[SHS_KEY_BYTES];
    char id[17];
} shs__key;

/* A key from `len` raw bytes (exactly SHS_KEY_BYTES, else SHS_EKEY). */
int shs__key_from_bytes(shs__key *out, const void *key, size_t len);
/* Wipe a key (OPENSSL_cleanse). */
void shs__key_wipe(shs__key *k);

/* A key from the configured source: a file or the environment variable
   named `env`; exactly one of them non-empty.  SHS_EKEY with a message
   naming the file or variable (missing, unreadable, wrong length, not
   hex). */
int shs__key_load(shs__key *out, const char *file, const char *env);

/* The AAD of a chunk (at most SHS__AAD_MAX bytes; the length is
   returned): a label, the save's id (16 hex digits, random per save), the
   step, dtype, ndim, SHA-256 of the tensor name, global shape, offset and
   shape of the chunk; version 4 (segment > 0) another label and the
   segment size after them.  segment == 0: version 3's AAD. */
#define SHS__AAD_MAX (32 + 16 + 16 + 32 + 3 * 8 * SHS_MAX_DIMS + 8)
size_t shs__crypt_aad(unsigned char *out, const char *save_id, const char *name, shs_dtype dtype,
                      size_t ndim, const uint64_t *gshape, const uint64_t *off,
                      const uint64_t *shape, int64_t step, uint64_t segment);

/* A random save id: 16 lowercase hex digits from RAND_bytes. */
int shs__crypt_save_id(char out[17]);

/* ---- saving (version 4) ---- */

/* Segments of a chunk of n bytes: n / segment rounded up, at least one
   (an empty chunk is one empty segment, so its place is authenticated
   too). */
uint64_t shs__crypt_nsegs(uint64_t n, uint64_t segment);

/* Encrypt the n bytes at src as one chunk of SHS__SEGMENT segments: a
   fresh random salt to `salt`, the tags (nsegs * 16 bytes, caller frees
   with shs__free) to *tags.  The segments are encrypted by helper
   threads into `ring` (SHS__SEAL_RING segments, the caller's) while the
   calling thread hands each one's ciphertext, in order, to sink(ctx,
   offset, bytes, len): the cipher runs beside the checksum and the write.
   Stops at the first error of either side (a sink's status is returned as
   is).  Without a thread (one segment, or pthread_create failing) it
   works alone. */
#define SHS__SEAL_RING 4
typedef int (*shs__seal_sink)(void *ctx, uint64_t at, const void *data, size_t len);
int shs__seal_chunk(const shs__key *key, const unsigned char *aad, size_t aadlen, const void *src,
                    uint64_t n, unsigned char *ring, unsigned char salt[SHS__SALT_BYTES],
                    unsigned char **tags, shs__seal_sink sink, void *ctx);

/* ---- reading ---- */

/* Decrypt chunk c of tensor t of model m (its n bytes of ciphertext at
   src, already checked against its xxh3) into buf -- src may be buf: in
   place -- and authenticate it; version 4 on two threads, segment by
   segment.  SHS_EKEY when there is no key or it is not the checkpoint's;
   SHS_ECHECKSUM, naming the file and tensor, when a tag does not match (a
   changed byte, a moved chunk or segment, a changed metadata.json): buf
   is then wiped. */
int shs__crypt_open_chunk(const shs__key *key, const shs__meta *m, const char *dir,
                          const shs__mtensor *t, const shs__mchunk *c, const void *src, void *buf,
                          uint64_t n);

/* Version 4: decrypt and authenticate only the segments k of chunk c in
   [first, first + count) with marks[k - first] set (marks NULL: all of
   them), on two threads.  `src` holds the ciphertext of segment `first`
   onwards, as the chunk lays it out (unmarked segments may hold
   anything), `buf` receives their plaintext at the same offsets (src may
   be buf).  The same errors as shs__crypt_open_chunk; on a mismatch the
   whole window of buf is wiped. */
int shs__crypt_open_segments(const shs__key *key, const shs__meta *m, const char *dir,
                             const shs__mtensor *t, const shs__mchunk *c, uint64_t first,
                             uint64_t count, const uint8_t *marks, const void *src, void *buf);

/* Authenticate chunk c (verify): the same checks and errors, decrypting
   into small scratch buffers that are wiped; no plaintext leaves it.
   Version 4 on two threads, segment by segment; version 3 on one. */
int shs__crypt_auth_chunk(const shs__key *key, const shs__meta *m, const char *dir,
                          const shs__mtensor *t, const shs__mchunk *c, const void *src, uint64_t n);

/* The checkpoint m needs a key: SHS_EKEY "encrypted ... key required"
   when key is NULL, "wrong key" when its id is not the checkpoint's;
   version 4: SHS_ECHECKSUM when metadata.json does not authenticate under
   the key (its "metadata_mac").  SHS_OK for an unencrypted checkpoint
   (any key). */
int shs__crypt_check_key(const shs__meta *m, const shs__key *key, const char *dir);

/* As shs__crypt_check_key, and a key given (key != NULL) must find an
   encrypted checkpoint: an unencrypted one is SHS_EKEY (its metadata.json
   is authenticated by nothing: it may be an encrypted checkpoint stripped
   of its encryption).  For `verify` and the read API (merge, reshard,
   diff) when a key is given, and the manager's resume from save_path. */
int shs__crypt_require(const shs__meta *m, const shs__key *key, const char *dir);

/* ---- metadata.json (version 4) ---- */

/* Seal the text of an encrypted save's metadata.json (a JSON object
   without "metadata_mac" or "metadata_xxh3"): *out becomes a new text
   (caller frees with shs__free) ending with
     "metadata_mac":"<64 hex>",\n"metadata_xxh3":"<16 hex>"\n}\n
   where the MAC is HMAC-SHA256 under a subkey of `key` (HKDF) over the
   SHA-256 of the returned text with both digit strings read as '0', and
   the xxh3 the seal of shs__meta_seal. */
int shs__crypt_meta_seal(char **out, size_t *out_len, const char *text, size_t len,
                         const shs__key *key);

/* Parsing a version-4 metadata.json (`buf`, `len` bytes, whose top-level
   "metadata_mac" is `value`, NULL when not a string): check that it ends
   as shs__crypt_meta_seal writes it and record the MAC and the digest it
   covers in m (checked with the key by shs__crypt_check_key).  `buf` is
   hashed in place, its digits read as '0' and then put back. */
int shs__crypt_meta_digest(shs__meta *m, char *buf, size_t len, const char *value,
                           const char *path);

/* "<24 hex nonce><32 hex tag>", as metadata.json's "aes_gcm" (version 3)
   holds it. */
void shs__crypt_hex_nt(char out[57], const unsigned char nonce[SHS__NONCE_BYTES],
                       const unsigned char tag[SHS__TAG_BYTES]);
/* Parse it back; -1 unless exactly 56 lowercase hex digits. */
int shs__crypt_parse_nt(const char *s, unsigned char nonce[SHS__NONCE_BYTES],
                        unsigned char tag[SHS__TAG_BYTES]);
/* n bytes as 2n lowercase hex digits and a NUL (out holds 2n + 1). */
void shs__crypt_hex(char *out, const unsigned char *p, size_t n);
/* Exactly 2n lowercase hex digits (`len` of them at s) into n bytes; -1
   otherwise. */
int shs__crypt_unhex(unsigned char *out, size_t n, const char *s, size_t len);

#endif
