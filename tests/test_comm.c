/* test_comm.c -- the collective helpers of src/dist/comm.c over a scripted
 * backend: rank 0 of 2 in one process, whose peer (rank 1) always
 * succeeds and holds the bytes "xyz".  The backend logs the collectives
 * rank 0 takes part in, so a test can check that on an error rank 0 still
 * makes the calls that the peer makes (else the peer would wait forever).
 */
#include "testutil.h"
#include "dist/comm.h"

#include <stdlib.h>
#include <string.h>

typedef struct script {
    char log[64]; /* one letter per collective: A allgather, G gatherv, B bcast */
    size_t n;
    int lose_status; /* allgather returns zeros for every rank, own slot too */
} script;

static void note(script *s, char c)
{
    if (s->n + 1 < sizeof s->log) {
        s->log[s->n++] = c;
        s->log[s->n] = '\0';
    }
}

static int sc_barrier(void *ctx)
{
    (void)ctx;
    return SHS_OK;
}
static int sc_bcast(void *ctx, void *b, size_t n, int root)
{
    (void)b;
    (void)n;
    assert_int_equal(root, 0); /* rank 0 sends: nothing comes in */
    note(ctx, 'B');
    return SHS_OK;
}
/* The peer's part: its length (8-byte exchange of the gather) is 3; in an
   agreement (any other size) it reports success (all zeros). */
static int sc_allgather(void *ctx, const void *send, size_t n, void *recv)
{
    script *s = ctx;
    note(s, 'A');
    memset(recv, 0, 2 * n);
    if (!s->lose_status)
        memcpy(recv, send, n);
    if (n == sizeof(uint64_t)) {
        uint64_t peer = 3;
        memcpy((char *)recv + n, &peer, sizeof peer);
    }
    return SHS_OK;
}
static int sc_gatherv(void *ctx, const void *send, const size_t *lens, void *recv, int root)
{
    assert_int_equal(root, 0);
    note(ctx, 'G');
    if (recv) {
        memcpy(recv, send, lens[0]);
        memcpy((char *)recv + lens[0], "xyz", lens[1]);
    }
    return SHS_OK;
}
static int sc_send(void *ctx, const void *b, size_t n, int d, int t)
{
    (void)ctx;
    (void)b;
    (void)n;
    (void)d;
    (void)t;
    return SHS_EUNSUPPORTED;
}
static int sc_recv(void *ctx, void *b, size_t n, int s, int t)
{
    (void)ctx;
    (void)b;
    (void)n;
    (void)s;
    (void)t;
    return SHS_EUNSUPPORTED;
}

static const shs_comm_ops k_ops = { SHS_COMM_OPS_VERSION, sc_barrier, sc_bcast, sc_allgather,
                                    sc_gatherv,           sc_send,    sc_recv,  NULL };

static void test_allgather_bytes(void **state)
{
    (void)state;
    script s = { { 0 }, 0, 0 };
    shs_comm *c = NULL;
    TU_OK(shs_comm_create(&c, 0, 2, &k_ops, &s));
    char *all = NULL;
    size_t *lens = NULL;
    TU_OK(shs__comm_allgather_bytes(c, "ab", 2, &all, &lens));
    assert_int_equal(lens[0], 2);
    assert_int_equal(lens[1], 3);
    assert_memory_equal(all, "abxyz", 5);
    /* the peer's sequence: agree, length exchange, agree, gather (the
       gather's own agreements before each collective that needs memory),
       agree, sizes, agree, bytes */
    assert_string_equal(s.log, "AAAGABAB");
    shs__free(all);
    shs__free(lens);
    shs_comm_free(c);
}

/* Every allocation of rank 0 fails in turn.  Once the gather has happened
   (G), rank 0 must reach the next agreement (A) as the peer does, even
   when its own buffer could not be allocated. */
static void test_allgather_bytes_nomem_agrees(void **state)
{
    (void)state;
    script s;
    shs_comm *c = NULL;
    TU_OK(shs_comm_create(&c, 0, 2, &k_ops, &s));
    tu_failalloc_install();
    int checked = 0;
    for (long n = 1; n < 100; n++) {
        memset(&s, 0, sizeof s);
        char *all = NULL;
        size_t *lens = NULL;
        tu_failalloc_arm(n);
        int rc = shs__comm_allgather_bytes(c, "ab", 2, &all, &lens);
        tu_failalloc_arm(0);
        if (rc == SHS_OK) {
            shs__free(all);
            shs__free(lens);
            break;
        }
        assert_int_equal(rc, SHS_ENOMEM);
        assert_null(all);
        assert_null(lens);
        const char *g = strchr(s.log, 'G');
        if (g) {
            if (!strchr(g, 'A'))
                fail_msg("allocation %ld failed: rank 0 left after the gather without "
                         "agreeing (collectives %s)",
                         n, s.log);
            checked++;
        }
    }
    tu_failalloc_uninstall();
    assert_true(checked > 0);
    assert_int_equal(tu_failalloc_live(), 0);
    shs_comm_free(c);
}

/* A rank whose own step failed never gets SHS_OK back, even if the backend
   loses its status in the exchange. */
static void test_agree_keeps_local_failure(void **state)
{
    (void)state;
    script s = { { 0 }, 0, 1 };
    shs_comm *c = NULL;
    TU_OK(shs_comm_create(&c, 0, 2, &k_ops, &s));
    assert_int_equal(shs__comm_agree(c, SHS_EIO, "disk gone"), SHS_EIO);
    TU_ASSERT_MSG_HAS("disk gone");
    assert_int_equal(shs__comm_agree(c, SHS_OK, NULL), SHS_OK);
    shs_comm_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allgather_bytes),
        cmocka_unit_test(test_allgather_bytes_nomem_agrees),
        cmocka_unit_test(test_agree_keeps_local_failure),
    };
    return TU_RUN_GROUP(tests, NULL, NULL);
}
