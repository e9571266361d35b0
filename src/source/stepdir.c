/*
 * stepdir.c -- names in a save path: step directories, the tracker,
 * leftovers of failed saves; listing, removing, cleaning.
 */
#include "source/stepdir.h"

#include "store/io.h"
#include "store/lock.h"
#include "source/meta_ms.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int shs__step_dir_name(char *buf, size_t cap, int64_t step)
{
    return snprintf(buf, cap, "iteration_%08lld", (long long)step);
}

int shs__step_dir_alt_name(char *buf, size_t cap, int64_t step)
{
    return snprintf(buf, cap, "step-%lld", (long long)step);
}

int64_t shs__step_of_name(const char *name)
{
    const char *p;
    if (strncmp(name, "iteration_", 10) == 0)
        p = name + 10;
    else if (strncmp(name, "step-", 5) == 0)
        p = name + 5;
    else
        return -1;
    if (!*p || strlen(p) > 18)
        return -1;
    int64_t v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
    }
    /* only the names a save writes (and the loader looks up): a name of
       other zero padding, "iteration_4" or "step-04", is no step directory */
    char canon[40];
    if (name[0] == 'i')
        shs__step_dir_name(canon, sizeof canon, v);
    else
        shs__step_dir_alt_name(canon, sizeof canon, v);
    return strcmp(canon, name) == 0 ? v : -1;
}

/* 1: `path` exists; 0: it does not (ENOENT, or ENOTDIR below a file);
   an error with the errno of stat otherwise. */
static int exists(const char *path, int *yes, struct stat *st)
{
    struct stat local;
    if (shs__io->stat(path, st ? st : &local) == 0) {
        *yes = 1;
        return SHS_OK;
    }
    *yes = 0;
    if (errno == ENOENT || errno == ENOTDIR) /* ENOTDIR: a file is no step dir */
        return SHS_OK;
    return shs__err_errno(errno, "cannot stat", path);
}

/* Whether dir holds a regular `name`; errors other than "absent" fail. */
static int holds_regular(const char *dir, const char *name, int *yes)
{
    char *p = shs__path_join(dir, name);
    struct stat st;
    int rc;
    if (!p)
        return shs__err(SHS_ENOMEM, "out of memory");
    rc = exists(p, yes, &st);
    if (rc == SHS_OK && *yes)
        *yes = S_ISREG(st.st_mode);
    shs__free(p);
    return rc;
}

/* Committed: metadata.json AND common.json are regular files (or, for
   a single-card MindSpore save, which has no metadata.json, common.json
   and its files, meta_ms.h). */
static int step_dir_is_complete(const char *dir, int *yes)
{
    int a = 0, b = 0, rc;
    *yes = 0;
    if ((rc = holds_regular(dir, "metadata.json", &a)) < 0)
        return rc;
    if (!a) {
        if ((rc = holds_regular(dir, "common.json", &b)) < 0 || !b)
            return rc;
        if ((rc = shs__meta_ms_single_probe(dir)) < 0)
            return rc;
        *yes = rc;
        return SHS_OK;
    }
    if ((rc = holds_regular(dir, "common.json", &b)) < 0)
        return rc;
    *yes = b;
    return SHS_OK;
}

int shs__step_dir_has_metadata(const char *path)
{
    char *mp = shs__path_join(path, "metadata.json");
    struct stat st;
    int r;
    if (!mp)
        r = shs__err(SHS_ENOMEM, "out of memory");
    else if (shs__io->lstat(mp, &st) == 0)
        r = 1;
    else if (errno == ENOENT || errno == ENOTDIR)
        r = 0;
    else
        r = shs__err_errno(errno, "cannot stat", mp);
    shs__free(mp);
    return r;
}

/* The last component of a path, ignoring trailing slashes, copied into
   buf (cut to cap: a name longer than any step name is no step name). */
