/* Hostile arguments at every public entry point: each bad call returns the documented
 * status with a message naming the function and the argument, and leaves every output
 * untouched (output buffers hold a sentinel before the call and still hold it after;
 * output structs are compared byte for byte).
 *
 * The audit is one table: a case is a small function making one bad call, the status
 * it must return, and a fragment its message must contain. */
#include "ta_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------- fixture */

enum { B = 2, H = 4, HKV = 2, LQ = 3, LK = 5, D = 8, DV = 6 };
#define SENTINEL 12345.0f

static float qbuf[B * H * LQ * D], kbuf[B * HKV * LK * D], vbuf[B * HKV * LK * DV];
static float obuf[B * H * LQ * DV], wbuf[B * H * LQ * LK], lsebuf[B * H * LQ];
static float outbuf[64], maskbuf[B * H * LQ * LK]; /* room for an LSE laid over it */
static float dqbuf[B * H * LQ * D], dkbuf[B * HKV * LK * D], dvbuf[B * HKV * LK * DV];
static ta_tensor Q, K, V, O, W, LSE, OUT, MASK;
static ta_tensor T; /* constructor output: must stay byte-identical on error */
static ta_tensor T_before;
static ta_attention *layer;

static void fill_sentinels(void)
{
    float *bufs[7] = {obuf, wbuf, lsebuf, outbuf, dqbuf, dkbuf, dvbuf};
    size_t ns[7] = {sizeof obuf, sizeof wbuf, sizeof lsebuf, sizeof outbuf, sizeof dqbuf,
                    sizeof dkbuf, sizeof dvbuf};
    for (int b = 0; b < 7; b++)
        for (size_t i = 0; i < ns[b] / sizeof(float); i++) bufs[b][i] = SENTINEL;
    memset(&T, 0xAB, sizeof T);
    T_before = T;
}

static int untouched(const char **which)
{
    float *bufs[7] = {obuf, wbuf, lsebuf, outbuf, dqbuf, dkbuf, dvbuf};
    size_t ns[7] = {sizeof obuf, sizeof wbuf, sizeof lsebuf, sizeof outbuf, sizeof dqbuf,
                    sizeof dkbuf, sizeof dvbuf};
    const char *names[7] = {"O", "weights", "lse", "out", "dQ", "dK", "dV"};
    for (int b = 0; b < 7; b++)
        for (size_t i = 0; i < ns[b] / sizeof(float); i++)
            if (bufs[b][i] != SENTINEL) {
                *which = names[b];
                return 0;
            }
    if (memcmp(&T, &T_before, sizeof T) != 0) {
        *which = "constructor output struct";
        return 0;
    }
    return 1;
}

static void view(ta_tensor *t, float *data, int ndim, int64_t a, int64_t b, int64_t c, int64_t d)
{
    const int64_t shape[4] = {a, b, c, d};
    assert_int_equal(ta_tensor_from_buffer(t, data, ndim, shape, NULL), TA_OK);
}

static int setup(void **state)
{
    (void)state;
    view(&Q, qbuf, 4, B, H, LQ, D);
    view(&K, kbuf, 4, B, HKV, LK, D);
    view(&V, vbuf, 4, B, HKV, LK, DV);
    view(&O, obuf, 4, B, H, LQ, DV);
    view(&W, wbuf, 4, B, H, LQ, LK);
    view(&LSE, lsebuf, 3, B, H, LQ, 0);
    view(&OUT, outbuf, 2, 8, 8, 0, 0);
    view(&MASK, maskbuf, 2, LQ, LK, 0, 0);
    ta_randn(&Q, 1);
    ta_randn(&K, 2);
    ta_randn(&V, 3);
    ta_tensor_fill(&MASK, 1.0f);
    assert_int_equal(ta_attention_create(&layer, TA_LAYOUT_TORCH, 8, 2, 7), TA_OK);
    return ta_test_make_dir("ta_validation");
}

static int teardown(void **state)
{
    (void)state;
    ta_attention_free(layer);
    return ta_test_remove_dir();
}

/* ---------------------------------------------------- helpers for cases */

static const int64_t s2x3[2] = {2, 3};
static const int64_t sneg[2] = {2, -3};
static const int64_t shuge[3] = {INT64_MAX / 2, 4, 2};
static const int64_t shuge_size[2] = {(int64_t)1 << 62, 2}; /* 2^63 floats: bytes overflow */

static ta_tensor with_dtype(ta_tensor t, ta_dtype dt) { t.dtype = dt; return t; }
static ta_tensor with_ndim(ta_tensor t, int nd) { t.ndim = nd; return t; }
static ta_tensor with_shape(ta_tensor t, int d, int64_t n) { t.shape[d] = n; return t; }
static ta_tensor with_stride(ta_tensor t, int d, int64_t s) { t.stride[d] = s; return t; }
static ta_tensor with_data(ta_tensor t, void *p) { t.data = p; return t; }

static ta_status sdpa_opts(ta_sdpa_opts o) { return ta_sdpa(&O, &Q, &K, &V, &o); }

/* Each case: one bad call. */
#define CALL(name, ...) \
    static ta_status name(void) { return (__VA_ARGS__); }

