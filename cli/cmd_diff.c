/*
 * cmd_diff.c -- `shardsafe diff A B [--atol X] [--rtol X] [--kind K]`:
 * compare two sets of tensors on their global values.  Exit status as
 * cmp's: 0 same, 1 different, 2 trouble.
 *
 * A and B are each anything shs_checkpoint_open accepts: a safetensors
 * file, a plain directory of safetensors files, a Hugging Face index, a
 * checkpoint step directory, or a save path.  Every tensor is read through
 * shs_checkpoint_read -- the library's engine, which assembles any saved
 * chunking and checks the chunk checksums -- in slabs of at most
 * SLAB_BYTES per side along the outermost dimensions, so memory stays
 * bounded whatever the tensor size (files are read with pread, never
 * mapped).  When both sides hold a tensor in the same chunk boxes with
 * equal stored xxh3 checksums it is equal without reading (unless --full);
 * the stored checksums speak only for files that are there, so both sides
 * first pass shs_checkpoint_check_files (every file present, a regular
 * file of its recorded size; common.json as recorded).
 * Blobs (by checksum, then bytes with --full) and common.json are compared
 * too.
 */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char k_help[] =
    "Usage: shardsafe diff A B [--atol X] [--rtol X] [--kind model|opt|all] [--full]\n"
    "\n"
    "Compare two sets of tensors tensor by tensor, on their global values.\n"
    "A and B are each a .safetensors file, a directory of safetensors files\n"
    "(tensors whole), a model.safetensors.index.json (or its folder), a checkpoint\n"
    "step directory (holding metadata.json) or a save path (its tracker's step,\n"
    "else the newest committed step).  Checkpoints saved with different chunkings\n"
    "or world sizes are compared on the reassembled tensors, read in bounded slabs;\n"
    "chunk checksums are checked while reading.  A tensor whose chunks have the\n"
    "same boxes and the same stored checksums on both sides is equal without\n"
    "reading it (--full reads it anyway); every file of both sides must still be\n"
    "present with the size metadata.json records, and common.json must match its\n"
    "checksum, or diff fails (exit 2).  Rank blobs and common.json fields of\n"
    "two checkpoints are compared too.\n"
    "\n"
    "Prints one line per difference (sorted by tensor name):\n"
    "  only in A: NAME (DTYPE [SHAPE])          only in B: NAME (...)\n"
    "  dtype differs: NAME: DTYPE [SHAPE] vs DTYPE [SHAPE]\n"
    "  shape differs: NAME: DTYPE [SHAPE] vs DTYPE [SHAPE]\n"
    "  values differ: NAME: D of N elements differ (max abs diff X) at [I, J]\n"
    "  blob differs: NAME (rank R)    only in A: blob NAME (rank R)    ...\n"
    "  progress differs: FIELD: X vs Y\n"
    "then 'N tensors compared, D differ, only in A: x, only in B: y'.\n"
    "\n"
    "Values are compared bitwise by default.  With --atol or --rtol, elements of\n"
    "floating-point tensors are equal when |a - b| <= atol + rtol * |b| (both\n"
    "converted to F64; NaN equals NaN; infinities only equal themselves);\n"
    "integer and bool tensors are always compared exactly.  Tensors of two\n"
    "different float dtypes are compared as F64 under a tolerance; without one\n"
    "a dtype difference is a difference.\n"
    "\n"
    "Options:\n"
    "  --atol X     absolute tolerance (>= 0; default 0)\n"
    "  --rtol X     relative tolerance (>= 0; default 0)\n"
    "  --kind K     compare only model tensors, only optimizer tensors (opt), or\n"
    "               all (default)\n"
    "  --full       read every tensor and blob even when the checksums agree\n"
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
    size_t index; /* in the file or the view */
} tref;

