/*
 * merge.c -- shs_merge and shs_merge_finish: a checkpoint's complete
 * tensors written in the Hugging Face layout (the plan is merge_plan.c).
 *
 * Reading goes through the public read API only (shs_checkpoint_read:
 * any box, any saved chunking, checksummed, dtype conversion); writing
 * through the streaming writer only (shs_writer_write_part).  A tensor is
 * cut into boxes that are contiguous in the output -- whole rows of its
 * first dimension when a row fits the buffer, else single rows cut along
 * the next dimension, and so on -- so memory is one buffer per job.
 *
 * Jobs: `jobs` threads take the boxes of one output file in file order
 * (tickets), read them in parallel into their own buffers (pread,
 * checksum, conversion: the expensive part) and write them in ticket
 * order under a mutex, so the file is written sequentially and the
 * single-threaded writer is never called twice at once.  Files are
 * written one after the other.
 *
 * Everything goes into "<target>.tmp-<random>", renamed to the target at
 * the end; any failure removes it, so there is never a partial output.
 * A killed run's is removed by the next run on the target (merge_tmp.h).
 */
#include "tools/merge.h"

#include "common/opts.h"

#include "store/io.h"
#include "tools/merge_tmp.h"
#include "tools/strategy.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

size_t shs__merge_buf_bytes = (size_t)16 << 20;
#define MERGE_BUF shs__merge_buf_bytes

typedef struct mctx {
    const shs_checkpoint *ck;
    const shs__mplan *plan;
    const shs_merge_opts *o;
    pthread_mutex_t mu; /* everything below */
    pthread_cond_t turn_cv;
    shs_writer *w;
    const shs__mfile *file;
    /* the box generator: the next box of the current file, in file order */
    size_t wi;               /* next tensor, in the writer's order */
    const shs__mtensor *cur; /* tensor being cut, NULL between tensors */
    int whole;               /* cur is read in one piece */
    size_t k;                /* cur is cut along dimension k */
    uint64_t step, pos;      /* rows of dimension k per box; next row */
    uint64_t inner[SHS_MAX_DIMS], idx[SHS_MAX_DIMS];
    uint64_t next_ticket, turn; /* boxes are written in ticket order */
    uint64_t done, total;
    int rc; /* first error of any thread; stops the others */
    char msg[1024];
} mctx;

/* One box to read and write. */
typedef struct mbox {
    const shs__mtensor *t;
    int whole; /* start/count unused: the whole tensor */
    uint64_t start[SHS_MAX_DIMS], count[SHS_MAX_DIMS];
    uint64_t off; /* byte offset in the tensor */
    size_t len;
    uint64_t ticket;
} mbox;

/* Record the calling thread's error (the message is thread-local). */
static void set_err_locked(mctx *c, int rc)
{
    if (c->rc == SHS_OK) {
        c->rc = rc;
        snprintf(c->msg, sizeof c->msg, "%s", shs_last_error());
    }
}

static int by_name_key(const void *key, const void *elem)
{
    return strcmp(key, ((const shs__mtensor *)elem)->name);
}

/* Start cutting tensor t: whole, or boxes of `step` rows of dimension k
   -- whole rows of the first dimension whose single slice fits the
   buffer -- so that every box is contiguous in the output. */
static void begin_tensor(mctx *c, const shs__mtensor *t)
{
    size_t nd = t->ndim;
    unsigned bits = shs_dtype_bits(t->dtype);
    c->cur = t;
    c->k = 0;
    c->pos = 0;
    /* (a sub-byte tensor whose rows are not whole bytes is refused by the
       read API, with a message naming it, whatever the box) */
    c->whole = nd == 0 || t->nbytes <= MERGE_BUF || (bits % 8 && (t->shape[nd - 1] * bits) % 8);
    if (c->whole)
        return;
    c->inner[nd - 1] = 1;
    for (size_t d = nd - 1; d > 0; d--)
        c->inner[d - 1] = c->inner[d] * t->shape[d]; /* <= numel: no overflow */
    while (c->k + 1 < nd && c->inner[c->k] * bits > (uint64_t)MERGE_BUF * 8)
        c->k++;
    c->step = (uint64_t)MERGE_BUF * 8 / (c->inner[c->k] * bits);
    if (bits % 8 && c->k == nd - 1)
        c->step &= ~(uint64_t)7; /* whole bytes per piece of a row */
    if (c->step == 0)
        c->whole = 1; /* a buffer smaller than one piece (tests) */
    for (size_t d = 0; d < nd; d++)
        c->idx[d] = 0;
}

