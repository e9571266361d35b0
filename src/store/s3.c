/*
 * s3.c -- the S3 client: requests signed by libcurl (SigV4), run by a
 * curl_multi driver that retries each request on its own with capped
 * exponential backoff and full jitter; the operations the store needs.
 * See s3.h for the facts about curl 7.88 and radosgw this code relies on.
 */
#include "store/s3_int.h"

#include "store/io.h"

#include <errno.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RESP_MAX_XML ((size_t)64 << 20) /* a listing page, an error body */
#define RESP_MAX_ERR ((size_t)64 << 10)
#define SHA256_EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

struct shs__s3 {
    shs__s3_config cfg;
    char sigv4[96];
    char *userpwd_user, *userpwd_pass;
    CURLSH *share;
    pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST];
    pthread_mutex_t mu; /* the fields below */
    int have_date;
    int64_t server_date; /* seconds, at date_mono_ms */
    uint64_t date_mono_ms;
    uint64_t requests; /* __atomic */
};

/* ---- small pieces ---- */

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* A draw for the backoff's jitter (not cryptographic). */
static uint64_t rand64(void)
{
    char hex[17];
    shs__random_suffix(hex);
    return strtoull(hex, NULL, 16);
}

const char *s3_name(char *buf, size_t cap, const char *bucket, const char *key)
{
    snprintf(buf, cap, "s3://%s/%s", bucket, key ? key : "");
    return buf;
}

int shs__s3_uri_encode(shs__buf *b, const char *s, size_t len, int keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    int rc = shs__buf_grow(b, len * 3);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '.' || c == '_' || c == '~' || (c == '/' && keep_slash)) {
            b->data[b->len++] = (char)c;
        } else {
            b->data[b->len++] = '%';
            b->data[b->len++] = hex[c >> 4];
            b->data[b->len++] = hex[c & 15];
        }
    }
    b->data[b->len] = '\0';
    return SHS_OK;
}

typedef struct qpair {
    char *name, *value; /* encoded */
} qpair;

static int cmp_qpair(const void *a, const void *b)
{
    const qpair *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->value, y->value);
}

int shs__s3_canonical_query(shs__buf *out, const char *const *names, const char *const *values,
                            size_t n)
{
    qpair *p = n ? shs__calloc(n, sizeof *p) : NULL;
    int rc = SHS_OK;
    if (n && !p)
        return shs__err(SHS_ENOMEM, "out of memory");
    for (size_t i = 0; i < n && rc == SHS_OK; i++) {
        shs__buf a = SHS__BUF_INIT, v = SHS__BUF_INIT;
        const char *val = values[i] ? values[i] : "";
        if ((rc = shs__s3_uri_encode(&a, names[i], strlen(names[i]), 0)) == SHS_OK)
            rc = shs__s3_uri_encode(&v, val, strlen(val), 0);
        p[i].name = a.data ? a.data : shs__strdup("");
        p[i].value = v.data ? v.data : shs__strdup("");
        if (rc == SHS_OK && (!p[i].name || !p[i].value))
            rc = shs__err(SHS_ENOMEM, "out of memory");
    }
    if (rc == SHS_OK && n > 1)
        qsort(p, n, sizeof *p, cmp_qpair);
    out->len = 0;
    if (rc == SHS_OK)
        rc = shs__buf_add(out, "", 0);
    for (size_t i = 0; i < n && rc == SHS_OK; i++)
        rc = shs__buf_addf(out, "%s%s=%s", i ? "&" : "", p[i].name, p[i].value);
    for (size_t i = 0; i < n; i++) {
        shs__free(p[i].name);
        shs__free(p[i].value);
    }
    shs__free(p);
    return rc;
}

uint64_t shs__s3_backoff_ms(const shs__s3_retry *r, unsigned attempt, uint64_t rnd)
{
    uint64_t window = r->base_ms;
    for (unsigned i = 2; i < attempt && window < r->cap_ms; i++)
        window = window > UINT64_MAX / 2 ? UINT64_MAX : window * 2;
    if (window > r->cap_ms)
        window = r->cap_ms;
    return window ? rnd % (window + 1) : 0;
}

int shs__s3_retryable(int curl_code, long http, const char *code)
{
    if (curl_code != CURLE_OK) {
        switch (curl_code) {
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_CONNECT:
        case CURLE_OPERATION_TIMEDOUT:
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE:
        case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_WEIRD_SERVER_REPLY:
        case CURLE_SEND_FAIL_REWIND: return 1;
        default: return 0;
        }
    }
    if (http >= 500 || http == 429)
        return 1;
    /* throttling and a server that timed out reading a slow body answer
       4xx codes in some services */
    return code && (strcmp(code, "SlowDown") == 0 || strcmp(code, "RequestTimeout") == 0 ||
                    strcmp(code, "Throttling") == 0 || strcmp(code, "RequestTimeTooSkewed") == 0 ||
                    strcmp(code, "InternalError") == 0);
}

