/*
 * trainer_mpi.c -- the demo trainer (examples/trainer.c, model of
 * examples/tinylm) trained with tensor parallelism x data parallelism under
 * mpirun, checkpointed through the shardsafe manager over MPI.
 *
 *   mpirun -np 4 trainer_mpi --steps 300 --save-path /tmp/ckpt --save-interval 50
 *
 * Decomposition (world = TP x DP; rank r: tp = r % TP, dp = r / TP):
 *   model.embed.weight  [V, E]    replicated on every rank
 *   model.hidden.weight [C*E, H]  split by columns over the TP group
 *   model.hidden.bias   [H]       split like the hidden columns
 *   model.out.weight    [H, V]    split by rows (the same hidden units)
 *   model.out.bias      [V]       replicated
 * H need not be divisible by TP (the first H % TP ranks get one unit more).
 * The global batch (--batch) is sampled identically on every rank (same RNG
 * stream as the single-process trainer) and split into contiguous slices
 * over the DP ranks.  Partial logits and partial input gradients are summed
 * over the TP group, and gradients over the DP group, by MPI_Allgather +
 * summation in rank order: every reduction is deterministic, so a killed
 * and resumed run ends bitwise equal to an uninterrupted one (same world
 * size).  Every rank registers its local shard of each parameter and Adam
 * moment with the global shape and offset; a checkpoint saved on one world
 * size loads on another (the library reshards); the rank-local blobs (rng,
 * lr_scheduler, dataloader) are then not restored and the RNG and
 * scheduler are re-derived from the loaded progress: the RNG by replaying
 * the initialisation and consumed_samples sample draws (so the data stream
 * continues exactly as in an uninterrupted run), the scheduler from
 * global_step and the current flags.
 *
 * Same flags and final lines as examples/trainer.c, plus --tp N (default 2
 * if the world size is even, else 1).  final_digest is the FNV-1a 64 of the
 * global state gathered in global layout on rank 0 (per parameter in order:
 * name, data, exp_avg, exp_avg_sq; then global_step), i.e. the value
 * tinylm_digest() would give for the same global state: independent of the
 * decomposition.  Only rank 0 prints to stdout.
 *
 * Test hook: TRAINER_MPI_STEP_DELAY_MS=n in the environment sleeps n ms
 * after each step (does not change any result; lets a test kill the job
 * mid-run).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shardsafe_mpi.h"
#include "trainer_args.h"


/* ------------------------------------------------------------------------
 * Process topology
 * ---------------------------------------------------------------------- */
static int g_rank, g_size, g_tp, g_dp, g_tp_rank, g_dp_rank;
static MPI_Comm g_tp_comm = MPI_COMM_NULL, g_dp_comm = MPI_COMM_NULL;

#define SAY(...)                                                                                   \
    do {                                                                                           \
        if (g_rank == 0)                                                                           \
            printf(__VA_ARGS__);                                                                   \
    } while (0)

static void fatal(const char *what, const char *msg)
{
    fprintf(stderr, "trainer_mpi: rank %d: %s: %s\n", g_rank, what, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p)
        fatal("calloc", "out of memory");
    return p;
}

/* Split n items over k parts: part i gets [*lo, *lo + *cnt). */
static void split(int n, int k, int i, int *lo, int *cnt)
{
    int base = n / k, extra = n % k;
    *lo = i * base + (i < extra ? i : extra);
    *cnt = base + (i < extra);
}

/* ------------------------------------------------------------------------
 * RNG (copied from tinylm: splitmix64 seeding, xoshiro256**)
 * ---------------------------------------------------------------------- */
static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static void rng_seed(uint64_t st[4], uint64_t seed)
{
    uint64_t s = seed;
    for (int i = 0; i < 4; i++)
        st[i] = splitmix64(&s);
    if (!(st[0] | st[1] | st[2] | st[3]))
        st[0] = 1;
}

