/*
 * snapshot.h -- the copy-free async snapshot (docs/checkpoint.md, "Async
 * save"): instead of copying the state into staging memory, an async save
 * write-protects the registered tensors with userfaultfd and the
 * background writer reads them where they are.  A page the training step
 * writes before the save has read it is copied first, by a fault-handling
 * thread, into a side buffer; the write then goes ahead.  The save reads
 * every byte through shs__snap_read, which takes the side copy where there
 * is one.
 *
 * Only the whole pages inside each tensor are protected: the partial pages
 * at a tensor's ends (which may hold the allocator's or the program's other
 * data) are copied when the snapshot is taken, so the protected memory holds
 * tensor bytes only and nothing else of the process ever waits on it.
 *
 * Needs Linux's userfaultfd with write-protect faults (5.7+, features
 * checked at run time) and the right to use it (CAP_SYS_PTRACE, or
 * vm.unprivileged_userfaultfd = 1, or access to /dev/userfaultfd); the
 * tensors must be private anonymous memory (malloc, numpy, PyTorch CPU
 * tensors).  Where any of that is missing, shs__snap_create or
 * shs__snap_begin fails and the manager copies instead.
 */
#ifndef SHS_SNAPSHOT_H
#define SHS_SNAPSHOT_H

#include "checkpoint/state.h"

typedef struct shs__snap shs__snap;

/* Open a userfaultfd and start its fault-handling thread.  SHS_EUNSUPPORTED
   (with the reason as the message) when the kernel or the process's rights
   do not allow it. */
int shs__snap_create(shs__snap **out);
void shs__snap_free(shs__snap *s);

/* Take the snapshot of the tensors of `st` (the optimizer's only with
   `with_optim`): copy their partial edge pages, then
   register and write-protect their whole pages.  On failure nothing stays
   protected and the caller copies instead (SHS_EUNSUPPORTED: this memory cannot
   be protected, e.g. a file mapping). */
int shs__snap_begin(shs__snap *s, const shs_state *st, int with_optim);
/* Whether the state's memory can be registered (shs__snap_begin would not
   fail on its kind of memory); nothing is protected. */
int shs__snap_probe(shs__snap *s, const shs_state *st);

/* Write-protecting costs one page-table entry per page: on small pages
   about 0.1 s per GiB, on transparent huge pages 1/512 of that.  The
   manager plans (at create: the 2 MiB-aligned insides of the tensors, as
   ranges[2k], ranges[2k + 1]) and applies in its background thread
   MADV_HUGEPAGE and MADV_COLLAPSE (Linux 6.1) to them, until `stop(ctx)`
   (a save is queued).  Advice only: where the kernel declines, the pages
   stay small. */
int shs__snap_huge_plan(uint64_t **ranges, size_t *n, const shs_state *st);
void shs__snap_huge_apply(const uint64_t *ranges, size_t n, int (*stop)(void *), void *ctx);

/* Copy bytes [off, off + len) of tensor i as they were at shs__snap_begin
   into dst.  Fails (SHS_ENOMEM) if a page written during the save could not
   be kept. */
int shs__snap_read(shs__snap *s, size_t i, uint64_t off, void *dst, size_t len);
/* Tensor i is read for the last time: once every tensor sharing its pages
   is, they are un-protected and their copies dropped.  Pages written after
   that cost nothing. */
void shs__snap_done(shs__snap *s, size_t i);
/* Un-protect everything and drop the copies (idempotent; after the save
   has read every byte it needs). */
void shs__snap_end(shs__snap *s);
/* Of the last snapshot: bytes of pages copied because they were written,
   and the peak of the memory it took besides the state. */
void shs__snap_stats(shs__snap *s, uint64_t *copied, uint64_t *extra);

#endif
