/* How fast one core can run a KV-cache decode step at best: the reads of a decode sweep
 * over a half-precision cache, in its order and with its prefetches, and no work but
 * the FMAs the arithmetic needs, against a plain streaming read of the same bytes
 * measured in turn in the same process (docs/performance.md, "Session 28").
 *
 *   build/decode_ceiling [keys [rounds [T dist W [pages [blk]]]]]   (default 32768 keys,
 *                                            15 rounds and the configurations below)
 *
 * The cache is B1, Hkv 8, D 128, float16 K and V [keys, Hkv, D] (2 x 64 MiB at 32k
 * keys): a kv head's rows are 2 KiB apart, beyond the hardware prefetchers. The sweep
 * steps tiles of T keys; per tile and kv head it reads the head's T K rows, then its T V
 * rows, widening each 16 values (one 512-bit vector; two 256-bit ones on AVX2) and
 * giving each widened vector W FMAs (into 8 accumulators in turn, enough independent
 * chains for two FMA ports); with every row read it requests
 * (prefetcht1) its share of the next tile's region (the keys [j + dist T, j + (dist + 1)
 * T) of every head, K then V, in address order), as the library's decode sweep does
 * (sdpa_fused_tiles.c, sweep_region). W = 4 is the FMA count of a 4-row decode (a GQA
 * group of 4: 4 rows x 128 x 2 multiply-adds a (kv head, key) pair, 64 512-bit FMAs);
 * W = 5 stands for ~16 cycles a pair more; W = 0 adds each vector once (the reads
 * alone). pages = 1 also requests, at each tile's start, one line of each 4 KiB page of
 * the tile after the region, as the library's sweep does since session 32
 * (sweep_pages). blk > 0 (a power of 2) makes it a paged cache of blocks of blk keys in
 * a random order (a fixed-seed permutation of the blocks, like kv_decode_paged's table):
 * rows, region and pages through the table, a jump across K at every block
 * (docs/inference.md, "What a far jump costs"). The library's step does more on the
 * same reads in the same order (each score's lane sums, the softmax, its bookkeeping),
 * so this bounds what it can read.
 *
 * Prints per configuration the medians (ms, GB/s, ns a pair) and the median of the
 * per-round ratios to the plain read (bench_read_bandwidth, the bench's own yardstick,
 * one pass over the same buffer right after each sweep). Calling thread only; the vector
 * width of the library's ISA (ta_active_isa: TA_ARCH=avx2 picks 256 bits), AVX2 and F16C
 * at least (else it says so and exits 0). */
#define _GNU_SOURCE
#include "peak.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DC_X86 1
#else
#define DC_X86 0
#endif

enum { HKV = 8, D = 128, MAX_ROUNDS = 63 };

typedef struct dc_cfg {
    int T, dist, W; /* tile keys, tiles ahead of the region, FMAs a widened vector */
    int pages;      /* 1: a line of each page of the tile after the region, a tile ahead */
    int blk;        /* 0: contiguous; else a paged cache's blocks of blk keys, scattered */
} dc_cfg;

/* Where key j of the sweep lies: j itself (contiguous), or row j mod 2^lb of block
 * tab[j >> lb] (a paged cache; shifts, not divisions, which would cost more than the
 * prefetches they place). */
static inline int64_t dc_key(const int32_t *tab, int lb, int64_t j)
{
    return tab ? (int64_t)tab[j >> lb] << lb | (j & (((int64_t)1 << lb) - 1)) : j;
}

#if DC_X86
/* The sweep for one ISA and a constant W (a separate function each, so that the
 * accumulators stay in registers): returns the sum of their lanes (kept, so that the
 * loads stay). K and V are [L, HKV, D] halves. */
