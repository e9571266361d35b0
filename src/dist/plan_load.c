/*
 * plan_load.c -- the load plan: who reads each saved chunk and who sends
 * which parts to whom (see plan.h).
 */
#include "format/layout.h"
#include "dist/plan_impl.h"

#include <inttypes.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Load plan
 * ---------------------------------------------------------------------- */

void shs__load_plan_release(shs__load_plan *p)
{
    if (!p)
        return;
    shs__free(p->items);
    shs__free(p->item_start);
    shs__free(p->reads);
    shs__free(p->read_start);
    shs__free(p->sends);
    shs__free(p->send_start);
    shs__free(p->rank_read_bytes);
    memset(p, 0, sizeof *p);
}

uint64_t shs__load_item_box(const shs__load_plan *plan, const shs__load_item *it, uint64_t *off,
                            uint64_t *shape)
{
    const shs_plan_chunk *s = &plan->saved[it->chunk], *q = &plan->requests[it->req];
    const shs_plan_tensor *T = &plan->tensors[q->tensor];
    if (T->ndim == 0)
        return elem_bytes(T, 1);
    if (!shs__box_intersect(T->ndim, s->box, s->box + T->ndim, q->box, q->box + T->ndim, off,
                            shape))
        return 0;
    return elem_bytes(T, box_volume(shape, T->ndim));
}

typedef struct req_cmp_ctx {
    const shs_plan_chunk *req;
    const shs_plan_tensor *tensors;
} req_cmp_ctx;

/* Requests of one (rank, tensor) group, by box. */
static int cmp_req_box(const void *vctx, uint32_t x, uint32_t y)
{
    const req_cmp_ctx *c = vctx;
    uint32_t nd = c->tensors[c->req[x].tensor].ndim;
    const uint64_t *a = c->req[x].box, *b = c->req[y].box;
    for (uint32_t d = 0; d < 2 * nd; d++)
        if (a[d] != b[d])
            return a[d] < b[d] ? -1 : 1;
    return 0;
}

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)0)
#endif

/* Elements in the intersection of two boxes (offset[nd], shape[nd]); 0 when
   they do not intersect (same rule as shs__box_intersect). */
static inline uint64_t isect_vol(const uint64_t *a, const uint64_t *b, uint32_t nd)
{
    uint64_t v = 1;
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t lo = a[d] > b[d] ? a[d] : b[d];
        uint64_t ae = a[d] + a[nd + d], be = b[d] + b[nd + d];
        uint64_t hi = ae < be ? ae : be;
        if (hi <= lo)
            return 0;
        v *= hi - lo;
    }
    return v;
}

/* What the first pass found for one request (in tensor-major order): its
   first intersecting unique and how many intersect; QRUN_GAPS when
   non-intersecting uniques lie between them (later passes then re-test). */
typedef struct qrun {
    uint32_t first, n;
} qrun;
#define QRUN_GAPS 0x80000000u

/* Everything shs__plan_load works with, passed from phase to phase.  The
   temporaries are freed by the phase that last needs them (set to NULL),
   the rest at the end of shs__plan_load. */
/* Free a temporary as soon as it is no longer needed (see load_ctx). */
#define FREE_NULL(p)                                                                               \
    do {                                                                                           \
        shs__free(p);                                                                              \
        (p) = NULL;                                                                                \
    } while (0)

typedef struct load_ctx {
    const shs_plan_tensor *tensors;
    uint32_t ntensors;
    const shs_plan_chunk *saved;
    const shs_plan_chunk *requests;
    size_t nrequests;
    uint32_t nranks;
    bool load_balanced;
    shs__plan_analysis a;
    uint32_t *rep;  /* [nu] representative chunk of each unique */
    uint32_t *tord; /* [nrequests] requests in (tensor, rank, box) order */
    uint32_t *tmp, *tstamp, *ucnt, *uranks, *uorder, *reader;
    uint8_t *tdup, *uneed;
    size_t *pos, *qt; /* qt: [ntensors + 1] start of each tensor in tord */
    uint64_t *ukey, *maxlen;
    qrun *runs;   /* [nrequests] pass 1's result, in tord order */
    size_t total; /* items (request x unique intersections) */
} load_ctx;

