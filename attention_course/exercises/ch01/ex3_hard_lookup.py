"""ch01_ex3: Hard lookup: the value of the nearest key.

Write `hard_lookup(queries, keys, values)`, the all-or-nothing cousin of attention
pooling that never fails for lack of an exact match.

- `queries`: float tensor `(num_queries, d)`; `keys`: `(num_keys, d)`; `values`:
  `(num_keys, d_v)`.
- For each query, find the key with the smallest squared Euclidean distance to it. When
  several keys are equally near, take the one with the smallest index.
- Return a tensor of shape `(num_queries, d_v)` and the dtype of `values`, whose row $q$
  is the row of `values` belonging to that key.
- Raise `ValueError` when `queries.shape[1] != keys.shape[1]` (the message must contain
  `queries`, `keys` and both shapes, in any usual form), and when `keys.shape[0] != values.shape[0]`
  (the message must contain `keys`, `values` and both shapes).
"""
from __future__ import annotations

import math

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import ERROR_WEIGHT, Kept, shape_of

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _validate_lookup(queries, keys, values):
    if queries.dim() != 2 or keys.dim() != 2 or values.dim() != 2:
        raise ValueError(
            f"queries {shape_of(queries)}, keys {shape_of(keys)} and values {shape_of(values)} "
            f"must all be 2-D")
    if queries.shape[1] != keys.shape[1]:
        raise ValueError(
            f"queries {shape_of(queries)} and keys {shape_of(keys)} must have the same size d "
            f"in their last dimension")
    if keys.shape[0] != values.shape[0]:
        raise ValueError(
            f"keys {shape_of(keys)} and values {shape_of(values)} must have the same number of rows")


def _squared_distances(queries, keys):
    return ((queries[:, None, :] - keys[None, :, :]) ** 2).sum(dim=-1)


def hard_lookup(queries, keys, values):
    """Reference: the value of the nearest key (first one on ties)."""
    _validate_lookup(queries, keys, values)
    return values[torch.argmin(_squared_distances(queries, keys), dim=1)]


# Inputs of the public and hidden checks ---------------------------------------------------


def _lookup_triple(g, num_queries, num_keys, d, d_v, dtype=torch.float32):
    keys = torch.randn(num_keys, d, generator=g) * 2
    values = torch.randn(num_keys, d_v, generator=g) * 3
    queries = torch.randn(num_queries, d, generator=g) * 2
    return queries.to(dtype), keys.to(dtype), values.to(dtype)


def _lookup_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=_lookup_triple(g, 4, 6, 3, 2))]


def _lookup_exact_calls(seed):
    g = torch.Generator().manual_seed(seed)
    queries, keys, values = _lookup_triple(g, 3, 5, 2, 3)
    # every query is one of the keys: an exact-match lookup
    picks = torch.randperm(5, generator=g)[:3]
    return [Call(args=(keys[picks].clone(), keys, values))]


def _lookup_tie_calls(seed):
    g = torch.Generator().manual_seed(seed)
    num_keys, calls = 6, []
    for _ in range(2):
        query = torch.randint(-3, 4, (1, 2), generator=g).float()
        offset = torch.randint(1, 3, (2,), generator=g).float()
        # far-away decoys, then two keys at exactly the same distance from the query
        keys = torch.randint(-3, 4, (num_keys, 2), generator=g).float() * 3 + 40
        first, second = sorted(torch.randperm(num_keys, generator=g)[:2].tolist())
        keys[first] = query[0] + offset
        keys[second] = query[0] - offset
        values = torch.randn(num_keys, 3, generator=g)
        calls.append(Call(args=(query, keys, values)))
    return calls


def _lookup_float64_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=_lookup_triple(g, 5, 4, 2, 3, torch.float64))]


def _lookup_bad_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [
        Call(args=_lookup_triple(g, 2, 3, 2, 2)),  # valid first: raising on everything must not pass
        Call(args=(torch.randn(2, 3, generator=g), torch.randn(4, 2, generator=g), torch.randn(4, 2, generator=g))),
        Call(args=(torch.randn(2, 2, generator=g), torch.randn(4, 2, generator=g), torch.randn(5, 2, generator=g))),
    ]


def _lookup_mentions(call):
    queries, keys, values = call.args
    if queries.shape[-1] != keys.shape[-1]:
        return ["queries", "keys", shape_of(queries), shape_of(keys)]
    return ["keys", "values", shape_of(keys), shape_of(values)]


def _lookup_big_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=_lookup_triple(g, 12, 20, 5, 4)), Call(args=_lookup_triple(g, 3, 1, 2, 2)),
            Call(args=_lookup_triple(g, 6, 7, 3, 2, torch.float64))]


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("picked the farthest key",
               "the chosen key is the farthest one: the most similar key is at the smallest distance.")
def _lookup_farthest(queries, keys, values):
    _validate_lookup(queries, keys, values)
    return values[torch.argmax(_squared_distances(queries, keys), dim=1)]


@mistakes.keep("dot-product similarity",
               "the key was chosen by the largest dot product with the query, which favours long "
               "keys; the contract measures similarity by squared distance.")
