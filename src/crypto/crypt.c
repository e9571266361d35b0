/*
 * crypt.c -- encryption at rest: keys, the AAD that binds a chunk to its
 * place, the key check and metadata.json's MAC, and version 3's chunks
 * (one GCM message each).  Version 4's segments: crypt_segs.c.  Format:
 * crypt.h, docs/encryption.md.
 */
#include "crypto/crypt_int.h"

#include "checkpoint/chunk_read.h"

#include "store/io.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- keys ---- */

static const char k_id_label[] = "shardsafe key id v1";

int shs__key_from_bytes(shs__key *out, const void *key, size_t len)
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    if (!key || len != SHS_KEY_BYTES)
        return shs__err(SHS_EKEY, "an encryption key is %d bytes, not %zu", SHS_KEY_BYTES,
                        key ? len : 0);
    memcpy(out->k, key, SHS_KEY_BYTES);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
             EVP_DigestUpdate(ctx, k_id_label, sizeof k_id_label) == 1 &&
             EVP_DigestUpdate(ctx, out->k, SHS_KEY_BYTES) == 1 &&
             EVP_DigestFinal_ex(ctx, md, &mdlen) == 1 && mdlen == 32;
    EVP_MD_CTX_free(ctx);
    if (!ok) {
        shs__key_wipe(out);
        return shs__err(SHS_ENOMEM, "libcrypto: cannot compute the key id");
    }
    for (int i = 0; i < 8; i++)
        snprintf(out->id + 2 * i, 3, "%02x", md[i]);
    return SHS_OK;
}

void shs__key_wipe(shs__key *k)
{
    if (k)
        OPENSSL_cleanse(k, sizeof *k);
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* 2n hex digits (either case) into n bytes; -1 if anything else. */
static int unhex(unsigned char *out, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int a = hexval(s[2 * i]), b = a < 0 ? -1 : hexval(s[2 * i + 1]);
        if (b < 0)
            return -1;
        out[i] = (unsigned char)(a * 16 + b);
    }
    return 0;
}

/* The text of a key: 64 hex digits, optionally followed by one newline
   (a file written by `openssl rand -hex 32 > key`). */
static int key_from_hex(shs__key *out, const char *s, size_t len, const char *what)
{
    unsigned char raw[SHS_KEY_BYTES];
    if (len == 2 * SHS_KEY_BYTES + 1 && s[len - 1] == '\n')
        len--;
    if (len != 2 * SHS_KEY_BYTES || unhex(raw, s, SHS_KEY_BYTES) < 0)
        return shs__err(SHS_EKEY,
                        "%s: a key is %d raw bytes or %d hex digits (e.g. `openssl rand -hex "
                        "32`), not %zu bytes of that",
                        what, SHS_KEY_BYTES, 2 * SHS_KEY_BYTES, len);
    int rc = shs__key_from_bytes(out, raw, sizeof raw);
    OPENSSL_cleanse(raw, sizeof raw);
    return rc;
}

int shs__key_load(shs__key *out, const char *file, const char *env)
{
    int has_file = file && *file, has_env = env && *env;
    memset(out, 0, sizeof *out);
    if (has_file == has_env)
        return shs__err(SHS_EKEY, "an encryption key comes from exactly one of a key file and an "
                                  "environment variable");
    if (has_env) {
        const char *v = getenv(env);
        if (!v || !*v)
            return shs__err(SHS_EKEY, "environment variable %s (the encryption key) is not set",
                            env);
        char what[300];
        snprintf(what, sizeof what, "environment variable %s", env);
        return key_from_hex(out, v, strlen(v), what);
    }
    char *buf = NULL;
    size_t len = 0;
    int rc = shs__read_file(&buf, &len, file, 4096);
    if (rc == SHS_ENOMEM)
        return rc;
    if (rc < 0)
        return shs__err_prefix(SHS_EKEY, "cannot read the encryption key file");
    if (len == SHS_KEY_BYTES)
        rc = shs__key_from_bytes(out, buf, len);
    else
        rc = key_from_hex(out, buf, len, file);
    OPENSSL_cleanse(buf, len);
    shs__free(buf);
    return rc;
}

/* ---- the AAD ---- */

static const char k_aad_label[] = "shardsafe chunk v1";  /* version 3 */
static const char k_aad_label4[] = "shardsafe chunk v4"; /* version 4 */

static unsigned char *put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        *p++ = (unsigned char)(v >> (8 * i));
    return p;
}

