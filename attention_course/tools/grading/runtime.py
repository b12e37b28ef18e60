"""The student-side runtime: the only course code a grading child can import.

:func:`build_runtime` writes, into a fresh folder,

* ``attention_course/`` – a minimal student-facing package: ``checks/calls.py`` (to run a
  check's calls) and ``checks/disable.py`` (to disable the course's answers), ``plotting.py``, ``data.py``, ``functional.py`` and, when they
  exist, ``multihead.py``, ``dates.py`` and ``translation.py`` (chapter 7), ``transformer.py`` (chapter 8),
  ``kv_cache.py`` and ``efficient.py`` (chapter 9), and the rest of the library, copied from the
  installed package; ``kernels.py`` (chapter 11, triton) is shipped but imported only on demand
  (:data:`ON_DEMAND_MODULES`);
  an ``__init__.py`` whose ``check()`` only prints that the checks run at grading
  time. There is **no** registry, no exercise module, no ``checks.checking``: the hidden
  checks, the references and the kept mistakes never reach a child;
* the package's data folders (``pretrained/``: model weights and tables), which a
  child may read;
* ``_ac_zygote.py`` – the zygote program (:mod:`attention_course.tools.grading.zygote_main`), and
  ``_ac_walls.py`` beside it – the kernel walls it raises in every child
  (:mod:`attention_course.tools.grading.walls`: Landlock, seccomp, namespaces, capabilities), with
  ``_ac_syscalls.py``, its seccomp allow-list (:mod:`attention_course.tools.grading.syscalls`), and
  ``_ac_child_io.py``, the pipes a child's outcome and standard error come back by
  (:mod:`attention_course.tools.grading.child_io`).

A runtime module that imports something the runtime lacks (e.g. the registry) is
skipped by the zygote with a logged warning rather than shipped with its imports.
"""
from __future__ import annotations

import ast
import shutil
from pathlib import Path

from ...rooms import CHILD_MODULES

PACKAGE_DIR = Path(__file__).resolve().parents[2]

# What a child may import, in import order (attention_course.rooms: the library, and of the check
# engine only running a call and disabling the course's answers). Missing ones are skipped.
# Of them, these are shipped but imported by the zygote only when a submission needs them (before it
# forks that submission's child: a child cannot read the runtime's files): chapter 11's kernels import
# triton (about 1 GB installed, the kernels extra), which chapters 1-10 never wait for.
ON_DEMAND_MODULES = tuple(m for m in ("kernels",) if m in CHILD_MODULES)
RUNTIME_MODULES = tuple(m for m in CHILD_MODULES if m not in ON_DEMAND_MODULES)
# Data folders of the package that student-facing modules read (e.g. translation.load_pretrained).
RUNTIME_DATA_DIRS = ("pretrained",)
DATA_SUFFIXES = (".pt", ".csv", ".txt", ".json")

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


def _imports_forbidden(source: str, name: str) -> str:
    """Name a course module that ``source`` (module ``name``) imports and a child may not, or ''."""
    import importlib.util
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "(syntax error)"
    package = "attention_course." + name.rsplit(".", 1)[0] if "." in name else "attention_course"
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) \
                if node.level else (node.module or "")
            if base == "attention_course":
                targets = [f"{base}.{a.name}" for a in node.names]
            elif base.startswith("attention_course."):
                # from attention_course.checks import calls: the module may be a name of the package
                targets = [base] if base[len("attention_course."):] in _SHIPPABLE else \
                    [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names if a.name.startswith("attention_course.")]
        for target in targets:
            short = target[len("attention_course."):]
            if short not in _SHIPPABLE and short not in ("__version__",):
                return short
    return ""


_SHIPPABLE = set(CHILD_MODULES) | {"checks"}


def build_runtime(dest: Path, package_dir: Path = PACKAGE_DIR) -> tuple:
    """Write the runtime into ``dest``; return (module names shipped, warnings). The names are those
    the zygote imports when it starts: :data:`ON_DEMAND_MODULES` are shipped too, not named."""
    from ... import __version__
    dest = Path(dest)
    pkg = dest / "attention_course"
    if pkg.exists():
        shutil.rmtree(pkg)
    pkg.mkdir(parents=True)
    shipped, warnings = [], []
    for name in RUNTIME_MODULES + ON_DEMAND_MODULES:
        source_path = package_dir / (name.replace(".", "/") + ".py")
        if not source_path.is_file():
            continue
        source = source_path.read_text(encoding="utf-8")
        bad = _imports_forbidden(source, name)
        if bad:
            warnings.append(f"attention_course.{name} imports attention_course.{bad}, which a grading child "
                            f"must not see: not shipped to the runtime")
            continue
        target = pkg / (name.replace(".", "/") + ".py")
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.parent != pkg and not (target.parent / "__init__.py").exists():
            (target.parent / "__init__.py").write_text("", encoding="utf-8")  # a face that imports nothing
        target.write_text(source, encoding="utf-8")
        if name in RUNTIME_MODULES:
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
    shutil.copyfile(Path(__file__).with_name("walls.py"), dest / "_ac_walls.py")
    shutil.copyfile(Path(__file__).with_name("syscalls.py"), dest / "_ac_syscalls.py")
    shutil.copyfile(Path(__file__).with_name("child_io.py"), dest / "_ac_child_io.py")
    shutil.copyfile(Path(__file__).with_name("ondemand.py"), dest / "_ac_ondemand.py")
    return shipped, warnings
