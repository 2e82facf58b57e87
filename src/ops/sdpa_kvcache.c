/* ta_sdpa_kvcache and its workspace query (tensorattn.h, "KV cache"; DESIGN.md, "KV
 * cache"). A call goes:
 *   1. validate every argument, including the data of seqlens and of the block-table
 *      entries each sequence uses: nothing is written, the cache included, unless all of
 *      it passed;
 *   2. plan one scratch block (kv_layout). Every sequence becomes a problem of the same
 *      shape: its keys are the whole capacity of its cache (Lk = Lmax, or max_blocks *
 *      block_size) and its real length Lk_b = seqlens[b] + Lnew is the problem's key
 *      length, so the size depends on the shapes and the capacity, never on seqlens or
 *      Lnew: one workspace serves a prefill and every decode step after it;
 *   3. append k_new and v_new at keys seqlens[b] .. of every sequence (append_rows, the
 *      one place the cache is written), all of them before any attention;
 *   4. run each sequence as a dense problem of ta_sdpa's machinery (ta_sdpa_run) on
 *      views: q_b and O_b [1, H, Lq, D|Dv] of q's and O's BSHD rows, K_b and V_b
 *      [1, Hkv, capacity, D|Dv] of the cache (contiguous: a strided view of row b;
 *      paged: the cache with row b of the block table as the problem's ta_sdpa_pages),
 *      key length Lk_b, causal bottom_right aligned to Lk_b (query i sees keys
 *      j <= i + Lk_b - Lq). The fused forward never visits keys past a row's bound, so it
 *      reads no cache row at or past Lk_b; it cuts key tiles at block boundaries and
 *      splits long caches into key chunks merged by LSE (decode). The reference path's
 *      einsums read every key, so it first gathers the sequence's Lk_b keys (zeros after
 *      them) into the scratch (gather_keys).
 * On the fused path the sequences run together, in one parallel region
 * (ta_sdpa_forward_fused_seqs), otherwise one after the other, each on all threads; each
 * is computed as ta_sdpa computes it, so results do not depend on the thread count. */
#include "ops/sdpa.h"

#include "core/core.h"
#include "core/dtype.h"

#include <math.h>
#include <stdlib.h>

/* One validated call. */
typedef struct kv_call {
    const char *fn;
    ta_tensor *O, *lse;
    const ta_tensor *q, *kc, *vc, *kn, *vn; /* q, the cache's k and v, k_new, v_new */
    const int32_t *seqlens, *table;         /* table NULL: a contiguous cache */
    int64_t B, Lq, H, D, Hkv, Dv, Lnew;
    int64_t cap;                            /* keys a sequence's cache holds */
    int64_t max_blocks, block_size, nblocks;
    float scale;
    ta_causal causal;
    ta_sdpa_path path;                      /* resolved: fused unless reference asked */
    ta_sdpa_variants var;                   /* window, softcap, ALiBi, sinks (delta: per
                                               sequence, seq_problem) */
    const ta_tensor *alibi, *sinks;         /* their tensors, for the overlap checks */
} kv_call;

/* ------------------------------------------------------------ validation */

