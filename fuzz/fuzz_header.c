/*
 * fuzz_header.c -- libFuzzer target for the safetensors header reader.
 *
 * Opens the input as an in-memory file image.  On failure the status must
 * be a documented one with a message and *out must be NULL.  On success
 * every accessor is exercised and the invariants the reader promises are
 * checked (abort() on violation, so the fuzzer reports it):
 *   - tensors are listed in data order, contiguous from offset 0, and the
 *     data ends exactly at the end of the file;
 *   - nbytes == shs_tensor_nbytes(dtype, shape), numel == product(shape);
 *   - names are NUL-terminated at name_len, unique and findable;
 *   - metadata keys are sorted and shs_file_metadata_get finds each one;
 *   - the raw header is the input's bytes; tensor bytes read back equal the
 *     input's bytes (reads capped at a few MiB per input).
 *
 * Builds with clang -fsanitize=fuzzer (fuzz/CMakeLists.txt) and with any
 * compiler plus fuzz/replay.c (tests/CMakeLists.txt: fuzz.replay_header).
 */
#include "shardsafe.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define READ_CAP (4u << 20) /* bytes copied per input, at most */

static void die(const char *what, size_t i)
{
    fprintf(stderr, "fuzz_header: invariant violated: %s (index %zu)\n", what, i);
    abort();
}
#define CHECK(cond, what, i)                                                                       \
    do {                                                                                           \
        if (!(cond))                                                                               \
            die(what, i);                                                                          \
    } while (0)

