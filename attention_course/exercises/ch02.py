"""Chapter 2 exercises: Nadaraya–Watson kernel regression as attention pooling.

* ``ch02_ex1`` – ``gaussian_kernel(distances, width)``: the unnormalised Gaussian kernel.
* ``ch02_ex2`` – ``nadaraya_watson(queries, keys, values, width)``: batched
  Gaussian-kernel attention pooling, returning predictions and weights.
* ``ch02_ex3`` – ``fit_width(keys, values, init_width, lr, num_steps)``: plain gradient
  descent on ``log(width)`` of the leave-one-out squared error.
* ``ch02_ex4`` – ``width_choices(keys, values, test_queries, test_targets, candidates)``:
  the width leave-one-out picks against the width the test error picks (the chapter
  only shows leave-one-out).
* ``ch02_ex5`` – ``local_linear(queries, keys, values, width)``: local linear regression,
  the fix of Nadaraya–Watson's boundary bias; its weights still sum to one but may be
  negative (not shown in the chapter).

The references below must behave like the solution notebook's exercise cells
(``tests/test_exercises.py`` runs both through the same checks). Where float32
rounding depends on the formula (large scores, many gradient steps, a 2 x 2 solve),
the reference computes in float64 and the tolerance is stated next to the check.
Each exercise keeps kept mistakes (must fail with their own hint) and kept
alternatives in other styles (must pass every check); check hints stay neutral.
"""
from __future__ import annotations

import math

import torch

from ..data import make_regression_1d
from ..registry import Alternative, Call, Check, Exercise, Mistake, register

_ERROR_WEIGHT = 0.5  # an error-message check weighs half a value check


def _check_width(width, name="width"):
    if (torch.as_tensor(width) <= 0).any():
        raise ValueError(f"{name} must be positive, got {width!r}")


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.get("__seq__", value.get("__list__", [])):
            yield from _tensors(item)


def _finite_then_close(rtol, atol):
    """A compare for checks that promise finite results: every returned tensor must be finite
    wherever the reference's is (said plainly when it is not), then agree within rtol/atol."""
    from ..checking import compare_all

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


# ============================================================== ch02_ex1: the kernel

def gaussian_kernel(distances, width):
    """exp(-distances**2 / (2 * width**2)), elementwise; 1 at distance 0."""
    _check_width(width)
    return torch.exp(-distances.pow(2) / (2 * width ** 2))


def _kernel_mistake(transform):
    def impl(distances, width):
        _check_width(width)
        return transform(distances, width)
    return impl


def _kernel_calls(seed):
    g = torch.Generator().manual_seed(seed)
    distances = 3 * torch.randn(4, 6, generator=g)
    distances[0, 0] = 0.0  # the kernel is exactly 1 there
    width = round(0.4 + 0.5 * torch.rand(1, generator=g).item(), 3)
    return [Call(args=(distances, width))]


def _kernel_batch_calls(seed):
    g = torch.Generator().manual_seed(seed)
    # A 3-D batch of distances of both signs, a 0-dim tensor width (as in ch02_ex3) and a
    # width per column that broadcasts along the last axis.
    distances = 2 * torch.randn(2, 3, 5, generator=g)
    width = torch.tensor(0.3 + torch.rand(1, generator=g).item())
    per_column = 0.3 + torch.rand(5, generator=g)
    return [Call(args=(distances, width)), Call(args=(-distances, width)),
            Call(args=(distances, per_column))]


def _kernel_bad_calls(seed):
    g = torch.Generator().manual_seed(seed)
    distances = torch.randn(3, 4, generator=g)
    # Only invalid calls: a value bug must not cost the error points nor get this check's hint.
    return [Call(args=(distances, 0.0)), Call(args=(distances, -0.5)),
            Call(args=(distances, torch.tensor([0.5, 0.2, -0.1, 0.4])))]


def _kernel_grad_calls(seed):
    # The contract lets gradients flow to a tensor width (ch02_ex3 learns it): the gradient of
    # the kernel's sum with respect to distances and to a 0-dim width is compared.
    g = torch.Generator().manual_seed(seed)
    distances = 1.5 * torch.randn(3, 5, generator=g)
    width = torch.tensor(0.5 + 0.5 * torch.rand(1, generator=g).item())
    return [Call(args=(distances, width), grads_of=(0, 1))]


def _kernel_hidden_calls(seed):
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(5, 12, (1,), generator=g))
    distances = 4 * torch.rand(n, n + 2, generator=g) - 2
    widths = [round(0.1 + 1.2 * torch.rand(1, generator=g).item(), 3) for _ in range(2)]
    per_row = 0.2 + torch.rand(n, 1, generator=g)
    return [Call(args=(distances, w)) for w in widths] + [Call(args=(distances, per_row))]


def _kernel_alt_inverse_width(distances, width):
    # d2l's convention: a parameter w = 1 / width multiplies the distance.
    if not bool(torch.all(torch.as_tensor(width) > 0)):
        raise ValueError("width has to be > 0")
    w = 1.0 / torch.as_tensor(width, dtype=distances.dtype)
    return torch.exp(-((distances * w) ** 2) / 2)


def _kernel_alt_float64(distances, width):
    width64 = torch.as_tensor(width, dtype=torch.float64)
    if width64.le(0).any():
        raise ValueError(f"non-positive width: {width}")
    return torch.exp(-distances.double() ** 2 / (2 * width64 ** 2)).to(distances.dtype)


