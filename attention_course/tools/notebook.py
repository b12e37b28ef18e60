"""Find the setup cell and each exercise's cells in a chapter notebook.

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
"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Optional

# An ``{exercise}`` directive's opening line, and a ``:label:`` line after it. They are matched
# line by line (see exercise_labels): one pattern spanning both, lazily, took time quadratic in a
# cell of many opening lines, which a submission controls.
_EXERCISE_OPEN_RE = re.compile(r"(?:```+|:::+)\{exercise\}")
_EXERCISE_LABEL_LINE_RE = re.compile(r"[ \t]*:label:[ \t]*(\S+)")
# The portable form written by the release generator (attention_course.tools.release).
_EXERCISE_HEADING_RE = re.compile(r"^#{1,6}[ \t]+Exercise[ \t]+\d+[ \t]+\((ch\d\d_ex\d+)\)", re.M)
_CHECK_RE = re.compile(r"""\bcheck\(\s*["'](ch\d\d_ex\d+)["']""")


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


def _clean_cell(cell: dict) -> dict:
    """Only what the course reads, in the types it expects: a submission's cell may hold
    anything (a string as metadata, numbers in the source, no cell type)."""
    cell_type = cell.get("cell_type")
    return {"cell_type": cell_type if isinstance(cell_type, str) else "", "source": _src(cell),
            "metadata": {"tags": _tags(cell)}}


def load_cells(path: Path) -> list:
    """Read a notebook's cells as plain dicts, with a clear error when malformed."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError, MemoryError) as error:
        # RecursionError: JSON nested deeper than the parser's limit (a hostile submission).
        raise NotebookError(f"{path.name}: not a readable notebook ({type(error).__name__}: "
                            f"{str(error)[:200]})") from error
    if not isinstance(data, dict) or data.get("nbformat") != 4 or not isinstance(data.get("cells"), list):
        raise NotebookError(f"{path.name}: not an nbformat-4 notebook (found nbformat={data.get('nbformat') if isinstance(data, dict) else None!r})")
    problem = schema_problem(data)
    if problem:
        raise NotebookError(f"{path.name}: not a valid notebook ({problem}); save it again from Jupyter, "
                            "or open it there and fix the cell named")
    return [_clean_cell(c) for c in data["cells"] if isinstance(c, dict)]


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


def exercise_labels(source: str) -> list:
    """The labels of the exercises a markdown cell opens, in order (either form)."""
    found, opened, position = [], None, 0
    for line in source.splitlines(keepends=True):  # one pass: linear in the cell's length
        if opened is None:
            if _EXERCISE_OPEN_RE.match(line):
                opened = position
        else:
            label = _EXERCISE_LABEL_LINE_RE.match(line)
            if label:
                found.append((opened, label.group(1)))
                opened = None
        position += len(line)
    found += [(m.start(), m.group(1)) for m in _EXERCISE_HEADING_RE.finditer(source)]
    return [label for _, label in sorted(found)]


def setup_code(cells: list) -> str:
    parts = [_src(c) for c in cells if c.get("cell_type") == "code" and "setup" in _tags(c)]
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
