/*
 * stepdir.c -- names in a save path: step directories, the tracker,
 * leftovers of failed saves; listing, removing, cleaning.
 */
#include "source/stepdir.h"

#include "store/io.h"
#include "store/lock.h"

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

static int has_prefix(const char *name, const char *prefix)
{
    return strncmp(name, prefix, strlen(prefix)) == 0;
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

int shs__remove_entry(const char *save_path, const char *name)
{
    char suffix[17], tname[320];
    shs__random_suffix(suffix);
    snprintf(tname, sizeof tname, SHS__TRASH_PREFIX "%.255s-%s", name, suffix);
    char *dir = shs__path_join(save_path, name), *trash = shs__path_join(save_path, tname);
    int rc = SHS_OK;
    struct stat st;
    if (!dir || !trash) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    if (shs__io->lstat(dir, &st) != 0) {
        if (errno != ENOENT) /* else: nothing to remove */
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
    if (shs__io->rename(dir, trash) != 0) {
        if (errno != ENOENT) /* else: removed meanwhile */
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
