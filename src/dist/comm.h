/*
 * comm.h -- the collectives seam (see shardsafe.h): helpers over the ops.
 */
#ifndef SHS_COMM_H
#define SHS_COMM_H

#include "common/internal.h"

struct shs_comm {
    int rank, size;
    shs_comm_ops ops;
    void *ctx;
    /* [size] messages of shs__comm_agree, allocated with the handle: the
       agreement is how ranks learn of an error, so it must not need memory
       when memory has run out (one buffer is enough: collectives come in
       the same order on every rank, so one thread at a time uses them) */
    void *agree_buf;
};

int shs__comm_barrier(shs_comm *c);
int shs__comm_bcast(shs_comm *c, void *buf, size_t len, int root);
int shs__comm_allgather(shs_comm *c, const void *send, size_t len, void *recv);
/* Gather variable-size byte strings to root.  On root, *out is a buffer
   of all of them in rank order and lens[i] their sizes (caller frees *out
   and *lens); elsewhere both are NULL. */
int shs__comm_gather_bytes(shs_comm *c, const void *send, size_t len, int root, char **out,
                           size_t **lens);
/* Every rank receives every rank's bytes (as shs__comm_gather_bytes does
   for the root). */
int shs__comm_allgather_bytes(shs_comm *c, const void *send, size_t len, char **out, size_t **lens);

/*
 * Agree on the outcome of a step every rank did: each passes its status and
 * message; returns SHS_OK on every rank if all succeeded, else on every
 * rank the status of the lowest failing rank with a message naming it
 * ("rank 2: cannot write '...': No space left on device").  Allocates
 * nothing, so a rank that ran out of memory still joins.
 *
 * The rule for every collective sequence (save.c, replicas.c, load.c,
 * manager.c): a rank that fails a local step does not skip the next
 * collective; it carries its failure into an agreement that every rank
 * makes at the same point, and then all return the same error.  The
 * helpers above follow it: a local allocation failure inside them is
 * agreed on before the data collective that needs the memory.
 */
int shs__comm_agree(shs_comm *c, int status, const char *msg);
/* The longest message an agreement carries (what shs_last_error holds):
   callers copying the error for it use a buffer of this size. */
#define SHS__AGREE_MSG 1024

#endif
