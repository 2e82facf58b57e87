/* The SDPA case table (sdpa_cases.h): every case runs on the reference path and on
 * the fused path against the float64 oracle, and the two paths against each other.
 * Sizes: odd (1, 3, 17, 129, 257) on both axes, Lq < Lk and Lq > Lk, head dims 1..256,
 * tiles that straddle heads (GQA with small Lq) and the key-split decode path. */
#include "sdpa_cases.h"

#define COUNT(a) (sizeof(a) / sizeof *(a))

static void head_dims(ta_sdpa_case_list *l)
{
    const int64_t dims[] = {8, 16, 24, 32, 64, 80, 96, 128, 256};
    const int64_t lens[][2] = {{1, 1}, {3, 3}, {17, 17}, {129, 129}, {3, 17}, {17, 3}};
    uint64_t seed = 1;
    for (size_t d = 0; d < COUNT(dims); d++)
        for (size_t n = 0; n < COUNT(lens); n++)
            ta_sdpa_case_add(l, ta_sdpa_case_shape(2, 2, 2, lens[n][0], lens[n][1], dims[d], dims[d], seed += 10));
    ta_sdpa_case_add(l, ta_sdpa_case_shape(1, 1, 1, 257, 257, 128, 128, 5)); /* 257 on both axes */
    ta_sdpa_case c = ta_sdpa_case_shape(1, 2, 1, 33, 257, 256, 64, 6);
    c.causal = TA_CAUSAL_BOTTOM_RIGHT;
    ta_sdpa_case_add(l, c);
    const int64_t small[] = {1, 8, 63, 64, 65, 128, 256};
    for (size_t n = 0; n < COUNT(small); n++) {
        c = ta_sdpa_case_shape(1, 2, 2, 33, 70, small[n], small[n], 7);
        ta_sdpa_case_add(l, c);
        c.causal = TA_CAUSAL_TOP_LEFT;
        c.seed = 11 + n;
        ta_sdpa_case_add(l, c);
    }
}

/* Both alignments with Lq < Lk and Lq > Lk: bottom_right with Lq > Lk leaves the first
 * Lq - Lk query rows with no key (output 0, LSE -inf). */
static void odd_sizes_and_causal_alignments(ta_sdpa_case_list *l)
{
    const int64_t L[] = {1, 3, 17, 129, 257};
    for (size_t a = 0; a < COUNT(L); a++)
        for (size_t b = 0; b < COUNT(L); b++) {
            if (L[a] * L[b] > 257 * 129) continue; /* keep it fast: 257 x 257 once below */
            for (int cz = 0; cz < 3; cz++) {
                ta_sdpa_case c = ta_sdpa_case_shape(1, 1, 1, L[a], L[b], 16, 16, 100 + a * 10 + b);
                c.causal = (ta_causal)cz;
                ta_sdpa_case_add(l, c);
            }
        }
    ta_sdpa_case c = ta_sdpa_case_shape(1, 1, 1, 257, 257, 64, 64, 7);
    c.causal = TA_CAUSAL_TOP_LEFT;
    ta_sdpa_case_add(l, c);
    const int64_t lens[][2] = {{5, 9}, {9, 5}, {17, 17}, {1, 129}, {129, 1}, {3, 257}};
    for (int cz = 1; cz <= 2; cz++)
        for (size_t n = 0; n < COUNT(lens); n++) {
            c = ta_sdpa_case_shape(2, 2, 2, lens[n][0], lens[n][1], 32, 32, 400 + n);
            c.causal = (ta_causal)cz;
            ta_sdpa_case_add(l, c);
        }
    const int64_t wide[][2] = {{100, 37}, {37, 100}, {130, 64}, {5, 300}};
    for (size_t n = 0; n < COUNT(wide); n++)
        for (int cz = 1; cz <= 2; cz++) {
            c = ta_sdpa_case_shape(2, 2, 1, wide[n][0], wide[n][1], 32, 24, 200 + n);
            c.causal = (ta_causal)cz;
            ta_sdpa_case_add(l, c);
        }
}

