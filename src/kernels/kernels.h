/* The kernel table: one set of micro-kernels per ISA, filled from the scalar
 * reference kernels and then overridden along the ISA's parent chain (as BLIS does),
 * chosen once from cpuid. The ISAs, their parents, CPU predicates and fillers are the
 * rows of isa_table.def. Contracts: docs/kernels.md. */
#ifndef TA_KERNELS_H
#define TA_KERNELS_H

#include "core/dtype.h"
#include "tensorattn.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* The largest MR x NR tile (floats) an SGEMM micro-kernel may compute: the GEMM driver
 * (src/ops/gemm.c) runs edge tiles on a local tile of this size. The gemm template
 * asserts it at compile time and every table is checked against it when it is built. */
#define TA_SGEMM_TILE_MAX 512

/* Lines a kernel requests into the caches while it computes: a prefetch stream, one
 * 64-byte line per step of its inner loop, spread over the call (bursts of software
 * prefetches are mostly dropped: on the Zen 5, 32 lines requested at once arrived little
 * sooner than none; docs/kernels.md, "Prefetch streams"). The stream is spans of bytes
 * [a, b), requested at a, a + 64, ... in order; the kernel advances next (and a of the
 * span it stops in), never past end, and leaves the rest for the caller's next call.
 * Prefetches change no result. */
/* 1 where a stream's requests go into L2 (prefetcht1) instead of L1 (prefetcht0): Intel
 * cores, whose L1 has few fill buffers for misses; set once, with the tables. Measured on
 * an Emerald Rapids Xeon (session 18, B1 H32 Hkv8 D128 KV cache, 32k keys from memory,
 * driver alternating the hint call by call, medians of 21): bfloat16 1 thread 8.9 ->
 * 10.4 GB/s, 2 threads 20.2 -> 22.0, float32 2 threads 20.4 -> 22.9, paged16 bfloat16
 * 11.1 -> 12.1; the seed's causal case, L = 128 and L = 2048 unchanged. */
extern int ta_pf_stream_l2;
/* 1 where a decode sweep requests, at each tile's start, one line of each 4 KiB page of
 * the tile after its region (sdpa_fused_tiles.c, sweep_pages): every core but Intel's;
 * set once, with the tables. Measured on the Zen 4 (session 32: float32 from memory
 * 0.77 - 0.82 -> 0.85 - 0.92 of the plain read on 4 KiB pages). On the Emerald Rapids
 * Xeon (session 36, B1 H32 Hkv8 D128 cache of 64k keys from memory, 1 thread, driver,
 * medians of 11, three rounds, one build's switch flipped run by run) they cost: bfloat16
 * 25.4 - 25.7 -> 23.8 - 24.5 ms with them off on huge pages, 25.8 - 26.9 -> 23.9 - 25.2
 * on 4 KiB pages; float32 45.2 - 45.7 -> 44.2 - 45.1 (huge), 45.5 - 46.2 -> 44.4 - 48.7
 * (4 KiB); 2 threads within the noise; build/decode_ceiling (float16, 4 FMAs a vector)
 * 0.757 of the plain read without, 0.698 with. */
extern int ta_sweep_pages;
/* A core's L2 in bytes as cpuid gives it, TA_L2_BYTES_DEFAULT where it does not; set
 * once, with the tables. */
#define TA_L2_BYTES_DEFAULT ((int64_t)1 << 20)
extern int64_t ta_l2_bytes;

typedef struct ta_pf_span {
    const char *a, *b;
} ta_pf_span;
typedef struct ta_pf {
    ta_pf_span *next, *end;
} ta_pf;

/* The span after the current one (*pf->next, done), now the current one; {NULL, NULL}
 * past the end. Out of line: a kernel's loop keeps only the current span's two pointers
 * in registers. */
static __attribute__((noinline, unused)) ta_pf_span ta_pf_next(ta_pf *pf)
{
    if (++pf->next < pf->end) return *pf->next;
    pf->next = pf->end;
    return (ta_pf_span){NULL, NULL};
}

/* Appends to a stream's spans sp[*n .. cap) rows [0, rows) of `bytes` bytes each at
 * base + r * ld bytes: one span when they follow each other, else one a row (as many as
 * fit). */
