"""Regression tests of chapter 2's exercises (Nadaraya-Watson), filed by exercise.

Where a newly found mistake's regression test goes: into this file, in the section of its
exercise, named ``test_ch02_exM_<what it shows>``; a test about several of the chapter's
exercises is parametrized so that every id carries its exercise's label
(``tests/exercises/conftest.py`` refuses a test here without one). Write each wrong answer
by hand, the way a student would (never import the kept mistake it should match, nor a
solver's files); the shared helpers are in ``tests/exercise_helpers.py``.

From issue 10, the findings of solver "a": answers that the checks used to accept although
they break the contract now fail a check (or, where the contract clause was not worth
checking, the clause is gone from the statement and the answer is correct under the new
wording); answers that used to get a hint blaming another mistake now get their own kept
mistake's hint, or the check's neutral hint.
"""
import json
import math
from pathlib import Path

import pytest
import torch

from attention_course.checks.checking import outcomes_for, run_checks
from attention_course.checks.registry import get_exercise

from exercise_helpers import (all_failures, assert_mistake, check_named, failed_checks, failed_hidden_somewhere,
                              mistake_hint, passes_everywhere, statement)


# ======================================== ch02_ex1

# ---- ch02_ex1: a tensor width detached

def kernel_detached_width(distances, width):
    w = torch.as_tensor(width).detach().clone()
    if (w <= 0).any():
        raise ValueError("width must be positive")
    return torch.exp(-distances ** 2 / (2 * w ** 2))


def test_ch02_ex1_detached_width_fails():
    failures = failed_checks("ch02_ex1", kernel_detached_width)
    assert [r.check for r in failures] == [check_named("ch02_ex1", "gradients reach").name]


# ---- ch02_ex1: a value bug (the 1/2 forgotten) gets its own hint

def kernel_without_two(distances, width):
    if (torch.as_tensor(width) <= 0).any():
        raise ValueError("width must be positive")
    return torch.exp(-distances ** 2 / width ** 2)


def test_ch02_ex1_value_bug_gets_its_hint_not_the_error_hint():
    assert_mistake("ch02_ex1", kernel_without_two, "forgot the 1/2")


# ======================================== ch02_ex2

def _nw(queries, keys, values, width, score):
    if queries.dim() != 2 or keys.dim() != 2 or values.dim() != 2:
        raise ValueError("queries, keys and values must be 2-D")
    if keys.shape != values.shape:
        raise ValueError("keys and values must have the same shape")
    if queries.shape[0] != keys.shape[0]:
        raise ValueError("queries and keys: batch sizes differ")
    if width <= 0:
        raise ValueError("width must be positive")
    diff = queries[:, :, None] - keys[:, None, :]
    weights = torch.softmax(score(diff) / (2 * width ** 2), dim=-1)
    return torch.einsum("bqk,bk->bq", weights, values), weights


def nw_absolute(queries, keys, values, width):
    return _nw(queries, keys, values, width, lambda d: -d.abs())


def nw_swapped(queries, keys, values, width):
    predictions, weights = _nw(queries, keys, values, width, lambda d: -d ** 2)
    return weights, predictions


def test_ch02_ex2_absolute_distance_and_swapped_pair_get_their_hints():
    assert_mistake("ch02_ex2", nw_absolute, "absolute distance")
    assert_mistake("ch02_ex2", nw_swapped, "(weights, predictions) swapped")


def test_ch02_ex2_check_hints_blame_nothing():
    batch = check_named("ch02_ex2", "a batch of 3").hint
    narrow = check_named("ch02_ex2", "a narrow width").hint
    assert "independent problems" not in batch and "this check compares" in batch
    assert "the reason above" in narrow


# ======================================== ch02_ex3

# ---- ch02_ex3: n >= 2 not validated

def _loo(keys, values, s):
    logits = -(keys[:, None] - keys[None, :]) ** 2 / (2 * torch.exp(s) ** 2)
    logits = logits.masked_fill(torch.eye(len(keys), dtype=torch.bool), -math.inf)
    return ((logits.softmax(-1) @ values - values) ** 2).mean()


def fit_width_any_length(keys, values, init_width, lr, num_steps):
    if keys.dim() != 1 or values.dim() != 1 or keys.shape != values.shape:
        raise ValueError("keys and values must be 1-D of the same length")
    if init_width <= 0:
        raise ValueError("init_width must be positive")
    s = torch.tensor(math.log(init_width), requires_grad=True)
    losses = []
    for _ in range(num_steps):
        loss = _loo(keys, values, s)
        losses.append(loss.detach())
        (g,) = torch.autograd.grad(loss, s)
        s = (s - lr * g).detach().requires_grad_(True)
    return math.exp(s.item()), torch.stack(losses) if losses else torch.zeros(0)


