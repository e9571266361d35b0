/*
 * strategy.c -- MindSpore strategy files (strategy.h): the protobuf
 * ParallelStrategyMap parsed with protobuf-c (code generated from our
 * strategy.proto at build time), checked, and mapped onto the layout
 * vocabulary of layout_spec.h; and the checkpoint of a folder of MindSpore
 * rank_N folders laid out by one.
 */
#include "tools/strategy.h"

#include "checkpoint/loader.h"
#include "store/io.h"
#include "tools/layout_spec.h"
#include "tools/strategy.pb-c.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Mesh axes of one device matrix (MindSpore's have a handful). */
#define MAX_AX 16
/* Pipeline stages (a stage number is at most 6 digits). */
#define MAX_STAGE 999999

#define BAD(...)                                                                                   \
    do {                                                                                           \
        rc = shs__err(SHS_EINVAL, __VA_ARGS__);                                                    \
        goto done;                                                                                 \
    } while (0)

/* protobuf-c allocates through the library's allocator (tests fail it);
   ctx is an int set when an allocation failed, so that out of memory is
   told apart from a malformed file (unpack returns NULL for both) */
static void *pb_alloc(void *ctx, size_t n)
{
    void *p = shs__malloc(n ? n : 1);
    if (!p)
        *(int *)ctx = 1;
    return p;
}

static void pb_free(void *ctx, void *p)
{
    (void)ctx;
    shs__free(p);
}

/* One parameter's layout, as mesh axes (0 the outermost). */
typedef struct sparam {
    const char *name; /* into the unpacked message, after "<stage>-" */
    long stage;
    size_t ndev;
    uint64_t dev[MAX_AX]; /* the optimizer shard's axis split in */
    size_t ndim;
    uint8_t nax[SHS_MAX_DIMS];
    uint8_t ax[SHS_MAX_DIMS][MAX_AX]; /* per dimension: its axes, the
                                         slice index row-major over them */
} sparam;

/* "<stage>-<name>" of a file merging pipeline stages, else stage 0. */
static void split_stage(const char *full, long *stage, const char **name)
{
    const char *p = full;
    long s = 0;
    while (isdigit((unsigned char)*p) && p - full < 6)
        s = s * 10 + (*p++ - '0');
    if (p > full && *p == '-' && p[1]) {
        *stage = s;
        *name = p + 1;
    } else {
        *stage = 0;
        *name = full;
    }
}

/* Axis value m of a tensor_map into an axis index, or -1 for "not split";
   -2 when out of range. */
static int axis_of(int32_t m, size_t ndev)
{
    if (m == -1)
        return -1;
    if (m < 0 || (size_t)m >= ndev)
        return -2;
    return (int)(ndev - 1 - (size_t)m);
}

/* The tensor_map(s) of L into p: one TensorMap is one value per
   dimension; several are one list of axes per dimension (MindSpore's
   layouts), the last possibly empty to pad a 1-D tensor's. */
static int parse_map(sparam *p, const ShsStrategy__ParallelLayouts *L, const char *where,
                     const char *full)
{
    int rc = SHS_OK;
    uint8_t used[MAX_AX] = { 0 };
    size_t nmap = L->n_tensor_map;
    int nested = nmap > 1;
    if (nmap == 0)
        BAD("%s: parameter '%s': no tensor_map", where, full);
    p->ndim = nested ? nmap : L->tensor_map[0]->n_dim;
    if (nested && nmap == 2 && L->tensor_map[1]->n_dim == 0)
        p->ndim = 1;
    if (p->ndim > SHS_MAX_DIMS)
        BAD("%s: parameter '%s': tensor_map of %zu dimensions (at most %d)", where, full, p->ndim,
            SHS_MAX_DIMS);
    for (size_t d = 0; d < p->ndim; d++) {
        const ShsStrategy__TensorMap *tm = nested ? L->tensor_map[d] : L->tensor_map[0];
        size_t first = nested ? 0 : d, count = nested ? tm->n_dim : 1;
        if (count == 0)
            BAD("%s: parameter '%s': tensor_map entry %zu is empty", where, full, d);
        for (size_t i = 0; i < count; i++) {
            int32_t m = tm->dim[first + i];
            int a = axis_of(m, p->ndev);
            if (a == -2)
                BAD("%s: parameter '%s': tensor_map value %d is out of range for a device matrix "
                    "of %zu axes (-1 to %zu)",
                    where, full, (int)m, p->ndev, p->ndev - 1);
            if (a == -1) {
                if (count > 1)
                    BAD("%s: parameter '%s': tensor_map entry %zu mixes -1 with mesh axes", where,
                        full, d);
                continue;
            }
            if (used[a]++)
                BAD("%s: parameter '%s': tensor_map uses mesh axis value %d twice", where, full,
                    (int)m);
            p->ax[d][p->nax[d]++] = (uint8_t)a;
        }
    }
done:
    return rc;
}

