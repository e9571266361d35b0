/*
 * fuzz_config.c -- libFuzzer target for the YAML configuration reader:
 * the input is written to a file and read with shs_config_load_yaml; a
 * failure must leave the config as it was.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shardsafe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[128];
    snprintf(path, sizeof path, "/tmp/shs-fuzz-config-%d.yaml", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    if (size)
        fwrite(data, 1, size, f);
    fclose(f);
    shs_config cfg, before;
    shs_config_init(&cfg);
    before = cfg;
    if (shs_config_load_yaml(&cfg, path) != SHS_OK) {
        if (memcmp(&cfg, &before, sizeof cfg) != 0 || shs_last_error()[0] == '\0')
            abort();
    }
    shs_config_release(&cfg);
    unlink(path);
    return 0;
}
