"""ch04_ex1: One context vector.

Write `context_vector(inputs, query_index)` returning the context vector of token
`query_index` in *simple* self-attention (no projections, no scaling): the scores are
the dot products of `inputs[query_index]` with every row of `inputs`, the weights are
their softmax, and the context vector is the weighted sum of the rows of `inputs`.
Any style will do; writing it once with Python loops over tokens and columns (no `@`,
no `torch.softmax`) shows every multiplication, and the checks accept that too.

- `inputs`: a floating-point tensor of shape `(num_tokens, d_in)`;
  `query_index`: an `int`.
- Return a tensor of shape `(d_in,)` with the dtype of `inputs`.
- Raise `ValueError`, with `query_index` named in the message, unless
  `0 <= query_index < num_tokens` (negative indices are refused as well).
"""
from __future__ import annotations

import math

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import INPUTS, TOKENS, sentence_for

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def context_vector(inputs, query_index):
    """Context vector of token ``query_index`` in simple self-attention, shape (d_in,)."""
    num_tokens = inputs.shape[0]
    if not 0 <= query_index < num_tokens:
        raise ValueError(f"query_index must satisfy 0 <= query_index < num_tokens = {num_tokens} "
                         f"(inputs has shape {tuple(inputs.shape)}), got {query_index}")
    scores = inputs @ inputs[query_index]
    weights = torch.softmax(scores, dim=0)
    return weights @ inputs


# Inputs of the public and hidden checks ---------------------------------------------------


def _cv_sentence_calls(seed):
    inputs = sentence_for(seed)
    return [Call(args=(inputs.clone(), i)) for i in range(len(TOKENS))]


def _cv_random_calls(seed):
    g = gen(seed)
    x32 = torch.randn(7, 5, generator=g)
    x64 = torch.randn(4, 3, generator=g, dtype=torch.float64)
    q = int(torch.randint(0, 7, (1,), generator=g))
    return [Call(args=(x32, q)), Call(args=(x64, 3))]


def _cv_bad_calls(seed):
    if seed == 0:  # the public case
        return [Call(args=(INPUTS.clone(), 6)),
                Call(args=(INPUTS.clone(), -1)),
                Call(args=(INPUTS.clone(), 100))]
    g = gen(seed)
    inputs = sentence_for(seed)
    return [Call(args=(inputs.clone(), len(TOKENS) + randint(g, 0, 3))),
            Call(args=(inputs.clone(), -randint(g, 1, 6))),
            Call(args=(inputs.clone(), randint(g, 20, 500)))]


def _cv_big_calls(seed):
    g = gen(seed)
    x = torch.randn(12, 8, generator=g)
    return [Call(args=(x, i)) for i in (0, 5, 11)]


# Kept mistakes, each with its hint --------------------------------------------------------


def _cv_check_index(inputs, query_index):
    num_tokens = inputs.shape[0]
    if not 0 <= query_index < num_tokens:
        raise ValueError(f"query_index {query_index} out of range for {num_tokens} tokens")


@mistakes.keep("sum-normalised scores",
               "you divided the scores by their sum; attention weights come from the softmax "
               "(exponentiate, then normalise).")
def _cv_sum_normalised(inputs, query_index):
    _cv_check_index(inputs, query_index)
    scores = inputs @ inputs[query_index]
    return (scores / scores.sum()) @ inputs


@mistakes.keep("scaled by sqrt(d_in)",
               "you divided the scores by sqrt(d_in); this first, simple form of self-attention uses "
               "the raw dot products (the scaling comes with the trainable projections).")
def _cv_scaled(inputs, query_index):
    _cv_check_index(inputs, query_index)
    scores = inputs @ inputs[query_index] / math.sqrt(inputs.shape[1])
    return torch.softmax(scores, dim=0) @ inputs


@mistakes.keep("no range check",
               "Python indexing accepts negative or too-large positions differently; test "
               "0 <= query_index < num_tokens yourself and raise ValueError naming query_index.")
def _cv_no_range_check(inputs, query_index):
    scores = inputs @ inputs[query_index]
    return torch.softmax(scores, dim=0) @ inputs


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("Python loops",
                   "loops over tokens and columns, max-shifted exp in Python floats")
def _cv_alt_loops(inputs, query_index):
    # Python loops over tokens and columns, a max-shifted softmax in Python floats.
    num_tokens, d_in = inputs.shape
    if query_index < 0 or query_index >= num_tokens:
        raise ValueError(f"query_index={query_index} is outside 0..{num_tokens - 1}")
    query = inputs[query_index].tolist()
    rows = inputs.tolist()
    scores = [sum(a * b for a, b in zip(row, query)) for row in rows]
    top = max(scores)
    exps = [math.exp(v - top) for v in scores]
    total = sum(exps)
    context = [0.0] * d_in
    for row, e in zip(rows, exps):
        for j in range(d_in):
            context[j] += e / total * row[j]
    return torch.tensor(context, dtype=inputs.dtype)


@alternatives.keep("einsum in float64",
                   "einsum for scores and sum, computed in float64, cast back")
def _cv_alt_einsum64(inputs, query_index):
    # einsum in float64, cast back to the input dtype.
    if not (isinstance(query_index, int) and 0 <= query_index < inputs.size(0)):
        raise ValueError(f"bad query_index {query_index!r} for inputs of shape {inputs.shape}")
    x = inputs.double()
    weights = torch.softmax(torch.einsum("td,d->t", x, x[query_index]), dim=0)
    return torch.einsum("t,td->d", weights, x).to(inputs.dtype)


@alternatives.keep("matrix form, one row",
                   "every context vector as matrix products, then row query_index")
def _cv_alt_all_rows(inputs, query_index):
    # All context vectors as matrices (the next section's form), then one row picked.
    if query_index not in range(len(inputs)):
        raise ValueError("query_index must be one of the token positions")
    weights = torch.softmax(inputs @ inputs.T, dim=-1)
    return (weights @ inputs)[query_index]


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch04_ex1", title="One context vector",
    name="context_vector", reference=context_vector, points=1,
    checks=[
        Check("the chapter's sentence, every token as the query", _cv_sentence_calls, seed=0,
              hint="score = dot product of the query with each token, weights = softmax of the scores, "
                   "context = weighted sum of the token embeddings."),
        Check("7 random tokens of width 5 (float32) and 4 of width 3 (float64)", _cv_random_calls, seed=1,
              hint="this check uses random tokens in float32 and in float64: the context vector has shape "
                   "(d_in,) and the dtype of inputs, and its values are compared too."),
        Check("query_index out of range (6, -1, 100) raises ValueError naming query_index",
              _cv_bad_calls, seed=0, must_mention=["query_index"], weight=0.5,
              hint="check 0 <= query_index < num_tokens before computing anything, and name query_index "
                   "in the message."),
        Check("12 random tokens of width 8 (hidden)", _cv_big_calls, seed=2, public=False,
              hint="score = dot product, weights = softmax over all tokens, context = weighted sum."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
