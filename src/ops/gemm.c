/* The float32 GEMM engine: BLIS-style blocking and packing around the per-ISA
 * micro-kernels of the kernel table (contracts: docs/kernels.md).
 *
 * For one problem, C[M,N] += A[M,K] B[K,N] runs as (BLIS's five loops)
 *   jc over N in NC columns:         pack B[pc.., jc..] into KC x NC (NR-column panels)
 *     pc over K in KC rows:
 *       ic over M in MC rows:        pack A[ic.., pc..] into MC x KC (MR-row panels)
 *         jr over the block in NR:   the B micro-panel stays in L1/L2 ...
 *           ir over the block in MR: ... while the A micro-panels stream from L2
 *             micro-kernel on one MR x NR tile of C.
 * The first KC pass applies the caller's beta, later passes accumulate (beta = 1).
 * A narrow block (few NR panels to amortise packing over) reads a unit-stride A in
 * place instead of packing it.
 *
 * Threads: the work is a list of items (batch index, chunk of rows or columns of C);
 * each item is done by one thread with its own packing buffers, so every element of C
 * is computed by one thread, with the k order fixed by KC alone: results are bitwise
 * identical for any thread count. One problem cut into column chunks may pack each
 * chunk's B for the whole of K, so that a thread done with its chunk can take blocks
 * of rows of another (gemm_stealing): the same arithmetic, whoever computes them. It
 * does so while a core has recently been seen busy (steal_hold); on idle cores the
 * chunks run as plain items, each block of B packed just before use.
 * Edge tiles (and a C whose columns are not unit stride) go through a local tile that
 * is first loaded from C, so they run the same arithmetic as interior tiles. */
#include "core/core.h"
#include "kernels/kernels.h"
#include "ops/gemm.h"
#include "core/workspace.h"

#include <omp.h>
#include <stdatomic.h>
#include <string.h>

/* Below this many multiply-adds in all, one thread: OpenMP start-up costs more. */
#define SERIAL_FMAS ((int64_t)1 << 18)
/* Blocks of C at most this wide read A in place (read_a_in_place): a row-major A (unit
 * column stride) in columns, a column-major one (unit row stride) in NR panels. */
#define DIRECT_A_ROW_COLS 512
#define DIRECT_A_COL_PANELS 1
/* Largest B (floats) a column chunk packs for the whole of K to be shared by stealing
 * (16 MiB: two chunks stay within the scratch block kept between calls). */
#define STEAL_B_FLOATS ((int64_t)1 << 22)
/* At most this many chunks (threads) share a problem by stealing. */
#define STEAL_MAX_CHUNKS 64
/* Calls that share their chunks' units after a sign of a busy core: an eighth of the
 * units (and at least 2) taken by threads other than their chunk's (one at the end is
 * the usual jitter of idle cores), or chunks run as plain items whose times per column
 * differ by more than STEAL_SKEW. */
#define STEAL_HOLD_CALLS 32
#define STEAL_SKEW 1.2

int ta_gemm_share_mode = -1;
/* The calls left that share units (steal_hold > 0: the chunks' B packed for all of K,
 * units taken by any thread), counted down by calls that see no sign of a busy core.
 * Sharing keeps a busy core from holding up the call (1024^3 on 2 threads with a busy
 * loop on one core: ~60 -> ~100 GFLOP/s, commit 50d75a8); on idle cores the plain items
 * are faster, their B blocks packed just before use and read from L2 (two-port Xeon,
 * GFLOP/s on 2 threads alternated in one process: 2048^3 416 -> 436, 1024^3 413 ->
 * 433). A process-wide hint (atomic); the results are the same either way. */
static atomic_int steal_hold;

typedef struct blocking {
    void (*ukr)(int64_t, float, const float *, int64_t, int64_t, const float *, float, float *,
                int64_t);
    int64_t mr, nr, kc, mc, nc;
} blocking;

/* One problem: C[M,N] = alpha A[M,K] B[K,N] + beta C, element strides. */
typedef struct problem {
    float *C;
    const float *A, *B;
    int64_t rsc, csc, rsa, csa, rsb, csb;
    int64_t M, N, K;
    float alpha, beta;
} problem;

/* ------------------------------------------------------------------ packing */

/* Packs `lanes` (<= W) vectors of length kc into dst[p*W + l] = src[l*ls + p*ks],
 * zero-filling lanes lanes..W-1. Inlined with a constant W so the copies unroll. */
