"""The seed documents' PyTorch code, in one place.

Two pieces, copied verbatim from the seed documents (only the whitespace on blank lines
is dropped):

  scaled_dot_product_attention   the first seed (shared/seeds/000_*.txt): einsum, scale,
                                 masked_fill_ with -inf, softmax, einsum; returns the
                                 output and the weights.
  SelfAttention                  the second seed (shared/seeds/001_*.txt, "How to
                                 Implement Self Attention in PyTorch"): the layer the
                                 seed layout must reproduce.

Used by the fixture generators (tools/fixtures_sdpa.py, tools/fixtures_layers.py,
tools/fixtures_layers_grad.py) and by the torch peer of `tensorattn bench`
(bench/peers/torch_seed.py), so that the code the fixtures check and the code the bench
times are the same code. Keep it verbatim: it is the reference, not ours to improve.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---- the first seed document's function, verbatim --------------------------------
def scaled_dot_product_attention(Q, K, V, mask=None):
    """Calculates scaled dot-product attention."""
    head_dim = Q.size(-1)

    # 1. MatMul Q and K^T and scale
    # Resulting shape: [batch, num_heads, seq_len, seq_len]
    scores = torch.einsum('bhid,bhjd->bhij', Q, K) / (head_dim ** 0.5)

    # 2. Apply optional mask
    if mask is not None:
        scores.masked_fill_(mask, float('-inf'))

    # 3. Apply softmax to get attention weights
    # Softmax is applied on the last dimension (keys)
    weights = F.softmax(scores, dim=-1)

    # 4. MatMul weights and V
    # Resulting shape: [batch, num_heads, seq_len, head_dim]
    output = torch.einsum('bhij,bhjd->bhid', weights, V)

    return output, weights
# ------------------------------------------------------------------------------------


# ---- the second seed document's class, verbatim ----------------------------------
class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super(SelfAttention, self).__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads

        self.values = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.keys = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.queries = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, queries, mask=None):
        N = queries.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], queries.shape[1]

        # Split embedding into self.heads pieces
        values = values.reshape(N, value_len, self.heads, self.head_dim)
        keys = keys.reshape(N, key_len, self.heads, self.head_dim)
        queries = queries.reshape(N, query_len, self.heads, self.head_dim)

        values = self.values(values)
        keys = self.keys(keys)
        queries = self.queries(queries)

        # Einsum does batch matrix multiplication for query*keys for each head
        energy = torch.einsum("nqhd,nkhd->nhqk", [queries, keys])

        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-1e20"))

        attention = torch.softmax(energy / (self.head_dim ** 0.5), dim=3)

        out = torch.einsum("nhql,nlhd->nqhd", [attention, values]).reshape(
            N, query_len, self.heads * self.head_dim
        )

        out = self.fc_out(out)
        return out
# ------------------------------------------------------------------------------------
