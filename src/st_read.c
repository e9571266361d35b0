/*
 * st_read.c -- safetensors reader: header validation, mmap view, reads.
 *
 * The header is checked with every rule of the reference implementation
 * (huggingface/safetensors, which parses with serde_json), in its order:
 *
 *   1. file >= 8 bytes                      SHS_EHEADER_TOO_SMALL
 *   2. header length <= 100,000,000         SHS_EHEADER_TOO_LARGE
 *   3. 8 + header length <= file size       SHS_EHEADER_LENGTH
 *   4. header is UTF-8                      SHS_EUTF8
 *   5. header is strict JSON, depth < 128   SHS_EJSON / SHS_ENESTING
 *   6. header has the safetensors schema    SHS_ESCHEMA / SHS_EDTYPE /
 *                                           SHS_EDUPLICATE
 *   7. per tensor, in data order: offsets contiguous from 0, numel x bits
 *      without overflow, whole bytes, range == size
 *                                           SHS_EOFFSET / SHS_EOVERFLOW /
 *                                           SHS_EMISALIGNED / SHS_ETENSOR_SIZE
 *   8. data ends exactly at end of file     SHS_ETRAILING
 *
 * The reference deserialises through a `#[serde(flatten)]` struct, which
 * buffers the whole document before interpreting it: every syntax error
 * therefore wins over every schema error.  We parse in one pass and keep
 * the first schema error aside until the syntax of the whole header has
 * been checked.  Nesting is tracked with a counter, never with recursion.
 */
#include "io.h"
#include "layout.h"
#include "namemap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HEADER 100000000ull
#define MAX_DEPTH 128 /* serde_json: the 128th nested container fails */

typedef struct tensor {
    shs_tensor_info info;
    uint64_t begin, end;     /* data_offsets as written */
    size_t shape_at;         /* index into the shape arena while parsing */
    uint32_t doc_index;      /* position in the header */
} tensor;

typedef struct meta_entry {
    const char *key, *value;
    size_t key_len, value_len; /* either may hold "\u0000" */
} meta_entry;

struct shs_file {
    char *path;
    int fd;
    const uint8_t *map;      /* whole file (mmap or caller memory) or NULL */
    size_t map_len;
    int owns_map;
    uint64_t file_size, header_len;
    const char *header;
    char *header_copy;       /* when the header was read with pread */
    char *arena;             /* decoded strings */
    uint64_t *shapes;
    tensor *tensors;
    size_t n_tensors;
    shs__namemap names;
    meta_entry *meta;
    size_t n_meta;
    int has_meta;
};

/* ------------------------------------------------------------------ */
/* Parser                                                             */
/* ------------------------------------------------------------------ */

typedef struct parser {
    const char *p, *end, *start;
    const char *fname;
    char *arena;
    size_t arena_len;
    /* growable arrays */
    tensor *tensors;
    size_t n_tensors, cap_tensors;
    uint64_t *shapes;
    size_t n_shapes, cap_shapes;
    meta_entry *meta;
    size_t n_meta, cap_meta;
    int has_meta, seen_meta;
    shs__namemap names;
    /* first schema-level error, reported only if the syntax is clean */
    int deferred;
    char deferred_msg[512];
    /* keys of objects nested in ignored values, checked for duplicates
       after the parse (rare: only unknown fields hold such objects) */
    struct nested_key {
        uint32_t obj;
        uint32_t len;
        const char *key;
    } *nk;
    size_t n_nk, cap_nk;
    uint32_t next_obj;
} parser;

static int syntax_err(parser *ps, const char *what)
{
    return shs__err(SHS_EJSON, "%s: header is not valid JSON: %s at byte %zu",
                    ps->fname, what, (size_t)(ps->p - ps->start));
}

__attribute__((format(printf, 3, 4)))
static void defer(parser *ps, int status, const char *fmt, ...)
{
    if (ps->deferred)
        return;
    ps->deferred = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->deferred_msg, sizeof ps->deferred_msg, fmt, ap);
    va_end(ap);
}

