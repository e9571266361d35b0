/*
 * cmd_convert.c -- `shardsafe convert IN OUT --dtype T [...]`.
 *
 * Streaming: every tensor of IN is declared in the writer (floating-point
 * ones with the target dtype), then the data is produced in the writer's
 * file order, one bounded chunk at a time: pread a chunk of source
 * elements, shs_convert it, shs_writer_write_part it.  Memory is O(chunk)
 * whatever the tensor sizes.  IN is opened without mmap on purpose: pages
 * of a mapping that we touch count in our resident set, so reading a
 * 2 GiB tensor through the zero-copy pointer would show 2 GiB of RSS.
 *
 * OUT is written by the library's writer to a temporary sibling and
 * renamed into place only by shs_writer_commit, so a failure (or a
 * signal, handled below) leaves any existing OUT untouched and no
 * temporary file behind.
 */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char k_help[] =
    "Usage: shardsafe convert IN OUT --dtype DTYPE [--only-float] [--align N] [--fsync]\n"
    "       shardsafe convert IN - --dtype DTYPE ...   (the file on stdout)\n"
    "\n"
    "Write a copy of the safetensors file IN to OUT with every floating-point\n"
    "tensor (F64, F32, F16, BF16, F8_*) converted to DTYPE, rounding to nearest,\n"
    "ties to even.  Other tensors (integers, BOOL, C64, F4, F6_*) are copied\n"
    "unchanged; __metadata__ is copied.  Memory use is bounded (8 MiB chunks),\n"
    "whatever the tensor sizes.  OUT is replaced atomically: on failure an\n"
    "existing OUT is left untouched and no temporary file remains.  With OUT '-'\n"
    "the file is built in a private directory under $TMPDIR, then copied to\n"
    "stdout (never to a terminal) and removed.  A progress line is shown on a\n"
    "terminal.  Ctrl-C (SIGINT), SIGTERM or SIGHUP leave no OUT and no\n"
    "temporary file.\n"
    "\n"
    "Options:\n"
    "  -d, --dtype DTYPE  target type: bf16, f16, f32, f64, f8_e4m3, f8_e5m2\n"
    "                 (any case; also bfloat16, float16/fp16/half,\n"
    "                 float32/fp32/float, float64/fp64/double,\n"
    "                 float8_e4m3fn, float8_e5m2)\n"
    "  --only-float   leave non-floating-point tensors out of OUT\n"
    "  --align N      start the data at a multiple of N bytes (a power of two\n"
    "                 from 8 to 16777216; default 8, as the reference writer)\n"
    "  --fsync        fsync OUT and its directory before returning\n"
    "  -h, --help, --version, -q, --quiet, -v, --verbose, --json\n"
    "                 as for every command (see 'shardsafe --help')\n"
    "\n"
    "Exit status: 0 converted, 1 invalid IN or the conversion failed, 2 usage\n"
    "error (including IN and OUT being the same file); killed by a signal\n"
    "(130 after Ctrl-C) once the temporary file is removed.\n";

typedef struct conv {
    const char *in, *out;
    shs_dtype target;
    int only_float;
    shs_writer_opts wopts;
    shs_file *f;
    shs_writer *w;
    unsigned char *sbuf, *dbuf;
    size_t n_converted, n_copied, n_dropped;
    cli_progress prog;
    uint64_t out_size;
} conv;

/* Report the library's message (it names the file and the problem),
   after `what` when that adds context. */
static int lib_fail(const char *what)
{
    const char *m = shs_last_error();
    if (what)
        cli_err("convert: %s: %s", what, *m ? m : "unknown error");
    else
        cli_err("convert: %s", *m ? m : "unknown error");
    return CLI_FAIL;
}

static int interrupted(void)
{
    if (!cli_signals_caught())
        return 0;
    cli_err("convert: interrupted by signal %d; output discarded", cli_signals_caught());
    return 1;
}

