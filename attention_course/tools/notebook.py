"""The notebook grammar: the one place that reads a chapter notebook's setup, exercise, solution
and check cells (solution and student editions alike), hardened against hostile notebooks.

A chapter notebook (solution or student edition) has one or more code cells tagged
``setup`` (imports only), and, for each exercise, a markdown cell that opens it,
then the exercise's code cell(s), then a check cell ``check("chNN_exM", name)``.
The opening cell is an ``{exercise}`` directive with ``:label: chNN_exM`` (MyST: the
solution notebooks and the site), or, in the portable student notebooks that any
client renders, a heading ``### Exercise M (chNN_exM): Title``. The exercise's code is the
code cells between its directive and its check cell. Because every exercise cell
is self-contained (setup cell + package only), running the setup cell and one
exercise's cells is enough to get the student's object, without running the
chapter's worked examples.

A solution notebook adds the answers, which the release removes (:func:`parse_solution`):
solution regions, the lines between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` in a code cell
(:func:`stub_code`), and solution-only cells: cells tagged ``solution-only`` and markdown cells
that are a ``{solution}``, ``{solution-start}`` or ``{solution-end}`` directive.

Every notebook is read through the same bounds (:func:`load_cells` for what the grader and
``progress`` read, :func:`read_notebook` for what the release and the scaffold rewrite): at most
:data:`MAX_NOTEBOOK_BYTES`, JSON nested at most :data:`MAX_DEPTH` levels, nbformat 4 and its
schema. Every malformed case is a :class:`NotebookError` naming the notebook, the cell and the line.
"""
from __future__ import annotations

import contextlib
import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..checks.registry import LABEL_RE

# The bounds of every notebook read: the grader's limit on a submission, and a nesting far past
# any client's (the course's notebooks nest 8 levels) but short of what copying or writing it back
# would recurse through.
MAX_NOTEBOOK_BYTES = 20 * 1024 * 1024
MAX_DEPTH = 64

SETUP_TAG = "setup"
SOLUTION_ONLY_TAG = "solution-only"
BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"

# An ``{exercise}`` directive's opening line, and a ``:label:`` line after it. They are matched
# line by line (see exercise_labels): one pattern spanning both, lazily, took time quadratic in a
# cell of many opening lines, which a submission controls.
_EXERCISE_OPEN_RE = re.compile(r"(?:```+|:::+)\{exercise\}")
_EXERCISE_LABEL_LINE_RE = re.compile(r"[ \t]*:label:[ \t]*(\S+)")
# The portable form written by the release generator (attention_course.tools.release).
_EXERCISE_HEADING_RE = re.compile(r"^#{1,6}[ \t]+(?:Exercise|练习)[ \t]+\d+[ \t]+\((ch\d\d_ex\d+)\)", re.M)
_CHECK_RE = re.compile(r"""\bcheck\(\s*["'](ch\d\d_ex\d+)["']""")
_CHECK_NAME_RE = re.compile(r"""\bcheck\(\s*["'](ch\d\d_ex\d+)["']\s*,\s*([A-Za-z_]\w*)""")
# A solution directive: on a line of its own (searched line by line, so linear in the cell's
# length), and at the start of a cell that is a solution directive and nothing else.
_SOLUTION_RE = re.compile(r"^[^\S\n]*(?:```+|:::+)\{solution(?:-start|-end)?\}", re.M)
_SOLUTION_CELL_RE = re.compile(r"\s*(?:```+|:::+)\{solution(?:-start|-end)?\}")
_DEF_RE = re.compile(r"^(?P<indent>\s*)(?:async\s+)?(?P<kind>def|class)\s+(?P<name>\w+)")


def printable(text, newlines: bool = False, keep: str = "") -> str:
    """``text`` with every control or format character escaped (``\\x1b``, ``\\u202e``), so that a
    name or message from a submission can neither forge a line of a log nor send a terminal
    escape sequence. With ``newlines``, line breaks and tabs are kept (multi-line feedback);
    the characters of ``keep`` are kept too."""
    import unicodedata
    kept = ("\n\t" if newlines else "") + keep
    out = []
    for char in str(text):
        if char in kept or unicodedata.category(char) not in ("Cc", "Cf", "Cs", "Co", "Zl", "Zp"):
            out.append(char)
        else:
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)


class NotebookError(ValueError):
    """A notebook that cannot be read or lacks what the course expects."""


