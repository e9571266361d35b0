/* test_powerloss.c -- power-loss simulation: the only test of the fsync
 * ordering of the commit protocol.
 *
 * A test io layer (installed with shs__io_set) passes every call to POSIX
 * and keeps a model of what a power cut would leave:
 *   - a file's data is durable only as of the last fsync of that file
 *     (never fsynced: it comes back EMPTY -- the harshest plausible outcome
 *     of ext4/xfs delayed allocation);
 *   - a directory's entries (create, rename, unlink, mkdir, rmdir, link)
 *     are durable only as of the last fsync of that directory, each
 *     directory on its own (so a rename between two directories is durable
 *     in each only when each is fsynced; a new directory never fsynced
 *     comes back empty).
 * The model is kept per inode: files carry their last fsynced bytes,
 * directories their last fsynced name -> inode table; hard links share an
 * inode.  At the start of the measured save everything on disk counts as
 * durable (as after sync(1)).
 *
 * At call number N the layer cuts the power: call N and every later call
 * fail with EIO and do nothing (close and munmap still release the
 * descriptor or mapping: the process lives on, the disk is gone).  The
 * save path is then rebuilt from the durable model alone, a fresh manager
 * opens it (cleaning leftovers, restoring a step displaced by a re-save
 * cut between its two renames, taking the lock), and the test requires
 * the tracker to name a step that verifies and loads with the values of
 * either the previous checkpoint ("old") or the one being saved ("new").
 * A cut after the save returned must give "new".  N sweeps every io call
 * of the save; the real fsync is skipped (the model decides durability),
 * which keeps the sweep fast.
 *
 * Scenarios: a sync save (with save_max 1, so retention deletes the old
 * step after the commit), an async save, an incremental save (hard links
 * of unchanged files), a re-save of the same step (RENAME_EXCHANGE) and
 * the same re-save where `exchange` fails with EINVAL, which forces the
 * two-rename fallback of commit_dir.
 *
 * SHS_POWERLOSS_LONG=1: tensors larger than a checksum block and more of
 * them (for bench/ runs; minutes).  SHS_POWERLOSS_VERBOSE=1 prints every
 * cut's outcome.
 */
#include "testutil.h"

#include "store/io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* The durable model                                                  */
/* ------------------------------------------------------------------ */

typedef struct pl_ent {
    char *name;
    size_t node;
} pl_ent;

typedef struct pl_node {
    int is_dir;
    unsigned char *data; /* file: durable bytes */
    size_t len;
    pl_ent *ents; /* dir: durable entries */
    size_t n_ents;
    char *made; /* rollback: where it was recreated (hard links) */
} pl_node;

typedef struct pl_bind {
    dev_t dev;
    ino_t ino;
    size_t node;
} pl_bind;

enum {
    PL_PASS = 0,
    PL_RECORD = 1
};

static struct {
    pthread_mutex_t mu;
    int mode;
    long calls;      /* counted in RECORD mode */
    long cut_at;     /* 0: never */
    int cut;         /* power is off */
    int no_exchange; /* exchange fails with EINVAL (two-rename fallback) */
    long exchanges;  /* exchange calls recorded */
    pl_node *nodes;
    size_t n_nodes, cap_nodes;
    pl_bind *binds;
    size_t n_binds, cap_binds;
    size_t root;
} g = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "powerloss: out of memory\n");
        abort();
    }
    return q;
}

static size_t node_new(int is_dir)
{
    if (g.n_nodes == g.cap_nodes) {
        g.cap_nodes = g.cap_nodes ? 2 * g.cap_nodes : 64;
        g.nodes = xrealloc(g.nodes, g.cap_nodes * sizeof *g.nodes);
    }
    memset(&g.nodes[g.n_nodes], 0, sizeof *g.nodes);
    g.nodes[g.n_nodes].is_dir = is_dir;
    return g.n_nodes++;
}

/* The node of a real inode; a new one for an inode created from now on. */
static size_t bind_inode(const struct stat *st, int fresh)
{
    for (size_t i = 0; i < g.n_binds; i++)
        if (g.binds[i].dev == st->st_dev && g.binds[i].ino == st->st_ino) {
            if (fresh) /* the inode number was reused: a new file */
                g.binds[i].node = node_new(S_ISDIR(st->st_mode));
            return g.binds[i].node;
        }
    if (g.n_binds == g.cap_binds) {
        g.cap_binds = g.cap_binds ? 2 * g.cap_binds : 64;
        g.binds = xrealloc(g.binds, g.cap_binds * sizeof *g.binds);
    }
    g.binds[g.n_binds] = (pl_bind){ st->st_dev, st->st_ino, node_new(S_ISDIR(st->st_mode)) };
    return g.binds[g.n_binds++].node;
}

