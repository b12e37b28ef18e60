r"""ch02_ex4: Leave-one-out against the test error.

The chapter chose widths by leave-one-out error, from the training set alone, and
trusted them on new data. Test that trust: write
`width_choices(keys, values, test_queries, test_targets, candidates)`.

* `keys`, `values`: float32, shape `(n,)` with $n \ge 2$, in any order (the training
  pairs); `test_queries`, `test_targets`: float32, shape `(t,)`; `candidates`: a
  non-empty float32 tensor of shape `(m,)` of widths, in any order.
* `loo_errors[j]`: the leave-one-out mean squared error of Gaussian-kernel pooling with
  width `candidates[j]`, as defined in {ref}`ch02_ex3` (each training value predicted
  from the other $n - 1$ training points).
* `test_errors[j]`: the mean squared error of predicting each test target, at its test
  query, from all $n$ training points, with the same width.
* Return `(loo_width, test_width, loo_errors, test_errors, excess)`: the candidate widths
  with the smallest leave-one-out and the smallest test error, as Python floats, the two
  float32 tensors of shape `(m,)`, entry `j` belonging to `candidates[j]`, and the answer
  to the question below, for this data set: `excess`, how much larger the test error at
  `loo_width` is than at `test_width`, relative to the latter (`0.25` for 25 % larger,
  `0.0` when the two widths agree), a Python float.
* Candidate widths may be small (the checks use widths from $0.03$), where every
  Gaussian factor of a point can underflow to 0 in float32: compute the weights in a
  numerically stable way, as in {ref}`ch02_ex2`, so that every error is finite.
* Raise `ValueError` naming `candidates` when it is not a non-empty 1-D tensor of
  positive widths, and naming `keys` and `values` unless both are 1-D with the same
  length $\ge 2$.

The question: how much does choosing the width by leave-one-out cost on new data? The
checks grade `excess` on every data set they pass. Then, in a cell of your own, run it on
`make_regression_1d(num_train=50, noise=0.3, seed=s)` for `s in range(10)` with
`candidates = torch.linspace(0.05, 1.0, 20)`. How often do the two widths agree, how large
is `excess` on average and at worst, and why is `test_width` no fair choice of width?
"""
from __future__ import annotations

import math

import torch

from ...data import make_regression_1d
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import ERROR_WEIGHT, Kept, gen, randint
from ._common import _check_width
from .ex3_fit_width import _check_1d_pair

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _check_candidates(candidates):
    if candidates.dim() != 1 or candidates.numel() == 0:
        raise ValueError(f"candidates must be a non-empty 1-D tensor, got shape {tuple(candidates.shape)}")
    _check_width(candidates, "candidates")


def _nw_predict(queries, keys, values, width):
    """float64 Nadaraya–Watson predictions of 1-D queries from 1-D keys and values."""
    logits = -(queries.double()[:, None] - keys.double()[None, :]) ** 2 / (2 * float(width) ** 2)
    return torch.softmax(logits, dim=-1) @ values.double()


def _loo_errors64(keys, values, candidates, leave_one_out=True, absolute=False, reduce="mean"):
    k, v = keys.double(), values.double()
    errors = []
    for w in candidates.tolist():
        logits = -(k[:, None] - k[None, :]) ** 2 / (2 * w ** 2)
        if leave_one_out:
            logits = logits.masked_fill(torch.eye(len(k), dtype=torch.bool), -math.inf)
        residual = torch.softmax(logits, dim=-1) @ v - v
        e = residual.abs() if absolute else residual ** 2
        errors.append(e.mean() if reduce == "mean" else e.sum())
    return torch.stack(errors)


def _test_errors64(keys, values, test_queries, test_targets, candidates, absolute=False, reduce="mean"):
    errors = []
    for w in candidates.tolist():
        residual = _nw_predict(test_queries, keys, values, w) - test_targets.double()
        e = residual.abs() if absolute else residual ** 2
        errors.append(e.mean() if reduce == "mean" else e.sum())
    return torch.stack(errors)