@contextlib.contextmanager
def reraised_as(kind: type):
    """Inside the block, a :class:`NotebookError` becomes a ``kind`` with the same message (the
    release's ``ReleaseError``, the scaffold's ``ScaffoldError``)."""
    try:
        yield
    except NotebookError as error:
        raise kind(str(error)) from error


def _src(cell: dict) -> str:
    """A cell's source as text; anything that is not text (a submission's number in a source
    list, a cell that is not a dict) counts as nothing."""
    src = cell.get("source", "") if isinstance(cell, dict) else ""
    if isinstance(src, list):
        return "".join(part for part in src if isinstance(part, str))
    return src if isinstance(src, str) else ""


def _tags(cell: dict) -> list:
    metadata = cell.get("metadata") if isinstance(cell, dict) else None
    tags = metadata.get("tags") if isinstance(metadata, dict) else None
    return [tag for tag in tags if isinstance(tag, str)] if isinstance(tags, list) else []


def _kind(cell: dict) -> str:
    kind = cell.get("cell_type") if isinstance(cell, dict) else None
    return kind if isinstance(kind, str) else ""


def _clean_cell(cell: dict) -> dict:
    """Only what the course reads, in the types it expects: a submission's cell may hold
    anything (a string as metadata, numbers in the source, no cell type)."""
    return {"cell_type": _kind(cell), "source": _src(cell), "metadata": {"tags": _tags(cell)}}


# ---------------------------------------------------------------- reading, within bounds

def _read_bounded(path: Path) -> str:
    """The text of file ``path``; OSError, UnicodeDecodeError or ValueError (over the limit)."""
    with open(path, "rb") as f:
        raw = f.read(MAX_NOTEBOOK_BYTES + 1)
    if len(raw) > MAX_NOTEBOOK_BYTES:
        raise ValueError(f"over the {MAX_NOTEBOOK_BYTES // 2**20} MiB limit; clear large outputs")
    return raw.decode("utf-8")


def _depth_problem(data) -> Optional[str]:
    """Why ``data`` (JSON) is nested too deep, or None. Iterative: no recursion to exhaust."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"nested deeper than {MAX_DEPTH} levels"
        children = value.values() if isinstance(value, dict) else value
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return None


def _parse_json(path: Path):
    """``(data, None)``, or ``(None, why)`` when the file is unreadable, over the size limit, not
    JSON or nested deeper than :data:`MAX_DEPTH`."""
    try:
        data = json.loads(_read_bounded(path))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError, MemoryError) as error:
        # RecursionError: JSON nested deeper than the parser's limit (a hostile submission).
        return None, f"{type(error).__name__}: {str(error)[:200]}"
    problem = _depth_problem(data)
    return (None, problem) if problem else (data, None)


def _format_problem(data) -> Optional[str]:
    if not isinstance(data, dict) or data.get("nbformat") != 4 or not isinstance(data.get("cells"), list):
        return f"found nbformat={data.get('nbformat') if isinstance(data, dict) else None!r}"
    return None


def load_cells(path: Path) -> list:
    """Read a notebook's cells as plain dicts, with a clear error when malformed."""
    path = Path(path)
    data, unreadable = _parse_json(path)
    if unreadable:
        raise NotebookError(f"{path.name}: not a readable notebook ({unreadable})")
    wrong_format = _format_problem(data)
    if wrong_format:
        raise NotebookError(f"{path.name}: not an nbformat-4 notebook ({wrong_format})")
    problem = schema_problem(data)
    if problem:
        raise NotebookError(f"{path.name}: not a valid notebook ({problem}); save it again from Jupyter, "
                            "or open it there and fix the cell named")
    return [_clean_cell(c) for c in data["cells"] if isinstance(c, dict)]


def notebook_problem(data) -> Optional[str]:
    """Why ``data`` (a notebook's JSON, or nbformat's node of one) is not a notebook the course
    reads (nested too deep, not nbformat 4, off its schema), or None."""
    problem = _depth_problem(data)
    if problem:
        return problem
    wrong_format = _format_problem(data)
    if wrong_format:
        return f"not an nbformat-4 notebook ({wrong_format})"
    problem = schema_problem(data)
    return f"not a valid notebook: {problem}" if problem else None


