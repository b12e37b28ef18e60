"""ch04_ex1: Simple self-attention.

Write `simple_self_attention(inputs)`: the *simple* self-attention of the chapter's first
sections (no projections, no scaling) for every query of a sequence at once. The page computes
it twice, step by step for the query *mice* and then for all queries as three matrix
operations; any style will do, Python loops over tokens and columns included, since the
checks compare only the results.

- `inputs`: a floating-point tensor of shape `(num_tokens, d_in)` or
  `(batch, num_tokens, d_in)`; batched sequences are independent of each other.
- Return a tuple `(weights, contexts)`: `weights` of shape
  `(..., num_tokens, num_tokens)`, row $i$ holding the softmax over the keys of the
  dot products of token $i$ with every token; `contexts` of shape
  `(..., num_tokens, d_in)`, row $i$ the context vector of token $i$ (the sum of the
  tokens weighted by row $i$ of `weights`). Both keep the dtype of `inputs`.
- Raise `ValueError` (any message) when `inputs` has fewer than two dimensions.
"""
from __future__ import annotations

import math

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import sentence_for

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def simple_self_attention(inputs):
    """Return ``(weights, contexts)`` of unscaled self-attention over the last two axes."""
    if inputs.dim() < 2:
        raise ValueError(f"inputs must have shape (num_tokens, d_in) or (batch, num_tokens, d_in), "
                         f"got shape {tuple(inputs.shape)}")
    scores = inputs @ inputs.transpose(-2, -1)
    weights = torch.softmax(scores, dim=-1)
    return weights, weights @ inputs


# Inputs of the public and hidden checks ---------------------------------------------------


def _ssa_sentence_calls(seed):
    return [Call(args=(sentence_for(seed),))]


def _ssa_batch_calls(seed):
    g = gen(seed)
    return [Call(args=(torch.randn(2, 5, 4, generator=g),))]


def _ssa_random_calls(seed):
    g = gen(seed)
    return [Call(args=(torch.randn(7, 5, generator=g),)),
            Call(args=(torch.randn(4, 3, generator=g, dtype=torch.float64),))]


def _ssa_bad_calls(seed):
    if seed == 0:  # the public case
        return [Call(args=(torch.tensor([0.5, 1.0, 2.0]),)), Call(args=(torch.linspace(0.0, 1.0, 5),))]
    g = gen(seed)
    return [Call(args=(torch.rand(randint(g, 2, 4), generator=g),)),
            Call(args=(torch.linspace(0.0, 1.0, randint(g, 5, 9)),))]


def _ssa_big_calls(seed):
    g = gen(seed)
    return [Call(args=(torch.randn(3, 9, 6, generator=g, dtype=torch.float64),)),
            Call(args=(torch.randn(7, 3, generator=g),))]


# Kept mistakes, each with its hint --------------------------------------------------------


def _sa_check(inputs):
    if inputs.dim() < 2:
        raise ValueError(f"inputs has shape {tuple(inputs.shape)}")


@mistakes.keep("sum-normalised scores",
               "you divided the scores by their sum; attention weights come from the softmax "
               "(exponentiate, then normalise).")
def _ssa_sum_normalised(inputs):
    _sa_check(inputs)
    scores = inputs @ inputs.transpose(-2, -1)
    weights = scores / scores.sum(dim=-1, keepdim=True)
    return weights, weights @ inputs


@mistakes.keep("softmax over the queries axis",
               "your weights are normalised over the wrong axis: each row (one query) must sum to 1 "
               "over the keys, i.e. the softmax runs along the last axis.")
def _ssa_query_axis(inputs):
    _sa_check(inputs)
    weights = torch.softmax(inputs @ inputs.transpose(-2, -1), dim=-2)
    return weights, weights @ inputs


@mistakes.keep("scaled by sqrt(d_in)",
               "you divided the scores by sqrt(d_in); the simple self-attention of this section uses the "
               "raw dot products.")
def _ssa_scaled(inputs):
    _sa_check(inputs)
    scores = inputs @ inputs.transpose(-2, -1) / math.sqrt(inputs.shape[-1])
    weights = torch.softmax(scores, dim=-1)
    return weights, weights @ inputs


@mistakes.keep("transposed the first two axes",
               "for a batch, swap only the last two axes (tokens and features) of the keys; the batch "
               "axis must stay in front.")
def _ssa_first_axes(inputs):
    _sa_check(inputs)
    weights = torch.softmax(inputs @ inputs.transpose(0, 1), dim=-1)
    return weights, weights @ inputs


@mistakes.keep("inputs.T on a batch",
               "on a batch (a 3-D tensor), .T reverses all three axes instead of swapping the last two "
               "(the token and feature axes); swap only those two, so that the same code serves one "
               "sequence and a batch.")
