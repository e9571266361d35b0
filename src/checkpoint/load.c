/*
 * load.c -- a step directory (or a plain directory of safetensors files)
 * read into a registered state: any saved chunking into any requested
 * chunking, every byte read checked against its checksum, by a pool of
 * threads or balanced over the ranks.  Format: docs/checkpoint.md.
 */
#include "checkpoint/loader.h"

#include "source/common_json.h"
#include "source/hf_load.h"
#include "crypto/crypt.h"
#include "dist/exchange.h"
#include "store/io.h"
#include "format/layout.h"
#include "dist/plan.h"
#include "format/st_parse.h"


#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int shs__fill_box(shs__loader *L, const shs__mtensor *mt, const uint64_t *boff,
                  const uint64_t *bshape, shs_dtype dtype, void *dst, uint64_t *read_bytes)
{
    int rc;
    size_t nd = mt->ndim;
    uint64_t want = 1, got = 0;
    for (size_t d = 0; d < nd; d++)
        want *= bshape[d];
    if (want == 0)
        return SHS_OK;
    uint64_t ioff[SHS_MAX_DIMS], ishape[SHS_MAX_DIMS];
    for (size_t k = 0; k < mt->nc; k++) {
        const shs__mchunk *c = &mt->c[k];
        if (c->replica)
            continue; /* the first copy is read (replicas marked by meta.c) */
        if (nd && !shs__box_intersect(nd, boff, bshape, c->off, c->shape, ioff, ishape))
            continue;
        uint64_t vol = 1;
        for (size_t d = 0; d < nd; d++)
            vol *= ishape[d];
        shs_file *f;
        size_t idx;
        if ((rc = shs__chunk_open(L, mt, c, &f, &idx)) < 0 ||
            (rc = shs__chunk_fill(L, mt, c, f, idx, boff, bshape, ioff, ishape, dtype, dst,
                                  read_bytes)) < 0)
            return rc;
        got += vol;
    }
    if (got != want)
        return shs__err(
            SHS_ECORRUPT,
            "%s: tensor '%s': the saved chunks cover %llu of the %llu elements requested", L->dir,
            mt->name, (unsigned long long)got, (unsigned long long)want);
    return SHS_OK;
}

/* initial_load_in_hf_quantized: the local box of t, filled with the FP8
   values of weight mt (converted exactly: F8_E4M3 fits F32, BF16 and
   F16), multiplied in place by the scales of the blocks it touches,
   read from the scale tensor sc. */
static int dequantize(shs__loader *L, shs__tensor *t, const shs__mtensor *sc, uint64_t block,
                      uint64_t *read_bytes)
{
    if (!t->shape[0] || !t->shape[1])
        return SHS_OK;
    uint64_t soff[2], sshape[2];
    for (int d = 0; d < 2; d++) {
        soff[d] = t->goff[d] / block;
        sshape[d] = (t->goff[d] + t->shape[d] - 1) / block + 1 - soff[d];
    }
    float *scale = shs__malloc((size_t)(sshape[0] * sshape[1]) * sizeof *scale);
    if (!scale)
        return shs__err(SHS_ENOMEM, "out of memory reading the block scales of '%s'", t->name);
    int rc = shs__fill_box(L, sc, soff, sshape, SHS_F32, scale, read_bytes);
    if (rc == SHS_OK)
        shs__dequant_blocks(t->data, t->dtype, t->goff, t->shape, scale, sshape[1], block);
    shs__free(scale);
    return rc;
}

/* The scale tensor of model tensor mt, or NULL. */
static const shs__mtensor *scale_of(const shs__loader *L, const shs__load_req *req,
                                    const shs__mtensor *mt)
{
    if (!req->dequant)
        return NULL;
    long s = req->dequant->scale_of[mt - L->m->t];
    return s < 0 ? NULL : &L->m->t[s];
}

/* Fill the local box of t from every saved chunk that intersects it;
   *read_bytes counts what was read from storage. */
