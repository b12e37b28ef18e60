"""The course site builds with Sphinx's warnings as errors (-W -n --keep-going):
no broken reference, no failing cell, no missing citation."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_full_edition_builds_without_warnings(tmp_path):
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    out = tmp_path / "book"
    # Figures come from the kernel's inline backend; an inherited MPLBACKEND would hide them.
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    result = subprocess.run([str(jupyter_book), "build", str(ROOT), "--path-output", str(out),
                             "-W", "-n", "--keep-going"], capture_output=True, text=True, env=env)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-6000:]
    # The kernel's own log lines ("[IPKernelApp] WARNING | ...") are not Sphinx warnings.
    warnings = [l for l in log.splitlines() if "WARNING" in l and "[IPKernelApp]" not in l]
    assert not warnings, warnings[:20]
    html = out / "_build" / "html"
    for page in ["index.html", "bibliography.html"]:
        assert (html / page).exists(), page
    chapters = sorted((html / "solutions").glob("*.html"))
    assert len(chapters) == len(list((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")))
    for page in chapters:
        text = page.read_text(encoding="utf-8")
        for section in ["Overview", "Prerequisites", "Summary", "Exercises", "References"]:
            assert f">{section}<" in text, f"{page.name} lacks the {section} section"
        assert "exercise" in text and "solution" in text
        assert "<img" in text, f"{page.name} shows no figure"
        assert "Traceback" not in text, f"{page.name} shows a traceback"
