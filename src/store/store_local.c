/*
 * store_local.c -- the store seam on a local directory, every call through
 * the io seam (io.h), so that fault injection and crash tests reach it.
 * A put or upload writes "<key>.shs-tmp-<random>" beside its key and
 * renames it into place (create-only: link(2), which fails on an
 * existing name, then unlink of the temporary): readers see whole
 * objects only.
 */
#include "store/store_int.h"

#include "store/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define TMP_MARKER ".shs-tmp-"

static char *key_path(const shs__store *st, const char *key)
{
    return shs__path_join(st->dir, key);
}

static int local_head(shs__store *st, const char *key, uint64_t *size)
{
    struct stat sb;
    char *p = key_path(st, key);
    int rc = SHS_OK;
    if (!p)
        return shs__err(SHS_ENOMEM, "out of memory");
    if (shs__io->lstat(p, &sb) != 0)
        rc = errno == ENOENT || errno == ENOTDIR ? shs__err(SHS_ENOENT, "'%s' does not exist", p)
                                                 : shs__err_errno(errno, "cannot stat", p);
    else if (S_ISDIR(sb.st_mode))
        rc = shs__err(SHS_ENOENT, "'%s' is a directory, not an object", p);
    else if (!S_ISREG(sb.st_mode))
        rc = shs__err(SHS_EINVAL, "'%s' is not a regular file (links are not followed)", p);
    else
        *size = (uint64_t)sb.st_size;
    shs__free(p);
    return rc;
}

static int local_read_one(shs__store *st, shs__store_range *r)
{
    char *p = key_path(st, r->key);
    int fd = -1, rc;
    struct stat sb;
    uint64_t end;
    if (!p)
        return shs__err(SHS_ENOMEM, "out of memory");
    if ((rc = shs__io_open(&fd, p, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0)) < 0)
        goto done;
    if (shs__io->fstat(fd, &sb) != 0) {
        rc = shs__err_errno(errno, "cannot stat", p);
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        rc = shs__err(SHS_EINVAL, "'%s' is not a regular file", p);
        goto done;
    }
    if (shs__add_u64(r->off, r->len, &end) || end > (uint64_t)sb.st_size) {
        rc = shs__err(SHS_ERANGE, "'%s': bytes [%llu, %llu) are past its end (%lld bytes)", p,
                      (unsigned long long)r->off, (unsigned long long)(r->off + r->len),
                      (long long)sb.st_size);
        goto done;
    }
    rc = shs__io_pread_full(fd, r->buf, r->len, r->off, p);
done:
    if (fd >= 0)
        shs__io->close(fd);
    shs__free(p);
    return rc;
}

static int local_read_many(shs__store *st, shs__store_range *r, size_t n)
{
    int first = SHS_OK;
    char msg[1100] = "";
    for (size_t i = 0; i < n; i++) {
        r[i].status = r[i].len ? local_read_one(st, &r[i]) : SHS_OK;
        if (r[i].status < 0 && first == SHS_OK) {
            first = r[i].status;
            snprintf(msg, sizeof msg, "%s", shs_last_error());
        }
    }
    return first < 0 ? shs__err(first, "%s", msg) : SHS_OK;
}

static int local_read_all(shs__store *st, const char *key, size_t max, char **out, size_t *len)
{
    char *p = key_path(st, key);
    if (!p)
        return shs__err(SHS_ENOMEM, "out of memory");
    int rc = shs__read_file_nofollow(out, len, p, max);
    shs__free(p);
    return rc;
}

/* Walk dir/rel (rel "" or ending in '/'), adding the keys that start with
   `prefix`; `delimited` folds subdirectories into dirs. */
