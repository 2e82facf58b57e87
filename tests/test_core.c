/* ta-test: all-isas -- Core services: threads, the allocation hook, CPU dispatch. */
#include "ta_test.h"

#include "alloc_hook.h"

#include <stdlib.h>
#include <string.h>

static void test_threads(void **state)
{
    (void)state;
    TA_CHECK_OK(ta_set_num_threads(3));
    assert_int_equal(ta_get_num_threads(), 3);
    TA_CHECK_ERR(ta_set_num_threads(0), TA_EINVAL, "n must be in [1, 4096], got 0");
    assert_int_equal(ta_get_num_threads(), 3);
    TA_CHECK_OK(ta_set_num_threads(1));
}

static void test_allocator_hook(void **state)
{
    (void)state;
    ta_tensor t;
    ta_test_count_allocations();
    TA_CHECK_OK(ta_tensor_zeros(&t, 2, (int64_t[]){3, 1000000})); /* > 2 MiB: huge-page path */
    assert_int_equal(ta_test_alloc_count, 1);
    assert_int_equal((uintptr_t)t.data % (2u << 20), 0);
    ta_tensor_free(&t);
    assert_int_equal(ta_test_free_count, 1);
    ta_test_fail_allocations();
    t.data = (void *)&t; /* outputs untouched on failure */
    TA_CHECK_ERR(ta_tensor_zeros(&t, 1, (int64_t[]){16}), TA_ENOMEM, "out of memory");
    assert_ptr_equal(t.data, (void *)&t);
    assert_int_equal(ta_test_alloc_injected, 1);
    ta_test_stop_counting();
    TA_CHECK_OK(ta_tensor_zeros(&t, 1, (int64_t[]){16}));
    assert_int_equal((uintptr_t)t.data % 64, 0);
    ta_tensor_free(&t);
}

static void test_dispatch(void **state)
{
    (void)state;
    assert_true(ta_cpu_supports(TA_ISA_SCALAR));
    ta_isa isa = ta_active_isa();
    assert_true(ta_cpu_supports(isa));
    /* TA_ARCH picks a supported ISA by its table name */
    const char *want = getenv("TA_ARCH");
    for (int i = 0; want && i < TA_ISA_COUNT; i++)
        if (strcmp(ta_isa_name((ta_isa)i), want) == 0 && ta_cpu_supports((ta_isa)i))
            assert_string_equal(ta_isa_name(isa), want);
    assert_string_equal(ta_isa_name(TA_ISA_AVX2), "avx2");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_allocator_hook),
        cmocka_unit_test(test_dispatch),
    };
    return cmocka_run_group_tests_name("core", tests, NULL, NULL);
}
