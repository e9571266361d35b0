/*
 * load_balanced.c -- load_balanced: every rank learns every rank's
 * requested boxes; the same pure plan on every rank gives each needed
 * saved chunk one reader (read bytes balanced over the ranks that need it)
 * and the transfers from the readers to the other ranks.  Transfers run in
 * one global order (by sender, then receiver and item) that every rank
 * walks, taking part where it sends or receives: with blocking
 * point-to-point messages that order cannot deadlock.  A rank whose read
 * failed still sends (zeros) so that the others do not hang; the error is
 * agreed on afterwards.
 *
 * Phases, in the same order on every rank: gather the layouts (a
 * collective), plan and allocate every buffer, agree (a collective: a rank
 * that failed so far meets the others here), read, exchange, copy the
 * parts a rank read for itself.
 */
#include "checkpoint/loader.h"

#include "dist/exchange.h"
#include "format/layout.h"
#include "dist/plan.h"

#include <string.h>

/* One balanced load in progress. */
typedef struct balanced {
    shs__loader *L;
    shs_state *st;
    int me, world;
    shs__layout_set ls;
    shs_plan_tensor *tens;
    shs_plan_chunk *saved, *reqs;
    uint64_t *words;
    uint32_t *chunk_t, *chunk_k; /* saved chunk -> tensor, chunk of it */
    long *req_state;             /* request -> state tensor (mine) or -1 */
    void **bufs;                 /* saved chunk -> its bytes (chunks I read) */
    char *tmp;                   /* one transfer item */
    shs__load_plan plan;
    int have_plan;
} balanced;

static const shs__mchunk *saved_chunk(const balanced *B, uint32_t c)
{
    return &B->L->m->t[B->chunk_t[c]].c[B->chunk_k[c]];
}

/* The plan's inputs: every saved chunk, and every rank's requested boxes
   of the tensors the checkpoint has. */
static int describe(balanced *B)
{
    const shs__meta *m = B->L->m;
    size_t nsaved = 0, nw = 0;
    for (size_t j = 0; j < m->nt; j++) {
        nsaved += m->t[j].nc;
        nw += m->t[j].nc * 2 * m->t[j].ndim;
    }
    B->tens = shs__calloc(m->nt + 1, sizeof *B->tens);
    B->saved = shs__calloc(nsaved + 1, sizeof *B->saved);
    B->words = shs__calloc(nw + 1, sizeof *B->words);
    B->chunk_t = shs__calloc(nsaved + 1, sizeof *B->chunk_t);
    B->chunk_k = shs__calloc(nsaved + 1, sizeof *B->chunk_k);
    B->reqs = shs__calloc(B->ls.n + 1, sizeof *B->reqs);
    B->req_state = shs__calloc(B->ls.n + 1, sizeof *B->req_state);
    B->bufs = shs__calloc(nsaved + 1, sizeof *B->bufs);
    if (!B->tens || !B->saved || !B->words || !B->chunk_t || !B->chunk_k || !B->reqs ||
        !B->req_state || !B->bufs)
        return shs__err(SHS_ENOMEM, "out of memory planning a balanced load");
    size_t si = 0, w = 0;
    for (size_t j = 0; j < m->nt; j++) {
        const shs__mtensor *t = &m->t[j];
        B->tens[j] = (shs_plan_tensor){ (uint32_t)t->ndim, t->dtype, t->gshape };
        for (size_t k = 0; k < t->nc; k++, si++) {
            memcpy(&B->words[w], t->c[k].off, t->ndim * 8);
            memcpy(&B->words[w + t->ndim], t->c[k].shape, t->ndim * 8);
            B->saved[si] = (shs_plan_chunk){ (uint32_t)j, 0, &B->words[w] };
            B->chunk_t[si] = (uint32_t)j;
            B->chunk_k[si] = (uint32_t)k;
            w += 2 * t->ndim;
        }
    }
    size_t nreq = 0;
    for (size_t i = 0; i < B->ls.n; i++) {
        const shs__lay_entry *x = &B->ls.e[i];
        const shs__mtensor *t = shs__meta_find_n(m, x->name, x->name_len);
        if (!t)
            continue; /* non-strict: skipped by its rank */
        B->req_state[nreq] = x->rank == (uint32_t)B->me
                                 ? shs__state_find(B->st, x->name, x->name_len)
                                 : -1;
        B->reqs[nreq++] = (shs_plan_chunk){ (uint32_t)(t - m->t), x->rank, x->box };
    }
    int rc = shs__plan_load(&B->plan, B->tens, (uint32_t)m->nt, B->saved, nsaved, B->reqs, nreq,
                            (uint32_t)B->world, true);
    B->have_plan = rc == SHS_OK;
    return rc;
}

