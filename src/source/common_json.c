/*
 * common_json.c -- common.json of a step directory: the training progress
 * (epoch, step, loss scale, ...) next to the tensors.
 * Format: docs/checkpoint.md.
 */
#include "source/common_json.h"

#include "common/opts.h"
#include "format/json_doc.h"

#include "common/hash.h"

#include "store/io.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COMMON_MAX (1u << 16)

#define BAD(...)                                                                                   \
    do {                                                                                           \
        rc = shs__err(SHS_ECORRUPT, __VA_ARGS__);                                                  \
        goto fail;                                                                                 \
    } while (0)

int shs__common_write(uint64_t *xxh3, const char *dir, const shs_progress *p, int do_fsync)
{
    json_t *o = json_object();
    int rc = SHS_OK;
    char *text = NULL, *path = NULL;
    if (!o)
        return shs__err(SHS_ENOMEM, "out of memory");
    const shs_progress zero = SHS_PROGRESS_INIT;
    if (!p)
        p = &zero;
    if (!memchr(p->ckpt_status, 0, sizeof p->ckpt_status)) {
        json_decref(o);
        return shs__err(SHS_EINVAL,
                        "%s/common.json: ckpt_status is not a NUL-terminated string of at most "
                        "%zu bytes; nothing was saved",
                        dir, sizeof p->ckpt_status - 1);
    }
    /* JSON has no inf or NaN (jansson refuses them, which would read as
       "out of memory"): a diverged loss scale is the caller's to fix */
    if (!isfinite(p->loss_scale)) {
        json_decref(o);
        return shs__err(SHS_EINVAL,
                        "%s/common.json: loss_scale %g is not a finite number "
                        "(JSON cannot hold it); nothing was saved",
                        dir, p->loss_scale);
    }
    if (json_object_set_new(o, "epoch_num", json_integer(p->epoch_num)) ||
        json_object_set_new(o, "step_num", json_integer(p->step_num)) ||
        json_object_set_new(o, "global_step", json_integer(p->global_step)) ||
        json_object_set_new(o, "loss_scale", json_real(p->loss_scale)) ||
        json_object_set_new(o, "global_batch_size", json_integer(p->global_batch_size)) ||
        json_object_set_new(o, "consumed_samples", json_integer(p->consumed_samples)) ||
        json_object_set_new(o, "ckpt_status",
                            p->ckpt_status[0] ? json_string(p->ckpt_status) : json_null())) {
        rc = shs__err(SHS_ENOMEM, "out of memory writing common.json");
        goto done;
    }
    text = shs__json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    path = shs__path_join(dir, "common.json");
    if (!text || !path) {
        rc = shs__err(SHS_ENOMEM, "out of memory writing common.json");
        goto done;
    }
    size_t n = strlen(text);
    text[n] = '\n'; /* json_dumps leaves room only for the NUL: rewrite it */
    *xxh3 = shs__xxh3(text, n + 1);
    rc = shs__write_file(path, text, n + 1, do_fsync);
done:
    shs__free(text);
    shs__free(path);
    json_decref(o);
    return rc;
}

