/*
 * fuzz_metadata.c -- libFuzzer target for the checkpoint metadata readers:
 * the input becomes metadata.json of a step directory that also holds a
 * small valid common.json and data file, then goes through the read-only
 * view (shs_checkpoint_open and every accessor), verify and
 * shs_checkpoint_read_progress.  The first byte picks whether the input is
 * metadata.json or common.json.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shardsafe.h"

static char g_dir[256];

static void put(const char *name, const void *data, size_t len)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "wb");
    if (!f)
        abort();
    if (len)
        fwrite(data, 1, len, f);
    fclose(f);
}

static void cleanup(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz_metadata: could not remove %s\n", g_dir);
}

static void setup(void)
{
    if (g_dir[0])
        return;
    snprintf(g_dir, sizeof g_dir, "/tmp/shs-fuzz-metadata-%d", (int)getpid());
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", g_dir);
    if (system(cmd) != 0)
        abort();
    atexit(cleanup);
    /* a real data file: "w" F32 [2,2] at bytes [80, 96) */
    float w[4] = { 1, 2, 3, 4 };
    uint64_t shape[2] = { 2, 2 };
    shs_tensor_view v = { "w", SHS_F32, 2, shape, w };
    char p[512];
    snprintf(p, sizeof p, "%s/checkpoint-model-0000000-0000001.safetensors", g_dir);
    if (shs_save_file(p, &v, 1, NULL, 0, NULL) != SHS_OK)
        abort();
}

static const char k_common[] =
    "{\"epoch_num\":0,\"step_num\":1,\"global_step\":1,\"loss_scale\":1.0,"
    "\"global_batch_size\":2,\"consumed_samples\":2,\"ckpt_status\":null}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size == 0)
        return 0;
    int common = data[0] & 1;
    if (common) {
        put("common.json", data + 1, size - 1);
        put("metadata.json", "{}", 2);
    } else {
        put("common.json", k_common, sizeof k_common - 1);
        put("metadata.json", data + 1, size - 1);
    }
    shs_checkpoint *c = NULL;
    if (shs_checkpoint_open(&c, g_dir) == SHS_OK) {
        for (size_t i = 0; i < shs_checkpoint_file_count(c); i++)
            (void)shs_checkpoint_file_name(c, i);
        for (size_t i = 0; i < shs_checkpoint_tensor_count(c); i++) {
            const shs_ckpt_tensor_info *t = shs_checkpoint_tensor(c, i);
            for (size_t k = 0; k < t->n_chunks; k++) {
                shs_chunk_info ci = SHS_CHUNK_INFO_INIT;
                if (shs_checkpoint_chunk(&ci, c, i, k) != SHS_OK)
                    abort();
                if (ci.file >= shs_checkpoint_file_count(c))
                    abort();
            }
            size_t idx;
            if (shs_checkpoint_find(&idx, c, t->name) != SHS_OK || idx != i)
                abort();
        }
        for (size_t i = 0; i < shs_checkpoint_blob_count(c); i++) {
            shs_blob_info b = SHS_BLOB_INFO_INIT;
            if (shs_checkpoint_blob(&b, c, i) != SHS_OK)
                abort();
        }
        shs_checkpoint_close(c);
        (void)shs_checkpoint_verify(g_dir);
    } else if (shs_last_error()[0] == '\0') {
        abort(); /* a failure always says why */
    }
    shs_progress p;
    (void)shs_checkpoint_read_progress(&p, g_dir);
    return 0;
}
