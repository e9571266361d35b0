/*
 * loader.h -- reading the chunks a checkpoint model describes, shared by
 * the load (load.c) and shs_checkpoint_verify (view.c): files opened
 * lazily, each chunk checked against metadata.json before it is read.
 */
#ifndef SHS_LOADER_H
#define SHS_LOADER_H

#include "checkpoint.h"
#include "meta.h"

typedef struct shs__loader {
    const char *dir;
    const shs__meta *m;
    shs_file **fh;            /* opened lazily, one per file */
} shs__loader;

/* File fi of the model, opened on first use (a missing file is
   SHS_ECORRUPT: metadata.json names it). */
int shs__loader_open_file(shs__loader *L, uint32_t fi, shs_file **out);

/* Find `key` in file fi and check it is the chunk metadata describes
   (bytes [b0, b1) of the file). */
int shs__chunk_locate(shs__loader *L, uint32_t fi, const char *key, uint64_t b0, uint64_t b1,
                      shs_file **out_f, size_t *out_idx);

/* SHS_ECHECKSUM unless data[0, n) matches the whole-chunk checksum of c
   (when c has one). */
int shs__check_hash(const shs__loader *L, const shs__mchunk *c, const char *tname,
                    const void *data, uint64_t n);

#endif
