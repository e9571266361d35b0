/*
 * chunk_read.c -- reading the stored bytes of chunks and blobs, and
 * checking them against metadata.json (chunk_read.h): the one checksum
 * path beneath the read engine (shs__fill_box in load.c), the balanced
 * load, the public read API and verify.  Every mismatch is reported by
 * shs__chunk_err, in one format.
 */
#include "checkpoint/chunk_read.h"

#include "checkpoint/loader.h"
#include "common/hash.h"
#include "crypto/crypt.h"
#include "format/layout.h"
#include "format/st_parse.h"
#include "store/io.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int shs__chunk_err(int rc, const char *dir, const shs__meta *m, const shs__mtensor *t,
                   const shs__mchunk *c, const char *part, uint64_t at, uint64_t len,
                   const char *what, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, what);
    vsnprintf(why, sizeof why, what, ap);
    va_end(ap);
    /* c is one of t's chunks (meta.c keeps them in one array) */
    char which[64] = "";
    if (c >= t->c && c < t->c + t->nc)
        snprintf(which, sizeof which, "chunk %zu, ", (size_t)(c - t->c));
    if (*part)
        snprintf(which + strlen(which), sizeof which - strlen(which), "%s, ", part);
    return shs__err(rc, "%s/%s: tensor '%s' (%sbytes %llu..%llu of the file): %s", dir,
                    m->f[c->file].name, t->name, which, (unsigned long long)(c->b0 + at),
                    (unsigned long long)(c->b0 + at + len), why);
}

static int blob_err(const char *dir, const shs__meta *m, const shs__mblob *b, uint64_t stored,
                    uint64_t got)
{
    return shs__err(SHS_ECHECKSUM,
                    "%s/%s: blob '%s' (rank %d, bytes %llu..%llu of the file): checksum "
                    "mismatch (stored 0x%016llx, read 0x%016llx)",
                    dir, m->f[b->file].name, b->name, b->rank, (unsigned long long)b->b0,
                    (unsigned long long)b->b1, (unsigned long long)stored, (unsigned long long)got);
}

/* A data file of an encrypted save (its header says so) is read only
   through the metadata.json of an encrypted checkpoint, which holds its
   salts and tags: never as plain data, whether the folder has no
   metadata.json or one that says the checkpoint is not encrypted (an
   encrypted checkpoint downgraded).  Its tensors are then readable
   through the file handle (shs__file_allow_sealed). */
static int check_sealed_file(const shs__loader *L, uint32_t fi)
{
    const char *cipher = shs_file_metadata_get(L->fh[fi], SHS__FILE_MARK);
    if (!cipher)
        return SHS_OK;
    if (L->m->encrypted) {
        shs__file_allow_sealed(L->fh[fi]);
        return SHS_OK;
    }
    if (L->m->plain)
        return shs__err(SHS_EKEY,
                        "%s/%s: encrypted (%s) and without the metadata.json of its checkpoint: "
                        "it cannot be decrypted",
                        L->dir, L->m->f[fi].name, cipher);
    return shs__err(SHS_ECORRUPT,
                    "%s/%s: its header says it is encrypted (%s), but metadata.json (version %d) "
                    "says the checkpoint is not: metadata.json was replaced or edited (an "
                    "encrypted checkpoint stripped of its encryption?); its bytes are never read "
                    "as plain data",
                    L->dir, L->m->f[fi].name, cipher, L->m->version);
}

