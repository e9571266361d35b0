/* util.c -- output escaping, messages and option parsing for the CLI. */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
        n = 2; v = c & 0x1F; min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3; v = c & 0x0F; min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4; v = c & 0x07; min = 0x10000;
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
           (cp >= 0x2060 && cp <= 0x206F) || cp == 0xFEFF ||
           (cp >= 0xFFF9 && cp <= 0xFFFB);
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

size_t cli_width(const char *s)
{
    size_t w = 0;
    for (; *s; s++)
        w += ((unsigned char)*s & 0xC0) != 0x80;
    return w;
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

static void vreport(const char *prefix, const char *fmt, va_list ap)
{
    char *msg = cli_vfmt(fmt, ap);
    fflush(stdout);   /* keep stdout and stderr in order on a terminal */
    fputs(prefix, stderr);
    if (msg)
        cli_put_escaped(stderr, msg, strlen(msg));
    else
        fputs("out of memory formatting a message", stderr);
    fputc('\n', stderr);
    free(msg);
}

void cli_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport("shardsafe: ", fmt, ap);
    va_end(ap);
}

void cli_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport("shardsafe: warning: ", fmt, ap);
    va_end(ap);
}

int cli_usage_err(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *msg = cli_vfmt(fmt, ap);
    va_end(ap);
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

int cli_finish_stdout(int status)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_err("error writing to standard output: %s", strerror(errno));
        return status == CLI_OK ? CLI_FAIL : status;
    }
    return status;
}

/* ------------------------------------------------------------------ */
/* Option parsing                                                     */
/* ------------------------------------------------------------------ */

void cli_parser_init(cli_parser *p, const char *cmd, int argc, char **argv)
{
    p->cmd = cmd;
    p->argc = argc;
    p->argv = argv;
    p->i = 1;
    p->only_positional = 0;
}

int cli_parser_next(cli_parser *p, const cli_optdef *defs, const char **val)
{
    *val = NULL;
    if (p->i >= p->argc)
        return CLI_ARG_END;
    const char *a = p->argv[p->i++];
    if (p->only_positional || a[0] != '-' || a[1] == '\0') {
        *val = a;
        return CLI_ARG_POSITIONAL;
    }
    if (strcmp(a, "--") == 0) {
        p->only_positional = 1;
        return cli_parser_next(p, defs, val);
    }
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)
        return CLI_ARG_HELP;
    const char *eq = strchr(a, '=');
    size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
    for (int k = 0; defs && defs[k].name; k++) {
        if (strlen(defs[k].name) != nlen || memcmp(defs[k].name, a, nlen) != 0)
            continue;
        if (!defs[k].takes_value) {
            if (eq) {
                cli_usage_err(p->cmd, "option '%s' takes no value", defs[k].name);
                return CLI_ARG_ERROR;
            }
            return k;
        }
        if (eq) {
            *val = eq + 1;
        } else if (p->i < p->argc) {
            *val = p->argv[p->i++];
        } else {
            cli_usage_err(p->cmd, "option '%s' needs a value", defs[k].name);
            return CLI_ARG_ERROR;
        }
        return k;
    }
    cli_usage_err(p->cmd, "unknown option '%s'", a);
    return CLI_ARG_ERROR;
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
