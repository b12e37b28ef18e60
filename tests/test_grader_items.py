"""Item analysis (issue 23): a synthetic class of chapter 1 with known kept mistakes is graded
once, and summary.md, items.csv and misconceptions.csv must count what the class was built with.

Every expected number below comes from how the class is built (which student got which kept
mistake, and which checks a kept mistake fails, by the registry's own test data), never from
the code under test.
"""
from __future__ import annotations

import csv
import json
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from attention_course.checks.checking import CheckResult
from attention_course.tools.grading.grader import Submission, run_grading
from attention_course.tools.grading.items import analyse, md_text, reason_pattern
from attention_course.tools.grading.reports import write_class_reports
from attention_course.tools.grading.synthetic import mistake_source
from attention_course.tools.notebook import with_exercise_code
from attention_course.checks.registry import get_exercise

ROOT = Path(__file__).resolve().parents[1]
SOLUTION_1 = next((ROOT / "solutions").glob("01_*.ipynb"))
STUDENT_1 = next((ROOT / "chapters").glob("01_*.ipynb"))

HOSTILE_MESSAGE = "<script>alert(1)</script> | **bold** [link](http://x) `tick`\nsecond line"

# student -> {exercise: kept mistake's name, or "odd" (a wrong answer no kept mistake explains)}
CLASS = {
    "ref1": {}, "ref2": {},
    "m1": {"ch01_ex1": "divided by num_keys", "ch01_ex2": "zero rows give NaN", "ch01_ex3": "last key on ties"},
    "m2": {"ch01_ex1": "divided by num_keys", "ch01_ex2": "zero rows give NaN", "ch01_ex3": "last key on ties"},
    "m3": {"ch01_ex1": "divided by num_keys", "ch01_ex3": "last key on ties"},
    "m4": {"ch01_ex1": "ignored the weights", "ch01_ex3": "last key on ties"},
    "m5": {"ch01_ex1": "renormalized the weights", "ch01_ex3": "last key on ties"},
    "m6": {"ch01_ex3": "last key on ties"},
    "odd": {"ch01_ex1": "odd", "ch01_ex3": "odd"},
}
ODD = {  # wrong in a way no kept mistake of the exercise is
    "ch01_ex1": "def attention_pool(weights, values):\n    return (weights @ values) * 2\n",
    "ch01_ex3": f"def hard_lookup(queries, keys, values):\n    raise RuntimeError({HOSTILE_MESSAGE!r})\n",
}
ATTEMPTED = len(CLASS)  # every student but the stub, which is graded too and attempts nothing


def _counts(label: str) -> Counter:
    return Counter(m[label] for m in CLASS.values() if label in m and m[label] != "odd")


def _code(label: str, mistake_name: str) -> str:
    if mistake_name == "odd":
        return ODD[label]
    exercise = get_exercise(label)
    mistake = next(m for m in exercise.mistakes if m.name == mistake_name)
    source = mistake_source(exercise, mistake)
    assert source is not None, (label, mistake_name)
    return source


