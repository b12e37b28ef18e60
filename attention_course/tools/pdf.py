"""The whole course as one PDF, for reading offline or printing.

``attention-course pdf [--edition full|student] [--out course.pdf]`` prints every page of a built
site (``_build/html``), in the table of contents' order, with Debian's Chromium driven by
Playwright, after MathJax has typeset the equations and every folded solution is open (paper
cannot unfold anything) and every code line too long for the paper goes on in a next line that
starts with a grey continuation mark (``\u21aa``). It joins the pages into one book: a printed table of
contents with page numbers, every page numbered at its foot, bookmarks by chapter and section,
and every link of the site turned into a link to its page of the book (``pdf_links``). The full
edition carries the solutions; the student edition does not.

``python3 tasks.py pdf`` builds both sites first and writes ``_build/course.pdf`` and
``_build/course-student.pdf``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

CHROMIUM = "/usr/bin/chromium"
MARGIN_MM = {"top": 16, "bottom": 16, "left": 14, "right": 14}   # of every printed A4 page
MARGIN = {side: f"{mm}mm" for side, mm in MARGIN_MM.items()}
# The browser window is as wide as the printed lines (A4 less its margins, in CSS pixels), so that
# the code blocks' widths measured before printing are those of the paper.
LINE_WIDTH_PX = round((210 - MARGIN_MM["left"] - MARGIN_MM["right"]) / 25.4 * 96)

# Open what is folded (solutions, dropdowns) and wait for MathJax, before printing.
_PREPARE = """async () => {
  const style = document.createElement('style');
  style.textContent = '@media print { pre, pre code { white-space: pre-wrap !important; '
                    + 'overflow-wrap: anywhere; } .pdf-wrap { color: #888; } '
                    + 'h1, h2, h3, h4 { break-inside: avoid; break-after: avoid; } }';
  document.head.appendChild(style);
  for (const d of document.querySelectorAll('details')) d.open = true;
  for (const b of document.querySelectorAll('button.toggle-button')) {
    if (b.closest('.toggle-hidden') || b.getAttribute('aria-expanded') === 'false') b.click();
  }
  for (const t of document.querySelectorAll('.toggle-hidden')) t.classList.remove('toggle-hidden');
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  // Paper cannot scroll either: a display equation wider than the printed line is drawn smaller,
  // down to MIN_FIT of its size (at 0.55 MathJax's glyphs are still about 70 % of the text's).
  // The screen's rule (layout.css, --math-fit) stops at 0.75 and scrolls the rest; paper may not.
  const MIN_FIT = 0.55;
  let scaled = 0;
  const tooWide = [];
  for (const box of document.querySelectorAll('div.math')) {
    const math = box.querySelector('mjx-container > mjx-math');
    if (!math || !box.clientWidth) continue;
    const room = box.clientWidth - 2;
    const natural = math.getBoundingClientRect().width;
    if (natural > room) {
      const fit = Math.max(MIN_FIT, room / natural);
      math.style.fontSize = (100 * fit).toFixed(1) + '%';
      scaled += 1;
    }
    if (math.getBoundingClientRect().width > room + 1 || box.scrollWidth > box.clientWidth + 1) {
      tooWide.push((box.textContent || '').replace(/\\s+/g, ' ').trim().slice(0, 60));
    }
  }
  // Paper cannot scroll: a code line longer than its block goes on in the next line, which starts
  // with a grey continuation mark (the window is as wide as the printed lines: LINE_WIDTH_PX).
  let wrapped = 0;
  for (const pre of document.querySelectorAll('pre')) {
    const inner = pre.querySelector('code') || pre;
    const probe = document.createElement('span');
    probe.textContent = 'M'.repeat(50);
    inner.appendChild(probe);
    const glyph = probe.getBoundingClientRect().width / 50;
    probe.remove();
    const cs = getComputedStyle(pre);
    const room = pre.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
    const limit = Math.floor(room / glyph) - 1;
    if (!(glyph > 0) || limit < 20) continue;
    const texts = [];
    const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) texts.push(walker.currentNode);
    // Where the next lines start: after a space, comma or opening parenthesis among the last 16
    // columns that fit, else at the last column that fits.
    const breaks = new Set();
    let start = 0;
    for (const line of texts.map(n => n.data).join('').split('\\n')) {
      let from = 0, fits = limit;
      while (line.length - from > fits) {
        let cut = from + fits;
        for (let k = cut; k > from + fits - 16; k--) {
          if (' ,({'.includes(line[k - 1])) { cut = k; break; }
        }
        breaks.add(start + cut);
        from = cut;
        fits = limit - 2;   // the mark takes two columns
      }
      start += line.length + 1;
    }
    wrapped += breaks.size;
    let offset = 0;
    for (const node of texts) {
      const data = node.data, parts = [];
      let from = 0;
      for (let i = 0; i < data.length; i++) {
        if (!breaks.has(offset + i)) continue;
        parts.push(data.slice(from, i) + '\\n');
        const mark = document.createElement('span');
        mark.className = 'pdf-wrap';
        mark.setAttribute('aria-hidden', 'true');
        mark.textContent = '\\u21aa ';
        parts.push(mark);
        from = i;
      }
      offset += data.length;
      if (parts.length === 0) continue;
      parts.push(data.slice(from));
      const fragment = document.createDocumentFragment();
      for (const part of parts) fragment.append(part);
      node.replaceWith(fragment);
    }
  }
  return {wrapped, scaled, tooWide};
}"""


# List the page's sections (level, text, anchor), and give every id that some link of the site
# points to a link of its own here (one invisible pixel in the corner), so that Chromium writes a
# named destination for it.
_ANCHORS = """(targets) => {
  const article = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  // A section's id moves to its heading: Chromium keeps a heading with the text after it, so a
  // section can begin at the foot of one page and its heading at the top of the next.
  for (const section of article.querySelectorAll('section[id]')) {
    const h = section.querySelector(':scope > h1, :scope > h2, :scope > h3, :scope > h4, :scope > h5, :scope > h6');
    if (h && !h.id) { h.id = section.id; section.removeAttribute('id'); }
  }
  const headings = [];
  for (const h of article.querySelectorAll('h1, h2')) {
    const copy = h.cloneNode(true);
    for (const x of copy.querySelectorAll('.headerlink')) x.remove();
    const anchor = h.id || null;
    headings.push([Number(h.tagName[1]), copy.textContent.replace(/\\s+/g, ' ').trim(), anchor]);
    if (anchor && !targets.includes(anchor)) targets.push(anchor);
  }
  const box = document.createElement('div');
  box.setAttribute('aria-hidden', 'true');
  box.style.cssText = 'position:absolute;left:0;top:0;width:1px;height:1px;';
  for (const id of targets) {
    const a = document.createElement('a');
    a.href = '#' + encodeURIComponent(id);
    a.style.cssText = 'position:absolute;left:0;top:0;width:1px;height:1px;display:block;';
    box.appendChild(a);
  }
  document.body.prepend(box);
  return headings;
}"""


class PdfError(RuntimeError):
    """The PDF cannot be made (no built site, no browser); the message says what to do."""


def reading_order(root: Path, html_dir: Path, edition: str = "full") -> list:
    """``[(title, html file)]``: the site's pages in the table of contents' order (the student
    edition has no instructor guide)."""
    import yaml
    toc = yaml.safe_load((Path(root) / "_toc.yml").read_text(encoding="utf-8"))
    files = [toc["root"]] + [entry["file"] for part in toc.get("parts", []) for entry in part["chapters"]]
    pages = []
    for name in files:
        if edition == "student":
            if name == "instructors":
                continue
            name = name.replace("solutions/", "chapters/")
        path = Path(html_dir) / f"{name}.html"
        if not path.exists():
            raise PdfError(f"{path} is missing: build the {edition} edition of the site first "
                           f"(`attention-course build --edition {edition}`)")
        pages.append(path)
    return pages


def make_pdf(root: Path, html_dir: Path, out: Path, edition: str = "full",
             executable: Optional[str] = None) -> dict:
    """Print the built site in ``html_dir`` into ``out``; return ``{"pages", "bookmarks", "sections",
    "links"}`` (the chapters' bookmarks, their sections' count, and what became of the links)."""
    import io
    import tempfile

    from playwright.sync_api import sync_playwright
    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import Fit

    from . import pdf_links

    executable = executable or CHROMIUM
    if not Path(executable).exists():
        raise PdfError(f"{executable} is missing: install Debian's chromium (`python3 tasks.py test` does)")
    pages = reading_order(root, html_dir, edition)
    anchors = pdf_links.anchor_links(pages)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    book_title = "Attention mechanisms, with exercises" + (" (student edition)" if edition == "student" else "")
    margin = MARGIN
    wrapped = 0  # code lines continued on a new line
    equations = {"scaled": 0, "too_wide": []}   # display equations drawn smaller to fit the line
    docs = []   # one per site page: path, title, its headings, its printed PDF, its anchors
    with sync_playwright() as p, tempfile.TemporaryDirectory() as scratch:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": LINE_WIDTH_PX, "height": 1100})
            page.emulate_media(media="print")

            def print_html(html: str, name: str, **options) -> bytes:
                path = Path(scratch) / name
                path.write_text(html, encoding="utf-8")
                page.goto(path.as_uri(), wait_until="load")
                return page.pdf(format="A4", outline=False, margin=margin, **options)

            for path in pages:
                page.goto(path.resolve().as_uri(), wait_until="load")
                prepared = page.evaluate(_PREPARE)
                wrapped += prepared["wrapped"]
                equations["scaled"] += prepared["scaled"]
                equations["too_wide"] += [f"{path.name}: {text}" for text in prepared["tooWide"]]
                headings = page.evaluate(_ANCHORS, anchors[path.resolve()])
                title = page.title().split("\u2014")[0].split(" | ")[0].strip() or path.stem
                data = page.pdf(format="A4", print_background=True, outline=False, margin=margin)
                reader = PdfReader(io.BytesIO(data))
                docs.append({"path": path.resolve(), "title": title, "headings": headings, "reader": reader,
                             "count": len(reader.pages), "dests": pdf_links.named_destinations(reader)})

            # The table of contents: printed once to learn its length, then with the page numbers.
            toc_pages, toc_pdf = 0, b""
            for _ in range(3):
                start = toc_pages
                entries = []
                for doc in docs:
                    doc["start"] = start
                    for level, text, anchor in _entries(doc):
                        spot = doc["dests"].get(anchor, (0, None, None)) if anchor else (0, None, None)
                        uri = doc["path"].as_uri() + (f"#{anchor}" if anchor else "")
                        entries.append((level, text, uri, start + spot[0] + 1))
                    start += doc["count"]
                toc_pdf = print_html(pdf_links.toc_html(entries, book_title), "contents.html")
                if len(PdfReader(io.BytesIO(toc_pdf)).pages) == toc_pages:
                    break
                toc_pages = len(PdfReader(io.BytesIO(toc_pdf)).pages)
            toc_reader = PdfReader(io.BytesIO(toc_pdf))
            total = toc_pages + sum(doc["count"] for doc in docs)
            numbers = print_html(pdf_links.numbers_html(total), "numbers.html", display_header_footer=True,
                                 header_template="<span></span>", footer_template=pdf_links.NUMBER_FOOTER)
        finally:
            browser.close()

    writer = PdfWriter()
    for sheet in toc_reader.pages:
        writer.add_page(sheet)
    for doc in docs:
        for sheet in doc["reader"].pages:
            writer.add_page(sheet)
    contents = {"path": Path(scratch) / "contents.html", "start": 0, "count": toc_pages, "dests": {}}
    links = pdf_links.rewrite_links(writer, [contents] + docs)
    pdf_links.stamp_numbers(writer, numbers)

    writer.add_outline_item(title="Contents", page_number=0)
    bookmarks, sections = ["Contents"], 0
    for doc in docs:
        chapter = writer.add_outline_item(title=doc["title"], page_number=doc["start"])
        bookmarks.append(doc["title"])
        for level, text, anchor in _entries(doc)[1:]:
            index, left, top = doc["dests"].get(anchor, (0, None, None))
            writer.add_outline_item(title=text, page_number=doc["start"] + index, parent=chapter,
                                    fit=Fit.xyz(left=left, top=top))
            sections += 1
    writer.add_metadata({"/Title": book_title})
    writer.page_mode = "/UseOutlines"
    with open(out, "wb") as f:
        writer.write(f)
    return {"pages": len(writer.pages), "bookmarks": bookmarks, "sections": sections, "links": links,
            "contents_pages": toc_pages, "wrapped": wrapped,
            "equations_scaled": equations["scaled"], "equations_too_wide": equations["too_wide"]}


def _entries(doc: dict) -> list:
    """``[(level, text, anchor)]`` of a printed page: its title (level 1), then its sections (level 2)."""
    entries = [(1, doc["title"], None)]
    entries += [(2, text, anchor) for level, text, anchor in doc["headings"] if level == 2 and anchor]
    return entries
