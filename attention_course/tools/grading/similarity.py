"""A similarity report for the instructor: pairs of submissions worth a second look.

For each exercise of a chapter, every pair of submitted exercise cells is compared with
copydetect (winnowed k-gram fingerprints, as in MOSS). Its Python tokenizer (pygments)
replaces every name by one letter and drops comments and whitespace, so renamed variables,
new comments and new formatting do not hide shared code. The student notebook's own stub
cell (signature, docstring, ``raise NotImplementedError``) is boilerplate: its fingerprints
are removed from every cell, so what every student received counts for nobody.

A pair is listed when each cell shares at least ``threshold`` of its remaining fingerprinted
code with the other (the smaller of the two directions), ranked by that smaller share. This is
a reason to look, not a verdict: independent correct answers to a short exercise can look alike.

Submissions are hostile input. They are read as data only (the grader's own notebook reading:
bounded file size, nbformat schema, text-only cells); nothing is executed. A cell longer than
:data:`MAX_CELL_CHARS` is skipped with a reason. Every text written to the HTML report is
escaped and the report carries no script.

Cost: all pairs per exercise, n(n-1)/2 comparisons. Measured on one core: about 14 ms to
fingerprint a cell and 0.44 ms to compare a pair of chapter-1 cells, so 300 students make
44 850 pairs, about 25 s per exercise (a few minutes for a chapter); 50 students, about a second.

The winnowing is Schleimer, Wilkerson and Aiken's (SIGMOD 2003), the method behind MOSS.
"""
from __future__ import annotations

import csv
import html
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..notebook import NotebookError, exercise_code, load_cells
from ...checks.registry import all_exercises
from .formats import csv_safe
from .grader import MAX_NOTEBOOK_BYTES, Submission

SIMILARITY_HTML, SIMILARITY_CSV = "similarity.html", "similarity.csv"
MAX_CELL_CHARS = 50_000
# copydetect's defaults: k-grams of 25 characters of tokenized code (a name is one character
# after tokenizing, so 25 characters are about 12 to 20 tokens); a guarantee threshold of 25
# too, so the winnowing window is 1 and every k-gram is kept (cells are short).
NOISE_THRESHOLD = 25
WINDOW = 1
# Measured on chapter 1's kept alternatives (independent correct answers, written in one
# house style): the smaller share of a pair reached 0.52 on ch01_ex1 (two answers with the
# same shape checks) and at most 0.33 on ch01_ex2..ex4; a copy with renamed names and two
# reordered statements shares 0.93. 0.6 lists copies and spares the alternatives.
DEFAULT_THRESHOLD = 0.6
CAVEAT = ("worth a look — similarity is not proof of copying; independent correct answers "
          "to a short exercise can look alike")


@dataclass
class Pair:
    label: str
    student_a: str
    student_b: str
    score_a: float          # share of a's fingerprinted code found in b
    score_b: float          # share of b's fingerprinted code found in a
    tokens_matched: int
    slices_a: list          # [(start, end)] in a's cell text
    slices_b: list

    @property
    def score(self) -> float:
        return min(self.score_a, self.score_b)


@dataclass
class SimilarityReport:
    chapter: int
    threshold: float
    pairs: list                                      # every pair that shares anything, ranked
    cells: dict                                      # label -> {student: source compared}
    skipped: list = field(default_factory=list)      # (student, label or "", reason)
    boilerplate: dict = field(default_factory=dict)  # label -> whether a stub was excluded

    def flagged(self, label: Optional[str] = None) -> list:
        return [p for p in self.pairs if p.score >= self.threshold and (label is None or p.label == label)]


def _fingerprint(source: str, boilerplate=None):
    from copydetect.detector import CodeFingerprint
    return CodeFingerprint("cell.py", NOISE_THRESHOLD, WINDOW, boilerplate=boilerplate,
                           language="python", fp=io.StringIO(source))


def _stub_cells(chapter: int, stub: Optional[Path]) -> dict:
    """label -> the student notebook's exercise cell (the chapter's own, unless given)."""
    if stub is None:
        from .runtime import PACKAGE_DIR
        found = sorted((PACKAGE_DIR.parent / "chapters").glob(f"{chapter:02d}_*.ipynb"))
        if not found:
            return {}
        stub = found[0]
    try:
        return exercise_code(load_cells(Path(stub)))
    except NotebookError:
        return {}


def _exercise_cells(sub: Submission) -> dict:
    """label -> exercise cell source of one submission, read as data (NotebookError when unreadable)."""
    if sub.path is None:
        raise NotebookError(sub.problem)
    size = sub.path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        raise NotebookError(f"{sub.path.name}: the notebook is {size / 1e6:.0f} MB, over the "
                            f"{MAX_NOTEBOOK_BYTES // 1_000_000} MB limit")
    return exercise_code(load_cells(sub.path))


