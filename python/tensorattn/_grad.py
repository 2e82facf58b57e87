"""Autograd for tensorattn's attention calls: a torch.autograd.Function whose forward runs
tensorattn's forward (keeping the output O and the log-sum-exp, not the weights) and whose
backward runs tensorattn's backward (FlashAttention-2 style: P recomputed from Q, K and
the LSE).

Gradients flow through the output and, when it is returned, the LSE: the LSE's gradient
g_i adds g_i * P_ij to dS_ij, which the backward folds in by appending one column to V
(zeros), to O (ones: sum_j P_ij) and to dO (-g_i), so that its D_i = rowsum(dO * O)
becomes D_i - g_i and dS_ij = P_ij * (dP_ij - D_i + g_i). attn_mask gets no gradient
(NotImplementedError if it requires one); ALiBi slopes none (as FlashAttention)."""

import torch
from torch.autograd.function import once_differentiable

from . import _C


def _lse_column(lse, layout):
    """lse in the shape of O's rows plus a last dim of 1."""
    if layout == 0:  # [..., H, Lq] beside O [..., H, Lq, Dv]
        return lse.unsqueeze(-1)
    if layout == 1:  # [B, H, Lq] beside O [B, Lq, H, Dv]
        return lse.transpose(1, 2).unsqueeze(-1)
    return lse.transpose(0, 1).unsqueeze(-1)  # varlen: [H, Tq] beside O [Tq, H, Dv]


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, layout, opts):
        out, lse = _C.attention(layout, q, k, v, True, mask, *opts)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mask, ctx.layout, ctx.opts = mask, layout, opts
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        if dout is None:
            dout = torch.zeros_like(out)
        if dlse is not None:
            g = _lse_column(dlse.to(out.dtype), ctx.layout)
            v = torch.cat([v, v.new_zeros(v.shape[:-1] + (1,))], dim=-1)
            out = torch.cat([out, out.new_ones(out.shape[:-1] + (1,))], dim=-1)
            dout = torch.cat([dout, -g], dim=-1)
        dq, dk, dv = _C.attention_backward(ctx.layout, dout, q, k, v, out, lse, ctx.mask,
                                           *ctx.opts)
        if dlse is not None:
            dv = dv[..., :-1]
        return dq, dk, dv, None, None, None


def attention(layout, q, k, v, return_lse, mask, opts):
    """The differentiable call: (out, lse) if return_lse else out."""
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)):
        raise TypeError("q, k and v must all be torch tensors when one of them requires "
                        "grad (not a mix with NumPy arrays)")
    if mask is not None and getattr(mask, "requires_grad", False):
        raise NotImplementedError(
            "attn_mask requires grad, but tensorattn's backward gives no gradient for "
            "the mask; detach it (or use torch's scaled_dot_product_attention)")
    out, lse = _Attention.apply(q, k, v, mask, layout, opts)
    return (out, lse) if return_lse else out