static int load_tensor(shs__loader *L, const shs__load_req *req, shs__tensor *t,
                       const shs__mtensor *mt, uint64_t *read_bytes)
{
    const shs__mtensor *sc = scale_of(L, req, mt);
    int rc = shs__fill_box(L, mt, t->goff, t->shape, t->dtype, t->data, read_bytes);
    if (rc == SHS_OK && sc)
        rc = dequantize(L, t, sc, req->dequant->block, read_bytes);
    return rc;
}

typedef struct load_pool {
    shs__loader *L;
    shs_state *st;
    const shs__load_req *req;
    pthread_mutex_t mu;
    size_t next; /* next tensor to take */
    uint64_t read_bytes;
    int rc; /* first error */
    char msg[1024];
} load_pool;

static void *load_worker(void *arg)
{
    load_pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        size_t i = p->next++;
        int stop = p->rc < 0 || i >= p->st->n;
        pthread_mutex_unlock(&p->mu);
        if (stop)
            return NULL;
        shs__tensor *t = &p->st->t[i];
        if (t->kind == SHS_KIND_OPTIMIZER && !p->req->with_optim)
            continue;
        const shs__mtensor *mt = shs__meta_find(p->L->m, t->name);
        uint64_t got = 0;
        int rc = mt ? load_tensor(p->L, p->req, t, mt, &got) : SHS_OK;
        pthread_mutex_lock(&p->mu);
        p->read_bytes += got;
        if (rc < 0 && p->rc == SHS_OK) {
            p->rc = rc;
            snprintf(p->msg, sizeof p->msg, "%s", shs_last_error());
        }
        pthread_mutex_unlock(&p->mu);
    }
}

/* Fill every registered tensor (by at least two workers when the
   checkpoint is encrypted); with several workers the files are all
   opened first (a shs_file is read-only after open, so threads share it)
   and the tensors are taken from a common counter. */
static int load_tensors(shs__loader *L, shs_state *st, const shs__load_req *req,
                        uint64_t *read_bytes)
{
    int workers = req->workers > 1 ? req->workers : 1;
    /* decryption is CPU work (one-pass AES-256-GCM, ~5 GB/s per core, more
       than the copy and checksum of an unencrypted chunk together): an
       encrypted checkpoint is loaded by at least two threads, chunk by
       chunk, as its save encrypts on a helper thread */
    if (L->m->encrypted && workers < 2)
        workers = 2;
    load_pool p = { L, st, req, PTHREAD_MUTEX_INITIALIZER, 0, 0, SHS_OK, "" };
    if (workers == 1) {
        load_worker(&p);
        *read_bytes = p.read_bytes;
        return p.rc < 0 ? shs__err(p.rc, "%s", p.msg) : SHS_OK;
    }
    for (size_t fi = 0; fi < L->m->nf; fi++) {
        shs_file *f;
        int rc = shs__loader_open_file(L, (uint32_t)fi, &f);
        if (rc < 0)
            return rc;
    }
    pthread_t th[64];
    int started = 0;
    if (workers > 64)
        workers = 64;
    for (; started < workers - 1; started++)
        if (pthread_create(&th[started], NULL, load_worker, &p) != 0)
            break;
    load_worker(&p); /* this thread works too */
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&p.mu);
    *read_bytes = p.read_bytes;
    return p.rc < 0 ? shs__err(p.rc, "%s", p.msg) : SHS_OK;
}

/* Append a skipped name to res->skipped, an array this file allocates
   (released by shs__load_result_release_names). */
