r"""ch09_ex3: Causal tiled attention for queries that come last.

Write `causal_tiled_attention(queries, keys, values, block_size)` with `queries` of shape
`(batch, num_queries, d)`, `keys` `(batch, num_keys, d)`, `values` `(batch, num_keys, d_v)` and
`1 <= num_queries <= num_keys`. The queries are the **last** positions of the sequence (Chapter 5,
exercise 4): query `i` sits at position `num_keys - num_queries + i` and may attend to the keys at
positions `0 ... num_keys - num_queries + i`. Scores are divided by $\sqrt{d}$.

Work tile by tile with the online softmax: the queries in blocks of `block_size` rows
(`0 .. block_size - 1`, then `block_size .. 2 * block_size - 1`, ...; the last block may be
shorter), the keys and values in blocks of `block_size` in the same way. Compute a tile (a block of
queries against a block of keys) only when at least one of its (query, key) pairs is visible, and
skip it otherwise. Return the tuple `(output, tiles)`: `output`, of shape `(batch, num_queries, d_v)`
and dtype of `queries`, equals causal attention with this mask to within 1e-5; `tiles` is a Python
`int` (not a tensor, a float or a `bool`), the number of tiles computed, one count for the whole batch
(a tile covers every sequence of the batch). Raise `ValueError` naming `block_size` when it is not a positive
integer (a Python `int` of at least 1: `2.0` and `True` are not), and naming `queries` and `keys`
and giving their numbers of tokens when `num_queries > num_keys`.

The check also enforces the memory that tiling saves: every tensor your function creates may hold
at most `batch × N × max(block_size, d, d_v)` entries, where `N` is `max(num_queries, num_keys)`
rounded up to a whole number of blocks (so padding to whole blocks is fine), and the whole
`num_queries × num_keys` matrix of scores (or of weights) never exists. The check records the size
of every tensor created while your function runs; a view (a slice, `expand`) counts by the memory
under it.
"""
from __future__ import annotations

import math

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import NEG_INF
from ._tiling import (_tile_has_visible, _tiled_generic, _tiled_within_the_budget,
                      _tiles_of_the_same_type, _with_offset)

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _validate_tiled(queries, keys, values, block_size):
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive integer, got block_size={block_size!r}")
    n_q, n_k = queries.shape[-2], keys.shape[-2]
    if n_q > n_k:
        raise ValueError(f"the queries must be the last positions of the keys' sequence, so need "
                         f"num_queries <= num_keys; got queries with {n_q} tokens and keys with {n_k}")


def causal_tiled_attention(queries, keys, values, block_size):
    """Causal attention of the last queries, tile by tile; returns (output, tiles computed)."""
    _validate_tiled(queries, keys, values, block_size)
    n_q, n_k = queries.shape[-2], keys.shape[-2]
    offset = n_k - n_q
    scale = 1.0 / math.sqrt(queries.shape[-1])
    pieces, tiles = [], 0
    for q0 in range(0, n_q, block_size):
        q1 = min(q0 + block_size, n_q)
        q = queries[..., q0:q1, :] * scale
        m = torch.full((*q.shape[:-1], 1), NEG_INF, dtype=q.dtype)
        l = torch.zeros_like(m)
        acc = torch.zeros(*q.shape[:-1], values.shape[-1], dtype=values.dtype)
        last_position = offset + q1 - 1
        for k0 in range(0, n_k, block_size):
            if k0 > last_position:      # every key of this tile is in every query's future
                break
            k1 = min(k0 + block_size, n_k)
            tiles += 1
            s = q @ keys[..., k0:k1, :].transpose(-2, -1)
            future = (torch.arange(k0, k1)[None, :] > torch.arange(offset + q0, offset + q1)[:, None])
            s = s.masked_fill(future, NEG_INF)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            p = torch.exp(s - m_new)
            rescale = torch.exp(m - m_new)
            l = l * rescale + p.sum(dim=-1, keepdim=True)
            acc = acc * rescale + p @ values[..., k0:k1, :]
            m = m_new
        pieces.append(acc / l)
    return torch.cat(pieces, dim=-2), tiles


# Inputs of the public and hidden checks ---------------------------------------------------


