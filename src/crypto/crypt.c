/*
 * crypt.c -- encryption at rest: keys, the AAD that binds a chunk to its
 * place, streaming AES-256-GCM for the save path and in-place decryption
 * for the one checksummed read path (crypt.h, docs/encryption.md).
 */
#include "crypto/crypt.h"

#include "store/io.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <limits.h>
#include <pthread.h>
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

static const char k_aad_label[] = "shardsafe chunk v1";

static unsigned char *put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        *p++ = (unsigned char)(v >> (8 * i));
    return p;
}

size_t shs__crypt_aad(unsigned char *out, const char *save_id, const char *name, shs_dtype dtype,
                      size_t ndim, const uint64_t *gshape, const uint64_t *off,
                      const uint64_t *shape, int64_t step)
{
    unsigned char *p = out;
    unsigned int mdlen = 0;
    memset(p, 0, 48);
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
    return (size_t)(p - out);
}

int shs__crypt_save_id(char out[17])
{
    unsigned char r[8];
    if (RAND_bytes(r, sizeof r) != 1)
        return shs__err(SHS_EIO, "libcrypto: no random bytes for a save id");
    for (int i = 0; i < 8; i++)
        snprintf(out + 2 * i, 3, "%02x", r[i]);
    return SHS_OK;
}

/* ---- sealing (save) ---- */

struct shs__sealer {
    EVP_CIPHER_CTX *ctx;
};

/* EVP lengths are ints: long buffers go in slices. */
#define SLICE (1 << 30)

int shs__seal_begin(shs__sealer **out, const shs__key *key, const unsigned char *aad, size_t aadlen,
                    unsigned char nonce[SHS__NONCE_BYTES])
{
    int len;
    *out = NULL;
    if (RAND_bytes(nonce, SHS__NONCE_BYTES) != 1)
        return shs__err(SHS_EIO, "libcrypto: no random bytes for a nonce");
    shs__sealer *s = shs__calloc(1, sizeof *s);
    if (!s || !(s->ctx = EVP_CIPHER_CTX_new())) {
        shs__free(s);
        return shs__err(SHS_ENOMEM, "out of memory starting encryption");
    }
    if (EVP_EncryptInit_ex(s->ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1 ||
        EVP_CIPHER_CTX_ctrl(s->ctx, EVP_CTRL_GCM_SET_IVLEN, SHS__NONCE_BYTES, NULL) != 1 ||
        EVP_EncryptInit_ex(s->ctx, NULL, NULL, key->k, nonce) != 1 ||
        EVP_EncryptUpdate(s->ctx, NULL, &len, aad, (int)aadlen) != 1) {
        shs__seal_free(s);
        return shs__err(SHS_EIO, "libcrypto: cannot start AES-256-GCM");
    }
    *out = s;
    return SHS_OK;
}

int shs__seal_update(shs__sealer *s, const void *in, void *out, size_t n)
{
    const unsigned char *i = in;
    unsigned char *o = out;
    while (n) {
        int piece = n > SLICE ? SLICE : (int)n, len = 0;
        if (EVP_EncryptUpdate(s->ctx, o, &len, i, piece) != 1 || len != piece)
            return shs__err(SHS_EIO, "libcrypto: AES-256-GCM encryption failed");
        i += piece;
        o += piece;
        n -= (size_t)piece;
    }
    return SHS_OK;
}

/* The two sides of shs__seal_stream: the helper encrypts piece k into
   ring slot k % SHS__SEAL_RING once the caller has consumed piece
   k - SHS__SEAL_RING; the caller consumes pieces as they are made. */
typedef struct seal_pipe {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    shs__sealer *s;
    const unsigned char *src;
    uint64_t n, pieces;
    unsigned char *ring;
    uint64_t made, used; /* pieces encrypted / consumed */
    int stop;            /* the caller failed: the helper stops */
    int rc;              /* the helper's status */
    char msg[512];       /* its message (messages are per thread) */
} seal_pipe;

static size_t piece_len(const seal_pipe *p, uint64_t k)
{
    uint64_t at = k * SHS__SEAL_PIECE;
    return (size_t)(p->n - at < SHS__SEAL_PIECE ? p->n - at : SHS__SEAL_PIECE);
}

static void *seal_helper(void *arg)
{
    seal_pipe *p = arg;
    for (uint64_t k = 0; k < p->pieces; k++) {
        pthread_mutex_lock(&p->mu);
        while (!p->stop && k - p->used >= SHS__SEAL_RING)
            pthread_cond_wait(&p->cv, &p->mu);
        int stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop)
            break;
        int rc = shs__seal_update(p->s, p->src + k * SHS__SEAL_PIECE,
                                  p->ring + (k % SHS__SEAL_RING) * SHS__SEAL_PIECE,
                                  piece_len(p, k));
        pthread_mutex_lock(&p->mu);
        if (rc < 0) {
            p->rc = rc;
            snprintf(p->msg, sizeof p->msg, "%s", shs_last_error());
        } else {
            p->made = k + 1;
        }
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        if (rc < 0)
            break;
    }
    return NULL;
}

