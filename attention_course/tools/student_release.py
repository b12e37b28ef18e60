"""``attention-course release-students OUT``: the repository an instructor hands out.

It writes, into ``OUT``, a self-contained student repository for the chapters released (by
``--chapters`` or ``course.yml``), ready to push as it is:

* ``chapters/NN_slug.ipynb`` -- the portable student notebooks, whose install cell installs the
  package from **this** repository (``--repository-url``, or ``student_repository`` in
  ``course.yml``);
* ``chapters/toolkit.ipynb`` -- the tensor toolkit in its portable form, which the chapters link to;
* ``attention_course/`` -- the student build of the package (:mod:`attention_course.tools.student_build`):
  no reference, no hidden check, no library piece that answers a graded exercise; public checks
  that compare with outputs stored when the release was made; ``pyproject.toml`` and
  ``requirements.txt`` to install it;
* the student edition of the site for those chapters only: ``_config.yml``, ``_toc.yml``,
  ``intro.md`` (written for the release), ``exercises.md`` (the released exercises),
  ``bibliography.md``, ``references.bib``, ``_static/``, ``_extra/`` and ``pages/NN_slug.ipynb``
  (the MyST form of the student notebooks that the pages are built from), with
  ``pages/toolkit.ipynb``, the toolkit's MyST source. References to
  chapters not released read as plain text (``chapter 5, not released yet``); launch buttons and
  downloads give the notebooks of ``chapters/``. ``--build`` builds it into ``_build/html``;
* ``RELEASE.md`` -- what was released and the **answer-exposure report**: for every exercise of
  the course, whether it is graded, practice or not released, every released file in which
  a line of its answer appears (:func:`exposure_report`), the shipped routines that compute it
  by another route and the checks graded on inputs whose outputs ship
  (:mod:`attention_course.tools.exposure`).

The instructor's grading kit is not in it: ``attention-course grade`` and the Gradescope zip run
from the course repository, with the references and hidden checks.
"""
from __future__ import annotations

import functools
import html
import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

from .editions import jupyter_book, unreleased_targets
from .release import DISTINCTIVE_LENGTH, TOOLKIT, distinctive_lines, toolkit_notebook
from .student_build import PACKAGE, ReleasePlan, StudentBuildError, plan_release, write_package

SITE_FILES = ("bibliography.md", "references.bib")
REPORT_NAME = "RELEASE.md"
IDIOM_COUNT = 3

# _build/ stays out of git: .github/workflows/pages.yml builds the site on GitHub from the sources.
GITIGNORE = ("# The site is built by .github/workflows/pages.yml on GitHub (or `jupyter-book build .`), never committed.\n"
             "_build/\n.venv/\n__pycache__/\n*.egg-info/\nbuild/\n.ipynb_checkpoints/\n")

# The command that builds the release's site, run in the release's folder (its README gives it; the
# workflow runs it). What it needs: requirements.txt (jupyter-book and the Sphinx extensions, pinned)
# and the released package itself (the site's Sphinx extension, attention_course.sphinxext).
SITE_BUILD = "jupyter-book build . -W -n --keep-going"
SITE_INSTALL = ("python3 -m pip install -r requirements.txt", "python3 -m pip install .")
WORKFLOW_PATH = ".github/workflows/pages.yml"

# GitHub Pages from GitHub Actions, as the course's own .github/workflows/pages.yml does it: build in
# Debian's Python 3.11 image with torch's CPU wheel, upload _build/html, deploy with the Pages permissions.
WORKFLOW = """# Builds this release's site and publishes it on GitHub Pages (written by
# `attention-course release-students`). Once, in the repository's Settings > Pages, set
# Source to "GitHub Actions"; every push to main then rebuilds and redeploys the site.
name: site

on:
  push:
    branches: [main]
  workflow_dispatch:

permissions:
  contents: read

concurrency:
  group: pages
  cancel-in-progress: false

jobs:
  build:
    runs-on: ubuntu-latest
    container: python:3.11-bookworm
    timeout-minutes: 30
    env:
      # torch's CPU wheel (PyPI's Linux wheel is the CUDA build); everything else from PyPI.
      PIP_INDEX_URL: https://download.pytorch.org/whl/cpu
      PIP_EXTRA_INDEX_URL: https://pypi.org/simple
    steps:
      - uses: actions/checkout@v4
      - name: Install the site's tools and the course package of this release
        run: |
          {install}
      - name: Build the site (warnings are errors)
        run: {build}
      - uses: actions/configure-pages@v5
      - uses: actions/upload-pages-artifact@v3
        with:
          path: _build/html

  deploy:
    needs: build
    runs-on: ubuntu-latest
    permissions:
      pages: write
      id-token: write
    environment:
      name: github-pages
      url: ${{{{ steps.deployment.outputs.page_url }}}}
    steps:
      - id: deployment
        uses: actions/deploy-pages@v4
""".format(install="\n          ".join(SITE_INSTALL), build=SITE_BUILD)

