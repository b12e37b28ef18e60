"""canvas.csv, Canvas's gradebook import, from the class's results and the instructor's roster."""
from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from attention_course.tools.grading.lms import IDENTITY, RosterError, read_roster, write_canvas_csv

ROOT = Path(__file__).resolve().parents[1]
HEADER = "Student,ID,SIS User ID,SIS Login ID,Section"


def _roster(tmp_path, text: str) -> Path:
    path = tmp_path / "roster.csv"
    path.write_text(text, encoding="utf-8")
    return path


def _results(**totals):
    return [NS(student=name, total=total) for name, total in totals.items()]


def _read(path: Path) -> list:
    return list(csv.reader(path.open(encoding="utf-8")))


def test_canvas_csv_matches_submissions_by_sis_login_id_and_leaves_out_the_rest(tmp_path):
    roster = _roster(tmp_path, "\ufeff" + HEADER + ",Current Score\n"
                     "    Points Possible,,,,,\n"
                     '"Lovelace, Ada",101,S-1,ada,Section A,\n'
                     '"Turing, Alan",102,S-2,Alan,Section B,\n'
                     '"Hopper, Grace",103,S-3,grace,Section A,\n'
                     '"Student, Test",999,,,Section A,\n')
    out = tmp_path / "canvas.csv"
    report = write_canvas_csv(_results(ada=7.5, alan=10, mallory=3), roster, out, "Chapter 01 (4242)")
    rows = _read(out)
    assert rows[0] == list(IDENTITY) + ["Chapter 01 (4242)"]
    assert rows[1:] == [["Lovelace, Ada", "101", "S-1", "ada", "Section A", "7.5"],
                        ["Turing, Alan", "102", "S-2", "Alan", "Section B", "10"]]
    assert report == {"matched": 2, "unmatched": ["mallory"], "absent": ["Hopper, Grace"]}


def test_a_submission_column_overrides_the_ids(tmp_path):
    roster = _roster(tmp_path, HEADER + ",Submission\n"
                     '"Lovelace, Ada",101,S-1,ada,A,ada_lovelace\n'
                     '"Turing, Alan",102,S-2,alan,B,at\n')
    out = tmp_path / "canvas.csv"
    report = write_canvas_csv(_results(ada_lovelace=1, at=2, ada=5), roster, out, "Chapter 03")
    assert [r[1] for r in _read(out)[1:]] == ["101", "102"] and [r[-1] for r in _read(out)[1:]] == ["1", "2"]
    assert report["unmatched"] == ["ada"]


def test_a_formula_in_the_roster_never_reaches_canvas_csv_as_a_formula(tmp_path):
    roster = _roster(tmp_path, HEADER + '\n"=HYPERLINK(""http://x"")",101,S-1,ada,A\n')
    out = tmp_path / "canvas.csv"
    write_canvas_csv(_results(ada=1), roster, out, "Chapter 01")
    assert _read(out)[1][0].startswith("'=")


@pytest.mark.parametrize("text, words", [
    ("Student,ID,Section\nAda,1,A\n", ["lacks the column(s) SIS User ID, SIS Login ID"]),
    (HEADER + "\n", ["lists no student"]),
    (HEADER + "\nAda,,,,A\n", ["line 2", "no ID, SIS User ID or SIS Login ID", "Ada"]),
    (HEADER + "\nAda,1,S-1,ada,A\nAda Two,2,S-2,ADA,A\n", ["lines 2 and 3", "SIS Login ID 'ADA'"]),
])
def test_a_bad_roster_is_a_clear_error(tmp_path, text, words):
    roster = _roster(tmp_path, text)
    with pytest.raises(RosterError) as error:
        write_canvas_csv(_results(ada=1), roster, tmp_path / "canvas.csv", "Chapter 01")
    assert all(w in str(error.value) for w in words), str(error.value)
    assert str(roster) in str(error.value)


def test_an_unreadable_roster_is_a_clear_error(tmp_path):
    with pytest.raises(RosterError, match="cannot read the Canvas roster"):
        read_roster(tmp_path / "missing.csv")
    path = tmp_path / "latin1.csv"
    path.write_bytes((HEADER + "\nJos\xe9,1,S,j,A\n").encode("latin-1"))
    with pytest.raises(RosterError, match="not UTF-8"):
        read_roster(path)


@pytest.mark.skipif(sys.platform != "linux", reason="the grader's sandbox needs Linux")
def test_cli_grade_writes_canvas_csv_and_names_who_is_missing(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    solution = next((ROOT / "solutions").glob("01_*.ipynb")).read_text(encoding="utf-8")
    (folder / "ada.ipynb").write_text(solution, encoding="utf-8")
    (folder / "mallory.ipynb").write_text(solution, encoding="utf-8")
    roster = _roster(tmp_path, HEADER + '\n"Lovelace, Ada",101,S-1,ada,A\n"Hopper, Grace",103,S-3,grace,A\n')
    cli = [str(Path(sys.executable).with_name("attention-course")), "grade", str(folder), "--chapter", "1",
           "--out", str(tmp_path / "out"), "--seed", "5", "--jobs", "2"]
    bad = tmp_path / "bad.csv"
    bad.write_text("Name,Email\nAda,a@x\n", encoding="utf-8")
    done = subprocess.run(cli + ["--canvas-roster", str(bad)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "lacks the column(s)" in done.stderr
    assert not (tmp_path / "out").exists()  # refused before grading anything
    done = subprocess.run(cli + ["--canvas-roster", str(roster)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = _read(tmp_path / "out" / "canvas.csv")
    total = next(r for r in csv.DictReader((tmp_path / "out" / "grades.csv").open()) if r["student"] == "ada")["total"]
    assert rows == [list(IDENTITY) + ["Chapter 01"], ["Lovelace, Ada", "101", "S-1", "ada", "A", total]]
    assert "mallory" in done.stderr and "Hopper, Grace" in done.stderr
