r"""ch02_ex7: Leave-one-out from the full fit.

The chapter says that the plain training error rewards a width of 0 because each training
point votes for itself. Make that precise and turn it into code: the leave-one-out
predictions need no second pass over the data, they can be read off the full fit and the
weight each point gives itself. Write `loo_from_full_fit(values, fitted, self_weights)`.

* `values`: shape `(n,)` with $n \ge 2$, the training targets $v_i$.
* `fitted`: shape `(..., n)`, the full fit at the training inputs,
  $f(k_i) = \sum_{j} \alpha_{ij} v_j$ over all $n$ points, $i$ itself included, with
  weights $\alpha_{ij} \ge 0$ whose rows sum to 1 (any kernel, compact ones too). Leading
  axes hold several fits, one per width for instance.
* `self_weights`: the shape of `fitted`, the weight $\alpha_{ii}$ that point $i$ gives
  itself in that fit. `values`, `fitted` and `self_weights` share one dtype, float32 or
  float64.
* The leave-one-out prediction of $v_i$ pools the other $n - 1$ values with the weights
  $\alpha_{ij}$, $j \ne i$, rescaled to sum to 1.
* Every entry of `self_weights` is below 1, and the checks pass no other: where a point
  takes all the weight (a width so small that the other weights underflow to 0), nothing
  of the other points is left in `fitted`, and its leave-one-out prediction cannot be
  recovered from it.
* Return `(loo_predictions, loo_mse)`: the leave-one-out predictions, of the shape of
  `fitted`, and the mean over the $n$ points of their squared errors against `values`, of
  shape `fitted.shape[:-1]` (0-d for a 1-D `fitted`); both of the inputs' dtype.

Then, in a markdown cell of your own, use the relation you found between the training
residual $v_i - f(k_i)$ and the leave-one-out residual to explain why the plain training
error tends to 0 as the width shrinks, while the leave-one-out error does not.
"""
from __future__ import annotations

import numpy as np
import torch

from ...data import make_regression_1d
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def loo_from_full_fit(values, fitted, self_weights):
    """Reference, in float64: drop the point's own vote from the fit, then renormalise by the
    weight of the others (1 - self weight)."""
    v, f, w = values.double(), fitted.double(), self_weights.double()
    predictions = (f - w * v) / (1 - w)
    mse = ((predictions - v) ** 2).mean(dim=-1)
    return predictions.to(values.dtype), mse.to(values.dtype)


# Inputs of the public and hidden checks ---------------------------------------------------


def _full_fit(keys, values, widths, kernel="gaussian"):
    """(fitted, self_weights) of the kernel fit at the keys themselves, one fit per width, in
    float64; widths of shape (m,) give results of shape (m, n)."""
    gaps = (keys.double()[:, None] - keys.double()[None, :]).abs()            # (n, n)
    h = widths.double()[:, None, None]                                         # (m, 1, 1)
    if kernel == "gaussian":
        kernel_values = torch.exp(-gaps ** 2 / (2 * h ** 2))
    else:                                                                      # Epanechnikov
        kernel_values = (1 - (gaps / h) ** 2).clamp_min(0)
    weights = kernel_values / kernel_values.sum(dim=-1, keepdim=True)          # (m, n, n)
    return weights @ values.double(), torch.diagonal(weights, dim1=-2, dim2=-1)


def _chapter_calls(seed):
    data = make_regression_1d(num_train=50, seed=seed)
    fitted, own = _full_fit(data.x_train, data.y_train, torch.tensor([0.25]))
    return [Call(args=(data.y_train, fitted[0].float(), own[0].float()))]


def _widths_calls(seed):
    data = make_regression_1d(num_train=50, seed=seed)
    values = data.y_train.double()
    fitted, own = _full_fit(data.x_train, values, torch.tensor([0.12, 0.3, 1.0]))
    return [Call(args=(values, fitted, own))]


# Eight hand-placed keys, no gap wider than 1.1: with the Epanechnikov width 1.2 every point keeps
# a neighbour of non-zero weight, and the nearest ones carry very different values.
_HAND_KEYS = torch.tensor([0.0, 0.5, 1.2, 2.0, 2.4, 3.5, 4.0, 5.0], dtype=torch.float64)
_HAND_VALUES = torch.tensor([1.0, -0.5, 2.0, 0.0, 3.0, -1.0, 1.5, 0.5], dtype=torch.float64)


def _compact_calls(seed):
    keys, values = _HAND_KEYS, _HAND_VALUES
    if seed != 3:                                   # another seed: the keys moved, values redrawn
        g = gen(seed)
        keys = keys + 0.2 * (torch.rand(8, generator=g, dtype=torch.float64) - 0.5)
        values = torch.randn(8, generator=g, dtype=torch.float64)
    fitted, own = _full_fit(keys, values, torch.tensor([1.2, 2.5]), kernel="epanechnikov")
    return [Call(args=(values, fitted[0], own[0])), Call(args=(values, fitted, own))]


def _random_problem(g):
    """n keys near an even grid (so that no point is far from its neighbours), widths of 0.7 to 3
    grid steps, fits stacked on leading axes (2, 3) or (4,), Gaussian or Epanechnikov."""
    n = randint(g, 5, 40)
    step = 5.0 / (n - 1)
    keys = torch.linspace(0, 5, n, dtype=torch.float64)
    keys = keys + 0.3 * step * (torch.rand(n, generator=g, dtype=torch.float64) - 0.5)
    keys = keys[torch.randperm(n, generator=g)]
    values = 2 * torch.randn(n, generator=g, dtype=torch.float64)
    lead = (2, 3) if randint(g, 0, 1) else (4,)
    widths = step * (0.7 + 2.3 * torch.rand(int(np.prod(lead)), generator=g, dtype=torch.float64))
    kernel = "gaussian" if randint(g, 0, 1) else "epanechnikov"
    if kernel == "epanechnikov":
        widths = widths + 1.4 * step                # wider than any gap: a neighbour always counts
    fitted, own = _full_fit(keys, values, widths, kernel)
    dtype = torch.float64 if randint(g, 0, 1) else torch.float32
    return values.to(dtype), fitted.reshape(*lead, n).to(dtype), own.reshape(*lead, n).to(dtype)


