/* testutil.h -- helpers shared by the unit tests. */
#ifndef SHS_TESTUTIL_H
#define SHS_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "shardsafe.h"

/* A fresh empty directory under $TMPDIR (or /tmp); caller frees with
   tu_rmtree + free. */
char *tu_mkdtemp(void);
/* Remove a directory tree (best effort). */
void tu_rmtree(const char *path);
/* Write / read a whole file.  tu_read_file returns malloc'd data or NULL. */
int tu_write_file(const char *path, const void *data, size_t len);
/* Write `root` (a metadata.json tree, edited by a test) to `path` sealed
   as the writer seals it (its "metadata_xxh3" recomputed), so that only
   the test's edit differs.  `root` stays the caller's. */
struct json_t;
void tu_meta_reseal(const char *path, struct json_t *root);
/* After common.json of step directory `dir` was edited: record its new
   checksum in metadata.json (resealed), so that the edit is judged on its
   content. */
void tu_reseal_common(const char *dir);
void *tu_read_file(const char *path, size_t *len);
/* "<dir>/<name>" in a static rotating buffer (8 slots). */
const char *tu_path(const char *dir, const char *name);

/* Skipping: cmocka's skip() alone lets the program exit 0, which ctest
   reports as passed.  TU_SKIP() counts the skip, and TU_RUN_GROUP makes
   the program exit 77 (SKIP_RETURN_CODE: "skipped") when nothing failed
   but something was skipped. */
extern int tu_skipped;
#define TU_SKIP()                                                                                  \
    do {                                                                                           \
        tu_skipped++;                                                                              \
        skip();                                                                                    \
    } while (0)
#define TU_RUN_GROUP(tests, setup, teardown)                                                       \
    tu_exit_code(cmocka_run_group_tests(tests, setup, teardown))
int tu_exit_code(int failed);

/* Allocator that fails the N-th allocation (counting from 1) once armed. */
void tu_failalloc_install(void);
void tu_failalloc_arm(long fail_at); /* 0 = never fail */
long tu_failalloc_count(void);       /* allocations since arm */
long tu_failalloc_live(void);        /* currently live allocations */
void tu_failalloc_uninstall(void);

/* The allocation sweep: run(ctx) with its N-th allocation failing, for
   N = 1, 2, ... until run makes fewer than N allocations (that run must
   succeed).  Each run is bracketed by before(ctx) and after(ctx, rc),
   outside the failing allocator (either may be NULL: set up and check or
   clean).  A failed run must fail cleanly -- SHS_ENOMEM or an "out of
   memory" message -- and every run must leave no allocation live.  Prints
   "alloc sweep: WHAT: N allocations, each failed once: K errors" and
   returns K (the runs that failed). */
typedef struct tu_sweep {
    const char *what;
    int (*run)(void *ctx);
    void (*before)(void *ctx);
    void (*after)(void *ctx, int rc);
    void *ctx;
} tu_sweep;
long tu_failalloc_sweep(const tu_sweep *s);

/* ---- checkpoint-test helpers ------------------------------------------ */

/* The tracker file of a save path. */
#define TU_TRACKER "latest_checkpointed_iteration.txt"

/* Fail the test when `expr` is not SHS_OK, with the library's message. */
#define TU_OK(expr)                                                                                \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_ != SHS_OK)                                                                         \
            fail_msg("%s: %d %s", #expr, rc_, shs_last_error());                                   \
    } while (0)

/* Fail the test when shs_last_error() lacks `needle`. */
#define TU_ASSERT_MSG_HAS(needle)                                                                  \
    do {                                                                                           \
        if (!strstr(shs_last_error(), (needle)))                                                   \
            fail_msg("error message lacks '%s': %s", (needle), shs_last_error());                  \
    } while (0)

/* The per-test-program scratch root, made by tu_setup_root (a cmocka group
   setup) and removed by tu_teardown_root (the group teardown). */
extern char *tu_root;
int tu_setup_root(void **state);
int tu_teardown_root(void **state);

/* strdup("<dir>/<name>"); caller frees. */
char *tu_path_dup(const char *dir, const char *name);
/* A new (not yet existing) path under tu_root; caller frees. */
char *tu_subpath(const char *name);
/* Like tu_subpath, and the directory is created. */
char *tu_subdir(const char *name);

/* lstat succeeds. */
int tu_path_exists(const char *path);
/* Entries of `dir` other than "." and ".." (-1: cannot open). */
int tu_count_entries(const char *dir);
/* Entries of `dir` whose name starts with `prefix` (-1: cannot open). */
int tu_count_prefixed(const char *dir, const char *prefix);
/* .tmp-*, .trash-*, .replaced-* and tracker temporaries left in a save path. */
int tu_count_leftovers(const char *dir);

/* "iteration_%08lld" in a static rotating buffer (4 slots). */
const char *tu_step_name(int64_t step);
/* "<sp>/iteration_%08lld" (a tu_path slot). */
const char *tu_step_dir(const char *sp, int64_t step);
/* The tracker's text without its trailing newline (malloc'd, NULL when
   missing). */
char *tu_read_tracker(const char *sp);
/* The step in the tracker, -1 when missing. */
int64_t tu_tracker_step(const char *sp);
/* common.json of the step directory `dir`, read through the public API
   (shs_checkpoint_open + shs_checkpoint_progress): the first failure. */
int tu_read_progress(shs_progress *out, const char *dir);

/* A config that saves to `save_path` only when asked (huge interval), keeps
   everything and does not fsync. */
void tu_cfg_saving(shs_config *c, const char *save_path);
/* Save `st` once at p->global_step into save_path with a one-shot manager
   (and wait for it); returns the status. */
int tu_save_once(const char *save_path, shs_state *st, const shs_progress *p, int fsync_on);
/* epoch 1, step_num = global_step = step, loss scale 1024, batch 32,
   consumed step * 32. */
shs_progress tu_prog(int64_t step);

/* A small state: model w (F32 [4,3]), b (F32 [3]); optimizer w.exp_avg
   (F32 [4,3]) with known values derived from `base`. */
extern const uint64_t tu_w_shape[2], tu_b_shape[1];
typedef struct tu_small {
    shs_state *st;
    float w[12], b[3], wm[12];
} tu_small;
/* Fill w, b, wm from `base` (w[i] = base + i, wm[i] = 2 base + i/2,
   b[i] = base - i). */
void tu_small_fill(tu_small *s, float base);
/* Zero s, fill it, create s->st and register w, b (and w.exp_avg). */
void tu_small_make(tu_small *s, float base, int with_opt);
/* Register one tensor (fails the test on error). */
void tu_add_tensor(shs_state *st, const char *name, shs_kind kind, shs_dtype dt, size_t nd,
                   const uint64_t *shape, void *data, const char *master_of);
/* Fail the test unless blob `name` of `st` is exactly the string `want`. */
void tu_assert_blob_str(shs_state *st, const char *name, const char *want);

#endif
