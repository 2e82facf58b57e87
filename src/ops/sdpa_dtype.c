/* float16 and bfloat16 in SDPA: the tensors of a problem that are stored in a half
 * type and that the resolved implementation reads or writes in float32 (sdpa.h,
 * "Storage dtypes"): the reference paths' half tensors. The fused paths convert every
 * tensor themselves, in their tile and row loops (ta_sdpa_native_dtypes), so a half
 * problem on them needs no stand-in (session 30; before, the fused forward's half Q and
 * O and every half tensor of the backward had one: 130 MiB for the seed's backward in
 * bfloat16).
 *
 * ta_sdpa_run and ta_sdpa_scratch_bytes go through here for every call (dense, varlen
 * sequences, KV-cache sequences). A tensor whose dtype is not float32 and that the
 * implementation does not convert itself gets a contiguous float32 stand-in at the start
 * of the scratch: inputs are widened into it before the implementation runs (exact),
 * outputs are computed into it and rounded once to their dtype (nearest-even) after the
 * implementation succeeded. Float32 problems cost nothing here. */
#include "ops/sdpa.h"

#include "core/core.h"
#include "core/dtype.h"
#include "core/tensor_internal.h"

#include <math.h>
#include <omp.h>

/* The problem's tensor of a role (NULL when the problem has none). */
static const ta_tensor *role_tensor(const ta_sdpa_problem *p, int role)
{
    switch (role) {
    case TA_SDPA_T_Q: return p->Q;
    case TA_SDPA_T_K: return p->K;
    case TA_SDPA_T_V: return p->V;
    case TA_SDPA_T_O: return p->O;
    case TA_SDPA_T_DO: return p->backward ? p->dO : NULL;
    case TA_SDPA_T_DQ: return p->backward ? p->dQ : NULL;
    case TA_SDPA_T_DK: return p->backward ? p->dK : NULL;
    default: return p->backward ? p->dV : NULL;
    }
}

static void set_role(ta_sdpa_problem *p, int role, ta_tensor *t)
{
    switch (role) {
    case TA_SDPA_T_Q: p->Q = t; break;
    case TA_SDPA_T_K: p->K = t; break;
    case TA_SDPA_T_V: p->V = t; break;
    case TA_SDPA_T_O: p->O = t; break;
    case TA_SDPA_T_DO: p->dO = t; break;
    case TA_SDPA_T_DQ: p->dQ = t; break;
    case TA_SDPA_T_DK: p->dK = t; break;
    default: p->dV = t; break;
    }
}

/* Whether a role is an output of the problem (written), not an input. */
static bool role_is_output(const ta_sdpa_problem *p, int role)
{
    if (role == TA_SDPA_T_O) return !p->backward;
    return role == TA_SDPA_T_DQ || role == TA_SDPA_T_DK || role == TA_SDPA_T_DV;
}

bool ta_sdpa_native_dtypes(const ta_sdpa_problem *p)
{
    /* the fused paths read and write every tensor in its own dtype: the forward widens K
     * and V tile by tile (kv_tile: a decode step reads a half-precision cache once, at
     * half the bytes, and a paged cache, which has no stand-in, in place), Q a tile's rows
     * as it packs them (or takes a bfloat16 Q's rows as they are for the dot product's
     * kernels) and rounds O's rows as it finishes them; the backward widens Q, K and dO a
     * group's rows at a time (or whole), V a key tile's rows, O and dO a row for D_i, and
     * rounds the gradients a row at a time (sdpa_backward_fused.c) */
    return p->path == TA_SDPA_FUSED;
}

void ta_sdpa_stage_plan(ta_sdpa_staging *s, const ta_sdpa_problem *p)
{
    s->p = *p;
    const bool native = ta_sdpa_native_dtypes(p);
    for (int r = 0; r < TA_SDPA_T_COUNT; r++) {
        const ta_tensor *t = role_tensor(p, r);
        s->orig[r] = NULL;
        if (!t || t->dtype == TA_F32 || native) continue;
        s->orig[r] = t;
        s->t[r] = ta_tensor_view(NULL, t->ndim, t->shape); /* float32, contiguous */
        set_role(&s->p, r, &s->t[r]);
    }
}

