"""tensorattn: scaled dot-product attention, FlashAttention-style calls and einsum on the
CPU, from the tensorattn C library (runtime-dispatched AVX-512 / AVX2 / portable kernels,
OpenMP threads).

The functions take PyTorch's and FlashAttention's names and arguments, so a model can
swap the import:

    import tensorattn
    out = tensorattn.scaled_dot_product_attention(q, k, v, is_causal=True)   # like torch
    out = tensorattn.flash_attn_func(q, k, v, causal=True)                  # like flash_attn

Arrays: NumPy arrays (through the buffer protocol) and PyTorch CPU tensors (through
__dlpack__), float32, float16 or bfloat16 (bfloat16 through DLPack) for the attention
calls, float32 for einsum. Inputs are read in place, views included (no copy for any
strided array the library can address); results are new arrays of the caller's kind:
NumPy in -> NumPy out, torch in -> torch out. The GIL is released while the library
runs, so Python threads can run calls in parallel. With torch tensors that require grad,
scaled_dot_product_attention and flash_attn_func record a torch.autograd.Function whose
backward is tensorattn's (FlashAttention-2 style, from the saved output and log-sum-exp).

Errors: ValueError (shapes, options, a non-CPU tensor) and TypeError (dtypes: float64 is
refused, convert it first) carry the library's message; dropout_p > 0 raises ValueError.
tensorattn.features says which optional features this build has (float16/bfloat16,
variable-length batches, the KV cache, sliding windows, softcap, ALiBi; all of them
unless python/src/features.h switched one off): one it lacks raises NotImplementedError.
"""

import os

from . import _C

# The library's default is all cores (OpenMP's thread count), but importing torch lowers
# that process-wide (to its count of physical cores): fix it now, so that tensorattn uses
# every CPU this process may run on whatever is imported when. OMP_NUM_THREADS wins.
if "OMP_NUM_THREADS" not in os.environ and hasattr(os, "sched_getaffinity"):
    _C.set_num_threads(max(1, len(os.sched_getaffinity(0))))

__version__ = _C.library_version
__all__ = [
    "scaled_dot_product_attention",
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "einsum",
    "set_num_threads",
    "get_num_threads",
    "features",
]

#: Which optional library features this build passes on (True) or refuses with
#: NotImplementedError (False): float16, bfloat16, varlen, kvcache, window, softcap, alibi.
features = dict(_C.features)

_attention = _C.attention
_grad_needed = _C.grad_needed
_TORCH, _FLASH, _VARLEN = 0, 1, 2  # layouts: [..., H, L, D], [B, L, H, D], [T, H, D]
_TOP_LEFT, _BOTTOM_RIGHT = 1, 2  # causal alignments


def _check_dropout(dropout_p):
    if dropout_p != 0.0:
        raise ValueError(
            f"dropout_p={dropout_p!r}: tensorattn has no attention dropout; pass "
            "dropout_p=0.0 (e.g. dropout_p=self.dropout if self.training else 0.0 at eval)")


def _window(window_size):
    try:
        left, right = window_size
        return int(left), int(right)
    except (TypeError, ValueError):
        raise ValueError(
            f"window_size must be a pair (left, right) of ints, got {window_size!r}") from None