int shs__loader_open_file(shs__loader *L, uint32_t fi, shs_file **out)
{
    int rc = SHS_OK;
    if (L->mu)
        pthread_mutex_lock(L->mu);
    if (!L->fh[fi]) {
        char *p = shs__path_join(L->dir, L->m->f[fi].name);
        /* files of a step directory are never reached through a link; a
           plain folder (a Hugging Face snapshot) is links by design */
        shs_open_opts oo = SHS_OPEN_OPTS_INIT;
        oo.flags = L->open_flags | (L->m->plain ? 0u : (unsigned)SHS_OPEN_NO_FOLLOW);
        rc = p ? shs_file_open(&L->fh[fi], p, &oo) : shs__err(SHS_ENOMEM, "out of memory");
        shs__free(p);
        if (rc == SHS_ENOENT)
            rc = shs__err(SHS_ECORRUPT, "%s: missing file '%s' named in %s", L->dir,
                          L->m->f[fi].name, L->m->plain ? "the index" : "metadata.json");
        /* the header names and places every chunk: it is checked before
           any of them is used */
        if (rc == SHS_OK && ((rc = check_sealed_file(L, fi)) < 0 ||
                             (rc = shs__meta_check_file(L->m, L->dir, fi, L->fh[fi])) < 0)) {
            shs_file_free(L->fh[fi]);
            L->fh[fi] = NULL;
        }
    }
    *out = L->fh[fi];
    if (L->mu)
        pthread_mutex_unlock(L->mu);
    return rc;
}

int shs__chunk_locate(shs__loader *L, uint32_t fi, const char *key, uint64_t b0, uint64_t b1,
                      shs_file **out_f, size_t *out_idx)
{
    shs_file *f = NULL;
    int rc = shs__loader_open_file(L, fi, &f);
    if (rc < 0)
        return rc;
    size_t idx;
    if (shs_file_find(&idx, f, key) < 0)
        return shs__err(SHS_ECORRUPT, "%s/%s: no tensor '%s' (named in metadata.json)", L->dir,
                        L->m->f[fi].name, key);
    const shs_tensor_info *ti = shs_file_tensor(f, idx);
    uint64_t at = shs_file_data_start(f) + ti->offset;
    if (at != b0 || at + ti->nbytes != b1)
        return shs__err(
            SHS_ECORRUPT,
            "%s/%s: tensor '%s' is at bytes [%llu, %llu), metadata.json says [%llu, %llu)", L->dir,
            L->m->f[fi].name, key, (unsigned long long)at, (unsigned long long)(at + ti->nbytes),
            (unsigned long long)b0, (unsigned long long)b1);
    *out_f = f;
    *out_idx = idx;
    return SHS_OK;
}

/* The mismatch of bytes [at, +len) of chunk c: block q, or (q < 0) the
   whole chunk. */
static int hash_err(const shs__loader *L, const shs__mtensor *t, const shs__mchunk *c, long long q,
                    uint64_t at, uint64_t len, uint64_t stored, uint64_t got)
{
    char part[32] = "";
    if (q >= 0)
        snprintf(part, sizeof part, "block %lld", q);
    return shs__chunk_err(SHS_ECHECKSUM, L->dir, L->m, t, c, part, at, len,
                          "checksum mismatch (stored 0x%016llx, read 0x%016llx)",
                          (unsigned long long)stored, (unsigned long long)got);
}

/* Block q of chunk c, its bytes at data: SHS_ECHECKSUM unless they match
   its recorded XXH3. */
static int check_block(const shs__loader *L, const shs__mtensor *t, const shs__mchunk *c, size_t q,
                       const void *data)
{
    uint64_t n = c->b1 - c->b0, at = (uint64_t)q * c->block;
    uint64_t len = n - at < c->block ? n - at : c->block;
    uint64_t got = shs__xxh3(data, (size_t)len);
    return got == c->blocks[q] ? SHS_OK
                               : hash_err(L, t, c, (long long)q, at, len, c->blocks[q], got);
}

/* The whole-chunk checksum of c (when it has one) over data[0, n), the
   whole chunk.  A mismatch names the first block that fails when the
   chunk has block checksums (found only then, off the fast path), so a
   damaged byte is reported alike whether it was read whole or in part. */