/* core tensors */
CALL(empty_null, ta_tensor_empty(NULL, 2, s2x3))
CALL(empty_ndim_neg, ta_tensor_empty(&T, -1, s2x3))
CALL(empty_ndim_9, ta_tensor_empty(&T, 9, shuge))
CALL(empty_shape_null, ta_tensor_empty(&T, 2, NULL))
CALL(empty_negative, ta_tensor_empty(&T, 2, sneg))
CALL(empty_numel_overflow, ta_tensor_empty(&T, 3, shuge))
CALL(empty_bytes_overflow, ta_tensor_empty(&T, 2, shuge_size))
CALL(zeros_negative, ta_tensor_zeros(&T, 2, sneg))
CALL(ones_overflow, ta_tensor_ones(&T, 3, shuge))
CALL(full_null, ta_tensor_full(NULL, 2, s2x3, 1.0f))
CALL(from_buffer_null_data, ta_tensor_from_buffer(&T, NULL, 2, s2x3, NULL))
CALL(from_buffer_negative, ta_tensor_from_buffer(&T, outbuf, 2, sneg, NULL))
static ta_status reshape_two_infer(void) { int64_t s[2] = {-1, -1}; return ta_tensor_reshape(&T, &OUT, 2, s); }
static ta_status reshape_bad_numel(void) { int64_t s[2] = {7, 9}; return ta_tensor_reshape(&T, &OUT, 2, s); }
static ta_status reshape_infer_zero(void) { int64_t s[3] = {0, -1, 2}; return ta_tensor_reshape(&T, &OUT, 3, s); }
static ta_status reshape_no_view(void)
{
    ta_tensor tt;
    ta_tensor_transpose(&tt, &OUT, 0, 1);
    int64_t s[1] = {64};
    return ta_tensor_reshape(&T, &tt, 1, s);
}
CALL(reshape_view_null, ta_tensor_reshape(NULL, &OUT, 2, s2x3))
CALL(reshape_ndim_9, ta_tensor_reshape(&T, &OUT, 9, shuge))
static ta_status permute_range(void) { int p[2] = {0, 2}; return ta_tensor_permute(&T, &OUT, p); }
static ta_status permute_repeat(void) { int p[2] = {1, 1}; return ta_tensor_permute(&T, &OUT, p); }
CALL(permute_null, ta_tensor_permute(&T, &OUT, NULL))
CALL(transpose_range, ta_tensor_transpose(&T, &OUT, 0, 5))
CALL(slice_step0, ta_tensor_slice(&T, &OUT, 0, 0, 4, 0))
CALL(slice_dim, ta_tensor_slice(&T, &OUT, 3, 0, 4, 1))
CALL(slice_null_t, ta_tensor_slice(&T, NULL, 0, 0, 4, 1))
CALL(copy_shape, ta_tensor_copy(&OUT, &Q))
CALL(copy_dtype, ta_tensor_copy(&OUT, (ta_tensor[]){with_dtype(OUT, (ta_dtype)7)}))
CALL(copy_null_data, ta_tensor_copy((ta_tensor[]){with_data(OUT, NULL)}, &OUT))
CALL(fill_bad_ndim, ta_tensor_fill((ta_tensor[]){with_ndim(OUT, 12)}, 0.0f))
CALL(fill_neg_shape, ta_tensor_fill((ta_tensor[]){with_shape(OUT, 1, -8)}, 0.0f))
CALL(tril_rank1, ta_tensor_tril((ta_tensor[]){with_ndim(OUT, 1)}, 0))
CALL(contiguous_null_out, ta_tensor_contiguous(NULL, &OUT))
/* RNG and threads */
CALL(randn_null, ta_randn(NULL, 1))
CALL(rand_dtype, ta_rand((ta_tensor[]){with_dtype(OUT, (ta_dtype)-1)}, 1))
CALL(uniform_reversed, ta_rand_uniform(&OUT, 1.0f, 0.0f, 1))
CALL(uniform_nan, ta_rand_uniform(&OUT, NAN, 1.0f, 1))
CALL(uniform_inf, ta_rand_uniform(&OUT, 0.0f, INFINITY, 1))
CALL(randint_null, ta_randint(NULL, 3, 0, 4, 1))
CALL(randint_empty_range, ta_randint((int64_t[1]){0}, 1, 4, 4, 1))
CALL(threads_zero, ta_set_num_threads(0))
CALL(threads_negative, ta_set_num_threads(-3))
CALL(threads_huge, ta_set_num_threads(100000))
/* GEMM */
CALL(gemm_negative_m, ta_sgemm(outbuf, 8, 1, qbuf, 8, 1, kbuf, 8, 1, -1, 8, 8, 1, 0))
CALL(gemm_null_c, ta_sgemm(NULL, 8, 1, qbuf, 8, 1, kbuf, 8, 1, 8, 8, 8, 1, 0))
CALL(gemm_null_a, ta_sgemm(outbuf, 8, 1, NULL, 8, 1, kbuf, 8, 1, 8, 8, 8, 1, 0))
CALL(gemm_c_stride0, ta_sgemm(outbuf, 0, 1, qbuf, 8, 1, kbuf, 8, 1, 8, 8, 8, 1, 0))
CALL(gemm_stride_overflow, ta_sgemm(outbuf, 8, 1, qbuf, INT64_MAX / 2, 1, kbuf, 8, 1, 8, 8, 8, 1, 0))
CALL(gemm_batched_negative, ta_sgemm_batched(outbuf, 64, 8, 1, qbuf, 64, 8, 1, kbuf, 64, 8, 1, -2, 8, 8, 8, 1, 0))
CALL(gemm_batched_c_bstride0, ta_sgemm_batched(outbuf, 0, 2, 1, qbuf, 4, 2, 1, kbuf, 4, 2, 1, 2, 2, 2, 2, 1, 0))
/* einsum */
CALL(einsum_spec_null, ta_einsum(&OUT, NULL, &OUT, &OUT))
CALL(einsum_out_null, ta_einsum(NULL, "ij,jk->ik", &OUT, &OUT))
CALL(einsum_a_null, ta_einsum(&OUT, "ij,jk->ik", NULL, &OUT))
CALL(einsum_bad_char, ta_einsum(&OUT, "i1,jk->ik", &OUT, &OUT))
CALL(einsum_bad_byte, ta_einsum(&OUT, "ij,j\xff->ik", &OUT, &OUT))
CALL(einsum_two_arrows, ta_einsum(&OUT, "ij,jk->ik->i", &OUT, &OUT))
CALL(einsum_lone_dot, ta_einsum(&OUT, "i.,jk->ik", &OUT, &OUT))
CALL(einsum_two_ellipses, ta_einsum(&OUT, "...i...,jk->ik", &OUT, &OUT))
CALL(einsum_out_missing, ta_einsum(&OUT, "ij,jk->iz", &OUT, &OUT))
CALL(einsum_out_repeat, ta_einsum(&OUT, "ij,jk->ii", &OUT, &OUT))
CALL(einsum_three_ops, ta_einsum(&OUT, "i,j,k->ijk", &OUT, &OUT))
CALL(einsum_op_count, ta_einsum(&OUT, "ij->ji", &OUT, &OUT))
CALL(einsum1_op_count, ta_einsum1(&OUT, "ij,jk->ik", &OUT))
CALL(einsum_rank, ta_einsum(&OUT, "ij,jk->ik", &Q, &OUT))
CALL(einsum_size, ta_einsum(&W, "bhid,bhjd->bhij", &Q, &V))
CALL(einsum_out_shape, ta_einsum(&OUT, "bhid,bhjd->bhij", &Q, &Q))
CALL(einsum_out_stride0, ta_einsum((ta_tensor[]){with_stride(with_shape(OUT, 0, 3), 0, 0)}, "ij,jk->ik", &MASK, (ta_tensor[]){with_shape(with_shape(MASK, 0, 5), 1, 8)}))
CALL(einsum_dtype, ta_einsum(&OUT, "ij,jk->ik", &OUT, (ta_tensor[]){with_dtype(OUT, TA_BF16)}))
CALL(einsum_too_many_dims, ta_einsum(&OUT, "abcde,fghij->abcdefghij", (ta_tensor[]){with_ndim(OUT, 5)}, (ta_tensor[]){with_ndim(OUT, 5)}))
CALL(einsum_out_aliases_input, ta_einsum(&OUT, "ij,jk->ik", &OUT, &OUT))
CALL(einsum_shape_ndim_null, ta_einsum_shape(NULL, (int64_t[8]){0}, "ij->ji", &OUT, NULL))
/* softmax and masks */
CALL(softmax_dim, ta_softmax(&OUT, &OUT, 2))
CALL(softmax_dim_neg, ta_softmax(&OUT, &OUT, -3))
CALL(softmax_shape, ta_softmax(&OUT, &MASK, -1))
CALL(softmax_overlap, ta_softmax((ta_tensor[]){with_shape(with_shape(OUT, 0, 2), 1, 8)}, (ta_tensor[]){with_data(with_shape(with_shape(OUT, 0, 2), 1, 8), outbuf + 4)}, -1))
CALL(softmax_out_stride0, ta_softmax((ta_tensor[]){with_stride(with_shape(with_shape(OUT, 0, 3), 1, 5), 0, 0)}, &MASK, -1))
CALL(softmax_null, ta_softmax(&OUT, NULL, 0))
CALL(masked_fill_broadcast, ta_masked_fill(&OUT, &MASK, 0.0f))
CALL(masked_fill_null_mask, ta_masked_fill(&OUT, NULL, 0.0f))
CALL(causal_mask_rank, ta_causal_mask((ta_tensor[]){with_ndim(OUT, 1)}, TA_CAUSAL_TOP_LEFT))
CALL(causal_mask_align, ta_causal_mask(&OUT, (ta_causal)7))
CALL(padding_mask_null, ta_padding_mask(&OUT, NULL))
CALL(padding_mask_range, ta_padding_mask(&OUT, (int64_t[8]){1, 9, 0, 0, 0, 0, 0, 0}))
CALL(padding_mask_negative, ta_padding_mask(&OUT, (int64_t[8]){-1}))
/* ta_sdpa */
CALL(sdpa_q_null, ta_sdpa(&O, NULL, &K, &V, NULL))
CALL(sdpa_o_null, ta_sdpa(NULL, &Q, &K, &V, NULL))
CALL(sdpa_q_rank, ta_sdpa(&O, (ta_tensor[]){with_ndim(Q, 3)}, &K, &V, NULL))
CALL(sdpa_q_dtype, ta_sdpa(&O, (ta_tensor[]){with_dtype(Q, TA_F64)}, &K, &V, NULL))
CALL(sdpa_batch, ta_sdpa(&O, &Q, (ta_tensor[]){with_shape(K, 0, 1)}, &V, NULL))
CALL(sdpa_head_dim, ta_sdpa(&O, &Q, (ta_tensor[]){with_shape(K, 3, 4)}, &V, NULL))
CALL(sdpa_v_keys, ta_sdpa(&O, &Q, &K, (ta_tensor[]){with_shape(V, 2, 4)}, NULL))
CALL(sdpa_v_heads, ta_sdpa(&O, &Q, &K, (ta_tensor[]){with_shape(V, 1, 1)}, NULL))
CALL(sdpa_gqa, ta_sdpa((ta_tensor[]){with_shape(O, 1, 3)}, (ta_tensor[]){with_shape(Q, 1, 3)}, &K, &V, NULL))
CALL(sdpa_o_shape, ta_sdpa((ta_tensor[]){with_shape(O, 3, 5)}, &Q, &K, &V, NULL))
CALL(sdpa_o_stride0, ta_sdpa((ta_tensor[]){with_stride(O, 2, 0)}, &Q, &K, &V, NULL))
CALL(sdpa_w_shape, sdpa_opts((ta_sdpa_opts){.weights = (ta_tensor[]){with_shape(W, 3, 4)}}))
CALL(sdpa_lse_shape, sdpa_opts((ta_sdpa_opts){.lse = &W}))
CALL(sdpa_scale_nan, sdpa_opts((ta_sdpa_opts){.scale = NAN}))
CALL(sdpa_scale_inf, sdpa_opts((ta_sdpa_opts){.scale = -INFINITY}))
CALL(sdpa_path, sdpa_opts((ta_sdpa_opts){.path = (ta_sdpa_path)9}))
CALL(sdpa_causal, sdpa_opts((ta_sdpa_opts){.causal = (ta_causal)-1}))
CALL(sdpa_mask_mode, sdpa_opts((ta_sdpa_opts){.mask = &MASK, .mask_mode = (ta_mask_mode)5}))
CALL(sdpa_mask_shape, sdpa_opts((ta_sdpa_opts){.mask = &OUT}))
CALL(sdpa_mask_dtype, sdpa_opts((ta_sdpa_opts){.mask = (ta_tensor[]){with_dtype(MASK, TA_F64)}}))
CALL(sdpa_key_len_neg, sdpa_opts((ta_sdpa_opts){.key_lengths = (int64_t[2]){5, -1}}))
CALL(sdpa_key_len_big, sdpa_opts((ta_sdpa_opts){.key_lengths = (int64_t[2]){6, 1}}))
CALL(sdpa_o_overlaps_q, ta_sdpa((ta_tensor[]){with_data(O, qbuf)}, &Q, &K, &V, NULL))
CALL(sdpa_w_overlaps_o, sdpa_opts((ta_sdpa_opts){.weights = (ta_tensor[]){with_data(W, obuf)}}))
CALL(sdpa_lse_overlaps_mask, sdpa_opts((ta_sdpa_opts){.mask = &MASK, .lse = (ta_tensor[]){with_data(LSE, maskbuf)}}))
static ta_status sdpa_rows_overflow(void)
{
    /* D = Dv = 0: every tensor is empty and valid, but B * H * Lq * Lk overflows */
    const int64_t big = (int64_t)1 << 40;
    ta_tensor o = with_shape(with_shape(O, 2, big), 3, 0), q = with_shape(with_shape(Q, 2, big), 3, 0);
    ta_tensor k = with_shape(with_shape(K, 2, big), 3, 0), v = with_shape(with_shape(V, 2, big), 3, 0);
    return ta_sdpa(&o, &q, &k, &v, NULL);
}
CALL(sdpa_w_null_data, sdpa_opts((ta_sdpa_opts){.weights = (ta_tensor[]){with_data(W, NULL)}}))
/* files */
CALL(npy_load_out_null, ta_npy_load(NULL, "x.npy"))
CALL(npy_load_path_null, ta_npy_load(&T, NULL))
CALL(npy_load_path_empty, ta_npy_load(&T, ""))
CALL(npy_load_missing, ta_npy_load(&T, "/nonexistent/x.npy"))
CALL(npy_load_dir, ta_npy_load(&T, "/tmp"))
CALL(npy_load_int64_null, ta_npy_load_int64(NULL, (int[1]){0}, (int64_t[8]){0}, "x.npy"))
CALL(npy_save_path_null, ta_npy_save(NULL, &OUT))
CALL(npy_save_t_null, ta_npy_save("/tmp/never.npy", NULL))
CALL(npy_save_dtype, ta_npy_save("/tmp/never.npy", (ta_tensor[]){with_dtype(OUT, (ta_dtype)4)}))
CALL(npy_save_missing_dir, ta_npy_save("/nonexistent/dir/x.npy", &OUT))
CALL(st_open_null, ta_safetensors_open(NULL, "w.safetensors"))
static ta_status st_open_missing(void) { ta_safetensors *s = NULL; return ta_safetensors_open(&s, "/nonexistent/w.safetensors"); }
CALL(st_save_n_negative, ta_safetensors_save("/tmp/never.safetensors", -1, NULL, NULL))
CALL(st_save_names_null, ta_safetensors_save("/tmp/never.safetensors", 1, NULL, (const ta_tensor *const[]){&OUT}))
CALL(st_save_dup, ta_safetensors_save("/tmp/never.safetensors", 2, (const char *const[]){"a", "a"}, (const ta_tensor *const[]){&OUT, &MASK}))
CALL(st_save_metadata, ta_safetensors_save("/tmp/never.safetensors", 1, (const char *const[]){"__metadata__"}, (const ta_tensor *const[]){&OUT}))
CALL(st_save_empty_name, ta_safetensors_save("/tmp/never.safetensors", 1, (const char *const[]){""}, (const ta_tensor *const[]){&OUT}))
CALL(st_save_tensor_null, ta_safetensors_save("/tmp/never.safetensors", 1, (const char *const[]){"a"}, (const ta_tensor *const[]){NULL}))
/* attention layers */
static ta_attention *newlayer;
CALL(attn_create_null, ta_attention_create(NULL, TA_LAYOUT_SEED, 8, 2, 1))
CALL(attn_create_layout, ta_attention_create(&newlayer, (ta_layout)5, 8, 2, 1))
CALL(attn_create_heads0, ta_attention_create(&newlayer, TA_LAYOUT_SEED, 8, 0, 1))
CALL(attn_create_neg_e, ta_attention_create(&newlayer, TA_LAYOUT_SEED, -8, 2, 1))
CALL(attn_create_divisible, ta_attention_create(&newlayer, TA_LAYOUT_SEED, 10, 3, 1))
CALL(attn_create_huge, ta_attention_create(&newlayer, TA_LAYOUT_TORCH, INT64_MAX - 1, 1, 1))
CALL(attn_load_null_path, ta_attention_load(&newlayer, NULL, TA_LAYOUT_SEED, 2))
CALL(attn_load_missing, ta_attention_load(&newlayer, "/nonexistent/w.safetensors", TA_LAYOUT_SEED, 2))
CALL(attn_save_null, ta_attention_save("/tmp/never.safetensors", NULL))
CALL(attn_param_unknown, ta_attention_param(&T, layer, "nope.weight"))
static ta_tensor X3(float *buf, int64_t n, int64_t l, int64_t e)
{
    ta_tensor t;
    const int64_t s[3] = {n, l, e};
    ta_tensor_from_buffer(&t, buf, 3, s, NULL);
    return t;
}
static ta_status fwd(ta_tensor *out, ta_tensor q, ta_tensor k, ta_tensor v, const ta_attention_opts *o)
{
    return ta_attention_forward(out, layer, &q, &k, &v, o);
}
static ta_status fwd_out(ta_tensor out, const ta_attention_opts *o)
{
    return fwd(&out, X3(qbuf, 2, 3, 8), X3(kbuf, 2, 5, 8), X3(vbuf, 2, 5, 8), o);
}
CALL(attn_fwd_layer_null, ta_attention_forward(&OUT, NULL, &Q, &K, &V, NULL))
CALL(attn_fwd_out_null, fwd(NULL, X3(qbuf, 2, 3, 8), X3(kbuf, 2, 5, 8), X3(vbuf, 2, 5, 8), NULL))
CALL(attn_fwd_e, fwd(&OUT, X3(qbuf, 2, 3, 4), X3(kbuf, 2, 5, 8), X3(vbuf, 2, 5, 8), NULL))
CALL(attn_fwd_kv, fwd(&OUT, X3(qbuf, 2, 3, 8), X3(kbuf, 2, 5, 8), X3(vbuf, 2, 4, 8), NULL))
CALL(attn_fwd_out_shape, fwd(&OUT, X3(qbuf, 2, 3, 8), X3(kbuf, 2, 5, 8), X3(vbuf, 2, 5, 8), NULL))
CALL(attn_fwd_mode, fwd_out(X3(outbuf, 2, 3, 8), &(ta_attention_opts){.mask = &MASK, .mask_mode = (ta_mask_mode)4}))
CALL(attn_fwd_kpm_shape, fwd_out(X3(outbuf, 2, 3, 8), &(ta_attention_opts){.key_padding_mask = &MASK}))
CALL(attn_fwd_mask_shape, fwd_out(X3(outbuf, 2, 3, 8), &(ta_attention_opts){.mask = &OUT}))
CALL(attn_fwd_causal, fwd_out(X3(outbuf, 2, 3, 8), &(ta_attention_opts){.causal = (ta_causal)3}))

