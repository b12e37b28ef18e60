"""Chapter 1 exercises: queries, keys and values.

* ``ch01_ex1`` ``attention_pool(weights, values)`` -- weighted sum of value rows, optionally batched.
* ``ch01_ex2`` ``normalize_weights(scores)`` -- non-negative scores to weights summing to one
  along the keys axis; an all-zero row becomes uniform weights.
* ``ch01_ex3`` ``hard_lookup(queries, keys, values)`` -- the value of the nearest key (ties: first key).
* ``ch01_ex4`` ``distance_weights(queries, keys, temperature)`` -- softmax of the negative
  squared distances divided by the temperature, numerically stable.

Every check draws its inputs from a local generator seeded by the check's seed. Error
checks start with one valid call, so that an implementation that raises for every input
cannot pass them.
"""
from __future__ import annotations

import torch

from ..registry import Call, Check, Exercise, Mistake, register


def _shape(t) -> tuple:
    return tuple(t.shape)


# ---------------------------------------------------------------- ch01_ex1: attention_pool

def _validate_pool(weights, values):
    if weights.dim() not in (2, 3) or weights.dim() != values.dim():
        raise ValueError(
            f"weights {_shape(weights)} and values {_shape(values)} must both be 2-D "
            f"or both be 3-D (with the same batch size)")
    if weights.shape[-1] != values.shape[-2] or weights.shape[:-2] != values.shape[:-2]:
        raise ValueError(
            f"weights {_shape(weights)} and values {_shape(values)} do not fit: weights "
            f"has {weights.shape[-1]} keys, values has {values.shape[-2]} rows")


def attention_pool(weights, values):
    """Reference: ``weights @ values`` after checking the shapes."""
    _validate_pool(weights, values)
    return torch.matmul(weights, values)


def _pool_pair(g, batch, num_queries, num_keys, d_v):
    lead = () if batch is None else (batch,)
    weights = torch.softmax(torch.randn(*lead, num_queries, num_keys, generator=g) * 2, dim=-1)
    values = torch.randn(*lead, num_keys, d_v, generator=g) * 3 + 1
    return weights, values


def _pool_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=_pool_pair(g, None, 3, 5, 4))]


def _pool_batched_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=_pool_pair(g, 2, 3, 6, 2))]


def _pool_unnormalized_calls(seed):
    g = torch.Generator().manual_seed(seed)
    weights = torch.rand(4, 5, generator=g) * 2  # rows deliberately do not sum to one
    values = torch.randn(5, 3, generator=g) + 2
    # float64 inputs too: the result keeps the dtype of the inputs
    return [Call(args=(weights, values)), Call(args=(weights.double(), values.double()))]


def _pool_bad_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [
        Call(args=_pool_pair(g, None, 2, 3, 2)),  # valid first: raising on everything must not pass
        Call(args=(torch.rand(3, 5, generator=g), torch.randn(4, 2, generator=g))),
        Call(args=(torch.rand(2, 3, 5, generator=g), torch.randn(4, 5, 2, generator=g))),
        Call(args=(torch.rand(3, 5, generator=g), torch.randn(2, 5, 2, generator=g))),
    ]


def _pool_big_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=_pool_pair(g, 4, 7, 9, 5)), Call(args=_pool_pair(g, None, 1, 1, 3))]


def _mentions_both_shapes(call):
    if len(call.args) < 2:
        return ["weights", "values"]
    return ["weights", "values", str(_shape(call.args[0])), str(_shape(call.args[1]))]


def _pool_ignores_weights(weights, values):
    _validate_pool(weights, values)
    mean = values.mean(dim=-2, keepdim=True)
    return mean.expand(*weights.shape[:-1], values.shape[-1]).clone()


def _pool_divided_by_num_keys(weights, values):
    _validate_pool(weights, values)
    return torch.matmul(weights, values) / values.shape[-2]


def _pool_renormalized(weights, values):
    _validate_pool(weights, values)
    return torch.matmul(weights / weights.sum(dim=-1, keepdim=True), values)


def _pool_unchecked(weights, values):
    return torch.matmul(weights, values)


