/*
 * trainer_args.h -- the command line shared by the demo trainers
 * (examples/trainer.c and examples/mpi/trainer_mpi.c): checkpoint flags go
 * into a shs_config (a YAML --config first, so flags override it), the
 * rest into trainer_args; and the lines both print about what a load did
 * and the manager's warnings.  Header-only: each trainer is one
 * executable.
 *
 * A --config file is read with shs_config_load_yaml_ex: the library takes
 * the checkpoint keys, and every other key is offered to
 * trainer_yaml_key() below, which honours what the demo can (train:
 * epochs, batch_size, steps, seed; model: model_type / model_name, said
 * to name a model the demo does not build) and refuses the rest, so no
 * key of a config is silently ignored.
 */
#ifndef TRAINER_ARGS_H
#define TRAINER_ARGS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardsafe.h"

#ifndef SHS_DEMO_CORPUS
#define SHS_DEMO_CORPUS "examples/tinylm/corpus.txt"
#endif

/* The --help text of the options trainer_parse_args() takes. */
#define TRAINER_OPTIONS_HELP                                                                       \
    "  --config FILE.yaml     a YAML config: `checkpoint:`, MindSpore's train:/callbacks:/\n"      \
    "                         resume_training/load_checkpoint (train: epochs, batch_size)\n"       \
    "  --steps N              train until global_step N (default 200, or train: epochs)\n"         \
    "  --save-path DIR        save checkpoints under DIR\n"                                        \
    "  --load-path PATH       load this save path or step directory first\n"                       \
    "  --save-interval N      save every N steps (save_interleaved_steps)\n"                       \
    "  --save-max N           keep the newest N saves of this run\n"                               \
    "  --async                save in the background (async_save)\n"                               \
    "  --no-save-optim        save model weights only\n"                                           \
    "  --incremental          do not rewrite unchanged tensors\n"                                  \
    "  --set KEY=VALUE        any checkpoint field, e.g. --set no_load_optim=true\n"               \
    "  --batch N              global batch size (default 32)\n"                                    \
    "  --seed N               initialisation seed (default 1234)\n"                                \
    "  --corpus FILE          training text (default: the shipped corpus)\n"                       \
    "  --log-every N          print the loss every N steps (default 50, 0: never)\n"

typedef struct trainer_args {
    long long steps, batch, seed, log_every;
    long long tp; /* --tp, only where allowed; -1 when absent */
    const char *corpus;
    long long epochs; /* train: epochs of --config; -1 when absent */
    int steps_set;    /* --steps or train: steps given (epochs do not apply) */
    FILE *out;        /* where notes go */
    const char *prog;
    const char *config; /* the --config file being read */
} trainer_args;

static int trainer_parse_i64(const char *s, long long *out)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || v < 0)
        return -1;
    *out = v;
    return 0;
}

/* ---- the program's keys of a --config file ---- */

static int trainer_yaml_int(const char *v, long long *out, long long lo)
{
    char *end;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || !*v || *end || x < lo)
        return -1;
    *out = x;
    return 0;
}

/* shs_yaml_opts.program_key: 1 when the demo honours the key (or says
   what it does with it), 0 to have the load refuse it (`why` says why). */
static int trainer_yaml_key(void *ctx, const char *section, const char *key, const char *value,
                            size_t line, char *why, size_t why_cap)
{
    trainer_args *a = ctx;
    if (strcmp(section, "train") == 0) {
        long long *dst = strcmp(key, "epochs") == 0       ? &a->epochs
                         : strcmp(key, "batch_size") == 0 ? &a->batch
                         : strcmp(key, "steps") == 0      ? &a->steps
                         : strcmp(key, "seed") == 0       ? &a->seed
                                                          : NULL;
        if (!dst) {
            snprintf(why, why_cap,
                     "the demo trainers read epochs, batch_size, steps and seed there");
            return 0;
        }
        long long lo = dst == &a->seed ? 0 : 1;
        if (trainer_yaml_int(value, dst, lo) != 0) {
            snprintf(why, why_cap, "expected an integer >= %lld, got '%s'", lo,
                     value ? value : "a list or mapping");
            return 0;
        }
        if (dst == &a->steps)
            a->steps_set = 1;
        return 1;
    }
    if (strcmp(section, "model") == 0 &&
        (strcmp(key, "model_type") == 0 || strcmp(key, "model_name") == 0)) {
        if (value && strcmp(value, "tinylm") == 0)
            return 1; /* what the demo builds */
        fprintf(a->out,
                "note: %s:%zu: model: %s '%s' names a model this demo does not build: it "
                "trains its tiny character model (examples/tinylm) and checkpoints that\n",
                a->config, line, key, value ? value : "");
        return 1;
    }
    if (strcmp(section, "model") == 0)
        snprintf(why, why_cap,
                 "the demo's model (tinylm) is fixed; it reads only model_type "
                 "and model_name, to say so");
    else
        snprintf(why, why_cap, "the demo trainers read checkpoint:, train: and model: only");
    return 0;
}

