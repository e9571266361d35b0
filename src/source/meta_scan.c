/*
 * meta_scan.c -- phase one of reading metadata.json (meta_int.h): the
 * whole text scanned once into the model and the r* records, syntax
 * errors only.  Format: docs/checkpoint.md.
 */
#include "source/meta_int.h"

#include "crypto/crypt.h"
#include "common/hash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define DUP_MSG_MAX 64

static int oom(mparse *s)
{
    return shs__err(SHS_ENOMEM, "out of memory reading %s", s->js.fname);
}

/* Grow *v (n used, *cap allocated, elements of `size` bytes, the new ones
   zeroed) to hold n + 1. */
static int grow(void **v, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 16;
    void *p = shs__realloc(*v, c * size);
    if (!p)
        return -1;
    memset((char *)p + *cap * size, 0, (c - *cap) * size);
    *v = p;
    *cap = c;
    return 0;
}

/* After '{' or '[': 1 when the container is empty (and closed). */
static int closes_at_once(shs__json *js, char close)
{
    js->p++;
    shs__json_skip_ws(js);
    if (js->p < js->end && *js->p == close) {
        js->p++;
        return 1;
    }
    return 0;
}

/* Whether the next value starts with `c` (whitespace before it skipped). */
static int at(shs__json *js, char c)
{
    shs__json_skip_ws(js);
    return js->p < js->end && *js->p == c;
}

/* The next member's key of object `obj` whose known keys are `names`:
   *which is its index, or -1 for another key (kept in the arena for the
   duplicate check; the caller skips its value).  A known key seen twice
   is a syntax error, as is any repeated key. */
static int member(mparse *s, uint32_t obj, const char *const *names, int n, uint32_t *seen,
                  int *which)
{
    shs__json *js = &s->js;
    size_t mark = js->arena_len;
    shs__json_skip_ws(js);
    const char *kp = js->p, *k;
    size_t len;
    int rc = shs__json_key(js, &k, &len);
    if (rc < 0)
        return rc;
    for (int i = 0; i < n; i++) {
        if (strlen(names[i]) != len || memcmp(names[i], k, len) != 0)
            continue;
        if (*seen & (1u << i)) {
            char what[DUP_MSG_MAX];
            snprintf(what, sizeof what, "duplicate key '%s'", names[i]);
            js->p = kp;
            return shs__json_syntax_err(js, what);
        }
        *seen |= 1u << i;
        js->arena_len = mark;
        *which = i;
        return SHS_OK;
    }
    *which = -1;
    return shs__json_note_key(js, obj, k, len);
}

/* Any value, read as a number (V_OTHER when it is none, then skipped).
   `depth`: the nesting of the container holding it. */
static int scan_num(mparse *s, int depth, jnum *out)
{
    shs__json *js = &s->js;
    if (!at(js, '-') && !(js->p < js->end && *js->p >= '0' && *js->p <= '9')) {
        out->k = V_OTHER;
        return shs__json_skip_value(js, depth);
    }
    const char *start = js->p;
    int u;
    int rc = shs__json_number(js, &u, &out->v);
    if (rc < 0)
        return rc;
    out->k = V_UINT;
    if (!u) {
        out->k = V_NEG;
        for (const char *q = start; q < js->p; q++)
            if (*q == '.' || *q == 'e' || *q == 'E')
                out->k = V_REAL;
        if (out->k == V_NEG && out->v == 0)
            out->k = V_UINT; /* "-0": the integer 0, as jansson read it */
    }
    return SHS_OK;
}

/* Any value, read as a string: decoded into the arena (the caller may
   take the arena back) or skipped (V_OTHER). */
static int scan_str(mparse *s, int depth, const char **out, uint8_t *k)
{
    shs__json *js = &s->js;
    size_t len;
    if (!at(js, '"')) {
        *k = V_OTHER;
        return shs__json_skip_value(js, depth);
    }
    *k = V_STR;
    return shs__json_string(js, out, &len);
}

