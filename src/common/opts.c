/* opts.c -- ABI discipline for the public versioned structs (opts.h). */
#include "common/opts.h"

#include <stddef.h>
#include <string.h>

#define MAXV 8 /* versions a table may list */

/* sizes[v] = the size of version v of the struct (v = 1 .. current). */
static const struct {
    const char *type, *init;
    unsigned current;
    size_t sizes[MAXV];
} k_struct[SHS__V_COUNT] = {
    [SHS__V_OPEN_OPTS] = { "shs_open_opts",
                           "SHS_OPEN_OPTS_INIT",
                           SHS_OPEN_OPTS_VERSION,
                           { 0, sizeof(shs_open_opts) } },
    [SHS__V_WRITER_OPTS] = { "shs_writer_opts",
                             "SHS_WRITER_OPTS_INIT",
                             SHS_WRITER_OPTS_VERSION,
                             { 0, sizeof(shs_writer_opts) } },
    [SHS__V_TENSOR_SPEC] = { "shs_tensor_spec",
                             "SHS_TENSOR_SPEC_INIT",
                             SHS_TENSOR_SPEC_VERSION,
                             { 0, sizeof(shs_tensor_spec) } },
    [SHS__V_PROGRESS] = { "shs_progress",
                          "SHS_PROGRESS_INIT",
                          SHS_PROGRESS_VERSION,
                          { 0, sizeof(shs_progress) } },
    [SHS__V_COMM_OPS] = { "shs_comm_ops",
                          "SHS_COMM_OPS_INIT",
                          SHS_COMM_OPS_VERSION,
                          { 0, sizeof(shs_comm_ops) } },
    [SHS__V_CONFIG] = { "shs_config",
                        "shs_config_init",
                        SHS_CONFIG_VERSION,
                        { 0, offsetof(shs_config, initial_load_in_hf),
                          offsetof(shs_config, encrypt_key_file),
                          offsetof(shs_config, allow_unencrypted_resume), sizeof(shs_config) } },
    [SHS__V_LOAD_RESULT] = { "shs_load_result",
                             "SHS_LOAD_RESULT_INIT",
                             SHS_LOAD_RESULT_VERSION,
                             { 0, sizeof(shs_load_result) } },
    [SHS__V_SAVE_STATS] = { "shs_save_stats",
                            "SHS_SAVE_STATS_INIT",
                            SHS_SAVE_STATS_VERSION,
                            { 0, sizeof(shs_save_stats) } },
    [SHS__V_CHECKPOINT_OPEN_OPTS] = { "shs_checkpoint_open_opts",
                                "SHS_CHECKPOINT_OPEN_OPTS_INIT",
                                SHS_CHECKPOINT_OPEN_OPTS_VERSION,
                                { 0, offsetof(shs_checkpoint_open_opts, key),
                                  sizeof(shs_checkpoint_open_opts) } },
    [SHS__V_CHUNK_INFO] = { "shs_chunk_info",
                            "SHS_CHUNK_INFO_INIT",
                            SHS_CHUNK_INFO_VERSION,
                            { 0, sizeof(shs_chunk_info) } },
    [SHS__V_BLOB_INFO] = { "shs_blob_info",
                           "SHS_BLOB_INFO_INIT",
                           SHS_BLOB_INFO_VERSION,
                           { 0, sizeof(shs_blob_info) } },
    [SHS__V_MERGE_OPTS] = { "shs_merge_opts",
                            "SHS_MERGE_OPTS_INIT",
                            SHS_MERGE_OPTS_VERSION,
                            { 0, offsetof(shs_merge_opts, key), offsetof(shs_merge_opts, grouping),
                              sizeof(shs_merge_opts) } },
    [SHS__V_MERGE_RESULT] = { "shs_merge_result",
                              "SHS_MERGE_RESULT_INIT",
                              SHS_MERGE_RESULT_VERSION,
                              { 0, sizeof(shs_merge_result) } },
    [SHS__V_RESHARD_OPTS] = { "shs_reshard_opts",
                              "SHS_RESHARD_OPTS_INIT",
                              SHS_RESHARD_OPTS_VERSION,
                              { 0, offsetof(shs_reshard_opts, key),
                                offsetof(shs_reshard_opts, strategy_file),
                                sizeof(shs_reshard_opts) } },
    [SHS__V_RESHARD_RESULT] = { "shs_reshard_result",
                                "SHS_RESHARD_RESULT_INIT",
                                SHS_RESHARD_RESULT_VERSION,
                                { 0, sizeof(shs_reshard_result) } },
    [SHS__V_YAML_OPTS] = { "shs_yaml_opts",
                           "SHS_YAML_OPTS_INIT",
                           SHS_YAML_OPTS_VERSION,
                           { 0, sizeof(shs_yaml_opts) } },
};

/* Every table lists every version up to the current one, and the newest
   size is the whole struct. */
_Static_assert(SHS_CONFIG_VERSION == 4 && SHS_CHECKPOINT_OPEN_OPTS_VERSION == 2 &&
                   SHS_MERGE_OPTS_VERSION == 3 && SHS_RESHARD_OPTS_VERSION == 3,
               "a versioned struct changed: update its sizes in k_struct");

static unsigned version_of(const void *p)
{
    unsigned v;
    memcpy(&v, p, sizeof v);
    return v;
}

int shs__check_version(const void *p, shs__vstruct which, const char *fn)
{
    unsigned v = version_of(p), cur = k_struct[which].current;
    if (v >= 1 && v <= cur)
        return SHS_OK;
    return shs__err(SHS_EINVAL,
                    "%s: %s version %u (this library knows 1 to %u): initialise it with %s", fn,
                    k_struct[which].type, v, cur, k_struct[which].init);
}

size_t shs__version_size(const void *p, shs__vstruct which)
{
    unsigned v = version_of(p);
    return v >= 1 && v <= k_struct[which].current ? k_struct[which].sizes[v] : 0;
}

void shs__copy_in(void *dst, const void *src, shs__vstruct which)
{
    memcpy(dst, src, shs__version_size(src, which));
}

void shs__copy_out(void *dst, const void *src, shs__vstruct which)
{
    size_t n = shs__version_size(dst, which);
    size_t off = sizeof(unsigned); /* the caller's version stays */
    if (n > off)
        memcpy((char *)dst + off, (const char *)src + off, n - off);
}

int shs__check_progress(const shs_progress *p, const char *what)
{
    return shs__check_version(p, SHS__V_PROGRESS, what);
}
