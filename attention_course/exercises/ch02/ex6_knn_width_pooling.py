r"""ch02_ex6: Nadaraya–Watson with a width per query.

The chapter gives every query the same width. Let each query choose its own instead: the
distance to its `num_neighbors`-th nearest key, so that the kernel widens where keys are
sparse and narrows where they crowd. Write `knn_width_pooling(queries, keys, values, num_neighbors)`.

* `queries`: shape `(m,)`; `keys`, `values`: shape `(n,)`, in any order; all three of one dtype,
  float32 or float64. `num_neighbors`: a Python int.
* The width of query $q$ is $h(q)$, the `num_neighbors`-th smallest of the $n$ distances
  $\lvert q - k_i \rvert$. Duplicate keys count separately: two keys at the same place are two
  neighbours.
* Where $h(q) > 0$, the prediction is Gaussian pooling with that width:
  $\sum_i K_i v_i / \sum_i K_i$ with $K_i = \exp\!\big(-(q - k_i)^2 / (2\,h(q)^2)\big)$, every key
  taking part.
* Where $h(q) = 0$ (at least `num_neighbors` keys sit exactly on $q$), the prediction is the mean of
  the values of the keys at distance 0 from $q$: the limit of the Gaussian weights as the width
  shrinks to 0.
* Return a tensor of shape `(m,)` of the inputs' dtype.
* Raise `ValueError` unless `1 <= num_neighbors <= n`; its message names `num_neighbors` and gives
  the number of keys `n`.

When your function passes, run it in a cell of your own on the chapter's data with
`num_neighbors` from 2 to 10, and compare its test errors with the global leave-one-out width
($0.225$): over all test queries, over the 80 with $0.5 < x < 4.5$, and over the other 20, near
the ends. Where does the width per query help, where does it hurt, and why?
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ...data import make_regression_1d
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import ERROR_WEIGHT, Kept, gen, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _validate_neighbors(keys, num_neighbors):
    n = keys.shape[0]
    if not 1 <= num_neighbors <= n:
        raise ValueError(f"num_neighbors must be between 1 and n = {n} (the number of keys), "
                         f"got num_neighbors={num_neighbors}")


def _pool_with_widths(distances, widths, values):
    """Gaussian pooling of values with one width per row of distances; a row of width 0 averages
    the values at distance 0 (the limit of the Gaussian as the width shrinks)."""
    zero = widths == 0
    safe = torch.where(zero, torch.ones_like(widths), widths)
    kernel = torch.exp(-(distances / safe[:, None]) ** 2 / 2)
    kernel = torch.where(zero[:, None], (distances == 0).to(kernel.dtype), kernel)
    return (kernel @ values) / kernel.sum(dim=1)


def knn_width_pooling(queries, keys, values, num_neighbors):
    """Reference, in float64: kthvalue of the absolute distances (duplicates counted), then pooling."""
    _validate_neighbors(keys, num_neighbors)
    distances = (queries.double()[:, None] - keys.double()[None, :]).abs()       # (m, n)
    widths = distances.kthvalue(num_neighbors, dim=1).values
    return _pool_with_widths(distances, widths, values.double()).to(values.dtype)


# Inputs of the public and hidden checks ---------------------------------------------------


# A query q with keys 0, 1, 3, 6, 10 and num_neighbors = 2: distances 2, 1, 1, 4, 8, so h(2) = 1. Five
# keys, not four: with n = 2 * num_neighbors the num_neighbors-th largest distance (topk's default)
# is the (num_neighbors + 1)-th smallest, and the two kept mistakes could not be told apart here.
_HAND = (torch.tensor([2.0, 0.0, 4.5]), torch.tensor([0.0, 1.0, 3.0, 6.0, 10.0]),
         torch.tensor([0.0, 2.0, 4.0, 8.0, 5.0]))


def _reordered(seed, public_seed, queries, keys, values):
    """The case as it is at the check's own seed (the public case); at any other seed (grading) the
    keys in another order with their values, the queries in another order, and the values redrawn:
    distinct halves between -4 and 4, so that keys at one place still carry different values. The
    places of keys and queries, and so every width and every tie, stay as the check's name says."""
    if seed == public_seed:
        return queries, keys, values
    g = gen(seed)
    order = torch.randperm(keys.shape[0], generator=g)
    drawn = (torch.randperm(17, generator=g)[:keys.shape[0]] - 8).to(values.dtype) / 2
    return queries[torch.randperm(queries.shape[0], generator=g)], keys[order], drawn


def _hand_calls(seed):
    return [Call(args=(*_reordered(seed, 0, *_HAND), 2))]


