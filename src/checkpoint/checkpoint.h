/*
 * checkpoint.h -- the step-directory engine: write one step directory with
 * the commit protocol, read it back into a registered state (any saved
 * chunking into any requested chunking), resolve load paths.  Policy
 * (when to save, what to keep, what to load) is the manager's.
 *
 * Where the engine lives: save.c (write and commit), replicas.c (layouts
 * exchanged between ranks, exchange.h), load.c (read back, loader.h),
 * meta.c (metadata.json, meta.h), common_json.c (common.json), stepdir.c
 * (names in a save path, stepdir.h), view.c (the public read-only API).
 */
#ifndef SHS_CHECKPOINT_H
#define SHS_CHECKPOINT_H

#include "checkpoint/state.h"
#include "source/stepdir.h"

typedef struct shs__save_req {
    const char *save_path;
    int64_t step;
    const char *prefix;
    int rank, world_size;
    int with_optim;
    int fsync;
    int incremental;
    const char *prev_dir; /* this run's previous save, or NULL */
    const shs_progress *progress;
    void *const *data;      /* per tensor: bytes to save, or NULL for
                                      the registered memory */
    const shs__blob *blobs; /* blobs to save (a snapshot) */
    size_t n_blobs;
    int remove_redundancy;                  /* replicas written once (several ranks) */
    struct shs__layout_cache *layout_cache; /* NULL: plan every save */
    const struct shs__key *key;             /* encrypt every chunk (crypt.h); NULL: no */
    const char *save_id;                    /* with key: this save's random id (16
                                               hex digits, bound into every chunk's
                                               AAD); set by shs__ckpt_save */
} shs__save_req;

/* The plan of who writes which replica, kept between saves while no rank's
   layout changes (save_global_layout_cache). */
typedef struct shs__layout_cache {
    uint64_t key;  /* hash of every rank's layout; 0 = empty */
    uint8_t *skip; /* per state tensor: another rank writes it */
    size_t n;
} shs__layout_cache;
void shs__layout_cache_release(shs__layout_cache *c);

/* Write and commit <save_path>/iteration_%08d and the tracker, collectively
   over `comm` (req->rank/world_size must be the comm's): every rank writes
   its files, the root commits only if all succeeded.  On error nothing
   committed changes, the temporary directory is removed, and every rank
   gets the error of the lowest failing rank. */
int shs__ckpt_save(const shs_state *st, const shs__save_req *req, shs_comm *comm,
                   shs_save_stats *stats, char *out_dir, size_t out_cap);

typedef struct shs__load_req {
    int with_optim;
    unsigned exclude; /* SHS_EXCLUDE_* */
    int strict;
    int rank, world_size;
    int workers;                  /* parallel reader threads (>= 1) */
    int balanced;                 /* load_balanced: each needed chunk read
                                      by one rank, sent to the others */
    const struct shs__meta *meta; /* the model to read (source.h opened
                                     it; its file names relative to the
                                     directory); still the caller's */
    /* Hugging Face weights (hf_load.c): */
    int convert;                /* float tensors may be saved in another
                                     float dtype: converted on load */
    int unused_ok;              /* tensors of the checkpoint that are not
                                     registered are skipped and listed,
                                     even when strict */
    const struct shs__key *key; /* of an encrypted checkpoint, or NULL */
    int encrypted_only;         /* with a key: refuse an unencrypted
                                     checkpoint (SHS_EKEY) -- the manager's
                                     resume from save_path, unless
                                     allow_unencrypted_resume */
    /* initial_load_in_hf_quantized (hf_load.h): FP8 weights dequantized
       with their block scales, indexed like `meta`; NULL: none */
    const struct shs__dequant *dequant;
} shs__load_req;

/* Load req->meta, the model of what is at step_dir, into the state.  progress may be NULL.
   res (may be NULL) gets the outcome, except res->path, which the caller
   owns and sets; res->skipped is allocated here, even on error: release
   it with shs__load_result_release_names. */
int shs__ckpt_load(shs_state *st, const char *step_dir, const shs__load_req *req, shs_comm *comm,
                   shs_progress *progress, shs_load_result *res);
void shs__load_result_release_names(shs_load_result *res);

#endif
