/* util.c -- output escaping and display width, messages, option parsing,
   --json documents and the progress line of the CLI. */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* Escaping                                                           */
/* ------------------------------------------------------------------ */

/* Decode one UTF-8 sequence (RFC 3629: no overlongs, no surrogates,
   <= U+10FFFF).  Returns its length, or 0 if invalid. */
static size_t utf8_decode(const unsigned char *s, size_t len, uint32_t *cp)
{
    unsigned char c = s[0];
    size_t n;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        v = c & 0x1F;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        v = c & 0x0F;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        v = c & 0x07;
        min = 0x10000;
    } else {
        return 0;
    }
    if (len < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return n;
}

/* Code points that are valid text but would let a name hide or reorder
   what the terminal shows: C1 controls, bidi controls, invisible format
   characters, line/paragraph separators, BOM, interlinear annotations. */
static int cp_is_sneaky(uint32_t cp)
{
    return (cp >= 0x80 && cp <= 0x9F) || cp == 0xAD || cp == 0x061C ||
           (cp >= 0x200B && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202E) ||
           (cp >= 0x2060 && cp <= 0x206F) || cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB);
}

typedef void (*sink_fn)(void *ctx, const char *s, size_t n);

static void escape_to(sink_fn sink, void *ctx, const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t run = 0, i = 0;
    char esc[16];
    while (i < len) {
        unsigned char c = s[i];
        size_t n = 1;
        int e = 0;
        if (c >= 0x20 && c < 0x7F && c != '\\') {
            i++;
            continue;
        }
        if (c == '\\') {
            memcpy(esc, "\\\\", 3);
            e = 1;
        } else if (c == '\n' || c == '\r' || c == '\t') {
            esc[0] = '\\';
            esc[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
            esc[2] = '\0';
            e = 1;
        } else if (c < 0x80) {
            snprintf(esc, sizeof esc, "\\x%02X", c);
            e = 1;
        } else {
            uint32_t cp;
            n = utf8_decode(s + i, len - i, &cp);
            if (n == 0) {
                n = 1;
                snprintf(esc, sizeof esc, "\\x%02X", c);
                e = 1;
            } else if (cp_is_sneaky(cp)) {
                snprintf(esc, sizeof esc, "\\u{%04X}", (unsigned)cp);
                e = 1;
            }
        }
        if (e) {
            if (i > run)
                sink(ctx, str + run, i - run);
            sink(ctx, esc, strlen(esc));
            i += n;
            run = i;
        } else {
            i += n;
        }
    }
    if (len > run)
        sink(ctx, str + run, len - run);
}

static void file_sink(void *ctx, const char *s, size_t n)
{
    fwrite(s, 1, n, (FILE *)ctx);
}

void cli_put_escaped(FILE *f, const char *s, size_t len)
{
    escape_to(file_sink, f, s, len);
}

typedef struct strbuf {
    char *p;
    size_t len, cap;
    int oom;
} strbuf;

static void buf_sink(void *ctx, const char *s, size_t n)
{
    strbuf *b = ctx;
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

char *cli_escape(const char *s, size_t len)
{
    strbuf b = { NULL, 0, 0, 0 };
    buf_sink(&b, "", 0);
    escape_to(buf_sink, &b, s, len);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* Sorted, non-overlapping [lo, hi] ranges. */
typedef struct cp_range {
    uint32_t lo, hi;
} cp_range;

/* Combining marks and other zero-width characters (Unicode Mn/Me and the
   Hangul medial vowels and final consonants) in the blocks that occur in
   names; not every Mn of every script, which would need Unicode's tables. */
static const cp_range k_zero_width[] = {
    { 0x0300, 0x036F }, { 0x0483, 0x0489 }, { 0x0591, 0x05BD }, { 0x05BF, 0x05BF },
    { 0x05C1, 0x05C2 }, { 0x05C4, 0x05C5 }, { 0x05C7, 0x05C7 }, { 0x0610, 0x061A },
    { 0x064B, 0x065F }, { 0x0670, 0x0670 }, { 0x06D6, 0x06DC }, { 0x06DF, 0x06E4 },
    { 0x06E7, 0x06E8 }, { 0x06EA, 0x06ED }, { 0x0900, 0x0902 }, { 0x093A, 0x093A },
    { 0x093C, 0x093C }, { 0x0941, 0x0948 }, { 0x094D, 0x094D }, { 0x0951, 0x0957 },
    { 0x0962, 0x0963 }, { 0x0E31, 0x0E31 }, { 0x0E34, 0x0E3A }, { 0x0E47, 0x0E4E },
    { 0x1160, 0x11FF }, { 0x1AB0, 0x1AFF }, { 0x1DC0, 0x1DFF }, { 0x200B, 0x200F },
    { 0x20D0, 0x20FF }, { 0x302A, 0x302D }, { 0x3099, 0x309A }, { 0xD7B0, 0xD7FF },
    { 0xFE00, 0xFE0F }, { 0xFE20, 0xFE2F }, { 0xFEFF, 0xFEFF }, { 0xE0100, 0xE01EF },
};

/* East Asian Wide (W) and Fullwidth (F): CJK, Hangul, kana, fullwidth
   forms, and the emoji blocks that terminals draw two columns wide. */
static const cp_range k_wide[] = {
    { 0x1100, 0x115F },   { 0x231A, 0x231B },   { 0x2329, 0x232A },   { 0x23E9, 0x23EC },
    { 0x23F0, 0x23F0 },   { 0x23F3, 0x23F3 },   { 0x25FD, 0x25FE },   { 0x2614, 0x2615 },
    { 0x2648, 0x2653 },   { 0x26AA, 0x26AB },   { 0x26BD, 0x26BE },   { 0x26C4, 0x26C5 },
    { 0x26D4, 0x26D4 },   { 0x26EA, 0x26EA },   { 0x26F2, 0x26F5 },   { 0x26FA, 0x26FD },
    { 0x2705, 0x2705 },   { 0x270A, 0x270B },   { 0x2728, 0x2728 },   { 0x274C, 0x274C },
    { 0x2753, 0x2755 },   { 0x2757, 0x2757 },   { 0x2795, 0x2797 },   { 0x27B0, 0x27B0 },
    { 0x27BF, 0x27BF },   { 0x2B1B, 0x2B1C },   { 0x2B50, 0x2B50 },   { 0x2B55, 0x2B55 },
    { 0x2E80, 0x3029 },   { 0x302E, 0x303E },   { 0x3041, 0x3098 },   { 0x309B, 0x33FF },
    { 0x3400, 0x4DBF },   { 0x4E00, 0x9FFF },   { 0xA000, 0xA4CF },   { 0xA960, 0xA97F },
    { 0xAC00, 0xD7A3 },   { 0xF900, 0xFAFF },   { 0xFE10, 0xFE19 },   { 0xFE30, 0xFE6F },
    { 0xFF00, 0xFF60 },   { 0xFFE0, 0xFFE6 },   { 0x16FE0, 0x16FE4 }, { 0x17000, 0x18CFF },
    { 0x1B000, 0x1B2FF }, { 0x1F004, 0x1F004 }, { 0x1F0CF, 0x1F0CF }, { 0x1F18E, 0x1F18E },
    { 0x1F191, 0x1F19A }, { 0x1F200, 0x1F202 }, { 0x1F210, 0x1F23B }, { 0x1F240, 0x1F248 },
    { 0x1F250, 0x1F251 }, { 0x1F260, 0x1F265 }, { 0x1F300, 0x1F320 }, { 0x1F32D, 0x1F335 },
    { 0x1F337, 0x1F37C }, { 0x1F37E, 0x1F393 }, { 0x1F3A0, 0x1F3CA }, { 0x1F3CF, 0x1F3D3 },
    { 0x1F3E0, 0x1F3F0 }, { 0x1F3F4, 0x1F3F4 }, { 0x1F3F8, 0x1F43E }, { 0x1F440, 0x1F440 },
    { 0x1F442, 0x1F4FC }, { 0x1F4FF, 0x1F53D }, { 0x1F54B, 0x1F54E }, { 0x1F550, 0x1F567 },
    { 0x1F57A, 0x1F57A }, { 0x1F595, 0x1F596 }, { 0x1F5A4, 0x1F5A4 }, { 0x1F5FB, 0x1F64F },
    { 0x1F680, 0x1F6C5 }, { 0x1F6CC, 0x1F6CC }, { 0x1F6D0, 0x1F6D2 }, { 0x1F6D5, 0x1F6D7 },
    { 0x1F6EB, 0x1F6EC }, { 0x1F6F4, 0x1F6FC }, { 0x1F7E0, 0x1F7EB }, { 0x1F90C, 0x1F93A },
    { 0x1F93C, 0x1F945 }, { 0x1F947, 0x1F9FF }, { 0x1FA70, 0x1FAFF }, { 0x20000, 0x2FFFD },
    { 0x30000, 0x3FFFD },
};

static int in_ranges(uint32_t cp, const cp_range *r, size_t n)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid].lo)
            hi = mid;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

int cli_wcwidth(uint32_t cp)
{
    if (cp < 0x300)
        return 1;
    if (in_ranges(cp, k_zero_width, sizeof k_zero_width / sizeof k_zero_width[0]))
        return 0;
    if (in_ranges(cp, k_wide, sizeof k_wide / sizeof k_wide[0]))
        return 2;
    return 1;
}

size_t cli_width(const char *s)
{
    size_t w = 0, len = strlen(s), i = 0;
    while (i < len) {
        uint32_t cp;
        size_t n = utf8_decode((const unsigned char *)s + i, len - i, &cp);
        if (n == 0) { /* not escaped text: count the byte as one column */
            w++;
            i++;
            continue;
        }
        w += (size_t)cli_wcwidth(cp);
        i += n;
    }
    return w;
}

void cli_put_padded(FILE *f, const char *escaped, size_t width)
{
    fputs(escaped, f);
    for (size_t w = cli_width(escaped); w < width; w++)
        fputc(' ', f);
}

/* ------------------------------------------------------------------ */
/* Messages                                                           */
/* ------------------------------------------------------------------ */

char *cli_vfmt(const char *fmt, va_list ap)
{
    va_list aq;
    va_copy(aq, ap);
    int n = vsnprintf(NULL, 0, fmt, aq);
    va_end(aq);
    if (n < 0)
        return NULL;
    char *s = malloc((size_t)n + 1);
    if (s)
        vsnprintf(s, (size_t)n + 1, fmt, ap);
    return s;
}

char *cli_fmt(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = cli_vfmt(fmt, ap);
    va_end(ap);
    return s;
}

cli_globals cli_g;

/* --json: keep the message for the document's "errors"/"warnings". */
static void record(json_t **list, const char *msg)
{
    if (!cli_g.json || !msg)
        return;
    if (!*list)
        *list = json_array();
    if (*list)
        json_array_append_new(*list, cli_jstr0(msg));
}

static void vreport(const char *prefix, json_t **list, const char *fmt, va_list ap)
{
    char *msg = cli_vfmt(fmt, ap);
    fflush(stdout); /* keep stdout and stderr in order on a terminal */
    fputs(prefix, stderr);
    if (msg)
        cli_put_escaped(stderr, msg, strlen(msg));
    else
        fputs("out of memory formatting a message", stderr);
    fputc('\n', stderr);
    if (list)
        record(list, msg ? msg : "out of memory formatting a message");
    free(msg);
}

void cli_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport("shardsafe: ", &cli_g.errors, fmt, ap);
    va_end(ap);
}