static int note_skipped(shs_load_result *res, const char *name)
{
    if (!res)
        return SHS_OK;
    char **v = (char **)(uintptr_t)res->skipped;
    size_t n = res->n_skipped;
    if ((n & (n - 1)) == 0) { /* 0, 1, 2, 4...: grow to the next power of two */
        char **nv = shs__realloc(v, (n ? 2 * n : 1) * sizeof *nv);
        if (!nv)
            return shs__err(SHS_ENOMEM, "out of memory listing skipped tensors");
        v = nv;
        res->skipped = (const char *const *)v;
    }
    if (!(v[n] = shs__strdup(name)))
        return shs__err(SHS_ENOMEM, "out of memory listing skipped tensors");
    res->n_skipped = n + 1;
    return SHS_OK;
}

void shs__load_result_release_names(shs_load_result *res)
{
    char **v = (char **)(uintptr_t)res->skipped;
    for (size_t i = 0; v && i < res->n_skipped; i++)
        shs__free(v[i]);
    shs__free(v);
    res->skipped = NULL;
    res->n_skipped = 0;
}

static int ckpt_load(shs_state *st, const char *dir, const shs__load_req *req, shs_comm *comm,
                     shs_progress *progress, shs_load_result *res, int *agreed);

int shs__ckpt_load(shs_state *st, const char *dir, const shs__load_req *req, shs_comm *comm,
                   shs_progress *progress, shs_load_result *res)
{
    int agreed = 0;
    int rc = ckpt_load(st, dir, req, comm, progress, res, &agreed);
    /* a balanced load is collective: a rank that failed before the
       exchange must still meet the others there, carrying its error */
    if (req->balanced && comm->size > 1 && !agreed) {
        char msg[SHS__AGREE_MSG];
        snprintf(msg, sizeof msg, "%s", shs_last_error());
        rc = shs__comm_agree(comm, rc, msg);
    }
    return rc;
}

/* Append `name` to a ", "-separated list in buf[cap] (the count is kept
   apart: a long list is cut, never the count). */
static void list_name(char *buf, size_t cap, const char *name)
{
    size_t at = strlen(buf);
    if (at + strlen(name) + 2 < cap)
        snprintf(buf + at, cap - at, "%s%s", at ? ", " : "", name);
}

/* "2,3" of a shape, into buf[cap] (cut at ~100 characters). */
static void shape_text(char *buf, size_t cap, const uint64_t *shape, size_t ndim)
{
    buf[0] = '\0';
    for (size_t d = 0; d < ndim && strlen(buf) < 100; d++)
        snprintf(buf + strlen(buf), cap - strlen(buf), "%s%llu", d ? "," : "",
                 (unsigned long long)shape[d]);
}

/* initial_load_in_hf_quantized: registered tensor t of model tensor mt
   can be loaded.  A weight with a block scale is dequantized into F32,
   BF16 or F16; an F8_E4M3 weight without one would load undequantized
   values: refused. */
static int check_quantized(const shs__meta *m, const char *dir, const shs__dequant *q,
                           const shs__tensor *t, const shs__mtensor *mt)
{
    long s = q->scale_of[mt - m->t];
    int into = t->dtype == SHS_F32 || t->dtype == SHS_BF16 || t->dtype == SHS_F16;
    const char *fname = mt->nc ? mt->c[0].key : mt->name;
    if (s >= 0 && !into)
        return shs__err(SHS_EMISMATCH,
                        "%s: tensor '%s' is registered as %s: initial_load_in_hf_quantized "
                        "dequantizes its FP8 weights into F32, BF16 or F16",
                        dir, t->name, shs_dtype_name(t->dtype));
    if (s < 0 && mt->dtype == SHS_F8_E4M3 && t->dtype != SHS_F8_E4M3)
        return shs__err(
            SHS_ECORRUPT,
            "%s: tensor '%s' is F8_E4M3 but the files hold no block scale '%s" SHS__HF_SCALE_SUFFIX
            "' for it: initial_load_in_hf_quantized cannot dequantize it",
            dir, fname, fname);
    return SHS_OK;
}

/* Phase 1: every registered tensor the load wants is in the checkpoint
   with the same kind, dtype and shape, and (strict) nothing saved is left
   unregistered; non-strict, both kinds of mismatch are listed in res. */