PYPROJECT = '''[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "attention-course"
version = "{version}"
description = "Attention mechanisms, with exercises: the student edition of chapters {chapters}"
requires-python = ">=3.11"
# torch, numpy and matplotlib are pinned in requirements.txt (torch is left out here so that
# installing the package never pulls a CUDA build of it).
dependencies = []

[tool.setuptools.packages.find]
include = ["attention_course*"]

[tool.setuptools.package-data]
attention_course = ["public_checks/*.pt", "pretrained/*.pt", "pretrained/*.csv", "pretrained/*.txt"]
'''


# ---------------------------------------------------------------- answers, and where they appear

def _body_lines(source: str) -> list:
    """The lines of the statements of every function and class body in ``source``, without
    signatures and docstrings (which the student notebook's stub keeps)."""
    import ast
    import textwrap
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return source.splitlines()
    lines = textwrap.dedent(source).splitlines()
    keep = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                body = body[1:]
            for statement in body:
                if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    continue  # its own body is taken on its own; its signature stays out
                keep |= set(range(statement.lineno - 1, statement.end_lineno))
    return [lines[i] for i in sorted(keep)]


def answer_lines(label: str, root: Path) -> set:
    """The distinctive lines of ``label``'s answer: its solution region in the solution notebook,
    its reference's body, and the bodies of the library pieces that answer it."""
    import importlib
    import inspect
    from ..checks.answers import blocked_answers
    from ..checks.registry import get_exercise
    from .release import solution_paths
    exercise = get_exercise(label)
    lines = set()
    for path in solution_paths(root, exercise.chapter):
        for region in _regions(str(path), path.stat().st_mtime_ns):
            if region.label == label:
                lines |= set(region.distinctive_lines())
    try:
        lines |= set(distinctive_lines(_body_lines(inspect.getsource(exercise.reference))))
    except (OSError, TypeError):
        pass
    for module_name, attr, _, _ in blocked_answers(exercise):
        target = getattr(importlib.import_module(module_name), attr)
        try:
            lines |= set(distinctive_lines(_body_lines(inspect.getsource(target))))
        except (OSError, TypeError):
            pass
    return lines


@functools.lru_cache(maxsize=32)
def _regions(path: str, mtime: int) -> tuple:
    """A solution notebook's solution regions (cached: a report asks once per exercise)."""
    from .release import generate
    return tuple(generate(Path(path))[1])


_TAG = re.compile(r"<[^>]+>")


def _searchable(path: Path) -> str:
    """A released file as text a reader (or a search) would see in it."""
    data = path.read_bytes()
    text = data.decode("utf-8", errors="ignore")
    if path.suffix == ".html":
        text = html.unescape(_TAG.sub("", text))
    elif path.suffix == ".ipynb":
        try:  # a notebook's cells as their lines, not JSON strings with escapes
            nb = json.loads(text)
            text = "\n".join("".join(c.get("source", "")) if isinstance(c.get("source"), list) else
                             str(c.get("source", "")) for c in nb.get("cells", []))
            text += "\n" + data.decode("utf-8", errors="ignore")
        except ValueError:
            pass
    return text


