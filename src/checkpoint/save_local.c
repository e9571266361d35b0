/*
 * save_local.c -- one rank's part of a save: choose which tensors go in
 * (incremental saves hard-link files whose tensors did not change), write
 * this rank's safetensors files and blobs into the temporary step
 * directory, and describe them in a metadata fragment that the root merges
 * (save.c).  Format: docs/checkpoint.md.
 */
#include "checkpoint/save_local.h"

#include "crypto/crypt.h"
#include "dist/exchange.h"
#include "common/hash.h"
#include "store/io.h"
#include "source/stepdir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


/* Where a tensor of the state goes in this save. */
enum {
    SLOT_SKIP = -1
};

typedef struct out_file {
    char name[320];
    int linked;        /* hard link of a previous file */
    size_t prev_index; /* its index in the previous metadata */
    json_t *entry;     /* its "files" entry */
} out_file;

typedef struct tensor_out {
    int file; /* index into files, or SLOT_SKIP */
    uint64_t b0, b1;
    uint64_t hash;
    uint64_t *blocks; /* per-block checksums (chunks > SHS__HASH_BLOCK) */
    int enc;          /* encrypted (crypt.h): hash is of the ciphertext */
    unsigned char salt[SHS__SALT_BYTES];
    unsigned char *tags; /* one per segment */
    uint64_t ntags;
} tensor_out;

static const void *tensor_src(const shs_state *st, const shs__save_req *req, size_t i)
{
    return req->data && req->data[i] ? req->data[i] : st->t[i].data;
}

static int add_out_file(out_file **files, size_t *n, size_t *cap, const char *name)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 8;
        out_file *f = shs__realloc(*files, c * sizeof *f);
        if (!f)
            return shs__err(SHS_ENOMEM, "out of memory planning a save");
        *files = f;
        *cap = c;
    }
    memset(&(*files)[*n], 0, sizeof **files);
    snprintf((*files)[*n].name, sizeof(*files)[*n].name, "%s", name);
    return (int)(*n)++;
}

