r"""ch02_ex2: Nadaraya–Watson pooling, batched.

Write `nadaraya_watson(queries, keys, values, width)` that performs Gaussian-kernel
attention pooling on a batch of independent 1-D regression problems.

* `queries`: float32, shape `(batch, num_queries)`; `keys` and `values`: float32,
  shape `(batch, num_keys)`; `width`: a positive float.
* Return a tuple `(predictions, weights)`: `weights` has shape
  `(batch, num_queries, num_keys)`, with `weights[b, i, j]` the softmax over `j` of
  $-(\text{queries}[b, i] - \text{keys}[b, j])^2 / (2\,\text{width}^2)$, so every row
  sums to 1 over the keys; `predictions[b, i]` $= \sum_j$ `weights[b, i, j] * values[b, j]`,
  shape `(batch, num_queries)`.
* The result must stay finite when a query is far from every key and the width is
  small (its weight then goes to its nearest key). There the scores reach about
  $-3000$, where float32 can only resolve steps of $2.4 \times 10^{-4}$, so the check
  compares with a float64 computation within a relative $2 \times 10^{-3}$.
* Raise `ValueError` (with any message) when `queries`, `keys` or `values` is not
  2-D, when `keys` and `values` differ in shape, when the batch sizes of `queries`
  and `keys` differ, and when `width` is not positive.
"""
from __future__ import annotations

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import ERROR_WEIGHT, Kept, finite_then_close
from ._common import _check_width

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _check_nw_shapes(queries, keys, values):
    for name, tensor in (("queries", queries), ("keys", keys), ("values", values)):
        if tensor.dim() != 2:
            raise ValueError(f"{name} must have shape (batch, n), got shape {tuple(tensor.shape)}")
    if keys.shape != values.shape:
        raise ValueError(f"keys and values must have the same shape, got keys {tuple(keys.shape)} "
                         f"and values {tuple(values.shape)}")
    if queries.shape[0] != keys.shape[0]:
        raise ValueError(f"queries and keys must have the same batch size, got queries "
                         f"{tuple(queries.shape)} and keys {tuple(keys.shape)}")


def nadaraya_watson(queries, keys, values, width):
    """Gaussian-kernel attention pooling; returns (predictions, weights).

    Computed in float64 and returned in float32: scores reach -3000 in the checks, where
    float32 rounding of the scores alone moves a weight by about 1e-4 relative, and the
    reference should not add its own rounding to that.
    """
    _check_nw_shapes(queries, keys, values)
    _check_width(width)
    offsets = queries.double().unsqueeze(-1) - keys.double().unsqueeze(-2)   # (batch, q, k)
    weights = torch.softmax(-offsets ** 2 / (2 * float(width) ** 2), dim=-1)
    predictions = torch.bmm(weights, values.double().unsqueeze(-1)).squeeze(-1)
    return predictions.to(queries.dtype), weights.to(queries.dtype)


# Inputs of the public and hidden checks ---------------------------------------------------


def _nw_data(g, batch, num_queries, num_keys):
    keys = torch.sort(5 * torch.rand(batch, num_keys, generator=g), dim=-1).values
    values = torch.sin(2 * keys) + 0.3 * torch.randn(batch, num_keys, generator=g)
    queries = 5 * torch.rand(batch, num_queries, generator=g)
    return queries, keys, values


def _nw_one_calls(seed):
    g = torch.Generator().manual_seed(seed)
    queries, keys, values = _nw_data(g, 1, 7, 9)
    return [Call(args=(queries, keys, values, 0.5))]


def _nw_batch_calls(seed):
    g = torch.Generator().manual_seed(seed)
    queries, keys, values = _nw_data(g, 3, 4, 6)
    width = round(0.3 + torch.rand(1, generator=g).item(), 3)
    return [Call(args=(queries, keys, values, width))]


def _nw_narrow_calls(seed):
    g = torch.Generator().manual_seed(seed)
    keys = torch.sort(torch.rand(2, 5, generator=g), dim=-1).values
    values = torch.randn(2, 5, generator=g)
    # The last query lies far from every key: each Gaussian factor underflows to 0, and the
    # scores reach about -3000.
    queries = torch.cat([torch.rand(2, 2, generator=g), torch.full((2, 1), 4.0)], dim=-1)
    return [Call(args=(queries, keys, values, 0.05))]


# Scores near -3000 have a float32 spacing of 2.4e-4, so two correct stable formulas
# (softmax, exp(s - logsumexp(s)), a shifted kernel ratio) may differ by a few 1e-4 in a
# weight; the check allows 2e-3 relative after testing that everything is finite.
_NARROW_RTOL = 2e-3


def _nw_bad_query_calls(seed):
    g = torch.Generator().manual_seed(seed)
    queries, keys, values = _nw_data(g, 2, 3, 5)
    return [Call(args=(torch.rand(3, generator=g), keys, values, 0.5)),
            Call(args=(torch.rand(2, 3, 1, generator=g), keys, values, 0.5))]


