/*
 * internal.h -- private helpers shared by every module of libshardsafe:
 * the allocator hook, the thread-local error message, small utilities.
 * Nothing here is part of the public API.
 */
#ifndef SHS_INTERNAL_H
#define SHS_INTERNAL_H

#include "shardsafe.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- allocation (alloc.c): everything goes through the hook ---- */
void *shs__malloc(size_t size);
void *shs__calloc(size_t n, size_t size); /* checked n * size */
void *shs__realloc(void *ptr, size_t size);
void shs__free(void *ptr);
char *shs__strdup(const char *s);
char *shs__strndup(const char *s, size_t n);

/* ---- errors (error.c) ---- */
/* Record a message for this thread and return `status` (for `return`). */
/* Defined here, not in error.c, so that a static analyzer sees that an
   error path returns `status` (it does not follow a call's return value
   across files). */
static inline int shs__err(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int shs__verr(int status, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static inline int shs__err(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    shs__verr(status, fmt, ap);
    va_end(ap);
    return status;
}
/* Prefix the current message with "<prefix>: " and return `status`. */
int shs__err_prefix(int status, const char *prefix);
/* Map an errno value to a status and record "<what> '<path>': strerror". */
int shs__err_errno(int err, const char *what, const char *path);
void shs__err_clear(void);

/* ---- checked arithmetic ---- */
static inline bool shs__mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_mul_overflow(a, b, out);
}
static inline bool shs__add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_add_overflow(a, b, out);
}

/* Byte size from element count; SHS_EOVERFLOW / SHS_EMISALIGNED. */
int shs__nbytes_from_numel(uint64_t *out, shs_dtype dtype, uint64_t numel);

/* Block-wise dequantization, in place (dtype.c): `data` is the box
   [off, off + shape) of a 2-D tensor, dense, as `dtype` (F32, BF16 or
   F16) holding FP8 values converted exactly; element [i][j] becomes
   F32(x * s) rounded to `dtype`, s = scale[(off[0]+i)/block -
   off[0]/block][(off[1]+j)/block - off[1]/block], `scale` a dense F32
   array with `scale_cols` columns. */
void shs__dequant_blocks(void *data, shs_dtype dtype, const uint64_t off[2],
                         const uint64_t shape[2], const float *scale, uint64_t scale_cols,
                         uint64_t block);

/* "2, 3": the n values of v into buf[cap] (cut when it is full), for
   messages naming a shape. */
void shs__dims_text(char *buf, size_t cap, const uint64_t *v, size_t n);

/* A growable byte buffer (strbuf style). */
typedef struct shs__buf {
    char *data;
    size_t len;
    size_t cap;
} shs__buf;
#define SHS__BUF_INIT                                                                              \
    {                                                                                              \
        NULL, 0, 0                                                                                 \
    }
int shs__buf_grow(shs__buf *b, size_t extra);
int shs__buf_add(shs__buf *b, const void *data, size_t len);
int shs__buf_addc(shs__buf *b, char c);
int shs__buf_addf(shs__buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void shs__buf_release(shs__buf *b);

/* Append `s` (len bytes) as a JSON string literal with serde_json's
   escaping: \" \\ \b \f \n \r \t, other control bytes as \u00xx. */
/* failed allocations of the calling thread so far (tells an out-of-memory
   jansson parse from a syntax error) */
unsigned long shs__alloc_failures(void);
struct json_t;
/* json_dumps() that fails whole on out of memory (shs__free the result) */
char *shs__json_dumps(const struct json_t *json, size_t flags);
/* json_loadb() that fails (NULL, *oom = 1) if an allocation failed in it */
struct json_error_t;
struct json_t *shs__json_loadb(const char *buf, size_t len, size_t flags, struct json_error_t *err,
                               int *oom);
int shs__json_escape(shs__buf *b, const char *s, size_t len);

/* Validate UTF-8 (RFC 3629: no overlongs, no surrogates, <= U+10FFFF).
   Returns the offset of the first invalid byte, or len if valid. */
size_t shs__utf8_check(const unsigned char *s, size_t len);

/* Absolute byte range in the file of a tensor of a sealed writer. */
int shs__writer_tensor_range(const shs_writer *w, const char *name, uint64_t *begin, uint64_t *end);

#endif
