"""The course in another language, built from the English source and the catalogs of ``locales/``.

Nothing translated is stored as a second copy of a chapter: each build re-reads the English
source and puts each Markdown block's translation in its place (:mod:`.translations`), so a
paragraph changed in English shows in English, and is listed as stale by the translation check,
until its translation is brought up to date. Code cells and their outputs are the English
notebook's own, byte for byte (nbval checks those once).

* :func:`stage_language` writes a course folder in ``lang`` (solution notebooks, toolkit and
  pages translated; the configuration marks the language), from which :mod:`.editions` builds the
  full and the student edition exactly as it builds the English ones. The sites go under the
  English ones (``_build/html/zh``, ``_build/student/html/zh``), and every page links to the same
  page in the other language (:mod:`attention_course.sphinxext`).
* :func:`release_language` writes the Chinese student notebooks, ``chapters/zh/``, with the same
  generator as ``chapters/`` (portable Markdown, the install cell, no solution). Their setup cell
  selects the language of the feedback (``ATTENTION_COURSE_LANG``), so ``check()`` prints Chinese.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Optional

from .translations import PAGES, table, translate_markdown

TITLES = {"zh": "注意力机制：原理与练习"}
# The table of contents' part captions.
CAPTIONS = {"zh": {"Chapters": "章节", "Reference": "参考"}}
# Sphinx's own interface language for each of ours (search box, "previous", "next"...).
SPHINX_LANGUAGE = {"zh": "zh_CN"}
# The words the portable form writes around an exercise's label, in each language.
_EXERCISE_WORDS = {"zh": (r"练习 \1 (\2)", r"第 \2 章的练习 \1 (\3)")}
# What the setup cell of a student notebook in this language adds: the feedback's language, read
# by attention_course.checks.language (an environment variable: a grading child has it too).
SETUP_LINE = 'import os; os.environ["ATTENTION_COURSE_LANG"] = "{lang}"  # check() speaks {name}'
_NAMES = {"zh": "中文"}


def translated_notebook(nb, lang: str, tables: dict, domain: str, missing: Optional[list] = None):
    """A copy of a solution notebook with its Markdown cells in ``lang``."""
    import copy
    out = copy.deepcopy(nb)
    rows = tables.get(domain, {})
    for cell in out.cells:
        if cell.cell_type == "markdown":
            cell.source = translate_markdown(cell.source, rows, missing)
    out.metadata["language_info_course"] = lang  # marks a translated copy (never in solutions/)
    return out


def _tables(root: Path, lang: str) -> dict:
    folder = Path(root) / "locales" / lang / "LC_MESSAGES"
    return {path.stem: table(root, lang, path.stem) for path in sorted(folder.glob("*.po"))}


def stage_language(root: Path, lang: str, staging: Path) -> Path:
    """A course folder in ``lang`` at ``staging`` (replaced if present); return it."""
    import nbformat
    import yaml
    root, staging = Path(root).resolve(), Path(staging)
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    tables = _tables(root, lang)
    for name in ("references.bib", "course.yml"):
        if (root / name).exists():
            shutil.copy2(root / name, staging / name)
    toc = (root / "_toc.yml").read_text(encoding="utf-8")
    for english, translated in CAPTIONS.get(lang, {}).items():
        toc = toc.replace(f"caption: {english}\n", f"caption: {translated}\n")
    (staging / "_toc.yml").write_text(toc, encoding="utf-8")
    for folder in ("_static", "_extra", "locales"):
        if (root / folder).exists():
            shutil.copytree(root / folder, staging / folder)
    for name in PAGES:
        if (root / name).exists():
            text = (root / name).read_text(encoding="utf-8")
            (staging / name).write_text(translate_markdown(text, tables.get(Path(name).stem, {})), encoding="utf-8")
    (staging / "solutions").mkdir()
    for path in sorted((root / "solutions").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        translated = translated_notebook(nb, lang, tables, path.stem)
        (staging / "solutions" / path.name).write_text(nbformat.writes(translated) + "\n", encoding="utf-8")
    # The student notebooks the pages offer for download: the ones in this language.
    if (root / "chapters" / lang).is_dir():
        shutil.copytree(root / "chapters" / lang, staging / "chapters")
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    config["title"] = TITLES.get(lang, config.get("title"))
    sphinx = config.setdefault("sphinx", {}).setdefault("config", {})
    sphinx["language"] = SPHINX_LANGUAGE.get(lang, lang)
    sphinx["attention_course_language"] = lang
    (staging / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True),
                                         encoding="utf-8")
    return staging


def _heading_anchors(sources: list) -> dict:
    """``toolkit-…`` target -> the anchor a notebook client gives the heading under it (the rule of
    :func:`attention_course.tools.portable._toolkit_anchors`), over Markdown ``sources``."""
    from .portable import _HEADING_RE, _TARGET_RE
    anchors = {}
    for source in sources:
        lines = source.split("\n")
        for line, following in zip(lines, lines[1:]):
            target, heading = _TARGET_RE.match(line), _HEADING_RE.match(following)
            if target and heading:
                title = following[len(heading.group("hashes")):].strip().replace("`", "")
                anchors[target.group(1)] = title.replace(" ", "-")
    return anchors


def toolkit_anchor_map(root: Path, lang: str, tables: dict) -> dict:
    """English toolkit anchor -> the same section's anchor in the toolkit translated to ``lang``, so
    that a translated notebook's links land on the translated headings."""
    import nbformat
    from .release import TOOLKIT_SOURCE
    path = Path(root) / TOOLKIT_SOURCE
    if not path.exists():
        return {}
    english = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]
    rows = tables.get(path.stem, {})
    before = _heading_anchors(english)
    after = _heading_anchors([translate_markdown(source, rows) for source in english])
    from urllib.parse import quote
    # A notebook client names a heading by its text, spaces as hyphens, percent-encoding what is not
    # ASCII (nbconvert's render and JupyterLab alike).
    return {before[t]: quote(after[t], safe="-=,:()!*'_.~") for t in before if t in after and before[t] != after[t]}


