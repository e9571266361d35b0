/*
 * st_header.c -- checks 4-8 of the order in st_parse.h: UTF-8, then the
 * safetensors schema of the header on top of the JSON scanner of st_json.c
 * (tensor entries, __metadata__, duplicates), then the layout of the data.
 */
#include "format/layout.h"
#include "format/st_parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((format(printf, 3, 4))) static void defer(shs__hdr_parser *ps, int status,
                                                        const char *fmt, ...)
{
    if (ps->deferred)
        return;
    ps->deferred = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->deferred_msg, sizeof ps->deferred_msg, fmt, ap);
    va_end(ap);
}

/* Parse `[u64, ...]` into the shape arena.  Non-integers are deferred
   schema errors; the syntax is always checked. */
static int parse_uint_array(shs__hdr_parser *ps, const char *tname, const char *field,
                            size_t *count)
{
    int rc;
    *count = 0;
    ps->js.p++; /* '[' */
    shs__hdr_skip_ws(ps);
    if (ps->js.p < ps->js.end && *ps->js.p == ']') {
        ps->js.p++;
        return SHS_OK;
    }
    for (;;) {
        shs__hdr_skip_ws(ps);
        if (ps->js.p >= ps->js.end)
            return shs__hdr_syntax_err(ps, "unexpected end of header");
        char c = *ps->js.p;
        if (c == '-' || (c >= '0' && c <= '9')) {
            int is_uint;
            uint64_t v;
            if ((rc = shs__hdr_number(ps, &is_uint, &v)) < 0)
                return rc;
            if (!is_uint)
                defer(ps, SHS_ESCHEMA,
                      "%s: tensor '%s': %s must hold non-negative integers below 2^64",
                      ps->js.fname, tname, field);
            if (ps->n_shapes == ps->cap_shapes) {
                size_t cap = ps->cap_shapes ? ps->cap_shapes * 2 : 1024;
                uint64_t *s = shs__realloc(ps->shapes, cap * sizeof *s);
                if (!s)
                    return shs__err(SHS_ENOMEM, "%s: out of memory parsing header", ps->js.fname);
                ps->shapes = s;
                ps->cap_shapes = cap;
            }
            ps->shapes[ps->n_shapes++] = v;
            (*count)++;
        } else {
            defer(ps, SHS_ESCHEMA, "%s: tensor '%s': %s must hold integers", ps->js.fname, tname,
                  field);
            if ((rc = shs__hdr_skip_value(ps, 3)) < 0)
                return rc;
        }
        if ((rc = shs__hdr_next_member(ps, ']')) <= 0)
            return rc;
    }
}

const char *shs__st_tensor_name(const void *ctx, uint32_t i, size_t *len)
{
    const shs__st_tensor *t = (const shs__st_tensor *)ctx + i;
    *len = t->info.name_len;
    return t->info.name;
}