static uint64_t rotl64(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(uint64_t s[4])
{
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

static float rng_sym(uint64_t s[4])
{
    uint32_t u = (uint32_t)(rng_next(s) >> 40);
    return (float)((double)u * (1.0 / 8388608.0) - 1.0);
}

static uint64_t rng_below(uint64_t s[4], uint64_t n)
{
    uint64_t limit = UINT64_MAX - (UINT64_MAX % n);
    uint64_t r;
    do
        r = rng_next(s);
    while (r >= limit);
    return r % n;
}

/* ------------------------------------------------------------------------
 * Model
 * ---------------------------------------------------------------------- */
enum {
    P_EMBED,
    P_W1,
    P_B1,
    P_W2,
    P_B2,
    P_COUNT
};
static const char *const k_names[P_COUNT] = {
    "model.embed.weight", "model.hidden.weight", "model.hidden.bias",
    "model.out.weight",   "model.out.bias",
};

typedef struct param {
    const char *name;
    int ndim;
    uint64_t gshape[2], lshape[2], goff[2]; /* global shape, local box */
    size_t numel;                           /* local */
    size_t gnumel;                          /* global */
    float *data, *m, *v, *g;                /* local shard */
} param;

typedef struct model {
    int V, C, E, H, B, CE;
    int hlo, hn; /* this rank's hidden units [hlo, hlo + hn) */
    int blo, bn; /* this rank's slice of the global batch */
    float lr, min_lr, wd, beta1, beta2, eps;
    int warmup, total;
    uint64_t seed;
    uint8_t *tokens;
    size_t ntok;
    param p[P_COUNT];
    size_t nloc;  /* sum of local numel */
    float *arena; /* data | m | v | g, 4 * nloc */
    /* training state */
    uint64_t rng[4];
    int64_t global_step, sched_last_step;
    uint64_t consumed;
    /* scratch */
    size_t *pos; /* B */
    float *x, *h, *z, *zall, *dh, *dxp, *dxall, *pr, *gall;
} model;

static int read_corpus(model *m, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf)
            break;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        free(buf);
        return -1;
    }
    int present[256] = { 0 }, map[256], V = 0;
    for (size_t i = 0; i < n; i++)
        present[buf[i]] = 1;
    for (int b = 0; b < 256; b++)
        map[b] = present[b] ? V++ : -1;
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)map[buf[i]];
    m->tokens = buf;
    m->ntok = n;
    m->V = V;
    return 0;
}

static size_t init_draws(const model *m)
{
    return m->p[P_EMBED].gnumel + m->p[P_W1].gnumel + m->p[P_W2].gnumel;
}

static void model_setup(model *m)
{
    const int V = m->V, E = m->E, H = m->H, CE = m->CE;
    split(H, g_tp, g_tp_rank, &m->hlo, &m->hn);
    split(m->B, g_dp, g_dp_rank, &m->blo, &m->bn);
    const uint64_t hlo = (uint64_t)m->hlo, hn = (uint64_t)m->hn;
    struct {
        int nd;
        uint64_t g0, g1, l0, l1, o0, o1;
    } d[P_COUNT] = {
        { 2, (uint64_t)V, (uint64_t)E, (uint64_t)V, (uint64_t)E, 0, 0 },
        { 2, (uint64_t)CE, (uint64_t)H, (uint64_t)CE, hn, 0, hlo },
        { 1, (uint64_t)H, 0, hn, 0, hlo, 0 },
        { 2, (uint64_t)H, (uint64_t)V, hn, (uint64_t)V, hlo, 0 },
        { 1, (uint64_t)V, 0, (uint64_t)V, 0, 0, 0 },
    };
    size_t total = 0;
    for (int i = 0; i < P_COUNT; i++) {
        param *p = &m->p[i];
        p->name = k_names[i];
        p->ndim = d[i].nd;
        p->gshape[0] = d[i].g0, p->gshape[1] = d[i].g1;
        p->lshape[0] = d[i].l0, p->lshape[1] = d[i].l1;
        p->goff[0] = d[i].o0, p->goff[1] = d[i].o1;
        p->numel = (size_t)d[i].l0 * (p->ndim == 2 ? (size_t)d[i].l1 : 1);
        p->gnumel = (size_t)d[i].g0 * (p->ndim == 2 ? (size_t)d[i].g1 : 1);
        total += p->numel;
    }
    m->nloc = total;
    m->arena = xcalloc(4 * total, sizeof(float));
    size_t off = 0;
    for (int i = 0; i < P_COUNT; i++) {
        param *p = &m->p[i];
        p->data = m->arena + off;
        p->m = m->arena + total + off;
        p->v = m->arena + 2 * total + off;
        p->g = m->arena + 3 * total + off;
        off += p->numel;
    }
    const size_t bn = (size_t)(m->bn ? m->bn : 1);
    m->pos = xcalloc((size_t)m->B, sizeof *m->pos);
    m->x = xcalloc(bn * (size_t)CE, sizeof(float));
    m->h = xcalloc(bn * hn + 1, sizeof(float));
    m->z = xcalloc(bn * (size_t)V, sizeof(float));
    m->zall = xcalloc((size_t)g_tp * bn * (size_t)V, sizeof(float));
    m->pr = xcalloc(bn * (size_t)V, sizeof(float));
    m->dh = xcalloc(hn + 1, sizeof(float));
    m->dxp = xcalloc(bn * (size_t)CE, sizeof(float));
    m->dxall = xcalloc((size_t)g_tp * bn * (size_t)CE, sizeof(float));
    m->gall = xcalloc((size_t)g_dp * total, sizeof(float));

    /* initialisation: the single-process stream and order (embed, W1, W2
       from the seeded RNG, biases zero); each rank keeps its box */
    rng_seed(m->rng, m->seed);
    const float s_w1 = 1.0f / sqrtf((float)CE);
    const float s_w2 = 0.1f / sqrtf((float)H);
    for (size_t i = 0; i < m->p[P_EMBED].numel; i++)
        m->p[P_EMBED].data[i] = rng_sym(m->rng);
    float *w1 = m->p[P_W1].data, *w2 = m->p[P_W2].data;
    for (int i = 0; i < CE; i++)
        for (int j = 0; j < H; j++) {
            float w = s_w1 * rng_sym(m->rng);
            if (j >= m->hlo && j < m->hlo + m->hn)
                w1[(size_t)i * hn + (size_t)(j - m->hlo)] = w;
        }
    for (int j = 0; j < H; j++)
        for (int v = 0; v < V; v++) {
            float w = s_w2 * rng_sym(m->rng);
            if (j >= m->hlo && j < m->hlo + m->hn)
                w2[(size_t)(j - m->hlo) * (size_t)V + (size_t)v] = w;
        }
}

