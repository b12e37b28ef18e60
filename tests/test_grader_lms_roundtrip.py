"""Canvas and Moodle round trips as each LMS does them: its download's names in, its upload files out.

The fixtures are laid out as the LMS exports them:

* Canvas: *Download Submissions* names each file ``<lastnamefirstname>_<user id>_<attachment id>_<file>``,
  ``<name>_LATE_<user id>_...`` when late, and a file resubmitted under the same name gets ``-1`` before
  its extension; the roster is the gradebook export (``Student, ID, SIS User ID, SIS Login ID, Section``,
  assignment columns ``Title (id)``, a second row ``Points Possible``).
* Moodle: *Download all submissions* gives a folder per participant,
  ``<Full name>_<participant id>_assignsubmission_file`` (``..._file_`` before Moodle 4.1, and an
  ``_assignsubmission_onlinetext`` folder beside it when online text is on); *Download grading worksheet*
  gives the worksheet (``Identifier`` ``Participant N``, ``Full name``, ..., ``Feedback comments``).

Each class has one submission that matches nobody and one listed student without a submission: both are
reported, on stderr and in a file. Two small classes of chapter 1 are graded once each, with the real
grader, through the command line's entry point.
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from attention_course.checks.registry import all_exercises
from attention_course.tools import cli
from attention_course.tools.grading.classrun import ClassGraded, GradeOptions, grade, write_class_files
from attention_course.tools.grading.lms import IDENTITY, NO_ROW, NO_SUBMISSION

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the grader's sandbox needs Linux")

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = next((ROOT / "solutions").glob("01_*.ipynb"))
STUB = next((ROOT / "chapters").glob("01_*.ipynb"))
FULL = sum(ex.points for ex in all_exercises(1))
NOTEBOOK = SOLUTION.name  # the name students upload: 01_queries_keys_values.ipynb

CANVAS_GRADEBOOK = (
    "\ufeffStudent,ID,SIS User ID,SIS Login ID,Section,Chapter 01 (4242),Current Score,Final Score\n"
    "    Points Possible,,,,,8.00,(read only),(read only)\n"
    '"Lovelace, Ada",101,S-1,ada,Section A,,,\n'
    '"Turing, Alan",102,S-2,alan,Section B,,,\n'
    '"Hopper, Grace",103,S-3,grace,Section A,,,\n'
    '"Johnson, Katherine",104,S-4,katherine,Section B,,,\n'
    '"Student, Test",999,,,Section A,,,\n')

MOODLE_WORKSHEET = (
    "\ufeffIdentifier,\"Full name\",\"Email address\",Status,Grade,\"Maximum Grade\",\"Grade can be changed\","
    "\"Last modified (submission)\",\"Last modified (grade)\",\"Feedback comments\"\n"
    '"Participant 31001","Ada Lovelace",ada@example.edu,"Submitted for grading",,100.00,Yes,'
    '"Monday, 2 September 2024, 10:00 AM",-,\n'
    '"Participant 31002","Alan Turing",alan@example.edu,"Submitted for grading",,100.00,Yes,'
    '"Monday, 2 September 2024, 11:00 AM",-,\n'
    '"Participant 31003","Grace Hopper",grace@example.edu,"Submitted for grading",,100.00,Yes,'
    '"Tuesday, 3 September 2024, 9:00 AM",-,\n'
    '"Participant 31004","Katherine Johnson",katherine@example.edu,"No submission",,100.00,Yes,-,-,\n')


def _copy(source: Path, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, path)


def _rows(path: Path) -> list:
    return list(csv.reader(path.open(encoding="utf-8-sig", newline="")))


def _captured(call) -> tuple:
    """(what ``call()`` returns, its stdout, its stderr): capsys is per test, these fixtures per module."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        value = call()
    return value, out.getvalue(), err.getvalue()


def _grade(capsys, folder: Path, out: Path, *options: str) -> tuple:
    code = cli.main(["grade", str(folder), "--chapter", "1", "--out", str(out), "--seed", "7", "--jobs", "2",
                     "--time-limit", "5", *options])
    printed = capsys.readouterr()
    return code, printed.out, printed.err


@pytest.fixture(scope="module")
def canvas(tmp_path_factory):
    base = tmp_path_factory.mktemp("canvas")
    folder = base / "submissions"  # Canvas's "Download Submissions" zip, unzipped
    _copy(SOLUTION, folder / f"lovelaceada_101_5001_{NOTEBOOK}")
    _copy(STUB, folder / f"turingalan_LATE_102_5002_{NOTEBOOK}")
    _copy(SOLUTION, folder / f"hoppergrace_103_5003_{NOTEBOOK.replace('.ipynb', '-1.ipynb')}")
    _copy(SOLUTION, folder / f"mallorymal_777_5004_{NOTEBOOK}")  # on no roster row
    roster = base / "gradebook.csv"  # the gradebook export: a roster as it is
    roster.write_text(CANVAS_GRADEBOOK, encoding="utf-8")
    return base, folder, roster


