/*
 * source.c -- what is at a path, and how to read it (source.h).
 */
#include "source/source.h"

#include "source/meta_ms.h"
#include "source/savepath.h"
#include "source/stepdir.h"
#include "store/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define HF_SINGLE "model.safetensors"

static const char *const k_kind_name[] = {
    [SHS_SOURCE_NONE] = "path that does not exist",
    [SHS_SOURCE_SAVE_PATH] = "save path holding checkpoints",
    [SHS_SOURCE_STEP] = "checkpoint step directory",
    [SHS_SOURCE_MS_STEP] = "MindSpore checkpoint step directory",
    [SHS_SOURCE_MS_SINGLE] = "single-card MindSpore checkpoint",
    [SHS_SOURCE_FOLDER] = "folder of safetensors files",
    [SHS_SOURCE_HF_INDEX] = "Hugging Face index",
    [SHS_SOURCE_FILE] = "safetensors file",
    [SHS_SOURCE_DAMAGED_STEP] = "damaged checkpoint step directory (no metadata.json)",
    [SHS_SOURCE_STEP_PART] = "file of a checkpoint, not a checkpoint by itself",
    [SHS_SOURCE_OTHER] = "file that is not a checkpoint",
    [SHS_SOURCE_OTHER_FOLDER] = "folder holding no checkpoint",
};