def test_ch02_ex3_length_one_keys_fail():
    failures = all_failures("ch02_ex3", fit_width_any_length)
    assert failures and all(r.check.startswith("bad keys") for r in failures), \
        [(r.check, r.reason) for r in failures]


def fit_width_losses_with_grad(keys, values, init_width, lr, num_steps):
    if keys.dim() != 1 or keys.shape != values.shape or len(keys) < 2:
        raise ValueError("keys and values must be 1-D of the same length >= 2")
    if init_width <= 0:
        raise ValueError("init_width must be positive")
    s = torch.tensor(math.log(init_width), requires_grad=True)
    losses = []
    for _ in range(num_steps):
        loss = _loo(keys, values, s)
        losses.append(loss)                      # the graph stays attached
        (g,) = torch.autograd.grad(loss, s, retain_graph=True)
        s = s - lr * g
    return math.exp(s.item()), torch.stack(losses) if losses else torch.zeros(0)


def test_ch02_ex3_no_gradient_clause_removed():
    # The checks cannot see whether a returned tensor carries a graph (outcomes are detached
    # plain data), so the clause "(no gradient attached)" left the contract; the answer is
    # correct under the new wording.
    assert "gradient attached" not in statement("ch02_ex3")
    assert not all_failures("ch02_ex3", fit_width_losses_with_grad)


# ---- ch02_ex3: log(width) returned

def fit_width_returns_log(keys, values, init_width, lr, num_steps):
    if len(keys) < 2:
        raise ValueError("keys and values need length >= 2")
    width, losses = fit_width_any_length(keys, values, init_width, lr, num_steps)
    return math.log(width), losses


def test_ch02_ex3_log_width_gets_its_hint():
    assert_mistake("ch02_ex3", fit_width_returns_log, "returned log(width)")
    assert "where they part" not in check_named("ch02_ex3", "20 steps").hint


# ======================================== ch02_ex4

# ---- ch02_ex4: candidates, keys and values not validated fully

def _choices_core(keys, values, test_queries, test_targets, candidates):
    h2 = 2 * candidates.reshape(-1, 1, 1) ** 2
    loo = (-(keys[:, None] - keys) ** 2 / h2).masked_fill(torch.eye(len(keys), dtype=torch.bool), -math.inf)
    loo_err = ((loo.softmax(-1) @ values - values) ** 2).mean(-1)
    test = -(test_queries[:, None] - keys) ** 2 / h2
    test_err = ((test.softmax(-1) @ values - test_targets) ** 2).mean(-1)
    c = candidates.reshape(-1)
    excess = (test_err[loo_err.argmin()] / test_err.min() - 1).item()
    return c[loo_err.argmin()].item(), c[test_err.argmin()].item(), loo_err, test_err, excess


def choices_candidates_any_shape(keys, values, test_queries, test_targets, candidates):
    if candidates.numel() == 0 or (candidates <= 0).any():
        raise ValueError("candidates must be non-empty and positive")
    if keys.dim() != 1 or keys.shape != values.shape or len(keys) < 2:
        raise ValueError("keys and values: 1-D, same length >= 2")
    return _choices_core(keys, values, test_queries, test_targets, candidates)


def choices_any_length(keys, values, test_queries, test_targets, candidates):
    if candidates.dim() != 1 or candidates.numel() == 0 or (candidates <= 0).any():
        raise ValueError("candidates must be non-empty and positive")
    if keys.dim() != 1 or keys.shape != values.shape:
        raise ValueError("keys and values: 1-D, same length")
    return _choices_core(keys, values, test_queries, test_targets, candidates)


def choices_keys_any_dim(keys, values, test_queries, test_targets, candidates):
    if candidates.dim() != 1 or candidates.numel() == 0 or (candidates <= 0).any():
        raise ValueError("candidates must be non-empty and positive")
    if keys.shape != values.shape or keys.numel() < 2:
        raise ValueError("keys and values: same shape, >= 2")
    return _choices_core(keys.reshape(-1), values.reshape(-1), test_queries, test_targets, candidates)


@pytest.mark.parametrize("answer", [choices_candidates_any_shape, choices_any_length, choices_keys_any_dim])
def test_ch02_ex4_missing_validation_fails(answer):
    failures = all_failures("ch02_ex4", answer)
    assert failures and all(r.check.startswith("bad candidates") for r in failures), \
        [(r.check, r.reason) for r in failures]


# ---- ch02_ex4: /(2h) instead of /(2h^2); a float32 kernel ratio

