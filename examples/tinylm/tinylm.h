/* tinylm.h -- a tiny, fully deterministic character-level language model
 * trainer core (plain C11, libm only).  Used by the shardsafe demo trainer.
 *
 * Model: a context of `context` previous bytes is embedded ([V, E] table),
 * the embeddings are concatenated (C*E), fed through one hidden layer
 * ([C*E, H] + bias [H], tanh) and an output layer ([H, V] + bias [V]);
 * softmax cross-entropy against the next byte.  V = number of distinct
 * bytes in the corpus, mapped to 0..V-1 in ascending byte order.
 *
 * Optimizer: AdamW (fp32 exp_avg / exp_avg_sq per parameter, bias
 * correction from the global step, decoupled weight decay on the 2-D
 * weights only).  LR: linear warmup then cosine decay to min_lr.
 *
 * Training state that a checkpoint must capture to resume bit-exactly:
 *   - every tinylm_param: data, exp_avg, exp_avg_sq (read/written in place)
 *   - tinylm_global_step()           (AdamW bias correction, digest)
 *   - tinylm_rng_state()             (4 x uint64, batch sampling)
 *   - tinylm_consumed_samples()
 *   - tinylm_sched_to_json()         (lr scheduler: last_step + settings)
 * Gradients are scratch (recomputed from zero every step) and need not be
 * saved.  Determinism: single thread, no clocks, fixed summation order; the
 * same config + seed + corpus gives bitwise identical results on the same
 * machine/toolchain (libm's tanhf/expf/logf are part of that contract).
 */
#ifndef TINYLM_H
#define TINYLM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tinylm_config {
    int context;        /* C: previous bytes seen per prediction          */
    int embed;          /* E: embedding width                              */
    int hidden;         /* H: hidden units                                 */
    int batch;          /* B: sequences (next-byte predictions) per step   */
    float lr;           /* peak learning rate (scheduler base_lr)          */
    float min_lr;       /* final learning rate after cosine decay          */
    float weight_decay; /* decoupled (AdamW) decay, 2-D weights only       */
    float beta1, beta2, eps;
    int warmup_steps; /* linear warmup length (0 = none)                 */
    int total_steps;  /* cosine decay reaches min_lr at this step        */
    uint64_t seed;    /* parameter init + batch sampling RNG seed        */
} tinylm_config;

typedef struct tinylm_param {
    const char *name;  /* e.g. "model.hidden.weight"                      */
    float *data;       /* numel fp32 values, row-major                    */
    float *exp_avg;    /* AdamW first moment, numel fp32                  */
    float *exp_avg_sq; /* AdamW second moment, numel fp32                 */
    int ndim;          /* 1 or 2                                          */
    uint64_t shape[2]; /* shape[1] unused (0) when ndim == 1              */
    size_t numel;
} tinylm_param;

typedef struct tinylm tinylm;

/* Number of uint64 words in the RNG state. */
#define TINYLM_RNG_WORDS 4

/* Fill *cfg with the demo defaults (C=8, E=16, H=128, B=32, lr 1e-2 ...). */
void tinylm_config_default(tinylm_config *cfg);

/* Load the corpus, build the vocabulary and initialise the parameters from
 * cfg->seed.  Returns 0 on success; on failure returns nonzero (-1 bad
 * config, -2 corpus unreadable, -3 corpus too small, -4 out of memory),
 * prints one "tinylm: ..." line to stderr, and sets *out to NULL. */
int tinylm_init(tinylm **out, const tinylm_config *cfg, const char *corpus_path);
void tinylm_free(tinylm *m);

const tinylm_config *tinylm_get_config(const tinylm *m);
int tinylm_vocab_size(const tinylm *m);
size_t tinylm_corpus_size(const tinylm *m);

/* Parameters in a fixed order: model.embed.weight, model.hidden.weight,
 * model.hidden.bias, model.out.weight, model.out.bias.  The pointers stay
 * valid (and at the same address) for the model's lifetime. */
size_t tinylm_param_count(const tinylm *m);
const tinylm_param *tinylm_param_at(const tinylm *m, size_t i);
size_t tinylm_numel_total(const tinylm *m); /* sum of numel */

/* One training step: sample a batch with the RNG, forward, backward,
 * AdamW update with lr = schedule(last_step), then advance global step,
 * scheduler step and consumed_samples.  Returns the mean batch loss
 * (computed before the update). */
float tinylm_step(tinylm *m);

int64_t tinylm_global_step(const tinylm *m);
void tinylm_set_global_step(tinylm *m, int64_t step);
uint64_t tinylm_consumed_samples(const tinylm *m);
void tinylm_set_consumed_samples(tinylm *m, uint64_t n);

/* RNG (xoshiro256**) state.  get returns TINYLM_RNG_WORDS; set returns 0,
 * or -1 for the invalid all-zero state (model left unchanged). */
size_t tinylm_rng_state(const tinylm *m, uint64_t out[TINYLM_RNG_WORDS]);
int tinylm_set_rng_state(tinylm *m, const uint64_t in[TINYLM_RNG_WORDS]);

/* LR scheduler state as one line of JSON, exactly:
 *   {"last_step":N,"base_lr":F,"warmup":N,"total":N,"min_lr":F}
 * (floats printed with %.9g, so they round-trip exactly).  to_json returns
 * the length written (excluding NUL) or -1 if cap is too small.  from_json
 * accepts that format (keys in that order, optional whitespace between
 * tokens) and returns 0, or -1 for anything else, leaving the model
 * unchanged. */
int tinylm_sched_to_json(const tinylm *m, char *buf, size_t cap);
int tinylm_sched_from_json(tinylm *m, const char *json);
/* The scheduler's learning rate at a given step, and at its current step. */
float tinylm_lr_at(const tinylm *m, int64_t step);
float tinylm_current_lr(const tinylm *m);

/* 64-bit FNV-1a over, per parameter in order: name, data, exp_avg,
 * exp_avg_sq bytes; then the global step (as little-endian int64). */
uint64_t tinylm_digest(const tinylm *m);

/* Mean loss over nbatches fixed batches drawn from a private RNG with a
 * constant seed (independent of cfg->seed): the same batches on every call
 * and for every model; does not touch the training RNG or any training
 * state. */
float tinylm_eval_loss(tinylm *m, int nbatches);

#ifdef __cplusplus
}
#endif

#endif /* TINYLM_H */
