"""Public checks (``check(label, obj)``) and the comparison logic the grader reuses.

A check passes when the student's outcomes agree with the reference's outcomes on
the same calls. When it fails, the student's outcomes are compared with each kept
mistake's outcomes: if one matches, that mistake's hint is shown (the hint names
the likely mistake, never the answer's code); otherwise the check's own hint.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import torch

from .calls import run_call
from .registry import Check, Exercise, get_exercise

PASS, FAIL = "\u2713", "\u2717"  # ✓ ✗
STUB_HINT = "fill in the exercise cell (replace the `raise NotImplementedError`), run it, then run this check again."


@dataclass
class CheckResult:
    label: str
    check: str
    passed: bool
    reason: str = ""
    hint: str = ""
    mistake: Optional[str] = None  # name of the kept mistake the output matched
    points: float = 0.0
    max_points: float = 0.0

    def line(self) -> str:
        if self.passed:
            return f"{PASS} {self.check}"
        text = f"{FAIL} {self.check}: {self.reason}"
        if self.hint:
            text += f"\n    Hint: {self.hint}"
        return text


# ---------------------------------------------------------------- comparisons

def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    if isinstance(value, dict) and "__unsupported__" in value:
        return f"a {value['__unsupported__']}"
    if isinstance(value, dict) and "__seq__" in value:
        return f"a sequence of {len(value['__seq__'])} items"
    if isinstance(value, dict) and "__dict__" in value:
        return f"a dict with keys {sorted(value['__dict__'])}"
    return f"{type(value).__name__} {value!r}"[:80]


def compare_values(got: Any, want: Any, rtol: float, atol: float, where: str = "the result") -> Optional[str]:
    """Return None when ``got`` matches ``want``, else a reason naming what differs."""
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"{where} is {_describe(got)}, expected a torch.Tensor"
        if got.dtype != want.dtype:
            return f"{where} has dtype {got.dtype}, expected {want.dtype}"
        if tuple(got.shape) != tuple(want.shape):
            return f"{where} has shape {tuple(got.shape)}, expected {tuple(want.shape)}"
        if want.dtype == torch.bool or not want.is_floating_point():
            if not torch.equal(got, want):
                return f"{where} has the right shape but wrong values"
            return None
        if not torch.equal(torch.isnan(got), torch.isnan(want)):
            return f"{where} has NaN where it should not (or lacks NaN where expected)"
        g, w = torch.nan_to_num(got.double()), torch.nan_to_num(want.double())
        if not torch.allclose(g, w, rtol=rtol, atol=atol):
            err = (g - w).abs().max().item()
            return f"{where} has the right shape but wrong values (largest difference {err:.3g})"
        return None
    if isinstance(want, bool) or want is None or isinstance(want, str):
        if type(got) is not type(want) or got != want:
            return f"{where} is {_describe(got)}, expected a {type(want).__name__}" if type(got) is not type(want) \
                else f"{where} has the wrong value"
        return None
    if isinstance(want, (int, float)):
        if isinstance(got, torch.Tensor) and got.numel() == 1 and got.dim() == 0:
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return f"{where} is {_describe(got)}, expected a number"
        if isinstance(want, int) and not isinstance(want, bool) and isinstance(got, int):
            return None if got == want else f"{where} has the wrong value"
        if not (math.isfinite(got) or got == want) or not math.isclose(got, want, rel_tol=rtol, abs_tol=atol):
            return f"{where} has the wrong value (off by {abs(got - want):.3g})" if math.isfinite(got) \
                else f"{where} is {got}"
        return None
    if isinstance(want, dict) and "__seq__" in want:
        if not (isinstance(got, dict) and "__seq__" in got):
            return f"{where} is {_describe(got)}, expected a tuple of {len(want['__seq__'])} items"
        if len(got["__seq__"]) != len(want["__seq__"]):
            return f"{where} has {len(got['__seq__'])} items, expected {len(want['__seq__'])}"
        for i, (g, w) in enumerate(zip(got["__seq__"], want["__seq__"])):
            reason = compare_values(g, w, rtol, atol, f"item {i} of {where}")
            if reason:
                return reason
        return None
    if isinstance(want, dict) and "__dict__" in want:
        if not (isinstance(got, dict) and "__dict__" in got):
            return f"{where} is {_describe(got)}, expected a dict"
        if sorted(got["__dict__"]) != sorted(want["__dict__"]):
            return f"{where} has keys {sorted(got['__dict__'])}, expected {sorted(want['__dict__'])}"
        for k in want["__dict__"]:
            reason = compare_values(got["__dict__"][k], want["__dict__"][k], rtol, atol, f"{where}[{k!r}]")
            if reason:
                return reason
        return None
    if isinstance(want, list):  # plain lists appear in extras (names, shapes)
        return None if got == want else f"{where} is {got!r}, expected {want!r}"
    return f"{where} cannot be compared"


def compare_outcome(got: dict, want: dict, check: Check, call=None, require_message: bool = True) -> Optional[str]:
    """Compare one call's outcomes; None when they agree."""
    if want["status"] == "raised":
        if got["status"] != "raised":
            return f"should raise {want['error_type']} for this input, but returned normally"
        if want["error_type"] not in got.get("error_mro", []):
            if got["error_type"] == "NotImplementedError":
                return f"not implemented yet (NotImplementedError: {got['message']})"
            return f"raised {got['error_type']}, expected {want['error_type']}"
        if require_message:
            words = check.must_mention(call) if callable(check.must_mention) else check.must_mention
            missing = [w for w in words if w not in got.get("message", "")]
            if missing:
                return f"the {want['error_type']} message should mention {', '.join(map(repr, missing))}"
        return None
    if got["status"] == "raised":
        if got["error_type"] == "NotImplementedError":
            return f"not implemented yet (NotImplementedError: {got['message']})"
        return f"raised {got['error_type']}: {got['message'][:300]}"
    reason = compare_values(got["value"], want["value"], check.rtol, check.atol)
    if reason:
        return reason
    if "grads" in want:
        reason = compare_values(got.get("grads"), want["grads"], check.rtol, check.atol, "the gradient")
        if reason:
            return reason
    for key, value in want.get("extras", {}).items():
        if got.get("extras", {}).get(key) != value:
            return f"{key.replace('_', ' ')} are {got.get('extras', {}).get(key)!r}, expected {value!r}"
    return None