int shs__seal_stream(shs__sealer *s, const void *src, uint64_t n, unsigned char *ring,
                     shs__seal_sink sink, void *ctx)
{
    seal_pipe p = { .s = s, .src = src, .n = n, .ring = ring, .rc = SHS_OK };
    p.pieces = (n + SHS__SEAL_PIECE - 1) / SHS__SEAL_PIECE;
    pthread_t th;
    int rc = SHS_OK, threaded = 0;
    if (p.pieces > 1) {
        pthread_mutex_init(&p.mu, NULL);
        pthread_cond_init(&p.cv, NULL);
        threaded = pthread_create(&th, NULL, seal_helper, &p) == 0;
        if (!threaded) {
            pthread_mutex_destroy(&p.mu);
            pthread_cond_destroy(&p.cv);
        }
    }
    for (uint64_t k = 0; k < p.pieces && rc == SHS_OK; k++) {
        unsigned char *slot = ring + (threaded ? (k % SHS__SEAL_RING) * SHS__SEAL_PIECE : 0);
        size_t len = piece_len(&p, k);
        if (!threaded) {
            if ((rc = shs__seal_update(s, p.src + k * SHS__SEAL_PIECE, slot, len)) < 0)
                break;
            rc = sink(ctx, k * SHS__SEAL_PIECE, slot, len);
            continue;
        }
        pthread_mutex_lock(&p.mu);
        while (p.made <= k && p.rc == SHS_OK)
            pthread_cond_wait(&p.cv, &p.mu);
        int made = p.made > k;
        pthread_mutex_unlock(&p.mu);
        rc = made ? sink(ctx, k * SHS__SEAL_PIECE, slot, len) : shs__err(p.rc, "%s", p.msg);
        pthread_mutex_lock(&p.mu);
        if (rc < 0)
            p.stop = 1;
        else
            p.used = k + 1;
        pthread_cond_broadcast(&p.cv);
        pthread_mutex_unlock(&p.mu);
    }
    if (threaded) {
        pthread_join(th, NULL);
        pthread_mutex_destroy(&p.mu);
        pthread_cond_destroy(&p.cv);
    }
    return rc;
}

int shs__seal_end(shs__sealer *s, unsigned char tag[SHS__TAG_BYTES])
{
    unsigned char tail[16];
    int len = 0;
    if (EVP_EncryptFinal_ex(s->ctx, tail, &len) != 1 || len != 0 ||
        EVP_CIPHER_CTX_ctrl(s->ctx, EVP_CTRL_GCM_GET_TAG, SHS__TAG_BYTES, tag) != 1)
        return shs__err(SHS_EIO, "libcrypto: AES-256-GCM could not finish");
    return SHS_OK;
}

void shs__seal_free(shs__sealer *s)
{
    if (!s)
        return;
    EVP_CIPHER_CTX_free(s->ctx);
    shs__free(s);
}

/* ---- opening (load, read API, verify) ---- */

int shs__crypt_check_key(const shs__meta *m, const shs__key *key, const char *dir)
{
    if (!m->encrypted)
        return SHS_OK;
    if (!key)
        return shs__err(SHS_EKEY,
                        "%s: encrypted (" SHS__CIPHER_NAME ", key id %s): key required "
                        "(encrypt_key_file or encrypt_key_env; CLI --key-file or --key-env)",
                        dir, m->key_id);
    if (strcmp(key->id, m->key_id) != 0)
        return shs__err(SHS_EKEY,
                        "%s: wrong key: the checkpoint was encrypted with key id %s, the key "
                        "given has id %s",
                        dir, m->key_id, key->id);
    return SHS_OK;
}

/* The error of a chunk whose GCM tag does not match (open and verify). */
static int tag_mismatch(const char *dir, const shs__meta *m, const shs__mtensor *t,
                        const shs__mchunk *c)
{
    return shs__err(SHS_ECHECKSUM,
                    "%s/%s: tensor '%s': chunk does not authenticate (" SHS__CIPHER_NAME
                    " tag mismatch): its bytes, its place (tensor, offset, step) or "
                    "metadata.json were changed",
                    dir, m->f[c->file].name, t->name);
}

