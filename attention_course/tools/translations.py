"""Translations of the course's prose: gettext catalogs kept in step with the English source.

English is the source language. Each other language has one folder, ``locales/<lang>/LC_MESSAGES/``,
with one catalog (``.po``) per page: ``01_queries_keys_values.po`` … ``11_triton_kernel.po``,
``toolkit.po`` (the solution notebooks' Markdown cells), ``intro.po``, ``exercises.po``,
``bibliography.po`` and ``instructors.po`` (the Markdown pages). The package's own strings (check
lines, hints, progress, the grader's feedback) are in ``attention_course/locales/<lang>.po``
(:mod:`attention_course.checks.language`), so that a student's installed package carries them.

**The unit** is a block of Markdown: the text between blank lines, a fenced block of code or a
``$$`` display equation kept whole. A block with nothing to translate (code, an equation, a label
line, a directive's closing fence) is not in the catalog and is copied as it is. A directive's
fence and option lines (````` ```{exercise} Title `````, ``:label: ch03_ex1``) stay in their block,
so a translator sees them and keeps them: :func:`markup_problems` checks that a translation keeps
every code span, equation, role target, link target, label and option line of its English.

**Kept in step by construction.** A gettext entry *is* the English it was made from (its
``msgid``). ``attention-course translations update`` re-reads the source: an entry whose English
is unchanged keeps its translation; an entry whose English changed is marked *fuzzy* with the old
English beside it (``#| msgid``), so the translator sees the difference; an entry whose English
left the source becomes obsolete (``#~``); a new block gets an empty entry. :func:`problems`
lists every missing, fuzzy (stale), obsolete or malformed entry by catalog, file and cell, and
``tests/test_translations.py`` fails while any remains. A page built in a language uses only
non-fuzzy translations; anything else shows its English.
"""
from __future__ import annotations

import hashlib
import re
from collections import Counter
from pathlib import Path
from typing import Optional

LANGUAGES = ("zh",)
LOCALES = "locales"
# Markdown pages translated besides the solution notebooks (their catalogs are named by stem).
PAGES = ("intro.md", "exercises.md", "bibliography.md", "instructors.md")

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
_MATH_END = re.compile(r"\$\$\s*(\([\w:.-]+\))?\s*$")
_STRUCTURE = re.compile(r"^\s*(`{3,}|~{3,}|:{3,}|:[\w-]+:|\([\w:.-]+\)=\s*$)")


# ------------------------------------------------------------------------------- blocks and units

def _classified(lines: list):
    """Each line with what it belongs to: ``"code"`` (a code fence, its fence lines included),
    ``"math"`` (a ``$$`` display equation), ``"directive"`` (a directive's opening fence, whose
    title is prose) or ``"text"``. One reading of fences and equations for :func:`blocks` and
    :func:`_prose_of`."""
    fence: Optional[str] = None
    in_math = False
    for line in lines:
        match = _FENCE.match(line)
        if fence is not None:
            if match and match.group(2)[0] == fence[0] and len(match.group(2)) >= len(fence) \
                    and not match.group(3).strip():
                fence = None
            yield line, "code"
        elif in_math:
            in_math = not _MATH_END.search(line)
            yield line, "math"
        elif match and not match.group(3).strip().startswith("{"):
            fence = match.group(2)  # a code fence; a directive's fence holds prose and is not kept whole
            yield line, "code"
        elif line.lstrip().startswith("$$"):
            in_math = not _MATH_END.search(line.strip()[2:])
            yield line, "math"
        else:
            yield line, "directive" if match else "text"


def blocks(text: str) -> list:
    """Split Markdown into ``(kind, text)`` pieces, ``kind`` "block" or "gap" (blank lines);
    joining the texts gives ``text`` back. Code fences (not directives) and ``$$`` equations are
    kept whole even across blank lines."""
    out, current, gap = [], [], []

    def flush(lines: list, kind: str):
        if lines:
            out.append((kind, "\n".join(lines)))
            lines.clear()

    for line, kind in _classified(text.split("\n")):
        if kind == "text" and line.strip() == "":
            flush(current, "block")
            gap.append(line)
        else:
            flush(gap, "gap")
            current.append(line)
    flush(current, "block")
    flush(gap, "gap")
    # Joining pieces with "\n" between them restores the text (a gap holds its blank lines).
    return out