def _nw_bad_kv_calls(seed):
    g = torch.Generator().manual_seed(seed)
    queries, keys, values = _nw_data(g, 2, 3, 5)
    return [Call(args=(queries, keys, values[:, :4], 0.5))]


def _nw_bad_width_calls(seed):
    g = torch.Generator().manual_seed(seed)
    queries, keys, values = _nw_data(g, 2, 3, 5)
    return [Call(args=(queries, keys, values, 0.0)), Call(args=(queries, keys, values, -1.0))]


def _nw_hidden_calls(seed):
    g = torch.Generator().manual_seed(seed)
    batch = int(torch.randint(2, 5, (1,), generator=g))
    queries, keys, values = _nw_data(g, batch, 20, 30)
    width = round(0.1 + 0.8 * torch.rand(1, generator=g).item(), 3)
    return [Call(args=(queries, keys, values, width))]


def _nw_bad_batch_calls(seed):
    g = torch.Generator().manual_seed(seed)
    queries, _, _ = _nw_data(g, 2, 3, 5)
    _, keys, values = _nw_data(g, 3, 3, 5)
    return [Call(args=(queries, keys, values, 0.5))]


# Kept mistakes, each with its hint --------------------------------------------------------


def _nw_from_weights(weight_fn, validate=True):
    def impl(queries, keys, values, width):
        if validate:
            _check_nw_shapes(queries, keys, values)
        _check_width(width)
        weights = weight_fn(queries.unsqueeze(-1) - keys.unsqueeze(-2), width)
        return (weights * values.unsqueeze(-2)).sum(-1), weights
    return impl


mistakes.add("softmax over queries",
             "your weights are normalised over the queries axis; each "
"query's weights must sum to 1 over the keys.",
             _nw_from_weights(lambda o, w: torch.softmax(-o ** 2 / (2 * w ** 2), dim=-2)))


mistakes.add("forgot the 1/2",
             "the Gaussian logit is -(query - key)² divided by 2·width²; "
"you left out the factor 2.",
             _nw_from_weights(lambda o, w: torch.softmax(-o ** 2 / w ** 2, dim=-1)))


mistakes.add("absolute distance",
             "your logits use the absolute distance |query - key|; the Gaussian "
"kernel's logit is -(query - key)² / (2 width²), with the squared distance.",
             _nw_from_weights(lambda o, w: torch.softmax(-o.abs() / (2 * w ** 2), dim=-1)))


mistakes.add("(weights, predictions) swapped",
             "your values may be right but come back in the wrong "
"order: the contract asks for the tuple (predictions, weights).",
             lambda q, k, v, w: tuple(reversed(nadaraya_watson(q, k, v, w))))


def _naive_ratio(offsets, width):
    kernel = torch.exp(-offsets ** 2 / (2 * width ** 2))
    return kernel / kernel.sum(-1, keepdim=True)


mistakes.add("kernel over its sum",
             "dividing kernel values by their sum gives 0/0 = NaN when every "
"kernel value underflows (a query far from all keys, a narrow width); normalise the "
"logits in a numerically stable way instead.",
             _nw_from_weights(_naive_ratio))


mistakes.add("no shape checks",
             "validate the shapes before computing: queries, keys and values "
"must be 2-D, keys and values of equal shape, and the batch sizes must agree; "
"raise ValueError otherwise.",
             _nw_from_weights(lambda o, w: torch.softmax(-o ** 2 / (2 * w ** 2), dim=-1),
                              validate=False))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("exp minus logsumexp",
                   "exp(s - logsumexp(s)) and einsum, in float32")
def _nw_alt_logsumexp(queries, keys, values, width):
    for name, t in (("queries", queries), ("keys", keys), ("values", values)):
        if t.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got {t.shape}")
    if keys.shape != values.shape:
        raise ValueError(f"keys {keys.shape} and values {values.shape} differ")
    if len(queries) != len(keys):
        raise ValueError(f"batch sizes of queries ({len(queries)}) and keys ({len(keys)}) differ")
    if width <= 0:
        raise ValueError("width must be > 0")
    scores = -((queries[..., None] - keys[:, None, :]) ** 2) / (2 * width * width)
    weights = torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True))
    return torch.einsum("bqk,bk->bq", weights, values), weights


@alternatives.keep("shifted kernel ratio in float64",
                   "kernel shifted by the row maximum, divided by "
"its sum, in float64")
def _nw_alt_float64_ratio(queries, keys, values, width):
    if queries.dim() != 2:
        raise ValueError("queries: expected (batch, num_queries)")
    if keys.dim() != 2 or values.dim() != 2:
        raise ValueError("keys and values: expected (batch, num_keys)")
    if keys.shape != values.shape:
        raise ValueError("keys and values must match in shape")
    if queries.shape[0] != keys.shape[0]:
        raise ValueError("queries and keys must have the same batch size")
    if not width > 0:
        raise ValueError(f"width = {width}")
    d = queries.double()[:, :, None] - keys.double()[:, None, :]
    logits = -0.5 * (d / width) ** 2
    kernel = torch.exp(logits - logits.amax(dim=2, keepdim=True))  # shifted kernel ratio
    weights = kernel / kernel.sum(dim=2, keepdim=True)
    predictions = (weights * values.double()[:, None, :]).sum(dim=2)
    return predictions.float(), weights.float()