/* Value of a tensor entry: {"dtype": .., "shape": [..], "data_offsets": [a, b]} */
static int parse_tensor(shs__hdr_parser *ps, shs__st_tensor *t)
{
    int rc;
    const char *name = t->info.name;
    enum {
        F_DTYPE = 1,
        F_SHAPE = 2,
        F_OFFSETS = 4,
        MAX_EXTRA = 64
    };
    unsigned seen = 0;
    /* unknown fields, kept to reject duplicates among them too */
    const char *extra[MAX_EXTRA];
    size_t extra_len[MAX_EXTRA], n_extra = 0;
    shs__hdr_skip_ws(ps);
    if (ps->js.p >= ps->js.end)
        return shs__hdr_syntax_err(ps, "unexpected end of header");
    if (*ps->js.p != '{') {
        defer(ps, SHS_ESCHEMA, "%s: tensor '%s': value must be an object", ps->js.fname, name);
        return shs__hdr_skip_value(ps, 1);
    }
    ps->js.p++;
    shs__hdr_skip_ws(ps);
    if (ps->js.p < ps->js.end && *ps->js.p == '}') {
        ps->js.p++;
        goto check;
    }
    for (;;) {
        const char *kstart;
        size_t klen;
        /* keys are compared decoded, as serde does ("sh\u0061pe" is
           "shape"); the arena has room for every string of the header */
        if ((rc = shs__hdr_key(ps, &kstart, &klen)) < 0)
            return rc;
        if (ps->js.p >= ps->js.end)
            return shs__hdr_syntax_err(ps, "unexpected end of header");
        unsigned field = 0;
        if (klen == 5 && memcmp(kstart, "dtype", 5) == 0)
            field = F_DTYPE;
        else if (klen == 5 && memcmp(kstart, "shape", 5) == 0)
            field = F_SHAPE;
        else if (klen == 12 && memcmp(kstart, "data_offsets", 12) == 0)
            field = F_OFFSETS;
        if (field && (seen & field))
            defer(ps, SHS_EDUPLICATE, "%s: tensor '%s': duplicate field '%.*s'", ps->js.fname, name,
                  (int)klen, kstart);
        seen |= field;
        if (field == F_DTYPE) {
            if (*ps->js.p != '"') {
                defer(ps, SHS_ESCHEMA, "%s: tensor '%s': dtype must be a string", ps->js.fname,
                      name);
                if ((rc = shs__hdr_skip_value(ps, 2)) < 0)
                    return rc;
            } else {
                const char *ds;
                size_t dlen;
                if ((rc = shs__hdr_string(ps, &ds, &dlen)) < 0)
                    return rc;
                shs_dtype dt;
                if (shs_dtype_parse(&dt, ds, dlen) < 0)
                    defer(ps, SHS_EDTYPE, "%s: tensor '%s': unknown dtype \"%.*s\"", ps->js.fname,
                          name, dlen > 40 ? 40 : (int)dlen, ds);
                else
                    t->info.dtype = dt;
            }
        } else if (field == F_SHAPE || field == F_OFFSETS) {
            const char *fname = field == F_SHAPE ? "shape" : "data_offsets";
            if (*ps->js.p != '[') {
                defer(ps, SHS_ESCHEMA, "%s: tensor '%s': %s must be an array", ps->js.fname, name,
                      fname);
                if ((rc = shs__hdr_skip_value(ps, 2)) < 0)
                    return rc;
            } else {
                size_t at = ps->n_shapes, n;
                if ((rc = parse_uint_array(ps, name, fname, &n)) < 0)
                    return rc;
                if (field == F_SHAPE) {
                    if (n > SHS_MAX_DIMS)
                        defer(ps, SHS_ESCHEMA, "%s: tensor '%s': %zu dimensions (at most %d)",
                              ps->js.fname, name, n, SHS_MAX_DIMS);
                    t->shape_at = at;
                    t->info.ndim = n;
                } else {
                    if (n != 2)
                        defer(ps, SHS_ESCHEMA,
                              "%s: tensor '%s': data_offsets must hold exactly 2 integers, not %zu",
                              ps->js.fname, name, n);
                    else {
                        t->begin = ps->shapes[at];
                        t->end = ps->shapes[at + 1];
                    }
                    ps->n_shapes = at; /* offsets do not stay in the arena */
                }
            }
        } else {
            /* unknown field: ignored by the reference, but must be JSON
               and, for us, unique */
            for (size_t i = 0; i < n_extra; i++)
                if (extra_len[i] == klen && memcmp(extra[i], kstart, klen) == 0)
                    defer(ps, SHS_EDUPLICATE, "%s: tensor '%s': duplicate field '%s'", ps->js.fname,
                          name, kstart);
            if (n_extra == MAX_EXTRA)
                defer(ps, SHS_ESCHEMA, "%s: tensor '%s': more than %d unknown fields", ps->js.fname,
                      name, MAX_EXTRA);
            else {
                extra[n_extra] = kstart;
                extra_len[n_extra++] = klen;
            }
            if ((rc = shs__hdr_skip_value(ps, 2)) < 0)
                return rc;
        }
        if ((rc = shs__hdr_next_member(ps, '}')) <= 0) {
            if (rc < 0)
                return rc;
            break;
        }
    }
check:
    if ((seen & (F_DTYPE | F_SHAPE | F_OFFSETS)) != (F_DTYPE | F_SHAPE | F_OFFSETS))
        defer(ps, SHS_ESCHEMA, "%s: tensor '%s': missing field '%s'", ps->js.fname, name,
              !(seen & F_DTYPE)   ? "dtype"
              : !(seen & F_SHAPE) ? "shape"
                                  : "data_offsets");
    return SHS_OK;
}

