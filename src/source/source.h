/*
 * source.h -- what is at a path, and how to read it (source.c): the one
 * place that tells a save path from a step directory (ours or
 * MindSpore's), a plain folder, a Hugging Face index and one file, and
 * opens each into the checkpoint model (meta.h) through that format's
 * own reader (meta.c, meta_ms.c, meta_plain.c).  Every caller says which
 * kinds it reads; a kind it does not read is refused with a message
 * naming what was found, never read by another reader instead.
 *
 *   resume from save_path           SHS__SRC_STEPS (of a save path)
 *   load_path / initial_load_path   SHS__SRC_ANY
 *   initial_load_in_hf              HF index, model.safetensors, one file
 *   the read API and the tools      SHS__SRC_ANY
 *   an incremental save's previous  SHS__SRC(SHS_SOURCE_STEP)
 */
#ifndef SHS_SOURCE_H
#define SHS_SOURCE_H

#include "source/meta.h"

#define SHS__SRC(kind) (1u << (kind))
#define SHS__SRC_STEPS                                                                             \
    (SHS__SRC(SHS_SOURCE_STEP) | SHS__SRC(SHS_SOURCE_MS_STEP) | SHS__SRC(SHS_SOURCE_MS_SINGLE))
#define SHS__SRC_FILES                                                                             \
    (SHS__SRC(SHS_SOURCE_FOLDER) | SHS__SRC(SHS_SOURCE_HF_INDEX) | SHS__SRC(SHS_SOURCE_FILE))
#define SHS__SRC_ANY (SHS__SRC(SHS_SOURCE_SAVE_PATH) | SHS__SRC_STEPS | SHS__SRC_FILES)

typedef struct shs__source_req {
    unsigned accept;   /* SHS__SRC bits; for a save path, its step's kind too */
    int64_t step;      /* a save path: this step (-1: the tracker's, else the
                        newest); a step directory must be of it */
    const char *wants; /* refusals: "<path> is a <kind>, not <wants>" */
    const char *hint;  /* ... " (<hint>)"; may be NULL */
    int hf;            /* Hugging Face rules: a folder is read through its
                           index or its model.safetensors, never as a listing;
                           every tensor is a model weight */
} shs__source_req;
#define SHS__SOURCE_REQ_INIT                                                                       \
    {                                                                                              \
        SHS__SRC_ANY, -1, "a checkpoint", NULL, 0                                                  \
    }

typedef struct shs__source {
    shs_source_kind kind; /* of the path given */
    shs_source_kind read; /* of what was read: a save path's step's kind */
    char *path;           /* what was read: a step directory, a folder, an
                             index or a file */
    char *dir;            /* the folder the model's file names are in */
    shs__meta m;
} shs__source;

/* What is at `path` (shs_path_kind). */
int shs__source_probe(shs_source_kind *kind, const char *path);

/* Open `path` as req says into *s (released by shs__source_release, also
   after a failure).  Errors name the path and, for a refused kind, what
   it is. */
int shs__source_open(shs__source *s, const char *path, const shs__source_req *req);
void shs__source_release(shs__source *s);

/* The model of step directory `dir` of a save path (savepath.h chose
   it), of a kind in `accept` (SHS__SRC_STEPS bits). */
int shs__source_open_step(shs__meta *m, const char *dir, unsigned accept);

/* The step a save path's read resolves to: `step` when >= 0 and
   committed; else the tracker's (which must be committed); without a
   tracker the newest committed step.  *dir gets its directory (caller
   frees).  Errors name the save path: SHS_ENOCHECKPOINT for no such step
   or no complete one, SHS_ECORRUPT for a tracker naming none. */
int shs__source_resolve(char **dir, const char *save_path, int64_t step);

#endif
