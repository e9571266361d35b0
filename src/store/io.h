/*
 * io.h -- the one seam for files.  Every open/read/write/fsync/rename/
 * unlink/mmap of the library goes through `shs__io`, so that tests can
 * fail the N-th call with ENOSPC or EIO, or stop the process there.
 * The raw ops follow POSIX conventions (-1 and errno); the shs__io_*
 * helpers below turn them into statuses with messages naming the file.
 */
#ifndef SHS_IO_H
#define SHS_IO_H

#include "common/internal.h"

#include <sys/stat.h>
#include <sys/types.h>

typedef struct shs__io_ops {
    int (*open)(const char *path, int flags, mode_t mode);
    int (*close)(int fd);
    ssize_t (*pread)(int fd, void *buf, size_t n, off_t off);
    ssize_t (*pwrite)(int fd, const void *buf, size_t n, off_t off);
    int (*fsync)(int fd);
    int (*ftruncate)(int fd, off_t len);
    int (*fstat)(int fd, struct stat *st);
    int (*rename)(const char *from, const char *to);
    int (*unlink)(const char *path);
    int (*mkdir)(const char *path, mode_t mode);
    int (*rmdir)(const char *path);
    int (*link)(const char *from, const char *to);
    /* Read-only private mapping of `len` bytes of fd; NULL on failure. */
    void *(*mmap)(int fd, size_t len);
    int (*munmap)(void *addr, size_t len);
    /* Reserve `len` bytes for fd without changing its size
       (fallocate FALLOC_FL_KEEP_SIZE); -1/EOPNOTSUPP where unsupported. */
    int (*reserve)(int fd, uint64_t len);
    /* Atomically swap two paths (renameat2 RENAME_EXCHANGE). */
    int (*exchange)(const char *a, const char *b);
    int (*stat)(const char *path, struct stat *st);
    int (*lstat)(const char *path, struct stat *st);
    /* The names in directory `path` except "." and "..", sorted bytewise
       (so that a save makes the same calls in the same order every time:
       fault-injection sweeps depend on it), in an array allocated with
       shs__malloc and released with shs__io_names_free.  One call rather
       than opendir/readdir/closedir: a listing either succeeds whole or
       fails with errno, and a test layer fails or records it in one place
       (a readdir error is otherwise easily mistaken for the end). */
    int (*list_dir)(const char *path, char ***names, size_t *n);
    /* Exclusive whole-file lock of fd, never waiting (an OFD lock, see
       lock.c).  With test_only nonzero, only tell whether it could be
       taken.  0, or -1 with errno EAGAIN when another open file
       description holds it (or another error: ENOLCK, EINVAL...). */
    int (*lock)(int fd, int test_only);
    /* Private writable (copy-on-write) mapping of `len` bytes of fd, for
       SHS_OPEN_PRIVATE_WRITABLE; NULL on failure.  A layer may leave it
       NULL: such files are then read without a mapping. */
    void *(*mmap_private_writable)(int fd, size_t len);
} shs__io_ops;

/* The ops in force.  Never NULL. */
extern const shs__io_ops *shs__io;
/* The POSIX implementation. */
extern const shs__io_ops shs__io_posix;
/* Replace the ops (tests); NULL restores the POSIX implementation. */
void shs__io_set(const shs__io_ops *ops);

/* Helpers with messages.  `path` only names the file in errors. */
int shs__io_open(int *out_fd, const char *path, int flags, mode_t mode);
int shs__io_close(int fd, const char *path);
int shs__io_pread_full(int fd, void *buf, size_t n, uint64_t off, const char *path);
int shs__io_pwrite_full(int fd, const void *buf, size_t n, uint64_t off, const char *path);
int shs__io_fsync(int fd, const char *path);
/* fsync a directory (opened O_RDONLY|O_DIRECTORY). */
int shs__io_fsync_dir(const char *dir);
/* list_dir with a message naming the directory. */
int shs__io_list_dir(char ***names, size_t *n, const char *path);
void shs__io_names_free(char **names, size_t n);
/* Directory part of `path` ("." when it has none); caller frees. */
char *shs__path_dirname(const char *path);
/* "<dir>/<name>" newly allocated. */
char *shs__path_join(const char *dir, const char *name);
/* Remove a file tree (files and directories, no symlink following),
   through the seam.  Missing path: SHS_OK. */
int shs__rmtree(const char *path);
/* mkdir that accepts an existing directory; with parents (mkdir -p). */
int shs__mkdirs(const char *path, mode_t mode);
/* Write a small file completely: create/truncate, write, optional fsync. */
int shs__write_file(const char *path, const void *data, size_t len, int do_fsync);
/* Replace `path` atomically with `data`: temp file beside it, fsync,
   rename, fsync the directory. */
int shs__write_file_atomic(const char *path, const void *data, size_t len, int do_fsync);
/* Read a whole small file (at most `max` bytes) into a NUL-terminated
   buffer the caller frees. */
int shs__read_file(char **out, size_t *out_len, const char *path, size_t max);
/* The same, refusing a symbolic link as the last component ("is a
   symbolic link"): files inside a step directory and the tracker are read
   this way, so that a link never makes a checkpoint read bytes from
   elsewhere. */
int shs__read_file_nofollow(char **out, size_t *out_len, const char *path, size_t max);
/* Random hex suffix for temporary names (not cryptographic). */
void shs__random_suffix(char out[17]);

#endif