/* The stand-ins laid out in a (measuring or carving). */
static void stage_layout(ta_arena *a, ta_sdpa_staging *s)
{
    for (int r = 0; r < TA_SDPA_T_COUNT; r++)
        if (s->orig[r]) s->t[r].data = TA_ARENA_TAKE(a, float, ta_tensor_numel(&s->t[r]));
}

size_t ta_sdpa_stage_bytes(ta_sdpa_staging *s)
{
    ta_arena m = ta_arena_measure();
    stage_layout(&m, s);
    return ta_arena_bytes(&m);
}

ta_status ta_sdpa_stage_in(ta_sdpa_staging *s, ta_arena *a)
{
    stage_layout(a, s);
    if (a->overflow) return ta_error(TA_EINTERNAL, "%s: scratch smaller than planned", s->p.fn);
    for (int r = 0; r < TA_SDPA_T_COUNT; r++)
        if (s->orig[r] && !role_is_output(&s->p, r))
            ta_tensor_copy_rows(&s->t[r], s->orig[r]);
    return TA_OK;
}

void ta_sdpa_stage_out(const ta_sdpa_staging *s)
{
    for (int r = 0; r < TA_SDPA_T_COUNT; r++)
        if (s->orig[r] && role_is_output(&s->p, r)) {
            ta_tensor out = *s->orig[r]; /* the caller's output: its data is written */
            ta_tensor_copy_rows(&out, &s->t[r]);
        }
}

void ta_bf16_scan(const uint16_t *row, int64_t n, int64_t s, uint16_t *most, uint16_t *sub)
{
    uint16_t m = *most, b = *sub;
    if (s == 1) {
        for (int64_t j = 0; j < n; j++) {
            const uint16_t a = row[j] & 0x7fffu;
            m = a > m ? a : m;
            b |= (uint16_t)(a != 0) & (uint16_t)(a < 0x0080u);
        }
    } else {
        for (int64_t j = 0; j < n; j++) {
            const uint16_t a = row[j * s] & 0x7fffu;
            m = a > m ? a : m;
            b |= (uint16_t)(a != 0) & (uint16_t)(a < 0x0080u);
        }
    }
    *most = m;
    *sub = b;
}

bool ta_sdpa_bf16_dot_exact(const ta_tensor *x, int64_t cols, float factor)
{
    if (x->dtype != TA_BF16 || ta_tensor_numel(x) == 0) return true;
    const int nd = x->ndim;
    const int64_t n = x->shape[nd - 1], s = x->stride[nd - 1];
    const int64_t rows = ta_tensor_numel(x) / n;
    const bool flat = ta_tensor_is_contiguous(x); /* the rows one run of rows * n elements */
    uint16_t most = 0, sub = 0;
    const int nt = ta_threads();
#pragma omp parallel num_threads(nt) reduction(max : most) reduction(| : sub) \
    if (nt > 1 && rows * n >= (1 << 18))
    {
        const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
        const int64_t r0 = rows * t / T, r1 = rows * (t + 1) / T;
        const uint16_t *base = (const uint16_t *)x->data;
        if (flat) {
            ta_bf16_scan(base + r0 * n, (r1 - r0) * n, 1, &most, &sub);
        } else if (r0 < r1) {
            int64_t idx[TA_MAX_DIMS] = {0}, rest = r0;
            for (int d = nd - 2; d >= 0; d--) {
                idx[d] = rest % x->shape[d];
                rest /= x->shape[d];
            }
            for (int64_t r = r0; r < r1; r++) {
                const uint16_t *row = base;
                for (int d = 0; d < nd - 1; d++) row += idx[d] * x->stride[d];
                ta_bf16_scan(row, n, s, &most, &sub);
                ta_index_next(nd - 1, x->shape, idx);
            }
        }
    }
    return ta_bf16_dot_fits(most, sub, cols, factor);
}

bool ta_bf16_dot_fits(uint16_t most, uint16_t sub, int64_t cols, float factor)
{
    if (sub || most >= 0x7f80u) return false; /* a subnormal, inf or NaN */
    const double big = fmax(1.0, (double)ta_bf16_to_f32(most));
    return fabs((double)factor) * (double)cols * big <= 0x1p100;
}
