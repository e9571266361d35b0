/*
 * common_json.h -- common.json of a step directory (the training progress).
 */
#ifndef SHS_COMMON_JSON_H
#define SHS_COMMON_JSON_H

#include "common/internal.h"

/* Write <dir>/common.json from p (NULL: all zero), fsynced if do_fsync;
   *xxh3 gets the checksum of the bytes written (metadata.json records it).
   A non-finite loss_scale is SHS_EINVAL (JSON cannot hold it). */
int shs__common_write(uint64_t *xxh3, const char *dir, const shs_progress *p, int do_fsync);

/* Read and validate <dir>/common.json into *p; *p is unchanged on error.
   The seven keys are required, except consumed_samples (MindSpore
   Transformers' six-key files): then it is global_step x
   global_batch_size (overflow is an error) and *flags (may be NULL) gets
   SHS__COMMON_DERIVED_CONSUMED.  No other key is allowed; loss_scale (a
   number or a numeric string) must be finite and not negative. */
#define SHS__COMMON_DERIVED_CONSUMED 1u
int shs__common_read_ex(shs_progress *p, const char *dir, unsigned *flags);
int shs__common_read(shs_progress *p, const char *dir);

#endif