static void scale_and_value_dim(ta_sdpa_case_list *l)
{
    const float scales[] = {0.3f, -0.7f, 2.0f, 1e-3f};
    for (size_t s = 0; s < COUNT(scales); s++) {
        ta_sdpa_case c = ta_sdpa_case_shape(2, 3, 3, 7, 9, 16, 16, 300 + s);
        c.scale = scales[s];
        ta_sdpa_case_add(l, c);
    }
    const int64_t dd[][2] = {{32, 48}, {8, 1}, {64, 8}, {256, 17}};
    for (size_t k = 0; k < COUNT(dd); k++) {
        ta_sdpa_case c = ta_sdpa_case_shape(1, 2, 2, 9, 10, dd[k][0], dd[k][1], 800 + k);
        c.causal = TA_CAUSAL_TOP_LEFT;
        ta_sdpa_case_add(l, c);
    }
    ta_sdpa_case c = ta_sdpa_case_shape(2, 3, 3, 19, 41, 64, 17, 7);
    c.scale = 0.37f;
    ta_sdpa_case_add(l, c);
    c = ta_sdpa_case_shape(1, 2, 1, 50, 90, 8, 128, 7);
    c.causal = TA_CAUSAL_BOTTOM_RIGHT;
    ta_sdpa_case_add(l, c);
    ta_sdpa_case_add(l, ta_sdpa_case_shape(1, 1, 1, 20, 20, 128, 1, 7));
}

static void mask_modes_and_broadcasting(ta_sdpa_case_list *l)
{
    const ta_test_mask_kind kinds[] = {TA_TEST_MASK_LQLK, TA_TEST_MASK_B11LK, TA_TEST_MASK_1HLQLK,
                                       TA_TEST_MASK_FULL, TA_TEST_MASK_LK, TA_TEST_MASK_H1LK};
    const ta_mask_mode modes[] = {TA_MASK_KEEP, TA_MASK_BLOCK, TA_MASK_ADDITIVE};
    uint64_t seed = 500;
    for (size_t m = 0; m < COUNT(modes); m++)
        for (size_t k = 0; k < COUNT(kinds); k++)
            for (int cz = 0; cz <= 2; cz += 2) {
                ta_sdpa_case c = ta_sdpa_case_shape(2, 3, 3, 5, 17, 8, 8, seed += 3);
                c.causal = (ta_causal)cz;
                c.mask = kinds[k];
                c.mode = modes[m];
                ta_sdpa_case_add(l, c);
            }
    /* Tiles of many rows, with causal alignments and key lengths mixed in. */
    for (size_t k = 0; k < 4; k++)
        for (size_t m = 0; m < COUNT(modes); m++) {
            ta_sdpa_case c = ta_sdpa_case_shape(2, 2, 2, 53, 77, 32, 32, 300 + k * 3 + m);
            c.mask = kinds[k];
            c.mode = modes[m];
            c.causal = (ta_causal)((k + m) % 3);
            c.lengths = (k + m) % 2 ? TA_TEST_LEN_LK_MINUS_3 : TA_TEST_LEN_NONE;
            ta_sdpa_case_add(l, c);
        }
    /* Grouped heads packed into one tile (Lq < the tile height): a mask shared by the
     * tile's rows ([B,1,1,Lk]) and one that differs per head ([1,H,Lq,Lk]). */
    for (size_t k = 1; k <= 2; k++)
        for (size_t m = 0; m < COUNT(modes); m++) {
            ta_sdpa_case c = ta_sdpa_case_shape(2, 4, 1, 3, 77, 32, 32, 320 + k * 3 + m);
            c.mask = kinds[k];
            c.mode = modes[m];
            ta_sdpa_case_add(l, c);
        }
}

/* Keep / block masks whose rows keep a prefix of the keys (the seed's triu mask, padding
 * masks: the fused path turns them into row bounds), exactly or only below a late allowed
 * key, in every broadcast form, with both causal alignments and key lengths. */