static int declare(conv *c)
{
    if (shs_file_has_metadata(c->f) && shs_writer_set_metadata_present(c->w) < 0)
        return lib_fail("copying metadata");
    size_t nm = shs_file_metadata_count(c->f);
    for (size_t i = 0; i < nm; i++) {
        const char *k, *v;
        size_t kl, vl;
        if (shs_file_metadata_at_n(&k, &kl, &v, &vl, c->f, i) < 0 ||
            shs_writer_add_metadata_n(c->w, k, kl, v, vl) < 0)
            return lib_fail("copying metadata");
    }
    size_t nt = shs_file_tensor_count(c->f);
    for (size_t i = 0; i < nt; i++) {
        const shs_tensor_info *t = shs_file_tensor(c->f, i);
        if (strlen(t->name) != t->name_len) {
            char *e = cli_escape(t->name, t->name_len);
            cli_err("convert: %s: tensor '%s': a name containing NUL cannot be written", c->in,
                    e ? e : "?");
            free(e);
            return CLI_FAIL;
        }
        shs_dtype dt = t->dtype;
        if (shs_dtype_is_float(dt)) {
            dt = c->target;
        } else if (c->only_float) {
            c->n_dropped++;
            continue;
        }
        if (shs_writer_add_tensor(c->w, t->name, dt, t->ndim, t->shape) < 0)
            return lib_fail(NULL);
    }
    if (shs_writer_seal(c->w) < 0)
        return lib_fail(NULL);
    return CLI_OK;
}

/* Produce one tensor of OUT from its source, chunk by chunk. */
static int copy_tensor(conv *c, const char *name)
{
    size_t i;
    if (shs_file_find(&i, c->f, name) < 0)
        return lib_fail("internal error");
    const shs_tensor_info *t = shs_file_tensor(c->f, i);
    if (!shs_dtype_is_float(t->dtype)) {
        /* unchanged bytes (also sub-byte types: copied as bytes) */
        for (uint64_t off = 0; off < t->nbytes; off += CLI_CHUNK_BYTES) {
            size_t len = t->nbytes - off < CLI_CHUNK_BYTES ? (size_t)(t->nbytes - off)
                                                           : CLI_CHUNK_BYTES;
            if (interrupted())
                return CLI_FAIL;
            if (shs_file_read_bytes(c->f, i, off, c->sbuf, len) < 0)
                return lib_fail(NULL);
            if (shs_writer_write_part(c->w, name, off, c->sbuf, len) < 0)
                return lib_fail(NULL);
            cli_progress_add(&c->prog, len);
        }
        cli_info("convert: copied '%s' (%s)", name, shs_dtype_name(t->dtype));
        c->n_copied++;
        return CLI_OK;
    }
    size_t ssz = shs_dtype_bits(t->dtype) / 8, dsz = shs_dtype_bits(c->target) / 8;
    size_t per = CLI_CHUNK_BYTES / (ssz > dsz ? ssz : dsz);
    uint64_t dst_off = 0;
    for (uint64_t e = 0; e < t->numel; e += per) {
        size_t n = t->numel - e < per ? (size_t)(t->numel - e) : per;
        if (interrupted())
            return CLI_FAIL;
        if (shs_file_read_bytes(c->f, i, e * ssz, c->sbuf, n * ssz) < 0)
            return lib_fail(NULL);
        if (shs_convert(c->dbuf, c->target, c->sbuf, t->dtype, n) < 0)
            return lib_fail(NULL);
        if (shs_writer_write_part(c->w, name, dst_off, c->dbuf, n * dsz) < 0)
            return lib_fail(NULL);
        dst_off += n * dsz;
        cli_progress_add(&c->prog, n * ssz);
    }
    cli_info("convert: converted '%s' (%s -> %s)", name, shs_dtype_name(t->dtype),
             shs_dtype_name(c->target));
    c->n_converted++;
    return CLI_OK;
}

static int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    if (strcmp(a, b) == 0)
        return 1;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* Bytes of IN that will be read: the progress line's total. */
static uint64_t input_bytes(const conv *c)
{
    uint64_t total = 0;
    size_t nt = shs_file_tensor_count(c->f);
    for (size_t i = 0; i < nt; i++) {
        const shs_tensor_info *t = shs_file_tensor(c->f, i);
        if (shs_dtype_is_float(t->dtype) || !c->only_float)
            total = cli_add_sat(total, t->nbytes);
    }
    return total;
}

