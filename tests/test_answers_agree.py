"""check() and the grader agree on answers that hand the work to the course's own code.

For every exercise of every chapter, an answer that delegates to the course's finished answer
(the library object named like it or listed in ``attention_course.checks.answers.LIBRARY_ANSWERS``,
else the exercise's reference in ``attention_course.exercises``) passes no public check in
``check()`` and earns 0 from the grader; where the library holds the answer, both say so in the
same words. An answer that uses the package's piece of an EARLIER exercise, as a later contract
allows, passes both.
"""
from __future__ import annotations

import contextlib
import inspect
import io
import json
import sys
from pathlib import Path

import pytest

from attention_course.checks.answers import blocked_answers
from attention_course.checks.checking import check
from attention_course.tools.grading.grader import Submission, run_grading
from attention_course.tools.grading.sandbox import Sandbox
from attention_course.tools.notebook import load_cells, setup_code, with_exercise_code
from attention_course.checks.registry import all_exercises

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted({int(p.name[:2]) for p in (ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")})

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the grader's sandbox needs Linux")


def _solution(chapter: int) -> Path:
    return next((ROOT / "solutions").glob(f"{chapter:02d}_*.ipynb"))


def delegating_answer(exercise) -> tuple:
    """(source of an exercise cell that hands the work to the course's answer, its no-credit
    message or None when the delegate is the reference, which no grading child can import)."""
    entries = blocked_answers(exercise)
    if entries:
        module_name, attr, _, message = entries[0]
        target = getattr(sys.modules[module_name], attr)
        head = f"import {module_name} as _course\n_answer = _course.{attr}\n"
    else:
        target = exercise.reference
        module_name, attr, message = target.__module__, target.__name__, None
        head = f"from {module_name} import {attr} as _answer\n"
    if inspect.isclass(target):
        body = f"class {exercise.name}(_answer):\n    pass\n"
    else:
        body = f"def {exercise.name}(*args, **kwargs):\n    return _answer(*args, **kwargs)\n"
    return head + body, message


def _check_output(setup: str, code: str, exercise) -> str:
    namespace: dict = {"__name__": "__main__"}
    exec(compile(setup, "<setup>", "exec"), namespace)
    exec(compile(code, f"<{exercise.label}>", "exec"), namespace)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        check(exercise.label, namespace[exercise.name])
    return out.getvalue()


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    with Sandbox(jobs=2, workdir=tmp_path_factory.mktemp("sandbox")) as box:
        yield box


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[f"ch{c:02d}" for c in CHAPTERS])
def test_check_and_grader_refuse_the_course_answer_alike(chapter, sandbox, tmp_path):
    path = _solution(chapter)
    nb = json.loads(path.read_text(encoding="utf-8"))
    setup = setup_code(load_cells(path))
    answers = {}
    for exercise in all_exercises(chapter):
        code, message = delegating_answer(exercise)
        answers[exercise.label] = (exercise, code, message)
        nb = with_exercise_code(nb, exercise.label, code)
    (tmp_path / "delegates.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    run = run_grading([Submission("delegates", tmp_path / "delegates.ipynb")], chapter, seed=5,
                      sandbox=sandbox, time_limit=20)
    graded = {e.label: e for e in run.results[0].exercises}
    problems = []
    for label, (exercise, code, message) in answers.items():
        printed = _check_output(setup, code, exercise)
        result = graded[label]
        said = result.reason + " ".join(c.reason for c in result.checks)
        if "\u2713" in printed or " 0/" not in printed.splitlines()[0]:
            problems.append(f"{label}: check() passed a delegating answer:\n{printed}")
        if result.points != 0:
            problems.append(f"{label}: the grader gave {result.points} to a delegating answer")
        if message is not None:
            if message not in printed:
                problems.append(f"{label}: check() does not say {message!r}:\n{printed}")
            if message not in said:
                problems.append(f"{label}: the grader does not say {message!r}: {said[:500]}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[f"ch{c:02d}" for c in CHAPTERS])
def test_check_leaves_the_course_answers_working(chapter):
    """check() disables the course's answers only while the student's object runs: the solution's
    answers pass twice in a row (a class whose construction was not restored fails the second)."""
    from attention_course.tools.notebook import load_objects
    path = _solution(chapter)
    for exercise in all_exercises(chapter):
        obj = load_objects(path, exercise.label, exercise.name)
        runs = []
        for _ in range(2):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                check(exercise.label, obj)
            runs.append(out.getvalue())
        assert "\u2717" not in runs[0] and runs[0] == runs[1], runs


# An answer may use the package's piece of an earlier exercise, as the later contract says.
EARLIER_PIECES = [
    ("ch03_ex2", "class AdditiveAttention(nn.Module):\n"
                 "    def __init__(self, query_size, key_size, num_hiddens):\n"
                 "        super().__init__()\n"
                 "        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)\n"
                 "        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)\n"
                 "        self.w_v = nn.Linear(num_hiddens, 1, bias=False)\n"
                 "    def forward(self, queries, keys, values, valid_lens=None):\n"
                 "        pairs = torch.tanh(self.W_q(queries)[:, :, None] + self.W_k(keys)[:, None])\n"
                 "        weights = attn.masked_softmax(self.w_v(pairs)[..., 0], valid_lens)\n"
                 "        return weights @ values, weights\n"),
]


@pytest.mark.parametrize("label,code", EARLIER_PIECES, ids=[label for label, _ in EARLIER_PIECES])
def test_using_an_earlier_exercises_package_piece_passes_both(label, code, sandbox, tmp_path):
    chapter = int(label[2:4])
    exercise = next(e for e in all_exercises(chapter) if e.label == label)
    path = _solution(chapter)
    printed = _check_output(setup_code(load_cells(path)), code, exercise)
    assert "\u2717" not in printed, printed
    nb = with_exercise_code(json.loads(path.read_text(encoding="utf-8")), label, code)
    (tmp_path / "earlier.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    run = run_grading([Submission("earlier", tmp_path / "earlier.ipynb")], chapter, seed=5,
                      sandbox=sandbox, time_limit=20)
    result = next(e for e in run.results[0].exercises if e.label == label)
    assert result.points == result.max_points, (result.reason, [c.reason for c in result.checks])


def test_the_beam_search_of_ch07_ex3_has_no_library_answer_to_refuse():
    """Issue 21 refused translation.Seq2Seq.greedy for ch07_ex3's greedy decoder; issue 41 made ch07_ex3
    a beam search, which the library does not hold, so nothing of it is refused any more (and a
    release of chapter 7 grades the exercise)."""
    from attention_course import translation
    from attention_course.checks.answers import blocked_answers
    from attention_course.checks.registry import get_exercise
    assert not hasattr(translation, "beam_search")
    assert not blocked_answers(get_exercise("ch07_ex3"))