static inline __attribute__((always_inline)) void
pack_panel(float *restrict dst, const float *restrict src, int64_t ls, int64_t ks,
           int64_t lanes, int64_t kc, const int64_t W)
{
    if (lanes == W && ls == 1) {
        for (int64_t p = 0; p < kc; p++)
            for (int64_t l = 0; l < W; l++) dst[p * W + l] = src[p * ks + l];
    } else if (lanes == W && ks == 1) {
        for (int64_t p = 0; p < kc; p++)
            for (int64_t l = 0; l < W; l++) dst[p * W + l] = src[l * ls + p];
    } else {
        for (int64_t p = 0; p < kc; p++) {
            for (int64_t l = 0; l < lanes; l++) dst[p * W + l] = src[l * ls + p * ks];
            for (int64_t l = lanes; l < W; l++) dst[p * W + l] = 0.0f;
        }
    }
}

/* Packs n vectors (src + l*ls for l < n, each kc long with step ks) as panels of W
 * lanes: panel q at dst + q*W*kc. A block: lanes are rows (ls = rsa, ks = csa);
 * B block: lanes are columns (ls = csb, ks = rsb). */
static void pack_block(float *dst, const float *src, int64_t ls, int64_t ks, int64_t n,
                       int64_t kc, int64_t W)
{
    if (ls == 1 && n >= W) {
        /* Unit-stride lanes (a row-major B): whole rows in order, one sequential stream
         * that the prefetchers follow, rather than W-wide strips at a stride of ks. */
        const int64_t full = n / W;
        for (int64_t p = 0; p < kc; p++)
            for (int64_t q = 0; q < full; q++)
                memcpy(dst + q * W * kc + p * W, src + p * ks + q * W,
                       (size_t)W * sizeof *dst);
        dst += full * W * kc;
        src += full * W;
        n -= full * W;
    }
    for (int64_t l0 = 0; l0 < n; l0 += W, dst += W * kc, src += W * ls) {
        int64_t lanes = TA_MIN(W, n - l0);
        switch (W) {
        case 4: pack_panel(dst, src, ls, ks, lanes, kc, 4); break;
        case 6: pack_panel(dst, src, ls, ks, lanes, kc, 6); break;
        case 8: pack_panel(dst, src, ls, ks, lanes, kc, 8); break;
        case 12: pack_panel(dst, src, ls, ks, lanes, kc, 12); break;
        case 16: pack_panel(dst, src, ls, ks, lanes, kc, 16); break;
        case 32: pack_panel(dst, src, ls, ks, lanes, kc, 32); break;
        default: pack_panel(dst, src, ls, ks, lanes, kc, W); break;
        }
    }
}

/* ------------------------------------------------------------- macro-kernel */

/* C block [mc, nc] (strides rsc, csc) = alpha * A [mc, kc] * packed B [kc, nc] + beta * C.
 * A is packed in pa, or (a_direct != NULL) read in place with strides (rsa, csa) except
 * for a last panel of fewer than MR rows, which is packed at pa. */
static void macro_kernel(const blocking *bk, float *C, int64_t rsc, int64_t csc,
                         const float *a_direct, int64_t rsa, int64_t csa, const float *pa,
                         const float *pb, int64_t mc, int64_t nc, int64_t kc, float alpha,
                         float beta)
{
    const int64_t mr = bk->mr, nr = bk->nr;
    _Alignas(64) float tile[TA_SGEMM_TILE_MAX]; /* every table is checked to fit */
    /* The lanes of an edge tile past the edge are computed too (and read when
     * beta != 0): give them defined values. */
    memset(tile, 0, sizeof tile);
    for (int64_t jr = 0; jr < nc; jr += nr) {
        const int64_t n = TA_MIN(nr, nc - jr);
        const float *b = pb + jr * kc;
        for (int64_t ir = 0; ir < mc; ir += mr) {
            const int64_t m = TA_MIN(mr, mc - ir);
            const float *a = a_direct ? (m == mr ? a_direct + ir * rsa : pa) : pa + ir * kc;
            const int64_t ars = a_direct && m == mr ? rsa : 1, acs = a_direct && m == mr ? csa : mr;
            float *c = C + ir * rsc + jr * csc;
            if (m == mr && n == nr && csc == 1) {
                bk->ukr(kc, alpha, a, ars, acs, b, beta, c, rsc);
                continue;
            }
            /* Edge or strided tile: the same kernel on a local copy, so the arithmetic
             * is that of an interior tile. beta == 0: C is not read. */
            if (beta != 0.0f)
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < n; j++) tile[i * nr + j] = c[i * rsc + j * csc];
            bk->ukr(kc, alpha, a, ars, acs, b, beta, tile, nr);
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) c[i * rsc + j * csc] = tile[i * nr + j];
        }
    }
}