/* The next box of the current file (called under the mutex); 0 when the
   file is done. */
static int next_box(mctx *c, mbox *b)
{
    while (!c->cur) {
        if (c->wi >= shs_writer_tensor_count(c->w))
            return 0;
        const char *name = shs_writer_tensor_name(c->w, c->wi++);
        const shs__mtensor *t = bsearch(name, c->plan->t + c->file->first, c->file->n, sizeof *t,
                                        by_name_key);
        if (t && t->nbytes) /* (empty tensors need no bytes) */
            begin_tensor(c, t);
    }
    const shs__mtensor *t = c->cur;
    b->t = t;
    b->ticket = c->next_ticket++;
    b->whole = c->whole;
    if (c->whole) {
        b->off = 0;
        b->len = (size_t)t->nbytes;
        c->cur = NULL;
        return 1;
    }
    size_t nd = t->ndim, k = c->k;
    unsigned bits = shs_dtype_bits(t->dtype);
    uint64_t base = 0;
    for (size_t d = 0; d < nd; d++) {
        b->start[d] = d < k ? c->idx[d] : 0;
        b->count[d] = d < k ? 1 : t->shape[d];
        if (d < k)
            base += c->idx[d] * c->inner[d];
    }
    b->start[k] = c->pos;
    b->count[k] = t->shape[k] - c->pos < c->step ? t->shape[k] - c->pos : c->step;
    b->len = (size_t)(b->count[k] * c->inner[k] * bits / 8);
    b->off = (base + c->pos * c->inner[k]) * bits / 8;
    c->pos += c->step;
    if (c->pos >= t->shape[k]) { /* next row of the outer dimensions */
        size_t d = k;
        c->pos = 0;
        while (d > 0 && ++c->idx[d - 1] == t->shape[d - 1])
            c->idx[--d] = 0;
        if (d == 0)
            c->cur = NULL;
    }
    return 1;
}

/* Read box b into buf (outside the mutex); NULL start/count: whole. */
static int read_box(mctx *c, const mbox *b, void *buf)
{
    return shs_checkpoint_read(c->ck, b->t->src, b->whole ? NULL : b->start,
                               b->whole ? NULL : b->count, b->t->dtype, buf, b->len);
}

/* Called under the mutex when box b's turn has come: write it, count it;
   then pass the turn on, whatever happened. */
static void write_box_locked(mctx *c, const mbox *b, const void *buf, int read_rc)
{
    int rc = read_rc;
    if (rc < 0)
        set_err_locked(c, rc);
    else if (c->rc == SHS_OK) {
        if ((rc = shs_writer_write_part(c->w, b->t->name, b->off, buf, b->len)) < 0)
            set_err_locked(c, rc);
        c->done += b->len;
        if (rc == SHS_OK && c->o->progress && c->o->progress(c->o->progress_ctx, c->done, c->total))
            set_err_locked(c, shs__err(SHS_ESTATE, "merge cancelled (by the progress callback)"));
    }
    c->turn++;
    pthread_cond_broadcast(&c->turn_cv);
}

/* Jobs take boxes in file order, read them in parallel (pread, checksum,
   conversion: the expensive part) and write them in file order: the
   file is written sequentially, and the writer, which is single-threaded,
   is only called under the mutex. */
static void *worker(void *arg)
{
    mctx *c = arg;
    unsigned char *buf = shs__malloc(MERGE_BUF);
    mbox b;
    pthread_mutex_lock(&c->mu);
    if (!buf)
        set_err_locked(
            c, shs__err(SHS_ENOMEM, "out of memory for a %zu-byte merge buffer", MERGE_BUF));
    while (c->rc == SHS_OK && next_box(c, &b)) {
        pthread_mutex_unlock(&c->mu);
        unsigned char *dst = buf;
        int rc;
        if (b.len > MERGE_BUF && !(dst = shs__malloc(b.len)))
            rc = shs__err(SHS_ENOMEM, "out of memory reading tensor '%s' (%zu bytes)",
                          b.t->src_name, b.len);
        else
            rc = read_box(c, &b, dst);
        pthread_mutex_lock(&c->mu);
        while (c->turn != b.ticket)
            pthread_cond_wait(&c->turn_cv, &c->mu);
        write_box_locked(c, &b, dst, rc);
        if (dst != buf)
            shs__free(dst);
    }
    pthread_mutex_unlock(&c->mu);
    shs__free(buf);
    return NULL;
}