def _kernel_alt_normal_density(distances, width):
    # The normal density divided by its peak value, through log_prob.
    width = torch.as_tensor(width, dtype=distances.dtype)
    if (width <= 0).any():
        raise ValueError(f"width={width} must be positive")
    normal = torch.distributions.Normal(torch.zeros_like(width), width)
    return torch.exp(normal.log_prob(distances) - normal.log_prob(torch.zeros_like(distances)))


def _kernel_alt_halved_ratio(distances, width):
    # The ratio distance / width squared and halved, written with Tensor methods.
    width = torch.as_tensor(width, dtype=distances.dtype)
    if not bool(width.gt(0).all()):
        raise ValueError("gaussian_kernel: every width must be > 0")
    return distances.div(width).square().mul(-0.5).exp()


register(Exercise(
    label="ch02_ex1", title="The Gaussian kernel",
    name="gaussian_kernel", reference=gaussian_kernel, points=2,
    checks=[
        Check("a 4 x 6 matrix of distances, width between 0.4 and 0.9", _kernel_calls, seed=0,
              hint="compare a few entries with exp(-d^2 / (2 width^2)) computed by hand; entry "
                   "(0, 0) is at distance 0."),
        Check("a 3-D batch of both signs, a tensor width and a width per column", _kernel_batch_calls,
              seed=1,
              hint="the calls pass a 0-dim tensor width, negated distances, and a width of shape (5,) "
                   "that broadcasts along the last axis; the result keeps the shape of distances."),
        Check("gradients reach distances and a 0-dim tensor width", _kernel_grad_calls, seed=3,
              hint="this check compares the kernel's values, and the gradient of their sum with respect "
                   "to distances and to a 0-dim tensor width (both require grad here), with the reference's: "
                   "the result must be connected to both by autograd; the reason above says what differs."),
        Check("a non-positive width raises ValueError naming width", _kernel_bad_calls, seed=0,
              must_mention=["width"], weight=_ERROR_WEIGHT,
              hint="the calls pass a width of 0, a negative width and a tensor of widths with one "
                   "negative entry; each must raise ValueError with 'width' in its message."),
        Check("random distances and widths, a width per row (hidden)", _kernel_hidden_calls,
              public=False, seed=2,
              hint="exp(-(distance squared) / (2 width squared)), elementwise, with broadcasting."),
    ],
    mistakes=[
        Mistake("forgot the 1/2", "you divided the squared distance by width squared only: "
                "the Gaussian kernel has a factor 2 in the denominator.",
                _kernel_mistake(lambda d, w: torch.exp(-d ** 2 / w ** 2))),
        Mistake("absolute distance", "you used the absolute distance |d| where the Gaussian kernel "
                "uses the squared distance d² (that would be a Laplace-like kernel).",
                _kernel_mistake(lambda d, w: torch.exp(-d.abs() / (2 * w ** 2)))),
        Mistake("width not squared", "you divided by 2·width instead of 2·width²: "
                "the width has the units of a distance, so it must be squared like the distance.",
                _kernel_mistake(lambda d, w: torch.exp(-d ** 2 / (2 * w)))),
        Mistake("width detached", "no gradient reaches the tensor width: the kernel was computed from "
                "a detached copy of it (or from Python numbers); compute it from width itself with torch "
                "operations.",
                _kernel_mistake(lambda d, w: torch.exp(-d ** 2 / (2 * torch.as_tensor(w).detach() ** 2)))),
        Mistake("no width check", "a width of 0 or below must raise ValueError naming 'width' "
                "(it would divide by zero or flip the kernel's meaning), not return numbers.",
                lambda d, w: torch.exp(-d ** 2 / (2 * w ** 2))),
    ],
    alternatives=[
        Alternative("d2l's inverse width", "w = 1/width multiplies the distance, as d2l's parameter does",
                    _kernel_alt_inverse_width),
        Alternative("float64 inside", "computed in float64, cast back", _kernel_alt_float64),
        Alternative("normal density ratio", "torch.distributions.Normal log_prob minus its peak",
                    _kernel_alt_normal_density),
        Alternative("Tensor methods", "distances.div(width).square().mul(-0.5).exp()", _kernel_alt_halved_ratio),
    ],
))


# ============================================================== ch02_ex2: batched pooling

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


def _nw_from_weights(weight_fn, validate=True):
    def impl(queries, keys, values, width):
        if validate:
            _check_nw_shapes(queries, keys, values)
        _check_width(width)
        weights = weight_fn(queries.unsqueeze(-1) - keys.unsqueeze(-2), width)
        return (weights * values.unsqueeze(-2)).sum(-1), weights
    return impl


def _naive_ratio(offsets, width):
    kernel = torch.exp(-offsets ** 2 / (2 * width ** 2))
    return kernel / kernel.sum(-1, keepdim=True)


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


