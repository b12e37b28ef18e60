"""Helpers shared by several of chapter 10's exercises."""
from __future__ import annotations

from .._kit import gen


def public_or_drawn(seed, public_seed, public_cases, draw):
    """The list ``public_cases`` at ``public_seed``; at any other seed, ``draw(g)`` from that seed's
    generator, drawn again for as long as it repeats the public cases (so that grading never runs
    on the inputs whose outcomes a release ships)."""
    if seed == public_seed:
        return list(public_cases)
    g = gen(seed)
    cases = draw(g)
    while cases == list(public_cases):
        cases = draw(g)
    return cases
