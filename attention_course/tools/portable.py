"""A notebook's MyST → portable Markdown: what a student opens in any notebook client.

The portable form's Markdown holds no MyST markup, so JupyterLab without extensions, Colab,
VS Code and GitHub's preview all show it as a clean document (:func:`portable_markdown`): each
``{exercise}`` becomes an ordinary heading ``### Exercise M (chNN_exM): Title`` followed by its
contract; citations become "(Bahdanau et al., 2014)" / "Bahdanau et al. (2014)" from
``references.bib`` (:mod:`.bibliography`), and ``{footbibliography}`` the list of the works cited;
admonitions become block quotes, ``{math}`` becomes ``$$``, cross-references become plain text,
except those to the tensor toolkit, which become links to ``toolkit.ipynb`` (beside them) and its
headings. Prose without MyST markup is copied verbatim. Before the setup cell comes an **install
cell** (:func:`attention_course.tools.course_settings.install_cell_source`).

The tensor toolkit is released the same way: its MyST source ``solutions/toolkit.ipynb`` is a page
of the site, whose targets (``(toolkit-keepdim)=``) the chapters' references point at, and
``release`` writes its portable form, with no MyST markup left, to ``chapters/toolkit.ipynb``, beside
the chapters' student notebooks (:func:`toolkit_notebook`). That is the file a student opens.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..checks.registry import LABEL_RE as _LABEL_RE
from .bibliography import Bibliography
from .course_files import TOOLKIT, TOOLKIT_SOURCE, read_solution, render
from .course_settings import INSTALL_TAG, CourseSettings, course_settings, install_cell_source, needs_kernels
from .notebook import NotebookError, _src, _tags, directive_labels, read_notebook

_FENCE_RE = re.compile(r"^(?P<indent>[ \t]{0,3})(?P<fence>`{3,}|~{3,}|:{3,})[ \t]*(?P<info>[^\n]*?)[ \t]*$")
_DIRECTIVE_RE = re.compile(r"^\{(?P<name>[\w:.+-]+)\}[ \t]*(?P<arg>.*)$")
_ROLE_RE = re.compile(r"(?<!`)\{(?P<name>[\w:.+-]+)\}`(?P<content>[^`]+)`")
_OPTION_RE = re.compile(r"^[ \t]*:(?P<key>[\w-]+):[ \t]*(?P<value>.*?)[ \t]*$")
_TARGET_RE = re.compile(r"^\((?P<name>[^()\s]+)\)=[ \t]*$")
_HEADING_RE = re.compile(r"^(?P<hashes>#{1,6})[ \t]+(?P<text>.*?)[ \t#]*$")
_LABELLED_MATH_RE = re.compile(r"\$\$(?P<body>.+?)\$\$[ \t]*\((?P<label>[^()\s]+)\)", re.S)
_EXERCISE_HEADING = "Exercise {number} ({label})"

_ADMONITIONS = {"note", "tip", "hint", "important", "warning", "caution", "attention", "danger", "error",
                "seealso", "admonition", "dropdown", "margin", "sidebar", "topic", "epigraph", "card",
                "exercise", "example", "proof", "theorem", "lemma", "definition", "prf:definition"}
_DROPPED = {"solution", "solution-start", "solution-end", "toctree", "tableofcontents", "glue:figure",
            "only", "index"}
_CODE = {"code", "code-block", "sourcecode", "code-cell", "literalinclude"}
_PAREN_CITES = {"footcite", "footcite:p", "footcite:ps", "cite", "cite:p", "cite:ps", "cite:alp", "footcite:alp"}
_TEXT_CITES = {"footcite:t", "footcite:ts", "cite:t", "cite:ts"}
_LITERAL_ROLES = {"code", "literal", "kbd", "command", "file", "samp", "program", "envvar", "option"}


@dataclass
class _Context:
    """What converting one notebook's Markdown needs to know about the whole notebook."""
    where: str
    bib: "Bibliography"
    labels: dict         # exercise label -> its number
    targets: dict        # (target)= name -> the heading text after it
    equations: dict      # labelled equation -> its number
    cited: list          # keys in order of first citation
    heading_level: int = 2


