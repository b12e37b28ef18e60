"""Helpers shared by the exercises of chapter 9 (one copy each)."""
from __future__ import annotations

import torch

from ...checks.registry import Check


NEG_INF = float("-inf")


_VALUES = Check("values", lambda seed: [], hint="", rtol=1e-9, atol=0.0)   # for compare_outcome only


def compare_types(got, want, calls):
    """The values first, as the other checks compare them (a whole float or a 0-d tensor of the
    right value passes there); then each value's type, which must be the reference's (a Python
    int for a count of bytes or FLOPs, a Python float for a ratio), field by field of a returned
    dict or record."""
    from ...checks.checking import compare_outcome
    for i, (mine, theirs, call) in enumerate(zip(got, want, calls)):
        where = "" if len(calls) == 1 else f"call {i + 1} of {len(calls)}: "
        reason = compare_outcome(mine, theirs, _VALUES, call)
        if reason:
            return where + reason
        if theirs.get("status") != "ok":
            continue
        for key, value in theirs["value"]["__dict__"].items():
            found = mine["value"]["__dict__"][key]
            if type(found) is not type(value):
                shown = (f"a tensor of shape {tuple(found.shape)}" if isinstance(found, torch.Tensor)
                         else f"{type(found).__name__} {found!r}"[:60])
                return (f"{where}result[{key!r}] is {shown}; the contract asks for a Python "
                        f"{type(value).__name__}")
    return None