register(Exercise(
    label="ch01_ex1", title="Attention pooling as a weighted average",
    name="attention_pool", reference=attention_pool, points=2,
    checks=[
        Check("3 queries pool 5 values of size 4", _pool_calls, seed=0,
              hint="row q of the result is sum over k of weights[q, k] * values[k]: "
                   "one weighted sum of value rows per query."),
        Check("a batch of 2, each with 3 queries over 6 keys", _pool_batched_calls, seed=1,
              hint="with a leading batch dimension, each batch element pools its own values "
                   "with its own weights; the result has shape (batch, num_queries, d_v)."),
        Check("weights that do not sum to one are used as given", _pool_unnormalized_calls, seed=2,
              hint="use the weights exactly as given; the function does not normalise them."),
        Check("mismatched shapes raise ValueError naming both arguments and shapes",
              _pool_bad_calls, seed=3, must_mention=_mentions_both_shapes,
              hint="compare the number of dimensions, weights.shape[-1] with values.shape[-2] "
                   "and the batch sizes before computing anything; mention weights, values and "
                   "both shapes as tuples in the message."),
        Check("a larger batch and a single key (hidden)", _pool_big_calls, seed=4, public=False,
              hint="the result must have shape (..., num_queries, d_v) for every size."),
    ],
    mistakes=[
        Mistake("ignored the weights",
                "every query got the same plain mean of the values: the weights were not used.",
                _pool_ignores_weights),
        Mistake("divided by num_keys",
                "the weights already sum to one, so the weighted sum needs no further division "
                "by the number of keys.",
                _pool_divided_by_num_keys),
        Mistake("renormalized the weights",
                "the weights were rescaled to sum to one; the contract uses them as given.",
                _pool_renormalized),
        Mistake("no shape check",
                "bad shapes must be caught by your own check and reported as a ValueError "
                "naming weights, values and their shapes, before any matrix product.",
                _pool_unchecked),
    ],
))


# ---------------------------------------------------------------- ch01_ex2: normalize_weights

def _validate_scores(scores):
    if scores.dim() < 1 or scores.shape[-1] == 0:
        raise ValueError(f"scores must have at least one key along the last axis, got shape {_shape(scores)}")
    if bool((scores < 0).any()):
        raise ValueError(
            f"scores must be non-negative; scores of shape {_shape(scores)} has a "
            f"negative entry (minimum {scores.min().item():.4g})")


def normalize_weights(scores):
    """Reference: divide each row by its sum; an all-zero row becomes uniform."""
    _validate_scores(scores)
    totals = scores.sum(dim=-1, keepdim=True)
    safe_totals = torch.where(totals > 0, totals, torch.ones_like(totals))
    uniform = torch.full_like(scores, 1.0 / scores.shape[-1])
    return torch.where(totals > 0, scores / safe_totals, uniform)


def _scores_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=(torch.rand(3, 5, generator=g) * 4,))]