static inline void ta_pf_add_rows(ta_pf_span *sp, int64_t *n, int64_t cap, const void *base,
                                  int64_t ld, int64_t bytes, int64_t rows)
{
    const char *b = (const char *)base;
    if (ld == bytes && rows > 0 && *n < cap)
        sp[(*n)++] = (ta_pf_span){b, b + rows * bytes};
    else
        for (int64_t r = 0; r < rows && *n < cap; r++)
            sp[(*n)++] = (ta_pf_span){b + r * ld, b + r * ld + bytes};
}

/* A kernel's start, step and end on a stream pf (NULL: none), its current span [pf_a,
 * pf_b) in registers: a step requests the line at pf_a, then moves to the next line or
 * the next span. */
#define TA_PF_BEGIN(pf)                                                                     \
    const char *pf_a = (pf) && (pf)->next < (pf)->end ? (pf)->next->a : NULL,               \
               *pf_b = (pf) && (pf)->next < (pf)->end ? (pf)->next->b : NULL
#define TA_PF_STEP(pf) TA_PF_STEP_HINT(pf, ta_pf_stream_l2)
/* The same with the hint given: l2 nonzero, prefetcht1; else prefetcht0. */
#define TA_PF_STEP_HINT(pf, l2)                                                             \
    do {                                                                                    \
        if (pf_a < pf_b) {                                                                  \
            if (l2) __builtin_prefetch(pf_a, 0, 2);                                         \
            else __builtin_prefetch(pf_a, 0, 3);                                            \
            pf_a += 64;                                                                     \
            if (pf_a >= pf_b) {                                                             \
                const ta_pf_span pf_n = ta_pf_next(pf);                                     \
                pf_a = pf_n.a;                                                              \
                pf_b = pf_n.b;                                                              \
            }                                                                               \
        }                                                                                   \
    } while (0)
#define TA_PF_END(pf)                                                                       \
    do {                                                                                    \
        if ((pf) && (pf)->next < (pf)->end) (pf)->next->a = pf_a;                           \
    } while (0)