size_t shs__crypt_aad(unsigned char *out, const char *save_id, const char *name, shs_dtype dtype,
                      size_t ndim, const uint64_t *gshape, const uint64_t *off,
                      const uint64_t *shape, int64_t step, uint64_t segment)
{
    unsigned char *p = out;
    unsigned int mdlen = 0;
    memset(p, 0, 48);
    if (segment)
        memcpy(p, k_aad_label4, sizeof k_aad_label4);
    else
        memcpy(p, k_aad_label, sizeof k_aad_label);
    p += 32;
    if (save_id)
        memcpy(p, save_id, strnlen(save_id, 16));
    p += 16;
    p = put64(p, (uint64_t)step);
    p = put64(p, ((uint64_t)dtype << 32) | ndim);
    /* a digest keeps the AAD bounded whatever the name's length; a
       failure leaves zeros, which then fail to authenticate */
    memset(p, 0, 32);
    EVP_Digest(name, strlen(name), p, &mdlen, EVP_sha256(), NULL);
    p += 32;
    for (size_t d = 0; d < ndim; d++)
        p = put64(p, gshape[d]);
    for (size_t d = 0; d < ndim; d++)
        p = put64(p, off[d]);
    for (size_t d = 0; d < ndim; d++)
        p = put64(p, shape[d]);
    if (segment)
        p = put64(p, segment);
    return (size_t)(p - out);
}

size_t shs__crypt_chunk_aad(unsigned char *out, const shs__meta *m, const shs__mtensor *t,
                            const shs__mchunk *c)
{
    return shs__crypt_aad(out, m->save_id, t->name, t->dtype, t->ndim, t->gshape, c->off, c->shape,
                          m->step, m->version >= SHS__META_VERSION_STREAM ? m->segment : 0);
}

int shs__crypt_save_id(char out[17])
{
    unsigned char r[8];
    if (RAND_bytes(r, sizeof r) != 1)
        return shs__err(SHS_EIO, "libcrypto: no random bytes for a save id");
    shs__crypt_hex(out, r, sizeof r);
    return SHS_OK;
}

int shs__crypt_hkdf(unsigned char *out, size_t outlen, const shs__key *key,
                    const unsigned char *salt, size_t saltlen, const char *info)
{
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
    size_t len = outlen;
    int ok = ctx && EVP_PKEY_derive_init(ctx) == 1 &&
             EVP_PKEY_CTX_set_hkdf_md(ctx, EVP_sha256()) == 1 &&
             (saltlen == 0 || EVP_PKEY_CTX_set1_hkdf_salt(ctx, salt, (int)saltlen) == 1) &&
             EVP_PKEY_CTX_set1_hkdf_key(ctx, key->k, SHS_KEY_BYTES) == 1 &&
             EVP_PKEY_CTX_add1_hkdf_info(ctx, (const unsigned char *)info, (int)strlen(info)) ==
                 1 &&
             EVP_PKEY_derive(ctx, out, &len) == 1 && len == outlen;
    EVP_PKEY_CTX_free(ctx);
    return ok ? 0 : -1;
}

/* ---- the key of a checkpoint ---- */

static const char *cipher_of(const shs__meta *m)
{
    return m->version >= SHS__META_VERSION_STREAM ? SHS__CIPHER_STREAM : SHS__CIPHER_NAME;
}

/* The key is there and is the checkpoint's (by its id). */
int shs__crypt_check_key_id(const shs__meta *m, const shs__key *key, const char *dir)
{
    if (!key)
        return shs__err(SHS_EKEY,
                        "%s: encrypted (%s, key id %s): key required "
                        "(encrypt_key_file or encrypt_key_env; CLI --key-file or --key-env)",
                        dir, cipher_of(m), m->key_id);
    if (strcmp(key->id, m->key_id) != 0)
        return shs__err(SHS_EKEY,
                        "%s: wrong key: the checkpoint was encrypted with key id %s, the key "
                        "given has id %s",
                        dir, m->key_id, key->id);
    return SHS_OK;
}

static const char k_mac_label[] = "shardsafe metadata mac v1";

/* HMAC-SHA256 of `digest` under the key's metadata subkey. */
static int meta_mac(unsigned char mac[SHS__MAC_BYTES], const shs__key *key,
                    const unsigned char digest[32])
{
    unsigned char k[32];
    unsigned int len = 0;
    int ok = shs__crypt_hkdf(k, sizeof k, key, NULL, 0, k_mac_label) == 0 &&
             HMAC(EVP_sha256(), k, (int)sizeof k, digest, 32, mac, &len) && len == SHS__MAC_BYTES;
    OPENSSL_cleanse(k, sizeof k);
    return ok ? 0 : -1;
}

