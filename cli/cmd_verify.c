/*
 * cmd_verify.c -- `shardsafe verify PATH... [--check-finite] [--key-file F | --key-env V]`.
 *
 * Opening a file validates its header with every rule of the reader; then
 * every byte of every tensor is read back with shs_file_read_bytes in
 * bounded chunks (pread, not mmap), which proves the data is readable
 * (EIO, a file truncated meanwhile) in O(chunk) memory.
 */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char k_help[] =
    "Usage: shardsafe verify PATH... [--check-finite] [--key-file FILE | --key-env VAR]\n"
    "\n"
    "Validate safetensors files completely: the header with every rule of the\n"
    "reader, then every tensor's bytes read back from disk.\n"
    "\n"
    "Each PATH is a .safetensors file, a directory (every *.safetensors in it and\n"
    "every *.safetensors.index.json) or a model.safetensors.index.json (every\n"
    "shard it names, and the index checked against the shards).\n"
    "\n"
    "A checkpoint step directory (holding metadata.json) is verified as a whole:\n"
    "metadata.json, every referenced file present, inside the directory and\n"
    "valid, every chunk's checksum, common.json.  A save path (holding\n"
    "iteration_* / step-* directories or latest_checkpointed_iteration.txt) has\n"
    "every committed step verified; a malformed tracker or one naming a step\n"
    "without a complete directory fails (a missing tracker is a warning).\n"
    "\n"
    "Prints one line per file on stdout:\n"
    "  OK PATH (N tensors, B bytes)        B is the file size\n"
    "  FAIL PATH: REASON\n"
    "and one per index (OK PATH (index: S shards, T tensors) or FAIL PATH: REASON)\n"
    "and per step directory (OK DIR (checkpoint step N, F files, B bytes)),\n"
    "followed by a note when its metadata.json is version 1 (older releases:\n"
    "common.json, headers and metadata.json itself are not covered by checksums)\n"
    "or when it is a MindSpore Transformers Checkpoint 2.0 directory (its files\n"
    "carry no checksums: headers, layout, readability and the equality of\n"
    "replicated copies are checked; data stored once is not).\n"
    "\n"
    "An encrypted checkpoint (docs/encryption.md) is checked against its\n"
    "checksums with or without the key; with the key every chunk is also\n"
    "decrypted and authenticated (a note line says so).  Without it, it FAILs\n"
    "with \"key required\" after its checksums matched; with another key,\n"
    "\"wrong key\".\n"
    "\n"
    "Options:\n"
    "  --check-finite  also decode floating-point tensors and fail a file that\n"
    "                  holds NaN or infinite values (counts are reported)\n"
    "  --key-file FILE the key of encrypted checkpoints: 32 raw bytes, or 64 hex\n"
    "                  digits (e.g. made by `openssl rand -hex 32 > FILE`)\n"
    "  --key-env VAR   the key from environment variable VAR (64 hex digits);\n"
    "                  the key itself is never a command-line argument\n"
    "  -h, --help, --version, -q, --quiet, -v, --verbose, --json\n"
    "                  as for every command (see 'shardsafe --help'); with -q\n"
    "                  only the FAIL reasons are printed, on stderr\n"
    "\n"
    "Exit status: 0 all OK, 1 any file or index failed, 2 usage error.\n";

typedef struct vctx {
    int check_finite;
    int status;
    json_t *results; /* --json */
    int oom;
    unsigned char *buf; /* CLI_CHUNK_BYTES */
    float *fbuf;        /* CLI_CHUNK_BYTES / 4 floats */
    int has_key;        /* --key-file / --key-env */
    unsigned char key[SHS_KEY_BYTES];
} vctx;

/* --json: a result object {"path", "kind", "ok", "reason"} appended to the
   results, for the caller to complete; NULL otherwise. */
static json_t *result_json(vctx *c, const char *kind, const char *path, const char *reason)
{
    if (!cli_g.json)
        return NULL;
    json_t *o = json_object();
    int bad = !o || json_object_set_new(o, "path", cli_jstr0(path)) < 0 ||
              json_object_set_new(o, "kind", json_string(kind)) < 0 ||
              json_object_set_new(o, "ok", json_boolean(reason == NULL)) < 0 ||
              json_object_set_new(o, "reason", reason ? cli_jstr0(reason) : json_null()) < 0;
    if (bad || json_array_append_new(c->results, o) < 0) {
        if (bad)
            json_decref(o);
        c->oom = 1;
        return NULL;
    }
    return o;
}

static void jset(vctx *c, json_t *o, const char *key, json_t *v)
{
    if (o && (!v || json_object_set_new(o, key, v) < 0))
        c->oom = 1;
    else if (!o)
        json_decref(v);
}