def write_class(folder: Path, students=None) -> None:
    """The synthetic class as notebooks in ``folder``: one per student of CLASS (or of those
    ``students`` of it), the reference notebook with the named answers swapped in, and the
    untouched student notebook as ``stub``."""
    folder.mkdir()
    solution = json.loads(SOLUTION_1.read_text(encoding="utf-8"))
    for student in students or CLASS:
        answers, nb = CLASS[student], solution
        for label, name in answers.items():
            nb = with_exercise_code(nb, label, _code(label, name))
        (folder / f"{student}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    (folder / "stub.ipynb").write_text(STUDENT_1.read_text(encoding="utf-8"), encoding="utf-8")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    if sys.platform != "linux":
        pytest.skip("the grader's sandbox needs Linux")
    base = tmp_path_factory.mktemp("items")
    folder, out = base / "class", base / "out"
    write_class(folder)
    subs = [Submission(p.stem, p) for p in sorted(folder.glob("*.ipynb"))]
    run = run_grading(subs, 1, seed=2323, time_limit=10, memory_mb=400, jobs=2)
    summary = write_class_reports(run.results, run.plan, out, run.log)
    return {"run": run, "out": out, "summary": summary}


def _rows(path: Path) -> list:
    return list(csv.DictReader(path.open(encoding="utf-8")))


def test_ch01_synthetic_class_is_graded_as_built(graded):
    """The class itself: the references at full marks, the stub at zero, each kept mistake's
    answer judged like that mistake (otherwise the counts below would test nothing)."""
    by = {r.student: r for r in graded["run"].results}
    assert by["ref1"].total == by["ref1"].max_total and by["stub"].total == 0
    for student, answers in CLASS.items():
        for er in by[student].exercises:
            seen = {c.mistake for c in er.checks if not c.passed}
            wanted = answers.get(er.label)
            if wanted is None:
                assert er.points == er.max_points, (student, er.label, er.reason)
            elif wanted == "odd":
                assert er.points < er.max_points and seen == {None}, (student, er.label)
            else:
                assert seen == {wanted}, (student, er.label, seen)


def test_ch01_misconceptions_csv_counts_the_kept_mistakes_the_class_was_built_with(graded):
    rows = _rows(graded["out"] / "misconceptions.csv")
    kept = {(r["exercise"], r["mistake"]): int(r["students"]) for r in rows if r["kind"] == "kept mistake"}
    expected = {(label, name): n for label in ("ch01_ex1", "ch01_ex2", "ch01_ex3")
                for name, n in _counts(label).items()}
    assert kept == expected
    for r in rows:
        assert int(r["attempted"]) == ATTEMPTED
    unmatched = Counter(r["exercise"] for r in rows if r["kind"] == "no kept mistake")
    assert unmatched == {"ch01_ex1": 1, "ch01_ex3": 1}
    who = {r["mistake"]: set(r["who"].split("; ")) for r in rows if r["exercise"] == "ch01_ex1"}
    assert who["divided by num_keys"] == {"m1", "m2", "m3"}


def test_ch01_items_csv_counts_passes_per_check(graded):
    rows = _rows(graded["out"] / "items.csv")
    exercise = get_exercise("ch01_ex1")
    assert [r["check"] for r in rows if r["exercise"] == "ch01_ex1"] == [c.name for c in exercise.checks]
    assert {r["attempted"] for r in rows} == {str(ATTEMPTED)}
    assert {r["submissions"] for r in rows} == {str(ATTEMPTED + 1)}
    one = {int(r["check_number"]): r for r in rows if r["exercise"] == "ch01_ex1"}
    # Check 1 (plain pooling): ref1, ref2, m6, and m5 (renormalising weights that already sum to one).
    assert one[1]["passed"] == "4" and float(one[1]["pass_rate"]) == pytest.approx(4 / ATTEMPTED, abs=1e-4)
    # Check 3 (weights not summing to one): m5's renormalisation fails there too.
    assert one[3]["passed"] == "3" and one[3]["top_mistake"] == "divided by num_keys"
    three = {int(r["check_number"]): r for r in rows if r["exercise"] == "ch01_ex3"}
    # Check 3 (a tie picks the first key): only the two references; m1..m6 keep the last key.
    assert three[3]["passed"] == "2" and three[3]["top_mistake"] == "last key on ties"
    assert three[3]["top_mistake_students"] == "6"


def test_ch01_flags_the_one_check_a_shared_mistake_fails(graded):
    rows = _rows(graded["out"] / "items.csv")
    flagged = [(r["exercise"], int(r["check_number"])) for r in rows if r["flagged"] == "1"]
    # ch01_ex3's tie check: 8 answers pass every other check of ch01_ex3 (refs, m1..m6), 2 pass it.
    assert flagged == [("ch01_ex3", 3)]
    reason = next(r["flag_reason"] for r in rows if r["flagged"] == "1")
    assert "2 of the 8 answers" in reason and "'last key on ties'" in reason


def test_ch01_summary_md_names_each_mistake_by_its_hint_with_its_count(graded):
    summary = (graded["out"] / "summary.md").read_text(encoding="utf-8")
    for label in ("ch01_ex1", "ch01_ex2", "ch01_ex3"):
        exercise = get_exercise(label)
        for name, n in _counts(label).items():
            hint = md_text(next(m.hint for m in exercise.mistakes if m.name == name))
            line = next(line for line in summary.splitlines() if hint in line)
            assert f"**{n} student{'s' if n > 1 else ''}**" in line, line
    assert "Checks to look at" in summary and "ch01_ex3 check 3" in summary
    assert "items.png" in summary and (graded["out"] / "items.png").read_bytes()[:4] == b"\x89PNG"
    # The odd answer's own error message reaches summary.md inert.
    assert "<script>" not in summary and "&lt;script&gt;" in summary and "\\*\\*bold\\*\\*" in summary
    table = [line for line in summary.splitlines() if line.startswith("| ")]
    assert all(line.count(" | ") - line.count("\\| ") >= 3 for line in table)


def test_ch01_points_distribution(graded):
    items = {ex.label: ex for ex in graded["summary"]["items"]}
    assert items["ch01_ex2"].distribution[1] == ATTEMPTED - _counts("ch01_ex2").total()
    assert items["ch01_ex3"].full_marks == 2 and items["ch01_ex3"].attempted == ATTEMPTED
    assert sum(items["ch01_ex1"].distribution.values()) == ATTEMPTED


# ------------------------------------------------------------------ without a sandbox


def _result(student, checks, reason="", attempted=True):
    er = NS(label="ch01_ex1", points=0.0, max_points=1.0, checks=checks, reason=reason, attempted=attempted)
    return NS(student=student, exercises=[er])


def _plan():
    exercise = get_exercise("ch01_ex1")
    return NS(chapter=1, exercises=[NS(label="ch01_ex1", exercise=exercise,
                                       checks=[NS(check=c) for c in exercise.checks])])


def test_one_answer_counts_once_per_mistake_however_many_checks_it_fails():
    exercise = get_exercise("ch01_ex1")
    names = [c.name for c in exercise.checks]
    same = [CheckResult("ch01_ex1", n, False, "differs", "h", "divided by num_keys") for n in names]
    forged = [CheckResult("ch01_ex1", n, False, "differs", "h", "not a kept mistake") for n in names]
    stub = [CheckResult("ch01_ex1", n, False, "x", "h") for n in names]
    items = analyse([_result("a", same), _result("b", forged), _result("c", stub, attempted=False)], _plan())[0]
    assert [(m.mistake, len(m.students)) for m in items.mistakes] == [("divided by num_keys", 1)]
    # A name that is no kept mistake of the exercise counts as unexplained, never as a new mistake.
    assert [(m.kind, len(m.students)) for m in items.unmatched] == [("no kept mistake", 1)]
    assert items.attempted == 2 and items.checks[0].attempted == 2


def test_reason_patterns_group_numbers_and_drop_inputs():
    a = reason_pattern("the result has shape (3, 4), expected (3, 5) [inputs: weights (3, 7)]")
    b = reason_pattern("the result has shape (2, 9), expected (2, 8) [inputs: weights (2, 1)]")
    assert a == b == "the result has shape (#, #), expected (#, #)"
    assert reason_pattern("ch01_ex1 float64 \x1b[31m") == "ch01_ex1 float64 \\x1b[#m"
    assert len(reason_pattern("x" * 1000)) == 200


def test_ch01_every_recoverable_kept_mistake_becomes_a_cell_that_behaves_like_it():
    """mistake_source, which builds the synthetic classes (here and in bench/grading.py): each
    kept mistake of chapter 1 whose source is its own, run from its cell in a fresh namespace
    (the chapter's setup cell first, as in a grading child), fails some check like that mistake
    and no check in any other way."""
    from attention_course.checks.checking import hidden_seed, judge, outcomes_for
    from attention_course.tools.notebook import load_cells, setup_code
    from attention_course.checks.registry import all_exercises
    setup = setup_code(load_cells(STUDENT_1))
    recovered = 0
    for exercise in all_exercises(1):
        for mistake in exercise.mistakes:
            source = mistake_source(exercise, mistake)
            if source is None:
                continue
            assert "attention_course.exercises" not in source and "@mistakes" not in source
            namespace: dict = {}
            exec(compile(setup, "setup", "exec"), namespace)
            exec(compile(source, f"{exercise.label}: {mistake.name}", "exec"), namespace)
            answer = namespace[exercise.name]
            seen = set()
            for index, check in enumerate(exercise.checks):
                calls = check.make_calls(hidden_seed(23, index))
                result = judge(exercise, check, calls, outcomes_for(answer, calls, exercise.kind))
                if not result.passed:
                    seen.add(result.mistake)
            assert seen == {mistake.name}, (exercise.label, mistake.name, seen)
            recovered += 1
    # Chapter 1 keeps 31 kept mistakes; the 7 of ch01_ex4 come from a factory and are not recoverable.
    assert recovered >= 24
