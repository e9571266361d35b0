/*
 * replicas.c -- the ranks' layouts exchanged: which rank holds which box
 * of which tensor.  A save with remove_redundancy plans from them who
 * writes each replicated chunk; a balanced load plans who reads what.
 */
#include "dist/exchange.h"

#include "dist/plan.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

void shs__layout_cache_release(shs__layout_cache *c)
{
    if (!c)
        return;
    shs__free(c->skip);
    memset(c, 0, sizeof *c);
}

/* This rank's layout, as bytes every rank can parse: per tensor (model
   tensors, and optimizer tensors when with_optim): u32 name length, name,
   u8 kind, u8 dtype, u8 ndim, then ndim u64 each of global shape, offset,
   shape. */
static int layout_bytes(const shs_state *st, int with_optim, shs__buf *b)
{
    int rc = shs__buf_grow(b, 0);
    for (size_t i = 0; i < st->n && rc == SHS_OK; i++) {
        const shs__tensor *t = &st->t[i];
        if (t->kind == SHS_KIND_OPTIMIZER && !with_optim)
            continue;
        uint32_t nl = (uint32_t)t->name_len;
        uint8_t head[3] = { (uint8_t)t->kind, (uint8_t)t->dtype, (uint8_t)t->ndim };
        if ((rc = shs__buf_add(b, &nl, 4)) < 0 || (rc = shs__buf_add(b, t->name, nl)) < 0 ||
            (rc = shs__buf_add(b, head, 3)) < 0 ||
            (rc = shs__buf_add(b, t->gshape, t->ndim * 8)) < 0 ||
            (rc = shs__buf_add(b, t->goff, t->ndim * 8)) < 0)
            break;
        rc = shs__buf_add(b, t->shape, t->ndim * 8);
    }
    return rc;
}

void shs__layout_set_release(shs__layout_set *ls)
{
    shs__free(ls->all);
    shs__free(ls->lens);
    shs__free(ls->e);
    shs__free(ls->words);
    memset(ls, 0, sizeof *ls);
}

int shs__gather_layouts(const shs_state *st, int with_optim, shs_comm *comm, shs__layout_set *ls)
{
    shs__buf mine = SHS__BUF_INIT;
    int rc;
    memset(ls, 0, sizeof *ls);
    rc = layout_bytes(st, with_optim, &mine);
    /* a rank out of memory here still meets the others (comm.h) */
    if ((rc = shs__comm_agree(comm, rc, shs_last_error())) < 0 ||
        (rc = shs__comm_allgather_bytes(comm, mine.data, mine.len, &ls->all, &ls->lens)) < 0)
        goto done;
    size_t cap = 64, words = 0, at = 0;
    int oom = !(ls->e = shs__malloc(cap * sizeof *ls->e));
    for (int r = 0; !oom && r < comm->size; r++) {
        size_t end = at + ls->lens[r];
        while (!oom && at < end) {
            if (ls->n == cap) {
                shs__lay_entry *ne = shs__realloc(ls->e, (cap *= 2) * sizeof *ne);
                if (!(oom = !ne))
                    ls->e = ne;
                continue;
            }
            shs__lay_entry *x = &ls->e[ls->n++];
            memcpy(&x->name_len, ls->all + at, 4);
            x->name = ls->all + at + 4;
            at += 4 + x->name_len;
            x->kind = (uint8_t)ls->all[at];
            x->dtype = (uint8_t)ls->all[at + 1];
            x->ndim = (uint8_t)ls->all[at + 2];
            at += 3;
            x->gshape = (const uint64_t *)(uintptr_t)at; /* fixed below */
            at += (size_t)x->ndim * 24;
            x->rank = (uint32_t)r;
            words += (size_t)x->ndim * 3;
        }
    }
    if (oom || !(ls->words = shs__calloc(words + 1, sizeof *ls->words))) {
        rc = shs__err(SHS_ENOMEM, "out of memory reading the ranks' layouts");
        goto done;
    }
    /* the byte stream is unaligned: shapes and boxes go to aligned words */
    size_t w = 0;
    for (size_t i = 0; i < ls->n; i++) {
        shs__lay_entry *x = &ls->e[i];
        memcpy(&ls->words[w], ls->all + (size_t)(uintptr_t)x->gshape, (size_t)x->ndim * 24);
        x->gshape = &ls->words[w];
        x->box = &ls->words[w + x->ndim];
        w += (size_t)x->ndim * 3;
    }
done:
    shs__buf_release(&mine);
    if (rc < 0)
        shs__layout_set_release(ls);
    return rc;
}

