"""Helpers shared by the exercises of chapter 1 (one copy each).

:func:`moved` turns a hand-made check case into the case graded at a hidden seed (issue 38,
item 4: a release ships the reference's outcomes of every public check, so at grading a public
check must run on inputs of its own). At the check's own seed it gives ``None`` (keep the public
case as it is); at any other seed, a :class:`Move` drawn from that seed only.
"""
from __future__ import annotations

from typing import Optional

import torch

from .._kit import gen


class Move:
    """A seed-dependent move of a point cloud that keeps every exact tie and every order of
    distances: the coordinate axes permuted and flipped, a scale that is a power of two, then a
    shift by whole numbers. On points whose coordinates are small integers or halves (a scale of
    1 or 2) every step is exact in floating point, so equal distances stay exactly equal, and
    every squared distance is multiplied by ``scale ** 2``."""

    def __init__(self, g: torch.Generator, d: int, scales=(1.0, 2.0), shift: int = 6):
        self.g = g
        self.axes = torch.randperm(d, generator=g)
        self.signs = torch.randint(0, 2, (d,), generator=g) * 2.0 - 1.0
        self.scale = float(scales[int(torch.randint(0, len(scales), (1,), generator=g))])
        self.offset = torch.randint(-shift, shift + 1, (d,), generator=g).double()
        if not bool(self.offset.any()):
            self.offset[0] = float(shift)  # never the public case itself

    def __call__(self, points: torch.Tensor) -> torch.Tensor:
        moved = points.double()[:, self.axes] * self.signs.double() * self.scale + self.offset
        return moved.to(points.dtype)

    def order(self, n: int) -> torch.Tensor:
        """A permutation of ``n`` rows (keys with their values, or queries), drawn from the move's
        generator."""
        return torch.randperm(n, generator=self.g)


def moved(seed: int, public_seed: int, d: int, scales=(1.0, 2.0), shift: int = 6) -> Optional[Move]:
    """``None`` at the check's own ``public_seed`` (the public case, as it ships), else a
    :class:`Move` of ``d``-dimensional points drawn from ``seed``."""
    if seed == public_seed:
        return None
    return Move(gen(seed), d, scales, shift)
