"""Multi-head causal self-attention layers (Chapter 6), reused by the benchmark.

Three layers that compute the **same function** when given the same weights:

* :class:`MultiHeadAttentionWrapper` -- ``num_heads`` independent single-head
  :class:`CausalAttention` modules, each ``head_dim = d_out // num_heads`` wide, run one
  after the other; their outputs are concatenated (width ``num_heads * head_dim =
  d_out``) and mixed by an output projection ``out_proj``.
* :class:`MultiHeadAttention` -- the efficient layer: one ``d_in -> d_out`` projection
  each for queries, keys and values, reshaped to ``(batch, num_heads, num_tokens,
  head_dim)``, one batched matmul for all heads (scores, causal mask, softmax, dropout,
  weighted values written out by hand), heads merged back, then ``out_proj``.
* :class:`SDPAMultiHeadAttention` -- the same layer (same parameters, same
  ``state_dict``) whose core is :func:`torch.nn.functional.scaled_dot_product_attention`
  with ``is_causal=True``, which never stores the ``(num_tokens, num_tokens)`` weights.

Conventions (the same as Chapter 5): a boolean mask is ``True`` where a query must
**not** attend to a key; the causal mask is a non-persistent buffer named ``mask`` of
shape ``(context_length, context_length)``, sliced for shorter inputs; dropout acts on
the attention weights. Row ``h * head_dim + i`` of the efficient layer's ``W_query``
(and ``W_key``, ``W_value``) is row ``i`` of head ``h``'s projection in the wrapper:
:func:`copy_wrapper_weights` does this mapping.

Errors: ``d_out`` not divisible by ``num_heads`` raises ``ValueError`` naming both and
their values; an input longer than ``context_length`` raises ``ValueError`` naming
``num_tokens`` and ``context_length``.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["head_dim_of", "CausalAttention", "MultiHeadAttentionWrapper", "MultiHeadAttention",
           "SDPAMultiHeadAttention", "copy_wrapper_weights"]


def head_dim_of(d_out: int, num_heads: int) -> int:
    """``d_out // num_heads``, or ``ValueError`` naming both when it does not divide."""
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive integer, got num_heads={num_heads!r}")
    if d_out % num_heads != 0:
        raise ValueError(f"d_out must be divisible by num_heads, got d_out={d_out} and "
                         f"num_heads={num_heads} (d_out % num_heads = {d_out % num_heads})")
    return d_out // num_heads


def _causal_buffer(context_length: int) -> torch.Tensor:
    return torch.ones(context_length, context_length, dtype=torch.bool).triu(1)


def _check_length(num_tokens: int, context_length: int) -> None:
    if num_tokens > context_length:
        raise ValueError(f"num_tokens={num_tokens} exceeds context_length={context_length}")


class CausalAttention(nn.Module):
    """One causal attention head (Chapter 5's layer); ``forward(x)`` -> ``(batch, tokens, d_out)``.

    ``forward(x, return_weights=True)`` also returns the weights ``(batch, tokens, tokens)``
    (before dropout).
    """

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float = 0.0,
                 qkv_bias: bool = False):
        super().__init__()
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", _causal_buffer(context_length), persistent=False)

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        num_tokens = x.shape[1]
        _check_length(num_tokens, self.context_length)
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])
        scores = scores.masked_fill(self.mask[:num_tokens, :num_tokens], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = self.dropout(weights) @ v
        return (out, weights) if return_weights else out


class MultiHeadAttentionWrapper(nn.Module):
    """``num_heads`` single heads of width ``d_out // num_heads``, concatenated, then ``out_proj``.

    ``forward(x, return_weights=True)`` also returns the weights stacked as
    ``(batch, num_heads, tokens, tokens)``.
    """

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float = 0.0,
                 num_heads: int = 1, qkv_bias: bool = False):
        super().__init__()
        self.head_dim = head_dim_of(d_out, num_heads)
        self.num_heads = num_heads
        self.heads = nn.ModuleList(
            CausalAttention(d_in, self.head_dim, context_length, dropout, qkv_bias)
            for _ in range(num_heads))
        self.out_proj = nn.Linear(num_heads * self.head_dim, d_out)

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        if not return_weights:
            # Head h fills columns h*head_dim ... (h+1)*head_dim - 1 of the concatenation.
            return self.out_proj(torch.cat([head(x) for head in self.heads], dim=-1))
        results = [head(x, return_weights=True) for head in self.heads]
        context = torch.cat([out for out, _ in results], dim=-1)
        return self.out_proj(context), torch.stack([w for _, w in results], dim=1)


