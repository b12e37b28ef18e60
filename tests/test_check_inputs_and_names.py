"""The check engine's two late additions (issue 40, items 3 and 4): a check that fails an answer
changing its inputs in place (``report=("inputs_unchanged",)``, for custom compares too), and the
names a thorough self-check prints for hidden draws of other sizes than the check's own case."""
import re

import pytest
import torch

from attention_course import check
from attention_course.checks.calls import WRITTEN_IN_PLACE, run_call
from attention_course.checks.checking import run_checks
from attention_course.checks.registry import REGISTRY, Call, Check, Exercise, Mistake, register
from attention_course.exercises._kit import inputs_unchanged


def _scale(x, factor):
    return x * factor


def _scale_in_place(x, factor):
    return x.mul_(factor)


def _sized_calls(seed):
    """Public seed 0: 3 rows of 4; any other seed: 2 + seed % 5 rows of 3."""
    g = torch.Generator().manual_seed(seed)
    rows, cols = (3, 4) if seed == 0 else (2 + seed % 5, 3)
    return [Call(args=(torch.randn(rows, cols, generator=g), 2.0))]


def _values_only(got, want, calls):
    """A custom compare that reads the returned values only (as ch04_ex5's and ch10_ex3's do)."""
    for g, w in zip(got, want):
        if g["status"] != "ok" or not torch.allclose(g["value"], w["value"]):
            return "the values differ"
    return None


IN_PLACE_HINT = "the rows were scaled where they stand."


@pytest.fixture()
def demo():
    ex = register(Exercise(
        "ch99_ex2", "demo", "scale", _scale,
        checks=[Check("3 rows of 4 scaled by 2", inputs_unchanged(_sized_calls), hint="scale every entry"),
                Check("3 rows of 4, by a custom compare", inputs_unchanged(_sized_calls), hint="scale",
                      compare=_values_only),
                Check("scaled rows, any size", _sized_calls, hint="scale", public=False)],
        mistakes=[Mistake("in place", IN_PLACE_HINT, _scale_in_place)]))
    yield ex
    del REGISTRY["ch99_ex2"]


def test_run_call_names_the_arguments_a_call_changed_in_place():
    def answer(rows, factor, out=None):
        rows.add_(1.0)
        out[0] = 7.0
        return rows
    tensor, extra = torch.zeros(2, 2), torch.zeros(3)
    call = Call(args=(tensor, 2.0), kwargs={"out": extra}, report=("inputs_unchanged",))
    outcome = run_call(answer, call)
    assert outcome["extras"][WRITTEN_IN_PLACE] == [[0, "rows"], ["out", "out"]]
    assert torch.equal(tensor, torch.zeros(2, 2)) and torch.equal(extra, torch.zeros(3))  # the call's copies
    assert run_call(lambda rows, factor, out=None: rows * factor, call)["extras"][WRITTEN_IN_PLACE] == []
    assert WRITTEN_IN_PLACE not in run_call(answer, Call(args=(tensor, 2.0), kwargs={"out": extra})).get("extras", {})


def test_nan_entries_left_alone_are_no_change():
    call = Call(args=(torch.tensor([float("nan"), 1.0]), 2.0), report=("inputs_unchanged",))
    assert run_call(lambda rows, factor, out=None: rows * factor, call)["extras"][WRITTEN_IN_PLACE] == []


def test_an_in_place_answer_fails_every_watched_check_naming_its_argument(demo):
    """Before: the checks copy every input, so an answer that scales x where it stands returned the right
    values and passed. Now each watched check fails it, the custom compare's too, with the argument named
    and the kept mistake's hint; the check that does not watch its inputs still passes it."""
    def student(rows, factor):
        rows *= factor
        return rows
    results = {r.check: r for r in run_checks("ch99_ex2", student)}
    for name in ("3 rows of 4 scaled by 2", "3 rows of 4, by a custom compare"):
        assert not results[name].passed
        assert "changed its argument rows in place" in results[name].reason, results[name].reason
        assert results[name].hint == IN_PLACE_HINT
    hidden = {r.check: r for r in run_checks("ch99_ex2", student, hidden=True, seed=11)}
    assert hidden["scaled rows, any size"].passed


def test_an_answer_that_copies_first_passes(demo):
    assert all(r.passed for r in run_checks("ch99_ex2", lambda rows, factor: rows.clone().mul_(factor)))


def test_thorough_names_quote_the_sizes_that_ran(demo, capsys):
    """Before: a thorough run printed "3 rows of 4 scaled by 2" for hidden draws of 2 to 6 rows of 3.
    Now a name that quotes sizes is kept only where the draw has the check's own sizes; otherwise it is
    shown as the check's own case, followed by the inputs that ran."""
    check("ch99_ex2", lambda rows, factor: rows * factor, thorough=True)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and lines[0].startswith("ch99_ex2 \u00b7 scale: 3/3 checks passed on fresh inputs")
    seed = int(re.search(r"seed (\d+)", lines[0]).group(1))
    from attention_course.checks.plan import hidden_seed
    for line, index in zip(lines[1:3], (0, 1)):
        # Hidden draws have 3 columns, never the check's own 4: every such line names what ran.
        rows = 2 + hidden_seed(seed, index) % 5
        assert "\u201c3 rows of 4" in line and "on fresh inputs of other sizes" in line, line
        assert f"x of shape ({rows}, 3)" in line, line
    assert lines[3] == "  \u2713 scaled rows, any size"   # no number in the name: it holds at every size


def test_public_runs_keep_the_check_names(demo):
    assert [r.check for r in run_checks("ch99_ex2", _scale)] == ["3 rows of 4 scaled by 2",
                                                                "3 rows of 4, by a custom compare"]