static ta_status check_opts(kv_call *k, const ta_sdpa_opts *o)
{
    const char *fn = k->fn;
    if (o->mask)
        return ta_error(TA_EINVAL, "%s: opts->mask does not combine with a KV cache (each "
                        "sequence's keys are its cache's first seqlens[b] + Lnew)", fn);
    if (o->key_lengths)
        return ta_error(TA_EINVAL, "%s: opts->key_lengths does not combine with a KV cache "
                        "(cache->seqlens gives each sequence's keys)", fn);
    if (o->weights)
        return ta_error(TA_EINVAL, "%s: opts->weights must be NULL: the KV cache path forms "
                        "no weights", fn);
    if (o->cu_seqlens_q || o->cu_seqlens_k)
        return ta_error(TA_EINVAL, "%s: opts->cu_seqlens_q/k do not combine with a KV cache "
                        "(one sequence per batch row of q)", fn);
    if (!isfinite(o->scale))
        return ta_error(TA_EINVAL, "%s: opts->scale must be finite, got %g", fn, (double)o->scale);
    if (o->path != TA_SDPA_AUTO && o->path != TA_SDPA_REFERENCE && o->path != TA_SDPA_FUSED)
        return ta_error(TA_EINVAL, "%s: opts->path = %d is not a ta_sdpa_path value", fn,
                        (int)o->path);
    if (o->causal != TA_CAUSAL_NONE && o->causal != TA_CAUSAL_TOP_LEFT &&
        o->causal != TA_CAUSAL_BOTTOM_RIGHT)
        return ta_error(TA_EINVAL, "%s: opts->causal = %d is not a ta_causal value", fn,
                        (int)o->causal);
    k->causal = o->causal;
    ta_status st = ta_sdpa_variants_init(&k->var, fn, o, k->B, k->H, false, true);
    if (st) return st;
    const char *gap = ta_sdpa_variants_fused_gap(&k->var);
    if (gap && o->path == TA_SDPA_FUSED)
        return ta_error(TA_EUNSUPPORTED, "%s: the fused path (TA_SDPA_FUSED) does not implement "
                        "a %s; use TA_SDPA_REFERENCE or TA_SDPA_AUTO", fn, gap);
    k->alibi = o->alibi_slopes;
    k->sinks = o->sinks;
    k->path = o->path == TA_SDPA_REFERENCE || gap ? TA_SDPA_REFERENCE : TA_SDPA_FUSED;
    k->scale = o->scale != 0.0f ? o->scale : (k->D > 0 ? (float)(1.0 / sqrt((double)k->D)) : 1.0f);
    return TA_OK;
}

/* The cache tensors against q; sets Hkv, Dv and the capacity. */
static ta_status check_cache(kv_call *k, const ta_kv_cache *c)
{
    const char *fn = k->fn;
    if (!c) return ta_error(TA_EINVAL, "%s: cache is NULL", fn);
    k->table = c->block_table;
    const bool paged = c->block_table != NULL;
    ta_status st = ta_sdpa_check_rank4(fn, "cache->k", c->k, paged ? "[num_blocks, block_size, "
                                       "Hkv, D]" : "[B, Lmax, Hkv, D]");
    if (!st) st = ta_sdpa_check_rank4(fn, "cache->v", c->v, paged ? "[num_blocks, block_size, "
                                      "Hkv, Dv]" : "[B, Lmax, Hkv, Dv]");
    if (st) return st;
    const int64_t *ks = c->k->shape, *vs = c->v->shape;
    char s1[TA_SHAPE_STR_MAX], s2[TA_SHAPE_STR_MAX];
    if (vs[0] != ks[0] || vs[1] != ks[1] || vs[2] != ks[2])
        return ta_error(TA_ESHAPE, "%s: cache->v has shape %s but cache->k has %s (they differ "
                        "only in the last dim)", fn, ta_shape_str(s1, sizeof s1, 4, vs),
                        ta_shape_str(s2, sizeof s2, 4, ks));
    if (!paged && ks[0] != k->B)
        return ta_error(TA_ESHAPE, "%s: cache->k has batch %lld but q has %lld", fn,
                        (long long)ks[0], (long long)k->B);
    if (ks[3] != k->D)
        return ta_error(TA_ESHAPE, "%s: cache->k has head_dim %lld but q has %lld", fn,
                        (long long)ks[3], (long long)k->D);
    k->kc = c->k;
    k->vc = c->v;
    k->Hkv = ks[2];
    k->Dv = vs[3];
    if (k->Hkv == 0 ? k->H != 0 : k->H % k->Hkv != 0)
        return ta_error(TA_ESHAPE, "%s: q has %lld heads, not a multiple of the %lld heads of "
                        "the cache", fn, (long long)k->H, (long long)k->Hkv);
    k->seqlens = c->seqlens;
    if (!paged) {
        k->cap = ks[1];
        return TA_OK;
    }
    k->nblocks = ks[0];
    k->block_size = ks[1];
    k->max_blocks = c->max_blocks;
    if (k->block_size < 1)
        return ta_error(TA_ESHAPE, "%s: a paged cache needs block_size >= 1, got cache->k of "
                        "shape %s", fn, ta_shape_str(s1, sizeof s1, 4, ks));
    int64_t n;
    const int64_t table[2] = {k->B, k->max_blocks}, cap[2] = {k->max_blocks, k->block_size};
    if (k->max_blocks < 0 || !ta_shape_numel(&n, 2, table) || !ta_shape_numel(&k->cap, 2, cap))
        return ta_error(TA_EINVAL, "%s: cache->max_blocks = %lld is negative or too large",
                        fn, (long long)k->max_blocks);
    return TA_OK;
}

