r"""ch01_ex2: From non-negative scores to weights.

Some similarity measures already give non-negative scores (for instance
$\exp(-\lVert \mathbf{q} - \mathbf{k} \rVert^2)$). Write `normalize_weights(scores)`
that turns such scores into attention weights without a softmax.

- `scores`: a float tensor of shape `(..., num_keys)` (any number of leading dimensions,
  `num_keys >= 1`) with non-negative entries.
- Return a tensor of the same shape and dtype in which every slice along the last axis is
  divided by its own sum, so that it sums to one.
- A slice whose scores are all zero expresses no preference: it becomes uniform weights,
  `1 / num_keys` in every entry (not NaN, not zeros).
- Raise `ValueError`, with the word `scores` in its message, when any entry is negative.
"""
from __future__ import annotations

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import ERROR_WEIGHT, Kept, shape_of

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _validate_scores(scores):
    if scores.dim() < 1 or scores.shape[-1] == 0:
        raise ValueError(f"scores must have at least one key along the last axis, got shape {shape_of(scores)}")
    if bool((scores < 0).any()):
        raise ValueError(
            f"scores must be non-negative; scores of shape {shape_of(scores)} has a "
            f"negative entry (minimum {scores.min().item():.4g})")


def normalize_weights(scores):
    """Reference: divide each row by its sum; an all-zero row becomes uniform."""
    _validate_scores(scores)
    totals = scores.sum(dim=-1, keepdim=True)
    safe_totals = torch.where(totals > 0, totals, torch.ones_like(totals))
    uniform = torch.full_like(scores, 1.0 / scores.shape[-1])
    return torch.where(totals > 0, scores / safe_totals, uniform)


# Inputs of the public and hidden checks ---------------------------------------------------


def _scores_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=(torch.rand(3, 5, generator=g) * 4,))]


def _scores_batched_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=(torch.rand(2, 3, 4, generator=g) * 2,))]