static void prefix_masks(ta_sdpa_case_list *l)
{
    const ta_test_mask_kind kinds[] = {TA_TEST_MASK_LQLK, TA_TEST_MASK_B11LK, TA_TEST_MASK_1HLQLK,
                                       TA_TEST_MASK_FULL, TA_TEST_MASK_LK, TA_TEST_MASK_H1LK};
    uint64_t seed = 900;
    for (size_t k = 0; k < COUNT(kinds); k++)
        for (int mode = 0; mode < 2; mode++)
            for (int pre = 1; pre <= 2; pre++) {
                ta_sdpa_case c = ta_sdpa_case_shape(2, 4, 2, 70, 90, 16, 16, seed += 3);
                c.mask = kinds[k];
                c.mode = mode ? TA_MASK_BLOCK : TA_MASK_KEEP;
                c.prefix = pre;
                c.causal = (ta_causal)((k + (size_t)mode + (size_t)pre) % 3);
                c.lengths = (k + (size_t)pre) % 2 ? TA_TEST_LEN_CYCLE : TA_TEST_LEN_NONE;
                ta_sdpa_case_add(l, c);
                c = ta_sdpa_case_shape(2, 4, 1, 3, 70, 16, 16, seed += 3); /* heads share tiles */
                c.mask = kinds[k];
                c.mode = mode ? TA_MASK_BLOCK : TA_MASK_KEEP;
                c.prefix = pre;
                c.causal = (ta_causal)(2 * ((k + (size_t)pre) % 2));
                ta_sdpa_case_add(l, c);
            }
}

/* Key lengths 0, Lk and in between, alone and with a causal mask and an additive mask. */
static void key_lengths(ta_sdpa_case_list *l)
{
    for (int cz = 0; cz < 3; cz++) {
        ta_sdpa_case c = ta_sdpa_case_shape(4, 2, 1, 6, 11, 16, 24, 600 + (uint64_t)cz);
        c.causal = (ta_causal)cz;
        c.lengths = TA_TEST_LEN_CYCLE_FROM_LK;
        c.mask = cz ? TA_TEST_MASK_B11LK : TA_TEST_MASK_NONE;
        c.mode = TA_MASK_ADDITIVE;
        ta_sdpa_case_add(l, c);
    }
    ta_sdpa_case c = ta_sdpa_case_shape(5, 2, 2, 40, 131, 64, 64, 7); /* lengths 0, Lk, 66, 1, 0 */
    c.lengths = TA_TEST_LEN_CYCLE;
    ta_sdpa_case_add(l, c);
    c.causal = TA_CAUSAL_BOTTOM_RIGHT;
    ta_sdpa_case_add(l, c);
    c = ta_sdpa_case_shape(4, 1, 1, 1, 2000, 64, 64, 7); /* the decode split with lengths */
    c.lengths = TA_TEST_LEN_CYCLE;
    ta_sdpa_case_add(l, c);
}

static void grouped_query_attention(ta_sdpa_case_list *l)
{
    const int64_t hkv[] = {4, 2, 1};
    for (size_t g = 0; g < COUNT(hkv); g++)
        for (int cz = 0; cz < 2; cz++) {
            ta_sdpa_case c = ta_sdpa_case_shape(2, 4, hkv[g], 17, 13, 32, 32, 700 + g * 2 + (uint64_t)cz);
            c.causal = (ta_causal)cz;
            c.mask = TA_TEST_MASK_1HLQLK;
            c.mode = TA_MASK_BLOCK;
            ta_sdpa_case_add(l, c);
        }
    /* Lq small: tiles span the heads of a group; Lq large: tiles within a head. */
    const int64_t lq[] = {1, 5, 70};
    for (size_t n = 0; n < COUNT(lq); n++)
        for (int cz = 0; cz < 3; cz++) {
            ta_sdpa_case c = ta_sdpa_case_shape(2, 6, 2, lq[n], 83, 64, 40, 400 + n * 3 + (uint64_t)cz);
            c.causal = (ta_causal)cz;
            c.mask = n == 1 ? TA_TEST_MASK_1HLQLK : TA_TEST_MASK_NONE;
            ta_sdpa_case_add(l, c);
        }
}

static void strided_views_and_guard_pages(ta_sdpa_case_list *l)
{
    ta_sdpa_case c = ta_sdpa_case_shape(2, 4, 2, 37, 75, 65, 33, 7);
    c.view = TA_TEST_VIEW_STRIDED;
    c.causal = TA_CAUSAL_BOTTOM_RIGHT;
    ta_sdpa_case_add(l, c);
    c = ta_sdpa_case_shape(1, 2, 2, 50, 66, 64, 64, 7);
    c.view = TA_TEST_VIEW_STRIDED;
    ta_sdpa_case_add(l, c);
    /* Dv and D odd, K and V ending at a guard page. */
    const int64_t dv[] = {1, 17, 63, 65, 129};
    for (size_t n = 0; n < COUNT(dv); n++) {
        c = ta_sdpa_case_shape(1, 2, 1, 9, 67, dv[n], dv[n], 7);
        c.view = TA_TEST_VIEW_GUARD;
        ta_sdpa_case_add(l, c);
    }
}

