"""The stored public checks of a student build (:mod:`attention_course.tools.student_build`).

:func:`build_store` computes, for every exercise of the released chapters, its **public**
checks as stored data (``public_checks/checks.pt``, plain tensors and strings loaded with
``weights_only=True``): the calls, the reference's outcomes on them and every kept mistake's
outcomes, so the hints still name the mistake an answer behaves like. A check with a compare
of its own (a property test, a tolerance on a recomputed quantity) ships that compare's code,
extracted with what it uses (:class:`_CodeCollector`), never the reference or a mistake.

The student build's error (:class:`StudentBuildError`) and the rule of what never ships
(:func:`never_shipped`) live here, below the student build that re-exports them, so that
neither module imports the other.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import sys
import textwrap
import types
from typing import Optional

import torch

from ..rooms import room_of

PACKAGE = __name__.split(".")[0]
STORE_NAME = "checks.pt"


class StudentBuildError(ValueError):
    """A release that cannot be made as asked (its message says why and what to do).
    ``labels``: the exercises that would have to be practice for it to be made."""

    def __init__(self, message: str, labels=()):
        super().__init__(message)
        self.labels = list(labels)


def never_shipped(name: str) -> bool:
    """The exercises and the instructor's tools never ship, whatever imports them."""
    return room_of(name) in ("exercises", "tools")