static void model_reset(void)
{
    for (size_t i = 0; i < g.n_nodes; i++) {
        free(g.nodes[i].data);
        for (size_t k = 0; k < g.nodes[i].n_ents; k++)
            free(g.nodes[i].ents[k].name);
        free(g.nodes[i].ents);
        free(g.nodes[i].made);
    }
    free(g.nodes);
    free(g.binds);
    g.nodes = NULL;
    g.binds = NULL;
    g.n_nodes = g.cap_nodes = g.n_binds = g.cap_binds = 0;
}

/* The current bytes of an open file become its durable content. */
static void snapshot_file(size_t node, int fd)
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    int rfd = open(proc, O_RDONLY | O_CLOEXEC); /* fd may be write-only */
    struct stat st;
    if (rfd < 0 || fstat(rfd, &st) != 0) {
        fprintf(stderr, "powerloss: cannot reopen fd %d: %s\n", fd, strerror(errno));
        abort();
    }
    pl_node *n = &g.nodes[node];
    n->data = xrealloc(n->data, (size_t)st.st_size);
    n->len = (size_t)st.st_size;
    size_t got = 0;
    while (got < n->len) {
        ssize_t r = pread(rfd, n->data + got, n->len - got, (off_t)got);
        if (r <= 0)
            abort();
        got += (size_t)r;
    }
    close(rfd);
}

/* The current entries of an open directory become its durable entries. */
static void snapshot_dir(size_t node, int fd)
{
    int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        fprintf(stderr, "powerloss: cannot list fd %d: %s\n", fd, strerror(errno));
        abort();
    }
    pl_ent *v = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        struct stat st;
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)))
            continue;
        v = xrealloc(v, (n + 1) * sizeof *v);
        v[n].name = strdup(e->d_name);
        v[n].node = bind_inode(&st, 0); /* unknown so far: durable as empty */
        n++;
    }
    closedir(d);
    pl_node *dn = &g.nodes[node];
    for (size_t k = 0; k < dn->n_ents; k++)
        free(dn->ents[k].name);
    free(dn->ents);
    dn->ents = v;
    dn->n_ents = n;
}

static void snapshot_fd(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        abort();
    size_t node = bind_inode(&st, 0);
    if (S_ISDIR(st.st_mode))
        snapshot_dir(node, fd);
    else
        snapshot_file(node, fd);
}

/* Everything under `path` is durable as it is now (sync(1)). */
static size_t snapshot_tree(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    size_t node = bind_inode(&st, 0);
    if (!S_ISDIR(st.st_mode)) {
        snapshot_file(node, fd);
        close(fd);
        return node;
    }
    snapshot_dir(node, fd);
    close(fd);
    size_t n = g.nodes[node].n_ents;
    for (size_t k = 0; k < n; k++) {
        char *child = tu_path_dup(path, g.nodes[node].ents[k].name);
        snapshot_tree(child);
        free(child);
    }
    return node;
}

/* Recreate `node` at `path` from the durable model only. */
static void materialize(size_t node, const char *path, int depth)
{
    assert_true(depth < 32);
    pl_node *n = &g.nodes[node];
    if (n->is_dir) {
        assert_int_equal(mkdir(path, 0755), 0);
        for (size_t k = 0; k < g.nodes[node].n_ents; k++) {
            char *child = tu_path_dup(path, g.nodes[node].ents[k].name);
            materialize(g.nodes[node].ents[k].node, child, depth + 1);
            free(child);
        }
        return;
    }
    if (n->made) {
        assert_int_equal(link(n->made, path), 0);
        return;
    }
    assert_int_equal(tu_write_file(path, n->data, n->len), 0);
    n->made = strdup(path);
}

/* The power is off and no metadata reached the disk beyond the fsyncs:
   the save path becomes what the model says survived. */
static void rollback(const char *save_path)
{
    tu_rmtree(save_path);
    materialize(g.root, save_path, 0);
}

/* The power is off just after the journal committed every metadata
   change (ordered metadata, writeback data: ext4's "zero-length file
   after rename"): names stay as they are, every file's bytes are what
   its last fsync made durable. */
