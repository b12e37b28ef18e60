"""The layout of the exercise modules (issue 18): one module per exercise, parts in one order.

* every registered exercise ``chNN_exM`` lives in ``attention_course/exercises/chNN/exM_<name>.py``
  (``<name>`` the snake case of the name students define) and registers only itself;
* its docstring is the contract: ``chNN_exM: Title.`` then the statement of the solution
  notebook's ``{exercise}`` directive, word for word (whitespace aside), so that the module
  a newcomer opens says what the exercise asks;
* its parts come in one order: the reference, the inputs of the checks, the kept mistakes,
  the kept alternatives, the registration; every kept mistake and alternative is kept
  beside its code (``mistakes.keep`` / ``alternatives.keep`` / ``.add``), none inside the
  ``register`` call;
* no file under ``attention_course/exercises/`` is over 500 lines;
* no helper is defined twice: two top-level functions with the same code in two modules
  are a copy (kept mistakes and alternatives aside, which are whole answers on purpose).
"""
import ast
import json
import re
from pathlib import Path

import pytest

from attention_course.checks.registry import all_exercises
from attention_course.tools.scaffold import snake_case

ROOT = Path(__file__).resolve().parents[1]
EXERCISES_DIR = ROOT / "attention_course" / "exercises"
EXERCISES = all_exercises()
HEADERS = ["# The reference", "# Inputs of the public and hidden checks",
           "# Kept mistakes, each with its hint", "# Kept alternatives", "# Registration"]


def _snake(name: str) -> str:
    # the scaffold's naming, so that what new-exercise writes is where this test looks
    return snake_case(name)


def _module_path(exercise) -> Path:
    number = exercise.label.split("_ex")[1]
    return EXERCISES_DIR / f"ch{exercise.chapter:02d}" / f"ex{number}_{_snake(exercise.name)}.py"


def _statement(exercise) -> tuple:
    notebook = next((ROOT / "solutions").glob(f"{exercise.chapter:02d}_*.ipynb"))
    for cell in json.loads(notebook.read_text())["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and re.search(rf"^:label: {exercise.label}\s*$", text, re.M):
            m = re.search(r"```\{exercise\}[ \t]*([^\n]*)\n((?:[ \t]*:[\w-]+:[^\n]*\n)*)(.*?)\n```", text, re.S)
            return m.group(1).strip(), m.group(3)
    raise AssertionError(f"{notebook.name} states no exercise {exercise.label}")


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.label)
def test_each_exercise_has_its_own_module(exercise):
    path = _module_path(exercise)
    assert path.exists(), f"{exercise.label} ({exercise.name}) should live in {path.relative_to(ROOT)}"
    source = path.read_text()
    labels = set(re.findall(r'label="(ch\d\d_ex\d+)"', source))
    assert labels == {exercise.label}, f"{path.name} registers {sorted(labels)}, not just {exercise.label}"
    siblings = sorted(path.parent.glob(f"ex{exercise.label.split('_ex')[1]}_*.py"))
    assert siblings == [path], f"more than one module for {exercise.label}: {[p.name for p in siblings]}"


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.label)
def test_module_docstring_states_the_notebook_contract(exercise):
    path = _module_path(exercise)
    doc = ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""
    title, statement = _statement(exercise)
    first = f"{exercise.label}: {title.rstrip('.')}."
    assert doc.startswith(first), f"{path.name}'s docstring should start with '{first}'"
    assert _words(statement) in _words(doc), (
        f"{path.name}'s docstring no longer states the contract of the solution notebook's "
        f"{exercise.label}; paste the statement (the directive's body) into it:\n{statement}")


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.label)
def test_module_parts_come_in_the_fixed_order(exercise):
    source = _module_path(exercise).read_text()
    lines = source.splitlines()
    found = [next((i for i, line in enumerate(lines) if line.startswith(h)), None) for h in HEADERS]
    present = [(h, i) for h, i in zip(HEADERS, found) if i is not None]
    assert found[-1] is not None and found[2] is not None and found[3] is not None, \
        f"{exercise.label}: missing part headers {[h for h, i in zip(HEADERS, found) if i is None]}"
    assert [i for _, i in present] == sorted(i for _, i in present), \
        f"{exercise.label}: parts out of order: {[h for h, _ in sorted(present, key=lambda p: p[1])]}"
    tree = ast.parse(source)
    register = [n for n in tree.body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
                and getattr(n.value.func, "id", "") == "register"]
    assert len(register) == 1 and register[0].lineno > found[-1], f"{exercise.label}: one register call, last"
    keywords = {k.arg: k.value for k in register[0].value.args[0].keywords}
    for key in ("mistakes", "alternatives"):
        value = keywords.get(key)
        assert isinstance(value, ast.Call) and getattr(value.func, "id", "") == "list" \
            and getattr(value.args[0], "id", "") == key, \
            f"{exercise.label}: register(...) should take {key}=list({key}); keep each one beside its code"


def test_no_file_under_exercises_is_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in EXERCISES_DIR.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 500}
    assert not long, f"split these (one exercise per module, chapter helpers in _common.py): {long}"


def _kept_names(tree) -> set:
    """Names of the functions and classes kept as mistakes or alternatives (whole answers)."""
    kept = set()
    for node in tree.body:
        for deco in getattr(node, "decorator_list", []):
            if isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute) \
                    and getattr(deco.func.value, "id", "") in ("mistakes", "alternatives"):
                kept.add(node.name)
    return kept


def _normalised(node) -> str:
    """A function's code with its own name and docstring left out."""
    node = ast.parse(ast.unparse(node)).body[0]
    node.name = "_"
    if node.body and isinstance(node.body[0], ast.Expr) and isinstance(getattr(node.body[0], "value", None),
                                                                       ast.Constant):
        node.body = node.body[1:] or [ast.Pass()]
    return ast.dump(node)


def test_no_helper_is_defined_twice():
    seen, copies = {}, []
    for path in sorted(EXERCISES_DIR.rglob("*.py")):
        tree = ast.parse(path.read_text())
        kept = _kept_names(tree)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name not in kept and len(node.body) > 1:
                key = _normalised(node)
                where = f"{path.relative_to(EXERCISES_DIR)}:{node.lineno} {node.name}"
                if key in seen:
                    copies.append(f"{seen[key]} = {where}")
                else:
                    seen[key] = where
    assert not copies, "helpers defined twice (keep one copy: the exercise module, chNN/_common.py " \
                       f"or exercises/_kit.py): {copies}"


def test_the_layout_checks_can_fail(tmp_path):
    """The copy detector and the order check see what they should (a test that can fail)."""
    a = ast.parse("def _draw(seed):\n    g = gen(seed)\n    return g\n")
    b = ast.parse("def _other_name(seed):\n    '''doc'''\n    g = gen(seed)\n    return g\n")
    assert _normalised(a.body[0]) == _normalised(b.body[0])
    kept = ast.parse("@mistakes.keep('x', 'y')\ndef _wrong(seed):\n    return 1\n")
    assert _kept_names(kept) == {"_wrong"}
