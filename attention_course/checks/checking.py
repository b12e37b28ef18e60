"""Public checks (``check(label, obj)``) and the comparison logic the grader reuses.

A check passes when the student's outcomes agree with the reference's outcomes on
the same calls. When it fails, the student's outcomes are compared with each kept
mistake's outcomes: if one matches, that mistake's hint is shown (the hint names
the likely mistake, never the answer's code); otherwise the check's own hint.
"""
from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Optional

import torch

from .plan import (exercise_plan, hidden_seed, name_for, outcomes_for, reference_outcomes,  # noqa: F401 - hidden_seed
                   trusted_outcomes_for)
from .calls import IN_PLACE_HINT, WRITTEN_IN_PLACE
from .language import FAIL, PASS, check_line, tr
from .registry import Check, Exercise, get_exercise

# In every message of attention_course.checks.answers.no_credit_message (a grading child's too).
NO_CREDIT_MARK = ": no credit for calling it; write your own "

STUB_HINT = "fill in the exercise cell (replace the `raise NotImplementedError`), run it, then run this check again."


def is_stub(outcome: dict) -> bool:
    """Whether one call's outcome is an exercise's stub at work: it raised NotImplementedError."""
    return outcome.get("status") == "raised" and outcome.get("error_type") == "NotImplementedError"


def stub_reason(detail: str) -> str:
    """The words of every stub's feedback (a check's, an exercise's): ``not implemented yet (detail)``."""
    return f"not implemented yet ({detail})"


def _stub_call_reason(outcome: dict) -> str:
    return stub_reason(f"NotImplementedError: {outcome.get('message')}")


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
    stub: bool = False  # the answer is still the exercise's stub (a call raised NotImplementedError)

    def line(self, lang: Optional[str] = None) -> str:
        """The check's line in ``lang`` (default: the reader's, :mod:`.language`)."""
        return check_line(self.passed, self.check, self.reason, self.hint, lang)


# ---------------------------------------------------------------- comparisons

def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    if isinstance(value, dict) and "__unsupported__" in value:
        return f"a {value['__unsupported__']}"
    if isinstance(value, dict) and "__seq__" in value:
        return f"a tuple of {len(value['__seq__'])} items"
    if isinstance(value, dict) and "__list__" in value:
        return f"a list of {len(value['__list__'])} items"
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
        inf_got, inf_want = torch.isinf(got), torch.isinf(want)
        if not torch.equal(inf_got, inf_want) or not torch.equal(got[inf_got], want[inf_want]):
            return f"{where} has an infinity where it should not (or lacks one, or its sign, where expected)"
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
    for key, kind in (("__seq__", "tuple"), ("__list__", "list")):
        if isinstance(want, dict) and key in want:
            if not (isinstance(got, dict) and key in got):
                return f"{where} is {_describe(got)}, expected a {kind} of {len(want[key])} items"
            if len(got[key]) != len(want[key]):
                return f"{where} has {len(got[key])} items, expected {len(want[key])}"
            for i, (g, w) in enumerate(zip(got[key], want[key])):
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


_SHAPE_TEXT = re.compile(r"^\s*[\(\[]\s*(\d+\s*(,\s*\d+\s*)*,?)?\s*[\)\]]\s*$")
_TIMES = re.compile(r"(?<=\d)\s*[x\u00d7*]\s*(?=\d)")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NUMBER = re.compile(r"(?<![A-Za-z_\d.])\d+(?![\d.])")


def _as_shape(word: Any) -> Optional[tuple]:
    """A must_mention item that names a shape, as a tuple of ints (else None)."""
    if isinstance(word, torch.Size) or (isinstance(word, (tuple, list)) and
                                        all(isinstance(n, int) and not isinstance(n, bool) for n in word)):
        return tuple(int(n) for n in word)
    if isinstance(word, str) and _SHAPE_TEXT.match(word):
        return tuple(int(n) for n in re.findall(r"\d+", word))
    return None


