r"""ch01_ex1: Attention pooling as a weighted average.

Write `attention_pool(weights, values)`.

- `weights`: a float tensor of shape `(num_queries, num_keys)`, or
  `(batch, num_queries, num_keys)` for a batch.
- `values`: a float tensor of shape `(num_keys, d_v)`, or `(batch, num_keys, d_v)`;
  it has the same number of dimensions as `weights` (and the same batch size).
- Return a tensor of shape `(num_queries, d_v)` (or `(batch, num_queries, d_v)`), of the
  dtype of the inputs, whose row $q$ is $\sum_k$ `weights[..., q, k] * values[..., k, :]`.
  Use the weights as given: do not normalise them.
- Raise `ValueError` (with any message) when the inputs do not fit: not both 2-D or both
  3-D, different batch sizes, or `weights.shape[-1] != values.shape[-2]`.
"""
from __future__ import annotations

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import ERROR_WEIGHT, Kept, shape_of

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _validate_pool(weights, values):
    if weights.dim() not in (2, 3) or weights.dim() != values.dim():
        raise ValueError(
            f"weights {shape_of(weights)} and values {shape_of(values)} must both be 2-D "
            f"or both be 3-D (with the same batch size)")
    if weights.shape[-1] != values.shape[-2] or weights.shape[:-2] != values.shape[:-2]:
        raise ValueError(
            f"weights {shape_of(weights)} and values {shape_of(values)} do not fit: weights "
            f"has {weights.shape[-1]} keys, values has {values.shape[-2]} rows")


def attention_pool(weights, values):
    """Reference: ``weights @ values`` after checking the shapes."""
    _validate_pool(weights, values)
    return torch.matmul(weights, values)


# Inputs of the public and hidden checks ---------------------------------------------------


def _pool_pair(g, batch, num_queries, num_keys, d_v, dtype=torch.float32):
    lead = () if batch is None else (batch,)
    weights = torch.softmax(torch.randn(*lead, num_queries, num_keys, generator=g) * 2, dim=-1)
    values = torch.randn(*lead, num_keys, d_v, generator=g) * 3 + 1
    return weights.to(dtype), values.to(dtype)


def _pool_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=_pool_pair(g, None, 3, 5, 4))]


def _pool_batched_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=_pool_pair(g, 2, 3, 6, 2))]


def _pool_unnormalized_calls(seed):
    g = torch.Generator().manual_seed(seed)
    weights = torch.rand(4, 5, generator=g) * 2  # rows deliberately do not sum to one
    values = torch.randn(5, 3, generator=g) + 2
    return [Call(args=(weights, values))]


def _pool_float64_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=_pool_pair(g, None, 3, 4, 2, torch.float64)),
            Call(args=_pool_pair(g, 2, 2, 3, 3, torch.float64))]


def _pool_bad_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [
        Call(args=_pool_pair(g, None, 2, 3, 2)),  # valid first: raising on everything must not pass
        Call(args=(torch.rand(3, 5, generator=g), torch.randn(4, 2, generator=g))),
        Call(args=(torch.rand(2, 3, 5, generator=g), torch.randn(4, 5, 2, generator=g))),
        Call(args=(torch.rand(3, 5, generator=g), torch.randn(2, 5, 2, generator=g))),
    ]


def _pool_big_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=_pool_pair(g, 4, 7, 9, 5)), Call(args=_pool_pair(g, None, 1, 1, 3)),
            Call(args=_pool_pair(g, 3, 2, 4, 2, torch.float64))]


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("ignored the weights",
               "every query got the same plain mean of the values: the weights were not used.")
def _pool_ignores_weights(weights, values):
    _validate_pool(weights, values)
    mean = values.mean(dim=-2, keepdim=True)
    return mean.expand(*weights.shape[:-1], values.shape[-1]).clone()


@mistakes.keep("divided by num_keys",
               "the result was divided by the number of keys; the weighted sum needs no further "
               "division.")
def _pool_divided_by_num_keys(weights, values):
    _validate_pool(weights, values)
    return torch.matmul(weights, values) / values.shape[-2]


@mistakes.keep("renormalized the weights",
               "the weights were rescaled to sum to one; the contract uses them as given.")
def _pool_renormalized(weights, values):
    _validate_pool(weights, values)
    return torch.matmul(weights / weights.sum(dim=-1, keepdim=True), values)


@mistakes.keep("converted to float32",
               "float64 inputs came back as float32: the inputs were converted (e.g. with "
               ".float()); keep their dtype.")
def _pool_float32(weights, values):
    _validate_pool(weights, values)
    return torch.matmul(weights.float(), values.float())


@mistakes.keep("torch.mm on a batch",
               "torch.mm multiplies two 2-D matrices only, so the batched inputs, weights (batch, num_queries, "
               "num_keys) and values (batch, num_keys, d_v), raise \"self must be a matrix\". The product for "
               "both 2-D and 3-D inputs keeps any leading batch axis: torch.matmul (the @ operator), or "
               "torch.bmm for 3-D inputs.")
