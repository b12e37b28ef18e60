"""Helpers shared by the regression tests of the exercises (``tests/exercises/test_chNN.py``):
run an answer through the public checks and the hidden checks at the grading seeds the
check-strength tests use, look up a kept mistake's hint or a check, read an exercise's
statement in its solution notebook.

Imported as ``from exercise_helpers import ...`` (``tests/conftest.py`` puts this folder on
``sys.path``)."""
import json
from pathlib import Path

from attention_course.checks.checking import run_checks
from attention_course.checks.registry import get_exercise

ROOT = Path(__file__).resolve().parents[1]
SEEDS = (11, 2026, 7)


def failed_checks(label, obj, hidden_seed=None, first_failure=False):
    """The failed results of the public checks, or of the hidden checks at ``hidden_seed``
    (with ``first_failure``, only the first: enough to know that the answer fails)."""
    results = run_checks(label, obj, first_failure=first_failure) if hidden_seed is None else \
        run_checks(label, obj, hidden=True, seed=hidden_seed, first_failure=first_failure)
    return [r for r in results if not r.passed]


def all_failures(label, obj):
    """Failures of the public checks and of the hidden checks at seeds 11, 2026, 7."""
    runs = [run_checks(label, obj)] + [run_checks(label, obj, hidden=True, seed=s) for s in SEEDS]
    return [r for results in runs for r in results if not r.passed]


def passes_everywhere(label, obj):
    assert not failed_checks(label, obj), [r.line() for r in failed_checks(label, obj)]
    for seed in SEEDS:
        bad = failed_checks(label, obj, seed)
        assert not bad, (seed, [r.line() for r in bad])


def failed_hidden_somewhere(label, obj, seeds=(11, 2026)):
    """True if the hidden checks fail the answer at every one of ``seeds``."""
    return all(any(not r.passed for r in run_checks(label, obj, hidden=True, seed=s, first_failure=True))
               for s in seeds)


def mistake_hint(label, name):
    return next(m.hint for m in get_exercise(label).mistakes if m.name == name)


def check_named(label, name_start):
    """The exercise's check whose name starts with ``name_start``."""
    return next(c for c in get_exercise(label).checks if c.name.startswith(name_start))


def check_hint(label, name_start):
    return check_named(label, name_start).hint


def assert_mistake(label, obj, mistake_name, must_not=()):
    """Every public check the answer fails names the kept mistake ``mistake_name`` and gives
    its hint, and no hint contains any of the words in ``must_not``."""
    failed = failed_checks(label, obj)
    assert failed, f"the wrong answer passes every public check of {label}"
    hint = mistake_hint(label, mistake_name)
    for r in failed:
        assert r.mistake == mistake_name and r.hint == hint, (r.check, r.mistake, r.hint)
        for words in must_not:
            assert words not in r.hint, (r.check, words, r.hint)


# Words a check's own hint must not use: it describes what the check compares, it does not
# blame a cause (a kept mistake's hint does that, and only for answers that behave like it).
BLAMING = ("look at", "you forgot", "you divided", "do not ", "avoid ", "never with", "move the maximum",
           "start your sum", "compare your layers", "left alone")


def statement(label):
    """The markdown of the exercise's ``{exercise}`` cell in its solution notebook."""
    chapter = label[2:4]
    for path in sorted((ROOT / "solutions").glob(f"{chapter}_*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            text = "".join(cell["source"])
            if cell["cell_type"] == "markdown" and "{exercise}" in text and f":label: {label}" in text:
                return text
    raise AssertionError(f"no exercise cell for {label}")