int shs__crypt_open_chunk(const shs__key *key, const shs__meta *m, const char *dir,
                          const shs__mtensor *t, const shs__mchunk *c, const void *src, void *buf,
                          uint64_t n)
{
    unsigned char aad[SHS__AAD_MAX], tag[SHS__TAG_BYTES];
    int rc, len = 0;
    if (!c->enc)
        return SHS_OK;
    if ((rc = shs__crypt_check_key(m, key, dir)) < 0)
        return rc;
    size_t alen = shs__crypt_aad(aad, m->save_id, t->name, t->dtype, t->ndim, t->gshape, c->off,
                                 c->shape, m->step);
    memcpy(tag, c->tag, sizeof tag);
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    if (!ctx)
        return shs__err(SHS_ENOMEM, "out of memory starting decryption");
    int ok = EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) == 1 &&
             EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, SHS__NONCE_BYTES, NULL) == 1 &&
             EVP_DecryptInit_ex(ctx, NULL, NULL, key->k, c->nonce) == 1 &&
             EVP_DecryptUpdate(ctx, NULL, &len, aad, (int)alen) == 1;
    unsigned char *p = buf;
    const unsigned char *q = src;
    for (uint64_t left = n; ok && left;) {
        int piece = left > SLICE ? SLICE : (int)left;
        ok = EVP_DecryptUpdate(ctx, p, &len, q, piece) == 1 && len == piece;
        p += piece;
        q += piece;
        left -= (uint64_t)piece;
    }
    if (!ok) {
        EVP_CIPHER_CTX_free(ctx);
        return shs__err(SHS_EIO, "libcrypto: AES-256-GCM decryption failed");
    }
    unsigned char tail[16];
    ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, SHS__TAG_BYTES, tag) == 1 &&
         EVP_DecryptFinal_ex(ctx, tail, &len) == 1;
    EVP_CIPHER_CTX_free(ctx);
    if (!ok) {
        /* never hand out unauthenticated plaintext */
        OPENSSL_cleanse(buf, (size_t)n);
        return tag_mismatch(dir, m, t, c);
    }
    return SHS_OK;
}

/*
 * Authenticating a chunk without decrypting it (verify).
 *
 * GCM is CTR encryption plus GHASH over the ciphertext; verify needs only
 * the tag, so only GHASH is computed, by OpenSSL's own code, on two
 * threads, and no plaintext is ever made.  A GCM context under the key and
 * the chunk's nonce is given a byte string Y as AAD only (no data): its
 * tag T(Y) = E(J0) ^ (G(Y) ^ L(Y)) * H, where G(Y) is GHASH's running
 * value after the 16-byte blocks of Y (zero-padded), L(Y) = [8 len(Y), 0]
 * its length block, H = AES_K(0^128) and E(J0) = AES_K(nonce || 1).  So
 * G(Y) * H = T(Y) ^ E(J0) ^ L(Y) * H (products in GF(2^128), gf128_mul).
 * The chunk's GHASH input is A = aad, zeros to 16 bytes, then the
 * ciphertext C: split at a 16-byte boundary into A1 (aad, pad, the first
 * half of C) and A2 (the rest of C, k blocks), G(A) * H = (G(A1) * H) *
 * H^k ^ G(A2) * H, since each block multiplies the running value by H.
 * The tag is E(J0) ^ G(A) * H ^ [8 len(aad), 8 len(C)] * H, compared with
 * the stored one (CRYPTO_memcmp).  tests/test_crypt.c checks it against
 * the save's one-pass GCM at many lengths.  (A load decrypts with one-pass
 * GCM, which costs less CPU than GHASH and CTR apart; its parallelism is
 * across chunks, load.c.)
 */

/* Chunks from this size on use a helper thread; smaller ones run alone. */
#define AUTH_THREAD_MIN ((uint64_t)1 << 20)
/* GCM's limit on one message: 2^32 - 2 blocks of 16 bytes */
#define GCM_MAX_BYTES ((((uint64_t)1 << 32) - 2) * 16)

static void put_be64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (56 - 8 * i));
}

static uint64_t get_be64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* x = x * y in GCM's GF(2^128) (NIST SP 800-38D, algorithm 1: bit 0 is
   the most significant bit of byte 0); no branch on the values. */