void cli_warn(const char *fmt, ...)
{
    va_list ap;
    if (cli_g.quiet)
        return;
    va_start(ap, fmt);
    vreport("shardsafe: warning: ", &cli_g.warnings, fmt, ap);
    va_end(ap);
}

void cli_info(const char *fmt, ...)
{
    va_list ap;
    if (!cli_g.verbose)
        return;
    va_start(ap, fmt);
    vreport("shardsafe: ", NULL, fmt, ap);
    va_end(ap);
}

int cli_usage_err(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *msg = cli_vfmt(fmt, ap);
    va_end(ap);
    cli_g.usage_error = 1;
    if (cmd)
        cli_err("%s: %s (see 'shardsafe %s --help')", cmd, msg ? msg : "usage error", cmd);
    else
        cli_err("%s (see 'shardsafe --help')", msg ? msg : "usage error");
    free(msg);
    return CLI_USAGE;
}

const char *cli_human_bytes(char *buf, size_t cap, uint64_t n)
{
    static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
    if (n < 1024) {
        snprintf(buf, cap, "%llu B", (unsigned long long)n);
        return buf;
    }
    double v = (double)n;
    int u = 0;
    while (v >= 1024.0 && u < 6) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, cap, "%.1f %s", v, units[u]);
    return buf;
}

