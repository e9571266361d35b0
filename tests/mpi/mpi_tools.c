/*
 * mpi_tools.c -- load driver for tests/mpi/tools.sh (public API and
 * libshardsafe_mpi only).
 *
 *   mpi_tools load SRC [--ref REF] [--chunks RULES] [--hf] [--as DTYPE]
 *                      [--round DTYPE] [--balanced] [--model-only]
 *                      [--save-path DIR] [--no-optim]
 *
 * Every rank registers its box of every tensor of REF (default SRC; a
 * checkpoint, an HF folder or a .safetensors file, opened with
 * shs_checkpoint_open), loads SRC with the manager (load_path, or with
 * --hf initial_load_in_hf + initial_load_path) and compares every element
 * with REF's values.  RULES is "GLOB=MODE,GLOB=MODE,..." (first match
 * wins; a MODE alone is "*=MODE"; default "rows"), MODE one of
 *   rows   dimension 0 cut in nearly equal parts over the ranks
 *   cols   the last dimension cut so
 *   whole  the whole tensor on every rank
 *   saved  the box SRC holds in the files of this rank (one per tensor)
 * (a dimension smaller than the world size stays whole).  --as registers
 * floating-point tensors as DTYPE; --round reads REF's floating-point
 * values as DTYPE first (REF was exported in it: F32 -> BF16 -> F32).
 * --model-only registers only model tensors of REF.  --save-path: the
 * job's own save path (nothing is saved; a checkpoint there is resumed
 * instead of SRC, which an --hf load must not do).  --no-optim: SRC's
 * optimizer state is not loaded (no_load_optim).
 *
 * One line per rank on stdout:
 *   rank R: loaded step S: T tensors, W wrong values, own K of T,
 *   read X bytes, boxes Y bytes, whole Z bytes
 * "own" counts the tensors whose box is a chunk of SRC in a file of this
 * rank (a load without resharding); Y is the bytes of the rank's boxes in
 * SRC's dtype, Z those of the whole tensors.  On failure:
 *   rank R: load failed: MESSAGE
 * A load from anywhere but SRC (load_path; with --hf initial_load_path)
 * fails.  Exit status 0 when every rank loaded every value right.
 */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardsafe_mpi.h"

#define MAXD 8
#define MAXRULES 16

typedef struct rule {
    char glob[128];
    char mode[16];
} rule;

typedef struct reg {
    const shs_checkpoint_tensor_info *ti; /* of REF */
    size_t ndim;
    shs_dtype dtype; /* registered */
    shs_dtype stored;
    uint64_t off[MAXD], shape[MAXD];
    void *data;
    size_t bytes;
} reg;

static int g_rank, g_size;

static int parse_rules(rule *r, size_t *n, const char *text)
{
    *n = 0;
    const char *p = text;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len); /* none: MODE alone, for every tensor */
        size_t gl = eq ? (size_t)(eq - p) : 0, ml = eq ? len - gl - 1 : len;
        if (*n == MAXRULES || gl >= sizeof r->glob || ml >= sizeof r->mode)
            return -1;
        snprintf(r[*n].glob, sizeof r->glob, "%.*s", eq ? (int)gl : 1, eq ? p : "*");
        snprintf(r[*n].mode, sizeof r->mode, "%.*s", (int)ml, eq ? eq + 1 : p);
        (*n)++;
        p += len + (end != NULL);
    }
    return 0;
}

