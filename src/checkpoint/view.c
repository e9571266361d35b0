/*
 * view.c -- the public read-only side of checkpoints: resolving a path to
 * a step directory, verifying one, the accessors of the shs_checkpoint
 * handle's model (read.c opens it and reads data), and the save-path
 * maintenance entry points (list, tracker, remove, clean).  Format:
 * docs/checkpoint.md.
 */
#include "source/common_json.h"
#include "crypto/crypt.h"
#include "store/io.h"
#include "checkpoint/loader.h"
#include "store/lock.h"
#include "common/opts.h"
#include "source/savepath.h"
#include "source/source.h"
#include "source/stepdir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Mark tensor idx of file fi as described by metadata.json. */
static void mark_used(uint8_t **used, uint32_t fi, size_t idx)
{
    if (used[fi])
        used[fi][idx] = 1;
}

/* Without checksums (MindSpore's files) a replica is compared with the
   nearest earlier copy of its box (equal copies chain to the one readers
   use): copies that differ cannot both be right. */
static int same_as_earlier_copy(shs__loader *L, const shs__mtensor *t, size_t k, const void *p,
                                const char *dir)
{
    const shs__mchunk *c = &t->c[k], *o = NULL;
    size_t nd = t->ndim * sizeof(uint64_t);
    for (size_t i = k; i-- > 0 && !o;)
        if (memcmp(t->c[i].off, c->off, nd) == 0 && memcmp(t->c[i].shape, c->shape, nd) == 0)
            o = &t->c[i];
    if (!o)
        return SHS_OK;
    shs_file *f;
    size_t idx;
    uint64_t n = c->b1 - c->b0;
    void *tmp = NULL;
    int rc = shs__chunk_locate(L, o->file, o->key, o->b0, o->b1, &f, &idx);
    if (rc < 0)
        return rc;
    const void *q = shs_file_tensor_data(f, idx);
    if (!q) {
        if (!(tmp = shs__malloc((size_t)n + 1)))
            return shs__err(SHS_ENOMEM, "out of memory");
        if ((rc = shs_file_read(f, idx, tmp, (size_t)n)) == SHS_OK)
            q = tmp;
    }
    if (rc == SHS_OK && memcmp(p, q, (size_t)n) != 0)
        rc = shs__err(SHS_ECORRUPT,
                      "%s: tensor '%s': its copies in '%s' and '%s' differ (no checksums say "
                      "which is right)",
                      dir, t->name, L->m->f[o->file].name, L->m->f[c->file].name);
    shs__free(tmp);
    return rc;
}

static int verify(const char *dir, const shs__key *key);

int shs_checkpoint_verify(const char *dir, const unsigned char *key, size_t key_len)
{
    shs__key k;
    if (!key)
        return verify(dir, NULL);
    int rc = shs__key_from_bytes(&k, key, key_len);
    if (rc == SHS_OK)
        rc = verify(dir, &k);
    shs__key_wipe(&k);
    return rc;
}

