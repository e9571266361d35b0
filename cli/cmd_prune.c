/*
 * cmd_prune.c -- `shardsafe prune SAVE_PATH --keep N [--dry-run]`: remove
 * all but the newest N committed steps of a save path (never the step the
 * tracker names) and the leftovers of failed saves.
 *
 * Steps are removed with shs_checkpoint_remove (renamed to a .trash-
 * sibling first, so a crash in the middle leaves a .trash- leftover, never
 * a half-deleted directory that still looks like a checkpoint) and the
 * leftovers with shs_checkpoint_clean.
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char k_help[] =
    "Usage: shardsafe prune SAVE_PATH --keep N [--dry-run]\n"
    "\n"
    "Remove all but the newest N committed step directories of a save path, and\n"
    "the leftovers of failed saves (.tmp-*, .trash-*).  The step the tracker\n"
    "(latest_checkpointed_iteration.txt) names is never removed, even when it\n"
    "is not among the newest N.  Incomplete step directories are left alone\n"
    "(reported).  Exports at train end (hf-<step directory>, last_save_in_hf) are\n"
    "never removed; their temporaries (hf-*.tmp-*, .part-*) are leftovers.\n"
    "A malformed tracker makes prune refuse to remove anything.\n"
    "prune holds the save path's lock (.shardsafe.lock, the one a saving trainer\n"
    "holds) while it works, and refuses, naming the holder, while another process\n"
    "holds it.  --dry-run removes nothing and does not take the lock (it warns\n"
    "when the lock is held).\n"
    "\n"
    "Each step directory is renamed to .trash-iteration_<step>-<random> first, then\n"
    "removed.\n"
    "\n"
    "Options:\n"
    "  -k, --keep N   number of newest committed steps to keep (N >= 1, required)\n"
    "  -n, --dry-run  print what would be removed, remove nothing\n"
    "  -h, --help, --version, -q, --quiet, -v, --verbose, --json\n"
    "                 as for every command (see 'shardsafe --help')\n"
    "\n"
    "Exit status: 0 done, 1 SAVE_PATH is not a save path, is locked by another\n"
    "process, or a removal failed,\n"
    "2 usage error.\n";

/* Text lines on stdout, unless -q or --json. */
static int g_text;

static void put_name(const char *s)
{
    cli_put_escaped(stdout, s, strlen(s));
}

/* --json: {"name", "step" (steps only), "bytes"} appended to `list`. */
static void record(json_t *list, const cli_entry *e, int with_step, int *oom)
{
    if (!list)
        return;
    json_t *o = json_object();
    int bad = !o || json_object_set_new(o, "name", cli_jstr0(e->name)) < 0;
    if (!bad && with_step)
        bad = json_object_set_new(o, "step", json_integer(e->step)) < 0;
    if (!bad)
        bad = json_object_set_new(o, "bytes", cli_ju64(e->bytes)) < 0;
    if (bad || json_array_append_new(list, o) < 0) {
        if (bad)
            json_decref(o);
        *oom = 1;
    }
}

/* Remove one committed step directory through the library.
   shs_checkpoint_remove(save_path, step) removes iteration_%08d, or, when
   there is none, step-N.  A directory of another name of the step
   (iteration_40, step-040) is first renamed to iteration_%08d when that
   name is free (a crash in between leaves the same committed step under
   its usual name); a step-N or other name beside an existing
   iteration_%08d of the same step is refused rather than have the library
   remove that other directory. */
static int remove_step(const char *save_path, const cli_entry *e)
{
    char canon[40], alt[40];
    (void)shs_checkpoint_step_dir_name(canon, sizeof canon, e->step, 0);
    (void)shs_checkpoint_step_dir_name(alt, sizeof alt, e->step, 1);
    if (strcmp(e->name, canon) != 0) {
        char *cp = cli_fmt("%s/%s", save_path, canon);
        struct stat st;
        int free_name = cp && lstat(cp, &st) != 0 && errno == ENOENT;
        int ok = free_name && (strcmp(e->name, alt) == 0 ||
                               renameat2(AT_FDCWD, e->path, AT_FDCWD, cp, RENAME_NOREPLACE) == 0);
        int err = errno;
        free(cp);
        if (!ok) {
            if (free_name)
                cli_err("cannot remove %s: rename to %s: %s", e->path, canon, strerror(err));
            else
                cli_err("cannot remove %s: %s/%s exists too (the library removes that one "
                        "first); remove one of them by hand",
                        e->path, save_path, canon);
            return CLI_FAIL;
        }
    }
    if (shs_checkpoint_remove(save_path, e->step) < 0) {
        cli_err("cannot remove %s: %s (a .trash- leftover is removed by a later prune)", e->path,
                shs_last_error());
        return CLI_FAIL;
    }
    return CLI_OK;
}

static void sync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* --dry-run removes nothing, so it does not take the lock (it works beside
   a running trainer); it says so when a holder would make the real prune
   refuse. */
