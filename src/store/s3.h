/*
 * s3.h -- a small S3 client: libcurl with its own SigV4 signing
 * (CURLOPT_AWS_SIGV4), libcrypto for payload hashes, curl_multi for
 * parallel parts and ranged reads.  Private to the library; the store
 * seam (store.h) is its only user outside tests.  docs/s3.md describes
 * the configuration and the retry policy for users.
 *
 * Facts measured with curl 7.88 (Debian 12) against radosgw, which shape
 * the code:
 *   - curl signs the x-amz-content-sha256 header's value as the payload
 *     hash but does not send the header by itself for service "s3":
 *     every request carries it, or the signature does not match;
 *   - curl signs the query string as it is in the URL: we build it in
 *     canonical form (keys sorted, every key with its '=', values
 *     percent-encoded with '/' as %2F);
 *   - radosgw answers a create-only PUT (If-None-Match: *) on an existing
 *     key with 412 PreconditionFailed, and a multipart completion with an
 *     empty ETag: we never rely on ETags.
 *
 * Thread safety: a client (shs__s3) may be used from many threads at
 * once; each call runs its own transfers.  A streaming upload
 * (shs__s3_upload) belongs to one thread, apart from its own background
 * thread.  No message, log line or error ever holds a credential or a
 * signature: only the method, bucket, key, HTTP status and S3 error code.
 */
#ifndef SHS_S3_H
#define SHS_S3_H

#include "common/internal.h"

/* ---- configuration (docs/s3.md) ---- */

typedef struct shs__s3_retry {
    unsigned max_attempts; /* attempts per request, first included (>= 1) */
    uint64_t base_ms;      /* backoff before attempt 2 is drawn from [0, base] */
    uint64_t cap_ms;       /* the window stops doubling here */
    uint64_t total_ms;     /* no retry starts later than this after the first */
} shs__s3_retry;

typedef struct shs__s3_config {
    char *scheme;        /* "http" or "https" */
    char *host;          /* host[:port] of the endpoint, without a bucket */
    char *base_path;     /* path of the endpoint ("" or "/something"), no '/' at the end */
    int custom_endpoint; /* an endpoint was configured (not AWS's default) */
    int path_style;      /* 1: http://host/bucket/key; 0: http://bucket.host/key */
    char *region;
    char *access_key;
    char *secret_key;    /* never printed */
    char *session_token; /* never printed; NULL without one */
    char *profile;       /* the profile the credentials came from, or NULL */
    shs__s3_retry retry;
    long connect_timeout_ms;
    long stall_timeout_s; /* a transfer slower than 1 KiB/s for this long fails */
    size_t part_size;     /* multipart part size in bytes */
    unsigned parallel;    /* transfers in flight per call / per upload */
    int sign_payload;     /* hash every body (http: default) or send UNSIGNED-PAYLOAD */
} shs__s3_config;

/* Limits on what the configuration may say. */
#define SHS__S3_MIN_PART ((size_t)64 * 1024)
#define SHS__S3_MAX_PART ((size_t)5 * 1024 * 1024 * 1024)
#define SHS__S3_MAX_PARTS 10000u
#define SHS__S3_MAX_PARALLEL 64u

/* Read the configuration the way the AWS tools do, from the environment
   (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, AWS_REGION, AWS_DEFAULT_REGION,
   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
   AWS_PROFILE, AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE,
   AWS_MAX_ATTEMPTS) and the profile's sections of ~/.aws/credentials and
   ~/.aws/config, plus ours (SHS_S3_ADDRESSING, SHS_S3_PART_SIZE,
   SHS_S3_PARALLEL, SHS_S3_RETRY_BASE_MS, SHS_S3_RETRY_CAP_MS,
   SHS_S3_RETRY_TOTAL_MS, SHS_S3_CONNECT_TIMEOUT_MS,
   SHS_S3_STALL_TIMEOUT_S, SHS_S3_SIGN_PAYLOAD).  SHS_ECONFIG names the
   variable or file line at fault.  Release with shs__s3_config_release. */
int shs__s3_config_load(shs__s3_config *out);
void shs__s3_config_release(shs__s3_config *c);

