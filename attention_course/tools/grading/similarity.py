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

The course is public, solutions included, so its published answers join the comparison as
**known sources** (:mod:`.known_sources`): the solution notebook's exercise cells and each
exercise's kept alternatives. Every student's cell is compared with each of them by the same
rule (never the known sources with each other); a match is listed in its own section, as
"matches the course's published solution" or "matches a published alternative (style ...)".
Cells are also read on their own (:mod:`.own_code`): a cell that reaches outside the exercise
(``ctypes``, ``socket``, ``exec``...) is listed, and with the class's graded record
(``--graded DIR``) so is a cell that holds no code of its own for an exercise that earned points.

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

from ..notebook import _CHECK_RE, SETUP_TAG, NotebookError, _src, exercise_code, load_cells
from ...checks.registry import all_exercises
from .formats import csv_safe
from .submissions import Submission, _defines, _mentions, submission_cells
from .known_sources import SOLUTION, KnownSource, known_sources
from .own_code import no_own_code, reaches_outside, read_graded
from .collusion import SAME_OUTPUTS, same_output_groups

SIMILARITY_HTML, SIMILARITY_CSV = "similarity.html", "similarity.csv"
SIMILARITY_KNOWN_CSV, SIMILARITY_OWN_CSV = "similarity-known.csv", "similarity-own-code.csv"
NO_OWN_CODE, OUTSIDE = "no code of its own", "reaches outside the exercise"
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
class KnownMatch:
    """A student's cell against one known source (the course's published solution or a kept alternative)."""
    label: str
    student: str
    known: KnownSource
    score_student: float    # share of the student's fingerprinted code found in the known source
    score_source: float     # share of the known source's fingerprinted code found in the student's cell
    tokens_matched: int
    slices_student: list
    slices_source: list

    @property
    def score(self) -> float:
        return min(self.score_student, self.score_source)


@dataclass
class Finding:
    """One student's cell on its own: no code of its own (for an exercise that earned points), or reaching outside."""
    label: str
    student: str
    kind: str                           # NO_OWN_CODE, OUTSIDE or SAME_OUTPUTS
    detail: str
    points: Optional[float] = None      # from the graded record (None: no record)
    max_points: Optional[float] = None


@dataclass
class SimilarityReport:
    chapter: int
    threshold: float
    pairs: list                                      # every pair that shares anything, ranked
    cells: dict                                      # label -> {student: source compared}
    skipped: list = field(default_factory=list)      # (student, label or "", reason)
    boilerplate: dict = field(default_factory=dict)  # label -> whether a stub was excluded
    known: dict = field(default_factory=dict)        # label -> [KnownSource] compared with every cell
    known_matches: list = field(default_factory=list)  # every KnownMatch that shares anything, ranked
    findings: list = field(default_factory=list)     # Finding, in the class's order
    graded: Optional[str] = None                     # the graded record read (--graded), if any
    not_graded: list = field(default_factory=list)   # (student, why the record says nothing of them)

    def flagged(self, label: Optional[str] = None) -> list:
        return [p for p in self.pairs if p.score >= self.threshold and (label is None or p.label == label)]

    def flagged_known(self, label: Optional[str] = None) -> list:
        return [m for m in self.known_matches if m.score >= self.threshold and (label is None or m.label == label)]


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


def _exercise_cells(sub: Submission) -> tuple:
    """(label -> exercise cell source, the other code cells as the grader sees them: neither setup
    nor check cells) of one submission, read as data (NotebookError when unreadable)."""
    cells = submission_cells(sub)
    code_cells = [_src(c) for c in cells if c.get("cell_type") == "code"
                  and SETUP_TAG not in c.get("metadata", {}).get("tags", []) and not _CHECK_RE.search(_src(c))]
    return exercise_code(cells), code_cells


def _graded_cell(block: Optional[str], code_cells: list, name: str) -> tuple:
    """(the code the grader graded for an exercise, a note when it is not the exercise's own block),
    chosen as :func:`.grader.prepare` chooses it: the block when it names the answer, else the last
    other code cell that defines it."""
    if block is not None and _mentions(block, name):
        return block, ""
    elsewhere = [src for src in code_cells if _defines(src, name)]
    if elsewhere:
        return elsewhere[-1], f" (graded from a cell outside the exercise's block, which defines `{name}`)"
    return block, ""


