/*
 * namemap.h -- open-addressing hash from byte-string names to indices,
 * used for tensor lookup and duplicate detection.  The map does not own
 * the names: it stores indices, and the caller passes a function that
 * gives back the name of an index.
 */
#ifndef SHS_NAMEMAP_H
#define SHS_NAMEMAP_H

#include "common/internal.h"

typedef struct shs__namemap {
    uint32_t *slots; /* index + 1, or 0 for empty */
    size_t mask;     /* capacity - 1 (power of two) */
    size_t count;
} shs__namemap;

typedef const char *(*shs__name_fn)(const void *ctx, uint32_t index, size_t *len);

/* Capacity for at least `n` names at load <= 1/2. */
int shs__namemap_init(shs__namemap *m, size_t n);
void shs__namemap_release(shs__namemap *m);
/* Insert index `idx` named (name, len).  Returns 1 if inserted, 0 if the
   name is already present (*existing set), or SHS_ENOMEM on growth failure. */
int shs__namemap_insert(shs__namemap *m, const char *name, size_t len, uint32_t idx,
                        shs__name_fn fn, const void *ctx, uint32_t *existing);
/* Index of name, or -1. */
long shs__namemap_find(const shs__namemap *m, const char *name, size_t len, shs__name_fn fn,
                       const void *ctx);
/* Replace every stored index i by perm[i]. */
void shs__namemap_remap(shs__namemap *m, const uint32_t *perm);

#endif
