/*
 * savepath.c -- the one reading of a save path (savepath.h): its entries
 * classified, the committed steps and the directory of each, the tracker,
 * and the cleanup that makes the directory match that reading.
 */
#include "source/savepath.h"

#include "common/opts.h"
#include "source/meta_ms.h"
#include "source/stepdir.h"
#include "store/io.h"
#include "store/lock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Whether dir holds a regular `name` (following links, as the loader's
   opens do not: a link there fails the load with its own message); errors
   other than "absent" fail. */
static int holds_regular(const char *dir, const char *name, int *yes)
{
    char *p = shs__path_join(dir, name);
    struct stat st;
    int rc = SHS_OK;
    *yes = 0;
    if (!p)
        return shs__err(SHS_ENOMEM, "out of memory");
    if (shs__io->stat(p, &st) == 0)
        *yes = S_ISREG(st.st_mode);
    else if (errno != ENOENT && errno != ENOTDIR)
        rc = shs__err_errno(errno, "cannot stat", p);
    shs__free(p);
    return rc;
}

int shs__step_dir_complete(const char *dir, int *yes)
{
    int meta = 0, common = 0, rc;
    *yes = 0;
    if ((rc = holds_regular(dir, "metadata.json", &meta)) < 0 ||
        (rc = holds_regular(dir, "common.json", &common)) < 0 || !common)
        return rc;
    if (meta) {
        *yes = 1;
        return SHS_OK;
    }
    /* MindSpore writes no metadata.json for a single card */
    if ((rc = shs__meta_ms_single_probe(dir)) < 0)
        return rc;
    *yes = rc;
    return SHS_OK;
}

/* The step a ".replaced-iteration_%08d-<16 hex>" name parked, or -1; its
   step directory name goes to step_name. */
static int64_t parked_step(const char *name, char *step_name, size_t cap)
{
    size_t pl = strlen(SHS__REPLACED_PREFIX);
    if (strncmp(name, SHS__REPLACED_PREFIX, pl) != 0)
        return -1;
    const char *p = name + pl;
    const char *dash = strrchr(p, '-');
    if (!dash || strlen(dash + 1) != 16 || (size_t)(dash - p) >= cap)
        return -1;
    memcpy(step_name, p, (size_t)(dash - p));
    step_name[dash - p] = '\0';
    return shs__step_of_name(step_name);
}

void shs__sp_release(shs__sp *sp)
{
    for (size_t i = 0; i < sp->n; i++)
        shs__free(sp->e[i].name);
    shs__free(sp->e);
    shs__free(sp->path);
    memset(sp, 0, sizeof *sp);
}

static shs__sp_entry *entry_named(shs__sp *sp, const char *name)
{
    for (size_t i = 0; i < sp->n; i++)
        if (strcmp(sp->e[i].name, name) == 0)
            return &sp->e[i];
    return NULL;
}

/* Kind, step and completeness of entry e, by its name and what it is. */
static int classify(shs__sp *sp, shs__sp_entry *e)
{
    char step_name[64];
    int rc = SHS_OK;
    e->kind = shs_savepath_entry_kind(e->name);
    e->step = -1;
    if (e->kind == SHS_ENTRY_EXPORT)
        e->step = shs__step_of_name(e->name + strlen(SHS__EXPORT_PREFIX));
    int64_t parked = e->kind == SHS_ENTRY_LEFTOVER
                         ? parked_step(e->name, step_name, sizeof step_name)
                         : -1;
    if (e->kind != SHS_ENTRY_STEP && parked < 0)
        return SHS_OK;
    char *full = shs__path_join(sp->path, e->name);
    struct stat st;
    if (!full)
        return shs__err(SHS_ENOMEM, "out of memory listing %s", sp->path);
    if (shs__io->stat(full, &st) != 0) {
        /* removed meanwhile, or a dangling link: nothing of a step */
        if (errno != ENOENT && errno != ENOTDIR)
            rc = shs__err_errno(errno, "cannot stat", full);
        if (e->kind == SHS_ENTRY_STEP)
            e->kind = SHS_ENTRY_OTHER;
    } else if (!S_ISDIR(st.st_mode)) {
        /* iteration_5 as a plain file is no step directory */
        if (e->kind == SHS_ENTRY_STEP)
            e->kind = SHS_ENTRY_OTHER;
    } else {
        e->step = e->kind == SHS_ENTRY_STEP ? shs__step_of_name(e->name) : parked;
        rc = shs__step_dir_complete(full, &e->complete);
    }
    shs__free(full);
    return rc;
}

/* Mark THE directory of each step: iteration_N when complete; else a
   parked copy when iteration_N does not exist at all (cleanup renames it
   back under that name); else step-N (torchtitan's) when complete. */
