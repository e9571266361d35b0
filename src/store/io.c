/* io.c -- the POSIX implementation of the file seam and its helpers. */
#include "store/io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static int posix_open(const char *path, int flags, mode_t mode)
{
    return open(path, flags | O_CLOEXEC, mode);
}

static void *posix_mmap(int fd, size_t len)
{
    void *p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void *posix_mmap_private_writable(int fd, size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

static int posix_exchange(const char *a, const char *b);
static int posix_list_dir(const char *path, char ***names, size_t *n);
static int posix_lock(int fd, int test_only);

/* Wrappers rather than the libc symbols: stat/lstat were macros over
   __xstat in older glibc. */
static int posix_stat(const char *path, struct stat *st)
{
    return stat(path, st);
}

static int posix_lstat(const char *path, struct stat *st)
{
    return lstat(path, st);
}

static int posix_reserve(int fd, uint64_t len)
{
    return fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)len);
}

const shs__io_ops shs__io_posix = {
    .open = posix_open,
    .close = close,
    .pread = pread,
    .pwrite = pwrite,
    .fsync = fsync,
    .ftruncate = ftruncate,
    .fstat = fstat,
    .rename = rename,
    .unlink = unlink,
    .mkdir = mkdir,
    .rmdir = rmdir,
    .link = link,
    .mmap = posix_mmap,
    .munmap = munmap,
    .reserve = posix_reserve,
    .exchange = posix_exchange,
    .stat = posix_stat,
    .lstat = posix_lstat,
    .list_dir = posix_list_dir,
    .lock = posix_lock,
    .mmap_private_writable = posix_mmap_private_writable,
};

const shs__io_ops *shs__io = &shs__io_posix;

void shs__io_set(const shs__io_ops *ops)
{
    shs__io = ops ? ops : &shs__io_posix;
}

int shs__io_open(int *out_fd, const char *path, int flags, mode_t mode)
{
    int fd = shs__io->open(path, flags, mode);
    if (fd < 0) {
        *out_fd = -1;
        /* O_NOFOLLOW reports a symlink as ELOOP ("too many levels"), which
           would send the reader looking for a loop */
        if (errno == ELOOP && (flags & O_NOFOLLOW))
            return shs__err(SHS_EINVAL, "cannot open '%s': is a symbolic link (not followed)",
                            path);
        return shs__err_errno(errno, "cannot open", path);
    }
    *out_fd = fd;
    return SHS_OK;
}

int shs__io_close(int fd, const char *path)
{
    if (fd >= 0 && shs__io->close(fd) != 0)
        return shs__err_errno(errno, "cannot close", path);
    return SHS_OK;
}

int shs__io_pread_full(int fd, void *buf, size_t n, uint64_t off, const char *path)
{
    char *p = buf;
    while (n > 0) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : n;
        ssize_t r = shs__io->pread(fd, p, chunk, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return shs__err_errno(errno, "cannot read", path);
        }
        if (r == 0)
            return shs__err(SHS_EIO,
                            "cannot read '%s': unexpected end of file at byte %llu "
                            "(file changed while open?)",
                            path, (unsigned long long)off);
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return SHS_OK;
}

int shs__io_pwrite_full(int fd, const void *buf, size_t n, uint64_t off, const char *path)
{
    const char *p = buf;
    while (n > 0) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : n;
        ssize_t r = shs__io->pwrite(fd, p, chunk, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return shs__err_errno(errno, "cannot write", path);
        }
        if (r == 0)
            return shs__err_errno(ENOSPC, "cannot write", path);
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return SHS_OK;
}

int shs__io_fsync(int fd, const char *path)
{
    if (shs__io->fsync(fd) != 0)
        return shs__err_errno(errno, "cannot fsync", path);
    return SHS_OK;
}

int shs__io_fsync_dir(const char *dir)
{
    int fd, rc;
    if ((rc = shs__io_open(&fd, dir, O_RDONLY | O_DIRECTORY, 0)) < 0)
        return rc;
    rc = shs__io_fsync(fd, dir);
    shs__io->close(fd);
    return rc;
}

char *shs__path_dirname(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return shs__strdup(".");
    if (slash == path)
        return shs__strdup("/");
    return shs__strndup(path, (size_t)(slash - path));
}

char *shs__path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = shs__malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

void shs__random_suffix(char out[17])
{
    static _Thread_local uint64_t state;
    if (!state) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        state = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^
                (uint64_t)(uintptr_t)&ts;
    }
    /* splitmix64 */
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    snprintf(out, 17, "%016llx", (unsigned long long)z);
}

static int posix_exchange(const char *a, const char *b)
{
    return renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE);
}

int shs__rmtree(const char *path)
{
    struct stat st;
    char **names = NULL;
    size_t n = 0;
    int rc = SHS_OK;
    if (shs__io->lstat(path, &st) != 0)
        return errno == ENOENT ? SHS_OK : shs__err_errno(errno, "cannot stat", path);
    if (!S_ISDIR(st.st_mode)) {
        if (shs__io->unlink(path) != 0 && errno != ENOENT)
            return shs__err_errno(errno, "cannot remove", path);
        return SHS_OK;
    }
    if ((rc = shs__io_list_dir(&names, &n, path)) < 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        char *child = shs__path_join(path, names[i]);
        if (!child) {
            rc = shs__err(SHS_ENOMEM, "out of memory removing %s", path);
            goto done;
        }
        int r = shs__rmtree(child);
        shs__free(child);
        if (r < 0 && rc == SHS_OK)
            rc = r;
    }
    if (rc == SHS_OK && shs__io->rmdir(path) != 0 && errno != ENOENT)
        rc = shs__err_errno(errno, "cannot remove directory", path);
done:
    shs__io_names_free(names, n);
    return rc;
}

