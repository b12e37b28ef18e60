r"""ch01_ex4: Volitional and nonvolitional cues together.

The chapter showed the two kinds of cue apart: weights from the stations' salience alone
(the same for every query), and weights from the distances alone. Combine them: a key's
weight should grow with its salience *and* with its closeness to the query. Write
`cued_weights(queries, keys, salience, temperature=1.0, warned=None)`.

- `queries`: float tensor `(num_queries, d)`; `keys`: `(num_keys, d)`; `salience`: a
  tensor `(num_keys,)` of the same dtype, non-negative, with at least one positive entry;
  `temperature`: a positive Python number.
- Return the `(num_queries, num_keys)` tensor, of the dtype of `queries`, whose entry
  $(q, i)$ is proportional to
  $\text{salience}_i \cdot \exp\!\big(-\lVert \mathbf{q} - \mathbf{k}_i \rVert^2 / \tau\big)$,
  scaled so that each row sums to one. A key of salience 0 gets weight exactly 0; with
  equal saliences you get the chapter's distance weights back.
- It must stay finite when every key is far from a query (squared distances in the
  tens of thousands), and when the key nearest to a query has salience 0 while every
  key that can take weight is far from it.
- Raise `ValueError` whose message contains `temperature` when `temperature <= 0`, and
  one containing `salience` when `salience` has a negative entry or no positive entry.
- The chapter's question, answered by the same function: called with `warned=j`, the index of
  a key of positive salience, it returns instead the index (a Python `int`; a NumPy integer counts as one, a float or a
  tensor does not) of the query whose
  row of weights moves most when key `j` issues a warning, that is when `salience[j]` is
  multiplied by 5 and every other salience stays as it is. A row moves by the sum, over the keys,
  of the absolute changes of its weights. (The checks leave a clear winner.)

Think about what multiplying $\exp(s_i)$ by a positive number does to the score $s_i$, and
before you compute the answer for the stations, $\tau = 4$ and B's storm warning (`warned=1`),
predict it: is it the query standing on B, the one farthest from B, or another? Why?
"""
from __future__ import annotations

import math

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import ERROR_WEIGHT, Kept, finite_then_close, gen, randint, shape_of
from ._common import moved
from .ex3_hard_lookup import _squared_distances

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _validate_cued(queries, keys, salience, temperature):
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature must be a positive number, got {temperature!r}")
    if queries.dim() != 2 or keys.dim() != 2 or queries.shape[1] != keys.shape[1]:
        raise ValueError(
            f"queries {shape_of(queries)} and keys {shape_of(keys)} must be 2-D with the same "
            f"size d in their last dimension")
    if salience.shape != (keys.shape[0],):
        raise ValueError(f"salience must have shape ({keys.shape[0]},), one entry per key, "
                         f"got {shape_of(salience)}")
    if bool((salience < 0).any()) or not bool((salience > 0).any()):
        raise ValueError(f"salience must be non-negative with at least one positive entry, "
                         f"got {salience.tolist()}")


def _cued64(queries, keys, salience, temperature):
    scores = -_squared_distances(queries.double(), keys.double()) / temperature + torch.log(salience.double())
    return torch.softmax(scores, dim=-1)


def _most_moved(queries, keys, salience, temperature, warned):
    """The question's answer, in float64: the query whose weights a warning of key ``warned`` moves most."""
    _validate_cued(queries, keys, salience, temperature)
    boosted = salience.double().clone()
    boosted[warned] *= 5.0
    moves = (_cued64(queries, keys, boosted, temperature) - _cued64(queries, keys, salience, temperature))
    return int(moves.abs().sum(dim=-1).argmax())


def cued_weights(queries, keys, salience, temperature=1.0, warned=None):
    """Reference: softmax over the keys of log(salience) - |q - k|^2 / temperature.

    With ``warned=j``: the index of the query whose row moves most when salience[j] is multiplied by 5."""
    if warned is not None:
        return _most_moved(queries, keys, salience, temperature, warned)
    _validate_cued(queries, keys, salience, temperature)
    scores = -_squared_distances(queries, keys) / temperature + torch.log(salience)
    return torch.softmax(scores, dim=-1)  # log(0) = -inf: a key of salience 0 gets weight 0


