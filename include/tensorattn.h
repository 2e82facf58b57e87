/* tensorattn.h -- tensor-based self-attention in C11.
 *
 * A ten-line tour: scaled dot-product attention over [batch, heads, seq, head_dim].
 *
 *     int64_t shape[4] = {2, 8, 128, 64};
 *     ta_tensor q, k, v, o;
 *     ta_tensor_empty(&q, 4, shape); ta_randn(&q, 1);      // seeded N(0,1)
 *     ta_tensor_empty(&k, 4, shape); ta_randn(&k, 2);
 *     ta_tensor_empty(&v, 4, shape); ta_randn(&v, 3);
 *     ta_tensor_empty(&o, 4, shape);
 *     ta_tensor scores = {0};                              // allocated by einsum
 *     if (ta_einsum("bhid,bhjd->bhij", &scores, &q, &k) != TA_OK)
 *         fprintf(stderr, "%s\n", ta_last_error());
 *     ...; ta_tensor_free(&scores); ta_tensor_free(&q); ...
 *
 * Conventions
 * - Shapes are listed outermost first, as in PyTorch: Q is [B, H, Lq, D].
 * - A ta_tensor is a small value struct: data pointer, rank, shape and element
 *   strides. It either owns its buffer (made by ta_tensor_empty & co; release with
 *   ta_tensor_free) or is a view of someone else's (from_buffer, permute, slice...;
 *   ta_tensor_free on a view does nothing but clear it). Views never copy.
 * - Every fallible function returns ta_status (TA_OK == 0). On failure
 *   ta_last_error() returns a thread-local sentence naming the argument and the
 *   shapes, and the outputs are left untouched. The library never prints, aborts
 *   or exits.
 * - Arguments are ordered outputs, inputs, then options.
 * - Results are bitwise identical for any thread count.
 */
#ifndef TENSORATTN_H
#define TENSORATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TA_VERSION_MAJOR 0
#define TA_VERSION_MINOR 1
#define TA_VERSION_PATCH 0
#define TA_VERSION_STRING "0.1.0"

/* ---------------------------------------------------------------- status */

typedef enum ta_status {
    TA_OK = 0,
    TA_EINVAL = 1,       /* an argument is invalid (NULL, out of range, bad spec) */
    TA_ESHAPE = 2,       /* shapes or strides do not fit together */
    TA_ENOMEM = 3,       /* an allocation failed */
    TA_EIO = 4,          /* a file could not be opened, read or written */
    TA_EFORMAT = 5,      /* a file's contents are malformed */
    TA_EUNSUPPORTED = 6, /* valid, but not supported (dtype, feature) */
    TA_EINTERNAL = 7     /* a bug in tensorattn: please report it */
} ta_status;

/* The message of the last failure on this thread ("" if none). Valid until the next
 * failing call on the same thread. */
const char *ta_last_error(void);
/* A short constant name for a status code: "TA_EINVAL". */
const char *ta_status_name(ta_status status);
/* "0.1.0" */
const char *ta_version(void);

/* ------------------------------------------------------------ allocation */

/* One allocation hook for everything the library allocates. alloc must return memory
 * aligned to at least `alignment` bytes (a power of two, >= 64), or NULL. Passing
 * NULL for both restores the default (aligned_alloc, 2 MiB-aligned and
 * MADV_HUGEPAGE-advised from 2 MiB up). Not thread-safe: set it before any other call. */
typedef void *(*ta_alloc_fn)(size_t bytes, size_t alignment, void *user);
typedef void (*ta_free_fn)(void *ptr, void *user);
void ta_set_allocator(ta_alloc_fn alloc, ta_free_fn release, void *user);

/* ---------------------------------------------------------------- tensors */

#define TA_MAX_DIMS 8

typedef enum ta_dtype { TA_F32 = 0, TA_F64 = 1, TA_F16 = 2, TA_BF16 = 3 } ta_dtype;

