"""ch05_ex1: The causal mask.

Write `causal_mask(num_tokens)` that returns a tensor of dtype `torch.bool` and shape
`(num_tokens, num_tokens)` whose entry `(i, j)` is `True` when query `i` must **not** attend to
key `j`, that is when `j > i` (strictly above the diagonal), and `False` otherwise (the diagonal
is `False`: a token attends to itself). `num_tokens` is a Python int; raise `ValueError` (with any
message) when it is less than 1.
"""
from __future__ import annotations

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def causal_mask(num_tokens):
    """Bool (num_tokens, num_tokens) mask, True where query i must not see key j (j > i)."""
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 1:
        raise ValueError(f"num_tokens must be a positive integer, got num_tokens={num_tokens!r}")
    return torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1)


# Inputs of the public and hidden checks ---------------------------------------------------


# Each public check's own case is what its seed (0) gives; at a grading seed the same kind of case is
# drawn afresh from that seed, never the case a release ships.

def _mask_small_calls(seed):
    # One token, then three other small sizes.
    sizes = [1, 2, 3, 5]
    if seed != 0:
        g = torch.Generator().manual_seed(seed)
        while sizes == [1, 2, 3, 5]:
            sizes = [1] + sorted(int(n) + 2 for n in torch.randperm(8, generator=g)[:3])   # from 2 to 9
    return [Call(args=(n,)) for n in sizes]


def _mask_bad_calls(seed):
    # Zero, and a negative size.
    negative = -3
    if seed != 0:
        g = torch.Generator().manual_seed(seed)
        while negative == -3:
            negative = -int(torch.randint(1, 21, (), generator=g))
    return [Call(args=(0,)), Call(args=(negative,))]


def _mask_large_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=(int(n),)) for n in torch.randint(6, 40, (3,), generator=g)]


# Kept mistakes, each with its hint --------------------------------------------------------


def _mask_validated(make):
    def impl(num_tokens):
        if num_tokens < 1:
            raise ValueError(f"num_tokens must be positive, got num_tokens={num_tokens}")
        return make(num_tokens)
    return impl


mistakes.add("diagonal masked",
             "you also hid the diagonal: a token may attend to itself, only keys strictly after it are hidden.",
             _mask_validated(lambda n: torch.ones(n, n, dtype=torch.bool).triu(0)))


mistakes.add("allowed positions marked",
             "the mask is inverted: True must mark the keys a query may NOT attend to (its future).",
             _mask_validated(lambda n: torch.ones(n, n, dtype=torch.bool).tril(0)))


mistakes.add("past hidden",
             "you hid the past instead of the future: rows are queries, columns are keys, and the "
             "future of query i is the keys j > i.",
             _mask_validated(lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1)))


mistakes.add("0/1 numbers instead of booleans",
             "return a tensor of dtype torch.bool, not 0/1 numbers.",
             _mask_validated(lambda n: torch.ones(n, n).triu(1)))


mistakes.add("no validation",
             "a size below 1 must raise ValueError, not return an empty mask or fail elsewhere.",
             lambda num_tokens: torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("position comparison",
                   "arange(n)[None, :] > arange(n)[:, None]")
def _mask_alt_arange(num_tokens):
    if num_tokens < 1:
        raise ValueError(f"num_tokens={num_tokens} must be at least 1")
    pos = torch.arange(num_tokens)
    return pos[None, :] > pos[:, None]


@alternatives.keep("LLMs-from-scratch's float triu",
                   "torch.triu(torch.ones(n, n), diagonal=1).bool()")
def _mask_alt_raschka(num_tokens):
    # LLMs-from-scratch builds torch.triu(torch.ones(n, n), diagonal=1) and uses it with .bool().
    if not isinstance(num_tokens, int) or num_tokens <= 0:
        raise ValueError("num_tokens must be a positive int, got %r" % (num_tokens,))
    return torch.triu(torch.ones(num_tokens, num_tokens), diagonal=1).bool()


@alternatives.keep("loops",
                   "a bool tensor of zeros, the upper triangle set entry by entry")
def _mask_alt_loops(num_tokens):
    if num_tokens < 1:
        raise ValueError("causal_mask: num_tokens should be >= 1, not " + str(num_tokens))
    mask = torch.zeros(num_tokens, num_tokens, dtype=torch.bool)
    for i in range(num_tokens):
        for j in range(i + 1, num_tokens):
            mask[i, j] = True
    return mask


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch05_ex1", title="The causal mask", name="causal_mask", reference=causal_mask, points=1,
    checks=[
        Check("masks for 1, 2, 3 and 5 tokens", _mask_small_calls,
              hint="row i is the query, column j the key; True marks the keys strictly after the query."),
        Check("non-positive sizes raise ValueError", _mask_bad_calls, weight=0.4,
              hint="check that num_tokens is at least 1 before building anything."),
        Check("larger masks (hidden)", _mask_large_calls, public=False,
              hint="row i is the query, column j the key; True marks the keys strictly after the query."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
