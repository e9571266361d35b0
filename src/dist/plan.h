/*
 * plan.h -- pure planning of a distributed save and load (no I/O, no MPI).
 *
 * The distributed layer gathers every rank's chunk list, calls these
 * functions (each rank computes the same plan, deterministically) and then
 * executes its own part of it.
 *
 *   save: which holder writes each chunk.  With remove_redundancy every
 *         unique (tensor, box) -- replicas are chunks of the same tensor
 *         with an identical box on several ranks -- is written exactly once,
 *         by one of its holders, balanced by bytes: unique chunks by
 *         number of holders ascending (chunks only one rank holds are
 *         placed first: they have no choice), then decreasing size (ties:
 *         tensor id, then box order), each to the holder with the fewest
 *         bytes so far (ties: lowest rank).
 *   load: for every requested box, the saved chunks that intersect it; with
 *         load_balanced, one reader per needed saved chunk, which sends the
 *         parts the other ranks need: needed chunks in decreasing size
 *         (ties: tensor id, then box order), each to the rank with the
 *         fewest bytes read so far among those that need it (ties: lowest
 *         rank).
 *
 * Results depend only on the content of the inputs, never on their order:
 * a shuffled input gives the same decisions for every chunk and the same
 * per-rank lists (with indices into the shuffled arrays).
 *
 * Cost: O(n log n) in the number of chunks with small constants (radix
 * and counting sorts, per-tensor binary search); memory O(n) in 4..16-byte
 * arrays.  The load plan works tensor by tensor (cache-friendly sweeps) and
 * sizes its arrays exactly: beyond its output (12 bytes per item, 4 per
 * read and per send) it needs about 12 bytes per request and 12 per saved
 * chunk at its peak (16,384 -> 8,192 ranks x 1,000 chunks: ~300 MiB).
 * Overlap checks sweep each tensor along the dimension in which its boxes
 * have the most distinct offsets, so regular grids (splits along one or more
 * dimensions) stay near linear.
 *
 * Inputs are borrowed: the load plan keeps pointers to `tensors`, `saved`
 * and `requests`, which must outlive it.  Not thread-safe per plan; distinct
 * plans may be built on distinct threads.  Errors are reported through
 * shs__err (SHS_EINVAL with a message naming the tensor, the ranks and the
 * boxes; SHS_ENOMEM; SHS_EOVERFLOW; SHS_EUNSUPPORTED beyond 2^32-2 chunks).
 */
#ifndef SHS_PLAN_H
#define SHS_PLAN_H

#include "common/internal.h"

#define SHS_PLAN_MAX_NDIM 64

/* A tensor of the global state: id = its index in the tensor array. */
typedef struct shs_plan_tensor {
    uint32_t ndim;         /* <= SHS_PLAN_MAX_NDIM; 0 = scalar */
    shs_dtype dtype;       /* chunk bytes = volume x element bits / 8 */
    const uint64_t *shape; /* [ndim] global shape */
} shs_plan_tensor;

/* A chunk: a box of one tensor held (save), stored (load: saved chunk) or
   wanted (load: request) by one rank.  `box` points at 2*ndim values,
   offset[ndim] then shape[ndim], in elements; several chunks may share the
   same storage (replicas).  For saved chunks `rank` is ignored; the saved
   chunk id is its index in the array. */
typedef struct shs_plan_chunk {
    uint32_t tensor;
    uint32_t rank;
    const uint64_t *box;
} shs_plan_chunk;

/* ------------------------------------------------------------------------
 * Save plan
 * ---------------------------------------------------------------------- */

typedef struct shs__save_plan {
    size_t nchunks;
    uint32_t nranks;
    uint8_t *write;            /* [nchunks]: 1 = chunks[i]'s holder writes it */
    uint64_t *rank_bytes;      /* [nranks]: bytes each rank writes */
    size_t nunique;            /* unique (tensor, box) pairs */
    uint64_t unique_bytes;     /* bytes of the unique chunks */
    uint64_t total_bytes;      /* bytes of all chunks, replicas included */
    uint64_t written_bytes;    /* sum of rank_bytes */
    double max_over_mean;      /* max(rank_bytes) / mean(rank_bytes); 1 if 0 */
    uint32_t first_incomplete; /* lowest tensor id whose unique boxes do not
                                  tile it exactly, UINT32_MAX if none */
} shs__save_plan;