/* Packing A costs about one pass of loads and stores over it, repaid by reuse across the
 * NR panels of the block. With few panels (attention's P V: N = 64) a unit-stride A is
 * cheaper read in place; measured 81 -> 96 GFLOP/s on 512x64x512 (Zen 4). A row-major A
 * (a step's MR values in MR rows, each read along its row) is read in place in blocks
 * of up to DIRECT_A_ROW_COLS columns, and a wider block of C runs as such blocks
 * (gemm_cols): on the two-port Xeon (1 thread, alternated in one process) 1024^3 203 ->
 * 216 GFLOP/s, 2048^3 205 -> 216, and 2 threads 403 -> 436, 388 -> 416; the MHA shapes
 * 8192 x 1536 x 512, 8192 x 512 x 2048 and 512 x 4096 x 4096 3 - 8% faster (512 columns:
 * the block's B, 512 KiB at KC 512, stays in L2 beside the A rows it meets; the A block
 * is read once per 512 columns instead of packed once per 2048). A column-major A (a
 * step's MR values in one row of A^T, a new line and, in 4 KiB pages, a new page every
 * step) only for one panel: 2048 x 64 x 512 67 against 56 GFLOP/s packed, but
 * 2048 x 256 x 2048 78 against 137. The values and their order are the same either way. */
static bool read_a_in_place(const blocking *bk, const problem *pr, int64_t nc)
{
    return (pr->csa == 1 && nc <= DIRECT_A_ROW_COLS) ||
           (pr->rsa == 1 && nc <= DIRECT_A_COL_PANELS * bk->nr);
}

/* Rows [m0, m1) of C's columns [jc, jc + nc), k in [pc, pc + kc), against the packed B
 * block pb: A blocks of MC rows packed in pa (or read in place), then the macro-kernel. */
static void gemm_rows(const blocking *bk, const problem *pr, int64_t m0, int64_t m1,
                      int64_t jc, int64_t nc, int64_t pc, int64_t kc, float *pa,
                      const float *pb)
{
    const bool direct = read_a_in_place(bk, pr, nc);
    const float beta = pc == 0 ? pr->beta : 1.0f;
    for (int64_t ic = m0; ic < m1; ic += bk->mc) {
        const int64_t mc = TA_MIN(bk->mc, m1 - ic), tail = mc % bk->mr;
        const float *a = pr->A + ic * pr->rsa + pc * pr->csa;
        if (direct)
            pack_block(pa, a + (mc - tail) * pr->rsa, pr->rsa, pr->csa, tail, kc, bk->mr);
        else
            pack_block(pa, a, pr->rsa, pr->csa, mc, kc, bk->mr);
        macro_kernel(bk, pr->C + ic * pr->rsc + jc * pr->csc, pr->rsc, pr->csc,
                     direct ? a : NULL, pr->rsa, pr->csa, pa, pb, mc, nc, kc, pr->alpha, beta);
    }
}

/* The widest block of C that reads problem pr's A in place, in whole NR panels (a
 * row-major A), else INT64_MAX (A read in place for one panel or packed). */
static int64_t direct_cols(const blocking *bk, const problem *pr)
{
    return pr->csa == 1 ? TA_MAX(bk->nr, DIRECT_A_ROW_COLS / bk->nr * bk->nr) : INT64_MAX;
}

/* gemm_rows over columns [jc, jc + nc) of a packed B block pb, in blocks of
 * DIRECT_A_ROW_COLS columns when A is row-major (read in place: read_a_in_place). */
static void gemm_cols(const blocking *bk, const problem *pr, int64_t m0, int64_t m1,
                      int64_t jc, int64_t nc, int64_t pc, int64_t kc, float *pa,
                      const float *pb)
{
    const int64_t w = TA_MIN(nc, direct_cols(bk, pr));
    for (int64_t j = 0; j < nc; j += w)
        gemm_rows(bk, pr, m0, m1, jc + j, TA_MIN(w, nc - j), pc, kc, pa, pb + j * kc);
}

/* Rows [m0, m1) x columns [n0, n1) of problem pr, with packing buffers pa, pb. A
 * row-major A is read in place (not packed once per NC block), so its blocks of C are
 * its blocks of B: each packed just before it is used, from L2 (1 thread, alternated:
 * 2048^3 184 -> 190 GFLOP/s, 4096 x 4096 x 1024 181 -> 192). */
