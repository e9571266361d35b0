/*
 * meta_plain.c -- the checkpoint model (meta.h) of safetensors files that
 * have no metadata.json: a plain directory of files, a Hugging Face
 * model.safetensors.index.json, or one file.  Each tensor is one whole
 * chunk; names are unique across the files.
 */
#include "source/meta.h"

#include "store/io.h"
#include "source/stepdir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int cmp_mtensor(const void *a, const void *b)
{
    return strcmp(((const shs__mtensor *)a)->name, ((const shs__mtensor *)b)->name);
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

/* The first problem shs_hf_index_check_file reports. */
static void keep_first(void *ctx, const char *msg)
{
    char *first = ctx;
    if (!*first)
        snprintf(first, 1024, "%s", msg);
}

/*
 * The model of the files `names` (n of them, taken over: freed with the
 * model) in `dir`.  With `ix` (a Hugging Face index) the index and every
 * file it names must agree exactly (shs_hf_index_check_file); `what` names
 * the source in messages.
 */
static int build(shs__meta *m, const char *dir, char **names, size_t n, const shs_hf_index *ix,
                 const char *what)
{
    int rc = SHS_OK;
    size_t cap_t = 0;
    char first[1024] = ""; /* the first disagreement of the index */
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
        if (rc == SHS_ENOENT && ix)
            rc = shs__err(SHS_ECORRUPT, "%s: names the file '%s', which does not exist", what,
                          m->f[i].name);
        if (rc < 0)
            break;
        /* the index's disagreements are told once every file it names
           was found: a missing file is the first thing to hear */
        if (ix)
            shs_hf_index_check_file(ix, m->f[i].name, f, keep_first, first);
        /* shardsafe's own file names tell optimizer state; a Hugging Face
           index names model weights only, whatever its file names */
        shs_kind kind = !ix && strstr(m->f[i].name, "-opt-") ? SHS_KIND_OPTIMIZER : SHS_KIND_MODEL;
        for (size_t k = 0; k < shs_file_tensor_count(f) && rc == SHS_OK; k++)
            rc = add_whole(m, &cap_t, f, shs_file_tensor(f, k), (uint32_t)i, kind);
        shs_file_free(f);
    }
    if (rc == SHS_OK && *first)
        rc = shs__err(SHS_ECORRUPT, "%s", first);
    if (rc < 0)
        goto done;
    if (m->nt > 1)
        qsort(m->t, m->nt, sizeof *m->t, cmp_mtensor);
    for (size_t i = 1; i < m->nt; i++)
        if (strcmp(m->t[i - 1].name, m->t[i].name) == 0) {
            rc = shs__err(SHS_ECORRUPT, "%s: tensor '%s' appears in two files", what, m->t[i].name);
            goto done;
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
    shs_hf_index *ix = NULL;
    char *dir = NULL;
    char **names = NULL;
    size_t n = 0;
    memset(m, 0, sizeof *m);
    int rc = shs_hf_index_open(&ix, index_path);
    if (rc < 0)
        return rc;
    if (shs_hf_index_count(ix) == 0) {
        rc = shs__err(SHS_ENOCHECKPOINT, "%s: the weight_map is empty", index_path);
        goto done;
    }
    for (size_t i = 0; i < shs_hf_index_count(ix); i++) {
        const char *why = shs_hf_index_entry_at(ix, i)->problem;
        if (why) {
            rc = shs__err(SHS_ECORRUPT, "%s: %s", index_path, why);
            goto done;
        }
    }
    n = shs_hf_index_file_count(ix);
    if (!(names = shs__calloc(n, sizeof *names)) || !(dir = shs__path_dirname(index_path))) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        if (!(names[i] = shs__strdup(shs_hf_index_file(ix, i)))) {
            rc = shs__err(SHS_ENOMEM, "out of memory");
            goto done;
        }
    rc = build(m, dir, names, n, ix, index_path);
    n = 0; /* taken over */
done:
    for (size_t i = 0; names && i < n; i++)
        shs__free(names[i]);
    shs__free(names);
    shs__free(dir);
    shs_hf_index_free(ix);
    return rc;
}
