/* util.c -- growable buffers, JSON string escaping, UTF-8 validation. */
#include "common/internal.h"

#include <stdio.h>
#include <string.h>

int shs__buf_grow(shs__buf *b, size_t extra)
{
    size_t need;
    if (__builtin_add_overflow(b->len, extra, &need) || need == SIZE_MAX)
        return shs__err(SHS_ENOMEM, "buffer size overflow");
    if (need + 1 <= b->cap)
        return SHS_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need + 1)
        cap = cap > SIZE_MAX / 2 ? need + 1 : cap * 2;
    char *p = shs__realloc(b->data, cap);
    if (!p)
        return shs__err(SHS_ENOMEM, "out of memory growing a buffer to %zu bytes", cap);
    b->data = p;
    b->cap = cap;
    return SHS_OK;
}

int shs__buf_add(shs__buf *b, const void *data, size_t len)
{
    int rc = shs__buf_grow(b, len);
    if (rc < 0)
        return rc;
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return SHS_OK;
}

int shs__buf_addc(shs__buf *b, char c)
{
    return shs__buf_add(b, &c, 1);
}

int shs__buf_addf(shs__buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return shs__err(SHS_EINVAL, "bad format");
    int rc = shs__buf_grow(b, (size_t)n);
    if (rc < 0)
        return rc;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return SHS_OK;
}

void shs__dims_text(char *buf, size_t cap, const uint64_t *v, size_t n)
{
    size_t at = 0;
    if (cap)
        buf[0] = '\0';
    for (size_t d = 0; d < n && at < cap; d++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%llu", d ? ", " : "",
                               (unsigned long long)v[d]);
}

void shs__buf_release(shs__buf *b)
{
    shs__free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

int shs__json_escape(shs__buf *b, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    int rc = shs__buf_grow(b, len + 2);
    if (rc < 0)
        return rc;
    b->data[b->len++] = '"';
    size_t run = 0; /* start of the pending run of plain bytes */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[6];
        size_t n = 0;
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            n = 2;
        } else if (c < 0x20) {
            esc[0] = '\\';
            n = 2;
            switch (c) {
            case '\b': esc[1] = 'b'; break;
            case '\f': esc[1] = 'f'; break;
            case '\n': esc[1] = 'n'; break;
            case '\r': esc[1] = 'r'; break;
            case '\t': esc[1] = 't'; break;
            default:
                esc[1] = 'u';
                esc[2] = '0';
                esc[3] = '0';
                esc[4] = hex[c >> 4];
                esc[5] = hex[c & 15];
                n = 6;
            }
        } else {
            continue;
        }
        if ((rc = shs__buf_add(b, s + run, i - run)) < 0 || (rc = shs__buf_add(b, esc, n)) < 0)
            return rc;
        run = i + 1;
    }
    if ((rc = shs__buf_add(b, s + run, len - run)) < 0)
        return rc;
    return shs__buf_addc(b, '"');
}

size_t shs__utf8_check(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        /* fast path: 8 ASCII bytes at a time */
        if (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            n = 2;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 3;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 4;
            cp = c & 0x07;
        } else
            return i;
        if (i + n > len)
            return i;
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return i;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || (cp >= 0xD800 && cp <= 0xDFFF) ||
            cp > 0x10FFFF)
            return i;
        i += n;
    }
    return len;
}