static int load_nomem(const load_ctx *c)
{
    return shs__err(SHS_ENOMEM, "plan: out of memory planning a load of %zu requests",
                    c->nrequests);
}

/* Phase 1, order the requests: (tensor, rank, box) order by a counting
   sort by rank, a stable counting sort by tensor, then boxes inside the
   (tensor, rank) groups that have several requests (noticed during the
   second sort).  Also allocates the per-rank arrays of the plan. */
static int order_requests(load_ctx *c, shs__load_plan *out)
{
    const shs_plan_chunk *requests = c->requests;
    const size_t nrequests = c->nrequests;
    const uint32_t nranks = c->nranks, ntensors = c->ntensors;
    out->item_start = shs__calloc((size_t)nranks + 1, sizeof *out->item_start);
    out->read_start = shs__calloc((size_t)nranks + 1, sizeof *out->read_start);
    out->send_start = shs__calloc((size_t)nranks + 1, sizeof *out->send_start);
    out->rank_read_bytes = shs__calloc(nranks, sizeof *out->rank_read_bytes);
    c->pos = shs__calloc((size_t)(nranks > ntensors ? nranks : ntensors) + 1, sizeof *c->pos);
    c->qt = shs__calloc((size_t)ntensors + 1, sizeof *c->qt);
    c->tord = shs__malloc((nrequests ? nrequests : 1) * sizeof *c->tord);
    c->tmp = shs__malloc((nrequests ? nrequests : 1) * sizeof *c->tmp);
    c->tstamp = shs__calloc((size_t)ntensors + 1, sizeof *c->tstamp);
    c->tdup = shs__calloc((size_t)ntensors + 1, 1);
    if (!out->item_start || !out->read_start || !out->send_start || !out->rank_read_bytes ||
        !c->pos || !c->qt || !c->tord || !c->tmp || !c->tstamp || !c->tdup)
        return load_nomem(c);
    size_t *pos = c->pos, *qt = c->qt;
    uint32_t *tord = c->tord, *tmp = c->tmp, *tstamp = c->tstamp;
    uint8_t *tdup = c->tdup;

    for (size_t i = 0; i < nrequests; i++)
        pos[requests[i].rank + 1]++;
    for (uint32_t r = 0; r < nranks; r++)
        pos[r + 1] += pos[r];
    for (size_t i = 0; i < nrequests; i++)
        tmp[pos[requests[i].rank]++] = (uint32_t)i;
    for (size_t i = 0; i < nrequests; i++)
        qt[requests[i].tensor + 1]++;
    for (uint32_t t = 0; t < ntensors; t++)
        qt[t + 1] += qt[t];
    memcpy(pos, qt, ((size_t)ntensors + 1) * sizeof *pos);
    for (size_t k = 0; k < nrequests; k++) {
        const shs_plan_chunk *q = &requests[tmp[k]];
        if (tstamp[q->tensor] == q->rank + 1)
            tdup[q->tensor] = 1;
        tstamp[q->tensor] = q->rank + 1;
        tord[pos[q->tensor]++] = tmp[k];
    }
    {
        req_cmp_ctx rc_ctx = { requests, c->tensors };
        for (uint32_t t = 0; t < ntensors; t++) {
            if (!tdup[t])
                continue;
            for (size_t g = qt[t]; g < qt[t + 1];) {
                uint32_t r = requests[tord[g]].rank;
                size_t e = g + 1;
                while (e < qt[t + 1] && requests[tord[e]].rank == r)
                    e++;
                if (e - g > 1)
                    shs__plan_msort_u32(tord + g, tmp, e - g, cmp_req_box, &rc_ctx);
                g = e;
            }
        }
    }
    FREE_NULL(c->tmp);
    FREE_NULL(c->tstamp);
    FREE_NULL(c->tdup);
    return SHS_OK;
}

/* Phase 2, index the saved chunks: the sweep key of each saved unique
   (ascending within each tensor) and the longest unique per tensor, so
   that pass 1 finds a request's candidates by binary search. */
