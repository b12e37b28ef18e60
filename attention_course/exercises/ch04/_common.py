"""Helpers shared by the exercises of chapter 4 (one copy each)."""
from __future__ import annotations

import torch


# The chapter's running example: six tokens with hand-chosen 3-d embeddings
# (the same numbers as in the notebook).
TOKENS = ["owls", "hunt", "mice", "on", "quiet", "nights"]


INPUTS = torch.tensor([
    [0.9, 0.2, 0.4],   # owls
    [0.3, 0.9, 0.2],   # hunt
    [0.8, 0.3, 0.1],   # mice
    [0.1, 0.2, 0.3],   # on
    [0.2, 0.4, 0.7],   # quiet
    [0.4, 0.1, 0.9],   # nights
])
