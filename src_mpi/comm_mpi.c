/* comm_mpi.c -- the MPI backend of the communication seam. */
#include "shardsafe_mpi.h"

#include <limits.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct mpi_ctx {
    MPI_Comm comm;
    int size;
} mpi_ctx;

static int check(int err, const char *what)
{
    (void)what;
    return err == MPI_SUCCESS ? SHS_OK : SHS_EIO;
}

/* MPI counts are int: large buffers travel in pieces of at most 1 GiB */
#define PIECE (1 << 30)

static int m_barrier(void *ctx)
{
    return check(MPI_Barrier(((mpi_ctx *)ctx)->comm), "barrier");
}

static int m_bcast(void *ctx, void *buf, size_t len, int root)
{
    mpi_ctx *c = ctx;
    for (size_t at = 0; at < len; at += PIECE) {
        int n = (int)(len - at < PIECE ? len - at : PIECE);
        if (MPI_Bcast((char *)buf + at, n, MPI_BYTE, root, c->comm) != MPI_SUCCESS)
            return SHS_EIO;
    }
    return SHS_OK;
}

static int m_allgather(void *ctx, const void *send, size_t len, void *recv)
{
    mpi_ctx *c = ctx;
    if (len > INT_MAX)
        return SHS_EINVAL;
    return check(MPI_Allgather(send, (int)len, MPI_BYTE, recv, (int)len, MPI_BYTE, c->comm),
                 "allgather");
}

static int m_gatherv(void *ctx, const void *send, const size_t *lens, void *recv, int root)
{
    mpi_ctx *c = ctx;
    int me, rc = SHS_OK;
    MPI_Comm_rank(c->comm, &me);
    /* point-to-point to the root, so sizes beyond int counts work */
    if (me != root) {
        for (size_t at = 0; at < lens[me]; at += PIECE) {
            int n = (int)(lens[me] - at < PIECE ? lens[me] - at : PIECE);
            if (MPI_Send((const char *)send + at, n, MPI_BYTE, root, 7001, c->comm) != MPI_SUCCESS)
                return SHS_EIO;
        }
        return SHS_OK;
    }
    size_t off = 0;
    for (int r = 0; r < c->size; r++) {
        char *dst = recv ? (char *)recv + off : NULL;
        for (size_t at = 0; at < lens[r]; at += PIECE) {
            int n = (int)(lens[r] - at < PIECE ? lens[r] - at : PIECE);
            if (r == me) {
                if (dst)
                    memcpy(dst + at, (const char *)send + at, (size_t)n);
                continue;
            }
            /* with no buffer (the root ran out of memory) still drain */
            char *tmp = dst ? NULL : malloc((size_t)n);
            if (MPI_Recv(dst ? dst + at : tmp, n, MPI_BYTE, r, 7001, c->comm, MPI_STATUS_IGNORE) !=
                MPI_SUCCESS)
                rc = SHS_EIO;
            free(tmp);
        }
        off += lens[r];
    }
    return rc;
}

static int m_send(void *ctx, const void *buf, size_t len, int dest, int tag)
{
    mpi_ctx *c = ctx;
    for (size_t at = 0; at < len; at += PIECE) {
        int n = (int)(len - at < PIECE ? len - at : PIECE);
        if (MPI_Send((const char *)buf + at, n, MPI_BYTE, dest, tag, c->comm) != MPI_SUCCESS)
            return SHS_EIO;
    }
    return SHS_OK;
}

static int m_recv(void *ctx, void *buf, size_t len, int src, int tag)
{
    mpi_ctx *c = ctx;
    for (size_t at = 0; at < len; at += PIECE) {
        int n = (int)(len - at < PIECE ? len - at : PIECE);
        if (MPI_Recv((char *)buf + at, n, MPI_BYTE, src, tag, c->comm, MPI_STATUS_IGNORE) !=
            MPI_SUCCESS)
            return SHS_EIO;
    }
    return SHS_OK;
}

static void m_destroy(void *ctx)
{
    mpi_ctx *c = ctx;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)
        MPI_Comm_free(&c->comm);
    free(c);
}

static const shs_comm_ops k_mpi_ops = {
    SHS_COMM_OPS_VERSION, m_barrier, m_bcast, m_allgather, m_gatherv, m_send, m_recv, m_destroy,
};

int shs_comm_create_mpi(shs_comm **out, MPI_Comm comm)
{
    int inited = 0, rank, size;
    if (!out)
        return SHS_EINVAL;
    *out = NULL;
    MPI_Initialized(&inited);
    if (!inited)
        return SHS_ESTATE;
    mpi_ctx *c = malloc(sizeof *c);
    if (!c)
        return SHS_ENOMEM;
    if (MPI_Comm_dup(comm, &c->comm) != MPI_SUCCESS) {
        free(c);
        return SHS_EIO;
    }
    /* errors come back as codes, not as an abort of the job */
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->comm, &rank);
    MPI_Comm_size(c->comm, &size);
    c->size = size;
    int rc = shs_comm_create(out, rank, size, &k_mpi_ops, c);
    if (rc < 0) {
        MPI_Comm_free(&c->comm);
        free(c);
    }
    return rc;
}
