/* tinylm.c -- deterministic character-level MLP language model trainer core.
 * See tinylm.h.  Plain C11 + libm; single threaded; fixed loop orders. */
#include "tinylm.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    P_EMBED,
    P_W1,
    P_B1,
    P_W2,
    P_B2,
    P_COUNT
};

static const char *const k_param_names[P_COUNT] = {
    "model.embed.weight", "model.hidden.weight", "model.hidden.bias",
    "model.out.weight",   "model.out.bias",
};

typedef struct tinylm_sched {
    int64_t last_step; /* number of scheduler steps taken so far */
    float base_lr, min_lr;
    int warmup, total;
} tinylm_sched;

struct tinylm {
    tinylm_config cfg;
    int V, C, E, H, B;

    /* corpus as token ids */
    uint8_t *tokens;
    size_t ntok;
    uint8_t vocab[256]; /* id -> byte */

    tinylm_param params[P_COUNT];
    float *grads[P_COUNT];
    size_t numel_total;
    float *arena; /* data | exp_avg | exp_avg_sq | grad, 4 * numel_total */

    /* training state */
    uint64_t rng[TINYLM_RNG_WORDS];
    int64_t global_step;
    uint64_t consumed;
    tinylm_sched sched;

    /* scratch, per batch */
    size_t *pos;  /* B target positions */
    float *x;     /* B * C*E   concatenated embeddings */
    float *h;     /* B * H     tanh activations */
    float *probs; /* V         softmax / dlogits of the current example */
    float *dh;    /* H */
    float *dx;    /* C*E */
};

/* ------------------------------------------------------------------------
 * RNG: splitmix64 for seeding, xoshiro256** for the stream.
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
        st[0] = 1; /* never all-zero */
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

/* Uniform float in [-1, 1), exactly representable (24-bit grid). */
static float rng_sym(uint64_t s[4])
{
    uint32_t u = (uint32_t)(rng_next(s) >> 40); /* 24 bits */
    return (float)((double)u * (1.0 / 8388608.0) - 1.0);
}

/* Uniform integer in [0, n), n > 0; rejection sampling (no modulo bias). */
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
 * Init / free
 * ---------------------------------------------------------------------- */

void tinylm_config_default(tinylm_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->context = 8;
    cfg->embed = 16;
    cfg->hidden = 128;
    cfg->batch = 32;
    cfg->lr = 1e-2f;
    cfg->min_lr = 1e-3f;
    cfg->weight_decay = 0.01f;
    cfg->beta1 = 0.9f;
    cfg->beta2 = 0.99f;
    cfg->eps = 1e-8f;
    cfg->warmup_steps = 20;
    cfg->total_steps = 1000;
    cfg->seed = 1234;
}

static int config_ok(const tinylm_config *c)
{
    if (c->context < 1 || c->context > 256)
        return 0;
    if (c->embed < 1 || c->embed > 4096)
        return 0;
    if (c->hidden < 1 || c->hidden > 65536)
        return 0;
    if (c->batch < 1 || c->batch > 65536)
        return 0;
    if (!(isfinite(c->lr) && c->lr >= 0.0f))
        return 0;
    if (!(isfinite(c->min_lr) && c->min_lr >= 0.0f))
        return 0;
    if (!(isfinite(c->weight_decay) && c->weight_decay >= 0.0f))
        return 0;
    if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f))
        return 0;
    if (!(c->beta2 >= 0.0f && c->beta2 < 1.0f))
        return 0;
    if (!(isfinite(c->eps) && c->eps > 0.0f))
        return 0;
    if (c->warmup_steps < 0 || c->total_steps < 1)
        return 0;
    if (c->warmup_steps > c->total_steps)
        return 0;
    return 1;
}