typedef struct source {
    const char *label; /* "A" / "B" */
    const char *arg;   /* the command-line path */
    const char *dir;   /* what was opened, resolved (shs_checkpoint_path) */
    const char *type;  /* "file", "directory", "checkpoint" */
    shs_checkpoint *ck;
    tref *t; /* sorted by name */
    size_t nt;
} source;

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
    shs_checkpoint_free(s->ck);
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
    /* pread, not mmap: the pages of a mapping count in the RSS */
    shs_checkpoint_open_opts o = SHS_CHECKPOINT_OPEN_OPTS_INIT;
    o.flags = SHS_CHECKPOINT_OPEN_NO_MMAP;
    if (shs_checkpoint_open(&s->ck, arg, &o) < 0) {
        *why = last_error_or("cannot open");
        return CLI_FAIL;
    }
    /* the fast path compares stored checksums: they speak for files that
       are there, whole (present, of the recorded size) */
    if (shs_checkpoint_check_files(s->ck) < 0) {
        *why = last_error_or("damaged");
        return CLI_FAIL;
    }
    s->dir = shs_checkpoint_path(s->ck);
    shs_source_kind k = SHS_SOURCE_NONE;
    (void)shs_path_kind(&k, arg);
    s->type = k == SHS_SOURCE_FILE             ? "file"
              : (shs_checkpoint_format(s->ck) == SHS_FORMAT_PLAIN) ? "directory"
                                               : "checkpoint";
    s->nt = shs_checkpoint_tensor_count(s->ck);
    s->t = calloc(s->nt + 1, sizeof *s->t);
    if (!s->t) {
        *why = cli_fmt("out of memory");
        return CLI_FAIL;
    }
    /* the library keeps tensors sorted by name, unique */
    for (size_t i = 0; i < s->nt; i++) {
        const shs_checkpoint_tensor_info *ti = shs_checkpoint_tensor(s->ck, i);
        s->t[i] = (tref){ ti->name, strlen(ti->name), ti->kind, ti->dtype, ti->ndim, ti->shape, i };
    }
    if (s->nt > 1)
        qsort(s->t, s->nt, sizeof *s->t, cmp_tref);
    return CLI_OK;
}

static uint64_t numel_of(const tref *t)
{
    uint64_t n = 1;
    for (size_t d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

/* Whether both sides hold tensor a/b in the same chunk boxes, each with
   the same stored xxh3: then the values are equal without reading them.
   Replicas (the same box saved by several ranks) count once. */
static int same_stored_chunks(const source *sa, const tref *a, const source *sb, const tref *b)
{
    const shs_checkpoint_tensor_info *ia = shs_checkpoint_tensor(sa->ck, a->index);
    const shs_checkpoint_tensor_info *ib = shs_checkpoint_tensor(sb->ck, b->index);
    /* quadratic matching: give up on very many chunks */
    if (ia->n_chunks > 4096 || ib->n_chunks > 4096)
        return 0;
    size_t nd = a->ndim, ua = 0, ub = 0;
    for (int side = 0; side < 2; side++) {
        const source *s = side ? sb : sa;
        const source *o = side ? sa : sb;
        const shs_checkpoint_tensor_info *is = side ? ib : ia, *io = side ? ia : ib;
        for (size_t k = 0; k < is->n_chunks; k++) {
            shs_chunk_info c = SHS_CHUNK_INFO_INIT;
            if (shs_checkpoint_chunk(&c, s->ck, (side ? b : a)->index, k) < 0 || !c.has_xxh3)
                return 0;
            int found = 0;
            for (size_t q = 0; q < io->n_chunks && !found; q++) {
                shs_chunk_info x = SHS_CHUNK_INFO_INIT;
                if (shs_checkpoint_chunk(&x, o->ck, (side ? a : b)->index, q) < 0)
                    return 0;
                int box = 1;
                for (size_t d = 0; d < nd && box; d++)
                    box = x.offset[d] == c.offset[d] && x.shape[d] == c.shape[d];
                if (box && (!x.has_xxh3 || x.xxh3 != c.xxh3))
                    return 0;
                found = box;
            }
            if (!found)
                return 0;
            *(side ? &ub : &ua) += 1;
        }
    }
    return ua && ub;
}

/* ------------------------------------------------------------------ */
/* Comparing values                                                   */
/* ------------------------------------------------------------------ */

typedef struct tol {
    int on; /* --atol or --rtol given */
    double atol, rtol;
} tol;

typedef struct vdiff {
    uint64_t ndiff;
    double max;     /* max |a - b| over the elements (non-NaN pairs) */
    int nan;        /* a NaN facing a number: max is NaN */
    int unknown;    /* no numeric difference (sub-byte dtypes) */
    uint64_t base;  /* linear index of the slab's first element */
    uint64_t worst; /* linear index of the max |a - b| (or the first
                              difference when there is no magnitude) */
    int has_worst;
} vdiff;

/* The worst element so far: element i of the slab, difference d. */
static void note(vdiff *v, uint64_t i, double d)
{
    if (!isnan(d) && (d > v->max || !v->has_worst) && d > 0) {
        v->max = d > v->max ? d : v->max;
        v->worst = v->base + i;
        v->has_worst = 1;
    }
}

/* One pair of float values; `bits_equal` tells whether their encodings
   are identical. */
static int float_pair(vdiff *v, const tol *tl, double x, double y, int bits_equal, uint64_t i)
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
    note(v, i, d);
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
            if (!float_pair(v, tl, xa[i], xb[i], memcmp(pa + i * es, pb + i * es, es) == 0, at + i))
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
            eq &= float_pair(v, tl, x, y, memcmp(&x, &y, 4) == 0, i);
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
        v |= (uint64_t)p[k] << (8 * k); /* safetensors is little-endian */
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
        note(v, i, d);
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
        if (x != y && !v->has_worst) {
            v->worst = v->base + i;
            v->has_worst = 1;
        }
        v->ndiff += x != y;
    }
}

