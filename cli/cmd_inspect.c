/*
 * cmd_inspect.c -- `shardsafe inspect PATH [--json] [--limit N]`.
 *
 * Reads headers only (O(header) per file).  Human output is a block per
 * file and a totals block; --json is one document of the CLI's schema
 * (cli_json_new / cli_json_print), whatever the kind of PATH.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static const char k_help[] =
    "Usage: shardsafe inspect PATH [--limit N]\n"
    "\n"
    "Show the header of safetensors files without reading tensor data.\n"
    "\n"
    "PATH is a .safetensors file, a directory (every *.safetensors in it, sorted,\n"
    "plus any *.safetensors.index.json it holds), or a Hugging Face\n"
    "model.safetensors.index.json (every shard it names, and the index checked\n"
    "against the shards).\n"
    "\n"
    "A checkpoint step directory (holding metadata.json) is shown as a checkpoint:\n"
    "step, world_size, files, every tensor (name, kind, dtype, global shape,\n"
    "chunks, bytes), the blobs and the values of common.json (--limit ignored).\n"
    "\n"
    "Options:\n"
    "  -n, --limit N  show at most N tensors per file (default: all)\n"
    "  -h, --help, --version, -q, --quiet, -v, --verbose, --json\n"
    "                 as for every command (see 'shardsafe --help')\n"
    "\n"
    "Exit status: 0 all files valid, 1 an invalid file or index, 2 usage error.\n";

typedef struct dt_stat {
    uint64_t tensors, params, bytes;
} dt_stat;

typedef struct ictx {
    int json;
    int has_limit;
    uint64_t limit;
    uint64_t files, tensors, params, bytes;
    dt_stat dt[SHS_DTYPE_COUNT];
    json_t *jfiles, *jindexes;
    int status;
    int oom;
} ictx;

/* ------------------------------------------------------------------ */
/* JSON helpers                                                       */
/* ------------------------------------------------------------------ */

#define ju64 cli_ju64
#define jstr cli_jstr

static void jset(ictx *c, json_t *obj, const char *key, json_t *val)
{
    if (!val || json_object_set_new(obj, key, val) < 0)
        c->oom = 1;
}

static void jpush(ictx *c, json_t *arr, json_t *val)
{
    if (!val || json_array_append_new(arr, val) < 0)
        c->oom = 1;
}

static json_t *file_json(ictx *c, const char *path, const shs_file *f)
{
    json_t *o = json_object();
    if (!o) {
        c->oom = 1;
        return NULL;
    }
    jset(c, o, "path", jstr(path, strlen(path)));
    jset(c, o, "bytes", ju64(shs_file_size(f)));
    jset(c, o, "header_bytes", ju64(shs_file_header_len(f)));
    jset(c, o, "data_start", ju64(shs_file_data_start(f)));
    if (shs_file_has_metadata(f)) {
        json_t *m = json_object();
        size_t n = shs_file_metadata_count(f);
        for (size_t i = 0; m && i < n; i++) {
            const char *k, *v;
            size_t kl, vl;
            if (shs_file_metadata_at_n(&k, &kl, &v, &vl, f, i) != SHS_OK)
                continue;
            /* keys and values may hold "\u0000": pass the lengths */
            json_t *jv = jstr(v, vl);
            if (!jv || json_object_setn_new(m, k, kl, jv) < 0)
                c->oom = 1;
        }
        jset(c, o, "metadata", m);
    } else {
        jset(c, o, "metadata", json_null());
    }
    size_t nt = shs_file_tensor_count(f);
    jset(c, o, "tensor_count", ju64(nt));
    json_t *ts = json_array();
    size_t shown = c->has_limit && c->limit < nt ? (size_t)c->limit : nt;
    for (size_t i = 0; ts && i < shown; i++) {
        const shs_tensor_info *t = shs_file_tensor(f, i);
        json_t *jt = json_object();
        json_t *shape = json_array();
        if (!jt || !shape) {
            json_decref(jt);
            json_decref(shape);
            c->oom = 1;
            break;
        }
        for (size_t d = 0; d < t->ndim; d++)
            jpush(c, shape, ju64(t->shape[d]));
        jset(c, jt, "name", jstr(t->name, t->name_len));
        jset(c, jt, "dtype", json_string(shs_dtype_name(t->dtype)));
        jset(c, jt, "shape", shape);
        jset(c, jt, "numel", ju64(t->numel));
        jset(c, jt, "offset", ju64(t->offset));
        jset(c, jt, "bytes", ju64(t->nbytes));
        jpush(c, ts, jt);
    }
    jset(c, o, "tensors", ts);
    return o;
}

