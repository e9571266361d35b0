/*
 * loader.h -- reading the chunks a checkpoint model describes, shared by
 * the load (load.c), shs_checkpoint_verify(view.c, NULL, 0) and the public read
 * API (read.c): files opened lazily, each chunk checked against
 * metadata.json before it is read (chunk_read.h: the one read-and-check
 * of stored bytes), and ONE function that fills a box of a global tensor
 * from the saved chunks (shs__fill_box).
 */
#ifndef SHS_LOADER_H
#define SHS_LOADER_H

#include "checkpoint/checkpoint.h"
#include "checkpoint/chunk_read.h"
#include "source/meta.h"

#include <pthread.h>

typedef struct shs__loader {
    const char *dir;
    const shs__meta *m;
    shs_file **fh;              /* opened lazily, one per file */
    unsigned open_flags;        /* SHS_OPEN_* for the data files */
    pthread_mutex_t *mu;        /* non-NULL: fh is shared by threads */
    const struct shs__key *key; /* decrypts an encrypted checkpoint's
                                   chunks (crypt.h); NULL: none */
} shs__loader;

/* File fi of the model, opened on first use (a missing file is
   SHS_ECORRUPT: metadata.json names it).  Under L->mu when there is one:
   a shs_file is immutable after open, so threads share it. */
int shs__loader_open_file(shs__loader *L, uint32_t fi, shs_file **out);

/* Find `key` in file fi and check it is the chunk metadata describes
   (bytes [b0, b1) of the file). */
int shs__chunk_locate(shs__loader *L, uint32_t fi, const char *key, uint64_t b0, uint64_t b1,
                      shs_file **out_f, size_t *out_idx);

/*
 * Fill the box [boff, boff + bshape) of the global tensor mt into dst,
 * dense and row-major, as `dtype` (mt->dtype: a copy; another dtype:
 * shs_convert per contiguous run, which the caller checked is possible).
 * Every saved chunk that intersects the box is located and checked
 * against its checksum before its bytes are used: the whole chunk, or
 * only the 4 MiB blocks the box touches when the chunk has block
 * checksums.  Memory is bounded by dst: a mapped file is read in place; a
 * file read with pread goes through one block-sized window at a time.  A
 * chunk of exactly the box's bytes is read straight into dst and hashed
 * there.  SHS_ECORRUPT naming the tensor when the chunks do not cover the
 * box.  *read_bytes grows by the bytes read from storage.  On error dst
 * may be partly written.  Safe from several threads when L->mu is set.
 */
int shs__fill_box(shs__loader *L, const shs__mtensor *mt, const uint64_t *boff,
                  const uint64_t *bshape, shs_dtype dtype, void *dst, uint64_t *read_bytes);

/* load_balanced (load_balanced.c): fill every registered tensor, each
   needed saved chunk read by one rank and sent to the others.  Collective
   over comm; failures before the exchange are agreed on, a read error is
   this rank's own (the caller agrees on it). */
int shs__load_balanced(shs__loader *L, shs_state *st, const shs__load_req *req, shs_comm *comm,
                       uint64_t *read_bytes);

/* The public checkpoint handle (read.c opens it, view.c reads its model). */
struct shs_checkpoint {
    shs__meta m;
    shs_checkpoint_tensor_info *info;
    char *path; /* what was opened, resolved (shs_checkpoint_path) */
    char *dir;  /* the folder the model's file names are in */
    shs__loader L;
    pthread_mutex_t mu;   /* guards L.fh */
    struct shs__key *key; /* shs_checkpoint_open_opts.key, copied; NULL: none */
};

#endif