static int run(conv *c)
{
    char *why = NULL;
    struct stat st;
    if (stat(c->out, &st) == 0 && S_ISDIR(st.st_mode)) {
        cli_err("convert: %s: is a directory; OUT must be a file path", c->out);
        return CLI_FAIL;
    }
    if (cli_open_file(&c->f, c->in, &why) < 0) {
        if (why) {
            cli_err("convert: %s", why);
            free(why);
            return CLI_FAIL;
        }
        return lib_fail("invalid input");
    }
    c->sbuf = malloc(CLI_CHUNK_BYTES);
    c->dbuf = malloc(CLI_CHUNK_BYTES);
    if (!c->sbuf || !c->dbuf) {
        cli_err("convert: out of memory");
        return CLI_FAIL;
    }
    if (shs_writer_create(&c->w, c->out, &c->wopts) < 0)
        return lib_fail("cannot create OUT");
    int rc = declare(c);
    if (rc != CLI_OK)
        return rc;
    cli_progress_start(&c->prog, "convert", input_bytes(c));
    size_t n = shs_writer_tensor_count(c->w);
    for (size_t k = 0; k < n; k++)
        if ((rc = copy_tensor(c, shs_writer_tensor_name(c->w, k))) != CLI_OK)
            break;
    cli_progress_end(&c->prog);
    if (rc != CLI_OK)
        return rc;
    if (interrupted())
        return CLI_FAIL;
    if (shs_writer_commit(c->w) < 0)
        return lib_fail(NULL);
    c->out_size = stat(c->out, &st) == 0 ? (uint64_t)st.st_size : 0;
    return CLI_OK;
}

/* OUT "-": copy the committed file to stdout, chunk by chunk, stopping on
   a signal like the conversion. */
static int copy_to_stdout(conv *c)
{
    int fd = open(c->out, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        cli_err("convert: cannot open '%s': %s", c->out, strerror(errno));
        return CLI_FAIL;
    }
    int rc = CLI_OK;
    for (;;) {
        if (interrupted()) {
            rc = CLI_FAIL;
            break;
        }
        ssize_t n = read(fd, c->sbuf, CLI_CHUNK_BYTES);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            cli_err("convert: reading '%s': %s", c->out, strerror(errno));
            rc = CLI_FAIL;
            break;
        }
        if (n == 0)
            break;
        if (fwrite(c->sbuf, 1, (size_t)n, stdout) != (size_t)n) {
            cli_err("convert: error writing to standard output: %s", strerror(errno));
            rc = CLI_FAIL;
            break;
        }
    }
    close(fd);
    if (rc == CLI_OK && fflush(stdout) != 0) {
        cli_err("convert: error writing to standard output: %s", strerror(errno));
        rc = CLI_FAIL;
    }
    return rc;
}

static void print_result(const conv *c, const char *shown_out, FILE *f)
{
    char hb[32];
    fprintf(f, "converted ");
    cli_put_escaped(f, c->in, strlen(c->in));
    fprintf(f, " -> ");
    cli_put_escaped(f, shown_out, strlen(shown_out));
    fprintf(f, ": %zu tensors converted to %s, %zu copied", c->n_converted,
            shs_dtype_name(c->target), c->n_copied);
    if (c->only_float)
        fprintf(f, ", %zu left out", c->n_dropped);
    fprintf(f, ", %llu bytes (%s)\n", (unsigned long long)c->out_size,
            cli_human_bytes(hb, sizeof hb, c->out_size));
}

static int print_json(const conv *c, const char *shown_out, int status)
{
    json_t *doc = cli_json_new();
    if (doc) {
        int bad = json_object_set_new(doc, "source", cli_jstr0(c->in)) < 0;
        bad |= json_object_set_new(doc, "destination", cli_jstr0(shown_out)) < 0;
        bad |= json_object_set_new(doc, "dtype", json_string(shs_dtype_name(c->target))) < 0;
        bad |= json_object_set_new(doc, "converted_count",
                                   json_integer((json_int_t)c->n_converted)) < 0;
        bad |= json_object_set_new(doc, "copied_count", json_integer((json_int_t)c->n_copied)) < 0;
        bad |= json_object_set_new(doc, "left_out_count", json_integer((json_int_t)c->n_dropped)) <
               0;
        bad |= json_object_set_new(doc, "bytes_written",
                                   status == CLI_OK ? cli_ju64(c->out_size) : json_null()) < 0;
        if (bad) {
            json_decref(doc);
            doc = NULL;
        }
    }
    return cli_json_print(doc, status, CLI_FAIL);
}

