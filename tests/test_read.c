/*
 * test_read.c -- the public read API (shs_checkpoint_open_ex,
 * shs_checkpoint_read, _read_blob, _progress, _path): whole tensors and
 * every sub-box of a checkpoint saved by 4 ranks (threads over a
 * test communicator), dtype conversion, argument errors, checksums (whole
 * chunk and per block, mapped and pread), bytes read through the I/O seam,
 * Hugging Face indexes, plain folders and single files, damaged step
 * directories, and two threads reading one handle.
 */
#include "testutil.h"

#include "store/io.h"
#include "source/meta.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------ */
/* A communicator of 4 threads                                         */
/* ------------------------------------------------------------------ */

#define NR 4

#include "threadcomm.h"

/* ------------------------------------------------------------------ */
/* The 4-rank checkpoint                                               */
/* ------------------------------------------------------------------ */

/* Global tensors and how the 4 ranks split them:
     w  F32  [8, 6]  rows 2r..2r+1
     e  F32  [5, 7]  2 x 2 grid, uneven: rows [0,3) [3,5) x cols [0,4) [4,7)
     h  BF16 [4, 8]  columns 2r..2r+1
     r  F32  [3]     replicated on every rank
   and a blob "rng" per rank. */
static const uint64_t k_w[2] = { 8, 6 }, k_e[2] = { 5, 7 }, k_h[2] = { 4, 8 }, k_r[1] = { 3 };
static float g_w[48], g_e[35], g_r[3];
static uint16_t g_h[32];

static void make_refs(void)
{
    for (int i = 0; i < 48; i++)
        g_w[i] = 1.0f + (float)i * 0.5f;
    for (int i = 0; i < 35; i++)
        g_e[i] = -3.0f + (float)i * 0.25f;
    for (int i = 0; i < 32; i++)
        g_h[i] = shs_f32_to_bf16((float)i * 1.5f - 7.0f);
    for (int i = 0; i < 3; i++)
        g_r[i] = 100.0f + (float)i;
}

typedef struct rank_job {
    tshared *sh;
    int rank;
    const char *sp;
    int rc;
    char msg[512];
} rank_job;

static void add_shard(shs_state *st, const char *name, shs_dtype dt, size_t nd, const uint64_t *g,
                      const uint64_t *off, const uint64_t *shape, const void *whole, void *buf)
{
    /* copy the shard out of the global reference */
    unsigned es = shs_dtype_bits(dt) / 8;
    uint64_t cols = nd == 2 ? shape[1] : shape[0];
    uint64_t rows = nd == 2 ? shape[0] : 1;
    for (uint64_t i = 0; i < rows; i++) {
        uint64_t src = nd == 2 ? (off[0] + i) * g[1] + off[1] : off[0];
        memcpy((char *)buf + i * cols * es, (const char *)whole + src * es, cols * es);
    }
    shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
    s.name = name;
    s.dtype = dt;
    s.ndim = nd;
    s.shape = shape;
    s.global_shape = g;
    s.global_offset = off;
    s.data = buf;
    assert_int_equal(shs_state_add_tensor(st, &s), SHS_OK);
}

static void *rank_main(void *arg)
{
    rank_job *j = arg;
    int r = j->rank;
    shs_state *st = NULL;
    shs_comm *comm = NULL;
    shs_manager *m = NULL;
    tcomm tc = { j->sh, r };
    float wb[12], eb[12], rb[3];
    uint16_t hb[8];
    uint64_t woff[2] = { 2u * r, 0 }, wsh[2] = { 2, 6 };
    uint64_t eoff[2] = { r / 2 ? 3u : 0u, r % 2 ? 4u : 0u };
    uint64_t esh[2] = { r / 2 ? 2u : 3u, r % 2 ? 3u : 4u };
    uint64_t hoff[2] = { 0, 2u * r }, hsh[2] = { 4, 2 };
    uint64_t roff[1] = { 0 };
    shs_state_create(&st);
    add_shard(st, "w", SHS_F32, 2, k_w, woff, wsh, g_w, wb);
    add_shard(st, "e", SHS_F32, 2, k_e, eoff, esh, g_e, eb);
    add_shard(st, "h", SHS_BF16, 2, k_h, hoff, hsh, g_h, hb);
    add_shard(st, "r", SHS_F32, 1, k_r, roff, k_r, g_r, rb);
    char blob[32];
    snprintf(blob, sizeof blob, "rng-of-rank-%d", r);
    shs_state_set_blob(st, "rng", blob, strlen(blob));
    shs_config c;
    tu_cfg_saving(&c, j->sp);
    shs_progress p = tu_prog(12);
    int rc = shs_comm_create(&comm, r, NR, &k_tops, &tc);
    if (rc == SHS_OK)
        rc = shs_manager_create_comm(&m, &c, st, comm);
    if (rc == SHS_OK)
        rc = shs_manager_save(m, &p, 0);
    if (rc == SHS_OK)
        rc = shs_manager_wait(m);
    j->rc = rc;
    snprintf(j->msg, sizeof j->msg, "%s", shs_last_error());
    shs_manager_free(m);
    shs_comm_free(comm);
    shs_state_free(st);
    return NULL;
}