def mentions(message: str, word: Any) -> bool:
    """Does an error message mention ``word``?

    A name (an identifier such as ``x`` or ``valid_lens``) must appear as a whole word,
    alone or in the plural; other text must appear as written. A shape (a tuple of ints, or text such as
    ``"(2, 3, 4)"``) is mentioned when its numbers appear in order, one after the
    other, in any usual printed form: ``(2, 3, 4)``, ``torch.Size([2, 3, 4])``,
    ``[2, 3, 4]``, ``2x3x4``, ``(batch=2, num_queries=3, d=4)``. The message names
    the shape either way; how it prints it is the student's choice.
    """
    shape = _as_shape(word)
    if shape is None:
        text = str(word)
        if _IDENTIFIER.match(text):
            # A name counts as a whole word (a plural too): the "x" in "expected" is no mention of x.
            return re.search(rf"(?<![A-Za-z0-9_]){re.escape(text)}s?(?![A-Za-z0-9_])", message) is not None
        return text in message
    if not shape:
        return any(form in message for form in ("()", "[]", "Size([])", "scalar", "0-d", "0-dim"))
    k = len(shape)
    # A closing bracket ends one printed shape: (2, 3) and (4, 5) do not make (3, 4).
    for segment in re.split(r"[\)\]]", _TIMES.sub(", ", message)):
        numbers = [int(n) for n in _NUMBER.findall(segment)]
        if any(tuple(numbers[i:i + k]) == shape for i in range(len(numbers) - k + 1)):
            return True
    return False


def _describe_word(word: Any) -> str:
    shape = _as_shape(word)
    return f"the shape {shape}" if shape is not None else repr(word)


def _comparable(message: Optional[str]) -> str:
    """An error message without the name the answer gave its class: load_state_dict quotes it
    ("Error(s) in loading state_dict for MyAttention: ..."), and a kept mistake's class has its own."""
    return re.sub(r"(state_dict for )[\w.<>]+", r"\1<the layer>", message or "")


def compare_outcome(got: dict, want: dict, check: Check, call=None, require_message: bool = True,
                    same_message: bool = False) -> Optional[str]:
    """Compare one call's outcomes; None when they agree.

    ``same_message`` (used to match an answer to a kept mistake) asks for the same
    error type and the very same message when ``want`` raised.
    """
    if want["status"] == "raised":
        if got["status"] != "raised":
            return f"should raise {want['error_type']} for this input, but returned normally"
        if same_message:
            if got["error_type"] != want["error_type"] or \
                    _comparable(got.get("message")) != _comparable(want.get("message")):
                return "raised another error"
            return None
        if want["error_type"] not in got.get("error_mro", []):
            if is_stub(got):
                return _stub_call_reason(got)
            return f"raised {got['error_type']}: {got['message'][:200]} (expected {want['error_type']})"
        if require_message:
            words = check.must_mention(call) if callable(check.must_mention) else check.must_mention
            missing = [w for w in words if not mentions(got.get("message", ""), w)]
            if missing:
                return (f"the {want['error_type']} message should mention "
                        f"{', '.join(_describe_word(w) for w in missing)}")
        return None
    if got["status"] == "raised":
        if is_stub(got):
            return _stub_call_reason(got)
        return f"raised {got['error_type']}: {got['message'][:300]}"
    reason = compare_values(got["value"], want["value"], check.rtol, check.atol)
    if reason:
        return reason
    if "grads" in want:
        grads = got.get("grads")
        if isinstance(grads, dict) and "__unsupported__" in grads:
            # e.g. a forward under torch.no_grad, or a result built from detached tensors
            return "no gradient reaches the inputs: the output is not connected to them by autograd"
        reason = compare_values(grads, want["grads"], check.rtol, check.atol, "the gradient")
        if reason:
            return reason
    reason = _written_in_place(got, want)
    if reason:
        return reason
    for key, value in want.get("extras", {}).items():
        if key == WRITTEN_IN_PLACE:
            continue
        if got.get("extras", {}).get(key) != value:
            return f"{key.replace('_', ' ')} are {got.get('extras', {}).get(key)!r}, expected {value!r}"
    return None


