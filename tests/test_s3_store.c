/* test_s3_store.c -- the store seam against a real S3 server (Ceph
   radosgw, scripts/s3-server.sh, started by the ctest fixture) and a
   local directory, with one test body for both; faults injected by
   tests/s3/faultproxy.py between the client and the server; create-only
   races; the lease.  ctest label `s3`. */
#include "testutil.h"

#include "store/s3.h"
#include "store/store.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PART (256 * 1024)

static char g_bucket[64];
static char *g_tmp;
static char g_server[128], g_proxy[128];
static char g_secret[256];
static pid_t g_proxy_pid = -1;
static shs__s3 *g_direct, *g_faulty; /* to the server; through the proxy */
static int g_seq;

/* ---- set-up: the server's environment, a bucket, the proxy ---- */

static int load_server_env(void)
{
    char cmd[1024], line[512];
    snprintf(cmd, sizeof cmd, "bash '%s/scripts/s3-server.sh' env", SHS_TEST_SOURCE_DIR);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    int n = 0;
    while (fgets(line, sizeof line, p)) {
        char *eq, *v = line;
        if (strncmp(v, "export ", 7) == 0)
            v += 7;
        if (!(eq = strchr(v, '=')))
            continue;
        *eq = '\0';
        char *val = eq + 1;
        val[strcspn(val, "\r\n")] = '\0';
        setenv(v, val, 1);
        n++;
    }
    return pclose(p) == 0 && n >= 4 ? 0 : -1;
}

static shs__s3 *client_for(const char *endpoint)
{
    shs__s3_config c;
    shs__s3 *s3 = NULL;
    setenv("AWS_ENDPOINT_URL", endpoint, 1);
    TU_OK(shs__s3_config_load(&c));
    TU_OK(shs__s3_open(&s3, &c));
    shs__s3_config_release(&c);
    return s3;
}

static void start_proxy(void)
{
    char portfile[600], script[600];
    snprintf(portfile, sizeof portfile, "%s/proxy.port", g_tmp);
    snprintf(script, sizeof script, "%s/tests/s3/faultproxy.py", SHS_TEST_SOURCE_DIR);
    g_proxy_pid = fork();
    if (g_proxy_pid == 0) {
        execl("/usr/bin/python3", "python3", script, "--upstream", g_server, "--port-file",
              portfile, (char *)NULL);
        _exit(127);
    }
    assert_true(g_proxy_pid > 0);
    for (int i = 0; i < 200; i++) {
        size_t len;
        char *t = tu_read_file(portfile, &len);
        if (t) {
            snprintf(g_proxy, sizeof g_proxy, "http://127.0.0.1:%d", atoi(t));
            free(t);
            return;
        }
        usleep(50000);
    }
    fail_msg("the fault proxy did not start");
}

static int group_setup(void **state)
{
    if (load_server_env() != 0) {
        fprintf(stderr, "test_s3_store: no S3 server: scripts/s3-server.sh start (ctest starts "
                        "it through the s3.server fixture)\n");
        return -1;
    }
    snprintf(g_server, sizeof g_server, "%s", getenv("AWS_ENDPOINT_URL"));
    snprintf(g_secret, sizeof g_secret, "%s", getenv("AWS_SECRET_ACCESS_KEY"));
    /* small parts and quick retries: the tests move little data and
       wait little */
    setenv("SHS_S3_PART_SIZE", "262144", 1);
    setenv("SHS_S3_PARALLEL", "4", 1);
    setenv("SHS_S3_RETRY_BASE_MS", "5", 1);
    setenv("SHS_S3_RETRY_CAP_MS", "40", 1);
    setenv("AWS_MAX_ATTEMPTS", "4", 1);
    setenv("SHS_S3_STALL_TIMEOUT_S", "30", 1);
    g_tmp = tu_mkdtemp();
    snprintf(g_bucket, sizeof g_bucket, "shs-test-%ld-%ld", (long)getpid(), (long)time(NULL));
    g_direct = client_for(g_server);
    if (shs__s3_create_bucket(g_direct, g_bucket) != SHS_OK) {
        fprintf(stderr, "test_s3_store: cannot create bucket: %s\n", shs_last_error());
        return -1;
    }
    start_proxy();
    g_faulty = client_for(g_proxy);
    return 0;
}