/* Save the 4-rank checkpoint of step 12 into save path sp. */
static void save4(const char *sp)
{
    tshared sh;
    rank_job j[NR];
    pthread_t th[NR];
    make_refs();
    tshared_init(&sh, NR, 0);
    for (int r = 0; r < NR; r++) {
        j[r] = (rank_job){ &sh, r, sp, 0, "" };
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &j[r]), 0);
    }
    for (int r = 0; r < NR; r++)
        pthread_join(th[r], NULL);
    tshared_destroy(&sh);
    for (int r = 0; r < NR; r++)
        if (j[r].rc != SHS_OK)
            fail_msg("rank %d save: %d %s", r, j[r].rc, j[r].msg);
}

static size_t find(const shs_checkpoint *ck, const char *name)
{
    size_t i;
    TU_OK(shs_checkpoint_find(&i, ck, name));
    return i;
}

/* The box [s, s + n) of a 2-D row-major reference of `cols` columns. */
static void ref_box(void *out, const void *whole, unsigned es, uint64_t cols, const uint64_t *s,
                    const uint64_t *n)
{
    for (uint64_t i = 0; i < n[0]; i++)
        memcpy((char *)out + i * n[1] * es, (const char *)whole + ((s[0] + i) * cols + s[1]) * es,
               n[1] * es);
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */
/* ------------------------------------------------------------------ */

static char *g_sp; /* the 4-rank save path, made once */

static int setup(void **state)
{
    tu_setup_root(state);
    g_sp = tu_subpath("four");
    save4(g_sp);
    return 0;
}

static int teardown(void **state)
{
    free(g_sp);
    return tu_teardown_root(state);
}

static void test_whole_tensors(void **state)
{
    (void)state;
    shs_checkpoint *ck;
    TU_OK(shs_checkpoint_open(&ck, g_sp, NULL));
    /* the save path resolves to its tracker's step */
    assert_non_null(strstr(shs_checkpoint_path(ck), "iteration_00000012"));
    assert_int_equal(shs_checkpoint_step(ck), 12);
    assert_int_equal(shs_checkpoint_world_size(ck), NR);
    float w[48], e[35], r[3];
    uint16_t h[32];
    TU_OK(shs_checkpoint_read(ck, find(ck, "w"), NULL, NULL, SHS_F32, w, sizeof w));
    assert_memory_equal(w, g_w, sizeof w);
    TU_OK(shs_checkpoint_read(ck, find(ck, "e"), NULL, NULL, SHS_F32, e, sizeof e));
    assert_memory_equal(e, g_e, sizeof e);
    TU_OK(shs_checkpoint_read(ck, find(ck, "h"), NULL, NULL, SHS_BF16, h, sizeof h));
    assert_memory_equal(h, g_h, sizeof h);
    /* a replicated tensor: 4 identical chunks, read once */
    assert_int_equal(shs_checkpoint_tensor(ck, find(ck, "r"))->n_chunks, NR);
    TU_OK(shs_checkpoint_read(ck, find(ck, "r"), NULL, NULL, SHS_F32, r, sizeof r));
    assert_memory_equal(r, g_r, sizeof r);
    /* F32 -> F64 */
    double wd[48];
    TU_OK(shs_checkpoint_read(ck, find(ck, "w"), NULL, NULL, SHS_F64, wd, sizeof wd));
    for (int i = 0; i < 48; i++)
        assert_true(wd[i] == (double)g_w[i]);
    shs_progress p = SHS_PROGRESS_INIT;
    TU_OK(shs_checkpoint_progress(&p, ck));
    assert_int_equal(p.global_step, 12);
    assert_int_equal(p.consumed_samples, 12 * 32);
    shs_checkpoint_free(ck);
}

/* Every box of e (5 x 7, cut 2 x 2 unevenly over 4 files) and of w. */
static void test_every_box(void **state)
{
    (void)state;
    shs_checkpoint *ck;
    shs_checkpoint_open_opts o = SHS_CHECKPOINT_OPEN_OPTS_INIT;
    for (int pass = 0; pass < 2; pass++) {
        o.flags = pass ? SHS_CHECKPOINT_OPEN_NO_MMAP : 0;
        TU_OK(shs_checkpoint_open(&ck, g_sp, &o));
        struct {
            const char *name;
            const float *ref;
            const uint64_t *g;
        } t[2] = { { "e", g_e, k_e }, { "w", g_w, k_w } };
        for (int k = 0; k < 2; k++) {
            size_t ti = find(ck, t[k].name);
            uint64_t s[2], n[2];
            for (s[0] = 0; s[0] < t[k].g[0]; s[0]++)
                for (n[0] = 1; s[0] + n[0] <= t[k].g[0]; n[0]++)
                    for (s[1] = 0; s[1] < t[k].g[1]; s[1]++)
                        for (n[1] = 1; s[1] + n[1] <= t[k].g[1]; n[1]++) {
                            float got[48], want[48];
                            size_t len = (size_t)(n[0] * n[1] * 4);
                            ref_box(want, t[k].ref, 4, t[k].g[1], s, n);
                            int rc = shs_checkpoint_read(ck, ti, s, n, SHS_F32, got, len);
                            if (rc != SHS_OK || memcmp(got, want, len) != 0)
                                fail_msg("%s box [%llu,%llu]+[%llu,%llu]: rc %d %s", t[k].name,
                                         (unsigned long long)s[0], (unsigned long long)s[1],
                                         (unsigned long long)n[0], (unsigned long long)n[1], rc,
                                         shs_last_error());
                        }
        }
        /* an empty box reads nothing */
        uint64_t s0[2] = { 5, 0 }, n0[2] = { 0, 7 };
        TU_OK(shs_checkpoint_read(ck, find(ck, "e"), s0, n0, SHS_F32, NULL, 0));
        shs_checkpoint_free(ck);
    }
}

static void test_convert(void **state)
{
    (void)state;
    shs_checkpoint *ck;
    TU_OK(shs_checkpoint_open(&ck, g_sp, NULL));
    size_t hi = find(ck, "h");
    float hf[32];
    TU_OK(shs_checkpoint_read(ck, hi, NULL, NULL, SHS_F32, hf, sizeof hf));
    for (int i = 0; i < 32; i++)
        assert_true(hf[i] == shs_bf16_to_f32(g_h[i]));
    /* a box across the 4 column shards, as F32 */
    uint64_t s[2] = { 1, 1 }, n[2] = { 2, 6 };
    float box[12];
    TU_OK(shs_checkpoint_read(ck, hi, s, n, SHS_F32, box, sizeof box));
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 6; j++)
            assert_true(box[i * 6 + j] == shs_bf16_to_f32(g_h[(1 + i) * 8 + 1 + j]));
    /* F32 -> BF16 rounds as shs_convert does */
    uint16_t wb[48];
    TU_OK(shs_checkpoint_read(ck, find(ck, "w"), NULL, NULL, SHS_BF16, wb, sizeof wb));
    for (int i = 0; i < 48; i++)
        assert_int_equal(wb[i], shs_f32_to_bf16(g_w[i]));
    shs_checkpoint_free(ck);
}

