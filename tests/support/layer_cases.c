/* Layer fixture cases (see layer_cases.h). */
#include "layer_cases.h"
#include "fixture_cases.h"
#include "ta_test.h"

#include <stdlib.h>
#include <string.h>

static ta_mask_mode mode_of(const char *c, const char *meta, const char *key)
{
    char s[16];
    ta_fixture_meta_get(meta, key, s, sizeof s);
    if (!strcmp(s, "keep")) return TA_MASK_KEEP;
    if (!strcmp(s, "block")) return TA_MASK_BLOCK;
    if (!strcmp(s, "additive")) return TA_MASK_ADDITIVE;
    fail_msg("%s: unknown %s '%s'", c, key, s);
    return TA_MASK_KEEP;
}

static int64_t meta_int(const char *meta, const char *key)
{
    char buf[32];
    ta_fixture_meta_get(meta, key, buf, sizeof buf);
    return atoll(buf);
}

void ta_test_layer_case_load(ta_test_layer_case *lc, const ta_fixture_file *f, const char *name)
{
    memset(lc, 0, sizeof *lc);
    lc->name = name;
    lc->meta = ta_fixture_case_meta(f, name);
    char kind[16];
    ta_fixture_meta_get(lc->meta, "kind", kind, sizeof kind);
    lc->layout = !strcmp(kind, "seed") ? TA_LAYOUT_SEED : TA_LAYOUT_TORCH;
    lc->E = meta_int(lc->meta, "embed");
    lc->H = meta_int(lc->meta, "heads");
    lc->self = (int)meta_int(lc->meta, "self");
    lc->opts.causal = meta_int(lc->meta, "causal") ? TA_CAUSAL_TOP_LEFT : TA_CAUSAL_NONE;
    TA_CHECK_OK(ta_fixture_tensor(&lc->q, ta_fixture_need(f, name, "queries")));
    TA_CHECK_OK(ta_fixture_tensor(&lc->k, ta_fixture_need(f, name, "keys")));
    TA_CHECK_OK(ta_fixture_tensor(&lc->v, ta_fixture_need(f, name, "values")));
    const ta_fixture_record *r;
    if ((r = ta_fixture_case_record(f, name, "mask"))) {
        TA_CHECK_OK(ta_fixture_tensor(&lc->mask, r));
        lc->opts.mask = &lc->mask;
        lc->opts.mask_mode = mode_of(name, lc->meta, "mask_mode");
    }
    if ((r = ta_fixture_case_record(f, name, "key_padding_mask"))) {
        TA_CHECK_OK(ta_fixture_tensor(&lc->kpm, r));
        lc->opts.key_padding_mask = &lc->kpm;
        lc->opts.key_padding_mode = mode_of(name, lc->meta, "kpm_mode");
    }
}

void ta_test_layer_case_free(ta_test_layer_case *lc)
{
    ta_tensor *all[] = {&lc->q, &lc->k, &lc->v, &lc->mask, &lc->kpm};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
}

int ta_test_layer_cases_run(const char *file, const char *kind, int min_cases,
                            void (*fn)(const ta_fixture_file *f, const char *name, void *ctx),
                            void *ctx)
{
    int ran = ta_fixture_cases_run(file, "kind", kind, fn, ctx);
    if (ran < min_cases)
        fail_msg("only %d %s cases in %s (expected >= %d)", ran, kind, file, min_cases);
    return ran;
}