static int compare_values(vdiff *v, const tol *tl, shs_dtype dt, const unsigned char *a,
                          const unsigned char *b, uint64_t numel)
{
    unsigned bits = shs_dtype_bits(dt);
    /* the usual case: equal bytes, equal under any tolerance */
    if (memcmp(a, b, (size_t)(numel * bits / 8)) == 0)
        return 0;
    if (shs_dtype_is_float(dt))
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
    json_t *list; /* --json: the differences */
    int oom;
    uint64_t compared, differ, only_a, only_b;
    uint64_t other; /* blob and common.json differences */
} dctx;

/* The multi-dimensional index of linear element `lin` of shape t. */
static void index_of(uint64_t *idx, const tref *t, uint64_t lin)
{
    for (size_t d = t->ndim; d-- > 0;) {
        idx[d] = t->shape[d] ? lin % t->shape[d] : 0;
        lin = t->shape[d] ? lin / t->shape[d] : 0;
    }
}

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
            set(c, o, "max_abs_diff", v->unknown ? json_null() : num_json(v->nan ? NAN : v->max));
            if (v->has_worst) {
                uint64_t idx[SHS_MAX_DIMS];
                json_t *w = json_array();
                index_of(idx, t, v->worst);
                for (size_t d = 0; w && d < t->ndim; d++)
                    if (json_array_append_new(w, json_integer((json_int_t)idx[d])) < 0)
                        c->oom = 1;
                set(c, o, "worst_index", w);
            }
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
    if (v->has_worst) {
        uint64_t idx[SHS_MAX_DIMS];
        index_of(idx, t, v->worst);
        fputs(" at [", stdout);
        for (size_t d = 0; d < t->ndim; d++)
            printf(d ? ", %llu" : "%llu", (unsigned long long)idx[d]);
        putchar(']');
    }
    putchar('\n');
}

