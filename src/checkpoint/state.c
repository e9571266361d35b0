/* state.c -- registry of tensors and blobs (see shardsafe.h, state.h). */
#include "checkpoint/state.h"
#include "common/opts.h"

#include <string.h>

int shs_state_create(shs_state **out)
{
    if (!out)
        return shs__err(SHS_EINVAL, "shs_state_create: out is NULL");
    *out = NULL;
    shs_state *s = shs__calloc(1, sizeof *s);
    if (!s)
        return shs__err(SHS_ENOMEM, "out of memory creating a state");
    int rc = shs__namemap_init(&s->names, 64);
    if (rc < 0) {
        shs__free(s);
        return rc;
    }
    *out = s;
    return SHS_OK;
}

static void tensor_release(shs__tensor *t)
{
    shs__free(t->name);
    shs__free(t->shape);
    shs__free(t->gshape);
    shs__free(t->goff);
    shs__free(t->master_of);
}

void shs_state_free(shs_state *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        tensor_release(&s->t[i]);
    for (size_t i = 0; i < s->nb; i++) {
        shs__free(s->b[i].name);
        shs__free(s->b[i].data);
    }
    shs__free(s->t);
    shs__free(s->b);
    shs__namemap_release(&s->names);
    shs__free(s);
}

static const char *state_name_fn(const void *ctx, uint32_t i, size_t *len)
{
    const shs__tensor *t = (const shs__tensor *)ctx + i;
    *len = t->name_len;
    return t->name;
}

long shs__state_find(const shs_state *s, const char *name, size_t len)
{
    return shs__namemap_find(&s->names, name, len, state_name_fn, s->t);
}

int shs_state_add_tensor(shs_state *s, const shs_tensor_spec *sp)
{
    int rc;
    if (!s || !sp || !sp->name)
        return shs__err(SHS_EINVAL, "shs_state_add_tensor: state, spec or name is NULL");
    /* every field read below is a version-1 field */
    if ((rc = shs__check_version(sp, SHS__V_TENSOR_SPEC, "shs_state_add_tensor")) < 0)
        return rc;
    size_t len = strlen(sp->name);
    if (len == 0 || shs__utf8_check((const unsigned char *)sp->name, len) != len ||
        (len == 12 && memcmp(sp->name, "__metadata__", 12) == 0))
        return shs__err(SHS_EINVAL, "tensor name '%s' is empty, reserved or not UTF-8", sp->name);
    if ((unsigned)sp->dtype >= SHS_DTYPE_COUNT ||
        (sp->kind != SHS_KIND_MODEL && sp->kind != SHS_KIND_OPTIMIZER))
        return shs__err(SHS_EINVAL, "tensor '%s': invalid dtype or kind", sp->name);
    if (sp->ndim > SHS_MAX_DIMS || (sp->ndim && !sp->shape))
        return shs__err(SHS_EINVAL, "tensor '%s': bad shape", sp->name);
    for (size_t d = 0; d < sp->ndim; d++) {
        uint64_t g = sp->global_shape ? sp->global_shape[d] : sp->shape[d];
        uint64_t o = sp->global_offset ? sp->global_offset[d] : 0;
        if (o > g || sp->shape[d] > g - o)
            return shs__err(
                SHS_EINVAL,
                "tensor '%s': chunk [%llu, +%llu) outside global dimension %zu of size %llu",
                sp->name, (unsigned long long)o, (unsigned long long)sp->shape[d], d,
                (unsigned long long)g);
    }
    uint64_t nbytes, gbytes;
    if ((rc = shs_tensor_nbytes(&nbytes, sp->dtype, sp->ndim, sp->shape)) < 0 ||
        (sp->global_shape &&
         (rc = shs_tensor_nbytes(&gbytes, sp->dtype, sp->ndim, sp->global_shape)) < 0))
        return shs__err_prefix(rc, sp->name);
    if (nbytes && !sp->data)
        return shs__err(SHS_EINVAL, "tensor '%s': data is NULL", sp->name);
    if (shs__state_find(s, sp->name, len) >= 0)
        return shs__err(SHS_EDUPLICATE, "tensor '%s' is already registered", sp->name);
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 32;
        shs__tensor *t = shs__realloc(s->t, cap * sizeof *t);
        if (!t)
            return shs__err(SHS_ENOMEM, "out of memory registering '%s'", sp->name);
        s->t = t;
        s->cap = cap;
    }
    shs__tensor *t = &s->t[s->n];
    memset(t, 0, sizeof *t);
    size_t dims = sp->ndim ? sp->ndim : 1;
    t->name = shs__strndup(sp->name, len);
    t->shape = shs__calloc(dims, sizeof(uint64_t));
    t->gshape = shs__calloc(dims, sizeof(uint64_t));
    t->goff = shs__calloc(dims, sizeof(uint64_t));
    t->master_of = sp->master_of ? shs__strdup(sp->master_of) : NULL;
    if (!t->name || !t->shape || !t->gshape || !t->goff || (sp->master_of && !t->master_of)) {
        tensor_release(t);
        return shs__err(SHS_ENOMEM, "out of memory registering '%s'", sp->name);
    }
    t->name_len = len;
    t->kind = sp->kind;
    t->dtype = sp->dtype;
    t->ndim = sp->ndim;
    for (size_t d = 0; d < sp->ndim; d++) {
        t->shape[d] = sp->shape[d];
        t->gshape[d] = sp->global_shape ? sp->global_shape[d] : sp->shape[d];
        t->goff[d] = sp->global_offset ? sp->global_offset[d] : 0;
    }
    t->data = sp->data;
    t->nbytes = nbytes;
    rc = shs__namemap_insert(&s->names, t->name, len, (uint32_t)s->n, state_name_fn, s->t, NULL);
    if (rc < 0) {
        tensor_release(t);
        return rc;
    }
    s->n++;
    return SHS_OK;
}