/* k_new and v_new (both or neither), O, opts->lse; sets Lnew. */
static ta_status check_new_and_outputs(kv_call *k, const ta_tensor *kn, const ta_tensor *vn,
                                       ta_tensor *O, ta_tensor *lse)
{
    const char *fn = k->fn;
    if (!kn != !vn)
        return ta_error(TA_EINVAL, "%s: k_new is %s but v_new is %s; pass both or neither", fn,
                        kn ? "given" : "NULL", vn ? "given" : "NULL");
    ta_status st;
    k->kn = kn;
    k->vn = vn;
    k->Lnew = 0;
    if (kn) {
        if ((st = ta_sdpa_check_rank4(fn, "k_new", kn, "[B, Lnew, Hkv, D]"))) return st;
        k->Lnew = kn->shape[1];
        const int64_t ks[4] = {k->B, k->Lnew, k->Hkv, k->D}, vs[4] = {k->B, k->Lnew, k->Hkv, k->Dv};
        st = ta_tensor_check_shape(fn, "k_new", kn, 4, ks, "[B, Lnew, Hkv, D]", TA_CHECK_STORAGE);
        if (!st) st = ta_tensor_check_shape(fn, "v_new", vn, 4, vs, "[B, Lnew, Hkv, Dv]", TA_CHECK_STORAGE);
        /* the append writes the caches: an output's rule (a cache broadcast over the batch
         * would take every sequence's new keys in one row) */
        if (!st) st = ta_tensor_check_unaliased(fn, "cache->k", k->kc);
        if (!st) st = ta_tensor_check_unaliased(fn, "cache->v", k->vc);
        if (st) return st;
    }
    const int64_t os[4] = {k->B, k->Lq, k->H, k->Dv}, ls[3] = {k->B, k->H, k->Lq};
    st = ta_tensor_check_shape(fn, "O", O, 4, os, "[B, Lq, H, Dv]", TA_CHECK_OUTPUT | TA_CHECK_STORAGE);
    if (!st && lse) st = ta_tensor_check_shape(fn, "opts->lse", lse, 3, ls, "[B, H, Lq]", TA_CHECK_OUTPUT);
    if (st) return st;
    k->O = O;
    k->lse = lse;
    /* the problems: B * H * Lq rows of capacity keys, a gather of capacity keys (with
     * D = Dv = 0 no tensor bounds these products) */
    int64_t n;
    const int64_t rows[4] = {k->B, k->H, k->Lq, k->cap ? k->cap : 1};
    const int64_t keys[3] = {k->Hkv, k->cap, TA_MAX(TA_MAX(k->D, k->Dv), 1)};
    if (!ta_shape_numel(&n, 4, rows) || !ta_shape_numel(&n, 3, keys))
        return ta_error(TA_ESHAPE, "%s: a sequence of %lld heads, %lld queries and a cache of "
                        "%lld keys overflows", fn, (long long)k->H, (long long)k->Lq,
                        (long long)k->cap);
    return TA_OK;
}

/* seqlens and the block-table entries each sequence uses (the data). */
static ta_status check_lengths(const kv_call *k)
{
    const char *fn = k->fn;
    if (k->B > 0 && !k->seqlens) return ta_error(TA_EINVAL, "%s: cache->seqlens is NULL", fn);
    for (int64_t b = 0; b < k->B; b++) {
        const int64_t n = k->seqlens[b];
        if (n < 0)
            return ta_error(TA_EINVAL, "%s: cache->seqlens[%lld] = %lld is negative", fn,
                            (long long)b, (long long)n);
        if (k->Lnew > k->cap || n > k->cap - k->Lnew)
            return ta_error(TA_EINVAL, "%s: sequence %lld would hold cache->seqlens[%lld] + "
                            "Lnew = %lld + %lld keys, more than its cache holds (%lld)", fn,
                            (long long)b, (long long)b, (long long)n, (long long)k->Lnew,
                            (long long)k->cap);
        if (!k->table) continue;
        /* ceil((n + Lnew) / block_size), without the sum that an absurd block_size of an
         * empty cache (Hkv or D 0) would overflow */
        const int64_t used = (n + k->Lnew) / k->block_size + ((n + k->Lnew) % k->block_size != 0);
        for (int64_t u = 0; u < used; u++) {
            const int32_t blk = k->table[b * k->max_blocks + u];
            if (blk < 0 || blk >= k->nblocks)
                return ta_error(TA_EINVAL, "%s: cache->block_table[%lld][%lld] = %d is outside "
                                "[0, %lld) (num_blocks); sequence %lld uses its first %lld "
                                "blocks", fn, (long long)b, (long long)u, (int)blk,
                                (long long)k->nblocks, (long long)b, (long long)used);
        }
    }
    return TA_OK;
}

