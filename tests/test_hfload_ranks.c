/*
 * test_hfload_ranks.c -- Hugging Face weights (initial_load_in_hf) loaded
 * by 1 to 4 ranks as threads (a test communicator with buffered
 * point-to-point messages, for load_balanced): rows split unevenly,
 * columns split, replicated; BF16 into F32 and into BF16 with refreshed
 * masters.  Bytes read per rank are asserted: each rank reads its boxes
 * only; with load_balanced every byte once in total; without mmap the
 * pread windows keep a rank to its rows.
 */
#include "hf_fixture.h"
#include "threadcomm.h"

#include "store/io.h"

#include <pthread.h>
#include <stdatomic.h>

#define MAXR 4

typedef struct rank_arg {
    tshared *sh;
    job *j;
} rank_arg;

static void *rank_main(void *arg)
{
    rank_arg *a = arg;
    tcomm tc = { a->sh, a->j->rank };
    shs_comm *comm = NULL;
    if (shs_comm_create(&comm, a->j->rank, a->j->nr, &k_tops, &tc) != SHS_OK) {
        a->j->rc = SHS_ENOMEM;
        return NULL;
    }
    a->j->comm = comm;
    run_job(a->j);
    shs_comm_free(comm);
    a->j->comm = NULL;
    return NULL;
}

/* Run `proto` on nr ranks (threads); js[r] get the outcomes. */
static void run_ranks(const job *proto, int nr, job *js)
{
    tshared sh;
    tshared_init(&sh, nr, 1);
    pthread_t th[MAXR];
    rank_arg a[MAXR];
    for (int r = 0; r < nr; r++) {
        js[r] = *proto;
        js[r].rank = r;
        js[r].nr = nr;
        a[r] = (rank_arg){ &sh, &js[r] };
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &a[r]), 0);
    }
    for (int r = 0; r < nr; r++)
        pthread_join(th[r], NULL);
    assert_int_equal(tshared_destroy(&sh), 0); /* every message was received */
}


/* 1 to 4 ranks, rows / columns / replicated; bytes read per rank are the
   bytes of its boxes; with load_balanced every byte is read once. */
static void test_ranks(void **state)
{
    (void)state;
    char *dir = make_sharded("ranks");
    job js[MAXR];
    for (int nr = 1; nr <= MAXR; nr++)
        for (int balanced = 0; balanced < 2; balanced++)
            for (int bf = 0; bf < 2; bf++) {
                job proto = job_default(dir);
                proto.balanced = balanced;
                proto.dt = bf ? SHS_BF16 : SHS_F32;
                run_ranks(&proto, nr, js);
                uint64_t total = 0;
                for (int r = 0; r < nr; r++) {
                    expect_ok(&js[r]);
                    if (bf)
                        assert_int_equal(js[r].master_ok, 1);
                    total += js[r].bytes_read;
                    if (!balanced || nr == 1) {
                        if (js[r].bytes_read != box_bytes(r, nr))
                            fail_msg("nr %d rank %d: read %llu bytes, its boxes are %llu", nr, r,
                                     (unsigned long long)js[r].bytes_read,
                                     (unsigned long long)box_bytes(r, nr));
                    }
                }
                print_message("%d rank(s)%s %s: %llu bytes read in total\n", nr,
                              balanced ? " balanced" : "", bf ? "bf16" : "f32",
                              (unsigned long long)total);
                if (balanced && nr > 1 && total != box_bytes(0, 1))
                    fail_msg("balanced on %d ranks: %llu bytes read, the model is %llu", nr,
                             (unsigned long long)total, (unsigned long long)box_bytes(0, 1));
                if (nr > 1 && !balanced)
                    assert_true(js[0].bytes_read < box_bytes(0, 1));
            }
    free(dir);
}


/* Without mmap (the pread fallback): each rank reads its rows of a
   256 KiB BF16 tensor through small windows, not the whole tensor. */
static atomic_ullong g_pread_bytes;
static shs__io_ops g_io;

static void *no_mmap(int fd, size_t len)
{
    (void)fd, (void)len;
    return NULL;
}

static ssize_t counting_pread(int fd, void *buf, size_t n, off_t off)
{
    ssize_t got = shs__io_posix.pread(fd, buf, n, off);
    if (got > 0)
        atomic_fetch_add(&g_pread_bytes, (unsigned long long)got);
    return got;
}

typedef struct big_rank {
    int rank, nr;
    const char *dir;
    int rc;
    char msg[512];
    uint64_t bytes_read;
    int bad;
} big_rank;

static tshared g_big_sh;

