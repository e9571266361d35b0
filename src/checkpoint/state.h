/*
 * state.h -- the registry of a training state (tensors + blobs), shared by
 * the checkpoint engine and the manager.
 */
#ifndef SHS_STATE_H
#define SHS_STATE_H

#include "common/namemap.h"

typedef struct shs__tensor {
    char *name;
    size_t name_len;
    shs_kind kind;
    shs_dtype dtype;
    size_t ndim;
    uint64_t *shape;  /* local chunk */
    uint64_t *gshape; /* global */
    uint64_t *goff;   /* offset of the chunk in the global tensor */
    void *data;
    uint64_t nbytes; /* of the local chunk */
    char *master_of; /* NULL or a model tensor's name */
} shs__tensor;

typedef struct shs__blob {
    char *name;
    void *data;
    size_t len;
} shs__blob;

struct shs_state {
    shs__tensor *t;
    size_t n, cap;
    shs__namemap names;
    shs__blob *b;
    size_t nb, capb;
};

/* Index of a tensor by name, or -1. */
long shs__state_find(const shs_state *s, const char *name, size_t len);
/* The blob of that name, or NULL. */
shs__blob *shs__state_blob(const shs_state *s, const char *name);
/* Replace a blob's value (data copied). */
int shs__state_put_blob(shs_state *s, const char *name, const void *data, size_t len);

/* Names of the blob kinds the seeds know, for exclude_from_loading. */
unsigned shs__blob_exclude_flag(const char *name);

#endif