static void base_name(char *buf, size_t cap, const char *path)
{
    size_t end = strlen(path);
    while (end > 1 && path[end - 1] == '/')
        end--;
    size_t start = end;
    while (start > 0 && path[start - 1] != '/')
        start--;
    size_t n = end - start < cap - 1 ? end - start : cap - 1;
    memcpy(buf, path + start, n);
    buf[n] = '\0';
}

int shs__step_dir_probe(const char *dir, int *is_step)
{
    int meta = 0, common = 0, rc;
    *is_step = 0;
    char name[64];
    base_name(name, sizeof name, dir);
    if ((rc = holds_regular(dir, "metadata.json", &meta)) < 0)
        return rc;
    if (meta) {
        *is_step = 1;
        return SHS_OK;
    }
    /* metadata.json that is not a regular file still makes a step dir */
    char *mp = shs__path_join(dir, "metadata.json");
    if (!mp)
        return shs__err(SHS_ENOMEM, "out of memory");
    rc = exists(mp, &meta, NULL);
    shs__free(mp);
    if (rc < 0)
        return rc;
    if (meta) {
        *is_step = 1;
        return SHS_OK;
    }
    char *cp = shs__path_join(dir, "common.json");
    if (!cp)
        return shs__err(SHS_ENOMEM, "out of memory");
    rc = exists(cp, &common, NULL);
    shs__free(cp);
    if (rc < 0)
        return rc;
    if (common || shs__step_of_name(name) >= 0) {
        *is_step = 1;
        if ((rc = shs__meta_ms_single_probe(dir)) != 0)
            return rc < 0 ? rc : SHS_OK; /* MindSpore, single card */
        /* never read as a plain folder of safetensors files: that would
           load whatever files a crash or a deletion left, silently */
        return shs__err(SHS_ECORRUPT,
                        "%s: a step directory (%s) without metadata.json: an incomplete or "
                        "damaged checkpoint",
                        dir, common ? "it holds common.json" : "by its name");
    }
    return SHS_OK;
}

static int has_prefix(const char *name, const char *prefix)
{
    return strncmp(name, prefix, strlen(prefix)) == 0;
}

int shs__step_dir_find(char **out, const char *save_path, int64_t step)
{
    int rc = SHS_OK;
    char *dir = shs__step_dir_path(save_path, step);
    if (dir && (rc = shs__step_dir_has_metadata(dir)) == 0 && shs__entry_exists(dir) == 1)
        rc = shs__meta_ms_single_probe(dir); /* MindSpore, single card */
    if (dir && rc <= 0) {
        shs__free(dir);
        dir = NULL;
        if (rc < 0)
            return rc;
        char alt[40];
        shs__step_dir_alt_name(alt, sizeof alt, step);
        dir = shs__path_join(save_path, alt);
    }
    *out = dir;
    return dir ? SHS_OK : shs__err(SHS_ENOMEM, "out of memory");
}

int shs__export_dir_name(char *buf, size_t cap, int64_t step)
{
    return snprintf(buf, cap, SHS__EXPORT_PREFIX "iteration_%08lld", (long long)step);
}

/* "hf-<step dir name>" alone: 1; followed by ".tmp-", ".part-" or ".old-"
   (shs_merge's temporaries of that export): 2; anything else: 0. */
static int export_name_kind(const char *name)
{
    if (!has_prefix(name, SHS__EXPORT_PREFIX))
        return 0;
    const char *p = name + strlen(SHS__EXPORT_PREFIX);
    const char *dot = strchr(p, '.');
    size_t len = dot ? (size_t)(dot - p) : strlen(p);
    char step[40];
    if (len >= sizeof step)
        return 0;
    memcpy(step, p, len);
    step[len] = '\0';
    if (shs__step_of_name(step) < 0)
        return 0;
    if (!dot)
        return 1;
    return has_prefix(dot, ".tmp-") || has_prefix(dot, ".part-") || has_prefix(dot, ".old-") ? 2
                                                                                             : 0;
}

int shs__is_leftover_name(const char *name)
{
    return has_prefix(name, SHS__TMP_PREFIX) || has_prefix(name, SHS__TRASH_PREFIX) ||
           has_prefix(name, SHS__REPLACED_PREFIX) || has_prefix(name, SHS__TRACKER ".tmp.") ||
           export_name_kind(name) == 2;
}

