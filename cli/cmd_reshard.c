/*
 * cmd_reshard.c -- `shardsafe reshard SRC DST [--layout FILE.json]
 * [--world-size N]`: a checkpoint rewritten for a target layout
 * (shs_reshard), and `--print-layout` to show the layout SRC was saved
 * with in the same vocabulary.  docs/reshard.md.
 */
#include "cli.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static const char k_help[] =
    "Usage: shardsafe reshard SRC DST [--layout FILE.json] [--world-size N]\n"
    "       shardsafe reshard SRC DST --strategy FILE [--rank-list R0,R1,...]\n"
    "       shardsafe reshard SRC --print-layout\n"
    "       shardsafe reshard --strategy FILE --print-layout\n"
    "\n"
    "Write the new step directory DST holding checkpoint SRC (a save path, a\n"
    "step directory, a folder of safetensors files or one file) split for a\n"
    "target layout, so that a job on the target world size loads it without\n"
    "resharding.  The layout (docs/reshard.md) gives each tensor, by name or\n"
    "glob, MindSpore's device_matrix/tensor_map/rank_list, a split of one\n"
    "dimension over N ranks, replicated, or explicit boxes per rank.  Without\n"
    "--layout the layout SRC was saved with is used; --world-size scales it\n"
    "(the ranks splitting a tensor change, its replication stays: TP 4 -> 2).\n"
    "DST must not exist; it is built in a temporary sibling and renamed at the\n"
    "end, so a failure leaves nothing behind.  Every chunk read is checked\n"
    "against its checksum.  An encrypted SRC needs its key (--key-file or\n"
    "--key-env); DST is then encrypted with the same key.\n"
    "\n"
    "Options:\n"
    "  --layout FILE     the target layout (JSON)\n"
    "  --strategy FILE   the target layout from a MindSpore strategy file (the\n"
    "                    protobuf that strategy_ckpt_save_file writes; MindSpore's\n"
    "                    dst_strategy_file): tensors it does not name are\n"
    "                    replicated; with --print-layout, print it as a layout\n"
    "  --rank-list LIST  with --strategy: the rank of each device of the file, in\n"
    "                    device order (stage by stage), comma-separated: a\n"
    "                    permutation of 0..N-1 (default: device k is rank k)\n"
    "  --world-size N    the target world size (scales the layout when it\n"
    "                    describes another)\n"
    "  --step N          SRC is a save path: this step (default: the newest)\n"
    "  --prefix P        file name prefix of DST's files (default: checkpoint)\n"
    "  --no-fsync        do not make DST durable (faster; for scratch copies)\n"
    "  --print-layout    print the layout SRC was saved with and exit\n"
    "  --key-file FILE   the key of an encrypted SRC: 32 raw bytes or 64 hex\n"
    "                    digits\n"
    "  --key-env VAR     the key from environment variable VAR (64 hex digits);\n"
    "                    the key itself is never a command-line argument\n"
    "  -h, --help, --version, -q, --quiet, -v, --verbose, --json\n"
    "                    as for every command (see 'shardsafe --help')\n"
    "\n"
    "Exit status: 0 written, 1 invalid input or failed operation, 2 usage error.\n";

typedef struct args {
    const char *src, *dst, *layout, *prefix, *key_file, *key_env, *strategy;
    uint64_t world, step;
    int has_step, no_fsync, print_layout;
    int *ranks; /* --rank-list (malloc'ed) */
    size_t n_ranks;
} args;

/* "0,2,1,3" into a->ranks. */
static int parse_ranks(args *a, const char *v)
{
    size_t n = 1;
    for (const char *p = v; *p; p++)
        n += *p == ',';
    if (!(a->ranks = calloc(n, sizeof *a->ranks))) {
        cli_err("reshard: out of memory");
        return CLI_FAIL;
    }
    const char *p = v;
    for (size_t i = 0; i < n; i++) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char num[24];
        uint64_t r;
        if (len == 0 || len >= sizeof num)
            return cli_usage_err("reshard", "--rank-list needs ranks separated by commas, not '%s'",
                                 v);
        memcpy(num, p, len);
        num[len] = '\0';
        if (cli_parse_u64(num, &r) < 0 || r > INT_MAX)
            return cli_usage_err("reshard", "--rank-list: '%s' is not a rank", num);
        a->ranks[i] = (int)r;
        p += len + (e != NULL);
    }
    a->n_ranks = n;
    return CLI_OK;
}

