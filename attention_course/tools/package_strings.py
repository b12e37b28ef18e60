"""The package's strings a reader sees, in the translators' catalog ``attention_course/locales/<lang>/
LC_MESSAGES/attention_course.po``, read at run time by :mod:`attention_course.checks.language`.

Two kinds of entry:

* **exact** — every exercise's title, check names and hints and every kept mistake's hint, read
  from the registry (location: the exercise's label);
* **templates** — the messages the check engine, the exercises' own comparisons, ``progress`` and
  the grader build from values at run time, read from the source (f-strings and string constants
  that are not docstrings, log lines or the messages of exceptions the reader never sees). A value
  becomes a numbered field, ``{0}``, ``{1}``: the translation may move it but keeps every one
  (location: ``module.py:line``).

``attention-course translations update`` refreshes the catalog as it does the prose catalogs (an
entry whose English changed turns fuzzy with the old English beside it); :func:`package_problems`
lists every missing, stale or malformed entry.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]
# The modules whose messages reach a reader (check lines, hints, progress, grading feedback).
SOURCES = ("checks/*.py", "exercises/**/*.py", "tools/progress.py", "tools/grading/grader.py",
           "tools/grading/reports.py", "tools/grading/items.py", "tools/grading/outcome_data.py",
           "tools/grading/gradescope.py", "tools/grading/classrun.py", "tools/grading/runtime.py",
           "tools/grading/zygote_main.py", "tools/grading/walls.py", "tools/grading/own_code.py",
           "tools/grading/submissions.py")
_WORDS = re.compile(r"[A-Za-z]{2,}\s+[A-Za-z]{2,}")
_FIELD = re.compile(r"\{(\d+)\}")


def package_catalog_path(lang: str) -> Path:
    return PACKAGE_DIR / "locales" / lang / "LC_MESSAGES" / "attention_course.po"


def _skipped_nodes(tree: ast.AST) -> set:
    """Docstrings, exception messages and logging calls: not shown to a reader as feedback."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            skip.add(id(node.body[0].value))
        if isinstance(node, ast.Raise) and node.exc is not None:
            for inner in ast.walk(node.exc):
                skip.add(id(inner))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("debug", "info", "warning", "warn", "error", "exception", "compile", "match",
                                   "search", "sub", "findall", "fullmatch", "split"):
            for inner in ast.walk(node):
                if inner is not node.func:
                    skip.add(id(inner))
        # Kept mistakes' and alternatives' names are the authors' (their hints come from the registry).
        if isinstance(node, ast.Call) and (
                (isinstance(node.func, ast.Attribute) and node.func.attr in ("keep", "add")) or
                (isinstance(node.func, ast.Name) and node.func.id in ("Mistake", "Alternative", "Exercise",
                                                                       "Check"))):
            for inner in ast.walk(node):
                if inner is not node.func:
                    skip.add(id(inner))
        if isinstance(node, ast.JoinedStr):
            for value in node.values:
                skip.add(id(value))
                for inner in ast.walk(value):
                    skip.add(id(inner))
    return skip


def template_of(node: ast.AST):
    """An f-string as a template with numbered fields (``{0}``), or a constant string as it is."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.replace("{", "{{").replace("}", "}}") if _FIELD.search(node.value) else node.value
    if isinstance(node, ast.JoinedStr):
        parts, index = [], 0
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(value.value.replace("{", "{{").replace("}", "}}"))
            else:
                parts.append("{%d}" % index)
                index += 1
        return "".join(parts)
    return None


def _marked(tree: ast.AST) -> set:
    """Strings passed straight to ``tr(...)`` or ``N_(...)``: messages whatever their length."""
    marked = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("tr", "N_") \
                and node.args:
            marked.add(id(node.args[0]))
    return marked


def source_templates() -> list:
    """(template, "module.py:line") for every reader-facing message of the SOURCES."""
    out = []
    files = sorted({p for pattern in SOURCES for p in PACKAGE_DIR.glob(pattern)})
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip, marked = _skipped_nodes(tree), _marked(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            text = template_of(node)
            literal = _FIELD.sub("", text or "")
            if text is None or not (_WORDS.search(literal) or
                                    (id(node) in marked and re.search("[A-Za-z]{2,}", text)) or
                                    # a message around values: "raised {0}: {1}", "{0} [inputs: {1}]"
                                    (_FIELD.search(text) and re.search(r"[a-z]{4,}", literal) and " " in text)):
                continue
            if text.startswith(("__", "ch0", "ch1")) or "\n" in text.strip("\n") or \
                    text.lstrip().startswith(("raise ", "import ", "#!")):
                continue  # names, code and scripts, not messages (no message spans lines)
            out.append((text, f"{path.relative_to(PACKAGE_DIR).as_posix()}:{node.lineno}"))
    return out


def registry_strings() -> list:
    """(text, label) for every exercise's title, check names, check hints and kept mistakes' hints."""
    from ..checks.registry import all_exercises
    out = []
    for exercise in all_exercises():
        out.append((exercise.title, exercise.label))
        for check in exercise.checks:
            out.append((check.name, exercise.label))
            if check.hint:
                out.append((check.hint, exercise.label))
        for mistake in exercise.mistakes:
            if mistake.hint:
                out.append((mistake.hint, exercise.label))
    return out


def package_entries() -> list:
    entries = registry_strings()
    known = {text for text, _ in entries}
    entries += [(text, where) for text, where in source_templates() if text not in known]
    return entries


def update_package(lang: str) -> dict:
    from babel.messages.catalog import Catalog
    from .translations import locked, merge, read_catalog, template
    path = package_catalog_path(lang)
    tmpl = template(package_entries(), lang, "attention_course")
    with locked(path):
        catalog = read_catalog(path) if path.exists() else Catalog(locale=lang, domain="attention_course",
                                                                   project="attention-course", version="")
        return merge(catalog, tmpl, path)


def package_problems(lang: str) -> list:
    """Every missing, stale or malformed entry of the package's catalog, naming where its English is."""
    from .translations import catalog_problems, field_problems, read_catalog
    path = package_catalog_path(lang)
    rel = path.relative_to(PACKAGE_DIR.parent)
    if not path.exists():
        return [f"{rel}: no catalog (run attention-course translations update)"]
    catalog = read_catalog(path)
    wanted = {}
    for text, where in package_entries():
        wanted.setdefault(text, where)
    return catalog_problems(rel, catalog, wanted, field_problems, "the package")
