/* snapshot.c -- the copy-free async snapshot over userfaultfd (snapshot.h). */
#include "checkpoint/snapshot.h"

#include "common/internal.h"
#include "store/io.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__linux__) && defined(SYS_userfaultfd) && __has_include(<linux/userfaultfd.h>)
#include <linux/userfaultfd.h>
#if defined(UFFDIO_WRITEPROTECT) && defined(UFFD_FEATURE_PAGEFAULT_FLAG_WP)
#define HAVE_UFFD_WP 1
#endif
#endif

#ifdef HAVE_UFFD_WP
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13) /* Linux 6.4 */
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif
#define HUGE ((uintptr_t)2 << 20)

/* ThreadSanitizer cannot see that a page is only written after the fault
   handler made its copy and lifted the protection (the ordering goes
   through the kernel), so the reads of the protected memory -- which the
   protection orders before any write -- are hidden from it. */
#if defined(__SANITIZE_THREAD__)
#define SNAP_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SNAP_TSAN 1
#endif
#endif
#ifdef SNAP_TSAN
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
#define READS_HIDDEN_BEGIN() AnnotateIgnoreReadsBegin(__FILE__, __LINE__)
#define READS_HIDDEN_END() AnnotateIgnoreReadsEnd(__FILE__, __LINE__)
#else
#define READS_HIDDEN_BEGIN() ((void)0)
#define READS_HIDDEN_END() ((void)0)
#endif

#define WINDOW (64u << 10) /* bytes read under one hold of the lock */

typedef struct snap_tensor {
    const char *data;
    uint64_t nbytes;
    uint64_t head, tail; /* [0, head) and [tail, nbytes) are in edge */
    char *edge;          /* head bytes, then nbytes - tail bytes */
    long region;         /* the region of its whole pages, or -1 */
    int done;            /* read for the last time (shs__snap_done) */
} snap_tensor;

typedef struct region {
    uintptr_t start, end; /* page aligned */
    char **slot;          /* per page: its copy, or NULL */
    size_t pending;       /* tensors in it not done yet; 0: unprotected */
} region;

struct shs__snap {
    int uffd, stopfd;
    int wp_unpopulated;
    size_t page;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu; /* everything below; held by the handler per fault and by
                           a reader per window */
    int active, failed;
    snap_tensor *t;
    size_t nt;
    region *r;
    size_t nr;
    char *edges;
    uint64_t copied, extra, extra_peak;
};

/* The region holding address a, or NULL. */
static region *find_region(shs__snap *s, uintptr_t a)
{
    size_t lo = 0, hi = s->nr;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a < s->r[mid].start)
            hi = mid;
        else if (a >= s->r[mid].end)
            lo = mid + 1;
        else
            return &s->r[mid];
    }
    return NULL;
}

static void add_extra(shs__snap *s, uint64_t n)
{
    s->extra += n;
    if (s->extra > s->extra_peak)
        s->extra_peak = s->extra;
}

/* A write fault on a protected page: keep the page as it is, then let the
   write go ahead. */
static void on_fault(shs__snap *s, uintptr_t addr)
{
    uintptr_t pg = addr & ~(uintptr_t)(s->page - 1);
    pthread_mutex_lock(&s->mu);
    region *r = s->active ? find_region(s, pg) : NULL;
    if (r && !r->pending)
        r = NULL; /* released while this fault was queued */
    if (r) {
        char **slot = &r->slot[(pg - r->start) / s->page];
        if (!*slot) {
            char *copy = shs__malloc(s->page);
            if (copy) {
                READS_HIDDEN_BEGIN();
                memcpy(copy, (const void *)pg, s->page);
                READS_HIDDEN_END();
                *slot = copy;
                s->copied += s->page;
                add_extra(s, s->page);
            } else {
                s->failed = 1; /* the save fails rather than write changed bytes */
            }
        }
        struct uffdio_writeprotect wp = { { pg, s->page }, 0 };
        ioctl(s->uffd, UFFDIO_WRITEPROTECT, &wp);
    } else {
        /* a fault queued before the snapshot ended: its range is no longer
           protected; make sure the writer is awake */
        struct uffdio_range wr = { pg, s->page };
        ioctl(s->uffd, UFFDIO_WAKE, &wr);
    }
    pthread_mutex_unlock(&s->mu);
}