/* The optimizer shard (MindSpore's parallel optimizer, when checkpoints
   are not saved aggregated): the first dimension of each device's slice
   is cut again over opt_weight_shard_size devices that hold the same
   slice -- the device axes that do not split the tensor, taken from the
   innermost outwards, the last one cut when it is larger than what is
   left (its inner part shards) -- the model slice index first, the
   optimizer's next.  step is the distance between the devices of a group:
   checked when one axis makes the group. */
static int apply_opt(sparam *p, int32_t step, int32_t size, const char *where, const char *full)
{
    int rc = SHS_OK;
    uint8_t used[MAX_AX] = { 0 }, rep[MAX_AX], opt[MAX_AX];
    size_t nrep = 0, nopt = 0;
    if (step == 0 || size == 0)
        return SHS_OK;
    if (step < 0 || size < -1)
        BAD("%s: parameter '%s': opt_weight_shard_step %d and opt_weight_shard_size %d must be "
            "positive (size -1: every repeating device)",
            where, full, (int)step, (int)size);
    if (p->ndim == 0)
        BAD("%s: parameter '%s': a scalar cannot be cut by the optimizer shard", where, full);
    for (size_t d = 0; d < p->ndim; d++)
        for (size_t i = 0; i < p->nax[d]; i++)
            used[p->ax[d][i]] = 1;
    for (size_t a = 0; a < p->ndev; a++)
        if (!used[a] && p->dev[a] > 1)
            rep[nrep++] = (uint8_t)a;
    if (!nrep)
        BAD("%s: parameter '%s': opt_weight_shard_size %d, but no device axis repeats it", where,
            full, (int)size);
    uint64_t left = 1;
    if (size == -1)
        for (size_t k = 0; k < nrep; k++)
            left *= p->dev[rep[k]];
    else
        left = (uint64_t)size;
    for (size_t k = nrep; k-- > 0 && left > 1;) {
        size_t a = rep[k];
        uint64_t d = p->dev[a];
        if (nopt >= MAX_AX - 1) /* each axis joins opt once: never true */
            BAD("%s: parameter '%s': more than %d device axes", where, full, MAX_AX);
        if (left < d) {
            if (d % left)
                BAD("%s: parameter '%s': opt_weight_shard_size %d does not divide device axis "
                    "%zu (of %llu devices)",
                    where, full, (int)size, p->ndev - 1 - a, (unsigned long long)d);
            if (p->ndev == MAX_AX)
                BAD("%s: parameter '%s': more than %d device axes", where, full, MAX_AX);
            /* axis a becomes [d / left, left]: its inner part shards */
            memmove(&p->dev[a + 2], &p->dev[a + 1], (p->ndev - a - 1) * sizeof p->dev[0]);
            p->dev[a] = d / left;
            p->dev[a + 1] = left;
            p->ndev++;
            for (size_t dd = 0; dd < p->ndim; dd++)
                for (size_t i = 0; i < p->nax[dd]; i++)
                    p->ax[dd][i] += p->ax[dd][i] > a;
            for (size_t i = 0; i < nopt; i++)
                opt[i] += opt[i] > a;
            memmove(&opt[1], &opt[0], nopt++);
            opt[0] = (uint8_t)(a + 1);
            left = 1;
            break;
        }
        if (left % d)
            BAD("%s: parameter '%s': opt_weight_shard_size %d does not divide into the device axes "
                "that repeat it",
                where, full, (int)size);
        memmove(&opt[1], &opt[0], nopt++);
        opt[0] = (uint8_t)a;
        left /= d;
    }
    if (left != 1)
        BAD("%s: parameter '%s': opt_weight_shard_size %d is more than the %s devices that repeat "
            "it",
            where, full, (int)size, nrep ? "available" : "no");
    if (nopt == 1) {
        uint64_t stride = 1;
        for (size_t a = (size_t)opt[0] + 1; a < p->ndev; a++)
            stride *= p->dev[a];
        if (stride != (uint64_t)step)
            BAD("%s: parameter '%s': opt_weight_shard_step %d, but the devices that share a slice "
                "are %llu apart in this device matrix",
                where, full, (int)step, (unsigned long long)stride);
    }
    if (p->nax[0] + nopt > MAX_AX)
        BAD("%s: parameter '%s': more than %d device axes", where, full, MAX_AX);
    for (size_t i = 0; i < nopt; i++)
        p->ax[0][p->nax[0]++] = opt[i];
done:
    return rc;
}