static int group_teardown(void **state)
{
    if (g_proxy_pid > 0) {
        kill(g_proxy_pid, SIGTERM);
        waitpid(g_proxy_pid, NULL, 0);
    }
    shs__s3_close(g_faulty);
    shs__s3_close(g_direct);
    if (g_tmp) {
        tu_rmtree(g_tmp);
        free(g_tmp);
    }
    return 0;
}

/* ---- the proxy's control ---- */

static size_t sink(char *d, size_t s, size_t n, void *ctx)
{
    shs__buf_add(ctx, d, s * n);
    return s * n;
}

static char *proxy_call(const char *method, const char *what, const char *body)
{
    char url[300];
    shs__buf out = SHS__BUF_INIT;
    snprintf(url, sizeof url, "%s/__fault__/%s", g_proxy, what);
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &out);
    if (strcmp(method, "POST") == 0)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : "");
    long code = 0;
    assert_int_equal(curl_easy_perform(h), CURLE_OK);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    if (code != 200)
        fail_msg("proxy %s: %ld %s", what, code, out.data ? out.data : "");
    shs__buf_add(&out, "", 0);
    return out.data;
}

static void faults(const char *rules_json)
{
    shs__free(proxy_call("POST", "clear", NULL));
    if (rules_json)
        shs__free(proxy_call("POST", "rules", rules_json));
}

/* The proxy's log: requests seen, those matching method and `needle`
   (NULL any), and the faults among them. */
static size_t log_count(const char *method, const char *needle, size_t *nfaults)
{
    char *text = proxy_call("GET", "log", NULL);
    json_error_t e;
    json_t *a = json_loads(text, 0, &e);
    shs__free(text);
    assert_non_null(a);
    size_t n = 0, nf = 0, i;
    json_t *x;
    json_array_foreach(a, i, x)
    {
        const char *m = json_string_value(json_object_get(x, "method"));
        const char *p = json_string_value(json_object_get(x, "path"));
        const char *f = json_string_value(json_object_get(x, "fault"));
        if ((method && strcmp(m, method)) || (needle && !strstr(p, needle)))
            continue;
        n++;
        nf += f && *f && strcmp(f, "delay");
    }
    json_decref(a);
    if (nfaults)
        *nfaults = nf;
    return n;
}

/* ---- stores ---- */

static shs__store *open_s3(shs__s3 *c)
{
    char loc[200];
    shs__store *st = NULL;
    snprintf(loc, sizeof loc, "s3://%s/run-%d", g_bucket, ++g_seq);
    TU_OK(shs__store_open_s3(&st, loc, c));
    return st;
}

static shs__store *open_local(void)
{
    char loc[700];
    shs__store *st = NULL;
    snprintf(loc, sizeof loc, "%s/local-%d", g_tmp, ++g_seq);
    TU_OK(shs__store_open(&st, loc));
    return st;
}

static void fill(char *b, size_t n, unsigned seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b[i] = (char)x;
    }
}

static void no_secret(void)
{
    const char *m = shs_last_error();
    if (strstr(m, g_secret) || strstr(m, "Signature=") || strstr(m, "Credential="))
        fail_msg("an error message holds a credential: %s", m);
}