#define DC_SWEEP(NAME, TARGET, VT, ZERO, WIDEN, FMA, ADD, STORE, VL, W)                    \
    __attribute__((target(TARGET), noinline)) static float NAME(                            \
        const uint16_t *K, const uint16_t *V, int64_t L, dc_cfg c, const int32_t *tab,     \
        int lb)                                                                             \
    {                                                                                       \
        VT acc[8];                                                                          \
        for (int i = 0; i < 8; i++) acc[i] = ZERO();                                        \
        const VT one = ADD(ZERO(), ZERO()); /* 0: the FMAs change nothing but cost */      \
        const int64_t row = HKV * D;         /* halves between a head's keys */            \
        const int64_t lines_tile = 2 * c.T * row * 2 / 64; /* of K and V, a tile */        \
        const int64_t per_row = (lines_tile + 2 * HKV * c.T - 1) / (2 * HKV * c.T);       \
        const int64_t lines_key = row * 2 / 64; /* of K (or V), a key's rows of all heads */ \
        for (int64_t j = 0; j < L; j += c.T) {                                              \
            const int64_t jn = j + (int64_t)c.dist * c.T, tk = L - j < c.T ? L - j : c.T;   \
            const int64_t kn = jn < L ? (L - jn < c.T ? L - jn : c.T) : 0;                  \
            const int64_t lines = 2 * kn * row * 2 / 64, half = lines / 2;                  \
            int64_t line = 0;                                                               \
            /* the tile after the region, keys [jp, pe): a line of each page its rows hold */ \
            const int64_t jp = jn + c.T, pe = L - jp < c.T ? L : jp + c.T;                  \
            for (int kv = 0; c.pages && kv < 2; kv++) {                                     \
                uintptr_t pg = 0; /* the page last requested */                             \
                for (int64_t k = jp; k < pe; k++) {                                         \
                    const uintptr_t a = (uintptr_t)((kv ? V : K) + dc_key(tab, lb, k) * row); \
                    for (uintptr_t x = a; x < a + row * 2; x = (x | 4095) + 1)              \
                        if (x >> 12 != pg) {                                                \
                            pg = x >> 12;                                                   \
                            _mm_prefetch((const char *)x, _MM_HINT_T2);                     \
                        }                                                                   \
                }                                                                           \
            }                                                                               \
            for (int h = 0; h < HKV; h++)                                                   \
                for (int kv = 0; kv < 2; kv++)                                              \
                    for (int64_t k = 0; k < tk; k++) {                                      \
                        const uint16_t *r = (kv ? V : K) + (dc_key(tab, lb, j + k) * HKV + h) * D; \
                        for (int64_t x = 0; x < per_row && line < lines; x++, line++) {     \
                            const int64_t l = line < half ? line : line - half;             \
                            const char *t = (const char *)(line < half ? K : V);            \
                            _mm_prefetch(t + dc_key(tab, lb, jn + l / lines_key) * row * 2 + \
                                             l % lines_key * 64,                            \
                                         _MM_HINT_T1);                                      \
                        }                                                                   \
                        _Pragma("GCC unroll 16") for (int v = 0; v < D / VL; v++) {         \
                            const VT x = WIDEN(r + v * VL);                                 \
                            if (W == 0) acc[v & 7] = ADD(acc[v & 7], x);                    \
                            _Pragma("GCC unroll 8") for (int w = 0; w < W; w++)             \
                                acc[(v * W + w) & 7] = FMA(x, one, acc[(v * W + w) & 7]);   \
                        }                                                                   \
                    }                                                                       \
        }                                                                                   \
        float out[16], s = 0.0f;                                                            \
        for (int i = 0; i < 8; i++) {                                                       \
            STORE(out, acc[i]);                                                             \
            for (int l = 0; l < VL; l++) s += out[l];                                       \
        }                                                                                   \
        return s;                                                                           \
    }

