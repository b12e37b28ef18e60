"""Chapter 10: the layer MLA is measured against -- multi-head, grouped-query and multi-query attention
with RoPE, decoding with a full cache or a sliding-window ring buffer.

:class:`GroupedQueryAttention` has ``num_heads`` query heads and ``num_kv_heads`` key/value heads
(Ainslie et al., 2023): ``num_kv_heads == num_heads`` is multi-head attention, ``1`` is multi-query
attention, anything between shares each key/value head among ``num_heads // num_kv_heads`` query
heads. The cache shrinks by that factor: per token and layer it holds ``2 * num_kv_heads * head_dim``
numbers (:func:`kv_cache_bytes_per_token`). With ``window`` set, the layer is a sliding-window layer
(:mod:`attention_course.windowed`) and decodes with a :class:`~attention_course.windowed.RingKVCache`,
whose size stops growing at ``window`` tokens.

A decode step groups the queries instead of copying the keys: queries ``(batch, num_kv_heads, group,
head_dim)`` against keys ``(batch, num_kv_heads, tokens, head_dim)``, so the cache is read once per
key/value head. Imports torch and the library's :mod:`~attention_course.kv_cache`,
:mod:`~attention_course.windowed` and :mod:`~attention_course.rope_scaling`.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn

from .kv_cache import PreallocatedKVCache
from .rope_scaling import apply_rope, rope_inverse_frequencies
from .windowed import RingKVCache, sliding_window_mask

__all__ = ["GroupedQueryAttention", "kv_cache_bytes_per_token"]


def kv_cache_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, bytes_per_number: int = 2) -> int:
    """``2 (keys and values) * num_layers * num_kv_heads * head_dim * bytes_per_number``."""
    return 2 * num_layers * num_kv_heads * head_dim * bytes_per_number


class GroupedQueryAttention(nn.Module):
    """Causal attention with ``num_heads`` query heads sharing ``num_kv_heads`` key/value heads, RoPE on
    queries and keys, and an optional sliding ``window``. ``forward(x)`` for ``(batch, num_tokens,
    d_model)``; ``decode_step(x_new, cache)`` for one token with :meth:`new_cache`'s cache."""

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, head_dim: int,
                 window: Optional[int] = None, base: float = 10000.0):
        super().__init__()
        if num_heads % num_kv_heads:
            raise ValueError(f"num_heads={num_heads} must be a multiple of num_kv_heads={num_kv_heads}")
        self.num_heads, self.num_kv_heads, self.head_dim, self.window = num_heads, num_kv_heads, head_dim, window
        self.group = num_heads // num_kv_heads
        self.W_q = nn.Linear(d_model, num_heads * head_dim, bias=False)
        self.W_k = nn.Linear(d_model, num_kv_heads * head_dim, bias=False)
        self.W_v = nn.Linear(d_model, num_kv_heads * head_dim, bias=False)
        self.W_o = nn.Linear(num_heads * head_dim, d_model, bias=False)
        self.register_buffer("inv_freq", rope_inverse_frequencies(head_dim, base), persistent=False)

    def _split(self, t: torch.Tensor, heads: int) -> torch.Tensor:  # (b, n, heads * hd) -> (b, heads, n, hd)
        return t.view(t.shape[0], t.shape[1], heads, self.head_dim).transpose(1, 2)

    def _qkv(self, x: torch.Tensor, positions: torch.Tensor) -> tuple:
        q = apply_rope(self._split(self.W_q(x), self.num_heads), positions, self.inv_freq)
        k = apply_rope(self._split(self.W_k(x), self.num_kv_heads), positions, self.inv_freq)
        return q, k, self._split(self.W_v(x), self.num_kv_heads)

    def _grouped(self, q: torch.Tensor) -> torch.Tensor:             # (b, h, n, hd) -> (b, kvh, group * n, hd)
        b, _, n, hd = q.shape
        return q.reshape(b, self.num_kv_heads, self.group * n, hd)

    def _out(self, context: torch.Tensor, n: int) -> torch.Tensor:  # (b, kvh, group * n, hd) -> (b, n, d_model)
        b = context.shape[0]
        context = context.reshape(b, self.num_heads, n, self.head_dim).transpose(1, 2)
        return self.W_o(context.reshape(b, n, self.num_heads * self.head_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        q, k, v = self._qkv(x, torch.arange(n))
        scores = self._grouped(q) @ k.transpose(-2, -1) / math.sqrt(self.head_dim)   # (b, kvh, group * n, n)
        mask = sliding_window_mask(n, self.window).repeat(self.group, 1)
        return self._out(torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v, n)

    def new_cache(self, batch: int, max_len: int):
        """A :class:`~attention_course.kv_cache.PreallocatedKVCache` of ``max_len`` tokens, or with a
        window a :class:`~attention_course.windowed.RingKVCache` of ``window`` slots."""
        dtype = self.W_q.weight.dtype
        if self.window is None:
            return PreallocatedKVCache(1, batch, self.num_kv_heads, max_len, self.head_dim, dtype)
        return RingKVCache(batch, self.num_kv_heads, self.head_dim, self.window, dtype=dtype)

    def decode_step(self, x_new: torch.Tensor, cache) -> torch.Tensor:
        """The output for one new token at the next position; appends its key and value to ``cache``."""
        if x_new.shape[1] != 1:
            raise ValueError(f"decode_step takes one token, got x_new {tuple(x_new.shape)}")
        position = cache.seen if isinstance(cache, RingKVCache) else cache.seen(0)
        q, k, v = self._qkv(x_new, torch.tensor([position]))
        if isinstance(cache, RingKVCache):
            keys, values, _ = cache.append(k, v)
        else:
            keys, values = cache.append(0, k, v)
        scores = self._grouped(q) @ keys.transpose(-2, -1) / math.sqrt(self.head_dim)
        return self._out(torch.softmax(scores, dim=-1) @ values, 1)