/* The value of `key` in section `section` of an INI text (the AWS files:
   "[section]" lines, "key = value" lines, '#' and ';' comments, keys and
   section names compared exactly after trimming).  Newly allocated in
   *out, or *out NULL when absent.  SHS_ECONFIG for a malformed line
   (named by `what` and its number). */
int shs__ini_get(char **out, const char *text, size_t len, const char *section, const char *key,
                 const char *what);

/* ---- pure pieces, exposed for the unit tests ---- */

/* Append `s` (len bytes) percent-encoded as SigV4 wants: A-Z a-z 0-9 - . _ ~
   stay, every other byte is %XX (upper-case hex); '/' stays when
   keep_slash (object keys in the path), else it is %2F. */
int shs__s3_uri_encode(shs__buf *b, const char *s, size_t len, int keep_slash);

/* A canonical query string from n name/value pairs (names[i], values[i];
   a NULL value is the empty value): pairs sorted by encoded name, then
   value; every pair written "name=value" (so "uploads" is "uploads=").
   Empty string for n == 0. */
int shs__s3_canonical_query(shs__buf *out, const char *const *names, const char *const *values,
                            size_t n);

/* Backoff before attempt `attempt` (2 for the first retry): "full jitter",
   a uniform draw from [0, min(cap, base * 2^(attempt-2))], where `rnd` is
   a uniform 64-bit random number (the caller's draw, so tests are exact). */
uint64_t shs__s3_backoff_ms(const shs__s3_retry *r, unsigned attempt, uint64_t rnd);

/* Whether an outcome is worth another attempt: curl_code is a CURLcode
   (0 when an HTTP answer came), http the status (0 without one), code
   the S3 error Code ("" without one). */
int shs__s3_retryable(int curl_code, long http, const char *code);

/* One page of ListObjectsV2. */
typedef struct shs__s3_list_page {
    char **keys;     /* Contents/Key, in the order given */
    uint64_t *sizes; /* Contents/Size */
    size_t nkeys;
    char **prefixes; /* CommonPrefixes/Prefix */
    size_t nprefixes;
    int truncated;    /* IsTruncated */
    char *next_token; /* NextContinuationToken when truncated */
} shs__s3_list_page;
void shs__s3_list_page_release(shs__s3_list_page *p);

/* Parse a ListBucketResult (ListObjectsV2) document.  The parser is ours
   and strict, for a hostile server: no DTD, no entities but the five
   predefined and character references, well-formed nesting, names
   matched exactly, depth and size bounded, valid UTF-8, every number
   checked; a key holding a NUL or a control character is refused.
   SHS_ECORRUPT with a message naming `what` and the problem. */
int shs__s3_parse_list(shs__s3_list_page *out, const char *xml, size_t len, const char *what);

/* One page of ListMultipartUploads: keys[i] with ids[i]. */
typedef struct shs__s3_uploads_page {
    char **keys, **ids;
    size_t n;
    int truncated;
    char *next_key, *next_id; /* markers of the next page */
} shs__s3_uploads_page;
int shs__s3_parse_uploads(shs__s3_uploads_page *out, const char *xml, size_t len, const char *what);
void shs__s3_uploads_page_release(shs__s3_uploads_page *p);

/* The text of the element reached by `path` ("Error/Code",
   "InitiateMultipartUploadResult/UploadId") of a document: newly
   allocated in *out, NULL when absent.  SHS_ECORRUPT when the document
   is not well-formed. */
int shs__s3_xml_text(char **out, const char *xml, size_t len, const char *path, const char *what);

/* ---- the client ---- */

typedef struct shs__s3 shs__s3;

/* A client for `cfg` (copied).  curl's global state is set up once per
   process, on the first client. */
int shs__s3_open(shs__s3 **out, const shs__s3_config *cfg);
void shs__s3_close(shs__s3 *s3);
const shs__s3_config *shs__s3_cfg(const shs__s3 *s3);

/* The server's clock, in seconds since the epoch: the Date of its most
   recent answer moved on by the local monotonic clock since, or the
   local clock before any answer.  Leases (store.h) compare expiry times
   on this clock, so that hosts whose clocks differ agree. */
