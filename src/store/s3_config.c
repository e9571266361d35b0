/*
 * s3_config.c -- where the S3 client's settings come from: the
 * environment and the AWS shared files, read the way the AWS tools read
 * them (docs/s3.md has the table of what is read and in which order).
 */
#include "store/s3.h"

#include "store/io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AWS_FILE_MAX ((size_t)1 << 20) /* a credentials file is small */

/* Defaults: docs/s3.md "Retries" and "Memory". */
#define DEF_ATTEMPTS 8u
#define DEF_BASE_MS 100u
#define DEF_CAP_MS 10000u
#define DEF_TOTAL_MS 120000u
#define DEF_CONNECT_MS 10000L
#define DEF_STALL_S 60L
#define DEF_PART ((size_t)16 * 1024 * 1024)
#define DEF_PARALLEL 8u

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

static void trim(const char **s, const char **e)
{
    while (*s < *e && is_space(**s))
        (*s)++;
    while (*e > *s && is_space((*e)[-1]))
        (*e)--;
}

static int span_eq(const char *s, const char *e, const char *z)
{
    size_t n = strlen(z);
    return (size_t)(e - s) == n && memcmp(s, z, n) == 0;
}

int shs__ini_get(char **out, const char *text, size_t len, const char *section, const char *key,
                 const char *what)
{
    const char *p = text, *end = text + len;
    int in_section = 0, seen = 0;
    size_t lineno = 0;
    *out = NULL;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end, *s = p, *e = le;
        lineno++;
        p = nl ? nl + 1 : end;
        if (memchr(s, '\0', (size_t)(e - s)))
            goto bad;
        int indented = s < e && (*s == ' ' || *s == '\t');
        trim(&s, &e);
        if (s == e || *s == '#' || *s == ';')
            continue;
        if (*s == '[') {
            if (e[-1] != ']' || e - s < 3)
                goto bad;
            const char *ns = s + 1, *ne = e - 1;
            trim(&ns, &ne);
            if (ns == ne)
                goto bad;
            int match = span_eq(ns, ne, section);
            /* a section given twice is an error for the AWS tools'
               parser: it is here too, for the one we read */
            if (match && seen) {
                shs__free(*out);
                *out = NULL;
                return shs__err(SHS_ECONFIG, "%s:%zu: section [%s] appears twice", what, lineno,
                                section);
            }
            seen |= match;
            in_section = match;
            continue;
        }
        /* an indented line continues the previous key (nested settings
           such as "s3 =\n  addressing_style = path"): not ours */
        if (indented)
            continue;
        const char *eq = memchr(s, '=', (size_t)(e - s));
        if (!eq)
            goto bad;
        if (!in_section)
            continue;
        const char *ks = s, *ke = eq, *vs = eq + 1, *ve = e;
        trim(&ks, &ke);
        trim(&vs, &ve);
        if (ks == ke)
            goto bad;
        if (!span_eq(ks, ke, key))
            continue;
        if (*out) {
            shs__free(*out);
            *out = NULL;
            return shs__err(SHS_ECONFIG, "%s:%zu: '%s' given twice in [%s]", what, lineno, key,
                            section);
        }
        if (!(*out = shs__strndup(vs, (size_t)(ve - vs))))
            return shs__err(SHS_ENOMEM, "out of memory reading %s", what);
    }
    return SHS_OK;
bad:
    shs__free(*out);
    *out = NULL;
    return shs__err(SHS_ECONFIG, "%s:%zu: not an INI line ('[section]' or 'key = value')", what,
                    lineno);
}

/* A file of the AWS family, NULL text when it does not exist. */
static int read_aws_file(char **text, size_t *len, const char *path)
{
    *text = NULL;
    *len = 0;
    int rc = shs__read_file(text, len, path, AWS_FILE_MAX);
    if (rc == SHS_ENOENT) {
        shs__err_clear();
        return SHS_OK;
    }
    return rc;
}

static int env_set(const char *name)
{
    const char *v = getenv(name);
    return v && *v;
}

static int dup_env(char **out, const char *name)
{
    const char *v = getenv(name);
    *out = NULL;
    if (!v || !*v)
        return SHS_OK;
    if (!(*out = shs__strdup(v)))
        return shs__err(SHS_ENOMEM, "out of memory reading %s", name);
    return SHS_OK;
}

static int parse_u64(uint64_t *out, const char *s, uint64_t min, uint64_t max, const char *what)
{
    char *end;
    if (!s || !*s || *s == '-' || *s == '+' || is_space(*s))
        return shs__err(SHS_ECONFIG, "%s: '%s' is not a whole number", what, s ? s : "");
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return shs__err(SHS_ECONFIG, "%s: '%s' is not a whole number", what, s);
    if (v < min || v > max)
        return shs__err(SHS_ECONFIG, "%s: %llu is outside [%llu, %llu]", what, v,
                        (unsigned long long)min, (unsigned long long)max);
    *out = v;
    return SHS_OK;
}

