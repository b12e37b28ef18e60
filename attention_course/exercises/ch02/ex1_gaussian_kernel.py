r"""ch02_ex1: The Gaussian kernel.

Write `gaussian_kernel(distances, width)` that returns the unnormalised Gaussian
kernel $\exp\!\big(-d^2 / (2\,\text{width}^2)\big)$ of every element $d$ of
`distances`.

* `distances`: a float32 tensor of any shape (signed differences such as
  query − key; the sign must not matter).
* `width`: a positive Python float, or a float32 tensor that broadcasts against
  `distances` (for example a 0-dimensional tensor, or one width per column).
* Gradients flow: when `distances` or a tensor `width` requires grad, the result is
  connected to it by autograd ({ref}`ch02_ex3` learns the width this way).
* Return a float32 tensor of the shape of `distances`; it equals 1 where the
  distance is 0. Do not multiply by the normal density's constant.
* Raise `ValueError` (with any message) when `width` is 0 or negative (for a tensor: when
  any entry is).
"""
from __future__ import annotations

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import ERROR_WEIGHT, Kept
from ._common import _check_width

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def gaussian_kernel(distances, width):
    """exp(-distances**2 / (2 * width**2)), elementwise; 1 at distance 0."""
    _check_width(width)
    return torch.exp(-distances.pow(2) / (2 * width ** 2))


# Inputs of the public and hidden checks ---------------------------------------------------


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


# Kept mistakes, each with its hint --------------------------------------------------------


def _kernel_mistake(transform):
    def impl(distances, width):
        _check_width(width)
        return transform(distances, width)
    return impl


mistakes.add("forgot the 1/2",
             "you divided the squared distance by width squared only: "
"the Gaussian kernel has a factor 2 in the denominator.",
             _kernel_mistake(lambda d, w: torch.exp(-d ** 2 / w ** 2)))


mistakes.add("absolute distance",
             "you used the absolute distance |d| where the Gaussian kernel "
"uses the squared distance d² (that would be a Laplace-like kernel).",
             _kernel_mistake(lambda d, w: torch.exp(-d.abs() / (2 * w ** 2))))


mistakes.add("width not squared",
             "you divided by 2·width instead of 2·width²: "
"the width has the units of a distance, so it must be squared like the distance.",
             _kernel_mistake(lambda d, w: torch.exp(-d ** 2 / (2 * w))))


mistakes.add("width detached",
             "no gradient reaches the tensor width: the kernel was computed from "
"a detached copy of it (or from Python numbers); compute it from width itself with torch "
"operations.",
             _kernel_mistake(lambda d, w: torch.exp(-d ** 2 / (2 * torch.as_tensor(w).detach() ** 2))))


mistakes.add("no width check",
             "a width of 0 or below must raise ValueError "
"(it would divide by zero or flip the kernel's meaning), not return numbers.",
             lambda d, w: torch.exp(-d ** 2 / (2 * w ** 2)))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("d2l's inverse width",
                   "w = 1/width multiplies the distance, as d2l's parameter does")
def _kernel_alt_inverse_width(distances, width):
    # d2l's convention: a parameter w = 1 / width multiplies the distance.
    if not bool(torch.all(torch.as_tensor(width) > 0)):
        raise ValueError("width has to be > 0")
    w = 1.0 / torch.as_tensor(width, dtype=distances.dtype)
    return torch.exp(-((distances * w) ** 2) / 2)


@alternatives.keep("float64 inside",
                   "computed in float64, cast back")
def _kernel_alt_float64(distances, width):
    width64 = torch.as_tensor(width, dtype=torch.float64)
    if width64.le(0).any():
        raise ValueError(f"non-positive width: {width}")
    return torch.exp(-distances.double() ** 2 / (2 * width64 ** 2)).to(distances.dtype)


@alternatives.keep("normal density ratio",
                   "torch.distributions.Normal log_prob minus its peak")
def _kernel_alt_normal_density(distances, width):
    # The normal density divided by its peak value, through log_prob.
    width = torch.as_tensor(width, dtype=distances.dtype)
    if (width <= 0).any():
        raise ValueError(f"width={width} must be positive")
    normal = torch.distributions.Normal(torch.zeros_like(width), width)
    return torch.exp(normal.log_prob(distances) - normal.log_prob(torch.zeros_like(distances)))


@alternatives.keep("Tensor methods",
                   "distances.div(width).square().mul(-0.5).exp()")
def _kernel_alt_halved_ratio(distances, width):
    # The ratio distance / width squared and halved, written with Tensor methods.
    width = torch.as_tensor(width, dtype=distances.dtype)
    if not bool(width.gt(0).all()):
        raise ValueError("gaussian_kernel: every width must be > 0")
    return distances.div(width).square().mul(-0.5).exp()


# Registration -----------------------------------------------------------------------------

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
        Check("a non-positive width raises ValueError", _kernel_bad_calls, seed=0, weight=ERROR_WEIGHT,
              hint="the calls pass a width of 0, a negative width and a tensor of widths with one "
                   "negative entry; each must raise ValueError."),
        Check("random distances and widths, a width per row (hidden)", _kernel_hidden_calls,
              public=False, seed=2,
              hint="exp(-(distance squared) / (2 width squared)), elementwise, with broadcasting."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