/* Few query rows against many keys: the fused path splits the keys and merges the
 * partial results by their log-sum-exp. */
static void decode_shapes(ta_sdpa_case_list *l)
{
    ta_sdpa_case c = ta_sdpa_case_shape(1, 8, 2, 1, 4096, 128, 128, 7);
    c.causal = TA_CAUSAL_BOTTOM_RIGHT;
    ta_sdpa_case_add(l, c);
    c = ta_sdpa_case_shape(2, 4, 4, 3, 4096, 64, 64, 7);
    c.causal = TA_CAUSAL_BOTTOM_RIGHT;
    c.mask = TA_TEST_MASK_B11LK;
    c.mode = TA_MASK_KEEP;
    ta_sdpa_case_add(l, c);
    ta_sdpa_case_add(l, ta_sdpa_case_shape(1, 1, 1, 1, 1500, 1, 1, 7)); /* a ragged last chunk */
}

/* Few query rows against many keys in as many groups as the key split leaves whole
 * (B Hkv >= 16): each item's few-row tiles of TA_FUSED_NK_STREAM (512) keys, a last one
 * shorter, through both few-row paths (one or two rows a kv head of float32 rows that
 * follow each other: attn_qk_rows / attn_pv; four: the row tables), with masks that
 * block whole tiles or single keys inside one, key lengths that end inside a tile or
 * before it, rows that lie apart and K and V ending at a guard page. */
static void decode_long_tiles(ta_sdpa_case_list *l)
{
    ta_sdpa_case c = ta_sdpa_case_shape(2, 8, 8, 1, 1300, 64, 64, 31);
    c.causal = TA_CAUSAL_BOTTOM_RIGHT;
    ta_sdpa_case_add(l, c);
    c.view = TA_TEST_VIEW_GUARD;
    ta_sdpa_case_add(l, c);
    c.view = TA_TEST_VIEW_STRIDED;
    ta_sdpa_case_add(l, c);
    c = ta_sdpa_case_shape(2, 32, 8, 1, 1100, 32, 48, 32); /* 4 rows a kv head */
    c.mask = TA_TEST_MASK_B11LK;
    c.mode = TA_MASK_KEEP;
    c.prefix = 1;
    ta_sdpa_case_add(l, c);
    c.mask = TA_TEST_MASK_FULL;
    c.prefix = 0;
    ta_sdpa_case_add(l, c);
    c.mode = TA_MASK_ADDITIVE;
    ta_sdpa_case_add(l, c);
    c = ta_sdpa_case_shape(4, 4, 4, 2, 1200, 16, 16, 33);
    c.lengths = TA_TEST_LEN_CYCLE;
    c.causal = TA_CAUSAL_BOTTOM_RIGHT;
    ta_sdpa_case_add(l, c);
    c = ta_sdpa_case_shape(2, 16, 8, 3, 1500, 64, 64, 34); /* 6 rows: causal within */
    c.causal = TA_CAUSAL_BOTTOM_RIGHT;
    ta_sdpa_case_add(l, c);
    c.causal = TA_CAUSAL_TOP_LEFT;
    ta_sdpa_case_add(l, c);
}

const ta_sdpa_case_group ta_sdpa_case_groups[] = {
    {"head dims 1..256", head_dims},
    {"odd sizes and causal alignments", odd_sizes_and_causal_alignments},
    {"scale and value dim", scale_and_value_dim},
    {"mask modes and broadcasting", mask_modes_and_broadcasting},
    {"prefix masks", prefix_masks},
    {"key lengths", key_lengths},
    {"grouped-query attention", grouped_query_attention},
    {"strided views and guard pages", strided_views_and_guard_pages},
    {"decode shapes", decode_shapes},
    {"decode tiles of many keys", decode_long_tiles},
};
const size_t ta_sdpa_case_group_count = COUNT(ta_sdpa_case_groups);
