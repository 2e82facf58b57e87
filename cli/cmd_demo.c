/* tensorattn demo: the first seed's example, end to end.
 *   Q, K, V = randn(32, 8, 512, 64); mask = triu(ones(512, 512), diagonal=1).bool()
 *   output, weights = scaled_dot_product_attention(Q, K, V, mask)  */
/* clock_gettime: -std=c11 declares them only with this (gcc's -fopenmp implies
 * _REENTRANT, hence an older POSIX level; clang's does not) */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <time.h>

static const char help[] =
    "usage: tensorattn demo [--batch 32 --heads 8 --seq 512 --dim 64] [--no-causal]\n"
    "                       [--threads N]\n"
    "\n"
    "Runs the seed example: seeded random Q, K, V of shape [batch, heads, seq, dim],\n"
    "the seed's causal mask triu(ones(seq, seq), diagonal=1) in block mode, and\n"
    "scaled dot-product attention returning the output and the attention weights;\n"
    "prints the shapes, checks that weight[0,0,0,5] is 0 and weight[0,0,5,0] is not,\n"
    "then runs the same attention on the fused path and prints both side by side\n"
    "(time, GFLOP/s of useful FLOPs, max difference).\n";

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { O_B, O_H, O_L, O_D, O_NOCAUSAL, O_THREADS };