def choices_width_not_squared(keys, values, test_queries, test_targets, candidates):
    if candidates.dim() != 1 or candidates.numel() == 0 or (candidates <= 0).any():
        raise ValueError("candidates must be non-empty and positive")
    if keys.dim() != 1 or keys.shape != values.shape or len(keys) < 2:
        raise ValueError("keys and values: 1-D, same length >= 2")
    return _choices_wrong_scale(keys, values, test_queries, test_targets, candidates)


def _choices_wrong_scale(keys, values, test_queries, test_targets, candidates):
    loo, test = [], []
    eye = torch.eye(len(keys), dtype=torch.bool)
    for h in candidates:
        s = (-(keys[:, None] - keys) ** 2 / (2 * h)).masked_fill(eye, -math.inf)
        loo.append(((s.softmax(-1) @ values - values) ** 2).mean())
        t = -(test_queries[:, None] - keys) ** 2 / (2 * h)
        test.append(((t.softmax(-1) @ values - test_targets) ** 2).mean())
    loo, test = torch.stack(loo), torch.stack(test)
    excess = (test[loo.argmin()] / test.min() - 1).item()
    return candidates[loo.argmin()].item(), candidates[test.argmin()].item(), loo, test, excess


def choices_kernel_ratio32(keys, values, test_queries, test_targets, candidates):
    if candidates.dim() != 1 or candidates.numel() == 0 or (candidates <= 0).any():
        raise ValueError("candidates must be non-empty and positive")
    if keys.dim() != 1 or keys.shape != values.shape or len(keys) < 2:
        raise ValueError("keys and values: 1-D, same length >= 2")
    loo, test = [], []
    for h in candidates.tolist():
        k = torch.exp(-(keys[:, None] - keys[None, :]) ** 2 / (2 * h * h))
        k.fill_diagonal_(0.0)
        loo.append(((k @ values / k.sum(1) - values) ** 2).mean())
        kt = torch.exp(-(test_queries[:, None] - keys[None, :]) ** 2 / (2 * h * h))
        test.append(((kt @ values / kt.sum(1) - test_targets) ** 2).mean())
    loo, test = torch.stack(loo), torch.stack(test)
    excess = (test[loo.argmin()] / test[test.argmin()] - 1).item()
    return candidates[loo.argmin()].item(), candidates[test.argmin()].item(), loo, test, excess


def test_ch02_ex4_hints_do_not_blame_the_order():
    failures = failed_checks("ch02_ex4", choices_width_not_squared)
    assert failures
    for r in failures:
        assert r.mistake is None and "no particular order; errors[j]" not in r.hint, (r.check, r.hint)
    assert_mistake("ch02_ex4", choices_kernel_ratio32, "float32 kernel over its sum")
    assert "numerically stable" in statement("ch02_ex4")


# ---- ch02_ex4: the question (issue 40, item 5): excess, checked on data sets where the widths differ

def _choices_with_excess(excess_of):
    def answer(keys, values, test_queries, test_targets, candidates):
        if candidates.dim() != 1 or candidates.numel() == 0 or (candidates <= 0).any():
            raise ValueError("candidates must be a non-empty 1-D tensor of positive widths")
        if keys.dim() != 1 or keys.shape != values.shape or len(keys) < 2:
            raise ValueError("keys and values: 1-D, same length >= 2")
        loo_width, test_width, loo_errors, test_errors, _ = _choices_core(keys, values, test_queries,
                                                                          test_targets, candidates)
        return loo_width, test_width, loo_errors, test_errors, excess_of(loo_errors, test_errors)
    return answer


def test_ch02_ex4_excess_as_a_plain_difference_is_named():
    answer = _choices_with_excess(lambda loo, test: float(test[loo.argmin()] - test[test.argmin()]))
    assert_mistake("ch02_ex4", answer, "excess as a difference")
    for seed in (11, 2026):
        assert failed_checks("ch02_ex4", answer, seed), seed


def test_ch02_ex4_excess_measured_on_the_leave_one_out_errors_is_named():
    answer = _choices_with_excess(lambda loo, test: float(loo[test.argmin()] / loo[loo.argmin()] - 1))
    assert_mistake("ch02_ex4", answer, "excess from the leave-one-out errors")


def test_ch02_ex4_excess_in_percent_fails_and_a_ratio_in_float64_passes():
    """The contract asks for a fraction (0.25 for 25 %); computed in float64 from the float32 errors it
    passes everywhere."""
    percent = _choices_with_excess(lambda loo, test: 100 * float(test[loo.argmin()] / test.min() - 1))
    assert failed_checks("ch02_ex4", percent)
    ratio64 = _choices_with_excess(lambda loo, test: float(test.double()[loo.argmin()] / test.double().min()) - 1)
    passes_everywhere("ch02_ex4", ratio64)


