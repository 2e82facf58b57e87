/* Portable reference SGEMM micro-kernel 4x8 (gemm_template.h; contract: docs/kernels.md)
 * with one-lane "vectors": 32 float accumulators, a multiply and an add per term (no FMA
 * contraction under -std=c11). Every kernel table starts from it; it is also what
 * TA_ARCH=scalar runs. */
#include "kernels/vec_scalar.h"

#define MR 4
#define NV 8

#define NAME_SGEMM ta_sgemm_scalar_4x8
#define FILL_FN ta_gemm_fill_scalar

#include "kernels/gemm_template.h"
