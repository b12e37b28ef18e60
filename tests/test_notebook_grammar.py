"""One notebook grammar (attention_course.tools.notebook), hardened, on every path that reads a
solution notebook: ``release`` (a file, a notebook in memory, the command) and the scaffold
(``new-exercise``, the plan and the command).

Each hostile notebook is refused with a clear error naming the notebook (and the cell and the line
where there is one), never a traceback of an internal error: a notebook over the size limit, JSON
nested deeper than the grammar's bound (and deeper than the JSON parser's), a cell that is not an
object or whose source is not text, unbalanced or nested solution markers, and a cell of 150,000
directive openings (read in linear time: a lazy pattern spanning lines once took quadratic time).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import nbformat
import pytest

from attention_course.tools import notebook
from attention_course.tools.notebook import NotebookError, parse_solution, read_notebook, stub_code
from attention_course.tools.release import ReleaseError, generate, release_notebook
from attention_course.tools.scaffold import ScaffoldError, plan_new_exercise

EX1 = "```{exercise} One\n:label: ch09_ex1\n\nDo it.\n```"
GOOD_CODE = 'def f(x):\n    """Doc."""\n    # BEGIN SOLUTION\n    return x + 1\n    # END SOLUTION'
CHECK1 = 'check("ch09_ex1", f)'
NAME = "09_demo.ipynb"


def _good() -> dict:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Demo\n\n## Exercises"), nbformat.v4.new_markdown_cell(EX1),
                nbformat.v4.new_code_cell(GOOD_CODE), nbformat.v4.new_code_cell(CHECK1)]
    for index, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{index}"
    return json.loads(nbformat.writes(nb))


def _nested(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"x": value}
    return value


def _with(change) -> str:
    nb = _good()
    change(nb)
    return json.dumps(nb)


def _source(index: int, source):
    def change(nb):
        nb["cells"][index]["source"] = source
    return change


# name -> (the file's text, words the error must hold)
HOSTILE = {
    "not JSON": ("{not json", ["cannot be read as a notebook", "JSONDecodeError"]),
    "nested deeper than the bound": (_with(lambda nb: nb["cells"][0]["metadata"].update(deep=_nested(600))),
                                     ["cannot be read as a notebook", f"nested deeper than {notebook.MAX_DEPTH} levels"]),
    "nested deeper than the parser": ('{"cells": ' + "[" * 100_000 + "]" * 100_000 + ', "nbformat": 4}',
                                      ["cannot be read as a notebook", "RecursionError"]),
    "not nbformat 4": (json.dumps({"cells": [], "nbformat": 3}), ["not an nbformat-4 notebook (found nbformat=3)"]),
    "a cell that is not an object": (_with(lambda nb: nb["cells"].insert(1, "not a cell")),
                                     ["not a valid notebook", "str where a cell should be at cells/1"]),
    "a source that is a number": (_with(_source(2, 7)), ["not a valid notebook", "at cells/2"]),
    "a source list holding a number": (_with(_source(2, ["x = 1\n", 7])), ["not a valid notebook", "at cells/2"]),
    "an unbalanced BEGIN SOLUTION": (_with(_source(2, "def f():\n    # BEGIN SOLUTION\n    return 1\n")),
                                     ["cell 3, line 2: '# BEGIN SOLUTION' is never closed"]),
    "an END SOLUTION alone": (_with(_source(2, "def f():\n    return 1\n    # END SOLUTION")),
                              ["cell 3, line 3: '# END SOLUTION' without a matching '# BEGIN SOLUTION'"]),
    "nested BEGIN SOLUTION": (_with(_source(2, "# BEGIN SOLUTION\nx = 1\n# BEGIN SOLUTION\n# END SOLUTION")),
                              ["cell 3, line 3: nested '# BEGIN SOLUTION'"]),
    "a region outside any exercise": (_with(lambda nb: nb["cells"].insert(1, nbformat.v4.new_code_cell(GOOD_CODE))),
                                      ["cell 2: a solution region outside any exercise"]),
    "a label used twice": (_with(lambda nb: nb["cells"].append(nbformat.v4.new_markdown_cell(EX1))),
                           ["cell 5: exercise label 'ch09_ex1' is used twice (first in cell 2)"]),
    "150,000 directive openings": (_with(_source(1, "```{exercise}\n" * 150_000)),
                                   ["cell 2: an {exercise} directive has no ':label: chNN_exM' option"]),
}


def _assert_clear(error: Exception, words: list) -> None:
    message = str(error)
    assert NAME in message, message
    for word in words:
        assert word in message, message
    assert "Traceback" not in message and "\n" not in message, message


@pytest.mark.parametrize("case", list(HOSTILE), ids=str)
def test_release_refuses_a_hostile_solution_notebook_clearly(case, tmp_path):
    text, words = HOSTILE[case]
    path = tmp_path / "solutions" / NAME
    path.parent.mkdir()
    path.write_text(text, encoding="utf-8")
    start = time.perf_counter()
    with pytest.raises(ReleaseError) as info:
        generate(path, portable=False)
    assert time.perf_counter() - start < 10
    _assert_clear(info.value, words)


@pytest.mark.parametrize("case", list(HOSTILE), ids=str)
def test_the_scaffold_refuses_a_hostile_solution_notebook_clearly(case, tmp_path):
    text, words = HOSTILE[case]
    path = tmp_path / "solutions" / NAME
    path.parent.mkdir()
    path.write_text(text, encoding="utf-8")
    package = tmp_path / "attention_course" / "exercises" / "ch09"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""Chapter 9."""\n', encoding="utf-8")
    start = time.perf_counter()
    with pytest.raises(ScaffoldError) as info:
        plan_new_exercise(tmp_path, 9, "T", "fresh_name", exercises=[])
    assert time.perf_counter() - start < 10
    _assert_clear(info.value, words)