int cli_finish_stdout_or(int status, int write_error_status)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_err("error writing to standard output: %s", strerror(errno));
        return status == CLI_OK ? write_error_status
                                : (status > write_error_status ? status : write_error_status);
    }
    return status;
}

int cli_finish_stdout(int status)
{
    return cli_finish_stdout_or(status, CLI_FAIL);
}

const char *cli_human_age(char *buf, size_t cap, int64_t mtime, int64_t now)
{
    if (mtime > now) {
        snprintf(buf, cap, "in the future");
        return buf;
    }
    uint64_t d = (uint64_t)(now - mtime);
    if (d < 60)
        snprintf(buf, cap, "%llu s ago", (unsigned long long)d);
    else if (d < 3600)
        snprintf(buf, cap, "%llu min ago", (unsigned long long)(d / 60));
    else if (d < 48 * 3600)
        snprintf(buf, cap, "%llu h ago", (unsigned long long)(d / 3600));
    else
        snprintf(buf, cap, "%llu days ago", (unsigned long long)(d / 86400));
    return buf;
}

/* ------------------------------------------------------------------ */
/* Option parsing                                                     */
/* ------------------------------------------------------------------ */

/*
 * Why our own parser rather than getopt_long: getopt_long accepts any
 * unambiguous prefix of a long option (`--dt` for `--dtype`), so a script
 * written today breaks when an option with the same prefix is added;
 * GNU getopt permutes argv and keeps its state in globals (optind,
 * optarg); its messages have their own format, without "did you mean"
 * or our "see 'shardsafe CMD --help'" hint; and `--flag=value` for a flag
 * and the global options would need the same glue code anyway.  A table
 * of exact names is about as long as the getopt_long option array.
 */

