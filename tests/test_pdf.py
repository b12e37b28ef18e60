"""The offline PDF: every page of the site in reading order, equations typeset, solutions open.

``attention-course pdf`` prints a built site with Debian's Chromium; this test prints the full
edition that tests/test_book.py builds, and reads the PDF back with pypdf.
"""
from pathlib import Path

import pytest
from pypdf import PdfReader

from attention_course.tools.pdf import PdfError, make_pdf, reading_order
from attention_course.tools.release import solution_paths

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def course_pdf(full_site, tmp_path_factory):
    status, log, html_dir = full_site
    assert status == 0, log[-3000:]
    out = tmp_path_factory.mktemp("pdf") / "course.pdf"
    info = make_pdf(ROOT, html_dir, out)
    return info, PdfReader(str(out)), html_dir


def test_the_pdf_holds_every_page_in_reading_order(course_pdf):
    info, reader, html_dir = course_pdf
    chapters = solution_paths(ROOT)
    titles = [item.title for item in reader.outline]
    assert len(titles) == len(reading_order(ROOT, html_dir)) == len(chapters) + 5  # intro, toolkit, exercises, instructors, bibliography
    assert titles == info["bookmarks"]
    text = [page.extract_text() for page in reader.pages]
    starts = [reader.get_destination_page_number(item) for item in reader.outline]
    assert starts == sorted(starts) and len(reader.pages) > 2 * len(chapters)
    for path, start, end in zip(chapters, starts[1:], starts[2:] + [len(reader.pages)]):
        body = " ".join(text[start:end])
        assert "Exercises" in body and "References" in body, path.name
        assert f"ch{path.stem[:2]}_ex1" in body, path.name       # its check cells, in its own pages


def test_equations_are_typeset_and_solutions_open(course_pdf):
    _, reader, _ = course_pdf
    text = " ".join(page.extract_text() for page in reader.pages)
    assert "\\frac" not in text and "$$" not in text          # MathJax ran: no TeX source left
    assert "# BEGIN SOLUTION" not in text
    assert text.count("Solution to") >= 10                     # folded solutions printed open


def test_a_missing_site_is_a_clear_error(tmp_path):
    with pytest.raises(PdfError, match="build the full edition"):
        reading_order(ROOT, tmp_path)
