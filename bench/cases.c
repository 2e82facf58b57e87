/* The case table: every case a run has, in the order they run (`tensorattn bench
 * --list` prints it). Each line is a builder of a kind (cases_*.c); bench/README.md
 * ("Cases") explains the choice of shapes. */
#include "bench_internal.h"

#include <stdio.h>

/* The attention shapes: the seed's (its causal mask also as a tensor), a sweep of L at
 * constant work, GQA, decoding (one sequence, and a batch of ragged lengths), and a long
 * causal sequence only the fused path can hold. */
static void build_sdpa_cases(bench_state *s)
{
    int q = s->cfg.quick;
    char name[64];
    /* The seed: B=32, H=8, L=512, D=64 (B*H*L^2 = 2^26), with and without its causal
     * mask (torch.triu(ones, diagonal=1) == top-left causal). */
    int64_t L0 = q ? 128 : 512;
    bench_add_sdpa(s, "sdpa_seed", 32, 8, 8, L0, L0, 64, TA_CAUSAL_NONE);
    bench_add_sdpa(s, "sdpa_seed_causal", 32, 8, 8, L0, L0, 64, TA_CAUSAL_TOP_LEFT);
    /* The same mask as the seed passes it: a [L, L] tensor, triu(ones, 1), blocked where
     * nonzero. The same work as opts.causal, timed against it (ratio_vs_causal). */
    bench_add_sdpa_causal_mask(s, "sdpa_seed_causal_mask", "sdpa_seed_causal", 32, 8, L0, 64);
    /* The seed's causal case with Q, K and V in bfloat16 (a bfloat16 model; O float32):
     * where the CPU has AVX512_BF16, Q.K^T by its dot product (attn_qk_bf16dot) */
    bench_add_sdpa_dtype(s, "sdpa_seed_causal_bf16", 32, 8, L0, 64, TA_CAUSAL_TOP_LEFT, TA_BF16,
                         "sdpa_seed_causal");
    /* L at constant B*H*L^2 (2^26; --quick: 2^20): the same flops per call at every L,
     * so the curve shows how each path scales with the sequence alone. H = 8 heads
     * while B*H allows. The seed is the D=64 point at L=512. */
    double work = q ? (double)(1 << 20) : (double)(1 << 26);
    for (int64_t D = 64; D <= 128; D *= 2)
        for (int64_t L = 128; L <= (q ? 256 : 8192); L *= 2) {
            int64_t BH = (int64_t)(work / ((double)L * (double)L));
            int64_t H = BH >= 8 ? 8 : BH, B = BH / H;
            int causal_too = !q && D == 64 && (L == 128 || L == 2048 || L == 8192);
            if (!q && D == 64 && L == 512) continue; /* the seed cases */
            snprintf(name, sizeof name, "sdpa_L%lld_D%lld", (long long)L, (long long)D);
            bench_add_sdpa(s, name, B, H, H, L, L, D, TA_CAUSAL_NONE);
            if (causal_too) {
                snprintf(name, sizeof name, "sdpa_L%lld_D%lld_causal", (long long)L,
                         (long long)D);
                bench_add_sdpa(s, name, B, H, H, L, L, D, TA_CAUSAL_TOP_LEFT);
            }
        }
    /* Grouped-query attention: 32 query heads over 8 key/value heads. */
    bench_add_sdpa(s, "sdpa_gqa", 1, 32, 8, q ? 256 : 1024, q ? 256 : 1024, 128, TA_CAUSAL_NONE);
    /* Decoding one token against a KV cache: Lq = 1 sees every key (bottom-right). */
    int64_t Lk = q ? 1024 : 4096;
    bench_add_sdpa_decode(s, "sdpa_decode", 1, 32, 32, Lk, 128, NULL);
    /* A batch of 8 sequences at different lengths, 100 .. Lk spread evenly, through
     * opts.key_lengths: each reads only its own keys. (--quick: 8 heads, as filling
     * 32 heads of N(0,1) keys takes seconds.) */
    int64_t lens[8];
    for (int b = 0; b < 8; b++) lens[b] = 100 + (Lk - 100) * b / 7;
    bench_add_sdpa_decode(s, "sdpa_decode_ragged", 8, q ? 8 : 32, q ? 8 : 32, Lk, 128, lens);
    /* The memory goal's shape: B=1, H=8, L=8192, D=64 (extra memory under 8 MiB). */
    if (!q) bench_add_sdpa(s, "sdpa_L8192_H8_causal", 1, 8, 8, 8192, 8192, 64, TA_CAUSAL_TOP_LEFT);
    /* Attention variants (issue 12): a sliding window of 512 keys (Mistral's: causal,
     * each row sees itself and the 511 keys before it) at L = 8192, whose useful flops
     * are the window's pairs only (the fused path never visits the tiles it hides);
     * softcap 30 (Gemma 2 caps at 50), ALiBi (BLOOM's slopes) and sinks on the seed's
     * shape, each timed against the plain seed case of its path (ratio_vs_plain). */
    bench_add_sdpa_window(s, q ? "sdpa_L2048_window128" : "sdpa_L8192_window512", 1, 8,
                          q ? 2048 : 8192, 64, q ? 127 : 511);
    bench_add_sdpa_variant(s, "sdpa_seed_softcap", 32, 8, L0, 64, 30.0f, 0, 0, "sdpa_seed");
    bench_add_sdpa_variant(s, "sdpa_seed_alibi", 32, 8, L0, 64, 0.0f, 1, 0, "sdpa_seed");
    bench_add_sdpa_variant(s, "sdpa_seed_sinks", 32, 8, L0, 64, 0.0f, 0, 1, "sdpa_seed");
    /* A long causal sequence: the reference's scratch would be 8 GiB. */
    if (!q) bench_add_sdpa(s, "sdpa_long_causal", 1, 2, 2, 32768, 32768, 64, TA_CAUSAL_TOP_LEFT);
    /* Training: the backward of the seed's causal attention, and a long sequence whose
     * extra memory must stay O(L). */
    bench_add_sdpa_backward(s, "sdpa_bwd_seed_causal", 32, 8, L0, 64, TA_CAUSAL_TOP_LEFT);
    /* ... in bfloat16 (Q, K, V, dO; O and the gradients float32): where the CPU has
     * AVX512_BF16, S = Q K^T and dP = dO V^T by its dot product (attn_bwd_gemm_bf16dot) */
    bench_add_sdpa_backward_dtype(s, "sdpa_bwd_seed_causal_bf16", 32, 8, L0, 64,
                                  TA_CAUSAL_TOP_LEFT, TA_BF16, "sdpa_bwd_seed_causal");
    if (!q)
        bench_add_sdpa_backward(s, "sdpa_bwd_L8192_causal", 1, 8, 8192, 64, TA_CAUSAL_TOP_LEFT);
}