typedef struct ta_kernels {
    ta_isa isa;       /* set by dispatch.c from the table row, after the fills */
    const char *name; /* the row's name, as ta_isa_name */

    /* SGEMM micro-kernel (docs/kernels.md): on one MR x NR tile of C (row stride
     * rs_c, unit column stride), C = alpha * A_p B_p + beta * C, where A_p[i,p] =
     * a[i*rs_a + p*cs_a] (a packed MR-row panel: rs_a = 1, cs_a = MR; or rows read in
     * place) and B_p an NR-column panel packed k-major (b[p*NR + j]), 64-byte aligned
     * and zero-padded to NR. beta == 0: C is not read. k >= 0. */
    void (*sgemm_ukr)(int64_t k, float alpha, const float *a, int64_t rs_a, int64_t cs_a,
                      const float *b, float beta, float *c, int64_t rs_c);
    int sgemm_mr, sgemm_nr; /* the tile the micro-kernel computes */
    /* Cache blocks for this kernel (multiples of MR / NR where they apply): KC rows of
     * the packed panels per pass, MC rows of A per packed block, NC columns of B. */
    int sgemm_kc, sgemm_mc, sgemm_nc;

    /* ---- attention (FlashAttention-2 forward; docs/kernels.md "Attention"; filled by
     * ta_attn_fill_<isa> in src/kernels/attn_<isa>.c). Lanes are queries: a query tile
     * of attn_mq rows is packed transposed, qp[p * attn_mq + r] = scale * Q[r, p], and a
     * score tile is s[j * attn_mq + r] (key j, query row r). */
    int attn_mq; /* query rows per tile: a multiple of attn_vl and of attn_pr */
    int attn_pr; /* rows per P.V micro-tile */
    int attn_vl; /* vector lanes of the attention kernels: attn_pv's ldo is a multiple */
    /* s [nk, mq] = qp^T K^T for nk keys, key j at k[j * ldk + 0 .. d-1]. rowk: NULL, or
     * per row the keys it needs (may skip computing scores past them). pf: NULL, or a
     * prefetch stream it advances a line every other step along d. */
    void (*attn_qk)(float *s, const float *qp, const float *k, int64_t ldk, int64_t nk,
                    int64_t d, const int32_t *rowk, ta_pf *pf);
    /* The same scores for the rows r < mq (<= attn_mq) only, from q rows untransposed
     * (q[r * ldq + p], scaled) by dot products along d: for tiles of few real rows
     * (decode), where attn_qk's lanes would be mostly empty. Rows >= mq of s are not
     * touched. Another summation order than attn_qk's (docs/kernels.md). */
    void (*attn_qk_rows)(float *s, const float *q, int64_t ldq, int64_t mq, const float *k,
                         int64_t ldk, int64_t nk, int64_t d);
    int attn_rows_max; /* the driver uses attn_qk_rows on tiles of at most this many rows */
    /* Online softmax step over s [nk, attn_mq] with running max m, sum l (per row), for
     * the vectors of attn_vl rows that hold a row < mq (the others are not touched):
     * s <- exp(s - m'), alpha <- exp(m - m'), l <- l * alpha + sum, m <- m'. rowk NULL,
     * or per row the keys it sees (attn_mq counts): keys j >= rowk[r] count as -inf
     * scores whatever s holds there (p = 0), bitwise as if blocked before the call. */
    void (*attn_softmax)(float *s, float *m, float *l, float *alpha, int64_t nk, int64_t mq,
                         const int32_t *rowk);
    /* 0: attn_softmax and attn_softmax_rows compute as written above. 1 (AVX-512): in
     * base 2 (one operation fewer an exp; docs/kernels.md, "The softmax in base 2"), with
     * L = TA_LOG2E_F, u = m' (0 when m' = -inf), uL = fl(u L) and the carry c = u L - uL
     * where |uL| < TA_EXP2_BIG (else 0): p = 2^(fl(s L - uL)) when every row < mq of the
     * vector has |uL| < TA_EXP2_BIG, else 2^(fl(fl(s - u) L) + c); alpha = 2^(fl(m - u) L
     * + c - c_m) (c_m: m's carry). So p, l and the o that P.V sums from those p carry
     * the factor 2^c (|c| <= 2^-6): whoever reads l beside m (the LSE, a merge of partial
     * results) multiplies it by ta_softmax_state_scale(k, m) = 2^-c; o / l needs nothing.
     * (L ln 2 = 1 - 1.3e-8: the scores as if scaled by that, below the rounding of the
     * softmax scale itself.) */
    int attn_softmax_exp2;
    /* o [mq rows, ldo] = o * alpha + p^T V for the rows < mq (rows >= mq not touched),
     * columns < dv (v: nk rows of dv, stride ldv); alpha NULL: o = p^T V (o not read: the
     * first tile of a work item, on a workspace nobody zeroed). rowk as in attn_qk (p
     * must be 0 past each row's need). pf: NULL, or a prefetch stream it advances a line
     * a key of its tiles of many rows (mq > attn_rows_max). */
    void (*attn_pv)(float *o, int64_t ldo, const float *p, const float *alpha,
                    const float *v, int64_t ldv, int64_t nk, int64_t dv, int64_t mq,
                    const int32_t *rowk, ta_pf *pf);
    /* y[i] = expf(x[i]), i < n (the exp the softmax step uses; accuracy in docs). */
    void (*attn_exp)(float *y, const float *x, int64_t n);
    /* A transposed, scaled copy of n rows (the query tile for attn_qk with ld = attn_mq;
     * the backward's K^T and V^T tiles): dst[p * ld + r] = scale * src[off[r] + p * s3]
     * for p < d, r < n (<= ld); dst[p * ld + r] = 0 for n <= r < ld. */
    void (*attn_pack_t)(float *dst, int64_t ld, const float *src, const int64_t *off,
                        int64_t s3, int64_t n, int64_t d, float scale);
    /* An output row: dst[c] = src[c] * alpha for c < n (zero: 0 whatever src holds); stream:
     * non-temporal stores where dst is aligned to the vector (the caller fences: an output
     * far larger than the caches); the same products either way. */
    void (*attn_scale_row)(float *dst, const float *src, float alpha, int zero, int64_t n,
                           int stream);
    /* The online softmax's output rows: dst[r * ldd + c] = src[r * lds + c] * (1 / l[r])
     * (one reciprocal a row, then the products of attn_scale_row) for r < rows, c < n; a
     * row whose l is 0 gets zeros whatever src holds (a NaN l gives NaN); stream as
     * attn_scale_row. */
    void (*attn_finish_rows)(float *dst, int64_t ldd, const float *src, int64_t lds,
                             const float *l, int64_t rows, int64_t n, int stream);

    /* ---- attention backward (FlashAttention-2 backward, src/ops/sdpa_backward_fused.c;
     * filled by ta_attn_bwd_fill_<isa> in src/kernels/attn_bwd_<isa>.c; docs/kernels.md,
     * "Attention backward"). */
    /* C [m, n] (row stride ldc, unit columns) = (acc ? C : 0) + A [m, k] B [k, n] with
     * A[i, p] = a[i * rsa + p * csa], B[p, j] = b[p * ldb + j]; one FMA chain per element
     * in p order; acc == 0: C is not read; only the n columns are touched. pf: a
     * prefetch stream (NULL: none) advanced a line every other step of p. */
    void (*attn_bwd_gemm)(float *c, int64_t ldc, const float *a, int64_t rsa, int64_t csa,
                          const float *b, int64_t ldb, int64_t m, int64_t n, int64_t k, int acc,
                          ta_pf *pf);
    /* attn_bwd_gemm by tiles of its own micro-tile's rows, each over the k steps
     * [min klo[r], max khi[r]) and the columns [0, max nhi[r]) of its rows r (each NULL:
     * all): for a block the causal diagonal cuts, where the caller asserts the terms
     * left out are zeros (so the full product's bits but for the sign of a zero).
     * Columns past a tile's range: 0 when !acc, else untouched. */
    void (*attn_bwd_gemm_ranged)(float *c, int64_t ldc, const float *a, int64_t rsa,
                                 int64_t csa, const float *b, int64_t ldb, int64_t m,
                                 int64_t n, int64_t k, int acc, const int32_t *klo,
                                 const int32_t *khi, const int32_t *nhi, ta_pf *pf);
    /* attn_bwd_gemm_ranged's S = Q K^T and dP = dO V^T for bfloat16 operands, where the
     * CPU has a bfloat16 dot product (AVX512_BF16's vdpbf16ps, as attn_qk_rows_bf16dot),
     * or NULL: C [m, n] (row stride ldc, unit columns) = A [m, k] B [k, n], k even, A's
     * rows bfloat16 (A[i, p] = a[i * lda + p]), B as pairs of bfloat16 (b[(p / 2) * ldb
     * + j] holds B[p, j] in its lower 16 bits and B[p + 1, j] in its upper); by tiles of
     * its micro-tile's rows, each over the columns [0, max nhi[r]) of its rows r (nhi
     * NULL: all), its other columns 0; only the n columns are written. Each element is
     * one chain over the pairs in order, whatever its place; pf as attn_bwd_gemm's, a
     * line a pair. */
    void (*attn_bwd_gemm_bf16dot)(float *c, int64_t ldc, const uint16_t *a, int64_t lda,
                                  const uint32_t *b, int64_t ldb, int64_t m, int64_t n,
                                  int64_t k, const int32_t *nhi, ta_pf *pf);
    /* Rows r < m (stride ld, n columns): s <- P = exp((s * scale - lse[r]) - lo[r]),
     * dp <- dS = P * (dp - di[r]); both rows 0 where lse[r] == -inf. lo (NULL: zeros) is
     * the part of a huge LSE that a float32 LSE cannot hold (ta_sdpa_lse_split). */
    void (*attn_bwd_dsoftmax)(float *s, float *dp, int64_t ld, const float *lse,
                              const float *lo, const float *di, int64_t m, int64_t n, float scale,
                              void (*exp_row)(float *, const float *, int64_t));
    /* The backward's D_i = sum_c x[c] y[c] of n floats, in double: term c (a product, then
     * a sum, each rounded to double) into chain c mod 8 for c below the last multiple of
     * 8, the chains added as ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)), then the rest of
     * the terms in order. The same bits on every ISA. */
    double (*attn_row_dot)(const float *x, const float *y, int64_t n);

    /* ---- conversions between float32 and the storage types (docs/kernels.md,
     * "Conversions"; filled by ta_cvt_fill_<isa> in src/kernels/cvt_<isa>.c): n >= 0
     * contiguous elements, any alignment, nothing read or written past n; dst and src
     * do not overlap. Widening is exact; narrowing rounds to nearest-even (overflow to
     * +-inf); NaN stays NaN, quiet, as in src/core/dtype.h: every ISA gives the same
     * bits as the scalar conversions there. */
    void (*cvt_f16_f32)(float *dst, const uint16_t *src, int64_t n);
    void (*cvt_f32_f16)(uint16_t *dst, const float *src, int64_t n);
    void (*cvt_bf16_f32)(float *dst, const uint16_t *src, int64_t n);
    void (*cvt_f32_bf16)(uint16_t *dst, const float *src, int64_t n);
    /* ---- attention variants (filled by ta_attn_variants_fill_<isa> in
     * src/kernels/attn_variants_<isa>.c; docs/kernels.md, "Attention variants"). */
    /* s[i] = cap * tanh(s[i] / cap) for i < n, in place (2^-126 <= cap <= 2^126): the
     * softcap of a score tile. */
    void (*attn_softcap)(float *s, int64_t n, float cap);

    /* ---- few-row kernels on typed rows (filled by ta_attn_rows_fill_<isa> in
     * src/kernels/attn_rows_<isa>.c; docs/kernels.md, "Decode: the few-row kernels").
     * Index: 0 float32, 1 float16, 2 bfloat16 rows; half rows are widened in registers.
     * For tiles of mq <= 8 rows (the driver: <= attn_rows_max) with d and dv multiples
     * of attn_vl. K and V rows come as a table of pointers, one per key (a paged cache's
     * blocks, or rows at a stride), with avail >= nk entries: rows nk .. avail - 1 (the
     * next keys) are only prefetched, TA_ROWS_AHEAD rows ahead of the one in use.
     * Every entry is read at koff (K's table) or voff (V's) bytes past where it points:
     * the kv heads of a decode sweep share one table per tile, each head at its own
     * offset (a head's rows lie a fixed distance from the first head's, in a
     * contiguous and a paged cache alike).
     * qk: s[j * mqs + r] = q_r . k_j (q rows scaled, q[r * ldq + p]) for r < mq, j < nk;
     *     other rows of s untouched. Summation: lane partials along d, then the lanes.
     *     For bfloat16 (index 2) q's rows come permuted: in each whole block of 2 attn_vl
     *     elements, the even-indexed ones, then the odd (a trailing block of attn_vl as
     *     it is), so that a K block widens by a shift and a mask. attn_vl <= 64.
     *     v: NULL, or a second table (avail entries) prefetched with K's rows (the same
     *     keys' V rows, vbytes each), so that they are in L2 when P.V reads them.
     * pv: o[r] = o[r] * alpha[r] + sum_j p[j * mqs + r] v_j for r < mq, columns < dv,
     *     keys in order (bitwise attn_pv's results).
     * pf: NULL, or the caller's prefetch stream, which then replaces the rows-ahead
     *     requests (nothing is prefetched from avail or v): the call requests every line
     *     of it (when nk > 0), spread evenly over its steps (qk: the d steps of each
     *     key block, a block's share at a time; pv: its keys of each column group). A
     *     decode sweep hands each call its share of the next tile of all kv heads, in
     *     address order (docs/inference.md, "Decode order"). */
    void (*attn_qk_rows_kv[3])(float *s, int64_t mqs, const float *q, int64_t ldq, int64_t mq,
                               const void *const *k, int64_t koff, int64_t nk, int64_t d,
                               int64_t avail, const void *const *v, int64_t voff,
                               int64_t vbytes, ta_pf *pf);
    /* attn_softmax's step for the rows r < mq (<= attn_rows_max) of s [nk, mqs] only
     * (m, l, alpha of rows >= mq untouched): lanes hold (key, row) pairs. With mqs the
     * smallest power of two >= mq (1, 2, 4 or 8) the tile is worked in place on vectors
     * that hold VL / mqs keys (scalar code: copies, but for one row at stride 1), and s
     * needs room for nk rounded up to VL / mqs keys: rows past nk are overwritten with
     * zeros. */
    void (*attn_softmax_rows)(float *s, int64_t mqs, float *m, float *l, float *alpha,
                              int64_t nk, int64_t mq);
    void (*attn_pv_rows_kv[3])(float *o, int64_t ldo, const float *p, int64_t mqs,
                               const float *alpha, const void *const *v, int64_t voff,
                               int64_t nk, int64_t dv, int64_t mq, int64_t avail, ta_pf *pf);
    /* attn_qk_rows_kv's bfloat16 entry for a query that is bfloat16 itself, where the CPU
     * has a bfloat16 dot product (AVX512_BF16's vdpbf16ps: a lane adds two products,
     * each exact in float32, rounding to nearest-even; bfloat16 denormals read as zero
     * and a denormal result flushes to zero), or NULL: s[j * mqs + r] = scale (q_r .
     * k_j), the dot in float32 from q's rows as bfloat16 ([mq rows, ldq] elements, in
     * order, not scaled) and K's. d a multiple of attn_vl; otherwise as
     * attn_qk_rows_kv (tables, avail, v, pf). Summation: lane partials of element pairs
     * along d, then the lanes, then one product by scale. Half the instructions of the
     * float32 FMAs and no widening of K (docs/kernels.md, "Decode: the few-row
     * kernels"). */
    void (*attn_qk_rows_bf16dot)(float *s, int64_t mqs, const uint16_t *q, int64_t ldq,
                                 int64_t mq, float scale, const void *const *k, int64_t koff,
                                 int64_t nk, int64_t d, int64_t avail, const void *const *v,
                                 int64_t voff, int64_t vbytes, ta_pf *pf);
    /* attn_qk for a bfloat16 query on bfloat16 K rows with the same dot product, or NULL:
     * s[j * attn_mq + r] = scale (q_r . k_j) for the tile's attn_mq rows and nk key rows of
     * k (stride ldk elements, d of them read, d even); qp holds the tile's q rows as
     * bfloat16 pairs, not scaled: qp[(p / 2) * 2 attn_mq + 2 r + p % 2] = q[r][p] (rows past
     * the tile's zero); rowk and pf as attn_qk's. Summation: the pairs along d in order in
     * one chain per (key, row), then the product by scale. */
    void (*attn_qk_bf16dot)(float *s, const uint16_t *qp, const uint16_t *k, int64_t ldk,
                            int64_t nk, int64_t d, float scale, const int32_t *rowk,
                            ta_pf *pf);
} ta_kernels;

