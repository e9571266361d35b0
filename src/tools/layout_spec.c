/*
 * layout_spec.c -- layouts in the vocabulary of docs/reshard.md (see
 * layout_spec.h): resolved into boxes per rank, scaled to another world
 * size, derived from the boxes the ranks of a save hold.
 *
 * MindSpore's convention, which the mesh form follows: ranks sit on a
 * row-major mesh of shape device_matrix (last axis fastest), rank_list[k]
 * at position k; tensor_map[d] = m splits dimension d over mesh axis
 * len(device_matrix) - 1 - m (-1: not split; a list: several axes, the
 * slice index row-major over them in the order listed).
 */
#include "tools/layout_spec.h"

#include <stdlib.h>
#include <string.h>

#define BAD(...)                                                                                   \
    do {                                                                                           \
        rc = shs__err(SHS_EINVAL, __VA_ARGS__);                                                    \
        goto done;                                                                                 \
    } while (0)

void shs__lboxes_release(shs__lboxes *b)
{
    shs__free(b->rank);
    shs__free(b->off);
    shs__free(b->shape);
    size_t nd = b->ndim;
    memset(b, 0, sizeof *b);
    b->ndim = nd;
}

int shs__lboxes_add(shs__lboxes *b, int rank, const uint64_t *off, const uint64_t *shape)
{
    if (b->n == b->cap) {
        size_t c = b->cap ? b->cap * 2 : 8, nd = b->ndim ? b->ndim : 1;
        int *r = shs__realloc(b->rank, c * sizeof *r);
        if (r)
            b->rank = r;
        uint64_t *o = r ? shs__realloc(b->off, c * nd * 8) : NULL;
        if (o)
            b->off = o;
        uint64_t *s = o ? shs__realloc(b->shape, c * nd * 8) : NULL;
        if (!s)
            return shs__err(SHS_ENOMEM, "out of memory for a layout");
        b->shape = s;
        b->cap = c;
    }
    b->rank[b->n] = rank;
    if (b->ndim) {
        memcpy(b->off + b->n * b->ndim, off, b->ndim * 8);
        memcpy(b->shape + b->n * b->ndim, shape, b->ndim * 8);
    }
    b->n++;
    return SHS_OK;
}

/* An integer in [lo, hi]. */
static int get_int(const json_t *v, json_int_t lo, json_int_t hi, json_int_t *out)
{
    if (!json_is_integer(v))
        return 0;
    *out = json_integer_value(v);
    return *out >= lo && *out <= hi;
}

/* Every key of `o` is one of `keys` (NULL-terminated); else the first
   that is not. */
static const char *unknown_key(const json_t *o, const char *const *keys)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v)
    {
        size_t i = 0;
        while (keys[i] && strcmp(keys[i], k) != 0)
            i++;
        if (!keys[i])
            return k;
    }
    return NULL;
}

/* A parsed mesh spec. */
typedef struct mesh {
    size_t na;                              /* mesh axes */
    uint64_t dm[SHS_MAX_DIMS];              /* their sizes */
    uint64_t p;                             /* positions: product of dm */
    uint8_t ax[SHS_MAX_DIMS][SHS_MAX_DIMS]; /* per tensor dim: its axes */
    uint8_t nax[SHS_MAX_DIMS];
    int *rl; /* rank_list (p entries), NULL: 0..p-1 */
} mesh;

static const char *const k_mesh_keys[] = { "device_matrix",        "tensor_map", "rank_list",
                                           "interleaved_parallel", "alias_name", NULL };

/* One tensor_map entry (dim d): -1, an axis value, or a list of them. */
static int parse_map_entry(mesh *m, size_t d, const json_t *e, uint8_t *used)
{
    json_int_t v;
    size_t n = json_is_array(e) ? json_array_size(e) : 1;
    if (get_int(e, -1, -1, &v))
        return 1;
    if (n == 0 || n > m->na)
        return 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_is_array(e) ? json_array_get(e, i) : e;
        if (!get_int(x, 0, (json_int_t)m->na - 1, &v))
            return 0;
        size_t a = m->na - 1 - (size_t)v;
        if (used[a]++)
            return 0;
        m->ax[d][m->nax[d]++] = (uint8_t)a;
    }
    return 1;
}