@pytest.fixture(scope="module")
def canvas_graded(canvas):
    base, folder, roster = canvas
    done = grade(folder, 1, GradeOptions(seed=7, jobs=2, time_limit=5.0), out=base / "grades",
                 canvas_roster=roster, canvas_assignment="Chapter 01 (4242)")
    code, out, err = _captured(lambda: cli._print_class("grade", done))
    return code, out, err, base / "grades", done


def test_canvas_download_names_match_every_student_by_canvas_id(canvas_graded):
    code, out, err, grades, _ = canvas_graded
    assert code == 0, err
    rows = _rows(grades / "canvas.csv")
    assert rows[0] == list(IDENTITY) + ["Chapter 01 (4242)"]
    assert [r[:2] for r in rows[1:]] == [["Lovelace, Ada", "101"], ["Turing, Alan", "102"], ["Hopper, Grace", "103"]]
    totals = {r[1]: float(r[-1]) for r in rows[1:]}
    assert totals == {"101": FULL, "102": 0.0, "103": FULL}  # normal, _LATE_ (a stub), resubmitted (-1)
    assert "canvas.csv: 3 students" in out


def test_canvas_reports_who_it_leaves_out_on_stderr_and_in_a_file(canvas_graded):
    code, out, err, grades, _ = canvas_graded
    assert "mallorymal_777_5004_" in err and "Johnson, Katherine" in err
    assert "Student, Test" not in err  # Canvas's test student is no student
    rows = _rows(grades / "canvas-unmatched.csv")
    assert rows[0] == ["problem", "name", "id"]
    assert rows[1:] == [[NO_ROW, f"mallorymal_777_5004_{NOTEBOOK[:-len('.ipynb')]}", "777"],
                        [NO_SUBMISSION, "Johnson, Katherine", "104"]]


def test_canvas_feedback_zip_is_named_as_canvas_reads_a_reupload(canvas_graded):
    _, out, _, grades, _ = canvas_graded
    with zipfile.ZipFile(grades / "canvas-feedback.zip") as archive:
        names = sorted(archive.namelist())
        notebooks = {name: json.loads(archive.read(name)) for name in names}
    assert len(names) == 3 and "canvas-feedback.zip: 3 students" in out
    # Canvas's re-upload: the first two all-digit "_"-parts of a file's name are the user id and the id of
    # an attachment of that user's submission (canvas-lms, Assignment#infer_comment_context_from_filename).
    ids = sorted(tuple(p for p in name.split("_") if p.isdigit())[:2] for name in names)
    assert ids == [("101", "5001"), ("102", "5002"), ("103", "5003")]
    for name, nb in notebooks.items():
        assert "/" not in name and nb["nbformat"] == 4 and nb["cells"][0]["cell_type"] == "markdown"
    alan = next(nb for name, nb in notebooks.items() if "_102_" in name)
    assert f"0 / {FULL:g} points" in "".join(alan["cells"][0]["source"])


def test_nothing_matching_the_roster_says_so_and_exits_non_zero(canvas_graded, tmp_path, capsys):
    done = canvas_graded[4]
    other = tmp_path / "other.csv"
    other.write_text('Student,ID,SIS User ID,SIS Login ID,Section\n"Nobody, Here",555,S-9,nobody,A\n',
                     encoding="utf-8")
    results, plan = done.files.results, done.files.plan
    files = write_class_files(results, plan, tmp_path / "out", [], canvas_roster=other, per_student=True,
                              log_header=[], ignored=[], seconds=0.0)
    assert files.canvas["matched"] == 0
    assert cli._print_class("grade", ClassGraded("graded", files, 0.0, len(results))) == 2
    err = capsys.readouterr().err
    assert "no submission matches a student of the Canvas roster" in err and "Nobody, Here" in err
    assert len(_rows(tmp_path / "out" / "canvas-unmatched.csv")) == 1 + len(results) + 1
    # The same for Moodle: a worksheet none of whose participants is a submission here.
    worksheet = tmp_path / "worksheet.csv"
    worksheet.write_text(MOODLE_WORKSHEET, encoding="utf-8")
    files = write_class_files(results, plan, tmp_path / "out2", [], moodle_worksheet=worksheet, per_student=True,
                              log_header=[], ignored=[], seconds=0.0)
    assert cli._print_class("grade", ClassGraded("graded", files, 0.0, len(results))) == 2
    assert "no submission matches a participant of the Moodle worksheet" in capsys.readouterr().err