int cli_cmd_convert(int argc, char **argv)
{
    static const cli_optdef defs[] = { { "--dtype", 'd', 1 },
                                       { "--only-float", 0, 0 },
                                       { "--align", 0, 1 },
                                       { "--fsync", 0, 0 },
                                       { NULL, 0, 0 } };
    cli_parser p;
    conv c;
    const char *val, *pos[2] = { NULL, NULL };
    int k, npos = 0, have_dtype = 0;
    memset(&c, 0, sizeof c);
    shs_writer_opts wo = SHS_WRITER_OPTS_INIT;
    c.wopts = wo;
    cli_parser_init(&p, "convert", k_help, argc, argv);
    while ((k = cli_parser_next(&p, defs, &val)) != CLI_ARG_END) {
        switch (k) {
        case CLI_ARG_EXIT: return p.status;
        case CLI_ARG_POSITIONAL:
            if (npos == 2)
                return cli_usage_err("convert", "takes exactly IN and OUT (extra argument '%s')",
                                     val);
            pos[npos++] = val;
            break;
        case 0:
            if (cli_parse_dtype(val, &c.target) < 0)
                return cli_usage_err("convert",
                                     "unknown --dtype '%s' (use bf16, f16, f32, f64, f8_e4m3 "
                                     "or f8_e5m2)",
                                     val);
            have_dtype = 1;
            break;
        case 1: c.only_float = 1; break;
        case 2: {
            uint64_t a;
            if (cli_parse_u64(val, &a) < 0 || a < 8 || a > (1u << 24) || (a & (a - 1)))
                return cli_usage_err("convert",
                                     "--align must be a power of two from 8 to 16777216, "
                                     "not '%s'",
                                     val);
            c.wopts.align = (uint32_t)a;
            break;
        }
        case 3: c.wopts.fsync = 1; break;
        }
    }
    if (npos < 2)
        return cli_usage_err("convert", "needs IN and OUT");
    if (!have_dtype)
        return cli_usage_err("convert", "missing --dtype");
    c.in = pos[0];
    c.out = pos[1];
    int to_stdout = strcmp(c.out, "-") == 0;
    char *tmpdir = NULL, *tmpout = NULL;
    if (to_stdout) {
        if (cli_g.json)
            return cli_usage_err("convert", "--json and OUT '-' both want stdout");
        if (isatty(STDOUT_FILENO))
            return cli_usage_err("convert", "refusing to write a safetensors file to a "
                                            "terminal (redirect stdout, or give OUT)");
        /* The writer needs a seekable file that it renames into place, so
           the file is built in a private directory, then copied. */
        const char *base = getenv("TMPDIR");
        tmpdir = cli_fmt("%s/shardsafe-convert-XXXXXX", base && *base ? base : "/tmp");
        if (!tmpdir || !mkdtemp(tmpdir)) {
            cli_err("convert: cannot create a temporary directory under %s: %s",
                    base && *base ? base : "/tmp", strerror(errno));
            free(tmpdir);
            return CLI_FAIL;
        }
        tmpout = cli_fmt("%s/out.safetensors", tmpdir);
        if (!tmpout) {
            cli_err("convert: out of memory");
            rmdir(tmpdir);
            free(tmpdir);
            return CLI_FAIL;
        }
        c.out = tmpout;
    } else if (same_file(c.in, c.out)) {
        return cli_usage_err("convert",
                             "IN and OUT are the same file ('%s'); write to a new "
                             "path",
                             c.out);
    }

    /* A signal stops the conversion between chunks so that the writer can
       remove its temporary file; signals ignored by our parent (nohup, a
       background job) stay ignored. */
    cli_signals sig;
    cli_signals_catch(&sig);

    cli_info("convert: %s -> %s", c.in, to_stdout ? "standard output" : c.out);
    int rc = run(&c);
    if (rc == CLI_OK && to_stdout)
        rc = copy_to_stdout(&c);

    /* Uncommitted: removes the temporary file. */
    shs_writer_free(c.w);
    shs_file_free(c.f);
    free(c.sbuf);
    free(c.dbuf);
    if (to_stdout) {
        unlink(tmpout);
        rmdir(tmpdir);
        free(tmpout);
        free(tmpdir);
        c.out = pos[1];
    }
    /* dies of a signal received, now that we cleaned up */
    cli_signals_restore(&sig);
    if (cli_signals_caught())
        return CLI_FAIL;
    if (cli_g.json)
        return cli_finish_stdout(print_json(&c, c.out, rc));
    /* with OUT "-" stdout is the file: the summary only with -v, on stderr */
    if (rc == CLI_OK && (to_stdout ? cli_g.verbose : !cli_g.quiet))
        print_result(&c, to_stdout ? "(standard output)" : c.out, to_stdout ? stderr : stdout);
    return cli_finish_stdout(rc);
}
