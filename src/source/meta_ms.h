/*
 * meta_ms.h -- MindSpore Transformers "Checkpoint 2.0" step directories
 * read into the checkpoint model of meta.h, so that every reader of that
 * model (the manager's load and reshard, the public read API, verify,
 * the CLI) reads them unchanged.  Format: docs/format.md, "MindSpore
 * Transformers Checkpoint 2.0".
 */
#ifndef SHS_META_MS_H
#define SHS_META_MS_H

#include "source/meta.h"

/* The `len` bytes at `text` are <dir>/metadata.json (named `path` in
   messages) of MindSpore's form: {"state_dict_metadata": ...,
   "storage_data": ...}.  Each chunk becomes the box its slice id names
   under its layout; the files storage_data names are opened for the byte
   ranges, dtypes and shapes of their tensors.  No checksums (has_hash 0).
   SHS_ECORRUPT naming the tensor or the file when the metadata and the
   files disagree (a shape, a slice outside the tensor, a missing file,
   slices that overlap or leave a gap); SHS_EUNSUPPORTED for layouts this
   library does not read (interleaved_parallel, uneven splits). */
int shs__meta_from_ms(shs__meta *m, const char *dir, const char *path, const char *text,
                      size_t len);

/* A storage_data key, Python's repr of (name, (i, ...)): "('name',
   (3,))", "(\"it's\", (0, 1))", "('x', ())".  The name is quoted with '
   or ", with the escapes \\ \' \" \n \r \t (others are refused); *name
   gets it (caller frees), v[0 .. *n) the tuple (at most
   SHS__MS_TUPLE_MAX integers below 10^18).  0, -1 when `s` is no such
   key, -2 out of memory. */
#define SHS__MS_TUPLE_MAX 8
int shs__ms_parse_key(const char *s, char **name, uint64_t *v, size_t *n);

/* 1 when `dir` holds at least one *.safetensors file and every one of
   them says {"format": "ms"} in its __metadata__ (what MindSpore's
   save_checkpoint writes; our files say "pt"), 0 when not, a status < 0
   when listing or opening fails with anything but a malformed file.  The
   test for a single-card MindSpore save, which has no metadata.json. */
int shs__meta_ms_single_probe(const char *dir);

/* The model of a single-card MindSpore step directory (no metadata.json):
   every tensor of every file whole, names unique across the files. */
int shs__meta_from_ms_single(shs__meta *m, const char *dir);

#endif