def _validate_choices(keys, values, test_queries, test_targets, candidates):
    _check_1d_pair(keys, values)
    if test_queries.dim() != 1 or test_queries.shape != test_targets.shape or test_queries.numel() < 1:
        raise ValueError(f"test_queries and test_targets must be 1-D of one length >= 1, got "
                         f"test_queries {tuple(test_queries.shape)} and test_targets "
                         f"{tuple(test_targets.shape)}")
    _check_candidates(candidates)


def width_choices(keys, values, test_queries, test_targets, candidates):
    """Returns (loo_width, test_width, loo_errors, test_errors, excess); errors computed in float64."""
    _validate_choices(keys, values, test_queries, test_targets, candidates)
    loo = _loo_errors64(keys, values, candidates)
    test = _test_errors64(keys, values, test_queries, test_targets, candidates)
    excess = (test[loo.argmin()] / test[test.argmin()] - 1).item()
    return (candidates[loo.argmin()].item(), candidates[test.argmin()].item(),
            loo.to(keys.dtype), test.to(keys.dtype), excess)


# Inputs of the public and hidden checks ---------------------------------------------------


_CHOICE_RTOL, _CHOICE_ATOL = 1e-4, 1e-6


def _compare_choices(got, want, calls):
    """Errors within tolerance; each width must be a candidate whose (reference) error is the
    smallest up to that tolerance, so a near-tie between two candidates never decides."""
    from ...checks.checking import compare_values
    for i, (g, w, call) in enumerate(zip(got, want, calls)):
        where = "the result" if len(calls) == 1 else f"call {i + 1} of {len(calls)}: the result"
        if w["status"] == "raised":
            return None if g["status"] == "raised" else f"{where}: should raise {w['error_type']}"
        if g["status"] == "raised":
            return f"raised {g['error_type']}: {g['message'][:300]}"
        gv, wv = g["value"], w["value"]
        if not (isinstance(gv, dict) and "__seq__" in gv and len(gv["__seq__"]) == 5):
            return (f"{where} should be a tuple of 5 items (loo_width, test_width, loo_errors, test_errors, "
                    f"excess)")
        for j, name in ((2, "loo_errors"), (3, "test_errors")):
            reason = compare_values(gv["__seq__"][j], wv["__seq__"][j], _CHOICE_RTOL, _CHOICE_ATOL,
                                    f"{name} in {where}")
            if reason:
                return reason
        candidates = call.args[4].double()
        for j, (name, errors) in enumerate((("loo_width", wv["__seq__"][2]), ("test_width", wv["__seq__"][3]))):
            width, wanted = gv["__seq__"][j], wv["__seq__"][j]
            if isinstance(wanted, bool) or not isinstance(wanted, float) or bool(errors.isnan().any()):
                # matching an answer to a kept mistake's output (an int, or errors with NaN whose
                # arg-min means nothing): the same value is required
                reason = compare_values(width, wanted, _CHOICE_RTOL, _CHOICE_ATOL, f"{name} in {where}")
                if reason:
                    return reason
                continue
            if isinstance(width, bool) or not isinstance(width, float):
                return f"{name} in {where} is {type(width).__name__} {width!r}, expected a float (a width)"
            errors = errors.double()
            close = (candidates - width).abs() <= 1e-6 * candidates.abs()
            best = errors.min()
            good = errors <= best + _CHOICE_RTOL * best.abs() + _CHOICE_ATOL
            if not bool(close.any()):
                return f"{name} in {where} is {width:.4g}, which is not one of the candidates"
            if not bool((close & good).any()):
                return f"{name} in {where} is {width:.4g}, not the candidate with the smallest error"
        reason = _excess_problem(gv["__seq__"], wv["__seq__"], candidates, where)
        if reason:
            return reason
    return None


