r"""ch01_ex6: The temperature for a given peak.

The temperature section shows a query's largest weight falling from near 1 towards $1/n$ as
$\tau$ grows. Turn that around: given a target $p$, find for each query the temperature at
which its largest weight is exactly $p$. Write
`temperature_for_peak(queries, keys, target, coldest=False)`.

- `queries`: float tensor `(num_queries, d)`; `keys`: `(num_keys, d)`, same dtype, with
  `num_keys >= 2`; `target`: a Python float with `1 / num_keys < target < 1`. The weights
  are the chapter's, $\operatorname{softmax}_i\big(-\lVert \mathbf{q} - \mathbf{k}_i \rVert^2 / \tau\big)$.
- Return a tensor `(num_queries,)` of the dtype of `queries`. Entry $q$ is a temperature
  $\tau_q > 0$ at which the largest weight of query $q$ equals `target` within `1e-5`: the
  checks put your $\tau_q$ back into the softmax, in float64, and compare.
- When no positive temperature gives query $q$ that largest weight, entry $q$ is `nan`.
  Work out when that happens ({ref}`ch01_ex5` helps). Equal distances are exactly equal in
  the checks, whose coordinates are small integers or halves.
- The chapter's question, answered by the same function: called with `coldest=True`, it returns
  instead the index (a Python `int`) of the query that needs the smallest temperature. In these
  calls every query's target is reachable, and the smallest temperature is clearly the smallest.

No formula turns the largest weight back into $\tau$ in general, but it only falls as $\tau$
grows, and such a function is inverted numerically by *bisection*: take a low and a high
temperature whose largest weights lie on either side of the target, try one between them, keep
the half of the interval that still brackets the target, and repeat. Every step halves the
interval, so a few dozen steps pin the temperature down far more closely than the checks need.

Before you run it on the chapter's stations and queries with `target = 0.9` and `coldest=True`,
predict the answer. Why is it not the query nearest to a station?
"""
from __future__ import annotations

import math

import torch

from ...checks.checking import tensor_problem
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import moved

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _gaps(queries, keys):
    """Squared distances minus each row's smallest, in float64: only these gaps matter."""
    squared = ((queries.double()[:, None, :] - keys.double()[None, :, :]) ** 2).sum(-1)
    return squared - squared.min(dim=-1, keepdim=True).values


def temperature_for_peak(queries, keys, target, coldest=False):
    """Reference: bisection on beta = 1 / tau of sum_j exp(-gap_j * beta) = 1 / target, in float64.

    The largest weight is 1 / sum_j exp(-gap_j / tau), which falls strictly from 1 / c (c keys
    at gap 0, as tau -> 0) to 1 / num_keys (as tau -> inf): a target is reached iff it is below 1 / c.
    With ``coldest=True``: the index of the query whose temperature is smallest.
    """
    if coldest:
        return int(temperature_for_peak(queries, keys, target).double().argmin())
    gaps = _gaps(queries, keys)
    tied = (gaps == 0).sum(-1)
    reachable = target < 1.0 / tied
    num_keys = gaps.shape[-1]
    smallest = torch.where(gaps > 0, gaps, torch.full_like(gaps, math.inf)).min(-1).values
    # c + (num_keys - c) exp(-smallest * beta) <= 1 / target from this beta on: an upper end.
    room = torch.where(reachable, 1.0 / target - tied, torch.ones_like(smallest))
    high = torch.where(reachable, torch.log((num_keys - tied) / room) / smallest, torch.ones_like(smallest))
    low = torch.zeros_like(high)
    for _ in range(100):
        middle = (low + high) / 2
        too_flat = torch.exp(-gaps * middle[:, None]).sum(-1) > 1.0 / target
        low, high = torch.where(too_flat, middle, low), torch.where(too_flat, high, middle)
    tau = 1.0 / ((low + high) / 2)
    return torch.where(reachable, tau, torch.full_like(tau, math.nan)).to(queries.dtype)


# Inputs of the public and hidden checks ---------------------------------------------------


def _peaks(tau, queries, keys):
    """Each query's largest weight at its temperature, by the chapter's own forward formula in
    float64 (nan where tau is nan). Shipped with the public checks of an instructor's release, so
    it shares no code with the reference (which works on the gaps to the nearest key)."""
    squared = ((queries.double()[:, None, :] - keys.double()[None, :, :]) ** 2).sum(-1)
    return torch.softmax(-squared / tau.double()[:, None], dim=-1).amax(dim=-1)