@alternatives.keep("d2l's layout",
                   "inverse width, repeat_interleave of the queries, bmm")
def _nw_alt_d2l(queries, keys, values, width):
    # In d2l's style: an inverse width w, queries repeated once per key, bmm of the weights.
    if queries.dim() != 2 or keys.dim() != 2 or values.dim() != 2:
        bad = [n for n, t in (("queries", queries), ("keys", keys), ("values", values)) if t.dim() != 2]
        raise ValueError(f"{', '.join(bad)}: not 2-D")
    if keys.shape != values.shape:
        raise ValueError(f"keys {list(keys.shape)} vs values {list(values.shape)}")
    if queries.shape[0] != keys.shape[0]:
        raise ValueError(f"queries {list(queries.shape)} vs keys {list(keys.shape)}: batch")
    if width <= 0:
        raise ValueError("width must be positive")
    batch, num_queries = queries.shape
    num_keys = keys.shape[1]
    w = 1.0 / width
    repeated = queries.reshape(-1).repeat_interleave(num_keys).reshape(batch, num_queries, num_keys)
    attention_weights = torch.nn.functional.softmax(-((repeated - keys.unsqueeze(1)) * w) ** 2 / 2, dim=-1)
    predictions = torch.bmm(attention_weights, values.unsqueeze(-1)).reshape(batch, num_queries)
    return predictions, attention_weights


@alternatives.keep("loop over the batch",
                   "one problem at a time with log_softmax")
def _nw_alt_loops(queries, keys, values, width):
    names = ("queries", "keys", "values")
    for name, t in zip(names, (queries, keys, values)):
        if len(t.shape) != 2:
            raise ValueError(f"{name} has {len(t.shape)} dimensions, needs 2")
    if tuple(keys.shape) != tuple(values.shape):
        raise ValueError("keys and values have different shapes")
    if queries.shape[0] != keys.shape[0]:
        raise ValueError("queries and keys: different batch sizes")
    if width <= 0:
        raise ValueError("width <= 0")
    all_predictions, all_weights = [], []
    for q, k, v in zip(queries, keys, values):  # one regression problem at a time
        w = torch.log_softmax(-(q[:, None] - k[None, :]) ** 2 / (2 * width ** 2), dim=1).exp()
        all_weights.append(w)
        all_predictions.append(w @ v)
    return torch.stack(all_predictions), torch.stack(all_weights)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch02_ex2", title="Nadaraya–Watson pooling, batched",
    name="nadaraya_watson", reference=nadaraya_watson, points=3,
    checks=[
        Check("one batch: 7 queries, 9 keys, width 0.5", _nw_one_calls, seed=0,
              hint="weights[b, i, j] compares query i with key j of batch b; every row sums to one "
                   "over the keys, and one row can be computed by hand."),
        Check("a batch of 3 with 4 queries and 6 keys", _nw_batch_calls, seed=1,
              hint="this check compares (predictions, weights) for 3 problems of 4 queries and 6 keys: "
                   "weights[b, i, j] is the softmax over j of -(queries[b, i] - keys[b, j])² / (2 width²), "
                   "predictions[b, i] the sum over j of weights[b, i, j] values[b, j]; the reason above "
                   "names the item that differs."),
        Check("a narrow width and a query far from every key stay finite", _nw_narrow_calls, seed=2,
              compare=finite_then_close(_NARROW_RTOL, 1e-5),
              hint="this check uses width 0.05 and a query 3 units from every key (scores near -3000): "
                   "every entry of (predictions, weights) must be finite and agree with a float64 "
                   "computation within 2e-3 relative; the reason above says which item differs."),
        Check("bad shapes raise ValueError: queries not 2-D, keys and values of "
              "different shapes, batch sizes that differ",
              lambda seed: _nw_bad_query_calls(seed) + _nw_bad_kv_calls(seed) + _nw_bad_batch_calls(seed), seed=0,
              weight=ERROR_WEIGHT,
              hint="the first calls pass a 1-D and a 3-D queries; the next passes values with one entry fewer "
                   "than keys; the last passes 2 batches of queries and 3 of keys. Each must raise ValueError."),
        Check("2 to 4 batches of 20 queries and 30 keys (hidden)", _nw_hidden_calls, public=False, seed=3,
              compare=finite_then_close(1e-4, 1e-5),
              hint="softmax over the keys of -(query - key)² / (2 width²), then a weighted sum of values."),
        Check("a non-positive width, or batch sizes that differ, raise ValueError (hidden)",
              lambda seed: _nw_bad_width_calls(seed) + _nw_bad_batch_calls(seed), public=False,
              seed=0, weight=ERROR_WEIGHT,
              hint="raise ValueError when width <= 0, and when the batch sizes of queries and keys differ."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
