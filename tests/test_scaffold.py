"""``attention-course new-exercise`` (the scaffold for authors) and the authoring loop it
starts, in a scratch copy of the course:

* the pieces: the module skeleton has the parts of an exercise module in their order,
  the chapter's ``__init__`` keeps its import style, the notebook gains exactly the five
  cells of AUTHORING.md at the end of ``## Exercises`` and nothing else changes;
* the loop: the command, then a real exercise filled into the skeleton
  (``demo_weights_from_distances``: a name no real exercise should take, since names are
  unique across the course), ``execute``, ``release --chapter 1``, ``release --check``,
  the check-strength tests of the new label and a grade with full marks;
* each refusal: exit status 2, one line naming what and where, nothing written;
* ``release --chapter N`` refreshes the exercise index too (it lists every chapter).
"""
import ast
import csv
import difflib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from attention_course.checks.registry import all_exercises
from attention_course.tools.release import (EXERCISE_INDEX, exercise_index, release, release_notebook,
                                      solution_paths, stub_code)
from attention_course.tools.scaffold import (ScaffoldError, add_import, exercise_cells, exercises_end, parse_chapter,
                                       plan_new_exercise, render_module, snake_case)

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ["# The reference ", "# Inputs of the public and hidden checks ", "# Kept mistakes, each with its hint ",
            "# Kept alternatives ", "# Registration "]


def _course_copy(dest: Path) -> Path:
    """The course's files (tracked, and new ones not ignored: the working tree under test),
    without .venv, _build or caches."""
    try:
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("needs the course as a git checkout (git ls-files)")
    for name in listed.decode().split("\0"):
        source = ROOT / name
        if name and source.is_file():  # a file deleted in the working tree is listed but absent
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def _env(copy: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(copy))  # the copy's package, not the checkout's
    env.pop("PYTHONSAFEPATH", None)
    return env


def _command(*args) -> list:
    return [sys.executable, "-m", "attention_course.tools.cli", *map(str, args)]


