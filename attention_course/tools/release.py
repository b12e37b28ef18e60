"""Generate student notebooks (``chapters/``) from solution notebooks (``solutions/``).

The solution notebook is the single source of a chapter. The student notebook is
the same notebook with

* every solution region -- the lines between ``# BEGIN SOLUTION`` and
  ``# END SOLUTION`` in a code cell -- replaced by one line, at the marker's
  indentation, ``raise NotImplementedError("chNN_exM: implement <name>")``; the
  signature and docstring above the region stay;
* every solution-only cell removed: code or markdown cells tagged
  ``solution-only``, and markdown cells that are a ``{solution}``,
  ``{solution-start}`` or ``{solution-end}`` directive;
* the outputs (and execution counts) of every code cell from the first
  ``{exercise}`` directive to the end cleared, since they would show a working
  solution's results.

Nothing else changes: prose and worked examples are copied as they are.

The generator refuses, with the notebook, the cell number and what is wrong:
unbalanced or nested markers, a solution region outside an exercise, an exercise
label used twice or not of the form ``chNN_exM`` for this chapter, an exercise
with no ``check("chNN_exM", ...)`` cell, a markdown cell mixing a solution
directive with other text, and an exercise label that the package does not
register (or a registered one missing from the notebook).

Two forms of the student notebook come out of one solution notebook:

* **portable** (the default, written to ``chapters/``): what a student opens in any
  notebook client. Its Markdown holds no MyST markup, so JupyterLab without
  extensions, Colab, VS Code and GitHub's preview all show it as a clean document
  (:func:`portable_markdown`): each ``{exercise}`` becomes an ordinary heading
  ``### Exercise M (chNN_exM): Title`` followed by its contract; citations become
  "(Bahdanau et al., 2014)" / "Bahdanau et al. (2014)" from ``references.bib``, and
  ``{footbibliography}`` the list of the works cited; admonitions become block
  quotes, ``{math}`` becomes ``$$``, cross-references become plain text, except those to the
  tensor toolkit, which become links to ``toolkit.ipynb`` (beside them) and its headings. Prose
  without MyST markup is copied verbatim. Before the setup cell comes an **install
  cell** that installs the course package when ``import attention_course`` fails
  (from ``$ATTENTION_COURSE_SOURCE`` when set, otherwise from the repository named
  by ``repository.url`` in ``_config.yml``) and does nothing otherwise.
* **myst** (``portable=False``): the student edition of the site is built from it
  (:mod:`attention_course.tools.editions`), so the site keeps its exercise boxes and
  footnoted citations. It has no install cell.

The release is split by concern: this module (student notebooks from solution
notebooks, and the ``release`` command's files), :mod:`.notebook` (the grammar of setup, exercise,
solution and check cells), :mod:`.portable` (MyST → portable Markdown, the toolkit notebook),
:mod:`.bibliography`, :mod:`.course_settings` (the repository, the install cell),
:mod:`.exercise_index` (the site's list of exercises) and :mod:`.course_files` (where the notebooks
are, how they are read and written). The names other modules take from here stay importable here.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..checks.registry import LABEL_RE as _LABEL_RE
from . import notebook as _grammar
from .bibliography import Bibliography  # noqa: F401 - re-exported
from .course_files import (TOOLKIT, TOOLKIT_SOURCE, ReleaseError, chapter_number, course_root,  # noqa: F401
                           read_solution, render, solution_paths)
from .course_settings import (DEFAULT_BRANCH, INSTALL_TAG, SOURCE_ENV, CourseSettings,  # noqa: F401
                              course_settings, install_cell_source)
from .exercise_index import EXERCISE_INDEX, exercise_index
from .notebook import BEGIN, END, SOLUTION_ONLY_TAG, check_notebook, parse_solution, reraised_as  # noqa: F401
from .portable import make_portable, portable_markdown, toolkit_notebook  # noqa: F401

# A solution line this long that shows up anywhere in a student's material counts as
# a leak (shorter lines, like `return weights`, are too common to be telling).
DISTINCTIVE_LENGTH = 25


@dataclass
class Region:
    label: str
    cell_index: int  # 1-based, in the solution notebook
    code: str        # the solution lines, joined

    def distinctive_lines(self) -> list:
        """The region's stripped code lines long enough to identify the solution."""
        return distinctive_lines(self.code.splitlines())


