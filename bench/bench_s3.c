/*
 * bench_s3.c -- the store seam on S3 against parallel `curl` processes,
 * in the same run, against the server of $AWS_ENDPOINT_URL:
 *
 *   scripts/s3-server.sh start && eval "$(scripts/s3-server.sh env)"
 *   build-bench/bench_s3 [MIB] [N]      (default 1024 MiB, N = 4)
 *
 *   1. upload: MIB through a streaming upload (shs__store_upload, parts
 *      of $SHS_S3_PART_SIZE, N in flight: SHS_S3_PARALLEL=N) vs the same
 *      bytes as N objects of MIB/N uploaded by N `curl -T` processes at
 *      once (UNSIGNED-PAYLOAD: curl hashes nothing).  Ours twice: with the
 *      payload hashed and signed (the default over http) and unsigned.
 *   2. ranged reads: the object read back as ranges of one part each
 *      (shs__store_read_many, N at a time) vs N `curl -r` processes
 *      reading MIB/N each to /dev/null.
 * Each figure is the best of 3.  Peak RSS of this process is printed
 * with the size of its own data buffer (the bytes uploaded, held once);
 * the rest is what the client holds: part buffers, curl.
 */
#include "store/s3.h"
#include "store/store.h"

#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define REPS 3
#define BUCKET "shs-bench"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long peak_rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_s3: %s: %s\n", what, shs_last_error());
    exit(1);
}

/* Run n curl processes at once (argv[i]); seconds until the last ends. */
static double run_curls(char ***argv, int n)
{
    pid_t *pid = calloc((size_t)n, sizeof *pid);
    double t0 = now_s();
    for (int i = 0; i < n; i++)
        if (posix_spawnp(&pid[i], "curl", NULL, NULL, argv[i], environ) != 0) {
            perror("curl");
            exit(1);
        }
    for (int i = 0; i < n; i++) {
        int st;
        waitpid(pid[i], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "bench_s3: curl %d failed (status %d)\n", i, st);
            exit(1);
        }
    }
    free(pid);
    return now_s() - t0;
}

static char **curl_argv(const char *method_arg, const char *file, const char *url,
                        const char *range)
{
    static char sig[128], user[512];
    snprintf(sig, sizeof sig, "aws:amz:%s:s3",
             getenv("AWS_REGION") ? getenv("AWS_REGION") : "us-east-1");
    snprintf(user, sizeof user, "%s:%s", getenv("AWS_ACCESS_KEY_ID"),
             getenv("AWS_SECRET_ACCESS_KEY"));
    char **a = calloc(20, sizeof *a);
    int k = 0;
    a[k++] = "curl";
    a[k++] = "-sSf";
    a[k++] = "--aws-sigv4";
    a[k++] = sig;
    a[k++] = "--user";
    a[k++] = user;
    a[k++] = "-H";
    a[k++] = "x-amz-content-sha256: UNSIGNED-PAYLOAD";
    if (strcmp(method_arg, "PUT") == 0) {
        a[k++] = "-T";
        a[k++] = strdup(file);
        a[k++] = "-o";
        a[k++] = "/dev/null";
    } else {
        a[k++] = "-r";
        a[k++] = strdup(range);
        a[k++] = "-o";
        a[k++] = "/dev/null";
    }
    a[k++] = strdup(url);
    return a;
}

static double upload_ours(shs__store *st, const char *data, size_t size)
{
    shs__store_upload *u;
    double t0 = now_s();
    if (shs__store_upload_begin(&u, st, "ours", size, 0) < 0)
        die("upload begin");
    for (size_t off = 0; off < size; off += 4u << 20) {
        size_t n = size - off < (4u << 20) ? size - off : (4u << 20);
        if (shs__store_upload_write(u, data + off, n) < 0)
            die("upload write");
    }
    if (shs__store_upload_commit(u) < 0)
        die("upload commit");
    return now_s() - t0;
}