static void test_refused(void **state)
{
    (void)state;
    shs_checkpoint *ck;
    TU_OK(shs_checkpoint_open(&ck, g_sp, NULL));
    size_t wi = find(ck, "w");
    unsigned char buf[512];
    memset(buf, 0xab, sizeof buf);
    /* F32 -> I8: no such conversion */
    assert_int_equal(shs_checkpoint_read(ck, wi, NULL, NULL, SHS_I8, buf, 48), SHS_ECONVERT);
    TU_ASSERT_MSG_HAS("F32");
    TU_ASSERT_MSG_HAS("I8");
    TU_ASSERT_MSG_HAS("'w'");
    /* a box outside the tensor */
    uint64_t s[2] = { 7, 0 }, n[2] = { 2, 6 };
    assert_int_equal(shs_checkpoint_read(ck, wi, s, n, SHS_F32, buf, 48), SHS_ERANGE);
    uint64_t s2[2] = { 0, 6 }, n2[2] = { 1, 1 };
    assert_int_equal(shs_checkpoint_read(ck, wi, s2, n2, SHS_F32, buf, 4), SHS_ERANGE);
    /* dst_len must be exactly the box */
    assert_int_equal(shs_checkpoint_read(ck, wi, NULL, NULL, SHS_F32, buf, 191), SHS_ERANGE);
    assert_int_equal(shs_checkpoint_read(ck, wi, NULL, NULL, SHS_F32, buf, 193), SHS_ERANGE);
    assert_int_equal(shs_checkpoint_read(ck, wi, NULL, NULL, SHS_F64, buf, 192), SHS_ERANGE);
    /* only one of start and count; a tensor index out of range */
    assert_int_equal(shs_checkpoint_read(ck, wi, s, NULL, SHS_F32, buf, 192), SHS_EINVAL);
    assert_int_equal(shs_checkpoint_read(ck, 99, NULL, NULL, SHS_F32, buf, 192), SHS_ERANGE);
    /* nothing was written */
    for (size_t i = 0; i < sizeof buf; i++)
        assert_int_equal(buf[i], 0xab);
    /* result structs need their version */
    shs_chunk_info ci;
    memset(&ci, 0, sizeof ci);
    assert_int_equal(shs_checkpoint_chunk(&ci, ck, wi, 0), SHS_EINVAL);
    shs_blob_info bi;
    memset(&bi, 0, sizeof bi);
    assert_int_equal(shs_checkpoint_blob(&bi, ck, 0), SHS_EINVAL);
    shs_checkpoint_free(ck);

    /* sub-byte elements: a box must cover whole bytes */
    char *dir = tu_subdir("f4");
    uint8_t f4[4] = { 0x21, 0x43, 0x65, 0x87 };
    uint64_t sh[1] = { 8 };
    shs_tensor_view tv = { "q", SHS_F4, 1, sh, f4 };
    TU_OK(shs_save_file(tu_path(dir, "q.safetensors"), &tv, 1, NULL, 0, NULL));
    TU_OK(shs_checkpoint_open(&ck, tu_path(dir, "q.safetensors"), NULL));
    uint64_t fs[1] = { 1 }, fn[1] = { 2 };
    assert_int_equal(shs_checkpoint_read(ck, 0, fs, fn, SHS_F4, buf, 1), SHS_EINVAL);
    uint64_t gs[1] = { 2 }, gn[1] = { 4 };
    TU_OK(shs_checkpoint_read(ck, 0, gs, gn, SHS_F4, buf, 2));
    assert_int_equal(buf[0], 0x43);
    assert_int_equal(buf[1], 0x65);
    shs_checkpoint_free(ck);
    free(dir);
}