static int parse_mesh(mesh *m, const json_t *spec, const char *name, size_t ndim, int world,
                      const char *where)
{
    int rc = SHS_OK;
    uint8_t used[SHS_MAX_DIMS] = { 0 };
    memset(m, 0, sizeof *m);
    const char *bad = unknown_key(spec, k_mesh_keys);
    const json_t *dm = json_object_get(spec, "device_matrix");
    const json_t *tm = json_object_get(spec, "tensor_map");
    const json_t *rl = json_object_get(spec, "rank_list");
    const json_t *ip = json_object_get(spec, "interleaved_parallel");
    if (bad)
        BAD("%s: tensor '%s': unknown key '%s' in a device_matrix layout", where, name, bad);
    m->na = json_array_size(dm);
    if (m->na == 0 || m->na > SHS_MAX_DIMS)
        BAD("%s: tensor '%s': \"device_matrix\" must be an array of 1 to %d positive integers",
            where, name, SHS_MAX_DIMS);
    m->p = 1;
    for (size_t a = 0; a < m->na; a++) {
        json_int_t v;
        if (!get_int(json_array_get(dm, a), 1, SHS__LAYOUT_MAX_WORLD, &v) ||
            shs__mul_u64(m->p, (uint64_t)v, &m->p) || m->p > SHS__LAYOUT_MAX_WORLD)
            BAD("%s: tensor '%s': \"device_matrix\" must hold positive integers whose product is "
                "at most %d",
                where, name, SHS__LAYOUT_MAX_WORLD);
        m->dm[a] = (uint64_t)v;
    }
    if (ip && !json_is_false(ip))
        BAD("%s: tensor '%s': \"interleaved_parallel\" layouts are not supported", where, name);
    if (!json_is_array(tm) || json_array_size(tm) != ndim)
        BAD("%s: tensor '%s': \"tensor_map\" must be an array of %zu entries (one per dimension)",
            where, name, ndim);
    for (size_t d = 0; d < ndim; d++)
        if (!parse_map_entry(m, d, json_array_get(tm, d), used))
            BAD("%s: tensor '%s': \"tensor_map\" entry %zu must be -1, a mesh axis value from 0 "
                "to %zu, or a list of them, each axis used once",
                where, name, d, m->na - 1);
    if (!rl) {
        if (m->p > (uint64_t)world)
            BAD("%s: tensor '%s': device_matrix has %llu positions but the world has %d ranks",
                where, name, (unsigned long long)m->p, world);
        goto done;
    }
    if (!json_is_array(rl) || json_array_size(rl) != m->p)
        BAD("%s: tensor '%s': \"rank_list\" must hold %llu ranks (the device_matrix's product)",
            where, name, (unsigned long long)m->p);
    uint8_t *seen = shs__calloc((size_t)world, 1);
    if (!(m->rl = shs__calloc((size_t)m->p, sizeof *m->rl)) || !seen) {
        shs__free(seen);
        rc = shs__err(SHS_ENOMEM, "out of memory for a layout");
        goto done;
    }
    for (size_t k = 0; k < m->p && rc == SHS_OK; k++) {
        json_int_t v = 0;
        if (!get_int(json_array_get(rl, k), 0, world - 1, &v) || seen[v]++)
            rc = shs__err(SHS_EINVAL,
                          "%s: tensor '%s': \"rank_list\" entry %zu must be a rank from 0 to %d, "
                          "each rank listed once",
                          where, name, k, world - 1);
        m->rl[k] = (int)v;
    }
    shs__free(seen);
done:
    if (rc < 0) {
        shs__free(m->rl);
        m->rl = NULL;
    }
    return rc;
}

