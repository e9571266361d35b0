/*
 * stepdir.h -- names in a save path and their maintenance: the step
 * directory names (iteration_%08d, and torchtitan's step-N read too), the
 * tracker file, the leftovers of failed saves, listing, removing and
 * cleaning.  Everything that spells or recognizes one of these names lives
 * in stepdir.c, so the spelling has one definition.
 */
#ifndef SHS_STEPDIR_H
#define SHS_STEPDIR_H

#include "internal.h"

/* The tracker: the committed step, in decimal, optionally one newline. */
#define SHS__TRACKER "latest_checkpointed_iteration.txt"

/* Prefixes of the leftovers a crash may leave in a save path: a save's
   temporary directory, a step renamed away before deletion (garbage), and
   a committed step displaced by a re-save of the same step where the file
   system has no RENAME_EXCHANGE (".replaced-iteration_%08d-<random>": a
   complete step that cleanup restores when its name is free). */
#define SHS__TMP_PREFIX ".tmp-"
#define SHS__TRASH_PREFIX ".trash-"
#define SHS__REPLACED_PREFIX ".replaced-"

/* "iteration_%08lld": the name this library gives step directories.
   Returns what snprintf returns. */
int shs__step_dir_name(char *buf, size_t cap, int64_t step);

/* "step-%lld": torchtitan's name, read and removed but never written. */
int shs__step_dir_alt_name(char *buf, size_t cap, int64_t step);

/* <save_path>/iteration_%08lld (caller frees); NULL when out of memory. */
char *shs__step_dir_path(const char *save_path, int64_t step);

/* <save_path>/<SHS__TRACKER> (caller frees); NULL when out of memory. */
char *shs__tracker_path(const char *save_path);

/* Step of a directory name "iteration_%08d" or "step-N"; -1 otherwise. */
int64_t shs__step_of_name(const char *name);

/* Two "is this a step directory" checks, kept apart on purpose:
   - is_complete: metadata.json AND common.json are regular files (1), or
     not (0), or a status < 0 when stat fails otherwise than ENOENT.  Used
     when listing a save path: only a finished save counts as a step.
   - has_metadata: metadata.json exists (any file type): 1, 0, or a
     status < 0 when lstat fails otherwise than ENOENT.  Used when a path
     is given to open, resolve or load: it is then a step directory, not a
     save path or a plain directory of safetensors files. */
int shs__step_dir_is_complete(const char *dir);
int shs__step_dir_has_metadata(const char *dir);

/* A leftover of a failed save: .tmp-*, .trash-*, .replaced-* or the
   tracker's temp. */
int shs__is_leftover_name(const char *name);

/* "<save_path>/.replaced-iteration_%08d-<random>" (caller frees), where
   commit_dir parks the committed step it replaces; NULL when out of
   memory. */
char *shs__replaced_path(const char *save_path, int64_t step);

/* Delete a leftover `path` in save_path: renamed to a .trash- name first
   when it is not one already, so that a crash mid-delete never leaves a
   partial directory under a name that cleanup would restore. */
int shs__discard(const char *save_path, const char *path);

/* The step directory of the given name exists (lstat succeeds): 1; it
   does not (ENOENT): 0; any other error: a status < 0. */
int shs__entry_exists(const char *path);

/* A file name ending in ".safetensors". */
int shs__is_safetensors_name(const char *name);

/* Committed steps in a save path, ascending (caller frees *out). */
int shs__list_steps(int64_t **out, size_t *n, const char *save_path);

/* Read the tracker: SHS_ENOENT when absent, SHS_ECORRUPT when malformed. */
int shs__read_tracker(int64_t *step, const char *save_path);

/* Replace the tracker at `tracker` (from shs__tracker_path) atomically
   with `step`.  The path is computed by the caller so that a save can
   fail for lack of memory before it commits anything. */
int shs__write_tracker(const char *tracker, int64_t step, int do_fsync);

/* Remove a committed step directory safely (rename away, then delete). */
int shs__remove_step(const char *save_path, int64_t step);

/* Clean a save path after a crash: first every .replaced-iteration_N-*
   holding a complete step whose iteration_N is absent is renamed back to
   iteration_N (a re-save interrupted between its two renames: the
   tracker may name that step), then the other leftovers (.tmp-*,
   .trash-*, .replaced-* whose step exists, tracker temporaries) are
   deleted.  The lock file is never touched. */
int shs__clean_leftovers(const char *save_path);

#endif