/* Flip one byte at `at` of a file. */
static void flip(const char *path, uint64_t at)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, (long)at, SEEK_SET), 0);
    int c = fgetc(f);
    assert_int_equal(fseek(f, (long)at, SEEK_SET), 0);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

static void test_checksums_and_blobs(void **state)
{
    (void)state;
    char *sp = tu_subpath("four_bad");
    save4(sp);
    shs_checkpoint *ck;
    TU_OK(shs_checkpoint_open(&ck, sp, NULL));
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", shs_checkpoint_path(ck));
    /* blobs: one per rank, read and checked */
    assert_int_equal(shs_checkpoint_blob_count(ck), NR);
    for (size_t i = 0; i < NR; i++) {
        shs_blob_info b = SHS_BLOB_INFO_INIT;
        TU_OK(shs_checkpoint_blob(&b, ck, i));
        char got[64], want[64];
        snprintf(want, sizeof want, "rng-of-rank-%d", b.rank);
        assert_int_equal(b.size, strlen(want));
        assert_int_equal(shs_checkpoint_read_blob(ck, i, got, (size_t)b.size - 1), SHS_ERANGE);
        TU_OK(shs_checkpoint_read_blob(ck, i, got, (size_t)b.size));
        assert_memory_equal(got, want, b.size);
    }
    assert_int_equal(shs_checkpoint_read_blob(ck, NR, NULL, 0), SHS_ERANGE);
    /* flip a byte of w's chunk of rank 2 and of blob 0 */
    size_t wi = find(ck, "w");
    shs_chunk_info ci = SHS_CHUNK_INFO_INIT;
    for (size_t k = 0; k < NR; k++) {
        TU_OK(shs_checkpoint_chunk(&ci, ck, wi, k));
        if (ci.offset[0] == 4)
            break;
    }
    assert_true(ci.offset[0] == 4 && ci.has_xxh3);
    char fw[4200];
    snprintf(fw, sizeof fw, "%s/%s", dir, shs_checkpoint_file_name(ck, ci.file));
    shs_blob_info b0 = SHS_BLOB_INFO_INIT;
    TU_OK(shs_checkpoint_blob(&b0, ck, 0));
    char fb[4200];
    snprintf(fb, sizeof fb, "%s/%s", dir, shs_checkpoint_file_name(ck, b0.file));
    shs_checkpoint_free(ck);
    flip(fw, ci.byte_begin + 5);
    flip(fb, b0.byte_begin + 1);
    for (int pass = 0; pass < 2; pass++) {
        shs_checkpoint_open_opts o = SHS_CHECKPOINT_OPEN_OPTS_INIT;
        o.flags = pass ? SHS_CHECKPOINT_OPEN_NO_MMAP : 0;
        TU_OK(shs_checkpoint_open(&ck, sp, &o));
        float w[48], part[12];
        assert_int_equal(shs_checkpoint_read(ck, wi, NULL, NULL, SHS_F32, w, sizeof w),
                         SHS_ECHECKSUM);
        TU_ASSERT_MSG_HAS("'w'");
        /* any box touching the damaged chunk, converted or not */
        uint64_t s[2] = { 5, 1 }, n[2] = { 1, 2 };
        double wd[2];
        assert_int_equal(shs_checkpoint_read(ck, wi, s, n, SHS_F64, wd, sizeof wd), SHS_ECHECKSUM);
        /* boxes in the other chunks read */
        uint64_t s2[2] = { 0, 0 }, n2[2] = { 2, 6 };
        TU_OK(shs_checkpoint_read(ck, wi, s2, n2, SHS_F32, part, sizeof part));
        assert_memory_equal(part, g_w, sizeof part);
        char got[64];
        shs_blob_info b = SHS_BLOB_INFO_INIT;
        TU_OK(shs_checkpoint_blob(&b, ck, 0));
        assert_int_equal(shs_checkpoint_read_blob(ck, 0, got, (size_t)b.size), SHS_ECHECKSUM);
        TU_ASSERT_MSG_HAS("rng");
        shs_checkpoint_free(ck);
    }
    free(sp);
}

