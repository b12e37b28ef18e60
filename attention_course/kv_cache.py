"""Attention at scale (Chapter 9), the key-value cache: caches, cached attention and a tiny
language model that generates with them (:mod:`attention_course.efficient` re-exports every
name, so ``eff.KVCache``, ``eff.TinyCausalLM``, ``eff.generate`` & co. work as before).

* :class:`TinyCausalLM` -- a small decoder-only language model built from Chapter 6's
  :class:`attention_course.multihead.MultiHeadAttention` layer (pre-norm blocks with an
  MLP), with two ways to generate greedily: recomputing the whole sequence at every step
  (:meth:`TinyCausalLM.forward`) or keeping each layer's keys and values in a
  :class:`KVCache` (:meth:`TinyCausalLM.forward_cached`). :func:`generate` runs either.
* Three caches with one interface (``append(layer, k, v)`` returns the keys and values to
  attend to; ``seen(layer)`` counts the tokens fed so far; ``nbytes()``): :class:`KVCache`
  grows by ``torch.cat``, a copy of the whole cache at every step;
  :class:`PreallocatedKVCache` allocates ``(batch, num_heads, max_len, head_dim)`` once and
  writes each step in place; :class:`SlidingWindowKVCache` keeps only the last ``window``
  tokens in a ring buffer of ``window`` slots (Mistral's rolling buffer), so its size is
  bounded; with it, :func:`cached_self_attention` applies the sliding-window mask (each
  token sees itself and the ``window - 1`` tokens before it).

A key-value cache stores keys and values as ``(batch, num_heads, tokens, head_dim)`` and grows
along the tokens axis (``dim=2``).

The cached attention here handles the two cases greedy generation meets: a prompt
processed into an empty cache (ordinary causal self-attention), and one new token at a
time (it may see every cached key, so it needs no mask). Several new tokens after a
non-empty cache need Chapter 5's offset causal mask; the chapter leaves that case to an
exercise, and :meth:`KVCache`-based attention here refuses it with a clear error.

This module imports only torch and :mod:`attention_course.multihead`: it ships to the
grading child with the rest of the package and holds no check and no reference answer.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import torch
from torch import nn

from . import multihead as mh

__all__ = ["KVCache", "PreallocatedKVCache", "SlidingWindowKVCache", "sliding_window_mask",
           "cached_self_attention", "TinyCausalLM", "generate"]


class KVCache:
    """Keys and values of every layer, each ``(batch, num_heads, tokens, head_dim)``.

    ``append(layer, k, v)`` concatenates the new tokens' keys and values along the
    tokens axis (``dim=2``) and returns the layer's full keys and values. Each append
    copies the whole cache into a new tensor: O(n) work per token, O(n^2) over a
    generation (:class:`PreallocatedKVCache` avoids the copy).
    """

    window = None

    def __init__(self, num_layers: int):
        self.keys: list = [None] * num_layers
        self.values: list = [None] * num_layers

    def __len__(self) -> int:
        """The number of tokens cached (0 when empty)."""
        return self.seen(0)

    def seen(self, layer: int) -> int:
        """The number of tokens fed to ``layer`` so far."""
        return 0 if self.keys[layer] is None else self.keys[layer].shape[2]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple:
        if self.keys[layer] is None:
            self.keys[layer], self.values[layer] = k, v
        else:
            self.keys[layer] = torch.cat([self.keys[layer], k], dim=2)
            self.values[layer] = torch.cat([self.values[layer], v], dim=2)
        return self.keys[layer], self.values[layer]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values if t is not None)


class _SlotsKVCache:
    """Keys and values in ``slots`` positions per layer, allocated once; what the two caches
    below share. ``lengths[layer]`` counts the tokens a layer has seen."""

    def __init__(self, num_layers: int, batch: int, num_heads: int, slots: int, head_dim: int,
                 dtype: torch.dtype):
        shape = (batch, num_heads, slots, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype) for _ in range(num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype) for _ in range(num_layers)]
        self.lengths = [0] * num_layers

    def __len__(self) -> int:
        return self.lengths[0]

    def seen(self, layer: int) -> int:
        return self.lengths[layer]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)


class PreallocatedKVCache(_SlotsKVCache):
    """The same cache with its memory reserved up front.

    Each layer's keys and values are allocated once as ``(batch, num_heads, max_len,
    head_dim)``; ``append`` writes the new tokens into the next free positions (no copy of
    the old ones, no new allocation) and returns views of the filled part. Appending past
    ``max_len`` raises ``ValueError``. ``nbytes()`` counts the whole reservation.
    """

    window = None

    def __init__(self, num_layers: int, batch: int, num_heads: int, max_len: int, head_dim: int,
                 dtype: torch.dtype = torch.float32):
        super().__init__(num_layers, batch, num_heads, max_len, head_dim, dtype)
        self.max_len = max_len

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple:
        start, stop = self.lengths[layer], self.lengths[layer] + k.shape[2]
        if stop > self.max_len:
            raise ValueError(f"{stop} tokens exceed the cache's max_len={self.max_len}")
        self.keys[layer][:, :, start:stop] = k          # in place: the old positions are not touched
        self.values[layer][:, :, start:stop] = v
        self.lengths[layer] = stop
        return self.keys[layer][:, :, :stop], self.values[layer][:, :, :stop]


class SlidingWindowKVCache(_SlotsKVCache):
    """A ring buffer of the last ``window`` tokens' keys and values per layer.

    Token ``p`` goes to slot ``p % window``, overwriting token ``p - window``, which no
    later token may see under the sliding-window mask. So the cache never holds more than
    ``window`` positions, however long the generation. ``append`` of one token returns the
    filled slots (in slot order: attention without positional terms in the scores does
    not depend on the order of the keys); a prompt into an empty cache returns all of the
    prompt's keys and values (:func:`cached_self_attention` then masks the band) and keeps
    its last ``window`` ones. Several new tokens after a non-empty cache are refused.
    """

    def __init__(self, num_layers: int, batch: int, num_heads: int, window: int, head_dim: int,
                 dtype: torch.dtype = torch.float32):
        if window < 1:
            raise ValueError(f"window must be at least 1, got window={window}")
        super().__init__(num_layers, batch, num_heads, window, head_dim, dtype)
        self.window = window

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple:
        n_past, n_new, w = self.lengths[layer], k.shape[2], self.window
        if n_past and n_new > 1:
            raise ValueError(f"SlidingWindowKVCache takes a prompt into an empty cache or one token at a time, "
                             f"got {n_new} new tokens after {n_past}")
        keep = min(n_new, w)                            # only the last `window` tokens are kept
        slots = [p % w for p in range(n_past + n_new - keep, n_past + n_new)]
        self.keys[layer][:, :, slots] = k[:, :, n_new - keep:]
        self.values[layer][:, :, slots] = v[:, :, n_new - keep:]
        self.lengths[layer] = n_past + n_new
        if n_new > 1:
            return k, v
        filled = min(n_past + 1, w)
        return self.keys[layer][:, :, :filled], self.values[layer][:, :, :filled]


def sliding_window_mask(num_tokens: int, window: Optional[int]) -> torch.Tensor:
    """``(num_tokens, num_tokens)`` bool mask, ``True`` = hidden: the causal mask, and with a
    ``window`` also every key ``window`` or more positions before the query."""
    hidden = torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1)
    if window is not None:
        hidden |= torch.ones(num_tokens, num_tokens, dtype=torch.bool).tril(-window)
    return hidden


def cached_self_attention(layer: mh.MultiHeadAttention, x_new: torch.Tensor, cache,
                          index: int) -> torch.Tensor:
    """Chapter 6's ``layer`` applied to the new tokens ``x_new`` ``(batch, n_new, d_in)``,
    attending to the cached tokens and to themselves; appends their keys and values to
    ``cache`` (layer ``index``; any of the three caches). Handles a prompt into an empty
    cache (causal, and banded when the cache has a ``window``) and one new token after it
    (no mask needed: a sliding-window cache holds only the keys it may see)."""
    batch, n_new, _ = x_new.shape
    n_past = cache.seen(index)
    if n_past and n_new > 1:
        raise ValueError(f"{n_new} new tokens after {n_past} cached ones need the offset causal mask "
                         f"of Chapter 5; this helper handles a prompt into an empty cache or one token")
    if n_past + n_new > layer.context_length:
        raise ValueError(f"num_tokens={n_past + n_new} exceeds context_length={layer.context_length}")

    def heads(t):   # (batch, n_new, d_out) -> (batch, heads, n_new, head_dim)
        return t.view(batch, n_new, layer.num_heads, layer.head_dim).transpose(1, 2)

    q = heads(layer.W_query(x_new))
    k, v = cache.append(index, heads(layer.W_key(x_new)), heads(layer.W_value(x_new)))
    scores = q @ k.transpose(-2, -1) / math.sqrt(layer.head_dim)
    if n_new > 1:                         # the prompt: ordinary causal self-attention
        scores = scores.masked_fill(sliding_window_mask(n_new, cache.window), float("-inf"))
    context = torch.softmax(scores, dim=-1) @ v
    return layer.out_proj(context.transpose(1, 2).reshape(batch, n_new, layer.d_out))


class _Block(nn.Module):
    """Pre-norm block: ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``."""

    def __init__(self, d_model: int, num_heads: int, context_length: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = mh.MultiHeadAttention(d_model, d_model, context_length, 0.0, num_heads)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))

    def forward_cached(self, x_new, cache: KVCache, index: int):
        x = x_new + cached_self_attention(self.attn, self.norm1(x_new), cache, index)
        return x + self.mlp(self.norm2(x))


class TinyCausalLM(nn.Module):
    """A small decoder-only language model on Chapter 6's causal multi-head layer.

    Token and learned position embeddings, ``num_layers`` pre-norm blocks, a final layer
    norm and a linear head to ``vocab_size`` logits. ``forward(ids)`` maps token ids
    ``(batch, tokens)`` to logits ``(batch, tokens, vocab_size)``, recomputing everything;
    ``forward_cached(new_ids, cache)`` computes only the new tokens' logits and extends
    ``cache``. Both give the same logits for the same tokens.
    """

    def __init__(self, vocab_size: int = 64, d_model: int = 64, num_heads: int = 4, num_layers: int = 2,
                 context_length: int = 128):
        super().__init__()
        self.context_length, self.num_layers = context_length, num_layers
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(context_length, d_model)
        self.blocks = nn.ModuleList(_Block(d_model, num_heads, context_length) for _ in range(num_layers))
        self.final_norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def _embed(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        if start + ids.shape[1] > self.context_length:
            raise ValueError(f"num_tokens={start + ids.shape[1]} exceeds context_length={self.context_length}")
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)
        return self.token_embedding(ids) + self.position_embedding(positions)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self._embed(ids, 0)
        for block in self.blocks:
            x = block(x)
        return self.head(self.final_norm(x))

    def new_cache(self, kind: str = "concat", batch: int = 1, max_len: Optional[int] = None,
                  window: Optional[int] = None):
        """An empty cache for this model: ``"concat"`` (:class:`KVCache`), ``"preallocated"``
        (``max_len`` positions, the context length by default) or ``"window"`` (the last
        ``window`` tokens)."""
        attn = self.blocks[0].attn
        shape = dict(num_layers=self.num_layers, batch=batch, num_heads=attn.num_heads, head_dim=attn.head_dim,
                     dtype=self.head.weight.dtype)
        if kind == "concat":
            return KVCache(self.num_layers)
        if kind == "preallocated":
            return PreallocatedKVCache(max_len=max_len or self.context_length, **shape)
        if kind == "window":
            if window is None:
                raise ValueError('new_cache(kind="window") needs window=...')
            return SlidingWindowKVCache(window=window, **shape)
        raise ValueError(f'kind must be "concat", "preallocated" or "window", got {kind!r}')

    def forward_cached(self, new_ids: torch.Tensor, cache: KVCache) -> torch.Tensor:
        x = self._embed(new_ids, len(cache))       # the new tokens sit after the cached ones
        for index, block in enumerate(self.blocks):
            x = block.forward_cached(x, cache, index)
        return self.head(self.final_norm(x))


@torch.no_grad()
def generate(model: TinyCausalLM, prompt: torch.Tensor, num_new: int, use_cache: bool,
             on_token: Optional[Callable[[int], None]] = None, cache_kind: str = "concat") -> torch.Tensor:
    """Greedy generation: append ``num_new`` argmax tokens to ``prompt`` ``(batch, tokens)``.

    Without the cache every step runs the model on the whole sequence so far and keeps
    the last position's logits; with it, the prompt fills the cache once and every step
    feeds only the newest token. ``on_token(step)`` is called after each new token
    (the benchmark times the steps with it). ``cache_kind`` chooses the cache
    (:meth:`TinyCausalLM.new_cache`; ``"preallocated"`` reserves the prompt plus ``num_new``).
    """
    ids = prompt
    cache = None
    if use_cache:
        cache = model.new_cache(cache_kind, batch=prompt.shape[0], max_len=prompt.shape[1] + num_new)
    fresh = prompt
    for step in range(num_new):
        if use_cache:
            logits = model.forward_cached(fresh, cache)[:, -1]
        else:
            logits = model(ids)[:, -1]
        fresh = logits.argmax(dim=-1, keepdim=True)
        ids = torch.cat([ids, fresh], dim=1)
        if on_token is not None:
            on_token(step)
    return ids