/* One body, both backends: every operation of the seam. */
static void store_ops(shs__store *st)
{
    uint64_t size = 0;
    char buf[64], *all = NULL;
    size_t len = 0;
    assert_int_equal(shs__store_head(st, "missing", &size), SHS_ENOENT);
    assert_int_equal(shs__store_read_all(st, "missing", 100, &all, &len), SHS_ENOENT);
    TU_OK(shs__store_put(st, "a/b.txt", "hello world", 11, SHS__STORE_FSYNC));
    TU_OK(shs__store_head(st, "a/b.txt", &size));
    assert_int_equal(size, 11);
    TU_OK(shs__store_read(st, "a/b.txt", 6, buf, 5));
    assert_memory_equal(buf, "world", 5);
    assert_int_equal(shs__store_read(st, "a/b.txt", 8, buf, 5), SHS_ERANGE);
    assert_non_null(strstr(shs_last_error(), "a/b.txt"));
    assert_int_equal(shs__store_read(st, "a/b.txt", 100, buf, 5), SHS_ERANGE);
    TU_OK(shs__store_read(st, "a/b.txt", 100, buf, 0));
    TU_OK(shs__store_read_all(st, "a/b.txt", 11, &all, &len));
    assert_int_equal(len, 11);
    assert_string_equal(all, "hello world");
    shs__free(all);
    assert_int_equal(shs__store_read_all(st, "a/b.txt", 10, &all, &len), SHS_ECORRUPT);
    assert_null(all);
    /* replace, then create-only */
    TU_OK(shs__store_put(st, "a/b.txt", "HELLO", 5, 0));
    TU_OK(shs__store_head(st, "a/b.txt", &size));
    assert_int_equal(size, 5);
    assert_int_equal(shs__store_put(st, "a/b.txt", "x", 1, SHS__STORE_CREATE_ONLY), SHS_EEXIST);
    TU_OK(shs__store_read_all(st, "a/b.txt", 100, &all, &len));
    assert_string_equal(all, "HELLO"); /* untouched */
    shs__free(all);
    TU_OK(shs__store_put(st, "a/c/d.bin", "", 0, SHS__STORE_CREATE_ONLY));
    TU_OK(shs__store_head(st, "a/c/d.bin", &size));
    assert_int_equal(size, 0);
    TU_OK(shs__store_put(st, "a/c/e.bin", "12", 2, 0));
    TU_OK(shs__store_put(st, "ab", "3", 1, 0));
    TU_OK(shs__store_put(st, "z", "4", 1, 0));
    /* listings: sorted, folded with the delimiter */
    shs__store_listing l;
    TU_OK(shs__store_list(st, "", 0, &l));
    assert_int_equal(l.n, 5);
    assert_string_equal(l.names[0], "a/b.txt");
    assert_string_equal(l.names[1], "a/c/d.bin");
    assert_string_equal(l.names[2], "a/c/e.bin");
    assert_string_equal(l.names[3], "ab");
    assert_int_equal(l.sizes[3], 1);
    assert_string_equal(l.names[4], "z");
    assert_int_equal(l.ndirs, 0);
    shs__store_list_release(&l);
    TU_OK(shs__store_list(st, "", 1, &l));
    assert_int_equal(l.n, 2); /* ab, z */
    assert_int_equal(l.ndirs, 1);
    assert_string_equal(l.dirs[0], "a/");
    shs__store_list_release(&l);
    TU_OK(shs__store_list(st, "a/", 1, &l));
    assert_int_equal(l.n, 1);
    assert_string_equal(l.names[0], "a/b.txt");
    assert_int_equal(l.ndirs, 1);
    assert_string_equal(l.dirs[0], "a/c/");
    shs__store_list_release(&l);
    TU_OK(shs__store_list(st, "a", 0, &l)); /* a string prefix */
    assert_int_equal(l.n, 4);
    shs__store_list_release(&l);
    TU_OK(shs__store_list(st, "nothing/", 0, &l));
    assert_int_equal(l.n + l.ndirs, 0);
    shs__store_list_release(&l);
    assert_int_equal(shs__store_list(st, "../", 0, &l), SHS_EINVAL);

    /* many ranges at once, one of them bad */
    char r1[2], r2[3], r3[1];
    shs__store_range rg[3] = { { "a/c/e.bin", 0, r1, 2, 0 },
                               { "a/b.txt", 2, r2, 3, 0 },
                               { "z", 0, r3, 1, 0 } };
    TU_OK(shs__store_read_many(st, rg, 3));
    assert_memory_equal(r1, "12", 2);
    assert_memory_equal(r2, "LLO", 3);
    rg[2].key = "absent";
    int rc = shs__store_read_many(st, rg, 3);
    if (rc != SHS_ENOENT)
        fail_msg("read_many: %d %s", rc, shs_last_error());
    assert_int_equal(rg[0].status, SHS_OK);
    assert_int_equal(rg[2].status, SHS_ENOENT);

    /* streaming: several parts, then one that fits in a part */
    size_t big = 3 * PART + 1234;
    char *data = malloc(big), *back = malloc(big);
    fill(data, big, 7);
    shs__store_upload *u;
    TU_OK(shs__store_upload_begin(&u, st, "big/obj.safetensors", big, SHS__STORE_FSYNC));
    /* nothing visible before the commit */
    assert_int_equal(shs__store_head(st, "big/obj.safetensors", &size), SHS_ENOENT);
    for (size_t off = 0; off < big; off += 10007)
        TU_OK(shs__store_upload_write(u, data + off, big - off < 10007 ? big - off : 10007));
    TU_OK(shs__store_upload_commit(u));
    TU_OK(shs__store_head(st, "big/obj.safetensors", &size));
    assert_int_equal(size, big);
    TU_OK(shs__store_read(st, "big/obj.safetensors", 0, back, big));
    assert_memory_equal(back, data, big);
    TU_OK(shs__store_upload_begin(&u, st, "big/small", 0, 0));
    TU_OK(shs__store_upload_write(u, data, 1000));
    TU_OK(shs__store_upload_commit(u));
    TU_OK(shs__store_head(st, "big/small", &size));
    assert_int_equal(size, 1000);
    /* aborted after parts went up: nothing left, on S3 no open upload */
    TU_OK(shs__store_upload_begin(&u, st, "big/aborted", 0, 0));
    TU_OK(shs__store_upload_write(u, data, 2 * PART + 5));
    shs__store_upload_abort(u);
    assert_int_equal(shs__store_head(st, "big/aborted", &size), SHS_ENOENT);
    TU_OK(shs__store_list(st, "big/", 0, &l));
    assert_int_equal(l.n, 2); /* no temporary shows */
    shs__store_list_release(&l);
    if (shs__store_is_s3(st)) {
        shs__s3_uploads_page up;
        TU_OK(shs__s3_list_uploads(shs__store_s3(st), g_bucket, "", &up));
        for (size_t i = 0; i < up.n; i++)
            assert_null(strstr(up.keys[i], "big/aborted"));
        shs__s3_uploads_page_release(&up);
    }
    TU_OK(shs__store_upload_begin(&u, st, "big/create-only", 0, 0));
    shs__store_upload_abort(u);
    assert_int_equal(shs__store_upload_begin(&u, st, "x", 0, SHS__STORE_CREATE_ONLY),
                     SHS_EUNSUPPORTED);
    free(data);
    free(back);

    /* the commit point */
    TU_OK(shs__store_commit_put(st, "step/metadata.json", "{\"a\":1}", 7));
    TU_OK(shs__store_commit_put(st, "step/metadata.json", "{\"a\":1}", 7)); /* ours again */
    assert_int_equal(shs__store_commit_put(st, "step/metadata.json", "{\"a\":2}", 7), SHS_EEXIST);
    assert_non_null(strstr(shs_last_error(), "step/metadata.json"));

    /* hostile keys never reach the backend */
    static const char *const hostile[] = { "../x", "/etc/passwd", "a//b", "%2e%2e/x", "a/./b", "" };
    for (size_t i = 0; i < sizeof hostile / sizeof *hostile; i++) {
        assert_int_equal(shs__store_put(st, hostile[i], "x", 1, 0), SHS_EINVAL);
        assert_int_equal(shs__store_head(st, hostile[i], &size), SHS_EINVAL);
        assert_int_equal(shs__store_delete(st, hostile[i]), SHS_EINVAL);
    }

    /* delete: absent is fine; a prefix goes whole */
    TU_OK(shs__store_delete(st, "z"));
    TU_OK(shs__store_delete(st, "z"));
    assert_int_equal(shs__store_head(st, "z", &size), SHS_ENOENT);
    TU_OK(shs__store_delete_prefix(st, "a/"));
    TU_OK(shs__store_list(st, "a", 0, &l));
    assert_int_equal(l.n, 1); /* "ab" only */
    shs__store_list_release(&l);
    assert_int_equal(shs__store_delete_prefix(st, ""), SHS_EINVAL);
    no_secret();
}

