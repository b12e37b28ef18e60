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


def sentence_for(seed: int, public_seed: int = 0) -> torch.Tensor:
    """The chapter's sentence at the check's own seed (the public case, whose outcomes a release
    ships); at a grading seed, the same six embeddings with their tokens and their columns
    reordered (never the order of the page), so stored outcomes look nothing up."""
    if seed == public_seed:
        return INPUTS.clone()
    g = torch.Generator().manual_seed(seed)
    while True:
        rows, cols = torch.randperm(INPUTS.shape[0], generator=g), torch.randperm(INPUTS.shape[1], generator=g)
        if not (torch.equal(rows, torch.arange(len(rows))) and torch.equal(cols, torch.arange(len(cols)))):
            return INPUTS[rows][:, cols].clone()