def _written_in_place(got: dict, want: dict) -> Optional[str]:
    """What a call with ``report=("inputs_unchanged",)`` changed in place that ``want``'s did not."""
    if got.get("status") != "ok" or WRITTEN_IN_PLACE not in want.get("extras", {}):
        return None
    try:
        theirs = [slot for slot, _ in want["extras"][WRITTEN_IN_PLACE]]
        extra = [name for slot, name in got.get("extras", {}).get(WRITTEN_IN_PLACE, []) if slot not in theirs]
    except (TypeError, ValueError):
        return "the record of the arguments the call changed is malformed"
    if not extra:
        return None
    names = " and ".join(str(n) for n in extra)
    return f"the call changed its argument{'s' if len(extra) > 1 else ''} {names} in place: it must leave its inputs " \
           f"as they were given"


def compare_all(got: list, want: list, check: Check, calls: list, require_message: bool = True,
                same_message: bool = False) -> Optional[str]:
    if check.compare is not None and not (same_message and _any_raised(want)):
        for i, (g, w) in enumerate(zip(got, want)):   # a custom compare reads values; inputs are read here
            reason = _written_in_place(g, w)
            if reason:
                return reason if len(calls) == 1 else f"call {i + 1} of {len(calls)}: {reason}"
        return check.compare(got, want, calls)
    for i, (g, w, c) in enumerate(zip(got, want, calls)):
        reason = compare_outcome(g, w, check, c, require_message, same_message)
        if reason:
            return reason if len(calls) == 1 else f"call {i + 1} of {len(calls)}: {reason}"
    return None


def tensor_problem(got: dict, want: Optional[dict] = None, where: str = "the result",
                   raised: Optional[str] = None, dtype=None, shape=None) -> Optional[str]:
    """What a custom compare says first of one call's outcome ``got``, before comparing it: the
    stub's words, the error it raised (after ``raised``, by default ``where`` and a space), that it
    returned where ``want`` raised (``want`` None: not asked), or that its value is no tensor of
    the dtype and shape expected (``dtype``, ``shape``; by default ``want``'s). None: a tensor to compare."""
    if got.get("status") != "ok":
        if is_stub(got):
            return _stub_call_reason(got)
        return f"{where + ' ' if raised is None else raised}raised {got.get('error_type')}: " \
               f"{str(got.get('message'))[:300]}"
    if want is not None and want.get("status") != "ok":
        return f"{where} was returned where the other answer raised"
    mine = got["value"]
    if not isinstance(mine, torch.Tensor):
        return f"{where} is a {type(mine).__name__}, expected a torch.Tensor"
    dtype = want["value"].dtype if dtype is None else dtype
    if mine.dtype != dtype:
        return f"{where} has dtype {mine.dtype}, expected {dtype}"
    shape = tuple(want["value"].shape) if shape is None else tuple(shape)
    if tuple(mine.shape) != shape:
        return f"{where} has shape {tuple(mine.shape)}, expected {shape}"
    return None


def _describe_input(value: Any) -> str:
    if isinstance(value, dict) and "__course_module__" in value:     # a layer given as plain data
        return f"a {value['__course_module__']} in {'training' if value.get('train') else 'eval'} mode"
    if isinstance(value, torch.Tensor):
        return f"of shape {tuple(value.shape)}" + ("" if value.dtype == torch.float32 else f" ({value.dtype})")
    if isinstance(value, (list, tuple)) and len(value) <= 6:
        return "(" + ", ".join(_describe_input(v) for v in value) + ")"
    return _describe(value) if not isinstance(value, (int, float, bool, str, type(None))) else repr(value)[:40]