static int check_whole(const shs__loader *L, const shs__mtensor *t, const shs__mchunk *c,
                       const void *data, uint64_t n)
{
    if (!c->has_hash)
        return SHS_OK;
    uint64_t got = shs__xxh3(data, (size_t)n);
    if (got == c->hash)
        return SHS_OK;
    for (size_t q = 0; q < c->nblocks; q++) {
        int rc = check_block(L, t, c, q, (const char *)data + (uint64_t)q * c->block);
        if (rc < 0)
            return rc;
    }
    return hash_err(L, t, c, -1, 0, n, c->hash, got);
}

/* pread window over a chunk without checksums (plain files) */
#define PLAIN_WINDOW (64u << 10)

typedef struct block_marks {
    uint64_t block;
    uint8_t *mark;
} block_marks;

static int mark_run(void *ctx, uint64_t src_off, uint64_t dst_off, uint64_t len)
{
    block_marks *b = ctx;
    (void)dst_off;
    for (uint64_t q = src_off / b->block; len && q <= (src_off + len - 1) / b->block; q++)
        b->mark[q] = 1;
    return SHS_OK;
}

/* Check the per-block checksums of the blocks of chunk c that the box
   [src_start, +count) touches, in the mapped chunk `src`; *read_bytes
   counts them. */
static int check_blocks(const shs__loader *L, const shs__mtensor *t, const shs__mchunk *c,
                        const char *src, unsigned bits, size_t ndim, const uint64_t *src_start,
                        const uint64_t *count, uint64_t *read_bytes)
{
    block_marks b = { c->block, shs__calloc(c->nblocks + 1, 1) };
    if (!b.mark)
        return shs__err(SHS_ENOMEM, "out of memory");
    shs__box_runs2(bits, ndim, c->shape, src_start, count, (uint64_t[SHS_MAX_DIMS]){ 0 }, count,
                   mark_run, &b);
    uint64_t n = c->b1 - c->b0;
    int rc = SHS_OK;
    for (size_t q = 0; q < c->nblocks && rc == SHS_OK; q++) {
        if (!b.mark[q])
            continue;
        uint64_t at = (uint64_t)q * c->block;
        *read_bytes += n - at < c->block ? n - at : c->block;
        rc = check_block(L, t, c, q, src + at);
    }
    shs__free(b.mark);
    return rc;
}

/* (Hashing block by block while the block is still in the cache measured
   no faster than one pass after the copy, and the one-shot hash has an
   AVX2 build.) */
int shs__chunk_read(const shs__loader *L, const shs__mtensor *t, const shs__mchunk *c, shs_file *f,
                    size_t idx, void *dst, uint64_t n)
{
    /* an encrypted chunk of a mapped file is checked where it lies and
       decrypted straight into dst: one pass less than copy, check,
       decrypt in place */
    const void *map = c->enc ? shs_file_tensor_data(f, idx) : NULL;
    int rc = map ? SHS_OK : shs_file_read_bytes(f, idx, 0, dst, (size_t)n);
    if (rc == SHS_OK)
        rc = check_whole(L, t, c, map ? map : dst, n);
    /* the checksum first: damage is told apart from a wrong key */
    if (rc == SHS_OK && c->enc)
        rc = shs__crypt_open_chunk(L->key, L->m, L->dir, t, c, map ? map : dst, dst, n);
    return rc;
}

/*
 * Copying the runs of one chunk into the destination.  From a mapping the
 * runs are copied in place.  With pread the chunk is seen through a window
 * of one checksum block (or the whole chunk when it is at most one block):
 * runs come in increasing source order, so each window is read once, and
 * checked as it is read.  A chunk larger than a block that has only a
 * whole-chunk checksum (no block checksums) cannot be checked piecewise:
 * every window is then read in order and hashed into a running XXH3, and
 * the result is known only at the end.
 */
