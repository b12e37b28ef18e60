"""The release generator: committed student notebooks are up to date, carry no
solution, keep every prose edit, and bad solution notebooks get clear errors."""
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from attention_course.tools.notebook import exercise_labels
from attention_course.tools.release import (CourseSettings, ReleaseError, generate, release, release_notebook, render,
                                      solution_paths)

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = solution_paths(ROOT)


def _text(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def test_there_are_solution_notebooks():
    assert len(SOLUTIONS) >= 2


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_committed_student_notebook_is_what_release_generates(path):
    committed = ROOT / "chapters" / path.name
    assert committed.exists(), f"{committed} is missing: run `attention-course release`"
    generated, _ = generate(path)
    assert committed.read_text(encoding="utf-8") == generated, \
        f"{committed} is stale: run `attention-course release --chapter {int(path.name[:2])}`"


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_student_notebook_carries_no_solution(path):
    solution = nbformat.read(path, as_version=4)
    student_text, regions = generate(path)
    student = json.loads(student_text)
    assert regions, f"{path.name} has no solution region"
    code_and_outputs = "\n".join(_text(c) + json.dumps(c.get("outputs", [])) for c in student["cells"])
    for region in regions:
        assert region.code.strip() not in code_and_outputs
        # The same distinctive-line rule as the pre-stop hook: long lines only.
        for line in region.distinctive_lines():
            assert line not in code_and_outputs, f"{path.name} leaks {line!r} ({region.label})"
    # No solution directive, solution-only cell or exercise output survives.
    assert "{solution" not in code_and_outputs
    assert all("solution-only" not in c.get("metadata", {}).get("tags", []) for c in student["cells"])
    first_exercise = next(i for i, c in enumerate(student["cells"])
                          if c["cell_type"] == "markdown" and exercise_labels(_text(c)))
    for cell in student["cells"][first_exercise:]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None
    # Outputs of the solution's exercise cells (e.g. the ✓ lines) appear nowhere.
    solution_outputs = [json.dumps(c.get("outputs", [])) for c in solution.cells[first_exercise:]
                        if c.cell_type == "code" and c.get("outputs")]
    assert solution_outputs, "the solution notebook should carry executed check outputs"
    after_first = "\n".join(_text(c) + json.dumps(c.get("outputs", [])) for c in student["cells"][first_exercise:])
    assert "\u2713" not in after_first
    # Stubs raise with the exercise label.
    for region in regions:
        assert f'raise NotImplementedError("{region.label}: ' in code_and_outputs


def _course_copy(tmp_path, *solutions):
    """A course folder holding the bibliography, the configuration and some solution notebooks."""
    (tmp_path / "solutions").mkdir()
    for name in ("references.bib", "_config.yml"):
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    for source in solutions:
        (tmp_path / "solutions" / source.name).write_bytes(source.read_bytes())
    return tmp_path


def test_release_check_mode_reports_stale_and_writes_nothing(tmp_path):
    _course_copy(tmp_path)
    (tmp_path / "chapters").mkdir()
    source = SOLUTIONS[0]
    (tmp_path / "solutions" / source.name).write_bytes(source.read_bytes())
    stale = tmp_path / "chapters" / source.name
    stale.write_text("old\n")
    cli = [sys.executable, "-m", "attention_course.tools.cli", "release", "--root", str(tmp_path), "--check"]
    result = subprocess.run(cli, capture_output=True, text=True)
    assert result.returncode == 1 and "stale" in result.stderr
    assert stale.read_text() == "old\n"
    result = subprocess.run(cli[:-1], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    result = subprocess.run(cli, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("portable", [True, False], ids=["portable", "myst"])
def test_prose_edit_shows_up_word_for_word(portable):
    nb = nbformat.read(SOLUTIONS[0], as_version=4)
    index = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and i > 0)
    sentence = "A brand-new sentence, *with* $x^2$ and $$y^2$$ markup, `code`, kept verbatim."
    nb.cells[index].source += "\n\n" + sentence
    student, _ = release_notebook(nb, SOLUTIONS[0], portable=portable)
    cell = next(c for c in student.cells if sentence in c.source)
    assert cell.source.endswith("\n\n" + sentence)
    if not portable:
        assert cell.source == nb.cells[index].source


def test_release_never_touches_solution_notebooks(tmp_path):
    source = SOLUTIONS[0]
    _course_copy(tmp_path, source)
    copy = tmp_path / "solutions" / source.name
    before = copy.read_bytes()
    release(tmp_path)
    assert copy.read_bytes() == before
    assert (tmp_path / "chapters" / source.name).exists()


# ------------------------------------------------------------ bad solution notebooks

def _nb(*cells):
    nb = nbformat.v4.new_notebook()
    for kind, source, *tags in cells:
        cell = nbformat.v4.new_markdown_cell(source) if kind == "md" else nbformat.v4.new_code_cell(source)
        if tags:
            cell.metadata["tags"] = list(tags)
        nb.cells.append(cell)
    return nb


EX1 = "```{exercise} One\n:label: ch09_ex1\n\nDo it.\n```"
EX2 = "```{exercise} Two\n:label: ch09_ex2\n\nDo it too.\n```"
GOOD_CODE = 'def f(x):\n    """Doc."""\n    # BEGIN SOLUTION\n    return x + 1\n    # END SOLUTION'
CHECK1 = 'check("ch09_ex1", f)'
PATH = Path("solutions/09_demo.ipynb")


def test_good_minimal_notebook_releases():
    nb = _nb(("md", "# Demo"), ("md", EX1), ("md", "```{solution-start} ch09_ex1\n:class: dropdown\n```"),
             ("code", GOOD_CODE), ("md", "```{solution-end}\n```"), ("code", CHECK1),
             ("code", "print('answer')", "solution-only"))
    nb.cells[3].outputs = [nbformat.v4.new_output("stream", text="42\n")]
    stub = 'def f(x):\n    """Doc."""\n    raise NotImplementedError("ch09_ex1: implement f")'
    student, regions = release_notebook(nb, PATH, settings=CourseSettings())
    assert [c.source for c in student.cells] == ["# Demo", "## Exercise 1 (ch09_ex1): One\n\nDo it.", stub, CHECK1]
    assert student.cells[2].outputs == []
    assert [r.code for r in regions] == ["    return x + 1"]
    # The MyST form (the student edition of the site) keeps the directive.
    student, _ = release_notebook(nb, PATH, portable=False, settings=CourseSettings())
    assert [c.source for c in student.cells] == ["# Demo", EX1, stub, CHECK1]


@pytest.mark.parametrize("cells,message", [
    ((("md", EX1), ("code", 'def f():\n    # BEGIN SOLUTION\n    return 1\n'), ("code", CHECK1)),
     "cell 2, line 2: '# BEGIN SOLUTION' is never closed"),
    ((("md", EX1), ("code", 'def f():\n    return 1\n    # END SOLUTION'), ("code", CHECK1)),
     "cell 2, line 3: '# END SOLUTION' without a matching"),
    ((("md", EX1), ("code", '# BEGIN SOLUTION\nx = 1\n# BEGIN SOLUTION\n# END SOLUTION'), ("code", CHECK1)),
     "cell 2, line 3: nested '# BEGIN SOLUTION'"),
    ((("md", EX1), ("code", CHECK1), ("md", EX1.replace("One", "Again")), ("code", CHECK1)),
     "cell 3: exercise label 'ch09_ex1' is used twice (first in cell 1)"),
    ((("md", EX1), ("code", GOOD_CODE)),
     "cell 1: exercise ch09_ex1 has no check cell"),
    ((("code", GOOD_CODE), ("md", EX1), ("code", CHECK1)),
     "cell 1: a solution region outside any exercise"),
    ((("md", EX1.replace("ch09_ex1", "ch03_ex1")), ("code", CHECK1)),
     "belongs to chapter 03, not 09"),
    ((("md", EX1.replace("ch09_ex1", "exercise-1")), ("code", CHECK1)),
     "'exercise-1' is not of the form chNN_exM"),
    ((("md", EX1), ("md", "Some prose.\n\n```{solution} ch09_ex1\nAnswer.\n```"), ("code", CHECK1)),
     "cell 2: a markdown cell mixes a solution directive with other text"),
])
def test_bad_solution_notebook_gets_a_clear_error(cells, message):
    with pytest.raises(ReleaseError) as info:
        release_notebook(_nb(*cells), PATH)
    assert str(PATH) in str(info.value)
    assert message in str(info.value)


def test_unregistered_and_missing_exercises_are_errors():
    nb = _nb(("md", EX1), ("code", GOOD_CODE), ("code", CHECK1))
    with pytest.raises(ReleaseError, match="ch09_ex1 are not registered"):
        release_notebook(nb, PATH, registered={"ch01_ex1"})
    with pytest.raises(ReleaseError, match="registered exercise.*ch09_ex2 have no"):
        release_notebook(nb, PATH, registered={"ch09_ex1", "ch09_ex2"})


def test_malformed_notebook_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "09_demo.ipynb"
    bad.write_text("{not json")
    with pytest.raises(ReleaseError, match="09_demo.ipynb: cannot be read as a notebook"):
        generate(bad)


def test_cli_reports_release_errors_without_a_traceback(tmp_path):
    _course_copy(tmp_path)
    nb = _nb(("md", EX1), ("code", 'def f():\n    # BEGIN SOLUTION\n    return 1\n'), ("code", CHECK1))
    (tmp_path / "solutions" / "09_demo.ipynb").write_text(render(nb))
    result = subprocess.run([sys.executable, "-m", "attention_course.tools.cli", "release", "--root", str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "09_demo.ipynb, cell 2, line 2" in result.stderr
    assert not (tmp_path / "chapters").exists()
