/* The attention variants of a fixture case (tests/fixtures/sdpa_variants.tafx, written by
 * tools/fixtures_variants.py): its ALiBi slopes, sinks, window and softcap as ta_sdpa_opts
 * fields, and as command-line flags. */
#ifndef TA_TEST_SDPA_VARIANTS_CASE_H
#define TA_TEST_SDPA_VARIANTS_CASE_H

#include "fixtures.h"
#include "tensorattn.h"

typedef struct ta_test_variants {
    ta_tensor alibi, sinks;   /* float32 copies of the records (zeroed when absent) */
    int has_alibi, has_sinks;
    char window[48];          /* the meta values as text ("" when absent) */
    char softcap[48];
} ta_test_variants;

/* Reads case c's variants into *v and sets them in *opts (window, softcap, alibi_slopes,
 * sinks; opts->alibi_slopes and opts->sinks point into v). */
void ta_test_variants_load(ta_test_variants *v, const ta_fixture_file *f, const char *c,
                           ta_sdpa_opts *opts);
void ta_test_variants_free(ta_test_variants *v);

/* The case's variant flags (--window, --softcap, --alibi-slopes, --sinks; the files
 * written into ta_test_dir) appended to argv from position a; returns the next position.
 * The strings argv points at live in v. */
int ta_test_variants_cli_args(const char **argv, int a, ta_test_variants *v);

#endif