def _pool_mm(weights, values):
    _validate_pool(weights, values)
    return torch.mm(weights, values)


@mistakes.keep("no shape check",
               "bad shapes must be caught by your own check and reported as a ValueError, "
               "before any matrix product.")
def _pool_unchecked(weights, values):
    return torch.matmul(weights, values)


# Kept alternatives (correct answers in other styles) --------------------------------------


# Kept alternatives: correct answers in other styles, with their own error messages.
@alternatives.keep("einsum",
                   "one einsum over an optional batch axis; shapes printed as torch.Size")
def _pool_alt_einsum(weights, values):
    if weights.dim() not in (2, 3) or values.dim() != weights.dim() \
            or weights.shape[:-2] != values.shape[:-2] or weights.shape[-1] != values.shape[-2]:
        # torch.Size printed as it is: the checks accept any usual form of a shape.
        raise ValueError(f"cannot pool: weights has shape {weights.shape}, values has shape {values.shape}")
    return torch.einsum("...qk,...kd->...qd", weights, values)


@alternatives.keep("python loops",
                   "explicit loops over batch, queries and keys; shapes printed as lists")
def _pool_alt_loops(weights, values):
    if weights.dim() != values.dim() or weights.dim() not in (2, 3):
        raise ValueError(f"weights {list(weights.shape)} and values {list(values.shape)}: "
                         "need the same number of dimensions, 2 or 3")
    if weights.shape[-1] != values.shape[-2] or weights.shape[:-2] != values.shape[:-2]:
        raise ValueError(f"weights {list(weights.shape)} does not match values {list(values.shape)}")
    batched = weights.dim() == 3
    w = weights if batched else weights.unsqueeze(0)
    v = values if batched else values.unsqueeze(0)
    out = torch.zeros(w.shape[0], w.shape[1], v.shape[2], dtype=weights.dtype)
    for b in range(w.shape[0]):
        for q in range(w.shape[1]):
            for k in range(w.shape[2]):
                out[b, q] += w[b, q, k] * v[b, k]
    return out if batched else out[0]


@alternatives.keep("float64 inside",
                   "matrix product in float64, cast back; shapes printed as 3x5")
def _pool_alt_float64(weights, values):
    ws, vs = "x".join(map(str, weights.shape)), "x".join(map(str, values.shape))
    if weights.dim() not in (2, 3) or values.dim() != weights.dim():
        raise ValueError(f"weights ({ws}) and values ({vs}) must be both 2-D or both 3-D")
    if weights.shape[:-2] != values.shape[:-2] or weights.shape[-1] != values.shape[-2]:
        raise ValueError(f"weights ({ws}) and values ({vs}) do not fit together")
    return (weights.double() @ values.double()).to(weights.dtype)


@alternatives.keep("d2l's bmm",
                   "torch.bmm as d2l pools, with a batch axis added for 2-D inputs")
def _pool_alt_d2l_bmm(weights, values):
    # d2l pools with torch.bmm on (batch, queries, keys) x (batch, keys, d_v).
    if weights.dim() != values.dim() or weights.dim() not in (2, 3) \
            or weights.shape[0:-2] != values.shape[0:-2] or weights.size(-1) != values.size(-2):
        raise ValueError("shape mismatch between weights %s and values %s"
                         % (tuple(weights.shape), tuple(values.shape)))
    if weights.dim() == 2:
        return torch.bmm(weights.unsqueeze(0), values.unsqueeze(0)).squeeze(0)
    return torch.bmm(weights, values)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch01_ex1", title="Attention pooling as a weighted average",
    name="attention_pool", reference=attention_pool, points=1,
    checks=[
        Check("3 queries pool 5 values of size 4", _pool_calls, seed=0,
              hint="row q of the result is sum over k of weights[q, k] * values[k]: compare one "
                   "row of yours with that sum written out by hand."),
        Check("a batch of 2, each with 3 queries over 6 keys", _pool_batched_calls, seed=1,
              hint="with a leading batch dimension, each batch element pools its own values "
                   "with its own weights; the result has shape (batch, num_queries, d_v)."),
        Check("weights that do not sum to one are used as given", _pool_unnormalized_calls, seed=2,
              hint="this check's weight rows sum to other totals than one; the contract's formula applies "
                   "to them unchanged."),
        Check("float64 inputs give a float64 result", _pool_float64_calls, seed=5,
              hint="the result has the dtype of the inputs, through every place where a new "
                   "tensor is created or converted."),
        Check("mismatched shapes raise ValueError",
              _pool_bad_calls, seed=3, weight=ERROR_WEIGHT,
              hint="the calls after the first have shapes that cannot fit (number of dimensions, "
                   "number of keys, batch size); each must raise ValueError."),
        Check("a larger batch, a single key and float64 (hidden)", _pool_big_calls, seed=4,
              public=False,
              hint="the result must have shape (..., num_queries, d_v) and the inputs' dtype for "
                   "every size."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
