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
* The key-value cache (:class:`KVCache`, :class:`PreallocatedKVCache`,
  :class:`SlidingWindowKVCache`, :func:`cached_self_attention`, :class:`TinyCausalLM`,
  :func:`generate`) lives in :mod:`attention_course.kv_cache`; this module re-exports every
  one of its names.

Conventions: tensors have any number of leading batch axes, then ``(tokens, features)``;
scores are divided by ``sqrt(d)`` with ``d`` the size of the queries' last axis, as
``F.scaled_dot_product_attention`` does.

This module imports only torch, :mod:`attention_course.multihead` and
:mod:`attention_course.kv_cache`: it ships to the grading child with the rest of the
package and holds no check and no reference answer.
"""
from __future__ import annotations

import math
import os
import sys
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn  # noqa: F401 - used by the key-value cache, now in kv_cache (eff.nn as before)

from . import multihead as mh  # noqa: F401 - likewise (eff.mh as before)
# The key-value cache (attention_course.kv_cache), every name re-exported: eff.X as before.
from .kv_cache import (KVCache, PreallocatedKVCache, SlidingWindowKVCache, TinyCausalLM, _Block,  # noqa: F401
                       _SlotsKVCache, cached_self_attention, generate, sliding_window_mask)

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