def check_notebook(nb, where: str) -> None:
    """Refuse notebook ``nb`` (already in memory) when :func:`notebook_problem` finds one."""
    problem = notebook_problem(nb)
    if problem:
        raise NotebookError(f"{where}: {problem}")


def read_notebook_text(path: Path, where: Optional[str] = None) -> tuple:
    """``(text, notebook)``: the file's exact text and nbformat's node of it (every field kept: what
    the release and the scaffold write back), read within the bounds of :func:`load_cells`."""
    import nbformat
    where = where or str(path)
    try:
        text = _read_bounded(Path(path))
        data = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError, MemoryError) as error:
        raise NotebookError(f"{where}: cannot be read as a notebook ({type(error).__name__}: "
                            f"{str(error)[:200]})") from error
    problem = notebook_problem(data)
    if problem:
        raise NotebookError(f"{where}: cannot be read as a notebook ({problem})")
    try:
        return text, nbformat.reads(text, as_version=4)
    except Exception as error:  # what nbformat refuses beyond the schema
        raise NotebookError(f"{where}: cannot be read as a notebook ({type(error).__name__}: "
                            f"{str(error)[:200]})") from error


def read_notebook(path: Path, where: Optional[str] = None):
    """nbformat's node of the notebook at ``path`` (see :func:`read_notebook_text`)."""
    return read_notebook_text(path, where)[1]


def schema_problem(data: dict) -> Optional[str]:
    """How ``data`` breaks the nbformat 4 schema, or None.

    A cell without an ``id`` in format 4.5 (some clients write them; nbformat itself adds one
    on reading) is given one first, on a copy. The schema of the notebook's minor version (4.0
    to 4.5; a later one is checked as 4.5) then decides. The schemas are nbformat's own files,
    compiled by fastjsonschema (nbformat's validator): importing nbformat itself costs a second
    in every grading or progress process.
    """
    minor = data.get("nbformat_minor")
    minor = minor if isinstance(minor, int) and not isinstance(minor, bool) and 0 <= minor <= 5 else 5
    cells = []
    for index, cell in enumerate(data.get("cells", [])):
        if not isinstance(cell, dict):
            return f"{type(cell).__name__} where a cell should be at cells/{index}"
        cells.append(dict(cell, id=f"cell-{index}") if minor >= 5 and "id" not in cell else cell)
    import fastjsonschema
    try:
        _schema(minor)(dict(data, cells=cells))
    except fastjsonschema.JsonSchemaException as error:
        where = "/".join(str(part) for part in list(getattr(error, "path", None) or [])[1:7])
        message = printable(str(getattr(error, "message", error)).splitlines()[0])[:160]
        return f"{message} at {where}" if where else message
    except (RecursionError, MemoryError, TypeError, ValueError) as error:
        return f"{type(error).__name__} while checking it"
    return None


_SCHEMAS: dict = {}


def _schema(minor: int):
    """nbformat's schema of format 4.``minor``, compiled once per process."""
    if minor not in _SCHEMAS:
        import importlib.util
        import fastjsonschema
        folder = Path(importlib.util.find_spec("nbformat").submodule_search_locations[0]) / "v4"
        schema = json.loads((folder / f"nbformat.v4.{minor}.schema.json").read_text(encoding="utf-8"))
        _SCHEMAS[minor] = fastjsonschema.compile(schema)
    return _SCHEMAS[minor]


# ---------------------------------------------------------------- exercise, check and setup cells

def _directives(source: str) -> tuple:
    """``([(position, label)], opened)``: the ``{exercise}`` directives of a markdown cell that have
    a ``:label:`` line, and how many directives it opens. One pass: linear in the cell's length."""
    found, opened, count, position = [], None, 0, 0
    for line in source.splitlines(keepends=True):
        opens = _EXERCISE_OPEN_RE.match(line)
        count += bool(opens)
        if opened is None:
            if opens:
                opened = position
        else:
            label = _EXERCISE_LABEL_LINE_RE.match(line)
            if label:
                found.append((opened, label.group(1)))
                opened = None
        position += len(line)
    return found, count


def directive_labels(source: str) -> list:
    """The labels of the ``{exercise}`` directives (MyST) a markdown cell opens, in order."""
    return [label for _, label in _directives(source)[0]]


def exercise_labels(source: str) -> list:
    """The labels of the exercises a markdown cell opens, in order (either form)."""
    found = _directives(source)[0]
    found += [(m.start(), m.group(1)) for m in _EXERCISE_HEADING_RE.finditer(source)]
    return [label for _, label in sorted(found)]


