/*
 * stepdir.h -- names in a save path: the step directory names
 * (iteration_%08d, and torchtitan's step-N read too), the tracker file,
 * the leftovers of failed saves, and the primitive operations on them
 * (tracker read/write, removing a step, discarding a leftover).
 * Everything that spells or recognizes one of these names lives in
 * stepdir.c, so the spelling has one definition; what the entries of a
 * save path MEAN (committed steps, the directory of each) is
 * savepath.h's.
 */
#ifndef SHS_STEPDIR_H
#define SHS_STEPDIR_H

#include "common/internal.h"

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

/* The export at train end (last_save_in_hf): "hf-iteration_%08lld"
   beside the step directories; shs_merge's temporaries of it
   ("hf-<step>.tmp-*", ".part-*", ".old-*") are leftovers. */
#define SHS__EXPORT_PREFIX "hf-"
int shs__export_dir_name(char *buf, size_t cap, int64_t step);

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

/* Read the tracker: SHS_ENOENT only when absent, SHS_ECORRUPT when
   malformed, the errno's status for any other failure. */
int shs__read_tracker(int64_t *step, const char *save_path);

/* Replace the tracker at `tracker` (from shs__tracker_path) atomically
   with `step`.  The path is computed by the caller so that a save can
   fail for lack of memory before it commits anything. */
int shs__write_tracker(const char *tracker, int64_t step, int do_fsync);

/* Remove entry `name` of a save path safely (renamed to a .trash- name,
   then deleted).  An entry that is a symbolic link is never removed
   (SHS_EINVAL): what it points to is outside the save path's control.
   Absent: SHS_OK. */
int shs__remove_entry(const char *save_path, const char *name);

#endif
