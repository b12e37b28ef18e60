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
  halves, so that equal distances are exactly equal in floating point.)
"""
from __future__ import annotations

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def zero_temperature_weights(queries, keys):
    """Uniform over the nearest keys: the softmax's limit keeps only the largest scores."""
    distances = ((queries[:, None, :] - keys[None, :, :]) ** 2).sum(-1)
    nearest = distances == distances.min(dim=-1, keepdim=True).values
    return (nearest / nearest.sum(dim=-1, keepdim=True)).to(queries.dtype)


# Inputs of the public and hidden checks ---------------------------------------------------


def _no_tie_calls(seed):
    keys = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 3.0], [4.0, 4.0]])
    queries = torch.tensor([[0.5, 0.0], [3.0, 3.5], [0.0, 2.0]])
    return [Call(args=(queries, keys))]


def _tie_calls(seed):
    keys = torch.tensor([[0.0, 0.0], [2.0, 0.0], [1.0, 5.0], [1.0, -1.0]])
    # query 0 is as near to keys 0 and 1 (distance^2 1.25); query 1 to keys 0, 1 and 3 (distance^2 1).
    queries = torch.tensor([[1.0, 0.5], [1.0, 0.0], [1.0, 4.5]])
    keys3 = torch.tensor([[0.0, 0.0], [2.0, 0.0], [1.0, 1.0], [1.0, -1.0], [5.0, 5.0]])
    return [Call(args=(queries, keys)), Call(args=(torch.tensor([[1.0, 0.0], [5.0, 4.0]]), keys3))]


def _float64_calls(seed):
    keys = torch.tensor([[1.0], [3.0], [3.0], [-1.0]], dtype=torch.float64)
    queries = torch.tensor([[2.0], [3.0], [0.0], [10.0]], dtype=torch.float64)
    return [Call(args=(queries, keys))]


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


@mistakes.keep("nearest over the queries",
               "you took the smallest distance down each column (over the queries); each query (a row) looks for "
               "its own nearest keys.")
def _zt_wrong_axis(queries, keys):
    distances = ((queries[:, None, :] - keys[None, :, :]) ** 2).sum(-1)
    nearest = distances == distances.min(dim=0, keepdim=True).values
    counts = nearest.sum(dim=-1, keepdim=True).clamp(min=1)
    return (nearest / counts).to(queries.dtype)


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("softmax at a tiny temperature",
                   "the definition itself: softmax of -distance^2 / tau at tau = 1e-3 in float64 (with integer "
                   "and half coordinates, any other distance is at least 0.25 larger, e^-250 away)")
def _zt_alt_tiny_tau(queries, keys):
    distances = torch.cdist(queries.double(), keys.double()) ** 2
    return torch.softmax(-(distances - distances.min(-1, keepdim=True).values) / 1e-3, dim=-1).to(queries.dtype)


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
    hits = torch.where(torch.isclose(distances, low, rtol=0, atol=1e-6), 1.0, 0.0).to(queries.dtype)
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
        Check("random small-integer points with a duplicated key (hidden)", _hidden_calls, public=False,
              hint=_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
