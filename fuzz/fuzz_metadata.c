/*
 * fuzz_metadata.c -- libFuzzer target for the checkpoint metadata readers:
 * the input becomes metadata.json of a step directory that also holds a
 * small valid common.json and data file, then goes through the read-only
 * view (shs_checkpoint_open and every accessor), verify and
 * shs_checkpoint_read_progress.  The first byte picks whether the input is
 * metadata.json or common.json.  Every input that opens must keep what a
 * valid view promises (docs/checkpoint.md): chunks inside their tensor,
 * keyed by its name, each with a checksum, the distinct boxes disjoint and
 * tiling the tensor; blobs keyed by their name, ranks below world_size.
 * A MindSpore Checkpoint 2.0 metadata.json (corpus "mindspore_*") keeps
 * the same promises except the checksums.
 * The step directory is named iteration_00000001, so "step" must be 1.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shardsafe.h"

static char g_root[256], g_dir[300];

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
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_root);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz_metadata: could not remove %s\n", g_dir);
}

static void setup(void)
{
    if (g_dir[0])
        return;
    snprintf(g_root, sizeof g_root, "/tmp/shs-fuzz-metadata-%d", (int)getpid());
    snprintf(g_dir, sizeof g_dir, "%s/iteration_00000001", g_root);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", g_dir);
    if (system(cmd) != 0)
        abort();
    atexit(cleanup);
    /* a real data file: "w" F32 [2,2] at bytes [72, 88) */
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

static int boxes_meet(const shs_chunk_info *a, const shs_chunk_info *b, size_t nd, int *same)
{
    int meet = 1;
    *same = 1;
    for (size_t d = 0; d < nd; d++) {
        *same &= a->offset[d] == b->offset[d] && a->shape[d] == b->shape[d];
        meet &= a->offset[d] < b->offset[d] + b->shape[d] &&
                b->offset[d] < a->offset[d] + a->shape[d];
    }
    return meet;
}

/* The promises of an opened view, checked the slow obvious way. */
static void check_view(const shs_checkpoint *c)
{
    for (size_t i = 0; i < shs_checkpoint_file_count(c); i++)
        if (shs_checkpoint_file_rank(c, i) < 0 ||
            shs_checkpoint_file_rank(c, i) >= shs_checkpoint_world_size(c))
            abort();
    if (shs_checkpoint_step(c) != 1)
        abort();
    for (size_t i = 0; i < shs_checkpoint_tensor_count(c); i++) {
        const shs_checkpoint_tensor_info *t = shs_checkpoint_tensor(c, i);
        uint64_t total = 1, sum = 0;
        for (size_t d = 0; d < t->ndim; d++)
            total *= t->shape[d];
        for (size_t k = 0; k < t->n_chunks; k++) {
            shs_chunk_info ci = SHS_CHUNK_INFO_INIT, cj = SHS_CHUNK_INFO_INIT;
            if (shs_checkpoint_chunk(&ci, c, i, k) != SHS_OK)
                abort();
            /* MindSpore's metadata.json (src/source/meta_ms.c) has no checksums */
            if (ci.file >= shs_checkpoint_file_count(c) ||
                (!ci.has_xxh3 && shs_checkpoint_format(c) == SHS_FORMAT_SHARDSAFE) ||
                strcmp(ci.key, t->name) != 0)
                abort();
            uint64_t vol = 1;
            for (size_t d = 0; d < t->ndim; d++) {
                if (ci.offset[d] + ci.shape[d] > t->shape[d])
                    abort();
                vol *= ci.shape[d];
            }
            int replica = 0;
            for (size_t j = 0; j < k && j < 512 && !replica; j++) {
                int same;
                if (shs_checkpoint_chunk(&cj, c, i, j) != SHS_OK)
                    abort();
                if (boxes_meet(&ci, &cj, t->ndim, &same) && vol && !same)
                    abort(); /* distinct boxes overlap */
                replica = same;
            }
            if (!replica)
                sum += vol;
        }
        if (t->n_chunks <= 512 && sum != total)
            abort(); /* a gap */
    }
    for (size_t i = 0; i < shs_checkpoint_blob_count(c); i++) {
        shs_blob_info b = SHS_BLOB_INFO_INIT;
        if (shs_checkpoint_blob(&b, c, i) != SHS_OK || strcmp(b.name, b.key) != 0 || b.rank < 0 ||
            b.rank >= shs_checkpoint_world_size(c))
            abort();
    }
}

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
    if (shs_checkpoint_open(&c, g_dir, NULL) == SHS_OK) {
        for (size_t i = 0; i < shs_checkpoint_file_count(c); i++)
            (void)shs_checkpoint_file_name(c, i);
        for (size_t i = 0; i < shs_checkpoint_tensor_count(c); i++) {
            const shs_checkpoint_tensor_info *t = shs_checkpoint_tensor(c, i);
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
        check_view(c);
        shs_checkpoint_free(c);
        (void)shs_checkpoint_verify(g_dir);
    } else if (shs_last_error()[0] == '\0') {
        abort(); /* a failure always says why */
    }
    shs_progress p = SHS_PROGRESS_INIT;
    (void)shs_checkpoint_read_progress(&p, g_dir);
    return 0;
}
