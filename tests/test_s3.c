/* test_s3.c -- the pieces of the S3 client and the store seam that need
   no server: encoding, the canonical query, the retry policy, the AWS
   configuration and profiles, the XML parser against hostile answers,
   key rules and locations.  (Against a real server: test_s3_store.c.) */
#include "testutil.h"

#include "store/s3.h"
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const aws_vars[] = {
    "AWS_ENDPOINT_URL",       "AWS_ENDPOINT_URL_S3",   "AWS_REGION",
    "AWS_DEFAULT_REGION",     "AWS_ACCESS_KEY_ID",     "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",      "AWS_PROFILE",           "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",        "AWS_MAX_ATTEMPTS",      "SHS_S3_ADDRESSING",
    "SHS_S3_PART_SIZE",       "SHS_S3_PARALLEL",       "SHS_S3_RETRY_BASE_MS",
    "SHS_S3_RETRY_CAP_MS",    "SHS_S3_RETRY_TOTAL_MS", "SHS_S3_CONNECT_TIMEOUT_MS",
    "SHS_S3_STALL_TIMEOUT_S", "SHS_S3_SIGN_PAYLOAD",   "HOME",
};

static char *g_dir;

static int setup(void **state)
{
    for (size_t i = 0; i < sizeof aws_vars / sizeof *aws_vars; i++)
        unsetenv(aws_vars[i]);
    g_dir = tu_mkdtemp();
    setenv("HOME", g_dir, 1); /* no ~/.aws of the machine's */
    return 0;
}

static int teardown(void **state)
{
    tu_rmtree(g_dir);
    free(g_dir);
    return 0;
}

static void test_uri_encode(void **state)
{
    shs__buf b = SHS__BUF_INIT;
    const char s[] = "a b/c~d_e.f-G+%\xc3\xa9*";
    TU_OK(shs__s3_uri_encode(&b, s, strlen(s), 1));
    assert_string_equal(b.data, "a%20b/c~d_e.f-G%2B%25%C3%A9%2A");
    b.len = 0;
    TU_OK(shs__s3_uri_encode(&b, s, strlen(s), 0));
    assert_string_equal(b.data, "a%20b%2Fc~d_e.f-G%2B%25%C3%A9%2A");
    shs__buf_release(&b);
}

static void test_canonical_query(void **state)
{
    shs__buf b = SHS__BUF_INIT;
    const char *n1[] = { "uploads" }, *v1[] = { NULL };
    TU_OK(shs__s3_canonical_query(&b, n1, v1, 1));
    assert_string_equal(b.data, "uploads="); /* with its '=' */
    const char *n2[] = { "prefix", "list-type", "delimiter", "continuation-token" };
    const char *v2[] = { "run/iteration 1/", "2", "/", "a+b=" };
    TU_OK(shs__s3_canonical_query(&b, n2, v2, 4));
    assert_string_equal(b.data, "continuation-token=a%2Bb%3D&delimiter=%2F&list-type=2&"
                                "prefix=run%2Fiteration%201%2F");
    const char *n3[] = { "uploadId", "partNumber" }, *v3[] = { "2~x/y", "10" };
    TU_OK(shs__s3_canonical_query(&b, n3, v3, 2));
    assert_string_equal(b.data, "partNumber=10&uploadId=2~x%2Fy");
    TU_OK(shs__s3_canonical_query(&b, NULL, NULL, 0));
    assert_string_equal(b.data, "");
    shs__buf_release(&b);
}

static void test_backoff(void **state)
{
    shs__s3_retry r = { 8, 100, 1000, 60000 };
    /* the window doubles from base and stops at cap; the draw is in it */
    assert_int_equal(shs__s3_backoff_ms(&r, 2, 100), 100);
    assert_int_equal(shs__s3_backoff_ms(&r, 2, 101), 0);
    assert_int_equal(shs__s3_backoff_ms(&r, 3, 200), 200);
    assert_int_equal(shs__s3_backoff_ms(&r, 4, 400), 400);
    assert_int_equal(shs__s3_backoff_ms(&r, 5, 800), 800);
    assert_int_equal(shs__s3_backoff_ms(&r, 6, 1000), 1000);
    assert_int_equal(shs__s3_backoff_ms(&r, 60, 1000), 1000);
    assert_int_equal(shs__s3_backoff_ms(&r, 60, 1001), 0);
    for (uint64_t x = 0; x < 5000; x += 7)
        assert_true(shs__s3_backoff_ms(&r, 1000, x * 0x9E3779B97F4A7C15ull) <= 1000);
    shs__s3_retry z = { 3, 0, 0, 0 };
    assert_int_equal(shs__s3_backoff_ms(&z, 3, 12345), 0);
}

