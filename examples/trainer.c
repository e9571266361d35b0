/*
 * trainer.c -- the demo trainer: a tiny character-level language model
 * (examples/tinylm) trained with AdamW and a warmup+cosine schedule, with
 * every piece of training state checkpointed through the shardsafe
 * manager: weights, Adam moments, step counters, LR scheduler, RNG, data
 * cursor.  Kill it at any moment and start it again with the same flags:
 * it resumes from the newest committed checkpoint and ends bitwise equal
 * to an uninterrupted run.
 *
 *   trainer --steps 300 --save-path /tmp/ckpt --save-interval 50
 *
 * With --config, a YAML file: its `checkpoint:` section, MindSpore's
 * train: / callbacks: / resume_training / load_checkpoint (seed 002's
 * resume_llama2.yaml runs as it is: train: epochs and batch_size are
 * honoured here) -- every key is honoured or refused (trainer_args.h).
 *
 * It ends with two lines scripts can read:
 *   final_digest=<16 hex digits>   (all model and optimizer state)
 *   global_step=<n>
 * preceded, with --set last_save_in_hf=true (and e.g. --set
 * export_dtype=bf16), by "exported to <dir>": the final weights in the
 * Hugging Face layout.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardsafe.h"
#include "tinylm/tinylm.h"
#include "trainer_args.h"


static void usage(FILE *out)
{
    fprintf(out, "usage: trainer [options]\n" TRAINER_OPTIONS_HELP
                 "exit: 0 trained, 1 error, 2 usage\n");
}

/* Put the model's non-tensor state into the checkpoint state's blobs. */
static int export_blobs(shs_state *st, const tinylm *lm)
{
    uint64_t rng[TINYLM_RNG_WORDS];
    tinylm_rng_state(lm, rng);
    char sched[512], loader[128];
    int n = tinylm_sched_to_json(lm, sched, sizeof sched);
    int k = snprintf(loader, sizeof loader, "{\"consumed_samples\":%" PRIu64 "}",
                     tinylm_consumed_samples(lm));
    if (n < 0)
        return -1;
    if (shs_state_set_blob(st, "rng", rng, sizeof rng) != SHS_OK ||
        shs_state_set_blob(st, "lr_scheduler", sched, (size_t)n) != SHS_OK ||
        shs_state_set_blob(st, "dataloader", loader, (size_t)k) != SHS_OK)
        return -1;
    return 0;
}