static int cmp_lay_name(const void *a, const void *b)
{
    const shs__lay_entry *x = *(const shs__lay_entry *const *)a;
    const shs__lay_entry *y = *(const shs__lay_entry *const *)b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);
    if (c)
        return c;
    if (x->name_len != y->name_len)
        return x->name_len < y->name_len ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* With a layout cache, a save whose layouts all hashed the same as last
   time reuses the plan after one 8-byte all-gather. */
int shs__plan_replicas(const shs_state *st, const shs__save_req *req, shs_comm *comm,
                       uint8_t **skip_out)
{
    int rc;
    shs__buf mine = SHS__BUF_INIT;
    shs__layout_set ls = { 0 };
    shs__lay_entry **by = NULL;
    shs_plan_tensor *tens = NULL;
    shs_plan_chunk *chunks = NULL;
    uint64_t *hashes = NULL;
    shs__save_plan plan;
    int have_plan = 0;
    uint8_t *skip = NULL;
    *skip_out = NULL;
    uint64_t h = 0;
    if ((rc = layout_bytes(st, req->with_optim, &mine)) == SHS_OK &&
        !(hashes = shs__calloc((size_t)comm->size, sizeof *hashes)))
        rc = shs__err(SHS_ENOMEM, "out of memory");
    if (rc == SHS_OK)
        h = XXH3_64bits(mine.data, mine.len);
    /* a rank out of memory here still meets the others (comm.h) */
    if ((rc = shs__comm_agree(comm, rc, shs_last_error())) < 0 ||
        (rc = shs__comm_allgather(comm, &h, sizeof h, hashes)) < 0)
        goto done;
    uint64_t key = XXH3_64bits(hashes, (size_t)comm->size * sizeof *hashes) | 1;
    shs__layout_cache *cache = req->layout_cache;
    if (cache && cache->key == key && cache->n == st->n) {
        *skip_out = cache->skip;
        goto done;
    }
    if ((rc = shs__gather_layouts(st, req->with_optim, comm, &ls)) < 0)
        goto done;
    size_t n = ls.n;
    by = shs__calloc(n + 1, sizeof *by);
    chunks = shs__calloc(n + 1, sizeof *chunks);
    tens = shs__calloc(n + 1, sizeof *tens);
    skip = shs__calloc(st->n + 1, 1);
    if (!by || !chunks || !tens || !skip) {
        rc = shs__err(SHS_ENOMEM, "out of memory planning replicas");
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        by[i] = &ls.e[i];
    /* tensor ids: names in sorted order; every rank must agree on them */
    qsort(by, n, sizeof *by, cmp_lay_name);
    uint32_t nt = 0;
    for (size_t i = 0; i < n; i++) {
        const shs__lay_entry *x = by[i];
        int same = i > 0 && by[i - 1]->name_len == x->name_len &&
                   memcmp(by[i - 1]->name, x->name, x->name_len) == 0;
        if (!same) {
            tens[nt] = (shs_plan_tensor){ x->ndim, (shs_dtype)x->dtype, x->gshape };
            nt++;
        } else if (by[i - 1]->kind != x->kind || by[i - 1]->dtype != x->dtype ||
                   by[i - 1]->ndim != x->ndim ||
                   memcmp(by[i - 1]->gshape, x->gshape, (size_t)x->ndim * 8) != 0) {
            rc = shs__err(SHS_EMISMATCH,
                          "tensor '%.*s': rank %u registers another kind, dtype or global "
                          "shape than rank %u",
                          (int)x->name_len, x->name, x->rank, by[i - 1]->rank);
            goto done;
        }
        chunks[i] = (shs_plan_chunk){ nt - 1, x->rank, x->box };
    }
    if ((rc = shs__plan_save(&plan, tens, nt, chunks, n, (uint32_t)comm->size, true)) < 0)
        goto done;
    have_plan = 1;
    for (size_t i = 0; i < n; i++) {
        if (by[i]->rank != (uint32_t)comm->rank || plan.write[i])
            continue;
        long ti = shs__state_find(st, by[i]->name, by[i]->name_len);
        if (ti >= 0)
            skip[ti] = 1;
    }
    if (cache) {
        shs__layout_cache_release(cache);
        cache->key = key;
        cache->skip = skip;
        cache->n = st->n;
    }
    *skip_out = skip;
    skip = NULL;
done:
    if (have_plan)
        shs__save_plan_release(&plan);
    shs__buf_release(&mine);
    shs__layout_set_release(&ls);
    shs__free(by);
    shs__free(tens);
    shs__free(chunks);
    shs__free(hashes);
    shs__free(skip);
    return rc;
}