static void gemm_chunk(const blocking *bk, const problem *pr, int64_t m0, int64_t m1,
                       int64_t n0, int64_t n1, float *pa, float *pb)
{
    const int64_t step = TA_MIN(bk->nc, direct_cols(bk, pr));
    for (int64_t jc = n0; jc < n1; jc += step) {
        const int64_t nc = TA_MIN(step, n1 - jc);
        for (int64_t pc = 0; pc < pr->K; pc += bk->kc) {
            const int64_t kc = TA_MIN(bk->kc, pr->K - pc);
            pack_block(pb, pr->B + pc * pr->rsb + jc * pr->csb, pr->csb, pr->rsb, nc, kc,
                       bk->nr);
            gemm_cols(bk, pr, m0, m1, jc, nc, pc, kc, pa, pb);
        }
    }
}

/* -------------------------------------------------- chunks shared by stealing */

/* One problem cut into column chunks, one per thread, each with its B packed for the
 * whole of K (the KC-row blocks one after another, NR-panel rows of ldp floats), so
 * that any thread can compute any of the chunk's units (blocks of MC rows, each with
 * all its k passes). The owner takes units from the front; a thread that has run out
 * of its own takes the last unit of another chunk. On idle cores that never happens
 * (the chunks are equal); when a thread shares its core with another process, the
 * other thread finishes its work instead of waiting: there is no barrier to wait at.
 * Which thread computes a unit does not change its arithmetic. */
typedef struct chunk_units {
    int64_t front, end; /* units [front, end) are unclaimed */
    bool packed;        /* its B is packed (no unit is claimed before) */
} chunk_units;

static int64_t claim_unit(chunk_units *u, bool own)
{
    int64_t r = -1;
    #pragma omp critical(ta_gemm_units)
    if (u->packed && u->front < u->end) r = own ? u->front++ : --u->end;
    return r;
}

/* Chunk q of problem pr (columns [q * chunk_n, ...)), B packed at pb: unit number u. */
static void run_unit(const blocking *bk, const problem *pr, int64_t chunk_n, int64_t q,
                     int64_t u, const float *pb, float *pa)
{
    const int64_t n0 = q * chunk_n, nc = TA_MIN(chunk_n, pr->N - n0);
    const int64_t ldp = ta_round_up(nc, bk->nr), m0 = u * bk->mc;
    for (int64_t pc = 0; pc < pr->K; pc += bk->kc)
        gemm_cols(bk, pr, m0, TA_MIN(pr->M, m0 + bk->mc), n0, nc, pc,
                  TA_MIN(bk->kc, pr->K - pc), pa, pb + pc * ldp);
}

/* The calling thread's part of problem pr cut into `chunks` column chunks of chunk_n
 * (the team runs this together): it packs the B of the chunks it owns (q = thread
 * number, + team size, ...), computes their units, then takes units left in any chunk.
 * pa is this thread's A block, pb the chunks' B (size_b floats apart). */
static void gemm_stealing(const blocking *bk, const problem *pr, int64_t chunk_n,
                          int64_t chunks, chunk_units *units, float *pa, float *pb,
                          int64_t size_b, int64_t *taken)
{
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    for (int64_t q = t; q < chunks; q += nt) {
        const int64_t n0 = q * chunk_n, nc = TA_MIN(chunk_n, pr->N - n0);
        const int64_t ldp = ta_round_up(nc, bk->nr);
        for (int64_t pc = 0; pc < pr->K; pc += bk->kc)
            pack_block(pb + q * size_b + pc * ldp, pr->B + pc * pr->rsb + n0 * pr->csb,
                       pr->csb, pr->rsb, nc, TA_MIN(bk->kc, pr->K - pc), bk->nr);
        #pragma omp critical(ta_gemm_units)
        units[q].packed = true;
    }
    for (int64_t q = t; q < chunks; q += nt)
        for (int64_t u; (u = claim_unit(&units[q], true)) >= 0;)
            run_unit(bk, pr, chunk_n, q, u, pb + q * size_b, pa);
    for (bool busy = true; busy;) {
        busy = false;
        for (int64_t i = 1; i <= chunks; i++) {
            const int64_t q = (t + i) % chunks;
            const int64_t u = claim_unit(&units[q], false);
            if (u >= 0) {
                run_unit(bk, pr, chunk_n, q, u, pb + q * size_b, pa);
                busy = true;
                #pragma omp atomic
                (*taken)++;
            }
        }
    }
}