register(Exercise(
    label="ch02_ex2", title="Nadaraya–Watson pooling, batched",
    name="nadaraya_watson", reference=nadaraya_watson, points=3,
    checks=[
        Check("one batch: 7 queries, 9 keys, width 0.5", _nw_one_calls, seed=0,
              hint="weights[b, i, j] compares query i with key j of batch b; look at the row sums "
                   "of your weights and at one row computed by hand."),
        Check("a batch of 3 with 4 queries and 6 keys", _nw_batch_calls, seed=1,
              hint="this check compares (predictions, weights) for 3 problems of 4 queries and 6 keys: "
                   "weights[b, i, j] is the softmax over j of -(queries[b, i] - keys[b, j])² / (2 width²), "
                   "predictions[b, i] the sum over j of weights[b, i, j] values[b, j]; the reason above "
                   "names the item that differs."),
        Check("a narrow width and a query far from every key stay finite", _nw_narrow_calls, seed=2,
              compare=_finite_then_close(_NARROW_RTOL, 1e-5),
              hint="this check uses width 0.05 and a query 3 units from every key (scores near -3000): "
                   "every entry of (predictions, weights) must be finite and agree with a float64 "
                   "computation within 2e-3 relative; the reason above says which item differs."),
        Check("queries that are not 2-D raise ValueError naming queries", _nw_bad_query_calls, seed=0,
              must_mention=["queries"], weight=_ERROR_WEIGHT,
              hint="the calls pass a 1-D and a 3-D queries; the ValueError must mention 'queries'."),
        Check("keys and values of different shapes raise ValueError naming both", _nw_bad_kv_calls,
              seed=0, must_mention=["keys", "values"], weight=_ERROR_WEIGHT,
              hint="the call passes values with one entry fewer than keys; the ValueError must mention both."),
        Check("2 to 4 batches of 20 queries and 30 keys (hidden)", _nw_hidden_calls, public=False, seed=3,
              compare=_finite_then_close(1e-4, 1e-5),
              hint="softmax over the keys of -(query - key)² / (2 width²), then a weighted sum of values."),
        Check("a non-positive width, or batch sizes that differ, raise ValueError (hidden)",
              lambda seed: _nw_bad_width_calls(seed) + _nw_bad_batch_calls(seed), public=False,
              seed=0, weight=_ERROR_WEIGHT,
              must_mention=lambda call: ["width"] if call.args[0].shape[0] == call.args[1].shape[0]
              else ["queries", "keys"],
              hint="raise ValueError naming width when width <= 0, and naming queries and keys when "
                   "their batch sizes differ."),
    ],
    mistakes=[
        Mistake("softmax over queries", "your weights are normalised over the queries axis; each "
                "query's weights must sum to 1 over the keys.",
                _nw_from_weights(lambda o, w: torch.softmax(-o ** 2 / (2 * w ** 2), dim=-2))),
        Mistake("forgot the 1/2", "the Gaussian logit is -(query - key)² divided by 2·width²; "
                "you left out the factor 2.",
                _nw_from_weights(lambda o, w: torch.softmax(-o ** 2 / w ** 2, dim=-1))),
        Mistake("absolute distance", "your logits use the absolute distance |query - key|; the Gaussian "
                "kernel's logit is -(query - key)² / (2 width²), with the squared distance.",
                _nw_from_weights(lambda o, w: torch.softmax(-o.abs() / (2 * w ** 2), dim=-1))),
        Mistake("(weights, predictions) swapped", "your values may be right but come back in the wrong "
                "order: the contract asks for the tuple (predictions, weights).",
                lambda q, k, v, w: tuple(reversed(nadaraya_watson(q, k, v, w)))),
        Mistake("kernel over its sum", "dividing kernel values by their sum gives 0/0 = NaN when every "
                "kernel value underflows (a query far from all keys, a narrow width); normalise the "
                "logits in a numerically stable way instead.",
                _nw_from_weights(_naive_ratio)),
        Mistake("no shape checks", "validate the shapes before computing: queries, keys and values "
                "must be 2-D, keys and values of equal shape, and the batch sizes must agree; "
                "raise ValueError naming the argument(s).",
                _nw_from_weights(lambda o, w: torch.softmax(-o ** 2 / (2 * w ** 2), dim=-1),
                                 validate=False)),
    ],
    alternatives=[
        Alternative("exp minus logsumexp", "exp(s - logsumexp(s)) and einsum, in float32",
                    _nw_alt_logsumexp),
        Alternative("shifted kernel ratio in float64", "kernel shifted by the row maximum, divided by "
                    "its sum, in float64", _nw_alt_float64_ratio),
        Alternative("d2l's layout", "inverse width, repeat_interleave of the queries, bmm", _nw_alt_d2l),
        Alternative("loop over the batch", "one problem at a time with log_softmax", _nw_alt_loops),
    ],
))


# ============================================================== ch02_ex3: learning the width

def _check_1d_pair(keys, values):
    if keys.dim() != 1 or keys.shape != values.shape or keys.numel() < 2:
        raise ValueError(f"keys and values must be 1-D of the same length >= 2, got keys "
                         f"{tuple(keys.shape)} and values {tuple(values.shape)}")


def _loo_loss(keys, values, width, leave_one_out=True, reduce="mean"):
    offsets = keys[:, None] - keys[None, :]
    logits = -offsets ** 2 / (2 * width ** 2)
    if leave_one_out:
        logits = logits.masked_fill(torch.eye(keys.numel(), dtype=torch.bool), float("-inf"))
    errors = (torch.softmax(logits, dim=-1) @ values - values) ** 2
    return errors.mean() if reduce == "mean" else errors.sum()


def fit_width(keys, values, init_width, lr, num_steps):
    """Gradient descent on log(width) of the leave-one-out MSE; returns (width, losses)."""
    _check_1d_pair(keys, values)
    _check_width(init_width, "init_width")
    if int(num_steps) != num_steps or num_steps < 0:
        raise ValueError(f"num_steps must be a non-negative integer, got {num_steps!r}")
    log_width = torch.tensor(math.log(init_width), requires_grad=True)
    losses = []
    for _ in range(int(num_steps)):
        loss = _loo_loss(keys, values, log_width.exp())
        (grad,) = torch.autograd.grad(loss, log_width)
        with torch.no_grad():
            log_width -= lr * grad
        losses.append(loss.detach())
    history = torch.stack(losses) if losses else torch.zeros(0)
    return log_width.exp().item(), history


