/*
 * checkpoint.c -- step directories: save with the commit protocol, load
 * with resharding, verification, path resolution.  Format: docs/checkpoint.md.
 *
 * Commit protocol (every step a crash may interrupt leaves the previous
 * committed checkpoint loadable and the tracker pointing at a complete
 * directory):
 *   1. every file goes into <save_path>/.tmp-iteration_N-<random>/, each
 *      fsynced; metadata.json is written last; the directory is fsynced;
 *   2. the directory is renamed to iteration_N (or swapped atomically with
 *      an existing iteration_N by RENAME_EXCHANGE, the old one deleted);
 *      save_path is fsynced;
 *   3. the tracker is replaced atomically (temp file, fsync, rename, fsync).
 * Leftovers (.tmp-*, .trash-*) are removed by the next run's manager.
 */
#include "checkpoint.h"

#include "comm.h"
#include "hash.h"
#include "io.h"
#include "layout.h"
#include "plan.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#define META_VERSION 1
#define META_MAX (1u << 30)   /* metadata.json larger than this is refused */
#define COMMON_MAX (1u << 16)

static const char *const k_kind_name[] = { "model", "opt" };

/* ------------------------------------------------------------------ */
/* Names, listing, tracker                                            */
/* ------------------------------------------------------------------ */

int64_t shs__step_of_name(const char *name)
{
    const char *p;
    if (strncmp(name, "iteration_", 10) == 0)
        p = name + 10;
    else if (strncmp(name, "step-", 5) == 0)
        p = name + 5;
    else
        return -1;
    if (!*p || strlen(p) > 18)
        return -1;
    int64_t v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

static int is_complete_dir(const char *dir)
{
    char *m = shs__path_join(dir, "metadata.json");
    char *c = shs__path_join(dir, "common.json");
    struct stat st;
    int ok = m && c && stat(m, &st) == 0 && S_ISREG(st.st_mode) && stat(c, &st) == 0 &&
             S_ISREG(st.st_mode);
    shs__free(m);
    shs__free(c);
    return ok;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

int shs__list_steps(int64_t **out, size_t *n, const char *save_path)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(save_path);
    if (!d)
        return shs__err_errno(errno, "cannot open save path", save_path);
    int64_t *v = NULL;
    size_t cnt = 0, cap = 0;
    int rc = SHS_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t s = shs__step_of_name(e->d_name);
        if (s < 0)
            continue;
        char *full = shs__path_join(save_path, e->d_name);
        if (!full) {
            rc = shs__err(SHS_ENOMEM, "out of memory listing %s", save_path);
            break;
        }
        int ok = is_complete_dir(full);
        shs__free(full);
        if (!ok)
            continue;
        if (cnt == cap) {
            cap = cap ? cap * 2 : 16;
            int64_t *nv = shs__realloc(v, cap * sizeof *nv);
            if (!nv) {
                rc = shs__err(SHS_ENOMEM, "out of memory listing %s", save_path);
                break;
            }
            v = nv;
        }
        v[cnt++] = s;
    }
    closedir(d);
    if (rc < 0) {
        shs__free(v);
        return rc;
    }
    if (cnt > 1)
        qsort(v, cnt, sizeof *v, cmp_i64);
    /* iteration_N and step-N of the same N count once */
    size_t w = 0;
    for (size_t i = 0; i < cnt; i++)
        if (w == 0 || v[w - 1] != v[i])
            v[w++] = v[i];
    *out = v;
    *n = w;
    return SHS_OK;
}

int shs__read_tracker(int64_t *step, const char *save_path)
{
    char *path = shs__path_join(save_path, SHS__TRACKER);
    if (!path)
        return shs__err(SHS_ENOMEM, "out of memory");
    char *buf = NULL;
    size_t len = 0;
    struct stat st;
    int rc;
    if (stat(path, &st) != 0) {
        rc = shs__err(SHS_ENOENT, "%s: no tracker", save_path);
        goto done;
    }
    if ((rc = shs__read_file(&buf, &len, path, 64)) < 0)
        goto done;
    /* a decimal step, optionally followed by one newline */
    size_t i = 0;
    int64_t v = 0;
    for (; i < len && buf[i] >= '0' && buf[i] <= '9' && i < 18; i++)
        v = v * 10 + (buf[i] - '0');
    if (i == 0 || !(i == len || (i + 1 == len && buf[i] == '\n'))) {
        rc = shs__err(SHS_ECORRUPT, "%s: tracker must hold a decimal step, not '%.20s'", path,
                      buf);
        goto done;
    }
    *step = v;
done:
    shs__free(buf);
    shs__free(path);
    return rc;
}

static char *step_dir_path(const char *save_path, int64_t step)
{
    char name[40];
    snprintf(name, sizeof name, "iteration_%08lld", (long long)step);
    return shs__path_join(save_path, name);
}

int shs__remove_step(const char *save_path, int64_t step)
{
    char *dir = step_dir_path(save_path, step);
    char suffix[17], name[80];
    shs__random_suffix(suffix);
    snprintf(name, sizeof name, ".trash-iteration_%08lld-%s", (long long)step, suffix);
    char *trash = shs__path_join(save_path, name);
    int rc = SHS_OK;
    if (!dir || !trash) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    /* renamed away first: a crash mid-delete leaves only a .trash- entry,
       never a half-deleted directory that looks like a checkpoint */
    int r = shs__io->rename(dir, trash);
    if (r != 0 && errno == ENOENT) {
        /* a torchtitan-style step-N directory */
        char alt[40];
        snprintf(alt, sizeof alt, "step-%lld", (long long)step);
        shs__free(dir);
        if (!(dir = shs__path_join(save_path, alt))) {
            rc = shs__err(SHS_ENOMEM, "out of memory");
            goto done;
        }
        r = shs__io->rename(dir, trash);
        if (r != 0 && errno == ENOENT)
            goto done; /* nothing to remove */
    }
    if (r != 0) {
        rc = shs__err_errno(errno, "cannot remove", dir);
        goto done;
    }
    rc = shs__rmtree(trash);
done:
    shs__free(dir);
    shs__free(trash);
    return rc;
}

int shs__clean_leftovers(const char *save_path)
{
    DIR *d = opendir(save_path);
    if (!d)
        return errno == ENOENT ? SHS_OK : shs__err_errno(errno, "cannot open", save_path);
    int rc = SHS_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        int tmp = strncmp(e->d_name, ".tmp-", 5) == 0 || strncmp(e->d_name, ".trash-", 7) == 0 ||
                  (strncmp(e->d_name, SHS__TRACKER ".tmp.", sizeof SHS__TRACKER + 4) == 0);
        if (!tmp)
            continue;
        char *p = shs__path_join(save_path, e->d_name);
        int r = p ? shs__rmtree(p) : shs__err(SHS_ENOMEM, "out of memory");
        shs__free(p);
        if (r < 0 && rc == SHS_OK)
            rc = r;
    }
    closedir(d);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Metadata (in memory)                                               */
/* ------------------------------------------------------------------ */

typedef struct mchunk {
    uint64_t *off, *shape;
    uint32_t file;
    char *key;
    uint64_t b0, b1;          /* absolute byte range in the file */
    uint64_t hash;
    int has_hash;
    uint64_t block;           /* > 0: per-block checksums of `block` bytes */
    uint64_t *blocks;         /* XXH3 of each block (the last may be short) */
    size_t nblocks;
} mchunk;

typedef struct mtensor {
    char *name;
    shs_kind kind;
    shs_dtype dtype;
    size_t ndim;
    uint64_t *gshape;
    mchunk *c;
    size_t nc;
} mtensor;

typedef struct mfile {
    char *name;
    int rank;
} mfile;

typedef struct mblob {
    char *name;
    int rank;
    uint32_t file;
    char *key;
    uint64_t b0, b1, hash;
} mblob;

typedef struct meta {
    int64_t step;
    int world_size;
    int plain;                /* a plain directory of safetensors files */
    mfile *f;
    size_t nf;
    mtensor *t;
    size_t nt;
    mblob *b;
    size_t nb;
} meta;

static void meta_free(meta *m)
{
    for (size_t i = 0; i < m->nf; i++)
        shs__free(m->f[i].name);
    for (size_t i = 0; i < m->nt; i++) {
        for (size_t k = 0; k < m->t[i].nc; k++) {
            shs__free(m->t[i].c[k].off);
            shs__free(m->t[i].c[k].shape);
            shs__free(m->t[i].c[k].key);
            shs__free(m->t[i].c[k].blocks);
        }
        shs__free(m->t[i].c);
        shs__free(m->t[i].name);
        shs__free(m->t[i].gshape);
    }
    for (size_t i = 0; i < m->nb; i++) {
        shs__free(m->b[i].name);
        shs__free(m->b[i].key);
    }
    shs__free(m->f);
    shs__free(m->t);
    shs__free(m->b);
    memset(m, 0, sizeof *m);
}