const char *shs_source_kind_name(shs_source_kind kind)
{
    return (unsigned)kind < sizeof k_kind_name / sizeof *k_kind_name ? k_kind_name[kind] : NULL;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The last component of a path, ignoring trailing slashes, into buf (cut
   to cap: a name longer than any step name is no step name). */
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

/* *yes: <dir>/<name> exists in any form (lstat); errors other than
   "absent" fail. */
static int holds(const char *dir, const char *name, int *yes, int *regular)
{
    char *p = shs__path_join(dir, name);
    struct stat st;
    int rc = SHS_OK;
    *yes = 0;
    if (regular)
        *regular = 0;
    if (!p)
        return shs__err(SHS_ENOMEM, "out of memory");
    if (shs__io->lstat(p, &st) == 0) {
        *yes = 1;
        if (regular)
            *regular = S_ISREG(st.st_mode);
    } else if (errno != ENOENT && errno != ENOTDIR) {
        rc = shs__err_errno(errno, "cannot stat", p);
    }
    shs__free(p);
    return rc;
}

/* A regular file: safetensors by its name or its first bytes (a length
   the file can hold, then '{'), a checkpoint's part by its name, an
   index by ".json". */
static int probe_file(shs_source_kind *kind, const char *path, uint64_t size)
{
    char base[256];
    base_name(base, sizeof base, path);
    if (!strcmp(base, "metadata.json") || !strcmp(base, "common.json") ||
        !strcmp(base, SHS__TRACKER)) {
        *kind = SHS_SOURCE_STEP_PART;
        return SHS_OK;
    }
    if (ends_with(base, ".safetensors")) {
        *kind = SHS_SOURCE_FILE;
        return SHS_OK;
    }
    if (ends_with(base, ".json")) {
        *kind = SHS_SOURCE_HF_INDEX;
        return SHS_OK;
    }
    *kind = SHS_SOURCE_OTHER;
    if (size < 10)
        return SHS_OK;
    unsigned char head[9];
    int fd, rc;
    if ((rc = shs__io_open(&fd, path, O_RDONLY | O_CLOEXEC, 0)) < 0)
        return rc;
    rc = shs__io_pread_full(fd, head, sizeof head, 0, path);
    shs__io->close(fd);
    if (rc < 0)
        return rc;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | head[i];
    if (n >= 2 && n <= size - 8 && head[8] == '{')
        *kind = SHS_SOURCE_FILE;
    return SHS_OK;
}

/* A directory: a step directory by its metadata.json (read to tell ours
   from MindSpore's), its name or its common.json; else a save path by
   its entries; else a folder by its index or its safetensors files. */
static int probe_dir(shs_source_kind *kind, const char *dir)
{
    int meta, regular, common, rc;
    char base[64];
    if ((rc = holds(dir, "metadata.json", &meta, &regular)) < 0)
        return rc;
    if (meta) {
        int ms = 0;
        if (regular && (rc = shs__meta_form(dir, &ms)) < 0)
            return rc;
        *kind = ms ? SHS_SOURCE_MS_STEP : SHS_SOURCE_STEP;
        return SHS_OK;
    }
    base_name(base, sizeof base, dir);
    if ((rc = holds(dir, "common.json", &common, NULL)) < 0)
        return rc;
    if (common || shs__step_of_name(base) >= 0) {
        if ((rc = shs__meta_ms_single_probe(dir)) < 0)
            return rc;
        *kind = rc ? SHS_SOURCE_MS_SINGLE : SHS_SOURCE_DAMAGED_STEP;
        return SHS_OK;
    }
    char **names = NULL;
    size_t n = 0;
    int save = 0, index = 0, files = 0;
    if ((rc = shs__io_list_dir(&names, &n, dir)) < 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        shs_savepath_entry e = shs_savepath_entry_kind(names[i]);
        save |= e == SHS_ENTRY_STEP || e == SHS_ENTRY_TRACKER ||
                !strncmp(names[i], SHS__REPLACED_PREFIX, strlen(SHS__REPLACED_PREFIX));
        index |= !strcmp(names[i], SHS__HF_INDEX);
        files |= shs__is_safetensors_name(names[i]);
    }
    shs__io_names_free(names, n);
    *kind = save    ? SHS_SOURCE_SAVE_PATH
            : index ? SHS_SOURCE_HF_INDEX
            : files ? SHS_SOURCE_FOLDER
                    : SHS_SOURCE_OTHER_FOLDER;
    return SHS_OK;
}

/* shs__source_probe, telling also whether the path is a directory. */
static int probe(shs_source_kind *kind, const char *path, int *is_dir)
{
    struct stat st;
    *kind = SHS_SOURCE_NONE;
    *is_dir = 0;
    if (shs__io->stat(path, &st) != 0)
        return errno == ENOENT || errno == ENOTDIR ? SHS_OK
                                                   : shs__err_errno(errno, "cannot stat", path);
    *is_dir = S_ISDIR(st.st_mode);
    if (S_ISDIR(st.st_mode))
        return probe_dir(kind, path);
    if (S_ISREG(st.st_mode))
        return probe_file(kind, path, (uint64_t)st.st_size);
    *kind = SHS_SOURCE_OTHER;
    return SHS_OK;
}

int shs__source_probe(shs_source_kind *kind, const char *path)
{
    int is_dir;
    return probe(kind, path, &is_dir);
}

int shs_path_kind(shs_source_kind *out, const char *path)
{
    if (!out || !path || !*path)
        return shs__err(SHS_EINVAL, "shs_path_kind: NULL or empty argument");
    return shs__source_probe(out, path);
}

int shs__source_resolve(char **dir, const char *save_path, int64_t step)
{
    shs__sp sp;
    *dir = NULL;
    int rc = shs__sp_scan(&sp, save_path, 1);
    if (rc < 0)
        return rc;
    const shs__sp_entry *e = NULL;
    if (step >= 0) {
        if (!(e = shs__sp_find(&sp, step)))
            rc = shs__err(SHS_ENOCHECKPOINT, "%s: no complete checkpoint of step %lld", save_path,
                          (long long)step);
    } else if (sp.tracker_rc == SHS_OK) {
        if (!(e = shs__sp_find(&sp, sp.tracker_step)))
            rc = shs__err(SHS_ECORRUPT,
                          "%s/" SHS__TRACKER " names step %lld, but there is no complete "
                          "directory of that step",
                          save_path, (long long)sp.tracker_step);
    } else if (sp.tracker_rc != SHS_ENOENT) {
        rc = shs__err(sp.tracker_rc, "%s", sp.tracker_msg);
    } else {
        for (size_t i = 0; i < sp.n; i++)
            if (sp.e[i].selected && (!e || sp.e[i].step > e->step))
                e = &sp.e[i];
        if (!e)
            rc = shs__err(SHS_ENOCHECKPOINT,
                          "%s: no complete checkpoint (its step directories lack metadata.json or "
                          "common.json)",
                          save_path);
    }
    if (e && !(*dir = shs__path_join(save_path, e->name)))
        rc = shs__err(SHS_ENOMEM, "out of memory");
    shs__sp_release(&sp);
    return rc;
}

/* "<path> is a <kind>, not <wants> (<hint>)". */
static int refuse(const char *path, shs_source_kind kind, const shs__source_req *req)
{
    return shs__err(SHS_EINVAL, "%s is a %s, not %s%s%s%s", path, shs_source_kind_name(kind),
                    req->wants, req->hint ? " (" : "", req->hint ? req->hint : "",
                    req->hint ? ")" : "");
}

/* Why a damaged step directory is one. */
static int damaged(const char *dir)
{
    int common = 0;
    int rc = holds(dir, "common.json", &common, NULL);
    if (rc < 0)
        return rc;
    /* never read as a plain folder of safetensors files: that would load
       whatever files a crash or a deletion left, silently */
    return shs__err(SHS_ECORRUPT,
                    "%s: a step directory (%s) without metadata.json: an incomplete or "
                    "damaged checkpoint",
                    dir, common ? "it holds common.json" : "by its name");
}

/* Read step directory `dir`, of a kind already known. */
static int read_step(shs__meta *m, const char *dir, shs_source_kind kind, unsigned accept)
{
    if (kind == SHS_SOURCE_MS_SINGLE)
        return shs__meta_from_ms_single(m, dir);
    if (kind == SHS_SOURCE_DAMAGED_STEP)
        return damaged(dir);
    return shs__meta_parse(m, dir,
                           (accept & SHS__SRC(SHS_SOURCE_MS_STEP)) ? SHS__META_MINDSPORE : 0);
}

int shs__source_open_step(shs__meta *m, const char *dir, unsigned accept)
{
    shs_source_kind kind;
    static const shs__source_req req = { SHS__SRC_STEPS, -1, "a step directory", NULL, 0 };
    memset(m, 0, sizeof *m);
    int rc = shs__source_probe(&kind, dir);
    if (rc < 0)
        return rc;
    if (kind == SHS_SOURCE_NONE)
        return shs__err(SHS_ENOENT, "%s: no such step directory", dir);
    if (kind != SHS_SOURCE_DAMAGED_STEP && !(accept & SHS__SRC(kind)))
        return refuse(dir, kind, &req);
    return read_step(m, dir, kind, accept);
}

/* The file a folder is read through: its index; with Hugging Face
   rules, a folder without one through its model.safetensors alone. */
static int folder_file(shs__source *s, const char *dir, int hf)
{
    int yes = 0, rc;
    if (s->kind == SHS_SOURCE_FOLDER && !hf)
        return (s->path = shs__strdup(dir)) ? SHS_OK : shs__err(SHS_ENOMEM, "out of memory");
    if (s->kind == SHS_SOURCE_FOLDER) {
        if ((rc = holds(dir, HF_SINGLE, &yes, NULL)) < 0)
            return rc;
        if (!yes)
            return shs__err(SHS_ENOCHECKPOINT,
                            "%s: no " SHS__HF_INDEX " and no " HF_SINGLE " (Hugging Face weights)",
                            dir);
        s->read = SHS_SOURCE_FILE;
    }
    s->path = shs__path_join(dir, s->kind == SHS_SOURCE_FOLDER ? HF_SINGLE : SHS__HF_INDEX);
    return s->path ? SHS_OK : shs__err(SHS_ENOMEM, "out of memory");
}

int shs__source_open(shs__source *s, const char *path, const shs__source_req *req)
{
    struct stat st;
    int rc, is_dir;
    memset(s, 0, sizeof *s);
    if ((rc = probe(&s->kind, path, &is_dir)) < 0)
        return rc;
    /* Hugging Face rules: a folder holding neither file is told so */
    if (req->hf && s->kind == SHS_SOURCE_OTHER_FOLDER)
        s->kind = SHS_SOURCE_FOLDER;
    s->read = s->kind;
    switch (s->kind) {
    case SHS_SOURCE_NONE:
        /* the errno of the path itself (ENOENT, or ENOTDIR below a file) */
        return shs__io->stat(path, &st) == 0 ? shs__err(SHS_ENOENT, "%s: vanished", path)
                                             : shs__err_errno(errno, "cannot open", path);
    case SHS_SOURCE_DAMAGED_STEP: return damaged(path);
    case SHS_SOURCE_STEP_PART:
        return shs__err(SHS_EINVAL, "%s is a %s: give the folder it is in", path,
                        shs_source_kind_name(s->kind));
    case SHS_SOURCE_OTHER_FOLDER:
        return shs__err(SHS_ENOCHECKPOINT,
                        "%s: no checkpoint (no step directories, no tracker, no safetensors "
                        "files)",
                        path);
    case SHS_SOURCE_OTHER:
        return shs__err(SHS_EINVAL,
                        "%s: not a checkpoint (a save path, a step directory, a folder of "
                        "safetensors files, a model.safetensors.index.json or a .safetensors "
                        "file)",
                        path);
    default: break;
    }
    if (!(req->accept & SHS__SRC(s->kind)))
        return refuse(path, s->kind, req);
    if (req->step >= 0 && (SHS__SRC(s->kind) & SHS__SRC_FILES))
        return shs__err(SHS_EINVAL, "%s: a step can only be chosen in a save path", path);
    if (s->kind == SHS_SOURCE_SAVE_PATH) {
        if ((rc = shs__source_resolve(&s->path, path, req->step)) < 0 ||
            (rc = shs__source_probe(&s->read, s->path)) < 0)
            return rc;
        if (!(req->accept & SHS__SRC(s->read)))
            return refuse(s->path, s->read, req);
    } else if (is_dir && (s->kind == SHS_SOURCE_FOLDER || s->kind == SHS_SOURCE_HF_INDEX)) {
        if ((rc = folder_file(s, path, req->hf)) < 0)
            return rc;
        is_dir = s->read == SHS_SOURCE_FOLDER;
    } else if (!(s->path = shs__strdup(path))) {
        return shs__err(SHS_ENOMEM, "out of memory");
    }
    switch (s->read) {
    case SHS_SOURCE_FOLDER: rc = shs__meta_from_plain(&s->m, s->path); break;
    case SHS_SOURCE_HF_INDEX: rc = shs__meta_from_hf_index(&s->m, s->path); break;
    case SHS_SOURCE_FILE: rc = shs__meta_from_file(&s->m, s->path); break;
    default: rc = read_step(&s->m, s->path, s->read, req->accept); break;
    }
    if (rc < 0)
        return rc;
    if (req->step >= 0 && s->m.step != req->step)
        return shs__err(SHS_ENOCHECKPOINT, "%s: the step directory of step %lld, not %lld", s->path,
                        (long long)s->m.step, (long long)req->step);
    if (req->hf)
        for (size_t i = 0; i < s->m.nt; i++)
            s->m.t[i].kind = SHS_KIND_MODEL;
    /* the model's file names are relative to the step directory or folder,
       or to the folder of the index or file */
    is_dir = s->read != SHS_SOURCE_HF_INDEX && s->read != SHS_SOURCE_FILE;
    s->dir = is_dir ? shs__strdup(s->path) : shs__path_dirname(s->path);
    return s->dir ? SHS_OK : shs__err(SHS_ENOMEM, "out of memory");
}

void shs__source_release(shs__source *s)
{
    shs__meta_free(&s->m);
    shs__free(s->path);
    shs__free(s->dir);
    memset(s, 0, sizeof *s);
}

/* Copy `path` into out, or SHS_ERANGE when it does not fit: a cut path
   would name another directory. */
static int copy_out(char *out, size_t cap, const char *path)
{
    size_t n = strlen(path);
    if (n >= cap)
        return shs__err(SHS_ERANGE,
                        "checkpoint path '%s' (%zu bytes) does not fit in a "
                        "%zu-byte buffer",
                        path, n, cap);
    memcpy(out, path, n + 1);
    return SHS_OK;
}

int shs_checkpoint_resolve(char *out, size_t cap, const char *path, int64_t step)
{
    shs_source_kind kind;
    char *dir = NULL;
    int rc, is_dir;
    if (!out || !cap || !path || !*path)
        return shs__err(SHS_EINVAL, "shs_checkpoint_resolve: empty path or buffer");
    if ((rc = probe(&kind, path, &is_dir)) < 0)
        return rc;
    if (kind == SHS_SOURCE_NONE)
        return shs__err_errno(ENOENT, "cannot find checkpoint path", path);
    if (!is_dir)
        return shs__err(SHS_EINVAL, "%s: a checkpoint path is a directory", path);
    switch (kind) {
    case SHS_SOURCE_SAVE_PATH:
        if ((rc = shs__source_resolve(&dir, path, step)) == SHS_OK)
            rc = copy_out(out, cap, dir);
        shs__free(dir);
        return rc;
    case SHS_SOURCE_DAMAGED_STEP: return damaged(path);
    case SHS_SOURCE_FOLDER:
    case SHS_SOURCE_HF_INDEX:
        if (step >= 0)
            return shs__err(SHS_ENOCHECKPOINT, "%s: no complete checkpoint of step %lld", path,
                            (long long)step);
        return copy_out(out, cap, path);
    case SHS_SOURCE_OTHER_FOLDER: return shs__err(SHS_ENOCHECKPOINT, "%s: no checkpoint", path);
    default: return copy_out(out, cap, path); /* a step directory */
    }
}
