"""Moodle's assignment round trip: its download's names, its grading worksheet, its feedback-files zip.

* **Submissions.** Moodle's *Download all submissions* gives a folder per student,
  ``<Full name>_<participant id>_assignsubmission_file`` (Moodle 4.1 on; ``..._file_`` before, and
  ``<Full name>_<participant id>_assignsubmission_file_<file name>`` without folders). The grader
  knows each student by that name (:func:`.grader.discover`); :func:`participant_of` reads the
  participant id out of it.
* **Grades.** ``--moodle-worksheet FILE`` is the *grading worksheet* the instructor downloaded
  (*View all submissions*, *Grading action*: *Download grading worksheet*; columns ``Identifier``
  (``Participant 31001``), ``Full name``, ``Email address``, ``Status``, ``Grade``, ``Maximum
  Grade``, ``Grade can be changed``, ``Last modified (submission)``, ``Last modified (grade)``,
  ``Feedback comments``). ``moodle-worksheet.csv`` is that file with ``Grade`` and ``Feedback
  comments`` filled in for every row whose participant id matches a submission, every other cell
  and row as downloaded; upload it with *Upload grading worksheet*. A total is scaled to the
  worksheet's ``Maximum Grade`` when that differs from the chapter's points.
* **Feedback files.** ``moodle-feedback.zip`` holds one folder per matched student,
  ``<Full name>_<participant id>_assignfeedback_file_/feedback-chNN.md``, for *Upload multiple
  feedback files in a zip*. We follow Moodle's importer, ``assignfeedback_file_zip_importer::
  is_valid_filename_for_import`` (mod/assign/feedback/file/importziplib.php): it splits each part of
  an entry's path on ``_`` (at most 5 pieces), takes the second as the participant id and the third
  and fourth as the plugin (``assignfeedback``, ``file``) and keeps the rest of the path as the
  feedback file's name. The full name is not matched, but must hold no ``_`` (Moodle's download
  writes none either).

A submission whose participant id is on no row of the worksheet, and a row without a submission,
are listed in ``moodle-unmatched.csv`` and in the result (:func:`write_moodle_files`).
"""
from __future__ import annotations

import csv
import io
import re
import zipfile
from pathlib import Path
from typing import Optional

from .formats import csv_safe, fmt_points, read_lms_text
from .lms import write_unmatched

MOODLE_WORKSHEET = "moodle-worksheet.csv"
MOODLE_UNMATCHED = "moodle-unmatched.csv"
MOODLE_FEEDBACK_ZIP = "moodle-feedback.zip"
WORKSHEET_COLUMNS = ("Identifier", "Full name", "Email address", "Status", "Grade", "Maximum Grade",
                     "Grade can be changed", "Last modified (submission)", "Last modified (grade)",
                     "Feedback comments")
REQUIRED = ("Identifier", "Grade")
CLASH = "submission shares its participant with another (none graded)"
ASIDE = "folder without a notebook of a participant whose notebook is graded"
MAX_WORKSHEET_BYTES = 5 * 1024 * 1024
# <Full name>_<participant id>_assignsubmission_<plugin>[_[<file name>]]
_DOWNLOAD = re.compile(r"^(?P<name>[^_]*)_(?P<id>[0-9]+)_assign(?:submission|feedback)_(?P<plugin>[a-z0-9]+)"
                       r"(?:_(?P<rest>.*))?$", re.S)
_IDENTIFIER = re.compile(r"([0-9]+)\s*$")  # "Participant 31001" (the word is translated: only the number counts)


class WorksheetError(ValueError):
    """A grading worksheet that cannot be used, with what and where."""


def participant_of(name: str) -> Optional[str]:
    """The participant id in a name from Moodle's download (``Chidi Okafor_31001_assignsubmission_file``),
    else None."""
    found = _DOWNLOAD.match(name)
    return str(int(found["id"])) if found else None


def read_worksheet(path: Path) -> tuple:
    """(header, rows): the worksheet's columns and its rows (dicts, plus ``_id`` the participant id and
    ``_line``). Raises :class:`WorksheetError`."""
    path = Path(path)
    text = read_lms_text(path, MAX_WORKSHEET_BYTES, "the Moodle worksheet", WorksheetError)
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader, [])]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise WorksheetError(f"the Moodle worksheet {path} lacks the column(s) {', '.join(missing)} (its header: "
                             f"{', '.join(header) or 'empty'}); download it from the assignment's *View all "
                             f"submissions*, *Grading action*, *Download grading worksheet*")
    rows, seen = [], {}
    for number, cells in enumerate(reader, start=2):
        if not any(c.strip() for c in cells):
            continue
        row = {h: (cells[i] if i < len(cells) else "") for i, h in enumerate(header)}
        found = _IDENTIFIER.search(row["Identifier"])
        if not found:
            raise WorksheetError(f"the Moodle worksheet {path}, line {number}: the Identifier "
                                 f"'{row['Identifier']}' holds no participant number")
        ident = str(int(found[1]))
        if ident in seen:
            raise WorksheetError(f"the Moodle worksheet {path}: lines {seen[ident]} and {number} are both "
                                 f"participant {ident}")
        seen[ident] = number
        row.update(_id=ident, _line=number)
        rows.append(row)
    if not rows:
        raise WorksheetError(f"the Moodle worksheet {path} lists no participant")
    return header, rows


def _grade(total: float, max_total: float, maximum: str) -> tuple:
    """(the Grade cell, scaled?): ``total`` out of ``max_total`` on the worksheet's ``Maximum Grade``."""
    try:
        top = float(maximum.replace(",", "."))
    except ValueError:
        top = 0.0
    if top > 0 and max_total > 0 and abs(top - max_total) > 1e-9:
        return f"{total / max_total * top:.2f}", True
    return f"{total:.2f}", False


