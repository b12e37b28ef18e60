"""ch07_ex4: Reading a hard alignment off the attention weights.

Write `hard_alignment(weights)` for an alignment matrix `weights` of shape
`(num_outputs, num_inputs)` (one row of attention weights per output step). Return the tuple
`(positions, monotonicity)`:

- `positions`: a `torch.long` tensor of shape `(num_outputs,)`, the input position with the
  largest weight in each row (no row of the checks has two equal largest weights, so either
  rule for ties is accepted);
- `monotonicity`: a Python `float`, the fraction of the `num_outputs - 1` consecutive pairs
  `(positions[i - 1], positions[i])` in which the position does not decrease
  (`positions[i] >= positions[i - 1]`); `1.0` when `num_outputs == 1`.

A translation that keeps the word order scores 1.0; one that must reorder, like a date written
day first and translated year first, scores lower. Raise `ValueError` naming `weights` when
`weights` is not 2-D or has a size of 0.
"""
from __future__ import annotations

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint, shape_of

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _check_weights(weights):
    if not isinstance(weights, torch.Tensor) or weights.dim() != 2 or 0 in weights.shape:
        shape = shape_of(weights)
        raise ValueError(f"weights must be a non-empty 2-D tensor (num_outputs, num_inputs), got {shape}")


def hard_alignment(weights):
    """(argmax input position per output step, fraction of steps that do not move backwards)."""
    _check_weights(weights)
    positions = weights.argmax(dim=-1)
    if positions.numel() < 2:
        return positions, 1.0
    return positions, (positions[1:] >= positions[:-1]).double().mean().item()


# Inputs of the public and hidden checks ---------------------------------------------------


def _ha_matrix(g, num_outputs, num_inputs, path):
    """Weights whose peak in row i is at input path[i], plus noise."""
    weights = torch.rand(num_outputs, num_inputs, generator=g) * 0.2
    weights[torch.arange(num_outputs), torch.tensor(path)] += 1.0
    return weights / weights.sum(dim=-1, keepdim=True)


def _ha_diagonal_ish(seed):
    g = gen(seed)
    # Non-decreasing with a repeat and one jump back: strict and >= comparisons differ. The
    # positions stay on or above the diagonal, so comparing each with its step index counts
    # the step back as monotone too.
    return [Call(args=(_ha_matrix(g, 6, 9, [0, 1, 2, 6, 5, 5]),))]


def _ha_reordering(seed):
    g = gen(seed)
    # Like a date: year first (end of the input), then month, then day (start of the input).
    return [Call(args=(_ha_matrix(g, 5, 7, [6, 6, 3, 0, 1]),)), Call(args=(_ha_matrix(g, 1, 4, [2]),))]


def _ha_bad(seed):
    g = gen(seed)
    return [Call(args=(torch.rand(2, 3, 4, generator=g),)), Call(args=(torch.rand(5, generator=g),)),
            Call(args=(torch.rand(0, 4, generator=g),))]


def _ha_score_type(seed):
    g = gen(seed)
    return [Call(args=(_ha_matrix(g, 4, 5, [0, 2, 2, 3]),)), Call(args=(_ha_matrix(g, 1, 3, [1]),))]


def _score_is_float(got, want, calls):
    # The type, then the values: a constant float must not pass a check of the type.
    for g in got:
        if g["status"] != "ok":
            return f"raised {g['error_type']}: {g['message'][:300]}"
        value = g["value"]
        items = value.get("__seq__") if isinstance(value, dict) else None
        if not items or len(items) != 2:
            return "the result is not a pair (positions, monotonicity)"
        if type(items[1]) is not float:
            kind = "a tensor" if isinstance(items[1], torch.Tensor) else type(items[1]).__name__
            return f"monotonicity is {kind}, expected a Python float"
    from ...checks.checking import compare_outcome
    for g, w, c in zip(got, want, calls):
        reason = compare_outcome(g, w, _HA_VALUES, c)
        if reason:
            return reason
    return None


_HA_VALUES = Check("values", lambda seed: [], hint="")  # default tolerances, for compare_outcome only


def _ha_random(seed):
    g = gen(seed)
    num_outputs, num_inputs = randint(g, 3, 12), randint(g, 3, 15)
    path = torch.randint(0, num_inputs, (num_outputs,), generator=g).tolist()
    path[1] = path[0]  # one repeated position at least
    return [Call(args=(_ha_matrix(g, num_outputs, num_inputs, path),)),
            Call(args=(torch.softmax(3 * torch.randn(num_outputs, num_inputs, generator=g,
                                                     dtype=torch.float64), dim=-1),))]


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("argmax over the outputs axis",
               "you took the argmax over the output steps (rows); each output step's position is the "
               "argmax over the input positions, the last axis.")
def _ha_outputs_axis(weights):
    _check_weights(weights)
    positions = weights.argmax(dim=0)
    if positions.numel() < 2:
        return positions, 1.0
    return positions, (positions[1:] >= positions[:-1]).double().mean().item()


@mistakes.keep("strictly increasing",
               "a pair that stays on the same input position counts as monotone too (it does not move "
               "backwards); you counted only strict increases (what positions[i] > positions[i - 1] "
               "counts, and so does 1 minus the share of pairs that do not increase).")
