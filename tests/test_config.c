/* test_config.c -- checkpoint configuration: defaults, setter, YAML. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/internal.h"

static char *g_dir;

static int setup(void **state)
{
    (void)state;
    g_dir = tu_mkdtemp();
    return g_dir ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tu_rmtree(g_dir);
    free(g_dir);
    g_dir = NULL;
    return 0;
}

static const char *write_yaml(const char *name, const char *text)
{
    const char *p = tu_path(g_dir, name);
    assert_int_equal(tu_write_file(p, text, strlen(text)), 0);
    return p;
}

static void assert_error_contains(const char *needle)
{
    const char *msg = shs_last_error();
    if (!strstr(msg, needle))
        fail_msg("error message '%s' does not contain '%s'", msg, needle);
}

/* Field-by-field equality, strings by content. */
static void assert_config_equal(const shs_config *a, const shs_config *b)
{
    assert_int_equal(a->version, b->version);
    assert_int_equal(a->enable_save, b->enable_save);
    assert_string_equal(a->save_path, b->save_path);
    assert_int_equal(a->save_interleaved_steps, b->save_interleaved_steps);
    assert_int_equal(a->save_max, b->save_max);
    assert_int_equal(a->keep_latest_k, b->keep_latest_k);
    assert_string_equal(a->prefix, b->prefix);
    assert_int_equal(a->no_save_optim, b->no_save_optim);
    assert_int_equal(a->async_save, b->async_save);
    assert_int_equal(a->remove_redundancy, b->remove_redundancy);
    assert_int_equal(a->save_global_layout_cache, b->save_global_layout_cache);
    assert_int_equal(a->enable_first_step_checkpoint, b->enable_first_step_checkpoint);
    assert_int_equal(a->last_save_model_only, b->last_save_model_only);
    assert_int_equal(a->incremental, b->incremental);
    assert_int_equal(a->fsync, b->fsync);
    assert_int_equal(a->load_only, b->load_only);
    assert_string_equal(a->load_path, b->load_path);
    assert_int_equal(a->load_step, b->load_step);
    assert_int_equal(a->no_load_optim, b->no_load_optim);
    assert_int_equal(a->exclude_from_loading, b->exclude_from_loading);
    assert_string_equal(a->initial_load_path, b->initial_load_path);
    assert_int_equal(a->initial_load_model_only, b->initial_load_model_only);
    assert_int_equal(a->load_balanced, b->load_balanced);
    assert_int_equal(a->load_worker_number, b->load_worker_number);
    assert_int_equal(a->strict, b->strict);
}

static void test_defaults(void **state)
{
    (void)state;
    shs_config c;
    memset(&c, 0xAB, sizeof c);
    shs_config_init(&c);
    assert_int_equal(c.version, SHS_CONFIG_VERSION);
    assert_int_equal(c.enable_save, 1);
    assert_string_equal(c.save_path, "");
    assert_int_equal(c.save_interleaved_steps, 1000);
    assert_int_equal(c.save_max, 5);
    assert_int_equal(c.keep_latest_k, 0);
    assert_string_equal(c.prefix, "checkpoint");
    assert_int_equal(c.no_save_optim, 0);
    assert_int_equal(c.async_save, 0);
    assert_int_equal(c.remove_redundancy, 0);
    assert_int_equal(c.save_global_layout_cache, 1);
    assert_int_equal(c.enable_first_step_checkpoint, 0);
    assert_int_equal(c.last_save_model_only, 0);
    assert_int_equal(c.incremental, 0);
    assert_int_equal(c.fsync, 1);
    assert_int_equal(c.load_only, 0);
    assert_string_equal(c.load_path, "");
    assert_int_equal(c.load_step, -1);
    assert_int_equal(c.no_load_optim, 0);
    assert_int_equal(c.exclude_from_loading, 0);
    assert_string_equal(c.initial_load_path, "");
    assert_int_equal(c.initial_load_model_only, 1);
    assert_int_equal(c.load_balanced, 0);
    assert_int_equal(c.load_worker_number, 1);
    assert_int_equal(c.strict, 1);
    assert_null(c.strings);
    /* release of a config that owns nothing, twice, and of NULL */
    shs_config_release(&c);
    shs_config_release(&c);
    shs_config_release(NULL);
    shs_config_init(NULL);
    assert_string_equal(c.prefix, "checkpoint");
}

static void set_ok(shs_config *c, const char *k, const char *v)
{
    int rc = shs_config_set(c, k, v);
    if (rc != SHS_OK)
        fail_msg("set %s=%s: %d %s", k, v, rc, shs_last_error());
}

static void test_set_every_field(void **state)
{
    (void)state;
    shs_config c;
    shs_config_init(&c);
    /* every flag, both ways, flipped from its default */
    static const char *flags[] = {
        "enable_save",
        "no_save_optim",
        "async_save",
        "remove_redundancy",
        "save_global_layout_cache",
        "enable_first_step_checkpoint",
        "last_save_model_only",
        "incremental",
        "fsync",
        "load_only",
        "no_load_optim",
        "initial_load_model_only",
        "load_balanced",
        "strict",
    };
    int *ptrs[] = {
        &c.enable_save,
        &c.no_save_optim,
        &c.async_save,
        &c.remove_redundancy,
        &c.save_global_layout_cache,
        &c.enable_first_step_checkpoint,
        &c.last_save_model_only,
        &c.incremental,
        &c.fsync,
        &c.load_only,
        &c.no_load_optim,
        &c.initial_load_model_only,
        &c.load_balanced,
        &c.strict,
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        int def = *ptrs[i];
        set_ok(&c, flags[i], def ? "false" : "true");
        assert_int_equal(*ptrs[i], !def);
        set_ok(&c, flags[i], def ? "1" : "0");
        assert_int_equal(*ptrs[i], def);
    }
    static const struct {
        const char *v;
        int want;
    } spell[] = {
        { "true", 1 },  { "True", 1 },  { "TRUE", 1 },  { "yes", 1 }, { "Yes", 1 }, { "1", 1 },
        { "false", 0 }, { "False", 0 }, { "FALSE", 0 }, { "no", 0 },  { "NO", 0 },  { "0", 0 },
    };
    for (size_t i = 0; i < sizeof spell / sizeof spell[0]; i++) {
        c.async_save = !spell[i].want;
        set_ok(&c, "async_save", spell[i].v);
        assert_int_equal(c.async_save, spell[i].want);
    }

    set_ok(&c, "save_path", "/ckpt/run1");
    assert_string_equal(c.save_path, "/ckpt/run1");
    set_ok(&c, "prefix", "llama");
    assert_string_equal(c.prefix, "llama");
    set_ok(&c, "load_path", "/ckpt/run0");
    assert_string_equal(c.load_path, "/ckpt/run0");
    set_ok(&c, "initial_load_path", "/hf/base");
    assert_string_equal(c.initial_load_path, "/hf/base");

    set_ok(&c, "save_interleaved_steps", "1");
    assert_int_equal(c.save_interleaved_steps, 1);
    set_ok(&c, "save_interleaved_steps", "9223372036854775807");
    assert_true(c.save_interleaved_steps == INT64_MAX);
    set_ok(&c, "save_max", "0");
    assert_int_equal(c.save_max, 0);
    set_ok(&c, "save_max", "2147483647");
    assert_int_equal(c.save_max, 2147483647);
    set_ok(&c, "keep_latest_k", "3");
    assert_int_equal(c.keep_latest_k, 3);
    set_ok(&c, "load_step", "-1");
    assert_int_equal(c.load_step, -1);
    set_ok(&c, "load_step", "123456789012");
    assert_true(c.load_step == INT64_C(123456789012));
    set_ok(&c, "load_worker_number", "8");
    assert_int_equal(c.load_worker_number, 8);
    set_ok(&c, "load_worker_number", "007");
    assert_int_equal(c.load_worker_number, 7);
    set_ok(&c, "exclude_from_loading", "optimizer,rng");
    assert_int_equal(c.exclude_from_loading, SHS_EXCLUDE_OPTIMIZER | SHS_EXCLUDE_RNG);
    shs_config_release(&c);
    /* owned strings reset to defaults, everything else kept */
    assert_string_equal(c.save_path, "");
    assert_string_equal(c.prefix, "checkpoint");
    assert_string_equal(c.load_path, "");
    assert_string_equal(c.initial_load_path, "");
    assert_null(c.strings);
    assert_int_equal(c.load_worker_number, 7);
    shs_config_release(&c);
}

