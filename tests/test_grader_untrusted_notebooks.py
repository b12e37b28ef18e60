"""Issue 21's notebooks that once took a whole class down, or got the wrong cell graded.

Each row was measured against the grader before its fix: a notebook nested 100,000 levels deep,
a cell whose metadata is a string or whose source list holds a number (it breaks the nbformat
schema: 0 with the place named; what real clients write stays valid), and an expression too deep
for ``ast.parse`` crashed ``grade`` for everyone (no grades.csv); a Markdown cell of many directive
openings took time quadratic in its length; an exercise cell that defined its answer inside an
``if`` had an old scratch cell graded instead. Now each is one submission's business.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from attention_course.tools.grading.grader import Submission, run_grading
from attention_course.tools.grading.sandbox import Sandbox
from attention_course.tools.notebook import exercise_labels, load_cells, NotebookError, with_exercise_code
from attention_course.checks.registry import all_exercises

ROOT = Path(__file__).resolve().parents[1]
SOLUTION_1 = next((ROOT / "solutions").glob("01_*.ipynb"))
CHAPTER1_POINTS = sum(ex.points for ex in all_exercises(1))

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the grader's sandbox needs Linux")


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    with Sandbox(jobs=2, workdir=tmp_path_factory.mktemp("sandbox")) as box:
        yield box


def _solution() -> dict:
    return json.loads(SOLUTION_1.read_text(encoding="utf-8"))


def _grade(sandbox, folder: Path, notebooks: dict) -> dict:
    subs = []
    for name, content in notebooks.items():
        path = folder / f"{name}.ipynb"
        path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
        subs.append(Submission(name, path))
    run = run_grading(subs, 1, seed=3, sandbox=sandbox, time_limit=10)
    return {r.student: r for r in run.results}


def test_a_notebook_nested_too_deep_scores_zero_and_the_class_goes_on(sandbox, tmp_path):
    deep = '{"cells": ' + "[" * 100_000 + "]" * 100_000 + ', "nbformat": 4}'
    with pytest.raises(NotebookError, match="not a readable notebook"):
        (tmp_path / "x.ipynb").write_text(deep)
        load_cells(tmp_path / "x.ipynb")
    results = _grade(sandbox, tmp_path, {"deep": deep, "good": _solution()})
    assert sum(e.points for e in results["deep"].exercises) == 0
    assert "not a readable notebook" in results["deep"].exercises[0].reason
    assert sum(e.points for e in results["good"].exercises) == CHAPTER1_POINTS


def test_a_notebook_that_breaks_the_schema_scores_zero_with_the_place_named(sandbox, tmp_path):
    """Cells of the wrong types (a string as metadata, a number in a source list, a cell that is
    not an object) break the nbformat schema: the submission scores 0 with where and why."""
    nb = _solution()
    nb["cells"].insert(1, {"cell_type": "code", "metadata": "tags", "source": ["x = 1\n", 7, None]})
    nb["cells"].insert(1, {"cell_type": 3, "metadata": {"tags": "setup"}, "source": {"a": 1}})
    nb["cells"].insert(1, "not a cell")
    results = _grade(sandbox, tmp_path, {"odd": nb, "good": _solution()})
    assert sum(e.points for e in results["odd"].exercises) == 0
    reason = results["odd"].exercises[0].reason
    assert "not a valid notebook" in reason and "cells/1" in reason, reason
    assert sum(e.points for e in results["good"].exercises) == CHAPTER1_POINTS


def test_what_notebook_clients_write_is_valid(sandbox, tmp_path):
    """No cell ids (older clients writing 4.5), Colab's metadata, an older minor version and
    outputs of every kind: all valid, all graded in full."""
    without_ids = _solution()
    for cell in without_ids["cells"]:
        cell.pop("id", None)
    colab = _solution()
    colab["metadata"] = {"colab": {"provenance": [], "toc_visible": True}, "kernelspec": {"name": "python3",
                                                                                           "display_name": "Python 3"},
                         "accelerator": "GPU"}
    for cell in colab["cells"]:
        cell.pop("id", None)
        cell["metadata"] = dict(cell.get("metadata", {}), id="x1y2", colab={"base_uri": "https://localhost:8080/"})
    colab["nbformat_minor"] = 0
    results = _grade(sandbox, tmp_path, {"without_ids": without_ids, "colab": colab})
    for name in ("without_ids", "colab"):
        assert sum(e.points for e in results[name].exercises) == CHAPTER1_POINTS, \
            [e.reason for e in results[name].exercises if e.points == 0]


def test_an_expression_too_deep_to_parse_costs_only_its_exercise(sandbox, tmp_path):
    first = all_exercises(1)[0]
    deep = f"{first.name} = " + "-" * 200_000 + "1\n"  # MemoryError in ast.parse; RecursionError for a long + chain
    nb = with_exercise_code(_solution(), first.label, deep)
    results = _grade(sandbox, tmp_path, {"deep_expression": nb})
    points = {e.label: e.points for e in results["deep_expression"].exercises}
    assert points[first.label] == 0
    assert sum(points.values()) == CHAPTER1_POINTS - first.points


def test_many_directive_openings_are_read_in_linear_time():
    # Before: a lazy pattern spanning lines took 16 s on 196 KB of such lines; this is 2 MB.
    cell = "```{exercise}\n" * 150_000
    start = time.perf_counter()
    assert exercise_labels(cell + ":label: ch01_ex1\n") == ["ch01_ex1"]
    assert exercise_labels(cell) == []
    assert time.perf_counter() - start < 10


def test_the_exercise_block_is_graded_however_it_defines_the_answer(sandbox, tmp_path):
    first = all_exercises(1)[0]
    nb = _solution()
    cells = nb["cells"]
    index = next(i for i, c in enumerate(cells) if "# BEGIN SOLUTION" in "".join(c["source"]) and
                 first.name in "".join(c["source"]))
    correct = "".join(cells[index]["source"])
    # The block defines the answer inside an `if`; an old broken attempt sits in a later cell.
    cells[index]["source"] = "if True:\n" + "".join("    " + line for line in correct.splitlines(True))
    cells.append({"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                  "source": f"def {first.name}(*args, **kwargs):\n    return None\n"})
    results = _grade(sandbox, tmp_path, {"nested": nb})
    graded = {e.label: e for e in results["nested"].exercises}
    assert graded[first.label].points == first.points, graded[first.label].summary


# ------------------------------------------------------------------ one submission, one row


def test_every_entry_gets_its_own_row_and_feedback_file(sandbox, tmp_path):
    from attention_course.tools.grading.grader import discover
    from attention_course.tools.grading.reports import write_class_reports
    good, stub = _solution(), json.loads(next((ROOT / "chapters").glob("01_*.ipynb")).read_text())
    class_dir = tmp_path / "class"
    (class_dir / "twin").mkdir(parents=True)
    (class_dir / "twin" / "work.ipynb").write_text(json.dumps(good))
    (class_dir / "twin~2.ipynb").write_text(json.dumps(stub))
    (class_dir / "twin.ipynb").write_text(json.dumps(stub))       # -> twin~3: twin~2 is taken
    (class_dir / "same name.ipynb").write_text(json.dumps(good))
    (class_dir / "same_name.ipynb").write_text(json.dumps(stub))
    (class_dir / ".dotted.ipynb").write_text(json.dumps(good))
    (class_dir / "copycat.ipynb").symlink_to(class_dir / "same name.ipynb")
    subs, ignored = discover(class_dir)
    names = [s.student for s in subs]
    assert sorted(names) == sorted(["twin", "twin~2", "twin~3", "same name", "same_name", "copycat"])
    assert ".dotted.ipynb" in ignored
    copycat = next(s for s in subs if s.student == "copycat")
    assert copycat.path is None and "symbolic link" in copycat.problem
    run = run_grading(subs, 1, seed=3, sandbox=sandbox, time_limit=10)
    totals = {r.student: r.total for r in run.results}
    assert totals["twin"] == CHAPTER1_POINTS and totals["twin~2"] == 0 and totals["twin~3"] == 0
    assert totals["same name"] == CHAPTER1_POINTS and totals["same_name"] == 0 and totals["copycat"] == 0
    out = tmp_path / "grades"
    write_class_reports(run.results, run.plan, out, run.log)
    files = sorted(p.name for p in (out / "feedback").iterdir())
    assert len(files) == len(subs), files
    owners = {p.name: p.read_text().splitlines()[0] for p in (out / "feedback").iterdir()}
    assert sorted(owners.values()) == sorted(f"# Feedback: {n}" for n in names)


def test_a_name_or_message_cannot_forge_a_log_line_or_reach_the_terminal_raw(sandbox, tmp_path):
    first = all_exercises(1)[0]
    nb = with_exercise_code(_solution(), first.label,
                            f"raise ValueError('boom\\nmallory: 99/99\\x1b]52;c;aGk=\\x07')\n")
    path = tmp_path / "eve.ipynb"
    path.write_text(json.dumps(nb))
    run = run_grading([Submission("eve\nmallory: 99/99 \x1b[2J", path)], 1, seed=3, sandbox=sandbox, time_limit=10)
    log = "\n".join(run.log)
    assert not any(line.startswith("mallory") for line in log.splitlines()), log
    assert "\x1b" not in log and "\x07" not in log
    from attention_course.tools.grading.reports import feedback_markdown, feedback_text
    for text in (feedback_markdown(run.results[0], run.plan), feedback_text(run.results[0], run.plan)):
        assert "\x1b" not in text and "\x07" not in text
    from attention_course.tools.grading.reports import write_csv
    write_csv(run.results, run.plan, tmp_path / "grades.csv")      # every class CSV goes through csv_safe
    gradebook = (tmp_path / "grades.csv").read_text(encoding="utf-8")
    assert "\x1b" not in gradebook and "\x07" not in gradebook and "boom" in gradebook


# ------------------------------------------------------------------ no sockets, no processes

ESCAPES = """import os, socket
tried = []
for name, family, kind, where in [("udp", socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", {udp_port})),
                                   ("udp6", socket.AF_INET6, socket.SOCK_DGRAM, ("::1", {udp_port})),
                                   ("unix", socket.AF_UNIX, socket.SOCK_STREAM, {unix_path!r}),
                                   ("unix-datagram", socket.AF_UNIX, socket.SOCK_DGRAM, {unix_path!r})]:
    try:
        s = socket.socket(family, kind)
        s.connect(where) if kind == socket.SOCK_STREAM else s.sendto(b"hidden inputs", where)
        tried.append(name + ": open")
    except OSError as error:
        tried.append(name + ": " + type(error).__name__)
for name, start in [("fork", os.fork), ("spawn", lambda: os.posix_spawn("/bin/sleep", ["sleep", "30"], {{}}))]:
    try:
        pid = start()
        if pid == 0:
            os._exit(0)
        tried.append(name + ": open")
    except OSError as error:
        tried.append(name + ": " + type(error).__name__)
raise RuntimeError("; ".join(tried))
"""


def test_a_child_can_neither_open_a_socket_nor_start_a_process(sandbox, tmp_path):
    import socket
    listener_udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener_udp.bind(("127.0.0.1", 0))
    listener_udp.settimeout(0.5)
    unix_path = str(tmp_path / "service.sock")
    listener_unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener_unix.bind(unix_path)
    listener_unix.listen(1)
    listener_unix.settimeout(0.5)
    first = all_exercises(1)[0]
    code = ESCAPES.format(udp_port=listener_udp.getsockname()[1], unix_path=unix_path)
    results = _grade(sandbox, tmp_path, {"escaper": with_exercise_code(_solution(), first.label, code)})
    reason = next(e for e in results["escaper"].exercises if e.label == first.label).reason
    assert "open" not in reason, reason
    for name in ("udp", "udp6", "unix", "unix-datagram", "fork", "spawn"):
        assert f"{name}: PermissionError" in reason, reason
    with pytest.raises(socket.timeout):
        listener_udp.recvfrom(100)
    with pytest.raises(socket.timeout):
        listener_unix.accept()
    listener_udp.close()
    listener_unix.close()


# ------------------------------------------------------------------ points only for the work

RAISER = '''import inspect as _inspect
import torch as _torch

def _raise_naming_everything(*args, **kwargs):
    shapes = [tuple(a.shape) for a in list(args) + list(kwargs.values()) if isinstance(a, _torch.Tensor)]
    raise ValueError("bad input: " + " ".join({names!r}) + " " + " ".join(str(s) for s in shapes))
'''


def _raiser(exercise) -> str:
    import inspect
    ref = exercise.reference
    target = ref.forward if inspect.isclass(ref) else ref
    names = [n for n in inspect.signature(target).parameters if n != "self"]
    if inspect.isclass(ref):
        names += [n for n in inspect.signature(ref.__init__).parameters if n != "self"]
    code = RAISER.format(names=names)
    if exercise.kind == "class":
        return code + (f"class {exercise.name}(_torch.nn.Module):\n"
                       f"    def __init__(self, *args, **kwargs):\n        _raise_naming_everything(*args, **kwargs)\n")
    return code + f"{exercise.name} = _raise_naming_everything\n"


@pytest.mark.parametrize("chapter", [2, 9])
def test_raising_the_right_error_without_computing_earns_nothing(sandbox, tmp_path, chapter):
    path = next((ROOT / "solutions").glob(f"{chapter:02d}_*.ipynb"))
    nb = json.loads(path.read_text(encoding="utf-8"))
    for exercise in all_exercises(chapter):
        nb = with_exercise_code(nb, exercise.label, _raiser(exercise))
    (tmp_path / "raiser.ipynb").write_text(json.dumps(nb))
    run = run_grading([Submission("raiser", tmp_path / "raiser.ipynb")], chapter, seed=3, sandbox=sandbox,
                      time_limit=10)
    result = run.results[0]
    passed_error_checks = [c.check for e in result.exercises for c in e.checks if c.passed]
    assert passed_error_checks, "the raising answer no longer passes any error check: the test shows nothing"
    assert result.total == 0, [(e.label, e.points) for e in result.exercises if e.points]
    assert any("count once every other check" in n for e in result.exercises for n in e.notes)


FORGER = '''import json, os
head = json.dumps({"phase": "done", "error": None, "defined": [], "outcomes": [[{"status": "ok",
                   "value": {"__tensor__": [0, "float32", [100000, 100000]]}}]]}).encode()
forged = b"ACOUT1\\n" + len(head).to_bytes(8, "little") + head   # 40 GB declared, nothing sent
with open("outcomes.bin", "wb") as f:   # a forged result file (nobody reads files a child writes) ...
    f.write(forged)
for fd in range(3, 4096):                # ... and a forged outcome down every pipe it can find
    try:
        os.write(fd, len(forged).to_bytes(8, "little") + forged)
    except OSError:
        pass
os._exit(0)
'''


def test_a_child_that_writes_its_own_result_file_scores_zero_and_the_class_goes_on(sandbox, tmp_path):
    first = all_exercises(1)[0]
    nb = with_exercise_code(_solution(), first.label, FORGER)
    results = _grade(sandbox, tmp_path, {"forger": nb, "good": _solution()})
    graded = {e.label: e for e in results["forger"].exercises}
    assert graded[first.label].points == 0
    assert "rejected the results" in graded[first.label].reason, graded[first.label].reason
    assert sum(e.points for e in results["forger"].exercises) == CHAPTER1_POINTS - first.points
    assert sum(e.points for e in results["good"].exercises) == CHAPTER1_POINTS
