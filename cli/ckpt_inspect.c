/*
 * ckpt_inspect.c -- `shardsafe inspect STEP_DIR`: the checkpoint view of
 * a step directory, from its metadata.json (parsed here as hostile input,
 * see cli_meta_load) and common.json.  No tensor data is read.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

#define COMMON_MAX ((size_t)1 << 20)

static const char *const k_kind[] = { "model", "opt" };

static size_t digits(uint64_t v)
{
    size_t n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

/* "[44, 16]" from a validated shape array */
static char *shape_str(json_t *shape)
{
    size_t n = json_array_size(shape), cap = 3 + n * 22, len = 0;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    s[len++] = '[';
    for (size_t d = 0; d < n; d++)
        len += (size_t)snprintf(s + len, cap - len, d ? ", %lld" : "%lld",
                                (long long)json_integer_value(json_array_get(shape, d)));
    s[len++] = ']';
    s[len] = '\0';
    return s;
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

static int print_json(const char *dir, const cli_meta *m, json_t *common)
{
    json_t *doc = json_object(), *files = json_array(), *ts = json_array(), *bl = json_array();
    int bad = !doc || !files || !ts || !bl;
    for (size_t i = 0; !bad && i < m->n_files; i++) {
        json_t *o = json_object();
        bad |= !o || put(o, "name", jstr(m->files[i].name, strlen(m->files[i].name))) ||
               put(o, "rank", json_integer((json_int_t)m->files[i].rank)) ||
               put(o, "size", m->files[i].size < 0 ? json_null()
                                                   : json_integer(m->files[i].size)) ||
               push(files, o);
    }
    for (size_t i = 0; !bad && i < m->n_tensors; i++) {
        const cli_mtensor *t = &m->tensors[i];
        json_t *o = json_object();
        bad |= !o || put(o, "name", jstr(t->name, strlen(t->name))) ||
               put(o, "kind", json_string(k_kind[t->kind])) ||
               put(o, "dtype", json_string(shs_dtype_name(t->dtype))) ||
               put(o, "shape", json_deep_copy(t->shape)) ||
               put(o, "chunks", json_integer((json_int_t)t->n_chunks)) ||
               put(o, "bytes", json_integer((json_int_t)(t->bytes > INT64_MAX ? INT64_MAX
                                                                               : t->bytes))) ||
               push(ts, o);
    }
    for (size_t i = 0; !bad && i < m->n_blobs; i++) {
        const cli_mblob *b = &m->blobs[i];
        json_t *o = json_object();
        bad |= !o || put(o, "name", jstr(b->name, b->name_len)) ||
               put(o, "rank", json_integer((json_int_t)b->rank)) ||
               put(o, "bytes", json_integer((json_int_t)b->bytes)) || push(bl, o);
    }
    if (!bad) {
        bad |= put(doc, "path", jstr(dir, strlen(dir))) ||
               put(doc, "kind", json_string("checkpoint")) ||
               put(doc, "step", json_integer(m->step)) ||
               put(doc, "world_size", json_integer((json_int_t)m->world_size)) ||
               put(doc, "files", json_incref(files)) || put(doc, "tensors", json_incref(ts)) ||
               put(doc, "blobs", json_incref(bl)) ||
               put(doc, "common", common ? json_incref(common) : json_null()) ||
               put(doc, "totals", json_pack("{s:I,s:I,s:I,s:I,s:I}", "tensors",
                                            (json_int_t)m->n_tensors, "model_tensors",
                                            (json_int_t)m->n_kind[0], "opt_tensors",
                                            (json_int_t)m->n_kind[1], "bytes",
                                            (json_int_t)(m->total_bytes > INT64_MAX
                                                             ? INT64_MAX
                                                             : m->total_bytes),
                                            "blobs", (json_int_t)m->n_blobs));
    }
    if (!bad && json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_ENSURE_ASCII) == 0)
        putchar('\n');
    else
        bad = 1;
    json_decref(doc);
    json_decref(files);
    json_decref(ts);
    json_decref(bl);
    if (bad) {
        cli_err("inspect: out of memory building the output");
        return CLI_FAIL;
    }
    return CLI_OK;
}

static void put_esc(const char *s)
{
    cli_put_escaped(stdout, s, strlen(s));
}