# Inputs of the public and hidden checks ---------------------------------------------------


def _cued_inputs(g, num_queries, num_keys, d, scale=1.0, dtype=torch.float32, zeros=0):
    queries = torch.randn(num_queries, d, generator=g) * scale
    keys = torch.randn(num_keys, d, generator=g) * scale
    salience = 0.5 + 3.5 * torch.rand(num_keys, generator=g)  # between 0.5 and 4: never uniform
    if zeros:
        salience[torch.randperm(num_keys, generator=g)[:zeros]] = 0.0
    return queries.to(dtype), keys.to(dtype), salience.to(dtype)


def _cued_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=_cued_inputs(g, 3, 5, 2))]


def _cued_temperature_calls(seed):
    g = torch.Generator().manual_seed(seed)
    queries, keys, salience = _cued_inputs(g, 4, 6, 3)
    return [Call(args=(queries, keys, salience), kwargs={"temperature": 0.5}),
            Call(args=(queries, keys, salience), kwargs={"temperature": 4.0})]


def _cued_zero_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=_cued_inputs(g, 4, 6, 2, zeros=2), kwargs={"temperature": 2.0})]


def _cued_far_calls(seed):
    g = torch.Generator().manual_seed(seed)
    queries, keys, salience = _cued_inputs(g, 3, 5, 2)
    # And the nearest key switched off (salience 0), every other key some 400 squared units further: a shift
    # by the largest score over ALL keys (the switched-off one included) underflows every key that can get weight.
    gap = 20.0 + 2.0 * torch.rand((), generator=g).item()
    near_off = (torch.zeros(1, 2), torch.tensor([[0.5, 0.0], [gap, 0.0], [0.0, -gap - 1.0]]),
                torch.tensor([0.0, 1.0, 2.0]))
    return [Call(args=(queries + 100.0, keys, salience)),  # squared distances near 2e4
            Call(args=near_off)]


def _cued_far_only_calls(seed):
    return _cued_far_calls(seed)[:1]


def _cued_switched_off_calls(seed):
    """The trap the statement warns about, in a public check: query 0's nearest key is switched off
    (salience 0) and every other key is hundreds of squared units further; query 1 is as near to two
    keys of saliences 1 and 3 (weights 1/4 and 3/4); query 2 is far from every key.

    At any seed but the check's own (grading), the same case moved (:func:`moved`: axes permuted and
    flipped, shifted by whole numbers, so the tie stays exact), the keys in another
    order with their saliences, and the positive saliences redrawn (the tied pair's still unequal).
    The queries keep their order: the hint names them."""
    keys = torch.tensor([[0.5, 0.0], [22.0, 0.0], [0.0, -23.0], [30.0, 30.0], [30.5, 30.0]])
    salience = torch.tensor([0.0, 1.0, 2.0, 1.0, 3.0])
    queries = torch.tensor([[0.0, 0.0], [30.25, 30.0], [100.0, 100.0]])
    move = moved(seed, 7, 2, scales=(1.0,))  # not scaled: the gaps stay hundreds of squared units
    if move is not None:
        drawn = (torch.randperm(8, generator=move.g)[:4] + 1) / 2   # four unequal saliences in 0.5..4
        salience = torch.cat([torch.zeros(1), drawn])
        order = move.order(5)
        queries, keys, salience = move(queries), move(keys)[order], salience[order]
    return [Call(args=(queries, keys, salience))]


def _cued_off_calls(seed):
    # Exp-then-divide gives NaN in both calls, a shift over every key in the first only: each its own hint.
    return _cued_far_calls(seed)[::-1]


def _cued_float64_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=_cued_inputs(g, 3, 4, 2, dtype=torch.float64, zeros=1),
                 kwargs={"temperature": 1.5})]


def _cued_bad_calls(seed):
    g = torch.Generator().manual_seed(seed)
    queries, keys, salience = _cued_inputs(g, 2, 3, 2)
    negative = salience.clone()
    negative[1] = -1.0
    return [
        Call(args=(queries, keys, salience)),  # valid first: raising on everything must not pass
        Call(args=(queries, keys, salience), kwargs={"temperature": 0.0}),
        Call(args=(queries, keys, salience), kwargs={"temperature": -2.0}),
        Call(args=(queries, keys, negative)),
        Call(args=(queries, keys, torch.zeros(3))),
    ]


