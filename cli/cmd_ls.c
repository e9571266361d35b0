/*
 * cmd_ls.c -- `shardsafe ls SAVE_PATH [--json]`: the step directories of a
 * save path, their state and size, the tracker and the leftovers of
 * failed saves.  Reads directory entries and stat() only.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static const char k_help[] =
    "Usage: shardsafe ls SAVE_PATH [--json]\n"
    "\n"
    "List the step directories of a save path (iteration_* and step-*, sorted by\n"
    "step): step, status (committed: metadata.json and common.json present;\n"
    "incomplete otherwise), total bytes of its files, number of files, and\n"
    "'latest' for the one the tracker (latest_checkpointed_iteration.txt) names.\n"
    "Leftovers of failed saves (.tmp-*, .trash-*) are listed after them.\n"
    "A missing or malformed tracker, or one naming a step without a complete\n"
    "directory, is reported as a warning on stderr.\n"
    "\n"
    "Options:\n"
    "  --json       print one JSON document on stdout instead of text\n"
    "  -h, --help   show this help\n"
    "\n"
    "Exit status: 0 listed (even with warnings), 1 SAVE_PATH cannot be read,\n"
    "2 usage error.\n";

static size_t ndigits(uint64_t v)
{
    size_t n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

static json_t *entry_json(const cli_entry *e, int step)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    int bad = 0;
    if (step) {
        bad |= json_object_set_new(o, "step", json_integer(e->step));
        bad |= json_object_set_new(o, "status",
                                   json_string(e->committed ? "committed" : "incomplete"));
    }
    bad |= json_object_set_new(o, "bytes", json_integer((json_int_t)(e->bytes > INT64_MAX ? INT64_MAX : e->bytes)));
    bad |= json_object_set_new(o, "files", json_integer((json_int_t)e->files));
    bad |= json_object_set_new(o, "shared_files", json_integer((json_int_t)e->shared));
    if (step)
        bad |= json_object_set_new(o, "latest", json_boolean(e->latest));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Names are file names: a name that is not UTF-8 is given escaped. */
static json_t *jname(const char *s)
{
    json_t *j = json_string(s);
    if (!j) {
        char *e = cli_escape(s, strlen(s));
        j = e ? json_string(e) : NULL;
        free(e);
    }
    return j;
}

static int print_json(const cli_save *s, const char *problem)
{
    json_t *doc = json_object(), *steps = json_array(), *left = json_array();
    json_t *tr = json_object(), *warn = json_array();
    int bad = !doc || !steps || !left || !tr || !warn;
    for (size_t i = 0; !bad && i < s->n_steps; i++) {
        json_t *o = entry_json(&s->steps[i], 1);
        bad |= !o || json_object_set_new(o, "name", jname(s->steps[i].name)) ||
               json_array_append_new(steps, o);
    }
    for (size_t i = 0; !bad && i < s->n_leftovers; i++) {
        json_t *o = entry_json(&s->leftovers[i], 0);
        bad |= !o || json_object_set_new(o, "name", jname(s->leftovers[i].name)) ||
               json_array_append_new(left, o);
    }
    if (!bad) {
        const char *st = s->tracker == CLI_TRACKER_OK        ? "ok"
                         : s->tracker == CLI_TRACKER_MISSING ? "missing"
                                                             : "malformed";
        bad |= json_object_set_new(tr, "state", json_string(st));
        bad |= json_object_set_new(tr, "step", s->tracker == CLI_TRACKER_OK
                                                   ? json_integer(s->tracker_step)
                                                   : json_null());
        bad |= json_object_set_new(tr, "complete", json_boolean(s->latest != NULL));
        if (problem)
            bad |= json_array_append_new(warn, jname(problem));
        bad |= json_object_set_new(doc, "save_path", jname(s->path));
        bad |= json_object_set_new(doc, "tracker", json_incref(tr));
        bad |= json_object_set_new(doc, "steps", json_incref(steps));
        bad |= json_object_set_new(doc, "leftovers", json_incref(left));
        bad |= json_object_set_new(doc, "warnings", json_incref(warn));
    }
    if (!bad && json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_ENSURE_ASCII) == 0)
        putchar('\n');
    else
        bad = 1;
    json_decref(doc);
    json_decref(steps);
    json_decref(left);
    json_decref(tr);
    json_decref(warn);
    if (bad) {
        cli_err("ls: out of memory building the output");
        return CLI_FAIL;
    }
    return CLI_OK;
}