/* A string held only as a copy (*out, caller frees with the model). */
static int scan_strdup(mparse *s, int depth, char **out, uint8_t *k)
{
    size_t mark = s->js.arena_len;
    const char *v;
    int rc = scan_str(s, depth, &v, k);
    if (rc == SHS_OK && *k == V_STR && !(*out = shs__strdup(v)))
        rc = oom(s);
    s->js.arena_len = mark;
    return rc;
}

/* Any value, read as a checksum. */
static int scan_hex(mparse *s, int depth, uint64_t *out, uint8_t *k)
{
    size_t mark = s->js.arena_len;
    const char *v;
    uint8_t sk;
    int rc = scan_str(s, depth, &v, &sk);
    *k = rc == SHS_OK && sk == V_STR && shs__parse_hex64(out, v) == 0 ? H_OK : H_BAD;
    s->js.arena_len = mark;
    return rc;
}

/* Any value, read as an array of numbers: *k V_ARR or V_OTHER, *n its
   length, *ok whether every element is an integer >= 0.  The first `cap`
   values go to v (when not NULL), their kinds to nums (when not NULL). */
static int scan_nums(mparse *s, int depth, uint8_t *k, size_t *n, uint8_t *ok, uint64_t *v,
                     jnum *nums, size_t cap)
{
    shs__json *js = &s->js;
    int rc;
    *n = 0;
    *ok = 1;
    if (!at(js, '[')) {
        *k = V_OTHER;
        return shs__json_skip_value(js, depth);
    }
    *k = V_ARR;
    if (closes_at_once(js, ']'))
        return SHS_OK;
    for (;;) {
        jnum x;
        if ((rc = scan_num(s, depth + 1, &x)) < 0)
            return rc;
        if (x.k != V_UINT)
            *ok = 0;
        if (*n < cap) {
            if (v)
                v[*n] = x.v;
            if (nums)
                nums[*n] = x;
        }
        ++*n;
        if ((rc = shs__json_next_member(js, ']')) <= 0)
            return rc;
    }
}

/* Dimensions: an array of integers, kept when it can be a shape. */
static int scan_dims(mparse *s, int depth, uint8_t *k, size_t *n, uint8_t *ok, uint64_t **out)
{
    uint64_t v[SHS_MAX_DIMS];
    int rc = scan_nums(s, depth, k, n, ok, v, NULL, SHS_MAX_DIMS);
    if (rc < 0 || *k != V_ARR || *n > SHS_MAX_DIMS)
        return rc;
    if (!(*out = shs__malloc((*n ? *n : 1) * sizeof **out)))
        return oom(s);
    memcpy(*out, v, *n * sizeof *v);
    return SHS_OK;
}

static const char *const k_file_keys[] = { "name", "rank", "size", "header_xxh3" };

static int scan_file(mparse *s, size_t i)
{
    shs__json *js = &s->js;
    shs__mfile *f = &s->m->f[i];
    rfile *r = &s->rf[i];
    uint32_t obj = ++js->next_obj, seen = 0;
    int rc, which = -1;
    r->obj = 1;
    if (closes_at_once(js, '}'))
        return SHS_OK;
    for (;;) {
        if ((rc = member(s, obj, k_file_keys, 4, &seen, &which)) < 0)
            return rc;
        switch (which) {
        case 0: rc = scan_strdup(s, 3, &f->name, &r->name_k); break;
        case 1: rc = scan_num(s, 3, &r->rank); break;
        case 2: rc = scan_num(s, 3, &r->size); break;
        case 3: rc = scan_hex(s, 3, &f->header_hash, &r->hh_k); break;
        default: rc = shs__json_skip_value(js, 3);
        }
        if (rc < 0 || (rc = shs__json_next_member(js, '}')) <= 0)
            return rc;
    }
}