class MultiHeadAttention(nn.Module):
    """The efficient layer: every head in one projection and one batched matmul.

    Parameters ``W_query``, ``W_key``, ``W_value`` (``nn.Linear(d_in, d_out,
    bias=qkv_bias)``) and ``out_proj`` (``nn.Linear(d_out, d_out)``); a non-persistent
    causal buffer ``mask``. ``forward(x)`` maps ``(batch, num_tokens, d_in)`` to
    ``(batch, num_tokens, d_out)``; ``forward(x, return_weights=True)`` also returns the
    weights ``(batch, num_heads, num_tokens, num_tokens)`` (before dropout).
    """

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float = 0.0,
                 num_heads: int = 1, qkv_bias: bool = False):
        super().__init__()
        self.head_dim = head_dim_of(d_out, num_heads)
        self.num_heads, self.d_out, self.context_length = num_heads, d_out, context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", _causal_buffer(context_length), persistent=False)

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        # (b, n, d_out) -> (b, n, heads, head_dim) -> (b, heads, n, head_dim)
        batch, num_tokens, _ = t.shape
        return t.view(batch, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)

    def _merge(self, t: torch.Tensor) -> torch.Tensor:
        # (b, heads, n, head_dim) -> (b, n, heads, head_dim) -> (b, n, d_out)
        batch, _, num_tokens, _ = t.shape
        return t.transpose(1, 2).reshape(batch, num_tokens, self.d_out)

    def _core(self, q, k, v, num_tokens):
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(self.mask[:num_tokens, :num_tokens], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return self.dropout(weights) @ v, weights

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        num_tokens = x.shape[1]
        _check_length(num_tokens, self.context_length)
        q = self._split(self.W_query(x))
        k = self._split(self.W_key(x))
        v = self._split(self.W_value(x))
        context, weights = self._core(q, k, v, num_tokens)
        out = self.out_proj(self._merge(context))
        return (out, weights) if return_weights else out


class SDPAMultiHeadAttention(MultiHeadAttention):
    """:class:`MultiHeadAttention` with its core replaced by PyTorch's fused kernel.

    Same parameters and ``state_dict``; the weights are never materialised, so
    ``return_weights=True`` is refused.
    """

    def _core(self, q, k, v, num_tokens):
        p = self.dropout.p if self.training else 0.0
        # is_causal builds the same top-left-aligned mask as our buffer (queries == keys here).
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True), None

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        if return_weights:
            raise ValueError("SDPAMultiHeadAttention does not form the attention weights; "
                             "use MultiHeadAttention with return_weights=True")
        return super().forward(x)


@torch.no_grad()
def copy_wrapper_weights(wrapper: MultiHeadAttentionWrapper, layer: MultiHeadAttention) -> MultiHeadAttention:
    """Load ``wrapper``'s weights into ``layer`` (head h -> rows h*head_dim ...); returns ``layer``."""
    if (wrapper.num_heads, wrapper.head_dim) != (layer.num_heads, layer.head_dim):
        raise ValueError(f"wrapper has num_heads={wrapper.num_heads}, head_dim={wrapper.head_dim} but "
                         f"layer has num_heads={layer.num_heads}, head_dim={layer.head_dim}")
    for name in ("W_query", "W_key", "W_value"):
        target = getattr(layer, name)
        target.weight.copy_(torch.cat([getattr(h, name).weight for h in wrapper.heads], dim=0))
        if target.bias is not None:
            target.bias.copy_(torch.cat([getattr(h, name).bias for h in wrapper.heads], dim=0))
    layer.out_proj.load_state_dict(wrapper.out_proj.state_dict())
    return layer