def _excess_problem(mine, theirs, candidates, where):
    """``excess`` equal to the expected one, or else to the one the expected test errors give at the widths
    the answer returned (so a near-tie that the widths may take either way never decides); the very same
    value where the expected widths are not both floats or the errors have NaN (a kept mistake's output)."""
    from ...checks.checking import compare_values
    excess, errors = mine[4], theirs[3]
    if compare_values(excess, theirs[4], _CHOICE_RTOL, _CHOICE_ATOL) is None:
        return None          # the expected value (or, matching a kept mistake, that mistake's own)
    widths_ok = all(isinstance(w, float) and not isinstance(w, bool) for w in (*mine[:2], *theirs[:2]))
    if not widths_ok or not isinstance(theirs[4], float) or bool(errors.isnan().any()):
        if isinstance(excess, float) and isinstance(theirs[4], float) and math.isnan(excess) and math.isnan(theirs[4]):
            return None
        return compare_values(excess, theirs[4], _CHOICE_RTOL, _CHOICE_ATOL, f"excess in {where}")
    if isinstance(excess, bool) or not isinstance(excess, (int, float)):
        return f"excess in {where} is {type(excess).__name__} {excess!r}"[:160] + ", expected a float"
    at = [int((candidates - w).abs().argmin()) for w in mine[:2]]
    errors = errors.double()
    expected = (errors[at[0]] / errors[at[1]] - 1).item()
    if not math.isfinite(excess) or abs(excess - expected) > 1e-3 * abs(expected) + 1e-5:
        return f"excess in {where} is {excess:.4g}: off by {abs(excess - expected):.3g} for the widths returned"
    return None


def _choices_calls(seed):
    g = torch.Generator().manual_seed(seed)
    data = make_regression_1d(num_train=40, num_test=60, seed=seed)
    candidates = torch.sort(0.03 + 1.2 * torch.rand(6, generator=g)).values
    return [Call(args=(data.x_train, data.y_train, data.x_test, data.y_test, candidates))]


def _choices_shuffled_calls(seed):
    g = torch.Generator().manual_seed(seed)
    data = make_regression_1d(num_train=25, num_test=30, noise=0.2, seed=seed)
    order = torch.randperm(25, generator=g)  # nothing needs sorted keys or candidates
    candidates = (0.03 + 1.2 * torch.rand(5, generator=g))
    return [Call(args=(data.x_train[order], data.y_train[order], data.x_test.flip(0),
                       data.y_test.flip(0), candidates))]


def _choices_bad_calls(seed):
    data = make_regression_1d(num_train=10, num_test=8, seed=seed)
    x, y, xt, yt = data.x_train, data.y_train, data.x_test, data.y_test
    return [Call(args=(x, y, xt, yt, torch.tensor([0.5, 0.0, 1.0]))),
            Call(args=(x, y, xt, yt, torch.tensor([0.3, -0.2]))),
            Call(args=(x, y, xt, yt, torch.zeros(0))),
            Call(args=(x, y, xt, yt, torch.tensor([[0.5, 1.0]]))),            # not 1-D
            Call(args=(x, y[:9], xt, yt, torch.tensor([0.5]))),
            Call(args=(x[None], y[None], xt, yt, torch.tensor([0.5]))),       # keys, values not 1-D
            Call(args=(x[:1], y[:1], xt, yt, torch.tensor([0.5])))]           # n = 1


def _choices_mentions(call):
    keys, values = call.args[:2]
    bad_pair = keys.dim() != 1 or keys.shape != values.shape or keys.numel() < 2
    return ["keys", "values"] if bad_pair else ["candidates"]


