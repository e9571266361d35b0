/*
 * savepath.h -- the one reading of a save path (savepath.c): which of its
 * entries are committed steps, which step directory a load of step N
 * reads, what the tracker says, what is a leftover.  Resume, verify, ls,
 * prune, retention, the read API and cleanup all ask here, so that none
 * of them calls an entry something another one does not.
 *
 * The rule for a re-save's parked copy: a ".replaced-iteration_N-*"
 * holding a complete step while iteration_N does not exist (a re-save
 * without RENAME_EXCHANGE killed between its two renames) IS step N:
 * loads read it, verify checks it, ls lists it as step N (parked), and
 * the next start (or shs_checkpoint_clean) renames it back.  When several
 * are parked for one step, the first by name is the one.
 */
#ifndef SHS_SAVEPATH_H
#define SHS_SAVEPATH_H

#include "common/internal.h"

/* One entry of a save path, as the public shs_savepath_item says it. */
typedef struct shs__sp_entry {
    char *name;
    shs_savepath_entry kind;
    int64_t step; /* STEP, EXPORT (and a parked copy): its step; else -1 */
    int complete; /* STEP: metadata.json and common.json as regular files
                      (or a single-card MindSpore save) */
    int selected; /* STEP: THE directory of its step (what loads read) */
    int parked;   /* a .replaced- copy that is its step's directory */
    int latest;   /* the selected directory of the tracker's step */
} shs__sp_entry;

typedef struct shs__sp {
    char *path;
    shs__sp_entry *e; /* sorted by name */
    size_t n;
    int tracker_rc;       /* SHS_OK, SHS_ENOENT, or the tracker's error */
    int64_t tracker_step; /* when tracker_rc is SHS_OK */
    char tracker_msg[512];
} shs__sp;

/* Read a save path: every entry classified, and with `with_tracker` the
   tracker read (its failure kept in tracker_rc; without, tracker_rc is
   SHS_ENOENT).  A path that does not exist is SHS_ENOENT; any other
   failure its errno. */
int shs__sp_scan(shs__sp *sp, const char *save_path, int with_tracker);
void shs__sp_release(shs__sp *sp);

/* The committed steps, ascending, distinct (caller frees *out). */
int shs__sp_steps(const shs__sp *sp, int64_t **out, size_t *n);
/* The selected entry of `step`, or NULL. */
const shs__sp_entry *shs__sp_find(const shs__sp *sp, int64_t step);

/* Shorthands over one scan. */
int shs__list_steps(int64_t **out, size_t *n, const char *save_path);
/* *out = the directory loads read for committed step `step` (caller
   frees); SHS_ENOCHECKPOINT naming the save path when there is none. */
int shs__step_dir_find(char **out, const char *save_path, int64_t step);

/* Remove the directory of committed step `step` (shs__sp_find's; a
   second directory of the step, a step-N beside its iteration_N, becomes
   the step's and goes with a second call).  No such step: SHS_OK. */
int shs__remove_step(const char *save_path, int64_t step);

/* A step directory is complete: metadata.json and common.json are
   regular files, or it is a single-card MindSpore save (common.json and
   files that say so).  *yes; errors other than "absent" fail. */
int shs__step_dir_complete(const char *dir, int *yes);

/* Clean a save path after a crash: every parked copy that is its step's
   directory is renamed back to iteration_N, then the leftovers of failed
   saves are deleted.  *restored / *removed (may be NULL) count them. */
int shs__clean_leftovers(const char *save_path, size_t *restored, size_t *removed);

#endif