def _cued_mentions(call):
    return ["temperature"] if "temperature" in call.kwargs else ["salience"]


_STATION_KEYS = ((0.0, 0.0), (4.0, 0.0), (0.0, 3.0), (4.0, 3.0), (2.0, 1.0))
_STATION_QUERIES = ((4.0, 0.0), (2.0, 2.0), (0.5, 2.5))
# A fourth query past C: C's warning still moves (2, 2) most; the query nearest to C, the farthest
# and the one whose weight on C is nearest 1/2 are three others.
_QUERY_BESIDE_C = ((0.0, 3.5),)


def _warning_calls(seed):
    """The chapter's stations and queries at temperature 4, B's warning and C's (both answered by the
    query (2, 2), neither the query nearest to the warned station nor the farthest), then C's warning
    again with a fourth query just past C (still answered by (2, 2)). At any seed but the
    check's own (grading), the same case moved (:func:`moved`, not scaled: the temperature stays 4),
    the stations and the queries each in another order."""
    keys, queries = torch.tensor(_STATION_KEYS), torch.tensor(_STATION_QUERIES)
    beside_c = torch.tensor(_STATION_QUERIES + _QUERY_BESIDE_C)
    warned = [1, 2, 2]
    move = moved(seed, 8, 2, scales=(1.0,))
    if move is not None:
        key_order, query_order = move.order(5), move.order(3)
        keys, queries = move(keys)[key_order], move(queries)[query_order]
        beside_c = move(beside_c)[move.order(4)]
        warned = [int(torch.nonzero(key_order == j)) for j in warned]
    return [Call(args=(q, keys, torch.ones(5)), kwargs={"temperature": 4.0, "warned": j})
            for q, j in zip((queries, queries, beside_c), warned)]


def _warning_hidden_calls(seed):
    """Random points and saliences; each warned key chosen so that the largest move leads the next by 0.02
    or more (float32 weights give the same winner). The last call is drawn until the winner is not the
    query whose weight on the warned key is closest to 1/2 (the move peaks near a weight of 0.31)."""
    g = gen(seed)
    calls = []
    while len(calls) < 4:
        queries, keys, salience = _cued_inputs(g, randint(g, 3, 6), randint(g, 3, 7), 2, scale=1.5)
        temperature = 1.0 + 3.0 * torch.rand((), generator=g).item()
        for j in torch.randperm(keys.shape[0], generator=g).tolist():
            boosted = salience.double().clone()
            boosted[j] *= 5.0
            before = _cued64(queries, keys, salience, temperature)
            moves = (_cued64(queries, keys, boosted, temperature) - before).abs().sum(-1)
            off_half = (before[:, j] - 0.5).abs()
            if len(calls) == 3 and not bool(off_half[moves.argmax()] > off_half.min()):
                continue
            moves = moves.sort(descending=True).values
            if moves[0] - moves[1] >= 0.02:
                calls.append(Call(args=(queries, keys, salience), kwargs={"temperature": temperature, "warned": j}))
                break
    return calls


def _cued_big_calls(seed):
    g = torch.Generator().manual_seed(seed)
    big = _cued_inputs(g, 9, 13, 6, scale=2.0, zeros=4)
    far_queries, far_keys, far_salience = _cued_inputs(g, 4, 6, 3)
    return [Call(args=big, kwargs={"temperature": 3.0}),
            Call(args=_cued_inputs(g, 2, 1, 2)),
            Call(args=(far_queries - 80.0, far_keys, far_salience), kwargs={"temperature": 0.7})]


# Kept mistakes, each with its hint --------------------------------------------------------


def _cued_mistake(transform, validate=True):
    def impl(queries, keys, salience, temperature=1.0, warned=None):
        if warned is not None:   # these mistakes are in the weights: the question is answered as the reference does
            return _most_moved(queries, keys, salience, temperature, warned)
        if validate:
            _validate_cued(queries, keys, salience, temperature)
        return transform(_squared_distances(queries, keys), salience, temperature)
    return impl