enum {
    G_HELP,
    G_VERSION,
    G_QUIET,
    G_VERBOSE,
    G_JSON
};
static const cli_optdef k_global[] = {
    { "--help", 'h', 0 },    { "--version", 0, 0 }, { "--quiet", 'q', 0 },
    { "--verbose", 'v', 0 }, { "--json", 0, 0 },    { NULL, 0, 0 },
};

void cli_parser_init(cli_parser *p, const char *cmd, const char *help, int argc, char **argv)
{
    memset(p, 0, sizeof *p);
    p->cmd = cmd;
    p->help = help;
    p->argc = argc;
    p->argv = argv;
    p->i = 1;
}

/* Optimal string alignment distance: insertions, deletions, substitutions
   and transpositions of neighbours ("--jsno" is one edit from "--json"). */
size_t cli_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t r0[64], r1[64], r2[64]; /* rows i-2, i-1, i */
    size_t *pp = r0, *prev = r1, *cur = r2;
    if (la >= 63 || lb >= 63)
        return 64;
    for (size_t j = 0; j <= lb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t best = prev[j - 1] + (a[i - 1] != b[j - 1]);
            if (prev[j] + 1 < best)
                best = prev[j] + 1;
            if (cur[j - 1] + 1 < best)
                best = cur[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                pp[j - 2] + 1 < best)
                best = pp[j - 2] + 1;
            cur[j] = best;
        }
        size_t *t = pp;
        pp = prev;
        prev = cur;
        cur = t;
    }
    return prev[lb];
}

