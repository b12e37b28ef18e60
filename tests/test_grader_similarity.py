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


def test_ch03_ex2_the_stubs_own_code_is_not_counted(tmp_path):
    """cat and dan keep ch03_ex2's class skeleton from the stub (about three quarters of each
    cell) and each replace its two `raise` lines by a different line of their own. What they
    share is only what everyone was given, so they are compared but not listed."""
    student = next((ROOT / "chapters").glob("03_*.ipynb"))
    nb = json.loads(student.read_text(encoding="utf-8"))
    stub = exercise_code(load_cells(student))["ch03_ex2"]
    raise_init = '        raise NotImplementedError("ch03_ex2: implement AdditiveAttention.__init__")'
    raise_forward = '        raise NotImplementedError("ch03_ex2: implement AdditiveAttention.forward")'
    assert raise_init in stub and raise_forward in stub
    cells = {"cat": stub.replace(raise_init, "        pass").replace(raise_forward, "        pass"),
             "dan": stub.replace(raise_init, "        self.todo = True").replace(raise_forward, "        return None, None")}
    folder = tmp_path / "class"
    folder.mkdir()
    for name, code in cells.items():
        (folder / f"{name}.ipynb").write_text(json.dumps(with_exercise_code(nb, "ch03_ex2", code)), encoding="utf-8")
    report = compare_class(discover(folder)[0], 3)
    assert set(report.cells["ch03_ex2"]) == {"cat", "dan"}
    assert report.boilerplate["ch03_ex2"]
    assert report.flagged() == []


def test_ch01_similarity_command(class_report, tmp_path, capsys):
    from attention_course.tools.cli import main
    folder = class_report[3]
    assert main(["similarity", str(folder), "--chapter", "1", "--out", str(tmp_path / "out")]) == 0
    assert "2 pair(s) at or above 60% similarity (worth a look, not proof of copying)" in capsys.readouterr().out
    assert (tmp_path / "out" / "similarity.html").is_file() and (tmp_path / "out" / "similarity.csv").is_file()
    assert main(["similarity", str(folder), "--chapter", "1", "--threshold", "1.5"]) == 2
    assert "similarity threshold must be in (0, 1], got 1.5" in capsys.readouterr().err


# ------------------------------------------------------------------ known sources and cells read alone
# (issue 39 item 4: the course's published answers are known sources; issue 38 item 6: collusion
# you can see). Expected outcomes again come from how each cell is written.

# A renamed copy of the published solution's ch01_ex3 (solutions/01_*.ipynb): every name changed,
# the comment dropped, the two shape checks kept in their order.
SOLUTION_COPY = '''def hard_lookup(qq, kk, vv):
    """my nearest-key lookup"""
    if qq.shape[1] != kk.shape[1]:
        raise ValueError(f"qq {tuple(qq.shape)} and kk {tuple(kk.shape)} differ in size d")
    if kk.shape[0] != vv.shape[0]:
        raise ValueError(f"kk {tuple(kk.shape)} and vv {tuple(vv.shape)} differ in number of rows")
    diff = qq.unsqueeze(1) - kk.unsqueeze(0)
    best = diff.pow(2).sum(dim=2).argmin(dim=1)
    return vv[best]
'''
# An honest answer in a style neither the solution nor any kept alternative uses.
HONEST = '''def hard_lookup(queries, keys, values):
    n_q, d = queries.shape
    n_k, d_k = keys.shape
    if d != d_k:
        raise ValueError(f"hard_lookup: queries {list(queries.shape)} and keys {list(keys.shape)} need the same d")
    if n_k != values.shape[0]:
        raise ValueError(f"hard_lookup: keys {list(keys.shape)} and values {list(values.shape)} need as many rows")
    picked = []
    for i in range(n_q):
        dist = torch.linalg.vector_norm(keys - queries[i], dim=1)
        picked.append(values[int(torch.nonzero(dist == dist.min())[0])])
    return torch.stack(picked)
'''
# No code of its own: the answer comes from somewhere else.
IMPORTED = "from my_answers import hard_lookup\n"
DELEGATED = '''def hard_lookup(queries, keys, values):
    """Return the value of the nearest key for each query, shape (num_queries, d_v)."""
    return fetch_answer(queries, keys, values)
'''
# A cell that asks another process for its answers (issue 38's SysV attack, in outline).
SERVED = '''import ctypes
libc = ctypes.CDLL(None)

def normalize_weights(scores):
    segment = libc.shmat(libc.shmget(0x5EED, 1 << 20, 0), None, 0)
    return torch.frombuffer(ctypes.string_at(segment, scores.numel() * 4), dtype=torch.float32).view_as(scores)
'''
ALTERNATIVE_NAME = "cdist and one-hot"