def _lookup_dot_product(queries, keys, values):
    _validate_lookup(queries, keys, values)
    return values[torch.argmax(queries @ keys.T, dim=1)]


@mistakes.keep("last key on ties",
               "on a tie the later key won (a <= comparison keeps replacing the best); the first "
               "of the equally near keys must win.")
def _lookup_last_on_ties(queries, keys, values):
    _validate_lookup(queries, keys, values)
    distances = _squared_distances(queries, keys)
    rows = []
    for q in range(queries.shape[0]):
        best = 0
        for k in range(keys.shape[0]):
            if distances[q, k] <= distances[q, best]:
                best = k
        rows.append(values[best])
    return torch.stack(rows)


@mistakes.keep("no new axis for the pairs",
               "the queries and keys were subtracted as they are, so query i met key i only (and "
               "shapes with different numbers of queries and keys do not broadcast); every query "
               "must meet every key: give the queries an axis of size 1 for the keys and the keys "
               "one for the queries, so that the differences have shape (num_queries, num_keys, d).")
def _lookup_without_new_axis(queries, keys, values):
    _validate_lookup(queries, keys, values)
    distances = ((queries - keys) ** 2).sum(dim=-1)
    return values[distances.argmin(dim=-1)]


@mistakes.keep("returned the key",
               "the nearest key itself was returned; a lookup returns the value stored under that key.")
def _lookup_returns_keys(queries, keys, values):
    _validate_lookup(queries, keys, values)
    return keys[torch.argmin(_squared_distances(queries, keys), dim=1)].clone()


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("python loops",
                   "loops over queries and keys with a strict < (first key wins)")
def _lookup_alt_loops(queries, keys, values):
    if queries.shape[1] != keys.shape[1]:
        raise ValueError(f"queries has shape {queries.shape} but keys has shape {keys.shape}")
    if keys.shape[0] != values.shape[0]:
        raise ValueError(f"keys has shape {keys.shape} but values has shape {values.shape}")
    rows = []
    for q in queries:
        best, best_distance = 0, math.inf
        for i, k in enumerate(keys):
            distance = float(((q - k) ** 2).sum())
            if distance < best_distance:  # strict: an equal distance keeps the earlier key
                best, best_distance = i, distance
        rows.append(values[best])
    return torch.stack(rows)


@alternatives.keep("cdist and one-hot",
                   "torch.cdist, argmin, then the chapter's one-hot matrix times values")
def _lookup_alt_cdist_onehot(queries, keys, values):
    if queries.size(-1) != keys.size(-1):
        raise ValueError(f"d of queries {list(queries.shape)} != d of keys {list(keys.shape)}")
    if keys.size(0) != values.size(0):
        raise ValueError(f"rows of keys {list(keys.shape)} != rows of values {list(values.shape)}")
    nearest = torch.cdist(queries, keys).argmin(dim=-1)
    # the chapter's one-hot weight matrix, now built from the nearest key
    one_hot = torch.nn.functional.one_hot(nearest, keys.shape[0]).to(values.dtype)
    return one_hot @ values


@alternatives.keep("expanded square, float64",
                   "|q|^2 - 2 q.k + |k|^2 in float64, torch.min, index_select")
def _lookup_alt_min_float64(queries, keys, values):
    qs, ks, vs = (" x ".join(map(str, t.shape)) for t in (queries, keys, values))
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(f"queries ({qs}) and keys ({ks}) have different d")
    if keys.shape[0] != values.shape[0]:
        raise ValueError(f"keys ({ks}) and values ({vs}) have different numbers of rows")
    q, k = queries.double(), keys.double()
    distances = (q * q).sum(1, keepdim=True) - 2 * q @ k.T + (k * k).sum(1)
    _, index = torch.min(distances, dim=1)
    return values.index_select(0, index)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch01_ex3", title="Hard lookup: the value of the nearest key",
    name="hard_lookup", reference=hard_lookup, points=1,
    checks=[
        Check("4 queries, 6 keys of size 3, values of size 2", _lookup_calls, seed=0,
              hint="for each query, compute its squared distance to every key by hand and "
                   "compare the row of values you return with the row of the nearest key."),
        Check("a query equal to a key returns that key's value", _lookup_exact_calls, seed=1,
              hint="each query of this check is one of the keys, at distance 0 from it."),
        Check("a tie between two keys picks the first of them", _lookup_tie_calls, seed=2,
              hint="in this check two keys are exactly equally near each query; the contract "
                   "says which of them wins."),
        Check("float64 inputs return float64 values", _lookup_float64_calls, seed=5,
              hint="the result has the dtype of values and shape (num_queries, d_v)."),
        Check("mismatched shapes raise ValueError naming the arguments and shapes",
              _lookup_bad_calls, seed=3, must_mention=_lookup_mentions, weight=ERROR_WEIGHT,
              hint="the second call has queries and keys of different d, the third keys and "
                   "values of different lengths; each ValueError names the two arguments and "
                   "their shapes."),
        Check("20 keys of size 5, a single key and float64 (hidden)", _lookup_big_calls, seed=4,
              public=False, hint="the result has shape (num_queries, d_v) for every size."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