def _collect(cells: list, where: str, bib: "Bibliography") -> _Context:
    """First pass: exercise labels, targets, equation labels and citations of the notebook."""
    ctx = _Context(where, bib, {}, {}, {}, [])
    for cell in cells:
        if cell.cell_type != "markdown":
            continue
        source = _src(cell)
        for label in directive_labels(source):
            m = _LABEL_RE.match(label)
            if m:
                ctx.labels[label] = int(m.group(2))
        lines = source.split("\n")
        for number, line in enumerate(lines):
            target = _TARGET_RE.match(line)
            if target:
                heading = next((h for h in (_HEADING_RE.match(l) for l in lines[number + 1:] if l.strip()) if h), None)
                ctx.targets[target.group("name")] = heading.group("text") if heading else target.group("name")
        found = [(m.start(), m.group("label")) for m in _LABELLED_MATH_RE.finditer(source)]
        found += [(m.start(), m.group(1)) for m in re.finditer(r"^[ \t]*:label:[ \t]*(\S+)", source, re.M)
                  if not _LABEL_RE.match(m.group(1)) and "{math}" in source]
        for _, label in sorted(found):
            ctx.equations.setdefault(label, len(ctx.equations) + 1)
        for match in _ROLE_RE.finditer(source):
            if match.group("name") in _PAREN_CITES | _TEXT_CITES:
                for key in _keys(match.group("content")):
                    if key not in ctx.cited:
                        ctx.cited.append(key)
    return ctx


def _keys(content: str) -> list:
    return [k.strip() for k in content.split(",") if k.strip()]


def toolkit_notebook(root: Path, portable: bool = True, settings: Optional[CourseSettings] = None) -> str:
    """The text of the tensor toolkit as students get it (``portable``: Markdown without MyST
    markup, references to chapters as plain text) or, with ``portable=False``, its MyST source."""
    path = Path(root) / TOOLKIT_SOURCE
    nb = read_solution(path)  # missing, malformed JSON or nbformat: a ReleaseError
    if portable:
        nb.cells = make_portable(nb.cells, str(path), settings or course_settings(Path(root)))
    return render(nb)


@functools.lru_cache(maxsize=1)
def _toolkit_anchors() -> dict:
    """``toolkit-…`` target -> the anchor a notebook client gives the heading after it (JupyterLab
    and Jupyter Notebook: the heading's text with spaces turned into hyphens)."""
    path = Path(__file__).resolve().parents[2] / TOOLKIT_SOURCE
    anchors: dict = {}
    try:
        cells = read_notebook(path).cells
    except NotebookError:
        return anchors
    for cell in cells:
        if cell.cell_type != "markdown":
            continue
        lines = _src(cell).split("\n")
        for line, following in zip(lines, lines[1:]):
            target = _TARGET_RE.match(line)
            heading = _HEADING_RE.match(following)
            if target and heading:
                title = following[len(heading.group("hashes")):].strip().replace("`", "")
                anchors[target.group(1)] = title.replace(" ", "-")
    return anchors


def _toolkit_link(name: str, text: str, target: str) -> Optional[str]:
    """A reference to the tensor toolkit becomes a Markdown link to its notebook, which sits beside
    the student notebooks (in the course and in a student release alike)."""
    notebook = Path(TOOLKIT).name
    if name == "doc" and target.strip("/").split("/")[-1] == "toolkit":
        return f"[{text}]({notebook})"
    if name == "ref" and target.startswith("toolkit-"):
        anchor = _toolkit_anchors().get(target)
        return f"[{text}]({notebook}#{anchor})" if anchor else f"[{text}]({notebook})"
    return None


