/*
 * common_json.c -- common.json of a step directory: the training progress
 * (epoch, step, loss scale, ...) next to the tensors.
 * Format: docs/checkpoint.md.
 */
#include "source/common_json.h"

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
    json_t *o = NULL;
    int rc;
    if (flags)
        *flags = 0;
    if (!path)
        return shs__err(SHS_ENOMEM, "out of memory");
    if ((rc = shs__read_file_nofollow(&buf, &len, path, COMMON_MAX)) < 0)
        goto fail;
    json_error_t jerr;
    int oom = 0;
    o = shs__json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr, &oom);
    if (oom) {
        rc = shs__err(SHS_ENOMEM, "%s: out of memory reading it", path);
        goto fail;
    }
    if (!o || !json_is_object(o))
        BAD("%s: not a JSON object (%s)", path, o ? "wrong type" : jerr.text);
    static const char *const ints[] = { "epoch_num", "step_num", "global_step", "global_batch_size",
                                        "consumed_samples" };
    shs_progress out = SHS_PROGRESS_INIT;
    int64_t *odst[] = { &out.epoch_num, &out.step_num, &out.global_step, &out.global_batch_size,
                        &out.consumed_samples };
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        size_t i;
        for (i = 0; i < 5 && strcmp(key, ints[i]) != 0; i++)
            ;
        if (i < 5) {
            if (!json_is_integer(v) || json_integer_value(v) < 0)
                BAD("%s: \"%s\" must be a non-negative integer", path, key);
            *odst[i] = json_integer_value(v);
        } else if (strcmp(key, "loss_scale") == 0) {
            /* a number, or (as MindSpore's documentation shows) a numeric
               string; strtod would also take "inf" and "nan" */
            if (json_is_number(v))
                out.loss_scale = json_number_value(v);
            else if (json_is_string(v)) {
                char *end;
                out.loss_scale = strtod(json_string_value(v), &end);
                if (end == json_string_value(v) || *end)
                    BAD("%s: \"loss_scale\" must be a number", path);
            } else
                BAD("%s: \"loss_scale\" must be a number", path);
            if (!isfinite(out.loss_scale) || out.loss_scale < 0)
                BAD("%s: \"loss_scale\" is %g: it must be finite and not negative", path,
                    out.loss_scale);
        } else if (strcmp(key, "ckpt_status") == 0) {
            if (json_is_string(v)) {
                if (strlen(json_string_value(v)) >= sizeof out.ckpt_status)
                    BAD("%s: \"ckpt_status\" is too long", path);
                snprintf(out.ckpt_status, sizeof out.ckpt_status, "%s", json_string_value(v));
            } else if (json_is_integer(v) && json_integer_value(v) >= 0 &&
                       json_integer_value(v) <= 1000) {
                /* MindSpore's graph mode: CkptHealthStatus, 0 NORMAL, 1 ABNORMAL */
                snprintf(out.ckpt_status, sizeof out.ckpt_status, "%d", (int)json_integer_value(v));
            } else if (!json_is_null(v))
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
        if (!json_object_get(o, ints[i]))
            BAD("%s: missing \"%s\"", path, ints[i]);
    if (!json_object_get(o, "loss_scale") || !json_object_get(o, "ckpt_status"))
        BAD("%s: missing \"loss_scale\" or \"ckpt_status\"", path);
    if (!json_object_get(o, "consumed_samples")) {
        int64_t c;
        if (__builtin_mul_overflow(out.global_step, out.global_batch_size, &c))
            BAD("%s: no \"consumed_samples\", and global_step %lld x global_batch_size %lld "
                "overflows",
                path, (long long)out.global_step, (long long)out.global_batch_size);
        out.consumed_samples = c;
        if (flags)
            *flags |= SHS__COMMON_DERIVED_CONSUMED;
    }
    *p = out;
fail:
    json_decref(o);
    shs__free(buf);
    shs__free(path);
    return rc;
}

int shs__common_read(shs_progress *p, const char *dir)
{
    return shs__common_read_ex(p, dir, NULL);
}

#undef BAD