/* A number from the environment variable `name`, else `def`. */
static int env_u64(uint64_t *out, const char *name, uint64_t def, uint64_t min, uint64_t max)
{
    const char *v = getenv(name);
    if (!v || !*v) {
        *out = def;
        return SHS_OK;
    }
    return parse_u64(out, v, min, max, name);
}

/* Split an endpoint URL into scheme, host[:port] and path.  Credentials,
   queries and fragments in it are refused: they would be signed and sent
   with every request. */
static int parse_endpoint(shs__s3_config *c, const char *url, const char *what)
{
    const char *p = url, *sep = strstr(url, "://");
    if (!sep)
        return shs__err(SHS_ECONFIG, "%s: '%s' is not a URL (http://host:port)", what, url);
    if (span_eq(p, sep, "http"))
        c->scheme = shs__strdup("http");
    else if (span_eq(p, sep, "https"))
        c->scheme = shs__strdup("https");
    else
        return shs__err(SHS_ECONFIG, "%s: scheme of '%s' is not http or https", what, url);
    const char *h = sep + 3, *he = h + strcspn(h, "/?#");
    if (he == h)
        return shs__err(SHS_ECONFIG, "%s: '%s' has no host", what, url);
    if (memchr(h, '@', (size_t)(he - h)))
        return shs__err(SHS_ECONFIG,
                        "%s: user information in the endpoint URL is not supported (credentials "
                        "go in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)",
                        what);
    for (const char *q = h; q < he; q++)
        if ((unsigned char)*q <= 0x20 || (unsigned char)*q >= 0x7f)
            return shs__err(SHS_ECONFIG, "%s: bad character in the host of the endpoint", what);
    if (strpbrk(he, "?#"))
        return shs__err(SHS_ECONFIG, "%s: query or fragment in the endpoint URL", what);
    const char *ps = he, *pe = he + strlen(he);
    while (pe > ps && pe[-1] == '/')
        pe--;
    for (const char *q = ps; q < pe; q++)
        if ((unsigned char)*q <= 0x20 || (unsigned char)*q >= 0x7f)
            return shs__err(SHS_ECONFIG, "%s: bad character in the path of the endpoint", what);
    c->host = shs__strndup(h, (size_t)(he - h));
    c->base_path = shs__strndup(ps, (size_t)(pe - ps));
    if (!c->scheme || !c->host || !c->base_path)
        return shs__err(SHS_ENOMEM, "out of memory");
    return SHS_OK;
}

void shs__s3_config_release(shs__s3_config *c)
{
    if (!c)
        return;
    shs__free(c->scheme);
    shs__free(c->host);
    shs__free(c->base_path);
    shs__free(c->region);
    shs__free(c->access_key);
    if (c->secret_key)
        memset(c->secret_key, 0, strlen(c->secret_key));
    shs__free(c->secret_key);
    if (c->session_token)
        memset(c->session_token, 0, strlen(c->session_token));
    shs__free(c->session_token);
    shs__free(c->profile);
    memset(c, 0, sizeof *c);
}

/* The profile's files: names, texts and section names. */
typedef struct aws_files {
    char *cred_path, *conf_path;
    char *cred, *conf;
    size_t cred_len, conf_len;
    char *conf_section; /* "default" or "profile NAME" */
    const char *profile;
} aws_files;

static char *home_file(const char *env, const char *rel)
{
    const char *v = getenv(env), *home = getenv("HOME");
    if (v && *v)
        return shs__strdup(v);
    if (!home || !*home)
        return NULL;
    return shs__path_join(home, rel);
}

/* The value of `key` for the profile: the credentials file first (for
   keys it may hold), then the config file. */
static int profile_get(char **out, const aws_files *f, const char *key, int in_cred)
{
    int rc;
    *out = NULL;
    if (in_cred && f->cred &&
        (rc = shs__ini_get(out, f->cred, f->cred_len, f->profile, key, f->cred_path)) < 0)
        return rc;
    if (!*out && f->conf &&
        (rc = shs__ini_get(out, f->conf, f->conf_len, f->conf_section, key, f->conf_path)) < 0)
        return rc;
    return SHS_OK;
}

static int section_present(const char *text, size_t len, const char *section)
{
    /* a key that cannot exist: only the section match matters */
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p)), *s = p, *e = nl ? nl : end;
        p = nl ? nl + 1 : end;
        trim(&s, &e);
        if (e - s >= 2 && *s == '[' && e[-1] == ']') {
            const char *ns = s + 1, *ne = e - 1;
            trim(&ns, &ne);
            if (span_eq(ns, ne, section))
                return 1;
        }
    }
    return 0;
}