static int walk(shs__store *st, const char *rel, const char *prefix, int delimited,
                shs__store_listing *out, int depth)
{
    char **names = NULL;
    size_t n = 0, rl = strlen(rel), pl = strlen(prefix);
    int rc;
    char *dir = rl ? shs__path_join(st->dir, rel) : shs__strdup(st->dir);
    if (!dir)
        return shs__err(SHS_ENOMEM, "out of memory");
    if (depth > 64) {
        rc = shs__err(SHS_EINVAL, "%s: directories nested more than 64 deep", dir);
        goto done;
    }
    if ((rc = shs__io_list_dir(&names, &n, dir)) < 0) {
        if (rc == SHS_ENOENT || errno == ENOTDIR) {
            shs__err_clear();
            rc = SHS_OK; /* nothing there: an empty listing, as S3 gives */
        }
        goto done;
    }
    for (size_t i = 0; i < n && rc == SHS_OK; i++) {
        shs__buf k = SHS__BUF_INIT;
        struct stat sb;
        if (strstr(names[i], TMP_MARKER))
            continue; /* a put in flight, or its leftover */
        if ((rc = shs__buf_addf(&k, "%s%s", rel, names[i])) < 0)
            break;
        char *p = shs__path_join(st->dir, k.data);
        if (!p) {
            shs__buf_release(&k);
            rc = shs__err(SHS_ENOMEM, "out of memory");
            break;
        }
        if (shs__io->lstat(p, &sb) != 0) {
            if (errno != ENOENT) /* gone meanwhile: not listed */
                rc = shs__err_errno(errno, "cannot stat", p);
        } else if (S_ISDIR(sb.st_mode)) {
            /* a directory can hold keys of the prefix when its name and
               the prefix agree as far as both go */
            size_t kl = k.len, m = kl < pl ? kl : pl;
            if (memcmp(k.data, prefix, m) == 0) {
                if (delimited && kl >= pl) {
                    rc = shs__buf_addc(&k, '/');
                    if (rc == SHS_OK)
                        rc = shs__store_list_add(out, k.data, k.len, 0, 1);
                } else if ((rc = shs__buf_addc(&k, '/')) == SHS_OK) {
                    rc = walk(st, k.data, prefix, delimited, out, depth + 1);
                }
            }
        } else if (S_ISREG(sb.st_mode) && k.len >= pl && memcmp(k.data, prefix, pl) == 0 &&
                   shs__store_key_check(k.data, 0) == SHS_OK) {
            rc = shs__store_list_add(out, k.data, k.len, (uint64_t)sb.st_size, 0);
        }
        shs__err_clear();
        shs__free(p);
        shs__buf_release(&k);
    }
done:
    shs__io_names_free(names, n);
    shs__free(dir);
    return rc;
}

static int local_list(shs__store *st, const char *prefix, int delimited, shs__store_listing *out)
{
    return walk(st, "", prefix, delimited, out, 0);
}

/* Create and open the temporary file of `path` (its directories first). */
static int open_tmp(char **tmp_out, int *fd, const char *path)
{
    char suffix[17];
    char *dir = shs__path_dirname(path);
    size_t cap = strlen(path) + sizeof TMP_MARKER + 17;
    char *tmp = shs__malloc(cap);
    int rc;
    *tmp_out = NULL;
    *fd = -1;
    if (!dir || !tmp) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto fail;
    }
    if ((rc = shs__mkdirs(dir, 0755)) < 0)
        goto fail;
    shs__random_suffix(suffix);
    snprintf(tmp, cap, "%s" TMP_MARKER "%s", path, suffix);
    if ((rc = shs__io_open(fd, tmp, O_WRONLY | O_CREAT | O_EXCL, 0644)) < 0)
        goto fail;
    shs__free(dir);
    *tmp_out = tmp;
    return SHS_OK;
fail:
    shs__free(dir);
    shs__free(tmp);
    return rc;
}

