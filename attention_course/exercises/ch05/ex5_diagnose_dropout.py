r"""ch05_ex5: Diagnosing a dropout layer from its outputs.

A dropout layer with drop probability `p` was called `num_draws` times, in training mode, on the
same attention weights, all equal to 1. Only its outputs are known. Decide from them what the
layer does, and write `diagnose_dropout(draws, p)`.

- `draws`: a float32 tensor `(num_draws, num_weights)`, one call's output per row
  (`num_draws >= 20`, `num_weights >= 20`); `p`: the drop probability, a Python float with
  `0.1 <= p <= 0.6`.
- Return one of these strings:
  - `"correct"`: inverted dropout as the chapter builds it;
  - `"not rescaled"`: it drops entries but leaves the kept ones unchanged;
  - `"scaled by 1-p"`: it drops entries and multiplies the kept ones by `1 - p`;
  - `"mask reused"`: it rescales correctly but drops the same entries at every call;
  - `"switched off"`: it drops nothing (as in eval mode).
- The outputs were computed in float32: compare values with a tolerance of `1e-4`.
"""
from __future__ import annotations

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def diagnose_dropout(draws, p):
    """From the set of values and whether the rows differ."""
    kept = draws[draws.abs() > 1e-4]
    if kept.numel() == draws.numel():
        return "switched off"
    if not torch.allclose(kept, torch.ones_like(kept) / (1 - p), atol=1e-4):
        if torch.allclose(kept, torch.ones_like(kept), atol=1e-4):
            return "not rescaled"
        return "scaled by 1-p"
    return "mask reused" if bool((draws == draws[0]).all()) else "correct"


# Inputs of the public and hidden checks ---------------------------------------------------


def _draw(g, kind, p, num_draws, num_weights):
    keep = torch.rand(num_draws, num_weights, generator=g) >= p
    if kind == "mask reused":
        keep = keep[:1].expand(num_draws, -1)
    keep = keep.float()
    if kind == "correct" or kind == "mask reused":
        return keep / (1 - p)
    if kind == "not rescaled":
        return keep
    if kind == "scaled by 1-p":
        return keep * (1 - p)
    return torch.ones(num_draws, num_weights)  # switched off


KINDS = ("correct", "not rescaled", "scaled by 1-p", "mask reused", "switched off")


def _kind_calls(kinds, p, num_draws=40, num_weights=30):
    def make(seed):
        g = gen(seed)
        return [Call(args=(_draw(g, kind, p, num_draws, num_weights), p)) for kind in kinds]
    return make


_LOW_P_LAYERS = 16


def _low_p_calls(seed):
    # The hardest layers the contract allows for a rule that reads the level of the kept weights
    # from the mean of the outputs: p = 0.1 (the three levels 1, 1 - p and (1 - p)^2 lie close
    # together) and 20 draws of 20 weights (the mean strays most). Many layers of each kind, so that
    # a rule with a tolerance of p / 5 or less mislabels some of them at practically every seed (issue 40,
    # item 3: 0 of 30 grading seeds passed it, against 28 of 30 without this check).
    g = gen(seed)
    return [Call(args=(_draw(g, kind, 0.1, 20, 20), 0.1)) for _ in range(_LOW_P_LAYERS) for kind in KINDS[:3]]


def _hidden_calls(seed):
    g = gen(seed)
    calls = []
    for kind in KINDS:
        p = 0.1 + 0.5 * torch.rand((), generator=g).item()
        calls.append(Call(args=(_draw(g, kind, p, randint(g, 20, 60), randint(g, 20, 60)), p)))
    return calls


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("zeros and variation mean correct",
               "dropped entries and rows that differ are not enough: a layer that forgets to divide the kept "
               "weights by 1 - p also shows them; the value of the kept entries tells the two apart.")
def _dd_zeros_only(draws, p):
    if bool((draws.abs() > 1e-4).all()):
        return "switched off"
    if bool((draws == draws[0]).all()):
        return "mask reused"
    return "correct"


@mistakes.keep("kept values compared with 1/p",
               "inverted dropout divides the kept weights by the probability of keeping them, 1 - p, not by p.")
def _dd_over_p(draws, p):
    kept = draws[draws.abs() > 1e-4]
    if kept.numel() == draws.numel():
        return "switched off"
    if torch.allclose(kept, torch.ones_like(kept) / p, atol=1e-4):
        return "mask reused" if bool((draws == draws[0]).all()) else "correct"
    if torch.allclose(kept, torch.ones_like(kept), atol=1e-4):
        return "not rescaled"
    return "scaled by 1-p"


