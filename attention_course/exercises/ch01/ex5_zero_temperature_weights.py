r"""ch01_ex5: The zero-temperature limit.

The chapter says that as the temperature $\tau$ shrinks, the soft lookup approaches the hard one.
Work out what the weights $\operatorname{softmax}_i\big(-\lVert \mathbf{q} - \mathbf{k}_i \rVert^2 / \tau\big)$
tend to as $\tau \to 0$, including when several keys are equally near, and write the limit as
`zero_temperature_weights(queries, keys)`. (Exercise 3's `hard_lookup` picks one key on a tie;
the limit does not.)

- `queries`: float tensor `(num_queries, d)`; `keys`: `(num_keys, d)`, same dtype.
- Return the `(num_queries, num_keys)` tensor of the limit weights, of the dtype of `queries`:
  row $q$ puts equal weight on every key at the smallest squared Euclidean distance from query
  $q$, and exactly 0 on every other key. (The checks use coordinates that are small integers or
  halves, or such numbers divided by a power of two, so that equal distances are exactly equal in
  floating point.)
"""
from __future__ import annotations

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import moved

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def zero_temperature_weights(queries, keys):
    """Uniform over the nearest keys: the softmax's limit keeps only the largest scores."""
    distances = ((queries[:, None, :] - keys[None, :, :]) ** 2).sum(-1)
    nearest = distances == distances.min(dim=-1, keepdim=True).values
    return (nearest / nearest.sum(dim=-1, keepdim=True)).to(queries.dtype)


# Inputs of the public and hidden checks ---------------------------------------------------


def _moved_calls(seed, public_seed, cases, scales=(1.0, 2.0), shift=6):
    """``cases``, a list of ``(queries, keys)``, as they are at the check's own seed (the public case);
    at any other seed (grading) each moved by one :func:`moved` of the points (exact: ties stay
    ties, nearest stays nearest), its keys and its queries each in another order."""
    move = moved(seed, public_seed, cases[0][0].shape[1], scales, shift)
    calls = []
    for queries, keys in cases:
        if move is not None:
            queries = move(queries)[move.order(queries.shape[0])]
            keys = move(keys)[move.order(keys.shape[0])]
        calls.append(Call(args=(queries, keys)))
    return calls


def _no_tie_case():
    keys = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 3.0], [4.0, 4.0]])
    queries = torch.tensor([[0.5, 0.0], [3.0, 3.5], [0.0, 2.0]])
    return [(queries, keys)]


def _tie_case():
    keys = torch.tensor([[0.0, 0.0], [2.0, 0.0], [1.0, 5.0], [1.0, -1.0]])
    # query 0 is as near to keys 0 and 1 (distance^2 1.25); query 1 to keys 0, 1 and 3 (distance^2 1).
    queries = torch.tensor([[1.0, 0.5], [1.0, 0.0], [1.0, 4.5]])
    keys3 = torch.tensor([[0.0, 0.0], [2.0, 0.0], [1.0, 1.0], [1.0, -1.0], [5.0, 5.0]])
    return [(queries, keys), (torch.tensor([[1.0, 0.0], [5.0, 4.0]]), keys3)]


def _no_tie_calls(seed):
    return _moved_calls(seed, 0, _no_tie_case())


def _tie_calls(seed):
    return _moved_calls(seed, 0, _tie_case())


def _float64_calls(seed):
    keys = torch.tensor([[1.0], [3.0], [3.0], [-1.0]], dtype=torch.float64)
    queries = torch.tensor([[2.0], [3.0], [0.0], [10.0]], dtype=torch.float64)
    return _moved_calls(seed, 0, [(queries, keys)])


def _close_calls(seed):
    """The first two cases shrunk by 2^8 (2^7 to 2^10 at grading, with no shift, so that the
    coordinates stay exact and small): squared distances differ by a few millionths, far below any
    fixed temperature an answer might try instead of the limit, and the ties are still exact."""
    cases = [(queries * 2.0 ** -8, keys * 2.0 ** -8) for queries, keys in _no_tie_case() + _tie_case()[:1]]
    return _moved_calls(seed, 0, cases, scales=(2.0, 1.0, 0.5, 0.25), shift=0)


def _hidden_calls(seed):
    g = gen(seed)
    d, num_keys, num_queries = randint(g, 1, 3), randint(g, 2, 7), randint(g, 1, 6)
    keys = torch.randint(-3, 4, (num_keys, d), generator=g).float()
    keys[-1] = keys[0]                      # a duplicated key: always a tie for whoever is nearest to it
    queries = torch.randint(-6, 7, (num_queries, d), generator=g).float() / 2
    queries[0] = keys[0]
    return [Call(args=(queries, keys))]


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("one key per query, as hard_lookup",
               "you put all the weight on one nearest key; when several keys are equally near, each softmax "
               "gives them equal weights at every temperature, so the limit shares the weight among them.")
