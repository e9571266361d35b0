/*
 * lock.h -- one writer per save path: the advisory lock a saving manager
 * (and a deleting tool) holds on <save_path>/.shardsafe.lock.
 */
#ifndef SHS_LOCK_H
#define SHS_LOCK_H

#include "common/internal.h"

/* The lock file's name inside a save path.  It is not a leftover: cleanup
   and listings must never delete or report it (deleting it while held
   would let a second writer lock a new file of the same name). */
#define SHS__LOCK_NAME SHS_SAVEPATH_LOCK_NAME

/* Copy the value of `key` from the "key value" lines of `text` (a lock
   file, a lease object: anyone's to write) into out, keeping printable
   ASCII only; "" when absent. */
void shs__lock_info_field(char *out, size_t cap, const char *text, const char *key);

/* Nonzero when `name` (an entry of a save path) is the lock file. */
int shs__is_lock_name(const char *name);

/* shs_savepath_lock, and with create_dir the save path is created first
   (mkdir -p), as a manager does before its first save. */
int shs__savepath_lock_take(shs_lock **out, const char *save_path, int create_dir);

/* For a deleting entry point (shs_checkpoint_remove/clean): SHS_OK with
   *out NULL when this process holds the save path's lock through
   shs_savepath_lock already; else shs_savepath_lock's outcome (the caller
   unlocks *out). */
int shs__savepath_lock_for_tool(shs_lock **out, const char *save_path);

#endif