/* A row of n elements of a storage dtype (float32, float16, bfloat16) at src, element
 * stride `stride`, widened into dst, and n floats rounded back into one (nearest-even):
 * ta_row_to_f32 / ta_row_from_f32 (core/dtype.h), the same bits, but a unit-stride half
 * row goes straight to table k's converter: the fused paths convert a row at a time,
 * and ta_convert_strided's lookup of the active table (a pthread_once a call) cost a
 * float16 prefill more than the conversions (perf, B4 H8 L512 D64: ~8% of its samples). */
static inline void ta_k_row_to_f32(const ta_kernels *k, float *dst, const void *src,
                                   ta_dtype dt, int64_t n, int64_t stride)
{
    if (stride == 1 && dt == TA_F16) k->cvt_f16_f32(dst, (const uint16_t *)src, n);
    else if (stride == 1 && dt == TA_BF16) k->cvt_bf16_f32(dst, (const uint16_t *)src, n);
    else ta_row_to_f32(dst, src, dt, n, stride);
}

static inline void ta_k_row_from_f32(const ta_kernels *k, void *dst, ta_dtype dt,
                                     const float *src, int64_t n, int64_t stride)
{
    if (stride == 1 && dt == TA_F16) k->cvt_f32_f16((uint16_t *)dst, src, n);
    else if (stride == 1 && dt == TA_BF16) k->cvt_f32_bf16((uint16_t *)dst, src, n);
    else ta_row_from_f32(dst, dt, src, n, stride);
}

