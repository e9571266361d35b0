/*
 * ckpt.c -- save paths and step directories for `ls`, `prune` and
 * `verify`: what a path is (shs_path_kind), the entries of a save path as
 * the library reads them (shs_savepath_*: committed steps, the directory
 * of each, parked copies, leftovers, the tracker), and their sizes, which
 * are presentation only.
 */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


/* What the library says `path` is; SHS_SOURCE_NONE when it cannot look. */
static shs_source_kind kind_of(const char *path)
{
    shs_source_kind k = SHS_SOURCE_NONE;
    return shs_path_kind(&k, path) == SHS_OK ? k : SHS_SOURCE_NONE;
}

int cli_is_step_dir(const char *path)
{
    shs_source_kind k = kind_of(path);
    return k == SHS_SOURCE_STEP || k == SHS_SOURCE_MS_STEP || k == SHS_SOURCE_MS_SINGLE ||
           k == SHS_SOURCE_DAMAGED_STEP;
}

int cli_is_save_path(const char *path)
{
    return kind_of(path) == SHS_SOURCE_SAVE_PATH;
}

char *cli_step_problem(const char *dir)
{
    shs_checkpoint *ck = NULL;
    char *why = NULL;
    if (shs_checkpoint_open(&ck, dir, NULL) != SHS_OK || shs_checkpoint_check_files(ck) != SHS_OK)
        why = cli_fmt("%s", shs_last_error());
    shs_checkpoint_free(ck);
    return why;
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
static void read_tracker(cli_save *s, const shs_savepath *sp)
{
    int64_t step = -1;
    int rc = shs_savepath_tracker(&step, sp);
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
    /* "SAVE_PATH/latest_checkpointed_iteration.txt: not a decimal ..."
       -> "not a decimal ..." (the caller names the tracker) */
    char *tp = cli_fmt("%s/%s", s->path, CLI_TRACKER);
    const char *why = tp ? cli_strip_path(shs_last_error(), tp) : shs_last_error();
    snprintf(s->tracker_why, sizeof s->tracker_why, "%s", why);
    free(tp);
}

int cli_save_has_step(const cli_save *s, int64_t step)
{
    for (size_t i = 0; i < s->n_steps; i++)
        if (s->steps[i].committed && s->steps[i].step == step)
            return 1;
    return 0;
}

int cli_save_scan(cli_save *s, const char *path)
{
    shs_savepath *sp = NULL;
    memset(s, 0, sizeof *s);
    s->path = path;
    s->tracker_step = -1;
    if (shs_savepath_open(&sp, path) != SHS_OK) {
        cli_err("%s", shs_last_error());
        return CLI_FAIL;
    }
    size_t cap_s = 0, cap_l = 0, cap_e = 0;
    int oom = 0;
    for (size_t i = 0; !oom && i < shs_savepath_count(sp); i++) {
        /* the library's reading, so that ls and prune see the save path as
           saves, loads and shs_checkpoint_clean do */
        const shs_savepath_item *it = shs_savepath_item_at(sp, i);
        if (it->kind != SHS_ENTRY_STEP && it->kind != SHS_ENTRY_LEFTOVER &&
            it->kind != SHS_ENTRY_EXPORT)
            continue;
        cli_entry en;
        memset(&en, 0, sizeof en);
        en.step = it->step;
        en.committed = it->kind == SHS_ENTRY_STEP && it->complete;
        en.parked = it->parked;
        en.latest = it->latest;
        en.name = cli_fmt("%s", it->name);
        en.path = cli_fmt("%s/%s", path, it->name);
        if (!en.name || !en.path) {
            free(en.name);
            free(en.path);
            oom = 1;
            break;
        }
        measure(&en, en.path);
        cli_entry **v = it->kind == SHS_ENTRY_STEP     ? &s->steps
                        : it->kind == SHS_ENTRY_EXPORT ? &s->exports
                                                       : &s->leftovers;
        size_t *n = it->kind == SHS_ENTRY_STEP     ? &s->n_steps
                    : it->kind == SHS_ENTRY_EXPORT ? &s->n_exports
                                                   : &s->n_leftovers;
        size_t *cap = it->kind == SHS_ENTRY_STEP     ? &cap_s
                      : it->kind == SHS_ENTRY_EXPORT ? &cap_e
                                                     : &cap_l;
        if (push_entry(v, n, cap, &en) < 0) {
            free(en.name);
            free(en.path);
            oom = 1;
        }
    }
    if (!oom)
        read_tracker(s, sp);
    shs_savepath_free(sp);
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
    for (size_t i = 0; i < s->n_steps; i++)
        if (s->steps[i].latest)
            s->latest = &s->steps[i];
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
    s->steps = s->leftovers = s->exports = NULL;
    s->n_steps = s->n_leftovers = s->n_exports = 0;
}