static void print_text(const cli_save *s)
{
    size_t ws = 4, wb = 5, wf = 5;
    char bytes[64];
    for (size_t i = 0; i < s->n_steps; i++) {
        const cli_entry *e = &s->steps[i];
        if (ndigits((uint64_t)e->step) > ws)
            ws = ndigits((uint64_t)e->step);
        size_t b = (size_t)snprintf(bytes, sizeof bytes, "%llu", (unsigned long long)e->bytes);
        if (e->shared)
            b += (size_t)snprintf(bytes, sizeof bytes, " (%llu shared)",
                                  (unsigned long long)e->shared);
        if (b > wb)
            wb = b;
        if (ndigits(e->files) > wf)
            wf = ndigits(e->files);
    }
    if (s->n_steps) {
        printf("%*s  %-10s  %*s  %*s  %s\n", (int)ws, "STEP", "STATUS", (int)wb, "BYTES",
               (int)wf, "FILES", "DIRECTORY");
        for (size_t i = 0; i < s->n_steps; i++) {
            const cli_entry *e = &s->steps[i];
            int n = snprintf(bytes, sizeof bytes, "%llu", (unsigned long long)e->bytes);
            if (e->shared && n > 0 && (size_t)n < sizeof bytes)
                snprintf(bytes + n, sizeof bytes - (size_t)n, " (%llu shared)",
                         (unsigned long long)e->shared);
            printf("%*lld  %-10s  %*s  %*llu  ", (int)ws, (long long)e->step,
                   e->committed ? "committed" : "incomplete", (int)wb, bytes, (int)wf,
                   (unsigned long long)e->files);
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
        printf(" (%llu bytes, %llu files)\n", (unsigned long long)e->bytes,
               (unsigned long long)e->files);
    }
}

int cli_cmd_ls(int argc, char **argv)
{
    static const cli_optdef defs[] = { { "--json", 0 }, { NULL, 0 } };
    cli_parser p;
    const char *path = NULL, *val;
    int json = 0, k;
    cli_parser_init(&p, "ls", argc, argv);
    while ((k = cli_parser_next(&p, defs, &val)) != CLI_ARG_END) {
        switch (k) {
        case CLI_ARG_HELP:
            fputs(k_help, stdout);
            return cli_finish_stdout(CLI_OK);
        case CLI_ARG_ERROR:
            return CLI_USAGE;
        case CLI_ARG_POSITIONAL:
            if (path)
                return cli_usage_err("ls", "takes one SAVE_PATH (got '%s' and '%s')", path, val);
            path = val;
            break;
        case 0:
            json = 1;
            break;
        }
    }
    if (!path)
        return cli_usage_err("ls", "missing SAVE_PATH");
    if (cli_is_step_dir(path))
        cli_warn("%s is a step directory; listing it as a save path", path);
    cli_save s;
    if (cli_save_scan(&s, path) != CLI_OK)
        return CLI_FAIL;
    char *problem = s.n_steps || s.tracker != CLI_TRACKER_MISSING ? cli_save_tracker_problem(&s)
                                                                   : NULL;
    if (problem)
        cli_warn("%s", problem);
    int status = json ? print_json(&s, problem) : (print_text(&s), CLI_OK);
    free(problem);
    cli_save_release(&s);
    return cli_finish_stdout(status);
}
