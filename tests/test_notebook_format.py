"""Every solution notebook is stored as nbformat writes it (keys sorted, one-space indent, text as
lists of lines). A notebook edited by a script that dumps JSON its own way looks "reformatted" to
`attention-course new-exercise`, which then refuses to add cells (its diff would touch every cell);
this test names the notebook at once instead of failing the scaffold's test far from the cause."""
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "solutions").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_solution_notebook_is_stored_as_nbformat_writes_it(path):
    raw = path.read_text(encoding="utf-8")
    canonical = nbformat.writes(nbformat.reads(raw, as_version=4)) + "\n"
    assert raw == canonical, (f"{path.name} is not in nbformat's form: rewrite it with "
                              "nbformat.write(nbformat.read(path, 4), path) (then add a final newline)")


def test_the_check_can_fail(tmp_path):
    path = ROOT / "solutions" / "01_queries_keys_values.ipynb"
    bent = tmp_path / path.name
    bent.write_text(path.read_text(encoding="utf-8").replace('"name": "stdout",\n     "output_type": "stream"',
                                                             '"output_type": "stream",\n     "name": "stdout"', 1),
                    encoding="utf-8")
    with pytest.raises(AssertionError, match="not in nbformat's form"):
        test_solution_notebook_is_stored_as_nbformat_writes_it(bent)


CHAPTERS = [p for p in NOTEBOOKS if p.name[:2].isdigit()]


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_each_chapter_says_how_to_run_its_hidden_checks(path):
    """Self-study readers meet the thorough self-check in every chapter's exercises, with a label of
    that chapter (issue 40): `check("chNN_exM", ..., thorough=True)` and `progress --thorough`."""
    text = "".join("".join(c.source) for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    assert f'check("ch{path.name[:2]}_ex' in text and "thorough=True" in text, path.name
    assert "progress --thorough" in text, path.name