/* log2(e) rounded to float, and the largest |fl(u L)| whose carry a base-2 softmax
 * keeps (attn_softmax_exp2): past it a shift's carry would not fit (|c| <= 2^-6 here). */
#define TA_LOG2E_F 0x1.715476p+0f
#define TA_EXP2_BIG 0x1p19f

/* The factor that turns the l (and o) of a softmax state with running max m into the
 * natural sum_j exp(s_j - m): 2^-c (attn_softmax_exp2; exact: the residual of a float
 * product is a double's), 1 for a natural table, a non-finite m or |fl(m L)| >= 2^19. */
static inline double ta_softmax_state_scale(const ta_kernels *k, float m)
{
    const float mL = m * TA_LOG2E_F;
    if (!k->attn_softmax_exp2 || !isfinite(m) || !(fabsf(mL) < TA_EXP2_BIG)) return 1.0;
    return exp2((double)mL - (double)m * (double)TA_LOG2E_F);
}

/* attn_qk's row bounds by query vector (its implementations, attn_template.h and the
 * bfloat16 tile kernel): need[q] = the most keys a row of vector q (rows q vl .. q vl +
 * vl - 1) needs, nk without rowk. */
static inline void ta_qk_vector_needs(int32_t *need, int qv, int vl, const int32_t *rowk,
                                      int64_t nk)
{
    for (int q = 0; q < qv; q++) {
        need[q] = rowk ? 0 : (int32_t)nk;
        for (int r = 0; rowk && r < vl; r++)
            if (rowk[q * vl + r] > need[q]) need[q] = rowk[q * vl + r];
    }
}

