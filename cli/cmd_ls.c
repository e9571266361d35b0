/*
 * cmd_ls.c -- `shardsafe ls SAVE_PATH [--json]`: the step directories of a
 * save path, their state and size, the tracker, the leftovers of failed
 * saves and of killed merges and reshards beside it.  Reads directory
 * entries, stat() and each step's metadata.json and common.json (through
 * the library), never tensor data.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char k_help[] =
    "Usage: shardsafe ls SAVE_PATH\n"
    "\n"
    "List the step directories of a save path (iteration_* and step-*, sorted by\n"
    "step): step, status (committed: metadata.json and common.json present and\n"
    "valid, every data file metadata.json names present; damaged: committed but\n"
    "one of these fails; incomplete otherwise), size of its files (KiB, MiB,\n"
    "GiB), number of files,\n"
    "age (from the directory's modification time) and 'latest' for the one the\n"
    "tracker (latest_checkpointed_iteration.txt) names.  A re-save's parked copy\n"
    "(.replaced-iteration_N-*, left by a re-save killed between its renames,\n"
    "with iteration_N absent) is step N, status 'parked': loads read it and the\n"
    "next start renames it back.  Leftovers of failed\n"
    "saves (.tmp-*, .trash-*) are listed after them, then the exports at train\n"
    "end (hf-<step directory>: Hugging Face weights, last_save_in_hf), which\n"
    "prune and retention never delete.  The temporary outputs of merges and\n"
    "reshards whose destination is SAVE_PATH (SAVE_PATH.tmp-*, .tmp-<name>-*\n"
    "beside it) come last: 'leftover' when the run that wrote it was killed (the\n"
    "next merge or reshard of that destination removes it), 'in use' while a\n"
    "running process holds it; SAVE_PATH need not exist for them to be listed.\n"
    "A missing or malformed\n"
    "tracker, or one naming a step without a complete directory, is reported as\n"
    "a warning on stderr, as is the problem of each damaged or incomplete step\n"
    "(the same as 'shardsafe verify' names; tensor data and checksums are only\n"
    "read by verify).  --json gives the exact numbers.\n"
    "\n"
    "Options:\n"
    "  -h, --help, --version, -q, --quiet, -v, --verbose, --json\n"
    "               as for every command (see 'shardsafe --help')\n"
    "\n"
    "Exit status: 0 listed (even with warnings), 1 SAVE_PATH cannot be read,\n"
    "2 usage error.\n";

/* The temporaries of merges and reshards of a destination. */
typedef struct tool_left {
    char *path;
    const char *tool;
    uint64_t bytes, files;
    int live;
    long long pid;
} tool_left;

typedef struct tool_lefts {
    tool_left *v;
    size_t n;
} tool_lefts;

static int collect_left(void *ctx, const shs_tool_leftover *l)
{
    tool_lefts *s = ctx;
    tool_left *nv = realloc(s->v, (s->n + 1) * sizeof *nv);
    if (!nv)
        return SHS_ENOMEM;
    s->v = nv;
    tool_left *e = &s->v[s->n];
    if (!(e->path = strdup(l->path)))
        return SHS_ENOMEM;
    e->tool = strcmp(l->tool, "merge") == 0 ? "merge" : "reshard";
    e->bytes = l->bytes;
    e->files = l->files;
    e->live = l->live;
    e->pid = l->pid;
    s->n++;
    return 0;
}

static void lefts_release(tool_lefts *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i].path);
    free(s->v);
}

static int say_removed(void *ctx, const shs_tool_leftover *l)
{
    char hb[32];
    const char *cmd = ctx;
    cli_human_bytes(hb, sizeof hb, l->bytes);
    size_t n = strlen(l->path);
    if (l->removed && n > 5 && strcmp(l->path + n - 5, ".lock") == 0)
        cli_warn("%s: removed %s, the lock file of a killed %s", cmd, l->path, l->tool);
    else if (l->removed)
        cli_warn("%s: removed %s (%s, %llu files), the temporary output of a killed %s", cmd,
                 l->path, hb, (unsigned long long)l->files, l->tool);
    else if (l->live)
        cli_warn("%s: %s (%s) is the temporary output of a %s still running (pid %lld): left "
                 "alone",
                 cmd, l->path, hb, l->tool, l->pid);
    return 0;
}

