/* An in-process communicator: n threads of one process, one per rank, meet
 * at a barrier and copy each other's buffers.  White-box tests and
 * benchmarks run "several ranks" with it, no MPI needed.  Header-only, so
 * that benchmarks can use it too.
 *
 *   tshared sh;
 *   tshared_init(&sh, n, p2p);
 *   per thread: tcomm tc = { &sh, rank };
 *               shs_comm_create(&comm, rank, n, &k_tops, &tc);
 *   tshared_destroy(&sh);   (every message sent must have been received)
 *
 * With p2p 0 point-to-point is not offered (the library falls back to
 * collectives); with p2p 1 sends are buffered (a sender never waits) and
 * received in order per (source, destination), as load_balanced uses them.
 */
#ifndef SHS_TESTS_THREADCOMM_H
#define SHS_TESTS_THREADCOMM_H

#include "shardsafe.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define TCOMM_MAX 16

typedef struct tmsg {
    struct tmsg *next;
    int tag;
    size_t len;
    char data[];
} tmsg;

typedef struct tshared {
    pthread_barrier_t bar;
    const void *slot[TCOMM_MAX];
    int n;   /* ranks (at most TCOMM_MAX) */
    int p2p; /* point-to-point offered */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tmsg *q[TCOMM_MAX][TCOMM_MAX]; /* [src][dst], FIFO */
} tshared;

static inline void tshared_init(tshared *sh, int n, int p2p)
{
    memset(sh, 0, sizeof *sh);
    sh->n = n;
    sh->p2p = p2p;
    pthread_barrier_init(&sh->bar, NULL, (unsigned)n);
    pthread_mutex_init(&sh->mu, NULL);
    pthread_cond_init(&sh->cv, NULL);
}

/* Messages never received: 0 after a run that matched every send. */
static inline int tshared_destroy(tshared *sh)
{
    int left = 0;
    for (int s = 0; s < TCOMM_MAX; s++)
        for (int d = 0; d < TCOMM_MAX; d++)
            while (sh->q[s][d]) {
                tmsg *x = sh->q[s][d];
                sh->q[s][d] = x->next;
                free(x);
                left++;
            }
    pthread_cond_destroy(&sh->cv);
    pthread_mutex_destroy(&sh->mu);
    pthread_barrier_destroy(&sh->bar);
    return left;
}

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
    if (c->rank != root && len)
        memcpy(buf, c->sh->slot[root], len);
    return t_barrier(c);
}

static inline int t_allgather(void *ctx, const void *send, size_t len, void *recv)
{
    tcomm *c = ctx;
    c->sh->slot[c->rank] = send;
    t_barrier(c);
    for (int i = 0; i < c->sh->n; i++)
        if (len)
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
            if (lens[i])
                memcpy((char *)recv + at, c->sh->slot[i], lens[i]);
            at += lens[i];
        }
    }
    return t_barrier(c);
}

/* Buffered (p2p 1): the sender never waits. */
static inline int t_send(void *ctx, const void *buf, size_t len, int dest, int tag)
{
    tcomm *c = ctx;
    if (!c->sh->p2p)
        return SHS_EUNSUPPORTED;
    tmsg *x = malloc(sizeof *x + len + 1);
    if (!x)
        return SHS_ENOMEM;
    x->next = NULL;
    x->tag = tag;
    x->len = len;
    if (len)
        memcpy(x->data, buf, len);
    pthread_mutex_lock(&c->sh->mu);
    tmsg **pp = &c->sh->q[c->rank][dest];
    while (*pp)
        pp = &(*pp)->next;
    *pp = x;
    pthread_cond_broadcast(&c->sh->cv);
    pthread_mutex_unlock(&c->sh->mu);
    return SHS_OK;
}

/* The next message from src: SHS_EIO when its tag or length differ. */
static inline int t_recv(void *ctx, void *buf, size_t len, int src, int tag)
{
    tcomm *c = ctx;
    if (!c->sh->p2p)
        return SHS_EUNSUPPORTED;
    pthread_mutex_lock(&c->sh->mu);
    while (!c->sh->q[src][c->rank])
        pthread_cond_wait(&c->sh->cv, &c->sh->mu);
    tmsg *x = c->sh->q[src][c->rank];
    c->sh->q[src][c->rank] = x->next;
    pthread_mutex_unlock(&c->sh->mu);
    int rc = x->tag == tag && x->len == len ? SHS_OK : SHS_EIO;
    if (rc == SHS_OK && len)
        memcpy(buf, x->data, len);
    free(x);
    return rc;
}

static const shs_comm_ops k_tops = {
    SHS_COMM_OPS_VERSION, t_barrier, t_bcast, t_allgather, t_gatherv, t_send, t_recv, NULL
};

/* Run fn(rank, comm, args[rank]) for n ranks, one thread each, over one
   tshared with point-to-point offered.  0 when every thread ran and every
   message sent was received; -1 otherwise. */
typedef void (*tcomm_fn)(int rank, shs_comm *comm, void *arg);
typedef struct tcomm_thread {
    tshared *sh;
    int rank, n, ok;
    tcomm_fn fn;
    void *arg;
} tcomm_thread;

static inline void *tcomm_thread_main(void *p)
{
    tcomm_thread *t = (tcomm_thread *)p;
    tcomm tc = { t->sh, t->rank };
    shs_comm *comm = NULL;
    if (shs_comm_create(&comm, t->rank, t->n, &k_tops, &tc) != SHS_OK)
        return NULL;
    t->fn(t->rank, comm, t->arg);
    shs_comm_free(comm);
    t->ok = 1;
    return NULL;
}

static inline int tcomm_run(int n, tcomm_fn fn, void *const *args)
{
    tshared sh;
    pthread_t th[TCOMM_MAX];
    tcomm_thread t[TCOMM_MAX];
    int started = 0, ok = n >= 1 && n <= TCOMM_MAX;
    if (!ok)
        return -1;
    tshared_init(&sh, n, 1);
    for (int r = 0; r < n; r++) {
        t[r] = (tcomm_thread){ &sh, r, n, 0, fn, args[r] };
        if (pthread_create(&th[r], NULL, tcomm_thread_main, &t[r]) != 0)
            break;
        started++;
    }
    for (int r = 0; r < started; r++) {
        pthread_join(th[r], NULL);
        ok &= t[r].ok;
    }
    /* a thread that could not start leaves the others at a barrier: a
       test machine out of threads is a failure, not a hang to debug */
    ok &= started == n;
    ok &= tshared_destroy(&sh) == 0;
    return ok ? 0 : -1;
}

#endif
