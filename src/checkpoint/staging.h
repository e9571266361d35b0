/*
 * staging.h -- the memory an async save copies the state into (manager.c):
 * allocated once per layout of the state, 2 MiB aligned and advised for
 * transparent huge pages, and faulted in by the manager's background
 * thread, so that no save pays the page faults of its first touch.
 */
#ifndef SHS_STAGING_H
#define SHS_STAGING_H

#include <stdint.h>

typedef struct shs__staging {
    void *mem;               /* the shs__malloc'd block (NULL: none) */
    char *base;              /* its aligned start */
    uint64_t bytes;          /* usable from base */
    uint64_t huge_bytes;     /* of which backed by huge pages (after prefault) */
    double prefault_seconds; /* time shs__staging_prefault took */
} shs__staging;

/* Allocate `bytes` (not touched yet); a block of 2 MiB or more is 2 MiB
   aligned and advised MADV_HUGEPAGE.  bytes 0: nothing. */
int shs__staging_alloc(shs__staging *s, uint64_t bytes);
/* Whether the kernel faults pages in without writing them
   (MADV_POPULATE_WRITE, Linux 5.14): then a snapshot may copy into the
   memory while shs__staging_prefault runs; else it must wait for it. */
int shs__staging_can_populate(shs__staging *s);
/* Fault every page in (MADV_POPULATE_WRITE, or by writing zeros where the
   kernel lacks it) and record how much the kernel backed with huge pages.
   Runs in the manager's thread; `stop(ctx)` (may be NULL), asked between
   chunks, ends it early (returns 0; the rest faults in when first copied
   into). */
int shs__staging_prefault(shs__staging *s, int (*stop)(void *), void *ctx);
void shs__staging_release(shs__staging *s);

/* Bytes of [addr, addr + len) that the kernel backs by transparent huge
   pages (AnonHugePages of /proc/self/smaps); 0 when it cannot tell. */
uint64_t shs__huge_bytes(const void *addr, uint64_t len);

#endif
