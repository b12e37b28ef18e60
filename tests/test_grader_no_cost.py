"""Issue 38, item 3: no student can cost another.

Each row was measured against the grader before its fix: a child that left 2,500 nested folders in
its scratch folder made ``shutil.rmtree`` raise RecursionError (no grades.csv for anyone); one class
file that could not be written stopped the others; a submission folder named with 85 CJK letters
(255 bytes, a legal name) made its feedback file's name too long; ``progress`` printed an exercise's
error message raw (a clipboard write, a screen clear); a grader-side ENOSPC read as the student's
``sys.exit()``; a child that filled the disk for 8 s cost four honest classmates graded meanwhile
all their points (every scratch folder and outcome file shared the grader's disk).
"""
from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path

import pytest

from attention_course.checks.registry import all_exercises
from attention_course.tools.grading import sandbox as sandbox_module
from attention_course.tools.grading.classrun import ClassGraded, GradeOptions, grade, write_class_files
from attention_course.tools.grading.grader import Grader, Submission, build_plan, discover, run_grading
from attention_course.tools.grading.grader_io import rmtree
from attention_course.tools.grading.reports import ClassReportsError, feedback_names, write_class_reports
from attention_course.tools.grading.sandbox import Sandbox
from attention_course.tools.notebook import with_exercise_code

ROOT = Path(__file__).resolve().parents[1]
SOLUTION_1 = next((ROOT / "solutions").glob("01_*.ipynb"))
CHAPTER1_POINTS = sum(ex.points for ex in all_exercises(1))
FIRST = all_exercises(1)[0]
ESCAPES = "\\x1b]52;c;aGk=\\x07\\x1b[2J"  # an OSC 52 clipboard write, a screen clear (as source text)

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="the grader's sandbox needs Linux")


def _solution() -> dict:
    return json.loads(SOLUTION_1.read_text(encoding="utf-8"))


def _solution_code(label: str) -> str:
    from attention_course.tools.notebook import exercise_code, load_cells
    return exercise_code(load_cells(SOLUTION_1))[label]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    with Sandbox(jobs=2, workdir=tmp_path_factory.mktemp("sandbox")) as box:
        yield box


class _NoChildren:
    """A sandbox for submissions that never reach a child (unreadable ones)."""
    jobs = 1

    def write_calls(self, name, calls):
        return f"/nonexistent/{name}.pt"


def _graded_without_children(subs: list) -> tuple:
    plan = build_plan(1, 3)
    return Grader(plan, _NoChildren()).grade(subs), plan


# ------------------------------------------------------------------ 1. cleanup never recurses nor raises

DEEP = """import os
_here = os.getcwd()
for _ in range(2500):
    os.mkdir("d")
    os.chdir("d")
with open("leftover.txt", "w") as _f:
    _f.write("deep")
os.chmod(".", 0o500)
os.chdir(_here)
"""


@linux_only
def test_a_child_that_leaves_2500_nested_folders_costs_nobody(tmp_path):
    class_dir = tmp_path / "class"
    class_dir.mkdir()
    deep = with_exercise_code(_solution(), FIRST.label, DEEP + _solution_code(FIRST.label))
    (class_dir / "deep.ipynb").write_text(json.dumps(deep), encoding="utf-8")
    (class_dir / "honest.ipynb").write_text(json.dumps(_solution()), encoding="utf-8")
    out = tmp_path / "grades"
    done = grade(class_dir, 1, GradeOptions(seed=3, jobs=2), out=out)
    assert isinstance(done, ClassGraded)
    assert (out / "grades.csv").is_file() and (out / "record.jsonl").is_file()
    totals = {r.student: r for r in done.files.results}
    assert totals["honest"].total == CHAPTER1_POINTS
    first = next(e for e in totals["deep"].exercises if e.label == FIRST.label)
    assert first.points == FIRST.points, first.summary  # its normal outcome: the answer is right
    assert totals["deep"].total == CHAPTER1_POINTS
    assert done.files.problems == []