static int scan_files(mparse *s)
{
    shs__json *js = &s->js;
    int rc;
    if (!at(js, '[')) {
        s->files_k = V_OTHER;
        return shs__json_skip_value(js, 1);
    }
    s->files_k = V_ARR;
    if (closes_at_once(js, ']'))
        return SHS_OK;
    for (;;) {
        size_t cf = s->cap_f;
        if (grow((void **)&s->m->f, &cf, s->m->nf, sizeof *s->m->f) < 0 ||
            grow((void **)&s->rf, &s->cap_f, s->m->nf, sizeof *s->rf) < 0)
            return oom(s);
        size_t i = s->m->nf++;
        if (at(js, '{'))
            rc = scan_file(s, i);
        else
            rc = shs__json_skip_value(js, 2);
        if (rc < 0 || (rc = shs__json_next_member(js, ']')) <= 0)
            return rc;
    }
}

/* "xxh3_blocks": checksums into c->blocks, the index of the first that
   is not one in r->bad_block (SIZE_MAX: none). */
static int scan_blocks(mparse *s, shs__mchunk *c, rchunk *r)
{
    shs__json *js = &s->js;
    size_t cap = 0;
    int rc;
    r->bad_block = SIZE_MAX;
    if (!at(js, '[')) {
        r->blocks_k = V_OTHER;
        return shs__json_skip_value(js, 5);
    }
    r->blocks_k = V_ARR;
    if (closes_at_once(js, ']'))
        return SHS_OK;
    for (;;) {
        uint64_t h = 0;
        uint8_t k;
        if ((rc = scan_hex(s, 6, &h, &k)) < 0)
            return rc;
        if (k != H_OK && r->bad_block == SIZE_MAX)
            r->bad_block = r->nblocks;
        if (grow((void **)&c->blocks, &cap, r->nblocks, sizeof *c->blocks) < 0)
            return oom(s);
        c->blocks[r->nblocks++] = h;
        if ((rc = shs__json_next_member(js, ']')) <= 0)
            return rc;
    }
}

static const char *const k_chunk_keys[] = { "offset",     "shape",    "file",       "key",
                                            "byte_range", "xxh3",     "xxh3_block", "xxh3_blocks",
                                            "aes_gcm",    "gcm_salt", "gcm_tags" };

/* "aes_gcm" (crypt.h): nonce and tag, 56 hex digits. */
static int scan_aes_gcm(mparse *s, shs__mchunk *c, rchunk *r)
{
    size_t mark = s->js.arena_len;
    const char *v;
    uint8_t sk;
    int rc = scan_str(s, 5, &v, &sk);
    r->enc_k = rc == SHS_OK && sk == V_STR && shs__crypt_parse_nt(v, c->nonce, c->tag) == 0 ? H_OK
                                                                                            : H_BAD;
    s->js.arena_len = mark;
    return rc;
}

/* "gcm_salt" (version 4): 32 hex digits. */
static int scan_gcm_salt(mparse *s, shs__mchunk *c, rchunk *r)
{
    size_t mark = s->js.arena_len;
    const char *v;
    uint8_t sk;
    int rc = scan_str(s, 5, &v, &sk);
    r->salt_k = rc == SHS_OK && sk == V_STR &&
                        shs__crypt_unhex(c->salt, sizeof c->salt, v, strlen(v)) == 0
                    ? H_OK
                    : H_BAD;
    s->js.arena_len = mark;
    return rc;
}

/* "gcm_tags" (version 4): 32 hex digits per segment, into c->tags. */
static int scan_gcm_tags(mparse *s, shs__mchunk *c, rchunk *r)
{
    size_t mark = s->js.arena_len, len;
    const char *v;
    uint8_t sk;
    int rc = scan_str(s, 5, &v, &sk);
    r->tags_k = H_BAD;
    if (rc == SHS_OK && sk == V_STR && (len = strlen(v)) % (2 * SHS__TAG_BYTES) == 0) {
        shs__free(c->tags);
        c->ntags = len / (2 * SHS__TAG_BYTES);
        if (!(c->tags = shs__malloc(len / 2 + 1)))
            rc = oom(s);
        else if (shs__crypt_unhex(c->tags, len / 2, v, len) == 0)
            r->tags_k = H_OK;
    }
    s->js.arena_len = mark;
    return rc;
}