static int read_corpus(const char *path, uint8_t **data, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        errno = ENOMEM;
        return -1;
    }
    errno = 0;
    for (;;) {
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(f);
                errno = ENOMEM;
                return -1;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    int err = ferror(f), saved = errno;
    fclose(f);
    if (err) {
        free(buf);
        errno = saved ? saved : EIO;
        return -1;
    }
    *data = buf;
    *len = n;
    return 0;
}

static void init_params(tinylm *m)
{
    /* Fixed order: embed, W1, W2 from the seeded stream; biases zero. */
    tinylm_param *p = m->params;
    float s_w1 = 1.0f / sqrtf((float)(m->C * m->E));
    float s_w2 = 0.1f / sqrtf((float)m->H); /* small: initial loss ~ ln V */
    for (size_t i = 0; i < p[P_EMBED].numel; i++)
        p[P_EMBED].data[i] = rng_sym(m->rng);
    for (size_t i = 0; i < p[P_W1].numel; i++)
        p[P_W1].data[i] = s_w1 * rng_sym(m->rng);
    for (size_t i = 0; i < p[P_W2].numel; i++)
        p[P_W2].data[i] = s_w2 * rng_sym(m->rng);
}

int tinylm_init(tinylm **out, const tinylm_config *cfg, const char *corpus_path)
{
    if (out)
        *out = NULL;
    if (!out || !cfg || !corpus_path) {
        fprintf(stderr, "tinylm: invalid arguments\n");
        return -1;
    }
    if (!config_ok(cfg)) {
        fprintf(stderr, "tinylm: invalid configuration\n");
        return -1;
    }
    uint8_t *text = NULL;
    size_t n = 0;
    if (read_corpus(corpus_path, &text, &n) != 0) {
        fprintf(stderr, "tinylm: cannot read corpus '%s': %s\n", corpus_path, strerror(errno));
        return -2;
    }
    int present[256] = { 0 };
    for (size_t i = 0; i < n; i++)
        present[text[i]] = 1;
    int map[256], V = 0;
    uint8_t vocab[256];
    for (int b = 0; b < 256; b++) {
        map[b] = -1;
        if (present[b]) {
            vocab[V] = (uint8_t)b;
            map[b] = V++;
        }
    }
    if (V < 2 || n < (size_t)cfg->context + 2) {
        fprintf(stderr,
                "tinylm: corpus '%s' too small (%zu bytes, %d distinct; need >= "
                "%d bytes and >= 2 distinct)\n",
                corpus_path, n, V, cfg->context + 2);
        free(text);
        return -3;
    }

    tinylm *m = calloc(1, sizeof *m);
    if (!m) {
        free(text);
        goto oom;
    }
    m->cfg = *cfg;
    m->V = V;
    m->C = cfg->context;
    m->E = cfg->embed;
    m->H = cfg->hidden;
    m->B = cfg->batch;
    memcpy(m->vocab, vocab, (size_t)V);
    for (size_t i = 0; i < n; i++)
        text[i] = (uint8_t)map[text[i]];
    m->tokens = text;
    m->ntok = n;

    const size_t CE = (size_t)m->C * (size_t)m->E;
    const uint64_t shapes[P_COUNT][2] = {
        { (uint64_t)V, (uint64_t)m->E }, { CE, (uint64_t)m->H }, { (uint64_t)m->H, 0 },
        { (uint64_t)m->H, (uint64_t)V }, { (uint64_t)V, 0 },
    };
    size_t total = 0;
    for (int i = 0; i < P_COUNT; i++) {
        tinylm_param *p = &m->params[i];
        p->name = k_param_names[i];
        p->ndim = shapes[i][1] ? 2 : 1;
        p->shape[0] = shapes[i][0];
        p->shape[1] = shapes[i][1];
        p->numel = (size_t)shapes[i][0] * (p->ndim == 2 ? (size_t)shapes[i][1] : 1);
        total += p->numel;
    }
    m->numel_total = total;
    m->arena = calloc(4 * total, sizeof(float));
    m->pos = calloc((size_t)m->B, sizeof *m->pos);
    m->x = calloc((size_t)m->B * CE, sizeof(float));
    m->h = calloc((size_t)m->B * (size_t)m->H, sizeof(float));
    m->probs = calloc((size_t)V, sizeof(float));
    m->dh = calloc((size_t)m->H, sizeof(float));
    m->dx = calloc(CE, sizeof(float));
    if (!m->arena || !m->pos || !m->x || !m->h || !m->probs || !m->dh || !m->dx) {
        tinylm_free(m);
        goto oom;
    }
    size_t off = 0;
    for (int i = 0; i < P_COUNT; i++) {
        tinylm_param *p = &m->params[i];
        p->data = m->arena + off;
        p->exp_avg = m->arena + total + off;
        p->exp_avg_sq = m->arena + 2 * total + off;
        m->grads[i] = m->arena + 3 * total + off;
        off += p->numel;
    }

    rng_seed(m->rng, cfg->seed);
    init_params(m);
    m->global_step = 0;
    m->consumed = 0;
    m->sched.last_step = 0;
    m->sched.base_lr = cfg->lr;
    m->sched.min_lr = cfg->min_lr;
    m->sched.warmup = cfg->warmup_steps;
    m->sched.total = cfg->total_steps;
    *out = m;
    return 0;

oom:
    fprintf(stderr, "tinylm: out of memory\n");
    return -4;
}