typedef struct fill_ctx {
    const shs__loader *L;
    const shs__mchunk *c;
    shs_file *f;
    size_t idx;
    const char *map; /* the chunk's bytes when mapped */
    char *dst;
    shs_dtype sdt, ddt;
    unsigned sbytes, dbytes;  /* element sizes (conversion only) */
    char *win;                /* pread window */
    uint64_t wsize, nwin, wq; /* window size, count, current (UINT64_MAX none) */
    uint64_t next_hash;       /* streaming: next window to hash */
    shs__xxh3_state *hs;      /* streaming whole-chunk hash, or NULL */
    uint64_t *read_bytes;
    /* a version-4 encrypted chunk read in part (fill_from_segments) */
    const shs__mtensor *mt;
    const uint8_t *marks; /* per segment: the box touches it */
    const char *cmap;     /* the chunk's ciphertext when mapped */
} fill_ctx;

static int load_sealed_window(fill_ctx *x, uint64_t q);

static int load_window(fill_ctx *x, uint64_t q)
{
    if (x->marks)
        return load_sealed_window(x, q);
    const shs__mchunk *c = x->c;
    uint64_t n = c->b1 - c->b0, at = q * x->wsize;
    size_t len = (size_t)(n - at < x->wsize ? n - at : x->wsize);
    int rc = shs_file_read_bytes(x->f, x->idx, at, x->win, len);
    if (rc < 0)
        return rc;
    x->wq = q;
    *x->read_bytes += len;
    if (x->hs) {
        shs__xxh3_update(x->hs, x->win, len);
        x->next_hash = q + 1;
        return SHS_OK;
    }
    if (c->nblocks)
        return check_block(x->L, x->mt, c, (size_t)q, x->win);
    return x->nwin == 1 ? check_whole(x->L, x->mt, c, x->win, len) : SHS_OK;
}

static int ensure_window(fill_ctx *x, uint64_t q)
{
    int rc;
    if (q == x->wq)
        return SHS_OK;
    /* streaming hash: the windows the box skips are hashed too */
    for (uint64_t k = x->next_hash; x->hs && k < q; k++)
        if ((rc = load_window(x, k)) < 0)
            return rc;
    return load_window(x, q);
}

static int emit(fill_ctx *x, const char *src, uint64_t dst_off, uint64_t len)
{
    if (x->sdt == x->ddt) {
        memcpy(x->dst + dst_off, src, (size_t)len);
        return SHS_OK;
    }
    return shs_convert(x->dst + dst_off / x->sbytes * x->dbytes, x->ddt, src, x->sdt,
                       (size_t)(len / x->sbytes));
}

static int fill_run(void *ctx, uint64_t src_off, uint64_t dst_off, uint64_t len)
{
    fill_ctx *x = ctx;
    int rc;
    if (x->map)
        return emit(x, x->map + src_off, dst_off, len);
    while (len) {
        uint64_t q = src_off / x->wsize, in = src_off - q * x->wsize;
        uint64_t piece = x->wsize - in < len ? x->wsize - in : len;
        if ((rc = ensure_window(x, q)) < 0 || (rc = emit(x, x->win + in, dst_off, piece)) < 0)
            return rc;
        src_off += piece;
        dst_off += piece;
        len -= piece;
    }
    return SHS_OK;
}

/* Window q of a version-4 encrypted chunk read in part: the segments of
   the window that the box touches are read (or found in the mapping),
   decrypted into x->win and authenticated, on two threads; the others
   are left alone. */
static int load_sealed_window(fill_ctx *x, uint64_t q)
{
    const shs__mchunk *c = x->c;
    const shs__meta *m = x->L->m;
    uint64_t n = c->b1 - c->b0, seg = m->segment, at = q * x->wsize;
    uint64_t len = n - at < x->wsize ? n - at : x->wsize;
    uint64_t first = at / seg, count = (len + seg - 1) / seg;
    int rc = SHS_OK;
    for (uint64_t k = first; k < first + count && rc == SHS_OK; k++) {
        if (!x->marks[k])
            continue;
        uint64_t b = k * seg, e = b + seg < n ? b + seg : n;
        *x->read_bytes += e - b;
        if (!x->cmap)
            rc = shs_file_read_bytes(x->f, x->idx, b, x->win + (b - at), (size_t)(e - b));
    }
    if (rc == SHS_OK)
        rc = shs__crypt_open_segments(x->L->key, m, x->L->dir, x->mt, c, first, count,
                                      x->marks + first, x->cmap ? x->cmap + at : x->win, x->win);
    x->wq = rc == SHS_OK ? q : UINT64_MAX;
    return rc;
}