/* "Sun, 06 Nov 1994 08:49:37 GMT" -> seconds since the epoch; -1 if not. */
static int64_t parse_http_date(const char *s, size_t n)
{
    static const char mons[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    char buf[64];
    if (n >= sizeof buf)
        return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    int d, y, hh, mm, ss;
    char mon[4];
    if (sscanf(buf, "%*3s, %2d %3s %4d %2d:%2d:%2d GMT", &d, mon, &y, &hh, &mm, &ss) != 6)
        return -1;
    const char *m = strstr(mons, mon);
    if (!m || strlen(mon) != 3 || (m - mons) % 3)
        return -1;
    int mo = (int)(m - mons) / 3 + 1;
    if (y < 1970 || d < 1 || d > 31 || hh > 23 || mm > 59 || ss > 60)
        return -1;
    /* days from civil (Howard Hinnant's algorithm) */
    int yy = y - (mo <= 2);
    int era = yy / 400;
    int yoe = yy - era * 400;
    int doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    int64_t days = (int64_t)era * 146097 + doe - 719468;
    return days * 86400 + hh * 3600 + mm * 60 + ss;
}

/* ---- the client ---- */

static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static CURLcode g_curl_init;

static void curl_init_once(void)
{
    g_curl_init = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ctx)
{
    shs__s3 *s3 = ctx;
    pthread_mutex_lock(&s3->share_mu[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ctx)
{
    shs__s3 *s3 = ctx;
    pthread_mutex_unlock(&s3->share_mu[data]);
}

static int dup_cfg(shs__s3_config *d, const shs__s3_config *s)
{
    *d = *s;
    d->scheme = shs__strdup(s->scheme);
    d->host = shs__strdup(s->host);
    d->base_path = shs__strdup(s->base_path ? s->base_path : "");
    d->region = shs__strdup(s->region);
    d->access_key = shs__strdup(s->access_key);
    d->secret_key = shs__strdup(s->secret_key);
    d->session_token = s->session_token ? shs__strdup(s->session_token) : NULL;
    d->profile = s->profile ? shs__strdup(s->profile) : NULL;
    if (!d->scheme || !d->host || !d->base_path || !d->region || !d->access_key || !d->secret_key ||
        (s->session_token && !d->session_token) || (s->profile && !d->profile))
        return shs__err(SHS_ENOMEM, "out of memory");
    return SHS_OK;
}

int shs__s3_open(shs__s3 **out, const shs__s3_config *cfg)
{
    *out = NULL;
    if (!cfg || !cfg->scheme || !cfg->host || !cfg->region || !cfg->access_key ||
        !cfg->secret_key || cfg->part_size < SHS__S3_MIN_PART || !cfg->parallel ||
        !cfg->retry.max_attempts)
        return shs__err(SHS_EINVAL, "S3 client: incomplete configuration");
    pthread_once(&g_curl_once, curl_init_once);
    if (g_curl_init != CURLE_OK)
        return shs__err(SHS_EIO, "cannot initialise libcurl: %s", curl_easy_strerror(g_curl_init));
    shs__s3 *s3 = shs__calloc(1, sizeof *s3);
    if (!s3)
        return shs__err(SHS_ENOMEM, "out of memory");
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&s3->share_mu[i], NULL);
    pthread_mutex_init(&s3->mu, NULL);
    int rc = dup_cfg(&s3->cfg, cfg);
    if (rc < 0)
        goto fail;
    snprintf(s3->sigv4, sizeof s3->sigv4, "aws:amz:%s:s3", cfg->region);
    if (!(s3->share = curl_share_init())) {
        rc = shs__err(SHS_ENOMEM, "out of memory (curl_share_init)");
        goto fail;
    }
    curl_share_setopt(s3->share, CURLSHOPT_LOCKFUNC, share_lock);
    curl_share_setopt(s3->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
    curl_share_setopt(s3->share, CURLSHOPT_USERDATA, s3);
    curl_share_setopt(s3->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(s3->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
    *out = s3;
    return SHS_OK;
fail:
    shs__s3_close(s3);
    return rc;
}

void shs__s3_close(shs__s3 *s3)
{
    if (!s3)
        return;
    if (s3->share)
        curl_share_cleanup(s3->share);
    shs__s3_config_release(&s3->cfg);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&s3->share_mu[i]);
    pthread_mutex_destroy(&s3->mu);
    shs__free(s3);
}

const shs__s3_config *shs__s3_cfg(const shs__s3 *s3)
{
    return &s3->cfg;
}

uint64_t shs__s3_requests(const shs__s3 *s3)
{
    return __atomic_load_n(&s3->requests, __ATOMIC_RELAXED);
}

int64_t shs__s3_server_time(shs__s3 *s3)
{
    int64_t t;
    pthread_mutex_lock(&s3->mu);
    if (s3->have_date)
        t = s3->server_date + (int64_t)((mono_ms() - s3->date_mono_ms) / 1000u);
    else
        t = (int64_t)time(NULL);
    pthread_mutex_unlock(&s3->mu);
    return t;
}

/* ---- one request ---- */

static int dns_bucket(const char *b)
{
    size_t n = strlen(b);
    if (n < 3 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '-'))
            return 0; /* '.' breaks TLS names in virtual-hosted style */
    return 1;
}

static void hex_sha256(char out[65], const void *data, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256(data, len, md);
    for (int i = 0; i < SHA256_DIGEST_LENGTH; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[64] = '\0';
}

static int add_header(s3_req *r, const char *h)
{
    struct curl_slist *n = curl_slist_append(r->hdrs, h);
    if (!n)
        return shs__err(SHS_ENOMEM, "out of memory");
    r->hdrs = n;
    return SHS_OK;
}

void s3_req_release(s3_req *r)
{
    if (!r)
        return;
    shs__free(r->url);
    r->url = NULL;
    curl_slist_free_all(r->hdrs);
    r->hdrs = NULL;
    if (r->h)
        curl_easy_cleanup(r->h);
    r->h = NULL;
    shs__buf_release(&r->resp);
}

int s3_req_prepare(shs__s3 *s3, s3_req *r)
{
    const shs__s3_config *c = &s3->cfg;
    shs__buf u = SHS__BUF_INIT;
    char line[160], hash[65];
    int rc;
    int path_style = c->path_style || !dns_bucket(r->bucket);
    r->s3 = s3;
    if (path_style)
        rc = shs__buf_addf(&u, "%s://%s%s/%s", c->scheme, c->host, c->base_path, r->bucket);
    else
        rc = shs__buf_addf(&u, "%s://%s.%s%s", c->scheme, r->bucket, c->host, c->base_path);
    if (rc == SHS_OK && (r->key || !path_style))
        rc = shs__buf_addc(&u, '/');
    if (rc == SHS_OK && r->key)
        rc = shs__s3_uri_encode(&u, r->key, strlen(r->key), 1);
    if (rc == SHS_OK && r->query && *r->query)
        rc = shs__buf_addf(&u, "?%s", r->query);
    if (rc < 0) {
        shs__buf_release(&u);
        return rc;
    }
    r->url = u.data;
    if (c->sign_payload || !r->body_len) {
        if (r->body_len)
            hex_sha256(hash, r->body, r->body_len);
        else
            snprintf(hash, sizeof hash, "%s", SHA256_EMPTY);
    } else {
        snprintf(hash, sizeof hash, "UNSIGNED-PAYLOAD");
    }
    snprintf(line, sizeof line, "x-amz-content-sha256: %s", hash);
    /* not "Expect:" to turn 100-continue off: curl 7.88 signs the header
       it then leaves out, and the signature no longer matches */
    if ((rc = add_header(r, line)) < 0 ||
        (rc = add_header(r, "User-Agent: shardsafe/" SHS_VERSION_STRING)) < 0)
        return rc;
    if (r->create_only && (rc = add_header(r, "If-None-Match: *")) < 0)
        return rc;
    if (strcmp(r->method, "POST") == 0 && (rc = add_header(r, "Content-Type: application/xml")) < 0)
        return rc;
    if (r->ranged && r->len) {
        snprintf(line, sizeof line, "Range: bytes=%llu-%llu", (unsigned long long)r->off,
                 (unsigned long long)(r->off + r->len - 1));
        if ((rc = add_header(r, line)) < 0)
            return rc;
    }
    if (c->session_token) {
        size_t n = strlen(c->session_token) + 32;
        char *t = shs__malloc(n);
        if (!t)
            return shs__err(SHS_ENOMEM, "out of memory");
        snprintf(t, n, "x-amz-security-token: %s", c->session_token);
        rc = add_header(r, t);
        memset(t, 0, n);
        shs__free(t);
        if (rc < 0)
            return rc;
    }
    if (!r->resp_max)
        r->resp_max = RESP_MAX_ERR;
    return SHS_OK;
}

static size_t on_read(char *buf, size_t size, size_t nitems, void *ctx)
{
    s3_req *r = ctx;
    size_t n = size * nitems, left = r->body_len - r->body_pos;
    if (n > left)
        n = left;
    memcpy(buf, r->body + r->body_pos, n);
    r->body_pos += n;
    return n;
}

static int on_seek(void *ctx, curl_off_t off, int origin)
{
    s3_req *r = ctx;
    if (origin != SEEK_SET || off < 0 || (uint64_t)off > r->body_len)
        return CURL_SEEKFUNC_FAIL;
    r->body_pos = (size_t)off;
    return CURL_SEEKFUNC_OK;
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *ctx)
{
    s3_req *r = ctx;
    size_t n = size * nmemb;
    long http = 0;
    curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &http);
    if (r->ranged && http >= 200 && http < 300) {
        if (n > r->len - r->got) {
            r->overflow = 1;
            return 0;
        }
        memcpy(r->dst + r->got, data, n);
        r->got += n;
        return n;
    }
    /* error bodies have their own cap: a small object's limit must not
       turn a 404 into "too large" */
    size_t cap = http >= 200 && http < 300 ? r->resp_max : RESP_MAX_ERR;
    if (r->resp.len + n > cap) {
        r->overflow = 1;
        return 0;
    }
    return shs__buf_add(&r->resp, data, n) == SHS_OK ? n : 0;
}

static int header_is(const char *h, size_t n, const char *name, const char **val, size_t *vlen)
{
    size_t k = strlen(name);
    if (n <= k || strncasecmp(h, name, k) != 0 || h[k] != ':')
        return 0;
    const char *v = h + k + 1, *e = h + n;
    while (v < e && (*v == ' ' || *v == '\t'))
        v++;
    while (e > v && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' '))
        e--;
    *val = v;
    *vlen = (size_t)(e - v);
    return 1;
}

static size_t on_header(char *data, size_t size, size_t nitems, void *ctx)
{
    s3_req *r = ctx;
    size_t n = size * nitems;
    const char *v;
    size_t vl;
    if (n >= 5 && memcmp(data, "HTTP/", 5) == 0) {
        /* a new response (after 100 Continue, a redirect): start over */
        r->have_length = 0;
        r->etag[0] = '\0';
    } else if (header_is(data, n, "Content-Length", &v, &vl)) {
        uint64_t x = 0;
        int ok = vl > 0 && vl <= 19;
        for (size_t i = 0; ok && i < vl; i++) {
            ok = v[i] >= '0' && v[i] <= '9';
            x = x * 10 + (uint64_t)(v[i] - '0');
        }
        r->have_length = ok;
        r->content_length = ok ? x : 0;
    } else if (header_is(data, n, "ETag", &v, &vl)) {
        size_t o = 0;
        for (size_t i = 0; i < vl && o + 1 < sizeof r->etag; i++)
            if (v[i] > 0x20 && v[i] < 0x7f && v[i] != '<' && v[i] != '&')
                r->etag[o++] = v[i];
        r->etag[o] = '\0';
    } else if (header_is(data, n, "Date", &v, &vl)) {
        int64_t t = parse_http_date(v, vl);
        shs__s3 *s3 = r->s3;
        if (t > 0 && s3) {
            pthread_mutex_lock(&s3->mu);
            s3->have_date = 1;
            s3->server_date = t;
            s3->date_mono_ms = mono_ms();
            pthread_mutex_unlock(&s3->mu);
        }
    }
    return n;
}

/* ---- attempts and the driver ---- */

static int on_progress(void *ctx, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    const s3_req *r = ctx;
    return __atomic_load_n(r->cancel, __ATOMIC_RELAXED) != 0;
}

static int start_attempt(shs__s3 *s3, s3_req *r, CURLM *m)
{
    const shs__s3_config *c = &s3->cfg;
    if (!r->h && !(r->h = curl_easy_init()))
        return shs__err(SHS_ENOMEM, "out of memory (curl_easy_init)");
    curl_easy_reset(r->h);
    r->body_pos = r->got = 0;
    r->overflow = r->have_length = 0;
    r->resp.len = 0;
    r->etag[0] = r->code[0] = r->errbuf[0] = '\0';
    r->http = 0;
    r->cc = CURLE_OK;
    if (r->attempt++ == 0)
        r->first_ms = mono_ms();
    CURL *h = r->h;
    curl_easy_setopt(h, CURLOPT_URL, r->url);
    curl_easy_setopt(h, CURLOPT_PRIVATE, r);
    curl_easy_setopt(h, CURLOPT_SHARE, s3->share);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, r->hdrs);
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, s3->sigv4);
    curl_easy_setopt(h, CURLOPT_USERNAME, c->access_key);
    curl_easy_setopt(h, CURLOPT_PASSWORD, c->secret_key);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, c->stall_timeout_s);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    /* a body goes at once, without waiting for "100 Continue" */
    curl_easy_setopt(h, CURLOPT_EXPECT_100_TIMEOUT_MS, 0L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    if (r->cancel) {
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, r);
    }
    if (strcmp(r->method, "HEAD") == 0) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (strcmp(r->method, "DELETE") == 0) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
    } else if (strcmp(r->method, "PUT") == 0) {
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(h, CURLOPT_READDATA, r);
        curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(h, CURLOPT_SEEKDATA, r);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_len);
    } else if (strcmp(r->method, "POST") == 0) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body ? r->body : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    }
    if (curl_multi_add_handle(m, h) != CURLM_OK)
        return shs__err(SHS_ENOMEM, "cannot add a transfer (curl_multi_add_handle)");
    __atomic_add_fetch(&s3->requests, 1, __ATOMIC_RELAXED);
    return SHS_OK;
}

