"""Chapter 10: sliding-window attention, its ring-buffer cache, attention sinks, local/global layers.

**The window.** ``window`` is the number of keys a query sees *including itself*: query ``i`` sees
keys ``max(0, i - window + 1) .. i`` (Mistral 7B, Jiang et al., 2023; Longformer's local attention,
Beltagy et al., 2020). FlexAttention examples and some model code count the window one differently
(``i - j <= window``); this course counts the query itself. One layer sees ``window`` tokens back, but
``L`` stacked layers pass information up to ``L * (window - 1)`` tokens, which is why a small window
works better than it sounds.

**The cache.** Decoding with a window needs only the last ``window`` keys and values, so the cache is
a ring buffer of ``window`` slots: position ``p`` goes to slot ``p % window`` and overwrites position
``p - window``, which no later query may see. Its size stops growing (Chapter 9's
:class:`attention_course.kv_cache.SlidingWindowKVCache` has the same buffer for a whole model; here
one layer, with sinks, and the positions of the slots kept so that a test can check every step).

**Attention sinks** (StreamingLLM, Xiao et al., 2023). A trained model puts much of its attention on
the first few tokens whatever they are; evict them and it falls apart. StreamingLLM keeps the first
``num_sinks`` positions forever, in ``num_sinks`` extra slots before the ring: query ``i`` then sees
keys ``0 .. num_sinks - 1`` and its window. (StreamingLLM also renumbers positions inside the cache
for RoPE; here keys are cached after RoPE at their true positions, so the step-by-step decoding equals
the full masked pass exactly, which is what the tests check.)

**Local and global layers.** Gemma 2 alternates windowed ("local") and full ("global") layers one to
one; Gemma 3 puts five local layers before each global one. :func:`layer_pattern` writes such a
pattern and :func:`cached_tokens` counts what a cache of that model holds.

Imports only torch.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

__all__ = ["sliding_window_mask", "windowed_attention", "RingKVCache", "layer_pattern", "cached_tokens"]


def _check_window(window: int, num_sinks: int) -> None:
    if window < 1:
        raise ValueError(f"window must be at least 1 (the query sees itself), got window={window}")
    if num_sinks < 0:
        raise ValueError(f"num_sinks must be 0 or more, got num_sinks={num_sinks}")


def sliding_window_mask(num_tokens: int, window: Optional[int], num_sinks: int = 0) -> torch.Tensor:
    """``(num_tokens, num_tokens)`` bool, ``True`` = masked: key ``j`` is hidden from query ``i`` when
    ``j > i`` (the future) or when ``j <= i - window`` and ``j >= num_sinks`` (out of the window and
    not a sink). ``window=None`` gives the causal mask."""
    i = torch.arange(num_tokens)[:, None]
    j = torch.arange(num_tokens)[None, :]
    masked = j > i
    if window is not None:
        _check_window(window, num_sinks)
        masked |= (j <= i - window) & (j >= num_sinks)
    return masked


def windowed_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                       window: Optional[int], num_sinks: int = 0) -> torch.Tensor:
    """Causal scaled dot-product attention with :func:`sliding_window_mask`, in one pass:
    queries, keys, values ``(batch, num_heads, num_tokens, head_dim)`` (the values' last size may differ)."""
    n, d = queries.shape[-2], queries.shape[-1]
    if keys.shape[-2] != n or values.shape[-2] != n:
        raise ValueError(f"self-attention needs as many keys and values as queries: queries {tuple(queries.shape)}, "
                         f"keys {tuple(keys.shape)}, values {tuple(values.shape)}")
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(d)
    scores = scores.masked_fill(sliding_window_mask(n, window, num_sinks), float("-inf"))
    return torch.softmax(scores, dim=-1) @ values


class RingKVCache:
    """One layer's keys and values for windowed decoding: ``num_sinks`` sink slots, then a ring of
    ``window`` slots. Position ``p < num_sinks`` stays in slot ``p`` forever; position ``p >= num_sinks``
    goes to slot ``num_sinks + p % window``. ``positions[s]`` is the position held in slot ``s``
    (``-1``: empty). The cache never holds more than ``num_sinks + window`` tokens.

    ``append(k, v)`` takes one token (``(batch, num_heads, 1, head_dim)`` each) and returns the keys,
    values and positions of the filled slots (slot order; attention does not care about the order
    of its keys once RoPE has been applied). ``attend(q, k, v)`` appends and attends in one step.
    """

    def __init__(self, batch: int, num_heads: int, head_dim: int, window: int, num_sinks: int = 0,
                 value_dim: Optional[int] = None, dtype: torch.dtype = torch.float32):
        _check_window(window, num_sinks)
        self.window, self.num_sinks = window, num_sinks
        slots = window + num_sinks
        self.keys = torch.zeros(batch, num_heads, slots, head_dim, dtype=dtype)
        self.values = torch.zeros(batch, num_heads, slots, value_dim or head_dim, dtype=dtype)
        self.positions = torch.full((slots,), -1, dtype=torch.long)
        self.seen = 0

    def slot_of(self, position: int) -> int:
        """The slot that position ``position`` is written to."""
        if position < self.num_sinks:
            return position
        return self.num_sinks + position % self.window

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple:
        if k.shape[-2] != 1 or v.shape[-2] != 1:
            raise ValueError(f"RingKVCache.append takes one token at a time, got keys {tuple(k.shape)}")
        slot = self.slot_of(self.seen)
        self.keys[:, :, slot] = k[:, :, 0]
        self.values[:, :, slot] = v[:, :, 0]
        self.positions[slot] = self.seen
        self.seen += 1
        if self.seen >= self.positions.numel():          # every slot filled: views, no copy
            return self.keys, self.values, self.positions
        filled = self.positions >= 0
        return self.keys[:, :, filled], self.values[:, :, filled], self.positions[filled]

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Append the new token's ``k, v`` and return its attention output ``(batch, num_heads, 1, value_dim)``."""
        keys, values, _ = self.append(k, v)
        scores = q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return torch.softmax(scores, dim=-1) @ values

    def nbytes(self) -> int:
        return self.keys.numel() * self.keys.element_size() + self.values.numel() * self.values.element_size()


def layer_pattern(num_layers: int, local_per_global: int) -> list:
    """``"local"`` / ``"global"`` for each layer: ``local_per_global`` windowed layers, then one full
    layer, repeated (1 gives Gemma 2's alternation, 5 Gemma 3's pattern; 0 gives all global)."""
    if num_layers < 1 or local_per_global < 0:
        raise ValueError(f"need num_layers >= 1 and local_per_global >= 0, got {num_layers}, {local_per_global}")
    period = local_per_global + 1
    return ["global" if (layer + 1) % period == 0 else "local" for layer in range(num_layers)]


def cached_tokens(pattern: list, context: int, window: int, num_sinks: int = 0) -> int:
    """Tokens held by a cache over all layers after ``context`` tokens: a global layer keeps all of
    them, a local one at most ``window + num_sinks``."""
    per_layer = {"global": context, "local": min(context, window + num_sinks)}
    try:
        return sum(per_layer[kind] for kind in pattern)
    except KeyError as error:
        raise ValueError(f"pattern entries must be 'local' or 'global', got {error.args[0]!r}") from None