static int resolve_mesh(shs__lboxes *b, const json_t *spec, const char *name, size_t ndim,
                        const uint64_t *g, int world, const char *where)
{
    mesh m;
    int rc = parse_mesh(&m, spec, name, ndim, world, where);
    uint64_t size[SHS_MAX_DIMS], off[SHS_MAX_DIMS], stride[SHS_MAX_DIMS];
    if (rc < 0)
        return rc;
    for (size_t d = 0; d < ndim; d++) {
        uint64_t split = 1;
        for (size_t i = 0; i < m.nax[d]; i++)
            split *= m.dm[m.ax[d][i]];
        if (g[d] % split != 0)
            BAD("%s: tensor '%s': dimension %zu (size %llu) does not divide into %llu equal "
                "slices",
                where, name, d, (unsigned long long)g[d], (unsigned long long)split);
        size[d] = g[d] / split;
    }
    stride[m.na - 1] = 1;
    for (size_t a = m.na - 1; a > 0; a--)
        stride[a - 1] = stride[a] * m.dm[a];
    for (uint64_t k = 0; k < m.p && rc == SHS_OK; k++) {
        for (size_t d = 0; d < ndim; d++) {
            uint64_t idx = 0;
            for (size_t i = 0; i < m.nax[d]; i++) {
                size_t a = m.ax[d][i];
                idx = idx * m.dm[a] + (k / stride[a]) % m.dm[a];
            }
            off[d] = idx * size[d];
        }
        rc = shs__lboxes_add(b, m.rl ? m.rl[k] : (int)k, off, size);
    }
done:
    shs__free(m.rl);
    return rc;
}

static int boxes_overlap(const uint64_t *ao, const uint64_t *as, const uint64_t *bo,
                         const uint64_t *bs, size_t nd)
{
    for (size_t d = 0; d < nd; d++)
        if (as[d] == 0 || bs[d] == 0 || ao[d] + as[d] <= bo[d] || bo[d] + bs[d] <= ao[d])
            return 0;
    return 1;
}

/* Distinct boxes disjoint and covering the tensor (equal ones are
   replicas); one box per rank. */
static int check_tiling(const shs__lboxes *b, const char *name, const uint64_t *g,
                        const char *where)
{
    size_t nd = b->ndim;
    uint64_t numel = 1, sum = 0;
    for (size_t d = 0; d < nd; d++)
        numel *= g[d];
    for (size_t k = 0; k < b->n; k++) {
        const uint64_t *ko = b->off + k * nd, *ks = b->shape + k * nd;
        int replica = 0;
        /* every earlier box for the rank check, not only up to the first
           equal one: a replica may sit on a rank that already has a box */
        for (size_t j = 0; j < k; j++) {
            const uint64_t *jo = b->off + j * nd, *js = b->shape + j * nd;
            if (b->rank[j] == b->rank[k])
                return shs__err(SHS_EINVAL, "%s: tensor '%s': rank %d has two boxes", where, name,
                                b->rank[k]);
            if (replica)
                continue; /* its overlaps are those of the box it repeats */
            if ((nd == 0 || (!memcmp(jo, ko, nd * 8) && !memcmp(js, ks, nd * 8))))
                replica = 1;
            else if (boxes_overlap(jo, js, ko, ks, nd))
                return shs__err(SHS_EINVAL, "%s: tensor '%s': the boxes of ranks %d and %d overlap",
                                where, name, b->rank[j], b->rank[k]);
        }
        if (replica)
            continue;
        uint64_t v = 1;
        for (size_t d = 0; d < nd; d++)
            v *= ks[d];
        sum += v;
    }
    if (sum != numel || b->n == 0)
        return shs__err(SHS_EINVAL,
                        "%s: tensor '%s': the boxes cover %llu of its %llu elements (they must "
                        "tile it)",
                        where, name, (unsigned long long)sum, (unsigned long long)numel);
    return SHS_OK;
}

static const char *const k_box_keys[] = { "rank", "offset", "shape", NULL };

static int get_dims(const json_t *a, size_t nd, uint64_t *out)
{
    if (!json_is_array(a) || json_array_size(a) != nd)
        return 0;
    for (size_t d = 0; d < nd; d++) {
        json_int_t v;
        if (!get_int(json_array_get(a, d), 0, INT64_MAX, &v))
            return 0;
        out[d] = (uint64_t)v;
    }
    return 1;
}