def _renamed_alternative() -> str:
    """The kept alternative ALTERNATIVE_NAME of ch01_ex3, from its source, with every name changed."""
    import inspect
    import textwrap
    alternative = next(a for a in get_exercise(LABEL).alternatives if a.name == ALTERNATIVE_NAME)
    source = textwrap.dedent(inspect.getsource(alternative.impl))
    source = source[source.index("def "):]
    for old, new in (("_lookup_alt_cdist_onehot", "hard_lookup"), ("queries", "qs"), ("keys", "ks"),
                     ("values", "vs"), ("nearest", "closest"), ("one_hot", "mask")):
        source = source.replace(old, new)
    return source


def _graded_record(out: Path, folder: Path, earned: dict) -> Path:
    """A class's record.jsonl as `grade CLASS --out DIR` writes it, with the points in ``earned``
    ({student: {label: points}}; every other exercise 0 of 1), for the notebooks in ``folder``."""
    from types import SimpleNamespace
    from attention_course.tools.grading.grader import ExerciseResult, SubmissionResult
    from attention_course.tools.grading.shards import write_class_record
    from attention_course.checks.registry import all_exercises
    results = []
    for student in sorted(earned):
        result = SubmissionResult(student, folder / f"{student}.ipynb", seed=1)
        for exercise in all_exercises(1):
            result.exercises.append(ExerciseResult(exercise.label, exercise.name, exercise.title, 1.0,
                                                   points=earned[student].get(exercise.label, 0.0)))
        results.append(result)
    plan = SimpleNamespace(chapter=1, seed=7, exercises=[], extra_files=())
    return write_class_record(out, plan, results, per_student=True, log_header=[], ignored=[], seconds=1.0)