# ======================================== ch02_ex5

# ---- ch02_ex5: keys and values neither checked 1-D nor of length >= 2

def local_linear_loose(queries, keys, values, width):
    if width <= 0:
        raise ValueError("width must be positive")
    if keys.shape != values.shape:
        raise ValueError("keys and values differ in shape")
    k, v = keys.reshape(-1).double(), values.reshape(-1).double()
    u = k[None, :] - queries.double()[:, None]
    K = torch.exp(-u ** 2 / (2 * width ** 2))
    s0, s1, s2 = K.sum(1, keepdim=True), (K * u).sum(1, keepdim=True), (K * u * u).sum(1, keepdim=True)
    weights = K * (s2 - u * s1) / (s0 * s2 - s1 ** 2)
    return (weights @ v).float(), weights.float()


def test_ch02_ex5_missing_validation_fails():
    failures = all_failures("ch02_ex5", local_linear_loose)
    assert failures and all(r.check.startswith("a non-positive width") for r in failures), \
        [(r.check, r.reason) for r in failures]


# ---- ch02_ex5: the kernel factor K_i left out (a value bug)

def local_linear_no_kernel(queries, keys, values, width):
    if queries.dim() != 1:
        raise ValueError("queries must be 1-D")
    if keys.dim() != 1 or keys.shape != values.shape or len(keys) < 2:
        raise ValueError("keys and values must be 1-D of one length >= 2")
    if width <= 0:
        raise ValueError("width must be positive")
    u = keys.double()[None, :] - queries.double()[:, None]
    K = torch.exp(-u ** 2 / (2 * width ** 2))
    s0, s1, s2 = K.sum(1, keepdim=True), (K * u).sum(1, keepdim=True), (K * u * u).sum(1, keepdim=True)
    weights = (s2 - u * s1) / (s0 * s2 - s1 ** 2)           # the factor K_i left out
    return (weights @ values.double()).float(), weights.float()


# ---- ch02_ex5: wrong weights, right predictions on a line

def local_linear_transposed(queries, keys, values, width):
    predictions, weights = local_linear_no_kernel_fixed(queries, keys, values, width)
    return predictions, weights.T


def local_linear_no_kernel_fixed(queries, keys, values, width):
    if queries.dim() != 1:
        raise ValueError("queries must be 1-D")
    if keys.dim() != 1 or keys.shape != values.shape or len(keys) < 2:
        raise ValueError("keys and values must be 1-D of one length >= 2")
    if width <= 0:
        raise ValueError("width must be positive")
    u = keys.double()[None, :] - queries.double()[:, None]
    K = torch.exp(-u ** 2 / (2 * width ** 2))
    s0, s1, s2 = K.sum(1, keepdim=True), (K * u).sum(1, keepdim=True), (K * u * u).sum(1, keepdim=True)
    weights = K * (s2 - u * s1) / (s0 * s2 - s1 ** 2)
    return (weights @ values.double()).float(), weights.float()


def test_ch02_ex5_hints_describe_both_items():
    line = check_named("ch02_ex5", "a straight line")
    ends = check_named("ch02_ex5", "queries at the ends")
    for r in failed_checks("ch02_ex5", local_linear_transposed):
        assert r.mistake is None and r.hint in (line.hint, ends.hint, check_named("ch02_ex5", "12 queries").hint)
    assert "the weights" in line.hint and "reason above" in line.hint
    assert "one side of the query" not in ends.hint
    assert_mistake("ch02_ex5", local_linear_no_kernel, "kernel factor K_i left out")
    assert not all_failures("ch02_ex5", local_linear_no_kernel_fixed)



# ---- ch02_ex5: the closed form is the student's to derive (issue 40: a transfer, no longer a retype)

def test_ch02_ex5_no_statement_or_hint_prints_the_closed_form():
    exercise = get_exercise("ch02_ex5")
    texts = [statement("ch02_ex5")] + [c.hint for c in exercise.checks] + [m.hint for m in exercise.mistakes]
    for text in texts:
        for closed_form in ("S_0 S_2", "S0 S2", "S_2 - u_i S_1", "S2 - u_i S1", "S_p ="):
            assert closed_form not in text, (closed_form, text)
    student = json.loads((Path(__file__).parents[2] / "chapters" / "02_nadaraya_watson.ipynb").read_text())
    prose = "".join("".join(c["source"]) for c in student["cells"] if c["cell_type"] == "markdown")
    assert "S_0 S_2 - S_1^2" not in prose and "T_0" not in prose