def _choices_hidden_calls(seed):
    g = torch.Generator().manual_seed(seed)
    num_train = int(torch.randint(20, 50, (1,), generator=g))
    data = make_regression_1d(num_train=num_train, num_test=50, noise=0.25, seed=seed)
    candidates = 0.03 + 1.5 * torch.rand(10, generator=g)
    candidates[int(torch.randint(0, 10, (1,), generator=g))] = 0.04
    # One training point 0.8 beyond the others: at width 0.04 its leave-one-out kernel values
    # are all near exp(-200), 0 in float32 (a plain kernel ratio gives 0/0) but not in float64.
    far = data.x_train.max() + 0.8
    keys = torch.cat([data.x_train, far.reshape(1)])
    values = torch.cat([data.y_train, data.y_train[data.x_train.argmax()].reshape(1)])
    return [Call(args=(keys, values, data.x_test, data.y_test, candidates))]


def _question_calls(seed):
    """The question's setting (50 points, noise 0.3, 20 candidate widths from 0.05 to 1) on data sets
    where the two choices differ, each by a clear margin (no near-tie decides either width), so that
    ``excess`` is not 0. The data seeds are searched from ``seed`` on, in steps drawn from it."""
    g = gen(seed)
    candidates = torch.linspace(0.05, 1.0, 20)
    calls, data_seed = [], 1000 * seed
    while len(calls) < 2:
        data_seed += randint(g, 1, 9)
        data = make_regression_1d(num_train=50, num_test=100, noise=0.3, seed=data_seed)
        k, v, q, t = (x.double() for x in (data.x_train, data.y_train, data.x_test, data.y_test))
        twice = 2 * candidates.double()[:, None, None] ** 2      # every candidate at once: a quick search
        scores = (-(k[:, None] - k[None, :]) ** 2 / twice).masked_fill(torch.eye(50, dtype=torch.bool), -math.inf)
        loo = ((torch.softmax(scores, dim=-1) @ v - v) ** 2).mean(-1)
        test = ((torch.softmax(-(q[:, None] - k[None, :]) ** 2 / twice, dim=-1) @ v - t) ** 2).mean(-1)
        firsts = [errors.sort().values[:2] for errors in (loo, test)]
        if loo.argmin() != test.argmin() and all(b > a * (1 + 1e-3) for a, b in firsts):
            calls.append(Call(args=(data.x_train, data.y_train, data.x_test, data.y_test, candidates)))
    return calls


# Kept mistakes, each with its hint --------------------------------------------------------


def _choices_mistake(loo_kw=None, test_kw=None, pick=lambda c, e: c[e.argmin()].item(),
                     excess=lambda loo, test: (test[loo.argmin()] / test.min() - 1).item()):
    def impl(keys, values, test_queries, test_targets, candidates):
        _validate_choices(keys, values, test_queries, test_targets, candidates)
        loo = _loo_errors64(keys, values, candidates, **(loo_kw or {}))
        test = _test_errors64(keys, values, test_queries, test_targets, candidates, **(test_kw or {}))
        return pick(candidates, loo), pick(candidates, test), loo.float(), test.float(), excess(loo, test)
    return impl


mistakes.add("no leave-one-out",
             "each training point helps predict itself, so the smallest "
"width always looks best; leave the point out of its own prediction.",
             _choices_mistake(loo_kw={"leave_one_out": False}))


mistakes.add("returned the indices",
             "you returned the positions of the best candidates; return "
"their widths (floats).",
             _choices_mistake(pick=lambda c, e: int(e.argmin())))


mistakes.add("absolute error",
             "the errors to compare are mean *squared* errors, not mean "
"absolute errors.",
             _choices_mistake(loo_kw={"absolute": True}, test_kw={"absolute": True}))


