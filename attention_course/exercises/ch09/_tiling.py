"""Helpers of chapter 9, exercise 3 (causal tiled attention), kept apart so that its module stays short.

* ``_tiles_of_the_same_type`` and ``_tiled_within_the_budget``: the comparisons of two of its checks
  (the tile count's type; the size of the largest tensor created against the budget);
* ``_tiled_generic``: the tile loop with pluggable rules that most of its kept mistakes are built from,
  with ``_with_offset`` and ``_tile_has_visible``, the right visibility rules they plug in.
"""
from __future__ import annotations

import math

import torch

from ...checks.registry import Check
from ._common import NEG_INF


_TILED_VALUES = Check("values", lambda seed: [], hint="")  # default tolerances, for compare_all only


def _kind(value):
    return "a tensor" if isinstance(value, torch.Tensor) else f"a Python {type(value).__name__}"


def _tiles_of_the_same_type(got, want, calls):
    """The output and the tile count first, as the other checks compare them (they take a tensor
    or a float of the right value for the count); then the count's type, which must be the type
    the reference returns, a Python int. Comparing with want's type, not with int, lets an answer be
    matched to the kept mistake that returns the same type."""
    from ...checks.checking import compare_all
    reason = compare_all(got, want, _TILED_VALUES, calls)
    if reason:
        return reason
    for i, (g, w) in enumerate(zip(got, want)):
        if w["status"] != "ok":
            continue
        mine, theirs = g["value"]["__seq__"][1], w["value"]["__seq__"][1]
        if type(mine) is not type(theirs):
            where = "tiles" if len(got) == 1 else f"call {i + 1} of {len(got)}: tiles"
            return f"{where} (item 1 of the result) is {_kind(mine)}, expected {_kind(theirs)}"
    return None


_ENTRIES = "largest_tensor_entries"


def _tiled_budget(call):
    """The most entries a tensor may hold: batch * N * max(block_size, d, d_v), N the larger number of
    tokens rounded up to whole blocks (an answer may pad its inputs or its output to whole blocks)."""
    queries, keys, values, block_size = call.args
    tokens = -(-max(queries.shape[-2], keys.shape[-2]) // block_size) * block_size
    return queries.shape[0] * tokens * max(block_size, queries.shape[-1], values.shape[-1])


def _without_extras(outcomes):
    return [{k: v for k, v in o.items() if k != "extras"} for o in outcomes]


def _tiled_within_the_budget(got, want, calls):
    """The output and the tile count first, as the other checks compare them; then the largest tensor
    created, which must be within the budget when the reference's is (and beyond it when want is a
    kept mistake's outcome that is, so that an answer can be matched to that mistake)."""
    from ...checks.checking import compare_all
    reason = compare_all(_without_extras(got), _without_extras(want), _TILED_VALUES, calls)
    if reason:
        return reason
    for i, (g, w, call) in enumerate(zip(got, want, calls)):
        if w["status"] != "ok":
            continue
        budget = _tiled_budget(call)
        mine = g.get("extras", {}).get(_ENTRIES)
        if not isinstance(mine, int):
            return "the size of the tensors created was not recorded"
        theirs = w["extras"][_ENTRIES]
        # Over the budget like a kept mistake, but by another tensor: not that mistake (its hint would
        # name a matrix the answer never formed).
        if (mine > budget) != (theirs > budget) or (mine > budget and mine != theirs):
            n_q, n_k = call.args[0].shape[-2], call.args[1].shape[-2]
            where = "" if len(got) == 1 else f"call {i + 1} of {len(got)}: "
            return (f"{where}the output and tile count are right, but a tensor of {mine} entries was created; "
                    f"with batch {call.args[0].shape[0]}, {n_q} queries, {n_k} keys and "
                    f"block_size={call.args[-1]} a tensor may hold at most {budget}"
                    if mine > budget else f"{where}no tensor exceeded {budget} entries")
    return None


def _with_offset(off, pos, key):
    return key <= off + pos


def _tile_has_visible(off, q0, q1, k0, k1):
    return k0 <= off + q1 - 1


def _tiled_generic(queries, keys, values, block_size, visible_pair, computes_tile, rescale=True,
                   reverse=False, guard=True, scale_dim=-1, divide=True):
    """Tile loop with pluggable rules: visible_pair(query_pos, key_idx), computes_tile(q0, q1, k0, k1);
    key tiles visited last to first when reverse; no -inf guard on the shift when not guard; scores
    divided by the square root of the size of queries' axis -1 (values' when scale_dim == "v", not
    divided when scale_dim is None); the running output divided by the running sum at the end when
    divide."""
    n_q, n_k = queries.shape[-2], keys.shape[-2]
    offset = n_k - n_q
    if scale_dim is None:
        scale = 1.0
    else:
        scale = 1.0 / math.sqrt(values.shape[-1] if scale_dim == "v" else queries.shape[-1])
    key_starts = list(range(0, n_k, block_size))
    if reverse:
        key_starts.reverse()
    pieces, tiles = [], 0
    for q0 in range(0, n_q, block_size):
        q1 = min(q0 + block_size, n_q)
        q = queries[..., q0:q1, :] * scale
        m = torch.full((*q.shape[:-1], 1), NEG_INF, dtype=q.dtype)
        l = torch.zeros_like(m)
        acc = torch.zeros(*q.shape[:-1], values.shape[-1], dtype=values.dtype)
        for k0 in key_starts:
            k1 = min(k0 + block_size, n_k)
            if not computes_tile(offset, q0, q1, k0, k1):
                continue
            tiles += 1
            s = q @ keys[..., k0:k1, :].transpose(-2, -1)
            pos = torch.arange(q0, q1)[:, None]
            key = torch.arange(k0, k1)[None, :]
            s = s.masked_fill(~visible_pair(offset, pos, key), NEG_INF)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            safe = torch.nan_to_num(m_new, neginf=0.0) if guard else m_new
            p = torch.exp(s - safe)
            factor = torch.exp(m - safe) if rescale else torch.ones_like(m)
            l = l * factor + p.sum(dim=-1, keepdim=True)
            acc = acc * factor + p @ values[..., k0:k1, :]
            m = m_new
        pieces.append(acc / l if divide else acc)
    return torch.cat(pieces, dim=-2), tiles