class _CodeCollector:
    """The source a shipped compare needs: its own, and that of every helper it uses."""

    def __init__(self, forbidden: dict, home: dict):
        self.home = home                 # the globals of the module whose names are being resolved
        self.forbidden = forbidden       # id(object) -> what it is ("the reference of ch03_ex1")
        self.definitions: dict = {}      # name -> source
        self.imports: dict = {}          # name -> import line
        self.constants: dict = {}        # name -> source of a literal
        self.aliases: dict = {}          # name -> "name = other" (after the definitions)
        self.products: dict = {}         # name -> "name = factory(...)" (last)
        self.modules_needed: set = set()

    def add_object(self, obj, name: str) -> None:
        if id(obj) in self.forbidden:
            raise StudentBuildError(f"a public check's compare uses {name}, {self.forbidden[id(obj)]}: "
                                    "move what the compare needs out of it")
        if any(name in d for d in (self.definitions, self.imports, self.constants, self.aliases, self.products)):
            return
        if inspect.isfunction(obj) and "<locals>" in obj.__qualname__:
            self._product(obj, name)
            return
        module = getattr(obj, "__module__", None) or ""
        if isinstance(obj, types.ModuleType):
            full = obj.__name__
            if full.startswith(f"{PACKAGE}."):
                self._package_module(full[len(PACKAGE) + 1:])
            self.imports[name] = f"import {full}" if full == name else f"import {full} as {name}"
            return
        if isinstance(obj, (bool, int, float, str, type(None))) or (
                isinstance(obj, tuple) and all(isinstance(x, (bool, int, float, str, type(None))) for x in obj)):
            self.constants[name] = f"{name} = {obj!r}"
            return
        from ..checks.registry import Check
        if isinstance(obj, Check):  # a compare's own settings (tolerances, words to mention)
            if obj.compare is not None or callable(obj.must_mention):
                raise StudentBuildError(f"a public check's compare uses the Check {name} with code of its own")
            self.imports.setdefault("Check", f"from {PACKAGE}.checks.registry import Check")
            self.constants[name] = (f"{name} = Check({obj.name!r}, lambda seed: [], {obj.hint!r}, seed={obj.seed!r}, "
                                    f"rtol={obj.rtol!r}, atol={obj.atol!r}, must_mention={obj.must_mention!r}, "
                                    f"public={obj.public!r}, weight={obj.weight!r})")
            return
        if isinstance(obj, torch.dtype):
            self.constants[name] = f"{name} = {obj}"
            self.imports.setdefault("torch", "import torch")
            return
        if module.startswith(f"{PACKAGE}.exercises"):
            if not (inspect.isfunction(obj) or inspect.isclass(obj)):
                raise StudentBuildError(f"a public check's compare uses {name}, a {type(obj).__name__} "
                                        f"of {module}, which a student build cannot ship as code")
            if obj.__name__ != name:
                self.add_object(obj, obj.__name__)
                self.aliases[name] = f"{name} = {obj.__name__}"
                return
            self.definitions[name] = None  # reserve against recursion
            self.definitions[name] = _absolute_source(obj)
            self._dependencies(obj)
            return
        if module.startswith(f"{PACKAGE}.") or module == PACKAGE:
            short = module[len(PACKAGE) + 1:] if "." in module else None
            if short:
                self._package_module(short)
            attr = getattr(obj, "__name__", name)
            self.imports[name] = f"from {module} import {attr}" + ("" if attr == name else f" as {name}")
            return
        attr = getattr(obj, "__name__", None)
        if module and attr:  # torch, math, typing ...
            self.imports[name] = f"from {module} import {attr}" + ("" if attr == name else f" as {name}")
            return
        raise StudentBuildError(f"a public check's compare uses {name} ({type(obj).__name__}), "
                                "which a student build cannot ship")

    def _package_module(self, short: str) -> None:
        if never_shipped(short):
            raise StudentBuildError(f"a public check's compare imports {PACKAGE}.{short}, which a student "
                                    "build never ships")
        self.modules_needed.add(short)

    def _dependencies(self, obj) -> None:
        functions = [obj] if inspect.isfunction(obj) else [
            v for v in vars(obj).values() if inspect.isfunction(v)]
        for function in functions:
            # co_names holds attribute names too (torch.isnan's isnan): only globals matter.
            outer, self.home = self.home, function.__globals__
            try:
                for name in sorted(_code_names(function.__code__)):
                    if name in function.__globals__ and not (name.startswith("__") and name.endswith("__")):
                        self.add_object(function.__globals__[name], name)
            finally:
                self.home = outer

    def add_compare(self, compare, name: str) -> str:
        """Source that binds ``name`` to ``compare``; returns that name."""
        if "<locals>" in compare.__qualname__:
            self._product(compare, name)
            return name
        self.add_object(compare, compare.__name__)
        if compare.__name__ != name:
            self.products[name] = f"{name} = {compare.__name__}"
        return name

    def _product(self, function, name: str) -> None:
        """``name = factory(...)`` for a closure made by a module-level factory."""
        if id(function) in self.forbidden:
            raise StudentBuildError(f"a public check's compare uses {self.forbidden[id(function)]}")
        factory_name = function.__qualname__.split(".<locals>")[0]
        factory = function.__globals__.get(factory_name)
        if factory is None or not inspect.isfunction(factory):
            raise StudentBuildError(f"cannot ship {function.__qualname__}: its factory is not a module-level "
                                    "function")
        self.add_object(factory, factory_name)
        self.products[name] = None  # reserve against recursion
        assigned = _module_assignment(function, self.home)
        if assigned is not None:
            # Made at module level: ship that very expression (it may pass what no closure keeps).
            expression = ast.parse(assigned[1], mode="eval")
            for node_name in sorted({n.id for n in ast.walk(expression) if isinstance(n, ast.Name)}):
                if node_name in self.home and node_name != name:
                    self.add_object(self.home[node_name], node_name)
            self.products[name] = f"{name} = {assigned[1]}"
            return
        values = dict(zip(function.__code__.co_freevars, (c.cell_contents for c in function.__closure__ or ())))
        params = [p for p in inspect.signature(factory).parameters if p in values]
        args = ", ".join(f"{p}={self._argument(values[p])}" for p in params)
        self.products[name] = f"{name} = {factory_name}({args})"

    def _argument(self, value) -> str:
        """A factory's argument as source: a literal, a helper by name, or a lambda's own text."""
        if inspect.isfunction(value):
            if id(value) in self.forbidden:
                raise StudentBuildError(f"a public check's compare is made with {self.forbidden[id(value)]}")
            if value.__name__ == "<lambda>":
                self._dependencies(value)
                return _lambda_source(value)
            self.add_object(value, value.__name__)
            return value.__name__
        if isinstance(value, (tuple, list)):
            inner = ", ".join(self._argument(v) for v in value)
            if isinstance(value, list):
                return f"[{inner}]"
            return "()" if not value else f"({inner},)"
        if isinstance(value, dict) and all(isinstance(k, (int, str)) for k in value):
            return "{" + ", ".join(f"{k!r}: {self._argument(v)}" for k, v in value.items()) + "}"
        if isinstance(value, (bool, int, float, str, type(None))):
            return repr(value)
        raise StudentBuildError(f"a public check's compare is made with a {type(value).__name__}, "
                                "which a student build cannot ship as source")

    def source(self, header: str) -> str:
        parts = [header, "from __future__ import annotations", ""]
        parts += sorted(set(self.imports.values())) + [""]
        parts += list(self.constants.values()) + [""]
        parts += [s for s in self.definitions.values() if s]
        parts += list(self.aliases.values()) + [""] + [s for s in self.products.values() if s]
        return "\n".join(parts) + "\n"


def _code_names(code) -> set:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _module_assignment(function, home: dict) -> Optional[tuple]:
    """``(global name, expression source)`` when the module whose globals are ``home`` binds
    ``function`` by a top-level assignment ``name = expression``; else None."""
    import sys
    names = [k for k, v in home.items() if v is function and not k.startswith("__")]
    module = sys.modules.get(home.get("__name__", ""))
    if not names or module is None:
        return None
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in names:
            return node.targets[0].id, ast.unparse(node.value)
    return None


