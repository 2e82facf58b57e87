/* The fused SDPA forward's work list, the keys its rows see, and the merge of a key split
 * (sdpa_forward_fused.c has the whole algorithm; sdpa_fused_internal.h what the files share).
 *
 * Threads take whole work items (a tile, or a tile's key chunk) from a list ordered by
 * group, then within the group by query position from the last tile to the first (a
 * causal tile near the diagonal's end costs the most; with any other bound the tiles
 * cost the same): the threads share one group's K and V in cache, and the cheap items
 * fill the gaps at the end. The list is built in that order, never sorted. Each output
 * row is computed by one thread in a fixed order, so results do not depend on the
 * thread count. Problems with few tiles and many keys
 * (decode) also split the keys into chunks of about TA_FUSED_SPLIT keys, fixed by the
 * shape alone, whose partial (m, l, O) are merged by log-sum-exp in chunk order. */
#include "ops/sdpa_fused_internal.h"

#include "core/core.h"
#include "ops/sdpa_fused_variants.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A keep or block mask tensor that is broadcast over the batch, the heads or the query
 * rows is often a bound in disguise: the seed's triu mask is the causal limit, a padding
 * mask [B, 1, 1, Lk] a key length. Each distinct mask row gets, once per call, the
 * start P of its first blocked key and the first allowed key N at or after P (Lk if
 * none): a query row whose bound `end` has N >= end sees exactly the keys below
 * min(end, P), so its tiles need no mask at all. */
int64_t ta_fused_mask_table_rows(const ta_mask_plan *mp)
{
    if (!mp->has_mask || mp->mode == TA_MASK_ADDITIVE) return 0;
    if (mp->mstride[0] && mp->mstride[1] && mp->mstride[2]) return 0; /* read once anyway */
    return (mp->mstride[0] ? mp->B : 1) * (mp->mstride[1] ? mp->H : 1) *
           (mp->mstride[2] ? mp->Lq : 1);
}

void ta_fused_mask_bounds(const ta_mask_plan *mp, int64_t *mt, int64_t rows, int nt)
{
    const int64_t nh = mp->mstride[1] ? mp->H : 1, nl = mp->mstride[2] ? mp->Lq : 1;
    const int64_t ms = mp->mstride[3], Lk = mp->Lk;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t m = 0; m < rows; m++) {
        const float *row = mp->mask + (m / (nh * nl)) * mp->mstride[0] +
                           (m / nl % nh) * mp->mstride[1] + (m % nl) * mp->mstride[2];
        int64_t j = 0;
        while (j < Lk && !ta_mask_value_blocks(mp->mode, row[j * ms])) j++;
        mt[2 * m] = j;
        while (j < Lk && ta_mask_value_blocks(mp->mode, row[j * ms])) j++;
        mt[2 * m + 1] = j;
    }
}

/* O row and LSE of row r of a tile from nch partial (m, l, o) triples, merged in chunk
 * order in double: M = max m_c, f_c = e^(m_c - M) (times ta_softmax_state_scale: a
 * base-2 softmax's l_c and o_c carry a factor of their own), L = sum l_c f_c, O = sum
 * o_c f_c / L. A row with L = 0 attends to nothing: O = 0, LSE = -inf. NaN in l or o
 * stays NaN. */