static void test_ops_local(void **state)
{
    shs__store *st = open_local();
    store_ops(st);
    /* the local backend's temporaries stay invisible */
    char *p = shs__store_local_path(st, "ab.shs-tmp-0123456789abcdef");
    assert_null(p); /* not a key */
    shs__store_close(st);
}

static void test_ops_s3(void **state)
{
    shs__store *st = open_s3(g_direct);
    store_ops(st);
    shs__store_close(st);
}

/* The same operations through the proxy with a fault on every third
   request: each is retried and everything still holds. */
static void test_ops_s3_faulty(void **state)
{
    faults("[{\"action\": \"503\", \"nth\": 3, \"count\": 1},"
           " {\"action\": \"500\", \"nth\": 7, \"count\": 1},"
           " {\"action\": \"reset\", \"nth\": 11, \"count\": 1},"
           " {\"action\": \"503\", \"nth\": 17, \"count\": 1},"
           " {\"action\": \"reset\", \"nth\": 23, \"count\": 1}]");
    shs__store *st = open_s3(g_faulty);
    store_ops(st);
    shs__store_close(st);
    size_t nf = 0;
    log_count(NULL, NULL, &nf);
    assert_int_equal(nf, 5);
}

/* Each kind of fault on a whole PUT and on a ranged GET: the operation
   succeeds after a retry, and the proxy saw the fault. */
