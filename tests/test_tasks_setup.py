"""tasks.py's environment: the site's set-up leaves out chapter 11's extra (triton, about 1 GB),
the suite's and the lab's install it, and neither reinstalls what is already there (issues 43, 44)."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tasks(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT))
    try:
        import tasks as module
    finally:
        sys.path.remove(str(ROOT))
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text("")  # an environment exists: only pip's calls are recorded
    monkeypatch.setattr(module, "BIN", bin_dir)
    monkeypatch.setattr(module, "STAMP", tmp_path / "venv" / ".installed-requirements")
    calls = []
    monkeypatch.setattr(module, "_run", lambda cmd, **kw: calls.append([str(c) for c in cmd]) or 0)
    module.calls = calls
    return module


def _installs_kernels(call):
    return str(ROOT / "requirements-kernels.txt") in call


def test_the_site_installs_no_kernel_extra_and_the_suite_does(tasks):
    tasks.setup(kernels=False)
    assert len(tasks.calls) == 1 and not _installs_kernels(tasks.calls[0])
    tasks.setup(kernels=False)
    assert len(tasks.calls) == 1, "an unchanged base environment was reinstalled"
    tasks.setup(kernels=True)
    assert len(tasks.calls) == 2 and _installs_kernels(tasks.calls[1])
    tasks.setup(kernels=True)
    tasks.setup(kernels=False)
    assert len(tasks.calls) == 2, "an environment holding the extra was reinstalled"


def test_the_extra_is_pinned_apart_and_locked():
    kernels = (ROOT / "requirements-kernels.txt").read_text(encoding="utf-8")
    assert "triton==3.9.0" in kernels.splitlines()
    assert "triton" not in (ROOT / "requirements.txt").read_text(encoding="utf-8")
    assert "triton==3.9.0" in (ROOT / "requirements.lock").read_text(encoding="utf-8").splitlines()
    assert 'kernels = ["triton==3.9.0"]' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_book_builds_from_stored_outputs_unless_asked_to_execute(tasks):
    tasks.book([])
    assert not _installs_kernels(tasks.calls[0])
    assert "build" in tasks.calls[1] and "--stored-outputs" in tasks.calls[1]
    # Then the Chinese edition, from the catalogs (never executed), under the English site.
    assert "build" in tasks.calls[2] and tasks.calls[2][-2:] == ["--lang", "zh"]
    tasks.book(["--execute"])
    build = tasks.calls[-2]
    assert "jupyter-book" in build[0] and "--execute" not in build and "--stored-outputs" not in build
    assert tasks.calls[-1][-2:] == ["--lang", "zh"]