static int resolve_boxes(shs__lboxes *b, const json_t *spec, const char *name, size_t nd,
                         const uint64_t *g, int world, const char *where)
{
    const json_t *list = json_object_get(spec, "boxes");
    uint64_t off[SHS_MAX_DIMS], shape[SHS_MAX_DIMS];
    if (json_object_size(spec) != 1 || !json_is_array(list) || json_array_size(list) == 0)
        return shs__err(SHS_EINVAL,
                        "%s: tensor '%s': \"boxes\" must be a non-empty array, alone in its "
                        "layout",
                        where, name);
    for (size_t k = 0; k < json_array_size(list); k++) {
        const json_t *e = json_array_get(list, k);
        json_int_t r;
        if (!json_is_object(e) || unknown_key(e, k_box_keys) ||
            !get_int(json_object_get(e, "rank"), 0, world - 1, &r) ||
            !get_dims(json_object_get(e, "offset"), nd, off) ||
            !get_dims(json_object_get(e, "shape"), nd, shape))
            return shs__err(SHS_EINVAL,
                            "%s: tensor '%s': box %zu must be {\"rank\": 0..%d, \"offset\": "
                            "[%zu integers], \"shape\": [%zu integers]}",
                            where, name, k, world - 1, nd, nd);
        for (size_t d = 0; d < nd; d++)
            if (off[d] > g[d] || shape[d] > g[d] - off[d])
                return shs__err(SHS_EINVAL, "%s: tensor '%s': box %zu is outside the tensor", where,
                                name, k);
        int rc = shs__lboxes_add(b, (int)r, off, shape);
        if (rc < 0)
            return rc;
    }
    return check_tiling(b, name, g, where);
}

/* The mesh spec of a split or replicated spec over `world` ranks. */
static int short_form_mesh(json_t **out, const json_t *spec, const char *name, size_t nd, int world,
                           const char *where)
{
    static const char *const keys[] = { "split_dim", "ranks", "replicated", NULL };
    const json_t *sd = json_object_get(spec, "split_dim"), *rk = json_object_get(spec, "ranks");
    const json_t *rep = json_object_get(spec, "replicated");
    json_int_t d = -1, n = world;
    *out = NULL;
    if (unknown_key(spec, keys) || (sd && rep) || (rep && !json_is_true(rep)) || (rk && !sd) ||
        (sd && !get_int(sd, 0, (json_int_t)nd - 1, &d)) || (rk && !get_int(rk, 1, world, &n)))
        return shs__err(SHS_EINVAL,
                        "%s: tensor '%s': expected {\"split_dim\": 0..%d, \"ranks\": 1..%d} or "
                        "{\"replicated\": true}",
                        where, name, (int)nd - 1, world);
    if (world % n != 0)
        return shs__err(SHS_EINVAL,
                        "%s: tensor '%s': a split over %lld ranks does not divide the world "
                        "of %d ranks",
                        where, name, (long long)n, world);
    json_t *tm = json_array();
    for (size_t i = 0; tm && i < nd; i++)
        if (json_array_append_new(tm, json_integer((json_int_t)i == d ? 0 : -1)) < 0) {
            json_decref(tm);
            tm = NULL;
        }
    json_t *dm = !tm             ? NULL
                 : d < 0         ? json_pack("[i]", world)
                 : world / n > 1 ? json_pack("[I, I]", (json_int_t)(world / n), n)
                                 : json_pack("[I]", n);
    *out = dm ? json_pack("{s:o, s:o}", "device_matrix", dm, "tensor_map", tm) : NULL;
    if (!dm)
        json_decref(tm);
    return *out ? SHS_OK : shs__err(SHS_ENOMEM, "out of memory for a layout");
}

int shs__layout_resolve(shs__lboxes *b, const json_t *spec, const char *name, size_t ndim,
                        const uint64_t *gshape, int world, const char *where)
{
    if (!json_is_object(spec))
        return shs__err(SHS_EINVAL, "%s: tensor '%s': a layout must be a JSON object", where, name);
    if (json_object_get(spec, "boxes"))
        return resolve_boxes(b, spec, name, ndim, gshape, world, where);
    if (json_object_get(spec, "device_matrix"))
        return resolve_mesh(b, spec, name, ndim, gshape, world, where);
    if (json_object_get(spec, "split_dim") || json_object_get(spec, "replicated")) {
        json_t *m;
        int rc = short_form_mesh(&m, spec, name, ndim, world, where);
        if (rc == SHS_OK)
            rc = resolve_mesh(b, m, name, ndim, gshape, world, where);
        json_decref(m);
        return rc;
    }
    return shs__err(SHS_EINVAL,
                    "%s: tensor '%s': a layout needs \"device_matrix\" and \"tensor_map\", "
                    "\"split_dim\", \"replicated\" or \"boxes\"",
                    where, name);
}