static int parse_item(sparam *p, const ShsStrategy__ParallelLayoutItem *it, const char *where)
{
    int rc = SHS_OK;
    const char *full = it->param_name;
    const ShsStrategy__ParallelLayouts *L = it->parallel_layouts;
    memset(p, 0, sizeof *p);
    if (!*full)
        BAD("%s: a parameter with an empty name", where);
    if (strpbrk(full, "*?["))
        BAD("%s: parameter '%s': a name with '*', '?' or '[' (glob characters)", where, full);
    split_stage(full, &p->stage, &p->name);
    if (L->n_dev_matrix == 0 || L->dev_matrix[0]->n_dim == 0)
        BAD("%s: parameter '%s': no dev_matrix", where, full);
    const ShsStrategy__DevMatrix *dm = L->dev_matrix[0];
    if (dm->n_dim > MAX_AX)
        BAD("%s: parameter '%s': a dev_matrix of %zu axes (at most %d)", where, full, dm->n_dim,
            MAX_AX);
    uint64_t prod = 1;
    for (size_t a = 0; a < dm->n_dim; a++) {
        if (dm->dim[a] == 0 || shs__mul_u64(prod, dm->dim[a], &prod) ||
            prod > SHS__LAYOUT_MAX_WORLD)
            BAD("%s: parameter '%s': dev_matrix must hold positive sizes whose product is at most "
                "%d",
                where, full, SHS__LAYOUT_MAX_WORLD);
        p->dev[a] = dm->dim[a];
    }
    p->ndev = dm->n_dim;
    if ((rc = parse_map(p, L, where, full)) < 0)
        goto done;
    for (size_t k = 0; k < L->n_param_split_shape; k++)
        if (L->param_split_shape[k]->n_dim)
            return shs__err(SHS_EUNSUPPORTED,
                            "%s: parameter '%s': a manual split (param_split_shape) is not "
                            "supported",
                            where, full);
    for (size_t k = 0; k < L->n_indices_offset; k++)
        if (L->indices_offset[k]->n_dim)
            return shs__err(SHS_EUNSUPPORTED,
                            "%s: parameter '%s': a manual split (indices_offset) is not supported",
                            where, full);
    if (L->field != 0)
        return shs__err(SHS_EUNSUPPORTED,
                        "%s: parameter '%s': a field split (field %d) is not supported", where,
                        full, (int)L->field);
    rc = apply_opt(p, L->opt_weight_shard_step, L->opt_weight_shard_size, where, full);
done:
    return rc;
}

static uint64_t devices(const sparam *p)
{
    uint64_t n = 1;
    for (size_t a = 0; a < p->ndev; a++)
        n *= p->dev[a];
    return n;
}

static int same_layout(const sparam *a, const sparam *b)
{
    if (a->ndev != b->ndev || a->ndim != b->ndim ||
        memcmp(a->dev, b->dev, a->ndev * sizeof a->dev[0]) != 0)
        return 0;
    for (size_t d = 0; d < a->ndim; d++)
        if (a->nax[d] != b->nax[d] || memcmp(a->ax[d], b->ax[d], a->nax[d]) != 0)
            return 0;
    return 1;
}

static int by_name_stage(const void *x, const void *y)
{
    const sparam *a = *(const sparam *const *)x, *b = *(const sparam *const *)y;
    int c = strcmp(a->name, b->name);
    return c ? c : (a->stage > b->stage) - (a->stage < b->stage);
}

/* The spec of parameter p held by the stages st[0..nst), N devices each. */
static json_t *spec_json(const sparam *p, const long *st, size_t nst, uint64_t n_dev, int with_rl,
                         const int *rank_map)
{
    json_t *dm = json_array(), *tm = json_array(), *rl = with_rl ? json_array() : NULL;
    int bad = !dm || !tm || (with_rl && !rl);
    if (nst > 1)
        bad |= json_array_append_new(dm, json_integer((json_int_t)nst)) < 0;
    for (size_t a = 0; a < p->ndev && !bad; a++)
        bad |= json_array_append_new(dm, json_integer((json_int_t)p->dev[a])) < 0;
    /* MindSpore's axis value m counts from the innermost axis: the stage
       axis added outside changes no value */
    for (size_t d = 0; d < p->ndim && !bad; d++) {
        json_t *e;
        if (p->nax[d] == 0)
            e = json_integer(-1);
        else if (p->nax[d] == 1)
            e = json_integer((json_int_t)(p->ndev - 1 - p->ax[d][0]));
        else {
            e = json_array();
            for (size_t i = 0; e && i < p->nax[d]; i++)
                if (json_array_append_new(
                        e, json_integer((json_int_t)(p->ndev - 1 - p->ax[d][i]))) < 0) {
                    json_decref(e);
                    e = NULL;
                }
        }
        bad |= json_array_append_new(tm, e) < 0;
    }
    for (size_t s = 0; s < nst && rl && !bad; s++)
        for (uint64_t q = 0; q < n_dev && !bad; q++) {
            uint64_t k = (uint64_t)st[s] * n_dev + q;
            bad |= json_array_append_new(rl, json_integer(rank_map ? rank_map[k] : (json_int_t)k)) <
                   0;
        }
    json_t *spec = bad ? NULL : json_pack("{s:o, s:o}", "device_matrix", dm, "tensor_map", tm);
    if (!spec) {
        if (bad) {
            json_decref(dm);
            json_decref(tm);
        }
        json_decref(rl);
        return NULL;
    }
    if (rl && json_object_set_new(spec, "rank_list", rl) < 0) {
        json_decref(spec);
        return NULL;
    }
    return spec;
}