typedef struct ta_tensor {
    void *data;                    /* element [0, ..., 0] */
    ta_dtype dtype;                /* TA_F32 for every operation today */
    int ndim;                      /* 0 (a scalar) .. TA_MAX_DIMS */
    int64_t shape[TA_MAX_DIMS];
    int64_t stride[TA_MAX_DIMS];   /* in elements, may be 0 (broadcast) or negative */
    void *owned;                   /* allocation to release, NULL for a view */
} ta_tensor;

/* Allocating constructors: a new contiguous float32 tensor of `shape` (ndim values,
 * each >= 0) owned by *t. empty leaves the values unset. */
ta_status ta_tensor_empty(ta_tensor *t, int ndim, const int64_t *shape);
ta_status ta_tensor_zeros(ta_tensor *t, int ndim, const int64_t *shape);
ta_status ta_tensor_ones(ta_tensor *t, int ndim, const int64_t *shape);
ta_status ta_tensor_full(ta_tensor *t, int ndim, const int64_t *shape, float value);
/* A view of a caller buffer of float32. strides == NULL means C-contiguous. The
 * caller keeps ownership of data and must keep it alive while the view is used. */
ta_status ta_tensor_from_buffer(ta_tensor *t, float *data, int ndim, const int64_t *shape,
                                const int64_t *strides);
/* Releases an owning tensor's buffer (views: nothing) and zeroes *t. NULL is fine. */
void ta_tensor_free(ta_tensor *t);

int64_t ta_tensor_numel(const ta_tensor *t);
int ta_tensor_is_contiguous(const ta_tensor *t);
/* Pointer to element idx[0..ndim-1] (no bounds check: an accessor for tests/tools). */
float *ta_tensor_at(const ta_tensor *t, const int64_t *idx);

/* Views (no copy): *view may be the same struct as *t. */
/* reshape: -1 in one place is inferred. Fails with TA_ESHAPE if the strides of t do
 * not allow a view; make it contiguous first. */
ta_status ta_tensor_reshape(ta_tensor *view, const ta_tensor *t, int ndim, const int64_t *shape);
/* permute: view dim i is t's dim perm[i]. */
ta_status ta_tensor_permute(ta_tensor *view, const ta_tensor *t, const int *perm);
ta_status ta_tensor_transpose(ta_tensor *view, const ta_tensor *t, int dim0, int dim1);
/* slice along dim: start:stop:step, Python rules for negative start/stop and
 * clamping; step >= 1. */
ta_status ta_tensor_slice(ta_tensor *view, const ta_tensor *t, int dim, int64_t start,
                          int64_t stop, int64_t step);
/* contiguous copy: *out becomes a new owning C-contiguous tensor with t's values. */
ta_status ta_tensor_contiguous(ta_tensor *out, const ta_tensor *t);
/* copy values between tensors of equal shape (any strides; must not overlap). */
ta_status ta_tensor_copy(ta_tensor *dst, const ta_tensor *src);
/* fill every element with value. */
ta_status ta_tensor_fill(ta_tensor *t, float value);
/* torch.tril_/triu_ on the last two dims (rank >= 2): tril keeps j <= i + diagonal,
 * triu keeps j >= i + diagonal; the rest becomes 0. In place. */
ta_status ta_tensor_tril(ta_tensor *t, int64_t diagonal);
ta_status ta_tensor_triu(ta_tensor *t, int64_t diagonal);

/* ---------------------------------------------------------------- random */

/* Counter-based (Philox-4x32-10): element n in row-major order of t's shape gets the
 * n-th number of the stream `seed`, so the values do not depend on strides, threads
 * or machine. */
ta_status ta_randn(ta_tensor *t, uint64_t seed);           /* N(0, 1) */
ta_status ta_rand(ta_tensor *t, uint64_t seed);            /* U[0, 1) */
ta_status ta_rand_uniform(ta_tensor *t, float low, float high, uint64_t seed); /* U[low, high) */
/* n integers uniform in [low, high) (high > low). */
ta_status ta_randint(int64_t *out, size_t n, int64_t low, int64_t high, uint64_t seed);

