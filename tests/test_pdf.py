"""The offline PDF: every page of the site in reading order, equations typeset, solutions open,
and a book to navigate: page numbers, a printed table of contents, bookmarks per chapter and
section, and links that go to their target inside the file.

``attention-course pdf`` prints a built site with Debian's Chromium; this test prints the full
edition that conftest.py builds once per session (and the student edition it builds), and reads the
PDFs back with pypdf. Printing takes about a minute per edition on a busy 2-core machine.
"""
import re
import unicodedata
from pathlib import Path

import pytest
from pypdf import PdfReader

from attention_course.tools.pdf import CHROMIUM, LINE_WIDTH_PX, MARGIN, MARGIN_MM, PdfError, make_pdf, reading_order
from attention_course.tools.pdf_links import text_runs
from attention_course.tools.release import solution_paths

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def course_pdf(full_site, tmp_path_factory):
    status, log, html_dir = full_site
    assert status == 0, log[-3000:]
    out = tmp_path_factory.mktemp("pdf") / "course.pdf"
    info = make_pdf(ROOT, html_dir, out)
    return info, PdfReader(str(out)), html_dir


@pytest.fixture(scope="module")
def pages_read(course_pdf):
    """``[(text, runs)]`` per page: read once, as it takes a while (``text_runs``)."""
    return [text_runs(page) for page in course_pdf[1].pages]


@pytest.fixture(scope="module")
def page_texts(pages_read):
    """Each page's text, its ligatures (\ufb01 for "fi") written out."""
    return [unicodedata.normalize("NFKC", text) for text, _ in pages_read]


def _top_level(reader) -> list:
    return [item for item in reader.outline if not isinstance(item, list)]


def test_the_pdf_holds_every_page_in_reading_order(course_pdf, page_texts):
    info, reader, html_dir = course_pdf
    chapters = solution_paths(ROOT)
    titles = [item.title for item in _top_level(reader)]
    assert titles[0] == "Contents"
    assert len(titles) - 1 == len(reading_order(ROOT, html_dir)) == len(chapters) + 5  # intro, toolkit, exercises, instructors, bibliography
    assert titles == info["bookmarks"]
    text = page_texts
    starts = [reader.get_destination_page_number(item) for item in _top_level(reader)][1:]
    assert starts == sorted(starts) and len(reader.pages) > 2 * len(chapters)
    for path, start, end in zip(chapters, starts[1:], starts[2:] + [len(reader.pages)]):
        body = " ".join(text[start:end])
        assert "Exercises" in body and "References" in body, path.name
        assert f"ch{path.stem[:2]}_ex1" in body, path.name       # its check cells, in its own pages


def test_equations_are_typeset_and_solutions_open(page_texts):
    text = " ".join(page_texts)
    assert "\\frac" not in text and "$$" not in text          # MathJax ran: no TeX source left
    assert "# BEGIN SOLUTION" not in text
    assert text.count("Solution to") >= 10                     # folded solutions printed open


def test_a_missing_site_is_a_clear_error(tmp_path):
    with pytest.raises(PdfError, match="build the full edition"):
        reading_order(ROOT, tmp_path)


# ---- navigation: page numbers, contents, bookmarks, links --------------------------------------

def _links(reader) -> list:
    """``[(page index, annotation)]`` of every link annotation in the PDF."""
    return [(index, ref.get_object()) for index, page in enumerate(reader.pages)
            for ref in page.get("/Annots", []) if ref.get_object().get("/Subtype") == "/Link"]


def _target(reader, annot):
    """The page index an internal link goes to, or None when it is not an explicit destination
    to a page of this file."""
    dest = annot.get("/Dest")
    if not isinstance(dest, list) or not dest:
        return None
    if not hasattr(reader, "_page_index"):
        reader._page_index = {page.indirect_reference.idnum: index for index, page in enumerate(reader.pages)}
    return reader._page_index.get(getattr(dest[0], "idnum", None))


def _link_texts(page, reader, runs=None) -> list:
    """``[(text under the link, target page index)]`` for the internal links of one page: the text
    runs (``text_runs``, read here unless given) whose origin lies inside the link's rectangle."""
    runs = text_runs(page)[1] if runs is None else runs
    found = []
    for ref in page.get("/Annots", []):
        annot = ref.get_object()
        if annot.get("/Subtype") == "/Link" and "/Dest" in annot:
            x0, y0, x1, y1 = (float(v) for v in annot["/Rect"])
            text = "".join(t for x, _, y, t in runs if x0 - 1 <= x < x1 - 1 and y0 - 2 <= y <= y1 + 2)
            found.append((" ".join(text.split()), _target(reader, annot)))
    return found


