/*
 * meta_int.h -- what the files reading metadata.json share (meta.c, the
 * rules and the parse; meta_scan.c, the scan; meta_layout.c, the tiling
 * rule; meta_seal.c, the checksums): the records of the scan.
 */
#ifndef SHS_META_INT_H
#define SHS_META_INT_H

#include "source/meta.h"
#include "format/st_json.h"


/* ---- reading metadata.json ----
 *
 * Two phases.  The scan reads the whole text once with the strict scanner
 * (st_json.h, metadata.json's dialect) straight into the model, noting for
 * each value the model needs what kind of JSON value it was (mparse and
 * the r* records below); it reports only syntax errors, duplicate keys
 * among them.  The checks then apply every rule in a fixed order.  So a
 * syntax error anywhere wins over a broken rule, as with a parser building
 * a tree, and the members of an object may come in any order (a chunk may
 * name a file listed after it).
 */

/* What kind of JSON value a member held. */
enum {
    V_NONE,
    V_UINT,
    V_NEG,
    V_REAL,
    V_OTHER,
    V_STR,
    V_ARR,
    V_OBJ,
    V_TRUE,
    V_FALSE
};
/* A string as a checksum: absent, 16 hex digits, or anything else. */
enum {
    H_NONE,
    H_OK,
    H_BAD
};

typedef struct jnum {
    uint64_t v; /* V_UINT: the value; V_NEG: its magnitude */
    uint8_t k;
} jnum;

typedef struct rfile {
    jnum rank, size;
    uint8_t obj, name_k, hh_k;
} rfile;

typedef struct rchunk {
    jnum file, b0, b1, block;
    size_t off_n, shape_n, br_n, nblocks, bad_block;
    uint8_t obj, key_k, off_k, off_ok, shape_k, shape_ok, br_k, hash_k, blocks_k;
    uint8_t enc_k;          /* "aes_gcm": H_NONE, H_OK or H_BAD */
    uint8_t salt_k, tags_k; /* "gcm_salt", "gcm_tags" (version 4): likewise */
} rchunk;

typedef struct rtensor {
    const char *kind, *dtype; /* in the arena */
    size_t shape_n;
    rchunk *rc;
    size_t cap;
    uint8_t obj, kind_k, dtype_k, shape_k, shape_ok, chunks_k;
} rtensor;

typedef struct rblob {
    jnum rank, file, b0, b1;
    size_t br_n;
    uint8_t obj, name_k, key_k, br_k, hash_k;
} rblob;

typedef struct mparse {
    shs__json js;
    shs__meta *m;
    int root_k;                /* V_OBJ, or V_ARR for a top-level array */
    const char *format, *seal; /* in the arena */
    jnum version, step, world_size;
    uint8_t format_k, seal_k, common_k, model_only_k, files_k, tensors_k, blobs_k;
    uint8_t ms_k;       /* "state_dict_metadata" or "storage_data" seen: MindSpore's */
    const char *cipher; /* in the arena ("cipher", versions 3 and 4) */
    uint8_t cipher_k, key_id_k, save_id_k;
    uint64_t key_id, save_id;
    jnum segment;    /* "segment_bytes" (version 4) */
    const char *mac; /* "metadata_mac" (version 4), in the arena */
    uint8_t mac_k;
    rfile *rf;
    rtensor *rt;
    rblob *rb;
    size_t cap_f, cap_t, cap_b;
} mparse;

/* Phase one: the whole text of s->js into s->m and the r* records,
   syntax errors (duplicate keys among them) only. */
int shs__meta_scan(mparse *s);

/* Replicas marked; the distinct non-empty boxes must tile the tensor
   (SHS_ECORRUPT naming `path` and the tensor otherwise). */
int shs__meta_check_tiling(shs__mtensor *t, const char *path);

/* The rules of encryption (meta_cipher.c, crypt.h): the top-level
   members of versions 3 and 4 (and their absence before), chunk k of
   tensor t, and after the seal, version 4's MAC (`buf`, `len`: the
   text). */
int shs__meta_check_cipher(mparse *s, const char *path);
int shs__meta_check_chunk_cipher(const mparse *s, shs__mtensor *t, const rchunk *q, size_t k,
                                 const char *path);
int shs__meta_check_mac(mparse *s, char *buf, size_t len, const char *path);

/* Version 2: the seal of metadata.json (`buf`, `len` bytes, hashed in
   place and put back), whose top-level "metadata_xxh3" is `value` (NULL
   when it is not a string). */
int shs__meta_check_seal(char *buf, size_t len, const char *value, const char *path);

#endif