/* ---- bytes read through the I/O seam ---- */

static uint64_t g_pread_bytes;

static ssize_t counting_pread(int fd, void *buf, size_t n, off_t off)
{
    ssize_t r = shs__io_posix.pread(fd, buf, n, off);
    if (r > 0)
        __atomic_add_fetch(&g_pread_bytes, (uint64_t)r, __ATOMIC_RELAXED);
    return r;
}

enum {
    BR = 2048,
    BC = 2048
}; /* F32: 16 MiB = 4 blocks of 512 rows */

static void save_big(const char *sp, float **whole_out)
{
    float *whole = malloc((size_t)BR * BC * sizeof *whole);
    assert_non_null(whole);
    for (size_t i = 0; i < (size_t)BR * BC; i++)
        whole[i] = (float)(i % 9973);
    static const uint64_t g[2] = { BR, BC };
    shs_state *st;
    TU_OK(shs_state_create(&st));
    tu_add_tensor(st, "big", SHS_KIND_MODEL, SHS_F32, 2, g, whole, NULL);
    shs_progress p = tu_prog(3);
    TU_OK(tu_save_once(sp, st, &p, 0));
    shs_state_free(st);
    *whole_out = whole;
}

static void test_pread_blocks(void **state)
{
    (void)state;
    char *sp = tu_subpath("big");
    float *whole;
    save_big(sp, &whole);
    shs_checkpoint_open_opts o = SHS_CHECKPOINT_OPEN_OPTS_INIT;
    o.flags = SHS_CHECKPOINT_OPEN_NO_MMAP;
    shs_checkpoint *ck;
    TU_OK(shs_checkpoint_open(&ck, sp, &o));
    shs_chunk_info ci = SHS_CHUNK_INFO_INIT;
    TU_OK(shs_checkpoint_chunk(&ci, ck, 0, 0));
    char file[4200];
    snprintf(file, sizeof file, "%s/%s", shs_checkpoint_path(ck),
             shs_checkpoint_file_name(ck, ci.file));

    shs__io_ops ops = shs__io_posix;
    ops.pread = counting_pread;
    shs__io_set(&ops);
    /* rows 10..19 lie in block 0: that block (and the file's header) is
       all that is read */
    uint64_t s[2] = { 10, 100 }, n[2] = { 10, 50 };
    float *box = malloc(10 * 50 * sizeof *box);
    assert_non_null(box);
    g_pread_bytes = 0;
    int rc = shs_checkpoint_read(ck, 0, s, n, SHS_F32, box, 10 * 50 * 4);
    uint64_t got = g_pread_bytes;
    shs__io_set(NULL);
    if (rc != SHS_OK)
        fail_msg("small box: %s", shs_last_error());
    for (int i = 0; i < 10; i++)
        assert_memory_equal(&box[i * 50], &whole[(10 + i) * BC + 100], 50 * 4);
    if (got < (4u << 20) || got > (4u << 20) + (64u << 10))
        fail_msg("a box in one 4 MiB block read %llu bytes", (unsigned long long)got);

    /* damage block 3 (rows 1536..2047) */
    flip(file, ci.byte_begin + 3 * (4u << 20) + 100);
    TU_OK(shs_checkpoint_read(ck, 0, s, n, SHS_F32, box, 10 * 50 * 4));
    uint64_t s3[2] = { 1600, 0 };
    assert_int_equal(shs_checkpoint_read(ck, 0, s3, n, SHS_F32, box, 10 * 50 * 4), SHS_ECHECKSUM);
    TU_ASSERT_MSG_HAS("block 3");
    shs_checkpoint_free(ck);
    /* the mapped path checks the same blocks */
    TU_OK(shs_checkpoint_open(&ck, sp, NULL));
    TU_OK(shs_checkpoint_read(ck, 0, s, n, SHS_F32, box, 10 * 50 * 4));
    assert_int_equal(shs_checkpoint_read(ck, 0, s3, n, SHS_F32, box, 10 * 50 * 4), SHS_ECHECKSUM);
    TU_ASSERT_MSG_HAS("block 3");
    shs_checkpoint_free(ck);
    free(box);
    free(whole);
    free(sp);
}