def _scores_batched_calls(seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(2, 3, 4, generator=g) * 2
    return [Call(args=(scores,)), Call(args=(scores.double(),))]  # the dtype is kept


def _scores_zero_row_calls(seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(4, 6, generator=g) + 0.1
    scores[1] = 0.0
    return [Call(args=(scores,))]


def _scores_bad_calls(seed):
    g = torch.Generator().manual_seed(seed)
    negative = torch.rand(3, 4, generator=g)
    negative[2, 1] = -0.5
    return [Call(args=(torch.rand(2, 3, generator=g) + 0.1,)), Call(args=(negative,))]


def _scores_big_calls(seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(3, 5, 7, generator=g) * 10
    scores[0, 2] = 0.0
    scores[2, 4] = 0.0
    one_key = torch.rand(4, 1, generator=g) + 0.5
    return [Call(args=(scores,)), Call(args=(one_key,))]


def _normalize_over_queries(scores):
    _validate_scores(scores)
    totals = scores.sum(dim=0, keepdim=True)
    safe_totals = torch.where(totals > 0, totals, torch.ones_like(totals))
    uniform = torch.full_like(scores, 1.0 / scores.shape[0])
    return torch.where(totals > 0, scores / safe_totals, uniform)


def _normalize_softmax(scores):
    _validate_scores(scores)
    return torch.softmax(scores, dim=-1)


def _normalize_nan_rows(scores):
    _validate_scores(scores)
    return scores / scores.sum(dim=-1, keepdim=True)


def _normalize_zero_rows(scores):
    _validate_scores(scores)
    return scores / scores.sum(dim=-1, keepdim=True).clamp_min(1e-12)


def _normalize_unchecked(scores):
    totals = scores.sum(dim=-1, keepdim=True)
    safe_totals = torch.where(totals > 0, totals, torch.ones_like(totals))
    uniform = torch.full_like(scores, 1.0 / scores.shape[-1])
    return torch.where(totals > 0, scores / safe_totals, uniform)


register(Exercise(
    label="ch01_ex2", title="From non-negative scores to weights",
    name="normalize_weights", reference=normalize_weights, points=2,
    checks=[
        Check("3 queries by 5 keys", _scores_calls, seed=0,
              hint="each row (one query) must be divided by its own total so that it sums to one."),
        Check("a (2, 3, 4) batch is normalised along the last axis", _scores_batched_calls, seed=1,
              hint="normalise along the last axis (the keys) whatever the number of leading dimensions."),
        Check("an all-zero row becomes uniform weights", _scores_zero_row_calls, seed=2,
              hint="a row whose scores are all zero has no preferred key: give it weight "
                   "1/num_keys everywhere."),
        Check("negative scores raise ValueError naming scores", _scores_bad_calls, seed=3,
              must_mention=["scores"],
              hint="scan the scores for negative entries first and raise a ValueError "
                   "whose message names scores."),
        Check("larger batches with zero rows and a single key (hidden)", _scores_big_calls,
              seed=4, public=False,
              hint="handle any number of leading dimensions, zero rows and num_keys == 1."),
    ],
    mistakes=[
        Mistake("normalised over the queries axis",
                "the totals were taken over the queries axis; each query's weights over the "
                "keys (the last axis) must sum to one.",
                _normalize_over_queries),
        Mistake("softmax instead of dividing",
                "a softmax exponentiates the scores first, which changes their ratios; here the "
                "scores are already non-negative and only need dividing by their total.",
                _normalize_softmax),
        Mistake("zero rows give NaN",
                "an all-zero row divides 0 by 0 and gives NaN; the contract asks for uniform "
                "weights in that row.",
                _normalize_nan_rows),
        Mistake("zero rows stay zero",
                "guarding the division keeps an all-zero row at zero, so it does not sum to one; "
                "the contract asks for uniform weights in that row.",
                _normalize_zero_rows),
        Mistake("no check for negative scores",
                "negative scores must be rejected with a ValueError that names scores.",
                _normalize_unchecked),
    ],
))


# ---------------------------------------------------------------- ch01_ex3: hard_lookup

def _validate_lookup(queries, keys, values):
    if queries.dim() != 2 or keys.dim() != 2 or values.dim() != 2:
        raise ValueError(
            f"queries {_shape(queries)}, keys {_shape(keys)} and values {_shape(values)} "
            f"must all be 2-D")
    if queries.shape[1] != keys.shape[1]:
        raise ValueError(
            f"queries {_shape(queries)} and keys {_shape(keys)} must have the same size d "
            f"in their last dimension")
    if keys.shape[0] != values.shape[0]:
        raise ValueError(
            f"keys {_shape(keys)} and values {_shape(values)} must have the same number of rows")


def _squared_distances(queries, keys):
    return ((queries[:, None, :] - keys[None, :, :]) ** 2).sum(dim=-1)


def hard_lookup(queries, keys, values):
    """Reference: the value of the nearest key (first one on ties)."""
    _validate_lookup(queries, keys, values)
    return values[torch.argmin(_squared_distances(queries, keys), dim=1)]


def _lookup_triple(g, num_queries, num_keys, d, d_v):
    keys = torch.randn(num_keys, d, generator=g) * 2
    values = torch.randn(num_keys, d_v, generator=g) * 3
    queries = torch.randn(num_queries, d, generator=g) * 2
    return queries, keys, values


def _lookup_calls(seed):
    g = torch.Generator().manual_seed(seed)
    queries, keys, values = _lookup_triple(g, 4, 6, 3, 2)
    # float64 values too: the result has the dtype of values
    return [Call(args=(queries, keys, values)), Call(args=(queries, keys, values.double()))]


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
        return ["queries", "keys", str(_shape(queries)), str(_shape(keys))]
    return ["keys", "values", str(_shape(keys)), str(_shape(values))]


def _lookup_big_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=_lookup_triple(g, 12, 20, 5, 4)), Call(args=_lookup_triple(g, 3, 1, 2, 2))]


def _lookup_farthest(queries, keys, values):
    _validate_lookup(queries, keys, values)
    return values[torch.argmax(_squared_distances(queries, keys), dim=1)]


def _lookup_dot_product(queries, keys, values):
    _validate_lookup(queries, keys, values)
    return values[torch.argmax(queries @ keys.T, dim=1)]


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


def _lookup_returns_keys(queries, keys, values):
    _validate_lookup(queries, keys, values)
    return keys[torch.argmin(_squared_distances(queries, keys), dim=1)].clone()


register(Exercise(
    label="ch01_ex3", title="Hard lookup: the value of the nearest key",
    name="hard_lookup", reference=hard_lookup, points=2,
    checks=[
        Check("4 queries, 6 keys of size 3, values of size 2", _lookup_calls, seed=0,
              hint="for each query, find the key at the smallest squared Euclidean distance "
                   "and return that key's row of values."),
        Check("a query equal to a key returns that key's value", _lookup_exact_calls, seed=1,
              hint="a key identical to the query is at distance 0, so it must be the one chosen."),
        Check("a tie between two keys picks the first of them", _lookup_tie_calls, seed=2,
              hint="when two keys are equally near, return the value of the one with the "
                   "smaller index."),
        Check("mismatched shapes raise ValueError naming the arguments and shapes",
              _lookup_bad_calls, seed=3, must_mention=_lookup_mentions,
              hint="compare queries.shape[1] with keys.shape[1] and keys.shape[0] with "
                   "values.shape[0] first; name the two arguments and their shapes as tuples."),
        Check("20 keys of size 5, and a single key (hidden)", _lookup_big_calls, seed=4,
              public=False, hint="the result has shape (num_queries, d_v) for every size."),
    ],
    mistakes=[
        Mistake("picked the farthest key",
                "the chosen key is the farthest one: the most similar key is at the smallest distance.",
                _lookup_farthest),
        Mistake("dot-product similarity",
                "the key was chosen by the largest dot product with the query, which favours long "
                "keys; the contract measures similarity by squared distance.",
                _lookup_dot_product),
        Mistake("last key on ties",
                "on a tie the later key won (a <= comparison keeps replacing the best); the first "
                "of the equally near keys must win.",
                _lookup_last_on_ties),
        Mistake("returned the key",
                "the nearest key itself was returned; a lookup returns the value stored under that key.",
                _lookup_returns_keys),
    ],
))


# ---------------------------------------------------------------- ch01_ex4: distance_weights

def _validate_distance(queries, keys, temperature):
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature must be a positive number, got {temperature!r}")
    if queries.dim() != 2 or keys.dim() != 2 or queries.shape[1] != keys.shape[1]:
        raise ValueError(
            f"queries {_shape(queries)} and keys {_shape(keys)} must be 2-D with the same "
            f"size d in their last dimension")


def distance_weights(queries, keys, temperature=1.0):
    """Reference: softmax over the keys of -squared distance / temperature."""
    _validate_distance(queries, keys, temperature)
    return torch.softmax(-_squared_distances(queries, keys) / temperature, dim=-1)


def _distance_pair(g, num_queries, num_keys, d, scale=1.0):
    return (torch.randn(num_queries, d, generator=g) * scale,
            torch.randn(num_keys, d, generator=g) * scale)


def _distance_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=_distance_pair(g, 3, 5, 2))]