/* "OK PATH" without the newline; 0 when nothing is to be printed. */
static int put_ok(const char *path)
{
    if (cli_g.json || cli_g.quiet)
        return 0;
    fputs("OK ", stdout);
    cli_put_escaped(stdout, path, strlen(path));
    return 1;
}

static void fail_line(vctx *c, const char *kind, const char *path, const char *reason)
{
    c->status = CLI_FAIL;
    if (cli_g.json) {
        result_json(c, kind, path, reason);
        return;
    }
    if (cli_g.quiet) { /* the reason is all that is printed: as an error */
        cli_err("%s: %s", path, reason);
        return;
    }
    fputs("FAIL ", stdout);
    cli_put_escaped(stdout, path, strlen(path));
    fputs(": ", stdout);
    cli_put_escaped(stdout, reason, strlen(reason));
    putchar('\n');
}

typedef struct finite_count {
    uint64_t nan, inf;
} finite_count;

/* Count NaN/Inf of `n` elements in `src`.  F64 is tested directly (as F32
   a large finite value would look infinite); the other formats widen to
   F32 exactly through shs_convert. */
static int count_nonfinite(vctx *c, const unsigned char *src, shs_dtype dt, size_t n,
                           finite_count *fc)
{
    if (dt == SHS_F64) {
        for (size_t i = 0; i < n; i++) {
            double v;
            memcpy(&v, src + 8 * i, 8);
            fc->nan += isnan(v) != 0;
            fc->inf += isinf(v) != 0;
        }
        return SHS_OK;
    }
    /* F32 -> F32 is a copy, which also gives the floats their alignment */
    int rc = shs_convert(c->fbuf, SHS_F32, src, dt, n);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        fc->nan += isnan(c->fbuf[i]) != 0;
        fc->inf += isinf(c->fbuf[i]) != 0;
    }
    return SHS_OK;
}

static void on_file(void *ctx, const char *path, shs_file *f, const char *why)
{
    vctx *c = ctx;
    if (!f) {
        fail_line(c, "file", path, cli_strip_path(why, path));
        return;
    }
    size_t nt = shs_file_tensor_count(f);
    uint64_t data = 0;
    for (size_t i = 0; i < nt; i++)
        data = cli_add_sat(data, shs_file_tensor(f, i)->nbytes);
    cli_info("verify: %s: %zu tensors", path, nt);
    cli_progress prog;
    cli_progress_start(&prog, "verify", data);
    finite_count total = { 0, 0 };
    uint64_t bad_tensors = 0;
    const char *first_bad = NULL;
    size_t first_bad_len = 0;
    for (size_t i = 0; i < nt; i++) {
        const shs_tensor_info *t = shs_file_tensor(f, i);
        int check = c->check_finite && shs_dtype_is_float(t->dtype);
        size_t esize = shs_dtype_bits(t->dtype) / 8;
        /* whole elements per chunk when decoding; raw bytes otherwise */
        size_t step = check ? (CLI_CHUNK_BYTES / 8) * esize : CLI_CHUNK_BYTES;
        finite_count fc = { 0, 0 };
        for (uint64_t off = 0; off < t->nbytes; off += step) {
            size_t len = t->nbytes - off < step ? (size_t)(t->nbytes - off) : step;
            if (shs_file_read_bytes(f, i, off, c->buf, len) < 0 ||
                (check && count_nonfinite(c, c->buf, t->dtype, len / esize, &fc) < 0)) {
                cli_progress_end(&prog);
                fail_line(c, "file", path, cli_strip_path(shs_last_error(), path));
                return;
            }
            cli_progress_add(&prog, len);
        }
        if (fc.nan || fc.inf) {
            total.nan += fc.nan;
            total.inf += fc.inf;
            if (!bad_tensors++) {
                first_bad = t->name;
                first_bad_len = t->name_len;
            }
        }
    }
    cli_progress_end(&prog);
    if (bad_tensors) {
        char *name = cli_escape(first_bad, first_bad_len);
        char *msg = cli_fmt("%llu NaN and %llu infinite values in %llu %s (first: '%s')",
                            (unsigned long long)total.nan, (unsigned long long)total.inf,
                            (unsigned long long)bad_tensors,
                            bad_tensors == 1 ? "tensor" : "tensors", name ? name : "?");
        fail_line(c, "file", path, msg ? msg : "non-finite values");
        free(name);
        free(msg);
        return;
    }
    json_t *o = result_json(c, "file", path, NULL);
    jset(c, o, "tensor_count", cli_ju64(nt));
    jset(c, o, "bytes", cli_ju64(shs_file_size(f)));
    if (c->check_finite)
        jset(c, o, "finite", json_true());
    if (put_ok(path))
        printf(" (%zu tensors, %llu bytes%s)\n", nt, (unsigned long long)shs_file_size(f),
               c->check_finite ? ", all finite" : "");
}