/* A chunk larger than a block with only its whole checksum: the pread
   path must read it all (to check it) but one window at a time. */
static void test_pread_whole_hash(void **state)
{
    (void)state;
    char *sp = tu_subpath("big_nohash_blocks");
    float *whole;
    save_big(sp, &whole);
    const char *mp = tu_path(tu_step_dir(sp, 3), "metadata.json");
    json_error_t je;
    json_t *root = json_load_file(mp, 0, &je);
    assert_non_null(root);
    /* drop the block checksums of every chunk */
    const char *k;
    json_t *t;
    json_t *tensors = json_object_get(root, "tensors");
    int dropped = 0;
    if (json_is_object(tensors)) {
        json_object_foreach(tensors, k, t)
        {
            json_t *chunks = json_object_get(t, "chunks");
            for (size_t i = 0; i < json_array_size(chunks); i++) {
                json_t *c = json_array_get(chunks, i);
                dropped += json_object_del(c, "xxh3_block") == 0;
                json_object_del(c, "xxh3_blocks");
            }
        }
    } else {
        for (size_t i = 0; i < json_array_size(tensors); i++) {
            json_t *chunks = json_object_get(json_array_get(tensors, i), "chunks");
            for (size_t q = 0; q < json_array_size(chunks); q++) {
                json_t *c = json_array_get(chunks, q);
                dropped += json_object_del(c, "xxh3_block") == 0;
                json_object_del(c, "xxh3_blocks");
            }
        }
    }
    assert_true(dropped == 1);
    /* metadata.json is sealed by its own checksum: seal the edited text
       again, as the writer does */
    tu_meta_reseal(mp, root);
    json_decref(root);

    shs_checkpoint_open_opts o = SHS_CHECKPOINT_OPEN_OPTS_INIT;
    o.flags = SHS_CHECKPOINT_OPEN_NO_MMAP;
    shs_checkpoint *ck;
    int rc = shs_checkpoint_open(&ck, sp, &o);
    if (rc != SHS_OK)
        fail_msg("metadata.json without block checksums: %s", shs_last_error());
    shs_chunk_info ci = SHS_CHUNK_INFO_INIT;
    TU_OK(shs_checkpoint_chunk(&ci, ck, 0, 0));
    uint64_t s[2] = { 10, 100 }, n[2] = { 10, 50 };
    float box[500];
    shs__io_ops ops = shs__io_posix;
    ops.pread = counting_pread;
    shs__io_set(&ops);
    g_pread_bytes = 0;
    rc = shs_checkpoint_read(ck, 0, s, n, SHS_F32, box, sizeof box);
    uint64_t got = g_pread_bytes;
    shs__io_set(NULL);
    if (rc != SHS_OK)
        fail_msg("small box: %s", shs_last_error());
    for (int i = 0; i < 10; i++)
        assert_memory_equal(&box[i * 50], &whole[(10 + i) * BC + 100], 50 * 4);
    /* the whole chunk is read to check it */
    assert_true(got >= ci.byte_end - ci.byte_begin);
    char file[4200];
    snprintf(file, sizeof file, "%s/%s", shs_checkpoint_path(ck),
             shs_checkpoint_file_name(ck, ci.file));
    flip(file, ci.byte_begin + 3 * (4u << 20) + 100);
    assert_int_equal(shs_checkpoint_read(ck, 0, s, n, SHS_F32, box, sizeof box), SHS_ECHECKSUM);
    TU_ASSERT_MSG_HAS("'big'");
    shs_checkpoint_free(ck);
    free(whole);
    free(sp);
}

/* ---- Hugging Face index, plain folders, single files, damage ---- */

static void put_st(const char *path, const char *n1, float v1, const char *n2)
{
    float a[4] = { v1, v1 + 1, v1 + 2, v1 + 3 };
    float b[2] = { -v1, v1 * 2 };
    uint64_t sa[2] = { 2, 2 }, sb[1] = { 2 };
    shs_tensor_view tv[2] = { { n1, SHS_F32, 2, sa, a }, { n2, SHS_F32, 1, sb, b } };
    TU_OK(shs_save_file(path, tv, n2 ? 2 : 1, NULL, 0, NULL));
}

static void put_index(const char *dir, const char *weight_map)
{
    char text[1024];
    snprintf(text, sizeof text, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": %s}\n",
             weight_map);
    assert_int_equal(
        tu_write_file(tu_path(dir, "model.safetensors.index.json"), text, strlen(text)), 0);
}

