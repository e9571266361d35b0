/*
 * st_parse.h -- internals of the safetensors reader, shared by its three
 * files:
 *
 *   st_read.c    the file handle: checks 1-3 of the order below, open with
 *                pread of the header and mmap of the data, reads, slices;
 *   st_header.c  checks 4-8: UTF-8, then the safetensors schema of the
 *                header and the layout of the data it describes;
 *   st_json.c    the strict JSON scanner under st_header.c (check 5),
 *                shared with metadata.json (st_json.h).
 *
 * The check order (the reference implementation's, huggingface/
 * safetensors, which parses with serde_json):
 *
 *   1. file >= 8 bytes                      SHS_EHEADER_TOO_SMALL
 *   2. header length <= 100,000,000         SHS_EHEADER_TOO_LARGE
 *   3. 8 + header length <= file size       SHS_EHEADER_LENGTH
 *   4. header is UTF-8                      SHS_EUTF8
 *   5. header is strict JSON, depth < 128   SHS_EJSON / SHS_ENESTING
 *   6. header has the safetensors schema    SHS_ESCHEMA / SHS_EDTYPE /
 *                                           SHS_EDUPLICATE
 *   7. per tensor, in data order: offsets contiguous from 0, numel x bits
 *      without overflow, whole bytes, range == size
 *                                           SHS_EOFFSET / SHS_EOVERFLOW /
 *                                           SHS_EMISALIGNED / SHS_ETENSOR_SIZE
 *   8. data ends exactly at end of file     SHS_ETRAILING
 *
 * The reference deserialises through a `#[serde(flatten)]` struct, which
 * buffers the whole document before interpreting it: every syntax error
 * therefore wins over every schema error.  We parse in one pass and keep
 * the first schema error aside (shs__hdr_parser.deferred) until the syntax
 * of the whole header has been checked.  Nesting is tracked with a
 * counter, never with recursion.
 */
#ifndef SHS_ST_PARSE_H
#define SHS_ST_PARSE_H

#include "common/internal.h"
#include "common/namemap.h"
#include "format/st_json.h"

typedef struct shs__st_tensor {
    shs_tensor_info info;
    uint64_t begin, end; /* data_offsets as written */
    size_t shape_at;     /* index into the shape arena while parsing */
    uint32_t doc_index;  /* position in the header */
} shs__st_tensor;

typedef struct shs__st_meta {
    const char *key, *value;
    size_t key_len, value_len; /* either may hold "\u0000" */
} shs__st_meta;

struct shs_file {
    char *path;
    int fd;
    const uint8_t *map; /* whole file (mmap or caller memory) or NULL */
    size_t map_len;
    int owns_map;
    uint64_t file_size, header_len;
    const char *header;
    char *header_copy; /* when the header was read with pread */
    char *arena;       /* decoded strings */
    uint64_t *shapes;
    shs__st_tensor *tensors;
    size_t n_tensors;
    shs__namemap names;
    shs__st_meta *meta;
    size_t n_meta;
    int has_meta;
    /* the header's __metadata__ marks the file encrypted ("shardsafe_cipher",
       crypt.h): its tensors are not handed out as data unless sealed_ok */
    int sealed, sealed_ok;
};

/* The loader reads an encrypted file through its checkpoint's
   metadata.json and the key (load.c): its ciphertext may be read. */
void shs__file_allow_sealed(shs_file *f);

/* ---- the parser (st_json.c scans, st_header.c interprets) ---- */

typedef struct shs__hdr_parser {
    shs__json js; /* the scanner: position, arena, nested keys */
    /* growable arrays */
    shs__st_tensor *tensors;
    size_t n_tensors, cap_tensors;
    uint64_t *shapes;
    size_t n_shapes, cap_shapes;
    shs__st_meta *meta;
    size_t n_meta, cap_meta;
    int has_meta, seen_meta;
    shs__namemap names;
    /* first schema-level error, reported only if the syntax is clean */
    int deferred;
    char deferred_msg[512];
} shs__hdr_parser;

/* The scanner of st_json.h on the header (serde_json's dialect). */
static inline void shs__hdr_skip_ws(shs__hdr_parser *ps)
{
    shs__json_skip_ws(&ps->js);
}
static inline int shs__hdr_syntax_err(shs__hdr_parser *ps, const char *what)
{
    return shs__json_syntax_err(&ps->js, what);
}
static inline int shs__hdr_string(shs__hdr_parser *ps, const char **out, size_t *out_len)
{
    return shs__json_string(&ps->js, out, out_len);
}
static inline int shs__hdr_number(shs__hdr_parser *ps, int *is_uint, uint64_t *val)
{
    return shs__json_number(&ps->js, is_uint, val);
}
static inline int shs__hdr_literal(shs__hdr_parser *ps, const char *lit, size_t n)
{
    return shs__json_literal(&ps->js, lit, n);
}
static inline int shs__hdr_key(shs__hdr_parser *ps, const char **key, size_t *len)
{
    return shs__json_key(&ps->js, key, len);
}
static inline int shs__hdr_skip_value(shs__hdr_parser *ps, int depth)
{
    return shs__json_skip_value(&ps->js, depth);
}
static inline int shs__hdr_next_member(shs__hdr_parser *ps, char close)
{
    return shs__json_next_member(&ps->js, close);
}

/* ---- st_header.c ---- */

/* Checks 4-8 on f->header (f->header_len bytes; f->file_size set): on
   success f owns the tensors, shapes, metadata, names and arena. */
int shs__st_parse_header(shs_file *f, const char *fname);
/* The name of tensor i of a shs__st_tensor array (for shs__namemap). */
const char *shs__st_tensor_name(const void *ctx, uint32_t i, size_t *len);
/* Order of metadata entries by key bytes (qsort / bsearch). */
int shs__st_cmp_meta(const void *a, const void *b);

#endif
