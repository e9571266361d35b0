/*
 * demo_write.c -- writes a small transformer-shaped model to a safetensors
 * file with the streaming writer: demo_write OUT.safetensors
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardsafe.h"

#define DIM 64
#define VOCAB 1000
#define LAYERS 2

static int add(shs_writer *w, const char *name, size_t rows, size_t cols)
{
    uint64_t shape[2] = { rows, cols };
    return shs_writer_add_tensor(w, name, SHS_F32, cols ? 2 : 1, shape);
}

static const char k_usage[] =
    "usage: demo_write OUT.safetensors\n"
    "\n"
    "Write a small transformer-shaped model (F32 embeddings, attention and MLP\n"
    "weights of %d layers) to OUT.safetensors with the streaming writer.\n"
    "\n"
    "  -h, --help   show this help\n";

int main(int argc, char **argv)
{
    /* "--help" is an option, not a file to create */
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf(k_usage, LAYERS);
        return 0;
    }
    if (argc != 2 || (argv[1][0] == '-' && argv[1][1] != '\0')) {
        fprintf(stderr, k_usage, LAYERS);
        return 2;
    }
    static const char *const per_layer[][3] = {
        { "attn.q_proj.weight", "64", "64" },    { "attn.k_proj.weight", "64", "64" },
        { "attn.v_proj.weight", "64", "64" },    { "attn.o_proj.weight", "64", "64" },
        { "mlp.up_proj.weight", "256", "64" },   { "mlp.down_proj.weight", "64", "256" },
        { "input_layernorm.weight", "64", "0" },
    };
    shs_writer *w = NULL;
    int rc = shs_writer_create(&w, argv[1], NULL);
    char name[128];
    if (rc == 0)
        rc = shs_writer_add_metadata(w, "format", "pt");
    if (rc == 0)
        rc = shs_writer_add_metadata(w, "producer", "shardsafe demo");
    if (rc == 0)
        rc = add(w, "model.embed_tokens.weight", VOCAB, DIM);
    for (int l = 0; l < LAYERS && rc == 0; l++)
        for (size_t k = 0; k < sizeof per_layer / sizeof per_layer[0] && rc == 0; k++) {
            snprintf(name, sizeof name, "model.layers.%d.%s", l, per_layer[k][0]);
            rc = add(w, name, strtoul(per_layer[k][1], NULL, 10),
                     strtoul(per_layer[k][2], NULL, 10));
        }
    uint64_t one[1] = { 1 };
    if (rc == 0)
        rc = shs_writer_add_tensor(w, "train.global_step", SHS_I64, 1, one);
    if (rc == 0)
        rc = shs_writer_seal(w);
    /* stream every tensor in file order, generated on the fly */
    for (size_t i = 0; rc == 0 && i < shs_writer_tensor_count(w); i++) {
        const char *n = shs_writer_tensor_name(w, i);
        if (strcmp(n, "train.global_step") == 0) {
            int64_t step = 1000;
            rc = shs_writer_write(w, n, &step, sizeof step);
            continue;
        }
        size_t count = strstr(n, "embed")       ? VOCAB * DIM
                       : strstr(n, "mlp")       ? 256 * DIM
                       : strstr(n, "layernorm") ? DIM
                                                : DIM * DIM;
        float row[DIM];
        for (size_t at = 0; rc == 0 && at < count; at += DIM) {
            for (size_t j = 0; j < DIM; j++)
                row[j] = (float)sin((double)(at + j) * 0.01 + (double)i) * 0.02f;
            rc = shs_writer_write_part(w, n, at * sizeof(float), row, sizeof row);
        }
    }
    if (rc == 0)
        rc = shs_writer_commit(w);
    shs_writer_free(w);
    if (rc != 0) {
        fprintf(stderr, "demo_write: %s\n", shs_last_error());
        return 1;
    }
    printf("wrote %s\n", argv[1]);
    return 0;
}