static void scrub_data(const char *path)
{
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        assert_non_null(d);
        struct dirent *e;
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                char *child = tu_path_dup(path, e->d_name);
                scrub_data(child);
                free(child);
            }
        closedir(d);
        return;
    }
    if (!S_ISREG(st.st_mode))
        return;
    size_t node = bind_inode(&st, 0); /* unknown: created unseen, empty */
    assert_int_equal(tu_write_file(path, g.nodes[node].data, g.nodes[node].len), 0);
}

/* ------------------------------------------------------------------ */
/* The io layer                                                       */
/* ------------------------------------------------------------------ */

/* Count the call; 1 when it must fail because the power is off.  Holds
   the mutex (released by leave) so the model sees calls in one order. */
static int enter(void)
{
    pthread_mutex_lock(&g.mu);
    if (g.mode == PL_RECORD && !g.cut) {
        g.calls++;
        if (g.cut_at && g.calls >= g.cut_at)
            g.cut = 1;
    }
    return g.cut;
}

static int leave(int rc, int err)
{
    pthread_mutex_unlock(&g.mu);
    errno = err;
    return rc;
}

static int off(void)
{
    return leave(-1, EIO);
}

#define PL_WRAP(ret, name, params, args)                                                           \
    static ret pl_##name params                                                                    \
    {                                                                                              \
        if (enter())                                                                               \
            return (ret)off();                                                                     \
        ret r = shs__io_posix.name args;                                                           \
        int e = errno;                                                                             \
        pthread_mutex_unlock(&g.mu);                                                               \
        errno = e;                                                                                 \
        return r;                                                                                  \
    }

PL_WRAP(ssize_t, pread, (int fd, void *b, size_t n, off_t o), (fd, b, n, o))
PL_WRAP(ssize_t, pwrite, (int fd, const void *b, size_t n, off_t o), (fd, b, n, o))
PL_WRAP(int, ftruncate, (int fd, off_t len), (fd, len))
PL_WRAP(int, fstat, (int fd, struct stat *st), (fd, st))
PL_WRAP(int, rename, (const char *a, const char *b), (a, b))
PL_WRAP(int, unlink, (const char *p), (p))
PL_WRAP(int, rmdir, (const char *p), (p))
PL_WRAP(int, link, (const char *a, const char *b), (a, b))
PL_WRAP(int, reserve, (int fd, uint64_t len), (fd, len))
PL_WRAP(int, stat, (const char *p, struct stat *st), (p, st))
PL_WRAP(int, lstat, (const char *p, struct stat *st), (p, st))
PL_WRAP(int, list_dir, (const char *p, char ***names, size_t *n), (p, names, n))
PL_WRAP(int, lock, (int fd, int test_only), (fd, test_only))

static int pl_open(const char *path, int flags, mode_t mode)
{
    if (enter())
        return off();
    struct stat st;
    int created = (flags & O_CREAT) && lstat(path, &st) != 0 && errno == ENOENT;
    int fd = shs__io_posix.open(path, flags, mode);
    int e = errno;
    if (fd >= 0 && created && g.mode == PL_RECORD && fstat(fd, &st) == 0)
        bind_inode(&st, 1);
    return leave(fd, e);
}

static int pl_mkdir(const char *path, mode_t mode)
{
    if (enter())
        return off();
    int r = shs__io_posix.mkdir(path, mode);
    int e = errno;
    struct stat st;
    if (r == 0 && g.mode == PL_RECORD && lstat(path, &st) == 0)
        bind_inode(&st, 1);
    return leave(r, e);
}

static int pl_fsync(int fd)
{
    if (enter())
        return off();
    /* no real fsync: the model decides what is durable */
    if (g.mode == PL_RECORD)
        snapshot_fd(fd);
    return leave(0, 0);
}

static int pl_exchange(const char *a, const char *b)
{
    if (enter())
        return off();
    if (g.mode == PL_RECORD)
        g.exchanges++;
    if (g.no_exchange)
        return leave(-1, EINVAL);
    int r = shs__io_posix.exchange(a, b);
    return leave(r, errno);
}

/* The process survives the power cut: descriptors and mappings are still
   released, but nothing reaches the disk. */
static int pl_close(int fd)
{
    int cut = enter();
    int r = shs__io_posix.close(fd);
    return leave(cut ? 0 : r, errno);
}

static void *pl_mmap(int fd, size_t len)
{
    if (enter()) {
        off();
        return NULL;
    }
    void *p = shs__io_posix.mmap(fd, len);
    int e = errno;
    pthread_mutex_unlock(&g.mu);
    errno = e;
    return p;
}

