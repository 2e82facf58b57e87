/* ta-test: all-isas
 * The attention variants through the KV cache: sequences of different lengths in a
 * contiguous and in a paged cache (new keys appended first), a window (bottom-right, so
 * each sequence's positions come from its own key count, not the capacity), softcap,
 * ALiBi slopes [B, H] and sinks, on both paths (fused: the decode key split for the long
 * sequence), against each sequence run as a dense ta_sdpa on the reference path over its
 * keys: O and LSE within 5e-5. Also a variant refused as ta_sdpa refuses it. */
#include "ta_test.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { B = 3, LQ = 2, H = 4, HKV = 2, D = 16, LMAX = 1300, LNEW = 2, BS = 16 };
static const int32_t SEQLENS[B] = {5, 1290, 300};

static void run_path(ta_sdpa_path path, int paged)
{
    const int64_t qs[4] = {B, LQ, H, D}, ns[4] = {B, LNEW, HKV, D}, ls[3] = {B, H, LQ};
    const int64_t cs[4] = {B, LMAX, HKV, D}, as[2] = {B, H}, hs[1] = {H};
    const int64_t per = LMAX / BS + 1, nblocks = B * per;
    const int64_t ps[4] = {nblocks, BS, HKV, D};
    ta_tensor q, kc, vc, kn, vn, o, lse, slopes, sinks;
    TA_CHECK_OK(ta_tensor_empty(&q, 4, qs));
    TA_CHECK_OK(ta_tensor_empty(&kc, 4, paged ? ps : cs));
    TA_CHECK_OK(ta_tensor_empty(&vc, 4, paged ? ps : cs));
    TA_CHECK_OK(ta_tensor_empty(&kn, 4, ns));
    TA_CHECK_OK(ta_tensor_empty(&vn, 4, ns));
    TA_CHECK_OK(ta_randn(&q, 31));
    TA_CHECK_OK(ta_randn(&kc, 32));
    TA_CHECK_OK(ta_randn(&vc, 33));
    TA_CHECK_OK(ta_randn(&kn, 34));
    TA_CHECK_OK(ta_randn(&vn, 35));
    TA_CHECK_OK(ta_tensor_full(&o, 4, qs, 9.0f));
    TA_CHECK_OK(ta_tensor_full(&lse, 3, ls, 9.0f));
    TA_CHECK_OK(ta_tensor_empty(&slopes, 2, as));
    TA_CHECK_OK(ta_tensor_empty(&sinks, 1, hs));
    for (int64_t e = 0; e < B * H; e++) ((float *)slopes.data)[e] = 0.02f * (float)(e % 7 + 1);
    for (int64_t h = 0; h < H; h++) ((float *)sinks.data)[h] = 0.3f * (float)h - 0.5f;
    /* the blocks of sequence b in reverse order */
    int32_t table[B * (LMAX / BS + 1)];
    for (int64_t b = 0; b < B; b++)
        for (int64_t u = 0; u < per; u++) table[b * per + u] = (int32_t)(b * per + per - 1 - u);
    ta_kv_cache cache = {.k = &kc, .v = &vc, .seqlens = SEQLENS,
                         .block_table = paged ? table : NULL, .max_blocks = paged ? per : 0};
    ta_sdpa_opts opts = {.causal = TA_CAUSAL_BOTTOM_RIGHT, .has_window = 1, .window_left = 100,
                         .window_right = 0, .softcap = 8.0f, .alibi_slopes = &slopes,
                         .sinks = &sinks, .path = path, .lse = &lse};
    TA_CHECK_OK(ta_sdpa_kvcache(&o, &q, &cache, &kn, &vn, &opts));

    for (int64_t b = 0; b < B; b++) {
        const int64_t keys = SEQLENS[b] + LNEW;
        const int64_t kk[4] = {1, HKV, keys, D}, os[4] = {1, H, LQ, D}, l3[3] = {1, H, LQ};
        ta_tensor K, V, O, L;
        TA_CHECK_OK(ta_tensor_empty(&K, 4, kk));
        TA_CHECK_OK(ta_tensor_empty(&V, 4, kk));
        TA_CHECK_OK(ta_tensor_empty(&O, 4, os));
        TA_CHECK_OK(ta_tensor_empty(&L, 3, l3));
        for (int64_t j = 0; j < keys; j++) /* key j of sequence b, from the updated cache */
            for (int64_t g = 0; g < HKV; g++)
                for (int64_t d = 0; d < D; d++) {
                    const int64_t src = paged ? ((int64_t)table[b * per + j / BS] * BS + j % BS) *
                                                    HKV * D + g * D + d
                                              : ((b * LMAX + j) * HKV + g) * D + d;
                    ((float *)K.data)[(g * keys + j) * D + d] = ((float *)kc.data)[src];
                    ((float *)V.data)[(g * keys + j) * D + d] = ((float *)vc.data)[src];
                }
        ta_tensor Q = {.data = (float *)q.data + b * LQ * H * D, .dtype = TA_F32, .ndim = 4,
                       .shape = {1, H, LQ, D}, .stride = {0, D, H * D, 1}};
        ta_tensor row = {.data = (float *)slopes.data + b * H, .dtype = TA_F32, .ndim = 1,
                         .shape = {H}, .stride = {1}};
        ta_sdpa_opts d = opts;
        d.alibi_slopes = &row;
        d.path = TA_SDPA_REFERENCE;
        d.lse = &L;
        TA_CHECK_OK(ta_sdpa(&O, &Q, &K, &V, &d));
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < LQ; i++) {
                const float lg = ((float *)lse.data)[(b * H + h) * LQ + i];
                const float lw = ((float *)L.data)[h * LQ + i];
                if (!(fabsf(lg - lw) <= 5e-5f))
                    fail_msg("%s%s: sequence %lld LSE[%lld, %lld] %g, dense %g",
                             path == TA_SDPA_FUSED ? "fused" : "reference", paged ? " paged" : "",
                             (long long)b, (long long)h, (long long)i, (double)lg, (double)lw);
                for (int64_t c = 0; c < D; c++) {
                    const float og = ((float *)o.data)[((b * LQ + i) * H + h) * D + c];
                    const float ow = ((float *)O.data)[(h * LQ + i) * D + c];
                    if (!(fabsf(og - ow) <= 5e-5f))
                        fail_msg("%s%s: sequence %lld O[%lld, %lld, %lld] %g, dense %g",
                                 path == TA_SDPA_FUSED ? "fused" : "reference",
                                 paged ? " paged" : "", (long long)b, (long long)i,
                                 (long long)h, (long long)c, (double)og, (double)ow);
                }
            }
        ta_tensor *all[] = {&K, &V, &O, &L};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
    }
    /* wrong slopes: the library's check (O untouched) */
    const int64_t bad[2] = {B + 1, H};
    ta_tensor wrong;
    TA_CHECK_OK(ta_tensor_full(&wrong, 2, bad, 0.1f));
    TA_CHECK_OK(ta_tensor_fill(&o, 9.0f));
    opts.alibi_slopes = &wrong;
    TA_CHECK_ERR(ta_sdpa_kvcache(&o, &q, &cache, NULL, NULL, &opts), TA_EINVAL,
                 "opts->alibi_slopes has shape");
    for (int64_t e = 0; e < ta_tensor_numel(&o); e++)
        if (((float *)o.data)[e] != 9.0f) fail_msg("a refused call wrote O");
    ta_tensor_free(&wrong);
    ta_tensor *all[] = {&q, &kc, &vc, &kn, &vn, &o, &lse, &slopes, &sinks};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
}

static void test_kvcache_variants(void **state)
{
    (void)state;
    for (int paged = 0; paged < 2; paged++) {
        run_path(TA_SDPA_FUSED, paged);
        run_path(TA_SDPA_REFERENCE, paged);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_kvcache_variants)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