/* The known long option nearest to `name`, or NULL when none is close. */
static const char *suggest(const char *name, size_t nlen, const cli_optdef *defs)
{
    char buf[64];
    if (nlen >= sizeof buf)
        return NULL;
    memcpy(buf, name, nlen);
    buf[nlen] = '\0';
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    const cli_optdef *tabs[2] = { k_global, defs };
    for (int t = 0; t < 2; t++)
        for (int k = 0; tabs[t] && tabs[t][k].name; k++) {
            size_t d = cli_edit_distance(buf, tabs[t][k].name);
            if (d < best_d) {
                best_d = d;
                best = tabs[t][k].name;
            }
        }
    /* a typo (one edit, more in long names), not another word: "--keep"
       must not suggest "--help" */
    size_t body = nlen > 2 ? nlen - 2 : 0;
    size_t limit = 1 + (body >= 8) + (body >= 14);
    return best_d <= limit ? best : NULL;
}

static int usage_exit(cli_parser *p)
{
    p->status = CLI_USAGE;
    return CLI_ARG_EXIT;
}

static int unknown_option(cli_parser *p, const char *a, size_t nlen, const cli_optdef *defs)
{
    const char *s = a[1] == '-' ? suggest(a, nlen, defs) : NULL;
    if (s)
        cli_usage_err(p->cmd, "unknown option '%.*s' (did you mean '%s'?)", (int)nlen, a, s);
    else
        cli_usage_err(p->cmd, "unknown option '%.*s'", (int)nlen, a);
    return usage_exit(p);
}

/* A global option: CLI_ARG_EXIT for --help/--version, else 0 (handled). */
static int global_option(cli_parser *p, int g)
{
    switch (g) {
    case G_HELP:
        fputs(p->help ? p->help : "", stdout);
        p->status = cli_finish_stdout(CLI_OK);
        cli_g.json = 0; /* no document after a help text */
        return CLI_ARG_EXIT;
    case G_VERSION:
        printf("shardsafe %s\n", shs_version());
        p->status = cli_finish_stdout(CLI_OK);
        cli_g.json = 0;
        return CLI_ARG_EXIT;
    case G_QUIET: /* the last of -q and -v counts */
        cli_g.quiet = 1;
        cli_g.verbose = 0;
        return 0;
    case G_VERBOSE:
        cli_g.verbose = 1;
        cli_g.quiet = 0;
        return 0;
    default: cli_g.json = 1; return 0;
    }
}

/* Take the value of option `name`: the rest of the argument, else the
   next argument. */
static int take_value(cli_parser *p, const char *inline_val, const char *name, const char **val)
{
    if (inline_val) {
        *val = inline_val;
    } else if (p->i < p->argc) {
        *val = p->argv[p->i++];
    } else {
        cli_usage_err(p->cmd, "option '%s' needs a value", name);
        return -1;
    }
    return 0;
}

static int short_option(cli_parser *p, const cli_optdef *defs, const char **val)
{
    char c = *p->cluster++;
    for (int g = 0; k_global[g].name; g++)
        if (k_global[g].short_name && k_global[g].short_name == c) {
            int r = global_option(p, g);
            if (r == CLI_ARG_EXIT)
                return r;
            return cli_parser_next(p, defs, val);
        }
    for (int k = 0; defs && defs[k].name; k++) {
        if (defs[k].short_name != c)
            continue;
        if (defs[k].takes_value) {
            const char *rest = *p->cluster ? p->cluster : NULL;
            p->cluster = NULL;
            char nm[3] = { '-', c, '\0' };
            if (take_value(p, rest, nm, val) < 0)
                return usage_exit(p);
        }
        return k;
    }
    char nm[3] = { '-', c, '\0' };
    p->cluster = NULL;
    return unknown_option(p, nm, 2, defs);
}

