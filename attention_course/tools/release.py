"""Generate student notebooks (``chapters/``) from solution notebooks (``solutions/``).

The solution notebook is the single source of a chapter. The student notebook is
the same notebook with

* every solution region -- the lines between ``# BEGIN SOLUTION`` and
  ``# END SOLUTION`` in a code cell -- replaced by one line, at the marker's
  indentation, ``raise NotImplementedError("chNN_exM: implement <name>")``; the
  signature and docstring above the region stay;
* every solution-only cell removed: code or markdown cells tagged
  ``solution-only``, and markdown cells that are a ``{solution}``,
  ``{solution-start}`` or ``{solution-end}`` directive;
* the outputs (and execution counts) of every code cell from the first
  ``{exercise}`` directive to the end cleared, since they would show a working
  solution's results.

Nothing else changes: prose and worked examples are copied as they are.

The generator refuses, with the notebook, the cell number and what is wrong:
unbalanced or nested markers, a solution region outside an exercise, an exercise
label used twice or not of the form ``chNN_exM`` for this chapter, an exercise
with no ``check("chNN_exM", ...)`` cell, a markdown cell mixing a solution
directive with other text, and an exercise label that the package does not
register (or a registered one missing from the notebook).

Two forms of the student notebook come out of one solution notebook:

* **portable** (the default, written to ``chapters/``): what a student opens in any
  notebook client. Its Markdown holds no MyST markup, so JupyterLab without
  extensions, Colab, VS Code and GitHub's preview all show it as a clean document
  (:func:`portable_markdown`): each ``{exercise}`` becomes an ordinary heading
  ``### Exercise M (chNN_exM): Title`` followed by its contract; citations become
  "(Bahdanau et al., 2014)" / "Bahdanau et al. (2014)" from ``references.bib``, and
  ``{footbibliography}`` the list of the works cited; admonitions become block
  quotes, ``{math}`` becomes ``$$``, cross-references become plain text, except those to the
  tensor toolkit, which become links to ``toolkit.ipynb`` (beside them) and its headings. Prose
  without MyST markup is copied verbatim. Before the setup cell comes an **install
  cell** that installs the course package when ``import attention_course`` fails
  (from ``$ATTENTION_COURSE_SOURCE`` when set, otherwise from the repository named
  by ``repository.url`` in ``_config.yml``) and does nothing otherwise.
* **myst** (``portable=False``): the student edition of the site is built from it
  (:mod:`attention_course.tools.editions`), so the site keeps its exercise boxes and
  footnoted citations. It has no install cell.

The tensor toolkit is released the same way: its MyST source ``solutions/toolkit.ipynb`` is a page
of the site, whose targets (``(toolkit-keepdim)=``) the chapters' references point at, and
``release`` writes its portable form, with no MyST markup left, to ``chapters/toolkit.ipynb``, beside
the chapters' student notebooks (:func:`toolkit_notebook`). That is the file a student opens.
"""
from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import nbformat

from .notebook import _CHECK_RE
from ..checks.registry import LABEL_RE as _LABEL_RE

BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"
SOLUTION_ONLY_TAG = "solution-only"
_EXERCISE_RE = re.compile(r"^(?:```+|:::+)\{exercise\}.*?$(?P<body>.*?)^\s*:label:\s*(?P<label>\S+)",
                          re.M | re.S)
_EXERCISE_OPEN_RE = re.compile(r"^(?:```+|:::+)\{exercise\}", re.M)
_SOLUTION_RE = re.compile(r"^\s*(?:```+|:::+)\{solution(?:-start|-end)?\}", re.M)
_DEF_RE = re.compile(r"^(?P<indent>\s*)(?:async\s+)?(?P<kind>def|class)\s+(?P<name>\w+)")


class ReleaseError(ValueError):
    """A solution notebook that cannot be turned into a student notebook."""


# A solution line this long that shows up anywhere in a student's material counts as
# a leak (shorter lines, like `return weights`, are too common to be telling).
DISTINCTIVE_LENGTH = 25


@dataclass
class Region:
    label: str
    cell_index: int  # 1-based, in the solution notebook
    code: str        # the solution lines, joined

    def distinctive_lines(self) -> list:
        """The region's stripped code lines long enough to identify the solution."""
        return distinctive_lines(self.code.splitlines())


def distinctive_lines(lines) -> list:
    """The stripped code lines of ``lines`` long enough to identify an answer (no comments)."""
    return [line.strip() for line in lines
            if len(line.strip()) >= DISTINCTIVE_LENGTH and not line.strip().startswith("#")]


