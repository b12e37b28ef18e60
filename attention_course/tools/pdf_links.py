"""The joined PDF's navigation: where every anchor lands, links that go there, bookmarks, page numbers.

Chromium prints each site page to its own PDF. A link inside one page comes out as a GoTo to a
named destination of that page's PDF, and a link to another page as a ``file://`` URI of the
machine that printed it; joining the PDFs keeps neither working. Chromium writes a named
destination only for an element that some link of the same page points to, so before printing,
``anchor_links`` lists, for every page, the ids the whole site links to, and the printer adds an
invisible one-pixel link to each (``HELPER_SIZE``; ``rewrite_links`` drops those again). After
joining, ``rewrite_links`` turns every link into an explicit destination in the joined file: the
named destination's page and height, or the first page of the target file when there is no anchor.
"""
from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

HELPER_SIZE = 2.0   # points: a link annotation no wider and higher than this is an anchor helper


class _Hrefs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def anchor_links(pages: list) -> dict:
    """``{html file: sorted ids}``: the fragments that links of any printed page point to, per
    target page (only targets that are themselves printed)."""
    printed = {Path(p).resolve() for p in pages}
    targets = {path: set() for path in printed}
    for page in printed:
        parser = _Hrefs()
        parser.feed(page.read_text(encoding="utf-8"))
        for href in parser.hrefs:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or not parts.fragment:
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target in targets:
                targets[target].add(unquote(parts.fragment))
    return {path: sorted(ids) for path, ids in targets.items()}


def _target(uri: str, page_of: dict):
    """``(printed html file, fragment)`` for a ``file://`` URI, or None when the file is not printed."""
    parts = urlsplit(uri)
    if parts.scheme != "file":
        return None
    path = Path(unquote(parts.path)).resolve()
    return (path, unquote(parts.fragment)) if path in page_of else None


def rewrite_links(writer, docs: list) -> dict:
    """Make every link of ``writer`` (the joined PDF) work inside it.

    ``docs``: one entry per printed page, in order: ``{"path", "start", "count", "dests"}`` with
    ``dests`` = ``{name: (page index in that print, left, top)}``. Returns counts: ``internal``
    (links that now go to a page of this file), ``external`` (web links, kept), ``dropped`` (links to
    local files the PDF does not hold, such as notebook downloads), ``unresolved`` (anchors without
    a destination, sent to their page's first page), ``helpers`` (removed anchor helpers)."""
    from pypdf.generic import ArrayObject, FloatObject, NameObject, NullObject

    page_of = {Path(d["path"]).resolve(): d for d in docs}
    counts = {"internal": 0, "external": 0, "dropped": 0, "unresolved": 0, "helpers": 0}

    def destination(doc, name):
        spot = doc["dests"].get(name) if name else None
        if spot is None:
            if name:
                counts["unresolved"] += 1
            index, left, top = 0, None, None
        else:
            index, left, top = spot
        target = writer.pages[doc["start"] + index].indirect_reference
        number = lambda v: NullObject() if v is None else FloatObject(v)   # noqa: E731
        return ArrayObject([target, NameObject("/XYZ"), number(left), number(top), NullObject()])

    for doc in docs:
        for index in range(doc["start"], doc["start"] + doc["count"]):
            page = writer.pages[index]
            if "/Annots" not in page:
                continue
            kept = ArrayObject()
            for ref in page["/Annots"]:
                annot = ref.get_object()
                if annot.get("/Subtype") != "/Link":
                    kept.append(ref)
                    continue
                x0, y0, x1, y1 = (float(v) for v in annot["/Rect"])
                if abs(x1 - x0) <= HELPER_SIZE and abs(y1 - y0) <= HELPER_SIZE:
                    counts["helpers"] += 1
                    continue
                if "/Dest" in annot:                        # a link inside its own page
                    name = str(annot["/Dest"]).lstrip("/")
                    annot[NameObject("/Dest")] = destination(doc, name)
                    counts["internal"] += 1
                    kept.append(ref)
                    continue
                uri = str(annot.get("/A", {}).get("/URI", ""))
                if not uri.startswith("file:"):
                    counts["external"] += 1
                    kept.append(ref)
                    continue
                found = _target(uri, page_of)
                if found is None:
                    counts["dropped"] += 1
                    continue
                del annot["/A"]
                annot[NameObject("/Dest")] = destination(page_of[found[0]], found[1])
                counts["internal"] += 1
                kept.append(ref)
            page[NameObject("/Annots")] = kept
    return counts