static int index_saved(load_ctx *c)
{
    const shs__plan_analysis *a = &c->a;
    /* The readers live until the end: allocated before the temporaries of
       the passes so that, freed, those leave no hole below it (with glibc,
       freed blocks below a live one stay in the process). */
    if (c->load_balanced && !(c->reader = shs__malloc((a->nu ? a->nu : 1) * sizeof *c->reader)))
        return load_nomem(c);

    c->ukey = shs__malloc((a->nu ? a->nu : 1) * sizeof *c->ukey);
    c->maxlen = shs__calloc((size_t)c->ntensors + 1, sizeof *c->maxlen);
    c->runs = shs__malloc((c->nrequests ? c->nrequests : 1) * sizeof *c->runs);
    /* balanced: requests per unique; otherwise only whether it is needed */
    if (c->load_balanced)
        c->ucnt = shs__calloc(a->nu + 1, sizeof *c->ucnt);
    else
        c->uneed = shs__calloc(a->nu + 1, 1);
    if (!c->ukey || !c->maxlen || !c->runs || (!c->ucnt && !c->uneed))
        return load_nomem(c);
    for (uint32_t t = 0; t < c->ntensors; t++) {
        uint32_t nd = c->tensors[t].ndim, ds = a->ds[t];
        for (size_t u = a->tu[t]; u < a->tu[t + 1]; u++) {
            const shs_plan_chunk *ch = &c->saved[c->rep[u]];
            c->ukey[u] = box_start(ch, nd, ds);
            if (box_len(ch, nd, ds) > c->maxlen[t])
                c->maxlen[t] = box_len(ch, nd, ds);
        }
    }
    return SHS_OK;
}

/* Phase 3, match requests to saved chunks (pass 1, count): per request,
   the intersecting uniques, its coverage, items per rank, and requests
   per unique (balanced) or the read bytes per rank (not balanced).  The
   first uncovered request in (rank, tensor, box) order is the one
   reported: tensors come in order and, inside one, ranks and boxes do, so
   a later find wins only with a lower rank. */
static int match_requests(load_ctx *c, shs__load_plan *out)
{
    const shs_plan_tensor *tensors = c->tensors;
    const shs_plan_chunk *saved = c->saved, *requests = c->requests;
    const size_t nrequests = c->nrequests;
    const bool load_balanced = c->load_balanced;
    const shs__plan_analysis *a = &c->a;
    const uint32_t *rep = c->rep, *tord = c->tord;
    const size_t *qt = c->qt;
    const uint64_t *ukey = c->ukey, *maxlen = c->maxlen;
    qrun *runs = c->runs;
    uint32_t *ucnt = c->ucnt;
    uint8_t *uneed = c->uneed;
    size_t total = 0;
    bool bad = false;
    uint32_t bad_q = 0;
    uint64_t bad_got = 0, bad_want = 0;
    for (uint32_t t = 0; t < c->ntensors; t++) {
        const shs_plan_tensor *T = &tensors[t];
        uint32_t nd = T->ndim, ds = a->ds[t];
        size_t ub = a->tu[t], ue = a->tu[t + 1], prev = ue;
        for (size_t k = qt[t]; k < qt[t + 1]; k++) {
            if (k + 16 < nrequests)
                PREFETCH(&requests[tord[k + 16]]);
            if (k + 8 < nrequests)
                PREFETCH(requests[tord[k + 8]].box);
            uint32_t qi = tord[k];
            const shs_plan_chunk *q = &requests[qi];
            uint64_t qs = box_start(q, nd, ds), qe = qs + box_len(q, nd, ds);
            uint64_t want = nd ? box_volume(q->box + nd, nd) : 1, got = 0;
            runs[k] = (qrun){ 0, 0 };
            if (want == 0)
                continue;
            /* first unique whose start could reach qs: galloping
               from the previous request's, as consecutive requests of
               a tensor (rank order) usually move forward */
            uint64_t lo = qs >= maxlen[t] ? qs - maxlen[t] + 1 : 0;
            size_t l = ub, h = ue;
            if (prev < ue && ukey[prev] < lo) {
                size_t step = 1;
                l = prev + 1;
                while (l + step < ue && ukey[l + step] < lo) {
                    l += step + 1;
                    step *= 2;
                }
                h = l + step < ue ? l + step + 1 : ue;
            } else if (prev < ue) {
                h = prev + 1;
            }
            while (l < h) {
                size_t mid = l + (h - l) / 2;
                if (ukey[mid] < lo)
                    l = mid + 1;
                else
                    h = mid;
            }
            prev = l;
            uint32_t first = 0, n = 0;
            bool gap = false, gaps = false;
            for (size_t u = l; u < ue && ukey[u] < qe; u++) {
                uint64_t vol = nd ? isect_vol(saved[rep[u]].box, q->box, nd) : 1;
                if (!vol) {
                    gap = n != 0;
                    continue;
                }
                if (!n)
                    first = (uint32_t)u;
                gaps |= gap;
                n++;
                got += vol;
                if (load_balanced) {
                    ucnt[u + 1]++;
                } else {
                    uneed[u] = 1;
                    out->rank_read_bytes[q->rank] += elem_bytes(T, vol);
                }
            }
            if (got != want && (!bad || q->rank < requests[bad_q].rank)) {
                bad = true;
                bad_q = qi;
                bad_got = got;
                bad_want = want;
            }
            total += n;
            if (total >= UINT32_MAX - 1 || (gaps && n >= QRUN_GAPS))
                return shs__err(SHS_EUNSUPPORTED, "plan: more than 2^32-2 intersections");
            runs[k] = (qrun){ first, gaps ? n | QRUN_GAPS : n };
            out->item_start[q->rank + 1] += n;
        }
    }
    c->total = total;
    if (bad) {
        const shs_plan_chunk *q = &requests[bad_q];
        uint32_t nd = tensors[q->tensor].ndim;
        char b[BOXSTR];
        return shs__err(SHS_EINVAL,
                        "plan: tensor %" PRIu32 ": box %s requested by rank %" PRIu32
                        " is not covered by the saved chunks (%" PRIu64 " of %" PRIu64
                        " elements covered)",
                        q->tensor, shs__plan_fmt_box(b, sizeof b, q->box, q->box + nd, nd), q->rank,
                        bad_got, bad_want);
    }
    FREE_NULL(c->ukey);
    FREE_NULL(c->maxlen);
    for (uint32_t r = 0; r < c->nranks; r++)
        out->item_start[r + 1] += out->item_start[r];
    out->nitems = total;
    for (size_t u = 0; u < a->nu; u++)
        if (load_balanced ? ucnt[u + 1] != 0 : uneed[u] != 0)
            out->needed_bytes += unique_bytes(a, u);
    FREE_NULL(c->uneed);
    return SHS_OK;
}