static int print_text(const char *dir, const cli_meta *m, json_t *common)
{
    printf("%-12s", "checkpoint:");
    put_esc(dir);
    printf("\n%-12s%lld\n", "step:", (long long)m->step);
    printf("%-12s%llu\n", "world_size:", (unsigned long long)m->world_size);
    printf("%-12s%zu\n", "files:", m->n_files);
    for (size_t i = 0; i < m->n_files; i++) {
        printf("  ");
        put_esc(m->files[i].name);
        if (m->files[i].size < 0)
            printf("  rank %llu  MISSING\n", (unsigned long long)m->files[i].rank);
        else
            printf("  rank %llu  %lld bytes\n", (unsigned long long)m->files[i].rank,
                   (long long)m->files[i].size);
    }
    printf("%-12s%zu (%zu model, %zu opt), %llu bytes\n", "tensors:", m->n_tensors,
           m->n_kind[0], m->n_kind[1], (unsigned long long)m->total_bytes);
    if (m->n_tensors) {
        char **names = calloc(m->n_tensors, sizeof *names);
        char **shapes = calloc(m->n_tensors, sizeof *shapes);
        size_t wn = 4, ws = 5, wc = 6, wb = 5;
        int ok = names && shapes;
        for (size_t i = 0; ok && i < m->n_tensors; i++) {
            const cli_mtensor *t = &m->tensors[i];
            names[i] = cli_escape(t->name, strlen(t->name));
            shapes[i] = shape_str(t->shape);
            if (!names[i] || !shapes[i]) {
                ok = 0;
                break;
            }
            size_t w = cli_width(names[i]);
            if (w > wn)
                wn = w > 72 ? 72 : w;
            if (strlen(shapes[i]) > ws)
                ws = strlen(shapes[i]);
            if (digits(t->n_chunks) > wc)
                wc = digits(t->n_chunks);
            if (digits(t->bytes) > wb)
                wb = digits(t->bytes);
        }
        if (ok) {
            printf("\n  %-*s  %-5s  %-11s  %-*s  %*s  %*s\n", (int)wn, "NAME", "KIND", "DTYPE",
                   (int)ws, "SHAPE", (int)wc, "CHUNKS", (int)wb, "BYTES");
            for (size_t i = 0; i < m->n_tensors; i++) {
                const cli_mtensor *t = &m->tensors[i];
                size_t w = cli_width(names[i]);
                printf("  %s%*s  %-5s  %-11s  %-*s  %*zu  %*llu\n", names[i],
                       (int)(w < wn ? wn - w : 0), "", k_kind[t->kind],
                       shs_dtype_name(t->dtype), (int)ws, shapes[i], (int)wc, t->n_chunks,
                       (int)wb, (unsigned long long)t->bytes);
            }
        }
        for (size_t i = 0; names && shapes && i < m->n_tensors; i++) {
            free(names[i]);
            free(shapes[i]);
        }
        free(names);
        free(shapes);
        if (!ok) {
            cli_err("inspect: out of memory");
            return CLI_FAIL;
        }
    }
    printf("\n%-12s%zu\n", "blobs:", m->n_blobs);
    for (size_t i = 0; i < m->n_blobs; i++) {
        printf("  ");
        cli_put_escaped(stdout, m->blobs[i].name, m->blobs[i].name_len);
        printf("  rank %llu  %llu bytes\n", (unsigned long long)m->blobs[i].rank,
               (unsigned long long)m->blobs[i].bytes);
    }
    printf("\ncommon.json: ");
    if (!common) {
        printf("missing or invalid\n");
    } else {
        printf("%zu %s\n", json_object_size(common),
               json_object_size(common) == 1 ? "entry" : "entries");
        const char *k;
        json_t *v;
        json_object_foreach(common, k, v) {
            char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
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
    }
    return CLI_OK;
}

int cli_inspect_checkpoint(const char *dir, int json)
{
    cli_meta m;
    char *why = NULL;
    if (cli_meta_load(&m, dir, &why) != CLI_OK) {
        cli_err("%s", why ? why : "invalid metadata.json");
        free(why);
        return cli_finish_stdout(CLI_FAIL);
    }
    char *cp = cli_fmt("%s/common.json", dir);
    json_t *common = cp ? cli_load_json(cp, COMMON_MAX, &why) : NULL;
    if (common && !json_is_object(common)) {
        json_decref(common);
        common = NULL;
        why = cli_fmt("%s: not a JSON object", cp);
    }
    if (!common)
        cli_warn("%s", why ? why : "common.json: out of memory");
    free(why);
    free(cp);
    int rc = json ? print_json(dir, &m, common) : print_text(dir, &m, common);
    json_decref(common);
    cli_meta_release(&m);
    return cli_finish_stdout(rc);
}