/* ---- scaling to another world size ---- */

static int scale_mesh(json_t **out, const json_t *spec, const char *name, size_t ndim, int world,
                      int to, const char *where)
{
    mesh m;
    int split[SHS_MAX_DIMS] = { 0 };
    uint64_t s = 1, r = 1;
    int rc = parse_mesh(&m, spec, name, ndim, world, where);
    if (rc < 0)
        return rc;
    for (uint64_t k = 0; m.rl && k < m.p; k++)
        if (m.rl[k] != (int)k)
            BAD("%s: tensor '%s': a layout with an explicit \"rank_list\" cannot be scaled from "
                "%d to %d ranks: give the target layout",
                where, name, world, to);
    if (m.p != (uint64_t)world)
        BAD("%s: tensor '%s': its device_matrix covers %llu of the %d ranks: it cannot be "
            "scaled to %d ranks",
            where, name, (unsigned long long)m.p, world, to);
    for (size_t d = 0; d < SHS_MAX_DIMS; d++)
        for (size_t i = 0; i < m.nax[d]; i++)
            split[m.ax[d][i]] = 1;
    for (size_t a = 0; a < m.na; a++)
        *(split[a] ? &s : &r) *= m.dm[a];
    json_t *o = json_deep_copy(spec), *dm = json_array();
    if (!o || !dm) {
        json_decref(o);
        json_decref(dm);
        rc = shs__err(SHS_ENOMEM, "out of memory for a layout");
        goto done;
    }
    json_object_del(o, "rank_list");
    if (json_object_set_new(o, "device_matrix", dm) < 0)
        rc = SHS_ENOMEM;
    if (s == 1) {
        /* replicated on every rank: so it stays */
        json_object_del(o, "alias_name");
        if (rc == SHS_OK && json_array_append_new(dm, json_integer(to)) < 0)
            rc = SHS_ENOMEM;
        /* a dimension "split" over axes of size 1 names axes the one-axis
           mesh does not have: nothing is split */
        json_t *tm = json_array();
        if (!tm || json_object_set_new(o, "tensor_map", tm) < 0)
            rc = SHS_ENOMEM;
        for (size_t d = 0; d < ndim && rc == SHS_OK; d++)
            if (json_array_append_new(tm, json_integer(-1)) < 0)
                rc = SHS_ENOMEM;
        goto built;
    }
    uint64_t s2 = (uint64_t)to / r;
    size_t pick = SHS_MAX_DIMS;
    for (size_t a = m.na; a-- > 0 && pick == SHS_MAX_DIMS && to % r == 0;)
        if (split[a] && m.dm[a] * s2 % s == 0 && m.dm[a] * s2 / s >= 1)
            pick = a;
    if (pick == SHS_MAX_DIMS) {
        json_decref(o);
        BAD("%s: tensor '%s': its split over %llu ranks (replicated %llu times) cannot be "
            "scaled from %d to %d ranks",
            where, name, (unsigned long long)s, (unsigned long long)r, world, to);
    }
    m.dm[pick] = m.dm[pick] * s2 / s;
    for (size_t a = 0; a < m.na && rc == SHS_OK; a++)
        if (json_array_append_new(dm, json_integer((json_int_t)m.dm[a])) < 0)
            rc = SHS_ENOMEM;
built:
    if (rc < 0) {
        json_decref(o);
        rc = shs__err(SHS_ENOMEM, "out of memory for a layout");
        goto done;
    }
    *out = o;
done:
    shs__free(m.rl);
    return rc;
}