int cmd_demo(int argc, char **argv)
{
    cli_opt opts[] = {[O_B] = {.name = "--batch", .takes_value = true},
                      [O_H] = {.name = "--heads", .takes_value = true},
                      [O_L] = {.name = "--seq", .takes_value = true},
                      [O_D] = {.name = "--dim", .takes_value = true},
                      [O_NOCAUSAL] = {.name = "--no-causal"},
                      [O_THREADS] = {.name = "--threads", .takes_value = true},
                      {0}};
    const char *pos[1];
    int npos;
    int rc = cli_parse(argc, argv, 2, opts, pos, 0, &npos, help);
    if (rc) return rc == CLI_HELP_SHOWN ? CLI_OK : rc;
    long long dims[4] = {32, 8, 512, 64};
    for (int i = O_B; i <= O_D; i++)
        if (opts[i].given && !cli_int(opts[i].name, opts[i].value, 1, 1 << 20, &dims[i]))
            return CLI_USAGE;
    if (!cli_threads(opts)) return CLI_USAGE;
    bool causal = !opts[O_NOCAUSAL].given;
    int64_t B = dims[0], H = dims[1], L = dims[2], D = dims[3];
    int64_t shape[4] = {B, H, L, D}, wshape[4] = {B, H, L, L}, mshape[2] = {L, L};
    ta_tensor q = {0}, k = {0}, v = {0}, o = {0}, o2 = {0}, w = {0}, mask = {0};
    ta_status st;
    rc = CLI_FAIL;
    if ((st = ta_tensor_empty(&q, 4, shape)) || (st = ta_tensor_empty(&k, 4, shape)) ||
        (st = ta_tensor_empty(&v, 4, shape)) || (st = ta_tensor_empty(&o, 4, shape)) ||
        (st = ta_tensor_empty(&o2, 4, shape)) ||
        (st = ta_tensor_empty(&w, 4, wshape))) {
        cli_fail(st, "demo");
        goto done;
    }
    ta_randn(&q, 1);
    ta_randn(&k, 2);
    ta_randn(&v, 3);
    ta_sdpa_opts so = {.weights = &w, .path = TA_SDPA_REFERENCE};
    if (causal) {
        /* the seed's mask: True above the diagonal = blocked */
        if ((st = ta_tensor_ones(&mask, 2, mshape)) || (st = ta_tensor_triu(&mask, 1))) {
            cli_fail(st, "demo");
            goto done;
        }
        so.mask = &mask;
        so.mask_mode = TA_MASK_BLOCK;
    }
    printf("tensorattn demo: Q, K, V = randn(%lld, %lld, %lld, %lld)%s, %s, %d threads\n",
           (long long)B, (long long)H, (long long)L, (long long)D,
           causal ? ", causal mask triu(ones(L, L), 1)" : "", ta_isa_name(ta_active_isa()),
           ta_get_num_threads());
    double t0 = now();
    if ((st = ta_sdpa(&o, &q, &k, &v, &so))) {
        cli_fail(st, "demo");
        goto done;
    }
    double t_ref = now() - t0;
    /* The same attention on the fused path (no weights: it never forms them). Its first
     * call pays for fresh pages and thread start-up; the warm figure is the best of 3. */
    ta_sdpa_opts fo = {.path = TA_SDPA_FUSED};
    /* the seed's triu block mask is exactly the top-left causal limit, which lets the
     * fused path skip the hidden key tiles instead of reading a mask tensor */
    if (causal) fo.causal = TA_CAUSAL_TOP_LEFT;
    double t_cold = 0, t_warm = 1e30;
    for (int r = 0; r < 4; r++) {
        t0 = now();
        if ((st = ta_sdpa(&o2, &q, &k, &v, &fo))) {
            cli_fail(st, "demo (fused path)");
            goto done;
        }
        double dt = now() - t0;
        if (r == 0) t_cold = dt;
        else if (dt < t_warm) t_warm = dt;
    }
    double maxdiff = 0;
    const float *a = o.data, *b = o2.data;
    for (int64_t i = 0; i < ta_tensor_numel(&o); i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= maxdiff)) maxdiff = d; /* NaN shows as NaN */
    }
    double pairs = causal ? (double)L * (double)(L + 1) / 2.0 : (double)L * (double)L;
    double flops = 4.0 * (double)B * (double)H * (double)D * pairs;
    printf("Output shape: ");
    cli_print_shape(&o);
    printf("\nAttention weights shape: ");
    cli_print_shape(&w);
    printf("\n");
    if (L > 5) {
        float w05 = *ta_tensor_at(&w, (int64_t[]){0, 0, 0, 5});
        float w50 = *ta_tensor_at(&w, (int64_t[]){0, 0, 5, 0});
        printf("weights[0,0,0,5] = %g (%s)\n", (double)w05,
               causal ? (w05 == 0.0f ? "0: the future is masked" : "NOT 0: mask failed")
                      : "no mask");
        printf("weights[0,0,5,0] = %g (%s)\n", (double)w50, w50 != 0.0f ? "non-zero" : "zero");
        if (causal && (w05 != 0.0f || w50 == 0.0f)) {
            cli_error(CLI_FAIL, "demo: the causal mask check failed");
            goto done;
        }
    }
    printf("%-40s %9s %12s\n", "path", "time", "GFLOP/s");
    printf("%-40s %8.4fs %12.1f\n", "reference (the seed's algorithm, weights)", t_ref,
           flops / t_ref * 1e-9);
    printf("%-40s %8.4fs %12.1f\n", causal ? "fused (FlashAttention-2, causal), cold"
                                            : "fused (FlashAttention-2), cold",
           t_cold, flops / t_cold * 1e-9);
    printf("%-40s %8.4fs %12.1f\n", causal ? "fused (FlashAttention-2, causal), warm"
                                            : "fused (FlashAttention-2), warm",
           t_warm, flops / t_warm * 1e-9);
    printf("max |reference - fused| = %.3g; fused is %.1fx faster (warm)\n", maxdiff,
           t_ref / t_warm);
    printf("(GFLOP/s count useful FLOPs: 4*B*H*D per %squery-key pair)\n",
           causal ? "unmasked " : "");
    rc = CLI_OK;
done:
    ta_tensor_free(&q);
    ta_tensor_free(&k);
    ta_tensor_free(&v);
    ta_tensor_free(&o);
    ta_tensor_free(&o2);
    ta_tensor_free(&w);
    ta_tensor_free(&mask);
    return rc;
}
