"""Build the two editions of the course site.

* **full** – built in place from the course folder: chapter pages come from
  ``solutions/`` (prose, executed outputs, folded solutions). Output: ``_build/html``.
* **student** – built from a staging copy (``_build/student-src``) whose table of
  contents points at student notebooks generated afresh from ``solutions/`` in their
  **MyST** form (:func:`attention_course.tools.release.generate` with ``portable=False``), so
  the pages keep their exercise boxes and footnoted citations; they carry no solution.
  The portable notebooks of ``chapters/`` (what a student opens in a notebook client)
  are what the pages offer for download. Nothing is executed: the student notebooks
  keep the worked examples' outputs and have the exercises' outputs cleared.
  Output: ``_build/student/html``.

Both are built with ``jupyter-book build -W -n --keep-going`` (warnings are errors).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

import yaml

# What the student edition copies from the course folder besides chapters/.
_STUDENT_FILES = ["intro.md", "bibliography.md", "exercises.md", "instructors.md", "references.bib"]


def jupyter_book() -> str:
    """The ``jupyter-book`` command: the one beside this Python when there is one."""
    candidate = Path(sys.executable).parent / "jupyter-book"
    return str(candidate) if candidate.exists() else "jupyter-book"


def unreleased_targets(root: Path, released) -> dict:
    """Reference targets defined in the chapters not among ``released`` (chapter numbers): label ->
    the words shown instead (:mod:`attention_course.sphinxext` reads them as plain text)."""
    import nbformat
    from .release import chapter_number, solution_paths
    out = {}
    for path in solution_paths(root):
        chapter = chapter_number(path)
        if chapter in released:
            continue
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type != "markdown":
                continue
            for name in re.findall(r"^\((\S+?)\)=\s*$", cell.source, re.M) + \
                    re.findall(r"^\s*:label:\s*(\S+)\s*$", cell.source, re.M):
                out[name] = f"chapter {chapter}, not released yet"
            for name in re.findall(r"\$\$\s*\((\S+?)\)", cell.source):
                out[name] = f"chapter {chapter}, not released yet"
        out[f"chapters/{path.stem}"] = f"chapter {chapter}, not released yet"
    return out


def stage_student(root: Path, staging: Path) -> Path:
    """Create the student edition's source folder; return it."""
    root, staging = Path(root), Path(staging)
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    for name in _STUDENT_FILES:
        if (root / name).exists():
            shutil.copy2(root / name, staging / name)
    shutil.copytree(root / "_static", staging / "_static")
    shutil.copytree(root / "_extra", staging / "_extra")
    (staging / "chapters").mkdir()
    from .release import EXERCISE_INDEX, exercise_index, generate, solution_paths
    if (staging / EXERCISE_INDEX).exists():  # written afresh: it follows course.yml even if not re-released
        text = exercise_index(root)
        lang = _language(root)
        if lang != "en":  # a translated course folder (attention_course.tools.translated_edition)
            from .translations import table, translate_markdown
            text = translate_markdown(text, table(root, lang, Path(EXERCISE_INDEX).stem))
        (staging / EXERCISE_INDEX).write_text(text, encoding="utf-8")
    for solution in solution_paths(root):
        text, _ = generate(solution, portable=False)
        (staging / "chapters" / solution.name).write_text(text, encoding="utf-8")
    # The toolkit's page comes from its MyST source, beside the chapters as in solutions/ (the
    # table of contents below moves it with them), so that the chapters' {ref}s to it resolve.
    from .release import TOOLKIT_SOURCE, toolkit_notebook
    if (root / TOOLKIT_SOURCE).exists():
        (staging / "chapters" / Path(TOOLKIT_SOURCE).name).write_text(
            toolkit_notebook(root, portable=False), encoding="utf-8")

    config_data = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    config_data["title"] = f"{config_data.get('title', 'Course')} (student edition)"
    config_data["exclude_patterns"] = [p for p in config_data.get("exclude_patterns", []) if not p.startswith("chapters")]
    # The student notebooks are shown as generated: worked examples keep their
    # outputs, exercises are empty. Executing them would only print failing checks.
    config_data.setdefault("execute", {})["execute_notebooks"] = "off"
    sphinx_config = config_data.setdefault("sphinx", {}).setdefault("config", {})
    sphinx_config["attention_course_edition"] = "student"
    # Downloads offer the portable student notebooks of the course folder, not the MyST pages' sources.
    sphinx_config["attention_course_notebooks"] = str((root / "chapters").resolve())
    (staging / "_config.yml").write_text(yaml.safe_dump(config_data, sort_keys=False), encoding="utf-8")

    toc = (root / "_toc.yml").read_text(encoding="utf-8").replace("file: solutions/", "file: chapters/")
    from .course_config import active
    config = active()
    if config.chapters is not None:
        # course.yml releases some chapters: the others leave the site, and references to them
        # read as plain text (attention_course.sphinxext).
        from .release import chapter_number
        dropped = [p.stem for p in solution_paths(root) if not config.released(chapter_number(p))]
        toc = "\n".join(line for line in toc.splitlines()
                        if not any(line.strip() == f"- file: chapters/{stem}" for stem in dropped)) + "\n"
        for stem in dropped:
            (staging / "chapters" / f"{stem}.ipynb").unlink()
        sphinx_config["attention_course_unreleased"] = unreleased_targets(root, config.chapters)
        (staging / "_config.yml").write_text(yaml.safe_dump(config_data, sort_keys=False), encoding="utf-8")
    (staging / "_toc.yml").write_text(toc, encoding="utf-8")
    return staging


