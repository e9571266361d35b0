/*
 * ckpt_inspect.c -- `shardsafe inspect STEP_DIR`: the checkpoint view of
 * a step directory, from the library's view of its metadata.json
 * (shs_checkpoint_open, which validates it as hostile input) and its
 * common.json (shs_checkpoint_progress).  No tensor data is read.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const k_kind[] = { "model", "opt" };

/* Whether the opened step's common.json itself holds consumed_samples: a
   MindSpore file has six keys, and the library derives the seventh
   (global_step x global_batch_size).  1 when it does or when the file
   cannot be read here (the library read it: nothing to correct). */
static int common_has_consumed(const shs_checkpoint *ck)
{
    char *p = cli_fmt("%s/common.json", shs_checkpoint_path(ck));
    json_error_t jerr;
    json_t *c = p ? json_load_file(p, JSON_REJECT_DUPLICATES, &jerr) : NULL;
    int has = !json_is_object(c) || json_object_get(c, "consumed_samples") != NULL;
    json_decref(c);
    free(p);
    return has;
}

/* What is printed: the library's view plus the files' sizes (stat) and
   the tensors in display order (model, then opt; by name within each). */
typedef struct view {
    const shs_checkpoint *ck;
    int64_t *file_size;     /* -1: missing */
    size_t *order;          /* display order of the tensors */
    uint64_t *tensor_bytes; /* by tensor index: sum of its chunks' byte ranges */
    size_t n_kind[2];
    uint64_t total_bytes;
    uint64_t disk_files; /* files in the directory, counted as ls and verify count */
} view;

static int kind_index(shs_kind k)
{
    return k == SHS_KIND_MODEL ? 0 : 1;
}

static void view_release(view *v)
{
    free(v->file_size);
    free(v->order);
    free(v->tensor_bytes);
}

static int view_init(view *v, const shs_checkpoint *ck, const char *dir)
{
    memset(v, 0, sizeof *v);
    v->ck = ck;
    size_t nf = shs_checkpoint_file_count(ck), nt = shs_checkpoint_tensor_count(ck);
    v->file_size = calloc(nf + 1, sizeof *v->file_size);
    v->order = calloc(nt + 1, sizeof *v->order);
    v->tensor_bytes = calloc(nt + 1, sizeof *v->tensor_bytes);
    if (!v->file_size || !v->order || !v->tensor_bytes)
        return CLI_FAIL;
    uint64_t bytes, shared;
    cli_du(dir, &bytes, &v->disk_files, &shared);
    for (size_t i = 0; i < nf; i++) {
        char *fp = cli_fmt("%s/%s", dir, shs_checkpoint_file_name(ck, i));
        struct stat st;
        v->file_size[i] = fp && stat(fp, &st) == 0 ? (int64_t)st.st_size : -1;
        free(fp);
    }
    /* the library sorts by name: model tensors first, each kind in order */
    size_t w = 0;
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < nt; i++)
            if (kind_index(shs_checkpoint_tensor(ck, i)->kind) == k)
                v->order[w++] = i;
    for (size_t i = 0; i < nt; i++) {
        const shs_checkpoint_tensor_info *t = shs_checkpoint_tensor(ck, i);
        for (size_t c = 0; c < t->n_chunks; c++) {
            shs_chunk_info ci = SHS_CHUNK_INFO_INIT;
            if (shs_checkpoint_chunk(&ci, ck, i, c) == SHS_OK)
                v->tensor_bytes[i] = cli_add_sat(v->tensor_bytes[i], ci.byte_end - ci.byte_begin);
        }
        v->total_bytes = cli_add_sat(v->total_bytes, v->tensor_bytes[i]);
        v->n_kind[kind_index(t->kind)]++;
    }
    return CLI_OK;
}

/* common.json as the library read it, keys in the order it writes them
   (NULL when missing or invalid). */
static json_t *progress_json(const shs_progress *p)
{
    return json_pack("{s:I,s:I,s:I,s:f,s:I,s:I,s:o}", "epoch_num", (json_int_t)p->epoch_num,
                     "step_num", (json_int_t)p->step_num, "global_step", (json_int_t)p->global_step,
                     "loss_scale", p->loss_scale, "global_batch_size",
                     (json_int_t)p->global_batch_size, "consumed_samples",
                     (json_int_t)p->consumed_samples, "ckpt_status",
                     p->ckpt_status[0] ? json_string(p->ckpt_status) : json_null());
}