def _check_links(reader) -> int:
    """Every link goes to a page of this file or to the web; returns the number of internal ones."""
    internal, broken = 0, []
    for index, annot in _links(reader):
        if "/Dest" in annot:
            if _target(reader, annot) is None:
                broken.append((index + 1, str(annot["/Dest"])))   # a named or dangling destination
            internal += 1
            continue
        uri = str(annot.get("/A", {}).get("/URI", ""))
        if not uri.startswith(("https://", "http://", "mailto:")):
            broken.append((index + 1, uri))                      # file:// of the printing machine
    assert not broken, f"{len(broken)} links go nowhere in the PDF, e.g. {broken[:5]}"
    return internal


def test_every_internal_link_goes_to_a_page_of_the_pdf(course_pdf, pages_read, page_texts):
    info, reader, _ = course_pdf
    internal = _check_links(reader)
    # Follow them: a link whose text is a section's title lands on the page with that heading, and
    # a citation's number on a page of references that lists it.
    titles = {" ".join(section.title.split()[1:]) for children in reader.outline if isinstance(children, list)
              for section in children}
    headings = citations = 0
    for index, page in enumerate(reader.pages):
        before = ""
        for text, target in _link_texts(page, reader, pages_read[index][1]):
            text = unicodedata.normalize("NFKC", text)
            words = " ".join(text.split()[1:]) if re.match(r"\d+\.\d+\.? ", text) else text
            if index >= info["contents_pages"] and words in titles:
                assert words in " ".join(page_texts[target].split()), (text, index + 1, target + 1)
                headings += 1
            elif before == "[" and text.isdigit():        # a citation: "[", "3", "]" are three links
                assert f"[{text}]" in "".join(page_texts[target].split()) and "References" in " ".join(
                    page_texts[max(0, target - 3):target + 1]), (text, index + 1, target + 1)
                citations += 1
            before = text
    assert headings >= 30 and citations >= 30, (headings, citations)
    # The site's pages hold over a thousand links between and inside pages (exercise labels,
    # citations, cross-references), and the contents add one per chapter and section.
    assert internal >= 1000 and internal == info["links"]["internal"]
    assert info["links"]["unresolved"] == 0     # every anchor had a destination, none fell back
    assert info["links"]["helpers"] > 0 and not any(
        abs(float(a["/Rect"][2]) - float(a["/Rect"][0])) <= 2 for _, a in _links(reader))


def test_every_page_is_numbered(course_pdf, pages_read):
    """Its number, centred in the bottom margin."""
    width = float(course_pdf[1].pages[0].mediabox.width)
    bottom = MARGIN_MM["bottom"] / 25.4 * 72
    unnumbered = [index + 1 for index, (_, runs) in enumerate(pages_read)
                  if not any(text.strip() == str(index + 1) and y < bottom and abs((left + right) / 2 - width / 2) < 10
                             for left, right, y, text in runs)]
    assert not unnumbered, f"pages without their number at the foot: {unnumbered[:10]}"


def test_bookmarks_by_chapter_and_section(course_pdf, page_texts):
    _, reader, _ = course_pdf
    outline, chapters = reader.outline, solution_paths(ROOT)
    numbered = {}
    for item, children in zip(outline, outline[1:] + [None]):
        match = re.match(r"(\d+)\. ", getattr(item, "title", ""))
        if match:
            assert isinstance(children, list), f"{item.title}: no section bookmarks"
            numbered[int(match.group(1))] = (item, children)
    assert sorted(numbered) == [int(path.stem[:2]) for path in chapters]
    for number, (item, sections) in numbered.items():
        start = reader.get_destination_page_number(item)
        pages = [reader.get_destination_page_number(section) for section in sections]
        assert len(sections) >= 4 and pages == sorted(pages) and pages[0] >= start, item.title
        for section, page in zip(sections, pages):
            assert section.title.startswith(f"{number}."), section.title
            words = " ".join(section.title.split()[1:3])          # the heading is on its page
            assert words in " ".join(page_texts[page].split()), (section.title, page + 1)


def test_the_contents_give_the_right_page_and_link_there(course_pdf):
    info, reader, _ = course_pdf
    lines = [entry for index in range(info["contents_pages"])
             for entry in _link_texts(reader.pages[index], reader)]
    assert len(lines) == len(info["bookmarks"]) - 1 + info["sections"]   # all but "Contents"
    for text, target in lines:
        printed = re.search(r"(\d+)$", text)
        assert printed and int(printed.group(1)) == target + 1, (text, target + 1)