def _finish_student(text: str, lang: str, anchors: Optional[dict] = None) -> str:
    """A portable student notebook's text in ``lang``: the words around exercise labels, links to the
    toolkit's translated headings, and the setup cell choosing the feedback's language."""
    import nbformat
    from .course_files import render
    nb = nbformat.reads(text, as_version=4)
    words = _EXERCISE_WORDS.get(lang)
    for cell in nb.cells:
        if cell.cell_type == "markdown" and anchors:
            cell.source = re.sub(r"\(toolkit\.ipynb#([^)\s]+)\)",
                                 lambda m: f"(toolkit.ipynb#{anchors.get(m.group(1), m.group(1))})", cell.source)
        if cell.cell_type == "markdown" and words:
            cell.source = re.sub(r"Exercise (\d+) of Chapter (\d+) \((ch\d\d_ex\d+)\)", words[1], cell.source)
            cell.source = re.sub(r"\bExercise (\d+) \((ch\d\d_ex\d+)\)", words[0], cell.source)
        if cell.cell_type == "code" and "setup" in cell.metadata.get("tags", []):
            cell.source = SETUP_LINE.format(lang=lang, name=_NAMES.get(lang, lang)) + "\n" + cell.source
    return render(nb)


def release_language(root: Path, lang: str, check_only: bool = False) -> list:
    """Write (or compare) ``chapters/<lang>/``: the student notebooks and the toolkit in ``lang``,
    made by the English release's own generator from the solution notebooks in ``lang``.
    Returns the stale paths."""
    import tempfile
    import nbformat
    from .release import TOOLKIT_SOURCE, _registered, generate, solution_paths, toolkit_notebook
    root = Path(root).resolve()
    tables = _tables(root, lang)
    registered = _registered()
    stale = []
    with tempfile.TemporaryDirectory(prefix=f"attention-course-{lang}-") as tmp:
        staged = Path(tmp)
        for name in ("_config.yml", "references.bib", "requirements-kernels.txt"):
            if (root / name).exists():
                shutil.copy2(root / name, staged / name)
        (staged / "solutions").mkdir()
        for path in sorted((root / "solutions").glob("*.ipynb")):
            nb = translated_notebook(nbformat.read(path, as_version=4), lang, tables, path.stem)
            nb.metadata.pop("language_info_course", None)
            (staged / "solutions" / path.name).write_text(nbformat.writes(nb) + "\n", encoding="utf-8")
        texts = {}
        for path in solution_paths(staged):
            texts[path.name] = generate(path, registered)[0]
        if (staged / TOOLKIT_SOURCE).exists():
            texts[Path(TOOLKIT_SOURCE).name] = toolkit_notebook(staged)
    anchors = toolkit_anchor_map(root, lang, tables)
    for name, text in texts.items():
        text = _finish_student(text, lang, anchors)
        target = root / "chapters" / lang / name
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            stale.append(target)
            if not check_only:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
    return stale


def release_languages(root: Path, check_only: bool = False) -> list:
    """:func:`release_language` for every language with catalogs under locales/ (``attention-course
    release`` runs it after the English release)."""
    from .translations import LANGUAGES
    stale = []
    for lang in LANGUAGES:
        if (Path(root) / "locales" / lang).is_dir() and (Path(root) / "chapters").is_dir():
            stale += release_language(root, lang, check_only)
    return stale