static void test_hf_index(void **state)
{
    (void)state;
    char *dir = tu_subdir("hf");
    put_st(tu_path(dir, "model-00001-of-00002.safetensors"), "x", 1, "y");
    put_st(tu_path(dir, "model-00002-of-00002.safetensors"), "z", 10, NULL);
    /* a stray file the index does not name is never opened */
    assert_int_equal(tu_write_file(tu_path(dir, "stray.safetensors"), "garbage", 7), 0);
    put_index(dir, "{\"x\": \"model-00001-of-00002.safetensors\", "
                   "\"y\": \"model-00001-of-00002.safetensors\", "
                   "\"z\": \"model-00002-of-00002.safetensors\"}");
    for (int via = 0; via < 2; via++) {
        shs_checkpoint *ck;
        const char *p = via ? tu_path(dir, "model.safetensors.index.json") : dir;
        TU_OK(shs_checkpoint_open(&ck, p, NULL));
        assert_non_null(strstr(shs_checkpoint_path(ck), "model.safetensors.index.json"));
        assert_int_equal((shs_checkpoint_format(ck) == SHS_FORMAT_PLAIN), 1);
        assert_int_equal(shs_checkpoint_tensor_count(ck), 3);
        assert_int_equal(shs_checkpoint_file_count(ck), 2);
        float z[4];
        TU_OK(shs_checkpoint_read(ck, find(ck, "z"), NULL, NULL, SHS_F32, z, sizeof z));
        assert_true(z[0] == 10 && z[3] == 13);
        float y[2];
        TU_OK(shs_checkpoint_read(ck, find(ck, "y"), NULL, NULL, SHS_F32, y, sizeof y));
        assert_true(y[0] == -1 && y[1] == 2);
        shs_progress pr = SHS_PROGRESS_INIT;
        assert_int_equal(shs_checkpoint_progress(&pr, ck), SHS_ENOTFOUND);
        shs_checkpoint_free(ck);
    }
    shs_checkpoint *ck = NULL;
    /* a file outside the index's folder */
    put_index(dir, "{\"x\": \"../model-00001-of-00002.safetensors\"}");
    assert_int_equal(shs_checkpoint_open(&ck, dir, NULL), SHS_ECORRUPT);
    assert_null(ck);
    TU_ASSERT_MSG_HAS("../model-00001-of-00002.safetensors");
    /* a missing file */
    put_index(dir, "{\"x\": \"model-00001-of-00002.safetensors\", "
                   "\"q\": \"model-00003-of-00003.safetensors\"}");
    assert_int_equal(shs_checkpoint_open(&ck, dir, NULL), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("model-00003-of-00003.safetensors");
    /* a folder holding only its index: the index's error, not "no
       checkpoint" */
    char *lone = tu_subdir("hf-lone");
    put_index(lone, "{\"x\": \"model-00001-of-00002.safetensors\"}");
    assert_int_equal(shs_checkpoint_open(&ck, lone, NULL), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("'model-00001-of-00002.safetensors', which does not exist");
    tu_rmtree(lone);
    free(lone);
    /* a tensor its file does not hold */
    put_index(dir, "{\"x\": \"model-00001-of-00002.safetensors\", "
                   "\"z\": \"model-00001-of-00002.safetensors\"}");
    assert_int_equal(shs_checkpoint_open(&ck, dir, NULL), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("'z'");
    /* not an index */
    put_index(dir, "[1, 2]");
    assert_int_equal(shs_checkpoint_open(&ck, dir, NULL), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("weight_map");
    free(dir);
}

static void test_plain_file_and_damaged(void **state)
{
    (void)state;
    char *dir = tu_subdir("plain");
    put_st(tu_path(dir, "a.safetensors"), "x", 1, "y");
    put_st(tu_path(dir, "b.safetensors"), "z", 5, NULL);
    shs_checkpoint *ck;
    TU_OK(shs_checkpoint_open(&ck, dir, NULL));
    assert_int_equal((shs_checkpoint_format(ck) == SHS_FORMAT_PLAIN), 1);
    assert_int_equal(shs_checkpoint_tensor_count(ck), 3);
    assert_string_equal(shs_checkpoint_path(ck), dir);
    float x[4];
    uint64_t s[2] = { 1, 0 }, n[2] = { 1, 2 };
    TU_OK(shs_checkpoint_read(ck, find(ck, "x"), s, n, SHS_F32, x, 8));
    assert_true(x[0] == 3 && x[1] == 4);
    shs_checkpoint_free(ck);
    /* one file */
    TU_OK(shs_checkpoint_open(&ck, tu_path(dir, "b.safetensors"), NULL));
    assert_int_equal(shs_checkpoint_tensor_count(ck), 1);
    TU_OK(shs_checkpoint_read(ck, 0, NULL, NULL, SHS_F32, x, 16));
    assert_true(x[0] == 5 && x[3] == 8);
    shs_checkpoint_free(ck);
    /* not a checkpoint at all */
    assert_int_equal(tu_write_file(tu_path(dir, "notes.txt"), "hi", 2), 0);
    assert_int_equal(shs_checkpoint_open(&ck, tu_path(dir, "notes.txt"), NULL), SHS_EINVAL);
    assert_int_equal(shs_checkpoint_open(&ck, tu_path(dir, "missing"), NULL), SHS_ENOENT);

    /* damaged step directories: named so, or holding common.json */
    char *it = tu_subdir("iteration_00000003");
    put_st(tu_path(it, "a.safetensors"), "x", 1, NULL);
    assert_int_equal(shs_checkpoint_open(&ck, it, NULL), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("iteration_00000003");
    TU_ASSERT_MSG_HAS("metadata.json");
    char *st = tu_subdir("step-7");
    put_st(tu_path(st, "a.safetensors"), "x", 1, NULL);
    assert_int_equal(shs_checkpoint_open(&ck, st, NULL), SHS_ECORRUPT);
    char *cj = tu_subdir("has_common");
    put_st(tu_path(cj, "a.safetensors"), "x", 1, NULL);
    assert_int_equal(tu_write_file(tu_path(cj, "common.json"), "{}", 2), 0);
    assert_int_equal(shs_checkpoint_open(&ck, cj, NULL), SHS_ECORRUPT);
    TU_ASSERT_MSG_HAS("has_common");
    /* options */
    shs_checkpoint_open_opts o = SHS_CHECKPOINT_OPEN_OPTS_INIT;
    o.version = 99;
    assert_int_equal(shs_checkpoint_open(&ck, dir, &o), SHS_EINVAL);
    o = (shs_checkpoint_open_opts)SHS_CHECKPOINT_OPEN_OPTS_INIT;
    o.step = 12;
    TU_OK(shs_checkpoint_open(&ck, g_sp, &o));
    shs_checkpoint_free(ck);
    o.step = 13;
    assert_int_equal(shs_checkpoint_open(&ck, g_sp, &o), SHS_ENOCHECKPOINT);
    shs_checkpoint_free(NULL);
    free(it);
    free(st);
    free(cj);
    free(dir);
}

/* ---- two threads on one handle ---- */

typedef struct reader_job {
    const shs_checkpoint *ck;
    int bad;
    char msg[256];
} reader_job;

static void *reader_main(void *arg)
{
    reader_job *j = arg;
    for (int it = 0; it < 200 && !j->bad; it++) {
        size_t i;
        float e[35], hf[32];
        double w[48];
        int rc = shs_checkpoint_find(&i, j->ck, "e");
        if (rc == SHS_OK)
            rc = shs_checkpoint_read(j->ck, i, NULL, NULL, SHS_F32, e, sizeof e);
        if (rc == SHS_OK && memcmp(e, g_e, sizeof e) != 0)
            rc = -1000;
        if (rc == SHS_OK && (rc = shs_checkpoint_find(&i, j->ck, "w")) == SHS_OK)
            rc = shs_checkpoint_read(j->ck, i, NULL, NULL, SHS_F64, w, sizeof w);
        for (int k = 0; rc == SHS_OK && k < 48; k++)
            if (w[k] != (double)g_w[k])
                rc = -1001;
        if (rc == SHS_OK && (rc = shs_checkpoint_find(&i, j->ck, "h")) == SHS_OK)
            rc = shs_checkpoint_read(j->ck, i, NULL, NULL, SHS_F32, hf, sizeof hf);
        if (rc != SHS_OK) {
            j->bad = 1;
            snprintf(j->msg, sizeof j->msg, "%d %s", rc, shs_last_error());
        }
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    for (int pass = 0; pass < 2; pass++) {
        shs_checkpoint_open_opts o = SHS_CHECKPOINT_OPEN_OPTS_INIT;
        o.flags = pass ? SHS_CHECKPOINT_OPEN_NO_MMAP : 0;
        shs_checkpoint *ck;
        TU_OK(shs_checkpoint_open(&ck, g_sp, &o));
        reader_job j[2] = { { ck, 0, "" }, { ck, 0, "" } };
        pthread_t th[2];
        for (int i = 0; i < 2; i++)
            assert_int_equal(pthread_create(&th[i], NULL, reader_main, &j[i]), 0);
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        for (int i = 0; i < 2; i++)
            if (j[i].bad)
                fail_msg("thread %d: %s", i, j[i].msg);
        shs_checkpoint_free(ck);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_tensors),
        cmocka_unit_test(test_every_box),
        cmocka_unit_test(test_convert),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_checksums_and_blobs),
        cmocka_unit_test(test_pread_blocks),
        cmocka_unit_test(test_pread_whole_hash),
        cmocka_unit_test(test_hf_index),
        cmocka_unit_test(test_plain_file_and_damaged),
        cmocka_unit_test(test_threads),
    };
    return TU_RUN_GROUP(tests, setup, teardown);
}