static int verify(const char *dir, const shs__key *key)
{
    shs__meta m;
    int rc;
    if (!dir)
        return shs__err(SHS_EINVAL, "shs_checkpoint_verify: NULL path");
    if ((rc = shs__source_open_step(&m, dir, SHS__SRC_STEPS)) < 0)
        return rc;
    shs__loader L = { dir, &m, shs__calloc(m.nf + 1, sizeof(shs_file *)), 0, NULL, key };
    uint8_t **used = shs__calloc(m.nf + 1, sizeof *used);
    void *buf = NULL;
    if (!L.fh || !used) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    /* a wrong key is said at once, and so is a key given for an
       unencrypted checkpoint (nothing in it is authenticated by the key);
       a missing key at the end */
    if (key && (rc = shs__crypt_require(&m, key, dir)) < 0)
        goto done;
    /* every listed file exists and is valid (its header matching its
       checksum in version 2), even one no chunk uses */
    for (size_t i = 0; i < m.nf && rc == SHS_OK; i++) {
        shs_file *f;
        if ((rc = shs__loader_open_file(&L, (uint32_t)i, &f)) == SHS_OK &&
            !(used[i] = shs__calloc(shs_file_tensor_count(f) + 1, 1)))
            rc = shs__err(SHS_ENOMEM, "out of memory");
    }
    /* every stored byte read through the engine (chunk_read.h), replicas
       included: each chunk against its checksum, its blocks and, with the
       key, its tags; each blob against its checksum */
    for (size_t j = 0; j < m.nt && rc == SHS_OK; j++) {
        for (size_t k = 0; k < m.t[j].nc && rc == SHS_OK; k++) {
            const shs__mchunk *c = &m.t[j].c[k];
            shs_file *f;
            size_t idx;
            const void *p;
            if ((rc = shs__chunk_open(&L, &m.t[j], c, &f, &idx)) < 0)
                break;
            mark_used(used, c->file, idx);
            rc = shs__chunk_verify(&L, &m.t[j], c, f, idx, &p, &buf);
            if (rc == SHS_OK && c->replica && !c->has_hash)
                rc = same_as_earlier_copy(&L, &m.t[j], k, p, dir);
        }
    }
    for (size_t k = 0; k < m.nb && rc == SHS_OK; k++) {
        const shs__mblob *b = &m.b[k];
        size_t idx;
        void *nb = shs__realloc(buf, (size_t)(b->b1 - b->b0) + 1);
        if (!nb) {
            rc = shs__err(SHS_ENOMEM, "out of memory");
            break;
        }
        buf = nb;
        if ((rc = shs__blob_read(&L, b, buf, &idx)) == SHS_OK)
            mark_used(used, b->file, idx);
    }
    /* bytes no checksum covers would pass unseen: every tensor of every
       file is a chunk or a blob of metadata.json */
    for (size_t i = 0; i < m.nf && rc == SHS_OK; i++)
        for (size_t k = 0; k < shs_file_tensor_count(L.fh[i]) && rc == SHS_OK; k++)
            if (!used[i][k])
                rc = shs__err(SHS_ECORRUPT,
                              "%s/%s: tensor '%s' is not described by "
                              "metadata.json",
                              dir, m.f[i].name, shs_file_tensor(L.fh[i], k)->name);
    if (rc == SHS_OK)
        rc = shs__meta_check_common(&m, dir);
    if (rc == SHS_OK) {
        shs_progress p = SHS_PROGRESS_INIT;
        rc = shs__common_read(&p, dir);
    }
    /* everything the checksums cover is intact; the chunks' contents
       cannot be authenticated without the key */
    if (rc == SHS_OK && m.encrypted && !key)
        rc = shs__err(SHS_EKEY,
                      "%s: checksums match, but it is encrypted (" SHS__CIPHER_NAME
                      ", key id %s): key required to authenticate its chunks",
                      dir, m.key_id);
done:
    shs__free(buf);
    for (size_t i = 0; used && i < m.nf; i++)
        shs__free(used[i]);
    shs__free(used);
    for (size_t i = 0; L.fh && i < m.nf; i++)
        shs_file_free(L.fh[i]);
    shs__free(L.fh);
    shs__meta_free(&m);
    return rc;
}

int64_t shs_checkpoint_step(const shs_checkpoint *c)
{
    return c->m.step;
}
int shs_checkpoint_world_size(const shs_checkpoint *c)
{
    return c->m.world_size;
}
size_t shs_checkpoint_file_count(const shs_checkpoint *c)
{
    return c->m.nf;
}
size_t shs_checkpoint_tensor_count(const shs_checkpoint *c)
{
    return c->m.nt;
}
size_t shs_checkpoint_blob_count(const shs_checkpoint *c)
{
    return c->m.nb;
}

const char *shs_checkpoint_file_name(const shs_checkpoint *c, size_t i)
{
    return i < c->m.nf ? c->m.f[i].name : NULL;
}

int shs_checkpoint_file_rank(const shs_checkpoint *c, size_t i)
{
    return i < c->m.nf ? c->m.f[i].rank : -1;
}

const shs_checkpoint_tensor_info *shs_checkpoint_tensor(const shs_checkpoint *c, size_t i)
{
    return i < c->m.nt ? &c->info[i] : NULL;
}

int shs_checkpoint_find(size_t *out, const shs_checkpoint *c, const char *name)
{
    const shs__mtensor *t = shs__meta_find(&c->m, name);
    if (!t)
        return shs__err(SHS_ENOTFOUND, "no tensor named '%s' in the checkpoint", name);
    *out = (size_t)(t - c->m.t);
    return SHS_OK;
}

int shs_checkpoint_chunk(shs_chunk_info *out, const shs_checkpoint *c, size_t ti, size_t ci)
{
    int rc;
    if (!out || !c)
        return shs__err(SHS_EINVAL, "shs_checkpoint_chunk: NULL argument");
    if ((rc = shs__check_version(out, SHS__V_CHUNK_INFO, "shs_checkpoint_chunk")) < 0)
        return rc;
    if (ti >= c->m.nt || ci >= c->m.t[ti].nc)
        return shs__err(SHS_ERANGE, "chunk %zu of tensor %zu out of range", ci, ti);
    const shs__mchunk *k = &c->m.t[ti].c[ci];
    shs_chunk_info v = { SHS_CHUNK_INFO_VERSION,
                         k->off,
                         k->shape,
                         k->file,
                         k->key,
                         k->b0,
                         k->b1,
                         k->hash,
                         k->has_hash };
    shs__copy_out(out, &v, SHS__V_CHUNK_INFO);
    return SHS_OK;
}

