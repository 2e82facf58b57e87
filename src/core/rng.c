/* Counter-based random numbers: Philox-4x32-10 (Salmon et al., "Parallel random
 * numbers: as easy as 1, 2, 3", SC 2011). Element n (row-major over the shape) is a
 * pure function of (seed, n), so neither strides nor threads change the values. */
#include "core/core.h"
#include "core/rng.h"
#include "core/tensor_internal.h"

#include <math.h>
#include <string.h>

ta_philox4 ta_philox4x32_10(const uint32_t counter[4], const uint32_t key[2])
{
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    ta_philox4 out = {{c0, c1, c2, c3}};
    return out;
}

/* Stream `seed`, element n: counter (n_lo, n_hi, 0, 0), key (seed_lo, seed_hi). */
static ta_philox4 philox_at(uint64_t n, uint64_t seed)
{
    uint32_t c[4] = {(uint32_t)n, (uint32_t)(n >> 32), 0, 0};
    uint32_t k[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    return ta_philox4x32_10(c, k);
}

/* A double in (0, 1] from 53 random bits. */
static double unit_open0(uint32_t hi, uint32_t lo)
{
    uint64_t bits = ((uint64_t)hi << 21) ^ (uint64_t)(lo >> 11);
    bits &= (1ull << 53) - 1;
    return ((double)bits + 1.0) * (1.0 / 9007199254740992.0);
}

typedef enum { DIST_NORMAL, DIST_UNIFORM } dist_kind;

static float sample(dist_kind kind, uint64_t n, uint64_t seed, float lo, float hi)
{
    ta_philox4 r = philox_at(n, seed);
    if (kind == DIST_NORMAL) {
        /* Box-Muller, cosine branch */
        double u1 = unit_open0(r.v[0], r.v[1]), u2 = unit_open0(r.v[2], r.v[3]);
        return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
    /* [0, 1) from 24 bits: every value is exactly representable in float */
    float u = (float)(r.v[0] >> 8) * (1.0f / 16777216.0f);
    const float w = hi - lo;
    /* a range wider than the float range (-FLT_MAX, FLT_MAX) in double: hi - lo is inf */
    float x = isinf(w) ? (float)((double)lo + ((double)hi - (double)lo) * (double)u) : lo + w * u;
    return x < hi ? x : lo; /* rounding of lo + (hi-lo)*u can reach hi */
}

static ta_status fill(const char *fn, ta_tensor *t, dist_kind kind, float lo, float hi,
                      uint64_t seed)
{
    ta_status st = ta_tensor_check_dtypes(fn, "t", t, TA_ACCEPT_ANY);
    /* aliased elements would keep whichever draw came last: on several threads, not
     * the same one from run to run */
    if (!st) st = ta_tensor_check_unaliased(fn, "t", t);
    if (st) return st;
    int64_t n = ta_tensor_numel(t);
    int nd = t->ndim;
    #pragma omp parallel num_threads(ta_threads()) if (n > 65536)
    {
        /* Static contiguous ranges: each thread starts from its own multi-index. */
        #pragma omp for schedule(static)
        for (int64_t blk = 0; blk < (n + 4095) / 4096; blk++) {
            int64_t begin = blk * 4096, end = TA_MIN(n, begin + 4096);
            int64_t idx[TA_MAX_DIMS] = {0}, rem = begin;
            for (int i = nd - 1; i >= 0; i--) {
                idx[i] = rem % t->shape[i];
                rem /= t->shape[i];
            }
            for (int64_t e = begin; e < end; e++) {
                /* the float32 sample, rounded to t's dtype (nearest-even); a uniform one
                 * that the rounding took to hi (or past it, to inf) gets the half type's
                 * next value below, so the range stays [lo, hi) */
                void *p = ta_tensor_ptr(t, idx);
                ta_dtype_store(p, t->dtype, sample(kind, (uint64_t)e, seed, lo, hi));
                if (kind == DIST_UNIFORM && (t->dtype == TA_F16 || t->dtype == TA_BF16) &&
                    ta_dtype_load(p, t->dtype) >= hi) {
                    uint16_t b;
                    memcpy(&b, p, 2);
                    b = b & 0x8000 ? (uint16_t)(b + 1) : (uint16_t)(b - 1); /* one value down */
                    memcpy(p, &b, 2);
                }
                ta_index_next(nd, t->shape, idx);
            }
        }
    }
    return TA_OK;
}

ta_status ta_randn(ta_tensor *t, uint64_t seed)
{
    return fill("ta_randn", t, DIST_NORMAL, 0.0f, 0.0f, seed);
}

ta_status ta_rand(ta_tensor *t, uint64_t seed)
{
    return fill("ta_rand", t, DIST_UNIFORM, 0.0f, 1.0f, seed);
}

ta_status ta_rand_uniform(ta_tensor *t, float low, float high, uint64_t seed)
{
    if (!(low < high) || !isfinite(low) || !isfinite(high))
        return ta_error(TA_EINVAL, "ta_rand_uniform: need finite low < high, got [%g, %g)",
                        (double)low, (double)high);
    return fill("ta_rand_uniform", t, DIST_UNIFORM, low, high, seed);
}

ta_status ta_randint(int64_t *out, size_t n, int64_t low, int64_t high, uint64_t seed)
{
    if (!out && n) return ta_error(TA_EINVAL, "ta_randint: out is NULL");
    if (high <= low)
        return ta_error(TA_EINVAL, "ta_randint: need low < high, got [%lld, %lld)", (long long)low,
                        (long long)high);
    uint64_t range = (uint64_t)high - (uint64_t)low;
    for (size_t i = 0; i < n; i++) {
        ta_philox4 r = philox_at((uint64_t)i, seed);
        uint64_t x = ((uint64_t)r.v[0] << 32) | r.v[1];
        /* Lemire-style multiply-shift would be biased by < 2^-64 * range; the modulo
         * bias is the same order for 64-bit x: both negligible for our ranges. */
        /* unsigned arithmetic: low + offset may not fit int64 midway (range > 2^63) */
        out[i] = (int64_t)((uint64_t)low + x % range);
    }
    return TA_OK;
}
