/*
 * json_doc.c -- JSON documents as a tree, from the strict scanner
 * (json_doc.h).  The nesting is an explicit stack, never the C stack.
 */
#include "format/json_doc.h"

#include "format/st_json.h"
#include "store/io.h"

#include <locale.h>
#include <pthread.h>
#include <stdlib.h>
#include <jansson.h>
#include <string.h>

#define MAX_DEPTH 2048 /* nested containers, as metadata.json's reader */

/* strtod in the "C" locale: the caller's LC_NUMERIC (a host program or
   Python may set one) must not change what "0.5" means. */
static locale_t g_c_locale;
static pthread_once_t g_c_locale_once = PTHREAD_ONCE_INIT;
static void make_c_locale(void)
{
    g_c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
}
static double c_strtod(const char *s)
{
    pthread_once(&g_c_locale_once, make_c_locale);
    return g_c_locale ? strtod_l(s, NULL, g_c_locale) : strtod(s, NULL);
}

static int oom(const char *fname)
{
    return shs__err(SHS_ENOMEM, "%s: out of memory parsing it", fname);
}

/* A new node (index into d->v), linked as the last child of `parent`
   (whose last child so far is *last) unless the document is empty. */
static int add_node(shs__jdoc *d, uint32_t *out, const char *fname)
{
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 64;
        if (cap > UINT32_MAX)
            return shs__err(SHS_ECORRUPT, "%s: too many JSON values", fname);
        shs__jnode *v = shs__realloc(d->v, cap * sizeof *v);
        if (!v)
            return oom(fname);
        d->v = v;
        d->cap = cap;
    }
    memset(&d->v[d->n], 0, sizeof d->v[d->n]);
    *out = (uint32_t)d->n++;
    return SHS_OK;
}

/* One scalar, or the start of a container, at js->p into node v (its
   raw span: the scalar, or the opening bracket until the container
   closes). */
static int scan_one(shs__json *js, shs__jnode *v)
{
    int rc, is_uint = 0;
    uint64_t u = 0;
    if (js->p >= js->end)
        return shs__json_syntax_err(js, "unexpected end of file");
    const char *start = js->p;
    v->raw = (size_t)(js->p - js->start);
    switch (*js->p) {
    case '{':
        v->type = SHS__J_OBJ;
        js->p++;
        return SHS_OK;
    case '[':
        v->type = SHS__J_ARR;
        js->p++;
        return SHS_OK;
    case '"': v->type = SHS__J_STR; return shs__json_string(js, &v->s, &v->len);
    case 't': v->type = SHS__J_TRUE; return shs__json_literal(js, "true", 4);
    case 'f': v->type = SHS__J_FALSE; return shs__json_literal(js, "false", 5);
    case 'n': v->type = SHS__J_NULL; return shs__json_literal(js, "null", 4);
    default:
        if ((rc = shs__json_number(js, &is_uint, &u)) < 0)
            return rc;
        v->type = SHS__J_NUM;
        v->is_uint = (uint8_t)is_uint;
        v->u = u;
        v->is_integer = 1;
        for (const char *q = start; q < js->p; q++)
            if (*q == '.' || *q == 'e' || *q == 'E')
                v->is_integer = 0;
        /* the scanner checked the syntax and the range: strtod reads the
           same span (a copy: the text is not NUL-terminated) */
        char buf[64];
        size_t n = (size_t)(js->p - start);
        if (n < sizeof buf) {
            memcpy(buf, start, n);
            buf[n] = '\0';
            v->d = c_strtod(buf);
        } else {
            char *big = shs__strndup(start, n);
            if (!big)
                return oom(js->fname);
            v->d = c_strtod(big);
            shs__free(big);
        }
        return SHS_OK;
    }
}

static int scan_value(shs__json *js, shs__jnode *v)
{
    int rc = scan_one(js, v);
    v->raw_len = (size_t)(js->p - js->start) - v->raw;
    return rc;
}

static int cmp_key(const shs__jdoc *d, uint32_t a, uint32_t b)
{
    const shs__jnode *x = &d->v[a], *y = &d->v[b];
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(x->key, y->key, n);
    return c ? c : (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

/* Heap sort of an object's children by key (no recursion, no qsort
   context argument needed). */
static void sift(const shs__jdoc *d, uint32_t *a, size_t i, size_t n)
{
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && cmp_key(d, a[c], a[c + 1]) < 0)
            c++;
        if (cmp_key(d, a[i], a[c]) >= 0)
            return;
        uint32_t t = a[i];
        a[i] = a[c];
        a[c] = t;
        i = c;
    }
}

