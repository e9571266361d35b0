/*
 * cli.h -- private declarations shared by the files of the `shardsafe`
 * command-line tool.  Nothing here is part of the library.
 *
 * Output rules every command follows:
 *   - results go to stdout, diagnostics to stderr as "shardsafe: <message>";
 *   - every string that came from a file (tensor names, metadata, paths,
 *     the library's messages, which quote names) is printed through
 *     cli_put_escaped(), so control characters and invalid UTF-8 never
 *     reach the terminal raw;
 *   - exit status: CLI_OK, CLI_FAIL (invalid input, failed check or
 *     operation), CLI_USAGE (bad command line).
 */
#ifndef SHS_CLI_H
#define SHS_CLI_H

#include "shardsafe.h"

#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

enum {
    CLI_OK = 0,
    CLI_FAIL = 1,
    CLI_USAGE = 2
};
/* diff follows cmp: 0 same, 1 different, 2 trouble (usage, bad input, I/O). */
enum {
    CLI_DIFF_SAME = 0,
    CLI_DIFF_DIFFERENT = 1,
    CLI_DIFF_TROUBLE = 2
};

/* Bytes per read/convert chunk: memory stays O(chunk), never O(tensor). */
#define CLI_CHUNK_BYTES ((size_t)8 << 20)

/* ---- commands (cmd_*.c) ---- */
int cli_cmd_inspect(int argc, char **argv);
int cli_cmd_verify(int argc, char **argv);
int cli_cmd_convert(int argc, char **argv);
int cli_cmd_ls(int argc, char **argv);
/* Before a merge or reshard of `dst` (cmd_ls.c): the leftovers of killed
   runs on it removed by the library and each one said on stderr (a
   warning), as is a temporary output another running process holds.
   Errors are warnings: the run goes on. */
void cli_clean_tool_leftovers(const char *dst, const char *cmd);
int cli_cmd_prune(int argc, char **argv);
int cli_cmd_diff(int argc, char **argv);
int cli_cmd_merge(int argc, char **argv);
int cli_cmd_reshard(int argc, char **argv);

/* ---- output (util.c) ---- */

/* Write `len` bytes of `s` for a terminal: printable ASCII and valid,
   printable UTF-8 as is; backslash as "\\"; \n \r \t as such escapes;
   other control bytes and invalid UTF-8 as \xNN; C1 controls and
   bidirectional/invisible format characters as \u{XXXX}. */
void cli_put_escaped(FILE *f, const char *s, size_t len);
/* The same into a new NUL-terminated string (NULL on out of memory). */
char *cli_escape(const char *s, size_t len);
/* Terminal columns of one code point: 0 for combining marks, 2 for East
   Asian Wide and Fullwidth characters, else 1.  A fixed table, so that the
   result does not depend on the locale (the CLI never calls setlocale). */
int cli_wcwidth(uint32_t cp);
/* Display width of an escaped (hence valid UTF-8) string. */
size_t cli_width(const char *escaped);
/* Print `escaped` and pad it with spaces to `width` columns. */
void cli_put_padded(FILE *f, const char *escaped, size_t width);