static shs__store *open_store(shs__s3 **s3)
{
    shs__s3_config c;
    shs__store *st;
    if (shs__s3_config_load(&c) < 0 || shs__s3_open(s3, &c) < 0)
        die("S3 configuration (eval \"$(scripts/s3-server.sh env)\")");
    shs__s3_config_release(&c);
    if (shs__s3_create_bucket(*s3, BUCKET) < 0)
        die("create bucket");
    if (shs__store_open_s3(&st, "s3://" BUCKET "/bench", *s3) < 0)
        die("open store");
    return st;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 1024;
    int n = argc > 2 ? atoi(argv[2]) : 4;
    size_t size = mib << 20;
    char par[16];
    if (!mib || n < 1 || n > 64 || !getenv("AWS_ENDPOINT_URL")) {
        fprintf(stderr, "usage: eval \"$(scripts/s3-server.sh env)\"; bench_s3 [MIB] [N]\n");
        return 2;
    }
    snprintf(par, sizeof par, "%d", n);
    setenv("SHS_S3_PARALLEL", par, 1);
    if (!getenv("SHS_S3_PART_SIZE"))
        setenv("SHS_S3_PART_SIZE", "16777216", 1);
    char *data = malloc(size);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < size / 8; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(data + i * 8, &x, 8);
    }
    /* curl's inputs: N files of size/N, in the page cache */
    char dir[] = "/tmp/bench_s3.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    size_t per = size / (size_t)n;
    char ***put_argv = calloc((size_t)n, sizeof *put_argv);
    char ***get_argv = calloc((size_t)n, sizeof *get_argv);
    const char *ep = getenv("AWS_ENDPOINT_URL");
    for (int i = 0; i < n; i++) {
        char f[64], url[512], range[64];
        snprintf(f, sizeof f, "%s/part%d", dir, i);
        FILE *fp = fopen(f, "wb");
        if (!fp || fwrite(data + (size_t)i * per, 1, per, fp) != per || fclose(fp) != 0) {
            perror(f);
            return 1;
        }
        snprintf(url, sizeof url, "%s/%s/bench/curl%d", ep, BUCKET, i);
        put_argv[i] = curl_argv("PUT", f, url, NULL);
        snprintf(url, sizeof url, "%s/%s/bench/ours", ep, BUCKET);
        snprintf(range, sizeof range, "%zu-%zu", (size_t)i * per, (size_t)(i + 1) * per - 1);
        get_argv[i] = curl_argv("GET", NULL, url, range);
    }
    long rss0 = peak_rss_mib();

    shs__s3 *s3;
    shs__store *st = open_store(&s3);
    double best_curl = 1e9, best_ours = 1e9, best_unsigned = 1e9;
    uint64_t req0 = shs__s3_requests(s3);
    for (int r = 0; r < REPS; r++) {
        double t = run_curls(put_argv, n);
        best_curl = t < best_curl ? t : best_curl;
        for (int i = 0; i < n; i++) {
            char key[32];
            snprintf(key, sizeof key, "curl%d", i);
            shs__store_delete(st, key);
        }
        t = upload_ours(st, data, size);
        best_ours = t < best_ours ? t : best_ours;
    }
    uint64_t reqs = (shs__s3_requests(s3) - req0) / REPS - (uint64_t)n;
    long rss_up = peak_rss_mib();
    shs__store_close(st);
    shs__s3_close(s3);
    setenv("SHS_S3_SIGN_PAYLOAD", "0", 1);
    st = open_store(&s3);
    for (int r = 0; r < REPS; r++) {
        double t = upload_ours(st, data, size);
        best_unsigned = t < best_unsigned ? t : best_unsigned;
    }

    /* ranged reads of "ours" */
    size_t part = (size_t)strtoull(getenv("SHS_S3_PART_SIZE"), NULL, 10);
    size_t nr = (size + part - 1) / part;
    shs__store_range *rg = calloc(nr, sizeof *rg);
    char *back = malloc(size);
    double best_get_curl = 1e9, best_get_ours = 1e9;
    for (int r = 0; r < REPS; r++) {
        double t = run_curls(get_argv, n);
        best_get_curl = t < best_get_curl ? t : best_get_curl;
        for (size_t i = 0; i < nr; i++)
            rg[i] = (shs__store_range){ "ours", (uint64_t)(i * part), back + i * part,
                                        size - i * part < part ? size - i * part : part, 0 };
        double t0 = now_s();
        if (shs__store_read_many(st, rg, nr) < 0)
            die("ranged reads");
        t = now_s() - t0;
        best_get_ours = t < best_get_ours ? t : best_get_ours;
    }
    if (memcmp(back, data, size) != 0) {
        fprintf(stderr, "bench_s3: the bytes read back differ\n");
        return 1;
    }
    long rss_end = peak_rss_mib();
    shs__store_delete(st, "ours");
    shs__store_close(st);
    shs__s3_close(s3);

    double mb = (double)size / 1048576.0;
    printf("bench_s3: %zu MiB, N=%d, part %zu MiB, best of %d, endpoint %s\n", mib, n, part >> 20,
           REPS, ep);
    printf("| what | ours | %d x curl | ratio |\n|---|---|---|---|\n", n);
    printf("| upload, payload signed (default over http) | %.0f MiB/s | %.0f MiB/s | %.2f |\n",
           mb / best_ours, mb / best_curl, best_curl / best_ours);
    printf("| upload, UNSIGNED-PAYLOAD | %.0f MiB/s | %.0f MiB/s | %.2f |\n", mb / best_unsigned,
           mb / best_curl, best_curl / best_unsigned);
    printf("| ranged GET (%zu ranges) | %.0f MiB/s | %.0f MiB/s | %.2f |\n", nr, mb / best_get_ours,
           mb / best_get_curl, best_get_curl / best_get_ours);
    printf("requests per upload: %llu (create + %zu parts + complete)\n", (unsigned long long)reqs,
           nr);
    printf("peak RSS: %ld MiB before the client (data buffer %zu MiB), %ld MiB after the uploads, "
           "%ld MiB at the end (+ the read-back buffer %zu MiB)\n",
           rss0, mib, rss_up, rss_end, mib);
    for (int i = 0; i < n; i++) {
        char f[64];
        snprintf(f, sizeof f, "%s/part%d", dir, i);
        unlink(f);
    }
    rmdir(dir);
    free(data);
    free(back);
    free(rg);
    return 0;
}
