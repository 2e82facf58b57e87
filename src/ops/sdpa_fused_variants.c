/* The attention variants on the fused paths (sdpa_fused_variants.h). */
#include "ops/sdpa_fused_variants.h"

#include <math.h>

void ta_sdpa_fused_scores(const ta_kernels *k, const ta_sdpa_variants *v, float *s, int64_t MQ,
                          int64_t mq, int64_t j0, int64_t nk, const float *slope,
                          const float *pos)
{
    if (v->softcap > 0.0f) {
        if (mq == MQ) /* one call over the tile; else the real rows of each key only */
            k->attn_softcap(s, nk * MQ, v->softcap);
        else
            for (int64_t t = 0; t < nk; t++) k->attn_softcap(s + t * MQ, mq, v->softcap);
    }
    if (v->alibi)
        for (int64_t t = 0; t < nk; t++) {
            float *col = s + t * MQ;
            const float j = (float)(j0 + t);
            for (int64_t r = 0; r < mq; r++) col[r] -= slope[r] * fabsf(j - pos[r]);
        }
}

void ta_sdpa_fused_window_mask(float *s, int64_t MQ, int64_t mq, int64_t j0, int64_t nk,
                               const int64_t *lo, const int64_t *hi)
{
    for (int64_t r = 0; r < mq; r++) {
        int64_t a = lo[r] - j0, e = hi[r] - j0;
        a = a < 0 ? 0 : a > nk ? nk : a;
        e = e < a ? a : e > nk ? nk : e;
        for (int64_t t = 0; t < a; t++) s[t * MQ + r] = -INFINITY;
        for (int64_t t = e; t < nk; t++) s[t * MQ + r] = -INFINITY;
    }
}

void ta_sdpa_sink_finish(double m, double l, double sigma, double *factor, double *lse)
{
    if (isnan(l) || isnan(m) || isnan(sigma)) {
        *factor = *lse = NAN;
        return;
    }
    if (l == 0.0) {
        *factor = 0.0;
        *lse = sigma;
        return;
    }
    const double M = m > sigma ? m : sigma;
    const double a = exp(m - M), L = l * a + exp(sigma - M);
    *factor = a / L;
    *lse = M + log(L);
}