def feedback_comment(result, plan) -> str:
    """The ``Feedback comments`` cell: the total, then one line per exercise that lost points."""
    lines = [f"Chapter {plan.chapter:02d}: {fmt_points(result.total)} / {fmt_points(result.max_total)} points"
             " (details in the feedback file)."]
    if result.problem:
        lines.append(f"Your submission could not be graded: {result.problem}")
    for er in result.exercises:
        if er.points < er.max_points:
            lines.append(f"{er.label} {er.name}: {fmt_points(er.points)} / {fmt_points(er.max_points)}"
                         + (f": {er.summary}" if getattr(er, "summary", "") else ""))
    return "\n".join(lines)


def match_worksheet(students: list, rows: list) -> tuple:
    """({submission: row}, [(submission, participant id or "")] without a row, rows without a submission,
    [(submission, participant id)] that share a participant with another submission, [(submission,
    participant id)] set aside for another of its participant's that holds the notebook)."""
    by_id = {r["_id"]: r for r in rows}
    claims: dict = {}
    no_row = []
    for student, has_notebook in students:
        ident = participant_of(student)
        if ident is None or ident not in by_id:
            no_row.append((student, ident or ""))
            continue
        claims.setdefault(ident, []).append((student, has_notebook))
    matched, clashes, aside = {}, [], []
    for ident, claimants in claims.items():
        # A participant's file folder and its online-text folder: the one holding a notebook is the submission.
        best = [c for c in claimants if c[1]] or claimants
        aside += [(s, ident) for s, has_notebook in claimants if (s, has_notebook) not in best]
        if len(best) == 1:
            matched[best[0][0]] = by_id[ident]
        else:
            clashes += [(s, ident) for s, _ in best]
    taken = {r["_id"] for r in matched.values()}
    absent = [r for r in rows if r["_id"] not in taken]
    return matched, no_row, absent, clashes, aside


def refuse_unmatched_worksheet(students: list, worksheet: Path) -> None:
    """Before a class is graded: raise :class:`WorksheetError` when no submission (``students``, their
    names) carries the participant id of a row of the worksheet, as when it is another assignment's
    worksheet or the submissions are not Moodle's download."""
    _, rows = read_worksheet(worksheet)
    ids = {r["_id"] for r in rows}
    if students and not any(participant_of(s) in ids for s in students):
        shown = ", ".join(list(students)[:3]) + (", ..." if len(students) > 3 else "")
        raise WorksheetError(f"no submission matches a participant of the Moodle worksheet {worksheet} "
                             f"(submissions: {shown}; Moodle's download names them <Full name>_<participant "
                             f"id>_assignsubmission_file); nothing graded: is it this assignment's worksheet?")


def write_moodle_files(results: list, plan, worksheet: Path, out: Path) -> dict:
    """moodle-worksheet.csv, moodle-feedback.zip and moodle-unmatched.csv in ``out``. Returns
    ``matched``, ``unmatched``, ``clashes`` and ``aside`` (submissions), ``absent`` (worksheet rows, by full name),
    ``scaled`` (the worksheet's maximum grade when totals were scaled to it, else None) and ``locked``
    (students whose row says the grade cannot be changed). Raises :class:`WorksheetError`."""
    from .reports import feedback_markdown
    header, rows = read_worksheet(worksheet)
    out = Path(out)
    by_student = {r.student: r for r in results}
    matched, no_row, absent, clashes, aside = match_worksheet([(r.student, r.path is not None) for r in results], rows)
    columns = header + [c for c in ("Feedback comments",) if c not in header]
    scaled, locked, filled = None, [], {}
    for student, row in matched.items():
        result = by_student[student]
        grade, was_scaled = _grade(result.total, result.max_total, row.get("Maximum Grade", ""))
        scaled = row.get("Maximum Grade") if was_scaled else scaled
        filled[row["_id"]] = {"Grade": grade, "Feedback comments": csv_safe(feedback_comment(result, plan))}
        if row.get("Grade can be changed", "").strip().lower() == "no":
            locked.append(row.get("Full name") or student)
    with open(out / MOODLE_WORKSHEET, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_MINIMAL)
        writer.writerow(columns)
        for row in rows:
            cells = dict(row, **filled.get(row["_id"], {}))  # Moodle's own cells as downloaded
            writer.writerow([cells.get(c, "") for c in columns])
    with zipfile.ZipFile(out / MOODLE_FEEDBACK_ZIP, "w", zipfile.ZIP_DEFLATED) as archive:
        for student, row in sorted(matched.items(), key=lambda item: item[1]["_line"]):
            name = re.sub(r"[_/\\\x00-\x1f\x7f]+", " ", row.get("Full name", "")).strip() or "Participant"
            entry = f"{name}_{row['_id']}_assignfeedback_file_/feedback-ch{plan.chapter:02d}.md"
            archive.writestr(entry, feedback_markdown(by_student[student], plan))
    write_unmatched(out / MOODLE_UNMATCHED, no_row, [(r.get("Full name") or r["Identifier"], r["_id"]) for r in absent],
                    ((CLASH, clashes), (ASIDE, aside)))
    return {"matched": len(matched), "unmatched": [s for s, _ in no_row], "clashes": [s for s, _ in clashes],
            "aside": [s for s, _ in aside],
            "absent": [r.get("Full name") or r["Identifier"] for r in absent], "scaled": scaled, "locked": locked,
            "worksheet": MOODLE_WORKSHEET, "feedback": MOODLE_FEEDBACK_ZIP, "unmatched_file": MOODLE_UNMATCHED}
