"""Issue 43: chapter 11's student notebook installs the kernels extra (triton, pinned as
``requirements-kernels.txt`` pins it) on first use, in its install cell; chapters 1-10 never do, and
the install cell never imports triton (``attention_course.kernels`` must pick Triton's interpreter
first where there is no GPU)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from attention_course.tools.course_settings import (INSTALL_TAG, course_settings, install_cell_source,
                                                    needs_kernels)

ROOT = Path(__file__).resolve().parents[1]
PIN = next(line.strip() for line in (ROOT / "requirements-kernels.txt").read_text().splitlines()
           if line.startswith("triton"))


def _install_cell(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if INSTALL_TAG in c.metadata.get("tags", [])]
    assert len(cells) == 1, path.name
    return cells[0].source


def test_the_pin_is_the_kernels_extras():
    assert PIN == "triton==3.9.0"
    assert course_settings(ROOT).kernels_requirement == PIN
    assert f'"{PIN}"' in install_cell_source(course_settings(ROOT), kernels=True)
    assert "triton" not in install_cell_source(course_settings(ROOT))


def test_which_notebooks_need_the_kernels():
    code = lambda text: {"cell_type": "code", "source": text}  # noqa: E731
    assert needs_kernels([code("import torch\nfrom attention_course import check, kernels")])
    assert needs_kernels([code("import triton.language as tl")])
    assert needs_kernels([code("from attention_course.kernels import flash_forward")])
    assert not needs_kernels([code("import torch\n# kernels come in chapter 11"), code("x = 'triton'")])
    assert not needs_kernels([{"cell_type": "markdown", "source": "import triton"}])


@pytest.mark.parametrize("path", sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.name)
def test_only_chapter_11_installs_triton(path):
    source = _install_cell(path)
    if path.name.startswith("11_"):
        assert f'"{PIN}"' in source, source
    else:
        assert "triton" not in source, path.name


def test_the_install_cell_installs_triton_where_it_is_missing_without_importing_it(tmp_path):
    """Run chapter 11's install cell where triton cannot be found and pip is a recorder: it asks pip
    for the pinned triton, once, and imports no triton; where triton is found it asks for nothing."""
    source = install_cell_source(course_settings(ROOT), kernels=True)
    script = tmp_path / "run.py"
    script.write_text(f'''import json, subprocess, sys
if sys.argv[1] == "hide":
    sys.modules["triton"] = None   # importlib.util.find_spec("triton") is None: as if not installed
calls = []
subprocess.check_call = lambda argv, **kw: calls.append(argv) or 0
exec(compile({source!r}, "<install cell>", "exec"))
print(json.dumps({{"calls": calls, "imported": [m for m, v in sys.modules.items() if v is not None and m.split(".")[0] == "triton"]}}))
''')
    for mode, expected in (("hide", [[sys.executable, "-m", "pip", "install", "--quiet", PIN]]), ("keep", [])):
        done = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, timeout=120,
                              cwd=ROOT)
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout.strip().splitlines()[-1])
        assert found["imported"] == [], found
        if mode == "keep" and importlib.util.find_spec("triton") is None:
            continue  # no triton in this environment: nothing to compare
        assert found["calls"] == expected, (mode, found)
        assert ("installing the kernels extra" in done.stdout) == bool(expected), done.stdout
