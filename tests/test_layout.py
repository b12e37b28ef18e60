"""The package's layout: three rooms, one rule of what may import what (attention_course.rooms).

One test per promise of the layout:

* every import of every module (at its top or inside a function) obeys ``rooms.MAY_IMPORT``:
  the library imports only the library, the check engine the library and itself, the exercises
  those and themselves, the instructor's tools anything;
* no two modules import each other, directly or round a longer loop (no import circle);
* no module outside ``exercises/`` is over 600 lines;
* ``check()`` in a student's process loads no module of the instructor's tools or the grader;
* what a grading child may import and what a student build ships come from the same rule.
"""
from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from attention_course import rooms

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = ROOT / "attention_course"
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def _is_module(name: str) -> bool:
    return name in MODULES


def imports_of(name: str) -> set:
    """The package modules that module ``name`` imports anywhere in its code (a sub-package's
    ``__init__`` when a name is taken from the package itself)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = (importlib.util.resolve_name("." * node.level + (node.module or ""), package)
                    if node.level else (node.module or ""))
            if base.split(".")[0] != rooms.PACKAGE:
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.add(full if _is_module(full) else base)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == rooms.PACKAGE:
                    # import a.b.c imports a, a.b and a.b.c
                    out |= {".".join(parts[:k]) for k in range(2, len(parts) + 1) if _is_module(".".join(parts[:k]))}
    out.discard(name)
    return {m for m in out if _is_module(m)}


GRAPH = {name: imports_of(name) for name in MODULES}


def test_the_rule_names_every_room():
    assert set(rooms.MAY_IMPORT) == set(rooms.ROOMS)
    found = {rooms.room_of(name) for name in MODULES}
    assert found == set(rooms.ROOMS) | {"face"}, found
    for name in rooms.LIBRARY + rooms.LIBRARY_SUPPORT:
        assert f"{rooms.PACKAGE}.{name}" in MODULES, f"rooms names {name}, which is not a module"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_import_obeys_the_rule(name):
    wrong = sorted(m for m in GRAPH[name] if not rooms.may_import(name, m))
    assert not wrong, (f"{name} (room {rooms.room_of(name)}) imports {', '.join(wrong)} "
                       f"(room {', '.join(sorted({rooms.room_of(m) for m in wrong}))}); attention_course.rooms "
                       f"allows the {rooms.room_of(name)} to import only: {sorted(rooms.MAY_IMPORT.get(rooms.room_of(name), rooms.FACE_MAY_IMPORT))}")


def test_the_rule_can_fail():
    """The rule refuses what the layout forbids (so the test above can fail)."""
    assert not rooms.may_import("attention_course.functional", "attention_course.checks.registry")
    assert not rooms.may_import("attention_course.checks.answers", "attention_course.tools.grading.runtime")
    assert not rooms.may_import("attention_course.checks.registry", "attention_course.exercises")
    assert not rooms.may_import("attention_course.exercises.ch03", "attention_course.tools.release")
    assert rooms.may_import("attention_course.tools.cli", "attention_course.exercises")
    assert rooms.may_import("attention_course.checks.checking", "attention_course.functional")
    # imports_of sees imports inside functions too
    assert "attention_course.checks.registry" in GRAPH["attention_course.tools.course_config"]


def _circles(graph: dict) -> list:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle():
    assert _circles(GRAPH) == []


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("name", sorted(n for n in MODULES if rooms.room_of(n) != "exercises"))
def test_no_module_outside_the_exercises_is_over_600_lines(name):
    lines = len(MODULES[name].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{MODULES[name].relative_to(ROOT)} has {lines} lines; split it by concern"


def test_check_in_a_students_process_loads_no_tool():
    code = ("import sys\n"
            "from attention_course import check\n"
            "def masked_softmax(scores, valid_lens):\n"
            "    raise NotImplementedError\n"
            "check('ch03_ex1', masked_softmax)\n"
            "loaded = sorted(m for m in sys.modules if m.startswith('attention_course'))\n"
            "print('LOADED', ' '.join(loaded))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "ch03_ex1" in done.stdout  # the check ran and printed its lines
    loaded = next(line for line in done.stdout.splitlines() if line.startswith("LOADED")).split()[1:]
    assert "attention_course.checks.checking" in loaded and "attention_course.exercises.ch03" in loaded
    tools = [m for m in loaded if rooms.room_of(m) == "tools"]
    assert tools == [], f"check() loaded the instructor's tools: {tools}"


def test_a_grading_child_imports_only_what_the_rule_ships_it():
    """Every module a child may import imports only such modules (so the runtime is closed), and
    none of them is the check engine's registry, checks or references."""
    child = {f"{rooms.PACKAGE}.{m}" for m in rooms.CHILD_MODULES}
    for name in child:
        outside = GRAPH[name] - child - {f"{rooms.PACKAGE}.checks"}
        assert not outside, f"{name}, which a grading child imports, imports {sorted(outside)}"
    assert not any(rooms.room_of(m) in ("exercises", "tools") for m in child)
    assert {m for m in child if rooms.room_of(m) == "checks"} == {f"{rooms.PACKAGE}.{m}" for m in rooms.CHILD_CHECKS}


def test_the_grading_runtime_and_the_student_build_follow_the_rule():
    from attention_course.tools.grading.runtime import ON_DEMAND_MODULES, RUNTIME_MODULES
    from attention_course.tools import student_build
    assert sorted(RUNTIME_MODULES + ON_DEMAND_MODULES) == sorted(rooms.CHILD_MODULES)
    for name in student_build.BASE_MODULES + student_build.LIBRARY_MODULES:
        assert rooms.room_of(name) in ("library", "checks", "face") or name == "__init__", name
        assert not student_build.never_shipped(name)
    checks = {f"checks.{p.stem}" for p in (PACKAGE_DIR / "checks").glob("*.py") if p.stem != "__init__"}
    assert checks <= set(student_build.BASE_MODULES)
    for room_module in ("tools.cli", "tools.grading.grader", "exercises", "exercises._kit"):
        assert student_build.never_shipped(room_module)