static void model_free(model *m)
{
    free(m->tokens);
    free(m->arena);
    free(m->pos);
    free(m->x);
    free(m->h);
    free(m->z);
    free(m->zall);
    free(m->pr);
    free(m->dh);
    free(m->dxp);
    free(m->dxall);
    free(m->gall);
}

static float sched_lr(const model *m, int64_t step)
{
    if (step < 0)
        step = 0;
    if (m->warmup > 0 && step < m->warmup)
        return (float)((double)m->lr * (double)(step + 1) / (double)m->warmup);
    if (step >= m->total)
        return m->min_lr;
    double span = (double)(m->total - m->warmup);
    double prog = span > 0 ? (double)(step - m->warmup) / span : 1.0;
    const double pi = 3.14159265358979323846;
    return (float)((double)m->min_lr +
                   0.5 * ((double)m->lr - (double)m->min_lr) * (1.0 + cos(pi * prog)));
}

static void check_mpi(int rc, const char *what)
{
    if (rc != MPI_SUCCESS)
        fatal(what, "MPI call failed");
}

/* Deterministic sum over a group: gather every rank's n floats, then add
   them in rank order (the same order on every rank). */
static void ordered_sum(float *buf, float *all, size_t n, int size, MPI_Comm comm)
{
    if (size == 1 || n == 0)
        return;
    if (n > (size_t)INT32_MAX)
        fatal("ordered_sum", "buffer too large");
    check_mpi(MPI_Allgather(buf, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, comm), "allgather");
    for (size_t k = 0; k < n; k++) {
        float s = all[k];
        for (int r = 1; r < size; r++)
            s += all[(size_t)r * n + k];
        buf[k] = s;
    }
}

