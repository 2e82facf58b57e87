/* Builds the kernel tables once from the ISA table (isa_table.def) and picks the active
 * one: the best usable row (on Intel avx512 rather than avx512bf16: init_tables), or
 * TA_ARCH's choice. Also the public ta_cpu_supports and ta_isa_name, which read the same
 * rows. */
#include "core/core.h"
#include "kernels/kernels.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct isa_row {
    const char *name;
    ta_isa parent;
    int (*supported)(void);
    void (*fill)(ta_kernels *k);
} isa_row;

/* One row per enum constant: a missing row fails the count below, a repeated one
 * -Woverride-init (-Wextra); a parent comes first, so the chains have no cycles and
 * the tables can be built in enum order. */
#define TA_ISA(isa, name, parent, supported, fill, arch, cflags)                              \
    _Static_assert((isa) >= 0 && (isa) < TA_ISA_COUNT, #isa ": not below TA_ISA_COUNT");     \
    _Static_assert((parent) < (isa) || ((isa) == TA_ISA_SCALAR && (parent) == (isa)),       \
                   #isa ": the parent must come before the ISA (only scalar is a root)");
#include "kernels/isa_table.def"
#undef TA_ISA

enum {
    ISA_ROWS = 0
#define TA_ISA(isa, name, parent, supported, fill, arch, cflags) +1
#include "kernels/isa_table.def"
#undef TA_ISA
};
_Static_assert((int)ISA_ROWS == (int)TA_ISA_COUNT, "isa_table.def needs one row per ta_isa constant");

static const isa_row rows[TA_ISA_COUNT] = {
#define TA_ISA(isa, name, parent, supported, fill, arch, cflags)                              \
    [isa] = {#name, parent, TA_ON_##arch(supported), TA_ON_##arch(fill)},
#include "kernels/isa_table.def"
#undef TA_ISA
};

static ta_kernels tables[TA_ISA_COUNT];
int ta_stream_prefetch_rows;
int ta_stream_prefetch_l1;
int ta_exp_denormal_assist = 1;
int ta_pf_stream_l2;
int ta_sweep_pages;
int64_t ta_l2_bytes = TA_L2_BYTES_DEFAULT;
static int usable[TA_ISA_COUNT];
static ta_isa active = TA_ISA_SCALAR;
static char init_error[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

int ta_cpu_supports(ta_isa isa)
{
    if ((int)isa < 0 || (int)isa >= TA_ISA_COUNT || !rows[isa].supported) return 0;
    return rows[isa].supported();
}

const char *ta_isa_name(ta_isa isa)
{
    if ((int)isa < 0 || (int)isa >= TA_ISA_COUNT) return "unknown";
    return rows[isa].name;
}

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            snprintf(why, n, __VA_ARGS__);                                                   \
            return -1;                                                                       \
        }                                                                                    \
    } while (0)

int ta_kernels_check(const ta_kernels *k, char *why, size_t n)
{
    CHECK(k->sgemm_ukr && k->attn_qk && k->attn_qk_rows && k->attn_softmax && k->attn_pv &&
              k->attn_exp && k->attn_pack_t && k->attn_scale_row && k->attn_finish_rows &&
              k->attn_bwd_gemm && k->attn_bwd_dsoftmax && k->attn_row_dot &&
              k->cvt_f16_f32 && k->cvt_f32_f16 && k->cvt_bf16_f32 && k->cvt_f32_bf16 &&
              k->attn_softcap && k->attn_qk_rows_kv[0] && k->attn_qk_rows_kv[1] &&
              k->attn_qk_rows_kv[2] && k->attn_pv_rows_kv[0] && k->attn_pv_rows_kv[1] &&
              k->attn_pv_rows_kv[2] && k->attn_softmax_rows,
          "a kernel entry is not set");
    CHECK(k->sgemm_mr >= 1 && k->sgemm_nr >= 1 &&
              (int64_t)k->sgemm_mr * k->sgemm_nr <= TA_SGEMM_TILE_MAX,
          "the SGEMM tile %d x %d is empty or over TA_SGEMM_TILE_MAX (%d)", k->sgemm_mr,
          k->sgemm_nr, TA_SGEMM_TILE_MAX);
    CHECK(k->sgemm_kc >= 1 && k->sgemm_mc >= k->sgemm_mr && k->sgemm_mc % k->sgemm_mr == 0 &&
              k->sgemm_nc >= k->sgemm_nr && k->sgemm_nc % k->sgemm_nr == 0,
          "the SGEMM blocks KC %d, MC %d, NC %d are not positive multiples of MR %d / NR %d",
          k->sgemm_kc, k->sgemm_mc, k->sgemm_nc, k->sgemm_mr, k->sgemm_nr);
    CHECK(k->attn_vl >= 1 && k->attn_pr >= 1 && k->attn_mq >= 1 &&
              k->attn_mq % k->attn_vl == 0 && k->attn_mq % k->attn_pr == 0,
          "attn_mq %d is not a positive multiple of attn_vl %d and attn_pr %d", k->attn_mq,
          k->attn_vl, k->attn_pr);
    CHECK(k->attn_rows_max >= 1 && k->attn_rows_max <= k->attn_mq,
          "attn_rows_max %d is not in 1 .. attn_mq %d", k->attn_rows_max, k->attn_mq);
    /* the fused forward pads O rows to a multiple of max(16, attn_vl) (attn_pv writes
     * whole vectors): a multiple of attn_vl only when attn_vl is a power of two */
    CHECK((k->attn_vl & (k->attn_vl - 1)) == 0 && k->attn_vl <= 64,
          "attn_vl %d is not a power of two <= 64", k->attn_vl);
    return 0;
}

/* In enum order, so a parent's table is finished first: a usable ISA's table is its
 * parent's table (for the root, the scalar fill on zeros) with its own fill applied,
 * i.e. the scalar fill, then the parent chain's, then its own. An ISA is usable when the
 * CPU runs it and its parent, and its table passes ta_kernels_check. The fillers live
 * in files built with vector flags: they run only for ISAs the CPU supports. */
static void init_tables(void)
{
    for (int i = 0; i < TA_ISA_COUNT; i++) {
        const isa_row *r = &rows[i];
        if (!r->fill || !r->supported || !r->supported()) continue;
        if ((int)r->parent != i && !usable[r->parent]) continue;
        ta_kernels *k = &tables[i];
        if ((int)r->parent == i)
            memset(k, 0, sizeof *k);
        else
            *k = tables[r->parent];
        r->fill(k);
        k->isa = (ta_isa)i;
        k->name = r->name;
        char why[160];
        if (ta_kernels_check(k, why, sizeof why) != 0) {
            if (!init_error[0])
                snprintf(init_error, sizeof init_error, "the %s kernel table is not used: %s",
                         r->name, why);
            continue;
        }
        usable[i] = 1;
        active = (ta_isa)i; /* the best: a later row extends or outranks the earlier */
    }
    ta_stream_prefetch_rows =
        ta_cpu_is_intel() || ta_cpu_amd_family() >= 0x1A ? TA_STREAM_PREFETCH_ROWS : 0;
    ta_stream_prefetch_l1 = !ta_cpu_is_intel() && ta_cpu_amd_family() >= 0x1A;
    ta_exp_denormal_assist = ta_cpu_is_intel();
    ta_pf_stream_l2 = ta_cpu_is_intel();
    ta_sweep_pages = !ta_cpu_is_intel();
    ta_l2_bytes = ta_cpu_l2_bytes() > 0 ? ta_cpu_l2_bytes() : TA_L2_BYTES_DEFAULT;
    /* Intel's vdpbf16ps does the work of two FMAs in the time of four: on the Emerald
     * Rapids Xeon (session 37) 12 independent chains ran one zmm vdpbf16ps every 1.74
     * tsc ticks against a vfmadd231ps every 0.43 (32 multiply-adds against 16 each), so
     * the widening kernels beat the avx512bf16 row's dot products there: Q.K^T of a
     * 4-row decode tile (D 128, bfloat16 K and q) 33 - 40 against 25 - 29 ticks a key,
     * the seed's causal case in bfloat16 (B32 H8 L512 D64, 1 thread, fused) 101 - 110
     * against 73 - 97 ms, its backward 233 - 263 against 181 - 194. The row stays
     * usable (TA_ARCH=avx512bf16 picks it; its tests run) but is not the default on
     * Intel. On the Zen 4 the dot kernels ran twice as fast as the widening ones
     * (docs/kernels.md, "Q.K^T of a bfloat16 query"). */
    if (active == TA_ISA_AVX512BF16 && ta_cpu_is_intel() && usable[TA_ISA_AVX512])
        active = TA_ISA_AVX512;
    const char *want = getenv("TA_ARCH");
    if (want && *want)
        for (int i = 0; i < TA_ISA_COUNT; i++)
            if (usable[i] && strcmp(want, rows[i].name) == 0) active = (ta_isa)i;
}

const ta_kernels *ta_kernels_active(void)
{
    pthread_once(&once, init_tables);
    return &tables[active];
}

const ta_kernels *ta_kernels_for(ta_isa isa)
{
    pthread_once(&once, init_tables);
    if ((int)isa < 0 || (int)isa >= TA_ISA_COUNT || !usable[isa]) return NULL;
    return &tables[isa];
}

const char *ta_kernels_init_error(void)
{
    pthread_once(&once, init_tables);
    return init_error[0] ? init_error : NULL;
}

ta_isa ta_active_isa(void) { return ta_kernels_active()->isa; }
