"""``attention-course progress``: a self-study reader's progress over the course.

On the untouched student notebooks every exercise is not started; on copies of the
solution notebooks every exercise is done. A reader's own notebook with a correct,
a wrong, an endless and an exiting answer gets one line each, with the next exercise
to do, and the endless one cannot hang the command (the grader's sandbox runs it).
"""
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attention_course.tools.notebook import exercise_code, load_cells, with_exercise_code
from attention_course.tools.progress import DONE, FAILING, NOT_STARTED, ExerciseProgress, NotebookProgress, render
from attention_course.checks.registry import all_exercises, get_exercise
from attention_course.tools.release import solution_paths

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = [int(p.name[:2]) for p in solution_paths(ROOT)]


def _progress(*args, cwd=None):
    result = subprocess.run([sys.executable, "-m", "attention_course.tools.cli", "progress", *map(str, args)],
                            capture_output=True, text=True, cwd=cwd or ROOT, timeout=300)
    return result.returncode, result.stdout, result.stderr


def _rows(stdout: str) -> dict:
    """label -> (mark, passed, total, state) from the tables."""
    return {m.group(2): (m.group(1), int(m.group(3)), int(m.group(4)), m.group(5))
            for m in re.finditer(r"^  (\S) (ch\d\d_ex\d+)  .*?  (\d+)/(\d+) checks  (.+)$", stdout, re.M)}


def test_on_the_student_notebooks_nothing_is_done_yet(tmp_path):
    status, out, err = _progress("chapters")
    assert status == 0, err
    rows = _rows(out)
    labels = [ex.label for chapter in CHAPTERS for ex in all_exercises(chapter)]
    assert sorted(rows) == sorted(labels)
    for label, (mark, passed, total, state) in rows.items():
        assert (mark, passed, state) == ("\u00b7", 0, "not started"), (label, rows[label])
    for chapter in CHAPTERS:
        assert f"next: ch{chapter:02d}_ex1 " in out
    assert re.search(rf"^Total: 0/{len(labels)} exercises done, 0/\d+ public checks passed, "
                     rf"in {len(CHAPTERS)} notebooks\nNext:  ch01_ex1 .* \(chapters/01_\w+\.ipynb\)$", out, re.M), out
    # The tensor toolkit beside the chapters has no exercise: nothing to report, not even a skip.
    assert (ROOT / "chapters" / "toolkit.ipynb").exists() and "toolkit" not in out, out
    # Not a terminal: no colour codes.
    assert "\033[" not in out
    # The default folder is chapters/ when run from the course folder: a course folder holding one
    # chapter (cheaper than all nine) gets chapter 1's part of the report above, word for word.
    (tmp_path / "chapters").mkdir()
    shutil.copy2(ROOT / "chapters" / "01_queries_keys_values.ipynb", tmp_path / "chapters")
    status, default, err = _progress(cwd=tmp_path)
    assert status == 0, err
    chapter_1 = default.split("\n\n")[0]
    assert chapter_1.startswith("Chapter 1 ") and chapter_1 in out, (chapter_1, out)


def test_on_copies_of_the_solution_notebooks_everything_is_done(tmp_path):
    for path in solution_paths(ROOT):
        shutil.copy2(path, tmp_path / path.name)
    status, out, err = _progress(tmp_path)
    assert status == 0, err
    rows = _rows(out)
    assert len(rows) == sum(len(all_exercises(c)) for c in CHAPTERS)
    for label, (mark, passed, total, state) in rows.items():
        assert (mark, state) == ("\u2713", "done") and passed == total > 0, (label, rows[label])
    assert out.count("every exercise of this chapter passes its public checks") == len(CHAPTERS)
    assert re.search(r"^Total: (\d+)/\1 exercises done, (\d+)/\2 public checks passed, .*\n"
                     r"All done: every exercise passes its public checks\.$", out, re.M), out


