/* KV-cache fixture cases as ta_sdpa_kvcache arguments (kv_cases.h). */
#include "kv_cases.h"

#include "fixture_cases.h"

#include <stdlib.h>
#include <string.h>

/* Record `role` of case c into view/store in layout (absent record: left zeroed). */
static void place(ta_tensor *view, ta_tensor *store, const ta_fixture_file *f, const char *c,
                  const char *role, ta_test_layout layout)
{
    const ta_fixture_record *r = ta_fixture_case_record(f, c, role);
    if (!r) return;
    assert_int_equal(r->ndim, 4);
    ta_tensor src;
    TA_CHECK_OK(ta_fixture_tensor(&src, r));
    ta_test_tensor4(view, store, r->shape, layout, &src);
    ta_tensor_free(&src);
}

static int32_t *copy_i32(const ta_fixture_record *r)
{
    assert_int_equal(r->dtype, TA_FIXTURE_I32);
    int32_t *v = malloc(sizeof(int32_t) * (size_t)(r->numel + 1));
    assert_non_null(v);
    memcpy(v, r->data, sizeof(int32_t) * (size_t)r->numel);
    return v;
}

void ta_test_kv_load(ta_test_kv *t, const ta_fixture_file *f, const char *c,
                     ta_test_layout layout)
{
    memset(t, 0, sizeof *t);
    const char *meta = ta_fixture_case_meta(f, c);
    int64_t sh[7];
    char buf[64];
    assert_int_equal(ta_fixture_meta_ints(meta, "shape", sh, 7), 7);
    t->B = sh[0], t->H = sh[1], t->Hkv = sh[2], t->Lq = sh[3], t->D = sh[4], t->Dv = sh[5];
    t->Lnew = sh[6];
    place(&t->q, &t->q_s, f, c, "q", layout);
    place(&t->kc, &t->kc_s, f, c, "k_cache", layout);
    place(&t->vc, &t->vc_s, f, c, "v_cache", layout);
    place(&t->kn, &t->kn_s, f, c, "k_new", layout);
    place(&t->vn, &t->vn_s, f, c, "v_new", layout);
    t->has_new = ta_fixture_case_record(f, c, "k_new") != NULL;
    t->seqlens = copy_i32(ta_fixture_need(f, c, "cache_seqlens"));
    const ta_fixture_record *bt = ta_fixture_case_record(f, c, "block_table");
    t->paged = bt != NULL;
    const int64_t os[4] = {t->B, t->Lq, t->H, t->Dv}, ls[3] = {t->B, t->H, t->Lq};
    ta_test_tensor4(&t->o, &t->o_s, os, layout, NULL);
    TA_CHECK_OK(ta_tensor_fill(&t->o, 9.0f));
    TA_CHECK_OK(ta_tensor_full(&t->lse, 3, ls, 7.0f));
    t->cache = (ta_kv_cache){.k = &t->kc, .v = &t->vc, .seqlens = t->seqlens};
    if (bt) {
        t->table = copy_i32(bt);
        t->cache.block_table = t->table;
        t->cache.max_blocks = bt->shape[1];
    }
    ta_fixture_meta_get(meta, "causal", buf, sizeof buf);
    t->opts.causal = !strcmp(buf, "top_left")       ? TA_CAUSAL_TOP_LEFT
                     : !strcmp(buf, "bottom_right") ? TA_CAUSAL_BOTTOM_RIGHT
                                                    : TA_CAUSAL_NONE;
    ta_fixture_meta_get(meta, "scale", buf, sizeof buf);
    t->opts.scale = strtof(buf, NULL);
    t->opts.lse = &t->lse;
}

void ta_test_kv_free(ta_test_kv *t)
{
    ta_tensor *owned[] = {&t->q_s, &t->kc_s, &t->vc_s, &t->kn_s, &t->vn_s, &t->o_s, &t->lse};
    for (size_t i = 0; i < sizeof owned / sizeof *owned; i++) ta_tensor_free(owned[i]);
    free(t->seqlens);
    free(t->table);
    memset(t, 0, sizeof *t);
}