static int scan_chunk(mparse *s, shs__mchunk *c, rchunk *r)
{
    shs__json *js = &s->js;
    uint32_t obj = ++js->next_obj, seen = 0;
    int rc, which = -1;
    r->obj = 1;
    r->bad_block = SIZE_MAX;
    if (closes_at_once(js, '}'))
        return SHS_OK;
    for (;;) {
        if ((rc = member(s, obj, k_chunk_keys, 11, &seen, &which)) < 0)
            return rc;
        switch (which) {
        case 0: rc = scan_dims(s, 5, &r->off_k, &r->off_n, &r->off_ok, &c->off); break;
        case 1: rc = scan_dims(s, 5, &r->shape_k, &r->shape_n, &r->shape_ok, &c->shape); break;
        case 2: rc = scan_num(s, 5, &r->file); break;
        case 3: rc = scan_strdup(s, 5, &c->key, &r->key_k); break;
        case 4: {
            jnum b[2] = { { 0, V_NONE }, { 0, V_NONE } };
            uint8_t ok;
            rc = scan_nums(s, 5, &r->br_k, &r->br_n, &ok, NULL, b, 2);
            r->b0 = b[0];
            r->b1 = b[1];
            break;
        }
        case 5: rc = scan_hex(s, 5, &c->hash, &r->hash_k); break;
        case 6: rc = scan_num(s, 5, &r->block); break;
        case 7: rc = scan_blocks(s, c, r); break;
        case 8: rc = scan_aes_gcm(s, c, r); break;
        case 9: rc = scan_gcm_salt(s, c, r); break;
        case 10: rc = scan_gcm_tags(s, c, r); break;
        default: rc = shs__json_skip_value(js, 5);
        }
        if (rc < 0 || (rc = shs__json_next_member(js, '}')) <= 0)
            return rc;
    }
}

static int scan_chunks(mparse *s, shs__mtensor *t, rtensor *r)
{
    shs__json *js = &s->js;
    int rc;
    if (!at(js, '[')) {
        r->chunks_k = V_OTHER;
        return shs__json_skip_value(js, 3);
    }
    r->chunks_k = V_ARR;
    if (closes_at_once(js, ']'))
        return SHS_OK;
    for (;;) {
        size_t cc = r->cap;
        if (grow((void **)&t->c, &cc, t->nc, sizeof *t->c) < 0 ||
            grow((void **)&r->rc, &r->cap, t->nc, sizeof *r->rc) < 0)
            return oom(s);
        size_t k = t->nc++;
        if (at(js, '{'))
            rc = scan_chunk(s, &t->c[k], &r->rc[k]);
        else
            rc = shs__json_skip_value(js, 4);
        if (rc < 0 || (rc = shs__json_next_member(js, ']')) <= 0)
            return rc;
    }
}

static const char *const k_tensor_keys[] = { "kind", "dtype", "shape", "chunks" };

static int scan_tensor(mparse *s, shs__mtensor *t, rtensor *r)
{
    shs__json *js = &s->js;
    uint32_t obj = ++js->next_obj, seen = 0;
    int rc, which = -1;
    r->obj = 1;
    if (closes_at_once(js, '}'))
        return SHS_OK;
    for (;;) {
        if ((rc = member(s, obj, k_tensor_keys, 4, &seen, &which)) < 0)
            return rc;
        switch (which) {
        case 0: rc = scan_str(s, 3, &r->kind, &r->kind_k); break;
        case 1: rc = scan_str(s, 3, &r->dtype, &r->dtype_k); break;
        case 2: rc = scan_dims(s, 3, &r->shape_k, &r->shape_n, &r->shape_ok, &t->gshape); break;
        case 3: rc = scan_chunks(s, t, r); break;
        default: rc = shs__json_skip_value(js, 3);
        }
        if (rc < 0 || (rc = shs__json_next_member(js, '}')) <= 0)
            return rc;
    }
}

