/*
 * cmd_merge.c -- `shardsafe merge SRC DST [...]`: a thin layer over
 * shs_merge / shs_merge_finish (the library does the work, the checks
 * and the cleanup); here: options, the progress line, signals, output.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static const char k_help[] =
    "Usage: shardsafe merge SRC DST [options]\n"
    "       shardsafe merge SRC DST --part I/N [options]     (one part of a split merge)\n"
    "       shardsafe merge SRC DST --finish-parts N [options]\n"
    "\n"
    "Write the complete tensors of checkpoint SRC (a save path, a step directory\n"
    "saved by any number of ranks, with or without remove_redundancy, or any\n"
    "source 'inspect' reads) into directory DST in the Hugging Face layout:\n"
    "model.safetensors, or model-00001-of-0000N.safetensors ... plus\n"
    "model.safetensors.index.json.  Every chunk is checked against its checksum.\n"
    "Memory stays bounded (16 MiB per job) whatever the tensor sizes.  DST is\n"
    "built in a temporary sibling and renamed into place: on failure or Ctrl-C\n"
    "nothing is left.  A progress line is shown on a terminal.  An encrypted\n"
    "SRC needs its key (--key-file or --key-env); the merged files are NOT\n"
    "encrypted: they are plain Hugging Face files.\n"
    "\n"
    "Options:\n"
    "  --max-shard-size S  largest output file, e.g. 5GB (default), 500MiB, or\n"
    "                   bytes; a tensor larger than S gets a file of its own\n"
    "  --grouping G     which tensors share a file: 'current' (default: as\n"
    "                   huggingface_hub >= 0.21 / transformers >= 4.42 write it, a\n"
    "                   tensor larger than S does not close the open file; the\n"
    "                   index has total_parameters) or 'legacy' (transformers\n"
    "                   < 4.42)\n"
    "  -d, --dtype T    convert floating-point tensors to T (bf16, f16, f32, f64,\n"
    "                   f8_e4m3, f8_e5m2; as for convert); others are copied\n"
    "  --include GLOB   merge only tensors matching a GLOB (repeatable; '*'\n"
    "                   matches '.' too)\n"
    "  --exclude GLOB   leave out tensors matching GLOB (repeatable)\n"
    "  --rename FROM=TO replace every FROM in the names by TO (repeatable,\n"
    "                   applied in order, after the globs)\n"
    "  --with-optimizer merge optimizer tensors too (default: model only)\n"
    "  --src-strategy FILE  SRC is a folder of MindSpore rank_0, rank_1, ...\n"
    "                   folders (one .safetensors file each) laid out by this\n"
    "                   strategy file (the protobuf of strategy_ckpt_save_file;\n"
    "                   unified_safetensors' src_strategy_file)\n"
    "  -j, --jobs N     threads reading and writing at once (default 1)\n"
    "  --step N         the step to merge (default: the tracker's, else newest)\n"
    "  --part I/N       write only part I (0 to N-1) of the files, into\n"
    "                   DST.part-I-of-N (for several machines)\n"
    "  --finish-parts N gather the N parts into DST and write the index\n"
    "  --force          replace an existing DST (or part directory) that holds\n"
    "                   only the files of an earlier merge\n"
    "  --fsync          fsync the files and directories written\n"
    "  --key-file FILE  the key of an encrypted SRC: 32 raw bytes or 64 hex digits\n"
    "  --key-env VAR    the key from environment variable VAR (64 hex digits);\n"
    "                   the key itself is never a command-line argument\n"
    "  -h, --help, --version, -q, --quiet, -v, --verbose, --json\n"
    "                   as for every command (see 'shardsafe --help')\n"
    "\n"
    "Exit status: 0 merged, 1 invalid or damaged SRC, a failed write, or DST\n"
    "exists; 2 usage error; killed by the signal after Ctrl-C (130).\n";

typedef struct margs {
    const char *src, *dst;
    shs_merge_opts o;
    cli_strs inc, exc, ren; /* borrowed argv strings */
    int finish;
    int exit_now; /* --help or --version was printed */
    const char *key_file, *key_env;
    unsigned char key[SHS_KEY_BYTES];
    cli_progress prog;
    int prog_started;
} margs;

static int on_progress(void *ctx, uint64_t done, uint64_t total)
{
    margs *a = ctx;
    if (!a->prog_started) {
        cli_progress_start(&a->prog, "merge", total);
        a->prog_started = 1;
    }
    if (done > a->prog.done)
        cli_progress_add(&a->prog, done - a->prog.done);
    return cli_signals_caught() != 0;
}

/* Append an argv string (not owned: cli_strs frees, so keep a copy). */
static int add_str(cli_strs *s, const char *v)
{
    char *d = strdup(v);
    return d ? cli_strs_add(s, d) : -1;
}