/* gradients and optimisers (audited last: written while this audit ran). The
 * gradient outputs are the sentinel buffers: dQ in O's buffer shape is wrong on
 * purpose where the case says so. */
static ta_status bwd(ta_tensor dq, ta_tensor dk, ta_tensor dv, ta_tensor dO, const ta_sdpa_opts *o)
{
    return ta_sdpa_backward(&dq, &dk, &dv, &dO, &Q, &K, &V, &O, &LSE, o);
}
static ta_tensor GQ(void) { ta_tensor t; view(&t, dqbuf, 4, B, H, LQ, D); return t; }
static ta_tensor GK(void) { ta_tensor t; view(&t, dkbuf, 4, B, HKV, LK, D); return t; }
static ta_tensor GV(void) { ta_tensor t; view(&t, dvbuf, 4, B, HKV, LK, DV); return t; }
CALL(bwd_dq_null, ta_sdpa_backward(NULL, &K, &V, &O, &Q, &K, &V, &O, &LSE, NULL))
CALL(bwd_dq_shape, bwd(with_shape(GQ(), 3, 4), GK(), GV(), O, NULL))
CALL(bwd_dv_shape, bwd(GQ(), GK(), with_shape(GV(), 2, 4), O, NULL))
CALL(bwd_do_shape, bwd(GQ(), GK(), GV(), with_shape(O, 2, 2), NULL))
CALL(bwd_scale_nan, bwd(GQ(), GK(), GV(), O, &(ta_sdpa_opts){.scale = NAN}))
CALL(bwd_weights, bwd(GQ(), GK(), GV(), O, &(ta_sdpa_opts){.weights = &W}))
CALL(bwd_dq_overlaps_q, bwd(with_data(GQ(), qbuf), GK(), GV(), O, NULL))
static ta_optimizer *newopt;
CALL(opt_sgd_null, ta_optimizer_sgd(NULL, &(ta_sgd_opts){.lr = 0.1, .momentum = 0, .dampening = 0, .weight_decay = 0, .nesterov = 0}))
CALL(opt_sgd_lr_nan, ta_optimizer_sgd(&newopt, &(ta_sgd_opts){.lr = NAN, .momentum = 0, .dampening = 0, .weight_decay = 0, .nesterov = 0}))
CALL(opt_sgd_lr_neg, ta_optimizer_sgd(&newopt, &(ta_sgd_opts){.lr = -1, .momentum = 0, .dampening = 0, .weight_decay = 0, .nesterov = 0}))
CALL(opt_sgd_nesterov, ta_optimizer_sgd(&newopt, &(ta_sgd_opts){.lr = 0.1, .momentum = 0, .dampening = 0, .weight_decay = 0, .nesterov = 1}))
CALL(opt_adamw_beta, ta_optimizer_adamw(&newopt, &(ta_adamw_opts){.lr = 1e-3, .beta1 = 1.0, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01}))
CALL(opt_adamw_eps_inf, ta_optimizer_adamw(&newopt, &(ta_adamw_opts){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = INFINITY, .weight_decay = 0.01}))
CALL(opt_step_null, ta_optimizer_step(NULL, 0, NULL, NULL))