def _compare_peaks(got, want, calls):
    """Put both answers' temperatures back into the softmax and compare the largest weights."""
    for i, (g, w, call) in enumerate(zip(got, want, calls)):
        call_no = "" if len(calls) == 1 else f"call {i + 1} of {len(calls)}: "
        where = f"{call_no}the result"
        problem = tensor_problem(g, w, where, raised="")
        if problem:
            return problem
        mine, theirs = g["value"], w["value"]
        if not torch.equal(torch.isnan(mine), torch.isnan(theirs)):
            rows = torch.nonzero(torch.isnan(mine) != torch.isnan(theirs)).flatten().tolist()
            return f"{where} is nan in other entries than expected (queries {rows} differ)"
        usable = lambda t: torch.isfinite(t) & (t > 0)  # noqa: E731
        ok_mine, ok_theirs = usable(mine) | torch.isnan(mine), usable(theirs) | torch.isnan(theirs)
        if not torch.equal(ok_mine, ok_theirs):
            rows = torch.nonzero(ok_mine != ok_theirs).flatten().tolist()
            return f"{where} has temperatures that are not positive and finite (queries {rows})"
        both = usable(mine) & usable(theirs)
        if not torch.equal(mine[~both].nan_to_num(), theirs[~both].nan_to_num()):
            return f"{where} has other values where no temperature is positive and finite"
        queries, keys = call.args[0], call.args[1]
        gap = (_peaks(mine, queries, keys) - _peaks(theirs, queries, keys))[both].abs()
        if gap.numel() and gap.max().item() > 1e-5:
            row = int(torch.nonzero(both).flatten()[gap.argmax()])
            return (f"{call_no}at the temperatures returned, the largest weights differ from the expected ones "
                    f"by up to {gap.max().item():.3g} (query {row})")
    return None


def _moved_calls(seed, queries, keys, targets):
    """One call per target on ``queries`` and ``keys`` as they are at the check's own seed (the
    public case, seed 0); at any other seed (grading) the points moved by :func:`moved` (exact: ties
    stay ties, every squared distance times 1 or 4), keys and queries each in another order."""
    move = moved(seed, 0, queries.shape[1])
    if move is not None:
        queries = move(queries)[move.order(queries.shape[0])]
        keys = move(keys)[move.order(keys.shape[0])]
    return [Call(args=(queries, keys, target)) for target in targets]


def _line_calls(seed):
    keys = torch.tensor([[0.0], [2.0]])
    queries = torch.tensor([[0.5], [3.0], [-1.0]])
    return _moved_calls(seed, queries, keys, [0.75])


def _station_calls(seed):
    keys = torch.tensor([[0.0, 0.0], [4.0, 0.0], [0.0, 3.0], [4.0, 3.0], [2.0, 1.0]])
    queries = torch.tensor([[4.0, 0.0], [2.0, 2.0], [0.5, 2.5]])
    return _moved_calls(seed, queries, keys, [0.5, 0.9])


def _tie_calls(seed):
    keys = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0], [2.0, 2.0]])
    # query 0 is as near to keys 0 and 1, query 1 to all four, query 2 to key 2 alone.
    queries = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.5]])
    return _moved_calls(seed, queries, keys, [0.4, 0.6])


def _far_calls(seed):
    # Keys 10 to 30 units apart, a target just above 1 / num_keys: temperatures in the thousands.
    keys = torch.tensor([[0.0, 0.0], [30.0, 0.0], [0.0, 20.0], [10.0, 10.0]])
    queries = torch.tensor([[1.0, 1.0], [25.0, 2.0], [9.5, 10.0]])
    return _moved_calls(seed, queries, keys, [0.3, 0.9])


def _float64_calls(seed):
    keys = torch.tensor([[1.0], [3.0], [3.0], [-1.0], [6.0]], dtype=torch.float64)
    queries = torch.tensor([[2.5], [3.0], [-4.0]], dtype=torch.float64)
    return _moved_calls(seed, queries, keys, [0.45])


