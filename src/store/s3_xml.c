/*
 * s3_xml.c -- the XML of S3 answers (ListObjectsV2, errors, multipart),
 * parsed by a small strict parser of our own.  An S3 server is a remote
 * party: its answers are hostile input like any file.  The parser builds
 * a flat tree of elements with their decoded text; it takes no DTD (so no
 * entity expansion), only the five predefined entities and character
 * references, well-formed nesting, bounded depth, count and size, and
 * valid UTF-8 without the control characters XML 1.0 forbids.
 */
#include "store/s3.h"

#include <stdlib.h>
#include <string.h>

#define XML_MAX_BYTES ((size_t)64 << 20)
#define XML_MAX_DEPTH 16
#define XML_MAX_NODES 500000u

typedef struct xnode {
    const char *name; /* into the document */
    size_t name_len;
    uint32_t parent; /* UINT32_MAX for the root */
    size_t text;     /* offset of its decoded text in the arena */
    size_t text_len;
    int has_text;  /* non-blank text directly inside */
    int has_child; /* has child elements (then its text is blanks) */
} xnode;

typedef struct xdoc {
    xnode *n;
    uint32_t count, cap;
    char *arena; /* decoded texts, each NUL-terminated */
    size_t arena_len;
    const char *what;
} xdoc;

static void xdoc_release(xdoc *d)
{
    shs__free(d->n);
    shs__free(d->arena);
    memset(d, 0, sizeof *d);
}

static int bad(const xdoc *d, const char *doc, const char *at, const char *why)
{
    return shs__err(SHS_ECORRUPT, "%s: malformed XML answer at byte %zu: %s", d->what,
                    (size_t)(at - doc), why);
}

static int name_start(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || c == ':' || c >= 0x80;
}