static void expect_reject(const char *key, const char *value, const char *needle)
{
    shs_config c, before;
    shs_config_init(&c);
    set_ok(&c, "save_path", "/keep");
    before = c;
    int rc = shs_config_set(&c, key, value);
    if (rc != SHS_ECONFIG)
        fail_msg("set %s=%s: expected SHS_ECONFIG, got %d", key, value, rc);
    assert_error_contains(needle);
    assert_config_equal(&c, &before);
    assert_ptr_equal(c.save_path, before.save_path);
    shs_config_release(&c);
}

static void test_rejections(void **state)
{
    (void)state;
    expect_reject("save_max", "abc", "save_max: expected a non-negative integer, got 'abc'");
    expect_reject("save_max", "-1", "save_max: expected a non-negative integer");
    expect_reject("save_max", "5x", "got '5x'");
    expect_reject("save_max", "", "save_max: expected a non-negative integer, got ''");
    expect_reject("save_max", " 5", "got ' 5'");
    expect_reject("save_max", "+5", "got '+5'");
    expect_reject("save_max", "-", "got '-'");
    expect_reject("save_max", "2147483648", "out of range");
    expect_reject("save_max", "99999999999999999999", "out of range");
    expect_reject("save_interleaved_steps", "99999999999999999999", "save_interleaved_steps");
    expect_reject("save_interleaved_steps", "9223372036854775808", "out of range");
    expect_reject("save_interleaved_steps", "0",
                  "save_interleaved_steps: expected a positive integer, got '0'");
    expect_reject("save_interleaved_steps", "-5", "got '-5'");
    expect_reject("keep_latest_k", "-1", "keep_latest_k");
    expect_reject("load_worker_number", "0", "load_worker_number");
    expect_reject("load_step", "-2", "load_step: expected an integer >= -1");
    expect_reject("load_step", "1.5", "got '1.5'");
    expect_reject("load_step", "0x10", "got '0x10'");
    expect_reject("async_save", "maybe", "async_save: expected a boolean");
    expect_reject("async_save", "", "async_save");
    expect_reject("async_save", "2", "got '2'");
    expect_reject("async_save", "truee", "got 'truee'");
    expect_reject("async_save", "on", "got 'on'");
    expect_reject("foo", "1", "unknown checkpoint field 'foo'");
    expect_reject("Save_Max", "1", "unknown checkpoint field 'Save_Max'");
    expect_reject("checkpoint_path", "/x", "unknown checkpoint field");
    expect_reject("checkpoint_folder", "/x", "unknown checkpoint field 'checkpoint_folder'");
    expect_reject("exclude_from_loading", "optimizer,weights",
                  "exclude_from_loading: unknown item 'weights'");
    expect_reject("exclude_from_loading", "Optimizer", "unknown item 'Optimizer'");
    expect_reject("exclude_from_loading", "[optimizer", "exclude_from_loading");

    shs_config c;
    shs_config_init(&c);
    assert_int_equal(shs_config_set(&c, NULL, "1"), SHS_EINVAL);
    assert_int_equal(shs_config_set(&c, "save_max", NULL), SHS_EINVAL);
    assert_int_equal(shs_config_set(NULL, "save_max", "1"), SHS_EINVAL);
}

/* torchtitan's names for our fields */
static void test_aliases(void **state)
{
    (void)state;
    shs_config c;
    shs_config_init(&c);
    /* torchtitan's enable is a field of its own: false stops loading too */
    assert_int_equal(c.enable, 1);
    set_ok(&c, "enable", "false");
    assert_int_equal(c.enable, 0);
    assert_int_equal(c.enable_save, 1);
    set_ok(&c, "enable", "true");
    assert_int_equal(c.enable, 1);
    set_ok(&c, "folder", "/tt/ckpt");
    assert_string_equal(c.save_path, "/tt/ckpt");
    set_ok(&c, "interval", "250");
    assert_int_equal(c.save_interleaved_steps, 250);
    set_ok(&c, "async_mode", "async");
    assert_int_equal(c.async_save, 1);
    set_ok(&c, "async_mode", "disabled");
    assert_int_equal(c.async_save, 0);
    set_ok(&c, "async_mode", "async_with_pinned_mem");
    assert_int_equal(c.async_save, 1);
    set_ok(&c, "keep_latest_k", "3");
    assert_int_equal(c.keep_latest_k, 3);
    /* export at train end (docs/merge.md) */
    set_ok(&c, "export_dtype", "float32");
    assert_string_equal(c.export_dtype, "float32");
    set_ok(&c, "export_dtype", "BFloat16");
    assert_string_equal(c.export_dtype, "BFloat16");
    set_ok(&c, "export_dtype", "");
    assert_string_equal(c.export_dtype, "");
    set_ok(&c, "initial_load_in_hf", "false");
    set_ok(&c, "last_save_in_hf", "no");
    assert_int_equal(c.last_save_in_hf, 0);
    set_ok(&c, "last_save_in_hf", "true");
    assert_int_equal(c.last_save_in_hf, 1);
    shs_config_release(&c);

    /* errors name the key as written */
    expect_reject("interval", "0", "interval: expected a positive integer, got '0'");
    expect_reject("enable", "sometimes", "enable: expected a boolean");
    expect_reject("async_mode", "Async",
                  "async_mode: expected disabled, async or "
                  "async_with_pinned_mem, got 'Async'");
    expect_reject("async_mode", "true", "async_mode");
    expect_reject("export_dtype", "bfloat17", "export_dtype: unknown dtype 'bfloat17'");
    expect_reject("export_dtype", "I32", "export_dtype: unknown dtype 'I32'");
    expect_reject("initial_load_in_hf", "maybe", "initial_load_in_hf: expected a boolean");
    expect_reject("last_save_in_hf", "perhaps", "last_save_in_hf: expected a boolean");
}