def _hidden_calls(seed):
    g = gen(seed)
    calls = []
    for _ in range(2):
        d, num_keys, num_queries = randint(g, 1, 3), randint(g, 2, 8), randint(g, 2, 6)
        keys = torch.randint(-6, 7, (num_keys, d), generator=g).float()
        if num_keys > 2:
            keys[-1] = keys[0]                  # a duplicated key: a tie for whoever is nearest to it
        queries = torch.randint(-12, 13, (num_queries, d), generator=g).float() / 2
        queries[0] = keys[0]
        target = 1.0 / num_keys + (1 - 1.0 / num_keys) * (0.05 + 0.9 * torch.rand(1, generator=g).item())
        calls.append(Call(args=(queries, keys, target)))
    return calls


def _coldest_station_calls(seed):
    """The chapter's stations and queries, targets 0.9 and 0.5: the query (2, 2) needs the smallest
    temperature both times (about 1.34 and 3.76), not the query standing on station B (2.13 and 7.72)."""
    return [Call(args=call.args, kwargs={"coldest": True}) for call in _station_calls(seed)[::-1]]


def _coldest_gap_calls(seed):
    """Query 0 has one key at gap 1 behind its nearest and the rest far; query 1 has five keys at gap 1.25.
    Query 1 needs the smaller temperature at targets 0.9 and 0.7 (about 0.33 against 0.46, 0.51 against
    1.18), though query 0 has the smaller gap between its nearest key and the next one; query 1 is also the
    query nearest to a key (the answer of that mistake is right here)."""
    keys = torch.tensor([[0.0, 0.0], [1.0, 0.0], [12.0, 12.0], [13.0, 12.5], [11.0, 12.5], [13.0, 11.5],
                         [11.0, 11.5], [12.5, 13.0]])
    queries = torch.tensor([[0.0, 0.5], [12.0, 12.0], [6.0, -3.0]])
    return [Call(args=call.args, kwargs={"coldest": True}) for call in _moved_calls(seed, queries, keys, [0.9, 0.7])]


def _runner_up_gap(queries, keys):
    """Each query's gap between its nearest key and the next one (a shortcut, not the answer)."""
    return _gaps(queries, keys).sort(dim=-1).values[:, 1]


def _coldest_hidden_calls(seed):
    """Random small-integer points without ties, a reachable target; kept only where the smallest
    temperature is at least 5 % below the next one. The last call is drawn until the coldest query
    is not one with the smallest gap between its nearest key and the next one."""
    g = gen(seed)
    calls = []
    while len(calls) < 3:
        d, num_keys, num_queries = randint(g, 1, 3), randint(g, 3, 7), randint(g, 3, 6)
        keys = torch.randint(-6, 7, (num_keys, d), generator=g).float()
        queries = torch.randint(-12, 13, (num_queries, d), generator=g).float() / 2
        target = 1.0 / num_keys + (1 - 1.0 / num_keys) * (0.2 + 0.7 * torch.rand(1, generator=g).item())
        tau = temperature_for_peak(queries, keys, target).double()
        if bool(torch.isnan(tau).any()):
            continue
        low, second = tau.sort().values[:2].tolist()
        runner_up = _runner_up_gap(queries, keys)
        if len(calls) == 2 and not bool(runner_up[tau.argmin()] > runner_up.min()):
            continue
        if low < 0.95 * second:
            calls.append(Call(args=(queries, keys, target), kwargs={"coldest": True}))
    return calls


# Kept mistakes, each with its hint --------------------------------------------------------


# The first four are mistakes in the temperatures: they answer the question as the reference does.


@mistakes.keep("the two nearest keys only",
               "your temperatures solve the two-key equation, nearest key against the next one; with more keys "
               "the third, fourth, ... keys take weight too, so every key belongs in the sum.")
def _peak_two_nearest(queries, keys, target, coldest=False):
    if coldest:
        return temperature_for_peak(queries, keys, target, coldest=True)
    gaps = _gaps(queries, keys)
    tied = (gaps == 0).sum(-1)
    second = gaps.sort(dim=-1).values[:, 1]
    tau = second / math.log(target / (1 - target))
    return torch.where(target < 1.0 / tied, tau, torch.full_like(tau, math.nan)).to(queries.dtype)


@mistakes.keep("a tie never gives nan",
               "a query with c equally near keys never has a largest weight above 1/c, at any temperature (the "
               "limit of Exercise 5); when the target is at least 1/c no temperature reaches it, and the entry is nan.")
