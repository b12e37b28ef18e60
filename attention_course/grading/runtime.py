"""The student-side runtime: the only course code a grading child can import.

:func:`build_runtime` writes, into a fresh folder,

* ``attention_course/`` – a minimal student-facing package: ``calls.py`` (to run a
  check's calls), ``plotting.py``, ``data.py``, ``functional.py`` and, when they
  exist, ``multihead.py``, ``translation.py``, ``transformer.py`` (chapter 8) and
  ``efficient.py`` (chapter 9), copied from the installed package;
  an ``__init__.py`` whose ``check()`` only prints that the checks run at grading
  time. There is **no** registry, no exercise module, no ``checking``: the hidden
  checks, the references and the kept mistakes never reach a child;
* the package's data folders (``pretrained/``: model weights and tables), which a
  child may read;
* ``_ac_zygote.py`` – the zygote program (:mod:`attention_course.grading.zygote_main`).

A runtime module that imports something the runtime lacks (e.g. the registry) is
skipped by the zygote with a logged warning rather than shipped with its imports.
"""
from __future__ import annotations

import ast
import shutil
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]

# Student-facing modules, in import order. Missing ones (e.g. chapters not written yet) are skipped.
RUNTIME_MODULES = ("calls", "plotting", "data", "functional", "multihead", "translation", "transformer",
                   "efficient")
# Data folders of the package that student-facing modules read (e.g. translation.load_pretrained).
RUNTIME_DATA_DIRS = ("pretrained",)
DATA_SUFFIXES = (".pt", ".csv", ".txt", ".json")
# Modules that must never be shipped, whatever a runtime module imports.
FORBIDDEN_MODULES = {"registry", "checking", "exercises", "release", "cli", "notebook", "grading"}

INIT_TEMPLATE = '''"""attention_course, grading edition: the student-facing helpers only.

``check()`` does nothing here: the checks of every exercise run when the notebook is
graded, in the grader's own process.
"""
from .plotting import plot_curves, show_heatmaps

__version__ = {version!r}
__all__ = ["check", "run_checks", "show_heatmaps", "plot_curves", "__version__"]


def check(label, obj=None):
    print(f"{{label}}: checks run at grading time")


def run_checks(label, obj=None, hidden=False, seed=None):
    print(f"{{label}}: checks run at grading time")
    return []
'''


def _imports_forbidden(source: str) -> str:
    """Name a forbidden course module that ``source`` imports, or ''."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "(syntax error)"
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative: from .registry import ... / from . import checking
                names = [module.split(".")[0]] if module else [a.name for a in node.names]
            elif module.startswith("attention_course"):
                rest = module.split(".")[1:]
                names = rest[:1] or [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".")[1] for a in node.names
                     if a.name.startswith("attention_course.") and a.name.count(".") >= 1]
        for name in names:
            if name in FORBIDDEN_MODULES:
                return name
    return ""


def build_runtime(dest: Path, package_dir: Path = PACKAGE_DIR) -> tuple:
    """Write the runtime into ``dest``; return (module names shipped, warnings)."""
    from .. import __version__
    dest = Path(dest)
    pkg = dest / "attention_course"
    if pkg.exists():
        shutil.rmtree(pkg)
    pkg.mkdir(parents=True)
    shipped, warnings = [], []
    for name in RUNTIME_MODULES:
        source_path = package_dir / f"{name}.py"
        if not source_path.is_file():
            continue
        source = source_path.read_text(encoding="utf-8")
        bad = _imports_forbidden(source)
        if bad:
            warnings.append(f"attention_course.{name} imports attention_course.{bad}, which a grading child "
                            f"must not see: not shipped to the runtime")
            continue
        (pkg / f"{name}.py").write_text(source, encoding="utf-8")
        shipped.append(name)
    for name in RUNTIME_DATA_DIRS:
        folder = package_dir / name
        if folder.is_dir():
            for path in sorted(folder.iterdir()):
                if path.is_file() and path.suffix in DATA_SUFFIXES:
                    (pkg / name).mkdir(exist_ok=True)
                    shutil.copyfile(path, pkg / name / path.name)
    (pkg / "__init__.py").write_text(INIT_TEMPLATE.format(version=__version__), encoding="utf-8")
    shutil.copyfile(Path(__file__).with_name("zygote_main.py"), dest / "_ac_zygote.py")
    return shipped, warnings