def _distance_temperature_calls(seed):
    g = torch.Generator().manual_seed(seed)
    queries, keys = _distance_pair(g, 4, 6, 3)
    return [Call(args=(queries, keys), kwargs={"temperature": 0.5}),
            Call(args=(queries.double(), keys.double()), kwargs={"temperature": 4.0})]


def _distance_far_calls(seed):
    g = torch.Generator().manual_seed(seed)
    keys = torch.randn(5, 2, generator=g)
    queries = torch.randn(3, 2, generator=g) + 100.0  # squared distances near 2e4
    return [Call(args=(queries, keys))]


def _distance_bad_calls(seed):
    g = torch.Generator().manual_seed(seed)
    queries, keys = _distance_pair(g, 2, 3, 2)
    return [
        Call(args=(queries, keys)),  # valid first: raising on everything must not pass
        Call(args=(queries, keys), kwargs={"temperature": 0.0}),
        Call(args=(queries, keys), kwargs={"temperature": -2.0}),
        Call(args=(torch.randn(2, 3, generator=g), keys)),
    ]


def _distance_mentions(call):
    if "temperature" in call.kwargs:
        return ["temperature"]
    queries, keys = call.args
    return ["queries", "keys", str(_shape(queries)), str(_shape(keys))]


def _distance_big_calls(seed):
    g = torch.Generator().manual_seed(seed)
    queries, keys = _distance_pair(g, 9, 13, 6, scale=2.0)
    return [Call(args=(queries, keys), kwargs={"temperature": 3.0}),
            Call(args=_distance_pair(g, 2, 1, 2))]


