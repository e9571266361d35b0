/*
 * meta_cipher.c -- the rules of metadata.json for encrypted checkpoints
 * (crypt.h, docs/encryption.md), part of the one validation (meta.c calls
 * them): version 3 (one GCM message per chunk, "aes_gcm") and version 4
 * (segmented, "segment_bytes", per chunk "gcm_salt" and "gcm_tags", and
 * the "metadata_mac" that ends the file before its seal).  Versions 1 and
 * 2 carry none of these members: a version number is what protects older
 * readers, which refuse an encrypted checkpoint instead of loading
 * ciphertext that its checksums would accept.
 */
#include "source/meta_int.h"

#include "crypto/crypt.h"

#include <string.h>

#define BAD(...)                                                                                   \
    do {                                                                                           \
        return shs__err(SHS_ECORRUPT, __VA_ARGS__);                                                \
    } while (0)

int shs__meta_check_cipher(mparse *s, const char *path)
{
    shs__meta *m = s->m;
    int ver = m->version, enc = ver >= SHS__META_VERSION_ENC;
    int v4 = ver >= SHS__META_VERSION_STREAM;
    if (enc != (s->cipher_k != V_NONE) ||
        (!enc && (s->key_id_k != H_NONE || s->save_id_k != H_NONE)))
        BAD("%s: \"cipher\", \"key_id\" and \"save_id\" belong to the encrypted versions (%d and "
            "%d), and those need them",
            path, SHS__META_VERSION_ENC, SHS__META_VERSION_STREAM);
    if (v4 != (s->segment.k != V_NONE) || v4 != (s->mac_k != V_NONE))
        BAD("%s: \"segment_bytes\" and \"metadata_mac\" belong to version %d, and version %d "
            "needs them",
            path, SHS__META_VERSION_STREAM, SHS__META_VERSION_STREAM);
    if (!enc)
        return SHS_OK;
    const char *cipher = v4 ? SHS__CIPHER_STREAM : SHS__CIPHER_NAME;
    if (s->cipher_k != V_STR || strcmp(s->cipher, cipher) != 0 || s->key_id_k != H_OK ||
        s->save_id_k != H_OK)
        BAD("%s: \"cipher\" must be \"%s\" in version %d, with a \"key_id\" and a \"save_id\" (16 "
            "hex digits each)",
            path, cipher, ver);
    if (v4) {
        uint64_t seg = s->segment.v;
        if (s->segment.k != V_UINT || seg < SHS__SEGMENT_MIN || seg > SHS__SEGMENT_MAX ||
            (seg & (seg - 1)))
            BAD("%s: \"segment_bytes\" must be a power of two from %llu to %llu", path,
                (unsigned long long)SHS__SEGMENT_MIN, (unsigned long long)SHS__SEGMENT_MAX);
        m->segment = seg;
    }
    m->encrypted = 1;
    shs__hex64(m->key_id, s->key_id);
    shs__hex64(m->save_id, s->save_id);
    return SHS_OK;
}

int shs__meta_check_chunk_cipher(const mparse *s, shs__mtensor *t, const rchunk *q, size_t k,
                                 const char *path)
{
    const shs__meta *m = s->m;
    shs__mchunk *c = &t->c[k];
    const char *tname = t->name;
    int v4 = m->version >= SHS__META_VERSION_STREAM;
    /* an encrypted checkpoint encrypts every chunk, another none */
    if (m->encrypted && !v4 ? q->enc_k != H_OK : q->enc_k != H_NONE)
        BAD("%s: tensor '%s': chunk %zu: \"aes_gcm\" (56 hex digits: nonce and tag) is %s", path,
            tname, k, m->encrypted && !v4 ? "required in version 3" : "only valid in version 3");
    if (!v4 && (q->salt_k != H_NONE || q->tags_k != H_NONE))
        BAD("%s: tensor '%s': chunk %zu: \"gcm_salt\" and \"gcm_tags\" are only valid in version "
            "%d",
            path, tname, k, SHS__META_VERSION_STREAM);
    if (v4) {
        uint64_t want = shs__crypt_nsegs(c->b1 - c->b0, m->segment);
        if (q->salt_k != H_OK)
            BAD("%s: tensor '%s': chunk %zu: \"gcm_salt\" (32 hex digits) is required in version "
                "%d",
                path, tname, k, SHS__META_VERSION_STREAM);
        if (q->tags_k != H_OK || c->ntags != want || want > UINT32_MAX)
            BAD("%s: tensor '%s': chunk %zu: \"gcm_tags\" must hold %llu tags of 32 hex digits, "
                "one per segment of %llu bytes",
                path, tname, k, (unsigned long long)want, (unsigned long long)m->segment);
    }
    c->enc = m->encrypted;
    return SHS_OK;
}

int shs__meta_check_mac(mparse *s, char *buf, size_t len, const char *path)
{
    if (s->m->version < SHS__META_VERSION_STREAM)
        return SHS_OK;
    return shs__crypt_meta_digest(s->m, buf, len, s->mac_k == V_STR ? s->mac : NULL, path);
}