/* --------------------------------------------------------------- threads */

/* Threads used by every operation (default: all cores). n >= 1. */
ta_status ta_set_num_threads(int n);
int ta_get_num_threads(void);

/* ------------------------------------------------------------------ CPU */

typedef enum ta_isa { TA_ISA_SCALAR = 0, TA_ISA_AVX2 = 1, TA_ISA_AVX512 = 2 } ta_isa;
/* The kernel set in use: the best the CPU supports, or TA_ARCH=scalar|avx2|avx512 from
 * the environment when the CPU supports it (an unsupported request falls back to the
 * best supported). Chosen once, on first use. */
ta_isa ta_active_isa(void);
const char *ta_isa_name(ta_isa isa);
/* Whether this CPU (and OS) can run isa. */
int ta_cpu_supports(ta_isa isa);

/* ------------------------------------------------------------------- GEMM */

/* C = alpha * A B + beta * C for float32 matrices with arbitrary element strides:
 * A[i,k] = A[i*rsa + k*csa], B[k,j] = B[k*rsb + j*csb], C[i,j] = C[i*rsc + j*csc]
 * (op(A) = A^T is A with rsa and csa swapped). M, N, K >= 0. beta == 0 means C is
 * not read (NaN/Inf in C do not propagate). C must not overlap A or B, and distinct
 * (i,j) must address distinct elements of C. */
ta_status ta_sgemm(float *C, int64_t rsc, int64_t csc,
                   const float *A, int64_t rsa, int64_t csa,
                   const float *B, int64_t rsb, int64_t csb,
                   int64_t M, int64_t N, int64_t K, float alpha, float beta);
/* The same over `batch` independent problems; problem p uses A + p*bsa, B + p*bsb,
 * C + p*bsc (bsa or bsb may be 0 to share an operand). */
ta_status ta_sgemm_batched(float *C, int64_t bsc, int64_t rsc, int64_t csc,
                           const float *A, int64_t bsa, int64_t rsa, int64_t csa,
                           const float *B, int64_t bsb, int64_t rsb, int64_t csb,
                           int64_t batch, int64_t M, int64_t N, int64_t K,
                           float alpha, float beta);

/* ----------------------------------------------------------------- einsum */

/* torch.einsum for one or two float32 operands.
 *   spec: "bhid,bhjd->bhij", implicit output ("ij,jk" -> "ik": the indices that appear
 *   once, sorted), "..." ellipsis (broadcast), repeated indices within an operand (a
 *   diagonal: "ii->i"), indices absent from the output are summed, "->" alone gives a
 *   scalar (out has ndim 0). Letters a-z and A-Z.
 *   out: either a zeroed struct ({0}: einsum allocates it, and you ta_tensor_free it) or
 *   an existing float32 tensor of exactly the result shape (any strides, not
 *   overlapping the inputs), which is overwritten.
 * A two-operand contraction runs as one batched GEMM on strided views whenever the
 * strides allow (no copy of the inputs), otherwise it packs. */
ta_status ta_einsum(const char *spec, ta_tensor *out, const ta_tensor *a, const ta_tensor *b);
/* The one-operand form: "ij->ji", "ii->i", "ij->", "i...->...". */
ta_status ta_einsum1(const char *spec, ta_tensor *out, const ta_tensor *a);
/* The result shape of spec for these operands (b NULL for one operand), without
 * computing anything. */
ta_status ta_einsum_shape(const char *spec, const ta_tensor *a, const ta_tensor *b,
                          int *ndim, int64_t shape[TA_MAX_DIMS]);

/* ----------------------------------------------------------- measurement */

/* Measures this machine's float32 FMA peak in GFLOP/s with the given ISA's widest FMA
 * (independent chains, no memory traffic) on `threads` threads (0 = the library's
 * thread count), running for about `seconds`. Used by `tensorattn bench`. */
ta_status ta_measure_fma_peak(double *gflops, ta_isa isa, int threads, double seconds);

#ifdef __cplusplus
}
#endif
#endif /* TENSORATTN_H */