/* Every buffer of the exchange is allocated before it starts: a rank
   failing in the middle would leave its peers blocked in send/recv. */
static int allocate(balanced *B)
{
    const shs__load_plan *p = &B->plan;
    uint64_t max_item = 0, ioff[SHS_MAX_DIMS], ishape[SHS_MAX_DIMS];
    for (size_t r = p->read_start[B->me]; r < p->read_start[B->me + 1]; r++) {
        const shs__mchunk *ch = saved_chunk(B, p->reads[r]);
        uint64_t n = ch->b1 - ch->b0;
        if (!(B->bufs[p->reads[r]] = shs__calloc(1, (size_t)n + 1)))
            return shs__err(SHS_ENOMEM, "out of memory for a %llu-byte chunk",
                            (unsigned long long)n);
    }
    for (uint32_t src = 0; src < p->nranks; src++)
        for (size_t q = p->send_start[src]; q < p->send_start[src + 1]; q++) {
            const shs__load_item *it = &p->items[p->sends[q]];
            if (B->me == (int)src || B->me == (int)B->reqs[it->req].rank) {
                uint64_t n = shs__load_item_box(p, it, ioff, ishape);
                max_item = n > max_item ? n : max_item;
            }
        }
    if (!(B->tmp = shs__calloc(1, (size_t)max_item + 1)))
        return shs__err(SHS_ENOMEM, "out of memory");
    return SHS_OK;
}

/* My reads, whole chunks, checksummed.  After the first failure nothing
   more is read, but the buffers stay (zeros) for the exchange. */
static int read_mine(balanced *B, uint64_t *read_bytes)
{
    const shs__load_plan *p = &B->plan;
    int rc = SHS_OK;
    for (size_t r = p->read_start[B->me]; r < p->read_start[B->me + 1] && rc == SHS_OK; r++) {
        uint32_t c = p->reads[r];
        const shs__mchunk *ch = saved_chunk(B, c);
        uint64_t n = ch->b1 - ch->b0;
        shs_file *f;
        size_t idx;
        const shs__mtensor *mt = &B->L->m->t[B->chunk_t[c]];
        if ((rc = shs__chunk_open(B->L, mt, ch, &f, &idx)) < 0 ||
            (rc = shs__chunk_read(B->L, mt, ch, f, idx, B->bufs[c], n)) < 0)
            break;
        *read_bytes += n;
    }
    return rc;
}

/* Where copy_item copies an item's box from and to. */
enum {
    CHUNK_TO_TMP,   /* a chunk I read -> B->tmp, to send */
    TMP_TO_STATE,   /* B->tmp, received -> my state tensor */
    CHUNK_TO_STATE, /* a chunk I read -> my state tensor */
};

/* A box copied into a state tensor of another float dtype (a Hugging
   Face load, req->convert): each run converted on the way. */
typedef struct conv_ctx {
    char *dst;
    const char *src;
    shs_dtype ddt, sdt;
    unsigned db, sb; /* element bytes */
} conv_ctx;

static int conv_run(void *ctx, uint64_t src_off, uint64_t dst_off, uint64_t len)
{
    const conv_ctx *x = ctx;
    return shs_convert(x->dst + dst_off / x->sb * x->db, x->ddt, x->src + src_off, x->sdt,
                       (size_t)(len / x->sb));
}

static void copy_to_state(const shs__tensor *mt, const uint64_t *in_state, const void *src,
                          const uint64_t *src_shape, const uint64_t *src_start,
                          const uint64_t *count, size_t nd, shs_dtype sdt)
{
    unsigned bits = shs_dtype_bits(sdt);
    if (mt->dtype == sdt) {
        shs__box_copy(mt->data, mt->shape, in_state, src, src_shape, src_start, count, nd, bits);
        return;
    }
    /* float to float, checked before the load: shs_convert cannot fail */
    conv_ctx x = { mt->data, src, mt->dtype, sdt, shs_dtype_bits(mt->dtype) / 8, bits / 8 };
    (void)shs__box_runs2(bits, nd, src_shape, src_start, mt->shape, in_state, count, conv_run, &x);
}