/* Declare the tensors of file f and fix its header. */
static int declare(shs_writer *w, const shs__mplan *p, const shs__mfile *f)
{
    int rc = shs_writer_add_metadata(w, "format", "pt");
    for (size_t i = f->first; rc == SHS_OK && i < f->first + f->n; i++)
        rc = shs_writer_add_tensor(w, p->t[i].name, p->t[i].dtype, p->t[i].ndim, p->t[i].shape);
    return rc < 0 ? rc : shs_writer_seal(w);
}

static int write_file(mctx *c, const char *dir, const shs__mfile *f)
{
    shs_writer_opts wo = SHS_WRITER_OPTS_INIT;
    pthread_t *th = NULL;
    int nth = 0, rc;
    char *path = shs__path_join(dir, f->name);
    if (!path)
        return shs__err(SHS_ENOMEM, "out of memory");
    wo.fsync = (c->o->flags & SHS_MERGE_FSYNC) != 0;
    if ((rc = shs_writer_create(&c->w, path, &wo)) < 0 || (rc = declare(c->w, c->plan, f)) < 0)
        goto done;
    c->file = f;
    c->wi = 0;
    c->cur = NULL;
    c->next_ticket = c->turn = 0;
    int jobs = c->o->jobs > 1 ? c->o->jobs : 1;
    if ((size_t)jobs > f->n)
        jobs = (int)f->n;
    if (jobs > 1)
        th = shs__calloc((size_t)jobs, sizeof *th);
    /* helpers that cannot be started (or allocated) leave their share to
       the others */
    while (th && nth + 1 < jobs && pthread_create(&th[nth], NULL, worker, c) == 0)
        nth++;
    worker(c);
    for (int i = 0; i < nth; i++)
        pthread_join(th[i], NULL);
    if (c->rc < 0) {
        rc = shs__err(c->rc, "%s", c->msg);
        goto done;
    }
    rc = shs_writer_commit(c->w);
done:
    shs__free(th);
    shs_writer_free(c->w);
    c->w = NULL;
    shs__free(path);
    return rc;
}

/* The target may be created, or (force) replaced: *exists says which. */
static int check_target(const char *target, int force, int *exists)
{
    struct stat st;
    char **names = NULL;
    size_t n = 0;
    int rc;
    *exists = 0;
    if (shs__io->lstat(target, &st) != 0)
        return errno == ENOENT ? SHS_OK : shs__err_errno(errno, "cannot stat", target);
    *exists = 1;
    if (!force)
        return shs__err(SHS_EINVAL, "%s exists (a forced merge, --force, replaces it)", target);
    if (!S_ISDIR(st.st_mode))
        return shs__err(SHS_EINVAL, "%s exists and is not a directory: not replacing it", target);
    if ((rc = shs__io_list_dir(&names, &n, target)) < 0)
        return rc;
    for (size_t i = 0; i < n && rc == SHS_OK; i++) {
        char *p = shs__path_join(target, names[i]);
        if (!p)
            rc = shs__err(SHS_ENOMEM, "out of memory");
        else if (!shs__merge_own_name(names[i]) || shs__io->lstat(p, &st) != 0 ||
                 !S_ISREG(st.st_mode))
            rc = shs__err(SHS_EINVAL,
                          "%s: not replacing it: '%s' is not a file that a merge writes", target,
                          names[i]);
        shs__free(p);
    }
    shs__io_names_free(names, n);
    return rc;
}

/* A new empty "<target>.tmp-<random>", locked (merge_tmp.h), after the
   leftovers of killed runs on the same target are removed (best effort:
   one that cannot be removed does not stop this run, `ls` shows it). */