int shs_checkpoint_blob(shs_blob_info *out, const shs_checkpoint *c, size_t i)
{
    int rc;
    if (!out || !c)
        return shs__err(SHS_EINVAL, "shs_checkpoint_blob: NULL argument");
    if ((rc = shs__check_version(out, SHS__V_BLOB_INFO, "shs_checkpoint_blob")) < 0)
        return rc;
    if (i >= c->m.nb)
        return shs__err(SHS_ERANGE, "blob %zu out of range", i);
    const shs__mblob *b = &c->m.b[i];
    shs_blob_info v = {
        SHS_BLOB_INFO_VERSION, b->name, b->rank, b->file, b->key, b->b0, b->b1, b->hash,
        b->b1 - b->b0
    };
    shs__copy_out(out, &v, SHS__V_BLOB_INFO);
    return SHS_OK;
}

int shs_checkpoint_check_files(const shs_checkpoint *c)
{
    if (!c)
        return shs__err(SHS_EINVAL, "shs_checkpoint_check_files: NULL checkpoint");
    for (size_t i = 0; i < c->m.nf; i++) {
        const shs__mfile *f = &c->m.f[i];
        char *p = shs__path_join(c->dir, f->name);
        struct stat st;
        int rc = SHS_OK;
        if (!p)
            return shs__err(SHS_ENOMEM, "out of memory");
        /* files inside a checkpoint are opened without following links */
        if (shs__io->lstat(p, &st) != 0)
            rc = errno == ENOENT ? shs__err(SHS_ENOENT, "%s: missing file '%s' named in %s", c->dir,
                                            f->name, c->m.plain ? "the index" : "metadata.json")
                                 : shs__err_errno(errno, "cannot stat", p);
        else if (!S_ISREG(st.st_mode))
            rc = shs__err(SHS_ECORRUPT, "%s: '%s' is not a regular file", c->dir, f->name);
        else if (f->has_header_hash && (uint64_t)st.st_size != f->size)
            rc = shs__err(SHS_ECHECKSUM,
                          "%s: file '%s' is %llu bytes, but metadata.json records %llu", c->dir,
                          f->name, (unsigned long long)st.st_size, (unsigned long long)f->size);
        shs__free(p);
        if (rc < 0)
            return rc;
    }
    if (c->m.plain)
        return SHS_OK;
    shs_progress p = SHS_PROGRESS_INIT;
    int rc = shs__meta_check_common(&c->m, c->dir);
    return rc < 0 ? rc : shs__common_read(&p, c->dir);
}

int shs_checkpoint_list(int64_t *steps, size_t cap, size_t *n, const char *save_path)
{
    if (!n || !save_path || (cap && !steps))
        return shs__err(SHS_EINVAL, "shs_checkpoint_list: NULL argument");
    int64_t *v;
    size_t cnt;
    int rc = shs__list_steps(&v, &cnt, save_path);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < cnt && i < cap; i++)
        steps[i] = v[i];
    *n = cnt;
    shs__free(v);
    return SHS_OK;
}

int64_t shs_checkpoint_step_of_name(const char *name)
{
    return name ? shs__step_of_name(name) : -1;
}

int shs_checkpoint_read_tracker(int64_t *step, const char *save_path)
{
    if (!step || !save_path)
        return shs__err(SHS_EINVAL, "shs_checkpoint_read_tracker: NULL argument");
    return shs__read_tracker(step, save_path);
}

int shs_checkpoint_remove(const char *save_path, int64_t step)
{
    if (!save_path || step < 0)
        return shs__err(SHS_EINVAL, "shs_checkpoint_remove: bad argument");
    shs_lock *lk = NULL;
    int rc = shs__savepath_lock_for_tool(&lk, save_path);
    if (rc == SHS_ENOENT) {
        shs__err_clear();
        return SHS_OK; /* no save path: nothing to remove */
    }
    if (rc == SHS_OK)
        rc = shs__remove_step(save_path, step);
    shs_lock_free(lk);
    return rc;
}

int shs_checkpoint_clean(const char *save_path)
{
    if (!save_path)
        return shs__err(SHS_EINVAL, "shs_checkpoint_clean: NULL argument");
    shs_lock *lk = NULL;
    int rc = shs__savepath_lock_for_tool(&lk, save_path);
    if (rc == SHS_ENOENT) {
        shs__err_clear();
        return SHS_OK; /* no save path: nothing to clean */
    }
    if (rc == SHS_OK)
        rc = shs__clean_leftovers(save_path, NULL, NULL);
    shs_lock_free(lk);
    return rc;
}