mistakes.add("salience added to the scores",
             "the salience was added to the scores, and a term added before exponentiating multiplies each "
             "weight by exp(salience), not by the salience; the contract multiplies it by the salience itself.",
             _cued_mistake(lambda sq, s, t: torch.softmax(-sq / t + s, dim=-1)))


mistakes.add("not renormalised after the salience",
             "the distance weights were multiplied by the salience but not divided by their "
             "new total, so rows no longer sum to one.",
             _cued_mistake(lambda sq, s, t: torch.softmax(-sq / t, dim=-1) * s))


mistakes.add("temperature divides the salience too",
             "the temperature scaled the salience's part of the weights as well, so a salient key counts for "
             "less as the temperature grows; the temperature divides the squared distance only.",
             _cued_mistake(lambda sq, s, t: torch.softmax((-sq + torch.log(s)) / t, dim=-1)))


mistakes.add("ignored the salience",
             "the weights depend on the distances only: the salience was not used.",
             _cued_mistake(lambda sq, s, t: torch.softmax(-sq / t, dim=-1)))


def _cued_naive(sq, salience, temperature):
    weighted = salience * torch.exp(-sq / temperature)
    return weighted / weighted.sum(dim=-1, keepdim=True)


mistakes.add("exp then divide (underflow)",
             "exponentiating scores near -2e4 underflows to 0 and 0/0 gives NaN; shift each row's scores by "
             "a maximum before exponentiating (or use a built-in that does), one that no key of salience 0 sets.",
             _cued_mistake(_cued_naive))


def _cued_shift_over_all_keys(sq, salience, temperature):
    scores = -sq / temperature
    weighted = salience * torch.exp(scores - scores.max(dim=-1, keepdim=True).values)
    return weighted / weighted.sum(dim=-1, keepdim=True)


mistakes.add("shifted by the maximum over every key",
             "you shifted the scores by their maximum over every key, switched-off ones included: when the nearest "
             "key has salience 0, every key that can get weight lies far below that maximum, its exp underflows "
             "to 0 and the row becomes 0/0. The shift must come from the keys of positive salience.",
             _cued_mistake(_cued_shift_over_all_keys))


mistakes.add("no check of the salience",
             "a negative or all-zero salience must raise a ValueError naming salience.",
             _cued_mistake(lambda sq, s, t: torch.softmax(-sq / t + torch.log(s), dim=-1),
                           validate=False))


def _warned_by_distance(pick):
    def impl(queries, keys, salience, temperature=1.0, warned=None):
        if warned is None:
            return cued_weights(queries, keys, salience, temperature)
        _validate_cued(queries, keys, salience, temperature)
        return int(pick(((queries - keys[warned]) ** 2).sum(dim=-1)))
    return impl


mistakes.add("the query nearest to the warned key",
             "you answered with the query nearest to the warned key. That query already gives the key most of "
             "its weight, and multiplying a weight near 1 by 5 and renormalising leaves it near 1: its row "
             "barely moves.",
             _warned_by_distance(torch.argmin))


mistakes.add("the query farthest from the warned key",
             "you answered with the query farthest from the warned key. That query gives the key a weight near "
             "0, and five times a weight near 0 is still near 0: its row barely moves.",
             _warned_by_distance(torch.argmax))


@mistakes.keep("the query whose weight on the warned key is nearest 1/2",
               "you answered with the query whose weight on the warned key is closest to 1/2, a guess at where "
               "a row moves most, not the move itself; the largest move is not found there. Compute each row's "
               "move as the contract defines it (over every key, the absolute changes of its weights, summed) "
               "and take the largest.")
def _warned_by_half_weight(queries, keys, salience, temperature=1.0, warned=None):
    if warned is None:
        return cued_weights(queries, keys, salience, temperature)
    return int((cued_weights(queries, keys, salience, temperature)[:, warned] - 0.5).abs().argmin())