/* ------------------------------------------------------------------- driver */

/* K == 0: C = beta * C (beta == 0 writes zeros without reading C). */
static void scale_c(const problem *pr)
{
    for (int64_t i = 0; i < pr->M; i++)
        for (int64_t j = 0; j < pr->N; j++) {
            float *c = pr->C + i * pr->rsc + j * pr->csc;
            *c = pr->beta == 0.0f ? 0.0f : pr->beta * *c;
        }
}

/* Problem number p of the batch (row-major order over batch->shape). */
static problem batch_problem(const problem *base, const ta_gemm_batch *batch, int64_t p)
{
    problem pr = *base;
    for (int i = batch ? batch->ndim - 1 : -1; i >= 0; i--) {
        int64_t x = p % batch->shape[i];
        p /= batch->shape[i];
        pr.A += x * batch->stride_a[i];
        pr.B += x * batch->stride_b[i];
        pr.C += x * batch->stride_c[i];
    }
    return pr;
}

static int64_t batch_count(const ta_gemm_batch *batch)
{
    int64_t nb = 1;
    if (batch)
        for (int i = 0; i < batch->ndim; i++) nb *= batch->shape[i];
    return nb;
}

/* How one call is cut into work items and how much packing it needs; a function of the
 * shapes, the kernel table and the thread count only, so the size query and the call
 * always agree. M and N are the kernel's (after the column-major swap). */
typedef struct schedule {
    int nt;                    /* threads */
    int64_t chunk_m, chunk_n;  /* rows / columns of C per item */
    int64_t parts_m, parts_n;  /* items per problem along M and N */
    int64_t items;
    bool steal;                /* one problem in column chunks with units (gemm_stealing) */
    int64_t size_a, size_b;    /* packing floats per thread (steal: B per chunk) */
} schedule;

static schedule plan_schedule(const blocking *bk, int64_t nb, int64_t M, int64_t N, int64_t K)
{
    schedule sc = {.nt = ta_threads(), .chunk_m = M, .chunk_n = N};
    /* Work items: whole problems when the batch alone balances the threads (the
     * attention shapes), else each problem cut into `threads` chunks of columns (or of
     * rows when C is tall), in multiples of NR (MR) so edge tiles stay at the edges. */
    const double fmas = (double)nb * (double)M * (double)N * (double)K;
    if (fmas < (double)SERIAL_FMAS) sc.nt = 1;
    int64_t parts = (nb % sc.nt == 0 || nb >= 4 * (int64_t)sc.nt) ? 1 : sc.nt;
    if (parts > 1) {
        if (N >= M) sc.chunk_n = ta_round_up((N + parts - 1) / parts, bk->nr);
        else sc.chunk_m = ta_round_up((M + parts - 1) / parts, bk->mr);
    }
    sc.parts_m = (M + sc.chunk_m - 1) / sc.chunk_m;
    sc.parts_n = (N + sc.chunk_n - 1) / sc.chunk_n;
    sc.items = nb * sc.parts_m * sc.parts_n;
    if ((int64_t)sc.nt > sc.items) sc.nt = (int)sc.items;
    /* Per-thread packing buffers, sized to what a chunk needs. */
    const int64_t kc = TA_MIN(bk->kc, K);
    sc.size_a = ta_round_up(TA_MIN(bk->mc, ta_round_up(sc.chunk_m, bk->mr)) * kc, 16);
    sc.size_b = ta_round_up(TA_MIN(bk->nc, ta_round_up(sc.chunk_n, bk->nr)) * kc, 16);
    /* One problem in column chunks (one per thread: items == nt): each chunk's B for
     * the whole of K, when that stays within STEAL_B_FLOATS, lets the threads share out
     * its blocks of rows (gemm_stealing). */
    const double whole_k = (double)K * (double)ta_round_up(sc.chunk_n, bk->nr);
    if (nb == 1 && sc.parts_n > 1 && sc.parts_n <= STEAL_MAX_CHUNKS && sc.chunk_n <= bk->nc &&
        whole_k <= (double)STEAL_B_FLOATS) {
        sc.steal = true;
        sc.size_b = ta_round_up((int64_t)whole_k, 16);
    }
    return sc;
}

static blocking active_blocking(void)
{
    const ta_kernels *kt = ta_kernels_active();
    return (blocking){kt->sgemm_ukr, kt->sgemm_mr, kt->sgemm_nr, kt->sgemm_kc, kt->sgemm_mc,
                      kt->sgemm_nc};
}

