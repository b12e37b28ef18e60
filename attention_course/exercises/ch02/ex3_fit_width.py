r"""ch02_ex3: Learning the width by gradient descent.

Write `fit_width(keys, values, init_width, lr, num_steps)` that learns the width of
a Gaussian kernel by plain gradient descent on the leave-one-out loss of this
chapter.

* `keys`, `values`: float32, shape `(n,)` with $n \ge 2$: the training inputs and
  targets (they serve as queries too). `init_width` > 0, `lr` > 0: floats;
  `num_steps` ≥ 0: an int.
* Parameter: a float32 scalar $s$, starting at the logarithm of `init_width`; the
  width is $e^{s}$.
* Loss at width $\sigma$: the mean over $i$ of
  $\big(v_i - \sum_{j\ne i} \alpha_{-i}(k_i,k_j)\,v_j\big)^2$, where $\alpha_{-i}$ is the
  softmax over $j \ne i$ of $-(k_i-k_j)^2/(2\sigma^2)$.
* Each step: compute the loss at the current $s$, its gradient $g = \partial L/\partial s$,
  then $s \leftarrow s - \text{lr}\cdot g$ (no momentum, no other change).
* Return `(width, losses)`: `width` $= e^{s}$ after the last step as a Python float,
  and `losses` a float32 tensor of shape `(num_steps,)` whose entry `t` is the loss
  computed *before* step `t` updates $s$. With
  `num_steps = 0`, return `init_width` and an empty tensor.
* Raise `ValueError` (with any message) unless `keys` and `values` are both 1-D with
  the same length $\ge 2$, and when `init_width` is not positive.
"""
from __future__ import annotations

import math

import torch

from ...data import make_regression_1d
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import ERROR_WEIGHT, Kept
from ._common import _check_width

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


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


# Inputs of the public and hidden checks ---------------------------------------------------


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


def _fit_hidden_calls(seed):
    g = torch.Generator().manual_seed(seed)
    num_train = int(torch.randint(20, 45, (1,), generator=g))
    noise = round(0.1 + 0.3 * torch.rand(1, generator=g).item(), 3)
    init_width = round(0.4 + 1.2 * torch.rand(1, generator=g).item(), 3)
    lr = round(0.3 + 0.7 * torch.rand(1, generator=g).item(), 3)
    data = make_regression_1d(num_train=num_train, noise=noise, seed=seed)
    return [Call(args=(data.x_train, data.y_train, init_width, lr, 15))]


_FIT_RTOL, _FIT_ATOL = 1e-3, 1e-5  # 20 float32 steps: allow rounding of other loss formulas


# Kept mistakes, each with its hint --------------------------------------------------------


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


mistakes.add("no leave-one-out",
             "each training point is still one of its own keys, so the loss "
"rewards a width shrinking towards 0; leave the point itself out of its prediction.",
             _fit_mistake(leave_one_out=False))


mistakes.add("stepped the width itself",
             "you took gradient steps on the width; the contract "
"asks for steps on log(width), which keeps the width positive.",
             _fit_mistake(on_log=False))


mistakes.add("summed the errors",
             "the loss is the mean of the squared errors over the training "
"points, not their sum (the sum scales the gradient by the number of points).",
             _fit_mistake(reduce="sum"))


@mistakes.keep("returned log(width)",
               "the losses match but the first item is s = log(width); return "
"the width e^s as a Python float.")
def _fit_log_width(keys, values, init_width, lr, num_steps):
    width, losses = fit_width(keys, values, init_width, lr, num_steps)
    return math.log(width), losses


mistakes.add("loss recorded after the step",
             "losses[t] must be the loss at the width used for "
"step t, measured before that step updates it.",
             _fit_mistake(record_after=True))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("torch.optim.SGD",
                   "the chapter's optimizer loop with loss.backward()")
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


@alternatives.keep("d2l's inverse width",
                   "learns log(1/width), diagonal removed by subtracting inf, "
"F.mse_loss")
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


@alternatives.keep("float64 inside",
                   "every step in float64, losses returned as float32")
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


@alternatives.keep("one point at a time",
                   "each leave-one-out prediction from the other points, in a loop")
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


# Registration -----------------------------------------------------------------------------

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
        Check("bad keys, values or init_width raise ValueError (hidden)", _fit_bad_calls,
              public=False, seed=0, weight=ERROR_WEIGHT,
              hint="calls 1 to 3 pass keys and values of different lengths, not 1-D, or of length 1; "
                   "calls 4 and 5 an init_width <= 0. Each must raise ValueError."),
        Check("fresh data, start and learning rate (hidden)", _fit_hidden_calls, public=False, seed=4,
              rtol=_FIT_RTOL, atol=_FIT_ATOL,
              hint="leave-one-out MSE, plain gradient steps on log(width), losses recorded before each step."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
