/* test_context_parallel, part 3: the attention variants across shards -- sliding
 * windows (left only, both sides, right only, narrower than a chunk so that whole blocks
 * are skipped), softcap, ALiBi slopes [H] and [B, H], sinks and their gradient, alone and
 * combined, with causal and not, GQA, odd lengths, key lengths and calls long enough to be
 * cut into pieces: every scheme, forward and backward, against the single-process ta_sdpa
 * and ta_sdpa_backward of the whole sequence (1e-5; run_case). */
#include "context_parallel_test.h"

static const ta_cp_scheme all[3] = {TA_CP_RING, TA_CP_ZIGZAG, TA_CP_ULYSSES};

void test_variants_match_single_process(void **state)
{
    (void)state;
    const int64_t p = P;
    const cp_case cases[] = {
        /* windows: left only (causal sliding window), both sides, right only, a window of
         * the row alone, and one narrower than a zigzag chunk (whole blocks hidden) */
        {.B = 2, .H = 2 * p, .Hkv = p, .L = 10 * p + 3, .D = 8, .Dv = 8, .window = true, .wl = 3,
         .wr = -1},
        {.B = 1, .H = 2 * p, .Hkv = 2 * p, .L = 8 * p + 1, .D = 8, .Dv = 4, .window = true,
         .wl = 4, .wr = 2},
        {.B = 1, .H = p, .Hkv = p, .L = 7 * p + 2, .D = 4, .Dv = 8, .window = true, .wl = -1,
         .wr = 3},
        {.B = 1, .H = p, .Hkv = p, .L = 5 * p + 1, .D = 4, .Dv = 4, .window = true, .wl = 0,
         .wr = 0},
        {.B = 1, .H = 2 * p, .Hkv = p, .L = 40 * p + 1, .D = 8, .Dv = 8, .window = true, .wl = 2,
         .wr = 1},
        /* bounds wider than any sequence (INT64_MAX): the cuts must not overflow */
        {.B = 1, .H = p, .Hkv = p, .L = 6 * p + 1, .D = 4, .Dv = 4, .window = true,
         .wl = INT64_MAX, .wr = INT64_MAX},
        {.B = 1, .H = p, .Hkv = p, .L = 6 * p + 1, .D = 4, .Dv = 4, .window = true,
         .wl = INT64_MAX, .wr = 0},
        /* softcap, ALiBi [H] and [B, H], sinks */
        {.B = 2, .H = 2 * p, .Hkv = p, .L = 6 * p + 1, .D = 8, .Dv = 8, .scale = 0.9f,
         .softcap = 1.5f},
        {.B = 2, .H = 2 * p, .Hkv = p, .L = 9 * p, .D = 8, .Dv = 4, .alibi = 1},
        {.B = 3, .H = p, .Hkv = p, .L = 6 * p + 3, .D = 4, .Dv = 8, .alibi = 2},
        {.B = 2, .H = 4 * p, .Hkv = p, .L = 6 * p + 1, .D = 8, .Dv = 8, .sinks = true},
        /* a sink of +inf beside attended keys: the single process's rows are NaN (inf -
         * inf), O and LSE alike; until session 35 the merge kept the keys' O there */
        {.B = 1, .H = 2 * p, .Hkv = p, .L = 5 * p + 2, .D = 8, .Dv = 8, .sinks = true,
         .sink_inf = true},
        /* everything at once */
        {.B = 2, .H = 2 * p, .Hkv = p, .L = 12 * p + 5, .D = 8, .Dv = 12, .scale = 0.6f,
         .window = true, .wl = 5, .wr = 2, .softcap = 2.5f, .alibi = 2, .sinks = true},
        {.B = 1, .H = 2 * p, .Hkv = 2 * p, .L = 16 * p + 1, .D = 8, .Dv = 8, .window = true,
         .wl = 1, .wr = -1, .alibi = 1, .sinks = true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cp_case c = cases[i];
        c.dtype = TA_F32;
        check_cases(&c, 1, all, 3);
    }
}

/* Key lengths with a window and sinks (a row whose keys are all padding has O = 0 and
 * LSE = sigma_h); bfloat16 inputs; and calls long enough to be cut into pieces, each
 * piece cut again by the window. */
void test_variants_with_key_lengths_and_pieces(void **state)
{
    (void)state;
    const int64_t p = P, L = 8 * p + 3;
    const int64_t klen[4] = {0, L, L / 2, 3};
    cp_case c = {.B = 4, .H = 2 * p, .Hkv = p, .L = L, .D = 8, .Dv = 4, .dtype = TA_F32,
                 .klen = klen, .window = true, .wl = 2, .wr = 3, .alibi = 1, .sinks = true};
    check_cases(&c, 1, all, 3);
    c = (cp_case){.B = 1, .H = 2 * p, .Hkv = p, .L = 6 * p + 1, .D = 8, .Dv = 8,
                  .dtype = TA_BF16, .window = true, .wl = 3, .wr = 0, .softcap = 4.0f,
                  .sinks = true};
    check_cases(&c, 1, all, 3);
    const int64_t Lp = 520 * p + 7, klen_p[2] = {Lp - 300, Lp};
    c = (cp_case){.B = 2, .H = p, .Hkv = p, .L = Lp, .D = 4, .Dv = 4, .dtype = TA_F32,
                  .klen = klen_p, .window = true, .wl = 300, .wr = 20, .alibi = 1, .sinks = true};
    check_cases(&c, 1, all, 3);
    c.window = false;
    c.softcap = 3.0f;
    check_cases(&c, 1, all, 2); /* ring and zigzag: ALiBi over the pieces, no window */
}
