"""Synthetic submissions made from the exercises' own kept mistakes (tests and bench/grading.py).

A kept mistake lives in its exercise module beside the helpers it calls (``_validate_pool``,
``shape_of``, ``F_att``...), which a grading child cannot import. :func:`mistake_source`
turns one into the text of an exercise cell that stands alone: the mistake's own source
(its ``@mistakes.keep`` decorator dropped), preceded by every course helper it reaches,
then ``<exercise name> = <the mistake>``. Pasted into a notebook, it behaves like the
mistake on every call, so a class built from such notebooks has known misconceptions.

Trusted code only: it reads the course's own modules, never a submission.
"""
from __future__ import annotations

import ast
import dis
import inspect
import textwrap
import types
from typing import Optional

_PLAIN = (int, float, str, bool, type(None))


def _code_names(code: types.CodeType) -> set:
    """The global names ``code`` (and the functions and comprehensions inside it) reads; not
    ``co_names``, which holds attribute names too (``type(t).__name__`` is no global)."""
    names = {ins.argval for ins in dis.get_instructions(code)
             if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(ins.argval, str)}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _own_source(obj) -> str:
    """``obj``'s source from its ``def`` or ``class`` line (decorators dropped)."""
    source = textwrap.dedent(inspect.getsource(obj))
    node = ast.parse(source).body[0]
    return "\n".join(source.splitlines()[node.lineno - 1:]) + "\n"


def _globals_used(obj) -> tuple:
    """(names, the module globals ``obj`` reads them from)."""
    if inspect.isclass(obj):
        functions = [v.__func__ if isinstance(v, (staticmethod, classmethod)) else v
                     for v in vars(obj).values()]
        functions = [f for f in functions if inspect.isfunction(f)]
        names = set().union(*(_code_names(f.__code__) for f in functions)) if functions else set()
        # The class statement's own expressions: its bases and its body outside the methods.
        statement = ast.parse(textwrap.dedent(inspect.getsource(obj))).body[0]
        parts = statement.bases + statement.keywords + [node for node in statement.body
                                                        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
        names |= {n.id for part in parts for n in ast.walk(part) if isinstance(n, ast.Name)}
        module_globals = vars(inspect.getmodule(obj))
    else:
        names, module_globals = _code_names(obj.__code__), obj.__globals__
    return names, module_globals


def _recoverable(obj) -> bool:
    """A module-level function or class whose source is its own: the module holds it under its
    name (a factory's product may carry the name of another definition, e.g. the reference's)."""
    if not (inspect.isfunction(obj) or inspect.isclass(obj)) or obj.__qualname__ != obj.__name__:
        return False
    module = inspect.getmodule(obj)
    return module is not None and vars(module).get(obj.__name__) is obj


def _in_runtime(module: str) -> bool:
    """Whether a grading child can import ``module`` (the course's student-facing modules)."""
    from .runtime import ON_DEMAND_MODULES, RUNTIME_MODULES
    return not module.startswith("attention_course") or module in {f"attention_course.{m}" for m in
                                                                   RUNTIME_MODULES + ON_DEMAND_MODULES}


def mistake_source(exercise, mistake) -> Optional[str]:
    """The code of an exercise cell that behaves like ``mistake``; None when its source cannot
    be recovered (a lambda, or a function made by a factory) or it needs a course module that
    a grading child lacks."""
    impl = mistake.impl
    if not _recoverable(impl):
        return None
    blocks: list = []        # definitions, dependencies first
    imports: dict = {}       # name -> import line
    seen: set = set()

    def visit(obj) -> bool:
        if id(obj) in seen:
            return True
        seen.add(id(obj))
        names, module_globals = _globals_used(obj)
        for name in sorted(names):
            if name not in module_globals:
                continue  # a builtin or an attribute name
            value = module_globals[name]
            if inspect.ismodule(value):
                module = value.__name__
                if not _in_runtime(module):
                    return False  # the registry and the exercises' modules never reach a child
                imports[name] = (f"import {module}" if module == name
                                 else f"import {module} as {name}" if "." not in module
                                 else f"from {module.rpartition('.')[0]} import {module.rpartition('.')[2]} as {name}")
            elif isinstance(value, _PLAIN) or (isinstance(value, tuple) and all(isinstance(v, _PLAIN) for v in value)):
                blocks.append(f"{name} = {value!r}\n")
            elif inspect.isfunction(value) or inspect.isclass(value):
                home = value.__module__ or ""
                if _in_runtime(home):
                    imports[name] = f"from {home} import {value.__name__} as {name}" \
                        if value.__name__ != name else f"from {home} import {name}"
                elif _recoverable(value) and value.__name__ == name:
                    if not visit(value):
                        return False
                else:
                    return False
            else:
                return False  # an object a cell cannot be given as text (a Kept list, a tensor...)
        blocks.append(_own_source(obj))
        return True

    if not visit(impl):
        return None
    body = "\n".join(sorted(set(imports.values())) + [""] + blocks)
    if exercise.name not in imports and not any(_defines(block, exercise.name) for block in blocks):
        return body + f"\n{exercise.name} = {impl.__name__}\n"
    # The mistake calls the reference by the exercise's own name (a wrong wrapper around a right
    # answer): binding that name to the mistake would make it call itself. Its helpers stay local
    # to a function, so the reference keeps its name there.
    return (f"def _kept_mistake():\n{textwrap.indent(body, '    ')}\n    return {impl.__name__}\n\n\n"
            f"{exercise.name} = _kept_mistake()\n")


def _defines(block: str, name: str) -> bool:
    return block.startswith((f"def {name}(", f"class {name}(", f"class {name}:", f"{name} = "))
