/* tensorattn.h -- tensor-based self-attention in C11.
 *
 * A ten-line tour: causal scaled dot-product attention over [batch, heads, seq, head_dim].
 *
 *     int64_t shape[4] = {2, 8, 128, 64};
 *     ta_tensor q, k, v, o;
 *     ta_tensor_empty(&q, 4, shape); ta_randn(&q, 1);      // seeded N(0,1)
 *     ta_tensor_empty(&k, 4, shape); ta_randn(&k, 2);
 *     ta_tensor_empty(&v, 4, shape); ta_randn(&v, 3);
 *     ta_tensor_empty(&o, 4, shape);
 *     ta_sdpa_opts opts = {.causal = TA_CAUSAL_TOP_LEFT};  // {0}: defaults
 *     if (ta_sdpa(&o, &q, &k, &v, &opts) != TA_OK)
 *         fprintf(stderr, "%s\n", ta_last_error());
 *     ta_tensor_free(&q); ta_tensor_free(&k); ta_tensor_free(&v); ta_tensor_free(&o);
 *
 * The pieces, in the order of this header: status and errors, allocation and caller
 * workspaces, tensors and views, random numbers, threads, CPU dispatch, GEMM, einsum
 * (ta_einsum(&scores, "bhid,bhjd->bhij", &q, &k) runs on strided views without copies),
 * softmax and masks, ta_sdpa and ta_sdpa_backward, .npy and .safetensors files,
 * attention layers (the seed's SelfAttention and nn.MultiheadAttention, forward and
 * backward), and optimisers. docs/architecture.md shows how the library is built.
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
 * - An output is written element by element, so distinct indices need distinct
 *   addresses: an output tensor whose strides put two of its elements at one address is
 *   TA_EINVAL, whether by a stride 0 over an extent > 1 (an expanded tensor: the case
 *   each function below names) or by strides that overlap otherwise (a batch stride
 *   smaller than a batch's span; found by a search of bounded size, which settles every
 *   layout of views, slices and permutations and all but rare wide interleavings, which
 *   are taken as given). An empty output has no element and is taken. ta_sgemm's raw
 *   pointers: its own rule below.
 * - Results are bitwise identical for any thread count.
 * - Scratch memory: operations that need it take one block per call before writing any
 *   output; pass your own (ta_workspace, sized by the op's _workspace_size query) and
 *   the call allocates nothing.
 *
 * Threads and concurrency
 * - Every operation runs its own OpenMP parallel regions on ta_get_num_threads()
 *   threads (default: all cores).
 * - Calls may run at the same time from several threads when their outputs (and
 *   workspaces) are distinct: each call's scratch is its own, ta_last_error() is per
 *   thread. Not concurrently: two calls on the same ta_attention layer or ta_optimizer,
 *   two calls sharing one ta_workspace, and ta_set_allocator / ta_set_num_threads with
 *   anything else.
 * - Called from inside your own OpenMP parallel region, the library's regions are
 *   nested: under OpenMP's default (one active level) each call then runs on its calling
 *   thread alone, which suits one call per thread; the results are the same bits.
 */
#ifndef TENSORATTN_H
#define TENSORATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is compiled with hidden visibility (CMakeLists.txt): what this header
 * declares is what its shared library exports, nothing internal. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
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
/* Records a printf-style message as this thread's ta_last_error() and returns code: for
 * layers built on the library (the MPI layer, tensorattn_mpi.h) whose errors must read
 * like the library's own. */