static int parse_part(const char *v, int *index, int *count)
{
    const char *slash = strchr(v, '/');
    uint64_t i, n;
    char head[32];
    if (!slash || (size_t)(slash - v) >= sizeof head)
        return -1;
    memcpy(head, v, (size_t)(slash - v));
    head[slash - v] = '\0';
    if (cli_parse_u64(head, &i) < 0 || cli_parse_u64(slash + 1, &n) < 0 || n < 1 || n > 100000 ||
        i >= n)
        return -1;
    *index = (int)i;
    *count = (int)n;
    return 0;
}

static int parse_args(margs *a, int argc, char **argv)
{
    static const cli_optdef defs[] = {
        { "--max-shard-size", 0, 1 }, { "--dtype", 'd', 1 }, { "--include", 0, 1 },
        { "--exclude", 0, 1 },        { "--rename", 0, 1 },  { "--with-optimizer", 0, 0 },
        { "--jobs", 'j', 1 },         { "--step", 0, 1 },    { "--part", 0, 1 },
        { "--finish-parts", 0, 1 },   { "--force", 0, 0 },   { "--fsync", 0, 0 },
        { "--key-file", 0, 1 },       { "--key-env", 0, 1 }, { "--grouping", 0, 1 },
        { "--src-strategy", 0, 1 },   { NULL, 0, 0 }
    };
    cli_parser p;
    const char *val, *pos[2] = { NULL, NULL };
    int k, npos = 0, have_part = 0;
    uint64_t u;
    shs_dtype dt;
    cli_parser_init(&p, "merge", k_help, argc, argv);
    while ((k = cli_parser_next(&p, defs, &val)) != CLI_ARG_END) {
        switch (k) {
        case CLI_ARG_EXIT: a->exit_now = 1; return p.status;
        case CLI_ARG_POSITIONAL:
            if (npos == 2)
                return cli_usage_err("merge", "takes exactly SRC and DST (extra argument '%s')",
                                     val);
            pos[npos++] = val;
            break;
        case 0:
            if (shs_parse_size(&a->o.max_shard_size, val) < 0)
                return cli_usage_err("merge", "--max-shard-size: %s", shs_last_error());
            break;
        case 1:
            if (cli_parse_dtype(val, &dt) < 0)
                return cli_usage_err("merge",
                                     "unknown --dtype '%s' (use bf16, f16, f32, f64, f8_e4m3 "
                                     "or f8_e5m2)",
                                     val);
            a->o.dtype = dt;
            break;
        case 2:
        case 3:
        case 4:
            if (add_str(k == 2 ? &a->inc : k == 3 ? &a->exc : &a->ren, val) < 0) {
                cli_err("merge: out of memory");
                return CLI_FAIL;
            }
            if (k == 4 && (!strchr(val, '=') || val[0] == '='))
                return cli_usage_err("merge",
                                     "--rename needs FROM=TO with FROM non-empty, not '%s'", val);
            break;
        case 5: a->o.flags |= SHS_MERGE_WITH_OPTIMIZER; break;
        case 6:
            if (cli_parse_u64(val, &u) < 0 || u < 1 || u > 64)
                return cli_usage_err("merge", "--jobs needs an integer from 1 to 64, not '%s'",
                                     val);
            a->o.jobs = (int)u;
            break;
        case 7:
            if (cli_parse_u64(val, &u) < 0 || u > INT64_MAX)
                return cli_usage_err("merge", "--step needs a step number, not '%s'", val);
            a->o.step = (int64_t)u;
            break;
        case 8:
            if (parse_part(val, &a->o.part_index, &a->o.part_count) < 0)
                return cli_usage_err("merge",
                                     "--part needs I/N with 0 <= I < N <= 100000 (e.g. 0/4), "
                                     "not '%s'",
                                     val);
            have_part = 1;
            break;
        case 9:
            if (cli_parse_u64(val, &u) < 0 || u < 1 || u > 100000)
                return cli_usage_err("merge",
                                     "--finish-parts needs a number of parts from 1 to 100000, "
                                     "not '%s'",
                                     val);
            a->o.part_count = (int)u;
            a->finish = 1;
            break;
        case 10: a->o.flags |= SHS_MERGE_FORCE; break;
        case 11: a->o.flags |= SHS_MERGE_FSYNC; break;
        case 12: a->key_file = val; break;
        case 13: a->key_env = val; break;
        case 14:
            if (strcmp(val, "current") == 0)
                a->o.grouping = SHS_MERGE_GROUPING_CURRENT;
            else if (strcmp(val, "legacy") == 0)
                a->o.grouping = SHS_MERGE_GROUPING_LEGACY;
            else
                return cli_usage_err("merge", "--grouping needs 'current' or 'legacy', not '%s'",
                                     val);
            break;
        case 15: a->o.src_strategy_file = val; break;
        }
    }
    if (npos < 2)
        return cli_usage_err("merge", "needs SRC and DST");
    if (!*pos[0] || !*pos[1])
        return cli_usage_err("merge", "%s is an empty path", *pos[0] ? "DST" : "SRC");
    if (have_part && a->finish)
        return cli_usage_err("merge", "--part and --finish-parts exclude each other");
    a->src = pos[0];
    a->dst = pos[1];
    int has_key, st = cli_key_load("merge", a->key_file, a->key_env, a->key, &has_key);
    if (st != CLI_OK)
        return st;
    if (has_key) {
        a->o.key = a->key;
        a->o.key_len = sizeof a->key;
    }
    a->o.include = (const char *const *)a->inc.v;
    a->o.n_include = a->inc.n;
    a->o.exclude = (const char *const *)a->exc.v;
    a->o.n_exclude = a->exc.n;
    a->o.rename = (const char *const *)a->ren.v;
    a->o.n_rename = a->ren.n;
    return CLI_OK;
}

