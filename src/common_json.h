/*
 * common_json.h -- common.json of a step directory (the training progress).
 */
#ifndef SHS_COMMON_JSON_H
#define SHS_COMMON_JSON_H

#include "internal.h"

/* Write <dir>/common.json from p (NULL: all zero), fsynced if do_fsync. */
int shs__common_write(const char *dir, const shs_progress *p, int do_fsync);

/* Read and validate <dir>/common.json into *p; *p is unchanged on error.
   Every key is required and no other key is allowed. */
int shs__common_read(shs_progress *p, const char *dir);

#endif