/* The container at node o closed: its children indexed (an array's in
   order, an object's sorted by key: a key repeated is an error). */
static int index_container(shs__jdoc *d, uint32_t o, const char *fname)
{
    shs__jnode *v = &d->v[o];
    if (!v->n)
        return SHS_OK;
    uint32_t *a = shs__malloc(v->n * sizeof *a);
    if (!a)
        return oom(fname);
    size_t k = 0;
    for (uint32_t c = v->first; k < v->n; c = d->v[c].next)
        a[k++] = c;
    if (v->type == SHS__J_ARR) {
        v->idx = a;
        return SHS_OK;
    }
    for (size_t i = k / 2; i-- > 0;)
        sift(d, a, i, k);
    for (size_t end = k; end-- > 1;) {
        uint32_t t = a[0];
        a[0] = a[end];
        a[end] = t;
        sift(d, a, 0, end);
    }
    d->v[o].idx = a;
    for (size_t i = 1; i < k; i++)
        if (cmp_key(d, a[i - 1], a[i]) == 0)
            return shs__err(SHS_ECORRUPT, "%s: invalid JSON: duplicate key '%.*s'", fname,
                            (int)(d->v[a[i]].key_len > 200 ? 200 : d->v[a[i]].key_len),
                            d->v[a[i]].key);
    return SHS_OK;
}

int shs__jdoc_parse(shs__jdoc *d, const char *text, size_t len, const char *fname)
{
    uint32_t stack[MAX_DEPTH], last[MAX_DEPTH];
    size_t depth = 0;
    int rc, fresh = 0;
    uint32_t root;
    shs__json js;
    memset(d, 0, sizeof *d);
    memset(&js, 0, sizeof js);
    js.p = js.start = text;
    js.end = text + len;
    js.fname = fname;
    js.meta = 1;
    if (!(d->arena = js.arena = shs__malloc(len + 1)))
        return oom(fname);
    /* JSON text is UTF-8: checked once, as metadata.json's scan does */
    size_t bad = shs__utf8_check((const unsigned char *)text, len);
    if (bad != len) {
        js.p = text + bad;
        rc = shs__json_syntax_err(&js, "not UTF-8");
        goto done;
    }
    shs__json_skip_ws(&js);
    if ((rc = add_node(d, &root, fname)) < 0 || (rc = scan_value(&js, &d->v[root])) < 0)
        goto done;
    if (d->v[root].type >= SHS__J_ARR) {
        stack[depth++] = root;
        fresh = 1;
    }
    while (depth > 0) {
        uint32_t top = stack[depth - 1];
        char close = d->v[top].type == SHS__J_OBJ ? '}' : ']';
        int more;
        if (fresh) {
            shs__json_skip_ws(&js);
            more = !(js.p < js.end && *js.p == close);
            if (!more)
                js.p++;
        } else if ((more = shs__json_next_member(&js, close)) < 0) {
            rc = more;
            goto done;
        }
        fresh = 0;
        if (!more) {
            if ((rc = index_container(d, top, fname)) < 0)
                goto done;
            d->v[top].raw_len = (size_t)(js.p - js.start) - d->v[top].raw;
            depth--;
            continue;
        }
        const char *key = NULL;
        size_t key_len = 0;
        if (close == '}' && (rc = shs__json_key(&js, &key, &key_len)) < 0)
            goto done;
        shs__json_skip_ws(&js);
        uint32_t c;
        if ((rc = add_node(d, &c, fname)) < 0 || (rc = scan_value(&js, &d->v[c])) < 0)
            goto done;
        d->v[c].key = key;
        d->v[c].key_len = key_len;
        if (d->v[top].n++ == 0)
            d->v[top].first = c;
        else
            d->v[last[depth - 1]].next = c;
        last[depth - 1] = c;
        if (d->v[c].type >= SHS__J_ARR) {
            if (depth == MAX_DEPTH) {
                rc = shs__json_syntax_err(&js, "too many nested containers");
                goto done;
            }
            stack[depth++] = c;
            fresh = 1;
        }
    }
    shs__json_skip_ws(&js);
    if (js.p != js.end)
        rc = shs__json_syntax_err(&js, "end of file expected");
done:
    shs__free(js.nk);
    if (rc < 0)
        shs__jdoc_free(d);
    return rc;
}

void shs__jdoc_free(shs__jdoc *d)
{
    for (size_t i = 0; i < d->n; i++)
        shs__free(d->v[i].idx);
    shs__free(d->v);
    shs__free(d->arena);
    shs__free(d->text);
    memset(d, 0, sizeof *d);
}