static int check_registered(const shs_state *st, const shs__meta *m, const char *dir,
                            const shs__load_req *req, shs_load_result *res)
{
    char missing[512] = "", extra[512] = "";
    size_t n_missing = 0, n_extra = 0;
    int rc;
    for (size_t i = 0; i < st->n; i++) {
        const shs__tensor *t = &st->t[i];
        if (t->kind == SHS_KIND_OPTIMIZER && !req->with_optim)
            continue;
        const shs__mtensor *mt = shs__meta_find(m, t->name);
        if (!mt) {
            if (!req->strict && (rc = note_skipped(res, t->name)) < 0)
                return rc;
            if (req->strict) {
                list_name(missing, sizeof missing, t->name);
                n_missing++;
            }
            continue;
        }
        if (req->dequant && (rc = check_quantized(m, dir, req->dequant, t, mt)) < 0)
            return rc;
        int same = (mt->dtype == t->dtype || (req->convert && shs_dtype_is_float(mt->dtype) &&
                                              shs_dtype_is_float(t->dtype))) &&
                   mt->ndim == t->ndim && mt->kind == t->kind;
        for (size_t d = 0; same && d < t->ndim; d++)
            same = mt->gshape[d] == t->gshape[d];
        if (!same) {
            char a[128], b[128];
            shape_text(a, sizeof a, t->gshape, t->ndim);
            shape_text(b, sizeof b, mt->gshape, mt->ndim);
            return shs__err(SHS_EMISMATCH,
                            "%s: tensor '%s': registered as %s %s [%s], saved as %s %s [%s]", dir,
                            t->name, shs__kind_name[t->kind], shs_dtype_name(t->dtype), a,
                            shs__kind_name[mt->kind], shs_dtype_name(mt->dtype), b);
        }
    }
    if (n_missing)
        return shs__err(SHS_EMISMATCH, "%s: %zu registered tensor(s) not in the checkpoint: %s",
                        dir, n_missing, missing);
    for (size_t j = 0; j < m->nt; j++) {
        const shs__mtensor *mt = &m->t[j];
        if (mt->kind == SHS_KIND_OPTIMIZER && !req->with_optim)
            continue;
        if (req->dequant && req->dequant->is_scale[j])
            continue; /* consumed by its weight's dequantization */
        if (shs__state_find(st, mt->name, strlen(mt->name)) >= 0)
            continue;
        if (!req->strict || req->unused_ok) {
            if ((rc = note_skipped(res, mt->name)) < 0)
                return rc;
            continue;
        }
        list_name(extra, sizeof extra, mt->name);
        n_extra++;
    }
    if (n_extra)
        return shs__err(SHS_EMISMATCH,
                        "%s: %zu tensor(s) in the checkpoint are not registered: %s "
                        "(non-strict loading skips them)",
                        dir, n_extra, extra);
    return SHS_OK;
}

/* Phase 3: this rank's blobs, only when the world is the same (rank-local
   state of another world size would be restored into the wrong rank). */
static int load_blobs(shs__loader *L, shs_state *st, const shs__load_req *req)
{
    const shs__meta *m = L->m;
    if (m->world_size != req->world_size)
        return SHS_OK;
    for (size_t k = 0; k < m->nb; k++) {
        const shs__mblob *b = &m->b[k];
        if (b->rank != req->rank || (shs__blob_exclude_flag(b->name) & req->exclude))
            continue;
        size_t len = (size_t)(b->b1 - b->b0);
        void *buf = shs__malloc(len ? len : 1);
        if (!buf)
            return shs__err(SHS_ENOMEM, "out of memory");
        int rc = shs__blob_read(L, b, buf, NULL);
        if (rc == SHS_OK)
            rc = shs__state_put_blob(st, b->name, buf, len);
        shs__free(buf);
        if (rc < 0)
            return rc;
    }
    return SHS_OK;
}