int shs__common_read_ex(shs_progress *p, const char *dir, unsigned *flags)
{
    char *path = shs__path_join(dir, "common.json"), *buf = NULL;
    size_t len;
    shs__jdoc d;
    int rc;
    memset(&d, 0, sizeof d);
    if (flags)
        *flags = 0;
    if (!path)
        return shs__err(SHS_ENOMEM, "out of memory");
    if ((rc = shs__read_file_nofollow(&buf, &len, path, COMMON_MAX)) < 0 ||
        (rc = shs__jdoc_parse(&d, buf, len, path)) < 0)
        goto fail;
    const shs__jnode *o = shs__jroot(&d);
    if (!shs__jis(o, SHS__J_OBJ))
        BAD("%s: not a JSON object", path);
    static const char *const ints[] = { "epoch_num", "step_num", "global_step", "global_batch_size",
                                        "consumed_samples" };
    shs_progress out = SHS_PROGRESS_INIT;
    int64_t *odst[] = { &out.epoch_num, &out.step_num, &out.global_step, &out.global_batch_size,
                        &out.consumed_samples };
    for (const shs__jnode *v = shs__jfirst(&d, o); v; v = shs__jnext(&d, v)) {
        const char *key = v->key;
        size_t i;
        if (strlen(key) != v->key_len)
            BAD("%s: a key holds a NUL byte", path);
        for (i = 0; i < 5 && strcmp(key, ints[i]) != 0; i++)
            ;
        if (i < 5) {
            if (v->type != SHS__J_NUM || !v->is_uint || v->u > INT64_MAX)
                BAD("%s: \"%s\" must be a non-negative integer", path, key);
            *odst[i] = (int64_t)v->u;
        } else if (strcmp(key, "loss_scale") == 0) {
            /* a number, or (as MindSpore's documentation shows) a numeric
               string; strtod would also take "inf" and "nan" */
            if (v->type == SHS__J_NUM)
                out.loss_scale = v->d;
            else if (v->type == SHS__J_STR) {
                char *end;
                out.loss_scale = strtod(v->s, &end);
                if (end == v->s || *end)
                    BAD("%s: \"loss_scale\" must be a number", path);
            } else
                BAD("%s: \"loss_scale\" must be a number", path);
            if (!isfinite(out.loss_scale) || out.loss_scale < 0)
                BAD("%s: \"loss_scale\" is %g: it must be finite and not negative", path,
                    out.loss_scale);
        } else if (strcmp(key, "ckpt_status") == 0) {
            if (v->type == SHS__J_STR) {
                if (v->len >= sizeof out.ckpt_status || strlen(v->s) != v->len)
                    BAD("%s: \"ckpt_status\" is too long or holds a NUL byte", path);
                snprintf(out.ckpt_status, sizeof out.ckpt_status, "%s", v->s);
            } else if (v->type == SHS__J_NUM && v->is_uint && v->u <= 1000) {
                /* MindSpore's graph mode: CkptHealthStatus, 0 NORMAL, 1 ABNORMAL */
                snprintf(out.ckpt_status, sizeof out.ckpt_status, "%d", (int)v->u);
            } else if (v->type != SHS__J_NULL)
                BAD("%s: \"ckpt_status\" must be a string, a small integer or null", path);
        } else {
            BAD("%s: unknown key \"%s\" (common.json holds exactly epoch_num, step_num, "
                "global_step, loss_scale, global_batch_size, consumed_samples, ckpt_status)",
                path, key);
        }
    }
    /* consumed_samples (index 4) may be missing: MindSpore Transformers
       writes six keys in some versions */
    for (size_t i = 0; i < 4; i++)
        if (!shs__jget(&d, o, ints[i]))
            BAD("%s: missing \"%s\"", path, ints[i]);
    if (!shs__jget(&d, o, "loss_scale") || !shs__jget(&d, o, "ckpt_status"))
        BAD("%s: missing \"loss_scale\" or \"ckpt_status\"", path);
    if (!shs__jget(&d, o, "consumed_samples")) {
        int64_t c;
        if (__builtin_mul_overflow(out.global_step, out.global_batch_size, &c))
            BAD("%s: no \"consumed_samples\", and global_step %lld x global_batch_size %lld "
                "overflows",
                path, (long long)out.global_step, (long long)out.global_batch_size);
        out.consumed_samples = c;
        if (flags)
            *flags |= SHS__COMMON_DERIVED_CONSUMED;
    }
    /* as far as the caller's version of the struct goes */
    shs__copy_out(p, &out, SHS__V_PROGRESS);
fail:
    shs__jdoc_free(&d);
    shs__free(buf);
    shs__free(path);
    return rc;
}

int shs__common_read(shs_progress *p, const char *dir)
{
    return shs__common_read_ex(p, dir, NULL);
}

#undef BAD
