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
    cmd = [sys.executable, "-m", "attention_course.cli", "build", "--edition", edition,
           "--root", str(ROOT), "--out", str(out), *options]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return result.returncode, result.stdout + result.stderr, out / "_build" / "html"


def _shared_build(tmp_path_factory, worker_id: str, name: str, edition: str, *options: str) -> tuple:
    """One build per test session, whichever pytest-xdist worker asks first: the others wait for it
    under a file lock and read its result (the tests only read the pages). Before, each worker that
    ran a site, book or PDF test built its own copy (about a minute of CPU each)."""
    if worker_id == "master":   # no xdist: the session's own folder
        return _build(edition, tmp_path_factory.mktemp(name) / "site", *options)
    import json
    from filelock import FileLock
    shared = tmp_path_factory.getbasetemp().parent / f"shared-{name}"   # one folder per session
    done = shared.with_suffix(".json")
    with FileLock(str(shared) + ".lock"):
        if not done.exists():
            status, log, html_dir = _build(edition, shared / "site", *options)
            done.write_text(json.dumps([status, log, str(html_dir)]), encoding="utf-8")
        status, log, html_dir = json.loads(done.read_text(encoding="utf-8"))
    return status, log, Path(html_dir)


@pytest.fixture(scope="session")
def full_site(tmp_path_factory, worker_id):
    """The full edition, built once per session (warnings are errors) from the solution notebooks'
    stored outputs: nbval executes every solution notebook in this same suite and fails when a cell
    raises or its outputs differ from the stored ones, so executing them again here would build the
    same pages at twice the cost (issue 22: 203 s of a cold-cache build on 2 busy cores)."""
    return _shared_build(tmp_path_factory, worker_id, "full", "full", "--stored-outputs")


@pytest.fixture(scope="session")
def student_site(tmp_path_factory, worker_id):
    """The student edition, built once per session."""
    return _shared_build(tmp_path_factory, worker_id, "student", "student")


@pytest.fixture(scope="session")
def output_dir() -> Path:
    """Where tests leave artefacts for a person to look at (screenshots)."""
    path = ROOT / "_build" / "test-output"
    path.mkdir(parents=True, exist_ok=True)
    return path