static int pl_munmap(void *addr, size_t len)
{
    enter();
    int r = shs__io_posix.munmap(addr, len);
    return leave(r, errno);
}

static const shs__io_ops pl_ops = {
    .open = pl_open,
    .close = pl_close,
    .pread = pl_pread,
    .pwrite = pl_pwrite,
    .fsync = pl_fsync,
    .ftruncate = pl_ftruncate,
    .fstat = pl_fstat,
    .rename = pl_rename,
    .unlink = pl_unlink,
    .mkdir = pl_mkdir,
    .rmdir = pl_rmdir,
    .link = pl_link,
    .mmap = pl_mmap,
    .munmap = pl_munmap,
    .reserve = pl_reserve,
    .exchange = pl_exchange,
    .stat = pl_stat,
    .lstat = pl_lstat,
    .list_dir = pl_list_dir,
    .lock = pl_lock,
};

/* From now on: count calls, record durability, cut before call cut_at. */
static void pl_arm(const char *save_path, long cut_at)
{
    pthread_mutex_lock(&g.mu);
    model_reset();
    g.root = snapshot_tree(save_path);
    g.calls = 0;
    g.exchanges = 0;
    g.cut_at = cut_at;
    g.cut = 0;
    g.mode = PL_RECORD;
    pthread_mutex_unlock(&g.mu);
}

static long pl_power_off(void)
{
    pthread_mutex_lock(&g.mu);
    g.cut = 1;
    long n = g.calls;
    pthread_mutex_unlock(&g.mu);
    return n;
}

static void pl_disarm(void)
{
    pthread_mutex_lock(&g.mu);
    g.mode = PL_PASS;
    g.cut = 0;
    g.cut_at = 0;
    pthread_mutex_unlock(&g.mu);
}

/* ------------------------------------------------------------------ */
/* The training state                                                 */
/* ------------------------------------------------------------------ */

static int g_long;

typedef struct pl_state {
    shs_state *st;
    float *t[4];
    size_t n[4];
} pl_state;

static const char *const k_names[4] = { "model.w", "model.frozen", "model.b",
                                        "optimizer.w.exp_avg" };

/* Values of the save with `base`; model.frozen never changes (so an
   incremental save links it). */
static void state_fill(pl_state *s, float base)
{
    for (size_t k = 0; k < 4; k++)
        for (size_t i = 0; i < s->n[k]; i++)
            s->t[k][i] = k == 1 ? 7.0f + (float)(i % 1000)
                                : base * (float)(k + 1) + (float)(i % 977);
    char blob[64];
    int len = snprintf(blob, sizeof blob, "rng-%g", (double)base);
    TU_OK(shs_state_set_blob(s->st, "rng", blob, (size_t)len));
}

static void state_make(pl_state *s)
{
    memset(s, 0, sizeof *s);
    /* long mode: model.w and its moment span two 4 MiB checksum blocks */
    uint64_t rows = g_long ? 1100 : 4, cols = g_long ? 1024 : 3;
    uint64_t shapes[4][2] = {
        { rows, cols }, { g_long ? 5000 : 5, 1 }, { cols, 1 }, { rows, cols }
    };
    size_t ndim[4] = { 2, 1, 1, 2 };
    TU_OK(shs_state_create(&s->st));
    for (size_t k = 0; k < 4; k++) {
        s->n[k] = (size_t)(shapes[k][0] * (ndim[k] == 2 ? shapes[k][1] : 1));
        s->t[k] = calloc(s->n[k], sizeof(float));
        assert_non_null(s->t[k]);
        tu_add_tensor(s->st, k_names[k], k == 3 ? SHS_KIND_OPTIMIZER : SHS_KIND_MODEL, SHS_F32,
                      ndim[k], shapes[k], s->t[k], NULL);
    }
    TU_OK(shs_state_set_blob(s->st, "rng", "", 0));
}

static void state_free(pl_state *s)
{
    shs_state_free(s->st);
    for (size_t k = 0; k < 4; k++)
        free(s->t[k]);
}

/* Does the state hold exactly the values of `base`? */
static int state_is(pl_state *s, float base)
{
    pl_state want;
    state_make(&want);
    state_fill(&want, base);
    int same = 1;
    for (size_t k = 0; k < 4 && same; k++)
        same = memcmp(s->t[k], want.t[k], s->n[k] * sizeof(float)) == 0;
    const void *a, *b;
    size_t la, lb;
    if (same)
        same = shs_state_get_blob(s->st, "rng", &a, &la) == SHS_OK &&
               shs_state_get_blob(want.st, "rng", &b, &lb) == SHS_OK && la == lb &&
               memcmp(a, b, la) == 0;
    state_free(&want);
    return same;
}

