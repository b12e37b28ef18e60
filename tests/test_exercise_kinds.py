"""Every exercise is classified honestly (issue 40): a retype of a printed cell, a variation of
one, or a transfer to something no page prints, with the cell or section it builds on. The
classification is data (``attention_course/exercises/kinds.csv``), shown on the site's exercise
index, and these tests hold the course to its rules: every chapter has at least two transfers and
at most eight exercises."""
from collections import Counter, defaultdict

import pytest

from pathlib import Path

from attention_course.checks.registry import all_exercises
from attention_course.tools.course_files import chapter_number, solution_paths
from attention_course.tools.exercise_index import KINDS, exercise_index, exercise_kinds

ROOT = Path(__file__).resolve().parents[1]

KINDS_NOW = exercise_kinds()
CHAPTERS = sorted({chapter_number(path) for path in solution_paths(ROOT)})


def test_the_classification_ships_and_covers_every_exercise_once():
    assert KINDS.is_file(), "attention_course/exercises/kinds.csv is missing"
    registered = {ex.label for chapter in CHAPTERS for ex in all_exercises(chapter)}
    assert sorted(registered - set(KINDS_NOW)) == [], "exercises without a classification"
    assert sorted(set(KINDS_NOW) - registered) == [], "classified labels that no exercise registers"


def test_every_row_says_what_it_builds_on():
    vague = [label for label, row in KINDS_NOW.items() if len(row["builds_on"].split()) < 4]
    assert vague == [], "say which printed cell or section each exercise copies, varies or goes beyond"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_chapter_practises_transfer_and_stays_short(chapter):
    labels = [ex.label for ex in all_exercises(chapter)]
    kinds = Counter(KINDS_NOW[label]["kind"] for label in labels if label in KINDS_NOW)
    assert len(labels) <= 8, f"chapter {chapter} has {len(labels)} exercises; at most 8"
    assert kinds["transfer"] >= 2, f"chapter {chapter} has {kinds['transfer']} transfer exercises; at least 2"


def test_the_index_shows_each_kind_as_a_reader_sees_it():
    text = exercise_index(ROOT)
    shown = {"retype": "warm-up", "variation": "variation", "transfer": "transfer"}
    by_kind = defaultdict(list)
    for label, row in KINDS_NOW.items():
        by_kind[row["kind"]].append(label)
    for kind, labels in by_kind.items():
        label = sorted(labels)[0]
        line = next(line for line in text.splitlines() if f"`{label} <{label}>`" in line)
        assert line.split(" | ")[2] == shown[kind], line


@pytest.mark.parametrize("row, message", [
    ("ch01_ex1,copy,the pooling cell of section 2\n", "line 2 (ch01_ex1): kind 'copy' is not one of"),
    ("ch01_ex1,retype,a\nch01_ex1,transfer,b\n", "line 3: ch01_ex1 is classified twice"),
])
def test_a_bad_classification_is_refused_with_its_line(tmp_path, row, message):
    path = tmp_path / "kinds.csv"
    path.write_text("label,kind,builds_on\n" + row, encoding="utf-8")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        exercise_kinds(path)

