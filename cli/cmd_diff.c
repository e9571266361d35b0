/*
 * cmd_diff.c -- `shardsafe diff A B [--atol X] [--rtol X] [--kind K]`:
 * compare two sets of tensors on their global values.  Exit status as
 * cmp's: 0 same, 1 different, 2 trouble.
 *
 * A and B are each a safetensors file, a plain directory of safetensors
 * files (tensors whole), a checkpoint step directory, or a save path (the
 * step shs_checkpoint_resolve picks).  Directories and step directories go
 * through the library's read-only view (shs_checkpoint_open): each tensor
 * has a global dtype and shape and a list of chunks (one per saved shard,
 * one whole-tensor chunk in a plain directory).  A tensor is assembled
 * from its chunks into one buffer of its global size, reading each chunk
 * in blocks of whole outer slices (pread, no mmap) and checking the chunk's
 * xxh3 checksum on the way, so checkpoints saved with different chunkings
 * or world sizes compare equal when their global values are.  Only one
 * tensor of each side is in memory at a time (plus O(block) buffers).
 */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <xxhash.h>

static const char k_help[] =
    "Usage: shardsafe diff A B [--atol X] [--rtol X] [--kind model|opt|all]\n"
    "\n"
    "Compare two sets of tensors tensor by tensor, on their global values.\n"
    "A and B are each a .safetensors file, a directory of safetensors files\n"
    "(tensors whole), a checkpoint step directory (holding metadata.json) or a\n"
    "save path (its tracker's step, else the newest committed step).  Checkpoints\n"
    "saved with different chunkings or world sizes are compared on the\n"
    "reassembled tensors; chunk checksums are checked while reading.\n"
    "\n"
    "Prints one line per difference (sorted by tensor name):\n"
    "  only in A: NAME (DTYPE [SHAPE])          only in B: NAME (...)\n"
    "  dtype differs: NAME: DTYPE [SHAPE] vs DTYPE [SHAPE]\n"
    "  shape differs: NAME: DTYPE [SHAPE] vs DTYPE [SHAPE]\n"
    "  values differ: NAME: D of N elements differ (max abs diff X)\n"
    "then 'N tensors compared, D differ, only in A: x, only in B: y'.\n"
    "\n"
    "Values are compared bitwise by default.  With --atol or --rtol, elements of\n"
    "floating-point tensors are equal when |a - b| <= atol + rtol * |b| (both\n"
    "converted to F64; NaN equals NaN; infinities only equal themselves);\n"
    "integer and bool tensors are always compared exactly.\n"
    "\n"
    "Options:\n"
    "  --atol X     absolute tolerance (>= 0; default 0)\n"
    "  --rtol X     relative tolerance (>= 0; default 0)\n"
    "  --kind K     compare only model tensors, only optimizer tensors (opt), or\n"
    "               all (default)\n"
    "  -q, --quiet  print nothing; the exit status tells\n"
    "  -h, --help, --version, -v, --verbose, --json\n"
    "               as for every command (see 'shardsafe --help')\n"
    "\n"
    "Exit status, as cmp's: 0 identical (within tolerance), 1 they differ (a\n"
    "tensor on one side only, another dtype, shape or values), 2 trouble: usage\n"
    "error, an input that cannot be read or is invalid, I/O error.\n";

/* ------------------------------------------------------------------ */
/* Sources: a file, or a checkpoint view                              */
/* ------------------------------------------------------------------ */

typedef struct tref {
    const char *name;
    size_t name_len;
    shs_kind kind;
    shs_dtype dtype;
    size_t ndim;
    const uint64_t *shape;
    size_t index;          /* in the file or the view */
} tref;

typedef struct source {
    const char *label;     /* "A" / "B" */
    const char *arg;       /* the command-line path */
    char *dir;             /* the directory read (resolved step dir), or NULL */
    const char *type;      /* "file", "directory", "checkpoint" */
    shs_file *file;        /* type file */
    shs_checkpoint *ck;    /* directory / checkpoint */
    tref *t;               /* sorted by name */
    size_t nt;
    /* the chunk file open last (checkpoint reads) */
    shs_file *cached;
    size_t cached_index;
} source;

static int kind_of_file_name(const char *path)
{
    const char *base = strrchr(path, '/');
    return strstr(base ? base + 1 : path, "-opt-") ? SHS_KIND_OPTIMIZER : SHS_KIND_MODEL;
}

static int cmp_name(const char *a, size_t al, const char *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);
    return c ? c : (al < bl ? -1 : al > bl);
}

static int cmp_tref(const void *x, const void *y)
{
    const tref *a = x, *b = y;
    return cmp_name(a->name, a->name_len, b->name, b->name_len);
}

static void source_release(source *s)
{
    shs_file_close(s->file);
    shs_file_close(s->cached);
    shs_checkpoint_close(s->ck);
    free(s->dir);
    free(s->t);
    memset(s, 0, sizeof *s);
}