def _same_text(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


def _read_alone(report: SimilarityReport, sub: Submission, blocks: dict, code_cells: list, names: dict, stubs: dict,
                graded) -> None:
    """The findings about each exercise cell of one submission on its own (see :mod:`.own_code`)."""
    from .shards import file_digest
    earned = None
    if graded is not None:
        points, digests = graded
        if sub.student not in points:
            report.not_graded.append((sub.student, "not in the graded record"))
        elif digests.get(sub.student) is None or digests.get(sub.student) != file_digest(sub.path):
            report.not_graded.append((sub.student, "the notebook changed since it was graded"))
        else:
            earned = points[sub.student]
    for label in report.cells:
        source = blocks.get(label)
        if source is not None and len(source) > MAX_CELL_CHARS:
            continue  # listed as not compared
        record = (earned or {}).get(label, (None, None))
        outside = reaches_outside(source)
        if outside:
            report.findings.append(Finding(label, sub.student, OUTSIDE, ", ".join(outside)[:300], *record))
        if record[0] is not None and record[0] > 0:
            graded_code, where = _graded_cell(source, code_cells, names[label])
            if graded_code is not None and len(graded_code) > MAX_CELL_CHARS:
                continue
            why = no_own_code(graded_code, stubs.get(label) if not where else None)
            if why:
                report.findings.append(Finding(label, sub.student, NO_OWN_CODE, why + where, *record))


def compare_class(submissions: list, chapter: int, threshold: float = DEFAULT_THRESHOLD,
                  stub: Optional[Path] = None, known: bool = True, solution: Optional[Path] = None,
                  graded: Optional[Path] = None) -> SimilarityReport:
    """Fingerprint each submission's exercise cells and compare all pairs, per exercise; compare
    every cell with the course's published answers (``known``; the solution notebook ``solution``
    instead of the course's own); read each cell on its own, with the graded record of
    ``grade CLASS --out DIR`` when ``graded`` (that DIR, or its record.jsonl) is given."""
    import numpy as np
    from copydetect.detector import compare_files

    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"similarity threshold must be in (0, 1], got {threshold}")
    exercises = all_exercises(chapter)
    labels = [ex.label for ex in exercises]
    if not labels:
        raise ValueError(f"chapter {chapter} has no registered exercises")
    stubs = _stub_cells(chapter, stub)
    record = read_graded(Path(graded), chapter) if graded is not None else None
    report = SimilarityReport(chapter, threshold, [], {label: {} for label in labels},
                              graded=None if graded is None else str(graded))
    report.known = known_sources(chapter, exercises, solution) if known else {}
    for sub in submissions:
        try:
            blocks, code_cells = _exercise_cells(sub)
        except (NotebookError, OSError) as error:
            report.skipped.append((sub.student, "", str(error)[:300]))
            if record is not None:
                report.not_graded.append((sub.student, "the notebook cannot be read"))
            continue
        _read_alone(report, sub, blocks, code_cells, {ex.label: ex.name for ex in exercises}, stubs, record)
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
        _compare_known(report, label, prints, boilerplate, compare_files)
    if record is not None:
        _same_outputs(report, read_outputs(Path(graded), chapter), record[0])
    report.pairs.sort(key=lambda p: (labels.index(p.label), -p.score, -p.tokens_matched, p.student_a, p.student_b))
    report.known_matches.sort(key=lambda m: (labels.index(m.label), -m.score, -m.tokens_matched, m.student,
                                             m.known.kind != SOLUTION, m.known.name))
    return report


def read_outputs(folder: Path, chapter: int) -> dict:
    """{student: {label: [(check, digest, reference digest)]}} from the graded record (``DIR`` of
    ``grade CLASS --out DIR``, or its record.jsonl)."""
    from .shards import RECORD_NAME, read_shard
    path = Path(folder)
    shard = read_shard(path / RECORD_NAME if path.is_dir() else path)
    return {result.student: {e.label: [tuple(item) for item in e.outputs] for e in result.exercises}
            for _, result in shard.records} if shard.header["chapter"] == chapter else {}