@mistakes.keep("rows never compared",
               "a layer that draws one mask and reuses it looks right in any single row: compare the rows with "
               "each other.")
def _dd_no_rows(draws, p):
    kept = draws[draws.abs() > 1e-4]
    if kept.numel() == draws.numel():
        return "switched off"
    if torch.allclose(kept, torch.ones_like(kept) / (1 - p), atol=1e-4):
        return "correct"
    if torch.allclose(kept, torch.ones_like(kept), atol=1e-4):
        return "not rescaled"
    return "scaled by 1-p"


@mistakes.keep("level read from the mean",
               "the mean of the outputs only estimates the level of the kept weights: at p = 0.1, with 20 draws "
               "of 20 weights, it strays further than the tolerance you allowed around 1 and 1 - p, so a "
               "threshold on the mean mislabels many layers; every kept entry has exactly the level itself.")
def _dd_mean_threshold(draws, p):
    if bool((draws.abs() > 1e-4).all()):
        return "switched off"
    if bool((draws == draws[0]).all()):
        return "mask reused"
    mean = float(draws.mean())          # about 1, 1 - p or (1 - p)^2
    if abs(mean - 1) <= p / 5:
        return "correct"
    if abs(mean - (1 - p)) <= p / 5:
        return "not rescaled"
    return "scaled by 1-p"


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("distinct values", "the distinct values of the draws, rounded, and the number of distinct rows")
def _dd_alt_unique(draws, p):
    values = {round(v, 3) for v in draws.flatten().tolist()}
    nonzero = values - {0.0}
    if 0.0 not in values:
        return "switched off"
    (value,) = nonzero if len(nonzero) == 1 else (max(nonzero),)
    if abs(value - 1.0) < 1e-3:
        return "not rescaled"
    if abs(value - (1 - p)) < 1e-3:
        return "scaled by 1-p"
    return "mask reused" if len(torch.unique(draws, dim=0)) == 1 else "correct"


@alternatives.keep("statistics", "the mean of the kept values and the spread of each column over the draws")
def _dd_alt_stats(draws, p):
    kept = draws > 1e-4
    if bool(kept.all()):
        return "switched off"
    level = (draws.sum() / kept.sum()).item()              # the mean of the kept values
    if abs(level * (1 - p) - 1) < 1e-3:
        return "correct" if bool((draws.std(dim=0) > 0).any()) else "mask reused"
    return "not rescaled" if abs(level - 1) < 1e-3 else "scaled by 1-p"


@alternatives.keep("loops in float64", "loops over rows and entries in float64")
def _dd_alt_loops(draws, p):
    rows = draws.double().tolist()
    zeros = any(abs(v) <= 1e-4 for row in rows for v in row)
    if not zeros:
        return "switched off"
    kept = [v for row in rows for v in row if abs(v) > 1e-4]
    if all(abs(v - 1 / (1 - p)) <= 1e-4 for v in kept):
        return "mask reused" if all(row == rows[0] for row in rows) else "correct"
    if all(abs(v - 1) <= 1e-4 for v in kept):
        return "not rescaled"
    return "scaled by 1-p"


# Registration -----------------------------------------------------------------------------

_HINT = ("this check passes the outputs of one layer of each kind, one call each, and compares your label; the "
         "reason above says which call got another label.")

register(Exercise(
    label="ch05_ex5", title="Diagnosing a dropout layer from its outputs",
    name="diagnose_dropout", reference=diagnose_dropout, points=2,
    checks=[
        Check("the five kinds of layer at p = 0.5", _kind_calls(KINDS, 0.5), seed=0, hint=_HINT),
        Check("the five kinds at p = 0.2", _kind_calls(KINDS, 0.2), seed=1, hint=_HINT),
        Check("right and wrong rescaling at p = 0.6, with few draws", _kind_calls(KINDS[:3], 0.6, 20, 20), seed=2,
              hint=_HINT),
        Check(f"right and wrong rescaling at p = 0.1: {_LOW_P_LAYERS} layers of each, 20 draws of 20 weights",
              _low_p_calls, seed=3,
              hint=f"this check passes the outputs of {_LOW_P_LAYERS} layers of each of the kinds \"correct\", "
                   "\"not rescaled\" and \"scaled by 1-p\", all at p = 0.1 with 20 draws of 20 weights, and "
                   "compares your labels; the reason above says which call got another label."),
        Check("random p, draws and sizes (hidden)", _hidden_calls, public=False, hint=_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