static void copy_item(balanced *B, const shs__load_item *it, int how)
{
    uint64_t ioff[SHS_MAX_DIMS], ishape[SHS_MAX_DIMS];
    uint64_t in_chunk[SHS_MAX_DIMS], in_state[SHS_MAX_DIMS];
    const uint64_t zero[SHS_MAX_DIMS] = { 0 };
    const shs__mtensor *t = &B->L->m->t[B->chunk_t[it->chunk]];
    const shs__mchunk *ch = saved_chunk(B, it->chunk);
    const void *buf = B->bufs[it->chunk];
    unsigned bits = shs_dtype_bits(t->dtype);
    size_t nd = t->ndim;
    shs__load_item_box(&B->plan, it, ioff, ishape);
    for (size_t d = 0; d < nd; d++)
        in_chunk[d] = ioff[d] - ch->off[d];
    if (how == CHUNK_TO_TMP) {
        shs__box_copy(B->tmp, ishape, zero, buf, ch->shape, in_chunk, ishape, nd, bits);
        return;
    }
    const shs__tensor *mt = &B->st->t[B->req_state[it->req]];
    for (size_t d = 0; d < nd; d++)
        in_state[d] = ioff[d] - mt->goff[d];
    if (how == TMP_TO_STATE)
        copy_to_state(mt, in_state, B->tmp, ishape, zero, ishape, nd, t->dtype);
    else
        copy_to_state(mt, in_state, buf, ch->shape, in_chunk, ishape, nd, t->dtype);
}

/* The transfers, in the global order. */
static int exchange(balanced *B, shs_comm *comm)
{
    const shs__load_plan *p = &B->plan;
    uint64_t ioff[SHS_MAX_DIMS], ishape[SHS_MAX_DIMS];
    for (uint32_t src = 0; src < p->nranks; src++) {
        for (size_t q = p->send_start[src]; q < p->send_start[src + 1]; q++) {
            const shs__load_item *it = &p->items[p->sends[q]];
            int dst = (int)B->reqs[it->req].rank, rc;
            if (B->me != (int)src && B->me != dst)
                continue;
            uint64_t n = shs__load_item_box(p, it, ioff, ishape);
            if (B->me == (int)src) {
                copy_item(B, it, CHUNK_TO_TMP);
                rc = comm->ops.send(comm->ctx, B->tmp, (size_t)n, dst, 7101);
            } else {
                rc = comm->ops.recv(comm->ctx, B->tmp, (size_t)n, (int)src, 7101);
                if (rc == SHS_OK)
                    copy_item(B, it, TMP_TO_STATE);
            }
            if (rc < 0)
                return rc;
        }
    }
    return SHS_OK;
}

int shs__load_balanced(shs__loader *L, shs_state *st, const shs__load_req *req, shs_comm *comm,
                       uint64_t *read_bytes)
{
    balanced B = { .L = L, .st = st, .me = comm->rank, .world = comm->size };
    int rc;
    *read_bytes = 0;
    if ((rc = shs__gather_layouts(st, req->with_optim, comm, &B.ls)) < 0)
        return rc;
    if ((rc = describe(&B)) == SHS_OK)
        rc = allocate(&B);
    /* the others are about to exchange: a rank that failed meets them */
    if ((rc = shs__comm_agree(comm, rc, shs_last_error())) < 0)
        goto done;
    int read_rc = read_mine(&B, read_bytes);
    if ((rc = exchange(&B, comm)) < 0)
        goto done;
    for (size_t q = B.plan.item_start[B.me]; q < B.plan.item_start[B.me + 1]; q++)
        if ((int)B.plan.items[q].src == B.me)
            copy_item(&B, &B.plan.items[q], CHUNK_TO_STATE);
    rc = read_rc;
done:
    if (B.have_plan) {
        for (size_t r = B.plan.read_start[B.me]; r < B.plan.read_start[B.me + 1]; r++)
            shs__free(B.bufs[B.plan.reads[r]]);
        shs__load_plan_release(&B.plan);
    }
    shs__free(B.tmp);
    shs__free(B.bufs);
    shs__free(B.req_state);
    shs__free(B.reqs);
    shs__free(B.chunk_k);
    shs__free(B.chunk_t);
    shs__free(B.words);
    shs__free(B.saved);
    shs__free(B.tens);
    shs__layout_set_release(&B.ls);
    return rc;
}