# ---- ch02_ex5: derived by solving the 2 x 2 system for the identity as the values (a correct answer)

def local_linear_identity_solve(queries, keys, values, width):
    if queries.dim() != 1:
        raise ValueError("queries must be 1-D")
    if keys.dim() != 1 or keys.shape != values.shape or keys.numel() < 2:
        raise ValueError(f"keys {tuple(keys.shape)} and values {tuple(values.shape)} must be 1-D, same length >= 2")
    if not width > 0:
        raise ValueError(f"width must be positive, got {width}")
    n = keys.numel()
    rows = []
    for q in queries.double():
        u = keys.double() - q
        w = torch.softmax(-u ** 2 / (2 * width ** 2), dim=0)
        # the normal equations for every unit vector of values at once: the weights are a's row
        lhs = torch.tensor([[w.sum(), (w * u).sum()], [(w * u).sum(), (w * u * u).sum()]], dtype=torch.float64)
        rhs = torch.stack([w, w * u])                        # right-hand sides for v = e_1 ... e_n
        rows.append(torch.linalg.solve(lhs, rhs)[0])
    weights = torch.stack(rows).reshape(-1, n)
    return (weights @ values.double()).float(), weights.float()


def test_ch02_ex5_weights_from_the_normal_equations_pass():
    passes_everywhere("ch02_ex5", local_linear_identity_solve)


# ---- ch02_ex5: weights that depend on the values (right predictions, not a linear smoother)

def local_linear_value_dependent(queries, keys, values, width):
    predictions, _ = local_linear_identity_solve(queries, keys, values, width)
    nw = torch.softmax(-(queries[:, None] - keys[None, :]) ** 2 / (2 * width ** 2), dim=1)
    # Nadaraya-Watson weights nudged towards each prediction: weights @ values == predictions
    shift = (predictions - nw @ values) / (values @ values)
    return predictions, nw + shift[:, None] * values[None, :]


def test_ch02_ex5_weights_that_depend_on_the_values_fail():
    failures = failed_checks("ch02_ex5", local_linear_value_dependent)
    assert failures and all(r.mistake is None for r in failures), [(r.check, r.mistake) for r in failures]


# ---- ch02_ex5: the line fitted in raw k, in float32 (solver finding: a correct answer failed)
# The 2 x 2 normal equations with the design [1, k], solved per query and read at k = q. The same
# minimiser as the centred fit, but a + b q cancels near q = 5: entry by entry, rtol 1e-3 and
# atol 1e-5, the public check at the ends of [0, 5] failed it by 5.6e-5 (a far key's weight near 0).

def local_linear_raw_k_float32(queries, keys, values, width):
    if queries.dim() != 1:
        raise ValueError("queries must be 1-D")
    if keys.dim() != 1 or values.dim() != 1 or keys.shape != values.shape or keys.numel() < 2:
        raise ValueError("keys and values must be 1-D with the same length >= 2")
    if width <= 0:
        raise ValueError("width must be positive")
    X = torch.stack([torch.ones_like(keys), keys], dim=1)            # (n, 2), not centred
    rows = []
    for q in queries:
        K = torch.exp(-(keys - q) ** 2 / (2 * width ** 2))
        A = X.T @ (K[:, None] * X)                                    # X^T K X, (2, 2)
        coef = torch.linalg.solve(A, X.T * K)                         # (2, n): c0 and c1 per unit value
        rows.append(coef[0] + q * coef[1])                            # the line at k = q
    weights = torch.stack(rows)
    return weights @ values, weights


def test_ch02_ex5_raw_k_float32_fit_passes():
    passes_everywhere("ch02_ex5", local_linear_raw_k_float32)
    for seed in (3, 99, 1234, 5815, 10445):   # hidden draws where raw-k float32 fits come closest to the bound
        assert not failed_checks("ch02_ex5", local_linear_raw_k_float32, seed), seed


def test_ch02_ex5_the_row_tolerance_still_fails_a_one_percent_error():
    """The tolerance scales with each row and its conditioning, not so far that a small real error passes:
    the reference's weights with one entry of row 0 moved by 1% of the row's largest weight fail."""
    def nudged(queries, keys, values, width):
        predictions, weights = local_linear_identity_solve(queries, keys, values, width)
        weights = weights.clone()
        j = int(weights[0].abs().argmin())
        weights[0, j] += 0.01 * weights[0].abs().max()
        return weights @ values, weights

    failures = failed_checks("ch02_ex5", nudged)
    assert {r.check for r in failures} >= {check_named("ch02_ex5", "12 queries").name,
                                           check_named("ch02_ex5", "queries at the ends").name}, \
        [r.line() for r in failures]
    assert all("float32 rounding explains" in r.reason and r.mistake is None for r in failures), \
        [r.line() for r in failures]