/* segments of a window: decrypted together, on two threads */
#define SEG_WINDOW 4

/* A version-4 encrypted chunk that is not one run of the box: only the
   segments the box touches are read, decrypted and authenticated (each
   has its own tag), a window of SEG_WINDOW segments at a time, and copied
   out; memory is one window.  Its xxh3, of the whole ciphertext, is not
   checked: the tags cover every byte used. */
static int fill_from_segments(fill_ctx *x, unsigned bits, size_t nd, const uint64_t *src_start,
                              const uint64_t *bshape, const uint64_t *dst_start,
                              const uint64_t *ishape)
{
    const shs__mchunk *c = x->c;
    uint64_t n = c->b1 - c->b0, seg = x->L->m->segment;
    block_marks b = { seg, shs__calloc(c->ntags + 1, 1) };
    x->wsize = SEG_WINDOW * seg;
    x->nwin = (n + x->wsize - 1) / x->wsize;
    x->win = b.mark ? shs__malloc((size_t)(n < x->wsize ? n : x->wsize) + 1) : NULL;
    int rc = x->win ? SHS_OK : shs__err(SHS_ENOMEM, "out of memory reading '%s'", x->mt->name);
    if (rc == SHS_OK)
        rc = shs__box_runs2(bits, nd, c->shape, src_start, ishape, (uint64_t[SHS_MAX_DIMS]){ 0 },
                            ishape, mark_run, &b);
    x->marks = b.mark;
    x->cmap = x->map;
    x->map = NULL;
    if (rc == SHS_OK)
        rc = shs__box_runs2(bits, nd, c->shape, src_start, bshape, dst_start, ishape, fill_run, x);
    shs__free(x->win);
    shs__free(b.mark);
    return rc;
}

/* A version-3 encrypted chunk that is not one run of the box: read whole
   into a buffer, decrypted and authenticated there (a GCM tag covers the
   whole chunk, so a part cannot be checked alone), then copied out. */
static int fill_from_sealed(shs__loader *L, const shs__mtensor *mt, const shs__mchunk *c,
                            shs_file *f, size_t idx, fill_ctx *x, const uint64_t *src_start,
                            const uint64_t *bshape, const uint64_t *dst_start,
                            const uint64_t *ishape)
{
    uint64_t n = c->b1 - c->b0;
    char *buf = shs__malloc((size_t)n + 1);
    if (!buf)
        return shs__err(SHS_ENOMEM, "out of memory decrypting '%s' (%llu bytes)", mt->name,
                        (unsigned long long)n);
    int rc = shs__chunk_read(L, mt, c, f, idx, buf, n);
    if (rc == SHS_OK) {
        *x->read_bytes += n;
        x->map = buf;
        rc = shs__box_runs2(shs_dtype_bits(mt->dtype), mt->ndim, c->shape, src_start, bshape,
                            dst_start, ishape, fill_run, x);
    }
    shs__free(buf);
    return rc;
}