int64_t shs__s3_server_time(shs__s3 *s3);

/* Counters of the requests sent (attempts included), for tests and
   benchmarks. */
uint64_t shs__s3_requests(const shs__s3 *s3);

/* HEAD: the object's size.  SHS_ENOENT when absent. */
int shs__s3_head(shs__s3 *s3, const char *bucket, const char *key, uint64_t *size);

/* PUT the whole object from memory.  create_only: If-None-Match: *, and
   SHS_EEXIST when the key exists with other bytes (an object found there
   is read back: one with exactly these bytes is our own earlier attempt
   whose answer was lost -- a retry, or curl resending on a reused
   connection that died -- and that is success).  Bodies larger than a part go up as a multipart upload
   (not with create_only: SHS_EINVAL past 5 GiB then). */
int shs__s3_put(shs__s3 *s3, const char *bucket, const char *key, const void *data, size_t len,
                int create_only);

/* A ranged read. */
typedef struct shs__s3_range {
    const char *key;
    uint64_t off;
    void *buf;
    size_t len;
    int status; /* out: SHS_OK or the failure of this range */
} shs__s3_range;

/* Read the n ranges, up to `parallel` at a time (curl_multi), each retried
   on its own.  Each must lie inside its object: a shorter object is
   SHS_ERANGE.  Returns the first failure (in order), with its message;
   every range's own status is in r[i].status. */
int shs__s3_get_ranges(shs__s3 *s3, const char *bucket, shs__s3_range *r, size_t n);

/* GET a whole object of at most `max` bytes into a NUL-terminated buffer
   the caller frees.  SHS_ENOENT when absent, SHS_ECORRUPT when larger. */
int shs__s3_get_all(shs__s3 *s3, const char *bucket, const char *key, size_t max, char **out,
                    size_t *out_len);

/* DELETE; an absent key is not an error (S3 answers 204 either way). */
int shs__s3_delete(shs__s3 *s3, const char *bucket, const char *key);

/* ListObjectsV2 over every page: the keys under `prefix` (whole keys,
   sizes) and, with a delimiter ('/' or 0 for none), the common prefixes. */
int shs__s3_list(shs__s3 *s3, const char *bucket, const char *prefix, char delimiter,
                 shs__s3_list_page *out);

/* Create a bucket (tests, benchmarks, users trying the test server);
   one that exists and is ours is not an error. */
int shs__s3_create_bucket(shs__s3 *s3, const char *bucket);

/* Multipart uploads still open under `prefix` (ListMultipartUploads,
   every page): their keys and upload ids, for cleanup to abort. */
int shs__s3_list_uploads(shs__s3 *s3, const char *bucket, const char *prefix,
                         shs__s3_uploads_page *out);
int shs__s3_abort_upload(shs__s3 *s3, const char *bucket, const char *key, const char *upload_id);

/* ---- streaming upload ---- */

/* A large object written front to back: bytes are copied into part
   buffers (at most cfg.parallel + 1 of cfg.part_size bytes: that is all
   the memory it holds), each full part is uploaded in the background (one
   thread per upload driving curl_multi) while the caller goes on writing,
   and a failed part is retried alone.  An object that ends within its
   first part is sent as one PUT at commit: no multipart upload is ever
   created for it.  size_hint (0: unknown) raises the part size when
   10,000 parts of cfg.part_size would not hold it. */
typedef struct shs__s3_upload shs__s3_upload;
int shs__s3_upload_begin(shs__s3_upload **out, shs__s3 *s3, const char *bucket, const char *key,
                         uint64_t size_hint);
/* Append len bytes.  Blocks while every buffer is in flight.  A part that
   failed for good fails the next write (or the commit). */
int shs__s3_upload_write(shs__s3_upload *u, const void *data, size_t len);
/* Wait for the parts, complete the upload; frees u whatever the outcome
   (a failed commit aborts the multipart upload). */
int shs__s3_upload_commit(shs__s3_upload *u);
/* Stop, abort the multipart upload on the server, free u.  NULL is a no-op. */
void shs__s3_upload_abort(shs__s3_upload *u);

#endif
