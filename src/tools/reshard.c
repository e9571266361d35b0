/*
 * reshard.c -- offline reshard (shs_reshard): a checkpoint rewritten for
 * a target layout (layout_spec.h, docs/reshard.md).  Tensors are read
 * through the public read API (shs_checkpoint_read: any box, checksummed)
 * and written by the save engine itself: each target rank's part by
 * shs__save_local, metadata.json and common.json by shs__save_meta, into
 * a temporary sibling of the destination renamed into place at the end.
 */
#include "checkpoint/save_local.h"

#include "crypto/crypt.h"
#include "store/io.h"
#include "format/json_doc.h"
#include "tools/layout_spec.h"
#include "tools/merge_tmp.h"
#include "tools/strategy.h"
#include "common/opts.h"
#include "checkpoint/state.h"

#include <errno.h>
#include <stddef.h>
#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

/* The largest layout file read. */
#define LAYOUT_FILE_MAX (64u << 20)

typedef struct reshard {
    shs_checkpoint *ck;
    const char *where; /* names the layout in messages */
    json_t *doc;       /* the layout document */
    int doc_world;     /* the world it describes */
    int world;         /* the target's */
    int with_optim;
    size_t nt;
    shs__lboxes *boxes; /* per tensor of ck: the target boxes, by rank */
    size_t *cursor;     /* per tensor: the first box of the rank being
                           written */
    shs_reshard_result res;
} reshard;

/* metadata.json of a step directory, parsed (NULL for a plain source). */
static int read_metadata(json_t **out, const shs_checkpoint *ck)
{
    char *path = NULL, *text = NULL;
    size_t len = 0;
    shs__jdoc d = { 0 };
    int rc = SHS_OK;
    *out = NULL;
    if ((shs_checkpoint_format(ck) == SHS_FORMAT_PLAIN))
        return SHS_OK;
    if (!(path = shs__path_join(shs_checkpoint_path(ck), "metadata.json")))
        return shs__err(SHS_ENOMEM, "out of memory");
    /* the strict reader of every document from disk (json_doc.h) */
    if ((rc = shs__read_file_nofollow(&text, &len, path, (size_t)1 << 30)) == SHS_OK &&
        (rc = shs__jdoc_parse(&d, text, len, path)) == SHS_OK)
        rc = shs__jdoc_to_jansson(out, &d, shs__jroot(&d), path);
    shs__jdoc_free(&d);
    shs__free(text);
    shs__free(path);
    return rc;
}

/* The layout the source was saved with: the recorded "layouts", else
   derived from its chunks and the ranks of their files. */
static int saved_layout(reshard *R, const json_t *meta)
{
    const json_t *rec = json_object_get(meta, "layouts");
    R->where = "the saved layout";
    R->with_optim = !json_is_true(json_object_get(meta, "model_only"));
    if (rec) {
        R->res.layout_recorded = 1;
        R->doc = json_incref((json_t *)rec);
        return SHS_OK;
    }
    json_t *tensors = json_object();
    R->doc = json_pack("{s:i, s:o}", "world_size", shs_checkpoint_world_size(R->ck), "tensors",
                       tensors);
    if (!R->doc)
        return shs__err(SHS_ENOMEM, "out of memory");
    for (size_t i = 0; i < R->nt; i++) {
        const shs_checkpoint_tensor_info *t = shs_checkpoint_tensor(R->ck, i);
        shs__lboxes b = { .ndim = t->ndim };
        int rc = SHS_OK;
        for (size_t c = 0; c < t->n_chunks && rc == SHS_OK; c++) {
            shs_chunk_info ci = SHS_CHUNK_INFO_INIT;
            if ((rc = shs_checkpoint_chunk(&ci, R->ck, i, c)) == SHS_OK)
                rc = shs__lboxes_add(&b, shs_checkpoint_file_rank(R->ck, ci.file), ci.offset,
                                     ci.shape);
        }
        json_t *spec = rc == SHS_OK ? shs__layout_derive(&b, t->shape) : NULL;
        shs__lboxes_release(&b);
        if (rc < 0)
            return rc;
        if (!spec || json_object_set_new(tensors, t->name, spec) < 0)
            return shs__err(SHS_ENOMEM, "out of memory");
    }
    return SHS_OK;
}