/* Plan a save.  `chunks[i].rank` < nranks.  Validation: tensor ids and
   dtypes valid, boxes inside their tensor, the same rank holding the same
   box twice, and boxes of one tensor that overlap without being identical
   (SHS_EINVAL naming the tensor id and both ranks).  The unique boxes need
   not cover the tensor; see first_incomplete and shs__plan_covers.
   On success *out owns its arrays (shs__save_plan_release); on failure
   *out is zeroed and nothing is allocated. */
int shs__plan_save(shs__save_plan *out, const shs_plan_tensor *tensors, uint32_t ntensors,
                   const shs_plan_chunk *chunks, size_t nchunks, uint32_t nranks,
                   bool remove_redundancy);

/* Free the arrays of a save plan (NULL or zeroed plan: no-op). */
void shs__save_plan_release(shs__save_plan *plan);

/* Whether the unique boxes of `chunks` tile every tensor exactly (no gap;
   overlaps are already an error).  Returns 1 when complete, 0 when not
   (then *out_tensor = the lowest incomplete tensor id and the thread's
   message names it), or a negative status for invalid input.
   `out_tensor` may be NULL. */
int shs__plan_covers(uint32_t *out_tensor, const shs_plan_tensor *tensors, uint32_t ntensors,
                     const shs_plan_chunk *chunks, size_t nchunks, uint32_t nranks);

/* ------------------------------------------------------------------------
 * Load plan
 * ---------------------------------------------------------------------- */

/* One (saved chunk, requested box) intersection needed by a rank. */
typedef struct shs__load_item {
    uint32_t chunk; /* index in saved[] */
    uint32_t req;   /* index in requests[]; the rank is requests[req].rank */
    uint32_t src;   /* rank that reads `chunk` from storage and provides
                        this part: == the requester when it reads it itself,
                        otherwise src sends it (see sends) */
} shs__load_item;

typedef struct shs__load_plan {
    const shs_plan_tensor *tensors; /* borrowed inputs */
    const shs_plan_chunk *saved;
    const shs_plan_chunk *requests;
    uint32_t nranks;
    bool load_balanced;

    /* Items of rank r: items[item_start[r] .. item_start[r+1]), ordered by
       (tensor, requested box, saved box).  With duplicate saved boxes
       (replicas saved several times) one of them is used. */
    shs__load_item *items;
    size_t nitems;
    size_t *item_start; /* [nranks + 1] */

    /* load_balanced only (otherwise all read_start[] are 0): saved chunks
       that rank r reads in full, reads[read_start[r] .. read_start[r+1]),
       in tensor / box order.  Every saved chunk needed by any rank appears
       exactly once over all ranks. */
    uint32_t *reads;
    size_t nreads;
    size_t *read_start; /* [nranks + 1] */

    /* Item indices that rank r sends (items[i].src == r, requester != r),
       sends[send_start[r] .. send_start[r+1]), ordered by destination rank
       then item order.  Empty without load_balanced. */
    uint32_t *sends;
    size_t nsends;
    size_t *send_start; /* [nranks + 1] */

    uint64_t *rank_read_bytes; /* [nranks]: bytes read from storage:
                                   whole chunks (balanced) or the
                                   intersections (not balanced) */
    uint64_t read_bytes;       /* sum of rank_read_bytes */
    uint64_t needed_bytes;     /* bytes of the distinct saved chunks needed */
    uint64_t sent_bytes;       /* bytes of all sends */
    double max_over_mean;      /* of rank_read_bytes; 1 if all 0 */
} shs__load_plan;

/* Plan a load.  `saved` boxes must lie inside their tensors and must not
   overlap unless identical; `requests[i].rank` < nranks.  Every requested
   box must be covered by saved chunks, else SHS_EINVAL naming the first
   uncovered request in (rank, tensor, box) order and how much of it is
   covered.  Ownership as for shs__plan_save. */
int shs__plan_load(shs__load_plan *out, const shs_plan_tensor *tensors, uint32_t ntensors,
                   const shs_plan_chunk *saved, size_t nsaved, const shs_plan_chunk *requests,
                   size_t nrequests, uint32_t nranks, bool load_balanced);

void shs__load_plan_release(shs__load_plan *plan);

/* The intersection box of an item, in global tensor coordinates
   (off/shape have the tensor's ndim entries); returns its byte size. */
uint64_t shs__load_item_box(const shs__load_plan *plan, const shs__load_item *item, uint64_t *off,
                            uint64_t *shape);

#endif