def _hidden_calls(seed):
    g = gen(seed)
    values, fitted, own = _random_problem(g)
    return [Call(args=(values, fitted, own)), Call(args=(values, fitted[..., 0, :], own[..., 0, :]))]


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("the point itself not left out",
               "your predictions are the full fit itself, in which each point still votes for itself with its "
               "self weight; that is the plain training error, which a vanishing width drives to 0.")
def _loo_not_left_out(values, fitted, self_weights):
    mse = ((fitted.double() - values.double()) ** 2).mean(dim=-1)
    return fitted.clone(), mse.to(values.dtype)


@mistakes.keep("own vote removed, not renormalised",
               "your predictions take the point's own vote out of the fit, but the remaining weights then sum to "
               "less than 1; the leave-one-out weights of the other points are rescaled to sum to 1.")
def _loo_not_renormalised(values, fitted, self_weights):
    v, f, w = values.double(), fitted.double(), self_weights.double()
    predictions = f - w * v
    return predictions.to(values.dtype), ((predictions - v) ** 2).mean(dim=-1).to(values.dtype)


@mistakes.keep("averaged over the fits",
               "your mean squared error averages over the leading axis (the fits, one per width) instead of over "
               "the n points, so it has one entry per point instead of one per fit.")
def _loo_mean_over_fits(values, fitted, self_weights):
    predictions, _ = loo_from_full_fit(values, fitted, self_weights)
    return predictions, ((predictions.double() - values.double()) ** 2).mean(dim=0).to(values.dtype)


@mistakes.keep("the factor applied once to a square",
               "your predictions are right, but your mean squared error rescales each squared training residual "
               "by the same factor that rescales the residual itself; squaring a residual squares its factor too.")
def _loo_factor_once(values, fitted, self_weights):
    predictions, _ = loo_from_full_fit(values, fitted, self_weights)
    v, f, w = values.double(), fitted.double(), self_weights.double()
    return predictions, ((v - f) ** 2 / (1 - w)).mean(dim=-1).to(values.dtype)


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("loops over Python floats",
                   "every fit and every point one at a time, the others' total weight as 1 - self weight")
def _loo_alt_loops(values, fitted, self_weights):
    lead = fitted.shape[:-1]
    rows_f, rows_w = fitted.reshape(-1, fitted.shape[-1]).tolist(), self_weights.reshape(-1, fitted.shape[-1]).tolist()
    vs = values.tolist()
    all_predictions, all_mse = [], []
    for row_f, row_w in zip(rows_f, rows_w):
        predictions = []
        for v, f, w in zip(vs, row_f, row_w):
            others_total = 1.0 - w
            predictions.append((f - w * v) / others_total)
        all_predictions.append(predictions)
        all_mse.append(sum((p - v) ** 2 for p, v in zip(predictions, vs)) / len(vs))
    return (torch.tensor(all_predictions, dtype=values.dtype).reshape(fitted.shape),
            torch.tensor(all_mse, dtype=values.dtype).reshape(lead))


@alternatives.keep("residual form in the inputs' dtype",
                   "the leave-one-out residual is the training residual divided by 1 - self weight")
def _loo_alt_residuals(values, fitted, self_weights):
    residuals = (values - fitted) / (1 - self_weights)
    return values - residuals, residuals.square().mean(-1)


@alternatives.keep("numpy, the others' weighted sum",
                   "np.divide of the others' weighted sum by their total weight, np.mean over the last axis")
def _loo_alt_numpy(values, fitted, self_weights):
    v, f, w = (t.numpy().astype(np.float64) for t in (values, fitted, self_weights))
    predictions = np.divide(f - np.multiply(w, v), np.subtract(1.0, w))
    mse = np.mean(np.square(predictions - v), axis=-1)
    return (torch.from_numpy(predictions).to(values.dtype),
            torch.from_numpy(np.asarray(mse)).to(values.dtype))


# Registration -----------------------------------------------------------------------------

_HINT = ("this check compares the leave-one-out predictions (each value predicted by the other points, their "
         "weights rescaled to sum to 1) and their mean squared error over the points, one per fit, in the inputs' "
         "dtype.")

register(Exercise(
    label="ch02_ex7", title="Leave-one-out from the full fit",
    name="loo_from_full_fit", reference=loo_from_full_fit, points=2, kind="function",
    checks=[
        Check("the chapter's data, 50 points, one Gaussian fit of width 0.25, float32", _chapter_calls,
              seed=0, rtol=1e-4, atol=1e-4, hint=_HINT + " Here `fitted` is 1-D, so the error is 0-d."),
        Check("three Gaussian fits at once, widths 0.12, 0.3 and 1.0 (shape (3, 50)), float64", _widths_calls,
              seed=1, hint=_HINT + " Here `fitted` has shape (3, 50), so the error has shape (3,)."),
        Check("a compact kernel (Epanechnikov) on 8 hand-placed points, one and two fits, float64",
              _compact_calls, seed=3, hint=_HINT + " The weights here are not Gaussian: the relation holds "
                                                   "for any normalised weights."),
        Check("random sizes, fits on leading axes (2, 3) or (4,), float32 or float64 (hidden)", _hidden_calls,
              seed=4, public=False, rtol=1e-4, atol=1e-4, hint=_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
