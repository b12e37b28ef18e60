"""``attention-course new-exercise``: the skeleton of a new exercise, for authors.

One command sets up everything an exercise needs, in the course's fixed layout, so
that an author only fills in TODOs::

    attention-course new-exercise 3 "Luong's dot score" luong_dot [--kind function|class] [--points P]

It

* picks the next free label ``chNN_exM``: one past the highest of the chapter's
  registered labels and of the labels already in its solution notebook;
* writes ``attention_course/exercises/chNN/exM_<snake_case_name>.py`` with the parts
  of an exercise module in their fixed order (:mod:`.exercise_skeleton`). Every
  implementation is a placeholder raising ``NotImplementedError`` with the label, so the
  module imports and registers cleanly and the rest of the course keeps working while
  the author fills it in;
* adds ``from . import exM_<snake>`` to ``chNN/__init__.py``, in the style of the
  imports already there;
* inserts the exercise's five cells (statement, ``{solution-start}``, exercise cell,
  ``{solution-end}``, check cell) at the end of the ``## Exercises`` section of
  ``solutions/NN_*.ipynb``, written as the course writes notebooks (nbformat's JSON,
  one-space indent, a final newline), so that only the inserted cells change.

It refuses, with one line naming what and where and writing nothing, an unknown
chapter, a name that is not a Python identifier or that an exercise of the course
already defines, a module file that exists (an author's file is never overwritten) or
an unregistered module holding the new number, a notebook without an ``## Exercises``
heading or one that the notebook grammar refuses (:mod:`.notebook`: unreadable, too large
or too deep, unbalanced solution markers, a label used twice...: the release would refuse
it too), and a course folder whose package is not the one imported (its registry
decides the label and the names taken). All files are rendered in memory
and checked before the first is written; a failed write puts back what was written.
"""
from __future__ import annotations

import ast
import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

import nbformat

from ..checks.registry import LABEL_RE
from .exercise_skeleton import contract_placeholder, module_docstring, render_module  # noqa: F401 - re-exported
from .notebook import _src, check_calls, directive_labels, parse_solution, read_notebook_text, reraised_as, setup_code

_HEADING_RE = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t#]*$")
_FENCE_RE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,}|:{3,})")
KINDS = ("function", "class")


class ScaffoldError(ValueError):
    """The command cannot create the exercise; the message says what and where."""


def snake_case(name: str) -> str:
    """``BilinearAttention`` -> ``bilinear_attention``, ``MLPScore`` -> ``mlp_score``."""
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return re.sub(r"_+", "_", text).strip("_").lower() or name.lower()


def parse_chapter(text) -> int:
    """``3`` or ``03`` -> 3."""
    text = str(text).strip()
    if not re.fullmatch(r"\d{1,2}", text) or int(text) == 0:
        raise ScaffoldError(f"unknown chapter {text!r}: give its number, e.g. 3 or 03")
    return int(text)


def chapter_notebook(root: Path, chapter: int) -> Path:
    folder = Path(root) / "solutions"
    matches = sorted(folder.glob(f"{chapter:02d}_*.ipynb"))
    if not matches:
        raise ScaffoldError(f"unknown chapter {chapter}: no solution notebook {folder}/{chapter:02d}_*.ipynb")
    if len(matches) > 1:
        raise ScaffoldError(f"chapter {chapter} has {len(matches)} solution notebooks in {folder}: "
                            f"{', '.join(p.name for p in matches)}")
    return matches[0]



# ---------------------------------------------------------------- the notebook cells

def exercise_cell_source(label: str, name: str, kind: str, base: str = "nn.Module") -> str:
    if kind == "class":
        return (f"class {name}({base}):\n"
                f'    """TODO: what the module computes: its parameters (names, shapes) and forward\'s\n'
                f'    arguments and result (shapes). The student sees this docstring."""\n'
                "\n"
                "    def __init__(self, size):\n"
                "        super().__init__()\n"
                "        # BEGIN SOLUTION\n"
                f'        raise NotImplementedError("TODO {label}: create the parameters of {name}")\n'
                "        # END SOLUTION\n"
                "\n"
                "    def forward(self, x):\n"
                '        """TODO: x (shape), the result (shape)."""\n'
                "        # BEGIN SOLUTION\n"
                f'        raise NotImplementedError("TODO {label}: the solution of {name}.forward")\n'
                "        # END SOLUTION")
    return (f"def {name}(x):\n"
            f'    """TODO: what {name} returns, with the shapes of x and of the result.\n'
            "\n"
            '    The student sees this docstring; the solution goes between the markers."""\n'
            "    # BEGIN SOLUTION\n"
            f'    raise NotImplementedError("TODO {label}: the solution of {name}")\n'
            "    # END SOLUTION")