def named_destinations(reader) -> dict:
    """``{name: (page index, left, top)}`` of one printed page's PDF."""
    found = {}
    for name, dest in reader.named_destinations.items():
        try:
            index = reader.get_destination_page_number(dest)
        except Exception:   # a destination without a page: nothing to go to
            continue
        left = dest.left if dest.get("/Left") is not None else None
        top = dest.top if dest.get("/Top") is not None else None
        found[str(name).lstrip("/")] = (index, left, top)
    return found


def stamp_numbers(writer, numbers_pdf: bytes) -> None:
    """Lay page ``i`` of ``numbers_pdf`` (only a page number in its footer) over page ``i``."""
    import io

    from pypdf import PdfReader
    stamps = PdfReader(io.BytesIO(numbers_pdf))
    if len(stamps.pages) != len(writer.pages):
        raise RuntimeError(f"page numbers: {len(stamps.pages)} stamps for {len(writer.pages)} pages")
    for page, stamp in zip(writer.pages, stamps.pages):
        page.merge_page(stamp, over=True)


def numbers_html(count: int) -> str:
    """An HTML document of ``count`` empty pages (Chromium's footer template numbers them)."""
    sheets = '<div style="break-after: page; height: 1px"></div>' * (count - 1) + '<div style="height: 1px"></div>'
    return f"<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>{sheets}</body></html>"


NUMBER_FOOTER = ('<div style="width: 100%; font-size: 11pt; font-family: sans-serif; text-align: center; '
                 'color: #444;"><span class="pageNumber"></span></div>')


def toc_html(entries: list, title: str) -> str:
    """The printed table of contents: ``entries`` = ``[(level, text, uri, page number)]``; each line
    links to its section (``rewrite_links`` makes the ``file://`` links internal)."""
    from html import escape
    rows = []
    for level, text, uri, number in entries:
        rows.append(f'<li class="l{level}"><a href="{escape(uri)}"><span class="t">{escape(text)}</span>'
                    f'<span class="n">{number}</span></a></li>')
    style = """
      body { font-family: sans-serif; font-size: 10.5pt; }
      h1 { font-size: 20pt; margin: 0 0 8pt; } h2 { font-size: 14pt; margin: 0 0 14pt; color: #444; }
      ul { list-style: none; padding: 0; margin: 0; }
      li a { display: flex; color: inherit; text-decoration: none; padding: 1.5pt 0; }
      li .t { flex: 1; } li .n { min-width: 3em; text-align: right; }
      li.l1 { font-weight: bold; margin-top: 7pt; } li.l2 { padding-left: 1.6em; }
      li { break-inside: avoid; }"""
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Contents</title>"
            f"<style>{style}</style></head><body><h1>{escape(title)}</h1><h2>Contents</h2>"
            f"<ul>{''.join(rows)}</ul></body></html>")


def text_runs(page) -> tuple:
    """``(text, runs)`` of one PDF page: its text as pypdf extracts it, and ``[(left, right, baseline,
    text)]`` in points for every run of text drawn on it (right = left + the glyphs' advance widths,
    read from the font's width table; the runs' leading and trailing spaces are not counted)."""
    from pypdf.generic._font import Font

    fonts, runs = {}, []

    def visit(text, cm, tm, font_dict, size):
        if not text.strip() or font_dict is None:
            return
        key = id(font_dict)
        if key not in fonts:
            font = Font.from_font_resource(font_dict)
            widths = {}
            for code, width in font.character_widths.items():   # keyed by glyph code, not by character
                if code != "default":
                    char = font.character_map.get(code, code)
                    widths[char] = min(width, widths.get(char, width))
            fonts[key] = (widths, font.character_widths.get("default", 500))
        widths, default = fonts[key]
        left = tm[4] * cm[0] + tm[5] * cm[2] + cm[4]
        baseline = tm[4] * cm[1] + tm[5] * cm[3] + cm[5]
        scale = tm[0] * cm[0] + tm[1] * cm[2]
        advance = sum(widths.get(char, default) for char in text.strip()) / 1000 * size * scale
        runs.append((left, left + advance, baseline, text))

    return page.extract_text(visitor_text=visit), runs
