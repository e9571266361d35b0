/*
 * s3_upload.c -- a large object written front to back as a multipart
 * upload: the caller fills part buffers, a background thread drives
 * curl_multi over the full ones, each part retried on its own.  Memory
 * is at most cfg.parallel + 1 buffers of the part size (cfg.parallel in
 * flight, one filling); the writer waits when every one is busy.  An
 * object that ends inside its first part
 * never becomes a multipart upload: it is one PUT at commit.
 */
#include "store/s3_int.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

enum {
    PB_FREE,
    PB_FILLING,
    PB_QUEUED,
    PB_FLIGHT
};

typedef struct part_buf {
    char *data;
    size_t len, cap;
    int state;
    unsigned part; /* 1-based */
    char op[48];
    shs__buf query;
    s3_req req;
} part_buf;

struct shs__s3_upload {
    shs__s3 *s3;
    char *bucket, *key;
    size_t part_size;
    unsigned parallel; /* parts in flight at most */
    unsigned nbuf;     /* part buffers: parallel + 1 */
    part_buf *bufs;
    int cur; /* the buffer being filled, -1 none */
    char *upload_id;
    unsigned parts; /* queued so far */
    uint64_t total;
    char **etags; /* [SHS__S3_MAX_PARTS] lazily */
    CURLM *m;
    pthread_t th;
    int th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int closing; /* no part will be queued any more */
    int cancel;  /* __atomic: stop transfers now */
    int failed;  /* status of the first failed part */
    char msg[1100];
};

static s3_req *up_next(void *ctx)
{
    shs__s3_upload *u = ctx;
    part_buf *best = NULL;
    pthread_mutex_lock(&u->mu);
    for (unsigned i = 0; i < u->nbuf; i++)
        if (u->bufs[i].state == PB_QUEUED && (!best || u->bufs[i].part < best->part))
            best = &u->bufs[i];
    if (best)
        best->state = PB_FLIGHT;
    pthread_mutex_unlock(&u->mu);
    return best ? &best->req : NULL;
}

static void up_done(void *ctx, s3_req *r)
{
    shs__s3_upload *u = ctx;
    part_buf *b = r->user;
    pthread_mutex_lock(&u->mu);
    if (r->status == SHS_OK) {
        if (!(u->etags[b->part - 1] = shs__strdup(r->etag)) && !u->failed) {
            u->failed = SHS_ENOMEM;
            snprintf(u->msg, sizeof u->msg, "out of memory uploading s3://%s/%s", u->bucket,
                     u->key);
        }
    } else if (!u->failed) {
        u->failed = r->status;
        snprintf(u->msg, sizeof u->msg, "%s", r->msg);
        __atomic_store_n(&u->cancel, 1, __ATOMIC_RELAXED);
    }
    s3_req_release(r);
    b->state = PB_FREE;
    b->len = 0;
    pthread_cond_broadcast(&u->cv);
    pthread_mutex_unlock(&u->mu);
}

static int up_idle(void *ctx)
{
    shs__s3_upload *u = ctx;
    int finished = 0;
    pthread_mutex_lock(&u->mu);
    for (;;) {
        int queued = 0;
        for (unsigned i = 0; i < u->nbuf; i++)
            queued |= u->bufs[i].state == PB_QUEUED;
        if (queued)
            break;
        if (u->closing) {
            finished = 1;
            break;
        }
        pthread_cond_wait(&u->cv, &u->mu);
    }
    pthread_mutex_unlock(&u->mu);
    return finished;
}

static void *up_thread(void *arg)
{
    shs__s3_upload *u = arg;
    s3_feed f = { up_next, up_done, up_idle, u };
    s3_drive(u->s3, u->m, &f, u->parallel);
    return NULL;
}