int shs__layout_scale(json_t **out, const json_t *spec, const char *name, size_t ndim, int world,
                      int to, const char *where)
{
    *out = NULL;
    if (!json_is_object(spec))
        return shs__err(SHS_EINVAL, "%s: tensor '%s': a layout must be a JSON object", where, name);
    if (json_object_get(spec, "boxes"))
        return shs__err(SHS_EINVAL,
                        "%s: tensor '%s': explicit boxes cannot be scaled from %d to %d ranks: "
                        "give the target layout",
                        where, name, world, to);
    if (json_object_get(spec, "device_matrix"))
        return scale_mesh(out, spec, name, ndim, world, to, where);
    const json_t *rk = json_object_get(spec, "ranks");
    json_int_t n = world;
    if (json_object_get(spec, "split_dim") && rk && get_int(rk, 1, world, &n)) {
        /* the split scales with the world, the replication stays */
        if ((uint64_t)n * (uint64_t)to % (uint64_t)world != 0 ||
            (uint64_t)n * (uint64_t)to < (uint64_t)world)
            return shs__err(SHS_EINVAL,
                            "%s: tensor '%s': a split over %lld of %d ranks cannot be scaled to "
                            "%d ranks",
                            where, name, (long long)n, world, to);
        *out = json_deep_copy(spec);
        if (!*out || json_object_set_new(*out, "ranks",
                                         json_integer((json_int_t)((uint64_t)n * (uint64_t)to /
                                                                   (uint64_t)world))) < 0) {
            json_decref(*out);
            *out = NULL;
            return shs__err(SHS_ENOMEM, "out of memory for a layout");
        }
        return SHS_OK;
    }
    /* replicated, a split over the whole world, or malformed (which
       resolving reports) */
    *out = json_deep_copy(spec);
    return *out ? SHS_OK : shs__err(SHS_ENOMEM, "out of memory for a layout");
}

/* ---- deriving the spec of saved boxes ---- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int shs__lboxes_sort(shs__lboxes *b)
{
    size_t n = b->n, nd = b->ndim;
    uint64_t *key = shs__calloc(n + 1, 8);
    int *rank = shs__calloc(n + 1, sizeof *rank);
    uint64_t *off = shs__calloc(n * nd + 1, 8), *shape = shs__calloc(n * nd + 1, 8);
    if (!key || !rank || !off || !shape) {
        shs__free(key);
        shs__free(rank);
        shs__free(off);
        shs__free(shape);
        return shs__err(SHS_ENOMEM, "out of memory for a layout");
    }
    /* (rank, index) in one word: ranks are below 2^24, boxes below 2^32 */
    for (size_t k = 0; k < n; k++)
        key[k] = ((uint64_t)(uint32_t)b->rank[k] << 32) | k;
    qsort(key, n, 8, cmp_u64);
    for (size_t k = 0; k < n; k++) {
        size_t j = (size_t)(key[k] & 0xffffffffu);
        rank[k] = b->rank[j];
        memcpy(off + k * nd, b->off + j * nd, nd * 8);
        memcpy(shape + k * nd, b->shape + j * nd, nd * 8);
    }
    shs__free(key);
    shs__free(b->rank);
    shs__free(b->off);
    shs__free(b->shape);
    b->rank = rank;
    b->off = off;
    b->shape = shape;
    b->cap = n;
    return SHS_OK;
}