/* The library's message, copied, or `fallback`. */
static char *last_error_or(const char *fallback)
{
    const char *m = shs_last_error();
    return cli_fmt("%s", m && *m ? m : fallback);
}

/* Open `arg` as a source.  On failure the reason is in *why. */
static int source_open(source *s, const char *label, const char *arg, char **why)
{
    memset(s, 0, sizeof *s);
    s->label = label;
    s->arg = arg;
    struct stat st;
    if (stat(arg, &st) == 0 && S_ISDIR(st.st_mode)) {
        const char *dir = arg;
        char resolved[4096];
        if (cli_is_step_dir(arg)) {
            s->type = "checkpoint";
        } else if (cli_is_save_path(arg)) {
            if (shs_checkpoint_resolve(resolved, sizeof resolved, arg, -1) < 0) {
                *why = last_error_or("cannot resolve the save path");
                return CLI_FAIL;
            }
            dir = resolved;
            s->type = "checkpoint";
        } else {
            s->type = "directory";
        }
        if (!(s->dir = cli_fmt("%s", dir))) {
            *why = cli_fmt("out of memory");
            return CLI_FAIL;
        }
        if (shs_checkpoint_open(&s->ck, s->dir) < 0) {
            *why = last_error_or("cannot open the checkpoint");
            return CLI_FAIL;
        }
        if (strcmp(s->type, "checkpoint") == 0 && shs_checkpoint_is_plain(s->ck))
            s->type = "directory";
        s->nt = shs_checkpoint_tensor_count(s->ck);
        s->t = calloc(s->nt + 1, sizeof *s->t);
        if (!s->t) {
            *why = cli_fmt("out of memory");
            return CLI_FAIL;
        }
        for (size_t i = 0; i < s->nt; i++) {
            const shs_ckpt_tensor_info *ti = shs_checkpoint_tensor(s->ck, i);
            s->t[i] = (tref){ ti->name, strlen(ti->name), ti->kind, ti->dtype,
                              ti->ndim, ti->shape, i };
        }
    } else {
        s->type = "file";
        if (cli_open_file(&s->file, arg, why) < 0) {
            if (!*why)
                *why = last_error_or("cannot open the file");
            return CLI_FAIL;
        }
        s->nt = shs_file_tensor_count(s->file);
        s->t = calloc(s->nt + 1, sizeof *s->t);
        if (!s->t) {
            *why = cli_fmt("out of memory");
            return CLI_FAIL;
        }
        shs_kind k = (shs_kind)kind_of_file_name(arg);
        for (size_t i = 0; i < s->nt; i++) {
            const shs_tensor_info *ti = shs_file_tensor(s->file, i);
            s->t[i] = (tref){ ti->name, ti->name_len, k, ti->dtype, ti->ndim, ti->shape, i };
        }
    }
    if (s->nt > 1)
        qsort(s->t, s->nt, sizeof *s->t, cmp_tref);
    for (size_t i = 1; i < s->nt; i++)
        if (cmp_tref(&s->t[i - 1], &s->t[i]) == 0) {
            char *n = cli_escape(s->t[i].name, s->t[i].name_len);
            *why = cli_fmt("tensor '%s' appears twice", n ? n : "?");
            free(n);
            return CLI_FAIL;
        }
    return CLI_OK;
}

