"""Synthetic data sets that the course generates itself (no download, no files).

Every generator is seeded through a **local** :class:`torch.Generator`, so calling
it never touches (and never depends on) torch's global random state: the same
arguments always give the same tensors, whatever ran before. Each chapter that
needs data adds its generator here, with the chapter that uses it named in the
docstring.

Generators
----------
* :func:`make_regression_1d` – noisy samples of a smooth 1-D function
  (chapter 2, Nadaraya–Watson kernel regression), with :func:`regression_target`
  the noise-free function itself.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Regression1D", "make_regression_1d", "regression_target"]


# ------------------------------------------------------------ chapter 2: 1-D regression

def regression_target(x: torch.Tensor) -> torch.Tensor:
    """The smooth function behind :func:`make_regression_1d`.

    ``f(x) = sin(2x) + 0.4 x``: a wave riding on a slope. On ``[0, 5]`` it has three
    turning points and a trend, so a method that only averages (and ignores where a
    query lies) visibly fails, while a local average with a sensible width can follow
    it. Works elementwise on a tensor of any shape and keeps its dtype.
    """
    return torch.sin(2.0 * x) + 0.4 * x


@dataclass
class Regression1D:
    """A 1-D regression data set (all tensors are float32 and one-dimensional).

    ``x_train`` (sorted ascending) and ``y_train`` are the noisy training pairs,
    ``x_test`` is an evenly spaced grid over the same interval and ``y_test`` holds
    the **noise-free** target at those points, so a test error measures how far a
    fit is from the truth rather than from one draw of the noise. ``noise`` is the
    standard deviation of the noise added to the training targets.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    noise: float

    @property
    def num_train(self) -> int:
        return self.x_train.numel()

    @property
    def num_test(self) -> int:
        return self.x_test.numel()


def make_regression_1d(num_train: int = 50, num_test: int = 100, noise: float = 0.3,
                       low: float = 0.0, high: float = 5.0, seed: int = 0) -> Regression1D:
    """Draw a noisy 1-D regression data set around :func:`regression_target`.

    The ``num_train`` training inputs are drawn uniformly from ``[low, high]`` and
    **sorted**, so that a query × key weight matrix drawn over them shows its
    diagonal band; each target is ``regression_target(x) + noise * eps`` with
    ``eps`` standard normal. The ``num_test`` test inputs form an evenly spaced grid
    on ``[low, high]`` (also sorted) with noise-free targets.

    All randomness comes from a local ``torch.Generator`` seeded with ``seed``.
    Raises ``ValueError`` (naming the argument) for ``num_train < 1``,
    ``num_test < 1``, a negative ``noise`` or ``high <= low``.
    """
    if int(num_train) != num_train or num_train < 1:
        raise ValueError(f"num_train must be a positive integer, got {num_train!r}")
    if int(num_test) != num_test or num_test < 1:
        raise ValueError(f"num_test must be a positive integer, got {num_test!r}")
    if noise < 0:
        raise ValueError(f"noise must be >= 0 (a standard deviation), got {noise!r}")
    if not high > low:
        raise ValueError(f"high must be greater than low, got low={low!r}, high={high!r}")
    generator = torch.Generator().manual_seed(seed)
    # Draw inputs then noise from the same generator, in a fixed order, so that a
    # given seed always pairs the same inputs with the same noise.
    x_train = low + (high - low) * torch.rand(int(num_train), generator=generator)
    x_train, _ = torch.sort(x_train)
    eps = torch.randn(int(num_train), generator=generator)
    y_train = regression_target(x_train) + noise * eps
    x_test = torch.linspace(low, high, int(num_test))
    y_test = regression_target(x_test)
    return Regression1D(x_train=x_train, y_train=y_train, x_test=x_test,
                        y_test=y_test, noise=float(noise))
