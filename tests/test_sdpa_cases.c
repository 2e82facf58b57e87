/* ta-test: all-isas
 * The SDPA case table (tests/support/sdpa_case_table.c) in three modes, one cmocka test
 * per group and mode: the reference path against the float64 oracle (O, weights, LSE),
 * the fused path against the oracle (O, LSE), and the two paths against each other.
 * Both paths are driven through the public ta_sdpa with opts.path. */
#include "ta_test.h"
#include "sdpa_cases.h"

#include <stdio.h>
#include <stdlib.h>

enum { MODE_REFERENCE, MODE_FUSED, MODE_AGREE, MODE_COUNT };
static const char *const mode_names[MODE_COUNT] = {"reference", "fused", "fused vs reference"};

typedef struct run {
    const ta_sdpa_case_group *group;
    int mode;
} run;

static void run_group(void **state)
{
    const run *r = *state;
    ta_sdpa_case_list l = {0};
    r->group->build(&l);
    assert_true(l.n > 0);
    for (size_t n = 0; n < l.n; n++) {
        if (r->mode == MODE_AGREE) ta_sdpa_case_check_agree(&l.v[n]);
        else ta_sdpa_case_check(&l.v[n], r->mode == MODE_FUSED ? TA_SDPA_FUSED : TA_SDPA_REFERENCE);
    }
    free(l.v);
}

int main(void)
{
    const size_t n = ta_sdpa_case_group_count * MODE_COUNT;
    struct CMUnitTest *tests = calloc(n, sizeof *tests);
    run *runs = calloc(n, sizeof *runs);
    char (*names)[96] = calloc(n, sizeof *names);
    if (!tests || !runs || !names) return 1;
    for (size_t g = 0; g < ta_sdpa_case_group_count; g++)
        for (int m = 0; m < MODE_COUNT; m++) {
            size_t t = g * MODE_COUNT + (size_t)m;
            runs[t] = (run){&ta_sdpa_case_groups[g], m};
            snprintf(names[t], sizeof names[t], "%s: %s", mode_names[m],
                     ta_sdpa_case_groups[g].name);
            tests[t] = (struct CMUnitTest){.name = names[t], .test_func = run_group,
                                           .initial_state = &runs[t]};
        }
    int failed = _cmocka_run_group_tests("test_sdpa_cases", tests, n, NULL, NULL);
    free(names);
    free(runs);
    free(tests);
    return failed;
}
