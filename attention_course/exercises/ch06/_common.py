"""Helpers shared by the exercises of chapter 6 (one copy each)."""
from __future__ import annotations


def _head_dim(d_out, num_heads):
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive integer, got num_heads={num_heads!r}")
    if d_out % num_heads:
        raise ValueError(f"d_out must be divisible by num_heads, got d_out={d_out} and num_heads={num_heads}")
    return d_out // num_heads


# The seed of every public check (Check.seed's default): at it, a check's make_calls gives the case
# the page prints and a release stores; at grading, any other seed gives a case of the same kind
# drawn from it (issue 38, item 4), so that the stored outcomes look nothing up.
_PUBLIC_SEED = 0
