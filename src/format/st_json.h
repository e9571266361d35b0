/*
 * st_json.h -- the strict one-pass JSON scanner (st_json.c): the one JSON
 * reader for every hostile input the library reads, the safetensors
 * header (st_header.c) and metadata.json (meta.c).  It scans strings,
 * numbers and literals, and skips any value without recursion (nesting
 * is a counter); the caller walks the structure it expects and interprets
 * it as it goes, so nothing builds a document tree.
 *
 * Two dialects, chosen by shs__json.meta:
 *   0  serde_json's, the reference safetensors parser's: "\u0000" allowed,
 *      integers of any size (beyond 64 bits they are read as f64), depth
 *      below 128; errors SHS_EJSON / SHS_ENESTING "header is not valid
 *      JSON";
 *   1  metadata.json's, the rules its reader had when it used jansson
 *      (kept so that no file read before is judged differently): no
 *      "\u0000", integers within int64 wherever they appear, 2048 nested
 *      containers; every error SHS_ECORRUPT "invalid JSON at line N".
 */
#ifndef SHS_ST_JSON_H
#define SHS_ST_JSON_H

#include "common/internal.h"

/* A key of an object whose keys the caller does not check itself (inside
   a skipped value, or unknown to the caller): they are checked for
   duplicates after the parse (shs__json_nested_dup). */
struct nested_key {
    uint32_t obj;
    uint32_t len;
    const char *key;
};

typedef struct shs__json {
    const char *p, *end, *start;
    const char *fname;
    char *arena; /* decoded strings; as large as the input + 1 */
    size_t arena_len;
    struct nested_key *nk;
    size_t n_nk, cap_nk;
    uint32_t next_obj; /* ids of objects, for nested_key.obj */
    int meta;          /* dialect: 1 metadata.json, 0 safetensors */
} shs__json;

static inline void shs__json_skip_ws(shs__json *js)
{
    while (js->p < js->end && (*js->p == ' ' || *js->p == '\n' || *js->p == '\r' || *js->p == '\t'))
        js->p++;
}

/* The dialect's syntax error naming the file, `what` and the position of
   js->p. */
int shs__json_syntax_err(shs__json *js, const char *what);
/* A string at js->p (which is at '"').  With `out` non-NULL the decoded
   bytes go to the arena, NUL-terminated, and *out / *out_len point at
   them; with `out` NULL the string is only checked. */
int shs__json_string(shs__json *js, const char **out, size_t *out_len);
/* A number at js->p.  *is_uint is set when it is a plain non-negative
   integer that fits in 64 bits, with its value in *val (for any other
   integer, *val is its magnitude when it fits).  A number beyond the f64
   range is a syntax error (and, in the metadata.json dialect, an integer
   beyond int64). */
int shs__json_number(shs__json *js, int *is_uint, uint64_t *val);
/* The literal `lit` (n bytes) at js->p. */
int shs__json_literal(shs__json *js, const char *lit, size_t n);
/* A member's key and its ':' (whitespace around both skipped).  With
   `key` NULL the key is only checked, not decoded. */
int shs__json_key(shs__json *js, const char **key, size_t *len);
/* Skip any JSON value, checking its syntax (and recording the keys of its
   objects for the duplicate check), without recursion.  `depth` is the
   nesting depth of the container holding the value. */
int shs__json_skip_value(shs__json *js, int depth);
/* After a member of an object (close '}') or an element of an array
   (close ']'): 1 when another follows (',' consumed), 0 when the
   container closed, or an error. */
int shs__json_next_member(shs__json *js, char close);
/* Record key `key` (len bytes, kept alive by the caller) of object `obj`
   for the duplicate check. */
int shs__json_note_key(shs__json *js, uint32_t obj, const char *key, size_t len);
/* The first key recorded twice for one object, or NULL (sorts js->nk). */
const struct nested_key *shs__json_nested_dup(shs__json *js);

#endif