void tinylm_free(tinylm *m)
{
    if (!m)
        return;
    free(m->tokens);
    free(m->arena);
    free(m->pos);
    free(m->x);
    free(m->h);
    free(m->probs);
    free(m->dh);
    free(m->dx);
    free(m);
}

const tinylm_config *tinylm_get_config(const tinylm *m)
{
    return &m->cfg;
}
int tinylm_vocab_size(const tinylm *m)
{
    return m->V;
}
size_t tinylm_corpus_size(const tinylm *m)
{
    return m->ntok;
}
size_t tinylm_param_count(const tinylm *m)
{
    (void)m;
    return P_COUNT;
}
size_t tinylm_numel_total(const tinylm *m)
{
    return m->numel_total;
}

const tinylm_param *tinylm_param_at(const tinylm *m, size_t i)
{
    return i < P_COUNT ? &m->params[i] : NULL;
}

/* ------------------------------------------------------------------------
 * Forward / backward
 * ---------------------------------------------------------------------- */

/* Loss (and, if want_grad, gradients accumulated into m->grads, which the
 * caller zeroes) for the nb examples whose target positions are pos[0..nb).
 * Target at position t is predicted from tokens t-C .. t-1.  Gradients are
 * of the mean loss.  The per-example losses are summed in double in
 * example order. */