/* An unknown key names the closest known one. */
static void test_suggestions(void **state)
{
    (void)state;
    expect_reject("save_pth", "/x",
                  "unknown checkpoint field 'save_pth' (did you mean 'save_path'?)");
    expect_reject("savemax", "1", "did you mean 'save_max'?");
    expect_reject("keep_last_k", "1", "did you mean 'keep_latest_k'?");
    expect_reject("asyncmode", "async", "did you mean 'async_mode'?");
    expect_reject("intervall", "5", "did you mean 'interval'?");
    expect_reject("save_checkpoint_steps", "5", "did you mean 'save_interleaved_steps'?");
    expect_reject("keep_checkpoint_max", "5", "did you mean 'save_max'?");
    expect_reject("load_checkpoint", "/x", "did you mean 'load_path'?");
    /* the seeds' names (000, 004): MindSpore's loader arguments */
    expect_reject("strict_load", "false", "did you mean 'strict'?");
    expect_reject("checkpoint_path", "/x", "did you mean 'load_path'?");
    expect_reject("ckpt_file_name", "/x", "did you mean 'load_path'?");
    expect_reject("reshard_worker_num", "4", "did you mean 'load_worker_number'?");
    expect_reject("max_process_num", "4", "did you mean 'load_worker_number'?");
    expect_reject("save_dir", "/x", "did you mean 'save_path'?");
    /* nothing close: no suggestion */
    shs_config c;
    shs_config_init(&c);
    assert_int_equal(shs_config_set(&c, "learning_rate", "1"), SHS_ECONFIG);
    assert_null(strstr(shs_last_error(), "did you mean"));
    char longkey[300];
    memset(longkey, 'a', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    assert_int_equal(shs_config_set(&c, longkey, "1"), SHS_ECONFIG);
    assert_null(strstr(shs_last_error(), "did you mean"));
    shs_config_release(&c);
}

static void test_exclude_forms(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        unsigned want;
    } cases[] = {
        { "", 0 },
        { "[]", 0 },
        { " [ ] ", 0 },
        { "optimizer", SHS_EXCLUDE_OPTIMIZER },
        { "optimizer,rng", SHS_EXCLUDE_OPTIMIZER | SHS_EXCLUDE_RNG },
        { "optimizer, rng", SHS_EXCLUDE_OPTIMIZER | SHS_EXCLUDE_RNG },
        { "optimizer rng", SHS_EXCLUDE_OPTIMIZER | SHS_EXCLUDE_RNG },
        { "[optimizer, rng]", SHS_EXCLUDE_OPTIMIZER | SHS_EXCLUDE_RNG },
        { "['optimizer', \"lr_scheduler\"]", SHS_EXCLUDE_OPTIMIZER | SHS_EXCLUDE_LR_SCHEDULER },
        { "dataloader,,train_state,", SHS_EXCLUDE_DATALOADER | SHS_EXCLUDE_TRAIN_STATE },
        { "rng,rng", SHS_EXCLUDE_RNG },
        { "optimizer,lr_scheduler,dataloader,train_state,rng",
          SHS_EXCLUDE_OPTIMIZER | SHS_EXCLUDE_LR_SCHEDULER | SHS_EXCLUDE_DATALOADER |
              SHS_EXCLUDE_TRAIN_STATE | SHS_EXCLUDE_RNG },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        shs_config c;
        shs_config_init(&c);
        c.exclude_from_loading = SHS_EXCLUDE_DATALOADER | 0x100;
        set_ok(&c, "exclude_from_loading", cases[i].text);
        if (c.exclude_from_loading != cases[i].want)
            fail_msg("'%s': got %#x want %#x", cases[i].text, c.exclude_from_loading,
                     cases[i].want);
        shs_config_release(&c);
    }
}

static void test_string_ownership(void **state)
{
    (void)state;
    tu_failalloc_install();
    long live0 = tu_failalloc_live();
    shs_config c;
    shs_config_init(&c);

    char buf[64];
    strcpy(buf, "/first");
    set_ok(&c, "save_path", buf);
    strcpy(buf, "XXXXXX");
    assert_string_equal(c.save_path, "/first"); /* copied, not aliased */
    long live1 = tu_failalloc_live();
    for (int i = 0; i < 100; i++) {
        snprintf(buf, sizeof buf, "/path/%d", i);
        set_ok(&c, "save_path", buf);
        set_ok(&c, "prefix", buf);
    }
    assert_string_equal(c.save_path, "/path/99");
    assert_string_equal(c.prefix, "/path/99");
    /* replaced strings were freed: one owned string per field */
    assert_int_equal(tu_failalloc_live(), live1 + 1);

    /* a string assigned directly is the caller's: never freed or reset */
    static const char mine[] = "/caller/owned";
    c.load_path = mine;
    set_ok(&c, "prefix", "p2");

    /* OOM in the setter leaves the field and ownership intact */
    tu_failalloc_arm(1);
    assert_int_equal(shs_config_set(&c, "save_path", "/oom"), SHS_ENOMEM);
    tu_failalloc_arm(0);
    assert_string_equal(c.save_path, "/path/99");

    shs_config_release(&c);
    assert_int_equal(tu_failalloc_live(), live0);
    assert_string_equal(c.save_path, "");
    assert_string_equal(c.prefix, "checkpoint");
    assert_ptr_equal(c.load_path, mine);
    shs_config_release(&c);
    assert_int_equal(tu_failalloc_live(), live0);

    /* set after release works and is again freed by release */
    set_ok(&c, "initial_load_path", "/again");
    shs_config_release(&c);
    assert_int_equal(tu_failalloc_live(), live0);
    tu_failalloc_uninstall();
}

static const char SEED_YAML[] = "model:\n"
                                "  model_type: llama2\n"
                                "checkpoint:\n"
                                "  enable_save: True\n"
                                "  save_path: \"./output/ckpt\"\n"
                                "  save_interleaved_steps: 1000   # comment\n"
                                "  save_max: 5\n"
                                "  prefix: \"checkpoint\"\n"
                                "  no_save_optim: False\n"
                                "  async_save: False\n"
                                "  remove_redundancy: False\n"
                                "  save_global_layout_cache: True\n"
                                "  load_path: \"\"\n"
                                "  no_load_optim: False\n"
                                "  exclude_from_loading: [optimizer, rng]\n"
                                "train:\n"
                                "  epochs: 10\n";

static void test_yaml_seed(void **state)
{
    (void)state;
    const char *p = write_yaml("seed.yaml", SEED_YAML);
    shs_config c;
    shs_config_init(&c);
    /* non-defaults, to see the file overwrite them */
    c.enable_save = 0;
    c.save_max = 9;
    c.async_save = 1;
    c.save_global_layout_cache = 0;
    c.save_interleaved_steps = 7;
    c.load_path = "/somewhere";
    int rc = shs_config_load_yaml(&c, p);
    if (rc != SHS_OK)
        fail_msg("load: %d %s", rc, shs_last_error());
    assert_int_equal(c.enable_save, 1);
    assert_string_equal(c.save_path, "./output/ckpt");
    assert_int_equal(c.save_interleaved_steps, 1000);
    assert_int_equal(c.save_max, 5);
    assert_string_equal(c.prefix, "checkpoint");
    assert_int_equal(c.no_save_optim, 0);
    assert_int_equal(c.async_save, 0);
    assert_int_equal(c.remove_redundancy, 0);
    assert_int_equal(c.save_global_layout_cache, 1);
    assert_string_equal(c.load_path, "");
    assert_int_equal(c.no_load_optim, 0);
    assert_int_equal(c.exclude_from_loading, SHS_EXCLUDE_OPTIMIZER | SHS_EXCLUDE_RNG);
    /* untouched fields keep their values */
    assert_int_equal(c.load_step, -1);
    assert_int_equal(c.fsync, 1);
    assert_int_equal(c.strict, 1);
    shs_config_release(&c);
    assert_string_equal(c.save_path, "");
}