@pytest.fixture(scope="module")
def moodle_graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("moodle")
    folder = base / "submissions"  # Moodle's "Download all submissions" zip, unzipped
    _copy(SOLUTION, folder / "Ada Lovelace_31001_assignsubmission_file" / NOTEBOOK)
    _copy(STUB, folder / "Alan Turing_31002_assignsubmission_file_" / NOTEBOOK)  # before Moodle 4.1
    _copy(SOLUTION, folder / "Grace Hopper_31003_assignsubmission_file" / NOTEBOOK)
    online = folder / "Grace Hopper_31003_assignsubmission_onlinetext" / "onlinetext.html"
    online.parent.mkdir(parents=True)
    online.write_text("<p>My notebook is attached.</p>", encoding="utf-8")
    _copy(SOLUTION, folder / "Mallory Evil_39999_assignsubmission_file" / NOTEBOOK)  # on no row
    worksheet = base / "Grades-Chapter 01.csv"
    worksheet.write_text(MOODLE_WORKSHEET, encoding="utf-8")
    # Through the command line's entry point: --moodle-worksheet as an instructor types it.
    code, out, err = _captured(lambda: cli.main([
        "grade", str(folder), "--chapter", "1", "--out", str(base / "grades"), "--seed", "7", "--jobs", "2",
        "--time-limit", "5", "--moodle-worksheet", str(worksheet)]))
    return code, out, err, base / "grades"


def test_moodle_worksheet_is_filled_by_participant_id(moodle_graded):
    code, out, err, grades = moodle_graded
    assert code == 0, err
    rows = _rows(grades / "moodle-worksheet.csv")
    assert rows[0] == ["Identifier", "Full name", "Email address", "Status", "Grade", "Maximum Grade",
                       "Grade can be changed", "Last modified (submission)", "Last modified (grade)",
                       "Feedback comments"]
    by_id = {r[0]: dict(zip(rows[0], r)) for r in rows[1:]}
    assert list(by_id) == ["Participant 31001", "Participant 31002", "Participant 31003", "Participant 31004"]
    # Scaled to the worksheet's Maximum Grade (100), the chapter's points being FULL.
    assert [by_id[f"Participant 3100{i}"]["Grade"] for i in (1, 2, 3, 4)] == ["100.00", "0.00", "100.00", ""]
    assert by_id["Participant 31001"]["Feedback comments"].startswith(f"Chapter 01: {FULL:g} / {FULL:g} points")
    alan = by_id["Participant 31002"]["Feedback comments"]
    assert alan.startswith(f"Chapter 01: 0 / {FULL:g} points") and "ch01_ex1" in alan
    assert by_id["Participant 31004"]["Feedback comments"] == ""  # left as downloaded
    assert by_id["Participant 31001"]["Last modified (submission)"] == "Monday, 2 September 2024, 10:00 AM"
    assert "moodle-worksheet.csv (3 graded)" in out and "Maximum Grade 100.00" in out


def test_moodle_feedback_zip_entries_are_named_as_moodle_imports_them(moodle_graded):
    _, _, _, grades = moodle_graded
    with zipfile.ZipFile(grades / "moodle-feedback.zip") as archive:
        names = sorted(archive.namelist())
        texts = {name: archive.read(name).decode("utf-8") for name in names}
    assert names == ["Ada Lovelace_31001_assignfeedback_file_/feedback-ch01.md",
                     "Alan Turing_31002_assignfeedback_file_/feedback-ch01.md",
                     "Grace Hopper_31003_assignfeedback_file_/feedback-ch01.md"]
    for name in names:
        # Moodle's importer (assignfeedback_file_zip_importer::is_valid_filename_for_import): a path part
        # split on "_" into at most 5 pieces gives the participant id, then the plugin's type and name.
        first, rest = name.split("/", 1)
        info = first.split("_", 4)
        assert info[1].isdigit() and info[2:4] == ["assignfeedback", "file"] and rest == "feedback-ch01.md"
    assert f"0 / {FULL:g} points" in texts["Alan Turing_31002_assignfeedback_file_/feedback-ch01.md"]


def test_moodle_reports_who_it_leaves_out_on_stderr_and_in_a_file(moodle_graded):
    _, _, err, grades = moodle_graded
    assert "Mallory Evil_39999_assignsubmission_file" in err and "Katherine Johnson" in err
    rows = _rows(grades / "moodle-unmatched.csv")
    assert [NO_ROW, "Mallory Evil_39999_assignsubmission_file", "39999"] in rows
    assert [NO_SUBMISSION, "Katherine Johnson", "31004"] in rows
    # Grace's online-text folder is set aside for her notebook, and said so.
    assert any(r[1] == "Grace Hopper_31003_assignsubmission_onlinetext" for r in rows[1:])
    assert len(rows) == 4


def test_a_bad_worksheet_stops_before_grading(tmp_path, capsys):
    folder = tmp_path / "class"
    _copy(SOLUTION, folder / "Ada Lovelace_31001_assignsubmission_file" / NOTEBOOK)
    bad = tmp_path / "worksheet.csv"
    bad.write_text("Name,Email\nAda,a@x\n", encoding="utf-8")
    code, _, err = _grade(capsys, folder, tmp_path / "out", "--moodle-worksheet", str(bad))
    assert code == 2 and "lacks the column(s) Identifier, Grade" in err
    assert not (tmp_path / "out").exists()
