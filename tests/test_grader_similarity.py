"""The similarity report (issue 23): a synthetic chapter-1 class where one student copies
another's ch01_ex3 cell with renamed names, new comments and formatting, and two independent
statements swapped. That pair must be listed first; the exercise's kept alternatives
(independent correct answers) must not be listed against each other or the reference; the
untouched stub is never compared; a hostile cell is escaped in the HTML.

The expected outcomes come from how the class is built, never from the code under test.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from attention_course.tools.grading.grader import discover
from attention_course.tools.grading.similarity import CAVEAT, DEFAULT_THRESHOLD, compare_class, write_similarity
from attention_course.tools.grading.synthetic import mistake_source
from attention_course.tools.notebook import exercise_code, load_cells, with_exercise_code
from attention_course.checks.registry import get_exercise

ROOT = Path(__file__).resolve().parents[1]
STUDENT_1 = next((ROOT / "chapters").glob("01_*.ipynb"))
SOLUTION_1 = next((ROOT / "solutions").glob("01_*.ipynb"))
LABEL = "ch01_ex3"

# ana hands in the reference's answer; bo copies it: every name renamed, the docstring and
# comment rewritten, spacing changed, and the two independent shape checks swapped.
BO = '''def hard_lookup(q, k, v):
    """nearest neighbour lookup"""
    if k.shape[0] != v.shape[0]:
        raise ValueError(f"keys {tuple(k.shape)} and values {tuple(v.shape)} differ in number of rows")
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"queries {tuple(q.shape)} and keys {tuple(k.shape)} differ in size d")
    d = q.unsqueeze(1)  -  k.unsqueeze(0)   # broadcast to (nq, nk, dim)
    idx = d.pow(2).sum(dim = 2).argmin(dim = 1)
    return v[idx]
'''
# mallory and trent hand in the same ch01_ex2 cell, which tries to break out of the report's table.
HOSTILE_LABEL = "ch01_ex2"
HOSTILE_LINE = "</td><script>alert(1)</script>"



def _alternatives() -> dict:
    exercise = get_exercise(LABEL)
    out = {}
    for number, alternative in enumerate(exercise.alternatives, 1):
        source = mistake_source(exercise, alternative)
        assert source is not None, alternative.name
        out[f"alt{number}"] = source
    return out


@pytest.fixture(scope="module")
def class_report(tmp_path_factory):
    folder = tmp_path_factory.mktemp("similarity") / "class"
    folder.mkdir()
    stub = json.loads(STUDENT_1.read_text(encoding="utf-8"))
    references = exercise_code(load_cells(SOLUTION_1))
    answers = {"ana": references[LABEL], "bo": BO, **_alternatives()}
    assert len(answers) >= 5  # at least three alternatives
    for student, code in answers.items():
        nb = with_exercise_code(stub, LABEL, code)  # every other exercise stays the untouched stub
        (folder / f"{student}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    hostile = f"# {HOSTILE_LINE}\n{references[HOSTILE_LABEL]}\nNOTE = {HOSTILE_LINE!r}\n"
    for student in ("mallory", "trent"):
        nb = with_exercise_code(stub, HOSTILE_LABEL, hostile)
        (folder / f"{student}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    (folder / "stub.ipynb").write_text(STUDENT_1.read_text(encoding="utf-8"), encoding="utf-8")
    (folder / "broken.ipynb").write_text("{not json", encoding="utf-8")
    submissions, _ = discover(folder)
    report = compare_class(submissions, 1)
    out = tmp_path_factory.mktemp("similarity-out")
    paths = write_similarity(report, out)
    return report, answers, paths, folder


def test_ch01_ex3_renamed_reordered_copy_is_flagged_first(class_report):
    report, *_ = class_report
    flagged = report.flagged(LABEL)
    assert flagged, "the copy was not flagged"
    top = flagged[0]
    assert {top.student_a, top.student_b} == {"ana", "bo"}
    assert top.score >= DEFAULT_THRESHOLD


def test_ch01_ex3_independent_alternatives_are_not_flagged(class_report):
    report, answers, *_ = class_report
    independent = {name for name in answers if name.startswith("alt")} | {"ana"}  # ana's is the reference
    both = [p for p in report.pairs if p.label == LABEL and {p.student_a, p.student_b} <= independent]
    assert len(both) >= 1  # they were compared (they do share some code)...
    assert not [p for p in report.flagged(LABEL) if {p.student_a, p.student_b} <= independent]  # ...not flagged
    # In the whole class only the two copies are listed.
    assert [(p.label, p.student_a, p.student_b) for p in report.flagged()] == [
        (HOSTILE_LABEL, "mallory", "trent"), (LABEL, "ana", "bo")]


def test_ch01_stub_and_untouched_exercises_are_not_compared(class_report):
    report, answers, *_ = class_report
    assert set(report.cells[LABEL]) == set(answers)  # not "stub", not "broken"
    assert set(report.cells[HOSTILE_LABEL]) == {"mallory", "trent"}
    for label, cells in report.cells.items():
        if label not in (LABEL, HOSTILE_LABEL):
            assert cells == {}, label  # every other exercise is the untouched stub in every notebook
    assert [s for s, _, _ in report.skipped] == ["broken"]


def test_ch01_report_escapes_hostile_code_and_says_worth_a_look(class_report):
    report, _, paths, _ = class_report
    text = paths["html"].read_text(encoding="utf-8")
    assert "<script" not in text and "</td><script" not in text
    assert "&lt;/td&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in text  # mallory's cell, shown escaped
    assert CAVEAT in text
    assert "ana" in text and "<mark>" in text
    rows = list(csv.reader(paths["csv"].open(encoding="utf-8")))
    assert rows[0] == ["exercise", "student_a", "student_b", "score_a", "score_b", "tokens_matched"]
    assert rows[1][:3] == [HOSTILE_LABEL, "mallory", "trent"]
    assert [row[:3] for row in rows if row[0] == LABEL][0] == [LABEL, "ana", "bo"]


def test_ch03_ex3_the_stubs_own_code_is_not_counted(tmp_path):
    """cat and dan keep ch03_ex3's class skeleton from the stub (about three quarters of each
    cell) and each replace its two `raise` lines by a different line of their own. What they
    share is only what everyone was given, so they are compared but not listed."""
    student = next((ROOT / "chapters").glob("03_*.ipynb"))
    nb = json.loads(student.read_text(encoding="utf-8"))
    stub = exercise_code(load_cells(student))["ch03_ex3"]
    raise_init = '        raise NotImplementedError("ch03_ex3: implement AdditiveAttention.__init__")'
    raise_forward = '        raise NotImplementedError("ch03_ex3: implement AdditiveAttention.forward")'
    assert raise_init in stub and raise_forward in stub
    cells = {"cat": stub.replace(raise_init, "        pass").replace(raise_forward, "        pass"),
             "dan": stub.replace(raise_init, "        self.todo = True").replace(raise_forward, "        return None, None")}
    folder = tmp_path / "class"
    folder.mkdir()
    for name, code in cells.items():
        (folder / f"{name}.ipynb").write_text(json.dumps(with_exercise_code(nb, "ch03_ex3", code)), encoding="utf-8")
    report = compare_class(discover(folder)[0], 3)
    assert set(report.cells["ch03_ex3"]) == {"cat", "dan"}
    assert report.boilerplate["ch03_ex3"]
    assert report.flagged() == []


def test_ch01_similarity_command(class_report, tmp_path, capsys):
    from attention_course.tools.cli import main
    folder = class_report[3]
    assert main(["similarity", str(folder), "--chapter", "1", "--out", str(tmp_path / "out")]) == 0
    assert "2 pair(s) at or above 60% similarity (worth a look, not proof of copying)" in capsys.readouterr().out
    assert (tmp_path / "out" / "similarity.html").is_file() and (tmp_path / "out" / "similarity.csv").is_file()
    assert main(["similarity", str(folder), "--chapter", "1", "--threshold", "1.5"]) == 2
    assert "similarity threshold must be in (0, 1], got 1.5" in capsys.readouterr().err