static uint64_t numel_of(const tref *t)
{
    uint64_t n = 1;
    for (size_t d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

/* ------------------------------------------------------------------ */
/* Reading one tensor whole                                           */
/* ------------------------------------------------------------------ */

typedef struct reader {
    unsigned char *tmp;    /* CLI_CHUNK_BYTES, grown to one outer slice */
    size_t tmp_cap;
    XXH3_state_t *hs;
} reader;

static int grow_tmp(reader *r, size_t n)
{
    if (n <= r->tmp_cap)
        return 0;
    unsigned char *p = realloc(r->tmp, n);
    if (!p)
        return -1;
    r->tmp = p;
    r->tmp_cap = n;
    return 0;
}

static int chunk_file(source *s, size_t file, shs_file **out, char **why)
{
    if (s->cached && s->cached_index == file) {
        *out = s->cached;
        return CLI_OK;
    }
    shs_file_close(s->cached);
    s->cached = NULL;
    const char *fname = shs_checkpoint_file_name(s->ck, file);
    char *p = fname ? cli_fmt("%s/%s", s->dir, fname) : NULL;
    if (!p) {
        *why = cli_fmt("bad file index %zu", file);
        return CLI_FAIL;
    }
    int rc = cli_open_file(&s->cached, p, why);
    free(p);
    if (rc < 0) {
        if (!*why)
            *why = last_error_or("cannot open a checkpoint file");
        return CLI_FAIL;
    }
    s->cached_index = file;
    *out = s->cached;
    return CLI_OK;
}

/* Whether boxes (o1, s1) and (o2, s2) share an element. */
static int boxes_overlap(size_t nd, const uint64_t *o1, const uint64_t *s1, const uint64_t *o2,
                         const uint64_t *s2)
{
    for (size_t d = 0; d < nd; d++)
        if (o1[d] >= o2[d] + s2[d] || o2[d] >= o1[d] + s1[d])
            return 0;
    return 1;
}

/* Copy rows [r0, r0 + nr) along dimension 0 of a chunk (dense in `src`)
   into the global tensor `dst`.  Byte-aligned rows are checked by the
   caller. */
static void scatter(unsigned char *dst, const tref *t, const shs_chunk_info *c, uint64_t r0,
                    uint64_t nr, const unsigned char *src, unsigned bits)
{
    size_t nd = t->ndim;
    if (nd == 1) {
        memcpy(dst + (c->offset[0] + r0) * bits / 8, src, (size_t)(nr * bits / 8));
        return;
    }
    uint64_t row_bytes = c->shape[nd - 1] * bits / 8;
    uint64_t idx[SHS_MAX_DIMS] = { 0 };   /* over dims 0..nd-2 of the block */
    idx[0] = r0;
    for (;;) {
        uint64_t lin = 0;
        for (size_t d = 0; d + 1 < nd; d++)
            lin = lin * t->shape[d] + c->offset[d] + idx[d];
        lin = lin * t->shape[nd - 1] + c->offset[nd - 1];
        memcpy(dst + lin * bits / 8, src, (size_t)row_bytes);
        src += row_bytes;
        size_t d = nd - 1;
        while (d-- > 0) {
            uint64_t lo = d == 0 ? r0 : 0, hi = d == 0 ? r0 + nr : c->shape[d];
            if (++idx[d] < hi)
                break;
            idx[d] = lo;
            if (d == 0)
                return;
        }
    }
}

/* Read tensor `t` of a checkpoint view into dst (its global size). */
static int read_ckpt(source *s, reader *r, const tref *t, unsigned char *dst, uint64_t nbytes,
                     char **why)
{
    const shs_ckpt_tensor_info *ti = shs_checkpoint_tensor(s->ck, t->index);
    uint64_t numel = numel_of(t), covered = 0;
    unsigned bits = shs_dtype_bits(t->dtype);
    size_t nd = t->ndim;
    char *tn = cli_fmt("%s", t->name);
    if (!tn) {
        *why = cli_fmt("out of memory");
        return CLI_FAIL;
    }
#define BAD(...)                      \
    do {                              \
        *why = cli_fmt(__VA_ARGS__);  \
        free(tn);                     \
        return CLI_FAIL;              \
    } while (0)
    for (size_t k = 0; k < ti->n_chunks; k++) {
        shs_chunk_info c = SHS_CHUNK_INFO_INIT;
        if (shs_checkpoint_chunk(&c, s->ck, t->index, k) < 0)
            BAD("%s", shs_last_error());
        /* replicas saved by several ranks: the first one is used */
        int dup = 0;
        for (size_t j = 0; j < k && !dup; j++) {
            shs_chunk_info o = SHS_CHUNK_INFO_INIT;
            if (shs_checkpoint_chunk(&o, s->ck, t->index, j) < 0)
                BAD("%s", shs_last_error());
            int same = 1;
            for (size_t d = 0; d < nd && same; d++)
                same = o.offset[d] == c.offset[d] && o.shape[d] == c.shape[d];
            if (same)
                dup = 1;
            else if (nd && boxes_overlap(nd, o.offset, o.shape, c.offset, c.shape))
                BAD("%s: tensor '%s': chunks %zu and %zu overlap", s->dir, tn, j, k);
        }
        if (dup)
            continue;
        uint64_t vol = 1;
        for (size_t d = 0; d < nd; d++)
            vol *= c.shape[d];
        shs_file *f;
        if (chunk_file(s, c.file, &f, why) != CLI_OK) {
            free(tn);
            return CLI_FAIL;
        }
        size_t idx;
        const char *fname = shs_checkpoint_file_name(s->ck, c.file);
        if (shs_file_find(&idx, f, c.key) < 0)
            BAD("%s/%s: no tensor '%s' (chunk of '%s' named in metadata.json)", s->dir, fname,
                c.key, tn);
        const shs_tensor_info *fi = shs_file_tensor(f, idx);
        int match = fi->dtype == t->dtype && fi->ndim == nd &&
                    shs_file_data_start(f) + fi->offset == c.byte_begin &&
                    fi->nbytes == c.byte_end - c.byte_begin;
        for (size_t d = 0; d < nd && match; d++)
            match = fi->shape[d] == c.shape[d];
        if (!match)
            BAD("%s/%s: tensor '%s' has another dtype, shape or position than the "
                "checkpoint's metadata says",
                s->dir, fname, c.key);
        if (c.has_xxh3)
            XXH3_64bits_reset(r->hs);
        int whole = vol == numel;
        if (whole) {
            for (uint64_t off = 0; off < fi->nbytes; off += CLI_CHUNK_BYTES) {
                size_t len = (size_t)(fi->nbytes - off < CLI_CHUNK_BYTES ? fi->nbytes - off
                                                                         : CLI_CHUNK_BYTES);
                if (shs_file_read_bytes(f, idx, off, dst + off, len) < 0)
                    BAD("%s", shs_last_error());
                if (c.has_xxh3)
                    XXH3_64bits_update(r->hs, dst + off, len);
            }
        } else if (vol > 0) {
            /* sub-byte elements: every row must start and end on a byte */
            if (bits % 8 && ((c.shape[nd - 1] * bits) % 8 || (c.offset[nd - 1] * bits) % 8 ||
                             (t->shape[nd - 1] * bits) % 8))
                BAD("%s: tensor '%s': chunk %zu of a %s tensor does not start and end on "
                    "byte boundaries (not supported)",
                    s->dir, tn, k, shs_dtype_name(t->dtype));
            /* blocks of whole outer rows (dimension 0), about CLI_CHUNK_BYTES each;
               with sub-byte elements a 1-D block is a multiple of 8 elements */
            uint64_t row_bits = fi->nbytes * 8 / c.shape[0];
            uint64_t per = (uint64_t)CLI_CHUNK_BYTES * 8 / row_bits;
            if (per == 0)
                per = 1;
            if (row_bits % 8)
                per -= per % 8;
            if (per > c.shape[0])
                per = c.shape[0];
            if (grow_tmp(r, (size_t)((per * row_bits + 7) / 8)) < 0)
                BAD("out of memory reading tensor '%s'", tn);
            for (uint64_t r0 = 0; r0 < c.shape[0]; r0 += per) {
                uint64_t nr = c.shape[0] - r0 < per ? c.shape[0] - r0 : per;
                size_t len = (size_t)(nr * row_bits / 8);
                if (shs_file_read_bytes(f, idx, r0 * row_bits / 8, r->tmp, len) < 0)
                    BAD("%s", shs_last_error());
                if (c.has_xxh3)
                    XXH3_64bits_update(r->hs, r->tmp, len);
                scatter(dst, t, &c, r0, nr, r->tmp, bits);
            }
        }
        if (c.has_xxh3 && XXH3_64bits_digest(r->hs) != c.xxh3)
            BAD("%s/%s: tensor '%s' (chunk of '%s'): data does not match its xxh3 checksum",
                s->dir, fname, c.key, tn);
        covered += vol;
    }
    if (covered != numel)
        BAD("%s: tensor '%s': the saved chunks cover %llu of its %llu elements", s->dir, tn,
            (unsigned long long)covered, (unsigned long long)numel);
    (void)nbytes;
#undef BAD
    free(tn);
    return CLI_OK;
}

/* Read tensor `t` of `s` into a new buffer (*out, *nbytes). */
static int read_tensor(source *s, reader *r, const tref *t, unsigned char **out,
                       uint64_t *nbytes, char **why)
{
    *out = NULL;
    if (shs_tensor_nbytes(nbytes, t->dtype, t->ndim, t->shape) < 0 || *nbytes > SIZE_MAX / 2) {
        *why = cli_fmt("tensor too large");
        return CLI_FAIL;
    }
    unsigned char *buf = malloc(*nbytes ? (size_t)*nbytes : 1);
    if (!buf) {
        char h[32];
        *why = cli_fmt("out of memory: tensor needs %s", cli_human_bytes(h, sizeof h, *nbytes));
        return CLI_FAIL;
    }
    int rc = CLI_OK;
    if (s->file) {
        for (uint64_t off = 0; off < *nbytes && rc == CLI_OK; off += CLI_CHUNK_BYTES) {
            size_t len = (size_t)(*nbytes - off < CLI_CHUNK_BYTES ? *nbytes - off
                                                                  : CLI_CHUNK_BYTES);
            if (shs_file_read_bytes(s->file, t->index, off, buf + off, len) < 0) {
                *why = last_error_or("read failed");
                rc = CLI_FAIL;
            }
        }
    } else {
        rc = read_ckpt(s, r, t, buf, *nbytes, why);
    }
    if (rc != CLI_OK) {
        free(buf);
        return rc;
    }
    *out = buf;
    return CLI_OK;
}

/* ------------------------------------------------------------------ */
/* Comparing values                                                   */
/* ------------------------------------------------------------------ */

typedef struct tol {
    int on;                /* --atol or --rtol given */
    double atol, rtol;
} tol;

typedef struct vdiff {
    uint64_t ndiff;
    double max;            /* max |a - b| over the elements (non-NaN pairs) */
    int nan;               /* a NaN facing a number: max is NaN */
    int unknown;           /* no numeric difference (sub-byte dtypes) */
} vdiff;

static int is_float(shs_dtype t)
{
    switch (t) {
    case SHS_F64: case SHS_F32: case SHS_F16: case SHS_BF16:
    case SHS_F8_E4M3: case SHS_F8_E5M2: case SHS_F8_E4M3FNUZ:
    case SHS_F8_E5M2FNUZ: case SHS_F8_E8M0:
        return 1;
    default:
        return 0;
    }
}

/* One pair of float values; `bits_equal` tells whether their encodings
   are identical. */
static int float_pair(vdiff *v, const tol *tl, double x, double y, int bits_equal)
{
    double d;
    if (isnan(x) || isnan(y)) {
        if (isnan(x) && isnan(y))
            d = 0;
        else {
            v->nan = 1;
            d = NAN;
        }
    } else if (x == y) {
        d = 0;
    } else {
        d = fabs(x - y);
    }
    if (!isnan(d) && d > v->max)
        v->max = d;
    if (!tl->on)
        return bits_equal;
    if (isnan(x) || isnan(y))
        return isnan(x) && isnan(y);
    if (x == y)
        return 1;
    if (isinf(x) || isinf(y))
        return 0;
    return d <= tl->atol + tl->rtol * fabs(y);
}

#define BLOCK 4096

static int cmp_floats(vdiff *v, const tol *tl, shs_dtype dt, const unsigned char *a,
                      const unsigned char *b, uint64_t n)
{
    static double xa[BLOCK], xb[BLOCK];
    size_t es = shs_dtype_bits(dt) / 8;
    for (uint64_t at = 0; at < n; at += BLOCK) {
        size_t m = (size_t)(n - at < BLOCK ? n - at : BLOCK);
        const unsigned char *pa = a + at * es, *pb = b + at * es;
        if (shs_convert(xa, SHS_F64, pa, dt, m) < 0 || shs_convert(xb, SHS_F64, pb, dt, m) < 0)
            return -1;
        for (size_t i = 0; i < m; i++)
            if (!float_pair(v, tl, xa[i], xb[i], memcmp(pa + i * es, pb + i * es, es) == 0))
                v->ndiff++;
    }
    return 0;
}

/* C64: (real, imaginary) F32 pairs, each part compared as a float. */
static void cmp_c64(vdiff *v, const tol *tl, const unsigned char *a, const unsigned char *b,
                    uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        int eq = 1;
        for (int part = 0; part < 2; part++) {
            float x, y;
            memcpy(&x, a + 8 * i + 4 * part, 4);
            memcpy(&y, b + 8 * i + 4 * part, 4);
            eq &= float_pair(v, tl, x, y, memcmp(&x, &y, 4) == 0);
        }
        v->ndiff += !eq;
    }
}

static int is_signed(shs_dtype t)
{
    return t == SHS_I8 || t == SHS_I16 || t == SHS_I32 || t == SHS_I64;
}

static uint64_t load_u(const unsigned char *p, size_t es)
{
    uint64_t v = 0;
    for (size_t k = 0; k < es; k++)
        v |= (uint64_t)p[k] << (8 * k);   /* safetensors is little-endian */
    return v;
}

static void cmp_ints(vdiff *v, shs_dtype dt, const unsigned char *a, const unsigned char *b,
                     uint64_t n)
{
    size_t es = shs_dtype_bits(dt) / 8;
    int sg = is_signed(dt);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t x = load_u(a + i * es, es), y = load_u(b + i * es, es);
        if (x == y)
            continue;
        v->ndiff++;
        double d;
        if (sg) {
            /* sign-extend, then the exact magnitude of the difference */
            unsigned sh = 64 - 8 * (unsigned)es;
            int64_t sx = (int64_t)(x << sh) >> sh, sy = (int64_t)(y << sh) >> sh;
            d = sx > sy ? (double)((uint64_t)sx - (uint64_t)sy)
                        : (double)((uint64_t)sy - (uint64_t)sx);
        } else {
            d = x > y ? (double)(x - y) : (double)(y - x);
        }
        if (d > v->max)
            v->max = d;
    }
}