static void test_each_fault(void **state)
{
    static const char *const kinds[] = { "500", "503", "reset", "delay", "truncate" };
    shs__store *st = open_s3(g_faulty);
    char data[5000], back[5000];
    fill(data, sizeof data, 3);
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        char rules[300];
        const char *method = strcmp(kinds[k], "truncate") == 0 ? "GET" : "*";
        snprintf(rules, sizeof rules,
                 "[{\"action\": \"%s\", \"method\": \"%s\", \"key\": \"obj\", \"nth\": 1, "
                 "\"count\": 2, \"delay_ms\": 200}]",
                 kinds[k], method);
        faults(rules);
        TU_OK(shs__store_put(st, "obj", data, sizeof data, 0));
        memset(back, 0, sizeof back);
        TU_OK(shs__store_read(st, "obj", 0, back, sizeof back));
        assert_memory_equal(back, data, sizeof back);
        size_t nf = 0, n = log_count(NULL, "obj", &nf);
        if (strcmp(kinds[k], "delay") == 0)
            assert_int_equal(n, 2);
        else
            assert_int_equal(nf, 2);
    }
    shs__store_close(st);
}

/* Retries run out: the error names the operation, the key, the status
   and the S3 code, and nothing secret. */
static void test_retries_exhausted(void **state)
{
    shs__store *st = open_s3(g_faulty);
    uint64_t size;
    faults("[{\"action\": \"503\", \"method\": \"PUT\", \"key\": \"doomed\", \"count\": 0}]");
    assert_int_equal(shs__store_put(st, "doomed", "x", 1, 0), SHS_EIO);
    const char *m = shs_last_error();
    assert_non_null(strstr(m, "PUT"));
    assert_non_null(strstr(m, "/doomed"));
    assert_non_null(strstr(m, "503"));
    assert_non_null(strstr(m, "SlowDown"));
    assert_non_null(strstr(m, "4 attempts"));
    no_secret();
    assert_int_equal(log_count("PUT", "doomed", NULL), 4); /* AWS_MAX_ATTEMPTS */
    faults("[{\"action\": \"reset\", \"method\": \"GET\", \"count\": 0}]");
    TU_OK(shs__store_put(st, "ok", "y", 1, 0));
    char c;
    assert_int_equal(shs__store_read(st, "ok", 0, &c, 1), SHS_EIO);
    assert_non_null(strstr(shs_last_error(), "/ok"));
    no_secret();
    /* a 500 on HEAD names its status too */
    faults("[{\"action\": \"500\", \"method\": \"HEAD\", \"count\": 0}]");
    assert_int_equal(shs__store_head(st, "ok", &size), SHS_EIO);
    assert_non_null(strstr(shs_last_error(), "HTTP 500"));
    faults(NULL);
    shs__store_close(st);
}