/* Inference (issue 11): one decode step from a KV cache of each dtype, contiguous and
 * paged in blocks of 16 (the smallest block the paged goal covers), for one long
 * sequence (B1 H32 Hkv8 D128: a Llama-like GQA head layout) at two cache sizes and for a
 * batch of 16 ragged sequences; and a causal prefill of packed ragged sequences against
 * the same batch padded to the longest. */
static void build_inference_cases(bench_state *s)
{
    int q = s->cfg.quick;
    static const struct {
        ta_dtype dtype;
        const char *name;
    } dt[3] = {{TA_F32, "f32"}, {TA_F16, "f16"}, {TA_BF16, "bf16"}};
    char name[64], vs[64];
    const int64_t caps[2] = {q ? 1024 : 4096, 32768};
    for (int c = 0; c < (q ? 1 : 2); c++) {
        const char *sfx = c ? "_32k" : "";
        for (int d = 0; d < 3; d++) {
            snprintf(name, sizeof name, "kv_decode_%s%s", dt[d].name, sfx);
            snprintf(vs, sizeof vs, "kv_decode_f32%s", sfx);
            bench_add_kv_decode(s, name, 1, 32, 8, 128, caps[c], NULL, 0, dt[d].dtype, TA_F32,
                                d ? vs : NULL, 1.0, "ratio_vs_f32");
        }
        /* a bfloat16 model: q bfloat16 too (the CPU's bfloat16 dot product, where it has
         * one, computes Q.K^T: attn_qk_rows_bf16dot) */
        snprintf(name, sizeof name, "kv_decode_bf16q%s", sfx);
        bench_add_kv_decode(s, name, 1, 32, 8, 128, caps[c], NULL, 0, TA_BF16, TA_BF16, vs, 1.0,
                            "ratio_vs_f32");
        for (int d = 0; d < 3; d += 2) { /* paged: f32 and bf16, each against contiguous */
            snprintf(name, sizeof name, "kv_decode_paged16_%s%s", dt[d].name, sfx);
            snprintf(vs, sizeof vs, "kv_decode_%s%s", dt[d].name, sfx);
            bench_add_kv_decode(s, name, 1, 32, 8, 128, caps[c], NULL, 16, dt[d].dtype, TA_F32,
                                vs, 1.0, "ratio_vs_contiguous");
        }
    }
    int64_t lens[16], Lk = caps[0];
    for (int b = 0; b < 16; b++) lens[b] = 100 + (Lk - 100) * b / 15;
    bench_add_kv_decode(s, "kv_decode_batch16_f32", 16, q ? 8 : 32, q ? 2 : 8, 128, Lk, lens, 0,
                        TA_F32, TA_F32, NULL, 1.0, NULL);
    bench_add_kv_decode(s, "kv_decode_batch16_bf16", 16, q ? 8 : 32, q ? 2 : 8, 128, Lk, lens, 0,
                        TA_BF16, TA_F32, "kv_decode_batch16_f32", 1.0, "ratio_vs_f32");
    bench_add_kv_decode(s, "kv_decode_batch16_paged16_bf16", 16, q ? 8 : 32, q ? 2 : 8, 128, Lk,
                        lens, 16, TA_BF16, TA_F32, "kv_decode_batch16_bf16", 1.0,
                        "ratio_vs_contiguous");
    const int64_t plens[8] = {512, 64, 300, 17, 1024, 128, 5, 700};
    int64_t qlens[8];
    for (int b = 0; b < 8; b++) qlens[b] = q ? (plens[b] + 3) / 4 : plens[b];
    bench_add_varlen_prefill(s, "varlen_prefill", 8, qlens, 8, 64);
}

