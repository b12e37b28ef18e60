"""Chapter 10: multi-head latent attention (MLA, DeepSeek-V2), its compressed cache and absorbed weights.

Multi-head attention caches ``2 * num_heads * head_dim`` numbers per token and layer; grouped-query
attention shares keys and values between heads to cache fewer. MLA (DeepSeek-AI, 2024) caches one
small **latent** per token instead, ``c = x W_dkv`` of ``kv_latent_dim`` numbers, and rebuilds every
head's keys and values from it with up-projections ``W_uk``, ``W_uv``. The cache per token and layer
is ``kv_latent_dim + rope_dim`` numbers (DeepSeek-V2/V3: 512 + 64 against 2 x 128 heads x 128 for
their heads uncompressed).

**Decoupled RoPE.** RoPE rotates keys by their position, and a rotation between ``W_uk`` and the
query would stop ``W_uk`` from being folded into the query (below). So the rotated part of every key
is computed apart, ``k_rope = RoPE(x W_kr)`` of ``rope_dim`` numbers *shared by all heads* and cached
beside the latent; each head's query has a content part (dot product with the content keys
``c W_uk``) and a rotated part of ``rope_dim`` (dot product with ``k_rope``). The score of head ``h``
is ``(q_c . k_c + q_r . k_rope) / sqrt(head_dim + rope_dim)``.

**Absorption.** ``q_c . (W_uk,h c_j) = (W_uk,h^T q_c) . c_j``: a decode step can turn the query into
the latent space once and score it against the cached latents directly, never building the keys;
likewise ``sum_j w_j W_uv,h c_j = W_uv,h (sum_j w_j c_j)`` lets it average the latents and
up-project once. :meth:`MultiHeadLatentAttention.decode_step` does it both ways
(``absorb=False``: rebuild keys and values from the cache; ``absorb=True``: work in the latent space)
and both equal :meth:`~MultiHeadLatentAttention.forward`, the uncompressed computation.

Simplifications against DeepSeek-V2: no low-rank compression of the queries, no normalisation of
the latent, one layer. Positions are 0, 1, 2, ... from the first token. Imports torch and
:mod:`attention_course.rope_scaling`.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .rope_scaling import apply_rope, rope_inverse_frequencies

__all__ = ["MultiHeadLatentAttention", "LatentKVCache", "mla_cache_bytes_per_token"]


def mla_cache_bytes_per_token(num_layers: int, kv_latent_dim: int, rope_dim: int, bytes_per_number: int = 2) -> int:
    """``num_layers * (kv_latent_dim + rope_dim) * bytes_per_number``."""
    return num_layers * (kv_latent_dim + rope_dim) * bytes_per_number


class LatentKVCache:
    """One MLA layer's cache: the latents ``(batch, max_len, kv_latent_dim)`` and the shared rotated
    keys ``(batch, max_len, rope_dim)``, allocated once and filled in place."""

    def __init__(self, batch: int, kv_latent_dim: int, rope_dim: int, max_len: int,
                 dtype: torch.dtype = torch.float32):
        self.latents = torch.zeros(batch, max_len, kv_latent_dim, dtype=dtype)
        self.rope_keys = torch.zeros(batch, max_len, rope_dim, dtype=dtype)
        self.length = 0

    def append(self, latent: torch.Tensor, rope_key: torch.Tensor) -> tuple:
        start, stop = self.length, self.length + latent.shape[1]
        if stop > self.latents.shape[1]:
            raise ValueError(f"{stop} tokens exceed the cache's max_len={self.latents.shape[1]}")
        self.latents[:, start:stop] = latent
        self.rope_keys[:, start:stop] = rope_key
        self.length = stop
        return self.latents[:, :stop], self.rope_keys[:, :stop]

    def nbytes(self) -> int:
        """Bytes of the filled part (what ``length`` tokens need)."""
        per_token = self.latents.shape[-1] + self.rope_keys.shape[-1]
        return self.latents.shape[0] * self.length * per_token * self.latents.element_size()


class MultiHeadLatentAttention(nn.Module):
    """Causal MLA: ``forward(x)`` for ``x`` ``(batch, num_tokens, d_model)`` (keys and values built for
    every head, the uncompressed computation) and ``decode_step(x_new, cache, absorb)`` for one new token
    ``(batch, 1, d_model)`` with a :class:`LatentKVCache` (:meth:`new_cache`)."""

    def __init__(self, d_model: int, num_heads: int, head_dim: int, kv_latent_dim: int, rope_dim: int,
                 base: float = 10000.0):
        super().__init__()
        self.num_heads, self.head_dim, self.kv_latent_dim, self.rope_dim = num_heads, head_dim, kv_latent_dim, rope_dim
        self.W_q = nn.Linear(d_model, num_heads * head_dim, bias=False)       # content queries
        self.W_qr = nn.Linear(d_model, num_heads * rope_dim, bias=False)      # rotated queries, one per head
        self.W_dkv = nn.Linear(d_model, kv_latent_dim, bias=False)            # down to the latent (cached)
        self.W_kr = nn.Linear(d_model, rope_dim, bias=False)                  # rotated key, shared (cached)
        self.W_uk = nn.Linear(kv_latent_dim, num_heads * head_dim, bias=False)  # latent -> content keys
        self.W_uv = nn.Linear(kv_latent_dim, num_heads * head_dim, bias=False)  # latent -> values
        self.W_o = nn.Linear(num_heads * head_dim, d_model, bias=False)
        self.register_buffer("inv_freq", rope_inverse_frequencies(rope_dim, base), persistent=False)
        self.scale = 1.0 / math.sqrt(head_dim + rope_dim)

    def _heads(self, t: torch.Tensor, size: int) -> torch.Tensor:   # (b, n, h * size) -> (b, h, n, size)
        return t.view(t.shape[0], t.shape[1], self.num_heads, size).transpose(1, 2)

    def _project(self, x: torch.Tensor, positions: torch.Tensor) -> tuple:
        """Content queries, rotated queries (per head), latents and the shared rotated keys."""
        q_c = self._heads(self.W_q(x), self.head_dim)
        q_r = apply_rope(self._heads(self.W_qr(x), self.rope_dim), positions, self.inv_freq)
        return q_c, q_r, self.W_dkv(x), apply_rope(self.W_kr(x), positions, self.inv_freq)

    def _merge(self, context: torch.Tensor) -> torch.Tensor:           # (b, h, n, head_dim) -> (b, n, d_model)
        b, _, n, _ = context.shape
        return self.W_o(context.transpose(1, 2).reshape(b, n, self.num_heads * self.head_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        q_c, q_r, latent, k_r = self._project(x, torch.arange(n))
        k_c = self._heads(self.W_uk(latent), self.head_dim)
        v = self._heads(self.W_uv(latent), self.head_dim)
        scores = (q_c @ k_c.transpose(-2, -1) + q_r @ k_r[:, None].transpose(-2, -1)) * self.scale
        causal = torch.ones(n, n, dtype=torch.bool).triu(1)
        weights = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
        return self._merge(weights @ v)

    def new_cache(self, batch: int, max_len: int) -> LatentKVCache:
        return LatentKVCache(batch, self.kv_latent_dim, self.rope_dim, max_len, dtype=self.W_q.weight.dtype)

    def decode_step(self, x_new: torch.Tensor, cache: LatentKVCache, absorb: bool = False) -> torch.Tensor:
        """The output for one new token at position ``cache.length``; appends its latent and rotated key."""
        if x_new.shape[1] != 1:
            raise ValueError(f"decode_step takes one token, got x_new {tuple(x_new.shape)}")
        q_c, q_r, latent, k_r = self._project(x_new, torch.tensor([cache.length]))
        latents, rope_keys = cache.append(latent, k_r)                 # (b, T, kv_latent), (b, T, rope_dim)
        # every head reads the same cache: the heads become the rows of one product (like multi-query
        # attention), so the cache is read once and never copied per head
        rope_scores = q_r[:, :, 0] @ rope_keys.transpose(-2, -1)       # (b, h, T)
        if not absorb:                                                 # rebuild every head's keys and values
            k_c = self._heads(self.W_uk(latents), self.head_dim)
            v = self._heads(self.W_uv(latents), self.head_dim)
            scores = (q_c @ k_c.transpose(-2, -1) + rope_scores[:, :, None]) * self.scale
            return self._merge(torch.softmax(scores, dim=-1) @ v)
        W_uk = self.W_uk.weight.view(self.num_heads, self.head_dim, self.kv_latent_dim)
        W_uv = self.W_uv.weight.view(self.num_heads, self.head_dim, self.kv_latent_dim)
        q_latent = (q_c @ W_uk)[:, :, 0]                               # (b, h, kv_latent): W_uk,h^T q_c
        scores = (q_latent @ latents.transpose(-2, -1) + rope_scores) * self.scale      # (b, h, T)
        context_latent = torch.softmax(scores, dim=-1) @ latents       # (b, h, kv_latent): sum_j w_j c_j
        return self._merge(context_latent[:, :, None] @ W_uv.transpose(-2, -1))   # W_uv,h (sum_j w_j c_j)