static void warn_if_locked(const char *save_path)
{
    shs_lock_holder h;
    if (shs_savepath_lock_holder(&h, save_path) == SHS_OK && h.held)
        cli_warn("%s is locked by %s: a prune without --dry-run would refuse", save_path, h.text);
}

/* One prune in progress. */
typedef struct prune_run {
    const char *path;
    uint64_t keep;
    int dry;
    cli_save s;
    shs_lock *lock;
    json_t *jremoved, *jkept, *jleft; /* --json lists, else NULL */
    int oom;
    size_t n_kept, n_removed;
    int64_t parked_gone; /* a parked step pruned: -1 none (at most one per
                            step; a list is overkill for the rare case) */
} prune_run;

static int parse_args(prune_run *r, int argc, char **argv)
{
    static const cli_optdef defs[] = { { "--keep", 'k', 1 },
                                       { "--dry-run", 'n', 0 },
                                       { NULL, 0, 0 } };
    cli_parser p;
    const char *val;
    int have_keep = 0, k;
    cli_parser_init(&p, "prune", k_help, argc, argv);
    while ((k = cli_parser_next(&p, defs, &val)) != CLI_ARG_END) {
        switch (k) {
        case CLI_ARG_EXIT: return p.status;
        case CLI_ARG_POSITIONAL:
            if (r->path)
                return cli_usage_err("prune", "takes one SAVE_PATH (got '%s' and '%s')", r->path,
                                     val);
            r->path = val;
            break;
        case 0:
            if (cli_parse_u64(val, &r->keep) < 0 || r->keep < 1)
                return cli_usage_err("prune", "--keep needs an integer >= 1, not '%s'", val);
            have_keep = 1;
            break;
        case 1: r->dry = 1; break;
        }
    }
    if (!r->path)
        return cli_usage_err("prune", "missing SAVE_PATH");
    if (!have_keep)
        return cli_usage_err("prune", "missing --keep N");
    return CLI_OK;
}

/* Check SAVE_PATH, take its lock and list it.  One writer per save path:
   the lock is held from the scan to the last removal, so a trainer cannot
   start saving (its .tmp- would look like a leftover) nor a step be chosen
   from a listing that is stale. */
static int open_save_path(prune_run *r)
{
    const char *path = r->path;
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
    if (r->dry) {
        warn_if_locked(path);
    } else if (shs_savepath_lock(&r->lock, path) < 0) {
        cli_err("%s; nothing pruned", shs_last_error());
        return CLI_FAIL;
    }
    if (cli_save_scan(&r->s, path) != CLI_OK)
        return CLI_FAIL;
    if (r->s.tracker == CLI_TRACKER_MALFORMED) {
        char *msg = cli_save_tracker_problem(&r->s);
        cli_err("%s; refusing to prune (the step to protect is unknown)",
                msg ? msg : "malformed tracker");
        free(msg);
        cli_save_release(&r->s);
        return CLI_FAIL;
    }
    char *problem = cli_save_tracker_problem(&r->s);
    if (problem)
        cli_warn("%s", problem);
    free(problem);
    return CLI_OK;
}

/* Remove the committed steps older than the newest `keep`, except the
   tracker's. */
static int prune_steps(prune_run *r)
{
    const cli_save *s = &r->s;
    /* the N-th newest distinct committed step: keep it and newer ones */
    int64_t threshold = INT64_MAX;
    uint64_t seen = 0;
    for (size_t i = s->n_steps; i-- > 0 && seen < r->keep;) {
        const cli_entry *e = &s->steps[i];
        if (!e->committed || e->step == threshold)
            continue;
        threshold = e->step;
        seen++;
    }
    int status = CLI_OK;
    const char *verb = r->dry ? "would remove" : "removed";
    int64_t protect = s->tracker == CLI_TRACKER_OK ? s->tracker_step : -1;
    for (size_t i = 0; i < s->n_steps; i++) {
        const cli_entry *e = &s->steps[i];
        if (!e->committed) {
            cli_warn("%s: incomplete step directory (no metadata.json or common.json), left "
                     "alone",
                     e->path);
            continue;
        }
        if (e->step >= threshold) {
            r->n_kept++;
            continue;
        }
        if (e->step == protect) {
            r->n_kept++;
            record(r->jkept, e, 1, &r->oom);
            if (!g_text)
                continue;
            printf("kept ");
            put_name(e->name);
            printf(" (step %lld): named by the tracker, although not among the newest %llu\n",
                   (long long)e->step, (unsigned long long)r->keep);
            continue;
        }
        if (!r->dry && remove_step(r->path, e) != CLI_OK) {
            status = CLI_FAIL;
            continue;
        }
        r->n_removed++;
        if (e->parked)
            r->parked_gone = e->step;
        cli_info("prune: %s %s (step %lld)", verb, e->path, (long long)e->step);
        record(r->jremoved, e, 1, &r->oom);
        if (!g_text)
            continue;
        printf("%s ", verb);
        put_name(e->name);
        printf(" (step %lld, %llu bytes)\n", (long long)e->step, (unsigned long long)e->bytes);
    }
    return status;
}

