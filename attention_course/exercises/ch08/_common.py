"""Helpers shared by the exercises of chapter 8 (one copy each)."""
from __future__ import annotations

import torch


def _lens(g, batch, num_tokens, low=1):
    """Lengths in [low, num_tokens], the first one full."""
    lens = torch.randint(low, num_tokens + 1, (batch,), generator=g)
    lens[0] = num_tokens
    return lens
