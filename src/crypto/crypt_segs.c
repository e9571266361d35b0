/*
 * crypt_segs.c -- version 4's chunks: a STREAM of AES-256-GCM segments
 * (crypt.h, docs/encryption.md), encrypted, decrypted and verified in
 * parallel, every segment through stock EVP calls.
 *
 * A chunk's segments are encrypted under a key of the chunk's own,
 * HKDF-SHA256(key, salt = the chunk's random 16-byte salt, info = a
 * label), whose 39 bytes of output are that key and a 7-byte nonce
 * prefix; segment i of nseg has the nonce prefix || be32(i) || (i ==
 * nseg - 1), and the chunk's AAD.  A key per chunk keeps nonces unique
 * whatever the number of chunks a key ever encrypts (random 96-bit nonces
 * under one key would be safe for 2^32 messages, random 56-bit prefixes
 * for far fewer); the index orders the segments and the last-flag ends
 * the stream, so a segment moved, dropped or swapped fails its tag.
 */
#include "crypto/crypt_int.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* threads working on one chunk (the caller and helpers) */
#define SEG_THREADS 2
/* helper threads encrypting ahead of a save's writer */
#define SEAL_HELPERS 1
/* verify decrypts a segment through a scratch buffer of this size */
#define SCRATCH ((size_t)64 << 10)

static const char k_seg_label[] = "shardsafe segment key v4";

/* A chunk's STREAM: its key and nonce prefix, AAD and geometry. */
typedef struct segs {
    unsigned char key[32];
    unsigned char prefix[7];
    const unsigned char *aad;
    size_t alen;
    uint64_t n, seg, nseg;
} segs;

uint64_t shs__crypt_nsegs(uint64_t n, uint64_t segment)
{
    return n ? (n - 1) / segment + 1 : 1;
}

static int segs_init(segs *s, const shs__key *key, const unsigned char salt[SHS__SALT_BYTES],
                     const unsigned char *aad, size_t alen, uint64_t n, uint64_t seg)
{
    unsigned char okm[32 + 7];
    if (shs__crypt_hkdf(okm, sizeof okm, key, salt, SHS__SALT_BYTES, k_seg_label) < 0)
        return -1;
    memcpy(s->key, okm, 32);
    memcpy(s->prefix, okm + 32, 7);
    OPENSSL_cleanse(okm, sizeof okm);
    s->aad = aad;
    s->alen = alen;
    s->n = n;
    s->seg = seg;
    s->nseg = shs__crypt_nsegs(n, seg);
    return 0;
}

static void segs_wipe(segs *s)
{
    OPENSSL_cleanse(s->key, sizeof s->key);
}

static size_t seg_len(const segs *s, uint64_t k)
{
    uint64_t at = k * s->seg;
    return (size_t)(s->n - at < s->seg ? s->n - at : s->seg);
}

static void seg_nonce(unsigned char iv[SHS__NONCE_BYTES], const segs *s, uint64_t k)
{
    memcpy(iv, s->prefix, 7);
    for (int i = 0; i < 4; i++)
        iv[7 + i] = (unsigned char)(k >> (24 - 8 * i));
    iv[11] = k + 1 == s->nseg;
}

/* A cipher context under the chunk's key; each segment sets its nonce. */
static EVP_CIPHER_CTX *seg_ctx(const segs *s, int seal)
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int ok = ctx &&
             (seal ? EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL)
                   : EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL)) == 1 &&
             EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, SHS__NONCE_BYTES, NULL) == 1 &&
             (seal ? EVP_EncryptInit_ex(ctx, NULL, NULL, s->key, NULL)
                   : EVP_DecryptInit_ex(ctx, NULL, NULL, s->key, NULL)) == 1;
    if (!ok) {
        EVP_CIPHER_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

/* Encrypt segment k (its bytes at in) into out and its tag; -1 when
   libcrypto fails. */
static int seal_one(EVP_CIPHER_CTX *ctx, const segs *s, uint64_t k, const unsigned char *in,
                    unsigned char *out, unsigned char *tag)
{
    unsigned char iv[SHS__NONCE_BYTES], fin[16];
    int len = 0;
    size_t n = seg_len(s, k);
    seg_nonce(iv, s, k);
    int ok = EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, iv) == 1 &&
             EVP_EncryptUpdate(ctx, NULL, &len, s->aad, (int)s->alen) == 1 &&
             (n == 0 || (EVP_EncryptUpdate(ctx, out, &len, in, (int)n) == 1 && (size_t)len == n)) &&
             EVP_EncryptFinal_ex(ctx, fin, &len) == 1 && len == 0 &&
             EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, SHS__TAG_BYTES, tag) == 1;
    return ok ? 0 : -1;
}