def exposure_report(out: Path, plan: ReleasePlan, root: Path) -> list:
    """For every exercise of the course: ``{"label", "status", "found": [(file, line)], "printed",
    "routes", "fixed"}``.

    ``status`` is ``graded``, ``practice`` (or the answers of its chapter are released) or
    ``not released``. ``found`` lists every released file (source, notebooks, site, package,
    data) in which a distinctive line of the exercise's answer appears, with the first such line.
    ``routes`` and ``fixed``: what gives the answer away without its lines
    (:func:`attention_course.tools.exposure.add_exposure`).
    """
    from ..checks.registry import all_exercises
    out = Path(out)
    files = [p for p in sorted(out.rglob("*")) if p.is_file() and ".git" not in p.parts
             and "__pycache__" not in p.parts]
    texts = {p: _searchable(p) for p in files}
    answers = {exercise.label: answer_lines(exercise.label, root) for exercise in all_exercises()}
    counts = {}
    for lines in answers.values():
        for line in lines:
            counts[line] = counts.get(line, 0) + 1
    pages = "\n".join(text for p, text in texts.items() if p.parent == out / "chapters")
    rows = []
    for exercise in all_exercises():
        label = exercise.label
        if exercise.chapter not in plan.chapters:
            status = "not released"
        elif label in plan.graded:
            status = "graded"
        else:
            reason = plan.reasons.get(label, "practice")
            status = "practice" if reason == "practice" else f"practice ({reason})"
        # A line in the answers of IDIOM_COUNT exercises or more is the course's idiom (a projection
        # nn.Linear(d_in, d_out), a softmax over the keys), not one exercise's answer.
        lines = {line for line in answers[label] if counts[line] < IDIOM_COUNT}
        # Lines the chapters print anyway (a worked example that shares a line with an answer)
        # are the chapter's own text, not something the release adds: reported on their own.
        printed = sorted(line for line in lines if line in pages)
        searched = sorted(lines - set(printed))
        found = []
        for path, text in texts.items():
            hit = next((line for line in searched if line in text), None)
            if hit:
                found.append((path.relative_to(out).as_posix(), hit))
        rows.append({"label": label, "status": status, "found": found, "printed": printed})
    from .exposure import add_exposure
    return add_exposure(rows, out)


