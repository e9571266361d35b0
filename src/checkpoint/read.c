/*
 * read.c -- the public checkpoint handle: opening any checkpoint source
 * (save path, step directory, plain folder, Hugging Face index, one
 * safetensors file) and reading tensors, blobs and progress from it.
 * Tensor reads go through shs__fill_box, the function the manager's load
 * uses, so both check the same checksums the same way.
 */
#include "checkpoint/loader.h"

#include "source/source.h"

#include "source/common_json.h"
#include "crypto/crypt.h"
#include "common/opts.h"
#include "store/io.h"
#include "format/layout.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int shs_checkpoint_open(shs_checkpoint **out, const char *path,
                        const shs_checkpoint_open_opts *opts)
{
    shs_checkpoint_open_opts o = SHS_CHECKPOINT_OPEN_OPTS_INIT;
    int rc;
    if (!out || !path || !*path)
        return shs__err(SHS_EINVAL, "shs_checkpoint_open: NULL or empty argument");
    *out = NULL;
    if (opts) {
        if ((rc = shs__check_version(opts, SHS__V_CHECKPOINT_OPEN_OPTS, "shs_checkpoint_open")) < 0)
            return rc;
        shs__copy_in(&o, opts, SHS__V_CHECKPOINT_OPEN_OPTS); /* the key: version 2 */
    }
    if (o.step < -1 || (o.flags & ~(unsigned)SHS_CHECKPOINT_OPEN_NO_MMAP))
        return shs__err(SHS_EINVAL, "shs_checkpoint_open: bad step %lld or flags %#x",
                        (long long)o.step, o.flags);
    if (o.key && o.key_len != SHS_KEY_BYTES)
        return shs__err(SHS_EKEY, "shs_checkpoint_open: a key is %d bytes, not %zu", SHS_KEY_BYTES,
                        o.key_len);
    shs_checkpoint *c = shs__calloc(1, sizeof *c);
    if (!c)
        return shs__err(SHS_ENOMEM, "out of memory");
    pthread_mutex_init(&c->mu, NULL);
    shs__source src;
    shs__source_req req = SHS__SOURCE_REQ_INIT;
    req.step = o.step;
    rc = shs__source_open(&src, path, &req);
    /* the handle takes the model over */
    c->m = src.m;
    c->path = src.path;
    c->dir = src.dir;
    memset(&src, 0, sizeof src);
    if (rc < 0)
        goto fail;
    c->info = shs__calloc(c->m.nt + 1, sizeof *c->info);
    c->L.fh = shs__calloc(c->m.nf + 1, sizeof(shs_file *));
    if (!c->info || !c->L.fh) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto fail;
    }
    c->L.dir = c->dir;
    c->L.m = &c->m;
    c->L.open_flags = (o.flags & SHS_CHECKPOINT_OPEN_NO_MMAP) ? SHS_OPEN_NO_MMAP : 0;
    c->L.mu = &c->mu;
    if (o.key) {
        /* a wrong key fails here, and a key given for an unencrypted
           checkpoint (nothing in it is authenticated by the key); no key:
           reads fail with "key required" */
        if (!(c->key = shs__calloc(1, sizeof *c->key))) {
            rc = shs__err(SHS_ENOMEM, "out of memory");
            goto fail;
        }
        if ((rc = shs__key_from_bytes(c->key, o.key, o.key_len)) < 0 ||
            (rc = shs__crypt_require(&c->m, c->key, c->path)) < 0)
            goto fail;
        c->L.key = c->key;
    }
    for (size_t i = 0; i < c->m.nt; i++) {
        const shs__mtensor *t = &c->m.t[i];
        c->info[i] = (shs_checkpoint_tensor_info){ t->name, t->kind,   t->dtype,
                                                   t->ndim, t->gshape, t->nc };
    }
    *out = c;
    return SHS_OK;
fail:
    shs_checkpoint_free(c);
    return rc;
}

void shs_checkpoint_free(shs_checkpoint *c)
{
    if (!c)
        return;
    if (c->L.fh)
        for (size_t i = 0; i < c->m.nf; i++)
            shs_file_free(c->L.fh[i]);
    shs__free(c->L.fh);
    shs__meta_free(&c->m);
    shs__free(c->info);
    shs__free(c->path);
    shs__free(c->dir);
    shs__key_wipe(c->key);
    shs__free(c->key);
    pthread_mutex_destroy(&c->mu);
    shs__free(c);
}

const char *shs_checkpoint_path(const shs_checkpoint *c)
{
    return c ? c->path : NULL;
}