static int import_blobs(const shs_state *st, tinylm *lm, const shs_load_result *res)
{
    const void *p;
    size_t len;
    if (!res->rank_state_restored)
        return 0;
    if (shs_state_get_blob(st, "rng", &p, &len) == SHS_OK) {
        uint64_t rng[TINYLM_RNG_WORDS];
        if (len != sizeof rng)
            return fprintf(stderr, "trainer: rng state has %zu bytes\n", len), -1;
        memcpy(rng, p, sizeof rng);
        if (tinylm_set_rng_state(lm, rng) != 0)
            return fprintf(stderr, "trainer: invalid rng state\n"), -1;
    }
    if (shs_state_get_blob(st, "lr_scheduler", &p, &len) == SHS_OK) {
        char buf[512];
        if (len >= sizeof buf)
            return fprintf(stderr, "trainer: lr_scheduler state too long\n"), -1;
        memcpy(buf, p, len);
        buf[len] = '\0';
        if (tinylm_sched_from_json(lm, buf) != 0)
            return fprintf(stderr, "trainer: invalid lr_scheduler state '%s'\n", buf), -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    /* every line out at once: a run killed with SIGKILL (the demo, the
       resume tests) has said what it resumed from */
    setvbuf(stdout, NULL, _IOLBF, 0);
    shs_config cfg;
    shs_config_init(&cfg);
    trainer_args ta;
    int rc = trainer_parse_args(argc, argv, &cfg, &ta, "trainer", 0, usage, stdout, stderr);
    if (rc >= 0) {
        shs_config_release(&cfg);
        return rc;
    }
    rc = 1;
    tinylm *lm = NULL;
    shs_state *st = NULL;
    shs_manager *mgr = NULL;
    char warned[1024] = "";

    tinylm_config mc;
    tinylm_config_default(&mc);
    mc.batch = ta.batch > 65536 ? -1 : (int)ta.batch; /* tinylm_init says what is wrong */
    mc.seed = (uint64_t)ta.seed;
    mc.total_steps = ta.steps > INT32_MAX ? INT32_MAX : (int)ta.steps;
    if (tinylm_init(&lm, &mc, ta.corpus) != 0)
        goto done;
    /* train: epochs: passes over the corpus' samples; the schedule then
       spans all of them */
    long long samples = (long long)tinylm_corpus_size(lm) - mc.context;
    long long per_epoch = trainer_epoch_steps(samples, ta.batch);
    trainer_apply_epochs(&ta, samples);
    if (ta.steps > INT32_MAX) {
        fprintf(stderr, "trainer: %lld steps is too many\n", ta.steps);
        goto done;
    }
    if (ta.steps != mc.total_steps) {
        tinylm_free(lm);
        mc.total_steps = (int)ta.steps;
        if (tinylm_init(&lm, &mc, ta.corpus) != 0)
            goto done;
    }
    long long steps = ta.steps, batch = ta.batch, log_every = ta.log_every;

    /* register everything the checkpoint holds */
    if (shs_state_create(&st) != SHS_OK)
        goto fail;
    for (size_t i = 0; i < tinylm_param_count(lm); i++) {
        const tinylm_param *p = tinylm_param_at(lm, i);
        char n1[160], n2[160];
        shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
        s.name = p->name;
        s.ndim = (size_t)p->ndim;
        s.shape = p->shape;
        s.data = p->data;
        if (shs_state_add_tensor(st, &s) != SHS_OK)
            goto fail;
        s.kind = SHS_KIND_OPTIMIZER;
        snprintf(n1, sizeof n1, "optimizer.exp_avg.%s", p->name);
        snprintf(n2, sizeof n2, "optimizer.exp_avg_sq.%s", p->name);
        s.name = n1;
        s.data = p->exp_avg;
        if (shs_state_add_tensor(st, &s) != SHS_OK)
            goto fail;
        s.name = n2;
        s.data = p->exp_avg_sq;
        if (shs_state_add_tensor(st, &s) != SHS_OK)
            goto fail;
    }
    if (shs_manager_create(&mgr, &cfg, st) != SHS_OK)
        goto fail;

    shs_progress prog = SHS_PROGRESS_INIT;
    prog.global_batch_size = batch;
    prog.loss_scale = 1.0;
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    if (shs_manager_load(&res, mgr, &prog) != SHS_OK)
        goto fail;
    if (res.loaded) {
        if (import_blobs(st, lm, &res) != 0)
            goto done;
        if (res.progress_loaded) {
            tinylm_set_global_step(lm, prog.global_step);
            tinylm_set_consumed_samples(lm, (uint64_t)prog.consumed_samples);
        }
    }
    trainer_say_load(stdout, &res, &prog);
    trainer_say_warning(stdout, mgr, warned, sizeof warned);

    if (cfg.create_seed_checkpoint) {
        /* torchtitan's seed checkpoint: the initialised model as step 0 */
        prog.global_step = 0;
        if (shs_manager_save(mgr, &prog, SHS_SAVE_MODEL_ONLY) != SHS_OK ||
            shs_manager_wait(mgr) != SHS_OK)
            goto fail;
        printf("seed checkpoint written to %s (step 0, model weights)\n", cfg.save_path);
        rc = 0;
        goto done;
    }
    while (tinylm_global_step(lm) < steps) {
        float loss = tinylm_step(lm);
        int64_t gs = tinylm_global_step(lm);
        prog.global_step = gs;
        prog.epoch_num = per_epoch > 0 ? gs / per_epoch : 0;
        prog.step_num = per_epoch > 0 ? gs % per_epoch : gs;
        prog.consumed_samples = (int64_t)tinylm_consumed_samples(lm);
        if (log_every && gs % log_every == 0)
            printf("step %lld loss %.4f lr %.6f\n", (long long)gs, loss, tinylm_current_lr(lm));
        if (export_blobs(st, lm) != 0)
            goto fail;
        int saved;
        if (shs_manager_step(&saved, mgr, &prog) != SHS_OK)
            goto fail;
        trainer_say_warning(stdout, mgr, warned, sizeof warned);
        if (saved)
            fflush(stdout);
    }
    prog.global_step = tinylm_global_step(lm);
    prog.consumed_samples = (int64_t)tinylm_consumed_samples(lm);
    if (export_blobs(st, lm) != 0 || shs_manager_finish(mgr, &prog) != SHS_OK)
        goto fail;
    trainer_say_warning(stdout, mgr, warned, sizeof warned);
    trainer_say_last_save(stdout, mgr);
    if (shs_manager_export_dir(mgr))
        printf("exported to %s\n", shs_manager_export_dir(mgr));
    printf("final_digest=%016" PRIx64 "\n", tinylm_digest(lm));
    printf("global_step=%lld\n", (long long)tinylm_global_step(lm));
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "trainer: %s\n", shs_last_error());
done:
    shs_manager_free(mgr);
    shs_state_free(st);
    tinylm_free(lm);
    shs_config_release(&cfg);
    return rc;
}
