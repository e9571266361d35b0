/* An in-process communicator: n threads of one process, one per rank, meet
 * at a barrier and copy each other's buffers.  White-box tests and
 * benchmarks run "several ranks" with it, no MPI needed.  Header-only, so
 * that benchmarks can use it too.
 *
 *   tshared sh = { .n = n };
 *   pthread_barrier_init(&sh.bar, NULL, n);
 *   per thread: tcomm tc = { &sh, rank };
 *               shs_comm_create(&comm, rank, n, &k_tops, &tc);
 */
#ifndef SHS_TESTS_THREADCOMM_H
#define SHS_TESTS_THREADCOMM_H

#include "shardsafe.h"

#include <pthread.h>
#include <string.h>

#define TCOMM_MAX 16

typedef struct tshared {
    pthread_barrier_t bar;
    const void *slot[TCOMM_MAX];
    int n; /* ranks (at most TCOMM_MAX) */
} tshared;

typedef struct tcomm {
    tshared *sh;
    int rank;
} tcomm;

static inline int t_barrier(void *ctx)
{
    pthread_barrier_wait(&((tcomm *)ctx)->sh->bar);
    return SHS_OK;
}

static inline int t_bcast(void *ctx, void *buf, size_t len, int root)
{
    tcomm *c = ctx;
    if (c->rank == root)
        c->sh->slot[root] = buf;
    t_barrier(c);
    if (c->rank != root)
        memcpy(buf, c->sh->slot[root], len);
    return t_barrier(c);
}

static inline int t_allgather(void *ctx, const void *send, size_t len, void *recv)
{
    tcomm *c = ctx;
    c->sh->slot[c->rank] = send;
    t_barrier(c);
    for (int i = 0; i < c->sh->n; i++)
        memcpy((char *)recv + (size_t)i * len, c->sh->slot[i], len);
    return t_barrier(c);
}

static inline int t_gatherv(void *ctx, const void *send, const size_t *lens, void *recv, int root)
{
    tcomm *c = ctx;
    c->sh->slot[c->rank] = send;
    t_barrier(c);
    if (c->rank == root) {
        size_t at = 0;
        for (int i = 0; i < c->sh->n; i++) {
            memcpy((char *)recv + at, c->sh->slot[i], lens[i]);
            at += lens[i];
        }
    }
    return t_barrier(c);
}

/* point-to-point is not offered: the library falls back to collectives */
static inline int t_send(void *ctx, const void *buf, size_t len, int dest, int tag)
{
    (void)ctx, (void)buf, (void)len, (void)dest, (void)tag;
    return SHS_EUNSUPPORTED;
}

static inline int t_recv(void *ctx, void *buf, size_t len, int src, int tag)
{
    (void)ctx, (void)buf, (void)len, (void)src, (void)tag;
    return SHS_EUNSUPPORTED;
}

static const shs_comm_ops k_tops = {
    SHS_COMM_OPS_VERSION, t_barrier, t_bcast, t_allgather, t_gatherv, t_send, t_recv, NULL
};

#endif