/* Outputs against inputs; the cache, when appended to, against what the call reads. The
 * cache's k and v are not compared with each other: one buffer may interleave them. */
static ta_status check_overlaps(const kv_call *k)
{
    ta_tensor *outs[2] = {k->O, k->lse};
    const char *out_names[2] = {"O", "opts->lse"};
    const ta_tensor *ins[7] = {k->q, k->kc, k->vc, k->kn, k->vn, k->alibi, k->sinks};
    const char *in_names[7] = {"q", "cache->k", "cache->v", "k_new", "v_new",
                               "opts->alibi_slopes", "opts->sinks"};
    ta_status st = ta_sdpa_check_overlaps(k->fn, 2, outs, out_names, 7, ins, in_names);
    const ta_tensor *read[5] = {k->q, k->kn, k->vn, k->alibi, k->sinks};
    const char *read_names[5] = {"q", "k_new", "v_new", "opts->alibi_slopes", "opts->sinks"};
    for (int c = 0; !st && k->kn && c < 2; c++) {
        ta_tensor *cache = (ta_tensor *)(c ? k->vc : k->kc);
        const char *name = c ? "cache->v" : "cache->k";
        st = ta_sdpa_check_overlaps(k->fn, 1, &cache, &name, 5, read, read_names);
    }
    return st;
}

static ta_status validate(kv_call *k, const char *fn, ta_tensor *O, const ta_tensor *q,
                          const ta_kv_cache *cache, const ta_tensor *kn, const ta_tensor *vn,
                          const ta_sdpa_opts *opts)
{
    static const ta_sdpa_opts defaults = {0};
    if (!opts) opts = &defaults;
    *k = (kv_call){.fn = fn, .q = q};
    ta_status st = ta_sdpa_check_rank4(fn, "q", q, "[B, Lq, H, D]");
    if (st) return st;
    k->B = q->shape[0];
    k->Lq = q->shape[1];
    k->H = q->shape[2];
    k->D = q->shape[3];
    if (!O) return ta_error(TA_EINVAL, "%s: O is NULL", fn);
    if ((st = check_cache(k, cache))) return st;
    if ((st = check_new_and_outputs(k, kn, vn, O, opts->lse))) return st;
    if ((st = check_opts(k, opts))) return st;
    if ((st = check_lengths(k))) return st;
    if ((st = check_overlaps(k))) return st;
    const ta_tensor *all[9] = {k->O, k->lse, k->q, k->kc, k->vc, k->kn, k->vn, k->alibi, k->sinks};
    const char *names[9] = {"O", "opts->lse", "q", "cache->k", "cache->v", "k_new", "v_new",
                            "opts->alibi_slopes", "opts->sinks"};
    if ((st = ta_workspace_check(fn, &opts->workspace, 9, all, names))) return st;
    /* read while the call runs (append_rows, the sequences' problems, the pages) */
    if ((st = ta_workspace_check_bytes(fn, &opts->workspace, k->seqlens,
                                       (size_t)k->B * sizeof(int32_t), "cache->seqlens")))
        return st;
    return ta_workspace_check_bytes(fn, &opts->workspace, k->table,
                                    (size_t)(k->B * k->max_blocks) * sizeof(int32_t),
                                    "cache->block_table");
}

/* ------------------------------------------------------- sequence problems */

/* Element `off` of t, in elements of t's dtype (t's data when t is empty and may have
 * none). */
static void *elem(const ta_tensor *t, int64_t off)
{
    return t->data && off ? (char *)t->data + (size_t)off * ta_elem_size(t->dtype) : t->data;
}

