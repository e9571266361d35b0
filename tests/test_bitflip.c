/*
 * test_bitflip.c -- every single bit flip in what a resume reads is caught
 * by shs_checkpoint_verify: every bit of metadata.json, common.json and of
 * each safetensors header (length + JSON + padding), and payload bits
 * (every 97th bit, and every bit of the first and last byte of each
 * tensor; all of them with SHS_BITFLIP_FULL=1, for bench/).  A small
 * checkpoint with model and optimizer tensors and blobs, saved by the
 * library, format version 2.
 */
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct campaign {
    const char *dir;
    unsigned long tried, detected;
    unsigned long missed_shown;
} campaign;

static void flip_at(const char *path, uint64_t bit)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char c;
    assert_int_equal(pread(fd, &c, 1, (off_t)(bit / 8)), 1);
    c ^= (unsigned char)(1u << (bit % 8));
    assert_int_equal(pwrite(fd, &c, 1, (off_t)(bit / 8)), 1);
    close(fd);
}

/* Flip one bit of `name`, verify, flip it back. */
static void try_bit(campaign *cp, const char *name, uint64_t bit)
{
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/%s", cp->dir, name);
    assert_true(n > 0 && (size_t)n < sizeof path);
    flip_at(path, bit);
    int rc = shs_checkpoint_verify(cp->dir, NULL, 0);
    flip_at(path, bit);
    cp->tried++;
    if (rc < 0) {
        cp->detected++;
    } else if (cp->missed_shown++ < 10) {
        print_message("missed: %s byte %llu bit %u\n", name, (unsigned long long)(bit / 8),
                      (unsigned)(bit % 8));
    }
}

static void try_range(campaign *cp, const char *name, uint64_t b0, uint64_t b1, uint64_t step)
{
    for (uint64_t bit = b0 * 8; bit < b1 * 8; bit += step)
        try_bit(cp, name, bit);
}

static void test_bitflip(void **state)
{
    (void)state;
    char *sp = tu_subpath("bitflip");
    tu_small s;
    tu_small_make(&s, 3.0f, 1);
    TU_OK(shs_state_set_blob(s.st, "rng", "\x01\x02\x03\x04\x05\x06\x07\x08", 8));
    TU_OK(shs_state_set_blob(s.st, "dataloader", "{\"cursor\": 300}", 15));
    shs_progress p = tu_prog(300);
    TU_OK(tu_save_once(sp, s.st, &p, 0));
    shs_state_free(s.st);
    char dir[4096];
    TU_OK(shs_checkpoint_resolve(dir, sizeof dir, sp, -1));
    TU_OK(shs_checkpoint_verify(dir, NULL, 0));
    int full = getenv("SHS_BITFLIP_FULL") && *getenv("SHS_BITFLIP_FULL") == '1';

    campaign cp = { dir, 0, 0, 0 };
    unsigned long part[4] = { 0 };
    static const char *const json_files[] = { "metadata.json", "common.json" };
    for (size_t i = 0; i < 2; i++) {
        size_t len;
        free(tu_read_file(tu_path(dir, json_files[i]), &len));
        unsigned long before = cp.tried;
        try_range(&cp, json_files[i], 0, len, 1);
        part[i] = cp.tried - before;
    }

    shs_checkpoint *ck;
    TU_OK(shs_checkpoint_open(&ck, dir, NULL));
    size_t nf = shs_checkpoint_file_count(ck);
    assert_true(nf >= 3); /* model, opt, state */
    for (size_t fi = 0; fi < nf; fi++) {
        char name[512];
        snprintf(name, sizeof name, "%s", shs_checkpoint_file_name(ck, fi));
        shs_file *f;
        TU_OK(shs_file_open(&f, tu_path(dir, name), NULL));
        uint64_t data = shs_file_data_start(f), size = shs_file_size(f);
        size_t nt = shs_file_tensor_count(f);
        uint64_t *ends = calloc(2 * nt + 1, sizeof *ends);
        assert_non_null(ends);
        for (size_t k = 0; k < nt; k++) {
            ends[2 * k] = data + shs_file_tensor(f, k)->offset;
            ends[2 * k + 1] = ends[2 * k] + shs_file_tensor(f, k)->nbytes;
        }
        shs_file_free(f);
        unsigned long before = cp.tried;
        try_range(&cp, name, 0, data, 1);
        part[2] += cp.tried - before;
        before = cp.tried;
        try_range(&cp, name, data, size, full ? 1 : 97);
        for (size_t k = 0; !full && k < nt; k++) {
            if (ends[2 * k + 1] == ends[2 * k])
                continue;
            try_range(&cp, name, ends[2 * k], ends[2 * k] + 1, 1);
            if (ends[2 * k + 1] - 1 > ends[2 * k])
                try_range(&cp, name, ends[2 * k + 1] - 1, ends[2 * k + 1], 1);
        }
        part[3] += cp.tried - before;
        free(ends);
    }
    shs_checkpoint_free(ck);
    /* the campaign left the checkpoint as it was */
    TU_OK(shs_checkpoint_verify(dir, NULL, 0));
    print_message("bitflip: %lu flips tried, %lu detected (metadata.json %lu, common.json %lu, "
                  "headers %lu, payload %lu%s)\n",
                  cp.tried, cp.detected, part[0], part[1], part[2], part[3],
                  full ? ", every payload bit" : ", payload sampled");
    if (cp.detected != cp.tried)
        fail_msg("%lu of %lu single-bit flips verified OK", cp.tried - cp.detected, cp.tried);
    free(sp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bitflip),
    };
    return TU_RUN_GROUP(tests, tu_setup_root, tu_teardown_root);
}