def compare_all(got: list, want: list, check: Check, calls: list, require_message: bool = True) -> Optional[str]:
    if check.compare is not None:
        return check.compare(got, want, calls)
    for i, (g, w, c) in enumerate(zip(got, want, calls)):
        reason = compare_outcome(g, w, check, c, require_message)
        if reason:
            return reason if len(calls) == 1 else f"call {i + 1} of {len(calls)}: {reason}"
    return None


# ---------------------------------------------------------------- running checks

def outcomes_for(obj: Any, calls: list, kind: str) -> list:
    return [run_call(obj, c, kind) for c in calls]


def judge(exercise: Exercise, check: Check, calls: list, got: list,
          reference_outcomes: Optional[list] = None) -> CheckResult:
    """Decide one check from the student's outcomes ``got`` (computed anywhere).

    The reference and the kept mistakes run here, in the calling (trusted) process.
    """
    want = reference_outcomes if reference_outcomes is not None else \
        outcomes_for(exercise.reference, calls, exercise.kind)
    reason = compare_all(got, want, check, calls)
    if reason is None:
        return CheckResult(exercise.label, check.name, True)
    if any(g["status"] == "raised" and g["error_type"] == "NotImplementedError" for g in got):
        return CheckResult(exercise.label, check.name, False, reason, STUB_HINT)
    for mistake in exercise.mistakes:
        theirs = outcomes_for(mistake.impl, calls, exercise.kind)
        if compare_all(theirs, want, check, calls) is None:
            continue  # this check cannot tell that mistake apart
        if compare_all(got, theirs, check, calls, require_message=False) is None:
            return CheckResult(exercise.label, check.name, False, reason, mistake.hint, mistake.name)
    return CheckResult(exercise.label, check.name, False, reason, check.hint)


def hidden_seed(seed: int, index: int) -> int:
    """The seed of check number ``index`` for a grading run with ``seed``."""
    return (seed * 1_000_003 + 7919 * (index + 1)) % (2**31 - 1)


def run_checks(label: str, obj: Any, hidden: bool = False, seed: Optional[int] = None) -> list:
    """Run an exercise's checks on ``obj``; never raises for a student's mistake.

    Public mode runs the public checks at their fixed seeds. Hidden mode (grading)
    runs every check on inputs drawn from ``seed`` and awards partial credit.
    """
    exercise = get_exercise(label)
    checks = exercise.checks if hidden else exercise.public_checks
    results = []
    for index, check in enumerate(checks):
        check_seed = hidden_seed(seed or 0, index) if hidden else check.seed
        calls = check.make_calls(check_seed)
        got = outcomes_for(obj, calls, exercise.kind)
        result = judge(exercise, check, calls, got)
        result.max_points = exercise.points / len(checks)
        result.points = result.max_points if result.passed else 0.0
        results.append(result)
    return results


def check(label: str, obj: Any = None) -> None:
    """Run the public checks of exercise ``label`` on ``obj`` and print one line each.

    It never raises because of the object under test: a failing, crashing or missing
    implementation prints ✗ lines with a hint. An unknown label is a clear error
    listing the known labels.
    """
    exercise = get_exercise(label)
    module = getattr(obj, "__module__", None) or ""
    if module.split(".")[0] == __name__.split(".")[0]:
        # The package holds finished versions of some exercises (for later chapters);
        # checking one of those would only check the course against itself.
        name = getattr(obj, "__qualname__", type(obj).__name__)
        print(f"{label} \u00b7 {exercise.name}: 0/{len(exercise.public_checks)} public checks passed")
        print(f"  {FAIL} you passed {module}.{name}, the course package's own version, not yours: "
              f"pass the {exercise.name} defined in your exercise cell. (Graded work that calls the "
              f"package's answer to this exercise earns no credit.)")
        return
    results = run_checks(label, obj)
    passed = sum(r.passed for r in results)
    print(f"{label} \u00b7 {exercise.name}: {passed}/{len(results)} public checks passed")
    for r in results:
        print("  " + r.line().replace("\n", "\n  "))