def distinctive_lines(lines) -> list:
    """The stripped code lines of ``lines`` long enough to identify an answer (no comments)."""
    return [line.strip() for line in lines
            if len(line.strip()) >= DISTINCTIVE_LENGTH and not line.strip().startswith("#")]


def stub_code(source: str, label: str, where: str) -> tuple:
    """Replace the solution regions of one cell; return (new source, [region code])
    (:func:`attention_course.tools.notebook.stub_code`, refusing with a :class:`ReleaseError`)."""
    with reraised_as(ReleaseError):
        return _grammar.stub_code(source, label, where)


def release_notebook(nb, path: Path, registered: Optional[set] = None, portable: bool = True,
                     settings: Optional[CourseSettings] = None):
    """Return ``(student_notebook, regions)`` for the solution notebook ``nb``.

    ``portable`` (default) gives the form written to ``chapters/``: Markdown without
    MyST markup and an install cell before the setup cell; ``portable=False`` the
    MyST form the student edition of the site is built from. ``settings`` (the
    repository and the bibliography) default to those of the course folder that
    holds ``path``.
    """
    path = Path(path)
    if settings is None:
        settings = course_settings(course_root(path))
    chapter = chapter_number(path)
    with reraised_as(ReleaseError):  # the grammar's refusals, with the notebook, cell and line
        check_notebook(nb, str(path))
        solution = parse_solution(nb.cells, str(path), chapter)
    student = copy.deepcopy(nb)
    cells, regions = [], []
    for parsed in solution.cells:
        if parsed.solution_only:
            continue
        new = copy.deepcopy(parsed.cell)
        if parsed.kind == "code":
            if parsed.stub is not None:
                new.source = parsed.stub
                regions.extend(Region(parsed.exercise, parsed.number, code) for code in parsed.regions)
            if parsed.exercise is not None:
                new.outputs = []
                new.execution_count = None
                new.metadata.pop("execution", None)
        cells.append(new)
    seen = solution.labels
    if registered is not None:
        chapter_labels = {lab for lab in registered if int(_LABEL_RE.match(lab).group(1)) == chapter}
        unknown = sorted(set(seen) - set(registered))
        if unknown:
            raise ReleaseError(f"{path}: exercise label(s) {', '.join(unknown)} are not registered in "
                               f"attention_course.exercises (no checks exist for them)")
        missing = sorted(chapter_labels - set(seen))
        if missing:
            raise ReleaseError(f"{path}: registered exercise(s) {', '.join(missing)} have no {{exercise}} directive in this notebook")
    if portable:
        cells = make_portable(cells, str(path), settings)
    student.cells = cells
    return student, regions


def _registered() -> set:
    from ..checks.registry import all_exercises
    return {ex.label for ex in all_exercises()}


def generate(solution_path: Path, registered: Optional[set] = None, portable: bool = True) -> tuple:
    """Return ``(student_text, regions)`` for one solution notebook file (``portable``:
    see :func:`release_notebook`)."""
    solution_path = Path(solution_path)
    nb = read_solution(solution_path)  # malformed JSON or nbformat, too large, too deep: a ReleaseError
    student, regions = release_notebook(nb, solution_path, registered, portable=portable)
    return render(student), regions


def release(root: Path = Path("."), chapter: Optional[int] = None, check_only: bool = False) -> list:
    """Write (or, with ``check_only``, compare) the student notebooks, the portable tensor
    toolkit and the exercise index page.

    The index lists every chapter's exercises, so it is refreshed (or compared) with
    ``chapter`` too: releasing one chapter after adding an exercise leaves nothing stale.

    Returns the list of paths that were stale (changed or missing).
    """
    root = Path(root)
    registered = _registered()
    stale = []
    if (root / "_toc.yml").exists():
        index = root / EXERCISE_INDEX
        text = exercise_index(root)
        if not index.exists() or index.read_text(encoding="utf-8") != text:
            stale.append(index)
            if not check_only:
                index.write_text(text, encoding="utf-8")
    if (root / TOOLKIT_SOURCE).exists():  # every release refreshes it, as it does the index
        text = toolkit_notebook(root)
        target = root / TOOLKIT
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            stale.append(target)
            if not check_only:
                target.write_text(text, encoding="utf-8")
    for path in solution_paths(root, chapter):
        text, _ = generate(path, registered)
        target = root / "chapters" / path.name
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current != text:
            stale.append(target)
            if not check_only:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
    return stale