shs__blob *shs__state_blob(const shs_state *s, const char *name)
{
    for (size_t i = 0; i < s->nb; i++)
        if (strcmp(s->b[i].name, name) == 0)
            return &s->b[i];
    return NULL;
}

int shs__state_put_blob(shs_state *s, const char *name, const void *data, size_t len)
{
    void *copy = shs__malloc(len ? len : 1);
    if (!copy)
        return shs__err(SHS_ENOMEM, "out of memory for blob '%s' (%zu bytes)", name, len);
    if (len)
        memcpy(copy, data, len);
    shs__blob *b = shs__state_blob(s, name);
    if (b) {
        shs__free(b->data);
        b->data = copy;
        b->len = len;
        return SHS_OK;
    }
    if (s->nb == s->capb) {
        size_t cap = s->capb ? s->capb * 2 : 8;
        shs__blob *nb = shs__realloc(s->b, cap * sizeof *nb);
        if (!nb) {
            shs__free(copy);
            return shs__err(SHS_ENOMEM, "out of memory for blob '%s'", name);
        }
        s->b = nb;
        s->capb = cap;
    }
    char *n = shs__strdup(name);
    if (!n) {
        shs__free(copy);
        return shs__err(SHS_ENOMEM, "out of memory for blob '%s'", name);
    }
    s->b[s->nb++] = (shs__blob){ n, copy, len };
    return SHS_OK;
}

int shs_state_set_blob(shs_state *s, const char *name, const void *data, size_t len)
{
    if (!s || !name || (!data && len))
        return shs__err(SHS_EINVAL, "shs_state_set_blob: NULL argument");
    size_t nl = strlen(name);
    if (nl == 0 || shs__utf8_check((const unsigned char *)name, nl) != nl ||
        (nl == 12 && memcmp(name, "__metadata__", 12) == 0))
        return shs__err(SHS_EINVAL, "blob name '%s' is empty, reserved or not UTF-8", name);
    return shs__state_put_blob(s, name, data, len);
}

int shs_state_get_blob(const shs_state *s, const char *name, const void **data, size_t *len)
{
    if (!s || !name || !data || !len)
        return shs__err(SHS_EINVAL, "shs_state_get_blob: NULL argument");
    const shs__blob *b = shs__state_blob(s, name);
    if (!b)
        return shs__err(SHS_ENOTFOUND, "no blob named '%s'", name);
    *data = b->data;
    *len = b->len;
    return SHS_OK;
}

size_t shs_state_tensor_count(const shs_state *s)
{
    return s ? s->n : 0;
}

uint64_t shs_state_nbytes(const shs_state *s)
{
    uint64_t n = 0;
    for (size_t i = 0; s && i < s->n; i++)
        n += s->t[i].nbytes;
    return n;
}

unsigned shs__blob_exclude_flag(const char *name)
{
    if (strcmp(name, "lr_scheduler") == 0)
        return SHS_EXCLUDE_LR_SCHEDULER;
    if (strcmp(name, "dataloader") == 0)
        return SHS_EXCLUDE_DATALOADER;
    if (strcmp(name, "rng") == 0)
        return SHS_EXCLUDE_RNG;
    if (strcmp(name, "train_state") == 0)
        return SHS_EXCLUDE_TRAIN_STATE;
    return 0;
}
