/*
 * main.c -- `shardsafe <command> [options]`: dispatch to the commands.
 * The reference for every command, option, output and exit status is
 * docs/cli.md.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static const char k_help[] =
    "Usage: shardsafe <command> [options]\n"
    "\n"
    "Crash-safe sharded training checkpoints stored as safetensors.\n"
    "\n"
    "Commands:\n"
    "  inspect PATH [--limit N]\n"
    "                show the headers of a file, a directory or an index, or a\n"
    "                checkpoint step directory\n"
    "  verify PATH... [--check-finite]\n"
    "                validate files completely (header and every data byte), step\n"
    "                directories and save paths (every chunk's checksum)\n"
    "  ls SAVE_PATH  list the step directories of a save path, the tracker, leftovers\n"
    "  prune SAVE_PATH --keep N [--dry-run]\n"
    "                remove all but the newest N committed steps, and leftovers\n"
    "  convert IN OUT|- --dtype DTYPE [--only-float] [--align N] [--fsync]\n"
    "                convert floating-point tensors, streaming in bounded memory\n"
    "  diff A B [--atol X] [--rtol X] [--kind model|opt|all]\n"
    "                compare two files, directories or checkpoints tensor by tensor\n"
    "                on their global values (any chunking or world size)\n"
    "  merge SRC DST [--max-shard-size S] [--dtype T] [--include GLOB] [--jobs N]\n"
    "                complete tensors of a checkpoint in the Hugging Face layout\n"
    "  reshard SRC DST [--layout FILE.json] [--world-size N]\n"
    "                rewrite a checkpoint for a target layout or world size\n"
    "\n"
    "Options of every command (before or after it):\n"
    "  -h, --help     show this help ('shardsafe COMMAND --help' for a command)\n"
    "  --version      show the version\n"
    "  -q, --quiet    print nothing on stdout, no warnings, no progress line;\n"
    "                 errors still go to stderr and the exit status tells\n"
    "  -v, --verbose  say on stderr what is being done\n"
    "  --json         print one JSON document on stdout (schema 1, docs/cli.md)\n"
    "Short flags combine (-qv), values go as --opt=VALUE or --opt VALUE, and\n"
    "'--' ends the options.\n"
    "\n"
    "Exit status: 0 success, 1 invalid input or failed operation, 2 usage error.\n"
    "diff, like cmp: 0 same, 1 different, 2 trouble (usage, bad input, I/O error).\n";

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
} k_commands[] = {
    { "inspect", cli_cmd_inspect }, { "verify", cli_cmd_verify },   { "convert", cli_cmd_convert },
    { "ls", cli_cmd_ls },           { "prune", cli_cmd_prune },     { "diff", cli_cmd_diff },
    { "merge", cli_cmd_merge },     { "reshard", cli_cmd_reshard },
};
#define N_COMMANDS (sizeof k_commands / sizeof k_commands[0])

static int find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(name, k_commands[i].name) == 0)
            return (int)i;
    return -1;
}

static int unknown_command(const char *name)
{
    size_t best_d = (size_t)-1;
    const char *best = NULL;
    for (size_t i = 0; i < N_COMMANDS; i++) {
        size_t d = cli_edit_distance(name, k_commands[i].name);
        if (d < best_d) {
            best_d = d;
            best = k_commands[i].name;
        }
    }
    if (best && best_d <= 2)
        return cli_usage_err(NULL, "unknown command '%s' (did you mean '%s'?)", name, best);
    return cli_usage_err(NULL, "unknown command '%s'", name);
}

static int run(int argc, char **argv)
{
    cli_parser p;
    const char *cmd = NULL;
    int k;
    if (argc < 2) {
        fputs(k_help, stderr);
        return CLI_USAGE;
    }
    /* global options before the command */
    cli_parser_init(&p, NULL, k_help, argc, argv);
    while (!cmd && (k = cli_parser_next(&p, NULL, &cmd)) != CLI_ARG_END)
        if (k == CLI_ARG_EXIT)
            return p.status;
    if (!cmd)
        return cli_usage_err(NULL, "missing command");
    int at = p.i - 1; /* argv[at] is the command: its argv[0] */
    if (strcmp(cmd, "help") == 0) {
        /* `shardsafe help CMD` == `shardsafe CMD --help` */
        if (at + 1 >= argc) {
            fputs(k_help, stdout);
            return cli_finish_stdout(CLI_OK);
        }
        int c = find_command(argv[at + 1]);
        if (c < 0)
            return unknown_command(argv[at + 1]);
        char *args[] = { argv[at + 1], "--help", NULL };
        cli_g.cmd = k_commands[c].name;
        return k_commands[c].fn(2, args);
    }
    int c = find_command(cmd);
    if (c < 0)
        return unknown_command(cmd);
    cli_g.cmd = k_commands[c].name;
    int rc = k_commands[c].fn(argc - at, argv + at);
    /* --json promises a document: give one for failures that happened
       before the command could build its own (usage errors excepted) */
    if (cli_g.json && !cli_g.json_printed && !cli_g.usage_error)
        rc = cli_json_print(cli_json_new(), rc, rc);
    return rc;
}

int main(int argc, char **argv)
{
    int rc = run(argc, argv);
    json_decref(cli_g.errors);
    json_decref(cli_g.warnings);
    return rc;
}