static int status_of_http(long http, const char *code)
{
    if (http == 404)
        return SHS_ENOENT;
    if (http == 412)
        return SHS_EEXIST;
    if (http == 416)
        return SHS_ERANGE;
    (void)code;
    return SHS_EIO;
}

static void fail_req(s3_req *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail_req(s3_req *r, int status, const char *fmt, ...)
{
    char what[300], detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    uint64_t el = mono_ms() - r->first_ms;
    s3_name(what, sizeof what, r->bucket, r->key);
    snprintf(r->msg, sizeof r->msg, "%s %s: %s (%u attempt%s in %.1f s)", r->op ? r->op : r->method,
             what, detail, r->attempt, r->attempt == 1 ? "" : "s", (double)el / 1000.0);
    r->status = status;
}

/* After an attempt: 1 done (r->status set), 0 retry at r->next_ms. */
static int judge(shs__s3 *s3, s3_req *r)
{
    const shs__s3_retry *rt = &s3->cfg.retry;
    char *code = NULL;
    curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &r->http);
    if (r->cc == CURLE_WRITE_ERROR && r->overflow && r->http >= 300) {
        r->cc = CURLE_OK; /* an error answer too long to keep: its status says enough */
        r->resp.len = 0;
    }
    int ok2xx = r->cc == CURLE_OK && r->http >= 200 && r->http < 300;
    /* an S3 error Code from the body: of any failure, and of a 200
       multipart completion (which reports a late failure that way) */
    if (r->resp.len && ((r->cc == CURLE_OK && !ok2xx) || (ok2xx && !strcmp(r->method, "POST")))) {
        if (shs__s3_xml_text(&code, r->resp.data, r->resp.len, "Error/Code", "S3 error") ==
                SHS_OK &&
            code) {
            size_t o = 0;
            for (const char *q = code; *q && o + 1 < sizeof r->code; q++)
                if (*q > 0x20 && *q < 0x7f)
                    r->code[o++] = *q;
            r->code[o] = '\0';
            if (ok2xx)
                ok2xx = 0; /* <Error> in a 200 */
        }
        shs__free(code);
        shs__err_clear();
    }
    if (r->cc == CURLE_WRITE_ERROR && r->overflow) {
        if (r->ranged)
            fail_req(r, SHS_EIO, "the server sent more bytes than the %zu asked", r->len);
        else
            fail_req(r, SHS_ECORRUPT, "answer larger than the %zu bytes allowed", r->resp_max - 1);
        return 1;
    }
    int retry_short = 0;
    if (ok2xx && r->ranged) {
        if (r->http == 200 && r->off != 0) {
            fail_req(r, SHS_EIO, "the server ignored the Range header (HTTP 200)");
            return 1;
        }
        if (r->got != r->len) {
            if (r->have_length && r->content_length == r->got) {
                fail_req(r, SHS_ERANGE,
                         "bytes [%llu, %llu) are past the end of the object (got %zu bytes)",
                         (unsigned long long)r->off, (unsigned long long)(r->off + r->len), r->got);
                return 1;
            }
            retry_short = 1; /* cut short on the way */
        }
    }
    if (ok2xx && !retry_short) {
        r->status = SHS_OK;
        return 1;
    }
    int retryable = retry_short || shs__s3_retryable(r->cc, r->http, r->code);
    uint64_t now = mono_ms();
    if (retryable && r->attempt < rt->max_attempts) {
        uint64_t wait = shs__s3_backoff_ms(rt, r->attempt + 1, rand64());
        if (now + wait - r->first_ms <= rt->total_ms) {
            r->next_ms = now + wait;
            return 0;
        }
    }
    if (r->cc != CURLE_OK)
        fail_req(r, SHS_EIO, "%s%s%s", curl_easy_strerror((CURLcode)r->cc),
                 r->errbuf[0] ? ": " : "", r->errbuf);
    else if (retry_short)
        fail_req(r, SHS_EIO, "HTTP %ld with %zu of %zu bytes (answer cut short)", r->http, r->got,
                 r->len);
    else
        fail_req(r, status_of_http(r->http, r->code), "HTTP %ld%s%s", r->http,
                 r->code[0] ? " " : "", r->code);
    return 1;
}

