/*
 * meta_ms_key.c -- the keys of a MindSpore metadata.json's storage_data:
 * str((name, (slice_id,))), Python's repr of a tuple (meta_ms.h).
 */
#include "source/meta_ms.h"

#include <string.h>

static void skip_sp(const char **p, const char *end)
{
    while (*p < end && **p == ' ')
        ++*p;
}

/* A str as repr() writes it: in ' (or " when it holds ' and no "), with
   backslash escapes; those beyond \\ \' \" \n \r \t are refused. */
static int parse_pystr(const char **pp, const char *end, shs__buf *out)
{
    const char *p = *pp;
    if (p >= end || (*p != '\'' && *p != '"'))
        return -1;
    char q = *p++;
    while (p < end && *p != q) {
        char c = *p++;
        if (c == '\\') {
            if (p >= end)
                return -1;
            char e = *p++;
            switch (e) {
            case '\\':
            case '\'':
            case '"': c = e; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            default: return -1;
            }
        }
        if (shs__buf_addc(out, c) < 0)
            return -2;
    }
    if (p >= end)
        return -1;
    *pp = p + 1;
    return 0;
}

int shs__ms_parse_key(const char *s, char **name, uint64_t *v, size_t *n)
{
    const char *p = s, *end = s + strlen(s);
    shs__buf b = SHS__BUF_INIT;
    int rc = -1;
    *n = 0;
    skip_sp(&p, end);
    if (p >= end || *p++ != '(')
        goto done;
    skip_sp(&p, end);
    if ((rc = parse_pystr(&p, end, &b)) < 0)
        goto done;
    rc = -1;
    skip_sp(&p, end);
    if (p >= end || *p++ != ',')
        goto done;
    skip_sp(&p, end);
    if (p >= end || *p++ != '(')
        goto done;
    /* a tuple as Python spells one: "()", "(3,)" ("(3)" is no tuple),
       "(0, 1)" or "(0, 1,)" */
    int comma = 0;
    for (;;) {
        skip_sp(&p, end);
        if (p < end && *p == ')')
            break;
        uint64_t val = 0;
        int digits = 0;
        while (p < end && *p >= '0' && *p <= '9' && digits < 18) {
            val = val * 10 + (uint64_t)(*p++ - '0');
            digits++;
        }
        if (!digits || *n == SHS__MS_TUPLE_MAX)
            goto done;
        v[(*n)++] = val;
        skip_sp(&p, end);
        comma = p < end && *p == ',';
        if (comma) {
            p++;
            continue;
        }
        if (p < end && *p == ')')
            break;
        goto done;
    }
    if (*n == 1 && !comma)
        goto done;
    p++;
    skip_sp(&p, end);
    if (p >= end || *p++ != ')')
        goto done;
    skip_sp(&p, end);
    if (p != end)
        goto done;
    if (shs__buf_addc(&b, '\0') < 0) {
        rc = -2;
        goto done;
    }
    if (memchr(b.data, '\0', b.len - 1)) /* a NUL inside: no tensor name */
        goto done;
    *name = b.data;
    b.data = NULL;
    rc = 0;
done:
    shs__buf_release(&b);
    return rc;
}