static int load_layout_file(reshard *R, const char *path)
{
    shs__jdoc d;
    R->where = path;
    /* the strict reader of every document from disk (json_doc.h); the
       checked tree is then copied into jansson values, which the layout
       code edits (it builds documents too) */
    int rc = shs__jdoc_load(&d, path, LAYOUT_FILE_MAX);
    if (rc == SHS_OK)
        rc = shs__jdoc_to_jansson(&R->doc, &d, shs__jroot(&d), path);
    shs__jdoc_free(&d);
    /* a bad layout file is a bad argument (SHS_EINVAL), as it was */
    return rc == SHS_ECORRUPT ? shs__err_prefix(SHS_EINVAL, "layout file") : rc;
}

/* The target layout of a MindSpore strategy file: its parameters the
   checkpoint holds, every other tensor replicated (MindSpore treats a
   parameter the file does not name as not split). */
static int load_strategy(reshard *R, const shs_reshard_opts *o)
{
    const char *k;
    json_t *v, *tmp;
    R->where = o->strategy_file;
    int rc = shs__strategy_read(&R->doc, o->strategy_file, o->rank_list, o->n_rank_list);
    if (rc < 0)
        return rc;
    json_t *tensors = json_object_get(R->doc, "tensors");
    size_t n = json_object_size(tensors);
    json_object_foreach_safe(tensors, tmp, k, v)
    {
        size_t i;
        if (shs_checkpoint_find(&i, R->ck, k) != SHS_OK)
            json_object_del(tensors, k);
    }
    /* some parameters may be absent (optimizer state not saved); none
       present means the names differ, and everything would silently be
       replicated */
    if (json_object_size(tensors) == 0)
        return shs__err(SHS_EINVAL,
                        "%s: none of its %zu parameters is a tensor of the checkpoint %s (are the "
                        "names the same?)",
                        o->strategy_file, n, shs_checkpoint_path(R->ck));
    if (json_object_set_new(tensors, "*", json_pack("{s:b}", "replicated", 1)) < 0)
        return shs__err(SHS_ENOMEM, "out of memory");
    return SHS_OK;
}

static int is_glob(const char *k)
{
    return strpbrk(k, "*?[") != NULL;
}

/* The spec of each tensor: its exact name, else the first glob that
   matches it.  Every key must select something, every tensor a spec. */
static int assign_specs(reshard *R, const json_t **spec)
{
    const json_t *tensors = json_object_get(R->doc, "tensors");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)tensors, k, v)
    {
        size_t i, hits = 0;
        if (!is_glob(k)) {
            if (shs_checkpoint_find(&i, R->ck, k) != SHS_OK)
                return shs__err(SHS_EINVAL, "%s: tensor '%s' is not in the checkpoint %s", R->where,
                                k, shs_checkpoint_path(R->ck));
            spec[i] = v;
            continue;
        }
        for (i = 0; i < R->nt; i++)
            hits += fnmatch(k, shs_checkpoint_tensor(R->ck, i)->name, 0) == 0;
        if (!hits)
            return shs__err(SHS_EINVAL, "%s: '%s' matches no tensor of the checkpoint %s", R->where,
                            k, shs_checkpoint_path(R->ck));
    }
    for (size_t i = 0; i < R->nt; i++) {
        const char *name = shs_checkpoint_tensor(R->ck, i)->name;
        json_object_foreach((json_t *)tensors, k, v)
        {
            if (spec[i])
                break;
            if (is_glob(k) && fnmatch(k, name, 0) == 0)
                spec[i] = v;
        }
        if (!spec[i])
            return shs__err(SHS_EINVAL, "%s: the layout does not cover tensor '%s'", R->where,
                            name);
    }
    return SHS_OK;
}