/* Phase 4 (balanced only), choose readers balanced by bytes: the ranks
   needing each unique, then one reader per unique in greedy order (the
   least loaded rank that needs it, lowest rank on ties). */
static int choose_readers(load_ctx *c, shs__load_plan *out)
{
    shs__plan_analysis *a = &c->a;
    const size_t nrequests = c->nrequests;
    const shs_plan_chunk *saved = c->saved, *requests = c->requests;
    const uint32_t *rep = c->rep, *tord = c->tord;
    const size_t *qt = c->qt;
    const qrun *runs = c->runs;
    uint32_t *ucnt = c->ucnt, *reader = c->reader;
    int rc;
    /* The ranks that need each unique: uranks[ucnt[u-1] .. ucnt[u]). */
    size_t nneeded;
    if ((rc = shs__plan_order_uniques(&c->uorder, &nneeded, a, ucnt, false)) < 0)
        return rc;
    FREE_NULL(a->ubytes); /* bytes come from the boxes from here on */
    for (size_t u = 0; u < a->nu; u++)
        ucnt[u + 1] += ucnt[u];
    c->uranks = shs__malloc((c->total ? c->total : 1) * sizeof *c->uranks);
    if (!c->uranks)
        return load_nomem(c);
    uint32_t *uranks = c->uranks, *uorder = c->uorder;
    for (uint32_t t = 0; t < c->ntensors; t++) {
        uint32_t nd = c->tensors[t].ndim;
        for (size_t k = qt[t]; k < qt[t + 1]; k++) {
            if (k + 16 < nrequests)
                PREFETCH(&requests[tord[k + 16]]);
            uint32_t n = runs[k].n & ~QRUN_GAPS, u = runs[k].first;
            if (!n)
                continue;
            const shs_plan_chunk *q = &requests[tord[k]];
            for (; n; u++) {
                if ((runs[k].n & QRUN_GAPS) && nd && !isect_vol(saved[rep[u]].box, q->box, nd))
                    continue;
                uranks[ucnt[u]++] = q->rank;
                n--;
            }
        }
    }
    /* ucnt[u] is now the end of u's ranks (= start of u + 1) */
    uint64_t *load = out->rank_read_bytes;
    for (size_t u = 0; u < a->nu; u++)
        reader[u] = UINT32_MAX;
    for (size_t j = 0; j < nneeded; j++) {
        uint32_t u = uorder[j];
        size_t b = u ? ucnt[u - 1] : 0, e = ucnt[u];
        uint32_t best = uranks[b];
        for (size_t p = b + 1; p < e; p++) {
            uint32_t r = uranks[p];
            if (load[r] < load[best] || (load[r] == load[best] && r < best))
                best = r;
        }
        const shs_plan_chunk *ch = &saved[rep[u]];
        const shs_plan_tensor *T = &c->tensors[ch->tensor];
        reader[u] = best;
        load[best] += elem_bytes(T, T->ndim ? box_volume(ch->box + T->ndim, T->ndim) : 1);
    }
    out->nreads = nneeded;
    FREE_NULL(c->uranks);
    FREE_NULL(c->uorder);
    return SHS_OK;
}