@mistakes.keep("float32 kernel over its sum",
               "at a small candidate width every kernel value of some "
"point underflows to 0 in float32, and dividing by their sum gives 0/0 = NaN; normalise "
"the logits in a numerically stable way (a softmax), as in ch02_ex2.")
def _choices_float32_ratio(keys, values, test_queries, test_targets, candidates):
    # Unnormalised float32 kernels divided by their sums: NaN where every kernel value underflows.
    _validate_choices(keys, values, test_queries, test_targets, candidates)
    loo, test = [], []
    for h in candidates.tolist():
        kernel = torch.exp(-(keys[:, None] - keys[None, :]) ** 2 / (2 * h ** 2))
        kernel = kernel * (1 - torch.eye(len(keys)))
        loo.append((((kernel @ values) / kernel.sum(1) - values) ** 2).mean())
        tk = torch.exp(-(test_queries[:, None] - keys[None, :]) ** 2 / (2 * h ** 2))
        test.append((((tk @ values) / tk.sum(1) - test_targets) ** 2).mean())
    loo, test = torch.stack(loo), torch.stack(test)
    excess = (test[loo.argmin()] / test[test.argmin()] - 1).item()
    return candidates[loo.argmin()].item(), candidates[test.argmin()].item(), loo, test, excess


mistakes.add("summed the errors",
             "the errors are means over the points, not sums; a sum grows "
"with the number of points.",
             _choices_mistake(loo_kw={"reduce": "sum"}, test_kw={"reduce": "sum"}))


mistakes.add("excess as a difference",
             "excess is the difference of the two test errors divided by the test error at test_width "
             "(a relative excess); the plain difference depends on the scale of the targets.",
             _choices_mistake(excess=lambda loo, test: (test[loo.argmin()] - test.min()).item()))


mistakes.add("excess from the leave-one-out errors",
             "excess compares the two widths on the test set: it is the test error at loo_width over the test "
             "error at test_width; the leave-one-out errors only choose loo_width.",
             _choices_mistake(excess=lambda loo, test: (loo[test.argmin()] / loo.min() - 1).item()))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("all candidates at once",
                   "one (m, n, n) stack of scores, float32")
def _choices_alt_batched(keys, values, test_queries, test_targets, candidates):
    # All candidates at once: one (m, n, n) stack of leave-one-out scores.
    if keys.dim() != 1 or values.shape != keys.shape or len(keys) < 2:
        raise ValueError("keys and values must be 1-D of one length >= 2")
    if candidates.dim() != 1 or len(candidates) == 0 or (candidates <= 0).any():
        raise ValueError(f"candidates must hold positive widths, got {candidates}")
    w2 = 2 * candidates[:, None, None] ** 2
    loo_scores = (-(keys[:, None] - keys[None, :]) ** 2 / w2).masked_fill(
        torch.eye(len(keys), dtype=torch.bool), float("-inf"))
    loo_errors = ((loo_scores.softmax(-1) @ values - values) ** 2).mean(-1)
    test_scores = -(test_queries[:, None] - keys[None, :]) ** 2 / w2
    test_errors = ((test_scores.softmax(-1) @ values - test_targets) ** 2).mean(-1)
    # excess as a percentage first, then turned into a fraction
    percent = 100 * (test_errors[loo_errors.argmin()] - test_errors.min()) / test_errors.min()
    return (candidates[loo_errors.argmin()].item(), candidates[test_errors.argmin()].item(),
            loo_errors, test_errors, percent.item() / 100)


@alternatives.keep("python loops",
                   "one candidate and one left-out point at a time")
def _choices_alt_loops(keys, values, test_queries, test_targets, candidates):
    if keys.ndim != 1 or keys.shape != values.shape or keys.numel() < 2:
        raise ValueError(f"keys {tuple(keys.shape)} and values {tuple(values.shape)} do not fit")
    if candidates.ndim != 1 or candidates.numel() == 0 or candidates.min() <= 0:
        raise ValueError("candidates: need a non-empty 1-D tensor of widths > 0")
    loo, test = [], []
    n = len(keys)
    for width in candidates.tolist():
        total = 0.0
        for i in range(n):
            others = [j for j in range(n) if j != i]
            w = torch.softmax(-(keys[i] - keys[others]) ** 2 / (2 * width ** 2), 0)
            total += float((w @ values[others] - values[i]) ** 2)
        loo.append(total / n)
        w = torch.softmax(-(test_queries[:, None] - keys) ** 2 / (2 * width ** 2), 1)
        test.append(float(((w @ values - test_targets) ** 2).mean()))
    loo, test = torch.tensor(loo), torch.tensor(test)
    best_loo, best_test = min(range(len(loo)), key=loo.__getitem__), min(range(len(test)), key=test.__getitem__)
    excess = float(test[best_loo]) / float(test[best_test]) - 1 if best_loo != best_test else 0.0
    return candidates[best_loo].item(), candidates[best_test].item(), loo, test, excess