/* ------------------------------------------------------------------ */
/* Scenarios                                                          */
/* ------------------------------------------------------------------ */

typedef struct save_pt {
    int64_t step;
    float base;
} save_pt;

typedef struct scenario {
    const char *name;
    int async, incremental, no_exchange, save_max;
    save_pt setup[3]; /* committed before the measured save */
    size_t n_setup;
    save_pt save;  /* the measured save */
    int known_bug; /* losses expected: print KNOWN BUG, do not fail */
    int no_fsync;  /* control: config fsync off */
    int must_lose; /* control: the sweep must find losses */
} scenario;

enum {
    OUT_OLD,
    OUT_NEW,
    OUT_LOST
};

static void cfg_for(shs_config *c, const scenario *sc, const char *sp)
{
    tu_cfg_saving(c, sp);
    c->fsync = !sc->no_fsync;
    c->async_save = sc->async;
    c->incremental = sc->incremental;
    c->save_max = sc->save_max;
}

static int g_verbose;

/* Reopen the save path after the power came back: which checkpoint is
   there, and is it whole?  `why` gets the reason of a loss. */
static int judge(const scenario *sc, const char *sp, char *why, size_t cap)
{
    const save_pt *old = &sc->setup[sc->n_setup - 1], *nw = &sc->save;
    int64_t tracker = -1;
    char dir[4096];
    int out = OUT_LOST;
    shs_manager *m = NULL;
    pl_state s;
    state_make(&s);
    /* a fresh manager first: it cleans the leftovers of the cut save (and
       puts back a step a re-save displaced) and must get the lock the dead
       one held */
    shs_config c;
    cfg_for(&c, sc, sp);
    int rc = shs_manager_create(&m, &c, s.st);
    if (rc != SHS_OK) {
        snprintf(why, cap, "manager create: %s", shs_last_error());
        goto done;
    }
    rc = shs_checkpoint_read_tracker(&tracker, sp);
    if (rc != SHS_OK) {
        snprintf(why, cap, "no readable tracker: %s", shs_last_error());
        goto done;
    }
    if (tracker != old->step && tracker != nw->step) {
        snprintf(why, cap, "tracker names step %lld", (long long)tracker);
        goto done;
    }
    snprintf(dir, sizeof dir, "%s", tu_step_dir(sp, tracker));
    if ((rc = shs_checkpoint_verify(dir, NULL, 0)) != SHS_OK) {
        snprintf(why, cap, "tracker's step %lld does not verify: %s", (long long)tracker,
                 shs_last_error());
        goto done;
    }
    shs_progress p = tu_prog(0);
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    if ((rc = shs_manager_load(&res, m, &p)) != SHS_OK || !res.loaded) {
        snprintf(why, cap, "load: %s", rc ? shs_last_error() : "nothing loaded");
        goto done;
    }
    /* a tracker one step behind a complete newer step (power lost between
       the commit rename and the tracker update) is repaired by the load:
       the newer step is loaded and the tracker rewritten to it */
    int repaired = res.tracker_repaired && tracker == old->step && res.step == nw->step;
    int64_t now = -1;
    if (repaired && (shs_checkpoint_read_tracker(&now, sp) != SHS_OK || now != nw->step)) {
        snprintf(why, cap, "the load repaired the tracker in its result only (tracker %lld)",
                 (long long)now);
        goto done;
    }
    if (repaired)
        tracker = nw->step;
    if (res.step != tracker || p.global_step != tracker) {
        snprintf(why, cap, "loaded step %lld, tracker %lld", (long long)res.step,
                 (long long)tracker);
        goto done;
    }
    if (tracker == nw->step && state_is(&s, nw->base))
        out = OUT_NEW;
    else if (tracker == old->step && state_is(&s, old->base))
        out = OUT_OLD;
    else
        snprintf(why, cap, "step %lld loaded with the values of neither save", (long long)tracker);
    if (out != OUT_LOST && tu_count_leftovers(sp) != 0) {
        snprintf(why, cap, "leftovers remain after a manager's create");
        out = OUT_LOST;
    }
done:
    shs_manager_free(m);
    state_free(&s);
    return out;
}

