"""Regression tests of chapter 1's exercises (queries, keys and values), filed by exercise.

Where a newly found mistake's regression test goes: into this file, in the section of its
exercise, named ``test_ch01_exM_<what it shows>``; a test about several of the chapter's
exercises is parametrized so that every id carries its exercise's label
(``tests/exercises/conftest.py`` refuses a test here without one). Write each wrong answer
by hand, the way a student would (never import the kept mistake it should match, nor a
solver's files); the shared helpers are in ``tests/exercise_helpers.py``.
"""
import json
import math

import pytest
import torch

from attention_course.checks.registry import all_exercises, get_exercise

from exercise_helpers import (BLAMING, ROOT, assert_mistake, check_named, failed_checks, mistake_hint,
                              passes_everywhere, statement)


# ------------------------------------------------------------- ch01_ex1: attention_pool

def test_ch01_ex1_torch_mm_on_a_batch_gets_the_batched_product_hint():
    """Issue 40, item 4: torch.mm works on the 2-D checks and raises "self must be a matrix" on the
    batched ones; the hint names the shapes given and the product that keeps a batch axis."""
    def attention_pool(weights, values):
        if weights.dim() != values.dim() or weights.dim() not in (2, 3) or weights.shape[:-2] != values.shape[:-2] \
                or weights.shape[-1] != values.shape[-2]:
            raise ValueError(f"weights {tuple(weights.shape)} and values {tuple(values.shape)} do not fit")
        return torch.mm(weights, values)

    hint = mistake_hint("ch01_ex1", "torch.mm on a batch")
    assert "(batch, num_queries, num_keys)" in hint and "torch.matmul" in hint
    assert_mistake("ch01_ex1", attention_pool, "torch.mm on a batch")
    assert len(failed_checks("ch01_ex1", attention_pool)) == 2


# ------------------------------------------------------------- ch01_ex2: normalize_weights

def test_ch01_ex2_totals_without_keepdim_get_the_keepdim_hint():
    """Issue 28: the learner's first failure in ch01_ex2 was a shape error whose hint restated the
    task. Totals summed without keepdim get the hint that names the idiom, on every public check."""
    def without_keepdim(scores):
        if (scores < 0).any():
            raise ValueError("scores must be non-negative")
        weights = scores / scores.sum(dim=-1)
        return torch.nan_to_num(weights, nan=1.0 / scores.shape[-1])

    hint = mistake_hint("ch01_ex2", "totals without keepdim")
    assert "keepdim=True" in hint
    failed = failed_checks("ch01_ex2", without_keepdim)
    # The error-message check compares messages too, and this answer words its ValueError in
    # its own way: there the check's own hint is the right one.
    value_checks = [r for r in failed if "raise" not in r.check]
    assert len(value_checks) >= 3 and all(r.hint == hint for r in value_checks), \
        [(r.check, r.hint) for r in failed]


# ------------------------------------------------------------- ch01_ex3: hard_lookup

def test_ch01_ex3_differences_without_a_new_axis_get_the_new_axis_hint():
    """Issue 28: subtracting queries and keys as they are (no new axis) fails with a broadcasting
    error, or pairs query i with key i when the counts agree; the hint names the missing axis."""
    def without_new_axis(queries, keys, values):
        if queries.shape[-1] != keys.shape[-1] or keys.shape[0] != values.shape[0]:
            raise ValueError(f"queries {tuple(queries.shape)}, keys {tuple(keys.shape)} and values "
                             f"{tuple(values.shape)} do not fit together")
        nearest = torch.argmin(torch.sum((queries - keys) ** 2, dim=-1), dim=-1)
        return values[nearest]

    hint = mistake_hint("ch01_ex3", "no new axis for the pairs")
    failed = failed_checks("ch01_ex3", without_new_axis)
    value_checks = [r for r in failed if "raise" not in r.check]  # messages are worded freely
    assert len(value_checks) >= 3 and all(r.hint == hint for r in value_checks), \
        [(r.check, r.hint) for r in failed]


# ------------------------------------------------------------- ch01_ex4: cued_weights

