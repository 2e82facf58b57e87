/* What the einsum files share: parse (einsum_parse.c) -> plan (einsum_plan.c) ->
 * execute (einsum.c). See einsum.c for the whole algorithm.
 *
 * Planning reads only shapes and strides: it decides every loop nest, every temporary
 * (an operand relaid or pre-reduced) and the GEMM call, so that the scratch of one call
 * (the temporaries and the GEMM's packing buffers) is one arena layout, measured for the
 * size query and carved from one block before any output is written. */
#ifndef TA_OPS_EINSUM_INTERNAL_H
#define TA_OPS_EINSUM_INTERNAL_H

#include "core/workspace.h"
#include "ops/einsum.h"
#include "ops/gemm.h"
#include "tensorattn.h"

#include <stdbool.h>
#include <stdint.h>

#define EI_LETTERS 52
#define EI_MAX_IDX (EI_LETTERS + TA_MAX_DIMS) /* letters, then the dims under "..." */
#define EI_MAX_TERM 64                        /* letters the parser accepts per term */

enum { EI_A = 0, EI_B = 1, EI_C = 2 }; /* the tensors of a loop nest: operands, output */

/* ------------------------------------------------------------------ parse */

typedef struct ei_term {
    int n;                    /* letters in the term */
    int8_t lab[EI_MAX_TERM];  /* their ids: A-Z = 0..25, a-z = 26..51 */
    int ell;                  /* letters before "...", or -1 without one */
    int begin, end;           /* the term's characters in the spec, for messages */
} ei_term;

typedef struct ei_spec {
    const char *text;
    int nops;
    ei_term in[2];
    ei_term out;
    bool explicit_out;
} ei_spec;

/* The spec bound to the operands: every index's extent and its stride in each operand. */
typedef struct ei_bind {
    int nops, E;                        /* operands; dims under "..." after broadcasting */
    bool used[EI_MAX_IDX];              /* the index occurs in some operand */
    int64_t size[EI_MAX_IDX];           /* extent after broadcasting */
    int64_t opsize[2][EI_MAX_IDX];      /* extent in each operand, -1 where absent */
    int64_t stride[2][EI_MAX_IDX];      /* element stride in each operand (0: absent or
                                           extent 1, i.e. broadcast) */
    bool in_out[EI_MAX_IDX];
    int out_ndim;
    int out_id[TA_MAX_DIMS];
    int64_t out_shape[TA_MAX_DIMS];
} ei_bind;

/* How an entry validates its tensors. */
typedef enum ei_check {
    EI_CHECK_ALL,    /* as ta_einsum: data set where non-empty */
    EI_CHECK_LAYOUT, /* shapes and strides only (data may be NULL: a size query) */
    EI_CHECK_RUN     /* as EI_CHECK_ALL but the overlaps (ta_einsum_run: its caller has
                        compared its own tensors; the views it passes are reshapes of
                        them, which ta_tensors_overlap could only compare by byte range) */
} ei_check;

/* Validates the spec and operands (b NULL: one operand), parses and binds: everything
 * but the output. nops: the operands fn takes (1 or 2), or 0 when b decides. */
ta_status ei_prepare(ei_spec *sp, ei_bind *bd, const char *fn, const char *spec,
                     const ta_tensor *a, const ta_tensor *b, int nops, ei_check check);
/* out has the bound result's shape and no stride-0 dim of extent > 1. */
ta_status ei_check_out(const char *fn, const ta_tensor *out, const ei_bind *bd,
                       const char *spec, ei_check check);

/* ------------------------------------------------------------- loop nests */

/* A loop nest over merged dims, outermost first, with element strides in up to three
 * tensors (a, b, c; unused tensors have stride 0). */
typedef struct ei_loop {
    int n;
    int64_t size[EI_MAX_IDX];
    int64_t st[3][EI_MAX_IDX];
} ei_loop;

static inline int64_t ei_abs(int64_t x) { return x < 0 ? -x : x; }

static inline int64_t ei_loop_numel(const ei_loop *L)
{
    int64_t n = 1;
    for (int d = 0; d < L->n; d++) n *= L->size[d];
    return n;
}

/* ------------------------------------------------------------------- plan */

typedef enum ei_kind {
    EI_RUN_NOTHING, /* the result has no elements */
    EI_RUN_ZERO,    /* a summed index has extent 0: the result is all zeros */
    EI_RUN_SUM,     /* one operand: out = sum over S of a, for every element of K */
    EI_RUN_PRODUCT, /* two operands, nothing contracted: out = a * b over L */
    EI_RUN_GEMM     /* one ta_gemm_strided call */
} ei_kind;

/* One operand written into a contiguous temporary (packed, or pre-reduced over the
 * indices only it has): temp = sum over S of src, for every element of K. src is the
 * operand, or its temporary of an earlier step. */
typedef struct ei_step {
    int k;          /* the operand */
    int64_t numel;  /* floats in the temporary */
    ei_loop K, S;   /* K: tensor 0 = src, tensor 2 = temp; S: tensor 0 = src */
    float *temp;    /* carved by ei_plan_layout (NULL while measuring) */
} ei_step;

/* The GEMM: C = A B with A, B the operands named by a_op, b_op (swapped when the plan
 * computes C^T = B^T A^T). */
typedef struct ei_gemm {
    int a_op, b_op;
    int64_t rsc, csc, rsa, csa, rsb, csb, M, N, K;
    ta_gemm_batch batch;
    float *pack;    /* carved by ei_plan_layout (NULL while measuring) */
} ei_gemm;

#define EI_MAX_STEPS 4 /* each operand: pre-reduced, then packed */

/* One call, decided from shapes and strides alone. */
typedef struct ei_plan {
    /* the operands and output in index space (strides follow the steps planned) */
    int64_t size[EI_MAX_IDX];
    int64_t st[3][EI_MAX_IDX];     /* strides in a, b, out */
    bool has[3][EI_MAX_IDX];       /* the index moves this tensor (extent > 1 there) */
    int nact;
    int act[EI_MAX_IDX];           /* indices of extent > 1, by id */

    ei_kind kind;
    int nsteps;
    ei_step step[EI_MAX_STEPS];    /* run in order before the final loop or GEMM */
    ei_loop L, S;                  /* EI_RUN_SUM: L kept, S summed; EI_RUN_PRODUCT: L */
    ei_gemm gemm;                  /* EI_RUN_GEMM */
    ta_einsum_plan_info info;
} ei_plan;

/* Plans one call on the bound operands into out's shape and strides (only out's
 * layout is read). Fails only on an internal inconsistency (TA_EINTERNAL). */
ta_status ei_plan_make(ei_plan *p, const ei_bind *bd, const ta_tensor *out);
/* Lays out (a measuring arena) or carves the plan's temporaries and GEMM packing. */
void ei_plan_layout(ta_arena *a, ei_plan *p);

#endif