static int name_char(unsigned char c)
{
    return name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

static int blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static void put_utf8(char *out, size_t *o, uint32_t cp)
{
    if (cp < 0x80) {
        out[(*o)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*o)++] = (char)(0xc0 | (cp >> 6));
        out[(*o)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out[(*o)++] = (char)(0xe0 | (cp >> 12));
        out[(*o)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*o)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        out[(*o)++] = (char)(0xf0 | (cp >> 18));
        out[(*o)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        out[(*o)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*o)++] = (char)(0x80 | (cp & 0x3f));
    }
}

static int xml_char_ok(uint32_t cp)
{
    return cp == 0x9 || cp == 0xa || cp == 0xd || (cp >= 0x20 && cp <= 0xd7ff) ||
           (cp >= 0xe000 && cp <= 0xfffd) || (cp >= 0x10000 && cp <= 0x10ffff);
}

/* Decode the reference at *pp (just past '&'), appending to out.  A
   reference decodes to at most 4 bytes, never more than its own length
   (at least 4 bytes: "&lt;"), so the arena never outgrows the text. */
static int decode_ref(const xdoc *d, const char *doc, const char **pp, const char *end, char *out,
                      size_t *o)
{
    const char *p = *pp, *semi = memchr(p, ';', (size_t)(end - p) < 12 ? (size_t)(end - p) : 12);
    if (!semi)
        return bad(d, doc, p, "'&' without a reference");
    size_t n = (size_t)(semi - p);
    static const struct {
        const char *name;
        char c;
    } ents[] = { { "lt", '<' }, { "gt", '>' }, { "amp", '&' }, { "quot", '"' }, { "apos", '\'' } };
    for (size_t i = 0; i < sizeof ents / sizeof *ents; i++)
        if (n == strlen(ents[i].name) && memcmp(p, ents[i].name, n) == 0) {
            out[(*o)++] = ents[i].c;
            *pp = semi + 1;
            return SHS_OK;
        }
    if (n < 2 || p[0] != '#')
        return bad(d, doc, p, "unknown entity (only lt gt amp quot apos and &#N;)");
    int hex = p[1] == 'x';
    const char *q = p + 1 + hex;
    if (q == semi)
        return bad(d, doc, p, "empty character reference");
    uint32_t cp = 0;
    for (; q < semi; q++) {
        unsigned v;
        if (*q >= '0' && *q <= '9')
            v = (unsigned)(*q - '0');
        else if (hex && *q >= 'a' && *q <= 'f')
            v = (unsigned)(*q - 'a' + 10);
        else if (hex && *q >= 'A' && *q <= 'F')
            v = (unsigned)(*q - 'A' + 10);
        else
            return bad(d, doc, q, "bad digit in a character reference");
        cp = cp * (hex ? 16u : 10u) + v;
        if (cp > 0x10ffff)
            return bad(d, doc, p, "character reference out of range");
    }
    if (!xml_char_ok(cp))
        return bad(d, doc, p, "character reference to a character XML forbids");
    put_utf8(out, o, cp);
    *pp = semi + 1;
    return SHS_OK;
}

static int add_node(xdoc *d, const char *name, size_t len, uint32_t parent)
{
    if (d->count == d->cap) {
        if (d->cap >= XML_MAX_NODES)
            return shs__err(SHS_ECORRUPT, "%s: XML answer has more than %u elements", d->what,
                            XML_MAX_NODES);
        uint32_t cap = d->cap ? d->cap * 2 : 64;
        xnode *n = shs__realloc(d->n, (size_t)cap * sizeof *n);
        if (!n)
            return shs__err(SHS_ENOMEM, "out of memory parsing %s", d->what);
        d->n = n;
        d->cap = cap;
    }
    xnode *x = &d->n[d->count++];
    memset(x, 0, sizeof *x);
    x->name = name;
    x->name_len = len;
    x->parent = parent;
    return SHS_OK;
}

/* Skip the attributes of a start tag up to '>' or '/>'. */
static int skip_attrs(const xdoc *d, const char *doc, const char **pp, const char *end)
{
    const char *p = *pp;
    for (;;) {
        int sp = 0;
        while (p < end && blank(*p)) {
            p++;
            sp = 1;
        }
        if (p >= end)
            return bad(d, doc, p, "unterminated tag");
        if (*p == '>' || *p == '/') {
            *pp = p;
            return SHS_OK;
        }
        if (!sp || !name_start((unsigned char)*p))
            return bad(d, doc, p, "bad attribute");
        while (p < end && name_char((unsigned char)*p))
            p++;
        while (p < end && blank(*p))
            p++;
        if (p >= end || *p != '=')
            return bad(d, doc, p, "attribute without '='");
        p++;
        while (p < end && blank(*p))
            p++;
        if (p >= end || (*p != '"' && *p != '\''))
            return bad(d, doc, p, "attribute value not quoted");
        char q = *p++;
        const char *ve = memchr(p, q, (size_t)(end - p));
        if (!ve)
            return bad(d, doc, p, "unterminated attribute value");
        if (memchr(p, '<', (size_t)(ve - p)))
            return bad(d, doc, p, "'<' in an attribute value");
        p = ve + 1;
    }
}

static int parse_doc(xdoc *d, const char *doc, size_t len, const char *what)
{
    const char *p = doc, *end = doc + len;
    uint32_t stack[XML_MAX_DEPTH];
    int depth = 0, root_done = 0, rc;
    memset(d, 0, sizeof *d);
    d->what = what;
    if (len > XML_MAX_BYTES)
        return shs__err(SHS_ECORRUPT, "%s: XML answer of %zu bytes is too large", what, len);
    size_t bad_at = shs__utf8_check((const unsigned char *)doc, len);
    if (bad_at != len)
        return bad(d, doc, doc + bad_at, "not valid UTF-8");
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)doc[i];
        if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f)
            return bad(d, doc, doc + i, "control character");
    }
    if (!(d->arena = shs__malloc(len + 1)))
        return shs__err(SHS_ENOMEM, "out of memory parsing %s", what);
    /* the declaration, if any, comes first */
    if ((size_t)(end - p) >= 5 && memcmp(p, "<?xml", 5) == 0 && (end - p == 5 || blank(p[5]))) {
        const char *q = p + 5;
        for (; q + 1 < end && !(q[0] == '?' && q[1] == '>'); q++)
            if (*q == '<' || *q == '>')
                return bad(d, doc, q, "bad XML declaration");
        if (q + 1 >= end)
            return bad(d, doc, q, "unterminated XML declaration");
        p = q + 2;
    }
    while (p < end) {
        if (*p != '<') {
            /* text: outside the root only blanks */
            const char *lt = memchr(p, '<', (size_t)(end - p));
            const char *te = lt ? lt : end;
            if (depth == 0) {
                for (const char *q = p; q < te; q++)
                    if (!blank(*q))
                        return bad(d, doc, q, "text outside the root element");
                p = te;
                continue;
            }
            xnode *x = &d->n[stack[depth - 1]];
            size_t o = d->arena_len;
            while (p < te) {
                if (*p == '&') {
                    p++;
                    if ((rc = decode_ref(d, doc, &p, te, d->arena, &o)) < 0)
                        return rc;
                } else if (*p == '>' && p - doc >= 2 && p[-1] == ']' && p[-2] == ']') {
                    return bad(d, doc, p, "']]>' in text");
                } else {
                    d->arena[o++] = *p++;
                }
            }
            int nonblank = 0;
            for (size_t i = d->arena_len; i < o; i++)
                nonblank |= !blank(d->arena[i]);
            if (x->has_child) {
                /* S3 answers have no mixed content: between children,
                   only the blanks of pretty-printing */
                if (nonblank)
                    return bad(d, doc, p, "text beside child elements");
                continue;
            }
            x->has_text |= nonblank;
            x->text_len += o - d->arena_len;
            d->arena_len = o;
            continue;
        }
        if (end - p >= 2 && p[1] == '/') {
            /* end tag */
            const char *ns = p + 2, *ne = ns;
            while (ne < end && name_char((unsigned char)*ne))
                ne++;
            const char *q = ne;
            while (q < end && blank(*q))
                q++;
            if (q >= end || *q != '>')
                return bad(d, doc, p, "bad end tag");
            if (depth == 0)
                return bad(d, doc, p, "end tag without a start tag");
            const xnode *x = &d->n[stack[depth - 1]];
            if (x->name_len != (size_t)(ne - ns) || memcmp(x->name, ns, x->name_len) != 0)
                return bad(d, doc, p, "end tag does not match its start tag");
            if (!x->has_child)
                d->arena[d->arena_len++] = '\0';
            depth--;
            if (depth == 0)
                root_done = 1;
            p = q + 1;
            continue;
        }
        if (end - p >= 2 && (p[1] == '!' || p[1] == '?'))
            return bad(d, doc, p,
                       "comments, CDATA, DOCTYPE and processing instructions are not accepted");
        /* start tag */
        const char *ns = p + 1, *ne = ns;
        if (ne >= end || !name_start((unsigned char)*ne))
            return bad(d, doc, p, "bad start tag");
        while (ne < end && name_char((unsigned char)*ne))
            ne++;
        if (root_done)
            return bad(d, doc, p, "a second root element");
        if (depth == XML_MAX_DEPTH)
            return bad(d, doc, p, "elements nested too deeply");
        if (depth > 0 && d->n[stack[depth - 1]].has_text)
            return bad(d, doc, p, "text beside child elements");
        if (depth > 0 && !d->n[stack[depth - 1]].has_child) {
            /* the parent's text (blanks before its first child) ends here */
            d->n[stack[depth - 1]].has_child = 1;
            d->arena[d->arena_len++] = '\0';
        }
        if ((rc = add_node(d, ns, (size_t)(ne - ns), depth ? stack[depth - 1] : UINT32_MAX)) < 0)
            return rc;
        const char *q = ne;
        if ((rc = skip_attrs(d, doc, &q, end)) < 0)
            return rc;
        if (*q == '/') {
            if (q + 1 >= end || q[1] != '>')
                return bad(d, doc, q, "bad empty-element tag");
            d->n[d->count - 1].text = d->arena_len;
            d->arena[d->arena_len++] = '\0';
            if (depth == 0)
                root_done = 1;
            p = q + 2;
            continue;
        }
        stack[depth++] = d->count - 1;
        d->n[d->count - 1].text = d->arena_len;
        p = q + 1;
    }
    if (depth)
        return bad(d, doc, end, "unterminated element");
    if (!root_done)
        return bad(d, doc, end, "no root element");
    return SHS_OK;
}

