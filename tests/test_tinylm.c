/* test_tinylm.c -- the demo trainer's deterministic training core
 * (examples/tinylm).  The core is compiled into this test directly.
 *
 * The central property: copying every piece of training state (parameters,
 * AdamW moments, global step, RNG, consumed samples, scheduler JSON) out of
 * a run at step k into a second instance and continuing gives bitwise the
 * same losses and final digest as the uninterrupted run.
 */
#include "testutil.h"

#include "../examples/tinylm/tinylm.c"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CORPUS SHS_TEST_SOURCE_DIR "/examples/tinylm/corpus.txt"

static tinylm *new_model(const tinylm_config *cfg)
{
    tinylm *m = NULL;
    assert_int_equal(tinylm_init(&m, cfg, CORPUS), 0);
    assert_non_null(m);
    return m;
}

static tinylm *new_default(void)
{
    tinylm_config cfg;
    tinylm_config_default(&cfg);
    return new_model(&cfg);
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Copy all training state from src into dst, through the public API only,
 * the way the checkpoint manager will. */
static void copy_state(tinylm *dst, const tinylm *src)
{
    assert_int_equal(tinylm_param_count(dst), tinylm_param_count(src));
    for (size_t i = 0; i < tinylm_param_count(src); i++) {
        const tinylm_param *s = tinylm_param_at(src, i);
        const tinylm_param *d = tinylm_param_at(dst, i);
        assert_string_equal(s->name, d->name);
        assert_int_equal(s->numel, d->numel);
        memcpy(d->data, s->data, s->numel * sizeof(float));
        memcpy(d->exp_avg, s->exp_avg, s->numel * sizeof(float));
        memcpy(d->exp_avg_sq, s->exp_avg_sq, s->numel * sizeof(float));
    }
    tinylm_set_global_step(dst, tinylm_global_step(src));
    tinylm_set_consumed_samples(dst, tinylm_consumed_samples(src));
    uint64_t rng[TINYLM_RNG_WORDS];
    assert_int_equal(tinylm_rng_state(src, rng), TINYLM_RNG_WORDS);
    assert_int_equal(tinylm_set_rng_state(dst, rng), 0);
    char json[256];
    assert_true(tinylm_sched_to_json(src, json, sizeof json) > 0);
    assert_int_equal(tinylm_sched_from_json(dst, json), 0);
}

static void assert_same_state(const tinylm *a, const tinylm *b)
{
    assert_true(tinylm_digest(a) == tinylm_digest(b));
    assert_true(tinylm_global_step(a) == tinylm_global_step(b));
    assert_true(tinylm_consumed_samples(a) == tinylm_consumed_samples(b));
    uint64_t ra[4], rb[4];
    tinylm_rng_state(a, ra);
    tinylm_rng_state(b, rb);
    assert_memory_equal(ra, rb, sizeof ra);
    char ja[256], jb[256];
    assert_true(tinylm_sched_to_json(a, ja, sizeof ja) > 0);
    assert_true(tinylm_sched_to_json(b, jb, sizeof jb) > 0);
    assert_string_equal(ja, jb);
}

/* ------------------------------------------------------------------------
 * Init and API shape
 * ---------------------------------------------------------------------- */

static void test_init_errors(void **state)
{
    (void)state;
    tinylm_config cfg;
    tinylm_config_default(&cfg);
    tinylm *m = (tinylm *)(uintptr_t)1;
    int rc = tinylm_init(&m, &cfg, "/nonexistent/dir/no-such-corpus.txt");
    assert_int_not_equal(rc, 0);
    assert_int_equal(rc, -2);
    assert_null(m);

    /* bad configs */
    tinylm_config bad = cfg;
    bad.context = 0;
    assert_int_equal(tinylm_init(&m, &bad, CORPUS), -1);
    assert_null(m);
    bad = cfg;
    bad.beta2 = 1.0f;
    assert_int_equal(tinylm_init(&m, &bad, CORPUS), -1);
    bad = cfg;
    bad.warmup_steps = cfg.total_steps + 1;
    assert_int_equal(tinylm_init(&m, &bad, CORPUS), -1);
    assert_int_equal(tinylm_init(&m, NULL, CORPUS), -1);
    assert_int_equal(tinylm_init(&m, &cfg, NULL), -1);

    /* too small a corpus: one distinct byte, or shorter than the context */
    char *dir = tu_mkdtemp();
    assert_non_null(dir);
    const char *one = tu_path(dir, "one.txt");
    assert_int_equal(tu_write_file(one, "aaaaaaaaaaaaaaaaaaaaaaaa", 24), 0);
    assert_int_equal(tinylm_init(&m, &cfg, one), -3);
    assert_null(m);
    const char *tiny = tu_path(dir, "tiny.txt");
    assert_int_equal(tu_write_file(tiny, "abcab", 5), 0);
    assert_int_equal(tinylm_init(&m, &cfg, tiny), -3);
    assert_null(m);
    const char *empty = tu_path(dir, "empty.txt");
    assert_int_equal(tu_write_file(empty, "", 0), 0);
    assert_int_equal(tinylm_init(&m, &cfg, empty), -3);
    /* a directory is not a corpus */
    assert_int_not_equal(tinylm_init(&m, &cfg, dir), 0);
    assert_null(m);
    tu_rmtree(dir);
    free(dir);
    tinylm_free(NULL);
}

static void test_params_api(void **state)
{
    (void)state;
    tinylm *m = new_default();
    const tinylm_config *cfg = tinylm_get_config(m);
    const uint64_t V = (uint64_t)tinylm_vocab_size(m);
    const uint64_t C = (uint64_t)cfg->context, E = (uint64_t)cfg->embed, H = (uint64_t)cfg->hidden;
    assert_true(V >= 30 && V <= 100);
    assert_true(tinylm_corpus_size(m) >= 20000 && tinylm_corpus_size(m) <= 40000);
    assert_int_equal(tinylm_param_count(m), 5);
    assert_null(tinylm_param_at(m, 5));

    static const char *names[5] = { "model.embed.weight", "model.hidden.weight",
                                    "model.hidden.bias", "model.out.weight", "model.out.bias" };
    const uint64_t shapes[5][2] = { { V, E }, { C * E, H }, { H, 0 }, { H, V }, { V, 0 } };
    size_t total = 0;
    float *ptrs[5];
    for (size_t i = 0; i < 5; i++) {
        const tinylm_param *p = tinylm_param_at(m, i);
        assert_string_equal(p->name, names[i]);
        assert_int_equal(p->ndim, shapes[i][1] ? 2 : 1);
        assert_int_equal(p->shape[0], shapes[i][0]);
        assert_int_equal(p->shape[1], shapes[i][1]);
        assert_int_equal(p->numel, shapes[i][0] * (shapes[i][1] ? shapes[i][1] : 1));
        assert_non_null(p->data);
        assert_non_null(p->exp_avg);
        assert_non_null(p->exp_avg_sq);
        for (size_t k = 0; k < p->numel; k++) {
            assert_true(isfinite(p->data[k]));
            assert_true(p->exp_avg[k] == 0.0f && p->exp_avg_sq[k] == 0.0f);
        }
        ptrs[i] = p->data;
        total += p->numel;
    }
    assert_int_equal(tinylm_numel_total(m), total);
    assert_int_equal(total, V * E + C * E * H + H + H * V + V);
    /* vocabulary: sorted distinct bytes */
    for (int v = 1; v < (int)V; v++)
        assert_true(m->vocab[v - 1] < m->vocab[v]);

    assert_int_equal(tinylm_global_step(m), 0);
    assert_int_equal(tinylm_consumed_samples(m), 0);
    for (int i = 0; i < 3; i++)
        tinylm_step(m);
    assert_int_equal(tinylm_global_step(m), 3);
    assert_int_equal(tinylm_consumed_samples(m), 3 * (uint64_t)cfg->batch);
    for (size_t i = 0; i < 5; i++) {
        assert_ptr_equal(tinylm_param_at(m, i)->data, ptrs[i]); /* stable */
    }

    /* RNG state: all-zero is rejected and leaves the state alone */
    uint64_t before[4], after[4], zero[4] = { 0, 0, 0, 0 };
    tinylm_rng_state(m, before);
    assert_int_equal(tinylm_set_rng_state(m, zero), -1);
    tinylm_rng_state(m, after);
    assert_memory_equal(before, after, sizeof before);
    tinylm_free(m);
}

/* ------------------------------------------------------------------------
 * Determinism and bit-exact resume
 * ---------------------------------------------------------------------- */

static void test_deterministic(void **state)
{
    (void)state;
    tinylm_config cfg;
    tinylm_config_default(&cfg);
    tinylm *a = new_model(&cfg), *b = new_model(&cfg);
    assert_true(tinylm_digest(a) == tinylm_digest(b));
    for (int i = 0; i < 40; i++) {
        float la = tinylm_step(a), lb = tinylm_step(b);
        assert_int_equal(f32_bits(la), f32_bits(lb));
    }
    assert_same_state(a, b);

    /* a different seed gives a different model */
    cfg.seed ^= 1;
    tinylm *c = new_model(&cfg);
    tinylm *d = new_model(&cfg);
    for (int i = 0; i < 40; i++)
        tinylm_step(c);
    assert_true(tinylm_digest(a) != tinylm_digest(c));
    /* the digest covers the step count */
    tinylm_set_global_step(d, 7);
    uint64_t h7 = tinylm_digest(d);
    tinylm_set_global_step(d, 8);
    assert_true(h7 != tinylm_digest(d));
    tinylm_free(a);
    tinylm_free(b);
    tinylm_free(c);
    tinylm_free(d);
}

/* Run a for n steps, snapshotting into a fresh instance at step k; the
 * resumed instance must match the uninterrupted one bit for bit. */
static void resume_at(const tinylm_config *cfg, const tinylm_config *cfg_b, int k, int n)
{
    tinylm *a = new_model(cfg);
    tinylm *b = new_model(cfg_b);
    /* make b "dirty" so the restore must overwrite everything */
    for (int i = 0; i < 3; i++)
        tinylm_step(b);
    for (int i = 0; i < k; i++)
        tinylm_step(a);
    copy_state(b, a);
    assert_same_state(a, b);
    for (int i = k; i < n; i++) {
        float la = tinylm_step(a), lb = tinylm_step(b);
        assert_int_equal(f32_bits(la), f32_bits(lb));
    }
    assert_same_state(a, b);
    assert_int_equal(f32_bits(tinylm_eval_loss(a, 2)), f32_bits(tinylm_eval_loss(b, 2)));
    tinylm_free(a);
    tinylm_free(b);
}

static void test_resume_bitexact(void **state)
{
    (void)state;
    tinylm_config cfg;
    tinylm_config_default(&cfg);
    cfg.warmup_steps = 10;
    cfg.total_steps = 60;
    const int n = 60;
    /* inside warmup, at its end, mid-decay, near the end, at the end */
    const int ks[] = { 0, 1, 7, 10, 33, 59, 60 };
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        resume_at(&cfg, &cfg, ks[i], n);

    /* A reference run and the resumed run give the same digest as a single
   * uninterrupted run of n steps (not only as each other). */
    tinylm *ref = new_model(&cfg);
    for (int i = 0; i < n; i++)
        tinylm_step(ref);
    tinylm *a = new_model(&cfg);
    for (int i = 0; i < 25; i++)
        tinylm_step(a);
    tinylm *b = new_model(&cfg);
    copy_state(b, a);
    tinylm_free(a); /* the original is gone, as after a crash */
    for (int i = 25; i < n; i++)
        tinylm_step(b);
    assert_same_state(ref, b);
    printf("final_digest=%016llx\n", (unsigned long long)tinylm_digest(b));
    tinylm_free(ref);
    tinylm_free(b);
}

/* The target instance was initialised with a different seed: nothing of
 * its own init may survive the restore. */
static void test_resume_into_other_seed(void **state)
{
    (void)state;
    tinylm_config cfg, other;
    tinylm_config_default(&cfg);
    cfg.total_steps = 50;
    other = cfg;
    other.seed = cfg.seed + 99;
    resume_at(&cfg, &other, 20, 50);
}

/* Negative controls: leaving any one piece of state out of the restore
 * changes the result, so the resume test above is sensitive to each. */
enum {
    SKIP_MOMENTS,
    SKIP_STEP,
    SKIP_RNG,
    SKIP_SCHED,
    SKIP_DATA
};

static void check_skip(int what)
{
    tinylm_config cfg;
    tinylm_config_default(&cfg);
    cfg.warmup_steps = 10;
    cfg.total_steps = 40;
    tinylm *a = new_model(&cfg), *b = new_model(&cfg);
    for (int i = 0; i < 15; i++)
        tinylm_step(a);
    for (size_t i = 0; i < tinylm_param_count(a); i++) {
        const tinylm_param *s = tinylm_param_at(a, i), *d = tinylm_param_at(b, i);
        if (what != SKIP_DATA)
            memcpy(d->data, s->data, s->numel * sizeof(float));
        if (what != SKIP_MOMENTS) {
            memcpy(d->exp_avg, s->exp_avg, s->numel * sizeof(float));
            memcpy(d->exp_avg_sq, s->exp_avg_sq, s->numel * sizeof(float));
        }
    }
    if (what != SKIP_STEP)
        tinylm_set_global_step(b, tinylm_global_step(a));
    uint64_t rng[4];
    tinylm_rng_state(a, rng);
    if (what != SKIP_RNG)
        tinylm_set_rng_state(b, rng);
    char json[256];
    tinylm_sched_to_json(a, json, sizeof json);
    if (what != SKIP_SCHED)
        tinylm_sched_from_json(b, json);
    for (int i = 15; i < 40; i++) {
        tinylm_step(a);
        tinylm_step(b);
    }
    if (what == SKIP_STEP) {
        /* digest includes the step; compare parameters alone too */
        tinylm_set_global_step(b, tinylm_global_step(a));
    }
    assert_true(tinylm_digest(a) != tinylm_digest(b));
    tinylm_free(a);
    tinylm_free(b);
}

static void test_resume_negative_controls(void **state)
{
    (void)state;
    check_skip(SKIP_MOMENTS);
    check_skip(SKIP_STEP);
    check_skip(SKIP_RNG);
    check_skip(SKIP_SCHED);
    check_skip(SKIP_DATA);
}

/* ------------------------------------------------------------------------
 * Learning
 * ---------------------------------------------------------------------- */

static void test_loss_decreases(void **state)
{
    (void)state;
    tinylm_config cfg;
    tinylm_config_default(&cfg);
    cfg.total_steps = 300;
    tinylm *m = new_model(&cfg);
    const double lnV = log((double)tinylm_vocab_size(m));

    uint64_t r0[4], r1[4];
    tinylm_rng_state(m, r0);
    float e0 = tinylm_eval_loss(m, 8);
    float e0b = tinylm_eval_loss(m, 8);
    tinylm_rng_state(m, r1);
    assert_memory_equal(r0, r1, sizeof r0);        /* eval leaves training RNG */
    assert_int_equal(f32_bits(e0), f32_bits(e0b)); /* and is repeatable */
    assert_true(fabs((double)e0 - lnV) < 0.1);     /* starts near uniform */

    float first = 0.0f, last10 = 0.0f;
    for (int i = 0; i < 300; i++) {
        float l = tinylm_step(m);
        assert_true(isfinite(l));
        if (i == 0)
            first = l;
        if (i >= 290)
            last10 += l / 10.0f;
    }
    float e1 = tinylm_eval_loss(m, 8);
    printf("vocab=%d ln(V)=%.4f eval %.4f -> %.4f, train first %.4f last10 "
           "%.4f\n",
           tinylm_vocab_size(m), lnV, (double)e0, (double)e1, (double)first, (double)last10);
    assert_true(fabs((double)first - lnV) < 0.15);
    assert_true((double)e1 < lnV - 1.2); /* ~3.78 -> ~2.0 */
    assert_true((double)last10 < lnV - 1.2);
    tinylm_free(m);
}

/* ------------------------------------------------------------------------
 * Gradient check against an independent double-precision forward pass
 * ---------------------------------------------------------------------- */

static double ref_loss(const tinylm *m, double *const w[5], const size_t *pos, int nb)
{
    const int V = m->V, C = m->C, E = m->E, H = m->H;
    double x[4096], h[4096], lg[256];
    double sum = 0.0;
    assert_true(C * E <= 4096 && H <= 4096 && V <= 256);
    for (int b = 0; b < nb; b++) {
        for (int c = 0; c < C; c++) {
            int tok = m->tokens[pos[b] - (size_t)C + (size_t)c];
            for (int e = 0; e < E; e++)
                x[c * E + e] = w[P_EMBED][tok * E + e];
        }
        for (int j = 0; j < H; j++) {
            double a = w[P_B1][j];
            for (int i = 0; i < C * E; i++)
                a += x[i] * w[P_W1][i * H + j];
            h[j] = tanh(a);
        }
        double mx = -INFINITY;
        for (int v = 0; v < V; v++) {
            double a = w[P_B2][v];
            for (int j = 0; j < H; j++)
                a += h[j] * w[P_W2][j * V + v];
            lg[v] = a;
            if (a > mx)
                mx = a;
        }
        double se = 0.0;
        for (int v = 0; v < V; v++)
            se += exp(lg[v] - mx);
        sum += -(lg[m->tokens[pos[b]]] - mx - log(se));
    }
    return sum / nb;
}

static void test_gradient_check(void **state)
{
    (void)state;
    tinylm *m = new_default();
    for (int i = 0; i < 30; i++)
        tinylm_step(m); /* move away from init */

    enum {
        NB = 8
    };
    size_t pos[NB];
    uint64_t r[4];
    rng_seed(r, 777);
    sample_positions(m, r, pos, NB);

    memset(m->grads[0], 0, m->numel_total * sizeof(float));
    float loss = forward_backward(m, pos, NB, 1);

    double *w[5];
    for (int i = 0; i < 5; i++) {
        const tinylm_param *p = tinylm_param_at(m, (size_t)i);
        w[i] = malloc(p->numel * sizeof(double));
        assert_non_null(w[i]);
        for (size_t k = 0; k < p->numel; k++)
            w[i][k] = p->data[k];
    }
    double l0 = ref_loss(m, w, pos, NB);
    assert_true(fabs(l0 - (double)loss) < 1e-4 * fabs(l0));

    uint64_t pick[4];
    rng_seed(pick, 4242);
    int checked = 0;
    double worst = 0.0;
    for (int i = 0; i < 5; i++) {
        const tinylm_param *p = tinylm_param_at(m, (size_t)i);
        const float *g = m->grads[i];
        /* the 4 entries with the largest |grad| plus 8 random ones */
        size_t idx[12];
        for (int t = 0; t < 4; t++) {
            size_t best = 0;
            float bv = -1.0f;
            for (size_t k = 0; k < p->numel; k++) {
                int dup = 0;
                for (int u = 0; u < t; u++)
                    dup |= idx[u] == k;
                if (!dup && fabsf(g[k]) > bv) {
                    bv = fabsf(g[k]);
                    best = k;
                }
            }
            idx[t] = best;
        }
        for (int t = 4; t < 12; t++)
            idx[t] = (size_t)rng_below(pick, p->numel);
        for (int t = 0; t < 12; t++) {
            size_t k = idx[t];
            const double hstep = 1e-5, orig = w[i][k];
            w[i][k] = orig + hstep;
            double lp = ref_loss(m, w, pos, NB);
            w[i][k] = orig - hstep;
            double lm = ref_loss(m, w, pos, NB);
            w[i][k] = orig;
            double num = (lp - lm) / (2 * hstep), ana = (double)g[k];
            double scale = fmax(fabs(num), fabs(ana));
            if (scale < 1e-6) {
                assert_true(fabs(num - ana) < 1e-6); /* both ~zero */
                continue;
            }
            double rel = fabs(num - ana) / scale;
            if (rel > worst)
                worst = rel;
            if (rel >= 1e-2)
                fail_msg("%s[%zu]: analytic %.8g numeric %.8g rel %.3g", p->name, k, ana, num, rel);
            checked++;
        }
    }
    printf("gradient check: %d entries, worst relative error %.3g\n", checked, worst);
    assert_true(checked >= 25);
    for (int i = 0; i < 5; i++)
        free(w[i]);
    tinylm_free(m);
}

/* ------------------------------------------------------------------------
 * Scheduler
 * ---------------------------------------------------------------------- */

static void test_schedule_values(void **state)
{
    (void)state;
    tinylm_config cfg;
    tinylm_config_default(&cfg);
    cfg.lr = 1e-2f;
    cfg.min_lr = 1e-3f;
    cfg.warmup_steps = 10;
    cfg.total_steps = 110;
    tinylm *m = new_model(&cfg);
    assert_true(fabsf(tinylm_lr_at(m, 0) - 1e-3f) < 1e-9f); /* base/warmup */
    assert_true(fabsf(tinylm_lr_at(m, 4) - 5e-3f) < 1e-9f);
    assert_true(tinylm_lr_at(m, 9) == cfg.lr); /* peak */
    assert_true(fabsf(tinylm_lr_at(m, 10) - cfg.lr) < 1e-9f);
    assert_true(fabsf(tinylm_lr_at(m, 60) - 5.5e-3f) < 1e-8f); /* midpoint */
    assert_true(tinylm_lr_at(m, 110) == cfg.min_lr);           /* end */
    assert_true(tinylm_lr_at(m, 5000) == cfg.min_lr);
    for (int s = 1; s < 10; s++)
        assert_true(tinylm_lr_at(m, s) > tinylm_lr_at(m, s - 1));
    for (int s = 11; s <= 110; s++) {
        assert_true(tinylm_lr_at(m, s) <= tinylm_lr_at(m, s - 1));
        assert_true(tinylm_lr_at(m, s) >= cfg.min_lr);
    }
    assert_true(tinylm_current_lr(m) == tinylm_lr_at(m, 0));
    for (int i = 0; i < 12; i++)
        tinylm_step(m);
    assert_true(tinylm_current_lr(m) == tinylm_lr_at(m, 12));
    char json[256];
    assert_true(tinylm_sched_to_json(m, json, sizeof json) > 0);
    assert_non_null(strstr(json, "\"last_step\":12,"));
    tinylm_free(m);

    /* no warmup: starts at the peak */
    cfg.warmup_steps = 0;
    m = new_model(&cfg);
    assert_true(tinylm_lr_at(m, 0) == cfg.lr);
    assert_true(tinylm_lr_at(m, 110) == cfg.min_lr);
    tinylm_free(m);
}

static void test_sched_json(void **state)
{
    (void)state;
    tinylm_config cfg;
    tinylm_config_default(&cfg);
    cfg.lr = 3e-3f;
    cfg.min_lr = 1.234567e-4f;
    cfg.warmup_steps = 7;
    cfg.total_steps = 77;
    tinylm *a = new_model(&cfg);
    for (int i = 0; i < 37; i++)
        tinylm_step(a);
    char ja[256], jb[256];
    int n = tinylm_sched_to_json(a, ja, sizeof ja);
    assert_true(n > 0 && (size_t)n == strlen(ja));
    printf("sched json: %s\n", ja);
    assert_int_equal(tinylm_sched_to_json(a, jb, (size_t)n), -1); /* no room */
    assert_int_equal(tinylm_sched_to_json(a, jb, (size_t)n + 1), n);

    tinylm_config dflt;
    tinylm_config_default(&dflt);
    tinylm *b = new_model(&dflt);
    assert_int_equal(tinylm_sched_from_json(b, ja), 0);
    assert_true(tinylm_sched_to_json(b, jb, sizeof jb) > 0);
    assert_string_equal(ja, jb);
    for (int s = 0; s < 100; s++)
        assert_int_equal(f32_bits(tinylm_lr_at(a, s)), f32_bits(tinylm_lr_at(b, s)));
    tinylm_free(b);

    /* whitespace between tokens is accepted */
    b = new_model(&dflt);
    assert_int_equal(tinylm_sched_from_json(b, " { \"last_step\" : 5 ,\n\"base_lr\": 0.5, "
                                               "\"warmup\":1,\"total\":9,\"min_lr\":1e-3 }\n"),
                     0);
    assert_true(tinylm_lr_at(b, 100) == 1e-3f);
    assert_true(tinylm_current_lr(b) == tinylm_lr_at(b, 5));

    /* malformed or out-of-range input is rejected, state untouched */
    static const char *const bad[] = {
        "",
        "{}",
        "null",
        "{\"last_step\":5}",
        "{\"last_step\":5,\"base_lr\":0.1,\"warmup\":1,\"total\":9}",
        "{\"base_lr\":0.1,\"last_step\":5,\"warmup\":1,\"total\":9,\"min_lr\":0}",
        "{\"last_step\":5,\"base_lr\":0.1,\"warmup\":1,\"total\":9,\"min_lr\":0",
        "{\"last_step\":5,\"base_lr\":0.1,\"warmup\":1,\"total\":9,\"min_lr\":0,}",
        "{\"last_step\":5,\"base_lr\":0.1,\"warmup\":1,\"total\":9,\"min_lr\":0}x",
        "{\"last_step\":5,\"base_lr\":0.1,\"warmup\":1,\"total\":9,\"min_lr\":0}"
        "{}",
        "{\"last_step\":5,\"base_lr\":0.1,\"warmup\":1,\"total\":9,\"min_lr\":0,"
        "\"extra\":1}",
        "{\"last_step\":-1,\"base_lr\":0.1,\"warmup\":1,\"total\":9,\"min_lr\":0}",
        "{\"last_step\":5,\"base_lr\":-0.1,\"warmup\":1,\"total\":9,\"min_lr\":0}",
        "{\"last_step\":5,\"base_lr\":nan,\"warmup\":1,\"total\":9,\"min_lr\":0}",
        "{\"last_step\":5,\"base_lr\":inf,\"warmup\":1,\"total\":9,\"min_lr\":0}",
        "{\"last_step\":5,\"base_lr\":1e99,\"warmup\":1,\"total\":9,\"min_lr\":0}",
        "{\"last_step\":5,\"base_lr\":0x1p-3,\"warmup\":1,\"total\":9,"
        "\"min_lr\":0}",
        "{\"last_step\":5,\"base_lr\":\"0.1\",\"warmup\":1,\"total\":9,"
        "\"min_lr\":0}",
        "{\"last_step\":5,\"base_lr\":.1,\"warmup\":1,\"total\":9,\"min_lr\":0}",
        "{\"last_step\":5,\"base_lr\":1.,\"warmup\":1,\"total\":9,\"min_lr\":0}",
        "{\"last_step\":5.5,\"base_lr\":0.1,\"warmup\":1,\"total\":9,"
        "\"min_lr\":0}",
        "{\"last_step\":5,\"base_lr\":0.1,\"warmup\":10,\"total\":9,"
        "\"min_lr\":0}",
        "{\"last_step\":5,\"base_lr\":0.1,\"warmup\":1,\"total\":0,\"min_lr\":0}",
        "{\"last_step\":5,\"base_lr\":0.1,\"warmup\":1,\"total\":9999999999,"
        "\"min_lr\":0}",
        "{\"last_step\":99999999999999999999,\"base_lr\":0.1,\"warmup\":1,"
        "\"total\":9,\"min_lr\":0}",
        "{\"last_step\":5,\"base_lr\":0.1,\"warmup\":1,\"total\":9,\"min_lr\":0"
        "\x01}",
        "{'last_step':5,'base_lr':0.1,'warmup':1,'total':9,'min_lr':0}",
        "{\"last_step\" 5,\"base_lr\":0.1,\"warmup\":1,\"total\":9,\"min_lr\":0}",
        "{\"Last_step\":5,\"base_lr\":0.1,\"warmup\":1,\"total\":9,\"min_lr\":0}",
    };
    assert_true(tinylm_sched_to_json(b, ja, sizeof ja) > 0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (tinylm_sched_from_json(b, bad[i]) != -1)
            fail_msg("accepted malformed scheduler JSON #%zu: %s", i, bad[i]);
        assert_true(tinylm_sched_to_json(b, jb, sizeof jb) > 0);
        assert_string_equal(ja, jb);
    }
    assert_int_equal(tinylm_sched_from_json(b, NULL), -1);
    tinylm_free(a);
    tinylm_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_errors),
        cmocka_unit_test(test_params_api),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_resume_bitexact),
        cmocka_unit_test(test_resume_into_other_seed),
        cmocka_unit_test(test_resume_negative_controls),
        cmocka_unit_test(test_loss_decreases),
        cmocka_unit_test(test_gradient_check),
        cmocka_unit_test(test_schedule_values),
        cmocka_unit_test(test_sched_json),
    };
    return TU_RUN_GROUP(tests, NULL, NULL);
}