def _ssa_dot_T(inputs):
    # LLMs-from-scratch's `inputs @ inputs.T`: right for one sequence, not for a batch.
    _sa_check(inputs)
    weights = torch.softmax(inputs @ inputs.T, dim=-1)
    return weights, weights @ inputs


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("einsum",
                   "einsum over '...' batch axes, Tensor.softmax")
def _ssa_alt_einsum(inputs):
    if inputs.ndim not in (2, 3):
        raise ValueError(f"inputs must be 2-D or 3-D, got {inputs.ndim}-D inputs of shape {inputs.shape}")
    weights = torch.einsum("...id,...jd->...ij", inputs, inputs).softmax(dim=-1)
    return weights, torch.einsum("...ij,...jd->...id", weights, inputs)


@alternatives.keep("loops over the batch",
                   "torch.mm per sequence, torch.stack")
def _ssa_alt_loops(inputs):
    # One sequence at a time; a 2-D input is a batch of one.
    if len(inputs.shape) < 2:
        raise ValueError(f"inputs of shape {list(inputs.shape)} has no token axis")
    batch = inputs if inputs.dim() == 3 else inputs.unsqueeze(0)
    ws, cs = [], []
    for x in batch:
        w = torch.softmax(torch.mm(x, x.t()), dim=1)
        ws.append(w)
        cs.append(torch.mm(w, x))
    w, c = torch.stack(ws), torch.stack(cs)
    return (w, c) if inputs.dim() == 3 else (w[0], c[0])


@alternatives.keep("float64 by hand",
                   "softmax written out (max-shifted exp), float64, cast back")
def _ssa_alt_float64(inputs):
    # The softmax by hand (exp of max-shifted scores over their sum), in float64.
    if inputs.dim() < 2:
        raise ValueError("inputs needs shape (num_tokens, d_in) or (batch, num_tokens, d_in), "
                         "got " + "x".join(map(str, inputs.shape)))
    x = inputs.double()
    scores = x @ x.mT
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    weights = e / e.sum(dim=-1, keepdim=True)
    return weights.to(inputs.dtype), (weights @ x).to(inputs.dtype)


@alternatives.keep("Python loops over tokens and columns",
                   "one query at a time: dot products, a max-shifted softmax and the weighted sum in Python "
                   "floats, looping over the batch too")
def _ssa_alt_python_loops(inputs):
    if inputs.dim() < 2:
        raise ValueError("inputs needs a token axis and a feature axis")
    batch = inputs.tolist() if inputs.dim() == 3 else [inputs.tolist()]
    all_weights, all_contexts = [], []
    for rows in batch:
        weights, contexts = [], []
        for query in rows:
            scores = [sum(a * b for a, b in zip(query, row)) for row in rows]
            top = max(scores)
            exps = [math.exp(v - top) for v in scores]
            total = sum(exps)
            w = [e / total for e in exps]
            weights.append(w)
            contexts.append([sum(w[t] * rows[t][c] for t in range(len(rows))) for c in range(len(query))])
        all_weights.append(weights)
        all_contexts.append(contexts)
    w = torch.tensor(all_weights, dtype=torch.float64).to(inputs.dtype)
    c = torch.tensor(all_contexts, dtype=torch.float64).to(inputs.dtype)
    return (w, c) if inputs.dim() == 3 else (w[0], c[0])


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch04_ex1", title="Simple self-attention",
    name="simple_self_attention", reference=simple_self_attention, points=1,
    checks=[
        Check("the chapter's sentence (6 tokens of width 3)", _ssa_sentence_calls, seed=0,
              hint="return a tuple (weights, contexts): weights (num_tokens, num_tokens) with rows summing "
                   "to 1, contexts = weights times inputs."),
        Check("a batch of 2 sequences of 5 tokens of width 4", _ssa_batch_calls, seed=0,
              hint="this check passes a batch of shape (2, 5, 4): each sequence of the batch must get the "
                   "weights and contexts it would get alone, as a 2-D input."),
        Check("1-D inputs raise ValueError", _ssa_bad_calls, seed=0, weight=0.5,
              hint="this check passes 1-D inputs, which have no token axis, and expects a ValueError."),
        Check("a float64 batch of 3 x 9 tokens of width 6, and 7 tokens of width 3 (hidden)",
              _ssa_big_calls, seed=3, public=False,
              hint="this check uses a float64 batch and a 2-D float32 input: weights and contexts keep the "
                   "dtype of inputs, and each sequence gets what it would get alone."),
        Check("7 random tokens of width 5 (float32) and 4 of width 3 (float64) (hidden)", _ssa_random_calls,
              seed=1, public=False,
              hint="this check uses random tokens in float32 and in float64 and compares weights and "
                   "contexts, dtype and shape included."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