static int name_is(const xnode *x, const char *name)
{
    size_t n = strlen(name);
    return x->name_len == n && memcmp(x->name, name, n) == 0;
}

static const char *text_of(const xdoc *d, const xnode *x)
{
    return d->arena + x->text;
}

/* The only child `name` of node `parent`: -1 none, -2 several. */
static long only_child(const xdoc *d, uint32_t parent, const char *name)
{
    long found = -1;
    for (uint32_t i = parent + 1; i < d->count; i++)
        if (d->n[i].parent == parent && name_is(&d->n[i], name)) {
            if (found >= 0)
                return -2;
            found = i;
        }
    return found;
}

static int parse_size(uint64_t *out, const char *s)
{
    uint64_t v = 0;
    if (!*s)
        return -1;
    for (; *s; s++) {
        uint64_t dgt = (uint64_t)(*s - '0');
        if (*s < '0' || *s > '9' || v > (UINT64_MAX - dgt) / 10)
            return -1;
        v = v * 10 + dgt;
    }
    *out = v;
    return 0;
}

/* Parse a document whose root must be <root>. */
static int open_doc(xdoc *d, const char *xml, size_t len, const char *what, const char *root)
{
    int rc = parse_doc(d, xml, len, what);
    if (rc == SHS_OK && !name_is(&d->n[0], root))
        rc = shs__err(SHS_ECORRUPT, "%s: answer is a <%.*s>, not a <%s>", what,
                      (int)(d->n[0].name_len > 64 ? 64 : d->n[0].name_len), d->n[0].name, root);
    return rc;
}