int shs__chunk_fill(shs__loader *L, const shs__mtensor *mt, const shs__mchunk *c, shs_file *f,
                    size_t idx, const uint64_t *boff, const uint64_t *bshape, const uint64_t *ioff,
                    const uint64_t *ishape, shs_dtype dtype, void *dst, uint64_t *read_bytes)
{
    size_t nd = mt->ndim;
    unsigned bits = shs_dtype_bits(mt->dtype);
    uint64_t n = c->b1 - c->b0;
    uint64_t src_start[SHS_MAX_DIMS], dst_start[SHS_MAX_DIMS];
    int whole = 1, rc;
    for (size_t d = 0; d < nd; d++) {
        src_start[d] = ioff[d] - c->off[d];
        dst_start[d] = ioff[d] - boff[d];
        whole &= ishape[d] == c->shape[d];
    }
    if (bits % 8 && nd &&
        ((src_start[nd - 1] * bits) % 8 || (dst_start[nd - 1] * bits) % 8 ||
         (ishape[nd - 1] * bits) % 8 || (c->shape[nd - 1] * bits) % 8))
        return shs__err(SHS_EUNSUPPORTED,
                        "%s: tensor '%s': a saved chunk of %s elements does "
                        "not start and end on byte boundaries",
                        L->dir, mt->name, shs_dtype_name(mt->dtype));
    /* the chunk is one contiguous run of the box: read it straight into
       place and hash it there (the usual load: saved chunk = wanted box) */
    size_t k = 0;
    while (k < nd && ishape[k] == 1)
        k++;
    int contiguous = whole && dtype == mt->dtype;
    for (size_t d = k + 1; d < nd && contiguous; d++)
        contiguous = ishape[d] == bshape[d];
    if (contiguous) {
        uint64_t at = 0;
        for (size_t d = 0; d < nd; d++)
            at = at * bshape[d] + dst_start[d];
        if ((rc = shs__chunk_read(L, mt, c, f, idx, (char *)dst + at * bits / 8, n)) < 0)
            return rc;
        *read_bytes += n;
        return SHS_OK;
    }
    fill_ctx x = { 0 };
    shs__xxh3_state hs;
    x.L = L;
    x.c = c;
    x.f = f;
    x.idx = idx;
    x.map = shs_file_tensor_data(f, idx);
    x.dst = dst;
    x.sdt = mt->dtype;
    x.ddt = dtype;
    x.sbytes = bits / 8;
    x.dbytes = shs_dtype_bits(dtype) / 8;
    x.wq = UINT64_MAX;
    x.read_bytes = read_bytes;
    x.mt = mt;
    if (c->enc && L->m->version >= SHS__META_VERSION_STREAM)
        return fill_from_segments(&x, bits, nd, src_start, bshape, dst_start, ishape);
    if (c->enc)
        return fill_from_sealed(L, mt, c, f, idx, &x, src_start, bshape, dst_start, ishape);
    if (x.map) {
        if (c->nblocks && !whole) {
            /* only the blocks this box touches are read and checked */
            rc = check_blocks(L, mt, c, x.map, bits, nd, src_start, ishape, read_bytes);
        } else if (!c->has_hash) {
            /* nothing to check (a plain file): only the box is touched */
            uint64_t vol = 1;
            for (size_t d = 0; d < nd; d++)
                vol *= ishape[d];
            *read_bytes += vol * bits / 8;
            rc = SHS_OK;
        } else {
            rc = check_whole(L, mt, c, x.map, n);
            *read_bytes += n;
        }
        if (rc < 0)
            return rc;
        return shs__box_runs2(bits, nd, c->shape, src_start, bshape, dst_start, ishape, fill_run,
                              &x);
    }
    x.wsize = c->nblocks ? c->block : n <= SHS__HASH_BLOCK ? (n ? n : 1) : SHS__HASH_BLOCK;
    /* nothing to check (a plain file): small windows, so that little
       more than the box is read */
    if (!c->has_hash && !whole && x.wsize > PLAIN_WINDOW)
        x.wsize = PLAIN_WINDOW;
    x.nwin = (n + x.wsize - 1) / x.wsize;
    if (!c->nblocks && c->has_hash && x.nwin > 1) {
        x.hs = &hs;
        shs__xxh3_reset(&hs);
    }
    if (!(x.win = shs__malloc((size_t)x.wsize)))
        return shs__err(SHS_ENOMEM, "out of memory reading '%s'", mt->name);
    rc = shs__box_runs2(bits, nd, c->shape, src_start, bshape, dst_start, ishape, fill_run, &x);
    for (uint64_t q = x.next_hash; rc == SHS_OK && x.hs && q < x.nwin; q++)
        rc = load_window(&x, q);
    uint64_t got = rc == SHS_OK && x.hs ? shs__xxh3_digest(&hs) : c->hash;
    if (got != c->hash)
        rc = hash_err(L, mt, c, -1, 0, n, c->hash, got);
    shs__free(x.win);
    return rc;
}