static const mtensor *meta_find(const meta *m, const char *name)
{
    /* metadata tensors are kept sorted by name */
    size_t lo = 0, hi = m->nt;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(m->t[mid].name, name);
        if (c == 0)
            return &m->t[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static int cmp_mtensor(const void *a, const void *b)
{
    return strcmp(((const mtensor *)a)->name, ((const mtensor *)b)->name);
}

/* A file name inside a step directory: plain, no path, not hidden. */
static int plain_file_name(const char *s)
{
    if (!*s || *s == '.' || strlen(s) > 255)
        return 0;
    for (const char *p = s; *p; p++)
        if (*p == '/' || *p == '\\' || (unsigned char)*p < 0x20)
            return 0;
    return 1;
}

static void hex64(char out[17], uint64_t v)
{
    snprintf(out, 17, "%016llx", (unsigned long long)v);
}

static int parse_hex64(uint64_t *out, const char *s)
{
    if (strlen(s) != 16)
        return -1;
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = (v << 4) | (uint64_t)d;
    }
    *out = v;
    return 0;
}

/* json helpers: a non-negative integer below 2^63 */
static int get_u64(const json_t *o, const char *key, uint64_t *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int get_dims(const json_t *a, size_t ndim, uint64_t **out)
{
    if (!json_is_array(a) || json_array_size(a) != ndim)
        return -1;
    uint64_t *v = shs__calloc(ndim ? ndim : 1, sizeof *v);
    if (!v)
        return -2;
    for (size_t d = 0; d < ndim; d++) {
        json_t *x = json_array_get(a, d);
        if (!json_is_integer(x) || json_integer_value(x) < 0) {
            shs__free(v);
            return -1;
        }
        v[d] = (uint64_t)json_integer_value(x);
    }
    *out = v;
    return 0;
}

#define BAD(...) do { rc = shs__err(SHS_ECORRUPT, __VA_ARGS__); goto fail; } while (0)
#define OOM() do { rc = shs__err(SHS_ENOMEM, "out of memory reading %s", path); goto fail; } while (0)

/* Parse and validate metadata.json of `dir`. */
static int meta_parse(meta *m, const char *dir)
{
    int rc = SHS_OK;
    json_t *root = NULL;
    char *buf = NULL;
    size_t len;
    memset(m, 0, sizeof *m);
    char *path = shs__path_join(dir, "metadata.json");
    if (!path)
        return shs__err(SHS_ENOMEM, "out of memory");
    if ((rc = shs__read_file(&buf, &len, path, META_MAX)) < 0)
        goto fail;
    json_error_t jerr;
    root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        BAD("%s: invalid JSON at line %d: %s", path, jerr.line, jerr.text);
    if (!json_is_object(root))
        BAD("%s: not a JSON object", path);
    json_t *fmt = json_object_get(root, "format");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "shardsafe.checkpoint") != 0)
        BAD("%s: \"format\" must be \"shardsafe.checkpoint\"", path);
    uint64_t ver, step, ws;
    if (get_u64(root, "version", &ver) || ver != META_VERSION)
        BAD("%s: unsupported \"version\" (this build reads version %d)", path, META_VERSION);
    if (get_u64(root, "step", &step) || get_u64(root, "world_size", &ws) || ws < 1 ||
        ws > (1u << 24))
        BAD("%s: \"step\" and \"world_size\" must be positive integers", path);
    m->step = (int64_t)step;
    m->world_size = (int)ws;
    json_t *files = json_object_get(root, "files");
    if (!json_is_array(files))
        BAD("%s: \"files\" must be an array", path);
    m->nf = json_array_size(files);
    m->f = shs__calloc(m->nf ? m->nf : 1, sizeof *m->f);
    if (!m->f)
        OOM();
    for (size_t i = 0; i < m->nf; i++) {
        json_t *f = json_array_get(files, i);
        json_t *name = json_object_get(f, "name");
        uint64_t rank;
        if (!json_is_object(f) || !json_is_string(name) || get_u64(f, "rank", &rank) ||
            rank >= ws)
            BAD("%s: files[%zu] needs a \"name\" and a \"rank\" below world_size", path, i);
        if (!plain_file_name(json_string_value(name)))
            BAD("%s: files[%zu]: '%s' is not a plain file name inside the checkpoint directory",
                path, i, json_string_value(name));
        for (size_t k = 0; k < i; k++)
            if (strcmp(m->f[k].name, json_string_value(name)) == 0)
                BAD("%s: file '%s' listed twice", path, json_string_value(name));
        if (!(m->f[i].name = shs__strdup(json_string_value(name))))
            OOM();
        m->f[i].rank = (int)rank;
    }
    json_t *tensors = json_object_get(root, "tensors");
    if (!json_is_object(tensors))
        BAD("%s: \"tensors\" must be an object", path);
    m->t = shs__calloc(json_object_size(tensors) + 1, sizeof *m->t);
    if (!m->t)
        OOM();
    const char *tname;
    json_t *tv;
    json_object_foreach(tensors, tname, tv) {
        mtensor *t = &m->t[m->nt];
        if (!(t->name = shs__strdup(tname)))
            OOM();
        m->nt++;
        json_t *kind = json_object_get(tv, "kind"), *dt = json_object_get(tv, "dtype");
        json_t *shape = json_object_get(tv, "shape"), *chunks = json_object_get(tv, "chunks");
        if (!json_is_object(tv) || !json_is_string(kind) || !json_is_string(dt) ||
            !json_is_array(shape) || !json_is_array(chunks))
            BAD("%s: tensor '%s' needs \"kind\", \"dtype\", \"shape\" and \"chunks\"", path, tname);
        if (strcmp(json_string_value(kind), "model") == 0)
            t->kind = SHS_KIND_MODEL;
        else if (strcmp(json_string_value(kind), "opt") == 0)
            t->kind = SHS_KIND_OPTIMIZER;
        else
            BAD("%s: tensor '%s': unknown kind '%s'", path, tname, json_string_value(kind));
        const char *ds = json_string_value(dt);
        if (shs_dtype_parse(&t->dtype, ds, strlen(ds)) < 0)
            BAD("%s: tensor '%s': unknown dtype '%s'", path, tname, ds);
        t->ndim = json_array_size(shape);
        if (t->ndim > SHS_MAX_DIMS)
            BAD("%s: tensor '%s': too many dimensions", path, tname);
        int r = get_dims(shape, t->ndim, &t->gshape);
        if (r == -2)
            OOM();
        if (r < 0)
            BAD("%s: tensor '%s': bad shape", path, tname);
        uint64_t gbytes;
        if (shs_tensor_nbytes(&gbytes, t->dtype, t->ndim, t->gshape) < 0)
            BAD("%s: tensor '%s': shape overflows", path, tname);
        t->nc = json_array_size(chunks);
        t->c = shs__calloc(t->nc ? t->nc : 1, sizeof *t->c);
        if (!t->c)
            OOM();
        for (size_t k = 0; k < t->nc; k++) {
            json_t *cj = json_array_get(chunks, k);
            mchunk *c = &t->c[k];
            json_t *key = json_object_get(cj, "key"), *h = json_object_get(cj, "xxh3");
            json_t *br = json_object_get(cj, "byte_range");
            uint64_t file;
            if (!json_is_object(cj) || !json_is_string(key) || get_u64(cj, "file", &file) ||
                file >= m->nf || !json_is_array(br) || json_array_size(br) != 2)
                BAD("%s: tensor '%s': chunk %zu needs \"file\", \"key\", \"byte_range\"", path,
                    tname, k);
            c->file = (uint32_t)file;
            if ((r = get_dims(json_object_get(cj, "offset"), t->ndim, &c->off)) == -2 ||
                (r == 0 && (r = get_dims(json_object_get(cj, "shape"), t->ndim, &c->shape)) == -2))
                OOM();
            if (r < 0)
                BAD("%s: tensor '%s': chunk %zu: bad offset or shape", path, tname, k);
            for (size_t d = 0; d < t->ndim; d++)
                if (c->off[d] > t->gshape[d] || c->shape[d] > t->gshape[d] - c->off[d])
                    BAD("%s: tensor '%s': chunk %zu lies outside the tensor", path, tname, k);
            json_t *b0 = json_array_get(br, 0), *b1 = json_array_get(br, 1);
            if (!json_is_integer(b0) || !json_is_integer(b1) || json_integer_value(b0) < 0 ||
                json_integer_value(b1) < json_integer_value(b0))
                BAD("%s: tensor '%s': chunk %zu: bad byte_range", path, tname, k);
            c->b0 = (uint64_t)json_integer_value(b0);
            c->b1 = (uint64_t)json_integer_value(b1);
            uint64_t cbytes;
            if (shs_tensor_nbytes(&cbytes, t->dtype, t->ndim, c->shape) < 0 ||
                cbytes != c->b1 - c->b0)
                BAD("%s: tensor '%s': chunk %zu: byte_range does not match its shape", path,
                    tname, k);
            if (!(c->key = shs__strdup(json_string_value(key))))
                OOM();
            if (h) {
                if (!json_is_string(h) || parse_hex64(&c->hash, json_string_value(h)) < 0)
                    BAD("%s: tensor '%s': chunk %zu: \"xxh3\" must be 16 hex digits", path,
                        tname, k);
                c->has_hash = 1;
            }
            json_t *bs = json_object_get(cj, "xxh3_block"), *bl = json_object_get(cj, "xxh3_blocks");
            if (bs || bl) {
                uint64_t b = json_is_integer(bs) ? (uint64_t)json_integer_value(bs) : 0;
                uint64_t n = c->b1 - c->b0;
                if (b < 4096 || b > (1u << 30) || (b & (b - 1)) || !json_is_array(bl) ||
                    json_array_size(bl) != (n + b - 1) / b)
                    BAD("%s: tensor '%s': chunk %zu: \"xxh3_block\" must be a power of two "
                        "from 4096 and \"xxh3_blocks\" hold one checksum per block", path, tname,
                        k);
                c->block = b;
                c->nblocks = json_array_size(bl);
                if (!(c->blocks = shs__calloc(c->nblocks + 1, sizeof *c->blocks)))
                    OOM();
                for (size_t q = 0; q < c->nblocks; q++) {
                    json_t *x = json_array_get(bl, q);
                    if (!json_is_string(x) || parse_hex64(&c->blocks[q], json_string_value(x)) < 0)
                        BAD("%s: tensor '%s': chunk %zu: block checksum %zu must be 16 hex "
                            "digits", path, tname, k, q);
                }
            }
        }
    }
    qsort(m->t, m->nt, sizeof *m->t, cmp_mtensor);
    json_t *blobs = json_object_get(root, "blobs");
    if (blobs && !json_is_array(blobs))
        BAD("%s: \"blobs\" must be an array", path);
    m->nb = blobs ? json_array_size(blobs) : 0;
    m->b = shs__calloc(m->nb ? m->nb : 1, sizeof *m->b);
    if (!m->b)
        OOM();
    for (size_t i = 0; i < m->nb; i++) {
        json_t *bj = json_array_get(blobs, i);
        mblob *b = &m->b[i];
        json_t *name = json_object_get(bj, "name"), *key = json_object_get(bj, "key");
        json_t *br = json_object_get(bj, "byte_range"), *h = json_object_get(bj, "xxh3");
        uint64_t rank, file;
        if (!json_is_object(bj) || !json_is_string(name) || !json_is_string(key) ||
            get_u64(bj, "rank", &rank) || rank >= ws || get_u64(bj, "file", &file) ||
            file >= m->nf || !json_is_array(br) || json_array_size(br) != 2 ||
            !json_is_integer(json_array_get(br, 0)) || !json_is_integer(json_array_get(br, 1)) ||
            !json_is_string(h) || parse_hex64(&b->hash, json_string_value(h)) < 0)
            BAD("%s: blobs[%zu] is malformed", path, i);
        b->rank = (int)rank;
        b->file = (uint32_t)file;
        b->b0 = (uint64_t)json_integer_value(json_array_get(br, 0));
        b->b1 = (uint64_t)json_integer_value(json_array_get(br, 1));
        if (b->b1 < b->b0)
            BAD("%s: blobs[%zu]: bad byte_range", path, i);
        if (!(b->name = shs__strdup(json_string_value(name))) ||
            !(b->key = shs__strdup(json_string_value(key))))
            OOM();
    }
    json_decref(root);
    shs__free(buf);
    shs__free(path);
    return SHS_OK;
fail:
    json_decref(root);
    shs__free(buf);
    shs__free(path);
    meta_free(m);
    return rc;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A plain directory of safetensors files: each tensor whole, names unique
   across files.  Files whose name holds "-opt-" hold optimizer state. */
static int meta_from_plain(meta *m, const char *dir)
{
    int rc = SHS_OK;
    const char *path = dir;
    memset(m, 0, sizeof *m);
    m->plain = 1;
    m->world_size = 1;
    m->step = shs__step_of_name(strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir);
    DIR *d = opendir(dir);
    if (!d)
        return shs__err_errno(errno, "cannot open checkpoint directory", dir);
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!ends_with(e->d_name, ".safetensors") || !plain_file_name(e->d_name))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = shs__realloc(names, cap * sizeof *nn);
            if (!nn)
                break;
            names = nn;
        }
        if (!(names[n] = shs__strdup(e->d_name)))
            break;
        n++;
    }
    int partial = e != NULL;
    closedir(d);
    if (partial) {
        for (size_t i = 0; i < n; i++)
            shs__free(names[i]);
        shs__free(names);
        return shs__err(SHS_ENOMEM, "out of memory listing %s", dir);
    }
    if (n > 1)
        qsort(names, n, sizeof *names, cmp_str);
    m->f = shs__calloc(n ? n : 1, sizeof *m->f);
    if (!m->f) {
        for (size_t i = 0; i < n; i++)
            shs__free(names[i]);
        shs__free(names);
        return shs__err(SHS_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++)
        m->f[i].name = names[i];
    m->nf = n;
    shs__free(names);
    if (n == 0) {
        meta_free(m);
        return shs__err(SHS_ENOCHECKPOINT, "%s: no metadata.json and no .safetensors files", dir);
    }
    size_t cap_t = 0;
    for (size_t i = 0; i < m->nf; i++) {
        char *fp = shs__path_join(dir, m->f[i].name);
        shs_file *f = NULL;
        shs_open_opts oo = SHS_OPEN_OPTS_INIT;
        oo.flags = SHS_OPEN_NO_MMAP;
        rc = fp ? shs_file_open(&f, fp, &oo) : shs__err(SHS_ENOMEM, "out of memory");
        shs__free(fp);
        if (rc < 0)
            goto fail;
        int opt = strstr(m->f[i].name, "-opt-") != NULL;
        for (size_t k = 0; k < shs_file_tensor_count(f); k++) {
            const shs_tensor_info *ti = shs_file_tensor(f, k);
            if (m->nt == cap_t) {
                cap_t = cap_t ? cap_t * 2 : 64;
                mtensor *nt = shs__realloc(m->t, cap_t * sizeof *nt);
                if (!nt) {
                    shs_file_close(f);
                    OOM();
                }
                m->t = nt;
            }
            mtensor *t = &m->t[m->nt];
            memset(t, 0, sizeof *t);
            m->nt++;
            t->kind = opt ? SHS_KIND_OPTIMIZER : SHS_KIND_MODEL;
            t->dtype = ti->dtype;
            t->ndim = ti->ndim;
            t->name = shs__strndup(ti->name, ti->name_len);
            t->gshape = shs__calloc(ti->ndim ? ti->ndim : 1, sizeof *t->gshape);
            t->c = shs__calloc(1, sizeof *t->c);
            if (t->c) {
                t->nc = 1;
                t->c->off = shs__calloc(ti->ndim ? ti->ndim : 1, sizeof(uint64_t));
                t->c->shape = shs__calloc(ti->ndim ? ti->ndim : 1, sizeof(uint64_t));
                t->c->key = shs__strndup(ti->name, ti->name_len);
            }
            if (!t->name || !t->gshape || !t->c || !t->c->off || !t->c->shape || !t->c->key) {
                shs_file_close(f);
                OOM();
            }
            for (size_t dd = 0; dd < ti->ndim; dd++)
                t->gshape[dd] = t->c->shape[dd] = ti->shape[dd];
            t->c->file = (uint32_t)i;
            t->c->b0 = shs_file_data_start(f) + ti->offset;
            t->c->b1 = t->c->b0 + ti->nbytes;
        }
        shs_file_close(f);
    }
    if (m->nt > 1)
        qsort(m->t, m->nt, sizeof *m->t, cmp_mtensor);
    for (size_t i = 1; i < m->nt; i++)
        if (strcmp(m->t[i - 1].name, m->t[i].name) == 0)
            BAD("%s: tensor '%s' appears in two files", dir, m->t[i].name);
    return SHS_OK;
fail:
    meta_free(m);
    return rc;
}