static void test_yaml_forms(void **state)
{
    (void)state;
    const char *p = write_yaml("forms.yaml", "# leading comment\n"
                                             "train: {epochs: 3, lr: [1, 2]}\n"
                                             "checkpoint:\n"
                                             "  save_path: '/single/quoted'\n"
                                             "  prefix: plain-prefix\n"
                                             "  load_path:\n"
                                             "  initial_load_path: ~\n"
                                             "  save_max: \"7\"\n"
                                             "  keep_latest_k: 2\n"
                                             "  load_step: -1\n"
                                             "  async_save: yes\n"
                                             "  fsync: 0\n"
                                             "  incremental: TRUE\n"
                                             "  exclude_from_loading:\n"
                                             "    - lr_scheduler\n"
                                             "    - 'dataloader'\n"
                                             "    - train_state\n"
                                             "other:\n"
                                             "  - &anchor {a: 1}\n"
                                             "  - *anchor\n");
    shs_config c;
    shs_config_init(&c);
    c.load_path = "/before";
    c.initial_load_path = "/before2";
    int rc = shs_config_load_yaml(&c, p);
    if (rc != SHS_OK)
        fail_msg("load: %d %s", rc, shs_last_error());
    assert_string_equal(c.save_path, "/single/quoted");
    assert_string_equal(c.prefix, "plain-prefix");
    assert_string_equal(c.load_path, "");
    assert_string_equal(c.initial_load_path, "");
    assert_int_equal(c.save_max, 7);
    assert_int_equal(c.keep_latest_k, 2);
    assert_int_equal(c.async_save, 1);
    assert_int_equal(c.fsync, 0);
    assert_int_equal(c.incremental, 1);
    assert_int_equal(c.exclude_from_loading,
                     SHS_EXCLUDE_LR_SCHEDULER | SHS_EXCLUDE_DATALOADER | SHS_EXCLUDE_TRAIN_STATE);
    shs_config_release(&c);

    /* flow mapping for the section, empty flow list, quoted "null" */
    p = write_yaml("flow.yaml", "checkpoint: {save_path: \"null\", exclude_from_loading: []}\n");
    shs_config_init(&c);
    c.exclude_from_loading = SHS_EXCLUDE_RNG;
    assert_int_equal(shs_config_load_yaml(&c, p), SHS_OK);
    assert_string_equal(c.save_path, "null");
    assert_int_equal(c.exclude_from_loading, 0);
    shs_config_release(&c);
}

static void test_yaml_aliases(void **state)
{
    (void)state;
    const char *p = write_yaml("tt.yaml", "checkpoint:\n"
                                          "  enable: true\n"
                                          "  folder: ./outputs/checkpoint\n"
                                          "  interval: 500\n"
                                          "  async_mode: async_with_pinned_mem\n"
                                          "  keep_latest_k: 4\n"
                                          "  export_dtype: float32\n"
                                          "  initial_load_in_hf: false\n"
                                          "  last_save_in_hf: false\n");
    shs_config c;
    shs_config_init(&c);
    c.enable = 0;
    int rc = shs_config_load_yaml(&c, p);
    if (rc != SHS_OK)
        fail_msg("load: %d %s", rc, shs_last_error());
    assert_int_equal(c.enable, 1);
    assert_string_equal(c.save_path, "./outputs/checkpoint");
    assert_int_equal(c.save_interleaved_steps, 500);
    assert_int_equal(c.async_save, 1);
    assert_int_equal(c.keep_latest_k, 4);
    assert_string_equal(c.export_dtype, "float32");
    assert_int_equal(c.last_save_in_hf, 0);
    shs_config_release(&c);
}

static void test_yaml_mindspore(void **state)
{
    (void)state;
    /* the MindSpore Transformers layout: top-level resume keys and a
       CheckpointMonitor among other callbacks, its `type` not first */
    const char *p = write_yaml("ms.yaml", "model:\n  model_type: llama2\n"
                                          "resume_training: True\n"
                                          "load_checkpoint: \"./output/checkpoint\"\n"
                                          "callbacks:\n"
                                          "  - type: MFLossMonitor\n"
                                          "    per_print_times: 1\n"
                                          "  - prefix: \"llama2_7b\"\n"
                                          "    save_checkpoint_steps: 500\n"
                                          "    keep_checkpoint_max: 3\n"
                                          "    type: CheckpointMonitor\n"
                                          "    async_checkpoint: False\n"
                                          "    checkpoint_format: safetensors\n"
                                          "  - type: ObsMonitor\n"
                                          "    anything: {a: [1, 2]}\n"
                                          "  - just a string\n");
    shs_config c;
    shs_config_init(&c);
    c.async_save = 1;
    int rc = shs_config_load_yaml(&c, p);
    if (rc != SHS_OK)
        fail_msg("load: %d %s", rc, shs_last_error());
    assert_string_equal(c.load_path, "./output/checkpoint");
    assert_string_equal(c.initial_load_path, "");
    assert_int_equal(c.save_interleaved_steps, 500);
    assert_int_equal(c.save_max, 3);
    assert_string_equal(c.prefix, "llama2_7b");
    assert_int_equal(c.async_save, 0);
    shs_config_release(&c);

    /* resume_training false (or absent): load_checkpoint is a start from
       pretrained weights, taken only when save_path holds nothing */
    static const char *const starts[] = {
        "load_checkpoint: /pretrained\nresume_training: False\n",
        "resume_training: false\nload_checkpoint: /pretrained\n",
        "load_checkpoint: /pretrained\n",
        "load_checkpoint: /pretrained\nresume_training: ~\n",
    };
    for (size_t i = 0; i < sizeof starts / sizeof starts[0]; i++) {
        p = write_yaml("ms2.yaml", starts[i]);
        shs_config_init(&c);
        c.initial_load_model_only = 0;
        rc = shs_config_load_yaml(&c, p);
        if (rc != SHS_OK)
            fail_msg("%zu: %d %s", i, rc, shs_last_error());
        assert_string_equal(c.load_path, "");
        assert_string_equal(c.initial_load_path, "/pretrained");
        assert_int_equal(c.initial_load_model_only, 1);
        shs_config_release(&c);
    }
    /* ... unless the checkpoint section says otherwise */
    p = write_yaml("ms3.yaml", "load_checkpoint: /pre\n"
                               "checkpoint:\n  initial_load_model_only: false\n  save_path: /s\n");
    shs_config_init(&c);
    assert_int_equal(shs_config_load_yaml(&c, p), SHS_OK);
    assert_string_equal(c.initial_load_path, "/pre");
    assert_int_equal(c.initial_load_model_only, 0);
    shs_config_release(&c);

    /* resume_training alone: auto-resume is what the manager always does;
       an empty load_checkpoint is no path */
    p = write_yaml("ms4.yaml", "resume_training: true\nload_checkpoint: ''\n"
                               "callbacks: []\n");
    shs_config init;
    shs_config_init(&init);
    shs_config_init(&c);
    assert_int_equal(shs_config_load_yaml(&c, p), SHS_OK);
    assert_config_equal(&c, &init);
    shs_config_release(&c);

    /* the other CheckpointMonitor keys we read */
    p = write_yaml("ms5.yaml",
                   "callbacks:\n"
                   "  - {type: CheckpointMonitor, directory: /ms/out, remove_redundancy: true,"
                   " checkpoint_format: ~}\n");
    shs_config_init(&c);
    assert_int_equal(shs_config_load_yaml(&c, p), SHS_OK);
    assert_string_equal(c.save_path, "/ms/out");
    assert_int_equal(c.remove_redundancy, 1);
    shs_config_release(&c);
}