/* Batch row b of a [B, L, H, X] tensor as the [1, H, L, X] view a problem takes. */
static ta_tensor head_major(const ta_tensor *t, int64_t b)
{
    ta_tensor v = *t;
    v.owned = NULL;
    v.data = elem(t, b * t->stride[0]);
    v.shape[0] = 1;
    v.shape[1] = t->shape[2];
    v.shape[2] = t->shape[1];
    v.stride[1] = t->stride[2];
    v.stride[2] = t->stride[1];
    return v;
}

/* The views of one sequence's problem (the problem points at them). */
typedef struct kv_seq {
    ta_tensor q, o, lse, k, v;
    int64_t keys; /* Lk_b, the problem's key length */
} kv_seq;

/* Sequence b's problem over the cache: Lk = the capacity, `keys` of them real. */
static ta_status seq_problem(ta_sdpa_problem *p, kv_seq *s, const kv_call *k, int64_t b,
                             int64_t keys)
{
    s->q = head_major(k->q, b);
    s->o = head_major(k->O, b);
    if (k->lse) {
        s->lse = *k->lse;
        s->lse.owned = NULL;
        s->lse.data = elem(k->lse, b * k->lse->stride[0]);
        s->lse.shape[0] = 1;
    }
    s->keys = keys;
    ta_sdpa_pages pages = {0};
    if (k->table) { /* row b of the block table; a block's rows are the view's keys */
        s->k = head_major(k->kc, 0);
        s->v = head_major(k->vc, 0);
        s->k.shape[2] = s->v.shape[2] = k->cap;
        pages = (ta_sdpa_pages){.table = k->table + b * k->max_blocks,
                                .block_size = k->block_size,
                                .k_block_stride = k->kc->stride[0],
                                .v_block_stride = k->vc->stride[0]};
    } else {
        s->k = head_major(k->kc, b);
        s->v = head_major(k->vc, b);
    }
    ta_mask_plan mp;
    ta_status st = ta_mask_plan_init(&mp, k->fn, 1, k->H, k->Lq, k->cap, k->causal, NULL,
                                     TA_MASK_KEEP, &s->keys, true);
    if (st) return st;
    if (k->causal == TA_CAUSAL_BOTTOM_RIGHT) mp.causal_shift = keys - k->Lq; /* per sequence */
    /* the variants' positions from the sequence's real keys, not the capacity; its ALiBi
     * row (slopes [B, H]) as the problem's batch 0 */
    ta_sdpa_variants var = k->var;
    var.delta = ta_sdpa_delta(&var, k->Lq, keys);
    if (var.alibi) var.alibi += b * var.alibi_sb;
    *p = (ta_sdpa_problem){
        .fn = k->fn, .path = k->path, .B = 1, .H = k->H, .Hkv = k->Hkv,
        .G = k->Hkv ? k->H / k->Hkv : 1, .Lq = k->Lq, .Lk = k->cap, .D = k->D, .Dv = k->Dv,
        .scale = k->scale, .mask = mp, .var = var, .Q = &s->q, .K = &s->k, .V = &s->v, .O = &s->o,
        .lse = k->lse ? &s->lse : NULL, .pages = pages};
    return TA_OK;
}

/* The reference path's K and V: contiguous [1, Hkv, capacity, D|Dv] in the scratch. */
static void gathered_views(ta_sdpa_problem *p, kv_seq *s, float *kg, float *vg)
{
    const int64_t ks[4] = {1, p->Hkv, p->Lk, p->D}, vs[4] = {1, p->Hkv, p->Lk, p->Dv};
    s->k = ta_tensor_view(kg, 4, ks);
    s->v = ta_tensor_view(vg, 4, vs);
    p->pages = (ta_sdpa_pages){0};
}


/* Copies the sequence's real keys of the cache into kg and vg, zeros past them (the
 * reference path's einsums read every key, and 0 * NaN would spread a NaN from a cache
 * row that holds no key), and points the problem at the copies. The reference path's
 * one read of the cache. */
