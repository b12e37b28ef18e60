"""A gradebook Canvas imports: ``canvas.csv``, from the class's results and a roster.

Canvas's gradebook import reads a CSV whose first columns identify the student
(``Student``, ``ID``, ``SIS User ID``, ``SIS Login ID``, ``Section``) and whose other
columns are assignments: a column named like an existing assignment, ``Chapter 01 (12345)``
with its Canvas id, updates it; a new name creates an assignment. The grader knows students
by their submission's name (``alice.ipynb`` -> ``alice``), Canvas by its own ids: the
instructor's **roster** maps one to the other.

The roster is a CSV with those five columns (a gradebook exported from Canvas has them, and
any further columns are ignored) and optionally a ``Submission`` column naming each
student's submission. Without it, a submission matches the row whose ``SIS Login ID``, else
``SIS User ID``, else ``ID`` equals its name (letter case ignored). A submission that none of these
match but that keeps the name Canvas's *Download Submissions* zip gave it,
``<lastnamefirstname>[_LATE]_<user id>_<attachment id>_<file name>`` (a resubmitted file's name may
end in ``-1``, ``-2``: ``hw-1.ipynb``), matches the row whose ``ID`` is that user id.

Besides canvas.csv (:func:`write_canvas_files`): ``canvas-unmatched.csv`` lists every submission that
matches no row and every row without a submission, and ``canvas-feedback.zip`` holds each matched
student's feedback for Canvas's *Re-Upload Submissions*, named as Canvas reads such a zip: Canvas's
``Assignment#infer_comment_context_from_filename`` (canvas-lms, app/models/assignment.rb) splits a
file's name on ``_`` and takes its first two all-digit parts as the user id and the id of an
attachment of that student's submission, and attaches the file to the submission as a comment under
that attachment's name. So each entry is named ``<name>_<user id>_<attachment id>_feedback-chNN.ipynb``
(the name part letters only) and holds a notebook (the student's file is one) whose one cell is the
feedback. A submission matched without a download name (no attachment id) has no entry; it is listed
in the result.
"""
from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from pathlib import Path
from typing import Optional

from .formats import csv_safe, number_cell, read_lms_text

CANVAS_CSV = "canvas.csv"
CANVAS_UNMATCHED = "canvas-unmatched.csv"
CANVAS_FEEDBACK_ZIP = "canvas-feedback.zip"
UNMATCHED_HEADER = ("problem", "name", "id")
NO_ROW, NO_SUBMISSION = "submission matches no roster row", "roster row has no submission"
_DIGITS = re.compile(r"[0-9]+")
IDENTITY = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
MATCHED_BY = ("Submission", "SIS Login ID", "SIS User ID", "ID")
MAX_ROSTER_BYTES = 5 * 1024 * 1024


class RosterError(ValueError):
    """A roster that cannot be used, with what and where."""


def read_roster(path: Path) -> list:
    """The roster's rows (dicts holding at least IDENTITY's columns, stripped)."""
    path = Path(path)
    text = read_lms_text(path, MAX_ROSTER_BYTES, "the Canvas roster", RosterError)
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in IDENTITY if c not in header]
    if missing:
        raise RosterError(f"the Canvas roster {path} lacks the column(s) {', '.join(missing)} "
                          f"(its header: {', '.join(header) or 'empty'}); export the gradebook from Canvas, "
                          f"or write these five columns: {', '.join(IDENTITY)}")
    rows = []
    for number, row in enumerate(reader, start=2):
        row = {(k or "").strip(): (v or "").strip() if isinstance(v, str) else "" for k, v in row.items()}
        if not any(row.get(c) for c in IDENTITY):
            continue
        if row["Student"].strip().lower() in ("points possible", "student, test"):
            continue  # an export's points row, and Canvas's test student
        if not row.get("ID") and not row.get("SIS User ID") and not row.get("SIS Login ID"):
            raise RosterError(f"the Canvas roster {path}, line {number}: no ID, SIS User ID or SIS Login ID "
                              f"for {row['Student'] or 'this student'}")
        row["_line"] = number
        rows.append(row)
    if not rows:
        raise RosterError(f"the Canvas roster {path} lists no student")
    return rows