/* Whether the kernels compute C^T = B^T A^T: they store rows of C with unit stride. */
static bool swap_for_columns(int64_t rsc, int64_t csc) { return csc != 1 && rsc == 1; }

/* The packing floats of the whole call (0 when nothing is multiplied). */
static bool gemm_floats(size_t *out, int64_t rsc, int64_t csc, int64_t M, int64_t N, int64_t K,
                        const ta_gemm_batch *batch)
{
    int64_t nb = batch_count(batch);
    *out = 0;
    if (nb == 0 || M == 0 || N == 0 || K == 0) return true;
    if (swap_for_columns(rsc, csc)) {
        int64_t t = M;
        M = N;
        N = t;
    }
    const blocking bk = active_blocking();
    schedule sc = plan_schedule(&bk, nb, M, N, K);
    return ta_mul_size(out, (size_t)(sc.size_a + sc.size_b), (size_t)sc.nt);
}

void ta_gemm_layout(ta_arena *a, float **pack, int64_t rsc, int64_t csc, int64_t M, int64_t N,
                    int64_t K, const ta_gemm_batch *batch)
{
    size_t n;
    if (!gemm_floats(&n, rsc, csc, M, N, K, batch)) {
        a->overflow = true;
        *pack = NULL;
        return;
    }
    *pack = TA_ARENA_TAKE(a, float, n);
}

ta_status ta_gemm_strided(float *C, int64_t rsc, int64_t csc, const float *A, int64_t rsa,
                          int64_t csa, const float *B, int64_t rsb, int64_t csb, int64_t M,
                          int64_t N, int64_t K, float alpha, float beta,
                          const ta_gemm_batch *batch, float *pack)
{
    const int64_t nb = batch_count(batch);
    if (nb == 0 || M == 0 || N == 0) return TA_OK;

    ta_gemm_batch tb;
    /* The kernels store rows of C with unit stride: a column-major C is done as
     * C^T = B^T A^T (A and B trade places, rows and columns trade strides). */
    if (swap_for_columns(rsc, csc)) {
        const float *t = A;
        A = B;
        B = t;
        int64_t s;
        s = rsa, rsa = csb, csb = s;
        s = csa, csa = rsb, rsb = s;
        s = M, M = N, N = s;
        rsc = csc, csc = 1;
        if (batch) {
            tb = *batch;
            memcpy(tb.stride_a, batch->stride_b, sizeof tb.stride_a);
            memcpy(tb.stride_b, batch->stride_a, sizeof tb.stride_b);
            batch = &tb;
        }
    }
    const problem base = {C, A, B, rsc, csc, rsa, csa, rsb, csb, M, N, K, alpha, beta};
    if (K == 0) {
        for (int64_t p = 0; p < nb; p++) {
            problem pr = batch_problem(&base, batch, p);
            scale_c(&pr);
        }
        return TA_OK;
    }

    const blocking bk = active_blocking();
    const schedule sc = plan_schedule(&bk, nb, M, N, K);
    const size_t per_thread = (size_t)(sc.size_a + sc.size_b);
    if (!pack) return ta_error(TA_EINTERNAL, "ta_gemm: no packing buffer (a bug)");

    const int hold = atomic_load_explicit(&steal_hold, memory_order_relaxed);
    if (sc.steal && (ta_gemm_share_mode > 0 || (ta_gemm_share_mode < 0 && hold > 0))) {
        problem pr = batch_problem(&base, batch, 0);
        chunk_units units[STEAL_MAX_CHUNKS];
        const int64_t per_chunk = (M + bk.mc - 1) / bk.mc; /* units: blocks of MC rows */
        for (int64_t q = 0; q < sc.items; q++) units[q] = (chunk_units){0, per_chunk, false};
        float *pb = pack + (size_t)sc.size_a * (size_t)sc.nt;
        int64_t taken = 0;
        #pragma omp parallel num_threads(sc.nt)
        gemm_stealing(&bk, &pr, sc.chunk_n, sc.items, units,
                      pack + (size_t)sc.size_a * (size_t)omp_get_thread_num(), pb, sc.size_b,
                      &taken);
        if (taken >= 2 && 8 * taken >= sc.items * per_chunk)
            atomic_store_explicit(&steal_hold, STEAL_HOLD_CALLS, memory_order_relaxed);
        else if (hold > 0)
            atomic_fetch_sub_explicit(&steal_hold, 1, memory_order_relaxed);
        return TA_OK;
    }
    /* the seconds per column of each chunk that could have been shared (sc.steal), and
     * the thread that ran it */
    double per_col[STEAL_MAX_CHUNKS];
    int ran[STEAL_MAX_CHUNKS];
    #pragma omp parallel for num_threads(sc.nt) schedule(dynamic, 1) if (sc.nt > 1)
    for (int64_t it = 0; it < sc.items; it++) {
        float *pa = pack + per_thread * (size_t)omp_get_thread_num(), *pb = pa + sc.size_a;
        const int64_t p = it / (sc.parts_m * sc.parts_n), r = it % (sc.parts_m * sc.parts_n);
        const int64_t m0 = r / sc.parts_n * sc.chunk_m, n0 = r % sc.parts_n * sc.chunk_n;
        problem pr = batch_problem(&base, batch, p);
        const double t0 = sc.steal ? omp_get_wtime() : 0.0;
        gemm_chunk(&bk, &pr, m0, TA_MIN(M, m0 + sc.chunk_m), n0, TA_MIN(N, n0 + sc.chunk_n),
                   pa, pb);
        if (sc.steal) {
            per_col[it] = (omp_get_wtime() - t0) / (double)(TA_MIN(N, n0 + sc.chunk_n) - n0);
            ran[it] = omp_get_thread_num();
        }
    }
    if (sc.steal) { /* a chunk much slower than another, or a thread that ran two while
                     * another had not started: a busy core */
        double lo = per_col[0], hi = per_col[0];
        bool twice = false;
        for (int64_t it = 1; it < sc.items; it++) {
            lo = per_col[it] < lo ? per_col[it] : lo;
            hi = per_col[it] > hi ? per_col[it] : hi;
            for (int64_t j = 0; j < it; j++) twice |= ran[j] == ran[it];
        }
        if (twice || hi > STEAL_SKEW * lo)
            atomic_store_explicit(&steal_hold, STEAL_HOLD_CALLS, memory_order_relaxed);
    }
    return TA_OK;
}

