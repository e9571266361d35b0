/*
 * trainer_args.h -- the command line shared by the demo trainers
 * (examples/trainer.c and examples/mpi/trainer_mpi.c): checkpoint flags go
 * into a shs_config (a YAML --config first, so flags override it), the
 * rest into trainer_args.  Header-only: each trainer is one executable.
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
    "  --config FILE.yaml     read the `checkpoint:` section of a YAML file\n"                     \
    "  --steps N              train until global_step N (default 200)\n"                           \
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

/*
 * Parse argv.  Returns -1 to go on, else the exit code: 0 after --help,
 * 1 for an unreadable --config, 2 for a usage error (message on `err`).
 */
static int trainer_parse_args(int argc, char **argv, shs_config *cfg, trainer_args *a,
                              const char *prog, int allow_tp, void (*usage)(FILE *), FILE *out,
                              FILE *err)
{
    *a = (trainer_args){ 200, 32, 1234, 50, -1, SHS_DEMO_CORPUS };
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--config") == 0 && shs_config_load_yaml(cfg, argv[i + 1]) != SHS_OK) {
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
        }
        if (rc != SHS_OK) {
            fprintf(err, "%s: %s\n", prog, shs_last_error());
            return 2;
        }
        i += takes;
    }
    if (!cfg->save_path || !*cfg->save_path)
        shs_config_set(cfg, "enable_save", "false");
    return -1;
}

#endif