static json_t *totals_json(ictx *c)
{
    json_t *o = json_object();
    if (!o) {
        c->oom = 1;
        return NULL;
    }
    jset(c, o, "file_count", ju64(c->files));
    jset(c, o, "tensor_count", ju64(c->tensors));
    jset(c, o, "parameters", ju64(c->params));
    jset(c, o, "bytes", ju64(c->bytes));
    json_t *d = json_object();
    for (int k = SHS_DTYPE_COUNT - 1; d && k >= 0; k--) {
        if (!c->dt[k].tensors)
            continue;
        json_t *e = json_object();
        if (!e) {
            c->oom = 1;
            break;
        }
        jset(c, e, "tensor_count", ju64(c->dt[k].tensors));
        jset(c, e, "parameters", ju64(c->dt[k].params));
        jset(c, e, "bytes", ju64(c->dt[k].bytes));
        jset(c, d, shs_dtype_name((shs_dtype)k), e);
    }
    jset(c, o, "dtypes", d);
    return o;
}

/* ------------------------------------------------------------------ */
/* Text output                                                        */
/* ------------------------------------------------------------------ */

static void put_label(const char *label)
{
    printf("%-12s", label);
}

static void put_esc_line(const char *label, const char *s)
{
    put_label(label);
    cli_put_escaped(stdout, s, strlen(s));
    putchar('\n');
}