static int make_tmp(shs__tool_tmp *out, const char *target)
{
    char suffix[17], tmp[4096];
    if (shs__tool_leftovers(target, 1, NULL, NULL) < 0)
        shs__err_clear();
    shs__random_suffix(suffix);
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp-%s", target, suffix) >= sizeof tmp)
        return shs__err(SHS_EINVAL, "%s: path too long", target);
    return shs__tool_tmp_make(out, tmp, "merge");
}

/* Rename tmp to target (an existing target, checked by check_target, is
   moved aside first and removed after). */
static int install(const char *tmp, const char *target, int exists, int do_fsync)
{
    char *old = NULL;
    int rc = SHS_OK;
    if (exists) {
        char suffix[17];
        shs__random_suffix(suffix);
        size_t cap = strlen(target) + 32;
        if (!(old = shs__malloc(cap)))
            return shs__err(SHS_ENOMEM, "out of memory");
        snprintf(old, cap, "%s.old-%s", target, suffix);
        if (shs__io->rename(target, old) != 0) {
            rc = shs__err_errno(errno, "cannot move the old output aside", target);
            goto done;
        }
    }
    if (shs__io->rename(tmp, target) != 0) {
        rc = shs__err_errno(errno, "cannot rename the output into place", target);
        if (old && shs__io->rename(old, target) != 0)
            rc = shs__err_prefix(rc, "and the old output could not be put back");
        goto done;
    }
    if (old)
        shs__rmtree(old); /* the new output is in place; a leftover is harmless */
    if (do_fsync) {
        char *dir = shs__path_dirname(target);
        rc = dir ? shs__io_fsync_dir(dir) : shs__err(SHS_ENOMEM, "out of memory");
        shs__free(dir);
        /* the output is whole and in place; only its name is not durable
           (docs/merge.md, "Atomic output, errors") */
        if (rc < 0) {
            char why[640];
            snprintf(why, sizeof why,
                     "%.400s is complete, but the fsync of its parent directory failed: its name "
                     "may not survive a power loss",
                     target);
            rc = shs__err_prefix(rc, why);
        }
    }
done:
    shs__free(old);
    return rc;
}

static int write_index(const char *dir, const shs__mplan *p, int do_fsync)
{
    shs__buf b = SHS__BUF_INIT;
    char *path = shs__path_join(dir, SHS__MERGE_INDEX);
    int rc = path ? shs__merge_index_json(&b, p) : shs__err(SHS_ENOMEM, "out of memory");
    if (rc == SHS_OK)
        rc = shs__write_file(path, b.data, b.len, do_fsync);
    shs__buf_release(&b);
    shs__free(path);
    return rc;
}

/* Shared start of both calls: options, checkpoint, plan. */
static int begin(shs_checkpoint **ck, shs__mplan *p, const char *src, const char *dst,
                 const shs_merge_opts *o, int finish, const char *what)
{
    shs_checkpoint_open_opts co = SHS_CHECKPOINT_OPEN_OPTS_INIT;
    int rc = shs__merge_check_opts(o, finish, what);
    if (rc < 0)
        return rc;
    if (!src || !dst || !*dst)
        return shs__err(SHS_EINVAL, "%s: src or dst_dir is NULL or empty", what);
    co.step = o->step;
    /* pread, not mmap: mapped pages we touch would count in our RSS */
    co.flags = SHS_CHECKPOINT_OPEN_NO_MMAP;
    co.key = o->key; /* of an encrypted source (NULL in a version-1 struct) */
    co.key_len = o->key_len;
    /* seed 004's unified_safetensors(src_dir, src_strategy_file, ...):
       rank_N folders laid out by a MindSpore strategy file */
    const char *strategy = o->src_strategy_file;
    if ((rc = strategy ? shs__strategy_open(ck, src, strategy, co.flags)
                       : shs_checkpoint_open(ck, src, &co)) < 0)
        return rc;
    if ((rc = shs__merge_plan(p, *ck, o)) < 0) {
        shs_checkpoint_free(*ck);
        *ck = NULL;
    }
    return rc;
}

static void fill_result(shs_merge_result *r, const shs__mplan *p, size_t files, uint64_t bytes)
{
    shs_merge_result v = SHS_MERGE_RESULT_INIT;
    if (!r)
        return;
    v.n_tensors = p->n;
    v.n_files = p->nf;
    v.total_size = p->total;
    v.files_written = files;
    v.bytes_written = bytes;
    shs__copy_out(r, &v, SHS__V_MERGE_RESULT);
}