def _compare_index(got, want, calls):
    """Each answer the reference's index, and a Python int (a NumPy integer arrives as one)."""
    from ...checks.checking import compare_all
    reason = compare_all(got, want, Check("", lambda seed: [], "", rtol=0.0, atol=0.0), calls)
    if reason:
        return reason
    for i, (mine, theirs) in enumerate(zip(got, want)):
        if mine.get("status") == "ok" and type(mine["value"]) is not type(theirs["value"]):
            value = mine["value"]
            shown = (f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}" if hasattr(value, "shape")
                     else f"the {type(value).__name__} {value!r}"[:60])
            return (f"call {i + 1} of {len(calls)} returned {shown}; the contract asks for a Python int "
                    f"(a NumPy integer counts as one)")
    return None


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("salience after the softmax",
                   "softmax of the distance scores, times salience, "
"renormalised")
def _cued_alt_after_softmax(queries, keys, salience, temperature=1.0, warned=None):
    if warned is not None:  # brute force: the weights before and after the warning, with this function
        warning = torch.ones_like(salience)
        warning[warned] = 5.0
        after = _cued_alt_after_softmax(queries, keys, salience * warning, temperature)
        return int((after - _cued_alt_after_softmax(queries, keys, salience, temperature)).abs().sum(1).argmax())
    if not temperature > 0:
        raise ValueError("temperature must be > 0")
    if (salience < 0).any() or salience.sum() == 0:
        raise ValueError("bad salience: need non-negative entries, not all zero")
    gaps = queries.unsqueeze(1) - keys.unsqueeze(0)
    # The softmax runs over the keys that are switched on only: a switched-off nearest key
    # must not set the scale, or every key that can get weight underflows to 0.
    scores = (-gaps.pow(2).sum(-1) / temperature).masked_fill(salience == 0, float("-inf"))
    distance_weights = torch.softmax(scores, dim=-1)
    boosted = distance_weights * salience  # then renormalise: the common factor cancels
    return boosted / boosted.sum(dim=-1, keepdim=True)


@alternatives.keep("float64 with a max shift",
                   "cdist, log(salience), explicit max shift, in float64")
def _cued_alt_float64_shift(queries, keys, salience, temperature=1.0, warned=None):
    if temperature <= 0:
        raise ValueError(f"temperature={temperature} is not positive")
    if salience.min() < 0 or salience.max() <= 0:
        raise ValueError(f"salience={salience} must be >= 0 and not all zero")
    q, k, s = queries.double(), keys.double(), salience.double()
    logits = -torch.cdist(q, k) ** 2 / temperature + s.log()
    logits = logits - logits.max(dim=-1, keepdim=True).values
    weights = logits.exp()
    weights = weights / weights.sum(dim=-1, keepdim=True)
    if warned is not None:
        # In closed form: the warned key's weight w becomes 5w / (1 + 4w), the others shrink by
        # 1 / (1 + 4w), so the row moves by twice the warned key's gain.
        w = weights[:, warned]
        return int((2 * (5 * w / (1 + 4 * w) - w)).argmax())
    return weights.to(queries.dtype)


@alternatives.keep("python loops",
                   "pure Python floats, shifted by the best salient score")
def _cued_alt_loops(queries, keys, salience, temperature=1.0, warned=None):
    if temperature <= 0:
        raise ValueError("temperature must be positive")
    if warned is not None:
        before = _cued_alt_loops(queries, keys, salience, temperature).tolist()
        warning = salience.tolist()
        warning[warned] *= 5
        after = _cued_alt_loops(queries, keys, torch.tensor(warning, dtype=salience.dtype), temperature).tolist()
        moves = [sum(abs(a - b) for a, b in zip(row_after, row_before)) for row_after, row_before in zip(after, before)]
        return moves.index(max(moves))
    sal = salience.tolist()
    if min(sal) < 0 or max(sal) == 0:
        raise ValueError("salience must be non-negative and contain a positive value")
    rows = []
    for q in queries.tolist():
        scores = [-sum((a - b) ** 2 for a, b in zip(q, k)) / temperature for k in keys.tolist()]
        top = max(score for score, s in zip(scores, sal) if s > 0)
        terms = [s * math.exp(score - top) for score, s in zip(scores, sal)]
        total = sum(terms)
        rows.append([t / total for t in terms])
    return torch.tensor(rows, dtype=queries.dtype)


