"""Private checks an instructor adds at grading time, without editing the package.

``attention-course grade ... --extra-checks DIR`` runs every ``DIR/*.py`` (sorted by
name) in the **grader's own process** (trusted instructor code; never in a child).
Each file uses this small API::

    import torch
    from attention_course.tools.grading.extra import add_check, add_exercise
    from attention_course.checks.registry import Call, Check, Exercise

    def _wide_calls(seed):
        g = torch.Generator().manual_seed(seed)
        return [Call(args=(torch.softmax(torch.randn(2, 40, generator=g), -1),
                           torch.randn(40, 3, generator=g)))]

    # one more (private) check on an existing exercise; it runs on a grading seed
    add_check("ch01_ex1", Check("forty keys (private)", _wide_calls, public=False,
                                hint="each output row is a weighted sum of the rows of values."))

    # a new exercise graded from the cells of an existing one (same function)
    add_exercise(Exercise(label="ch01_ex9", title="Pooling, private variant", name="attention_pool",
                          reference=my_reference, points=1,
                          checks=[Check("private", _wide_calls, hint="...")]),
                 cells_from="ch01_ex1")

The grader works on its own copies of the chapter's exercises, so nothing here
changes the registry that the notebooks' public ``check()`` uses.
"""
from __future__ import annotations

import copy
import importlib.util
from pathlib import Path
from typing import Optional

from ...checks.registry import LABEL_RE, Check, Exercise

_CURRENT: Optional["ExerciseTable"] = None


class ExtraChecksError(ValueError):
    """An extra-checks file that cannot be loaded or asks for something impossible."""


class ExerciseTable:
    """The exercises of one grading run (copies), plus where each one's cells are."""

    def __init__(self, exercises: list):
        self.exercises = {}
        self.cells_from = {}
        for ex in exercises:
            self.exercises[ex.label] = copy.copy(ex)
            self.exercises[ex.label].checks = list(ex.checks)
            self.cells_from[ex.label] = ex.label
        self.sources: list = []

    def add_check(self, label: str, check: Check) -> None:
        if label not in self.exercises:
            raise ExtraChecksError(f"add_check: no exercise {label!r} in this chapter "
                                   f"(known: {', '.join(sorted(self.exercises))})")
        if not isinstance(check, Check):
            raise ExtraChecksError("add_check: pass an attention_course.checks.registry.Check")
        if any(c.name == check.name for c in self.exercises[label].checks):
            raise ExtraChecksError(f"add_check: {label} already has a check named {check.name!r}")
        self.exercises[label].checks.append(check)

    def add_exercise(self, exercise: Exercise, cells_from: Optional[str] = None) -> None:
        if not isinstance(exercise, Exercise) or not LABEL_RE.match(exercise.label):
            raise ExtraChecksError("add_exercise: pass an Exercise with a label like ch01_ex9")
        if exercise.label in self.exercises:
            raise ExtraChecksError(f"add_exercise: {exercise.label} already exists; use add_check")
        if not exercise.checks:
            raise ExtraChecksError(f"add_exercise: {exercise.label} has no check")
        exercise = copy.copy(exercise)
        exercise.checks = list(exercise.checks)
        self.exercises[exercise.label] = exercise
        self.cells_from[exercise.label] = cells_from or exercise.label

    def ordered(self) -> list:
        return [self.exercises[k] for k in sorted(self.exercises)]


def add_check(label: str, check: Check) -> None:
    """Append ``check`` to exercise ``label`` for this grading run."""
    if _CURRENT is None:
        raise ExtraChecksError("add_check is only available while the grader loads --extra-checks files")
    _CURRENT.add_check(label, check)


def add_exercise(exercise: Exercise, cells_from: Optional[str] = None) -> None:
    """Grade one more exercise; ``cells_from`` names the exercise whose cells define it."""
    if _CURRENT is None:
        raise ExtraChecksError("add_exercise is only available while the grader loads --extra-checks files")
    _CURRENT.add_exercise(exercise, cells_from)


def load_extra_checks(directory: Path, table: ExerciseTable) -> list:
    """Run every ``*.py`` of ``directory`` against ``table``; return the files loaded."""
    global _CURRENT
    directory = Path(directory)
    if not directory.is_dir():
        raise ExtraChecksError(f"--extra-checks: {directory} is not a folder")
    loaded = []
    for path in sorted(directory.glob("*.py")):
        name = f"_attention_course_extra_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        _CURRENT = table
        try:
            spec.loader.exec_module(module)
        except ExtraChecksError:
            raise
        except Exception as error:
            raise ExtraChecksError(f"--extra-checks: {path.name} raised {type(error).__name__}: {error}") from error
        finally:
            _CURRENT = None
        loaded.append(path.name)
    table.sources += loaded
    return loaded