int shs__chunk_open(shs__loader *L, const shs__mtensor *t, const shs__mchunk *c, shs_file **out_f,
                    size_t *out_idx)
{
    int rc = shs__chunk_locate(L, c->file, c->key, c->b0, c->b1, out_f, out_idx);
    if (rc < 0)
        return rc;
    const shs_tensor_info *ti = shs_file_tensor(*out_f, *out_idx);
    if (ti->dtype != t->dtype || ti->ndim != t->ndim ||
        (t->ndim && memcmp(ti->shape, c->shape, t->ndim * sizeof(uint64_t)) != 0))
        return shs__err(SHS_ECORRUPT,
                        "%s/%s: tensor '%s' has another dtype or shape than "
                        "metadata.json says",
                        L->dir, L->m->f[c->file].name, c->key);
    return SHS_OK;
}

int shs__chunk_verify(const shs__loader *L, const shs__mtensor *t, const shs__mchunk *c,
                      shs_file *f, size_t idx, const void **bytes, void **scratch)
{
    uint64_t n = c->b1 - c->b0;
    const void *p = shs_file_tensor_data(f, idx);
    int rc = SHS_OK;
    if (!p) {
        void *nb = shs__realloc(*scratch, (size_t)n + 1);
        if (!nb)
            return shs__err(SHS_ENOMEM, "out of memory verifying '%s' (%llu bytes)", t->name,
                            (unsigned long long)n);
        *scratch = nb;
        if ((rc = shs_file_read_bytes(f, idx, 0, nb, (size_t)n)) < 0)
            return rc;
        p = nb;
    }
    *bytes = p;
    if (c->nblocks) {
        /* the whole and every block in one pass, as the save hashed them */
        uint64_t *got = shs__malloc(c->nblocks * sizeof *got);
        if (!got)
            return shs__err(SHS_ENOMEM, "out of memory verifying '%s'", t->name);
        uint64_t whole = shs__xxh3_blocks(p, n, c->block, got);
        for (size_t q = 0; q < c->nblocks && rc == SHS_OK; q++) {
            uint64_t at = (uint64_t)q * c->block, len = n - at < c->block ? n - at : c->block;
            if (got[q] != c->blocks[q])
                rc = hash_err(L, t, c, (long long)q, at, len, c->blocks[q], got[q]);
        }
        shs__free(got);
        if (rc == SHS_OK && c->has_hash && whole != c->hash)
            rc = hash_err(L, t, c, -1, 0, n, c->hash, whole);
    } else {
        rc = check_whole(L, t, c, p, n);
    }
    /* the checksums first: damage is told apart from a wrong key.  An
       encrypted chunk without a key is left to the caller (verify says at
       the end that a key is needed). */
    if (rc == SHS_OK && c->enc && L->key)
        rc = shs__crypt_auth_chunk(L->key, L->m, L->dir, t, c, p, n);
    return rc;
}

int shs__blob_read(shs__loader *L, const shs__mblob *b, void *dst, size_t *out_idx)
{
    shs_file *f = NULL;
    size_t idx = 0;
    int rc = shs__chunk_locate(L, b->file, b->key, b->b0, b->b1, &f, &idx);
    if (rc < 0)
        return rc;
    if (out_idx)
        *out_idx = idx;
    size_t n = (size_t)(b->b1 - b->b0);
    if ((rc = shs_file_read_bytes(f, idx, 0, dst, n)) < 0)
        return rc;
    uint64_t got = shs__xxh3(dst, n);
    return got == b->hash ? SHS_OK : blob_err(L->dir, L->m, b, b->hash, got);
}
