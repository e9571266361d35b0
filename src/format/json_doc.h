/*
 * json_doc.h -- JSON documents from disk as a tree (json_doc.c), built by
 * the strict scanner of st_json.h in its metadata.json dialect: the ONE
 * reader of every JSON document the library takes from disk or from
 * another rank (common.json, Hugging Face indexes, MindSpore metadata,
 * name maps, layout documents, the ranks' metadata).  Strict: no NaN,
 * comments, trailing commas, BOM, raw control characters or lone
 * surrogates; a key repeated in an object is an error; integers within
 * int64; nesting capped (2048 containers) without recursion on the C
 * stack.  Errors are SHS_ECORRUPT "<file>: invalid JSON at line N ...".
 *
 * The tree is built in one array; lookups by key are binary searches
 * over each object's keys sorted once, so a 100,000-entry weight_map
 * costs O(log n) per tensor.  Strings are decoded (UTF-8, may hold NUL:
 * use len).
 */
#ifndef SHS_JSON_DOC_H
#define SHS_JSON_DOC_H

#include "common/internal.h"

enum {
    SHS__J_NULL,
    SHS__J_FALSE,
    SHS__J_TRUE,
    SHS__J_NUM,
    SHS__J_STR,
    SHS__J_ARR,
    SHS__J_OBJ
};

typedef struct shs__jnode {
    uint8_t type;
    uint8_t is_uint;    /* SHS__J_NUM: a non-negative integer (u) */
    uint8_t is_integer; /* SHS__J_NUM: no fraction or exponent */
    uint64_t u;         /* is_uint: the value; another integer: |value| */
    double d;           /* SHS__J_NUM: the value as a double */
    const char *s;      /* SHS__J_STR: the decoded bytes, NUL-terminated */
    size_t len;
    const char *key; /* the member's key when its parent is an object */
    size_t key_len;
    uint32_t next;       /* next sibling, in document order; 0: none */
    uint32_t first;      /* SHS__J_ARR / SHS__J_OBJ: first child; 0: none */
    uint32_t n;          /* number of children */
    uint32_t *idx;       /* SHS__J_OBJ: children sorted by key; SHS__J_ARR: in order */
    size_t raw, raw_len; /* the value's own text: bytes [raw, raw + raw_len) of
                            the input */
} shs__jnode;

typedef struct shs__jdoc {
    shs__jnode *v; /* v[0] is the root */
    size_t n, cap;
    char *arena; /* decoded strings */
    char *text;  /* shs__jdoc_load: the input, kept for raw spans */
} shs__jdoc;

/* Parse `len` bytes (named `fname` in messages).  On error the document
   is empty (shs__jdoc_free is still allowed). */
int shs__jdoc_parse(shs__jdoc *d, const char *text, size_t len, const char *fname);
void shs__jdoc_free(shs__jdoc *d);

static inline const shs__jnode *shs__jroot(const shs__jdoc *d)
{
    return d->n ? &d->v[0] : NULL;
}
/* The member `key` of object `obj` (NULL when obj is no object or has no
   such member). */
const shs__jnode *shs__jget_n(const shs__jdoc *d, const shs__jnode *obj, const char *key,
                              size_t key_len);
const shs__jnode *shs__jget(const shs__jdoc *d, const shs__jnode *obj, const char *key);
/* Children in document order: for (c = shs__jfirst(d, v); c; c = shs__jnext(d, c)). */
const shs__jnode *shs__jfirst(const shs__jdoc *d, const shs__jnode *v);
const shs__jnode *shs__jnext(const shs__jdoc *d, const shs__jnode *v);

static inline int shs__jis(const shs__jnode *v, int type)
{
    return v && v->type == type;
}
/* Children of an array or object (0 for anything else or NULL). */
static inline size_t shs__jsize(const shs__jnode *v)
{
    return v && v->type >= SHS__J_ARR ? v->n : 0;
}
/* Element i of an array, or NULL. */
const shs__jnode *shs__jat(const shs__jdoc *d, const shs__jnode *arr, size_t i);
/* 1 and *out when v is an integer (no fraction or exponent), else 0. */
int shs__jint(const shs__jnode *v, int64_t *out);

/* A string member's value, or NULL (absent, or not a string). */
const char *shs__jstr(const shs__jdoc *d, const shs__jnode *obj, const char *key);

/* Read a whole file (at most `max` bytes) and parse it. */
int shs__jdoc_load(shs__jdoc *d, const char *path, size_t max);

/* The value v of d (a tree this reader checked) copied into jansson
   values, for the code that edits documents as jansson trees (the layout
   documents of reshard, which it also builds and writes): jansson builds
   values but never lexes what came from disk.  Integers beyond int64 and
   strings or keys holding NUL are refused (SHS_ECORRUPT naming fname), as
   jansson's own reader would.  *out is NULL on error. */
struct json_t;
int shs__jdoc_to_jansson(struct json_t **out, const shs__jdoc *d, const shs__jnode *v,
                         const char *fname);

#endif