/* A difference that is not a tensor's: a blob or a common.json field. */
static void report_other(dctx *c, const char *status, const char *name, int rank, const char *text)
{
    c->other++;
    if (c->quiet)
        return;
    if (c->json) {
        json_t *o = json_object();
        if (!o) {
            c->oom = 1;
            return;
        }
        set(c, o, "name", jstr(name, strlen(name)));
        set(c, o, "status", json_string(status));
        if (rank >= 0)
            set(c, o, "rank", json_integer(rank));
        if (text)
            set(c, o, "detail", json_string(text));
        if (json_array_append_new(c->list, o) < 0)
            c->oom = 1;
        return;
    }
    if (strcmp(status, "progress") == 0) {
        printf("progress differs: %s: %s\n", name, text);
        return;
    }
    printf("%s", strcmp(status, "blob") == 0             ? "blob differs: "
                 : strcmp(status, "blob_only_in_a") == 0 ? "only in A: blob "
                                                         : "only in B: blob ");
    cli_put_escaped(stdout, name, strlen(name));
    printf(" (rank %d)\n", rank);
}

static json_t *source_json(const source *s)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    int bad = json_object_set_new(o, "path", jstr(s->arg, strlen(s->arg))) < 0;
    bad |= json_object_set_new(o, "kind", json_string(s->type)) < 0;
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
    if (s->ck && !(shs_checkpoint_format(s->ck) == SHS_FORMAT_PLAIN))
        printf(" (checkpoint step %lld, world size %d, %zu tensors)\n",
               (long long)shs_checkpoint_step(s->ck), shs_checkpoint_world_size(s->ck), s->nt);
    else if (s->ck)
        printf(" (directory, %zu files, %zu tensors)\n", shs_checkpoint_file_count(s->ck), s->nt);
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

#define SLAB_BYTES ((uint64_t)8 << 20)

typedef struct slabs {
    unsigned char *a, *b;
    size_t cap;
} slabs;

static int slabs_grow(slabs *sl, uint64_t n)
{
    if (n <= sl->cap)
        return 0;
    if (n > SIZE_MAX / 2)
        return -1;
    unsigned char *x = realloc(sl->a, (size_t)n), *y;
    if (!x)
        return -1;
    sl->a = x;
    if (!(y = realloc(sl->b, (size_t)n)))
        return -1;
    sl->b = y;
    sl->cap = (size_t)n;
    return 0;
}

/* Compare common tensor a/b; CLI_FAIL (reported) on a read error.  Both
   sides are read through the library, slab by slab: a slab fixes the
   leading dimensions and spans a range of dimension k, whole in the
   dimensions after k, so it is contiguous in the tensor and at most
   SLAB_BYTES (one row of a sub-byte tensor may be more). */