static int scan_tensors(mparse *s)
{
    shs__json *js = &s->js;
    shs__meta *m = s->m;
    int rc;
    if (!at(js, '{')) {
        s->tensors_k = V_OTHER;
        return shs__json_skip_value(js, 1);
    }
    s->tensors_k = V_OBJ;
    if (closes_at_once(js, '}'))
        return SHS_OK;
    for (;;) {
        size_t ct = s->cap_t;
        if (grow((void **)&m->t, &ct, m->nt, sizeof *m->t) < 0 ||
            grow((void **)&s->rt, &s->cap_t, m->nt, sizeof *s->rt) < 0)
            return oom(s);
        shs__mtensor *t = &m->t[m->nt];
        size_t mark = js->arena_len;
        const char *name;
        size_t len;
        if ((rc = shs__json_key(js, &name, &len)) < 0)
            return rc;
        t->name = shs__strdup(name);
        js->arena_len = mark;
        if (!t->name)
            return oom(s);
        m->nt++;
        if (at(js, '{'))
            rc = scan_tensor(s, t, &s->rt[m->nt - 1]);
        else
            rc = shs__json_skip_value(js, 2);
        if (rc < 0 || (rc = shs__json_next_member(js, '}')) <= 0)
            return rc;
    }
}

static const char *const k_blob_keys[] = { "name", "rank", "file", "key", "byte_range", "xxh3" };

static int scan_blob(mparse *s, shs__mblob *b, rblob *r)
{
    shs__json *js = &s->js;
    uint32_t obj = ++js->next_obj, seen = 0;
    int rc, which = -1;
    r->obj = 1;
    if (closes_at_once(js, '}'))
        return SHS_OK;
    for (;;) {
        if ((rc = member(s, obj, k_blob_keys, 6, &seen, &which)) < 0)
            return rc;
        switch (which) {
        case 0: rc = scan_strdup(s, 3, &b->name, &r->name_k); break;
        case 1: rc = scan_num(s, 3, &r->rank); break;
        case 2: rc = scan_num(s, 3, &r->file); break;
        case 3: rc = scan_strdup(s, 3, &b->key, &r->key_k); break;
        case 4: {
            jnum v[2] = { { 0, V_NONE }, { 0, V_NONE } };
            uint8_t ok;
            rc = scan_nums(s, 3, &r->br_k, &r->br_n, &ok, NULL, v, 2);
            r->b0 = v[0];
            r->b1 = v[1];
            break;
        }
        case 5: rc = scan_hex(s, 3, &b->hash, &r->hash_k); break;
        default: rc = shs__json_skip_value(js, 3);
        }
        if (rc < 0 || (rc = shs__json_next_member(js, '}')) <= 0)
            return rc;
    }
}

static int scan_blobs(mparse *s)
{
    shs__json *js = &s->js;
    shs__meta *m = s->m;
    int rc;
    if (!at(js, '[')) {
        s->blobs_k = V_OTHER;
        return shs__json_skip_value(js, 1);
    }
    s->blobs_k = V_ARR;
    if (closes_at_once(js, ']'))
        return SHS_OK;
    for (;;) {
        size_t cb = s->cap_b;
        if (grow((void **)&m->b, &cb, m->nb, sizeof *m->b) < 0 ||
            grow((void **)&s->rb, &s->cap_b, m->nb, sizeof *s->rb) < 0)
            return oom(s);
        size_t i = m->nb++;
        if (at(js, '{'))
            rc = scan_blob(s, &m->b[i], &s->rb[i]);
        else
            rc = shs__json_skip_value(js, 2);
        if (rc < 0 || (rc = shs__json_next_member(js, ']')) <= 0)
            return rc;
    }
}

enum {
    R_FORMAT,
    R_VERSION,
    R_STEP,
    R_WORLD,
    R_COMMON,
    R_MODEL_ONLY,
    R_FILES,
    R_TENSORS,
    R_BLOBS,
    R_SEAL,
    R_MS_SDM, /* MindSpore's metadata.json (meta_ms.c): only noted here */
    R_MS_SD,
    R_CIPHER,
    R_KEY_ID,
    R_SAVE_ID,
    R_SEGMENT,
    R_MAC,
    R_N
};
static const char *const k_root_keys[R_N] = {
    "format", "version", "step",    "world_size",    "common_xxh3",         "model_only",
    "files",  "tensors", "blobs",   "metadata_xxh3", "state_dict_metadata", "storage_data",
    "cipher", "key_id",  "save_id", "segment_bytes", "metadata_mac"
};