/* A part that fails is retried alone: the other parts go up once. */
static void test_multipart_part_retried(void **state)
{
    shs__store *st = open_s3(g_faulty);
    size_t big = 4 * PART;
    char *data = malloc(big), *back = malloc(big);
    fill(data, big, 11);
    faults("[{\"action\": \"500\", \"method\": \"PUT\", \"key\": \"partNumber=2&\", \"count\": 2},"
           " {\"action\": \"truncate\", \"method\": \"GET\", \"nth\": 2, \"count\": 1}]");
    shs__store_upload *u;
    TU_OK(shs__store_upload_begin(&u, st, "mp", 0, 0));
    TU_OK(shs__store_upload_write(u, data, big));
    TU_OK(shs__store_upload_commit(u));
    assert_int_equal(log_count("PUT", "partNumber=2&", NULL), 3);
    assert_int_equal(log_count("PUT", "partNumber=1&", NULL), 1);
    assert_int_equal(log_count("PUT", "partNumber=3&", NULL), 1);
    assert_int_equal(log_count("PUT", "partNumber=4&", NULL), 1);
    assert_int_equal(log_count("POST", "uploads=", NULL), 1); /* one upload, not restarted */
    /* read back in parallel ranges, one of them cut short once */
    shs__store_range rg[4];
    for (int i = 0; i < 4; i++)
        rg[i] = (shs__store_range){ "mp", (uint64_t)i * PART, back + (size_t)i * PART, PART, 0 };
    TU_OK(shs__store_read_many(st, rg, 4));
    assert_memory_equal(back, data, big);
    /* a part that never goes up: the upload fails, names the part, and
       leaves no open multipart upload */
    faults(
        "[{\"action\": \"503\", \"method\": \"PUT\", \"key\": \"partNumber=3&\", \"count\": 0}]");
    TU_OK(shs__store_upload_begin(&u, st, "mp-doomed", 0, 0));
    int rc = shs__store_upload_write(u, data, big);
    if (rc == SHS_OK)
        rc = shs__store_upload_commit(u);
    else
        shs__store_upload_abort(u);
    assert_int_equal(rc, SHS_EIO);
    assert_non_null(strstr(shs_last_error(), "part 3"));
    assert_non_null(strstr(shs_last_error(), "mp-doomed"));
    no_secret();
    faults(NULL);
    uint64_t size;
    assert_int_equal(shs__store_head(st, "mp-doomed", &size), SHS_ENOENT);
    shs__s3_uploads_page up;
    TU_OK(shs__s3_list_uploads(g_direct, g_bucket, "", &up));
    for (size_t i = 0; i < up.n; i++)
        assert_null(strstr(up.keys[i], "mp-doomed"));
    shs__s3_uploads_page_release(&up);
    free(data);
    free(back);
    shs__store_close(st);
}

/* The sweep: count the requests of an upload and its commit, then fail
   each in turn -- once (the upload succeeds, the bytes are right) and
   for good (a clean error naming the key, the previous object intact). */
static void test_fault_sweep(void **state)
{
    shs__store *st = open_s3(g_faulty);
    size_t big = 2 * PART + 777;
    char *v1 = malloc(big), *v2 = malloc(big), *back = malloc(big);
    fill(v1, big, 1);
    fill(v2, big, 2);
    TU_OK(shs__store_put(st, "sweep", v1, big, 0));
    faults(NULL);
    shs__store_upload *u;
    TU_OK(shs__store_upload_begin(&u, st, "sweep", 0, 0));
    TU_OK(shs__store_upload_write(u, v2, big));
    TU_OK(shs__store_upload_commit(u));
    size_t n = log_count(NULL, NULL, NULL);
    assert_true(n >= 5); /* create, 3 parts, complete */
    for (size_t i = 1; i <= n; i++) {
        for (int forever = 0; forever < 2; forever++) {
            char rules[200];
            const char *kind = (i + (size_t)forever) % 2 ? "500" : "reset";
            TU_OK(shs__store_put(st, "sweep", v1, big, 0));
            snprintf(rules, sizeof rules, "[{\"action\": \"%s\", \"nth\": %zu, \"count\": %d}]",
                     kind, i, forever ? 0 : 1);
            faults(rules);
            int rc = shs__store_upload_begin(&u, st, "sweep", 0, 0);
            if (rc == SHS_OK)
                rc = shs__store_upload_write(u, v2, big);
            if (rc == SHS_OK)
                rc = shs__store_upload_commit(u);
            else if (u)
                shs__store_upload_abort(u);
            u = NULL;
            faults(NULL);
            TU_OK(shs__store_read(st, "sweep", 0, back, big));
            if (!forever) {
                if (rc != SHS_OK)
                    fail_msg("request %zu failed once: %s", i, shs_last_error());
                assert_memory_equal(back, v2, big);
            } else {
                assert_int_equal(rc, SHS_EIO);
                assert_non_null(strstr(shs_last_error(), "/sweep"));
                no_secret();
                /* the object is the old one or the new one, whole */
                assert_true(memcmp(back, v1, big) == 0 || memcmp(back, v2, big) == 0);
            }
        }
    }
    free(v1);
    free(v2);
    free(back);
    shs__store_close(st);
}