static int parse_args(args *a, int argc, char **argv)
{
    static const cli_optdef defs[] = { { "--layout", 0, 1 },   { "--world-size", 0, 1 },
                                       { "--step", 0, 1 },     { "--prefix", 0, 1 },
                                       { "--no-fsync", 0, 0 }, { "--print-layout", 0, 0 },
                                       { "--key-file", 0, 1 }, { "--key-env", 0, 1 },
                                       { "--strategy", 0, 1 }, { "--rank-list", 0, 1 },
                                       { NULL, 0, 0 } };
    cli_parser p;
    const char *val;
    int k;
    memset(a, 0, sizeof *a);
    cli_parser_init(&p, "reshard", k_help, argc, argv);
    while ((k = cli_parser_next(&p, defs, &val)) != CLI_ARG_END) {
        switch (k) {
        case CLI_ARG_EXIT: return p.status;
        case CLI_ARG_POSITIONAL:
            if (!a->src)
                a->src = val;
            else if (!a->dst)
                a->dst = val;
            else
                return cli_usage_err("reshard", "takes SRC and DST (got a third, '%s')", val);
            break;
        case 0: a->layout = val; break;
        case 1:
            if (cli_parse_u64(val, &a->world) < 0 || a->world < 1 || a->world > INT_MAX)
                return cli_usage_err("reshard", "--world-size needs a positive integer, not '%s'",
                                     val);
            break;
        case 2:
            if (cli_parse_u64(val, &a->step) < 0 || a->step > INT64_MAX)
                return cli_usage_err("reshard", "--step needs a step number, not '%s'", val);
            a->has_step = 1;
            break;
        case 3: a->prefix = val; break;
        case 4: a->no_fsync = 1; break;
        case 5: a->print_layout = 1; break;
        case 6: a->key_file = val; break;
        case 7: a->key_env = val; break;
        case 8: a->strategy = val; break;
        case 9:
            if (a->ranks)
                return cli_usage_err("reshard", "--rank-list given twice");
            if ((k = parse_ranks(a, val)) != CLI_OK)
                return k;
            break;
        }
    }
    if (a->layout && a->strategy)
        return cli_usage_err("reshard", "--layout and --strategy exclude each other");
    if (a->ranks && !a->strategy)
        return cli_usage_err("reshard", "--rank-list applies to --strategy");
    if (a->print_layout && a->strategy) {
        if (a->src || a->world)
            return cli_usage_err("reshard", "--strategy FILE --print-layout takes nothing else");
        return CLI_OK; /* the strategy's layout: SRC is not needed */
    }
    if (!a->src)
        return cli_usage_err("reshard", "missing SRC");
    if (a->print_layout && (a->dst || a->layout || a->world || a->strategy))
        return cli_usage_err("reshard", "--print-layout takes SRC alone, or --strategy alone");
    if (!a->print_layout && !a->dst)
        return cli_usage_err("reshard", "missing DST");
    if (!*a->src || (a->dst && !*a->dst))
        return cli_usage_err("reshard", "%s is an empty path", *a->src ? "DST" : "SRC");
    return CLI_OK;
}

static int print_layout(const args *a)
{
    char *text = NULL;
    if ((a->strategy ? shs_strategy_layout(&text, a->strategy, a->ranks, a->n_ranks)
                     : shs_reshard_saved_layout(&text, a->src,
                                                a->has_step ? (int64_t)a->step : -1)) != SHS_OK) {
        cli_err("%s", shs_last_error());
        return CLI_FAIL;
    }
    int status = CLI_OK;
    if (cli_g.json) {
        json_error_t jerr;
        json_t *doc = cli_json_new(), *lay = json_loads(text, 0, &jerr);
        if (!doc || !lay || json_object_set_new(doc, "layout", lay) < 0) {
            json_decref(doc);
            doc = NULL;
        }
        status = cli_json_print(doc, CLI_OK, CLI_FAIL);
    } else if (!cli_g.quiet) {
        fputs(text, stdout);
        fputc('\n', stdout);
    }
    shs_free(text);
    return cli_finish_stdout(status);
}

