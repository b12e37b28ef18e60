"""The package's rooms, and the one rule of what may import what.

``attention_course`` is three rooms and the exercises between them:

* **the library** — the modules at the package's top level that the chapter notebooks import
  (:data:`LIBRARY`), with the stand-ins of withheld pieces (``withheld``), the sites' Sphinx
  extension (``sphinxext``) and this file. Its import paths never change for a student.
* **the check engine** — ``checks/``: the registry, calls, comparisons and hints, the plan of one
  exercise's checks, the refusal of the course's own answers, the dropout checks and the stand-ins
  that disable code in a grading child.
* **the exercises** — ``exercises/``: one module per exercise (its reference, checks, kept mistakes
  and alternatives), registered into the check engine.
* **the instructor's tools** — ``tools/``: the release, the student build, the editions, the course
  configuration, progress, the scaffold, the PDF, the grader (``tools/grading/``) and the command line.

The rule (:data:`MAY_IMPORT`; ``tests/test_layout.py`` enforces it on every module's imports):
the library imports only the library; ``checks/`` the library and itself; ``exercises/`` those and
itself; ``tools/`` everything. The package's face (``__init__.py``) hands ``check`` on from the check
engine. A student's package (:mod:`attention_course.tools.student_build`) is the library plus
``checks/``, minus what a release withholds; a grading child's runtime
(:mod:`attention_course.tools.grading.runtime`) is the library plus :data:`CHILD_CHECKS`.

Standard library only, and nothing imported: every room may read it.
"""
from __future__ import annotations

PACKAGE = __name__.split(".")[0]

# The library that notebooks import, in import order (a module comes after those it imports).
LIBRARY = ("plotting", "data", "functional", "multihead", "dates", "translation", "transformer", "kv_cache",
           "efficient", "rope_scaling", "windowed", "linear_attention", "score_mods", "latent", "grouped",
           "kernels")  # chapter 11's Triton kernels: the kernels extra; a grading zygote imports it on demand
# Shipped beside the library in every build: no answer in any of them.
LIBRARY_SUPPORT = ("withheld", "sphinxext", "rooms")

ROOMS = ("library", "checks", "exercises", "tools")
MAY_IMPORT = {
    "library": {"library"},
    "checks": {"library", "checks"},
    "exercises": {"library", "checks", "exercises"},
    "tools": {"library", "checks", "exercises", "tools"},
}
# The package's face re-exports check() and run_checks() from the check engine.
FACE_MAY_IMPORT = {"library", "checks"}

# The check engine's modules a grading child imports: running a call, and the stand-ins that disable
# the course's own answers. Neither imports anything of the course; no registry, no reference, no
# hidden check reaches a child.
CHILD_CHECKS = ("checks.calls", "checks.disable")
# The modules a grading child may import, in import order.
CHILD_MODULES = ("checks.calls", "checks.disable") + LIBRARY


def room_of(module: str) -> str:
    """The room of a module named relative to the package (``"checks.registry"``, ``"functional"``)
    or absolutely (``"attention_course.tools.cli"``); ``"face"`` for the package's ``__init__``."""
    if module == PACKAGE:
        return "face"
    if module.startswith(PACKAGE + "."):
        module = module[len(PACKAGE) + 1:]
    head = module.split(".")[0]
    if head in ("checks", "exercises", "tools"):
        return head
    if head == "public_checks":  # a student build's stored checks belong to its check engine
        return "checks"
    return "library"


def may_import(importer: str, imported: str) -> bool:
    """Whether module ``importer`` may import module ``imported`` under the rule."""
    room = room_of(importer)
    allowed = FACE_MAY_IMPORT if room == "face" else MAY_IMPORT[room]
    return room_of(imported) in allowed | {"face"} if room != "library" else room_of(imported) == "library"


def student_modules(all_modules) -> list:
    """Of the package's modules (dotted, relative to it), those a student build may ship: the
    library, its support and the check engine (what a release withholds is removed later)."""
    return sorted(m for m in all_modules if room_of(m) in ("library", "checks") or m == "__init__")