def join(pieces: list) -> str:
    return "\n".join(text for _, text in pieces)


def _prose_of(block: str) -> str:
    """What is left of a block to translate: no code fence, display equation or structure line."""
    kept = []
    for line, kind in _classified(block.split("\n")):
        if kind == "directive":  # its title is prose, an exercise label is not
            title = re.sub(r"^\s*[`~]{3,}\{[^}]*\}", "", line)
            if not re.fullmatch(r"\s*ch\d\d_ex\d+\s*", title):
                kept.append(title)
        elif kind == "text" and not _STRUCTURE.match(line):
            kept.append(line)
    text = "\n".join(kept)
    text = re.sub(r"`[^`]*`", "", text)
    text = re.sub(r"\$[^$]*\$", "", text)
    text = re.sub(r"<[^>]*>", "", text)
    return text


def translatable(block: str) -> bool:
    """Whether a block has words to translate (two letters in a row outside code and math)."""
    return re.search(r"[A-Za-z]{2,}", _prose_of(block)) is not None


def units(text: str) -> list:
    """The translatable blocks of a Markdown text, in order."""
    return [b for kind, b in blocks(text) if kind == "block" and translatable(b)]


def translate_markdown(text: str, table: dict, missing: Optional[list] = None) -> str:
    """``text`` with each translatable block replaced by its translation in ``table`` (English ->
    translation); a block without one stays English and is appended to ``missing``."""
    pieces = []
    for kind, piece in blocks(text):
        if kind == "block" and translatable(piece):
            if table.get(piece):
                piece = table[piece]
            elif missing is not None:
                missing.append(piece)
        pieces.append((kind, piece))
    return join(pieces)


# ------------------------------------------------------------------------------- sources

