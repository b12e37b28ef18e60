"""Issue 38, the lookup row: a notebook that answers from a release's stored outcomes earns nothing.

A release ships the reference's outcomes of every public check on its public inputs (so that
``check()`` works without the reference). Before, 16 public checks of chapters 1-3 were hand-made
cases that ignored their seed, so the grader ran them on those very inputs, and a notebook that
looked its inputs up in the stored outcomes earned 4.25 of chapter 1's points. Now every public check
is graded on inputs drawn from the grading seed (tests/test_public_checks_vary.py).

Here each exercise of chapter 1 is answered by a table of every public call and the reference's
outcome (what ``public_checks/checks.pt`` holds), embedded in the cell: it passes every public
check in the notebook, and earns nothing at grading.
"""
from __future__ import annotations

import base64
import io
import json
import sys
from pathlib import Path

import pytest
import torch

from attention_course.checks.calls import run_call
from attention_course.checks.checking import run_checks
from attention_course.checks.registry import all_exercises
from attention_course.tools.grading.grader import Submission, run_grading
from attention_course.tools.grading.sandbox import Sandbox
from attention_course.tools.notebook import with_exercise_code

ROOT = Path(__file__).resolve().parents[1]
STUDENT_1 = next((ROOT / "chapters").glob("01_*.ipynb"))
EXERCISES = [ex for ex in all_exercises(1) if ex.kind == "function"]

LOOKUP = '''import base64, io, torch
_TABLE = torch.load(io.BytesIO(base64.b64decode({blob!r})), weights_only=True)

def _same(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
                and a.dtype == b.dtype and torch.equal(a, b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b

def _plain(value):
    if isinstance(value, dict) and "__seq__" in value:
        return tuple(_plain(v) for v in value["__seq__"])
    if isinstance(value, dict) and "__list__" in value:
        return [_plain(v) for v in value["__list__"]]
    return value

def {name}(*args, **kwargs):
    for stored_args, stored_kwargs, outcome in _TABLE:
        if _same(list(args), stored_args) and _same(kwargs, stored_kwargs):
            if outcome["status"] == "ok":
                return _plain(outcome["value"])
            raise ValueError(outcome["message"])
    raise ValueError("these inputs are not in the stored outcomes")
'''


def _lookup_code(exercise) -> str:
    """The cell of a student who copied every public call and its stored outcome."""
    table = []
    for check in exercise.public_checks:
        for call in check.make_calls(check.seed):
            table.append((list(call.args), dict(call.kwargs), run_call(exercise.reference, call, exercise.kind)))
    buffer = io.BytesIO()
    torch.save(table, buffer)
    return LOOKUP.format(blob=base64.b64encode(buffer.getvalue()).decode(), name=exercise.name)


@pytest.fixture(scope="module")
def lookup_notebook(tmp_path_factory) -> Path:
    nb = json.loads(STUDENT_1.read_text(encoding="utf-8"))
    for exercise in EXERCISES:
        nb = with_exercise_code(nb, exercise.label, _lookup_code(exercise))
    path = tmp_path_factory.mktemp("lookup") / "lookup.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def test_the_lookup_passes_every_public_check_in_the_notebook():
    """What the table is worth where the stored outcomes apply: every public check passes (so the
    grading test below could fail)."""
    for exercise in EXERCISES:
        namespace = {}
        exec(compile(_lookup_code(exercise), f"<{exercise.label}>", "exec"), namespace)
        results = run_checks(exercise.label, namespace[exercise.name])
        assert results and all(r.passed for r in results), (exercise.label, [r.line() for r in results])


@pytest.mark.skipif(sys.platform != "linux", reason="the grader's sandbox needs Linux")
def test_the_lookup_earns_nothing_at_grading(lookup_notebook, tmp_path):
    with Sandbox(jobs=2, workdir=tmp_path / "sandbox") as box:
        run = run_grading([Submission("lookup", lookup_notebook)], 1, seed=2024, sandbox=box, time_limit=20)
    graded = {e.label: e for e in run.results[0].exercises}
    for exercise in EXERCISES:
        assert graded[exercise.label].points == 0, (exercise.label, graded[exercise.label].summary)