/* One run: set up, save with the power cut before io call cut_at (0: no
   cut; the power goes off after the save returned), roll back, judge.
   Returns the outcome; *calls gets the number of io calls of the save. */
static int run_once(const scenario *sc, const char *sp, long cut_at, int journaled, long *calls,
                    char *why, size_t cap)
{
    tu_rmtree(sp);
    assert_int_equal(mkdir(sp, 0755), 0);
    pl_state s;
    state_make(&s);
    shs_config c;
    cfg_for(&c, sc, sp);
    shs_manager *m = NULL;
    TU_OK(shs_manager_create(&m, &c, s.st));
    for (size_t i = 0; i < sc->n_setup; i++) {
        state_fill(&s, sc->setup[i].base);
        shs_progress p = tu_prog(sc->setup[i].step);
        TU_OK(shs_manager_save(m, &p, 0));
        TU_OK(shs_manager_wait(m));
    }
    state_fill(&s, sc->save.base);
    shs_progress p = tu_prog(sc->save.step);
    g.no_exchange = sc->no_exchange;
    pl_arm(sp, cut_at);
    int rc = shs_manager_save(m, &p, 0);
    if (rc == SHS_OK)
        rc = shs_manager_wait(m);
    *calls = pl_power_off();
    if (cut_at == 0) {
        /* the scenario takes the path it is meant to test */
        if (rc != SHS_OK)
            fail_msg("%s: the save without a power cut failed: %s", sc->name, shs_last_error());
        shs_save_stats st = SHS_SAVE_STATS_INIT;
        TU_OK(shs_manager_last_save(&st, m));
        if (sc->incremental && st.bytes_linked == 0)
            fail_msg("%s: nothing was hard-linked", sc->name);
        int resave = sc->save.step == sc->setup[sc->n_setup - 1].step;
        if (resave != (g.exchanges > 0))
            fail_msg("%s: %ld exchange calls", sc->name, g.exchanges);
    }
    shs_manager_free(m); /* the process lives on; its disk is gone */
    state_free(&s);
    pthread_mutex_lock(&g.mu);
    if (journaled)
        scrub_data(sp);
    else
        rollback(sp);
    pthread_mutex_unlock(&g.mu);
    pl_disarm();
    g.no_exchange = 0;
    return judge(sc, sp, why, cap);
}

static const char *const k_variant[2] = { "no metadata after the last fsync",
                                          "metadata journaled up to the cut" };

static void sweep(const scenario *sc)
{
    char *sp = tu_subpath("sp");
    char why[1200];
    long calls = 0, dummy, lost = 0, first_lost = -1; /* 0: after the save returned */
    char first_why[1400] = "";
    shs__io_set(&pl_ops);
    for (int journaled = 0; journaled < 2; journaled++) {
        long count[3] = { 0, 0, 0 };
        /* the save without a cut: how many calls, and it must survive a
           power cut right after it returned */
        int out = run_once(sc, sp, 0, journaled, &calls, why, sizeof why);
        if (out != OUT_NEW) {
            count[OUT_LOST]++;
            if (first_lost < 0) {
                first_lost = 0;
                snprintf(first_why, sizeof first_why,
                         "%s: power lost right after the save "
                         "returned: %s",
                         k_variant[journaled],
                         out == OUT_OLD ? "the previous checkpoint is back" : why);
            }
        } else {
            count[OUT_NEW]++;
        }
        assert_true(calls > 0);
        for (long n = 1; n <= calls; n++) {
            out = run_once(sc, sp, n, journaled, &dummy, why, sizeof why);
            count[out]++;
            if (g_verbose)
                printf("  %s (%s): cut before call %ld: %s%s\n", sc->name, k_variant[journaled], n,
                       out == OUT_OLD   ? "old"
                       : out == OUT_NEW ? "new"
                                        : "LOST: ",
                       out == OUT_LOST ? why : "");
            if (out == OUT_LOST && first_lost < 0) {
                first_lost = n;
                snprintf(first_why, sizeof first_why, "%s: %s", k_variant[journaled], why);
            }
        }
        lost += count[OUT_LOST];
        printf("powerloss: %-32s %-33s %4ld cuts: old %ld, new %ld, lost %ld\n", sc->name,
               k_variant[journaled], calls + 1, count[OUT_OLD], count[OUT_NEW], count[OUT_LOST]);
    }
    shs__io_set(NULL);
    tu_rmtree(sp);
    free(sp);
    if (sc->must_lose) {
        if (!lost)
            fail_msg("%s: the control found no loss: the power-loss model is broken", sc->name);
        printf("powerloss: control (%s) lost as it must: %ld cuts; first (%s)\n", sc->name, lost,
               first_why);
        return;
    }
    if (sc->known_bug) {
        if (!lost)
            fail_msg("%s: expected to lose checkpoints (KNOWN BUG) but lost none: the bug is "
                     "fixed, drop the known_bug flag",
                     sc->name);
        printf("powerloss: KNOWN BUG (%s): %ld cuts lose both checkpoints; first at cut %ld "
               "(%s)\n",
               sc->name, lost, first_lost, first_why);
        return;
    }
    if (lost)
        fail_msg("%s: %ld power cuts lose both checkpoints; first at cut %ld (%s)", sc->name, lost,
                 first_lost, first_why);
}