int shs__strategy_doc(json_t **doc, const void *data, size_t len, const char *where,
                      const int *rank_map, size_t n_rank_map)
{
    int rc = SHS_OK, oom = 0;
    ProtobufCAllocator alloc = { pb_alloc, pb_free, &oom };
    ShsStrategy__ParallelStrategyMap *map = NULL;
    sparam *ps = NULL, **order = NULL;
    long *st = NULL;
    unsigned char *has_stage = NULL;
    json_t *tensors = NULL;
    *doc = NULL;
    if (!data || !len)
        BAD("%s: empty: not a strategy file (a ParallelStrategyMap)", where);
    map = shs_strategy__parallel_strategy_map__unpack(&alloc, len, data);
    if (!map && oom) {
        rc = shs__err(SHS_ENOMEM, "%s: out of memory reading it", where);
        goto done;
    }
    if (!map)
        BAD("%s: not a strategy file: not a valid ParallelStrategyMap (truncated, wrong field "
            "types, or a required field missing)",
            where);
    size_t n = map->n_parallel_layout_item;
    if (n == 0)
        BAD("%s: no parallel_layout_item: the strategy file describes no parameter", where);
    ps = shs__calloc(n, sizeof *ps);
    order = shs__calloc(n, sizeof *order);
    st = shs__calloc(n, sizeof *st);
    if (!ps || !order || !st) {
        rc = shs__err(SHS_ENOMEM, "%s: out of memory", where);
        goto done;
    }
    long max_stage = 0;
    for (size_t i = 0; i < n; i++) {
        if ((rc = parse_item(&ps[i], map->parallel_layout_item[i], where)) < 0)
            goto done;
        if (ps[i].stage > MAX_STAGE)
            BAD("%s: parameter '%s': stage %ld (at most %d)", where,
                map->parallel_layout_item[i]->param_name, ps[i].stage, MAX_STAGE);
        if (ps[i].stage > max_stage)
            max_stage = ps[i].stage;
        order[i] = &ps[i];
    }
    /* one stage holds N devices: every parameter's device matrix covers them */
    uint64_t n_dev = devices(&ps[0]);
    for (size_t i = 1; i < n; i++)
        if (devices(&ps[i]) != n_dev)
            BAD("%s: parameter '%s' is laid out on %llu devices, '%s' on %llu: one strategy file "
                "describes one set of devices per stage",
                where, map->parallel_layout_item[0]->param_name, (unsigned long long)n_dev,
                map->parallel_layout_item[i]->param_name, (unsigned long long)devices(&ps[i]));
    size_t n_stages = (size_t)max_stage + 1;
    if (!(has_stage = shs__calloc(n_stages, 1))) {
        rc = shs__err(SHS_ENOMEM, "%s: out of memory", where);
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        has_stage[ps[i].stage] = 1;
    for (size_t s = 0; s < n_stages; s++)
        if (!has_stage[s])
            BAD("%s: pipeline stage %zu of 0..%ld has no parameter: merge the strategy files of "
                "every stage (merge_pipeline_strategys)",
                where, s, max_stage);
    uint64_t world = n_dev * n_stages;
    if (world > SHS__LAYOUT_MAX_WORLD)
        BAD("%s: %zu stages of %llu devices: more than %d ranks", where, n_stages,
            (unsigned long long)n_dev, SHS__LAYOUT_MAX_WORLD);
    if (rank_map) {
        unsigned char *seen = shs__calloc((size_t)world, 1);
        if (!seen) {
            rc = shs__err(SHS_ENOMEM, "%s: out of memory", where);
            goto done;
        }
        int ok = n_rank_map == world;
        for (size_t k = 0; ok && k < n_rank_map; k++)
            ok = rank_map[k] >= 0 && (uint64_t)rank_map[k] < world && !seen[rank_map[k]]++;
        shs__free(seen);
        if (!ok)
            BAD("%s: the rank list must hold each of the ranks 0 to %llu once (the strategy "
                "describes %llu devices), in device order",
                where, (unsigned long long)world - 1, (unsigned long long)world);
    }
    qsort(order, n, sizeof *order, by_name_stage);
    if (!(tensors = json_object())) {
        rc = shs__err(SHS_ENOMEM, "%s: out of memory", where);
        goto done;
    }
    for (size_t i = 0; i < n;) {
        size_t j = i, nst = 0;
        for (; j < n && strcmp(order[j]->name, order[i]->name) == 0; j++) {
            if (j > i && order[j]->stage == order[j - 1]->stage)
                BAD("%s: parameter '%s' appears twice in stage %ld", where, order[i]->name,
                    order[j]->stage);
            if (!same_layout(order[i], order[j]))
                BAD("%s: parameter '%s' has one layout in stage %ld and another in stage %ld",
                    where, order[i]->name, order[i]->stage, order[j]->stage);
            st[nst++] = order[j]->stage;
        }
        json_t *spec = spec_json(order[i], st, nst, n_dev, n_stages > 1 || rank_map, rank_map);
        if (!spec) {
            rc = shs__err(SHS_ENOMEM, "%s: out of memory", where);
            goto done;
        }
        size_t nl = strlen(order[i]->name);
        if (shs__utf8_check((const unsigned char *)order[i]->name, nl) != nl) {
            json_decref(spec);
            BAD("%s: parameter name '%s' is not valid UTF-8", where, order[i]->name);
        }
        if (json_object_set_new_nocheck(tensors, order[i]->name, spec) < 0) {
            rc = shs__err(SHS_ENOMEM, "%s: out of memory", where);
            goto done;
        }
        i = j;
    }
    if (!(*doc = json_pack("{s:I, s:O}", "world_size", (json_int_t)world, "tensors", tensors)))
        rc = shs__err(SHS_ENOMEM, "%s: out of memory", where);
done:
    json_decref(tensors);
    if (map)
        shs_strategy__parallel_strategy_map__free_unpacked(map, &alloc);
    shs__free(ps);
    shs__free(order);
    shs__free(st);
    shs__free(has_stage);
    return rc;
}

int shs__strategy_read(json_t **doc, const char *path, const int *rank_map, size_t n_rank_map)
{
    char *data = NULL;
    size_t len = 0;
    *doc = NULL;
    int rc = shs__read_file(&data, &len, path, SHS__STRATEGY_FILE_MAX);
    if (rc == SHS_OK)
        rc = shs__strategy_doc(doc, data, len, path, rank_map, n_rank_map);
    shs__free(data);
    return rc;
}

/* ---- a folder of MindSpore rank_N folders ---- */

/* A tensor of one rank's file. */
typedef struct slice {
    const char *name; /* owned by names[] */
    int rank;
    uint32_t file;
    shs_dtype dtype;
    size_t ndim;
    uint64_t shape[SHS_MAX_DIMS];
    uint64_t b0, b1;
} slice;

static int by_name_rank(const void *x, const void *y)
{
    const slice *a = x, *b = y;
    int c = strcmp(a->name, b->name);
    return c ? c : (a->rank > b->rank) - (a->rank < b->rank);
}

/* MindSpore's optimizer state (mindformers: adam_m.<p>, adam_v.<p>,
   main_param.<p>; MindSpore: moments., accu_grads.). */
static int ms_optimizer_name(const char *n)
{
    static const char *const prefixes[] = { "adam_m.",     "adam_v.",     "moments.",
                                            "accu_grads.", "main_param.", "max_exp_avg_sq.",
                                            NULL };
    for (size_t i = 0; prefixes[i]; i++)
        if (strncmp(n, prefixes[i], strlen(prefixes[i])) == 0)
            return 1;
    return 0;
}

/* "rank_<digits>" -> rank, else -1. */
static long rank_dir(const char *name)
{
    if (strncmp(name, "rank_", 5) != 0 || !name[5])
        return -1;
    long r = 0;
    for (const char *p = name + 5; *p; p++) {
        if (!isdigit((unsigned char)*p) || r > SHS__LAYOUT_MAX_WORLD)
            return -1;
        r = r * 10 + (*p - '0');
    }
    return r;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The one .safetensors file of src/rank_R: its name "rank_R/<file>". */
static int rank_file(char **out, const char *src, const char *dir)
{
    char *path = shs__path_join(src, dir), **names = NULL, *found = NULL;
    size_t n = 0;
    int rc = path ? shs__io_list_dir(&names, &n, path) : shs__err(SHS_ENOMEM, "out of memory");
    for (size_t i = 0; rc == SHS_OK && i < n; i++) {
        if (!ends_with(names[i], ".safetensors"))
            continue;
        if (found)
            rc = shs__err(SHS_EINVAL,
                          "%s holds several .safetensors files ('%s', '%s'): leave one per rank "
                          "folder",
                          path, found, names[i]);
        found = names[i];
    }
    if (rc == SHS_OK && !found)
        rc = shs__err(SHS_ECORRUPT, "%s holds no .safetensors file", path);
    if (rc == SHS_OK) {
        shs__buf b = SHS__BUF_INIT;
        if (shs__buf_addf(&b, "%s/%s", dir, found) < 0)
            rc = shs__err(SHS_ENOMEM, "out of memory");
        *out = b.data;
    }
    shs__io_names_free(names, n);
    shs__free(path);
    return rc;
}

/* The rank folders of src, as the model's files (one per rank). */
static int list_ranks(shs__meta *m, const char *src, int world)
{
    char **names = NULL;
    size_t n = 0;
    int rc = shs__io_list_dir(&names, &n, src);
    if (rc < 0)
        return rc;
    if (!(m->f = shs__calloc(n + 1, sizeof *m->f))) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n && rc == SHS_OK; i++) {
        long r = rank_dir(names[i]);
        struct stat sb;
        char *p = r < 0 ? NULL : shs__path_join(src, names[i]);
        if (r < 0)
            continue;
        if (!p) {
            rc = shs__err(SHS_ENOMEM, "out of memory");
            break;
        }
        int isdir = shs__io->stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
        shs__free(p);
        if (!isdir)
            continue;
        if (r >= world) {
            rc = shs__err(SHS_EINVAL,
                          "%s/%s: the strategy file describes ranks 0 to %d only (%d devices)", src,
                          names[i], world - 1, world);
            break;
        }
        for (size_t k = 0; k < m->nf; k++)
            if (m->f[k].rank == (int)r)
                rc = shs__err(SHS_EINVAL, "%s: two folders for rank %ld ('%s')", src, r, names[i]);
        if (rc == SHS_OK && (rc = rank_file(&m->f[m->nf].name, src, names[i])) == SHS_OK)
            m->f[m->nf++].rank = (int)r;
    }
    if (rc == SHS_OK && m->nf == 0)
        rc = shs__err(SHS_ENOCHECKPOINT,
                      "%s: no rank_0, rank_1, ... folders (MindSpore's distributed files, laid "
                      "out by the strategy file)",
                      src);
done:
    shs__io_names_free(names, n);
    return rc;
}

/* Every tensor of every rank's file. */
static int read_slices(slice **out, size_t *n_out, const shs__meta *m, const char *src)
{
    slice *s = NULL;
    size_t n = 0, cap = 0;
    int rc = SHS_OK;
    for (uint32_t fi = 0; fi < m->nf && rc == SHS_OK; fi++) {
        char *p = shs__path_join(src, m->f[fi].name);
        shs_file *f = NULL;
        shs_open_opts oo = SHS_OPEN_OPTS_INIT;
        oo.flags = SHS_OPEN_NO_MMAP;
        rc = p ? shs_file_open(&f, p, &oo) : shs__err(SHS_ENOMEM, "out of memory");
        shs__free(p);
        for (size_t k = 0; rc == SHS_OK && k < shs_file_tensor_count(f); k++) {
            const shs_tensor_info *ti = shs_file_tensor(f, k);
            if (strlen(ti->name) != ti->name_len) {
                rc = shs__err(SHS_ECORRUPT, "%s/%s: a tensor name with a NUL byte", src,
                              m->f[fi].name);
                break;
            }
            if (n == cap) {
                size_t nc = cap ? 2 * cap : 64;
                slice *ns = shs__realloc(s, nc * sizeof *ns);
                if (!ns) {
                    rc = shs__err(SHS_ENOMEM, "out of memory");
                    break;
                }
                s = ns;
                cap = nc;
            }
            slice *x = &s[n];
            memset(x, 0, sizeof *x);
            /* the name outlives the file: the model keeps a copy */
            if (!(x->name = shs__strdup(ti->name))) {
                rc = shs__err(SHS_ENOMEM, "out of memory");
                break;
            }
            n++;
            x->rank = m->f[fi].rank;
            x->file = fi;
            x->dtype = ti->dtype;
            x->ndim = ti->ndim;
            memcpy(x->shape, ti->shape, ti->ndim * sizeof x->shape[0]);
            x->b0 = shs_file_data_start(f) + ti->offset;
            x->b1 = x->b0 + ti->nbytes;
        }
        shs_file_free(f);
    }
    *out = s;
    *n_out = n;
    return rc;
}

static void slices_free(slice *s, size_t n)
{
    for (size_t i = 0; s && i < n; i++)
        shs__free((char *)(uintptr_t)s[i].name);
    shs__free(s);
}

/* How many slices each dimension of `spec` is cut into (a spec this file
   made: device_matrix and tensor_map are well formed). */
static void splits_of(const json_t *spec, size_t ndim, uint64_t *split)
{
    const json_t *dm = json_object_get(spec, "device_matrix");
    const json_t *tm = json_object_get(spec, "tensor_map");
    size_t na = json_array_size(dm);
    for (size_t d = 0; d < ndim; d++) {
        const json_t *e = json_array_get(tm, d);
        size_t k = json_is_array(e) ? json_array_size(e) : 1;
        split[d] = 1;
        for (size_t i = 0; i < k; i++) {
            json_int_t v = json_integer_value(json_is_array(e) ? json_array_get(e, i) : e);
            if (v >= 0)
                split[d] *= (uint64_t)json_integer_value(json_array_get(dm, na - 1 - (size_t)v));
        }
    }
}

/* Tensor t of the model from its slices s[0..n) (same name, by rank). */
static int build_tensor(shs__mtensor *t, const slice *s, size_t n, const json_t *spec, int world,
                        const shs__meta *m, const char *src, const char *where)
{
    int rc = SHS_OK;
    size_t nd = s[0].ndim, dn = nd ? nd : 1;
    uint64_t split[SHS_MAX_DIMS];
    shs__lboxes b = { .ndim = nd };
    char a1[128], a2[128];
    t->name = shs__strdup(s[0].name);
    t->dtype = s[0].dtype;
    t->ndim = nd;
    t->kind = !spec || ms_optimizer_name(s[0].name) ? SHS_KIND_OPTIMIZER : SHS_KIND_MODEL;
    t->gshape = shs__calloc(dn, sizeof *t->gshape);
    t->c = shs__calloc(n, sizeof *t->c);
    if (!t->name || !t->gshape || !t->c) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        if (s[i].dtype != s[0].dtype || s[i].ndim != nd)
            BAD("%s: tensor '%s' is %s with %zu dimension(s) in %s, %s with %zu in %s", src,
                s[0].name, shs_dtype_name(s[0].dtype), nd, m->f[s[0].file].name,
                shs_dtype_name(s[i].dtype), s[i].ndim, m->f[s[i].file].name);
    if (spec) {
        const json_t *tm = json_object_get(spec, "tensor_map");
        if (json_array_size(tm) != nd)
            BAD("%s: tensor '%s' has %zu dimension(s) in %s, its tensor_map in %s %zu", src,
                s[0].name, nd, m->f[s[0].file].name, where, json_array_size(tm));
        splits_of(spec, nd, split);
        for (size_t d = 0; d < nd; d++)
            if (shs__mul_u64(s[0].shape[d], split[d], &t->gshape[d]))
                BAD("%s: tensor '%s': its global shape overflows", src, s[0].name);
        if ((rc = shs__layout_resolve(&b, spec, s[0].name, nd, t->gshape, world, where)) < 0)
            goto done;
    } else {
        memcpy(t->gshape, s[0].shape, nd * sizeof *t->gshape);
    }
    for (size_t i = 0; i < n; i++) {
        const uint64_t *off = NULL, *shape = t->gshape;
        static const uint64_t zero[SHS_MAX_DIMS];
        if (spec) {
            size_t k = 0;
            while (k < b.n && b.rank[k] != s[i].rank)
                k++;
            if (k == b.n)
                BAD("%s: %s holds tensor '%s', of which the strategy gives rank %d no part", src,
                    m->f[s[i].file].name, s[0].name, s[i].rank);
            off = b.off + k * nd;
            shape = b.shape + k * nd;
        } else {
            off = zero;
        }
        if (nd && memcmp(s[i].shape, shape, nd * sizeof *shape) != 0) {
            shs__dims_text(a1, sizeof a1, s[i].shape, nd);
            shs__dims_text(a2, sizeof a2, shape, nd);
            BAD("%s: %s: tensor '%s' is [%s]; %s it should be [%s]", src, m->f[s[i].file].name,
                s[0].name, a1, spec ? "the strategy says" : "as in the other ranks' files", a2);
        }
        shs__mchunk *c = &t->c[t->nc++];
        c->off = shs__calloc(dn, sizeof *c->off);
        c->shape = shs__calloc(dn, sizeof *c->shape);
        c->key = shs__strdup(s[i].name);
        if (!c->off || !c->shape || !c->key) {
            rc = shs__err(SHS_ENOMEM, "out of memory");
            goto done;
        }
        memcpy(c->off, off, nd * sizeof *off);
        memcpy(c->shape, shape, nd * sizeof *shape);
        c->file = s[i].file;
        c->b0 = s[i].b0;
        c->b1 = s[i].b1;
        for (size_t k = 0; k + 1 < t->nc && !c->replica; k++)
            c->replica = nd == 0 || memcmp(t->c[k].off, off, nd * sizeof *off) == 0;
    }
    /* every slice of the layout must be in some rank's file */
    for (size_t k = 0; spec && k < b.n; k++) {
        int found = 0;
        for (size_t i = 0; i < t->nc && !found; i++)
            found = nd == 0 || memcmp(t->c[i].off, b.off + k * nd, nd * sizeof(uint64_t)) == 0;
        if (!found) {
            shs__dims_text(a1, sizeof a1, b.off + k * nd, nd);
            BAD("%s: tensor '%s': the slice at [%s] (rank %d's, per the strategy) is in no rank's "
                "file",
                src, s[0].name, a1, b.rank[k]);
        }
    }
done:
    shs__lboxes_release(&b);
    return rc;
}

/* The model of src's rank folders. */
static int build_model(shs__meta *m, const char *src, const json_t *doc, const char *where)
{
    int world = (int)json_integer_value(json_object_get(doc, "world_size"));
    const json_t *tensors = json_object_get(doc, "tensors");
    slice *s = NULL;
    size_t ns = 0;
    int rc;
    memset(m, 0, sizeof *m);
    m->plain = 1; /* no checksums: the files are MindSpore's */
    m->world_size = world;
    m->step = -1;
    if ((rc = list_ranks(m, src, world)) < 0 || (rc = read_slices(&s, &ns, m, src)) < 0)
        goto done;
    if (ns > 1)
        qsort(s, ns, sizeof *s, by_name_rank);
    if (!(m->t = shs__calloc(ns + 1, sizeof *m->t))) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < ns && rc == SHS_OK;) {
        size_t j = i + 1;
        while (j < ns && strcmp(s[j].name, s[i].name) == 0)
            j++;
        for (size_t k = i + 1; k < j; k++)
            if (s[k].rank == s[k - 1].rank)
                rc = shs__err(SHS_ECORRUPT, "%s: tensor '%s' appears twice in %s", src, s[k].name,
                              m->f[s[k].file].name);
        if (rc == SHS_OK)
            rc = build_tensor(&m->t[m->nt++], &s[i], j - i, json_object_get(tensors, s[i].name),
                              world, m, src, where);
        i = j;
    }
done:
    slices_free(s, ns);
    if (rc < 0)
        shs__meta_free(m);
    return rc;
}