/* Two threads race a create-only put of one key: exactly one wins. */
typedef struct racer {
    shs__store *st;
    const char *key;
    char body[32];
    int rc;
    pthread_barrier_t *bar;
} racer;

static void *race(void *arg)
{
    racer *r = arg;
    pthread_barrier_wait(r->bar);
    r->rc = shs__store_commit_put(r->st, r->key, r->body, strlen(r->body));
    return NULL;
}

static void race_on(shs__store *st)
{
    for (int round = 0; round < 6; round++) {
        char key[64];
        pthread_barrier_t bar;
        pthread_t th[2];
        racer r[2];
        snprintf(key, sizeof key, "race/%d/metadata.json", round);
        pthread_barrier_init(&bar, NULL, 2);
        for (int i = 0; i < 2; i++) {
            r[i] = (racer){ st, key, "", 0, &bar };
            snprintf(r[i].body, sizeof r[i].body, "{\"writer\": %d}", i);
            pthread_create(&th[i], NULL, race, &r[i]);
        }
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        pthread_barrier_destroy(&bar);
        assert_true((r[0].rc == SHS_OK && r[1].rc == SHS_EEXIST) ||
                    (r[0].rc == SHS_EEXIST && r[1].rc == SHS_OK));
        char *all;
        size_t len;
        TU_OK(shs__store_read_all(st, key, 100, &all, &len));
        assert_string_equal(all, r[r[0].rc == SHS_OK ? 0 : 1].body);
        shs__free(all);
    }
}

static void test_create_only_race(void **state)
{
    shs__store *st = open_s3(g_direct);
    race_on(st);
    shs__store_close(st);
    st = open_local();
    race_on(st);
    shs__store_close(st);
}

/* A create-only put whose answer is lost: the retry meets the object it
   created itself, and that is success. */
static void test_create_only_lost_answer(void **state)
{
    shs__store *st = open_s3(g_faulty);
    faults("[{\"action\": \"truncate\", \"method\": \"PUT\", \"key\": \"lost\", \"count\": 1}]");
    /* truncate forwards the request, then cuts the answer: the object
       exists when the client retries */
    TU_OK(shs__store_put(st, "lost/metadata.json", "{\"x\":1}", 7, SHS__STORE_CREATE_ONLY));
    assert_int_equal(log_count("PUT", "lost", NULL), 2);
    /* another writer's object met by a retry stays a refusal */
    faults("[{\"action\": \"truncate\", \"method\": \"PUT\", \"key\": \"lost\", \"count\": 1}]");
    assert_int_equal(
        shs__store_put(st, "lost/metadata.json", "{\"x\":2}", 7, SHS__STORE_CREATE_ONLY),
        SHS_EEXIST);
    faults(NULL);
    shs__store_close(st);
}

/* ---- the lease ---- */

