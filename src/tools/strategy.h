/*
 * strategy.h -- MindSpore's parallel strategy files (the protobuf
 * ParallelStrategyMap that strategy_ckpt_save_file writes, and that
 * unified_safetensors' src_strategy_file, transform_checkpoints'
 * src/dst_strategy_file and load_distributed_checkpoint's
 * train_strategy_filename read), mapped onto the layout vocabulary of
 * layout_spec.h: the target layout of an offline reshard, and the source
 * layout of a folder of MindSpore rank_N folders for a merge.
 * docs/reshard.md, docs/merge.md.
 */
#ifndef SHS_STRATEGY_H
#define SHS_STRATEGY_H

#include "common/internal.h"

#include <jansson.h>

/* The largest strategy file read. */
#define SHS__STRATEGY_FILE_MAX (256u << 20)

/*
 * The layout document ({"world_size": W, "tensors": {name: spec}}) the
 * strategy file's bytes [data, data + len) describe: per parameter,
 * device_matrix and tensor_map (nested when the file nests them), the
 * optimizer shard (opt_weight_shard_size/step) as the further split of
 * the first dimension over the devices that repeat it, and the pipeline
 * stages of a merged file ("<stage>-<name>") as a rank_list (stage s
 * holds ranks s*N .. s*N+N-1, N devices per stage; a parameter of several
 * stages is replicated over them).  W = stages x N.
 *
 * `rank_map` (NULL: none) gives the rank of each of the W devices, in
 * that order: a permutation of 0..W-1 (n_rank_map == W).
 *
 * Hostile input is an error naming `where` and the problem (SHS_EINVAL):
 * not a ParallelStrategyMap (truncated, wrong wire types, a missing
 * required field), no parameter, an empty or oversized device matrix, a
 * tensor_map value out of range or an axis used twice, an optimizer shard
 * the device matrix cannot hold, stages missing or of different device
 * counts, a parameter twice with different layouts; SHS_EUNSUPPORTED for
 * what MindSpore can write but this mapping does not cover (a field
 * split, a manual param_split_shape).
 */
int shs__strategy_doc(json_t **doc, const void *data, size_t len, const char *where,
                      const int *rank_map, size_t n_rank_map);

/* The same from a file (at most SHS__STRATEGY_FILE_MAX bytes). */
int shs__strategy_read(json_t **doc, const char *path, const int *rank_map, size_t n_rank_map);

/*
 * The checkpoint of a folder of MindSpore rank folders laid out by a
 * strategy file (the source of unified_safetensors): `src` holds rank_0,
 * rank_1, ... (ranks below the strategy's world), each with one
 * .safetensors file holding that rank's slices under the parameters'
 * names.  A tensor the strategy lays out is assembled from the slices:
 * its global shape is a slice's shape times the splits, every rank's
 * slice must have the shape the layout gives it, and the slices present
 * must cover the tensor (a slice held by several ranks may be in only one
 * of their files: remove_redundancy).  A tensor the strategy does not
 * name must be whole and equal in shape and dtype on every rank that has
 * it.  Names of MindSpore's optimizer state (adam_m., adam_v., moments.,
 * accu_grads., main_param., max_exp_avg_sq.) and tensors the strategy
 * does not name (hyper-parameters such as global_step) are optimizer
 * state; the rest are model tensors.  `flags`: SHS_CHECKPOINT_OPEN_*.
 */
int shs__strategy_open(shs_checkpoint **out, const char *src, const char *strategy_path,
                       unsigned flags);

#endif