def _tiled_calls(g, sizes, scale=1.0, dtype=torch.float32, report=()):
    calls = []
    for b, n_q, n_k, d, d_v, bs in sizes:
        calls.append(Call(args=((torch.randn(b, n_q, d, generator=g) * scale).to(dtype),
                                torch.randn(b, n_k, d, generator=g).to(dtype),
                                torch.randn(b, n_k, d_v, generator=g).to(dtype), bs), report=report))
    return calls


def _tiled_square_calls(seed):
    return _tiled_calls(gen(seed), [(2, 5, 5, 4, 3, 2), (1, 7, 7, 3, 2, 7), (1, 6, 6, 2, 2, 3)], scale=2.0)


def _tiled_offset_calls(seed):
    return _tiled_calls(gen(seed), [(2, 3, 8, 4, 3, 3), (1, 1, 6, 4, 2, 4), (1, 4, 9, 3, 2, 2)], scale=2.0)


def _tiled_extreme_block_calls(seed):
    g = gen(seed)
    return _tiled_calls(g, [(2, 4, 6, 3, 2, 1), (1, 5, 5, 4, 3, 1), (1, 3, 7, 2, 2, 7 + randint(g, 1, 5))], scale=2.0)


def _tiled_bad_calls(seed):
    g = gen(seed)
    q, k, v = torch.randn(1, 6, 4, generator=g), torch.randn(1, 4, 4, generator=g), torch.randn(1, 4, 2, generator=g)
    q_ok = torch.randn(1, 3, 4, generator=g)
    return [Call(args=(q, k, v, 2)), Call(args=(q_ok, k, v, 0)), Call(args=(q_ok, k, v, 2.0)),
            Call(args=(q_ok, k, v, True))]


def _tiled_must_mention(call):
    queries, keys, _, block_size = call.args
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        return ["block_size"]
    return ["queries", "keys", str(queries.shape[-2]), str(keys.shape[-2])]


def _tiled_hidden_calls(seed):
    # d_v >= 2 and d != d_v in every call: with d_v = 1, scaling by sqrt(d_v) is no scaling at all,
    # and with d = d_v it is the right scaling, so either would hide one kept mistake behind another.
    g = gen(seed)
    sizes = []
    for _ in range(4):
        n_k = randint(g, 1, 13)
        batch, n_q, d_v = randint(g, 1, 3), randint(g, 1, n_k), randint(g, 2, 4)
        d = randint(g, 1, 5)
        d += d >= d_v                   # 1 .. 6 without d_v
        sizes.append((batch, n_q, n_k, d, d_v, randint(g, 1, 5)))
    return _tiled_calls(g, sizes, scale=float(randint(g, 1, 4)))


def _tiled_hidden_sharp_calls(seed):
    g = gen(seed)
    n_k = randint(g, 8, 16)
    sizes = [(2, randint(g, 2, n_k), n_k, 4, 3, randint(g, 2, 4))]
    return _tiled_calls(g, sizes, scale=12.0) + _tiled_calls(g, sizes, dtype=torch.float64)


def _tiled_count_type_calls(seed):
    return _tiled_calls(gen(seed), [(2, 3, 7, 4, 3, 2), (1, 5, 5, 2, 3, 3)], scale=2.0)


def _tiled_memory_calls(seed):
    # 2 x 40 x 48 = 3,840 scores in the whole matrix against a budget of 2 x 48 x 8 = 768 entries.
    return _tiled_calls(gen(seed), [(2, 40, 48, 4, 3, 8)], scale=2.0, report=("largest_tensor",))


def _tiled_hidden_memory_calls(seed):
    # d, d_v <= block_size < 5 block_size <= num_queries: the whole matrix always exceeds the budget.
    g = gen(seed)
    block = randint(g, 3, 6)
    d_v = randint(g, 2, block)
    d = randint(g, 1, block - 1)
    d += d >= d_v                       # d and d_v at most block_size, and different
    n_k = randint(g, 6 * block, 9 * block)
    n_q = randint(g, 5 * block, n_k)
    return _tiled_calls(g, [(randint(g, 1, 2), n_q, n_k, d, d_v, block)], scale=float(randint(g, 1, 3)),
                        report=("largest_tensor",))


_TILED_HINT = ("query i sits at position num_keys - num_queries + i and sees the keys up to it; a tile "
               "is computed when at least one of its (query, key) pairs is visible. Compare your output "
               "with full causal attention and your tile count with a drawing of the tiles.")


# Kept mistakes, each with its hint --------------------------------------------------------