static int scan_model_only(mparse *s)
{
    shs__json *js = &s->js;
    if (at(js, 't')) {
        s->model_only_k = V_TRUE;
        return shs__json_literal(js, "true", 4);
    }
    if (at(js, 'f')) {
        s->model_only_k = V_FALSE;
        return shs__json_literal(js, "false", 5);
    }
    s->model_only_k = V_OTHER;
    return shs__json_skip_value(js, 1);
}

int shs__meta_scan(mparse *s)
{
    shs__json *js = &s->js;
    int rc, which = -1;
    size_t bad = shs__utf8_check((const unsigned char *)js->start, (size_t)(js->end - js->start));
    if (bad != (size_t)(js->end - js->start)) {
        js->p = js->start + bad;
        return shs__json_syntax_err(js, "not UTF-8");
    }
    shs__json_skip_ws(js);
    if (at(js, '[')) {
        s->root_k = V_ARR;
        if ((rc = shs__json_skip_value(js, 0)) < 0)
            return rc;
        goto end;
    }
    if (!at(js, '{'))
        return shs__json_syntax_err(js, js->p < js->end ? "'{' or '[' expected"
                                                        : "empty file, '{' or '[' expected");
    s->root_k = V_OBJ;
    uint32_t obj = ++js->next_obj, seen = 0;
    if (closes_at_once(js, '}'))
        goto end;
    for (;;) {
        if ((rc = member(s, obj, k_root_keys, R_N, &seen, &which)) < 0)
            return rc;
        switch (which) {
        case R_FORMAT: rc = scan_str(s, 1, &s->format, &s->format_k); break;
        case R_VERSION: rc = scan_num(s, 1, &s->version); break;
        case R_STEP: rc = scan_num(s, 1, &s->step); break;
        case R_WORLD: rc = scan_num(s, 1, &s->world_size); break;
        case R_COMMON: rc = scan_hex(s, 1, &s->m->common_hash, &s->common_k); break;
        case R_MODEL_ONLY: rc = scan_model_only(s); break;
        case R_FILES: rc = scan_files(s); break;
        case R_TENSORS: rc = scan_tensors(s); break;
        case R_BLOBS: rc = scan_blobs(s); break;
        case R_SEAL: rc = scan_str(s, 1, &s->seal, &s->seal_k); break;
        case R_MS_SDM:
        case R_MS_SD:
            s->ms_k = 1;
            rc = shs__json_skip_value(js, 1);
            break;
        case R_CIPHER: rc = scan_str(s, 1, &s->cipher, &s->cipher_k); break;
        case R_KEY_ID: rc = scan_hex(s, 1, &s->key_id, &s->key_id_k); break;
        case R_SAVE_ID: rc = scan_hex(s, 1, &s->save_id, &s->save_id_k); break;
        case R_SEGMENT: rc = scan_num(s, 1, &s->segment); break;
        case R_MAC: rc = scan_str(s, 1, &s->mac, &s->mac_k); break;
        default: rc = shs__json_skip_value(js, 1);
        }
        if (rc < 0 || (rc = shs__json_next_member(js, '}')) < 0)
            return rc;
        if (rc == 0)
            break;
    }
end:
    shs__json_skip_ws(js);
    if (js->p != js->end)
        return shs__json_syntax_err(js, "end of file expected");
    const struct nested_key *d = shs__json_nested_dup(js);
    if (d)
        return shs__err(SHS_ECORRUPT, "%s: invalid JSON: duplicate key '%.*s' in an object",
                        js->fname, (int)(d->len > 200 ? 200 : d->len), d->key);
    return SHS_OK;
}