/* The leftovers, all at once (shs_checkpoint_clean); each one still there
   afterwards is a failure. */
static int prune_leftovers(prune_run *r)
{
    const cli_save *s = &r->s;
    const char *verb = r->dry ? "would remove" : "removed";
    int status = CLI_OK, clean_rc = SHS_OK;
    char *clean_why = NULL;
    size_t parked = 0;
    for (size_t i = 0; i < s->n_steps; i++)
        parked += s->steps[i].parked;
    if (!r->dry && (s->n_leftovers || parked)) {
        clean_rc = shs_checkpoint_clean(r->path);
        if (clean_rc < 0)
            clean_why = cli_fmt("%s", shs_last_error());
    }
    for (size_t i = 0; i < s->n_leftovers; i++) {
        const cli_entry *e = &s->leftovers[i];
        struct stat st;
        if (!r->dry && lstat(e->path, &st) == 0) {
            cli_err("cannot remove leftover %s: %s", e->path,
                    clean_why ? clean_why : "still present");
            status = CLI_FAIL;
            continue;
        }
        record(r->jleft, e, 0, &r->oom);
        if (!g_text)
            continue;
        printf("%s leftover ", verb);
        put_name(e->name);
        printf(" (%llu bytes)\n", (unsigned long long)e->bytes);
    }
    /* a parked copy is its step, not a leftover: cleaning renames it back
       (unless it was pruned above) */
    for (size_t i = 0; g_text && clean_rc == SHS_OK && i < s->n_steps; i++) {
        const cli_entry *e = &s->steps[i];
        if (!e->parked || e->step == r->parked_gone)
            continue;
        char canon[40];
        (void)shs_checkpoint_step_dir_name(canon, sizeof canon, e->step, 0);
        printf("%s ", r->dry ? "would restore" : "restored");
        put_name(e->name);
        printf(" as %s (step %lld: a re-save's parked copy)\n", canon, (long long)e->step);
    }
    if (clean_rc < 0 && status == CLI_OK) {
        /* failed on an entry the scan did not see (created since) */
        cli_err("%s", clean_why ? clean_why : "removing leftovers failed");
        status = CLI_FAIL;
    }
    free(clean_why);
    return status;
}

static int print_json(prune_run *r, int status)
{
    json_t *doc = cli_json_new();
    int bad = r->oom || !doc;
    bad = bad || json_object_set_new(doc, "path", cli_jstr0(r->path)) < 0;
    bad = bad || json_object_set_new(doc, "keep", cli_ju64(r->keep)) < 0;
    bad = bad || json_object_set_new(doc, "dry_run", json_boolean(r->dry)) < 0;
    bad = bad || json_object_set_new(doc, "removed", json_incref(r->jremoved)) < 0;
    bad = bad || json_object_set_new(doc, "kept_by_tracker", json_incref(r->jkept)) < 0;
    bad = bad || json_object_set_new(doc, "leftovers_removed", json_incref(r->jleft)) < 0;
    bad = bad || json_object_set_new(doc, "kept_count", cli_ju64(r->n_kept)) < 0;
    if (bad) {
        json_decref(doc);
        doc = NULL;
    }
    return cli_json_print(doc, status, CLI_FAIL);
}

int cli_cmd_prune(int argc, char **argv)
{
    prune_run r = { 0 };
    r.parked_gone = -1;
    int status = parse_args(&r, argc, argv);
    if (status != CLI_OK || !r.path)
        return status;
    if ((status = open_save_path(&r)) != CLI_OK) {
        shs_lock_free(r.lock);
        return status;
    }
    /* dry-run or not, the lists say what was (or would be) removed */
    if (cli_g.json) {
        r.jremoved = json_array();
        r.jkept = json_array();
        r.jleft = json_array();
        r.oom = !r.jremoved || !r.jkept || !r.jleft;
    }
    g_text = !cli_g.json && !cli_g.quiet;
    status = prune_steps(&r);
    if (prune_leftovers(&r) != CLI_OK)
        status = CLI_FAIL;
    if (!r.dry)
        sync_dir(r.path);
    shs_lock_free(r.lock);
    if (g_text)
        printf("%s %zu step %s, kept %zu committed\n", r.dry ? "would remove" : "removed",
               r.n_removed, r.n_removed == 1 ? "directory" : "directories", r.n_kept);
    cli_save_release(&r.s);
    if (cli_g.json)
        status = print_json(&r, status);
    json_decref(r.jremoved);
    json_decref(r.jkept);
    json_decref(r.jleft);
    return cli_finish_stdout(status);
}
