"""Features include/tensorattn.h declares and the library implements in later issues
(tensorattn.features: float16, bfloat16, varlen, kvcache, window, softcap, alibi). While a
feature is off, its arguments must raise NotImplementedError naming it, before anything
is computed or written (never a wrong answer); once python/src/features.h switches it on,
the same tests check the results against the float64 oracle instead."""

import sys

import numpy as np
import pytest
import torch

import tensorattn as ta
from conftest import FWD_TOL, GRAD_TOL, as_kind, max_err, randn, ref_attention

F = ta.features


def refused(feature, match):
    """The context of a call that must raise NotImplementedError while feature is off."""
    return pytest.raises(NotImplementedError, match=match)


# ------------------------------------------------------------------ varlen

LENS_Q, LENS_K = [3, 0, 5, 1], [4, 2, 5, 7]


def packed(H=4, Hkv=2, D=16, Dv=8, seed=0, idx=torch.int32):
    Tq, Tk = sum(LENS_Q), sum(LENS_K)
    cu = [torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=idx)
          for lens in (LENS_Q, LENS_K)]
    return (randn(Tq, H, D, seed=seed), randn(Tk, Hkv, D, seed=seed + 1),
            randn(Tk, Hkv, Dv, seed=seed + 2), *cu)


def varlen_ref(q, k, v, cu_q, cu_k, causal):
    """Per-sequence oracle, packed back: out [Tq, H, Dv], lse [H, Tq]."""
    outs, lses = [], []
    for b in range(len(cu_q) - 1):
        sq, sk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        o, lse = ref_attention(q[sq].transpose(0, 1), k[sk].transpose(0, 1),
                               v[sk].transpose(0, 1), causal="bottom_right" if causal else None)
        outs.append(o.transpose(0, 1))
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses, dim=1)


@pytest.mark.parametrize("idx", [torch.int32, torch.int64])
@pytest.mark.parametrize("causal", [False, True])
def test_varlen(kind, idx, causal):
    q, k, v, cu_q, cu_k = packed(idx=idx)
    args = [as_kind(t, kind) for t in (q, k, v, cu_q, cu_k)]
    if not F["varlen"]:
        with refused("varlen", "variable-length"):
            ta.flash_attn_varlen_func(*args, max(LENS_Q), max(LENS_K), causal=causal)
        return
    out, lse = ta.flash_attn_varlen_func(*args, max(LENS_Q), max(LENS_K), causal=causal,
                                         return_lse=True)
    ref, ref_lse = varlen_ref(q, k, v, cu_q, cu_k, causal)
    assert max_err(out, ref) <= FWD_TOL and max_err(lse, ref_lse) <= FWD_TOL
    with pytest.raises(ValueError, match="max_seqlen"):
        ta.flash_attn_varlen_func(*args, 2, max(LENS_K))


def test_varlen_autograd():
    if not F["varlen"]:
        pytest.skip("the library has no varlen batches yet (refusal: test_varlen)")
    q, k, v, cu_q, cu_k = packed()
    mine = [t.clone().requires_grad_(True) for t in (q, k, v)]
    theirs = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out = ta.flash_attn_varlen_func(*mine, cu_q, cu_k, 7, 7, causal=True)
    w = randn(*out.shape, seed=9)
    (out * w).sum().backward()
    (varlen_ref(*theirs, cu_q, cu_k, True)[0] * w.double()).sum().backward()
    for a, b in zip(mine, theirs):
        assert max_err(a.grad, b.grad) <= GRAD_TOL


# ---------------------------------------------------------------- KV cache

def cache_case(kind, paged):
    B, Lmax, H, Hkv, D, Lnew = 3, 16, 4, 2, 8, 2
    seqlens = torch.tensor([3, 0, 10], dtype=torch.int32)
    kc, vc = randn(B, Lmax, Hkv, D, seed=1), randn(B, Lmax, Hkv, D, seed=2)
    q, kn, vn = randn(B, Lnew, H, D, seed=3), randn(B, Lnew, Hkv, D, seed=4), randn(B, Lnew, Hkv, D, seed=5)
    table = None
    if paged:  # blocks of 4 rows, shuffled: sequence b's block i is table[b, i]
        perm = torch.randperm(B * 4, generator=torch.Generator().manual_seed(0))
        table = perm.reshape(B, 4).to(torch.int32)
        pk, pv = torch.empty(B * 4, 4, Hkv, D), torch.empty(B * 4, 4, Hkv, D)
        pk[perm] = kc.reshape(B * 4, 4, Hkv, D)
        pv[perm] = vc.reshape(B * 4, 4, Hkv, D)
        caches = (pk, pv)
    else:
        caches = (kc.clone(), vc.clone())
    return (q, kn, vn, seqlens, table), (kc, vc), caches