ta_status ta_gemm_run(const char *fn, float *C, int64_t rsc, int64_t csc,
                      const float *A, int64_t rsa, int64_t csa, const float *B, int64_t rsb,
                      int64_t csb, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                      const ta_gemm_batch *batch)
{
    ta_arena m = ta_arena_measure();
    float *pack;
    ta_gemm_layout(&m, &pack, rsc, csc, M, N, K, batch);
    ta_scratch s;
    ta_status st = ta_scratch_acquire(&s, fn, NULL, ta_arena_bytes(&m));
    if (st) return st;
    ta_arena a = ta_arena_over(s.base, s.size);
    ta_gemm_layout(&a, &pack, rsc, csc, M, N, K, batch);
    st = ta_gemm_strided(C, rsc, csc, A, rsa, csa, B, rsb, csb, M, N, K, alpha, beta, batch,
                         pack);
    ta_scratch_release(&s);
    return st;
}

/* ------------------------------------------------------- public entry points */

/* |offset| of the farthest element of an operand with extents n[i] and strides s[i];
 * false when it does not fit the index range (elements of 4 bytes in a ptrdiff_t). */
static bool operand_span(int64_t *out, int count, const int64_t *n, const int64_t *s)
{
    int64_t total = 0;
    for (int i = 0; i < count; i++) {
        if (n[i] == 0) {
            *out = 0;
            return true;
        }
        if (s[i] == INT64_MIN) return false;
        int64_t t, mag = s[i] < 0 ? -s[i] : s[i];
        if (__builtin_mul_overflow(n[i] - 1, mag, &t) ||
            __builtin_add_overflow(total, t, &total))
            return false;
    }
    *out = total;
    return total <= (int64_t)(PTRDIFF_MAX / (ptrdiff_t)sizeof(float));
}