void shs__s3_list_page_release(shs__s3_list_page *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->nkeys; i++)
        shs__free(p->keys[i]);
    for (size_t i = 0; i < p->nprefixes; i++)
        shs__free(p->prefixes[i]);
    shs__free(p->keys);
    shs__free(p->sizes);
    shs__free(p->prefixes);
    shs__free(p->next_token);
    memset(p, 0, sizeof *p);
}

static int key_text_ok(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return 0;
    return len > 0;
}

int shs__s3_parse_list(shs__s3_list_page *out, const char *xml, size_t len, const char *what)
{
    xdoc d;
    memset(out, 0, sizeof *out);
    int rc = open_doc(&d, xml, len, what, "ListBucketResult");
    if (rc < 0)
        goto done;
    size_t nk = 0, np = 0;
    for (uint32_t i = 1; i < d.count; i++)
        if (d.n[i].parent == 0) {
            nk += name_is(&d.n[i], "Contents");
            np += name_is(&d.n[i], "CommonPrefixes");
        }
    if ((nk && (!(out->keys = shs__calloc(nk, sizeof *out->keys)) ||
                !(out->sizes = shs__calloc(nk, sizeof *out->sizes)))) ||
        (np && !(out->prefixes = shs__calloc(np, sizeof *out->prefixes)))) {
        rc = shs__err(SHS_ENOMEM, "out of memory parsing %s", what);
        goto done;
    }
    long t = only_child(&d, 0, "IsTruncated");
    if (t == -2) {
        rc = shs__err(SHS_ECORRUPT, "%s: <IsTruncated> given twice", what);
        goto done;
    }
    if (t >= 0) {
        const char *v = text_of(&d, &d.n[t]);
        if (strcmp(v, "true") == 0)
            out->truncated = 1;
        else if (strcmp(v, "false") != 0) {
            rc = shs__err(SHS_ECORRUPT, "%s: <IsTruncated> is neither true nor false", what);
            goto done;
        }
    }
    long tok = only_child(&d, 0, "NextContinuationToken");
    if (tok == -2) {
        rc = shs__err(SHS_ECORRUPT, "%s: <NextContinuationToken> given twice", what);
        goto done;
    }
    if (out->truncated) {
        if (tok < 0 || !d.n[tok].text_len) {
            rc = shs__err(SHS_ECORRUPT, "%s: truncated listing without a continuation token", what);
            goto done;
        }
        if (!(out->next_token = shs__strdup(text_of(&d, &d.n[tok])))) {
            rc = shs__err(SHS_ENOMEM, "out of memory parsing %s", what);
            goto done;
        }
    }
    for (uint32_t i = 1; i < d.count; i++) {
        if (d.n[i].parent != 0)
            continue;
        int contents = name_is(&d.n[i], "Contents");
        if (!contents && !name_is(&d.n[i], "CommonPrefixes"))
            continue;
        long k = only_child(&d, i, contents ? "Key" : "Prefix");
        if (k < 0) {
            rc = shs__err(SHS_ECORRUPT, "%s: a <%s> with %s <%s>", what,
                          contents ? "Contents" : "CommonPrefixes",
                          k == -1 ? "no" : "more than one", contents ? "Key" : "Prefix");
            goto done;
        }
        const xnode *kn = &d.n[k];
        if (!key_text_ok(text_of(&d, kn), kn->text_len)) {
            rc = shs__err(SHS_ECORRUPT, "%s: empty key, or a key holding a control character",
                          what);
            goto done;
        }
        char *dup = shs__strndup(text_of(&d, kn), kn->text_len);
        if (!dup) {
            rc = shs__err(SHS_ENOMEM, "out of memory parsing %s", what);
            goto done;
        }
        if (!contents) {
            out->prefixes[out->nprefixes++] = dup;
            continue;
        }
        out->keys[out->nkeys] = dup;
        long s = only_child(&d, i, "Size");
        if (s < 0 || parse_size(&out->sizes[out->nkeys], text_of(&d, &d.n[s])) < 0) {
            out->nkeys++;
            rc = shs__err(SHS_ECORRUPT, "%s: key '%s' has %s", what, dup,
                          s < 0 ? "no single <Size>" : "a <Size> that is not a whole number");
            goto done;
        }
        out->nkeys++;
    }
done:
    if (rc < 0)
        shs__s3_list_page_release(out);
    xdoc_release(&d);
    return rc;
}

