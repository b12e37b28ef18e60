"""What an instructor meets following instructors.md and the README alone (a trial's gaps, fixed):

* the ``course.yml`` a command reads: ``$ATTENTION_COURSE_CONFIG``, else ``./course.yml`` in a course
  folder (beside ``_config.yml``), else the installed repository's; run from a course folder, it is
  that folder's file;
* a Canvas roster or a Moodle worksheet that matches none of the submissions stops ``grade`` before
  anything is graded (exit 2, one line), not after the whole class;
* the names left out of an LMS file are joined by "; " (a roster's names hold commas);
* ``attention-course list | head`` ends quietly: no traceback, status 0 or 141.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from attention_course.tools import cli
from attention_course.tools.course_config import CONFIG_ENV, default_path
from attention_course.tools.grading.lms import RosterError, refuse_unmatched_roster
from attention_course.tools.grading.moodle import WorksheetError, refuse_unmatched_worksheet

ROOT = Path(__file__).resolve().parents[1]
STUB = ROOT / "chapters" / "01_queries_keys_values.ipynb"
CLI = [sys.executable, "-m", "attention_course.tools.cli"]
ROSTER = 'Student,ID,SIS User ID,SIS Login ID,Section\n"Turing, Alan",102,S-2,alan,A\n"Knuth, Donald",103,S-3,don,A\n'
WORKSHEET = ("Identifier,Full name,Email address,Status,Grade,Maximum Grade,Grade can be changed,"
             "Last modified (submission),Last modified (grade),Feedback comments\n"
             "Participant 31001,Ada Lovelace,ada@example.org,Submitted,,100.00,Yes,,,\n")


def _env_without_config() -> dict:
    return {k: v for k, v in os.environ.items() if k != CONFIG_ENV}


def _course_folder(folder: Path, points: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "_config.yml").write_text("title: a course\n", encoding="utf-8")
    (folder / "course.yml").write_text(f"exercises:\n  ch01_ex1:\n    points: {points}\n", encoding="utf-8")
    return folder


# ---------------------------------------------------------------- which course.yml


def test_course_yml_order_env_then_course_folder_then_installed_repository(tmp_path, monkeypatch):
    installed = ROOT / "course.yml"
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    course = _course_folder(tmp_path / "course", 5)
    monkeypatch.chdir(course)
    assert default_path() == (course / "course.yml").resolve()
    # The environment variable wins over the folder.
    other = tmp_path / "elsewhere.yml"
    monkeypatch.setenv(CONFIG_ENV, str(other))
    assert default_path() == other
    monkeypatch.delenv(CONFIG_ENV)
    # A course.yml without _config.yml beside it is not a course folder: the installed repository's.
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "course.yml").write_text("chapters: 1\n", encoding="utf-8")
    monkeypatch.chdir(plain)
    assert default_path() == installed
    # A course folder without course.yml: the installed repository's too.
    (course / "course.yml").unlink()
    monkeypatch.chdir(course)
    assert default_path() == installed


def test_a_command_run_in_a_course_folder_reads_its_course_yml(tmp_path):
    course = _course_folder(tmp_path / "course", 5)
    listed = subprocess.run(CLI + ["list", "--chapter", "1", "--brief"], cwd=course, env=_env_without_config(),
                            capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr
    first = listed.stdout.splitlines()[0].split("\t")
    assert first[0] == "ch01_ex1" and first[2] == "5 pt", listed.stdout
    # Elsewhere, the same command reads the installed repository's file, where ch01_ex1 is not worth 5.
    outside = subprocess.run(CLI + ["list", "--chapter", "1", "--brief"], cwd=tmp_path, env=_env_without_config(),
                             capture_output=True, text=True, timeout=300)
    assert outside.returncode == 0, outside.stderr
    assert outside.stdout.splitlines()[0].split("\t")[2] != "5 pt"


# ---------------------------------------------------------------- a roster of another class


def _class(tmp_path: Path, *names: str) -> Path:
    folder = tmp_path / "class"
    for name in names:
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(STUB, target)
    return folder


def test_a_roster_matching_no_submission_is_refused_before_grading(tmp_path, capsys):
    folder = _class(tmp_path, "ada.ipynb", "grace.ipynb")
    roster = tmp_path / "roster.csv"
    roster.write_text(ROSTER, encoding="utf-8")
    out = tmp_path / "grades"
    code = cli.main(["grade", str(folder), "--chapter", "1", "--seed", "1", "--out", str(out),
                     "--canvas-roster", str(roster)])
    err = capsys.readouterr().err
    assert code == 2
    assert "no submission matches a student of the Canvas roster" in err and str(roster) in err
    assert "nothing graded" in err and "ada" in err and "Traceback" not in err
    assert not out.exists()  # refused before anything was graded or written


def test_a_worksheet_matching_no_submission_is_refused_before_grading(tmp_path, capsys):
    folder = _class(tmp_path, "Alan Turing_31002_assignsubmission_file/hw.ipynb", "bob.ipynb")
    worksheet = tmp_path / "worksheet.csv"
    worksheet.write_text(WORKSHEET, encoding="utf-8")
    out = tmp_path / "grades"
    code = cli.main(["grade", str(folder), "--chapter", "1", "--seed", "1", "--out", str(out),
                     "--moodle-worksheet", str(worksheet)])
    err = capsys.readouterr().err
    assert code == 2
    assert "no submission matches a participant of the Moodle worksheet" in err and str(worksheet) in err
    assert "nothing graded" in err and not out.exists()


def test_one_matching_submission_is_enough_to_grade(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text(ROSTER, encoding="utf-8")
    refuse_unmatched_roster(["nobody", "ALAN"], roster)  # by SIS Login ID, letter case ignored
    refuse_unmatched_roster(["nobody", "knuthdonald_103_5003_hw"], roster)  # Canvas's download name
    with pytest.raises(RosterError, match="no submission matches"):
        refuse_unmatched_roster(["nobody", "knuthdonald_104_5003_hw"], roster)
    worksheet = tmp_path / "worksheet.csv"
    worksheet.write_text(WORKSHEET, encoding="utf-8")
    refuse_unmatched_worksheet(["x", "Ada Lovelace_31001_assignsubmission_file"], worksheet)
    with pytest.raises(WorksheetError, match="no submission matches"):
        refuse_unmatched_worksheet(["Ada Lovelace_31009_assignsubmission_file"], worksheet)


# ---------------------------------------------------------------- names left out, readable


def test_names_left_out_are_joined_by_semicolons(tmp_path, capsys):
    files = SimpleNamespace(out=tmp_path, canvas_name="canvas.csv", canvas_assignment="Chapter 01", moodle=None,
                            canvas={"matched": 1, "unmatched": ["mallory"], "absent": ["Turing, Alan", "Knuth, Donald"],
                                    "feedback": 0, "no_feedback": [], "unmatched_file": "canvas-unmatched.csv"})
    cli._print_lms(files)
    err = capsys.readouterr().err
    assert "2 student(s) of the roster have no submission" in err
    assert "Turing, Alan; Knuth, Donald" in err and "Alan, Knuth" not in err


# ---------------------------------------------------------------- a reader that stops early


def test_list_into_a_closed_pipe_ends_quietly():
    # The reader goes away before anything is written: the first flush meets a closed pipe.
    process = subprocess.Popen(CLI + ["list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()
    err = process.stderr.read().decode("utf-8", "replace")
    code = process.wait(timeout=300)
    assert code == 141, (code, err)
    assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err, err


def test_list_piped_into_head_ends_quietly():
    command = " ".join(f"'{part}'" for part in CLI) + " list | head -2; exit ${PIPESTATUS[0]}"
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 141), (done.returncode, done.stderr)
    assert len(done.stdout.splitlines()) == 2 and done.stdout.startswith("ch01_ex1\t")
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
