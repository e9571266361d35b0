/*
 * store_int.h -- the backends behind store.h: one table of operations
 * each (store_local.c, store_s3.c), dispatched by store.c.  Keys reach a
 * backend checked.
 */
#ifndef SHS_STORE_INT_H
#define SHS_STORE_INT_H

#include "store/store.h"

typedef struct shs__store_ops {
    int (*head)(shs__store *st, const char *key, uint64_t *size);
    int (*read_many)(shs__store *st, shs__store_range *r, size_t n);
    int (*read_all)(shs__store *st, const char *key, size_t max, char **out, size_t *len);
    /* names and dirs relative to the location; unsorted is fine */
    int (*list)(shs__store *st, const char *prefix, int delimited, shs__store_listing *out);
    int (*put)(shs__store *st, const char *key, const void *data, size_t len, unsigned flags);
    int (*upload_begin)(shs__store_upload *u, uint64_t size_hint);
    int (*upload_write)(shs__store_upload *u, const void *data, size_t len);
    int (*upload_commit)(shs__store_upload *u);
    void (*upload_abort)(shs__store_upload *u);
    int (*del)(shs__store *st, const char *key);
    int64_t (*now)(shs__store *st);
} shs__store_ops;

struct shs__store {
    const shs__store_ops *ops;
    char *location; /* as opened, no trailing '/' */
    /* local */
    char *dir;
    /* s3 */
    struct shs__s3 *s3;
    int own_s3;
    char *bucket;
    char *prefix; /* "" or "a/b/" */
};

struct shs__store_upload {
    shs__store *st;
    char *key;
    unsigned flags;
    /* local */
    char *path, *tmp;
    int fd;
    uint64_t off;
    /* s3 */
    struct shs__s3_upload *s3u;
};

extern const shs__store_ops shs__store_local_ops;
extern const shs__store_ops shs__store_s3_ops;

/* "<location>/<key>" for messages, into buf. */
const char *shs__store_name(char *buf, size_t cap, const shs__store *st, const char *key);
/* Add a name (and size) or a dir to a listing. */
int shs__store_list_add(shs__store_listing *l, const char *name, size_t len, uint64_t size,
                        int dir);

#endif
