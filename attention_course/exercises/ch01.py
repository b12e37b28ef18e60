"""Chapter 1 exercises: queries, keys and values.

* ``ch01_ex1`` ``attention_pool(weights, values)`` -- weighted sum of value rows, optionally batched.
* ``ch01_ex2`` ``normalize_weights(scores)`` -- non-negative scores to weights summing to one
  along the keys axis; an all-zero row becomes uniform weights.
* ``ch01_ex3`` ``hard_lookup(queries, keys, values)`` -- the value of the nearest key (ties: first key).
* ``ch01_ex4`` ``cued_weights(queries, keys, salience, temperature)`` -- a volitional cue (minus
  the squared distance over the temperature) and a nonvolitional one (a salience per key)
  combined into one weight matrix: weights proportional to ``salience * exp(score)``,
  numerically stable. The chapter shows the two cues only separately.

Every check draws its inputs from a local generator seeded by the check's seed. Error
checks start with one valid call, so that an implementation that raises for every input
cannot pass them; they carry a small weight (error messages are at most a fifth of the
chapter's points). Each exercise keeps wrong implementations (``mistakes``) that must fail
with their own hint, and correct ones in other styles (``alternatives``) that must pass
every check; ``tests/test_exercises.py`` proves both. Check hints stay neutral: they say
what the check exercises, never which mistake was made (that is the mistakes' job).
"""
from __future__ import annotations

import math

import torch

from ..registry import Alternative, Call, Check, Exercise, Mistake, register

_ERROR_WEIGHT = 0.5  # an error-message check weighs half a value check


def _shape(t) -> tuple:
    return tuple(t.shape)


def _finite_then_close(rtol, atol):
    """A compare for checks that promise finite results: first every returned tensor must be
    finite (named as such when it is not), then the values must agree with the reference."""
    from ..checking import compare_all

    def _tensors(value):
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, dict):
            for item in value.get("__seq__", value.get("__list__", [])):
                yield from _tensors(item)

    def compare(got, want, calls):
        for i, (g, w) in enumerate(zip(got, want)):
            if g.get("status") != "ok" or w.get("status") != "ok":
                continue
            for gt, wt in zip(_tensors(g["value"]), _tensors(w["value"])):
                if gt.is_floating_point() and wt.is_floating_point() and gt.shape == wt.shape \
                        and bool((~torch.isfinite(gt) & torch.isfinite(wt)).any()):
                    where = "the result" if len(got) == 1 else f"call {i + 1} of {len(got)}: the result"
                    return f"{where} has NaN or inf entries (it must stay finite)"
        return compare_all(got, want, Check("", lambda s: [], "", rtol=rtol, atol=atol), calls)
    return compare


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


def _pool_pair(g, batch, num_queries, num_keys, d_v, dtype=torch.float32):
    lead = () if batch is None else (batch,)
    weights = torch.softmax(torch.randn(*lead, num_queries, num_keys, generator=g) * 2, dim=-1)
    values = torch.randn(*lead, num_keys, d_v, generator=g) * 3 + 1
    return weights.to(dtype), values.to(dtype)


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
    return [Call(args=(weights, values))]


def _pool_float64_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=_pool_pair(g, None, 3, 4, 2, torch.float64)),
            Call(args=_pool_pair(g, 2, 2, 3, 3, torch.float64))]


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
    return [Call(args=_pool_pair(g, 4, 7, 9, 5)), Call(args=_pool_pair(g, None, 1, 1, 3)),
            Call(args=_pool_pair(g, 3, 2, 4, 2, torch.float64))]


def _mentions_both_shapes(call):
    if len(call.args) < 2:
        return ["weights", "values"]
    return ["weights", "values", _shape(call.args[0]), _shape(call.args[1])]


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


def _pool_float32(weights, values):
    _validate_pool(weights, values)
    return torch.matmul(weights.float(), values.float())


def _pool_unchecked(weights, values):
    return torch.matmul(weights, values)