/* The target boxes of every tensor (the layout scaled when the target
   world differs from the one it describes). */
static int resolve_all(reshard *R)
{
    int rc = SHS_OK;
    const json_t **spec = shs__calloc(R->nt + 1, sizeof *spec);
    if (!spec || !(R->boxes = shs__calloc(R->nt + 1, sizeof *R->boxes)) ||
        !(R->cursor = shs__calloc(R->nt + 1, sizeof *R->cursor))) {
        shs__free(spec);
        return shs__err(SHS_ENOMEM, "out of memory");
    }
    if ((rc = assign_specs(R, spec)) < 0)
        goto done;
    R->res.scaled = R->world != R->doc_world;
    for (size_t i = 0; i < R->nt && rc == SHS_OK; i++) {
        const shs_checkpoint_tensor_info *t = shs_checkpoint_tensor(R->ck, i);
        json_t *scaled = NULL;
        if (R->res.scaled && (rc = shs__layout_scale(&scaled, spec[i], t->name, t->ndim,
                                                     R->doc_world, R->world, R->where)) < 0)
            break;
        R->boxes[i].ndim = t->ndim;
        rc = shs__layout_resolve(&R->boxes[i], scaled ? scaled : spec[i], t->name, t->ndim,
                                 t->shape, R->world, R->where);
        /* by rank: each target rank then finds its boxes at a cursor */
        if (rc == SHS_OK)
            rc = shs__lboxes_sort(&R->boxes[i]);
        json_decref(scaled);
    }
done:
    shs__free(spec);
    return rc;
}

/* Bytes of box k of tensor i, rounded up to 64 (its place in the arena). */
static int box_bytes(const reshard *R, size_t i, size_t k, uint64_t *nb, uint64_t *padded)
{
    const shs_checkpoint_tensor_info *t = shs_checkpoint_tensor(R->ck, i);
    const shs__lboxes *b = &R->boxes[i];
    *padded = 0;
    int rc = shs_tensor_nbytes(nb, t->dtype, t->ndim, b->shape + k * b->ndim);
    if (rc == SHS_OK && shs__add_u64(*nb, 63, padded))
        rc = shs__err(SHS_EOVERFLOW, "tensor '%s': box too large", t->name);
    if (rc == SHS_OK)
        *padded &= ~(uint64_t)63;
    return rc;
}

/* The largest share of one target rank: the arena every rank's boxes are
   read into, in turn (one allocation, its pages faulted in once). */
static int largest_share(const reshard *R, uint64_t *max)
{
    uint64_t *sum = shs__calloc((size_t)R->world, sizeof *sum), nb, padded;
    int rc = sum ? SHS_OK : shs__err(SHS_ENOMEM, "out of memory");
    *max = 0;
    for (size_t i = 0; i < R->nt && rc == SHS_OK; i++)
        for (size_t k = 0; k < R->boxes[i].n && rc == SHS_OK; k++) {
            int r = R->boxes[i].rank[k];
            if ((rc = box_bytes(R, i, k, &nb, &padded)) == SHS_OK &&
                shs__add_u64(sum[r], padded, &sum[r]))
                rc = shs__err(SHS_EOVERFLOW, "reshard: rank %d's share overflows", r);
            if (rc == SHS_OK && sum[r] > *max)
                *max = sum[r];
        }
    shs__free(sum);
    return rc;
}

/* The state of target rank `rank`: its boxes of every tensor, read from
   the source into `arena`. */