static void gather_keys(ta_sdpa_problem *p, kv_seq *s, float *kg, float *vg)
{
    for (int64_t h = 0; h < p->Hkv; h++)
        for (int64_t j = 0; j < p->Lk; j++) {
            float *kd = kg + (h * p->Lk + j) * p->D, *vd = vg + (h * p->Lk + j) * p->Dv;
            if (j < s->keys) {
                ta_row_to_f32(kd, elem(p->K, ta_sdpa_kv_offset(p, false, 0, h, j)), p->K->dtype,
                              p->D, p->K->stride[3]);
                ta_row_to_f32(vd, elem(p->V, ta_sdpa_kv_offset(p, true, 0, h, j)), p->V->dtype,
                              p->Dv, p->V->stride[3]);
            } else {
                for (int64_t d = 0; d < p->D; d++) kd[d] = 0.0f;
                for (int64_t d = 0; d < p->Dv; d++) vd[d] = 0.0f;
            }
        }
    gathered_views(p, s, kg, vg);
}

/* Writes k_new[b, t] and v_new[b, t] into key seqlens[b] + t of sequence b's cache, every
 * head, sequence after sequence (rows that two sequences share get the later one's):
 * the one place the cache is written. */
static ta_status append_rows(const kv_call *k)
{
    const ta_tensor *kn = k->kn, *vn = k->vn;
    /* empty rows (Hkv 0, or D and Dv 0): nothing to write, and Lnew, which only such
     * caches leave unbounded by memory, is not walked */
    if (k->Hkv == 0 || (k->D == 0 && k->Dv == 0)) return TA_OK;
    for (int64_t b = 0; kn && b < k->B; b++) {
        ta_sdpa_problem p;
        kv_seq s;
        ta_status st = seq_problem(&p, &s, k, b, k->cap);
        if (st) return st;
        for (int64_t t = 0; t < k->Lnew; t++)
            for (int64_t h = 0; h < k->Hkv; h++) {
                const int64_t j = k->seqlens[b] + t;
                const void *ks = elem(kn, b * kn->stride[0] + t * kn->stride[1] + h * kn->stride[2]);
                const void *vs = elem(vn, b * vn->stride[0] + t * vn->stride[1] + h * vn->stride[2]);
                /* rounded to the cache's dtype, nearest-even */
                ta_convert_strided(elem(p.K, ta_sdpa_kv_offset(&p, false, 0, h, j)), p.K->dtype,
                                   p.K->stride[3], ks, kn->dtype, kn->stride[3], k->D);
                ta_convert_strided(elem(p.V, ta_sdpa_kv_offset(&p, true, 0, h, j)), p.V->dtype,
                                   p.V->stride[3], vs, vn->dtype, vn->stride[3], k->Dv);
            }
    }
    return TA_OK;
}

/* ------------------------------------------------- blocks appended to */

/* A block a paged call appends to, and the sequence appending. */
typedef struct kv_blk {
    int64_t seq;
    int32_t block;
} kv_blk;

static int blk_block_order(const void *pa, const void *pb)
{
    const kv_blk *a = pa, *b = pb;
    return a->block < b->block ? -1 : a->block > b->block;
}