/* One training step; returns the global mean loss. */
static float model_step(model *m)
{
    const int V = m->V, C = m->C, E = m->E, CE = m->CE, hn = m->hn, bn = m->bn;
    const float *emb = m->p[P_EMBED].data, *W1 = m->p[P_W1].data, *b1 = m->p[P_B1].data;
    const float *W2 = m->p[P_W2].data, *b2 = m->p[P_B2].data;
    float *gemb = m->p[P_EMBED].g, *gW1 = m->p[P_W1].g, *gb1 = m->p[P_B1].g;
    float *gW2 = m->p[P_W2].g, *gb2 = m->p[P_B2].g;
    const float inv_nb = 1.0f / (float)m->B; /* mean over the GLOBAL batch */

    memset(m->arena + 3 * m->nloc, 0, m->nloc * sizeof(float));
    /* the global batch, sampled identically on every rank */
    const uint64_t lo = (uint64_t)C, span = (uint64_t)m->ntok - lo;
    for (int b = 0; b < m->B; b++)
        m->pos[b] = (size_t)(lo + rng_below(m->rng, span));
    const size_t *pos = m->pos + m->blo;

    /* forward: local hidden units, partial logits */
    for (int b = 0; b < bn; b++) {
        const uint8_t *ctx = m->tokens + pos[b] - (size_t)C;
        float *x = m->x + (size_t)b * (size_t)CE;
        float *h = m->h + (size_t)b * (size_t)hn;
        float *z = m->z + (size_t)b * (size_t)V;
        for (int c = 0; c < C; c++)
            memcpy(x + c * E, emb + (size_t)ctx[c] * (size_t)E, (size_t)E * sizeof(float));
        for (int j = 0; j < hn; j++)
            h[j] = b1[j];
        for (int i = 0; i < CE; i++) {
            const float xi = x[i];
            const float *w = W1 + (size_t)i * (size_t)hn;
            for (int j = 0; j < hn; j++)
                h[j] += xi * w[j];
        }
        for (int j = 0; j < hn; j++)
            h[j] = tanhf(h[j]);
        /* TP rank 0's partial starts from the bias (with TP = 1 this is
           exactly tinylm's summation order) */
        for (int v = 0; v < V; v++)
            z[v] = g_tp_rank == 0 ? b2[v] : 0.0f;
        for (int j = 0; j < hn; j++) {
            const float hj = h[j];
            const float *w = W2 + (size_t)j * (size_t)V;
            for (int v = 0; v < V; v++)
                z[v] += hj * w[v];
        }
    }
    /* logits = sum of the TP partials in rank order */
    const size_t nz = (size_t)bn * (size_t)V;
    if (g_tp > 1 && nz)
        check_mpi(MPI_Allgather(m->z, (int)nz, MPI_FLOAT, m->zall, (int)nz, MPI_FLOAT, g_tp_comm),
                  "allgather logits");
    else if (nz)
        memcpy(m->zall, m->z, nz * sizeof(float));
    double loss_sum = 0.0;
    for (int b = 0; b < bn; b++) {
        float *p = m->pr + (size_t)b * (size_t)V;
        const int target = m->tokens[pos[b]];
        for (int v = 0; v < V; v++) {
            float s = m->zall[(size_t)b * (size_t)V + (size_t)v];
            for (int t = 1; t < g_tp; t++)
                s += m->zall[(size_t)t * nz + (size_t)b * (size_t)V + (size_t)v];
            p[v] = s;
        }
        float mx = p[0];
        for (int v = 1; v < V; v++)
            if (p[v] > mx)
                mx = p[v];
        float se = 0.0f;
        for (int v = 0; v < V; v++) {
            p[v] = expf(p[v] - mx);
            se += p[v];
        }
        const float inv_se = 1.0f / se;
        const float pt = p[target] * inv_se;
        loss_sum += -(double)logf(pt > 1e-30f ? pt : 1e-30f);
        for (int v = 0; v < V; v++)
            p[v] = p[v] * inv_se * inv_nb;
        p[target] -= inv_nb;
    }
    /* backward through the local shard */
    for (int b = 0; b < bn; b++) {
        const float *p = m->pr + (size_t)b * (size_t)V;
        const float *x = m->x + (size_t)b * (size_t)CE;
        const float *h = m->h + (size_t)b * (size_t)hn;
        float *dh = m->dh, *dx = m->dxp + (size_t)b * (size_t)CE;
        for (int v = 0; v < V; v++)
            gb2[v] += p[v];
        for (int j = 0; j < hn; j++) {
            const float hj = h[j];
            const float *w = W2 + (size_t)j * (size_t)V;
            float *gw = gW2 + (size_t)j * (size_t)V;
            float acc = 0.0f;
            for (int v = 0; v < V; v++) {
                gw[v] += hj * p[v];
                acc += p[v] * w[v];
            }
            dh[j] = acc * (1.0f - hj * hj);
        }
        for (int j = 0; j < hn; j++)
            gb1[j] += dh[j];
        for (int i = 0; i < CE; i++) {
            const float xi = x[i];
            const float *w = W1 + (size_t)i * (size_t)hn;
            float *gw = gW1 + (size_t)i * (size_t)hn;
            float acc = 0.0f;
            for (int j = 0; j < hn; j++) {
                gw[j] += xi * dh[j];
                acc += dh[j] * w[j];
            }
            dx[i] = acc;
        }
    }
    /* the embedding gradient needs the full dx: sum TP partials in order */
    const size_t nx = (size_t)bn * (size_t)CE;
    if (g_tp > 1 && nx)
        check_mpi(
            MPI_Allgather(m->dxp, (int)nx, MPI_FLOAT, m->dxall, (int)nx, MPI_FLOAT, g_tp_comm),
            "allgather dx");
    else if (nx)
        memcpy(m->dxall, m->dxp, nx * sizeof(float));
    for (int b = 0; b < bn; b++) {
        const uint8_t *ctx = m->tokens + pos[b] - (size_t)C;
        for (int c = 0; c < C; c++) {
            float *ge = gemb + (size_t)ctx[c] * (size_t)E;
            for (int e = 0; e < E; e++) {
                size_t k = (size_t)b * (size_t)CE + (size_t)(c * E + e);
                float s = m->dxall[k];
                for (int t = 1; t < g_tp; t++)
                    s += m->dxall[(size_t)t * nx + k];
                ge[e] += s;
            }
        }
    }
    /* gradients over DP: each slice's gradient is already scaled by
       1/global batch, so their sum (in rank order) is the global mean */
    ordered_sum(m->arena + 3 * m->nloc, m->gall, m->nloc, g_dp, g_dp_comm);
    double losses[64], *lall = g_dp <= 64 ? losses : xcalloc((size_t)g_dp, sizeof(double));
    check_mpi(MPI_Allgather(&loss_sum, 1, MPI_DOUBLE, lall, 1, MPI_DOUBLE, g_dp_comm),
              "allgather loss");
    double tot = 0.0;
    for (int r = 0; r < g_dp; r++)
        tot += lall[r];
    if (lall != losses)
        free(lall);

    /* AdamW on the local shards (copied from tinylm) */
    const float lr = sched_lr(m, m->sched_last_step);
    const float b1c = m->beta1, b2c = m->beta2, eps = m->eps, wd = m->wd;
    const double t = (double)(m->global_step + 1);
    const float bc1 = (float)(1.0 - pow((double)b1c, t));
    const float bc2 = (float)(1.0 - pow((double)b2c, t));
    const float step_size = lr / bc1;
    const float inv_sqrt_bc2 = 1.0f / sqrtf(bc2);
    for (int i = 0; i < P_COUNT; i++) {
        param *p = &m->p[i];
        const float decay = p->ndim == 2 ? 1.0f - lr * wd : 1.0f;
        for (size_t k = 0; k < p->numel; k++) {
            float w = p->data[k] * decay;
            float ma = b1c * p->m[k] + (1.0f - b1c) * p->g[k];
            float va = b2c * p->v[k] + (1.0f - b2c) * p->g[k] * p->g[k];
            p->m[k] = ma;
            p->v[k] = va;
            w -= step_size * ma / (sqrtf(va) * inv_sqrt_bc2 + eps);
            p->data[k] = w;
        }
    }
    m->global_step++;
    m->sched_last_step++;
    m->consumed += (uint64_t)m->B;
    return (float)(tot / (double)m->B);
}