typedef struct vcase {
    const char *name;
    ta_status (*call)(void);
    ta_status code;
    const char *needle;
} vcase;

#define C(name, code, needle) {#name, name, code, needle}
static const vcase cases[] = {
    C(empty_null, TA_EINVAL, "ta_tensor_empty: t is NULL"),
    C(empty_ndim_neg, TA_EINVAL, "ndim must be in [0, 8], got -1"),
    C(empty_ndim_9, TA_EINVAL, "ndim must be in [0, 8], got 9"),
    C(empty_shape_null, TA_EINVAL, "shape is NULL"),
    C(empty_negative, TA_EINVAL, "shape[1] is negative (-3)"),
    C(empty_numel_overflow, TA_EINVAL, "too many elements"),
    C(empty_bytes_overflow, TA_EINVAL, "too many elements"),
    C(zeros_negative, TA_EINVAL, "ta_tensor_zeros"),
    C(ones_overflow, TA_EINVAL, "ta_tensor_ones"),
    C(full_null, TA_EINVAL, "ta_tensor_full: t is NULL"),
    C(from_buffer_null_data, TA_EINVAL, "data is NULL"),
    C(from_buffer_negative, TA_EINVAL, "negative"),
    C(reshape_two_infer, TA_EINVAL, "only one dimension can be -1"),
    C(reshape_bad_numel, TA_ESHAPE, "cannot reshape [8, 8] (64 elements) to [7, 9]"),
    C(reshape_infer_zero, TA_ESHAPE, "cannot infer -1"),
    C(reshape_no_view, TA_ESHAPE, "do not allow a view"),
    C(reshape_view_null, TA_EINVAL, "view is NULL"),
    C(reshape_ndim_9, TA_EINVAL, "ndim must be in"),
    C(permute_range, TA_EINVAL, "perm[1] = 2 is out of range"),
    C(permute_repeat, TA_EINVAL, "perm repeats dim 1"),
    C(permute_null, TA_EINVAL, "perm is NULL"),
    C(transpose_range, TA_EINVAL, "out of range"),
    C(slice_step0, TA_EINVAL, "step must be >= 1"),
    C(slice_dim, TA_EINVAL, "dim 3 out of range"),
    C(slice_null_t, TA_EINVAL, "ta_tensor_slice: t is NULL"),
    C(copy_shape, TA_ESHAPE, "dst has shape [8, 8] but src has [2, 4, 3, 8]"),
    C(copy_dtype, TA_EINVAL, "src has dtype 7, not a ta_dtype"),
    C(copy_null_data, TA_EINVAL, "dst has NULL data"),
    C(fill_bad_ndim, TA_EINVAL, "t has ndim 12"),
    C(fill_neg_shape, TA_EINVAL, "invalid shape"),
    C(tril_rank1, TA_ESHAPE, "at least 2 dims"),
    C(contiguous_null_out, TA_EINVAL, "out is NULL"),
    C(randn_null, TA_EINVAL, "ta_randn: t is NULL"),
    C(rand_dtype, TA_EINVAL, "ta_rand: t has dtype -1, not a ta_dtype"),
    C(uniform_reversed, TA_EINVAL, "need finite low < high"),
    C(uniform_nan, TA_EINVAL, "need finite low < high"),
    C(uniform_inf, TA_EINVAL, "need finite low < high"),
    C(randint_null, TA_EINVAL, "ta_randint: out is NULL"),
    C(randint_empty_range, TA_EINVAL, "need low < high"),
    C(threads_zero, TA_EINVAL, "ta_set_num_threads: n must be in [1, 4096], got 0"),
    C(threads_negative, TA_EINVAL, "got -3"),
    C(threads_huge, TA_EINVAL, "got 100000"),
    C(gemm_negative_m, TA_EINVAL, "ta_sgemm: M is negative"),
    C(gemm_null_c, TA_EINVAL, "C is NULL"),
    C(gemm_null_a, TA_EINVAL, "A is NULL"),
    C(gemm_c_stride0, TA_ESHAPE, "C has a zero stride"),
    C(gemm_stride_overflow, TA_ESHAPE, "overflow"),
    C(gemm_batched_negative, TA_EINVAL, "ta_sgemm_batched: batch is negative"),
    C(gemm_batched_c_bstride0, TA_ESHAPE, "zero stride"),
    C(einsum_spec_null, TA_EINVAL, "ta_einsum: spec is NULL"),
    C(einsum_out_null, TA_EINVAL, "ta_einsum: out is NULL"),
    C(einsum_a_null, TA_EINVAL, "ta_einsum: a is NULL"),
    C(einsum_bad_char, TA_EINVAL, "invalid character '1'"),
    C(einsum_bad_byte, TA_EINVAL, "invalid character (code 255)"),
    C(einsum_two_arrows, TA_EINVAL, "more than one '->'"),
    C(einsum_lone_dot, TA_EINVAL, "not part of an ellipsis"),
    C(einsum_two_ellipses, TA_EINVAL, "more than one '...'"),
    C(einsum_out_missing, TA_EINVAL, "output index 'z' does not appear"),
    C(einsum_out_repeat, TA_EINVAL, "appears more than once"),
    C(einsum_three_ops, TA_EINVAL, "more than two operands"),
    C(einsum_op_count, TA_EINVAL, "names 1 operand but 2 were given"),
    C(einsum1_op_count, TA_EINVAL, "names 2 operands but 1 was given"),
    C(einsum_rank, TA_ESHAPE, "operand 0 has 4 dims but the spec"),
    C(einsum_size, TA_ESHAPE, "index 'd' has size 8 in operand 0 but 6"),
    C(einsum_out_shape, TA_ESHAPE, "out has shape [8, 8] but the result"),
    C(einsum_out_stride0, TA_EINVAL, "out has stride 0"),
    C(einsum_dtype, TA_EUNSUPPORTED, "ta_einsum: b has dtype bf16; ta_einsum takes float32"),
    C(einsum_too_many_dims, TA_EUNSUPPORTED, "would have 10 dims"),
    C(einsum_out_aliases_input, TA_EINVAL, "overlaps"),
    C(einsum_shape_ndim_null, TA_EINVAL, "ndim is NULL"),
    C(softmax_dim, TA_EINVAL, "dim 2 is out of range for 2 dims"),
    C(softmax_dim_neg, TA_EINVAL, "dim -3 is out of range"),
    C(softmax_shape, TA_ESHAPE, "out has shape [8, 8] but x has [3, 5]"),
    C(softmax_overlap, TA_EINVAL, "out overlaps x"),
    C(softmax_out_stride0, TA_EINVAL, "stride 0"),
    C(softmax_null, TA_EINVAL, "ta_softmax: x is NULL"),
    C(masked_fill_broadcast, TA_ESHAPE, "does not broadcast"),
    C(masked_fill_null_mask, TA_EINVAL, "mask is NULL"),
    C(causal_mask_rank, TA_ESHAPE, "at least 2 dims"),
    C(causal_mask_align, TA_EINVAL, "align = 7 is not a ta_causal value"),
    C(padding_mask_null, TA_EINVAL, "lengths is NULL"),
    C(padding_mask_range, TA_EINVAL, "lengths[1] = 9 is outside [0, 8]"),
    C(padding_mask_negative, TA_EINVAL, "lengths[0] = -1"),
    C(sdpa_q_null, TA_EINVAL, "ta_sdpa: Q is NULL"),
    C(sdpa_o_null, TA_EINVAL, "ta_sdpa: O is NULL"),
    C(sdpa_q_rank, TA_ESHAPE, "Q must have 4 dims"),
    C(sdpa_q_dtype, TA_EUNSUPPORTED, "Q has dtype f64"),
    C(sdpa_batch, TA_ESHAPE, "K has batch 1 but Q has 2"),
    C(sdpa_head_dim, TA_ESHAPE, "K has head_dim 4 but Q has 8"),
    C(sdpa_v_keys, TA_ESHAPE, "V has 4 keys but K has 5"),
    C(sdpa_v_heads, TA_ESHAPE, "V has 1 heads but K has 2"),
    C(sdpa_gqa, TA_ESHAPE, "Q has 3 heads, not a multiple of the 2 heads"),
    C(sdpa_o_shape, TA_ESHAPE, "O has shape [2, 4, 3, 5], expected"),
    C(sdpa_o_stride0, TA_EINVAL, "O has stride 0 in dim 2"),
    C(sdpa_w_shape, TA_ESHAPE, "opts->weights has shape"),
    C(sdpa_lse_shape, TA_ESHAPE, "opts->lse has shape"),
    C(sdpa_scale_nan, TA_EINVAL, "opts->scale must be finite, got nan"),
    C(sdpa_scale_inf, TA_EINVAL, "opts->scale must be finite, got -inf"),
    C(sdpa_path, TA_EINVAL, "opts->path = 9 is not a ta_sdpa_path"),
    C(sdpa_causal, TA_EINVAL, "causal = -1 is not a ta_causal value"),
    C(sdpa_mask_mode, TA_EINVAL, "mask_mode = 5 is not a ta_mask_mode"),
    C(sdpa_mask_shape, TA_ESHAPE, "mask of shape [8, 8] does not broadcast to [2, 4, 3, 5]"),
    C(sdpa_mask_dtype, TA_EUNSUPPORTED, "mask has dtype f64"),
    C(sdpa_key_len_neg, TA_EINVAL, "key_lengths[1] = -1 is outside [0, 5]"),
    C(sdpa_key_len_big, TA_EINVAL, "key_lengths[0] = 6 is outside [0, 5]"),
    C(sdpa_o_overlaps_q, TA_EINVAL, "O overlaps Q"),
    C(sdpa_w_overlaps_o, TA_EINVAL, "O overlaps opts->weights"),
    C(sdpa_lse_overlaps_mask, TA_EINVAL, "opts->lse overlaps opts->mask"),
    C(sdpa_rows_overflow, TA_ESHAPE, "overflows"),
    C(sdpa_w_null_data, TA_EINVAL, "opts->weights has NULL data"),
    C(npy_load_out_null, TA_EINVAL, "ta_npy_load: out is NULL"),
    C(npy_load_path_null, TA_EINVAL, "path is NULL or empty"),
    C(npy_load_path_empty, TA_EINVAL, "path is NULL or empty"),
    C(npy_load_missing, TA_EIO, "/nonexistent/x.npy"),
    C(npy_load_dir, TA_EIO, "ta_npy_load"),
    C(npy_load_int64_null, TA_EINVAL, "is NULL"),
    C(npy_save_path_null, TA_EINVAL, "path is NULL or empty"),
    C(npy_save_t_null, TA_EINVAL, "ta_npy_save: t is NULL"),
    C(npy_save_dtype, TA_EINVAL, "ta_npy_save: t has dtype 4, not a ta_dtype"),
    C(npy_save_missing_dir, TA_EIO, "/nonexistent/dir/x.npy"),
    C(st_open_null, TA_EINVAL, "is NULL"),
    C(st_open_missing, TA_EIO, "/nonexistent/w.safetensors"),
    C(st_save_n_negative, TA_EINVAL, "ta_safetensors_save"),
    C(st_save_names_null, TA_EINVAL, "ta_safetensors_save"),
    C(st_save_dup, TA_EINVAL, "'a'"),
    C(st_save_metadata, TA_EINVAL, "__metadata__"),
    C(st_save_empty_name, TA_EINVAL, "ta_safetensors_save"),
    C(st_save_tensor_null, TA_EINVAL, "is NULL"),
    C(attn_create_null, TA_EINVAL, "ta_attention_create: layer is NULL"),
    C(attn_create_layout, TA_EINVAL, "layout 5 is not"),
    C(attn_create_heads0, TA_EINVAL, "heads must be >= 1, got 0"),
    C(attn_create_neg_e, TA_EINVAL, "embed_size must be >= 1, got -8"),
    C(attn_create_divisible, TA_EINVAL, "embed_size 10 is not divisible by heads 3"),
    C(attn_create_huge, TA_EINVAL, "too large"),
    C(attn_load_null_path, TA_EINVAL, "path is NULL"),
    C(attn_load_missing, TA_EIO, "/nonexistent/w.safetensors"),
    C(attn_save_null, TA_EINVAL, "layer is NULL"),
    C(attn_param_unknown, TA_EINVAL, "ta_attention_param"),
    C(attn_fwd_layer_null, TA_EINVAL, "layer is NULL"),
    C(attn_fwd_causal, TA_EINVAL, "causal 3 is not a ta_causal"),
    C(attn_fwd_out_null, TA_EINVAL, "out is NULL"),
    C(attn_fwd_e, TA_ESHAPE, "queries has shape [2, 3, 4], expected [N, L, 8]"),
    C(attn_fwd_kv, TA_ESHAPE, "keys has shape [2, 5, 8] but values has [2, 4, 8]"),
    C(attn_fwd_out_shape, TA_ESHAPE, "out has shape [8, 8]"),
    C(attn_fwd_mode, TA_EINVAL, "mask_mode 4 is not a ta_mask_mode"),
    C(attn_fwd_kpm_shape, TA_ESHAPE, "key_padding_mask has shape [3, 5], expected [N, Lk] = [2, 5]"),
    C(attn_fwd_mask_shape, TA_ESHAPE, "mask has shape [8, 8]"),
    C(bwd_dq_null, TA_EINVAL, "dQ is NULL"),
    C(bwd_dq_shape, TA_ESHAPE, "dQ has shape [2, 4, 3, 4]"),
    C(bwd_dv_shape, TA_ESHAPE, "dV has shape [2, 2, 4, 6]"),
    C(bwd_do_shape, TA_ESHAPE, "dO has shape [2, 4, 2, 6]"),
    C(bwd_scale_nan, TA_EINVAL, "scale"),
    C(bwd_weights, TA_EINVAL, "weights"),
    C(bwd_dq_overlaps_q, TA_EINVAL, "overlaps"),
    C(opt_sgd_null, TA_EINVAL, "is NULL"),
    C(opt_sgd_lr_nan, TA_EINVAL, "lr"),
    C(opt_sgd_lr_neg, TA_EINVAL, "lr"),
    C(opt_sgd_nesterov, TA_EINVAL, "Nesterov momentum requires"),
    C(opt_adamw_beta, TA_EINVAL, "beta1"),
    C(opt_adamw_eps_inf, TA_EINVAL, "eps"),
    C(opt_step_null, TA_EINVAL, "is NULL"),
};