int shs__s3_upload_begin(shs__s3_upload **out, shs__s3 *s3, const char *bucket, const char *key,
                         uint64_t size_hint)
{
    const shs__s3_config *c = shs__s3_cfg(s3);
    shs__s3_upload *u = shs__calloc(1, sizeof *u);
    *out = NULL;
    if (!u)
        return shs__err(SHS_ENOMEM, "out of memory");
    u->s3 = s3;
    u->cur = -1;
    u->part_size = c->part_size;
    /* 10,000 parts must hold the object: larger parts, in whole MiB */
    if (size_hint / SHS__S3_MAX_PARTS >= u->part_size) {
        uint64_t p = size_hint / SHS__S3_MAX_PARTS + 1;
        p = (p + (1u << 20) - 1) & ~(uint64_t)((1u << 20) - 1);
        if (p > SHS__S3_MAX_PART) {
            shs__free(u);
            return shs__err(SHS_EINVAL,
                            "s3://%s/%s: %llu bytes is more than S3 holds in one object", bucket,
                            key, (unsigned long long)size_hint);
        }
        u->part_size = (size_t)p;
    }
    /* one buffer more than the transfers: the writer fills one while
       `parallel` parts are in flight (with only `parallel` buffers, one
       transfer slot would sit idle during every fill) */
    u->parallel = c->parallel;
    u->nbuf = c->parallel + 1;
    pthread_mutex_init(&u->mu, NULL);
    pthread_cond_init(&u->cv, NULL);
    if (!(u->bucket = shs__strdup(bucket)) || !(u->key = shs__strdup(key)) ||
        !(u->bufs = shs__calloc(u->nbuf, sizeof *u->bufs))) {
        shs__s3_upload_abort(u);
        return shs__err(SHS_ENOMEM, "out of memory");
    }
    *out = u;
    return SHS_OK;
}

static int up_failed(shs__s3_upload *u)
{
    pthread_mutex_lock(&u->mu);
    int f = u->failed;
    pthread_mutex_unlock(&u->mu);
    return f ? shs__err(f, "%s", u->msg) : SHS_OK;
}

/* The multipart upload and its thread, at the first full part. */
static int up_start(shs__s3_upload *u)
{
    int rc;
    if (!(u->etags = shs__calloc(SHS__S3_MAX_PARTS, sizeof *u->etags)))
        return shs__err(SHS_ENOMEM, "out of memory");
    if (!(u->m = curl_multi_init()))
        return shs__err(SHS_ENOMEM, "out of memory (curl_multi_init)");
    if ((rc = s3_mpu_create(u->s3, u->bucket, u->key, &u->upload_id)) < 0)
        return rc;
    if (pthread_create(&u->th, NULL, up_thread, u) != 0)
        return shs__err(SHS_EIO, "s3://%s/%s: cannot start the upload thread", u->bucket, u->key);
    u->th_started = 1;
    return SHS_OK;
}

/* Hand buffer b (full, or the last) to the thread. */
static int up_queue(shs__s3_upload *u, part_buf *b)
{
    int rc;
    if (u->parts == SHS__S3_MAX_PARTS)
        return shs__err(SHS_EINVAL,
                        "s3://%s/%s: more than %u parts of %zu bytes (give the upload a size hint)",
                        u->bucket, u->key, SHS__S3_MAX_PARTS, u->part_size);
    b->part = ++u->parts;
    snprintf(b->op, sizeof b->op, "upload part %u of", b->part);
    if ((rc = s3_part_query(&b->query, b->part, u->upload_id)) < 0)
        return rc;
    memset(&b->req, 0, sizeof b->req);
    b->req.method = "PUT";
    b->req.op = b->op;
    b->req.bucket = u->bucket;
    b->req.key = u->key;
    b->req.query = b->query.data;
    b->req.body = b->data;
    b->req.body_len = b->len;
    b->req.user = b;
    b->req.cancel = &u->cancel;
    /* the payload hash is computed here, on the writer's thread, so that
       the transfer thread stays free to move bytes */
    if ((rc = s3_req_prepare(u->s3, &b->req)) < 0) {
        s3_req_release(&b->req);
        return rc;
    }
    pthread_mutex_lock(&u->mu);
    b->state = PB_QUEUED;
    pthread_cond_broadcast(&u->cv);
    pthread_mutex_unlock(&u->mu);
    curl_multi_wakeup(u->m);
    return SHS_OK;
}

/* A free buffer to fill, waiting for one if all are in flight. */
static int up_take(shs__s3_upload *u)
{
    int got = -1;
    pthread_mutex_lock(&u->mu);
    while (!u->failed) {
        for (unsigned i = 0; i < u->nbuf && got < 0; i++)
            if (u->bufs[i].state == PB_FREE)
                got = (int)i;
        if (got >= 0)
            break;
        pthread_cond_wait(&u->cv, &u->mu);
    }
    if (got >= 0)
        u->bufs[got].state = PB_FILLING;
    pthread_mutex_unlock(&u->mu);
    if (got < 0)
        return up_failed(u);
    u->cur = got;
    return SHS_OK;
}