/* The query vectors from the first to the last that needs key j (need from
 * ta_qk_vector_needs): their count (0: none), the first in *q0. */
static inline int ta_qk_vectors_at(const int32_t *need, int qv, int64_t j, int *q0)
{
    int first = qv, last = -1;
    for (int q = 0; q < qv; q++)
        if (need[q] > j) {
            if (q < first) first = q;
            last = q;
        }
    *q0 = first;
    return last >= first ? last - first + 1 : 0;
}

/* Rows ahead of the one in use that the few-row kernels prefetch (attn_qk_rows_kv). */
#define TA_ROWS_AHEAD 16

/* Rows ahead that attn_qk_rows and attn_pv's few-row tiles (mq <= attn_rows_max) request
 * into L2, line by line as they read each K or V row, where rows follow each other in a
 * stream (a decode step over [B, H, L, D]): TA_STREAM_PREFETCH_ROWS on Intel cores and
 * AMD's from Zen 5 (family 0x1A) on, 0 (none) elsewhere; set once, with the tables.
 * Measured (docs/kernels.md, "Decode: streaming K and V"): on a two-port Xeon, 1 thread,
 * B1 H32 Lk4096 D128 float32, 11.8 ms without against 10.2-10.4 with 8 - 32 rows; on a
 * Zen 4 core software prefetches on top of the sequential streams cost bandwidth (21 ->
 * 16 GB/s); on a Zen 5 (session 14, driver, medians of 9 random-order alternations) the
 * same step 5.23 -> 4.44 ms on 1 thread and 3.71 -> 3.32 on 2. The kernels read past
 * the tile only through these prefetches, which never fault. Results do not depend on
 * it. */