def _peak_no_nan(queries, keys, target, coldest=False):
    if coldest:
        return temperature_for_peak(queries, keys, target, coldest=True)
    tau = temperature_for_peak(queries, keys, target)
    smallest_gap = _gaps(queries, keys).masked_fill(_gaps(queries, keys) == 0, math.inf).min(-1).values
    # the end of a search that never brackets the target: a very small temperature
    fallback = (smallest_gap.clamp(max=1e6) * 1e-4).to(tau.dtype)
    return torch.where(torch.isnan(tau), fallback.nan_to_num(1e-4), tau)


@mistakes.keep("any tie gives nan",
               "a tie alone does not make the target unreachable: with c equally near keys the largest weight "
               "falls from 1/c towards 1/num_keys as the temperature grows, so a target below 1/c has a temperature.")
def _peak_tie_is_nan(queries, keys, target, coldest=False):
    if coldest:
        return temperature_for_peak(queries, keys, target, coldest=True)
    tau = temperature_for_peak(queries, keys, target)
    tied = (_gaps(queries, keys) == 0).sum(-1)
    return torch.where(tied > 1, torch.full_like(tau, math.nan), tau)


@mistakes.keep("a fixed search interval",
               "the temperature this check needs lies outside the interval you searched (your answers stop at "
               "its end); how large it must be depends on the gaps between squared distances, so the interval "
               "has to grow until the largest weights at its two ends lie on either side of the target.")
def _peak_fixed_interval(queries, keys, target, coldest=False):
    if coldest:
        return temperature_for_peak(queries, keys, target, coldest=True)
    tau = temperature_for_peak(queries, keys, target)
    return torch.where(torch.isnan(tau), tau, tau.clamp(1e-3, 1e3))


@mistakes.keep("the query nearest to a key",
               "you answered with the query nearest to a key. Adding one number to all of a query's scores leaves "
               "its softmax unchanged, so how near its nearest key is does not count, only how far behind it the "
               "other keys are.")
def _peak_nearest_query(queries, keys, target, coldest=False):
    if not coldest:
        return temperature_for_peak(queries, keys, target)
    return int(((queries[:, None] - keys[None]) ** 2).sum(-1).amin(-1).argmin())


@mistakes.keep("the smallest gap to the runner-up key",
               "you answered with the query whose nearest key leads the next one by the smallest gap. The "
               "largest weight depends on every key's gap, not the runner-up's alone: several keys at a slightly "
               "larger gap can pull it down more than one key at a smaller gap.")
def _peak_runner_up(queries, keys, target, coldest=False):
    if not coldest:
        return temperature_for_peak(queries, keys, target)
    return int(_runner_up_gap(queries, keys).argmin())


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("Newton on the inverse temperature",
                   "float64 Newton steps on beta = 1/tau from beta = 0: sum_j exp(-gap_j beta) is convex and "
                   "decreasing, so the steps climb to the root without overshooting")
def _peak_alt_newton(queries, keys, target, coldest=False):
    q, k = queries.double(), keys.double()
    squared = torch.cdist(q, k) ** 2
    gaps = squared - squared.amin(dim=1, keepdim=True)
    gaps = torch.where(gaps < 1e-9, torch.zeros_like(gaps), gaps)   # cdist is not exact: snap ties
    tied = (gaps == 0).sum(dim=1).double()
    beta = torch.zeros(q.shape[0], dtype=torch.float64)
    for _ in range(100):
        terms = torch.exp(-gaps * beta[:, None])
        excess = terms.sum(1) - 1.0 / target
        slope = -(gaps * terms).sum(1)
        beta = torch.where(excess > 0, beta - excess / slope.clamp(max=-1e-300), beta)
    if coldest:   # the smallest temperature is the largest inverse temperature
        return int(beta.argmax())
    return torch.where(target * tied < 1, 1.0 / beta, torch.tensor(math.nan, dtype=torch.float64)).to(queries.dtype)


@alternatives.keep("loops with a widening interval",
                   "plain Python floats per query: grow the interval on log tau until it brackets the target, "
                   "then bisect")