def _run(copy: Path, *args, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(_command(*args), cwd=copy, env=_env(copy), capture_output=True, text=True,
                          timeout=timeout)


def _files(copy: Path) -> dict:
    return {p.relative_to(copy).as_posix(): p.read_bytes() for p in copy.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def _notebook(copy: Path, chapter: int) -> Path:
    return next((copy / "solutions").glob(f"{chapter:02d}_*.ipynb"))


def _next_label(chapter: int) -> str:
    numbers = [int(ex.label.split("_ex")[1]) for ex in all_exercises(chapter)]
    return f"ch{chapter:02d}_ex{max(numbers) + 1}"


def _src(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


# ------------------------------------------------------------ the pieces


def test_names_and_chapters():
    assert snake_case("demo_weights_from_distances") == "demo_weights_from_distances"
    assert snake_case("BilinearAttention") == "bilinear_attention"
    assert snake_case("MLPScore") == "mlp_score"
    assert parse_chapter("3") == parse_chapter("03") == parse_chapter(3) == 3
    for bad in ("x", "0", "003", ""):
        with pytest.raises(ScaffoldError, match="unknown chapter"):
            parse_chapter(bad)


@pytest.mark.parametrize("before,after", [
    ("from . import (  # noqa: F401\n    ex1_a,\n    ex2_b,\n)\n",
     "from . import (  # noqa: F401\n    ex1_a,\n    ex2_b,\n    ex3_new,\n)\n"),
    ("from . import ex1_a  # noqa: F401\nfrom . import ex2_b  # noqa: F401\n",
     "from . import ex1_a  # noqa: F401\nfrom . import ex2_b  # noqa: F401\nfrom . import ex3_new  # noqa: F401\n"),
    ("from . import ex1_a, ex2_b\n", "from . import ex1_a, ex2_b, ex3_new\n"),
    ("from . import (ex1_a,\n               ex2_b)\n", "from . import (ex1_a,\n               ex2_b, ex3_new)\n"),
], ids=["parenthesised", "one-per-statement", "one-line", "hanging"])
def test_the_new_import_keeps_the_chapters_style(before, after):
    doc = '"""Chapter 9 exercises."""\n'
    assert add_import(doc + before, "ex3_new") == doc + after


def test_the_chapters_own_init_gains_one_line():
    init = ROOT / "attention_course" / "exercises" / "ch01" / "__init__.py"
    if not init.exists():
        pytest.skip("the one-package-per-chapter layout is not there yet")
    before = init.read_text(encoding="utf-8")
    after = add_import(before, "ex9_new")

    def imported(text):
        return [a.name for n in ast.parse(text).body if isinstance(n, ast.ImportFrom) and n.level == 1
                for a in n.names]
    assert imported(after) == imported(before) + ["ex9_new"]
    diff = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    removed = [line[2:] for line in diff if line.startswith("- ")]
    added = [line[2:] for line in diff if line.startswith("+ ")]
    assert len([line for line in added if "ex9_new" in line]) == 1
    assert all(line.rstrip() + "," in [a.rstrip() for a in added] for line in removed)  # at most a comma more


@pytest.mark.parametrize("kind", ["function", "class"])
def test_the_skeleton_has_every_part_in_order(kind):
    text = render_module("ch07_ex9", "A new one", "NewOne", kind, 2, "TODO: the contract.\n\nWrite `NewOne`.")
    tree = ast.parse(text)
    assert ast.get_docstring(tree, clean=False) == "ch07_ex9: A new one.\n\nTODO: the contract.\n\nWrite `NewOne`.\n"
    positions = [text.index("\n" + s) for s in SECTIONS]
    assert positions == sorted(positions)
    head = text[:positions[0]]
    assert "from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register" in head
    assert "from .._kit import ERROR_WEIGHT, Kept, gen, randint, shape_of" in head
    assert "mistakes = Kept(Mistake)\nalternatives = Kept(Alternative)\n" in head
    assert text.count("@mistakes.keep(") == 2 and text.count("@alternatives.keep(") == 3
    registration = text[positions[-1]:]
    assert 'label="ch07_ex9", title="A new one"' in registration and f'kind="{kind}"' in registration
    assert "public=False" in registration and "weight=ERROR_WEIGHT,  # OPTIONAL" in registration
    assert "mistakes=list(mistakes)" in registration and "alternatives=list(alternatives)" in registration
    # Every placeholder raises with the label, so a forgotten TODO cannot pass as an answer.
    assert text.count('raise NotImplementedError("ch07_ex9: TODO') == (7 if kind == "class" else 6)


def test_the_class_cell_calls_super_outside_the_solution():
    code = exercise_cells("ch03_ex9", "T", "NewModule", "class", "TODO")[2]
    stub, regions = stub_code(code.source, "ch03_ex9", "cell")
    assert "super().__init__()" in stub and not any("super()" in r for r in regions)
    assert 'raise NotImplementedError("ch03_ex9: implement NewModule.__init__")' in stub
    assert 'raise NotImplementedError("ch03_ex9: implement NewModule.forward")' in stub


def test_the_notebook_gains_the_five_cells_and_nothing_else(tmp_path):
    if not (ROOT / "attention_course" / "exercises" / "ch01").is_dir():
        pytest.skip("the one-package-per-chapter layout is not there yet")
    copy = tmp_path
    for name in ("attention_course/exercises/ch01/__init__.py", _notebook(ROOT, 1).relative_to(ROOT).as_posix()):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, copy / name)
    label = _next_label(1)
    plan = plan_new_exercise(copy, "01", "Weights from distances", "demo_weights_from_distances",
                             exercises=all_exercises())
    assert plan.label == label and plan.module_path.name == f"ex{label[7:]}_demo_weights_from_distances.py"
    assert not plan.notebook_reformatted
    # As text: only insertions, at one place (what `git diff --stat` shows as +N -0).
    ops = difflib.SequenceMatcher(None, plan.notebook_before.splitlines(True),
                                  plan.notebook_text.splitlines(True), autojunk=False).get_opcodes()
    assert [op for op in ops if op[0] != "equal"] and all(op[0] in ("equal", "insert") for op in ops)
    assert sum(op[0] == "insert" for op in ops) == 1
    assert plan.notebook_text.endswith("}\n") and ' "cells": [\n  {\n   "cell_type"' in plan.notebook_text
    # As cells: the layout of AUTHORING.md, right before ## References.
    before = nbformat.reads(plan.notebook_before, as_version=4)
    after = nbformat.reads(plan.notebook_text, as_version=4)
    at = plan.cell_numbers[0] - 1
    assert at == exercises_end(before, "nb") and _src(after.cells[at + 5]).startswith("## References")
    assert after.cells[:at] == before.cells[:at] and after.cells[at + 5:] == before.cells[at:]
    statement, start, code, end, check = after.cells[at:at + 5]
    assert statement.source.startswith(f"```{{exercise}} Weights from distances\n:label: {label}\n\nTODO")
    assert statement.source.endswith("\n```")
    assert start.source == f"```{{solution-start}} {label}\n:class: dropdown\n```"
    assert code.cell_type == "code" and code.source.startswith("def demo_weights_from_distances(x):\n    \"\"\"")
    assert "    # BEGIN SOLUTION\n" in code.source and code.source.endswith("    # END SOLUTION")
    assert end.source == "```{solution-end}\n```"
    assert check.cell_type == "code" and check.source == f'check("{label}", demo_weights_from_distances)'
    # The release generator takes the new exercise as it is.
    student, regions = release_notebook(after, plan.notebook_path, registered=None, portable=False)
    assert [r.label for r in regions][-1] == label
    assert any(f'raise NotImplementedError("{label}: implement demo_weights_from_distances")' in _src(c)
               for c in student.cells)
    assert not plan.module_path.exists()  # nothing is written before Plan.write()


def test_a_failed_write_puts_everything_back(tmp_path, monkeypatch):
    if not (ROOT / "attention_course" / "exercises" / "ch01").is_dir():
        pytest.skip("the one-package-per-chapter layout is not there yet")
    for name in ("attention_course/exercises/ch01/__init__.py", _notebook(ROOT, 1).relative_to(ROOT).as_posix()):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    before = _files(tmp_path)
    plan = plan_new_exercise(tmp_path, 1, "T", "fresh_name", exercises=all_exercises())
    real = Path.write_bytes

    def full_disk(path, data):
        if path == plan.notebook_path:
            raise OSError(28, "No space left on device")
        return real(path, data)
    monkeypatch.setattr(Path, "write_bytes", full_disk)
    with pytest.raises(OSError, match="No space left"):
        plan.write()
    assert _files(tmp_path) == before


def test_release_of_one_chapter_refreshes_the_exercise_index(tmp_path):
    """The index lists every chapter; `release --chapter N` left it stale, so that
    `release --check` failed right after (issue 18)."""
    for name in ("_toc.yml", "_config.yml", "references.bib"):
        shutil.copy2(ROOT / name, tmp_path / name)
    (tmp_path / "solutions").mkdir()
    for path in solution_paths(ROOT):
        shutil.copy2(path, tmp_path / "solutions" / path.name)
    index = tmp_path / EXERCISE_INDEX
    index.write_text("stale\n", encoding="utf-8")
    assert index in release(tmp_path, chapter=1, check_only=True)
    assert index.read_text(encoding="utf-8") == "stale\n"
    stale = release(tmp_path, chapter=1)
    assert index in stale and tmp_path / "chapters" / "01_queries_keys_values.ipynb" in stale
    assert index.read_text(encoding="utf-8") == exercise_index(tmp_path)
    assert release(tmp_path, chapter=1, check_only=True) == []


# ------------------------------------------------------------ the whole loop

CONTRACT = """\
The nearer a key, the more weight it should get. Write `demo_weights_from_distances(distances)`.

- `distances`: a float tensor of shape `(..., num_keys)` (any number of leading
  dimensions), the distance of each query to each key.
- Return a tensor of the same shape and dtype: along the last axis, the softmax of the
  negated distances, so that each query's weights sum to one and the nearest key weighs
  most. It must stay finite for distances in the thousands.
- Raise `ValueError` naming `distances` and its shape when there is no key
  (`num_keys == 0`)."""

SOLUTION = """\
    if distances.shape[-1] == 0:
        raise ValueError(f"distances of shape {tuple(distances.shape)} holds no key")
    nearest = distances.amin(dim=-1, keepdim=True)
    scores = torch.exp(nearest - distances)
    return scores / scores.sum(dim=-1, keepdim=True)"""

MODULE = '''\
"""{label}: Weights from distances.

{contract}
"""
from __future__ import annotations

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import ERROR_WEIGHT, Kept, gen, randint, shape_of

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _validate(distances):
    if distances.dim() == 0 or distances.shape[-1] == 0:
        raise ValueError(f"distances has shape {{shape_of(distances)}}: it needs at least one key")


def demo_weights_from_distances(distances):
    """Reference: the softmax of the negated distances along the keys axis."""
    _validate(distances)
    return torch.softmax(-distances, dim=-1)


# Inputs of the public and hidden checks ---------------------------------------------------


def _small_calls(seed):
    g = gen(seed)
    return [Call(args=(torch.rand(3, 5, generator=g) * 4,))]


def _far_calls(seed):
    g = gen(seed)
    far = torch.rand(2, 4, generator=g) * 50 + 1000
    return [Call(args=(far,)), Call(args=(far.double(),))]


def _bad_calls(seed):
    g = gen(seed)
    return [Call(args=(torch.rand(2, 3, generator=g),)), Call(args=(torch.rand(3, 0, generator=g),))]


def _bad_words(call):
    return ["distances", shape_of(call.args[0])]


def _random_calls(seed):
    g = gen(seed)
    lead = tuple(randint(g, 1, 3) for _ in range(randint(g, 0, 2)))
    near = torch.rand(*lead, randint(g, 2, 7), generator=g) * randint(g, 1, 9)
    far = torch.rand(randint(g, 1, 3), randint(g, 2, 5), generator=g, dtype=torch.float64) * 40 + 900
    return [Call(args=(near,)), Call(args=(far,)), Call(args=(torch.rand(4, 1, generator=g),))]


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("distances not negated",
               "the farthest key got the largest weight: the softmax was taken of the distances "
               "themselves, not of their negatives.")
def _not_negated(distances):
    _validate(distances)
    return torch.softmax(distances, dim=-1)


@mistakes.keep("exponentials without a shift",
               "large distances give NaN: exp(-distance) underflows to zero for every key, and 0/0 is NaN; "
               "shift the distances before exponentiating.")
def _no_shift(distances):
    _validate(distances)
    scores = torch.exp(-distances)
    return scores / scores.sum(dim=-1, keepdim=True)


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("exp and divide, shifted", "the nearest distance subtracted, exp, divided by the sum")
def _shifted(distances):
    if distances.ndim == 0 or distances.size(-1) == 0:
        raise ValueError(f"no key in distances {{list(distances.shape)}}")
    scores = torch.exp(distances.amin(-1, keepdim=True) - distances)
    return scores / scores.sum(-1, keepdim=True)


@alternatives.keep("log_softmax in float64", "exp of a float64 log_softmax, cast back; shape as torch.Size")
def _log_softmax_float64(distances):
    if distances.dim() < 1 or distances.shape[-1] < 1:
        raise ValueError(f"distances must hold at least one key, got {{distances.shape}}")
    return torch.log_softmax(-distances.double(), dim=-1).exp().to(distances.dtype)


@alternatives.keep("one query at a time", "a loop over the rows of a (-1, num_keys) view; shape as 3x0")
def _rows(distances):
    if distances.dim() == 0 or distances.shape[-1] == 0:
        raise ValueError("distances (" + "x".join(map(str, distances.shape)) + ") has no key")
    rows = distances.reshape(-1, distances.shape[-1])
    out = torch.stack([torch.nn.functional.softmax(-row, dim=0) for row in rows])
    return out.reshape(distances.shape)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="{label}", title="Weights from distances",
    name="demo_weights_from_distances", reference=demo_weights_from_distances, points=2, kind="function",
    checks=[
        Check("3 queries by 5 keys", _small_calls, seed=0,
              hint="each row is the softmax of that query's negated distances: compare a row of yours "
                   "with it written out by hand."),
        Check("distances in the thousands stay finite, float32 and float64", _far_calls, seed=1,
              hint="every distance here is above 1000; the weights must still sum to one in each row, "
                   "in the dtype of the input."),
        Check("no key raises ValueError naming distances and its shape", _bad_calls, seed=2,
              must_mention=_bad_words, weight=ERROR_WEIGHT,
              hint="the second call has no key (shape (3, 0)); the ValueError must name distances and "
                   "its shape."),
        Check("random sizes, far distances in float64 and a single key (hidden)", _random_calls, seed=3,
              public=False,
              hint="any number of leading dimensions, float64, large distances and num_keys == 1."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
'''


def _fill(copy: Path, label: str, module: Path) -> None:
    """What the author does after the command: the contract, the solution, the module."""
    module.write_text(MODULE.format(label=label, contract=CONTRACT), encoding="utf-8")
    path = _notebook(copy, 1)
    nb = nbformat.read(path, as_version=4)
    statement = next(c for c in nb.cells if f":label: {label}\n" in c.source)
    statement.source = f"```{{exercise}} Weights from distances\n:label: {label}\n\n{CONTRACT}\n```"
    code = next(c for c in nb.cells if c.get("id") == f"{label}-solution")
    code.source = re.sub(r"(# BEGIN SOLUTION\n).*?(\n    # END SOLUTION)", lambda m: m.group(1) + SOLUTION + m.group(2),
                         code.source.replace("(x)", "(distances)"), flags=re.S)
    code.source = re.sub(r'""".*?"""', '"""Weights (same shape as distances) from distances (..., num_keys)."""',
                         code.source, count=1, flags=re.S)
    nbformat.write(nb, path)


def test_new_exercise_then_the_whole_authoring_loop(tmp_path):
    if not (ROOT / "attention_course" / "exercises" / "ch01").is_dir():
        pytest.skip("the one-package-per-chapter layout is not there yet")
    began = time.perf_counter()
    copy = _course_copy(tmp_path / "course")
    label = _next_label(1)
    module = copy / "attention_course" / "exercises" / "ch01" / f"ex{label[7:]}_demo_weights_from_distances.py"
    notebook = _notebook(copy, 1)
    before = _files(copy)

    steps = {"copy": time.perf_counter() - began}

    def lap(name):
        steps[name] = time.perf_counter() - began - sum(steps.values())

    done = _run(copy, "new-exercise", "1", "Weights from distances", "demo_weights_from_distances")
    assert done.returncode == 0, done.stderr
    lap("new-exercise")
    rel = notebook.relative_to(copy).as_posix()
    for step in (f"wrote {module.relative_to(copy).as_posix()}", f"attention-course execute {rel}",
                 "attention-course release --chapter 1", f"pytest tests -k {label}"):
        assert step in done.stdout, done.stdout
    after = _files(copy)
    changed = sorted(name for name in set(before) | set(after) if before.get(name) != after.get(name))
    assert changed == sorted([module.relative_to(copy).as_posix(), "attention_course/exercises/ch01/__init__.py",
                              rel]), changed
    ops = difflib.SequenceMatcher(None, before[rel].decode().splitlines(True),
                                  after[rel].decode().splitlines(True), autojunk=False).get_opcodes()
    assert all(op[0] in ("equal", "insert") for op in ops), "the notebook changed outside the new cells"

    # The author fills in the exercise, then runs the loop the command printed.
    _fill(copy, label, module)
    done = _run(copy, "execute", rel)
    assert done.returncode == 0, done.stdout + done.stderr
    lap("execute")
    executed = nbformat.read(notebook, as_version=4)
    check_cell = next(c for c in executed.cells if c.get("id") == f"{label}-check")
    printed = "".join(o.get("text", "") for o in check_cell.outputs)
    assert printed.count("\u2713") == 3 and "\u2717" not in printed, printed
    done = _run(copy, "release", "--chapter", "1")
    assert done.returncode == 0, done.stderr
    lap("release --chapter 1")
    assert f"wrote {EXERCISE_INDEX}" in done.stdout and "chapters/01_" in done.stdout, done.stdout
    # No row in kinds.csv yet: its kind shows as a dash (tests/test_exercise_kinds.py asks for the row).
    assert f"{{ref}}`{label} <{label}>` | Weights from distances | — | `demo_weights_from_distances` | 2 |" in \
        (copy / EXERCISE_INDEX).read_text(encoding="utf-8")

    # Three independent checks at once: the release is fresh, the check-strength tests
    # of the new label pass, and the solution notebook gets full marks from the grader.
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    shutil.copy2(notebook, submissions / "author.ipynb")
    grades = tmp_path / "grades"
    jobs = {
        "release --check": _command("release", "--check"),
        "pytest": [sys.executable, "-m", "pytest", "tests/test_exercises.py", "tests/test_exercise_layout.py",
                   "-k", label, "-p", "no:cacheprovider", "-v"],
        "grade": _command("grade", submissions, "--chapter", "1", "--out", grades, "--seed", "2024", "--jobs", "1"),
    }
    running = {name: subprocess.Popen(cmd, cwd=copy, env=_env(copy), stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True) for name, cmd in jobs.items()}
    out = {name: proc.communicate(timeout=300)[0] for name, proc in running.items()}
    status = {name: proc.returncode for name, proc in running.items()}
    lap("release --check, pytest and grade, side by side")
    assert status["release --check"] == 0, out["release --check"]
    assert status["pytest"] == 0, out["pytest"]
    passed = set(re.findall(r"::(\w+)\[([^\]]*)\] PASSED", out["pytest"]))
    for test, case in [("test_reference_passes_public_and_hidden_checks", label),
                       ("test_solution_notebook_cell_passes", label), ("test_untouched_stub_fails_every_check", label),
                       ("test_every_exercise_keeps_at_least_three_alternatives", label),
                       ("test_kept_mistake_is_caught_with_its_hint", f"{label}-distances not negated"),
                       ("test_kept_mistake_is_caught_with_its_hint", f"{label}-exponentials without a shift"),
                       ("test_kept_alternative_passes_every_check", f"{label}-exp and divide, shifted"),
                       ("test_kept_alternative_passes_every_check", f"{label}-log_softmax in float64"),
                       ("test_kept_alternative_passes_every_check", f"{label}-one query at a time"),
                       # the layout: its own module, the notebook's contract as its docstring, parts in order
                       ("test_each_exercise_has_its_own_module", label),
                       ("test_module_docstring_states_the_notebook_contract", label),
                       ("test_module_parts_come_in_the_fixed_order", label)]:
        assert (test, case) in passed, (test, case, out["pytest"])
    assert status["grade"] == 0, out["grade"]
    with open(grades / "grades.csv", newline="", encoding="utf-8") as f:
        (row,) = list(csv.DictReader(f))
    assert float(row[label]) == 2, row
    assert float(row["total"]) == float(row["max_total"]) > 2, row
    print(f"the authoring loop took {time.perf_counter() - began:.1f} s: "
          + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in steps.items()))


# ------------------------------------------------------------ refusals


@pytest.fixture(scope="module")
def refusing_copy(tmp_path_factory):
    """What the command reads (the solution notebooks, the exercise packages), with an
    author's draft where chapter 1's next module would go and chapter 2's notebook
    without its ``## Exercises`` heading."""
    copy = tmp_path_factory.mktemp("refusals")
    shutil.copytree(ROOT / "solutions", copy / "solutions")
    shutil.copytree(ROOT / "attention_course" / "exercises", copy / "attention_course" / "exercises",
                    ignore=shutil.ignore_patterns("__pycache__"))
    draft = copy / "attention_course" / "exercises" / "ch01" / f"ex{_next_label(1)[7:]}_demo_weights_from_distances.py"
    draft.write_text("# an author's draft\n", encoding="utf-8")
    chapter2 = _notebook(copy, 2)
    nb = nbformat.read(chapter2, as_version=4)
    heading = next(c for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## Exercises"))
    heading.source = heading.source.replace("## Exercises", "## Things to try", 1)
    nbformat.write(nb, chapter2)
    return copy


def _refusal_cases():
    other = all_exercises(3)[0]
    draft = f"ex{_next_label(1)[7:]}_demo_weights_from_distances.py"
    return {
        "unknown chapter": (["12", "T", "fresh_name"], ["unknown chapter 12", "solutions/12_*.ipynb"]),
        "not a chapter number": (["three", "T", "fresh_name"], ["unknown chapter 'three'"]),
        "not an identifier": (["1", "T", "2fast"], ["'2fast' is not a Python identifier"]),
        "a keyword": (["1", "T", "lambda"], ["'lambda' is not a Python identifier"]),
        "name taken in the chapter": (["1", "T", "attention_pool"], ["already defined by exercise ch01_ex1"]),
        "name taken in another chapter": (["1", "T", other.name], [f"already defined by exercise {other.label}"]),
        "module file exists": (["1", "Weights from distances", "demo_weights_from_distances"],
                               [f"ch01/{draft} exists", "never overwritten"]),
        "no Exercises heading": (["2", "T", "fresh_name"], ["solutions/02_", "no '## Exercises' heading"]),
    }


@pytest.mark.parametrize("case", list(_refusal_cases()) if (ROOT / "attention_course" / "exercises" / "ch01").is_dir()
                         else [], ids=str)
def test_each_refusal_exits_2_with_one_line_and_writes_nothing(case, refusing_copy, monkeypatch, capsys):
    """The command's entry point, in this process (whose package is the copy's twin)."""
    args, words = _refusal_cases()[case]
    from attention_course.tools import cli, scaffold
    monkeypatch.setattr(scaffold, "check_package_root", lambda root: None)
    before = _files(refusing_copy)
    status = cli.main(["new-exercise", *args, "--root", str(refusing_copy)])
    out = capsys.readouterr()
    assert status == 2 and out.out == "", (status, out)
    assert out.err.startswith("attention-course new-exercise: ") and out.err.count("\n") == 1, out.err
    for word in words:
        assert word in out.err, out.err
    assert _files(refusing_copy) == before


def test_another_copy_of_the_package_is_refused(refusing_copy):
    """Run elsewhere, the checkout's package is imported, not the course folder's: its
    registry would decide the label and the names of another copy of the course."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    before = _files(refusing_copy)
    result = subprocess.run(_command("new-exercise", "1", "T", "fresh_name", "--root", refusing_copy),
                            cwd=refusing_copy.parent, env=env, capture_output=True, text=True)
    assert result.returncode == 2 and result.stdout == "", result
    assert result.stderr.count("\n") == 1 and "the attention_course package imported is" in result.stderr
    assert f"PYTHONPATH={refusing_copy.resolve()}" in result.stderr
    assert _files(refusing_copy) == before


@pytest.mark.parametrize("kind", ["function", "class"])
def test_the_skeleton_imports_and_registers(kind, monkeypatch):
    """Rendered into a chapter package, the skeleton registers an exercise with two
    kept mistakes, three kept alternatives, a hidden check and the optional error check."""
    from attention_course.checks import registry
    monkeypatch.setattr(registry, "REGISTRY", dict(registry.REGISTRY))  # this session's registry stays as it is
    text = render_module("ch07_ex99", "A skeleton", "SkeletonThing", kind, 2, "TODO")
    namespace = {"__name__": "attention_course.exercises.ch07.ex99_skeleton_thing",
                 "__package__": "attention_course.exercises.ch07"}
    exec(compile(text, "ex99_skeleton_thing.py", "exec"), namespace)
    ex = registry.REGISTRY["ch07_ex99"]
    assert (ex.name, ex.kind, ex.points, ex.reference) == ("SkeletonThing", kind, 2, namespace["SkeletonThing"])
    assert len(ex.mistakes) == 2 and len(ex.alternatives) == 3
    assert [c.public for c in ex.checks] == [True, False, True] and ex.checks[2].weight == 0.5
    assert [len(c.make_calls(c.seed)) for c in ex.checks] == [1, 1, 2]