static void gf128_mul(unsigned char x[16], const unsigned char y[16])
{
    uint64_t zh = 0, zl = 0, vh = get_be64(y), vl = get_be64(y + 8);
    for (int i = 0; i < 128; i++) {
        uint64_t bit = 0 - (uint64_t)((x[i / 8] >> (7 - i % 8)) & 1);
        zh ^= vh & bit;
        zl ^= vl & bit;
        uint64_t lsb = 0 - (vl & 1);
        vl = (vl >> 1) | (vh << 63);
        vh = (vh >> 1) ^ (0xe100000000000000ull & lsb);
    }
    put_be64(x, zh);
    put_be64(x + 8, zl);
}

/* x = x * h^k (square and multiply; k is a public length) */
static void gf128_mul_pow(unsigned char x[16], const unsigned char h[16], uint64_t k)
{
    unsigned char sq[16];
    memcpy(sq, h, 16);
    for (; k; k >>= 1) {
        if (k & 1)
            gf128_mul(x, sq);
        if (k > 1) {
            unsigned char t[16];
            memcpy(t, sq, 16);
            gf128_mul(sq, t);
            OPENSSL_cleanse(t, sizeof t);
        }
    }
    OPENSSL_cleanse(sq, sizeof sq);
}

/* H = AES_K(0^128) and E(J0) = AES_K(nonce || 0x00000001) */
static int gcm_blocks(const shs__key *key, const unsigned char nonce[SHS__NONCE_BYTES],
                      unsigned char h[16], unsigned char ej0[16])
{
    unsigned char in[32] = { 0 }, out[32];
    int len = 0;
    memcpy(in + 16, nonce, SHS__NONCE_BYTES);
    in[31] = 1;
    EVP_CIPHER_CTX *ecb = EVP_CIPHER_CTX_new();
    int ok = ecb && EVP_EncryptInit_ex(ecb, EVP_aes_256_ecb(), NULL, key->k, NULL) == 1 &&
             EVP_CIPHER_CTX_set_padding(ecb, 0) == 1 &&
             EVP_EncryptUpdate(ecb, out, &len, in, 32) == 1 && len == 32;
    EVP_CIPHER_CTX_free(ecb);
    memcpy(h, out, 16);
    memcpy(ej0, out + 16, 16);
    OPENSSL_cleanse(out, sizeof out);
    return ok ? 0 : -1;
}

/* gh = G(Y) * H for Y = (aad, zeros to 16 bytes, then the len bytes at
   ct); aad may be empty.  -1 when libcrypto fails. */
static int ghash_part(unsigned char gh[16], const shs__key *key,
                      const unsigned char nonce[SHS__NONCE_BYTES], const unsigned char h[16],
                      const unsigned char ej0[16], const unsigned char *aad, size_t alen,
                      const unsigned char *ct, uint64_t len)
{
    static const unsigned char zeros[16];
    unsigned char tail[16], lb[16];
    int olen = 0;
    size_t apad = (16 - alen % 16) % 16;
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int ok = ctx && EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) == 1 &&
             EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, SHS__NONCE_BYTES, NULL) == 1 &&
             EVP_EncryptInit_ex(ctx, NULL, NULL, key->k, nonce) == 1 &&
             (alen == 0 || EVP_EncryptUpdate(ctx, NULL, &olen, aad, (int)alen) == 1) &&
             (apad == 0 || EVP_EncryptUpdate(ctx, NULL, &olen, zeros, (int)apad) == 1);
    for (uint64_t left = len; ok && left;) {
        int piece = left > SLICE ? SLICE : (int)left;
        ok = EVP_EncryptUpdate(ctx, NULL, &olen, ct, piece) == 1;
        ct += piece;
        left -= (uint64_t)piece;
    }
    ok = ok && EVP_EncryptFinal_ex(ctx, tail, &olen) == 1 && olen == 0 &&
         EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, SHS__TAG_BYTES, gh) == 1;
    EVP_CIPHER_CTX_free(ctx);
    if (!ok)
        return -1;
    put_be64(lb, ((uint64_t)(alen + apad) + len) * 8);
    put_be64(lb + 8, 0);
    gf128_mul(lb, h);
    for (int i = 0; i < 16; i++)
        gh[i] ^= ej0[i] ^ lb[i];
    return 0;
}

/* The helper thread: G(A1) * H. */
typedef struct auth_job {
    const shs__key *key;
    const unsigned char *nonce, *h, *ej0, *aad, *src;
    size_t alen;
    uint64_t split; /* A1 = aad + src[0, split) */
    unsigned char gh[16];
    int rc;
} auth_job;