static json_t *dims_json(const uint64_t *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer((json_int_t)v[i])) < 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *boxes_json(const shs__lboxes *b)
{
    json_t *list = json_array(), *o = list ? json_pack("{s:o}", "boxes", list) : NULL;
    for (size_t k = 0; o && k < b->n; k++) {
        size_t nd = b->ndim;
        json_t *e = json_pack("{s:i, s:o, s:o}", "rank", b->rank[k], "offset",
                              dims_json(b->off + k * nd, nd), "shape",
                              dims_json(b->shape + k * nd, nd));
        if (!e || json_array_append_new(list, e) < 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

/* The grid of the boxes: per dimension the number of slices s[d] and
   their size; 0 when the boxes are no even grid. */
static int even_grid(const shs__lboxes *b, const uint64_t *g, uint64_t *s, uint64_t *size,
                     uint64_t *tmp)
{
    size_t nd = b->ndim;
    for (size_t d = 0; d < nd; d++) {
        for (size_t k = 0; k < b->n; k++)
            tmp[k] = b->off[k * nd + d];
        qsort(tmp, b->n, 8, cmp_u64);
        s[d] = 0;
        for (size_t k = 0; k < b->n; k++)
            s[d] += k == 0 || tmp[k] != tmp[k - 1];
        if (g[d] == 0 ? s[d] != 1 : g[d] % s[d] != 0)
            return 0;
        size[d] = g[d] / s[d];
        for (size_t k = 0; k < b->n; k++)
            if (b->shape[k * nd + d] != size[d] || b->off[k * nd + d] > g[d] - size[d] ||
                (size[d] && b->off[k * nd + d] % size[d] != 0))
                return 0;
    }
    return 1;
}

/* MindSpore's vocabulary for an even grid with R replicas of each slice:
   device_matrix [R, splits...] (R only when > 1), ranks placed at
   rep * S + slice, holders of a slice in ascending rank order. */
static json_t *mesh_json(const shs__lboxes *b, const uint64_t *s, const uint64_t *size,
                         uint64_t *tmp)
{
    size_t nd = b->ndim, n = b->n;
    uint64_t S = 1;
    for (size_t d = 0; d < nd; d++)
        if (shs__mul_u64(S, s[d], &S) || S > n)
            return boxes_json(b);
    if (n % S != 0)
        return boxes_json(b);
    uint64_t R = n / S;
    uint64_t *cnt = shs__calloc((size_t)S, 8), *sid = tmp;
    int *rl = shs__calloc(n, sizeof *rl);
    json_t *out = NULL;
    if (!cnt || !rl)
        goto done;
    /* boxes in ascending rank order: rank is unique per box (checked) */
    for (size_t k = 0; k < n; k++) {
        uint64_t id = 0;
        for (size_t d = 0; d < nd; d++)
            id = id * s[d] + (size[d] ? b->off[k * nd + d] / size[d] : 0);
        sid[k] = ((uint64_t)b->rank[k] << 32) | id;
    }
    qsort(sid, n, 8, cmp_u64);
    for (size_t k = 0; k < n; k++) {
        uint64_t id = sid[k] & 0xffffffffu;
        if (cnt[id] == R) {
            out = boxes_json(b);
            goto done;
        }
        rl[cnt[id]++ * S + id] = (int)(sid[k] >> 32);
    }
    json_t *dm = json_array(), *tm = json_array(), *jrl = NULL;
    int identity = 1, bad = !dm || !tm;
    size_t na = (R > 1) + 0;
    for (size_t d = 0; d < nd; d++)
        na += s[d] > 1;
    if (!bad && R > 1)
        bad = json_array_append_new(dm, json_integer((json_int_t)R)) < 0;
    for (size_t d = 0, a = (R > 1); d < nd && !bad; d++) {
        bad = json_array_append_new(tm, json_integer(s[d] > 1 ? (json_int_t)(na - 1 - a) : -1));
        if (!bad && s[d] > 1) {
            bad = json_array_append_new(dm, json_integer((json_int_t)s[d])) < 0;
            a++;
        }
    }
    if (!bad && na == 0)
        bad = json_array_append_new(dm, json_integer(1)) < 0;
    for (size_t k = 0; k < n; k++)
        identity &= rl[k] == (int)k;
    if (!bad && !identity) {
        bad = !(jrl = json_array());
        for (size_t k = 0; k < n && !bad; k++)
            bad = json_array_append_new(jrl, json_integer(rl[k])) < 0;
    }
    if (!bad)
        out = jrl ? json_pack("{s:o, s:o, s:o}", "device_matrix", dm, "tensor_map", tm, "rank_list",
                              jrl)
                  : json_pack("{s:o, s:o}", "device_matrix", dm, "tensor_map", tm);
    else {
        json_decref(dm);
        json_decref(tm);
        json_decref(jrl);
    }
done:
    shs__free(cnt);
    shs__free(rl);
    return out;
}

json_t *shs__layout_derive(const shs__lboxes *b, const uint64_t *gshape)
{
    uint64_t s[SHS_MAX_DIMS], size[SHS_MAX_DIMS];
    uint64_t *tmp = shs__calloc(b->n + 1, 8);
    json_t *out = NULL;
    if (!tmp)
        return NULL;
    /* one box per rank, ranks below 2^31 */
    for (size_t k = 0; k < b->n; k++)
        tmp[k] = (uint64_t)(uint32_t)b->rank[k];
    qsort(tmp, b->n, 8, cmp_u64);
    int unique = b->n > 0;
    for (size_t k = 1; k < b->n; k++)
        unique &= tmp[k] != tmp[k - 1];
    if (unique && even_grid(b, gshape, s, size, tmp))
        out = mesh_json(b, s, size, tmp);
    else
        out = boxes_json(b);
    shs__free(tmp);
    return out;
}

/* ---- layout documents ---- */

int shs__layout_doc_check(const json_t *doc, int *world, const char *where)
{
    static const char *const keys[] = { "world_size", "tensors", NULL };
    const json_t *ws = json_object_get(doc, "world_size");
    json_int_t w = 0;
    const char *bad = json_is_object(doc) ? unknown_key(doc, keys) : NULL;
    *world = 0;
    if (!json_is_object(doc) || !json_is_object(json_object_get(doc, "tensors")))
        return shs__err(SHS_EINVAL,
                        "%s: a layout is a JSON object {\"world_size\": N, \"tensors\": {name "
                        "or glob: layout}}",
                        where);
    if (bad)
        return shs__err(SHS_EINVAL, "%s: unknown key '%s' (expected world_size, tensors)", where,
                        bad);
    if (ws && !get_int(ws, 1, SHS__LAYOUT_MAX_WORLD, &w))
        return shs__err(SHS_EINVAL, "%s: \"world_size\" must be an integer from 1 to %d", where,
                        SHS__LAYOUT_MAX_WORLD);
    *world = (int)w;
    return SHS_OK;
}

int shs__layout_collect(json_t *acc, const json_t *held, int rank)
{
    const char *name;
    json_t *v;
    json_object_foreach((json_t *)held, name, v)
    {
        json_t *list = json_object_get(acc, name);
        if (!list && (json_object_set_new(acc, name, json_array()) < 0 ||
                      !(list = json_object_get(acc, name))))
            return shs__err(SHS_ENOMEM, "out of memory recording the layout");
        if (json_array_append_new(
                list, json_pack("[i, O, O]", rank, json_array_get(v, 0), json_array_get(v, 1))) < 0)
            return shs__err(SHS_ENOMEM, "out of memory recording the layout");
    }
    return SHS_OK;
}

/* The boxes of one tensor from the accumulator; 0 when malformed. */
static int held_boxes(shs__lboxes *b, const json_t *list, uint64_t *off, uint64_t *shape)
{
    for (size_t k = 0; k < json_array_size(list); k++) {
        const json_t *e = json_array_get(list, k);
        json_int_t r;
        if (!get_int(json_array_get(e, 0), 0, INT32_MAX, &r) ||
            !get_dims(json_array_get(e, 1), b->ndim, off) ||
            !get_dims(json_array_get(e, 2), b->ndim, shape))
            return 0;
        if (shs__lboxes_add(b, (int)r, off, shape) < 0)
            return -1;
    }
    return 1;
}

int shs__layout_record(json_t *root, const json_t *acc, int world)
{
    json_t *tensors = json_object(),
           *doc = json_pack("{s:i, s:o}", "world_size", world, "tensors", tensors);
    const json_t *saved = json_object_get(root, "tensors");
    uint64_t g[SHS_MAX_DIMS], off[SHS_MAX_DIMS], shape[SHS_MAX_DIMS];
    const char *name;
    json_t *list;
    int rc = doc ? SHS_OK : SHS_ENOMEM;
    json_object_foreach((json_t *)acc, name, list)
    {
        const json_t *t = json_object_get(saved, name);
        size_t nd = json_array_size(json_object_get(t, "shape"));
        if (rc < 0 || !t || nd > SHS_MAX_DIMS || !get_dims(json_object_get(t, "shape"), nd, g))
            continue; /* the validation of metadata.json reports it */
        shs__lboxes b = { .ndim = nd };
        int ok = held_boxes(&b, list, off, shape);
        json_t *spec = ok > 0 ? shs__layout_derive(&b, g) : NULL;
        shs__lboxes_release(&b);
        if (ok < 0 || (ok > 0 && (!spec || json_object_set_new(tensors, name, spec) < 0)))
            rc = SHS_ENOMEM;
    }
    if (rc == SHS_OK && json_object_set_new(root, "layouts", doc) < 0)
        return shs__err(SHS_ENOMEM, "out of memory recording the layout");
    if (rc < 0) {
        json_decref(doc);
        return shs__err(SHS_ENOMEM, "out of memory recording the layout");
    }
    return SHS_OK;
}