static void on_index_done(void *ctx, const cli_index *ix, const cli_strs *problems,
                          const cli_strs *warnings)
{
    vctx *c = ctx;
    for (size_t i = 0; i < warnings->n; i++)
        cli_warn("%s", warnings->v[i]);
    if (problems->n) {
        const char *first = cli_strip_path(problems->v[0], ix->path);
        char *msg = problems->n == 1 ? cli_fmt("%s", first)
                                     : cli_fmt("%s (and %zu more problems, listed on stderr)",
                                               first, problems->n - 1);
        fail_line(c, "index", ix->path, msg ? msg : first);
        free(msg);
        for (size_t i = 1; i < problems->n; i++)
            cli_err("%s", problems->v[i]);
        return;
    }
    json_t *o = result_json(c, "index", ix->path, NULL);
    jset(c, o, "shard_count", cli_ju64(ix->shards.n));
    jset(c, o, "tensor_count", cli_ju64(cli_index_tensor_count(ix)));
    if (put_ok(ix->path))
        printf(" (index: %zu shards, %zu tensors)\n", ix->shards.n, cli_index_tensor_count(ix));
}

/* ------------------------------------------------------------------ */
/* Checkpoints: step directories and save paths                       */
/* ------------------------------------------------------------------ */

static void verify_step(vctx *c, const char *dir)
{
    if (shs_checkpoint_verify(dir, c->has_key ? c->key : NULL, SHS_KEY_BYTES) < 0) {
        /* copied: the next library call overwrites the message */
        char *msg = cli_fmt("%s", shs_last_error());
        const char *reason = msg ? cli_strip_path(msg, dir) : "checkpoint verification failed";
        size_t n = strlen(dir);
        /* "DIR/metadata.json: ..." -> "metadata.json: ..." */
        if (reason == msg && strncmp(msg, dir, n) == 0 && msg[n] == '/')
            reason = msg + n + 1;
        fail_line(c, "checkpoint", dir, reason);
        free(msg);
        return;
    }
    shs_checkpoint *ck;
    long long step = -1;
    int version = 0, format = SHS_FORMAT_SHARDSAFE, encrypted = 0;
    char key_id[17] = "";
    if (shs_checkpoint_open(&ck, dir, NULL) == SHS_OK) {
        step = (long long)shs_checkpoint_step(ck);
        version = shs_checkpoint_format_version(ck);
        format = shs_checkpoint_format(ck);
        encrypted = shs_checkpoint_encrypted(ck);
        snprintf(key_id, sizeof key_id, "%s", shs_checkpoint_key_id(ck));
        shs_checkpoint_free(ck);
    }
    uint64_t bytes, files, shared;
    cli_du(dir, &bytes, &files, &shared);
    json_t *o = result_json(c, "checkpoint", dir, NULL);
    jset(c, o, "step", json_integer(step));
    jset(c, o, "file_count", cli_ju64(files));
    jset(c, o, "bytes", cli_ju64(bytes));
    jset(c, o, "format_version", json_integer(version));
    jset(c, o, "format", json_string(shs_format_name(format)));
    jset(c, o, "checksums", json_boolean(format == SHS_FORMAT_SHARDSAFE));
    jset(c, o, "encrypted", json_boolean(encrypted));
    if (put_ok(dir)) {
        printf(" (checkpoint step %lld, %llu files, %llu bytes)\n", step, (unsigned long long)files,
               (unsigned long long)bytes);
        /* an OK of an older format proves less: say what it did not cover */
        /* MindSpore files carry no checksums: say what was checked */
        if (format == SHS_FORMAT_MINDSPORE)
            printf("note: MindSpore checkpoint: no checksums; headers, layout, readability "
                   "and the equality of replicated copies were checked, data stored once was "
                   "not\n");
        if (version == 1)
            printf("note: metadata.json version 1: common.json, headers and metadata.json "
                   "itself are not covered by checksums\n");
        if (encrypted)
            printf("note: encrypted (AES-256-GCM, key id %s): every chunk authenticated with "
                   "the key\n",
                   key_id);
    }
}

