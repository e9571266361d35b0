/* comm.c -- communicator handles, the one-process backend, helpers. */
#include "dist/comm.h"
#include "common/opts.h"

#include <stdio.h>
#include <string.h>

/* The failing rank's message travels whole: a fixed 200 bytes cut long
   paths off before the file they named. */
#define AGREE_MSG SHS__AGREE_MSG

int shs_comm_create(shs_comm **out, int rank, int size, const shs_comm_ops *ops, void *ctx)
{
    int rc;
    if (!out || !ops)
        return shs__err(SHS_EINVAL, "shs_comm_create: NULL argument");
    *out = NULL;
    if ((rc = shs__check_version(ops, SHS__V_COMM_OPS, "shs_comm_create")) < 0)
        return rc;
    /* The caller's struct may be older (smaller) than ours: only the
       fields its version has are read. */
    shs_comm_ops mine = { 0 };
    shs__copy_in(&mine, ops, SHS__V_COMM_OPS);
    if (!mine.barrier || !mine.broadcast || !mine.allgather || !mine.gatherv || !mine.send ||
        !mine.recv)
        return shs__err(SHS_EINVAL,
                        "shs_comm_create: incomplete ops (version %u): every "
                        "function but destroy is required",
                        ops->version);
    if (size < 1 || rank < 0 || rank >= size)
        return shs__err(SHS_EINVAL, "shs_comm_create: rank %d of %d", rank, size);
    shs_comm *c = shs__calloc(1, sizeof *c);
    if (!c || !(c->agree_buf = shs__calloc((size_t)size, sizeof(int32_t)))) {
        shs__free(c);
        return shs__err(SHS_ENOMEM, "out of memory creating a communicator of %d ranks", size);
    }
    c->rank = rank;
    c->size = size;
    c->ops = mine;
    c->ctx = ctx;
    *out = c;
    return SHS_OK;
}

void shs_comm_free(shs_comm *c)
{
    if (!c)
        return;
    if (c->ops.destroy)
        c->ops.destroy(c->ctx);
    shs__free(c->agree_buf);
    shs__free(c);
}

int shs_comm_rank(const shs_comm *c)
{
    return c ? c->rank : 0;
}
int shs_comm_size(const shs_comm *c)
{
    return c ? c->size : 1;
}

/* one process: every collective is a copy or nothing */
static int self_barrier(void *ctx)
{
    (void)ctx;
    return SHS_OK;
}
static int self_bcast(void *ctx, void *b, size_t n, int root)
{
    (void)ctx;
    (void)b;
    (void)n;
    (void)root;
    return SHS_OK;
}
static int self_allgather(void *ctx, const void *s, size_t n, void *r)
{
    (void)ctx;
    if (n)
        memcpy(r, s, n);
    return SHS_OK;
}
static int self_gatherv(void *ctx, const void *s, const size_t *lens, void *r, int root)
{
    (void)ctx;
    (void)root;
    if (lens[0])
        memcpy(r, s, lens[0]);
    return SHS_OK;
}
static int self_send(void *ctx, const void *b, size_t n, int d, int t)
{
    (void)ctx;
    (void)b;
    (void)n;
    (void)d;
    (void)t;
    return shs__err(SHS_ESTATE, "send on a one-process communicator");
}
static int self_recv(void *ctx, void *b, size_t n, int s, int t)
{
    (void)ctx;
    (void)b;
    (void)n;
    (void)s;
    (void)t;
    return shs__err(SHS_ESTATE, "recv on a one-process communicator");
}

static const shs_comm_ops k_self_ops = {
    SHS_COMM_OPS_VERSION, self_barrier, self_bcast, self_allgather,
    self_gatherv,         self_send,    self_recv,  NULL,
};

int shs_comm_create_self(shs_comm **out)
{
    return shs_comm_create(out, 0, 1, &k_self_ops, NULL);
}

int shs__comm_barrier(shs_comm *c)
{
    return c->ops.barrier(c->ctx);
}

int shs__comm_bcast(shs_comm *c, void *buf, size_t len, int root)
{
    return c->size == 1 ? SHS_OK : c->ops.broadcast(c->ctx, buf, len, root);
}

int shs__comm_allgather(shs_comm *c, const void *send, size_t len, void *recv)
{
    return c->ops.allgather(c->ctx, send, len, recv);
}

