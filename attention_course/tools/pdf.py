"""The whole course as one PDF, for reading offline or printing.

``attention-course pdf [--edition full|student] [--out course.pdf]`` prints every page of a built
site (``_build/html``), in the table of contents' order, with Debian's Chromium driven by
Playwright, after MathJax has typeset the equations and every folded solution is open (paper
cannot unfold anything), then joins the pages into one file with a bookmark per page. The full
edition carries the solutions; the student edition does not.

``python3 tasks.py pdf`` builds the site first and writes ``_build/course.pdf``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

CHROMIUM = "/usr/bin/chromium"

# Open what is folded (solutions, dropdowns) and wait for MathJax, before printing.
_PREPARE = """async () => {
  const style = document.createElement('style');  // paper cannot scroll: long code lines wrap
  style.textContent = '@media print { pre, pre code { white-space: pre-wrap !important; '
                    + 'overflow-wrap: anywhere; } }';
  document.head.appendChild(style);
  for (const d of document.querySelectorAll('details')) d.open = true;
  for (const b of document.querySelectorAll('button.toggle-button')) {
    if (b.closest('.toggle-hidden') || b.getAttribute('aria-expanded') === 'false') b.click();
  }
  for (const t of document.querySelectorAll('.toggle-hidden')) t.classList.remove('toggle-hidden');
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  return document.querySelectorAll('mjx-container').length;
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
    """Print the built site in ``html_dir`` into ``out``; return {"pages": n, "bookmarks": [...]}."""
    from playwright.sync_api import sync_playwright
    from pypdf import PdfReader, PdfWriter

    executable = executable or CHROMIUM
    if not Path(executable).exists():
        raise PdfError(f"{executable} is missing: install Debian's chromium (`python3 tasks.py test` does)")
    pages = reading_order(root, html_dir, edition)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    writer, bookmarks = PdfWriter(), []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.emulate_media(media="print")
            for path in pages:
                page.goto(path.resolve().as_uri(), wait_until="load")
                page.evaluate(_PREPARE)
                title = page.title().split("\u2014")[0].split(" | ")[0].strip() or path.stem
                data = page.pdf(format="A4", print_background=True, outline=False,
                                margin={"top": "16mm", "bottom": "16mm", "left": "14mm", "right": "14mm"})
                import io
                reader = PdfReader(io.BytesIO(data))
                start = len(writer.pages)
                for sheet in reader.pages:
                    writer.add_page(sheet)
                writer.add_outline_item(title=title, page_number=start)
                bookmarks.append(title)
        finally:
            browser.close()
    writer.add_metadata({"/Title": "Attention mechanisms, with exercises"
                         + (" (student edition)" if edition == "student" else "")})
    with open(out, "wb") as f:
        writer.write(f)
    return {"pages": len(writer.pages), "bookmarks": bookmarks}
