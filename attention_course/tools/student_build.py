"""The student build of the course package, for an instructor's release.

The public course package holds every exercise's reference, its hidden checks and the
library's finished answers (later chapters build on them). An instructor who grades
homework hands out a **student build** instead (:func:`write_package`). It holds:

* the checking machinery (``checking``, ``calls``, ``registry``, ``answers``), the plots and
  data sets, the site's Sphinx extension, and the library modules that the released
  chapters' notebooks import (found from their code and the modules' own imports);
* ``public_checks/``: for every exercise of the released chapters, its **public** checks as
  stored data (``checks.pt``, plain tensors and strings loaded with ``weights_only=True``):
  the calls, the reference's outcomes on them, computed when the release is made, and every
  kept mistake's outcomes, so the hints still name the mistake an answer behaves like. A
  check with a compare of its own (a property test, a tolerance on a recomputed quantity)
  ships that compare's code, extracted with what it uses, never the reference or a mistake
  (:mod:`attention_course.tools.stored_checks`: :func:`build_store`, re-exported here);
* no ``exercises/`` (no reference, no hidden check, no kept mistake or alternative) and no
  ``grading/`` (the instructor's kit).

**Which answers are withheld.** Every exercise's answer is withheld unless the instructor
opens it: a *practice* exercise, or an exercise of a chapter whose answers are released
(its deadline has passed). A library piece that is a withheld exercise's answer
(:func:`attention_course.checks.answers.blocked_answers`) keeps its name in the shipped module,
bound to a stand-in (:mod:`attention_course.withheld`) that calls the student's own answer
of the same name. So chapter 3's later cells run on the student's own ``masked_softmax``.
Before it is written, the stand-in replays the course's results recorded when the release was
made (``public_checks/withheld_calls.pt``: :func:`worked_examples`, and the calls other exercises'
public checks make; :func:`attention_course.tools.withheld_calls.record_withheld_calls`): the
worked examples run top to bottom, and an exercise that uses the piece does not depend on the
student's answer to it.

**The rule for later chapters (release in sequence).** A withheld piece that shipped code
outside it, or a notebook of another released chapter, uses would break that material (the
student's own answer is not in that notebook). The release then stops and names the piece:
release that chapter after the exercise's deadline (open its answers in ``course.yml``), or
make the exercise practice. The same holds in the exercise's own chapter for a piece that the
student's answer cannot stand in for (named otherwise, or with a wider contract than the
exercise's, :data:`WIDER_CONTRACT`): chapter 8's worked examples build ``MaskedMultiHeadAttention``
(ch08_ex2) and train ``tf.Transformer``, whose blocks are ``DecoderBlock`` (ch08_ex3). A release
of chapter 8 makes those practice (tests/test_released_chapters_run.py releases chapters 4-9 in
sequence and runs them).
"""
from __future__ import annotations

import ast
import inspect
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

from ..rooms import LIBRARY, LIBRARY_SUPPORT
# The stored public checks (and the build's error, and what never ships), re-exported from here.
from .stored_checks import (PUBLIC_CHECKS_INIT, STORE_NAME, StudentBuildError,  # noqa: F401
                            _absolute_source, _code_names, _CodeCollector, _input_names, _lambda_source,
                            _module_assignment, build_store, never_shipped)
from .withheld_calls import CALLS_NAME, record_withheld_calls  # noqa: F401

PACKAGE_DIR = Path(__file__).resolve().parents[1]
PACKAGE = __name__.split(".")[0]

# Modules every student build ships (attention_course.rooms): the package's face, the check engine,
# plots, data sets, the stand-ins, the rule itself and the site's Sphinx extension. None of them
# holds an answer. Modules are named relative to the package, dotted ("checks.registry").
BASE_MODULES = tuple(["__init__"] + sorted(f"checks.{p.stem}" for p in (PACKAGE_DIR / "checks").glob("*.py")
                                           if p.stem != "__init__")
                     + ["plotting", "data"] + list(LIBRARY_SUPPORT))