def canvas_download_name(name: str) -> Optional[dict]:
    """``{"user": ..., "attachment": ..., "name": ...}`` from a name that Canvas's *Download
    Submissions* gave (``lovelaceada_10231_67890_hw``, ``lovelaceada_LATE_10231_67890_hw-1``), else
    None: its first two adjacent all-digit ``_``-parts after the name (as Canvas reads them back);
    ``name`` is the student's name part, letters only (``lovelaceada``)."""
    parts = name.split("_")
    for i in range(1, len(parts) - 2):
        if _DIGITS.fullmatch(parts[i]) and _DIGITS.fullmatch(parts[i + 1]) and "_".join(parts[i + 2:]):
            if any(_DIGITS.fullmatch(p) for p in parts[1:i]):
                return None  # an earlier number: not the name Canvas writes
            name = "".join(ch for ch in "".join(p for p in parts[:i] if p != "LATE") if ch.isalpha())
            return {"user": parts[i], "attachment": parts[i + 1], "name": name or "student"}
    return None


def match_roster(students: list, rows: list, path: Path) -> tuple:
    """({submission name: roster row}, submissions without a row, rows without a submission).

    A submission matches by the ``Submission`` column when the roster has one, else by ``SIS Login
    ID``, ``SIS User ID`` or ``ID``; failing that, by the Canvas user id of its download name
    (:func:`canvas_download_name`) against ``ID``."""
    column = "Submission" if any(r.get("Submission") for r in rows) else None
    columns = [column] if column else [c for c in MATCHED_BY[1:]]
    index: dict = {}
    for c in columns + (["ID"] if column else []):
        for r in rows:
            key = r.get(c, "").lower()
            if not key:
                continue
            other = index.get((c, key))
            if other is not None and other is not r:
                raise RosterError(f"the Canvas roster {path}: lines {other['_line']} and {r['_line']} both have "
                                  f"{c} '{r[c]}'; a submission must match one student")
            index[c, key] = r
    matched, unmatched = {}, []
    for student in students:
        row = next((index[c, student.lower()] for c in columns if (c, student.lower()) in index), None)
        download = canvas_download_name(student) if row is None else None
        if download is not None:
            row = index.get(("ID", download["user"]))
        if row is None:
            unmatched.append(student)
            continue
        if any(row is r for r in matched.values()):
            first = next(s for s, r in matched.items() if r is row)
            raise RosterError(f"the Canvas roster {path}, line {row['_line']}: submissions '{first}' and "
                              f"'{student}' both match {row['Student'] or row['ID']}")
        matched[student] = row
    taken = {id(r) for r in matched.values()}
    absent = [r for r in rows if id(r) not in taken]
    return matched, unmatched, absent


def refuse_unmatched_roster(students: list, roster_path: Path) -> None:
    """Before a class is graded: raise :class:`RosterError` when the roster matches none of the
    submissions ``students`` (their names), as when it is another course's or another LMS's file."""
    rows = read_roster(roster_path)
    if not students:
        return
    try:
        matched, _, _ = match_roster(list(students), rows, Path(roster_path))
    except RosterError:
        return  # two rows or submissions that clash: reported with the class files, the others written
    if not matched:
        shown = ", ".join(list(students)[:3]) + (", ..." if len(students) > 3 else "")
        raise RosterError(f"no submission matches a student of the Canvas roster {roster_path} (submissions: "
                          f"{shown}; its rows match by Submission, SIS Login ID, SIS User ID or ID, or by the "
                          f"user id of Canvas's download name); nothing graded: is it this class's roster?")


