/* What the fused SDPA forward's files share: the driver (sdpa_forward_fused.c: the plan,
 * the scratch, the threads; the whole algorithm at its top), the work list, the keys its
 * rows see and the merge of a key split (sdpa_fused_items.c), and the tile steps of one
 * work item (sdpa_fused_tiles.c). */
#ifndef TA_OPS_SDPA_FUSED_INTERNAL_H
#define TA_OPS_SDPA_FUSED_INTERNAL_H

#include "core/core.h"
#include "kernels/kernels.h"
#include "ops/sdpa.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TA_FUSED_NK 64       /* keys per tile: the S tile (mq x 64 floats) stays in L1 */
/* An item's last keys, up to this many, are one tile (row bounds cutting it or not):
 * the scratch holds tiles of this many keys (sdpa_fused_tiles.c, tile_begin). */
#define TA_FUSED_NK_LAST (2 * TA_FUSED_NK)
/* Keys per tile of few rows (a decode step) outside a sweep, where the few-row kernels
 * read K's and V's rows in place (fused_plan.few_keys). Where the rows follow each other
 * ([B, H, L, D] or [B, Hkv, L, D]), a head's keys are one stream that the hardware
 * prefetcher follows, and the P.V of a tile switches the reads from K's stream to V's and
 * the next tile back: in tiles of 64 keys a switch every 32 KiB of float32 (D 128), which
 * the prefetchers restart behind. Measured on the Zen 4 (session 31, whole-library
 * builds, driver, 1 thread, medians of 21 - 41, three to six rounds, GB/s of K and V;
 * 128 MiB of float32 or 64 MiB of half): B1 H32 Lk4096 D128 float32, one query row a
 * head (the bench's sdpa_decode) 21.6 - 24.9 -> 27.1 - 30.9 (tiles of 256: 26.4 - 29.8;
 * 1024: 26.5 - 32.1), 2 threads 43 - 46 -> 50 - 54 (partly from L3); [B, Hkv, L, D] with
 * 4 query rows a kv head, float32 10.7 - 11.6 -> 15.4 - 16.2, bfloat16 12.3 - 14.0 ->
 * 16.0 - 18.9; one row, bfloat16 16.4 - 17.0 -> 19.0 - 19.4, float16 15.9 - 16.1 -> 19.6 -
 * 19.8. (A KV cache's sweep keeps tiles of TA_FUSED_NK: its region of the next tile of
 * every head goes into L2, which larger tiles overfill: docs/kernels.md.) */
#define TA_FUSED_NK_STREAM 512
#define TA_FUSED_SWEEP_MAX 32 /* kv heads a sweep steps together at most */
#define TA_FUSED_SPLIT 512   /* keys per chunk when the keys are split (a multiple of NK) */
#define TA_FUSED_FEW_TILES 16 /* split the keys when there are fewer tiles than this */
/* At most this many chunks (then the chunks widen). Not the thread count's to choose
 * (the split sets the summation order, and results are the same on any thread count);
 * each chunk costs a pack of Q, a partial stored and merged per head: 64 chunks of 512
 * keys cost a 32k-key decode ~5% on 1 thread against 16 of 2048 (Zen 5, B1 H32/8 D128
 * bfloat16, 11 random-order rounds: 5.12 -> 4.89 ms; 2 threads 2.78 -> 2.59). 16
 * sweep units a sequence still feed 16 threads. */
#define TA_FUSED_MAX_CHUNKS 16
#define TA_FUSED_PREFETCH_ROWS 64 /* rows of the next run requested ahead (prefetch_run) */
/* A head_dim above this needs more scratch than any machine has (a tile of 48 rows:
 * 192 TiB): the plan says "does not fit" before any size arithmetic could wrap. */
#define TA_FUSED_DIM_MAX ((int64_t)1 << 40)

/* One unit of work: rows [r0, r0 + mq) of group (b, hkv), keys [jlo, jhi). */
typedef struct fused_item {
    int64_t b, hkv, r0, mq, jlo, jhi;
    int64_t tile;  /* index of the tile (its partials live at tile * nchunks + chunk) */
    int64_t chunk;
} fused_item;

/* A thread's prefetch stream for the kernels of its tiles of many rows (ta_pf), and what
 * it requests of the item the thread runs next (ta_fused_run_item): its Q rows (and O
 * rows when o: lines the finish then writes without waiting on them), a share after
 * each tile from row r, and its first keys when it starts another group. */