def check_labels(source: str) -> list:
    """The labels a code cell checks (``check("chNN_exM", ...)``), in order."""
    return _CHECK_RE.findall(source)


def check_calls(source: str) -> list:
    """``(label, name)`` of every ``check("chNN_exM", name)`` of a code cell."""
    return _CHECK_NAME_RE.findall(source)


def notebook_title(cells: list, default: str) -> str:
    """The first level-1 heading of the notebook's markdown cells (without ``# ``), or ``default``."""
    return next((line[2:].strip() for c in cells if _kind(c) == "markdown"
                 for line in _src(c).splitlines() if line.startswith("# ")), default)


def setup_code(cells: list) -> str:
    parts = [_src(c) for c in cells if _kind(c) == "code" and SETUP_TAG in _tags(c)]
    return "\n\n".join(parts)


def exercise_code(cells: list) -> dict:
    """Map each exercise label to the source of its code cells (before its check cell)."""
    blocks: dict = {}
    current: Optional[str] = None
    for cell in cells:
        source = _src(cell)
        if cell.get("cell_type") == "markdown":
            labels = exercise_labels(source)
            if labels:
                current = labels[-1]
                blocks.setdefault(current, [])
            continue
        if cell.get("cell_type") != "code" or current is None:
            continue
        if _CHECK_RE.search(source):
            current = None  # the block ends at its check cell
            continue
        blocks[current].append(source)
    return {label: "\n\n".join(parts) for label, parts in blocks.items()}


def exercise_cell_index(cells: list) -> dict:
    """Map each exercise label to the index of its first exercise code cell."""
    out: dict = {}
    current: Optional[str] = None
    for index, cell in enumerate(cells):
        source = _src(cell)
        if cell.get("cell_type") == "markdown" and exercise_labels(source):
            current = exercise_labels(source)[-1]
        elif cell.get("cell_type") == "code" and current:
            if _CHECK_RE.search(source):
                current = None
            else:
                out.setdefault(current, index)
    return out


def with_exercise_code(nb: dict, label: str, code: str) -> dict:
    """A copy of notebook ``nb`` (plain JSON dict) whose exercise ``label`` cell holds
    ``code``: how tests and benchmarks make synthetic submissions."""
    nb = copy.deepcopy(nb)
    nb["cells"][exercise_cell_index(nb["cells"])[label]]["source"] = code
    return nb


def load_objects(path: Path, label: str, name: str) -> object:
    """Run the setup cell and exercise ``label``'s cells in-process; return ``name``.

    Trusted notebooks only (the course's own): the grader never calls this on a
    student's notebook, it runs student code in a child process.
    """
    cells = load_cells(path)
    blocks = exercise_code(cells)
    if label not in blocks:
        raise NotebookError(f"{Path(path).name}: no exercise {label} (found {', '.join(sorted(blocks)) or 'none'})")
    namespace: dict = {"__name__": "__exercise__"}
    exec(compile(setup_code(cells), f"{Path(path).name}:setup", "exec"), namespace)
    exec(compile(blocks[label], f"{Path(path).name}:{label}", "exec"), namespace)
    if name not in namespace:
        raise NotebookError(f"{Path(path).name}: exercise {label} does not define {name!r}")
    return namespace[name]


# ---------------------------------------------------------------- the solution notebook's answers