# Kept alternatives: correct answers in other styles, with their own error messages.

def _pool_alt_einsum(weights, values):
    if weights.dim() not in (2, 3) or values.dim() != weights.dim() \
            or weights.shape[:-2] != values.shape[:-2] or weights.shape[-1] != values.shape[-2]:
        # torch.Size printed as it is: the checks accept any usual form of a shape.
        raise ValueError(f"cannot pool: weights has shape {weights.shape}, values has shape {values.shape}")
    return torch.einsum("...qk,...kd->...qd", weights, values)


def _pool_alt_loops(weights, values):
    if weights.dim() != values.dim() or weights.dim() not in (2, 3):
        raise ValueError(f"weights {list(weights.shape)} and values {list(values.shape)}: "
                         "need the same number of dimensions, 2 or 3")
    if weights.shape[-1] != values.shape[-2] or weights.shape[:-2] != values.shape[:-2]:
        raise ValueError(f"weights {list(weights.shape)} does not match values {list(values.shape)}")
    batched = weights.dim() == 3
    w = weights if batched else weights.unsqueeze(0)
    v = values if batched else values.unsqueeze(0)
    out = torch.zeros(w.shape[0], w.shape[1], v.shape[2], dtype=weights.dtype)
    for b in range(w.shape[0]):
        for q in range(w.shape[1]):
            for k in range(w.shape[2]):
                out[b, q] += w[b, q, k] * v[b, k]
    return out if batched else out[0]


def _pool_alt_float64(weights, values):
    ws, vs = "x".join(map(str, weights.shape)), "x".join(map(str, values.shape))
    if weights.dim() not in (2, 3) or values.dim() != weights.dim():
        raise ValueError(f"weights ({ws}) and values ({vs}) must be both 2-D or both 3-D")
    if weights.shape[:-2] != values.shape[:-2] or weights.shape[-1] != values.shape[-2]:
        raise ValueError(f"weights ({ws}) and values ({vs}) do not fit together")
    return (weights.double() @ values.double()).to(weights.dtype)


def _pool_alt_d2l_bmm(weights, values):
    # d2l pools with torch.bmm on (batch, queries, keys) x (batch, keys, d_v).
    if weights.dim() != values.dim() or weights.dim() not in (2, 3) \
            or weights.shape[0:-2] != values.shape[0:-2] or weights.size(-1) != values.size(-2):
        raise ValueError("shape mismatch between weights %s and values %s"
                         % (tuple(weights.shape), tuple(values.shape)))
    if weights.dim() == 2:
        return torch.bmm(weights.unsqueeze(0), values.unsqueeze(0)).squeeze(0)
    return torch.bmm(weights, values)


