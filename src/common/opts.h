/*
 * opts.h -- the version check of public option structs (the libgit2 model
 * documented in shardsafe.h: any version from 1 up to the library's own is
 * accepted, and the caller then reads only the fields that version has).
 */
#ifndef SHS_OPTS_H
#define SHS_OPTS_H

#include "common/internal.h"

/* SHS_OK when 1 <= have <= max; otherwise SHS_EINVAL with a message naming
   `what` (the public function, e.g. "shs_file_open") and both versions. */
int shs__check_opts_version(unsigned have, unsigned max, const char *what);

/* The same for a caller's shs_progress: SHS_EINVAL naming `what` unless
   its version is 1 up to SHS_PROGRESS_VERSION. */
int shs__check_progress(const shs_progress *p, const char *what);

#endif
