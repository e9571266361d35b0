/*
 * hf_index.h -- the library's one reader of model.safetensors.index.json
 * (hf_index.c; public API in shardsafe.h, "Hugging Face index").
 */
#ifndef SHS_HF_INDEX_H
#define SHS_HF_INDEX_H

#include "common/internal.h"

#define SHS__HF_INDEX "model.safetensors.index.json"

/* The entry of tensor `tensor` (len bytes), or NULL. */
const shs_hf_index_entry *shs__hf_index_find(const shs_hf_index *ix, const char *tensor,
                                             size_t len);

#endif