def write_canvas_csv(results: list, roster_path: Path, path: Path, assignment: str) -> dict:
    """Canvas's import CSV: one row per roster student with a submission, the chapter's total in
    the ``assignment`` column; returns who matched no roster row and who on the roster has no
    submission (their grade is left as it is in Canvas: they get no row)."""
    done = _write_canvas_csv(results, roster_path, path, assignment)
    return {k: done[k] for k in ("matched", "unmatched", "absent")}


def _write_canvas_csv(results: list, roster_path: Path, path: Path, assignment: str) -> dict:
    rows = read_roster(roster_path)
    if not str(assignment).strip():
        raise RosterError("the Canvas assignment's name is empty")
    by_student = {r.student: r for r in results}
    matched, unmatched, absent = match_roster(list(by_student), rows, Path(roster_path))
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_MINIMAL)
        writer.writerow(list(IDENTITY) + [assignment])
        for row in sorted(matched.values(), key=lambda r: r["_line"]):
            student = next(s for s, r in matched.items() if r is row)
            writer.writerow([csv_safe(row[c]) for c in IDENTITY] + [number_cell(by_student[student].total)])
    return {"matched": len(matched), "unmatched": unmatched,
            "absent": [r["Student"] or r["SIS Login ID"] or r["ID"] for r in absent],
            "_matched": matched, "_absent": absent}


def write_unmatched(path: Path, no_row: list, no_submission: list, others: tuple = ()) -> None:
    """The students an LMS file leaves out, one per line: ``(name, id)`` pairs of the submissions
    that match no row of the LMS's list and of its rows that have no submission; ``others`` more
    ``(problem, pairs)``."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_ALL)
        writer.writerow(UNMATCHED_HEADER)
        for problem, pairs in ((NO_ROW, no_row), (NO_SUBMISSION, no_submission)) + tuple(others):
            for name, ident in pairs:
                writer.writerow([problem, csv_safe(name), csv_safe(ident)])


def feedback_notebook(markdown: str) -> str:
    """A notebook (nbformat 4) whose one Markdown cell is ``markdown``: the feedback, as a file that
    opens where the student's notebook does."""
    cell = {"cell_type": "markdown", "id": "feedback", "metadata": {}, "source": markdown.splitlines(True)}
    return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1,
                      ensure_ascii=False) + "\n"


def write_canvas_files(results: list, plan, roster_path: Path, out: Path, assignment: str) -> dict:
    """canvas.csv (:func:`write_canvas_csv`), canvas-unmatched.csv and canvas-feedback.zip in ``out``.
    Returns write_canvas_csv's answer with ``feedback`` (entries in the zip), ``no_feedback`` (matched
    submissions without a download name, so without an entry) and ``unmatched_file``."""
    from .reports import feedback_markdown
    out = Path(out)
    done = _write_canvas_csv(results, roster_path, out / CANVAS_CSV, assignment)
    matched, absent = done.pop("_matched"), done.pop("_absent")
    no_row = [(s, (canvas_download_name(s) or {}).get("user", "")) for s in done["unmatched"]]
    write_unmatched(out / CANVAS_UNMATCHED, no_row,
                    [(r["Student"] or r["SIS Login ID"] or r["ID"], r["ID"]) for r in absent])
    by_student = {r.student: r for r in results}
    entries, no_feedback = {}, []
    for student in sorted(matched):
        download = canvas_download_name(student)
        if download is None:
            no_feedback.append(student)
            continue
        name = f"{download['name']}_{download['user']}_{download['attachment']}_feedback-ch{plan.chapter:02d}.ipynb"
        entries[name] = feedback_notebook(feedback_markdown(by_student[student], plan))
    if entries:
        with zipfile.ZipFile(out / CANVAS_FEEDBACK_ZIP, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, text in entries.items():
                archive.writestr(name, text)
    else:
        (out / CANVAS_FEEDBACK_ZIP).unlink(missing_ok=True)  # none from an earlier run into this folder
    done.update(feedback=len(entries), no_feedback=no_feedback, unmatched_file=CANVAS_UNMATCHED)
    return done