# ======================================== ch02_ex6

# ---- ch02_ex6: the reference on cases worked by hand

def _gaussian_mean(distances, values, width):
    weights = [math.exp(-d * d / (2 * width * width)) for d in distances]
    return sum(w * v for w, v in zip(weights, values)) / sum(weights)


def test_ch02_ex6_reference_on_hand_worked_cases():
    """Keys 0, 1, 3, 6 with values 0, 2, 4, 8 and num_neighbors = 2: the query at 2 has distances
    2, 1, 1, 4, so its width is 1 (the tie counted twice); at 0 the width is 1, at 4.5 it is 1.5.
    Keys 1, 1, 3: a query at 1 has width 0 with two neighbours (the mean of 2 and 6) and width 2
    with three."""
    knn = get_exercise("ch02_ex6").reference
    values = [0.0, 2.0, 4.0, 8.0]
    expected = [_gaussian_mean([2, 1, 1, 4], values, 1.0), _gaussian_mean([0, 1, 3, 6], values, 1.0),
                _gaussian_mean([4.5, 3.5, 1.5, 1.5], values, 1.5)]
    got = knn(torch.tensor([2.0, 0.0, 4.5]), torch.tensor([0.0, 1.0, 3.0, 6.0]), torch.tensor(values), 2)
    assert got.dtype == torch.float32 and got.shape == (3,)
    assert torch.allclose(got, torch.tensor(expected), atol=1e-6), (got, expected)

    keys, dup_values = torch.tensor([1.0, 1.0, 3.0], dtype=torch.float64), torch.tensor([2.0, 6.0, 10.0], dtype=torch.float64)
    at_one = torch.tensor([1.0], dtype=torch.float64)
    assert knn(at_one, keys, dup_values, 1).item() == 4.0
    assert knn(at_one, keys, dup_values, 2).item() == 4.0
    three = (2.0 + 6.0 + 10.0 * math.exp(-0.5)) / (2.0 + math.exp(-0.5))
    assert knn(at_one, keys, dup_values, 3).item() == pytest.approx(three, rel=1e-12)


def test_ch02_ex6_scaling_and_shifting_together_leaves_the_reference_unchanged():
    """The property the exercise is about (a global width cannot have it): the chapter's data with
    queries and keys mapped by x -> 1024 x - 3000 or x -> x / 1024 gives the same predictions."""
    from attention_course.data import make_regression_1d

    knn = get_exercise("ch02_ex6").reference
    data = make_regression_1d(num_train=50, num_test=100, noise=0.3, seed=0)
    q, k, v = data.x_test.double(), data.x_train.double(), data.y_train.double()
    plain = knn(q, k, v, 5)
    assert torch.allclose(knn(q * 1024 - 3000, k * 1024 - 3000, v, 5), plain, atol=1e-10)
    assert torch.allclose(knn(q / 1024, k / 1024, v, 5), plain, atol=1e-12)


# ---- ch02_ex6: wrong answers as students write them get their own hints

def _knn_check_count(keys, num_neighbors):
    if not 1 <= num_neighbors <= len(keys):
        raise ValueError(f"num_neighbors must be in 1..n, n = {len(keys)}")


def knn_nan_on_keys(queries, keys, values, num_neighbors):
    _knn_check_count(keys, num_neighbors)
    d = (queries[:, None] - keys[None, :]).abs()
    h = d.sort(dim=1).values[:, num_neighbors - 1:num_neighbors]
    w = torch.exp(-d ** 2 / (2 * h ** 2))           # 0/0 where h = 0
    return (w @ values) / w.sum(dim=1)


def knn_distinct_keys(queries, keys, values, num_neighbors):
    _knn_check_count(keys, num_neighbors)
    d = (queries[:, None] - keys[None, :]).abs()
    distinct = (queries[:, None] - keys.unique()[None, :]).abs()
    h = distinct.sort(dim=1).values[:, min(num_neighbors, distinct.shape[1]) - 1]
    w = torch.where(h[:, None] > 0, torch.exp(-d ** 2 / (2 * h[:, None].clamp_min(1e-12) ** 2)),
                    (d == 0).to(d.dtype))
    return (w @ values) / w.sum(dim=1)


def test_ch02_ex6_nan_at_zero_width_and_distinct_keys_get_their_hints():
    assert_mistake("ch02_ex6", knn_nan_on_keys, "0/0 at a zero width")
    assert_mistake("ch02_ex6", knn_distinct_keys, "repeated keys counted once")