def exercise_cells(label: str, title: str, name: str, kind: str, contract: str,
                   base: str = "nn.Module") -> list:
    """The five cells of an exercise, in the layout of AUTHORING.md (ids derived from the label)."""
    statement = nbformat.v4.new_markdown_cell(f"```{{exercise}} {title}\n:label: {label}\n\n{contract}\n```")
    start = nbformat.v4.new_markdown_cell(f"```{{solution-start}} {label}\n:class: dropdown\n```")
    code = nbformat.v4.new_code_cell(exercise_cell_source(label, name, kind, base))
    end = nbformat.v4.new_markdown_cell("```{solution-end}\n```")
    check = nbformat.v4.new_code_cell(f'check("{label}", {name})')
    cells = [statement, start, code, end, check]
    for cell, suffix in zip(cells, ("exercise", "solution-start", "solution", "solution-end", "check")):
        cell["id"] = f"{label}-{suffix}"
    return cells


def _headings(source: str) -> list:
    """(level, text) of the Markdown headings of a cell, outside fenced blocks."""
    out, fence = [], None
    for line in source.split("\n"):
        m = _FENCE_RE.match(line)
        if m:
            mark = m.group(1)
            if fence is None:
                fence = mark
            elif mark[0] == fence[0] and len(mark) >= len(fence) and not line.strip()[len(mark):].strip():
                fence = None
            continue
        if fence is None:
            h = _HEADING_RE.match(line)
            if h:
                out.append((len(h.group(1)), h.group(2).strip()))
    return out


def exercises_end(nb, where: str) -> int:
    """The index at which new exercise cells go: the end of the ``## Exercises`` section
    (before the next heading of level 1 or 2, normally ``## References``)."""
    start = None
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        headings = _headings(_src(cell))
        if start is None:
            if (2, "Exercises") in headings:
                start = index
                # A later level-1/2 heading in the same cell would end the section inside it.
                after = headings[headings.index((2, "Exercises")) + 1:]
                if any(level <= 2 for level, _ in after):
                    raise ScaffoldError(f"{where}, cell {index + 1}: the '## Exercises' heading shares its "
                                        "cell with the next section's heading; split the cell")
        elif any(level <= 2 for level, _ in headings):
            return index
    if start is None:
        raise ScaffoldError(f"{where}: no '## Exercises' heading (a markdown cell with the line "
                            "'## Exercises'); add the section first")
    return len(nb.cells)


def render_notebook(nb) -> str:
    """The text the course writes a notebook as (nbformat's JSON: one-space indent,
    ensure_ascii off, sorted keys, a final newline), as ``attention-course execute`` and
    ``release`` do."""
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def notebook_labels(nb) -> list:
    return [label for cell in nb.cells if cell.cell_type == "markdown" for label in directive_labels(_src(cell))]


def notebook_checked_names(nb) -> dict:
    """{name: label} of every ``check("chNN_exM", name)`` in the notebook."""
    return {name: label for cell in nb.cells if cell.cell_type == "code" for label, name in check_calls(_src(cell))}


def _setup_imports_nn(nb) -> bool:
    return bool(re.search(r"^\s*from\s+torch\s+import\s+(?:.*\bnn\b)", setup_code(nb.cells), re.M))


# ---------------------------------------------------------------- the chapter's __init__

def add_import(text: str, module: str, where: str = "__init__.py") -> str:
    """``text`` (a chapter's ``__init__.py``) importing ``module`` too, in the style of its
    ``from . import exM_...`` imports: one statement per module, one statement listing
    them on a line, or a parenthesised list (one name per line, or several)."""
    try:
        tree = ast.parse(text)
    except SyntaxError as error:
        raise ScaffoldError(f"{where}, line {error.lineno}: cannot be parsed ({error.msg})") from error
    nodes = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.level == 1 and n.module is None
             and all(re.fullmatch(r"ex\d+_\w+", a.name) and a.asname is None for a in n.names)]
    lines = text.split("\n")
    if not nodes:
        # No exercise imported yet: one statement, after the docstring and other imports.
        last = max((n.end_lineno for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                    or (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))), default=0)
        lines.insert(last, f"from . import {module}")
        return "\n".join(lines)
    node, alias = nodes[-1], nodes[-1].names[-1]
    line = lines[alias.end_lineno - 1]
    if node.lineno == node.end_lineno and len(node.names) == 1:
        # One statement per module: a copy of the last one's line (its trailing comment too).
        new = line[:node.col_offset] + f"from . import {module}" + line[node.end_col_offset:]
        lines.insert(node.end_lineno, new)
        return "\n".join(lines)
    one_per_line = (len(node.names) == 1 or node.names[-2].end_lineno != alias.lineno)
    if node.lineno != node.end_lineno and one_per_line and node.lineno < alias.lineno < node.end_lineno:
        # A parenthesised list, one name per line: a new line like the last one.
        indent = line[:len(line) - len(line.lstrip())]
        rest = line[alias.end_col_offset:]
        if not rest.lstrip().startswith(","):  # the last name had no trailing comma: give it one
            lines[alias.end_lineno - 1] = line[:alias.end_col_offset] + "," + rest
            lines.insert(alias.end_lineno, f"{indent}{module}")
        else:
            lines.insert(alias.end_lineno, f"{indent}{module},")
        return "\n".join(lines)
    # Several names on the last name's line: the new one after it.
    lines[alias.end_lineno - 1] = line[:alias.end_col_offset] + f", {module}" + line[alias.end_col_offset:]
    return "\n".join(lines)