def stub_code(source: str, label: str, where: str) -> tuple:
    """Replace the solution regions of one cell; return (new source, [region code]).

    Each region becomes one line at its marker's indentation,
    ``raise NotImplementedError("chNN_exM: implement <name>")``, ``<name>`` being the function or
    method (``Class.method``) the marker is in. Unbalanced or nested markers are refused, with the
    line (``where`` names the notebook and the cell)."""
    lines = source.split("\n")
    out, regions, region, inside, start = [], [], [], False, 0
    # The def/class lines seen so far, each less indented than the one above it: the enclosing
    # names of any later line (kept in one pass, so that many markers cost linear time).
    scopes: list = []
    for number, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith(BEGIN):
            if inside:
                raise NotebookError(f"{where}, line {number + 1}: nested '{BEGIN}' (the region opened on line {start + 1} is not closed)")
            inside, start = True, number
            indent = line[: len(line) - len(line.lstrip())]
            names = [name for depth, name in scopes]
            enclosing = [i for i, (depth, _) in enumerate(scopes) if depth < len(indent)]
            name = ".".join(names[:enclosing[-1] + 1]) if enclosing else None
            what = f"implement {name}" if name else "write your answer here"
            out.append(f'{indent}raise NotImplementedError("{label}: {what}")')
            region = []
        elif stripped.startswith(END):
            if not inside:
                raise NotebookError(f"{where}, line {number + 1}: '{END}' without a matching '{BEGIN}'")
            inside = False
            regions.append("\n".join(region))
        elif inside:
            region.append(line)
        else:
            out.append(line)
        definition = _DEF_RE.match(line)
        if definition:
            depth = len(definition.group("indent"))
            while scopes and scopes[-1][0] >= depth:
                scopes.pop()
            scopes.append((depth, definition.group("name")))
    if inside:
        raise NotebookError(f"{where}, line {start + 1}: '{BEGIN}' is never closed by '{END}'")
    return "\n".join(out), regions


@dataclass
class SolutionCell:
    """One cell of a solution notebook, as the grammar reads it."""
    number: int                      # 1-based, in the notebook
    cell: dict                       # the notebook's own cell, untouched
    kind: str                        # "markdown", "code" or "raw"
    source: str
    exercise: Optional[str]          # the label of the last exercise opened at or above it (None: before the first)
    solution_only: bool = False      # left out of the student notebook
    checks: list = field(default_factory=list)   # the labels a code cell checks
    stub: Optional[str] = None       # a code cell with solution regions: its source with each one stubbed
    regions: list = field(default_factory=list)  # the code of those regions


@dataclass
class SolutionNotebook:
    cells: list    # SolutionCell, one per cell
    labels: dict   # exercise label -> number of the cell whose directive opens it


def parse_solution(cells: list, where: str, chapter: int) -> SolutionNotebook:
    """Read a solution notebook's cells (of chapter ``chapter``; ``where`` names the notebook).

    Refused, with the cell and, for markers, the line: unbalanced or nested markers, a solution
    region outside an exercise, an exercise label used twice or not of the form ``chNN_exM`` of
    this chapter, an ``{exercise}`` directive without a label, an exercise with no
    ``check("chNN_exM", ...)`` cell, and a markdown cell mixing a solution directive with other text.
    """
    out, labels, checked = [], {}, set()
    current: Optional[str] = None
    for number, cell in enumerate(cells, start=1):
        here = f"{where}, cell {number}"
        kind, source = _kind(cell), _src(cell)
        solution_only = SOLUTION_ONLY_TAG in _tags(cell)
        if kind == "markdown":
            found, opened = _directives(source)
            for _, label in found:
                m = LABEL_RE.match(label)
                if not m:
                    raise NotebookError(f"{here}: exercise label {label!r} is not of the form chNN_exM")
                if int(m.group(1)) != chapter:
                    raise NotebookError(f"{here}: exercise label {label!r} belongs to chapter {m.group(1)}, not {chapter:02d}")
                if label in labels:
                    raise NotebookError(f"{here}: exercise label {label!r} is used twice (first in cell {labels[label]})")
                labels[label] = number
                current = label
            if opened != len(found):
                raise NotebookError(f"{here}: an {{exercise}} directive has no ':label: chNN_exM' option")
            if _SOLUTION_RE.search(source):
                if not _SOLUTION_CELL_RE.match(source) or opened:
                    raise NotebookError(f"{here}: a markdown cell mixes a solution directive with other text; "
                                        "put the solution directive in a cell of its own")
                solution_only = True
        parsed = SolutionCell(number, cell, kind, source, current, solution_only)
        if kind == "code" and not solution_only:
            parsed.checks = check_labels(source)
            checked.update(parsed.checks)
            if BEGIN in source or END in source:
                if current is None:
                    raise NotebookError(f"{here}: a solution region outside any exercise (add an {{exercise}} "
                                        "directive with a label above it)")
                parsed.stub, parsed.regions = stub_code(source, current, here)
        out.append(parsed)
    for label, number in labels.items():
        if label not in checked:
            raise NotebookError(f"{where}, cell {number}: exercise {label} has no check cell "
                                f"(add a code cell calling check(\"{label}\", ...))")
    return SolutionNotebook(out, labels)