def describe_inputs(exercise: Exercise, call) -> str:
    """The inputs of one call, by the reference's argument names: "weights of shape (3, 5), ..."."""
    import inspect
    target = exercise.reference
    args, kwargs = list(call.args), dict(call.kwargs)
    if exercise.kind == "class":
        target = getattr(target, call.method or "forward", target)
    try:
        names = [n for n in inspect.signature(target).parameters if n != "self"]
    except (TypeError, ValueError):
        names = []
    if exercise.input_names is not None:  # a student build stores the names, not the reference
        names = list(exercise.input_names.get(call.method or "forward", []) if exercise.kind == "class"
                     else exercise.input_names)
    parts = [f"{names[i] if i < len(names) else f'argument {i + 1}'} {_describe_input(a)}"
             for i, a in enumerate(args)]
    parts += [f"{k} {_describe_input(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)


def _first_failing_call(got: list, want: list, check: Check, calls: list) -> Optional[int]:
    if check.compare is not None:
        return None
    for i, (g, w, c) in enumerate(zip(got, want, calls)):
        if compare_outcome(g, w, check, c) is not None:
            return i
    return None


def _with_inputs(reason: str, exercise: Exercise, check: Check, calls: list, got: list, want: list) -> str:
    """A shape or an error is easier to fix knowing what went in: name the failing call's inputs."""
    index = _first_failing_call(got, want, check, calls)
    if index is None:
        return reason
    outcome = got[index]
    shape_problem = "has shape" in reason or (outcome.get("status") == "raised" and not is_stub(outcome)
                                              and want[index].get("status") != "raised")
    if not shape_problem:
        return reason
    try:
        inputs = describe_inputs(exercise, calls[index])
    except Exception:  # noqa: BLE001 - a description must never hide the reason itself
        return reason
    return f"{reason} [inputs: {inputs}]" if inputs else reason


def _any_raised(outcomes: list) -> bool:
    return any(o.get("status") == "raised" for o in outcomes)


# ---------------------------------------------------------------- running checks

def judge(exercise: Exercise, check: Check, calls: list, got: list,
          reference: Optional[list] = None) -> CheckResult:
    """Decide one check from the student's outcomes ``got`` (computed anywhere).

    The reference (unless its outcomes ``reference`` are given) and the kept mistakes run here,
    in the calling (trusted) process, with their warnings silenced (the student's answer has
    already run: what it warned was shown).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _judge(exercise, check, calls, got, reference)


def _judge(exercise: Exercise, check: Check, calls: list, got: list, reference: Optional[list]) -> CheckResult:
    want = reference if reference is not None else reference_outcomes(exercise, check, calls)
    reason = compare_all(got, want, check, calls)
    if reason is None:
        return CheckResult(exercise.label, check.name, True)
    if any(is_stub(g) for g in got):
        return CheckResult(exercise.label, check.name, False, reason, STUB_HINT, stub=True)
    refused = next((g["message"] for g in got if g.get("status") == "raised"
                    and NO_CREDIT_MARK in str(g.get("message", ""))), None)
    if refused:  # the course's own answer was called: no hint of a mistake applies
        return CheckResult(exercise.label, check.name, False, refused, "")
    reason = _with_inputs(reason, exercise, check, calls, got, want)
    for mistake in exercise.mistakes:
        if mistake.stored_outcomes is not None:
            theirs = mistake.stored_outcomes.get(check.name)
            if theirs is None:
                continue
        else:
            theirs = trusted_outcomes_for(mistake.impl, calls, exercise.kind)
        if compare_all(theirs, want, check, calls) is None:
            continue  # this check cannot tell that mistake apart
        # The hint of a mistake is shown only when the answer behaves like it on the same
        # calls: the same values, or the same error type and the same message.
        if compare_all(got, theirs, check, calls, same_message=True) is None:
            return CheckResult(exercise.label, check.name, False, reason, mistake.hint, mistake.name)
    hint = IN_PLACE_HINT if " in place: it must leave its inputs" in reason else check.hint   # an unkept in-place change
    return CheckResult(exercise.label, check.name, False, reason, hint)


def check_points(exercise: Exercise, check: Check, checks: Optional[list] = None) -> float:
    """The points ``check`` carries: the exercise's points split among ``checks`` (all of
    them by default) by weight."""
    checks = exercise.checks if checks is None else checks
    total = sum(c.weight for c in checks)
    return exercise.points * check.weight / total if total > 0 else 0.0


class CheckTimeout(BaseException):
    """Raised inside a student's code when a public check takes too long.

    A BaseException, so that the ``except Exception`` of the student's code (and of
    :func:`run_call`) does not swallow it.
    """


DEFAULT_TIME_LIMIT = float(os.environ.get("ATTENTION_COURSE_CHECK_TIME_LIMIT", "20"))


@contextlib.contextmanager
def _time_limit(seconds: Optional[float]):
    """Interrupt the block with :class:`CheckTimeout` after ``seconds`` of wall time.

    In the main thread on Unix (a Jupyter kernel runs cells there) SIGALRM does it,
    re-armed every 0.2 s in case the student's code catches the first one. Elsewhere
    a timer thread raises the exception asynchronously in this thread. Either way,
    Python code is interrupted between two bytecodes; one long C call (a huge matrix
    product) finishes first.
    """
    if not seconds or seconds <= 0:
        yield
        return
    if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
        def _on_alarm(signum, frame):
            raise CheckTimeout()
        previous = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds, 0.2)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        return
    import ctypes
    target = threading.get_ident()
    done = threading.Event()

    def _interrupt():
        while not done.wait(seconds if not _interrupt.fired else 0.2):
            _interrupt.fired = True
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(target), ctypes.py_object(CheckTimeout))
    _interrupt.fired = False
    timer = threading.Thread(target=_interrupt, daemon=True)
    timer.start()
    try:
        yield
    finally:
        done.set()
        timer.join()
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(target), None)


def run_checks(label: str, obj: Any, hidden: bool = False, seed: Optional[int] = None,
               time_limit: Optional[float] = None, refuse_answers: bool = False,
               exercise: Optional[Exercise] = None, first_failure: bool = False, true_names: bool = False) -> list:
    """Run an exercise's checks on ``obj``; never raises for a student's mistake.

    Public mode runs the public checks at their fixed seeds. Hidden mode (grading)
    runs every check on inputs drawn from ``seed`` and awards partial credit, each
    check carrying its weight's share of the exercise's points. With ``time_limit``
    (seconds per check), a check whose calls take longer fails with a clear reason
    and the remaining checks are not run. With ``refuse_answers`` (what ``check()``
    does), the course's own answers to this exercise raise while ``obj`` runs, as in
    the grading child (:mod:`attention_course.checks.answers`); kept alternatives that adapt
    the library are checked without it. With ``first_failure``, the results end at the first
    check that fails (what a test needs to know of a wrong answer: that some check catches it).
    With ``true_names`` (hidden mode in ``check(..., thorough=True)``), a check whose name quotes sizes
    and whose calls here have other sizes than at its own seed is named for what ran (:func:`plan.name_for`).
    """
    from .answers import answers_refused
    exercise = exercise or get_exercise(label)
    # The reference runs when a check is judged, after the answer (and not for the checks left unrun).
    plan = exercise_plan(exercise, seed, hidden=hidden, reference=False)
    checks = [cp.check for cp in plan.checks]
    results = []
    timed_out = False
    for cp in plan.checks:
        check, calls = cp.check, cp.calls
        max_points = check_points(exercise, check, checks)
        if timed_out:
            results.append(CheckResult(exercise.label, check.name, False,
                                       "not run: an earlier check took too long", "", None, 0.0, max_points))
            continue
        try:
            with _time_limit(time_limit), \
                    (answers_refused(exercise) if refuse_answers else contextlib.nullcontext()):
                got = outcomes_for(obj, calls, exercise.kind)
        except CheckTimeout:
            timed_out = True
            results.append(CheckResult(
                exercise.label, check.name, False,
                f"took longer than {time_limit:g} s \u2014 an infinite loop?",
                "look for a loop whose condition never changes, or a recursion without a base case.",
                None, 0.0, max_points))
            continue
        result = judge(exercise, check, calls, got)
        if true_names and hidden:
            result.check = name_for(exercise, check, calls, describe_inputs)
        result.max_points = max_points
        result.points = result.max_points if result.passed else 0.0
        results.append(result)
        if first_failure and not result.passed:
            break
    return results


def check(label: str, obj: Any = None, time_limit: Optional[float] = None, thorough: bool = False) -> None:
    """Run the public checks of exercise ``label`` on ``obj`` and print one line each.

    With ``thorough=True`` (self-study), every check runs, the hidden ones included, on inputs
    drawn from a fresh random seed, with their feedback and no points: an answer that passes the
    public checks but fails on inputs they do not try is found before grading does.

    It never raises because of the object under test: a failing, crashing, missing or
    endless implementation prints ✗ lines with a hint. Each check may take at most
    ``time_limit`` seconds (default 20, or the environment variable
    ``ATTENTION_COURSE_CHECK_TIME_LIMIT``); after that it prints ✗ and returns, and
    the kernel stays usable. An unknown label is a clear error listing the known labels.
    """
    exercise = get_exercise(label)
    kind = "checks" if thorough else "public checks"
    count = len(exercise.checks) if thorough else len(exercise.public_checks)
    module = getattr(obj, "__module__", None) or ""
    if module.split(".")[0] == __name__.split(".")[0]:
        # The package holds finished versions of some exercises (for later chapters);
        # checking one of those would only check the course against itself.
        name = getattr(obj, "__qualname__", type(obj).__name__)
        _say(f"{label} \u00b7 {exercise.name}: 0/{count} {kind} passed")
        _say(f"  {FAIL} you passed {module}.{name}, the course package's own version, not yours: "
              f"pass the {exercise.name} defined in your exercise cell. (Graded work that calls the "
              f"package's answer to this exercise earns no credit.)")
        return
    from .answers import refusal_for
    refused = refusal_for(exercise, obj)
    if refused:
        # The grader refuses this class where the cell defines it: say so in its words.
        _say(f"{label} \u00b7 {exercise.name}: 0/{count} {kind} passed")
        _say(f"  {FAIL} {refused}")
        return
    from .calls import kernels_compiled
    compiled = kernels_compiled(exercise)
    if compiled:
        _say(f"{label} \u00b7 {exercise.name}: 0/{count} {kind} passed")
        _say(f"  {FAIL} {compiled}")
        return
    limit = DEFAULT_TIME_LIMIT if time_limit is None else time_limit
    if thorough and exercise.stored:
        _say(f"{label} \u00b7 {exercise.name}: the thorough self-check is not part of this release; "
              f"the hidden checks run when your work is graded. The public checks:")
        thorough = False
    if thorough:
        import secrets
        seed = secrets.randbelow(2 ** 31)
        results = run_checks(label, obj, hidden=True, seed=seed, time_limit=limit, refuse_answers=True,
                             true_names=True)
        passed = sum(r.passed for r in results)
        _say(f"{label} \u00b7 {exercise.name}: {passed}/{len(results)} checks passed on fresh inputs "
              f"(seed {seed}; the hidden checks included; no points)")
    else:
        results = run_checks(label, obj, time_limit=limit, refuse_answers=True)
        passed = sum(r.passed for r in results)
        _say(f"{label} \u00b7 {exercise.name}: {passed}/{len(results)} public checks passed")
    for r in results:
        print("  " + _printable(r.line()).replace("\n", "\n  "))


def _say(text: str) -> None:
    print(tr(text))  # check()'s own lines, in the reader's language


def _printable(text: str) -> str:
    """``text`` with every control or format character but line breaks and tabs escaped: an answer's
    error message (an OSC 52 clipboard write, a screen clear) reaches no terminal raw. The same rule as
    ``tools.notebook.printable``, which the check engine may not import (:mod:`attention_course.rooms`)."""
    import unicodedata
    return "".join(c if c in "\n\t" or unicodedata.category(c) not in ("Cc", "Cf", "Cs", "Co", "Zl", "Zp")
                   else f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}" if ord(c) < 0x10000
                   else f"\\U{ord(c):08x}" for c in str(text))
