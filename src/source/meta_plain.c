/*
 * meta_plain.c -- the checkpoint model (meta.h) of safetensors files that
 * have no metadata.json: a plain directory of files, a Hugging Face
 * model.safetensors.index.json, or one file.  Each tensor is one whole
 * chunk; names are unique across the files.
 */
#include "source/meta.h"

#include "store/io.h"
#include "source/stepdir.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define INDEX_MAX (256u << 20) /* a larger index file is refused */

static int cmp_mtensor(const void *a, const void *b)
{
    return strcmp(((const shs__mtensor *)a)->name, ((const shs__mtensor *)b)->name);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Append tensor `ti` of file fi as one whole chunk. */
static int add_whole(shs__meta *m, size_t *cap, const shs_file *f, const shs_tensor_info *ti,
                     uint32_t fi, shs_kind kind)
{
    if (m->nt == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        shs__mtensor *nt = shs__realloc(m->t, nc * sizeof *nt);
        if (!nt)
            return shs__err(SHS_ENOMEM, "out of memory");
        m->t = nt;
        *cap = nc;
    }
    shs__mtensor *t = &m->t[m->nt];
    memset(t, 0, sizeof *t);
    m->nt++;
    size_t nd = ti->ndim ? ti->ndim : 1;
    t->kind = kind;
    t->dtype = ti->dtype;
    t->ndim = ti->ndim;
    t->name = shs__strndup(ti->name, ti->name_len);
    t->gshape = shs__calloc(nd, sizeof *t->gshape);
    t->c = shs__calloc(1, sizeof *t->c);
    if (t->c) {
        t->nc = 1;
        t->c->off = shs__calloc(nd, sizeof(uint64_t));
        t->c->shape = shs__calloc(nd, sizeof(uint64_t));
        t->c->key = shs__strndup(ti->name, ti->name_len);
    }
    if (!t->name || !t->gshape || !t->c || !t->c->off || !t->c->shape || !t->c->key)
        return shs__err(SHS_ENOMEM, "out of memory");
    for (size_t d = 0; d < ti->ndim; d++)
        t->gshape[d] = t->c->shape[d] = ti->shape[d];
    t->c->file = fi;
    t->c->b0 = shs_file_data_start(f) + ti->offset;
    t->c->b1 = t->c->b0 + ti->nbytes;
    return SHS_OK;
}

/*
 * The model of the files `names` (n of them, taken over: freed with the
 * model) in `dir`.  With `weight_map` (a Hugging Face index) a file
 * contributes only the tensors the map assigns to it, and every tensor of
 * the map must be found; `what` names the source in messages.
 */
static int build(shs__meta *m, const char *dir, char **names, size_t n, json_t *weight_map,
                 const char *what)
{
    int rc = SHS_OK;
    size_t cap_t = 0;
    char stray[512] = ""; /* the first tensor of a file the index disagrees with */
    m->plain = 1;
    m->world_size = 1;
    m->step = -1;
    if (!(m->f = shs__calloc(n ? n : 1, sizeof *m->f))) {
        for (size_t i = 0; i < n; i++)
            shs__free(names[i]);
        return shs__err(SHS_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++)
        m->f[i].name = names[i];
    m->nf = n;
    for (size_t i = 0; i < m->nf && rc == SHS_OK; i++) {
        char *fp = shs__path_join(dir, m->f[i].name);
        shs_file *f = NULL;
        shs_open_opts oo = SHS_OPEN_OPTS_INIT;
        oo.flags = SHS_OPEN_NO_MMAP;
        rc = fp ? shs_file_open(&f, fp, &oo) : shs__err(SHS_ENOMEM, "out of memory");
        shs__free(fp);
        if (rc == SHS_ENOENT && weight_map)
            rc = shs__err(SHS_ECORRUPT, "%s: names the file '%s', which does not exist", what,
                          m->f[i].name);
        if (rc < 0)
            break;
        /* shardsafe's own file names tell optimizer state; a Hugging Face
           index names model weights only, whatever its file names */
        shs_kind kind = !weight_map && strstr(m->f[i].name, "-opt-") ? SHS_KIND_OPTIMIZER
                                                                     : SHS_KIND_MODEL;
        for (size_t k = 0; k < shs_file_tensor_count(f) && rc == SHS_OK; k++) {
            const shs_tensor_info *ti = shs_file_tensor(f, k);
            if (weight_map) {
                /* the index decides which file holds a tensor; a name with
                   a NUL byte cannot be in the map */
                json_t *v = strlen(ti->name) == ti->name_len ? json_object_get(weight_map, ti->name)
                                                             : NULL;
                if (!v || strcmp(json_string_value(v), m->f[i].name) != 0) {
                    if (!*stray && !v)
                        snprintf(stray, sizeof stray,
                                 "tensor '%s' of the file '%s' is not in the weight_map", ti->name,
                                 m->f[i].name);
                    else if (!*stray)
                        snprintf(stray, sizeof stray,
                                 "tensor '%s' is in the file '%s', but the weight_map "
                                 "names '%s'",
                                 ti->name, m->f[i].name, json_string_value(v));
                    continue;
                }
            }
            rc = add_whole(m, &cap_t, f, ti, (uint32_t)i, kind);
        }
        shs_file_close(f);
    }
    if (rc < 0)
        goto done;
    if (m->nt > 1)
        qsort(m->t, m->nt, sizeof *m->t, cmp_mtensor);
    for (size_t i = 1; i < m->nt; i++)
        if (strcmp(m->t[i - 1].name, m->t[i].name) == 0) {
            rc = shs__err(SHS_ECORRUPT, "%s: tensor '%s' appears in two files", what, m->t[i].name);
            goto done;
        }
    if (weight_map) {
        const char *key;
        json_t *v;
        json_object_foreach(weight_map, key, v)
        {
            if (!shs__meta_find(m, key)) {
                rc = shs__err(SHS_ECORRUPT,
                              "%s: tensor '%s' is mapped to '%s', which does not "
                              "hold it",
                              what, key, json_string_value(v));
                goto done;
            }
        }
        /* the index and the files it names agree exactly */
        if (*stray)
            rc = shs__err(SHS_ECORRUPT, "%s: %s", what, stray);
    }
done:
    if (rc < 0)
        shs__meta_free(m);
    return rc;
}

int shs__meta_from_plain(shs__meta *m, const char *dir)
{
    char **all = NULL;
    size_t n_all = 0, n = 0;
    memset(m, 0, sizeof *m);
    int rc = shs__io_list_dir(&all, &n_all, dir);
    if (rc < 0)
        return rc;
    /* the listing is sorted: keep the safetensors files in place */
    for (size_t i = 0; i < n_all; i++) {
        if (shs__is_safetensors_name(all[i]) && !shs_file_name_problem(all[i]))
            all[n++] = all[i];
        else
            shs__free(all[i]);
    }
    if (n == 0) {
        shs__free(all);
        return shs__err(SHS_ENOCHECKPOINT, "%s: no metadata.json and no .safetensors files", dir);
    }
    rc = build(m, dir, all, n, NULL, dir);
    shs__free(all);
    if (rc == SHS_OK) {
        const char *base = strrchr(dir, '/');
        m->step = shs__step_of_name(base ? base + 1 : dir);
    }
    return rc;
}

int shs__meta_from_file(shs__meta *m, const char *path)
{
    memset(m, 0, sizeof *m);
    const char *base = strrchr(path, '/');
    char *dir = shs__path_dirname(path);
    char **names = shs__calloc(1, sizeof *names);
    int rc;
    if (!dir || !names || !(names[0] = shs__strdup(base ? base + 1 : path)))
        rc = shs__err(SHS_ENOMEM, "out of memory");
    else
        rc = build(m, dir, names, 1, NULL, path); /* takes names[0] over */
    shs__free(names);
    shs__free(dir);
    return rc;
}

int shs__meta_from_hf_index(shs__meta *m, const char *index_path)
{
    char *text = NULL, *dir = NULL;
    char **names = NULL;
    size_t len, n = 0;
    json_t *root = NULL;
    json_error_t je;
    memset(m, 0, sizeof *m);
    int rc = shs__read_file(&text, &len, index_path, INDEX_MAX);
    if (rc < 0)
        return rc;
    int oom = 0;
    root = shs__json_loadb(text, len, JSON_REJECT_DUPLICATES, &je, &oom);
    if (oom) {
        rc = shs__err(SHS_ENOMEM, "%s: out of memory reading it", index_path);
        goto done;
    }
    if (!root) {
        rc = shs__err(SHS_ECORRUPT, "%s: not valid JSON: %s (line %d)", index_path, je.text,
                      je.line);
        goto done;
    }
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        rc = shs__err(SHS_ECORRUPT, "%s: no \"weight_map\" object", index_path);
        goto done;
    }
    if (json_object_size(wm) == 0) {
        rc = shs__err(SHS_ENOCHECKPOINT, "%s: the weight_map is empty", index_path);
        goto done;
    }
    if (!(names = shs__calloc(json_object_size(wm), sizeof *names))) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v)
    {
        const char *fname = json_string_value(v);
        if (!fname) {
            rc = shs__err(SHS_ECORRUPT, "%s: weight_map entry '%s' is not a file name", index_path,
                          key);
            goto done;
        }
        /* the index may only name files beside it */
        const char *why = shs_file_name_problem(fname);
        if (why) {
            rc = shs__err(SHS_ECORRUPT,
                          "%s: tensor '%s' is mapped to '%s', which is not a file "
                          "in the index's folder: it %s",
                          index_path, key, fname, why);
            goto done;
        }
        size_t i = 0;
        while (i < n && strcmp(names[i], fname) != 0)
            i++;
        if (i == n && !(names[n++] = shs__strdup(fname))) {
            n--;
            rc = shs__err(SHS_ENOMEM, "out of memory");
            goto done;
        }
    }
    qsort(names, n, sizeof *names, cmp_str);
    if (!(dir = shs__path_dirname(index_path))) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    rc = build(m, dir, names, n, wm, index_path);
    n = 0; /* taken over */
done:
    for (size_t i = 0; i < n; i++)
        shs__free(names[i]);
    shs__free(names);
    shs__free(dir);
    json_decref(root);
    shs__free(text);
    return rc;
}

int shs__meta_from_folder(shs__meta *m, const char *dir, char **index_out)
{
    char *idx = shs__path_join(dir, SHS__HF_INDEX);
    struct stat st;
    int rc;
    if (!idx)
        return shs__err(SHS_ENOMEM, "out of memory");
    if (shs__io->stat(idx, &st) == 0) {
        rc = shs__meta_from_hf_index(m, idx);
        if (rc == SHS_OK && index_out) {
            *index_out = idx;
            idx = NULL;
        }
    } else {
        rc = shs__meta_from_plain(m, dir);
    }
    shs__free(idx);
    return rc;
}
