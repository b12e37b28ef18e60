r"""ch03_ex4: A scale for queries and keys of unequal variance.

The page divides by $\sqrt{d}$ because the entries of the query and the key have variance 1.
Derive the scale for the general case and write it as `unit_variance_scale(query_var, key_var)`.
The entries of a query $\mathbf{q}$ and of a key $\mathbf{k}$ are independent and have mean 0;
coordinate $j$ has variance `query_var[..., j]` in $\mathbf{q}$ and `key_var[..., j]` in $\mathbf{k}$.
Return the positive scale $s$ for which the score $s\,\mathbf{q}^\top\mathbf{k}$ has variance 1.

- `query_var`, `key_var`: float tensors of shape `(..., d)` with non-negative entries (at least
  one coordinate has both variances positive), whose leading axes broadcast against each other:
  for example one key-variance vector `(d,)` for a batch of query-variance vectors `(batch, d)`.
- Return a tensor of the broadcast leading shape `(...)` (one scale per pair of variance vectors;
  a 0-dimensional tensor for two vectors), of the dtype that PyTorch's type promotion gives the
  two inputs (`float64` if either is `float64`).
"""
from __future__ import annotations

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def unit_variance_scale(query_var, key_var):
    """Var(q.k) is the sum over coordinates of Var(q_j) Var(k_j): the scale is its inverse root."""
    return (query_var * key_var).sum(dim=-1).rsqrt()


# Inputs of the public and hidden checks ---------------------------------------------------


def _unit_calls(seed):
    """All variances 1: the page's case, 1 / sqrt(d) for d = 1, 4, 16 and 64; then every query
    entry of variance 4 and every key entry of variance 1. At any other seed than the check's own
    (grading), four other sizes from 1 to about 64 in another order, and another size for the last."""
    sizes, last = (1, 4, 16, 64), 9
    if seed != 0:
        g = gen(seed)
        sizes = [randint(g, 1, 3), randint(g, 5, 12), randint(g, 13, 40), randint(g, 41, 80)]
        sizes = [sizes[i] for i in torch.randperm(4, generator=g)]
        last = randint(g, 2, 20)
    return [Call(args=(torch.ones(d), torch.ones(d))) for d in sizes] + [
        Call(args=(torch.full((last,), 4.0), torch.ones(last)))]


def _unequal_calls(seed):
    g = gen(seed)
    q = torch.tensor([4.0, 1.0, 0.25, 2.0])
    k = torch.tensor([1.0, 9.0, 0.0, 0.5])
    return [Call(args=(q, k)), Call(args=(torch.rand(6, generator=g) * 3, torch.rand(6, generator=g) * 3))]


def _batched_calls(seed):
    g = gen(seed)
    queries = (torch.rand(5, 3, generator=g) * 2).double()
    keys = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    return [Call(args=(queries, keys)), Call(args=(torch.rand(2, 1, 4, generator=g) + 0.1,
                                                   torch.rand(3, 4, generator=g) + 0.1))]


def _sampled_calls(seed):
    """Unequal variances, one of them 0. At any other seed than the check's own (grading), the
    coordinates in another order (both vectors alike) and each vector scaled by its own power of two
    from 1/2 to 2 (not both by 1): the variance of q.k is then 11.5 times 1/4 to 4, never near 1 nor
    near d = 5, so every kept mistake still shows in the sampled variance."""
    query_var, key_var = torch.tensor([9.0, 0.25, 1.0, 4.0, 0.0]), torch.tensor([0.5, 4.0, 2.0, 1.0, 3.0])
    if seed != 0:
        g = gen(seed)
        order = torch.randperm(5, generator=g)
        powers = [(a, b) for a in (-1, 0, 1) for b in (-1, 0, 1) if (a, b) != (0, 0)]
        a, b = powers[randint(g, 0, len(powers) - 1)]
        query_var, key_var = query_var[order] * 2.0 ** a, key_var[order] * 2.0 ** b
    return [Call(args=(query_var, key_var))]


def _sampled_variance_is_one(got, want, calls):
    """Draw 20,000 query-key pairs with the call's variances; the scaled scores' variance is 1.
    (A result equal to ``want`` agrees with it: that is how an answer is matched to a kept mistake.)"""
    for outcome, other, call in zip(got, want, calls):
        if outcome["status"] != "ok":
            return f"raised {outcome['error_type']}: {outcome['message'][:200]}"
        scale = outcome["value"]
        if (other["status"] == "ok" and isinstance(scale, torch.Tensor) and isinstance(other["value"], torch.Tensor)
                and scale.shape == other["value"].shape
                and torch.allclose(scale.double(), other["value"].double(), rtol=1e-4, atol=1e-6)):
            continue
        if not isinstance(scale, torch.Tensor) or scale.numel() != 1:
            return f"the result should be one scale (a 0-dimensional tensor), got {scale!r}"[:200]
        query_var, key_var = call.args
        g = torch.Generator().manual_seed(1234)
        q = torch.randn(20000, query_var.numel(), generator=g, dtype=torch.float64) * query_var.double().sqrt()
        k = torch.randn(20000, key_var.numel(), generator=g, dtype=torch.float64) * key_var.double().sqrt()
        variance = (float(scale) * (q * k).sum(-1)).var().item()
        if abs(variance - 1.0) > 0.08:
            return (f"scores scaled by {float(scale):.4g} have variance {variance:.3f} over 20,000 sampled "
                    f"pairs, not 1")
    return None