@pytest.mark.parametrize("paged", [False, True])
def test_kvcache(kind, paged):
    (q, kn, vn, seqlens, table), (kc, vc), caches = cache_case(kind, paged)
    cache_args = [as_kind(t, kind) for t in caches]
    before = [np.asarray(c).copy() for c in cache_args]
    call = dict(k=as_kind(kn, kind), v=as_kind(vn, kind), cache_seqlens=as_kind(seqlens, kind),
                block_table=None if table is None else as_kind(table, kind), causal=True)
    if not F["kvcache"]:
        with refused("kvcache", "KV cache"):
            ta.flash_attn_with_kvcache(as_kind(q, kind), *cache_args, **call)
        for c, b in zip(cache_args, before):  # nothing written
            assert np.array_equal(np.asarray(c), b)
        return
    out = ta.flash_attn_with_kvcache(as_kind(q, kind), *cache_args, **call)
    for b in range(q.shape[0]):
        s, n = int(seqlens[b]), kn.shape[1]
        kc[b, s:s + n], vc[b, s:s + n] = kn[b], vn[b]
        ref = ref_attention(q[b].transpose(0, 1), kc[b, :s + n].transpose(0, 1),
                            vc[b, :s + n].transpose(0, 1), causal="bottom_right")[0]
        assert max_err(out[b], ref.transpose(0, 1)) <= FWD_TOL
    if not paged:  # the new keys went into the caller's cache, in place
        assert np.array_equal(np.asarray(cache_args[0]), kc.numpy())


def test_kvcache_full_caches_and_errors(kind):
    """cache_seqlens=None (every cache full), an int, return_softmax_lse, a cache too
    small for the new keys (the library's error, nothing written)."""
    (q, kn, vn, seqlens, _), (kc, vc), caches = cache_case(kind, False)
    cache_args = [as_kind(t, kind) for t in caches]
    if not F["kvcache"]:
        with refused("kvcache", "KV cache"):
            ta.flash_attn_with_kvcache(as_kind(q, kind), *cache_args)
        return
    out, lse = ta.flash_attn_with_kvcache(as_kind(q, kind), *cache_args,
                                          return_softmax_lse=True)
    ref, ref_lse = ref_attention(q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2))
    assert max_err(out, ref.transpose(1, 2)) <= FWD_TOL and max_err(lse, ref_lse) <= FWD_TOL
    out = ta.flash_attn_with_kvcache(as_kind(q, kind), *cache_args, cache_seqlens=5,
                                     causal=True)
    ref = ref_attention(q.transpose(1, 2), kc[:, :5].transpose(1, 2), vc[:, :5].transpose(1, 2),
                        causal="bottom_right")[0]
    assert max_err(out, ref.transpose(1, 2)) <= FWD_TOL
    before = np.asarray(cache_args[0]).copy()
    with pytest.raises(ValueError):
        ta.flash_attn_with_kvcache(as_kind(q, kind), *cache_args, k=as_kind(kn, kind),
                                   v=as_kind(vn, kind), cache_seqlens=15)
    assert np.array_equal(np.asarray(cache_args[0]), before)
    with pytest.raises(ValueError, match="full"):
        ta.flash_attn_with_kvcache(as_kind(q, kind), *cache_args, k=as_kind(kn, kind),
                                   v=as_kind(vn, kind))
    if kind == "numpy":
        ro = np.asarray(cache_args[0]).copy()
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="writable"):
            ta.flash_attn_with_kvcache(q.numpy(), ro, cache_args[1], k=kn.numpy(), v=vn.numpy(),
                                       cache_seqlens=seqlens.numpy())
        # without k and v nothing is written: read-only caches are taken (session 33)
        rv = np.asarray(cache_args[1]).copy()
        rv.flags.writeable = False
        out = ta.flash_attn_with_kvcache(q.numpy(), ro, rv, cache_seqlens=5, causal=True)
        ref = ref_attention(q.transpose(1, 2), kc[:, :5].transpose(1, 2),
                            vc[:, :5].transpose(1, 2), causal="bottom_right")[0]
        assert max_err(out, ref.transpose(1, 2)) <= FWD_TOL
        # writable but not aligned to its elements: the append would go to a copy and be
        # lost, so it is refused (session 33; v_cache was updated and k_cache not)
        kc0 = np.asarray(cache_args[0])
        raw = bytearray(kc0.nbytes + 1)
        odd = np.frombuffer(raw, dtype=np.float32, offset=1, count=kc0.size).reshape(kc0.shape)
        odd[...] = kc0
        vbefore = np.asarray(cache_args[1]).copy()
        with pytest.raises(ValueError, match="aligned"):
            ta.flash_attn_with_kvcache(q.numpy(), odd, cache_args[1], k=kn.numpy(), v=vn.numpy(),
                                       cache_seqlens=seqlens.numpy())
        assert np.array_equal(np.asarray(cache_args[1]), vbefore)
    if kind == "torch":
        # a cache broadcast over the batch (stride 0, writable to torch) is read but never
        # appended to: every sequence's new keys would land in the one shared cache, where
        # the others read them (a silently wrong output until session 35)
        shared = cache_args[0][:1].expand(cache_args[0].shape)
        vbefore = cache_args[1].clone()
        with pytest.raises(ValueError, match="stride 0"):
            ta.flash_attn_with_kvcache(q, shared, cache_args[1], k=kn, v=vn,
                                       cache_seqlens=seqlens)
        assert torch.equal(cache_args[1], vbefore)
        out = ta.flash_attn_with_kvcache(q, shared, cache_args[1], cache_seqlens=5, causal=True)
        ref = ref_attention(q.transpose(1, 2), kc[:1, :5].expand(3, 5, -1, -1).transpose(1, 2),
                            vc[:, :5].transpose(1, 2), causal="bottom_right")[0]
        assert max_err(out, ref.transpose(1, 2)) <= FWD_TOL
    # cache_seqlens neither an int nor an array: a TypeError (a double free until session 33)
    for bad in ([3, 3], 3.0):
        with pytest.raises(TypeError):
            ta.flash_attn_with_kvcache(as_kind(q, kind), *cache_args, cache_seqlens=bad)