int cli_parser_next(cli_parser *p, const cli_optdef *defs, const char **val)
{
    *val = NULL;
    if (p->cluster && *p->cluster)
        return short_option(p, defs, val);
    p->cluster = NULL;
    if (p->i >= p->argc) {
        if (cli_g.json && cli_g.quiet) {
            cli_g.json = 0;
            cli_usage_err(p->cmd, "--json and --quiet exclude each other");
            return usage_exit(p);
        }
        return CLI_ARG_END;
    }
    const char *a = p->argv[p->i++];
    if (p->only_positional || a[0] != '-' || a[1] == '\0') {
        *val = a;
        return CLI_ARG_POSITIONAL;
    }
    if (strcmp(a, "--") == 0) {
        p->only_positional = 1;
        return cli_parser_next(p, defs, val);
    }
    if (a[1] != '-') {
        p->cluster = a + 1;
        return short_option(p, defs, val);
    }
    const char *eq = strchr(a, '=');
    size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
    const cli_optdef *tabs[2] = { defs, k_global };
    for (int t = 0; t < 2; t++)
        for (int k = 0; tabs[t] && tabs[t][k].name; k++) {
            const cli_optdef *d = &tabs[t][k];
            if (strlen(d->name) != nlen || memcmp(d->name, a, nlen) != 0)
                continue;
            if (!d->takes_value && eq) {
                cli_usage_err(p->cmd, "option '%s' takes no value", d->name);
                return usage_exit(p);
            }
            if (t == 1) {
                int r = global_option(p, k);
                return r == CLI_ARG_EXIT ? r : cli_parser_next(p, defs, val);
            }
            if (d->takes_value && take_value(p, eq ? eq + 1 : NULL, d->name, val) < 0)
                return usage_exit(p);
            return k;
        }
    return unknown_option(p, a, nlen, defs);
}

int cli_parse_u64(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

/* ------------------------------------------------------------------ */
/* --json                                                             */
/* ------------------------------------------------------------------ */

json_t *cli_jstr(const char *s, size_t len)
{
    json_t *j = json_stringn(s, len);
    if (!j) {
        char *e = cli_escape(s, len);
        j = e ? json_string(e) : NULL;
        free(e);
    }
    return j;
}

json_t *cli_jstr0(const char *s)
{
    return cli_jstr(s, strlen(s));
}

json_t *cli_ju64(uint64_t v)
{
    if (v <= (uint64_t)INT64_MAX)
        return json_integer((json_int_t)v);
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    return json_string(buf);
}

json_t *cli_json_new(void)
{
    json_t *doc = json_object();
    if (doc && (json_object_set_new(doc, "schema", json_integer(CLI_JSON_SCHEMA)) < 0 ||
                json_object_set_new(doc, "command", json_string(cli_g.cmd ? cli_g.cmd : "")) < 0)) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}

int cli_json_dump(const json_t *doc, FILE *f)
{
    char *text = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    if (!text)
        return -1;
    const unsigned char *s = (const unsigned char *)text;
    size_t len = strlen(text), i = 0, run = 0;
    while (i < len) {
        uint32_t cp;
        size_t n = s[i] < 0x80 ? 1 : utf8_decode(s + i, len - i, &cp);
        if (n > 1 && cp_is_sneaky(cp)) {
            /* only inside strings: JSON's structure is ASCII */
            fwrite(text + run, 1, i - run, f);
            fprintf(f, "\\u%04X", (unsigned)cp);
            run = i + n;
        }
        i += n ? n : 1;
    }
    fwrite(text + run, 1, len - run, f);
    fputc('\n', f);
    free(text);
    return ferror(f) ? -1 : 0;
}

int cli_json_print(json_t *doc, int status, int oom_status)
{
    cli_g.json_printed = 1;
    json_t *errs = cli_g.errors ? json_incref(cli_g.errors) : json_array();
    json_t *warns = cli_g.warnings ? json_incref(cli_g.warnings) : json_array();
    int bad = 1;
    if (doc) {
        /* each set_new takes its reference, also when it fails */
        bad = json_object_set_new(doc, "ok", json_boolean(status == CLI_OK)) < 0;
        bad |= json_object_set_new(doc, "errors", errs) < 0;
        bad |= json_object_set_new(doc, "warnings", warns) < 0;
    } else {
        json_decref(errs);
        json_decref(warns);
    }
    if (bad || cli_json_dump(doc, stdout) < 0) {
        cli_err("%s: out of memory building the JSON output", cli_g.cmd ? cli_g.cmd : "json");
        status = oom_status;
    }
    json_decref(doc);
    return status;
}

/* ------------------------------------------------------------------ */
/* Progress                                                           */
/* ------------------------------------------------------------------ */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void cli_progress_start(cli_progress *p, const char *label, uint64_t total)
{
    memset(p, 0, sizeof *p);
    p->on = !cli_g.quiet && isatty(STDERR_FILENO);
    p->label = label;
    p->total = total;
    p->start = now_s();
    p->last = -1;
}

static void progress_draw(cli_progress *p, double t)
{
    char line[160], hd[32], ht[32], hr[32];
    int n = snprintf(line, sizeof line, "%s: %s of %s", p->label,
                     cli_human_bytes(hd, sizeof hd, p->done),
                     cli_human_bytes(ht, sizeof ht, p->total));
    if (n > 0 && (size_t)n < sizeof line && p->total)
        n += snprintf(line + n, sizeof line - (size_t)n, " (%u%%)",
                      (unsigned)(p->done >= p->total ? 100 : p->done * 100.0 / p->total));
    if (n > 0 && (size_t)n < sizeof line && t - p->start > 0.05)
        n += snprintf(line + n, sizeof line - (size_t)n, ", %s/s",
                      cli_human_bytes(hr, sizeof hr, (uint64_t)((double)p->done / (t - p->start))));
    size_t w = n > 0 ? strlen(line) : 0;
    /* a wrapped line cannot be rewritten with \r: stay inside the terminal */
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 && w >= ws.ws_col) {
        w = (size_t)ws.ws_col - 1;
        line[w] = '\0';
    }
    fputc('\r', stderr);
    fputs(line, stderr);
    for (size_t i = w; i < p->drawn; i++)
        fputc(' ', stderr);
    fflush(stderr);
    p->drawn = w > p->drawn ? w : p->drawn;
    p->last = t;
}