def _role(name: str, content: str, ctx: _Context) -> str:
    if name in _PAREN_CITES or name in _TEXT_CITES:
        return ctx.bib.cite(_keys(content), name in _TEXT_CITES, ctx.where)
    explicit = re.match(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$", content, re.S)
    if name in ("ref", "numref", "doc", "any", "term", "download", "prf:ref"):
        if explicit:
            link = _toolkit_link(name, explicit.group("text"), explicit.group("target"))
            return link or explicit.group("text")
        label = _LABEL_RE.match(content)
        if label:
            number = int(label.group(2))
            if content in ctx.labels:
                return f"Exercise {number} ({content})"
            return f"Exercise {number} of Chapter {int(label.group(1))} ({content})"
        if content in ctx.targets:
            return f"*{ctx.targets[content]}*"
        return Path(content).name if name == "doc" else content
    if name == "eq":
        number = ctx.equations.get(content)
        return f"({number})" if number else content
    if name == "math":
        return f"${content}$"
    if name in _LITERAL_ROLES:
        return f"`{content}`"
    if name == "abbr":
        return re.sub(r"\s*\(.*\)\s*$", "", content)
    if name in ("sub", "sup"):
        return f"<{name}>{content}</{name}>"
    if name in ("emphasis",):
        return f"*{content}*"
    if name in ("strong",):
        return f"**{content}**"
    return explicit.group("text") if explicit else content


def _inline(text: str, ctx: _Context) -> str:
    """Roles and labelled equations of a stretch of Markdown outside fenced blocks."""
    text = _ROLE_RE.sub(lambda m: _role(m.group("name"), m.group("content"), ctx), text)

    def tag(match):
        number = ctx.equations.get(match.group("label"))
        body = match.group("body").rstrip()
        return f"$${body} \\tag{{{number}}}$$" if number else f"$${body}$$"
    return _LABELLED_MATH_RE.sub(tag, text)


def _split_options(body: list) -> tuple:
    """``:key: value`` lines (or a ``---`` YAML block) at the start of a directive's body."""
    options, rest = {}, list(body)
    if rest and rest[0].strip() == "---":
        end = next((i for i in range(1, len(rest)) if rest[i].strip() == "---"), None)
        if end is not None:
            import yaml
            try:
                options = yaml.safe_load("\n".join(rest[1:end])) or {}
            except yaml.YAMLError:
                options = {}
            rest = rest[end + 1:]
    else:
        while rest and _OPTION_RE.match(rest[0]):
            m = _OPTION_RE.match(rest[0])
            options[m.group("key")] = m.group("value")
            rest = rest[1:]
    while rest and not rest[0].strip():
        rest = rest[1:]
    while rest and not rest[-1].strip():
        rest = rest[:-1]
    return options, rest


def _fence_for(lines: list) -> str:
    longest = max([len(m.group(0)) for l in lines for m in re.finditer(r"`{3,}", l)] or [2])
    return "`" * (longest + 1)


def _quote(lines: list) -> list:
    return [f"> {line}" if line.strip() else ">" for line in lines]


def _directive(name: str, arg: str, body: list, ctx: _Context) -> list:
    options, rest = _split_options(body)
    if name in _DROPPED:
        return []
    if name in _CODE:
        language = arg.split()[0] if arg.split() else ""
        fence = _fence_for(rest)
        return [fence + language, *rest, fence]
    if name == "math":
        inner = [_inline(l, ctx) for l in rest]
        number = ctx.equations.get(options.get("label", ""))
        if number:
            inner.append(f"\\tag{{{number}}}")
        return ["$$", *inner, "$$"]
    if name in ("footbibliography", "bibliography"):
        keys = sorted(ctx.bib.entries) if name == "bibliography" else ctx.cited
        return [f"- {ctx.bib.reference(k, ctx.where)}" for k in sorted(keys, key=ctx.bib.sort_key)] \
            or ["*(no works cited)*"]
    if name in ("figure", "image"):
        alt = options.get("alt", "")
        caption = _portable_lines(rest, ctx)
        image = f"![{alt or ' '.join(caption).strip() or Path(arg).stem}]({arg})"
        return [image, "", *(f"*{line}*" if line.strip() else line for line in caption)] if caption else [image]
    if name == "raw":
        return rest if arg.strip() == "html" else []
    if name == "exercise":
        label = options.get("label", "")
        number = ctx.labels.get(label)
        level = min(ctx.heading_level + 1, 6)
        heading = _EXERCISE_HEADING.format(number=number, label=label) if number else "Exercise"
        if arg.strip():
            heading += f": {_inline(arg.strip(), ctx)}"
        return ["#" * level + " " + heading, "", *_portable_lines(rest, ctx)]
    if name == "epigraph":
        return _quote(_portable_lines(rest, ctx))
    # Admonitions, dropdowns and any other directive: a block quote with a bold title.
    titled = name in ("admonition", "dropdown", "card", "topic", "sidebar") or name not in _ADMONITIONS
    if titled:
        title = arg.strip() or name.split(":")[-1].replace("-", " ").capitalize()
        content = rest
    else:
        title = name.split(":")[-1].replace("seealso", "see also").capitalize()
        content = ([arg.strip(), ""] if arg.strip() else []) + rest
    lines = [f"**{_inline(title, ctx)}**"]
    converted = _portable_lines(content, ctx)
    if converted:
        lines += [""] + converted
    return _quote(lines)


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return (len(line) - len(line.lstrip()) <= 3 and len(stripped) >= len(fence)
            and set(stripped) == {fence[0]})


def _portable_lines(lines: list, ctx: _Context) -> list:
    out, text = [], []

    def flush():
        if text:
            out.extend(_inline("\n".join(text), ctx).split("\n"))
            text.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE_RE.match(line)
        if fence:
            mark, info = fence.group("fence"), fence.group("info")
            end = next((j for j in range(i + 1, len(lines)) if _closes(lines[j], mark)), len(lines))
            directive = _DIRECTIVE_RE.match(info)
            flush()
            if directive:
                out.extend(_directive(directive.group("name"), directive.group("arg"), lines[i + 1:end], ctx))
            elif mark[0] == ":":  # a colon fence without a directive: its content, as prose
                out.extend(_portable_lines(lines[i + 1:end], ctx))
            else:  # an ordinary code block: verbatim
                out.extend(lines[i:end + 1])
            i = end + 1
            continue
        if _TARGET_RE.match(line) or line.strip() == "+++" or re.match(r"^%", line):
            i += 1  # MyST targets, block breaks and comments have no portable form
            continue
        heading = _HEADING_RE.match(line)
        if heading:
            ctx.heading_level = len(heading.group("hashes"))
        text.append(line)
        i += 1
    flush()
    # Blocks that vanished (targets, comments) may leave runs of blank lines.
    squeezed = []
    for line in out:
        if not line.strip() and squeezed and not squeezed[-1].strip():
            continue
        squeezed.append(line)
    return squeezed


def portable_markdown(source: str, ctx: _Context) -> str:
    """One Markdown cell without MyST markup (see the module's docstring)."""
    return "\n".join(_portable_lines(source.split("\n"), ctx)).strip("\n")


def make_portable(cells: list, where: str, settings: CourseSettings) -> list:
    """``cells`` (a student notebook's, in MyST) with their Markdown portable, and the install cell
    before the first setup cell."""
    import nbformat
    ctx = _collect(cells, where, Bibliography(settings.bibfile))
    out = []
    for index, cell in enumerate(cells, start=1):
        if cell.cell_type == "markdown":
            ctx.where = f"{where}, cell {index}"
            cell.source = portable_markdown(_src(cell), ctx)
        if cell.cell_type == "code" and "setup" in _tags(cell) and not any(INSTALL_TAG in _tags(c) for c in out):
            install = nbformat.v4.new_code_cell(install_cell_source(settings, kernels=needs_kernels(cells)))
            install.metadata["tags"] = [INSTALL_TAG]
            install["id"] = "install-course-package"  # stable, so the file is too
            out.append(install)
        out.append(cell)
    return out
