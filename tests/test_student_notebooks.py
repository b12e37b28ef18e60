"""A student notebook, untouched, runs top to bottom: its install cell does nothing
(the package is installed), every exercise's stub raises NotImplementedError with its
label, and every check cell prints ✗ lines instead of crashing the notebook."""
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from attention_course.tools.notebook import _CHECK_RE
from attention_course.tools.release import INSTALL_TAG

ROOT = Path(__file__).resolve().parents[1]
STUDENT = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", STUDENT, ids=lambda p: p.name)
def test_untouched_student_notebook_runs_and_checks_report_failures(path):
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()  # raises on any error
    # Where the course package is installed, the install cell does nothing and prints nothing.
    install = [c for c in nb.cells if INSTALL_TAG in c.metadata.get("tags", [])]
    assert len(install) == 1 and install[0].outputs == [], install
    for cell in nb.cells:
        match = _CHECK_RE.search(cell.source)
        if cell.cell_type != "code" or not match:
            continue
        label = match.group(1)
        text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        assert re.search(rf"^{label} \u00b7 \w+: 0/\d+ public checks passed$", text, re.M), text
        assert "\u2713" not in text
        assert f"not implemented yet (NotImplementedError: {label}: implement" in text
