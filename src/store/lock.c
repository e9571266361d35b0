/*
 * lock.c -- one writer per save path.
 *
 * Why fcntl(F_OFD_SETLK) and not flock(LOCK_EX | LOCK_NB):
 *   - Save paths often live on NFS or Lustre, shared by many hosts.  What
 *     those file systems lock across hosts is POSIX byte-range locks (NLM
 *     for NFSv3, in-protocol for NFSv4; Lustre with -o flock).  Linux
 *     emulates flock() on NFS with a whole-file byte-range lock (since
 *     2.6.12), so flock there is the same lock under another name -- but
 *     locally flock and fcntl locks ignore each other, so flock would mean
 *     one thing on ext4 and another on NFS.  A byte-range lock means the
 *     same everywhere.
 *   - OFD ("open file description") rather than classic F_SETLK: a classic
 *     lock belongs to the process, so a second manager in the same process
 *     would get it too, and closing ANY descriptor of the file (a tool in
 *     the process reading the holder's details) silently drops it.  An OFD
 *     lock belongs to our open of the file: a second open conflicts even in
 *     the same process, and only our close (or death) releases it.
 * The kernel releases the lock when the holder dies (SIGKILL included);
 * on NFS the server does when the client's lease or lockd notices.
 *
 * The lock file is created when missing and never deleted: if it were
 * unlinked while held, a newcomer would create and lock a new file of the
 * same name while an old waiter still held the unlinked one -- two holders.
 * Its content (pid, host, start time) is written after the lock is taken
 * and only informs: the lock, not the content, decides.
 */
#include "store/lock.h"

#include "store/io.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOCK_INFO_MAX 1024 /* bytes of the lock file we read */

struct shs_lock {
    int fd;
    char *path;
    dev_t dev; /* of the lock file */
    ino_t ino;
    struct shs_lock *next; /* in g_tool_locks */
};

/* The locks this process holds through shs_savepath_lock (tools such as
   prune): shs_checkpoint_remove/clean called while one of them is held
   work under it instead of failing against it (an OFD lock conflicts
   with every other open, the same process's too).  A manager's lock is
   not listed: nothing may delete under a trainer. */
static pthread_mutex_t g_tool_mu = PTHREAD_MUTEX_INITIALIZER;
static shs_lock *g_tool_locks;

int shs__is_lock_name(const char *name)
{
    return strcmp(name, SHS__LOCK_NAME) == 0;
}

void shs__lock_info_field(char *out, size_t cap, const char *text, const char *key)
{
    size_t klen = strlen(key);
    out[0] = '\0';
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len > klen && strncmp(line, key, klen) == 0 && line[klen] == ' ') {
            size_t o = 0;
            for (size_t i = klen + 1; i < len && o + 1 < cap; i++)
                if (line[i] > 0x20 && line[i] < 0x7f)
                    out[o++] = line[i];
            out[o] = '\0';
            return;
        }
        line = end ? end + 1 : NULL;
    }
}

static void parse_holder(shs_lock_holder *h, const char *text)
{
    char pid[32];
    shs__lock_info_field(pid, sizeof pid, text, "pid");
    h->pid = -1;
    if (pid[0] && strlen(pid) <= 10 && strspn(pid, "0123456789") == strlen(pid)) {
        int64_t v = 0;
        for (const char *p = pid; *p; p++)
            v = v * 10 + (*p - '0');
        h->pid = v;
    }
    shs__lock_info_field(h->host, sizeof h->host, text, "host");
    shs__lock_info_field(h->since, sizeof h->since, text, "since");
    if (h->pid < 0 && !h->host[0])
        snprintf(h->text, sizeof h->text, "an unknown process (its lock file names no holder)");
    else if (h->pid < 0)
        snprintf(h->text, sizeof h->text, "pid ? on host %s since %s", h->host,
                 h->since[0] ? h->since : "?");
    else
        snprintf(h->text, sizeof h->text, "pid %lld on host %s since %s", (long long)h->pid,
                 h->host[0] ? h->host : "?", h->since[0] ? h->since : "?");
}

