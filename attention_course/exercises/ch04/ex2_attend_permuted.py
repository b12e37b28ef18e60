r"""ch04_ex2: Shuffle, attend, restore.

Write `attend_permuted(inputs, perm, W_query, W_key, W_value)` that runs scaled
dot-product self-attention on the *shuffled* sequence `inputs[perm]` and also puts its
output back into the original token order.

- `inputs`: shape `(num_tokens, d_in)`; `perm`: a 1-D `torch.long` tensor;
  `W_query`, `W_key`, `W_value`: matrices of shape `(d_in, d_out)`, used as `x @ W`.
- Return a tuple `(permuted_contexts, restored_contexts)`, both of shape
  `(num_tokens, d_out)`: `permuted_contexts[r]` is the context vector at position `r`
  of the shuffled sequence (whose token is `inputs[perm[r]]`), and
  `restored_contexts[t]` is the context vector that token `t` of the original sequence
  received in the shuffled run. Scale the scores by $1/\sqrt{d_k}$, $d_k$ = `d_out`.
- Raise `ValueError` naming `perm` unless `perm` is 1-D and holds each of
  `0, ..., num_tokens - 1` exactly once.

By equivariance, `restored_contexts` must equal the attention output of the unshuffled
`inputs`; check that on the chapter's sentence once your function works.
"""
from __future__ import annotations

import math

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen
from ._common import INPUTS

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def attend_permuted(inputs, perm, W_query, W_key, W_value):
    """Attention on ``inputs[perm]``, and its output put back into the original order."""
    num_tokens = inputs.shape[0]
    if perm.dim() != 1 or perm.numel() != num_tokens or \
            not torch.equal(torch.sort(perm).values, torch.arange(num_tokens, dtype=perm.dtype)):
        raise ValueError(f"perm must contain each of 0..{num_tokens - 1} exactly once (inputs has "
                         f"{num_tokens} tokens), got perm of shape {tuple(perm.shape)}: {perm.tolist()}")
    x = inputs[perm]
    queries, keys, values = x @ W_query, x @ W_key, x @ W_value
    weights = torch.softmax(queries @ keys.T / math.sqrt(keys.shape[-1]), dim=-1)
    permuted = weights @ values
    inverse = torch.argsort(perm)
    return permuted, permuted[inverse]


# Inputs of the public and hidden checks ---------------------------------------------------


def _projections(g, d_in, d_out):
    return tuple(torch.randn(d_in, d_out, generator=g) for _ in range(3))


def _ap_sentence_calls(seed):
    g = gen(seed)
    w = _projections(g, 3, 2)
    swap = torch.tensor([2, 1, 0, 3, 4, 5])      # "mice hunt owls on quiet nights"
    shift = torch.tensor([1, 2, 3, 4, 5, 0])     # a cyclic shift (not its own inverse)
    return [Call(args=(INPUTS.clone(), swap) + w), Call(args=(INPUTS.clone(), shift) + w)]


def _random_perm(n, g):
    # Never an involution: for those, a permutation and its inverse coincide.
    while True:
        perm = torch.randperm(n, generator=g)
        if not torch.equal(perm[perm], torch.arange(n)):
            return perm


def _ap_random_calls(seed):
    g = gen(seed)
    x = torch.randn(8, 4, generator=g)
    return [Call(args=(x, _random_perm(8, g)) + _projections(g, 4, 3))]


def _ap_bad_calls(seed):
    g = gen(seed)
    w = _projections(g, 3, 2)
    return [Call(args=(INPUTS.clone(), torch.tensor([0, 0, 1, 2, 3, 4])) + w),   # a repeated index
            Call(args=(INPUTS.clone(), torch.tensor([1, 0, 2, 3, 4])) + w),      # too short
            Call(args=(INPUTS.clone(), torch.tensor([1, 2, 3, 4, 5, 6])) + w)]   # out of range


def _ap_big_calls(seed):
    g = gen(seed)
    x = torch.randn(10, 5, generator=g)
    return [Call(args=(x, _random_perm(10, g)) + _projections(g, 5, 6))]


# Kept mistakes, each with its hint --------------------------------------------------------


def _ap_check(inputs, perm):
    n = inputs.shape[0]
    if perm.dim() != 1 or sorted(perm.tolist()) != list(range(n)):
        raise ValueError(f"perm is not a permutation: {perm.tolist()}")


def _ap_attend(x, W_query, W_key, W_value, scale=True):
    queries, keys, values = x @ W_query, x @ W_key, x @ W_value
    scores = queries @ keys.T
    if scale:
        scores = scores / math.sqrt(keys.shape[-1])
    return torch.softmax(scores, dim=-1) @ values


@mistakes.keep("reapplied perm",
               "you shuffled the output with perm a second time; to undo a permutation you need its "
               "inverse (they only coincide when perm is its own inverse, like a single swap).")