def _autograd(layout, q, k, v, return_lse, mask, opts):
    from . import _grad  # imports torch: only for tensors that require grad
    return _grad.attention(layout, q, k, v, return_lse, mask, opts)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention on the CPU, from tensorattn.

    softmax(query @ key^T * scale + mask) @ value, per batch and head.

    Shapes (as torch):
        query [..., H, L, D], key [..., Hkv, S, D], value [..., Hkv, S, Dv]
        -> output [..., H, L, Dv]
      "..." is any number of batch dims (the same in all three; none is fine), and
      Hkv == H unless enable_gqa=True, which lets H be a multiple of Hkv (query head h
      uses key/value head h // (H // Hkv)). Any strides: views such as
      x.view(B, L, H, D).transpose(1, 2) are read in place.
    Arguments:
      attn_mask: None; a bool array (True = may attend) or a float32 array added to the
        scaled scores; any shape that broadcasts to [..., H, L, S], e.g. [L, S],
        [B, 1, L, S], [B, 1, 1, S] (key padding), [B, H, L, S]. Not with is_causal.
      dropout_p: must be 0.0 (ValueError otherwise: no dropout here).
      is_causal: query i attends to keys j <= i (top-left aligned, as torch).
      scale: None for 1/sqrt(D), else any finite float (0 included).
      enable_gqa: grouped-query attention (torch >= 2.5's argument).
    Dtypes: float32 (float64 raises TypeError: convert it first; float16 and bfloat16
      follow tensorattn.features). The output has the query's dtype and kind: a NumPy
      array for NumPy input, a torch tensor for torch input (which is then
      differentiable when an input requires grad; attn_mask gets no gradient).
    Differences from torch: a query row that may attend to no key gives 0 (torch: NaN).
    Errors: ValueError (shapes that do not fit, a non-CPU tensor, is_causal with a mask,
      dropout_p > 0), TypeError (dtypes, non-arrays), NotImplementedError (a mask that
      requires grad); the message names the argument and the shapes.
    """
    if dropout_p != 0.0:
        _check_dropout(dropout_p)
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: pass either attn_mask or "
                         "is_causal=True, not both (as torch)")
    causal = _TOP_LEFT if is_causal else 0
    out = _attention(_TORCH, query, key, value, False, attn_mask, causal, scale, enable_gqa,
                     -1, -1, 0.0, None, None, None, 0, 0)
    if out is NotImplemented:  # torch tensors that require grad
        opts = (causal, scale, enable_gqa, -1, -1, 0.0, None, None, None, 0, 0)
        return _autograd(_TORCH, query, key, value, False, attn_mask, opts)
    return out


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, return_lse=False, *, dropout_p=0.0,
                    deterministic=False):
    """flash_attn.flash_attn_func on the CPU, from tensorattn.

    Shapes (FlashAttention's layout):
        q [B, Lq, H, D], k [B, Lk, Hkv, D], v [B, Lk, Hkv, Dv] -> out [B, Lq, H, Dv]
      H must be a multiple of Hkv (MQA/GQA: query head h uses kv head h // (H // Hkv)).
      Any strides (read in place).
    Arguments:
      softmax_scale: None for 1/sqrt(D), else any finite float.
      causal: query i attends to keys j <= i + Lk - Lq (bottom-right aligned, as
        FlashAttention >= 2.1; the same as top-left when Lq == Lk).
      window_size: (left, right), -1 = unbounded; softcap: 0.0 = off; alibi_slopes:
        None or float32 [H] / [B, H] (no gradient, as FlashAttention). These three need
        the library's variants: see tensorattn.features (NotImplementedError until then).
      return_lse: also return the log-sum-exp of the scaled scores, float32 [B, H, Lq]
        (natural log; -inf for a row with no key): (out, lse).
      dropout_p (keyword): must be 0.0. deterministic (keyword): accepted; tensorattn's
        backward is always deterministic.
    Dtypes, kinds, autograd and errors as scaled_dot_product_attention (gradients flow
    through out and lse).
    """
    if dropout_p != 0.0:
        _check_dropout(dropout_p)
    wl, wr = _window(window_size)
    causal = _BOTTOM_RIGHT if causal else 0
    out = _attention(_FLASH, q, k, v, return_lse, None, causal, softmax_scale, True, wl, wr,
                     softcap, alibi_slopes, None, None, 0, 0)
    if out is NotImplemented:  # torch tensors that require grad
        opts = (causal, softmax_scale, True, wl, wr, softcap, alibi_slopes, None, None, 0, 0)
        return _autograd(_FLASH, q, k, v, return_lse, None, opts)
    return out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, return_lse=False, *,
                           dropout_p=0.0, deterministic=False):
    """flash_attn.flash_attn_varlen_func on the CPU: a batch of sequences of different
    lengths, packed.

    Shapes:
        q [Tq, H, D], k [Tk, Hkv, D], v [Tk, Hkv, Dv] -> out [Tq, H, Dv]
      cu_seqlens_q, cu_seqlens_k: int32 or int64 [num_seqs + 1], 0 first, non-decreasing,
      the last Tq (Tk): sequence b is q rows cu_seqlens_q[b]:cu_seqlens_q[b+1] against k/v
      rows cu_seqlens_k[b]:cu_seqlens_k[b+1]. max_seqlen_q/k: at least the longest
      sequence (a longer one raises ValueError).
    Options, dtypes and errors as flash_attn_func (causal per sequence, bottom-right);
    return_lse gives (out, lse) with lse float32 [H, Tq].
    Needs the library's variable-length batches (tensorattn.features["varlen"]);
    NotImplementedError until then.
    """
    if dropout_p != 0.0:
        _check_dropout(dropout_p)
    wl, wr = _window(window_size)
    causal = _BOTTOM_RIGHT if causal else 0
    opts = (causal, softmax_scale, True, wl, wr, softcap, alibi_slopes, cu_seqlens_q,
            cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k))
    out = _attention(_VARLEN, q, k, v, return_lse, None, *opts)
    if out is NotImplemented:  # torch tensors that require grad
        return _autograd(_VARLEN, q, k, v, return_lse, None, opts)
    return out


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None,
                            block_table=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0, alibi_slopes=None, *,
                            return_softmax_lse=False):
    """flash_attn.flash_attn_with_kvcache on the CPU: attention of new queries against a
    KV cache (decoding), appending new keys first.

    Shapes:
        q [B, Lq, H, D] -> out [B, Lq, H, Dv]
        k_cache, v_cache: contiguous [B, Lmax, Hkv, D] / [B, Lmax, Hkv, Dv], or paged
          [num_blocks, block_size, Hkv, D] with block_table int32/int64 [B, max_blocks].
        k, v: None, or new keys/values [B, Lnew, Hkv, D] / [..., Dv], written into the
          caches IN PLACE at positions cache_seqlens[b] .. + Lnew - 1 first.
        cache_seqlens: None (every cache full: no k, v then), an int, or int32/int64 [B]:
          the keys already in each sequence's cache (not updated by the call).
    causal is bottom-right aligned (what decoding needs). return_softmax_lse (keyword)
    returns (out, lse [B, H, Lq]). Inference only: the result carries no gradient.
    Needs the library's KV cache (tensorattn.features["kvcache"]); NotImplementedError
    until then.
    """
    wl, wr = _window(window_size)
    return _C.attention_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, block_table,
                                return_softmax_lse, None, _BOTTOM_RIGHT if causal else 0,
                                softmax_scale, True, wl, wr, softcap, alibi_slopes, None,
                                None, 0, 0)


def einsum(spec, *operands):
    """torch.einsum(spec, *operands) for one or two float32 operands, from tensorattn.

    spec: "bhid,bhjd->bhij", implicit output ("ij,jk"), "..." broadcasting, repeated
    indices (diagonals), "->" alone for a scalar; operands may also be passed as one
    list. Strided views are contracted in place (one batched GEMM when the strides
    allow). The result is a new float32 array of the first operand's kind. No autograd:
    with torch tensors that require grad it raises NotImplementedError (use
    torch.einsum there). Errors: ValueError (spec, shapes), TypeError (dtypes),
    NotImplementedError (three or more operands).
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not 1 <= len(operands) <= 2:
        raise NotImplementedError(
            f"tensorattn.einsum takes one or two operands, got {len(operands)}")
    if _grad_needed(*operands):
        raise NotImplementedError("tensorattn.einsum has no autograd: use torch.einsum for "
                                  "tensors that require grad, or detach them")
    return _C.einsum(spec, *operands)


def set_num_threads(n):
    """Sets the number of threads every tensorattn call uses (1 <= n <= 4096). The
    default is the number of CPUs this process may run on (or OMP_NUM_THREADS),
    independent of torch's own setting.

    Waits for calls running in other Python threads to finish first. ValueError for n < 1
    or n > 4096.
    """
    _C.set_num_threads(n)


def get_num_threads():
    """The number of threads tensorattn calls use."""
    return _C.get_num_threads()
