"""The student notebooks read as clean documents in any notebook client.

Clients without MyST (Colab, VS Code, GitHub's preview, JupyterLab without
extensions) render Markdown cells as CommonMark. So each committed student notebook's
Markdown is rendered here with a plain CommonMark renderer (markdown-it-py's
``commonmark`` preset, no plugins): no MyST directive, role or option may survive,
exercises must be headings followed by their contract, and citations must read
"(Author et al., year)" with the works cited listed at the end.
"""
import json
import re
from pathlib import Path

import nbformat
import pytest
from markdown_it import MarkdownIt

from attention_course.tools.notebook import exercise_labels, setup_code
from attention_course.checks.registry import all_exercises
from attention_course.tools.release import (INSTALL_TAG, Bibliography, CourseSettings, ReleaseError, course_settings,
                                      release_notebook, solution_paths)

ROOT = Path(__file__).resolve().parents[1]
STUDENT = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
# The Chinese student notebooks (issue 45) come from the same generator and are held to the same rules.
STUDENT_ZH = sorted((ROOT / "chapters" / "zh").glob("[0-9][0-9]_*.ipynb"))
RAW_MYST = ["{exercise}", ":label:", "{footcite", "{solution", "{footbibliography", "{ref}", "{doc}", "{eq}",
            "{math}", "{note}", "{dropdown}", "{admonition}"]
COMMONMARK = MarkdownIt("commonmark")


def _text(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _markdown_cells(path: Path) -> list:
    return [_text(c) for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "markdown"]


def test_there_are_student_notebooks():
    assert len(STUDENT) == len(solution_paths(ROOT)) >= 7


@pytest.mark.parametrize("path", STUDENT + STUDENT_ZH, ids=lambda p: "/".join(p.parts[-2:]))
def test_no_myst_markup_survives_a_plain_commonmark_renderer(path):
    html = "\n".join(COMMONMARK.render(source) for source in _markdown_cells(path))
    found = [marker for marker in RAW_MYST if marker in html]
    assert not found, f"{path.name} shows raw MyST markup: {found}"
    # A directive fence renders as a code block of language "{name}"; a role as "{name}<code>".
    assert not re.search(r'class="language-\{', html), path.name
    assert not re.search(r"\{[\w:.-]+\}<code>", html), re.search(r".{60}\{[\w:.-]+\}<code>.{40}", html)


@pytest.mark.parametrize("path", STUDENT + STUDENT_ZH, ids=lambda p: "/".join(p.parts[-2:]))
def test_exercises_are_headings_with_number_label_and_title_then_the_contract(path):
    chapter = int(path.name[:2])
    registered = {ex.label: ex for ex in all_exercises(chapter)}
    cells = _markdown_cells(path)
    labels = [label for source in cells for label in exercise_labels(source)]
    assert labels == sorted(registered, key=lambda l: int(l.split("_ex")[1])), path.name
    for source in cells:
        for label in exercise_labels(source):
            number = int(label.split("_ex")[1])
            html = COMMONMARK.render(source)
            heading = re.search(r"<h(\d)>(.*?)</h\1>", html)
            assert heading, f"{label}: the exercise does not open with a heading"
            word = "练习" if path.parent.name == "zh" else "Exercise"
            assert re.fullmatch(rf"{word} {number} \({label}\)[:：] ?.+", heading.group(2)), heading.group(2)
            body = html[heading.end():]
            # The contract follows as formatted text: paragraphs with inline code, usually a list.
            assert "<p>" in body and "<code>" in body, f"{label}: no formatted contract under the heading"


@pytest.mark.parametrize("path", STUDENT, ids=lambda p: p.name)
def test_citations_read_author_year_with_the_works_cited_at_the_end(path):
    solution = ROOT / "solutions" / path.name
    cited = []
    for source in _markdown_cells(solution):
        for match in re.finditer(r"\{footcite:[pt]\}`([^`]+)`", source):
            cited += [k.strip() for k in match.group(1).split(",") if k.strip() not in cited]
    assert cited, f"{solution.name} cites nothing"
    bib = Bibliography(ROOT / "references.bib")
    text = "\n".join(_markdown_cells(path))
    for key in cited:
        authors, year = bib.short_authors(key, "test"), bib.year(key, "test")
        assert f"{authors}, {year}" in text or f"{authors} ({year})" in text, key
    references = next(s for s in _markdown_cells(path) if s.startswith("## References"))
    items = re.findall(r"^- (.+)$", references, re.M)
    assert len(items) == len(dict.fromkeys(cited)), items
    for key in cited:
        assert any(item.startswith(bib.short_authors(key, "t").split(" ")[0]) and f"({bib.year(key, 't')})" in item
                   for item in items), key


@pytest.mark.parametrize("path", STUDENT, ids=lambda p: p.name)
def test_install_cell_comes_right_before_the_setup_cell(path):
    nb = nbformat.read(path, as_version=4)
    tags = [c.metadata.get("tags", []) for c in nb.cells]
    install = [i for i, t in enumerate(tags) if INSTALL_TAG in t]
    setup = [i for i, t in enumerate(tags) if "setup" in t]
    assert len(install) == 1 and setup and install[0] == setup[0] - 1, (install, setup)
    source = nb.cells[install[0]].source
    settings = course_settings(ROOT)
    assert settings.archive_url and settings.archive_url in source
    assert "ATTENTION_COURSE_SOURCE" in source and "import attention_course" in source
    # The install cell is no part of the setup the grader runs.
    assert "pip" not in setup_code(nb.cells)


# ------------------------------------------------------------ the converter itself

def _release(*markdown, code=None):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(m) for m in markdown]
    if code:
        nb.cells.append(nbformat.v4.new_code_cell(code))
    settings = CourseSettings(repository_url="https://example.org/me/course", bibfile=ROOT / "references.bib")
    student, _ = release_notebook(nb, Path("solutions/09_demo.ipynb"), settings=settings)
    return [c.source for c in student.cells]


