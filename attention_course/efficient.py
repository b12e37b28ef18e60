"""Attention at scale (Chapter 9): tiled attention, peak memory, a key-value cache.

What the chapter and ``bench/efficient.py`` share:

* :func:`naive_attention` -- scaled dot-product attention that forms the whole
  ``(num_queries, num_keys)`` score matrix (and the weights), as in Chapters 3-6.
* :func:`tiled_attention` -- the same function computed tile by tile: queries in blocks
  of ``block_q``, keys and values in blocks of ``block_k``, with the online softmax (a
  running maximum, a rescaled running sum and a rescaled running output per query, kept
  in float32 for bfloat16 and float16 inputs). In inference (no input requires a
  gradient, or under ``torch.no_grad()``) it never holds more than one
  ``(block_q, block_k)`` tile of scores. In training (under autograd) it does: every
  tile's intermediates are kept for the backward pass, so its training memory grows with
  the square of the sequence like the naive version's. ``causal=True`` (self-attention,
  as many queries as keys) skips the tiles that lie wholly above the diagonal.
* :func:`tiled_attention_trainable` (:class:`TiledAttentionFunction`) -- the same forward
  loop as a ``torch.autograd.Function`` whose backward pass recomputes each tile instead
  of keeping it, as FlashAttention does (Dao et al. 2022, section 3.1; Dao 2023): it saves
  only the queries, keys, values, the output and one log-sum-exp per query, so its memory
  is linear in the sequence length in training (forward plus backward) as in inference.
* :func:`causal_tile_map` -- which tiles the causal version computes (for the figure).
* :func:`peak_memory` -- the most bytes alive at once in PyTorch's CPU allocator while a
  function runs, read from ``torch.profiler`` (``profile_memory=True``). CPU tensors have
  no ``torch.cuda.max_memory_allocated``; the profiler records every allocation and free
  made through the allocator, in order, so their running sum is exact and repeatable.
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

Conventions: tensors have any number of leading batch axes, then ``(tokens, features)``;
scores are divided by ``sqrt(d)`` with ``d`` the size of the queries' last axis, as
``F.scaled_dot_product_attention`` does. A key-value cache stores keys and values as
``(batch, num_heads, tokens, head_dim)`` and grows along the tokens axis (``dim=2``).

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
import os
import sys
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from . import multihead as mh

__all__ = ["naive_attention", "tiled_attention", "TiledAttentionFunction", "tiled_attention_trainable",
           "causal_tile_map", "peak_memory",
           "KVCache", "PreallocatedKVCache", "SlidingWindowKVCache", "cached_self_attention",
           "TinyCausalLM", "generate"]


def _check_qkv(queries, keys, values):
    for name, t in (("queries", queries), ("keys", keys), ("values", values)):
        if not isinstance(t, torch.Tensor) or t.dim() < 2:
            raise ValueError(f"{name} must be a tensor of shape (..., tokens, features), got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    if keys.shape[-2] != values.shape[-2] or queries.shape[-1] != keys.shape[-1]:
        raise ValueError(f"queries {tuple(queries.shape)}, keys {tuple(keys.shape)} and values "
                         f"{tuple(values.shape)} do not fit: keys and values need the same number of "
                         f"tokens, queries and keys the same feature size")


def _leading_shape(queries, keys, values):
    """The broadcast of the three leading shapes (all axes but the last two), as torch.matmul
    would make it, or a ValueError that names the three shapes."""
    try:
        return torch.broadcast_shapes(queries.shape[:-2], keys.shape[:-2], values.shape[:-2])
    except RuntimeError:
        raise ValueError(f"the leading axes of queries {tuple(queries.shape)}, keys {tuple(keys.shape)} "
                         f"and values {tuple(values.shape)} do not broadcast (all axes but the last two "
                         f"must broadcast as in torch.matmul)") from None


def naive_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                    causal: bool = False) -> torch.Tensor:
    """Softmax attention that stores the full score matrix ``(..., num_queries, num_keys)``.

    ``causal=True`` hides key ``j`` from query ``i`` when ``j > i`` (self-attention: as
    many queries as keys).
    """
    _check_qkv(queries, keys, values)
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    if causal:
        n_q, n_k = scores.shape[-2:]
        if n_q != n_k:
            raise ValueError(f"causal=True needs as many queries as keys, got {n_q} and {n_k}")
        future = torch.ones(n_q, n_k, dtype=torch.bool, device=scores.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ values


def tiled_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                    block_q: int = 128, block_k: int = 128, causal: bool = False,
                    stats_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """Exact softmax attention, one ``(block_q, block_k)`` tile of scores at a time.

    For each block of queries it walks over the blocks of keys and values, keeping per
    query the running maximum ``m`` of the scores seen so far, the running sum ``l`` of
    ``exp(score - m)`` and the running output ``acc`` (the values weighted by
    ``exp(score - m)``). When a tile raises the maximum from ``m`` to ``m_new``, the old sum
    and output are multiplied by ``exp(m - m_new)`` first. The answer is ``acc / l``,
    divided once at the end. Query blocks outside and key blocks inside, with the division
    deferred, is the loop order of FlashAttention-2 (Dao 2023).
    ``causal=True`` (as many queries as keys) skips every tile whose first key comes after
    the block's last query, and masks inside the tiles that straddle the diagonal.

    ``queries`` ``(..., num_queries, d)``, ``keys`` ``(..., num_keys, d)``, ``values``
    ``(..., num_keys, d_v)``; the leading axes broadcast as in ``torch.matmul`` (keys and
    values may carry more of them than the queries, or fewer), and a ``ValueError`` names the
    three shapes when they do not. With no keys (``num_keys = 0``) every query sees nothing
    and gets an all-zero output, as in :func:`naive_attention` and
    ``F.scaled_dot_product_attention``.

    Precision: ``stats_dtype`` is the dtype of ``m``, ``l``, ``acc`` and of each tile's
    arithmetic. By default it is float32 when the queries are bfloat16 or float16 (as in
    FlashAttention's kernels: 8 or 11 significant bits cannot hold a sum over thousands of
    keys) and the queries' dtype otherwise (float32 stays float32, float64 float64). The
    output has the queries' dtype. ``stats_dtype=torch.bfloat16`` on bfloat16 inputs keeps
    everything in bfloat16, the variant Chapter 9 measures against.

    Memory: in inference (no input requires a gradient, or under ``torch.no_grad()``) only
    one tile exists at a time. When an input requires a gradient, autograd keeps every
    tile's scores and exponentials for the backward pass, so the memory of forward plus
    backward grows with ``num_queries * num_keys``; use :func:`tiled_attention_trainable`
    to train.
    """
    _check_qkv(queries, keys, values)
    _check_blocks(block_q, block_k)
    stats = _stats_dtype(stats_dtype, queries.dtype)
    _leading_shape(queries, keys, values)
    n_q, n_k = queries.shape[-2], keys.shape[-2]
    if causal and n_q != n_k:
        raise ValueError(f"causal=True needs as many queries as keys, got {n_q} and {n_k}")
    out, _ = _tiled_forward(queries, keys, values, block_q, block_k, causal, stats, with_lse=False)
    return out


def _stats_dtype(stats_dtype, input_dtype):
    """The dtype of the running statistics: the argument if given, else float32 for the
    16-bit floating types and the inputs' own dtype for the others."""
    if stats_dtype is None:
        return torch.float32 if input_dtype in (torch.bfloat16, torch.float16) else input_dtype
    if not isinstance(stats_dtype, torch.dtype) or not stats_dtype.is_floating_point:
        raise ValueError(f"stats_dtype must be None or a floating-point torch.dtype, got "
                         f"stats_dtype={stats_dtype!r}")
    return stats_dtype


