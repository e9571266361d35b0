/*
 * store.c -- the store seam (store.h): locations, the key rules, and the
 * dispatch to the local and S3 backends.
 */
#include "store/store_int.h"

#include "store/io.h"
#include "store/s3.h"

#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MAX 1024
#define COMPONENT_MAX 200
#define TMP_MARKER ".shs-tmp-"

int shs__is_s3_location(const char *location)
{
    return location && strncmp(location, "s3://", 5) == 0;
}

static int key_problem(const char *key, int is_prefix, const char **why)
{
    size_t n = strlen(key);
    *why = NULL;
    if (n == 0 && !is_prefix)
        *why = "is empty";
    else if (n > KEY_MAX)
        *why = "is longer than 1024 bytes";
    else if (key[0] == '/')
        *why = "is absolute (starts with '/')";
    else if (strstr(key, TMP_MARKER))
        *why = "holds the temporary marker '" TMP_MARKER "'";
    if (*why)
        return 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c < 0x20 || c == 0x7f) {
            *why = "holds a control character";
            return 1;
        }
        if (c == '%') {
            *why = "holds a '%' (percent-encoding is refused)";
            return 1;
        }
        if (c == '\\') {
            *why = "holds a backslash";
            return 1;
        }
    }
    const char *p = key;
    while (*p) {
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 0 && !(is_prefix && !e)) {
            *why = "has an empty component ('//')";
            return 1;
        }
        if (len > COMPONENT_MAX) {
            *why = "has a component longer than 200 bytes";
            return 1;
        }
        /* a prefix's last component is a string prefix: "." or ".."
           there is still a whole component once a key completes it */
        if ((e || !is_prefix) && ((len == 1 && p[0] == '.') || (len == 2 && !memcmp(p, "..", 2)))) {
            *why = "has a '.' or '..' component";
            return 1;
        }
        if (!e)
            break;
        if (!e[1] && !is_prefix) {
            *why = "ends with '/'";
            return 1;
        }
        p = e + 1;
    }
    return 0;
}

int shs__store_key_check(const char *key, int is_prefix)
{
    const char *why;
    if (!key)
        return shs__err(SHS_EINVAL, "NULL key");
    if (key_problem(key, is_prefix, &why))
        return shs__err(SHS_EINVAL, "%s '%.300s' %s", is_prefix ? "prefix" : "key", key, why);
    return SHS_OK;
}

const char *shs__store_name(char *buf, size_t cap, const shs__store *st, const char *key)
{
    snprintf(buf, cap, "%s/%s", st->location, key ? key : "");
    return buf;
}

static int open_common(shs__store **out, const char *location, struct shs__s3 *s3)
{
    shs__store *st = NULL;
    int rc = SHS_OK;
    *out = NULL;
    if (!location || !*location)
        return shs__err(SHS_EINVAL, "empty store location");
    if (!(st = shs__calloc(1, sizeof *st)))
        return shs__err(SHS_ENOMEM, "out of memory");
    size_t len = strlen(location), keep = shs__is_s3_location(location) ? 5 : 1;
    while (len > keep && location[len - 1] == '/')
        len--;
    if (!(st->location = shs__strndup(location, len))) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto fail;
    }
    if (!shs__is_s3_location(location)) {
        st->ops = &shs__store_local_ops;
        if (!(st->dir = shs__strdup(st->location)))
            rc = shs__err(SHS_ENOMEM, "out of memory");
        goto check;
    }
    st->ops = &shs__store_s3_ops;
    const char *b = st->location + 5, *slash = strchr(b, '/');
    size_t bl = slash ? (size_t)(slash - b) : strlen(b);
    const char *prefix = slash ? slash + 1 : "";
    if (!(st->bucket = shs__strndup(b, bl))) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto fail;
    }
    if (bl < 3 || bl > 63 || strspn(st->bucket, "abcdefghijklmnopqrstuvwxyz0123456789-.") != bl) {
        rc = shs__err(SHS_EINVAL, "%s: bucket name '%s' is not 3 to 63 of a-z 0-9 '-' '.'",
                      location, st->bucket);
        goto fail;
    }
    if (*prefix && shs__store_key_check(prefix, 0) < 0) {
        rc = shs__err_prefix(SHS_EINVAL, location);
        goto fail;
    }
    size_t pl = strlen(prefix);
    if (!(st->prefix = shs__malloc(pl + 2))) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto fail;
    }
    snprintf(st->prefix, pl + 2, "%s%s", prefix, pl ? "/" : "");
    if (s3) {
        st->s3 = s3;
    } else {
        shs__s3_config cfg;
        if ((rc = shs__s3_config_load(&cfg)) < 0) {
            shs__err_prefix(rc, location);
            goto fail;
        }
        rc = shs__s3_open(&st->s3, &cfg);
        shs__s3_config_release(&cfg);
        st->own_s3 = 1;
    }
