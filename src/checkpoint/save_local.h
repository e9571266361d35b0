/*
 * save_local.h -- one rank's part of a save (save_local.c), called by the
 * collective save (save.c).
 */
#ifndef SHS_SAVE_LOCAL_H
#define SHS_SAVE_LOCAL_H

#include "checkpoint/checkpoint.h"
#include "source/meta.h"

#include <jansson.h>

/*
 * Write this rank's files into the temporary directory `tmp` and describe
 * them in a metadata fragment (the "files", "tensors" and "blobs" of
 * metadata.json, with file indices local to this rank).  skip[i] nonzero:
 * another rank writes state tensor i.  *stats gets this rank's counts.
 */
int shs__save_local(const shs_state *st, const shs__save_req *req, const char *tmp,
                    const uint8_t *skip, json_t **frag_out, shs_save_stats *stats);

/*
 * Root side of a save, without the commit: merge the ranks' fragments
 * (`texts`, rank order, lens[r] bytes each) into metadata.json with the
 * layout the ranks hold recorded ("layouts"), write common.json
 * (req->progress) and metadata.json into `tmp`, validate the result as a
 * checkpoint, fsync `tmp` (req->fsync).  The collective save commits it
 * into the save path; the offline reshard renames it to its destination.
 */
int shs__save_meta(const shs__save_req *req, const char *tmp, const char *texts, const size_t *lens,
                   int world);

#endif
