"""The class grader: correct/stub notebooks, reports, and hostile or broken submissions.

One sandbox (two zygotes) is shared by the whole module; one hostile class of
chapter 1 is graded once (time limit 2 s) and each test checks one submission of it.
"""
from __future__ import annotations

import copy
import csv
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from attention_course.tools.grading.grader import Submission, discover, run_grading
from attention_course.tools.grading.reports import write_class_reports
from attention_course.tools.grading.sandbox import InvalidOutcome, Sandbox, load_outcome
from attention_course.tools.grading.zygote_main import CHILD_ENV_KEYS, landlock_abi
from attention_course.tools.notebook import _src, exercise_cell_index, with_exercise_code

# Chapter 1 at full marks, from the registry (an author adding ch01_ex5 changes it)
from attention_course.checks.registry import all_exercises as _all_exercises  # noqa: E402
CHAPTER1_POINTS = sum(ex.points for ex in _all_exercises(1))

ROOT = Path(__file__).resolve().parents[1]
SOLUTION_1 = next((ROOT / "solutions").glob("01_*.ipynb"))
TIME_LIMIT = 2.0
MEMORY_MB = 300

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the grader's sandbox needs Linux")


# ------------------------------------------------------------------ notebook surgery


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _exercise_cells(nb: dict) -> dict:
    """label -> index of its (first) exercise code cell."""
    return exercise_cell_index(nb["cells"])


with_code = with_exercise_code


def solution_code(nb: dict, label: str) -> str:
    return _src(nb["cells"][_exercise_cells(nb)[label]])


def _write(folder: Path, name: str, nb) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nb if isinstance(nb, str) else json.dumps(nb), encoding="utf-8")
    return path


def _digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    with Sandbox(jobs=2, workdir=tmp_path_factory.mktemp("sandbox")) as box:
        yield box


POOL_OK = "def attention_pool(weights, values):\n    return weights @ values\n"