void cli_progress_add(cli_progress *p, uint64_t n)
{
    p->done = cli_add_sat(p->done, n);
    if (!p->on)
        return;
    double t = now_s();
    /* the first update at once (short jobs show it too), then 10 per second */
    if (p->last < 0 || t - p->last >= 0.1)
        progress_draw(p, t);
}

void cli_progress_end(cli_progress *p)
{
    if (p->on && p->drawn) {
        fputc('\r', stderr);
        for (size_t i = 0; i < p->drawn; i++)
            fputc(' ', stderr);
        fputc('\r', stderr);
        fflush(stderr);
    }
    p->drawn = 0;
    p->on = 0;
}

/* ---- dtype names on the command line ---- */

int cli_parse_dtype(const char *s, shs_dtype *out)
{
    /* the library's table (the export_dtype key uses it too) */
    if (shs_dtype_parse_alias(out, s) == SHS_OK)
        return 0;
    return -1;
}

/* ------------------------------------------------------------------ */
/* Signals and keys                                                   */
/* ------------------------------------------------------------------ */

static volatile sig_atomic_t g_signal;
static const int k_signals[3] = { SIGINT, SIGTERM, SIGHUP };

static void on_signal(int sig)
{
    g_signal = sig;
}

void cli_signals_catch(cli_signals *s)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    g_signal = 0;
    for (int i = 0; i < 3; i++) {
        s->caught[i] = 0;
        if (sigaction(k_signals[i], NULL, &s->old[i]) == 0 && s->old[i].sa_handler != SIG_IGN)
            s->caught[i] = sigaction(k_signals[i], &sa, NULL) == 0;
    }
}

int cli_signals_caught(void)
{
    return (int)g_signal;
}

void cli_signals_restore(cli_signals *s)
{
    for (int i = 0; i < 3; i++)
        if (s->caught[i])
            sigaction(k_signals[i], &s->old[i], NULL);
    if (g_signal) {
        fflush(stdout);
        raise(g_signal);
    }
}

int cli_key_load(const char *cmd, const char *file, const char *env,
                 unsigned char key[SHS_KEY_BYTES], int *has)
{
    *has = 0;
    if (file && env)
        return cli_usage_err(cmd, "--key-file and --key-env: give one");
    if (!file && !env)
        return CLI_OK;
    if (shs_key_load(key, file, env) < 0) {
        cli_err("%s: %s", cmd, shs_last_error());
        return CLI_FAIL;
    }
    *has = 1;
    return CLI_OK;
}