static int ckpt_load(shs_state *st, const char *dir, const shs__load_req *req, shs_comm *comm,
                     shs_progress *progress, shs_load_result *res, int *agreed)
{
    /* the model source.h opened: the caller's, not freed here */
    shs__meta m = *req->meta;
    int rc;
    /* files without a step's common.json carry no progress */
    int has_meta = !m.plain;
    /* common.json is checked even when its progress is not wanted: a
       changed file means the directory is not what was saved */
    shs__loader L = { dir, &m, NULL, 0, NULL, req->key };
    if ((rc = shs__meta_check_common(&m, dir)) < 0)
        goto done;
    /* an encrypted checkpoint: the key is needed, and must be its own
       (version 4: its metadata.json authenticated under it); with
       encrypted_only, a key finds nothing else acceptable */
    if (req->encrypted_only && req->key && !m.encrypted) {
        rc = shs__err(SHS_EKEY,
                      "%s: not encrypted, but a key is configured: an unencrypted checkpoint in "
                      "save_path is not resumed from (it may be an encrypted one stripped of its "
                      "encryption); set allow_unencrypted_resume: true if it is meant to be "
                      "unencrypted (e.g. saved before encryption was turned on)",
                      dir);
        goto done;
    }
    if ((rc = shs__crypt_check_key(&m, req->key, dir)) < 0)
        goto done;
    if (!(L.fh = shs__calloc(m.nf + 1, sizeof(shs_file *)))) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    /* 1. the registered state against the checkpoint */
    if ((rc = check_registered(st, &m, dir, req, res)) < 0)
        goto done;
    /* 2. tensors: by `workers` threads, or balanced over the ranks */
    uint64_t read_bytes = 0;
    if (req->balanced && comm->size > 1) {
        /* collective from here on: every rank must get here, or hear why */
        char msg[SHS__AGREE_MSG] = "";
        *agreed = 1;
        if ((rc = shs__comm_agree(comm, SHS_OK, msg)) < 0 ||
            (rc = shs__load_balanced(&L, st, req, comm, &read_bytes)) < 0)
            goto done;
        /* each rank dequantizes its own boxes (the scales are small: each
           rank reads those of its blocks) */
        for (size_t i = 0; req->dequant && i < st->n; i++) {
            shs__tensor *t = &st->t[i];
            const shs__mtensor *mt = shs__meta_find(&m, t->name), *sc;
            if (t->kind == SHS_KIND_OPTIMIZER || !mt || !(sc = scale_of(&L, req, mt)))
                continue;
            if ((rc = dequantize(&L, t, sc, req->dequant->block, &read_bytes)) < 0)
                goto done;
        }
    } else if ((rc = load_tensors(&L, st, req, &read_bytes)) < 0) {
        goto done;
    }
    /* 3. rank-local blobs */
    if ((rc = load_blobs(&L, st, req)) < 0)
        goto done;
    /* 4. progress */
    int progress_loaded = 0;
    unsigned cflags = 0;
    if (progress && has_meta && !(req->exclude & SHS_EXCLUDE_TRAIN_STATE)) {
        shs_progress p = *progress;
        if ((rc = shs__common_read_ex(&p, dir, &cflags)) < 0)
            goto done;
        *progress = p;
        progress_loaded = 1;
    }
    if (res) {
        /* res->path is the caller's to set: it owns the string */
        res->loaded = 1;
        res->step = m.step;
        res->consumed_samples_derived = (cflags & SHS__COMMON_DERIVED_CONSUMED) != 0;
        res->optimizer_loaded = req->with_optim;
        res->progress_loaded = progress_loaded;
        res->rank_state_restored = m.world_size == req->world_size && m.nb > 0;
        res->bytes_read = read_bytes;
        res->saved_world_size = m.world_size;
    }
    rc = SHS_OK;
done:
    for (size_t i = 0; L.fh && i < m.nf; i++)
        shs_file_free(L.fh[i]);
    shs__free(L.fh);
    return rc;
}