static void select_dirs(shs__sp *sp)
{
    for (size_t i = 0; i < sp->n; i++) {
        shs__sp_entry *e = &sp->e[i];
        if (e->kind != SHS_ENTRY_STEP || !e->complete || e->name[0] != 'i')
            continue;
        e->selected = 1;
    }
    for (size_t i = 0; i < sp->n; i++) {
        shs__sp_entry *e = &sp->e[i];
        char name[40];
        if (e->kind != SHS_ENTRY_LEFTOVER || e->step < 0 || !e->complete)
            continue;
        shs__step_dir_name(name, sizeof name, e->step);
        if (entry_named(sp, name) || shs__sp_find(sp, e->step))
            continue;
        e->kind = SHS_ENTRY_STEP;
        e->parked = 1;
        e->selected = 1;
    }
    for (size_t i = 0; i < sp->n; i++) {
        shs__sp_entry *e = &sp->e[i];
        if (e->kind == SHS_ENTRY_STEP && e->complete && e->name[0] == 's' &&
            !shs__sp_find(sp, e->step))
            e->selected = 1;
    }
    /* a parked copy that is not its step's directory is plain garbage */
    for (size_t i = 0; i < sp->n; i++)
        if (sp->e[i].kind == SHS_ENTRY_LEFTOVER)
            sp->e[i].step = -1;
}

int shs__sp_scan(shs__sp *sp, const char *save_path, int with_tracker)
{
    char **names = NULL;
    size_t n = 0;
    memset(sp, 0, sizeof *sp);
    sp->tracker_step = -1;
    int rc = shs__io_list_dir(&names, &n, save_path);
    if (rc < 0)
        return rc;
    if (!(sp->path = shs__strdup(save_path)) || !(sp->e = shs__calloc(n + 1, sizeof *sp->e))) {
        rc = shs__err(SHS_ENOMEM, "out of memory listing %s", save_path);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        sp->e[i].name = names[i];
        names[i] = NULL;
        sp->n++;
    }
    for (size_t i = 0; i < sp->n && rc == SHS_OK; i++)
        rc = classify(sp, &sp->e[i]);
    if (rc < 0)
        goto done;
    select_dirs(sp);
    sp->tracker_rc = SHS_ENOENT;
    if (!with_tracker)
        goto done;
    sp->tracker_rc = shs__read_tracker(&sp->tracker_step, save_path);
    if (sp->tracker_rc == SHS_ENOMEM) {
        rc = SHS_ENOMEM;
        goto done;
    }
    if (sp->tracker_rc < 0)
        snprintf(sp->tracker_msg, sizeof sp->tracker_msg, "%s", shs_last_error());
    shs__err_clear();
    if (sp->tracker_rc == SHS_OK) {
        for (size_t i = 0; i < sp->n; i++)
            if (sp->e[i].selected && sp->e[i].step == sp->tracker_step)
                sp->e[i].latest = 1;
    }
done:
    shs__io_names_free(names, n);
    if (rc < 0)
        shs__sp_release(sp);
    return rc;
}