/* "shardsafe: <message>\n" on stderr, the message escaped. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "shardsafe: warning: <message>\n" on stderr. */
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Usage error for command `cmd`: message plus a pointer to --help. */
int cli_usage_err(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* vsnprintf into a new string (NULL on out of memory). */
char *cli_vfmt(const char *fmt, va_list ap);
char *cli_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "1.5 GiB" style size into buf. */
const char *cli_human_bytes(char *buf, size_t cap, uint64_t n);
/* Flush stdout; on a write error report it and return CLI_FAIL. */
int cli_finish_stdout(int status);
/* The same, with the status to give on a write error. */
int cli_finish_stdout_or(int status, int write_error_status);

/* Saturating add (totals of hostile inputs must not wrap). */
static inline uint64_t cli_add_sat(uint64_t a, uint64_t b)
{
    uint64_t r;
    return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

/* ---- command-line parsing (util.c) ---- */

/* Options every command takes, set by the parser (one process runs one
   command, so a global is the honest representation). */
typedef struct cli_globals {
    const char *cmd;  /* the command being run, for messages and JSON */
    int quiet;        /* -q: nothing on stdout, no warnings, no progress */
    int verbose;      /* -v: progress notes on stderr (cli_info) */
    int json;         /* --json: one document on stdout */
    int json_printed; /* the command printed its document */
    int usage_error;  /* cli_usage_err was called */
    json_t *errors;   /* --json: every cli_err message, in order */
    json_t *warnings; /* --json: every cli_warn message */
} cli_globals;
extern cli_globals cli_g;

typedef struct cli_optdef {
    const char *name; /* "--limit"; the global options are built in */
    char short_name;  /* 'n' for -n, 0 for none */
    int takes_value;
} cli_optdef;

enum {
    CLI_ARG_POSITIONAL = -1,
    CLI_ARG_END = -2,
    CLI_ARG_EXIT = -3 /* --help/--version printed, or a usage error
                              reported: return p->status */
};

typedef struct cli_parser {
    const char *cmd;
    const char *help; /* printed by -h/--help */
    int argc;
    char **argv;
    int i;
    const char *cluster; /* rest of a "-abc" group of short flags */
    int only_positional; /* after "--" */
    int status;          /* with CLI_ARG_EXIT */
} cli_parser;

void cli_parser_init(cli_parser *p, const char *cmd, const char *help, int argc, char **argv);
/* Next argument: an index into `defs` (its value in *val when it takes
   one: "--opt VALUE", "--opt=VALUE", "-o VALUE", "-oVALUE"), or a CLI_ARG_*
   code (positional: *val is the argument).  The global options -h/--help,
   --version, -q/--quiet, -v/--verbose and --json are handled here. */
int cli_parser_next(cli_parser *p, const cli_optdef *defs, const char **val);
/* Parse a decimal unsigned integer with no sign, spaces or junk. */
int cli_parse_u64(const char *s, uint64_t *out);
/* A target dtype for --dtype: bf16, f16, f32, f64, f8_e4m3, f8_e5m2 in any
   case, or an alias (bfloat16, fp16, half, float32, double...); -1 if not. */
int cli_parse_dtype(const char *s, shs_dtype *out);
/* Edit distance, capped (for "did you mean"). */
size_t cli_edit_distance(const char *a, const char *b);

/* ---- --json (util.c) ---- */

/* A new document {"schema": CLI_JSON_SCHEMA, "command": cli_g.cmd}. */
#define CLI_JSON_SCHEMA 2
json_t *cli_json_new(void);
/* A JSON string of `len` bytes; text that is not UTF-8 (only paths can be)
   is given in the escaped form of cli_escape.  NULL on out of memory. */
json_t *cli_jstr(const char *s, size_t len);
json_t *cli_jstr0(const char *s);
/* Unsigned integer: above INT64_MAX as a decimal string. */
json_t *cli_ju64(uint64_t v);
/* Add "ok" (status == 0), "errors" and "warnings" to `doc`, print it on
   stdout (UTF-8, see cli_json_dump) and release it.  Returns `status`, or
   `oom_status` when the document could not be built or written. */
int cli_json_print(json_t *doc, int status, int oom_status);
/* Dump `doc` with indent 2 as UTF-8 text; C1 controls and the invisible or
   bidirectional format characters that cli_put_escaped shows as \u{..}
   are written as \uXXXX escapes (the same JSON value) so that a document
   printed raw cannot reorder or hide what a terminal shows. */
int cli_json_dump(const json_t *doc, FILE *f);

/* "shardsafe: <message>" on stderr when -v was given. */
void cli_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- progress (util.c) ---- */

/* One \r-updated line on stderr, only when stderr is a terminal and -q was
   not given; cleared by cli_progress_end. */
typedef struct cli_progress {
    int on;
    const char *label;
    uint64_t total, done;
    double start, last; /* monotonic seconds */
    size_t drawn;       /* width of the line on screen */
} cli_progress;
void cli_progress_start(cli_progress *p, const char *label, uint64_t total);
void cli_progress_add(cli_progress *p, uint64_t n);
void cli_progress_end(cli_progress *p);

/* ---- signals and keys of long commands (util.c) ---- */

/* Ctrl-C during a long write (convert, merge): SIGINT, SIGTERM and SIGHUP
   set a flag the command polls between pieces of work, so that its
   temporary output is removed before it dies; signals our parent ignores
   (nohup, a background job) stay ignored. */
typedef struct cli_signals {
    struct sigaction old[3];
    int caught[3];
} cli_signals;
void cli_signals_catch(cli_signals *s);
/* The signal received since cli_signals_catch, or 0. */
int cli_signals_caught(void);
/* Restore the handlers; then, if a signal came, die of it (the calling
   shell sees 130 after Ctrl-C, not a plain exit status). */
void cli_signals_restore(cli_signals *s);

/* The key of an encrypted checkpoint from --key-file FILE or --key-env VAR
   (never the key itself on the command line).  CLI_OK with *has 1 (a key
   in `key`; wipe it after use) or 0 (neither option); else the error is
   printed and the exit status returned: CLI_USAGE for both options,
   CLI_FAIL for a key that cannot be loaded. */
int cli_key_load(const char *cmd, const char *file, const char *env,
                 unsigned char key[SHS_KEY_BYTES], int *has);

/* "3 min ago" style age of `mtime` relative to `now` into buf. */
const char *cli_human_age(char *buf, size_t cap, int64_t mtime, int64_t now);

/* ---- paths, directories and HF indexes (scan.c) ---- */
typedef enum cli_kind {
    CLI_KIND_FILE,
    CLI_KIND_DIR,
    CLI_KIND_INDEX
} cli_kind;

/* Classify a command-line PATH by the library's shs_path_kind: a
   directory, an index, else a safetensors file (including paths that do
   not exist: the library reports those). */
cli_kind cli_classify(const char *path);
/* For a file that belongs to a checkpoint but is none by itself (a
   step's metadata.json or common.json, a save path's tracker): a message
   saying so and what to give `shardsafe <cmd>` instead (caller frees);
   NULL for any other path. */
char *cli_wrong_kind(const char *cmd, const char *path);

/* Open a safetensors file for reading with pread (no mmap: touching mapped
   pages would count the whole file in the resident set, and a file
   truncated under us would raise SIGBUS).  Refuses non-regular files such
   as FIFOs, which would block open().  On failure the message is in
   shs_last_error() or, for the checks made here, in *why (caller frees). */
int cli_open_file(shs_file **out, const char *path, char **why);

/* A list of strings (problems, file names). */
typedef struct cli_strs {
    char **v;
    size_t n, cap;
} cli_strs;
int cli_strs_add(cli_strs *s, char *owned); /* takes ownership */
int cli_strs_addf(cli_strs *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cli_strs_sort(cli_strs *s);
void cli_strs_release(cli_strs *s);

/* The *.safetensors files (regular files or symlinks to them, names not
   starting with '.') and *.safetensors.index.json files of a directory,
   each sorted bytewise.  Entries are full paths "dir/name". */
int cli_list_dir(const char *dir, cli_strs *files, cli_strs *indexes);

/* A model.safetensors.index.json, read by the library (shs_hf_index). */
typedef struct cli_index {
    char *path;
    char *dir;
    shs_hf_index *ix;
    cli_strs shards;      /* distinct file names, sorted */
    cli_strs shard_paths; /* dir/shard for each */
    uint64_t shard_bytes; /* sum of tensor bytes of the shards seen */
    int shard_bytes_valid;
} cli_index;

/* Load and validate the schema of an index.  Fatal problems (unreadable,
   not JSON, no weight_map) return CLI_FAIL with the reason in `problems`;
   per-entry problems (bad file names, non-string values) are added to
   `problems`, the entry is skipped and CLI_OK is returned.  Release the
   index in either case. */
int cli_index_load(cli_index *ix, const char *path, cli_strs *problems);
/* Cross-check shard number `k` against the weight_map.  `f` is the open
   shard, or NULL when it could not be opened (`why` then says why). */
void cli_index_check_shard(cli_index *ix, size_t k, const shs_file *f, const char *why,
                           cli_strs *problems);
/* After all shards: compare metadata.total_size (a warning only). */
void cli_index_finish(cli_index *ix, cli_strs *warnings);
void cli_index_release(cli_index *ix);
/* Entries of its weight_map. */
size_t cli_index_tensor_count(const cli_index *ix);
/* Its "metadata" object re-parsed for output (caller decrefs), or NULL. */
json_t *cli_index_metadata(const cli_index *ix);

/* Walking a command-line PATH.  `file` is called for every file to
   process: `f` is the open file, or NULL with the reason in `why`.  For
   an index (given, or found in a directory), `index_done` is called after
   its shards with every problem found (none: the index is consistent).
   Shards that a directory listing already covered are only re-read for
   their headers, not passed to `file` again. */
typedef struct cli_walk_ops {
    void (*file)(void *ctx, const char *path, shs_file *f, const char *why);
    /* optional: an index loaded without fatal problems, before its shards */
    void (*index_begin)(void *ctx, const cli_index *ix);
    void (*index_done)(void *ctx, const cli_index *ix, const cli_strs *problems,
                       const cli_strs *warnings);
} cli_walk_ops;

/* CLI_OK, or CLI_FAIL when PATH could not be walked at all (an unreadable
   directory, or one without safetensors files), already reported. */
int cli_walk(const char *path, const cli_walk_ops *ops, void *ctx);
/* The library's message for a failure to open `path`, without a leading
   "<path>: " (the caller prints the path). */
const char *cli_strip_path(const char *msg, const char *path);

/* ---- save paths and step directories (ckpt.c) ---- */
#define CLI_TRACKER "latest_checkpointed_iteration.txt"

/* A step directory as the library decides (shs_path_kind), damaged ones
   (no metadata.json) included. */
int cli_is_step_dir(const char *path);
/* What is wrong with step directory `dir` without reading tensor data
   (the library's open and shs_checkpoint_check_files); NULL when nothing
   is (or out of memory).  Free it. */
char *cli_step_problem(const char *dir);
/* A save path, as the library decides (shs_path_kind). */
int cli_is_save_path(const char *path);

/* One entry of a save path: a step directory or a leftover. */
typedef struct cli_entry {
    char *name;      /* entry name */
    char *path;      /* save_path/name */
    int64_t step;    /* -1 for leftovers; an export's step */
    int committed;   /* a complete step directory (the library's reading) */
    int parked;      /* a re-save's parked copy that is its step's directory */
    char *problem;   /* ls: cli_step_problem of a step directory, or NULL */
    int latest;      /* the committed directory the tracker names */
    uint64_t bytes;  /* sum of the sizes of its files (recursive) */
    uint64_t files;  /* number of files */
    uint64_t shared; /* files with a link count > 1 */
    int64_t mtime;   /* of the entry itself (seconds since the epoch) */
} cli_entry;

enum {
    CLI_TRACKER_OK,
    CLI_TRACKER_MISSING,
    CLI_TRACKER_MALFORMED
};

typedef struct cli_save {
    const char *path;
    cli_entry *steps; /* sorted by step, then name */
    size_t n_steps;
    cli_entry *leftovers; /* sorted by name */
    size_t n_leftovers;
    cli_entry *exports; /* hf-<step dir> (SHS_ENTRY_EXPORT), sorted by name;
                           never pruned */
    size_t n_exports;
    int tracker;          /* CLI_TRACKER_* */
    int64_t tracker_step; /* when CLI_TRACKER_OK */
    char tracker_why[512];
    cli_entry *latest; /* NULL: no committed directory of tracker_step */
} cli_save;

/* Sizes of the files under a path (recursive, links not followed). */
void cli_du(const char *path, uint64_t *bytes, uint64_t *files, uint64_t *shared);
/* List a save path (CLI_FAIL, reported, when it cannot be read): the
   library's reading of it (shs_savepath_open) and the sizes. */
int cli_save_scan(cli_save *s, const char *path);
/* Whether the library lists `step` as committed. */
int cli_save_has_step(const cli_save *s, int64_t step);
/* The tracker problem as a message (caller frees), or NULL when the
   tracker names a committed step directory. */
char *cli_save_tracker_problem(const cli_save *s);
void cli_save_release(cli_save *s);

/* `inspect STEP_DIR` (cmd_inspect.c calls it for a step directory). */
int cli_inspect_checkpoint(const char *dir, int json);

#endif