static void test_retryable(void **state)
{
    assert_true(shs__s3_retryable(0, 500, ""));
    assert_true(shs__s3_retryable(0, 503, "SlowDown"));
    assert_true(shs__s3_retryable(0, 429, ""));
    assert_true(shs__s3_retryable(0, 400, "RequestTimeout"));
    assert_true(shs__s3_retryable(0, 200, "InternalError")); /* <Error> in a 200 */
    assert_false(shs__s3_retryable(0, 404, "NoSuchKey"));
    assert_false(shs__s3_retryable(0, 403, "SignatureDoesNotMatch"));
    assert_false(shs__s3_retryable(0, 412, "PreconditionFailed"));
    assert_false(shs__s3_retryable(0, 400, "EntityTooSmall"));
    assert_true(shs__s3_retryable(7 /* COULDNT_CONNECT */, 0, ""));
    assert_true(shs__s3_retryable(28 /* OPERATION_TIMEDOUT */, 0, ""));
    assert_true(shs__s3_retryable(56 /* RECV_ERROR */, 0, ""));
    assert_true(shs__s3_retryable(18 /* PARTIAL_FILE */, 0, ""));
    assert_false(shs__s3_retryable(42 /* ABORTED_BY_CALLBACK */, 0, ""));
    assert_false(shs__s3_retryable(23 /* WRITE_ERROR */, 0, ""));
}

static void test_ini(void **state)
{
    const char t[] = "# comment\n[default]\nregion = eu-west-1\n; x\n"
                     "[profile dev]\nregion=us-west-2  \t\ns3 =\n  addressing_style = path\n"
                     "endpoint_url = http://h:1\n";
    char *v = NULL;
    TU_OK(shs__ini_get(&v, t, strlen(t), "default", "region", "cfg"));
    assert_string_equal(v, "eu-west-1");
    free(v);
    TU_OK(shs__ini_get(&v, t, strlen(t), "profile dev", "region", "cfg"));
    assert_string_equal(v, "us-west-2");
    free(v);
    TU_OK(shs__ini_get(&v, t, strlen(t), "profile dev", "addressing_style", "cfg"));
    assert_null(v); /* nested: not a key of the section */
    TU_OK(shs__ini_get(&v, t, strlen(t), "profile dev", "endpoint_url", "cfg"));
    assert_string_equal(v, "http://h:1");
    free(v);
    TU_OK(shs__ini_get(&v, t, strlen(t), "nope", "region", "cfg"));
    assert_null(v);
    /* malformed and duplicated */
    const char *bad[] = { "[default\nregion = x\n",
                          "[default]\njunk line\n",
                          "[]\n",
                          "[default]\nregion = a\nregion = b\n",
                          "[default]\nregion = a\n[default]\nregion = b\n",
                          "[default]\n= x\n" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        v = NULL;
        assert_int_equal(shs__ini_get(&v, bad[i], strlen(bad[i]), "default", "region", "f.ini"),
                         SHS_ECONFIG);
        assert_null(v);
        assert_non_null(strstr(shs_last_error(), "f.ini:"));
    }
    const char nul[] = "[default]\nregion = a\0b\n";
    assert_int_equal(shs__ini_get(&v, nul, sizeof nul - 1, "default", "region", "f"), SHS_ECONFIG);
}

static void write_text(const char *path, const char *text)
{
    assert_int_equal(tu_write_file(path, text, strlen(text)), 0);
}