def test_exercise_labels_link_to_their_chapter(course_pdf):
    _, reader, _ = course_pdf
    top = _top_level(reader)
    starts = {item.title: reader.get_destination_page_number(item) for item in top}
    spans, bounds = {}, [reader.get_destination_page_number(item) for item in top] + [len(reader.pages)]
    for item, start, end in zip(top, bounds, bounds[1:]):
        match = re.match(r"(\d+)\. ", item.title)
        if match:
            spans[int(match.group(1))] = range(start, end)
    labels = [(text, target) for index in range(starts["All exercises"], starts["Instructor guide"])
              for text, target in _link_texts(reader.pages[index], reader) if re.fullmatch(r"ch\d\d_ex\d+", text)]
    assert len(labels) >= 3 * len(spans)
    for text, target in labels:
        assert target in spans[int(text[2:4])], f"{text} goes to page {target + 1}"


def test_the_student_pdf_navigates_too(student_site, tmp_path):
    status, log, html_dir = student_site
    assert status == 0, log[-3000:]
    info = make_pdf(ROOT, html_dir, tmp_path / "course-student.pdf", edition="student")
    reader = PdfReader(str(tmp_path / "course-student.pdf"))
    assert _check_links(reader) == info["links"]["internal"] >= 900
    assert info["links"]["unresolved"] == 0 and "Instructor guide" not in info["bookmarks"]
    assert sum(isinstance(item, list) for item in reader.outline) >= len(solution_paths(ROOT))
    for index in range(0, len(reader.pages), 25):                 # a sample: reading every page is slow
        assert reader.pages[index].extract_text().strip().splitlines()[-1].strip() == str(index + 1)


# ---- nothing runs past the margin ---------------------------------------------------------------

def _past_margin(runs, width: float) -> list:
    edge = width - MARGIN_MM["right"] / 25.4 * 72 + 3        # points; 3 for rounding of the widths
    return [(round(right), text.strip()[-30:]) for left, right, _, text in runs if right > edge]


def test_no_text_runs_past_the_right_margin(course_pdf, pages_read):
    _, reader, _ = course_pdf
    width = float(reader.pages[0].mediabox.width)
    past = [(index + 1, run) for index, (_, runs) in enumerate(pages_read) for run in _past_margin(runs, width)]
    assert not past, f"{len(past)} runs of text cross the right margin, e.g. {past[:5]}"
    assert sum(len(runs) for _, runs in pages_read) > 20 * len(reader.pages)   # the runs were read


def test_long_code_lines_go_on_after_a_continuation_mark(course_pdf, page_texts, tmp_path):
    """A line too long for the paper: printed as the site has it, it runs past the margin; printed
    as ``make_pdf`` prints, it goes on in a next line that starts with the mark, and nothing is lost."""
    import io

    from playwright.sync_api import sync_playwright

    from attention_course.tools.pdf import _PREPARE
    line = "scores = " + " + ".join(f"weights[{i}] * values[{i}]" for i in range(14))
    html = tmp_path / "code.html"
    html.write_text(f"<!DOCTYPE html><html><head><style>pre {{ white-space: pre; font-size: 11pt; }}</style>"
                    f"</head><body><pre><code>{line}</code></pre></body></html>", encoding="utf-8")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": LINE_WIDTH_PX, "height": 800})
        page.emulate_media(media="print")
        page.goto(html.as_uri())
        raw = PdfReader(io.BytesIO(page.pdf(format="A4", margin=MARGIN))).pages[0]
        assert page.evaluate(_PREPARE)["wrapped"] >= 2
        printed = PdfReader(io.BytesIO(page.pdf(format="A4", margin=MARGIN))).pages[0]
        browser.close()
    width = float(raw.mediabox.width)
    assert _past_margin(text_runs(raw)[1], width)
    text, runs = text_runs(printed)
    assert not _past_margin(runs, width)
    lines = text.strip().splitlines()
    assert len(lines) >= 3 and all(later.startswith("\u21aa") for later in lines[1:]), lines
    assert "".join([lines[0]] + [later[1:].strip() for later in lines[1:]]).replace(" ", "") == line.replace(" ", "")
    # and the course's own code: its long lines carry the mark in the PDF
    assert sum(text.count("\u21aa") for text in page_texts) == course_pdf[0]["wrapped"] > 0


def test_wide_display_equations_are_drawn_to_fit_the_line(course_pdf):
    """Paper cannot scroll: chapter 9's block update (three formulas on one line) is wider than the
    printed line and was cut after its last plus sign; it is now drawn smaller, and nothing is left
    wider than the line."""
    info = course_pdf[0]
    assert info["equations_too_wide"] == []
    assert info["equations_scaled"] >= 1