@pytest.fixture(scope="module")
def known_class(tmp_path_factory):
    folder = tmp_path_factory.mktemp("known") / "class"
    folder.mkdir()
    stub = json.loads(STUDENT_1.read_text(encoding="utf-8"))
    cells = {"sol": {LABEL: SOLUTION_COPY}, "alt": {LABEL: _renamed_alternative()}, "honest": {LABEL: HONEST},
             "imported": {LABEL: IMPORTED}, "delegated": {LABEL: DELEGATED}, "stubby": {},
             "served": {HOSTILE_LABEL: SERVED}, "changed": {LABEL: IMPORTED},
             # moved's answer sits in another exercise's cell, where the grader finds it: its own code
             "moved": {LABEL: "", "ch01_ex1": HONEST}}
    for student, answers in cells.items():
        nb = stub
        for label, code in answers.items():
            nb = with_exercise_code(nb, label, code)
        (folder / f"{student}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    graded = tmp_path_factory.mktemp("graded")
    # Every ch01_ex3 passed (the record says so); served's ch01_ex2 too; everything else earned 0.
    earned = {name: {LABEL: 1.0} for name in cells}
    earned["served"] = {HOSTILE_LABEL: 1.0}
    _graded_record(graded, folder, earned)
    (folder / "changed.ipynb").write_text(json.dumps(with_exercise_code(stub, LABEL, DELEGATED)), encoding="utf-8")
    report = compare_class(discover(folder)[0], 1, graded=graded)
    return report, folder, graded


def _matched(report, student, label=LABEL):
    return [m.known for m in report.flagged_known(label) if m.student == student]


def test_ch01_a_renamed_copy_of_the_published_solution_is_listed_as_such(known_class):
    report, *_ = known_class
    matched = _matched(report, "sol")
    assert [k.kind for k in matched] == ["solution"]
    assert matched[0].description == "matches the course's published solution"
    top = next(m for m in report.flagged_known(LABEL) if m.student == "sol")
    assert top.score >= DEFAULT_THRESHOLD


def test_ch01_a_renamed_copy_of_a_kept_alternative_is_listed_with_its_style(known_class):
    report, *_ = known_class
    matched = _matched(report, "alt")
    assert [(k.kind, k.name) for k in matched] == [("alternative", ALTERNATIVE_NAME)]
    assert matched[0].description == f'matches a published alternative (style "{ALTERNATIVE_NAME}")'


def test_ch01_honest_and_hollow_answers_match_no_published_answer(known_class):
    report, *_ = known_class
    for student in ("honest", "imported", "delegated", "stubby", "served"):
        assert _matched(report, student) == [], student
    assert {m.student for m in report.flagged_known()} == {"sol", "alt"}
    honest = [m for m in report.known_matches if m.student == "honest"]
    assert honest and all(m.score < DEFAULT_THRESHOLD for m in honest)  # compared, not listed


def test_ch01_known_sources_are_never_compared_with_each_other(known_class, tmp_path):
    report, *_ = known_class
    kinds = [k.kind for k in report.known[LABEL]]
    assert kinds.count("solution") == 1 and kinds.count("alternative") == len(get_exercise(LABEL).alternatives)
    # every match has a student's cell on one side, every pair a student's cell on both
    assert report.known_matches and all(m.student in report.cells[m.label] for m in report.known_matches)
    assert all({p.student_a, p.student_b} <= set(report.cells[p.label]) for p in report.pairs)
    # A class of untouched stubs: the known sources are there, and nothing is compared.
    folder = tmp_path / "stubs"
    folder.mkdir()
    for name in ("a", "b"):
        (folder / f"{name}.ipynb").write_text(STUDENT_1.read_text(encoding="utf-8"), encoding="utf-8")
    empty = compare_class(discover(folder)[0], 1)
    assert sum(len(v) for v in empty.known.values()) > 0
    assert empty.known_matches == [] and empty.pairs == []


def test_ch01_the_reference_and_the_alternatives_in_the_first_class_are_known(class_report):
    """In the first class, ana's cell is the reference and bo's its renamed copy; alt1.. are the kept
    alternatives: each is listed against what it copies, and the pairs stay as they were."""
    report, answers, paths, _ = class_report
    assert [k.kind for k in _matched(report, "ana")] == ["solution"]
    assert [k.kind for k in _matched(report, "bo")] == ["solution"]
    alternatives = get_exercise(LABEL).alternatives
    for number, alternative in enumerate(alternatives, 1):
        assert alternative.name in [k.name for k in _matched(report, f"alt{number}") if k.kind == "alternative"]
    text = paths["html"].read_text(encoding="utf-8")
    assert "Copies of the course's published answers" in text
    assert "matches the course&#x27;s published solution" in text
    rows = list(csv.reader(paths["known_csv"].open(encoding="utf-8")))
    assert rows[0] == ["exercise", "student", "known_source", "style", "score_student", "score_source",
                       "tokens_matched"]
    assert any(row[:3] == [LABEL, "bo", "matches the course's published solution"] for row in rows)


def test_ch01_no_code_of_its_own_for_a_passed_exercise_is_flagged(known_class):
    report, *_ = known_class
    own = {(f.student, f.label): f for f in report.findings if f.kind == "no code of its own"}
    assert set(own) == {("imported", LABEL), ("delegated", LABEL), ("stubby", LABEL)}
    assert "defines no function or class" in own[("imported", LABEL)].detail
    assert "hands its arguments on" in own[("delegated", LABEL)].detail
    assert "untouched stub" in own[("stubby", LABEL)].detail
    assert own[("imported", LABEL)].points == 1.0
    assert ("moved", LABEL) not in own and ("sol", LABEL) not in own and ("honest", LABEL) not in own
    # changed's notebook is not the one that was graded: the record says nothing of it.
    assert [s for s, _ in report.not_graded] == ["changed"]


def test_ch01_a_cell_that_reaches_outside_is_flagged(known_class):
    report, *_ = known_class
    outside = [(f.student, f.label, f.detail) for f in report.findings if f.kind == "reaches outside the exercise"]
    assert outside == [("served", HOSTILE_LABEL, "import ctypes")]


def test_ch01_without_a_record_no_passed_cell_is_judged(known_class):
    _, folder, _ = known_class
    report = compare_class(discover(folder)[0], 1)
    assert [f.kind for f in report.findings] == ["reaches outside the exercise"]
    assert report.graded is None and report.not_graded == []


def test_ch01_similarity_command_with_a_graded_record(known_class, tmp_path, capsys):
    from attention_course.tools.cli import main
    _, folder, graded = known_class
    out = tmp_path / "out"
    assert main(["similarity", str(folder), "--chapter", "1", "--out", str(out), "--graded", str(graded)]) == 0
    printed = capsys.readouterr()
    assert "2 cell(s) match one of the course's published answers" in printed.out
    assert "1 cell(s) reach outside the exercise; 3 cell(s) hold no code of their own" in printed.out
    assert "changed (the notebook changed since it was graded)" in printed.err
    rows = list(csv.reader((out / "similarity-own-code.csv").open(encoding="utf-8")))
    assert rows[0] == ["exercise", "student", "finding", "detail", "points", "max_points"]
    assert sorted(row[1] for row in rows[1:]) == ["delegated", "imported", "served", "stubby"]
    text = (out / "similarity.html").read_text(encoding="utf-8")
    assert "no code of its own" in text and "<script" not in text
    # a record of another chapter is refused
    assert main(["similarity", str(folder), "--chapter", "2", "--graded", str(graded), "--out", str(out)]) == 2
    assert "a record of chapter 1, not chapter 2" in capsys.readouterr().err


def test_the_courses_own_answers_hold_code_of_their_own_and_stay_inside():
    """No false finding on a correct answer: every exercise cell of every solution notebook and
    every kept alternative holds code of its own and reaches nothing outside the exercise."""
    from attention_course.checks.registry import all_exercises
    from attention_course.tools.grading.known_sources import known_sources
    from attention_course.tools.grading.own_code import no_own_code, reaches_outside
    seen = 0
    for chapter in range(1, 12):
        for label, sources in known_sources(chapter, all_exercises(chapter)).items():
            for known in sources:
                assert no_own_code(known.source) is None, (label, known.name)
                assert reaches_outside(known.source) == [], (label, known.name, reaches_outside(known.source))
                seen += 1
    assert seen > 100