int shs__comm_gather_bytes(shs_comm *c, const void *send, size_t len, int root, char **out,
                           size_t **lens_out)
{
    *out = NULL;
    *lens_out = NULL;
    uint64_t mine = len, *all = shs__calloc((size_t)c->size, sizeof *all);
    size_t *lens = shs__calloc((size_t)c->size, sizeof *lens);
    char *buf = NULL;
    int rc = SHS_OK;
    /* every local failure is agreed on before the collective needing the
       memory: a rank never skips a collective the others enter */
    if (!all || !lens)
        rc = shs__err(SHS_ENOMEM, "out of memory gathering %d ranks", c->size);
    if ((rc = shs__comm_agree(c, rc, shs_last_error())) < 0)
        goto fail;
    if ((rc = shs__comm_allgather(c, &mine, sizeof mine, all)) < 0)
        goto fail;
    size_t total = 0;
    for (int i = 0; i < c->size; i++) {
        lens[i] = (size_t)all[i];
        total += lens[i];
    }
    if (c->rank == root && !(buf = shs__malloc(total ? total : 1)))
        rc = shs__err(SHS_ENOMEM, "out of memory gathering %zu bytes", total);
    if ((rc = shs__comm_agree(c, rc, shs_last_error())) < 0)
        goto fail;
    if ((rc = c->ops.gatherv(c->ctx, send, lens, buf, root)) < 0)
        goto fail;
    shs__free(all);
    if (c->rank == root) {
        *out = buf;
        *lens_out = lens;
    } else {
        shs__free(lens);
    }
    return SHS_OK;
fail:
    shs__free(all);
    shs__free(lens);
    shs__free(buf);
    return rc;
}

int shs__comm_allgather_bytes(shs_comm *c, const void *send, size_t len, char **out,
                              size_t **lens_out)
{
    const int size = c->size;
    char *buf = NULL;
    size_t *lens = NULL;
    uint64_t *l64 = NULL, total = 0;
    *out = NULL;
    *lens_out = NULL;
    /* Only the root learns that the gather failed (its buffer could not be
       allocated): every rank goes on to the agreement whatever its own
       result, or the others would wait for it in the next collective. */
    int rc = shs__comm_gather_bytes(c, send, len, 0, &buf, &lens);
    if (!(l64 = shs__calloc((size_t)size + 1, sizeof *l64)) && rc == SHS_OK)
        rc = shs__err(SHS_ENOMEM, "out of memory");
    if ((rc = shs__comm_agree(c, rc, shs_last_error())) < 0)
        goto fail;
    /* the root (the only rank that has lens) shares the sizes, then the
       bytes */
    if (lens)
        for (int i = 0; i < size; i++)
            l64[i] = lens[i];
    if ((rc = shs__comm_bcast(c, l64, (size_t)size * sizeof *l64, 0)) < 0)
        goto fail;
    for (int i = 0; i < size; i++)
        total += l64[i];
    if (!lens && !(lens = shs__calloc((size_t)size, sizeof *lens)))
        rc = shs__err(SHS_ENOMEM, "out of memory");
    if (!buf && !(buf = shs__malloc(total ? (size_t)total : 1)) && rc == SHS_OK)
        rc = shs__err(SHS_ENOMEM, "out of memory");
    if ((rc = shs__comm_agree(c, rc, shs_last_error())) < 0)
        goto fail;
    if ((rc = shs__comm_bcast(c, buf, (size_t)total, 0)) < 0)
        goto fail;
    for (int i = 0; i < size; i++)
        lens[i] = (size_t)l64[i];
    shs__free(l64);
    *out = buf;
    *lens_out = lens;
    return SHS_OK;
fail:
    shs__free(l64);
    shs__free(buf);
    shs__free(lens);
    return rc;
}

int shs__comm_agree(shs_comm *c, int status, const char *msg)
{
    if (c->size == 1)
        return status;
    /* statuses first (small, every time); the first failing rank's
       message only when there is one: every rank knows that rank, so the
       broadcast is collective */
    int32_t mine = status, *all = c->agree_buf;
    char m[AGREE_MSG];
    int rc = shs__comm_allgather(c, &mine, sizeof mine, all);
    if (rc < 0)
        return rc;
    for (int i = 0; i < c->size; i++)
        if (all[i] < 0) {
            snprintf(m, sizeof m, "%s", i == c->rank && msg ? msg : "");
            if ((rc = shs__comm_bcast(c, m, sizeof m, i)) < 0)
                return rc;
            m[sizeof m - 1] = '\0';
            rc = shs__err(all[i], "rank %d: %s", i, m);
            break;
        }
    /* A rank that failed never goes on, even with a backend that lost its
       status in the exchange. */
    if (rc >= 0 && status < 0)
        rc = shs__err(status, "rank %d: %s", c->rank, msg ? msg : "");
    return rc;
}