/* ---- the program's keys (shs_config_load_yaml_ex) ---- */

typedef struct seen_keys {
    char log[2048]; /* "section.key=value;" for each key offered */
    char notes[2048];
    const char *refuse; /* "section.key" refused with a reason */
} seen_keys;

static int record_key(void *ctx, const char *section, const char *key, const char *value,
                      size_t line, char *why, size_t why_cap)
{
    assert_true(line > 0);
    seen_keys *k = ctx;
    size_t at = strlen(k->log);
    snprintf(k->log + at, sizeof k->log - at, "%s.%s=%s;", section, key, value ? value : "(nil)");
    char full[256];
    snprintf(full, sizeof full, "%s.%s", section, key);
    if (k->refuse && !strcmp(full, k->refuse)) {
        snprintf(why, why_cap, "the test refuses it");
        return 0;
    }
    return 1;
}

static void record_note(void *ctx, const char *msg)
{
    seen_keys *k = ctx;
    size_t at = strlen(k->notes);
    snprintf(k->notes + at, sizeof k->notes - at, "%s|", msg);
}

/* seed 002's resume_llama2.yaml (tests/fixtures/seeds/resume_llama2.yaml) */
#define SEED_002                                                                                   \
    "model:\n"                                                                                     \
    "  model_type: llama2\n"                                                                       \
    "  model_name: llama2_7b\n"                                                                    \
    "train:\n"                                                                                     \
    "  epochs: 10\n"                                                                               \
    "  batch_size: 8\n"                                                                            \
    "  save_checkpoint_steps: 500\n"                                                               \
    "  keep_checkpoint_max: 5\n"                                                                   \
    "  integrated_save: True\n"                                                                    \
    "  async_save: True\n"                                                                         \
    "callbacks:\n"                                                                                 \
    "  - type: CheckpointMonitor\n"                                                                \
    "    prefix: \"llama2_7b_resume\"\n"                                                           \
    "    save_dir: \"./output/checkpoint\"\n"                                                      \
    "resume_training: True\n"                                                                      \
    "load_checkpoint: \"./output/checkpoint\"\n"

static void test_yaml_seed_002(void **state)
{
    (void)state;
    const char *p = write_yaml("resume_llama2.yaml", SEED_002);
    /* the plain call applies the checkpoint keys and leaves the rest */
    shs_config c;
    shs_config_init(&c);
    int rc = shs_config_load_yaml(&c, p);
    if (rc != SHS_OK)
        fail_msg("load: %d %s", rc, shs_last_error());
    assert_int_equal(c.save_interleaved_steps, 500);
    assert_int_equal(c.save_max, 5);
    assert_int_equal(c.async_save, 1);
    assert_string_equal(c.prefix, "llama2_7b_resume");
    assert_string_equal(c.save_path, "./output/checkpoint");
    assert_string_equal(c.load_path, "./output/checkpoint");
    shs_config_release(&c);

    /* with the program's part: every other key is offered, the note on
       integrated_save delivered */
    seen_keys k = { "", "", NULL };
    shs_yaml_opts o = SHS_YAML_OPTS_INIT;
    o.program_key = record_key;
    o.note = record_note;
    o.ctx = &k;
    shs_config_init(&c);
    rc = shs_config_load_yaml_ex(&c, p, &o);
    if (rc != SHS_OK)
        fail_msg("load_ex: %d %s", rc, shs_last_error());
    assert_string_equal(k.log, "model.model_type=llama2;model.model_name=llama2_7b;"
                               "train.epochs=10;train.batch_size=8;");
    assert_non_null(strstr(k.notes, "resume_llama2.yaml:9: train: integrated_save: true"));
    assert_int_equal(c.save_interleaved_steps, 500);
    shs_config_release(&c);

    /* a key the program refuses fails the load, naming it; nothing applied */
    k = (seen_keys){ "", "", "train.epochs" };
    shs_config_init(&c);
    assert_int_equal(shs_config_load_yaml_ex(&c, p, &o), SHS_ECONFIG);
    assert_error_contains("resume_llama2.yaml:5: train: epochs: not a checkpoint setting, and "
                          "this program does not read it: the test refuses it");
    assert_int_equal(c.save_interleaved_steps, 1000);
    k = (seen_keys){ "", "", "model.model_name" };
    assert_int_equal(shs_config_load_yaml_ex(&c, p, &o), SHS_ECONFIG);
    assert_error_contains("resume_llama2.yaml:3: model: model_name: not read by this program: "
                          "the test refuses it");
    shs_config_release(&c);
}

static void test_yaml_program_keys(void **state)
{
    (void)state;
    seen_keys k = { "", "", NULL };
    shs_yaml_opts o = SHS_YAML_OPTS_INIT;
    o.program_key = record_key;
    o.ctx = &k;
    shs_config c;
    /* other top-level keys, lists and mappings (value NULL), other
       callbacks, flow style; checkpoint fields under train: apply */
    const char *p = write_yaml("prog.yaml", "runner_config: {epochs: 2, sink_mode: true}\n"
                                            "seed: 42\n"
                                            "train: {lr: [1, 2], save_max: 3, interval: 7}\n"
                                            "model:\n  arch: {type: llama}\n"
                                            "callbacks:\n  - type: MFLossMonitor\n"
                                            "    per_print_times: 1\n  - SomeCallback\n"
                                            "  - {per_print_times: 2}\n");
    shs_config_init(&c);
    int rc = shs_config_load_yaml_ex(&c, p, &o);
    if (rc != SHS_OK)
        fail_msg("load_ex: %d %s", rc, shs_last_error());
    /* only MindSpore's checkpoint keys of train: are read: a program's
       key that shares a field's name stays the program's */
    assert_string_equal(k.log, ".runner_config=(nil);.seed=42;train.lr=(nil);train.save_max=3;"
                               "train.interval=7;model.arch=(nil);"
                               "callbacks.MFLossMonitor=(nil);callbacks.SomeCallback=(nil);"
                               "callbacks.(no type)=(nil);");
    assert_int_equal(c.save_max, 5);
    assert_int_equal(c.save_interleaved_steps, 1000);
    shs_config_release(&c);

    /* refusals name the section, with a "did you mean" for train: typos */
    static const struct {
        const char *refuse, *name, *text, *needle;
    } bad[] = {
        { "train.save_checkpoint_step", "typo.yaml", "train:\n  save_checkpoint_step: 5\n",
          "typo.yaml:2: train: save_checkpoint_step: not a checkpoint setting (did you mean "
          "'save_checkpoint_steps'?)" },
        { "callbacks.MFLossMonitor", "cb.yaml", "callbacks:\n  - type: MFLossMonitor\n",
          "cb.yaml:2: callbacks: an entry of type 'MFLossMonitor' is not read" },
        { ".context", "top.yaml", "context:\n  mode: 0\n",
          "top.yaml:1: context: not read by this program" },
        /* one field once per file, under train: or checkpoint: */
        { NULL, "dup.yaml", "train:\n  async_save: true\ncheckpoint:\n  async_save: false\n",
          "dup.yaml:4: duplicate checkpoint field 'async_save'" },
        { NULL, "dup2.yaml",
          "train:\n  integrated_save: true\n"
          "callbacks:\n  - {type: CheckpointMonitor, integrated_save: no}\n",
          "duplicate checkpoint field 'integrated_save'" },
        { NULL, "dup3.yaml", "train: {}\ntrain: {}\n", "dup3.yaml:2: duplicate key 'train'" },
        { NULL, "bad.yaml", "train:\n  integrated_save: [1]\n",
          "train: integrated_save: expected a boolean" },
        { NULL, "alias.yaml", "x: &a 1\ntrain:\n  epochs: *a\n",
          "alias.yaml:3: epochs: aliases are not supported" },
        { NULL, "cplx.yaml", "? [a]\n: 1\n", "keys of 'the top level' must be plain names" },
    };
    shs_config_init(&c);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        k = (seen_keys){ "", "", bad[i].refuse };
        p = write_yaml(bad[i].name, bad[i].text);
        assert_int_equal(shs_config_load_yaml_ex(&c, p, &o), SHS_ECONFIG);
        assert_error_contains(bad[i].needle);
    }
    /* without program_key the same files are read as before */
    assert_int_equal(shs_config_load_yaml(&c, p), SHS_OK);
    p = write_yaml("alias.yaml", "x: &a 1\ntrain:\n  epochs: *a\n");
    assert_int_equal(shs_config_load_yaml(&c, p), SHS_OK);
    /* a wrong options version */
    o.version = 0;
    assert_int_equal(shs_config_load_yaml_ex(&c, p, &o), SHS_EINVAL);
    assert_error_contains("shs_config_load_yaml_ex");
    shs_config_release(&c);
}