# ---- ch02_ex6: topk without largest=False gets its own hint (issue 40, item 4)

def knn_topk_largest(queries, keys, values, num_neighbors):
    _knn_check_count(keys, num_neighbors)
    d = (queries[:, None] - keys[None, :]).abs()
    h = d.topk(num_neighbors, dim=1).values[:, -1:]    # largest=True by default: from the far end
    w = torch.exp(-0.5 * (d / h) ** 2)
    return (w @ values) / w.sum(dim=1)


def test_ch02_ex6_topk_largest_gets_its_own_hint_not_one_too_far():
    """topk keeps the largest values by default. With four keys and num_neighbors = 2 (the hand-made
    check as it was) the 2nd largest distance is the 3rd smallest, and this answer was told "one too
    far". The hand-made check has five keys now, and the answer gets the hint of its own mistake on
    every public check it fails, and fails at grading too."""
    hint = mistake_hint("ch02_ex6", "num_neighbors-th largest distance")
    assert "largest=False" in hint
    assert_mistake("ch02_ex6", knn_topk_largest, "num_neighbors-th largest distance")
    failed = failed_checks("ch02_ex6", knn_topk_largest)
    assert any(r.check.startswith("three queries") for r in failed)
    assert failed_hidden_somewhere("ch02_ex6", knn_topk_largest)


# ---- ch02_ex6: a tiny floor under the width is a correct answer

def knn_width_floor(queries, keys, values, num_neighbors):
    _knn_check_count(keys, num_neighbors)
    d = (queries[:, None] - keys[None, :]).abs()
    h = d.kthvalue(num_neighbors, dim=1).values.clamp_min(1e-12)   # keys on the query keep weight 1
    w = torch.exp(-(d / h[:, None]) ** 2 / 2)
    return (w * values).sum(dim=1) / w.sum(dim=1)


def test_ch02_ex6_a_tiny_width_floor_passes_everywhere():
    passes_everywhere("ch02_ex6", knn_width_floor)


def _reference_answer_is_solution_only(label):
    """The open question's reference answer is one solution-only markdown cell inside the solution
    block (folded on the full site), and the student notebook lacks it."""
    root = Path(__file__).resolve().parents[2]
    cells = json.loads((root / "solutions" / "02_nadaraya_watson.ipynb").read_text())["cells"]
    text = ["".join(c["source"]) for c in cells]
    start = next(i for i, t in enumerate(text) if f"{{solution-start}} {label}" in t)
    end = next(i for i in range(start, len(cells)) if "{solution-end}" in text[i])
    answers = [i for i in range(start, end) if cells[i]["cell_type"] == "markdown"
               and "solution-only" in cells[i]["metadata"].get("tags", [])]
    assert len(answers) == 1, answers
    student = (root / "chapters" / "02_nadaraya_watson.ipynb").read_text()
    assert text[answers[0]].splitlines()[0][:60] not in student


def test_ch02_ex6_open_question_has_a_reference_answer_in_its_solution_block():
    """The reference answer is a solution-only markdown cell inside the solution block (folded on
    the full site); the student notebook lacks it."""
    _reference_answer_is_solution_only("ch02_ex6")


# ======================================== ch02_ex7

# ---- ch02_ex7: the answer read off the full fit is the leave-one-out fit computed from scratch

def loo_residual_form(values, fitted, self_weights):
    # a student's answer: the leave-one-out residual is the training residual over 1 - a_ii
    residual = (values - fitted) / (1 - self_weights)
    return values - residual, (residual * residual).mean(dim=-1)


def _gaussian_fit_and_loo(keys, values, width):
    """The full fit, its self weights, and the leave-one-out fit recomputed from scratch (the
    point's own score set to -inf, softmax over the others), all in float64."""
    scores = -(keys[:, None] - keys[None, :]) ** 2 / (2 * width ** 2)
    full = torch.softmax(scores, dim=1)
    left_out = torch.softmax(scores.masked_fill(torch.eye(len(keys), dtype=torch.bool), -math.inf), dim=1)
    return full @ values, torch.diagonal(full), left_out @ values


def test_ch02_ex7_an_answer_read_off_the_full_fit_equals_leave_one_out_from_scratch():
    from attention_course.data import make_regression_1d
    data = make_regression_1d(num_train=40, seed=5)
    keys, values = data.x_train.double(), data.y_train.double()
    for width in (0.08, 0.25, 1.5):
        fitted, own, from_scratch = _gaussian_fit_and_loo(keys, values, width)
        predictions, mse = loo_residual_form(values, fitted, own)
        assert torch.allclose(predictions, from_scratch, atol=1e-9)
        assert math.isclose(mse.item(), ((from_scratch - values) ** 2).mean().item(), rel_tol=1e-9)
    passes_everywhere("ch02_ex7", loo_residual_form)


