import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# tests/exercise_helpers.py is imported by the tests in tests/exercises/ (plain
# `from exercise_helpers import ...`, whatever the import mode and the folder run).
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def _build(edition: str, out: Path, *options: str) -> tuple:
    # Figures come from the kernel's inline backend; an inherited MPLBACKEND would hide them.
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    cmd = [sys.executable, "-m", "attention_course.tools.cli", "build", "--edition", edition,
           "--root", str(ROOT), "--out", str(out), *options]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env)
    status, log = result.returncode, result.stdout + result.stderr
    if status == 0:
        # The Chinese edition goes under the English one (out/_build/html/zh): the English pages
        # link to their Chinese twins, and the browser tests load both.
        zh = subprocess.run(cmd[:-len(options) or None] + ["--lang", "zh"], capture_output=True, text=True,
                            env=env)
        status, log = zh.returncode, log + zh.stdout + zh.stderr
    return status, log, out / "_build" / "html"


@pytest.fixture(scope="session")
def full_site(tmp_path_factory):
    """The full edition, built once per session (warnings are errors) from the solution notebooks'
    stored outputs: nbval executes every solution notebook in this same suite and fails when a cell
    raises or its outputs differ from the stored ones, so executing them again here would build the
    same pages at twice the cost (issue 22: 203 s of a cold-cache build on 2 busy cores)."""
    return _build("full", tmp_path_factory.mktemp("full"), "--stored-outputs")


@pytest.fixture(scope="session")
def student_site(tmp_path_factory):
    """The student edition, built once per session."""
    return _build("student", tmp_path_factory.mktemp("student") / "site")


@pytest.fixture(scope="session")
def output_dir() -> Path:
    """Where tests leave artefacts for a person to look at (screenshots)."""
    path = ROOT / "_build" / "test-output"
    path.mkdir(parents=True, exist_ok=True)
    return path