def _chapter_data(seed):
    data = make_regression_1d(num_train=50, num_test=100, noise=0.3, seed=seed)
    return data.x_test[::7].clone(), data.x_train, data.y_train


def _chapter_calls(seed):
    queries, keys, values = _chapter_data(seed)
    return [Call(args=(queries, keys, values, 5)), Call(args=(queries, keys, values, 12))]


def _scaled_calls(seed):
    """The chapter's data with queries and keys moved together: x -> 1024 x - 3000 and x -> x / 1024.
    A width per query scales with the keys, so the predictions stay those of the unscaled data."""
    queries, keys, values = _chapter_data(seed)
    return [Call(args=(queries * 1024 - 3000, keys * 1024 - 3000, values, 5)),
            Call(args=(queries / 1024, keys / 1024, values, 5))]


# Keys 1 and 4 are repeated (with different values), queries sit on keys and between them.
_DUP_KEYS = torch.tensor([4.0, 1.0, 7.0, 0.0, 4.0, 2.0, 1.0, 4.0])
_DUP_VALUES = torch.tensor([1.0, -2.0, 3.0, 0.5, 2.0, 1.5, 4.0, -1.0])
_DUP_QUERIES = torch.tensor([1.0, 4.0, 3.0, 5.5, 0.5, 7.0])


def _duplicate_calls(seed):
    queries, keys, values = _reordered(seed, 0, _DUP_QUERIES, _DUP_KEYS, _DUP_VALUES)
    return [Call(args=(queries, keys, values, k)) for k in (1, 2, 3, 4)]


def _every_key_calls(seed):
    g = gen(seed)
    keys = (5 * torch.rand(12, generator=g)).double()
    values = torch.randn(12, generator=g, dtype=torch.float64)
    queries = torch.linspace(-1.0, 6.0, 8, dtype=torch.float64)
    return [Call(args=(queries, keys, values, 12)), Call(args=(queries, keys, values, 1))]


def _random_problem(g):
    n, m = randint(g, 6, 30), randint(g, 4, 12)
    dtype = torch.float64 if randint(g, 0, 1) else torch.float32
    keys = 5 * torch.rand(n, generator=g)
    keys[1] = keys[0]                                   # a key repeated three times
    keys[randint(g, 2, n - 1)] = keys[0]
    values = torch.randn(n, generator=g)
    queries = 6 * torch.rand(m, generator=g) - 0.5
    queries[randint(g, 0, m - 1)] = keys[0]             # a query on the repeated key
    return queries.to(dtype), keys.to(dtype), values.to(dtype)


def _hidden_calls(seed):
    g = gen(seed)
    queries, keys, values = _random_problem(g)
    n = keys.shape[0]
    return [Call(args=(queries, keys, values, 1)), Call(args=(queries, keys, values, randint(g, 2, n - 1))),
            Call(args=(queries, keys, values, randint(g, 1, n)))]


def _bad_calls(seed):
    g = gen(seed)
    queries, keys, values = _random_problem(g)
    n = keys.shape[0]
    return [Call(args=(queries, keys, values, n)),            # valid: raising on everything cannot pass
            Call(args=(queries, keys, values, 0)), Call(args=(queries, keys, values, n + 1))]


def _bad_words(call):
    return ["num_neighbors", str(call.args[1].shape[0])]


# Kept mistakes, each with its hint --------------------------------------------------------


def _kernel_with(distances, widths, values, two=2.0):
    kernel = torch.exp(-distances ** 2 / (two * widths[:, None] ** 2))
    return (kernel @ values) / kernel.sum(dim=1)


@mistakes.keep("0/0 at a zero width",
               "where at least num_neighbors keys sit on the query its width is 0, and the Gaussian at width 0 "
               "gives 0/0 (nan); the contract's prediction there is the mean of the values of the keys at "
               "distance 0.")
def _knn_nan_at_zero(queries, keys, values, num_neighbors):
    _validate_neighbors(keys, num_neighbors)
    distances = (queries.double()[:, None] - keys.double()[None, :]).abs()
    widths = distances.kthvalue(num_neighbors, dim=1).values
    return _kernel_with(distances, widths, values.double()).to(values.dtype)


@mistakes.keep("one key on the query, not their mean",
               "where the width is 0 your prediction is the value of one of the keys on the query; when several "
               "keys sit there (a repeated key) the prediction is the mean of all their values.")
def _knn_first_key_at_zero(queries, keys, values, num_neighbors):
    _validate_neighbors(keys, num_neighbors)
    distances = (queries.double()[:, None] - keys.double()[None, :]).abs()
    widths = distances.kthvalue(num_neighbors, dim=1).values
    nearest = values.double()[distances.argmin(dim=1)]
    pooled = _pool_with_widths(distances, widths, values.double())
    return torch.where(widths == 0, nearest, pooled).to(values.dtype)