shs_savepath_entry shs_savepath_entry_kind(const char *name)
{
    if (!name)
        return SHS_ENTRY_OTHER;
    if (shs__step_of_name(name) >= 0)
        return SHS_ENTRY_STEP;
    if (shs__is_leftover_name(name))
        return SHS_ENTRY_LEFTOVER;
    if (strcmp(name, SHS__TRACKER) == 0)
        return SHS_ENTRY_TRACKER;
    if (shs__is_lock_name(name))
        return SHS_ENTRY_LOCK;
    if (export_name_kind(name) == 1)
        return SHS_ENTRY_EXPORT;
    return SHS_ENTRY_OTHER;
}

int shs_checkpoint_step_dir_name(char *buf, size_t cap, int64_t step, int torchtitan)
{
    if (!buf || step < 0)
        return -1;
    return torchtitan ? shs__step_dir_alt_name(buf, cap, step) : shs__step_dir_name(buf, cap, step);
}

const char *shs_file_name_problem(const char *name)
{
    if (!name || !*name)
        return "is empty";
    if (name[0] == '/')
        return "is an absolute path";
    if (!strncmp(name, "../", 3) || !strcmp(name, ".."))
        return "escapes the folder ('..')";
    if (strchr(name, '/'))
        return "is a path, not a file name in the same folder";
    if (strchr(name, '\\'))
        return "contains a backslash";
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        if (*p < 0x20 || *p == 0x7F)
            return "contains a control character";
    if (name[0] == '.')
        return "starts with '.' (a hidden name)";
    if (strlen(name) > 255)
        return "is longer than 255 bytes";
    return NULL;
}