const shs__jnode *shs__jget_n(const shs__jdoc *d, const shs__jnode *obj, const char *key,
                              size_t key_len)
{
    if (!obj || obj->type != SHS__J_OBJ || !obj->idx)
        return NULL;
    size_t lo = 0, hi = obj->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const shs__jnode *m = &d->v[obj->idx[mid]];
        size_t n = m->key_len < key_len ? m->key_len : key_len;
        int c = memcmp(m->key, key, n);
        if (!c)
            c = (m->key_len > key_len) - (m->key_len < key_len);
        if (!c)
            return m;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const shs__jnode *shs__jget(const shs__jdoc *d, const shs__jnode *obj, const char *key)
{
    return shs__jget_n(d, obj, key, strlen(key));
}

const shs__jnode *shs__jfirst(const shs__jdoc *d, const shs__jnode *v)
{
    return v && v->type >= SHS__J_ARR && v->n ? &d->v[v->first] : NULL;
}

const shs__jnode *shs__jnext(const shs__jdoc *d, const shs__jnode *v)
{
    return v && v->next ? &d->v[v->next] : NULL;
}

const shs__jnode *shs__jat(const shs__jdoc *d, const shs__jnode *arr, size_t i)
{
    return arr && arr->type == SHS__J_ARR && i < arr->n ? &d->v[arr->idx[i]] : NULL;
}

int shs__jint(const shs__jnode *v, int64_t *out)
{
    if (!v || v->type != SHS__J_NUM || !v->is_integer || (v->is_uint && v->u > INT64_MAX))
        return 0;
    /* the dialect keeps integers within int64: |v| <= 2^63 */
    *out = v->is_uint                        ? (int64_t)v->u
           : v->u == (uint64_t)INT64_MAX + 1 ? INT64_MIN
                                             : -(int64_t)v->u;
    return 1;
}

const char *shs__jstr(const shs__jdoc *d, const shs__jnode *obj, const char *key)
{
    const shs__jnode *v = shs__jget(d, obj, key);
    return v && v->type == SHS__J_STR ? v->s : NULL;
}

int shs__jdoc_load(shs__jdoc *d, const char *path, size_t max)
{
    char *text = NULL;
    size_t len = 0;
    memset(d, 0, sizeof *d);
    int rc = shs__read_file(&text, &len, path, max);
    if (rc == SHS_OK && (rc = shs__jdoc_parse(d, text, len, path)) == SHS_OK) {
        d->text = text;
        return SHS_OK;
    }
    shs__free(text);
    return rc;
}

/* One value and, below it, its children (depth capped by the parser). */
static int to_jansson(json_t **out, const shs__jdoc *d, const shs__jnode *v, const char *fname)
{
    json_t *j = NULL;
    int64_t i;
    *out = NULL;
    switch (v->type) {
    case SHS__J_NULL: j = json_null(); break;
    case SHS__J_FALSE: j = json_false(); break;
    case SHS__J_TRUE: j = json_true(); break;
    case SHS__J_NUM:
        if (v->is_integer && !shs__jint(v, &i))
            return shs__err(SHS_ECORRUPT, "%s: an integer beyond 64 bits", fname);
        j = v->is_integer ? json_integer((json_int_t)i) : json_real(v->d);
        break;
    case SHS__J_STR:
        if (strlen(v->s) != v->len)
            return shs__err(SHS_ECORRUPT, "%s: a string holds a NUL (\\u0000)", fname);
        j = json_stringn(v->s, v->len);
        break;
    default:
        j = v->type == SHS__J_ARR ? json_array() : json_object();
        for (const shs__jnode *c = shs__jfirst(d, v); j && c; c = shs__jnext(d, c)) {
            json_t *cj;
            int rc = to_jansson(&cj, d, c, fname);
            if (rc == SHS_OK && v->type == SHS__J_OBJ && strlen(c->key) != c->key_len) {
                json_decref(cj);
                rc = shs__err(SHS_ECORRUPT, "%s: a key holds a NUL (\\u0000)", fname);
            }
            if (rc < 0) {
                json_decref(j);
                return rc;
            }
            if ((v->type == SHS__J_ARR ? json_array_append_new(j, cj)
                                       : json_object_set_new_nocheck(j, c->key, cj)) < 0) {
                json_decref(j);
                j = NULL;
            }
        }
    }
    if (!j)
        return shs__err(SHS_ENOMEM, "out of memory reading %s", fname);
    *out = j;
    return SHS_OK;
}

int shs__jdoc_to_jansson(json_t **out, const shs__jdoc *d, const shs__jnode *v, const char *fname)
{
    return v ? to_jansson(out, d, v, fname)
             : (*out = NULL, shs__err(SHS_ECORRUPT, "%s: empty document", fname));
}