static int rank_state(reshard *R, int rank, shs_state **out, char *arena)
{
    uint64_t used = 0;
    int rc = shs_state_create(out);
    for (size_t i = 0; i < R->nt && rc == SHS_OK; i++) {
        const shs_checkpoint_tensor_info *t = shs_checkpoint_tensor(R->ck, i);
        const shs__lboxes *b = &R->boxes[i];
        size_t *at = &R->cursor[i];
        while (*at < b->n && b->rank[*at] < rank)
            (*at)++;
        for (size_t k = *at; k < b->n && b->rank[k] == rank && rc == SHS_OK; k++) {
            const uint64_t *off = b->off + k * b->ndim, *shape = b->shape + k * b->ndim;
            uint64_t nb, padded;
            if ((rc = box_bytes(R, i, k, &nb, &padded)) < 0)
                break;
            char *data = arena + used;
            used += padded;
            if ((rc = shs_checkpoint_read(R->ck, i, off, shape, t->dtype, data, (size_t)nb)) < 0)
                break;
            shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
            s.name = t->name;
            s.kind = t->kind;
            s.dtype = t->dtype;
            s.ndim = t->ndim;
            s.shape = shape;
            s.global_shape = t->shape;
            s.global_offset = off;
            s.data = data;
            rc = shs_state_add_tensor(*out, &s);
            R->res.bytes_read += nb;
            R->res.bytes_written += nb;
        }
    }
    return rc;
}

/* The rank-local blobs of `rank` (a rank of the source too), read. */
static int rank_blobs(reshard *R, int rank, shs__blob **out, size_t *n)
{
    size_t nb = shs_checkpoint_blob_count(R->ck);
    int rc = SHS_OK;
    *n = 0;
    if (!(*out = shs__calloc(nb + 1, sizeof **out)))
        return shs__err(SHS_ENOMEM, "out of memory");
    for (size_t k = 0; k < nb && rc == SHS_OK; k++) {
        shs_blob_info bi = SHS_BLOB_INFO_INIT;
        if ((rc = shs_checkpoint_blob(&bi, R->ck, k)) < 0 || bi.rank != rank)
            continue;
        shs__blob *b = &(*out)[(*n)++];
        if (!(b->name = shs__strdup(bi.name)) || !(b->data = shs__malloc((size_t)bi.size + 1)))
            rc = shs__err(SHS_ENOMEM, "out of memory");
        else
            rc = shs_checkpoint_read_blob(R->ck, k, b->data, (size_t)bi.size);
        b->len = (size_t)bi.size;
    }
    R->res.blobs_carried += *n;
    return rc;
}

static void blobs_release(shs__blob *b, size_t n)
{
    for (size_t k = 0; b && k < n; k++) {
        shs__free(b->name);
        shs__free(b->data);
        b++;
    }
}

/* Every target rank's files into tmp, then metadata.json and common.json. */
static int write_ranks(reshard *R, const char *tmp, const shs__save_req *base)
{
    shs__buf texts = SHS__BUF_INIT;
    size_t *lens = shs__calloc((size_t)R->world, sizeof *lens);
    char *arena = NULL;
    uint64_t share = 0;
    int rc = lens ? largest_share(R, &share) : shs__err(SHS_ENOMEM, "out of memory");
    if (rc == SHS_OK && (share > SIZE_MAX - 64 || !(arena = shs__malloc((size_t)share + 64))))
        rc = shs__err(SHS_ENOMEM, "out of memory for the %llu bytes of one target rank",
                      (unsigned long long)share);
    for (int r = 0; r < R->world && rc == SHS_OK; r++) {
        shs_state *st = NULL;
        shs__blob *blobs = NULL;
        size_t nblobs = 0;
        json_t *frag = NULL;
        shs_save_stats stats;
        shs__save_req req = *base;
        req.rank = r;
        rc = rank_state(R, r, &st, arena);
        if (rc == SHS_OK && (rc = rank_blobs(R, r, &blobs, &nblobs)) == SHS_OK) {
            req.blobs = blobs;
            req.n_blobs = nblobs;
            rc = shs__save_local(st, &req, tmp, NULL, &frag, &stats);
        }
        char *text = rc == SHS_OK ? shs__json_dumps(frag, JSON_COMPACT) : NULL;
        if (rc == SHS_OK && !text)
            rc = shs__err(SHS_ENOMEM, "out of memory");
        if (rc == SHS_OK && (rc = shs__buf_add(&texts, text, strlen(text))) == SHS_OK)
            lens[r] = strlen(text);
        shs__free(text);
        json_decref(frag);
        blobs_release(blobs, nblobs);
        shs__free(blobs);
        shs_state_free(st);
    }
    if (rc == SHS_OK)
        rc = shs__save_meta(base, tmp, texts.data ? texts.data : "", lens, R->world);
    shs__buf_release(&texts);
    shs__free(lens);
    shs__free(arena);
    return rc;
}

