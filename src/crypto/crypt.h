/*
 * crypt.h -- encryption at rest (crypt.c): AES-256-GCM per saved chunk,
 * through OpenSSL's libcrypto.  Format and threat model:
 * docs/encryption.md.
 *
 * What is encrypted: the bytes of every tensor chunk of a save (the
 * payload of the safetensors files).  What stays readable: file names,
 * the safetensors headers (tensor names, dtypes, shapes, byte ranges),
 * metadata.json and common.json, and the rank-local blobs.
 *
 * Each chunk is one GCM message: a fresh random 96-bit nonce, a 128-bit
 * tag, and additional authenticated data (AAD) that binds the ciphertext
 * to its place -- tensor name, dtype, global shape, the chunk's offset
 * and shape, the step, and a random id of the save -- so a chunk moved to
 * another tensor, offset, step or save (another run's, or an earlier save
 * of the same step) fails to authenticate.  The xxh3 checksums of an encrypted
 * chunk are of its ciphertext: they leak nothing about the weights, and a
 * checkpoint can be checked for damage without the key.
 */
#ifndef SHS_CRYPT_H
#define SHS_CRYPT_H

#include "source/meta.h"

#define SHS__NONCE_BYTES 12
#define SHS__TAG_BYTES 16
#define SHS__CIPHER_NAME "AES-256-GCM"

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
   shape of the chunk. */
#define SHS__AAD_MAX (32 + 16 + 16 + 32 + 3 * 8 * SHS_MAX_DIMS)
size_t shs__crypt_aad(unsigned char *out, const char *save_id, const char *name, shs_dtype dtype,
                      size_t ndim, const uint64_t *gshape, const uint64_t *off,
                      const uint64_t *shape, int64_t step);

/* A random save id: 16 lowercase hex digits from RAND_bytes. */
int shs__crypt_save_id(char out[17]);

/* Streaming encryption of one chunk. */
typedef struct shs__sealer shs__sealer;
/* Start a chunk: a fresh random nonce goes to `nonce`. */
int shs__seal_begin(shs__sealer **out, const shs__key *key, const unsigned char *aad, size_t aadlen,
                    unsigned char nonce[SHS__NONCE_BYTES]);
/* Encrypt n bytes of in into out (may be the same buffer). */
int shs__seal_update(shs__sealer *s, const void *in, void *out, size_t n);
/* Encrypt the n bytes at src through s in pieces of SHS__SEAL_PIECE
   bytes, handing each piece of ciphertext in order to sink(ctx, offset,
   bytes, len) on the calling thread, while a helper thread encrypts the
   pieces ahead into `ring` (SHS__SEAL_RING pieces, the caller's): GCM
   runs next to the checksum and the write.  Stops at the first error of
   either side (a sink's status is returned as is).  Without a thread
   (one piece, or pthread_create failing) it works alone. */
#define SHS__SEAL_PIECE ((size_t)1 << 20)
#define SHS__SEAL_RING 4
typedef int (*shs__seal_sink)(void *ctx, uint64_t at, const void *data, size_t len);
int shs__seal_stream(shs__sealer *s, const void *src, uint64_t n, unsigned char *ring,
                     shs__seal_sink sink, void *ctx);
/* Finish the chunk: its tag. */
int shs__seal_end(shs__sealer *s, unsigned char tag[SHS__TAG_BYTES]);
void shs__seal_free(shs__sealer *s);

/* Decrypt chunk c of tensor t of model m (its n bytes of ciphertext at
   src, already checked against its xxh3) into buf -- src may be buf: in
   place -- and authenticate it.  SHS_EKEY when there is no key or it is
   not the checkpoint's; SHS_ECHECKSUM, naming the file and tensor, when
   the tag does not match (a changed byte, a moved chunk, a changed
   metadata.json): buf is then wiped. */
int shs__crypt_open_chunk(const shs__key *key, const shs__meta *m, const char *dir,
                          const shs__mtensor *t, const shs__mchunk *c, const void *src, void *buf,
                          uint64_t n);
/* Authenticate chunk c without decrypting it (verify): the same checks
   and errors, from GHASH over the ciphertext alone, on two threads for a
   chunk of 1 MiB or more; no plaintext is made. */
int shs__crypt_auth_chunk(const shs__key *key, const shs__meta *m, const char *dir,
                          const shs__mtensor *t, const shs__mchunk *c, const void *src, uint64_t n);

/* The checkpoint m needs a key: SHS_EKEY "encrypted ... key required"
   when key is NULL, "wrong key" when its id is not the checkpoint's.
   SHS_OK for an unencrypted checkpoint (any key). */
int shs__crypt_check_key(const shs__meta *m, const shs__key *key, const char *dir);

/* "<24 hex nonce><32 hex tag>", as metadata.json's "aes_gcm" holds it. */
void shs__crypt_hex_nt(char out[57], const unsigned char nonce[SHS__NONCE_BYTES],
                       const unsigned char tag[SHS__TAG_BYTES]);
/* Parse it back; -1 unless exactly 56 lowercase hex digits. */
int shs__crypt_parse_nt(const char *s, unsigned char nonce[SHS__NONCE_BYTES],
                        unsigned char tag[SHS__TAG_BYTES]);

#endif