def _peak_alt_loops(queries, keys, target, coldest=False):
    out = []
    for q in queries.tolist():
        dist = [sum((a - b) ** 2 for a, b in zip(q, key)) for key in keys.tolist()]
        best = min(dist)
        gaps = [x - best for x in dist]
        if target * gaps.count(0.0) >= 1:
            out.append(math.nan)
            continue

        def peak(log_tau):
            return 1.0 / sum(math.exp(-gap / math.exp(log_tau)) for gap in gaps)

        low, high = -1.0, 1.0
        while peak(low) < target:
            low -= 2.0
        while peak(high) > target:
            high += 2.0
        for _ in range(100):
            middle = (low + high) / 2
            low, high = (middle, high) if peak(middle) > target else (low, middle)
        out.append(math.exp((low + high) / 2))
    if coldest:
        return min(range(len(out)), key=out.__getitem__)
    return torch.tensor(out, dtype=queries.dtype)


@alternatives.keep("float32 bisection through torch.softmax",
                   "the definition itself in the inputs' dtype: softmax(-distance^2 / tau).max() for every query, "
                   "geometric bisection on tau after doubling the interval")
def _peak_alt_softmax(queries, keys, target, coldest=False):
    squared = ((queries[:, None] - keys[None]) ** 2).sum(-1)

    def peak(tau):
        return torch.softmax(-squared / tau[:, None], dim=-1).amax(-1)

    reachable = target * (squared == squared.amin(-1, keepdim=True)).sum(-1) < 1
    low = torch.full((queries.shape[0],), 1e-2, dtype=queries.dtype)
    high = torch.ones_like(low)
    while True:                              # widen only where the target is within reach
        shrink, grow = reachable & (peak(low) < target), reachable & (peak(high) > target)
        if not bool((shrink | grow).any()):
            break
        low, high = torch.where(shrink, low / 4, low), torch.where(grow, high * 4, high)
    for _ in range(40):
        middle = (low * high).sqrt()
        above = peak(middle) > target
        low, high = torch.where(above, middle, low), torch.where(above, high, middle)
    tau = (low * high).sqrt()
    if coldest:
        return tau.argmin().item()
    return torch.where(reachable, tau, torch.full_like(tau, math.nan))


# Registration -----------------------------------------------------------------------------

_HINT = ("this check puts your temperatures back into the softmax and compares each query's largest weight with "
         "the target; a query whose largest weight no positive temperature makes equal to the target must be nan.")

register(Exercise(
    label="ch01_ex6", title="The temperature for a given peak",
    name="temperature_for_peak", reference=temperature_for_peak, points=3,
    checks=[
        Check("two keys on a line, target 0.75", _line_calls, compare=_compare_peaks, hint=_HINT),
        Check("the chapter's stations and queries, targets 0.5 and 0.9", _station_calls, compare=_compare_peaks,
              hint=_HINT),
        Check("queries equally near two and four keys, targets 0.4 and 0.6", _tie_calls, compare=_compare_peaks,
              hint=_HINT + " Here each query has two or four keys at the same, smallest distance."),
        Check("keys tens of units apart, targets 0.3 and 0.9", _far_calls, compare=_compare_peaks,
              hint=_HINT + " The temperatures here run into the thousands."),
        Check("1-D float64 points with a duplicated key, target 0.45", _float64_calls, compare=_compare_peaks,
              hint=_HINT + " The inputs here are float64 (the result has the dtype of queries)."),
        Check("random small-integer points with a duplicated key (hidden)", _hidden_calls, public=False,
              compare=_compare_peaks, hint=_HINT),
        Check("the question: which of the chapter's queries needs the smallest temperature, targets 0.9 and 0.5",
              _coldest_station_calls,
              hint="with coldest=True the result is a query's index (a Python int): the query whose largest "
                   "weight reaches the target at the smallest temperature; here the queries are the chapter's "
                   "three, in some order."),
        Check("the question: one key at gap 1 against five keys at gap 1.25, targets 0.9 and 0.7",
              _coldest_gap_calls,
              hint="with coldest=True the result is the index of the query whose largest weight reaches the "
                   "target at the smallest temperature; here one query has a single key nearby, "
                   "another stands on a key with five keys nearby."),
        Check("the question on random small-integer points (hidden)", _coldest_hidden_calls, seed=9, public=False,
              hint="with coldest=True the result is the index of the query whose largest weight reaches the "
                   "target at the smallest temperature."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
