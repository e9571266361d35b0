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
#include "common/hash.h"
#include "store/io.h"
#include "format/layout.h"
#include "dist/plan.h"
#include "format/st_parse.h"


#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

int shs__check_hash(const shs__loader *L, const shs__mchunk *c, const char *tname, const void *data,
                    uint64_t n)
{
    if (!c->has_hash || shs__xxh3(data, (size_t)n) == c->hash)
        return SHS_OK;
    return shs__err(SHS_ECHECKSUM, "%s/%s: tensor '%s': data does not match its xxh3 checksum",
                    L->dir, L->m->f[c->file].name, tname);
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
static int check_blocks(const shs__loader *L, const shs__mchunk *c, const char *tname,
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
        uint64_t len = n - at < c->block ? n - at : c->block;
        *read_bytes += len;
        if (shs__xxh3(src + at, (size_t)len) != c->blocks[q])
            rc = shs__err(SHS_ECHECKSUM,
                          "%s/%s: tensor '%s': block %zu does not match its "
                          "xxh3 checksum",
                          L->dir, L->m->f[c->file].name, tname, q);
    }
    shs__free(b.mark);
    return rc;
}

/* Read a whole chunk into dst and check its checksum.  (Hashing block by
   block while the block is still in the cache measured no faster than one
   pass after the copy, and the one-shot hash has an AVX2 build.) */
int shs__read_hashed(const shs__loader *L, const shs__mchunk *c, const char *tname, shs_file *f,
                     size_t idx, void *dst, uint64_t n)
{
    /* an encrypted chunk of a mapped file is checked where it lies and
       decrypted straight into dst: one pass less than copy, check,
       decrypt in place */
    const void *map = c->enc ? shs_file_tensor_data(f, idx) : NULL;
    int rc = map ? SHS_OK : shs_file_read_bytes(f, idx, 0, dst, (size_t)n);
    if (rc == SHS_OK)
        rc = shs__check_hash(L, c, tname, map ? map : dst, n);
    /* the checksum first: damage is told apart from a wrong key */
    if (rc == SHS_OK && c->enc) {
        const shs__mtensor *mt = shs__meta_find(L->m, tname);
        rc = mt ? shs__crypt_open_chunk(L->key, L->m, L->dir, mt, c, map ? map : dst, dst, n)
                : shs__err(SHS_ECORRUPT, "%s: no tensor '%s'", L->dir, tname);
    }
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
    const char *tname;
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
    if (c->nblocks) {
        if (shs__xxh3(x->win, len) != c->blocks[q])
            return shs__err(SHS_ECHECKSUM,
                            "%s/%s: tensor '%s': block %llu does not match its "
                            "xxh3 checksum",
                            x->L->dir, x->L->m->f[c->file].name, x->tname, (unsigned long long)q);
        return SHS_OK;
    }
    return x->nwin == 1 ? shs__check_hash(x->L, c, x->tname, x->win, len) : SHS_OK;
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
    int rc = x->win ? SHS_OK : shs__err(SHS_ENOMEM, "out of memory reading '%s'", x->tname);
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
    int rc = shs__read_hashed(L, c, mt->name, f, idx, buf, n);
    if (rc == SHS_OK) {
        *x->read_bytes += n;
        x->map = buf;
        rc = shs__box_runs2(shs_dtype_bits(mt->dtype), mt->ndim, c->shape, src_start, bshape,
                            dst_start, ishape, fill_run, x);
    }
    shs__free(buf);
    return rc;
}

/* The part [ioff, +ishape) of chunk c (located in f/idx) into the box
   [boff, +bshape) held in dst. */
static int fill_from_chunk(shs__loader *L, const shs__mtensor *mt, const shs__mchunk *c,
                           shs_file *f, size_t idx, const uint64_t *boff, const uint64_t *bshape,
                           const uint64_t *ioff, const uint64_t *ishape, shs_dtype dtype, void *dst,
                           uint64_t *read_bytes)
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
        if ((rc = shs__read_hashed(L, c, mt->name, f, idx, (char *)dst + at * bits / 8, n)) < 0)
            return rc;
        *read_bytes += n;
        return SHS_OK;
    }
    fill_ctx x = { 0 };
    shs__xxh3_state hs;
    x.L = L;
    x.c = c;
    x.tname = mt->name;
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
            rc = check_blocks(L, c, mt->name, x.map, bits, nd, src_start, ishape, read_bytes);
        } else if (!c->has_hash) {
            /* nothing to check (a plain file): only the box is touched */
            uint64_t vol = 1;
            for (size_t d = 0; d < nd; d++)
                vol *= ishape[d];
            *read_bytes += vol * bits / 8;
            rc = SHS_OK;
        } else {
            rc = shs__check_hash(L, c, mt->name, x.map, n);
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
    if (rc == SHS_OK && x.hs && shs__xxh3_digest(&hs) != c->hash)
        rc = shs__err(SHS_ECHECKSUM, "%s/%s: tensor '%s': data does not match its xxh3 checksum",
                      L->dir, L->m->f[c->file].name, mt->name);
    shs__free(x.win);
    return rc;
}

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
        if ((rc = shs__chunk_locate(L, c->file, c->key, c->b0, c->b1, &f, &idx)) < 0)
            return rc;
        const shs_tensor_info *ti = shs_file_tensor(f, idx);
        if (ti->dtype != mt->dtype || ti->ndim != nd ||
            (nd && memcmp(ti->shape, c->shape, nd * sizeof(uint64_t)) != 0))
            return shs__err(SHS_ECORRUPT,
                            "%s/%s: tensor '%s' has another dtype or shape than "
                            "metadata.json says",
                            L->dir, L->m->f[c->file].name, c->key);
        if ((rc = fill_from_chunk(L, mt, c, f, idx, boff, bshape, ioff, ishape, dtype, dst,
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
        shs_file *f;
        size_t idx;
        int rc = shs__chunk_locate(L, b->file, b->key, b->b0, b->b1, &f, &idx);
        if (rc < 0)
            return rc;
        size_t len = (size_t)(b->b1 - b->b0);
        void *buf = shs__malloc(len ? len : 1);
        if (!buf)
            return shs__err(SHS_ENOMEM, "out of memory");
        rc = shs_file_read(f, idx, buf, len);
        if (rc == SHS_OK && shs__xxh3(buf, len) != b->hash)
            rc = shs__err(SHS_ECHECKSUM, "%s/%s: blob '%s' does not match its checksum", L->dir,
                          m->f[b->file].name, b->name);
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
