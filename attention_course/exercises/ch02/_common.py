"""Helpers shared by the exercises of chapter 2 (one copy each)."""
from __future__ import annotations

import torch


def _check_width(width, name="width"):
    if (torch.as_tensor(width) <= 0).any():
        raise ValueError(f"{name} must be positive, got {width!r}")