void s3_drive(shs__s3 *s3, CURLM *m, s3_feed *f, unsigned parallel)
{
    s3_req **wait = NULL;
    size_t nwait = 0, cap = 0;
    unsigned active = 0;
    for (;;) {
        uint64_t now = mono_ms();
        while (active < parallel) {
            s3_req *r = NULL;
            for (size_t i = 0; i < nwait; i++)
                if (wait[i]->next_ms <= now) {
                    r = wait[i];
                    wait[i] = wait[--nwait];
                    break;
                }
            if (!r && !(r = f->next(f->ctx)))
                break;
            if (start_attempt(s3, r, m) < 0) {
                r->status = SHS_ENOMEM;
                snprintf(r->msg, sizeof r->msg, "%s", shs_last_error());
                f->done(f->ctx, r);
                continue;
            }
            active++;
        }
        if (!active && !nwait) {
            if (f->idle(f->ctx))
                break;
            continue;
        }
        int running = 0;
        curl_multi_perform(m, &running);
        (void)running;
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            s3_req *r = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
            r->cc = msg->data.result;
            curl_multi_remove_handle(m, msg->easy_handle);
            active--;
            if (judge(s3, r)) {
                f->done(f->ctx, r);
                continue;
            }
            if (nwait == cap) {
                size_t nc = cap ? cap * 2 : 8;
                s3_req **nw = shs__realloc(wait, nc * sizeof *nw);
                if (!nw) {
                    fail_req(r, SHS_ENOMEM, "out of memory scheduling a retry");
                    f->done(f->ctx, r);
                    continue;
                }
                wait = nw;
                cap = nc;
            }
            wait[nwait++] = r;
        }
        long timeout = 1000;
        now = mono_ms();
        for (size_t i = 0; i < nwait; i++) {
            long t = wait[i]->next_ms > now ? (long)(wait[i]->next_ms - now) : 0;
            if (t < timeout)
                timeout = t;
        }
        /* wait for the sockets, the next retry or a wakeup (new work);
           not when the last transfer just ended: there is nothing to
           wait for then */
        if ((active || nwait) && timeout > 0)
            curl_multi_poll(m, NULL, 0, (int)timeout, NULL);
    }
    shs__free(wait);
}

