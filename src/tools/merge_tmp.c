/*
 * merge_tmp.c -- temporary output directories of merge and reshard, each
 * with a lock file that tells a live run from a killed one, and the
 * removal of what killed runs left (merge_tmp.h).
 */
#include "tools/merge_tmp.h"

#include "store/io.h"
#include "store/lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOCK_SUFFIX ".lock"
#define HEX_LEN 16

void shs__tool_tmp_release(shs__tool_tmp *t)
{
    /* the lock file goes last: the directory never exists without it */
    if (t->lock && t->fd >= 0)
        shs__io->unlink(t->lock);
    if (t->fd >= 0)
        shs__io->close(t->fd);
    shs__free(t->lock);
    shs__free(t->path);
    t->lock = t->path = NULL;
    t->fd = -1;
}

int shs__tool_tmp_make(shs__tool_tmp *t, const char *path, const char *tool)
{
    struct stat a, b;
    char text[512], host[256] = "";
    int rc;
    t->fd = -1;
    t->path = shs__strdup(path);
    t->lock = t->path ? shs__malloc(strlen(path) + sizeof LOCK_SUFFIX) : NULL;
    if (!t->lock) {
        shs__tool_tmp_release(t);
        return shs__err(SHS_ENOMEM, "out of memory");
    }
    snprintf(t->lock, strlen(path) + sizeof LOCK_SUFFIX, "%s" LOCK_SUFFIX, path);
    if ((rc = shs__io_open(&t->fd, t->lock, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0)
        goto fail;
    if (shs__io->lock(t->fd, 0) != 0) {
        rc = shs__err_errno(errno, "cannot lock", t->lock);
        goto fail;
    }
    if (gethostname(host, sizeof host) != 0)
        host[0] = '\0';
    host[sizeof host - 1] = '\0';
    int n = snprintf(text, sizeof text, "pid %lld\nhost %s\ntool %s\n", (long long)getpid(), host,
                     tool);
    if ((rc = shs__io_pwrite_full(t->fd, text, (size_t)n, 0, t->lock)) < 0)
        goto fail;
    if (shs__io->mkdir(path, 0755) != 0) {
        rc = shs__err_errno(errno, "cannot create the output directory", path);
        goto fail;
    }
    /* another run's cleanup may have taken the lock file away in the
       instant between its creation and its lock: the directory would then
       look like a leftover.  It is ours only if the name still is. */
    if (shs__io->fstat(t->fd, &a) != 0 || shs__io->stat(t->lock, &b) != 0 || a.st_ino != b.st_ino ||
        a.st_dev != b.st_dev) {
        shs__io->rmdir(path);
        rc = shs__err(SHS_EIO, "%s: removed by another process as it was being created", t->lock);
        goto fail;
    }
    return SHS_OK;
fail:
    if (t->fd >= 0) {
        shs__io->unlink(t->lock);
        shs__io->close(t->fd);
        t->fd = -1;
    }
    shs__tool_tmp_release(t);
    return rc;
}

static int is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

/* `rest` is "<16 hex>" or "<16 hex>.lock": 1 or 2, else 0. */
static int hex_tail(const char *rest)
{
    if (strlen(rest) < HEX_LEN || !is_hex(rest, HEX_LEN))
        return 0;
    return rest[HEX_LEN] == '\0' ? 1 : strcmp(rest + HEX_LEN, LOCK_SUFFIX) == 0 ? 2 : 0;
}

/* Which temporary of destination base `base` entry `name` is: 0 none;
   else 1 (a directory's name) or 2 (a lock file's), *tool set. */
static int tmp_kind(const char *name, const char *base, const char **tool)
{
    size_t bl = strlen(base);
    if (name[0] == '.' && strncmp(name, ".tmp-", 5) == 0 && strncmp(name + 5, base, bl) == 0 &&
        name[5 + bl] == '-') {
        *tool = "reshard";
        return hex_tail(name + 6 + bl);
    }
    if (strncmp(name, base, bl) != 0)
        return 0;
    const char *r = name + bl;
    *tool = "merge";
    if (strncmp(r, ".part-", 6) == 0) {
        /* ".part-I-of-N" */
        char *e;
        long i = strtol(r + 6, &e, 10);
        if (e == r + 6 || strncmp(e, "-of-", 4) != 0 || i < 0)
            return 0;
        const char *f = e + 4;
        long k = strtol(f, &e, 10);
        if (e == f || k < 1)
            return 0;
        r = e;
    }
    return strncmp(r, ".tmp-", 5) == 0 ? hex_tail(r + 5) : 0;
}

/* Files and bytes under path (not following links). */
static void tree_size(const char *path, uint64_t *bytes, uint64_t *files, int depth)
{
    struct stat st;
    if (shs__io->lstat(path, &st) != 0)
        return;
    if (!S_ISDIR(st.st_mode)) {
        *bytes += (uint64_t)st.st_size;
        *files += 1;
        return;
    }
    char **names = NULL;
    size_t n = 0;
    if (depth > 8 || shs__io->list_dir(path, &names, &n) != 0)
        return;
    for (size_t i = 0; i < n; i++) {
        char *p = shs__path_join(path, names[i]);
        if (p)
            tree_size(p, bytes, files, depth + 1);
        shs__free(p);
    }
    shs__io_names_free(names, n);
}

/* The lock file of a temporary: *fd open on it (-1 when there is none),
   *live whether a running process holds it, *pid what it records. */
static int probe_lock(const char *lock, int *fd, int *live, long long *pid)
{
    *fd = -1;
    *live = 0;
    *pid = 0;
    int f = shs__io->open(lock, O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
    if (f < 0)
        return errno == ENOENT ? SHS_OK : shs__err_errno(errno, "cannot open", lock);
    char text[256] = "", v[64];
    ssize_t got = shs__io->pread(f, text, sizeof text - 1, 0);
    text[got > 0 ? got : 0] = '\0';
    shs__lock_info_field(v, sizeof v, text, "pid");
    *pid = strtoll(v, NULL, 10);
    if (shs__io->lock(f, 1) != 0) {
        if (errno != EAGAIN && errno != EACCES) {
            int rc = shs__err_errno(errno, "cannot test the lock of", lock);
            shs__io->close(f);
            return rc;
        }
        *live = 1;
    }
    *fd = f;
    return SHS_OK;
}

/* One entry: probed, removed when asked and not live, told to fn. */
static int visit(const char *dir, const char *name, int kind, const char *tool, int remove,
                 shs_tool_leftover_fn fn, void *ctx)
{
    char *path = shs__path_join(dir, name);
    size_t pl = path ? strlen(path) : 0;
    char *lock = path ? shs__malloc(pl + sizeof LOCK_SUFFIX) : NULL;
    int fd = -1, live = 0, rc = SHS_OK;
    long long pid = 0;
    struct stat st;
    shs_tool_leftover l = { SHS_TOOL_LEFTOVER_VERSION, path, tool, 0, 0, 0, 0, 0 };
    if (!lock) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    if (kind == 2) {
        /* a lock file: its own entry only when its directory is gone (a
           run killed after its rename, or before its mkdir) */
        snprintf(lock, pl + 1, "%s", path);
        path[pl - strlen(LOCK_SUFFIX)] = '\0';
        if (shs__io->lstat(path, &st) == 0)
            goto done;
        snprintf(path, pl + 1, "%s", lock);
    } else {
        snprintf(lock, pl + sizeof LOCK_SUFFIX, "%s" LOCK_SUFFIX, path);
        if (shs__io->lstat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            goto done; /* not a directory: not ours */
    }
    if ((rc = probe_lock(lock, &fd, &live, &pid)) < 0)
        goto done;
    if (kind == 2 && fd < 0)
        goto done; /* gone meanwhile */
    l.live = live;
    l.pid = pid;
    if (kind == 1)
        tree_size(path, &l.bytes, &l.files, 0);
    /* taking the lock before removing: a second run cleaning up at the
       same time finds it held and leaves it alone */
    if (remove && !live && (fd < 0 || shs__io->lock(fd, 0) == 0)) {
        if (kind == 1 && (rc = shs__rmtree(path)) < 0)
            goto done;
        if (fd >= 0 && shs__io->unlink(lock) != 0 && errno != ENOENT) {
            rc = shs__err_errno(errno, "cannot remove", lock);
            goto done;
        }
        l.removed = 1;
    } else if (remove && !live) {
        l.live = 1; /* another run took it first */
    }
    if (fn)
        rc = fn(ctx, &l);
done:
    if (fd >= 0)
        shs__io->close(fd);
    shs__free(lock);
    shs__free(path);
    return rc;
}

int shs__tool_leftovers(const char *dst, int remove, shs_tool_leftover_fn fn, void *ctx)
{
    char *dir = shs__path_dirname(dst), *copy = shs__strdup(dst), **names = NULL;
    size_t n = 0;
    int rc = SHS_OK;
    if (!dir || !copy) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    /* the destination's own name, without trailing slashes */
    size_t cl = strlen(copy);
    while (cl > 1 && copy[cl - 1] == '/')
        copy[--cl] = '\0';
    const char *base = strrchr(copy, '/') ? strrchr(copy, '/') + 1 : copy;
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        goto done; /* no name to find temporaries by */
    if ((rc = shs__io->list_dir(dir, &names, &n)) != 0) {
        rc = errno == ENOENT ? SHS_OK : shs__err_errno(errno, "cannot list", dir);
        goto done;
    }
    for (size_t i = 0; i < n && rc == SHS_OK; i++) {
        const char *tool = NULL;
        int kind = tmp_kind(names[i], base, &tool);
        if (kind)
            rc = visit(dir, names[i], kind, tool, remove, fn, ctx);
    }
done:
    shs__io_names_free(names, n);
    shs__free(copy);
    shs__free(dir);
    return rc;
}

int shs_tool_leftovers(const char *dst, int remove, shs_tool_leftover_fn fn, void *ctx)
{
    if (!dst || !*dst)
        return shs__err(SHS_EINVAL, "shs_tool_leftovers: NULL or empty destination");
    return shs__tool_leftovers(dst, remove, fn, ctx);
}
