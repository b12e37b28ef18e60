r"""ch04_ex6: From interleaved to half-split rotary weights.

The chapter's `rotate_pairs` uses the *interleaved* layout: columns $2i$ and $2i+1$ form
pair $i$, turned by the angle $m\,\theta_i$ at position $m$, with
$\theta_i = 10000^{-2i/d_k}$. In the *half-split* layout, pair $i$ is columns $i$ and
$i + d_k/2$ instead, turned by the same angle $m\,\theta_i$ and in the same direction (the
first column of a pair plays the role of column $2i$, the second that of column $2i+1$).
Write `to_half_split(w)`, which converts a projection matrix trained for the interleaved
layout into one that gives the same attention scores under the half-split layout.

- `w`: a floating-point tensor of shape `(..., d_in, d_k)` with `d_k` even, used as
  `x @ w` (as $W_q$ and $W_k$ are in this chapter). Leading axes, if any, hold independent
  matrices (one per head, say).
- Return a tensor `w2` of the shape and dtype of `w` such that, for every `x` and every
  position, the half-split rotary embedding of `x @ w2` is the interleaved rotary embedding
  of `x @ w` with its columns reordered, by one reordering that depends on `d_k` only
  (the same for queries and keys). So when both $W_q$ and $W_k$ are converted, every score
  $\tilde{\mathbf{q}}_m \cdot \tilde{\mathbf{k}}_n$ stays what it was.

The checks compare your matrices entry by entry, and they also compute both rotary
embeddings themselves and compare the scores of converted and original matrices for tokens
at random positions. Check the property yourself too: write a half-split version of
`rotate_pairs` in a cell of your own and compare the scores. Then explain: the rotated
queries and keys of the two layouts are different vectors, so why is every score the same?
"""
from __future__ import annotations

import torch

from ...checks.checking import tensor_problem
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def to_half_split(w):
    """Reference: the even columns (first coordinates of the pairs), then the odd ones."""
    return torch.cat([w[..., 0::2], w[..., 1::2]], dim=-1)


# Inputs of the public and hidden checks ---------------------------------------------------


def _theta(d_k):
    return 10000.0 ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)