static int known_status(int rc)
{
    return (rc >= SHS_EUNSUPPORTED && rc <= SHS_ENOMEM) ||
           (rc >= SHS_ECONVERT && rc <= SHS_EHEADER_TOO_SMALL);
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void check_file(const shs_file *f, const uint8_t *data, size_t size)
{
    CHECK(size >= 8, "opened a file shorter than 8 bytes", 0);
    uint64_t hl = shs_file_header_len(f);
    CHECK(hl == le64(data), "header_len differs from the prefix", 0);
    CHECK(hl <= 100000000u, "header_len above the limit", 0);
    CHECK(shs_file_size(f) == size, "file size", 0);
    CHECK(shs_file_data_start(f) == 8 + hl, "data_start", 0);
    CHECK(8 + hl <= size, "header past end of file", 0);
    CHECK(hl == 0 || memcmp(shs_file_header(f), data + 8, (size_t)hl) == 0,
          "raw header differs from the input", 0);

    const uint8_t *payload = data + 8 + hl;
    size_t n = shs_file_tensor_count(f);
    uint64_t next = 0;
    size_t budget = READ_CAP;
    for (size_t i = 0; i < n; i++) {
        const shs_tensor_info *t = shs_file_tensor(f, i);
        CHECK(t != NULL, "tensor(i) is NULL", i);
        CHECK(t->name != NULL, "tensor name NULL", i);
        CHECK(t->name[t->name_len] == '\0', "name not NUL-terminated", i);
        CHECK((unsigned)t->dtype < SHS_DTYPE_COUNT, "dtype out of range", i);
        CHECK(t->ndim <= SHS_MAX_DIMS, "ndim above SHS_MAX_DIMS", i);
        CHECK(t->ndim == 0 || t->shape != NULL, "shape NULL", i);
        uint64_t numel = 1;
        int zero = 0;
        for (size_t d = 0; d < t->ndim; d++) {
            if (t->shape[d] == 0)
                zero = 1;
            else if (!zero)
                CHECK(!__builtin_mul_overflow(numel, t->shape[d], &numel),
                      "numel overflows in an opened file", i);
        }
        if (zero)
            numel = 0;
        CHECK(t->numel == numel, "numel != product(shape)", i);
        uint64_t nb = 0;
        CHECK(shs_tensor_nbytes(&nb, t->dtype, t->ndim, t->shape) == SHS_OK,
              "shs_tensor_nbytes fails on an opened tensor", i);
        CHECK(nb == t->nbytes, "nbytes != shs_tensor_nbytes", i);
        CHECK(t->offset == next, "offsets not contiguous", i);
        CHECK(!__builtin_add_overflow(next, t->nbytes, &next), "offset + nbytes overflows", i);
        CHECK(next <= size - 8 - hl, "tensor past end of file", i);

        /* the name is unique: find must give this index */
        if (strlen(t->name) == t->name_len) {
            size_t idx = (size_t)-1;
            CHECK(shs_file_find(&idx, f, t->name) == SHS_OK, "find fails", i);
            CHECK(idx == i, "find gives another index", i);
        }

        const uint8_t *want = payload + t->offset;
        const void *z = shs_file_tensor_data(f, i);
        if (z && t->nbytes)
            CHECK(memcmp(z, want, (size_t)t->nbytes) == 0, "tensor_data differs from the input", i);
        if (t->nbytes <= budget) {
            size_t nbytes = (size_t)t->nbytes;
            uint8_t *buf = malloc(nbytes ? nbytes : 1);
            if (!buf)
                abort();
            CHECK(shs_file_read(f, i, buf, nbytes) == SHS_OK, "read fails", i);
            CHECK(nbytes == 0 || memcmp(buf, want, nbytes) == 0, "read differs from the input", i);
            if (nbytes) {
                CHECK(shs_file_read(f, i, buf, nbytes - 1) == SHS_ERANGE,
                      "short buffer not SHS_ERANGE", i);
                CHECK(shs_file_read_bytes(f, i, nbytes - 1, buf, 1) == SHS_OK &&
                          buf[0] == want[nbytes - 1],
                      "read_bytes last", i);
                CHECK(shs_file_read_bytes(f, i, nbytes, buf, 1) != SHS_OK,
                      "read_bytes past the end succeeds", i);
            }
            free(buf);
            budget -= nbytes;
        }
    }
    CHECK(8 + hl + next == size, "data does not end at end of file", n);
    size_t idx;
    (void)shs_file_find(&idx, f, "\xff not a valid name");

    int has = shs_file_has_metadata(f);
    size_t nm = shs_file_metadata_count(f);
    CHECK(has == 0 || has == 1, "has_metadata not 0/1", 0);
    CHECK(has || nm == 0, "metadata entries without __metadata__", 0);
    /* A key may hold "\u0000": metadata_at gives it as a C string, cut at
       the NUL, which metadata_get rightly does not find (the API has no
       key length).  Check lookups only when no key can hold a NUL. */
    int maybe_nul = 0;
    for (uint64_t i = 0; i + 6 <= hl && !maybe_nul; i++)
        maybe_nul = memcmp(data + 8 + i, "\\u0000", 6) == 0;
    const char *prev = NULL;
    for (size_t i = 0; i < nm; i++) {
        const char *k = NULL, *v = NULL;
        CHECK(shs_file_metadata_at(&k, &v, f, i) == SHS_OK, "metadata_at", i);
        CHECK(k != NULL && v != NULL, "metadata_at NULL", i);
        CHECK(prev == NULL || strcmp(prev, k) <= 0, "metadata not sorted", i);
        if (!maybe_nul) {
            CHECK(prev == NULL || strcmp(prev, k) < 0, "duplicate metadata key", i);
            const char *got = shs_file_metadata_get(f, k);
            CHECK(got == v, "metadata_get misses or differs", i);
        }
        (void)strlen(v);
        prev = k;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t empty[1];
    shs_file *f = (shs_file *)&f; /* must come back NULL on failure */
    int rc = shs_file_open_memory(&f, size ? data : empty, size, "fuzz");
    if (rc != SHS_OK) {
        CHECK(rc < 0 && known_status(rc), "unknown status", (size_t)-rc);
        CHECK(f == NULL, "*out not NULL after failure", 0);
        CHECK(shs_last_error()[0] != '\0', "empty message", (size_t)-rc);
        CHECK(strcmp(shs_strerror(rc), "unknown status") != 0, "status without a description",
              (size_t)-rc);
        return 0;
    }
    CHECK(f != NULL, "success with NULL handle", 0);
    check_file(f, data, size);
    shs_file_free(f);
    return 0;
}