# Library modules a notebook may import; shipped only when a released chapter needs them.
LIBRARY_MODULES = tuple(m for m in LIBRARY if m not in BASE_MODULES)


def module_path(name: str) -> Path:
    """The source file of package module ``name`` ("checks.registry" -> checks/registry.py)."""
    return PACKAGE_DIR / (name.replace(".", "/") + ".py")


DATA_DIRS = ("pretrained",)
DATA_SUFFIXES = (".pt", ".csv", ".txt", ".json")


# ---------------------------------------------------------------- what a release holds

@dataclass
class ReleasePlan:
    """The chapters released, and for every registered exercise whether it is graded."""
    chapters: list
    graded: list          # labels graded in this release: their answers must not ship
    practice: list        # labels of released chapters whose answers may ship (practice, deadline passed)
    withheld: list        # every label whose answer must not ship (graded, or of a later chapter)
    reasons: dict = field(default_factory=dict)  # label -> why it is open (practice / answers released)

    def released_labels(self) -> list:
        from ..checks.registry import all_exercises
        return [ex.label for ex in all_exercises() if ex.chapter in self.chapters]


def plan_release(chapters, practice=(), answers_released=()) -> ReleasePlan:
    """Which exercises a release of ``chapters`` grades. ``practice``: labels whose answers may
    ship; ``answers_released``: chapters whose deadlines have passed (all their answers may ship)."""
    from ..checks.registry import all_exercises, get_exercise
    exercises = all_exercises()
    known = {ex.chapter for ex in exercises}
    chapters = sorted({int(c) for c in chapters})
    unknown = [c for c in chapters if c not in known]
    if not chapters or unknown:
        raise StudentBuildError(f"chapters to release: {unknown or 'none given'} not in the course "
                                f"(it has chapters {sorted(known)})")
    for label in practice:
        get_exercise(label)  # an unknown label is an error naming the known ones
    reasons = {}
    for ex in exercises:
        if ex.chapter in set(answers_released):
            reasons[ex.label] = f"chapter {ex.chapter}'s answers are released"
        elif ex.label in set(practice):
            reasons[ex.label] = "practice"
    graded = [ex.label for ex in exercises if ex.chapter in chapters and ex.label not in reasons]
    open_practice = [ex.label for ex in exercises if ex.chapter in chapters and ex.label in reasons]
    withheld = [ex.label for ex in exercises if ex.label not in reasons]
    return ReleasePlan(chapters, graded, open_practice, withheld, reasons)


# ---------------------------------------------------------------- library modules needed

_NOTEBOOK_IMPORT = re.compile(rf"(?:from\s+{PACKAGE}\s+import\s+(?P<names>[\w\s,()]+?)\s*$"
                              rf"|\b{PACKAGE}\.(?P<attr>\w+))", re.M)


def _notebook_code(path: Path) -> str:
    import nbformat
    nb = nbformat.read(path, as_version=4)
    # Lines starting with % or ! (IPython) would stop ast.parse: they import nothing.
    return "\n".join("\n".join(line for line in c.source.splitlines() if not line.lstrip().startswith(("%", "!")))
                     for c in nb.cells if c.cell_type == "code")


def modules_named(code: str) -> set:
    """Package modules that notebook code imports (``from attention_course import functional as attn``,
    ``import attention_course.data``) or reaches as ``attention_course.X``."""
    found = set()
    try:
        tree = ast.parse(code)
    except SyntaxError:  # a cell magic or a shell line: fall back to the text
        found |= set(re.findall(rf"\b{PACKAGE}\.(\w+)", code))
        found |= {n.strip().split()[0] for m in re.findall(rf"from\s+{PACKAGE}\s+import\s+([\w ,]+)", code)
                  for n in m.split(",") if n.strip()}
    else:
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == PACKAGE:
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(f"{PACKAGE}."):
                found.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                found |= {a.name.split(".")[1] for a in node.names if a.name.startswith(f"{PACKAGE}.")}
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == PACKAGE:
                found.add(node.attr)
    return {name for name in found if module_path(name).is_file()}