/* Phase 5, build the per-rank items (pass 3): items straight into their
   final rank-major place (per-rank cursors; a rank's items come out in
   tensor, box order), counting the sends per source. */
static int place_items(load_ctx *c, shs__load_plan *out)
{
    const shs_plan_tensor *tensors = c->tensors;
    const shs_plan_chunk *saved = c->saved, *requests = c->requests;
    const size_t nrequests = c->nrequests;
    const uint32_t *rep = c->rep, *tord = c->tord, *reader = c->reader;
    const size_t *qt = c->qt;
    const qrun *runs = c->runs;
    size_t *pos = c->pos;
    if (!(out->items = shs__malloc((c->total ? c->total : 1) * sizeof *out->items)))
        return load_nomem(c);
    memcpy(pos, out->item_start, ((size_t)c->nranks + 1) * sizeof *pos);
    for (uint32_t t = 0; t < c->ntensors; t++) {
        const shs_plan_tensor *T = &tensors[t];
        uint32_t nd = T->ndim;
        for (size_t k = qt[t]; k < qt[t + 1]; k++) {
            if (k + 16 < nrequests)
                PREFETCH(&requests[tord[k + 16]]);
            uint32_t n = runs[k].n & ~QRUN_GAPS, u = runs[k].first;
            if (!n)
                continue;
            uint32_t qi = tord[k];
            const shs_plan_chunk *q = &requests[qi];
            uint32_t r = q->rank;
            shs__load_item *it = out->items + pos[r];
            pos[r] += n;
            for (; n; u++) {
                uint64_t vol = 1;
                const uint64_t *sb = saved[rep[u]].box;
                if ((runs[k].n & QRUN_GAPS) && nd && !isect_vol(sb, q->box, nd))
                    continue;
                uint32_t src = c->load_balanced ? reader[u] : r;
                *it++ = (shs__load_item){ rep[u], qi, src };
                n--;
                if (src != r) {
                    if (nd)
                        vol = isect_vol(sb, q->box, nd);
                    out->nsends++;
                    out->send_start[src + 1]++;
                    out->sent_bytes += elem_bytes(T, vol);
                }
            }
        }
    }
    FREE_NULL(c->runs);
    FREE_NULL(c->tord);
    return SHS_OK;
}

/* Phase 6 (balanced only), build the per-rank reads and sends: reads per
   reader in unique (tensor, box) order, sends per source in item order
   (= destination rank order). */
static int build_reads_sends(load_ctx *c, shs__load_plan *out)
{
    const uint32_t nranks = c->nranks;
    const uint32_t *rep = c->rep, *reader = c->reader;
    size_t *pos = c->pos;
    out->reads = shs__malloc((out->nreads ? out->nreads : 1) * sizeof *out->reads);
    out->sends = shs__malloc((out->nsends ? out->nsends : 1) * sizeof *out->sends);
    if (!out->reads || !out->sends)
        return load_nomem(c);
    for (size_t u = 0; u < c->a.nu; u++)
        if (reader[u] != UINT32_MAX)
            out->read_start[reader[u] + 1]++;
    for (uint32_t r = 0; r < nranks; r++)
        out->read_start[r + 1] += out->read_start[r];
    memcpy(pos, out->read_start, ((size_t)nranks + 1) * sizeof *pos);
    for (size_t u = 0; u < c->a.nu; u++)
        if (reader[u] != UINT32_MAX)
            out->reads[pos[reader[u]]++] = rep[u];
    FREE_NULL(c->reader);

    for (uint32_t r = 0; r < nranks; r++)
        out->send_start[r + 1] += out->send_start[r];
    memcpy(pos, out->send_start, ((size_t)nranks + 1) * sizeof *pos);
    for (uint32_t r = 0; r < nranks; r++)
        for (size_t i = out->item_start[r]; i < out->item_start[r + 1]; i++) {
            uint32_t src = out->items[i].src;
            if (src != r)
                out->sends[pos[src]++] = (uint32_t)i;
        }
    return SHS_OK;
}