def test_the_good_notebook_is_read_by_both_paths(tmp_path):
    """The control: the same notebook, unbroken, releases and takes a new exercise."""
    path = tmp_path / "solutions" / NAME
    path.parent.mkdir()
    path.write_text(json.dumps(_good()), encoding="utf-8")
    text, regions = generate(path, portable=False)
    stub = nbformat.reads(text, as_version=4).cells[2].source
    assert 'raise NotImplementedError("ch09_ex1: implement f")' in stub and [r.code for r in regions] == ["    return x + 1"]
    package = tmp_path / "attention_course" / "exercises" / "ch09"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""Chapter 9."""\n', encoding="utf-8")
    plan = plan_new_exercise(tmp_path, 9, "T", "fresh_name", exercises=[])
    assert plan.label == "ch09_ex2"


def test_a_notebook_over_the_size_limit_is_refused_on_both_paths(tmp_path, monkeypatch):
    monkeypatch.setattr(notebook, "MAX_NOTEBOOK_BYTES", 2**20)
    path = tmp_path / "solutions" / NAME
    path.parent.mkdir()
    path.write_text(_with(_source(0, "# Demo\n\n## Exercises\n\n" + "x" * 2**20)), encoding="utf-8")
    with pytest.raises(ReleaseError) as info:
        generate(path, portable=False)
    _assert_clear(info.value, ["cannot be read as a notebook", "over the 1 MiB limit"])
    package = tmp_path / "attention_course" / "exercises" / "ch09"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""Chapter 9."""\n', encoding="utf-8")
    with pytest.raises(ScaffoldError) as info:
        plan_new_exercise(tmp_path, 9, "T", "fresh_name", exercises=[])
    _assert_clear(info.value, ["over the 1 MiB limit"])
    with pytest.raises(NotebookError, match="not a readable notebook .*over the 1 MiB limit"):
        notebook.load_cells(path)  # what the grader and progress read


@pytest.mark.parametrize("change,words", [
    # Deeper than copying the notebook could recurse (set as a plain dict: nbformat's node would recurse too).
    (lambda nb: dict.__setitem__(nb.cells[0].metadata, "deep", _nested(2000)),
     [f"nested deeper than {notebook.MAX_DEPTH} levels"]),
    (lambda nb: nb.cells[2].update(source=7), ["not a valid notebook", "at cells/2"]),
    (lambda nb: nb.cells.insert(1, "not a cell"), ["str where a cell should be at cells/1"]),
], ids=["deep", "source a number", "not a cell"])
def test_a_hostile_notebook_in_memory_is_refused_by_release_notebook(change, words):
    nb = nbformat.from_dict(_good())
    change(nb)
    with pytest.raises(ReleaseError) as info:
        release_notebook(nb, Path("solutions") / NAME, portable=False)
    _assert_clear(info.value, words)


def test_the_commands_report_a_hostile_notebook_in_one_line(tmp_path, monkeypatch, capsys):
    from attention_course.tools import cli, scaffold
    text, words = HOSTILE["a source that is a number"]
    path = tmp_path / "solutions" / NAME
    path.parent.mkdir()
    path.write_text(text, encoding="utf-8")
    (tmp_path / "attention_course" / "exercises" / "ch09").mkdir(parents=True)
    (tmp_path / "attention_course" / "exercises" / "ch09" / "__init__.py").write_text("", encoding="utf-8")
    assert cli.main(["release", "--root", str(tmp_path)]) == 2
    monkeypatch.setattr(scaffold, "check_package_root", lambda root: None)
    assert cli.main(["new-exercise", "9", "T", "fresh_name", "--root", str(tmp_path)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "Traceback" not in out.err
    lines = out.err.splitlines()
    assert [line.split(":")[0] for line in lines] == ["attention-course release", "attention-course new-exercise"]
    for line in lines:
        assert NAME in line and all(word in line for word in words), line
    assert not (tmp_path / "chapters").exists()


def test_the_grammar_reads_in_linear_time():
    """Many markers, many openings, many blank lines before a solution directive: each was, or
    could be, quadratic in a cell's length."""
    start = time.perf_counter()
    many = "def f():\n" + "    # BEGIN SOLUTION\n    x = 1\n    # END SOLUTION\n" * 50_000
    stub, regions = stub_code(many, "ch09_ex1", "cell")
    assert len(regions) == 50_000 and stub.count('raise NotImplementedError("ch09_ex1: implement f")') == 50_000
    cells = [{"cell_type": "markdown", "source": EX1}, {"cell_type": "markdown", "source": "\n" * 2_000_000 + "x"},
             {"cell_type": "code", "source": CHECK1}]
    assert parse_solution(cells, NAME, 9).labels == {"ch09_ex1": 1}
    assert time.perf_counter() - start < 10


def test_the_course_notebooks_are_read_within_the_bounds():
    root = Path(__file__).resolve().parents[1]
    for path in sorted((root / "solutions").glob("*.ipynb")):
        assert read_notebook(path).cells