def _fit_mistake(leave_one_out=True, reduce="mean", on_log=True, record_after=False):
    def impl(keys, values, init_width, lr, num_steps):
        _check_1d_pair(keys, values)
        _check_width(init_width, "init_width")
        param = torch.tensor(math.log(init_width) if on_log else float(init_width), requires_grad=True)
        width = (lambda: param.exp()) if on_log else (lambda: param)
        losses = []
        for _ in range(int(num_steps)):
            loss = _loo_loss(keys, values, width(), leave_one_out, reduce)
            (grad,) = torch.autograd.grad(loss, param)
            with torch.no_grad():
                param -= lr * grad
            if record_after:
                loss = _loo_loss(keys, values, width(), leave_one_out, reduce)
            losses.append(loss.detach())
        history = torch.stack(losses) if losses else torch.zeros(0)
        return width().item(), history
    return impl


def _fit_log_width(keys, values, init_width, lr, num_steps):
    width, losses = fit_width(keys, values, init_width, lr, num_steps)
    return math.log(width), losses


def _fit_calls(seed):
    data = make_regression_1d(num_train=30, seed=seed)
    return [Call(args=(data.x_train, data.y_train, 1.0, 1.0, 20))]


def _fit_zero_calls(seed):
    data = make_regression_1d(num_train=10, seed=seed)
    return [Call(args=(data.x_train, data.y_train, 0.7, 1.0, 0))]


def _fit_bad_calls(seed):
    data = make_regression_1d(num_train=10, seed=seed)
    return [Call(args=(data.x_train, data.y_train[:9], 1.0, 1.0, 5)),
            Call(args=(data.x_train[None], data.y_train[None], 1.0, 1.0, 5)),
            Call(args=(data.x_train[:1], data.y_train[:1], 1.0, 1.0, 5)),   # n = 1
            Call(args=(data.x_train, data.y_train, 0.0, 1.0, 5)),
            Call(args=(data.x_train, data.y_train, -1.0, 1.0, 5))]


def _fit_mentions(call):
    keys, values, init_width = call.args[:3]
    if keys.dim() != 1 or keys.shape != values.shape or keys.numel() < 2:
        return ["keys", "values"]
    return ["init_width"]


def _fit_hidden_calls(seed):
    g = torch.Generator().manual_seed(seed)
    num_train = int(torch.randint(20, 45, (1,), generator=g))
    noise = round(0.1 + 0.3 * torch.rand(1, generator=g).item(), 3)
    init_width = round(0.4 + 1.2 * torch.rand(1, generator=g).item(), 3)
    lr = round(0.3 + 0.7 * torch.rand(1, generator=g).item(), 3)
    data = make_regression_1d(num_train=num_train, noise=noise, seed=seed)
    return [Call(args=(data.x_train, data.y_train, init_width, lr, 15))]


def _fit_alt_sgd(keys, values, init_width, lr, num_steps):
    # The chapter's own loop: torch.optim.SGD on log(width), loss.backward().
    if keys.ndim != 1 or values.shape != keys.shape or len(keys) < 2:
        raise ValueError("keys and values must be 1-D tensors of one length >= 2")
    if init_width <= 0:
        raise ValueError("init_width must be > 0")
    log_width = torch.nn.Parameter(torch.tensor(float(init_width)).log())
    optimizer = torch.optim.SGD([log_width], lr=lr)
    own = torch.eye(len(keys), dtype=torch.bool)
    losses = []
    for _ in range(num_steps):
        scores = -(keys[:, None] - keys[None, :]) ** 2 / (2 * log_width.exp() ** 2)
        loss = ((scores.masked_fill(own, -math.inf).softmax(dim=1) @ values - values) ** 2).mean()
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return log_width.exp().item(), torch.tensor(losses, dtype=torch.float32)


def _fit_alt_d2l_inverse(keys, values, init_width, lr, num_steps):
    # d2l learns w = 1/width; stepping log(w) by -lr * dL/dlog(w) is the same trajectory,
    # since log(w) = -log(width) flips the sign of both the parameter and its gradient.
    if keys.dim() != 1 or keys.shape != values.shape or keys.shape[0] < 2:
        raise ValueError(f"keys {keys.shape} / values {values.shape}: need 1-D, same length >= 2")
    if not init_width > 0:
        raise ValueError(f"init_width={init_width} must be positive")
    log_w = torch.tensor(-math.log(init_width), requires_grad=True)
    n = keys.shape[0]
    losses = torch.zeros(num_steps)
    for t in range(num_steps):
        logits = -((keys.unsqueeze(1) - keys.unsqueeze(0)) * log_w.exp()) ** 2 / 2
        logits = logits - torch.diag(torch.full((n,), math.inf))
        predictions = torch.nn.functional.softmax(logits, dim=1) @ values
        loss = torch.nn.functional.mse_loss(predictions, values)
        losses[t] = loss.detach()
        loss.backward()
        with torch.no_grad():
            log_w -= lr * log_w.grad
        log_w.grad = None
    return math.exp(-log_w.item()), losses


