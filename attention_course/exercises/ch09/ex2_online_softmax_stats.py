"""ch09_ex2: The online softmax over a stream of blocks.

The scores of some rows arrive in blocks: `blocks` is a non-empty list of float tensors, block
`i` of shape `(..., width_i)` with `width_i >= 1`, all with the same leading shape (any number of
leading axes, possibly none). Scores may be `-inf` (masked). Write `online_softmax_stats(blocks)`
that returns the tuple `(maxima, sums)` of the running statistics after each block, two tensors of
shape `(len(blocks), ...)` (the leading shape) and the blocks' dtype: `maxima[i]` is the largest score
in blocks `0..i`, and `sums[i]` is the sum of `exp(x - maxima[i])` over all scores `x` in blocks
`0..i`. While every score of a row seen so far is `-inf`, its maximum is `-inf` and its sum `0`
(never NaN). The results must be exact and finite when the maximum jumps by hundreds from one block
to the next. Raise `ValueError` naming `blocks` when the list is empty, and naming `blocks` and giving
the shape of the first block whose leading shape differs from block 0's.
"""
from __future__ import annotations

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import NEG_INF

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


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


# Inputs of the public and hidden checks ---------------------------------------------------


def _stats_main_calls(seed):
    g = gen(seed)
    return [Call(args=([torch.randn(4, w, generator=g) * 2 for w in (2, 3, 1)],)),
            Call(args=([torch.tensor([0.5, -1.0]), torch.tensor([2.0]), torch.tensor([1.0, 3.0, -2.0])],))]


def _stats_large_calls(seed):
    g = gen(seed)
    # The maximum jumps by several hundred from one block to the next (exp(88.7) is float32's limit).
    base = [torch.randn(3, w, generator=g) for w in (3, 2, 4)]
    return [Call(args=([base[0] * 10, base[1] * 10 + 400.0, base[2] * 10 + 900.0],)),
            Call(args=([base[0] * 10 + 500.0, base[1] * 10, base[2] * 10 - 300.0],))]


def _stats_masked_calls(seed):
    g = gen(seed)
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
    g = gen(seed)
    return [Call(args=([],)), Call(args=([torch.randn(2, 3, generator=g), torch.randn(3, 3, generator=g)],))]


def _stats_must_mention(call):
    blocks = call.args[0]
    if not blocks:
        return ["blocks"]
    bad = next(b for b in blocks if b.shape[:-1] != blocks[0].shape[:-1])
    return ["blocks", tuple(bad.shape)]


def _stats_hidden_calls(seed):
    g = gen(seed)
    calls = []
    for dtype in (torch.float32, torch.float64):
        lead = tuple(randint(g, 1, 4) for _ in range(randint(g, 0, 2)))
        blocks = [(torch.randn(*lead, randint(g, 1, 5), generator=g) * randint(g, 1, 30)
                   + randint(g, -200, 200)).to(dtype) for _ in range(randint(g, 1, 5))]
        calls.append(Call(args=(blocks,)))
    return calls


def _stats_hidden_masked_calls(seed):
    g = gen(seed)
    rows = 5
    blocks = [torch.randn(rows, randint(g, 1, 4), generator=g) * 50 + 300 * i for i in range(4)]
    for block in blocks:
        block.masked_fill_(torch.rand(block.shape, generator=g) < 0.4, NEG_INF)
    blocks[0][randint(g, 0, rows - 1)] = NEG_INF
    empty = randint(g, 0, rows - 1)
    for block in blocks:
        block[empty] = NEG_INF
    return [Call(args=(blocks,))]


_STATS_HINT = ("this check compares (maxima, sums) with a direct computation on the concatenated blocks: "
               "after block i, maxima[i] is the largest score of blocks 0..i and sums[i] the sum of "
               "exp(score - maxima[i]) over those scores; the reason above names the first item that "
               "differs.")


# Kept mistakes, each with its hint --------------------------------------------------------


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


mistakes.add("sum not rescaled when the maximum grows",
             "when the maximum rises from m to m_new, the sum so far counts exp(x - m), not "
             "exp(x - m_new): multiply it by exp(m - m_new) before adding the new block.",
             _stats_checked(_stats_no_rescale))


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


mistakes.add("new block exponentiated with the old maximum",
             "you exponentiated the new block against the old maximum and rescaled afterwards: right "
             "on paper, but a block far above the old maximum overflows to inf. Update the running "
             "maximum first, then exponentiate.",
             _stats_checked(_stats_old_max_first))


def _stats_per_block(blocks):
    maxima = torch.stack([b.amax(dim=-1) for b in blocks])
    shift = torch.where(torch.isneginf(maxima), torch.zeros_like(maxima), maxima)
    sums = torch.stack([torch.exp(b - s[..., None]).sum(dim=-1) for b, s in zip(blocks, shift)])
    return maxima, sums


mistakes.add("statistics of each block alone",
             "maxima[i] and sums[i] describe all blocks 0..i seen so far, not block i on its own: "
             "carry the running maximum and sum from one block to the next.",
             _stats_checked(_stats_per_block))


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


mistakes.add("NaN while a row is fully masked",
             "while a row has seen only -inf, m_new is -inf and score - m_new is -inf - (-inf) = NaN; "
             "subtract 0 instead in that case, so its sum stays 0.",
             _stats_checked(_stats_nan_masked))


def _stats_on_last_axis(blocks):
    maxima, sums = online_softmax_stats(blocks)
    return maxima.movedim(0, -1), sums.movedim(0, -1)


mistakes.add("history stacked on the last axis",
             "you stacked the statistics of the successive blocks along the last axis, so they come out "
             "as (..., len(blocks)); the block index must be the first axis: maxima[i] and sums[i] are "
             "the statistics after block i, of shape (...).",
             _stats_checked(_stats_on_last_axis))


@mistakes.keep("no input check",
               "an empty list or blocks with different leading shapes must raise ValueError naming "
               "blocks (and the shape that does not fit), not fail later with another error.")
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


# Kept alternatives (correct answers in other styles) --------------------------------------


def _alt_stats_prefix_cat(blocks):
    maxima, sums = [], []
    for i in range(len(blocks)):
        seen = torch.cat(blocks[:i + 1], dim=-1)
        top = seen.amax(dim=-1)
        safe = torch.nan_to_num(top, neginf=0.0)
        maxima.append(top)
        sums.append(torch.exp(seen - safe[..., None]).sum(dim=-1))
    return torch.stack(maxima), torch.stack(sums)


alternatives.add("prefix recomputed",
                 "concatenate blocks 0..i and recompute max and sum each time",
                 _stats_checked(_alt_stats_prefix_cat))


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


alternatives.add("logsumexp in float64",
                 "torch.logsumexp of each prefix in float64, sums = exp(lse - max)",
                 _stats_checked(_alt_stats_logsumexp64))


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


alternatives.add("merge fold",
                 "per-block (max, sum) merged left to right with the exact merge rule",
                 _stats_checked(_alt_stats_merge_fold))


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


alternatives.add("masked matrix",
                 "vectorised: one masked copy of all scores per prefix",
                 _stats_checked(_alt_stats_masked_matrix))


# Registration -----------------------------------------------------------------------------

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
        Check("large jumps with random masks", _stats_hidden_masked_calls,
              hint=_STATS_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