static inline void skip_ws(parser *ps)
{
    while (ps->p < ps->end &&
           (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t'))
        ps->p++;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_hex4(parser *ps, uint32_t *out)
{
    if (ps->end - ps->p < 4)
        return syntax_err(ps, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(ps->p[i]);
        if (h < 0)
            return syntax_err(ps, "invalid \\u escape");
        v = (v << 4) | (uint32_t)h;
    }
    ps->p += 4;
    *out = v;
    return SHS_OK;
}

/*
 * Parse a string at ps->p (which is at '"').  When `out` is non-NULL the
 * decoded bytes go to the arena (NUL-terminated) and *out / *out_len point
 * at them; decoded text is never longer than its encoding plus quotes, so
 * the arena sized like the header cannot overflow.
 */
static int parse_string(parser *ps, const char **out, size_t *out_len)
{
    const char *p = ps->p + 1;
    const char *end = ps->end;
    const char *run = p;
    char *dst = out ? ps->arena + ps->arena_len : NULL;
    size_t n = 0;
    for (;;) {
        while (p < end) {
            unsigned char c = (unsigned char)*p;
            if (c == '"' || c == '\\' || c < 0x20)
                break;
            p++;
        }
        if (dst && p > run) {
            memcpy(dst + n, run, (size_t)(p - run));
            n += (size_t)(p - run);
        }
        if (p >= end) {
            ps->p = p;
            return syntax_err(ps, "unterminated string");
        }
        unsigned char c = (unsigned char)*p;
        if (c == '"') {
            p++;
            break;
        }
        if (c < 0x20) {
            ps->p = p;
            return syntax_err(ps, "control character in string");
        }
        /* escape */
        p++;
        if (p >= end) {
            ps->p = p;
            return syntax_err(ps, "unterminated escape");
        }
        char e = *p++;
        char buf[4];
        size_t blen = 1;
        switch (e) {
        case '"': buf[0] = '"'; break;
        case '\\': buf[0] = '\\'; break;
        case '/': buf[0] = '/'; break;
        case 'b': buf[0] = '\b'; break;
        case 'f': buf[0] = '\f'; break;
        case 'n': buf[0] = '\n'; break;
        case 'r': buf[0] = '\r'; break;
        case 't': buf[0] = '\t'; break;
        case 'u': {
            uint32_t cp;
            int rc;
            ps->p = p;
            if ((rc = read_hex4(ps, &cp)) < 0)
                return rc;
            p = ps->p;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return syntax_err(ps, "lone low surrogate in \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (end - p < 2 || p[0] != '\\' || p[1] != 'u')
                    return syntax_err(ps, "lone high surrogate in \\u escape");
                ps->p = p + 2;
                if ((rc = read_hex4(ps, &lo)) < 0)
                    return rc;
                p = ps->p;
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return syntax_err(ps, "high surrogate not followed by a low surrogate");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp < 0x80) {
                buf[0] = (char)cp;
            } else if (cp < 0x800) {
                buf[0] = (char)(0xC0 | (cp >> 6));
                buf[1] = (char)(0x80 | (cp & 0x3F));
                blen = 2;
            } else if (cp < 0x10000) {
                buf[0] = (char)(0xE0 | (cp >> 12));
                buf[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
                buf[2] = (char)(0x80 | (cp & 0x3F));
                blen = 3;
            } else {
                buf[0] = (char)(0xF0 | (cp >> 18));
                buf[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
                buf[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
                buf[3] = (char)(0x80 | (cp & 0x3F));
                blen = 4;
            }
            break;
        }
        default:
            ps->p = p - 1;
            return syntax_err(ps, "invalid escape");
        }
        if (dst) {
            memcpy(dst + n, buf, blen);
            n += blen;
        }
        run = p;
    }
    ps->p = p;
    if (dst) {
        dst[n] = '\0';
        ps->arena_len += n + 1;
        *out = dst;
        *out_len = n;
    }
    return SHS_OK;
}

/* 2^1024 - 2^970: halfway between DBL_MAX and 2^1024.  A decimal of this
   magnitude or more rounds to infinity (the tie goes to the even
   mantissa, which is 2^1024). */
static const char k_f64_limit[] =
    "1797693134862315807937289714053034150799341327100378269361737789804449"
    "6829276475094664901797758720709633028641669288791094655554785194040263"
    "0657488671505820681908902000708383676273854845817711531764475730270069"
    "8555713669596228429148198608349364752927190741684443655107043427115596"
    "99508093042880177904174497792";

/*
 * Whether the decimal int.frac e[-]exp is too large in magnitude for an
 * f64.  serde_json refuses such a number ("number out of range") wherever
 * it appears, while a number that is merely too large for u64 parses as
 * an f64.  The test is done on the digits rather than with strtod, whose
 * decimal point follows the caller's locale.
 */
static int overflows_f64(const char *ip, const char *ie, const char *fp,
                         const char *fe, int eneg, const char *ep, const char *ee)
{
    const char *d = ip;
    int64_t mag; /* decimal exponent of the first significant digit */
    while (d < ie && *d == '0')
        d++;
    const char *s1 = d, *e1 = ie, *s2 = fp, *e2 = fe;
    if (d < ie) {
        mag = (int64_t)(ie - d) - 1;
    } else {
        d = fp;
        while (d < fe && *d == '0')
            d++;
        if (d == fe)
            return 0; /* zero, whatever the exponent */
        mag = -(int64_t)(d - fp) - 1;
        s1 = d;
        e1 = fe;
        s2 = e2 = NULL;
    }
    int64_t e = 0;
    for (const char *p = ep; p < ee; p++)
        if (e < 1000000000)
            e = e * 10 + (*p - '0');
    mag += eneg ? -e : e;
    if (mag != 308)
        return mag > 308;
    for (size_t k = 0; k < sizeof k_f64_limit - 1; k++) {
        char c = '0';
        if (s1 < e1)
            c = *s1++;
        else if (s2 < e2)
            c = *s2++;
        if (c != k_f64_limit[k])
            return c > k_f64_limit[k];
    }
    return 1; /* equal to the limit so far: at or above it */
}

/*
 * Parse a JSON number.  *is_uint is set when it is a plain non-negative
 * integer that fits in 64 bits (the only numbers a header may use), with
 * its value in *val.  A number beyond the f64 range is a syntax error.
 */
static int parse_number(parser *ps, int *is_uint, uint64_t *val)
{
    const char *p = ps->p, *end = ps->end, *start = ps->p;
    const char *ip, *ie, *fp = NULL, *fe = NULL, *ep = NULL, *ee = NULL;
    int neg = 0, big = 0, frac = 0, eneg = 0;
    uint64_t v = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    if (p >= end || *p < '0' || *p > '9') {
        ps->p = p;
        return syntax_err(ps, "invalid number");
    }
    ip = p;
    if (*p == '0') {
        p++;
        if (p < end && *p >= '0' && *p <= '9') {
            ps->p = p;
            return syntax_err(ps, "leading zero in number");
        }
    } else {
        while (p < end && *p >= '0' && *p <= '9') {
            unsigned d = (unsigned)(*p - '0');
            if (v > (UINT64_MAX - d) / 10)
                big = 1;
            else
                v = v * 10 + d;
            p++;
        }
    }
    ie = p;
    if (p < end && *p == '.') {
        frac = 1;
        p++;
        if (p >= end || *p < '0' || *p > '9') {
            ps->p = p;
            return syntax_err(ps, "invalid fraction");
        }
        fp = p;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        fe = p;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        frac = 1;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            eneg = *p++ == '-';
        if (p >= end || *p < '0' || *p > '9') {
            ps->p = p;
            return syntax_err(ps, "invalid exponent");
        }
        ep = p;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        ee = p;
    }
    if ((big || frac) && overflows_f64(ip, ie, fp, fe, eneg, ep, ee)) {
        ps->p = start;
        return syntax_err(ps, "number out of range (beyond the f64 range, "
                              "which serde_json refuses)");
    }
    ps->p = p;
    *is_uint = !neg && !big && !frac;
    *val = v;
    return SHS_OK;
}

static int expect_literal(parser *ps, const char *lit, size_t n)
{
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, lit, n) != 0)
        return syntax_err(ps, "invalid literal");
    ps->p += n;
    return SHS_OK;
}

/* A member's key and its ':' (whitespace around both skipped).  With
   `key` NULL the key is only checked, not decoded. */
static int parse_key(parser *ps, const char **key, size_t *len)
{
    int rc;
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p != '"')
        return syntax_err(ps, "expected a string key");
    if ((rc = parse_string(ps, key, len)) < 0)
        return rc;
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p != ':')
        return syntax_err(ps, "expected ':'");
    ps->p++;
    skip_ws(ps);
    return SHS_OK;
}

/*
 * Skip any JSON value, checking its syntax, without recursion.  `depth` is
 * the nesting depth of the container holding the value.
 */
static int skip_value(parser *ps, int depth)
{
    /* stack[i] is '{' or '[' for each open container of this value, and
       obj[i] the id of an open object (for its keys' duplicate check) */
    char stack[MAX_DEPTH];
    uint32_t obj[MAX_DEPTH];
    int top = 0;
    int rc;
    for (;;) {
        skip_ws(ps);
        if (ps->p >= ps->end)
            return syntax_err(ps, "unexpected end of header");
        char c = *ps->p;
        /* a value */
        if (c == '{' || c == '[') {
            if (depth + top + 1 >= MAX_DEPTH)
                return shs__err(SHS_ENESTING,
                                "%s: header JSON nested more than %d levels deep at byte %zu",
                                ps->fname, MAX_DEPTH - 1, (size_t)(ps->p - ps->start));
            obj[top] = ++ps->next_obj;
            stack[top++] = c;
            ps->p++;
            skip_ws(ps);
            if (ps->p < ps->end && *ps->p == (c == '{' ? '}' : ']')) {
                ps->p++;
                top--;
                goto after_value;
            }
            if (c == '{')
                goto object_key;
            continue;
        } else if (c == '"') {
            if ((rc = parse_string(ps, NULL, NULL)) < 0)
                return rc;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            int u;
            uint64_t v;
            if ((rc = parse_number(ps, &u, &v)) < 0)
                return rc;
        } else if (c == 't') {
            if ((rc = expect_literal(ps, "true", 4)) < 0)
                return rc;
        } else if (c == 'f') {
            if ((rc = expect_literal(ps, "false", 5)) < 0)
                return rc;
        } else if (c == 'n') {
            if ((rc = expect_literal(ps, "null", 4)) < 0)
                return rc;
        } else {
            return syntax_err(ps, "expected a value");
        }
    after_value:
        for (;;) {
            if (top == 0)
                return SHS_OK;
            skip_ws(ps);
            if (ps->p >= ps->end)
                return syntax_err(ps, "unexpected end of header");
            char close = stack[top - 1] == '{' ? '}' : ']';
            if (*ps->p == close) {
                ps->p++;
                top--;
                continue;
            }
            if (*ps->p != ',')
                return syntax_err(ps, "expected ',' or a closing bracket");
            ps->p++;
            if (stack[top - 1] == '{')
                goto object_key;
            break; /* next array element */
        }
        continue;
    object_key: {
        const char *k;
        size_t klen;
        if ((rc = parse_key(ps, &k, &klen)) < 0)
            return rc;
        if (ps->n_nk == ps->cap_nk) {
            size_t cap = ps->cap_nk ? ps->cap_nk * 2 : 16;
            struct nested_key *nk = shs__realloc(ps->nk, cap * sizeof *nk);
            if (!nk)
                return shs__err(SHS_ENOMEM, "%s: out of memory parsing header", ps->fname);
            ps->nk = nk;
            ps->cap_nk = cap;
        }
        ps->nk[ps->n_nk++] = (struct nested_key){ obj[top - 1], (uint32_t)klen, k };
    }
    }
}

/* After a member of an object (close '}') or an element of an array
   (close ']'): 1 when another follows (',' consumed), 0 when the
   container closed, or an error. */
static int next_member(parser *ps, char close)
{
    skip_ws(ps);
    if (ps->p >= ps->end)
        return syntax_err(ps, "unexpected end of header");
    if (*ps->p == close) {
        ps->p++;
        return 0;
    }
    if (*ps->p != ',')
        return syntax_err(ps, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    ps->p++;
    return 1;
}

/* Parse `[u64, ...]` into the shape arena.  Non-integers are deferred
   schema errors; the syntax is always checked. */
static int parse_uint_array(parser *ps, const char *tname, const char *field,
                            size_t *count)
{
    int rc;
    *count = 0;
    ps->p++; /* '[' */
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
        return SHS_OK;
    }
    for (;;) {
        skip_ws(ps);
        if (ps->p >= ps->end)
            return syntax_err(ps, "unexpected end of header");
        char c = *ps->p;
        if (c == '-' || (c >= '0' && c <= '9')) {
            int is_uint;
            uint64_t v;
            if ((rc = parse_number(ps, &is_uint, &v)) < 0)
                return rc;
            if (!is_uint)
                defer(ps, SHS_ESCHEMA,
                      "%s: tensor '%s': %s must hold non-negative integers below 2^64",
                      ps->fname, tname, field);
            if (ps->n_shapes == ps->cap_shapes) {
                size_t cap = ps->cap_shapes ? ps->cap_shapes * 2 : 1024;
                uint64_t *s = shs__realloc(ps->shapes, cap * sizeof *s);
                if (!s)
                    return shs__err(SHS_ENOMEM, "%s: out of memory parsing header", ps->fname);
                ps->shapes = s;
                ps->cap_shapes = cap;
            }
            ps->shapes[ps->n_shapes++] = v;
            (*count)++;
        } else {
            defer(ps, SHS_ESCHEMA, "%s: tensor '%s': %s must hold integers",
                  ps->fname, tname, field);
            if ((rc = skip_value(ps, 3)) < 0)
                return rc;
        }
        if ((rc = next_member(ps, ']')) <= 0)
            return rc;
    }
}

static const char *tensor_name_fn(const void *ctx, uint32_t i, size_t *len)
{
    const tensor *t = (const tensor *)ctx + i;
    *len = t->info.name_len;
    return t->info.name;
}

/* Value of a tensor entry: {"dtype": .., "shape": [..], "data_offsets": [a, b]} */
static int parse_tensor(parser *ps, tensor *t)
{
    int rc;
    const char *name = t->info.name;
    enum { F_DTYPE = 1, F_SHAPE = 2, F_OFFSETS = 4, MAX_EXTRA = 64 };
    unsigned seen = 0;
    /* unknown fields, kept to reject duplicates among them too */
    const char *extra[MAX_EXTRA];
    size_t extra_len[MAX_EXTRA], n_extra = 0;
    skip_ws(ps);
    if (ps->p >= ps->end)
        return syntax_err(ps, "unexpected end of header");
    if (*ps->p != '{') {
        defer(ps, SHS_ESCHEMA, "%s: tensor '%s': value must be an object", ps->fname, name);
        return skip_value(ps, 1);
    }
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        goto check;
    }
    for (;;) {
        const char *kstart;
        size_t klen;
        /* keys are compared decoded, as serde does ("sh\u0061pe" is
           "shape"); the arena has room for every string of the header */
        if ((rc = parse_key(ps, &kstart, &klen)) < 0)
            return rc;
        if (ps->p >= ps->end)
            return syntax_err(ps, "unexpected end of header");
        unsigned field = 0;
        if (klen == 5 && memcmp(kstart, "dtype", 5) == 0)
            field = F_DTYPE;
        else if (klen == 5 && memcmp(kstart, "shape", 5) == 0)
            field = F_SHAPE;
        else if (klen == 12 && memcmp(kstart, "data_offsets", 12) == 0)
            field = F_OFFSETS;
        if (field && (seen & field))
            defer(ps, SHS_EDUPLICATE, "%s: tensor '%s': duplicate field '%.*s'",
                  ps->fname, name, (int)klen, kstart);
        seen |= field;
        if (field == F_DTYPE) {
            if (*ps->p != '"') {
                defer(ps, SHS_ESCHEMA, "%s: tensor '%s': dtype must be a string",
                      ps->fname, name);
                if ((rc = skip_value(ps, 2)) < 0)
                    return rc;
            } else {
                const char *ds;
                size_t dlen;
                if ((rc = parse_string(ps, &ds, &dlen)) < 0)
                    return rc;
                shs_dtype dt;
                if (shs_dtype_parse(&dt, ds, dlen) < 0)
                    defer(ps, SHS_EDTYPE, "%s: tensor '%s': unknown dtype \"%.*s\"",
                          ps->fname, name, dlen > 40 ? 40 : (int)dlen, ds);
                else
                    t->info.dtype = dt;
            }
        } else if (field == F_SHAPE || field == F_OFFSETS) {
            const char *fname = field == F_SHAPE ? "shape" : "data_offsets";
            if (*ps->p != '[') {
                defer(ps, SHS_ESCHEMA, "%s: tensor '%s': %s must be an array",
                      ps->fname, name, fname);
                if ((rc = skip_value(ps, 2)) < 0)
                    return rc;
            } else {
                size_t at = ps->n_shapes, n;
                if ((rc = parse_uint_array(ps, name, fname, &n)) < 0)
                    return rc;
                if (field == F_SHAPE) {
                    if (n > SHS_MAX_DIMS)
                        defer(ps, SHS_ESCHEMA, "%s: tensor '%s': %zu dimensions (at most %d)",
                              ps->fname, name, n, SHS_MAX_DIMS);
                    t->shape_at = at;
                    t->info.ndim = n;
                } else {
                    if (n != 2)
                        defer(ps, SHS_ESCHEMA,
                              "%s: tensor '%s': data_offsets must hold exactly 2 integers, not %zu",
                              ps->fname, name, n);
                    else {
                        t->begin = ps->shapes[at];
                        t->end = ps->shapes[at + 1];
                    }
                    ps->n_shapes = at; /* offsets do not stay in the arena */
                }
            }
        } else {
            /* unknown field: ignored by the reference, but must be JSON
               and, for us, unique */
            for (size_t i = 0; i < n_extra; i++)
                if (extra_len[i] == klen && memcmp(extra[i], kstart, klen) == 0)
                    defer(ps, SHS_EDUPLICATE, "%s: tensor '%s': duplicate field '%s'",
                          ps->fname, name, kstart);
            if (n_extra == MAX_EXTRA)
                defer(ps, SHS_ESCHEMA, "%s: tensor '%s': more than %d unknown fields",
                      ps->fname, name, MAX_EXTRA);
            else {
                extra[n_extra] = kstart;
                extra_len[n_extra++] = klen;
            }
            if ((rc = skip_value(ps, 2)) < 0)
                return rc;
        }
        if ((rc = next_member(ps, '}')) <= 0) {
            if (rc < 0)
                return rc;
            break;
        }
    }
check:
    if ((seen & (F_DTYPE | F_SHAPE | F_OFFSETS)) != (F_DTYPE | F_SHAPE | F_OFFSETS))
        defer(ps, SHS_ESCHEMA, "%s: tensor '%s': missing field '%s'", ps->fname, name,
              !(seen & F_DTYPE) ? "dtype" : !(seen & F_SHAPE) ? "shape" : "data_offsets");
    return SHS_OK;
}

static int parse_metadata(parser *ps)
{
    int rc;
    skip_ws(ps);
    if (ps->p >= ps->end)
        return syntax_err(ps, "unexpected end of header");
    if (*ps->p == 'n') {
        /* "__metadata__": null is Option::None in the reference */
        return expect_literal(ps, "null", 4);
    }
    if (*ps->p != '{') {
        defer(ps, SHS_ESCHEMA, "%s: __metadata__ must be an object of strings", ps->fname);
        return skip_value(ps, 1);
    }
    ps->has_meta = 1;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        return SHS_OK;
    }
    for (;;) {
        meta_entry e;
        if ((rc = parse_key(ps, &e.key, &e.key_len)) < 0)
            return rc;
        if (ps->p >= ps->end)
            return syntax_err(ps, "unexpected end of header");
        if (*ps->p == '"') {
            if ((rc = parse_string(ps, &e.value, &e.value_len)) < 0)
                return rc;
            if (ps->n_meta == ps->cap_meta) {
                size_t cap = ps->cap_meta ? ps->cap_meta * 2 : 8;
                meta_entry *m = shs__realloc(ps->meta, cap * sizeof *m);
                if (!m)
                    return shs__err(SHS_ENOMEM, "%s: out of memory parsing header", ps->fname);
                ps->meta = m;
                ps->cap_meta = cap;
            }
            ps->meta[ps->n_meta++] = e;
        } else {
            defer(ps, SHS_ESCHEMA, "%s: __metadata__ value of '%s' must be a string",
                  ps->fname, e.key);
            if ((rc = skip_value(ps, 2)) < 0)
                return rc;
        }
        if ((rc = next_member(ps, '}')) <= 0)
            return rc;
    }
}