def package_imports(name: str) -> set:
    """The package modules (dotted, relative to the package) that module ``name`` imports, at any
    depth of its code."""
    import importlib.util
    tree = ast.parse(module_path(name).read_text(encoding="utf-8"))
    package = PACKAGE + ("." + name.rsplit(".", 1)[0] if "." in name else "")
    if name == "__init__":
        package = PACKAGE
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = (importlib.util.resolve_name("." * node.level + (node.module or ""), package)
                    if node.level else (node.module or ""))
            if base != PACKAGE and not base.startswith(f"{PACKAGE}."):
                continue
            short = base[len(PACKAGE) + 1:]
            out |= {f"{short}.{a.name}" if short else a.name for a in node.names}
            if short:
                out.add(short)
        elif isinstance(node, ast.Import):
            out |= {a.name[len(PACKAGE) + 1:] for a in node.names if a.name.startswith(f"{PACKAGE}.")}
    return {m for m in out if module_path(m).is_file() or (PACKAGE_DIR / m.replace(".", "/")).is_dir()}


def _closure(names: set) -> set:
    todo, seen = list(names), set()
    while todo:
        name = todo.pop()
        if name in seen or never_shipped(name) or not module_path(name).is_file():
            continue
        seen.add(name)
        todo.extend(package_imports(name))
    return seen


# ---------------------------------------------------------------- withheld library pieces

@dataclass
class Withheld:
    module: str      # "functional"
    attr: str        # "masked_softmax"
    label: str       # "ch03_ex1"
    answer_name: str  # the name the exercise asks for
    is_class: bool

    @property
    def delegates(self) -> bool:
        """Can the student's own answer stand in for it (the same name and contract)?"""
        where = f"{self.module}.{self.attr}"
        return (self.attr == self.answer_name and where not in WIDER_CONTRACT) or where in SAME_CONTRACT


# Library pieces named otherwise than their exercise's answer that take the same arguments and
# return the same results, so the student's answer can stand in for them (the fused-kernel
# layer has MultiHeadAttention's constructor, parameters and forward).
SAME_CONTRACT = {"multihead.SDPAMultiHeadAttention"}
# Library pieces named like their exercise's answer whose shipped callers use more than the
# exercise asks for, so the student's answer cannot stand in for them there: the library's
# DecoderBlock takes dropout, norm_first and context_length (tf.Transformer builds it with all
# three) and returns the cross-attention weights; ch08_ex3's DecoderBlock(d_model, num_heads,
# d_ff) does neither. Withheld, it raises, and a release whose material uses it stops and says so.
WIDER_CONTRACT = {"transformer.DecoderBlock"}


def withheld_pieces(plan: ReleasePlan, modules: set) -> list:
    """The library pieces, in the shipped ``modules``, that answer a withheld exercise."""
    import importlib
    from ..checks.answers import blocked_answers
    from ..checks.registry import get_exercise
    out = []
    for label in plan.withheld:
        exercise = get_exercise(label)
        for module_name, attr, _, _ in blocked_answers(exercise):
            short = module_name.split(".")[-1]
            if short not in modules:
                continue
            target = getattr(importlib.import_module(module_name), attr)
            out.append(Withheld(short, attr, label, exercise.name, inspect.isclass(target)))
    return out


def _top_level_names(tree: ast.Module) -> dict:
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = node
    return out


def _names_used(node: ast.AST) -> set:
    """Names a definition uses when it runs: annotations (never evaluated, the modules use
    ``from __future__ import annotations``) and docstrings do not count."""
    annotations = set()
    for n in ast.walk(node):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.returns is not None:
            annotations |= {id(x) for x in ast.walk(n.returns)}
        elif isinstance(n, ast.arg) and n.annotation is not None:
            annotations |= {id(x) for x in ast.walk(n.annotation)}
        elif isinstance(n, ast.AnnAssign):
            annotations |= {id(x) for x in ast.walk(n.annotation)}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and id(n) not in annotations} | \
        {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and id(n) not in annotations}