void bench_build_cases(bench_state *s)
{
    int q = s->cfg.quick;
    /* Square SGEMM: the engine's own yardstick. */
    bench_add_sgemm(s, "sgemm_256", 256, 256, 256);
    bench_add_sgemm(s, "sgemm_512", 512, 512, 512);
    bench_add_sgemm(s, "sgemm_1024", 1024, 1024, 1024);
    if (!q) bench_add_sgemm(s, "sgemm_2048", 2048, 2048, 2048);
    /* The seed's attention GEMMs: B*H = 256 heads of Q K^T and P V. */
    int64_t L = q ? 128 : 512, D = 64, B = 32, H = 8;
    bench_add_sgemm_batched(s, "sgemm_batched_qk", B * H, L, L, D, "NT");
    bench_add_sgemm_batched(s, "sgemm_batched_pv", B * H, L, D, L, "NN");
    /* The seed's four einsums; the last two with Q, K, V laid out [N, L, H, D]. */
    bench_add_einsum(s, "einsum_qk_bhid", "bhid,bhjd->bhij", "bhijd", B, H, L, D);
    bench_add_einsum(s, "einsum_pv_bhij", "bhij,bhjd->bhid", "bhijd", B, H, L, D);
    bench_add_einsum(s, "einsum_qk_nqhd", "nqhd,nkhd->nhqk", "nhqkd", B, H, L, D);
    bench_add_einsum(s, "einsum_pv_nhql", "nhql,nlhd->nqhd", "nhqld", B, H, L, D);
    build_sdpa_cases(s);
    build_inference_cases(s);
}
