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


# ---------------------------------------------------------------- calls of withheld pieces, recorded

CALLS_NAME = "withheld_calls.pt"
JACOBIAN_LIMIT = 10 ** 6  # entries of one Jacobian: larger ones are not recorded (no gradient replayed)


class _Unstorable(Exception):
    pass


def _storable(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (bool, int, float, str, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return [_storable(v) for v in value]
    raise _Unstorable(type(value).__name__)


def _outputs(result):
    if isinstance(result, torch.Tensor):
        return [result.detach().clone()], False
    if isinstance(result, tuple) and result and all(isinstance(t, torch.Tensor) for t in result):
        return [t.detach().clone() for t in result], True
    raise _Unstorable(type(result).__name__)


def _module_spec(module) -> Optional[list]:
    """``[(name, torch.nn class name, options)]`` of a module built only of torch's own layers."""
    spec = []
    for name, child in module.named_children():
        kind = type(child).__name__
        if not type(child).__module__.startswith("torch.nn.") or getattr(torch.nn, kind, None) is not type(child) \
                or list(child.children()):
            return None
        options = {}
        for parameter in inspect.signature(type(child).__init__).parameters:
            if parameter in ("self", "device", "dtype") or not hasattr(child, parameter):
                continue
            value = getattr(child, parameter)
            if parameter == "bias" and (value is None or isinstance(value, torch.Tensor)):
                value = value is not None
            if not isinstance(value, (bool, int, float, str, tuple, type(None))):
                return None
            options[parameter] = value
        spec.append((name, kind, options))
    return spec


def _plain_attributes(module) -> dict:
    """A module's plain settings (``head_dim``, ``num_heads``: numbers and words set by its
    constructor), which a worked example may read from a replayed module; no tensor, no code."""
    return {name: value for name, value in vars(module).items()
            if not name.startswith("_") and name != "training"
            and isinstance(value, (bool, int, float, str, type(None)))}


class _Recorder:
    """Patches the withheld pieces of the full package so that their calls are recorded."""

    def __init__(self, pieces):
        import importlib
        self.pieces = [p for p in pieces if p.delegates]
        self.calls = {f"{PACKAGE}.{p.module}.{p.attr}": {"check": [], "example": []} for p in self.pieces}
        self.phase, self.label, self.depth = None, None, 0
        self.originals = [(importlib.import_module(f"{PACKAGE}.{p.module}"), p) for p in self.pieces]

    def __enter__(self):
        for module, piece in self.originals:
            original = getattr(module, piece.attr)
            setattr(module, piece.attr, (self._class if piece.is_class else self._function)(piece, original))
        return self

    def __exit__(self, *exc):
        for module, piece in self.originals:
            setattr(module, piece.attr, getattr(module, piece.attr).__wrapped__)

    def _wanted(self, piece) -> bool:
        return self.depth == 0 and self.phase is not None and piece.label != self.label and \
            (self.phase == "example" or not piece.is_class)

    def _record_raise(self, piece, args, kwargs, error, rng) -> None:
        """A worked example that shows the piece refusing its input (a ``ValueError`` it prints):
        the error's type and words, so the stand-in raises them too (built-in types only)."""
        if type(error).__module__ != "builtins" or not isinstance(error, Exception):
            return
        try:
            entry = {"args": _storable(list(args)), "kwargs": {k: _storable(v) for k, v in kwargs.items()},
                     "out": [], "tuple": False, "jac": {}, "raises": [type(error).__name__, str(error)]}
        except _Unstorable:
            return
        entry.update(rng=rng, rng_after=torch.get_rng_state())
        self.calls[f"{PACKAGE}.{piece.module}.{piece.attr}"][self.phase].append(entry)

    def _function(self, piece, original):
        def recording(*args, **kwargs):
            wanted = self._wanted(piece)
            # A worked example's call also keeps torch's random state before and after it, so that
            # a replay on the recorded path leaves the state as the piece itself would have.
            rng = torch.get_rng_state() if wanted and self.phase == "example" else None
            self.depth += 1
            try:
                result = original(*args, **kwargs)
            except Exception as error:
                if rng is not None:
                    self._record_raise(piece, args, kwargs, error, rng)
                raise
            finally:
                self.depth -= 1
            after = torch.get_rng_state() if rng is not None else None
            if wanted:
                self.depth += 1
                try:
                    entry = self._entry(original, args, kwargs, result)
                    if rng is not None:
                        entry.update(rng=rng, rng_after=after)
                    self.calls[f"{PACKAGE}.{piece.module}.{piece.attr}"][self.phase].append(entry)
                except _Unstorable:
                    pass
                finally:
                    self.depth -= 1
            return result
        recording.__wrapped__ = original
        return recording

    @staticmethod
    def _entry(original, args, kwargs, result, jacobians=True) -> dict:
        out, is_tuple = _outputs(result)
        entry = {"args": _storable(list(args)), "kwargs": {k: _storable(v) for k, v in kwargs.items()},
                 "out": out, "tuple": is_tuple, "jac": {}}
        places = [(f"a:{i}", v) for i, v in enumerate(args)] + [(f"k:{k}", v) for k, v in kwargs.items()]
        for key, value in places if jacobians else ():
            if not (isinstance(value, torch.Tensor) and value.requires_grad and value.is_floating_point()):
                continue
            if value.numel() * sum(t.numel() for t in out) > JACOBIAN_LIMIT:
                continue

            def of(x, key=key):
                a = [x if f"a:{i}" == key else v for i, v in enumerate(args)]
                k = {n: x if f"k:{n}" == key else v for n, v in kwargs.items()}
                return original(*a, **k)
            with torch.enable_grad():
                jac = torch.autograd.functional.jacobian(of, value.detach().clone())
            jac = list(jac) if is_tuple else [jac]
            entry["jac"][key] = [torch.nan_to_num(j.reshape(o.numel(), value.numel())) for j, o in zip(jac, out)]
        return entry

    def _class(self, piece, original):
        recorder = self

        def building(*args, **kwargs):
            wanted = self._wanted(piece)
            rng = torch.get_rng_state() if wanted else None
            try:
                instance = original(*args, **kwargs)
            except Exception as error:
                if wanted:
                    self._record_raise(piece, args, kwargs, error, rng)
                raise
            after = torch.get_rng_state() if wanted else None
            spec = _module_spec(instance) if wanted else None
            if spec is None:
                return instance
            try:
                entry = {"args": _storable(list(args)), "kwargs": {k: _storable(v) for k, v in kwargs.items()},
                         "children": spec, "state": {k: v.detach().clone() for k, v in instance.state_dict().items()},
                         "attrs": _plain_attributes(instance), "rng": rng, "rng_after": after, "forward": []}
            except _Unstorable:
                return instance
            recorder.calls[f"{PACKAGE}.{piece.module}.{piece.attr}"]["example"].append(entry)
            forward = instance.forward

            def recording_forward(*a, **k):
                result = forward(*a, **k)
                try:
                    call = recorder._entry(forward, a, k, result, jacobians=False)
                    call["state"] = {n: v.detach().clone() for n, v in instance.state_dict().items()}
                    entry["forward"].append(call)
                except _Unstorable:
                    pass
                return result
            instance.forward = recording_forward
            return instance
        building.__wrapped__ = original
        return building


def _run_examples(cells: list) -> None:
    """Run a chapter's worked examples (code cells, in order) as a notebook would, quietly."""
    import contextlib
    import io
    import random
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    options = torch._tensor_str.PRINT_OPTS
    saved = (torch.get_rng_state(), random.getstate(),
             {k: getattr(options, k) for k in ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")})
    show = plt.show
    plt.show = lambda *a, **k: None
    namespace = {"__name__": "__main__"}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            for index, source in cells:
                code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
                try:
                    exec(compile(code, f"<worked example, cell {index}>", "exec"), namespace)  # noqa: S102
                except Exception as error:  # noqa: BLE001
                    raise StudentBuildError(f"a worked example (cell {index}) failed while its results were "
                                            f"recorded for the release: {type(error).__name__}: {error}") from error
    finally:
        plt.show = show
        plt.close("all")
        torch.set_rng_state(saved[0])
        random.setstate(saved[1])
        for key, value in saved[2].items():
            setattr(options, key, value)


def record_withheld_calls(pieces: list, labels: list, examples: dict) -> dict:
    """The calls of the withheld pieces that the release replays (:mod:`attention_course.withheld`):
    ``{where: {"check": [...], "example": [...]}}``.

    ``check``: calls made by the public checks of the released exercises other than the piece's
    own, run on the reference and every kept mistake, so that a student's answer that behaves
    like one of them meets the course's result there. ``example``: calls made by the worked
    examples ``examples`` (``{chapter: [(cell index, source)]}``), run on the full package.
    """
    from ..checks.plan import outcomes_for
    from ..checks.registry import get_exercise
    from ..withheld import _find
    recorder = _Recorder(pieces)
    if not recorder.pieces:
        return {}
    with recorder:
        recorder.phase = "check"
        # Only a piece's own chapter may use it (student_build.uses_of_withheld refuses the rest).
        chapters = {get_exercise(p.label).chapter for p in recorder.pieces if not p.is_class}
        for label in labels:
            exercise = get_exercise(label)
            if exercise.chapter not in chapters:
                continue
            recorder.label = label
            for check in exercise.public_checks:
                calls = check.make_calls(check.seed)
                for impl in [exercise.reference] + [m.impl for m in exercise.mistakes]:
                    outcomes_for(impl, calls, exercise.kind)
        recorder.phase, recorder.label = "example", None
        for chapter in sorted(examples):
            _run_examples(examples[chapter])
    # Never the piece's own exercise's inputs: its answer cannot be had from the release.
    for piece in recorder.pieces:
        entries = recorder.calls[f"{PACKAGE}.{piece.module}.{piece.attr}"]
        for check in get_exercise(piece.label).public_checks:
            for call in check.make_calls(check.seed):
                for phase in ("check", "example"):
                    while (hit := _find(entries[phase], list(call.args), dict(call.kwargs))) is not None:
                        entries[phase] = [e for e in entries[phase] if e is not hit]
    return {where: entries for where, entries in recorder.calls.items() if entries["check"] or entries["example"]}
