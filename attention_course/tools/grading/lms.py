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
``SIS User ID``, else ``ID`` equals its name (letter case ignored).
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from .formats import csv_safe, number_cell

CANVAS_CSV = "canvas.csv"
IDENTITY = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
MATCHED_BY = ("Submission", "SIS Login ID", "SIS User ID", "ID")
MAX_ROSTER_BYTES = 5 * 1024 * 1024


class RosterError(ValueError):
    """A roster that cannot be used, with what and where."""


def read_roster(path: Path) -> list:
    """The roster's rows (dicts holding at least IDENTITY's columns, stripped)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise RosterError(f"cannot read the Canvas roster {path}: {error.strerror or error}") from None
    if len(data) > MAX_ROSTER_BYTES:
        raise RosterError(f"the Canvas roster {path} is {len(data) / 1e6:.1f} MB, over the "
                          f"{MAX_ROSTER_BYTES // 1_000_000} MB limit")
    try:
        text = data.decode("utf-8-sig")  # Excel's byte-order mark
    except UnicodeDecodeError as error:
        raise RosterError(f"the Canvas roster {path} is not UTF-8 text (byte {error.start})") from None
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


def match_roster(students: list, rows: list, path: Path) -> tuple:
    """({submission name: roster row}, submissions without a row, rows without a submission)."""
    column = "Submission" if any(r.get("Submission") for r in rows) else None
    columns = [column] if column else [c for c in MATCHED_BY[1:]]
    index: dict = {}
    for c in columns:
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


def write_canvas_csv(results: list, roster_path: Path, path: Path, assignment: str) -> dict:
    """Canvas's import CSV: one row per roster student with a submission, the chapter's total in
    the ``assignment`` column; returns who matched no roster row and who on the roster has no
    submission (their grade is left as it is in Canvas: they get no row)."""
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
            "absent": [r["Student"] or r["SIS Login ID"] or r["ID"] for r in absent]}