def _src(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def chapter_number(path: Path) -> int:
    match = re.match(r"^(\d\d)_", Path(path).name)
    if not match:
        raise ReleaseError(f"{path}: a chapter notebook's name must start with its two-digit number, e.g. 03_scoring.ipynb")
    return int(match.group(1))


def _enclosing_name(lines: list, marker_line: int, marker_indent: int) -> Optional[str]:
    # Walk up to the nearest def/class less indented than the marker, then to its class.
    names, limit = [], marker_indent
    for line in reversed(lines[:marker_line]):
        m = _DEF_RE.match(line)
        if m and len(m.group("indent")) < limit:
            names.append(m.group("name"))
            limit = len(m.group("indent"))
            if limit == 0:
                break
    return ".".join(reversed(names)) or None


def stub_code(source: str, label: str, where: str) -> tuple:
    """Replace the solution regions of one cell; return (new source, [region code])."""
    lines = source.split("\n")
    out, regions, inside, start = [], [], False, 0
    for number, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith(BEGIN):
            if inside:
                raise ReleaseError(f"{where}, line {number + 1}: nested '{BEGIN}' (the region opened on line {start + 1} is not closed)")
            inside, start = True, number
            indent = line[: len(line) - len(line.lstrip())]
            name = _enclosing_name(lines, number, len(indent))
            what = f"implement {name}" if name else "write your answer here"
            out.append(f'{indent}raise NotImplementedError("{label}: {what}")')
            region = []
        elif stripped.startswith(END):
            if not inside:
                raise ReleaseError(f"{where}, line {number + 1}: '{END}' without a matching '{BEGIN}'")
            inside = False
            regions.append("\n".join(region))
        elif inside:
            region.append(line)
        else:
            out.append(line)
    if inside:
        raise ReleaseError(f"{where}, line {start + 1}: '{BEGIN}' is never closed by '{END}'")
    return "\n".join(out), regions


# ---------------------------------------------------------------- course settings

DEFAULT_BRANCH = "main"
SOURCE_ENV = "ATTENTION_COURSE_SOURCE"
INSTALL_TAG = "install"


@dataclass
class CourseSettings:
    """What the generator reads from the course folder: the repository (one setting,
    ``repository.url`` in ``_config.yml``) and the bibliography."""
    repository_url: Optional[str] = None
    branch: str = DEFAULT_BRANCH
    bibfile: Optional[Path] = None

    @property
    def archive_url(self) -> Optional[str]:
        """Where pip can fetch the course without git (GitHub's archive of the branch)."""
        if not self.repository_url:
            return None
        return f"{self.repository_url.rstrip('/')}/archive/refs/heads/{self.branch}.zip"


def course_root(solution_path: Path) -> Optional[Path]:
    """The course folder of a solution notebook (``<root>/solutions/NN_slug.ipynb``)."""
    parent = Path(solution_path).resolve().parent
    return parent.parent if parent.name == "solutions" else None


def course_settings(root: Optional[Path]) -> CourseSettings:
    if root is None:
        return CourseSettings()
    root = Path(root)
    settings = CourseSettings(bibfile=root / "references.bib" if (root / "references.bib").exists() else None)
    config = root / "_config.yml"
    if config.exists():
        import yaml
        data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
        repo = data.get("repository") or {}
        settings.repository_url = repo.get("url") or None
        settings.branch = repo.get("branch") or DEFAULT_BRANCH
        bibs = data.get("bibtex_bibfiles") or []
        if bibs and (root / bibs[0]).exists():
            settings.bibfile = root / bibs[0]
    return settings


def install_cell_source(settings: CourseSettings) -> str:
    """The first code cell of a portable student notebook."""
    url = settings.archive_url
    lines = [
        "# Run this cell first. Outside the course's own environment (Colab, Binder, a fresh",
        "# virtual environment) it installs the course package; where the package is already",
        f"# installed it does nothing. Set {SOURCE_ENV} to a folder (a copy of the course) or",
        "# any pip requirement to install from there instead of the course's repository.",
        "try:",
        "    import attention_course",
        "except ImportError:",
        "    import importlib, os, subprocess, sys",
    ]
    if url:
        lines.append(f'    source = os.environ.get("{SOURCE_ENV}") or "{url}"')
    else:
        lines += [f'    source = os.environ.get("{SOURCE_ENV}")',
                  "    if not source:",
                  f'        raise ImportError("the course package is missing: set {SOURCE_ENV} to a copy of the course")']
    lines += [
        '    print(f"installing the course package from {source} ...", flush=True)',
        '    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", source])',
        "    importlib.invalidate_caches()",
        "    import attention_course",
        '    print(f"installed attention_course {attention_course.__version__}")',
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------- bibliography

def _latex_text(value: str) -> str:
    import codecs

    import latexcodec  # noqa: F401 - registers the "ulatex" codec (a dependency of pybtex)
    text = codecs.decode(str(value), "ulatex")
    return re.sub(r"\s+", " ", text.replace("{", "").replace("}", "").replace("\xa0", " ")).strip()


class Bibliography:
    """The entries of ``references.bib``, formatted as plain Markdown."""

    def __init__(self, path: Optional[Path]):
        self.path = path
        self.entries = {}
        if path is not None:
            from pybtex.database import parse_file
            self.entries = dict(parse_file(str(path)).entries)

    def _entry(self, key: str, where: str):
        if key not in self.entries:
            raise ReleaseError(f"{where}: citation key {key!r} is not in "
                               f"{self.path.name if self.path else 'references.bib'}")
        return self.entries[key]

    @staticmethod
    def _last(person) -> str:
        return _latex_text(" ".join(person.prelast_names + person.last_names))

    def _people(self, entry) -> list:
        return entry.persons.get("author") or entry.persons.get("editor") or []

    def short_authors(self, key: str, where: str) -> str:
        entry = self._entry(key, where)
        people = self._people(entry)
        if not people:
            return _latex_text(entry.fields.get("institution") or entry.fields.get("title", key))
        if len(people) == 1:
            return self._last(people[0])
        if len(people) == 2:
            return f"{self._last(people[0])} and {self._last(people[1])}"
        return f"{self._last(people[0])} et al."

    def year(self, key: str, where: str) -> str:
        return _latex_text(self._entry(key, where).fields.get("year", "n.d."))

    def cite(self, keys: list, textual: bool, where: str) -> str:
        if textual:
            parts = [f"{self.short_authors(k, where)} ({self.year(k, where)})" for k in keys]
            return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
        return "(" + "; ".join(f"{self.short_authors(k, where)}, {self.year(k, where)}" for k in keys) + ")"

    def sort_key(self, key: str) -> tuple:
        entry = self._entry(key, "references")
        people = self._people(entry)
        return (self._last(people[0]).lower() if people else "", entry.fields.get("year", ""), key)

    def reference(self, key: str, where: str) -> str:
        """One entry of a reference list: authors (year). Title. *Venue*, details."""
        entry = self._entry(key, where)
        fields = {name: _latex_text(value) for name, value in entry.fields.items()}

        def name(person) -> str:
            initials = " ".join("-".join(f"{part[0]}." for part in _latex_text(n).split("-") if part)
                                for n in person.first_names + person.middle_names if _latex_text(n))
            return f"{self._last(person)}, {initials}" if initials else self._last(person)

        names = [name(p) for p in self._people(entry)]
        if len(names) > 2:
            authors = ", ".join(names[:-1]) + ", and " + names[-1]
        else:
            authors = " and ".join(names) or fields.get("institution", "")
        title = fields.get("title", key).rstrip(".")
        venue = fields.get("journal") or fields.get("booktitle")
        details = []
        if venue:
            details.append(("In " if "booktitle" in fields and "journal" not in fields else "") + f"*{venue}*")
        if fields.get("volume"):
            details.append(fields["volume"] + (f"({fields['number']})" if fields.get("number") else ""))
        if fields.get("pages"):
            details.append(fields["pages"])
        if not venue:
            details += [fields[f] for f in ("publisher", "institution", "address") if fields.get(f)]
        text = f"{authors} ({fields.get('year', 'n.d.')}). {title}."
        if details:
            text += " " + ", ".join(details) + "."
        url = fields.get("url") or (f"https://doi.org/{fields['doi']}" if fields.get("doi") else None)
        if url:
            text += f" <{url}>"
        return text


# ---------------------------------------------------------------- portable Markdown

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
        for match in _EXERCISE_RE.finditer(source):
            label = match.group("label")
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


# The tensor toolkit has two forms, as a chapter does: its MyST source, a page of the site beside the
# chapters (its `(toolkit-…)=` targets are what the chapters' {ref}s point at), and the portable
# notebook a student opens, generated by `release` into chapters/ beside the chapters' student
# notebooks (in the course and in a student release), with the targets converted away like a chapter's.
TOOLKIT = "chapters/toolkit.ipynb"
TOOLKIT_SOURCE = "solutions/toolkit.ipynb"


def toolkit_notebook(root: Path, portable: bool = True, settings: Optional[CourseSettings] = None) -> str:
    """The text of the tensor toolkit as students get it (``portable``: Markdown without MyST
    markup, references to chapters as plain text) or, with ``portable=False``, its MyST source."""
    path = Path(root) / TOOLKIT_SOURCE
    try:
        nb = nbformat.read(str(path), as_version=4)
    except Exception as error:  # missing, malformed JSON or nbformat
        raise ReleaseError(f"{path}: cannot be read as a notebook ({error})") from error
    if portable:
        nb.cells = _make_portable(nb.cells, str(path), settings or course_settings(Path(root)))
    return render(nb)


@functools.lru_cache(maxsize=1)
def _toolkit_anchors() -> dict:
    """``toolkit-…`` target -> the anchor a notebook client gives the heading after it (JupyterLab
    and Jupyter Notebook: the heading's text with spaces turned into hyphens)."""
    path = Path(__file__).resolve().parents[2] / TOOLKIT_SOURCE
    anchors: dict = {}
    try:
        cells = nbformat.read(str(path), as_version=4).cells
    except (OSError, ValueError):
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


def release_notebook(nb, path: Path, registered: Optional[set] = None, portable: bool = True,
                     settings: Optional[CourseSettings] = None):
    """Return ``(student_notebook, regions)`` for the solution notebook ``nb``.

    ``portable`` (default) gives the form written to ``chapters/``: Markdown without
    MyST markup and an install cell before the setup cell; ``portable=False`` the
    MyST form the student edition of the site is built from. ``settings`` (the
    repository and the bibliography) default to those of the course folder that
    holds ``path``.
    """
    path = Path(path)
    if settings is None:
        settings = course_settings(course_root(path))
    chapter = chapter_number(path)
    student = copy.deepcopy(nb)
    cells, regions = [], []
    seen: dict = {}
    checked: set = set()
    current: Optional[str] = None
    for index, cell in enumerate(nb.cells, start=1):
        where = f"{path}, cell {index}"
        source = _src(cell)
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.cell_type == "markdown":
            for match in _EXERCISE_RE.finditer(source):
                label = match.group("label")
                m = _LABEL_RE.match(label)
                if not m:
                    raise ReleaseError(f"{where}: exercise label {label!r} is not of the form chNN_exM")
                if int(m.group(1)) != chapter:
                    raise ReleaseError(f"{where}: exercise label {label!r} belongs to chapter {m.group(1)}, not {chapter:02d}")
                if label in seen:
                    raise ReleaseError(f"{where}: exercise label {label!r} is used twice (first in cell {seen[label]})")
                seen[label] = index
                current = label
            if len(_EXERCISE_OPEN_RE.findall(source)) != len(_EXERCISE_RE.findall(source)):
                raise ReleaseError(f"{where}: an {{exercise}} directive has no ':label: chNN_exM' option")
            if _SOLUTION_RE.search(source):
                if not _SOLUTION_RE.match(source.lstrip("\n")) or _EXERCISE_OPEN_RE.search(source):
                    raise ReleaseError(f"{where}: a markdown cell mixes a solution directive with other text; "
                                       "put the solution directive in a cell of its own")
                continue  # solution-only markdown
        if SOLUTION_ONLY_TAG in tags:
            continue
        new = copy.deepcopy(cell)
        if cell.cell_type == "code":
            checked.update(_CHECK_RE.findall(source))
            if BEGIN in source or END in source:
                if current is None:
                    raise ReleaseError(f"{where}: a solution region outside any exercise (add an {{exercise}} directive with a label above it)")
                new_source, found = stub_code(source, current, where)
                new.source = new_source
                regions.extend(Region(current, index, code) for code in found)
            if current is not None:
                new.outputs = []
                new.execution_count = None
                new.metadata.pop("execution", None)
        cells.append(new)
    for label, index in seen.items():
        if label not in checked:
            raise ReleaseError(f"{path}, cell {index}: exercise {label} has no check cell "
                               f"(add a code cell calling check(\"{label}\", ...))")
    if registered is not None:
        chapter_labels = {lab for lab in registered if int(_LABEL_RE.match(lab).group(1)) == chapter}
        unknown = sorted(set(seen) - set(registered))
        if unknown:
            raise ReleaseError(f"{path}: exercise label(s) {', '.join(unknown)} are not registered in "
                               f"attention_course.exercises (no checks exist for them)")
        missing = sorted(chapter_labels - set(seen))
        if missing:
            raise ReleaseError(f"{path}: registered exercise(s) {', '.join(missing)} have no {{exercise}} directive in this notebook")
    if portable:
        cells = _make_portable(cells, str(path), settings)
    student.cells = cells
    return student, regions


def _make_portable(cells: list, where: str, settings: CourseSettings) -> list:
    ctx = _collect(cells, where, Bibliography(settings.bibfile))
    out = []
    for index, cell in enumerate(cells, start=1):
        if cell.cell_type == "markdown":
            ctx.where = f"{where}, cell {index}"
            cell.source = portable_markdown(_src(cell), ctx)
        if cell.cell_type == "code" and "setup" in cell.get("metadata", {}).get("tags", []) \
                and not any(INSTALL_TAG in c.get("metadata", {}).get("tags", []) for c in out):
            install = nbformat.v4.new_code_cell(install_cell_source(settings))
            install.metadata["tags"] = [INSTALL_TAG]
            install["id"] = "install-course-package"  # stable, so the file is too
            out.append(install)
        out.append(cell)
    return out


def render(nb) -> str:
    """The exact text a notebook is written as (stable, for committing and comparing)."""
    return nbformat.writes(nb) + "\n"


def solution_paths(root: Path, chapter: Optional[int] = None) -> list:
    paths = sorted((Path(root) / "solutions").glob("[0-9][0-9]_*.ipynb"))
    if chapter is not None:
        paths = [p for p in paths if chapter_number(p) == chapter]
        if not paths:
            raise ReleaseError(f"no solution notebook for chapter {chapter} in {Path(root) / 'solutions'}")
    return paths


def _registered() -> set:
    from ..checks.registry import all_exercises
    return {ex.label for ex in all_exercises()}


def generate(solution_path: Path, registered: Optional[set] = None, portable: bool = True) -> tuple:
    """Return ``(student_text, regions)`` for one solution notebook file (``portable``:
    see :func:`release_notebook`)."""
    solution_path = Path(solution_path)
    try:
        nb = nbformat.read(solution_path, as_version=4)
    except Exception as error:  # malformed JSON or nbformat
        raise ReleaseError(f"{solution_path}: cannot be read as a notebook ({error})") from error
    student, regions = release_notebook(nb, solution_path, registered, portable=portable)
    return render(student), regions


EXERCISE_INDEX = "exercises.md"


def exercise_index(root: Path) -> str:
    """The site's page listing every exercise by label, with links (generated)."""
    from ..checks.registry import all_exercises
    titles = {}
    for path in solution_paths(root):
        nb = nbformat.read(path, as_version=4)
        heading = next((line for c in nb.cells if c.cell_type == "markdown"
                        for line in _src(c).splitlines() if line.startswith("# ")), f"# {path.stem}")
        titles[chapter_number(path)] = (heading[2:].strip(), path.stem)
    lines = [
        "# All exercises",
        "",
        "<!-- Generated by `attention-course release` from the exercise registry; do not edit. -->",
        "",
        "Every exercise of the course, by label. The label is the same everywhere: on the",
        "exercise, in the error its stub raises, in its check cell `check(\"chNN_exM\", ...)`",
        "and in the gradebook.",
        "",
    ]
    from .course_config import active
    config = active()  # course.yml: the chapters released, the points, the practice exercises
    for chapter in sorted(titles):
        if not config.released(chapter):
            continue
        title, stem = titles[chapter]
        lines += [f"## {chapter}. {title}", "", "| label | exercise | you write | points |", "|---|---|---|---|"]
        for ex in all_exercises(chapter):
            points = "practice" if ex.label in config.practice else f"{ex.points:g}"
            lines.append(f"| {{ref}}`{ex.label} <{ex.label}>` | {ex.title} | `{ex.name}` | {points} |")
        lines.append("")
    return "\n".join(lines)


def release(root: Path = Path("."), chapter: Optional[int] = None, check_only: bool = False) -> list:
    """Write (or, with ``check_only``, compare) the student notebooks, the portable tensor
    toolkit and the exercise index page.

    The index lists every chapter's exercises, so it is refreshed (or compared) with
    ``chapter`` too: releasing one chapter after adding an exercise leaves nothing stale.

    Returns the list of paths that were stale (changed or missing).
    """
    root = Path(root)
    registered = _registered()
    stale = []
    if (root / "_toc.yml").exists():
        index = root / EXERCISE_INDEX
        text = exercise_index(root)
        if not index.exists() or index.read_text(encoding="utf-8") != text:
            stale.append(index)
            if not check_only:
                index.write_text(text, encoding="utf-8")
    if (root / TOOLKIT_SOURCE).exists():  # every release refreshes it, as it does the index
        text = toolkit_notebook(root)
        target = root / TOOLKIT
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            stale.append(target)
            if not check_only:
                target.write_text(text, encoding="utf-8")
    for path in solution_paths(root, chapter):
        text, _ = generate(path, registered)
        target = root / "chapters" / path.name
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current != text:
            stale.append(target)
            if not check_only:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
    return stale