def _tiled_checked(body):
    def impl(queries, keys, values, block_size):
        _validate_tiled(queries, keys, values, block_size)
        return body(queries, keys, values, block_size)
    return impl


_tiled_no_offset = mistakes.add("causal mask without the offset",
                                "the queries are the LAST num_queries positions: query i sits at position "
                                "num_keys - num_queries + i, not at position i (a mask aligned with the top-left corner, "
                                "like is_causal=True in F.scaled_dot_product_attention, hides keys it may see).",
                                _tiled_checked(lambda q, k, v, bs: _tiled_generic(
                 q, k, v, bs, lambda off, pos, key: key <= pos, lambda off, q0, q1, k0, k1: k0 <= q1 - 1)))


_tiled_straddling_skipped = mistakes.add("tiles on the diagonal skipped",
                                         "you skipped every tile that is not wholly visible, so the keys near each query's own "
                                         "position are lost; a tile that straddles the diagonal must be computed and masked inside.",
                                         _tiled_checked(lambda q, k, v, bs: _tiled_generic(
                 q, k, v, bs, _with_offset, lambda off, q0, q1, k0, k1: k1 - 1 <= off + q0)))


_tiled_never_skips = mistakes.add("every tile computed",
                                  "your output is right, but you computed (and masked) tiles that lie wholly in the "
                                  "queries' future too; skip a tile when its first key comes after its last query's position.",
                                  _tiled_checked(lambda q, k, v, bs: _tiled_generic(
                 q, k, v, bs, _with_offset, lambda off, q0, q1, k0, k1: True)))


_tiled_no_rescale = mistakes.add("running output not rescaled",
                                 "when a tile raises a query's maximum from m to m_new, the running sum and the running "
                                 "output must be multiplied by exp(m - m_new) before the tile's terms are added.",
                                 _tiled_checked(lambda q, k, v, bs: _tiled_generic(
                 q, k, v, bs, _with_offset, _tile_has_visible, rescale=False)))


mistakes.add("key tiles in reverse order without a -inf guard",
             "you visited the key tiles from last to first: a query's first tile can then hide all its "
             "keys, so its running maximum is still -inf and exp(score - max) is exp(-inf - (-inf)) = NaN. "
             "Shift by 0 while the maximum is -inf (or visit the tiles from the first key on).",
             _tiled_checked(lambda q, k, v, bs: _tiled_generic(
                 q, k, v, bs, _with_offset, _tile_has_visible, reverse=True, guard=False)))


mistakes.add("scores scaled by the square root of d_v",
             "you divided the scores by the square root of the values' size d_v; the scale is the "
             "square root of d, the size of the queries and keys.",
             _tiled_checked(lambda q, k, v, bs: _tiled_generic(
                 q, k, v, bs, _with_offset, _tile_has_visible, scale_dim="v")))


mistakes.add("scores never scaled",
             "you did not divide the scores by the square root of d, the size of the queries and keys "
             "(their last axis); the softmax then sees scores sqrt(d) times too large.",
             _tiled_checked(lambda q, k, v, bs: _tiled_generic(
                 q, k, v, bs, _with_offset, _tile_has_visible, scale_dim=None)))


mistakes.add("running output never divided by the running sum",
             "you returned the running output as it is: it holds the values weighted by exp(score - max), "
             "which do not sum to 1. Divide it by the running sum at the end of each block of queries.",
             _tiled_checked(lambda q, k, v, bs: _tiled_generic(
                 q, k, v, bs, _with_offset, _tile_has_visible, divide=False)))


@mistakes.keep("the whole score matrix formed",
               "your output and tile count are right, but your function forms the whole num_queries x "
               "num_keys matrix of scores (or of weights) at once; compute one tile, a block of queries "
               "against a block of keys, at a time, so that no tensor holds more than a block's rows of it.")
def _tiled_whole_matrix(queries, keys, values, block_size):
    _validate_tiled(queries, keys, values, block_size)
    n_q, n_k = queries.shape[-2], keys.shape[-2]
    offset = n_k - n_q
    s = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    future = torch.arange(n_k)[None, :] > (offset + torch.arange(n_q))[:, None]
    out = s.masked_fill(future, NEG_INF).softmax(dim=-1) @ values
    # The count, from the tiles' corners, without computing them.
    tiles = sum(1 for q0 in range(0, n_q, block_size) for k0 in range(0, n_k, block_size)
                if k0 <= offset + min(q0 + block_size, n_q) - 1)
    return out, tiles