def _hidden_calls(seed):
    g = gen(seed)
    d, batch = randint(g, 1, 12), randint(g, 1, 4)
    query_var = torch.rand(batch, d, generator=g) * 4 + 0.01
    key_var = torch.rand(d, generator=g) * 4 + 0.01
    return [Call(args=(query_var, key_var)), Call(args=(key_var.double(), query_var[0].double()))]


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("1/sqrt(d), whatever the variances",
               "your scale is 1/sqrt(d) whatever the variances: that holds only when every entry has variance 1; "
               "the variance of q.k adds up Var(q_j) Var(k_j) over the coordinates.")
def _scale_ignores_variances(query_var, key_var):
    d = torch.broadcast_shapes(query_var.shape, key_var.shape)[-1]
    shape = torch.broadcast_shapes(query_var.shape[:-1], key_var.shape[:-1])
    return torch.full(shape, d ** -0.5, dtype=torch.result_type(query_var, key_var))


@mistakes.keep("product of the total variances",
               "you multiplied the total variance of q by the total variance of k; the variance of the sum "
               "q.k is the sum over coordinates of Var(q_j) Var(k_j), one product per coordinate.")
def _scale_product_of_totals(query_var, key_var):
    return (query_var.sum(-1) * key_var.sum(-1)).rsqrt()


@mistakes.keep("variances added per coordinate",
               "you added Var(q_j) and Var(k_j); for independent zero-mean entries the variance of the "
               "product q_j k_j is the product Var(q_j) Var(k_j).")
def _scale_sum_per_coordinate(query_var, key_var):
    return (query_var + key_var).sum(-1).rsqrt()


@mistakes.keep("no square root",
               "your scale divides by the variance of q.k; a variance grows with the square of a scale, so "
               "dividing by its square root (the standard deviation) gives variance 1.")
def _scale_without_root(query_var, key_var):
    return (query_var * key_var).sum(-1).reciprocal()


@mistakes.keep("summed over the first axis",
               "with a batch of variance vectors, each vector (a row) gets its own scale: the sum runs over "
               "the last axis, the coordinates.")
def _scale_first_axis(query_var, key_var):
    return (query_var * key_var).sum(0).rsqrt()


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("einsum and 1/sqrt", "one einsum over the coordinates, then 1 / sqrt")
def _scale_alt_einsum(query_var, key_var):
    query_var, key_var = torch.broadcast_tensors(query_var, key_var)
    return 1.0 / torch.sqrt(torch.einsum("...j,...j->...", query_var, key_var))


@alternatives.keep("standard deviations and a norm",
                   "the standard deviation of q.k is the norm of the vector of sigma_q sigma_k")
def _scale_alt_norm(query_var, key_var):
    stds = (query_var.sqrt() * key_var.sqrt())
    return torch.linalg.vector_norm(stds, dim=-1).reciprocal()


@alternatives.keep("a loop in float64", "the sum written as a loop over coordinates, in float64, cast back")
def _scale_alt_loop(query_var, key_var):
    dtype = torch.result_type(query_var, key_var)
    q, k = torch.broadcast_tensors(query_var.double(), key_var.double())
    total = torch.zeros(q.shape[:-1], dtype=torch.float64)
    for j in range(q.shape[-1]):
        total = total + q[..., j] * k[..., j]
    return total.pow(-0.5).to(dtype)


# Registration -----------------------------------------------------------------------------

_HINT = ("this check compares one scale per pair of variance vectors: the variance of q.k is a sum over the "
         "coordinates; the reason above says what differs.")

register(Exercise(
    label="ch03_ex4", title="A scale for queries and keys of unequal variance",
    name="unit_variance_scale", reference=unit_variance_scale, points=2,
    checks=[
        Check("every variance 1 (the page's 1/sqrt(d), for d = 1, 4, 16, 64), then queries of variance 4",
              _unit_calls, hint=_HINT),
        Check("unequal variances per coordinate (one of them 0)", _unequal_calls, hint=_HINT),
        Check("a batch of query variances against one key-variance vector, float64; broadcast leading axes",
              _batched_calls, hint=_HINT),
        Check("sampled pairs scaled by it have scores of variance 1", _sampled_calls, seed=0,
              compare=_sampled_variance_is_one,
              hint="this check draws 20,000 query-key pairs with these variances and measures the variance of "
                   "the scaled scores."),
        Check("random sizes and variances (hidden)", _hidden_calls, public=False, hint=_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