static void *handler_main(void *arg)
{
    shs__snap *s = arg;
    for (;;) {
        struct pollfd p[2] = { { s->uffd, POLLIN, 0 }, { s->stopfd, POLLIN, 0 } };
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[1].revents)
            break;
        struct uffd_msg msg[16];
        ssize_t n = read(s->uffd, msg, sizeof msg);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                continue;
            break;
        }
        for (size_t k = 0; k < (size_t)n / sizeof msg[0]; k++)
            if (msg[k].event == UFFD_EVENT_PAGEFAULT)
                on_fault(s, (uintptr_t)msg[k].arg.pagefault.address);
    }
    return NULL;
}

/* A userfaultfd, by the system call or, where that is not permitted,
   through /dev/userfaultfd (Linux 6.1: allowed by the device's file mode);
   -1 with errno of the system call.  Not with UFFD_USER_MODE_ONLY: then a
   system call writing into a protected tensor (read(2) into it) would fail
   with EFAULT instead of waiting for the handler. */
static int open_uffd(void)
{
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0)
        return fd;
    int e = errno;
#ifdef USERFAULTFD_IOC_NEW
    int dev = shs__io->open("/dev/userfaultfd", O_RDWR | O_CLOEXEC, 0);
    if (dev >= 0) {
        fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
        shs__io->close(dev);
        if (fd >= 0)
            return fd;
    }
#endif
    errno = e;
    return -1;
}

int shs__snap_create(shs__snap **out)
{
    *out = NULL;
    int fd = open_uffd();
    if (fd < 0)
        return shs__err(SHS_EUNSUPPORTED,
                        "userfaultfd is not permitted (%s): it needs CAP_SYS_PTRACE, "
                        "vm.unprivileged_userfaultfd = 1 or access to /dev/userfaultfd",
                        strerror(errno));
    /* the features on offer, then a second descriptor asking for the ones
       used (the handshake is once per descriptor) */
    struct uffdio_api api = { UFFD_API, 0, 0 };
    int ok = ioctl(fd, UFFDIO_API, &api) == 0;
    close(fd);
    uint64_t have = api.features;
    if (!ok || !(have & UFFD_FEATURE_PAGEFAULT_FLAG_WP))
        return shs__err(SHS_EUNSUPPORTED,
                        "userfaultfd has no write-protect faults on this kernel (Linux 5.7+)");
    shs__snap *s = shs__calloc(1, sizeof *s);
    if (!s)
        return shs__err(SHS_ENOMEM, "out of memory");
    s->stopfd = -1;
    s->page = (size_t)sysconf(_SC_PAGESIZE);
    pthread_mutex_init(&s->mu, NULL);
    s->uffd = open_uffd();
    api = (struct uffdio_api){
        UFFD_API, UFFD_FEATURE_PAGEFAULT_FLAG_WP | (have & UFFD_FEATURE_WP_UNPOPULATED), 0
    };
    if (s->uffd < 0 || ioctl(s->uffd, UFFDIO_API, &api) != 0) {
        int e = errno;
        shs__snap_free(s);
        return shs__err(SHS_EUNSUPPORTED, "userfaultfd: cannot enable write-protect faults: %s",
                        strerror(e));
    }
    s->wp_unpopulated = (api.features & UFFD_FEATURE_WP_UNPOPULATED) != 0;
    if ((s->stopfd = eventfd(0, EFD_CLOEXEC)) < 0) {
        int e = errno;
        shs__snap_free(s);
        return shs__err(SHS_EIO, "cannot create an eventfd: %s", strerror(e));
    }
    /* the handler takes none of the program's signals */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int prc = pthread_create(&s->thread, NULL, handler_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (prc != 0) {
        shs__snap_free(s);
        return shs__err(SHS_EIO, "cannot start the snapshot's fault-handling thread");
    }
    s->thread_started = 1;
    *out = s;
    return SHS_OK;
}

static void release_snapshot(shs__snap *s)
{
    for (size_t k = 0; k < s->nr; k++) {
        size_t np = (s->r[k].end - s->r[k].start) / s->page;
        for (size_t p = 0; s->r[k].slot && p < np; p++)
            shs__free(s->r[k].slot[p]);
        shs__free(s->r[k].slot);
    }
    shs__free(s->r);
    shs__free(s->t);
    shs__free(s->edges);
    s->r = NULL;
    s->t = NULL;
    s->edges = NULL;
    s->nr = s->nt = 0;
    s->active = 0;
}

/* Lift the protection of regions [0, n) and unregister them. */
static void unprotect(shs__snap *s, size_t n, size_t n_protected)
{
    for (size_t k = 0; k < n; k++) {
        struct uffdio_range rg = { s->r[k].start, s->r[k].end - s->r[k].start };
        if (k < n_protected && s->r[k].pending) {
            struct uffdio_writeprotect wp = { rg, 0 };
            ioctl(s->uffd, UFFDIO_WRITEPROTECT, &wp);
        }
        ioctl(s->uffd, UFFDIO_UNREGISTER, &rg);
    }
}

void shs__snap_done(shs__snap *s, size_t i)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    snap_tensor *t = s->active && i < s->nt ? &s->t[i] : NULL;
    if (t && t->data && !t->done) {
        t->done = 1;
        region *r = t->region >= 0 ? &s->r[t->region] : NULL;
        if (r && --r->pending == 0) {
            /* the writer has passed every tensor of these pages: the
               training step writes them freely again */
            struct uffdio_writeprotect wp = { { r->start, r->end - r->start }, 0 };
            ioctl(s->uffd, UFFDIO_WRITEPROTECT, &wp);
            size_t np = (r->end - r->start) / s->page;
            for (size_t p = 0; p < np; p++)
                if (r->slot[p]) {
                    shs__free(r->slot[p]);
                    r->slot[p] = NULL;
                    s->extra -= s->page;
                }
        }
    }
    pthread_mutex_unlock(&s->mu);
}

