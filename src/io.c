/* io.c -- the POSIX implementation of the file seam and its helpers. */
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
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

int shs__io_pread_full(int fd, void *buf, size_t n, uint64_t off,
                       const char *path)
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
            return shs__err(SHS_EIO, "cannot read '%s': unexpected end of file at byte %llu "
                            "(file changed while open?)", path, (unsigned long long)off);
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return SHS_OK;
}

int shs__io_pwrite_full(int fd, const void *buf, size_t n, uint64_t off,
                        const char *path)
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
        state = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^
                ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)&ts;
    }
    /* splitmix64 */
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    snprintf(out, 17, "%016llx", (unsigned long long)z);
}
