/*
 * opts.h -- ABI discipline for the public versioned structs (opts.c), as
 * libgit2 does it: one check at every entry point, then the caller's
 * struct is read, or written, only up to the size its own version has.
 * A program built against an older header keeps working: its options are
 * read as far as they go (newer fields keep their defaults), and a result
 * never writes past the end of its older, smaller struct.
 *
 * Every versioned struct starts with `unsigned version`.  Its sizes per
 * version live in one table (opts.c): when a struct gains fields, its
 * *_VERSION goes up and the table gets the size of the older version
 * (offsetof the first new field).
 */
#ifndef SHS_OPTS_H
#define SHS_OPTS_H

#include "common/internal.h"

typedef enum shs__vstruct {
    SHS__V_OPEN_OPTS,
    SHS__V_WRITER_OPTS,
    SHS__V_TENSOR_SPEC,
    SHS__V_PROGRESS,
    SHS__V_COMM_OPS,
    SHS__V_CONFIG,
    SHS__V_LOAD_RESULT,
    SHS__V_SAVE_STATS,
    SHS__V_CHECKPOINT_OPEN_OPTS,
    SHS__V_CHUNK_INFO,
    SHS__V_BLOB_INFO,
    SHS__V_MERGE_OPTS,
    SHS__V_MERGE_RESULT,
    SHS__V_RESHARD_OPTS,
    SHS__V_RESHARD_RESULT,
    SHS__V_YAML_OPTS,
    SHS__V_COUNT
} shs__vstruct;

/* SHS_OK when the struct at p has a version this library knows (1 up to
   its own); SHS_EINVAL naming `fn`, the type and both versions otherwise
   (a NULL p is the caller's to allow or refuse). */
int shs__check_version(const void *p, shs__vstruct which, const char *fn);

/* The bytes a caller's struct of its version has. */
size_t shs__version_size(const void *p, shs__vstruct which);

/* Options: dst, a whole struct already holding the defaults, takes the
   caller's src as far as src's version goes (its version included). */
void shs__copy_in(void *dst, const void *src, shs__vstruct which);

/* Results: the caller's dst gets src (a whole struct) as far as dst's
   version goes; dst's version stays its own. */
void shs__copy_out(void *dst, const void *src, shs__vstruct which);

/* shs__check_version of a caller's shs_progress. */
int shs__check_progress(const shs_progress *p, const char *what);


#endif
