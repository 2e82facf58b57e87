#include "sdpa_variants_case.h"
#include "cli_run.h"
#include "fixture_cases.h"
#include "ta_test.h"

#include <stdlib.h>
#include <string.h>

void ta_test_variants_load(ta_test_variants *v, const ta_fixture_file *f, const char *c,
                           ta_sdpa_opts *opts)
{
    memset(v, 0, sizeof *v);
    const char *meta = ta_fixture_case_meta(f, c);
    int64_t w[2];
    if (ta_fixture_meta_ints(meta, "window", w, 2) == 2) {
        opts->has_window = 1;
        opts->window_left = w[0];
        opts->window_right = w[1];
        ta_fixture_meta_get(meta, "window", v->window, sizeof v->window);
    }
    if (ta_fixture_meta_get(meta, "softcap", v->softcap, sizeof v->softcap))
        opts->softcap = strtof(v->softcap, NULL);
    const ta_fixture_record *a = ta_fixture_case_record(f, c, "alibi");
    const ta_fixture_record *s = ta_fixture_case_record(f, c, "sinks");
    if (a) {
        TA_CHECK_OK(ta_fixture_tensor(&v->alibi, a));
        v->has_alibi = 1;
        opts->alibi_slopes = &v->alibi;
    }
    if (s) {
        TA_CHECK_OK(ta_fixture_tensor(&v->sinks, s));
        v->has_sinks = 1;
        opts->sinks = &v->sinks;
    }
}

void ta_test_variants_free(ta_test_variants *v)
{
    ta_tensor_free(&v->alibi);
    ta_tensor_free(&v->sinks);
    memset(v, 0, sizeof *v);
}

int ta_test_variants_cli_args(const char **argv, int a, ta_test_variants *v)
{
    if (v->window[0]) {
        argv[a++] = "--window";
        argv[a++] = v->window;
    }
    if (v->softcap[0]) {
        argv[a++] = "--softcap";
        argv[a++] = v->softcap;
    }
    if (v->has_alibi) {
        TA_CHECK_OK(ta_npy_save(ta_test_path("alibi.npy"), &v->alibi));
        argv[a++] = "--alibi-slopes";
        argv[a++] = ta_test_path("alibi.npy");
    }
    if (v->has_sinks) {
        TA_CHECK_OK(ta_npy_save(ta_test_path("sinks.npy"), &v->sinks));
        argv[a++] = "--sinks";
        argv[a++] = ta_test_path("sinks.npy");
    }
    return a;
}