@mistakes.keep("repeated keys counted once",
               "your widths count a repeated key as one neighbour; the contract counts every key, so two keys "
               "at one place are two neighbours (and a query on a key repeated num_neighbors times has width 0).")
def _knn_unique_keys(queries, keys, values, num_neighbors):
    _validate_neighbors(keys, num_neighbors)
    distances = (queries.double()[:, None] - keys.double()[None, :]).abs()
    distinct = (queries.double()[:, None] - torch.unique(keys.double())[None, :]).abs()
    widths = distinct.sort(dim=1).values[:, min(num_neighbors, distinct.shape[1]) - 1]
    return _pool_with_widths(distances, widths, values.double()).to(values.dtype)


@mistakes.keep("one neighbour too far",
               "your width is the distance to the (num_neighbors + 1)-th nearest key, one too far (as if the "
               "query were one of the keys and had to be skipped); num_neighbors = 1 means the distance to the "
               "nearest key itself.")
def _knn_one_too_far(queries, keys, values, num_neighbors):
    _validate_neighbors(keys, num_neighbors)
    distances = (queries.double()[:, None] - keys.double()[None, :]).abs()
    widths = distances.sort(dim=1).values[:, min(num_neighbors, distances.shape[1] - 1)]
    return _pool_with_widths(distances, widths, values.double()).to(values.dtype)


@mistakes.keep("num_neighbors-th largest distance",
               "your width is the num_neighbors-th largest distance, counted from the farthest key (what topk "
               "keeps unless it is told largest=False, and what a descending sort puts first); the contract's "
               "width is the distance to the num_neighbors-th nearest key.")
def _knn_largest(queries, keys, values, num_neighbors):
    _validate_neighbors(keys, num_neighbors)
    distances = (queries.double()[:, None] - keys.double()[None, :]).abs()
    widths = distances.topk(num_neighbors, dim=1).values[:, -1]
    return _pool_with_widths(distances, widths, values.double()).to(values.dtype)


@mistakes.keep("mean distance of the nearest keys",
               "your width is the mean distance to the num_neighbors nearest keys; the contract's width is the "
               "largest of them, the distance to the num_neighbors-th nearest key.")
def _knn_mean_distance(queries, keys, values, num_neighbors):
    _validate_neighbors(keys, num_neighbors)
    distances = (queries.double()[:, None] - keys.double()[None, :]).abs()
    widths = distances.sort(dim=1).values[:, :num_neighbors].mean(dim=1)
    return _pool_with_widths(distances, widths, values.double()).to(values.dtype)


@mistakes.keep("kernel without the 1/2",
               "your kernel is exp(-d^2 / h^2), a Gaussian of width h / sqrt(2); the contract's kernel is "
               "exp(-d^2 / (2 h^2)), of width h.")
def _knn_no_half(queries, keys, values, num_neighbors):
    _validate_neighbors(keys, num_neighbors)
    distances = (queries.double()[:, None] - keys.double()[None, :]).abs()
    widths = distances.kthvalue(num_neighbors, dim=1).values
    zero = widths == 0
    pooled = _kernel_with(distances, torch.where(zero, torch.ones_like(widths), widths), values.double(), two=1.0)
    return torch.where(zero, _pool_with_widths(distances, widths, values.double()), pooled).to(values.dtype)


@mistakes.keep("signed differences sorted",
               "your width comes from sorting the signed differences q - k: the smallest of those are the keys "
               "farthest to the right, not the nearest ones, which lie on either side of the query.")
def _knn_signed(queries, keys, values, num_neighbors):
    _validate_neighbors(keys, num_neighbors)
    signed = queries.double()[:, None] - keys.double()[None, :]
    widths = signed.sort(dim=1).values[:, num_neighbors - 1].abs()
    return _pool_with_widths(signed.abs(), widths, values.double()).to(values.dtype)


@mistakes.keep("only the nearest keys pooled",
               "your prediction pools only the keys within the width (the num_neighbors nearest); in the "
               "contract every key takes part, with its Gaussian weight.")
def _knn_truncated(queries, keys, values, num_neighbors):
    _validate_neighbors(keys, num_neighbors)
    distances = (queries.double()[:, None] - keys.double()[None, :]).abs()
    widths = distances.kthvalue(num_neighbors, dim=1).values
    far = distances > widths[:, None]
    return _pool_with_widths(distances.masked_fill(far, math.inf), widths, values.double()).to(values.dtype)


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("loops over Python floats",
                   "one query at a time: sorted list of distances, math.exp, the zero width as its own branch")