typedef struct batch {
    s3_req **reqs;
    size_t n, next;
} batch;

static s3_req *batch_next(void *ctx)
{
    batch *b = ctx;
    return b->next < b->n ? b->reqs[b->next++] : NULL;
}

static void batch_done(void *ctx, s3_req *r)
{
}

static int batch_idle(void *ctx)
{
    return 1;
}

int s3_run(shs__s3 *s3, s3_req **reqs, size_t n, unsigned parallel)
{
    batch b = { reqs, n, 0 };
    s3_feed f = { batch_next, batch_done, batch_idle, &b };
    int rc = SHS_OK;
    for (size_t i = 0; i < n; i++) {
        reqs[i]->status = SHS_OK;
        if (!reqs[i]->url && (rc = s3_req_prepare(s3, reqs[i])) < 0)
            return rc;
    }
    CURLM *m = curl_multi_init();
    if (!m)
        return shs__err(SHS_ENOMEM, "out of memory (curl_multi_init)");
    s3_drive(s3, m, &f, parallel ? parallel : 1);
    curl_multi_cleanup(m);
    for (size_t i = 0; i < n; i++)
        if (reqs[i]->status < 0)
            return shs__err(reqs[i]->status, "%s", reqs[i]->msg);
    return SHS_OK;
}

int s3_run1(shs__s3 *s3, s3_req *r)
{
    return s3_run(s3, &r, 1, 1);
}

/* ---- operations ---- */