ta_status ta_set_error(ta_status code, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* A short constant name for a status code: "TA_EINVAL". */
const char *ta_status_name(ta_status status);
/* "0.1.0" */
const char *ta_version(void);

/* ------------------------------------------------------------ allocation */

/* One allocation hook for everything the library allocates. alloc must return memory
 * aligned to at least `alignment` bytes (a power of two, >= 64), or NULL. Passing
 * NULL for both restores the default (aligned_alloc, 2 MiB-aligned and
 * MADV_HUGEPAGE-advised from 2 MiB up). Not thread-safe: call it while no other
 * tensorattn call runs, and free what was made under one hook (tensors, layers,
 * optimisers, .npy integer arrays, safetensors handles) before switching to another.
 * The scratch block the library keeps between calls is released through the old hook
 * before the switch. */
typedef void *(*ta_alloc_fn)(size_t bytes, size_t alignment, void *user);
typedef void (*ta_free_fn)(void *ptr, void *user);
void ta_set_allocator(ta_alloc_fn alloc, ta_free_fn release, void *user);

/* A caller's scratch memory for one operation. Operations that need scratch
 * (ta_sdpa, ta_sdpa_backward, einsum, the layers) have a _workspace_size query; pass a
 * buffer of at least that many bytes (any alignment) in their options and the call makes
 * no allocation at all: a decoding loop sizes it once and reuses it for every token.
 * The size depends on the shapes, the options and the library's thread count at the
 * time of the query (ta_set_num_threads): query again after changing either; a buffer
 * that is too small is TA_EINVAL, before anything is written. A zeroed ta_workspace
 * ({0}) means "allocate for me": the library then takes one block per call before
 * writing any output, and keeps blocks up to 64 MiB between calls so that steady calls
 * reuse memory already touched. A workspace may be reused by consecutive calls but not
 * shared by calls running at the same time, and must not share memory with the call's
 * tensors (TA_EINVAL "the workspace overlaps ..." from ta_sdpa, ta_sdpa_backward,
 * ta_sdpa_kvcache, ta_einsum_ext and the layers). */
typedef struct ta_workspace {
    void *data;  /* NULL: no caller workspace */
    size_t size; /* bytes */
} ta_workspace;

/* ---------------------------------------------------------------- tensors */

#define TA_MAX_DIMS 8

typedef enum ta_dtype { TA_F32 = 0, TA_F64 = 1, TA_F16 = 2, TA_BF16 = 3 } ta_dtype;

typedef struct ta_tensor {
    void *data;                    /* element [0, ..., 0] */
    ta_dtype dtype;                /* element type (see "dtypes" below) */
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
/* dtypes. TA_F32 is what every operation computes in. TA_F16 (IEEE binary16) and TA_BF16
 * (bfloat16: the top 16 bits of a float32) are storage types: ta_sdpa, ta_sdpa_backward,
 * ta_sdpa_kvcache and the KV cache take them for Q, K, V, O (and the gradients), convert
 * to float32 in registers and accumulate in float32; einsum, GEMM, softmax, masks and the
 * layers take float32 only (TA_EUNSUPPORTED otherwise), as do the accessors ta_tensor_at*
 * and the mask tensors. TA_F64 exists for files only. Conversions to a narrower type
 * round to nearest, ties to even (NaN stays NaN, overflow gives +-inf); widening is
 * exact (subnormals included). */
/* Bytes per element (0 for an unknown dtype) and a short name ("f32", "f16", "bf16",
 * "f64"; "unknown" out of range). */
size_t ta_dtype_size(ta_dtype dtype);
const char *ta_dtype_name(ta_dtype dtype);
/* n values from src (of type from) to dst (of type to), converted as above; any pair of
 * TA_F32, TA_F16, TA_BF16, TA_F64. dst and src must not overlap unless equal with the
 * same type. */
ta_status ta_convert(void *dst, ta_dtype to, const void *src, ta_dtype from, size_t n);
/* ta_tensor_empty / ta_tensor_zeros of another dtype. */
ta_status ta_tensor_empty_dtype(ta_tensor *t, ta_dtype dtype, int ndim, const int64_t *shape);
ta_status ta_tensor_zeros_dtype(ta_tensor *t, ta_dtype dtype, int ndim, const int64_t *shape);
/* ta_tensor_from_buffer for a caller buffer of any dtype (strides in elements). */
ta_status ta_tensor_from_buffer_dtype(ta_tensor *t, void *data, ta_dtype dtype, int ndim,
                                      const int64_t *shape, const int64_t *strides);
/* Releases an owning tensor's buffer (views: nothing) and zeroes *t. NULL is fine. */
void ta_tensor_free(ta_tensor *t);

int64_t ta_tensor_numel(const ta_tensor *t);
int ta_tensor_is_contiguous(const ta_tensor *t);
/* Pointer to element idx[0..ndim-1] of a float32 tensor (no bounds check: an accessor
 * for tests and tools): writable through a tensor you may write, read-only through a
 * const one. */
float *ta_tensor_at(ta_tensor *t, const int64_t *idx);
const float *ta_tensor_at_const(const ta_tensor *t, const int64_t *idx);

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
/* contiguous copy: *out becomes a new owning C-contiguous tensor with t's values (and
 * dtype). */
ta_status ta_tensor_contiguous(ta_tensor *out, const ta_tensor *t);
/* copy values between tensors of equal shape (any strides; must not overlap), converting
 * when the dtypes differ (any of f32, f16, bf16, f64; rounding as in ta_convert).
 * TA_EINVAL when dst has a stride 0 over an extent > 1 or overlaps src (as ta_sdpa
 * defines it: element by element for views of the same strides, within a bounded search,
 * else by byte range; the very same view is a no-op). */
ta_status ta_tensor_copy(ta_tensor *dst, const ta_tensor *src);
/* fill every element with value (rounded to t's dtype). */
ta_status ta_tensor_fill(ta_tensor *t, float value);
/* torch.tril_/triu_ on the last two dims (rank >= 2): tril keeps j <= i + diagonal,
 * triu keeps j >= i + diagonal; the rest becomes 0. In place (TA_EINVAL for a t with a
 * stride 0 over an extent > 1, as torch refuses in-place ops on expanded tensors). */
ta_status ta_tensor_tril(ta_tensor *t, int64_t diagonal);
ta_status ta_tensor_triu(ta_tensor *t, int64_t diagonal);

/* ---------------------------------------------------------------- random */

/* Counter-based (Philox-4x32-10): element n in row-major order of t's shape gets the
 * n-th number of the stream `seed`, so the values do not depend on strides, threads
 * or machine. Into float16 / bfloat16 the float32 draw is rounded to nearest-even; a
 * uniform draw that rounds to high (or overflows) takes the type's next value below, so
 * the ranges stay half-open in every dtype. Any finite low < high is taken, even a range
 * wider than FLT_MAX. TA_EINVAL for a t with a stride 0 over an extent > 1 (its aliased
 * elements would keep whichever draw came last). */
ta_status ta_randn(ta_tensor *t, uint64_t seed);           /* N(0, 1) */
ta_status ta_rand(ta_tensor *t, uint64_t seed);            /* U[0, 1) */
ta_status ta_rand_uniform(ta_tensor *t, float low, float high, uint64_t seed); /* U[low, high) */
/* n integers uniform in [low, high) (high > low). */
ta_status ta_randint(int64_t *out, size_t n, int64_t low, int64_t high, uint64_t seed);

/* --------------------------------------------------------------- threads */

/* Threads used by every operation (default: all cores). 1 <= n <= 4096 (else TA_EINVAL). */
ta_status ta_set_num_threads(int n);
int ta_get_num_threads(void);

/* ------------------------------------------------------------------ CPU */

/* The kernel sets, 0 .. TA_ISA_COUNT-1 (iterate over them with ta_cpu_supports). An ISA
 * that does not exist on the target the library was built for (AVX2 on aarch64) is
 * never supported. */
typedef enum ta_isa {
    TA_ISA_SCALAR = 0,
    TA_ISA_AVX2 = 1,
    TA_ISA_AVX512 = 2,
    TA_ISA_AVX512BF16 = 3, /* AVX-512 with its bfloat16 dot product (avx512_bf16) */
    TA_ISA_COUNT /* the number of ISAs: not an ISA */
} ta_isa;
/* The kernel set in use: the best the CPU supports (on Intel avx512 rather than
 * avx512bf16, whose bfloat16 dot product runs slower there than avx512's widening FMAs),
 * or TA_ARCH=scalar|avx2|avx512|avx512bf16 from the environment when the CPU supports it
 * (an unsupported request falls back to the best supported). Chosen once, on first use. */
ta_isa ta_active_isa(void);
/* "scalar", "avx2", "avx512", "avx512bf16" (the names TA_ARCH takes); "unknown" out of
 * range. */
const char *ta_isa_name(ta_isa isa);
/* Whether this CPU (and OS) can run isa. */
int ta_cpu_supports(ta_isa isa);

/* ------------------------------------------------------------------- GEMM */

/* C = alpha * A B + beta * C for float32 matrices with arbitrary element strides:
 * A[i,k] = A[i*rsa + k*csa], B[k,j] = B[k*rsb + j*csb], C[i,j] = C[i*rsc + j*csc]
 * (op(A) = A^T is A with rsa and csa swapped). M, N, K >= 0. beta == 0 means C is
 * not read (NaN/Inf in C do not propagate). C must not overlap A or B, and distinct
 * (i,j) must address distinct elements of C. The packing buffers come from the
 * library's scratch block (kept between calls), taken before C is written.
 * Errors: TA_EINVAL (a negative size, NULL with a non-empty operand), TA_ESHAPE (strides
 * that overflow the index range, a zero stride over C's extent > 1), TA_ENOMEM; C is
 * untouched on any error. */
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
 *   out: an existing float32 tensor of exactly the result shape (any strides, not
 *   overlapping the inputs), which is overwritten. ta_einsum_alloc makes it instead.
 * A two-operand contraction runs as one batched GEMM on strided views whenever the
 * strides allow (no copy of the inputs), otherwise it packs. Size-1 dims broadcast
 * against the other operand, as in torch. With nothing contracted (outer and Hadamard
 * products) it runs a strided product loop; indices summed in one operand only are
 * summed first; one-operand sums accumulate in double and round once.
 * Errors: TA_EINVAL (NULL argument, bad spec: invalid character, output index not in
 * any operand or repeated, more than one "..." or "->", wrong operand count for the
 * function; out with a stride-0 dim of size > 1), TA_ESHAPE (rank or size mismatch,
 * out of the wrong shape), TA_EUNSUPPORTED (dtype not float32, result above
 * TA_MAX_DIMS dims), TA_ENOMEM (the scratch below). On error out is untouched.
 * Scratch: packing an operand, reducing one first and the GEMM's packing buffers take one
 * block per call, acquired before anything is written (the library's block here; see
 * ta_einsum_ext to pass your own). */
ta_status ta_einsum(ta_tensor *out, const char *spec, const ta_tensor *a, const ta_tensor *b);
/* The one-operand form: "ij->ji", "ii->i", "ij->", "i...->...". */
ta_status ta_einsum1(ta_tensor *out, const char *spec, const ta_tensor *a);
/* The allocating variants: *out becomes a new owning, C-contiguous tensor of the
 * result's shape (release it with ta_tensor_free); whatever *out held is not read. */
ta_status ta_einsum_alloc(ta_tensor *out, const char *spec, const ta_tensor *a,
                          const ta_tensor *b);
ta_status ta_einsum1_alloc(ta_tensor *out, const char *spec, const ta_tensor *a);
/* ta_einsum (b set) or ta_einsum1 (b NULL) with the scratch in a caller's workspace.
 * ws: NULL or zeroed ({0}): the library's block, as ta_einsum; else a buffer of at
 * least ta_einsum_workspace_size bytes (any alignment), and the call makes no
 * allocation at all. Errors as ta_einsum, plus TA_EINVAL naming ta_einsum_ext when
 * ws->data is set and ws->size is too small (out untouched). */
ta_status ta_einsum_ext(ta_tensor *out, const char *spec, const ta_tensor *a,
                        const ta_tensor *b, const ta_workspace *ws);
/* *bytes = the workspace ta_einsum_ext needs for these arguments (b NULL for one
 * operand); 0 when the call needs no scratch (a product or one-operand loop, a result
 * that is empty or all zeros). It depends only on the shapes, the strides, the spec and
 * the thread count (ta_set_num_threads), never on the data. Validates exactly as
 * ta_einsum_ext does (the same errors); TA_ENOMEM when the size would not fit a size_t. */
ta_status ta_einsum_workspace_size(size_t *bytes, const ta_tensor *out, const char *spec,
                                   const ta_tensor *a, const ta_tensor *b);
/* The result shape of spec for these operands (b NULL for one operand), without
 * computing anything. */
ta_status ta_einsum_shape(int *ndim, int64_t shape[TA_MAX_DIMS], const char *spec,
                          const ta_tensor *a, const ta_tensor *b);

/* -------------------------------------------------- softmax and masks */

/* Causal alignment and mask conventions (used by the mask builders and ta_sdpa). */
typedef enum ta_causal {
    TA_CAUSAL_NONE = 0,
    TA_CAUSAL_TOP_LEFT = 1,     /* query i sees keys j <= i (PyTorch is_causal) */
    TA_CAUSAL_BOTTOM_RIGHT = 2  /* query i sees keys j <= i + Lk - Lq (KV-cache decoding) */
} ta_causal;

typedef enum ta_mask_mode {
    TA_MASK_KEEP = 0,     /* nonzero = may attend */
    TA_MASK_BLOCK = 1,    /* nonzero = masked (the first seed's convention) */
    TA_MASK_ADDITIVE = 2  /* the float is added to the scaled scores */
} ta_mask_mode;

/* Softmax of x along dim into out: out = exp(x - max) / sum exp(x - max) per row.
 *   x, out: the same shape, any strides; out may be x itself (in place) but must not
 *   otherwise overlap it. dim may be negative (counts from the end); a 0-d tensor is a
 *   row of one element.
 * Accuracy: max-subtracted, expf per entry, the row sum accumulated in double, so a
 * row of 100k entries is as accurate as a short one (a few float ulps per entry).
 * Special rows (each row is decided alone):
 *   every entry -inf  -> all 0 (not NaN: a query with nothing to attend; PyTorch gives NaN);
 *   a NaN anywhere    -> all NaN (NaN is never hidden);
 *   a +inf, no NaN    -> all NaN (inf - inf, as PyTorch: the row overflowed).
 * Errors: TA_EINVAL (NULL, dim out of range, overlap), TA_ESHAPE (shapes differ). */
ta_status ta_softmax(ta_tensor *out, const ta_tensor *x, int dim);

/* torch.Tensor.masked_fill_: t[idx] = value wherever mask[idx] != 0 (NaN counts as
 * nonzero), in place.
 *   t: any shape and strides; mask: broadcastable to t (numpy rules: trailing dims
 *   aligned, each mask extent equal to t's or 1, missing leading dims broadcast); mask
 *   must not overlap t. Masks are float32 (1/0) tensors.
 * Errors: TA_EINVAL (NULL, mask overlapping t, t with stride 0 over an extent > 1),
 * TA_ESHAPE (mask does not broadcast to t). */
ta_status ta_masked_fill(ta_tensor *t, const ta_tensor *mask, float value);

/* Causal mask in the keep convention (1 = may attend, 0 = blocked), for
 * opts.mask_mode = TA_MASK_KEEP or ta_masked_fill after inverting.
 *   mask: [..., Lq, Lk] (rank >= 2, any strides), overwritten: element (.., i, j) is 1
 *   when j <= i (TA_CAUSAL_TOP_LEFT, torch.tril(ones(Lq, Lk))), j <= i + Lk - Lq
 *   (TA_CAUSAL_BOTTOM_RIGHT) or always (TA_CAUSAL_NONE).
 * The seed's block mask torch.triu(ones(L, L), diagonal=1) is ta_tensor_fill(m, 1) then
 * ta_tensor_triu(m, 1), for TA_MASK_BLOCK. ta_sdpa's opts.causal needs no tensor.
 * Errors: TA_EINVAL (NULL, bad align, mask with stride 0 over an extent > 1), TA_ESHAPE
 * (rank < 2). */
ta_status ta_causal_mask(ta_tensor *mask, ta_causal align);

/* Padding mask in the keep convention: mask [B, ..., Lk] (rank >= 2) gets 1 at
 * (b, ..., j) when j < lengths[b], else 0. lengths: B values in [0, Lk]. For a mask
 * broadcastable in ta_sdpa use shape [B, 1, 1, Lk] (or pass opts.key_lengths directly).
 * Errors: TA_EINVAL (NULL, a length out of range, mask with stride 0 over an extent > 1),
 * TA_ESHAPE (rank < 2). */
ta_status ta_padding_mask(ta_tensor *mask, const int64_t *lengths);

/* ------------------------------------------------ scaled dot-product attention */

typedef enum ta_sdpa_path {
    TA_SDPA_AUTO = 0,      /* fused unless weights are requested */
    TA_SDPA_REFERENCE = 1, /* the seed's algorithm: einsum, scale, mask, softmax, einsum */
    TA_SDPA_FUSED = 2      /* never materialises Lq x Lk */
} ta_sdpa_path;

/* Options of ta_sdpa. A zeroed struct ({0}) means: scale 1/sqrt(D), no causal mask, no
 * mask, no key lengths, no optional outputs, automatic path. */
typedef struct ta_sdpa_opts {
    float scale;                /* 0: the default 1/sqrt(D); must be finite */
    ta_causal causal;
    const ta_tensor *mask;      /* NULL, or broadcastable to [B, H, Lq, Lk] */
    ta_mask_mode mask_mode;
    const int64_t *key_lengths; /* NULL, or B values in [0, Lk]: keys >= length are padding */
    ta_tensor *weights;         /* NULL, or output [B, H, Lq, Lk]: the attention weights */
    ta_tensor *lse;             /* NULL, or output [B, H, Lq]: log-sum-exp of the scaled,
                                   masked scores (natural log), -inf for an empty row */
    ta_sdpa_path path;
    ta_workspace workspace;     /* {0}: the library's scratch; else at least
                                   ta_sdpa_workspace_size (ta_sdpa_backward_workspace_size
                                   for the backward) bytes: the call then allocates nothing */
    /* Variable-length batches (FlashAttention's varlen): NULL, or both set with num_seqs
     * >= 0; see "Variable-length batches" below. */
    const int32_t *cu_seqlens_q; /* num_seqs + 1 offsets into Q's (and O's) rows */
    const int32_t *cu_seqlens_k; /* num_seqs + 1 offsets into K's and V's rows */
    int64_t num_seqs;
    /* Variants of current models; see "Attention variants" below. */
    int has_window;              /* 0: no window; else window_left/right apply */
    int64_t window_left;         /* -1: unbounded; else >= 0 keys left of the diagonal */
    int64_t window_right;        /* -1: unbounded; else >= 0 keys right of the diagonal */
    float softcap;               /* 0: off; else > 0: s = softcap * tanh(s / softcap) */
    const ta_tensor *alibi_slopes; /* NULL, or float32 [H] or [B, H] (B = num_seqs with
                                      cu_seqlens; a KV cache's batch) */
    const ta_tensor *sinks;      /* NULL, or float32 [H]: a logit in every row's denominator */
    ta_tensor *dsinks;           /* backward only: NULL, or output float32 [H] (overwritten) */
} ta_sdpa_opts;

/* Scaled dot-product attention: O = softmax(mask(Q K^T * scale)) V, per batch and head.
 *   Q [B, H, Lq, D], K [B, Hkv, Lk, D], V [B, Hkv, Lk, Dv] -> O [B, H, Lq, Dv].
 *   H % Hkv == 0 (grouped-query attention): query head h uses key/value head
 *   h / (H / Hkv), as torch.repeat_interleave(K, H / Hkv, dim=1) would give. Any
 *   strides; O (and opts->weights, opts->lse) must not overlap the inputs or each other.
 *   Overlap, here and in every check of the library: sharing an element's bytes. Views
 *   of the same strides that interleave without a common element (slices of one packed
 *   buffer: O beside Q, K, V in [B, L, 4, H, D], or dQ, dK, dV of a [B, L, 3, H, D]
 *   gradient) do not overlap; views of different layouts whose byte ranges meet, and
 *   views of the same strides too intricate for a bounded search, are taken as
 *   overlapping (conservative).
 *   opts: NULL means a zeroed ta_sdpa_opts (defaults).
 * Masking, in this order, all optional and combined: key j of query row i is blocked
 * when opts->causal forbids it (top_left: j > i; bottom_right: j > i + Lk - Lq), when
 * j >= opts->key_lengths[b], or when the mask tensor says so (TA_MASK_KEEP: element 0;
 * TA_MASK_BLOCK: element nonzero); a blocked score becomes -inf (masked_fill: whatever
 * Q K^T held there, NaN included, is discarded). In TA_MASK_ADDITIVE mode the mask
 * value is added to the scaled score of every key not blocked otherwise. The mask is
 * float32, broadcastable to [B, H, Lq, Lk] ([Lq, Lk], [B, 1, 1, Lk], [1, H, Lq, Lk]...)
 * and never expanded.
 * Softmax over the keys follows ta_softmax's rules. A query row that may attend to no
 * key (every masked score -inf) gets output 0, weights 0 and LSE -inf; PyTorch's math
 * path gives NaN there. NaN in Q, or in K or V at a key the row attends to, makes the
 * row's output NaN. The reference path computes weights x V as the seed does, so a NaN
 * or inf in V at a key that is blocked for some rows of a (b, kv-head) still reaches
 * those rows through 0 * NaN (as in PyTorch), except rows that attend to nothing.
 * Optional outputs: opts->weights [B, H, Lq, Lk] (the softmax; requesting it selects the
 * reference path under TA_SDPA_AUTO), opts->lse [B, H, Lq] (natural log of the sum of
 * exp of the scaled, masked scores; NaN for a NaN row).
 * Paths: TA_SDPA_REFERENCE runs the seed's algorithm (einsum 'bhid,bhjd->bhij', scale,
 * mask, softmax, einsum 'bhij,bhjd->bhid') with a [B, H, Lq, Lk] score scratch
 * (opts->weights itself when given). TA_SDPA_FUSED runs FlashAttention-2 on
 * the CPU: tiles of queries against tiles of keys, online softmax, never forming
 * Lq x Lk (scratch: tens of KiB per thread), skipping key tiles that the causal
 * limit or the key lengths hide; it refuses opts->weights (TA_EUNSUPPORTED). With
 * Lq small and Lk large (decoding) it splits the keys into shape-determined chunks
 * merged exactly by their log-sum-exp. TA_SDPA_AUTO takes the fused path unless
 * weights are requested. Both paths agree within a few float ulps of the softmax; one
 * difference: the fused path never reads V at a key that is blocked for every row of a
 * tile, so a NaN/inf in V there does not reach rows that cannot see it (the reference
 * spreads it through 0 * NaN as PyTorch does).
 * Scratch: one block per call, taken before anything is written: opts->workspace when
 * given (no allocation at all), else the library's (see ta_workspace).
 * Errors (message names the argument and shapes, e.g. "ta_sdpa: K has head_dim 32 but
 * Q has 64"): TA_EINVAL (NULL, bad enum, non-finite scale, key length outside [0, Lk],
 * overlapping outputs, a workspace smaller than ta_sdpa_workspace_size), TA_ESHAPE
 * (ranks, extents, H % Hkv, mask broadcast, output shapes), TA_ENOMEM, TA_EUNSUPPORTED.
 * On any error every output is untouched. */
ta_status ta_sdpa(ta_tensor *O, const ta_tensor *Q, const ta_tensor *K, const ta_tensor *V,
                  const ta_sdpa_opts *opts);
/* dtypes of ta_sdpa and ta_sdpa_backward: Q, K, V, O, dO and the gradients may each be
 * TA_F32, TA_F16 or TA_BF16 (independently); the mask and LSE are float32. Values are
 * widened to float32, products and sums are float32 (P stays float32, unlike PyTorch,
 * which rounds P to the input type: more accurate), and outputs are rounded once to
 * their dtype, to nearest-even. */
/* The bytes of opts->workspace that ta_sdpa needs for these arguments (validated as
 * ta_sdpa validates them; the path, shapes, strides and the library's thread count
 * decide it, not the data). 0 when the call needs no scratch. */
ta_status ta_sdpa_workspace_size(size_t *bytes, const ta_tensor *O, const ta_tensor *Q,
                                 const ta_tensor *K, const ta_tensor *V, const ta_sdpa_opts *opts);

/* Gradients of ta_sdpa: given dO = dL/dO and the forward's inputs, output O and
 * log-sum-exp (opts->lse of the forward call, [B, H, Lq]), computes
 *   dQ [B, H, Lq, D], dK [B, Hkv, Lk, D], dV [B, Hkv, Lk, Dv] (overwritten).
 * opts: the options of the forward call (scale, causal, mask, mask_mode, key_lengths,
 * path); opts->weights and opts->lse must be NULL here. With GQA, dK and dV sum over
 * the query heads of each group. Additive masks get no gradient. A query row that
 * attended to nothing contributes nothing. FlashAttention-2 style: the probabilities
 * are recomputed block by block from Q, K and the LSE, D_i = rowsum(dO_i * O_i),
 * dS = P * (dP - D); Lq x Lk is never materialised on the fused path (TA_SDPA_AUTO,
 * TA_SDPA_FUSED); TA_SDPA_REFERENCE materialises it (the test oracle).
 * Deterministic: bitwise identical results for any thread count. Scratch as ta_sdpa's:
 * opts->workspace of ta_sdpa_backward_workspace_size bytes makes it allocate nothing.
 * Errors as ta_sdpa, plus shapes of dO, O, lse and the gradient outputs; on any error
 * every output is untouched. */
ta_status ta_sdpa_backward(ta_tensor *dQ, ta_tensor *dK, ta_tensor *dV, const ta_tensor *dO,
                           const ta_tensor *Q, const ta_tensor *K, const ta_tensor *V,
                           const ta_tensor *O, const ta_tensor *lse, const ta_sdpa_opts *opts);
/* The bytes of opts->workspace that ta_sdpa_backward needs for these arguments. */
ta_status ta_sdpa_backward_workspace_size(size_t *bytes, const ta_tensor *dQ,
                                          const ta_tensor *dK, const ta_tensor *dV,
                                          const ta_tensor *dO, const ta_tensor *Q,
                                          const ta_tensor *K, const ta_tensor *V,
                                          const ta_tensor *O, const ta_tensor *lse,
                                          const ta_sdpa_opts *opts);

/* Variable-length batches. With opts->cu_seqlens_q and opts->cu_seqlens_k set (int32,
 * num_seqs + 1 values each, starting at 0, non-decreasing, the last equal to Tq and Tk)
 * ta_sdpa, ta_sdpa_backward and their workspace queries take packed sequences:
 *   Q [Tq, H, D], K [Tk, Hkv, D], V [Tk, Hkv, Dv] -> O [Tq, H, Dv], opts->lse [H, Tq];
 *   the backward's dO and O [Tq, H, Dv], lse [H, Tq], dQ [Tq, H, D], dK [Tk, Hkv, D],
 *   dV [Tk, Hkv, Dv].
 * Sequence b is the query rows cu_seqlens_q[b] .. cu_seqlens_q[b+1] against the keys
 * cu_seqlens_k[b] .. cu_seqlens_k[b+1]: every option applies per sequence with its own
 * Lq_b and Lk_b (bottom_right causal: query i sees keys j <= i + Lk_b - Lq_b). Empty
 * sequences are valid (a query row with no key gets O = 0, LSE -inf; keys that no query
 * sees get dK = dV = 0). mask, key_lengths and weights do not combine with cu_seqlens
 * (TA_EINVAL: the offsets already say where each sequence ends). The fused path visits
 * only the real tokens, and runs the sequences in one parallel region (the backward:
 * those whose dQ rows of a kv head fit 4 MiB, the others one by one). On
 * the fused path (TA_SDPA_AUTO, TA_SDPA_FUSED) the workspace size depends on Tq, Tk,
 * num_seqs and the shapes, not on the offsets: one workspace serves every batch of those
 * totals with at most num_seqs sequences; on TA_SDPA_REFERENCE (the oracle) it is the
 * largest sequence's need, so it depends on the offsets too. Offsets are validated before anything is
 * written (bad ones: TA_EINVAL). */

/* Attention variants (FlashAttention's definitions; DESIGN.md "Inference and modern
 * attention"). For query i and key j of a sequence (Lq, Lk its lengths) the diagonal
 * offset is delta = 0 under TA_CAUSAL_TOP_LEFT, else delta = Lk - Lq (bottom_right, and no
 * causal at all), and rel = j - (i + delta). The score of (i, j), in this order:
 *   s = scale * q_i . k_j;
 *   softcap c > 0:          s = c * tanh(s / c);
 *   ALiBi slope a (alibi_slopes[h], or [b, h]): s -= a * |rel|;
 *   additive mask:          s += m_ij;
 *   blocked (causal rel > 0; window rel < -window_left or rel > window_right, -1 meaning
 *   unbounded; keep/block mask; key length): s = -inf.
 * Sinks (sigma_h = sinks[h]) join the softmax denominator only:
 *   w_ij = exp(s_ij) / (sum_j exp(s_ij) + exp(sigma_h)),
 *   LSE = log(sum_j exp(s_ij) + exp(sigma_h)); a row with every key blocked gets O = 0 and
 *   LSE = sigma_h. The backward returns dsigma in opts->dsinks (summed over batches and
 *   rows); ALiBi slopes get no gradient (as in FlashAttention), softcap's 1 - tanh^2
 *   factor is in dQ and dK.
 * These combine with each other and with every other option, varlen and the KV cache.
 * Errors (TA_EINVAL): a negative or non-finite softcap, a window bound below -1, slopes or
 * sinks of the wrong shape or dtype, dsinks in a forward, dsinks without sinks, outputs
 * overlapping slopes or sinks. The fused path never visits key tiles a window hides.
 * Both paths implement every variant (TA_SDPA_FUSED refuses, TA_EUNSUPPORTED, only a
 * softcap below 2^-126 or above 2^126, which TA_SDPA_AUTO runs on the reference path);
 * softcap 0, a window of -1, -1 and has_window 0 are no variant. */

/* KV cache (FlashAttention's flash_attn_with_kvcache, BSHD layout). A cache is one of
 *   contiguous: k [B, Lmax, Hkv, D], v [B, Lmax, Hkv, Dv]  (block_table NULL), or
 *   paged:      k [num_blocks, block_size, Hkv, D], v [num_blocks, block_size, Hkv, Dv]
 *               with block_table [B, max_blocks]: position p of sequence b lives in block
 *               block_table[b * max_blocks + p / block_size], row p % block_size;
 * of dtype TA_F32, TA_F16 or TA_BF16 (k and v alike), any strides (a paged cache's
 * blocks need not be in order; entries of block_table past the blocks a sequence uses
 * are never read and may hold anything, e.g. -1; sequences may share the blocks they
 * only read, as vLLM's prefix sharing does, but a block a call appends to must belong to
 * that one sequence, at one place in its table). seqlens[b] is the number of keys
 * already in sequence b's cache. The capacity of a sequence is Lmax (contiguous) or
 * max_blocks * block_size (paged). */
typedef struct ta_kv_cache {
    ta_tensor *k, *v;
    const int32_t *seqlens;     /* [B] */
    const int32_t *block_table; /* NULL (contiguous) or [B, max_blocks] */
    int64_t max_blocks;
} ta_kv_cache;

/* Attention of new queries against a KV cache, appending new keys first:
 *   q [B, Lq, H, D]; optional k_new [B, Lnew, Hkv, D] and v_new [B, Lnew, Hkv, Dv] (both
 *   or neither) -> O [B, Lq, H, Dv], opts->lse [B, H, Lq].
 * 1. k_new and v_new are written into the cache in place at positions seqlens[b] ..
 *    seqlens[b] + Lnew - 1 of each sequence (rounded to the cache's dtype, ties to even);
 *    cache->seqlens is not changed (add Lnew yourself before the next step).
 * 2. q attends to the Lk_b = seqlens[b] + Lnew keys of its sequence, as ta_sdpa would
 *    with K, V the first Lk_b positions: opts->scale, opts->causal (per sequence;
 *    TA_CAUSAL_BOTTOM_RIGHT is what decoding needs: query i sees keys
 *    j <= i + Lk_b - Lq), opts->lse, opts->path, opts->workspace. mask, key_lengths,
 *    weights and cu_seqlens are TA_EINVAL here.
 * Decode (Lq = 1) splits long caches into key chunks merged by their log-sum-exp, as the
 * fused forward does. q and O may be f32, f16 or bf16 independently of the cache.
 * With opts->workspace of ta_sdpa_kvcache_workspace_size bytes the call allocates
 * nothing; that size depends on the shapes and the cache's capacity, not on seqlens, so
 * one workspace serves every step of a generation.
 * Errors (before anything is written, the cache included): shapes that do not fit, a
 * seqlens[b] < 0, a sequence whose seqlens[b] + Lnew exceeds its capacity, a block index
 * outside [0, num_blocks) among the blocks a sequence uses, outputs that overlap the
 * inputs or the cache, a cache with a stride 0 over an extent > 1 when k_new is appended
 * (a cache broadcast over the batch is read-only: pass no k_new), a block appended to
 * that another sequence uses or that its own table lists twice (paged). */
ta_status ta_sdpa_kvcache(ta_tensor *O, const ta_tensor *q, const ta_kv_cache *cache,
                          const ta_tensor *k_new, const ta_tensor *v_new,
                          const ta_sdpa_opts *opts);
/* The bytes of opts->workspace that ta_sdpa_kvcache needs for these arguments. */
ta_status ta_sdpa_kvcache_workspace_size(size_t *bytes, const ta_tensor *O, const ta_tensor *q,
                                         const ta_kv_cache *cache, const ta_tensor *k_new,
                                         const ta_tensor *v_new, const ta_sdpa_opts *opts);

/* ------------------------------------------------------------------ files */

/* NumPy .npy (format versions 1.0, 2.0 and 3.0; C order, little-endian) and
 * .safetensors files. Every file error names the function, the path and what is
 * wrong: "ta_npy_load: Q.npy: unsupported dtype '<i2' (expected ...)". Codes: TA_EIO
 * when the file cannot be opened, read or written (the message ends with strerror),
 * TA_EFORMAT when its contents are malformed (bad magic, bad header, truncated data,
 * offsets that do not fit), TA_EUNSUPPORTED when it is valid but holds something we
 * do not read (a dtype, Fortran order, more than TA_MAX_DIMS dimensions), TA_EINVAL for
 * bad arguments. Outputs are untouched on error.
 * Writers never leave a partial file: they write a temporary "<path>.tmp.XXXXXX" in
 * the same directory ("<dir>/.tmp.XXXXXX" for a name too long to take the suffix), flush
 * it to disk and rename(2) it over path, so path holds either its old contents or the
 * complete new file; on failure the temporary is removed.
 * The file gets mode 0666 minus the umask (an existing file's mode is not kept). A path
 * that exists and is not a regular file (a directory, a device such as /dev/null, a
 * pipe) is TA_EIO, since the rename would replace it. */

/* Loads a .npy file as a new owning, C-contiguous float32 tensor of the file's shape
 * (0-d and zero-size shapes included) into *out. Accepted dtypes and conversions:
 *   '<f4' as is; '<f8' and '<f2' rounded to nearest (NaN stays NaN, f8 values beyond
 *   the float32 range become +-inf); '|b1' as 0 or 1; '|u1' as its value 0..255;
 *   '<i4', '<i8' as their values, which must be exactly representable in float32
 *   (|v| <= 2^24 always is), otherwise TA_EUNSUPPORTED (use ta_npy_load_int64).
 * Big-endian dtypes ('>f4'), fortran_order True and object arrays are rejected with
 * TA_EUNSUPPORTED; a header or data that does not match the specification, a shape
 * whose byte size overflows size_t, and trailing bytes after the data with TA_EFORMAT.
 * Release *out with ta_tensor_free. */
ta_status ta_npy_load(ta_tensor *out, const char *path);

/* ta_npy_load into a tensor of the given dtype (TA_F32, TA_F16 or TA_BF16): the file's
 * values converted once (rounded to nearest-even where the type is narrower; '<f2' into
 * TA_F16 is exact). */
ta_status ta_npy_load_dtype(ta_tensor *out, const char *path, ta_dtype dtype);

/* Loads an integer .npy file ('<i4' or '<i8', any shape up to TA_MAX_DIMS, e.g. the
 * key lengths [B]) as int64: *values becomes a new array of prod(shape) values in C
 * order (non-NULL even when empty), *ndim and shape[0..*ndim-1] its shape. Release
 * *values with ta_npy_free. Errors as ta_npy_load. */
ta_status ta_npy_load_int64(int64_t **values, int *ndim, int64_t shape[TA_MAX_DIMS],
                            const char *path);
/* Releases an array returned by ta_npy_load_int64. NULL is fine. */
void ta_npy_free(void *values);

/* Writes t (any shape and strides, including 0-d and zero-size) to path as a C-order,
 * version 1.0 .npy file whose header is padded to 64 bytes, the layout numpy.save
 * writes: '<f4' for TA_F32, '<f2' for TA_F16, '<f8' for TA_F64; TA_BF16, which NumPy
 * lacks, as '<f4' (exact). Atomic as described above. */
ta_status ta_npy_save(const char *path, const ta_tensor *t);

/* A .safetensors file open for reading: an 8-byte little-endian header length, a
 * JSON header {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 * "__metadata__": {...}} and the data area. Opening reads and validates the header
 * only: every tensor's dtype must be known, its shape non-negative, and its offsets
 * must satisfy begin <= end <= data size and end - begin == numel * itemsize; tensors
 * must not overlap and must cover the data area without gaps (the specification's
 * rules). "__metadata__" is allowed and ignored; a duplicate name is an error. The
 * handle keeps the file open until ta_safetensors_free. A handle may be read from
 * several threads at once. */
typedef struct ta_safetensors ta_safetensors;

/* Opens path; *st becomes a new handle (release with ta_safetensors_free). */
ta_status ta_safetensors_open(ta_safetensors **st, const char *path);
/* Number of tensors (the "__metadata__" entry is not one). */
int ta_safetensors_count(const ta_safetensors *st);
/* Name of tensor i in 0..count-1, tensors sorted by name (strcmp order); NULL when i
 * is out of range. Owned by the handle. */
const char *ta_safetensors_name(const ta_safetensors *st, int i);
/* Index of the tensor called name, or -1 if there is none (no error recorded). */
int ta_safetensors_find(const ta_safetensors *st, const char *name);
/* Reads tensor `name` as a new owning, C-contiguous float32 tensor of its shape into
 * *out (release with ta_tensor_free). F32 is read as is; F16, BF16 and F64 are
 * converted (exact for F16 and BF16, subnormals, infinities and NaN included; F64
 * rounded to nearest). Other dtypes of the format (I64, BOOL, F8_E4M3, ...) give
 * TA_EUNSUPPORTED, a missing name TA_EINVAL ("no tensor named 'fc_out.bias' in
 * W.safetensors"). */
ta_status ta_safetensors_get(ta_tensor *out, const ta_safetensors *st, const char *name);
/* ta_safetensors_get into a tensor of the given dtype (TA_F32, TA_F16 or TA_BF16; F16
 * into TA_F16 and BF16 into TA_BF16 are exact copies, other pairs convert as ta_convert). */
ta_status ta_safetensors_get_dtype(ta_tensor *out, const ta_safetensors *st, const char *name,
                                   ta_dtype dtype);
/* Closes the file and frees the handle. NULL is fine. */
void ta_safetensors_free(ta_safetensors *st);

/* Writes n tensors (any strides; each in its own dtype: F32, F16, BF16 or F64) under
 * names[i] (non-empty, distinct, not "__metadata__", UTF-8) to path, in the given order, with
 * "__metadata__": {"format": "pt"} and the header padded with spaces to a multiple of
 * 8 bytes, as the safetensors Python package writes it. n may be 0. Atomic. */
ta_status ta_safetensors_save(const char *path, int n, const char *const *names,
                              const ta_tensor *const *tensors);

/* ------------------------------------------------------- attention layers */

/* A multi-head attention layer with its parameters, in one of two layouts that
 * reproduce PyTorch modules exactly (same parameters, same state_dict names, same
 * results up to float32 rounding):
 *
 * TA_LAYOUT_SEED: the seed document's SelfAttention(embed_size, heads), E = embed_size,
 *   H = heads, D = E / H. Parameters (state_dict names and shapes):
 *     values.weight [D, D], keys.weight [D, D], queries.weight [D, D]   (no bias; ONE
 *                    Linear(D, D) shared by every head, applied to [N, L, H, D])
 *     fc_out.weight [E, E], fc_out.bias [E]
 *   forward(values, keys, queries, mask):
 *     q, k, v = split each input into heads [N, L, H, D] and apply its Linear
 *     energy = einsum("nqhd,nkhd->nhqk", q, k)
 *     energy = energy.masked_fill(mask == 0, -1e20)            (if a mask is given)
 *     attention = softmax(energy / sqrt(D), dim=3)
 *     out = fc_out(einsum("nhql,nlhd->nqhd", attention, v).reshape(N, Lq, E))
 *   Because the fill comes before the softmax with a finite value, a query row whose
 *   keys are all masked gets UNIFORM weights 1/Lk over all keys, as in PyTorch; this
 *   layout reproduces that (unlike ta_sdpa, which gives such a row zeros).
 *
 * TA_LAYOUT_TORCH: torch.nn.MultiheadAttention(E, H, batch_first=True) (torch 1.13):
 *     in_proj_weight [3E, E] (rows 0..E-1 project queries, E..2E-1 keys, 2E..3E-1
 *     values), in_proj_bias [3E], out_proj.weight [E, E], out_proj.bias [E]
 *   forward(query, key, value, key_padding_mask, need_weights, attn_mask,
 *           average_attn_weights): q = query W_q^T + b_q (likewise k, v), split into
 *   heads, softmax(q k^T / sqrt(D) + masks) v, merged, out_proj. A query row that may
 *   attend to no key gives NaN in PyTorch; here it gives attention output 0 (so the
 *   layer's output row is out_proj.bias) and weights 0, as ta_sdpa does.
 *
 * Shapes: inputs are batch-first, queries [N, Lq, E], keys [N, Lk, E], values
 * [N, Lk, E] (keys and values have the same length; Lq may differ: cross attention),
 * output [N, Lq, E]. Every parameter is float32.
 *
 * Initialisation follows PyTorch's defaults, drawn from our counter-based generator
 * (so the values differ from PyTorch's, the distributions do not):
 *   nn.Linear weight and bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in))   (kaiming_uniform
 *     with a = sqrt(5)); seed layout: fan_in D for values/keys/queries, E for fc_out.
 *   MultiheadAttention: in_proj_weight xavier_uniform, U(-sqrt(6 / (E + 3E)), +);
 *     in_proj_bias 0; out_proj.weight U(-1/sqrt(E), 1/sqrt(E)); out_proj.bias 0.
 *   Parameter i (in the order listed above) is drawn from the stream of a seed
 *   derived from (seed, i), so one seed makes the whole layer reproducibly.
 *
 * A layer is not safe to run from two threads at once (calls without a caller
 * workspace reuse a block kept in the layer; the backward accumulates into its
 * gradients); distinct layers are independent. */
typedef enum ta_layout { TA_LAYOUT_SEED = 0, TA_LAYOUT_TORCH = 1 } ta_layout;

typedef struct ta_attention ta_attention; /* opaque; owns its parameters */

/* A new layer with freshly initialised parameters (see above). embed_size >= 1,
 * heads >= 1, embed_size % heads == 0 ("embed_size 10 is not divisible by heads 3").
 * Release with ta_attention_free. */
ta_status ta_attention_create(ta_attention **layer, ta_layout layout, int64_t embed_size,
                              int64_t heads, uint64_t seed);
/* A new layer whose parameters are read from a .safetensors file holding the layout's
 * state_dict names (other tensors in the file are ignored; F16/BF16/F64 are
 * converted). E is taken from the file (fc_out.weight / out_proj.weight); every
 * tensor's shape is checked ("ta_attention_load: W.safetensors: fc_out.weight has shape
 * [8, 4], expected [8, 8]"); a missing tensor is TA_EFORMAT ("...has no tensor
 * 'fc_out.bias' (seed layout)"). A torch-layout file holding bias_k / bias_v
 * (MultiheadAttention(add_bias_kv=True): another layer) is TA_EUNSUPPORTED. */
ta_status ta_attention_load(ta_attention **layer, const char *path, ta_layout layout,
                            int64_t heads);
/* Writes the layer's parameters to path (the output first, as in ta_npy_save) as F32
 * under their state_dict names (a file torch's safetensors.torch.load_file +
 * load_state_dict accepts). Atomic (see "files"). */
ta_status ta_attention_save(const char *path, const ta_attention *layer);
/* NULL is fine. */
void ta_attention_free(ta_attention *layer);

/* Layer facts: layout, E, H, D = E / H. */
ta_layout ta_attention_layout(const ta_attention *layer);
int64_t ta_attention_embed_size(const ta_attention *layer);
int64_t ta_attention_heads(const ta_attention *layer);
/* Number of parameters of the layer (5 seed, 4 torch) and the state_dict name of
 * parameter i (NULL when out of range), in the order listed above. */
int ta_attention_param_count(const ta_attention *layer);
const char *ta_attention_param_name(const ta_attention *layer, int i);
/* *view becomes a writable view (contiguous, the PyTorch shape) of the parameter
 * called name ("fc_out.bias"); valid until ta_attention_free. Unknown name: TA_EINVAL. */
ta_status ta_attention_param(ta_tensor *view, const ta_attention *layer, const char *name);

/* Options of ta_attention_forward and ta_attention_backward; a zeroed struct ({0})
 * means no masks, no weights, no caller workspace.
 * Masks combine: a key is visible to a query only if every given mask allows it.
 *   mask: broadcastable (right-aligned, as in PyTorch) to [N, H, Lq, Lk], read with
 *     mask_mode:
 *       seed layout: TA_MASK_KEEP (nonzero = may attend: the seed's mask, whose zeros
 *         are filled with -1e20) or TA_MASK_BLOCK; TA_MASK_ADDITIVE is rejected.
 *       torch layout: attn_mask of MultiheadAttention: a bool mask (True = blocked) is
 *         TA_MASK_BLOCK with values 0/1, a float mask is TA_MASK_ADDITIVE; KEEP also
 *         works. Shapes as in PyTorch: [Lq, Lk], or [N*H, Lq, Lk] (read as [N, H, Lq,
 *         Lk], batch-major, as torch does; a rank-3 mask must have exactly this
 *         shape); rank 4 (and rank <= 2) masks broadcast as in the seed layout.
 *   Seed-layout rows left with no visible key get uniform weights (see above), whatever
 *   mask, key_padding_mask or causal emptied them; torch-layout rows get zeros.
 *   key_padding_mask: NULL or [N, Lk], read with key_padding_mode; torch's bool
 *     key_padding_mask (True = padding, ignored) is TA_MASK_BLOCK, a float one
 *     TA_MASK_ADDITIVE. Note that a zeroed struct means TA_MASK_KEEP for both masks.
 *   causal: a ta_causal, as in ta_sdpa: TA_CAUSAL_TOP_LEFT lets query i see keys
 *     j <= i only (PyTorch's is_causal; torch 1.13's MultiheadAttention lacks it: this
 *     is the mask triu(ones(Lq, Lk), 1) as a bool attn_mask), TA_CAUSAL_BOTTOM_RIGHT
 *     keys j <= i + Lk - Lq (queries that continue a cached sequence).
 *   weights: NULL, or an output of the attention weights (softmax probabilities):
 *     [N, H, Lq, Lk] per head, or [N, Lq, Lk] averaged over heads when
 *     average_weights is nonzero (torch's need_weights=True, average_attn_weights).
 *   workspace: zeroed, or a caller's scratch (see ta_workspace) of at least
 *     ta_attention_workspace_size bytes for a forward, ta_attention_backward_workspace_size
 *     for a backward: the call then uses it instead of the block the layer keeps. */
typedef struct ta_attention_opts {
    const ta_tensor *mask;
    ta_mask_mode mask_mode;
    const ta_tensor *key_padding_mask;
    ta_mask_mode key_padding_mode;
    ta_causal causal;
    ta_tensor *weights;
    int average_weights;
    ta_workspace workspace;
} ta_attention_opts;

/* out [N, Lq, E] = the layer applied to queries [N, Lq, E], keys [N, Lk, E], values
 * [N, Lk, E] (any strides; the same tensor may be passed for all three: self
 * attention; out may be one of the inputs). opts may be NULL. Note the argument order,
 * queries first (the seed's forward takes values, keys, queries; torch's query, key,
 * value). Scratch memory (the projections, the attention core's, the GEMMs' packing):
 * opts->workspace when given (the call then allocates nothing), else one block kept in
 * the layer and reused (it grows only when the shapes grow), taken before anything is
 * written. Errors name the input and both shapes ("ta_attention_forward: keys has shape
 * [2, 5, 8] but values has [2, 6, 8]"); on error out and opts->weights are untouched. */
ta_status ta_attention_forward(ta_tensor *out, ta_attention *layer, const ta_tensor *queries,
                               const ta_tensor *keys, const ta_tensor *values,
                               const ta_attention_opts *opts);
/* *bytes = the size of the opts->workspace that ta_attention_forward needs for these
 * arguments (the same checks and errors as the forward; nothing is run or written but
 * *bytes). It depends on the shapes, out's strides, the options and the thread count. */
ta_status ta_attention_workspace_size(size_t *bytes, const ta_tensor *out,
                                      const ta_attention *layer, const ta_tensor *queries,
                                      const ta_tensor *keys, const ta_tensor *values,
                                      const ta_attention_opts *opts);

/* Backward of ta_attention_forward: given d_out = dL/dout [N, Lq, E] and the forward's
 * inputs and opts, ACCUMULATES (adds to, like PyTorch's .grad) the gradients of
 *   - every parameter, into the layer's gradient buffers (ta_attention_grad), and
 *   - the inputs, into d_queries [N, Lq, E], d_keys and d_values [N, Lk, E] (any strides;
 *     each may be NULL when not wanted).
 * Self attention (one tensor x passed as queries, keys and values): pass one gradient
 * buffer dx three times; the three contributions add up to dL/dx. Zero the buffers
 * (ta_attention_zero_grad, ta_tensor_fill) before the first backward of a step.
 * The forward is recomputed inside (nothing is cached between calls), so a backward
 * needs no preceding forward; opts is the forward's (opts->weights is ignored).
 * Seed layout: a query row whose keys are all masked has uniform weights (the -1e20
 * fill), so its gradient is that of a mean: dV gets 1/Lk of its output gradient at
 * every key, the scores none (as PyTorch's autograd computes it). Torch layout: such a
 * row (output 0) passes no gradient. Masks get no gradient.
 * The attention core runs ta_sdpa_backward. Bitwise identical for any thread count.
 * d_out and the inputs may alias the input gradients (everything is computed before
 * anything is accumulated). Scratch as ta_attention_forward's (one block for the
 * forward it reruns and the backward, ta_attention_backward_workspace_size bytes).
 * Errors as ta_attention_forward, plus the shapes of d_out and of the input gradients;
 * on error nothing is accumulated. */
ta_status ta_attention_backward(ta_tensor *d_queries, ta_tensor *d_keys, ta_tensor *d_values,
                                ta_attention *layer, const ta_tensor *d_out,
                                const ta_tensor *queries, const ta_tensor *keys,
                                const ta_tensor *values, const ta_attention_opts *opts);
/* *bytes = the size of the opts->workspace that ta_attention_backward needs for these
 * arguments (its checks and errors; nothing is run or written but *bytes). */
ta_status ta_attention_backward_workspace_size(size_t *bytes, const ta_tensor *d_queries,
                                               const ta_tensor *d_keys, const ta_tensor *d_values,
                                               const ta_attention *layer, const ta_tensor *d_out,
                                               const ta_tensor *queries, const ta_tensor *keys,
                                               const ta_tensor *values, const ta_attention_opts *opts);
/* Sets every parameter gradient of the layer to 0 (they start at 0). */
ta_status ta_attention_zero_grad(ta_attention *layer);
/* *view becomes a writable view (contiguous, the parameter's shape) of the gradient of
 * the parameter called name ("in_proj_weight"); valid until ta_attention_free. Unknown
 * name: TA_EINVAL. With ta_attention_param, this gives the (param, grad) pairs that
 * ta_optimizer_step takes:
 *     for (int i = 0; i < ta_attention_param_count(l); i++) {
 *         ta_attention_param(&p[i], l, ta_attention_param_name(l, i));
 *         ta_attention_grad(&g[i], l, ta_attention_param_name(l, i)); } */
ta_status ta_attention_grad(ta_tensor *view, const ta_attention *layer, const char *name);

/* ------------------------------------------------------------ optimisers */

/* SGD and AdamW with PyTorch 1.13's formulas (torch.optim.SGD, torch.optim.AdamW, the
 * single-tensor path; float32 arithmetic as torch does it, hyperparameters in double as
 * Python passes them). An optimiser updates any list of (parameter, gradient) float32
 * tensors in place: an attention layer's (ta_attention_param / ta_attention_grad), an
 * embedding table, a read-out matrix... A training step is
 *     zero the gradients; forward; backward (accumulating); ta_optimizer_step(opt, n, p, g);
 * State (momentum, moments) is kept per position: the i-th tensor of every step must be
 * the same parameter; the first step fixes n and each position's element count, and a
 * later step with a different n or count fails (TA_EINVAL / TA_ESHAPE). Any strides;
 * params[i] and grads[i] have the same shape. A parameter must not share memory with any
 * gradient or another parameter (TA_EINVAL "params[1] overlaps grads[0]", nothing updated:
 * the update would read values it had already written). Elementwise, so bitwise identical
 * for any thread count. Release with ta_optimizer_free. */
typedef struct ta_optimizer ta_optimizer;

/* torch.optim.SGD(lr, momentum, dampening, weight_decay, nesterov): per element
 *   g = grad + weight_decay * p
 *   if momentum != 0: buf = g on the first step, else buf = momentum * buf + (1 - dampening) * g
 *                     g = nesterov ? g + momentum * buf : buf
 *   p = p - lr * g
 * lr, momentum, weight_decay >= 0 and finite; nesterov needs momentum > 0 and
 * dampening == 0 (as PyTorch). A zeroed struct is plain SGD with lr 0: set lr. */
typedef struct ta_sgd_opts {
    double lr, momentum, dampening, weight_decay;
    int nesterov;
} ta_sgd_opts;
ta_status ta_optimizer_sgd(ta_optimizer **opt, const ta_sgd_opts *opts);

/* torch.optim.AdamW(lr, betas=(beta1, beta2), eps, weight_decay) (amsgrad off): at step t
 * (1, 2, ...) per element
 *   p = p * (1 - lr * weight_decay)                       (decoupled weight decay)
 *   m = beta1 * m + (1 - beta1) * grad;  v = beta2 * v + (1 - beta2) * grad^2
 *   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * beta1, beta2 in [0, 1); lr, eps, weight_decay >= 0 and finite. opts NULL means
 * PyTorch's defaults, TA_ADAMW_DEFAULTS: change the fields you need,
 *     ta_adamw_opts o = TA_ADAMW_DEFAULTS; o.lr = 3e-3; ta_optimizer_adamw(&opt, &o); */
typedef struct ta_adamw_opts {
    double lr, beta1, beta2, eps, weight_decay;
} ta_adamw_opts;
#define TA_ADAMW_DEFAULTS                                                                  \
    ((ta_adamw_opts){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-2})
ta_status ta_optimizer_adamw(ta_optimizer **opt, const ta_adamw_opts *opts);
/* One update of params[0..n-1] with grads[0..n-1] (the gradients are only read). */
ta_status ta_optimizer_step(ta_optimizer *opt, int n, ta_tensor *const *params,
                            const ta_tensor *const *grads);
/* The learning rate (for schedules: change it between steps). */
ta_status ta_optimizer_set_lr(ta_optimizer *opt, double lr);
double ta_optimizer_lr(const ta_optimizer *opt);
/* Steps taken so far. */
int64_t ta_optimizer_steps(const ta_optimizer *opt);
/* NULL is fine. */
void ta_optimizer_free(ta_optimizer *opt);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* TENSORATTN_H */