def _tiled_forward(queries, keys, values, block_q, block_k, causal, stats, with_lse):
    """The forward loop shared by :func:`tiled_attention` and :class:`TiledAttentionFunction`:
    ``(output, lse)``, ``lse`` (one log-sum-exp per query, dtype ``stats``) only when
    ``with_lse``. The statistics and each tile's arithmetic are in ``stats``; the output
    has the queries' dtype. Arguments already checked."""
    lead = _leading_shape(queries, keys, values)
    n_q, n_k = queries.shape[-2], keys.shape[-2]
    scale = 1.0 / math.sqrt(queries.shape[-1])
    # Zeros, not empty: with no keys the loop below never writes and the answer is zero.
    out = queries.new_zeros(*lead, n_q, values.shape[-1])
    lse = queries.new_full((*lead, n_q), float("-inf"), dtype=stats) if with_lse else None
    if n_k == 0:
        return out, lse
    for q0 in range(0, n_q, block_q):
        q1 = min(q0 + block_q, n_q)
        # .to() is free when the dtypes already agree (float32 and float64 inputs).
        q_blk = queries[..., q0:q1, :].to(stats) * scale
        m = q_blk.new_full((*lead, q1 - q0, 1), float("-inf"))
        l = q_blk.new_zeros((*lead, q1 - q0, 1))
        acc = q_blk.new_zeros((*lead, q1 - q0, values.shape[-1]))
        k_stop = q1 if causal else n_k          # tiles starting after the last query: skipped
        for k0 in range(0, k_stop, block_k):
            k1 = min(k0 + block_k, n_k)
            s = q_blk @ keys[..., k0:k1, :].to(stats).transpose(-2, -1)
            if causal and k1 - 1 > q0:          # this tile straddles the diagonal
                s = s.masked_fill(_causal_mask(q0, q1, k0, k1, s.device), float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            p = torch.exp(s - m_new)
            rescale = torch.exp(m - m_new)      # exp(-inf) = 0 on the first tile
            l = l * rescale + p.sum(dim=-1, keepdim=True)
            acc = acc * rescale + p @ values[..., k0:k1, :].to(stats)
            m = m_new
        out[..., q0:q1, :] = acc / l            # one division per query, at the end
        if with_lse:
            # m and l are all the backward pass needs to rebuild any probability, and
            # m + log(l) carries both in one number per query (FlashAttention-2).
            lse[..., q0:q1] = (m + torch.log(l)).squeeze(-1)
    return out, lse


def _check_blocks(block_q, block_k):
    for name, size in (("block_q", block_q), ("block_k", block_k)):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"{name} must be a positive integer, got {name}={size!r}")