def _distance_over_queries(queries, keys, temperature=1.0):
    _validate_distance(queries, keys, temperature)
    return torch.softmax(-_squared_distances(queries, keys) / temperature, dim=0)


def _distance_not_squared(queries, keys, temperature=1.0):
    _validate_distance(queries, keys, temperature)
    return torch.softmax(-_squared_distances(queries, keys).sqrt() / temperature, dim=-1)


def _distance_times_temperature(queries, keys, temperature=1.0):
    _validate_distance(queries, keys, temperature)
    return torch.softmax(-_squared_distances(queries, keys) * temperature, dim=-1)


def _distance_no_minus(queries, keys, temperature=1.0):
    _validate_distance(queries, keys, temperature)
    return torch.softmax(_squared_distances(queries, keys) / temperature, dim=-1)


def _distance_naive_exp(queries, keys, temperature=1.0):
    _validate_distance(queries, keys, temperature)
    similarity = torch.exp(-_squared_distances(queries, keys) / temperature)
    return similarity / similarity.sum(dim=-1, keepdim=True)


register(Exercise(
    label="ch01_ex4", title="A weight matrix from distances",
    name="distance_weights", reference=distance_weights, points=2,
    checks=[
        Check("3 queries, 5 keys in 2-D, temperature 1", _distance_calls, seed=0,
              hint="score each (query, key) pair by minus its squared distance divided by the "
                   "temperature, then softmax along the keys so each row sums to one."),
        Check("temperatures 0.5 and 4", _distance_temperature_calls, seed=1,
              hint="the scores are divided by the temperature: a small temperature sharpens "
                   "the weights, a large one flattens them."),
        # Scores near -2e4 carry float32 rounding of about 1e-3 (relative) in the weights,
        # whatever stable formula computes them: compare at that precision.
        Check("queries far from every key still give finite weights", _distance_far_calls,
              seed=2, rtol=5e-3, atol=1e-6,
              hint="with squared distances in the thousands, exp underflows to 0; use an "
                   "operation that stays finite for large scores."),
        Check("bad temperature or mismatched sizes raise ValueError naming the culprit",
              _distance_bad_calls, seed=3, must_mention=_distance_mentions,
              hint="reject a temperature that is not > 0 (name temperature) and queries and "
                   "keys whose last sizes differ (name both and their shapes as tuples)."),
        Check("9 queries, 13 keys of size 6, temperature 3, and a single key (hidden)",
              _distance_big_calls, seed=4, public=False,
              hint="the result has shape (num_queries, num_keys) for every size."),
    ],
    mistakes=[
        Mistake("softmax over the queries axis",
                "the softmax ran over the queries axis; each query's weights over the keys "
                "must sum to one.",
                _distance_over_queries),
        Mistake("distance not squared",
                "the score used the plain Euclidean distance; the contract uses the squared distance.",
                _distance_not_squared),
        Mistake("multiplied by the temperature",
                "the scores were multiplied by the temperature instead of divided by it.",
                _distance_times_temperature),
        Mistake("forgot the minus sign",
                "far keys got the largest weights: the score is minus the squared distance, so "
                "nearer keys score higher.",
                _distance_no_minus),
        Mistake("exp then divide (underflow)",
                "exponentiating large negative scores underflows to 0 and 0/0 gives NaN; "
                "shift the scores (or use a built-in that does) before exponentiating.",
                _distance_naive_exp),
    ],
))