#define W512(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define W256(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define DC_ISAS(W)                                                                          \
    DC_SWEEP(sweep512_w##W, "avx512f,f16c,fma", __m512, _mm512_setzero_ps, W512,            \
             _mm512_fmadd_ps, _mm512_add_ps, _mm512_storeu_ps, 16, W)                       \
    DC_SWEEP(sweep256_w##W, "avx2,f16c,fma", __m256, _mm256_setzero_ps, W256,               \
             _mm256_fmadd_ps, _mm256_add_ps, _mm256_storeu_ps, 8, W)
DC_ISAS(0)
DC_ISAS(4)
DC_ISAS(5)

/* tab: the block table of a paged cache of blocks of 2^lb keys (NULL: contiguous) */
static float sweep(int avx512, const uint16_t *K, const uint16_t *V, int64_t L, dc_cfg c,
                   const int32_t *tab, int lb)
{
    if (c.W == 0)
        return avx512 ? sweep512_w0(K, V, L, c, tab, lb) : sweep256_w0(K, V, L, c, tab, lb);
    if (c.W == 4)
        return avx512 ? sweep512_w4(K, V, L, c, tab, lb) : sweep256_w4(K, V, L, c, tab, lb);
    return avx512 ? sweep512_w5(K, V, L, c, tab, lb) : sweep256_w5(K, V, L, c, tab, lb);
}
#endif

