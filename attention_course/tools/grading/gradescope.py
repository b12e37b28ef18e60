"""A Gradescope autograder for one chapter: build the zip, and its ``run_autograder`` entry point.

``attention-course gradescope --chapter 3 --out autograder.zip`` writes a zip with

* ``setup.sh`` – installs the pinned requirements (``torch==2.13.0`` exactly, from
  PyTorch's CPU index, numpy and matplotlib at the course's pins) into ``/autograder/venv``, with
  Python 3.11 or newer (the image's ``python3``, or Ubuntu's ``python3.11`` where that is older);
* ``run_autograder`` – grades ``$AUTOGRADER_ROOT/submission/*.ipynb`` (default root
  ``/autograder``) and writes ``$AUTOGRADER_ROOT/results/results.json``;
* ``requirements.txt``, ``autograder.json`` (chapter, seed, limits); for a chapter in
  :data:`KERNELS_CHAPTERS` (chapter 11) the requirements add the kernels extra (``triton==3.9.0``,
  from ``requirements-kernels.txt``): the grader runs its kernels in triton's interpreter on the CPU;
* ``attention_course/`` – the course package, hidden checks included (they stay in
  the grader's process; the sandboxed child only sees the student-facing runtime);
* ``chapters/NN_*.ipynb`` – the chapter's student notebook (its setup cell is the
  fallback when a submission lost its ``setup`` tag);
* ``extra_checks/`` – the instructor's private checks, when given;
* ``course.yml`` – the instructor's points and weights, when the course has one.

Of ``attention_course/exercises/`` the zip holds the chapter's own modules only: the
references and hidden checks of other chapters stay out of it.

``AUTOGRADER_ROOT`` and ``AUTOGRADER_PYTHON`` make the layout testable offline: unpack
the zip into ``ROOT/source``, put a notebook in ``ROOT/submission`` and run
``ROOT/source/run_autograder``.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
import zipfile
from pathlib import Path
from typing import Optional

from .runtime import PACKAGE_DIR

DEFAULT_PINS = {"torch": "2.13.0", "numpy": "2.4.6", "matplotlib": "3.11.2"}
# Chapters whose kernels need the kernels extra (triton, about 1 GB): only their zips install it.
KERNELS_CHAPTERS = (11,)
KERNELS_PINS = {"triton": "3.9.0"}

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image.
# The grader needs Python 3.11 or newer. Gradescope's Ubuntu 22.04 base image has Python 3.10:
# there Ubuntu's python3.11 is installed; Ubuntu 24.04's python3 (3.12) is used as it is. The
# packages go into a virtual environment, /autograder/venv, which run_autograder uses.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
recent() { command -v "$1" >/dev/null 2>&1 && "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; }
PY=python3
if ! recent python3; then
    apt-get update
    apt-get install -y python3.11 python3.11-venv
    PY=python3.11
fi
if ! "$PY" -m venv /autograder/venv; then
    apt-get update && apt-get install -y "$PY-venv"
    "$PY" -m venv --clear /autograder/venv
fi
"$PY" --version
# torch is pinned exactly and taken from PyTorch's CPU index (no CUDA build); chapter 11's
# requirements add triton (its kernels are graded in triton's interpreter, on the CPU).
/autograder/venv/bin/python -m pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu \\
    -r /autograder/source/requirements.txt
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission; AUTOGRADER_ROOT overrides /autograder (tests).
# The Python is setup.sh's virtual environment (AUTOGRADER_PYTHON overrides it).
set -u
ROOT="${AUTOGRADER_ROOT:-/autograder}"
if [ -n "${AUTOGRADER_PYTHON:-}" ]; then
    PYTHON="$AUTOGRADER_PYTHON"
elif [ -x /autograder/venv/bin/python ]; then
    PYTHON=/autograder/venv/bin/python
else
    PYTHON=python3
fi
cd "$ROOT/source"
export PYTHONPATH="$ROOT/source"
exec "$PYTHON" -m attention_course.tools.grading.gradescope run --root "$ROOT"
"""


def requirement_pins(root: Path) -> dict:
    pins = dict(DEFAULT_PINS)
    path = root / "requirements.txt"
    if path.is_file():
        for line in path.read_text().splitlines():
            m = re.match(r"^\s*(torch|numpy|matplotlib)==([\w.+-]+)", line)
            if m:
                pins[m.group(1)] = m.group(2)
    return pins


def kernels_pins(root: Path) -> dict:
    """The kernels extra's pins (``requirements-kernels.txt``, else :data:`KERNELS_PINS`)."""
    pins = dict(KERNELS_PINS)
    path = root / "requirements-kernels.txt"
    if path.is_file():
        for line in path.read_text().splitlines():
            m = re.match(r"^\s*(triton)==([\w.+-]+)", line)
            if m:
                pins[m.group(1)] = m.group(2)
    return pins


