"""What a release gives away without a line of any answer: the last columns of RELEASE.md.

:func:`attention_course.tools.student_release.exposure_report` searches every released file for
the lines of every answer. Two things give an answer away without any of its lines, and this
module finds them, for every released exercise:

* **another route** (:func:`shipped_routes`): a public check whose compare ships code of its own
  (``attention_course/public_checks/chNN_exM.py``) may ship a routine that computes the answer
  another way, with autograd or in float64 (ch03_ex5's Jacobian by autograd, once). The shipped
  source is scanned for the markers of :data:`MARKERS` (one row per marker, so a new one is a
  line of data): a routine that a compare calls is reported when it uses any marker, a compare
  itself only when it uses autograd (comparing in float64 is no answer). A compare is what a
  check's ``compare_N`` is bound to, the factory that makes it, or any function with the
  compare's own parameters (``got, want, calls``: a helper that compares, as ch03_ex5's does).
  Each routine reported is then run, in the full course, on the public inputs of every released
  exercise whose calls it accepts (:func:`answers_given`): the report says whose answer it
  gives, in that exercise's row too (when this was written, ch04_ex7's compare shipped the
  sinusoidal table in float64, which is ch04_ex3's answer).
* **shipped inputs** (:func:`fixed_checks`): a release stores the reference's outputs of every
  public check on its public inputs (``public_checks/checks.pt``). At grading every check runs at
  a hidden seed (:func:`attention_course.checks.plan.hidden_seed`); a public check whose
  ``make_calls`` gives the public inputs there too is graded on inputs whose outputs ship, and a
  notebook that looks them up earns its points. Found by calling ``make_calls``, never listed.
"""
from __future__ import annotations

import ast
import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

import torch

# (kind, pattern): a dotted name in the shipped source (a whole chain of attributes, imports
# resolved: ``jacobian`` imported from torch.autograd.functional reads
# torch.autograd.functional.jacobian; ``q.double`` stays as written, ``(a + b).double`` reads
# ``.double``) that matches the pattern marks the routine using it as computing by that route.
# A bare local name never matches the attribute patterns (a variable called ``grad`` is no route).
MARKERS = (
    ("autograd", r"^torch\.autograd(\.|$)"),
    ("autograd", r"^torch\.func(\.|$)"),
    ("autograd", r"^functorch(\.|$)"),
    ("autograd", r"\.(backward|requires_grad_|grad|jacobian|jacrev|jacfwd|hessian|vjp|jvp)$"),
    ("float64", r"^torch\.(float64|double)$"),
    ("float64", r"\.double$"),
)
# A compare itself is reported for these kinds only (it may compare in float64; it may not differentiate).
COMPARE_KINDS = ("autograd",)
# The grading seeds at which a public check must give other inputs than its public ones.
GRADING_SEEDS = (11, 2026)
COMPARE_PREFIX = "compare_"
COMPARE_PARAMETERS = ("got", "want", "calls")


@dataclass(frozen=True)
class Route:
    """A shipped routine that computes by another route: its name, the kinds of route
    (``autograd``, ``float64``), the dotted names that showed them, the exercise whose compare
    ships it (``shipped_with``) and the exercises whose answer it gives on their public inputs."""

    name: str
    kinds: tuple
    markers: tuple
    shipped_with: str = ""
    answers: tuple = ()

    def describe(self, label: str) -> str:
        """The route as RELEASE.md's row of ``label`` names it."""
        where = "" if label == self.shipped_with else f" of `public_checks/{self.shipped_with}.py`"
        text = f"`{self.name}`{where} ({', '.join(self.kinds)})"
        if label in self.answers:
            text += ": gives this answer on its public inputs"
        others = [other for other in self.answers if other != label]
        if others and label == self.shipped_with:
            text += f"{';' if label in self.answers else ':'} gives the answer of {', '.join(others)}"
        return text


def _imports(tree: ast.Module) -> dict:
    """Local name -> the dotted name it was imported as."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]   # import torch.nn binds torch
                names[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node, imports: dict):
    """``a.b.c`` for a chain of attributes on a name (the name resolved through the imports)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(imports.get(node.id, node.id))
    elif parts:
        parts.append("")  # an attribute of an expression: (x + y).double
    else:
        return None
    return ".".join(reversed(parts))


