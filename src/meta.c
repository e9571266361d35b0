/*
 * meta.c -- metadata.json of a step directory, parsed and validated into
 * the model of meta.h, and the same model for a plain directory of
 * safetensors files.  Format: docs/checkpoint.md.
 */
#include "meta.h"

#include "io.h"
#include "stepdir.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define META_MAX (1u << 30)   /* metadata.json larger than this is refused */

const char *const shs__kind_name[2] = { "model", "opt" };

void shs__meta_free(shs__meta *m)
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

const shs__mtensor *shs__meta_find(const shs__meta *m, const char *name)
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
    return strcmp(((const shs__mtensor *)a)->name, ((const shs__mtensor *)b)->name);
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

void shs__hex64(char out[17], uint64_t v)
{
    snprintf(out, 17, "%016llx", (unsigned long long)v);
}

int shs__parse_hex64(uint64_t *out, const char *s)
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

int shs__meta_parse(shs__meta *m, const char *dir)
{
    int rc = SHS_OK;
    json_t *root = NULL;
    char *buf = NULL;
    size_t len;
    memset(m, 0, sizeof *m);
    char *path = shs__path_join(dir, "metadata.json");
    if (!path)
        return shs__err(SHS_ENOMEM, "out of memory");
    if ((rc = shs__read_file_nofollow(&buf, &len, path, META_MAX)) < 0)
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
    if (get_u64(root, "version", &ver) || ver != SHS__META_VERSION)
        BAD("%s: unsupported \"version\" (this build reads version %d)", path, SHS__META_VERSION);
    if (get_u64(root, "step", &step) || get_u64(root, "world_size", &ws) || ws < 1 ||
        ws > (1u << 24))
        BAD("%s: \"step\" and \"world_size\" must be positive integers", path);
    m->step = (int64_t)step;
    m->world_size = (int)ws;
    json_t *files = json_object_get(root, "files");
    if (!json_is_array(files))
        BAD("%s: \"files\" must be an array", path);
    size_t nf = json_array_size(files);
    m->f = shs__calloc(nf ? nf : 1, sizeof *m->f);
    if (!m->f)
        OOM();
    m->nf = nf; /* only now: shs__meta_free walks m->f[0..nf) */
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
        shs__mtensor *t = &m->t[m->nt];
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
        size_t nc = json_array_size(chunks);
        t->c = shs__calloc(nc ? nc : 1, sizeof *t->c);
        if (!t->c)
            OOM();
        t->nc = nc; /* only now, as m->nf above */
        for (size_t k = 0; k < t->nc; k++) {
            json_t *cj = json_array_get(chunks, k);
            shs__mchunk *c = &t->c[k];
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
                if (!json_is_string(h) || shs__parse_hex64(&c->hash, json_string_value(h)) < 0)
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
                    if (!json_is_string(x) ||
                        shs__parse_hex64(&c->blocks[q], json_string_value(x)) < 0)
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
    size_t nb = blobs ? json_array_size(blobs) : 0;
    m->b = shs__calloc(nb ? nb : 1, sizeof *m->b);
    if (!m->b)
        OOM();
    m->nb = nb; /* only now, as m->nf above */
    for (size_t i = 0; i < m->nb; i++) {
        json_t *bj = json_array_get(blobs, i);
        shs__mblob *b = &m->b[i];
        json_t *name = json_object_get(bj, "name"), *key = json_object_get(bj, "key");
        json_t *br = json_object_get(bj, "byte_range"), *h = json_object_get(bj, "xxh3");
        uint64_t rank, file;
        if (!json_is_object(bj) || !json_is_string(name) || !json_is_string(key) ||
            get_u64(bj, "rank", &rank) || rank >= ws || get_u64(bj, "file", &file) ||
            file >= m->nf || !json_is_array(br) || json_array_size(br) != 2 ||
            !json_is_integer(json_array_get(br, 0)) || !json_is_integer(json_array_get(br, 1)) ||
            !json_is_string(h) || shs__parse_hex64(&b->hash, json_string_value(h)) < 0)
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
    shs__meta_free(m);
    return rc;
}

int shs__meta_from_plain(shs__meta *m, const char *dir)
{
    int rc = SHS_OK;
    const char *path = dir;
    memset(m, 0, sizeof *m);
    m->plain = 1;
    m->world_size = 1;
    m->step = shs__step_of_name(strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir);
    char **names = NULL;
    size_t n = 0, all = 0;
    if (shs__io->list_dir(dir, &names, &all) != 0)
        return shs__err_errno(errno, "cannot open checkpoint directory", dir);
    /* keep the safetensors files (the listing is sorted already) */
    for (size_t i = 0; i < all; i++) {
        if (shs__is_safetensors_name(names[i]) && plain_file_name(names[i]))
            names[n++] = names[i];
        else
            shs__free(names[i]);
    }
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
        shs__meta_free(m);
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
                shs__mtensor *nt = shs__realloc(m->t, cap_t * sizeof *nt);
                if (!nt) {
                    shs_file_close(f);
                    OOM();
                }
                m->t = nt;
            }
            shs__mtensor *t = &m->t[m->nt];
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
    shs__meta_free(m);
    return rc;
}

#undef OOM
#undef BAD