def _same_outputs(report: SimilarityReport, outputs: dict, points: dict) -> None:
    """A finding for each student whose outputs of a hidden check are a classmate's, bit for bit, on other
    inputs (:mod:`.collusion`)."""
    for label, check, students in same_output_groups(outputs):
        for student in students:
            others = ", ".join(s for s in students if s != student)
            detail = (f"hidden check '{check}': the same outputs, bit for bit, as {others}, whose hidden inputs "
                      f"differ (so do the correct outputs); outputs passed between students, or an answer that "
                      f"ignores its inputs, give this")
            report.findings.append(Finding(label, student, SAME_OUTPUTS, detail[:600],
                                           *points.get(student, {}).get(label, (None, None))))


def _compare_known(report: SimilarityReport, label: str, prints: dict, boilerplate, compare_files) -> None:
    """Each student's cell against each known source of ``label`` (never the sources with each other)."""
    sources = []
    for known in report.known.get(label, []):
        try:
            fp = _fingerprint(known.source, boilerplate)
        except Exception:  # the course's own text: a tokenizer failure drops that source, never the class
            continue
        if fp.token_coverage > 0:
            sources.append((known, fp))
    for student in sorted(prints):
        for known, fp in sources:
            tokens, (score_s, score_k), (slices_s, slices_k) = compare_files(prints[student], fp)
            if tokens:
                report.known_matches.append(KnownMatch(label, student, known, float(score_s), float(score_k),
                                                       int(tokens), _as_list(slices_s), _as_list(slices_k)))


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
    both = {}  # (label, student) -> what of the course's published answers the cell matches
    for m in report.flagged_known():
        both.setdefault((m.label, m.student), []).append(m.known.description)
    for label, cells in report.cells.items():
        flagged = report.flagged(label)
        parts.append(f'<h2 id="{e(label)}">{e(label)}</h2>')
        stub_note = "" if report.boilerplate.get(label) else " (no stub found: nothing was excluded as boilerplate)"
        parts.append(f"<p>{len(cells)} answered cells compared, {len(cells) * (len(cells) - 1) // 2} pair(s); "
                     f"{len(flagged)} worth a look{e(stub_note)}.</p>")
        for rank, p in enumerate(flagged, 1):
            source_a, source_b = cells[p.student_a], cells[p.student_b]
            common = sorted(set(both.get((label, p.student_a), [])) & set(both.get((label, p.student_b), [])))
            common_note = f"; both {e(' and '.join(common))}" if common else ""
            parts.append(
                f'<table class="pair"><caption>{rank}. {e(p.student_a)} and {e(p.student_b)}: '
                f"{p.score_a:.0%} of {e(p.student_a)}'s code is shared, {p.score_b:.0%} of {e(p.student_b)}'s "
                f"({p.tokens_matched} tokens){common_note}</caption>"
                f'<tr><th scope="col">{e(p.student_a)}</th><th scope="col">{e(p.student_b)}</th></tr>'
                f"<tr><td><pre>{_highlighted(source_a, p.slices_a)}</pre></td>"
                f"<td><pre>{_highlighted(source_b, p.slices_b)}</pre></td></tr></table>")
    parts += _known_html(report) + _alone_html(report)
    if report.skipped:
        parts.append("<h2>Not compared</h2><ul>")
        for student, label, reason in report.skipped:
            where = f" ({e(label)})" if label else ""
            parts.append(f"<li>{e(student)}{where}: {e(reason)}</li>")
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _known_html(report: SimilarityReport) -> list:
    """The section of the cells that match the course's published answers (known sources)."""
    e = html.escape
    count = sum(len(v) for v in report.known.values())
    parts = ['<h2 id="known-sources">Copies of the course\'s published answers</h2>',
             f"<p>The course is public, solutions included. Every answered cell was compared with {count} "
             f"published answer(s) of this chapter (the solution notebook's exercise cells and the kept "
             f"alternatives), by the same rule as the pairs; the published answers are not compared with each "
             f"other. A cell is listed when it shares at least {report.threshold:.0%} of its code with one.</p>"]
    if not report.known:
        return parts[:1] + ["<p>Not compared with the course's published answers (--no-known-sources).</p>"]
    flagged = report.flagged_known()
    if not flagged:
        parts.append("<p>No cell matches a published answer.</p>")
    for rank, m in enumerate(flagged, 1):
        style = f" ({e(m.known.style)})" if m.known.style else ""
        parts.append(
            f'<table class="pair"><caption>{rank}. {e(m.label)}, {e(m.student)}: {e(m.known.description)}{style}; '
            f"{m.score_student:.0%} of {e(m.student)}'s code is in it, {m.score_source:.0%} of it is in "
            f"{e(m.student)}'s cell ({m.tokens_matched} tokens)</caption>"
            f'<tr><th scope="col">{e(m.student)}</th><th scope="col">{e(m.known.name)}</th></tr>'
            f"<tr><td><pre>{_highlighted(report.cells[m.label][m.student], m.slices_student)}</pre></td>"
            f"<td><pre>{_highlighted(m.known.source, m.slices_source)}</pre></td></tr></table>")
    return parts