static int compare_one(dctx *c, const tol *tl, int full, source *sa, source *sb, slabs *sl,
                       const tref *a, const tref *b)
{
    c->compared++;
    cli_info("diff: comparing '%s'", a->name);
    int same_shape = a->ndim == b->ndim;
    for (size_t d = 0; d < a->ndim && same_shape; d++)
        same_shape = a->shape[d] == b->shape[d];
    int cross = a->dtype != b->dtype && tl->on && shs_dtype_is_float(a->dtype) &&
                shs_dtype_is_float(b->dtype);
    if ((a->dtype != b->dtype && !cross) || !same_shape) {
        c->differ++;
        report(c, !same_shape ? "shape" : "dtype", a, b, NULL, 0);
        return CLI_OK;
    }
    if (!cross && !full && same_stored_chunks(sa, a, sb, b))
        return CLI_OK;
    shs_dtype rd = cross ? SHS_F64 : a->dtype;
    size_t nd = a->ndim, k = 0;
    unsigned bits = shs_dtype_bits(rd);
    uint64_t numel = numel_of(a), inner = 1;
    vdiff v;
    memset(&v, 0, sizeof v);
    /* k: the first dimension whose inner part fits a slab (sub-byte
       elements: the last dimension stays whole) */
    if (nd) {
        k = nd - 1;
        inner = 1;
        uint64_t in = 1;
        for (size_t d = nd; d-- > 0;) {
            if ((bits % 8 && d == nd - 1) || in * bits / 8 <= SLAB_BYTES) {
                k = d;
                inner = in;
            }
            if (in && a->shape[d] > UINT64_MAX / 64 / in)
                break;
            in *= a->shape[d];
            if (in * bits / 8 > SLAB_BYTES && !(bits % 8 && d == nd - 1))
                break;
        }
    }
    uint64_t per = nd && inner ? SLAB_BYTES * 8 / (inner * bits) : 1;
    if (per == 0)
        per = 1;
    uint64_t start[SHS_MAX_DIMS] = { 0 }, count[SHS_MAX_DIMS];
    char *why = NULL;
    source *bad = sa;
    int rc = CLI_OK;
    for (size_t d = 0; d < nd; d++)
        count[d] = d < k ? 1 : a->shape[d];
    while (numel && rc == CLI_OK) {
        if (nd)
            count[k] = a->shape[k] - start[k] < per ? a->shape[k] - start[k] : per;
        uint64_t n = nd ? count[k] * inner : 1, lin = 0;
        uint64_t bytes = n * bits / 8;
        for (size_t d = 0; d < nd; d++)
            lin = lin * a->shape[d] + start[d];
        if (slabs_grow(sl, bytes ? bytes : 1) < 0) {
            why = cli_fmt("out of memory for a %llu-byte slab", (unsigned long long)bytes);
            rc = CLI_FAIL;
            break;
        }
        const uint64_t *s0 = nd ? start : NULL, *n0 = nd ? count : NULL;
        if (shs_checkpoint_read(sa->ck, a->index, s0, n0, rd, sl->a, (size_t)bytes) < 0 ||
            (bad = sb,
             shs_checkpoint_read(sb->ck, b->index, s0, n0, rd, sl->b, (size_t)bytes) < 0)) {
            why = last_error_or("read failed");
            rc = CLI_FAIL;
            break;
        }
        bad = sa;
        v.base = lin;
        if (compare_values(&v, tl, rd, sl->a, sl->b, n) < 0) {
            why = last_error_or("conversion failed");
            rc = CLI_FAIL;
            break;
        }
        /* next slab: along k, then the leading dimensions */
        if (!nd)
            break;
        start[k] += count[k];
        if (start[k] < a->shape[k])
            continue;
        start[k] = 0;
        size_t d = k;
        for (;;) {
            if (d == 0) {
                numel = 0; /* done */
                break;
            }
            d--;
            if (++start[d] < a->shape[d])
                break;
            start[d] = 0;
        }
    }
    if (rc == CLI_OK && v.ndiff) {
        c->differ++;
        report(c, "values", a, b, &v, numel_of(a));
    }
    if (rc != CLI_OK) {
        char *nm = cli_escape(a->name, a->name_len);
        cli_err("diff: %s: tensor '%s': %s", bad->label, nm ? nm : "?", why ? why : "read failed");
        free(nm);
        free(why);
    }
    return rc;
}

/* One blob of a side, for matching by (name, rank). */
typedef struct bref {
    shs_blob_info b;
    size_t index;
} bref;

static int cmp_bref(const void *x, const void *y)
{
    const bref *p = x, *q = y;
    int c = strcmp(p->b.name, q->b.name);
    return c ? c : (p->b.rank > q->b.rank) - (p->b.rank < q->b.rank);
}

static int load_brefs(const source *s, bref **out, size_t *n)
{
    *n = shs_checkpoint_blob_count(s->ck);
    *out = calloc(*n + 1, sizeof **out);
    if (!*out)
        return -1;
    for (size_t i = 0; i < *n; i++) {
        (*out)[i].b = (shs_blob_info)SHS_BLOB_INFO_INIT;
        (*out)[i].index = i;
        if (shs_checkpoint_blob(&(*out)[i].b, s->ck, i) < 0)
            return -1;
    }
    qsort(*out, *n, sizeof **out, cmp_bref);
    return 0;
}

/* Rank blobs (same world size only: rank state belongs to its rank) and
   common.json of two checkpoints.  CLI_FAIL (reported) on trouble. */