static void *auth_helper(void *arg)
{
    auth_job *j = arg;
    j->rc = ghash_part(j->gh, j->key, j->nonce, j->h, j->ej0, j->aad, j->alen, j->src, j->split);
    return NULL;
}

int shs__crypt_auth_chunk(const shs__key *key, const shs__meta *m, const char *dir,
                          const shs__mtensor *t, const shs__mchunk *c, const void *src, uint64_t n)
{
    unsigned char aad[SHS__AAD_MAX], h[16], ej0[16], gh2[16] = { 0 }, lb[16], tag[16];
    int rc;
    if (!c->enc)
        return SHS_OK;
    if ((rc = shs__crypt_check_key(m, key, dir)) < 0)
        return rc;
    if (n > GCM_MAX_BYTES)
        return shs__err(SHS_ECORRUPT,
                        "%s/%s: tensor '%s': a chunk of %llu bytes is longer than one "
                        "AES-256-GCM message can be",
                        dir, m->f[c->file].name, t->name, (unsigned long long)n);
    if (gcm_blocks(key, c->nonce, h, ej0) < 0)
        return shs__err(SHS_EIO, "libcrypto: cannot start AES-256-GCM");
    size_t alen = shs__crypt_aad(aad, m->save_id, t->name, t->dtype, t->ndim, t->gshape, c->off,
                                 c->shape, m->step);
    auth_job j = {
        .key = key, .nonce = c->nonce, .h = h, .ej0 = ej0, .aad = aad, .src = src, .alen = alen
    };
    j.split = n >= AUTH_THREAD_MIN ? n / 32 * 16 : n;
    pthread_t th;
    int threaded = j.split < n && pthread_create(&th, NULL, auth_helper, &j) == 0;
    int rc2 = 0;
    if (threaded)
        rc2 = ghash_part(gh2, key, c->nonce, h, ej0, NULL, 0, (const unsigned char *)src + j.split,
                         n - j.split);
    else
        j.split = n;
    if (threaded)
        pthread_join(th, NULL);
    else
        auth_helper(&j);
    /* tag = E(J0) ^ (G(A1) * H) * H^k ^ G(A2) * H ^ [8 len(aad), 8 n] * H */
    gf128_mul_pow(j.gh, h, (n - j.split + 15) / 16);
    put_be64(lb, (uint64_t)alen * 8);
    put_be64(lb + 8, n * 8);
    gf128_mul(lb, h);
    for (int i = 0; i < 16; i++)
        tag[i] = ej0[i] ^ j.gh[i] ^ gh2[i] ^ lb[i];
    int ok = j.rc == 0 && rc2 == 0;
    int auth = ok && CRYPTO_memcmp(tag, c->tag, SHS__TAG_BYTES) == 0;
    OPENSSL_cleanse(h, sizeof h);
    OPENSSL_cleanse(ej0, sizeof ej0);
    OPENSSL_cleanse(&j, sizeof j);
    OPENSSL_cleanse(gh2, sizeof gh2);
    OPENSSL_cleanse(tag, sizeof tag);
    if (!ok)
        return shs__err(SHS_EIO, "libcrypto: AES-256-GCM authentication failed");
    if (!auth)
        return tag_mismatch(dir, m, t, c);
    return SHS_OK;
}

/* ---- metadata.json's spelling ---- */

void shs__crypt_hex_nt(char out[57], const unsigned char nonce[SHS__NONCE_BYTES],
                       const unsigned char tag[SHS__TAG_BYTES])
{
    for (int i = 0; i < SHS__NONCE_BYTES; i++)
        snprintf(out + 2 * i, 3, "%02x", nonce[i]);
    for (int i = 0; i < SHS__TAG_BYTES; i++)
        snprintf(out + 2 * SHS__NONCE_BYTES + 2 * i, 3, "%02x", tag[i]);
}

int shs__crypt_parse_nt(const char *s, unsigned char nonce[SHS__NONCE_BYTES],
                        unsigned char tag[SHS__TAG_BYTES])
{
    if (strlen(s) != 2 * (SHS__NONCE_BYTES + SHS__TAG_BYTES))
        return -1;
    for (const char *q = s; *q; q++)
        if (!((*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f')))
            return -1;
    unhex(nonce, s, SHS__NONCE_BYTES);
    unhex(tag, s + 2 * SHS__NONCE_BYTES, SHS__TAG_BYTES);
    return 0;
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