def _fit_alt_float64(keys, values, init_width, lr, num_steps):
    if keys.dim() != 1 or keys.shape != values.shape or keys.numel() < 2:
        raise ValueError("keys and values must be 1-D with equal length of at least 2")
    if init_width <= 0:
        raise ValueError("init_width <= 0")
    k, v = keys.double(), values.double()
    s = torch.tensor(math.log(init_width), dtype=torch.float64, requires_grad=True)
    mask = torch.eye(len(k), dtype=torch.bool)
    history = []
    for _ in range(num_steps):
        alpha = torch.softmax((-(k[:, None] - k) ** 2 / (2 * torch.exp(2 * s))).masked_fill(mask, -math.inf), -1)
        loss = torch.mean((alpha @ v - v) ** 2)
        history.append(loss.item())
        (g,) = torch.autograd.grad(loss, s)
        s = (s - lr * g).detach().requires_grad_(True)
    return math.exp(s.item()), torch.tensor(history, dtype=torch.float32)


def _fit_alt_loops(keys, values, init_width, lr, num_steps):
    # The leave-one-out prediction of each point built from the other points, one at a time.
    if keys.dim() != 1 or values.dim() != 1 or len(keys) != len(values) or len(keys) < 2:
        raise ValueError("keys and values: 1-D, same length, at least 2 points")
    if init_width <= 0:
        raise ValueError("init_width must be a positive float")
    s = torch.tensor(math.log(init_width), requires_grad=True)
    n = len(keys)
    losses = []
    for _ in range(num_steps):
        errors = []
        for i in range(n):
            others = torch.cat([torch.arange(i), torch.arange(i + 1, n)])
            alpha = torch.softmax(-(keys[i] - keys[others]) ** 2 / (2 * torch.exp(s) ** 2), dim=0)
            errors.append((alpha @ values[others] - values[i]) ** 2)
        loss = torch.stack(errors).mean()
        losses.append(loss.detach())
        loss.backward()
        with torch.no_grad():
            s -= lr * s.grad
            s.grad.zero_()
    return torch.exp(s).item(), torch.stack(losses) if losses else torch.empty(0)


_FIT_RTOL, _FIT_ATOL = 1e-3, 1e-5  # 20 float32 steps: allow rounding of other loss formulas

register(Exercise(
    label="ch02_ex3", title="Learning the width by gradient descent",
    name="fit_width", reference=fit_width, points=3,
    checks=[
        Check("20 steps from width 1.0 with lr 1.0 on 30 noisy points", _fit_calls, seed=0,
              rtol=_FIT_RTOL, atol=_FIT_ATOL,
              hint="this check compares (width, losses): losses[t] is the leave-one-out loss at the width "
                   "before step t, width is e^s after the last step, a Python float; the reason above "
                   "names the item that differs."),
        Check("zero steps return the initial width and an empty loss history", _fit_zero_calls, seed=1,
              rtol=_FIT_RTOL, atol=_FIT_ATOL,
              hint="with num_steps = 0 the contract returns (init_width, an empty float32 tensor)."),
        Check("bad keys, values or init_width raise ValueError naming them", _fit_bad_calls,
              seed=0, must_mention=_fit_mentions, weight=_ERROR_WEIGHT,
              hint="calls 1 to 3 pass keys and values of different lengths, not 1-D, or of length 1 "
                   "(name both); calls 4 and 5 an init_width <= 0 (name init_width)."),
        Check("fresh data, start and learning rate (hidden)", _fit_hidden_calls, public=False, seed=4,
              rtol=_FIT_RTOL, atol=_FIT_ATOL,
              hint="leave-one-out MSE, plain gradient steps on log(width), losses recorded before each step."),
    ],
    mistakes=[
        Mistake("no leave-one-out", "each training point is still one of its own keys, so the loss "
                "rewards a width shrinking towards 0; leave the point itself out of its prediction.",
                _fit_mistake(leave_one_out=False)),
        Mistake("stepped the width itself", "you took gradient steps on the width; the contract "
                "asks for steps on log(width), which keeps the width positive.",
                _fit_mistake(on_log=False)),
        Mistake("summed the errors", "the loss is the mean of the squared errors over the training "
                "points, not their sum (the sum scales the gradient by the number of points).",
                _fit_mistake(reduce="sum")),
        Mistake("returned log(width)", "the losses match but the first item is s = log(width); return "
                "the width e^s as a Python float.", _fit_log_width),
        Mistake("loss recorded after the step", "losses[t] must be the loss at the width used for "
                "step t, measured before that step updates it.",
                _fit_mistake(record_after=True)),
    ],
    alternatives=[
        Alternative("torch.optim.SGD", "the chapter's optimizer loop with loss.backward()", _fit_alt_sgd),
        Alternative("d2l's inverse width", "learns log(1/width), diagonal removed by subtracting inf, "
                    "F.mse_loss", _fit_alt_d2l_inverse),
        Alternative("float64 inside", "every step in float64, losses returned as float32", _fit_alt_float64),
        Alternative("one point at a time", "each leave-one-out prediction from the other points, in a loop",
                    _fit_alt_loops),
    ],
))


# ============================================================== ch02_ex4: LOO against test error

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
    """Returns (loo_width, test_width, loo_errors, test_errors); errors computed in float64."""
    _validate_choices(keys, values, test_queries, test_targets, candidates)
    loo = _loo_errors64(keys, values, candidates)
    test = _test_errors64(keys, values, test_queries, test_targets, candidates)
    return (candidates[loo.argmin()].item(), candidates[test.argmin()].item(),
            loo.to(keys.dtype), test.to(keys.dtype))