def _hostile_class(folder: Path, out_dir: Path, outside: Path) -> None:
    sol = _load(SOLUTION_1)
    ex1 = solution_code(sol, "ch01_ex1")
    _write(folder, "aa_correct.ipynb", sol)
    _write(folder, "stub.ipynb", _load(next((ROOT / "chapters").glob("01_*.ipynb"))))
    hostile = {
        "loop": ("ch01_ex2", "while True:\n    pass\n"),
        "membomb": ("ch01_ex3", "blocks = []\nwhile True:\n    blocks.append(bytearray(50_000_000))\n"),
        "sysexit": ("ch01_ex1", "import sys\nsys.exit(0)\n" + ex1),
        "osexit": ("ch01_ex4", "import os\nos._exit(3)\n"),
        "killself": ("ch01_ex1", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"),
        "killparent": ("ch01_ex1", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + ex1),
        "killgroup": ("ch01_ex2", "import os, signal\nos.killpg(os.getpgid(os.getppid()), signal.SIGKILL)\n"),
        "monkeypatch": ("ch01_ex1", "import builtins, torch, torch.testing\nimport attention_course\n"
                        "torch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a, **k: True\n"
                        "torch.testing.assert_close = lambda *a, **k: None\n"
                        "torch.Tensor.__eq__ = lambda self, other: torch.ones((), dtype=torch.bool)\n"
                        "attention_course.check = lambda *a, **k: print('8/8 all passed')\n"
                        "builtins.print = lambda *a, **k: None\n"
                        "def attention_pool(weights, values):\n    return torch.zeros(1)\n"),
        "alwayseq": ("ch01_ex1", "class Liar:\n    def __eq__(self, other):\n        return True\n"
                     "def attention_pool(weights, values):\n    return Liar()\n"),
        "subclass": ("ch01_ex1", "import torch\nclass Mine(torch.Tensor):\n    pass\n"
                     "def attention_pool(weights, values):\n    return (weights @ values).as_subclass(Mine)\n"),
        "dtype": ("ch01_ex1", "def attention_pool(weights, values):\n    return (weights @ values).double()\n"),
        "shape": ("ch01_ex1", "def attention_pool(weights, values):\n    return (weights @ values).unsqueeze(0)\n"),
        "readrepo": ("ch01_ex1", f"SRC = open({str(ROOT / 'attention_course/exercises/ch01/ex1_attention_pool.py')!r}).read()\n" + ex1),
        "readpeer": ("ch01_ex1", f"PEER = open({str(folder / 'aa_correct.ipynb')!r}).read()\n" + ex1),
        "plantresults": ("ch01_ex1", f"open({str(out_dir / 'results.json')!r}, 'w').write('{{\"score\": 100}}')\n"
                         + ex1),
        "writeoutside": ("ch01_ex1", f"open({str(outside)!r}, 'w').write('pwned')\n" + ex1),
        "importhidden": ("ch01_ex1", "from attention_course.exercises.ch01 import ex1_attention_pool\n"
                         "attention_pool = ex1_attention_pool.attention_pool\n"),
        "network": ("ch01_ex1", "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=1)\n" + ex1),
        "envdetect": ("ch01_ex1", "import os\nGRADING = any(w in k for k in os.environ for w in "
                      "('GRAD', 'AUTOGRADER', 'PYTEST', 'CI', 'ATTENTION', 'VIRTUAL_ENV'))\n"
                      + ex1 + "\n_honest = attention_pool\n"
                      "def attention_pool(weights, values):\n"
                      "    return _honest(weights, values) if not GRADING else weights.sum() * 0\n"),
        "envlist": ("ch01_ex1", "import os\nraise RuntimeError('ENV=' + ','.join(sorted(os.environ)))\n"),
        "printscore": ("ch01_ex1", "print('Score: 8/8')\nprint('{\"score\": 8, \"max_score\": 8}')\n"
                       "def attention_pool(weights, values):\n    print('✓ all checks passed, 2/2 points')\n"
                       "    return weights\n"),
        "importfail": ("ch01_ex1", "import numpy_but_misspelled\n" + ex1),
        "renamed": ("ch01_ex3", solution_code(sol, "ch01_ex3").replace("def hard_lookup(", "def hard_lookup_v2(")),
    }
    for student, (label, code) in hostile.items():
        _write(folder, f"{student}.ipynb", with_code(sol, label, code))
    # malformed notebooks
    _write(folder, "badjson.ipynb", "{ this is not json")
    v3 = copy.deepcopy(sol)
    v3["nbformat"] = 3
    _write(folder, "nbformat3.ipynb", v3)
    missing = copy.deepcopy(sol)
    idx = _exercise_cells(missing)["ch01_ex2"]
    del missing["cells"][idx - 2: idx + 1]  # directive, solution-start and the code cell of ch01_ex2
    _write(folder, "missingcells.ipynb", missing)
    moved = copy.deepcopy(sol)
    idx = _exercise_cells(moved)["ch01_ex4"]
    moved["cells"].append(moved["cells"].pop(idx))  # the exercise cell moved to the very end
    _write(folder, "reordered.ipynb", moved)
    notag = copy.deepcopy(sol)
    for cell in notag["cells"]:
        cell.get("metadata", {}).pop("tags", None)
    _write(folder, "notag.ipynb", notag)
    # a folder per student, and a folder with two notebooks
    _write(folder, "folderstudent/my_work.ipynb", sol)
    _write(folder, "twonotebooks/a.ipynb", sol)
    _write(folder, "twonotebooks/b.ipynb", sol)
    # planted files in the submissions folder change nothing
    _write(folder, "results.json", json.dumps({"score": 100, "tests": []}))
    _write(folder, "grades.csv", "student,total\nstub,100\n")


@pytest.fixture(scope="module")
def hostile(sandbox, tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    folder, out_dir, outside = base / "class", base / "out", base / "outside.txt"
    out_dir.mkdir()
    _hostile_class(folder, out_dir, outside)
    before = _digest(folder)
    subs, ignored = discover(folder)
    run = run_grading(subs, 1, seed=1234, time_limit=TIME_LIMIT, memory_mb=MEMORY_MB, sandbox=sandbox)
    write_class_reports(run.results, run.plan, out_dir, run.log)
    by = {r.student: r for r in run.results}
    return {"run": run, "by": by, "before": before, "after": _digest(folder), "folder": folder,
            "out": out_dir, "outside": outside, "ignored": ignored}


def ex(result, label):
    return next(e for e in result.exercises if e.label == label)


def assert_others_full(result, bad_label):
    for e in result.exercises:
        if e.label != bad_label:
            assert e.points == e.max_points, (result.student, e.label, e.reason, [c.reason for c in e.checks])


# ------------------------------------------------------------------ correct, stub, reports


def test_correct_solution_full_marks_and_stub_zero_in_hostile_class(hostile):
    by = hostile["by"]
    assert by["aa_correct"].total == by["aa_correct"].max_total == CHAPTER1_POINTS
    assert by["folderstudent"].total == CHAPTER1_POINTS
    assert by["stub"].total == 0
    assert all("not implemented" in e.reason for e in by["stub"].exercises)


@pytest.mark.parametrize("chapter", range(1, 12))
def test_every_chapter_solution_full_marks_student_notebook_zero(sandbox, tmp_path, chapter):
    """Also proves that refusing the course's own answers in the child leaves every helper a
    correct solution uses working (chapter 8's and 9's runtime modules included)."""
    from attention_course.checks.registry import all_exercises
    if not all_exercises(chapter) or not list((ROOT / "solutions").glob(f"{chapter:02d}_*.ipynb")):
        pytest.skip(f"chapter {chapter} has no exercises or no solution notebook yet")
    subs = [Submission("solution", next((ROOT / "solutions").glob(f"{chapter:02d}_*.ipynb"))),
            Submission("student", next((ROOT / "chapters").glob(f"{chapter:02d}_*.ipynb")))]
    run = run_grading(subs, chapter, seed=chapter * 7, time_limit=20, sandbox=sandbox)
    solution, student = run.results
    assert solution.total == solution.max_total > 0, [(e.label, e.reason, [c.reason for c in e.checks if not c.passed])
                                                      for e in solution.exercises]
    assert student.total == 0


def test_reports_have_the_right_columns(hostile):
    out, run = hostile["out"], hostile["run"]
    rows = list(csv.DictReader((out / "grades.csv").open()))
    labels = [p.label for p in run.plan.exercises]
    assert list(rows[0].keys()) == ["student"] + labels + ["total", "max_total", "notes"]
    students = [r["student"] for r in rows]
    assert students == sorted(students, key=lambda s: (s.lower(), s))
    assert len(rows) == len(run.results)
    assert {p.stem for p in (out / "feedback").glob("*.md")} == set(students)
    summary = (out / "summary.md").read_text()
    assert all(label in summary for label in labels) and "histogram.png" in summary
    assert (out / "histogram.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    log = (out / "grading.log").read_text()
    assert "seed: 1234" in log and "Landlock" in log
    feedback = (out / "feedback" / "loop.md").read_text()
    assert "timed out" in feedback and "✓" in feedback


def test_submissions_are_never_modified(hostile):
    assert hostile["before"] == hostile["after"]


def test_planted_files_change_nothing(hostile):
    assert "results.json" in hostile["ignored"] and "grades.csv" in hostile["ignored"]
    assert hostile["by"]["stub"].total == 0
    assert not (hostile["out"] / "results.json").exists()  # the child could not plant one either
    assert hostile["by"]["plantresults"].exercises[0].points == 0
    assert "PermissionError" in ex(hostile["by"]["plantresults"], "ch01_ex1").reason


# ------------------------------------------------------------------ hostile, one test each


def test_infinite_loop_times_out_the_others_score(hostile):
    r = hostile["by"]["loop"]
    assert ex(r, "ch01_ex2").points == 0 and "timed out after 2 s" in ex(r, "ch01_ex2").reason
    assert_others_full(r, "ch01_ex2")


def test_memory_bomb(hostile):
    r = hostile["by"]["membomb"]
    assert ex(r, "ch01_ex3").points == 0 and "out of memory" in ex(r, "ch01_ex3").reason
    assert_others_full(r, "ch01_ex3")


def test_sys_exit_and_os_exit(hostile):
    r = hostile["by"]["sysexit"]
    assert "sys.exit()" in ex(r, "ch01_ex1").reason and ex(r, "ch01_ex1").points == 0
    assert_others_full(r, "ch01_ex1")
    r = hostile["by"]["osexit"]
    assert "exit code 3" in ex(r, "ch01_ex4").reason and ex(r, "ch01_ex4").points == 0
    assert_others_full(r, "ch01_ex4")


def test_killing_its_own_process(hostile):
    r = hostile["by"]["killself"]
    assert "SIGKILL" in ex(r, "ch01_ex1").reason and ex(r, "ch01_ex1").points == 0
    assert_others_full(r, "ch01_ex1")


@pytest.mark.skipif(landlock_abi() < 6, reason="signal scoping needs Landlock ABI 6")
def test_killing_its_parent_or_process_group_is_refused(hostile):
    r = hostile["by"]["killparent"]
    assert ex(r, "ch01_ex1").points == 0 and "PermissionError" in ex(r, "ch01_ex1").reason
    assert_others_full(r, "ch01_ex1")
    r = hostile["by"]["killgroup"]
    assert ex(r, "ch01_ex2").points == 0
    assert_others_full(r, "ch01_ex2")
    assert hostile["run"].restarts == 0


def test_zygote_killed_without_landlock_is_restarted(tmp_path):
    """Without Landlock a child can kill its zygote: that exercise scores 0, the class goes on."""
    sol = _load(SOLUTION_1)
    ex1 = solution_code(sol, "ch01_ex1")
    _write(tmp_path / "c", "a_killer.ipynb",
           with_code(sol, "ch01_ex1", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + ex1))
    _write(tmp_path / "c", "b_good.ipynb", sol)
    subs, _ = discover(tmp_path / "c")
    with Sandbox(jobs=1, landlock=False, workdir=tmp_path / "box") as box:
        run = run_grading(subs, 1, seed=3, time_limit=TIME_LIMIT, memory_mb=MEMORY_MB, sandbox=box)
        assert box.landlock_abi == 0 and any("Landlock is unavailable" in w for w in box.warnings)
    killer, good = run.results
    assert ex(killer, "ch01_ex1").points == 0 and "was killed" in ex(killer, "ch01_ex1").reason
    assert_others_full(killer, "ch01_ex1")
    assert good.total == CHAPTER1_POINTS and run.restarts >= 1


def test_monkeypatching_torch_builtins_and_check_gains_nothing(hostile):
    r = hostile["by"]["monkeypatch"]
    assert ex(r, "ch01_ex1").points == 0
    assert_others_full(r, "ch01_ex1")


def test_always_equal_object_and_tensor_subclass(hostile):
    for student, word in (("alwayseq", "Liar"), ("subclass", "tensor subclass")):
        e = ex(hostile["by"][student], "ch01_ex1")
        assert e.points == 0 and any(word in c.reason for c in e.checks), [c.reason for c in e.checks]
        assert_others_full(hostile["by"][student], "ch01_ex1")


def test_wrong_dtype_and_shape(hostile):
    e = ex(hostile["by"]["dtype"], "ch01_ex1")
    # float64 inputs are part of the checks now (the dtype clause), where .double() is right
    assert e.points < e.max_points and any("dtype torch.float64" in c.reason for c in e.checks)
    e = ex(hostile["by"]["shape"], "ch01_ex1")
    assert e.points < e.max_points and any("shape" in c.reason for c in e.checks)


def test_calling_the_course_reference_earns_no_credit(sandbox, tmp_path):
    sol = _load(next((ROOT / "solutions").glob("03_*.ipynb")))
    nb = with_code(sol, "ch03_ex1", "masked_softmax = attn.masked_softmax\n")
    nb = with_code(nb, "ch03_ex2", "from attention_course.functional import AdditiveAttention\n")
    _write(tmp_path, "cheater.ipynb", nb)
    run = run_grading([Submission("cheater", tmp_path / "cheater.ipynb")], 3, seed=11, sandbox=sandbox)
    r = run.results[0]
    for label in ("ch03_ex1", "ch03_ex2"):
        e = ex(r, label)
        assert e.points == 0, (label, e.reason)
        assert any("course's answer to " + label in (c.reason + e.reason) for c in e.checks), \
            (label, e.reason, [c.reason for c in e.checks])
    assert ex(r, "ch03_ex3").points == ex(r, "ch03_ex3").max_points  # the rest is graded normally


GC_ROUTE = """import gc
_found = [o for o in gc.get_objects() if isinstance(o, type) and o.__name__ == "AdditiveAttention"
          and o.__module__.startswith("attention_course")]
AdditiveAttention = _found[0]
"""
SUBCLASS_ROUTE = """import attention_course.functional as _f
class AdditiveAttention(_f.AdditiveAttention):
    pass
"""
ALIAS_ROUTE = """import sys
AdditiveAttention = vars(sys.modules["attention_course.functional"])["AdditiveAttention"]
"""
OBJECT_NEW_ROUTE = """import attention_course.functional as _f
from torch import nn
class AdditiveAttention(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        self._inner = object.__new__(_f.AdditiveAttention)
        nn.Module.__init__(self._inner)
        _f.AdditiveAttention.__init__(self._inner, *args, **kwargs)
    def forward(self, *args, **kwargs):
        return _f.AdditiveAttention.forward(self._inner, *args, **kwargs)
"""
FUNCTION_GC_ROUTE = """import gc
_found = [o for o in gc.get_objects() if type(o).__name__ == "function" and o.__name__ == "masked_softmax"
          and o.__module__.startswith("attention_course")]
def masked_softmax(*args, **kwargs):
    return _found[0](*args, **kwargs)
"""
BASES_ROUTE = """import attention_course.functional as _f
from torch import nn
class _Shell(nn.Module):
    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)
class AdditiveAttention(_Shell):
    pass
AdditiveAttention.__bases__ = (_f.AdditiveAttention,)
"""
RELOAD_ROUTE = """import importlib
import attention_course.functional as _f
_f = importlib.reload(_f)
AdditiveAttention = _f.AdditiveAttention
"""
SYS_MODULES_ROUTE = """import sys
sys.modules.pop("attention_course.functional")
import attention_course.functional as _f
AdditiveAttention = _f.AdditiveAttention
"""
SYS_MODULES_ALIAS_ROUTE = """import sys
_f = [m for n, m in list(sys.modules.items()) if n.startswith("attention_course.")
      and hasattr(m, "AdditiveAttention")][0]
class AdditiveAttention(_f.AdditiveAttention.__mro__[1]):
    __init__ = _f.AdditiveAttention.__init__
    forward = _f.AdditiveAttention.forward
"""
FUNCTION_RELOAD_ROUTE = """import importlib, sys
import attention_course.functional
masked_softmax = importlib.reload(sys.modules["attention_course.functional"]).masked_softmax
"""
ROUTES = {"gc": ("ch03_ex2", GC_ROUTE), "subclass": ("ch03_ex2", SUBCLASS_ROUTE),
          "alias": ("ch03_ex2", ALIAS_ROUTE), "object_new": ("ch03_ex2", OBJECT_NEW_ROUTE),
          "bases": ("ch03_ex2", BASES_ROUTE), "reload": ("ch03_ex2", RELOAD_ROUTE),
          "sys_modules": ("ch03_ex2", SYS_MODULES_ROUTE), "sys_modules_alias": ("ch03_ex2", SYS_MODULES_ALIAS_ROUTE),
          "function_gc": ("ch03_ex1", FUNCTION_GC_ROUTE), "function_reload": ("ch03_ex1", FUNCTION_RELOAD_ROUTE)}


@pytest.fixture(scope="module")
def sandbox_without_landlock(tmp_path_factory):
    with Sandbox(jobs=1, landlock=False, workdir=tmp_path_factory.mktemp("sandbox_nll")) as box:
        yield box


@pytest.mark.parametrize("landlock", [True, False], ids=["landlock", "no_landlock"])
@pytest.mark.parametrize("route", list(ROUTES))
def test_the_course_answer_refuses_by_every_route(request, tmp_path, route, landlock):
    """Rebinding a name is not enough: the original object itself refuses, and so does a
    fresh copy made by reloading or re-importing its module (with or without Landlock,
    which alone would turn a reload into a bare PermissionError)."""
    box = request.getfixturevalue("sandbox" if landlock else "sandbox_without_landlock")
    sol = _load(next((ROOT / "solutions").glob("03_*.ipynb")))
    label, code = ROUTES[route]
    _write(tmp_path, "cheater.ipynb", with_code(sol, label, code))
    run = run_grading([Submission("cheater", tmp_path / "cheater.ipynb")], 3, seed=11, sandbox=box)
    e = ex(run.results[0], label)
    assert e.points == 0, (route, e.reason, [c.reason for c in e.checks])
    assert any("course's answer to " + label in (c.reason + e.reason) for c in e.checks), \
        (route, e.reason, [c.reason for c in e.checks])


def test_importing_the_hidden_checks_fails(hostile):
    e = ex(hostile["by"]["importhidden"], "ch01_ex1")
    assert e.points == 0 and "ModuleNotFoundError" in e.reason


@pytest.mark.skipif(landlock_abi() < 1, reason="file isolation needs Landlock")
def test_files_outside_the_scratch_folder_are_out_of_reach(hostile):
    for student in ("readrepo", "readpeer", "writeoutside"):
        e = ex(hostile["by"][student], "ch01_ex1")
        assert e.points == 0 and "PermissionError" in e.reason, (student, e.reason)
        assert_others_full(hostile["by"][student], "ch01_ex1")
    assert not hostile["outside"].exists()


@pytest.mark.skipif(landlock_abi() < 4, reason="network isolation needs Landlock ABI 4")
def test_no_tcp_connections(hostile):
    e = ex(hostile["by"]["network"], "ch01_ex1")
    assert e.points == 0 and "PermissionError" in e.reason, e.reason


def test_grading_mode_cannot_be_detected_from_the_environment(hostile):
    assert hostile["by"]["envdetect"].total == CHAPTER1_POINTS, [(e.label, e.reason) for e in hostile["by"]["envdetect"].exercises]  # it behaved as in the notebook: nothing gave grading away
    reason = ex(hostile["by"]["envlist"], "ch01_ex1").reason
    listed = reason.split("ENV=")[1].split(" ")[0].rstrip(")").split(",")
    assert sorted(listed) == sorted(CHILD_ENV_KEYS)


def test_printing_a_score_changes_nothing(hostile):
    r = hostile["by"]["printscore"]
    assert ex(r, "ch01_ex1").points == 0
    assert_others_full(r, "ch01_ex1")


def test_malformed_notebooks(hostile):
    by = hostile["by"]
    assert by["badjson"].total == 0 and "not a readable notebook" in by["badjson"].problem
    assert by["nbformat3"].total == 0 and "nbformat" in by["nbformat3"].problem
    assert by["twonotebooks"].total == 0 and "2 notebooks" in by["twonotebooks"].problem
    e = ex(by["missingcells"], "ch01_ex2")
    assert e.points == 0 and "no cells for ch01_ex2" in e.reason
    assert_others_full(by["missingcells"], "ch01_ex2")
    e = ex(by["renamed"], "ch01_ex3")
    assert e.points == 0 and "define no `hard_lookup`" in e.reason and "hard_lookup_v2" in e.reason
    e = ex(by["importfail"], "ch01_ex1")
    assert e.points == 0 and "ModuleNotFoundError" in e.reason and "line 1" in e.reason
    # cells moved out of their block are still found (with a note); a lost setup tag falls back
    assert by["reordered"].total == CHAPTER1_POINTS and ex(by["reordered"], "ch01_ex4").notes
    assert by["notag"].total == CHAPTER1_POINTS and by["notag"].notes
    rows = {r["student"]: r for r in csv.DictReader((hostile["out"] / "grades.csv").open())}
    assert "not a readable notebook" in rows["badjson"]["notes"]
    assert "timed out" in rows["loop"]["notes"] and rows["loop"]["ch01_ex2"] == "0"


class _SubTensor(__import__("torch").Tensor):
    pass


def test_forged_outcome_files_are_rejected(tmp_path):
    import io
    import pickle

    import torch
    marker = tmp_path / "marker"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    with pytest.raises(InvalidOutcome):
        load_outcome(pickle.dumps({"phase": "done", "outcomes": [[Evil()]]}, protocol=2))
    assert not marker.exists()

    from attention_course.tools.grading.zygote_main import OUTCOME_MAGIC, dump_outcome
    saved = dump_outcome

    base = {"phase": "done", "error": None, "defined": [], "outcomes": [[{"status": "ok", "value": torch.ones(2)}]]}
    assert load_outcome(saved(base))["phase"] == "done"
    assert torch.equal(load_outcome(saved(base))["outcomes"][0][0]["value"], torch.ones(2))
    for bad in ({**base, "phase": "???"},
                {**base, "outcomes": [[{"status": "ok", "value": {"__seq__": 3}}]]},
                {**base, "outcomes": [[{"status": "ok", "value": torch.zeros(5_000_000)}]]},
                {**base, "outcomes": [[{"status": "raised"}]]}):
        with pytest.raises(InvalidOutcome):
            load_outcome(saved(bad))
    # torch.save's pickles are not outcome files at all (their allowed types once let a 908-byte
    # file allocate 2.66 GB in the grader).
    buffer = io.BytesIO()
    torch.save(base, buffer)
    with pytest.raises(InvalidOutcome, match="not an outcome file"):
        load_outcome(buffer.getvalue())

    def forged(structure, data=b""):
        head = json.dumps(structure).encode()
        return OUTCOME_MAGIC + len(head).to_bytes(8, "little") + head + data

    def value(record):
        return {**base, "outcomes": [[{"status": "ok", "value": {"__tensor__": record}}]]}

    for record, why in (([0, "float32", [1_000_000, 1_000_000]], "too large"),       # declared, not sent
                        ([0, "float32", [4]], "outside the file"),                     # 16 bytes declared, 8 sent
                        ([0, "object", [1]], "not allowed"),
                        ([0, "float32", [-1]], "shape"),
                        ([-5, "float32", [1]], "malformed"),
                        ([0, "float32", [2] * 9], "shape")):
        with pytest.raises(InvalidOutcome, match=why):
            load_outcome(forged(value(record), b"\0" * 8))
    with pytest.raises(InvalidOutcome, match="does not fit"):  # a structure longer than the file
        load_outcome(OUTCOME_MAGIC + (10 ** 9).to_bytes(8, "little") + b"{}")
    for head in (b"[" * 11, b"[" * 100_000 + b"]" * 100_000, b'{"a": 1e99999999999999999}'):
        with pytest.raises(InvalidOutcome, match="not plain data|nested too deeply|not a dict|unexpected"):
            load_outcome(OUTCOME_MAGIC + len(head).to_bytes(8, "little") + head)


# ------------------------------------------------------------------ extra checks, CLI


def test_extra_checks_add_a_private_check_and_an_exercise(sandbox, tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "private.py").write_text(
        "import torch\n"
        "from attention_course.tools.grading.extra import add_check, add_exercise\n"
        "from attention_course.checks.registry import Call, Check, Exercise\n"
        "def _calls(seed):\n"
        "    g = torch.Generator().manual_seed(seed)\n"
        "    return [Call(args=(torch.softmax(torch.randn(2, 40, generator=g), -1), torch.randn(40, 3, generator=g)))]\n"
        "add_check('ch01_ex1', Check('forty keys (private)', _calls, public=False, hint='weighted sum'))\n"
        "add_exercise(Exercise(label='ch01_ex9', title='private', name='attention_pool',\n"
        "    reference=lambda w, v: w @ v, points=1, checks=[Check('private', _calls, hint='h')]),\n"
        "    cells_from='ch01_ex1')\n")
    from attention_course.checks.registry import get_exercise
    n_checks = len(get_exercise("ch01_ex1").checks)
    subs = [Submission("solution", SOLUTION_1)]
    run = run_grading(subs, 1, seed=5, extra_checks=extra, sandbox=sandbox)
    r = run.results[0]
    assert [e.label for e in r.exercises][-1] == "ch01_ex9" and r.total == r.max_total == CHAPTER1_POINTS + 1
    assert "forty keys (private)" in [c.check for c in ex(r, "ch01_ex1").checks]
    assert len(get_exercise("ch01_ex1").checks) == n_checks  # the registry itself is untouched


def test_cli_grade_class_and_single_notebook(tmp_path):
    folder = tmp_path / "class"
    _write(folder, "alice.ipynb", _load(SOLUTION_1))
    _write(folder, "bob.ipynb", _load(next((ROOT / "chapters").glob("01_*.ipynb"))))
    cli = [str(Path(sys.executable).with_name("attention-course"))]
    done = subprocess.run(cli + ["grade", str(folder), "--chapter", "1", "--out", str(tmp_path / "out"),
                                 "--seed", "9", "--jobs", "2"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "2/2 submissions" in done.stderr  # the progress bar
    rows = list(csv.DictReader((tmp_path / "out" / "grades.csv").open()))
    assert [(r["student"], r["total"]) for r in rows] == [("alice", f"{CHAPTER1_POINTS:g}"), ("bob", "0")]
    done = subprocess.run(cli + ["grade", str(folder / "alice.ipynb"), "--chapter", "1", "--seed", "9", "--jobs", "1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"{CHAPTER1_POINTS:g} / {CHAPTER1_POINTS:g} points" in done.stdout and "seed 9" in done.stdout


def _no_formula(cell: str) -> bool:
    return not cell[:1] in ("=", "+", "-", "@", "\t", "\r") or cell.lstrip("-").replace(".", "").isdigit()


def test_grades_csv_never_holds_a_formula(tmp_path):
    """CSV injection (OWASP): a student file named like a formula stays text in the gradebook."""
    from attention_course.tools.grading.reports import csv_safe
    folder = tmp_path / "class"
    stub = _load(next((ROOT / "chapters").glob("01_*.ipynb")))
    names = ['=HYPERLINK("http:evil","click")', "@SUM(A1)", "+1+1", "-2", "\tcmd", "plain"]
    for name in names:
        _write(folder, f"{name}.ipynb", stub)
    cli = [str(Path(sys.executable).with_name("attention-course"))]
    done = subprocess.run(cli + ["grade", str(folder), "--chapter", "1", "--out", str(tmp_path / "out"),
                                 "--seed", "9", "--jobs", "2"], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    raw = (tmp_path / "out" / "grades.csv").read_text(encoding="utf-8")
    rows = list(csv.reader(raw.splitlines(keepends=True)))
    cells = [cell for row in rows[1:] for cell in row]
    assert all(_no_formula(c) for c in cells), [c for c in cells if not _no_formula(c)]
    students = sorted(row[0] for row in rows[1:])
    assert students == sorted(csv_safe(n) for n in names)
    assert "'=HYPERLINK(\"http:evil\",\"click\")" in students and "plain" in students and "'\tcmd" in students
    # Every text cell is quoted (a quote inside doubled); the points are bare numbers.
    # one 0 per exercise of chapter 1, the total 0, then the maximum
    zeros = ",0" * (len(_all_exercises(1)) + 1)
    assert f'\n"\'=HYPERLINK(""http:evil"",""click"")"{zeros},{CHAPTER1_POINTS:g},"' in raw


def test_grades_csv_escapes_every_text_cell(tmp_path):
    """The notes cell and the student cell both: formula starts quoted away, separators and
    line breaks kept inside their cell, points written as numbers."""
    from types import SimpleNamespace as NS
    from attention_course.tools.grading.reports import write_csv
    plan = NS(exercises=[NS(label="ch01_ex1"), NS(label="ch01_ex2")])
    exercises = [NS(label="ch01_ex1", points=1.5, summary="x"), NS(label="ch01_ex2", points=1 / 3, summary="")]
    results = [NS(student="\rcr", exercises=exercises, total=11 / 6, max_total=4,
                  problem="=cmd|' /C calc'!A0,\nnext line"),
               NS(student="@x,y", exercises=exercises, total=11 / 6, max_total=4, problem="")]
    write_csv(results, plan, tmp_path / "grades.csv")
    rows = list(csv.reader((tmp_path / "grades.csv").open(newline="", encoding="utf-8")))
    assert rows[0] == ["student", "ch01_ex1", "ch01_ex2", "total", "max_total", "notes"]
    assert rows[1] == ["'\rcr", "1.5", "0.3333", "1.8333", "4", "'=cmd|' /C calc'!A0,\nnext line"]
    assert rows[2] == ["'@x,y", "1.5", "0.3333", "1.8333", "4", "ch01_ex1: x"]
    assert all(_no_formula(c) for row in rows for c in row)


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


@pytest.mark.parametrize("tty", [True, False], ids=["terminal", "log"])
def test_progress_bar_is_tqdm_in_a_terminal_and_one_line_in_a_log(tty):
    from attention_course.tools.grading.reports import ProgressBar
    stream = _Stream(tty)
    bar = ProgressBar("chapter 03", stream=stream)
    for done in range(4):
        bar(done, 3)
    text = stream.getvalue()
    if tty:  # tqdm's own bar: percentage, counts and rate
        assert "chapter 03: 100%|" in text and "3/3" in text and "submission/s" in text, text
        assert "submissions graded in" not in text, text  # the bar, not the bar and a log line
    else:  # a log gets no carriage returns and no redraws, just the result
        assert "\r" not in text and text.count("\n") == 1, repr(text)
        assert text.startswith("chapter 03: 3/3 submissions graded in "), text