def shift_over_every_key(queries, keys, salience, temperature=1.0, warned=None):
    if temperature <= 0:
        raise ValueError("temperature must be positive")
    if (salience < 0).any() or (salience == 0).all():
        raise ValueError("salience must be non-negative with a positive entry")
    if warned is not None:
        louder = salience.clone()
        louder[warned] *= 5
        moves = shift_over_every_key(queries, keys, louder, temperature) - \
            shift_over_every_key(queries, keys, salience, temperature)
        return int(moves.abs().sum(1).argmax())
    scores = -((queries[:, None] - keys[None]) ** 2).sum(-1) / temperature
    top = scores.max(dim=1, keepdim=True).values
    weighted = salience * torch.exp(scores - top)
    return weighted / weighted.sum(dim=1, keepdim=True)


def test_ch01_ex4_shift_over_every_key_is_caught_in_public_with_its_hint():
    """The trap the statement warns about (issue 26): a max shift over all keys, switched-off ones
    included, turns the row of a query whose nearest key has salience 0 into 0/0. A public check
    catches it and names it."""
    assert_mistake("ch01_ex4", shift_over_every_key, "shifted by the maximum over every key")


def exp_then_divide(queries, keys, salience, temperature=1.0, warned=None):
    if warned is not None:
        return shift_over_every_key(queries, keys, salience, temperature, warned)
    if temperature <= 0:
        raise ValueError("temperature must be positive")
    if (salience < 0).any() or (salience == 0).all():
        raise ValueError("salience must be non-negative with a positive entry")
    weighted = salience * torch.exp(-torch.cdist(queries, keys) ** 2 / temperature)
    return weighted / weighted.sum(dim=1, keepdim=True)


def test_ch01_ex4_the_hidden_switched_off_check_names_the_shift_over_every_key():
    """Solver finding: in the hidden check "the nearest key switched off ...", the shift over every key
    got the hint of exp-then-divide (both gave 0/0 on its one call, and exp-then-divide is kept first).
    The check now also has queries far from every key, where only exp-then-divide gives 0/0: each
    answer gets its own mistake's hint there, at every grading seed."""
    name = check_named("ch01_ex4", "the nearest key switched off and every other key far").name
    for answer, mistake in ((shift_over_every_key, "shifted by the maximum over every key"),
                            (exp_then_divide, "exp then divide (underflow)")):
        for seed in (11, 2026, 7, 3):
            failed = {r.check: r for r in failed_checks("ch01_ex4", answer, seed)}
            assert name in failed, (answer.__name__, seed, list(failed))
            assert failed[name].mistake == mistake and failed[name].hint == mistake_hint("ch01_ex4", mistake), \
                (answer.__name__, seed, failed[name].mistake)


def test_ch01_ex4_no_hint_states_the_combination_the_student_works_out():
    """The student works out that salience enters the softmax's scores as its logarithm (so that the built-in
    softmax and its max shift apply); no hint of a check or of a kept mistake may say so (as
    test_ch02_ex5_no_statement_or_hint_prints_the_closed_form does for ch02_ex5's closed form)."""
    exercise = get_exercise("ch01_ex4")
    for hint in [c.hint for c in exercise.checks] + [m.hint for m in exercise.mistakes]:
        flat = " ".join(hint.lower().split())
        for formula in ("log(salience", "log salience", "log(s)", "logarithm of the salience", "log of the salience",
                        "+ log", "log(sal"):
            assert formula not in flat, (formula, hint)


def _student_cued(queries, keys, salience, temperature=1.0):
    if temperature <= 0:
        raise ValueError("temperature must be positive")
    if (salience < 0).any() or not (salience > 0).any():
        raise ValueError("salience must be non-negative with a positive entry")
    return torch.softmax(-torch.cdist(queries, keys) ** 2 / temperature + salience.log(), dim=-1)