def _choices_mistake(loo_kw=None, test_kw=None, pick=lambda c, e: c[e.argmin()].item()):
    def impl(keys, values, test_queries, test_targets, candidates):
        _validate_choices(keys, values, test_queries, test_targets, candidates)
        loo = _loo_errors64(keys, values, candidates, **(loo_kw or {}))
        test = _test_errors64(keys, values, test_queries, test_targets, candidates, **(test_kw or {}))
        return pick(candidates, loo), pick(candidates, test), loo.float(), test.float()
    return impl


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
    return candidates[loo.argmin()].item(), candidates[test.argmin()].item(), loo, test


_CHOICE_RTOL, _CHOICE_ATOL = 1e-4, 1e-6


def _compare_choices(got, want, calls):
    """Errors within tolerance; each width must be a candidate whose (reference) error is the
    smallest up to that tolerance, so a near-tie between two candidates never decides."""
    from ..checking import compare_values
    for i, (g, w, call) in enumerate(zip(got, want, calls)):
        where = "the result" if len(calls) == 1 else f"call {i + 1} of {len(calls)}: the result"
        if w["status"] == "raised":
            return None if g["status"] == "raised" else f"{where}: should raise {w['error_type']}"
        if g["status"] == "raised":
            return f"raised {g['error_type']}: {g['message'][:300]}"
        gv, wv = g["value"], w["value"]
        if not (isinstance(gv, dict) and "__seq__" in gv and len(gv["__seq__"]) == 4):
            return f"{where} should be a tuple of 4 items (loo_width, test_width, loo_errors, test_errors)"
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
    return (candidates[loo_errors.argmin()].item(), candidates[test_errors.argmin()].item(),
            loo_errors, test_errors)


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
    return candidates[best_loo].item(), candidates[best_test].item(), loo, test


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
    loo, test = torch.stack(loo).float(), torch.stack(test).float()
    return float(candidates[torch.argmin(loo)]), float(candidates[torch.argmin(test)]), loo, test


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
              seed=0, must_mention=_choices_mentions, weight=_ERROR_WEIGHT,
              hint="calls 1 to 4 pass a zero, a negative, no candidate and a 2-D candidates (name "
                   "candidates); calls 5 to 7 keys and values of different lengths, not 1-D, or of length 1 "
                   "(name both)."),
        Check("fresh data with an outlying point, ten candidates (hidden)", _choices_hidden_calls,
              public=False, seed=5, compare=_compare_choices,
              hint="this check adds a training point 0.8 beyond the others and a candidate width 0.04: "
                   "the leave-one-out and test mean squared errors per candidate stay finite, and each "
                   "returned width is the candidate with the smallest error."),
    ],
    mistakes=[
        Mistake("no leave-one-out", "each training point helps predict itself, so the smallest "
                "width always looks best; leave the point out of its own prediction.",
                _choices_mistake(loo_kw={"leave_one_out": False})),
        Mistake("returned the indices", "you returned the positions of the best candidates; return "
                "their widths (floats).",
                _choices_mistake(pick=lambda c, e: int(e.argmin()))),
        Mistake("absolute error", "the errors to compare are mean *squared* errors, not mean "
                "absolute errors.",
                _choices_mistake(loo_kw={"absolute": True}, test_kw={"absolute": True})),
        Mistake("float32 kernel over its sum", "at a small candidate width every kernel value of some "
                "point underflows to 0 in float32, and dividing by their sum gives 0/0 = NaN; normalise "
                "the logits in a numerically stable way (a softmax), as in ch02_ex2.",
                _choices_float32_ratio),
        Mistake("summed the errors", "the errors are means over the points, not sums; a sum grows "
                "with the number of points.",
                _choices_mistake(loo_kw={"reduce": "sum"}, test_kw={"reduce": "sum"})),
    ],
    alternatives=[
        Alternative("all candidates at once", "one (m, n, n) stack of scores, float32",
                    _choices_alt_batched),
        Alternative("python loops", "one candidate and one left-out point at a time", _choices_alt_loops),
        Alternative("kernel ratio in float64", "exp kernel with a zeroed diagonal, divided by row sums",
                    _choices_alt_kernel_ratio64),
    ],
))


# ============================================================== ch02_ex5: local linear regression

def _validate_local(queries, keys, values, width):
    if queries.dim() != 1:
        raise ValueError(f"queries must be 1-D, got shape {tuple(queries.shape)}")
    _check_1d_pair(keys, values)
    if isinstance(width, bool) or not isinstance(width, (int, float)) or not width > 0:
        raise ValueError(f"width must be a positive number, got {width!r}")


def _local_weights64(queries, keys, width, centred=True, sign=1.0, nadaraya=False):
    q, k = queries.double()[:, None], keys.double()[None, :]
    kernel = torch.softmax(-(q - k) ** 2 / (2 * float(width) ** 2), dim=-1)  # rows sum to 1
    if nadaraya:
        return kernel
    u = (k - q) if centred else k.expand_as(kernel)
    s1 = (kernel * u).sum(-1, keepdim=True)
    s2 = (kernel * u ** 2).sum(-1, keepdim=True)
    return kernel * (s2 - sign * u * s1) / (s2 - s1 ** 2)


def local_linear(queries, keys, values, width):
    """Local linear regression with a Gaussian kernel; returns (predictions, weights).

    In float64 inside: the weights divide by a weighted variance of the keys, which
    float32 computes with a relative error near 1e-6 that grows as the width shrinks.
    """
    _validate_local(queries, keys, values, width)
    weights = _local_weights64(queries, keys, width)
    return (weights @ values.double()).to(values.dtype), weights.to(values.dtype)


