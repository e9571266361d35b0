/*
 * merge.h -- private interface between the two halves of shs_merge: the
 * plan (merge_plan.c: which tensors, under which names, in which output
 * file and part; pure, no I/O but the checkpoint's metadata) and the
 * execution (merge.c: reading, writing, the temporary directory).
 */
#ifndef SHS_MERGE_H
#define SHS_MERGE_H

#include "common/internal.h"

/* One output tensor. */
typedef struct shs__mtensor {
    size_t src;           /* index in the checkpoint */
    const char *src_name; /* the checkpoint's name (owned by it) */
    char *name;           /* output name (owned) */
    shs_dtype src_dtype;  /* stored dtype */
    shs_dtype dtype;      /* output dtype */
    size_t ndim;
    const uint64_t *shape; /* owned by the checkpoint */
    uint64_t nbytes;       /* output bytes */
    size_t file;
} shs__mtensor;

/* One output file: tensors [first, first + n) of the plan. */
typedef struct shs__mfile {
    char name[64]; /* "model.safetensors" or "model-00001-of-00005.safetensors" */
    size_t first, n;
    uint64_t bytes; /* tensor bytes */
    int part;       /* the part that writes it (0 without parts) */
} shs__mfile;

typedef struct shs__mplan {
    shs__mtensor *t; /* by file, then by output name (bytewise) */
    size_t n;
    size_t *by_name; /* indices into t, sorted by output name */
    shs__mfile *f;
    size_t nf;
    uint64_t total;  /* sum of nbytes */
    uint64_t params; /* elements of the model tensors (total_parameters) */
    int grouping;    /* SHS_MERGE_GROUPING_* */
} shs__mplan;

/* Bytes of output read and written at a time, per job (16 MiB); tests
   make it small to cut small tensors into many boxes. */
extern size_t shs__merge_buf_bytes;

#define SHS__MERGE_INDEX "model.safetensors.index.json"
#define SHS__MERGE_DEFAULT_SHARD 5000000000ull

/* Check the options that do not need the checkpoint (version, dtype,
   jobs, part, rename rules' syntax).  `finish` nonzero: for
   shs_merge_finish (part_count required, part_index ignored). */
int shs__merge_check_opts(const shs_merge_opts *o, int finish, const char *what);
/* The plan of `ck` under the options. */
int shs__merge_plan(shs__mplan *p, const shs_checkpoint *ck, const shs_merge_opts *o);
void shs__merge_plan_free(shs__mplan *p);
/* model.safetensors.index.json as transformers writes it (Python's
   json.dumps(index, indent=2, sort_keys=True) + "\n"; "total_parameters"
   with the current grouping only). */
int shs__merge_index_json(shs__buf *out, const shs__mplan *p);
/* Whether `name` is a file an earlier merge writes (model.safetensors,
   model-NNNNN-of-NNNNN.safetensors, the index). */
int shs__merge_own_name(const char *name);
/* "<dst>.part-I-of-N", where part I of a split merge is written (caller
   frees); NULL when out of memory. */
char *shs__merge_part_dir(const char *dst, int index, int count);

#endif