static int parse_metadata(shs__hdr_parser *ps)
{
    int rc;
    shs__hdr_skip_ws(ps);
    if (ps->js.p >= ps->js.end)
        return shs__hdr_syntax_err(ps, "unexpected end of header");
    if (*ps->js.p == 'n') {
        /* "__metadata__": null is Option::None in the reference */
        return shs__hdr_literal(ps, "null", 4);
    }
    if (*ps->js.p != '{') {
        defer(ps, SHS_ESCHEMA, "%s: __metadata__ must be an object of strings", ps->js.fname);
        return shs__hdr_skip_value(ps, 1);
    }
    ps->has_meta = 1;
    ps->js.p++;
    shs__hdr_skip_ws(ps);
    if (ps->js.p < ps->js.end && *ps->js.p == '}') {
        ps->js.p++;
        return SHS_OK;
    }
    for (;;) {
        shs__st_meta e;
        if ((rc = shs__hdr_key(ps, &e.key, &e.key_len)) < 0)
            return rc;
        if (ps->js.p >= ps->js.end)
            return shs__hdr_syntax_err(ps, "unexpected end of header");
        if (*ps->js.p == '"') {
            if ((rc = shs__hdr_string(ps, &e.value, &e.value_len)) < 0)
                return rc;
            if (ps->n_meta == ps->cap_meta) {
                size_t cap = ps->cap_meta ? ps->cap_meta * 2 : 8;
                shs__st_meta *m = shs__realloc(ps->meta, cap * sizeof *m);
                if (!m)
                    return shs__err(SHS_ENOMEM, "%s: out of memory parsing header", ps->js.fname);
                ps->meta = m;
                ps->cap_meta = cap;
            }
            ps->meta[ps->n_meta++] = e;
        } else {
            defer(ps, SHS_ESCHEMA, "%s: __metadata__ value of '%s' must be a string", ps->js.fname,
                  e.key);
            if ((rc = shs__hdr_skip_value(ps, 2)) < 0)
                return rc;
        }
        if ((rc = shs__hdr_next_member(ps, '}')) <= 0)
            return rc;
    }
}

static int cmp_nested_key(const void *a, const void *b)
{
    const struct nested_key *x = a, *y = b;
    if (x->obj != y->obj)
        return x->obj < y->obj ? -1 : 1;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return memcmp(x->key, y->key, x->len);
}

/* A duplicate key in an object nested inside an ignored value is an
   error too (the reference keeps the last silently). */
static void check_nested_keys(shs__hdr_parser *ps)
{
    if (ps->js.n_nk < 2)
        return;
    qsort(ps->js.nk, ps->js.n_nk, sizeof *ps->js.nk, cmp_nested_key);
    for (size_t i = 1; i < ps->js.n_nk; i++)
        if (cmp_nested_key(&ps->js.nk[i - 1], &ps->js.nk[i]) == 0) {
            defer(ps, SHS_EDUPLICATE,
                  "%s: duplicate key '%s' in an object inside an unknown "
                  "field",
                  ps->js.fname, ps->js.nk[i].key);
            return;
        }
}