static int compare_state(dctx *c, int full, source *sa, source *sb)
{
    if ((shs_checkpoint_format(sa->ck) == SHS_FORMAT_PLAIN) || (shs_checkpoint_format(sb->ck) == SHS_FORMAT_PLAIN))
        return CLI_OK;
    shs_progress pa = SHS_PROGRESS_INIT, pb = SHS_PROGRESS_INIT;
    if (shs_checkpoint_progress(&pa, sa->ck) < 0 || shs_checkpoint_progress(&pb, sb->ck) < 0) {
        cli_err("diff: %s", shs_last_error());
        return CLI_FAIL;
    }
    char t[160];
#define FIELD(f)                                                                                   \
    if (pa.f != pb.f) {                                                                            \
        snprintf(t, sizeof t, "%lld vs %lld", (long long)pa.f, (long long)pb.f);                   \
        report_other(c, "progress", #f, -1, t);                                                    \
    }
    FIELD(epoch_num)
    FIELD(step_num)
    FIELD(global_step)
    FIELD(global_batch_size)
    FIELD(consumed_samples)
#undef FIELD
    if (memcmp(&pa.loss_scale, &pb.loss_scale, sizeof pa.loss_scale) != 0) {
        snprintf(t, sizeof t, "%.17g vs %.17g", pa.loss_scale, pb.loss_scale);
        report_other(c, "progress", "loss_scale", -1, t);
    }
    if (strcmp(pa.ckpt_status, pb.ckpt_status) != 0) {
        snprintf(t, sizeof t, "\"%s\" vs \"%s\"", pa.ckpt_status, pb.ckpt_status);
        report_other(c, "progress", "ckpt_status", -1, t);
    }
    if (shs_checkpoint_world_size(sa->ck) != shs_checkpoint_world_size(sb->ck)) {
        cli_info("diff: rank blobs not compared: world sizes %d and %d",
                 shs_checkpoint_world_size(sa->ck), shs_checkpoint_world_size(sb->ck));
        return CLI_OK;
    }
    bref *ba = NULL, *bb = NULL;
    size_t na = 0, nb = 0, i = 0, j = 0;
    unsigned char *xa = NULL, *xb = NULL;
    int rc = CLI_OK;
    if (load_brefs(sa, &ba, &na) < 0 || load_brefs(sb, &bb, &nb) < 0) {
        cli_err("diff: %s", shs_last_error());
        rc = CLI_FAIL;
        goto done;
    }
    while (rc == CLI_OK && (i < na || j < nb)) {
        int o = i == na ? 1 : j == nb ? -1 : cmp_bref(&ba[i], &bb[j]);
        if (o) {
            const bref *x = o < 0 ? &ba[i++] : &bb[j++];
            report_other(c, o < 0 ? "blob_only_in_a" : "blob_only_in_b", x->b.name, x->b.rank,
                         NULL);
            continue;
        }
        const bref *x = &ba[i++], *y = &bb[j++];
        int same = x->b.size == y->b.size && x->b.xxh3 == y->b.xxh3;
        if (same && full) {
            /* checksums agree: --full still reads (and checks) both */
            free(xa);
            free(xb);
            xa = malloc((size_t)x->b.size + 1);
            xb = malloc((size_t)y->b.size + 1);
            if (!xa || !xb ||
                shs_checkpoint_read_blob(sa->ck, x->index, xa, (size_t)x->b.size) < 0 ||
                shs_checkpoint_read_blob(sb->ck, y->index, xb, (size_t)y->b.size) < 0) {
                cli_err("diff: blob '%s': %s", x->b.name,
                        xa && xb ? shs_last_error() : "out of memory");
                rc = CLI_FAIL;
                break;
            }
            same = memcmp(xa, xb, (size_t)x->b.size) == 0;
        }
        if (!same)
            report_other(c, "blob", x->b.name, x->b.rank, NULL);
    }
done:
    free(xa);
    free(xb);
    free(ba);
    free(bb);
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
            total = cli_add_sat(total, cli_add_sat(tref_bytes(&sa->t[i]), tref_bytes(&sb->t[j])));
        i += o <= 0;
        j += o >= 0;
    }
    return total;
}

typedef struct diff_args {
    const char *paths[2];
    int kind; /* SHS_KIND_* or -1: all */
    int full;
    tol tl;
} diff_args;

