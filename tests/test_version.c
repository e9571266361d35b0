/* test_version.c -- the library's version (shs_version, shs_version_number,
 * the header's SHS_VERSION_*) and the option-struct version check
 * (shs__check_opts_version, src/opts.c).
 */
#include "testutil.h"
#include "opts.h"

#include <stdio.h>
#include <string.h>

static void test_version_number(void **state)
{
    (void)state;
    assert_int_equal(shs_version_number(), SHS_VERSION_NUMBER);
    assert_int_equal(SHS_VERSION_NUMBER,
                     SHS_VERSION_MAJOR * 10000 + SHS_VERSION_MINOR * 100 + SHS_VERSION_PATCH);
    /* the string and the number tell the same version */
    char want[32];
    snprintf(want, sizeof want, "%u.%u.%u", shs_version_number() / 10000,
             shs_version_number() / 100 % 100, shs_version_number() % 100);
    assert_string_equal(shs_version(), want);
    assert_string_equal(SHS_VERSION_STRING, want);
    /* every part fits its two decimal digits, so the number orders versions */
    assert_true(SHS_VERSION_MINOR < 100 && SHS_VERSION_PATCH < 100);
}

static void test_opts_version_accepted(void **state)
{
    (void)state;
    /* every version from 1 up to the library's own */
    for (unsigned v = 1; v <= 3; v++)
        assert_int_equal(shs__check_opts_version(v, 3, "shs_test"), SHS_OK);
}

static void test_opts_version_newer(void **state)
{
    (void)state;
    assert_int_equal(shs__check_opts_version(3, 2, "shs_file_open"), SHS_EINVAL);
    assert_string_equal(shs_last_error(),
                        "shs_file_open: option struct version 3 is newer than this library (2)");
    assert_int_equal(shs__check_opts_version(~0u, 1, "shs_writer_create"), SHS_EINVAL);
    assert_non_null(strstr(shs_last_error(), "shs_writer_create: option struct version 4294967295"));
}

static void test_opts_version_zero(void **state)
{
    (void)state;
    assert_int_equal(shs__check_opts_version(0, 1, "shs_file_open"), SHS_EINVAL);
    assert_non_null(strstr(shs_last_error(), "shs_file_open: option struct version 0"));
    assert_non_null(strstr(shs_last_error(), "_INIT"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_number),
        cmocka_unit_test(test_opts_version_accepted),
        cmocka_unit_test(test_opts_version_newer),
        cmocka_unit_test(test_opts_version_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