/* Re-derive the RNG from the progress: replay the initialisation draws and
   one sample draw per consumed sample (what an uninterrupted run did). */
static void rng_rederive(model *m)
{
    rng_seed(m->rng, m->seed);
    size_t n = init_draws(m);
    for (size_t i = 0; i < n; i++)
        (void)rng_next(m->rng);
    const uint64_t span = (uint64_t)m->ntok - (uint64_t)m->C;
    for (uint64_t i = 0; i < m->consumed; i++)
        (void)rng_below(m->rng, span);
}

/* ------------------------------------------------------------------------
 * Digest of the global state (rank 0)
 * ---------------------------------------------------------------------- */
static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= UINT64_C(0x100000001B3);
    }
    return h;
}

/* Gather a local array of a sharded parameter over the TP group into the
   global layout on TP rank 0 (out: gnumel floats, only used there). */
static void gather_global(const model *m, const param *p, const float *local, float *out)
{
    if (p->numel == p->gnumel) { /* replicated */
        memcpy(out, local, p->gnumel * sizeof(float));
        return;
    }
    int *counts = xcalloc((size_t)g_tp, sizeof(int)), *displs = xcalloc((size_t)g_tp, sizeof(int));
    /* hidden.weight is split by columns (a [C*E, cnt] block per rank);
       hidden.bias and out.weight by rows: contiguous in rank order */
    const int colsplit = p == &m->p[P_W1];
    const size_t rows = (size_t)p->gshape[0];
    const size_t per_unit = colsplit ? rows : p->ndim == 2 ? (size_t)p->gshape[1] : 1;
    size_t acc = 0;
    for (int r = 0; r < g_tp; r++) {
        int lo, cnt;
        split(m->H, g_tp, r, &lo, &cnt);
        counts[r] = (int)((size_t)cnt * per_unit);
        displs[r] = (int)acc;
        acc += (size_t)counts[r];
    }
    float *tmp = g_tp_rank == 0 ? xcalloc(acc, sizeof(float)) : NULL;
    check_mpi(
        MPI_Gatherv(local, (int)p->numel, MPI_FLOAT, tmp, counts, displs, MPI_FLOAT, 0, g_tp_comm),
        "gatherv");
    if (tmp) {
        if (!colsplit) {
            memcpy(out, tmp, acc * sizeof(float)); /* rows are in rank order */
        } else {
            const size_t G1 = (size_t)p->gshape[1];
            for (int r = 0; r < g_tp; r++) {
                int lo, cnt;
                split(m->H, g_tp, r, &lo, &cnt);
                const float *blk = tmp + displs[r];
                for (size_t i = 0; i < rows; i++)
                    memcpy(out + i * G1 + (size_t)lo, blk + i * (size_t)cnt,
                           (size_t)cnt * sizeof(float));
            }
        }
    }
    free(tmp);
    free(counts);
    free(displs);
}