static int find_out_file(const out_file *files, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(files[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* Is the local box of tensor t exactly chunk c of the previous save, with
   the same content? */
static int same_as_prev(const shs__tensor *t, const shs__mtensor *pt, const shs__mchunk **pc,
                        uint64_t hash, int rank, const shs__meta *prev)
{
    if (!pt || pt->kind != t->kind || pt->dtype != t->dtype || pt->ndim != t->ndim)
        return 0;
    for (size_t d = 0; d < t->ndim; d++)
        if (pt->gshape[d] != t->gshape[d])
            return 0;
    for (size_t k = 0; k < pt->nc; k++) {
        const shs__mchunk *c = &pt->c[k];
        if (prev->f[c->file].rank != rank || !c->has_hash || c->hash != hash)
            continue;
        int same = 1;
        for (size_t d = 0; d < t->ndim && same; d++)
            same = c->off[d] == t->goff[d] && c->shape[d] == t->shape[d];
        if (same) {
            *pc = c;
            return 1;
        }
    }
    return 0;
}

/* Where shs__seal_chunk hands the segments of ciphertext: hashed and
   written. */
typedef struct sealed_out {
    shs_writer *w;
    const char *name;
    shs__xxh3_state *hs;
} sealed_out;

static int sealed_sink(void *ctx, uint64_t at, const void *data, size_t len)
{
    sealed_out *o = ctx;
    shs__xxh3_update(o->hs, data, len);
    return shs_writer_write_part(o->w, o->name, at, data, len);
}

/* Encrypt tensor i as a STREAM of segments (crypt.h), streamed through
   `buf` (the ring of shs__seal_chunk, 1 MiB segments: small enough that
   the ciphertext is still in the cache when it is hashed and written):
   its checksum is of the ciphertext, computed on the way. */
static int write_sealed(const shs_state *st, const shs__save_req *req, shs_writer *w, size_t i,
                        tensor_out *o, unsigned char *buf)
{
    const shs__tensor *t = &st->t[i];
    const char *src = tensor_src(st, req, i);
    unsigned char aad[SHS__AAD_MAX];
    size_t alen = shs__crypt_aad(aad, req->save_id, t->name, t->dtype, t->ndim, t->gshape, t->goff,
                                 t->shape, req->step, SHS__SEGMENT);
    shs__xxh3_state hs;
    shs__xxh3_reset(&hs);
    int rc = t->nbytes == 0 ? shs_writer_write(w, t->name, buf, 0) : SHS_OK;
    sealed_out so = { w, t->name, &hs };
    if (rc == SHS_OK)
        rc = shs__seal_chunk(req->key, aad, alen, src, t->nbytes, buf, o->salt, &o->tags,
                             sealed_sink, &so);
    o->ntags = shs__crypt_nsegs(t->nbytes, SHS__SEGMENT);
    o->hash = shs__xxh3_digest(&hs);
    o->enc = 1;
    return rc;
}

/* Write the tensors assigned to file `fi` as one safetensors file. */
static int write_one_file(const shs_state *st, const shs__save_req *req, const char *tmp,
                          out_file *f, int fi, tensor_out *to, const int *incl)
{
    shs_writer *w = NULL;
    shs_writer_opts wo = SHS_WRITER_OPTS_INIT;
    wo.fsync = req->fsync;
    int rc;
    char *path = shs__path_join(tmp, f->name);
    unsigned char *buf = req->key ? shs__malloc(SHS__SEAL_RING * SHS__SEGMENT) : NULL;
    if (!path || (req->key && !buf)) {
        shs__free(path);
        shs__free(buf);
        return shs__err(SHS_ENOMEM, "out of memory");
    }
    if ((rc = shs_writer_create(&w, path, &wo)) < 0)
        goto done;
    if ((rc = shs_writer_add_metadata(w, "format", "pt")) < 0)
        goto done;
    /* for any reader of the file alone: the payload is ciphertext */
    if (req->key && (rc = shs_writer_add_metadata(w, SHS__FILE_MARK, SHS__CIPHER_STREAM)) < 0)
        goto done;
    for (size_t i = 0; i < st->n; i++)
        if (incl[i] && to[i].file == fi &&
            (rc = shs_writer_add_tensor(w, st->t[i].name, st->t[i].dtype, st->t[i].ndim,
                                        st->t[i].shape)) < 0)
            goto done;
    if ((rc = shs_writer_seal(w)) < 0)
        goto done;
    for (size_t k = 0; k < shs_writer_tensor_count(w); k++) {
        const char *name = shs_writer_tensor_name(w, k);
        long i = shs__state_find(st, name, strlen(name));
        if (req->key)
            rc = write_sealed(st, req, w, (size_t)i, &to[i], buf);
        else
            rc = shs_writer_write(w, name, tensor_src(st, req, (size_t)i), (size_t)st->t[i].nbytes);
        if (rc < 0 || (rc = shs__writer_tensor_range(w, name, &to[i].b0, &to[i].b1)) < 0)
            goto done;
    }
    rc = shs_writer_commit(w);
done:
    shs_writer_free(w);
    shs__free(path);
    shs__free(buf);
    return rc;
}

/* The "files" entry of a written file: its name, rank, size and header
   checksum (the header names and places every chunk, so a changed header
   must be caught even where the chunk checksums cannot see it). */
/* The "files" entry of a file just written into tmp: its size and the
   checksum of its header, read back from the file itself. */
static int file_entry(json_t **out, const char *tmp, const char *name, int rank)
{
    char *path = shs__path_join(tmp, name), hx[17];
    shs_file *f = NULL;
    shs_open_opts oo = SHS_OPEN_OPTS_INIT;
    oo.flags = SHS_OPEN_NO_MMAP;
    *out = NULL;
    int rc = path ? shs_file_open(&f, path, &oo) : shs__err(SHS_ENOMEM, "out of memory");
    if (rc == SHS_OK) {
        shs__hex64(hx, shs__header_hash(f));
        *out = json_pack("{s:s, s:i, s:I, s:s}", "name", name, "rank", rank, "size",
                         (json_int_t)shs_file_size(f), "header_xxh3", hx);
        if (!*out)
            rc = shs__err(SHS_ENOMEM, "out of memory describing %s", path);
    }
    shs_file_free(f);
    shs__free(path);
    return rc;
}

static json_t *json_dims(const uint64_t *v, size_t n)
{
    json_t *a = json_array();
    for (size_t d = 0; a && d < n; d++)
        if (json_array_append_new(a, json_integer((json_int_t)v[d])) < 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *json_range(uint64_t a, uint64_t b)
{
    json_t *r = json_array();
    if (r && (json_array_append_new(r, json_integer((json_int_t)a)) < 0 ||
              json_array_append_new(r, json_integer((json_int_t)b)) < 0)) {
        json_decref(r);
        return NULL;
    }
    return r;
}

/* One rank's save in progress (save_local and its phases). */
typedef struct local_save {
    const shs_state *st;
    const shs__save_req *req;
    const char *tmp; /* the temporary step directory */
    shs__meta prev;  /* the previous step, when have_prev */
    int have_prev;
    out_file *files;
    size_t nfiles, capfiles;
    tensor_out *to;       /* per tensor: its file, range, checksums */
    int *incl;            /* per tensor: saved in this step */
    int *unchanged;       /* per tensor: 1 + its previous file, or 0 */
    int blob_file;        /* the blobs' file, -1 without blobs */
    uint64_t *blob_range; /* b0, b1 of each blob */
    shs_save_stats s;
} local_save;

/* Which tensors go in (model always, optimizer state when asked, minus
   `skip`), and the checksum of each local chunk. */
static int hash_included(local_save *L, const uint8_t *skip)
{
    const shs_state *st = L->st;
    const shs__save_req *req = L->req;
    for (size_t i = 0; i < st->n; i++) {
        L->incl[i] = (st->t[i].kind == SHS_KIND_MODEL || req->with_optim) && !(skip && skip[i]);
        L->to[i].file = SLOT_SKIP;
        if (!L->incl[i])
            continue;
        uint64_t n = st->t[i].nbytes;
        L->s.state_bytes += n;
        /* encrypted: the checksum is of the ciphertext (write_sealed),
           and the chunk is always read whole (no block checksums) */
        if (req->key)
            continue;
        if (n > SHS__HASH_BLOCK) {
            if (!(L->to[i].blocks = shs__calloc(
                      (size_t)((n + SHS__HASH_BLOCK - 1) / SHS__HASH_BLOCK), 8)))
                return shs__err(SHS_ENOMEM, "out of memory for block checksums");
            L->to[i].hash = shs__xxh3_blocks(tensor_src(st, req, i), n, SHS__HASH_BLOCK,
                                             L->to[i].blocks);
        } else {
            L->to[i].hash = shs__xxh3(tensor_src(st, req, i), (size_t)n);
        }
    }
    return SHS_OK;
}

/* Incremental: previous files whose every tensor is unchanged are
   hard-linked; other unchanged tensors are marked for a "frozen" file
   that the next save can link in turn. */
static int link_unchanged(local_save *L)
{
    const shs_state *st = L->st;
    const shs__save_req *req = L->req;
    shs__meta *prev = &L->prev;
    int rc = SHS_OK;
    int *linkable = NULL;
    /* encrypted saves write every chunk (each under a key of its own,
       from a fresh salt): the manager refuses incremental with a key */
    if (req->incremental && !req->key && req->prev_dir &&
        shs__meta_parse(prev, req->prev_dir, 0) == SHS_OK)
        L->have_prev = 1;
    shs__err_clear();
    if (!L->have_prev)
        return SHS_OK;
    L->unchanged = shs__calloc(st->n + 1, sizeof *L->unchanged);
    linkable = shs__calloc(prev->nf + 1, sizeof *linkable);
    if (!L->unchanged || !linkable) {
        rc = shs__err(SHS_ENOMEM, "out of memory planning a save");
        goto done;
    }
    for (size_t k = 0; k < prev->nf; k++)
        linkable[k] = prev->f[k].rank == req->rank;
    for (size_t k = 0; k < prev->nb; k++)
        linkable[prev->b[k].file] = 0;
    /* a previous file is linkable when each of its chunks is a tensor
       of this save with the same content */
    for (size_t j = 0; j < prev->nt; j++) {
        const shs__mtensor *pt = &prev->t[j];
        long i = shs__state_find(st, pt->name, strlen(pt->name));
        const shs__mchunk *pc = NULL;
        int same = i >= 0 && L->incl[i] &&
                   same_as_prev(&st->t[i], pt, &pc, L->to[i].hash, req->rank, prev);
        if (same)
            L->unchanged[i] = 1 + (int)pc->file;
        for (size_t k = 0; k < pt->nc; k++)
            if (!same || &pt->c[k] != pc)
                linkable[pt->c[k].file] = 0;
    }
    for (size_t k = 0; k < prev->nf; k++) {
        if (!linkable[k])
            continue;
        char *from = shs__path_join(req->prev_dir, prev->f[k].name);
        char *to_path = shs__path_join(L->tmp, prev->f[k].name);
        int ok = from && to_path && shs__io->link(from, to_path) == 0;
        shs__free(from);
        shs__free(to_path);
        if (!ok)
            continue; /* e.g. EXDEV: those tensors are written instead */
        int fi = add_out_file(&L->files, &L->nfiles, &L->capfiles, prev->f[k].name);
        if (fi < 0) {
            rc = fi;
            goto done;
        }
        L->files[fi].linked = 1;
        L->files[fi].prev_index = k;
        for (size_t i = 0; i < st->n; i++)
            if (L->unchanged[i] == 1 + (int)k)
                L->to[i].file = fi;
    }
done:
    shs__free(linkable);
    return rc;
}

/* The file of every tensor not linked: one file per kind, plus one per
   kind for unchanged data. */
static int assign_files(local_save *L)
{
    const shs_state *st = L->st;
    const shs__save_req *req = L->req;
    char name[360];
    for (size_t i = 0; i < st->n; i++) {
        if (!L->incl[i] || L->to[i].file != SLOT_SKIP)
            continue;
        const char *kind = shs__kind_name[st->t[i].kind];
        int frozen = L->unchanged && L->unchanged[i];
        if (frozen)
            snprintf(name, sizeof name, "%s-%s-frozen%08lld-%07d-%07d.safetensors", req->prefix,
                     kind, (long long)req->step, req->rank, req->world_size);
        else
            snprintf(name, sizeof name, "%s-%s-%07d-%07d.safetensors", req->prefix, kind, req->rank,
                     req->world_size);
        int fi = find_out_file(L->files, L->nfiles, name);
        if (fi >= 0 && L->files[fi].linked) {
            /* a linked file already has the plain name: use a step-tagged one */
            snprintf(name, sizeof name, "%s-%s-s%08lld-%07d-%07d.safetensors", req->prefix, kind,
                     (long long)req->step, req->rank, req->world_size);
            fi = find_out_file(L->files, L->nfiles, name);
        }
        if (fi < 0 && (fi = add_out_file(&L->files, &L->nfiles, &L->capfiles, name)) < 0)
            return fi;
        L->to[i].file = fi;
    }
    return SHS_OK;
}

/* Write every file not linked; a linked tensor's byte range comes from
   the previous metadata. */
static int write_files(local_save *L)
{
    const shs_state *st = L->st;
    int rc;
    for (size_t fi = 0; fi < L->nfiles; fi++) {
        if (L->files[fi].linked) {
            for (size_t i = 0; i < st->n; i++) {
                if (L->to[i].file != (int)fi)
                    continue;
                const shs__mtensor *pt = shs__meta_find(&L->prev, st->t[i].name);
                const shs__mchunk *pc = NULL;
                same_as_prev(&st->t[i], pt, &pc, L->to[i].hash, L->req->rank, &L->prev);
                L->to[i].b0 = pc->b0;
                L->to[i].b1 = pc->b1;
                L->s.bytes_linked += st->t[i].nbytes;
            }
            continue;
        }
        if ((rc = write_one_file(st, L->req, L->tmp, &L->files[fi], (int)fi, L->to, L->incl)) < 0)
            return rc;
        for (size_t i = 0; i < st->n; i++)
            if (L->to[i].file == (int)fi)
                L->s.bytes_written += st->t[i].nbytes;
    }
    return SHS_OK;
}

/* Rank-local blobs: one safetensors file of U8 tensors. */
static int write_blobs(local_save *L)
{
    const shs__save_req *req = L->req;
    char name[360];
    int rc;
    if (!req->n_blobs)
        return SHS_OK;
    snprintf(name, sizeof name, "%s-state-%07d-%07d.safetensors", req->prefix, req->rank,
             req->world_size);
    char *path = shs__path_join(L->tmp, name);
    shs_writer *w = NULL;
    shs_writer_opts wo = SHS_WRITER_OPTS_INIT;
    wo.fsync = req->fsync;
    L->blob_range = shs__calloc(2 * req->n_blobs, sizeof *L->blob_range);
    if (!path || !L->blob_range)
        rc = shs__err(SHS_ENOMEM, "out of memory saving blobs");
    else
        rc = shs_writer_create(&w, path, &wo);
    for (size_t k = 0; rc == SHS_OK && k < req->n_blobs; k++) {
        uint64_t len = req->blobs[k].len;
        rc = shs_writer_add_tensor(w, req->blobs[k].name, SHS_U8, 1, &len);
    }
    for (size_t k = 0; rc == SHS_OK && k < req->n_blobs; k++) {
        rc = shs_writer_write(w, req->blobs[k].name, req->blobs[k].data, req->blobs[k].len);
        if (rc == SHS_OK)
            rc = shs__writer_tensor_range(w, req->blobs[k].name, &L->blob_range[2 * k],
                                          &L->blob_range[2 * k + 1]);
        L->s.bytes_written += req->blobs[k].len;
    }
    if (rc == SHS_OK)
        rc = shs_writer_commit(w);
    shs_writer_free(w);
    shs__free(path);
    if (rc == SHS_OK &&
        (L->blob_file = add_out_file(&L->files, &L->nfiles, &L->capfiles, name)) < 0)
        rc = L->blob_file;
    return rc;
}

/* The metadata.json entry of tensor i: its one chunk, with per-block
   checksums when it is large; NULL when out of memory. */
static json_t *tensor_entry(const local_save *L, size_t i)
{
    const shs__tensor *t = &L->st->t[i];
    const tensor_out *o = &L->to[i];
    char hx[17];
    shs__hex64(hx, o->hash);
    json_t *chunk = json_pack("{s:o, s:o, s:i, s:s, s:o, s:s}", "offset",
                              json_dims(t->goff, t->ndim), "shape", json_dims(t->shape, t->ndim),
                              "file", o->file, "key", t->name, "byte_range",
                              json_range(o->b0, o->b1), "xxh3", hx);
    /* encrypted: the chunk's salt and one tag per segment (crypt.h) */
    if (chunk && o->enc) {
        char salt[2 * SHS__SALT_BYTES + 1];
        char *tags = shs__malloc(2 * SHS__TAG_BYTES * o->ntags + 1);
        shs__crypt_hex(salt, o->salt, sizeof o->salt);
        if (tags)
            shs__crypt_hex(tags, o->tags, SHS__TAG_BYTES * o->ntags);
        if (!tags || json_object_set_new(chunk, "gcm_salt", json_string(salt)) < 0 ||
            json_object_set_new(chunk, "gcm_tags", json_string(tags)) < 0) {
            json_decref(chunk);
            chunk = NULL;
        }
        shs__free(tags);
    }
    /* large chunks also get per-block checksums, so a load that needs
       only part of the chunk checks only the blocks it reads */
    if (chunk && o->blocks) {
        json_t *bl = json_array();
        for (uint64_t q = 0; bl && q * SHS__HASH_BLOCK < t->nbytes; q++) {
            shs__hex64(hx, o->blocks[q]);
            if (json_array_append_new(bl, json_string(hx)) < 0) {
                json_decref(bl);
                bl = NULL;
            }
        }
        if (!bl || json_object_set_new(chunk, "xxh3_block", json_integer(SHS__HASH_BLOCK)) < 0 ||
            json_object_set_new(chunk, "xxh3_blocks", bl) < 0) {
            json_decref(chunk);
            chunk = NULL;
        }
    }
    return chunk ? json_pack("{s:s, s:s, s:o, s:[o]}", "kind", shs__kind_name[t->kind], "dtype",
                             shs_dtype_name(t->dtype), "shape", json_dims(t->gshape, t->ndim),
                             "chunks", chunk)
                 : NULL;
}

/* This rank's fragment of metadata.json: its files, tensors and blobs. */
static int describe(local_save *L, json_t **out)
{
    const shs__save_req *req = L->req;
    int rc = SHS_OK;
    json_t *root = json_object();
    json_t *jfiles = json_array(), *jt = json_object(), *jb = json_array();
    int bad = !root || !jfiles || !jt || !jb;
    if (!bad) {
        /* each set_new takes its value even when it fails: no short
           circuit, or the values after a failed one leak */
        bad = json_object_set_new(root, "files", jfiles) != 0;
        bad |= json_object_set_new(root, "tensors", jt) != 0;
        bad |= json_object_set_new(root, "blobs", jb) != 0;
    } else {
        json_decref(jfiles);
        json_decref(jt);
        json_decref(jb);
    }
    /* the root checks that every rank saved under its key */
    if (!bad && req->key)
        bad = json_object_set_new(root, "key_id", json_string(req->key->id)) != 0;
    for (size_t fi = 0; !bad && fi < L->nfiles; fi++) {
        json_t *e;
        if ((rc = file_entry(&e, L->tmp, L->files[fi].name, req->rank)) < 0)
            goto done;
        bad = json_array_append_new(jfiles, e) < 0;
    }
    for (size_t i = 0; !bad && i < L->st->n; i++) {
        if (!L->incl[i])
            continue;
        json_t *e = tensor_entry(L, i);
        bad = !e || json_object_set_new(jt, L->st->t[i].name, e) < 0;
    }
    /* the box of every tensor this rank holds, written here or not
       (remove_redundancy): the root records the layout from them */
    json_t *jh = bad ? NULL : json_object();
    bad = bad || !jh || json_object_set_new(root, "held", jh) != 0;
    for (size_t i = 0; !bad && i < L->st->n; i++) {
        const shs__tensor *t = &L->st->t[i];
        if (t->kind == SHS_KIND_MODEL || req->with_optim)
            bad = json_object_set_new(jh, t->name,
                                      json_pack("[o, o]", json_dims(t->goff, t->ndim),
                                                json_dims(t->shape, t->ndim))) != 0;
    }
    char hx[17];
    for (size_t k = 0; !bad && k < req->n_blobs; k++) {
        shs__hex64(hx, shs__xxh3(req->blobs[k].data, req->blobs[k].len));
        json_t *e = json_pack(
            "{s:s, s:i, s:i, s:s, s:o, s:s}", "name", req->blobs[k].name, "rank", req->rank, "file",
            L->blob_file, "key", req->blobs[k].name, "byte_range",
            json_range(L->blob_range[2 * k], L->blob_range[2 * k + 1]), "xxh3", hx);
        bad = !e || json_array_append_new(jb, e) < 0;
    }
    if (bad) {
        rc = shs__err(SHS_ENOMEM, "out of memory describing the saved files");
        goto done;
    }
    *out = root;
    root = NULL;
done:
    json_decref(root);
    return rc;
}

/*
 * One rank's part of a save: write its files into the temporary directory
 * `tmp` and describe them in a metadata fragment (the "files", "tensors"
 * and "blobs" of metadata.json, with file indices local to this rank).
 */
int shs__save_local(const shs_state *st, const shs__save_req *req, const char *tmp,
                    const uint8_t *skip, json_t **frag_out, shs_save_stats *stats)
{
    int rc;
    local_save L = { .st = st, .req = req, .tmp = tmp, .blob_file = -1 };
    L.s.step = req->step;
    *frag_out = NULL;
    L.to = shs__calloc(st->n + 1, sizeof *L.to);
    L.incl = shs__calloc(st->n + 1, sizeof *L.incl);
    if (!L.to || !L.incl) {
        rc = shs__err(SHS_ENOMEM, "out of memory saving step %lld", (long long)req->step);
        goto done;
    }
    if ((rc = hash_included(&L, skip)) < 0 || (rc = link_unchanged(&L)) < 0 ||
        (rc = assign_files(&L)) < 0 || (rc = write_files(&L)) < 0 || (rc = write_blobs(&L)) < 0 ||
        (rc = describe(&L, frag_out)) < 0)
        goto done;
    *stats = L.s;
done:
    if (L.have_prev)
        shs__meta_free(&L.prev);
    shs__free(L.files);
    for (size_t i = 0; L.to && i < st->n; i++) {
        shs__free(L.to[i].blocks);
        shs__free(L.to[i].tags);
    }
    shs__free(L.to);
    shs__free(L.incl);
    shs__free(L.unchanged);
    shs__free(L.blob_range);
    return rc;
}