static void test_sync_save(void **state)
{
    (void)state;
    const scenario sc = { .name = "sync save (save_max 1)",
                          .save_max = 1,
                          .setup = { { 1, 1.0f } },
                          .n_setup = 1,
                          .save = { 2, 2.0f } };
    sweep(&sc);
}

/* The sweep can fail: without fsync the same save must lose. */
static void test_control_no_fsync(void **state)
{
    (void)state;
    const scenario sc = { .name = "control: sync save, fsync off",
                          .no_fsync = 1,
                          .setup = { { 1, 1.0f } },
                          .n_setup = 1,
                          .save = { 2, 2.0f },
                          .must_lose = 1 };
    sweep(&sc);
}

static void test_async_save(void **state)
{
    (void)state;
    const scenario sc = { .name = "async save",
                          .async = 1,
                          .setup = { { 1, 1.0f } },
                          .n_setup = 1,
                          .save = { 2, 2.0f } };
    sweep(&sc);
}

static void test_incremental_save(void **state)
{
    (void)state;
    /* the second setup save puts the unchanged tensor in a frozen file;
       the measured save hard-links it */
    const scenario sc = { .name = "incremental save",
                          .incremental = 1,
                          .setup = { { 1, 1.0f }, { 2, 2.0f } },
                          .n_setup = 2,
                          .save = { 3, 3.0f } };
    sweep(&sc);
}

static void test_resave_exchange(void **state)
{
    (void)state;
    const scenario sc = { .name = "re-save of a step (exchange)",
                          .setup = { { 1, 1.0f }, { 2, 2.0f } },
                          .n_setup = 2,
                          .save = { 2, 3.0f } };
    sweep(&sc);
}

static void test_resave_two_renames(void **state)
{
    (void)state;
    /* Without RENAME_EXCHANGE the old step is renamed to
       .replaced-iteration_N-* before the new one takes its name.  A cut
       between the two renames (once the first reached the disk) leaves the
       tracker naming a step without a directory; the next manager's
       cleanup renames the .replaced- copy back (until that fix it deleted
       both copies as leftovers). */
    const scenario sc = { .name = "re-save of a step (two renames)",
                          .no_exchange = 1,
                          .setup = { { 1, 1.0f }, { 2, 2.0f } },
                          .n_setup = 2,
                          .save = { 2, 3.0f } };
    sweep(&sc);
}

/* ------------------------------------------------------------------ */
/* The seam's listing and its errors                                  */
/* ------------------------------------------------------------------ */

static int g_fail_list;

static int f_list_dir(const char *p, char ***names, size_t *n)
{
    if (g_fail_list) {
        errno = EIO;
        return -1;
    }
    return shs__io_posix.list_dir(p, names, n);
}