static int print_result(const args *a, const shs_reshard_result *r)
{
    if (cli_g.json) {
        json_t *doc = cli_json_new();
        int bad = !doc;
        if (!bad) {
            bad |= json_object_set_new(doc, "source", cli_jstr0(a->src)) < 0;
            bad |= json_object_set_new(doc, "destination", cli_jstr0(a->dst)) < 0;
            bad |= json_object_set_new(doc, "step", json_integer(r->step)) < 0;
            bad |= json_object_set_new(doc, "world_size", json_integer(r->world_size)) < 0;
            bad |= json_object_set_new(doc, "saved_world_size", json_integer(r->saved_world_size)) <
                   0;
            bad |= json_object_set_new(doc, "tensor_count", cli_ju64(r->n_tensors)) < 0;
            bad |= json_object_set_new(doc, "bytes_read", cli_ju64(r->bytes_read)) < 0;
            bad |= json_object_set_new(doc, "bytes_written", cli_ju64(r->bytes_written)) < 0;
            bad |= json_object_set_new(doc, "blobs_carried", cli_ju64(r->blobs_carried)) < 0;
            bad |= json_object_set_new(doc, "blobs_dropped", cli_ju64(r->blobs_dropped)) < 0;
            bad |= json_object_set_new(doc, "scaled", json_boolean(r->scaled)) < 0;
            bad |= json_object_set_new(
                       doc, "layout",
                       a->layout ? cli_jstr0(a->layout)
                       : a->strategy
                           ? cli_jstr0(a->strategy)
                           : json_string(r->layout_recorded ? "recorded" : "derived")) < 0;
        }
        if (bad) {
            json_decref(doc);
            doc = NULL;
        }
        return cli_finish_stdout(cli_json_print(doc, CLI_OK, CLI_FAIL));
    }
    if (!cli_g.quiet) {
        char hb[32];
        fputs("resharded ", stdout);
        cli_put_escaped(stdout, a->src, strlen(a->src));
        printf(" (step %lld, %d ranks) into ", (long long)r->step, r->saved_world_size);
        cli_put_escaped(stdout, a->dst, strlen(a->dst));
        printf(" (%d ranks): %zu tensors, %s written", r->world_size, r->n_tensors,
               cli_human_bytes(hb, sizeof hb, r->bytes_written));
        if (r->blobs_carried || r->blobs_dropped)
            printf(", %zu rank-local blobs carried, %zu dropped", r->blobs_carried,
                   r->blobs_dropped);
        fputs("\n", stdout);
    }
    return cli_finish_stdout(CLI_OK);
}

static int run(args *a);

int cli_cmd_reshard(int argc, char **argv)
{
    args a;
    int rc = parse_args(&a, argc, argv);
    if (rc == CLI_OK && (a.src || a.strategy))
        rc = a.print_layout ? print_layout(&a) : run(&a);
    free(a.ranks);
    return rc;
}

static int run(args *ap)
{
    args a = *ap;
    int rc;
    shs_reshard_opts o = SHS_RESHARD_OPTS_INIT;
    shs_reshard_result r = SHS_RESHARD_RESULT_INIT;
    unsigned char key[SHS_KEY_BYTES];
    int has_key;
    if ((rc = cli_key_load("reshard", a.key_file, a.key_env, key, &has_key)) != CLI_OK)
        return rc;
    if (has_key) {
        o.key = key;
        o.key_len = sizeof key;
    }
    o.world_size = (int)a.world;
    o.step = a.has_step ? (int64_t)a.step : -1;
    o.prefix = a.prefix;
    o.fsync = !a.no_fsync;
    o.strategy_file = a.strategy;
    o.rank_list = a.ranks;
    o.n_rank_list = a.n_ranks;
    cli_info("reshard: %s -> %s", a.src, a.dst);
    cli_clean_tool_leftovers(a.dst, "reshard");
    rc = shs_reshard(&r, a.src, a.dst, a.layout, &o);
    memset(key, 0, sizeof key);
    if (rc != SHS_OK) {
        cli_err("%s; nothing written", shs_last_error());
        return CLI_FAIL;
    }
    if (r.blobs_dropped)
        cli_warn("%zu rank-local blobs of ranks >= %d were not carried over", r.blobs_dropped,
                 r.world_size);
    return print_result(&a, &r);
}
