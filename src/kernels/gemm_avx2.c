/* AVX2+FMA SGEMM micro-kernel 6x16 (gemm_template.h; contract: docs/kernels.md).
 * 6 rows x 2 ymm columns = 12 accumulators, + 2 B vectors + 1 broadcast = 15 of the 16
 * ymm registers; per k step 2 loads and 6 broadcasts feed 12 FMAs (6 cycles at 2 FMA
 * per cycle), which the load ports sustain. */
#include "kernels/vec_avx2.h"

#define MR 6
#define NV 2

#define NAME_SGEMM ta_sgemm_avx2_6x16
#define FILL_FN ta_gemm_fill_avx2

#include "kernels/gemm_template.h"
