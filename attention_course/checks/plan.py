"""The plan of one exercise's checks: which checks run, at which seeds, on which calls, against
which outcomes of the reference.

Every caller builds an exercise's plan with :func:`exercise_plan`: ``check()`` and
:func:`~attention_course.checks.checking.run_checks` in a notebook, ``attention-course progress``,
the grader (its class plan and each student's) and the Gradescope autograder. Public mode takes the
public checks at their fixed seeds; hidden mode takes every check, check number ``i`` at
:func:`hidden_seed` ``(seed, i)``. What only grading needs (extra checks, a student's own seed, the
chapter's setup cell) stays with the grader, which calls this.
"""
from __future__ import annotations

import re
import warnings

from dataclasses import dataclass
from typing import Any, Optional

import torch

from .answers import blocked_answers
from .calls import run_call
from .registry import Check, Exercise


def hidden_seed(seed: int, index: int) -> int:
    """The seed of check number ``index`` for a grading run with ``seed``."""
    return (seed * 1_000_003 + 7919 * (index + 1)) % (2**31 - 1)


def outcomes_for(obj: Any, calls: list, kind: str) -> list:
    return [run_call(obj, c, kind) for c in calls]


def trusted_outcomes_for(obj: Any, calls: list, kind: str) -> list:
    """Outcomes of the course's own code (the reference, a kept mistake) on ``calls``, with its
    warnings silenced: a kept mistake that warns (``.T`` on a batch, say) would otherwise print
    the exercise module's path and the offending line of its code under a student's check."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return outcomes_for(obj, calls, kind)


def reference_outcomes(exercise: Exercise, check: Check, calls: list) -> list:
    """The reference's outcomes on ``calls``: stored with the check in a student build (which
    ships no reference), computed otherwise."""
    if check.stored_outcomes is not None:
        return check.stored_outcomes
    return trusted_outcomes_for(exercise.reference, calls, exercise.kind)


@dataclass
class CheckPlan:
    check: Check
    index: int          # the check's place among the checks planned (its hidden seed's index)
    seed: int
    calls: list
    reference: Optional[list] = None  # the reference's outcomes on these calls (None: not computed)


@dataclass
class ExercisePlan:
    exercise: Exercise
    cells_from: str     # the exercise whose notebook cells define the answer (itself, but for extra checks)
    checks: list        # CheckPlan
    refused: Optional[list] = None  # the library's answers to refuse; computed when first asked for

    @property
    def label(self) -> str:
        return self.exercise.label

    @property
    def blocked(self) -> list:
        """``[[module, attribute, label, message]]``: the library's own answers to the exercise, to
        refuse in a grading child (:mod:`attention_course.checks.answers`)."""
        if self.refused is None:
            self.refused = _answers_to_refuse(self.exercise)
        return self.refused


def _answers_to_refuse(exercise: Exercise) -> list:
    return [list(entry) for entry in blocked_answers(exercise)]


def exercise_plan(exercise: Exercise, seed: Optional[int] = None, *, hidden: bool = False,
                  cells_from: Optional[str] = None, reference: bool = True,
                  keep: Optional[ExercisePlan] = None) -> ExercisePlan:
    """The plan of ``exercise``'s checks.

    Public mode (``hidden=False``): the public checks, each at its own fixed seed. Hidden mode:
    every check, check number ``i`` on the calls drawn from ``hidden_seed(seed or 0, i)``.
    ``reference``: compute the reference's outcomes now (torch's global random state is left as it
    was found) and the answers to refuse; otherwise each check's ``reference`` stays None until
    judged, and the answers are found when first asked for. ``keep``: an earlier
    hidden-mode plan of this exercise whose public checks are kept as they are, only the hidden
    ones drawn afresh (one student's hidden inputs).
    """
    chosen = exercise.checks if hidden else exercise.public_checks
    kept = {cp.index: cp for cp in keep.checks if cp.check.public} if keep is not None else {}
    checks = []
    state = torch.random.get_rng_state() if reference else None
    try:
        for index, check in enumerate(chosen):
            if index in kept:
                checks.append(kept[index])
                continue
            check_seed = hidden_seed(seed or 0, index) if hidden else check.seed
            calls = check.make_calls(check_seed)
            outcomes = reference_outcomes(exercise, check, calls) if reference else None
            checks.append(CheckPlan(check, index, check_seed, calls, outcomes))
    finally:
        if state is not None:
            torch.random.set_rng_state(state)
    if keep is not None:
        return ExercisePlan(exercise, cells_from or keep.cells_from, checks, keep.refused)
    return ExercisePlan(exercise, cells_from or exercise.label, checks,
                        _answers_to_refuse(exercise) if reference else None)


def _sizes(calls: list) -> list:
    """What a check's name may quote of its calls: how many, each tensor's shape, each other argument."""
    def size(value):
        if isinstance(value, torch.Tensor):
            return ("tensor", tuple(value.shape))
        if isinstance(value, (list, tuple)):
            return [size(v) for v in value]
        if isinstance(value, dict):
            return sorted((str(k), size(v)) for k, v in value.items())
        return repr(value)
    return [size([c.args, c.kwargs, c.init_args or (), c.init_kwargs]) for c in calls]


def name_for(exercise: Exercise, check: Check, calls: list, describe) -> str:
    """The name to show for ``check`` run on ``calls`` (a thorough self-check's hidden draw): its own name
    where that holds, that is where the name quotes no number or the calls have the sizes and arguments
    of the check's own seed; otherwise the name marked as the check's own case, then the inputs that did
    run (those of the first call, in the words of ``describe(exercise, call)``)."""
    if not re.search(r"\d", check.name):
        return check.name
    try:
        if _sizes(calls) == _sizes(check.make_calls(check.seed)):
            return check.name
        inputs = describe(exercise, calls[0]) if calls else ""
        inputs = inputs if len(inputs) <= 200 else inputs[:199] + "\u2026"
    except Exception:  # noqa: BLE001 - a name must never stop the checks
        inputs = ""
    # Not "(call 1 of N)": the reason that follows numbers the failing call in those words.
    more = f" (in the first of {len(calls)} calls)" if len(calls) > 1 else ""
    return f"as \u201c{check.name}\u201d, on fresh inputs of other sizes or settings{': ' + inputs + more if inputs else ''}"