def test_kvcache_block_table_rows(kind):
    """A block table of another batch than q's is refused: the library reads B rows of it
    (a table of one row with a batch of 8 read past its end until session 33)."""
    (q, kn, vn, seqlens, table), _, caches = cache_case(kind, True)
    if not F["kvcache"]:
        return
    cache_args = [as_kind(t, kind) for t in caches]
    short = table[:1].clone() if isinstance(table, torch.Tensor) else table[:1].copy()
    with pytest.raises(ValueError, match="block_table has 1 rows"):
        ta.flash_attn_with_kvcache(as_kind(q, kind), *cache_args, cache_seqlens=as_kind(seqlens, kind),
                                   block_table=as_kind(short, kind))


# ---------------------------------------------------------------- variants

VARIANTS = {
    "window": (dict(window_size=(3, 1)), dict(window=(3, 1)), "window"),
    "softcap": (dict(softcap=2.0), dict(softcap=2.0), "soft-capping"),
    "alibi": (dict(alibi_slopes=torch.tensor([0.5, 0.25, 0.125, 0.0625])),
              dict(alibi=torch.tensor([0.5, 0.25, 0.125, 0.0625])), "ALiBi"),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("causal", [False, True])
def test_variants(kind, variant, causal):
    ours, theirs, name = VARIANTS[variant]
    ours = {key: as_kind(val, kind) if isinstance(val, torch.Tensor) else val
            for key, val in ours.items()}
    q, k, v = randn(2, 9, 4, 16, seed=1), randn(2, 11, 2, 16, seed=2), randn(2, 11, 2, 8, seed=3)
    args = [as_kind(t, kind) for t in (q, k, v)]
    if not F[variant]:
        with refused(variant, name):
            ta.flash_attn_func(*args, causal=causal, **ours)
        return
    out = ta.flash_attn_func(*args, causal=causal, **ours)
    ref = ref_attention(*(t.transpose(1, 2) for t in (q, k, v)),
                        causal="bottom_right" if causal else None, **theirs)[0]
    assert max_err(out, ref.transpose(1, 2)) <= FWD_TOL


def test_windows_wider_than_any_sequence(kind):
    """window_size bounds up to sys.maxsize see every key on that side (every key was
    blocked until session 33: the library's bounds overflowed)."""
    if not F["window"]:
        return
    q, k, v = randn(1, 4, 1, 8, seed=1), randn(1, 6, 1, 8, seed=2), randn(1, 6, 1, 8, seed=3)
    args = [as_kind(t, kind) for t in (q, k, v)]
    big = sys.maxsize
    for causal in (False, True):
        for win, same in (((big, big), (-1, -1)), ((big, 0), (100, 0)), ((0, big), (0, 100))):
            out = ta.flash_attn_func(*args, causal=causal, window_size=win)
            ref = ta.flash_attn_func(*args, causal=causal, window_size=same)
            assert max_err(out, ref) <= FWD_TOL, (causal, win)


def test_ints_beyond_a_c_long():
    """window_size bounds and max_seqlen beyond a C long are unbounded, and such a
    cache_seqlens is a ValueError (each raised OverflowError, outside the contract's
    ValueError / TypeError, until session 34)."""
    q, k, v = randn(1, 4, 1, 8, seed=1), randn(1, 6, 1, 8, seed=2), randn(1, 6, 1, 8, seed=3)
    huge = 2 ** 64
    if F["window"]:
        for win, same in (((huge, huge), (-1, -1)), ((huge, 0), (100, 0))):
            out = ta.flash_attn_func(q, k, v, window_size=win)
            assert max_err(out, ta.flash_attn_func(q, k, v, window_size=same)) <= FWD_TOL
        with pytest.raises(ValueError, match="window_size"):
            ta.flash_attn_func(q, k, v, window_size=(-huge, 0))
    if F["varlen"]:
        cu_q, cu_k = torch.tensor([0, 4]), torch.tensor([0, 6])
        out = ta.flash_attn_varlen_func(q[0], k[0], v[0], cu_q, cu_k, huge, huge)
        assert max_err(out, ta.flash_attn_varlen_func(q[0], k[0], v[0], cu_q, cu_k, 4, 6)) \
            <= FWD_TOL
    if F["kvcache"]:
        for bad in (huge, -huge):
            with pytest.raises(ValueError, match="cache_seqlens"):
                ta.flash_attn_with_kvcache(q, k, v, cache_seqlens=bad)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variants_autograd(variant):
    """Gradients through the variants (softcap's 1 - tanh^2 in dQ and dK; ALiBi slopes
    get none, as FlashAttention) against torch autograd of the oracle."""
    if not F[variant]:
        pytest.skip(f"the library has no {variant} yet (refusal: test_variants)")
    ours, theirs, _ = VARIANTS[variant]
    base = [randn(2, 9, 4, 16, seed=1), randn(2, 11, 2, 16, seed=2), randn(2, 11, 2, 8, seed=3)]
    mine = [t.clone().requires_grad_(True) for t in base]
    ref_in = [t.clone().requires_grad_(True) for t in base]
    out = ta.flash_attn_func(*mine, causal=True, **ours)
    ref = ref_attention(*(t.transpose(1, 2) for t in ref_in), causal="bottom_right",
                        **theirs)[0].transpose(1, 2)
    w = randn(*out.shape, seed=4)
    (out * w).sum().backward()
    (ref * w.double()).sum().backward()
    for a, b in zip(mine, ref_in):
        assert max_err(a.grad, b.grad) <= GRAD_TOL


# ---------------------------------------------------------- half precision

@pytest.mark.parametrize("dtype,tol", [("float16", 3e-3), ("bfloat16", 2e-2)])
def test_half_precision(kind, dtype, tol):
    if kind == "numpy" and dtype == "bfloat16":
        pytest.skip("NumPy has no bfloat16")
    tdt = getattr(torch, dtype)
    q, k, v = (randn(2, 3, 5, 16, seed=i).to(tdt) for i in range(3))
    args = [as_kind(t, kind) for t in (q, k, v)]
    if not F[dtype]:
        with refused(dtype, dtype):
            ta.scaled_dot_product_attention(*args)
        return
    out = ta.scaled_dot_product_attention(*args, is_causal=True)
    assert str(out.dtype).endswith(dtype)
    ref = ref_attention(q.float(), k.float(), v.float(), causal="top_left")[0]
    assert max_err(torch.as_tensor(np.asarray(out, dtype=np.float32) if kind == "numpy"
                                   else out.float()), ref) <= tol
    with pytest.raises(TypeError, match="dtype"):
        ta.scaled_dot_product_attention(args[0], args[1], as_kind(v.float(), kind))


@pytest.mark.parametrize("dtype,tol", [("float16", 3e-3), ("bfloat16", 2e-2)])
def test_half_precision_masks_and_grads(dtype, tol):
    """A float mask of the query's half dtype (as torch takes it), flash_attn_func, and
    gradients in the inputs' dtype."""
    if not F[dtype]:
        pytest.skip(f"the library has no {dtype} yet (refusal: test_half_precision)")
    tdt = getattr(torch, dtype)
    q, k, v = (randn(2, 3, 5, 16, seed=i).to(tdt).requires_grad_(True) for i in range(3))
    mask = randn(5, 5, seed=7).to(tdt)
    out = ta.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    ref_in = [t.detach().float().requires_grad_(True) for t in (q, k, v)]
    ref = ref_attention(*ref_in, mask=mask.float())[0]
    assert out.dtype == tdt and max_err(out.float(), ref) <= tol
    w = randn(*out.shape, seed=8)
    (out.float() * w).sum().backward()
    (ref * w.double()).sum().backward()
    for a, b in zip((q, k, v), ref_in):
        assert a.grad.dtype == tdt and max_err(a.grad.float(), b.grad) <= 4 * tol
    fl = ta.flash_attn_func(*(t.detach().transpose(1, 2) for t in (q, k, v)), causal=True)
    ref = ref_attention(*(t.detach().float() for t in (q, k, v)), causal="bottom_right")[0]
    assert fl.dtype == tdt and max_err(fl.float(), ref.transpose(1, 2)) <= tol