static int load_numbers(shs__s3_config *c, const aws_files *f)
{
    uint64_t v;
    int rc;
    char *att = NULL;
    if (env_set("AWS_MAX_ATTEMPTS")) {
        rc = parse_u64(&v, getenv("AWS_MAX_ATTEMPTS"), 1, 100, "AWS_MAX_ATTEMPTS");
    } else if ((rc = profile_get(&att, f, "max_attempts", 0)) == SHS_OK && att) {
        char what[300];
        snprintf(what, sizeof what, "%s: max_attempts", f->conf_path);
        rc = parse_u64(&v, att, 1, 100, what);
    } else {
        v = DEF_ATTEMPTS;
    }
    shs__free(att);
    if (rc < 0)
        return rc;
    c->retry.max_attempts = (unsigned)v;
    if ((rc = env_u64(&c->retry.base_ms, "SHS_S3_RETRY_BASE_MS", DEF_BASE_MS, 1, 600000)) < 0 ||
        (rc = env_u64(&c->retry.cap_ms, "SHS_S3_RETRY_CAP_MS", DEF_CAP_MS, 1, 3600000)) < 0 ||
        (rc = env_u64(&c->retry.total_ms, "SHS_S3_RETRY_TOTAL_MS", DEF_TOTAL_MS, 0, 86400000)) < 0)
        return rc;
    if ((rc = env_u64(&v, "SHS_S3_CONNECT_TIMEOUT_MS", DEF_CONNECT_MS, 1, 600000)) < 0)
        return rc;
    c->connect_timeout_ms = (long)v;
    if ((rc = env_u64(&v, "SHS_S3_STALL_TIMEOUT_S", DEF_STALL_S, 1, 3600)) < 0)
        return rc;
    c->stall_timeout_s = (long)v;
    if ((rc = env_u64(&v, "SHS_S3_PART_SIZE", DEF_PART, SHS__S3_MIN_PART, SHS__S3_MAX_PART)) < 0)
        return rc;
    c->part_size = (size_t)v;
    if ((rc = env_u64(&v, "SHS_S3_PARALLEL", DEF_PARALLEL, 1, SHS__S3_MAX_PARALLEL)) < 0)
        return rc;
    c->parallel = (unsigned)v;
    return SHS_OK;
}

static int load_addressing(shs__s3_config *c)
{
    const char *a = getenv("SHS_S3_ADDRESSING");
    if (!a || !*a || strcmp(a, "auto") == 0)
        c->path_style = c->custom_endpoint;
    else if (strcmp(a, "path") == 0)
        c->path_style = 1;
    else if (strcmp(a, "virtual") == 0)
        c->path_style = 0;
    else
        return shs__err(SHS_ECONFIG, "SHS_S3_ADDRESSING: '%s' is not path, virtual or auto", a);
    const char *sp = getenv("SHS_S3_SIGN_PAYLOAD");
    /* over TLS the transport protects the body; over plain http the
       signed hash is what does */
    c->sign_payload = strcmp(c->scheme, "http") == 0;
    if (sp && *sp) {
        if (strcmp(sp, "1") == 0)
            c->sign_payload = 1;
        else if (strcmp(sp, "0") == 0)
            c->sign_payload = 0;
        else
            return shs__err(SHS_ECONFIG, "SHS_S3_SIGN_PAYLOAD: '%s' is not 0 or 1", sp);
    }
    return SHS_OK;
}