def _same_text(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


def compare_class(submissions: list, chapter: int, threshold: float = DEFAULT_THRESHOLD,
                  stub: Optional[Path] = None) -> SimilarityReport:
    """Fingerprint each submission's exercise cells and compare all pairs, per exercise."""
    import numpy as np
    from copydetect.detector import compare_files

    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"similarity threshold must be in (0, 1], got {threshold}")
    labels = [ex.label for ex in all_exercises(chapter)]
    if not labels:
        raise ValueError(f"chapter {chapter} has no registered exercises")
    stubs = _stub_cells(chapter, stub)
    report = SimilarityReport(chapter, threshold, [], {label: {} for label in labels})
    for sub in submissions:
        try:
            blocks = _exercise_cells(sub)
        except (NotebookError, OSError) as error:
            report.skipped.append((sub.student, "", str(error)[:300]))
            continue
        for label in labels:
            source = blocks.get(label)
            if source is None or not source.strip():
                continue  # nothing written: not a candidate
            if label in stubs and _same_text(source, stubs[label]):
                continue  # the untouched stub
            if len(source) > MAX_CELL_CHARS:
                report.skipped.append((sub.student, label, f"the exercise cell has {len(source)} characters, "
                                       f"over the {MAX_CELL_CHARS} compared"))
                continue
            report.cells[label][sub.student] = source
    for label in labels:
        boilerplate = None
        if stubs.get(label, "").strip():
            boilerplate = np.array(sorted(_fingerprint(stubs[label]).hashes))
        report.boilerplate[label] = boilerplate is not None
        prints = {}
        for student, source in report.cells[label].items():
            try:
                fp = _fingerprint(source, boilerplate)
            except Exception as error:  # a tokenizer failure on odd text skips one cell, never the class
                report.skipped.append((student, label, f"could not be tokenized ({type(error).__name__})"))
                continue
            if fp.token_coverage > 0:
                prints[student] = fp  # else: only the stub's code, or too short to fingerprint
        students = sorted(prints)
        for i, a in enumerate(students):
            for b in students[i + 1:]:
                tokens, (score_a, score_b), (slices_a, slices_b) = compare_files(prints[a], prints[b])
                if tokens == 0:
                    continue
                report.pairs.append(Pair(label, a, b, float(score_a), float(score_b), int(tokens),
                                         _as_list(slices_a), _as_list(slices_b)))
    report.pairs.sort(key=lambda p: (labels.index(p.label), -p.score, -p.tokens_matched, p.student_a, p.student_b))
    return report


def _as_list(slices) -> list:
    if len(slices) == 0 or len(slices[0]) == 0:
        return []
    return [(int(s), int(e)) for s, e in zip(slices[0], slices[1])]


# ------------------------------------------------------------------ output


def _highlighted(source: str, slices: list) -> str:
    """``source`` escaped, the matched slices in <mark>."""
    out, position = [], 0
    for start, end in sorted(slices):
        start, end = max(start, position), min(end, len(source))
        if start >= end:
            continue
        out.append(html.escape(source[position:start]))
        out.append("<mark>" + html.escape(source[start:end]) + "</mark>")
        position = end
    out.append(html.escape(source[position:]))
    return "".join(out)


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #1a1a1a; }
.caveat { background: #fff4d6; border-left: 4px solid #b07d00; padding: .6rem 1rem; }
table.pair { border-collapse: collapse; width: 100%; table-layout: fixed; margin-bottom: 1.5rem; }
table.pair th, table.pair td { border: 1px solid #bbb; padding: .4rem; vertical-align: top; text-align: left; }
pre { white-space: pre-wrap; word-break: break-word; margin: 0; font-size: .85rem; }
mark { background: #ffd27a; color: #000; }
"""


def html_text(report: SimilarityReport) -> str:
    e = html.escape
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">",
             f"<title>Similarity, chapter {report.chapter}</title><style>{_STYLE}</style></head><body>",
             f"<h1>Similar exercise cells, chapter {report.chapter}</h1>",
             f'<p class="caveat"><strong>{e(CAVEAT)}.</strong> '
             f"A pair is listed when each cell shares at least {report.threshold:.0%} of its code with the other, "
             f"after names, comments and formatting are normalised and the stub's code is removed. "
             f"Highlighted: the shared parts. Read the two cells before drawing any conclusion.</p>"]
    for label, cells in report.cells.items():
        flagged = report.flagged(label)
        parts.append(f'<h2 id="{e(label)}">{e(label)}</h2>')
        stub_note = "" if report.boilerplate.get(label) else " (no stub found: nothing was excluded as boilerplate)"
        parts.append(f"<p>{len(cells)} answered cells compared, {len(cells) * (len(cells) - 1) // 2} pair(s); "
                     f"{len(flagged)} worth a look{e(stub_note)}.</p>")
        for rank, p in enumerate(flagged, 1):
            source_a, source_b = cells[p.student_a], cells[p.student_b]
            parts.append(
                f'<table class="pair"><caption>{rank}. {e(p.student_a)} and {e(p.student_b)}: '
                f"{p.score_a:.0%} of {e(p.student_a)}'s code is shared, {p.score_b:.0%} of {e(p.student_b)}'s "
                f"({p.tokens_matched} tokens)</caption>"
                f'<tr><th scope="col">{e(p.student_a)}</th><th scope="col">{e(p.student_b)}</th></tr>'
                f"<tr><td><pre>{_highlighted(source_a, p.slices_a)}</pre></td>"
                f"<td><pre>{_highlighted(source_b, p.slices_b)}</pre></td></tr></table>")
    if report.skipped:
        parts.append("<h2>Not compared</h2><ul>")
        for student, label, reason in report.skipped:
            where = f" ({e(label)})" if label else ""
            parts.append(f"<li>{e(student)}{where}: {e(reason)}</li>")
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_similarity(report: SimilarityReport, out: Path) -> dict:
    """Write similarity.html (pairs at or above the threshold) and similarity.csv (every pair that
    shares anything, ranked, so a lower threshold can be read off without a rerun)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / SIMILARITY_HTML).write_text(html_text(report), encoding="utf-8")
    with open(out / SIMILARITY_CSV, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_NONNUMERIC)
        writer.writerow(["exercise", "student_a", "student_b", "score_a", "score_b", "tokens_matched"])
        for p in report.pairs:
            writer.writerow([p.label, csv_safe(p.student_a), csv_safe(p.student_b),
                             round(p.score_a, 3), round(p.score_b, 3), p.tokens_matched])
    return {"html": out / SIMILARITY_HTML, "csv": out / SIMILARITY_CSV}
