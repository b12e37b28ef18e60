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
