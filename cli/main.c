/*
 * main.c -- `shardsafe <command> [options]`: dispatch to the commands.
 * The reference for every command, option, output and exit status is
 * docs/cli.md.
 */
#include "cli.h"

#include <string.h>

static const char k_help[] =
    "Usage: shardsafe <command> [options]\n"
    "\n"
    "Crash-safe sharded training checkpoints stored as safetensors.\n"
    "\n"
    "Commands:\n"
    "  inspect PATH [--json] [--limit N]\n"
    "                show the headers of a file, a directory or an index, or a\n"
    "                checkpoint step directory\n"
    "  verify PATH... [--check-finite]\n"
    "                validate files completely (header and every data byte), step\n"
    "                directories and save paths (every chunk's checksum)\n"
    "  ls SAVE_PATH [--json]\n"
    "                list the step directories of a save path, the tracker, leftovers\n"
    "  prune SAVE_PATH --keep N [--dry-run]\n"
    "                remove all but the newest N committed steps, and leftovers\n"
    "  convert IN OUT --dtype DTYPE [--only-float] [--align N] [--fsync]\n"
    "                convert floating-point tensors, streaming in bounded memory\n"
    "  diff A B [--atol X] [--rtol X] [--kind model|opt|all] [--json] [--quiet]\n"
    "                compare two files, directories or checkpoints tensor by tensor\n"
    "                on their global values (any chunking or world size)\n"
    "\n"
    "Options:\n"
    "  -h, --help     show this help ('shardsafe COMMAND --help' for a command)\n"
    "  --version      show the version\n"
    "\n"
    "Exit status: 0 success, 1 invalid input or failed operation, 2 usage error.\n";

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
} k_commands[] = {
    { "inspect", cli_cmd_inspect },
    { "verify", cli_cmd_verify },
    { "convert", cli_cmd_convert },
    { "ls", cli_cmd_ls },
    { "prune", cli_cmd_prune },
    { "diff", cli_cmd_diff },
};

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(k_help, stderr);
        return CLI_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
        fputs(k_help, stdout);
        return cli_finish_stdout(CLI_OK);
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("shardsafe %s (libshardsafe %s)\n", SHS_VERSION_STRING, shs_version());
        return cli_finish_stdout(CLI_OK);
    }
    if (strcmp(cmd, "help") == 0) {
        /* `shardsafe help CMD` == `shardsafe CMD --help` */
        if (argc == 2) {
            fputs(k_help, stdout);
            return cli_finish_stdout(CLI_OK);
        }
        for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
            if (strcmp(argv[2], k_commands[i].name) == 0) {
                char *args[] = { argv[2], "--help", NULL };
                return k_commands[i].fn(2, args);
            }
        return cli_usage_err(NULL, "unknown command '%s'", argv[2]);
    }
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        if (strcmp(cmd, k_commands[i].name) == 0)
            return k_commands[i].fn(argc - 1, argv + 1);
    if (cmd[0] == '-')
        return cli_usage_err(NULL, "unknown option '%s'", cmd);
    return cli_usage_err(NULL, "unknown command '%s'", cmd);
}
