/* staging.c -- async staging memory (staging.h). */
#include "checkpoint/staging.h"

#include "common/internal.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define HUGE_PAGE (2u << 20)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
#endif

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int shs__staging_alloc(shs__staging *s, uint64_t bytes)
{
    memset(s, 0, sizeof *s);
    if (!bytes)
        return SHS_OK;
    /* large blocks get 2 MiB of slack so that their start can be moved to
       a huge-page boundary: a huge page is only used for an aligned 2 MiB
       of the range */
    int huge = bytes >= HUGE_PAGE;
    uint64_t whole = huge ? ((bytes + HUGE_PAGE - 1) & ~(uint64_t)(HUGE_PAGE - 1)) + HUGE_PAGE
                          : bytes;
    if (whole > SIZE_MAX || !(s->mem = shs__malloc((size_t)whole)))
        return shs__err(SHS_ENOMEM, "out of memory for %" PRIu64 " bytes of async staging buffers",
                        bytes);
    uintptr_t at = (uintptr_t)s->mem;
    if (huge) {
        at = (at + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
        /* advice only: a kernel without THP (or with it disabled) keeps
           small pages and the memory works the same */
        madvise((void *)at, (size_t)(whole - HUGE_PAGE), MADV_HUGEPAGE);
    }
    s->base = (char *)at;
    s->bytes = bytes;
    return SHS_OK;
}

int shs__staging_can_populate(shs__staging *s)
{
    if (!s->bytes)
        return 1;
    uintptr_t a = (uintptr_t)s->base & ~(uintptr_t)4095;
    return madvise((void *)a, 4096, MADV_POPULATE_WRITE) == 0;
}

int shs__staging_prefault(shs__staging *s, int (*stop)(void *), void *ctx)
{
    if (!s->bytes)
        return 1;
    double t0 = now_s();
    /* MADV_POPULATE_WRITE faults the pages in writable without writing
       them -- so a snapshot may copy into pages faulted here at the same
       time -- in chunks, between which a save that came early stops it (its
       copy faults in the rest); it wants page-aligned bounds */
    const uintptr_t chunk = (uintptr_t)32 << 20;
    uintptr_t a = (uintptr_t)s->base & ~(uintptr_t)4095;
    uintptr_t b = ((uintptr_t)s->base + (uintptr_t)s->bytes + 4095) & ~(uintptr_t)4095;
    int done = 1;
    for (uintptr_t at = a; at < b; at += chunk) {
        uintptr_t len = b - at < chunk ? b - at : chunk;
        if (stop && stop(ctx)) {
            done = 0;
            break;
        }
        if (madvise((void *)at, len, MADV_POPULATE_WRITE) != 0) {
            /* an older kernel: zeros, which no snapshot may overlap (the
               manager's saves wait for this, shs__staging_can_populate) */
            memset(s->base, 0, (size_t)s->bytes);
            break;
        }
    }
    s->huge_bytes = shs__huge_bytes(s->base, s->bytes);
    s->prefault_seconds = now_s() - t0;
    return done;
}

void shs__staging_release(shs__staging *s)
{
    shs__free(s->mem);
    memset(s, 0, sizeof *s);
}

/* The whole of a /proc file (its size is unknown beforehand); NULL when it
   cannot be read.  Not through the io seam: this is the kernel's report on
   the process, not storage, read by the background thread at a time of its
   own -- through the seam it would shift the call counts by which the tests
   inject faults into the checkpoint's files. */
static char *read_proc(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = shs__malloc(cap + 1);
    while (buf) {
        ssize_t r = read(fd, buf + n, cap - n);
        if (r <= 0) {
            if (r < 0) {
                shs__free(buf);
                buf = NULL;
            }
            break;
        }
        n += (size_t)r;
        if (n == cap) {
            char *nb = cap <= SIZE_MAX / 4 ? shs__realloc(buf, cap * 2 + 1) : NULL;
            if (!nb) {
                shs__free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    close(fd);
    if (buf) {
        buf[n] = '\0';
        *len = n;
    }
    return buf;
}

uint64_t shs__huge_bytes(const void *addr, uint64_t len)
{
    size_t n;
    char *text = read_proc("/proc/self/smaps", &n);
    if (!text)
        return 0;
    uintptr_t lo = (uintptr_t)addr, hi = lo + (uintptr_t)len;
    uint64_t total = 0;
    int inside = 0;
    /* a mapping's header line "start-end perms ..." is followed by its
       "Key: value kB" lines; AnonHugePages counts its huge pages */
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        unsigned long long v0, v1;
        char dash;
        if (sscanf(line, "%llx%c%llx", &v0, &dash, &v1) == 3 && dash == '-') {
            inside = v0 < hi && v1 > lo;
        } else if (inside && strncmp(line, "AnonHugePages:", 14) == 0) {
            unsigned long long kb = strtoull(line + 14, NULL, 10);
            total += (uint64_t)kb * 1024;
        }
        line = nl ? nl + 1 : NULL;
    }
    shs__free(text);
    /* a huge page of a mapping that only partly overlaps is counted whole */
    return total < len ? total : len;
}
