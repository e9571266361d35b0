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
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char k_help[] =
    "Usage: shardsafe convert IN OUT --dtype DTYPE [--only-float] [--align N] [--fsync]\n"
    "\n"
    "Write a copy of the safetensors file IN to OUT with every floating-point\n"
    "tensor (F64, F32, F16, BF16, F8_*) converted to DTYPE, rounding to nearest,\n"
    "ties to even.  Other tensors (integers, BOOL, C64, F4, F6_*) are copied\n"
    "unchanged; __metadata__ is copied.  Memory use is bounded (8 MiB chunks),\n"
    "whatever the tensor sizes.  OUT is replaced atomically: on failure an\n"
    "existing OUT is left untouched and no temporary file remains.\n"
    "\n"
    "Options:\n"
    "  --dtype DTYPE  target type: bf16, f16, f32, f64, f8_e4m3, f8_e5m2\n"
    "                 (any case; also bfloat16, float16/fp16/half,\n"
    "                 float32/fp32/float, float64/fp64/double,\n"
    "                 float8_e4m3fn, float8_e5m2)\n"
    "  --only-float   leave non-floating-point tensors out of OUT\n"
    "  --align N      start the data at a multiple of N bytes (a power of two\n"
    "                 from 8 to 16777216; default 8, as the reference writer)\n"
    "  --fsync        fsync OUT and its directory before returning\n"
    "  -h, --help     show this help\n"
    "\n"
    "Exit status: 0 converted, 1 invalid IN or the conversion failed, 2 usage\n"
    "error (including IN and OUT being the same file).\n";

static volatile sig_atomic_t g_signal;

static void on_signal(int sig)
{
    g_signal = sig;
}

static const struct {
    const char *alias;
    shs_dtype dtype;
} k_aliases[] = {
    { "BF16", SHS_BF16 },        { "BFLOAT16", SHS_BF16 },
    { "F16", SHS_F16 },          { "FP16", SHS_F16 },
    { "FLOAT16", SHS_F16 },      { "HALF", SHS_F16 },
    { "F32", SHS_F32 },          { "FP32", SHS_F32 },
    { "FLOAT32", SHS_F32 },      { "FLOAT", SHS_F32 },
    { "F64", SHS_F64 },          { "FP64", SHS_F64 },
    { "FLOAT64", SHS_F64 },      { "DOUBLE", SHS_F64 },
    { "F8_E4M3", SHS_F8_E4M3 },  { "FLOAT8_E4M3FN", SHS_F8_E4M3 },
    { "F8_E5M2", SHS_F8_E5M2 },  { "FLOAT8_E5M2", SHS_F8_E5M2 },
};

static int parse_target(const char *s, shs_dtype *out)
{
    char up[32];
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof up)
        return -1;
    for (size_t i = 0; i <= n; i++)
        up[i] = (char)toupper((unsigned char)s[i]);
    for (size_t i = 0; i < sizeof k_aliases / sizeof k_aliases[0]; i++)
        if (strcmp(up, k_aliases[i].alias) == 0) {
            *out = k_aliases[i].dtype;
            return 0;
        }
    return -1;
}

/* Types shs_convert handles; these are the ones converted. */
static int is_float(shs_dtype t)
{
    switch (t) {
    case SHS_F64: case SHS_F32: case SHS_F16: case SHS_BF16:
    case SHS_F8_E4M3: case SHS_F8_E5M2: case SHS_F8_E4M3FNUZ:
    case SHS_F8_E5M2FNUZ: case SHS_F8_E8M0:
        return 1;
    default:
        return 0;
    }
}

typedef struct conv {
    const char *in, *out;
    shs_dtype target;
    int only_float;
    shs_writer_opts wopts;
    shs_file *f;
    shs_writer *w;
    unsigned char *sbuf, *dbuf;
    size_t n_converted, n_copied, n_dropped;
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
    if (!g_signal)
        return 0;
    cli_err("convert: interrupted by signal %d; output discarded", (int)g_signal);
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
            cli_err("convert: %s: tensor '%s': a name containing NUL cannot be written",
                    c->in, e ? e : "?");
            free(e);
            return CLI_FAIL;
        }
        shs_dtype dt = t->dtype;
        if (is_float(dt)) {
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
    if (!is_float(t->dtype)) {
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
        }
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
    }
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
    size_t n = shs_writer_tensor_count(c->w);
    for (size_t k = 0; k < n; k++)
        if ((rc = copy_tensor(c, shs_writer_tensor_name(c->w, k))) != CLI_OK)
            return rc;
    if (interrupted())
        return CLI_FAIL;
    if (shs_writer_commit(c->w) < 0)
        return lib_fail(NULL);
    return CLI_OK;
}