def test_removal_is_iterative_never_follows_a_link_and_never_raises(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    top = tmp_path / "scratch"
    here = os.getcwd()
    top.mkdir()
    os.chdir(top)
    try:
        for _ in range(3000):  # a path of 6,000 bytes: longer than PATH_MAX, deeper than the recursion limit
            os.mkdir("d")
            os.chdir("d")
        os.symlink(outside, "link")
        os.chmod(".", 0o500)
    finally:
        os.chdir(here)
    assert rmtree(top) == []
    assert not top.exists() and (outside / "keep.txt").read_text() == "mine"
    assert rmtree(tmp_path / "absent") == []


# ------------------------------------------------------------------ 2. each class file is written


def test_one_class_file_that_fails_stops_no_other(tmp_path):
    subs = [Submission(name, None, "no notebook") for name in ("alice", "bob", "carol")]
    results, plan = _graded_without_children(subs)
    out = tmp_path / "grades"
    (out / "feedback" / "bob.md").mkdir(parents=True)  # bob's feedback cannot be written there
    with pytest.raises(ClassReportsError, match="feedback/bob.md") as raised:
        write_class_reports(results, plan, out, ["log"])
    assert [name for name, _ in raised.value.failed] == ["feedback/bob.md"]
    for name in ("grades.csv", "summary.md", "items.csv", "grading.log", "feedback/alice.md", "feedback/carol.md"):
        assert (out / name).is_file(), name
    files = write_class_files(results, plan, out, ["log"], per_student=True, log_header=[], ignored=[], seconds=0.0)
    assert (out / "record.jsonl").is_file()
    assert any("feedback/bob.md" in p for p in files.problems)  # the command line exits 2 with it
    assert files.summary["submissions"] == 3


# ------------------------------------------------------------------ 3. names capped in bytes


def test_a_255_byte_folder_name_gets_a_feedback_file(tmp_path):
    class_dir = tmp_path / "class"
    names = ["\u5b57" * 85, "\u5b57" * 84 + "\u5b87"]  # 255 bytes each, the same first 84 letters
    for name in names:
        (class_dir / name).mkdir(parents=True)
        (class_dir / name / "work.ipynb").write_text("not a notebook", encoding="utf-8")
    subs, _ = discover(class_dir)
    assert sorted(s.student for s in subs) == sorted(names)
    results, plan = _graded_without_children(subs)
    out = tmp_path / "grades"
    write_class_reports(results, plan, out, ["log"])
    written = sorted(p.name for p in (out / "feedback").iterdir())
    assert len(written) == 2 and len(set(n.lower() for n in written)) == 2
    assert all(len(n.encode("utf-8")) <= 255 and n.startswith("\u5b57" * 40) for n in written), written
    owners = sorted((out / "feedback" / n).read_text(encoding="utf-8").splitlines()[0] for n in written)
    assert owners == sorted(f"# Feedback: {n}" for n in names)
    assert all(len(n.encode()) <= 255 for n in feedback_names(results))


# ------------------------------------------------------------------ 4. escaped before any terminal


@linux_only
def test_progress_prints_an_exercises_error_message_escaped(tmp_path, capsys):
    from attention_course.tools.cli import main
    nb = json.loads((ROOT / "chapters" / "03_scoring_functions.ipynb").read_text(encoding="utf-8"))
    nb = with_exercise_code(nb, "ch03_ex1", f"raise ValueError('boom {ESCAPES} end')\n")
    mine = tmp_path / "mine.ipynb"
    mine.write_text(json.dumps(nb), encoding="utf-8")
    capsys.readouterr()
    status = main(["progress", str(mine), "--time-limit", "10"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "boom" in out and "\\x1b]52" in out, out
    assert "\x1b" not in out + err and "\x07" not in out + err


def test_check_prints_an_answers_exception_message_escaped(capsys):
    from attention_course import check

    def answer(*args, **kwargs):
        raise ValueError("boom \x1b]52;c;aGk=\x07\x1b[2J end")

    check(FIRST.label, answer)
    out = capsys.readouterr().out
    assert "boom" in out and "\x1b" not in out and "\x07" not in out, out


# ------------------------------------------------------------------ 5. the grader's I/O error is not the student's


@linux_only
def test_a_grader_side_enospc_making_the_scratch_folder_is_a_grader_error(sandbox, tmp_path, monkeypatch):
    made = []

    def full_disk(path):
        made.append(Path(path).name)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    path = tmp_path / "alice.ipynb"
    path.write_text(json.dumps(_solution()), encoding="utf-8")
    monkeypatch.setattr(sandbox_module, "make_scratch", full_disk)
    run = run_grading([Submission("alice", path)], 1, seed=3, sandbox=sandbox, time_limit=10)
    monkeypatch.undo()
    assert len(made) == 2 * len(all_exercises(1))  # each exercise was tried once more
    for er in run.results[0].exercises:
        assert er.reason.startswith("grader error:"), er.reason
        assert "sys.exit" not in er.reason and "No space left on device" in er.reason
        assert not er.attempted  # the item analysis leaves it out
    files = write_class_files(run.results, run.plan, tmp_path / "grades", run.log, per_student=True,
                              log_header=[], ignored=[], seconds=0.0)
    assert "grader error" in (tmp_path / "grades" / "grades.csv").read_text(encoding="utf-8")
    assert "grader error" in (tmp_path / "grades" / "feedback" / "alice.md").read_text(encoding="utf-8")
    assert any("alice" in p for p in files.problems)  # `grade` exits 2: regrade


FILLER = """import errno, os
written, error = 0, ""
try:
    for part in range(6):                  # 6 files of 16 MB: more than the private scratch holds
        with open(f"filler{part}.bin", "wb") as f:
            for _ in range(16):
                f.write(b"x" * (1 << 20))
                f.flush()
                written += 1
except OSError as e:
    error = errno.errorcode.get(e.errno, str(e.errno))
made = 0
try:
    for i in range(6000):                 # more files than the scratch allows
        open(f"f{i}", "wb").close()
        made += 1
except OSError as e:
    error += " " + errno.errorcode.get(e.errno, str(e.errno))
raise ValueError(f"filler: {written} MB, {made} files, {error} :end")
"""


@linux_only
def test_a_child_that_fills_its_scratch_costs_its_classmates_nothing(sandbox, tmp_path):
    """The full-disk row: each child's scratch is its own tmpfs of fixed size and file count (where
    the kernel allows a private mount namespace), and outcomes come back over a pipe, so a child
    that fills everything it can write reaches neither the grader's disk nor a classmate."""
    if "scratch a private tmpfs" not in sandbox.info["protections"]:
        pytest.skip("no private mount namespace here: " + sandbox.info["protections"])
    before = os.statvfs(sandbox.workdir)
    subs = []
    for name, nb in {"filler": with_exercise_code(_solution(), FIRST.label, FILLER), "a": _solution(),
                     "b": _solution(), "c": _solution()}.items():
        (tmp_path / f"{name}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
        subs.append(Submission(name, tmp_path / f"{name}.ipynb"))
    run = run_grading(subs, 1, seed=3, sandbox=sandbox, time_limit=20)
    results = {r.student: r for r in run.results}
    reason = {e.label: e for e in results["filler"].exercises}[FIRST.label].reason
    written, made = (int(x) for x in reason.split("filler: ", 1)[1].split(" MB, ", 1)[0:1] +
                     reason.split(" MB, ", 1)[1].split(" files", 1)[0:1])
    assert written <= 64 and made < 4096 and reason.count("ENOSPC") == 2, reason
    for name in "abc":
        assert results[name].total == CHAPTER1_POINTS, [(e.label, e.reason) for e in results[name].exercises]
    after = os.statvfs(sandbox.workdir)
    assert (before.f_bavail - after.f_bavail) * after.f_frsize < 16 << 20  # nothing reached the disk
    assert not any((sandbox.workdir / "scratch").iterdir())


@linux_only
def test_a_grader_side_enospc_writing_the_calls_makes_grade_exit_non_zero(tmp_path, monkeypatch, capsys):
    import torch

    from attention_course.tools.cli import _print_class
    saved = torch.save

    def full_disk(obj, path, *args, **kwargs):
        if "-hidden" in str(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return saved(obj, path, *args, **kwargs)

    class_dir = tmp_path / "class"
    class_dir.mkdir()
    (class_dir / "bob.ipynb").write_text(json.dumps(_solution()), encoding="utf-8")
    monkeypatch.setattr(sandbox_module.torch, "save", full_disk)
    done = grade(class_dir, 1, GradeOptions(seed=3, jobs=1), out=tmp_path / "grades")
    monkeypatch.undo()
    reasons = [e.reason for e in done.files.results[0].exercises]
    assert all(r.startswith("grader error:") and "sys.exit" not in r for r in reasons), reasons
    assert (tmp_path / "grades" / "grades.csv").is_file()
    assert _print_class("grade", done) == 2
    assert "grader itself failed" in capsys.readouterr().err