static void lease_on(shs__store *st)
{
    shs__lease *a = NULL, *b = NULL;
    shs_lock_holder h;
    char pid[32];
    snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
    TU_OK(shs__lease_holder(&h, st, ".lease"));
    assert_int_equal(h.held, 0);
    TU_OK(shs__lease_take(&a, st, ".lease", 60));
    assert_true(shs__lease_remaining(a) > 50);
    /* a second job is refused, and told who holds it */
    assert_int_equal(shs__lease_take(&b, st, ".lease", 60), SHS_ELOCKED);
    assert_null(b);
    assert_non_null(strstr(shs_last_error(), pid));
    assert_non_null(strstr(shs_last_error(), "host"));
    TU_OK(shs__lease_holder(&h, st, ".lease"));
    assert_int_equal(h.held, 1);
    assert_int_equal(h.pid, getpid());
    TU_OK(shs__lease_renew(a));
    TU_OK(shs__lease_release(a));
    TU_OK(shs__lease_holder(&h, st, ".lease"));
    assert_int_equal(h.held, 0);
    TU_OK(shs__lease_take(&a, st, ".lease", 60));

    /* a holder that stopped renewing: its lease expires and is taken over
       (its object rewritten as it would look after the ttl ran out) */
    shs__store_listing l;
    TU_OK(shs__store_list(st, ".lease/", 0, &l));
    assert_int_equal(l.n, 1);
    char *text;
    size_t len;
    TU_OK(shs__store_read_all(st, l.names[0], 4096, &text, &len));
    char *exp = strstr(text, "expires ");
    assert_non_null(exp);
    char stale[600];
    snprintf(stale, sizeof stale, "%.*sexpires 1000\n%s", (int)(exp - text), text,
             strchr(exp, '\n') + 1);
    TU_OK(shs__store_put(st, l.names[0], stale, strlen(stale), 0));
    shs__free(text);
    TU_OK(shs__lease_holder(&h, st, ".lease"));
    assert_int_equal(h.held, 0);
    assert_non_null(strstr(h.text, "expired"));
    TU_OK(shs__lease_take(&b, st, ".lease", 60));
    shs__store_list_release(&l);
    TU_OK(shs__store_list(st, ".lease/", 0, &l));
    assert_int_equal(l.n, 1); /* the old generation is gone */
    shs__store_list_release(&l);
    /* the old holder learns it lost the lease, and its release does not
       take the new holder's */
    assert_int_equal(shs__lease_renew(a), SHS_ELOCKED);
    assert_non_null(strstr(shs_last_error(), "lost"));
    TU_OK(shs__lease_release(a));
    TU_OK(shs__lease_holder(&h, st, ".lease"));
    assert_int_equal(h.held, 1);
    TU_OK(shs__lease_release(b));
    /* hostile contents: no crash, an unknown holder that never expires
       does not lock forever (no expiry: expired) */
    TU_OK(shs__store_put(st, ".lease/00000000000000000009", "\x01garbage\nexpires x\n", 19, 0));
    TU_OK(shs__lease_take(&a, st, ".lease", 60));
    TU_OK(shs__lease_release(a));
    assert_int_equal(shs__lease_take(&a, st, "../x", 60), SHS_EINVAL);
}

static void test_lease(void **state)
{
    shs__store *st = open_s3(g_direct);
    lease_on(st);
    shs__store_close(st);
    st = open_local();
    lease_on(st);
    shs__store_close(st);
}

typedef struct taker {
    shs__store *st;
    shs__lease *l;
    int rc;
    pthread_barrier_t *bar;
} taker;

static void *take(void *arg)
{
    taker *t = arg;
    pthread_barrier_wait(t->bar);
    t->rc = shs__lease_take(&t->l, t->st, ".lease", 60);
    return NULL;
}

/* Two jobs race to take over an expired lease: one wins. */
static void test_lease_takeover_race(void **state)
{
    shs__store *st = open_s3(g_direct);
    for (int round = 0; round < 4; round++) {
        char stale[] = "pid 1\nhost gone\nsince 2000-01-01T00:00:00Z\nexpires 1000\ntoken x\n";
        pthread_barrier_t bar;
        pthread_t th[2];
        taker t[2];
        TU_OK(shs__store_put(st, ".lease/00000000000000000003", stale, strlen(stale), 0));
        pthread_barrier_init(&bar, NULL, 2);
        for (int i = 0; i < 2; i++) {
            t[i] = (taker){ st, NULL, 0, &bar };
            pthread_create(&th[i], NULL, take, &t[i]);
        }
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        pthread_barrier_destroy(&bar);
        assert_true((t[0].rc == SHS_OK) + (t[1].rc == SHS_OK) == 1);
        assert_true(t[0].rc == SHS_ELOCKED || t[1].rc == SHS_ELOCKED);
        TU_OK(shs__lease_release(t[0].l ? t[0].l : t[1].l));
    }
    shs__store_close(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ops_local),
        cmocka_unit_test(test_ops_s3),
        cmocka_unit_test(test_ops_s3_faulty),
        cmocka_unit_test(test_each_fault),
        cmocka_unit_test(test_retries_exhausted),
        cmocka_unit_test(test_multipart_part_retried),
        cmocka_unit_test(test_fault_sweep),
        cmocka_unit_test(test_create_only_race),
        cmocka_unit_test(test_create_only_lost_answer),
        cmocka_unit_test(test_lease),
        cmocka_unit_test(test_lease_takeover_race),
    };
    return TU_RUN_GROUP(tests, group_setup, group_teardown);
}