static int parse_header(shs__hdr_parser *ps)
{
    int rc;
    shs__hdr_skip_ws(ps);
    if (ps->js.p >= ps->js.end)
        return shs__hdr_syntax_err(ps, "empty header");
    if (*ps->js.p != '{')
        return shs__hdr_syntax_err(ps, "a safetensors header must be a JSON object");
    ps->js.p++;
    shs__hdr_skip_ws(ps);
    if (ps->js.p < ps->js.end && *ps->js.p == '}') {
        ps->js.p++;
        goto done;
    }
    for (;;) {
        const char *name = NULL;
        size_t name_len = 0;
        if ((rc = shs__hdr_key(ps, &name, &name_len)) < 0)
            return rc;
        if (name_len == 12 && memcmp(name, "__metadata__", 12) == 0) {
            if (ps->seen_meta)
                defer(ps, SHS_EDUPLICATE, "%s: duplicate key '__metadata__'", ps->js.fname);
            ps->seen_meta = 1;
            if ((rc = parse_metadata(ps)) < 0)
                return rc;
        } else {
            if (ps->n_tensors == ps->cap_tensors) {
                size_t cap = ps->cap_tensors ? ps->cap_tensors * 2 : 64;
                if (cap > UINT32_MAX - 1)
                    return shs__err(SHS_ESCHEMA, "%s: too many tensors", ps->js.fname);
                shs__st_tensor *t = shs__realloc(ps->tensors, cap * sizeof *t);
                if (!t)
                    return shs__err(SHS_ENOMEM, "%s: out of memory parsing header", ps->js.fname);
                ps->tensors = t;
                ps->cap_tensors = cap;
            }
            shs__st_tensor *t = &ps->tensors[ps->n_tensors];
            memset(t, 0, sizeof *t);
            t->info.name = name;
            t->info.name_len = name_len;
            t->doc_index = (uint32_t)ps->n_tensors;
            ps->n_tensors++;
            uint32_t existing;
            rc = shs__namemap_insert(&ps->names, name, name_len, t->doc_index, shs__st_tensor_name,
                                     ps->tensors, &existing);
            if (rc < 0)
                return rc;
            if (rc == 0)
                defer(ps, SHS_EDUPLICATE, "%s: duplicate tensor name '%s'", ps->js.fname, name);
            if ((rc = parse_tensor(ps, t)) < 0)
                return rc;
        }
        if ((rc = shs__hdr_next_member(ps, '}')) <= 0) {
            if (rc < 0)
                return rc;
            break;
        }
    }
done:
    shs__hdr_skip_ws(ps);
    if (ps->js.p != ps->js.end)
        return shs__hdr_syntax_err(ps, "trailing characters after the header object");
    check_nested_keys(ps);
    if (ps->deferred)
        return shs__err(ps->deferred, "%s", ps->deferred_msg);
    return SHS_OK;
}

/* ------------------------------------------------------------------ */
/* Validation and assembly                                            */
/* ------------------------------------------------------------------ */