/* Decrypt segment k (its bytes at in) into out, or with out NULL only
   authenticate it through `scratch` (SCRATCH bytes).  1: its tag
   matches; 0: it does not; -1: libcrypto failed. */
static int open_one(EVP_CIPHER_CTX *ctx, const segs *s, uint64_t k, const unsigned char *in,
                    unsigned char *out, unsigned char *scratch, const unsigned char *tag)
{
    unsigned char iv[SHS__NONCE_BYTES], t[SHS__TAG_BYTES], fin[16];
    int len = 0;
    size_t n = seg_len(s, k);
    seg_nonce(iv, s, k);
    memcpy(t, tag, sizeof t);
    int ok = EVP_DecryptInit_ex(ctx, NULL, NULL, NULL, iv) == 1 &&
             EVP_DecryptUpdate(ctx, NULL, &len, s->aad, (int)s->alen) == 1;
    for (size_t at = 0; ok && at < n;) {
        size_t piece = out ? n : (n - at < SCRATCH ? n - at : SCRATCH);
        ok = EVP_DecryptUpdate(ctx, out ? out : scratch, &len, in + at, (int)piece) == 1 &&
             (size_t)len == piece;
        at += piece;
    }
    if (!ok || EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, SHS__TAG_BYTES, t) != 1)
        return -1;
    return EVP_DecryptFinal_ex(ctx, fin, &len) == 1;
}

/* ---- opening segments on several threads ---- */

typedef struct seg_pool {
    const segs *s;
    uint64_t first, end;       /* segments [first, end) */
    const uint8_t *marks;      /* marks[k - first]: open segment k; NULL: all */
    const unsigned char *in;   /* segment `first` starts here */
    unsigned char *out;        /* likewise, or NULL: authenticate only */
    const unsigned char *tags; /* the chunk's, by segment */
    pthread_mutex_t mu;
    uint64_t next; /* the next segment to take */
    int failed;    /* SHS_EIO (libcrypto) or SHS_ENOMEM, else 0 */
    uint64_t bad;  /* a segment whose tag did not match; UINT64_MAX: none */
} seg_pool;

static void *pool_worker(void *arg)
{
    seg_pool *p = arg;
    const segs *s = p->s;
    EVP_CIPHER_CTX *ctx = seg_ctx(s, 0);
    unsigned char *scratch = p->out ? NULL : shs__malloc(SCRATCH);
    int broken = !ctx ? SHS_EIO : !p->out && !scratch ? SHS_ENOMEM : 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        uint64_t k = p->next;
        while (k < p->end && p->marks && !p->marks[k - p->first])
            k++;
        p->next = k + 1;
        if (broken && !p->failed)
            p->failed = broken;
        int stop = p->failed || p->bad != UINT64_MAX || k >= p->end;
        pthread_mutex_unlock(&p->mu);
        if (stop)
            break;
        uint64_t at = (k - p->first) * s->seg;
        int r = open_one(ctx, s, k, p->in + at, p->out ? p->out + at : NULL, scratch,
                         p->tags + SHS__TAG_BYTES * k);
        if (r == 1)
            continue;
        pthread_mutex_lock(&p->mu);
        if (r < 0)
            p->failed = SHS_EIO;
        else if (p->bad == UINT64_MAX || k < p->bad)
            p->bad = k;
        pthread_mutex_unlock(&p->mu);
    }
    EVP_CIPHER_CTX_free(ctx);
    if (scratch) {
        OPENSSL_cleanse(scratch, SCRATCH);
        shs__free(scratch);
    }
    return NULL;
}

/* Run the pool on up to SEG_THREADS threads (this one included). */
static void pool_run(seg_pool *p)
{
    uint64_t work = 0;
    for (uint64_t k = p->first; k < p->end && work < SEG_THREADS; k++)
        work += !p->marks || p->marks[k - p->first];
    pthread_t th[SEG_THREADS];
    int started = 0;
    pthread_mutex_init(&p->mu, NULL);
    for (; work > 1 && started < SEG_THREADS - 1 && (uint64_t)started + 1 < work; started++)
        if (pthread_create(&th[started], NULL, pool_worker, p) != 0)
            break;
    pool_worker(p);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&p->mu);
}