void shs__snap_end(shs__snap *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    if (s->active) {
        unprotect(s, s->nr, s->nr);
        release_snapshot(s);
    }
    pthread_mutex_unlock(&s->mu);
}

void shs__snap_free(shs__snap *s)
{
    if (!s)
        return;
    shs__snap_end(s);
    if (s->thread_started) {
        uint64_t one = 1;
        if (write(s->stopfd, &one, sizeof one) != (ssize_t)sizeof one)
            abort(); /* an eventfd write of 1 cannot fail */
        pthread_join(s->thread, NULL);
    }
    if (s->stopfd >= 0)
        close(s->stopfd);
    if (s->uffd >= 0)
        close(s->uffd);
    pthread_mutex_destroy(&s->mu);
    shs__free(s);
}

static int cmp_region(const void *a, const void *b)
{
    const region *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int begin(shs__snap *s, const shs_state *st, int with_optim, int probe_only);

int shs__snap_begin(shs__snap *s, const shs_state *st, int with_optim)
{
    return begin(s, st, with_optim, 0);
}

int shs__snap_probe(shs__snap *s, const shs_state *st)
{
    return begin(s, st, 1, 1);
}

static int begin(shs__snap *s, const shs_state *st, int with_optim, int probe_only)
{
    int rc = SHS_OK;
    size_t n_reg = 0, n_wp = 0;
    const uintptr_t pm = (uintptr_t)s->page - 1;
    pthread_mutex_lock(&s->mu);
    release_snapshot(s);
    s->failed = 0;
    s->copied = s->extra = s->extra_peak = 0;
    uint64_t edge_bytes = 0;
    s->t = shs__calloc(st->n + 1, sizeof *s->t);
    s->r = shs__calloc(st->n + 1, sizeof *s->r);
    if (!s->t || !s->r) {
        rc = shs__err(SHS_ENOMEM, "out of memory taking a snapshot");
        goto fail;
    }
    s->nt = st->n;
    /* each tensor: its partial pages go to the edge copy, its whole pages
       to a region */
    for (size_t i = 0; i < st->n; i++) {
        snap_tensor *t = &s->t[i];
        if (st->t[i].kind != SHS_KIND_MODEL && !with_optim)
            continue;
        t->data = st->t[i].data;
        t->nbytes = st->t[i].nbytes;
        uintptr_t a = (uintptr_t)t->data, e = a + (uintptr_t)t->nbytes;
        uintptr_t pa = (a + pm) & ~pm, pe = e & ~pm;
        if (t->nbytes == 0 || pa >= pe) {
            t->head = t->tail = t->nbytes;
        } else {
            t->head = pa - a;
            t->tail = pe - a;
            s->r[s->nr++] = (region){ pa, pe, NULL, 0 };
        }
        edge_bytes += t->head + (t->nbytes - t->tail);
    }
    if (!(s->edges = shs__malloc(edge_bytes ? (size_t)edge_bytes : 1))) {
        rc = shs__err(SHS_ENOMEM, "out of memory taking a snapshot");
        goto fail;
    }
    add_extra(s, edge_bytes + (st->n + 1) * (sizeof *s->t + sizeof *s->r));
    char *at = s->edges;
    for (size_t i = 0; i < st->n; i++) {
        snap_tensor *t = &s->t[i];
        if (!t->data)
            continue;
        t->edge = at;
        memcpy(at, t->data, (size_t)t->head);
        memcpy(at + t->head, t->data + t->tail, (size_t)(t->nbytes - t->tail));
        at += t->head + (t->nbytes - t->tail);
    }
    /* tensors sharing memory (tied weights, views) share their pages (only
       overlapping ranges merge: a region is released as soon as all of its
       tensors are written) */
    qsort(s->r, s->nr, sizeof *s->r, cmp_region);
    size_t m = 0;
    for (size_t k = 0; k < s->nr; k++) {
        if (m && s->r[k].start < s->r[m - 1].end) {
            if (s->r[k].end > s->r[m - 1].end)
                s->r[m - 1].end = s->r[k].end;
        } else {
            s->r[m++] = s->r[k];
        }
    }
    s->nr = m;
    for (size_t i = 0; i < st->n; i++) {
        snap_tensor *t = &s->t[i];
        region *r = t->data && t->head < t->tail ? find_region(s, (uintptr_t)t->data + t->head)
                                                 : NULL;
        t->region = r ? r - s->r : -1;
        if (r)
            r->pending++;
    }
    for (size_t k = 0; k < s->nr; k++) {
        size_t np = (s->r[k].end - s->r[k].start) / s->page;
        if (!(s->r[k].slot = shs__calloc(np, sizeof *s->r[k].slot))) {
            rc = shs__err(SHS_ENOMEM, "out of memory taking a snapshot");
            goto fail;
        }
        add_extra(s, np * sizeof *s->r[k].slot);
    }
    for (; n_reg < s->nr; n_reg++) {
        region *r = &s->r[n_reg];
        struct uffdio_register reg = { { r->start, r->end - r->start },
                                       UFFDIO_REGISTER_MODE_WP,
                                       0 };
        if (ioctl(s->uffd, UFFDIO_REGISTER, &reg) != 0) {
            rc = shs__err(SHS_EUNSUPPORTED,
                          "cannot write-protect the state's memory (%s): not private "
                          "anonymous memory?",
                          strerror(errno));
            goto fail;
        }
        /* without WP_UNPOPULATED a page never touched has nothing to
           protect: fault it in first (zeros, as it reads) */
        if (!s->wp_unpopulated &&
            madvise((void *)r->start, r->end - r->start, MADV_POPULATE_WRITE) != 0) {
            n_reg++;
            rc = shs__err(SHS_EUNSUPPORTED, "cannot populate the state's memory (%s)",
                          strerror(errno));
            goto fail;
        }
    }
    if (probe_only) {
        unprotect(s, n_reg, 0);
        release_snapshot(s);
        pthread_mutex_unlock(&s->mu);
        return SHS_OK;
    }
    for (; n_wp < s->nr; n_wp++) {
        struct uffdio_writeprotect wp = { { s->r[n_wp].start, s->r[n_wp].end - s->r[n_wp].start },
                                          UFFDIO_WRITEPROTECT_MODE_WP };
        if (ioctl(s->uffd, UFFDIO_WRITEPROTECT, &wp) != 0) {
            rc = shs__err(SHS_EUNSUPPORTED, "cannot write-protect the state's memory (%s)",
                          strerror(errno));
            n_wp++; /* may be partly protected */
            goto fail;
        }
    }
    s->active = 1;
    pthread_mutex_unlock(&s->mu);
    return SHS_OK;
fail:
    unprotect(s, n_reg, n_wp);
    release_snapshot(s);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int shs__snap_read(shs__snap *s, size_t i, uint64_t off, void *dst, size_t len)
{
    const snap_tensor *t = &s->t[i];
    char *out = dst;
    uint64_t end = off + len;
    /* the head and tail copies */
    if (off < t->head) {
        uint64_t k = end < t->head ? end : t->head;
        memcpy(out, t->edge + off, (size_t)(k - off));
    }
    if (end > t->tail) {
        uint64_t k = off > t->tail ? off : t->tail;
        memcpy(out + (k - off), t->edge + t->head + (k - t->tail), (size_t)(end - k));
    }
    /* the protected pages: the original where it is unwritten, else its
       copy, window by window under the lock that the handler holds while it
       copies a page and lifts its protection */
    uint64_t a = off > t->head ? off : t->head, b = end < t->tail ? end : t->tail;
    int rc = SHS_OK;
    while (a < b) {
        uint64_t w = b - a < WINDOW ? b - a : WINDOW;
        pthread_mutex_lock(&s->mu);
        if (s->failed)
            rc = shs__err(SHS_ENOMEM,
                          "out of memory keeping a page that was written during the save");
        region *r = NULL;
        for (uint64_t x = a; rc == SHS_OK && x < a + w;) {
            uintptr_t p = (uintptr_t)(t->data + x);
            uintptr_t pg = p & ~(uintptr_t)(s->page - 1);
            uint64_t piece = s->page - (p - pg);
            if (piece > a + w - x)
                piece = a + w - x;
            if (!r || pg < r->start || pg >= r->end)
                r = find_region(s, pg);
            const char *slot = r ? r->slot[(pg - r->start) / s->page] : NULL;
            READS_HIDDEN_BEGIN();
            memcpy(out + (x - off), slot ? slot + (p - pg) : (const char *)p, (size_t)piece);
            READS_HIDDEN_END();
            x += piece;
        }
        pthread_mutex_unlock(&s->mu);
        if (rc < 0)
            return rc;
        a += w;
    }
    return SHS_OK;
}

int shs__snap_huge_plan(uint64_t **ranges, size_t *n, const shs_state *st)
{
    const uintptr_t hm = HUGE - 1;
    *ranges = shs__calloc(2 * st->n + 1, sizeof **ranges);
    *n = 0;
    if (!*ranges)
        return shs__err(SHS_ENOMEM, "out of memory");
    for (size_t i = 0; i < st->n; i++) {
        uintptr_t a = (uintptr_t)st->t[i].data, e = a + (uintptr_t)st->t[i].nbytes;
        uintptr_t ha = (a + hm) & ~hm, he = e & ~hm;
        if (st->t[i].nbytes && ha < he) {
            (*ranges)[2 * *n] = ha;
            (*ranges)[2 * *n + 1] = he;
            (*n)++;
        }
    }
    return SHS_OK;
}

void shs__snap_huge_apply(const uint64_t *ranges, size_t n, int (*stop)(void *), void *ctx)
{
    for (size_t k = 0; k < n && !(stop && stop(ctx)); k++) {
        void *a = (void *)(uintptr_t)ranges[2 * k];
        size_t len = (size_t)(ranges[2 * k + 1] - ranges[2 * k]);
        /* advice and a collapse of what is already there: a failure (THP
           off, a protected range) leaves small pages, which only cost time */
        madvise(a, len, MADV_HUGEPAGE);
        madvise(a, len, MADV_COLLAPSE);
    }
}

#else /* no userfaultfd write-protect: the manager always copies */

struct shs__snap {
    int unused;
};
int shs__snap_create(shs__snap **out)
{
    *out = NULL;
    return shs__err(SHS_EUNSUPPORTED, "no userfaultfd write-protect on this platform");
}
void shs__snap_free(shs__snap *s)
{
    (void)s;
}
int shs__snap_begin(shs__snap *s, const shs_state *st, int with_optim)
{
    (void)s, (void)st, (void)with_optim;
    return shs__err(SHS_EUNSUPPORTED, "no userfaultfd write-protect on this platform");
}
int shs__snap_read(shs__snap *s, size_t i, uint64_t off, void *dst, size_t len)
{
    (void)s, (void)i, (void)off, (void)dst, (void)len;
    return shs__err(SHS_EUNSUPPORTED, "no userfaultfd write-protect on this platform");
}
void shs__snap_done(shs__snap *s, size_t i)
{
    (void)s, (void)i;
}
int shs__snap_probe(shs__snap *s, const shs_state *st)
{
    (void)s, (void)st;
    return shs__err(SHS_EUNSUPPORTED, "no userfaultfd write-protect on this platform");
}
int shs__snap_huge_plan(uint64_t **ranges, size_t *n, const shs_state *st)
{
    (void)st;
    *ranges = NULL;
    *n = 0;
    return SHS_OK;
}
void shs__snap_huge_apply(const uint64_t *ranges, size_t n, int (*stop)(void *), void *ctx)
{
    (void)ranges, (void)n, (void)stop, (void)ctx;
}
void shs__snap_end(shs__snap *s)
{
    (void)s;
}
#endif

void shs__snap_stats(shs__snap *s, uint64_t *copied, uint64_t *extra)
{
#ifdef HAVE_UFFD_WP
    *copied = *extra = 0;
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    *copied = s->copied;
    *extra = s->extra_peak;
    pthread_mutex_unlock(&s->mu);
#else
    (void)s;
    *copied = *extra = 0;
#endif
}