#define TA_FUSED_PF_SPANS 320 /* spans a kernel call's prefetch stream holds at most */
#define TA_FUSED_REGION_SPANS 64 /* spans of a sweep's region (its next tile) at most */
typedef struct fused_pf {
    ta_pf_span spans[TA_FUSED_PF_SPANS]; /* the stream */
    int64_t n;                           /* spans in it */
    ta_pf pf;
    const struct fused_item *next;
    int64_t r, share;
    bool o;
    bool kv;          /* the item requests its K and V rows (its group's first, or
                         fused_plan.kv_far_keys) */
    int64_t b, hkv;   /* the group of the thread's previous item (b = -1: none) */
    /* The thread's next group (its first item, ahead_item, set before each item; NULL:
     * none): the K and V rows of its first key tile and its first item's Q rows, three
     * byte ranges (ahead_base, ahead_len) that the calls of the current group's later
     * items request after their own lines, as far as their steps reach; ahead_at: the
     * bytes requested so far, of ahead_total. In the current call's stream the ahead
     * spans start at ahead_first (-1: none), span k at cursor ahead_off[k] from
     * address ahead_a[k]. */
    const struct fused_item *ahead_item, *ahead;
#define AHEAD_RANGES 3 /* K's first tile, the first item's Q rows, V's first tile */
    const char *ahead_base[AHEAD_RANGES];
    int64_t ahead_len[AHEAD_RANGES], ahead_at, ahead_total, ahead_first, ahead_off[AHEAD_RANGES];
    const char *ahead_a[AHEAD_RANGES];
    bool ahead_on;    /* the current item requests ahead */
    /* A sweep's region: the next tile of all its heads, K's rows then V's, as spans in
     * address order (ta_fused_run_sweep), which its kernel calls request a share of each
     * (line_key lines per key they read): where the next call's share starts is span ri
     * at ra. sweep: the calls take their share of the region (true only inside
     * ta_fused_run_sweep), not the rows ahead. */
    ta_pf_span region[TA_FUSED_REGION_SPANS];
    int64_t rn, ri, line_key;
    const char *ra;
    bool sweep;
    /* A sweep's row tables of the current tile: the first head that reads K through a
     * table fills them (in its own scratch); the other heads of the tile, the same keys
     * of the same batch row, read them at their head's distance in bytes (kernels.h:
     * koff, voff). tab_j0 = -1: none yet for this tile. */
    const void **tab_k, **tab_v;
    int64_t tab_j0, tab_nk, tab_b, tab_hkv, tab_kn, tab_vn;
} fused_pf;

/* A thread's scratch, sized once per call. */
typedef struct fused_ws {
    fused_pf *pfs;    /* the thread's prefetch stream (shared by a sweep's heads) */
    float *qp, *s, *o, *m, *l, *alpha, *kp, *vp;
    float *ones;      /* 1.0 per row: the rescale of a tile's later runs (tile_pv) */
    float *qrows;     /* a half Q: a tile's rows widened, [mq_max][D] (pack_q), else NULL */
    int64_t *qroff;   /* ... and their offsets in it, r D */
    int32_t *rowk_run; /* per row: keys of the current run of a tile it needs */
    int64_t *end;  /* per row: the keys it may see (ta_mask_row_end, or the mask's bound) */
    int64_t *qoff; /* per row: its Q row's offset in elements */
    int32_t *rowk; /* per row: keys of the current tile it needs */
    int64_t *lo;   /* per row: its first key (a window's left bound; 0 without) */
    float *slope, *pos; /* per row: ALiBi slope and position i + delta */
    const void **krows, **vrows; /* a tile's K and V rows for the few-row kernels (row_table) */
    int32_t *o_live; /* 0 until the item's first P.V wrote o (which nobody zeroes before) */
    int32_t *q_dot;  /* 1 when pack_q packed the item's Q for the bfloat16 dot product
                        (qk_dot or qk_dot_tile, and its rows pass ta_bf16_dot_exact) */
} fused_ws;