/* Shared validation of ta_sgemm (batch == 1 and fn "ta_sgemm") and ta_sgemm_batched. */
static ta_status check_args(const char *fn, const float *C, int64_t bsc, int64_t rsc,
                            int64_t csc, const float *A, int64_t bsa, int64_t rsa, int64_t csa,
                            const float *B, int64_t bsb, int64_t rsb, int64_t csb,
                            int64_t batch, int64_t M, int64_t N, int64_t K)
{
    const int64_t dims[4] = {batch, M, N, K};
    const char *names[4] = {"batch", "M", "N", "K"};
    for (int i = 0; i < 4; i++)
        if (dims[i] < 0)
            return ta_error(TA_EINVAL, "%s: %s is negative (%lld)", fn, names[i],
                            (long long)dims[i]);
    if (batch == 0 || M == 0 || N == 0) return TA_OK; /* nothing is read or written */
    if (!C)
        return ta_error(TA_EINVAL, "%s: C is NULL but C is %lld x %lld", fn, (long long)M,
                        (long long)N);
    if (K > 0 && !A)
        return ta_error(TA_EINVAL, "%s: A is NULL but A is %lld x %lld", fn, (long long)M,
                        (long long)K);
    if (K > 0 && !B)
        return ta_error(TA_EINVAL, "%s: B is NULL but B is %lld x %lld", fn, (long long)K,
                        (long long)N);
    int64_t span;
    const int64_t nc[3] = {batch, M, N}, sc[3] = {bsc, rsc, csc};
    const int64_t na[3] = {batch, M, K}, sa[3] = {bsa, rsa, csa};
    const int64_t nB[3] = {batch, K, N}, sB[3] = {bsb, rsb, csb};
    if (!operand_span(&span, 3, nc, sc))
        return ta_error(TA_ESHAPE,
                        "%s: C strides (batch %lld, row %lld, column %lld) over [%lld, %lld, "
                        "%lld] overflow the index range",
                        fn, (long long)bsc, (long long)rsc, (long long)csc, (long long)batch,
                        (long long)M, (long long)N);
    if (!operand_span(&span, 3, na, sa))
        return ta_error(TA_ESHAPE,
                        "%s: A strides (batch %lld, row %lld, column %lld) over [%lld, %lld, "
                        "%lld] overflow the index range",
                        fn, (long long)bsa, (long long)rsa, (long long)csa, (long long)batch,
                        (long long)M, (long long)K);
    if (!operand_span(&span, 3, nB, sB))
        return ta_error(TA_ESHAPE,
                        "%s: B strides (batch %lld, row %lld, column %lld) over [%lld, %lld, "
                        "%lld] overflow the index range",
                        fn, (long long)bsb, (long long)rsb, (long long)csb, (long long)batch,
                        (long long)K, (long long)N);
    /* Distinct (b, i, j) must be distinct elements of C; a zero stride over an extent
     * > 1 is the overlap one can check cheaply (and the likely mistake). */
    if ((M > 1 && rsc == 0) || (N > 1 && csc == 0) || (batch > 1 && bsc == 0))
        return ta_error(TA_ESHAPE,
                        "%s: C has a zero stride (batch %lld, row %lld, column %lld) over "
                        "[%lld, %lld, %lld]: its elements must be distinct",
                        fn, (long long)bsc, (long long)rsc, (long long)csc, (long long)batch,
                        (long long)M, (long long)N);
    return TA_OK;
}

ta_status ta_sgemm_batched(float *C, int64_t bsc, int64_t rsc, int64_t csc, const float *A,
                           int64_t bsa, int64_t rsa, int64_t csa, const float *B, int64_t bsb,
                           int64_t rsb, int64_t csb, int64_t batch, int64_t M, int64_t N,
                           int64_t K, float alpha, float beta)
{
    // C: [batch, M, N], A: [batch, M, K], B: [batch, K, N], all with element strides
    ta_status st = check_args("ta_sgemm_batched", C, bsc, rsc, csc, A, bsa, rsa, csa, B, bsb,
                              rsb, csb, batch, M, N, K);
    if (st != TA_OK) return st;
    ta_gemm_batch b = {.ndim = 1, .shape = {batch}, .stride_a = {bsa}, .stride_b = {bsb},
                       .stride_c = {bsc}};
    return ta_gemm_run("ta_sgemm_batched", C, rsc, csc, A, rsa, csa, B, rsb, csb, M, N, K,
                       alpha, beta, &b);
}

ta_status ta_sgemm(float *C, int64_t rsc, int64_t csc, const float *A, int64_t rsa, int64_t csa,
                   const float *B, int64_t rsb, int64_t csb, int64_t M, int64_t N, int64_t K,
                   float alpha, float beta)
{
    // C: [M, N], A: [M, K], B: [K, N], all with element strides
    ta_status st = check_args("ta_sgemm", C, 0, rsc, csc, A, 0, rsa, csa, B, 0, rsb, csb, 1, M,
                              N, K);
    if (st != TA_OK) return st;
    return ta_gemm_run("ta_sgemm", C, rsc, csc, A, rsa, csa, B, rsb, csb, M, N, K, alpha,
                       beta, NULL);
}