static int check_bucket(const char *bucket)
{
    size_t n = bucket ? strlen(bucket) : 0;
    if (n < 3 || n > 63)
        return shs__err(SHS_EINVAL, "bucket name '%s': 3 to 63 characters", bucket ? bucket : "");
    for (size_t i = 0; i < n; i++) {
        char c = bucket[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.'))
            return shs__err(SHS_EINVAL, "bucket name '%s': only a-z, 0-9, '-' and '.'", bucket);
    }
    return SHS_OK;
}

int shs__s3_head(shs__s3 *s3, const char *bucket, const char *key, uint64_t *size)
{
    s3_req r = { .method = "HEAD", .bucket = bucket, .key = key, .op = "HEAD" };
    int rc = check_bucket(bucket);
    if (rc == SHS_OK && (rc = s3_run1(s3, &r)) == SHS_OK) {
        if (!r.have_length) {
            char nm[300];
            rc = shs__err(SHS_ECORRUPT, "HEAD %s: answer without a Content-Length",
                          s3_name(nm, sizeof nm, bucket, key));
        } else {
            *size = r.content_length;
        }
    }
    s3_req_release(&r);
    return rc;
}

int shs__s3_get_all(shs__s3 *s3, const char *bucket, const char *key, size_t max, char **out,
                    size_t *out_len)
{
    s3_req r = { .method = "GET", .bucket = bucket, .key = key, .op = "GET" };
    *out = NULL;
    *out_len = 0;
    r.resp_max = max + 1;
    int rc = check_bucket(bucket);
    if (rc == SHS_OK && (rc = s3_run1(s3, &r)) == SHS_OK) {
        if (r.resp.len > max) {
            char nm[300];
            rc = shs__err(SHS_ECORRUPT, "GET %s: more than the %zu bytes allowed",
                          s3_name(nm, sizeof nm, bucket, key), max);
        } else if (!r.resp.data && (rc = shs__buf_add(&r.resp, "", 0)) < 0) {
            /* rc set */
        } else {
            *out = r.resp.data;
            *out_len = r.resp.len;
            r.resp.data = NULL;
        }
    }
    s3_req_release(&r);
    return rc;
}

int shs__s3_delete(shs__s3 *s3, const char *bucket, const char *key)
{
    s3_req r = { .method = "DELETE", .bucket = bucket, .key = key, .op = "DELETE" };
    int rc = check_bucket(bucket);
    if (rc == SHS_OK && (rc = s3_run1(s3, &r)) == SHS_ENOENT && strcmp(r.code, "NoSuchBucket")) {
        shs__err_clear();
        rc = SHS_OK;
    }
    s3_req_release(&r);
    return rc;
}

int shs__s3_create_bucket(shs__s3 *s3, const char *bucket)
{
    char body[256] = "";
    if (strcmp(s3->cfg.region, "us-east-1") != 0)
        snprintf(body, sizeof body,
                 "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                 "<LocationConstraint>%s</LocationConstraint></CreateBucketConfiguration>",
                 s3->cfg.region);
    s3_req r = { .method = "PUT", .bucket = bucket, .op = "create bucket" };
    r.body = body;
    r.body_len = strlen(body);
    int rc = check_bucket(bucket);
    if (rc == SHS_OK && (rc = s3_run1(s3, &r)) < 0 &&
        strcmp(r.code, "BucketAlreadyOwnedByYou") == 0) {
        shs__err_clear();
        rc = SHS_OK;
    }
    s3_req_release(&r);
    return rc;
}

int shs__s3_get_ranges(shs__s3 *s3, const char *bucket, shs__s3_range *rg, size_t n)
{
    s3_req *reqs = n ? shs__calloc(n, sizeof *reqs) : NULL;
    s3_req **pr = n ? shs__calloc(n, sizeof *pr) : NULL;
    size_t m = 0;
    int rc = check_bucket(bucket);
    if (n && (!reqs || !pr))
        rc = shs__err(SHS_ENOMEM, "out of memory");
    for (size_t i = 0; i < n && rc == SHS_OK; i++) {
        uint64_t end;
        rg[i].status = SHS_OK;
        if (rg[i].len == 0)
            continue; /* S3 has no empty range: nothing to fetch */
        if (shs__add_u64(rg[i].off, rg[i].len, &end)) {
            char nm[300];
            rc = rg[i].status = shs__err(SHS_ERANGE, "GET %s: range overflows",
                                         s3_name(nm, sizeof nm, bucket, rg[i].key));
            break;
        }
        s3_req *r = &reqs[m];
        r->method = "GET";
        r->op = "GET range of";
        r->bucket = bucket;
        r->key = rg[i].key;
        r->ranged = 1;
        r->off = rg[i].off;
        r->dst = rg[i].buf;
        r->len = rg[i].len;
        r->user = &rg[i];
        pr[m++] = r;
    }
    if (rc == SHS_OK)
        rc = s3_run(s3, pr, m, s3->cfg.parallel);
    for (size_t i = 0; i < m; i++) {
        ((shs__s3_range *)reqs[i].user)->status = reqs[i].status;
        s3_req_release(&reqs[i]);
    }
    shs__free(reqs);
    shs__free(pr);
    return rc;
}

/* GET the bucket with the query of the k pairs (built in q): the answer
   (XML, NUL-terminated) in *resp. */
static int get_xml(shs__s3 *s3, const char *bucket, const char *const *names,
                   const char *const *values, size_t k, const char *op, shs__buf *q, shs__buf *resp)
{
    int rc = shs__s3_canonical_query(q, names, values, k);
    if (rc < 0)
        return rc;
    s3_req r = { .method = "GET", .bucket = bucket, .query = q->data, .op = op };
    r.resp_max = RESP_MAX_XML;
    if ((rc = s3_run1(s3, &r)) == SHS_OK) {
        *resp = r.resp;
        memset(&r.resp, 0, sizeof r.resp);
        if (!resp->data)
            rc = shs__buf_add(resp, "", 0);
    }
    s3_req_release(&r);
    return rc;
}

int shs__s3_list(shs__s3 *s3, const char *bucket, const char *prefix, char delimiter,
                 shs__s3_list_page *out)
{
    shs__buf q = SHS__BUF_INIT;
    char *token = NULL, delim[2] = { delimiter, 0 }, nm[300];
    int rc = check_bucket(bucket);
    memset(out, 0, sizeof *out);
    s3_name(nm, sizeof nm, bucket, prefix);
    for (unsigned long page = 0; rc == SHS_OK; page++) {
        const char *names[4], *values[4];
        size_t k = 0;
        if (token) {
            names[k] = "continuation-token";
            values[k++] = token;
        }
        if (delimiter) {
            names[k] = "delimiter";
            values[k++] = delim;
        }
        names[k] = "list-type";
        values[k++] = "2";
        names[k] = "prefix";
        values[k++] = prefix ? prefix : "";
        shs__s3_list_page pg;
        shs__buf resp = SHS__BUF_INIT;
        memset(&pg, 0, sizeof pg);
        if ((rc = get_xml(s3, bucket, names, values, k, "LIST", &q, &resp)) == SHS_OK)
            rc = shs__s3_parse_list(&pg, resp.data, resp.len, nm);
        shs__buf_release(&resp);
        if (rc < 0)
            break;
        /* append the page */
        size_t nk = out->nkeys + pg.nkeys, np = out->nprefixes + pg.nprefixes;
        char **keys = pg.nkeys ? shs__realloc(out->keys, nk * sizeof *keys) : out->keys;
        if (keys)
            out->keys = keys;
        uint64_t *sizes = pg.nkeys ? shs__realloc(out->sizes, nk * sizeof *sizes) : out->sizes;
        if (sizes)
            out->sizes = sizes;
        char **pre = pg.nprefixes ? shs__realloc(out->prefixes, np * sizeof *pre) : out->prefixes;
        if (pre)
            out->prefixes = pre;
        if ((pg.nkeys && (!keys || !sizes)) || (pg.nprefixes && !pre)) {
            shs__s3_list_page_release(&pg);
            rc = shs__err(SHS_ENOMEM, "out of memory listing %s", nm);
            break;
        }
        for (size_t i = 0; i < pg.nkeys; i++) {
            out->keys[out->nkeys] = pg.keys[i];
            out->sizes[out->nkeys++] = pg.sizes[i];
        }
        for (size_t i = 0; i < pg.nprefixes; i++)
            out->prefixes[out->nprefixes++] = pg.prefixes[i];
        pg.nkeys = pg.nprefixes = 0;
        int more = pg.truncated;
        if (more && token && strcmp(token, pg.next_token) == 0)
            rc = shs__err(SHS_ECORRUPT, "LIST %s: the server repeats continuation token", nm);
        shs__free(token);
        token = pg.next_token;
        pg.next_token = NULL;
        shs__s3_list_page_release(&pg);
        if (!more)
            break;
    }
    shs__free(token);
    shs__buf_release(&q);
    if (rc < 0)
        shs__s3_list_page_release(out);
    return rc;
}

int s3_part_query(shs__buf *b, unsigned part, const char *upload_id)
{
    char num[16];
    snprintf(num, sizeof num, "%u", part);
    const char *names[2] = { "partNumber", "uploadId" }, *values[2] = { num, upload_id };
    return shs__s3_canonical_query(b, names, values, 2);
}

static int id_query(shs__buf *b, const char *upload_id)
{
    const char *names[1] = { "uploadId" }, *values[1] = { upload_id };
    return shs__s3_canonical_query(b, names, values, 1);
}

int s3_mpu_create(shs__s3 *s3, const char *bucket, const char *key, char **upload_id)
{
    const char *names[1] = { "uploads" }, *values[1] = { NULL };
    shs__buf q = SHS__BUF_INIT;
    char nm[300];
    *upload_id = NULL;
    int rc = shs__s3_canonical_query(&q, names, values, 1);
    s3_req r = { .method = "POST",
                 .bucket = bucket,
                 .key = key,
                 .query = q.data,
                 .op = "create multipart upload" };
    if (rc == SHS_OK && (rc = s3_run1(s3, &r)) == SHS_OK) {
        rc = shs__s3_xml_text(upload_id, r.resp.data ? r.resp.data : "", r.resp.len,
                              "InitiateMultipartUploadResult/UploadId",
                              s3_name(nm, sizeof nm, bucket, key));
        if (rc == SHS_OK && (!*upload_id || !**upload_id || strlen(*upload_id) > 1024)) {
            shs__free(*upload_id);
            *upload_id = NULL;
            rc = shs__err(SHS_ECORRUPT, "create multipart upload %s: answer without an UploadId",
                          nm);
        }
    }
    s3_req_release(&r);
    shs__buf_release(&q);
    return rc;
}

int shs__s3_abort_upload(shs__s3 *s3, const char *bucket, const char *key, const char *upload_id)
{
    shs__buf q = SHS__BUF_INIT;
    int rc = id_query(&q, upload_id);
    s3_req r = { .method = "DELETE",
                 .bucket = bucket,
                 .key = key,
                 .query = q.data,
                 .op = "abort multipart upload" };
    if (rc == SHS_OK && (rc = s3_run1(s3, &r)) == SHS_ENOENT) {
        shs__err_clear(); /* already gone */
        rc = SHS_OK;
    }
    s3_req_release(&r);
    shs__buf_release(&q);
    return rc;
}

int s3_mpu_complete(shs__s3 *s3, const char *bucket, const char *key, const char *upload_id,
                    char *const *etags, size_t nparts, uint64_t total)
{
    shs__buf q = SHS__BUF_INIT, body = SHS__BUF_INIT;
    int rc = id_query(&q, upload_id);
    if (rc == SHS_OK)
        rc = shs__buf_addf(&body, "<CompleteMultipartUpload>");
    for (size_t i = 0; i < nparts && rc == SHS_OK; i++)
        rc = shs__buf_addf(&body, "<Part><PartNumber>%zu</PartNumber><ETag>%s</ETag></Part>", i + 1,
                           etags[i] ? etags[i] : "");
    if (rc == SHS_OK)
        rc = shs__buf_addf(&body, "</CompleteMultipartUpload>");
    s3_req r = { .method = "POST",
                 .bucket = bucket,
                 .key = key,
                 .query = q.data,
                 .op = "complete multipart upload" };
    r.body = body.data;
    r.body_len = body.len;
    if (rc == SHS_OK && (rc = s3_run1(s3, &r)) == SHS_ENOENT && r.attempt > 1 &&
        strcmp(r.code, "NoSuchUpload") == 0) {
        /* an earlier attempt completed it and its answer was lost: the
           key is this attempt's own, so an object of the right size there
           is ours */
        uint64_t size = 0;
        char msg[1100];
        snprintf(msg, sizeof msg, "%s", shs_last_error());
        if (shs__s3_head(s3, bucket, key, &size) == SHS_OK && size == total) {
            shs__err_clear();
            rc = SHS_OK;
        } else {
            rc = shs__err(SHS_EIO, "%s", msg);
        }
    }
    s3_req_release(&r);
    shs__buf_release(&q);
    shs__buf_release(&body);
    return rc;
}

/* A body of `len` bytes from memory as a multipart upload, parts in
   parallel, each retried alone. */
static int put_multipart(shs__s3 *s3, const char *bucket, const char *key, const char *data,
                         size_t len)
{
    size_t part = s3->cfg.part_size;
    size_t nparts = (len + part - 1) / part;
    while (nparts > SHS__S3_MAX_PARTS) {
        part *= 2;
        nparts = (len + part - 1) / part;
    }
    char *upload_id = NULL;
    s3_req *reqs = shs__calloc(nparts, sizeof *reqs);
    s3_req **pr = shs__calloc(nparts, sizeof *pr);
    char **etags = shs__calloc(nparts, sizeof *etags);
    shs__buf *qs = shs__calloc(nparts, sizeof *qs);
    int rc = SHS_OK;
    if (!reqs || !pr || !etags || !qs) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = s3_mpu_create(s3, bucket, key, &upload_id)) < 0)
        goto done;
    for (size_t i = 0; i < nparts && rc == SHS_OK; i++) {
        if ((rc = s3_part_query(&qs[i], (unsigned)i + 1, upload_id)) < 0)
            break;
        reqs[i].method = "PUT";
        reqs[i].op = "upload part of";
        reqs[i].bucket = bucket;
        reqs[i].key = key;
        reqs[i].query = qs[i].data;
        reqs[i].body = data + i * part;
        reqs[i].body_len = i + 1 < nparts ? part : len - i * part;
        pr[i] = &reqs[i];
    }
    if (rc == SHS_OK)
        rc = s3_run(s3, pr, nparts, s3->cfg.parallel);
    for (size_t i = 0; i < nparts && rc == SHS_OK; i++)
        if (!(etags[i] = shs__strdup(reqs[i].etag)))
            rc = shs__err(SHS_ENOMEM, "out of memory");
    if (rc == SHS_OK)
        rc = s3_mpu_complete(s3, bucket, key, upload_id, etags, nparts, len);
    if (rc < 0) {
        char msg[1100];
        snprintf(msg, sizeof msg, "%s", shs_last_error());
        shs__s3_abort_upload(s3, bucket, key, upload_id);
        shs__err(rc, "%s", msg);
    }
