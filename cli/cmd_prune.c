/*
 * cmd_prune.c -- `shardsafe prune SAVE_PATH --keep N [--dry-run]`: remove
 * all but the newest N committed steps of a save path (never the step the
 * tracker names) and the leftovers of failed saves.
 *
 * A step directory is first renamed to a ".trash-<name>-<random>" sibling
 * and only then removed: a crash in the middle leaves a .trash- entry (a
 * leftover, removed by the next prune or the next run's manager), never a
 * half-deleted directory that still looks like a checkpoint.
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char k_help[] =
    "Usage: shardsafe prune SAVE_PATH --keep N [--dry-run]\n"
    "\n"
    "Remove all but the newest N committed step directories of a save path, and\n"
    "the leftovers of failed saves (.tmp-*, .trash-*).  The step the tracker\n"
    "(latest_checkpointed_iteration.txt) names is never removed, even when it\n"
    "is not among the newest N.  Incomplete step directories are left alone\n"
    "(reported).  A malformed tracker makes prune refuse to remove anything.\n"
    "Do not run it while a training run saves into SAVE_PATH: its .tmp-* directory\n"
    "is a save in progress.\n"
    "\n"
    "Each step directory is renamed to .trash-<name>-<random> first, then removed.\n"
    "\n"
    "Options:\n"
    "  --keep N     number of newest committed steps to keep (N >= 1, required)\n"
    "  --dry-run    print what would be removed, remove nothing\n"
    "  -h, --help   show this help\n"
    "\n"
    "Exit status: 0 done, 1 SAVE_PATH is not a save path or a removal failed,\n"
    "2 usage error.\n";

static void put_name(const char *s)
{
    cli_put_escaped(stdout, s, strlen(s));
}

/* Rename a step directory away, then remove it. */
static int remove_step(const char *save_path, const cli_entry *e)
{
    char suffix[17], why[512];
    cli_random_suffix(suffix);
    char *trash = cli_fmt("%s/.trash-%s-%s", save_path, e->name, suffix);
    if (!trash) {
        cli_err("out of memory");
        return CLI_FAIL;
    }
    if (rename(e->path, trash) != 0) {
        cli_err("cannot remove %s: rename: %s", e->path, strerror(errno));
        free(trash);
        return CLI_FAIL;
    }
    int rc = CLI_OK;
    if (cli_rmtree(trash, why, sizeof why) < 0) {
        cli_err("%s renamed to %s, but removing it failed: %s (a later prune removes it)",
                e->path, trash, why);
        rc = CLI_FAIL;
    }
    free(trash);
    return rc;
}

static void sync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

int cli_cmd_prune(int argc, char **argv)
{
    static const cli_optdef defs[] = { { "--keep", 1 }, { "--dry-run", 0 }, { NULL, 0 } };
    cli_parser p;
    const char *path = NULL, *val;
    uint64_t keep = 0;
    int have_keep = 0, dry = 0, k;
    cli_parser_init(&p, "prune", argc, argv);
    while ((k = cli_parser_next(&p, defs, &val)) != CLI_ARG_END) {
        switch (k) {
        case CLI_ARG_HELP:
            fputs(k_help, stdout);
            return cli_finish_stdout(CLI_OK);
        case CLI_ARG_ERROR:
            return CLI_USAGE;
        case CLI_ARG_POSITIONAL:
            if (path)
                return cli_usage_err("prune", "takes one SAVE_PATH (got '%s' and '%s')", path,
                                     val);
            path = val;
            break;
        case 0:
            if (cli_parse_u64(val, &keep) < 0 || keep < 1)
                return cli_usage_err("prune", "--keep needs an integer >= 1, not '%s'", val);
            have_keep = 1;
            break;
        case 1:
            dry = 1;
            break;
        }
    }
    if (!path)
        return cli_usage_err("prune", "missing SAVE_PATH");
    if (!have_keep)
        return cli_usage_err("prune", "missing --keep N");
    if (cli_is_step_dir(path)) {
        cli_err("%s is a step directory, not a save path: nothing pruned", path);
        return CLI_FAIL;
    }
    if (!cli_is_save_path(path)) {
        cli_err("%s is not a save path (no iteration_* or step-* directory and no %s): "
                "nothing pruned",
                path, CLI_TRACKER);
        return CLI_FAIL;
    }
    cli_save s;
    if (cli_save_scan(&s, path) != CLI_OK)
        return CLI_FAIL;
    if (s.tracker == CLI_TRACKER_MALFORMED) {
        char *msg = cli_save_tracker_problem(&s);
        cli_err("%s; refusing to prune (the step to protect is unknown)", msg ? msg : "malformed tracker");
        free(msg);
        cli_save_release(&s);
        return CLI_FAIL;
    }
    char *problem = cli_save_tracker_problem(&s);
    if (problem)
        cli_warn("%s", problem);
    free(problem);

    /* the N-th newest distinct committed step: keep it and newer ones */
    int64_t threshold = INT64_MAX;
    uint64_t seen = 0;
    for (size_t i = s.n_steps; i-- > 0 && seen < keep;) {
        const cli_entry *e = &s.steps[i];
        if (!e->committed || e->step == threshold)
            continue;
        threshold = e->step;
        seen++;
    }
    int status = CLI_OK;
    const char *verb = dry ? "would remove" : "removed";
    size_t n_kept = 0, n_removed = 0;
    int64_t protect = s.tracker == CLI_TRACKER_OK ? s.tracker_step : -1;
    for (size_t i = 0; i < s.n_steps; i++) {
        const cli_entry *e = &s.steps[i];
        if (!e->committed) {
            cli_warn("%s: incomplete step directory (no metadata.json or common.json), left "
                     "alone",
                     e->path);
            continue;
        }
        if (e->step >= threshold) {
            n_kept++;
            continue;
        }
        if (e->step == protect) {
            n_kept++;
            printf("kept ");
            put_name(e->name);
            printf(" (step %lld): named by the tracker, although not among the newest %llu\n",
                   (long long)e->step, (unsigned long long)keep);
            continue;
        }
        int rc = dry ? CLI_OK : remove_step(path, e);
        if (rc != CLI_OK) {
            status = CLI_FAIL;
            continue;
        }
        n_removed++;
        printf("%s ", verb);
        put_name(e->name);
        printf(" (step %lld, %llu bytes)\n", (long long)e->step, (unsigned long long)e->bytes);
    }
    for (size_t i = 0; i < s.n_leftovers; i++) {
        const cli_entry *e = &s.leftovers[i];
        char why[512];
        if (!dry && cli_rmtree(e->path, why, sizeof why) < 0) {
            cli_err("cannot remove leftover %s: %s", e->path, why);
            status = CLI_FAIL;
            continue;
        }
        printf("%s leftover ", verb);
        put_name(e->name);
        printf(" (%llu bytes)\n", (unsigned long long)e->bytes);
    }
    if (!dry)
        sync_dir(path);
    printf("%s %zu step %s, kept %zu committed\n", dry ? "would remove" : "removed", n_removed,
           n_removed == 1 ? "directory" : "directories", n_kept);
    cli_save_release(&s);
    return cli_finish_stdout(status);
}