def _causal_mask(q0: int, q1: int, k0: int, k1: int, device) -> torch.Tensor:
    rows = torch.arange(q0, q1, device=device)[:, None]
    cols = torch.arange(k0, k1, device=device)[None, :]
    return cols > rows


class TiledAttentionFunction(torch.autograd.Function):
    """Tiled softmax attention whose backward pass recomputes the tiles (FlashAttention).

    ``TiledAttentionFunction.apply(queries, keys, values, block_q, block_k, causal,
    stats_dtype=None)``; call it through :func:`tiled_attention_trainable`, which checks the
    arguments.

    Forward: the loop of :func:`tiled_attention` (query blocks outside, key blocks inside,
    the loop order of FlashAttention-2). Besides the output ``O`` it produces, per query,
    the log-sum-exp of its scaled scores ``L = m + log(l)``. It saves only ``Q, K, V, O, L``.

    Backward, given ``dO``: with ``D = rowsum(dO * O)`` (one number per query), it walks the
    tiles again (key blocks outside, query blocks inside) and for each tile recomputes the
    scores ``S`` and the probabilities ``P = exp(S - L)``, then
    ``dV += P^T dO``, ``dP = dO V^T``, ``dS = P * (dP - D)``, ``dQ += dS K / sqrt(d)``,
    ``dK += dS^T Q / sqrt(d)``. At most one tile of ``S``, ``P``, ``dP`` and ``dS`` exists
    at a time. Both passes work in the statistics dtype of :func:`tiled_attention` (float32
    for bfloat16 and float16 inputs); ``O`` and the gradients have the inputs' dtypes, ``L``
    the statistics dtype. Not twice differentiable.
    """

    @staticmethod
    def forward(ctx, queries, keys, values, block_q, block_k, causal, stats_dtype=None):
        stats = _stats_dtype(stats_dtype, queries.dtype)
        out, lse = _tiled_forward(queries, keys, values, block_q, block_k, causal, stats, with_lse=True)
        ctx.save_for_backward(queries, keys, values, out, lse)
        ctx.blocks = (block_q, block_k, causal)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        saved_q, saved_k, saved_v, out, lse = ctx.saved_tensors
        block_q, block_k, causal = ctx.blocks
        # The backward pass works in the forward's statistics dtype (lse's): float32 for
        # 16-bit inputs, whose gradients are sums over thousands of tiles too.
        stats = lse.dtype
        queries, keys, values = saved_q.to(stats), saved_k.to(stats), saved_v.to(stats)
        grad_out, out = grad_out.to(stats), out.to(stats)
        n_q, n_k = queries.shape[-2], keys.shape[-2]
        scale = 1.0 / math.sqrt(queries.shape[-1])
        lead = out.shape[:-2]
        # D_i = sum_j P_ij dP_ij, the softmax's correction term, equals dO_i . O_i because
        # O_i = sum_j P_ij v_j: one number per query instead of a pass over its whole row.
        delta = (grad_out * out).sum(dim=-1, keepdim=True)
        lse = lse.unsqueeze(-1)
        # The gradients take the broadcast leading shape first and are summed back to each
        # input's shape at the end, as autograd does for a broadcasting matmul.
        d_q = queries.new_zeros(*lead, n_q, queries.shape[-1])
        d_k = keys.new_zeros(*lead, n_k, keys.shape[-1])
        d_v = values.new_zeros(*lead, n_k, values.shape[-1])
        for k0 in range(0, n_k, block_k):
            k1 = min(k0 + block_k, n_k)
            k_blk, v_blk = keys[..., k0:k1, :], values[..., k0:k1, :]
            # Causal: a key block is seen only by queries at or after its first key, so the
            # query blocks that end before k0 are skipped, as in the forward pass.
            first = (k0 // block_q) * block_q if causal else 0
            for q0 in range(first, n_q, block_q):
                q1 = min(q0 + block_q, n_q)
                q_blk = queries[..., q0:q1, :]
                s = (q_blk * scale) @ k_blk.transpose(-2, -1)
                if causal and k1 - 1 > q0:
                    s = s.masked_fill(_causal_mask(q0, q1, k0, k1, s.device), float("-inf"))
                # Recomputed, not stored: exp(S - L) is exactly the softmax of the forward
                # pass (masked scores give exp(-inf) = 0).
                p = torch.exp(s - lse[..., q0:q1, :])
                d_o = grad_out[..., q0:q1, :]
                d_v[..., k0:k1, :] += p.transpose(-2, -1) @ d_o
                d_s = p * (d_o @ v_blk.transpose(-2, -1) - delta[..., q0:q1, :])
                d_q[..., q0:q1, :] += (d_s @ k_blk) * scale
                d_k[..., k0:k1, :] += (d_s.transpose(-2, -1) @ q_blk) * scale
        grads = (d_q.sum_to_size(queries.shape).to(saved_q.dtype), d_k.sum_to_size(keys.shape).to(saved_k.dtype),
                 d_v.sum_to_size(values.shape).to(saved_v.dtype))
        # One None per non-tensor argument: block_q, block_k, causal, stats_dtype.
        return tuple(g if needed else None for g, needed in zip(grads, ctx.needs_input_grad[:3])) + (None,) * 4


def tiled_attention_trainable(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                              block_q: int = 128, block_k: int = 128, causal: bool = False,
                              stats_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """:func:`tiled_attention` for training: the same output, and a backward pass that
    recomputes each tile's probabilities from the saved log-sum-exps instead of keeping
    the tiles (:class:`TiledAttentionFunction`).

    ``queries`` ``(..., num_queries, d)``, ``keys`` ``(..., num_keys, d)``, ``values``
    ``(..., num_keys, d_v)``, floating point, one dtype and device; leading axes broadcast
    as in ``torch.matmul``. Forward plus backward keeps ``Q, K, V``, the output and one
    number per query, never a ``(num_queries, num_keys)`` tensor, in training as in
    inference. With no keys the output and its gradients are zero, as in
    :func:`tiled_attention`. ``stats_dtype`` as in :func:`tiled_attention` (float32 for
    bfloat16 and float16 inputs by default). Raises ``ValueError`` naming the argument for
    bad shapes, dtypes, block sizes or ``stats_dtype``.
    """
    _check_qkv(queries, keys, values)
    _check_blocks(block_q, block_k)
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be True or False, got causal={causal!r}")
    for name, t in (("queries", queries), ("keys", keys), ("values", values)):
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got dtype {t.dtype} "
                             f"(shape {tuple(t.shape)})")
    if not queries.dtype == keys.dtype == values.dtype:
        raise ValueError(f"queries, keys and values need one dtype, got {queries.dtype}, {keys.dtype} "
                         f"and {values.dtype}")
    if not queries.device == keys.device == values.device:
        raise ValueError(f"queries, keys and values need one device, got {queries.device}, {keys.device} "
                         f"and {values.device}")
    _leading_shape(queries, keys, values)
    n_q, n_k = queries.shape[-2], keys.shape[-2]
    if causal and n_q != n_k:
        raise ValueError(f"causal=True needs as many queries as keys, got queries {tuple(queries.shape)} "
                         f"and keys {tuple(keys.shape)}")
    _stats_dtype(stats_dtype, queries.dtype)
    return TiledAttentionFunction.apply(queries, keys, values, block_q, block_k, causal, stats_dtype)


def causal_tile_map(num_tokens: int, block: int) -> torch.Tensor:
    """An int tensor ``(num_blocks, num_blocks)``: 0 a skipped tile, 1 a tile that straddles
    the diagonal (computed, partly masked), 2 a tile wholly below it (computed, no mask)."""
    blocks = math.ceil(num_tokens / block)
    grid = torch.zeros(blocks, blocks, dtype=torch.long)
    for a in range(blocks):
        q0, q1 = a * block, min((a + 1) * block, num_tokens)
        for b in range(blocks):
            k0, k1 = b * block, min((b + 1) * block, num_tokens)
            if k0 <= q1 - 1:
                grid[a, b] = 1 if k1 - 1 > q0 else 2
    return grid


class _QuietStderr:
    """The profiler's C++ side may print start/stop lines on file descriptor 2; hide them."""

    def __enter__(self):
        sys.stderr.flush()
        self._saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)

    def __exit__(self, *exc):
        os.dup2(self._saved, 2)
        os.close(self._saved)


def peak_memory(fn: Callable[[], object]) -> tuple:
    """Run ``fn()`` and return ``(its result, peak bytes)``.

    The peak is the largest number of bytes alive at once in PyTorch's CPU allocator
    during the call, counted from the moment the call starts (tensors that already
    exist do not count; the result does). It comes from ``torch.profiler`` with
    ``profile_memory=True``: every allocation (+bytes) and free (-bytes) is an event, and
    the running sum of the events in time order is the memory in use.
    """
    from torch.profiler import ProfilerActivity, profile
    with _QuietStderr():
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            result = fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    live = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    return result, peak


# ---------------------------------------------------------------- key-value cache


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