def _knn_alt_loops(queries, keys, values, num_neighbors):
    if num_neighbors < 1 or num_neighbors > len(keys):
        raise ValueError(f"num_neighbors={num_neighbors} is outside 1..{len(keys)} (n, the number of keys)")
    ks, vs = keys.tolist(), values.tolist()
    out = []
    for q in queries.tolist():
        gaps = [abs(q - k) for k in ks]
        h = sorted(gaps)[num_neighbors - 1]
        if h == 0.0:
            on_query = [v for gap, v in zip(gaps, vs) if gap == 0.0]
            out.append(sum(on_query) / len(on_query))
            continue
        weights = [math.exp(-0.5 * (gap / h) ** 2) for gap in gaps]
        out.append(sum(w * v for w, v in zip(weights, vs)) / sum(weights))
    return torch.tensor(out, dtype=values.dtype)


@alternatives.keep("topk and softmax in the inputs' dtype",
                   "topk(largest=False) for the width, scores -inf off the query where the width is 0, softmax, "
                   "einsum")
def _knn_alt_softmax(queries, keys, values, num_neighbors):
    n = keys.numel()
    if not (0 < num_neighbors <= n):
        raise ValueError(f"need 0 < num_neighbors <= {n} = n")
    gaps = (queries.unsqueeze(1) - keys.unsqueeze(0)).abs()
    h = gaps.topk(num_neighbors, dim=1, largest=False).values[:, -1:]           # (m, 1)
    scores = -0.5 * (gaps / h) ** 2                                              # nan or -inf where h = 0
    on_top = torch.where(gaps == 0, torch.zeros_like(gaps), torch.full_like(gaps, -math.inf))
    weights = torch.softmax(torch.where(h == 0, on_top, scores), dim=1)
    return torch.einsum("qk,k->q", weights, values)


@alternatives.keep("numpy, keys along the rows",
                   "np.partition for the width, a (n, m) weight matrix with a width clamped to a tiny positive "
                   "number (then only the keys on the query keep weight 1)")
def _knn_alt_numpy(queries, keys, values, num_neighbors):
    q, k, v = queries.numpy(), keys.numpy(), values.numpy()
    if not 1 <= num_neighbors <= k.shape[0]:
        raise ValueError(f"num_neighbors ({num_neighbors}) must not exceed n = {k.shape[0]} nor be below 1")
    dist = np.abs(k[:, None].astype(np.float64) - q[None, :])                  # (n, m)
    width = np.partition(dist, num_neighbors - 1, axis=0)[num_neighbors - 1]   # (m,)
    with np.errstate(over="ignore"):
        w = np.exp(-0.5 * np.square(dist / np.maximum(width, 1e-300)))
    return torch.from_numpy((v.astype(np.float64) @ w) / w.sum(axis=0)).to(values.dtype)


# Registration -----------------------------------------------------------------------------

_HINT = ("this check compares the predictions at every query: the width of a query is its distance to the "
         "num_neighbors-th nearest key (every key counted), the weights are Gaussian with that width over all "
         "keys, and a query of width 0 predicts the mean of the values on it.")

register(Exercise(
    label="ch02_ex6", title="Nadaraya–Watson with a width per query",
    name="knn_width_pooling", reference=knn_width_pooling, points=3, kind="function",
    checks=[
        Check("three queries, keys 0, 1, 3, 6, 10, num_neighbors = 2", _hand_calls, seed=0,
              hint=_HINT + " Here the query at 2 has width 1 (keys 1 and 3 are both at distance 1)."),
        Check("the chapter's data, 15 queries, num_neighbors = 5 and 12", _chapter_calls, seed=0, hint=_HINT),
        Check("the same data scaled by 1024 and by 1/1024 and shifted: the same predictions", _scaled_calls,
              seed=0, hint=_HINT + " The widths scale with the keys, so the predictions are those of the "
                                   "unscaled data."),
        Check("repeated keys, tied distances and queries on keys, num_neighbors = 1 to 4", _duplicate_calls,
              hint=_HINT + " Keys 1 and 4 appear two and three times, with different values."),
        Check("every key a neighbour (num_neighbors = n) and the nearest only, float64", _every_key_calls, seed=3,
              hint=_HINT + " The inputs here are float64, and so is the result."),
        Check("random keys with a repeated one, a query on it, float32 or float64 (hidden)", _hidden_calls,
              seed=4, public=False, hint=_HINT),
        Check("num_neighbors = 0 or n + 1 raises ValueError naming num_neighbors and n (hidden)", _bad_calls,
              seed=5, public=False, must_mention=_bad_words, weight=ERROR_WEIGHT,
              hint="num_neighbors = n is valid; 0 and n + 1 raise ValueError, whose message names num_neighbors "
                   "and gives the number of keys n."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
