/*
 * plan.c -- the save plan: who writes each chunk (see plan.h).  The load
 * plan is in plan_load.c; the analysis both start with in plan_analyze.c.
 */
#include "dist/plan_impl.h"

#include <inttypes.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Save plan
 * ---------------------------------------------------------------------- */

void shs__save_plan_release(shs__save_plan *p)
{
    if (!p)
        return;
    shs__free(p->write);
    shs__free(p->rank_bytes);
    memset(p, 0, sizeof *p);
}

int shs__plan_save(shs__save_plan *out, const shs_plan_tensor *tensors, uint32_t ntensors,
                   const shs_plan_chunk *chunks, size_t nchunks, uint32_t nranks,
                   bool remove_redundancy)
{
    shs__plan_analysis a;
    uint32_t *ids = NULL;
    int rc;

    memset(out, 0, sizeof *out);
    if (nranks == 0)
        return shs__err(SHS_EINVAL, "plan: save with 0 ranks");
    if ((rc = shs__plan_analyze(&a, tensors, ntensors, chunks, nchunks, nranks, "chunk")) < 0)
        return rc;
    out->nchunks = nchunks;
    out->nranks = nranks;
    out->nunique = a.nu;
    out->first_incomplete = UINT32_MAX;
    out->write = shs__calloc(nchunks ? nchunks : 1, 1);
    out->rank_bytes = shs__calloc(nranks, sizeof *out->rank_bytes);
    if (!out->write || !out->rank_bytes)
        goto nomem;

    for (uint32_t t = 0; t < ntensors; t++) {
        const shs_plan_tensor *T = &tensors[t];
        uint64_t vol = 0;
        for (size_t u = a.tu[t]; u < a.tu[t + 1]; u++) {
            uint64_t nb = unique_bytes(&a, u);
            out->unique_bytes += nb;
            out->total_bytes += nb * (a.ustart[u + 1] - a.ustart[u]);
            vol += nb * 8 / shs_dtype_bits(T->dtype); /* = element count */
        }
        if (out->first_incomplete == UINT32_MAX && vol != box_volume(T->shape, T->ndim))
            out->first_incomplete = t;
    }

    if (!remove_redundancy) {
        for (size_t u = 0; u < a.nu; u++) {
            uint64_t nb = unique_bytes(&a, u);
            for (size_t p = a.ustart[u]; p < a.ustart[u + 1]; p++) {
                out->write[a.ord[p]] = 1;
                out->rank_bytes[chunks[a.ord[p]].rank] += nb;
            }
        }
    } else {
        size_t nids;
        if ((rc = shs__plan_order_uniques(&ids, &nids, &a, NULL, true)) < 0)
            goto done;
        uint64_t *load = out->rank_bytes;
        for (size_t k = 0; k < a.nu; k++) {
            uint32_t u = ids[k];
            uint64_t nb = unique_bytes(&a, u);
            uint32_t best = a.ord[a.ustart[u]];
            for (size_t p = a.ustart[u] + 1; p < a.ustart[u + 1]; p++) {
                uint32_t c = a.ord[p];
                uint32_t r = chunks[c].rank, br = chunks[best].rank;
                if (load[r] < load[br] || (load[r] == load[br] && r < br))
                    best = c;
            }
            out->write[best] = 1;
            load[chunks[best].rank] += nb;
        }
    }
    for (uint32_t r = 0; r < nranks; r++)
        out->written_bytes += out->rank_bytes[r];
    out->max_over_mean = shs__plan_max_over_mean(out->rank_bytes, nranks);
    rc = SHS_OK;
    goto done;

nomem:
    rc = shs__err(SHS_ENOMEM, "plan: out of memory planning a save of %zu chunks", nchunks);
done:
    shs__free(ids);
    shs__plan_analysis_release(&a);
    if (rc < 0)
        shs__save_plan_release(out);
    return rc;
}

int shs__plan_covers(uint32_t *out_tensor, const shs_plan_tensor *tensors, uint32_t ntensors,
                     const shs_plan_chunk *chunks, size_t nchunks, uint32_t nranks)
{
    shs__save_plan p;
    int rc = shs__plan_save(&p, tensors, ntensors, chunks, nchunks, nranks, false);
    if (out_tensor)
        *out_tensor = UINT32_MAX;
    if (rc < 0)
        return rc;
    uint32_t t = p.first_incomplete;
    shs__save_plan_release(&p);
    if (out_tensor)
        *out_tensor = t;
    if (t == UINT32_MAX)
        return 1;
    shs__err(SHS_EINVAL, "plan: the chunks do not cover tensor %" PRIu32 " completely", t);
    return 0;
}