def test_ch01_ex4_the_query_nearest_the_warned_station_is_named():
    """Issue 40, item 5: the chapter's question is checked. The first guess, the query nearest to the
    warned key, gets the hint that says why its row barely moves; the hint gives no index."""
    def nearest(queries, keys, salience, temperature=1.0, warned=None):
        if warned is None:
            return _student_cued(queries, keys, salience, temperature)
        return int(torch.cdist(queries, keys[warned:warned + 1])[:, 0].argmin())

    assert_mistake("ch01_ex4", nearest, "the query nearest to the warned key")
    for seed in (11, 2026):
        assert failed_checks("ch01_ex4", nearest, seed, first_failure=True), seed
    hint = mistake_hint("ch01_ex4", "the query nearest to the warned key")
    assert "(2, 2)" not in hint and "index 1" not in hint


def test_ch01_ex4_the_question_answered_by_the_weights_before_and_after_passes_everywhere():
    """Any correct way to answer: here every row's move computed in a loop from two calls."""
    def by_rows(queries, keys, salience, temperature=1.0, warned=None):
        if warned is None:
            return _student_cued(queries, keys, salience, temperature)
        louder = torch.where(torch.arange(len(salience)) == warned, 5 * salience, salience)
        before, after = by_rows(queries, keys, salience, temperature), by_rows(queries, keys, louder, temperature)
        moves = [float((a - b).abs().sum()) for a, b in zip(after, before)]
        return max(range(len(moves)), key=lambda q: moves[q])

    passes_everywhere("ch01_ex4", by_rows)


def test_ch01_ex4_a_constant_answer_to_the_question_fails():
    """The stations' answer (query 1) is not an answer at grading: the queries come in another order."""
    def always_one(queries, keys, salience, temperature=1.0, warned=None):
        return 1 if warned is not None else _student_cued(queries, keys, salience, temperature)

    assert not failed_checks("ch01_ex4", always_one)
    for seed in (11, 2026):
        assert failed_checks("ch01_ex4", always_one, seed), seed


def _weight_near_half(queries, keys, salience, temperature=1.0, warned=None):
    weights = _student_cued(queries, keys, salience, temperature)
    if warned is None:
        return weights
    return int((weights[:, warned] - 0.5).abs().argmin())


def test_ch01_ex4_the_query_whose_weight_on_the_warned_key_is_nearest_one_half_fails_the_hidden_draws():
    """Blind solver's gap: a row's move does not peak where its weight on the warned key is 1/2. The hidden
    draws always hold a case where this guess is wrong, at every grading seed."""
    assert failed_checks("ch01_ex4", _weight_near_half)
    for seed in (11, 2026, 7, 3, 5, 123):
        failed = [r.check for r in failed_checks("ch01_ex4", _weight_near_half, seed)]
        assert "the question on random points and saliences (hidden)" in failed, (seed, failed)


def test_ch01_ex4_the_weight_nearest_one_half_gets_its_own_hint_in_public():
    """Issue 40, item 4: on the chapter's stations this guess answered like the query nearest to the warned
    key, so it got that mistake's hint. The public check now holds C's warning with a fourth query just past
    C, where the nearest query, the farthest, the one whose weight is nearest 1/2 and the answer are four
    different queries: the guess gets a hint of its own, which gives no index and no formula."""
    assert_mistake("ch01_ex4", _weight_near_half, "the query whose weight on the warned key is nearest 1/2")
    hint = mistake_hint("ch01_ex4", "the query whose weight on the warned key is nearest 1/2")
    assert "(2, 2)" not in hint and "0.3" not in hint and "1 + 4" not in hint


