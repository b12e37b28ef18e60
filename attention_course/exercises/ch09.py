"""Chapter 9 exercises: attention at scale.

ch09_ex1  merge_attention_partials(out_a, lse_a, out_b, lse_b) -> (out, lse)
ch09_ex2  online_softmax_stats(blocks)                           -> (maxima, sums)
ch09_ex3  causal_tiled_attention(queries, keys, values, block_size) -> (output, tiles)
ch09_ex4  cached_attention_step(x_new, k_cache, v_cache, w_query, w_key, w_value, num_heads)
                                                                 -> (context, k_cache, v_cache)

Conventions fixed by this chapter (stated in each exercise's contract):

* Scores are scaled by ``1 / sqrt(d)``, ``d`` the size of the queries' (or, with heads,
  of one head's) last axis; a *log-sum-exp* ``lse`` of a set of keys is
  ``log(sum_j exp(score_j))`` over that set, ``-inf`` for a set with no visible key (whose
  attention output is then all zeros, the convention of Chapters 3 and 6).
* Masked scores are ``-inf``. A row whose every score so far is ``-inf`` has running
  maximum ``-inf`` and running sum ``0``, never NaN.
* Queries that come last (Chapter 5, exercise 4): with ``n_q`` queries and ``n_k`` keys,
  query ``i`` sits at position ``n_k - n_q + i`` and sees the keys at positions up to it.
* A key-value cache stores ``(batch, num_heads, tokens, head_dim)`` and grows along the
  tokens axis; feature ``h * head_dim + i`` of a projection belongs to head ``h``.

Numerical checks use scores far above 88, where ``exp`` overflows in float32, so a
formula that is right on paper but exponentiates before subtracting the maximum fails.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..registry import Alternative, Call, Check, Exercise, Mistake, register

NEG_INF = float("-inf")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randint(g, low, high) -> int:
    """An integer in [low, high]."""
    return int(torch.randint(low, high + 1, (1,), generator=g))


def _shape(t):
    return tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__


# ======================================================================= ch09_ex1


def _validate_partials(out_a, lse_a, out_b, lse_b):
    if tuple(out_a.shape) != tuple(out_b.shape):
        raise ValueError(f"out_a and out_b must have the same shape, got out_a {tuple(out_a.shape)} "
                         f"and out_b {tuple(out_b.shape)}")
    for name, lse in (("lse_a", lse_a), ("lse_b", lse_b)):
        if tuple(lse.shape) != tuple(out_a.shape[:-1]):
            raise ValueError(f"{name} must have shape {tuple(out_a.shape[:-1])} (out_a without its last "
                             f"axis), got {name} of shape {tuple(lse.shape)}")


def merge_attention_partials(out_a, lse_a, out_b, lse_b):
    """Attention over key sets A and B from the results over each: returns (out, lse)."""
    _validate_partials(out_a, lse_a, out_b, lse_b)
    lse = torch.logaddexp(lse_a, lse_b)
    # Both sets empty: lse is -inf and the weights below would be exp(-inf + inf) = NaN.
    shift = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    w_a = torch.exp(lse_a - shift)[..., None]
    w_b = torch.exp(lse_b - shift)[..., None]
    return w_a * out_a + w_b * out_b, lse


def _partial(q, k, v):
    """Attention of q over k, v and its log-sum-exp, computed in float64 (float32 out)."""
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    out = torch.softmax(scores, dim=-1) @ v.double()
    return out.to(q.dtype), torch.logsumexp(scores, dim=-1).to(q.dtype)


def _split_call(g, lead, n_q, n_k, d, d_v, cut, scale=1.0, dtype=torch.float32):
    q = torch.randn(*lead, n_q, d, generator=g, dtype=torch.float64) * scale
    k = torch.randn(*lead, n_k, d, generator=g, dtype=torch.float64)
    v = torch.randn(*lead, n_k, d_v, generator=g, dtype=torch.float64)
    out_a, lse_a = _partial(q[..., :, :].to(dtype), k[..., :cut, :].to(dtype), v[..., :cut, :].to(dtype))
    out_b, lse_b = _partial(q.to(dtype), k[..., cut:, :].to(dtype), v[..., cut:, :].to(dtype))
    return Call(args=(out_a, lse_a, out_b, lse_b))


def _merge_main_calls(seed):
    g = _gen(seed)
    return [_split_call(g, (), 3, 5, 4, 2, cut=2), _split_call(g, (2,), 4, 7, 3, 5, cut=6)]


def _merge_large_calls(seed):
    g = _gen(seed)
    # Scores in the hundreds: exp(lse) overflows float32 (its largest value is about exp(88.7)).
    return [_split_call(g, (2,), 3, 8, 4, 3, cut=3, scale=120.0)]


def _merge_empty_calls(seed):
    g = _gen(seed)
    call = _split_call(g, (), 4, 6, 3, 2, cut=3, scale=120.0)
    out_a, lse_a, out_b, lse_b = (t.clone() for t in call.args)
    # Query 1 sees no key of A; query 2 sees no key of B; query 3 sees no key at all.
    lse_a[1], out_a[1] = NEG_INF, 0.0
    lse_b[2], out_b[2] = NEG_INF, 0.0
    lse_a[3], out_a[3], lse_b[3], out_b[3] = NEG_INF, 0.0, NEG_INF, 0.0
    return [Call(args=(out_a, lse_a, out_b, lse_b))]


def _merge_bad_calls(seed):
    g = _gen(seed)
    out = torch.randn(2, 3, 4, generator=g)
    lse = torch.randn(2, 3, generator=g)
    return [Call(args=(out, lse, torch.randn(2, 3, 5, generator=g), lse)),
            Call(args=(out, lse, out, torch.randn(3, 2, generator=g)))]


def _merge_must_mention(call):
    out_a, lse_a, out_b, lse_b = call.args
    if out_a.shape != out_b.shape:
        return ["out_a", "out_b", tuple(out_a.shape), tuple(out_b.shape)]
    name, lse = ("lse_a", lse_a) if lse_a.shape != out_a.shape[:-1] else ("lse_b", lse_b)
    return [name, tuple(lse.shape)]


def _merge_hidden_calls(seed):
    g = _gen(seed)
    calls = []
    for dtype in (torch.float32, torch.float32, torch.float64):
        lead = tuple(_randint(g, 1, 3) for _ in range(_randint(g, 0, 2)))
        n_k = _randint(g, 2, 9)
        calls.append(_split_call(g, lead, _randint(g, 1, 5), n_k, _randint(g, 1, 6), _randint(g, 1, 4),
                                 cut=_randint(g, 1, n_k - 1), scale=float(_randint(g, 1, 60)), dtype=dtype))
    return calls


def _merge_hidden_extreme_calls(seed):
    g = _gen(seed)
    call = _split_call(g, (2,), 5, 9, 4, 3, cut=_randint(g, 2, 7), scale=float(_randint(g, 80, 200)))
    out_a, lse_a, out_b, lse_b = (t.clone() for t in call.args)
    rows = torch.randperm(5, generator=g)
    lse_a[0, rows[0]], out_a[0, rows[0]] = NEG_INF, 0.0
    lse_b[1, rows[1]], out_b[1, rows[1]] = NEG_INF, 0.0
    lse_a[1, rows[2]], out_a[1, rows[2]], lse_b[1, rows[2]], out_b[1, rows[2]] = NEG_INF, 0.0, NEG_INF, 0.0
    return [Call(args=(out_a, lse_a, out_b, lse_b))]


def _merge_checked(body):
    def impl(out_a, lse_a, out_b, lse_b):
        _validate_partials(out_a, lse_a, out_b, lse_b)
        return body(out_a, lse_a, out_b, lse_b)
    return impl


def _merge_unweighted(out_a, lse_a, out_b, lse_b):
    return out_a + out_b, torch.logaddexp(lse_a, lse_b)


def _merge_plain_exp(out_a, lse_a, out_b, lse_b):
    e_a, e_b = torch.exp(lse_a), torch.exp(lse_b)
    total = e_a + e_b
    return (e_a / total)[..., None] * out_a + (e_b / total)[..., None] * out_b, torch.log(total)


def _merge_max_lse(out_a, lse_a, out_b, lse_b):
    out, _ = merge_attention_partials(out_a, lse_a, out_b, lse_b)
    return out, torch.maximum(lse_a, lse_b)


def _merge_nan_when_empty(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_a - lse)[..., None] * out_a + torch.exp(lse_b - lse)[..., None] * out_b, lse


def _merge_unchecked(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    shift = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    return torch.exp(lse_a - shift)[..., None] * out_a + torch.exp(lse_b - shift)[..., None] * out_b, lse


def _alt_merge_softmax_of_two(out_a, lse_a, out_b, lse_b):
    # The mixing weights are a softmax over the two log-sum-exps.
    stacked = torch.stack([lse_a, lse_b])
    weights = torch.nan_to_num(torch.softmax(stacked, dim=0), nan=0.0)
    out = weights[0][..., None] * out_a + weights[1][..., None] * out_b
    return out, torch.logsumexp(stacked, dim=0)


def _alt_merge_float64_by_hand(out_a, lse_a, out_b, lse_b):
    a, b = lse_a.double(), lse_b.double()
    top = torch.maximum(a, b)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    e_a, e_b = torch.exp(a - top), torch.exp(b - top)
    total = e_a + e_b
    safe = torch.where(total > 0, total, torch.ones_like(total))
    out = (e_a[..., None] * out_a.double() + e_b[..., None] * out_b.double()) / safe[..., None]
    lse = top + torch.log(total)          # log(0) = -inf when both sets are empty
    return out.to(out_a.dtype), lse.to(lse_a.dtype)


def _alt_merge_running_state(out_a, lse_a, out_b, lse_b):
    # The chapter's (m, l, acc) state: a normalised part is m = lse, l = 1, acc = out.
    m = torch.maximum(lse_a, lse_b)
    m_safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    scale_a, scale_b = torch.exp(lse_a - m_safe), torch.exp(lse_b - m_safe)
    l = scale_a + scale_b
    acc = scale_a[..., None] * out_a + scale_b[..., None] * out_b
    out = torch.where(l[..., None] > 0, acc / l.clamp_min(1e-30)[..., None], torch.zeros_like(acc))
    return out, m_safe + torch.log(l)


def _alt_merge_sigmoid(out_a, lse_a, out_b, lse_b):
    # Two-way softmax = sigmoid of the difference; log1p for the log-sum-exp.
    diff = lse_a - lse_b
    w_a = torch.nan_to_num(torch.sigmoid(diff), nan=0.0)
    w_b = torch.where(torch.isneginf(lse_a) & torch.isneginf(lse_b), torch.zeros_like(w_a), 1 - w_a)
    big = torch.maximum(lse_a, lse_b)
    gap = torch.nan_to_num(diff.abs(), nan=float("inf"))
    lse = big + torch.log1p(torch.exp(-gap))
    return w_a[..., None] * out_a + w_b[..., None] * out_b, lse


_MERGE_HINT = ("this check compares the returned (out, lse) with those of attention over all keys: each "
               "part counts in proportion to its share exp(lse_part - lse) of the total, lse being the "
               "log-sum-exp of the union; the reason above names the first item that differs.")

register(Exercise(
    label="ch09_ex1", title="Merging two partial attention results", name="merge_attention_partials",
    reference=merge_attention_partials, points=2,
    checks=[
        Check("keys split in two: the merge equals attention over all keys", _merge_main_calls,
              hint=_MERGE_HINT),
        Check("scores in the hundreds (lse > 150): finite and exact", _merge_large_calls, atol=1e-4,
              hint="this check uses log-sum-exps above 150 (exp of anything above about 88 is inf in "
                   "float32): out and lse must be finite and equal those of attention over all keys."),
        Check("a part with no visible key (lse = -inf), and a query with none at all", _merge_empty_calls,
              hint="this check has a part with no visible key (lse = -inf) and a query with none at all: "
                   "an empty part weighs 0; a query with no visible key gets an all-zero output and "
                   "lse = -inf, never NaN."),
        Check("shapes that do not fit raise ValueError naming the arguments and shapes", _merge_bad_calls,
              must_mention=_merge_must_mention, weight=0.5,
              hint="compare out_a.shape with out_b.shape, and each lse's shape with out_a.shape[:-1], "
                   "before computing; name the arguments and give their shapes."),
        Check("random sizes, leading axes and float64 (hidden)", _merge_hidden_calls, public=False,
              atol=1e-4, hint=_MERGE_HINT),
        Check("large scores with empty parts (hidden)", _merge_hidden_extreme_calls, public=False,
              atol=1e-4, hint=_MERGE_HINT),
    ],
    mistakes=[
        Mistake("outputs added without weights",
                "each part's output is already normalised over its own keys; adding them counts every "
                "part fully. Weigh each by its share exp(lse_part - lse) of the union's sum.",
                _merge_checked(_merge_unweighted)),
        Mistake("exp of the log-sum-exps",
                "you exponentiated lse_a and lse_b directly: above about 88 that is inf in float32, and "
                "inf / inf is NaN. Subtract the larger (or the merged) lse before exponentiating.",
                _merge_checked(_merge_plain_exp)),
        Mistake("lse of the union is the larger lse",
                "the log-sum-exp of the union is log(exp(lse_a) + exp(lse_b)), not max(lse_a, lse_b): "
                "the smaller part still adds to the sum.",
                _merge_checked(_merge_max_lse)),
        Mistake("NaN when both parts are empty",
                "when both lse are -inf, lse_a - lse is -inf - (-inf) = NaN; such a query must get a zero "
                "output and lse = -inf.",
                _merge_checked(_merge_nan_when_empty)),
        Mistake("no shape check",
                "shapes that do not fit must raise ValueError naming the arguments and their shapes; "
                "without the check they are broadcast silently or fail deep inside with another error.",
                _merge_unchecked),
    ],
    alternatives=[
        Alternative("softmax of the two lse", "stack the two lse, softmax over them, torch.logsumexp",
                    _merge_checked(_alt_merge_softmax_of_two)),
        Alternative("float64 by hand", "explicit max shift and division, computed in float64",
                    _merge_checked(_alt_merge_float64_by_hand)),
        Alternative("running state", "the chapter's (m, l, acc) state with m = lse and l = 1",
                    _merge_checked(_alt_merge_running_state)),
        Alternative("sigmoid of the difference", "two-way softmax as a sigmoid, log1p for lse",
                    _merge_checked(_alt_merge_sigmoid)),
    ],
))

# ======================================================================= ch09_ex2


def _validate_blocks(blocks):
    if not isinstance(blocks, (list, tuple)) or len(blocks) == 0:
        raise ValueError(f"blocks must be a non-empty list of tensors, got blocks={blocks!r}")
    lead = tuple(blocks[0].shape[:-1])
    for i, block in enumerate(blocks):
        if tuple(block.shape[:-1]) != lead:
            raise ValueError(f"every block of blocks needs the leading shape {lead} of block 0, "
                             f"but block {i} has shape {tuple(block.shape)}")


def online_softmax_stats(blocks):
    """Running maximum and rescaled running sum after each block: (maxima, sums)."""
    _validate_blocks(blocks)
    m = torch.full(blocks[0].shape[:-1], NEG_INF, dtype=blocks[0].dtype)
    l = torch.zeros(blocks[0].shape[:-1], dtype=blocks[0].dtype)
    maxima, sums = [], []
    for block in blocks:
        m_new = torch.maximum(m, block.amax(dim=-1))
        shift = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        l = l * torch.exp(m - shift) + torch.exp(block - shift[..., None]).sum(dim=-1)
        m = m_new
        maxima.append(m)
        sums.append(l)
    return torch.stack(maxima), torch.stack(sums)


def _stats_main_calls(seed):
    g = _gen(seed)
    return [Call(args=([torch.randn(4, w, generator=g) * 2 for w in (2, 3, 1)],)),
            Call(args=([torch.tensor([0.5, -1.0]), torch.tensor([2.0]), torch.tensor([1.0, 3.0, -2.0])],))]


def _stats_large_calls(seed):
    g = _gen(seed)
    # The maximum jumps by several hundred from one block to the next (exp(88.7) is float32's limit).
    base = [torch.randn(3, w, generator=g) for w in (3, 2, 4)]
    return [Call(args=([base[0] * 10, base[1] * 10 + 400.0, base[2] * 10 + 900.0],)),
            Call(args=([base[0] * 10 + 500.0, base[1] * 10, base[2] * 10 - 300.0],))]


def _stats_masked_calls(seed):
    g = _gen(seed)
    blocks = [torch.randn(3, w, generator=g) for w in (2, 3, 2)]
    blocks[0][0] = NEG_INF          # row 0: nothing visible in the first block
    blocks[1][0, :2] = NEG_INF
    blocks[0][1] = NEG_INF          # row 1: nothing visible at all
    blocks[1][1] = NEG_INF
    blocks[2][1] = NEG_INF
    blocks[2][2, 1] = NEG_INF       # row 2: one masked score, and a block far above the others
    blocks[2][2] += 300.0
    return [Call(args=(blocks,))]


def _stats_bad_calls(seed):
    g = _gen(seed)
    return [Call(args=([],)), Call(args=([torch.randn(2, 3, generator=g), torch.randn(3, 3, generator=g)],))]


def _stats_must_mention(call):
    blocks = call.args[0]
    if not blocks:
        return ["blocks"]
    bad = next(b for b in blocks if b.shape[:-1] != blocks[0].shape[:-1])
    return ["blocks", tuple(bad.shape)]


def _stats_hidden_calls(seed):
    g = _gen(seed)
    calls = []
    for dtype in (torch.float32, torch.float64):
        lead = tuple(_randint(g, 1, 4) for _ in range(_randint(g, 0, 2)))
        blocks = [(torch.randn(*lead, _randint(g, 1, 5), generator=g) * _randint(g, 1, 30)
                   + _randint(g, -200, 200)).to(dtype) for _ in range(_randint(g, 1, 5))]
        calls.append(Call(args=(blocks,)))
    return calls


def _stats_hidden_masked_calls(seed):
    g = _gen(seed)
    rows = 5
    blocks = [torch.randn(rows, _randint(g, 1, 4), generator=g) * 50 + 300 * i for i in range(4)]
    for block in blocks:
        block.masked_fill_(torch.rand(block.shape, generator=g) < 0.4, NEG_INF)
    blocks[0][_randint(g, 0, rows - 1)] = NEG_INF
    empty = _randint(g, 0, rows - 1)
    for block in blocks:
        block[empty] = NEG_INF
    return [Call(args=(blocks,))]


def _stats_checked(body):
    def impl(blocks):
        _validate_blocks(blocks)
        return body(blocks)
    return impl


def _stats_no_rescale(blocks):
    m = torch.full(blocks[0].shape[:-1], NEG_INF, dtype=blocks[0].dtype)
    l = torch.zeros_like(m)
    maxima, sums = [], []
    for block in blocks:
        m = torch.maximum(m, block.amax(dim=-1))
        shift = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
        l = l + torch.exp(block - shift[..., None]).sum(dim=-1)      # old terms keep their old max
        maxima.append(m)
        sums.append(l)
    return torch.stack(maxima), torch.stack(sums)


def _stats_old_max_first(blocks):
    # Starts from block 0's own statistics, then exponentiates each new block with the old
    # maximum and only afterwards moves to the new one (right on paper, overflows).
    m = blocks[0].amax(dim=-1)
    l = torch.exp(blocks[0] - m[..., None]).sum(dim=-1)
    maxima, sums = [m], [l]
    for block in blocks[1:]:
        l = l + torch.exp(block - m[..., None]).sum(dim=-1)
        m_new = torch.maximum(m, block.amax(dim=-1))
        l = l * torch.exp(m - m_new)
        m = m_new
        maxima.append(m)
        sums.append(l)
    return torch.stack(maxima), torch.stack(sums)


def _stats_per_block(blocks):
    maxima = torch.stack([b.amax(dim=-1) for b in blocks])
    shift = torch.where(torch.isneginf(maxima), torch.zeros_like(maxima), maxima)
    sums = torch.stack([torch.exp(b - s[..., None]).sum(dim=-1) for b, s in zip(blocks, shift)])
    return maxima, sums


def _stats_nan_masked(blocks):
    m = torch.full(blocks[0].shape[:-1], NEG_INF, dtype=blocks[0].dtype)
    l = torch.zeros_like(m)
    maxima, sums = [], []
    for block in blocks:
        m_new = torch.maximum(m, block.amax(dim=-1))
        l = l * torch.exp(m - m_new) + torch.exp(block - m_new[..., None]).sum(dim=-1)
        m = m_new
        maxima.append(m)
        sums.append(l)
    return torch.stack(maxima), torch.stack(sums)


def _online_stats_body(blocks):
    m = torch.full(blocks[0].shape[:-1], NEG_INF, dtype=blocks[0].dtype)
    l = torch.zeros_like(m)
    maxima, sums = [], []
    for block in blocks:
        m_new = torch.maximum(m, block.amax(dim=-1))
        shift = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        l = l * torch.exp(m - shift) + torch.exp(block - shift[..., None]).sum(dim=-1)
        m = m_new
        maxima.append(m)
        sums.append(l)
    return torch.stack(maxima), torch.stack(sums)


def _alt_stats_prefix_cat(blocks):
    maxima, sums = [], []
    for i in range(len(blocks)):
        seen = torch.cat(blocks[:i + 1], dim=-1)
        top = seen.amax(dim=-1)
        safe = torch.nan_to_num(top, neginf=0.0)
        maxima.append(top)
        sums.append(torch.exp(seen - safe[..., None]).sum(dim=-1))
    return torch.stack(maxima), torch.stack(sums)


def _alt_stats_logsumexp64(blocks):
    maxima, sums = [], []
    for i in range(len(blocks)):
        seen = torch.cat(blocks[:i + 1], dim=-1).double()
        top = seen.amax(dim=-1)
        lse = torch.logsumexp(seen, dim=-1)
        total = torch.where(torch.isneginf(top), torch.zeros_like(lse), torch.exp(lse - top))
        maxima.append(top.to(blocks[0].dtype))
        sums.append(total.to(blocks[0].dtype))
    return torch.stack(maxima), torch.stack(sums)


def _alt_stats_merge_fold(blocks):
    # Statistics of each block alone, folded left to right with the exact merge rule.
    out_m, out_l = [], []
    m = l = None
    for block in blocks:
        bm = block.amax(dim=-1)
        bl = torch.exp(block - torch.nan_to_num(bm, neginf=0.0)[..., None]).sum(dim=-1)
        if m is None:
            m, l = bm, bl
        else:
            top = torch.maximum(m, bm)
            safe = torch.nan_to_num(top, neginf=0.0)
            l = l * torch.exp(m - safe) + bl * torch.exp(bm - safe)
            m = top
        out_m.append(m)
        out_l.append(l)
    return torch.stack(out_m), torch.stack(out_l)


def _alt_stats_masked_matrix(blocks):
    # Vectorised: one row of the stacked scores per prefix, hiding the later blocks with -inf.
    scores = torch.cat(blocks, dim=-1)
    owner = torch.cat([torch.full((b.shape[-1],), i) for i, b in enumerate(blocks)])
    prefix = owner[None, :] <= torch.arange(len(blocks))[:, None]          # (num_blocks, total)
    shape = (len(blocks),) + (1,) * (scores.dim() - 1) + (scores.shape[-1],)
    hidden = scores.unsqueeze(0).masked_fill(~prefix.reshape(shape), NEG_INF)
    top = hidden.amax(dim=-1)
    total = torch.exp(hidden - torch.nan_to_num(top, neginf=0.0)[..., None]).sum(dim=-1)
    return top, total


_STATS_HINT = ("this check compares (maxima, sums) with a direct computation on the concatenated blocks: "
               "after block i, maxima[i] is the largest score of blocks 0..i and sums[i] the sum of "
               "exp(score - maxima[i]) over those scores; the reason above names the first item that "
               "differs.")

register(Exercise(
    label="ch09_ex2", title="The online softmax over a stream of blocks", name="online_softmax_stats",
    reference=online_softmax_stats, points=2,
    checks=[
        Check("blocks of widths 2, 3, 1 for 4 rows, and three 1-D blocks", _stats_main_calls, hint=_STATS_HINT),
        Check("the maximum jumps by hundreds between blocks: finite and exact", _stats_large_calls,
              hint="this check lets the maximum jump by hundreds between blocks (exp of such a jump is "
                   "inf in float32): maxima and sums must stay finite and equal a direct computation on "
                   "the concatenated blocks."),
        Check("masked scores (-inf): a fully masked first block, a row with no visible score",
              _stats_masked_calls,
              hint="this check masks scores with -inf (a fully masked first block, a row with no visible "
                   "score): while every score of a row so far is -inf, its maximum is -inf and its sum 0, "
                   "never NaN."),
        Check("an empty list and blocks with different leading shapes raise ValueError naming blocks",
              _stats_bad_calls, must_mention=_stats_must_mention, weight=0.5,
              hint="test for an empty list and compare every block's shape[:-1] with the first one's; "
                   "name blocks and give the shape that does not fit."),
        Check("random widths, leading shapes and float64 (hidden)", _stats_hidden_calls, public=False,
              hint=_STATS_HINT),
        Check("large jumps with random masks (hidden)", _stats_hidden_masked_calls, public=False,
              hint=_STATS_HINT),
    ],
    mistakes=[
        Mistake("sum not rescaled when the maximum grows",
                "when the maximum rises from m to m_new, the sum so far counts exp(x - m), not "
                "exp(x - m_new): multiply it by exp(m - m_new) before adding the new block.",
                _stats_checked(_stats_no_rescale)),
        Mistake("new block exponentiated with the old maximum",
                "you exponentiated the new block against the old maximum and rescaled afterwards: right "
                "on paper, but a block far above the old maximum overflows to inf. Update the running "
                "maximum first, then exponentiate.",
                _stats_checked(_stats_old_max_first)),
        Mistake("statistics of each block alone",
                "maxima[i] and sums[i] describe all blocks 0..i seen so far, not block i on its own: "
                "carry the running maximum and sum from one block to the next.",
                _stats_checked(_stats_per_block)),
        Mistake("NaN while a row is fully masked",
                "while a row has seen only -inf, m_new is -inf and score - m_new is -inf - (-inf) = NaN; "
                "subtract 0 instead in that case, so its sum stays 0.",
                _stats_checked(_stats_nan_masked)),
        Mistake("no input check",
                "an empty list or blocks with different leading shapes must raise ValueError naming "
                "blocks (and the shape that does not fit), not fail later with another error.",
                _online_stats_body),
    ],
    alternatives=[
        Alternative("prefix recomputed", "concatenate blocks 0..i and recompute max and sum each time",
                    _stats_checked(_alt_stats_prefix_cat)),
        Alternative("logsumexp in float64", "torch.logsumexp of each prefix in float64, sums = exp(lse - max)",
                    _stats_checked(_alt_stats_logsumexp64)),
        Alternative("merge fold", "per-block (max, sum) merged left to right with the exact merge rule",
                    _stats_checked(_alt_stats_merge_fold)),
        Alternative("masked matrix", "vectorised: one masked copy of all scores per prefix",
                    _stats_checked(_alt_stats_masked_matrix)),
    ],
))

# ======================================================================= ch09_ex3


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


def _tiled_calls(g, sizes, scale=1.0, dtype=torch.float32):
    calls = []
    for b, n_q, n_k, d, d_v, bs in sizes:
        calls.append(Call(args=((torch.randn(b, n_q, d, generator=g) * scale).to(dtype),
                                torch.randn(b, n_k, d, generator=g).to(dtype),
                                torch.randn(b, n_k, d_v, generator=g).to(dtype), bs)))
    return calls


def _tiled_square_calls(seed):
    return _tiled_calls(_gen(seed), [(2, 5, 5, 4, 3, 2), (1, 7, 7, 3, 2, 7), (1, 6, 6, 2, 2, 3)], scale=2.0)


def _tiled_offset_calls(seed):
    return _tiled_calls(_gen(seed), [(2, 3, 8, 4, 3, 3), (1, 1, 6, 4, 2, 4), (1, 4, 9, 3, 2, 2)], scale=2.0)


def _tiled_bad_calls(seed):
    g = _gen(seed)
    q, k, v = torch.randn(1, 6, 4, generator=g), torch.randn(1, 4, 4, generator=g), torch.randn(1, 4, 2, generator=g)
    q_ok = torch.randn(1, 3, 4, generator=g)
    return [Call(args=(q, k, v, 2)), Call(args=(q_ok, k, v, 0))]


def _tiled_must_mention(call):
    queries, keys, _, block_size = call.args
    if isinstance(block_size, int) and block_size < 1:
        return ["block_size"]
    return ["queries", "keys", str(queries.shape[-2]), str(keys.shape[-2])]


def _tiled_hidden_calls(seed):
    g = _gen(seed)
    sizes = []
    for _ in range(4):
        n_k = _randint(g, 1, 13)
        sizes.append((_randint(g, 1, 3), _randint(g, 1, n_k), n_k, _randint(g, 1, 6), _randint(g, 1, 4),
                      _randint(g, 1, 5)))
    return _tiled_calls(g, sizes, scale=float(_randint(g, 1, 4)))


def _tiled_hidden_sharp_calls(seed):
    g = _gen(seed)
    n_k = _randint(g, 8, 16)
    sizes = [(2, _randint(g, 2, n_k), n_k, 4, 3, _randint(g, 2, 4))]
    return _tiled_calls(g, sizes, scale=12.0) + _tiled_calls(g, sizes, dtype=torch.float64)


def _tiled_checked(body):
    def impl(queries, keys, values, block_size):
        _validate_tiled(queries, keys, values, block_size)
        return body(queries, keys, values, block_size)
    return impl


def _tiled_generic(queries, keys, values, block_size, visible_pair, computes_tile, rescale=True):
    """Tile loop with pluggable rules: visible_pair(query_pos, key_idx), computes_tile(q0, q1, k0, k1)."""
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
        for k0 in range(0, n_k, block_size):
            k1 = min(k0 + block_size, n_k)
            if not computes_tile(offset, q0, q1, k0, k1):
                continue
            tiles += 1
            s = q @ keys[..., k0:k1, :].transpose(-2, -1)
            pos = torch.arange(q0, q1)[:, None]
            key = torch.arange(k0, k1)[None, :]
            s = s.masked_fill(~visible_pair(offset, pos, key), NEG_INF)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            safe = torch.nan_to_num(m_new, neginf=0.0)
            p = torch.exp(s - safe)
            factor = torch.exp(m - safe) if rescale else torch.ones_like(m)
            l = l * factor + p.sum(dim=-1, keepdim=True)
            acc = acc * factor + p @ values[..., k0:k1, :]
            m = m_new
        pieces.append(acc / l)
    return torch.cat(pieces, dim=-2), tiles


def _with_offset(off, pos, key):
    return key <= off + pos


def _tile_has_visible(off, q0, q1, k0, k1):
    return k0 <= off + q1 - 1


_tiled_no_offset = _tiled_checked(lambda q, k, v, bs: _tiled_generic(
    q, k, v, bs, lambda off, pos, key: key <= pos, lambda off, q0, q1, k0, k1: k0 <= q1 - 1))
_tiled_straddling_skipped = _tiled_checked(lambda q, k, v, bs: _tiled_generic(
    q, k, v, bs, _with_offset, lambda off, q0, q1, k0, k1: k1 - 1 <= off + q0))
_tiled_never_skips = _tiled_checked(lambda q, k, v, bs: _tiled_generic(
    q, k, v, bs, _with_offset, lambda off, q0, q1, k0, k1: True))
_tiled_no_rescale = _tiled_checked(lambda q, k, v, bs: _tiled_generic(
    q, k, v, bs, _with_offset, _tile_has_visible, rescale=False))


def _tiled_unchecked(queries, keys, values, block_size):
    return _tiled_generic(queries, keys, values, block_size, _with_offset, _tile_has_visible)


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


_TILED_HINT = ("query i sits at position num_keys - num_queries + i and sees the keys up to it; a tile "
               "is computed when at least one of its (query, key) pairs is visible. Compare your output "
               "with full causal attention and your tile count with a drawing of the tiles.")

register(Exercise(
    label="ch09_ex3", title="Causal tiled attention for queries that come last", name="causal_tiled_attention",
    reference=causal_tiled_attention, points=3,
    checks=[
        Check("as many queries as keys: blocks of 2, 7 (one tile) and 3", _tiled_square_calls, hint=_TILED_HINT),
        Check("fewer queries than keys (offset): 3 of 8, 1 of 6, 4 of 9", _tiled_offset_calls, hint=_TILED_HINT),
        Check("more queries than keys, or block_size 0, raise ValueError", _tiled_bad_calls,
              must_mention=_tiled_must_mention, weight=0.5,
              hint="check block_size >= 1 and num_queries <= num_keys first; name block_size, or queries "
                   "and keys with their numbers of tokens."),
        Check("random sizes and block sizes (hidden)", _tiled_hidden_calls, public=False, hint=_TILED_HINT),
        Check("sharp scores and float64 (hidden)", _tiled_hidden_sharp_calls, public=False, hint=_TILED_HINT),
    ],
    mistakes=[
        Mistake("causal mask without the offset",
                "the queries are the LAST num_queries positions: query i sits at position "
                "num_keys - num_queries + i, not at position i (a mask aligned with the top-left corner, "
                "like is_causal=True in F.scaled_dot_product_attention, hides keys it may see).",
                _tiled_no_offset),
        Mistake("tiles on the diagonal skipped",
                "you skipped every tile that is not wholly visible, so the keys near each query's own "
                "position are lost; a tile that straddles the diagonal must be computed and masked inside.",
                _tiled_straddling_skipped),
        Mistake("every tile computed",
                "your output is right, but you computed (and masked) tiles that lie wholly in the "
                "queries' future too; skip a tile when its first key comes after its last query's position.",
                _tiled_never_skips),
        Mistake("running output not rescaled",
                "when a tile raises a query's maximum from m to m_new, the running sum and the running "
                "output must be multiplied by exp(m - m_new) before the tile's terms are added.",
                _tiled_no_rescale),
        Mistake("no input check",
                "more queries than keys, or block_size < 1, must raise ValueError naming what is wrong "
                "(block_size, or queries and keys with their numbers of tokens).",
                _tiled_unchecked),
    ],
    alternatives=[
        Alternative("per-tile partials merged by log-sum-exp", "float64, softmax per tile, logaddexp merge",
                    _tiled_checked(_alt_tiled_lse_merge)),
        Alternative("key blocks outside", "key blocks in the outer loop, state for all queries, einsum",
                    _tiled_checked(_alt_tiled_keys_outer)),
        Alternative("mask first", "build each tile's mask, skip it when nothing is visible, torch.where",
                    _tiled_checked(_alt_tiled_mask_first)),
    ],
))

# ======================================================================= ch09_ex4


def _validate_step(x_new, k_cache, v_cache, w_query, num_heads):
    if tuple(k_cache.shape) != tuple(v_cache.shape):
        raise ValueError(f"k_cache and v_cache must have the same shape, got k_cache {tuple(k_cache.shape)} "
                         f"and v_cache {tuple(v_cache.shape)}")


def cached_attention_step(x_new, k_cache, v_cache, w_query, w_key, w_value, num_heads):
    """Attend from the new tokens to cache + themselves; returns (context, k_cache, v_cache)."""
    _validate_step(x_new, k_cache, v_cache, w_query, num_heads)
    batch, n_new, _ = x_new.shape
    head_dim = w_query.shape[0] // num_heads

    def split(t):
        return t.view(batch, n_new, num_heads, head_dim).transpose(1, 2)

    q = split(x_new @ w_query.T)
    keys = torch.cat([k_cache, split(x_new @ w_key.T)], dim=2)
    values = torch.cat([v_cache, split(x_new @ w_value.T)], dim=2)
    n_past = k_cache.shape[2]
    scores = q @ keys.transpose(-2, -1) / math.sqrt(head_dim)
    # New token i sits at position n_past + i: Chapter 5's causal mask for queries that come last.
    future = torch.ones(n_new, n_past + n_new, dtype=torch.bool).triu(n_past + 1)
    weights = torch.softmax(scores.masked_fill(future, NEG_INF), dim=-1)
    context = (weights @ values).transpose(1, 2).reshape(batch, n_new, num_heads * head_dim)
    return context, keys, values


def _step_call(g, batch, n_past, n_new, d_in, num_heads, head_dim, dtype=torch.float32):
    """Caches made from real past tokens with the same weights, so a correct step continues
    the sequence exactly as full causal attention would."""
    d_out = num_heads * head_dim
    w = [(torch.randn(d_out, d_in, generator=g) / math.sqrt(d_in)).to(dtype) for _ in range(3)]
    past = torch.randn(batch, n_past, d_in, generator=g).to(dtype)

    def split(t):
        return t.view(batch, n_past, num_heads, head_dim).transpose(1, 2).contiguous()

    k_cache, v_cache = split(past @ w[1].T), split(past @ w[2].T)
    x_new = torch.randn(batch, n_new, d_in, generator=g).to(dtype) * 1.5
    return Call(args=(x_new, k_cache, v_cache, w[0], w[1], w[2], num_heads))


def _step_one_calls(seed):
    g = _gen(seed)
    return [_step_call(g, 2, 5, 1, 6, 2, 3), _step_call(g, 1, 1, 1, 4, 1, 4)]


def _step_prefill_calls(seed):
    g = _gen(seed)
    return [_step_call(g, 2, 0, 4, 5, 2, 2)]


def _step_chunk_calls(seed):
    g = _gen(seed)
    return [_step_call(g, 2, 4, 3, 5, 2, 3), _step_call(g, 1, 2, 2, 4, 4, 1)]


def _step_bad_calls(seed):
    g = _gen(seed)
    call = _step_call(g, 1, 3, 1, 4, 2, 2)
    x_new, k_cache, v_cache, wq, wk, wv, h = call.args
    return [Call(args=(x_new, k_cache, v_cache[:, :, :2], wq, wk, wv, h)),
            Call(args=(x_new, k_cache, torch.randn(1, 2, 3, 3, generator=g), wq, wk, wv, h))]


def _step_must_mention(call):
    return ["k_cache", "v_cache", tuple(call.args[1].shape), tuple(call.args[2].shape)]


def _step_hidden_calls(seed):
    g = _gen(seed)
    calls = []
    for dtype in (torch.float32, torch.float32, torch.float64):
        calls.append(_step_call(g, _randint(g, 1, 3), _randint(g, 0, 6), _randint(g, 1, 4), _randint(g, 2, 6),
                                _randint(g, 1, 3), _randint(g, 1, 4), dtype))
    return calls


def _step_hidden_long_calls(seed):
    g = _gen(seed)
    return [_step_call(g, 1, _randint(g, 10, 20), 1, 8, 4, 2), _step_call(g, 2, _randint(g, 5, 9), 5, 6, 3, 2)]


def _step_checked(body):
    def impl(x_new, k_cache, v_cache, w_query, w_key, w_value, num_heads):
        _validate_step(x_new, k_cache, v_cache, w_query, num_heads)
        return body(x_new, k_cache, v_cache, w_query, w_key, w_value, num_heads)
    return impl


def _step_generic(x_new, k_cache, v_cache, w_query, w_key, w_value, num_heads, *, append, mask,
                  use_cache=True, scale_by_d_out=False, interleaved=False, merge_interleaved=False):
    # interleaved: feature f goes to head f % num_heads, as a view(..., head_dim, num_heads) does,
    # instead of the contract's (..., num_heads, head_dim); merge_interleaved merges back that way.
    batch, n_new, _ = x_new.shape
    d_out = w_query.shape[0]
    head_dim = d_out // num_heads

    def split(t):
        if interleaved:
            return t.view(batch, n_new, head_dim, num_heads).permute(0, 3, 1, 2)
        return t.view(batch, n_new, num_heads, head_dim).transpose(1, 2)

    q = split(x_new @ w_query.T)
    k_new, v_new = split(x_new @ w_key.T), split(x_new @ w_value.T)
    keys, values = append(k_cache, k_new), append(v_cache, v_new)
    att_k, att_v = (keys, values) if use_cache else (k_new, v_new)
    scores = q @ att_k.transpose(-2, -1) / math.sqrt(d_out if scale_by_d_out else head_dim)
    n_keys = att_k.shape[2]
    hidden = mask(n_new, n_keys)
    if hidden is not None:
        scores = scores.masked_fill(hidden, NEG_INF)
    per_head = torch.softmax(scores, dim=-1) @ att_v
    merged = per_head.permute(0, 2, 3, 1) if merge_interleaved else per_head.transpose(1, 2)
    return merged.reshape(batch, n_new, d_out), keys, values


def _append_tokens(cache, new):
    return torch.cat([cache, new], dim=2)


def _offset_mask(n_q, n_k):
    return torch.ones(n_q, n_k, dtype=torch.bool).triu(n_k - n_q + 1)


_step_wrong_axis = _step_checked(lambda *a: _step_generic(
    *a, append=lambda c, n: torch.cat([c, n], dim=1), mask=_offset_mask))
_step_prepended = _step_checked(lambda *a: _step_generic(
    *a, append=lambda c, n: torch.cat([n, c], dim=2), mask=_offset_mask))
_step_no_mask = _step_checked(lambda *a: _step_generic(*a, append=_append_tokens, mask=lambda q, k: None))
_step_top_left = _step_checked(lambda *a: _step_generic(
    *a, append=_append_tokens, mask=lambda q, k: torch.ones(q, k, dtype=torch.bool).triu(1)))
_step_new_only = _step_checked(lambda *a: _step_generic(*a, append=_append_tokens, mask=_offset_mask,
                                                        use_cache=False))
_step_d_out_scale = _step_checked(lambda *a: _step_generic(*a, append=_append_tokens, mask=_offset_mask,
                                                           scale_by_d_out=True))


_step_interleaved = _step_checked(lambda *a: _step_generic(
    *a, append=_append_tokens, mask=_offset_mask, interleaved=True, merge_interleaved=True))
# The same interleaved split, but the heads merged back in the contract's layout.
_step_interleaved_split = _step_checked(lambda *a: _step_generic(
    *a, append=_append_tokens, mask=_offset_mask, interleaved=True))


def _step_unchecked(*args):
    return _step_generic(*args, append=_append_tokens, mask=_offset_mask)


def _alt_step_sdpa(x_new, k_cache, v_cache, w_query, w_key, w_value, num_heads):
    # SDPA's boolean attn_mask is True where a query MAY attend (the opposite of ours).
    b, n, _ = x_new.shape
    q = F.linear(x_new, w_query).unflatten(-1, (num_heads, -1)).transpose(1, 2)
    k = torch.cat((k_cache, F.linear(x_new, w_key).unflatten(-1, (num_heads, -1)).transpose(1, 2)), dim=-2)
    v = torch.cat((v_cache, F.linear(x_new, w_value).unflatten(-1, (num_heads, -1)).transpose(1, 2)), dim=-2)
    total = k.shape[-2]
    allowed = torch.arange(total)[None, :] <= (total - n + torch.arange(n))[:, None]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    return out.transpose(1, 2).flatten(2), k, v


def _alt_step_einsum(x_new, k_cache, v_cache, w_query, w_key, w_value, num_heads):
    d_out, d_in = w_query.shape
    hd = d_out // num_heads
    per_head = [w.reshape(num_heads, hd, d_in) for w in (w_query, w_key, w_value)]
    q, k_new, v_new = (torch.einsum("bnd,hed->bhne", x_new, w) for w in per_head)
    keys, values = torch.cat([k_cache, k_new], 2), torch.cat([v_cache, v_new], 2)
    n_past = k_cache.shape[2]
    s = torch.einsum("bhqe,bhke->bhqk", q, keys) * hd ** -0.5
    later = torch.arange(keys.shape[2])[None, :] > n_past + torch.arange(x_new.shape[1])[:, None]
    a = torch.softmax(torch.where(later, torch.tensor(NEG_INF, dtype=s.dtype), s), dim=-1)
    ctx = torch.einsum("bhqk,bhke->bqhe", a, values)
    return ctx.reshape(x_new.shape[0], x_new.shape[1], d_out), keys, values


def _alt_step_loops64(x_new, k_cache, v_cache, w_query, w_key, w_value, num_heads):
    # float64, one head and one new token at a time; token i sees the cache and new tokens 0..i.
    batch, n_new, _ = x_new.shape
    d_out = w_query.shape[0]
    hd = d_out // num_heads
    x = x_new.double()
    proj_q, proj_k, proj_v = x @ w_query.double().T, x @ w_key.double().T, x @ w_value.double().T
    heads_k, heads_v, outputs = [], [], []
    for h in range(num_heads):
        cols = slice(h * hd, (h + 1) * hd)
        keys_h = torch.cat([k_cache[:, h].double(), proj_k[..., cols]], dim=1)      # (batch, total, hd)
        vals_h = torch.cat([v_cache[:, h].double(), proj_v[..., cols]], dim=1)
        heads_k.append(keys_h)
        heads_v.append(vals_h)
        rows = []
        for i in range(n_new):
            visible = k_cache.shape[2] + i + 1
            sc = (keys_h[:, :visible] @ proj_q[:, i, cols, None]).squeeze(-1) / math.sqrt(hd)
            rows.append((torch.softmax(sc, dim=-1)[:, None, :] @ vals_h[:, :visible]).squeeze(1))
        outputs.append(torch.stack(rows, dim=1))
    context = torch.cat(outputs, dim=-1).to(x_new.dtype)
    return context, torch.stack(heads_k, 1).to(k_cache.dtype), torch.stack(heads_v, 1).to(v_cache.dtype)


_STEP_CONTRACT = ("feature h * head_dim + i of each projection belongs to head h (and goes back there in "
                  "the context); scores are scaled by 1 / sqrt(head_dim); new token i sits at position "
                  "n_past + i and sees the cache and the new tokens up to itself; the caches grow along "
                  "dim 2, old tokens first.")
_STEP_SAME = "The reason above names the first of (context, k_cache, v_cache) that differs. The contract: "
_STEP_HINT = "this check compares (context, k_cache, v_cache) with the reference's. " + _STEP_SAME + _STEP_CONTRACT

register(Exercise(
    label="ch09_ex4", title="One decoding step with a key-value cache", name="cached_attention_step",
    reference=cached_attention_step, points=3,
    checks=[
        Check("one new token after 5 cached ones, and after 1", _step_one_calls,
              hint="this check decodes one new token (2 heads, then 1 head), which sees every cached token. "
                   + _STEP_SAME + _STEP_CONTRACT),
        Check("an empty cache and 4 new tokens (the prompt)", _step_prefill_calls,
              hint="this check starts from an empty cache (n_past = 0) with 4 new tokens and 2 heads. "
                   + _STEP_SAME + _STEP_CONTRACT),
        Check("3 new tokens after 4 cached ones, 2 after 2 (offset causal mask)", _step_chunk_calls,
              hint="this check adds several new tokens after a non-empty cache (2 heads, then 4). "
                   + _STEP_SAME + _STEP_CONTRACT),
        Check("k_cache and v_cache of different shapes raise ValueError naming both and their shapes",
              _step_bad_calls, must_mention=_step_must_mention, weight=0.5,
              hint="compare k_cache.shape with v_cache.shape first; name both and give their shapes."),
        Check("random sizes, empty and full caches, float64 (hidden)", _step_hidden_calls, public=False,
              hint=_STEP_HINT),
        Check("long caches and longer chunks (hidden)", _step_hidden_long_calls, public=False, hint=_STEP_HINT),
    ],
    mistakes=[
        Mistake("cache grown along the wrong axis",
                "the caches are (batch, num_heads, tokens, head_dim): the new tokens' keys and values are "
                "appended along the tokens axis, dim 2, not along the heads axis.",
                _step_wrong_axis),
        Mistake("new tokens put before the cache",
                "the cached tokens came first: append the new keys and values after them, so that position "
                "p of the cache is token p of the sequence.",
                _step_prepended),
        Mistake("no mask among the new tokens",
                "one new token may see everything, but with several new tokens, token i must not see the "
                "new tokens after it: mask the keys beyond position n_past + i.",
                _step_no_mask),
        Mistake("mask aligned with the top-left corner",
                "a (n_new, n_past + n_new) mask built as for square self-attention (like is_causal=True in "
                "F.scaled_dot_product_attention) hides the cache; new token i sits at position n_past + i, "
                "so shift the diagonal by n_past (Chapter 5, exercise 4).",
                _step_top_left),
        Mistake("cache not attended to",
                "you appended to the cache but attended only to the new tokens; the queries must see the "
                "cached keys and values too.",
                _step_new_only),
        Mistake("scaled by sqrt(d_out)",
                "each head's scores are divided by the square root of head_dim = d_out // num_heads, the "
                "size of the vectors in its dot products, not of d_out.",
                _step_d_out_scale),
        Mistake("heads interleaved",
                "your split gives head h the features h, h + num_heads, h + 2 * num_heads, ... (a view as "
                "(head_dim, num_heads) deals the features out to the heads in turn); the contract gives "
                "head h the contiguous features h * head_dim to (h + 1) * head_dim - 1, both in the "
                "projections (the layout of the cache) and in the context.",
                _step_interleaved),
        Mistake("heads interleaved when split",
                "your split gives head h the features h, h + num_heads, h + 2 * num_heads, ... (a view as "
                "(head_dim, num_heads) deals the features out to the heads in turn); the contract gives "
                "head h the contiguous features h * head_dim to (h + 1) * head_dim - 1, the layout of the "
                "cache.",
                _step_interleaved_split),
        Mistake("no cache shape check",
                "caches of different shapes must raise ValueError naming k_cache and v_cache with their "
                "shapes, not fail later with another error.",
                _step_unchecked),
    ],
    alternatives=[
        Alternative("SDPA with attn_mask", "F.linear, unflatten, F.scaled_dot_product_attention with a bool "
                    "mask of allowed pairs", _step_checked(_alt_step_sdpa)),
        Alternative("einsum", "weights viewed as (heads, head_dim, d_in), einsum throughout, torch.where mask",
                    _step_checked(_alt_step_einsum)),
        Alternative("loops in float64", "one head and one new token at a time, float64 inside",
                    _step_checked(_alt_step_loops64)),
    ],
))