int shs__crypt_check_key(const shs__meta *m, const shs__key *key, const char *dir)
{
    unsigned char mac[SHS__MAC_BYTES];
    int rc;
    if (!m->encrypted)
        return SHS_OK;
    if ((rc = shs__crypt_check_key_id(m, key, dir)) < 0)
        return rc;
    if (m->version < SHS__META_VERSION_STREAM)
        return SHS_OK; /* version 3 has no MAC */
    if (meta_mac(mac, key, m->digest) < 0)
        return shs__err(SHS_EIO, "libcrypto: cannot compute the MAC of %s/metadata.json", dir);
    if (CRYPTO_memcmp(mac, m->mac, sizeof mac) != 0)
        return shs__err(SHS_ECHECKSUM,
                        "%s/metadata.json: does not authenticate under the key (metadata_mac, "
                        "HMAC-SHA256): it was changed after the save, or not written with this "
                        "key",
                        dir);
    return SHS_OK;
}

int shs__crypt_require(const shs__meta *m, const shs__key *key, const char *dir)
{
    if (key && !m->encrypted)
        return shs__err(SHS_EKEY,
                        "%s: not encrypted, but a key was given: nothing in it is authenticated "
                        "by the key (it may be an encrypted checkpoint stripped of its "
                        "encryption); read it without the key if it is meant to be unencrypted",
                        dir);
    return shs__crypt_check_key(m, key, dir);
}

/* ---- metadata.json's MAC (version 4) ----
 * The sealed text ends with MAC_KEY <64 hex> SEAL_KEY <16 hex> TAIL_END:
 * the MAC, then the seal of shs__meta_seal (meta_seal.c), which is always
 * the last member. */

#define MAC_KEY "\"metadata_mac\":\""
#define SEAL_KEY "\",\n\"metadata_xxh3\":\""
#define TAIL_END "\"\n}\n"
#define MAC_HEX (2 * SHS__MAC_BYTES)
#define MAC_TAIL (sizeof MAC_KEY - 1 + MAC_HEX + sizeof SEAL_KEY - 1 + 16 + sizeof TAIL_END - 1)
/* where the digits are, from the end of the text */
#define MAC_AT (MAC_TAIL - (sizeof MAC_KEY - 1))
#define XXH_AT (16 + sizeof TAIL_END - 1)

/* SHA-256 of text[0, len) with the MAC's and the seal's digits read as
   '0' (text is changed, then put back). */
static int meta_digest(unsigned char out[32], char *text, size_t len)
{
    char mac[MAC_HEX], xxh[16];
    unsigned int mdlen = 0;
    memcpy(mac, text + len - MAC_AT, MAC_HEX);
    memcpy(xxh, text + len - XXH_AT, 16);
    memset(text + len - MAC_AT, '0', MAC_HEX);
    memset(text + len - XXH_AT, '0', 16);
    int ok = EVP_Digest(text, len, out, &mdlen, EVP_sha256(), NULL) == 1 && mdlen == 32;
    memcpy(text + len - MAC_AT, mac, MAC_HEX);
    memcpy(text + len - XXH_AT, xxh, 16);
    return ok ? 0 : -1;
}

/* The text ends as shs__crypt_meta_seal writes it. */
static int has_mac_tail(const char *text, size_t len)
{
    return len >= MAC_TAIL && memcmp(text + len - MAC_TAIL, MAC_KEY, sizeof MAC_KEY - 1) == 0 &&
           memcmp(text + len - MAC_AT + MAC_HEX, SEAL_KEY, sizeof SEAL_KEY - 1) == 0 &&
           memcmp(text + len - (sizeof TAIL_END - 1), TAIL_END, sizeof TAIL_END - 1) == 0;
}

