/*
 * ckpt.c -- save paths and step directories for `ls`, `prune` and
 * `verify`: listing a save path (steps, sizes, tracker, leftovers).  The
 * committed steps and the tracker come from the library
 * (shs_checkpoint_list, shs_checkpoint_read_tracker); the directory scan
 * here only adds what the library does not list: each directory's name,
 * incomplete step directories, leftovers, and sizes (presentation).
 */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


static int is_regular(const char *dir, const char *name)
{
    char *p = cli_fmt("%s/%s", dir, name);
    struct stat st;
    int ok = p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
    free(p);
    return ok;
}

static int holds_save_entries(const char *path);

/* A single-card MindSpore step directory: no metadata.json, but the
   library reads it as one (its files say "format": "ms"). */
static int is_ms_single(const char *path)
{
    shs_checkpoint *ck = NULL;
    int yes = shs_checkpoint_open(&ck, path) == SHS_OK &&
              shs_checkpoint_format(ck) == SHS_CKPT_FORMAT_MINDSPORE;
    shs_checkpoint_close(ck);
    return yes;
}

int cli_is_step_dir(const char *path)
{
    struct stat st;
    char *buf = NULL, *mp = NULL;
    int yes = 0;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        goto done;
    /* The library's decision (shs_checkpoint_resolve): a directory that
       is a step directory by its name or its common.json but lacks
       metadata.json is damaged (SHS_ECORRUPT), never a plain folder; one
       it resolves to itself is a step directory when it holds
       metadata.json in any form (a directory there is a broken step). */
    size_t cap = strlen(path) + 64;
    if (!(buf = malloc(cap)))
        goto done;
    int rc = shs_checkpoint_resolve(buf, cap, path, -1);
    if (rc == SHS_ECORRUPT) {
        /* (also what a save path with a dangling tracker gives) */
        yes = !holds_save_entries(path);
    } else if (rc == SHS_OK && strcmp(buf, path) == 0) {
        mp = cli_fmt("%s/metadata.json", path);
        yes = (mp && lstat(mp, &st) == 0) || is_ms_single(path);
    }
done:
    free(buf);
    free(mp);
    return yes;
}

char *cli_step_problem(const char *dir)
{
    shs_checkpoint *ck = NULL;
    char *why = NULL;
    if (shs_checkpoint_open(&ck, dir) != SHS_OK) {
        why = cli_fmt("%s", shs_last_error());
        goto done;
    }
    for (size_t i = 0; !why && i < shs_checkpoint_file_count(ck); i++) {
        const char *name = shs_checkpoint_file_name(ck, i);
        char *fp = cli_fmt("%s/%s", dir, name);
        struct stat st;
        if (fp && stat(fp, &st) != 0)
            why = cli_fmt("%s: missing file '%s' named in metadata.json", dir, name);
        free(fp);
    }
    shs_progress prog = SHS_PROGRESS_INIT;
    if (!why && shs_checkpoint_progress(&prog, ck) != SHS_OK)
        why = cli_fmt("%s", shs_last_error());
done:
    shs_checkpoint_close(ck);
    return why;
}

/* A directory holding the tracker or a step directory. */
static int holds_save_entries(const char *path)
{
    struct stat st;
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        if (shs_savepath_entry_kind(e->d_name) == SHS_ENTRY_TRACKER) {
            found = 1;
        } else if (shs_savepath_entry_kind(e->d_name) == SHS_ENTRY_STEP) {
            char *p = cli_fmt("%s/%s", path, e->d_name);
            found = p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
            free(p);
        }
    }
    closedir(d);
    return found;
}

int cli_is_save_path(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode) && !cli_is_step_dir(path) &&
           holds_save_entries(path);
}

/* ------------------------------------------------------------------ */
/* Sizes                                                              */
/* ------------------------------------------------------------------ */

/* Sum the regular files under `path` (not following symbolic links, which
   count as files of their own size; depth-limited). */
static void du(const char *path, int depth, uint64_t *bytes, uint64_t *files, uint64_t *shared)
{
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char *p = cli_fmt("%s/%s", path, e->d_name);
        struct stat st;
        if (p && lstat(p, &st) == 0) {
            if (S_ISDIR(st.st_mode)) {
                if (depth < 16)
                    du(p, depth + 1, bytes, files, shared);
            } else {
                *bytes = cli_add_sat(*bytes, (uint64_t)st.st_size);
                (*files)++;
                if (S_ISREG(st.st_mode) && st.st_nlink > 1)
                    (*shared)++;
            }
        }
        free(p);
    }
    closedir(d);
}

