/*
 * fuzz_strategy.c -- libFuzzer target for MindSpore strategy files (the
 * protobuf ParallelStrategyMap, docs/reshard.md): the input is written to
 * a file and read by shs_strategy_layout; when that succeeds and the
 * layout is for at most 8 ranks, it is also the target of shs_reshard
 * (strategy_file) of a small checkpoint saved once at startup (F32 "w"
 * [8, 4], "b" [4], optimizer "adam_m.w" [8, 4]; the seed corpus names
 * them).
 *
 * Failures: SHS_EINVAL or SHS_EUNSUPPORTED (a reshard may also refuse a
 * layout that does not divide the tensors: SHS_EINVAL), always with a
 * message, never a crash or a leak, and nothing left in the output's
 * folder.  Successes: the layout text is a JSON object naming a
 * world_size; a resharded output opens, verifies, and every tensor reads
 * back equal to the source.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shardsafe.h"

#define NT 3
static const char *const k_names[NT] = { "w", "b", "adam_m.w" };
static const size_t k_nd[NT] = { 2, 1, 2 };
static const uint64_t k_shape[NT][2] = { { 8, 4 }, { 4, 0 }, { 8, 4 } };
static float g_data[NT][32];

static char g_root[256], g_src[320], g_out[320], g_dst[400], g_file[320];

static void cleanup(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_root);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz_strategy: could not remove %s\n", g_root);
}

static void setup(void)
{
    if (g_root[0])
        return;
    snprintf(g_root, sizeof g_root, "/tmp/shs-fuzz-strategy-%d", (int)getpid());
    snprintf(g_src, sizeof g_src, "%s/src", g_root);
    snprintf(g_out, sizeof g_out, "%s/out", g_root);
    snprintf(g_dst, sizeof g_dst, "%s/iteration_00000001", g_out);
    snprintf(g_file, sizeof g_file, "%s/strategy.ckpt", g_root);
    if (mkdir(g_root, 0755) != 0 || mkdir(g_out, 0755) != 0)
        abort();
    atexit(cleanup);
    shs_state *st = NULL;
    if (shs_state_create(&st) != SHS_OK)
        abort();
    for (int t = 0; t < NT; t++) {
        for (int i = 0; i < 32; i++)
            g_data[t][i] = (float)(t * 100 + i);
        shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
        s.name = k_names[t];
        s.kind = t == 2 ? SHS_KIND_OPTIMIZER : SHS_KIND_MODEL;
        s.ndim = k_nd[t];
        s.shape = k_shape[t];
        s.data = g_data[t];
        if (shs_state_add_tensor(st, &s) != SHS_OK)
            abort();
    }
    shs_config c;
    shs_config_init(&c);
    c.save_path = g_src;
    c.fsync = 0;
    shs_manager *m = NULL;
    shs_progress p = SHS_PROGRESS_INIT;
    p.global_step = p.step_num = 1;
    if (shs_manager_create(&m, &c, st) != SHS_OK || shs_manager_save(m, &p, 0) != SHS_OK ||
        shs_manager_wait(m) != SHS_OK) {
        fprintf(stderr, "fuzz_strategy: cannot save the source: %s\n", shs_last_error());
        abort();
    }
    shs_manager_free(m);
    shs_state_free(st);
}

static int out_entries(void)
{
    DIR *d = opendir(g_out);
    struct dirent *e;
    int n = 0;
    if (!d)
        abort();
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static void remove_dst(void)
{
    DIR *d = opendir(g_dst);
    struct dirent *e;
    char p[700];
    if (!d)
        abort();
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", g_dst, e->d_name);
        if (unlink(p) != 0)
            abort();
    }
    closedir(d);
    if (rmdir(g_dst) != 0)
        abort();
}

static void check_output(void)
{
    shs_checkpoint *c = NULL;
    if (shs_checkpoint_open(&c, g_dst, NULL) != SHS_OK || shs_checkpoint_verify(g_dst, NULL, 0) != SHS_OK) {
        fprintf(stderr, "fuzz_strategy: output does not open or verify: %s\n", shs_last_error());
        abort();
    }
    for (int t = 0; t < NT; t++) {
        size_t i;
        float buf[32];
        static const uint64_t zero[2] = { 0, 0 };
        size_t n = 4 * (size_t)k_shape[t][0] * (k_nd[t] == 2 ? (size_t)k_shape[t][1] : 1);
        if (shs_checkpoint_find(&i, c, k_names[t]) != SHS_OK ||
            shs_checkpoint_read(c, i, zero, k_shape[t], SHS_F32, buf, n) != SHS_OK ||
            memcmp(buf, g_data[t], n) != 0) {
            fprintf(stderr, "fuzz_strategy: '%s' does not read back\n", k_names[t]);
            abort();
        }
    }
    shs_checkpoint_free(c);
}

static void expect_failure(int rc)
{
    if (shs_last_error()[0] == '\0')
        abort(); /* a failure always says why */
    if (rc != SHS_EINVAL && rc != SHS_EUNSUPPORTED) {
        fprintf(stderr, "fuzz_strategy: status %d: %s\n", rc, shs_last_error());
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    FILE *f = fopen(g_file, "wb");
    if (!f)
        abort();
    if (size)
        fwrite(data, 1, size, f);
    fclose(f);
    char *text = NULL;
    int rc = shs_strategy_layout(&text, g_file, NULL, 0);
    if (getenv("SHS_FUZZ_VERBOSE"))
        fprintf(stderr, "fuzz_strategy: layout: %d %s\n", rc, rc ? shs_last_error() : text);
    if (rc != SHS_OK) {
        if (text)
            abort();
        expect_failure(rc);
        return 0;
    }
    const char *ws = strstr(text, "\"world_size\": ");
    if (text[0] != '{' || !ws)
        abort();
    long world = strtol(ws + 14, NULL, 10);
    shs_free(text);
    if (world < 1)
        abort();
    if (world > 8)
        return 0;
    shs_reshard_opts o = SHS_RESHARD_OPTS_INIT;
    o.strategy_file = g_file;
    o.fsync = 0;
    rc = shs_reshard(NULL, g_src, g_dst, NULL, &o);
    if (getenv("SHS_FUZZ_VERBOSE"))
        fprintf(stderr, "fuzz_strategy: reshard: %d %s\n", rc, rc ? shs_last_error() : "");
    if (rc == SHS_OK) {
        check_output();
        remove_dst();
    } else {
        expect_failure(rc);
    }
    if (out_entries() != 0)
        abort(); /* nothing is left behind */
    return 0;
}