# ---- ch02_ex7: each kept mistake, written by hand, gets its own hint

def loo_training_fit(values, fitted, self_weights):
    return fitted, ((fitted - values) ** 2).mean(dim=-1)


def loo_own_vote_dropped(values, fitted, self_weights):
    rest = fitted - self_weights * values
    return rest, ((rest - values) ** 2).mean(dim=-1)


def loo_mean_first_axis(values, fitted, self_weights):
    predictions = (fitted - self_weights * values) / (1 - self_weights)
    return predictions, ((predictions - values) ** 2).mean(0)


def loo_factor_not_squared(values, fitted, self_weights):
    predictions = (fitted - self_weights * values) / (1 - self_weights)
    return predictions, (((values - fitted) ** 2) / (1 - self_weights)).mean(dim=-1)


@pytest.mark.parametrize("answer, mistake", [
    (loo_training_fit, "the point itself not left out"),
    (loo_own_vote_dropped, "own vote removed, not renormalised"),
    (loo_mean_first_axis, "averaged over the fits"),
    (loo_factor_not_squared, "the factor applied once to a square"),
], ids=["ch02_ex7-training-fit", "ch02_ex7-not-renormalised", "ch02_ex7-mean-over-fits",
        "ch02_ex7-factor-once"])
def test_ch02_ex7_each_mistake_gets_its_own_hint(answer, mistake):
    assert_mistake("ch02_ex7", answer, mistake)
    assert failed_hidden_somewhere("ch02_ex7", answer)


# ---- ch02_ex7: loopholes: one mean over everything, a sum for the mean, a float32 result

def loo_one_mean_over_everything(values, fitted, self_weights):
    predictions = (fitted - self_weights * values) / (1 - self_weights)
    return predictions, ((predictions - values) ** 2).mean()


def loo_summed(values, fitted, self_weights):
    predictions = (fitted - self_weights * values) / (1 - self_weights)
    return predictions, ((predictions - values) ** 2).sum(dim=-1)


def loo_always_float32(values, fitted, self_weights):
    predictions = (fitted.float() - self_weights.float() * values.float()) / (1 - self_weights.float())
    return predictions, ((predictions - values.float()) ** 2).mean(dim=-1)


@pytest.mark.parametrize("answer", [loo_one_mean_over_everything, loo_summed, loo_always_float32],
                         ids=["ch02_ex7-one-mean", "ch02_ex7-summed", "ch02_ex7-float32"])
def test_ch02_ex7_loopholes_fail_a_public_check_and_at_grading(answer):
    assert failed_checks("ch02_ex7", answer)
    assert failed_hidden_somewhere("ch02_ex7", answer)


def test_ch02_ex7_open_question_has_a_reference_answer_in_its_solution_block():
    _reference_answer_is_solution_only("ch02_ex7")
    assert "markdown cell of your own" in statement("ch02_ex7")


# ======================================== ch02_ex1 to ch02_ex5: every error check holds invalid calls only

# A value bug keeps the points of the error checks, since every error check of ch02_ex1 to
# ch02_ex5 holds invalid calls only. ch02_ex6's error check (hidden) starts with a valid call,
# as AUTHORING.md asks of new error checks, so that raising on every input cannot pass it.

VALUE_BUGS = {"ch02_ex1": kernel_without_two, "ch02_ex2": nw_absolute, "ch02_ex5": local_linear_no_kernel}


@pytest.mark.parametrize("label", sorted(VALUE_BUGS))
def test_ch02_value_bugs_keep_the_error_points(label):
    answer = VALUE_BUGS[label]
    results = run_checks(label, answer)
    errors = [r for r in results if "raise" in r.check]
    assert errors and all(r.passed for r in errors), [(r.check, r.reason) for r in errors]
    assert any(not r.passed for r in results)


@pytest.mark.parametrize("ex", ["ch02_ex1", "ch02_ex2", "ch02_ex3", "ch02_ex4", "ch02_ex5"])
def test_ch02_error_checks_hold_invalid_calls_only(ex):
    exercise = get_exercise(ex)
    for check in exercise.checks:
        outcomes = outcomes_for(exercise.reference, check.make_calls(check.seed), exercise.kind)
        statuses = {o["status"] for o in outcomes}
        assert statuses != {"ok", "raised"}, f"{ex} check {check.name!r} mixes valid and invalid calls"
