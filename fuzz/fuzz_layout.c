/*
 * fuzz_layout.c -- libFuzzer target for the reshard layout document
 * (docs/reshard.md): the input (after its first byte) becomes the layout
 * file of shs_reshard on a small valid checkpoint saved once at startup
 * with the manager (model tensors w F32 [4,6], h BF16 [2,4], r F32 [3],
 * s F32 [], e U8 [0,3] and the optimizer tensor opt.w F32 [4,6], a blob
 * "rng").  The
 * first byte picks the target world size (1 + byte % 4): a document of
 * another world_size goes through the scaling path, one without
 * world_size or of that world size is resolved as written.
 *
 * A failure is SHS_EINVAL with a message and leaves nothing in the
 * output's folder.  A success is an ordinary step directory of that world
 * size: it opens with shs_checkpoint_open, verifies, holds every tensor
 * of the source with the same dtype and shape, its chunks inside their
 * tensor, and every tensor reads back (shs_checkpoint_read) equal to the
 * source's bytes.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shardsafe.h"

#define NT 6
static const char *const k_names[NT] = { "w", "h", "r", "s", "e", "opt.w" };
static const shs_dtype k_dt[NT] = { SHS_F32, SHS_BF16, SHS_F32, SHS_F32, SHS_U8, SHS_F32 };
static const size_t k_nd[NT] = { 2, 2, 1, 0, 2, 2 };
static const uint64_t k_shape[NT][2] = {
    { 4, 6 }, { 2, 4 }, { 3, 0 }, { 0, 0 }, { 0, 3 }, { 4, 6 }
};

static char g_root[256], g_src[320], g_out[320], g_dst[400], g_layout[320];
static unsigned char g_ref[NT][96]; /* the source's bytes of each tensor */
static size_t g_ref_len[NT];

static void cleanup(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_root);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz_layout: could not remove %s\n", g_root);
}

static size_t tensor_nbytes(int t)
{
    size_t n = shs_dtype_bits(k_dt[t]) / 8;
    for (size_t d = 0; d < k_nd[t]; d++)
        n *= k_shape[t][d];
    return n;
}

static void setup(void)
{
    if (g_root[0])
        return;
    snprintf(g_root, sizeof g_root, "/tmp/shs-fuzz-layout-%d", (int)getpid());
    snprintf(g_src, sizeof g_src, "%s/src/iteration_00000001", g_root);
    snprintf(g_out, sizeof g_out, "%s/out", g_root);
    snprintf(g_dst, sizeof g_dst, "%s/iteration_00000001", g_out);
    snprintf(g_layout, sizeof g_layout, "%s/layout.json", g_root);
    char save[300];
    snprintf(save, sizeof save, "%s/src", g_root);
    if (mkdir(g_root, 0755) != 0 || mkdir(g_out, 0755) != 0)
        abort();
    atexit(cleanup);

    /* the source: one process saving the five tensors at step 1 */
    static float w[24], ow[24], r[3], s[1];
    static uint8_t e[1];
    static uint16_t h[8];
    for (int i = 0; i < 24; i++) {
        w[i] = 1.0f + (float)i * 0.5f;
        ow[i] = -2.0f - (float)i * 0.125f;
    }
    for (int i = 0; i < 8; i++)
        h[i] = (uint16_t)(0x3f80 + i * 17);
    for (int i = 0; i < 3; i++)
        r[i] = 100.0f + (float)i;
    s[0] = 42.0f;
    void *data[NT] = { w, h, r, s, e, ow };
    shs_state *st = NULL;
    if (shs_state_create(&st) != SHS_OK)
        abort();
    for (int t = 0; t < NT; t++) {
        shs_tensor_spec sp = SHS_TENSOR_SPEC_INIT;
        sp.name = k_names[t];
        sp.kind = t == NT - 1 ? SHS_KIND_OPTIMIZER : SHS_KIND_MODEL;
        sp.dtype = k_dt[t];
        sp.ndim = k_nd[t];
        sp.shape = k_shape[t];
        sp.data = data[t];
        if (shs_state_add_tensor(st, &sp) != SHS_OK)
            abort();
        g_ref_len[t] = tensor_nbytes(t);
        memcpy(g_ref[t], data[t], g_ref_len[t]);
    }
    if (shs_state_set_blob(st, "rng", "rng-of-rank-0", 13) != SHS_OK)
        abort();
    shs_config c;
    shs_config_init(&c);
    c.save_path = save;
    c.save_max = 0;
    c.fsync = 0;
    c.save_interleaved_steps = 1000000;
    shs_progress p = SHS_PROGRESS_INIT;
    p.epoch_num = 1;
    p.step_num = p.global_step = 1;
    p.loss_scale = 1024.0;
    p.global_batch_size = 32;
    p.consumed_samples = 32;
    shs_manager *m = NULL;
    if (shs_manager_create(&m, &c, st) != SHS_OK || shs_manager_save(m, &p, 0) != SHS_OK ||
        shs_manager_wait(m) != SHS_OK) {
        fprintf(stderr, "fuzz_layout: cannot save the source: %s\n", shs_last_error());
        abort();
    }
    shs_manager_free(m);
    shs_state_free(st);
}

