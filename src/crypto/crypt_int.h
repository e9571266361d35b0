/*
 * crypt_int.h -- what crypt.c (keys, the AAD, metadata.json's MAC,
 * version 3) and crypt_segs.c (version 4's segments) share.
 */
#ifndef SHS_CRYPT_INT_H
#define SHS_CRYPT_INT_H

#include "crypto/crypt.h"

/* HKDF-SHA256 (RFC 5869) of the key: `outlen` bytes for `info` (a label),
   with `salt` (may be NULL when saltlen is 0).  -1 when libcrypto
   fails. */
int shs__crypt_hkdf(unsigned char *out, size_t outlen, const shs__key *key,
                    const unsigned char *salt, size_t saltlen, const char *info);

/* The key is there and is the checkpoint's, by its id (SHS_EKEY "key
   required" / "wrong key"); no MAC check. */
int shs__crypt_check_key_id(const shs__meta *m, const shs__key *key, const char *dir);

/* The error of a chunk that does not authenticate (open and verify);
   `seg` >= 0 names the segment (version 4). */
int shs__crypt_mismatch(const char *dir, const shs__meta *m, const shs__mtensor *t,
                        const shs__mchunk *c, long long seg);

/* The AAD of chunk c of tensor t of m, as its version builds it. */
size_t shs__crypt_chunk_aad(unsigned char *out, const shs__meta *m, const shs__mtensor *t,
                            const shs__mchunk *c);

/* Version 4 (crypt_segs.c): the whole chunk, into buf or (buf NULL) only
   authenticated. */
int shs__crypt_open_v4(const shs__key *key, const shs__meta *m, const char *dir,
                       const shs__mtensor *t, const shs__mchunk *c, const void *src, void *buf,
                       uint64_t n);

#endif