# ---------------------------------------------------------------- the plan

@dataclass
class Plan:
    """Everything ``new-exercise`` will write, rendered and checked before any write."""
    label: str
    chapter: int
    name: str
    kind: str
    module_path: Path
    module_text: str
    init_path: Path
    init_text: str
    init_before: str
    notebook_path: Path
    notebook_text: str
    notebook_before: str
    cell_numbers: tuple  # 1-based numbers of the inserted cells
    notebook_reformatted: bool = False
    written: list = field(default_factory=list)

    def write(self) -> None:
        """Write the three files; put back what was written if a write fails."""
        done = []
        try:
            with open(self.module_path, "x", encoding="utf-8") as f:  # never overwrite
                done.append((self.module_path, None))
                f.write(self.module_text)
            for path, text, before in ((self.init_path, self.init_text, self.init_before),
                                       (self.notebook_path, self.notebook_text, self.notebook_before)):
                done.append((path, before))
                path.write_bytes(text.encode("utf-8"))
        except BaseException:
            for path, before in reversed(done):  # best effort, each file on its own
                try:
                    if before is None:
                        path.unlink(missing_ok=True)
                    elif path.read_bytes() != before.encode("utf-8"):
                        path.write_bytes(before.encode("utf-8"))
                except OSError:
                    pass
            raise
        self.written = [path for path, _ in done]


def _exercise_number(label: str) -> int:
    return int(LABEL_RE.match(label).group(2))