static void verify_save_path(vctx *c, const char *path)
{
    cli_save s;
    if (cli_save_scan(&s, path) != CLI_OK) {
        c->status = CLI_FAIL;
        return;
    }
    size_t n_committed = 0;
    for (size_t i = 0; i < s.n_steps; i++) {
        if (!s.steps[i].committed) {
            /* the reason ls and inspect give */
            char *why = cli_step_problem(s.steps[i].path);
            cli_warn("%s: incomplete step directory, not verified (%s)", s.steps[i].path,
                     why ? why : "no metadata.json or common.json");
            free(why);
            continue;
        }
        n_committed++;
        verify_step(c, s.steps[i].path);
    }
    for (size_t i = 0; i < s.n_leftovers; i++)
        cli_warn("%s: leftover of a failed save (shardsafe prune removes it)", s.leftovers[i].path);
    if (s.tracker == CLI_TRACKER_MISSING) {
        cli_warn("%s/%s: no tracker (a resume picks the newest committed step)", path, CLI_TRACKER);
    } else if (!s.latest) {
        /* a resume from this save path would fail: a failure, not a warning */
        char *tp = cli_fmt("%s/%s", path, CLI_TRACKER);
        char *msg = s.tracker == CLI_TRACKER_MALFORMED
                        ? cli_fmt("malformed tracker: %s", s.tracker_why)
                        : cli_fmt("names step %lld, but there is no complete directory of "
                                  "that step",
                                  (long long)s.tracker_step);
        fail_line(c, "tracker", tp ? tp : path, msg ? msg : "bad tracker");
        free(tp);
        free(msg);
    }
    if (n_committed == 0)
        fail_line(c, "save_path", path, "no committed step directory");
    cli_save_release(&s);
}

int cli_cmd_verify(int argc, char **argv)
{
    static const cli_optdef defs[] = {
        { "--check-finite", 0, 0 }, { "--key-file", 0, 1 }, { "--key-env", 0, 1 }, { NULL, 0, 0 }
    };
    const char *key_file = NULL, *key_env = NULL;
    cli_parser p;
    vctx c;
    const char *val;
    int k;
    memset(&c, 0, sizeof c);
    cli_strs paths = { 0 };
    cli_parser_init(&p, "verify", k_help, argc, argv);
    while ((k = cli_parser_next(&p, defs, &val)) != CLI_ARG_END) {
        switch (k) {
        case CLI_ARG_EXIT: cli_strs_release(&paths); return p.status;
        case CLI_ARG_POSITIONAL:
            if (cli_strs_add(&paths, cli_fmt("%s", val)) < 0) {
                cli_err("out of memory");
                cli_strs_release(&paths);
                return CLI_FAIL;
            }
            break;
        case 0: c.check_finite = 1; break;
        case 1: key_file = val; break;
        case 2: key_env = val; break;
        }
    }
    if (paths.n == 0)
        return cli_usage_err("verify", "missing PATH");
    int st = cli_key_load("verify", key_file, key_env, c.key, &c.has_key);
    if (st != CLI_OK) {
        cli_strs_release(&paths);
        return cli_g.json && st == CLI_FAIL ? cli_json_print(cli_json_new(), st, st) : st;
    }
    c.buf = malloc(CLI_CHUNK_BYTES);
    c.fbuf = malloc(CLI_CHUNK_BYTES / 8 * sizeof(float));
    if (cli_g.json && !(c.results = json_array()))
        c.oom = 1;
    if (!c.buf || !c.fbuf || c.oom) {
        cli_err("out of memory");
        c.status = CLI_FAIL;
    } else {
        cli_walk_ops ops = { on_file, NULL, on_index_done };
        for (size_t i = 0; i < paths.n; i++) {
            char *wrong = cli_wrong_kind("verify", paths.v[i]);
            if (wrong) {
                cli_err("%s", wrong);
                free(wrong);
                c.status = CLI_FAIL;
            } else if (cli_is_step_dir(paths.v[i]))
                verify_step(&c, paths.v[i]);
            else if (cli_is_save_path(paths.v[i]))
                verify_save_path(&c, paths.v[i]);
            else if (cli_walk(paths.v[i], &ops, &c) != CLI_OK)
                c.status = CLI_FAIL;
        }
    }
    if (cli_g.json) {
        json_t *doc = c.oom ? NULL : cli_json_new();
        json_t *jp = doc ? json_array() : NULL;
        for (size_t i = 0; jp && i < paths.n; i++)
            if (json_array_append_new(jp, cli_jstr0(paths.v[i])) < 0)
                c.oom = 1;
        if (c.oom) {
            json_decref(jp);
            jp = NULL;
        }
        if (!doc || !jp || c.oom || json_object_set_new(doc, "paths", jp) < 0 ||
            json_object_set_new(doc, "check_finite", json_boolean(c.check_finite)) < 0 ||
            json_object_set_new(doc, "results", json_incref(c.results)) < 0) {
            json_decref(doc);
            doc = NULL;
        }
        c.status = cli_json_print(doc, c.status, CLI_FAIL);
    }
    json_decref(c.results);
    memset(c.key, 0, sizeof c.key);
    free(c.buf);
    free(c.fbuf);
    cli_strs_release(&paths);
    return cli_finish_stdout(c.status);
}