int main(int argc, char **argv)
{
#if !DC_X86
    (void)argc;
    (void)argv;
    printf("decode_ceiling: x86 only\n");
    return 0;
#else
    const int64_t L = argc > 1 ? strtoll(argv[1], NULL, 10) : 32768;
    const int rounds = argc > 2 ? atoi(argv[2]) : 15;
    if (L < 1024 || rounds < 1 || rounds > MAX_ROUNDS || argc == 4 || argc == 5 || argc > 8) {
        fprintf(stderr,
                "usage: decode_ceiling [keys (>= 1024) [rounds (1 .. %d) [T dist W [pages "
                "[blk]]]]]\n",
                MAX_ROUNDS);
        return 2;
    }
    /* the library's choice, so that TA_ARCH=avx2 measures what an AVX2 core's kernels see */
    const int avx512 = ta_active_isa() == TA_ISA_AVX512 || ta_active_isa() == TA_ISA_AVX512BF16;
    if (!avx512 && ta_active_isa() != TA_ISA_AVX2) {
        printf("decode_ceiling: needs the library on its avx2 or avx512 kernels (this CPU or "
               "TA_ARCH chose %s)\n",
               ta_isa_name(ta_active_isa()));
        return 0;
    }
    const size_t halves = (size_t)L * HKV * D, bytes = 2 * halves * sizeof(uint16_t);
    const size_t huge = (size_t)2 << 20; /* aligned_alloc takes a multiple of the alignment */
    uint16_t *buf = aligned_alloc(huge, (bytes + huge - 1) / huge * huge); /* K, then V */
    if (!buf) {
        fprintf(stderr, "decode_ceiling: out of memory\n");
        return 1;
    }
#ifdef MADV_HUGEPAGE
    madvise(buf, bytes, MADV_HUGEPAGE);
#endif
    for (size_t i = 0; i < 2 * halves; i++) buf[i] = (uint16_t)(0x3000 + (i & 0x3ff));
    const uint16_t *K = buf, *V = buf + halves;
    const ta_isa isa = avx512 ? TA_ISA_AVX512 : TA_ISA_AVX2;
    printf("B1 Hkv%d D%d float16 cache of %lld keys (%.0f MiB of K and V), %s, 1 thread\n", HKV,
           D, (long long)L, (double)bytes / (1 << 20), ta_isa_name(isa));

    static const dc_cfg std_cfgs[] = {
        {64, 1, 0, 0, 0},  {64, 1, 4, 0, 0},  {64, 1, 4, 1, 0}, {64, 1, 5, 0, 0},
        {32, 2, 4, 0, 0},  {16, 4, 4, 0, 0},  {64, 1, 0, 1, 0}, {64, 1, 0, 1, 16},
        {64, 1, 0, 1, 32}, {64, 1, 0, 1, 64}, {64, 1, 4, 1, 32}, {64, 1, 4, 1, 64}};
    dc_cfg one = {0, 0, 0, 0, 0};
    if (argc > 5) {
        one = (dc_cfg){atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), argc > 6 ? atoi(argv[6]) : 0,
                       argc > 7 ? atoi(argv[7]) : 0};
        if (one.T < 1 || one.T > 1024 || one.dist < 1 || one.dist > 64 ||
            (one.W != 0 && one.W != 4 && one.W != 5) || one.pages < 0 || one.pages > 1 ||
            one.blk < 0 || one.blk > L / 2 || (one.blk & (one.blk - 1)) ||
            (one.blk && L % one.blk)) {
            fprintf(stderr, "decode_ceiling: T in 1 .. 1024, dist in 1 .. 64, W 0, 4 or 5, "
                            "pages 0 or 1, blk 0 or a power of 2 dividing keys, up to keys / 2\n");
            free(buf);
            return 2;
        }
    }
    int32_t *tab = malloc((size_t)L * sizeof *tab); /* room for blocks of one key */
    if (!tab) {
        fprintf(stderr, "decode_ceiling: out of memory\n");
        free(buf);
        return 1;
    }
    const dc_cfg *cfgs = argc > 5 ? &one : std_cfgs;
    const size_t ncfg = argc > 5 ? 1 : sizeof std_cfgs / sizeof std_cfgs[0];
    float sink = 0.0f;
    for (size_t ci = 0; ci < ncfg; ci++) {
        const dc_cfg c = cfgs[ci];
        /* the bench's scatter (kv_decode_paged): a random permutation of the blocks
         * (Fisher-Yates, fixed seed) */
        const int64_t nb = c.blk ? L / c.blk : 0;
        uint64_t rng = 0x9e3779b97f4a7c15ULL;
        for (int64_t b = 0; b < nb; b++) tab[b] = (int32_t)b;
        for (int64_t b = nb - 1; b > 0; b--) {
            const int64_t o = (int64_t)(bench_xorshift64(&rng) % (uint64_t)(b + 1));
            const int32_t t = tab[b];
            tab[b] = tab[o];
            tab[o] = t;
        }
        int lb = 0;
        while (c.blk >> lb > 1) lb++;
        double ts[MAX_ROUNDS], gb[MAX_ROUNDS], ratio[MAX_ROUNDS];
        for (int r = 0; r < rounds; r++) {
            const double t0 = bench_seconds_now();
            sink += sweep(avx512, K, V, L, c, c.blk ? tab : NULL, lb);
            ts[r] = bench_seconds_now() - t0;
            const char *why = bench_read_bandwidth(&gb[r], isa, 1, (const float *)(void *)buf,
                                                   (int64_t)(bytes / sizeof(float)), 1);
            if (why) {
                fprintf(stderr, "decode_ceiling: the plain read is not measured: %s\n", why);
                free(tab);
                free(buf);
                return 1;
            }
            ratio[r] = (double)bytes / ts[r] * 1e-9 / gb[r];
        }
        const double t = bench_median(ts, rounds), g = bench_median(gb, rounds);
        char paged[48] = "";
        if (c.blk)
            snprintf(paged, sizeof paged, ", paged (%d keys, %d KiB)", c.blk,
                     c.blk * HKV * D * 2 / 1024);
        printf("tiles of %3d keys, region %d tile(s) ahead, %d FMAs a vector%s%s: %7.3f ms %5.1f "
               "GB/s %5.1f ns a pair; plain read %5.1f GB/s; ratio %.3f\n",
               c.T, c.dist, c.W, c.pages ? ", pages ahead" : "", paged, t * 1e3,
               (double)bytes / t * 1e-9, t * 1e9 / (double)(L * HKV),
               g, bench_median(ratio, rounds));
    }
    free(tab);
    free(buf);
    return sink == 42.0f ? 3 : 0; /* keeps the sums */
#endif
}