/* Open segments [first, end) of chunk c: the pool, and the errors. */
static int open_range(const shs__key *key, const shs__meta *m, const char *dir,
                      const shs__mtensor *t, const shs__mchunk *c, uint64_t first, uint64_t end,
                      const uint8_t *marks, const void *src, void *buf)
{
    unsigned char aad[SHS__AAD_MAX];
    segs s;
    uint64_t n = c->b1 - c->b0;
    if (shs__crypt_nsegs(n, m->segment) != c->ntags || end > c->ntags || first > end)
        return shs__err(SHS_ECORRUPT, "%s/%s: tensor '%s': %llu segment tags for %llu bytes", dir,
                        m->f[c->file].name, t->name, (unsigned long long)c->ntags,
                        (unsigned long long)n);
    size_t alen = shs__crypt_chunk_aad(aad, m, t, c);
    if (segs_init(&s, key, c->salt, aad, alen, n, m->segment) < 0)
        return shs__err(SHS_EIO, "libcrypto: cannot derive the key of a chunk");
    seg_pool p = { .s = &s,
                   .first = first,
                   .end = end,
                   .marks = marks,
                   .in = src,
                   .out = buf,
                   .tags = c->tags,
                   .next = first,
                   .bad = UINT64_MAX };
    pool_run(&p);
    segs_wipe(&s);
    if (p.failed == 0 && p.bad == UINT64_MAX)
        return SHS_OK;
    /* never hand out unauthenticated plaintext */
    if (buf) {
        uint64_t b = first * s.seg, e = end * s.seg < n ? end * s.seg : n;
        OPENSSL_cleanse(buf, (size_t)(e - b));
    }
    if (p.failed)
        return shs__err(p.failed,
                        p.failed == SHS_ENOMEM ? "out of memory decrypting '%s'"
                                               : "libcrypto: decrypting '%s' failed",
                        t->name);
    return shs__crypt_mismatch(dir, m, t, c, (long long)p.bad);
}

int shs__crypt_open_v4(const shs__key *key, const shs__meta *m, const char *dir,
                       const shs__mtensor *t, const shs__mchunk *c, const void *src, void *buf,
                       uint64_t n)
{
    (void)n; /* the chunk's own size, c->b1 - c->b0 */
    return open_range(key, m, dir, t, c, 0, c->ntags, NULL, src, buf);
}

int shs__crypt_open_segments(const shs__key *key, const shs__meta *m, const char *dir,
                             const shs__mtensor *t, const shs__mchunk *c, uint64_t first,
                             uint64_t count, const uint8_t *marks, const void *src, void *buf)
{
    int rc;
    if (!c->enc || m->version < SHS__META_VERSION_STREAM)
        return shs__err(SHS_EINVAL, "shs__crypt_open_segments: not a version-4 encrypted chunk");
    if ((rc = shs__crypt_check_key_id(m, key, dir)) < 0)
        return rc;
    return open_range(key, m, dir, t, c, first, first + count, marks, src, buf);
}

/* ---- sealing a chunk (save) ----
 * Helpers take segments in order and encrypt segment k into ring slot
 * k % SHS__SEAL_RING once the caller has written segment
 * k - SHS__SEAL_RING; the caller writes them in order as they are done. */

typedef struct seal_pipe {
    const segs *s;
    const unsigned char *src;
    unsigned char *ring, *tags;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t next;                 /* the next segment a helper takes */
    uint64_t used;                 /* segments the caller has written */
    uint64_t done[SHS__SEAL_RING]; /* 1 + the segment a slot holds */
    int stop;                      /* the caller failed */
    int failed;                    /* a helper failed (SHS_EIO/ENOMEM) */
} seal_pipe;

