"""Helpers shared by the exercises of chapter 5 (one copy each)."""
from __future__ import annotations

import torch

from ...checks.checking import tensor_problem
from ...checks.language import N_


def _moved_in_a_stack(allowed, num_layers, residual):
    """Which outputs of a real stack of random float64 attention layers with this mask depend on
    which input tokens: moved[i, j] is True when the Jacobian of output i with respect to token j
    is not zero. (The Jacobian, not a bump and a threshold: a weight of 1e-30 is tiny but not
    zero, and a bump would not see it.) A masked key and a row with no allowed key give exact
    zeros, so a dependence the mask rules out is exactly 0, never a rounding error."""
    n, d = allowed.shape[0], 4
    g = torch.Generator().manual_seed(1000 + 7 * n + num_layers)
    layers = [torch.randn(3, d, d, generator=g, dtype=torch.float64) / d ** 0.5 for _ in range(num_layers)]
    tokens = torch.randn(n, d, generator=g, dtype=torch.float64)
    has_key = allowed.any(dim=-1, keepdim=True)

    def run(x):
        for w in layers:
            q, k, v = x @ w[0], x @ w[1], x @ w[2]
            scores = torch.where(allowed, q @ k.T / d ** 0.5, float("-inf"))
            scores = torch.where(has_key, scores, 0.0)          # a row with no key: finite, then zeroed
            weights = torch.softmax(scores, dim=-1) * has_key
            x = weights @ v + (x if residual else 0)
        return x

    jacobian = torch.autograd.functional.jacobian(run, tokens)     # (n, d, n, d)
    return jacobian.ne(0).any(dim=3).any(dim=1)


def _compare_entries(got, want, calls, judge=None):
    """An answer equal to ``want`` agrees (that is how an answer is matched to a kept mistake);
    otherwise the reason names the call and one entry that differs. With ``judge`` (what moves in a real
    stack of attention layers, never shipped with a release) the entry is judged by it instead of ``want``."""
    for number, (g, w, call) in enumerate(zip(got, want, calls), start=1):
        where = "" if len(calls) == 1 else f"call {number} of {len(calls)}: "
        allowed, num_layers = call.args
        residual = call.kwargs.get("residual", True)
        problem = tensor_problem(g, None, f"{where}the result", raised=where, dtype=torch.bool, shape=allowed.shape)
        if problem:
            return problem
        mine = g["value"]
        if w.get("status") == "ok" and torch.equal(mine, w["value"]):
            continue
        setting = f"{allowed.shape[0]} tokens, num_layers={num_layers}, residual={residual}"
        if judge is None:
            wrong = torch.nonzero(mine != w["value"])
            i, j = wrong[0].tolist()
            return (f"{where}({setting}) entry [{i}, {j}] is {bool(mine[i, j])}, expected "
                    f"{bool(w['value'][i, j])} ({len(wrong)} of {mine.numel()} entries differ)")
        moved = judge(allowed, num_layers, residual)
        wrong = torch.nonzero(mine != moved)
        if len(wrong):
            i, j = wrong[0].tolist()
            does = N_("moves") if moved[i, j] else N_("does not move")  # N_: the feedback's catalog has them
            return (f"{where}in a stack of {num_layers} random float64 attention layers with this mask "
                    f"({setting}), output {i} {does} when token {j} changes, but the result "
                    f"has entry [{i}, {j}] = {bool(mine[i, j])} ({len(wrong)} entries differ)")
    return None


def _compare_with_a_real_stack(got, want, calls):
    return _compare_entries(got, want, calls, judge=_moved_in_a_stack)
