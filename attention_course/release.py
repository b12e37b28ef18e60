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
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import nbformat

from .notebook import _CHECK_RE
from .registry import LABEL_RE as _LABEL_RE

BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"
SOLUTION_ONLY_TAG = "solution-only"
_EXERCISE_RE = re.compile(r"^(?:```+|:::+)\{exercise\}.*?$(?P<body>.*?)^\s*:label:\s*(?P<label>\S+)",
                          re.M | re.S)
_EXERCISE_OPEN_RE = re.compile(r"^(?:```+|:::+)\{exercise\}", re.M)
_SOLUTION_RE = re.compile(r"^\s*(?:```+|:::+)\{solution(?:-start|-end)?\}", re.M)
_DEF_RE = re.compile(r"^(?P<indent>\s*)(?:async\s+)?(?P<kind>def|class)\s+(?P<name>\w+)")


class ReleaseError(ValueError):
    """A solution notebook that cannot be turned into a student notebook."""


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
        return [line.strip() for line in self.code.splitlines()
                if len(line.strip()) >= DISTINCTIVE_LENGTH and not line.strip().startswith("#")]


def _src(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def chapter_number(path: Path) -> int:
    match = re.match(r"^(\d\d)_", Path(path).name)
    if not match:
        raise ReleaseError(f"{path}: a chapter notebook's name must start with its two-digit number, e.g. 03_scoring.ipynb")
    return int(match.group(1))


def _enclosing_name(lines: list, marker_line: int, marker_indent: int) -> Optional[str]:
    # Walk up to the nearest def/class less indented than the marker, then to its class.
    names, limit = [], marker_indent
    for line in reversed(lines[:marker_line]):
        m = _DEF_RE.match(line)
        if m and len(m.group("indent")) < limit:
            names.append(m.group("name"))
            limit = len(m.group("indent"))
            if limit == 0:
                break
    return ".".join(reversed(names)) or None


def stub_code(source: str, label: str, where: str) -> tuple:
    """Replace the solution regions of one cell; return (new source, [region code])."""
    lines = source.split("\n")
    out, regions, inside, start = [], [], False, 0
    for number, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith(BEGIN):
            if inside:
                raise ReleaseError(f"{where}, line {number + 1}: nested '{BEGIN}' (the region opened on line {start + 1} is not closed)")
            inside, start = True, number
            indent = line[: len(line) - len(line.lstrip())]
            name = _enclosing_name(lines, number, len(indent))
            what = f"implement {name}" if name else "write your answer here"
            out.append(f'{indent}raise NotImplementedError("{label}: {what}")')
            region = []
        elif stripped.startswith(END):
            if not inside:
                raise ReleaseError(f"{where}, line {number + 1}: '{END}' without a matching '{BEGIN}'")
            inside = False
            regions.append("\n".join(region))
        elif inside:
            region.append(line)
        else:
            out.append(line)
    if inside:
        raise ReleaseError(f"{where}, line {start + 1}: '{BEGIN}' is never closed by '{END}'")
    return "\n".join(out), regions


def release_notebook(nb, path: Path, registered: Optional[set] = None):
    """Return ``(student_notebook, regions)`` for the solution notebook ``nb``."""
    path = Path(path)
    chapter = chapter_number(path)
    student = copy.deepcopy(nb)
    cells, regions = [], []
    seen: dict = {}
    checked: set = set()
    current: Optional[str] = None
    for index, cell in enumerate(nb.cells, start=1):
        where = f"{path}, cell {index}"
        source = _src(cell)
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.cell_type == "markdown":
            for match in _EXERCISE_RE.finditer(source):
                label = match.group("label")
                m = _LABEL_RE.match(label)
                if not m:
                    raise ReleaseError(f"{where}: exercise label {label!r} is not of the form chNN_exM")
                if int(m.group(1)) != chapter:
                    raise ReleaseError(f"{where}: exercise label {label!r} belongs to chapter {m.group(1)}, not {chapter:02d}")
                if label in seen:
                    raise ReleaseError(f"{where}: exercise label {label!r} is used twice (first in cell {seen[label]})")
                seen[label] = index
                current = label
            if len(_EXERCISE_OPEN_RE.findall(source)) != len(_EXERCISE_RE.findall(source)):
                raise ReleaseError(f"{where}: an {{exercise}} directive has no ':label: chNN_exM' option")
            if _SOLUTION_RE.search(source):
                if not _SOLUTION_RE.match(source.lstrip("\n")) or _EXERCISE_OPEN_RE.search(source):
                    raise ReleaseError(f"{where}: a markdown cell mixes a solution directive with other text; "
                                       "put the solution directive in a cell of its own")
                continue  # solution-only markdown
        if SOLUTION_ONLY_TAG in tags:
            continue
        new = copy.deepcopy(cell)
        if cell.cell_type == "code":
            checked.update(_CHECK_RE.findall(source))
            if BEGIN in source or END in source:
                if current is None:
                    raise ReleaseError(f"{where}: a solution region outside any exercise (add an {{exercise}} directive with a label above it)")
                new_source, found = stub_code(source, current, where)
                new.source = new_source
                regions.extend(Region(current, index, code) for code in found)
            if current is not None:
                new.outputs = []
                new.execution_count = None
                new.metadata.pop("execution", None)
        cells.append(new)
    for label, index in seen.items():
        if label not in checked:
            raise ReleaseError(f"{path}, cell {index}: exercise {label} has no check cell "
                               f"(add a code cell calling check(\"{label}\", ...))")
    if registered is not None:
        chapter_labels = {lab for lab in registered if int(_LABEL_RE.match(lab).group(1)) == chapter}
        unknown = sorted(set(seen) - set(registered))
        if unknown:
            raise ReleaseError(f"{path}: exercise label(s) {', '.join(unknown)} are not registered in "
                               f"attention_course.exercises (no checks exist for them)")
        missing = sorted(chapter_labels - set(seen))
        if missing:
            raise ReleaseError(f"{path}: registered exercise(s) {', '.join(missing)} have no {{exercise}} directive in this notebook")
    student.cells = cells
    return student, regions


def render(nb) -> str:
    """The exact text a notebook is written as (stable, for committing and comparing)."""
    return nbformat.writes(nb) + "\n"


def solution_paths(root: Path, chapter: Optional[int] = None) -> list:
    paths = sorted((Path(root) / "solutions").glob("[0-9][0-9]_*.ipynb"))
    if chapter is not None:
        paths = [p for p in paths if chapter_number(p) == chapter]
        if not paths:
            raise ReleaseError(f"no solution notebook for chapter {chapter} in {Path(root) / 'solutions'}")
    return paths


def _registered() -> set:
    from .registry import all_exercises
    return {ex.label for ex in all_exercises()}


def generate(solution_path: Path, registered: Optional[set] = None) -> tuple:
    """Return ``(student_text, regions)`` for one solution notebook file."""
    solution_path = Path(solution_path)
    try:
        nb = nbformat.read(solution_path, as_version=4)
    except Exception as error:  # malformed JSON or nbformat
        raise ReleaseError(f"{solution_path}: cannot be read as a notebook ({error})") from error
    student, regions = release_notebook(nb, solution_path, registered)
    return render(student), regions


EXERCISE_INDEX = "exercises.md"


def exercise_index(root: Path) -> str:
    """The site's page listing every exercise by label, with links (generated)."""
    from .registry import all_exercises
    titles = {}
    for path in solution_paths(root):
        nb = nbformat.read(path, as_version=4)
        heading = next((line for c in nb.cells if c.cell_type == "markdown"
                        for line in _src(c).splitlines() if line.startswith("# ")), f"# {path.stem}")
        titles[chapter_number(path)] = (heading[2:].strip(), path.stem)
    lines = [
        "# All exercises",
        "",
        "<!-- Generated by `attention-course release` from the exercise registry; do not edit. -->",
        "",
        "Every exercise of the course, by label. The label is the same everywhere: on the",
        "exercise, in the error its stub raises, in its check cell `check(\"chNN_exM\", ...)`",
        "and in the gradebook.",
        "",
    ]
    for chapter in sorted(titles):
        title, stem = titles[chapter]
        lines += [f"## {chapter}. {title}", "", "| label | exercise | you write | points |", "|---|---|---|---|"]
        for ex in all_exercises(chapter):
            lines.append(f"| {{ref}}`{ex.label} <{ex.label}>` | {ex.title} | `{ex.name}` | {ex.points:g} |")
        lines.append("")
    return "\n".join(lines)


def release(root: Path = Path("."), chapter: Optional[int] = None, check_only: bool = False) -> list:
    """Write (or, with ``check_only``, compare) the student notebooks and the
    exercise index page.

    Returns the list of paths that were stale (changed or missing).
    """
    root = Path(root)
    registered = _registered()
    stale = []
    if chapter is None and (root / "_toc.yml").exists():
        index = root / EXERCISE_INDEX
        text = exercise_index(root)
        if not index.exists() or index.read_text(encoding="utf-8") != text:
            stale.append(index)
            if not check_only:
                index.write_text(text, encoding="utf-8")
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