static void trainer_yaml_note(void *ctx, const char *msg)
{
    trainer_args *a = ctx;
    fprintf(a->out, "note: %s\n", msg);
}

/* train: epochs as steps: one epoch is one pass over the corpus' samples
   (a next-byte prediction per position after the first `context`
   bytes) in batches of `batch`.  0 when no epochs were given. */
static long long trainer_epoch_steps(long long samples, long long batch)
{
    return samples > 0 && batch > 0 ? (samples + batch - 1) / batch : 0;
}

/* Apply train: epochs (unless the steps were given) and say so. */
static void trainer_apply_epochs(trainer_args *a, long long samples)
{
    long long per = trainer_epoch_steps(samples, a->batch);
    if (a->epochs < 1 || per < 1)
        return;
    if (a->steps_set) {
        fprintf(a->out, "note: train: epochs %lld is overridden by the step count: %lld steps\n",
                a->epochs, a->steps);
        return;
    }
    a->steps = a->epochs * per;
    fprintf(a->out,
            "train: %lld epochs of %lld steps (%lld samples, batch_size %lld) = %lld steps\n",
            a->epochs, per, samples, a->batch, a->steps);
}

/* ---- what a load did and what the manager warns about ---- */

/* One line saying what was loaded, in the words of what happened:
   "resumed from" when training continues from the loaded progress (the
   step printed is the one it continues from: after a global_batch_size
   change, the rescaled one), "initialised from" when weights (and maybe
   optimizer state) were loaded but training starts over, "starting from
   scratch" when nothing was; and which parts of the state came back. */
static void trainer_say_load(FILE *out, const shs_load_result *r, const shs_progress *p)
{
    if (!r->loaded) {
        fprintf(out, "starting from scratch: %s\n", r->message);
        return;
    }
    const char *what = r->optimizer_loaded && r->progress_loaded     ? ""
                       : !r->optimizer_loaded && !r->progress_loaded ? ", weights only"
                       : !r->optimizer_loaded                        ? ", without optimizer state"
                                              : ", without training progress";
    if (r->source == SHS_LOAD_INITIAL && r->step < 0)
        fprintf(out, "initialised from Hugging Face weights %s (weights only)\n", r->path);
    else if (!r->progress_loaded)
        fprintf(out, "initialised from %s (saved at step %lld%s): training starts at step %lld\n",
                r->path, (long long)r->step, what, (long long)p->global_step);
    else if (r->batch_size_changed)
        fprintf(out,
                "resumed from %s (step %lld%s: saved at step %lld, rescaled for "
                "global_batch_size %lld)\n",
                r->path, (long long)p->global_step, what, (long long)r->step,
                (long long)p->global_batch_size);
    else
        fprintf(out, "resumed from %s (step %lld%s)\n", r->path, (long long)r->step, what);
    if (r->fell_back || r->tracker_repaired || r->consumed_samples_derived ||
        r->source == SHS_LOAD_INITIAL)
        fprintf(out, "note: %s\n", r->message);
}

/* The manager's latest warning (a failed retention deletion, unused
   Hugging Face tensors...), printed once. */
static void trainer_say_warning(FILE *out, const shs_manager *m, char *last, size_t cap)
{
    const char *w = shs_manager_warning(m);
    if (!w || strncmp(w, last, cap) == 0)
        return;
    fprintf(out, "warning: %s\n", w);
    fflush(out);
    snprintf(last, cap, "%s", w);
}

/* The last save in numbers that add up: the tensors (those written and
   those hard-linked from the previous save) and everything written. */
static void trainer_say_last_save(FILE *out, const shs_manager *m)
{
    shs_save_stats ss = SHS_SAVE_STATS_INIT;
    if (shs_manager_last_save(&ss, m) != SHS_OK)
        return;
    unsigned long long tensors = ss.state_bytes, linked = ss.bytes_linked;
    unsigned long long fresh = tensors > linked ? tensors - linked : 0;
    fprintf(out,
            "last save: step %lld, tensors %llu bytes (%llu written, %llu linked from the "
            "previous save), %llu bytes written in all, %.3f s (blocked %.3f s)\n",
            (long long)ss.step, tensors, fresh, linked, (unsigned long long)ss.bytes_written,
            ss.total_seconds, ss.blocked_seconds);
}

