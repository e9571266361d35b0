/*
 * manager_int.h -- the manager's state, shared by manager.c (lifecycle,
 * saving, the async pipeline, retention) and manager_load.c (what a
 * resume loads).
 */
#ifndef SHS_MANAGER_INT_H
#define SHS_MANAGER_INT_H

#include "checkpoint/checkpoint.h"

#include <pthread.h>

typedef struct job {
    shs_progress progress;
    int64_t step;
    int with_optim;
    int defer_snapshot;
    size_t split;     /* caller copies [0, split), the worker the rest */
    shs__blob *blobs; /* snapshot of the state's blobs */
    size_t n_blobs;
} job;

struct shs_manager {
    shs_config cfg; /* strings below are the manager's copies */
    char *save_path, *prefix, *load_path, *initial_load_path;
    char *hf_assets_path, *hf_name_map, *hf_name_map_file;
    shs_state *state;
    shs_comm *comm;                 /* every rank calls the manager collectively */
    shs_comm *own_comm;             /* the one-process comm when none was given */
    shs_lock *lock; /* rank 0 of a saving manager: one writer per
                                save path */
    shs__layout_cache layout_cache;
    struct shs__key *key; /* encrypt_key_file / _env, loaded at create;
                             NULL: no encryption */

    int64_t *run_steps; /* this run's committed saves, oldest first */
    size_t n_run, cap_run;
    int64_t last_saved_step; /* -1: none yet */
    int64_t last_full_step;  /* this run's newest save with optimizer state */
    char last_dir[4096];     /* this run's newest committed save */
    shs_save_stats last_stats;
    int has_stats;
    double blocked_seconds; /* of the save in flight (guarded by mu) */

    /* async */
    int async;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int busy;          /* a job is queued or running */
    int snapshot_done; /* the worker's part of the snapshot is taken */
    int caller_done;   /* the caller's part is taken */
    int stop;
    job cur;
    int bg_status; /* error of the last background save */
    char bg_msg[1024];
    void **staging; /* per tensor */
    char *staging_mem;
    uint64_t staging_bytes;

    int load_path_is_own; /* load_path is the save path itself (a load) */
    /* the strings of the last load result (shs_load_result says whose) */
    shs_load_result held;
    char *held_path, *held_msg;
    /* shs_manager_warning (guarded by mu: retention runs in the worker) */
    char warning[1024];
    char warning_out[1024]; /* the copy handed out */

    /* export at train end (export.c) */
    char *export_dtype_name; /* the manager's copy of cfg.export_dtype */
    int export_dtype;        /* shs_dtype, or -1: as saved */
    char export_dir[4096];   /* the last export; "" none */
};

/* Wait for the save in flight; report (and clear) a background error
   (manager.c). */
int shs__manager_wait_idle(shs_manager *m);

/* export.c: check last_save_in_hf / export_dtype (`has_key`: the run is
   encrypted); *dtype = the shs_dtype of export_dtype, or -1. */
int shs__export_check_config(const shs_config *cfg, int has_key, int *dtype);
/* Export committed step `step` into <save_path>/hf-<step dir name>,
   collectively (every rank returns the same outcome). */
int shs__manager_export(shs_manager *m, int64_t step);

#endif