static int cmp_nested_key(const void *a, const void *b)
{
    const struct nested_key *x = a, *y = b;
    if (x->obj != y->obj)
        return x->obj < y->obj ? -1 : 1;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return memcmp(x->key, y->key, x->len);
}

/* A duplicate key in an object nested inside an ignored value is an
   error too (the reference keeps the last silently). */
static void check_nested_keys(parser *ps)
{
    if (ps->n_nk < 2)
        return;
    qsort(ps->nk, ps->n_nk, sizeof *ps->nk, cmp_nested_key);
    for (size_t i = 1; i < ps->n_nk; i++)
        if (cmp_nested_key(&ps->nk[i - 1], &ps->nk[i]) == 0) {
            defer(ps, SHS_EDUPLICATE, "%s: duplicate key '%s' in an object inside an unknown "
                  "field", ps->fname, ps->nk[i].key);
            return;
        }
}

static int parse_header(parser *ps)
{
    int rc;
    skip_ws(ps);
    if (ps->p >= ps->end)
        return syntax_err(ps, "empty header");
    if (*ps->p != '{')
        return syntax_err(ps, "a safetensors header must be a JSON object");
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        goto done;
    }
    for (;;) {
        const char *name;
        size_t name_len;
        if ((rc = parse_key(ps, &name, &name_len)) < 0)
            return rc;
        if (name_len == 12 && memcmp(name, "__metadata__", 12) == 0) {
            if (ps->seen_meta)
                defer(ps, SHS_EDUPLICATE, "%s: duplicate key '__metadata__'", ps->fname);
            ps->seen_meta = 1;
            if ((rc = parse_metadata(ps)) < 0)
                return rc;
        } else {
            if (ps->n_tensors == ps->cap_tensors) {
                size_t cap = ps->cap_tensors ? ps->cap_tensors * 2 : 64;
                if (cap > UINT32_MAX - 1)
                    return shs__err(SHS_ESCHEMA, "%s: too many tensors", ps->fname);
                tensor *t = shs__realloc(ps->tensors, cap * sizeof *t);
                if (!t)
                    return shs__err(SHS_ENOMEM, "%s: out of memory parsing header", ps->fname);
                ps->tensors = t;
                ps->cap_tensors = cap;
            }
            tensor *t = &ps->tensors[ps->n_tensors];
            memset(t, 0, sizeof *t);
            t->info.name = name;
            t->info.name_len = name_len;
            t->doc_index = (uint32_t)ps->n_tensors;
            ps->n_tensors++;
            uint32_t existing;
            rc = shs__namemap_insert(&ps->names, name, name_len, t->doc_index,
                                     tensor_name_fn, ps->tensors, &existing);
            if (rc < 0)
                return rc;
            if (rc == 0)
                defer(ps, SHS_EDUPLICATE, "%s: duplicate tensor name '%s'", ps->fname, name);
            if ((rc = parse_tensor(ps, t)) < 0)
                return rc;
        }
        if ((rc = next_member(ps, '}')) <= 0) {
            if (rc < 0)
                return rc;
            break;
        }
    }