int shs__s3_xml_text(char **out, const char *xml, size_t len, const char *path, const char *what)
{
    xdoc d;
    int rc;
    *out = NULL;
    if ((rc = parse_doc(&d, xml, len, what)) < 0)
        goto done;
    long cur = -1;
    const char *seg = path;
    while (*seg) {
        const char *se = strchr(seg, '/');
        size_t sl = se ? (size_t)(se - seg) : strlen(seg);
        char name[64];
        if (sl >= sizeof name) {
            rc = shs__err(SHS_EINVAL, "XML path too long");
            goto done;
        }
        memcpy(name, seg, sl);
        name[sl] = '\0';
        if (cur < 0) {
            if (!name_is(&d.n[0], name))
                goto done;
            cur = 0;
        } else {
            long c = only_child(&d, (uint32_t)cur, name);
            if (c == -2) {
                rc = shs__err(SHS_ECORRUPT, "%s: <%s> given twice", what, name);
                goto done;
            }
            if (c < 0)
                goto done;
            cur = c;
        }
        seg = se ? se + 1 : seg + sl;
    }
    if (cur >= 0 && !(*out = shs__strndup(text_of(&d, &d.n[cur]), d.n[cur].text_len)))
        rc = shs__err(SHS_ENOMEM, "out of memory parsing %s", what);
done:
    xdoc_release(&d);
    return rc;
}

int shs__s3_parse_uploads(shs__s3_uploads_page *out, const char *xml, size_t len, const char *what)
{
    xdoc d;
    memset(out, 0, sizeof *out);
    int rc = open_doc(&d, xml, len, what, "ListMultipartUploadsResult");
    if (rc < 0)
        goto done;
    size_t n = 0;
    for (uint32_t i = 1; i < d.count; i++)
        n += d.n[i].parent == 0 && name_is(&d.n[i], "Upload");
    if (n && (!(out->keys = shs__calloc(n, sizeof *out->keys)) ||
              !(out->ids = shs__calloc(n, sizeof *out->ids)))) {
        rc = shs__err(SHS_ENOMEM, "out of memory parsing %s", what);
        goto done;
    }
    long t = only_child(&d, 0, "IsTruncated");
    out->truncated = t >= 0 && strcmp(text_of(&d, &d.n[t]), "true") == 0;
    static const char *const markers[2] = { "NextKeyMarker", "NextUploadIdMarker" };
    char **dst[2] = { &out->next_key, &out->next_id };
    for (int k = 0; k < 2 && out->truncated; k++) {
        long m = only_child(&d, 0, markers[k]);
        if (m < 0 || !(*dst[k] = shs__strdup(text_of(&d, &d.n[m])))) {
            rc = m < 0 ? shs__err(SHS_ECORRUPT, "%s: truncated listing without <%s>", what,
                                  markers[k])
                       : shs__err(SHS_ENOMEM, "out of memory parsing %s", what);
            goto done;
        }
    }
    for (uint32_t i = 1; i < d.count; i++) {
        if (d.n[i].parent != 0 || !name_is(&d.n[i], "Upload"))
            continue;
        long k = only_child(&d, i, "Key"), u = only_child(&d, i, "UploadId");
        if (k < 0 || u < 0 || !key_text_ok(text_of(&d, &d.n[k]), d.n[k].text_len) ||
            !key_text_ok(text_of(&d, &d.n[u]), d.n[u].text_len)) {
            rc = shs__err(SHS_ECORRUPT, "%s: an <Upload> without a single valid Key and UploadId",
                          what);
            goto done;
        }
        out->keys[out->n] = shs__strdup(text_of(&d, &d.n[k]));
        out->ids[out->n] = shs__strdup(text_of(&d, &d.n[u]));
        if (!out->keys[out->n++] || !out->ids[out->n - 1]) {
            rc = shs__err(SHS_ENOMEM, "out of memory parsing %s", what);
            goto done;
        }
    }
done:
    if (rc < 0)
        shs__s3_uploads_page_release(out);
    xdoc_release(&d);
    return rc;
}

void shs__s3_uploads_page_release(shs__s3_uploads_page *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++) {
        shs__free(p->keys[i]);
        shs__free(p->ids[i]);
    }
    shs__free(p->keys);
    shs__free(p->ids);
    shs__free(p->next_key);
    shs__free(p->next_id);
    memset(p, 0, sizeof *p);
}
