"""What a release gives away without a line of any answer (issue 38 item 5, issue 39 item 5).

RELEASE.md used to say that a graded exercise's answer appears "nowhere" while ch03_ex5's public
checks shipped an autograd routine that computes its answer. The report now names, per released
exercise, every shipped routine that computes by another route (autograd, float64; found by
scanning the shipped compare code with the markers of ``exposure.MARKERS``, then run on the
public inputs to see whose answer it gives) and every public check graded on inputs whose
outputs ship (found by calling ``make_calls`` at grading seeds).

* the scan: every row of MARKERS finds its own example; what only compares (a compare's float64
  casts, a helper with the compare's parameters, a variable called ``grad``) is not reported;
* the fixed inputs: a check whose make_calls ignores its seed is found, one that uses it is not;
* a release of chapter 3 with ch03_ex5's checks as they were (an autograd compare, a check 0 that
  ignores its seed) names ``_autograd_jacobian`` and check #0 in RELEASE.md; the release as it
  is names neither, and ships no autograd for ch03_ex5.
"""
from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest
import torch

from attention_course.checks.registry import Call, Check, Exercise, get_exercise
from attention_course.tools import exposure
from attention_course.tools.exposure import MARKERS, fixed_checks, scan_source
from attention_course.tools.student_release import release_students

ROOT = Path(__file__).resolve().parents[1]
STUDENT_REPO = "https://github.com/example-instructor/attention-students"

# One shipped helper per marker row (kind, the marker's pattern): each must be found by its row.
EXAMPLES = {
    r"^torch\.autograd(\.|$)": "import torch\n\ndef _truth(x):\n    return torch.autograd.functional.jacobian(_f, x)\n",
    r"^torch\.func(\.|$)": "from torch.func import jacrev\n\ndef _truth(x):\n    return jacrev(_f)(x)\n",
    r"^functorch(\.|$)": "import functorch\n\ndef _truth(x):\n    return functorch.jacrev(_f)(x)\n",
    r"\.(backward|requires_grad_|grad|jacobian|jacrev|jacfwd|hessian|vjp|jvp)$":
        "def _truth(x):\n    y = _f(x)\n    y.sum().backward()\n    return x.grad\n",
    r"^torch\.(float64|double)$": "import torch\n\ndef _truth(n):\n    return torch.zeros(n, dtype=torch.float64)\n",
    r"\.double$": "def _truth(x):\n    return (x.double() ** 2).sum()\n",
}


def test_every_marker_row_has_an_example():
    assert {pattern for _, pattern in MARKERS} == set(EXAMPLES)


@pytest.mark.parametrize("kind,pattern", MARKERS, ids=[p for _, p in MARKERS])
def test_each_marker_finds_its_route(kind, pattern):
    source = EXAMPLES[pattern] + "\n\ndef _compare(got, want, calls):\n    return None\n\ncompare_0 = _compare\n"
    routes = scan_source(source)
    assert [r.name for r in routes] == ["_truth"], routes
    assert kind in routes[0].kinds
    assert any(re.search(pattern, marker) for marker in routes[0].markers), routes[0].markers


def test_what_only_compares_is_not_a_route():
    source = '''import torch
from torch.autograd.functional import jacobian as J


def _close(got, want, calls, rtol=1e-4):
    return None if torch.allclose(got[0]["value"].double(), want[0]["value"].double()) else "differs"


def _compare(got, want, calls):
    grad = got[0]["value"].double()          # a variable called grad is no autograd
    return _close(got, want, calls)


def _factory(tol):
    def compare(got, want, calls):
        return None if float(got[0]["value"].double().sum()) < tol else "big"
    return compare


def _differentiating(got, want, calls):
    return J(lambda x: x, got[0]["value"])


compare_0 = _compare
compare_1 = _factory(tol=1.0)
compare_2 = _differentiating
'''
    routes = scan_source(source)
    # A compare's float64 casts are no route; a compare that differentiates is one.
    assert [(r.name, r.kinds) for r in routes] == [("_differentiating", ("autograd",))], routes
    assert routes[0].markers == ("torch.autograd.functional.jacobian",)


def _exercise(checks):
    return Exercise("ch99_ex1", "t", "f", lambda x: x, checks)


def test_a_check_that_ignores_its_seed_is_graded_on_shipped_inputs():
    fixed = Check("the same case at every seed", lambda seed: [Call(args=(torch.ones(2),))], "h")
    drawn = Check("drawn from the seed", lambda seed: [Call(args=(torch.randn(2, generator=torch.Generator().manual_seed(seed)),))],
                  "h", seed=1)
    hidden = Check("hidden, the same case", lambda seed: [Call(args=(torch.ones(3),))], "h", public=False)
    assert fixed_checks(_exercise([drawn, fixed, hidden])) == [(1, "the same case at every seed")]
    assert fixed_checks(_exercise([drawn])) == []