/* Read the holder's details through an open descriptor of the lock file. */
static void read_holder(shs_lock_holder *h, int fd)
{
    char buf[LOCK_INFO_MAX + 1];
    size_t got = 0;
    while (got < LOCK_INFO_MAX) {
        ssize_t r = shs__io->pread(fd, buf + got, LOCK_INFO_MAX - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    buf[got] = '\0';
    parse_holder(h, buf);
}

static int lock_errno(int err, const char *what, const char *path)
{
    if (err == ENOLCK || err == ENOSYS || err == EOPNOTSUPP || err == EINVAL)
        return shs__err(SHS_EUNSUPPORTED,
                        "cannot lock '%s': %s: the file system does not "
                        "support locks (NFSv3 needs lockd, Lustre the mount option -o flock)",
                        path, strerror(err));
    if (err == ELOOP)
        return shs__err(SHS_EINVAL, "lock file '%s' is a symbolic link: refusing to follow it",
                        path);
    if (err == EISDIR)
        return shs__err(SHS_EINVAL, "lock file '%s' is not a regular file", path);
    return shs__err_errno(err, what, path);
}

static int write_info(int fd, const char *path)
{
    char host[256], since[32], text[400];
    struct tm tm;
    time_t now = time(NULL);
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    if (!gmtime_r(&now, &tm) || !strftime(since, sizeof since, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(since, sizeof since, "?");
    int n = snprintf(text, sizeof text, "pid %lld\nhost %s\nsince %s\n", (long long)getpid(), host,
                     since);
    if (n < 0 || (size_t)n >= sizeof text)
        n = (int)strlen(text);
    /* stale details of a dead holder go first */
    if (shs__io->ftruncate(fd, 0) != 0)
        return shs__err_errno(errno, "cannot write lock file", path);
    return shs__io_pwrite_full(fd, text, (size_t)n, 0, path);
}

int shs__savepath_lock_take(shs_lock **out, const char *save_path, int create_dir)
{
    shs_lock *lk = NULL;
    struct stat st;
    int rc, fd = -1;
    if (!out || !save_path || !*save_path)
        return shs__err(SHS_EINVAL, "shs_savepath_lock: NULL or empty argument");
    *out = NULL;
    if (create_dir) {
        if ((rc = shs__mkdirs(save_path, 0755)) < 0)
            return rc;
    } else if (shs__io->stat(save_path, &st) != 0) {
        return errno == ENOENT ? shs__err(SHS_ENOENT, "save path '%s' does not exist", save_path)
                               : shs__err_errno(errno, "cannot stat save path", save_path);
    } else if (!S_ISDIR(st.st_mode)) {
        return shs__err(SHS_EINVAL, "save path '%s' is not a directory", save_path);
    }
    if (!(lk = shs__calloc(1, sizeof *lk)) ||
        !(lk->path = shs__path_join(save_path, SHS__LOCK_NAME))) {
        rc = shs__err(SHS_ENOMEM, "out of memory locking %s", save_path);
        goto done;
    }
    lk->fd = -1;
    /* no O_TRUNC: until we hold the lock, the details are the holder's */
    fd = shs__io->open(lk->path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0) {
        rc = lock_errno(errno, "cannot open lock file", lk->path);
        goto done;
    }
    if (shs__io->fstat(fd, &st) != 0) {
        rc = shs__err_errno(errno, "cannot stat lock file", lk->path);
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = shs__err(SHS_EINVAL, "lock file '%s' is not a regular file", lk->path);
        goto done;
    }
    if (shs__io->lock(fd, 0) != 0) {
        int e = errno;
        if (e == EAGAIN || e == EACCES) {
            shs_lock_holder h;
            memset(&h, 0, sizeof h);
            read_holder(&h, fd);
            rc = shs__err(SHS_ELOCKED,
                          "save path %s is locked by %s: another job writes there "
                          "(lock file %s)",
                          save_path, h.text, lk->path);
        } else {
            rc = lock_errno(e, "cannot lock", lk->path);
        }
        goto done;
    }
    if ((rc = write_info(fd, lk->path)) < 0)
        goto done;
    lk->dev = st.st_dev;
    lk->ino = st.st_ino;
    lk->fd = fd;
    fd = -1;
    *out = lk;
    lk = NULL;
done:
    if (fd >= 0)
        shs__io->close(fd); /* drops the lock if we took it */
    shs_lock_free(lk);
    return rc;
}

int shs_savepath_lock(shs_lock **out, const char *save_path)
{
    int rc = shs__savepath_lock_take(out, save_path, 0);
    if (rc == SHS_OK) {
        pthread_mutex_lock(&g_tool_mu);
        (*out)->next = g_tool_locks;
        g_tool_locks = *out;
        pthread_mutex_unlock(&g_tool_mu);
    }
    return rc;
}

int shs__savepath_lock_for_tool(shs_lock **out, const char *save_path)
{
    struct stat st;
    int held_here = 0;
    char *path = save_path ? shs__path_join(save_path, SHS__LOCK_NAME) : NULL;
    *out = NULL;
    if (!path)
        return shs__err(SHS_ENOMEM, "out of memory locking %s", save_path);
    if (shs__io->stat(path, &st) == 0) {
        pthread_mutex_lock(&g_tool_mu);
        for (const shs_lock *l = g_tool_locks; l && !held_here; l = l->next)
            held_here = l->dev == st.st_dev && l->ino == st.st_ino;
        pthread_mutex_unlock(&g_tool_mu);
    }
    shs__free(path);
    return held_here ? SHS_OK : shs__savepath_lock_take(out, save_path, 0);
}

void shs_lock_free(shs_lock *lk)
{
    if (!lk)
        return;
    pthread_mutex_lock(&g_tool_mu);
    for (shs_lock **pp = &g_tool_locks; *pp; pp = &(*pp)->next)
        if (*pp == lk) {
            *pp = lk->next;
            break;
        }
    pthread_mutex_unlock(&g_tool_mu);
    /* closing our open file description is the unlock; the file stays */
    if (lk->fd >= 0)
        shs__io->close(lk->fd);
    shs__free(lk->path);
    shs__free(lk);
}

int shs_savepath_lock_holder(shs_lock_holder *out, const char *save_path)
{
    char *path = NULL;
    struct stat st;
    int rc = SHS_OK, fd = -1;
    if (!out || !save_path || !*save_path)
        return shs__err(SHS_EINVAL, "shs_savepath_lock_holder: NULL or empty argument");
    memset(out, 0, sizeof *out);
    out->pid = -1;
    snprintf(out->text, sizeof out->text, "nobody");
    if (!(path = shs__path_join(save_path, SHS__LOCK_NAME))) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    fd = shs__io->open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0);
    if (fd < 0) {
        if (errno != ENOENT && errno != ENOTDIR)
            rc = lock_errno(errno, "cannot open lock file", path);
        goto done;
    }
    if (shs__io->fstat(fd, &st) != 0) {
        rc = shs__err_errno(errno, "cannot stat lock file", path);
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = shs__err(SHS_EINVAL, "lock file '%s' is not a regular file", path);
        goto done;
    }
    /* ask without taking it: taking it even briefly would make a manager
       starting at that moment fail */
    if (shs__io->lock(fd, 1) != 0) {
        if (errno != EAGAIN && errno != EACCES) {
            rc = lock_errno(errno, "cannot test the lock", path);
            goto done;
        }
        out->held = 1;
    }
    read_holder(out, fd);
done:
    if (fd >= 0)
        shs__io->close(fd);
    shs__free(path);
    return rc;
}