# ======================================================================= kept alternatives
# Correct answers in other styles: the checks must accept every one of them.

from ..registry import REGISTRY, Alternative  # noqa: E402


def _alt_pool_checks(weights, values):
    if weights.dim() != values.dim() or weights.dim() not in (2, 3):
        raise ValueError(f"weights has shape {weights.shape} and values {values.shape}: "
                         f"expected both 2-D or both 3-D")
    if weights.shape[:-2] != values.shape[:-2] or weights.shape[-1] != values.shape[-2]:
        raise ValueError(f"cannot pool: weights {weights.shape} vs values {values.shape}")


def _pool_einsum(weights, values):
    _alt_pool_checks(weights, values)  # messages print torch.Size([...])
    return torch.einsum("...qk,...kd->...qd", weights, values)


def _pool_loop_over_keys(weights, values):
    _alt_pool_checks(weights, values)
    out = torch.zeros(*weights.shape[:-1], values.shape[-1], dtype=values.dtype)
    for k in range(weights.shape[-1]):
        out = out + weights[..., :, k:k + 1] * values[..., k:k + 1, :]
    return out


def _pool_float64_bmm(weights, values):
    if not (weights.dim() == values.dim() and weights.dim() in (2, 3)
            and weights.shape[:-2] == values.shape[:-2] and weights.shape[-1] == values.shape[-2]):
        raise ValueError(f"weights {list(weights.shape)} and values {list(values.shape)} do not fit")
    w, v = weights.double(), values.double()
    if w.dim() == 2:
        w, v = w[None], v[None]
    return torch.bmm(w, v).reshape(*weights.shape[:-1], values.shape[-1]).to(values.dtype)


def _alt_scores_check(scores):
    if (scores < 0).any():
        raise ValueError("scores: every entry must be >= 0")


def _normalize_nan_to_num(scores):
    _alt_scores_check(scores)
    n = scores.shape[-1]
    totals = scores.sum(-1, keepdim=True)
    out = scores / totals                               # NaN on all-zero slices...
    return torch.where(totals == 0, torch.full_like(scores, 1.0 / n), out)  # ...replaced


def _normalize_rows_loop(scores):
    _alt_scores_check(scores)
    flat = scores.reshape(-1, scores.shape[-1])
    rows = []
    for row in flat:
        total = row.sum()
        rows.append(row / total if total > 0 else torch.ones_like(row) / row.numel())
    return torch.stack(rows).reshape(scores.shape)


def _normalize_float64(scores):
    if scores.min() < 0:
        raise ValueError(f"normalize_weights: scores must be non-negative, min is {scores.min().item()}")
    s64 = scores.double() + (scores.sum(-1, keepdim=True) == 0).double()  # zero rows -> all ones
    return (s64 / s64.sum(-1, keepdim=True)).to(scores.dtype)


def _alt_lookup_checks(queries, keys, values):
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(f"queries {queries.shape} and keys {keys.shape} disagree on d")
    if keys.shape[0] != values.shape[0]:
        raise ValueError(f"keys {keys.shape} and values {values.shape} disagree on num_keys")