/* The temporary file (closed) into place. */
static int publish(const char *tmp, const char *path, unsigned flags)
{
    int rc = SHS_OK;
    if (flags & SHS__STORE_CREATE_ONLY) {
        if (shs__io->link(tmp, path) != 0)
            rc = errno == EEXIST ? shs__err(SHS_EEXIST, "'%s' already exists", path)
                                 : shs__err_errno(errno, "cannot link into place", path);
        shs__io->unlink(tmp);
    } else if (shs__io->rename(tmp, path) != 0) {
        rc = shs__err_errno(errno, "cannot rename into place", path);
        shs__io->unlink(tmp);
    }
    if (rc == SHS_OK && (flags & SHS__STORE_FSYNC)) {
        char *dir = shs__path_dirname(path);
        rc = dir ? shs__io_fsync_dir(dir) : shs__err(SHS_ENOMEM, "out of memory");
        shs__free(dir);
    }
    return rc;
}

static int local_put(shs__store *st, const char *key, const void *data, size_t len, unsigned flags)
{
    char *path = key_path(st, key), *tmp = NULL;
    int fd = -1, rc;
    if (!path)
        return shs__err(SHS_ENOMEM, "out of memory");
    if ((rc = open_tmp(&tmp, &fd, path)) < 0)
        goto done;
    rc = shs__io_pwrite_full(fd, data, len, 0, tmp);
    if (rc == SHS_OK && (flags & SHS__STORE_FSYNC))
        rc = shs__io_fsync(fd, tmp);
    int crc = shs__io_close(fd, tmp);
    rc = rc < 0 ? rc : crc;
    if (rc < 0)
        shs__io->unlink(tmp);
    else
        rc = publish(tmp, path, flags);
done:
    shs__free(path);
    shs__free(tmp);
    return rc;
}

static int local_upload_begin(shs__store_upload *u, uint64_t size_hint)
{
    if (!(u->path = key_path(u->st, u->key)))
        return shs__err(SHS_ENOMEM, "out of memory");
    int rc = open_tmp(&u->tmp, &u->fd, u->path);
    /* reserve the space up front where the file system can: ENOSPC now,
       not half way (a failure to reserve is only a missed optimisation) */
    if (rc == SHS_OK && size_hint)
        shs__io->reserve(u->fd, size_hint);
    return rc;
}

static int local_upload_write(shs__store_upload *u, const void *data, size_t len)
{
    int rc = shs__io_pwrite_full(u->fd, data, len, u->off, u->tmp);
    if (rc == SHS_OK)
        u->off += len;
    return rc;
}

static void local_upload_free(shs__store_upload *u)
{
    if (u->fd >= 0)
        shs__io->close(u->fd);
    if (u->tmp)
        shs__io->unlink(u->tmp);
    shs__free(u->tmp);
    shs__free(u->path);
    shs__free(u->key);
    shs__free(u);
}

static void local_upload_abort(shs__store_upload *u)
{
    local_upload_free(u);
}

static int local_upload_commit(shs__store_upload *u)
{
    int rc = SHS_OK;
    if (u->flags & SHS__STORE_FSYNC)
        rc = shs__io_fsync(u->fd, u->tmp);
    int crc = shs__io_close(u->fd, u->tmp);
    u->fd = -1;
    if (rc == SHS_OK)
        rc = crc;
    if (rc == SHS_OK) {
        rc = publish(u->tmp, u->path, u->flags);
        shs__free(u->tmp);
        u->tmp = NULL; /* renamed, or removed by publish */
    }
    local_upload_free(u);
    return rc;
}

static int local_del(shs__store *st, const char *key)
{
    char *p = key_path(st, key);
    int rc = SHS_OK;
    if (!p)
        return shs__err(SHS_ENOMEM, "out of memory");
    if (shs__io->unlink(p) != 0 && errno != ENOENT && errno != ENOTDIR)
        rc = shs__err_errno(errno, "cannot remove", p);
    shs__free(p);
    return rc;
}

static int64_t local_now(shs__store *st)
{
    return (int64_t)time(NULL);
}

const shs__store_ops shs__store_local_ops = {
    .head = local_head,
    .read_many = local_read_many,
    .read_all = local_read_all,
    .list = local_list,
    .put = local_put,
    .upload_begin = local_upload_begin,
    .upload_write = local_upload_write,
    .upload_commit = local_upload_commit,
    .upload_abort = local_upload_abort,
    .del = local_del,
    .now = local_now,
};
