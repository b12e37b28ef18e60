"""Collusion you can see: exercise cells that hold no code of their own, or reach outside the exercise.

Two findings of the similarity report about one student's cell on its own (never a verdict):

* **no code of its own** for an exercise the graded record says earned points: the exercise cell
  is empty, the untouched stub, defines no function or class (only imports, assignments or calls),
  or every function in it only raises ``NotImplementedError`` or hands its own arguments on to
  something defined outside the cell. A passed exercise whose answer is not in its cell came from
  somewhere else: another cell, a module, or a classmate serving answers during grading. It needs
  the record of ``attention-course grade CLASS --out DIR`` (``--graded DIR``), read as JSON with the
  grader's own bounds (:func:`.shards.read_shard`: at most 512 MB, never unpickled);
* **reaches outside the exercise**: the cell imports a module that an attention exercise never
  needs and that talks to other processes, files or the interpreter's internals (``ctypes``,
  ``socket``, ``mmap``, ``multiprocessing``, ``subprocess``, ``os``...), calls ``exec``, ``eval``,
  ``open`` or ``__import__``, reads interpreter internals (``__globals__``, ``__subclasses__``), or
  runs a shell line (``!cmd``). Listed with or without a record.

The cell is parsed (:mod:`ast`), never run.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Optional

OUTSIDE_MODULES = frozenset({
    "ctypes", "cffi", "mmap", "socket", "socketserver", "ssl", "select", "selectors", "signal", "fcntl",
    "multiprocessing", "concurrent", "subprocess", "threading", "_thread", "asyncio", "os", "posix", "sys",
    "shutil", "pathlib", "tempfile", "glob", "io", "importlib", "pkgutil", "runpy", "builtins", "gc",
    "inspect", "pickle", "dill", "marshal", "shelve", "sqlite3", "sysv_ipc", "posix_ipc", "urllib", "http",
    "requests", "ftplib", "smtplib", "xmlrpc", "webbrowser",
})
OUTSIDE_CALLS = frozenset({"exec", "eval", "compile", "__import__", "open", "breakpoint", "globals", "vars"})
OUTSIDE_ATTRIBUTES = frozenset({"__globals__", "__subclasses__", "__builtins__", "__code__", "__closure__",
                                "__loader__", "__import__", "f_globals", "f_back", "gi_frame"})
# Calls into these hand the arguments to a library, not to code written elsewhere.
LIBRARY_ROOTS = frozenset({"torch", "F", "nn", "math", "np", "numpy", "functools", "itertools", "operator"})


def _code_lines(source: str) -> tuple:
    """(the cell's Python, with IPython magics and shell lines blanked, the shell lines)."""
    kept, shell = [], []
    for line in source.split("\n"):
        stripped = line.lstrip()
        if stripped.startswith("!") or stripped.startswith(("%system", "%sx", "%%bash", "%%sh", "%%script")):
            shell.append(stripped[:80])
            kept.append("")
        elif stripped.startswith("%"):
            kept.append("")
        else:
            kept.append(line)
    return "\n".join(kept), shell


def _parse(source: str) -> Optional[ast.Module]:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _root(node) -> Optional[str]:
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _args_only(call: ast.Call, params: set) -> bool:
    """Every argument of ``call`` is one of the function's own parameters (``*args`` included)."""
    values = [a.value if isinstance(a, ast.Starred) else a for a in call.args] + [k.value for k in call.keywords]
    return all(isinstance(v, ast.Name) and v.id in params for v in values)


def _params(node) -> set:
    a = node.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    return set(names)


def _handed_on(expression, params: set, local: set) -> bool:
    """``expression`` is a call of something defined outside the cell on the function's own arguments."""
    if not isinstance(expression, ast.Call) or not _args_only(expression, params):
        return False
    root = _root(expression.func)
    return root is not None and root not in local and root not in LIBRARY_ROOTS


def _hollow_statement(statement, params: set, local: set) -> bool:
    if isinstance(statement, ast.Pass):
        return True
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return True  # a docstring or a bare constant
    if isinstance(statement, ast.Raise):
        return _root(statement.exc) == "NotImplementedError" if statement.exc is not None else False
    if isinstance(statement, (ast.Return, ast.Expr)) and statement.value is not None:
        return _handed_on(statement.value, params, local)
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return True
    return False


def _hollow(node, local: set) -> bool:
    if isinstance(node, ast.Lambda):
        return _handed_on(node.body, _params(node), local)
    if isinstance(node, ast.ClassDef):
        return all(_hollow(s, local) if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                   else isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
                   for s in node.body)
    params = _params(node)
    return all(_hollow_statement(s, params, local) for s in node.body)


def no_own_code(source: Optional[str], stub: Optional[str] = None) -> Optional[str]:
    """Why exercise cell ``source`` holds no code of its own (None when it does, or cannot be read as Python)."""
    text = source or ""
    code, _ = _code_lines(text)
    if all(not line.strip() or line.strip().startswith("#") for line in code.split("\n")):
        return "the exercise cell is empty"
    if stub and " ".join(text.split()) == " ".join(stub.split()):
        return "the exercise cell is the untouched stub"
    tree = _parse(code)
    if tree is None:
        return None
    definitions = [n for n in ast.walk(tree)
                   if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))]
    if not definitions:
        return "the exercise cell defines no function or class (only imports, assignments or calls)"
    local = {n.name for n in definitions if not isinstance(n, ast.Lambda)}
    local |= {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    if all(_hollow(n, local) for n in definitions):
        return ("every function in the exercise cell only raises NotImplementedError or hands its arguments "
                "on to something defined outside the cell")
    return None


def reaches_outside(source: Optional[str]) -> list:
    """What in exercise cell ``source`` reaches outside the exercise (sorted, deduplicated)."""
    code, shell = _code_lines(source or "")
    found = {f"shell line {line!r}" for line in shell}
    tree = _parse(code)
    if tree is None:
        return sorted(found)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {f"import {a.name}" for a in node.names if a.name.split(".")[0] in OUTSIDE_MODULES}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in OUTSIDE_MODULES:
            found.add(f"from {node.module} import")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in OUTSIDE_CALLS:
            found.add(f"{node.func.id}()")
        elif isinstance(node, ast.Attribute) and node.attr in OUTSIDE_ATTRIBUTES:
            found.add(f".{node.attr}")
        elif isinstance(node, ast.Name) and node.id in OUTSIDE_ATTRIBUTES:
            found.add(node.id)
    return sorted(found)


def read_graded(folder: Path, chapter: int) -> tuple:
    """({student: {label: (points, max_points)}}, {student: SHA-256 of the notebook graded}) from the
    record of ``grade CLASS --out DIR`` (``DIR/record.jsonl``, or the record file itself)."""
    from .shards import RECORD_NAME, ShardError, read_shard
    path = Path(folder)
    if path.is_dir():
        path = path / RECORD_NAME
    if not path.is_file():
        raise ShardError(f"--graded {folder}: no {RECORD_NAME} there (the record `attention-course grade CLASS "
                         f"--out DIR` writes beside grades.csv)")
    shard = read_shard(path)
    if shard.header["chapter"] != chapter:
        raise ShardError(f"--graded {folder}: a record of chapter {shard.header['chapter']}, not chapter {chapter}")
    points = {result.student: {e.label: (float(e.points), float(e.max_points)) for e in result.exercises}
              for _, result in shard.records}
    return points, dict(shard.digests or {})