def _ap_reapplied(inputs, perm, W_query, W_key, W_value):
    _ap_check(inputs, perm)
    permuted = _ap_attend(inputs[perm], W_query, W_key, W_value)
    return permuted, permuted[perm]


@mistakes.keep("no validation of perm",
               "a repeated, missing or out-of-range index in perm must be refused with a ValueError "
               "naming perm, before any indexing.")
def _ap_no_validation(inputs, perm, W_query, W_key, W_value):
    permuted = _ap_attend(inputs[perm], W_query, W_key, W_value)
    return permuted, permuted[torch.argsort(perm, stable=True)]


@mistakes.keep("no scaling",
               "you forgot to divide the scores by sqrt(d_k) (the number of columns of W_key) before "
               "the softmax.")
def _ap_unscaled(inputs, perm, W_query, W_key, W_value):
    _ap_check(inputs, perm)
    permuted = _ap_attend(inputs[perm], W_query, W_key, W_value, scale=False)
    return permuted, permuted[torch.argsort(perm)]


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("restored by assignment",
                   "index_select, bincount validation, restored[perm] = permuted")
def _ap_alt_scatter(inputs, perm, W_query, W_key, W_value):
    # Restore by assignment: row r of the shuffled run belongs to token perm[r].
    n = inputs.shape[0]
    if perm.ndim != 1 or len(perm) != n or perm.min() < 0 or perm.max() >= n or \
            torch.bincount(perm, minlength=n).max() != 1:
        raise ValueError(f"perm {perm.tolist()} is not a permutation of 0..{n - 1}")
    x = inputs.index_select(0, perm)
    q, k, v = x @ W_query, x @ W_key, x @ W_value
    permuted = torch.softmax(q @ k.transpose(0, 1) / k.size(-1) ** 0.5, dim=1) @ v
    restored = torch.empty_like(permuted)
    restored[perm] = permuted
    return permuted, restored


@alternatives.keep("inverse by a loop, einsum",
                   "inverse permutation built in Python, einsum attention")
def _ap_alt_loops(inputs, perm, W_query, W_key, W_value):
    # The inverse permutation built by a loop; einsum for the attention.
    n = inputs.shape[0]
    order = perm.tolist() if perm.dim() == 1 else None
    if order is None or sorted(order) != list(range(n)):
        raise ValueError(f"perm must hold each token index exactly once, got perm={perm.tolist()}")
    inverse = [0] * n
    for r, t in enumerate(order):
        inverse[t] = r
    x = inputs[order]
    q, k, v = (torch.einsum("td,de->te", x, W) for W in (W_query, W_key, W_value))
    weights = torch.einsum("ie,je->ij", q, k).div(math.sqrt(W_key.shape[1])).softmax(-1)
    permuted = torch.einsum("ij,je->ie", weights, v)
    return permuted, permuted[inverse]


@alternatives.keep("equivariance in float64",
                   "restored = attention on the unshuffled tokens, float64")
def _ap_alt_equivariance(inputs, perm, W_query, W_key, W_value):
    # Uses the property itself, in float64: the restored run is attention on the unshuffled tokens.
    n = inputs.shape[0]
    if perm.dim() != 1 or set(perm.tolist()) != set(range(n)) or perm.numel() != n:
        raise ValueError("perm must be a permutation of the token positions")

    def attend(x):
        q, k, v = x @ W_query.double(), x @ W_key.double(), x @ W_value.double()
        return torch.softmax(q @ k.T / math.sqrt(k.shape[1]), dim=-1) @ v

    restored = attend(inputs.double())
    return attend(inputs.double()[perm]).to(inputs.dtype), restored.to(inputs.dtype)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch04_ex2", title="Shuffle, attend, restore",
    name="attend_permuted", reference=attend_permuted, points=2,
    checks=[
        Check("the chapter's sentence, owls and mice swapped, then cyclically shifted",
              _ap_sentence_calls, seed=8,
              hint="this check swaps owls and mice, then shifts the sentence cyclically, and compares both "
                   "returned tensors: the first is scaled attention (sqrt(d_k)) over inputs[perm]; in the "
                   "second, row t is the context of original token t."),
        Check("8 random tokens, a random permutation", _ap_random_calls, seed=9,
              hint="restored_contexts[t] must be the context of original token t, which sits at the "
                   "position where perm holds t."),
        Check("a perm that is not a permutation of 0..num_tokens-1 raises ValueError naming perm",
              _ap_bad_calls, seed=10, must_mention=["perm"], weight=0.5,
              hint="check that perm is 1-D and holds each index 0..num_tokens-1 exactly once; name perm "
                   "in the message."),
        Check("10 random tokens, a random permutation (hidden)", _ap_big_calls, seed=11, public=False,
              hint="this check compares both returned tensors for 10 random tokens and a random "
                   "permutation."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