def _ex5_row(out: Path) -> str:
    report = (out / "RELEASE.md").read_text(encoding="utf-8")
    return next(line for line in report.splitlines() if line.startswith("| ch03_ex5 |"))


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    """Chapter 3 released twice: with ch03_ex5's public checks as they were before this fix (the
    autograd compare, check 0 the same case at every seed), then as they are."""
    exercise = get_exercise("ch03_ex5")
    module = sys.modules[exercise.reference.__module__]
    saved = list(exercise.checks)
    small = module._small_calls
    was = [dataclasses.replace(c, compare=module._against_autograd) if c.public and c.compare else c for c in saved]
    was[0] = dataclasses.replace(was[0], make_calls=lambda seed: small(module._SMALL_SEED))
    out = {}
    try:
        exercise.checks[:] = was
        out["before"] = tmp_path_factory.mktemp("before") / "students"
        release_students(ROOT, out["before"], chapters=[3], repository_url=STUDENT_REPO, practice=[],
                         answers_released=[])
    finally:
        exercise.checks[:] = saved
    out["after"] = tmp_path_factory.mktemp("after") / "students"
    release_students(ROOT, out["after"], chapters=[3], repository_url=STUDENT_REPO, practice=[],
                     answers_released=[])
    return out


def test_the_report_named_ch03_ex5s_autograd_routine_and_its_fixed_check(releases):
    out = releases["before"]
    shipped = (out / "attention_course" / "public_checks" / "ch03_ex5.py").read_text(encoding="utf-8")
    assert "torch.autograd.functional.jacobian" in shipped
    cells = [c.strip() for c in _ex5_row(out).split("|")[1:-1]]
    assert cells[:3] == ["ch03_ex5", "graded", "nowhere"]            # no line of the answer ships ...
    assert cells[3] == "`_autograd_jacobian` (autograd, float64): gives this answer on its public inputs"
    assert cells[4].startswith("#0 'one query in 2-D, three keys, values of size 3'"), cells[4]


def test_the_release_ships_ch03_ex5s_outputs_not_a_routine(releases):
    out = releases["after"]
    shipped = (out / "attention_course" / "public_checks" / "ch03_ex5.py").read_text(encoding="utf-8")
    assert scan_source(shipped) == [] and "autograd" not in shipped
    cells = [c.strip() for c in _ex5_row(out).split("|")[1:-1]]
    assert cells == ["ch03_ex5", "graded", "nowhere", "none", "none", "none"], cells
    assert exposure.HEADINGS[0] in (out / "RELEASE.md").read_text(encoding="utf-8")
    # The shipped compare judges by the stored outputs: the course's pass, a kept mistake's
    # (stored beside them) fail with the entry that differs.
    from attention_course.checks.registry import Call
    data = torch.load(out / "attention_course" / "public_checks" / "checks.pt", weights_only=True)["ch03_ex5"]
    namespace = {}
    exec(compile(shipped, "ch03_ex5.py", "exec"), namespace)  # noqa: S102 - the release's own file
    check = data["checks"][0]
    calls = [Call(**fields) for fields in check["calls"]]
    compare = namespace[check["compare"]]
    assert compare(check["outcomes"], check["outcomes"], calls) is None
    unscaled = next(m for m in data["mistakes"] if m["name"] == "no 1/sqrt(d) in front")
    reason = compare(unscaled["outcomes"][check["name"]], check["outcomes"], calls)
    assert reason and "instead of" in reason, reason


def test_a_routine_is_credited_with_the_answers_it_gives_on_public_inputs():
    """A routine is run on every released exercise's public inputs it accepts: the row of the
    exercise it ships with, and the row of each exercise whose answer it gives, name it."""
    import math

    def jacobian_by_autograd(queries, keys, values):   # ch03_ex5's answer, another way
        def one(q, k, v):
            return torch.func.jacrev(lambda x: torch.softmax(k @ x / math.sqrt(x.shape[0]), dim=0) @ v)(q)
        rows = torch.vmap(one, in_dims=(0, None, None))
        if queries.dim() == 3:
            return torch.stack([rows(q, k, v) for q, k, v in zip(queries, keys, values)])
        return rows(queries, keys, values)

    def float64_scores(queries, keys, values):         # accepts the calls, gives no answer
        return (queries.double() @ keys.double().transpose(-1, -2)).to(queries.dtype)

    labels = ["ch03_ex1", "ch03_ex4", "ch03_ex5"]
    assert exposure.answers_given(jacobian_by_autograd, labels) == ["ch03_ex5"]
    assert exposure.answers_given(float64_scores, labels) == []
    route = exposure.Route("_truth", ("autograd",), ("torch.func.jacrev",), shipped_with="ch03_ex4",
                           answers=("ch03_ex5",))
    assert route.describe("ch03_ex4") == "`_truth` (autograd): gives the answer of ch03_ex5"
    assert route.describe("ch03_ex5") == ("`_truth` of `public_checks/ch03_ex4.py` (autograd): gives this answer "
                                          "on its public inputs")
    rows = [{"label": "ch03_ex5", "status": "graded", "routes": [route], "fixed": [(0, "a case")]},
            {"label": "ch04_ex1", "status": "not released"}]
    assert exposure.cells(rows[0]) == (route.describe("ch03_ex5"), "#0 'a case'")
    assert exposure.cells(rows[1]) == ("-", "-")