#define TA_STREAM_PREFETCH_ROWS 16
extern int ta_stream_prefetch_rows;

/* 1 where those stream prefetches, and a decode sweep's region (the few-row kernels'
 * ta_pf streams, TA_PF_STEP_HINT: the next tile of every kv head, 128 - 256 KiB of K
 * and V a tile), go into L1 (prefetcht0) instead of L2 (prefetcht1): AMD from Zen 5
 * (family 0x1A) on; set once, with the tables. Measured on the Zen 5 (session 17, B1
 * H32 Lk4096 D128 float32 from memory, driver, medians of 7 - 9 random-order rounds):
 * 1 thread 4.31 -> 3.93 - 3.96 ms, 2 threads 2.97 -> 2.70; 8, 24, 32 and 48 rows ahead
 * were no better than 16; the region 5.92 ms against 6.95 with prefetcht1 (session 15).
 * Intel keeps the L2 hint measured on the Xeon (session 8). On a Zen 4 (32 KiB L1;
 * session 27, B1 H32 Hkv8 D128 cache of 32k keys from memory, driver, medians of 21,
 * three alternations) the region into L1 evicted the tile at work: float16 1 thread
 * 10.7 - 10.9 -> 7.3 - 8.2 ms with prefetcht1, 2 threads 5.6 - 6.4 -> 4.0 - 4.2;
 * bfloat16 10.0 - 10.8 -> 6.9 - 7.1 and 5.4 - 5.7 -> 4.2 - 4.3; float32 19.0 - 19.5 ->
 * 13.7 and 10.3 - 11.0 -> 9.2; paged (16) bfloat16 10.5 - 11.6 -> 7.2 - 8.0 and 6.0 -
 * 6.4 -> 4.6 - 5.0. */
