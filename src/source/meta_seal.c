/*
 * meta_seal.c -- the checksums metadata.json records and checks: the
 * header checksum of a data file, common.json's, and the seal of a
 * version-2 metadata.json itself.  Format: docs/checkpoint.md.
 */
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#include "source/meta_int.h"

#include "common/hash.h"
#include "store/io.h"

#include <stdio.h>
#include <string.h>

#define COMMON_MAX (1u << 16) /* as common_json.c */

/* The seal of a version-2 metadata.json: its last bytes are
   SEAL_KEY <16 hex digits> SEAL_END. */
#define SEAL_KEY "\"metadata_xxh3\":\""
#define SEAL_END "\"\n}\n"
#define SEAL_TAIL (sizeof SEAL_KEY - 1 + 16 + sizeof SEAL_END - 1)

void shs__hex64(char out[17], uint64_t v)
{
    snprintf(out, 17, "%016llx", (unsigned long long)v);
}

int shs__parse_hex64(uint64_t *out, const char *s)
{
    if (strlen(s) != 16)
        return -1;
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = (v << 4) | (uint64_t)d;
    }
    *out = v;
    return 0;
}

uint64_t shs__header_hash(const shs_file *f)
{
    /* streamed: the length prefix and the header are not contiguous in
       memory, and a checksum must never depend on an allocation */
    uint64_t n = shs_file_header_len(f);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)(n >> (8 * i));
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, len8, sizeof len8);
    XXH3_64bits_update(&st, shs_file_header(f), (size_t)n);
    return XXH3_64bits_digest(&st);
}

char *shs__meta_seal(const char *text, size_t len, size_t *out_len)
{
    size_t n = len;
    while (n && text[n - 1] != '}')
        n--;
    if (!n)
        return NULL;
    n--; /* the closing brace */
    while (n && (text[n - 1] == ' ' || text[n - 1] == '\n' || text[n - 1] == '\t' ||
                 text[n - 1] == '\r'))
        n--;
    int members = n && text[n - 1] != '{';
    size_t cap = n + 2 + SEAL_TAIL + 1;
    char *out = shs__malloc(cap);
    if (!out)
        return NULL;
    memcpy(out, text, n);
    size_t at = n;
    if (members)
        out[at++] = ',';
    out[at++] = '\n';
    memcpy(out + at, SEAL_KEY "0000000000000000" SEAL_END, SEAL_TAIL + 1);
    at += SEAL_TAIL;
    char hex[17];
    shs__hex64(hex, shs__xxh3(out, at));
    memcpy(out + at - SEAL_TAIL + sizeof SEAL_KEY - 1, hex, 16);
    *out_len = at;
    return out;
}

/* Version 2: the file's last bytes are the seal, which is also the value
   of the top-level "metadata_xxh3" (`value`, NULL when it is not a
   string): a valid JSON text ending with the seal's closing brace has it
   as a member of the outermost object, and duplicate keys are refused, so
   the seal is found without ambiguity.  `buf` is hashed in place, its
   digits read as '0' and then put back. */
int shs__meta_check_seal(char *buf, size_t len, const char *value, const char *path)
{
    size_t at = len - SEAL_TAIL + sizeof SEAL_KEY - 1;
    uint64_t want;
    if (len < SEAL_TAIL || memcmp(buf + len - SEAL_TAIL, SEAL_KEY, sizeof SEAL_KEY - 1) != 0 ||
        memcmp(buf + len - (sizeof SEAL_END - 1), SEAL_END, sizeof SEAL_END - 1) != 0 || !value ||
        strlen(value) != 16 || memcmp(value, buf + at, 16) != 0 ||
        shs__parse_hex64(&want, value) < 0)
        return shs__err(SHS_ECORRUPT,
                        "%s: version 2 ends with \"metadata_xxh3\", its checksum "
                        "(16 hex digits), as the last key",
                        path);
    char digits[16];
    memcpy(digits, buf + at, 16);
    memset(buf + at, '0', 16);
    uint64_t got = shs__xxh3(buf, len);
    memcpy(buf + at, digits, 16);
    if (got != want)
        return shs__err(SHS_ECHECKSUM, "%s: the file does not match its metadata_xxh3 checksum",
                        path);
    return SHS_OK;
}

int shs__meta_check_common(const shs__meta *m, const char *dir)
{
    if (!m->has_common_hash)
        return SHS_OK;
    char *path = shs__path_join(dir, "common.json"), *buf = NULL;
    size_t len;
    if (!path)
        return shs__err(SHS_ENOMEM, "out of memory");
    int rc = shs__read_file_nofollow(&buf, &len, path, COMMON_MAX);
    if (rc == SHS_OK && shs__xxh3(buf, len) != m->common_hash)
        rc = shs__err(SHS_ECHECKSUM,
                      "%s: does not match its checksum (common_xxh3 in "
                      "metadata.json)",
                      path);
    shs__free(buf);
    shs__free(path);
    return rc;
}

int shs__meta_check_file(const shs__meta *m, const char *dir, uint32_t fi, const shs_file *f)
{
    const shs__mfile *e = &m->f[fi];
    if (!e->has_header_hash)
        return SHS_OK;
    if (shs_file_size(f) != e->size)
        return shs__err(SHS_ECORRUPT, "%s/%s: %llu bytes, metadata.json says %llu", dir, e->name,
                        (unsigned long long)shs_file_size(f), (unsigned long long)e->size);
    if (shs__header_hash(f) != e->header_hash)
        return shs__err(SHS_ECHECKSUM,
                        "%s/%s: the safetensors header does not match its "
                        "checksum (header_xxh3 in metadata.json)",
                        dir, e->name);
    return SHS_OK;
}
