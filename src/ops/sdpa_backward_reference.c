/* The materialised SDPA backward: the oracle the fused backward is tested against. It
 * follows the textbook derivation on whole [B, H, Lq, Lk] tensors, with the products on
 * einsum (strided batched GEMM, no copies of Q, K, V):
 *     S  = einsum('bhid,bhjd->bhij', Q, K) * scale, masked     (as the forward)
 *     P  = exp(S - LSE)                                          (0 on empty rows)
 *     dV = einsum('bhij,bhid->bhjd', P, dO)                      (summed over a GQA group)
 *     dP = einsum('bhid,bhjd->bhij', dO, V)
 *     D  = rowsum(dO * O),  dS = scale * P * (dP - D)
 *     dQ = einsum('bhij,bhjd->bhid', dS, K),  dK = einsum('bhij,bhid->bhjd', dS, Q)
 * With GQA (G = H / Hkv > 1) the head axis of the [B, H, ...] tensors is split into
 * (kv head, group member) views, so K and V are shared by the einsum itself and the
 * group sum of dK and dV is part of the contraction. */
#include "core/core.h"
#include "ops/sdpa.h"

#include <math.h>

/* C [B,Hkv,.,.] = sum over the group of A [B,H,.,.] x Bt [B,H,.,.]. */
static ta_status group_sum(const char *spec4, const char *spec5, ta_tensor *C, const ta_tensor *A,
                           const ta_tensor *Bt, int64_t G)
{
    if (G == 1) return ta_einsum(C, spec4, A, Bt);
    ta_tensor a5 = ta_sdpa_split_heads(A, G), b5 = ta_sdpa_split_heads(Bt, G);
    return ta_einsum(C, spec5, &a5, &b5);
}

static float *row_ptr(const ta_tensor *t, int64_t b, int64_t h, int64_t i)
{
    return (float *)t->data + b * t->stride[0] + h * t->stride[1] + i * t->stride[2];
}

ta_status ta_sdpa_backward_reference_run(const ta_sdpa_grad_problem *g)
{
    const ta_sdpa_problem *p = &g->p;
    int64_t B = p->B, H = p->H, Lq = p->Lq, Lk = p->Lk, G = p->Hkv ? H / p->Hkv : 1;
    int64_t rows = B * H * Lq;
    if (rows == 0 || Lk == 0) { /* nothing attends to anything: every gradient is 0 */
        ta_tensor_fill(g->dQ, 0.0f);
        ta_tensor_fill(g->dK, 0.0f);
        ta_tensor_fill(g->dV, 0.0f);
        return TA_OK;
    }
    size_t n;
    if (!ta_mul_size(&n, (size_t)rows, (size_t)Lk) || !ta_mul_size(&n, n, 2 * sizeof(float)))
        return ta_error(TA_ENOMEM, "ta_sdpa_backward: the [B, H, Lq, Lk] scratch is too large");
    float *mem = ta_alloc(n);
    if (!mem) return TA_ENOMEM;
    const int64_t shape[4] = {B, H, Lq, Lk};
    ta_tensor P, dP;
    ta_tensor_from_buffer(&P, mem, 4, shape, NULL);
    ta_tensor_from_buffer(&dP, mem + rows * Lk, 4, shape, NULL);

    /* S = Q K^T, then scale, mask and P = exp(S - LSE) row by row. */
    ta_status st = p->D > 0 ? ta_sdpa_group_einsum("bhid,bhjd->bhij", "bkgid,bkjd->bkgij", &P, p->Q, p->K, G)
                            : ta_tensor_fill(&P, 0.0f);
    if (!st) st = p->Dv > 0 ? ta_sdpa_group_einsum("bhid,bhjd->bhij", "bkgid,bkjd->bkgij", &dP, g->dO, p->V, G)
                            : ta_tensor_fill(&dP, 0.0f);
    if (st) {
        ta_free(mem);
        return st;
    }
    int nt = rows * Lk < 32768 ? 1 : ta_threads();
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t b = r / (H * Lq), h = r / Lq % H, i = r % Lq;
        float *s = (float *)P.data + r * Lk, *dp = (float *)dP.data + r * Lk;
        const float *lp = (const float *)g->lse->data + b * g->lse->stride[0] +
                          h * g->lse->stride[1] + i * g->lse->stride[2];
        const float *o = row_ptr(p->O, b, h, i), *dout = row_ptr(g->dO, b, h, i);
        double d = 0.0; /* D_i = rowsum(dO_i * O_i) */
        for (int64_t c = 0; c < p->Dv; c++)
            d += (double)dout[c * g->dO->stride[3]] * (double)o[c * p->O->stride[3]];
        double lse = *lp;
        ta_mask_apply(&p->mask, b, h, i, 0, Lk, p->scale, s, 1);
        for (int64_t j = 0; j < Lk; j++) {
            if (lse == -INFINITY) { /* attended to nothing: contributes nothing */
                s[j] = dp[j] = 0.0f;
                continue;
            }
            s[j] = (float)exp((double)s[j] - lse);
            dp[j] = (float)((double)p->scale * s[j] * ((double)dp[j] - d));
        }
    }

    /* dV = P^T dO, dK = dS^T Q (group sums), dQ = dS K. */
    if (ta_tensor_numel(g->dV) > 0)
        st = group_sum("bhij,bhid->bhjd", "bkgij,bkgid->bkjd", g->dV, &P, g->dO, G);
    if (!st && ta_tensor_numel(g->dK) > 0)
        st = group_sum("bhij,bhid->bhjd", "bkgij,bkgid->bkjd", g->dK, &dP, p->Q, G);
    if (!st && ta_tensor_numel(g->dQ) > 0)
        st = ta_sdpa_group_einsum("bhij,bhjd->bhid", "bkgij,bkjd->bkgid", g->dQ, &dP, p->K, G);
    ta_free(mem);
    return st;
}