#undef OOM

/* ------------------------------------------------------------------ */
/* common.json                                                        */
/* ------------------------------------------------------------------ */

static int write_common(const char *dir, const shs_progress *p, int do_fsync)
{
    json_t *o = json_object();
    int rc = SHS_OK;
    char *text = NULL, *path = NULL;
    if (!o)
        return shs__err(SHS_ENOMEM, "out of memory");
    const shs_progress zero = { 0 };
    if (!p)
        p = &zero;
    if (json_object_set_new(o, "epoch_num", json_integer(p->epoch_num)) ||
        json_object_set_new(o, "step_num", json_integer(p->step_num)) ||
        json_object_set_new(o, "global_step", json_integer(p->global_step)) ||
        json_object_set_new(o, "loss_scale", json_real(p->loss_scale)) ||
        json_object_set_new(o, "global_batch_size", json_integer(p->global_batch_size)) ||
        json_object_set_new(o, "consumed_samples", json_integer(p->consumed_samples)) ||
        json_object_set_new(o, "ckpt_status",
                            p->ckpt_status[0] ? json_string(p->ckpt_status) : json_null())) {
        rc = shs__err(SHS_ENOMEM, "out of memory writing common.json");
        goto done;
    }
    text = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    path = shs__path_join(dir, "common.json");
    if (!text || !path) {
        rc = shs__err(SHS_ENOMEM, "out of memory writing common.json");
        goto done;
    }
    size_t n = strlen(text);
    text[n] = '\n'; /* json_dumps leaves room only for the NUL: rewrite it */
    rc = shs__write_file(path, text, n + 1, do_fsync);
done:
    free(text);
    shs__free(path);
    json_decref(o);
    return rc;
}

static int read_common(shs_progress *p, const char *dir)
{
    char *path = shs__path_join(dir, "common.json"), *buf = NULL;
    size_t len;
    json_t *o = NULL;
    int rc;
    if (!path)
        return shs__err(SHS_ENOMEM, "out of memory");
    if ((rc = shs__read_file(&buf, &len, path, COMMON_MAX)) < 0)
        goto fail;
    json_error_t jerr;
    o = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o || !json_is_object(o))
        BAD("%s: not a JSON object (%s)", path, o ? "wrong type" : jerr.text);
    static const char *const ints[] = { "epoch_num", "step_num", "global_step",
                                        "global_batch_size", "consumed_samples" };
    int64_t *dst[] = { &p->epoch_num, &p->step_num, &p->global_step, &p->global_batch_size,
                       &p->consumed_samples };
    shs_progress out = { 0 };
    int64_t *odst[] = { &out.epoch_num, &out.step_num, &out.global_step,
                        &out.global_batch_size, &out.consumed_samples };
    (void)dst;
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        size_t i;
        for (i = 0; i < 5 && strcmp(key, ints[i]) != 0; i++)
            ;
        if (i < 5) {
            if (!json_is_integer(v) || json_integer_value(v) < 0)
                BAD("%s: \"%s\" must be a non-negative integer", path, key);
            *odst[i] = json_integer_value(v);
        } else if (strcmp(key, "loss_scale") == 0) {
            /* a number, or (as MindSpore writes it) a numeric string */
            if (json_is_number(v))
                out.loss_scale = json_number_value(v);
            else if (json_is_string(v)) {
                char *end;
                out.loss_scale = strtod(json_string_value(v), &end);
                if (end == json_string_value(v) || *end)
                    BAD("%s: \"loss_scale\" must be a number", path);
            } else
                BAD("%s: \"loss_scale\" must be a number", path);
        } else if (strcmp(key, "ckpt_status") == 0) {
            if (json_is_string(v)) {
                if (strlen(json_string_value(v)) >= sizeof out.ckpt_status)
                    BAD("%s: \"ckpt_status\" is too long", path);
                snprintf(out.ckpt_status, sizeof out.ckpt_status, "%s", json_string_value(v));
            } else if (!json_is_null(v))
                BAD("%s: \"ckpt_status\" must be a string or null", path);
        } else {
            BAD("%s: unknown key \"%s\" (common.json holds exactly epoch_num, step_num, "
                "global_step, loss_scale, global_batch_size, consumed_samples, ckpt_status)",
                path, key);
        }
    }
    for (size_t i = 0; i < 5; i++)
        if (!json_object_get(o, ints[i]))
            BAD("%s: missing \"%s\"", path, ints[i]);
    if (!json_object_get(o, "loss_scale") || !json_object_get(o, "ckpt_status"))
        BAD("%s: missing \"loss_scale\" or \"ckpt_status\"", path);
    *p = out;
fail:
    json_decref(o);
    shs__free(buf);
    shs__free(path);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Save                                                               */
/* ------------------------------------------------------------------ */

/* Where a tensor of the state goes in this save. */
enum { SLOT_SKIP = -1 };

typedef struct out_file {
    char name[320];
    int linked;              /* hard link of a previous file */
    size_t prev_index;       /* its index in the previous metadata */
    json_t *entry;           /* its "files" entry */
} out_file;

