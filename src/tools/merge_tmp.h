/*
 * merge_tmp.h -- the temporary output directories of shs_merge and
 * shs_reshard, and what a killed run leaves of them.
 *
 * A run builds its output in a temporary directory beside the
 * destination and renames it into place at the end; a failure removes
 * it, but a run killed (kill -9, a lost node) leaves it, full size.  So
 * each temporary directory T has a lock file "T.lock" beside it, created
 * (and locked: an OFD lock through the io seam, released by the kernel
 * when the process dies) before T and removed after T is gone.  Whoever
 * finds T later tells a live run from a killed one by that lock: locked,
 * a run is writing it; unlocked or without a lock file (a run of a
 * version before the lock files), a leftover.  The next merge or reshard
 * of the same destination removes the leftovers (taking their lock
 * first, so two runs never remove one leftover together) and
 * `shardsafe ls` lists them.
 *
 * Names, for a destination ".../B":
 *   merge          ".../B.tmp-<16 hex>"
 *   split merge    ".../B.part-I-of-N.tmp-<16 hex>"
 *   reshard        ".../.tmp-B-<16 hex>"
 * each with its ".lock".
 */
#ifndef SHS_MERGE_TMP_H
#define SHS_MERGE_TMP_H

#include "common/internal.h"

/* A temporary directory being written. */
typedef struct shs__tool_tmp {
    char *path; /* the directory */
    char *lock; /* "<path>.lock" */
    int fd;     /* the lock file, locked; -1 when none */
} shs__tool_tmp;

/* Create the lock file "<path>.lock", lock it, write who holds it, then
   create the directory `path`.  `tool` ("merge", "reshard") is recorded
   in the lock file. */
int shs__tool_tmp_make(shs__tool_tmp *t, const char *path, const char *tool);

/* Once the directory is renamed into place or removed: remove the lock
   file, release the lock, free t.  NULL members are skipped. */
void shs__tool_tmp_release(shs__tool_tmp *t);

/* The temporary directories (and stale lock files) of merges and
   reshards of destination `dst`: fn (may be NULL) is called for each;
   with `remove`, the leftovers (not the live ones) are removed first and
   fn is told so (l->removed).  A directory that cannot be listed is an
   error; a leftover that cannot be removed too. */
int shs__tool_leftovers(const char *dst, int remove, shs_tool_leftover_fn fn, void *ctx);

#endif