def test_citations_parenthetical_textual_and_several_keys():
    [text, refs] = _release("See {footcite:p}`bahdanau2014`, {footcite:t}`vaswani2017` and "
                            "{footcite:p}`desimone1995,james1890`.", "## References\n\n```{footbibliography}\n```")
    assert text == ("See (Bahdanau et al., 2014), Vaswani et al. (2017) and "
                    "(Desimone and Duncan, 1995; James, 1890).")
    items = refs.split("\n")[2:]
    assert [i.split(",")[0] for i in items] == ["- Bahdanau", "- Desimone", "- James", "- Vaswani"]
    assert items[1] == ("- Desimone, R. and Duncan, J. (1995). Neural Mechanisms of Selective Visual Attention. "
                        "*Annual Review of Neuroscience*, 18, 193\u2013222.")
    assert items[0].startswith("- Bahdanau, D., Cho, K., and Bengio, Y. (2014). Neural Machine Translation")


def test_unknown_citation_key_is_a_clear_error():
    with pytest.raises(ReleaseError, match=r"09_demo.ipynb, cell 1: citation key 'nobody2099' is not in references.bib"):
        _release("As {footcite:p}`nobody2099` showed.")


def test_admonitions_dropdowns_math_and_cross_references():
    cells = _release(
        "## Section\n\n(sec-demo)=\n### Target heading\n\n% a MyST comment\nText.",
        "```{note}\nA *note* with {math}`x^2`.\n```\n\n:::{dropdown} A hint\nLook at the axis.\n:::",
        "```{math}\n:label: eq-score\na = b\n```\n\nBy {eq}`eq-score` and $$c = d$$ (eq-two), "
        "see {eq}`eq-two`, {ref}`sec-demo`, {ref}`the text <sec-demo>` and {doc}`bibliography`.",
        "````{exercise} First\n:label: ch09_ex1\n\nWrite `f(x)`:\n\n```python\nf(1)  # {not a role}`x`\n```\n````",
        "As in {ref}`ch09_ex1` and {ref}`ch03_ex2`.",
        code='check("ch09_ex1", f)',
    )
    assert cells[0] == "## Section\n\n### Target heading\n\nText."
    assert cells[1] == "> **Note**\n>\n> A *note* with $x^2$.\n\n> **A hint**\n>\n> Look at the axis."
    assert cells[2] == ("$$\na = b\n\\tag{1}\n$$\n\nBy (1) and $$c = d \\tag{2}$$, see (2), *Target heading*, "
                        "the text and bibliography.")
    # Code inside an exercise stays verbatim; the exercise becomes a heading one level down.
    assert cells[3] == "#### Exercise 1 (ch09_ex1): First\n\nWrite `f(x)`:\n\n```python\nf(1)  # {not a role}`x`\n```"
    assert cells[4] == "As in Exercise 1 (ch09_ex1) and Exercise 2 of Chapter 3 (ch03_ex2)."


def test_install_cell_installs_only_when_the_package_is_missing(tmp_path):
    # Only a notebook with a setup cell (tagged `setup`) gets an install cell, right before it.
    assert _release("# Demo", code="import torch") == ["# Demo", "import torch"]
    nb = nbformat.v4.new_notebook()
    setup = nbformat.v4.new_code_cell("import math")
    setup.metadata["tags"] = ["setup"]
    nb.cells = [nbformat.v4.new_markdown_cell("# Demo"), setup]
    settings = CourseSettings(repository_url="https://example.org/me/course", branch="dev")
    student, _ = release_notebook(nb, Path("solutions/09_demo.ipynb"), settings=settings)
    install = student.cells[1]
    assert install.metadata["tags"] == [INSTALL_TAG] and student.cells[2].source == "import math"
    assert '"https://example.org/me/course/archive/refs/heads/dev.zip"' in install.source
    # Run it where the package is importable: it prints nothing and installs nothing.
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(install.source, "install", "exec"), {})
    assert out.getvalue() == ""


