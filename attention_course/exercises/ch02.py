"""Chapter 2 exercises: Nadaraya–Watson kernel regression as attention pooling.

* ``ch02_ex1`` – ``gaussian_kernel(distances, width)``: the unnormalised Gaussian kernel.
* ``ch02_ex2`` – ``nadaraya_watson(queries, keys, values, width)``: batched
  Gaussian-kernel attention pooling, returning predictions and weights.
* ``ch02_ex3`` – ``fit_width(keys, values, init_width, lr, num_steps)``: plain gradient
  descent on ``log(width)`` of the leave-one-out squared error.
* ``ch02_ex4`` – ``best_width(keys, values, candidates)``: choose a width among
  candidates by leave-one-out error.

The references below must behave like the solution notebook's exercise cells
(``tests/test_exercises.py`` runs both through the same checks).
"""
from __future__ import annotations

import math

import torch

from ..data import make_regression_1d
from ..registry import Call, Check, Exercise, Mistake, register


def _check_width(width, name="width"):
    if (torch.as_tensor(width) <= 0).any():
        raise ValueError(f"{name} must be positive, got {width!r}")


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
    # A 3-D batch of distances of both signs and a tensor width, as in ch02_ex3.
    distances = 2 * torch.randn(2, 3, 5, generator=g)
    width = torch.tensor(0.3 + torch.rand(1, generator=g).item())
    return [Call(args=(distances, width)), Call(args=(-distances, width))]


def _kernel_bad_calls(seed):
    g = torch.Generator().manual_seed(seed)
    distances = torch.randn(3, 4, generator=g)
    return [Call(args=(distances, 0.0)), Call(args=(distances, -0.5))]


def _kernel_hidden_calls(seed):
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(5, 12, (1,), generator=g))
    distances = 4 * torch.rand(n, n + 2, generator=g) - 2
    widths = [round(0.1 + 1.2 * torch.rand(1, generator=g).item(), 3) for _ in range(2)]
    return [Call(args=(distances, w)) for w in widths]


register(Exercise(
    label="ch02_ex1", title="The Gaussian kernel",
    name="gaussian_kernel", reference=gaussian_kernel, points=2,
    checks=[
        Check("a 4 x 6 matrix of distances, width between 0.4 and 0.9", _kernel_calls, seed=0,
              hint="the kernel is exp of minus the squared distance over twice the squared width; "
                   "it equals 1 at distance 0."),
        Check("a 3-D batch of distances of both signs, tensor width", _kernel_batch_calls, seed=1,
              hint="work elementwise, keep the shape of distances, and let a 0-dim tensor width broadcast."),
        Check("a non-positive width raises ValueError naming width", _kernel_bad_calls, seed=0,
              must_mention=["width"],
              hint="check that width > 0 before computing and raise ValueError mentioning 'width'."),
        Check("random distances and widths (hidden)", _kernel_hidden_calls, public=False, seed=2,
              hint="exp(-(distance squared) / (2 width squared)), elementwise."),
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
        Mistake("no width check", "a width of 0 or below must raise ValueError naming 'width' "
                "(it would divide by zero or flip the kernel's meaning), not return numbers.",
                lambda d, w: torch.exp(-d ** 2 / (2 * w ** 2))),
    ],
))


# ============================================================== ch02_ex2: batched pooling

def nadaraya_watson(queries, keys, values, width):
    """Gaussian-kernel attention pooling; returns (predictions, weights)."""
    _check_nw_shapes(queries, keys, values)
    _check_width(width)
    offsets = queries.unsqueeze(-1) - keys.unsqueeze(-2)          # (batch, q, k)
    weights = torch.softmax(-offsets ** 2 / (2 * width ** 2), dim=-1)
    predictions = torch.bmm(weights, values.unsqueeze(-1)).squeeze(-1)
    return predictions, weights


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
    # The last query lies far from every key: each Gaussian factor underflows to 0.
    queries = torch.cat([torch.rand(2, 2, generator=g), torch.full((2, 1), 4.0)], dim=-1)
    return [Call(args=(queries, keys, values, 0.05))]


def _nw_bad_query_calls(seed):
    g = torch.Generator().manual_seed(seed)
    _, keys, values = _nw_data(g, 2, 3, 5)
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