static char *shape_str(const shs_tensor_info *t)
{
    size_t cap = 3 + t->ndim * 22;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    size_t n = 0;
    s[n++] = '[';
    for (size_t d = 0; d < t->ndim; d++)
        n += (size_t)snprintf(s + n, cap - n, d ? ", %llu" : "%llu",
                              (unsigned long long)t->shape[d]);
    s[n++] = ']';
    s[n] = '\0';
    return s;
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

static void pad(size_t n)
{
    while (n--)
        putchar(' ');
}

#define MAX_NAME_COL 72
#define MAX_META_SHOW 160

static void print_file(ictx *c, const char *path, const shs_file *f)
{
    char hb[32];
    size_t nt = shs_file_tensor_count(f);
    put_esc_line("file:", path);
    put_label("size:");
    printf("%llu bytes (%s)\n", (unsigned long long)shs_file_size(f),
           cli_human_bytes(hb, sizeof hb, shs_file_size(f)));
    put_label("header:");
    printf("%llu bytes\n", (unsigned long long)shs_file_header_len(f));
    put_label("data start:");
    printf("%llu\n", (unsigned long long)shs_file_data_start(f));
    put_label("tensors:");
    printf("%zu\n", nt);
    put_label("metadata:");
    if (!shs_file_has_metadata(f)) {
        printf("none\n");
    } else {
        size_t nm = shs_file_metadata_count(f);
        printf("%zu %s\n", nm, nm == 1 ? "entry" : "entries");
        for (size_t i = 0; i < nm; i++) {
            const char *k, *v;
            size_t kl, vl;
            if (shs_file_metadata_at_n(&k, &kl, &v, &vl, f, i) != SHS_OK)
                continue;
            printf("  ");
            cli_put_escaped(stdout, k, kl);
            printf(": ");
            /* cut long values (configs stored as JSON) on a UTF-8 boundary */
            size_t show = vl;
            if (vl > MAX_META_SHOW) {
                show = MAX_META_SHOW;
                while (show > 0 && ((unsigned char)v[show] & 0xC0) == 0x80)
                    show--;
            }
            cli_put_escaped(stdout, v, show);
            if (show < vl)
                printf(" ... (%zu bytes)", vl);
            putchar('\n');
        }
    }
    size_t shown = c->has_limit && c->limit < nt ? (size_t)c->limit : nt;
    if (shown) {
        char **names = calloc(shown, sizeof *names);
        char **shapes = calloc(shown, sizeof *shapes);
        size_t wn = 4, ws = 5, wb = 5, wo = 6;
        int ok = names && shapes;
        for (size_t i = 0; ok && i < shown; i++) {
            const shs_tensor_info *t = shs_file_tensor(f, i);
            names[i] = cli_escape(t->name, t->name_len);
            shapes[i] = shape_str(t);
            if (!names[i] || !shapes[i]) {
                ok = 0;
                break;
            }
            size_t w = cli_width(names[i]);
            if (w > wn)
                wn = w > MAX_NAME_COL ? MAX_NAME_COL : w;
            if (strlen(shapes[i]) > ws)
                ws = strlen(shapes[i]);
            if (digits(t->nbytes) > wb)
                wb = digits(t->nbytes);
            if (digits(t->offset) > wo)
                wo = digits(t->offset);
        }
        if (!ok) {
            c->oom = 1;
        } else {
            putchar('\n');
            printf("  %-*s  %-11s  %-*s  %*s  %*s\n", (int)wn, "NAME", "DTYPE", (int)ws, "SHAPE",
                   (int)wb, "BYTES", (int)wo, "OFFSET");
            for (size_t i = 0; i < shown; i++) {
                const shs_tensor_info *t = shs_file_tensor(f, i);
                size_t w = cli_width(names[i]);
                printf("  %s", names[i]);
                pad(w < wn ? wn - w : 0);
                printf("  %-11s  %-*s  %*llu  %*llu\n", shs_dtype_name(t->dtype), (int)ws,
                       shapes[i], (int)wb, (unsigned long long)t->nbytes, (int)wo,
                       (unsigned long long)t->offset);
            }
        }
        for (size_t i = 0; names && shapes && i < shown; i++) {
            free(names[i]);
            free(shapes[i]);
        }
        free(names);
        free(shapes);
    }
    if (shown < nt)
        printf("  ... %zu more tensors not shown (--limit %llu)\n", nt - shown,
               (unsigned long long)c->limit);
    putchar('\n');
}

static void print_totals(ictx *c)
{
    char hb[32];
    printf("totals: %llu %s, %llu tensors, %llu parameters, %llu bytes (%s)\n",
           (unsigned long long)c->files, c->files == 1 ? "file" : "files",
           (unsigned long long)c->tensors, (unsigned long long)c->params,
           (unsigned long long)c->bytes, cli_human_bytes(hb, sizeof hb, c->bytes));
    for (int k = SHS_DTYPE_COUNT - 1; k >= 0; k--) {
        const dt_stat *d = &c->dt[k];
        if (!d->tensors)
            continue;
        printf("  %-11s %8llu tensors  %14llu parameters  %16llu bytes\n",
               shs_dtype_name((shs_dtype)k), (unsigned long long)d->tensors,
               (unsigned long long)d->params, (unsigned long long)d->bytes);
    }
}

/* ------------------------------------------------------------------ */
/* Walk callbacks                                                     */
/* ------------------------------------------------------------------ */

/* On stderr, and in the JSON document's "errors". */
static void add_error(ictx *c, const char *msg)
{
    c->status = CLI_FAIL;
    cli_err("%s", msg);
}

static void on_file(void *ctx, const char *path, shs_file *f, const char *why)
{
    ictx *c = ctx;
    if (!f) {
        add_error(c, why);
        return;
    }
    size_t nt = shs_file_tensor_count(f);
    c->files++;
    for (size_t i = 0; i < nt; i++) {
        const shs_tensor_info *t = shs_file_tensor(f, i);
        dt_stat *d = &c->dt[t->dtype];
        c->tensors++;
        c->params = cli_add_sat(c->params, t->numel);
        c->bytes = cli_add_sat(c->bytes, t->nbytes);
        d->tensors++;
        d->params = cli_add_sat(d->params, t->numel);
        d->bytes = cli_add_sat(d->bytes, t->nbytes);
    }
    cli_info("inspect: %s: %zu tensors", path, nt);
    if (c->json)
        jpush(c, c->jfiles, file_json(c, path, f));
    else if (!cli_g.quiet)
        print_file(c, path, f);
}

static void on_index_begin(void *ctx, const cli_index *ix)
{
    ictx *c = ctx;
    if (c->json || cli_g.quiet)
        return;
    put_esc_line("index:", ix->path);
    put_label("shards:");
    printf("%zu\n", ix->shards.n);
    put_label("weight_map:");
    printf("%zu tensors\n", cli_index_tensor_count(ix));
    json_t *md = cli_index_metadata(ix);
    if (md) {
        char *m = json_dumps(md, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (m)
            put_esc_line("metadata:", m);
        free(m);
        json_decref(md);
    }
    putchar('\n');
}

static void on_index_done(void *ctx, const cli_index *ix, const cli_strs *problems,
                          const cli_strs *warnings)
{
    ictx *c = ctx;
    for (size_t i = 0; i < problems->n; i++)
        add_error(c, problems->v[i]);
    for (size_t i = 0; i < warnings->n; i++)
        cli_warn("%s", warnings->v[i]);
    if (cli_g.quiet)
        return;
    if (!c->json) {
        printf("index check: ");
        cli_put_escaped(stdout, ix->path, strlen(ix->path));
        if (problems->n)
            printf(": %zu %s (listed on stderr)\n\n", problems->n,
                   problems->n == 1 ? "problem" : "problems");
        else
            printf(": OK\n\n");
        return;
    }
    json_t *o = json_object();
    if (!o) {
        c->oom = 1;
        return;
    }
    jset(c, o, "path", jstr(ix->path, strlen(ix->path)));
    json_t *md = ix->ix ? cli_index_metadata(ix) : NULL;
    jset(c, o, "metadata", md ? md : json_null());
    json_t *sh = json_array();
    for (size_t i = 0; sh && i < ix->shards.n; i++)
        jpush(c, sh, jstr(ix->shards.v[i], strlen(ix->shards.v[i])));
    jset(c, o, "shards", sh);
    jset(c, o, "shard_count", ju64(ix->shards.n));
    jset(c, o, "tensor_count", ju64(cli_index_tensor_count(ix)));
    jset(c, o, "ok", json_boolean(problems->n == 0));
    json_t *pr = json_array();
    for (size_t i = 0; pr && i < problems->n; i++)
        jpush(c, pr, jstr(problems->v[i], strlen(problems->v[i])));
    jset(c, o, "problems", pr);
    jpush(c, c->jindexes, o);
}

/* ------------------------------------------------------------------ */

int cli_cmd_inspect(int argc, char **argv)
{
    static const cli_optdef defs[] = { { "--limit", 'n', 1 }, { NULL, 0, 0 } };
    cli_parser p;
    ictx c;
    const char *path = NULL, *val;
    int k;
    memset(&c, 0, sizeof c);
    cli_parser_init(&p, "inspect", k_help, argc, argv);
    while ((k = cli_parser_next(&p, defs, &val)) != CLI_ARG_END) {
        switch (k) {
        case CLI_ARG_EXIT: return p.status;
        case CLI_ARG_POSITIONAL:
            if (path)
                return cli_usage_err("inspect", "takes one PATH (got '%s' and '%s')", path, val);
            path = val;
            break;
        case 0:
            if (cli_parse_u64(val, &c.limit) < 0)
                return cli_usage_err("inspect", "--limit needs a non-negative integer, not '%s'",
                                     val);
            c.has_limit = 1;
            break;
        }
    }
    if (!path)
        return cli_usage_err("inspect", "missing PATH");
    c.json = cli_g.json;
    /* a save path shows its latest committed step, as verify and ls read it */
    if (cli_is_step_dir(path) || cli_is_save_path(path))
        return cli_inspect_checkpoint(path, c.json);
    char *wrong = cli_wrong_kind("inspect", path);
    if (wrong) {
        cli_err("%s", wrong);
        free(wrong);
        return cli_g.json ? cli_json_print(cli_json_new(), CLI_FAIL, CLI_FAIL) : CLI_FAIL;
    }

    cli_kind kind = cli_classify(path);
    if (c.json) {
        c.jfiles = json_array();
        c.jindexes = json_array();
        if (!c.jfiles || !c.jindexes)
            c.oom = 1;
    }
    cli_walk_ops ops = { on_file, on_index_begin, on_index_done };
    int rc = c.oom ? CLI_FAIL : cli_walk(path, &ops, &c);
    if (rc != CLI_OK)
        c.status = CLI_FAIL;

    if (c.json) {
        static const char *const kinds[] = { "file", "directory", "index" };
        json_t *doc = c.oom ? NULL : cli_json_new();
        if (doc) {
            jset(&c, doc, "path", jstr(path, strlen(path)));
            jset(&c, doc, "kind", json_string(kinds[kind]));
            jset(&c, doc, "files", json_incref(c.jfiles));
            jset(&c, doc, "indexes", json_incref(c.jindexes));
            jset(&c, doc, "totals", totals_json(&c));
            if (c.oom) {
                json_decref(doc);
                doc = NULL;
            }
        }
        c.status = cli_json_print(doc, c.status, CLI_FAIL);
    } else if (!cli_g.quiet && rc == CLI_OK && c.files > 0) {
        print_totals(&c);
    }
    if (c.oom && !c.json) {
        cli_err("inspect: out of memory building the output");
        c.status = CLI_FAIL;
    }
    json_decref(c.jfiles);
    json_decref(c.jindexes);
    return cli_finish_stdout(c.status);
}