@mistakes.keep("tiles counted once per sequence of the batch",
               "your output is right, but you counted each tile once per sequence of the batch; a tile "
               "covers every sequence of the batch at once, so the count is one for the whole batch "
               "(the same for batch 1 and batch 3).")
def _tiled_counted_per_sequence(queries, keys, values, block_size):
    _validate_tiled(queries, keys, values, block_size)
    output, tiles = _tiled_generic(queries, keys, values, block_size, _with_offset, _tile_has_visible)
    return output, tiles * queries.shape[0]


@mistakes.keep("tile count returned as a tensor",
               "your output and count are right, but the count is a tensor (from adding up a mask, or "
               "starting it at torch.tensor(0)); the contract asks for a Python int: return int(tiles).")
def _tiled_count_as_tensor(queries, keys, values, block_size):
    _validate_tiled(queries, keys, values, block_size)
    output, tiles = _tiled_generic(queries, keys, values, block_size, _with_offset, _tile_has_visible)
    return output, torch.tensor(tiles)


@mistakes.keep("tile count returned as a float",
               "your output and count are right, but the count is a float (started at 0.0, or computed "
               "with /); the contract asks for a Python int: count with integers, or return int(tiles).")
def _tiled_count_as_float(queries, keys, values, block_size):
    _validate_tiled(queries, keys, values, block_size)
    output, tiles = _tiled_generic(queries, keys, values, block_size, _with_offset, _tile_has_visible)
    return output, float(tiles)


def _validate_tiled_loosely(queries, keys, values, block_size):
    if block_size < 1:
        raise ValueError(f"block_size must be a positive integer, got block_size={block_size!r}")
    n_q, n_k = queries.shape[-2], keys.shape[-2]
    if n_q > n_k:
        raise ValueError(f"the queries must be the last positions of the keys' sequence, so need "
                         f"num_queries <= num_keys; got queries with {n_q} tokens and keys with {n_k}")


@mistakes.keep("block_size's type not checked",
               "block_size must be a Python int of at least 1: a float such as 2.0 or the bool True must "
               "raise ValueError naming block_size too, not fail later or be taken as 1.")
def _tiled_loose_block_size(queries, keys, values, block_size):
    _validate_tiled_loosely(queries, keys, values, block_size)
    return _tiled_generic(queries, keys, values, block_size, _with_offset, _tile_has_visible)


@mistakes.keep("no input check",
               "more queries than keys, or block_size < 1, must raise ValueError naming what is wrong "
               "(block_size, or queries and keys with their numbers of tokens).")
def _tiled_unchecked(queries, keys, values, block_size):
    return _tiled_generic(queries, keys, values, block_size, _with_offset, _tile_has_visible)


# Kept alternatives (correct answers in other styles) --------------------------------------


def _alt_tiled_lse_merge(queries, keys, values, block_size):
    # Every tile gives a normalised partial result and its log-sum-exp (float64); merge them.
    n_q, n_k = queries.shape[-2], keys.shape[-2]
    shift = n_k - n_q
    q64, k64, v64 = queries.double(), keys.double(), values.double()
    rows, count = [], 0
    for start in range(0, n_q, block_size):
        stop = min(start + block_size, n_q)
        out, lse = None, None
        for kstart in range(0, min(n_k, shift + stop), block_size):
            kstop = min(kstart + block_size, n_k)
            count += 1
            s = q64[..., start:stop, :] @ k64[..., kstart:kstop, :].transpose(-2, -1) / math.sqrt(q64.shape[-1])
            hide = torch.arange(kstart, kstop)[None, :] > (shift + torch.arange(start, stop))[:, None]
            s = s.masked_fill(hide, NEG_INF)
            t_lse = torch.logsumexp(s, dim=-1)
            t_out = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0) @ v64[..., kstart:kstop, :]
            if out is None:
                out, lse = t_out, t_lse
            else:
                both = torch.logaddexp(lse, t_lse)
                safe = torch.nan_to_num(both, neginf=0.0)
                out = torch.exp(lse - safe)[..., None] * out + torch.exp(t_lse - safe)[..., None] * t_out
                lse = both
        rows.append(out)
    return torch.cat(rows, dim=-2).to(queries.dtype), count


alternatives.add("per-tile partials merged by log-sum-exp",
                 "float64, softmax per tile, logaddexp merge",
                 _tiled_checked(_alt_tiled_lse_merge))


