/*
 * old_structs.h -- the public versioned structs as a program built against
 * an older shardsafe.h has them: each struct cut where the fields of its
 * next version begin (shardsafe.h says which version added which field).
 * test_abi.c allocates them at exactly this size, so that a library that
 * reads or writes past the caller's version is caught (by ASan in the
 * sanitizer build, by canaries in the others).
 */
#ifndef SHS_TEST_OLD_STRUCTS_H
#define SHS_TEST_OLD_STRUCTS_H

#include <stddef.h>
#include <stdint.h>

#include "shardsafe.h"

/* shs_checkpoint_open_opts version 1: no key */
typedef struct old_ckpt_open_opts_v1 {
    unsigned version;
    int64_t step;
    unsigned flags;
} old_ckpt_open_opts_v1;

/* shs_reshard_opts version 1: no key */
typedef struct old_reshard_opts_v1 {
    unsigned version;
    int world_size;
    int64_t step;
    const char *prefix;
    int fsync;
} old_reshard_opts_v1;

/* shs_merge_opts version 1: no key */
typedef struct old_merge_opts_v1 {
    unsigned version;
    unsigned flags;
    uint64_t max_shard_size;
    int dtype;
    const char *const *include;
    size_t n_include;
    const char *const *exclude;
    size_t n_exclude;
    const char *const *rename;
    size_t n_rename;
    int jobs;
    int part_index;
    int part_count;
    int64_t step;
    shs_merge_progress_fn progress;
    void *progress_ctx;
} old_merge_opts_v1;

/* The layouts agree field by field with today's header. */
#define SAME(o, n, f) _Static_assert(offsetof(o, f) == offsetof(n, f), #o "." #f " moved")
SAME(old_ckpt_open_opts_v1, shs_checkpoint_open_opts, step);
SAME(old_ckpt_open_opts_v1, shs_checkpoint_open_opts, flags);
SAME(old_reshard_opts_v1, shs_reshard_opts, world_size);
SAME(old_reshard_opts_v1, shs_reshard_opts, fsync);
SAME(old_merge_opts_v1, shs_merge_opts, dtype);
SAME(old_merge_opts_v1, shs_merge_opts, part_count);
SAME(old_merge_opts_v1, shs_merge_opts, progress_ctx);
#undef SAME

/* shs_config version 1 ends where initial_load_in_hf (version 2) begins,
   version 2 where encrypt_key_file (version 3) begins. */
#define OLD_CONFIG_V1_SIZE offsetof(shs_config, initial_load_in_hf)
#define OLD_CONFIG_V2_SIZE offsetof(shs_config, encrypt_key_file)

#endif