static void measure(cli_entry *en, const char *path)
{
    struct stat st;
    int have = lstat(path, &st) == 0;
    en->mtime = have ? (int64_t)st.st_mtime : 0;
    if (have && !S_ISDIR(st.st_mode)) {
        en->bytes = (uint64_t)st.st_size;
        en->files = 1;
        en->shared = S_ISREG(st.st_mode) && st.st_nlink > 1;
        return;
    }
    du(path, 0, &en->bytes, &en->files, &en->shared);
}

void cli_du(const char *path, uint64_t *bytes, uint64_t *files, uint64_t *shared)
{
    cli_entry en;
    memset(&en, 0, sizeof en);
    measure(&en, path);
    *bytes = en.bytes;
    *files = en.files;
    *shared = en.shared;
}

/* ------------------------------------------------------------------ */
/* Listing a save path                                                */
/* ------------------------------------------------------------------ */

static int cmp_entry(const void *a, const void *b)
{
    const cli_entry *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int push_entry(cli_entry **v, size_t *n, size_t *cap, cli_entry *en)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        cli_entry *nv = realloc(*v, nc * sizeof *nv);
        if (!nv)
            return -1;
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = *en;
    return 0;
}

/* The library's tracker: OK, missing (SHS_ENOENT), or malformed (any other
   failure, with the library's reason). */
static void read_tracker(cli_save *s)
{
    int64_t step = -1;
    int rc = shs_checkpoint_read_tracker(&step, s->path);
    if (rc == SHS_OK) {
        s->tracker = CLI_TRACKER_OK;
        s->tracker_step = step;
        return;
    }
    if (rc == SHS_ENOENT) {
        s->tracker = CLI_TRACKER_MISSING;
        return;
    }
    s->tracker = CLI_TRACKER_MALFORMED;
    /* "SAVE_PATH/latest_checkpointed_iteration.txt: tracker must hold ..."
       -> "must hold ..." (the caller names the tracker) */
    char *tp = cli_fmt("%s/%s", s->path, CLI_TRACKER);
    const char *why = tp ? cli_strip_path(shs_last_error(), tp) : shs_last_error();
    if (strncmp(why, "tracker ", 8) == 0)
        why += 8;
    snprintf(s->tracker_why, sizeof s->tracker_why, "%s", why);
    free(tp);
}

/* The committed steps, from the library (ascending, distinct). */
static int list_committed(cli_save *s)
{
    size_t n = 0, cap = 0;
    for (;;) {
        if (shs_checkpoint_list(s->committed, cap, &n, s->path) < 0) {
            cli_err("%s", shs_last_error());
            return CLI_FAIL;
        }
        if (n <= cap)
            break;
        /* (grown between the two calls: ask again) */
        int64_t *v = realloc(s->committed, (n + 8) * sizeof *v);
        if (!v) {
            cli_err("out of memory listing %s", s->path);
            return CLI_FAIL;
        }
        s->committed = v;
        cap = n + 8;
    }
    s->n_committed = n;
    return CLI_OK;
}

int cli_save_has_step(const cli_save *s, int64_t step)
{
    size_t lo = 0, hi = s->n_committed;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->committed[mid] == step)
            return 1;
        if (s->committed[mid] < step)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

