/*
 * s3_int.h -- what s3.c shares with s3_upload.c: one request and the
 * curl_multi driver that runs requests, retrying each on its own.
 */
#ifndef SHS_S3_INT_H
#define SHS_S3_INT_H

#include "store/s3.h"

#include <curl/curl.h>

/* One S3 request, attempted until it succeeds or its retries run out. */
typedef struct s3_req {
    /* what to send (set by the caller, then s3_req_prepare) */
    const char *method; /* GET PUT POST DELETE HEAD */
    const char *bucket;
    const char *key;   /* NULL: the bucket itself */
    const char *query; /* canonical query string, "" for none */
    const char *body;  /* request body (PUT, POST), not owned */
    size_t body_len;
    int create_only; /* If-None-Match: * */
    int ranged;      /* GET bytes [off, off + len) into dst */
    uint64_t off;
    char *dst;
    size_t len;
    size_t resp_max;   /* cap of resp (XML answers, error bodies) */
    const char *op;    /* for messages: "PUT", "upload part 3 of", ... */
    void *user;        /* the caller's */
    const int *cancel; /* nonzero (read atomically): stop the transfer */
    /* while running */
    shs__s3 *s3;
    char *url;
    struct curl_slist *hdrs;
    CURL *h;
    size_t body_pos;
    size_t got;
    int overflow; /* more bytes than asked came */
    unsigned attempt;
    uint64_t first_ms, next_ms;
    char errbuf[CURL_ERROR_SIZE];
    /* outcome of the last attempt */
    int cc; /* CURLcode */
    long http;
    uint64_t content_length;
    int have_length;
    char etag[130];
    char code[64]; /* S3 error Code */
    shs__buf resp;
    int status; /* final: SHS_OK or a failure, with `msg` */
    char msg[1024];
} s3_req;

/* Build the URL and headers of r (its fields above set).  The payload
   hash covers r->body. */
int s3_req_prepare(shs__s3 *s3, s3_req *r);
void s3_req_release(s3_req *r);

/* A source of requests for the driver. */
typedef struct s3_feed {
    /* a request to start now, or NULL */
    s3_req *(*next)(void *ctx);
    /* r is finished (r->status says how) */
    void (*done)(void *ctx, s3_req *r);
    /* nothing in flight and nothing to retry: wait for work; nonzero when
       there will be none (the driver returns) */
    int (*idle)(void *ctx);
    void *ctx;
} s3_feed;

/* Run what the feed gives, at most `parallel` at once, on multi handle m
   (created by the caller, so that another thread may curl_multi_wakeup
   it). */
void s3_drive(shs__s3 *s3, CURLM *m, s3_feed *f, unsigned parallel);

/* Run n requests to the end; SHS_OK or the first failure in order (its
   message raised on this thread). */
int s3_run(shs__s3 *s3, s3_req **reqs, size_t n, unsigned parallel);
/* One request. */
int s3_run1(shs__s3 *s3, s3_req *r);

/* "s3://bucket/key" into buf, for messages. */
const char *s3_name(char *buf, size_t cap, const char *bucket, const char *key);

/* Multipart pieces. */
int s3_mpu_create(shs__s3 *s3, const char *bucket, const char *key, char **upload_id);
/* Complete with the parts' ETags (etags[i] for part i + 1); total is the
   object's size, checked by HEAD when a retried completion finds the
   upload gone (its first attempt succeeded unheard). */
int s3_mpu_complete(shs__s3 *s3, const char *bucket, const char *key, const char *upload_id,
                    char *const *etags, size_t nparts, uint64_t total);
/* The query of part `part` ("partNumber=N&uploadId=ID") into buf. */
int s3_part_query(shs__buf *b, unsigned part, const char *upload_id);

#endif