register(Exercise(
    label="ch02_ex2", title="Nadaraya–Watson pooling, batched",
    name="nadaraya_watson", reference=nadaraya_watson, points=3,
    checks=[
        Check("one batch: 7 queries, 9 keys, width 0.5", _nw_one_calls, seed=0,
              hint="weights[b, i, j] compares query i with key j of batch b; each row of weights "
                   "sums to 1 over the keys, and predictions are the weighted sums of the values."),
        Check("a batch of 3 with 4 queries and 6 keys", _nw_batch_calls, seed=1,
              hint="keep the batches apart: queries of batch b only meet keys and values of batch b."),
        # Scores reach about -2000 here, where float32 rounding alone moves a weight by
        # about 2e-4 (relative) between equally stable formulas: compare at 1e-3. A NaN or
        # an infinity (the unstable formulas) still fails, whatever the tolerance.
        Check("a narrow width and a query far from every key stay finite", _nw_narrow_calls, seed=2,
              rtol=1e-3, atol=1e-6,
              hint="a far query must put (almost) all its weight on its nearest key, not give NaN."),
        Check("queries that are not 2-D raise ValueError naming queries", _nw_bad_query_calls, seed=0,
              must_mention=["queries"],
              hint="check that queries has shape (batch, num_queries) and raise ValueError mentioning 'queries'."),
        Check("keys and values of different shapes raise ValueError naming both", _nw_bad_kv_calls, seed=0,
              must_mention=["keys", "values"],
              hint="check keys.shape against values.shape and raise ValueError mentioning both."),
        Check("a non-positive width raises ValueError naming width", _nw_bad_width_calls, seed=0,
              must_mention=["width"], hint="raise ValueError mentioning 'width' when width <= 0."),
        Check("2 to 4 batches of 20 queries and 30 keys (hidden)", _nw_hidden_calls, public=False, seed=3,
              hint="softmax over the keys of -(query - key)² / (2 width²), then a weighted sum of values."),
        Check("different batch sizes raise ValueError naming queries and keys (hidden)",
              _nw_bad_batch_calls, public=False, seed=0, must_mention=["queries", "keys"],
              hint="queries and keys must have the same batch size; raise ValueError naming both."),
    ],
    mistakes=[
        Mistake("softmax over queries", "your weights are normalised over the queries axis; each "
                "query's weights must sum to 1 over the keys.",
                _nw_from_weights(lambda o, w: torch.softmax(-o ** 2 / (2 * w ** 2), dim=-2))),
        Mistake("forgot the 1/2", "the Gaussian logit is -(query - key)² divided by 2·width²; "
                "you left out the factor 2.",
                _nw_from_weights(lambda o, w: torch.softmax(-o ** 2 / w ** 2, dim=-1))),
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


def _fit_calls(seed):
    data = make_regression_1d(num_train=30, seed=seed)
    return [Call(args=(data.x_train, data.y_train, 1.0, 1.0, 20))]


def _fit_zero_calls(seed):
    data = make_regression_1d(num_train=10, seed=seed)
    return [Call(args=(data.x_train, data.y_train, 0.7, 1.0, 0))]


def _fit_bad_pair_calls(seed):
    data = make_regression_1d(num_train=10, seed=seed)
    return [Call(args=(data.x_train, data.y_train[:9], 1.0, 1.0, 5)),
            Call(args=(data.x_train[None], data.y_train[None], 1.0, 1.0, 5))]


def _fit_bad_width_calls(seed):
    data = make_regression_1d(num_train=10, seed=seed)
    return [Call(args=(data.x_train, data.y_train, 0.0, 1.0, 5)),
            Call(args=(data.x_train, data.y_train, -1.0, 1.0, 5))]


def _fit_hidden_calls(seed):
    g = torch.Generator().manual_seed(seed)
    num_train = int(torch.randint(20, 45, (1,), generator=g))
    noise = round(0.1 + 0.3 * torch.rand(1, generator=g).item(), 3)
    init_width = round(0.4 + 1.2 * torch.rand(1, generator=g).item(), 3)
    lr = round(0.3 + 0.7 * torch.rand(1, generator=g).item(), 3)
    data = make_regression_1d(num_train=num_train, noise=noise, seed=seed)
    return [Call(args=(data.x_train, data.y_train, init_width, lr, 15))]


_FIT_RTOL, _FIT_ATOL = 1e-3, 1e-5  # 20 float32 steps: allow rounding of other loss formulas

register(Exercise(
    label="ch02_ex3", title="Learning the width by gradient descent",
    name="fit_width", reference=fit_width, points=3,
    checks=[
        Check("20 steps from width 1.0 with lr 1.0 on 30 noisy points", _fit_calls, seed=0,
              rtol=_FIT_RTOL, atol=_FIT_ATOL,
              hint="step log(width) by -lr times its gradient; losses[t] is the leave-one-out mean "
                   "squared error before step t; return the final width as a float."),
        Check("zero steps return the initial width and an empty loss history", _fit_zero_calls, seed=1,
              rtol=_FIT_RTOL, atol=_FIT_ATOL,
              hint="with num_steps = 0 return (init_width, an empty float32 tensor)."),
        Check("keys and values not 1-D of one length raise ValueError naming both", _fit_bad_pair_calls,
              seed=0, must_mention=["keys", "values"],
              hint="check that keys and values are 1-D with the same length and raise ValueError naming both."),
        Check("a non-positive init_width raises ValueError naming init_width", _fit_bad_width_calls,
              seed=0, must_mention=["init_width"],
              hint="raise ValueError mentioning 'init_width' when it is <= 0 (its log does not exist)."),
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
        Mistake("loss recorded after the step", "losses[t] must be the loss at the width used for "
                "step t, measured before that step updates it.",
                _fit_mistake(record_after=True)),
    ],
))


# ============================================================== ch02_ex4: choosing a width

def best_width(keys, values, candidates):
    """Leave-one-out MSE per candidate width; returns (best width as float, errors)."""
    _check_1d_pair(keys, values)
    if candidates.dim() != 1 or candidates.numel() == 0:
        raise ValueError(f"candidates must be a non-empty 1-D tensor, got shape {tuple(candidates.shape)}")
    _check_width(candidates, "candidates")
    errors = torch.stack([_loo_loss(keys, values, w) for w in candidates])
    return candidates[errors.argmin()].item(), errors


def _best_mistake(loss_fn, pick=lambda c, e: c[e.argmin()].item()):
    def impl(keys, values, candidates):
        _check_1d_pair(keys, values)
        if candidates.dim() != 1 or candidates.numel() == 0:
            raise ValueError("candidates must be a non-empty 1-D tensor")
        _check_width(candidates, "candidates")
        errors = torch.stack([loss_fn(keys, values, w) for w in candidates])
        return pick(candidates, errors), errors
    return impl


def _loo_abs(keys, values, width):
    logits = -(keys[:, None] - keys[None, :]) ** 2 / (2 * width ** 2)
    logits = logits.masked_fill(torch.eye(keys.numel(), dtype=torch.bool), float("-inf"))
    return (torch.softmax(logits, dim=-1) @ values - values).abs().mean()


def _candidates(g, n):
    return torch.sort(0.03 + 1.5 * torch.rand(n, generator=g)).values


def _best_calls(seed):
    g = torch.Generator().manual_seed(seed)
    data = make_regression_1d(num_train=40, seed=seed)
    return [Call(args=(data.x_train, data.y_train, _candidates(g, 6)))]


def _best_shuffled_calls(seed):
    g = torch.Generator().manual_seed(seed)
    data = make_regression_1d(num_train=25, noise=0.2, seed=seed)
    order = torch.randperm(25, generator=g)  # the keys need not be sorted
    candidates = _candidates(g, 5)[torch.randperm(5, generator=g)]
    return [Call(args=(data.x_train[order], data.y_train[order], candidates))]


def _best_bad_calls(seed):
    data = make_regression_1d(num_train=10, seed=seed)
    return [Call(args=(data.x_train, data.y_train, torch.tensor([0.5, 0.0, 1.0]))),
            Call(args=(data.x_train, data.y_train, torch.tensor([0.3, -0.2])))]


def _best_hidden_calls(seed):
    g = torch.Generator().manual_seed(seed)
    num_train = int(torch.randint(20, 50, (1,), generator=g))
    data = make_regression_1d(num_train=num_train, noise=0.25, seed=seed)
    return [Call(args=(data.x_train, data.y_train, _candidates(g, 10)))]


register(Exercise(
    label="ch02_ex4", title="Choosing the width by leave-one-out error",
    name="best_width", reference=best_width, points=2,
    checks=[
        Check("six candidate widths on 40 noisy points", _best_calls, seed=0,
              hint="errors[j] is the mean squared error of predicting each training value from the "
                   "other training points with width candidates[j]; return the width with the "
                   "smallest error, as a float."),
        Check("unsorted keys and unsorted candidates", _best_shuffled_calls, seed=1,
              hint="nothing may depend on the order of the points or of the candidates."),
        Check("a non-positive candidate raises ValueError naming candidates", _best_bad_calls, seed=0,
              must_mention=["candidates"],
              hint="every candidate width must be > 0; raise ValueError mentioning 'candidates'."),
        Check("fresh data and ten candidates (hidden)", _best_hidden_calls, public=False, seed=5,
              hint="leave-one-out mean squared error per candidate, then the arg-min's width."),
    ],
    mistakes=[
        Mistake("no leave-one-out", "each point helps predict itself, so the smallest width always "
                "looks best; leave the point out of its own prediction.",
                _best_mistake(lambda k, v, w: _loo_loss(k, v, w, leave_one_out=False))),
        Mistake("returned the index", "you returned the position of the best candidate; return "
                "its width (a float).",
                _best_mistake(_loo_loss, pick=lambda c, e: int(e.argmin()))),
        Mistake("absolute error", "the error to compare is the mean *squared* error, not the mean "
                "absolute error.", _best_mistake(_loo_abs)),
    ],
))


# Error-message checks carry at most a fifth of the chapter's points (about 18 %).
from ..registry import REGISTRY as _REGISTRY  # noqa: E402

_ERROR_CHECK_WEIGHTS = [
    ('a non-positive width raises ValueError naming width', '_kernel_bad_calls', 0.5),
    ('queries that are not 2-D raise ValueError naming queries', None, 0.25),
    ('keys and values of different shapes raise ValueError naming both', None, 0.25),
    ('a non-positive width raises ValueError naming width', '_nw_bad_width_calls', 0.25),
    ('different batch sizes raise ValueError naming queries and keys (hidden)', None, 0.25),
    ('keys and values not 1-D of one length raise ValueError naming both', None, 0.3),
    ('a non-positive init_width raises ValueError naming init_width', None, 0.3),
    ('a non-positive candidate raises ValueError naming candidates', None, 0.4),
]
for _name, _calls_name, _weight in _ERROR_CHECK_WEIGHTS:
    _matches = [c for ex in _REGISTRY.values() if ex.chapter == 2 for c in ex.checks
                if c.name == _name and (_calls_name is None or c.make_calls.__name__ == _calls_name)]
    assert len(_matches) == 1, _name
    _matches[0].weight = _weight


# ======================================================================= kept alternatives
# Correct answers in other styles: the checks must accept every one of them.

from ..registry import Alternative  # noqa: E402


def _alt_width_ok(width, name="width"):
    w = width if isinstance(width, torch.Tensor) else torch.tensor(float(width))
    if bool((w <= 0).any()):
        raise ValueError(f"{name} has to be > 0, but {name}={width}")


def _kernel_scaled(distances, width):
    _alt_width_ok(width)
    z = distances / width
    return torch.exp(-0.5 * z * z)


def _kernel_float64(distances, width):
    _alt_width_ok(width)
    w = torch.as_tensor(width, dtype=torch.float64)
    return torch.exp(-distances.double() ** 2 / (2 * w ** 2)).to(distances.dtype)


def _kernel_normal_density(distances, width):
    # The normal density times its constant sqrt(2 pi) * width is the unnormalised kernel.
    _alt_width_ok(width)
    w = torch.as_tensor(width, dtype=distances.dtype)
    normal = torch.distributions.Normal(torch.zeros_like(w), w)
    return (normal.log_prob(distances) + torch.log(w) + 0.5 * math.log(2 * math.pi)).exp()


def _alt_nw_checks(queries, keys, values, width):
    for name, t in (("queries", queries), ("keys", keys), ("values", values)):
        if t.ndim != 2:
            raise ValueError(f"{name}: expected (batch, n), got {t.ndim}-D")
    if keys.shape != values.shape:
        raise ValueError(f"keys {keys.shape} != values {values.shape}")
    if queries.shape[0] != keys.shape[0]:
        raise ValueError(f"queries and keys: batch {queries.shape[0]} vs {keys.shape[0]}")
    if width <= 0:
        raise ValueError(f"width must be positive (width={width})")


def _nw_logsumexp(queries, keys, values, width):
    _alt_nw_checks(queries, keys, values, width)
    logits = -((queries[:, :, None] - keys[:, None, :]) ** 2) / (2 * width ** 2)
    weights = torch.exp(logits - torch.logsumexp(logits, dim=-1, keepdim=True))
    return (weights * values[:, None, :]).sum(-1), weights


def _nw_einsum_float64(queries, keys, values, width):
    _alt_nw_checks(queries, keys, values, width)
    q, k, v = queries.double(), keys.double(), values.double()
    weights = torch.softmax(-(q.unsqueeze(2) - k.unsqueeze(1)).pow(2) / (2 * width * width), dim=2)
    predictions = torch.einsum("bqk,bk->bq", weights, v)
    return predictions.float(), weights.float()


def _nw_d2l_loop(queries, keys, values, width):
    # d2l's unbatched form (repeat each query across the keys), one problem at a time.
    _alt_nw_checks(queries, keys, values, width)
    all_predictions, all_weights = [], []
    for b in range(queries.shape[0]):
        num_keys = keys.shape[1]
        repeated = queries[b].repeat_interleave(num_keys).reshape((-1, num_keys))
        attention_weights = torch.nn.functional.softmax(-((repeated - keys[b]) / width) ** 2 / 2, dim=1)
        all_predictions.append(torch.matmul(attention_weights, values[b]))
        all_weights.append(attention_weights)
    return torch.stack(all_predictions), torch.stack(all_weights)


def _alt_pair_ok(keys, values):
    if keys.ndim != 1 or values.ndim != 1 or len(keys) != len(values) or len(keys) < 2:
        raise ValueError(f"keys {list(keys.shape)} / values {list(values.shape)}: need 1-D, same length >= 2")


def _loo_mse_by_deletion(keys, values, width):
    """Leave-one-out by building the other n-1 points explicitly."""
    errors = []
    for i in range(len(keys)):
        others = torch.cat([torch.arange(i), torch.arange(i + 1, len(keys))])
        w = torch.softmax(-(keys[i] - keys[others]) ** 2 / (2 * width ** 2), dim=0)
        errors.append((values[i] - (w * values[others]).sum()) ** 2)
    return torch.stack(errors).mean()


def _fit_with_sgd(keys, values, init_width, lr, num_steps):
    _alt_pair_ok(keys, values)
    if init_width <= 0:
        raise ValueError(f"init_width={init_width} is not positive")
    log_width = torch.nn.Parameter(torch.tensor(math.log(init_width)))
    optimizer = torch.optim.SGD([log_width], lr=lr)  # plain SGD: no momentum, no decay
    losses = torch.zeros(num_steps)
    for step in range(num_steps):
        optimizer.zero_grad()
        width = log_width.exp()
        logits = -(keys[:, None] - keys[None, :]) ** 2 / (2 * width ** 2)
        logits = logits - 1e9 * torch.eye(len(keys))  # a point never predicts itself
        loss = ((torch.softmax(logits, -1) @ values - values) ** 2).mean()
        loss.backward()
        losses[step] = loss.item()
        optimizer.step()
    return float(log_width.exp()), losses


def _fit_by_deletion_float64(keys, values, init_width, lr, num_steps):
    _alt_pair_ok(keys, values)
    if not init_width > 0:
        raise ValueError(f"init_width must be > 0, got {init_width}")
    k, v = keys.double(), values.double()
    s = torch.tensor(math.log(init_width), dtype=torch.float64, requires_grad=True)
    history = []
    for _ in range(num_steps):
        loss = _loo_mse_by_deletion(k, v, s.exp())
        grad, = torch.autograd.grad(loss, s)
        history.append(float(loss))
        s = (s - lr * grad).detach().requires_grad_(True)
    return math.exp(s.item()), torch.tensor(history, dtype=torch.float32)


def _fit_kernel_ratio(keys, values, init_width, lr, num_steps):
    # Kernel values with a zeroed diagonal, divided by their row sums (fine at these widths).
    _alt_pair_ok(keys, values)
    if init_width <= 0:
        raise ValueError("init_width must be positive")
    s = torch.tensor(math.log(init_width), requires_grad=True)
    losses = []
    off_diagonal = 1.0 - torch.eye(len(keys))
    for _ in range(num_steps):
        kernel = torch.exp(-(keys[:, None] - keys[None, :]) ** 2 / (2 * torch.exp(2 * s))) * off_diagonal
        predictions = (kernel @ values) / kernel.sum(dim=1)
        loss = torch.mean((values - predictions) ** 2)
        loss.backward()
        with torch.no_grad():
            s -= lr * s.grad
        s.grad = None
        losses.append(loss.detach())
    return math.exp(s.item()), torch.stack(losses) if losses else torch.empty(0)


def _alt_candidates_ok(candidates):
    if candidates.ndim != 1 or candidates.numel() == 0 or bool((candidates <= 0).any()):
        raise ValueError(f"candidates must be a non-empty 1-D tensor of positive widths, got {candidates}")


def _best_vectorised(keys, values, candidates):
    _alt_pair_ok(keys, values)
    _alt_candidates_ok(candidates)
    offsets2 = (keys[:, None] - keys[None, :]) ** 2                      # (n, n)
    logits = -offsets2[None] / (2 * candidates[:, None, None] ** 2)      # (m, n, n)
    logits = logits.masked_fill(torch.eye(len(keys), dtype=torch.bool), float("-inf"))
    errors = ((torch.softmax(logits, -1) @ values - values) ** 2).mean(-1)
    return candidates[torch.argmin(errors)].item(), errors


def _best_by_deletion(keys, values, candidates):
    _alt_pair_ok(keys, values)
    _alt_candidates_ok(candidates)
    errors = torch.stack([_loo_mse_by_deletion(keys, values, w) for w in candidates])
    best = 0
    for j in range(1, len(errors)):
        if errors[j] < errors[best]:  # strict: the first of equal errors wins
            best = j
    return float(candidates[best]), errors


def _best_float64(keys, values, candidates):
    _alt_pair_ok(keys, values)
    _alt_candidates_ok(candidates)
    k, v = keys.double(), values.double()
    errors = []
    for width in candidates.double():
        logits = -(k[:, None] - k[None, :]) ** 2 / (2 * width ** 2)
        logits.fill_diagonal_(float("-inf"))
        errors.append(((torch.softmax(logits, -1) @ v - v) ** 2).mean())
    errors = torch.stack(errors).float()
    return candidates[int(errors.argmin())].item(), errors


_REGISTRY["ch02_ex1"].alternatives += [
    Alternative("scaled distance", "exp(-z^2/2) with z = d / width, d2l's gaussian", _kernel_scaled),
    Alternative("float64", "float64 inside, cast back", _kernel_float64),
    Alternative("normal density", "torch.distributions.Normal's log_prob plus its constant", _kernel_normal_density),
]
_REGISTRY["ch02_ex2"].alternatives += [
    Alternative("logsumexp", "exp(s - logsumexp(s)), the stable form of the issue report", _nw_logsumexp),
    Alternative("einsum float64", "float64 inside, einsum for the pooling", _nw_einsum_float64),
    Alternative("d2l loop", "d2l's repeat_interleave form, one problem at a time", _nw_d2l_loop),
]
_REGISTRY["ch02_ex3"].alternatives += [
    Alternative("torch.optim.SGD", "an nn.Parameter and plain SGD; -1e9 on the diagonal", _fit_with_sgd),
    Alternative("deletion float64", "leave-one-out by deleting the point, float64 throughout", _fit_by_deletion_float64),
    Alternative("kernel ratio", "zeroed diagonal, kernel over its row sum; width = exp(s)", _fit_kernel_ratio),
]
_REGISTRY["ch02_ex4"].alternatives += [
    Alternative("vectorised", "all candidates at once as an (m, n, n) tensor", _best_vectorised),
    Alternative("deletion", "explicit deletion, a loop for the first minimum", _best_by_deletion),
    Alternative("float64", "float64 inside, fill_diagonal_", _best_float64),
]