/* Every case: the code, the message, and no output written. */
static void test_bad_calls(void **state)
{
    (void)state;
    int failures = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const vcase *vc = &cases[c];
        fill_sentinels();
        newlayer = (ta_attention *)(uintptr_t)0x1234;
        newopt = (ta_optimizer *)(uintptr_t)0x1234;
        ta_status st = vc->call();
        const char *which = NULL;
        if (st != vc->code) {
            print_error("%s: got %s, expected %s (message: %s)\n", vc->name, ta_status_name(st),
                        ta_status_name(vc->code), ta_last_error());
            failures++;
        } else if (!strstr(ta_last_error(), vc->needle)) {
            print_error("%s: message '%s' lacks '%s'\n", vc->name, ta_last_error(), vc->needle);
            failures++;
        } else if (!untouched(&which)) {
            print_error("%s: %s was written by a failing call\n", vc->name, which);
            failures++;
        } else if (newlayer != (ta_attention *)(uintptr_t)0x1234 ||
                   newopt != (ta_optimizer *)(uintptr_t)0x1234) {
            print_error("%s: *layer or *opt was written by a failing call\n", vc->name);
            failures++;
        }
    }
    if (failures) fail_msg("%d of %zu bad calls misbehaved", failures, sizeof cases / sizeof cases[0]);
}