static int cmp_offsets(const void *a, const void *b)
{
    const shs__st_tensor *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

int shs__st_cmp_meta(const void *a, const void *b)
{
    const shs__st_meta *x = a, *y = b;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(x->key, y->key, n);
    if (c)
        return c;
    return x->key_len < y->key_len ? -1 : x->key_len > y->key_len;
}

static int validate(shs_file *f, shs__hdr_parser *ps)
{
    const char *fname = ps->js.fname;
    int rc;
    /* Duplicate metadata keys belong to the schema checks, which come
       before the data checks. */
    if (ps->n_meta > 1)
        qsort(ps->meta, ps->n_meta, sizeof *ps->meta, shs__st_cmp_meta);
    for (size_t i = 1; i < ps->n_meta; i++)
        if (shs__st_cmp_meta(&ps->meta[i - 1], &ps->meta[i]) == 0)
            return shs__err(SHS_EDUPLICATE, "%s: duplicate __metadata__ key '%s'", fname,
                            ps->meta[i].key);
    /* Data order.  Writers (ours and the reference) emit tensors in data
       order, so the sort is usually skipped. */
    int sorted = 1;
    for (size_t i = 1; i < ps->n_tensors && sorted; i++)
        sorted = cmp_offsets(&ps->tensors[i - 1], &ps->tensors[i]) <= 0;
    if (!sorted) {
        qsort(ps->tensors, ps->n_tensors, sizeof *ps->tensors, cmp_offsets);
        uint32_t *perm = shs__calloc(ps->n_tensors ? ps->n_tensors : 1, sizeof *perm);
        if (!perm)
            return shs__err(SHS_ENOMEM, "%s: out of memory validating header", fname);
        for (size_t i = 0; i < ps->n_tensors; i++)
            perm[ps->tensors[i].doc_index] = (uint32_t)i;
        shs__namemap_remap(&ps->names, perm);
        shs__free(perm);
    }
    uint64_t start = 0;
    for (size_t i = 0; i < ps->n_tensors; i++) {
        shs__st_tensor *t = &ps->tensors[i];
        t->info.shape = ps->shapes + t->shape_at;
        if (t->begin != start || t->end < t->begin)
            return shs__err(
                SHS_EOFFSET, "%s: tensor '%s': data_offsets [%llu, %llu] %s (expected start %llu)",
                fname, t->info.name, (unsigned long long)t->begin, (unsigned long long)t->end,
                t->end < t->begin  ? "end before start"
                : t->begin > start ? "leave a gap"
                                   : "overlap the previous tensor",
                (unsigned long long)start);
        start = t->end;
        uint64_t numel = 1;
        for (size_t d = 0; d < t->info.ndim; d++)
            if (shs__mul_u64(numel, t->info.shape[d], &numel))
                return shs__err(SHS_EOVERFLOW, "%s: tensor '%s': element count overflows", fname,
                                t->info.name);
        uint64_t nbytes;
        if ((rc = shs__nbytes_from_numel(&nbytes, t->info.dtype, numel)) < 0)
            return shs__err(rc, "%s: tensor '%s': %llu elements of %s %s", fname, t->info.name,
                            (unsigned long long)numel, shs_dtype_name(t->info.dtype),
                            rc == SHS_EOVERFLOW ? "overflow 64 bits" : "do not fill whole bytes");
        if (t->end - t->begin != nbytes)
            return shs__err(SHS_ETENSOR_SIZE,
                            "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, "
                            "but %llu elements of %s need %llu",
                            fname, t->info.name, (unsigned long long)t->begin,
                            (unsigned long long)t->end, (unsigned long long)(t->end - t->begin),
                            (unsigned long long)numel, shs_dtype_name(t->info.dtype),
                            (unsigned long long)nbytes);
        t->info.numel = numel;
        t->info.offset = t->begin;
        t->info.nbytes = nbytes;
    }
    uint64_t expect = start + 8 + f->header_len;
    if (expect < start || expect != f->file_size)
        return shs__err(
            SHS_ETRAILING,
            "%s: tensor data ends at byte %llu of the file, but the file has %llu bytes", fname,
            (unsigned long long)(start + 8 + f->header_len), (unsigned long long)f->file_size);
    return SHS_OK;
}

int shs__st_parse_header(shs_file *f, const char *fname)
{
    shs__hdr_parser ps;
    memset(&ps, 0, sizeof ps);
    int rc;
    size_t bad = shs__utf8_check((const unsigned char *)f->header, f->header_len);
    if (bad != f->header_len)
        return shs__err(SHS_EUTF8, "%s: header is not valid UTF-8 (byte %zu of the header)", fname,
                        bad);
    f->arena = shs__malloc(f->header_len + 1);
    if (!f->arena)
        return shs__err(SHS_ENOMEM, "%s: out of memory for a %llu-byte header", fname,
                        (unsigned long long)f->header_len);
    ps.js.p = ps.js.start = f->header;
    ps.js.end = f->header + f->header_len;
    ps.js.fname = fname;
    ps.js.arena = f->arena;
    /* Estimate the tensor count so the name table rarely grows: an entry
       takes at least ~50 bytes of JSON. */
    if ((rc = shs__namemap_init(&ps.names, f->header_len / 64 + 8)) < 0)
        goto done;
    if ((rc = parse_header(&ps)) < 0)
        goto done;
    if ((rc = validate(f, &ps)) < 0)
        goto done;
    f->tensors = ps.tensors;
    f->n_tensors = ps.n_tensors;
    f->shapes = ps.shapes;
    f->meta = ps.meta;
    f->n_meta = ps.n_meta;
    f->has_meta = ps.has_meta;
    f->names = ps.names;
    for (size_t i = 0; i < f->n_tensors; i++)
        f->tensors[i].info.shape = f->shapes + f->tensors[i].shape_at;
    shs__free(ps.js.nk);
    return SHS_OK;
done:
    shs__free(ps.js.nk);
    shs__free(ps.tensors);
    shs__free(ps.shapes);
    shs__free(ps.meta);
    shs__namemap_release(&ps.names);
    return rc;
}