@pytest.mark.parametrize("kind", ["float", "tensor", "numpy"])
def test_ch01_ex4_the_answer_to_the_question_is_a_python_int(kind):
    """Issue 40, item 3: the contract asks for a Python int; a float or a 0-d tensor of the right index
    passed the question's checks (the default compare reads numbers by value). Now they fail with a reason
    that names the type returned; a NumPy integer counts as one, as the contract says."""
    import numpy as np

    def answer(queries, keys, salience, temperature=1.0, warned=None):
        weights = _student_cued(queries, keys, salience, temperature)
        if warned is None:
            return weights
        louder = salience.clone()
        louder[warned] *= 5
        moved = (_student_cued(queries, keys, louder, temperature) - weights).abs().sum(-1).argmax()
        return {"float": float(moved), "tensor": moved, "numpy": np.int64(moved)}[kind]

    if kind == "numpy":
        passes_everywhere("ch01_ex4", answer)
        return
    failed = failed_checks("ch01_ex4", answer)
    assert [r.check for r in failed] == [c.name for c in all_exercises(1) if c.label == "ch01_ex4"
                                         for c in c.public_checks if c.name.startswith("the question")], failed
    assert "the contract asks for a Python int" in failed[0].reason, failed[0].reason
    assert ("float" if kind == "float" else "tensor") in failed[0].reason
    assert "NumPy integer counts as one" in " ".join(statement("ch01_ex4").split())


# ------------------------------------------------------------- ch01_ex5: zero_temperature_weights

@pytest.mark.parametrize("tau", [1e-2, 1e-3, 1e-4, 1e-5])
def test_ch01_ex5_softmax_at_a_fixed_small_temperature_fails(tau):
    """Issue 40, item 3: the softmax at one small temperature instead of its limit passed every public
    and hidden check, whose coordinates were integers or halves (every gap between squared distances
    at least 0.25, so e^-250 looked like 0). It fails now, in public and at grading; at 1e-3 (the
    temperature the chapter's plots end at) with the hint of its kept mistake."""
    def zero_temperature_weights(queries, keys):
        return torch.softmax(-torch.cdist(queries, keys) ** 2 / tau, dim=-1)

    failed = failed_checks("ch01_ex5", zero_temperature_weights)
    assert [r.check for r in failed] == ["points a few thousandths apart: one nearest key, then ties"]
    if tau == 1e-3:
        hint = mistake_hint("ch01_ex5", "softmax at a fixed small temperature")
        assert failed[0].hint == hint
        assert "argmin" not in hint and "min(" not in hint and "==" not in hint  # names no answer
    for seed in (11, 2026, 7):
        assert failed_checks("ch01_ex5", zero_temperature_weights, seed, first_failure=True), seed


def test_ch01_ex5_the_limit_written_with_a_tolerance_on_ties_passes_everywhere():
    """The close-points check keeps its ties exact: an answer that finds the nearest keys with a
    relative tolerance (as a student comparing floats would) still passes."""
    def zero_temperature_weights(queries, keys):
        d2 = ((queries[:, None, :] - keys[None, :, :]) ** 2).sum(-1)
        best = d2.min(dim=1, keepdim=True).values
        near = (d2 <= best * (1 + 1e-6)).to(queries.dtype)
        return near / near.sum(dim=1, keepdim=True)

    passes_everywhere("ch01_ex5", zero_temperature_weights)


# ------------------------------------------------------------- ch01_ex6: temperature_for_peak

def _student_gaps(queries, keys):
    d2 = ((queries[:, None] - keys[None]) ** 2).sum(-1).double()
    return d2 - d2.min(dim=1, keepdim=True).values


def _student_bisection(queries, keys, target, coldest=False, low=1e-3, high=1e3, nan_on_ties=True):
    """A student's bisection on tau in a fixed interval, as first written (with coldest=True: the
    index of the smallest temperature)."""
    gaps = _student_gaps(queries, keys)
    out = []
    for row in gaps:
        if nan_on_ties and target * int((row == 0).sum()) >= 1:
            out.append(math.nan)
            continue
        lo, hi = low, high
        for _ in range(80):
            mid = math.sqrt(lo * hi)
            peak = 1 / torch.exp(-row / mid).sum().item()
            lo, hi = (mid, hi) if peak > target else (lo, mid)
        out.append(math.sqrt(lo * hi))
    if coldest:
        return min(range(len(out)), key=lambda q: out[q])
    return torch.tensor(out, dtype=queries.dtype)


def test_ch01_ex6_fixed_interval_is_named():
    assert_mistake("ch01_ex6", _student_bisection, "a fixed search interval")


