/*
 * store_s3.c -- the store seam on "s3://bucket/prefix": keys become
 * "<prefix><key>" in the bucket.  What a server lists is checked like
 * any hostile input: a key outside the prefix, or one that breaks the key
 * rules, fails the listing rather than reaching a caller.
 */
#include "store/store_int.h"

#include "store/s3.h"

#include <stdio.h>
#include <string.h>

#define FULL_MAX 2100

static int full_key(char *buf, const shs__store *st, const char *key)
{
    int n = snprintf(buf, FULL_MAX, "%s%s", st->prefix, key);
    if (n < 0 || n >= FULL_MAX)
        return shs__err(SHS_EINVAL, "%s/%s: key too long", st->location, key);
    return SHS_OK;
}

static int s3_head_op(shs__store *st, const char *key, uint64_t *size)
{
    char k[FULL_MAX];
    int rc = full_key(k, st, key);
    return rc < 0 ? rc : shs__s3_head(st->s3, st->bucket, k, size);
}

static int s3_read_many_op(shs__store *st, shs__store_range *r, size_t n)
{
    shs__s3_range *v = shs__calloc(n, sizeof *v);
    char **keys = shs__calloc(n, sizeof *keys);
    int rc = SHS_OK;
    if (!v || !keys) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n && rc == SHS_OK; i++) {
        char k[FULL_MAX];
        if ((rc = full_key(k, st, r[i].key)) < 0)
            break;
        if (!(keys[i] = shs__strdup(k))) {
            rc = shs__err(SHS_ENOMEM, "out of memory");
            break;
        }
        v[i] = (shs__s3_range){ keys[i], r[i].off, r[i].buf, r[i].len, 0 };
    }
    if (rc == SHS_OK) {
        rc = shs__s3_get_ranges(st->s3, st->bucket, v, n);
        for (size_t i = 0; i < n; i++)
            r[i].status = v[i].status;
    }
done:
    for (size_t i = 0; keys && i < n; i++)
        shs__free(keys[i]);
    shs__free(keys);
    shs__free(v);
    return rc;
}

static int s3_read_all_op(shs__store *st, const char *key, size_t max, char **out, size_t *len)
{
    char k[FULL_MAX];
    int rc = full_key(k, st, key);
    return rc < 0 ? rc : shs__s3_get_all(st->s3, st->bucket, k, max, out, len);
}

/* A key the server listed, made relative to the location and checked. */
static int listed(shs__store *st, const char *full, const char **rel, int dir)
{
    size_t pl = strlen(st->prefix);
    if (strncmp(full, st->prefix, pl) != 0)
        return shs__err(SHS_ECORRUPT, "LIST %s: the server listed '%.300s', outside the prefix",
                        st->location, full);
    *rel = full + pl;
    if (shs__store_key_check(*rel, dir) < 0 || (dir && !**rel))
        return shs__err(SHS_ECORRUPT, "LIST %s: the server listed an invalid key '%.300s'",
                        st->location, full);
    return SHS_OK;
}

static int s3_list_op(shs__store *st, const char *prefix, int delimited, shs__store_listing *out)
{
    char k[FULL_MAX];
    shs__s3_list_page pg;
    int rc = full_key(k, st, prefix);
    if (rc < 0)
        return rc;
    if ((rc = shs__s3_list(st->s3, st->bucket, k, delimited ? '/' : 0, &pg)) < 0)
        return rc;
    for (size_t i = 0; i < pg.nkeys && rc == SHS_OK; i++) {
        const char *rel = NULL;
        if ((rc = listed(st, pg.keys[i], &rel, 0)) == SHS_OK)
            rc = shs__store_list_add(out, rel, strlen(rel), pg.sizes[i], 0);
    }
    for (size_t i = 0; i < pg.nprefixes && rc == SHS_OK; i++) {
        const char *rel = NULL;
        if ((rc = listed(st, pg.prefixes[i], &rel, 1)) == SHS_OK)
            rc = shs__store_list_add(out, rel, strlen(rel), 0, 1);
    }
    shs__s3_list_page_release(&pg);
    return rc;
}

static int s3_put_op(shs__store *st, const char *key, const void *data, size_t len, unsigned flags)
{
    char k[FULL_MAX];
    int rc = full_key(k, st, key);
    return rc < 0 ? rc
                  : shs__s3_put(st->s3, st->bucket, k, data, len,
                                (flags & SHS__STORE_CREATE_ONLY) != 0);
}

static int s3_upload_begin_op(shs__store_upload *u, uint64_t size_hint)
{
    char k[FULL_MAX];
    int rc = full_key(k, u->st, u->key);
    return rc < 0 ? rc : shs__s3_upload_begin(&u->s3u, u->st->s3, u->st->bucket, k, size_hint);
}

static int s3_upload_write_op(shs__store_upload *u, const void *data, size_t len)
{
    return shs__s3_upload_write(u->s3u, data, len);
}

static void s3_upload_free(shs__store_upload *u)
{
    shs__free(u->key);
    shs__free(u);
}

static int s3_upload_commit_op(shs__store_upload *u)
{
    int rc = shs__s3_upload_commit(u->s3u);
    s3_upload_free(u);
    return rc;
}

static void s3_upload_abort_op(shs__store_upload *u)
{
    shs__s3_upload_abort(u->s3u);
    s3_upload_free(u);
}

static int s3_del_op(shs__store *st, const char *key)
{
    char k[FULL_MAX];
    int rc = full_key(k, st, key);
    return rc < 0 ? rc : shs__s3_delete(st->s3, st->bucket, k);
}

static int64_t s3_now_op(shs__store *st)
{
    return shs__s3_server_time(st->s3);
}

const shs__store_ops shs__store_s3_ops = {
    .head = s3_head_op,
    .read_many = s3_read_many_op,
    .read_all = s3_read_all_op,
    .list = s3_list_op,
    .put = s3_put_op,
    .upload_begin = s3_upload_begin_op,
    .upload_write = s3_upload_write_op,
    .upload_commit = s3_upload_commit_op,
    .upload_abort = s3_upload_abort_op,
    .del = s3_del_op,
    .now = s3_now_op,
};