/* The caller's result and options checked, the options read into *o as
   far as their version goes (the rest: defaults). */
static int read_args(shs_merge_opts *o, const shs_merge_opts *opts, const shs_merge_result *r,
                     const char *what)
{
    int rc;
    *o = (shs_merge_opts)SHS_MERGE_OPTS_INIT;
    if (r && (rc = shs__check_version(r, SHS__V_MERGE_RESULT, what)) < 0)
        return rc;
    if (opts && (rc = shs__check_version(opts, SHS__V_MERGE_OPTS, what)) < 0)
        return rc;
    if (opts)
        shs__copy_in(o, opts, SHS__V_MERGE_OPTS);
    return SHS_OK;
}

char *shs__merge_part_dir(const char *dst, int index, int count)
{
    size_t cap = strlen(dst) + 64;
    char *p = shs__malloc(cap);
    if (p)
        snprintf(p, cap, "%s.part-%d-of-%d", dst, index, count);
    return p;
}

int shs_merge(shs_merge_result *result, const char *src, const char *dst_dir,
              const shs_merge_opts *opts)
{
    shs_merge_opts oo;
    const shs_merge_opts *o = &oo;
    shs_checkpoint *ck = NULL;
    shs__mplan p;
    shs__tool_tmp tt = { NULL, NULL, -1 };
    char *target = NULL, *tmp = NULL;
    size_t files = 0;
    mctx c;
    memset(&p, 0, sizeof p);
    memset(&c, 0, sizeof c);
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.turn_cv, NULL);
    int rc = read_args(&oo, opts, result, "shs_merge"), exists = 0;
    int do_fsync = (o->flags & SHS_MERGE_FSYNC) != 0;
    if (rc < 0 || (rc = begin(&ck, &p, src, dst_dir, o, 0, "shs_merge")) < 0)
        goto done;
    target = o->part_count ? shs__merge_part_dir(dst_dir, o->part_index, o->part_count)
                           : shs__strdup(dst_dir);
    if (!target) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = check_target(target, (o->flags & SHS_MERGE_FORCE) != 0, &exists)) < 0 ||
        (rc = make_tmp(&tt, target)) < 0)
        goto done;
    tmp = tt.path;
    c.ck = ck;
    c.plan = &p;
    c.o = o;
    for (size_t k = 0; k < p.nf; k++)
        if (!o->part_count || p.f[k].part == o->part_index)
            c.total += p.f[k].bytes;
    for (size_t k = 0; k < p.nf; k++) {
        if (o->part_count && p.f[k].part != o->part_index)
            continue;
        if ((rc = write_file(&c, tmp, &p.f[k])) < 0)
            goto done;
        files++;
    }
    if (!o->part_count && p.nf > 1 && (rc = write_index(tmp, &p, do_fsync)) < 0)
        goto done;
    if (do_fsync && (rc = shs__io_fsync_dir(tmp)) < 0)
        goto done;
    if ((rc = install(tmp, target, exists, do_fsync)) < 0)
        goto done;
    fill_result(result, &p, files, c.done);
done:
    if (tmp && rc < 0)
        shs__rmtree(tmp);
    shs__tool_tmp_release(&tt);
    pthread_cond_destroy(&c.turn_cv);
    pthread_mutex_destroy(&c.mu);
    shs__free(target);
    shs__merge_plan_free(&p);
    shs_checkpoint_free(ck);
    return rc;
}

/* File f of a part holds exactly the tensors the plan puts there. */
static int check_part_file(const char *path, const shs__mplan *p, const shs__mfile *f)
{
    shs_open_opts oo = SHS_OPEN_OPTS_INIT;
    shs_file *file = NULL;
    oo.flags = SHS_OPEN_NO_MMAP | SHS_OPEN_NO_FOLLOW;
    int rc = shs_file_open(&file, path, &oo);
    if (rc < 0)
        return rc == SHS_ENOENT ? shs__err(SHS_ENOENT, "%s is missing: was its part merged?", path)
                                : rc;
    if (shs_file_tensor_count(file) != f->n)
        rc = shs__err(SHS_ECORRUPT, "%s holds %zu tensors, the plan %zu: made with other options?",
                      path, shs_file_tensor_count(file), f->n);
    for (size_t i = f->first; rc == SHS_OK && i < f->first + f->n; i++) {
        const shs__mtensor *t = &p->t[i];
        size_t at;
        const shs_tensor_info *ti;
        if (shs_file_find(&at, file, t->name) < 0 || !(ti = shs_file_tensor(file, at)) ||
            ti->dtype != t->dtype || ti->ndim != t->ndim ||
            (t->ndim && memcmp(ti->shape, t->shape, t->ndim * sizeof *t->shape) != 0))
            rc = shs__err(SHS_ECORRUPT,
                          "%s: tensor '%s' is missing or differs from the plan (%s): made with "
                          "other options?",
                          path, t->name, shs_dtype_name(t->dtype));
    }
    shs_file_free(file);
    return rc;
}

