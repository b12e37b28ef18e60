"""Issue 39 item 1: the chapters of an instructor's release run top to bottom.

A release of chapters 1-3 (chapter 3's library answers three of its graded exercises, so its
worked examples reach withheld pieces) is executed with a kernel that sees the released package:

* as shipped (a student who has solved nothing): no cell raises but an exercise's own stub; a
  worked example that needs a withheld piece prints the course's results, exactly its stored
  output, with a one-line note naming the exercise;
* solved (each exercise cell replaced by the solution notebook's): every cell runs and every
  public check passes; a worked example then runs on the student's own answer; calling the
  course's answer from one's own is the "no credit" error, not a recursion; and ch03_ex2, which
  "does not depend on your answer to Exercise 1", passes with a wrong masked_softmax.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from attention_course.tools.notebook import _CHECK_RE
from attention_course.tools.student_release import release_students

ROOT = Path(__file__).resolve().parents[1]
STEMS = ["01_queries_keys_values", "02_nadaraya_watson", "03_scoring_functions"]
NOTE = "until then its results are the course's"
STUB = re.compile(r'raise NotImplementedError\("(ch\d\d_ex\d+): implement')


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    out = tmp_path_factory.mktemp("release") / "students"
    release_students(ROOT, out, chapters=[1, 2, 3], repository_url="https://github.com/x/y", practice=[],
                     answers_released=[])
    return out


def _execute(nb, release: Path, monkeypatch, allow_errors: bool):
    monkeypatch.setenv("PYTHONPATH", str(release))  # the kernel imports the released package
    monkeypatch.setenv("MPLBACKEND", "Agg")
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=allow_errors,
                   resources={"metadata": {"path": str(release / "chapters")}}).execute()
    return nb


def _stream(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.output_type == "stream")


def _raised(cell) -> bool:
    return any(o.output_type == "error" for o in cell.get("outputs", []))


@pytest.mark.parametrize("stem", STEMS)
def test_a_released_chapter_as_shipped_stops_only_on_its_stubs(release, monkeypatch, stem):
    shipped = nbformat.read(release / "chapters" / f"{stem}.ipynb", as_version=4)
    nb = _execute(nbformat.read(release / "chapters" / f"{stem}.ipynb", as_version=4), release, monkeypatch, True)
    raised = [c.source for c in nb.cells if c.cell_type == "code" and _raised(c)]
    assert all(STUB.search(source) for source in raised), raised
    # A worked example shows what it showed when the course ran it (its stored output), with
    # the note naming the exercise where a withheld piece's result is the course's.
    noted = []
    for before, after in zip(shipped.cells, nb.cells):
        if before.cell_type != "code" or not before.get("outputs"):
            continue
        text = _stream(after)
        if NOTE in text:
            noted.append(after.source)
            assert re.search(r"^\(this example runs on your \w+ once you have written ch03_ex\d; ", text, re.M)
            text = "\n".join(line for line in text.splitlines() if NOTE not in line) + ("\n" if text else "")
        assert text == _stream(before), (after.source, text, _stream(before))
    if stem.startswith("03"):
        assert any("attn.masked_softmax" in s for s in noted) and any("AdditiveAttention" in s for s in noted)
        assert any("attn.scaled_dot_product_attention" in s for s in noted)
    else:
        assert not noted


def _solved(release: Path, stem: str):
    nb = nbformat.read(release / "chapters" / f"{stem}.ipynb", as_version=4)
    solution = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
    answers = [c.source for c in solution.cells if c.cell_type == "code" and "# BEGIN SOLUTION" in c.source
               and "solution-only" not in c.metadata.get("tags", [])]
    stubs = [c for c in nb.cells if c.cell_type == "code" and STUB.search(c.source)]
    assert len(answers) == len(stubs) > 0
    for cell, answer in zip(stubs, answers):
        cell.source = answer
    return nb


EXTRA_CH03 = [
    # A worked example runs on the student's own masked_softmax once it is written.
    "seen = []\n_mine = masked_softmax\n"
    "def masked_softmax(scores, valid_lens):\n    seen.append(1)\n    return _mine(scores, valid_lens)\n"
    "weights_2d = attn.masked_softmax(scaled_scores, per_query_lens)\nassert seen, 'not the student\\'s own'\n"
    "masked_softmax = _mine\nprint('examples run on mine')",
    # Calling the course's answer from one's own: no credit, not a RecursionError.
    "def masked_softmax(scores, valid_lens):\n    return attn.masked_softmax(scores, valid_lens)\n"
    "check('ch03_ex1', masked_softmax)\nmasked_softmax = _mine",
    # ch03_ex2 does not depend on the answer to ch03_ex1: a wrong masked_softmax leaves it passing.
    "def masked_softmax(scores, valid_lens):\n    return torch.zeros_like(scores)\n"
    "check('ch03_ex2', scaled_dot_product_attention)\ncheck('ch03_ex3', AdditiveAttention)\n"
    "masked_softmax = _mine",
]


@pytest.mark.parametrize("stem", STEMS)
def test_a_released_chapter_solved_runs_on_the_students_answers(release, monkeypatch, stem):
    nb = _solved(release, stem)
    extra = EXTRA_CH03 if stem.startswith("03") else []
    nb.cells += [nbformat.v4.new_code_cell(source) for source in extra]
    _execute(nb, release, monkeypatch, False)  # raises on any error
    for cell in nb.cells[:len(nb.cells) - len(extra)]:
        match = cell.cell_type == "code" and _CHECK_RE.search(cell.source)
        if match:
            line = re.search(r": (\d+)/(\d+) public checks passed", _stream(cell))
            assert line and line.group(1) == line.group(2), _stream(cell)
    if extra:
        spy, refused, independent = (_stream(c) for c in nb.cells[-3:])
        assert "examples run on mine" in spy
        assert ("attention_course.functional.masked_softmax is the course's answer to ch03_ex1: no credit for "
                "calling it; write your own masked_softmax") in refused and "Recursion" not in refused
        assert re.search(r"ch03_ex1 \S+ masked_softmax: 0/\d+ public checks passed", refused)
        lines = re.findall(r": (\d+)/(\d+) public checks passed", independent)
        assert len(lines) == 2 and all(a == b for a, b in lines), independent


def test_the_stand_ins_refuse_with_the_words_of_check_and_the_grader():
    from attention_course.checks.answers import no_credit_message
    from attention_course.withheld import no_credit_message as stand_in_message
    assert stand_in_message("attention_course.functional.masked_softmax", "ch03_ex1", "masked_softmax") == \
        no_credit_message("attention_course.functional", "masked_softmax", "ch03_ex1", "masked_softmax")