done:
    skip_ws(ps);
    if (ps->p != ps->end)
        return syntax_err(ps, "trailing characters after the header object");
    check_nested_keys(ps);
    if (ps->deferred)
        return shs__err(ps->deferred, "%s", ps->deferred_msg);
    return SHS_OK;
}

/* ------------------------------------------------------------------ */
/* Validation and assembly                                            */
/* ------------------------------------------------------------------ */

static int cmp_offsets(const void *a, const void *b)
{
    const tensor *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

static int cmp_meta(const void *a, const void *b)
{
    const meta_entry *x = a, *y = b;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(x->key, y->key, n);
    if (c)
        return c;
    return x->key_len < y->key_len ? -1 : x->key_len > y->key_len;
}

static int validate(shs_file *f, parser *ps)
{
    const char *fname = ps->fname;
    int rc;
    /* Duplicate metadata keys belong to the schema checks, which come
       before the data checks. */
    if (ps->n_meta > 1)
        qsort(ps->meta, ps->n_meta, sizeof *ps->meta, cmp_meta);
    for (size_t i = 1; i < ps->n_meta; i++)
        if (cmp_meta(&ps->meta[i - 1], &ps->meta[i]) == 0)
            return shs__err(SHS_EDUPLICATE, "%s: duplicate __metadata__ key '%s'", fname,
                            ps->meta[i].key);
    /* Data order.  Writers (ours and the reference) emit tensors in data
       order, so the sort is usually skipped. */
    int sorted = 1;
    for (size_t i = 1; i < ps->n_tensors && sorted; i++)
        sorted = cmp_offsets(&ps->tensors[i - 1], &ps->tensors[i]) <= 0;
    if (!sorted) {
        qsort(ps->tensors, ps->n_tensors, sizeof *ps->tensors, cmp_offsets);
        uint32_t *perm = shs__calloc(ps->n_tensors ? ps->n_tensors : 1, sizeof *perm);
        if (!perm)
            return shs__err(SHS_ENOMEM, "%s: out of memory validating header", fname);
        for (size_t i = 0; i < ps->n_tensors; i++)
            perm[ps->tensors[i].doc_index] = (uint32_t)i;
        shs__namemap_remap(&ps->names, perm);
        shs__free(perm);
    }
    uint64_t start = 0;
    for (size_t i = 0; i < ps->n_tensors; i++) {
        tensor *t = &ps->tensors[i];
        t->info.shape = ps->shapes + t->shape_at;
        if (t->begin != start || t->end < t->begin)
            return shs__err(SHS_EOFFSET,
                            "%s: tensor '%s': data_offsets [%llu, %llu] %s (expected start %llu)",
                            fname, t->info.name, (unsigned long long)t->begin,
                            (unsigned long long)t->end,
                            t->end < t->begin ? "end before start" :
                            t->begin > start ? "leave a gap" : "overlap the previous tensor",
                            (unsigned long long)start);
        start = t->end;
        uint64_t numel = 1;
        for (size_t d = 0; d < t->info.ndim; d++)
            if (shs__mul_u64(numel, t->info.shape[d], &numel))
                return shs__err(SHS_EOVERFLOW, "%s: tensor '%s': element count overflows",
                                fname, t->info.name);
        uint64_t nbytes;
        if ((rc = shs__nbytes_from_numel(&nbytes, t->info.dtype, numel)) < 0)
            return shs__err(rc, "%s: tensor '%s': %llu elements of %s %s", fname,
                            t->info.name, (unsigned long long)numel,
                            shs_dtype_name(t->info.dtype),
                            rc == SHS_EOVERFLOW ? "overflow 64 bits"
                                                : "do not fill whole bytes");
        if (t->end - t->begin != nbytes)
            return shs__err(SHS_ETENSOR_SIZE,
                            "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, "
                            "but %llu elements of %s need %llu",
                            fname, t->info.name, (unsigned long long)t->begin,
                            (unsigned long long)t->end,
                            (unsigned long long)(t->end - t->begin),
                            (unsigned long long)numel, shs_dtype_name(t->info.dtype),
                            (unsigned long long)nbytes);
        t->info.numel = numel;
        t->info.offset = t->begin;
        t->info.nbytes = nbytes;
    }
    uint64_t expect = start + 8 + f->header_len;
    if (expect < start || expect != f->file_size)
        return shs__err(SHS_ETRAILING,
                        "%s: tensor data ends at byte %llu of the file, but the file has %llu bytes",
                        fname, (unsigned long long)(start + 8 + f->header_len),
                        (unsigned long long)f->file_size);
    return SHS_OK;
}

/* Name a foreign format from the first bytes, or NULL. */
static const char *sniff_foreign(const uint8_t *b, uint64_t len)
{
    if (len >= 7 && memcmp(b, "version", 7) == 0)
        return "a git-LFS pointer file, not the data (run 'git lfs pull')";
    if (len >= 4 && memcmp(b, "PK\x03\x04", 4) == 0)
        return "a zip archive (a PyTorch torch.save checkpoint?), not safetensors";
    if (len >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5)
        return "a Python pickle (torch.save legacy format?), not safetensors";
    if (len >= 4 && memcmp(b, "GGUF", 4) == 0)
        return "a GGUF file, not safetensors";
    if (len >= 8 && memcmp(b, "\x89HDF\r\n\x1a\n", 8) == 0)
        return "an HDF5 file, not safetensors";
    if (len >= 6 && memcmp(b, "\x93NUMPY", 6) == 0)
        return "a NumPy .npy file, not safetensors";
    return NULL;
}

/* Checks 2-4 and the parse; `head` holds at least min(len, 8) bytes. */
static int check_header(shs_file *f, const uint8_t *prefix, size_t prefix_len,
                        const char *fname)
{
    if (f->file_size < 8) {
        const char *what = sniff_foreign(prefix, prefix_len);
        if (what)
            return shs__err(SHS_EWRONG_FORMAT, "%s: this is %s", fname, what);
        return shs__err(SHS_EHEADER_TOO_SMALL,
                        "%s: file has %llu bytes, a safetensors file has at least 8",
                        fname, (unsigned long long)f->file_size);
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | prefix[i];
    f->header_len = n;
    int rc = SHS_OK;
    if (n > MAX_HEADER)
        rc = shs__err(SHS_EHEADER_TOO_LARGE,
                      "%s: header length %llu is larger than the limit of 100000000",
                      fname, (unsigned long long)n);
    else if (n + 8 > f->file_size)
        rc = shs__err(SHS_EHEADER_LENGTH,
                      "%s: header length %llu runs past the end of the %llu-byte file",
                      fname, (unsigned long long)n, (unsigned long long)f->file_size);
    if (rc < 0) {
        const char *what = sniff_foreign(prefix, prefix_len);
        if (what)
            return shs__err(SHS_EWRONG_FORMAT, "%s: this is %s", fname, what);
    }
    return rc;
}

static int parse_and_validate(shs_file *f, const char *fname)
{
    parser ps;
    memset(&ps, 0, sizeof ps);
    int rc;
    size_t bad = shs__utf8_check((const unsigned char *)f->header, f->header_len);
    if (bad != f->header_len)
        return shs__err(SHS_EUTF8, "%s: header is not valid UTF-8 (byte %zu of the header)",
                        fname, bad);
    f->arena = shs__malloc(f->header_len + 1);
    if (!f->arena)
        return shs__err(SHS_ENOMEM, "%s: out of memory for a %llu-byte header", fname,
                        (unsigned long long)f->header_len);
    ps.p = ps.start = f->header;
    ps.end = f->header + f->header_len;
    ps.fname = fname;
    ps.arena = f->arena;
    /* Estimate the tensor count so the name table rarely grows: an entry
       takes at least ~50 bytes of JSON. */
    if ((rc = shs__namemap_init(&ps.names, f->header_len / 64 + 8)) < 0)
        goto done;
    if ((rc = parse_header(&ps)) < 0)
        goto done;
    if ((rc = validate(f, &ps)) < 0)
        goto done;
    f->tensors = ps.tensors;
    f->n_tensors = ps.n_tensors;
    f->shapes = ps.shapes;
    f->meta = ps.meta;
    f->n_meta = ps.n_meta;
    f->has_meta = ps.has_meta;
    f->names = ps.names;
    for (size_t i = 0; i < f->n_tensors; i++)
        f->tensors[i].info.shape = f->shapes + f->tensors[i].shape_at;
    shs__free(ps.nk);
    return SHS_OK;
done:
    shs__free(ps.nk);
    shs__free(ps.tensors);
    shs__free(ps.shapes);
    shs__free(ps.meta);
    shs__namemap_release(&ps.names);
    return rc;
}

static shs_file *file_new(const char *name)
{
    shs_file *f = shs__calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->fd = -1;
    f->path = shs__strdup(name);
    if (!f->path) {
        shs__free(f);
        return NULL;
    }
    return f;
}

int shs_file_open_memory(shs_file **out, const void *data, size_t len,
                         const char *name)
{
    int rc;
    if (!out)
        return shs__err(SHS_EINVAL, "shs_file_open_memory: out is NULL");
    *out = NULL;
    if (!data && len)
        return shs__err(SHS_EINVAL, "shs_file_open_memory: data is NULL");
    shs__err_clear();
    shs_file *f = file_new(name ? name : "<memory>");
    if (!f)
        return shs__err(SHS_ENOMEM, "out of memory opening %s", name ? name : "<memory>");
    f->map = data;
    f->map_len = len;
    f->file_size = len;
    uint8_t prefix[8] = { 0 };
    if (len)
        memcpy(prefix, data, len < 8 ? len : 8);
    if ((rc = check_header(f, len >= 16 ? data : prefix, len, f->path)) < 0)
        goto fail;
    f->header = (const char *)data + 8;
    if ((rc = parse_and_validate(f, f->path)) < 0)
        goto fail;
    *out = f;
    return SHS_OK;
fail:
    shs_file_close(f);
    return rc;
}

int shs_file_open(shs_file **out, const char *path, const shs_open_opts *opts)
{
    int rc;
    struct stat st;
    uint8_t prefix[16] = { 0 };
    if (!out || !path)
        return shs__err(SHS_EINVAL, "shs_file_open: out or path is NULL");
    *out = NULL;
    shs__err_clear();
    unsigned flags = opts ? opts->flags : 0;
    shs_file *f = file_new(path);
    if (!f)
        return shs__err(SHS_ENOMEM, "out of memory opening %s", path);
    /* O_NONBLOCK: opening a FIFO must not hang; it is rejected below */
    if ((rc = shs__io_open(&f->fd, path,
                           O_RDONLY | O_NONBLOCK |
                               ((flags & SHS_OPEN_NO_FOLLOW) ? O_NOFOLLOW : 0),
                           0)) < 0)
        goto fail;
    if (shs__io->fstat(f->fd, &st) != 0) {
        rc = shs__err_errno(errno, "cannot stat", path);
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = shs__err(SHS_EINVAL, "%s: is a %s, not a safetensors file", path,
                      S_ISDIR(st.st_mode) ? "directory" : "special file");
        goto fail;
    }
    f->file_size = (uint64_t)st.st_size;
    size_t plen = f->file_size < sizeof prefix ? (size_t)f->file_size : sizeof prefix;
    if ((rc = shs__io_pread_full(f->fd, prefix, plen, 0, path)) < 0)
        goto fail;
    if ((rc = check_header(f, prefix, plen, path)) < 0)
        goto fail;
    /* The header is read with pread (one call, O(header)); the data is
       mapped but not touched. */
    f->header_copy = shs__malloc(f->header_len + 1);
    if (!f->header_copy) {
        rc = shs__err(SHS_ENOMEM, "%s: out of memory for a %llu-byte header", path,
                      (unsigned long long)f->header_len);
        goto fail;
    }
    if ((rc = shs__io_pread_full(f->fd, f->header_copy, f->header_len, 8, path)) < 0)
        goto fail;
    f->header = f->header_copy;
    if ((rc = parse_and_validate(f, path)) < 0)
        goto fail;
    if (!(flags & SHS_OPEN_NO_MMAP) && f->file_size > 0 &&
        f->file_size <= (uint64_t)SIZE_MAX) {
        void *m = shs__io->mmap(f->fd, (size_t)f->file_size);
        if (m) {
            f->map = m;
            f->map_len = (size_t)f->file_size;
            f->owns_map = 1;
        }
    }
    *out = f;
    return SHS_OK;
fail:
    shs_file_close(f);
    return rc;
}

void shs_file_close(shs_file *f)
{
    if (!f)
        return;
    if (f->owns_map && f->map)
        shs__io->munmap((void *)f->map, f->map_len);
    if (f->fd >= 0)
        shs__io->close(f->fd);
    shs__free(f->path);
    shs__free(f->header_copy);
    shs__free(f->arena);
    shs__free(f->shapes);
    shs__free(f->tensors);
    shs__free(f->meta);
    shs__namemap_release(&f->names);
    shs__free(f);
}

const char *shs_file_path(const shs_file *f) { return f->path; }
uint64_t shs_file_size(const shs_file *f) { return f->file_size; }
uint64_t shs_file_header_len(const shs_file *f) { return f->header_len; }
uint64_t shs_file_data_start(const shs_file *f) { return 8 + f->header_len; }
const char *shs_file_header(const shs_file *f) { return f->header; }
size_t shs_file_tensor_count(const shs_file *f) { return f->n_tensors; }
int shs_file_has_metadata(const shs_file *f) { return f->has_meta; }
size_t shs_file_metadata_count(const shs_file *f) { return f->n_meta; }

const shs_tensor_info *shs_file_tensor(const shs_file *f, size_t index)
{
    return index < f->n_tensors ? &f->tensors[index].info : NULL;
}

int shs_file_find_n(size_t *out_index, const shs_file *f, const char *name, size_t len)
{
    long i = shs__namemap_find(&f->names, name, len, tensor_name_fn, f->tensors);
    if (i < 0)
        return shs__err(SHS_ENOTFOUND, "%s: no tensor named '%.*s'", f->path,
                        len > 200 ? 200 : (int)len, name);
    *out_index = (size_t)i;
    return SHS_OK;
}

int shs_file_find(size_t *out_index, const shs_file *f, const char *name)
{
    return shs_file_find_n(out_index, f, name, strlen(name));
}

int shs_file_metadata_at_n(const char **out_key, size_t *out_key_len,
                           const char **out_value, size_t *out_value_len,
                           const shs_file *f, size_t index)
{
    if (index >= f->n_meta)
        return shs__err(SHS_ERANGE, "%s: metadata index %zu out of range", f->path, index);
    *out_key = f->meta[index].key;
    *out_key_len = f->meta[index].key_len;
    *out_value = f->meta[index].value;
    *out_value_len = f->meta[index].value_len;
    return SHS_OK;
}

int shs_file_metadata_at(const char **out_key, const char **out_value,
                         const shs_file *f, size_t index)
{
    size_t kl, vl;
    return shs_file_metadata_at_n(out_key, &kl, out_value, &vl, f, index);
}

const char *shs_file_metadata_get_n(const shs_file *f, const char *key, size_t key_len,
                                    size_t *out_value_len)
{
    if (f->n_meta == 0)
        return NULL;
    meta_entry probe = { key, NULL, key_len, 0 };
    const meta_entry *e = bsearch(&probe, f->meta, f->n_meta, sizeof *f->meta, cmp_meta);
    if (e && out_value_len)
        *out_value_len = e->value_len;
    return e ? e->value : NULL;
}

const char *shs_file_metadata_get(const shs_file *f, const char *key)
{
    return shs_file_metadata_get_n(f, key, strlen(key), NULL);
}

const void *shs_file_tensor_data(const shs_file *f, size_t index)
{
    if (!f->map || index >= f->n_tensors)
        return NULL;
    return f->map + 8 + f->header_len + f->tensors[index].info.offset;
}

int shs_file_read_bytes(const shs_file *f, size_t index, uint64_t offset,
                        void *dst, size_t len)
{
    if (index >= f->n_tensors)
        return shs__err(SHS_ERANGE, "%s: tensor index %zu out of range", f->path, index);
    const shs_tensor_info *t = &f->tensors[index].info;
    if (offset > t->nbytes || len > t->nbytes - offset)
        return shs__err(SHS_ERANGE, "%s: tensor '%s': bytes [%llu, +%zu) outside its %llu bytes",
                        f->path, t->name, (unsigned long long)offset, len,
                        (unsigned long long)t->nbytes);
    uint64_t pos = 8 + f->header_len + t->offset + offset;
    if (f->map) {
        memcpy(dst, f->map + pos, len);
        return SHS_OK;
    }
    return shs__io_pread_full(f->fd, dst, len, pos, f->path);
}

int shs_file_read(const shs_file *f, size_t index, void *dst, size_t dst_len)
{
    if (index >= f->n_tensors)
        return shs__err(SHS_ERANGE, "%s: tensor index %zu out of range", f->path, index);
    const shs_tensor_info *t = &f->tensors[index].info;
    if (dst_len < t->nbytes)
        return shs__err(SHS_ERANGE, "%s: tensor '%s' has %llu bytes, buffer holds %zu",
                        f->path, t->name, (unsigned long long)t->nbytes, dst_len);
    return shs_file_read_bytes(f, index, 0, dst, (size_t)t->nbytes);
}

typedef struct slice_ctx {
    const shs_file *f;
    size_t index;
    char *dst;
} slice_ctx;

static int slice_run(void *ctx, uint64_t src_off, uint64_t dst_off, uint64_t len)
{
    slice_ctx *c = ctx;
    return shs_file_read_bytes(c->f, c->index, src_off, c->dst + dst_off, (size_t)len);
}

int shs_file_read_slice(const shs_file *f, size_t index, const uint64_t *start,
                        const uint64_t *count, void *dst, size_t dst_len)
{
    if (index >= f->n_tensors)
        return shs__err(SHS_ERANGE, "%s: tensor index %zu out of range", f->path, index);
    const shs_tensor_info *t = &f->tensors[index].info;
    uint64_t need;
    int rc = shs__box_check(&need, t->dtype, t->ndim, t->shape, start, count);
    if (rc < 0)
        return shs__err_prefix(rc, f->path);
    if (need > dst_len)
        return shs__err(SHS_ERANGE, "%s: tensor '%s': slice needs %llu bytes, buffer holds %zu",
                        f->path, t->name, (unsigned long long)need, dst_len);
    slice_ctx c = { f, index, dst };
    return shs__box_runs(t->dtype, t->ndim, t->shape, start, count, slice_run, &c);
}