static void *seal_helper(void *arg)
{
    seal_pipe *p = arg;
    const segs *s = p->s;
    EVP_CIPHER_CTX *ctx = seg_ctx(s, 1);
    for (;;) {
        pthread_mutex_lock(&p->mu);
        if (!ctx && !p->failed)
            p->failed = SHS_EIO;
        while (!p->stop && !p->failed && p->next < s->nseg && p->next - p->used >= SHS__SEAL_RING)
            pthread_cond_wait(&p->cv, &p->mu);
        uint64_t k = p->next++;
        int quit = p->stop || p->failed || k >= s->nseg;
        pthread_mutex_unlock(&p->mu);
        if (quit)
            break;
        unsigned char *slot = p->ring + (k % SHS__SEAL_RING) * s->seg;
        int r = seal_one(ctx, s, k, p->src + k * s->seg, slot, p->tags + SHS__TAG_BYTES * k);
        pthread_mutex_lock(&p->mu);
        if (r < 0)
            p->failed = SHS_EIO;
        else
            p->done[k % SHS__SEAL_RING] = k + 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    EVP_CIPHER_CTX_free(ctx);
    return NULL;
}

/* No helper: the caller encrypts each segment into slot 0 and sinks it. */
static int seal_alone(const segs *s, const unsigned char *src, unsigned char *ring,
                      unsigned char *tags, shs__seal_sink sink, void *ctx)
{
    EVP_CIPHER_CTX *c = seg_ctx(s, 1);
    int rc = c ? SHS_OK : shs__err(SHS_EIO, "libcrypto: cannot start AES-256-GCM");
    for (uint64_t k = 0; rc == SHS_OK && k < s->nseg; k++) {
        size_t len = seg_len(s, k);
        if (seal_one(c, s, k, src + k * s->seg, ring, tags + SHS__TAG_BYTES * k) < 0)
            rc = shs__err(SHS_EIO, "libcrypto: AES-256-GCM encryption failed");
        else if (len)
            rc = sink(ctx, k * s->seg, ring, len);
    }
    EVP_CIPHER_CTX_free(c);
    return rc;
}

static int seal_piped(const segs *s, const unsigned char *src, unsigned char *ring,
                      unsigned char *tags, shs__seal_sink sink, void *ctx)
{
    seal_pipe p = { .s = s, .src = src, .ring = ring, .tags = tags };
    pthread_t th[SEAL_HELPERS];
    int started = 0, rc = SHS_OK;
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    for (; started < SEAL_HELPERS && (uint64_t)started < s->nseg; started++)
        if (pthread_create(&th[started], NULL, seal_helper, &p) != 0)
            break;
    if (!started) {
        pthread_mutex_destroy(&p.mu);
        pthread_cond_destroy(&p.cv);
        return seal_alone(s, src, ring, tags, sink, ctx);
    }
    for (uint64_t k = 0; k < s->nseg && rc == SHS_OK; k++) {
        pthread_mutex_lock(&p.mu);
        while (p.done[k % SHS__SEAL_RING] != k + 1 && !p.failed)
            pthread_cond_wait(&p.cv, &p.mu);
        int failed = p.done[k % SHS__SEAL_RING] != k + 1 ? p.failed : 0;
        pthread_mutex_unlock(&p.mu);
        size_t len = seg_len(s, k);
        if (failed)
            rc = shs__err(failed, "libcrypto: AES-256-GCM encryption failed");
        else if (len)
            rc = sink(ctx, k * s->seg, ring + (k % SHS__SEAL_RING) * s->seg, len);
        pthread_mutex_lock(&p.mu);
        if (rc < 0)
            p.stop = 1;
        else
            p.used = k + 1;
        pthread_cond_broadcast(&p.cv);
        pthread_mutex_unlock(&p.mu);
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv);
    return rc;
}

int shs__seal_chunk(const shs__key *key, const unsigned char *aad, size_t aadlen, const void *src,
                    uint64_t n, unsigned char *ring, unsigned char salt[SHS__SALT_BYTES],
                    unsigned char **tags, shs__seal_sink sink, void *ctx)
{
    segs s;
    *tags = NULL;
    if (RAND_bytes(salt, SHS__SALT_BYTES) != 1)
        return shs__err(SHS_EIO, "libcrypto: no random bytes for a chunk's salt");
    if (segs_init(&s, key, salt, aad, aadlen, n, SHS__SEGMENT) < 0)
        return shs__err(SHS_EIO, "libcrypto: cannot derive the key of a chunk");
    if (s.nseg > UINT32_MAX || !(*tags = shs__malloc((size_t)s.nseg * SHS__TAG_BYTES))) {
        segs_wipe(&s);
        return shs__err(SHS_ENOMEM, "out of memory for the tags of a %llu-byte chunk",
                        (unsigned long long)n);
    }
    int rc = s.nseg > 1 ? seal_piped(&s, src, ring, *tags, sink, ctx)
                        : seal_alone(&s, src, ring, *tags, sink, ctx);
    segs_wipe(&s);
    if (rc < 0) {
        shs__free(*tags);
        *tags = NULL;
    }
    return rc;
}