/* Split `dst` into its folder and its name (trailing slashes dropped). */
static int split_dst(const char *dst, char **dir, char **base)
{
    size_t n = strlen(dst);
    while (n > 1 && dst[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && dst[b - 1] != '/')
        b--;
    *dir = b == 0 ? shs__strdup(".") : shs__strndup(dst, b > 1 ? b - 1 : 1);
    *base = shs__strndup(dst + b, n - b);
    if (!*dir || !*base)
        return shs__err(SHS_ENOMEM, "out of memory");
    if (n == b || !strcmp(*base, ".") || !strcmp(*base, ".."))
        return shs__err(SHS_EINVAL, "reshard: '%s' does not name a new directory", dst);
    return SHS_OK;
}

static int dst_absent(const char *dst)
{
    int r = shs__entry_exists(dst);
    if (r > 0)
        return shs__err(SHS_EINVAL, "reshard: the destination '%s' exists (it is never replaced)",
                        dst);
    return r;
}

/* Open the source and settle the layout and the target world. */
static int prepare(reshard *R, const char *src, const char *layout_path, const shs_reshard_opts *o)
{
    shs_checkpoint_open_opts oo = SHS_CHECKPOINT_OPEN_OPTS_INIT;
    json_t *meta = NULL;
    oo.step = o->step;
    /* pread, not mmap: memory stays one target rank's share (mapped pages
       would count in the resident set), and a source file truncated
       under us is an error, not SIGBUS */
    oo.flags = SHS_CHECKPOINT_OPEN_NO_MMAP;
    oo.key = o->key;
    oo.key_len = o->key_len;
    int rc = shs_checkpoint_open(&R->ck, src, &oo);
    if (rc < 0)
        return rc;
    R->nt = shs_checkpoint_tensor_count(R->ck);
    R->res.saved_world_size = shs_checkpoint_world_size(R->ck);
    R->res.step = shs_checkpoint_step(R->ck) < 0 ? 0 : shs_checkpoint_step(R->ck);
    if (layout_path && o->strategy_file)
        rc = shs__err(SHS_EINVAL, "reshard: a layout file or a strategy file, not both");
    else if ((rc = read_metadata(&meta, R->ck)) == SHS_OK)
        rc = o->strategy_file ? load_strategy(R, o)
             : layout_path    ? load_layout_file(R, layout_path)
                              : saved_layout(R, meta);
    if ((layout_path || o->strategy_file) && meta)
        R->with_optim = !json_is_true(json_object_get(meta, "model_only"));
    else if (!meta)
        R->with_optim = 1;
    json_decref(meta);
    if (rc == SHS_OK)
        rc = shs__layout_doc_check(R->doc, &R->doc_world, R->where);
    if (rc < 0)
        return rc;
    if (o->world_size < 0 || o->world_size > SHS__LAYOUT_MAX_WORLD)
        return shs__err(SHS_EINVAL, "reshard: world_size %d is not from 1 to %d", o->world_size,
                        SHS__LAYOUT_MAX_WORLD);
    if (!R->doc_world && !o->world_size)
        return shs__err(SHS_EINVAL,
                        "%s: no \"world_size\": give it in the layout or as the target world "
                        "size",
                        R->where);
    if (!R->doc_world)
        R->doc_world = o->world_size;
    R->world = o->world_size ? o->world_size : R->doc_world;
    R->res.world_size = R->world;
    return resolve_all(R);
}

static void reshard_release(reshard *R)
{
    for (size_t i = 0; R->boxes && i < R->nt; i++)
        shs__lboxes_release(&R->boxes[i]);
    shs__free(R->boxes);
    shs__free(R->cursor);
    json_decref(R->doc);
    shs_checkpoint_free(R->ck);
}

/* Build the output in tmp and rename it to dst. */
static int build(reshard *R, const char *dst, const char *dir, const char *base,
                 const shs_reshard_opts *o)
{
    shs_progress p = SHS_PROGRESS_INIT;
    char suffix[17], *tmp = NULL;
    shs__buf name = SHS__BUF_INIT;
    shs__tool_tmp tt = { NULL, NULL, -1 };
    int rc = SHS_OK, made = 0;
    int64_t dstep = shs_checkpoint_step_of_name(base);
    if (dstep >= 0 && dstep != R->res.step)
        return shs__err(SHS_EINVAL,
                        "reshard: '%s' is named for step %lld but the checkpoint is of step %lld",
                        dst, (long long)dstep, (long long)R->res.step);
    if (!(shs_checkpoint_format(R->ck) == SHS_FORMAT_PLAIN) &&
        (rc = shs_checkpoint_progress(&p, R->ck)) < 0)
        return rc;
    /* an encrypted source gives an output encrypted with the same key:
       the suffix is then the new save's id in every chunk's AAD (crypt.h),
       from the cryptographic generator, as shs__ckpt_save makes it */
    shs__key key;
    int enc = shs_checkpoint_encrypted(R->ck);
    if (enc && !o->key)
        return shs__err(SHS_EKEY,
                        "%s: encrypted (" SHS__CIPHER_NAME ", key id %s): key required to "
                        "reshard it",
                        shs_checkpoint_path(R->ck), shs_checkpoint_key_id(R->ck));
    if (enc && (rc = shs__key_from_bytes(&key, o->key, o->key_len)) < 0)
        return rc;
    if (!enc || (rc = shs__crypt_save_id(suffix)) < 0)
        shs__random_suffix(suffix);
    rc = SHS_OK;
    if ((rc = shs__buf_addf(&name, ".tmp-%s-%s", base, suffix)) < 0 ||
        !(tmp = shs__path_join(dir, name.data))) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    /* a killed run's temporary of the same destination is removed first
       (best effort), then ours is made, locked (merge_tmp.h) */
    if (shs__tool_leftovers(dst, 1, NULL, NULL) < 0)
        shs__err_clear();
    if ((rc = shs__tool_tmp_make(&tt, tmp, "reshard")) < 0)
        goto done;
    made = 1;
    shs__save_req req = { .save_path = dir,
                          .step = R->res.step,
                          .prefix = o->prefix ? o->prefix : "checkpoint",
                          .world_size = R->world,
                          .with_optim = R->with_optim,
                          .fsync = o->fsync,
                          .progress = &p,
                          .key = enc ? &key : NULL,
                          .save_id = suffix };
    if ((rc = write_ranks(R, tmp, &req)) < 0 || (rc = dst_absent(dst)) < 0)
        goto done;
    if (shs__io->rename(tmp, dst) != 0) {
        rc = shs__err_errno(errno, "cannot rename into place", dst);
        goto done;
    }
    made = 0;
    if (o->fsync)
        rc = shs__io_fsync_dir(dir);
done:
    if (made)
        shs__rmtree(tmp);
    if (enc)
        shs__key_wipe(&key);
    shs__tool_tmp_release(&tt);
    shs__free(tmp);
    shs__buf_release(&name);
    return rc;
}

int shs_reshard(shs_reshard_result *out, const char *src, const char *dst, const char *layout_path,
                const shs_reshard_opts *opts)
{
    shs_reshard_opts o = SHS_RESHARD_OPTS_INIT;
    reshard R = { 0 };
    char *dir = NULL, *base = NULL;
    int rc;
    if (out && (rc = shs__check_version(out, SHS__V_RESHARD_RESULT, "shs_reshard")) < 0)
        return rc;
    if (opts && (rc = shs__check_version(opts, SHS__V_RESHARD_OPTS, "shs_reshard")) < 0)
        return rc;
    if (opts) /* only the fields of its version */
        shs__copy_in(&o, opts, SHS__V_RESHARD_OPTS);
    if (o.rank_list && !o.strategy_file)
        return shs__err(SHS_EINVAL, "shs_reshard: rank_list applies to a strategy_file");
    if (!src || !dst)
        return shs__err(SHS_EINVAL, "shs_reshard: source and destination are required");
    R.res = (shs_reshard_result)SHS_RESHARD_RESULT_INIT;
    if ((rc = split_dst(dst, &dir, &base)) < 0 || (rc = dst_absent(dst)) < 0)
        goto done;
    int r = shs__entry_exists(dir);
    if (r <= 0) {
        rc = r < 0 ? r : shs__err(SHS_ENOENT, "reshard: the folder of '%s' does not exist", dst);
        goto done;
    }
    if ((rc = prepare(&R, src, layout_path, &o)) < 0 || (rc = build(&R, dst, dir, base, &o)) < 0)
        goto done;
    R.res.n_tensors = R.nt;
    R.res.blobs_dropped = shs_checkpoint_blob_count(R.ck) - R.res.blobs_carried;
    if (out)
        shs__copy_out(out, &R.res, SHS__V_RESHARD_RESULT);
done:
    reshard_release(&R);
    shs__free(dir);
    shs__free(base);
    return rc;
}

/* A layout document as text, one tensor a line (to read and edit). */
static char *doc_text(const json_t *doc)
{
    shs__buf b = SHS__BUF_INIT;
    const json_t *tensors = json_object_get(doc, "tensors");
    const char *k;
    json_t *v;
    size_t i = 0;
    int rc = shs__buf_addf(&b, "{\n  \"world_size\": %lld,\n  \"tensors\": {",
                           (long long)json_integer_value(json_object_get(doc, "world_size")));
    json_object_foreach((json_t *)tensors, k, v)
    {
        json_t *name = json_string(k);
        char *ks = name ? shs__json_dumps(name, JSON_ENCODE_ANY) : NULL;
        char *vs = shs__json_dumps(v, 0);
        if (!ks || !vs || rc < 0)
            rc = SHS_ENOMEM;
        else
            rc = shs__buf_addf(&b, "%s\n    %s: %s", i++ ? "," : "", ks, vs);
        json_decref(name);
        shs__free(ks);
        shs__free(vs);
    }
    if (rc == SHS_OK)
        rc = shs__buf_addf(&b, "\n  }\n}");
    if (rc < 0) {
        shs__buf_release(&b);
        return NULL;
    }
    return b.data;
}

int shs_reshard_saved_layout(char **out, const char *src, int64_t step)
{
    shs_checkpoint_open_opts oo = SHS_CHECKPOINT_OPEN_OPTS_INIT;
    reshard R = { 0 };
    json_t *meta = NULL;
    int rc;
    if (!out || !src)
        return shs__err(SHS_EINVAL, "shs_reshard_saved_layout: arguments are required");
    *out = NULL;
    oo.step = step;
    if ((rc = shs_checkpoint_open(&R.ck, src, &oo)) == SHS_OK) {
        R.nt = shs_checkpoint_tensor_count(R.ck);
        if ((rc = read_metadata(&meta, R.ck)) == SHS_OK &&
            (rc = saved_layout(&R, meta)) == SHS_OK && !(*out = doc_text(R.doc)))
            rc = shs__err(SHS_ENOMEM, "out of memory");
    }
    json_decref(meta);
    reshard_release(&R);
    return rc;
}

int shs_strategy_layout(char **out, const char *path, const int *rank_list, size_t n_rank_list)
{
    json_t *doc = NULL;
    if (!out || !path)
        return shs__err(SHS_EINVAL, "shs_strategy_layout: arguments are required");
    *out = NULL;
    int rc = shs__strategy_read(&doc, path, rank_list, n_rank_list);
    if (rc == SHS_OK && !(*out = doc_text(doc)))
        rc = shs__err(SHS_ENOMEM, "out of memory");
    json_decref(doc);
    return rc;
}