def build_zip(chapter: int, out: Path, *, seed: int, time_limit: float = 10.0, memory_mb: int = 1024,
              jobs: int = 1, extra_checks: Optional[Path] = None, root: Optional[Path] = None,
              hidden_visibility: str = "after_published", lang: str = "en") -> list:
    """Write the autograder zip; return the names it holds. ``lang`` is the language of the feedback
    (``zh``: the catalog of attention_course/locales travels with the zip)."""
    from ...checks.registry import all_exercises
    root = Path(root) if root else PACKAGE_DIR.parent
    if not all_exercises(chapter):
        raise ValueError(f"chapter {chapter} has no registered exercise")
    if extra_checks is not None:
        from .grader import build_plan
        build_plan(chapter, seed, extra_checks, root)  # fail now, not on Gradescope
    pins = requirement_pins(root)
    if chapter in KERNELS_CHAPTERS:
        pins.update(kernels_pins(root))
    from .reports import HIDDEN_VISIBILITIES
    if hidden_visibility not in HIDDEN_VISIBILITIES:
        raise ValueError(f"--hidden-visibility must be one of {', '.join(HIDDEN_VISIBILITIES)}, "
                         f"not {hidden_visibility!r}")
    config = {"chapter": chapter, "seed": seed, "time_limit": time_limit, "memory_mb": memory_mb, "jobs": jobs,
              "hidden_visibility": hidden_visibility, "lang": lang}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    names = []
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        def add(name: str, data: str, mode: int = 0o644) -> None:
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
            names.append(name)

        add("setup.sh", SETUP_SH, 0o755)
        add("run_autograder", RUN_AUTOGRADER, 0o755)
        add("requirements.txt", "".join(f"{k}=={v}\n" for k, v in pins.items()))
        add("autograder.json", json.dumps(config, indent=2) + "\n")
        for path in sorted(PACKAGE_DIR.rglob("*.py")):
            parts = path.relative_to(PACKAGE_DIR).parts
            if "__pycache__" in parts:
                continue
            # The grading kit of one chapter: the references and hidden checks of that chapter only.
            if parts[0] == "exercises" and len(parts) > 2 and parts[1] != f"ch{chapter:02d}":
                continue
            add(f"attention_course/{path.relative_to(PACKAGE_DIR).as_posix()}", path.read_text(encoding="utf-8"))
        for path in sorted(PACKAGE_DIR.glob("locales/*/LC_MESSAGES/*.po")):  # the feedback's translations
            add(f"attention_course/{path.relative_to(PACKAGE_DIR).as_posix()}", path.read_text(encoding="utf-8"))
        from ..course_config import chapter_settings, default_path
        if default_path().is_file():  # the instructor's points and weights travel with the zip
            add("course.yml", chapter_settings(default_path(), chapter))
        for path in sorted((root / "chapters").glob(f"{chapter:02d}_*.ipynb")):
            add(f"chapters/{path.name}", path.read_text(encoding="utf-8"))
        if extra_checks is not None:
            for path in sorted(Path(extra_checks).glob("*.py")):
                add(f"extra_checks/{path.name}", path.read_text(encoding="utf-8"))
    return names


def _find_notebook(submission_dir: Path, chapter: int) -> tuple:
    notebooks = sorted(p for p in submission_dir.rglob("*.ipynb")
                       if ".ipynb_checkpoints" not in p.parts and not p.name.startswith("."))
    if not notebooks:
        return None, "no .ipynb notebook was submitted"
    if len(notebooks) == 1:
        return notebooks[0], ""
    same = [p for p in notebooks if p.name.startswith(f"{chapter:02d}_")]
    chosen = (same or notebooks)[0]
    return chosen, f"{len(notebooks)} notebooks were submitted; graded {chosen.name}"


def _student_identity(root: Path) -> str:
    """Who submitted, from Gradescope's submission_metadata.json (the submitters' ids or emails,
    sorted, for a group): each student's hidden inputs are drawn from it. 'submission' when absent."""
    try:
        meta = json.loads((root / "submission_metadata.json").read_text(encoding="utf-8"))
        users = meta.get("users") if isinstance(meta, dict) else None
        keys = sorted(str(u.get("id") or u.get("email") or "") for u in users if isinstance(u, dict))
        keys = [k for k in keys if k]
        return "+".join(keys)[:200] if keys else "submission"
    except (OSError, ValueError, TypeError, AttributeError, RecursionError):
        return "submission"


def run(root: Path) -> int:
    """``run_autograder``: grade the one submitted notebook, write results/results.json."""
    from .grader import Submission, run_grading
    from .reports import gradescope_results, write_json
    start = time.perf_counter()
    source = root / "source"
    config = json.loads((source / "autograder.json").read_text())
    chapter = int(config["chapter"])
    from ...checks.language import set_language
    set_language(config.get("lang", "en"))  # the feedback's language, chosen when the zip was built
    results_path = root / "results" / "results.json"
    path, note = _find_notebook(root / "submission", chapter)
    if path is None:
        write_json({"score": 0.0, "output": f"Your submission could not be graded: {note}.", "tests": [],
                    "visibility": "visible"}, results_path)
        print(note)
        return 0
    extra = source / "extra_checks"
    run_ = run_grading([Submission(_student_identity(root), path)], chapter, seed=config["seed"],
                       jobs=int(config.get("jobs", 1)), time_limit=float(config.get("time_limit", 10)),
                       memory_mb=int(config.get("memory_mb", 1024)),
                       extra_checks=extra if extra.is_dir() else None, root=source)
    result = run_.results[0]
    if note:
        result.notes.append(note)
    from .grader_io import GRADER_ERROR, INTERNAL_ERROR
    ours = [e.label for e in result.exercises if e.reason.startswith((GRADER_ERROR, INTERNAL_ERROR))]
    data = gradescope_results(result, run_.plan, time.perf_counter() - start,
                              config.get("hidden_visibility", "after_published"))
    if ours:  # never a silent 0: the student and the instructor both see that the grader failed, not the code
        data["output"] = (f"The grader hit an error of its own on {', '.join(ours)}: this score is incomplete "
                          f"and is not a judgement of your code. Your instructor will grade it again.\n\n"
                          + str(data.get("output", "")))
    write_json(data, results_path)
    print("\n".join(run_.log))  # the autograder's stdout (hidden from students)
    if ours:
        print(f"grader error on {', '.join(ours)}: rerun this submission", file=sys.stderr)
    return 1 if ours else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attention_course.tools.grading.gradescope")
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="grade /autograder/submission (what run_autograder calls)")
    r.add_argument("--root", default="/autograder")
    args = parser.parse_args(argv)
    return run(Path(args.root))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