static void *big_main(void *arg)
{
    big_rank *b = arg;
    tcomm tc = { &g_big_sh, b->rank };
    shs_comm *comm = NULL;
    shs_state *st = NULL;
    shs_manager *m = NULL;
    static const uint64_t g[2] = { 256, 512 };
    uint64_t off[2] = { 256 / (uint64_t)b->nr * (uint64_t)b->rank, 0 };
    uint64_t shape[2] = { 256 / (uint64_t)b->nr, 512 };
    float *buf = calloc((size_t)(shape[0] * shape[1]), sizeof *buf);
    int rc = buf ? shs_comm_create(&comm, b->rank, b->nr, &k_tops, &tc) : SHS_ENOMEM;
    if (rc == SHS_OK)
        rc = shs_state_create(&st);
    if (rc == SHS_OK) {
        shs_tensor_spec s = SHS_TENSOR_SPEC_INIT;
        s.name = "w";
        s.ndim = 2;
        s.shape = shape;
        s.global_shape = g;
        s.global_offset = off;
        s.data = buf;
        rc = shs_state_add_tensor(st, &s);
    }
    shs_config c;
    shs_config_init(&c);
    c.enable_save = 0;
    c.initial_load_in_hf = 1;
    c.initial_load_path = b->dir;
    if (rc == SHS_OK)
        rc = shs_manager_create_comm(&m, &c, st, comm);
    shs_progress p = SHS_PROGRESS_INIT;
    shs_load_result res = SHS_LOAD_RESULT_INIT;
    if (rc == SHS_OK)
        rc = shs_manager_load(&res, m, &p);
    b->rc = rc;
    snprintf(b->msg, sizeof b->msg, "%s", rc < 0 ? shs_last_error() : "");
    b->bytes_read = res.bytes_read;
    for (uint64_t i = 0; rc == SHS_OK && i < shape[0] * shape[1]; i++)
        b->bad += buf[i] != (float)((off[0] * 512 + i) % 251);
    shs_manager_free(m);
    shs_state_free(st);
    shs_comm_free(comm);
    free(buf);
    return NULL;
}

static void test_pread_boxes(void **state)
{
    (void)state;
    char *dir = tu_subdir("big");
    static const uint64_t g[2] = { 256, 512 };
    uint16_t *w = malloc(256 * 512 * sizeof *w);
    assert_non_null(w);
    for (size_t i = 0; i < 256 * 512; i++)
        w[i] = shs_f32_to_bf16((float)(i % 251));
    shs_tensor_view tv = { "w", SHS_BF16, 2, g, w };
    TU_OK(shs_save_file(tu_path(dir, "model.safetensors"), &tv, 1, NULL, 0, NULL));
    free(w);
    g_io = shs__io_posix;
    g_io.mmap = no_mmap;
    g_io.pread = counting_pread;
    for (int nr = 1; nr <= MAXR; nr *= 2) {
        big_rank b[MAXR];
        pthread_t th[MAXR];
        tshared_init(&g_big_sh, nr, 1);
        atomic_store(&g_pread_bytes, 0);
        shs__io_set(&g_io);
        for (int r = 0; r < nr; r++) {
            b[r] = (big_rank){ r, nr, dir, 0, "", 0, 0 };
            assert_int_equal(pthread_create(&th[r], NULL, big_main, &b[r]), 0);
        }
        for (int r = 0; r < nr; r++)
            pthread_join(th[r], NULL);
        shs__io_set(NULL);
        assert_int_equal(tshared_destroy(&g_big_sh), 0);
        uint64_t box = 256 * 512 * 2 / (uint64_t)nr;
        for (int r = 0; r < nr; r++) {
            if (b[r].rc != SHS_OK || b[r].bad)
                fail_msg("%d ranks, rank %d: %d %s, %d wrong", nr, r, b[r].rc, b[r].msg, b[r].bad);
            if (b[r].bytes_read != box)
                fail_msg("%d ranks, rank %d: read %llu bytes, its box is %llu", nr, r,
                         (unsigned long long)b[r].bytes_read, (unsigned long long)box);
        }
        /* what the ranks pread in all: the tensor once, plus the headers
           (each rank reads the header of the file twice: the model, then
           the load) */
        unsigned long long all = atomic_load(&g_pread_bytes);
        print_message("%d rank(s), pread: %llu bytes in all (tensor: %d)\n", nr, all,
                      256 * 512 * 2);
        assert_true(all >= 256 * 512 * 2);
        assert_true(all < 256 * 512 * 2 + (unsigned long long)nr * 1024);
    }
    free(dir);
}

int main(void)
{
    make_refs();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranks),
        cmocka_unit_test(test_pread_boxes),
    };
    return TU_RUN_GROUP(tests, tu_setup_root, tu_teardown_root);
}
