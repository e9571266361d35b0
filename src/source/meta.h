/*
 * meta.h -- the in-memory model of a checkpoint: metadata.json of a step
 * directory, parsed and validated, or the same model built from a plain
 * directory of safetensors files.  Format: docs/checkpoint.md.
 * Everything that reads a checkpoint (load, verify, the public view, the
 * incremental save) goes through this model.
 */
#ifndef SHS_META_H
#define SHS_META_H

#include "common/internal.h"
#include "source/hf_index.h"

/* The version written; version 1 (the previous release) is still read. */
#define SHS__META_VERSION 2
/* The version of an encrypted checkpoint (crypt.h): an older reader
   refuses it instead of loading ciphertext that its checksums accept. */
#define SHS__META_VERSION_ENC 3
/* The version an encrypted save writes (crypt.h): chunks as segmented
   AES-256-GCM (STREAM), metadata.json authenticated under the key.
   Version 3 is still read. */
#define SHS__META_VERSION_STREAM 4
/* Steps are below 10^18: the step directory names hold at most 18 digits. */
#define SHS__STEP_LIMIT 1000000000000000000LL

/* One saved chunk of a tensor: the box [off, off + shape) of the global
   tensor, stored as tensor `key` of file `file`. */
typedef struct shs__mchunk {
    uint64_t *off, *shape;
    uint32_t file; /* index into shs__meta.f */
    char *key;
    uint64_t b0, b1; /* absolute byte range in the file */
    uint64_t hash;   /* XXH3 of the whole chunk, when has_hash
                                 (always, in a step directory) */
    int has_hash;
    int replica;      /* an earlier chunk of the tensor has the same
                                 box: readers use that one */
    uint64_t block;   /* > 0: per-block checksums of `block` bytes */
    uint64_t *blocks; /* XXH3 of each block (the last may be short) */
    size_t nblocks;
    /* version 3 (crypt.h): the chunk is AES-256-GCM ciphertext ("aes_gcm");
       its checksums are of the ciphertext */
    int enc;
    unsigned char nonce[12], tag[16];
    /* version 4 (crypt.h): the chunk's salt ("gcm_salt") and one tag per
       segment ("gcm_tags"), ntags * 16 bytes */
    unsigned char salt[16];
    unsigned char *tags;
    uint64_t ntags;
} shs__mchunk;

/* A tensor of the checkpoint: its global shape and its saved chunks
   (replicas saved by several ranks appear once per rank, the later copies
   marked `replica`).  The distinct chunks tile the global shape exactly. */
typedef struct shs__mtensor {
    char *name;
    shs_kind kind;
    shs_dtype dtype;
    size_t ndim;
    uint64_t *gshape;
    shs__mchunk *c;
    size_t nc;
} shs__mtensor;

/* A file of the step directory and the rank that wrote it. */
typedef struct shs__mfile {
    char *name;
    int rank;
    int has_header_hash;  /* version 2: header_hash and size known */
    uint64_t header_hash; /* XXH3 of bytes [0, data start): length + header */
    uint64_t size;        /* bytes */
} shs__mfile;

/* A rank-local blob (rank state): bytes in a U8 tensor of a file. */
typedef struct shs__mblob {
    char *name;
    int rank;
    uint32_t file;
    char *key;
    uint64_t b0, b1, hash;
} shs__mblob;

/* A whole step directory.  t is sorted by name (shs__meta_find). */
typedef struct shs__meta {
    int64_t step;
    int world_size;
    int plain;           /* a plain directory of safetensors files */
    int mindspore;       /* a MindSpore Checkpoint 2.0 step directory
                                 (meta_ms.c): no checksums, version 0 */
    int version;         /* of metadata.json (0 for a plain directory) */
    int has_common_hash; /* version 2: common.json's XXH3 is known */
    uint64_t common_hash;
    int model_only; /* "model_only": true -- weights only, no
                                 optimizer state (optional key) */
    int encrypted;  /* versions 3 and 4: "cipher", every chunk
                                 encrypted under the key "key_id" names */
    char key_id[17];
    char save_id[17];         /* versions 3, 4: "save_id", in every chunk's AAD */
    uint64_t segment;         /* version 4: "segment_bytes" of every chunk's STREAM */
    unsigned char mac[32];    /* version 4: "metadata_mac" */
    unsigned char digest[32]; /* version 4: SHA-256 of metadata.json as its
                                 MAC covers it (crypt.h) */
    shs__mfile *f;
    size_t nf;
    shs__mtensor *t;
    size_t nt;
    shs__mblob *b;
    size_t nb;
} shs__meta;

