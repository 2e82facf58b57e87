/* AVX-512 SGEMM micro-kernel 12x32 (gemm_template.h; contract: docs/kernels.md).
 * 12 rows x 2 zmm columns = 24 accumulators, + 2 B vectors + 1 broadcast of the 32 zmm
 * registers. On Zen 4/5 a 512-bit FMA issues at half the 256-bit rate, so 24 FMAs take
 * ~24 cycles per k step against 2 loads + 12 broadcasts: the load ports idle, and 24
 * independent chains hide the 4-cycle FMA latency several times over. Vectors run along
 * N so a row-major C tile is stored with plain (unmasked) full-width stores. */
#include "kernels/vec_avx512.h"

#define MR 12
#define NV 2

#define NAME_SGEMM ta_sgemm_avx512_12x32
#define FILL_FN ta_gemm_fill_avx512

#include "kernels/gemm_template.h"
