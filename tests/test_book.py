"""Both editions of the site build with Sphinx's warnings as errors (-W -n
--keep-going): no broken reference, no failing cell, no missing citation; the
student edition carries no solution anywhere in the built folder."""
import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from attention_course.tools.release import course_settings, generate, solution_paths

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ["Overview", "Prerequisites", "Summary", "Exercises", "References"]


def _sphinx_warnings(log: str) -> list:
    # The kernel's own log lines ("[IPKernelApp] WARNING | ...") are not Sphinx warnings.
    return [l for l in log.splitlines() if ("WARNING" in l or "ERROR" in l) and "[IPKernelApp]" not in l]


@pytest.mark.parametrize("edition", ["full", "student"])
def test_edition_builds_without_warnings(edition, full_site, student_site):
    status, log, html_dir = full_site if edition == "full" else student_site
    assert status == 0, log[-6000:]
    assert not _sphinx_warnings(log), _sphinx_warnings(log)[:20]
    for page in ["index.html", "bibliography.html", "exercises.html", "instructors.html"]:
        assert (html_dir / page).exists(), page
    folder = "solutions" if edition == "full" else "chapters"
    chapters = sorted((html_dir / folder).glob("[0-9][0-9]_*.html"))   # the toolkit's page sits beside them
    assert len(chapters) == len(solution_paths(ROOT))
    for page in chapters:
        text = page.read_text(encoding="utf-8")
        for section in SECTIONS:
            assert f">{section}<" in text, f"{page.name} lacks the {section} section"
        assert 'class="exercise' in text
        assert "<img" in text, f"{page.name} shows no figure"
        assert "Traceback" not in text, f"{page.name} shows a traceback"
        assert ('class="solution' in text) == (edition == "full")
        # The release generator's markers are not shown to readers.
        assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text, page.name


class _Text(HTMLParser):
    def __init__(self):
        super().__init__()
        self.parts = []

    def handle_data(self, data):
        self.parts.append(data)


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _searchable_text(path: Path) -> str:
    raw = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".html":
        parser = _Text()
        parser.feed(raw)
        # Highlighted code is split into <span>s: join the text back up.
        return _normalise("".join(parser.parts)) + "\n" + _normalise(html.unescape(raw))
    if path.suffix in (".ipynb", ".json"):
        try:
            return _normalise(json.dumps(json.loads(raw), ensure_ascii=False)) + _normalise(raw)
        except ValueError:
            return _normalise(raw)
    return _normalise(raw)


def _distinctive_solution_lines() -> list:
    lines = set()
    for path in solution_paths(ROOT):
        _, regions = generate(path)
        for region in regions:
            lines.update(_normalise(line) for line in region.distinctive_lines())
    return sorted(lines)


def test_student_edition_has_no_solution_anywhere(student_site):
    status, log, html_dir = student_site
    assert status == 0, log[-3000:]
    site = html_dir.parent.parent  # the whole output folder, not only html/
    lines = _distinctive_solution_lines()
    assert len(lines) > 50
    files = [p for p in site.rglob("*") if p.is_file()
             and p.suffix in (".html", ".js", ".json", ".ipynb", ".txt", ".md", ".py")
             and "_static" not in p.parts]
    assert any(p.name == "searchindex.js" for p in files)
    leaks = []
    for path in files:
        text = _searchable_text(path)
        leaks += [(path.relative_to(site), line) for line in lines if line in text]
        assert "# BEGIN SOLUTION" not in text, path
        assert "Solution to" not in text, path
    assert not leaks, leaks[:10]


@pytest.mark.parametrize("edition", ["full", "student"])
def test_both_editions_offer_the_portable_student_notebooks_for_download_and_launch(edition, full_site,
                                                                                   student_site):
    status, log, html_dir = full_site if edition == "full" else student_site
    assert status == 0, log[-3000:]
    folder = "solutions" if edition == "full" else "chapters"
    repository = course_settings(ROOT).repository_url.rstrip("/").split("github.com/")[1]
    for path in solution_paths(ROOT):
        page = (html_dir / folder / path.name).with_suffix(".html").read_text(encoding="utf-8")
        download = html_dir / "_sources" / folder / path.name
        assert f'href="../_sources/{folder}/{path.name}"' in page
        # What a reader downloads is the committed, portable student notebook (not the
        # MyST form the student pages are built from, nor the solution notebook).
        assert download.read_bytes() == (ROOT / "chapters" / path.name).read_bytes()
        launches = re.findall(r'href="(https://(?:mybinder\.org|colab\.research\.google\.com)[^"]+)"', page)
        assert len(launches) == 2, launches
        assert all(f"chapters/{path.name}" in url and "solutions/" not in url for url in launches)
        # The launch buttons come from the one repository setting of _config.yml.
        assert all(repository in url for url in launches), launches
    # The student pages keep the exercise boxes of the MyST form.
    if edition == "student":
        assert 'class="exercise' in (html_dir / "chapters" / solution_paths(ROOT)[0].name).with_suffix(".html") \
            .read_text(encoding="utf-8")



DOUBLED_WORD = re.compile(r"\bexercises?\s+exercise\b", re.IGNORECASE)


@pytest.mark.parametrize("edition", ["full", "student"])
def test_a_reference_to_an_exercise_never_shows_the_word_twice(edition, full_site, student_site):
    """A reference to an exercise renders as "Exercise 2.5": prose that writes "Exercise" or
    "exercise" before it shows "Exercise Exercise 2.5" (chapters 2, 3 and 4 once did)."""
    status, log, html_dir = full_site if edition == "full" else student_site
    assert status == 0, log[-3000:]
    doubled = []
    for page in sorted(html_dir.rglob("*.html")):
        parser = _Text()
        parser.feed(page.read_text(encoding="utf-8"))
        for match in DOUBLED_WORD.finditer(_normalise("".join(parser.parts))):
            doubled.append(f"{page.relative_to(html_dir)}: ...{match.group(0)}...")
    assert not doubled, doubled


@pytest.mark.parametrize("edition", ["full", "student"])
def test_the_chinese_pages_offer_and_launch_the_chinese_student_notebooks(edition, full_site, student_site):
    """Issue 45: a Chinese chapter page downloads the Chinese student notebook of chapters/zh/ and
    its launch buttons open that notebook."""
    status, log, html_dir = full_site if edition == "full" else student_site
    assert status == 0, log[-3000:]
    folder = "solutions" if edition == "full" else "chapters"
    zh = html_dir / "zh"
    for path in solution_paths(ROOT):
        page = (zh / folder / path.name).with_suffix(".html").read_text(encoding="utf-8")
        assert (zh / "_sources" / folder / path.name).read_bytes() == (ROOT / "chapters" / "zh" / path.name).read_bytes()
        launches = re.findall(r'href="(https://(?:mybinder\.org|colab\.research\.google\.com)[^"]+)"', page)
        assert len(launches) == 2 and all(f"chapters/zh/{path.name}" in url for url in launches), launches