static uint64_t global_digest(const model *m)
{
    uint64_t h = UINT64_C(0xCBF29CE484222325);
    for (int i = 0; i < P_COUNT; i++) {
        const param *p = &m->p[i];
        float *full = xcalloc(p->gnumel, sizeof(float));
        if (g_rank == 0)
            h = fnv1a(h, p->name, strlen(p->name) + 1);
        const float *arrs[3] = { p->data, p->m, p->v };
        for (int a = 0; a < 3; a++) {
            gather_global(m, p, arrs[a], full);
            if (g_rank == 0)
                h = fnv1a(h, full, p->gnumel * sizeof(float));
        }
        free(full);
    }
    unsigned char le[8];
    uint64_t gs = (uint64_t)m->global_step;
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(gs >> (8 * i));
    return fnv1a(h, le, sizeof le);
}

/* ------------------------------------------------------------------------
 * Checkpoint blobs
 * ---------------------------------------------------------------------- */
static int sched_json(const model *m, char *buf, size_t cap)
{
    int n = snprintf(buf, cap,
                     "{\"last_step\":%lld,\"base_lr\":%.9g,\"warmup\":%d,"
                     "\"total\":%d,\"min_lr\":%.9g}",
                     (long long)m->sched_last_step, (double)m->lr, m->warmup, m->total,
                     (double)m->min_lr);
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

static void export_blobs(shs_state *st, const model *m)
{
    char sched[512], loader[128];
    int n = sched_json(m, sched, sizeof sched);
    int k = snprintf(loader, sizeof loader, "{\"consumed_samples\":%" PRIu64 "}", m->consumed);
    if (n < 0 || shs_state_set_blob(st, "rng", m->rng, sizeof m->rng) != SHS_OK ||
        shs_state_set_blob(st, "lr_scheduler", sched, (size_t)n) != SHS_OK ||
        shs_state_set_blob(st, "dataloader", loader, (size_t)k) != SHS_OK)
        fatal("export blobs", shs_last_error());
}

static void import_blobs(const shs_state *st, model *m)
{
    const void *p;
    size_t len;
    if (shs_state_get_blob(st, "rng", &p, &len) == SHS_OK) {
        uint64_t r[4];
        if (len != sizeof r)
            fatal("rng blob", "wrong size");
        memcpy(r, p, sizeof r);
        if (!(r[0] | r[1] | r[2] | r[3]))
            fatal("rng blob", "all-zero state");
        memcpy(m->rng, r, sizeof r);
    }
    if (shs_state_get_blob(st, "lr_scheduler", &p, &len) == SHS_OK) {
        char buf[512];
        long long last;
        float base, minlr;
        int warm, total;
        if (len >= sizeof buf)
            fatal("lr_scheduler blob", "too long");
        memcpy(buf, p, len);
        buf[len] = '\0';
        if (sscanf(buf,
                   "{\"last_step\":%lld,\"base_lr\":%f,\"warmup\":%d,\"total\":%d,"
                   "\"min_lr\":%f}",
                   &last, &base, &warm, &total, &minlr) != 5 ||
            last < 0 || warm < 0 || total < 1 || warm > total)
            fatal("lr_scheduler blob", buf);
        m->sched_last_step = last;
        m->lr = base;
        m->warmup = warm;
        m->total = total;
        m->min_lr = minlr;
    }
}

/* ------------------------------------------------------------------------
 * main
 * ---------------------------------------------------------------------- */
static void usage(FILE *out)
{
    fprintf(out, "usage: mpirun -np N trainer_mpi [options]\n" TRAINER_OPTIONS_HELP
                 "  --tp N                 tensor-parallel degree (default 2 if the world size\n"
                 "                         is even, else 1); data parallel = world / N\n"
                 "exit: 0 trained, 1 error, 2 usage\n");
}

static int finish(int rc)
{
    if (g_tp_comm != MPI_COMM_NULL)
        MPI_Comm_free(&g_tp_comm);
    if (g_dp_comm != MPI_COMM_NULL)
        MPI_Comm_free(&g_dp_comm);
    int any = 0;
    MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
}

int main(int argc, char **argv)
{
    /* every line out at once: a killed rank has said what it resumed from */
    setvbuf(stdout, NULL, _IOLBF, 0);
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);

    shs_config cfg;
    shs_config_init(&cfg);
    FILE *err = g_rank == 0 ? stderr : fopen("/dev/null", "w");
    if (!err)
        err = stderr;
    trainer_args ta;
    int prc = trainer_parse_args(argc, argv, &cfg, &ta, "trainer_mpi", 1, usage,
                                 g_rank == 0 ? stdout : err, err);
    if (prc >= 0) {
        shs_config_release(&cfg);
        return finish(prc);
    }
    long long batch = ta.batch, seed = ta.seed, log_every = ta.log_every;
    long long tp = ta.tp;
    const char *corpus = ta.corpus;
    if (tp < 0)
        tp = g_size % 2 == 0 ? 2 : 1;
    if (tp < 1 || tp > g_size || g_size % tp != 0) {
        fprintf(err, "trainer_mpi: --tp %lld does not divide the world size %d\n", tp, g_size);
        return finish(2);
    }
    if (batch < 1 || batch > 65536 || ta.steps > INT32_MAX) {
        fprintf(err, "trainer_mpi: --batch must be 1..65536\n");
        return finish(2);
    }
    if (cfg.async_save && g_size > 1 && provided < MPI_THREAD_MULTIPLE) {
        fprintf(err, "trainer_mpi: --async needs MPI_THREAD_MULTIPLE (provided level %d)\n",
                provided);
        return finish(1);
    }
    g_tp = (int)tp;
    g_dp = g_size / g_tp;
    g_tp_rank = g_rank % g_tp;
    g_dp_rank = g_rank / g_tp;
    check_mpi(MPI_Comm_split(MPI_COMM_WORLD, g_dp_rank, g_tp_rank, &g_tp_comm), "split tp");
    check_mpi(MPI_Comm_split(MPI_COMM_WORLD, g_tp_rank, g_dp_rank, &g_dp_comm), "split dp");

    /* the demo defaults of tinylm_config_default() */
    model mdl;
    memset(&mdl, 0, sizeof mdl);
    model *m = &mdl;
    m->C = 8, m->E = 16, m->H = 128, m->B = (int)batch;
    m->CE = m->C * m->E;
    m->lr = 1e-2f, m->min_lr = 1e-3f, m->wd = 0.01f;
    m->beta1 = 0.9f, m->beta2 = 0.99f, m->eps = 1e-8f;
    m->seed = (uint64_t)seed;
    if (read_corpus(m, corpus) != 0) {
        fprintf(err, "trainer_mpi: cannot read corpus '%s'\n", corpus);
        return finish(1);
    }
    if (m->V < 2 || m->ntok < (size_t)m->C + 2) {
        fprintf(err, "trainer_mpi: corpus '%s' too small\n", corpus);
        model_free(m);
        return finish(1);
    }
    /* train: epochs of --config: passes over the corpus' samples */
    long long samples = (long long)m->ntok - m->C;
    long long per_epoch = trainer_epoch_steps(samples, batch);
    trainer_apply_epochs(&ta, samples);
    if (ta.steps > INT32_MAX) {
        fprintf(err, "trainer_mpi: %lld steps is too many\n", ta.steps);
        model_free(m);
        return finish(2);
    }
    long long steps = ta.steps;
    m->warmup = 20, m->total = steps > 0 ? (int)steps : 1;
    if (m->warmup > m->total)
        m->warmup = m->total; /* (tinylm rejects this configuration) */
    if (g_tp > m->H) {
        fprintf(err, "trainer_mpi: --tp %d is more than the %d hidden units\n", g_tp, m->H);
        model_free(m);
        return finish(2);
    }
    model_setup(m);

    /* register every rank's local shard with its global shape and offset */
    shs_comm *comm = NULL;
    shs_state *st = NULL;
    shs_manager *mgr = NULL;
    if (shs_comm_create_mpi(&comm, MPI_COMM_WORLD) != SHS_OK || shs_state_create(&st) != SHS_OK)
        fatal("setup", shs_last_error());
    for (int i = 0; i < P_COUNT; i++) {
        param *p = &m->p[i];
        char n1[160], n2[160];
        shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
        s.name = p->name;
        s.ndim = (size_t)p->ndim;
        s.shape = p->lshape;
        s.global_shape = p->gshape;
        s.global_offset = p->goff;
        s.data = p->data;
        if (shs_state_add_tensor(st, &s) != SHS_OK)
            fatal("register", shs_last_error());
        s.kind = SHS_KIND_OPTIMIZER;
        snprintf(n1, sizeof n1, "optimizer.exp_avg.%s", p->name);
        snprintf(n2, sizeof n2, "optimizer.exp_avg_sq.%s", p->name);
        s.name = n1;
        s.data = p->m;
        if (shs_state_add_tensor(st, &s) != SHS_OK)
            fatal("register", shs_last_error());
        s.name = n2;
        s.data = p->v;
        if (shs_state_add_tensor(st, &s) != SHS_OK)
            fatal("register", shs_last_error());
    }
    if (shs_manager_create_comm(&mgr, &cfg, st, comm) != SHS_OK)
        fatal("shs_manager_create_comm", shs_last_error());
    SAY("topology: world %d = tp %d x dp %d (hidden %d, batch %d)\n", g_size, g_tp, g_dp, m->H,
        m->B);

    shs_progress prog = SHS_PROGRESS_INIT;
    prog.global_batch_size = batch;
    prog.loss_scale = 1.0;
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    if (shs_manager_load(&res, mgr, &prog) != SHS_OK)
        fatal("load", shs_last_error());
    char warned[1024] = "";
    if (res.loaded) {
        if (res.progress_loaded) {
            m->global_step = prog.global_step;
            m->consumed = (uint64_t)prog.consumed_samples;
        }
        if (res.rank_state_restored) {
            import_blobs(st, m);
        } else {
            m->sched_last_step = m->global_step;
            rng_rederive(m);
            SAY("rank-local state not restored: world size changed; RNG re-derived from step "
                "%lld\n",
                (long long)m->global_step);
        }
    }
    if (g_rank == 0) {
        trainer_say_load(stdout, &res, &prog);
        trainer_say_warning(stdout, mgr, warned, sizeof warned);
    }
    fflush(stdout);

    long delay_ms = 0;
    const char *dl = getenv("TRAINER_MPI_STEP_DELAY_MS");
    if (dl)
        delay_ms = atol(dl);

    while (m->global_step < steps) {
        float loss = model_step(m);
        int64_t gs = m->global_step;
        prog.global_step = gs;
        prog.epoch_num = per_epoch > 0 ? gs / per_epoch : 0;
        prog.step_num = per_epoch > 0 ? gs % per_epoch : gs;
        prog.consumed_samples = (int64_t)m->consumed;
        if (log_every && gs % log_every == 0)
            SAY("step %lld loss %.4f lr %.6f\n", (long long)gs, loss,
                sched_lr(m, m->sched_last_step));
        export_blobs(st, m);
        int saved;
        if (shs_manager_step(&saved, mgr, &prog) != SHS_OK)
            fatal("save", shs_last_error());
        if (g_rank == 0) /* retention runs on rank 0 */
            trainer_say_warning(stdout, mgr, warned, sizeof warned);
        if (saved && g_rank == 0)
            fflush(stdout);
        if (delay_ms > 0) {
            struct timespec ts = { delay_ms / 1000, (delay_ms % 1000) * 1000000L };
            nanosleep(&ts, NULL);
        }
    }
    prog.global_step = m->global_step;
    prog.consumed_samples = (int64_t)m->consumed;
    export_blobs(st, m);
    if (shs_manager_finish(mgr, &prog) != SHS_OK)
        fatal("final save", shs_last_error());
    if (g_rank == 0) {
        trainer_say_warning(stdout, mgr, warned, sizeof warned);
        trainer_say_last_save(stdout, mgr); /* rank 0's part */
    }
    if (shs_manager_export_dir(mgr))
        SAY("exported to %s\n", shs_manager_export_dir(mgr));
    uint64_t dig = global_digest(m);
    SAY("final_digest=%016" PRIx64 "\n", dig);
    SAY("global_step=%lld\n", (long long)m->global_step);
    fflush(stdout);

    shs_manager_free(mgr);
    shs_state_free(st);
    shs_comm_free(comm);
    model_free(m);
    shs_config_release(&cfg);
    if (err != stderr)
        fclose(err);
    return finish(0);
}