/* The number of entries in the output's folder (each named on stderr). */
static int out_entries(void)
{
    DIR *d = opendir(g_out);
    struct dirent *e;
    int n = 0;
    if (!d)
        abort();
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        n++;
        fprintf(stderr, "fuzz_layout: left behind: %s\n", e->d_name);
    }
    closedir(d);
    return n;
}

/* The step directory dst: flat, files only. */
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

static void check_output(int world, const shs_reshard_result *res)
{
    shs_checkpoint *c = NULL;
    if (res->world_size != world || res->n_tensors != NT || res->step != 1)
        abort();
    if (shs_checkpoint_open(&c, g_dst, NULL) != SHS_OK) {
        fprintf(stderr, "fuzz_layout: output does not open: %s\n", shs_last_error());
        abort();
    }
    if (shs_checkpoint_world_size(c) != world || shs_checkpoint_tensor_count(c) != NT ||
        shs_checkpoint_step(c) != 1)
        abort();
    for (int t = 0; t < NT; t++) {
        size_t i;
        if (shs_checkpoint_find(&i, c, k_names[t]) != SHS_OK)
            abort();
        const shs_checkpoint_tensor_info *ti = shs_checkpoint_tensor(c, i);
        if (ti->dtype != k_dt[t] || ti->ndim != k_nd[t] || ti->n_chunks == 0)
            abort();
        for (size_t d = 0; d < k_nd[t]; d++)
            if (ti->shape[d] != k_shape[t][d])
                abort();
        for (size_t k = 0; k < ti->n_chunks; k++) {
            shs_chunk_info ci = SHS_CHUNK_INFO_INIT;
            if (shs_checkpoint_chunk(&ci, c, i, k) != SHS_OK ||
                ci.file >= shs_checkpoint_file_count(c) ||
                shs_checkpoint_file_rank(c, ci.file) >= world)
                abort();
            for (size_t d = 0; d < k_nd[t]; d++)
                if (ci.offset[d] + ci.shape[d] > k_shape[t][d])
                    abort();
        }
        uint64_t zero[2] = { 0, 0 };
        unsigned char buf[96];
        memset(buf, 0xa5, sizeof buf);
        if (shs_checkpoint_read(c, i, zero, k_shape[t], k_dt[t], buf, g_ref_len[t]) != SHS_OK) {
            fprintf(stderr, "fuzz_layout: '%s' does not read back: %s\n", k_names[t],
                    shs_last_error());
            abort();
        }
        if (memcmp(buf, g_ref[t], g_ref_len[t]) != 0) {
            fprintf(stderr, "fuzz_layout: '%s' reads back different bytes\n", k_names[t]);
            abort();
        }
    }
    shs_checkpoint_free(c);
    if (shs_checkpoint_verify(g_dst, NULL, 0) != SHS_OK) {
        fprintf(stderr, "fuzz_layout: output does not verify: %s\n", shs_last_error());
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size == 0)
        return 0;
    int world = 1 + data[0] % 4;
    FILE *f = fopen(g_layout, "wb");
    if (!f)
        abort();
    if (size > 1)
        fwrite(data + 1, 1, size - 1, f);
    fclose(f);

    shs_reshard_opts o = SHS_RESHARD_OPTS_INIT;
    shs_reshard_result res = SHS_RESHARD_RESULT_INIT;
    o.world_size = world;
    o.fsync = 0;
    int rc = shs_reshard(&res, g_src, g_dst, g_layout, &o);
    if (getenv("SHS_FUZZ_VERBOSE"))
        fprintf(stderr, "fuzz_layout: world %d: %d %s\n", world, rc, rc ? shs_last_error() : "");
    if (rc == SHS_OK) {
        check_output(world, &res);
        remove_dst();
    } else {
        if (shs_last_error()[0] == '\0')
            abort(); /* a failure always says why */
        if (rc != SHS_EINVAL) {
            fprintf(stderr, "fuzz_layout: status %d: %s\n", rc, shs_last_error());
            abort(); /* a bad layout is SHS_EINVAL (docs/reshard.md) */
        }
    }
    if (out_entries() != 0)
        abort(); /* nothing is left behind */
    return 0;
}
