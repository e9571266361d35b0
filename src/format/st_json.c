/*
 * st_json.c -- the strict JSON scanner (st_json.h) of the safetensors
 * header and of metadata.json: strings with every escape, numbers with
 * serde_json's range, literals, and any value skipped without recursion.
 * In the safetensors dialect it accepts exactly what serde_json accepts;
 * both dialects report the first syntax error by byte.
 */
#include "format/st_json.h"

#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 128       /* serde_json: the 128th nested container fails */
#define META_MAX_DEPTH 2049 /* jansson: the 2049th nested container fails */

/* The end of the input, in the words of its dialect. */
#define END_OF(ps) ((ps)->meta ? "unexpected end of file" : "unexpected end of header")

int shs__json_syntax_err(shs__json *ps, const char *what)
{
    if (ps->meta) {
        size_t line = 1;
        for (const char *q = ps->start; q < ps->p; q++)
            line += *q == '\n';
        return shs__err(SHS_ECORRUPT, "%s: invalid JSON at line %zu: %s (byte %zu)", ps->fname,
                        line, what, (size_t)(ps->p - ps->start));
    }
    return shs__err(SHS_EJSON, "%s: header is not valid JSON: %s at byte %zu", ps->fname, what,
                    (size_t)(ps->p - ps->start));
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int read_hex4(shs__json *ps, uint32_t *out)
{
    if (ps->end - ps->p < 4)
        return shs__json_syntax_err(ps, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(ps->p[i]);
        if (h < 0)
            return shs__json_syntax_err(ps, "invalid \\u escape");
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
int shs__json_string(shs__json *ps, const char **out, size_t *out_len)
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
            return shs__json_syntax_err(ps, "unterminated string");
        }
        unsigned char c = (unsigned char)*p;
        if (c == '"') {
            p++;
            break;
        }
        if (c < 0x20) {
            ps->p = p;
            return shs__json_syntax_err(ps, "control character in string");
        }
        /* escape */
        p++;
        if (p >= end) {
            ps->p = p;
            return shs__json_syntax_err(ps, "unterminated escape");
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
                return shs__json_syntax_err(ps, "lone low surrogate in \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (end - p < 2 || p[0] != '\\' || p[1] != 'u')
                    return shs__json_syntax_err(ps, "lone high surrogate in \\u escape");
                ps->p = p + 2;
                if ((rc = read_hex4(ps, &lo)) < 0)
                    return rc;
                p = ps->p;
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return shs__json_syntax_err(ps,
                                                "high surrogate not followed by a low surrogate");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp == 0 && ps->meta) {
                ps->p = p - 6;
                return shs__json_syntax_err(ps, "\\u0000 in a string");
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
        default: ps->p = p - 1; return shs__json_syntax_err(ps, "invalid escape");
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
static int overflows_f64(const char *ip, const char *ie, const char *fp, const char *fe, int eneg,
                         const char *ep, const char *ee)
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
int shs__json_number(shs__json *ps, int *is_uint, uint64_t *val)
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
        return shs__json_syntax_err(ps, "invalid number");
    }
    ip = p;
    if (*p == '0') {
        p++;
        if (p < end && *p >= '0' && *p <= '9') {
            ps->p = p;
            return shs__json_syntax_err(ps, "leading zero in number");
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
            return shs__json_syntax_err(ps, "invalid fraction");
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
            return shs__json_syntax_err(ps, "invalid exponent");
        }
        ep = p;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        ee = p;
    }
    if ((big || frac) && overflows_f64(ip, ie, fp, fe, eneg, ep, ee)) {
        ps->p = start;
        return shs__json_syntax_err(ps, "number out of range (beyond the f64 range, "
                                        "which serde_json refuses)");
    }
    if (ps->meta && !frac && (big || v > (uint64_t)INT64_MAX + (uint64_t)neg)) {
        ps->p = start;
        return shs__json_syntax_err(ps, "integer out of range (beyond int64)");
    }
    ps->p = p;
    *is_uint = !neg && !big && !frac;
    *val = v;
    return SHS_OK;
}

int shs__json_literal(shs__json *ps, const char *lit, size_t n)
{
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, lit, n) != 0)
        return shs__json_syntax_err(ps, "invalid literal");
    ps->p += n;
    return SHS_OK;
}

/* A member's key and its ':' (whitespace around both skipped).  With
   `key` NULL the key is only checked, not decoded. */
int shs__json_key(shs__json *ps, const char **key, size_t *len)
{
    int rc;
    shs__json_skip_ws(ps);
    if (ps->p >= ps->end || *ps->p != '"')
        return shs__json_syntax_err(ps, "expected a string key");
    if ((rc = shs__json_string(ps, key, len)) < 0)
        return rc;
    shs__json_skip_ws(ps);
    if (ps->p >= ps->end || *ps->p != ':')
        return shs__json_syntax_err(ps, "expected ':'");
    ps->p++;
    shs__json_skip_ws(ps);
    return SHS_OK;
}