def plan_new_exercise(root: Path, chapter, title: str, name: str, kind: str = "function",
                      points: float = 2, exercises: Optional[Iterable] = None) -> Plan:
    """Render the new exercise's files (nothing is written); refuse with :class:`ScaffoldError`.

    ``exercises`` are the course's registered exercises (default: the registry of the
    imported package, which must be the one under ``root``).
    """
    root = Path(root)
    chapter = parse_chapter(chapter)
    title = (title or "").strip()
    if not title or "\n" in title:
        raise ScaffoldError(f"the title must be one non-empty line, got {title!r}")
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ScaffoldError(f"{name!r} is not a Python identifier: the name the student's cell defines "
                            "must be one (e.g. masked_softmax, AdditiveAttention)")
    if kind not in KINDS:
        raise ScaffoldError(f"--kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if not points > 0:
        raise ScaffoldError(f"--points must be positive, got {points:g}")
    notebook_path = chapter_notebook(root, chapter)
    package = root / "attention_course" / "exercises" / f"ch{chapter:02d}"
    init_path = package / "__init__.py"
    if not init_path.is_file():
        raise ScaffoldError(f"unknown chapter {chapter}: no exercise package {init_path}")
    if exercises is None:
        from ..checks.registry import all_exercises
        try:
            exercises = all_exercises()
        except Exception as error:  # an author's module in the middle of an edit
            raise ScaffoldError(f"the exercise modules do not import ({type(error).__name__}: {error}); "
                                "fix that first") from error
    exercises = list(exercises)
    taken = next((ex for ex in exercises if ex.name == name), None)
    if taken is not None:
        raise ScaffoldError(f"{name!r} is already defined by exercise {taken.label} ({taken.title}); "
                            "choose another name")
    where = str(notebook_path)
    with reraised_as(ScaffoldError):  # within the grammar's bounds; its refusals name the cell and line
        notebook_before, nb = read_notebook_text(notebook_path, where)  # as it is, line ends included
        parse_solution(nb.cells, where, chapter)
    checked = notebook_checked_names(nb)
    if name in checked:
        raise ScaffoldError(f"{name!r} is already defined by exercise {checked[name]} in {where}; "
                            "choose another name")
    labels = [ex.label for ex in exercises if ex.chapter == chapter] + notebook_labels(nb)
    numbers = [_exercise_number(lab) for lab in labels
               if LABEL_RE.match(lab) and int(LABEL_RE.match(lab).group(1)) == chapter]
    number = max(numbers, default=0) + 1
    label = f"ch{chapter:02d}_ex{number}"
    module = f"ex{number}_{snake_case(name)}"
    module_path = package / f"{module}.py"
    if module_path.exists():
        raise ScaffoldError(f"{module_path} exists; it is never overwritten (move it away, or wire it "
                            f"up by hand)")
    same_number = sorted(p.name for p in package.glob(f"ex{number}_*.py"))
    if same_number:
        raise ScaffoldError(f"{package / same_number[0]} already uses number {number} of chapter {chapter} "
                            f"but is not registered; import it in {init_path} or remove it")
    at = exercises_end(nb, where)
    reformatted = render_notebook(nb) != notebook_before
    contract = contract_placeholder(name, kind, module_path.relative_to(root).as_posix())
    base = "nn.Module" if _setup_imports_nn(nb) else "torch.nn.Module"
    cells = exercise_cells(label, title, name, kind, contract, base)
    used_ids = {cell.get("id") for cell in nb.cells}
    clash = [c["id"] for c in cells if c["id"] in used_ids]
    if clash:
        raise ScaffoldError(f"{where}: a cell already has the id {clash[0]!r}")
    nb.cells[at:at] = cells
    notebook_text = render_notebook(nb)
    nbformat.validate(nbformat.reads(notebook_text, as_version=4))
    module_text = render_module(label, title, name, kind, points, contract)
    compile(module_text, str(module_path), "exec")
    init_before = init_path.read_bytes().decode("utf-8")
    init_text = add_import(init_before, module, str(init_path))
    compile(init_text, str(init_path), "exec")
    return Plan(label=label, chapter=chapter, name=name, kind=kind, module_path=module_path,
                module_text=module_text, init_path=init_path, init_text=init_text, init_before=init_before,
                notebook_path=notebook_path, notebook_text=notebook_text, notebook_before=notebook_before,
                cell_numbers=tuple(range(at + 1, at + 1 + len(cells))), notebook_reformatted=reformatted)


def check_package_root(root: Path) -> None:
    """Refuse when the imported ``attention_course`` is not the one under ``root``: its
    registry would decide the label and the names of another copy of the course."""
    import attention_course
    if not (Path(root) / "attention_course" / "exercises").is_dir():
        raise ScaffoldError(f"{Path(root).resolve()} is not the course folder (it has no "
                            "attention_course/exercises); run the command there or pass --root")
    imported = Path(attention_course.__file__).resolve().parent
    wanted = (Path(root) / "attention_course").resolve()
    if imported != wanted:
        raise ScaffoldError(f"the attention_course package imported is {imported}, not {wanted}; run the "
                            f"command from the course folder with that copy importable "
                            f"(e.g. PYTHONPATH={Path(root).resolve()})")


def next_steps(plan: Plan, root: Path) -> list:
    def rel(path: Path) -> str:
        try:
            return str(Path(path).resolve().relative_to(Path(root).resolve()))
        except ValueError:
            return str(path)
    notebook, module = rel(plan.notebook_path), rel(plan.module_path)
    first, last = plan.cell_numbers[0], plan.cell_numbers[-1]
    lines = [
        f"{plan.label}: wrote {module} (a skeleton: reference, check inputs, 2 kept mistakes, "
        f"3 kept alternatives, all TODO)",
        f"{plan.label}: added its import to {rel(plan.init_path)}",
        f"{plan.label}: inserted cells {first}-{last} of {notebook} (the statement, solution-start, the "
        f"exercise cell, solution-end, the check cell) at the end of its '## Exercises' section",
    ]
    if plan.notebook_reformatted:
        lines.append(f"note: {notebook} was not in nbformat's layout; cells other than the new ones "
                     "may show formatting changes in git diff")
    lines += [
        "",
        "Next steps:",
        f"  1. fill in the TODOs: the contract (the same words in {notebook}, cell {first}, and in the "
        f"docstring of {module}), the solution of cell {plan.cell_numbers[2]}, and in {module} the "
        "reference, the check inputs, the kept mistakes with their hints and the kept alternatives",
        f"  2. attention-course execute {notebook}",
        f"  3. attention-course release --chapter {plan.chapter}",
        f"  4. pytest tests -k {plan.label}   (every test of the exercise: checks, layout, regressions)",
    ]
    return lines
