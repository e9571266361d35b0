/* Writes and reads back one tensor through the installed library. */
#include <shardsafe.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "consumer.safetensors";
    float x[2] = { 1.5f, -2.0f }, y[2];
    uint64_t shape[1] = { 2 };
    shs_tensor_view v = { "x", SHS_F32, 1, shape, x };
    shs_file *f;
    if (shs_save_file(path, &v, 1, NULL, 0, NULL) || shs_file_open(&f, path, NULL) ||
        shs_file_read(f, 0, y, sizeof y)) {
        fprintf(stderr, "consumer: %s\n", shs_last_error());
        return 1;
    }
    shs_file_free(f);
    if (memcmp(x, y, sizeof x) != 0)
        return 1;
    if (shs_version_number() != SHS_VERSION_NUMBER) {
        fprintf(stderr, "consumer: header %u, library %u\n", (unsigned)SHS_VERSION_NUMBER,
                shs_version_number());
        return 1;
    }
    printf("consumer ok (shardsafe %s)\n", shs_version());
    return 0;
}