int shs__crypt_meta_seal(char **out, size_t *out_len, const char *text, size_t len,
                         const shs__key *key)
{
    size_t n = len;
    char *body = NULL, *r0 = NULL;
    unsigned char digest[32], mac[SHS__MAC_BYTES];
    size_t r0len = 0;
    int rc = SHS_OK;
    *out = NULL;
    while (n && text[n - 1] != '}')
        n--;
    if (!n)
        return shs__err(SHS_EINVAL, "metadata.json: not a JSON object");
    n--; /* the closing brace */
    while (n && (text[n - 1] == ' ' || text[n - 1] == '\n' || text[n - 1] == '\t' ||
                 text[n - 1] == '\r'))
        n--;
    int members = n && text[n - 1] != '{';
    /* the text, then the MAC member (its digits '0' for now) */
    size_t blen = n + (size_t)members + 1 + sizeof MAC_KEY - 1 + MAC_HEX + 3;
    if (!(body = shs__malloc(blen + 1)))
        return shs__err(SHS_ENOMEM, "out of memory writing metadata.json");
    memcpy(body, text, n);
    size_t at = n;
    if (members)
        body[at++] = ',';
    body[at++] = '\n';
    memcpy(body + at, MAC_KEY, sizeof MAC_KEY - 1);
    at += sizeof MAC_KEY - 1;
    size_t mac_at = at;
    memset(body + at, '0', MAC_HEX);
    at += MAC_HEX;
    memcpy(body + at, "\"\n}", 4);
    /* sealed once to find what the MAC covers, then again with it */
    if (!(r0 = shs__meta_seal(body, blen, &r0len)) || !has_mac_tail(r0, r0len)) {
        rc = shs__err(SHS_ENOMEM, "out of memory writing metadata.json");
        goto done;
    }
    if (meta_digest(digest, r0, r0len) < 0 || meta_mac(mac, key, digest) < 0) {
        rc = shs__err(SHS_EIO, "libcrypto: cannot compute the MAC of metadata.json");
        goto done;
    }
    char hex[MAC_HEX + 1];
    shs__crypt_hex(hex, mac, sizeof mac);
    memcpy(body + mac_at, hex, MAC_HEX);
    if (!(*out = shs__meta_seal(body, blen, out_len)))
        rc = shs__err(SHS_ENOMEM, "out of memory writing metadata.json");
done:
    shs__free(body);
    shs__free(r0);
    return rc;
}

int shs__crypt_meta_digest(shs__meta *m, char *buf, size_t len, const char *value, const char *path)
{
    if (!has_mac_tail(buf, len) || !value || strlen(value) != MAC_HEX ||
        memcmp(value, buf + len - MAC_AT, MAC_HEX) != 0 ||
        shs__crypt_unhex(m->mac, sizeof m->mac, value, MAC_HEX) < 0)
        return shs__err(SHS_ECORRUPT,
                        "%s: version %d ends with \"metadata_mac\" (64 hex digits) and then "
                        "\"metadata_xxh3\"",
                        path, SHS__META_VERSION_STREAM);
    if (meta_digest(m->digest, buf, len) < 0)
        return shs__err(SHS_EIO, "libcrypto: cannot hash %s", path);
    return SHS_OK;
}

/* ---- version 3: one GCM message per chunk ---- */

/* EVP lengths are ints: long buffers go in slices. */
#define SLICE (1 << 30)
/* verify decrypts through a scratch buffer of this size */
#define SCRATCH ((size_t)64 << 10)

int shs__crypt_mismatch(const char *dir, const shs__meta *m, const shs__mtensor *t,
                        const shs__mchunk *c, long long seg)
{
    /* the one message of a chunk whose stored bytes fail a check
       (chunk_read.h), naming the segment's bytes in the file */
    char part[64] = "";
    uint64_t n = c->b1 - c->b0, at = 0, len = n;
    if (seg >= 0) {
        snprintf(part, sizeof part, "segment %lld of %llu", seg, (unsigned long long)c->ntags);
        at = (uint64_t)seg * m->segment;
        at = at < n ? at : n;
        len = n - at < m->segment ? n - at : m->segment;
    }
    return shs__chunk_err(SHS_ECHECKSUM, dir, m, t, c, part, at, len,
                          "does not authenticate (%s tag mismatch): its bytes, its place "
                          "(tensor, offset, step) or metadata.json were changed",
                          cipher_of(m));
}

/* Decrypt (buf) or only authenticate (buf NULL: through a scratch
   buffer) a version-3 chunk. */