static void test_config_env(void **state)
{
    shs__s3_config c;
    /* nothing at all: a clear error */
    assert_int_equal(shs__s3_config_load(&c), SHS_ECONFIG);
    assert_non_null(strstr(shs_last_error(), "AWS_ACCESS_KEY_ID"));
    setenv("AWS_ACCESS_KEY_ID", "AKID", 1);
    assert_int_equal(shs__s3_config_load(&c), SHS_ECONFIG); /* half a pair */
    assert_non_null(strstr(shs_last_error(), "AWS_SECRET_ACCESS_KEY"));
    setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value", 1);
    TU_OK(shs__s3_config_load(&c));
    /* AWS's default endpoint, virtual-hosted, region default */
    assert_string_equal(c.scheme, "https");
    assert_string_equal(c.host, "s3.us-east-1.amazonaws.com");
    assert_int_equal(c.path_style, 0);
    assert_int_equal(c.custom_endpoint, 0);
    assert_string_equal(c.region, "us-east-1");
    assert_int_equal(c.sign_payload, 0); /* TLS protects the body */
    assert_int_equal(c.retry.max_attempts, 8);
    shs__s3_config_release(&c);

    setenv("AWS_DEFAULT_REGION", "eu-central-1", 1);
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/", 1);
    TU_OK(shs__s3_config_load(&c));
    assert_string_equal(c.region, "eu-central-1");
    assert_string_equal(c.host, "127.0.0.1:9000");
    assert_string_equal(c.base_path, "");
    assert_int_equal(c.path_style, 1); /* custom endpoint: path style */
    assert_int_equal(c.sign_payload, 1);
    shs__s3_config_release(&c);
    /* AWS_REGION wins over AWS_DEFAULT_REGION, _S3 over the generic URL */
    setenv("AWS_REGION", "ap-south-1", 1);
    setenv("AWS_ENDPOINT_URL_S3", "https://minio.example:9443/base", 1);
    setenv("SHS_S3_ADDRESSING", "virtual", 1);
    setenv("AWS_MAX_ATTEMPTS", "3", 1);
    setenv("SHS_S3_PART_SIZE", "5242880", 1);
    TU_OK(shs__s3_config_load(&c));
    assert_string_equal(c.region, "ap-south-1");
    assert_string_equal(c.host, "minio.example:9443");
    assert_string_equal(c.base_path, "/base");
    assert_int_equal(c.path_style, 0);
    assert_int_equal(c.retry.max_attempts, 3);
    assert_int_equal(c.part_size, 5242880);
    shs__s3_config_release(&c);

    /* bad values name their variable */
    struct {
        const char *var, *val;
    } bad[] = {
        { "SHS_S3_ADDRESSING", "sideways" },
        { "AWS_MAX_ATTEMPTS", "0" },
        { "AWS_MAX_ATTEMPTS", "3x" },
        { "SHS_S3_PART_SIZE", "1024" },
        { "SHS_S3_PARALLEL", "-1" },
        { "AWS_ENDPOINT_URL_S3", "ftp://h" },
        { "AWS_ENDPOINT_URL_S3", "http://user:pw@h" },
        { "AWS_ENDPOINT_URL_S3", "http://h/?q" },
        { "AWS_REGION", "us east" },
        { "SHS_S3_SIGN_PAYLOAD", "yes" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *old = getenv(bad[i].var) ? strdup(getenv(bad[i].var)) : NULL;
        setenv(bad[i].var, bad[i].val, 1);
        assert_int_equal(shs__s3_config_load(&c), SHS_ECONFIG);
        if (strcmp(bad[i].var, "AWS_REGION") && strncmp(bad[i].var, "AWS_ENDPOINT", 12))
            assert_non_null(strstr(shs_last_error(), bad[i].var));
        /* never the secret, even in a configuration error */
        assert_null(strstr(shs_last_error(), "s3cr3t"));
        if (old)
            setenv(bad[i].var, old, 1);
        else
            unsetenv(bad[i].var);
        free(old);
    }
}

static void test_config_profiles(void **state)
{
    char cred[512], conf[512];
    shs__s3_config c;
    snprintf(cred, sizeof cred, "%s/.aws/credentials", g_dir);
    snprintf(conf, sizeof conf, "%s/.aws/config", g_dir);
    char awsdir[512];
    snprintf(awsdir, sizeof awsdir, "%s/.aws", g_dir);
    assert_int_equal(mkdir(awsdir, 0700), 0);
    write_text(cred, "[default]\naws_access_key_id = DEFKEY\naws_secret_access_key = defsecret\n"
                     "[dev]\naws_access_key_id = DEVKEY\naws_secret_access_key = devsecret\n"
                     "aws_session_token = devtoken\n");
    write_text(conf, "[default]\nregion = eu-west-3\n"
                     "[profile dev]\nregion = us-west-1\nendpoint_url = http://127.0.0.1:7480\n"
                     "[profile cfgonly]\naws_access_key_id = CFGKEY\n"
                     "aws_secret_access_key = cfgsecret\nmax_attempts = 5\n");
    TU_OK(shs__s3_config_load(&c));
    assert_string_equal(c.access_key, "DEFKEY");
    assert_string_equal(c.region, "eu-west-3");
    assert_null(c.session_token);
    assert_string_equal(c.profile, "default");
    shs__s3_config_release(&c);
    setenv("AWS_PROFILE", "dev", 1);
    TU_OK(shs__s3_config_load(&c));
    assert_string_equal(c.access_key, "DEVKEY");
    assert_string_equal(c.session_token, "devtoken");
    assert_string_equal(c.region, "us-west-1");
    assert_string_equal(c.host, "127.0.0.1:7480");
    assert_int_equal(c.path_style, 1);
    shs__s3_config_release(&c);
    setenv("AWS_PROFILE", "cfgonly", 1);
    TU_OK(shs__s3_config_load(&c));
    assert_string_equal(c.access_key, "CFGKEY");
    assert_int_equal(c.retry.max_attempts, 5);
    shs__s3_config_release(&c);
    /* the environment's keys win over the profile's */
    setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
    TU_OK(shs__s3_config_load(&c));
    assert_string_equal(c.access_key, "ENVKEY");
    shs__s3_config_release(&c);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    /* a named profile that exists nowhere */
    setenv("AWS_PROFILE", "ghost", 1);
    assert_int_equal(shs__s3_config_load(&c), SHS_ECONFIG);
    assert_non_null(strstr(shs_last_error(), "ghost"));
    /* other files, by variable */
    char alt[512];
    snprintf(alt, sizeof alt, "%s/alt-credentials", g_dir);
    write_text(alt, "[ghost]\naws_access_key_id = GHOSTKEY\naws_secret_access_key = g\n");
    setenv("AWS_SHARED_CREDENTIALS_FILE", alt, 1);
    TU_OK(shs__s3_config_load(&c));
    assert_string_equal(c.access_key, "GHOSTKEY");
    shs__s3_config_release(&c);
    /* a malformed file is an error naming it, not silently skipped */
    write_text(alt, "[ghost]\nthis is not ini\n");
    assert_int_equal(shs__s3_config_load(&c), SHS_ECONFIG);
    assert_non_null(strstr(shs_last_error(), "alt-credentials:2"));
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    unsetenv("AWS_PROFILE");
}

static void test_xml_list(void **state)
{
    const char ok[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\n"
        "  <Name>b</Name><Prefix>run/</Prefix><KeyCount>3</KeyCount>\n"
        "  "
        "<IsTruncated>true</IsTruncated><NextContinuationToken>tok&amp;1</NextContinuationToken>\n"
        "  <Contents><Key>run/a&lt;b&gt;&#x263A;&#65;</Key><Size>12</Size>"
        "<ETag>&quot;x&quot;</ETag></Contents>\n"
        "  <Contents><Key>run/z</Key><Size>0</Size></Contents>\n"
        "  <CommonPrefixes><Prefix>run/iteration_1/</Prefix></CommonPrefixes>\n"
        "  <Contents><Key>run/big</Key><Size>18446744073709551615</Size></Contents>\n"
        "</ListBucketResult>\n";
    shs__s3_list_page p;
    TU_OK(shs__s3_parse_list(&p, ok, strlen(ok), "LIST s3://b/run/"));
    assert_int_equal(p.nkeys, 3);
    assert_string_equal(p.keys[0], "run/a<b>\xe2\x98\xba"
                                   "A");
    assert_int_equal(p.sizes[0], 12);
    assert_string_equal(p.keys[1], "run/z");
    assert_true(p.sizes[2] == UINT64_MAX);
    assert_int_equal(p.nprefixes, 1);
    assert_string_equal(p.prefixes[0], "run/iteration_1/");
    assert_true(p.truncated);
    assert_string_equal(p.next_token, "tok&1");
    shs__s3_list_page_release(&p);
    const char empty[] = "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>";
    TU_OK(shs__s3_parse_list(&p, empty, strlen(empty), "x"));
    assert_int_equal(p.nkeys + p.nprefixes, 0);
    shs__s3_list_page_release(&p);

    /* hostile answers: each is refused with SHS_ECORRUPT naming the
       request, never a crash, a hang or a key that escapes */
    static const char *const bad[] = {
        "",
        "not xml",
        "<ListBucketResult>",
        "<ListBucketResult></ListBucketResul>",
        "<ListBucketResult></ListBucketResult><x/>",
        "<ListBucketResult></ListBucketResult>trailing",
        "<Error><Code>AccessDenied</Code></Error>",
        "<!DOCTYPE x [<!ENTITY a \"aaaa\">]><ListBucketResult>&a;</ListBucketResult>",
        "<ListBucketResult><!-- c --></ListBucketResult>",
        "<ListBucketResult><![CDATA[x]]></ListBucketResult>",
        "<?xml version=\"1.0\"?><?pi x?><ListBucketResult/>",
        "<ListBucketResult><Contents><Key>a&bogus;</Key><Size>1</Size></Contents></"
        "ListBucketResult>",
        "<ListBucketResult><Contents><Key>a&#0;</Key><Size>1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>a&#xD800;</Key><Size>1</Size></Contents></"
        "ListBucketResult>",
        "<ListBucketResult><Contents><Key>a&#x110000;</Key><Size>1</Size></Contents>"
        "</ListBucketResult>",
        "<ListBucketResult><Contents><Key>a&#1;b</Key><Size>1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>a&#10;b</Key><Size>1</Size></Contents></"
        "ListBucketResult>",
        "<ListBucketResult><Contents><Key>a</Key><Size>-1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>a</Key><Size>18446744073709551616</Size></Contents>"
        "</ListBucketResult>",
        "<ListBucketResult><Contents><Key>a</Key></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>a</Key><Key>b</Key><Size>1</Size></Contents>"
        "</ListBucketResult>",
        "<ListBucketResult><Contents><Key></Key><Size>1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><IsTruncated>maybe</IsTruncated></ListBucketResult>",
        "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
        "<ListBucketResult><IsTruncated>false</IsTruncated><IsTruncated>true</IsTruncated>"
        "</ListBucketResult>",
        "<ListBucketResult><Contents>text<Key>a</Key><Size>1</Size></Contents></ListBucketResult>",
        "<ListBucketResult attr=noquote></ListBucketResult>",
        "<ListBucketResult a=\"<\"></ListBucketResult>",
        "<ListBucketResult>\x01</ListBucketResult>",
        "<ListBucketResult>\xff</ListBucketResult>",
        "<ListBucketResult>]]></ListBucketResult>",
        "\xef\xbb\xbf<ListBucketResult/>",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        memset(&p, 0x5a, sizeof p);
        int rc = shs__s3_parse_list(&p, bad[i], strlen(bad[i]), "LIST s3://b/p");
        if (rc != SHS_ECORRUPT)
            fail_msg("case %zu: %d for '%s'", i, rc, bad[i]);
        assert_non_null(strstr(shs_last_error(), "LIST s3://b/p"));
        assert_int_equal(p.nkeys, 0);
        assert_null(p.keys);
    }
    /* NUL inside a key (the answer's length says there is more) */
    const char nul[] = "<ListBucketResult><Contents><Key>a\0b</Key><Size>1</Size></Contents>"
                       "</ListBucketResult>";
    assert_int_equal(shs__s3_parse_list(&p, nul, sizeof nul - 1, "x"), SHS_ECORRUPT);
    /* depth is bounded without recursion */
    shs__buf deep = SHS__BUF_INIT;
    shs__buf_add(&deep, "<ListBucketResult>", 18);
    for (int i = 0; i < 100000; i++)
        shs__buf_add(&deep, "<a>", 3);
    assert_int_equal(shs__s3_parse_list(&p, deep.data, deep.len, "x"), SHS_ECORRUPT);
    assert_non_null(strstr(shs_last_error(), "deeply"));
    /* so is the element count */
    deep.len = 0;
    shs__buf_add(&deep, "<ListBucketResult>", 18);
    for (int i = 0; i < 600000; i++)
        shs__buf_add(&deep, "<a/>", 4);
    shs__buf_add(&deep, "</ListBucketResult>", 19);
    assert_int_equal(shs__s3_parse_list(&p, deep.data, deep.len, "x"), SHS_ECORRUPT);
    shs__buf_release(&deep);
}

static void test_xml_text(void **state)
{
    char *v = NULL;
    const char e[] = "<Error><Code>SlowDown</Code><Message>m</Message></Error>";
    TU_OK(shs__s3_xml_text(&v, e, strlen(e), "Error/Code", "x"));
    assert_string_equal(v, "SlowDown");
    free(v);
    TU_OK(shs__s3_xml_text(&v, e, strlen(e), "Error/Nope", "x"));
    assert_null(v);
    TU_OK(shs__s3_xml_text(&v, e, strlen(e), "Other/Code", "x"));
    assert_null(v);
    const char two[] = "<Error><Code>a</Code><Code>b</Code></Error>";
    assert_int_equal(shs__s3_xml_text(&v, two, strlen(two), "Error/Code", "x"), SHS_ECORRUPT);
    const char up[] = "<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key>"
                      "<UploadId>2~abc</UploadId></InitiateMultipartUploadResult>";
    TU_OK(shs__s3_xml_text(&v, up, strlen(up), "InitiateMultipartUploadResult/UploadId", "x"));
    assert_string_equal(v, "2~abc");
    free(v);
    const char mu[] = "<ListMultipartUploadsResult><IsTruncated>false</IsTruncated>"
                      "<Upload><Key>run/a</Key><UploadId>u1</UploadId></Upload>"
                      "<Upload><Key>run/b</Key><UploadId>u2</UploadId></Upload>"
                      "</ListMultipartUploadsResult>";
    shs__s3_uploads_page pg;
    TU_OK(shs__s3_parse_uploads(&pg, mu, strlen(mu), "x"));
    assert_int_equal(pg.n, 2);
    assert_string_equal(pg.keys[1], "run/b");
    assert_string_equal(pg.ids[1], "u2");
    shs__s3_uploads_page_release(&pg);
    const char mubad[] = "<ListMultipartUploadsResult><Upload><Key>run/a</Key></Upload>"
                         "</ListMultipartUploadsResult>";
    assert_int_equal(shs__s3_parse_uploads(&pg, mubad, strlen(mubad), "x"), SHS_ECORRUPT);
}

static void test_key_rules(void **state)
{
    static const char *const good[] = { "a", "iteration_00000010/metadata.json", ".lease/0001",
                                        "a.b/c..d/e...", "x y+z=~_-" };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        TU_OK(shs__store_key_check(good[i], 0));
    static const char
        *const
            bad[] = {
                "",      "/abs", "a//b",           "a/",    "..",   "a/../b",
                "./a",   "a/.",  "%2e%2e/x",       "a%2Fb", "a\\b", "a\tb",
                "a\x7f", "a\nb", "x.shs-tmp-0123", /* the local backend's temporaries */
            };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(shs__store_key_check(bad[i], 0), SHS_EINVAL);
        assert_non_null(strstr(shs_last_error(), "key"));
    }
    char long_key[1100];
    memset(long_key, 'a', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = '\0';
    assert_int_equal(shs__store_key_check(long_key, 0), SHS_EINVAL);
    char long_comp[210];
    memset(long_comp, 'b', sizeof long_comp - 1);
    long_comp[sizeof long_comp - 1] = '\0';
    assert_int_equal(shs__store_key_check(long_comp, 0), SHS_EINVAL);
    /* prefixes may be empty, end with '/', or stop inside a component */
    TU_OK(shs__store_key_check("", 1));
    TU_OK(shs__store_key_check("run/", 1));
    TU_OK(shs__store_key_check("run/iter", 1));
    TU_OK(shs__store_key_check("run/.", 1)); /* ".lease", ".tmp-..." */
    assert_int_equal(shs__store_key_check("run/../", 1), SHS_EINVAL);
    assert_int_equal(shs__store_key_check("/run", 1), SHS_EINVAL);
}

static void test_locations(void **state)
{
    shs__store *st = NULL;
    setenv("AWS_ACCESS_KEY_ID", "K", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S", 1);
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1", 1);
    TU_OK(shs__store_open(&st, "s3://my-bucket/run/one/"));
    assert_true(shs__store_is_s3(st));
    assert_string_equal(shs__store_location(st), "s3://my-bucket/run/one");
    assert_null(shs__store_local_dir(st));
    shs__store_close(st);
    TU_OK(shs__store_open(&st, "s3://my-bucket"));
    shs__store_close(st);
    static const char *const bad[] = { "s3://",
                                       "s3://ab",
                                       "s3://Bucket/x",
                                       "s3://b_c/x",
                                       "s3://bucket/../x",
                                       "s3://bucket/a//b",
                                       "s3://bucket/%2e%2e",
                                       "" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        st = (shs__store *)1;
        assert_int_equal(shs__store_open(&st, bad[i]), SHS_EINVAL);
        assert_null(st);
    }
    /* no credentials: the error says so and names the location */
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    assert_int_equal(shs__store_open(&st, "s3://my-bucket/run"), SHS_ECONFIG);
    assert_non_null(strstr(shs_last_error(), "s3://my-bucket/run"));
    unsetenv("AWS_ENDPOINT_URL");
    TU_OK(shs__store_open(&st, g_dir));
    assert_false(shs__store_is_s3(st));
    assert_string_equal(shs__store_local_dir(st), g_dir);
    shs__store_close(st);
}

/* Every allocation of the configuration and the parser may fail: a clean
   ENOMEM, nothing leaked. */
static int run_config(void *ctx)
{
    shs__s3_config c;
    int rc = shs__s3_config_load(&c);
    if (rc == SHS_OK)
        shs__s3_config_release(&c);
    return rc;
}

static int run_parse(void *ctx)
{
    const char *xml = ctx;
    shs__s3_list_page p;
    int rc = shs__s3_parse_list(&p, xml, strlen(xml), "x");
    if (rc == SHS_OK)
        shs__s3_list_page_release(&p);
    return rc;
}

static void test_oom(void **state)
{
    setenv("AWS_ACCESS_KEY_ID", "K", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S", 1);
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1/base", 1);
    tu_sweep s = { "s3 config", run_config, NULL, NULL, NULL };
    assert_true(tu_failalloc_sweep(&s) > 0);
    static const char xml[] = "<ListBucketResult><IsTruncated>true</IsTruncated>"
                              "<NextContinuationToken>t</NextContinuationToken>"
                              "<Contents><Key>a</Key><Size>1</Size></Contents>"
                              "<CommonPrefixes><Prefix>d/</Prefix></CommonPrefixes>"
                              "</ListBucketResult>";
    tu_sweep p = { "s3 list parse", run_parse, NULL, NULL, (void *)xml };
    assert_true(tu_failalloc_sweep(&p) > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_uri_encode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_canonical_query, setup, teardown),
        cmocka_unit_test_setup_teardown(test_backoff, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retryable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ini, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_env, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_profiles, setup, teardown),
        cmocka_unit_test_setup_teardown(test_xml_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_xml_text, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_locations, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oom, setup, teardown),
    };
    return TU_RUN_GROUP(tests, NULL, NULL);
}