int shs__is_safetensors_name(const char *name)
{
    size_t a = strlen(name), b = strlen(".safetensors");
    return a >= b && strcmp(name + a - b, ".safetensors") == 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

int shs__list_steps(int64_t **out, size_t *n, const char *save_path)
{
    *out = NULL;
    *n = 0;
    char **names = NULL;
    size_t nn = 0;
    int64_t *v = NULL;
    size_t cnt = 0;
    int rc = shs__io_list_dir(&names, &nn, save_path);
    if (rc < 0)
        return rc;
    v = shs__calloc(nn + 1, sizeof *v);
    if (!v) {
        rc = shs__err(SHS_ENOMEM, "out of memory listing %s", save_path);
        goto done;
    }
    for (size_t i = 0; i < nn; i++) {
        int64_t s = shs__step_of_name(names[i]);
        if (s < 0)
            continue;
        char *full = shs__path_join(save_path, names[i]);
        if (!full) {
            rc = shs__err(SHS_ENOMEM, "out of memory listing %s", save_path);
            goto done;
        }
        int ok = 0;
        rc = step_dir_is_complete(full, &ok);
        shs__free(full);
        if (rc < 0)
            goto done;
        if (ok)
            v[cnt++] = s;
    }
    if (cnt > 1)
        qsort(v, cnt, sizeof *v, cmp_i64);
    /* iteration_N and step-N of the same N count once */
    size_t w = 0;
    for (size_t i = 0; i < cnt; i++)
        if (w == 0 || v[w - 1] != v[i])
            v[w++] = v[i];
    *out = v;
    *n = w;
    v = NULL;
    rc = SHS_OK;
done:
    shs__free(v);
    shs__io_names_free(names, nn);
    return rc;
}

char *shs__tracker_path(const char *save_path)
{
    return shs__path_join(save_path, SHS__TRACKER);
}

int shs__read_tracker(int64_t *step, const char *save_path)
{
    char *path = shs__tracker_path(save_path);
    if (!path)
        return shs__err(SHS_ENOMEM, "out of memory");
    char *buf = NULL;
    size_t len = 0;
    struct stat st;
    int rc;
    /* only "does not exist" means "no tracker": any other failure to
       read it must stop a resume, or the job would start over */
    if (shs__io->lstat(path, &st) != 0) {
        rc = errno == ENOENT ? shs__err(SHS_ENOENT, "%s: no tracker", save_path)
                             : shs__err_errno(errno, "cannot read the tracker", path);
        goto done;
    }
    if ((rc = shs__read_file_nofollow(&buf, &len, path, 64)) < 0)
        goto done;
    /* a decimal step, optionally followed by one newline */
    size_t i = 0;
    int64_t v = 0;
    for (; i < len && buf[i] >= '0' && buf[i] <= '9' && i < 18; i++)
        v = v * 10 + (buf[i] - '0');
    if (i == 0 || !(i == len || (i + 1 == len && buf[i] == '\n'))) {
        /* its length only: the tracker is anyone's to write, and its bytes
           may be what a symlink or a mistake put there */
        rc = shs__err(SHS_ECORRUPT,
                      "%s: not a decimal step (%zu bytes); the tracker must hold "
                      "the step number",
                      path, len);
        goto done;
    }
    *step = v;
done:
    shs__free(buf);
    shs__free(path);
    return rc;
}

int shs__write_tracker(const char *tracker, int64_t step, int do_fsync)
{
    char num[32];
    int nlen = snprintf(num, sizeof num, "%lld", (long long)step);
    return shs__write_file_atomic(tracker, num, (size_t)nlen, do_fsync);
}

char *shs__step_dir_path(const char *save_path, int64_t step)
{
    char name[40];
    shs__step_dir_name(name, sizeof name, step);
    return shs__path_join(save_path, name);
}

int shs__remove_step(const char *save_path, int64_t step)
{
    char *dir = shs__step_dir_path(save_path, step);
    char suffix[17], name[80], base[40];
    shs__random_suffix(suffix);
    shs__step_dir_name(base, sizeof base, step);
    snprintf(name, sizeof name, SHS__TRASH_PREFIX "%s-%s", base, suffix);
    char *trash = shs__path_join(save_path, name);
    int rc = SHS_OK;
    if (!dir || !trash) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    struct stat st;
    int r = shs__io->lstat(dir, &st);
    if (r != 0 && errno == ENOENT) {
        /* a torchtitan-style step-N directory */
        char alt[40];
        shs__step_dir_alt_name(alt, sizeof alt, step);
        shs__free(dir);
        if (!(dir = shs__path_join(save_path, alt))) {
            rc = shs__err(SHS_ENOMEM, "out of memory");
            goto done;
        }
        r = shs__io->lstat(dir, &st);
        if (r != 0 && errno == ENOENT)
            goto done; /* nothing to remove */
    }
    if (r != 0) {
        rc = shs__err_errno(errno, "cannot remove", dir);
        goto done;
    }
    if (S_ISLNK(st.st_mode)) {
        rc = shs__err(SHS_EINVAL,
                      "%s is a symbolic link: not removed (what it points to is "
                      "outside the save path)",
                      dir);
        goto done;
    }
    /* renamed away first: a crash mid-delete leaves only a .trash- entry,
       never a half-deleted directory that looks like a checkpoint */
    r = shs__io->rename(dir, trash);
    if (r != 0 && errno == ENOENT)
        goto done; /* removed meanwhile */
    if (r != 0) {
        rc = shs__err_errno(errno, "cannot remove", dir);
        goto done;
    }
    rc = shs__rmtree(trash);
done:
    shs__free(dir);
    shs__free(trash);
    return rc;
}

int shs__entry_exists(const char *path)
{
    struct stat st;
    if (shs__io->lstat(path, &st) == 0)
        return 1;
    return errno == ENOENT ? 0 : shs__err_errno(errno, "cannot stat", path);
}

char *shs__replaced_path(const char *save_path, int64_t step)
{
    char suffix[17], base[40], name[96];
    shs__random_suffix(suffix);
    shs__step_dir_name(base, sizeof base, step);
    snprintf(name, sizeof name, SHS__REPLACED_PREFIX "%s-%s", base, suffix);
    return shs__path_join(save_path, name);
}

int shs__discard(const char *save_path, const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (has_prefix(base, SHS__TRASH_PREFIX))
        return shs__rmtree(path);
    char suffix[17], name[64];
    shs__random_suffix(suffix);
    snprintf(name, sizeof name, SHS__TRASH_PREFIX "discarded-%s", suffix);
    char *trash = shs__path_join(save_path, name);
    int rc;
    if (!trash)
        return shs__err(SHS_ENOMEM, "out of memory removing %s", path);
    if (shs__io->rename(path, trash) != 0)
        rc = errno == ENOENT ? SHS_OK : shs__err_errno(errno, "cannot remove", path);
    else
        rc = shs__rmtree(trash);
    shs__free(trash);
    return rc;
}

/* The step a ".replaced-iteration_%08d-<16 hex>" name displaced, or -1. */
static int64_t replaced_step(const char *name, char *step_name, size_t cap)
{
    if (!has_prefix(name, SHS__REPLACED_PREFIX))
        return -1;
    const char *p = name + strlen(SHS__REPLACED_PREFIX);
    const char *dash = strrchr(p, '-');
    if (!dash || strlen(dash + 1) != 16 || (size_t)(dash - p) >= cap)
        return -1;
    memcpy(step_name, p, (size_t)(dash - p));
    step_name[dash - p] = '\0';
    return shs__step_of_name(step_name);
}

/* Put a displaced step back when its name is free.  1: restored, 0: left
   as garbage. */
static int restore_replaced(const char *save_path, const char *name, int do_fsync)
{
    char step_name[64];
    char *from = NULL, *to = NULL;
    int rc = 0;
    if (replaced_step(name, step_name, sizeof step_name) < 0)
        return 0;
    from = shs__path_join(save_path, name);
    to = shs__path_join(save_path, step_name);
    if (!from || !to) {
        rc = shs__err(SHS_ENOMEM, "out of memory cleaning %s", save_path);
        goto done;
    }
    if ((rc = shs__entry_exists(to)) != 0) {
        rc = rc > 0 ? 0 : rc; /* present (the newer copy): garbage; or an error */
        goto done;
    }
    int complete = 0;
    if ((rc = step_dir_is_complete(from, &complete)) < 0 || !complete)
        goto done; /* incomplete: garbage; or an error */
    rc = 0;
    if (shs__io->rename(from, to) != 0) {
        rc = shs__err_errno(errno, "cannot restore displaced step", from);
        goto done;
    }
    rc = do_fsync ? shs__io_fsync_dir(save_path) : SHS_OK;
    if (rc == SHS_OK)
        rc = 1;
done:
    shs__free(from);
    shs__free(to);
    return rc;
}

int shs__clean_leftovers(const char *save_path)
{
    char **names = NULL;
    size_t n = 0;
    int rc = SHS_OK;
    if (shs__io->list_dir(save_path, &names, &n) != 0)
        return errno == ENOENT ? SHS_OK : shs__err_errno(errno, "cannot list", save_path);
    uint8_t *keep = shs__calloc(n + 1, 1);
    if (!keep) {
        rc = shs__err(SHS_ENOMEM, "out of memory cleaning %s", save_path);
        goto done;
    }
    /* restores first: the .tmp- of the interrupted re-save is deleted only
       once the step it was replacing is back under its name */
    for (size_t i = 0; i < n; i++) {
        int r = restore_replaced(save_path, names[i], 1);
        if (r < 0) {
            /* unknown state of that step: delete nothing */
            rc = r;
            goto done;
        }
        keep[i] = (uint8_t)r;
    }
    for (size_t i = 0; i < n; i++) {
        if (keep[i] || !shs__is_leftover_name(names[i]))
            continue;
        char *p = shs__path_join(save_path, names[i]);
        int r = p ? shs__discard(save_path, p) : shs__err(SHS_ENOMEM, "out of memory");
        shs__free(p);
        if (r < 0 && rc == SHS_OK)
            rc = r;
    }
done:
    shs__free(keep);
    shs__io_names_free(names, n);
    return rc;
}