def report_markdown(rows: list, plan: ReleasePlan, summary: dict) -> str:
    from . import exposure
    lines = [
        "# This release",
        "",
        f"Chapters released: {', '.join(map(str, plan.chapters))}. Written by `attention-course release-students`.",
        "",
        "## The student build of the package",
        "",
        f"Modules: {', '.join(summary['modules'])}; public checks of {len(summary['exercises'])} exercises, "
        "stored as data (`attention_course/public_checks/`).",
        "",
    ]
    if summary["withheld"]:
        lines += ["Library pieces withheld (each is a stand-in that calls the student's own answer):", ""]
        lines += [f"- `{PACKAGE}.{p.module}.{p.attr}`: the answer to {p.label}" for p in summary["withheld"]]
        lines.append("")
    lines += [
        "## Answer exposure",
        "",
        "For every exercise of the course: is it graded in this release, and does any line of its answer",
        f"(its solution, its reference, the library pieces that answer it; lines of {DISTINCTIVE_LENGTH} "
        f"characters or more, except idioms found in the answers of {IDIOM_COUNT} exercises or more) "
        "appear in a released file?",
        "",
        "The last column lists lines of an answer that the chapter's own pages print (in a worked",
        "example): they are no part of what the release adds, but an exercise whose lines the page",
        "prints asks less of a student than one whose lines it does not.",
        "",
    ] + exposure.PROSE + [
        f"| exercise | status | answer appears in | {' | '.join(exposure.HEADINGS)} | answer lines the pages print |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        where = "; ".join(f"`{path}`" for path, _ in row["found"][:4]) or "nowhere"
        if len(row["found"]) > 4:
            where += f" and {len(row['found']) - 4} more"
        printed = "; ".join(f"`{line}`" for line in row["printed"]) or "none"
        lines.append(f"| {row['label']} | {row['status']} | {where} | {' | '.join(exposure.cells(row))} | {printed} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the site of the release

def intro_text(root: Path, plan: ReleasePlan, titles: dict) -> str:
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    title = config.get("title", "Attention mechanisms")
    lines = [
        f"# {title}",
        "",
        f"The chapters of this course your instructor has released: {len(plan.chapters)} of "
        f"{len(titles)}. Each comes with exercises you write in its notebook and check on the spot.",
        "",
        "## The chapters",
        "",
    ]
    for chapter in plan.chapters:
        stem, name = titles[chapter]
        lines.append(f"{chapter}. {{doc}}`{name} <pages/{stem}>`")
    lines += [
        "",
        "## How to work",
        "",
        "Open a chapter's notebook: the launch buttons at the top of each chapter open it on Binder or",
        "Colab, where its first code cell installs the course package from this repository; or clone",
        "the repository and run `python3 -m pip install -r requirements.txt` followed by",
        "`python3 -m pip install .` in it, then open `chapters/` in JupyterLab.",
        "",
        "Fill in each exercise cell and run the check cell under it, such as",
        "",
        "```python",
        'check("ch01_ex1", attention_pool)',
        "```",
        "",
        "It tests your code on small fixed inputs and prints one line per check: ✓ when it passes,",
        "✗ with a hint when it fails. Your grade comes from *hidden* checks that run the same",
        "exercises on inputs drawn at grading time, so passing the public checks is a good sign,",
        "not a guarantee. Keep the names and arguments exactly as each exercise states them, and keep",
        "each exercise cell self-contained: the grader runs the setup cell and the exercise cells only.",
        "",
        "Where a chapter's library uses the answer to one of its graded exercises (chapter 3's",
        "`masked_softmax`, for example), this release does not ship that piece: the library calls",
        "**your own** answer of the same name once you have run your exercise cell. Until then, the",
        "chapter's worked examples show the course's results (a one-line note says so), and an exercise",
        "that uses the library's piece is checked on the course's results, not on your earlier answer.",
        "",
        "{doc}`exercises` lists the exercises of this release.",
    ]
    return "\n".join(lines) + "\n"


def exercise_index(plan: ReleasePlan, titles: dict) -> str:
    from ..checks.registry import all_exercises
    lines = ["# The exercises", "", "Every exercise of this release, by label.", ""]
    for chapter in plan.chapters:
        stem, name = titles[chapter]
        lines += [f"## {chapter}. {name}", "", "| label | exercise | you write | points |", "|---|---|---|---|"]
        for ex in all_exercises(chapter):
            points = "practice" if ex.label not in plan.graded else f"{ex.points:g}"
            lines.append(f"| {{ref}}`{ex.label} <{ex.label}>` | {ex.title} | `{ex.name}` | {points} |")
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------- the whole repository

@dataclass
class StudentRelease:
    out: Path
    plan: ReleasePlan
    summary: dict
    report: list = field(default_factory=list)
    build_status: Optional[int] = None
    auto_practice: dict = field(default_factory=dict)  # label -> why (practice: auto)


def release_students(root: Path, out: Path, chapters=None, repository_url: Optional[str] = None,
                     practice=None, answers_released=None, build: bool = False,
                     jupyterhub_url: Optional[str] = None) -> StudentRelease:
    """Write the student repository of a release into ``out`` (see the module's docstring).

    ``practice="auto"`` makes practice exactly the exercises this release cannot grade: those
    whose library pieces the released material needs, and those whose answer the released
    files would show. ``StudentRelease.auto_practice`` lists them, with the report saying why.
    """
    if practice == "auto":
        chosen, why, cache = [], {}, {}
        for _ in range(8):
            try:
                result = _release(root, out, chapters, repository_url, chosen, answers_released, build=False,
                                  store_cache=cache, jupyterhub_url=jupyterhub_url)
            except StudentBuildError as error:
                if not error.labels or set(error.labels) <= set(chosen):
                    raise
                why.update({label: "the released material needs its library piece" for label in error.labels})
                chosen = sorted(set(chosen) | set(error.labels))
                continue
            exposed = [row["label"] for row in result.report if row["status"] == "graded" and row["found"]]
            if not exposed:
                if build:
                    result.build_status = build_site(Path(out).resolve())
                result.auto_practice = {label: why[label] for label in chosen}
                return result
            why.update({label: "the released files show its answer" for label in exposed})
            chosen = sorted(set(chosen) | set(exposed))
        raise StudentBuildError("could not find the exercises this release can grade (practice: auto)")
    return _release(root, out, chapters, repository_url, practice, answers_released, build,
                    jupyterhub_url=jupyterhub_url)


def _release(root: Path, out: Path, chapters, repository_url, practice, answers_released,
             build: bool, store_cache: Optional[dict] = None,
             jupyterhub_url: Optional[str] = None) -> StudentRelease:
    import nbformat
    from .. import __version__
    from .course_config import active
    from .release import CourseSettings, chapter_number, release_notebook, render, solution_paths
    root, out = Path(root).resolve(), Path(out).resolve()
    config = active()
    if chapters is None:
        chapters = config.chapters or sorted({chapter_number(p) for p in solution_paths(root)})
    plan = plan_release(chapters, practice=config.practice if practice is None else practice,
                        answers_released=config.answers_released if answers_released is None else answers_released)
    repository_url = repository_url or config.student_repository
    if not repository_url:
        raise StudentBuildError("the student repository's address is needed (its notebooks install the package "
                                "from it): pass --repository-url or set student_repository in course.yml")
    if out.exists() and any(out.iterdir()):
        if not (out / REPORT_NAME).is_file():
            raise StudentBuildError(f"{out} exists and is not an earlier release (no {REPORT_NAME}): "
                                    "choose an empty or new folder")
        for child in out.iterdir():  # an earlier release: replaced, its .git kept
            if child.name != ".git":
                shutil.rmtree(child) if child.is_dir() else child.unlink()
    out.mkdir(parents=True, exist_ok=True)
    # Written first, so that a release stopped half-way is still known as one and can be redone.
    (out / REPORT_NAME).write_text("# This release\n\nUnfinished: `attention-course release-students` did not "
                                   "complete.\n", encoding="utf-8")

    summary = write_package(out, plan, root, store_cache)
    (out / "pyproject.toml").write_text(PYPROJECT.format(
        version=__version__, chapters=", ".join(map(str, plan.chapters))), encoding="utf-8")
    requirements = [line for line in (root / "requirements.txt").read_text(encoding="utf-8").splitlines()
                    if line.strip() not in ("-e .",) and not line.startswith("# The course's own package")]
    (out / "requirements.txt").write_text("\n".join(requirements) + "\n", encoding="utf-8")
    (out / ".gitignore").write_text(GITIGNORE, encoding="utf-8")
    (out / WORKFLOW_PATH).parent.mkdir(parents=True, exist_ok=True)
    (out / WORKFLOW_PATH).write_text(WORKFLOW, encoding="utf-8")  # builds and publishes the site on GitHub Pages

    settings = CourseSettings(repository_url=repository_url, bibfile=root / "references.bib")
    titles = {}
    (out / "chapters").mkdir()
    (out / "pages").mkdir()
    for path in solution_paths(root):
        chapter = chapter_number(path)
        nb = nbformat.read(path, as_version=4)
        heading = next((line[2:].strip() for c in nb.cells if c.cell_type == "markdown"
                        for line in c.source.splitlines() if line.startswith("# ")), path.stem)
        titles[chapter] = (path.stem, heading)
        if chapter not in plan.chapters:
            continue
        for folder, portable in (("chapters", True), ("pages", False)):
            student, _ = release_notebook(nbformat.read(path, as_version=4), path, portable=portable,
                                          settings=settings)
            (out / folder / path.name).write_text(render(student), encoding="utf-8")

    for name in SITE_FILES:
        shutil.copy2(root / name, out / name)
    # The tensor toolkit: the portable notebook beside chapters/ for students, its MyST source among
    # the pages for the site (the pages' references to its sections point there).
    (out / TOOLKIT).write_text(toolkit_notebook(root, settings=settings), encoding="utf-8")
    (out / "pages" / Path(TOOLKIT).name).write_text(toolkit_notebook(root, portable=False), encoding="utf-8")
    # Measured tables that chapters read beside the package (bench/*.csv), data only.
    for table in sorted((root / "bench").glob("*.csv")):
        (out / "bench").mkdir(exist_ok=True)
        shutil.copy2(table, out / "bench" / table.name)
    for name in ("_static", "_extra", "binder"):  # binder/: the Binder button builds from it (CPU torch)
        if (root / name).is_dir():
            shutil.copytree(root / name, out / name)
    (out / "intro.md").write_text(intro_text(root, plan, titles), encoding="utf-8")
    (out / "exercises.md").write_text(exercise_index(plan, titles), encoding="utf-8")
    site = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    site["title"] = f"{site.get('title', 'Course')} (chapters {', '.join(map(str, plan.chapters))})"
    site["exclude_patterns"] = ["_static/*", "_extra/*", ".venv/*", "_build/*", "chapters/*", "binder/*", "README.md",
                                REPORT_NAME, "**.ipynb_checkpoints"]
    site.setdefault("execute", {})["execute_notebooks"] = "off"
    site.setdefault("repository", {})["url"] = repository_url
    site["repository"].pop("path_to_book", None)
    hub = jupyterhub_url or config.jupyterhub_url
    if hub:  # the JupyterHub button: nbgitpuller pulls this repository and opens the chapter
        site.setdefault("launch_buttons", {})["jupyterhub_url"] = hub
    sphinx_config = site.setdefault("sphinx", {}).setdefault("config", {})
    sphinx_config["attention_course_edition"] = "student"
    sphinx_config["attention_course_unreleased"] = unreleased_targets(root, plan.chapters)
    (out / "_config.yml").write_text(yaml.safe_dump(site, sort_keys=False, allow_unicode=True), encoding="utf-8")
    toc = {"format": "jb-book", "root": "intro", "parts": [
        {"caption": "Chapters", "numbered": True,
         "chapters": [{"file": f"pages/{titles[c][0]}"} for c in plan.chapters]},
        {"caption": "Reference", "chapters": [{"file": "pages/toolkit"}, {"file": "exercises"},
                                              {"file": "bibliography"}]}]}
    (out / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False), encoding="utf-8")
    (out / "README.md").write_text(_readme(site["title"], repository_url, plan), encoding="utf-8")

    result = StudentRelease(out, plan, summary)
    if build:
        result.build_status = build_site(out)
    result.report = exposure_report(out, plan, root)
    (out / REPORT_NAME).write_text(report_markdown(result.report, plan, summary) + publishing_steps(
        repository_url, plan), encoding="utf-8")
    return result


def publishing_steps(url: str, plan: ReleasePlan) -> str:
    """RELEASE.md's last section: the three steps from this folder to the published site."""
    slug = url.rstrip("/").removesuffix(".git").split("github.com/")[-1]
    chapters = ", ".join(map(str, plan.chapters))
    return f"""
## Publishing it

This folder is the student repository ({url}). Three steps take it to a published site:

1. `attention-course release-students` wrote it (run it again into this folder for the next release:
   its `.git` is kept).
2. Commit and push it:
   `git init -b main && git add -A && git commit -m "Chapters {chapters}" && git remote add origin {url} && git push -u origin main`
   (for a later release: `git add -A && git commit -m "..." && git push`).
3. Once: in the repository's Settings > Pages, set Source to **GitHub Actions**
   (`gh api -X POST repos/{slug}/pages -f build_type=workflow`), then run the workflow once
   (Actions > site > Run workflow, or `gh workflow run site -R {slug}`): the run the push started
   stopped at `configure-pages`, since Pages was off.

`{WORKFLOW_PATH}` does the rest on every push to `main`: `{'`, `'.join(SITE_INSTALL)}`, then
`{SITE_BUILD}` (warnings are errors), and deploys `_build/html` to GitHub Pages. `_build/` itself
is never committed (`.gitignore`).
"""


def build_site(out: Path) -> int:
    """Build the release's site into ``out/_build/html`` (warnings are errors)."""
    return subprocess.call([jupyter_book(), "build", str(out), "--path-output", str(out), "-W", "-n",
                            "--keep-going"])


def _readme(title: str, url: str, plan: ReleasePlan) -> str:
    return f"""# {title}

The student materials of this course: the chapter notebooks (`chapters/`), the course package
they use (`attention_course/`) and the source of the course site.

- Work in a notebook: open `chapters/NN_*.ipynb` in JupyterLab, Colab or Binder; its first code
  cell installs the course package from this repository ({url}).
- Work locally: `python3 -m pip install -r requirements.txt && python3 -m pip install .`
- Build the site: `{SITE_BUILD}` (the pages are in `_build/html`). On GitHub,
  `{WORKFLOW_PATH}` builds it on every push to `main` and publishes it on GitHub Pages
  (Settings > Pages > Source: GitHub Actions).

Each exercise's check cell runs its public checks; your grade comes from hidden checks that your
instructor runs. See `{REPORT_NAME}` for what this release holds.
"""