static void test_yaml_no_section(void **state)
{
    (void)state;
    static const char *texts[] = {
        "model:\n  model_type: llama2\ntrain:\n  epochs: 1\n",
        "",
        "# only a comment\n",
        "- a\n- b\n",
        "just a scalar\n",
        "checkpoint:\n", /* null section: nothing to apply */
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        const char *p = write_yaml("nosec.yaml", texts[i]);
        shs_config c, before;
        shs_config_init(&c);
        set_ok(&c, "save_path", "/kept");
        c.save_max = 42;
        before = c;
        int rc = shs_config_load_yaml(&c, p);
        if (rc != SHS_OK)
            fail_msg("text %zu: %d %s", i, rc, shs_last_error());
        assert_config_equal(&c, &before);
        assert_ptr_equal(c.save_path, before.save_path);
        shs_config_release(&c);
    }
}

/* Loading `text` fails with `status`, a message containing each needle,
   and a config exactly as before (same pointers, same owned list). */
static void expect_yaml_error(const char *text, int status, const char *needle1,
                              const char *needle2)
{
    const char *p = write_yaml("bad.yaml", text);
    shs_config c, before;
    shs_config_init(&c);
    set_ok(&c, "save_path", "/kept");
    set_ok(&c, "prefix", "keptprefix");
    c.save_max = 42;
    c.exclude_from_loading = SHS_EXCLUDE_DATALOADER;
    before = c;
    int rc = shs_config_load_yaml(&c, p);
    if (rc != status)
        fail_msg("expected %d, got %d (%s) for:\n%s", status, rc, shs_last_error(), text);
    if (needle1)
        assert_error_contains(needle1);
    if (needle2)
        assert_error_contains(needle2);
    assert_config_equal(&c, &before);
    assert_ptr_equal(c.save_path, before.save_path);
    assert_ptr_equal(c.prefix, before.prefix);
    assert_ptr_equal(c.strings, before.strings);
    shs_config_release(&c);
}