int shs_merge_finish(shs_merge_result *result, const char *src, const char *dst_dir,
                     const shs_merge_opts *opts)
{
    shs_checkpoint *ck = NULL;
    shs__mplan p;
    shs__tool_tmp tt = { NULL, NULL, -1 };
    char **parts = NULL, *tmp = NULL, *from = NULL, *to = NULL;
    int rc, exists = 0, n = 0;
    memset(&p, 0, sizeof p);
    if (!opts)
        return shs__err(SHS_EINVAL, "shs_merge_finish: needs options with part_count");
    shs_merge_opts oo;
    if ((rc = read_args(&oo, opts, result, "shs_merge_finish")) < 0)
        return rc;
    opts = &oo;
    int do_fsync = (opts->flags & SHS_MERGE_FSYNC) != 0;
    if ((rc = begin(&ck, &p, src, dst_dir, opts, 1, "shs_merge_finish")) < 0)
        goto done;
    n = opts->part_count;
    if (!(parts = shs__calloc((size_t)n, sizeof *parts))) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    for (int q = 0; q < n; q++) {
        struct stat st;
        if (!(parts[q] = shs__merge_part_dir(dst_dir, q, n))) {
            rc = shs__err(SHS_ENOMEM, "out of memory");
            goto done;
        }
        if (shs__io->lstat(parts[q], &st) != 0 || !S_ISDIR(st.st_mode)) {
            rc = shs__err(SHS_ENOENT, "part %d of %d is missing: no directory %s", q, n, parts[q]);
            goto done;
        }
    }
    for (size_t k = 0; k < p.nf; k++) {
        shs__free(from);
        if (!(from = shs__path_join(parts[p.f[k].part], p.f[k].name))) {
            rc = shs__err(SHS_ENOMEM, "out of memory");
            goto done;
        }
        if ((rc = check_part_file(from, &p, &p.f[k])) < 0)
            goto done;
    }
    if ((rc = check_target(dst_dir, (opts->flags & SHS_MERGE_FORCE) != 0, &exists)) < 0 ||
        (rc = make_tmp(&tt, dst_dir)) < 0)
        goto done;
    tmp = tt.path;
    /* hard links: the parts stay intact until the output is in place */
    for (size_t k = 0; k < p.nf; k++) {
        shs__free(from);
        shs__free(to);
        from = shs__path_join(parts[p.f[k].part], p.f[k].name);
        to = shs__path_join(tmp, p.f[k].name);
        if (!from || !to) {
            rc = shs__err(SHS_ENOMEM, "out of memory");
            goto done;
        }
        if (shs__io->link(from, to) != 0) {
            rc = shs__err_errno(errno, "cannot link a part's file into the output", from);
            goto done;
        }
    }
    if ((p.nf > 1 && (rc = write_index(tmp, &p, do_fsync)) < 0) ||
        (do_fsync && (rc = shs__io_fsync_dir(tmp)) < 0) ||
        (rc = install(tmp, dst_dir, exists, do_fsync)) < 0)
        goto done;
    for (int q = 0; q < n; q++)
        shs__rmtree(parts[q]); /* the output is complete without them */
    fill_result(result, &p, p.nf, 0);
done:
    if (tmp && rc < 0)
        shs__rmtree(tmp);
    for (int q = 0; parts && q < n; q++)
        shs__free(parts[q]);
    shs__free(parts);
    shs__tool_tmp_release(&tt);
    shs__free(from);
    shs__free(to);
    shs__merge_plan_free(&p);
    shs_checkpoint_free(ck);
    return rc;
}