def _rope_interleaved(x, positions):
    """Trusted interleaved RoPE in float64, as complex numbers: pair i is (x[2i], x[2i+1])."""
    turn = torch.polar(torch.ones(len(positions), x.shape[-1] // 2, dtype=torch.float64),
                       positions.double()[:, None] * _theta(x.shape[-1]))
    z = torch.complex(x[..., 0::2], x[..., 1::2]) * turn
    return torch.stack([z.real, z.imag], dim=-1).flatten(-2)


def _rope_half_split(x, positions):
    """Trusted half-split RoPE in float64, as complex numbers: pair i is (x[i], x[i + d_k/2])."""
    half = x.shape[-1] // 2
    turn = torch.polar(torch.ones(len(positions), half, dtype=torch.float64),
                       positions.double()[:, None] * _theta(x.shape[-1]))
    z = torch.complex(x[..., :half], x[..., half:]) * turn
    return torch.cat([z.real, z.imag], dim=-1)


def _compare_scores(got, want, calls):
    """Calls come in pairs (W_q, W_k). An answer equal to ``want`` agrees with it (that is how an
    answer is matched to a kept mistake); otherwise the converted pair must give, under half-split
    RoPE, the scores that the original pair gives under interleaved RoPE."""
    for i, (g, w) in enumerate(zip(got, want)):
        where = f"call {i + 1} of {len(calls)} ({'W_q' if i % 2 == 0 else 'W_k'} of pair {i // 2 + 1}): the result"
        problem = tensor_problem(g, w, where)
        if problem:
            return problem
    if all(torch.allclose(g["value"].double(), w["value"].double(), rtol=1e-6, atol=1e-6)
           for g, w in zip(got, want)):
        return None
    for pair in range(len(calls) // 2):
        w_q, w_k = calls[2 * pair].args[0].double(), calls[2 * pair + 1].args[0].double()
        new_q, new_k = got[2 * pair]["value"].double(), got[2 * pair + 1]["value"].double()
        d_in, d_k = w_q.shape
        g = torch.Generator().manual_seed(1000 * d_in + d_k)
        x = torch.randn(7, d_in, generator=g, dtype=torch.float64)
        positions = torch.randint(0, 2000, (7,), generator=g)
        before = _rope_interleaved(x @ w_q, positions) @ _rope_interleaved(x @ w_k, positions).T
        after = _rope_half_split(x @ new_q, positions) @ _rope_half_split(x @ new_k, positions).T
        gap = (after - before).abs().max().item()
        if not gap <= 1e-6 * max(1.0, before.abs().max().item()):
            return (f"pair {pair + 1}: 7 tokens at positions {positions.tolist()} get scores under half-split "
                    f"RoPE with your converted W_q and W_k that differ by up to {gap:.3g} from their scores "
                    f"under interleaved RoPE with the original matrices")
    return None


def _ths_small_calls(seed):
    """The 8 x 8 matrix 0, 1, ..., 63 (row by row), then a random 12 x 12 one."""
    g = gen(seed)
    return [Call(args=(torch.arange(64, dtype=torch.float32).reshape(8, 8),)),
            Call(args=(torch.randn(12, 12, generator=g),))]


def _ths_pair_calls(seed):
    g = gen(seed)
    return [Call(args=(torch.randn(6, 8, generator=g),)), Call(args=(torch.randn(6, 8, generator=g),)),
            Call(args=(torch.randn(16, 16, generator=g),)), Call(args=(torch.randn(16, 16, generator=g),))]


def _ths_heads_calls(seed):
    g = gen(seed)
    return [Call(args=(torch.randn(2, 10, 8, generator=g),)),
            Call(args=(torch.randn(2, 3, 16, 8, generator=g, dtype=torch.float64),))]


def _ths_random_calls(seed):
    g = gen(seed)
    calls = []
    for _ in range(2):
        leading = tuple(randint(g, 1, 3) for _ in range(randint(g, 0, 2)))
        d_in, d_k = randint(g, 1, 12), 2 * randint(g, 4, 12)
        dtype = torch.float64 if randint(g, 0, 1) else torch.float32
        calls.append(Call(args=(torch.randn(*leading, d_in, d_k, generator=g, dtype=dtype),)))
    return calls


def _ths_random_pair_calls(seed):
    g = gen(seed)
    d_in, d_k = randint(g, 2, 12), 2 * randint(g, 4, 16)
    return [Call(args=(torch.randn(d_in, d_k, generator=g),)), Call(args=(torch.randn(d_in, d_k, generator=g),))]


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("the inverse reordering",
               "your result converts the other way, from the half-split layout to the interleaved one: it "
               "treats columns i and i + d_k/2 of w as a pair. In w (trained for the interleaved layout) "
               "columns 2i and 2i+1 are the pair, and your result must hold them as a half-split pair.")
def _ths_inverse(w):
    half = w.shape[-1] // 2
    out = torch.empty_like(w)
    out[..., 0::2], out[..., 1::2] = w[..., :half], w[..., half:]
    return out


@mistakes.keep("rows reordered",
               "you reordered the rows of w; the rows index the input features, which rotary embeddings "
               "never touch. The pairs are among the output features, the columns of w (queries are x @ w).")
def _ths_rows(w):
    return torch.cat([w[..., 0::2, :], w[..., 1::2, :]], dim=-2)


@mistakes.keep("transposed result",
               "your result holds the right columns but is transposed, (d_k, d_in) like an nn.Linear weight; "
               "the converted matrix keeps the layout of w, (..., d_in, d_k), and is used as x @ w2.")
def _ths_transposed(w):
    return torch.cat([w[..., 0::2], w[..., 1::2]], dim=-1).transpose(-2, -1)


@mistakes.keep("pairs in the wrong order",
               "your first half holds the columns 2i+1 of w and your second half the columns 2i: the pairs are "
               "right but each pair's two columns are swapped, which turns it the other way, so the score of an "
               "offset n - m becomes the score of the offset m - n.")
def _ths_swapped_within_pairs(w):
    return torch.cat([w[..., 1::2], w[..., 0::2]], dim=-1)


@mistakes.keep("mirrored partners",
               "the partner of column i ends up in column d_k - 1 - i of your result (your second half runs "
               "backwards); in the half-split layout pair i is columns i and i + d_k/2.")
def _ths_mirrored(w):
    return torch.cat([w[..., 0::2], w[..., 1::2].flip(-1)], dim=-1)


@mistakes.keep("the second axis reordered",
               "on a single matrix your answer is right, but with leading axes (one matrix per head) it reorders "
               "the second axis; the columns of every matrix are the last axis, whatever axes come before.")
def _ths_second_axis(w):
    d_k = w.shape[-1]
    order = torch.cat([torch.arange(0, d_k, 2), torch.arange(1, d_k, 2)])
    return w[:, order]


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("reshape and transpose",
                   "split the last axis into (pair, 2), swap those two axes, flatten again")
def _ths_alt_reshape(w):
    return w.unflatten(-1, (-1, 2)).transpose(-2, -1).flatten(-2)


@alternatives.keep("a loop over the pairs", "copy column 2i to i and 2i+1 to i + d_k/2, one pair at a time")
def _ths_alt_loop(w):
    out = torch.zeros_like(w)
    half = w.shape[-1] // 2
    for i in range(half):
        out[..., i] = w[..., 2 * i]
        out[..., half + i] = w[..., 2 * i + 1]
    return out


@alternatives.keep("a permutation matrix in float64",
                   "w @ P with P the 0/1 matrix of the reordering, in float64, cast back to w's dtype")
def _ths_alt_matrix(w):
    d_k = w.shape[-1]
    perm = torch.zeros(d_k, d_k, dtype=torch.float64)
    for i in range(d_k // 2):
        perm[2 * i, i] = 1.0
        perm[2 * i + 1, d_k // 2 + i] = 1.0
    return (w.double() @ perm).to(w.dtype)


@alternatives.keep("argsort and gather", "sort the column indices by (parity, index), gather along the last axis")
def _ths_alt_gather(w):
    d_k = w.shape[-1]
    columns = torch.arange(d_k)
    order = torch.argsort((columns % 2) * d_k + columns)
    return torch.gather(w, -1, order.expand(w.shape).contiguous())


@alternatives.keep("through nn.Linear's layout",
                   "transpose to (d_k, d_in) as a checkpoint stores it, reorder the rows pair-wise, transpose back")
def _ths_alt_linear_layout(w):
    stored = w.transpose(-2, -1)                       # (..., d_k, d_in), like nn.Linear.weight
    d_k, d_in = stored.shape[-2:]
    rows = stored.reshape(*stored.shape[:-2], d_k // 2, 2, d_in).transpose(-3, -2)
    return rows.reshape(*stored.shape[:-2], d_k, d_in).transpose(-2, -1)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch04_ex6", title="From interleaved to half-split rotary weights",
    name="to_half_split", reference=to_half_split, points=3, kind="function",
    checks=[
        Check("the 8 x 8 matrix 0, 1, ..., 63 and a random 12 x 12 matrix", _ths_small_calls, seed=0,
              hint="this check compares your matrix with the expected one entry by entry; the first call's "
                   "entries are their own positions (row * 8 + column), so the reason shows which column of w "
                   "landed where."),
        Check("scores of converted W_q and W_k under half-split RoPE equal the original ones under interleaved "
              "RoPE, (d_in, d_k) = (6, 8) and (16, 16)", _ths_pair_calls, seed=1, compare=_compare_scores,
              hint="this check places 7 tokens at random positions and compares the scores of the original "
                   "W_q and W_k under interleaved RoPE with those of your converted pair under half-split RoPE."),
        Check("per-head matrices (2, 10, 8) and float64 matrices (2, 3, 16, 8)", _ths_heads_calls, seed=2,
              hint="this check converts matrices with leading axes (one per head) and float64 matrices, and "
                   "compares them entry by entry with the expected ones, shape and dtype included."),
        Check("random sizes, leading axes and dtypes (hidden)", _ths_random_calls, seed=3, public=False,
              hint="this check compares converted matrices of random sizes, with and without leading axes, "
                   "entry by entry."),
        Check("scores of a random-sized converted pair (hidden)", _ths_random_pair_calls, seed=4, public=False,
              compare=_compare_scores,
              hint="this check compares the scores of a random W_q and W_k under interleaved RoPE with those "
                   "of your converted pair under half-split RoPE."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