def strip_module(name: str, pieces: list) -> str:
    """Module ``name``'s source with every withheld piece's definition replaced by a stand-in."""
    source = module_path(name).read_text(encoding="utf-8")
    mine = {p.attr: p for p in pieces if p.module == name}
    if not mine:
        return source
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    defs = _top_level_names(tree)
    edits = []  # (first line index, end line index, replacement)
    for attr, piece in mine.items():
        where = f"{PACKAGE}.{name}.{attr}"
        maker = "cls" if piece.is_class else "function"
        own = piece.answer_name if piece.delegates else None
        stand_in = f"{attr} = _withheld.{maker}({where!r}, {piece.label!r}, {own!r})\n"
        if attr in defs:
            node = defs[attr]
            first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            does = f"it calls your own {piece.answer_name}" if piece.delegates else "it raises until released"
            edits.append((first, node.end_lineno, f"# {attr}: withheld in this release (the answer to "
                                                  f"{piece.label}); {does}.\n" + stand_in))
        else:
            # Imported from another module (a re-export): rebind it after the imports.
            edits.append((None, None, stand_in))
    body_lines = lines[:]
    tail = []
    for first, end, text in sorted(edits, key=lambda e: -(e[0] or -1)):
        if first is None:
            tail.append(text)
        else:
            body_lines[first:end] = [text]
    out = "".join(body_lines)
    # The stand-ins' import goes after the module's docstring and __future__ import.
    anchor = "from __future__ import annotations\n"
    imports = "from . import withheld as _withheld\n"
    out = out.replace(anchor, anchor + imports, 1) if anchor in out else imports + out
    if tail:
        out += "\n\n# Withheld in this release (re-exports of pieces that answer graded exercises).\n" + "".join(tail)
    return out