done:
    for (size_t i = 0; reqs && i < nparts; i++) {
        s3_req_release(&reqs[i]);
        shs__buf_release(&qs[i]);
        shs__free(etags[i]);
    }
    shs__free(reqs);
    shs__free(pr);
    shs__free(etags);
    shs__free(qs);
    shs__free(upload_id);
    return rc;
}

int shs__s3_put(shs__s3 *s3, const char *bucket, const char *key, const void *data, size_t len,
                int create_only)
{
    int rc = check_bucket(bucket);
    char nm[300];
    if (rc < 0)
        return rc;
    if (len > s3->cfg.part_size && !create_only)
        return put_multipart(s3, bucket, key, data, len);
    if (len > SHS__S3_MAX_PART)
        return shs__err(SHS_EINVAL, "PUT %s: a create-only object is one PUT of at most 5 GiB",
                        s3_name(nm, sizeof nm, bucket, key));
    s3_req r = { .method = "PUT", .bucket = bucket, .key = key, .op = "PUT" };
    r.body = data;
    r.body_len = len;
    r.create_only = create_only;
    rc = s3_run1(s3, &r);
    if (rc == SHS_EEXIST) {
        /* the object there may be our own: an earlier attempt whose
           answer was lost -- ours, or curl's own silent resend of a
           request on a reused connection that died.  The bytes tell. */
        char *have = NULL, msg[600];
        size_t hl = 0;
        snprintf(msg, sizeof msg, "%s", shs_last_error());
        if (shs__s3_get_all(s3, bucket, key, len, &have, &hl) == SHS_OK && hl == len &&
            memcmp(have, data, len) == 0) {
            shs__err_clear();
            rc = SHS_OK;
        } else {
            rc = shs__err(SHS_EEXIST, "%s", msg);
        }
        shs__free(have);
    }
    s3_req_release(&r);
    return rc;
}