int cli_cmd_convert(int argc, char **argv)
{
    static const cli_optdef defs[] = {
        { "--dtype", 1 }, { "--only-float", 0 }, { "--align", 1 }, { "--fsync", 0 },
        { NULL, 0 }
    };
    cli_parser p;
    conv c;
    const char *val, *pos[2] = { NULL, NULL };
    int k, npos = 0, have_dtype = 0;
    memset(&c, 0, sizeof c);
    shs_writer_opts wo = SHS_WRITER_OPTS_INIT;
    c.wopts = wo;
    cli_parser_init(&p, "convert", argc, argv);
    while ((k = cli_parser_next(&p, defs, &val)) != CLI_ARG_END) {
        switch (k) {
        case CLI_ARG_HELP:
            fputs(k_help, stdout);
            return cli_finish_stdout(CLI_OK);
        case CLI_ARG_ERROR:
            return CLI_USAGE;
        case CLI_ARG_POSITIONAL:
            if (npos == 2)
                return cli_usage_err("convert", "takes exactly IN and OUT (extra argument '%s')",
                                     val);
            pos[npos++] = val;
            break;
        case 0:
            if (parse_target(val, &c.target) < 0)
                return cli_usage_err("convert",
                                     "unknown --dtype '%s' (use bf16, f16, f32, f64, f8_e4m3 "
                                     "or f8_e5m2)", val);
            have_dtype = 1;
            break;
        case 1:
            c.only_float = 1;
            break;
        case 2: {
            uint64_t a;
            if (cli_parse_u64(val, &a) < 0 || a < 8 || a > (1u << 24) || (a & (a - 1)))
                return cli_usage_err("convert",
                                     "--align must be a power of two from 8 to 16777216, "
                                     "not '%s'", val);
            c.wopts.align = (uint32_t)a;
            break;
        }
        case 3:
            c.wopts.fsync = 1;
            break;
        }
    }
    if (npos < 2)
        return cli_usage_err("convert", "needs IN and OUT");
    if (!have_dtype)
        return cli_usage_err("convert", "missing --dtype");
    c.in = pos[0];
    c.out = pos[1];
    if (same_file(c.in, c.out))
        return cli_usage_err("convert", "IN and OUT are the same file ('%s'); write to a new "
                             "path", c.out);

    /* A signal stops the conversion between chunks so that the writer can
       remove its temporary file; signals ignored by our parent (nohup, a
       background job) stay ignored. */
    static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
    struct sigaction sa, old[3];
    int caught[3] = { 0, 0, 0 };
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; i++)
        if (sigaction(sigs[i], NULL, &old[i]) == 0 && old[i].sa_handler != SIG_IGN)
            caught[i] = sigaction(sigs[i], &sa, NULL) == 0;

    int rc = run(&c);

    /* Uncommitted: removes the temporary file. */
    shs_writer_free(c.w);
    shs_file_close(c.f);
    free(c.sbuf);
    free(c.dbuf);
    for (int i = 0; i < 3; i++)
        if (caught[i])
            sigaction(sigs[i], &old[i], NULL);
    if (g_signal) {
        /* die of the signal, as the shell expects, now that we cleaned up */
        fflush(stdout);
        raise(g_signal);
        return CLI_FAIL;
    }
    if (rc == CLI_OK) {
        char hb[32];
        struct stat st;
        uint64_t size = stat(c.out, &st) == 0 ? (uint64_t)st.st_size : 0;
        printf("converted ");
        cli_put_escaped(stdout, c.in, strlen(c.in));
        printf(" -> ");
        cli_put_escaped(stdout, c.out, strlen(c.out));
        printf(": %zu tensors converted to %s, %zu copied", c.n_converted,
               shs_dtype_name(c.target), c.n_copied);
        if (c.only_float)
            printf(", %zu left out", c.n_dropped);
        printf(", %llu bytes (%s)\n", (unsigned long long)size,
               cli_human_bytes(hb, sizeof hb, size));
    }
    return cli_finish_stdout(rc);
}