def _ha_strict(weights):
    _check_weights(weights)
    positions = weights.argmax(dim=-1)
    if positions.numel() < 2:
        return positions, 1.0
    return positions, (positions[1:] > positions[:-1]).double().mean().item()


@mistakes.keep("reversed comparison",
               "the comparison is reversed: you counted the pairs whose position does not increase "
               "(positions[i] <= positions[i - 1]); count those whose position does not decrease.")
def _ha_reversed(weights):
    _check_weights(weights)
    positions = weights.argmax(dim=-1)
    if positions.numel() < 2:
        return positions, 1.0
    return positions, (positions[1:] <= positions[:-1]).double().mean().item()


@mistakes.keep("backward moves counted",
               "you counted the pairs that move backwards (positions[i] < positions[i - 1]), which is 1 "
               "minus the score; count the pairs that do not move backwards.")
def _ha_backward_share(weights):
    _check_weights(weights)
    positions = weights.argmax(dim=-1)
    if positions.numel() < 2:
        return positions, 1.0
    return positions, (positions[1:] < positions[:-1]).double().mean().item()


@mistakes.keep("compared with the step index instead of the previous position",
               "you compared each position with its step index i (the diagonal) instead of with the "
               "previous position positions[i - 1]; the score counts the consecutive pairs whose position "
               "does not decrease, wherever they lie.")
def _ha_step_index(weights):
    _check_weights(weights)
    positions = weights.argmax(dim=-1)
    if positions.numel() < 2:
        return positions, 1.0
    steps = torch.arange(1, positions.numel())
    return positions, (positions[1:] >= steps).double().mean().item()


@mistakes.keep("divided by num_outputs",
               "there are num_outputs - 1 consecutive pairs; you divided by num_outputs.")
def _ha_per_output(weights):
    _check_weights(weights)
    positions = weights.argmax(dim=-1)
    if positions.numel() < 2:
        return positions, 1.0
    return positions, (positions[1:] >= positions[:-1]).double().sum().item() / positions.numel()


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("Python loops",
                   "lists, max with a key, zip over pairs")
def _ha_loops(weights):
    """Pure Python loops over the rows and the pairs."""
    if not torch.is_tensor(weights) or weights.ndim != 2 or weights.numel() == 0:
        raise ValueError(f"weights must be 2-D and non-empty, got shape "
                         f"{list(weights.shape) if torch.is_tensor(weights) else None}")
    rows = weights.tolist()
    best = [max(range(len(row)), key=lambda j: (row[j], -j)) for row in rows]
    pairs = list(zip(best, best[1:]))
    score = 1.0 if not pairs else sum(b >= a for a, b in pairs) / len(pairs)
    return torch.tensor(best, dtype=torch.long), score


@alternatives.keep("max indices",
                   "torch.max(...).indices, 1 - share of backward moves, torch.Size in the "
    "message")
def _ha_max_indices(weights):
    """torch.max(...).indices and a count of the backward moves."""
    if weights.dim() != 2 or min(weights.shape) == 0:
        raise ValueError(f"weights: expected (num_outputs, num_inputs), both positive; got {weights.shape}")
    positions = torch.max(weights, dim=1).indices
    backward = int((torch.diff(positions) < 0).sum())
    pairs = positions.shape[0] - 1
    return positions, float(1 - backward / pairs) if pairs else 1.0


@alternatives.keep("sort and unfold",
                   "first index of a stable descending sort, pairs from unfold")
def _ha_sorted_pairs(weights):
    """Positions from a descending sort; the pairs compared with unfold."""
    if weights.dim() != 2 or weights.size(0) < 1 or weights.size(1) < 1:
        raise ValueError("hard_alignment needs 2-D weights with at least one row and one column, "
                         f"got weights with shape {tuple(weights.shape)}")
    positions = weights.sort(dim=1, descending=True, stable=True).indices[:, 0].long()
    if len(positions) == 1:
        return positions, 1.0
    windows = positions.unfold(0, 2, 1)
    return positions, torch.mean((windows[:, 1] >= windows[:, 0]).to(torch.float64)).item()


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch07_ex4", title="Reading a hard alignment off the attention weights", name="hard_alignment",
    reference=hard_alignment, points=1,
    checks=[
        Check("a mostly monotone alignment with one repeat and one step back", _ha_diagonal_ish, seed=0,
              hint="this check compares the positions (an int64 tensor, one per output step) and the score "
                   "on a path 0, 1, 2, 6, 5, 5; the reason above says which differs."),
        Check("a reordering alignment (like year-month-day from day-month-year), and a single row",
              _ha_reordering, seed=1,
              hint="this check has a path that jumps back and a matrix with one row; the reason above says "
                   "which result differs."),
        Check("the score is a Python float", _ha_score_type, seed=4, compare=_score_is_float, weight=0.5,
              hint="the contract asks for monotonicity as a Python float (also 1.0 for a single row): "
                   "convert a tensor or a NumPy number with float(...)."),
        Check("weights that are not a non-empty 2-D tensor raise ValueError naming weights", _ha_bad,
              seed=2, must_mention=["weights"],
              hint="3-D, 1-D and empty inputs must raise ValueError whose message names weights."),
        Check("random alignments (hidden)", _ha_random, public=False,
              hint="check the positions and the score for any sizes."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