typedef struct fused_plan {
    const ta_sdpa_problem *p;
    const ta_kernels *k;
    int64_t G, mq_max, ldo, nchunks, chunk_keys;
    int64_t tpg, ngroups, ntiles; /* tiles per (batch, kv head) group, groups, tiles */
    int64_t mq_used, part_floats; /* rows of a tile's partial (split), its floats */
    int64_t nitems, nparts; /* work items at most; partial slots (split only) */
    bool split;          /* the keys are cut into chunks merged by LSE (decode) */
    int64_t sweep;       /* > 1: decode from a cache whose key rows hold every kv head side
                            by side: the Hkv (= sweep) heads of a batch and chunk run as one
                            unit, tile by tile (ta_fused_run_sweep); else 1 */
    size_t state_bytes;  /* a sweep's workspace state per further head (ws_state_layout) */
    bool too_big;        /* D or Dv above TA_FUSED_DIM_MAX: the scratch cannot fit */
    bool pack_k, pack_v; /* K or V not unit-stride along D: copy each key tile */
    bool qk_dot;         /* few-row tiles of bfloat16 K take attn_qk_rows_bf16dot on a
                            bfloat16 query, its rows packed as bfloat16 */
    bool qk_dot_tile;    /* and tiles of many rows attn_qk_bf16dot, on K's rows in place
                            (no widened copy), q packed as bfloat16 pairs */
    int64_t few_keys;    /* keys per tile of few rows outside a sweep: TA_FUSED_NK_STREAM
                            where the few-row kernels read K's and V's rows in place,
                            else TA_FUSED_NK (make_plan; a copy_plan keeps it: the
                            thread's scratch is laid out for it) */
    int kind_k, kind_v;  /* few-row tiles read K / V rows in place through
                            attn_qk_rows_kv / attn_pv_rows_kv of this kind (0 float32,
                            1 float16, 2 bfloat16), or -1: through kv_tile */
    int64_t vcopy_floats; /* > 0: V's rows alias in L1 and each thread reads them through
                             a contiguous copy of this many floats (plan_kv_copy) */
    int64_t kcopy_floats; /* the same for K */
    bool ahead;          /* a group's later items request the next group's first rows
                            (fused_pf.ahead_item) */
    int64_t kv_far_keys; /* an item of this many keys or more requests its K and V rows
                            through the kernels' stream, not only its group's first
                            (their rows do not stay in L2 from one item to the next) */
    bool stream_o;       /* O is large: finish_item writes its rows with non-temporal
                            stores (no read for ownership; plan in make_plan) */
    bool scores_var;     /* softcap or ALiBi change the scores (ta_sdpa_fused_scores) */
    int64_t mrows;       /* rows of the mask's bound table (0: none) */
    const int64_t *mt;   /* the table, once laid out (ta_fused_mask_bounds) */
    size_t ws_bytes;     /* per thread (SIZE_MAX: does not fit) */
    int nt;              /* threads */
} fused_plan;

/* The scratch of one call: the work list, the tile table of a group, each thread's
 * workspace and the partials of a key split. */
typedef struct fused_mem {
    fused_item *items;
    int64_t *t_r0, *t_mq;
    int64_t *t_nch;    /* split: per tile, its chunks that hold keys (the first ones) */
    unsigned char *ws; /* nt per-thread workspaces of ws_bytes */
    float *parts;
    float *vbuf;       /* nt buffers of vcopy_floats: each thread's copy of V rows */
    float *kbuf;       /* nt buffers of kcopy_floats: K's */
    int64_t *mt;       /* the mask's bound table: 2 per row (ta_fused_mask_bounds) */
    int64_t nitems;    /* the work list's items (ta_fused_build_items) */
} fused_mem;

/* Head and query index of row r of a group. */
static inline void row_hi(const fused_plan *f, int64_t hkv, int64_t r, int64_t *h, int64_t *i)
{
    int64_t Lq = f->p->Lq;
    *h = hkv * f->G + r / Lq;
    *i = r % Lq;
}

/* The row after (h, i) of a group: on along the head, or the next head's first. */
static inline void row_next(const fused_plan *f, int64_t *h, int64_t *i)
{
    if (++*i == f->p->Lq) {
        *i = 0;
        ++*h;
    }
}

/* Q's row (b, h, i), in Q's own dtype (ta_sdpa_native_dtypes). */
static inline const void *q_row(const ta_sdpa_problem *p, int64_t b, int64_t h, int64_t i)
{
    const ta_tensor *Q = p->Q;
    return (const char *)Q->data +
           ta_elem_size(Q->dtype) * (size_t)(b * Q->stride[0] + h * Q->stride[1] + i * Q->stride[2]);
}

/* O's row (b, h, i), as its dtype lays it out (float32, or half: ta_fused_finish_item
 * and the split's merge round it). */
static inline char *o_row(const ta_sdpa_problem *p, int64_t b, int64_t h, int64_t i)
{
    const ta_tensor *O = p->O;
    return (char *)O->data +
           ta_elem_size(O->dtype) * (size_t)(b * O->stride[0] + h * O->stride[1] + i * O->stride[2]);
}

/* The row of a keep or block mask's bound table for row (b, h, i) (the table is
 * described in sdpa_fused_items.c, above ta_fused_mask_table_rows). */
static inline int64_t mask_row_index(const ta_mask_plan *mp, int64_t b, int64_t h, int64_t i)
{
    const int64_t nh = mp->mstride[1] ? mp->H : 1, nl = mp->mstride[2] ? mp->Lq : 1;
    return ((mp->mstride[0] ? b : 0) * nh + (mp->mstride[1] ? h : 0)) * nl +
           (mp->mstride[2] ? i : 0);
}

