/*
 * layout_spec.h -- layouts in the vocabulary of docs/reshard.md: per
 * tensor, MindSpore's device_matrix / tensor_map / rank_list, a split of
 * one dimension over N ranks, replicated, or explicit boxes per rank.
 * Resolved into boxes per rank, scaled to another world size, derived
 * from the boxes the ranks of a save hold (recorded in metadata.json as
 * "layouts"), all here.  Pure: no I/O.
 */
#ifndef SHS_LAYOUT_SPEC_H
#define SHS_LAYOUT_SPEC_H

#include "common/internal.h"

#include <jansson.h>

/* The largest world size a layout may describe (metadata.json's). */
#define SHS__LAYOUT_MAX_WORLD (1 << 24)

/* Boxes of one tensor: box k is [off + k*ndim, + shape + k*ndim) on
   rank[k]. */
typedef struct shs__lboxes {
    size_t n, cap, ndim;
    int *rank;
    uint64_t *off, *shape;
} shs__lboxes;

void shs__lboxes_release(shs__lboxes *b);
int shs__lboxes_add(shs__lboxes *b, int rank, const uint64_t *off, const uint64_t *shape);
/* Sort the boxes by rank (ranks below 2^24, fewer than 2^32 boxes). */
int shs__lboxes_sort(shs__lboxes *b);

/* The boxes `spec` gives tensor `name` (ndim, gshape) over `world` ranks:
   SHS_EINVAL naming `where`, the tensor and the problem (a malformed
   spec, a rank outside the world, a split that does not divide a
   dimension, boxes that do not tile the tensor).  b->ndim must be set. */
int shs__layout_resolve(shs__lboxes *b, const json_t *spec, const char *name, size_t ndim,
                        const uint64_t *gshape, int world, const char *where);

/* `spec` (for `world` ranks) scaled to `to` ranks: the mesh axes that
   split the tensor are scaled (the innermost that can be), replication
   stays.  SHS_EINVAL naming the tensor when it cannot be (explicit boxes,
   an explicit rank_list, a factor no axis takes). */
int shs__layout_scale(json_t **out, const json_t *spec, const char *name, size_t ndim, int world,
                      int to, const char *where);

/* The spec describing boxes `b` of a tensor of shape gshape: MindSpore's
   vocabulary when the boxes form an even grid with the same number of
   replicas per slice, else explicit boxes.  NULL when out of memory. */
json_t *shs__layout_derive(const shs__lboxes *b, const uint64_t *gshape);

/* A layout document: an object with "tensors" (an object) and
   "world_size" (optional; *world 0 when absent), no other key. */
int shs__layout_doc_check(const json_t *doc, int *world, const char *where);

/* Save side: add a fragment's "held" ({name: [offset, shape]}) of rank
   `rank` to the accumulator `acc`; then add "layouts" (a layout document
   of `world` ranks for every tensor of root's "tensors") to root. */
int shs__layout_collect(json_t *acc, const json_t *held, int rank);
int shs__layout_record(json_t *root, const json_t *acc, int world);

#endif