/* Calls the audit found that must succeed and stay well-defined (sanitizers watch
 * them): extreme but legal arguments. */
static void test_extreme_legal_calls(void **state)
{
    (void)state;
    ta_tensor v;
    /* a step far beyond the extent: one element, no stride overflow */
    TA_CHECK_OK(ta_tensor_slice(&v, &OUT, 0, 0, 8, INT64_MAX));
    assert_int_equal(v.shape[0], 1);
    TA_CHECK_OK(ta_tensor_slice(&v, &OUT, 1, INT64_MIN, INT64_MAX, INT64_MAX / 2));
    assert_int_equal(v.shape[1], 1);
    /* the widest integer range */
    int64_t r[16];
    TA_CHECK_OK(ta_randint(r, 16, INT64_MIN, INT64_MAX, 9));
    TA_CHECK_OK(ta_randint(r, 16, -5, -4, 9));
    for (int i = 0; i < 16; i++) assert_int_equal(r[i], -5);
    /* zero-size tensors pass through every op */
    const int64_t z[2] = {0, 3};
    ta_tensor e;
    TA_CHECK_OK(ta_tensor_empty(&e, 2, z));
    TA_CHECK_OK(ta_softmax(&e, &e, 1));
    TA_CHECK_OK(ta_tensor_fill(&e, 1.0f));
    ta_tensor_free(&e);
    /* empty outputs with stride-0 dims (NumPy's strides for a [2, 2, 0, 4] array are
     * [0, 0, 4, 1] elements): no element, so nothing aliases */
    float buf[16] = {0};
    const int64_t es[4] = {2, 2, 0, 4}, est[4] = {0, 0, 4, 1};
    ta_tensor eq, eo;
    TA_CHECK_OK(ta_tensor_from_buffer(&eq, buf, 4, es, est));
    TA_CHECK_OK(ta_tensor_from_buffer(&eo, buf + 8, 4, es, est));
    TA_CHECK_OK(ta_sdpa(&eo, &eq, &eq, &eq, NULL));
    const int64_t e2[2] = {0, 3}, e2s[2] = {3, 0};
    TA_CHECK_OK(ta_tensor_from_buffer(&eo, buf, 2, e2, e2s));
    TA_CHECK_OK(ta_tensor_from_buffer(&eq, buf + 8, 2, e2, NULL));
    TA_CHECK_OK(ta_einsum1(&eo, "ij->ij", &eq));
    TA_CHECK_OK(ta_softmax(&eo, &eq, 1));
    /* an attention layer on an empty query batch of two (its heads' view of O then has
     * stride 0 in the batch dim) */
    ta_attention *layer;
    TA_CHECK_OK(ta_attention_create(&layer, TA_LAYOUT_TORCH, 4, 2, 1));
    const int64_t xq[3] = {2, 0, 4}, xk[3] = {2, 3, 4};
    ta_tensor x0, xk3, y0, dy0, dxk;
    TA_CHECK_OK(ta_tensor_zeros(&x0, 3, xq));
    TA_CHECK_OK(ta_tensor_zeros(&xk3, 3, xk));
    TA_CHECK_OK(ta_tensor_zeros(&y0, 3, xq));
    TA_CHECK_OK(ta_tensor_zeros(&dy0, 3, xq));
    TA_CHECK_OK(ta_tensor_zeros(&dxk, 3, xk));
    TA_CHECK_OK(ta_attention_forward(&y0, layer, &x0, &xk3, &xk3, NULL));
    TA_CHECK_OK(ta_attention_backward(NULL, &dxk, &dxk, layer, &dy0, &x0, &xk3, &xk3, NULL));
    ta_tensor *ts[] = {&x0, &xk3, &y0, &dy0, &dxk};
    for (int i = 0; i < 5; i++) ta_tensor_free(ts[i]);
    ta_attention_free(layer);
    /* tril / triu with diagonals at the ends of int64 (torch keeps or clears everything;
     * i + diagonal overflowed until session 33) */
    const int64_t sq[2] = {3, 3};
    for (int c = 0; c < 4; c++) {
        ta_tensor m;
        TA_CHECK_OK(ta_tensor_ones(&m, 2, sq));
        const int64_t diag = c % 2 ? INT64_MIN : INT64_MAX;
        TA_CHECK_OK(c < 2 ? ta_tensor_tril(&m, diag) : ta_tensor_triu(&m, diag));
        const float want = (c == 0 || c == 3) ? 1.0f : 0.0f; /* tril(MAX), triu(MIN) keep */
        for (int i = 0; i < 9; i++) assert_true(((const float *)m.data)[i] == want);
        ta_tensor_free(&m);
    }
    /* a 0-d tensor */
    TA_CHECK_OK(ta_tensor_empty(&e, 0, NULL));
    TA_CHECK_OK(ta_rand(&e, 1));
    TA_CHECK_OK(ta_softmax(&e, &e, 0));
    assert_true(*(float *)e.data == 1.0f);
    ta_tensor_free(&e);
    /* einsum in place is rejected above, but the same view as the input of a
     * one-operand transpose is too: it would read what it writes */
    assert_int_equal(ta_einsum1(&OUT, "ij->ji", &OUT), TA_EINVAL);
    /* a failing call never clears a good thread count */
    int n = ta_get_num_threads();
    assert_int_equal(ta_set_num_threads(0), TA_EINVAL);
    assert_int_equal(ta_get_num_threads(), n);
}

/* A file written before a failing save is kept intact. */
static void test_failed_save_keeps_file(void **state)
{
    (void)state;
    const char *path = ta_test_path("keep.npy");
    TA_CHECK_OK(ta_npy_save(path, &MASK));
    ta_tensor bad = with_dtype(OUT, (ta_dtype)4);
    assert_int_equal(ta_npy_save(path, &bad), TA_EINVAL);
    ta_tensor back = {0};
    TA_CHECK_OK(ta_npy_load(&back, path));
    assert_int_equal(back.ndim, 2);
    assert_int_equal(back.shape[0], LQ);
    assert_int_equal(back.shape[1], LK);
    ta_tensor_free(&back);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_calls),
        cmocka_unit_test(test_extreme_legal_calls),
        cmocka_unit_test(test_failed_save_keeps_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