/* The keys row (b, h, i) may see: the causal and key-length bound, tightened by the
 * mask's table; *exact: no mask tensor decides anything for the row below it. */
static inline int64_t row_bound(const fused_plan *f, int64_t b, int64_t h, int64_t i, bool *exact)
{
    const ta_mask_plan *mp = &f->p->mask;
    int64_t end = ta_mask_row_end(mp, b, i);
    *exact = !mp->mask;
    if (f->mt) {
        const int64_t *t = f->mt + 2 * mask_row_index(mp, b, h, i);
        if (t[1] >= end) {
            *exact = true;
            if (t[0] < end) end = t[0];
        }
    }
    return end;
}

/* The keys [*lo, end) row (b, h, i) may see: row_bound tightened by the window (an empty
 * range has *lo >= end). */
static inline int64_t ta_fused_row_keys(const fused_plan *f, int64_t b, int64_t h, int64_t i,
                                        int64_t *lo, bool *exact)
{
    int64_t end = row_bound(f, b, h, i, exact), wl, wh;
    ta_sdpa_window_keys(&f->p->var, f->p->var.delta, f->p->Lk, i, &wl, &wh);
    *lo = wl;
    return TA_MIN(end, wh);
}

/* ------------------------------------------------- sdpa_fused_items.c */

/* The rows of a keep or block mask's bound table (0: no table: no such mask, or one
 * that varies along every dim, read once anyway); the table is described in
 * sdpa_fused_items.c, above this function. */
int64_t ta_fused_mask_table_rows(const ta_mask_plan *mp);

/* Fills the table mt (2 per row: the first blocked key, then the first allowed key at or
 * after it) for the rows of the mask, on nt threads. */
void ta_fused_mask_bounds(const ta_mask_plan *mp, int64_t *mt, int64_t rows, int nt);

/* The tiles of a group: per head when Lq fills a tile (a short one of <= attn_rows_max
 * rows last, or first under a causal mask), across heads otherwise. Returns the number
 * of tiles; fills starts/sizes when given. */
int64_t ta_fused_group_tiles(const fused_plan *f, int64_t *r0, int64_t *mq);

/* The work list, in schedule order: group by group, and within a group the tiles from
 * the last query position to the first (see the top of sdpa_fused_items.c), each
 * tile's chunks in key order. Returns the number of items. */
int64_t ta_fused_build_items(const fused_plan *f, const fused_mem *m);

/* A work item's (m, l, O) rows into its slot of the partials (split). */
void ta_fused_store_partial(const fused_plan *f, const fused_mem *m, const fused_item *it,
                            const fused_ws *w);

/* The rows of tile t of a split problem from its chunks' partials: the chunks that hold
 * keys (a chunk past a tile's last key would add an exact zero). Tiles are independent:
 * any thread merges any. */
void ta_fused_merge_tile(const fused_plan *f, const fused_mem *m, int64_t t);

/* Zeroes the item's o rows in the workspace unless a P.V wrote them (w->o_live): before
 * a kernel that reads o, and before o is used when no P.V ran. */
void ta_fused_o_ready(const fused_plan *f, const fused_item *it, const fused_ws *w);

/* The unsplit case of finish_row for the rows of a work item, in float: O = o * (1/l),
 * LSE = m + log l (l = 0: O = 0, LSE = -inf; a NaN l gives NaN in both). */
void ta_fused_finish_item(const fused_plan *f, const fused_item *it, const fused_ws *w);

/* ------------------------------------------------- sdpa_fused_tiles.c */

/* The online softmax of one work item: leaves the unnormalised O, m and l of its rows
 * in the workspace. next: NULL, or the item this thread runs next, whose Q rows (and O
 * rows, unless O is streamed) it requests into L2 meanwhile, a share after each key
 * tile: a tile of many rows reads Q once (attn_pack_t) and writes O once (the finish),
 * in rows of a few lines each, too short for the hardware prefetchers. */
void ta_fused_run_item(const fused_plan *f, const fused_item *it, const fused_ws *w,
                       const fused_item *next);

/* The items of one sweep unit (the kv heads of a batch and key chunk, in a KV cache
 * whose key rows hold every head side by side), each with its own workspace state,
 * stepped together tile by tile: the tile of every head is read from one span of memory
 * before the next tile (docs/inference.md, "Decode order"). next: NULL, or the first of
 * the n items of the unit this thread runs next, whose first tile the last tile's calls
 * request. */
void ta_fused_run_sweep(const fused_plan *f, const fused_item *its, int64_t n, const fused_ws *ws,
                        const fused_item *next);

#endif