def _local_mistake(validate=True, **kw):
    def impl(queries, keys, values, width):
        if validate:
            _validate_local(queries, keys, values, width)
        weights = _local_weights64(queries, keys, width, **kw)
        return (weights @ values.double()).float(), weights.float()
    return impl


def _local_no_kernel(queries, keys, values, width):
    _validate_local(queries, keys, values, width)
    q, k = queries.double()[:, None], keys.double()[None, :]
    kernel = torch.exp(-(q - k) ** 2 / (2 * float(width) ** 2))
    u = k - q
    s0, s1, s2 = (kernel.sum(-1, keepdim=True), (kernel * u).sum(-1, keepdim=True),
                  (kernel * u ** 2).sum(-1, keepdim=True))
    weights = (s2 - u * s1) / (s0 * s2 - s1 ** 2)
    return (weights @ values.double()).float(), weights.float()


def _local_calls(seed):
    g = torch.Generator().manual_seed(seed)
    data = make_regression_1d(num_train=30, seed=seed)
    queries = 0.3 + 4.4 * torch.rand(12, generator=g)
    return [Call(args=(queries, data.x_train, data.y_train, 0.4))]


def _local_boundary_calls(seed):
    data = make_regression_1d(num_train=40, seed=seed)
    queries = torch.tensor([0.0, 0.1, 2.5, 4.9, 5.0])
    return [Call(args=(queries, data.x_train, data.y_train, 0.3))]


def _local_line_calls(seed):
    g = torch.Generator().manual_seed(seed)
    keys = 5 * torch.rand(25, generator=g)  # unsorted
    values = 1.5 - 0.8 * keys                 # a straight line, no noise
    queries = torch.linspace(0.0, 5.0, 9)
    return [Call(args=(queries, keys, values, 0.5))]


def _local_bad_calls(seed):
    data = make_regression_1d(num_train=10, seed=seed)
    x, y = data.x_train, data.y_train
    queries = torch.tensor([1.0, 2.0])
    return [Call(args=(queries, x, y, 0.0)), Call(args=(queries, x, y, -0.3)),
            Call(args=(queries, x, y[:8], 0.5)),
            Call(args=(queries, x[None], y[None], 0.5)),     # keys, values not 1-D
            Call(args=(queries, x[:1], y[:1], 0.5))]         # n = 1


def _local_mentions(call):
    keys, values = call.args[1:3]
    bad_pair = keys.dim() != 1 or keys.shape != values.shape or keys.numel() < 2
    return ["keys", "values"] if bad_pair else ["width"]


def _local_hidden_calls(seed):
    g = torch.Generator().manual_seed(seed)
    num_train = int(torch.randint(20, 50, (1,), generator=g))
    data = make_regression_1d(num_train=num_train, noise=0.25, seed=seed)
    width = round(0.3 + 0.6 * torch.rand(1, generator=g).item(), 3)
    queries = 5 * torch.rand(15, generator=g)
    return [Call(args=(queries, data.x_train, data.y_train, width)),
            Call(args=(data.x_test[::10], data.x_train, data.y_train, width))]


# float32 answers against a float64 reference: weights of size ~1 that are built from a
# weighted variance near 0.03 (at the ends of [0, 5]).
_LOCAL_RTOL, _LOCAL_ATOL = 1e-3, 1e-5


def _local_alt_solve_loops(queries, keys, values, width):
    # One weighted least-squares problem per query: beta = (X^T K X)^-1 X^T K v, X = [1, k - q].
    if queries.dim() != 1:
        raise ValueError("queries must be 1-D")
    if keys.dim() != 1 or keys.shape != values.shape or len(keys) < 2:
        raise ValueError("keys and values must be 1-D with the same length >= 2")
    if width <= 0:
        raise ValueError("width must be > 0")
    rows = []
    for q in queries:
        design = torch.stack([torch.ones_like(keys), keys - q], dim=1)       # (n, 2)
        kernel = torch.softmax(-(keys - q) ** 2 / (2 * width ** 2), dim=0)    # (n,)
        weighted = design.T * kernel                                          # X^T K, (2, n)
        hat = torch.linalg.solve(weighted @ design, weighted)                 # (2, n)
        rows.append(hat[0])  # the intercept of the line centred at q is the prediction
    weights = torch.stack(rows)
    return weights @ values, weights


def _local_alt_corrected_nw(queries, keys, values, width):
    # Nadaraya–Watson weights, plus a slope correction through the weighted mean of the keys.
    if queries.ndim != 1:
        raise ValueError(f"queries: expected 1-D, got {queries.shape}")
    if keys.ndim != 1 or values.ndim != 1 or keys.numel() != values.numel() or keys.numel() < 2:
        raise ValueError(f"keys {keys.shape} and values {values.shape}: 1-D, same length >= 2")
    if not width > 0:
        raise ValueError(f"width {width} is not positive")
    alpha = torch.softmax(-0.5 * ((queries[:, None] - keys[None, :]) / width) ** 2, dim=1).double()
    k = keys.double()
    mean_key = alpha @ k                                            # (m,)
    centred = k[None, :] - mean_key[:, None]                        # (m, n)
    spread = (alpha * centred ** 2).sum(1, keepdim=True)
    weights = alpha * (1 + (queries.double() - mean_key)[:, None] * centred / spread)
    return (weights @ values.double()).float(), weights.float()