def _module_graph(modules: set) -> tuple:
    """``(edges, import_time, bases)`` over the shipped modules' top-level objects.

    ``edges[(module, name)]``: the package objects that ``name``'s code uses when it runs (in
    its own module, imported from another, or reached as ``alias.attr``). ``import_time``:
    objects used by a module's own top-level statements (they run when it is imported).
    ``bases[(module, name)]``: the package objects a class derives from.
    """
    edges, import_time, bases = {}, set(), {}
    for module in sorted(modules):
        tree = ast.parse(module_path(module).read_text(encoding="utf-8"))
        defined = {getattr(n, "name", None) for n in tree.body} | {
            t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        objects, aliases = {}, {}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                for a in node.names:
                    objects[a.asname or a.name] = (node.module.split(".")[0], a.name)
            elif isinstance(node, ast.ImportFrom) and node.level == 1:
                aliases.update({a.asname or a.name: a.name for a in node.names})

        def resolve(node) -> set:
            out = set()
            for n in ast.walk(node):
                if isinstance(n, ast.Name) and n.id in defined:
                    out.add((module, n.id))
                elif isinstance(n, ast.Name) and n.id in objects:
                    out.add(objects[n.id])
                elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases:
                    out.add((aliases[n.value.id], n.attr))
            return out

        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                # A re-export (translation's names from dates, efficient's from kv_cache): using it
                # through this module uses the object where it is defined.
                for a in node.names:
                    edges.setdefault((module, a.asname or a.name), set()).add(
                        (node.module.split(".")[0], a.name))
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                runtime = _names_used(node)
                edges[(module, node.name)] = {r for r in resolve(node) if r[1] in runtime} - {(module, node.name)}
                if isinstance(node, ast.ClassDef):
                    bases[(module, node.name)] = set().union(*[resolve(b) for b in node.bases]) if node.bases else set()
                # Decorators and default values run at import time.
                for part in list(getattr(node, "decorator_list", [])) + list(
                        getattr(getattr(node, "args", None), "defaults", []) or []):
                    import_time |= resolve(part)
            else:
                import_time |= resolve(node)
    return edges, import_time, bases


def uses_of_withheld(plan: ReleasePlan, modules: set, pieces: list, notebooks: dict) -> list:
    """Where shipped material would run a withheld piece with no answer of the student's at hand:
    ``[(piece, where)]``.

    A stand-in calls the student's own answer, which exists only in the notebook of the
    exercise's chapter (and only for a piece with the answer's own contract; any other raises). So a piece may be used by code that only its own chapter's notebook
    reaches (``translation.build_model`` builds chapter 7's ``AttentionDecoder`` from the
    student's class); not by what another released chapter's notebook reaches, not by a
    module's import-time code, and not as the base class of shipped code.
    """
    from ..checks.registry import get_exercise
    edges, import_time, bases = _module_graph(modules)
    keys = {(p.module, p.attr): p for p in pieces}
    problems = []
    for key, piece in keys.items():
        if key in import_time:
            problems.append((piece, f"the import of {PACKAGE}.{key[0]}"))
        for owner, owner_bases in bases.items():
            if key in owner_bases and owner not in keys:
                problems.append((piece, f"{PACKAGE}.{owner[0]}.{owner[1]} (a subclass)"))
    for chapter, code in notebooks.items():
        # What this chapter's notebook reaches; withheld pieces' own code is not shipped.
        todo = list(notebook_uses(code))
        seen = {}
        for start in todo:
            seen[start] = f"the notebook of chapter {chapter}"
        while todo:
            node = todo.pop()
            if node in keys:
                continue
            for nxt in edges.get(node, ()):
                if nxt not in seen:
                    seen[nxt] = f"{PACKAGE}.{node[0]}.{node[1]}, which the notebook of chapter {chapter} uses"
                    todo.append(nxt)
        for key, piece in keys.items():
            if key in seen and (get_exercise(piece.label).chapter != chapter or not piece.delegates):
                problems.append((piece, seen[key]))
    unique, done = [], set()
    for piece, where in problems:
        if (piece.module, piece.attr, where) not in done:
            done.add((piece.module, piece.attr, where))
            unique.append((piece, where))
    return unique


def notebook_uses(code: str) -> set:
    """``(module, attr)`` pairs of package objects that notebook code uses: ``attn.masked_softmax``
    after ``from attention_course import functional as attn``, or names imported from a module."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    aliases, used = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == PACKAGE:
            aliases.update({a.asname or a.name: a.name for a in node.names})
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(f"{PACKAGE}."):
            used |= {(node.module.split(".")[1], a.name) for a in node.names}
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(f"{PACKAGE}.") and a.asname:
                    aliases[a.asname] = a.name.split(".")[1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            used.add((aliases[node.value.id], node.attr))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                and isinstance(node.value.value, ast.Name) and node.value.value.id == PACKAGE:
            used.add((node.value.attr, node.attr))
    return used


def worked_examples(plan: ReleasePlan, root: Path, pieces: list) -> dict:
    """``{chapter: [(cell index, source)]}``: the code cells before a released chapter's first
    exercise, up to the last one that uses a withheld piece of the student's own chapter (their
    results are recorded, so that the release's stand-ins can replay them before it is written)."""
    import nbformat
    from .release import chapter_number, solution_paths
    keys = {(p.module, p.attr) for p in pieces if p.delegates}
    out = {}
    for path in solution_paths(root):
        if chapter_number(path) not in plan.chapters:
            continue
        cells = []
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type == "markdown" and "{exercise}" in cell.source:
                break
            if cell.cell_type == "code" and "solution-only" not in cell.metadata.get("tags", []):
                cells.append((index, cell.source))
        imports = "\n".join(line for _, source in cells for line in source.splitlines()
                            if line.startswith(("import ", "from ")))
        used = [n for n, (_, source) in enumerate(cells) if notebook_uses(imports + "\n" + source) & keys]
        if used:
            out[chapter_number(path)] = cells[:used[-1] + 1]
    return out


# ---------------------------------------------------------------- the package

def shipped_modules(plan: ReleasePlan, root: Path) -> tuple:
    """``(modules, notebooks code by chapter)``: what the student build ships for ``plan``."""
    from .release import chapter_number, solution_paths
    notebooks = {}
    named = set()
    for path in solution_paths(root):
        if chapter_number(path) in plan.chapters:
            code = _notebook_code(path)
            notebooks[chapter_number(path)] = code
            named |= modules_named(code)
    modules = _closure(set(BASE_MODULES) | (named & set(LIBRARY_MODULES)))
    return modules, notebooks


def write_package(dest: Path, plan: ReleasePlan, root: Path, store_cache: Optional[dict] = None) -> dict:
    """Write the student build of the package into ``dest/attention_course``; return a summary
    (``modules``, ``withheld`` pieces, ``exercises`` stored)."""
    dest = Path(dest)
    pkg = dest / PACKAGE
    if pkg.exists():
        shutil.rmtree(pkg)
    pkg.mkdir(parents=True)
    modules, notebooks = shipped_modules(plan, root)
    labels = plan.released_labels()
    cache = {} if store_cache is None else store_cache  # the stored checks do not depend on the plan
    if tuple(labels) not in cache:
        cache[tuple(labels)] = build_store(labels)
    data, code, needed = cache[tuple(labels)]
    modules = _closure(modules | needed)
    pieces = withheld_pieces(plan, modules)
    problems = uses_of_withheld(plan, modules, pieces, notebooks)
    if problems:
        lines = [f"  {PACKAGE}.{p.module}.{p.attr} (the answer to {p.label}) is used by {where}"
                 for p, where in problems]
        # Opening those may ship code that uses further answers: suggest the whole set at once.
        labels_needed, trial = set(), problems
        while trial:
            labels_needed |= {p.label for p, _ in trial}
            wider = ReleasePlan(plan.chapters, [], [], [x for x in plan.withheld if x not in labels_needed])
            trial = uses_of_withheld(wider, modules, withheld_pieces(wider, modules), notebooks)
        labels_needed = sorted(labels_needed)
        raise StudentBuildError(
            "this release would ship material that needs the answers to exercises it grades:\n"
            + "\n".join(lines) + "\nRelease those chapters after the exercises' deadlines (list the exercises' "
            "chapters under answers_released in course.yml), or add them to the practice exercises "
            f"(practice: [{', '.join(labels_needed)}]).", labels_needed)
    for name in sorted(modules):
        target = pkg / (name.replace(".", "/") + ".py")
        target.parent.mkdir(parents=True, exist_ok=True)
        init = module_path(name).with_name("__init__.py")
        if target.parent != pkg and not (target.parent / "__init__.py").exists():
            shutil.copyfile(init, target.parent / "__init__.py")  # the sub-package's face
        target.write_text(strip_module(name, pieces), encoding="utf-8")
    checks_dir = pkg / "public_checks"
    checks_dir.mkdir()
    torch.save(data, checks_dir / STORE_NAME)
    calls = record_withheld_calls(pieces, labels, worked_examples(plan, root, pieces))
    if calls:  # what the stand-ins replay (attention_course.withheld): results on fixed inputs, no code
        torch.save(calls, checks_dir / CALLS_NAME)
    (checks_dir / "__init__.py").write_text(PUBLIC_CHECKS_INIT.format(store=STORE_NAME), encoding="utf-8")
    for label, source in code.items():
        (checks_dir / f"{label}.py").write_text(source, encoding="utf-8")
    if {"translation", "transformer"} & modules:
        for name in DATA_DIRS:
            for path in sorted((PACKAGE_DIR / name).iterdir()):
                if path.is_file() and path.suffix in DATA_SUFFIXES:
                    (pkg / name).mkdir(exist_ok=True)
                    shutil.copyfile(path, pkg / name / path.name)
    # The feedback's translations (attention_course.checks.language): hints and check names, no answer.
    if (PACKAGE_DIR / "locales").is_dir():
        shutil.copytree(PACKAGE_DIR / "locales", pkg / "locales", ignore=shutil.ignore_patterns("*.lock"))
    return {"modules": sorted(modules), "withheld": pieces, "exercises": labels}