def test_a_readers_notebook_right_wrong_endless_and_exiting(tmp_path):
    nb = json.loads((ROOT / "chapters" / "03_scoring_functions.ipynb").read_text(encoding="utf-8"))
    solution = exercise_code(load_cells(ROOT / "solutions" / "03_scoring_functions.ipynb"))
    nb = with_exercise_code(nb, "ch03_ex1", solution["ch03_ex1"])
    nb = with_exercise_code(nb, "ch03_ex2", "class AdditiveAttention(nn.Module):\n"
                                            "    def __init__(self, query_size, key_size, num_hiddens):\n"
                                            "        super().__init__()\n"
                                            "        self.W_q = nn.Linear(query_size, num_hiddens)\n"
                                            "        self.W_k = nn.Linear(key_size, num_hiddens)\n"
                                            "        self.w_v = nn.Linear(num_hiddens, 1)\n"
                                            "    def forward(self, queries, keys, values, valid_lens=None):\n"
                                            "        f = self.W_q(queries).unsqueeze(2) + self.W_k(keys).unsqueeze(1)\n"
                                            "        w = torch.softmax(self.w_v(f).squeeze(-1), dim=-1)\n"
                                            "        return w @ values, w\n")
    nb = with_exercise_code(nb, "ch03_ex3", "while True:\n    pass\n")
    nb = with_exercise_code(nb, "ch03_ex5", "import sys\nsys.exit(3)\n")
    mine = tmp_path / "my_chapter3.ipynb"
    mine.write_text(json.dumps(nb), encoding="utf-8")
    before = mine.read_bytes()
    start = time.monotonic()
    status, out, err = _progress(mine, "--time-limit", "3")
    assert status == 0, err
    assert time.monotonic() - start < 60
    rows = _rows(out)
    assert rows["ch03_ex1"][0] == "\u2713" and rows["ch03_ex1"][3] == "done"
    assert rows["ch03_ex2"][0] == "\u2717" and rows["ch03_ex2"][3] == "failing"
    assert rows["ch03_ex3"][3] == "failing" and "timed out after 3 s" in out
    assert rows["ch03_ex4"][3] == "not started"
    assert rows["ch03_ex5"][3] == "failing" and "sys.exit()" in out
    assert "next: ch03_ex2 Additive attention as a module (write `AdditiveAttention`)" in out
    # chapter 3's totals from the registry: an author adding ch03_ex7 changes them
    chapter3 = all_exercises(3)
    done, checks = len(get_exercise("ch03_ex1").public_checks), sum(len(e.public_checks) for e in chapter3)
    assert re.search(rf"^Total: 1/{len(chapter3)} exercises done, {done}/{checks} public checks passed, in 1 notebook\n"
                     r"Next:  ch03_ex2 Additive attention as a module \(.*my_chapter3\.ipynb\)$", out, re.M), out
    assert mine.read_bytes() == before  # the reader's notebook is only read


def _progress_in_process(capsys, *args):
    """The command in this process: for refusals that end before the sandbox starts (a new
    interpreter would spend seconds importing torch to print one line)."""
    from attention_course.tools.cli import main
    capsys.readouterr()
    status = main(["progress", *map(str, args)])
    out, err = capsys.readouterr()
    return status, out, err


def test_a_notebook_that_is_not_a_course_notebook_gets_a_clear_message(tmp_path, capsys):
    other = tmp_path / "shopping.ipynb"
    other.write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "source": "print(1)",
                                            "outputs": [], "execution_count": None}],
                                 "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    status, out, err = _progress_in_process(capsys, other)
    assert status == 2 and out == ""
    assert f"{other} is not a course notebook: it has no exercise" in err
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{not json")
    status, _, err = _progress_in_process(capsys, broken)
    assert status == 2 and "is not a course notebook: not a readable notebook" in err
    # In a folder, other notebooks are named and skipped; the course notebooks are reported.
    shutil.copy2(ROOT / "chapters" / "01_queries_keys_values.ipynb", tmp_path)
    status, out, err = _progress(tmp_path)
    assert status == 0, err
    assert "skipped " in out and "shopping.ipynb: it has no exercise" in out and "broken.ipynb" in out
    assert "Chapter 1 " in out
    status, _, err = _progress_in_process(capsys, tmp_path / "missing")
    assert status == 2 and "no such notebook or folder" in err


def test_colours_only_for_a_terminal():
    book = NotebookProgress(Path("chapters/01_x.ipynb"), 1, "Title", [
        ExerciseProgress("ch01_ex1", "First", "f", 2, 2, DONE),
        ExerciseProgress("ch01_ex2", "Second", "g", 1, 3, FAILING, "wrong values " * 30),
        ExerciseProgress("ch01_ex3", "Third", "h", 0, 2, NOT_STARTED),
    ])
    plain = render([book], [], color=False, width=80)
    assert "\033[" not in plain
    assert "next: ch01_ex2 Second (write `g`)" in plain
    assert "1/3 exercises done" in plain
    # A long reason is wrapped under its row, at most three lines, within the width.
    reason_lines = [l for l in plain.splitlines() if l.startswith("      ")]
    assert 1 <= len(reason_lines) <= 3 and all(len(l) <= 80 for l in reason_lines)
    coloured = render([book], [], color=True, width=80)
    assert "\033[32m\u2713\033[0m" in coloured and "\033[31m\u2717\033[0m" in coloured


def test_a_failing_exercise_shows_the_hint_of_the_mistake_it_matched():
    """The table's line for a failing exercise: its first failing check and why, and, where the answer
    behaved like a kept mistake, that mistake's hint (which names it); a check's own hint only restates
    what the check does, so it stays out of the table."""
    from attention_course.checks.checking import CheckResult
    from attention_course.tools.grading.grader import ExerciseResult
    from attention_course.tools.progress import _status
    named = CheckResult("ch03_ex2", "1-D valid_lens", False, "item 0 differs", "valid_lens is ignored.", "valid_lens ignored")
    plain = CheckResult("ch03_ex2", "1-D valid_lens", False, "item 0 differs", "this check loads parameters.")
    passed = CheckResult("ch03_ex2", "parameters", True)
    status, line = _status(ExerciseResult("ch03_ex2", "AdditiveAttention", "Additive", 1, checks=[passed, named]))
    assert line == "1-D valid_lens: item 0 differs Hint: valid_lens is ignored.", line
    status, line = _status(ExerciseResult("ch03_ex2", "AdditiveAttention", "Additive", 1, checks=[passed, plain]))
    assert line == "1-D valid_lens: item 0 differs", line