int shs__strategy_open(shs_checkpoint **out, const char *src, const char *strategy_path,
                       unsigned flags)
{
    json_t *doc = NULL;
    struct stat sb;
    int rc;
    *out = NULL;
    if (shs__io->stat(src, &sb) != 0)
        return shs__err_errno(errno, "cannot open checkpoint", src);
    if (!S_ISDIR(sb.st_mode))
        return shs__err(SHS_EINVAL,
                        "%s: with a strategy file the source is a folder of rank_N folders", src);
    if ((rc = shs__strategy_read(&doc, strategy_path, NULL, 0)) < 0)
        return rc;
    shs_checkpoint *c = shs__calloc(1, sizeof *c);
    if (!c) {
        json_decref(doc);
        return shs__err(SHS_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&c->mu, NULL);
    if ((rc = build_model(&c->m, src, doc, strategy_path)) < 0)
        goto fail;
    /* the handle as shs_checkpoint_open makes it for a folder */
    c->path = shs__strdup(src);
    c->dir = shs__strdup(src);
    c->info = shs__calloc(c->m.nt + 1, sizeof *c->info);
    c->L.fh = shs__calloc(c->m.nf + 1, sizeof(shs_file *));
    if (!c->path || !c->dir || !c->info || !c->L.fh) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto fail;
    }
    c->L.dir = c->dir;
    c->L.m = &c->m;
    c->L.open_flags = (flags & SHS_CHECKPOINT_OPEN_NO_MMAP) ? SHS_OPEN_NO_MMAP : 0;
    c->L.mu = &c->mu;
    for (size_t i = 0; i < c->m.nt; i++) {
        const shs__mtensor *t = &c->m.t[i];
        c->info[i] = (shs_checkpoint_tensor_info){ t->name, t->kind,   t->dtype,
                                                   t->ndim, t->gshape, t->nc };
    }
    json_decref(doc);
    *out = c;
    return SHS_OK;
fail:
    json_decref(doc);
    shs_checkpoint_free(c);
    return rc;
}