typedef struct tensor_out {
    int file;                /* index into files, or SLOT_SKIP */
    uint64_t b0, b1;
    uint64_t hash;
    uint64_t *blocks;        /* per-block checksums (chunks > SHS__HASH_BLOCK) */
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
    snprintf((*files)[*n].name, sizeof (*files)[*n].name, "%s", name);
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
static int same_as_prev(const shs__tensor *t, const mtensor *pt, const mchunk **pc,
                        uint64_t hash, int rank, const meta *prev)
{
    if (!pt || pt->kind != t->kind || pt->dtype != t->dtype || pt->ndim != t->ndim)
        return 0;
    for (size_t d = 0; d < t->ndim; d++)
        if (pt->gshape[d] != t->gshape[d])
            return 0;
    for (size_t k = 0; k < pt->nc; k++) {
        const mchunk *c = &pt->c[k];
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

/* Write the tensors assigned to file `fi` as one safetensors file. */
static int write_one_file(const shs_state *st, const shs__save_req *req, const char *tmp,
                          out_file *f, int fi, tensor_out *to, const int *incl)
{
    shs_writer *w = NULL;
    shs_writer_opts wo = SHS_WRITER_OPTS_INIT;
    wo.fsync = req->fsync;
    int rc;
    char *path = shs__path_join(tmp, f->name);
    if (!path)
        return shs__err(SHS_ENOMEM, "out of memory");
    if ((rc = shs_writer_create(&w, path, &wo)) < 0)
        goto done;
    if ((rc = shs_writer_add_metadata(w, "format", "pt")) < 0)
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
        if ((rc = shs_writer_write(w, name, tensor_src(st, req, (size_t)i),
                                   (size_t)st->t[i].nbytes)) < 0 ||
            (rc = shs__writer_tensor_range(w, name, &to[i].b0, &to[i].b1)) < 0)
            goto done;
    }
    rc = shs_writer_commit(w);
done:
    shs_writer_free(w);
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

static int commit_dir(const char *tmp, const char *target, const char *save_path, int do_fsync)
{
    struct stat st;
    if (lstat(target, &st) == 0) {
        /* same step saved again: swap atomically, make the swap durable,
           then drop the old one */
        if (shs__io->exchange(tmp, target) == 0) {
            int rc = do_fsync ? shs__io_fsync_dir(save_path) : SHS_OK;
            int r2 = shs__rmtree(tmp);
            return rc < 0 ? rc : r2;
        }
        if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
            return shs__err_errno(errno, "cannot replace", target);
        /* no RENAME_EXCHANGE on this file system: a short window where the
           step is absent (the loader then reports the tracker's target
           missing rather than loading a partial directory) */
        char suffix[17], *trash;
        shs__random_suffix(suffix);
        size_t cap = strlen(save_path) + 64;
        if (!(trash = shs__malloc(cap)))
            return shs__err(SHS_ENOMEM, "out of memory");
        snprintf(trash, cap, "%s/.trash-replaced-%s", save_path, suffix);
        if (shs__io->rename(target, trash) != 0) {
            int e = errno;
            shs__free(trash);
            return shs__err_errno(e, "cannot replace", target);
        }
        int rc = SHS_OK;
        if (shs__io->rename(tmp, target) != 0) {
            rc = shs__err_errno(errno, "cannot rename into place", target);
            shs__io->rename(trash, target); /* put the old one back */
        } else {
            shs__rmtree(trash);
        }
        shs__free(trash);
        if (rc < 0)
            return rc;
    } else if (shs__io->rename(tmp, target) != 0) {
        return shs__err_errno(errno, "cannot rename into place", target);
    }
    return do_fsync ? shs__io_fsync_dir(save_path) : SHS_OK;
}

/*
 * One rank's part of a save: write its files into the temporary directory
 * `tmp` and describe them in a metadata fragment (the "files", "tensors"
 * and "blobs" of metadata.json, with file indices local to this rank).
 */
static int save_local(const shs_state *st, const shs__save_req *req, const char *tmp,
                      const uint8_t *skip, json_t **frag_out, shs_save_stats *stats)
{
    int rc;
    char name[360];
    meta prev = { 0 };
    int have_prev = 0;
    out_file *files = NULL;
    size_t nfiles = 0, capfiles = 0;
    tensor_out *to = NULL;
    int *incl = NULL;
    json_t *root = NULL;
    shs_save_stats s = { 0 };
    s.step = req->step;

    *frag_out = NULL;
    to = shs__calloc(st->n + 1, sizeof *to);
    incl = shs__calloc(st->n + 1, sizeof *incl);
    if (!to || !incl) {
        rc = shs__err(SHS_ENOMEM, "out of memory saving step %lld", (long long)req->step);
        goto done;
    }

    /* what goes in, and the checksum of each local chunk */
    for (size_t i = 0; i < st->n; i++) {
        incl[i] = (st->t[i].kind == SHS_KIND_MODEL || req->with_optim) && !(skip && skip[i]);
        to[i].file = SLOT_SKIP;
        if (incl[i]) {
            uint64_t n = st->t[i].nbytes;
            if (n > SHS__HASH_BLOCK) {
                if (!(to[i].blocks = shs__calloc((size_t)((n + SHS__HASH_BLOCK - 1) /
                                                          SHS__HASH_BLOCK), 8))) {
                    rc = shs__err(SHS_ENOMEM, "out of memory for block checksums");
                    goto done;
                }
                to[i].hash = shs__xxh3_blocks(tensor_src(st, req, i), n, SHS__HASH_BLOCK,
                                              to[i].blocks);
            } else {
                to[i].hash = shs__xxh3(tensor_src(st, req, i), (size_t)n);
            }
            s.state_bytes += n;
        }
    }

    /* incremental: previous files whose every tensor is unchanged are
       hard-linked; other unchanged tensors go to a "frozen" file that
       the next save can link in turn */
    if (req->incremental && req->prev_dir && meta_parse(&prev, req->prev_dir) == SHS_OK)
        have_prev = 1;
    shs__err_clear();
    int *unchanged = NULL;
    if (have_prev) {
        unchanged = shs__calloc(st->n + 1, sizeof *unchanged);
        int *linkable = shs__calloc(prev.nf + 1, sizeof *linkable);
        if (!unchanged || !linkable) {
            shs__free(unchanged);
            shs__free(linkable);
            rc = shs__err(SHS_ENOMEM, "out of memory planning a save");
            goto done;
        }
        for (size_t k = 0; k < prev.nf; k++)
            linkable[k] = prev.f[k].rank == req->rank;
        for (size_t k = 0; k < prev.nb; k++)
            linkable[prev.b[k].file] = 0;
        /* a previous file is linkable when each of its chunks is a tensor
           of this save with the same content */
        for (size_t j = 0; j < prev.nt; j++) {
            const mtensor *pt = &prev.t[j];
            long i = shs__state_find(st, pt->name, strlen(pt->name));
            const mchunk *pc = NULL;
            int same = i >= 0 && incl[i] &&
                       same_as_prev(&st->t[i], pt, &pc, to[i].hash, req->rank, &prev);
            if (same)
                unchanged[i] = 1 + (int)pc->file;
            for (size_t k = 0; k < pt->nc; k++)
                if (!same || &pt->c[k] != pc)
                    linkable[pt->c[k].file] = 0;
        }
        for (size_t k = 0; k < prev.nf; k++) {
            if (!linkable[k])
                continue;
            char *from = shs__path_join(req->prev_dir, prev.f[k].name);
            char *to_path = shs__path_join(tmp, prev.f[k].name);
            int ok = from && to_path && shs__io->link(from, to_path) == 0;
            shs__free(from);
            shs__free(to_path);
            if (!ok)
                continue; /* e.g. EXDEV: those tensors are written instead */
            int fi = add_out_file(&files, &nfiles, &capfiles, prev.f[k].name);
            if (fi < 0) {
                rc = fi;
                shs__free(unchanged);
                shs__free(linkable);
                goto done;
            }
            files[fi].linked = 1;
            files[fi].prev_index = k;
            for (size_t i = 0; i < st->n; i++)
                if (unchanged[i] == 1 + (int)k)
                    to[i].file = fi;
        }
        shs__free(linkable);
    }

    /* the rest: one file per kind, plus one per kind for unchanged data */
    for (size_t i = 0; i < st->n; i++) {
        if (!incl[i] || to[i].file != SLOT_SKIP)
            continue;
        const char *kind = k_kind_name[st->t[i].kind];
        int frozen = unchanged && unchanged[i];
        if (frozen)
            snprintf(name, sizeof name, "%s-%s-frozen%08lld-%07d-%07d.safetensors",
                     req->prefix, kind, (long long)req->step, req->rank, req->world_size);
        else
            snprintf(name, sizeof name, "%s-%s-%07d-%07d.safetensors", req->prefix, kind,
                     req->rank, req->world_size);
        int fi = find_out_file(files, nfiles, name);
        if (fi >= 0 && files[fi].linked) {
            /* a linked file already has the plain name: use a step-tagged one */
            snprintf(name, sizeof name, "%s-%s-s%08lld-%07d-%07d.safetensors", req->prefix,
                     kind, (long long)req->step, req->rank, req->world_size);
            fi = find_out_file(files, nfiles, name);
        }
        if (fi < 0 && (fi = add_out_file(&files, &nfiles, &capfiles, name)) < 0) {
            rc = fi;
            shs__free(unchanged);
            goto done;
        }
        to[i].file = fi;
    }
    shs__free(unchanged);

    for (size_t fi = 0; fi < nfiles; fi++) {
        if (files[fi].linked) {
            /* byte ranges of linked tensors come from the previous metadata */
            for (size_t i = 0; i < st->n; i++) {
                if (to[i].file != (int)fi)
                    continue;
                const mtensor *pt = meta_find(&prev, st->t[i].name);
                const mchunk *pc = NULL;
                same_as_prev(&st->t[i], pt, &pc, to[i].hash, req->rank, &prev);
                to[i].b0 = pc->b0;
                to[i].b1 = pc->b1;
                s.bytes_linked += st->t[i].nbytes;
            }
            continue;
        }
        if ((rc = write_one_file(st, req, tmp, &files[fi], (int)fi, to, incl)) < 0)
            goto done;
        for (size_t i = 0; i < st->n; i++)
            if (to[i].file == (int)fi)
                s.bytes_written += st->t[i].nbytes;
    }

    /* rank-local blobs: one safetensors file of U8 tensors */
    int blob_file = -1;
    uint64_t *blob_range = NULL;
    if (req->n_blobs) {
        snprintf(name, sizeof name, "%s-state-%07d-%07d.safetensors", req->prefix, req->rank,
                 req->world_size);
        char *path = shs__path_join(tmp, name);
        shs_writer *w = NULL;
        shs_writer_opts wo = SHS_WRITER_OPTS_INIT;
        wo.fsync = req->fsync;
        blob_range = shs__calloc(2 * req->n_blobs, sizeof *blob_range);
        if (!path || !blob_range)
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
                rc = shs__writer_tensor_range(w, req->blobs[k].name, &blob_range[2 * k],
                                              &blob_range[2 * k + 1]);
            s.bytes_written += req->blobs[k].len;
        }
        if (rc == SHS_OK)
            rc = shs_writer_commit(w);
        shs_writer_free(w);
        shs__free(path);
        if (rc == SHS_OK && (blob_file = add_out_file(&files, &nfiles, &capfiles, name)) < 0)
            rc = blob_file;
        if (rc < 0) {
            shs__free(blob_range);
            goto done;
        }
    }

    /* this rank's fragment of metadata.json */
    root = json_object();
    json_t *jfiles = json_array(), *jt = json_object(), *jb = json_array();
    int bad = !root || !jfiles || !jt || !jb;
    if (!bad)
        bad = json_object_set_new(root, "files", jfiles) ||
              json_object_set_new(root, "tensors", jt) ||
              json_object_set_new(root, "blobs", jb);
    else {
        json_decref(jfiles);
        json_decref(jt);
        json_decref(jb);
    }
    for (size_t fi = 0; !bad && fi < nfiles; fi++) {
        json_t *e = json_pack("{s:s, s:i}", "name", files[fi].name, "rank", req->rank);
        bad = !e || json_array_append_new(jfiles, e) < 0;
    }
    char hx[17];
    for (size_t i = 0; !bad && i < st->n; i++) {
        if (!incl[i])
            continue;
        const shs__tensor *t = &st->t[i];
        hex64(hx, to[i].hash);
        json_t *chunk = json_pack("{s:o, s:o, s:i, s:s, s:o, s:s}", "offset",
                                  json_dims(t->goff, t->ndim), "shape",
                                  json_dims(t->shape, t->ndim), "file", to[i].file, "key",
                                  t->name, "byte_range", json_range(to[i].b0, to[i].b1), "xxh3",
                                  hx);
        /* large chunks also get per-block checksums, so a load that needs
           only part of the chunk checks only the blocks it reads */
        if (chunk && to[i].blocks) {
            json_t *bl = json_array();
            for (uint64_t q = 0; bl && q * SHS__HASH_BLOCK < t->nbytes; q++) {
                hex64(hx, to[i].blocks[q]);
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
        json_t *e = chunk ? json_pack("{s:s, s:s, s:o, s:[o]}", "kind", k_kind_name[t->kind],
                                      "dtype", shs_dtype_name(t->dtype), "shape",
                                      json_dims(t->gshape, t->ndim), "chunks", chunk)
                          : NULL;
        bad = !e || json_object_set_new(jt, t->name, e) < 0;
    }
    for (size_t k = 0; !bad && k < req->n_blobs; k++) {
        hex64(hx, shs__xxh3(req->blobs[k].data, req->blobs[k].len));
        json_t *e = json_pack("{s:s, s:i, s:i, s:s, s:o, s:s}", "name", req->blobs[k].name,
                              "rank", req->rank, "file", blob_file, "key", req->blobs[k].name,
                              "byte_range", json_range(blob_range[2 * k], blob_range[2 * k + 1]),
                              "xxh3", hx);
        bad = !e || json_array_append_new(jb, e) < 0;
    }
    shs__free(blob_range);
    if (bad) {
        rc = shs__err(SHS_ENOMEM, "out of memory describing the saved files");
        goto done;
    }
    *frag_out = root;
    root = NULL;
    *stats = s;
    rc = SHS_OK;
done:
    json_decref(root);
    if (have_prev)
        meta_free(&prev);
    shs__free(files);
    for (size_t i = 0; to && i < st->n; i++)
        shs__free(to[i].blocks);
    shs__free(to);
    shs__free(incl);
    return rc;
}

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

typedef struct lay_entry {
    const char *name;
    uint32_t name_len, rank;
    uint8_t kind, dtype, ndim;
    const uint64_t *gshape, *box; /* box: offset[ndim] then shape[ndim] */
} lay_entry;

/* Every rank's layout, parsed, in rank order. */
typedef struct layout_set {
    char *all;
    size_t *lens;
    lay_entry *e;
    size_t n;
    uint64_t *words;          /* aligned copies of the shapes and boxes */
} layout_set;

static void layout_set_release(layout_set *ls)
{
    shs__free(ls->all);
    shs__free(ls->lens);
    shs__free(ls->e);
    shs__free(ls->words);
    memset(ls, 0, sizeof *ls);
}

static int gather_layouts(const shs_state *st, int with_optim, shs_comm *comm, layout_set *ls)
{
    shs__buf mine = SHS__BUF_INIT;
    int rc;
    memset(ls, 0, sizeof *ls);
    if ((rc = layout_bytes(st, with_optim, &mine)) < 0 ||
        (rc = shs__comm_allgather_bytes(comm, mine.data, mine.len, &ls->all, &ls->lens)) < 0)
        goto done;
    size_t cap = 64, words = 0, at = 0;
    int oom = !(ls->e = shs__malloc(cap * sizeof *ls->e));
    for (int r = 0; !oom && r < comm->size; r++) {
        size_t end = at + ls->lens[r];
        while (!oom && at < end) {
            if (ls->n == cap) {
                lay_entry *ne = shs__realloc(ls->e, (cap *= 2) * sizeof *ne);
                if (!(oom = !ne))
                    ls->e = ne;
                continue;
            }
            lay_entry *x = &ls->e[ls->n++];
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
        lay_entry *x = &ls->e[i];
        memcpy(&ls->words[w], ls->all + (size_t)(uintptr_t)x->gshape, (size_t)x->ndim * 24);
        x->gshape = &ls->words[w];
        x->box = &ls->words[w + x->ndim];
        w += (size_t)x->ndim * 3;
    }
done:
    shs__buf_release(&mine);
    if (rc < 0)
        layout_set_release(ls);
    return rc;
}

static int cmp_lay_name(const void *a, const void *b)
{
    const lay_entry *x = *(const lay_entry *const *)a, *y = *(const lay_entry *const *)b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);
    if (c)
        return c;
    if (x->name_len != y->name_len)
        return x->name_len < y->name_len ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/*
 * remove_redundancy: every rank learns every rank's layout, and the same
 * pure plan on every rank picks one writer per replicated chunk, balanced
 * by bytes.  *skip_out[i] = 1 when another rank writes state tensor i.
 * With a layout cache, a save whose layouts all hashed the same as last
 * time reuses the plan after one 8-byte all-gather.
 */
static int plan_replicas(const shs_state *st, const shs__save_req *req, shs_comm *comm,
                         uint8_t **skip_out)
{
    int rc;
    shs__buf mine = SHS__BUF_INIT;
    layout_set ls = { 0 };
    lay_entry **by = NULL;
    shs_plan_tensor *tens = NULL;
    shs_plan_chunk *chunks = NULL;
    uint64_t *hashes = NULL;
    shs__save_plan plan;
    int have_plan = 0;
    uint8_t *skip = NULL;
    *skip_out = NULL;
    if ((rc = layout_bytes(st, req->with_optim, &mine)) < 0)
        goto done;
    uint64_t h = XXH3_64bits(mine.data, mine.len);
    if (!(hashes = shs__calloc((size_t)comm->size, sizeof *hashes))) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = shs__comm_allgather(comm, &h, sizeof h, hashes)) < 0)
        goto done;
    uint64_t key = XXH3_64bits(hashes, (size_t)comm->size * sizeof *hashes) | 1;
    shs__layout_cache *cache = req->layout_cache;
    if (cache && cache->key == key && cache->n == st->n) {
        *skip_out = cache->skip;
        goto done;
    }
    if ((rc = gather_layouts(st, req->with_optim, comm, &ls)) < 0)
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
        const lay_entry *x = by[i];
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
                          "shape than rank %u", (int)x->name_len, x->name, x->rank,
                          by[i - 1]->rank);
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
    layout_set_release(&ls);
    shs__free(by);
    shs__free(tens);
    shs__free(chunks);
    shs__free(hashes);
    shs__free(skip);
    return rc;
}

/* Root: merge the ranks' fragments (texts, in rank order) into the body
   of metadata.json, remapping file indices. */
static int merge_fragments(json_t *out, const char *texts, const size_t *lens, int world,
                           const char *save_path)
{
    json_t *files = json_object_get(out, "files"), *tensors = json_object_get(out, "tensors");
    json_t *blobs = json_object_get(out, "blobs");
    size_t at = 0;
    int rc = SHS_OK;
    for (int r = 0; r < world && rc == SHS_OK; r++) {
        json_error_t jerr;
        json_t *f = json_loadb(texts + at, lens[r], JSON_REJECT_DUPLICATES, &jerr);
        at += lens[r];
        if (!f)
            return shs__err(SHS_ECORRUPT, "%s: metadata of rank %d is invalid: %s", save_path, r,
                            jerr.text);
        json_int_t base = (json_int_t)json_array_size(files);
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(f, "files"), i, v)
            if (json_array_append(files, v) < 0)
                rc = shs__err(SHS_ENOMEM, "out of memory");
        const char *name;
        json_object_foreach(json_object_get(f, "tensors"), name, v) {
            json_t *chunks = json_object_get(v, "chunks"), *c;
            json_array_foreach(chunks, i, c)
                json_object_set_new(c, "file",
                                    json_integer(json_integer_value(json_object_get(c, "file")) + base));
            json_t *have = json_object_get(tensors, name);
            if (!have) {
                if (json_object_set(tensors, name, v) < 0)
                    rc = shs__err(SHS_ENOMEM, "out of memory");
                continue;
            }
            if (!json_equal(json_object_get(have, "kind"), json_object_get(v, "kind")) ||
                !json_equal(json_object_get(have, "dtype"), json_object_get(v, "dtype")) ||
                !json_equal(json_object_get(have, "shape"), json_object_get(v, "shape"))) {
                rc = shs__err(SHS_EMISMATCH,
                              "tensor '%s': rank %d registers another kind, dtype or global "
                              "shape than a lower rank", name, r);
                break;
            }
            if (json_array_extend(json_object_get(have, "chunks"), chunks) < 0)
                rc = shs__err(SHS_ENOMEM, "out of memory");
        }
        json_array_foreach(json_object_get(f, "blobs"), i, v) {
            json_object_set_new(v, "file",
                                json_integer(json_integer_value(json_object_get(v, "file")) + base));
            if (json_array_append(blobs, v) < 0)
                rc = shs__err(SHS_ENOMEM, "out of memory");
        }
        json_decref(f);
    }
    return rc;
}

/* Root: common.json, metadata.json, then the commit protocol. */
static int root_commit(const shs__save_req *req, const char *tmp, const char *texts,
                       const size_t *lens, int world, char *out_dir, size_t out_cap,
                       int *committed)
{
    int rc;
    char *text = NULL, *mpath = NULL, *target = NULL, *tracker = NULL;
    json_t *root = json_pack("{s:s, s:i, s:I, s:i, s:[], s:{}, s:[]}", "format",
                             "shardsafe.checkpoint", "version", META_VERSION, "step",
                             (json_int_t)req->step, "world_size", world, "files", "tensors",
                             "blobs");
    *committed = 0;
    if (!root)
        return shs__err(SHS_ENOMEM, "out of memory writing metadata.json");
    if ((rc = merge_fragments(root, texts, lens, world, req->save_path)) < 0)
        goto done;
    if ((rc = write_common(tmp, req->progress, req->fsync)) < 0)
        goto done;
    /* metadata.json is written last: a directory holding it is complete */
    text = json_dumps(root, JSON_INDENT(1) | JSON_COMPACT);
    mpath = shs__path_join(tmp, "metadata.json");
    target = step_dir_path(req->save_path, req->step);
    tracker = shs__path_join(req->save_path, SHS__TRACKER);
    if (!text || !mpath || !target || !tracker) {
        rc = shs__err(SHS_ENOMEM, "out of memory writing metadata.json");
        goto done;
    }
    if ((rc = shs__write_file(mpath, text, strlen(text), req->fsync)) < 0)
        goto done;
    if (req->fsync && (rc = shs__io_fsync_dir(tmp)) < 0)
        goto done;
    /* commit: the directory, then the tracker */
    if ((rc = commit_dir(tmp, target, req->save_path, req->fsync)) < 0)
        goto done;
    *committed = 1;
    char num[32];
    int nlen = snprintf(num, sizeof num, "%lld", (long long)req->step);
    if ((rc = shs__write_file_atomic(tracker, num, (size_t)nlen, req->fsync)) < 0) {
        /* the directory is complete and committed; the tracker names the
           previous step (or, if only the final directory fsync failed, this
           one): either way it names a complete directory */
        shs__err_prefix(rc, "step directory committed; updating the tracker failed");
        goto done;
    }
    if (out_dir)
        snprintf(out_dir, out_cap, "%s", target);
done:
    free(text);
    json_decref(root);
    shs__free(mpath);
    shs__free(target);
    shs__free(tracker);
    return rc;
}

int shs__ckpt_save(const shs_state *st, const shs__save_req *req, shs_comm *comm,
                   shs_save_stats *stats, char *out_dir, size_t out_cap)
{
    const int root = 0, me = comm->rank, world = comm->size;
    char suffix[17] = { 0 }, name[64], msg[256];
    char *tmp = NULL, *text = NULL, *all = NULL;
    size_t *lens = NULL;
    json_t *frag = NULL;
    int rc = SHS_OK, committed = 0;
    shs_save_stats s = { 0 };

    /* the root creates the temporary directory and names it for all */
    if (me == root)
        shs__random_suffix(suffix);
    if ((rc = shs__comm_bcast(comm, suffix, sizeof suffix, root)) < 0)
        return rc;
    suffix[16] = '\0';
    snprintf(name, sizeof name, ".tmp-iteration_%08lld-%s", (long long)req->step, suffix);
    if (!(tmp = shs__path_join(req->save_path, name)))
        rc = shs__err(SHS_ENOMEM, "out of memory");
    if (me == root && rc == SHS_OK && (rc = shs__mkdirs(req->save_path, 0755)) == SHS_OK &&
        shs__io->mkdir(tmp, 0755) != 0)
        rc = shs__err_errno(errno, "cannot create", tmp);
    snprintf(msg, sizeof msg, "%s", shs_last_error());
    if ((rc = shs__comm_agree(comm, rc, msg)) < 0)
        goto fail;

    /* every rank writes its own files */
    uint8_t *skip = NULL;
    if (world > 1 && req->remove_redundancy)
        rc = plan_replicas(st, req, comm, &skip);
    if (rc == SHS_OK)
        rc = save_local(st, req, tmp, skip, &frag, &s);
    if (!req->layout_cache)
        shs__free(skip);
    if (rc == SHS_OK && !(text = json_dumps(frag, JSON_COMPACT)))
        rc = shs__err(SHS_ENOMEM, "out of memory");
    snprintf(msg, sizeof msg, "%s", shs_last_error());
    /* commit only if every rank succeeded; else every rank hears who failed */
    if ((rc = shs__comm_agree(comm, rc, msg)) < 0)
        goto fail;
    if ((rc = shs__comm_gather_bytes(comm, text, strlen(text), root, &all, &lens)) < 0)
        goto fail;
    /* balance of the written bytes over the ranks */
    uint64_t *written = shs__calloc((size_t)world, sizeof *written);
    if (!written || (rc = shs__comm_allgather(comm, &s.bytes_written, 8, written)) < 0) {
        shs__free(written);
        rc = rc < 0 ? rc : shs__err(SHS_ENOMEM, "out of memory");
        goto fail;
    }
    uint64_t sum = 0;
    for (int r = 0; r < world; r++) {
        sum += written[r];
        if (written[r] > s.max_rank_bytes)
            s.max_rank_bytes = written[r];
    }
    s.write_balance = sum ? (double)s.max_rank_bytes * world / (double)sum : 1.0;
    shs__free(written);
    if (me == root)
        rc = root_commit(req, tmp, all, lens, world, out_dir, out_cap, &committed);
    snprintf(msg, sizeof msg, "%s", shs_last_error());
    int agreed = shs__comm_agree(comm, me == root ? rc : SHS_OK, msg);
    if (me == root && rc < 0 && !committed)
        shs__rmtree(tmp);
    if (agreed < 0) {
        rc = agreed;
        goto done;
    }
    if (me != root && out_dir)
        snprintf(out_dir, out_cap, "%s/iteration_%08lld", req->save_path, (long long)req->step);
    if (stats)
        *stats = s;
    goto done;
fail:
    if (me == root && tmp)
        shs__rmtree(tmp);
done:
    free(text);
    json_decref(frag);
    shs__free(all);
    shs__free(lens);
    shs__free(tmp);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Load                                                               */
/* ------------------------------------------------------------------ */

typedef struct loader {
    const char *dir;
    const meta *m;
    shs_file **fh;            /* opened lazily, one per file */
} loader;

static int open_file(loader *L, uint32_t fi, shs_file **out)
{
    if (!L->fh[fi]) {
        char *p = shs__path_join(L->dir, L->m->f[fi].name);
        if (!p)
            return shs__err(SHS_ENOMEM, "out of memory");
        int rc = shs_file_open(&L->fh[fi], p, NULL);
        shs__free(p);
        if (rc < 0)
            return rc == SHS_ENOENT ? shs__err(SHS_ECORRUPT, "%s: missing file '%s' named in metadata.json",
                                               L->dir, L->m->f[fi].name)
                                    : rc;
    }
    *out = L->fh[fi];
    return SHS_OK;
}

/* Find `key` in file fi and check it is the chunk metadata describes. */
static int chunk_locate(loader *L, uint32_t fi, const char *key, uint64_t b0, uint64_t b1,
                        shs_file **out_f, size_t *out_idx)
{
    shs_file *f = NULL;
    int rc = open_file(L, fi, &f);
    if (rc < 0)
        return rc;
    size_t idx;
    if (shs_file_find(&idx, f, key) < 0)
        return shs__err(SHS_ECORRUPT, "%s/%s: no tensor '%s' (named in metadata.json)", L->dir,
                        L->m->f[fi].name, key);
    const shs_tensor_info *ti = shs_file_tensor(f, idx);
    uint64_t at = shs_file_data_start(f) + ti->offset;
    if (at != b0 || at + ti->nbytes != b1)
        return shs__err(SHS_ECORRUPT,
                        "%s/%s: tensor '%s' is at bytes [%llu, %llu), metadata.json says [%llu, %llu)",
                        L->dir, L->m->f[fi].name, key, (unsigned long long)at,
                        (unsigned long long)(at + ti->nbytes), (unsigned long long)b0,
                        (unsigned long long)b1);
    *out_f = f;
    *out_idx = idx;
    return SHS_OK;
}

static int check_hash(const loader *L, const mchunk *c, const char *tname, const void *data,
                      uint64_t n)
{
    if (!c->has_hash || shs__xxh3(data, (size_t)n) == c->hash)
        return SHS_OK;
    return shs__err(SHS_ECHECKSUM, "%s/%s: tensor '%s': data does not match its xxh3 checksum",
                    L->dir, L->m->f[c->file].name, tname);
}

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
   [src_start, +count) touches; *read_bytes counts them. */
static int check_blocks(const loader *L, const mchunk *c, const char *tname, const char *src,
                        unsigned bits, size_t ndim, const uint64_t *src_start,
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
            rc = shs__err(SHS_ECHECKSUM, "%s/%s: tensor '%s': block %zu does not match its "
                          "xxh3 checksum", L->dir, L->m->f[c->file].name, tname, q);
    }
    shs__free(b.mark);
    return rc;
}

/* Read a whole chunk into dst and check its checksum.  (Hashing block by
   block while the block is still in the cache measured no faster than one
   pass after the copy, and the one-shot hash has an AVX2 build.) */
static int read_hashed(const loader *L, const mchunk *c, const char *tname, shs_file *f,
                       size_t idx, void *dst, uint64_t n)
{
    int rc = shs_file_read_bytes(f, idx, 0, dst, (size_t)n);
    return rc < 0 ? rc : check_hash(L, c, tname, dst, n);
}

/* Fill the local box of t from every saved chunk that intersects it;
   *read_bytes counts what was read from storage. */
static int load_tensor(loader *L, shs__tensor *t, const mtensor *mt, uint64_t *read_bytes)
{
    int rc;
    unsigned bits = shs_dtype_bits(t->dtype);
    uint64_t want = 1, got = 0;
    for (size_t d = 0; d < t->ndim; d++)
        want *= t->shape[d];
    uint64_t ioff[SHS_MAX_DIMS], ishape[SHS_MAX_DIMS];
    uint64_t src_start[SHS_MAX_DIMS], dst_start[SHS_MAX_DIMS];
    for (size_t k = 0; k < mt->nc; k++) {
        const mchunk *c = &mt->c[k];
        /* replicas saved by several ranks: use the first */
        int dup = 0;
        for (size_t j = 0; j < k && !dup; j++)
            dup = memcmp(mt->c[j].off, c->off, t->ndim * sizeof(uint64_t)) == 0 &&
                  memcmp(mt->c[j].shape, c->shape, t->ndim * sizeof(uint64_t)) == 0;
        if (dup)
            continue;
        if (t->ndim && !shs__box_intersect(t->ndim, t->goff, t->shape, c->off, c->shape, ioff,
                                            ishape))
            continue;
        uint64_t vol = 1;
        for (size_t d = 0; d < t->ndim; d++)
            vol *= ishape[d];
        if (vol == 0)
            continue;
        shs_file *f;
        size_t idx;
        if ((rc = chunk_locate(L, c->file, c->key, c->b0, c->b1, &f, &idx)) < 0)
            return rc;
        const shs_tensor_info *ti = shs_file_tensor(f, idx);
        if (ti->dtype != mt->dtype || ti->ndim != t->ndim ||
            (t->ndim && memcmp(ti->shape, c->shape, t->ndim * sizeof(uint64_t)) != 0))
            return shs__err(SHS_ECORRUPT, "%s/%s: tensor '%s' has another dtype or shape than "
                            "metadata.json says", L->dir, L->m->f[c->file].name, c->key);
        int exact = vol == want;
        for (size_t d = 0; d < t->ndim && exact; d++)
            exact = c->off[d] == t->goff[d] && c->shape[d] == t->shape[d];
        if (exact) {
            /* the common case: the saved chunk is the requested box */
            if ((rc = read_hashed(L, c, t->name, f, idx, t->data, t->nbytes)) < 0)
                return rc;
            *read_bytes += t->nbytes;
        } else {
            const void *src = shs_file_tensor_data(f, idx);
            void *tmpbuf = NULL;
            if (!src) {
                if (!(tmpbuf = shs__malloc((size_t)ti->nbytes)))
                    return shs__err(SHS_ENOMEM, "out of memory reading '%s'", t->name);
                if ((rc = shs_file_read(f, idx, tmpbuf, (size_t)ti->nbytes)) < 0) {
                    shs__free(tmpbuf);
                    return rc;
                }
                src = tmpbuf;
            }
            for (size_t d = 0; d < t->ndim; d++) {
                src_start[d] = ioff[d] - c->off[d];
                dst_start[d] = ioff[d] - t->goff[d];
            }
            if (c->nblocks && !tmpbuf) {
                /* only the blocks this box touches are read and checked */
                rc = check_blocks(L, c, t->name, src, bits, t->ndim, src_start, ishape,
                                  read_bytes);
            } else {
                rc = check_hash(L, c, t->name, src, ti->nbytes);
                *read_bytes += ti->nbytes;
            }
            if (rc == SHS_OK) {
                shs__box_copy(t->data, t->shape, dst_start, src, c->shape, src_start, ishape,
                              t->ndim, bits);
            }
            shs__free(tmpbuf);
            if (rc < 0)
                return rc;
        }
        got += vol;
    }
    if (got != want)
        return shs__err(SHS_ECORRUPT,
                        "%s: tensor '%s': the saved chunks cover %llu of the %llu elements requested",
                        L->dir, t->name, (unsigned long long)got, (unsigned long long)want);
    return SHS_OK;
}

typedef struct load_pool {
    loader *L;
    shs_state *st;
    const shs__load_req *req;
    pthread_mutex_t mu;
    size_t next;             /* next tensor to take */
    uint64_t read_bytes;
    int rc;                  /* first error */
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
        const mtensor *mt = meta_find(p->L->m, t->name);
        uint64_t got = 0;
        int rc = mt ? load_tensor(p->L, t, mt, &got) : SHS_OK;
        pthread_mutex_lock(&p->mu);
        p->read_bytes += got;
        if (rc < 0 && p->rc == SHS_OK) {
            p->rc = rc;
            snprintf(p->msg, sizeof p->msg, "%s", shs_last_error());
        }
        pthread_mutex_unlock(&p->mu);
    }
}

