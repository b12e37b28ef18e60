"""Submissions as the grader reads them: who handed in which notebook (:func:`discover`), and the
setup and exercise cells of one submission (:func:`prepare`), read as data with bounded size, never run.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..notebook import _CHECK_RE, NotebookError, _src, exercise_code, load_cells, setup_code

MAX_NOTEBOOK_BYTES = 20 * 1024 * 1024


@dataclass
class Submission:
    student: str
    path: Optional[Path]
    problem: str = ""


def discover(directory: Path) -> tuple:
    """Submissions in ``directory`` (``alice.ipynb`` or ``alice/<one>.ipynb``), sorted; and ignored entries.

    Every entry gets its own submission under a name no other one has (``alice.ipynb`` and
    ``alice/`` become ``alice`` and ``alice~2``, and a file already named ``alice~2`` gets another
    suffix), so that no two share a row or a feedback file. A symbolic link is refused with a reason
    (it could point at a classmate's notebook); hidden entries (``.name``) are listed as ignored.
    """
    directory = Path(directory)
    subs, ignored = [], []
    for entry in sorted(directory.iterdir(), key=lambda p: p.name):
        if entry.name.startswith("."):
            ignored.append(entry.name)
            continue
        if entry.is_symlink():
            if entry.suffix == ".ipynb" or entry.is_dir():
                subs.append(Submission(entry.stem if entry.suffix == ".ipynb" else entry.name, None,
                                       "the submission is a symbolic link, not a notebook: submit the notebook itself"))
            else:
                ignored.append(entry.name)
            continue
        if entry.is_file() and entry.suffix == ".ipynb":
            subs.append(Submission(entry.stem, entry))
        elif entry.is_dir():
            notebooks = sorted(p for p in entry.rglob("*.ipynb")
                               if ".ipynb_checkpoints" not in p.parts and not p.name.startswith("."))
            links = [p for p in notebooks if p.is_symlink() or any(q.is_symlink() for q in p.parents
                                                                    if entry in q.parents)]
            if links:
                subs.append(Submission(entry.name, None, f"the submission folder holds a symbolic link "
                                       f"({links[0].name}), not a notebook: submit the notebook itself"))
            elif len(notebooks) == 1:
                subs.append(Submission(entry.name, notebooks[0]))
            elif not notebooks:
                subs.append(Submission(entry.name, None, "the submission folder holds no .ipynb notebook"))
            else:
                subs.append(Submission(entry.name, None, f"the submission folder holds {len(notebooks)} notebooks "
                                       f"({', '.join(p.name for p in notebooks[:5])}); submit exactly one"))
        else:
            ignored.append(entry.name)
    taken = {sub.student for sub in subs}
    seen: set = set()
    for sub in subs:  # alice.ipynb and alice/ -> two distinct, stable names, never an existing one
        if sub.student in seen:
            number = 2
            while f"{sub.student}~{number}" in taken:
                number += 1
            sub.student = f"{sub.student}~{number}"
            taken.add(sub.student)
        seen.add(sub.student)
    subs.sort(key=lambda s: (s.student.lower(), s.student))
    return subs, ignored


def _mentions(source: str, name: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}\b", source) is not None


def _defines(source: str, name: str) -> bool:
    """Whether a cell's text appears to define ``name`` (def, class, or an assignment at a
    line's start). Read as text, linearly: no student code is parsed in the trusted parent
    (an expression nested too deep for ``ast.parse`` once stopped a whole class)."""
    n = re.escape(name)
    pattern = (rf"(?m)^[ \t]*(?:(?:async[ \t]+)?def|class)[ \t]+{n}\b"
               rf"|^[ \t]*(?:[\w.]+[ \t]*,[ \t]*)*{n}[ \t]*(?::[^=\n]*)?=(?!=)")
    return re.search(pattern, source) is not None


@dataclass
class Prepared:
    setup: str
    code: dict   # label -> source to run (or None when nothing can be run)
    notes: dict  # label -> list of notes for the feedback
    problem: dict  # label -> reason for a zero decided without running anything
    general: list = field(default_factory=list)


def submission_cells(sub: Submission) -> list:
    """The cells of a submission, read as data (NotebookError when unreadable or too large)."""
    if sub.path is None:
        raise NotebookError(sub.problem)
    size = sub.path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        raise NotebookError(f"{sub.path.name}: the notebook is {size / 1e6:.0f} MB, over the "
                            f"{MAX_NOTEBOOK_BYTES // 1_000_000} MB limit (clear large outputs)")
    return load_cells(sub.path)


def prepare(sub: Submission, plan) -> Prepared:
    """Extract, for ``plan`` (a :class:`.grader.GradingPlan`), the setup cell and each exercise's cells (read-only; raise NotebookError when unreadable)."""
    cells = submission_cells(sub)
    general = []
    setup = setup_code(cells)
    if not setup.strip():
        setup = plan.standard_setup
        general.append("no code cell is tagged `setup`: the chapter's standard setup cell was used instead")
    blocks = exercise_code(cells)
    code_cells = [_src(c) for c in cells if c.get("cell_type") == "code"
                  and "setup" not in c.get("metadata", {}).get("tags", [])  # cells from load_cells
                  and not _CHECK_RE.search(_src(c))]
    prepared = Prepared(setup, {}, {}, {}, general)
    for ep in plan.exercises:
        label, name, source_label = ep.label, ep.exercise.name, ep.cells_from
        notes = []
        block = blocks.get(source_label)
        if block is not None and _mentions(block, name):
            # The exercise's block is what is graded whenever it names the answer, however it
            # defines it (inside `if`/`try`, by tuple assignment, with exec...): the child says
            # when the name is missing.
            prepared.code[label] = block
        else:
            elsewhere = [src for src in code_cells if _defines(src, name)]
            if elsewhere:
                prepared.code[label] = elsewhere[-1]
                where = "is missing" if block is None else "does not define it"
                notes.append(f"`{name}` was taken from a cell outside the exercise's block (the block {where}; "
                             f"cells moved?)")
            elif block is not None:
                prepared.code[label] = block  # the child reports what it defines instead
            else:
                prepared.code[label] = None
                prepared.problem[label] = (f"the notebook has no cells for {source_label} (its exercise heading "
                                           f"'Exercise M ({source_label})' or `{{exercise}}` block is missing) and no cell defines `{name}`")
        prepared.notes[label] = notes
    return prepared