def test_ch01_ex6_no_nan_on_ties_is_named():
    def no_nan(queries, keys, target, coldest=False):
        return _student_bisection(queries, keys, target, coldest, low=1e-6, high=1e6, nan_on_ties=False)

    assert_mistake("ch01_ex6", no_nan, "a tie never gives nan")


def test_ch01_ex6_wide_interval_passes_everywhere():
    """Widening the fixed interval far enough is a correct answer: the checks compare the largest
    weights at the returned temperatures, not one way of finding them."""
    def wide(queries, keys, target, coldest=False):
        return _student_bisection(queries, keys, target, coldest, low=1e-8, high=1e8)

    passes_everywhere("ch01_ex6", wide)


def test_ch01_ex6_returning_the_reference_tau_rounded_badly_fails():
    """Temperatures off by 1 % move the largest weights by more than the contract's 1e-5."""
    def off_by_one_percent(queries, keys, target):
        return _student_bisection(queries, keys, target, low=1e-8, high=1e8) * 1.01

    assert failed_checks("ch01_ex6", off_by_one_percent)


def test_ch01_ex6_the_query_nearest_to_a_station_is_named():
    """Issue 40, item 5: the chapter's question (which query needs the smallest temperature) is checked;
    answering with the query nearest to a key gets the hint on what the softmax ignores."""
    def nearest(queries, keys, target, coldest=False):
        if coldest:
            return int(torch.cdist(queries, keys).amin(dim=1).argmin())
        return _student_bisection(queries, keys, target, low=1e-8, high=1e8)

    assert_mistake("ch01_ex6", nearest, "the query nearest to a key")
    for seed in (11, 2026):
        assert failed_checks("ch01_ex6", nearest, seed), seed



def test_ch01_ex6_the_smallest_gap_to_the_runner_up_key_is_named():
    """Blind solver's gap: the query whose nearest key leads the next one by the least is not the
    coldest when several keys sit a little further (one key at gap 1 against five at gap 1.25). A public
    check names it, transformed at grading seeds, and the hidden draws always hold such a case."""
    def runner_up(queries, keys, target, coldest=False):
        if not coldest:
            return _student_bisection(queries, keys, target, low=1e-8, high=1e8)
        return int(_student_gaps(queries, keys).sort(dim=1).values[:, 1].argmin())

    assert_mistake("ch01_ex6", runner_up, "the smallest gap to the runner-up key")
    for seed in (11, 2026, 7, 3, 5, 123):
        failed = [r.check for r in failed_checks("ch01_ex6", runner_up, seed)]
        assert "the question on random small-integer points (hidden)" in failed, (seed, failed)
        assert any(name.startswith("the question: one key at gap 1") for name in failed), (seed, failed)


# ------------------------------------------------------------- open questions of the chapter

@pytest.mark.parametrize("label", ["ch01_ex4", "ch01_ex6"])
def test_ch01_open_question_has_a_reference_answer_in_its_solution_block(label):
    """An open question's reference answer is a solution-only markdown cell inside the exercise's
    solution block (folded in the dropdown on the full site), and the student notebook lacks it."""
    cells = json.loads((ROOT / "solutions" / "01_queries_keys_values.ipynb").read_text())["cells"]
    text = ["".join(c["source"]) for c in cells]
    start = next(i for i, t in enumerate(text) if f"{{solution-start}} {label}" in t)
    end = next(i for i in range(start, len(cells)) if "{solution-end}" in text[i])
    answers = [i for i in range(start, end) if cells[i]["cell_type"] == "markdown"
               and "solution-only" in cells[i]["metadata"].get("tags", [])]
    assert len(answers) == 1, (label, answers)
    student = (ROOT / "chapters" / "01_queries_keys_values.ipynb").read_text()
    assert text[answers[0]].splitlines()[0][:60] not in student


# ------------------------------------------------------------- every check hint of the chapter

@pytest.mark.parametrize("exercise", all_exercises(1), ids=lambda e: e.label)
def test_ch01_check_hints_describe_rather_than_blame(exercise):
    for check in exercise.checks:
        for words in BLAMING:
            assert words not in check.hint.lower(), (exercise.label, check.name, words)