def _scores_zero_row_calls(seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(4, 6, generator=g) + 0.1
    scores[1] = 0.0
    return [Call(args=(scores,))]


def _scores_float64_calls(seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(3, 4, generator=g, dtype=torch.float64) * 3
    scores[2] = 0.0
    return [Call(args=(scores,)), Call(args=(torch.rand(5, generator=g, dtype=torch.float64),))]


def _scores_bad_calls(seed):
    g = torch.Generator().manual_seed(seed)
    negative = torch.rand(3, 4, generator=g)
    negative[2, 1] = -0.5
    return [Call(args=(torch.rand(2, 3, generator=g) + 0.1,)), Call(args=(negative,))]


def _scores_big_calls(seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(3, 5, 7, generator=g) * 10
    scores[0, 2] = 0.0
    scores[2, 4] = 0.0
    one_key = torch.rand(4, 1, generator=g) + 0.5
    tiny = torch.rand(2, 6, generator=g, dtype=torch.float64) * 1e-30  # small but not zero
    return [Call(args=(scores,)), Call(args=(one_key,)), Call(args=(tiny,))]


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("normalised over the queries axis",
               "the totals were taken over the queries axis; each query's weights over the "
               "keys (the last axis) must sum to one.")
def _normalize_over_queries(scores):
    _validate_scores(scores)
    totals = scores.sum(dim=0, keepdim=True)
    safe_totals = torch.where(totals > 0, totals, torch.ones_like(totals))
    uniform = torch.full_like(scores, 1.0 / scores.shape[0])
    return torch.where(totals > 0, scores / safe_totals, uniform)


@mistakes.keep("softmax instead of dividing",
               "a softmax exponentiates the scores first, which changes their ratios; here the "
               "scores are already non-negative and only need dividing by their total.")
def _normalize_softmax(scores):
    _validate_scores(scores)
    return torch.softmax(scores, dim=-1)


@mistakes.keep("zero rows give NaN",
               "an all-zero row divides 0 by 0 and gives NaN; the contract asks for uniform "
               "weights in that row.")
def _normalize_nan_rows(scores):
    _validate_scores(scores)
    return scores / scores.sum(dim=-1, keepdim=True)


@mistakes.keep("zero rows stay zero",
               "guarding the division keeps an all-zero row at zero, so it does not sum to one; "
               "the contract asks for uniform weights in that row.")
def _normalize_zero_rows(scores):
    _validate_scores(scores)
    return scores / scores.sum(dim=-1, keepdim=True).clamp_min(1e-12)


@mistakes.keep("totals without keepdim",
               "the totals lost the axis they were summed over: a (..., num_keys) tensor divided by "
               "totals of shape (...) lines the totals up with the keys axis, so the shapes do not "
               "broadcast (or, when the sizes happen to agree, each column is divided by another "
               "row's total); keep the summed axis with keepdim=True.")
def _normalize_without_keepdim(scores):
    _validate_scores(scores)
    totals = scores.sum(dim=-1)
    uniform = torch.full_like(scores, 1.0 / scores.shape[-1])
    return torch.where(totals > 0, scores / totals, uniform)


@mistakes.keep("no check for negative scores",
               "negative scores must be rejected with a ValueError that names scores.")
def _normalize_unchecked(scores):
    totals = scores.sum(dim=-1, keepdim=True)
    safe_totals = torch.where(totals > 0, totals, torch.ones_like(totals))
    uniform = torch.full_like(scores, 1.0 / scores.shape[-1])
    return torch.where(totals > 0, scores / safe_totals, uniform)


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("row loop",
                   "a Python loop over the rows of a 2-D view")
def _normalize_alt_loops(scores):
    if (scores < 0).any():
        raise ValueError(f"negative entry in scores (shape {scores.shape})")
    flat = scores.reshape(-1, scores.shape[-1])
    out = torch.empty_like(flat)
    for r in range(flat.shape[0]):
        total = flat[r].sum()
        out[r] = flat[r] / total if total > 0 else 1.0 / flat.shape[1]
    return out.reshape(scores.shape)


@alternatives.keep("NaN replaced",
                   "divide, then nan_to_num turns the 0/0 rows into 1/num_keys")
def _normalize_alt_nan_to_num(scores):
    if scores.min() < 0:
        raise ValueError("scores contain a negative value")
    weights = scores / scores.sum(-1, keepdim=True)  # 0/0 = NaN exactly in the all-zero rows
    return torch.nan_to_num(weights, nan=1.0 / scores.shape[-1])


@alternatives.keep("ones in empty rows",
                   "an all-zero row is replaced by ones before dividing")
def _normalize_alt_ones_in_empty_rows(scores):
    if torch.any(scores < 0):
        raise ValueError("normalize_weights: scores must not be negative")
    empty = (scores == 0).all(dim=-1, keepdim=True)
    filled = torch.where(empty, torch.ones_like(scores), scores)  # an empty row counts every key once
    return filled / filled.sum(dim=-1, keepdim=True)


@alternatives.keep("float64 inside",
                   "computed in float64 and cast back")
def _normalize_alt_float64(scores):
    if bool((scores < 0).any()):
        raise ValueError("all scores must be >= 0")
    s = scores.double()
    n = s.shape[-1]
    totals = s.sum(-1, keepdim=True)
    out = torch.where(totals > 0, s / totals.clamp_min(1e-300), torch.full_like(s, 1 / n))
    return out.to(scores.dtype)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch01_ex2", title="From non-negative scores to weights",
    name="normalize_weights", reference=normalize_weights, points=1,
    checks=[
        Check("3 queries by 5 keys", _scores_calls, seed=0,
              hint="each row (one query) is divided by its own total, so that it sums to one; "
                   "compare your row sums and ratios with that."),
        Check("a (2, 3, 4) batch is normalised along the last axis", _scores_batched_calls, seed=1,
              hint="with leading dimensions, every slice along the last axis (the keys) is "
                   "normalised on its own."),
        Check("an all-zero row becomes uniform weights", _scores_zero_row_calls, seed=2,
              hint="row 1 of this check is all zeros; the contract gives such a row 1/num_keys "
                   "in every entry."),
        Check("float64 scores, a zero row and a 1-D row keep float64", _scores_float64_calls, seed=5,
              hint="the result has the dtype and shape of scores, including for a single 1-D row."),
        Check("negative scores raise ValueError naming scores", _scores_bad_calls, seed=3,
              must_mention=["scores"], weight=ERROR_WEIGHT,
              hint="the second call holds a negative entry; it must raise a ValueError whose "
                   "message names scores."),
        Check("larger batches with zero rows, a single key and tiny scores (hidden)",
              _scores_big_calls, seed=4, public=False,
              hint="any number of leading dimensions, zero rows, num_keys == 1 and very small "
                   "(but non-zero) scores."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