const shs__sp_entry *shs__sp_find(const shs__sp *sp, int64_t step)
{
    for (size_t i = 0; i < sp->n; i++)
        if (sp->e[i].selected && sp->e[i].step == step)
            return &sp->e[i];
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

int shs__sp_steps(const shs__sp *sp, int64_t **out, size_t *n)
{
    int64_t *v = shs__calloc(sp->n + 1, sizeof *v);
    size_t k = 0;
    *out = NULL;
    *n = 0;
    if (!v)
        return shs__err(SHS_ENOMEM, "out of memory listing %s", sp->path);
    for (size_t i = 0; i < sp->n; i++)
        if (sp->e[i].selected)
            v[k++] = sp->e[i].step;
    qsort(v, k, sizeof *v, cmp_i64);
    *out = v;
    *n = k;
    return SHS_OK;
}

int shs__list_steps(int64_t **out, size_t *n, const char *save_path)
{
    shs__sp sp;
    *out = NULL;
    *n = 0;
    int rc = shs__sp_scan(&sp, save_path, 0);
    if (rc < 0)
        return rc;
    rc = shs__sp_steps(&sp, out, n);
    shs__sp_release(&sp);
    return rc;
}

int shs__step_dir_find(char **out, const char *save_path, int64_t step)
{
    shs__sp sp;
    *out = NULL;
    int rc = shs__sp_scan(&sp, save_path, 0);
    if (rc < 0)
        return rc;
    const shs__sp_entry *e = shs__sp_find(&sp, step);
    if (!e)
        rc = shs__err(SHS_ENOCHECKPOINT, "%s: no complete checkpoint of step %lld", save_path,
                      (long long)step);
    else if (!(*out = shs__path_join(save_path, e->name)))
        rc = shs__err(SHS_ENOMEM, "out of memory");
    shs__sp_release(&sp);
    return rc;
}

int shs__remove_step(const char *save_path, int64_t step)
{
    shs__sp sp;
    int rc = shs__sp_scan(&sp, save_path, 0);
    if (rc < 0)
        return rc;
    const shs__sp_entry *e = shs__sp_find(&sp, step);
    if (e)
        rc = shs__remove_entry(save_path, e->name);
    shs__sp_release(&sp);
    return rc;
}

/* Put a parked step back under its name (savepath.h). */
static int restore(const char *save_path, const shs__sp_entry *e)
{
    char name[40];
    shs__step_dir_name(name, sizeof name, e->step);
    char *from = shs__path_join(save_path, e->name), *to = shs__path_join(save_path, name);
    int rc = SHS_OK;
    if (!from || !to)
        rc = shs__err(SHS_ENOMEM, "out of memory cleaning %s", save_path);
    else if (shs__io->rename(from, to) != 0)
        rc = shs__err_errno(errno, "cannot restore the parked step", from);
    else
        rc = shs__io_fsync_dir(save_path);
    shs__free(from);
    shs__free(to);
    return rc;
}

int shs__clean_leftovers(const char *save_path, size_t *restored, size_t *removed)
{
    shs__sp sp;
    size_t nr = 0, nd = 0;
    int rc = shs__sp_scan(&sp, save_path, 0);
    if (rc == SHS_ENOENT) {
        shs__err_clear();
        rc = SHS_OK;
        goto out;
    }
    if (rc < 0)
        goto out;
    /* restores first: the .tmp- of the interrupted re-save is deleted only
       once the step it was replacing is back under its name */
    for (size_t i = 0; i < sp.n; i++) {
        if (!sp.e[i].parked)
            continue;
        /* unknown state of that step: delete nothing */
        if ((rc = restore(save_path, &sp.e[i])) < 0)
            goto done;
        nr++;
    }
    for (size_t i = 0; i < sp.n; i++) {
        if (sp.e[i].kind != SHS_ENTRY_LEFTOVER)
            continue;
        char *p = shs__path_join(save_path, sp.e[i].name);
        int r = p ? shs__discard(save_path, p) : shs__err(SHS_ENOMEM, "out of memory");
        shs__free(p);
        if (r == SHS_OK)
            nd++;
        else if (rc == SHS_OK)
            rc = r;
    }
done:
    shs__sp_release(&sp);
out:
    if (restored)
        *restored = nr;
    if (removed)
        *removed = nd;
    return rc;
}

/* ---- public: shs_savepath ------------------------------------------ */

struct shs_savepath {
    shs__sp sp;
    shs_savepath_item *items;
};

int shs_savepath_open(shs_savepath **out, const char *save_path)
{
    if (!out || !save_path || !*save_path)
        return shs__err(SHS_EINVAL, "shs_savepath_open: NULL or empty argument");
    *out = NULL;
    shs_savepath *s = shs__calloc(1, sizeof *s);
    if (!s)
        return shs__err(SHS_ENOMEM, "out of memory");
    int rc = shs__sp_scan(&s->sp, save_path, 1);
    if (rc == SHS_OK && !(s->items = shs__calloc(s->sp.n + 1, sizeof *s->items)))
        rc = shs__err(SHS_ENOMEM, "out of memory");
    if (rc < 0) {
        shs_savepath_free(s);
        return rc;
    }
    for (size_t i = 0; i < s->sp.n; i++) {
        const shs__sp_entry *e = &s->sp.e[i];
        s->items[i] = (shs_savepath_item){ e->name,     e->kind,   e->step,  e->complete,
                                           e->selected, e->parked, e->latest };
    }
    *out = s;
    return SHS_OK;
}

size_t shs_savepath_count(const shs_savepath *s)
{
    return s ? s->sp.n : 0;
}

const shs_savepath_item *shs_savepath_item_at(const shs_savepath *s, size_t i)
{
    return s && i < s->sp.n ? &s->items[i] : NULL;
}

int shs_savepath_tracker(int64_t *step, const shs_savepath *s)
{
    if (!step || !s)
        return shs__err(SHS_EINVAL, "shs_savepath_tracker: NULL argument");
    *step = s->sp.tracker_step;
    if (s->sp.tracker_rc < 0)
        return shs__err(s->sp.tracker_rc, "%s", s->sp.tracker_msg);
    return SHS_OK;
}

void shs_savepath_free(shs_savepath *s)
{
    if (!s)
        return;
    shs__sp_release(&s->sp);
    shs__free(s->items);
    shs__free(s);
}