def _alt_tiled_keys_outer(queries, keys, values, block_size):
    # Key blocks in the outer loop; per-query running state kept for the whole sequence (einsum).
    n_q, n_k = queries.shape[-2], keys.shape[-2]
    first_pos = n_k - n_q
    lead = queries.shape[:-1]
    m = torch.full(lead, NEG_INF, dtype=queries.dtype)
    l = torch.zeros(lead, dtype=queries.dtype)
    acc = torch.zeros(*lead, values.shape[-1], dtype=values.dtype)
    q_starts = list(range(0, n_q, block_size))
    tiles = 0
    for k0 in range(0, n_k, block_size):
        k1 = min(k0 + block_size, n_k)
        for q0 in q_starts:
            q1 = min(q0 + block_size, n_q)
            if first_pos + q1 - 1 < k0:
                continue
            tiles += 1
            s = torch.einsum("...qd,...kd->...qk", queries[..., q0:q1, :], keys[..., k0:k1, :])
            s = s / math.sqrt(queries.shape[-1])
            ok = torch.arange(k0, k1)[None, :] <= torch.arange(first_pos + q0, first_pos + q1)[:, None]
            s = torch.where(ok, s, torch.full_like(s, NEG_INF))
            old = m[..., q0:q1]
            new = torch.maximum(old, s.amax(dim=-1))
            base = torch.where(torch.isneginf(new), torch.zeros_like(new), new)
            w = torch.exp(s - base[..., None])
            factor = torch.exp(old - base)
            l[..., q0:q1] = l[..., q0:q1] * factor + w.sum(dim=-1)
            acc[..., q0:q1, :] = acc[..., q0:q1, :] * factor[..., None] + \
                torch.einsum("...qk,...kv->...qv", w, values[..., k0:k1, :])
            m[..., q0:q1] = new
    return acc / l[..., None], tiles


alternatives.add("key blocks outside",
                 "key blocks in the outer loop, state for all queries, einsum",
                 _tiled_checked(_alt_tiled_keys_outer))


def _alt_tiled_mask_first(queries, keys, values, block_size):
    # Build each tile's visibility mask first and skip the tile when it hides everything.
    n_q, n_k = queries.shape[-2], keys.shape[-2]
    pos = torch.arange(n_q) + (n_k - n_q)
    done, tiles = [], 0
    for qb in range(math.ceil(n_q / block_size)):
        rows = slice(qb * block_size, min((qb + 1) * block_size, n_q))
        q = queries[..., rows, :]
        run_max = run_sum = run_out = None
        for kb in range(math.ceil(n_k / block_size)):
            cols = slice(kb * block_size, min((kb + 1) * block_size, n_k))
            see = torch.arange(n_k)[cols][None, :] <= pos[rows][:, None]
            if not bool(see.any()):
                continue
            tiles += 1
            s = (q @ keys[..., cols, :].transpose(-1, -2)) / math.sqrt(q.shape[-1])
            s = torch.where(see, s, torch.tensor(NEG_INF, dtype=s.dtype))
            t_max = s.max(dim=-1, keepdim=True).values
            if run_max is None:
                top = t_max
                t_safe = torch.nan_to_num(top, neginf=0.0)
                run_sum = torch.exp(s - t_safe).sum(-1, keepdim=True)
                run_out = torch.exp(s - t_safe) @ values[..., cols, :]
            else:
                top = torch.maximum(run_max, t_max)
                t_safe = torch.nan_to_num(top, neginf=0.0)
                old = torch.exp(run_max - t_safe)
                run_sum = old * run_sum + torch.exp(s - t_safe).sum(-1, keepdim=True)
                run_out = old * run_out + torch.exp(s - t_safe) @ values[..., cols, :]
            run_max = top
        done.append(run_out / run_sum)
    return torch.cat(done, dim=-2), tiles


alternatives.add("mask first",
                 "build each tile's mask, skip it when nothing is visible, torch.where",
                 _tiled_checked(_alt_tiled_mask_first))


alternatives.add("key tiles last to first, guarded",
                 "key tiles visited in reverse order, shift by 0 while a query's maximum is -inf",
                 _tiled_checked(lambda q, k, v, bs: _tiled_generic(
                     q, k, v, bs, _with_offset, _tile_has_visible, reverse=True, guard=True)))