static size_t digits(uint64_t v)
{
    size_t n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

/* "[44, 16]" */
static char *shape_str(const uint64_t *shape, size_t n)
{
    size_t cap = 3 + n * 22, len = 0;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    s[len++] = '[';
    for (size_t d = 0; d < n; d++)
        len += (size_t)snprintf(s + len, cap - len, d ? ", %llu" : "%llu",
                                (unsigned long long)shape[d]);
    s[len++] = ']';
    s[len] = '\0';
    return s;
}

static json_t *shape_json(const uint64_t *shape, size_t n)
{
    json_t *a = json_array();
    for (size_t d = 0; a && d < n; d++)
        if (json_array_append_new(a, json_integer((json_int_t)shape[d])) < 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *jstr(const char *s, size_t len)
{
    json_t *j = json_stringn(s, len);
    if (!j) {
        char *e = cli_escape(s, len);
        j = e ? json_string(e) : NULL;
        free(e);
    }
    return j;
}

static int put(json_t *o, const char *k, json_t *v)
{
    return !v || json_object_set_new(o, k, v) < 0;
}

static int push(json_t *a, json_t *v)
{
    return !v || json_array_append_new(a, v) < 0;
}

static int print_json(const char *dir, const view *v, json_t *common, int derived, int status)
{
    const shs_checkpoint *ck = v->ck;
    json_t *doc = cli_json_new(), *files = json_array(), *ts = json_array(), *bl = json_array();
    int bad = !doc || !files || !ts || !bl;
    size_t nf = shs_checkpoint_file_count(ck), nt = shs_checkpoint_tensor_count(ck);
    size_t nb = shs_checkpoint_blob_count(ck);
    for (size_t i = 0; !bad && i < nf; i++) {
        const char *name = shs_checkpoint_file_name(ck, i);
        json_t *o = json_object();
        bad |= !o || put(o, "name", jstr(name, strlen(name))) ||
               put(o, "rank", json_integer(shs_checkpoint_file_rank(ck, i))) ||
               put(o, "bytes", v->file_size[i] < 0 ? json_null() : json_integer(v->file_size[i])) ||
               push(files, o);
    }
    for (size_t k = 0; !bad && k < nt; k++) {
        size_t i = v->order[k];
        const shs_checkpoint_tensor_info *t = shs_checkpoint_tensor(ck, i);
        uint64_t tb = v->tensor_bytes[i];
        json_t *o = json_object();
        bad |= !o || put(o, "name", jstr(t->name, strlen(t->name))) ||
               put(o, "kind", json_string(k_kind[kind_index(t->kind)])) ||
               put(o, "dtype", json_string(shs_dtype_name(t->dtype))) ||
               put(o, "shape", shape_json(t->shape, t->ndim)) ||
               put(o, "chunk_count", json_integer((json_int_t)t->n_chunks)) ||
               put(o, "bytes", cli_ju64(tb)) || push(ts, o);
    }
    for (size_t i = 0; !bad && i < nb; i++) {
        shs_blob_info b = SHS_BLOB_INFO_INIT;
        json_t *o = shs_checkpoint_blob(&b, ck, i) == SHS_OK ? json_object() : NULL;
        bad |= !o || put(o, "name", jstr(b.name, strlen(b.name))) ||
               put(o, "rank", json_integer(b.rank)) ||
               put(o, "bytes", json_integer((json_int_t)(b.byte_end - b.byte_begin))) ||
               push(bl, o);
    }
    if (!bad) {
        bad |= put(doc, "path", jstr(dir, strlen(dir))) ||
               put(doc, "kind", json_string("checkpoint")) ||
               put(doc, "step", json_integer(shs_checkpoint_step(ck))) ||
               put(doc, "world_size", json_integer(shs_checkpoint_world_size(ck))) ||
               put(doc, "format", json_string(shs_format_name(shs_checkpoint_format(ck)))) ||
               put(doc, "checksums",
                   json_boolean(shs_checkpoint_format(ck) == SHS_FORMAT_SHARDSAFE)) ||
               put(doc, "encrypted", json_boolean(shs_checkpoint_encrypted(ck))) ||
               put(doc, "file_count", cli_ju64(v->disk_files)) ||
               put(doc, "files", json_incref(files)) || put(doc, "tensors", json_incref(ts)) ||
               put(doc, "blobs", json_incref(bl)) ||
               put(doc, "common", common ? json_incref(common) : json_null()) ||
               put(doc, "common_derived",
                   derived ? json_pack("[s]", "consumed_samples") : json_array()) ||
               put(doc, "totals",
                   json_pack("{s:I,s:I,s:I,s:I,s:I}", "tensor_count", (json_int_t)nt,
                             "model_tensor_count", (json_int_t)v->n_kind[0], "opt_tensor_count",
                             (json_int_t)v->n_kind[1], "bytes",
                             (json_int_t)(v->total_bytes > INT64_MAX ? INT64_MAX : v->total_bytes),
                             "blob_count", (json_int_t)nb));
    }
    json_decref(files);
    json_decref(ts);
    json_decref(bl);
    if (bad) {
        json_decref(doc);
        doc = NULL;
    }
    return cli_json_print(doc, status, CLI_FAIL);
}

static void put_esc(const char *s)
{
    cli_put_escaped(stdout, s, strlen(s));
}

static int print_tensors(const view *v)
{
    const shs_checkpoint *ck = v->ck;
    size_t nt = shs_checkpoint_tensor_count(ck);
    char **names = calloc(nt, sizeof *names);
    char **shapes = calloc(nt, sizeof *shapes);
    size_t wn = 4, ws = 5, wc = 6, wb = 5;
    int ok = names && shapes;
    for (size_t k = 0; ok && k < nt; k++) {
        size_t i = v->order[k];
        const shs_checkpoint_tensor_info *t = shs_checkpoint_tensor(ck, i);
        names[k] = cli_escape(t->name, strlen(t->name));
        shapes[k] = shape_str(t->shape, t->ndim);
        if (!names[k] || !shapes[k]) {
            ok = 0;
            break;
        }
        size_t w = cli_width(names[k]);
        if (w > wn)
            wn = w > 72 ? 72 : w;
        if (strlen(shapes[k]) > ws)
            ws = strlen(shapes[k]);
        if (digits(t->n_chunks) > wc)
            wc = digits(t->n_chunks);
        if (digits(v->tensor_bytes[i]) > wb)
            wb = digits(v->tensor_bytes[i]);
    }
    if (ok) {
        printf("\n  %-*s  %-5s  %-11s  %-*s  %*s  %*s\n", (int)wn, "NAME", "KIND", "DTYPE", (int)ws,
               "SHAPE", (int)wc, "CHUNKS", (int)wb, "BYTES");
        for (size_t k = 0; k < nt; k++) {
            size_t i = v->order[k];
            const shs_checkpoint_tensor_info *t = shs_checkpoint_tensor(ck, i);
            size_t w = cli_width(names[k]);
            printf("  %s%*s  %-5s  %-11s  %-*s  %*zu  %*llu\n", names[k],
                   (int)(w < wn ? wn - w : 0), "", k_kind[kind_index(t->kind)],
                   shs_dtype_name(t->dtype), (int)ws, shapes[k], (int)wc, t->n_chunks, (int)wb,
                   (unsigned long long)v->tensor_bytes[i]);
        }
    }
    for (size_t k = 0; names && shapes && k < nt; k++) {
        free(names[k]);
        free(shapes[k]);
    }
    free(names);
    free(shapes);
    if (!ok) {
        cli_err("inspect: out of memory");
        return CLI_FAIL;
    }
    return CLI_OK;
}

static int print_text(const char *dir, const view *v, json_t *common, int derived)
{
    const shs_checkpoint *ck = v->ck;
    size_t nf = shs_checkpoint_file_count(ck), nt = shs_checkpoint_tensor_count(ck);
    size_t nb = shs_checkpoint_blob_count(ck);
    printf("%-12s", "checkpoint:");
    put_esc(dir);
    printf("\n%-12s%lld\n", "step:", (long long)shs_checkpoint_step(ck));
    printf("%-12s%d\n", "world_size:", shs_checkpoint_world_size(ck));
    if (shs_checkpoint_format(ck) == SHS_FORMAT_MINDSPORE)
        printf("%-12s%s\n", "format:", "mindspore (Checkpoint 2.0; no checksums)");
    if (shs_checkpoint_encrypted(ck)) /* names and shapes stay readable */
        printf("%-12sAES-256-GCM, key id %s (tensor data needs the key)\n",
               "encrypted:", shs_checkpoint_key_id(ck));
    /* the count ls and verify give, then the data files metadata.json names */
    printf("%-12s%llu (%zu data files:)\n", "files:", (unsigned long long)v->disk_files, nf);
    for (size_t i = 0; i < nf; i++) {
        printf("  ");
        put_esc(shs_checkpoint_file_name(ck, i));
        if (v->file_size[i] < 0)
            printf("  rank %d  MISSING\n", shs_checkpoint_file_rank(ck, i));
        else
            printf("  rank %d  %lld bytes\n", shs_checkpoint_file_rank(ck, i),
                   (long long)v->file_size[i]);
    }
    printf("%-12s%zu (%zu model, %zu opt), %llu bytes\n", "tensors:", nt, v->n_kind[0],
           v->n_kind[1], (unsigned long long)v->total_bytes);
    if (nt && print_tensors(v) != CLI_OK)
        return CLI_FAIL;
    printf("\n%-12s%zu\n", "blobs:", nb);
    for (size_t i = 0; i < nb; i++) {
        shs_blob_info b = SHS_BLOB_INFO_INIT;
        if (shs_checkpoint_blob(&b, ck, i) != SHS_OK)
            continue;
        printf("  ");
        put_esc(b.name);
        printf("  rank %d  %llu bytes\n", b.rank, (unsigned long long)(b.byte_end - b.byte_begin));
    }
    printf("\ncommon.json: ");
    if (!common) {
        printf("missing or invalid\n");
    } else {
        /* the entries of the file; a value the library derived is shown
           after them, said so */
        size_t n = json_object_size(common) - (derived ? 1 : 0);
        printf("%zu %s\n", n, n == 1 ? "entry" : "entries");
        const char *k;
        json_t *val;
        json_object_foreach(common, k, val)
        {
            if (derived && strcmp(k, "consumed_samples") == 0)
                continue;
            char *s = json_dumps(val, JSON_COMPACT | JSON_ENCODE_ANY | JSON_ENSURE_ASCII |
                                          JSON_REAL_PRECISION(17));
            printf("  ");
            put_esc(k);
            printf(": ");
            if (s && strlen(s) > 160) {
                cli_put_escaped(stdout, s, 160);
                printf(" ... (%zu bytes)", strlen(s));
            } else
                put_esc(s ? s : "?");
            putchar('\n');
            free(s);
        }
        json_t *cs = derived ? json_object_get(common, "consumed_samples") : NULL;
        if (cs)
            printf("  (consumed_samples %" JSON_INTEGER_FORMAT
                   " is not in the file: global_step x global_batch_size)\n",
                   json_integer_value(cs));
    }
    return CLI_OK;
}

int cli_inspect_checkpoint(const char *path, int json)
{
    shs_checkpoint *ck;
    if (shs_checkpoint_open(&ck, path, NULL) != SHS_OK) {
        cli_err("%s", shs_last_error());
        return cli_finish_stdout(CLI_FAIL);
    }
    /* a save path: its latest committed step, as shs_checkpoint_open
       resolves it (and says so) */
    const char *dir = shs_checkpoint_path(ck);
    if (strcmp(dir, path) != 0 && !json && !cli_g.quiet) {
        printf("%-12s", "save path:");
        put_esc(path);
        printf(" (its latest committed step below)\n");
    }
    view v;
    if (view_init(&v, ck, dir) != CLI_OK) {
        view_release(&v);
        shs_checkpoint_free(ck);
        cli_err("inspect: out of memory");
        return cli_finish_stdout(CLI_FAIL);
    }
    shs_progress prog = SHS_PROGRESS_INIT;
    json_t *common = NULL;
    if (shs_checkpoint_progress(&prog, ck) == SHS_OK) {
        if (!(common = progress_json(&prog)))
            cli_warn("common.json: out of memory");
    }
    /* what ls and verify name too: a damaged step fails inspect */
    char *problem = cli_step_problem(dir);
    int status = problem ? CLI_FAIL : CLI_OK;
    if (problem)
        cli_err("%s", problem);
    free(problem);
    int derived = common && !common_has_consumed(ck);
    int rc = json          ? print_json(dir, &v, common, derived, status)
             : cli_g.quiet ? CLI_OK
                           : print_text(dir, &v, common, derived);
    if (rc == CLI_OK)
        rc = status;
    json_decref(common);
    view_release(&v);
    shs_checkpoint_free(ck);
    return cli_finish_stdout(rc);
}