def domain_sources(root: Path) -> dict:
    """Catalog name -> list of (English unit, location) from the course's sources, in order.
    A location is ``solutions/NN_x.ipynb#<cell id>`` or ``page.md:<line>``."""
    import nbformat
    root = Path(root)
    out = {}
    for path in sorted((root / "solutions").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        entries = []
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "markdown":
                continue
            where = f"solutions/{path.name}#{cell.get('id') or index}"
            entries.extend((unit, where) for unit in units(cell.source))
        out[path.stem] = entries
    for name in PAGES:
        path = root / name
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        entries, line = [], 1
        for kind, piece in blocks(text):
            if kind == "block" and translatable(piece):
                entries.append((piece, f"{name}:{line}"))
            line += piece.count("\n") + 1
        out[Path(name).stem] = entries
    return out


def catalog_path(root: Path, lang: str, domain: str) -> Path:
    return Path(root) / LOCALES / lang / "LC_MESSAGES" / f"{domain}.po"


def _write(catalog, path: Path) -> None:
    import datetime
    from babel.messages.pofile import write_po
    path.parent.mkdir(parents=True, exist_ok=True)
    # A fixed header date and no format flags: a catalog changes only where its entries change.
    stamp = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    catalog.creation_date = catalog.revision_date = stamp
    catalog.fuzzy = False
    for message in list(catalog) + list(catalog.obsolete.values()):
        if message.id:
            message.flags = {flag for flag in message.flags if flag == "fuzzy"}
    with open(path, "wb") as stream:
        # width=0: no wrapping, so that a diff shows a changed line of a paragraph, not a re-wrap.
        write_po(stream, catalog, width=0, sort_output=False, include_previous=True, omit_header=False)


def read_catalog(path: Path):
    from babel.messages.pofile import read_po
    with open(path, "rb") as stream:
        return read_po(stream, abort_invalid=True)


def template(entries: list, lang: str, domain: str):
    from babel.messages.catalog import Catalog
    catalog = Catalog(locale=None, domain=domain, project="attention-course", version="",
                      header_comment="# The course's prose, from its English source "
                                     "(attention-course translations update).")
    for unit, where in entries:
        if unit in catalog:
            message = catalog[unit]
            if (where, None) not in message.locations:
                message.locations.append((where, None))
        else:
            catalog.add(unit, locations=[(where, None)])
    return catalog


def update(root: Path, lang: str, domains: Optional[list] = None) -> dict:
    """Bring ``lang``'s prose catalogs in step with the English source; return catalog ->
    counts of entries (``translated``, ``fuzzy``, ``missing``, ``obsolete``)."""
    from babel.messages.catalog import Catalog
    root = Path(root)
    report = {}
    for domain, entries in domain_sources(root).items():
        if domains and domain not in domains:
            continue
        path = catalog_path(root, lang, domain)
        with locked(path):
            catalog = read_catalog(path) if path.exists() else \
                Catalog(locale=lang, domain=domain, project="attention-course", version="")
            report[domain] = merge(catalog, template(entries, lang, domain), path)
    return report


def merge(catalog, tmpl, path: Path) -> dict:
    """Bring ``catalog`` in step with the English entries of ``tmpl``, write it, return its counts.
    An entry whose English changed turns fuzzy beside its old English; a translated entry whose
    English left stays as obsolete (#~) so a moved paragraph's translation can be reused; an
    untranslated one is dropped."""
    catalog.update(tmpl, no_fuzzy_matching=False, update_header_comment=True)
    for key in [k for k, m in catalog.obsolete.items() if not m.string]:
        del catalog.obsolete[key]
    _write(catalog, path)
    return counts(catalog)


def counts(catalog) -> dict:
    out = Counter(translated=0, fuzzy=0, missing=0)
    for message in catalog:
        if not message.id:
            continue
        if message.fuzzy:
            out["fuzzy"] += 1
        elif message.string:
            out["translated"] += 1
        else:
            out["missing"] += 1
    out["obsolete"] = len(catalog.obsolete)
    return dict(out)


def table(root: Path, lang: str, domain: str) -> dict:
    """English -> translation of one catalog's usable entries (translated, not fuzzy)."""
    path = catalog_path(root, lang, domain)
    if not path.exists():
        return {}
    return {m.id: m.string for m in read_catalog(path) if m.id and m.string and not m.fuzzy}


# ------------------------------------------------------------------------------- checks

_ROLE_TEXT = re.compile(r"(\{[\w:-]+\})`[^`<]*<([^`>\n]+)>`")
_ROLE_BARE = re.compile(r"(\{(?:doc|ref|numref)\})`([^`<>\n]+)`")

_SIGNATURE_PATTERNS = {
    # A role's shown text may be translated ({doc}`toolkit <toolkit>`), its target may not.
    "role target": re.compile(r"\{[\w:-]+\}<[^>\n]+>"),
    "code span": re.compile(r"`[^`]+`"),  # a span may wrap onto the next line in the English
    "equation": re.compile(r"\$\$.*?\$\$|\$[^$]+?\$", re.S),  # inline math may span a line break
    "link target": re.compile(r"\]\(([^)\s]+)\)"),
    "HTML tag": re.compile(r"</?[A-Za-z][\w-]*(?:\s[^<>${}\n]*)?/?>"),
    "footnote": re.compile(r"\[\^[^\]]+\]"),
}


def _structure_lines(text: str) -> list:
    out = []
    for line in text.split("\n"):
        match = _FENCE.match(line)
        if match:
            out.append((match.group(1) + match.group(2) + re.sub(r"^(\{[^}]*\}).*$", r"\1", match.group(3).strip())))
        elif _STRUCTURE.match(line):
            out.append(line.strip())
    return out


def markup_problems(english: str, translation: str) -> list:
    """What a translation lost or added of its English's markup (empty when it keeps it all)."""
    problems = []
    # {doc}`page` and {doc}`shown text <page>` name the same target: a translation may add the text.
    # Fence lines are compared on their own (below), not as code spans.
    def prepared(text):
        text = "\n".join(line for line in text.split("\n") if not _FENCE.match(line))
        return _ROLE_BARE.sub(r"\1<\2>", _ROLE_TEXT.sub(r"\1<\2>", text))

    english_roles, translation_roles = prepared(english), prepared(translation)
    def found(pattern, text):  # a line break inside a span or an equation is a space
        return Counter(re.sub(r"\s+", " ", x) for x in pattern.findall(text))

    for what, pattern in _SIGNATURE_PATTERNS.items():
        want = found(pattern, english_roles)
        got = found(pattern, translation_roles)
        if want != got:
            lost = list((want - got).elements())
            # Chinese word order may name a span of its English twice; a span the English lacks is new.
            added = [x for x in (got - want).elements() if x not in want]
            if not lost and not added:
                continue
            parts = []
            if lost:
                parts.append("lost " + ", ".join(repr(x) for x in lost[:4]))
            if added:
                parts.append("added " + ", ".join(repr(x) for x in added[:4]))
            problems.append(f"{what}: " + "; ".join(parts))
    if _structure_lines(english) != _structure_lines(translation):
        problems.append(f"label, fence or option lines differ: {_structure_lines(english)} "
                        f"became {_structure_lines(translation)}")
    headings = [len(m) for m in re.findall(r"^(#+) ", english, re.M)]
    if headings != [len(m) for m in re.findall(r"^(#+) ", translation, re.M)]:
        problems.append("headings differ in number or level")
    return problems


def problems(root: Path, lang: str) -> list:
    """Every missing, stale (fuzzy), obsolete or malformed entry of ``lang``'s prose catalogs, one
    line each, naming the catalog and where the English is (file and cell)."""
    root = Path(root)
    out = []
    sources = domain_sources(root)
    for domain, entries in sources.items():
        path = catalog_path(root, lang, domain)
        rel = path.relative_to(root)
        if not path.exists():
            out.append(f"{rel}: no catalog ({len(entries)} entries missing; run attention-course "
                       f"translations update)")
            continue
        catalog = read_catalog(path)
        out += catalog_problems(rel, catalog, dict(entries), markup_problems, "the English source")
    return out


def catalog_problems(rel, catalog, wanted: dict, check, source: str) -> list:
    """One catalog's problems: each wanted English (-> where it is) missing, stale (fuzzy), not
    translated or failing ``check(english, translation)``; entries whose English left ``source``;
    obsolete entries."""
    out = []
    for english, where in wanted.items():
        message = catalog.get(english)
        first = english.strip().split("\n")[0][:60]
        if message is None:
            out.append(f"{rel}: missing from the catalog ({where}): {first!r} (run attention-course "
                       f"translations update)")
        elif message.fuzzy:
            out.append(f"{rel}: stale, its English changed ({where}): {first!r}")
        elif not message.string:
            out.append(f"{rel}: not translated ({where}): {first!r}")
        else:
            out.extend(f"{rel}: ({where}): {first!r}: {problem}" for problem in check(english, message.string))
    for message in catalog:
        if message.id and message.id not in wanted:
            out.append(f"{rel}: no longer in {source}: {str(message.id)[:60]!r}")
    if catalog.obsolete:
        out.append(f"{rel}: {len(catalog.obsolete)} obsolete entries (#~); reuse them or delete them")
    return out


# ------------------------------------------------------------------------------- translators' files

def unit_key(english: str) -> str:
    """A short, stable name of an entry: the first 10 hex digits of its English's SHA-1."""
    return hashlib.sha1(english.encode("utf-8")).hexdigest()[:10]


def export(path: Path, only_missing: bool = True, where_prefixes: tuple = ()) -> str:
    """A plain file for a translator: ``=== <key> <location>`` then the English, per entry (those
    with a location starting with one of ``where_prefixes``, when given)."""
    chunks = []
    for message in read_catalog(path):
        if not message.id or (only_missing and message.string and not message.fuzzy):
            continue
        where = " ".join(loc for loc, _ in message.locations)
        if where_prefixes and not any(loc.startswith(where_prefixes) for loc, _ in message.locations):
            continue
        chunks.append(f"=== {unit_key(message.id)} {where}\n{message.id}\n")
    return "\n".join(chunks)


def import_translations(path: Path, text: str) -> tuple:
    """Fill a catalog from a translator's file (the format of :func:`export`, the translation in
    place of the English); return (entries filled, problems). Translators filling one catalog
    side by side take turns (a lock beside it)."""
    with locked(path):
        return _import_locked(path, text)


class locked:
    """Hold ``<catalog>.lock`` while a catalog is read, changed and written (translators and
    ``update`` may work on one catalog side by side)."""

    def __init__(self, path: Path):
        self.path = Path(str(path) + ".lock")

    def __enter__(self):
        import fcntl
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.stream = open(self.path, "w")
        fcntl.flock(self.stream, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        import fcntl
        fcntl.flock(self.stream, fcntl.LOCK_UN)
        self.stream.close()


def field_problems(english: str, translation: str) -> list:
    """What a translation of a package message lost: its numbered fields, its code spans."""
    field = re.compile(r"\{(\d+)\}")
    want, got = Counter(field.findall(english)), Counter(field.findall(translation))
    # A field right after a letter ("notebook{1}") is an English plural ending: Chinese drops it.
    for number in re.findall(r"[A-Za-z]\{(\d+)\}", english):
        if got[number] == 0:
            want[number] -= 1
    want = +want
    problems = []
    if want != got:
        problems.append(f"fields {sorted(want.elements())} became {sorted(got.elements())}")
    for span in re.findall(r"`[^`\n]+`", english):
        if span not in translation:
            problems.append(f"lost the code span {span}")
    return problems


def _import_locked(path: Path, text: str) -> tuple:
    catalog = read_catalog(path)
    by_key = {unit_key(m.id): m for m in catalog if m.id}
    filled, issues = 0, []
    for chunk in re.split(r"^=== ", text, flags=re.M)[1:]:
        head, _, body = chunk.partition("\n")
        key = head.split()[0] if head.split() else ""
        body = body.rstrip("\n")
        message = by_key.get(key)
        if message is None:
            issues.append(f"{key}: no entry with this key in {path.name}")
            continue
        problems_found = markup_problems(message.id, body) if path.stem != "attention_course" else \
            field_problems(message.id, body)
        if problems_found:
            issues.append(f"{key} ({' '.join(loc for loc, _ in message.locations)}): " + "; ".join(problems_found))
            continue
        message.string = body
        message.flags.discard("fuzzy")
        message.previous_id = []
        filled += 1
    _write(catalog, path)
    return filled, issues


# ------------------------------------------------------------------------------- glossary

def glossary(root: Path, lang: str) -> list:
    """The glossary's rows: dicts with ``english`` (alternatives split on ``|``), ``target``,
    ``forbidden`` (a list) and ``strict`` (the term must appear wherever its English does)."""
    import csv
    path = Path(root) / LOCALES / lang / "glossary.csv"
    rows = []
    with open(path, encoding="utf-8", newline="") as stream:
        for row in csv.DictReader(stream):
            rows.append({"english": [w.strip() for w in row["english"].split("|") if w.strip()],
                         "target": row["chinese"].strip(),
                         "forbidden": [w.strip() for w in (row.get("forbidden") or "").split("|") if w.strip()],
                         "strict": (row.get("strict") or "").strip() == "yes"})
    return rows


def _english_words(text: str) -> str:
    """The prose of a unit for term matching: no code, equation, link target or HTML."""
    text = _prose_of(text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return text


def glossary_problems_of(english: str, translation: str, rows: list) -> list:
    out = []
    words = _english_words(english)
    squeezed = re.sub(r"\s+", "", translation)
    for row in rows:
        for bad in row["forbidden"]:
            if re.sub(r"\s+", "", bad) in squeezed:
                out.append(f"uses {bad!r}; the glossary says {row['target']!r} for {row['english'][0]!r}")
        if row["strict"] and any(re.search(r"(?<![\w-])" + re.escape(term) + r"(?![\w-])", words, re.I)
                                 for term in row["english"]):
            if re.sub(r"\s+", "", row["target"]).lower() not in squeezed.lower():
                out.append(f"{row['english'][0]!r} should read {row['target']!r}")
    return out


def glossary_problems(root: Path, lang: str, domains: Optional[list] = None) -> list:
    """Every translated entry that breaks the glossary (a forbidden variant, or a strict term's
    English without its fixed translation), by catalog and place."""
    rows = glossary(root, lang)
    out = []
    paths = sorted((Path(root) / LOCALES / lang / "LC_MESSAGES").glob("*.po"))
    for path in paths:
        if domains and path.stem not in domains:
            continue
        for message in read_catalog(path):
            if not message.id or not message.string or message.fuzzy:
                continue
            for problem in glossary_problems_of(message.id, message.string, rows):
                where = " ".join(loc for loc, _ in message.locations)
                out.append(f"{path.name} ({where}, {unit_key(message.id)}): {problem}")
    return out