static void test_yaml_errors(void **state)
{
    (void)state;
    /* syntax error: unclosed flow sequence on line 4 */
    expect_yaml_error("checkpoint:\n"
                      "  save_max: 3\n"
                      "  prefix: x\n"
                      "  exclude_from_loading: [optimizer, rng\n"
                      "train:\n"
                      "  epochs: 1\n",
                      SHS_ECONFIG, "bad.yaml:", "YAML syntax error");
    /* syntax error with a precise line: bad indentation on line 3 */
    expect_yaml_error("checkpoint:\n"
                      "  save_max: 3\n"
                      " prefix: x\n",
                      SHS_ECONFIG, "bad.yaml:3:", "YAML syntax error");
    expect_yaml_error("checkpoint:\n"
                      "  save_max: \"unterminated\n",
                      SHS_ECONFIG, "bad.yaml:", "YAML syntax error");
    /* unknown key with line; valid fields before it not applied */
    expect_yaml_error("model:\n  x: 1\n"
                      "checkpoint:\n"
                      "  save_max: 3\n"
                      "  save_pth: /x\n",
                      SHS_ECONFIG, "bad.yaml:5:", "unknown checkpoint field 'save_pth'");
    expect_yaml_error("checkpoint:\n"
                      "  save_max: 3\n"
                      "  prefix: new\n"
                      "  save_max: 4\n",
                      SHS_ECONFIG, "bad.yaml:4:", "duplicate checkpoint field 'save_max'");
    expect_yaml_error("checkpoint:\n  save_max: 3\ncheckpoint:\n  save_max: 4\n", SHS_ECONFIG,
                      "duplicate key 'checkpoint'", NULL);
    expect_yaml_error("checkpoint:\n"
                      "  save_path: /new\n"
                      "  async_save:\n"
                      "    enabled: true\n",
                      SHS_ECONFIG, "async_save", "nested mapping");
    expect_yaml_error("checkpoint:\n  save_max: {a: 1}\n", SHS_ECONFIG, "save_max",
                      "nested mapping");
    expect_yaml_error("checkpoint:\n  save_max: [1, 2]\n", SHS_ECONFIG, "save_max", "list");
    expect_yaml_error("checkpoint:\n  exclude_from_loading: [[optimizer]]\n", SHS_ECONFIG,
                      "exclude_from_loading", NULL);
    expect_yaml_error("checkpoint:\n  exclude_from_loading: [optimizer, weights]\n", SHS_ECONFIG,
                      "bad.yaml:2:", "unknown item 'weights'");
    /* aliases inside the section */
    expect_yaml_error("defaults: &d /base\n"
                      "checkpoint:\n"
                      "  save_path: *d\n",
                      SHS_ECONFIG, "aliases are not supported", "bad.yaml:3");
    expect_yaml_error("base: &b {save_max: 1}\ncheckpoint: *b\n", SHS_ECONFIG,
                      "aliases are not supported", NULL);
    expect_yaml_error("x: &x rng\ncheckpoint:\n  exclude_from_loading: [*x]\n", SHS_ECONFIG,
                      "aliases are not supported", NULL);
    expect_yaml_error("x: &k save_max\ncheckpoint:\n  *k : 3\n", SHS_ECONFIG,
                      "aliases are not supported", NULL);
    /* checkpoint of the wrong shape */
    expect_yaml_error("checkpoint:\n  - save_max: 3\n", SHS_ECONFIG,
                      "'checkpoint' must be a mapping", NULL);
    expect_yaml_error("checkpoint: yes\n", SHS_ECONFIG, "'checkpoint' must be a mapping", NULL);
    /* bad values, with file:line and the field */
    expect_yaml_error("checkpoint:\n  save_path: /new\n  save_max: abc\n", SHS_ECONFIG,
                      "bad.yaml:3: save_max: expected a non-negative "
                      "integer, got 'abc'",
                      NULL);
    expect_yaml_error("checkpoint:\n  save_max:\n", SHS_ECONFIG, "bad.yaml:2", "save_max");
    expect_yaml_error("checkpoint:\n  async_save: ~\n", SHS_ECONFIG, "async_save", NULL);
    expect_yaml_error("checkpoint:\n  async_save: maybe\n", SHS_ECONFIG,
                      "async_save: expected a boolean", "'maybe'");
    expect_yaml_error("checkpoint:\n  save_path: \"a\\0b\"\n", SHS_ECONFIG, "NUL", NULL);
    expect_yaml_error("checkpoint:\n  save_max: 1\n---\ncheckpoint:\n  save_max: 2\n", SHS_ECONFIG,
                      "more than one YAML document", NULL);

    /* suggestions in the YAML loader too */
    expect_yaml_error("checkpoint:\n  save_path: /x\n  keep_latest: 2\n", SHS_ECONFIG,
                      "bad.yaml:3: unknown checkpoint field 'keep_latest'",
                      "did you mean 'keep_latest_k'?");
    expect_yaml_error("checkpoint:\n  save_checkpoint_steps: 5\n", SHS_ECONFIG,
                      "bad.yaml:2:", "did you mean 'save_interleaved_steps'?");
    /* aliases: one field set twice under two names */
    expect_yaml_error("checkpoint:\n  save_path: /a\n  folder: /b\n", SHS_ECONFIG,
                      "bad.yaml:3: duplicate checkpoint field 'folder'",
                      "it sets save_path, already set on line 2");
    expect_yaml_error("checkpoint:\n  async_mode: async\n  async_save: false\n", SHS_ECONFIG,
                      "bad.yaml:3: duplicate checkpoint field 'async_save'", "line 2");
    expect_yaml_error("checkpoint:\n  interval: 0\n", SHS_ECONFIG,
                      "bad.yaml:2: interval: expected a positive integer", NULL);
    expect_yaml_error("checkpoint:\n  async_mode: pinned\n", SHS_ECONFIG,
                      "bad.yaml:2: async_mode: expected disabled", NULL);
    /* export at train end */
    expect_yaml_error("checkpoint:\n  save_path: /a\n  last_save_in_hf: sure\n", SHS_ECONFIG,
                      "bad.yaml:3: last_save_in_hf: expected a boolean", NULL);
    expect_yaml_error("checkpoint:\n  initial_load_in_hf: perhaps\n", SHS_ECONFIG,
                      "bad.yaml:2: initial_load_in_hf: expected a boolean", NULL);
    expect_yaml_error("checkpoint:\n  export_dtype: int8\n", SHS_ECONFIG,
                      "bad.yaml:2: export_dtype: unknown dtype 'int8'", NULL);
    expect_yaml_error("checkpoint:\n  export_dtype: float32\n  export_dtype: float32\n",
                      SHS_ECONFIG, "duplicate checkpoint field 'export_dtype'", NULL);

    /* MindSpore forms */
    expect_yaml_error("resume_training: llama_7b_rank_0-100_1.ckpt\n", SHS_ECONFIG,
                      "bad.yaml:1: resume_training: 'llama_7b_rank_0-100_1.ckpt'", "not supported");
    expect_yaml_error("resume_training: [a]\n", SHS_ECONFIG,
                      "resume_training: expected a single value", NULL);
    expect_yaml_error("load_checkpoint: {a: 1}\n", SHS_ECONFIG,
                      "load_checkpoint: expected a single value", NULL);
    expect_yaml_error("p: &p /x\nload_checkpoint: *p\n", SHS_ECONFIG,
                      "load_checkpoint: aliases are not supported", NULL);
    expect_yaml_error("load_checkpoint: \"a\\0b\"\n", SHS_ECONFIG, "NUL", NULL);
    expect_yaml_error("load_checkpoint: /a\nload_checkpoint: /b\n", SHS_ECONFIG,
                      "bad.yaml:2: duplicate key 'load_checkpoint'", NULL);
    expect_yaml_error("resume_training: true\nresume_training: true\n", SHS_ECONFIG,
                      "duplicate key 'resume_training'", NULL);
    expect_yaml_error("callbacks: []\ncallbacks: []\n", SHS_ECONFIG, "duplicate key 'callbacks'",
                      NULL);
    /* load_checkpoint and the section's load_path both set it */
    expect_yaml_error("resume_training: true\nload_checkpoint: /a\n"
                      "checkpoint:\n  load_path: /b\n",
                      SHS_ECONFIG,
                      "bad.yaml:2: duplicate checkpoint field 'load_checkpoint' (it sets "
                      "load_path, already set on line 4)",
                      NULL);
    expect_yaml_error("load_checkpoint: /a\ncheckpoint:\n  initial_load_path: /b\n", SHS_ECONFIG,
                      "it sets initial_load_path", NULL);
    /* CheckpointMonitor: read, or refused */
    expect_yaml_error("callbacks:\n  - type: CheckpointMonitor\n    save_checkpoint_steps: 0\n",
                      SHS_ECONFIG,
                      "bad.yaml:3: save_checkpoint_steps: expected a positive "
                      "integer, got '0'",
                      NULL);
    expect_yaml_error("callbacks:\n  - type: CheckpointMonitor\n    keep_checkpoint_max: x\n",
                      SHS_ECONFIG, "keep_checkpoint_max: expected a non-negative integer", NULL);
    expect_yaml_error("callbacks:\n  - integrated_save: maybe\n    type: CheckpointMonitor\n",
                      SHS_ECONFIG,
                      "bad.yaml:2: CheckpointMonitor: integrated_save: expected a boolean", NULL);
    expect_yaml_error("callbacks:\n  - async_save: true\n    async_checkpoint: false\n"
                      "    type: CheckpointMonitor\n",
                      SHS_ECONFIG, "bad.yaml:3: duplicate checkpoint field 'async_checkpoint'",
                      NULL);
    expect_yaml_error("callbacks:\n  - save_directory: /x\n    type: CheckpointMonitor\n",
                      SHS_ECONFIG, "'save_directory' is not supported", "save_dir");
    expect_yaml_error("callbacks:\n  - type: CheckpointMonitor\n    checkpoint_format: ckpt\n",
                      SHS_ECONFIG, "checkpoint_format 'ckpt' is not supported", NULL);
    expect_yaml_error("callbacks:\n  - type: CheckpointMonitor\n    save_checkpoint_steps: [1]\n",
                      SHS_ECONFIG, "save_checkpoint_steps: expected a single value", NULL);
    expect_yaml_error("callbacks:\n  - type: CheckpointMonitor\n    type: CheckpointMonitor\n",
                      SHS_ECONFIG, "duplicate key 'type'", NULL);
    expect_yaml_error("callbacks:\n  - type: CheckpointMonitor\n    ? [a]\n    : 1\n", SHS_ECONFIG,
                      "keys must be plain names", NULL);
    expect_yaml_error("t: &t CheckpointMonitor\ncallbacks:\n  - type: *t\n", SHS_ECONFIG,
                      "aliases are not supported", NULL);
    expect_yaml_error("c: &c {type: CheckpointMonitor}\ncallbacks:\n  - *c\n", SHS_ECONFIG,
                      "callbacks: aliases are not supported", NULL);
    expect_yaml_error("c: &c []\ncallbacks: *c\n", SHS_ECONFIG,
                      "callbacks: aliases are not supported", NULL);
    expect_yaml_error("callbacks:\n  - type: CheckpointMonitor\n    save_checkpoint_steps: 5\n"
                      "checkpoint:\n  save_interleaved_steps: 6\n",
                      SHS_ECONFIG,
                      "bad.yaml:5: duplicate checkpoint field 'save_interleaved_steps' "
                      "(already set on line 3)",
                      NULL);
    expect_yaml_error("callbacks:\n  - type: CheckpointMonitor\n    keep_checkpoint_max: 5\n"
                      "  - type: CheckpointMonitor\n    keep_checkpoint_max: 6\n",
                      SHS_ECONFIG, "bad.yaml:5: duplicate checkpoint field 'keep_checkpoint_max'",
                      NULL);
}