static int load_credentials(shs__s3_config *c, const aws_files *f, int named)
{
    int rc;
    if (env_set("AWS_ACCESS_KEY_ID") || env_set("AWS_SECRET_ACCESS_KEY")) {
        if (!env_set("AWS_ACCESS_KEY_ID") || !env_set("AWS_SECRET_ACCESS_KEY"))
            return shs__err(
                SHS_ECONFIG, "%s is set but %s is not: both or neither",
                env_set("AWS_ACCESS_KEY_ID") ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
                env_set("AWS_ACCESS_KEY_ID") ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
        if ((rc = dup_env(&c->access_key, "AWS_ACCESS_KEY_ID")) < 0 ||
            (rc = dup_env(&c->secret_key, "AWS_SECRET_ACCESS_KEY")) < 0 ||
            (rc = dup_env(&c->session_token, "AWS_SESSION_TOKEN")) < 0)
            return rc;
        return SHS_OK;
    }
    if ((rc = profile_get(&c->access_key, f, "aws_access_key_id", 1)) < 0 ||
        (rc = profile_get(&c->secret_key, f, "aws_secret_access_key", 1)) < 0 ||
        (rc = profile_get(&c->session_token, f, "aws_session_token", 1)) < 0)
        return rc;
    if (!c->access_key != !c->secret_key)
        return shs__err(SHS_ECONFIG, "profile '%s' has %s but not %s", f->profile,
                        c->access_key ? "aws_access_key_id" : "aws_secret_access_key",
                        c->access_key ? "aws_secret_access_key" : "aws_access_key_id");
    if (!c->access_key)
        return shs__err(SHS_ECONFIG,
                        "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
                        "give profile '%s' aws_access_key_id and aws_secret_access_key in %s%s",
                        f->profile, f->cred_path ? f->cred_path : "~/.aws/credentials",
                        named ? "" : " (AWS_PROFILE names another profile)");
    if (!(c->profile = shs__strdup(f->profile)))
        return shs__err(SHS_ENOMEM, "out of memory");
    return SHS_OK;
}

int shs__s3_config_load(shs__s3_config *out)
{
    shs__s3_config c;
    aws_files f;
    char *endpoint = NULL;
    int rc, named = 0;
    memset(&c, 0, sizeof c);
    memset(&f, 0, sizeof f);
    memset(out, 0, sizeof *out);
    f.profile = "default";
    if (env_set("AWS_PROFILE")) {
        f.profile = getenv("AWS_PROFILE");
        named = 1;
    }
    f.cred_path = home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
    f.conf_path = home_file("AWS_CONFIG_FILE", ".aws/config");
    size_t sl = strlen(f.profile) + 9;
    if ((f.conf_section = shs__malloc(sl)))
        snprintf(f.conf_section, sl, "%s%s", strcmp(f.profile, "default") ? "profile " : "",
                 f.profile);
    if (!f.conf_section) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    if ((f.cred_path && (rc = read_aws_file(&f.cred, &f.cred_len, f.cred_path)) < 0) ||
        (f.conf_path && (rc = read_aws_file(&f.conf, &f.conf_len, f.conf_path)) < 0))
        goto done;
    rc = SHS_OK;
    if (named && !(f.cred && section_present(f.cred, f.cred_len, f.profile)) &&
        !(f.conf && section_present(f.conf, f.conf_len, f.conf_section))) {
        rc = shs__err(SHS_ECONFIG, "AWS_PROFILE: profile '%s' is in neither %s nor %s", f.profile,
                      f.cred_path ? f.cred_path : "~/.aws/credentials",
                      f.conf_path ? f.conf_path : "~/.aws/config");
        goto done;
    }

    /* region */
    if ((rc = dup_env(&c.region, "AWS_REGION")) < 0 ||
        (!c.region && (rc = dup_env(&c.region, "AWS_DEFAULT_REGION")) < 0) ||
        (!c.region && (rc = profile_get(&c.region, &f, "region", 0)) < 0))
        goto done;
    if (!c.region && !(c.region = shs__strdup("us-east-1"))) {
        rc = shs__err(SHS_ENOMEM, "out of memory");
        goto done;
    }
    for (const char *q = c.region; *q; q++)
        if (!((*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') || *q == '-')) {
            rc = shs__err(SHS_ECONFIG, "region '%s': only a-z, 0-9 and '-'", c.region);
            goto done;
        }

    /* endpoint */
    const char *ep_what = "AWS_ENDPOINT_URL_S3";
    if ((rc = dup_env(&endpoint, "AWS_ENDPOINT_URL_S3")) < 0)
        goto done;
    if (!endpoint) {
        ep_what = "AWS_ENDPOINT_URL";
        if ((rc = dup_env(&endpoint, "AWS_ENDPOINT_URL")) < 0)
            goto done;
    }
    if (!endpoint) {
        ep_what = "endpoint_url";
        if ((rc = profile_get(&endpoint, &f, "endpoint_url", 0)) < 0)
            goto done;
    }
    if (endpoint) {
        c.custom_endpoint = 1;
        rc = parse_endpoint(&c, endpoint, ep_what);
    } else {
        char def[128];
        snprintf(def, sizeof def, "https://s3.%s.amazonaws.com", c.region);
        rc = parse_endpoint(&c, def, "default endpoint");
    }
    if (rc < 0 || (rc = load_addressing(&c)) < 0 || (rc = load_numbers(&c, &f)) < 0 ||
        (rc = load_credentials(&c, &f, named)) < 0)
        goto done;
    *out = c;
    memset(&c, 0, sizeof c);
done:
    shs__s3_config_release(&c);
    shs__free(endpoint);
    shs__free(f.cred_path);
    shs__free(f.conf_path);
    if (f.cred)
        memset(f.cred, 0, f.cred_len); /* it held secrets */
    shs__free(f.cred);
    if (f.conf)
        memset(f.conf, 0, f.conf_len);
    shs__free(f.conf);
    shs__free(f.conf_section);
    return rc;
}