int cli_save_scan(cli_save *s, const char *path)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    s->tracker_step = -1;
    if (list_committed(s) != CLI_OK) {
        cli_save_release(s);
        return CLI_FAIL;
    }
    DIR *d = opendir(path);
    if (!d) {
        cli_err("%s: cannot open save path: %s", path, strerror(errno));
        cli_save_release(s);
        return CLI_FAIL;
    }
    size_t cap_s = 0, cap_l = 0, cap_e = 0;
    struct dirent *e;
    int oom = 0;
    while (!oom && (e = readdir(d))) {
        /* the library's naming rules, so that ls and prune see the save
           path as saves, loads and shs_checkpoint_clean do */
        shs_savepath_entry kind = shs_savepath_entry_kind(e->d_name);
        if (kind != SHS_ENTRY_STEP && kind != SHS_ENTRY_LEFTOVER && kind != SHS_ENTRY_EXPORT)
            continue;
        int64_t step = kind == SHS_ENTRY_STEP ? shs_checkpoint_step_of_name(e->d_name) : -1;
        if (kind == SHS_ENTRY_EXPORT) /* "hf-" + a step directory name */
            step = shs_checkpoint_step_of_name(e->d_name + 3);
        cli_entry en;
        memset(&en, 0, sizeof en);
        en.step = step;
        en.name = cli_fmt("%s", e->d_name);
        en.path = cli_fmt("%s/%s", path, e->d_name);
        if (!en.name || !en.path) {
            free(en.name);
            free(en.path);
            oom = 1;
            break;
        }
        struct stat st;
        if (kind == SHS_ENTRY_EXPORT) {
            measure(&en, en.path);
            if (push_entry(&s->exports, &s->n_exports, &cap_e, &en) < 0)
                oom = 1;
        } else if (step >= 0) {
            if (stat(en.path, &st) != 0 || !S_ISDIR(st.st_mode)) {
                /* iteration_5 as a plain file: not a step directory */
                free(en.name);
                free(en.path);
                continue;
            }
            /* Committed: a step the library lists, and this directory of
               it complete (an iteration_N and a step-N of one step are
               separate directories; the library lists the step once). */
            en.committed = cli_save_has_step(s, step) &&
                           (is_regular(en.path, "metadata.json") || is_ms_single(en.path)) &&
                           is_regular(en.path, "common.json");
            measure(&en, en.path);
            if (push_entry(&s->steps, &s->n_steps, &cap_s, &en) < 0)
                oom = 1;
        } else {
            measure(&en, en.path);
            if (push_entry(&s->leftovers, &s->n_leftovers, &cap_l, &en) < 0)
                oom = 1;
        }
        if (oom) {
            free(en.name);
            free(en.path);
        }
    }
    closedir(d);
    if (oom) {
        cli_err("out of memory listing %s", path);
        cli_save_release(s);
        return CLI_FAIL;
    }
    if (s->n_steps > 1)
        qsort(s->steps, s->n_steps, sizeof *s->steps, cmp_entry);
    if (s->n_leftovers > 1)
        qsort(s->leftovers, s->n_leftovers, sizeof *s->leftovers, cmp_entry);
    if (s->n_exports > 1)
        qsort(s->exports, s->n_exports, sizeof *s->exports, cmp_entry);
    read_tracker(s);
    if (s->tracker == CLI_TRACKER_OK && cli_save_has_step(s, s->tracker_step)) {
        for (size_t i = 0; i < s->n_steps; i++)
            if (s->steps[i].step == s->tracker_step && s->steps[i].committed && !s->latest) {
                s->steps[i].latest = 1;
                s->latest = &s->steps[i];
            }
    }
    return CLI_OK;
}

char *cli_save_tracker_problem(const cli_save *s)
{
    switch (s->tracker) {
    case CLI_TRACKER_MISSING:
        return cli_fmt("%s/%s: no tracker (a resume picks the newest committed step)", s->path,
                       CLI_TRACKER);
    case CLI_TRACKER_MALFORMED:
        return cli_fmt("%s/%s: malformed tracker: %s", s->path, CLI_TRACKER, s->tracker_why);
    default:
        if (!s->latest)
            return cli_fmt("%s/%s names step %lld, but there is no complete directory of that "
                           "step (a resume would fail)",
                           s->path, CLI_TRACKER, (long long)s->tracker_step);
        return NULL;
    }
}

void cli_save_release(cli_save *s)
{
    for (size_t i = 0; i < s->n_steps; i++) {
        free(s->steps[i].name);
        free(s->steps[i].path);
        free(s->steps[i].problem);
    }
    for (size_t i = 0; i < s->n_leftovers; i++) {
        free(s->leftovers[i].name);
        free(s->leftovers[i].path);
    }
    for (size_t i = 0; i < s->n_exports; i++) {
        free(s->exports[i].name);
        free(s->exports[i].path);
    }
    free(s->steps);
    free(s->leftovers);
    free(s->exports);
    free(s->committed);
    s->steps = s->leftovers = s->exports = NULL;
    s->committed = NULL;
    s->n_steps = s->n_leftovers = s->n_exports = s->n_committed = 0;
}