/* Options and the two paths; a usage error's status in *status. */
static int parse_args(diff_args *a, int argc, char **argv, int *status)
{
    static const cli_optdef defs[] = { { "--atol", 0, 1 },
                                       { "--rtol", 0, 1 },
                                       { "--kind", 0, 1 },
                                       { "--full", 0, 0 },
                                       { NULL, 0, 0 } };
    cli_parser p;
    const char *val;
    int k, npaths = 0;
    memset(a, 0, sizeof *a);
    a->kind = -1;
    cli_parser_init(&p, "diff", k_help, argc, argv);
    while ((k = cli_parser_next(&p, defs, &val)) != CLI_ARG_END) {
        switch (k) {
        case CLI_ARG_EXIT:
            *status = p.status; /* usage errors are 2, as cmp's trouble */
            return -1;
        case CLI_ARG_POSITIONAL:
            if (npaths == 2) {
                *status = cli_usage_err("diff", "unexpected argument '%s'", val);
                return -1;
            }
            a->paths[npaths++] = val;
            break;
        case 0:
        case 1:
            if (parse_tol(val, k == 0 ? &a->tl.atol : &a->tl.rtol) < 0) {
                *status = cli_usage_err("diff", "bad %s value '%s' (a finite number >= 0)",
                                        defs[k].name, val);
                return -1;
            }
            a->tl.on = 1;
            break;
        case 2:
            if (strcmp(val, "model") == 0)
                a->kind = SHS_KIND_MODEL;
            else if (strcmp(val, "opt") == 0)
                a->kind = SHS_KIND_OPTIMIZER;
            else if (strcmp(val, "all") == 0)
                a->kind = -1;
            else {
                *status = cli_usage_err("diff", "bad --kind '%s' (model, opt or all)", val);
                return -1;
            }
            break;
        case 3: a->full = 1; break;
        }
    }
    if (npaths < 2) {
        *status = cli_usage_err("diff", npaths ? "missing B" : "missing A and B");
        return -1;
    }
    if (!*a->paths[0] || !*a->paths[1]) {
        *status = cli_usage_err("diff", "%s is an empty path", *a->paths[0] ? "B" : "A");
        return -1;
    }
    return 0;
}

/* Open A and B; on failure say which side and why. */
static int open_sources(source *sa, source *sb, const diff_args *a)
{
    char *why = NULL;
    memset(sb, 0, sizeof *sb);
    if (source_open(sa, "A", a->paths[0], &why) == CLI_OK &&
        source_open(sb, "B", a->paths[1], &why) == CLI_OK)
        return CLI_OK;
    const char *lab = sb->label ? "B" : "A";
    const char *path = sb->label ? a->paths[1] : a->paths[0];
    const char *msg = why ? why : "cannot open";
    const char *stripped = cli_strip_path(msg, path);
    if (stripped != msg)
        cli_err("diff: %s: %s", lab, msg);
    else
        cli_err("diff: %s: %s: %s", lab, path, msg);
    free(why);
    source_release(sa);
    source_release(sb);
    return CLI_DIFF_TROUBLE;
}

/* Walk both sorted tensor lists together: compare the common ones, count
   the ones on one side only. */
static int compare_tensors(dctx *c, const diff_args *a, source *sa, source *sb, slabs *sl)
{
    cli_progress prog;
    memset(&prog, 0, sizeof prog);
    cli_progress_start(&prog, "diff", work_bytes(sa, sb, a->kind));
    size_t i = 0, j = 0;
    int status = CLI_OK;
    while (status == CLI_OK && (i < sa->nt || j < sb->nt)) {
        const tref *ta = i < sa->nt ? &sa->t[i] : NULL, *tb = j < sb->nt ? &sb->t[j] : NULL;
        int o = !ta ? 1 : !tb ? -1 : cmp_tref(ta, tb);
        i += o <= 0;
        j += o >= 0;
        if (o < 0 && kind_wanted(a->kind, ta, NULL)) {
            c->only_a++;
            report(c, "only_in_a", ta, NULL, NULL, 0);
        } else if (o > 0 && kind_wanted(a->kind, NULL, tb)) {
            c->only_b++;
            report(c, "only_in_b", NULL, tb, NULL, 0);
        } else if (o == 0 && kind_wanted(a->kind, ta, tb)) {
            if (compare_one(c, &a->tl, a->full, sa, sb, sl, ta, tb) != CLI_OK)
                status = CLI_DIFF_TROUBLE;
            cli_progress_add(&prog, cli_add_sat(tref_bytes(ta), tref_bytes(tb)));
        }
        if (status == CLI_OK && c->oom) {
            cli_err("diff: out of memory building the output");
            status = CLI_DIFF_TROUBLE;
        }
    }
    cli_progress_end(&prog);
    return status;
}