/*
 * Parse argv.  Returns -1 to go on, else the exit code: 0 after --help,
 * 1 for an unreadable --config, 2 for a usage error (message on `err`).
 */
static int trainer_parse_args(int argc, char **argv, shs_config *cfg, trainer_args *a,
                              const char *prog, int allow_tp, void (*usage)(FILE *), FILE *out,
                              FILE *err)
{
    *a = (trainer_args){ 200, 32, 1234, 50, -1, SHS_DEMO_CORPUS, -1, 0, out, prog, NULL };
    shs_yaml_opts yo = SHS_YAML_OPTS_INIT;
    yo.program_key = trainer_yaml_key;
    yo.note = trainer_yaml_note;
    yo.ctx = a;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--config") == 0 &&
            shs_config_load_yaml_ex(cfg, (a->config = argv[i + 1]), &yo) != SHS_OK) {
            fprintf(err, "%s: --config: %s\n", prog, shs_last_error());
            return 1;
        }
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = SHS_OK, takes = 1;
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            usage(out);
            return 0;
        } else if (strcmp(o, "--async") == 0) {
            rc = shs_config_set(cfg, "async_save", "true"), takes = 0;
        } else if (strcmp(o, "--no-save-optim") == 0) {
            rc = shs_config_set(cfg, "no_save_optim", "true"), takes = 0;
        } else if (strcmp(o, "--incremental") == 0) {
            rc = shs_config_set(cfg, "incremental", "true"), takes = 0;
        } else if (!v) {
            fprintf(err, "%s: %s needs a value (or is unknown)\n", prog, o);
            usage(err);
            return 2;
        } else if (strcmp(o, "--config") == 0) {
            /* read above */
        } else if (strcmp(o, "--save-path") == 0) {
            rc = shs_config_set(cfg, "save_path", v);
        } else if (strcmp(o, "--load-path") == 0) {
            rc = shs_config_set(cfg, "load_path", v);
        } else if (strcmp(o, "--save-interval") == 0) {
            rc = shs_config_set(cfg, "save_interleaved_steps", v);
        } else if (strcmp(o, "--save-max") == 0) {
            rc = shs_config_set(cfg, "save_max", v);
        } else if (strcmp(o, "--set") == 0) {
            char key[128];
            const char *eq = strchr(v, '=');
            if (!eq || (size_t)(eq - v) >= sizeof key) {
                fprintf(err, "%s: --set takes KEY=VALUE, not '%s'\n", prog, v);
                return 2;
            }
            memcpy(key, v, (size_t)(eq - v));
            key[eq - v] = '\0';
            rc = shs_config_set(cfg, key, eq + 1);
        } else if (strcmp(o, "--corpus") == 0) {
            a->corpus = v;
        } else {
            long long *dst = strcmp(o, "--steps") == 0            ? &a->steps
                             : strcmp(o, "--batch") == 0          ? &a->batch
                             : strcmp(o, "--seed") == 0           ? &a->seed
                             : strcmp(o, "--log-every") == 0      ? &a->log_every
                             : allow_tp && strcmp(o, "--tp") == 0 ? &a->tp
                                                                  : NULL;
            if (!dst) {
                fprintf(err, "%s: unknown option %s\n", prog, o);
                usage(err);
                return 2;
            }
            if (trainer_parse_i64(v, dst) != 0) {
                fprintf(err, "%s: %s takes a non-negative integer, not '%s'\n", prog, o, v);
                return 2;
            }
            if (dst == &a->steps)
                a->steps_set = 1;
        }
        if (rc != SHS_OK) {
            fprintf(err, "%s: %s\n", prog, shs_last_error());
            return 2;
        }
        i += takes;
    }
    if (!cfg->save_path || !*cfg->save_path) {
        /* said, not silent: a run that was meant to save would otherwise
           lose its work without a word */
        if (cfg->enable && cfg->enable_save && !cfg->load_only)
            fprintf(out, "note: no save path (--save-path, checkpoint: save_path, a "
                         "CheckpointMonitor's save_dir): this run saves no checkpoint\n");
        shs_config_set(cfg, "enable_save", "false");
    }
    return -1;
}

#endif