@alternatives.keep("kernel ratio in float64",
                   "exp kernel with a zeroed diagonal, divided by row sums")
def _choices_alt_kernel_ratio64(keys, values, test_queries, test_targets, candidates):
    # The kernel matrix in float64 (no softmax), the diagonal zeroed for leave-one-out.
    if keys.dim() != 1 or values.dim() != 1 or keys.numel() != values.numel() or keys.numel() < 2:
        raise ValueError("keys and values must be two 1-D tensors of the same length (>= 2)")
    if candidates.dim() != 1 or not candidates.numel() or bool((candidates <= 0).any()):
        raise ValueError("every entry of candidates must be a positive width")
    k, v = keys.double(), values.double()
    q, t = test_queries.double(), test_targets.double()
    loo, test = [], []
    for h in candidates.double():
        kernel = torch.exp(-(k[:, None] - k[None, :]) ** 2 / (2 * h ** 2))
        kernel.fill_diagonal_(0.0)
        loo.append((((kernel @ v) / kernel.sum(1) - v) ** 2).mean())
        tk = torch.exp(-(q[:, None] - k[None, :]) ** 2 / (2 * h ** 2))
        test.append((((tk @ v) / tk.sum(1) - t) ** 2).mean())
    excess = float(torch.stack(test)[torch.argmin(torch.stack(loo))] / min(test) - 1)   # in float64
    loo, test = torch.stack(loo).float(), torch.stack(test).float()
    return float(candidates[torch.argmin(loo)]), float(candidates[torch.argmin(test)]), loo, test, excess


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch02_ex4", title="Leave-one-out against the test error",
    name="width_choices", reference=width_choices, points=2,
    checks=[
        Check("six candidate widths, 40 noisy points, 60 test points", _choices_calls, seed=0,
              compare=_compare_choices,
              hint="loo_errors[j] predicts each training value from the other training points, "
                   "test_errors[j] each test target from all training points, both with width "
                   "candidates[j]; compare one entry of each with a hand computation."),
        Check("unsorted keys, test points and candidates", _choices_shuffled_calls, seed=1,
              compare=_compare_choices,
              hint="this check passes keys, test points and candidates in no particular order, with "
                   "candidate widths from 0.03: loo_errors[j] and test_errors[j] are finite mean squared "
                   "errors with width candidates[j], and each returned width is the candidate with the "
                   "smallest error; the reason above names the item that differs."),
        Check("bad candidates, keys or values raise ValueError naming them", _choices_bad_calls,
              seed=0, must_mention=_choices_mentions, weight=ERROR_WEIGHT,
              hint="calls 1 to 4 pass a zero, a negative, no candidate and a 2-D candidates (name "
                   "candidates); calls 5 to 7 keys and values of different lengths, not 1-D, or of length 1 "
                   "(name both)."),
        Check("the question: 20 candidate widths on 50 noisy points, where the two choices differ",
              _question_calls, seed=3, compare=_compare_choices,
              hint="on these data sets leave-one-out and the test error choose different widths; excess "
                   "compares the test errors at the two widths returned, relative to the one at test_width."),
        Check("fresh data with an outlying point, ten candidates (hidden)", _choices_hidden_calls,
              public=False, seed=5, compare=_compare_choices,
              hint="this check adds a training point 0.8 beyond the others and a candidate width 0.04: "
                   "the leave-one-out and test mean squared errors per candidate stay finite, and each "
                   "returned width is the candidate with the smallest error."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