/* F4 / F6_*: elements packed in bits; compared by their bits only. */
static void cmp_subbyte(vdiff *v, unsigned bits, const unsigned char *a, const unsigned char *b,
                        uint64_t n)
{
    v->unknown = 1;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t bit = i * bits, x = 0, y = 0;
        for (unsigned k = 0; k < bits; k++, bit++) {
            x |= (uint64_t)((a[bit / 8] >> (bit % 8)) & 1) << k;
            y |= (uint64_t)((b[bit / 8] >> (bit % 8)) & 1) << k;
        }
        v->ndiff += x != y;
    }
}

static int compare_values(vdiff *v, const tol *tl, shs_dtype dt, const unsigned char *a,
                          const unsigned char *b, uint64_t numel)
{
    memset(v, 0, sizeof *v);
    unsigned bits = shs_dtype_bits(dt);
    if (is_float(dt))
        return cmp_floats(v, tl, dt, a, b, numel);
    if (dt == SHS_C64)
        cmp_c64(v, tl, a, b, numel);
    else if (bits % 8)
        cmp_subbyte(v, bits, a, b, numel);
    else
        cmp_ints(v, dt, a, b, numel);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Output                                                             */
/* ------------------------------------------------------------------ */

typedef struct dctx {
    int json, quiet;
    json_t *list;          /* --json: the differences */
    int oom;
    uint64_t compared, differ, only_a, only_b;
} dctx;

static void put_name(const tref *t)
{
    cli_put_escaped(stdout, t->name, t->name_len);
}

static void put_desc(const tref *t)
{
    printf("%s [", shs_dtype_name(t->dtype));
    for (size_t d = 0; d < t->ndim; d++)
        printf(d ? ", %llu" : "%llu", (unsigned long long)t->shape[d]);
    putchar(']');
}

#define jstr cli_jstr

static json_t *shape_json(const tref *t)
{
    json_t *a = json_array();
    for (size_t d = 0; a && d < t->ndim; d++)
        if (json_array_append_new(a, json_integer((json_int_t)t->shape[d])) < 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *num_json(double x)
{
    if (isnan(x))
        return json_string("nan");
    if (isinf(x))
        return json_string("inf");
    return json_real(x);
}

static void set(dctx *c, json_t *o, const char *k, json_t *v)
{
    if (!v || json_object_set_new(o, k, v) < 0)
        c->oom = 1;
}

/* One difference.  `status`: only_in_a, only_in_b, dtype, shape, values. */
static void report(dctx *c, const char *status, const tref *a, const tref *b, const vdiff *v,
                   uint64_t numel)
{
    if (c->quiet)
        return;
    const tref *t = a ? a : b;
    if (c->json) {
        json_t *o = json_object();
        if (!o) {
            c->oom = 1;
            return;
        }
        set(c, o, "name", jstr(t->name, t->name_len));
        set(c, o, "status", json_string(status));
        if (a) {
            set(c, o, "dtype_a", json_string(shs_dtype_name(a->dtype)));
            set(c, o, "shape_a", shape_json(a));
        }
        if (b) {
            set(c, o, "dtype_b", json_string(shs_dtype_name(b->dtype)));
            set(c, o, "shape_b", shape_json(b));
        }
        if (v) {
            set(c, o, "elements", json_integer((json_int_t)numel));
            set(c, o, "differing", json_integer((json_int_t)v->ndiff));
            set(c, o, "max_abs_diff",
                v->unknown ? json_null() : num_json(v->nan ? NAN : v->max));
        }
        if (json_array_append_new(c->list, o) < 0)
            c->oom = 1;
        return;
    }
    if (!a || !b) {
        fputs(a ? "only in A: " : "only in B: ", stdout);
        put_name(t);
        fputs(" (", stdout);
        put_desc(t);
        puts(")");
        return;
    }
    if (!v) {
        printf("%s differs: ", status);
        put_name(t);
        fputs(": ", stdout);
        put_desc(a);
        fputs(" vs ", stdout);
        put_desc(b);
        putchar('\n');
        return;
    }
    fputs("values differ: ", stdout);
    put_name(t);
    printf(": %llu of %llu elements differ", (unsigned long long)v->ndiff,
           (unsigned long long)numel);
    if (!v->unknown) {
        if (v->nan)
            fputs(" (max abs diff nan)", stdout);
        else
            printf(" (max abs diff %.9g)", v->max);
    }
    putchar('\n');
}

static json_t *source_json(const source *s)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    int bad = json_object_set_new(o, "path", jstr(s->arg, strlen(s->arg))) < 0;
    bad |= json_object_set_new(o, "type", json_string(s->type)) < 0;
    if (s->ck) {
        int64_t step = shs_checkpoint_step(s->ck);
        bad |= json_object_set_new(o, "dir", jstr(s->dir, strlen(s->dir))) < 0;
        bad |= json_object_set_new(o, "step", step >= 0 ? json_integer(step) : json_null()) < 0;
        bad |= json_object_set_new(o, "world_size",
                                   json_integer(shs_checkpoint_world_size(s->ck))) < 0;
    }
    bad |= json_object_set_new(o, "tensor_count", json_integer((json_int_t)s->nt)) < 0;
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static void put_source(const source *s)
{
    printf("%s: ", s->label);
    cli_put_escaped(stdout, s->arg, strlen(s->arg));
    if (s->ck && strcmp(s->dir, s->arg) != 0) {
        fputs(" -> ", stdout);
        cli_put_escaped(stdout, s->dir, strlen(s->dir));
    }
    if (s->ck && !shs_checkpoint_is_plain(s->ck))
        printf(" (checkpoint step %lld, world size %d, %zu tensors)\n",
               (long long)shs_checkpoint_step(s->ck), shs_checkpoint_world_size(s->ck), s->nt);
    else if (s->ck)
        printf(" (directory, %zu files, %zu tensors)\n", shs_checkpoint_file_count(s->ck),
               s->nt);
    else
        printf(" (file, %zu tensors)\n", s->nt);
}

/* ------------------------------------------------------------------ */
/* The command                                                        */
/* ------------------------------------------------------------------ */

static int parse_tol(const char *s, double *out)
{
    char *end;
    if (!*s || *s == ' ')
        return -1;
    double v = strtod(s, &end);
    if (*end || !isfinite(v) || v < 0)
        return -1;
    *out = v;
    return 0;
}

static int kind_wanted(int kind, const tref *a, const tref *b)
{
    return kind < 0 || (a && (int)a->kind == kind) || (b && (int)b->kind == kind);
}

static uint64_t tref_bytes(const tref *t)
{
    uint64_t n;
    return shs_tensor_nbytes(&n, t->dtype, t->ndim, t->shape) < 0 ? 0 : n;
}

/* Compare common tensor a/b; CLI_FAIL (reported) on a read error. */
static int compare_one(dctx *c, const tol *tl, source *sa, source *sb, reader *r,
                       const tref *a, const tref *b)
{
    c->compared++;
    cli_info("diff: comparing '%s'", a->name);
    int same_shape = a->ndim == b->ndim;
    for (size_t d = 0; d < a->ndim && same_shape; d++)
        same_shape = a->shape[d] == b->shape[d];
    if (a->dtype != b->dtype || !same_shape) {
        c->differ++;
        report(c, a->dtype != b->dtype ? "dtype" : "shape", a, b, NULL, 0);
        return CLI_OK;
    }
    unsigned char *da = NULL, *db = NULL;
    uint64_t na, nb;
    char *why = NULL;
    source *bad = sa;
    int rc = read_tensor(sa, r, a, &da, &na, &why);
    if (rc == CLI_OK) {
        bad = sb;
        rc = read_tensor(sb, r, b, &db, &nb, &why);
    }
    if (rc == CLI_OK) {
        vdiff v;
        uint64_t numel = numel_of(a);
        if (compare_values(&v, tl, a->dtype, da, db, numel) < 0) {
            why = last_error_or("conversion failed");
            rc = CLI_FAIL;
        } else if (v.ndiff) {
            c->differ++;
            report(c, "values", a, b, &v, numel);
        }
    }
    free(da);
    free(db);
    if (rc != CLI_OK) {
        char *n = cli_escape(a->name, a->name_len);
        cli_err("diff: %s: tensor '%s': %s", bad->label, n ? n : "?",
                why ? why : "read failed");
        free(n);
        free(why);
    }
    return rc;
}

/* The bytes both sides will read: the progress line's total. */
static uint64_t work_bytes(const source *sa, const source *sb, int kind)
{
    uint64_t total = 0;
    size_t i = 0, j = 0;
    while (i < sa->nt && j < sb->nt) {
        int o = cmp_tref(&sa->t[i], &sb->t[j]);
        if (o == 0 && kind_wanted(kind, &sa->t[i], &sb->t[j]))
            total = cli_add_sat(total, cli_add_sat(tref_bytes(&sa->t[i]),
                                                   tref_bytes(&sb->t[j])));
        i += o <= 0;
        j += o >= 0;
    }
    return total;
}

int cli_cmd_diff(int argc, char **argv)
{
    static const cli_optdef defs[] = { { "--atol", 0, 1 }, { "--rtol", 0, 1 },
                                       { "--kind", 0, 1 }, { NULL, 0, 0 } };
    cli_parser p;
    const char *val, *paths[2] = { NULL, NULL };
    int k, npaths = 0, kind = -1;
    tol tl = { 0, 0, 0 };
    dctx c;
    memset(&c, 0, sizeof c);
    cli_parser_init(&p, "diff", k_help, argc, argv);
    while ((k = cli_parser_next(&p, defs, &val)) != CLI_ARG_END) {
        switch (k) {
        case CLI_ARG_EXIT:
            return p.status;   /* usage errors are 2, as cmp's trouble */
        case CLI_ARG_POSITIONAL:
            if (npaths == 2)
                return cli_usage_err("diff", "unexpected argument '%s'", val);
            paths[npaths++] = val;
            break;
        case 0:
        case 1:
            if (parse_tol(val, k == 0 ? &tl.atol : &tl.rtol) < 0)
                return cli_usage_err("diff", "bad %s value '%s' (a finite number >= 0)",
                                     defs[k].name, val);
            tl.on = 1;
            break;
        case 2:
            if (strcmp(val, "model") == 0)
                kind = SHS_KIND_MODEL;
            else if (strcmp(val, "opt") == 0)
                kind = SHS_KIND_OPTIMIZER;
            else if (strcmp(val, "all") == 0)
                kind = -1;
            else
                return cli_usage_err("diff", "bad --kind '%s' (model, opt or all)", val);
            break;
        }
    }
    if (npaths < 2)
        return cli_usage_err("diff", npaths ? "missing B" : "missing A and B");
    c.json = cli_g.json;
    c.quiet = cli_g.quiet;

    source sa, sb;
    char *why = NULL;
    int status = CLI_DIFF_SAME;
    cli_progress prog;
    memset(&prog, 0, sizeof prog);
    memset(&sb, 0, sizeof sb);
    if (source_open(&sa, "A", paths[0], &why) != CLI_OK ||
        source_open(&sb, "B", paths[1], &why) != CLI_OK) {
        const char *lab = sb.label ? "B" : "A";
        const char *path = sb.label ? paths[1] : paths[0];
        const char *msg = why ? why : "cannot open";
        const char *stripped = cli_strip_path(msg, path);
        if (stripped != msg)
            cli_err("diff: %s: %s", lab, msg);
        else
            cli_err("diff: %s: %s: %s", lab, path, msg);
        free(why);
        source_release(&sa);
        source_release(&sb);
        return CLI_DIFF_TROUBLE;
    }
    reader r = { NULL, 0, XXH3_createState() };
    if (!r.hs || grow_tmp(&r, CLI_CHUNK_BYTES) < 0 || (c.json && !(c.list = json_array()))) {
        cli_err("diff: out of memory");
        status = CLI_DIFF_TROUBLE;
        goto out;
    }
    if (!c.json && !c.quiet) {
        put_source(&sa);
        put_source(&sb);
    }
    cli_progress_start(&prog, "diff", work_bytes(&sa, &sb, kind));
    size_t i = 0, j = 0;
    while (i < sa.nt || j < sb.nt) {
        const tref *a = i < sa.nt ? &sa.t[i] : NULL, *b = j < sb.nt ? &sb.t[j] : NULL;
        int o = !a ? 1 : !b ? -1 : cmp_tref(a, b);
        if (o < 0) {
            i++;
            if (kind_wanted(kind, a, NULL)) {
                c.only_a++;
                report(&c, "only_in_a", a, NULL, NULL, 0);
            }
        } else if (o > 0) {
            j++;
            if (kind_wanted(kind, NULL, b)) {
                c.only_b++;
                report(&c, "only_in_b", NULL, b, NULL, 0);
            }
        } else {
            i++;
            j++;
            if (kind_wanted(kind, a, b)) {
                if (compare_one(&c, &tl, &sa, &sb, &r, a, b) != CLI_OK) {
                    status = CLI_DIFF_TROUBLE;
                    goto out;
                }
                cli_progress_add(&prog, cli_add_sat(tref_bytes(a), tref_bytes(b)));
            }
        }
        if (c.oom) {
            cli_err("diff: out of memory building the output");
            status = CLI_DIFF_TROUBLE;
            goto out;
        }
    }
    cli_progress_end(&prog);
    int differ = c.differ || c.only_a || c.only_b;
    status = differ ? CLI_DIFF_DIFFERENT : CLI_DIFF_SAME;
    if (c.json) {
        json_t *doc = cli_json_new();
        static const char *const kinds[] = { "model", "opt" };
        if (doc) {
            set(&c, doc, "a", source_json(&sa));
            set(&c, doc, "b", source_json(&sb));
            set(&c, doc, "mode", json_string(tl.on ? "tolerance" : "bitwise"));
            set(&c, doc, "atol", json_real(tl.atol));
            set(&c, doc, "rtol", json_real(tl.rtol));
            set(&c, doc, "kind", json_string(kind < 0 ? "all" : kinds[kind]));
            set(&c, doc, "differences", json_incref(c.list));
            set(&c, doc, "summary",
                json_pack("{s:I,s:I,s:I,s:I,s:b}", "compared", (json_int_t)c.compared,
                          "differ", (json_int_t)c.differ, "only_in_a", (json_int_t)c.only_a,
                          "only_in_b", (json_int_t)c.only_b, "equal", !differ));
            set(&c, doc, "same", json_boolean(!differ));
            if (c.oom) {
                json_decref(doc);
                doc = NULL;
            }
        }
        /* "ok" is true for exit status 0 only: identical */
        status = cli_json_print(doc, status, CLI_DIFF_TROUBLE);
    } else if (!c.quiet) {
        printf("%llu tensors compared, %llu differ, only in A: %llu, only in B: %llu\n",
               (unsigned long long)c.compared, (unsigned long long)c.differ,
               (unsigned long long)c.only_a, (unsigned long long)c.only_b);
    }
out:
    cli_progress_end(&prog);
    json_decref(c.list);
    XXH3_freeState(r.hs);
    free(r.tmp);
    source_release(&sa);
    source_release(&sb);
    return cli_finish_stdout_or(status, CLI_DIFF_TROUBLE);
}
