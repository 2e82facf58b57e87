/* AVX-512 SGEMM micro-kernel 6x64 (gemm_template.h; contract: docs/kernels.md).
 * 6 rows x 4 zmm columns = 24 accumulators, + 4 B vectors + 1 broadcast of the 32 zmm
 * registers. A k step is 24 FMAs against 4 loads of B and 6 broadcasts of A: 10 loads,
 * where 12x32 needed 14. On a core with two 512-bit FMA ports (Sapphire/Emerald Rapids)
 * the 24 FMAs take 12 cycles and llvm-mca-14's model of it books a vector ALU uop on
 * ports 0/1/5 for every zmm load: 24 FMAs + 14 loads overflowed those three ports (13.0
 * cycles per step), 24 + 10 fit (12.0, FMA-bound). On Zen 4 a 512-bit FMA issues at
 * half the 256-bit rate, so a step takes ~24 cycles and both shapes measure the FMA peak
 * with their panels in L2. 64 columns also divide the power-of-two N that the tile edges
 * otherwise waste, and 6 rows waste at most 5 of M. Vectors run along N so a row-major
 * C tile is stored with plain (unmasked) full-width stores. */
#include "kernels/vec_avx512.h"

#define MR 6
#define NV 4

#define NAME_SGEMM ta_sgemm_avx512_6x64
#define FILL_FN ta_gemm_fill_avx512

#include "kernels/gemm_template.h"