static void finish_row(const fused_plan *f, int64_t b, int64_t hkv, int64_t r,
                       const float *const *m, const float *const *l, const float *const *o,
                       int64_t nch)
{
    const ta_sdpa_problem *p = f->p;
    int64_t h, i;
    row_hi(f, hkv, r, &h, &i);
    double M = -INFINITY, fc[TA_FUSED_MAX_CHUNKS], L = 0.0;
    for (int64_t c = 0; c < nch; c++)
        if (m[c][0] > M) M = m[c][0];
    double u = M == -INFINITY ? 0.0 : M;
    for (int64_t c = 0; c < nch; c++) {
        fc[c] = exp((double)m[c][0] - u) * ta_softmax_state_scale(f->k, m[c][0]);
        L += (double)l[c][0] * fc[c];
    }
    const ta_tensor *O = p->O;
    char *orow = o_row(p, b, h, i); /* float32 or half elements (rounded once, each) */
    const int64_t oes = (int64_t)ta_elem_size(O->dtype);
    double lse = L == 0.0 ? -INFINITY : u + log(L);
    double factor = 0.0;
    if (p->var.sinks) /* O = sum o_c e^(m_c - u) * factor */
        ta_sdpa_sink_finish(u, L, ta_sdpa_sink(&p->var, h), &factor, &lse);
    if (L == 0.0) {
        for (int64_t d = 0; d < p->Dv; d++) ta_dtype_store(orow + d * O->stride[3] * oes, O->dtype, 0.0f);
    } else {
        /* columns in blocks, the chunks in order for each (the sums vectorise along d) */
        for (int64_t d0 = 0; d0 < p->Dv; d0 += 64) {
            const int64_t n = TA_MIN(64, p->Dv - d0);
            double acc[64];
            for (int64_t d = 0; d < n; d++) acc[d] = 0.0;
            for (int64_t c = 0; c < nch; c++) {
                const float *oc = o[c] + d0;
                const double w = fc[c];
                if (n == 64) /* a constant count: one vector loop, no scalar versions */
                    for (int d = 0; d < 64; d++) acc[d] += (double)oc[d] * w;
                else
                    for (int64_t d = 0; d < n; d++) acc[d] += (double)oc[d] * w;
            }
            char *out = orow + d0 * O->stride[3] * oes;
            for (int64_t d = 0; d < n; d++)
                ta_dtype_store(out + d * O->stride[3] * oes, O->dtype,
                               (float)(p->var.sinks ? acc[d] * factor : acc[d] / L));
        }
    }
    if (p->lse) {
        const ta_tensor *T = p->lse;
        ((float *)T->data)[b * T->stride[0] + h * T->stride[1] + i * T->stride[2]] = (float)lse;
    }
}

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

bool ta_sdpa_stream_rows_of(const ta_tensor *t, int64_t cols, int64_t numel, int64_t min_bytes)
{
#if defined(__SSE2__)
    return t->dtype == TA_F32 && t->stride[3] == 1 && cols > 0 && cols % 4 == 0 &&
           numel >= min_bytes / (int64_t)sizeof(float);
#else
    (void)t, (void)cols, (void)numel, (void)min_bytes;
    return false;
#endif
}

bool ta_sdpa_stream_rows(const ta_tensor *t, int64_t cols, int64_t min_bytes)
{
    return ta_sdpa_stream_rows_of(t, cols, ta_tensor_numel(t), min_bytes);
}

static int by_cost(const void *x, const void *y)
{
    const ta_sdpa_cost *a = x, *b = y;
    if (a->cost != b->cost) return a->cost > b->cost ? -1 : 1;
    return (a->s > b->s) - (a->s < b->s);
}

void ta_sdpa_order_by_cost(ta_sdpa_cost *keys, int64_t n, int64_t *order)
{
    qsort(keys, (size_t)n, sizeof *keys, by_cost);
    for (int64_t k = 0; k < n; k++) order[k] = keys[k].s;
}

int64_t ta_sdpa_o_stream_min(const ta_tensor *O, int64_t cols)
{
    return O->shape[2] > 1 && O->stride[2] != cols ? TA_SDPA_STREAM_MIN_APART : TA_SDPA_STREAM_MIN;
}