/* "model", "opt": the "kind" of a tensor in metadata.json, by shs_kind. */
extern const char *const shs__kind_name[2];

/* Parse and validate <dir>/metadata.json into *m: every rule of
   docs/checkpoint.md (the one place they are checked: load, verify, the
   view and the tools all come here).  On error *m is empty and the message
   names the file and the problem (SHS_ECORRUPT, or SHS_ECHECKSUM when the
   seal of a version-2 file does not match).  MindSpore's metadata.json
   (meta_ms.h) is read only with SHS__META_MINDSPORE, else it is
   SHS_EUNSUPPORTED; a directory without metadata.json is SHS_ENOENT
   (which reader a directory needs is source.h's decision). */
#define SHS__META_MINDSPORE 1u
int shs__meta_parse(shs__meta *m, const char *dir, unsigned flags);
/* Whether <dir>/metadata.json is MindSpore's (*mindspore 1) or ours,
   by the rule shs__meta_parse applies; a file that does not even scan
   counts as ours (its open reports it).  Errors: reading it. */
int shs__meta_form(const char *dir, int *mindspore);

/* Version 2: SHS_ECHECKSUM unless <dir>/common.json has the checksum
   metadata.json records (no-op for version 1 and plain directories). */
int shs__meta_check_common(const shs__meta *m, const char *dir);

/* Version 2: SHS_ECHECKSUM unless file fi, opened as f, has the size and
   header checksum metadata.json records (no-op otherwise). */
int shs__meta_check_file(const shs__meta *m, const char *dir, uint32_t fi, const shs_file *f);

/* XXH3 of a safetensors file's bytes [0, data start): the 8-byte length
   and the header, padding included (the "header_xxh3" of a file). */
uint64_t shs__header_hash(const shs_file *f);

/* Seal a metadata.json text (a JSON object without "metadata_xxh3"):
   returns a new text (caller frees with shs__free) ending with
   "metadata_xxh3":"<16 hex>"\n}\n, the hex being the XXH3 of the
   returned text with those 16 digits read as '0'.  NULL when out of
   memory or when `text` does not end with '}'. */
char *shs__meta_seal(const char *text, size_t len, size_t *out_len);

/* The tensor whose name is the `len` bytes at `name`, or NULL. */
const shs__mtensor *shs__meta_find_n(const shs__meta *m, const char *name, size_t len);

/* Models of safetensors files without metadata.json (meta_plain.c): each
   tensor whole (one chunk), names unique across files (SHS_ECORRUPT
   otherwise), files whose name holds "-opt-" hold optimizer state; plain
   set, world size 1.  The file names are relative to a folder: `dir`, or
   the folder of `path` / `index_path`. */

/* Every *.safetensors file of `dir` (step from the directory's name, else
   -1).  SHS_ENOCHECKPOINT when there is no such file. */
int shs__meta_from_plain(shs__meta *m, const char *dir);

/* One safetensors file. */
int shs__meta_from_file(shs__meta *m, const char *path);

/* The Hugging Face index of a sharded model: `weight_map` {tensor: file}
   picks the files and which tensor each holds (never a directory
   listing).  SHS_ECORRUPT naming the problem for a file name outside the
   index's folder, a missing file, a tensor the file does not hold, or a
   tensor of a named file that the map lists nowhere or in another file. */
int shs__meta_from_hf_index(shs__meta *m, const char *index_path);

/* Free what *m holds and empty it (an empty model may be freed again). */
void shs__meta_free(shs__meta *m);

/* The tensor named `name`, or NULL. */
const shs__mtensor *shs__meta_find(const shs__meta *m, const char *name);

/* A checksum as metadata.json spells it: 16 lowercase hex digits. */
void shs__hex64(char out[17], uint64_t v);
/* Parse 16 lowercase hex digits; -1 if `s` is anything else. */
int shs__parse_hex64(uint64_t *out, const char *s);

#endif