check:
    if (rc < 0)
        goto fail;
    *out = st;
    return SHS_OK;
fail:
    shs__store_close(st);
    return rc;
}

int shs__store_open(shs__store **out, const char *location)
{
    return open_common(out, location, NULL);
}

int shs__store_open_s3(shs__store **out, const char *location, struct shs__s3 *s3)
{
    if (!shs__is_s3_location(location) || !s3)
        return shs__err(SHS_EINVAL, "shs__store_open_s3: '%s' is not an s3:// location",
                        location ? location : "");
    return open_common(out, location, s3);
}

void shs__store_close(shs__store *st)
{
    if (!st)
        return;
    if (st->own_s3)
        shs__s3_close(st->s3);
    shs__free(st->location);
    shs__free(st->dir);
    shs__free(st->bucket);
    shs__free(st->prefix);
    shs__free(st);
}

int shs__store_is_s3(const shs__store *st)
{
    return st->ops == &shs__store_s3_ops;
}

const char *shs__store_location(const shs__store *st)
{
    return st->location;
}

struct shs__s3 *shs__store_s3(const shs__store *st)
{
    return st->s3;
}

const char *shs__store_local_dir(const shs__store *st)
{
    return st->dir;
}

char *shs__store_local_path(const shs__store *st, const char *key)
{
    if (!st->dir || shs__store_key_check(key, 0) < 0)
        return NULL;
    return shs__path_join(st->dir, key);
}

int shs__store_head(shs__store *st, const char *key, uint64_t *size)
{
    int rc = shs__store_key_check(key, 0);
    return rc < 0 ? rc : st->ops->head(st, key, size);
}

int shs__store_read_many(shs__store *st, shs__store_range *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int rc = shs__store_key_check(r[i].key, 0);
        r[i].status = rc;
        if (rc < 0)
            return rc;
    }
    return n ? st->ops->read_many(st, r, n) : SHS_OK;
}

int shs__store_read(shs__store *st, const char *key, uint64_t off, void *buf, size_t len)
{
    shs__store_range r = { key, off, buf, len, 0 };
    return shs__store_read_many(st, &r, 1);
}

int shs__store_read_all(shs__store *st, const char *key, size_t max, char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    int rc = shs__store_key_check(key, 0);
    return rc < 0 ? rc : st->ops->read_all(st, key, max, out, out_len);
}

void shs__store_list_release(shs__store_listing *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        shs__free(l->names[i]);
    for (size_t i = 0; i < l->ndirs; i++)
        shs__free(l->dirs[i]);
    shs__free(l->names);
    shs__free(l->sizes);
    shs__free(l->dirs);
    memset(l, 0, sizeof *l);
}

int shs__store_list_add(shs__store_listing *l, const char *name, size_t len, uint64_t size, int dir)
{
    char ***v = dir ? &l->dirs : &l->names;
    size_t *n = dir ? &l->ndirs : &l->n;
    /* grow at powers of two */
    if ((*n & (*n - 1)) == 0) {
        size_t cap = *n ? *n * 2 : 16;
        char **nv = shs__realloc(*v, cap * sizeof *nv);
        if (!nv)
            return shs__err(SHS_ENOMEM, "out of memory listing");
        *v = nv;
        if (!dir) {
            uint64_t *ns = shs__realloc(l->sizes, cap * sizeof *ns);
            if (!ns)
                return shs__err(SHS_ENOMEM, "out of memory listing");
            l->sizes = ns;
        }
    }
    if (!((*v)[*n] = shs__strndup(name, len)))
        return shs__err(SHS_ENOMEM, "out of memory listing");
    if (!dir)
        l->sizes[*n] = size;
    (*n)++;
    return SHS_OK;
}

typedef struct named {
    char *name;
    uint64_t size;
} named;

