"""The regression tests of the exercises are filed by chapter and exercise: a test in
``test_chNN.py`` carries the label ``chNN_exM`` of the exercise it tests, in its name
(``test_ch06_ex3_...``) or, for a test parametrized over several of the chapter's
exercises, in each id. So ``pytest -k ch06_ex3`` finds every test of that exercise.

This conftest makes that a rule: at collection, a test here without a registered label of
its file's chapter (or in a file not named ``test_chNN.py``) stops the run with a usage
error naming it. A test that is about no one exercise belongs outside ``tests/exercises/``.
``tests/test_exercise_labels.py`` shows that the rule fails an unlabelled test.
"""
import re
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
LABEL = re.compile(r"(?<![0-9A-Za-z])ch(\d\d)_ex(\d+)(?!\d)")
FILE = re.compile(r"test_ch(\d\d)\.py")


def _problem(item, known):
    """Why ``item`` breaks the rule, or None."""
    path = Path(item.path)
    file = FILE.fullmatch(path.name)
    if not file:
        return f"is in {path.name}, not in a test_chNN.py file of one chapter"
    labels = sorted({m.group(0) for m in LABEL.finditer(item.name)})
    if not labels:
        return ("carries no chNN_exM label: name it test_chNN_exM_<what it shows> after the "
                "exercise it tests, or give each parametrized id the label")
    own = [label for label in labels if label[2:4] == file.group(1)]
    if not own:
        return f"carries {', '.join(labels)}, no label of chapter {file.group(1)} (the file's chapter)"
    unknown = [label for label in own if label not in known]
    if unknown:
        return f"carries {', '.join(unknown)}, which no exercise registers"
    return None


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect anything
def pytest_collection_modifyitems(config, items):
    mine = [item for item in items if HERE in Path(item.path).resolve().parents]
    if not mine:
        return
    from attention_course.checks.registry import all_exercises
    known = {exercise.label for exercise in all_exercises()}
    bad = [f"  {item.nodeid} {problem}" for item in mine if (problem := _problem(item, known))]
    if bad:
        raise pytest.UsageError(
            "tests/exercises/ holds the tests of one exercise each, filed by chapter and labelled "
            "with the exercise they test; these are not:\n" + "\n".join(bad))