def _markers(node, imports: dict) -> dict:
    """kind -> the dotted names in ``node`` that match a marker of that kind."""
    found = {}
    inner = {id(sub.value) for sub in ast.walk(node) if isinstance(sub, ast.Attribute)}
    for sub in ast.walk(node):
        if isinstance(sub, (ast.Attribute, ast.Name)) and id(sub) not in inner:  # whole chains only
            name = _dotted(sub, imports)
            for kind, pattern in MARKERS:
                if name and re.search(pattern, name):
                    found.setdefault(kind, set()).add(name)
    return found


def scan_source(source: str) -> list:
    """The routes of one shipped compare module (its source): :class:`Route` for every top-level
    routine that uses a marker, a compare (bound to ``compare_N``, or the factory that makes it)
    only for the kinds of :data:`COMPARE_KINDS`. Names only: whether a routine gives the answer is
    :func:`gives_answer`'s business."""
    tree = ast.parse(source)
    imports = _imports(tree)
    compares = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id.startswith(COMPARE_PREFIX)
                                                for t in node.targets):
            value = node.value
            if isinstance(value, ast.Call):
                value = value.func
            if isinstance(value, ast.Name):
                compares.add(value.id)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                tuple(a.arg for a in node.args.args[:3]) == COMPARE_PARAMETERS:
            compares.add(node.name)
    routes = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        found = _markers(node, imports)
        if node.name in compares:
            found = {k: v for k, v in found.items() if k in COMPARE_KINDS}
        if found:
            kinds = tuple(kind for kind in dict.fromkeys(k for k, _ in MARKERS) if kind in found)
            routes.append(Route(node.name, kinds, tuple(sorted(set().union(*found.values())))))
    return routes


def shipped_routes(out: Path, labels) -> list:
    """The :class:`Route` s of the compare code shipped in the release ``out`` for ``labels`` (its
    released exercises), each with the answers it gives among them (:func:`answers_given`)."""
    from .student_build import PACKAGE
    result, calls = [], {}
    for label in labels:
        path = Path(out) / PACKAGE / "public_checks" / f"{label}.py"
        if path.is_file():
            for route in scan_source(path.read_text(encoding="utf-8")):
                answers = answers_given(_routine(label, route.name), labels, calls)
                result.append(dataclasses.replace(route, shipped_with=label, answers=tuple(answers)))
    return result


def _routine(label: str, name: str):
    """The full course's object that a compare of ``label`` ships as ``name`` (None if none)."""
    import inspect
    import sys
    from ..checks.registry import get_exercise
    exercise = get_exercise(label)
    homes = [vars(sys.modules[exercise.reference.__module__])]
    for check in exercise.public_checks:
        if check.compare is not None and hasattr(check.compare, "__globals__"):
            homes.append(check.compare.__globals__)
    for home in homes:
        found = home.get(name)
        if inspect.isfunction(found):
            return found
    return None


def _agrees(mine, theirs) -> bool:
    """Two plain outcome values that agree (tensors within rtol 1e-4, atol 1e-5, any float dtype)."""
    if isinstance(theirs, torch.Tensor):
        if not isinstance(mine, torch.Tensor) or mine.shape != theirs.shape:
            return False
        if theirs.is_floating_point() or theirs.is_complex():
            return mine.is_floating_point() and bool(torch.allclose(mine.double(), theirs.double(), rtol=1e-4,
                                                                    atol=1e-5))
        return bool(torch.equal(mine.to(theirs.dtype), theirs))
    if isinstance(theirs, dict):
        key = next((k for k in ("__seq__", "__list__") if k in theirs), None)
        return key is not None and isinstance(mine, dict) and key in mine and \
            len(mine[key]) == len(theirs[key]) and all(_agrees(a, b) for a, b in zip(mine[key], theirs[key]))
    return type(mine) is type(theirs) and mine == theirs


SIZE_LIMIT = 256  # a routine is not tried on a call with a larger whole number (a size): d ** 3 entries stay small


def _small(value) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return abs(value) <= SIZE_LIMIT
    if isinstance(value, torch.Tensor):
        return value.dim() > 0 or value.is_floating_point() or abs(int(value)) <= SIZE_LIMIT
    if isinstance(value, (list, tuple)):
        return all(_small(v) for v in value)
    if isinstance(value, dict):
        return all(_small(v) for v in value.values())
    return True