static float forward_backward(tinylm *m, const size_t *pos, int nb, int want_grad)
{
    const int V = m->V, C = m->C, E = m->E, H = m->H, CE = C * E;
    const float *emb = m->params[P_EMBED].data;
    const float *W1 = m->params[P_W1].data;
    const float *b1 = m->params[P_B1].data;
    const float *W2 = m->params[P_W2].data;
    const float *b2 = m->params[P_B2].data;
    float *gemb = m->grads[P_EMBED], *gW1 = m->grads[P_W1];
    float *gb1 = m->grads[P_B1], *gW2 = m->grads[P_W2], *gb2 = m->grads[P_B2];
    float *p = m->probs, *dh = m->dh, *dx = m->dx;
    const float inv_nb = 1.0f / (float)nb;
    double loss_sum = 0.0;

    for (int b = 0; b < nb; b++) {
        const uint8_t *ctx = m->tokens + pos[b] - (size_t)C;
        const int target = m->tokens[pos[b]];
        float *x = m->x + (size_t)b * (size_t)CE;
        float *h = m->h + (size_t)b * (size_t)H;

        /* embed + concat */
        for (int c = 0; c < C; c++)
            memcpy(x + c * E, emb + (size_t)ctx[c] * (size_t)E, (size_t)E * sizeof(float));
        /* hidden = tanh(x W1 + b1) */
        for (int j = 0; j < H; j++)
            h[j] = b1[j];
        for (int i = 0; i < CE; i++) {
            const float xi = x[i];
            const float *w = W1 + (size_t)i * (size_t)H;
            for (int j = 0; j < H; j++)
                h[j] += xi * w[j];
        }
        for (int j = 0; j < H; j++)
            h[j] = tanhf(h[j]);
        /* logits = h W2 + b2 */
        for (int v = 0; v < V; v++)
            p[v] = b2[v];
        for (int j = 0; j < H; j++) {
            const float hj = h[j];
            const float *w = W2 + (size_t)j * (size_t)V;
            for (int v = 0; v < V; v++)
                p[v] += hj * w[v];
        }
        /* softmax cross-entropy */
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
        if (!want_grad)
            continue;

        /* dlogits = (softmax - onehot) / nb */
        for (int v = 0; v < V; v++)
            p[v] = p[v] * inv_se * inv_nb;
        p[target] -= inv_nb;
        for (int v = 0; v < V; v++)
            gb2[v] += p[v];
        for (int j = 0; j < H; j++) {
            const float hj = h[j];
            const float *w = W2 + (size_t)j * (size_t)V;
            float *gw = gW2 + (size_t)j * (size_t)V;
            float acc = 0.0f;
            for (int v = 0; v < V; v++) {
                gw[v] += hj * p[v];
                acc += p[v] * w[v];
            }
            dh[j] = acc * (1.0f - hj * hj); /* through tanh */
        }
        for (int j = 0; j < H; j++)
            gb1[j] += dh[j];
        for (int i = 0; i < CE; i++) {
            const float xi = x[i];
            const float *w = W1 + (size_t)i * (size_t)H;
            float *gw = gW1 + (size_t)i * (size_t)H;
            float acc = 0.0f;
            for (int j = 0; j < H; j++) {
                gw[j] += xi * dh[j];
                acc += dh[j] * w[j];
            }
            dx[i] = acc;
        }
        for (int c = 0; c < C; c++) {
            float *ge = gemb + (size_t)ctx[c] * (size_t)E;
            for (int e = 0; e < E; e++)
                ge[e] += dx[c * E + e];
        }
    }
    return (float)(loss_sum / (double)nb);
}

static void sample_positions(tinylm *m, uint64_t rng[4], size_t *pos, int nb)
{
    const uint64_t lo = (uint64_t)m->C, span = (uint64_t)m->ntok - lo;
    for (int b = 0; b < nb; b++)
        pos[b] = (size_t)(lo + rng_below(rng, span));
}

/* ------------------------------------------------------------------------
 * Schedule
 * ---------------------------------------------------------------------- */

static float sched_lr(const tinylm_sched *s, int64_t step)
{
    if (step < 0)
        step = 0;
    if (s->warmup > 0 && step < s->warmup)
        return (float)((double)s->base_lr * (double)(step + 1) / (double)s->warmup);
    if (step >= s->total)
        return s->min_lr;
    double span = (double)(s->total - s->warmup);
    double prog = span > 0 ? (double)(step - s->warmup) / span : 1.0;
    const double pi = 3.14159265358979323846;
    return (float)((double)s->min_lr +
                   0.5 * ((double)s->base_lr - (double)s->min_lr) * (1.0 + cos(pi * prog)));
}

float tinylm_lr_at(const tinylm *m, int64_t step)
{
    return sched_lr(&m->sched, step);
}
float tinylm_current_lr(const tinylm *m)
{
    return sched_lr(&m->sched, m->sched.last_step);
}

/* ------------------------------------------------------------------------
 * Step
 * ---------------------------------------------------------------------- */

