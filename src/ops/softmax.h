/* The row softmax shared by ta_softmax and the SDPA reference paths. */
#ifndef TA_OPS_SOFTMAX_H
#define TA_OPS_SOFTMAX_H

#include <stdint.h>

/* Softmax of one row x[0], x[xs], ... (n entries) into out[0], out[os], ... (out may
 * be x: in place). Returns the row's log-sum-exp (natural log). Rules:
 *   a NaN anywhere            -> every entry NaN, LSE NaN;
 *   no NaN, a +inf            -> every entry NaN, LSE NaN (inf - inf: as PyTorch);
 *   every entry -inf (or n=0) -> every entry 0, LSE -inf (a row with nothing to attend);
 *   otherwise max-subtracted exp, the sum accumulated in double, entries e/sum. */
float ta_softmax_row(float *out, int64_t os, const float *x, int64_t xs, int64_t n);

#endif