static uint64_t numel(size_t ndim, const uint64_t *shape)
{
    uint64_t n = 1;
    for (size_t d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}

static void cut(uint64_t size, uint64_t *off, uint64_t *len)
{
    uint64_t n = (uint64_t)g_size, r = (uint64_t)g_rank;
    if (size < n) {
        *off = 0;
        *len = size;
        return;
    }
    *off = size * r / n;
    *len = size * (r + 1) / n - *off;
}

/* SRC's chunk of tensor `name` in a file of this rank: 1 found (box in
   off/shape), 0 none, -1 several different ones. */
static int own_box(const shs_checkpoint *src, const char *name, size_t ndim, uint64_t *off,
                   uint64_t *shape)
{
    size_t t;
    if (!src || shs_checkpoint_find(&t, src, name) != SHS_OK)
        return 0;
    const shs_checkpoint_tensor_info *ti = shs_checkpoint_tensor(src, t);
    if (ti->ndim != ndim)
        return 0;
    int found = 0;
    for (size_t c = 0; c < ti->n_chunks; c++) {
        shs_chunk_info ci = SHS_CHUNK_INFO_INIT;
        if (shs_checkpoint_chunk(&ci, src, t, c) != SHS_OK ||
            shs_checkpoint_file_rank(src, ci.file) != g_rank)
            continue;
        if (found && (memcmp(off, ci.offset, ndim * sizeof *off) != 0 ||
                      memcmp(shape, ci.shape, ndim * sizeof *shape) != 0))
            return -1;
        memcpy(off, ci.offset, ndim * sizeof *off);
        memcpy(shape, ci.shape, ndim * sizeof *shape);
        found = 1;
    }
    return found;
}

/* Elements of r that differ from REF's box (read as `round` first when
   both are floating point and round >= 0). */
static size_t count_wrong(const shs_checkpoint *ref, size_t t, const reg *r, int round)
{
    size_t es = shs_dtype_bits(r->dtype) / 8, n = (size_t)numel(r->ndim, r->shape);
    unsigned char *want = malloc(r->bytes ? r->bytes : 1);
    if (!want)
        return n + 1;
    int rc;
    if (round >= 0 && shs_dtype_is_float(r->dtype) && shs_dtype_is_float(r->ti->dtype)) {
        size_t tl = n * (shs_dtype_bits((shs_dtype)round) / 8);
        void *tmp = malloc(tl ? tl : 1);
        rc = tmp ? shs_checkpoint_read(ref, t, r->off, r->shape, (shs_dtype)round, tmp, tl)
                 : SHS_ENOMEM;
        if (rc == SHS_OK)
            rc = shs_convert(want, r->dtype, tmp, (shs_dtype)round, n);
        free(tmp);
    } else {
        rc = shs_checkpoint_read(ref, t, r->off, r->shape, r->dtype, want, r->bytes);
    }
    size_t bad = 0;
    if (rc != SHS_OK) {
        printf("rank %d: reference '%s': %s\n", g_rank, r->ti->name, shs_last_error());
        bad = n + 1;
    } else {
        for (size_t i = 0; i < n; i++)
            bad += memcmp(want + i * es, (unsigned char *)r->data + i * es, es) != 0;
    }
    free(want);
    return bad;
}

static int usage(void)
{
    if (g_rank == 0)
        fprintf(stderr, "usage: mpi_tools load SRC [--ref REF] [--chunks GLOB=MODE,...] [--hf] "
                        "[--as DTYPE] [--round DTYPE] [--balanced] [--model-only] [--save-path "
                        "DIR] [--no-optim]\n");
    MPI_Finalize();
    return 2;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    if (argc < 3 || strcmp(argv[1], "load") != 0)
        return usage();
    const char *srcp = argv[2], *refp = argv[2], *chunks = "*=rows", *save_path = NULL;
    int hf = 0, balanced = 0, model_only = 0, no_optim = 0, as = -1, round = -1;
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        shs_dtype dt;
        if (strcmp(a, "--hf") == 0)
            hf = 1;
        else if (strcmp(a, "--balanced") == 0)
            balanced = 1;
        else if (strcmp(a, "--model-only") == 0)
            model_only = 1;
        else if (strcmp(a, "--no-optim") == 0)
            no_optim = 1;
        else if (v && strcmp(a, "--ref") == 0)
            refp = argv[++i];
        else if (v && strcmp(a, "--chunks") == 0)
            chunks = argv[++i];
        else if (v && strcmp(a, "--save-path") == 0)
            save_path = argv[++i];
        else if (v && (strcmp(a, "--as") == 0 || strcmp(a, "--round") == 0) &&
                 shs_dtype_parse_alias(&dt, v) == SHS_OK) {
            *(strcmp(a, "--as") == 0 ? &as : &round) = (int)dt;
            i++;
        } else
            return usage();
    }
    rule rules[MAXRULES];
    size_t n_rules;
    if (parse_rules(rules, &n_rules, chunks) != 0)
        return usage();

    /* setup: any failure is reported by every rank, then all stop */
    char err[512] = "";
    shs_checkpoint *ref = NULL, *src = NULL;
    reg *regs = NULL;
    size_t n_regs = 0;
    shs_state *st = NULL;
    if (shs_checkpoint_open(&ref, refp, NULL) != SHS_OK)
        snprintf(err, sizeof err, "open reference %s: %s", refp, shs_last_error());
    /* SRC may fail to open (the error tests): the manager names why */
    if (shs_checkpoint_open(&src, srcp, NULL) != SHS_OK)
        src = NULL;
    size_t nt = ref ? shs_checkpoint_tensor_count(ref) : 0;
    regs = calloc(nt ? nt : 1, sizeof *regs);
    if (!*err && (!regs || shs_state_create(&st) != SHS_OK))
        snprintf(err, sizeof err, "out of memory");
    uint64_t box_bytes = 0, whole_bytes = 0;
    size_t own = 0;
    for (size_t t = 0; !*err && t < nt; t++) {
        const shs_checkpoint_tensor_info *ti = shs_checkpoint_tensor(ref, t);
        size_t st_idx;
        const shs_checkpoint_tensor_info *si = src && shs_checkpoint_find(&st_idx, src, ti->name) ==
                                                     SHS_OK
                                             ? shs_checkpoint_tensor(src, st_idx)
                                             : NULL;
        shs_kind kind = si ? si->kind : ti->kind;
        if (model_only && ti->kind != SHS_KIND_MODEL)
            continue;
        if (ti->ndim > MAXD) {
            snprintf(err, sizeof err, "'%s': too many dimensions", ti->name);
            break;
        }
        reg *r = &regs[n_regs++];
        r->ti = ti;
        r->ndim = ti->ndim;
        r->stored = si ? si->dtype : ti->dtype;
        r->dtype = as >= 0 && shs_dtype_is_float(ti->dtype) ? (shs_dtype)as : ti->dtype;
        const char *mode = "rows";
        for (size_t k = 0; k < n_rules; k++)
            if (fnmatch(rules[k].glob, ti->name, 0) == 0) {
                mode = rules[k].mode;
                break;
            }
        for (size_t d = 0; d < ti->ndim; d++) {
            r->off[d] = 0;
            r->shape[d] = ti->shape[d];
        }
        if (strcmp(mode, "rows") == 0 && ti->ndim > 0) {
            cut(ti->shape[0], &r->off[0], &r->shape[0]);
        } else if (strcmp(mode, "cols") == 0 && ti->ndim > 0) {
            cut(ti->shape[ti->ndim - 1], &r->off[ti->ndim - 1], &r->shape[ti->ndim - 1]);
        } else if (strcmp(mode, "saved") == 0) {
            if (own_box(src, ti->name, ti->ndim, r->off, r->shape) != 1) {
                snprintf(err, sizeof err, "'%s': no single box of rank %d in %s", ti->name, g_rank,
                         srcp);
                break;
            }
        } else if (strcmp(mode, "whole") != 0 && ti->ndim > 0) {
            snprintf(err, sizeof err, "unknown chunk mode '%s'", mode);
            break;
        }
        uint64_t o[MAXD], s[MAXD];
        if (own_box(src, ti->name, ti->ndim, o, s) == 1 &&
            memcmp(o, r->off, r->ndim * sizeof *o) == 0 &&
            memcmp(s, r->shape, r->ndim * sizeof *s) == 0)
            own++;
        uint64_t n = numel(r->ndim, r->shape);
        box_bytes += n * shs_dtype_bits(r->stored) / 8;
        whole_bytes += numel(ti->ndim, ti->shape) * shs_dtype_bits(r->stored) / 8;
        r->bytes = (size_t)(n * shs_dtype_bits(r->dtype) / 8);
        r->data = malloc(r->bytes ? r->bytes : 1);
        if (!r->data) {
            snprintf(err, sizeof err, "out of memory");
            break;
        }
        memset(r->data, 0xA5, r->bytes); /* no value a load could leave */
        shs_tensor_spec sp = SHS_TENSOR_SPEC_INIT;
        sp.name = ti->name;
        sp.kind = kind;
        sp.dtype = r->dtype;
        sp.ndim = ti->ndim;
        sp.shape = r->shape;
        sp.global_shape = ti->shape;
        sp.global_offset = r->off;
        sp.data = r->data;
        if (shs_state_add_tensor(st, &sp) != SHS_OK)
            snprintf(err, sizeof err, "register '%s': %s", ti->name, shs_last_error());
    }
    shs_comm *comm = NULL;
    shs_manager *mgr = NULL;
    shs_config cfg;
    shs_config_init(&cfg);
    cfg.enable_save = 0;
    if (save_path)
        cfg.save_path = save_path;
    cfg.load_balanced = balanced;
    cfg.no_load_optim = no_optim;
    if (hf) {
        cfg.initial_load_in_hf = 1;
        cfg.initial_load_path = srcp;
    } else {
        cfg.load_path = srcp;
    }
    if (!*err && shs_comm_create_mpi(&comm, MPI_COMM_WORLD) != SHS_OK)
        snprintf(err, sizeof err, "comm: %s", shs_last_error());
    if (!*err && shs_manager_create_comm(&mgr, &cfg, st, comm) != SHS_OK)
        snprintf(err, sizeof err, "manager: %s", shs_last_error());
    int bad_setup = *err != 0, any_bad_setup = 0;
    MPI_Allreduce(&bad_setup, &any_bad_setup, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);

    int status = 1;
    if (bad_setup) {
        printf("rank %d: setup failed: %s\n", g_rank, err);
    } else if (!any_bad_setup) {
        shs_progress p = SHS_PROGRESS_INIT;
        shs_load_result res = SHS_LOAD_RESULT_INIT;
        if (shs_manager_load(&res, mgr, &p) != SHS_OK) {
            printf("rank %d: load failed: %s\n", g_rank, shs_last_error());
        } else if (!res.loaded) {
            printf("rank %d: load failed: nothing loaded\n", g_rank);
        } else if (res.source != (hf ? SHS_LOAD_INITIAL : SHS_LOAD_LOAD_PATH)) {
            printf("rank %d: load failed: loaded from source %d: %s\n", g_rank, res.source,
                   res.message);
        } else {
            size_t wrong = 0;
            for (size_t i = 0; i < n_regs; i++) {
                size_t t;
                if (shs_checkpoint_find(&t, ref, regs[i].ti->name) == SHS_OK)
                    wrong += count_wrong(ref, t, &regs[i], round);
            }
            printf("rank %d: loaded step %lld: %zu tensors, %zu wrong values, own %zu of %zu, "
                   "read %llu bytes, boxes %llu bytes, whole %llu bytes\n",
                   g_rank, (long long)res.step, n_regs, wrong, own, n_regs,
                   (unsigned long long)res.bytes_read, (unsigned long long)box_bytes,
                   (unsigned long long)whole_bytes);
            status = wrong != 0;
        }
    }
    fflush(stdout);
    shs_manager_free(mgr);
    shs_comm_free(comm);
    shs_state_free(st);
    for (size_t i = 0; i < n_regs; i++)
        free(regs[i].data);
    free(regs);
    shs_checkpoint_free(src);
    shs_checkpoint_free(ref);
    int any = 0;
    MPI_Allreduce(&status, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
}