/* Fill every registered tensor; with several workers the files are all
   opened first (a shs_file is read-only after open, so threads share it)
   and the tensors are taken from a common counter. */
static int load_tensors(loader *L, shs_state *st, const shs__load_req *req,
                        uint64_t *read_bytes)
{
    int workers = req->workers > 1 ? req->workers : 1;
    load_pool p = { L, st, req, PTHREAD_MUTEX_INITIALIZER, 0, 0, SHS_OK, "" };
    if (workers == 1) {
        load_worker(&p);
        *read_bytes = p.read_bytes;
        return p.rc < 0 ? shs__err(p.rc, "%s", p.msg) : SHS_OK;
    }
    for (size_t fi = 0; fi < L->m->nf; fi++) {
        shs_file *f;
        int rc = open_file(L, (uint32_t)fi, &f);
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

/*
 * load_balanced: every rank learns every rank's requested boxes; the same
 * pure plan on every rank gives each needed saved chunk one reader (read
 * bytes balanced over the ranks that need it) and the transfers from the
 * readers to the other ranks.  Transfers run in one global order (by
 * sender, then receiver and item) that every rank walks, taking part where
 * it sends or receives: with blocking point-to-point messages that order
 * cannot deadlock.  A rank whose read failed still sends (zeros) so that
 * the others do not hang; the error is agreed on afterwards.
 */
static int load_balanced_tensors(loader *L, shs_state *st, const shs__load_req *req,
                                 shs_comm *comm, uint64_t *read_bytes)
{
    const meta *m = L->m;
    const int me = comm->rank;
    layout_set ls = { 0 };
    shs_plan_tensor *tens = NULL;
    shs_plan_chunk *saved = NULL, *reqs = NULL;
    uint64_t *words = NULL;
    uint32_t *chunk_t = NULL, *chunk_k = NULL;
    long *req_state = NULL;
    void **bufs = NULL;
    char *tmp = NULL;
    shs__load_plan plan;
    int have_plan = 0, rc;
    *read_bytes = 0;
    if ((rc = gather_layouts(st, req->with_optim, comm, &ls)) < 0)
        return rc;
    size_t nsaved = 0, nw = 0;
    for (size_t j = 0; j < m->nt; j++) {
        nsaved += m->t[j].nc;
        nw += m->t[j].nc * 2 * m->t[j].ndim;
    }
    tens = shs__calloc(m->nt + 1, sizeof *tens);
    saved = shs__calloc(nsaved + 1, sizeof *saved);
    words = shs__calloc(nw + 1, sizeof *words);
    chunk_t = shs__calloc(nsaved + 1, sizeof *chunk_t);
    chunk_k = shs__calloc(nsaved + 1, sizeof *chunk_k);
    reqs = shs__calloc(ls.n + 1, sizeof *reqs);
    req_state = shs__calloc(ls.n + 1, sizeof *req_state);
    bufs = shs__calloc(nsaved + 1, sizeof *bufs);
    if (!tens || !saved || !words || !chunk_t || !chunk_k || !reqs || !req_state || !bufs) {
        rc = shs__err(SHS_ENOMEM, "out of memory planning a balanced load");
        goto done;
    }
    size_t si = 0, w = 0;
    for (size_t j = 0; j < m->nt; j++) {
        const mtensor *t = &m->t[j];
        tens[j] = (shs_plan_tensor){ (uint32_t)t->ndim, t->dtype, t->gshape };
        for (size_t k = 0; k < t->nc; k++, si++) {
            memcpy(&words[w], t->c[k].off, t->ndim * 8);
            memcpy(&words[w + t->ndim], t->c[k].shape, t->ndim * 8);
            saved[si] = (shs_plan_chunk){ (uint32_t)j, 0, &words[w] };
            chunk_t[si] = (uint32_t)j;
            chunk_k[si] = (uint32_t)k;
            w += 2 * t->ndim;
        }
    }
    size_t nreq = 0;
    for (size_t i = 0; i < ls.n; i++) {
        const lay_entry *x = &ls.e[i];
        char name[1024];
        if (x->name_len >= sizeof name)
            continue;
        memcpy(name, x->name, x->name_len);
        name[x->name_len] = '\0';
        const mtensor *t = meta_find(m, name);
        if (!t)
            continue; /* non-strict: skipped by its rank */
        req_state[nreq] = x->rank == (uint32_t)me ? shs__state_find(st, name, x->name_len) : -1;
        reqs[nreq++] = (shs_plan_chunk){ (uint32_t)(t - m->t), x->rank, x->box };
    }
    if ((rc = shs__plan_load(&plan, tens, (uint32_t)m->nt, saved, nsaved, reqs, nreq,
                             (uint32_t)comm->size, true)) < 0)
        goto done;
    have_plan = 1;
    /* 1. my reads, whole chunks, checksummed */
    int read_rc = SHS_OK;
    for (size_t r = plan.read_start[me]; r < plan.read_start[me + 1]; r++) {
        uint32_t c = plan.reads[r];
        const mchunk *ch = &m->t[chunk_t[c]].c[chunk_k[c]];
        uint64_t n = ch->b1 - ch->b0;
        if (!(bufs[c] = shs__calloc(1, (size_t)n + 1))) {
            rc = shs__err(SHS_ENOMEM, "out of memory for a %llu-byte chunk",
                          (unsigned long long)n);
            goto done;
        }
        shs_file *f;
        size_t idx;
        if (read_rc == SHS_OK &&
            ((read_rc = chunk_locate(L, ch->file, ch->key, ch->b0, ch->b1, &f, &idx)) < 0 ||
             (read_rc = read_hashed(L, ch, m->t[chunk_t[c]].name, f, idx, bufs[c], n)) < 0))
            continue;
        *read_bytes += n;
    }
    /* 2. transfers, in the global order */
    uint64_t ioff[SHS_MAX_DIMS], ishape[SHS_MAX_DIMS], s0[SHS_MAX_DIMS], d0[SHS_MAX_DIMS];
    uint64_t zero[SHS_MAX_DIMS] = { 0 };
    for (uint32_t src = 0; src < plan.nranks && rc == SHS_OK; src++) {
        for (size_t q = plan.send_start[src]; q < plan.send_start[src + 1] && rc == SHS_OK; q++) {
            const shs__load_item *it = &plan.items[plan.sends[q]];
            int dst = (int)reqs[it->req].rank;
            if (me != (int)src && me != dst)
                continue;
            const mtensor *t = &m->t[chunk_t[it->chunk]];
            const mchunk *ch = &t->c[chunk_k[it->chunk]];
            uint64_t n = shs__load_item_box(&plan, it, ioff, ishape);
            unsigned bits = shs_dtype_bits(t->dtype);
            shs__free(tmp);
            if (!(tmp = shs__calloc(1, (size_t)n + 1))) {
                rc = shs__err(SHS_ENOMEM, "out of memory");
                break;
            }
            if (me == (int)src) {
                for (size_t d = 0; d < t->ndim; d++)
                    s0[d] = ioff[d] - ch->off[d];
                shs__box_copy(tmp, ishape, zero, bufs[it->chunk], ch->shape, s0, ishape,
                              t->ndim, bits);
                rc = comm->ops.send(comm->ctx, tmp, (size_t)n, dst, 7101);
            } else {
                rc = comm->ops.recv(comm->ctx, tmp, (size_t)n, (int)src, 7101);
                const shs__tensor *mt = &st->t[req_state[it->req]];
                for (size_t d = 0; d < t->ndim; d++)
                    d0[d] = ioff[d] - mt->goff[d];
                if (rc == SHS_OK)
                    shs__box_copy(mt->data, mt->shape, d0, tmp, ishape, zero, ishape, t->ndim,
                                  bits);
            }
        }
    }
    if (rc < 0)
        goto done;
    /* 3. the parts I read for myself */
    for (size_t q = plan.item_start[me]; q < plan.item_start[me + 1]; q++) {
        const shs__load_item *it = &plan.items[q];
        if ((int)it->src != me)
            continue;
        const mtensor *t = &m->t[chunk_t[it->chunk]];
        const mchunk *ch = &t->c[chunk_k[it->chunk]];
        const shs__tensor *mt = &st->t[req_state[it->req]];
        shs__load_item_box(&plan, it, ioff, ishape);
        for (size_t d = 0; d < t->ndim; d++) {
            s0[d] = ioff[d] - ch->off[d];
            d0[d] = ioff[d] - mt->goff[d];
        }
        shs__box_copy(mt->data, mt->shape, d0, bufs[it->chunk], ch->shape, s0, ishape, t->ndim,
                      shs_dtype_bits(t->dtype));
    }
    rc = read_rc;
done:
    if (have_plan) {
        for (size_t r = plan.read_start[me]; r < plan.read_start[me + 1]; r++)
            shs__free(bufs[plan.reads[r]]);
        shs__load_plan_release(&plan);
    }
    shs__free(tmp);
    shs__free(bufs);
    shs__free(req_state);
    shs__free(reqs);
    shs__free(chunk_k);
    shs__free(chunk_t);
    shs__free(words);
    shs__free(saved);
    shs__free(tens);
    layout_set_release(&ls);
    return rc;
}

static void note_skipped(shs_load_result *res, const char *name)
{
    if (!res)
        return;
    res->n_skipped++;
    size_t at = strlen(res->skipped);
    if (at + strlen(name) + 2 < sizeof res->skipped)
        snprintf(res->skipped + at, sizeof res->skipped - at, "%s%s", at ? "," : "", name);
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
        char msg[256];
        snprintf(msg, sizeof msg, "%s", shs_last_error());
        rc = shs__comm_agree(comm, rc, msg);
    }
    return rc;
}

static int ckpt_load(shs_state *st, const char *dir, const shs__load_req *req, shs_comm *comm,
                     shs_progress *progress, shs_load_result *res, int *agreed)
{
    meta m;
    int rc;
    struct stat sb;
    char *mp = shs__path_join(dir, "metadata.json");
    if (!mp)
        return shs__err(SHS_ENOMEM, "out of memory");
    int has_meta = stat(mp, &sb) == 0;
    shs__free(mp);
    if ((rc = has_meta ? meta_parse(&m, dir) : meta_from_plain(&m, dir)) < 0)
        return rc;
    loader L = { dir, &m, shs__calloc(m.nf + 1, sizeof(shs_file *)) };
    if (!L.fh) {
        meta_free(&m);
        return shs__err(SHS_ENOMEM, "out of memory");
    }
    /* 1. check the registered state against the checkpoint */
    char missing[512] = "";
    size_t n_missing = 0;
    for (size_t i = 0; i < st->n; i++) {
        shs__tensor *t = &st->t[i];
        if (t->kind == SHS_KIND_OPTIMIZER && !req->with_optim)
            continue;
        const mtensor *mt = meta_find(&m, t->name);
        if (!mt) {
            if (req->strict) {
                size_t at = strlen(missing);
                if (at + strlen(t->name) + 2 < sizeof missing)
                    snprintf(missing + at, sizeof missing - at, "%s%s", at ? ", " : "", t->name);
                n_missing++;
            } else {
                note_skipped(res, t->name);
            }
            continue;
        }
        int same = mt->dtype == t->dtype && mt->ndim == t->ndim && mt->kind == t->kind;
        for (size_t d = 0; same && d < t->ndim; d++)
            same = mt->gshape[d] == t->gshape[d];
        if (!same) {
            char a[128] = "", b[128] = "";
            for (size_t d = 0; d < t->ndim && strlen(a) < 100; d++)
                snprintf(a + strlen(a), sizeof a - strlen(a), "%s%llu", d ? "," : "",
                         (unsigned long long)t->gshape[d]);
            for (size_t d = 0; d < mt->ndim && strlen(b) < 100; d++)
                snprintf(b + strlen(b), sizeof b - strlen(b), "%s%llu", d ? "," : "",
                         (unsigned long long)mt->gshape[d]);
            rc = shs__err(SHS_EMISMATCH,
                          "%s: tensor '%s': registered as %s %s [%s], saved as %s %s [%s]", dir,
                          t->name, k_kind_name[t->kind], shs_dtype_name(t->dtype), a,
                          k_kind_name[mt->kind], shs_dtype_name(mt->dtype), b);
            goto done;
        }
    }
    if (n_missing) {
        rc = shs__err(SHS_EMISMATCH, "%s: %zu registered tensor(s) not in the checkpoint: %s",
                      dir, n_missing, missing);
        goto done;
    }
    char extra[512] = "";
    size_t n_extra = 0;
    for (size_t j = 0; j < m.nt; j++) {
        const mtensor *mt = &m.t[j];
        if (mt->kind == SHS_KIND_OPTIMIZER && !req->with_optim)
            continue;
        if (shs__state_find(st, mt->name, strlen(mt->name)) >= 0)
            continue;
        if (!req->strict) {
            note_skipped(res, mt->name);
            continue;
        }
        size_t at = strlen(extra);
        if (at + strlen(mt->name) + 2 < sizeof extra)
            snprintf(extra + at, sizeof extra - at, "%s%s", at ? ", " : "", mt->name);
        n_extra++;
    }
    if (n_extra) {
        rc = shs__err(SHS_EMISMATCH,
                      "%s: %zu tensor(s) in the checkpoint are not registered: %s "
                      "(non-strict loading skips them)", dir, n_extra, extra);
        goto done;
    }
    /* 2. tensors: by `workers` threads, or balanced over the ranks */
    uint64_t read_bytes = 0;
    if (req->balanced && comm->size > 1) {
        /* collective from here on: every rank must get here, or hear why */
        char msg[256] = "";
        *agreed = 1;
        if ((rc = shs__comm_agree(comm, SHS_OK, msg)) < 0 ||
            (rc = load_balanced_tensors(&L, st, req, comm, &read_bytes)) < 0)
            goto done;
    } else if ((rc = load_tensors(&L, st, req, &read_bytes)) < 0) {
        goto done;
    }
    /* 3. rank-local blobs: only when the world is the same */
    int same_world = m.world_size == req->world_size;
    for (size_t k = 0; same_world && k < m.nb; k++) {
        const mblob *b = &m.b[k];
        if (b->rank != req->rank || (shs__blob_exclude_flag(b->name) & req->exclude))
            continue;
        shs_file *f;
        size_t idx;
        if ((rc = chunk_locate(&L, b->file, b->key, b->b0, b->b1, &f, &idx)) < 0)
            goto done;
        size_t len = (size_t)(b->b1 - b->b0);
        void *buf = shs__malloc(len ? len : 1);
        if (!buf) {
            rc = shs__err(SHS_ENOMEM, "out of memory");
            goto done;
        }
        rc = shs_file_read(f, idx, buf, len);
        if (rc == SHS_OK && shs__xxh3(buf, len) != b->hash)
            rc = shs__err(SHS_ECHECKSUM, "%s/%s: blob '%s' does not match its checksum", dir,
                          m.f[b->file].name, b->name);
        if (rc == SHS_OK)
            rc = shs__state_put_blob(st, b->name, buf, len);
        shs__free(buf);
        if (rc < 0)
            goto done;
    }
    /* 4. progress */
    int progress_loaded = 0;
    if (progress && has_meta && !(req->exclude & SHS_EXCLUDE_TRAIN_STATE)) {
        shs_progress p = *progress;
        if ((rc = read_common(&p, dir)) < 0)
            goto done;
        *progress = p;
        progress_loaded = 1;
    }
    if (res) {
        res->loaded = 1;
        snprintf(res->path, sizeof res->path, "%s", dir);
        res->step = m.step;
        res->optimizer_loaded = req->with_optim;
        res->progress_loaded = progress_loaded;
        res->rank_state_restored = same_world && m.nb > 0;
        res->bytes_read = read_bytes;
        res->saved_world_size = m.world_size;
    }
    rc = SHS_OK;
done:
    for (size_t i = 0; i < m.nf; i++)
        shs_file_close(L.fh[i]);
    shs__free(L.fh);
    meta_free(&m);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Resolve, verify                                                    */
/* ------------------------------------------------------------------ */

static int is_step_dir(const char *path)
{
    char *mp = shs__path_join(path, "metadata.json");
    struct stat st;
    int r = mp && stat(mp, &st) == 0;
    shs__free(mp);
    return r;
}

int shs_checkpoint_resolve(char *out, size_t cap, const char *path, int64_t step)
{
    struct stat st;
    int rc;
    if (!out || !path || !*path)
        return shs__err(SHS_EINVAL, "shs_checkpoint_resolve: empty path");
    if (stat(path, &st) != 0)
        return shs__err_errno(errno, "cannot find checkpoint path", path);
    if (!S_ISDIR(st.st_mode))
        return shs__err(SHS_EINVAL, "%s: a checkpoint path is a directory", path);
    if (is_step_dir(path)) {
        snprintf(out, cap, "%s", path);
        return SHS_OK;
    }
    int64_t *steps = NULL;
    size_t n = 0;
    if ((rc = shs__list_steps(&steps, &n, path)) < 0)
        return rc;
    int64_t pick = -1;
    if (step >= 0) {
        for (size_t i = 0; i < n; i++)
            if (steps[i] == step)
                pick = step;
        if (pick < 0) {
            shs__free(steps);
            return shs__err(SHS_ENOCHECKPOINT, "%s: no complete checkpoint of step %lld", path,
                            (long long)step);
        }
    } else {
        int64_t tracked;
        rc = shs__read_tracker(&tracked, path);
        if (rc == SHS_OK) {
            for (size_t i = 0; i < n; i++)
                if (steps[i] == tracked)
                    pick = tracked;
            if (pick < 0) {
                shs__free(steps);
                return shs__err(SHS_ECORRUPT,
                                "%s/" SHS__TRACKER " names step %lld, but there is no complete "
                                "directory of that step", path, (long long)tracked);
            }
        } else if (rc == SHS_ENOENT) {
            pick = n ? steps[n - 1] : -1;
        } else {
            shs__free(steps);
            return rc;
        }
    }
    shs__free(steps);
    if (pick < 0) {
        /* a plain directory of safetensors files is a checkpoint too */
        DIR *d = opendir(path);
        struct dirent *e;
        int any = 0;
        while (d && (e = readdir(d)) && !any)
            any = ends_with(e->d_name, ".safetensors");
        if (d)
            closedir(d);
        if (any) {
            snprintf(out, cap, "%s", path);
            return SHS_OK;
        }
        return shs__err(SHS_ENOCHECKPOINT, "%s: no checkpoint", path);
    }
    char name[40];
    snprintf(name, sizeof name, "iteration_%08lld", (long long)pick);
    char *full = shs__path_join(path, name);
    if (full && !is_step_dir(full)) {
        snprintf(name, sizeof name, "step-%lld", (long long)pick);
        shs__free(full);
        full = shs__path_join(path, name);
    }
    if (!full)
        return shs__err(SHS_ENOMEM, "out of memory");
    snprintf(out, cap, "%s", full);
    shs__free(full);
    return SHS_OK;
}

int shs_checkpoint_verify(const char *dir)
{
    meta m;
    int rc;
    if (!dir)
        return shs__err(SHS_EINVAL, "shs_checkpoint_verify: NULL path");
    if ((rc = meta_parse(&m, dir)) < 0)
        return rc;
    loader L = { dir, &m, shs__calloc(m.nf + 1, sizeof(shs_file *)) };
    void *buf = NULL;
    if (!L.fh) {
        meta_free(&m);
        return shs__err(SHS_ENOMEM, "out of memory");
    }
    for (size_t j = 0; j < m.nt && rc == SHS_OK; j++) {
        for (size_t k = 0; k < m.t[j].nc && rc == SHS_OK; k++) {
            const mchunk *c = &m.t[j].c[k];
            shs_file *f;
            size_t idx;
            if ((rc = chunk_locate(&L, c->file, c->key, c->b0, c->b1, &f, &idx)) < 0)
                break;
            const void *p = shs_file_tensor_data(f, idx);
            if (!p) {
                shs__free(buf);
                if (!(buf = shs__malloc((size_t)(c->b1 - c->b0) + 1))) {
                    rc = shs__err(SHS_ENOMEM, "out of memory");
                    break;
                }
                if ((rc = shs_file_read(f, idx, buf, (size_t)(c->b1 - c->b0))) < 0)
                    break;
                p = buf;
            }
            rc = check_hash(&L, c, m.t[j].name, p, c->b1 - c->b0);
            for (size_t q = 0; rc == SHS_OK && q < c->nblocks; q++) {
                uint64_t at = (uint64_t)q * c->block, n = c->b1 - c->b0;
                uint64_t len = n - at < c->block ? n - at : c->block;
                if (shs__xxh3((const char *)p + at, (size_t)len) != c->blocks[q])
                    rc = shs__err(SHS_ECHECKSUM, "%s: tensor '%s': block %zu does not match its "
                                  "xxh3 checksum", dir, m.t[j].name, q);
            }
        }
    }
    for (size_t k = 0; k < m.nb && rc == SHS_OK; k++) {
        const mblob *b = &m.b[k];
        shs_file *f;
        size_t idx;
        if ((rc = chunk_locate(&L, b->file, b->key, b->b0, b->b1, &f, &idx)) < 0)
            break;
        const void *p = shs_file_tensor_data(f, idx);
        if (!p) {
            shs__free(buf);
            if (!(buf = shs__malloc((size_t)(b->b1 - b->b0) + 1))) {
                rc = shs__err(SHS_ENOMEM, "out of memory");
                break;
            }
            if ((rc = shs_file_read(f, idx, buf, (size_t)(b->b1 - b->b0))) < 0)
                break;
            p = buf;
        }
        if (shs__xxh3(p, (size_t)(b->b1 - b->b0)) != b->hash)
            rc = shs__err(SHS_ECHECKSUM, "%s: blob '%s' does not match its checksum", dir,
                          b->name);
    }
    /* every listed file must exist and be valid, even one no chunk uses */
    for (size_t i = 0; i < m.nf && rc == SHS_OK; i++) {
        shs_file *f;
        rc = open_file(&L, (uint32_t)i, &f);
    }
    if (rc == SHS_OK) {
        shs_progress p;
        rc = read_common(&p, dir);
    }
    shs__free(buf);
    for (size_t i = 0; i < m.nf; i++)
        shs_file_close(L.fh[i]);
    shs__free(L.fh);
    meta_free(&m);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Public read-only view and save-path maintenance                    */
/* ------------------------------------------------------------------ */

struct shs_checkpoint {
    meta m;
    shs_ckpt_tensor_info *info;
};

int shs_checkpoint_open(shs_checkpoint **out, const char *dir)
{
    if (!out || !dir)
        return shs__err(SHS_EINVAL, "shs_checkpoint_open: NULL argument");
    *out = NULL;
    shs_checkpoint *c = shs__calloc(1, sizeof *c);
    if (!c)
        return shs__err(SHS_ENOMEM, "out of memory");
    int rc = is_step_dir(dir) ? meta_parse(&c->m, dir) : meta_from_plain(&c->m, dir);
    if (rc < 0) {
        shs__free(c);
        return rc;
    }
    c->info = shs__calloc(c->m.nt + 1, sizeof *c->info);
    if (!c->info) {
        shs_checkpoint_close(c);
        return shs__err(SHS_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < c->m.nt; i++) {
        const mtensor *t = &c->m.t[i];
        c->info[i] = (shs_ckpt_tensor_info){ t->name, t->kind, t->dtype, t->ndim, t->gshape,
                                             t->nc };
    }
    *out = c;
    return SHS_OK;
}

void shs_checkpoint_close(shs_checkpoint *c)
{
    if (!c)
        return;
    meta_free(&c->m);
    shs__free(c->info);
    shs__free(c);
}

int64_t shs_checkpoint_step(const shs_checkpoint *c) { return c->m.step; }
int shs_checkpoint_world_size(const shs_checkpoint *c) { return c->m.world_size; }
int shs_checkpoint_is_plain(const shs_checkpoint *c) { return c->m.plain; }
size_t shs_checkpoint_file_count(const shs_checkpoint *c) { return c->m.nf; }
size_t shs_checkpoint_tensor_count(const shs_checkpoint *c) { return c->m.nt; }
size_t shs_checkpoint_blob_count(const shs_checkpoint *c) { return c->m.nb; }

const char *shs_checkpoint_file_name(const shs_checkpoint *c, size_t i)
{
    return i < c->m.nf ? c->m.f[i].name : NULL;
}

int shs_checkpoint_file_rank(const shs_checkpoint *c, size_t i)
{
    return i < c->m.nf ? c->m.f[i].rank : -1;
}

const shs_ckpt_tensor_info *shs_checkpoint_tensor(const shs_checkpoint *c, size_t i)
{
    return i < c->m.nt ? &c->info[i] : NULL;
}

int shs_checkpoint_find(size_t *out, const shs_checkpoint *c, const char *name)
{
    const mtensor *t = meta_find(&c->m, name);
    if (!t)
        return shs__err(SHS_ENOTFOUND, "no tensor named '%s' in the checkpoint", name);
    *out = (size_t)(t - c->m.t);
    return SHS_OK;
}

int shs_checkpoint_chunk(shs_chunk_info *out, const shs_checkpoint *c, size_t ti, size_t ci)
{
    if (ti >= c->m.nt || ci >= c->m.t[ti].nc)
        return shs__err(SHS_ERANGE, "chunk %zu of tensor %zu out of range", ci, ti);
    const mchunk *k = &c->m.t[ti].c[ci];
    *out = (shs_chunk_info){ k->off, k->shape, k->file, k->key, k->b0, k->b1, k->hash,
                             k->has_hash };
    return SHS_OK;
}

int shs_checkpoint_blob(shs_blob_info *out, const shs_checkpoint *c, size_t i)
{
    if (i >= c->m.nb)
        return shs__err(SHS_ERANGE, "blob %zu out of range", i);
    const mblob *b = &c->m.b[i];
    *out = (shs_blob_info){ b->name, b->rank, b->file, b->key, b->b0, b->b1, b->hash };
    return SHS_OK;
}

int shs_checkpoint_read_progress(shs_progress *out, const char *dir)
{
    if (!out || !dir)
        return shs__err(SHS_EINVAL, "shs_checkpoint_read_progress: NULL argument");
    return read_common(out, dir);
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
    return shs__remove_step(save_path, step);
}

int shs_checkpoint_clean(const char *save_path)
{
    if (!save_path)
        return shs__err(SHS_EINVAL, "shs_checkpoint_clean: NULL argument");
    return shs__clean_leftovers(save_path);
}
