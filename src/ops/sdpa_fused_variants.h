/* The attention variants on the fused paths (sdpa_variants.h has the definitions): the
 * steps a fused kernel adds to its tile loop. A score tile is s [nk, MQ], key t of the
 * tile (key j0 + t of the problem) for row r at s[t * MQ + r]; Q is pre-scaled, so the
 * tile holds scale q.k when these run. Per row: its window [lo, hi) of keys
 * (ta_sdpa_window_keys, hi tightened by the row's other bounds), its ALiBi slope and its
 * position i + delta (as float: exact below 2^24). */
#ifndef TA_OPS_SDPA_FUSED_VARIANTS_H
#define TA_OPS_SDPA_FUSED_VARIANTS_H

#include "kernels/kernels.h"
#include "ops/sdpa_variants.h"

#include <stdbool.h>
#include <stdint.h>

/* Whether softcap or ALiBi changes the scores (ta_sdpa_fused_scores has work). */
static inline bool ta_sdpa_fused_scores_needed(const ta_sdpa_variants *v)
{
    return v->softcap > 0.0f || v->alibi;
}

/* Softcap, then ALiBi, on the rows r < mq of the tile of keys [j0, j0 + nk), in the
 * definition's order (before any mask). slope and pos: per row (read with ALiBi only). */
void ta_sdpa_fused_scores(const ta_kernels *k, const ta_sdpa_variants *v, float *s, int64_t MQ,
                          int64_t mq, int64_t j0, int64_t nk, const float *slope,
                          const float *pos);

/* -inf at the keys of the tile outside each row's [lo[r], hi[r]) (rows r < mq). */
void ta_sdpa_fused_window_mask(float *s, int64_t MQ, int64_t mq, int64_t j0, int64_t nk,
                               const int64_t *lo, const int64_t *hi);

/* A row's finish with its sink sigma (-inf: none), from the running max m and sum l of
 * its keys (in the scale of m): O = (unnormalised O) * *factor, LSE = *lse;
 *     M = max(m, sigma), L = l e^(m - M) + e^(sigma - M), factor = e^(m - M) / L,
 *     LSE = M + log L;
 * l = 0 (no key): factor 0, LSE = sigma. NaN in l or m gives NaN in both. */
void ta_sdpa_sink_finish(double m, double l, double sigma, double *factor, double *lse);

#endif