int shs__s3_upload_write(shs__s3_upload *u, const void *data, size_t len)
{
    const char *p = data;
    int rc;
    if ((rc = up_failed(u)) < 0)
        return rc;
    while (len > 0) {
        if (u->cur < 0 && (rc = up_take(u)) < 0)
            return rc;
        part_buf *b = &u->bufs[u->cur];
        if (b->cap < u->part_size && b->len + len > b->cap) {
            /* grow towards the part size: a small object stays small */
            size_t want = b->cap ? b->cap * 2 : 64 * 1024;
            while (want < b->len + len && want < u->part_size)
                want *= 2;
            if (want > u->part_size)
                want = u->part_size;
            char *nd = shs__realloc(b->data, want);
            if (!nd)
                return shs__err(SHS_ENOMEM, "out of memory uploading s3://%s/%s", u->bucket,
                                u->key);
            b->data = nd;
            b->cap = want;
        }
        size_t n = u->part_size - b->len < len ? u->part_size - b->len : len;
        memcpy(b->data + b->len, p, n);
        b->len += n;
        u->total += n;
        p += n;
        len -= n;
        if (b->len == u->part_size) {
            if (!u->upload_id && (rc = up_start(u)) < 0)
                return rc;
            if ((rc = up_queue(u, b)) < 0)
                return rc;
            u->cur = -1;
        }
    }
    return SHS_OK;
}

static void up_stop(shs__s3_upload *u)
{
    pthread_mutex_lock(&u->mu);
    u->closing = 1;
    pthread_cond_broadcast(&u->cv);
    pthread_mutex_unlock(&u->mu);
    if (u->th_started) {
        curl_multi_wakeup(u->m);
        pthread_join(u->th, NULL);
        u->th_started = 0;
    }
}

static void up_free(shs__s3_upload *u)
{
    for (unsigned i = 0; u->bufs && i < u->nbuf; i++) {
        s3_req_release(&u->bufs[i].req);
        shs__buf_release(&u->bufs[i].query);
        shs__free(u->bufs[i].data);
    }
    for (unsigned i = 0; u->etags && i < u->parts; i++)
        shs__free(u->etags[i]);
    if (u->m)
        curl_multi_cleanup(u->m);
    pthread_mutex_destroy(&u->mu);
    pthread_cond_destroy(&u->cv);
    shs__free(u->etags);
    shs__free(u->bufs);
    shs__free(u->upload_id);
    shs__free(u->bucket);
    shs__free(u->key);
    shs__free(u);
}

void shs__s3_upload_abort(shs__s3_upload *u)
{
    if (!u)
        return;
    __atomic_store_n(&u->cancel, 1, __ATOMIC_RELAXED);
    up_stop(u);
    if (u->upload_id) {
        /* keep the caller's message: the abort is cleanup */
        char msg[1100];
        snprintf(msg, sizeof msg, "%s", shs_last_error());
        if (shs__s3_abort_upload(u->s3, u->bucket, u->key, u->upload_id) == SHS_OK)
            shs__err(SHS_OK, "%s", msg);
        else
            shs__err(SHS_OK, "%s (and aborting the multipart upload failed: %s)", msg,
                     shs_last_error());
    }
    up_free(u);
}

int shs__s3_upload_commit(shs__s3_upload *u)
{
    int rc = up_failed(u);
    if (rc < 0)
        goto fail;
    if (!u->upload_id) {
        /* it fits in one part: one PUT, no multipart upload */
        const char *data = u->cur >= 0 ? u->bufs[u->cur].data : NULL;
        size_t len = u->cur >= 0 ? u->bufs[u->cur].len : 0;
        rc = shs__s3_put(u->s3, u->bucket, u->key, data ? data : "", len, 0);
        if (rc < 0)
            goto fail;
        up_free(u);
        return SHS_OK;
    }
    if (u->cur >= 0 && u->bufs[u->cur].len > 0) {
        if ((rc = up_queue(u, &u->bufs[u->cur])) < 0)
            goto fail;
        u->cur = -1;
    }
    up_stop(u);
    if ((rc = up_failed(u)) < 0)
        goto fail;
    if ((rc = s3_mpu_complete(u->s3, u->bucket, u->key, u->upload_id, u->etags, u->parts,
                              u->total)) < 0)
        goto fail;
    up_free(u);
    return SHS_OK;
fail:
    shs__s3_upload_abort(u);
    return rc;
}