void ta_sdpa_stream_fence(void)
{
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

void ta_fused_o_ready(const fused_plan *f, const fused_item *it, const fused_ws *w)
{
    if (*w->o_live) return;
    memset(w->o, 0, sizeof(float) * (size_t)(it->mq * f->ldo)); /* no kernel reads rows >= mq */
    *w->o_live = 1;
}

void ta_fused_finish_item(const fused_plan *f, const fused_item *it, const fused_ws *w)
{
    ta_fused_o_ready(f, it, w); /* an item no P.V ran for (no key, or every tile blocked) */
    const ta_sdpa_problem *p = f->p;
    const ta_tensor *O = p->O, *T = p->lse;
    const int64_t os = O->stride[3], Dv = p->Dv;
    const bool half = O->dtype != TA_F32; /* its rows in w->o, then rounded (below) */
    int64_t h, i;
    row_hi(f, it->hkv, it->r0, &h, &i);
    if (os == 1 && !T && !p->var.sinks && !half) {
        /* O alone: the rows of each head in one kernel call (a call and the row's address
         * a row cost the B512 H8 L128 D64 causal case ~2% of its time) */
        for (int64_t r = 0; r < it->mq;) {
            const int64_t n = TA_MIN(it->mq - r, p->Lq - i);
            f->k->attn_finish_rows((float *)(void *)o_row(p, it->b, h, i), O->stride[2], w->o + r * f->ldo,
                                   f->ldo, w->l + r, n, Dv, f->stream_o);
            r += n;
            h++;
            i = 0;
        }
        return;
    }
    for (int64_t r = 0; r < it->mq; r++) {
        char *orow = o_row(p, it->b, h, i);
        float *o = w->o + r * f->ldo;
        float l = w->l[r], inv = l == 0.0f ? 0.0f : 1.0f / l; /* inv NaN when l is */
        /* the log only when LSE is kept (errno keeps gcc from dropping the call); l and o
         * times sc are the natural sums (a base-2 softmax's carry; o / l needs none) */
        double lse = l == 0.0f || !T ? -INFINITY
                                     : (double)w->m[r] + log((double)l * ta_softmax_state_scale(f->k, w->m[r]));
        if (p->var.sinks) { /* the sink joins the denominator: O and LSE change */
            const double sc = ta_softmax_state_scale(f->k, w->m[r]);
            double factor;
            ta_sdpa_sink_finish(w->m[r], (double)l * sc, ta_sdpa_sink(&p->var, h), &factor, &lse);
            inv = (float)(factor * sc);
        }
        if (half) { /* the float32 row in place (the item's last use of it), rounded once */
            f->k->attn_scale_row(o, o, inv, l == 0.0f, Dv, 0);
            ta_k_row_from_f32(f->k, orow, O->dtype, o, Dv, os);
        } else if (os == 1) {
            f->k->attn_scale_row((float *)(void *)orow, o, inv, l == 0.0f, Dv, f->stream_o);
        } else {
            float *out = (float *)(void *)orow;
            for (int64_t d = 0; d < Dv; d++) out[d * os] = l == 0.0f ? 0.0f : o[d] * inv;
        }
        if (T)
            ((float *)T->data)[it->b * T->stride[0] + h * T->stride[1] + i * T->stride[2]] =
                (float)lse;
        row_next(f, &h, &i);
    }
}

int64_t ta_fused_group_tiles(const fused_plan *f, int64_t *r0, int64_t *mq)
{
    int64_t Lq = f->p->Lq, G = f->G, MQ = f->mq_max, n = 0;
    if (Lq >= MQ) {
        /* A short tile of few rows (<= attn_rows_max) takes the few-row kernels, built to
         * stream K and V once, not for compute: under a causal mask it goes first, where
         * its rows see the fewest keys. Two-port Xeon, 1 thread, B32 H8 D64 causal
         * (driver, medians of 15, alternating): L200 (4 x 48 + 8) 20.8 -> 18.3 ms, L49
         * 2.26 -> 1.86; B8 L488 23.9 -> 23.1; 2 threads L200 9.49 -> 8.83. With a longer
         * short tile (L128: 48, 48, 32) first was slower (91.2 -> 92.0 ms; 2 threads
         * 47.0 -> 48.7): that one stays last. */
        const int64_t rem = f->p->mask.causal && Lq % MQ <= f->k->attn_rows_max ? Lq % MQ : 0;
        for (int64_t g = 0; g < G; g++)
            for (int64_t i = 0; i < Lq; n++) {
                const int64_t m = i == 0 && rem ? rem : TA_MIN(MQ, Lq - i);
                if (r0) {
                    r0[n] = g * Lq + i;
                    mq[n] = m;
                }
                i += m;
            }
    } else {
        for (int64_t r = 0; r < G * Lq; r += MQ, n++)
            if (r0) {
                r0[n] = r;
                mq[n] = TA_MIN(MQ, G * Lq - r);
            }
    }
    return n;
}

/* The k-th tile of a group in schedule order, as an index of ta_fused_group_tiles' list: per
 * head (Lq fills tiles), the last query position first, heads in order at each
 * position; across heads (short Lq), the list order. */
static int64_t tile_in_order(const fused_plan *f, int64_t k)
{
    int64_t Lq = f->p->Lq, MQ = f->mq_max;
    if (Lq < MQ) return k;
    int64_t per_head = (Lq + MQ - 1) / MQ, g = k % f->G, pos = per_head - 1 - k / f->G;
    return g * per_head + pos;
}

/* A tile's keys [*jlo, *jhi): from the smallest first key of its rows (a window's;
 * rounded down to 16 keys) to the largest row bound; 0, 0 when no row sees a key. */
static void tile_keys(const fused_plan *f, const fused_item *base, int64_t *jlo, int64_t *jhi)
{
    int64_t jmin = f->p->Lk, jmax = 0, h, i;
    row_hi(f, base->hkv, base->r0, &h, &i);
    if (!f->mt && i + base->mq <= f->p->Lq) {
        /* Rows of one head and no mask tensor: a row's bounds (causal limit, key length,
         * window) depend on (b, i) alone and neither decreases as i grows, so the rows
         * that see a key are consecutive, the first of them has the smallest first key
         * and the last the largest bound. The scan is over once each end finds one: this
         * serial pass over every tile (before the threads start) took 1.4% of a 1-thread
         * L = 128 causal profile when it visited every row. */
        int64_t lo = 0, e = 0, a = 0, z = base->mq - 1;
        bool exact;
        for (; a < base->mq; a++) {
            e = ta_fused_row_keys(f, base->b, h, i + a, &lo, &exact);
            if (lo < e) break;
        }
        if (a == base->mq) {
            *jlo = *jhi = 0;
            return;
        }
        jmin = lo;
        for (;; z--) {
            e = ta_fused_row_keys(f, base->b, h, i + z, &lo, &exact);
            if (lo < e) break;
        }
        *jlo = jmin / 16 * 16;
        *jhi = e;
        return;
    }
    for (int64_t r = 0; r < base->mq; r++, row_next(f, &h, &i)) {
        int64_t lo;
        bool exact;
        const int64_t e = ta_fused_row_keys(f, base->b, h, i, &lo, &exact);
        if (lo >= e) continue; /* sees no key */
        if (e > jmax) jmax = e;
        if (lo < jmin) jmin = lo;
    }
    *jlo = jmin >= jmax ? 0 : jmin / 16 * 16;
    *jhi = jmax;
}

/* The work list of a sweep (f->sweep kv heads, one tile each): per batch and key chunk,
 * one unit of the Hkv items (hkv in order), as many chunks as the head with the most
 * keys needs (the others get empty items there: exact zeros in the merge). */
static int64_t build_sweep(const fused_plan *f, const fused_mem *m)
{
    const ta_sdpa_problem *p = f->p;
    int64_t n = 0;
    for (int64_t b = 0; b < p->B; b++) {
        fused_item base[TA_FUSED_SWEEP_MAX];
        int64_t jlo[TA_FUSED_SWEEP_MAX], jhi[TA_FUSED_SWEEP_MAX], nch = 1;
        for (int64_t hkv = 0; hkv < p->Hkv; hkv++) {
            const int64_t g = b * p->Hkv + hkv;
            base[hkv] = (fused_item){.b = b, .hkv = hkv, .r0 = m->t_r0[0], .mq = m->t_mq[0], .tile = g};
            tile_keys(f, &base[hkv], &jlo[hkv], &jhi[hkv]);
            while (f->split && nch < f->nchunks && nch * f->chunk_keys < jhi[hkv]) nch++;
        }
        for (int64_t c = 0; c < nch; c++)
            for (int64_t hkv = 0; hkv < p->Hkv; hkv++) {
                fused_item it = base[hkv];
                it.chunk = c;
                it.jlo = TA_MAX(c * f->chunk_keys, jlo[hkv]);
                it.jhi = TA_MIN(c * f->chunk_keys + f->chunk_keys, jhi[hkv]);
                if (it.jhi < it.jlo) it.jhi = it.jlo;
                m->items[n++] = it;
            }
        for (int64_t hkv = 0; f->split && hkv < p->Hkv; hkv++) m->t_nch[base[hkv].tile] = nch;
    }
    return n;
}

int64_t ta_fused_build_items(const fused_plan *f, const fused_mem *m)
{
    const ta_sdpa_problem *p = f->p;
    if (f->sweep > 1) return build_sweep(f, m);
    int64_t n = 0;
    for (int64_t g = 0; g < f->ngroups; g++) {
        for (int64_t k = 0; k < f->tpg; k++) {
            int64_t t = tile_in_order(f, k);
            fused_item base = {.b = g / p->Hkv, .hkv = g % p->Hkv, .r0 = m->t_r0[t],
                               .mq = m->t_mq[t], .tile = g * f->tpg + t};
            int64_t jmin, jmax;
            tile_keys(f, &base, &jmin, &jmax);
            int64_t c = 0;
            for (; c < f->nchunks; c++) {
                if (f->split && c > 0 && c * f->chunk_keys >= jmax) break; /* and later ones */
                fused_item it = base;
                it.chunk = c;
                /* a chunk left of every row's window holds no key: an empty partial */
                it.jlo = TA_MAX(c * f->chunk_keys, jmin);
                it.jhi = TA_MIN(c * f->chunk_keys + f->chunk_keys, jmax);
                if (it.jhi < it.jlo) it.jhi = it.jlo;
                m->items[n++] = it;
            }
            if (f->split) m->t_nch[base.tile] = c;
        }
    }
    return n;
}

void ta_fused_store_partial(const fused_plan *f, const fused_mem *m, const fused_item *it,
                            const fused_ws *w)
{
    const int64_t Dv = f->p->Dv, mu = f->mq_used;
    ta_fused_o_ready(f, it, w);
    float *pt = m->parts + (it->tile * f->nchunks + it->chunk) * f->part_floats;
    memcpy(pt, w->m, sizeof(float) * (size_t)it->mq);
    memcpy(pt + mu, w->l, sizeof(float) * (size_t)it->mq);
    for (int64_t r = 0; r < it->mq; r++)
        memcpy(pt + 2 * mu + r * Dv, w->o + r * f->ldo, sizeof(float) * (size_t)Dv);
}

void ta_fused_merge_tile(const fused_plan *f, const fused_mem *m, int64_t t)
{
    const ta_sdpa_problem *p = f->p;
    const int64_t mu = f->mq_used;
    const int64_t g = t / f->tpg, tt = t % f->tpg;
    const float *ms[TA_FUSED_MAX_CHUNKS], *ls[TA_FUSED_MAX_CHUNKS], *os[TA_FUSED_MAX_CHUNKS];
    const int64_t nch = m->t_nch[t];
    for (int64_t r = 0; r < m->t_mq[tt]; r++) {
        for (int64_t c = 0; c < nch; c++) {
            const float *pt = m->parts + (t * f->nchunks + c) * f->part_floats;
            ms[c] = pt + r;
            ls[c] = pt + mu + r;
            os[c] = pt + 2 * mu + r * p->Dv;
        }
        finish_row(f, g / p->Hkv, g % p->Hkv, m->t_r0[tt] + r, ms, ls, os, nch);
    }
}