def _local_alt_pinv(queries, keys, values, width):
    # sqrt(K)-weighted design and its pseudo-inverse: the first row maps sqrt(K) v to the intercept.
    if queries.dim() != 1:
        raise ValueError("queries should be 1-D")
    if keys.dim() != 1 or values.dim() != 1 or keys.shape[0] != values.shape[0] or keys.shape[0] < 2:
        raise ValueError("keys and values should be 1-D of the same length (at least 2)")
    if width <= 0:
        raise ValueError(f"width={width}: must be positive")
    k = keys.double()
    out = []
    for q in queries.double():
        root = torch.exp(-(k - q) ** 2 / (4 * width ** 2))                   # sqrt of the kernel
        design = torch.stack([torch.ones_like(k), k - q], 1) * root[:, None]
        out.append(torch.linalg.pinv(design)[0] * root)
    weights = torch.stack(out)
    return (weights @ values.double()).float(), weights.float()


def _local_alt_moments_batched(queries, keys, values, width):
    # Raw kernel moments S0, S1, S2 as a batch of 2 x 2 systems, in float64.
    if queries.dim() != 1:
        raise ValueError("queries needs shape (m,)")
    if keys.dim() != 1 or keys.shape != values.shape or keys.numel() < 2:
        raise ValueError("keys and values need the same shape (n,), n >= 2")
    if width <= 0:
        raise ValueError("width must be positive")
    u = keys.double()[None, :] - queries.double()[:, None]
    kernel = torch.exp(-u ** 2 / (2 * width ** 2))
    s0, s1, s2 = (kernel.sum(1), (kernel * u).sum(1), (kernel * u * u).sum(1))
    det = s0 * s2 - s1 ** 2
    weights = kernel * (s2[:, None] - u * s1[:, None]) / det[:, None]
    return (weights @ values.double()).to(values.dtype), weights.to(values.dtype)


register(Exercise(
    label="ch02_ex5", title="Local linear regression: fixing the boundary bias",
    name="local_linear", reference=local_linear, points=3,
    checks=[
        Check("12 queries inside [0.3, 4.7], 30 noisy keys, width 0.4", _local_calls, seed=0,
              rtol=_LOCAL_RTOL, atol=_LOCAL_ATOL,
              hint="compare one row of weights with K_i (S2 - u_i S1) / (S0 S2 - S1^2), u_i = k_i - q, "
                   "and check that every row sums to 1."),
        Check("queries at the ends of [0, 5] and in the middle, width 0.3", _local_boundary_calls, seed=1,
              rtol=_LOCAL_RTOL, atol=_LOCAL_ATOL,
              hint="this check compares (predictions, weights) at queries 0, 0.1, 2.5, 4.9 and 5 with width "
                   "0.3: row i of weights holds K_j (S2 - u_j S1) / (S0 S2 - S1^2) with u_j = k_j - q_i, "
                   "and predictions = weights @ values; the reason above names the item that differs."),
        Check("a straight line through unsorted keys is reproduced exactly", _local_line_calls, seed=2,
              rtol=_LOCAL_RTOL, atol=_LOCAL_ATOL,
              hint="this check's values lie on the line 1.5 - 0.8 x (25 unsorted keys, width 0.5): the "
                   "predictions lie on that line, and the weights follow the contract's formula with rows "
                   "summing to 1; the reason above names the item that differs."),
        Check("a non-positive width or keys and values of different lengths raise ValueError",
              _local_bad_calls, seed=0, must_mention=_local_mentions, weight=_ERROR_WEIGHT,
              hint="calls 1 and 2 pass width 0 and a negative width (name width); calls 3 to 5 keys and "
                   "values of different lengths, not 1-D, or of length 1 (name both)."),
        Check("fresh data, width and queries (hidden)", _local_hidden_calls, public=False, seed=3,
              rtol=_LOCAL_RTOL, atol=_LOCAL_ATOL,
              hint="a weighted line fitted around each query, its value at the query; weights sum to 1."),
    ],
    mistakes=[
        Mistake("Nadaraya–Watson weights", "these are the plain Nadaraya–Watson weights: they fit a "
                "constant, not a line, so a slope in the data biases the ends.",
                _local_mistake(nadaraya=True)),
        Mistake("line evaluated at x = 0", "your line was fitted in k rather than in k - q, and its "
                "intercept is its value at x = 0; the prediction is the line's value at the query.",
                _local_mistake(centred=False)),
        Mistake("slope term with the wrong sign", "the weights add u_i S1 where the formula subtracts "
                "it, so the rows no longer sum to 1 and a straight line is not reproduced.",
                _local_mistake(sign=-1.0)),
        Mistake("kernel factor K_i left out", "your weights are (S2 - u_i S1) / (S0 S2 - S1^2) without the "
                "kernel factor K_i, so keys far from the query weigh as much as near ones and the rows no "
                "longer sum to 1.",
                _local_no_kernel),
        Mistake("no width check", "a width of 0 or below must raise ValueError naming width.",
                _local_mistake(validate=False)),
    ],
    alternatives=[
        Alternative("2 x 2 solve per query", "torch.linalg.solve of the weighted normal equations, "
                    "a loop over queries, float32", _local_alt_solve_loops),
        Alternative("corrected Nadaraya–Watson", "NW weights times 1 + (q - mean key)(k - mean key) / "
                    "spread", _local_alt_corrected_nw),
        Alternative("pseudo-inverse", "torch.linalg.pinv of the sqrt-kernel-weighted design", _local_alt_pinv),
        Alternative("raw moments in float64", "unnormalised kernel, S0 S2 - S1^2 as a determinant",
                    _local_alt_moments_batched),
    ],
))