def _alt_tiled_padded(queries, keys, values, block_size):
    # Queries, keys and values padded with zeros to whole blocks, viewed as blocks; padded keys masked.
    (b, n_q, d), n_k = queries.shape, keys.shape[-2]
    t_q, t_k = -(-n_q // block_size), -(-n_k // block_size)
    def pad(x, n):
        return torch.cat([x, x.new_zeros(b, n - x.shape[1], x.shape[2])], 1)
    q_blocks = pad(queries, t_q * block_size).view(b, t_q, block_size, d) / math.sqrt(d)
    k_blocks = pad(keys, t_k * block_size).view(b, t_k, block_size, d)
    v_blocks = pad(values, t_k * block_size).view(b, t_k, block_size, values.shape[-1])
    out, tiles = queries.new_empty(b, n_q, values.shape[-1]), 0
    for i in range(t_q):
        rows = min(block_size, n_q - i * block_size)
        q_pos = (n_k - n_q) + i * block_size + torch.arange(block_size)
        top = queries.new_full((b, block_size, 1), -math.inf)
        total, acc = queries.new_zeros((b, block_size, 1)), queries.new_zeros((b, block_size, values.shape[-1]))
        for j in range(t_k):
            if j * block_size > q_pos[rows - 1]:
                break
            tiles += 1
            k_pos = j * block_size + torch.arange(block_size)
            s = (q_blocks[:, i] @ k_blocks[:, j].transpose(-1, -2)).masked_fill(
                (k_pos[None] > q_pos[:, None]) | (k_pos[None] >= n_k), -math.inf)
            new_top = torch.maximum(top, s.amax(-1, keepdim=True))
            p, c = torch.exp(s - new_top), torch.exp(top - new_top)
            total, acc, top = total * c + p.sum(-1, keepdim=True), acc * c + p @ v_blocks[:, j], new_top
        out[:, i * block_size:i * block_size + rows] = (acc / total)[:, :rows]
    return out, tiles


alternatives.add("padded to whole blocks",
                 "inputs padded with zeros to whole blocks and viewed as blocks (the memory bound allows it)",
                 _tiled_checked(_alt_tiled_padded))

# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch09_ex3", title="Causal tiled attention for queries that come last", name="causal_tiled_attention",
    reference=causal_tiled_attention, points=3,
    checks=[
        Check("as many queries as keys: blocks of 2, 7 (one tile) and 3", _tiled_square_calls, hint=_TILED_HINT),
        Check("fewer queries than keys (offset): 3 of 8, 1 of 6, 4 of 9", _tiled_offset_calls, hint=_TILED_HINT),
        Check("more queries than keys, or block_size 0, 2.0 or True, raise ValueError", _tiled_bad_calls,
              must_mention=_tiled_must_mention, weight=0.5,
              hint="check that block_size is an int (not a bool) of at least 1 and that num_queries <= "
                   "num_keys first; name block_size, or queries and keys with their numbers of tokens."),
        Check("random sizes and block sizes (hidden)", _tiled_hidden_calls, public=False, hint=_TILED_HINT),
        Check("sharp scores and float64", _tiled_hidden_sharp_calls, hint=_TILED_HINT),
        Check("block_size 1 (every key its own tile) and a block wider than all the keys", _tiled_extreme_block_calls,
              hint=_TILED_HINT),
        Check("tiles is a Python int (not a tensor or a float)", _tiled_count_type_calls, seed=6,
              compare=_tiles_of_the_same_type, weight=0.5,
              hint="this check compares the output and the tile count first (the reason above says which "
                   "differs, if any); once they are right, tiles must be a Python int: a tensor or a float "
                   "of the right value is not one."),
        Check("tile by tile: 40 queries, 48 keys, blocks of 8, no tensor over 768 entries", _tiled_memory_calls,
              seed=7, compare=_tiled_within_the_budget,
              hint="this check compares the output and the tile count first (the reason above says which "
                   "differs, if any); once they are right, no tensor created along the way may hold more than "
                   "batch x N x max(block_size, d, d_v) entries (N: the larger number of tokens rounded up to "
                   "whole blocks), which a tile respects and the whole score matrix does not."),
        Check("tile by tile at random sizes (hidden)", _tiled_hidden_memory_calls, public=False,
              compare=_tiled_within_the_budget,
              hint="no tensor created along the way may hold more than batch x N x max(block_size, d, d_v) "
                   "entries (N: the larger number of tokens rounded up to whole blocks); the output and the tile "
                   "count are compared first."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