static void print_text(const margs *a, const shs_merge_result *r)
{
    char hb[32];
    fputs("merged ", stdout);
    cli_put_escaped(stdout, a->src, strlen(a->src));
    fputs(" -> ", stdout);
    cli_put_escaped(stdout, a->dst, strlen(a->dst));
    if (a->o.part_count && !a->finish)
        printf(" (part %d of %d: %zu of the %zu files, %llu bytes)", a->o.part_index,
               a->o.part_count, r->files_written, r->n_files, (unsigned long long)r->bytes_written);
    printf(": %zu tensors in %zu file%s, %llu bytes (%s)%s\n", r->n_tensors, r->n_files,
           r->n_files == 1 ? "" : "s", (unsigned long long)r->total_size,
           cli_human_bytes(hb, sizeof hb, r->total_size),
           a->o.part_count && !a->finish ? "; run --finish-parts when every part is done" : "");
}

static int print_json(const margs *a, const shs_merge_result *r, int status)
{
    json_t *doc = cli_json_new();
    if (doc) {
        int ok = status == CLI_OK, bad = 0;
        bad |= json_object_set_new(doc, "source", cli_jstr0(a->src)) < 0;
        bad |= json_object_set_new(doc, "destination", cli_jstr0(a->dst)) < 0;
        bad |= json_object_set_new(doc, "tensor_count",
                                   ok ? json_integer((json_int_t)r->n_tensors) : json_null()) < 0;
        bad |= json_object_set_new(doc, "file_count",
                                   ok ? json_integer((json_int_t)r->n_files) : json_null()) < 0;
        bad |= json_object_set_new(doc, "total_size", ok ? cli_ju64(r->total_size) : json_null()) <
               0;
        bad |= json_object_set_new(doc, "files_written",
                                   ok ? json_integer((json_int_t)r->files_written) : json_null()) <
               0;
        bad |= json_object_set_new(doc, "bytes_written",
                                   ok ? cli_ju64(r->bytes_written) : json_null()) < 0;
        bad |= json_object_set_new(
                   doc, "part",
                   a->o.part_count && !a->finish
                       ? json_pack("{s:i,s:i}", "index", a->o.part_index, "count", a->o.part_count)
                       : json_null()) < 0;
        if (bad) {
            json_decref(doc);
            doc = NULL;
        }
    }
    return cli_json_print(doc, status, CLI_FAIL);
}

int cli_cmd_merge(int argc, char **argv)
{
    margs a;
    shs_merge_opts o = SHS_MERGE_OPTS_INIT;
    shs_merge_result r = SHS_MERGE_RESULT_INIT;
    memset(&a, 0, sizeof a);
    a.o = o;
    int rc = parse_args(&a, argc, argv);
    if (rc != CLI_OK || a.exit_now)
        goto done;
    a.o.progress = on_progress;
    a.o.progress_ctx = &a;

    /* a signal cancels through the progress callback, so that the
       library removes its temporary directory */
    cli_signals sig;
    cli_signals_catch(&sig);

    cli_info("merge: %s -> %s", a.src, a.dst);
    cli_clean_tool_leftovers(a.dst, "merge");
    int st = a.finish ? shs_merge_finish(&r, a.src, a.dst, &a.o)
                      : shs_merge(&r, a.src, a.dst, &a.o);
    if (a.prog_started)
        cli_progress_end(&a.prog);
    if (st < 0) {
        if (cli_signals_caught())
            cli_err("merge: interrupted by signal %d; output discarded", cli_signals_caught());
        else
            cli_err("merge: %s", shs_last_error());
        rc = CLI_FAIL;
    }
    /* after a signal: dies of it (the library removed its output) */
    cli_signals_restore(&sig);
    if (cli_g.json)
        rc = print_json(&a, &r, rc);
    else if (rc == CLI_OK && !cli_g.quiet)
        print_text(&a, &r);
    rc = cli_finish_stdout(rc);
done:
    memset(a.key, 0, sizeof a.key);
    cli_strs_release(&a.inc);
    cli_strs_release(&a.exc);
    cli_strs_release(&a.ren);
    return rc;
}