/*
 * Skip any JSON value, checking its syntax, without recursion.  `depth` is
 * the nesting depth of the container holding the value.
 */
int shs__json_skip_value(shs__json *ps, int depth)
{
    /* stack[i] is '{' or '[' for each open container of this value, and
       obj[i] the id of an open object (for its keys' duplicate check) */
    char stack[META_MAX_DEPTH];
    uint32_t obj[META_MAX_DEPTH];
    int max_depth = ps->meta ? META_MAX_DEPTH : MAX_DEPTH;
    int top = 0;
    int rc;
    for (;;) {
        shs__json_skip_ws(ps);
        if (ps->p >= ps->end)
            return shs__json_syntax_err(ps, END_OF(ps));
        char c = *ps->p;
        /* a value */
        if (c == '{' || c == '[') {
            if (depth + top + 1 >= max_depth && ps->meta)
                return shs__json_syntax_err(ps, "nested more than 2048 levels deep");
            if (depth + top + 1 >= max_depth)
                return shs__err(SHS_ENESTING,
                                "%s: header JSON nested more than %d levels deep at byte %zu",
                                ps->fname, MAX_DEPTH - 1, (size_t)(ps->p - ps->start));
            obj[top] = ++ps->next_obj;
            stack[top++] = c;
            ps->p++;
            shs__json_skip_ws(ps);
            if (ps->p < ps->end && *ps->p == (c == '{' ? '}' : ']')) {
                ps->p++;
                top--;
                goto after_value;
            }
            if (c == '{')
                goto object_key;
            continue;
        } else if (c == '"') {
            if ((rc = shs__json_string(ps, NULL, NULL)) < 0)
                return rc;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            int u;
            uint64_t v;
            if ((rc = shs__json_number(ps, &u, &v)) < 0)
                return rc;
        } else if (c == 't') {
            if ((rc = shs__json_literal(ps, "true", 4)) < 0)
                return rc;
        } else if (c == 'f') {
            if ((rc = shs__json_literal(ps, "false", 5)) < 0)
                return rc;
        } else if (c == 'n') {
            if ((rc = shs__json_literal(ps, "null", 4)) < 0)
                return rc;
        } else {
            return shs__json_syntax_err(ps, "expected a value");
        }
    after_value:
        for (;;) {
            if (top == 0)
                return SHS_OK;
            shs__json_skip_ws(ps);
            if (ps->p >= ps->end)
                return shs__json_syntax_err(ps, END_OF(ps));
            char close = stack[top - 1] == '{' ? '}' : ']';
            if (*ps->p == close) {
                ps->p++;
                top--;
                continue;
            }
            if (*ps->p != ',')
                return shs__json_syntax_err(ps, "expected ',' or a closing bracket");
            ps->p++;
            if (stack[top - 1] == '{')
                goto object_key;
            break; /* next array element */
        }
        continue;
    object_key : {
        const char *k = NULL;
        size_t klen = 0;
        if ((rc = shs__json_key(ps, &k, &klen)) < 0)
            return rc;
        if ((rc = shs__json_note_key(ps, obj[top - 1], k, klen)) < 0)
            return rc;
    }
    }
}

/* After a member of an object (close '}') or an element of an array
   (close ']'): 1 when another follows (',' consumed), 0 when the
   container closed, or an error. */
int shs__json_next_member(shs__json *ps, char close)
{
    shs__json_skip_ws(ps);
    if (ps->p >= ps->end)
        return shs__json_syntax_err(ps, END_OF(ps));
    if (*ps->p == close) {
        ps->p++;
        return 0;
    }
    if (*ps->p != ',')
        return shs__json_syntax_err(ps,
                                    close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    ps->p++;
    return 1;
}

int shs__json_note_key(shs__json *ps, uint32_t obj, const char *key, size_t len)
{
    if (ps->n_nk == ps->cap_nk) {
        size_t cap = ps->cap_nk ? ps->cap_nk * 2 : 16;
        struct nested_key *nk = shs__realloc(ps->nk, cap * sizeof *nk);
        if (!nk)
            return shs__err(SHS_ENOMEM, "%s: out of memory parsing %s", ps->fname,
                            ps->meta ? "it" : "header");
        ps->nk = nk;
        ps->cap_nk = cap;
    }
    ps->nk[ps->n_nk++] = (struct nested_key){ obj, (uint32_t)len, key };
    return SHS_OK;
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

const struct nested_key *shs__json_nested_dup(shs__json *ps)
{
    if (ps->n_nk < 2)
        return NULL;
    qsort(ps->nk, ps->n_nk, sizeof *ps->nk, cmp_nested_key);
    for (size_t i = 1; i < ps->n_nk; i++)
        if (cmp_nested_key(&ps->nk[i - 1], &ps->nk[i]) == 0)
            return &ps->nk[i];
    return NULL;
}