int shs_checkpoint_read(const shs_checkpoint *ckpt, size_t tensor, const uint64_t *start,
                        const uint64_t *count, shs_dtype dtype, void *dst, size_t dst_len)
{
    /* the handle is logically const: only its lazily opened files change,
       under its mutex */
    shs_checkpoint *c = (shs_checkpoint *)ckpt;
    uint64_t zero[SHS_MAX_DIMS] = { 0 }, stored, need;
    int rc;
    if (!c || (!start) != (!count))
        return shs__err(SHS_EINVAL, "shs_checkpoint_read: NULL handle, or only one of "
                                    "start and count");
    if (tensor >= c->m.nt)
        return shs__err(SHS_ERANGE, "%s: tensor %zu out of range (%zu tensors)", c->path, tensor,
                        c->m.nt);
    const shs__mtensor *mt = &c->m.t[tensor];
    if (!start) {
        start = zero;
        count = mt->gshape;
    }
    if ((rc = shs__box_check(&stored, mt->dtype, mt->ndim, mt->gshape, start, count)) < 0)
        return shs__err_prefix(rc, mt->name);
    if (shs_dtype_bits(dtype) == 0)
        return shs__err(SHS_EINVAL, "shs_checkpoint_read: invalid dtype %d", (int)dtype);
    if (dtype != mt->dtype && shs_convert(NULL, dtype, NULL, mt->dtype, 0) < 0)
        return shs__err(SHS_ECONVERT, "%s: tensor '%s': cannot convert %s to %s", c->path, mt->name,
                        shs_dtype_name(mt->dtype), shs_dtype_name(dtype));
    need = dtype == mt->dtype
               ? stored
               : stored / (shs_dtype_bits(mt->dtype) / 8) * (shs_dtype_bits(dtype) / 8);
    if (need != dst_len)
        return shs__err(SHS_ERANGE,
                        "%s: tensor '%s': the box holds %llu bytes of %s, the "
                        "buffer %zu",
                        c->path, mt->name, (unsigned long long)need, shs_dtype_name(dtype),
                        dst_len);
    if (need && !dst)
        return shs__err(SHS_EINVAL, "shs_checkpoint_read: NULL buffer");
    uint64_t read_bytes = 0;
    return shs__fill_box(&c->L, mt, start, count, dtype, dst, &read_bytes);
}

int shs_checkpoint_read_blob(const shs_checkpoint *ckpt, size_t blob, void *dst, size_t dst_len)
{
    shs_checkpoint *c = (shs_checkpoint *)ckpt;
    if (!c)
        return shs__err(SHS_EINVAL, "shs_checkpoint_read_blob: NULL handle");
    if (blob >= c->m.nb)
        return shs__err(SHS_ERANGE, "%s: blob %zu out of range (%zu blobs)", c->path, blob,
                        c->m.nb);
    const shs__mblob *b = &c->m.b[blob];
    uint64_t n = b->b1 - b->b0;
    if (n != dst_len)
        return shs__err(SHS_ERANGE, "%s: blob '%s' of rank %d holds %llu bytes, the buffer %zu",
                        c->path, b->name, b->rank, (unsigned long long)n, dst_len);
    if (n && !dst)
        return shs__err(SHS_EINVAL, "shs_checkpoint_read_blob: NULL buffer");
    return shs__blob_read(&c->L, b, dst, NULL);
}

int shs_checkpoint_progress(shs_progress *out, const shs_checkpoint *c)
{
    if (!out || !c)
        return shs__err(SHS_EINVAL, "shs_checkpoint_progress: NULL argument");
    if (shs__check_progress(out, "shs_checkpoint_progress") < 0)
        return SHS_EINVAL;
    if (c->m.plain)
        return shs__err(SHS_ENOTFOUND, "%s: not a step directory: no common.json", c->path);
    /* the same checks as a load: common.json must be what was saved */
    int rc = shs__meta_check_common(&c->m, c->dir);
    return rc < 0 ? rc : shs__common_read(out, c->dir);
}

int shs_checkpoint_format_version(const shs_checkpoint *c)
{
    /* version is 0 in the model of a plain source; said explicitly so a
       parser default can never make a plain folder look versioned */
    return !c || c->m.plain ? 0 : c->m.version;
}

int shs_checkpoint_encrypted(const shs_checkpoint *c)
{
    return c && c->m.encrypted;
}

const char *shs_checkpoint_key_id(const shs_checkpoint *c)
{
    return c && c->m.encrypted ? c->m.key_id : "";
}