@alternatives.keep("log_softmax and einsum",
                   "einsum distances, -inf bias for zero salience, "
"log_softmax then exp")
def _cued_alt_log_softmax(queries, keys, salience, temperature=1.0, warned=None):
    if not (temperature > 0):
        raise ValueError("temperature <= 0")
    if torch.any(salience < 0) or torch.all(salience == 0):
        raise ValueError("salience: negative entry, or every entry is zero")
    sq = torch.einsum("qkd,qkd->qk", queries[:, None] - keys, queries[:, None] - keys)
    bias = torch.where(salience > 0, salience.log(), torch.full_like(salience, -math.inf))
    if warned is not None:  # a warning adds log 5 to one key's score, in float64
        scores = (bias - sq / temperature).double()
        lifted = scores + math.log(5.0) * torch.nn.functional.one_hot(torch.tensor(warned), len(salience))
        move = (torch.softmax(lifted, dim=-1) - torch.softmax(scores, dim=-1)).abs().sum(dim=-1)
        return move.argmax().item()
    return torch.log_softmax(bias - sq / temperature, dim=-1).exp()


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch01_ex4", title="Volitional and nonvolitional cues together",
    name="cued_weights", reference=cued_weights, points=2,
    checks=[
        Check("3 queries, 5 keys in 2-D, saliences between 0.5 and 4, temperature 1", _cued_calls,
              seed=0,
              hint="weights[q, i] is salience[i] * exp(-|q - k_i|^2 / temperature), divided by "
                   "its row's total; compare one row with that computed by hand."),
        Check("temperatures 0.5 and 4", _cued_temperature_calls, seed=1,
              hint="the same inputs at two temperatures: only the distance term depends on the "
                   "temperature."),
        Check("a salience of 0 switches a key off", _cued_zero_calls, seed=2,
              hint="two keys of this check have salience 0; the reason above says whether their columns or the "
                   "row sums differ."),
        Check("the nearest key switched off and every other key far, then queries far from every key: "
              "finite weights (hidden)",
              _cued_off_calls, seed=6, public=False, weight=0.5, compare=finite_then_close(1e-4, 1e-5),
              hint="in call 1 the key nearest to the query has salience 0 and the others are some 400 squared "
                   "units further; in call 2 every key is about 140 units from the queries; every number you "
                   "divide by must stay above 0."),
        Check("queries far from every key still give finite weights", _cued_far_only_calls, seed=3,
              compare=finite_then_close(1e-4, 1e-5),
              hint="the queries are about 140 units from every key, so the squared distances are "
                   "near 2e4, where exp of such numbers underflows in float32."),
        Check("the nearest key switched off, a tie of two keys, a query far from every key: finite weights",
              _cued_switched_off_calls, seed=7, compare=finite_then_close(1e-4, 1e-5),
              hint="query 0's nearest key has salience 0 and every other key is hundreds of squared units "
                   "further; query 1 is as near to two keys of different saliences; query 2 is far from "
                   "every key."),
        Check("float64 inputs give float64 weights", _cued_float64_calls, seed=5,
              hint="the result has the dtype of queries, through every tensor created on the way."),
        Check("bad temperature or salience raise ValueError naming the culprit",
              _cued_bad_calls, seed=4, must_mention=_cued_mentions, weight=ERROR_WEIGHT,
              hint="calls 2 to 5 pass a temperature <= 0, a negative salience and an all-zero "
                   "salience; each ValueError names the argument at fault."),
        Check("9 queries, 13 keys of size 6 with zero saliences, a single key, far queries (hidden)",
              _cued_big_calls, seed=6, public=False, compare=finite_then_close(1e-4, 1e-5),
              hint="the result has shape (num_queries, num_keys), finite, for every size."),
        Check("the question: which query a warning moves most (the chapter's stations, B's and C's warnings, "
              "then C's with a fourth query beside C)",
              _warning_calls, seed=8, compare=_compare_index,
              hint="with warned=j the result is a query's index (a Python int; a NumPy integer counts as one), the "
                   "query whose row of weights moves most when salience[j] is multiplied by 5; here the queries are "
                   "the chapter's three (in some order) at temperature 4, then a fourth one too."),
        Check("the question on random points and saliences (hidden)", _warning_hidden_calls, seed=9, public=False,
              compare=_compare_index,
              hint="with warned=j the result is the index of the query whose row of weights moves most (sum of the "
                   "absolute changes) when salience[j] is multiplied by 5."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
