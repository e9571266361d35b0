/*
 * test_abi.c -- a program built against an older header keeps working
 * with this library: its option structs of an older version are read as
 * far as they go (the rest defaults), and its result structs are written
 * only as far as they go.  Each struct is allocated at exactly its old
 * size followed by canary bytes: a read past it fails under ASan, a write
 * past it changes a canary (checked in every build).
 */
#include "testutil.h"

#include "abi/old_structs.h"

#include <stdlib.h>
#include <string.h>

#define CANARY 64

/* `size` zeroed bytes followed by CANARY bytes of 0xA5. */
static void *old_alloc(size_t size)
{
    unsigned char *p = malloc(size + CANARY);
    assert_non_null(p);
    memset(p, 0, size);
    memset(p + size, 0xA5, CANARY);
    return p;
}

static void canary_ok(const void *p, size_t size)
{
    const unsigned char *c = (const unsigned char *)p + size;
    for (size_t i = 0; i < CANARY; i++)
        if (c[i] != 0xA5)
            fail_msg("the library wrote byte %zu past a %zu-byte caller struct", i, size);
}

static char *g_sp;

static int setup(void **state)
{
    if (tu_setup_root(state) < 0)
        return -1;
    g_sp = tu_subdir("abi-sp");
    tu_small s;
    tu_small_make(&s, 2.0f, 1);
    shs_state_set_blob(s.st, "rng", "seed", 4);
    shs_progress p = tu_prog(3);
    int rc = tu_save_once(g_sp, s.st, &p, 0);
    shs_state_free(s.st);
    return rc == SHS_OK ? 0 : -1;
}

static int teardown(void **state)
{
    free(g_sp);
    return tu_teardown_root(state);
}

static void test_open_opts_v1(void **state)
{
    (void)state;
    old_ckpt_open_opts_v1 *o = old_alloc(sizeof *o);
    o->version = 1;
    o->step = 3;
    o->flags = SHS_CHECKPOINT_OPEN_NO_MMAP;
    shs_checkpoint *ck = NULL;
    TU_OK(shs_checkpoint_open(&ck, g_sp, (const shs_checkpoint_open_opts *)(void *)o));
    assert_int_equal(shs_checkpoint_step(ck), 3);
    /* results of version 1, exactly sized */
    shs_chunk_info *ci = old_alloc(sizeof *ci);
    ci->version = 1;
    TU_OK(shs_checkpoint_chunk(ci, ck, 0, 0));
    assert_int_equal(ci->version, 1);
    assert_true(ci->byte_end > ci->byte_begin);
    canary_ok(ci, sizeof *ci);
    shs_blob_info *bi = old_alloc(sizeof *bi);
    bi->version = 1;
    TU_OK(shs_checkpoint_blob(bi, ck, 0));
    assert_string_equal(bi->name, "rng");
    canary_ok(bi, sizeof *bi);
    shs_progress *pr = old_alloc(sizeof *pr);
    pr->version = 1;
    TU_OK(shs_checkpoint_progress(pr, ck));
    assert_int_equal(pr->global_step, 3);
    assert_int_equal(pr->version, 1);
    canary_ok(pr, sizeof *pr);
    /* an unknown version: refused, nothing written */
    ci->version = 99;
    assert_int_equal(shs_checkpoint_chunk(ci, ck, 0, 0), SHS_EINVAL);
    TU_ASSERT_MSG_HAS("shs_chunk_info version 99");
    shs_checkpoint_free(ck);
    canary_ok(o, sizeof *o);
    free(o);
    free(ci);
    free(bi);
    free(pr);
}

static void test_config_v1_v2(void **state)
{
    (void)state;
    size_t sizes[2] = { OLD_CONFIG_V1_SIZE, OLD_CONFIG_V2_SIZE };
    for (unsigned v = 1; v <= 2; v++) {
        shs_config full;
        shs_config_init(&full);
        shs_config *c = old_alloc(sizes[v - 1]);
        memcpy(c, &full, sizes[v - 1]); /* what the old shs_config_init set */
        c->version = v;
        c->save_path = g_sp;
        c->save_interleaved_steps = 1000000;
        c->fsync = 0;
        tu_small s;
        tu_small_make(&s, 0.0f, 1);
        shs_manager *m = NULL;
        TU_OK(shs_manager_create(&m, c, s.st));
        shs_progress *p = old_alloc(sizeof *p);
        p->version = 1;
        shs_load_result *r = old_alloc(sizeof *r);
        r->version = 1;
        TU_OK(shs_manager_load(r, m, p));
        /* the newest step: the fixture's 3, then the one v1 saved */
        assert_int_equal(r->step, 2 + v);
        assert_int_equal(p->global_step, 2 + v);
        canary_ok(r, sizeof *r);
        canary_ok(p, sizeof *p);
        p->global_step = 3 + v;
        TU_OK(shs_manager_save(m, p, 0));
        shs_save_stats *st = old_alloc(sizeof *st);
        st->version = 1;
        TU_OK(shs_manager_last_save(st, m));
        assert_int_equal(st->step, 3 + v);
        canary_ok(st, sizeof *st);
        shs_manager_free(m);
        shs_state_free(s.st);
        canary_ok(c, sizes[v - 1]);
        free(c);
        free(p);
        free(r);
        free(st);
        shs_config_release(&full);
    }
}

static void test_tools_v1(void **state)
{
    (void)state;
    old_merge_opts_v1 *mo = old_alloc(sizeof *mo);
    shs_merge_opts cur = SHS_MERGE_OPTS_INIT;
    memcpy(mo, &cur, sizeof *mo); /* the old INIT */
    mo->version = 1;
    shs_merge_result *mr = old_alloc(sizeof *mr);
    mr->version = 1;
    char *dst = tu_subpath("abi-merged");
    TU_OK(shs_merge(mr, g_sp, dst, (const shs_merge_opts *)(void *)mo));
    assert_true(mr->n_tensors > 0 && mr->files_written > 0);
    canary_ok(mr, sizeof *mr);
    canary_ok(mo, sizeof *mo);
    old_reshard_opts_v1 *ro = old_alloc(sizeof *ro);
    *ro = (old_reshard_opts_v1){ 1, 1, -1, NULL, 0 };
    shs_reshard_result *rr = old_alloc(sizeof *rr);
    rr->version = 1;
    char *rdst = tu_subpath("abi-resharded");
    TU_OK(shs_reshard(rr, g_sp, rdst, NULL, (const shs_reshard_opts *)(void *)ro));
    assert_int_equal(rr->world_size, 1);
    canary_ok(rr, sizeof *rr);
    canary_ok(ro, sizeof *ro);
    free(mo);
    free(mr);
    free(ro);
    free(rr);
    free(dst);
    free(rdst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_opts_v1),
        cmocka_unit_test(test_config_v1_v2),
        cmocka_unit_test(test_tools_v1),
    };
    return TU_RUN_GROUP(tests, setup, teardown);
}