static void adamw_update(tinylm *m, float lr)
{
    const float b1 = m->cfg.beta1, b2 = m->cfg.beta2, eps = m->cfg.eps;
    const float wd = m->cfg.weight_decay;
    const double t = (double)(m->global_step + 1);
    const float bc1 = (float)(1.0 - pow((double)b1, t));
    const float bc2 = (float)(1.0 - pow((double)b2, t));
    const float step_size = lr / bc1;
    const float inv_sqrt_bc2 = 1.0f / sqrtf(bc2);
    for (int i = 0; i < P_COUNT; i++) {
        tinylm_param *p = &m->params[i];
        const float *g = m->grads[i];
        const float decay = p->ndim == 2 ? 1.0f - lr * wd : 1.0f;
        for (size_t k = 0; k < p->numel; k++) {
            float w = p->data[k] * decay;
            float ma = b1 * p->exp_avg[k] + (1.0f - b1) * g[k];
            float va = b2 * p->exp_avg_sq[k] + (1.0f - b2) * g[k] * g[k];
            p->exp_avg[k] = ma;
            p->exp_avg_sq[k] = va;
            w -= step_size * ma / (sqrtf(va) * inv_sqrt_bc2 + eps);
            p->data[k] = w;
        }
    }
}

float tinylm_step(tinylm *m)
{
    memset(m->grads[0], 0, m->numel_total * sizeof(float));
    sample_positions(m, m->rng, m->pos, m->B);
    float loss = forward_backward(m, m->pos, m->B, 1);
    adamw_update(m, sched_lr(&m->sched, m->sched.last_step));
    m->global_step++;
    m->sched.last_step++;
    m->consumed += (uint64_t)m->B;
    return loss;
}

float tinylm_eval_loss(tinylm *m, int nbatches)
{
    if (nbatches < 1)
        return NAN;
    uint64_t erng[4];
    /* A constant eval seed: the same batches for every model and seed. */
    rng_seed(erng, UINT64_C(0xE7A1E7A1E7A1E7A1));
    double sum = 0.0;
    for (int i = 0; i < nbatches; i++) {
        sample_positions(m, erng, m->pos, m->B);
        sum += (double)forward_backward(m, m->pos, m->B, 0);
    }
    return (float)(sum / (double)nbatches);
}

/* ------------------------------------------------------------------------
 * State accessors
 * ---------------------------------------------------------------------- */

int64_t tinylm_global_step(const tinylm *m)
{
    return m->global_step;
}
void tinylm_set_global_step(tinylm *m, int64_t step)
{
    m->global_step = step;
}
uint64_t tinylm_consumed_samples(const tinylm *m)
{
    return m->consumed;
}
void tinylm_set_consumed_samples(tinylm *m, uint64_t n)
{
    m->consumed = n;
}

size_t tinylm_rng_state(const tinylm *m, uint64_t out[TINYLM_RNG_WORDS])
{
    memcpy(out, m->rng, sizeof m->rng);
    return TINYLM_RNG_WORDS;
}

int tinylm_set_rng_state(tinylm *m, const uint64_t in[TINYLM_RNG_WORDS])
{
    if (!(in[0] | in[1] | in[2] | in[3]))
        return -1;
    memcpy(m->rng, in, sizeof m->rng);
    return 0;
}

/* ------------------------------------------------------------------------
 * Scheduler JSON
 * ---------------------------------------------------------------------- */

int tinylm_sched_to_json(const tinylm *m, char *buf, size_t cap)
{
    int n = snprintf(buf, cap,
                     "{\"last_step\":%lld,\"base_lr\":%.9g,\"warmup\":%d,"
                     "\"total\":%d,\"min_lr\":%.9g}",
                     (long long)m->sched.last_step, (double)m->sched.base_lr, m->sched.warmup,
                     m->sched.total, (double)m->sched.min_lr);
    if (n < 0 || (size_t)n >= cap)
        return -1;
    return n;
}