static int open_v3(const shs__key *key, const shs__meta *m, const char *dir, const shs__mtensor *t,
                   const shs__mchunk *c, const void *src, void *buf, uint64_t n)
{
    unsigned char aad[SHS__AAD_MAX], tag[SHS__TAG_BYTES], tail[16];
    unsigned char *scratch = buf ? NULL : shs__malloc(SCRATCH);
    int len = 0;
    if (!buf && !scratch)
        return shs__err(SHS_ENOMEM, "out of memory authenticating '%s'", t->name);
    size_t alen = shs__crypt_chunk_aad(aad, m, t, c);
    memcpy(tag, c->tag, sizeof tag);
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int ok = ctx && EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) == 1 &&
             EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, SHS__NONCE_BYTES, NULL) == 1 &&
             EVP_DecryptInit_ex(ctx, NULL, NULL, key->k, c->nonce) == 1 &&
             EVP_DecryptUpdate(ctx, NULL, &len, aad, (int)alen) == 1;
    unsigned char *p = buf;
    const unsigned char *q = src;
    size_t max = buf ? SLICE : SCRATCH;
    for (uint64_t left = n; ok && left;) {
        int piece = left > max ? (int)max : (int)left;
        ok = EVP_DecryptUpdate(ctx, buf ? p : scratch, &len, q, piece) == 1 && len == piece;
        p += buf ? piece : 0;
        q += piece;
        left -= (uint64_t)piece;
    }
    int auth = ok && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, SHS__TAG_BYTES, tag) == 1 &&
               EVP_DecryptFinal_ex(ctx, tail, &len) == 1;
    int no_ctx = !ctx;
    EVP_CIPHER_CTX_free(ctx);
    if (scratch) {
        OPENSSL_cleanse(scratch, SCRATCH);
        shs__free(scratch);
    }
    if (!ok) {
        if (buf)
            OPENSSL_cleanse(buf, (size_t)n);
        return no_ctx ? shs__err(SHS_ENOMEM, "out of memory starting decryption")
                      : shs__err(SHS_EIO, "libcrypto: AES-256-GCM decryption failed");
    }
    if (!auth) {
        /* never hand out unauthenticated plaintext */
        if (buf)
            OPENSSL_cleanse(buf, (size_t)n);
        return shs__crypt_mismatch(dir, m, t, c, -1);
    }
    return SHS_OK;
}

/* ---- opening (load, read API, verify) ---- */

int shs__crypt_open_chunk(const shs__key *key, const shs__meta *m, const char *dir,
                          const shs__mtensor *t, const shs__mchunk *c, const void *src, void *buf,
                          uint64_t n)
{
    /* buf NULL: authenticate only (shs__crypt_auth_chunk) */
    int rc;
    if (!c->enc)
        return SHS_OK;
    if ((rc = shs__crypt_check_key_id(m, key, dir)) < 0)
        return rc;
    if (m->version >= SHS__META_VERSION_STREAM)
        return shs__crypt_open_v4(key, m, dir, t, c, src, buf, n);
    return open_v3(key, m, dir, t, c, src, buf, n);
}

int shs__crypt_auth_chunk(const shs__key *key, const shs__meta *m, const char *dir,
                          const shs__mtensor *t, const shs__mchunk *c, const void *src, uint64_t n)
{
    return shs__crypt_open_chunk(key, m, dir, t, c, src, NULL, n);
}

/* ---- metadata.json's spelling ---- */

void shs__crypt_hex(char *out, const unsigned char *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

int shs__crypt_unhex(unsigned char *out, size_t n, const char *s, size_t len)
{
    if (len != 2 * n)
        return -1;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return -1;
    return unhex(out, s, n);
}

void shs__crypt_hex_nt(char out[57], const unsigned char nonce[SHS__NONCE_BYTES],
                       const unsigned char tag[SHS__TAG_BYTES])
{
    shs__crypt_hex(out, nonce, SHS__NONCE_BYTES);
    shs__crypt_hex(out + 2 * SHS__NONCE_BYTES, tag, SHS__TAG_BYTES);
}

int shs__crypt_parse_nt(const char *s, unsigned char nonce[SHS__NONCE_BYTES],
                        unsigned char tag[SHS__TAG_BYTES])
{
    size_t len = strlen(s);
    if (len != 2 * (SHS__NONCE_BYTES + SHS__TAG_BYTES))
        return -1;
    return shs__crypt_unhex(nonce, SHS__NONCE_BYTES, s, 2 * SHS__NONCE_BYTES) < 0 ||
                   shs__crypt_unhex(tag, SHS__TAG_BYTES, s + 2 * SHS__NONCE_BYTES,
                                    2 * SHS__TAG_BYTES) < 0
               ? -1
               : 0;
}

/* ---- public ---- */

int shs_key_load(unsigned char key[SHS_KEY_BYTES], const char *key_file, const char *key_env)
{
    shs__key k;
    if (!key)
        return shs__err(SHS_EINVAL, "shs_key_load: NULL key buffer");
    int rc = shs__key_load(&k, key_file, key_env);
    if (rc == SHS_OK)
        memcpy(key, k.k, SHS_KEY_BYTES);
    shs__key_wipe(&k);
    return rc;
}