/* The summary, as JSON or one line; the exit status. */
static int print_result(dctx *c, const diff_args *a, const source *sa, const source *sb)
{
    int differ = c->differ || c->only_a || c->only_b || c->other;
    int status = differ ? CLI_DIFF_DIFFERENT : CLI_DIFF_SAME;
    if (c->json) {
        json_t *doc = cli_json_new();
        static const char *const kinds[] = { "model", "opt" };
        if (doc) {
            set(c, doc, "a", source_json(sa));
            set(c, doc, "b", source_json(sb));
            set(c, doc, "mode", json_string(a->tl.on ? "tolerance" : "bitwise"));
            set(c, doc, "atol", json_real(a->tl.atol));
            set(c, doc, "rtol", json_real(a->tl.rtol));
            set(c, doc, "tensor_kind", json_string(a->kind < 0 ? "all" : kinds[a->kind]));
            set(c, doc, "differences", json_incref(c->list));
            set(c, doc, "summary",
                json_pack("{s:I,s:I,s:I,s:I,s:I,s:b}", "compared", (json_int_t)c->compared,
                          "differ", (json_int_t)c->differ, "only_in_a", (json_int_t)c->only_a,
                          "only_in_b", (json_int_t)c->only_b, "other", (json_int_t)c->other,
                          "equal", !differ));
            set(c, doc, "same", json_boolean(!differ));
            if (c->oom) {
                json_decref(doc);
                doc = NULL;
            }
        }
        /* "ok" is true for exit status 0 only: identical */
        return cli_json_print(doc, status, CLI_DIFF_TROUBLE);
    }
    if (!c->quiet) {
        printf("%llu tensors compared, %llu differ, only in A: %llu, only in B: %llu",
               (unsigned long long)c->compared, (unsigned long long)c->differ,
               (unsigned long long)c->only_a, (unsigned long long)c->only_b);
        if (c->other)
            printf("; %llu blob or progress difference(s)", (unsigned long long)c->other);
        putchar('\n');
    }
    return status;
}

int cli_cmd_diff(int argc, char **argv)
{
    diff_args a;
    int status;
    if (parse_args(&a, argc, argv, &status) < 0)
        return status;
    dctx c;
    memset(&c, 0, sizeof c);
    c.json = cli_g.json;
    c.quiet = cli_g.quiet;
    source sa, sb;
    if ((status = open_sources(&sa, &sb, &a)) != CLI_OK)
        return status;
    slabs sl = { NULL, NULL, 0 };
    if (slabs_grow(&sl, SLAB_BYTES) < 0 || (c.json && !(c.list = json_array()))) {
        cli_err("diff: out of memory");
        status = CLI_DIFF_TROUBLE;
    } else {
        if (!c.json && !c.quiet) {
            put_source(&sa);
            put_source(&sb);
        }
        status = compare_tensors(&c, &a, &sa, &sb, &sl);
        if (status == CLI_OK && compare_state(&c, a.full, &sa, &sb) != CLI_OK)
            status = CLI_DIFF_TROUBLE;
        if (status == CLI_OK)
            status = print_result(&c, &a, &sa, &sb);
    }
    json_decref(c.list);
    free(sl.a);
    free(sl.b);
    source_release(&sa);
    source_release(&sb);
    return cli_finish_stdout_or(status, CLI_DIFF_TROUBLE);
}