def _lookup_cdist_onehot(queries, keys, values):
    _alt_lookup_checks(queries, keys, values)
    distances = torch.cdist(queries, keys, compute_mode="donot_use_mm_for_euclid_dist")
    nearest = distances.argmin(dim=-1)  # the first index among equal minima
    return torch.nn.functional.one_hot(nearest, keys.shape[0]).to(values.dtype) @ values


def _lookup_python_loops(queries, keys, values):
    _alt_lookup_checks(queries, keys, values)
    rows = []
    for q in queries:
        best, best_d = 0, None
        for i, k in enumerate(keys):
            d = float(((q - k) ** 2).sum())
            if best_d is None or d < best_d:  # strict: a later tie never wins
                best, best_d = i, d
        rows.append(values[best])
    return torch.stack(rows)


def _lookup_gather(queries, keys, values):
    _alt_lookup_checks(queries, keys, values)
    diffs = queries.unsqueeze(1) - keys.unsqueeze(0)
    idx = torch.einsum("qkd,qkd->qk", diffs, diffs).min(dim=1).indices
    return torch.index_select(values, 0, idx)


def _alt_distance_checks(queries, keys, temperature):
    if temperature <= 0:
        raise ValueError(f"temperature={temperature} must be > 0")
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(f"queries {queries.shape} and keys {keys.shape}: different d")


def _distance_log_softmax(queries, keys, temperature=1.0):
    _alt_distance_checks(queries, keys, temperature)
    squared = torch.cdist(queries, keys, compute_mode="donot_use_mm_for_euclid_dist") ** 2
    return torch.log_softmax(-squared / temperature, dim=-1).exp()


def _distance_manual_float64(queries, keys, temperature=1.0):
    _alt_distance_checks(queries, keys, temperature)
    q, k = queries.double(), keys.double()
    scores = -((q[:, None] - k[None]) ** 2).sum(-1) / temperature
    scores = scores - scores.max(dim=-1, keepdim=True).values   # the largest becomes exp(0) = 1
    weights = scores.exp()
    return (weights / weights.sum(-1, keepdim=True)).to(queries.dtype)


def _distance_expanded_square(queries, keys, temperature=1.0):
    _alt_distance_checks(queries, keys, temperature)
    # |q - k|^2 = |q|^2 - 2 q.k + |k|^2; the |q|^2 term is the same for every key of a row
    # and cancels in the softmax, so it is left out (it would only lose precision).
    scores = (2 * queries @ keys.T - (keys ** 2).sum(-1)) / temperature
    return torch.softmax(scores, dim=-1)


REGISTRY["ch01_ex1"].alternatives += [
    Alternative("einsum", "einsum over any batch dims; shapes printed as torch.Size", _pool_einsum),
    Alternative("loop over keys", "accumulates one key at a time", _pool_loop_over_keys),
    Alternative("float64 bmm", "float64 inside, batch of one for 2-D; shapes printed as lists", _pool_float64_bmm),
]
REGISTRY["ch01_ex2"].alternatives += [
    Alternative("nan then where", "divides first, replaces all-zero slices after", _normalize_nan_to_num),
    Alternative("row loop", "a Python loop over the flattened rows", _normalize_rows_loop),
    Alternative("float64 shift", "float64 inside; zero rows become all-ones before dividing", _normalize_float64),
]
REGISTRY["ch01_ex3"].alternatives += [
    Alternative("cdist + one_hot", "exact cdist, argmin, one-hot matrix product", _lookup_cdist_onehot),
    Alternative("python loops", "explicit loops over queries and keys", _lookup_python_loops),
    Alternative("einsum + index_select", "einsum distances, min().indices", _lookup_gather),
]
REGISTRY["ch01_ex4"].alternatives += [
    Alternative("cdist + log_softmax", "cdist squared, log_softmax then exp", _distance_log_softmax),
    Alternative("manual float64", "max-shifted exponentials in float64, cast back", _distance_manual_float64),
    Alternative("expanded square", "2 q.k - |k|^2 (|q|^2 cancels in the softmax)", _distance_expanded_square),
]