register(Exercise(
    label="ch01_ex1", title="Attention pooling as a weighted average",
    name="attention_pool", reference=attention_pool, points=2,
    checks=[
        Check("3 queries pool 5 values of size 4", _pool_calls, seed=0,
              hint="row q of the result is sum over k of weights[q, k] * values[k]: compare one "
                   "row of yours with that sum written out by hand."),
        Check("a batch of 2, each with 3 queries over 6 keys", _pool_batched_calls, seed=1,
              hint="with a leading batch dimension, each batch element pools its own values "
                   "with its own weights; the result has shape (batch, num_queries, d_v)."),
        Check("weights that do not sum to one are used as given", _pool_unnormalized_calls, seed=2,
              hint="this check's weight rows do not sum to one; the contract's formula applies "
                   "to them unchanged."),
        Check("float64 inputs give a float64 result", _pool_float64_calls, seed=5,
              hint="the result has the dtype of the inputs; look at every place where a new "
                   "tensor is created or converted."),
        Check("mismatched shapes raise ValueError naming both arguments and shapes",
              _pool_bad_calls, seed=3, must_mention=_mentions_both_shapes, weight=_ERROR_WEIGHT,
              hint="the calls after the first have shapes that do not fit (number of dimensions, "
                   "number of keys, batch size); the ValueError must name weights, values and "
                   "both shapes."),
        Check("a larger batch, a single key and float64 (hidden)", _pool_big_calls, seed=4,
              public=False,
              hint="the result must have shape (..., num_queries, d_v) and the inputs' dtype for "
                   "every size."),
    ],
    mistakes=[
        Mistake("ignored the weights",
                "every query got the same plain mean of the values: the weights were not used.",
                _pool_ignores_weights),
        Mistake("divided by num_keys",
                "the result was divided by the number of keys; the weighted sum needs no further "
                "division.",
                _pool_divided_by_num_keys),
        Mistake("renormalized the weights",
                "the weights were rescaled to sum to one; the contract uses them as given.",
                _pool_renormalized),
        Mistake("converted to float32",
                "float64 inputs came back as float32: the inputs were converted (e.g. with "
                ".float()); keep their dtype.",
                _pool_float32),
        Mistake("no shape check",
                "bad shapes must be caught by your own check and reported as a ValueError "
                "naming weights, values and their shapes, before any matrix product.",
                _pool_unchecked),
    ],
    alternatives=[
        Alternative("einsum", "one einsum over an optional batch axis; shapes printed as torch.Size",
                    _pool_alt_einsum),
        Alternative("python loops", "explicit loops over batch, queries and keys; shapes printed as lists",
                    _pool_alt_loops),
        Alternative("float64 inside", "matrix product in float64, cast back; shapes printed as 3x5",
                    _pool_alt_float64),
        Alternative("d2l's bmm", "torch.bmm as d2l pools, with a batch axis added for 2-D inputs",
                    _pool_alt_d2l_bmm),
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
    return [Call(args=(torch.rand(2, 3, 4, generator=g) * 2,))]


def _scores_zero_row_calls(seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(4, 6, generator=g) + 0.1
    scores[1] = 0.0
    return [Call(args=(scores,))]


def _scores_float64_calls(seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(3, 4, generator=g, dtype=torch.float64) * 3
    scores[2] = 0.0
    return [Call(args=(scores,)), Call(args=(torch.rand(5, generator=g, dtype=torch.float64),))]


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
    tiny = torch.rand(2, 6, generator=g, dtype=torch.float64) * 1e-30  # small but not zero
    return [Call(args=(scores,)), Call(args=(one_key,)), Call(args=(tiny,))]


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


def _normalize_alt_loops(scores):
    if (scores < 0).any():
        raise ValueError(f"negative entry in scores (shape {scores.shape})")
    flat = scores.reshape(-1, scores.shape[-1])
    out = torch.empty_like(flat)
    for r in range(flat.shape[0]):
        total = flat[r].sum()
        out[r] = flat[r] / total if total > 0 else 1.0 / flat.shape[1]
    return out.reshape(scores.shape)


def _normalize_alt_nan_to_num(scores):
    if scores.min() < 0:
        raise ValueError("scores contain a negative value")
    weights = scores / scores.sum(-1, keepdim=True)  # 0/0 = NaN exactly in the all-zero rows
    return torch.nan_to_num(weights, nan=1.0 / scores.shape[-1])


def _normalize_alt_ones_in_empty_rows(scores):
    if torch.any(scores < 0):
        raise ValueError("normalize_weights: scores must not be negative")
    empty = (scores == 0).all(dim=-1, keepdim=True)
    filled = torch.where(empty, torch.ones_like(scores), scores)  # an empty row counts every key once
    return filled / filled.sum(dim=-1, keepdim=True)


def _normalize_alt_float64(scores):
    if bool((scores < 0).any()):
        raise ValueError("all scores must be >= 0")
    s = scores.double()
    n = s.shape[-1]
    totals = s.sum(-1, keepdim=True)
    out = torch.where(totals > 0, s / totals.clamp_min(1e-300), torch.full_like(s, 1 / n))
    return out.to(scores.dtype)


register(Exercise(
    label="ch01_ex2", title="From non-negative scores to weights",
    name="normalize_weights", reference=normalize_weights, points=2,
    checks=[
        Check("3 queries by 5 keys", _scores_calls, seed=0,
              hint="each row (one query) is divided by its own total, so that it sums to one; "
                   "compare your row sums and ratios with that."),
        Check("a (2, 3, 4) batch is normalised along the last axis", _scores_batched_calls, seed=1,
              hint="with leading dimensions, every slice along the last axis (the keys) is "
                   "normalised on its own."),
        Check("an all-zero row becomes uniform weights", _scores_zero_row_calls, seed=2,
              hint="row 1 of this check is all zeros; the contract gives such a row 1/num_keys "
                   "in every entry."),
        Check("float64 scores, a zero row and a 1-D row keep float64", _scores_float64_calls, seed=5,
              hint="the result has the dtype and shape of scores, including for a single 1-D row."),
        Check("negative scores raise ValueError naming scores", _scores_bad_calls, seed=3,
              must_mention=["scores"], weight=_ERROR_WEIGHT,
              hint="the second call holds a negative entry; it must raise a ValueError whose "
                   "message names scores."),
        Check("larger batches with zero rows, a single key and tiny scores (hidden)",
              _scores_big_calls, seed=4, public=False,
              hint="any number of leading dimensions, zero rows, num_keys == 1 and very small "
                   "(but non-zero) scores."),
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
    alternatives=[
        Alternative("row loop", "a Python loop over the rows of a 2-D view", _normalize_alt_loops),
        Alternative("NaN replaced", "divide, then nan_to_num turns the 0/0 rows into 1/num_keys",
                    _normalize_alt_nan_to_num),
        Alternative("ones in empty rows", "an all-zero row is replaced by ones before dividing",
                    _normalize_alt_ones_in_empty_rows),
        Alternative("float64 inside", "computed in float64 and cast back", _normalize_alt_float64),
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
        return ["queries", "keys", _shape(queries), _shape(keys)]
    return ["keys", "values", _shape(keys), _shape(values)]


def _lookup_big_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=_lookup_triple(g, 12, 20, 5, 4)), Call(args=_lookup_triple(g, 3, 1, 2, 2)),
            Call(args=_lookup_triple(g, 6, 7, 3, 2, torch.float64))]


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


def _lookup_alt_cdist_onehot(queries, keys, values):
    if queries.size(-1) != keys.size(-1):
        raise ValueError(f"d of queries {list(queries.shape)} != d of keys {list(keys.shape)}")
    if keys.size(0) != values.size(0):
        raise ValueError(f"rows of keys {list(keys.shape)} != rows of values {list(values.shape)}")
    nearest = torch.cdist(queries, keys).argmin(dim=-1)
    # the chapter's one-hot weight matrix, now built from the nearest key
    one_hot = torch.nn.functional.one_hot(nearest, keys.shape[0]).to(values.dtype)
    return one_hot @ values


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


register(Exercise(
    label="ch01_ex3", title="Hard lookup: the value of the nearest key",
    name="hard_lookup", reference=hard_lookup, points=2,
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
              _lookup_bad_calls, seed=3, must_mention=_lookup_mentions, weight=_ERROR_WEIGHT,
              hint="the second call has queries and keys of different d, the third keys and "
                   "values of different lengths; each ValueError names the two arguments and "
                   "their shapes."),
        Check("20 keys of size 5, a single key and float64 (hidden)", _lookup_big_calls, seed=4,
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
    alternatives=[
        Alternative("python loops", "loops over queries and keys with a strict < (first key wins)",
                    _lookup_alt_loops),
        Alternative("cdist and one-hot", "torch.cdist, argmin, then the chapter's one-hot matrix times values",
                    _lookup_alt_cdist_onehot),
        Alternative("expanded square, float64", "|q|^2 - 2 q.k + |k|^2 in float64, torch.min, index_select",
                    _lookup_alt_min_float64),
    ],
))


# ---------------------------------------------------------------- ch01_ex4: cued_weights

def _validate_cued(queries, keys, salience, temperature):
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature must be a positive number, got {temperature!r}")
    if queries.dim() != 2 or keys.dim() != 2 or queries.shape[1] != keys.shape[1]:
        raise ValueError(
            f"queries {_shape(queries)} and keys {_shape(keys)} must be 2-D with the same "
            f"size d in their last dimension")
    if salience.shape != (keys.shape[0],):
        raise ValueError(f"salience must have shape ({keys.shape[0]},), one entry per key, "
                         f"got {_shape(salience)}")
    if bool((salience < 0).any()) or not bool((salience > 0).any()):
        raise ValueError(f"salience must be non-negative with at least one positive entry, "
                         f"got {salience.tolist()}")


def cued_weights(queries, keys, salience, temperature=1.0):
    """Reference: softmax over the keys of log(salience) - |q - k|^2 / temperature."""
    _validate_cued(queries, keys, salience, temperature)
    scores = -_squared_distances(queries, keys) / temperature + torch.log(salience)
    return torch.softmax(scores, dim=-1)  # log(0) = -inf: a key of salience 0 gets weight 0


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
    # And the nearest key switched off (salience 0) with every other key some 400 squared
    # units further: shifting by the largest distance score over ALL keys (the switched-off
    # one included) underflows every key that can get weight, 0/0 (found by an
    # independent solver: such answers passed every check before).
    gap = 20.0 + 2.0 * torch.rand((), generator=g).item()
    near_off = (torch.zeros(1, 2), torch.tensor([[0.5, 0.0], [gap, 0.0], [0.0, -gap - 1.0]]),
                torch.tensor([0.0, 1.0, 2.0]))
    return [Call(args=(queries + 100.0, keys, salience)),  # squared distances near 2e4
            Call(args=near_off)]


def _cued_far_only_calls(seed):
    return _cued_far_calls(seed)[:1]


def _cued_off_calls(seed):
    return _cued_far_calls(seed)[1:]


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


def _cued_big_calls(seed):
    g = torch.Generator().manual_seed(seed)
    big = _cued_inputs(g, 9, 13, 6, scale=2.0, zeros=4)
    far_queries, far_keys, far_salience = _cued_inputs(g, 4, 6, 3)
    return [Call(args=big, kwargs={"temperature": 3.0}),
            Call(args=_cued_inputs(g, 2, 1, 2)),
            Call(args=(far_queries - 80.0, far_keys, far_salience), kwargs={"temperature": 0.7})]


def _cued_mistake(transform, validate=True):
    def impl(queries, keys, salience, temperature=1.0):
        if validate:
            _validate_cued(queries, keys, salience, temperature)
        return transform(_squared_distances(queries, keys), salience, temperature)
    return impl


def _cued_naive(sq, salience, temperature):
    weighted = salience * torch.exp(-sq / temperature)
    return weighted / weighted.sum(dim=-1, keepdim=True)


def _cued_alt_after_softmax(queries, keys, salience, temperature=1.0):
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


def _cued_alt_float64_shift(queries, keys, salience, temperature=1.0):
    if temperature <= 0:
        raise ValueError(f"temperature={temperature} is not positive")
    if salience.min() < 0 or salience.max() <= 0:
        raise ValueError(f"salience={salience} must be >= 0 and not all zero")
    q, k, s = queries.double(), keys.double(), salience.double()
    logits = -torch.cdist(q, k) ** 2 / temperature + s.log()
    logits = logits - logits.max(dim=-1, keepdim=True).values
    weights = logits.exp()
    return (weights / weights.sum(dim=-1, keepdim=True)).to(queries.dtype)


def _cued_alt_loops(queries, keys, salience, temperature=1.0):
    if temperature <= 0:
        raise ValueError("temperature must be positive")
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


def _cued_alt_log_softmax(queries, keys, salience, temperature=1.0):
    if not (temperature > 0):
        raise ValueError("temperature <= 0")
    if torch.any(salience < 0) or torch.all(salience == 0):
        raise ValueError("salience: negative entry, or every entry is zero")
    sq = torch.einsum("qkd,qkd->qk", queries[:, None] - keys, queries[:, None] - keys)
    bias = torch.where(salience > 0, salience.log(), torch.full_like(salience, -math.inf))
    return torch.log_softmax(bias - sq / temperature, dim=-1).exp()


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
              hint="two keys of this check have salience 0; look at their columns and at the "
                   "row sums."),
        Check("the nearest key switched off and every other key far: finite weights (hidden)",
              _cued_off_calls, seed=6, public=False, weight=0.5, compare=_finite_then_close(1e-4, 1e-5),
              hint="the key nearest to the query has salience 0 and the others are some 400 squared "
                   "units further; every number you divide by must stay above 0."),
        Check("queries far from every key still give finite weights", _cued_far_only_calls, seed=3,
              compare=_finite_then_close(1e-4, 1e-5),
              hint="the queries are about 140 units from every key, so the squared distances are "
                   "near 2e4; look at what exp does with such numbers in float32."),
        Check("float64 inputs give float64 weights", _cued_float64_calls, seed=5,
              hint="the result has the dtype of queries; look at every tensor you create."),
        Check("bad temperature or salience raise ValueError naming the culprit",
              _cued_bad_calls, seed=4, must_mention=_cued_mentions, weight=_ERROR_WEIGHT,
              hint="calls 2 to 5 pass a temperature <= 0, a negative salience and an all-zero "
                   "salience; each ValueError names the argument at fault."),
        Check("9 queries, 13 keys of size 6 with zero saliences, a single key, far queries (hidden)",
              _cued_big_calls, seed=6, public=False, compare=_finite_then_close(1e-4, 1e-5),
              hint="the result has shape (num_queries, num_keys), finite, for every size."),
    ],
    mistakes=[
        Mistake("salience added to the scores",
                "the salience was added to the scores; to multiply the weights by salience, add "
                "log(salience) to the scores (or multiply after exponentiating).",
                _cued_mistake(lambda sq, s, t: torch.softmax(-sq / t + s, dim=-1))),
        Mistake("not renormalised after the salience",
                "the distance weights were multiplied by the salience but not divided by their "
                "new total, so rows no longer sum to one.",
                _cued_mistake(lambda sq, s, t: torch.softmax(-sq / t, dim=-1) * s)),
        Mistake("temperature divides the salience too",
                "the temperature divided log(salience) as well; it only scales the distance "
                "term, so the salience keeps its effect at every temperature.",
                _cued_mistake(lambda sq, s, t: torch.softmax((-sq + torch.log(s)) / t, dim=-1))),
        Mistake("ignored the salience",
                "the weights depend on the distances only: the salience was not used.",
                _cued_mistake(lambda sq, s, t: torch.softmax(-sq / t, dim=-1))),
        Mistake("exp then divide (underflow)",
                "exponentiating scores near -2e4 underflows to 0 and 0/0 gives NaN; shift the "
                "scores by their row maximum (or use a built-in that does) before exponentiating.",
                _cued_mistake(_cued_naive)),
        Mistake("no check of the salience",
                "a negative or all-zero salience must raise a ValueError naming salience.",
                _cued_mistake(lambda sq, s, t: torch.softmax(-sq / t + torch.log(s), dim=-1),
                              validate=False)),
    ],
    alternatives=[
        Alternative("salience after the softmax", "softmax of the distance scores, times salience, "
                    "renormalised", _cued_alt_after_softmax),
        Alternative("float64 with a max shift", "cdist, log(salience), explicit max shift, in float64",
                    _cued_alt_float64_shift),
        Alternative("python loops", "pure Python floats, shifted by the best salient score",
                    _cued_alt_loops),
        Alternative("log_softmax and einsum", "einsum distances, -inf bias for zero salience, "
                    "log_softmax then exp", _cued_alt_log_softmax),
    ],
))