static void test_list_dir(void **state)
{
    (void)state;
    char *d = tu_subdir("listing");
    const char *names[] = { "b", "a", ".hidden", "c.d", "aa" };
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(tu_write_file(tu_path(d, names[i]), "x", 1), 0);
    char **v = NULL;
    size_t n = 0;
    TU_OK(shs__io_list_dir(&v, &n, d));
    assert_int_equal(n, 5);
    const char *sorted[] = { ".hidden", "a", "aa", "b", "c.d" };
    for (size_t i = 0; i < 5; i++)
        assert_string_equal(v[i], sorted[i]);
    shs__io_names_free(v, n);
    shs__io_names_free(NULL, 0);

    char *missing = tu_subpath("nolisting");
    assert_int_equal(shs__io_list_dir(&v, &n, missing), SHS_ENOENT);
    assert_null(v);
    assert_int_equal(n, 0);
    TU_ASSERT_MSG_HAS("cannot list directory");
    TU_ASSERT_MSG_HAS(missing);

    /* rmtree lists through the seam: a failing listing is an error naming
       the directory, and nothing is half-removed silently */
    static shs__io_ops ops;
    ops = shs__io_posix;
    ops.list_dir = f_list_dir;
    shs__io_set(&ops);
    g_fail_list = 1;
    int rc = shs__rmtree(d);
    g_fail_list = 0;
    shs__io_set(NULL);
    assert_int_equal(rc, SHS_EIO);
    TU_ASSERT_MSG_HAS(d);
    assert_true(tu_path_exists(tu_path(d, "a")));
    TU_OK(shs__rmtree(d));
    assert_false(tu_path_exists(d));

    /* mkdirs through the seam's stat: a file in the way */
    char *f = tu_subpath("afile");
    assert_int_equal(tu_write_file(f, "x", 1), 0);
    assert_int_equal(shs__mkdirs(f, 0755), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("not a directory");
    free(f);
    free(missing);
    free(d);
}

/* The layer itself: a cut really discards what was not made durable. */
static void test_layer_model(void **state)
{
    (void)state;
    char *d = tu_subdir("model");
    assert_int_equal(tu_write_file(tu_path(d, "old"), "durable", 7), 0);
    shs__io_set(&pl_ops);
    pl_arm(d, 0);
    int fd;
    /* synced file, synced entry: survives */
    char *a = tu_path_dup(d, "a"), *b = tu_path_dup(d, "b"), *old = tu_path_dup(d, "old");
    TU_OK(shs__io_open(&fd, a, O_WRONLY | O_CREAT, 0644));
    TU_OK(shs__io_pwrite_full(fd, "AAAA", 4, 0, a));
    TU_OK(shs__io_fsync(fd, a));
    TU_OK(shs__io_close(fd, a));
    /* unsynced data: comes back empty */
    TU_OK(shs__io_open(&fd, b, O_WRONLY | O_CREAT, 0644));
    TU_OK(shs__io_pwrite_full(fd, "BBBB", 4, 0, b));
    TU_OK(shs__io_close(fd, b));
    TU_OK(shs__io_fsync_dir(d));
    /* removed after the directory's last fsync: comes back */
    assert_int_equal(shs__io->unlink(old), 0);
    /* overwritten after its fsync: the fsynced bytes come back */
    TU_OK(shs__io_open(&fd, a, O_WRONLY, 0));
    TU_OK(shs__io_pwrite_full(fd, "ZZ", 2, 0, a));
    TU_OK(shs__io_close(fd, a));
    pl_power_off();
    assert_int_equal(shs__io->unlink(a), -1); /* the power is off */
    assert_int_equal(errno, EIO);
    pthread_mutex_lock(&g.mu);
    rollback(d);
    pthread_mutex_unlock(&g.mu);
    pl_disarm();
    shs__io_set(NULL);
    size_t len = 0;
    char *t = tu_read_file(a, &len);
    assert_non_null(t);
    assert_int_equal(len, 4);
    assert_memory_equal(t, "AAAA", 4);
    free(t);
    t = tu_read_file(b, &len);
    assert_non_null(t);
    assert_int_equal(len, 0);
    free(t);
    t = tu_read_file(old, &len);
    assert_non_null(t);
    assert_int_equal(len, 7);
    free(t);
    assert_int_equal(tu_count_entries(d), 3);
    tu_rmtree(d);
    free(a);
    free(b);
    free(old);
    free(d);
}

int main(void)
{
    const char *lg = getenv("SHS_POWERLOSS_LONG");
    const char *vb = getenv("SHS_POWERLOSS_VERBOSE");
    g_long = lg && *lg && strcmp(lg, "0") != 0;
    g_verbose = vb && *vb && strcmp(vb, "0") != 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list_dir),        cmocka_unit_test(test_layer_model),
        cmocka_unit_test(test_sync_save),       cmocka_unit_test(test_control_no_fsync),
        cmocka_unit_test(test_async_save),      cmocka_unit_test(test_incremental_save),
        cmocka_unit_test(test_resave_exchange), cmocka_unit_test(test_resave_two_renames),
    };
    int rc = TU_RUN_GROUP(tests, tu_setup_root, tu_teardown_root);
    pthread_mutex_lock(&g.mu);
    model_reset();
    pthread_mutex_unlock(&g.mu);
    return rc;
}