@pytest.mark.parametrize("path", STUDENT, ids=[p.stem for p in STUDENT])
def test_a_reference_to_an_exercise_never_shows_the_word_twice(path):
    """A reference to an exercise reads "Exercise 5 (ch02_ex5)" here and "Exercise 2.5" on the
    site, so the prose before it must not say "exercise" itself ("Exercise Exercise 5" once)."""
    doubled = [m.group(0) for cell in _markdown_cells(path)
               for m in re.finditer(r"\bexercises?\s+exercise\b", cell, re.IGNORECASE)]
    assert not doubled, doubled


# A MyST target, `(name)=` alone on its line: a notebook client shows it as text.
RAW_TARGET = re.compile(r"^\([^()\s]+\)=\s*$", re.M)


def _heading_ids(notebook: Path) -> set:
    """The ids a notebook client gives the headings of ``notebook``, read off a real render:
    nbconvert's HTML export, which names headings as Jupyter does."""
    import html
    from nbconvert import HTMLExporter
    body, _ = HTMLExporter(template_name="basic").from_notebook_node(
        nbformat.read(str(notebook), as_version=4))
    return {html.unescape(m.group(1)) for m in re.finditer(r'<h[1-6][^>]*\bid="([^"]+)"', body)}


def test_toolkit_references_are_links_to_headings_that_exist():
    """Issue 28: a learner in Jupyter found the toolkit references as orphaned words. In the
    portable notebooks they are links to toolkit.ipynb beside them, and each anchor is the id that a
    render of the student-facing toolkit gives one of its headings (nbconvert's HTML export,
    not the rule the release uses to write the anchors)."""
    from urllib.parse import unquote
    ids = _heading_ids(ROOT / "chapters" / "toolkit.ipynb")
    assert {"Reductions-with-keepdim=True", "-inf,-exp-and-the-softmax"} <= ids, sorted(ids)  # the render's form
    links = [(path.name, m.group(1)) for path in STUDENT for text in _markdown_cells(path)
             for m in re.finditer(r"\]\(toolkit\.ipynb(#[^)]*)?\)", text)]
    chapters = {name for name, _ in links}
    assert {p.name for p in STUDENT[:4]} <= chapters, chapters   # chapters 1-4 all link to it
    anchored = [(name, unquote(anchor[1:])) for name, anchor in links if anchor]
    assert len(anchored) >= 10, anchored
    missing = [(name, anchor) for name, anchor in anchored if anchor not in ids]
    assert not missing, (missing, sorted(ids))
    assert (ROOT / "chapters" / "toolkit.ipynb").exists()


def test_student_facing_toolkit_shows_no_myst_markup():
    """Issue 28: the toolkit showed its MyST targets, `(toolkit-keepdim)=`, as text in Jupyter.
    What a student opens, chapters/toolkit.ipynb (the one the chapters link to and the
    one a student release copies), is the portable form `release` writes: no target, no role,
    no directive. The MyST source the site is built from keeps every target a chapter refers to."""
    from attention_course.tools.release import TOOLKIT_SOURCE, toolkit_notebook
    student_text = (ROOT / "chapters" / "toolkit.ipynb").read_text(encoding="utf-8")
    assert student_text == toolkit_notebook(ROOT), "toolkit.ipynb is stale: run `attention-course release`"
    cells = _markdown_cells(ROOT / "chapters" / "toolkit.ipynb")
    assert len(cells) >= 10
    for cell in cells:
        assert not RAW_TARGET.search(cell), RAW_TARGET.search(cell).group(0)
        for token in RAW_MYST:
            assert token not in cell, (token, cell[:200])
    source_cells = _markdown_cells(ROOT / TOOLKIT_SOURCE)
    targets = {m.group(0).strip()[1:-2] for cell in source_cells for m in RAW_TARGET.finditer(cell)}
    referred = {m.group(1) for path in solution_paths(ROOT) for cell in _markdown_cells(path)
                for m in re.finditer(r"\{ref\}`[^`<]*<(toolkit-[^>]+)>`", cell)}
    assert referred and referred <= targets, sorted(referred - targets)
    # The same text, headings and code in both forms: only MyST markup was converted.
    source = nbformat.read(str(ROOT / TOOLKIT_SOURCE), as_version=4)
    student = nbformat.read(str(ROOT / "chapters" / "toolkit.ipynb"), as_version=4)
    assert [c.source for c in source.cells if c.cell_type == "code"] == \
        [c.source for c in student.cells if c.cell_type == "code"]
    assert [c.outputs for c in source.cells if c.cell_type == "code"] == \
        [c.outputs for c in student.cells if c.cell_type == "code"]


def test_the_chinese_notebooks_links_land_on_the_chinese_toolkits_headings():
    """Issue 45: chapters/zh links to the Chinese toolkit beside it, at the ids a render gives its
    (translated) headings (percent-encoded, as the render writes them)."""
    ids = _heading_ids(ROOT / "chapters" / "zh" / "toolkit.ipynb")
    anchored = [(path.name, m.group(1)) for path in STUDENT_ZH for text in _markdown_cells(path)
                for m in re.finditer(r"\]\(toolkit\.ipynb#([^)]*)\)", text)]
    assert len(anchored) >= 10, anchored
    missing = [(name, anchor) for name, anchor in anchored if anchor not in ids]
    assert not missing, (missing[:5], sorted(ids))