static int blk_order(const void *pa, const void *pb)
{
    const kv_blk *a = pa, *b = pb;
    const int by_block = blk_block_order(a, b);
    return by_block ? by_block : a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* A paged call appends row t of sequence b into the block at its slot (seqlens[b] + t) /
 * block_size; every key is read through the block table too. A block that one sequence
 * appends to and another reads (vLLM's prefix sharing without its copy-on-write), that
 * two sequences append to, or that one sequence's table lists twice would have a
 * sequence read another's new keys or its own at the wrong position: refused before
 * anything is written. written: room for min(B * the blocks Lnew rows can span,
 * num_blocks) entries (more blocks appended to than the cache has means one is appended
 * to twice). */
static ta_status check_appended_blocks(const kv_call *k, kv_blk *written, int64_t room)
{
    const char *fn = k->fn;
    const int64_t bs = k->block_size, mb = k->max_blocks;
    int64_t n = 0;
    for (int64_t b = 0; b < k->B; b++)
        for (int64_t u = k->seqlens[b] / bs; u <= (k->seqlens[b] + k->Lnew - 1) / bs; u++) {
            if (n == room)
                return ta_error(TA_EINVAL, "%s: the sequences append to more blocks than the "
                                "cache has (%lld): some block is appended to twice", fn,
                                (long long)k->nblocks);
            written[n++] = (kv_blk){.seq = b, .block = k->table[b * mb + u]};
        }
    qsort(written, (size_t)n, sizeof *written, blk_order);
    for (int64_t i = 1; i < n; i++) {
        if (written[i].block != written[i - 1].block) continue;
        if (written[i].seq == written[i - 1].seq)
            return ta_error(TA_EINVAL, "%s: sequence %lld's table lists block %d twice among "
                            "the blocks it appends to", fn, (long long)written[i].seq,
                            (int)written[i].block);
        return ta_error(TA_EINVAL, "%s: block %d is appended to by sequence %lld and by "
                        "sequence %lld (a block a call appends to must belong to one "
                        "sequence, at one place in its table)", fn, (int)written[i].block,
                        (long long)written[i - 1].seq, (long long)written[i].seq);
    }
    for (int64_t b = 0; b < k->B; b++) {
        const int64_t len = k->seqlens[b] + k->Lnew, used = len / bs + (len % bs != 0);
        const int64_t first = k->seqlens[b] / bs;
        for (int64_t u = 0; u < used; u++) {
            const kv_blk key = {.block = k->table[b * mb + u]};
            /* the block's entry, if appended to (one at most: checked above) */
            const kv_blk *w = bsearch(&key, written, (size_t)n, sizeof *written, blk_block_order);
            if (!w) continue;
            if (w->seq != b)
                return ta_error(TA_EINVAL, "%s: sequence %lld appends to block %d, which "
                                "sequence %lld reads too (cache->block_table[%lld][%lld]): a "
                                "block a call appends to must belong to one sequence", fn,
                                (long long)w->seq, (int)key.block, (long long)b,
                                (long long)b, (long long)u);
            if (u < first)
                return ta_error(TA_EINVAL, "%s: sequence %lld appends to block %d and reads "
                                "it at cache->block_table[%lld][%lld] too (a block listed "
                                "twice in its table)", fn, (long long)b, (int)key.block,
                                (long long)b, (long long)u);
        }
    }
    return TA_OK;
}

/* ------------------------------------------------------------ the scratch */

typedef struct kv_mem {
    /* check_appended_blocks's room: entries where a paged cache is appended to, 0 where
     * there is nothing to check */
    kv_blk *written;
    int64_t written_room;
    float *kg, *vg;  /* the reference path's gathered K and V */
    kv_seq *seqs;    /* together (below): every sequence's views and problem */
    ta_sdpa_problem *probs;
    ta_arena sdpa;   /* one sequence's problem (every sequence's is the same size), or
                        the fused forward's of them all together */
} kv_mem;

static ta_status kv_layout(ta_arena *a, kv_mem *m, const kv_call *k)
{
    *m = (kv_mem){0};
    /* sized by k_new's shape and the capacity, not by seqlens: Lnew rows span at most
     * (Lnew + block_size - 2) / block_size + 1 blocks of a sequence */
    if (k->table && k->kn && k->Lnew > 0 && k->Hkv > 0 && (k->D > 0 || k->Dv > 0)) {
        int64_t per_seq = (k->Lnew - 1) / k->block_size + 2;
        if (per_seq > k->max_blocks) per_seq = k->max_blocks;
        m->written_room = k->B * per_seq < k->nblocks ? k->B * per_seq : k->nblocks;
        m->written = TA_ARENA_TAKE(a, kv_blk, m->written_room);
    }
    if (k->B * k->H * k->Lq == 0) return TA_OK; /* no attention to compute */
    if (k->path == TA_SDPA_REFERENCE) {
        m->kg = TA_ARENA_TAKE2(a, float, k->Hkv * k->cap, k->D);
        m->vg = TA_ARENA_TAKE2(a, float, k->Hkv * k->cap, k->Dv);
    }
    ta_sdpa_problem p;
    kv_seq s;
    ta_status st = seq_problem(&p, &s, k, 0, k->cap);
    if (st) return st;
    if (k->path == TA_SDPA_REFERENCE) gathered_views(&p, &s, m->kg, m->vg);
    const size_t alone = ta_sdpa_scratch_bytes(&p);
    /* the sequences together, in one parallel region of the fused forward
     * (ta_sdpa_forward_fused_seqs; with one region a sequence, a batched decode paid a
     * fork, a join and the wait for the last item of each sequence's chunks, then the
     * same for their merge) */
    if (ta_sdpa_forward_fused_together(&p, k->B)) {
        m->seqs = TA_ARENA_TAKE(a, kv_seq, k->B);
        m->probs = TA_ARENA_TAKE(a, ta_sdpa_problem, k->B);
        m->sdpa = ta_arena_sub(a, ta_sdpa_forward_fused_batch_bound(&p, k->B, alone));
    } else {
        m->sdpa = ta_arena_sub(a, alone);
    }
    return TA_OK;
}

/* The attention of every sequence: together, or one after the other in the same
 * scratch. */
static ta_status attend(const kv_call *k, const kv_mem *m)
{
    if (m->probs && k->H * k->Lq > 0) {
        for (int64_t b = 0; b < k->B; b++) {
            ta_status st = seq_problem(&m->probs[b], &m->seqs[b], k, b, k->seqlens[b] + k->Lnew);
            if (st) return st;
        }
        ta_arena sub = m->sdpa;
        return ta_sdpa_forward_fused_seqs(m->probs, k->B, &sub);
    }
    for (int64_t b = 0; b < k->B && k->H * k->Lq > 0; b++) {
        ta_sdpa_problem p;
        kv_seq s;
        ta_status st = seq_problem(&p, &s, k, b, k->seqlens[b] + k->Lnew);
        if (st) return st;
        if (k->path == TA_SDPA_REFERENCE) gather_keys(&p, &s, m->kg, m->vg);
        ta_arena sub = m->sdpa;
        if ((st = ta_sdpa_run(&p, &sub))) return st;
    }
    return TA_OK;
}

/* ----------------------------------------------------------- public entries */

/* q [B,Lq,H,D], cache k [B,Lmax,Hkv,D] | [num_blocks,block_size,Hkv,D] (v: Dv),
 * k_new [B,Lnew,Hkv,D], v_new [B,Lnew,Hkv,Dv] -> O [B,Lq,H,Dv], opts->lse [B,H,Lq] */
ta_status ta_sdpa_kvcache(ta_tensor *O, const ta_tensor *q, const ta_kv_cache *cache,
                          const ta_tensor *k_new, const ta_tensor *v_new,
                          const ta_sdpa_opts *opts)
{
    kv_call k;
    kv_mem m;
    ta_status st = validate(&k, "ta_sdpa_kvcache", O, q, cache, k_new, v_new, opts);
    if (st) return st;
    ta_arena measure = ta_arena_measure();
    if ((st = kv_layout(&measure, &m, &k))) return st;
    ta_scratch s;
    st = ta_scratch_acquire(&s, k.fn, opts ? &opts->workspace : NULL, ta_arena_bytes(&measure));
    if (st) return st;
    ta_arena a = ta_arena_over(s.base, s.size);
    st = kv_layout(&a, &m, &k);
    if (!st && (a.overflow || m.sdpa.overflow))
        st = ta_error(TA_EINTERNAL, "%s: scratch smaller than planned", k.fn);
    if (!st && m.written_room > 0) st = check_appended_blocks(&k, m.written, m.written_room);
    if (!st) st = append_rows(&k);
    if (!st) st = attend(&k, &m);
    ta_scratch_release(&s);
    return st;
}

ta_status ta_sdpa_kvcache_workspace_size(size_t *bytes, const ta_tensor *O, const ta_tensor *q,
                                         const ta_kv_cache *cache, const ta_tensor *k_new,
                                         const ta_tensor *v_new, const ta_sdpa_opts *opts)
{
    const char *fn = "ta_sdpa_kvcache_workspace_size";
    if (!bytes) return ta_error(TA_EINVAL, "%s: bytes is NULL", fn);
    kv_call k;
    kv_mem m;
    ta_status st = validate(&k, fn, (ta_tensor *)O, q, cache, k_new, v_new, opts);
    if (st) return st;
    ta_arena measure = ta_arena_measure();
    if ((st = kv_layout(&measure, &m, &k))) return st;
    size_t n = ta_arena_bytes(&measure);
    if (n == SIZE_MAX)
        return ta_error(TA_ENOMEM, "%s: the scratch for these shapes does not fit in memory", fn);
    *bytes = ta_workspace_bytes(n);
    return TA_OK;
}