def _language(root: Path) -> str:
    config = yaml.safe_load((Path(root) / "_config.yml").read_text(encoding="utf-8")) or {}
    return ((config.get("sphinx") or {}).get("config") or {}).get("attention_course_language", "en")


def build_language(root: Path, lang: str, edition: str = "full", extra: tuple = (),
                   out: Optional[Path] = None) -> tuple:
    """Build one edition in ``lang`` from the catalogs under locales/ (never executing: the outputs
    are the English notebooks'); the site goes under the English one's folder, ``<html>/<lang>``
    (``_build/html/zh``, ``_build/student/_build/html/zh``, or under ``out`` as :func:`build` puts
    the English one there). Return ``(exit_status, html_folder)``."""
    import tempfile
    from .translated_edition import stage_language
    root = Path(root).resolve()
    english_out = Path(out).resolve() if out else (root if edition == "full" else root / "_build" / "student")
    work = english_out / "_build" / f"{lang}-{edition}"
    # The course in ``lang`` (solutions included) is staged outside the site's folder: a student
    # site's folder holds nothing of a solution.
    with tempfile.TemporaryDirectory(prefix=f"attention-course-{lang}-") as tmp:
        staged = stage_language(root, lang, Path(tmp) / "course")
        if edition == "full":
            status, html = build(staged, "full", out=work, extra=extra, execute=False)
        else:
            status, html = build(staged, "student", out=work, extra=extra)
    target = english_out / "_build" / "html" / lang
    if status == 0:
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(html, target)
    return status, target


def build(root: Path, edition: str = "full", out: Optional[Path] = None, extra: tuple = (),
          execute: bool = True) -> tuple:
    """Build one edition; return ``(exit_status, html_folder)``.

    ``execute=False`` builds the full edition from the solution notebooks' stored outputs
    instead of executing them (the student edition never executes). The test suite builds it so:
    nbval runs every solution notebook in the same suite and fails when a cell raises or its
    outputs differ from the stored ones, so the pages are the same and the execution is not paid twice.
    """
    root = Path(root).resolve()
    if edition not in ("full", "student"):
        raise ValueError(f"edition must be 'full' or 'student', got {edition!r}")
    if edition == "full":
        source = root
        out = Path(out).resolve() if out else root
        if not execute:
            config_data = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
            config_data.setdefault("execute", {})["execute_notebooks"] = "off"
            # Under _build, so a build into the checkout leaves no untracked file beside _config.yml.
            (out / "_build").mkdir(parents=True, exist_ok=True)
            stored = out / "_build" / "_config.stored-outputs.yml"
            stored.write_text(yaml.safe_dump(config_data, sort_keys=False), encoding="utf-8")
            extra = ("--config", str(stored), *extra)
    else:
        out = Path(out).resolve() if out else root / "_build" / "student"
        source = stage_student(root, out.parent / f"{out.name}-src")
    cmd = [jupyter_book(), "build", str(source), "--path-output", str(out), "-W", "-n", "--keep-going", *extra]
    status = subprocess.call(cmd)
    return status, out / "_build" / "html"