def _lambda_source(function) -> str:
    """The source of a lambda, found in its module by line and column."""
    module = inspect.getmodule(function)
    tree = ast.parse(inspect.getsource(module))
    line = function.__code__.co_firstlineno
    lambdas = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda) and n.lineno == line]
    if len(lambdas) > 1:  # several on one line: the one whose compiled body is this one's
        def body(node):
            code = compile(ast.Expression(node), "<lambda>", "eval").co_consts
            inner = next(c for c in code if isinstance(c, types.CodeType))
            return inner.co_code, inner.co_names, inner.co_consts[1:]
        wanted = (function.__code__.co_code, function.__code__.co_names, function.__code__.co_consts[1:])
        lambdas = [n for n in lambdas if body(n) == wanted][:1]
    if len(lambdas) != 1:
        raise StudentBuildError(f"cannot find the source of a lambda at {module.__name__}:{line}")
    return ast.unparse(lambdas[0])


def _absolute_source(obj) -> str:
    """``obj``'s source, dedented, with relative imports made absolute."""
    source = textwrap.dedent(inspect.getsource(obj))
    package = obj.__module__.rsplit(".", 1)[0]
    tree = ast.parse(source)

    class Absolute(ast.NodeTransformer):
        def visit_ImportFrom(self, node):
            if node.level:
                import importlib.util
                target = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
                if target.startswith(f"{PACKAGE}.exercises"):
                    raise StudentBuildError(f"{obj.__module__}.{obj.__name__} imports {target} inside a "
                                            "function: a student build cannot ship it")
                return ast.copy_location(ast.ImportFrom(module=target, names=node.names, level=0), node)
            return node
    tree = Absolute().visit(tree)
    return ast.unparse(tree) + "\n"


def build_store(labels: list) -> tuple:
    """``(data, code)``: the stored public checks of ``labels`` and the compare code they ship."""
    from ..checks.checking import outcomes_for
    from ..checks.registry import get_exercise
    data, code, modules = {}, {}, set()
    for label in labels:
        exercise = get_exercise(label)
        forbidden = {id(exercise.reference): f"the reference of {label}"}
        forbidden.update({id(m.impl): f"the kept mistake {m.name!r} of {label}" for m in exercise.mistakes})
        forbidden.update({id(a.impl): f"the kept alternative {a.name!r} of {label}" for a in exercise.alternatives})
        collector = _CodeCollector(forbidden, vars(sys.modules[exercise.reference.__module__]))
        checks, calls_of = [], {}
        for index, check in enumerate(exercise.public_checks):
            calls = calls_of[check.name] = check.make_calls(check.seed)
            outcomes = outcomes_for(exercise.reference, calls, exercise.kind)
            mention = [list(check.must_mention(c)) for c in calls] if callable(check.must_mention) \
                else [list(check.must_mention) for _ in calls]
            compare_name = None
            if check.compare is not None:
                compare_name = collector.add_compare(check.compare, f"compare_{index}")
            checks.append({"name": check.name, "hint": check.hint, "seed": check.seed, "rtol": check.rtol,
                           "atol": check.atol, "weight": check.weight, "must_mention": mention,
                           "calls": [dataclasses.asdict(c) for c in calls], "outcomes": outcomes,
                           "compare": compare_name})
        mistakes = [{"name": mistake.name, "hint": mistake.hint,
                     "outcomes": {name: outcomes_for(mistake.impl, calls, exercise.kind)
                                  for name, calls in calls_of.items()}}
                    for mistake in exercise.mistakes]
        data[label] = {"title": exercise.title, "name": exercise.name, "kind": exercise.kind,
                       "points": exercise.points, "input_names": _input_names(exercise),
                       "checks": checks, "mistakes": mistakes}
        if collector.products:
            code[label] = collector.source(f'"""Public-check compares of {label}, shipped by a student build '
                                           '(no reference, no hidden check)."""')
        modules |= collector.modules_needed
    return data, code, modules


def _input_names(exercise):
    def names(target):
        try:
            return [n for n in inspect.signature(target).parameters if n != "self"]
        except (TypeError, ValueError):
            return []
    if exercise.kind == "class":
        ref = exercise.reference
        return {attr: names(getattr(ref, attr)) for attr in dir(ref)
                if not attr.startswith("_") or attr == "forward"
                if inspect.isfunction(getattr(ref, attr, None))} | {"forward": names(getattr(ref, "forward", ref))}
    return names(exercise.reference)


PUBLIC_CHECKS_INIT = '''"""The public checks of this release, as stored data (a student build of the course package).

``checks.pt`` holds, for every exercise of the released chapters, each public check's calls,
the reference's outcomes on them (computed when the release was made) and each kept mistake's
outcomes, so that a check's hint names the mistake an answer behaves like. It is loaded with
``weights_only=True``: plain tensors, numbers and strings. The references, the hidden checks
and the kept mistakes' code are not part of this release; they stay with the instructor.
"""
from __future__ import annotations

import importlib
from pathlib import Path

import torch

from ..checks.registry import exercises_from_store, register


def _register_all():
    data = torch.load(Path(__file__).with_name({store!r}), weights_only=True)
    for exercise in exercises_from_store(data, lambda label: importlib.import_module(f"{{__name__}}.{{label}}")):
        register(exercise)


_register_all()
'''
