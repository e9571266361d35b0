/*
 * exchange.h -- the ranks' layouts, exchanged over the comm (replicas.c).
 * Used by the save (who writes each replica) and by the balanced load
 * (who reads each saved chunk).
 */
#ifndef SHS_EXCHANGE_H
#define SHS_EXCHANGE_H

#include "checkpoint/checkpoint.h"
#include "dist/comm.h"

/* One registered tensor of one rank. */
typedef struct shs__lay_entry {
    const char *name;
    uint32_t name_len, rank;
    uint8_t kind, dtype, ndim;
    const uint64_t *gshape, *box; /* box: offset[ndim] then shape[ndim] */
} shs__lay_entry;

/* Every rank's layout, parsed, in rank order. */
typedef struct shs__layout_set {
    char *all;
    size_t *lens;
    shs__lay_entry *e;
    size_t n;
    uint64_t *words; /* aligned copies of the shapes and boxes */
} shs__layout_set;

/* All-gather every rank's layout (model tensors, and optimizer tensors
   when with_optim) into *ls; collective over comm.  On error *ls is
   empty. */
int shs__gather_layouts(const shs_state *st, int with_optim, shs_comm *comm, shs__layout_set *ls);
void shs__layout_set_release(shs__layout_set *ls);

/*
 * remove_redundancy: every rank learns every rank's layout, and the same
 * pure plan on every rank picks one writer per replicated chunk, balanced
 * by bytes.  *skip_out[i] = 1 when another rank writes state tensor i.
 * Collective over comm.  *skip_out belongs to req->layout_cache when there
 * is one, else to the caller.
 */
int shs__plan_replicas(const shs_state *st, const shs__save_req *req, shs_comm *comm,
                       uint8_t **skip_out);

#endif