void cli_clean_tool_leftovers(const char *dst, const char *cmd)
{
    if (!*dst)
        return; /* the command's own check says what is wrong */
    if (shs_tool_leftovers(dst, 1, say_removed, (void *)(uintptr_t)cmd) < 0)
        cli_warn("%s: leftovers of killed runs beside %s: %s", cmd, dst, shs_last_error());
}

static const char *status_of(const cli_entry *e)
{
    return !e->committed ? "incomplete"
           : e->problem  ? "damaged"
           : e->parked   ? "parked"
                         : "committed";
}

static json_t *entry_json(const cli_entry *e, int step)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    int bad = json_object_set_new(o, "name", cli_jstr0(e->name)) < 0;
    if (step) {
        bad |= json_object_set_new(o, "step", json_integer(e->step)) < 0;
        bad |= json_object_set_new(o, "status", json_string(status_of(e))) < 0;
        bad |= json_object_set_new(o, "problem", e->problem ? cli_jstr0(e->problem) : json_null()) <
               0;
    }
    bad |= json_object_set_new(o, "bytes", cli_ju64(e->bytes)) < 0;
    bad |= json_object_set_new(o, "file_count", cli_ju64(e->files)) < 0;
    bad |= json_object_set_new(o, "shared_file_count", cli_ju64(e->shared)) < 0;
    bad |= json_object_set_new(o, "mtime", json_integer(e->mtime)) < 0;
    if (step)
        bad |= json_object_set_new(o, "latest", json_boolean(e->latest)) < 0;
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *tool_lefts_json(const tool_lefts *tl)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < tl->n; i++) {
        const tool_left *e = &tl->v[i];
        json_t *o = json_object();
        int bad = !o || json_object_set_new(o, "path", cli_jstr0(e->path)) < 0 ||
                  json_object_set_new(o, "tool", json_string(e->tool)) < 0 ||
                  json_object_set_new(o, "status", json_string(e->live ? "in use" : "leftover")) <
                      0 ||
                  json_object_set_new(o, "bytes", cli_ju64(e->bytes)) < 0 ||
                  json_object_set_new(o, "file_count", cli_ju64(e->files)) < 0 ||
                  json_object_set_new(o, "pid", e->pid ? json_integer(e->pid) : json_null()) < 0 ||
                  json_array_append_new(a, o) < 0;
        if (bad) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static int print_json(const cli_save *s, const tool_lefts *tl, int status)
{
    json_t *doc = cli_json_new(), *steps = json_array(), *left = json_array();
    json_t *tr = json_object(), *exp = json_array(), *tool = tool_lefts_json(tl);
    int bad = !doc || !steps || !left || !tr || !exp || !tool;
    for (size_t i = 0; !bad && i < s->n_steps; i++) {
        json_t *o = entry_json(&s->steps[i], 1);
        bad |= !o || json_array_append_new(steps, o) < 0;
    }
    for (size_t i = 0; !bad && i < s->n_leftovers; i++) {
        json_t *o = entry_json(&s->leftovers[i], 0);
        bad |= !o || json_array_append_new(left, o) < 0;
    }
    for (size_t i = 0; !bad && i < s->n_exports; i++) {
        json_t *o = entry_json(&s->exports[i], 0);
        bad |= !o || json_object_set_new(o, "step", json_integer(s->exports[i].step)) < 0 ||
               json_array_append_new(exp, o) < 0;
    }
    if (!bad) {
        const char *st = s->tracker == CLI_TRACKER_OK        ? "ok"
                         : s->tracker == CLI_TRACKER_MISSING ? "missing"
                                                             : "malformed";
        bad |= json_object_set_new(tr, "state", json_string(st)) < 0;
        bad |= json_object_set_new(tr, "step",
                                   s->tracker == CLI_TRACKER_OK ? json_integer(s->tracker_step)
                                                                : json_null()) < 0;
        bad |= json_object_set_new(tr, "complete", json_boolean(s->latest != NULL)) < 0;
        bad |= json_object_set_new(doc, "path", cli_jstr0(s->path)) < 0;
        bad |= json_object_set_new(doc, "now", json_integer((json_int_t)time(NULL))) < 0;
        bad |= json_object_set_new(doc, "tracker", json_incref(tr)) < 0;
        bad |= json_object_set_new(doc, "steps", json_incref(steps)) < 0;
        bad |= json_object_set_new(doc, "leftovers", json_incref(left)) < 0;
        bad |= json_object_set_new(doc, "exports", json_incref(exp)) < 0;
        bad |= json_object_set_new(doc, "tool_leftovers", json_incref(tool)) < 0;
    }
    json_decref(tool);
    json_decref(steps);
    json_decref(left);
    json_decref(exp);
    json_decref(tr);
    if (bad) {
        json_decref(doc);
        doc = NULL;
    }
    return cli_json_print(doc, status, CLI_FAIL);
}

/* Size column: "276.3 KiB", plus " (2 shared)" for hard-linked files. */
static void size_cell(char *buf, size_t cap, const cli_entry *e)
{
    char hb[32];
    cli_human_bytes(hb, sizeof hb, e->bytes);
    if (e->shared)
        snprintf(buf, cap, "%s (%llu shared)", hb, (unsigned long long)e->shared);
    else
        snprintf(buf, cap, "%s", hb);
}

static void print_tool_lefts(const tool_lefts *tl)
{
    char size[32];
    for (size_t i = 0; i < tl->n; i++) {
        const tool_left *e = &tl->v[i];
        if (e->live)
            printf("in use (%s running, pid %lld): ", e->tool, e->pid);
        else
            printf("leftover (killed %s): ", e->tool);
        cli_put_escaped(stdout, e->path, strlen(e->path));
        printf(" (%s, %llu files)\n", cli_human_bytes(size, sizeof size, e->bytes),
               (unsigned long long)e->files);
    }
}

static void print_text(const cli_save *s)
{
    char num[32], size[64], age[32];
    size_t ws = 4, wsize = 4, wf = 5, wa = 3;
    int64_t now = (int64_t)time(NULL);
    for (size_t i = 0; i < s->n_steps; i++) {
        const cli_entry *e = &s->steps[i];
        size_t n = (size_t)snprintf(num, sizeof num, "%lld", (long long)e->step);
        ws = n > ws ? n : ws;
        size_cell(size, sizeof size, e);
        wsize = strlen(size) > wsize ? strlen(size) : wsize;
        n = (size_t)snprintf(num, sizeof num, "%llu", (unsigned long long)e->files);
        wf = n > wf ? n : wf;
        cli_human_age(age, sizeof age, e->mtime, now);
        wa = strlen(age) > wa ? strlen(age) : wa;
    }
    if (s->n_steps) {
        printf("%*s  %-10s  %*s  %*s  %-*s  %s\n", (int)ws, "STEP", "STATUS", (int)wsize, "SIZE",
               (int)wf, "FILES", (int)wa, "AGE", "DIRECTORY");
        for (size_t i = 0; i < s->n_steps; i++) {
            const cli_entry *e = &s->steps[i];
            size_cell(size, sizeof size, e);
            printf("%*lld  %-10s  %*s  %*llu  %-*s  ", (int)ws, (long long)e->step, status_of(e),
                   (int)wsize, size, (int)wf, (unsigned long long)e->files, (int)wa,
                   cli_human_age(age, sizeof age, e->mtime, now));
            cli_put_escaped(stdout, e->name, strlen(e->name));
            fputs(e->latest ? "  latest\n" : "\n", stdout);
        }
    } else {
        printf("no step directories\n");
    }
    for (size_t i = 0; i < s->n_leftovers; i++) {
        const cli_entry *e = &s->leftovers[i];
        printf("leftover (failed save): ");
        cli_put_escaped(stdout, e->name, strlen(e->name));
        printf(" (%s, %llu files, %s)\n", cli_human_bytes(size, sizeof size, e->bytes),
               (unsigned long long)e->files, cli_human_age(age, sizeof age, e->mtime, now));
    }
    for (size_t i = 0; i < s->n_exports; i++) {
        const cli_entry *e = &s->exports[i];
        printf("export (Hugging Face) of step %lld: ", (long long)e->step);
        cli_put_escaped(stdout, e->name, strlen(e->name));
        printf(" (%s, %llu files, %s)\n", cli_human_bytes(size, sizeof size, e->bytes),
               (unsigned long long)e->files, cli_human_age(age, sizeof age, e->mtime, now));
    }
}

int cli_cmd_ls(int argc, char **argv)
{
    cli_parser p;
    const char *path = NULL, *val;
    int k;
    cli_parser_init(&p, "ls", k_help, argc, argv);
    while ((k = cli_parser_next(&p, NULL, &val)) != CLI_ARG_END) {
        switch (k) {
        case CLI_ARG_EXIT: return p.status;
        case CLI_ARG_POSITIONAL:
            if (path)
                return cli_usage_err("ls", "takes one SAVE_PATH (got '%s' and '%s')", path, val);
            path = val;
            break;
        }
    }
    if (!path)
        return cli_usage_err("ls", "missing SAVE_PATH");
    if (!*path)
        return cli_usage_err("ls", "SAVE_PATH is an empty path");
    if (cli_is_step_dir(path))
        cli_warn("%s is a step directory; listing it as a save path", path);
    /* beside the path: the temporaries of merges and reshards into it,
       listed even when it does not exist (a killed first merge) */
    tool_lefts tl = { NULL, 0 };
    if (*path && shs_tool_leftovers(path, 0, collect_left, &tl) < 0)
        cli_warn("%s: temporaries of merges and reshards: %s", path, shs_last_error());
    cli_save s;
    shs_source_kind kind = SHS_SOURCE_OTHER;
    if (tl.n && shs_path_kind(&kind, path) == SHS_OK && kind == SHS_SOURCE_NONE) {
        if (cli_g.json) {
            json_t *doc = cli_json_new(), *a = tool_lefts_json(&tl);
            int bad = !doc || !a || json_object_set_new(doc, "path", cli_jstr0(path)) < 0 ||
                      json_object_set_new(doc, "tool_leftovers", json_incref(a)) < 0;
            json_decref(a);
            if (bad) {
                json_decref(doc);
                doc = NULL;
            }
            lefts_release(&tl);
            return cli_finish_stdout(cli_json_print(doc, CLI_OK, CLI_FAIL));
        }
        if (!cli_g.quiet) {
            printf("%s does not exist\n", path);
            print_tool_lefts(&tl);
        }
        lefts_release(&tl);
        return cli_finish_stdout(CLI_OK);
    }
    if (cli_save_scan(&s, path) != CLI_OK) {
        lefts_release(&tl);
        return CLI_FAIL;
    }
    for (size_t i = 0; i < s.n_steps; i++) {
        cli_entry *e = &s.steps[i];
        e->problem = cli_step_problem(e->path);
        if (!e->problem && !e->committed)
            e->problem = cli_fmt("%s: incomplete step directory", e->path);
        if (e->problem)
            cli_warn("%s", e->problem);
    }
    cli_info("ls: %zu step directories, %zu leftovers, %zu exports in %s", s.n_steps, s.n_leftovers,
             s.n_exports, path);
    char *problem = s.n_steps || s.tracker != CLI_TRACKER_MISSING ? cli_save_tracker_problem(&s)
                                                                  : NULL;
    if (problem)
        cli_warn("%s", problem);
    int status = CLI_OK;
    if (cli_g.json) {
        status = print_json(&s, &tl, CLI_OK);
    } else if (!cli_g.quiet) {
        print_text(&s);
        print_tool_lefts(&tl);
    }
    lefts_release(&tl);
    free(problem);
    cli_save_release(&s);
    return cli_finish_stdout(status);
}