static void test_yaml_missing_and_large(void **state)
{
    (void)state;
    shs_config c, before;
    shs_config_init(&c);
    set_ok(&c, "save_path", "/kept");
    before = c;
    const char *missing = tu_path(g_dir, "nope.yaml");
    assert_int_equal(shs_config_load_yaml(&c, missing), SHS_ENOENT);
    assert_error_contains("nope.yaml");
    assert_config_equal(&c, &before);

    /* directory instead of a file */
    assert_true(shs_config_load_yaml(&c, g_dir) < 0);
    assert_config_equal(&c, &before);

    /* just over 1 MiB: a valid file padded with comments */
    size_t n = (1u << 20) + 1;
    char *big = malloc(n + 1);
    assert_non_null(big);
    memset(big, '#', n);
    const char head[] = "checkpoint:\n  save_max: 1\n";
    memcpy(big, head, sizeof head - 1);
    for (size_t i = sizeof head - 1 + 100; i < n; i += 100)
        big[i] = '\n';
    big[n - 1] = '\n';
    big[n] = 0;
    const char *p = tu_path(g_dir, "big.yaml");
    assert_int_equal(tu_write_file(p, big, n), 0);
    assert_int_equal(shs_config_load_yaml(&c, p), SHS_ECONFIG);
    assert_error_contains("too large");
    assert_error_contains("big.yaml");
    assert_config_equal(&c, &before);

    /* exactly 1 MiB is accepted */
    big[n - 2] = '\n';
    assert_int_equal(tu_write_file(p, big, n - 1), 0);
    int rc = shs_config_load_yaml(&c, p);
    if (rc != SHS_OK)
        fail_msg("1 MiB file: %d %s", rc, shs_last_error());
    assert_int_equal(c.save_max, 1);
    free(big);

    assert_int_equal(shs_config_load_yaml(&c, NULL), SHS_EINVAL);
    assert_int_equal(shs_config_load_yaml(NULL, p), SHS_EINVAL);
    shs_config_release(&c);
}

/* Loading into a config that already owns strings: the ones the file does
   not replace survive, the replaced ones are freed, nothing leaks. */
static void test_yaml_ownership(void **state)
{
    (void)state;
    tu_failalloc_install();
    long live0 = tu_failalloc_live();
    const char *p = write_yaml("own.yaml", "checkpoint:\n  save_path: /from/file\n");
    shs_config c;
    shs_config_init(&c);
    set_ok(&c, "save_path", "/old/save");
    set_ok(&c, "prefix", "oldprefix");
    assert_int_equal(shs_config_load_yaml(&c, p), SHS_OK);
    assert_string_equal(c.save_path, "/from/file");
    assert_string_equal(c.prefix, "oldprefix");
    assert_int_equal(tu_failalloc_live(), live0 + 2);
    assert_int_equal(shs_config_load_yaml(&c, p), SHS_OK);
    assert_int_equal(tu_failalloc_live(), live0 + 2);
    set_ok(&c, "prefix", "newprefix");
    assert_int_equal(tu_failalloc_live(), live0 + 2);
    shs_config_release(&c);
    assert_int_equal(tu_failalloc_live(), live0);
    assert_string_equal(c.save_path, "");
    assert_string_equal(c.prefix, "checkpoint");
    tu_failalloc_uninstall();
}

/* Out of memory at every allocation of a load: an error, no leak, the
   config as before.  `min_allocs`: allocations the load is known to make. */
static void yaml_oom_sweep(const char *text, long min_allocs)
{
    const char *p = write_yaml("oom.yaml", text);
    tu_failalloc_install();
    long live0 = tu_failalloc_live();
    shs_config ref;
    shs_config_init(&ref);
    assert_int_equal(shs_config_load_yaml(&ref, p), SHS_OK);

    int succeeded = 0;
    long n;
    for (n = 1; n < 1000 && !succeeded; n++) {
        shs_config c, before;
        shs_config_init(&c);
        tu_failalloc_arm(0);
        set_ok(&c, "prefix", "owned-before");
        before = c;
        long live_before = tu_failalloc_live();
        tu_failalloc_arm(n);
        int rc = shs_config_load_yaml(&c, p);
        tu_failalloc_arm(0);
        if (rc == SHS_OK) {
            succeeded = 1;
            assert_config_equal(&c, &ref);
        } else {
            if (rc != SHS_ENOMEM)
                fail_msg("n=%ld: expected SHS_ENOMEM, got %d (%s)", n, rc, shs_last_error());
            assert_config_equal(&c, &before);
            assert_ptr_equal(c.strings, before.strings);
            assert_int_equal(tu_failalloc_live(), live_before);
        }
        shs_config_release(&c);
    }
    assert_true(succeeded);
    assert_true(n > min_allocs);
    shs_config_release(&ref);
    assert_int_equal(tu_failalloc_live(), live0);
    tu_failalloc_uninstall();
}

static void test_yaml_oom(void **state)
{
    (void)state;
    yaml_oom_sweep(SEED_YAML, 3); /* file buffer, three strings, the exclude list */
    /* the MindSpore forms: load_checkpoint is copied, then set */
    yaml_oom_sweep("load_checkpoint: /pre\nresume_training: true\ncallbacks:\n"
                   "  - {type: CheckpointMonitor, prefix: p, save_checkpoint_steps: 3}\n",
                   3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_set_every_field),
        cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_aliases),
        cmocka_unit_test(test_suggestions),
        cmocka_unit_test(test_exclude_forms),
        cmocka_unit_test(test_string_ownership),
        cmocka_unit_test_setup_teardown(test_yaml_seed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_yaml_forms, setup, teardown),
        cmocka_unit_test_setup_teardown(test_yaml_aliases, setup, teardown),
        cmocka_unit_test_setup_teardown(test_yaml_mindspore, setup, teardown),
        cmocka_unit_test_setup_teardown(test_yaml_no_section, setup, teardown),
        cmocka_unit_test_setup_teardown(test_yaml_seed_002, setup, teardown),
        cmocka_unit_test_setup_teardown(test_yaml_program_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_yaml_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_yaml_missing_and_large, setup, teardown),
        cmocka_unit_test_setup_teardown(test_yaml_ownership, setup, teardown),
        cmocka_unit_test_setup_teardown(test_yaml_oom, setup, teardown),
    };
    return TU_RUN_GROUP(tests, NULL, NULL);
}
