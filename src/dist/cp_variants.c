/* The attention variants across shards (docs/context_parallel.md, "Variants"): what the
 * ranks compare before they communicate, the sinks' single join in the merge, and the
 * sinks' gradient summed over every rank. The window and ALiBi reach the block calls as
 * a global diagonal offset (cp_blocks.c), the softcap as it is. */
#include "dist/cp_internal.h"

#include "core/core.h"

#include "ops/sdpa_variants.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* FNV-1a over the float bits of a 1-d or 2-d float32 tensor, in index order. */
static uint64_t hash_values(const ta_tensor *t)
{
    uint64_t h = 1469598103934665603ull;
    const int64_t rows = t->ndim == 2 ? t->shape[0] : 1, cols = t->shape[t->ndim - 1];
    const int64_t rs = t->ndim == 2 ? t->stride[0] : 0, cs = t->stride[t->ndim - 1];
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            uint32_t bits;
            memcpy(&bits, (const float *)t->data + r * rs + c * cs, sizeof bits);
            for (int i = 0; i < 4; i++) {
                h ^= bits >> (8 * i) & 0xff;
                h *= 1099511628211ull;
            }
        }
    return h;
}

void cp_vdesc_of(cp_vdesc *d, const ta_sdpa_opts *o)
{
    memset(d, 0, sizeof *d);
    d->left = o->has_window ? o->window_left : -1;
    d->right = o->has_window ? o->window_right : -1;
    memcpy(&d->softcap_bits, &o->softcap, sizeof d->softcap_bits);
    if (o->alibi_slopes) {
        d->alibi_ndim = o->alibi_slopes->ndim;
        d->alibi_hash = hash_values(o->alibi_slopes);
    }
    if (o->sinks) {
        d->has_sinks = 1;
        d->sinks_hash = hash_values(o->sinks);
    }
    d->has_dsinks = o->dsinks != NULL;
}

const char *cp_vdesc_differs(const cp_vdesc *a, const cp_vdesc *b)
{
    if (a->left != b->left || a->right != b->right) return "the window (opts->window_left/right)";
    if (a->softcap_bits != b->softcap_bits) return "opts->softcap";
    if (a->alibi_ndim != b->alibi_ndim || a->alibi_hash != b->alibi_hash)
        return "opts->alibi_slopes";
    if (a->has_sinks != b->has_sinks || a->sinks_hash != b->sinks_hash) return "opts->sinks";
    if (a->has_dsinks != b->has_dsinks) return "whether opts->dsinks is given";
    return NULL;
}

void cp_variants_set(cp_ctx *ctx, const ta_sdpa_opts *o)
{
    cp_vdesc d;
    cp_vdesc_of(&d, o);
    /* a bound past any sequence's length is the same window: clamped, so that the
     * pieces' cuts (cp_blocks.c, window_cut) add and subtract it without overflow */
    const int64_t wide = (int64_t)1 << 61;
    ctx->win_left = d.left > wide ? wide : d.left;
    ctx->win_right = d.right > wide ? wide : d.right;
    ctx->positional = d.left >= 0 || d.right >= 0 || o->alibi_slopes;
    ctx->sinks = o->sinks;
    ctx->dsinks = o->dsinks;
}

void cp_sinks_merge(const cp_ctx *ctx, float *o, float *lse, int64_t Lr)
{
    if (!ctx->sinks) return;
    const int64_t rows = ctx->B * ctx->H * Lr, Dv = ctx->Dv;
    const ta_tensor *s = ctx->sinks;
#pragma omp parallel for num_threads(ta_get_num_threads()) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t h = r / Lr % ctx->H;
        const float sigma = ((const float *)s->data)[h * s->stride[0]];
        const float l = lse[r], with = ta_sdpa_lse_with_sink(l, sigma);
        /* the keys' part weighs exp(l - with); a row that saw no key keeps O = 0; a +inf
         * sink beside the row's keys makes the row NaN (inf - inf), as the single process
         * does (with is NaN then) */
        if (isfinite(l)) {
            const float w = isnan(with) ? NAN : (float)exp((double)l - (double)with);
            for (int64_t d = 0; d < Dv; d++) o[r * Dv + d] *= w;
        }
        lse[r] = with;
    }
}

ta_status cp_sinks_grad(cp_ctx *ctx, const ta_tensor *dO, const ta_tensor *O,
                        const ta_tensor *lse, double *part)
{
    if (!ctx->dsinks) return TA_OK;
    const int64_t H = ctx->H;
    ta_status st = TA_OK;
    const ta_tensor *s = ctx->sinks;
    double t = cp_now();
    for (int64_t h = 0; h < H; h++)
        part[h] = ta_sdpa_sink_grad_head(O, dO, lse, h,
                                         ((const float *)s->data)[h * s->stride[0]]);
    ctx->stats.compute_s += cp_now() - t;
    t = cp_now();
    int rc = MPI_Allreduce(part, part + H, (int)H, MPI_DOUBLE, MPI_SUM, ctx->comm);
    ctx->stats.blocked_s += cp_now() - t;
    if (cp_mpi_ok(ctx, rc, "MPI_Allreduce"))
        for (int64_t h = 0; h < H; h++)
            ((float *)ctx->dsinks->data)[h * ctx->dsinks->stride[0]] = (float)part[H + h];
    else
        st = TA_EIO;
    return st;
}