def _accepts(routine, call) -> bool:
    """Whether ``routine`` can be called like a function answer on ``call``, on small sizes only."""
    import inspect
    try:
        inspect.signature(routine).bind(*call.args, **call.kwargs)
    except (TypeError, ValueError):
        return False
    return call.init_args is None and _small(list(call.args)) and _small(dict(call.kwargs))


def gives_answer(routine, label: str, calls: dict = None) -> bool:
    """Whether ``routine``, called on the inputs of one of ``label``'s public checks (one it
    accepts), returns the reference's outputs on every call of that check. ``calls``: a cache of
    the public checks' calls by label."""
    from ..checks.calls import run_call
    from ..checks.registry import get_exercise
    exercise = get_exercise(label)
    if routine is None or exercise.kind != "function":
        return False
    if calls is None or label not in calls:
        found = [check.make_calls(check.seed) for check in exercise.public_checks]
        if calls is None:
            calls = {}
        calls[label] = found
    state = torch.random.get_rng_state()
    try:
        for check_calls in calls[label]:
            if not check_calls or not all(_accepts(routine, call) for call in check_calls):
                continue
            wanted = [run_call(exercise.reference, call) for call in check_calls]
            if any(w["status"] != "ok" for w in wanted):
                continue
            got = [run_call(routine, call) for call in check_calls]
            if all(g["status"] == "ok" and _agrees(g["value"], w["value"]) for g, w in zip(got, wanted)):
                return True
    finally:
        torch.random.set_rng_state(state)
    return False


def answers_given(routine, labels, calls: dict = None) -> list:
    """The exercises of ``labels`` whose answer ``routine`` gives on their public inputs."""
    calls = {} if calls is None else calls
    return [label for label in labels if gives_answer(routine, label, calls)]


def _same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def _same_calls(first: list, second: list) -> bool:
    return len(first) == len(second) and all(
        _same(getattr(x, f.name), getattr(y, f.name)) for x, y in zip(first, second) for f in dataclasses.fields(x))


def fixed_checks(exercise) -> list:
    """``[(index, name)]``: the public checks of ``exercise`` graded on their public inputs, whose
    outputs a release ships (``make_calls`` gives them again at a grading seed)."""
    from ..checks.plan import hidden_seed
    fixed = []
    state = torch.random.get_rng_state()
    try:
        for index, check in enumerate(exercise.checks):
            if not check.public:
                continue
            public = check.make_calls(check.seed)
            if any(_same_calls(check.make_calls(hidden_seed(seed, index)), public) for seed in GRADING_SEEDS):
                fixed.append((index, check.name))
    finally:
        torch.random.set_rng_state(state)
    return fixed


def add_exposure(rows: list, out: Path) -> list:
    """Add ``routes`` (:class:`Route` s) and ``fixed`` (:func:`fixed_checks`) to every released
    row of :func:`attention_course.tools.student_release.exposure_report` (empty for the rest)."""
    from ..checks.registry import get_exercise
    released = [row["label"] for row in rows if row["status"] != "not released"]
    routes = shipped_routes(out, released)
    for row in rows:
        row["routes"] = [r for r in routes if row["label"] in (r.shipped_with,) + r.answers]
        row["fixed"] = fixed_checks(get_exercise(row["label"])) if row["label"] in released else []
    return rows


# RELEASE.md: the prose above the table, the two columns' headings and their cells.
PROSE = [
    "Two more columns say what a release gives away without a line of the answer. **Computed by",
    "another route**: a routine that a public check's compare ships (in",
    "`attention_course/public_checks/`) and that computes with autograd or in float64; where it",
    "returns the course's outputs on the exercise's public inputs, it *is* an answer, and a student",
    "who pastes it earns the points of the checks. **Graded on shipped inputs**: public checks whose",
    "inputs are the same at grading as in this release, whose outputs `public_checks/checks.pt`",
    "stores, so a notebook that looks them up passes them.",
    "",
]
HEADINGS = ("computed by another route", "graded on shipped inputs")


def cells(row: dict) -> tuple:
    """The two cells of ``row`` in RELEASE.md's table."""
    if row["status"] == "not released":
        return "-", "-"
    routes = "; ".join(route.describe(row["label"]) for route in row.get("routes", [])) or "none"
    fixed = "; ".join(f"#{index} {name!r}" for index, name in row.get("fixed", [])) or "none"
    return routes, fixed
