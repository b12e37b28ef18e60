"""Every open question of an exercise has a reference answer (issue 26, item 7).

An exercise statement that asks for something beyond the function -- "in a cell of your own",
"answer in a markdown cell", "Then answer" -- is followed, in its solution notebook, by a
solution-only Markdown cell that starts "**A reference answer.**" between the exercise's
``{solution-start}`` and ``{solution-end}``: folded on the full site, absent from the student
notebooks (the release drops solution-only cells)."""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ASKS = re.compile(r"cell of your own|answer in a (markdown )?cell|[Tt]hen answer")
LABEL = re.compile(r":label: (ch\d\d_ex\d+)")


def _open_questions():
    """(notebook, label, the cells from the exercise to its solution-end) for every exercise that asks."""
    found = []
    for path in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        for i, cell in enumerate(cells):
            text = "".join(cell["source"])
            label = LABEL.search(text)
            if cell["cell_type"] == "markdown" and "{exercise}" in text and label and ASKS.search(text):
                end = next(j for j in range(i + 1, len(cells)) if "{solution-end}" in "".join(cells[j]["source"]))
                found.append((path.name, label.group(1), cells[i + 1:end]))
    return found


OPEN = _open_questions()


def test_the_course_has_open_questions():
    # Issue 40 turned four open questions (ch01_ex4, ch01_ex6, ch02_ex4, ch03_ex5) into checked
    # answers; what is left must still be found, so the tests below are not vacuous.
    assert len(OPEN) >= 8, [label for _, label, _ in OPEN]


@pytest.mark.parametrize("notebook,label,cells", OPEN, ids=[label for _, label, _ in OPEN])
def test_each_open_question_has_a_folded_reference_answer(notebook, label, cells):
    answers = [c for c in cells if c["cell_type"] == "markdown"
               and "".join(c["source"]).startswith("**A reference answer.**")]
    assert answers, f"{notebook}: {label} asks an open question but has no reference answer"
    for cell in answers:
        assert "solution-only" in cell.get("metadata", {}).get("tags", []), (notebook, label)


def test_no_reference_answer_reaches_a_student_notebook():
    for path in sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb")):
        text = path.read_text(encoding="utf-8")
        assert "A reference answer." not in text, path.name
