"""The known sources of the similarity report: what the public course publishes for each exercise.

The course is public (the full site with its solution notebooks, and the package with its
references and kept alternatives on GitHub), so every answer a student could copy from it is
known in advance. :func:`known_sources` gathers them, per exercise of a chapter:

* **the course's published solution**: the solution notebook's exercise cell(s)
  (``solutions/NN_*.ipynb``: the code between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` with
  the skeleton around it; the skeleton is the student stub's code, which the report removes
  from every text anyway). Where the package has no solution notebook (an installed copy), the
  exercise's reference function or class, from its module's source;
* **each kept alternative** (``get_exercise(label).alternatives``): its own source
  (``inspect.getsource``, its ``@alternatives.keep`` decorator dropped), named by its style; an
  alternative made by a factory (no module-level source of its own) is left out.

The similarity report compares every student's cell with these texts, never the texts with each
other. Trusted code only: it reads the course's own notebooks and modules, never a submission.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..notebook import NotebookError, exercise_code, load_cells

SOLUTION, ALTERNATIVE = "solution", "alternative"


@dataclass(frozen=True)
class KnownSource:
    label: str
    kind: str       # SOLUTION or ALTERNATIVE
    name: str       # "published solution", or the alternative's name
    style: str      # the alternative's style ("" for the solution)
    source: str

    @property
    def description(self) -> str:
        if self.kind == SOLUTION:
            return "matches the course's published solution"
        return f'matches a published alternative (style "{self.name}")'


def _solution_cells(chapter: int, solution: Optional[Path]) -> dict:
    """label -> the solution notebook's exercise code (the course's own notebook unless given)."""
    if solution is None:
        from .runtime import PACKAGE_DIR
        found = sorted((PACKAGE_DIR.parent / "solutions").glob(f"{chapter:02d}_*.ipynb"))
        if not found:
            return {}
        solution = found[0]
    try:
        return exercise_code(load_cells(Path(solution)))
    except (NotebookError, OSError):
        return {}


def _own_source(obj) -> Optional[str]:
    """``obj``'s source from its ``def`` or ``class`` line (decorators dropped); None if unavailable or
    not its own (a factory's product: its text is the factory's inner function, not a whole answer)."""
    module = inspect.getmodule(obj)
    if module is None or getattr(obj, "__qualname__", None) != getattr(obj, "__name__", None) \
            or vars(module).get(obj.__name__) is not obj:
        return None
    try:
        source = textwrap.dedent(inspect.getsource(obj))
        node = ast.parse(source).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return None
    return "\n".join(source.splitlines()[node.lineno - 1:]) + "\n"


def known_sources(chapter: int, exercises: list, solution: Optional[Path] = None) -> dict:
    """label -> [KnownSource] for the registered ``exercises`` of ``chapter``."""
    cells = _solution_cells(chapter, solution)
    out: dict = {}
    for exercise in exercises:
        found = []
        text = cells.get(exercise.label)
        if not (text and text.strip()):
            text = _own_source(exercise.reference) if exercise.reference is not None else None
        if text and text.strip():
            found.append(KnownSource(exercise.label, SOLUTION, "published solution", "", text))
        for alternative in exercise.alternatives:
            text = _own_source(alternative.impl)
            if text and text.strip():
                found.append(KnownSource(exercise.label, ALTERNATIVE, alternative.name, alternative.style, text))
        out[exercise.label] = found
    return out