extern int ta_stream_prefetch_l1;

/* 1 where a vector result in the denormals costs a microcode assist (Intel cores: ~10x
 * an exp's time; docs/kernels.md, "No denormal results on the fast path"), 0 elsewhere;
 * set once, with the tables. The softmax and exp kernels then take the exp that masks
 * the lanes below -87 and computes the rare denormal ones again (1) or the one-pass exp
 * (0: no compare, no branch; ~10% of the exp loop on a Zen 5). The bits are the same. */
extern int ta_exp_denormal_assist;

/* Whether the CPU is Intel's (cpuid's vendor string; 0 off x86). */
int ta_cpu_is_intel(void);
/* A core's L2 cache in bytes (cpuid; 0 where unknown). */
int64_t ta_cpu_l2_bytes(void);
/* An AMD CPU's family (base + extended: 0x19 Zen 3 / Zen 4, 0x1A Zen 5), else 0. */
int ta_cpu_amd_family(void);

/* The table in use (the best usable, or TA_ARCH's choice). Never NULL. */
const ta_kernels *ta_kernels_active(void);
/* The table for isa, or NULL if this CPU cannot run it or its table failed the checks
 * below when it was built (an internal error: see ta_kernels_init_error). */
const ta_kernels *ta_kernels_for(ta_isa isa);
/* NULL, or what was wrong with the first table that failed ta_kernels_check when the
 * tables were built (that ISA is then never used; detection and TA_ARCH skip it). The
 * tests require NULL. */
const char *ta_kernels_init_error(void);
/* Checks the limits a table must meet (every entry set; MR x NR <= TA_SGEMM_TILE_MAX;
 * cache blocks multiples of MR / NR; attn_mq a multiple of attn_vl and attn_pr;
 * attn_rows_max in 1 .. attn_mq).
 * Returns 0, or -1 with a sentence in why[0 .. n-1]. */
int ta_kernels_check(const ta_kernels *k, char *why, size_t n);

/* Every row of isa_table.def declares its CPU predicate and filler here, and the
 * fillers its templates define (gemm_template.h, attn_template.h, attn_bwd_template.h,
 * cvt_template.h, attn_variants_template.h instantiated by gemm_<name>.c, attn_<name>.c,
 * attn_bwd_<name>.c, cvt_<name>.c, attn_variants_<name>.c), which the ISA's filler
 * (kernels_<name>.c) calls. */
#define TA_ISA(isa, name, parent, supported, fill, arch, cflags)                              \
    int supported(void);                                                                     \
    void fill(ta_kernels *k);                                                                \
    void ta_gemm_fill_##name(ta_kernels *k);                                                 \
    void ta_attn_fill_##name(ta_kernels *k);                                                 \
    void ta_attn_bwd_fill_##name(ta_kernels *k);                                             \
    void ta_cvt_fill_##name(ta_kernels *k);                                                  \
    void ta_attn_variants_fill_##name(ta_kernels *k);                                        \
    void ta_attn_rows_fill_##name(ta_kernels *k);
#include "kernels/isa_table.def"
#undef TA_ISA

#endif