/*
 * The load plan works tensor by tensor (requests ordered by tensor, rank,
 * box), so that each pass walks one tensor's uniques, keys and boxes nearly
 * sequentially instead of jumping between tensors for every request; the
 * phases above run in order.  Arrays are sized exactly from the counts and
 * freed as soon as they are no longer needed.
 */
int shs__plan_load(shs__load_plan *out, const shs_plan_tensor *tensors, uint32_t ntensors,
                   const shs_plan_chunk *saved, size_t nsaved, const shs_plan_chunk *requests,
                   size_t nrequests, uint32_t nranks, bool load_balanced)
{
    load_ctx c = { .tensors = tensors,
                   .ntensors = ntensors,
                   .saved = saved,
                   .requests = requests,
                   .nrequests = nrequests,
                   .nranks = nranks,
                   .load_balanced = load_balanced };
    shs__plan_analysis *a = &c.a;
    int rc;

    memset(out, 0, sizeof *out);
    if (nranks == 0)
        return shs__err(SHS_EINVAL, "plan: load with 0 ranks");
    if ((rc = shs__plan_analyze(a, tensors, ntensors, saved, nsaved, 0, "saved chunk")) < 0)
        return rc;
    /* Only each unique's representative chunk is needed from here on:
       ustart becomes rep[u] = that chunk's id, ord goes. */
    c.rep = a->ustart;
    for (size_t u = 0; u < a->nu; u++)
        c.rep[u] = a->ord[a->ustart[u]];
    FREE_NULL(a->ord);

    out->tensors = tensors;
    out->saved = saved;
    out->requests = requests;
    out->nranks = nranks;
    out->load_balanced = load_balanced;
    if (nrequests && !requests) {
        rc = shs__err(SHS_EINVAL, "plan: request list is NULL");
        goto done;
    }
    if (nrequests >= UINT32_MAX - 1) {
        rc = shs__err(SHS_EUNSUPPORTED, "plan: %zu requests (at most 2^32-2)", nrequests);
        goto done;
    }
    for (size_t i = 0; i < nrequests; i++)
        if ((rc = shs__plan_check_chunk(tensors, ntensors, &requests[i], i, nranks, "request")) < 0)
            goto done;

    if ((rc = order_requests(&c, out)) < 0 || (rc = index_saved(&c)) < 0 ||
        (rc = match_requests(&c, out)) < 0 || (load_balanced && (rc = choose_readers(&c, out)) < 0))
        goto done;
    FREE_NULL(c.ucnt);
    FREE_NULL(a->ubytes);
    if ((rc = place_items(&c, out)) < 0 || (load_balanced && (rc = build_reads_sends(&c, out)) < 0))
        goto done;
    for (uint32_t r = 0; r < nranks; r++)
        out->read_bytes += out->rank_read_bytes[r];
    out->max_over_mean = shs__plan_max_over_mean(out->rank_read_bytes, nranks);
    rc = SHS_OK;

done:
    shs__free(c.tord);
    shs__free(c.tmp);
    shs__free(c.tstamp);
    shs__free(c.tdup);
    shs__free(c.ucnt);
    shs__free(c.uneed);
    shs__free(c.uranks);
    shs__free(c.uorder);
    shs__free(c.reader);
    shs__free(c.pos);
    shs__free(c.qt);
    shs__free(c.ukey);
    shs__free(c.maxlen);
    shs__free(c.runs);
    shs__plan_analysis_release(a);
    if (rc < 0)
        shs__load_plan_release(out);
    return rc;
}