int shs__mkdirs(const char *path, mode_t mode)
{
    char *p = shs__strdup(path);
    if (!p)
        return shs__err(SHS_ENOMEM, "out of memory creating %s", path);
    int rc = SHS_OK;
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (shs__io->mkdir(p, mode) != 0 && errno != EEXIST) {
                rc = shs__err_errno(errno, "cannot create directory", p);
                break;
            }
            *s = c;
            if (c == '\0')
                break;
        }
    }
    if (rc == SHS_OK) {
        /* an error of the stat itself (EIO, EACCES) is not "a file is in
           the way": it is reported with its errno */
        struct stat st;
        if (shs__io->stat(path, &st) != 0)
            rc = shs__err_errno(errno, "cannot stat directory", path);
        else if (!S_ISDIR(st.st_mode))
            rc = shs__err(SHS_EINVAL, "'%s' exists and is not a directory", path);
    }
    shs__free(p);
    return rc;
}

int shs__write_file(const char *path, const void *data, size_t len, int do_fsync)
{
    int fd, rc;
    if ((rc = shs__io_open(&fd, path, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0)
        return rc;
    rc = shs__io_pwrite_full(fd, data, len, 0, path);
    if (rc == SHS_OK && do_fsync)
        rc = shs__io_fsync(fd, path);
    int crc = shs__io_close(fd, path);
    return rc < 0 ? rc : crc;
}

int shs__write_file_atomic(const char *path, const void *data, size_t len, int do_fsync)
{
    char suffix[17];
    shs__random_suffix(suffix);
    size_t cap = strlen(path) + 32;
    char *tmp = shs__malloc(cap);
    char *dir = shs__path_dirname(path);
    int rc;
    if (!tmp || !dir) {
        rc = shs__err(SHS_ENOMEM, "out of memory writing %s", path);
        goto done;
    }
    snprintf(tmp, cap, "%s.tmp.%s", path, suffix);
    if ((rc = shs__write_file(tmp, data, len, do_fsync)) < 0) {
        shs__io->unlink(tmp);
        goto done;
    }
    if (shs__io->rename(tmp, path) != 0) {
        rc = shs__err_errno(errno, "cannot rename into place", path);
        shs__io->unlink(tmp);
        goto done;
    }
    if (do_fsync)
        rc = shs__io_fsync_dir(dir);
done:
    shs__free(tmp);
    shs__free(dir);
    return rc;
}

static int read_file(char **out, size_t *out_len, const char *path, size_t max, int flags)
{
    int fd, rc;
    struct stat st;
    *out = NULL;
    if ((rc = shs__io_open(&fd, path, O_RDONLY | O_NONBLOCK | flags, 0)) < 0)
        return rc;
    if (shs__io->fstat(fd, &st) != 0) {
        rc = shs__err_errno(errno, "cannot stat", path);
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = shs__err(SHS_ECORRUPT, "%s: not a regular file", path);
        goto done;
    }
    if ((uint64_t)st.st_size > max) {
        rc = shs__err(SHS_ECORRUPT, "%s: %lld bytes, more than the %zu allowed", path,
                      (long long)st.st_size, max);
        goto done;
    }
    char *buf = shs__malloc((size_t)st.st_size + 1);
    if (!buf) {
        rc = shs__err(SHS_ENOMEM, "out of memory reading %s", path);
        goto done;
    }
    if ((rc = shs__io_pread_full(fd, buf, (size_t)st.st_size, 0, path)) < 0) {
        shs__free(buf);
        goto done;
    }
    buf[st.st_size] = '\0';
    *out = buf;
    *out_len = (size_t)st.st_size;
done:
    shs__io->close(fd);
    return rc;
}

int shs__read_file(char **out, size_t *out_len, const char *path, size_t max)
{
    return read_file(out, out_len, path, max, 0);
}

int shs__read_file_nofollow(char **out, size_t *out_len, const char *path, size_t max)
{
    return read_file(out, out_len, path, max, O_NOFOLLOW);
}

void shs__io_names_free(char **names, size_t n)
{
    for (size_t i = 0; names && i < n; i++)
        shs__free(names[i]);
    shs__free(names);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int posix_list_dir(const char *path, char ***names_out, size_t *n_out)
{
    char **v = NULL;
    size_t n = 0, cap = 0;
    int err = 0;
    *names_out = NULL;
    *n_out = 0;
    DIR *d = opendir(path);
    if (!d)
        return -1;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            err = errno; /* 0 at the end, else a real error */
            break;
        }
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char **nv = shs__realloc(v, nc * sizeof *nv);
            if (!nv) {
                err = ENOMEM;
                break;
            }
            v = nv;
            cap = nc;
        }
        if (!(v[n] = shs__strdup(e->d_name))) {
            err = ENOMEM;
            break;
        }
        n++;
    }
    closedir(d);
    if (err) {
        shs__io_names_free(v, n);
        errno = err;
        return -1;
    }
    if (n > 1)
        qsort(v, n, sizeof *v, cmp_name);
    *names_out = v;
    *n_out = n;
    return 0;
}

int shs__io_list_dir(char ***names, size_t *n, const char *path)
{
    if (shs__io->list_dir(path, names, n) != 0) {
        *names = NULL;
        *n = 0;
        return shs__err_errno(errno, "cannot list directory", path);
    }
    return SHS_OK;
}

static int posix_lock(int fd, int test_only)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl); /* l_pid must be 0 for OFD locks */
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 0; /* the whole file, however long it grows */
    if (!test_only)
        return fcntl(fd, F_OFD_SETLK, &fl);
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
        return -1;
    if (fl.l_type != F_UNLCK) {
        errno = EAGAIN;
        return -1;
    }
    return 0;
}