def _alone_html(report: SimilarityReport) -> list:
    """The section of the cells read on their own: no code of their own, or reaching outside."""
    e = html.escape
    parts = ['<h2 id="own-code">Cells with no code of their own, reaching outside the exercise, or with the outputs of a classmate</h2>']
    if report.graded is None:
        parts.append("<p>No graded record given (<code>--graded DIR</code>, the folder of "
                     "<code>attention-course grade CLASS --out DIR</code>): cells that hold no code of their own "
                     "for an exercise that earned points are not looked for.</p>")
    else:
        parts.append(f"<p>Points from the graded record {e(report.graded)}.</p>")
    if not report.findings:
        parts.append("<p>None found.</p>")
    else:
        parts.append("<ul>")
        for f in report.findings:
            earned = "" if f.points is None else f" (earned {f.points:g} of {f.max_points:g} points)"
            parts.append(f"<li>{e(f.label)}, {e(f.student)}{e(earned)}: <strong>{e(f.kind)}</strong>: {e(f.detail)}</li>")
        parts.append("</ul>")
    if report.not_graded:
        parts.append("<p>Not matched to the graded record: "
                     + "; ".join(f"{e(s)} ({e(why)})" for s, why in report.not_graded) + ".</p>")
    return parts


def write_similarity(report: SimilarityReport, out: Path) -> dict:
    """Write similarity.html (pairs, copies of published answers and cells without code of their own,
    at or above the threshold), similarity.csv (every pair that shares anything, ranked, so a lower
    threshold can be read off without a rerun), similarity-known.csv (every match of a cell and a
    published answer that shares anything, ranked) and similarity-own-code.csv (the cells read alone)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / SIMILARITY_HTML).write_text(html_text(report), encoding="utf-8")
    with open(out / SIMILARITY_CSV, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_NONNUMERIC)
        writer.writerow(["exercise", "student_a", "student_b", "score_a", "score_b", "tokens_matched"])
        for p in report.pairs:
            writer.writerow([p.label, csv_safe(p.student_a), csv_safe(p.student_b),
                             round(p.score_a, 3), round(p.score_b, 3), p.tokens_matched])
    with open(out / SIMILARITY_KNOWN_CSV, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_NONNUMERIC)
        writer.writerow(["exercise", "student", "known_source", "style", "score_student", "score_source",
                         "tokens_matched"])
        for m in report.known_matches:
            writer.writerow([m.label, csv_safe(m.student), csv_safe(m.known.description), csv_safe(m.known.style),
                             round(m.score_student, 3), round(m.score_source, 3), m.tokens_matched])
    with open(out / SIMILARITY_OWN_CSV, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_NONNUMERIC)
        writer.writerow(["exercise", "student", "finding", "detail", "points", "max_points"])
        for g in report.findings:
            writer.writerow([g.label, csv_safe(g.student), g.kind, csv_safe(g.detail),
                             "" if g.points is None else g.points, "" if g.max_points is None else g.max_points])
    return {"html": out / SIMILARITY_HTML, "csv": out / SIMILARITY_CSV, "known_csv": out / SIMILARITY_KNOWN_CSV,
            "own_code_csv": out / SIMILARITY_OWN_CSV}