static int cmp_named(const void *a, const void *b)
{
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int shs__store_list(shs__store *st, const char *prefix, int delimited, shs__store_listing *out)
{
    memset(out, 0, sizeof *out);
    int rc = shs__store_key_check(prefix ? prefix : "", 1);
    if (rc < 0)
        return rc;
    if ((rc = st->ops->list(st, prefix ? prefix : "", delimited, out)) < 0) {
        shs__store_list_release(out);
        return rc;
    }
    if (out->n > 1) {
        named *v = shs__calloc(out->n, sizeof *v);
        if (!v) {
            shs__store_list_release(out);
            return shs__err(SHS_ENOMEM, "out of memory listing");
        }
        for (size_t i = 0; i < out->n; i++)
            v[i] = (named){ out->names[i], out->sizes[i] };
        qsort(v, out->n, sizeof *v, cmp_named);
        for (size_t i = 0; i < out->n; i++) {
            out->names[i] = v[i].name;
            out->sizes[i] = v[i].size;
        }
        shs__free(v);
    }
    if (out->ndirs > 1)
        qsort(out->dirs, out->ndirs, sizeof *out->dirs, cmp_str);
    return SHS_OK;
}

int shs__store_put(shs__store *st, const char *key, const void *data, size_t len, unsigned flags)
{
    int rc = shs__store_key_check(key, 0);
    return rc < 0 ? rc : st->ops->put(st, key, data, len, flags);
}

int shs__store_upload_begin(shs__store_upload **out, shs__store *st, const char *key,
                            uint64_t size_hint, unsigned flags)
{
    char nm[512];
    *out = NULL;
    int rc = shs__store_key_check(key, 0);
    if (rc < 0)
        return rc;
    if (flags & SHS__STORE_CREATE_ONLY)
        return shs__err(SHS_EUNSUPPORTED, "%s: a streaming upload cannot be create-only",
                        shs__store_name(nm, sizeof nm, st, key));
    shs__store_upload *u = shs__calloc(1, sizeof *u);
    if (!u || !(u->key = shs__strdup(key))) {
        shs__free(u);
        return shs__err(SHS_ENOMEM, "out of memory");
    }
    u->st = st;
    u->flags = flags;
    u->fd = -1;
    if ((rc = st->ops->upload_begin(u, size_hint)) < 0) {
        st->ops->upload_abort(u);
        return rc;
    }
    *out = u;
    return SHS_OK;
}

int shs__store_upload_write(shs__store_upload *u, const void *data, size_t len)
{
    return len ? u->st->ops->upload_write(u, data, len) : SHS_OK;
}

int shs__store_upload_commit(shs__store_upload *u)
{
    return u->st->ops->upload_commit(u);
}

void shs__store_upload_abort(shs__store_upload *u)
{
    if (u)
        u->st->ops->upload_abort(u);
}

int shs__store_delete(shs__store *st, const char *key)
{
    int rc = shs__store_key_check(key, 0);
    return rc < 0 ? rc : st->ops->del(st, key);
}

int shs__store_delete_prefix(shs__store *st, const char *prefix)
{
    shs__store_listing l;
    if (!prefix || !*prefix)
        return shs__err(SHS_EINVAL, "%s: refusing to delete everything (empty prefix)",
                        st->location);
    int rc = shs__store_list(st, prefix, 0, &l);
    for (size_t i = 0; i < l.n && rc == SHS_OK; i++)
        rc = st->ops->del(st, l.names[i]);
    shs__store_list_release(&l);
    if (rc == SHS_OK && st->dir) {
        /* the directories the files were in, when the prefix names one */
        size_t pl = strlen(prefix);
        char *d = shs__malloc(pl + 1);
        if (!d)
            return shs__err(SHS_ENOMEM, "out of memory");
        memcpy(d, prefix, pl + 1);
        while (pl && d[pl - 1] == '/')
            d[--pl] = '\0';
        char *path = shs__path_join(st->dir, d);
        shs__free(d);
        if (!path)
            return shs__err(SHS_ENOMEM, "out of memory");
        struct stat sb;
        if (prefix[strlen(prefix) - 1] == '/' && shs__io->lstat(path, &sb) == 0 &&
            S_ISDIR(sb.st_mode))
            rc = shs__rmtree(path);
        shs__free(path);
    }
    return rc;
}

int64_t shs__store_now(shs__store *st)
{
    return st->ops->now(st);
}

int shs__store_attempt_id(char out[33])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char r[16];
    if (RAND_bytes(r, sizeof r) != 1)
        return shs__err(SHS_EIO, "the cryptographic random generator failed");
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[r[i] >> 4];
        out[2 * i + 1] = hex[r[i] & 15];
    }
    out[32] = '\0';
    return SHS_OK;
}

int shs__store_commit_put(shs__store *st, const char *key, const void *data, size_t len)
{
    char nm[512];
    int rc = shs__store_put(st, key, data, len, SHS__STORE_CREATE_ONLY | SHS__STORE_FSYNC);
    if (rc != SHS_EEXIST)
        return rc;
    char *have = NULL;
    size_t hl = 0;
    int r2 = shs__store_read_all(st, key, len, &have, &hl);
    int same = r2 == SHS_OK && hl == len && memcmp(have, data, len) == 0;
    shs__free(have);
    if (same) {
        shs__err_clear();
        return SHS_OK;
    }
    return shs__err(SHS_EEXIST, "%s: already committed by another writer (create-only put refused)",
                    shs__store_name(nm, sizeof nm, st, key));
}