def _zt_argmax(queries, keys):
    distances = ((queries[:, None, :] - keys[None, :, :]) ** 2).sum(-1)
    return torch.nn.functional.one_hot(distances.argmin(-1), keys.shape[0]).to(queries.dtype)


@mistakes.keep("weight 1 on each tied key",
               "every nearest key got weight 1; the weights of a row still sum to one in the limit, so c equally "
               "near keys get 1/c each.")
def _zt_unnormalised(queries, keys):
    distances = ((queries[:, None, :] - keys[None, :, :]) ** 2).sum(-1)
    return (distances == distances.min(dim=-1, keepdim=True).values).to(queries.dtype)


@mistakes.keep("the farthest keys",
               "your weights go to the farthest keys: the scores are minus the squared distance, so a small "
               "temperature favours the largest score, the smallest distance.")
def _zt_farthest(queries, keys):
    distances = ((queries[:, None, :] - keys[None, :, :]) ** 2).sum(-1)
    far = distances == distances.max(dim=-1, keepdim=True).values
    return (far / far.sum(dim=-1, keepdim=True)).to(queries.dtype)


@mistakes.keep("softmax at a fixed small temperature",
               "your weights are a softmax at one fixed small temperature, which is not yet the limit: here the "
               "squared distances differ by less than a ten-thousandth, so at that temperature the weights still spread over "
               "keys that are not the nearest. The limit does not depend on how far apart the points are.")
def _zt_fixed_temperature(queries, keys):
    distances = ((queries[:, None, :] - keys[None, :, :]) ** 2).sum(-1)
    return torch.softmax(-distances / 1e-3, dim=-1)


@mistakes.keep("nearest over the queries",
               "you took the smallest distance down each column (over the queries); each query (a row) looks for "
               "its own nearest keys.")
def _zt_wrong_axis(queries, keys):
    distances = ((queries[:, None, :] - keys[None, :, :]) ** 2).sum(-1)
    nearest = distances == distances.min(dim=0, keepdim=True).values
    counts = nearest.sum(dim=-1, keepdim=True).clamp(min=1)
    return (nearest / counts).to(queries.dtype)


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("softmax at a temperature below every gap",
                   "the definition itself, in float64: softmax of -distance^2 / tau, each row's tau a thousandth "
                   "of its smallest positive gap between squared distances (every other key then sits e^-1000 "
                   "away, exactly 0)")
def _zt_alt_tiny_tau(queries, keys):
    distances = torch.cdist(queries.double(), keys.double()) ** 2
    gaps = distances - distances.min(-1, keepdim=True).values
    smallest = torch.where(gaps > 0, gaps, torch.full_like(gaps, float("inf"))).min(-1, keepdim=True).values
    tau = torch.where(torch.isinf(smallest), torch.ones_like(smallest), smallest / 1000)
    return torch.softmax(-gaps / tau, dim=-1).to(queries.dtype)


@alternatives.keep("loops", "plain loops over queries and keys, ties counted by hand")
def _zt_alt_loops(queries, keys):
    out = torch.zeros(queries.shape[0], keys.shape[0], dtype=queries.dtype)
    for q in range(queries.shape[0]):
        dist = [float(((queries[q] - keys[i]) ** 2).sum()) for i in range(keys.shape[0])]
        best = min(dist)
        tied = [i for i, value in enumerate(dist) if value == best]
        for i in tied:
            out[q, i] = 1.0 / len(tied)
    return out


@alternatives.keep("torch.where and cdist", "distances by torch.cdist, ties by torch.where on the row minimum")
def _zt_alt_where(queries, keys):
    distances = torch.cdist(queries, keys).square()
    low = distances.amin(dim=1, keepdim=True)
    hits = torch.where(torch.isclose(distances, low, rtol=1e-5, atol=0), 1.0, 0.0).to(queries.dtype)
    return hits / hits.sum(dim=1, keepdim=True)


# Registration -----------------------------------------------------------------------------

_HINT = ("this check compares the limit weights: each row is spread equally over that query's nearest keys "
         "and is 0 elsewhere; the reason above says what differs.")

register(Exercise(
    label="ch01_ex5", title="The zero-temperature limit",
    name="zero_temperature_weights", reference=zero_temperature_weights, points=2,
    checks=[
        Check("3 queries, 4 keys, every query with one nearest key", _no_tie_calls, hint=_HINT),
        Check("queries equally near to two, three and four keys", _tie_calls, hint=_HINT),
        Check("1-D float64 points: a duplicated key and a query far from every key", _float64_calls, hint=_HINT),
        Check("points a few thousandths apart: one nearest key, then ties", _close_calls, hint=_HINT),
        Check("random small-integer points with a duplicated key (hidden)", _hidden_calls, public=False,
              hint=_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