static const char *skip_ws(const char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    return s;
}

static int expect_lit(const char **s, const char *lit)
{
    const char *p = skip_ws(*s);
    size_t n = strlen(lit);
    if (strncmp(p, lit, n) != 0)
        return -1;
    *s = p + n;
    return 0;
}

/* Decimal integer: -?[0-9]+ (at most 19 digits). */
static int parse_i64(const char **s, int64_t *out)
{
    const char *p = skip_ws(*s);
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    if (*p < '0' || *p > '9')
        return -1;
    uint64_t v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9') {
        if (++digits > 18)
            return -1;
        v = v * 10 + (uint64_t)(*p - '0');
        p++;
    }
    *out = neg ? -(int64_t)v : (int64_t)v;
    *s = p;
    return 0;
}

/* JSON-ish number: -?digits[.digits][(e|E)[+-]digits], finite float. */
static int parse_f32(const char **s, float *out)
{
    const char *p = skip_ws(*s), *start = p;
    if (*p == '-')
        p++;
    if (*p < '0' || *p > '9')
        return -1;
    while (*p >= '0' && *p <= '9')
        p++;
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return -1;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (*p < '0' || *p > '9')
            return -1;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    size_t len = (size_t)(p - start);
    char tmp[64];
    if (len >= sizeof tmp)
        return -1;
    memcpy(tmp, start, len);
    tmp[len] = '\0';
    char *end = NULL;
    errno = 0;
    float v = strtof(tmp, &end);
    if (end != tmp + len || errno == ERANGE || !isfinite(v))
        return -1;
    *out = v;
    *s = p;
    return 0;
}

int tinylm_sched_from_json(tinylm *m, const char *json)
{
    if (!m || !json)
        return -1;
    const char *s = json;
    int64_t last, warm, total;
    float base, minlr;
    if (expect_lit(&s, "{") || expect_lit(&s, "\"last_step\"") || expect_lit(&s, ":") ||
        parse_i64(&s, &last) || expect_lit(&s, ",") || expect_lit(&s, "\"base_lr\"") ||
        expect_lit(&s, ":") || parse_f32(&s, &base) || expect_lit(&s, ",") ||
        expect_lit(&s, "\"warmup\"") || expect_lit(&s, ":") || parse_i64(&s, &warm) ||
        expect_lit(&s, ",") || expect_lit(&s, "\"total\"") || expect_lit(&s, ":") ||
        parse_i64(&s, &total) || expect_lit(&s, ",") || expect_lit(&s, "\"min_lr\"") ||
        expect_lit(&s, ":") || parse_f32(&s, &minlr) || expect_lit(&s, "}"))
        return -1;
    if (*skip_ws(s) != '\0')
        return -1;
    if (last < 0 || warm < 0 || total < 1 || total > 2147483647 || warm > total || base < 0.0f ||
        minlr < 0.0f)
        return -1;
    m->sched.last_step = last;
    m->sched.base_lr = base;
    m->sched.warmup = (int)warm;
    m->sched.total = (int)total;
    m->sched.min_lr = minlr;
    return 0;
}

/* ------------------------------------------------------------------------
 * Digest
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

uint64_t tinylm_digest(const tinylm *m)
{
    uint64_t h = UINT64_C(0xCBF29CE484222325);
    for (int i = 0; i < P_COUNT; i++) {
        const tinylm_param *p = &m->params[i];
        h = fnv1a(h, p->name, strlen(p->name) + 1);
        h = fnv1a(h, p->data, p->numel * sizeof(float));
        h = fnv1a(h, p->exp_avg, p->numel * sizeof(float));
        h = fnv1a(h, p->exp_avg_sq, p->numel * sizeof(float));
    }
    unsigned char le[8];
    uint64_t gs = (uint64_t)m->global_step;
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(gs >> (8 * i));
    return fnv1a(h, le, sizeof le);
}