int shs__s3_list_uploads(shs__s3 *s3, const char *bucket, const char *prefix,
                         shs__s3_uploads_page *out)
{
    shs__buf q = SHS__BUF_INIT;
    char *km = NULL, *im = NULL, nm[300];
    int rc = check_bucket(bucket);
    memset(out, 0, sizeof *out);
    s3_name(nm, sizeof nm, bucket, prefix);
    for (unsigned long page = 0; rc == SHS_OK; page++) {
        const char *names[4], *values[4];
        size_t k = 0;
        if (km) {
            names[k] = "key-marker";
            values[k++] = km;
            names[k] = "upload-id-marker";
            values[k++] = im;
        }
        names[k] = "prefix";
        values[k++] = prefix ? prefix : "";
        names[k] = "uploads";
        values[k++] = NULL;
        shs__s3_uploads_page pg;
        shs__buf resp = SHS__BUF_INIT;
        memset(&pg, 0, sizeof pg);
        if ((rc = get_xml(s3, bucket, names, values, k, "list multipart uploads", &q, &resp)) ==
            SHS_OK)
            rc = shs__s3_parse_uploads(&pg, resp.data, resp.len, nm);
        shs__buf_release(&resp);
        if (rc < 0)
            break;
        size_t n = out->n + pg.n;
        char **keys = pg.n ? shs__realloc(out->keys, n * sizeof *keys) : out->keys;
        if (keys)
            out->keys = keys;
        char **ids = pg.n ? shs__realloc(out->ids, n * sizeof *ids) : out->ids;
        if (ids)
            out->ids = ids;
        if (pg.n && (!keys || !ids)) {
            shs__s3_uploads_page_release(&pg);
            rc = shs__err(SHS_ENOMEM, "out of memory listing %s", nm);
            break;
        }
        for (size_t i = 0; i < pg.n; i++) {
            out->keys[out->n] = pg.keys[i];
            out->ids[out->n++] = pg.ids[i];
        }
        pg.n = 0;
        int more = pg.truncated;
        if (more && km && strcmp(km, pg.next_key) == 0 && strcmp(im, pg.next_id) == 0)
            rc = shs__err(SHS_ECORRUPT, "list multipart uploads %s: the server repeats a marker",
                          nm);
        shs__free(km);
        shs__free(im);
        km = pg.next_key;
        im = pg.next_id;
        pg.next_key = pg.next_id = NULL;
        shs__s3_uploads_page_release(&pg);
        if (!more)
            break;
    }
    shs__free(km);
    shs__free(im);
    shs__buf_release(&q);
    if (rc < 0)
        shs__s3_uploads_page_release(out);
    return rc;
}
