"""Regression tests of chapter 3's exercises (scoring functions), filed by exercise.

Where a newly found mistake's regression test goes: into this file, in the section of its
exercise, named ``test_ch03_exM_<what it shows>``; a test about several of the chapter's
exercises is parametrized so that every id carries its exercise's label
(``tests/exercises/conftest.py`` refuses a test here without one). Write each wrong answer
by hand, the way a student would (never import the kept mistake it should match, nor a
solver's files); the shared helpers are in ``tests/exercise_helpers.py``.

From issue 10, "hints that blame the wrong mistake": the hints printed for a wrong answer must
name what it did, never another mistake; an answer that matches no kept mistake gets the
check's own hint, which describes what the check compares without blaming a cause.
"""
import json
import math

import pytest
import torch

from attention_course import functional as F_att
from attention_course.checks.registry import all_exercises, get_exercise

from exercise_helpers import BLAMING, ROOT, assert_mistake, failed_checks, mistake_hint, passes_everywhere, statement


# ------------------------------------------------------------- ch03_ex1: masked_softmax

def test_ch03_ex1_lengths_without_a_new_axis_get_the_new_axis_hint():
    """Issue 28: comparing torch.arange(num_keys) with the lengths without a trailing axis is a
    shape error (or a wrong mask when num_queries == num_keys); the feedback names the input
    shapes and the hint names the missing axis, on every value check that fails."""
    def lengths_without_new_axis(scores, valid_lens):
        if valid_lens is None:
            return torch.softmax(scores, dim=-1)
        if valid_lens.shape not in {scores.shape[:1], scores.shape[:2]}:
            raise ValueError(f"valid_lens of shape {tuple(valid_lens.shape)} does not fit scores of shape "
                             f"{tuple(scores.shape)}")
        if valid_lens.dim() == 1:
            valid_lens = valid_lens.unsqueeze(1).repeat(1, scores.shape[1])
        keep = torch.arange(scores.shape[2]) < valid_lens
        weights = torch.softmax(torch.where(keep, scores, float("-inf")), dim=-1)
        return torch.nan_to_num(weights, nan=0.0)

    hint = mistake_hint("ch03_ex1", "no new axis for the lengths")
    assert "valid_lens[..., None]" in hint
    failed = failed_checks("ch03_ex1", lengths_without_new_axis)
    value_checks = [r for r in failed if "raise" not in r.check]  # messages are worded freely
    assert len(value_checks) >= 2 and all(r.hint == hint for r in value_checks), \
        [(r.check, r.hint) for r in failed]
    assert all("scores of shape" in r.reason for r in value_checks), [r.reason for r in value_checks]


def test_ch03_ex1_float64_check_names_the_empty_row_too():
    """An answer that keeps float64 but lets a row of valid length 0 see its first key fails the hidden
    float64 check; that check's hint (no kept mistake matches) must describe the empty row, not only
    the dtype."""
    def empty_row_sees_first_key(scores, valid_lens):
        if valid_lens is None:
            return scores.softmax(-1)
        b, q, n = scores.shape
        if tuple(valid_lens.shape) not in [(b,), (b, q)]:
            raise ValueError(f"valid_lens {tuple(valid_lens.shape)} does not fit scores {tuple(scores.shape)}")
        lens = valid_lens.reshape(b, -1, 1).clamp(min=1)
        keep = (torch.arange(n) < lens).expand(b, q, n)
        return scores.masked_fill(~keep, -math.inf).softmax(-1)

    for seed in (11, 2026):
        failed = [r for r in failed_checks("ch03_ex1", empty_row_sees_first_key, seed)
                  if r.check.startswith("float64")]
        assert failed and failed[0].mistake is None, seed
        assert "valid length 0" in failed[0].hint, failed[0].hint


def test_ch03_ex1_two_d_lengths_repeated_as_if_one_d_get_their_hint():
    """Issue 40, item 4: d2l's flatten-and-repeat masked softmax with its 1-D branch used for every
    valid_lens: a 2-D valid_lens gets num_queries copies of each length and the mask no longer fits
    the rows (a shape error). The hint names the shapes and the idiom of each form."""
    def masked_softmax(scores, valid_lens):
        if valid_lens is None:
            return torch.softmax(scores, dim=-1)
        if valid_lens.shape not in {scores.shape[:1], scores.shape[:2]}:
            raise ValueError(f"valid_lens {tuple(valid_lens.shape)} does not fit scores {tuple(scores.shape)}")
        shape = scores.shape
        lens = torch.repeat_interleave(valid_lens, shape[1])
        rows = scores.reshape(-1, shape[-1])
        mask = torch.arange(shape[-1])[None, :] < lens[:, None]
        rows = rows.masked_fill(~mask, float("-inf"))
        return torch.nan_to_num(torch.softmax(rows, dim=-1), nan=0.0).reshape(shape)

    hint = mistake_hint("ch03_ex1", "2-D lengths repeated as if 1-D")
    assert "(batch, num_queries)" in hint and "repeat_interleave" in hint
    failed = failed_checks("ch03_ex1", masked_softmax)
    assert [r.check for r in failed] == ["2-D valid_lens (one length per query)",
                                         "a valid length of 0: an all-zero row and finite gradients (scores require grad)"]
    assert all(r.hint == hint for r in failed), [(r.check, r.hint) for r in failed]


# ------------------------------------------------------------- ch03_ex2: additive attention

def test_ch03_ex2_new_axes_swapped_get_the_unsqueeze_hint():
    """Issue 40, item 4: queries given their new axis at position 1 and keys at 2 make scores of shape
    (batch, num_keys, num_queries); the hint says so and names the axes each needs."""
    class AdditiveAttention(torch.nn.Module):
        def __init__(self, query_size, key_size, num_hiddens):
            super().__init__()
            self.W_q = torch.nn.Linear(query_size, num_hiddens, bias=False)
            self.W_k = torch.nn.Linear(key_size, num_hiddens, bias=False)
            self.w_v = torch.nn.Linear(num_hiddens, 1, bias=False)

        def forward(self, queries, keys, values, valid_lens=None):
            features = torch.tanh(self.W_q(queries)[:, None, :, :] + self.W_k(keys)[:, :, None, :])
            weights = F_att.masked_softmax(self.w_v(features).squeeze(-1), valid_lens)
            return torch.bmm(weights, values), weights

    hint = mistake_hint("ch03_ex2", "new axes of queries and keys swapped")
    assert "(batch, num_keys, num_queries)" in hint and "unsqueeze(2)" in hint
    assert_mistake("ch03_ex2", AdditiveAttention, "new axes of queries and keys swapped")
    assert len(failed_checks("ch03_ex2", AdditiveAttention)) == 3


def test_ch03_ex2_the_statement_asks_for_the_gradients_that_the_hidden_check_compares():
    """Solver finding: a hidden check compares gradients with respect to queries and keys, which the
    statement did not ask for. The statement now names the very arguments the check differentiates, and
    an answer that detaches them (right values) fails that check only, with the reason saying so."""
    exercise = get_exercise("ch03_ex2")
    hidden = next(c for c in exercise.checks if not c.public)
    graded = {i for call in hidden.make_calls(hidden.seed) for i in call.grads_of}
    assert graded == {0, 1}   # queries and keys: the forward's arguments 0 and 1
    text = " ".join(statement("ch03_ex2").split())
    assert "differentiable with respect to `queries` and `keys`" in text and "detach" in text

    class AdditiveAttention(torch.nn.Module):
        def __init__(self, query_size, key_size, num_hiddens):
            super().__init__()
            self.W_q = torch.nn.Linear(query_size, num_hiddens, bias=False)
            self.W_k = torch.nn.Linear(key_size, num_hiddens, bias=False)
            self.w_v = torch.nn.Linear(num_hiddens, 1, bias=False)

        def forward(self, queries, keys, values, valid_lens=None):
            queries, keys = queries.detach(), keys.detach()      # "the inputs are data, not parameters"
            features = torch.tanh(self.W_q(queries).unsqueeze(2) + self.W_k(keys).unsqueeze(1))
            weights = F_att.masked_softmax(self.w_v(features).squeeze(-1), valid_lens)
            return weights @ values, weights

    assert not failed_checks("ch03_ex2", AdditiveAttention)
    for seed in (11, 2026):
        failed = failed_checks("ch03_ex2", AdditiveAttention, seed)
        assert [r.check for r in failed] == [hidden.name], (seed, [r.line() for r in failed])
        assert "gradient" in failed[0].reason, failed[0].reason


def test_ch03_ex6_thorough_lines_number_each_call_once():
    """Solver finding: a thorough run named a check by its first call's inputs followed by "(call 1 of 12)"
    and then the reason's own "call 6 of 12: ...", one line numbering calls twice. The name now says
    which call its inputs are from in other words; the reason alone numbers the failing call."""
    import contextlib
    import io
    import re

    from attention_course.checks.checking import check

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        check("ch03_ex6", lambda weights, grads, valid_lens: torch.zeros(1), thorough=True)
    lines = [line for line in out.getvalue().splitlines() if "on fresh inputs of other sizes" in line]
    assert lines, out.getvalue()
    for line in lines:
        assert len(re.findall(r"call \d+ of \d+", line)) <= 1, line


# ------------------------------------------------------------- ch03_ex3: bilinear attention

def test_ch03_ex3_keys_T_on_a_3d_tensor_gets_the_transpose_hint():
    """Issue 40, item 4 (kept from the dot-product warm-up that issue 40, item 2 merged away): keys.T on
    (batch, num_keys, key_size) keys reverses every axis; the product raises a shape error, with @ and
    with torch.bmm alike. The hint names the shapes given and needed and the idiom that swaps the last
    two axes."""
    class BilinearAttention(torch.nn.Module):
        def __init__(self, query_size, key_size):
            super().__init__()
            self.W = torch.nn.Parameter(torch.zeros(query_size, key_size))

        def _scores(self, queries, keys):
            if queries.shape[-1] != self.W.shape[0]:
                raise ValueError(f"queries: shape {tuple(queries.shape)} does not fit W")
            if keys.shape[-1] != self.W.shape[1]:
                raise ValueError(f"keys: shape {tuple(keys.shape)} does not fit W")
            return torch.matmul(torch.matmul(queries, self.W), keys.T)

        def forward(self, queries, keys, values, valid_lens=None):
            weights = F_att.masked_softmax(self._scores(queries, keys), valid_lens)
            return torch.matmul(weights, values), weights

    class WithBmm(BilinearAttention):
        def _scores(self, queries, keys):
            if queries.shape[-1] != self.W.shape[0] or keys.shape[-1] != self.W.shape[1]:
                which = "queries" if queries.shape[-1] != self.W.shape[0] else "keys"
                shape = tuple((queries if which == "queries" else keys).shape)
                raise ValueError(f"{which} has the wrong last size: {shape}")
            return torch.bmm(queries @ self.W, keys.T)

    hint = mistake_hint("ch03_ex3", "keys.T on 3-D keys")
    assert "(key_size, num_keys, batch)" in hint and "(batch, key_size, num_keys)" in hint
    assert "transpose(-2, -1)" in hint
    assert_mistake("ch03_ex3", BilinearAttention, "keys.T on 3-D keys")
    assert_mistake("ch03_ex3", WithBmm, "keys.T on 3-D keys, in torch.bmm")


# ------------------------------------------------------------- ch03_ex5: query_jacobian

def _ex5_reference():
    return next(e for e in all_exercises(3) if e.label == "ch03_ex5").reference


def test_ch03_ex5_reference_on_a_case_done_by_hand():
    """q = 0 (d = 2) against keys (1, 0) and (-1, 0) with values 1 and -1: both scores are 0, so
    a = (1/2, 1/2), o = 0 and kbar = 0; d o / d q = (1/sqrt 2)(1/2 * 1 * (1, 0) + 1/2 * (-1) * (-1, 0))
    = (1/sqrt 2, 0). Float64 and a batch of two copies give the same block."""
    queries = torch.zeros(1, 2)
    keys = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    values = torch.tensor([[1.0], [-1.0]])
    expected = torch.tensor([[[1 / math.sqrt(2), 0.0]]])
    got = _ex5_reference()(queries, keys, values)
    assert got.dtype == torch.float32 and got.shape == (1, 1, 2)
    assert torch.allclose(got, expected, atol=1e-7)
    batched = _ex5_reference()(*(t.double().expand(2, *t.shape) for t in (queries, keys, values)))
    assert batched.dtype == torch.float64 and batched.shape == (2, 1, 1, 2)
    assert torch.allclose(batched, expected.double().expand(2, 1, 1, 2), atol=1e-12)


def test_ch03_ex5_reference_agrees_with_jacrev_in_float64():
    """The reference's formula against torch.func.jacrev of the forward pass, on random inputs and on
    scores of several hundred (where the softmax is one-hot)."""
    g = torch.Generator().manual_seed(12)
    for spread in (1.0, 3.0, 400.0):
        q = torch.randn(5, 6, generator=g, dtype=torch.float64) * spread
        k = torch.randn(7, 6, generator=g, dtype=torch.float64)
        v = torch.randn(7, 4, generator=g, dtype=torch.float64)

        def pooled(query):
            return torch.softmax(k @ query / math.sqrt(6), dim=-1) @ v

        want = torch.stack([torch.func.jacrev(pooled)(row) for row in q])
        got = _ex5_reference()(q, k, v)
        assert torch.isfinite(got).all()
        assert torch.allclose(got, want, rtol=1e-9, atol=1e-12), (spread, (got - want).abs().max())


def test_ch03_ex5_softmax_denominator_left_out_is_named():
    """A student differentiates a_i as if it moved with its own score only (d a_i / d q = a_i k_i / sqrt d):
    the hint names the missing centring, on every public check it fails."""
    def own_score_only(queries, keys, values, factors=None):
        if factors is not None:   # the question answered right (a mistake in the Jacobian only)
            return _ex5_reference()(queries, keys, values, factors)
        if queries.shape[-1] != keys.shape[-1]:
            raise ValueError(f"queries of shape {tuple(queries.shape)} and keys of shape "
                             f"{tuple(keys.shape)} have different last sizes d")
        if keys.shape[-2] != values.shape[-2]:
            raise ValueError(f"keys of shape {tuple(keys.shape)} and values of shape "
                             f"{tuple(values.shape)} have different numbers of rows n")
        d = queries.shape[-1]
        a = torch.softmax(queries @ keys.transpose(-1, -2) / math.sqrt(d), dim=-1)
        out = torch.zeros(*a.shape[:-1], values.shape[-1], d, dtype=queries.dtype)
        for i in range(keys.shape[-2]):
            outer = values[..., i, :, None] * keys[..., i, None, :]          # (..., d_v, d)
            out = out + a[..., i, None, None] * outer.unsqueeze(-3)
        return out / math.sqrt(d)

    assert_mistake("ch03_ex5", own_score_only, "neither side centred")


def test_ch03_ex5_values_centred_only_passes_everywhere():
    """Centring only the values is correct (sum_i a_i (v_i - o) = 0 removes the kbar term), and so is
    a float32 softmax written by hand with the max subtracted."""
    def values_centred(queries, keys, values, factors=None):
        if queries.shape[-1] != keys.shape[-1] or keys.shape[-2] != values.shape[-2]:
            raise ValueError(f"queries {tuple(queries.shape)}, keys {tuple(keys.shape)} and values "
                             f"{tuple(values.shape)} do not fit")
        if factors is not None:
            sizes = [values_centred(f * queries, keys, values).norm().item() for f in factors]
            return [f for _, f in sorted(zip(sizes, factors), reverse=True)]
        s = queries @ keys.transpose(-1, -2) / math.sqrt(queries.shape[-1])
        e = torch.exp(s - s.max(dim=-1, keepdim=True).values)
        a = e / e.sum(dim=-1, keepdim=True)
        o = a @ values
        return torch.einsum("...jn,...jnr,...nc->...jrc", a, values.unsqueeze(-3) - o.unsqueeze(-2),
                            keys) / math.sqrt(queries.shape[-1])

    passes_everywhere("ch03_ex5", values_centred)


def _ex5_by_hand(queries, keys, values):
    """A student's Jacobian, correct: a float64 loop over the queries (and over a batch axis)."""
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(f"queries {tuple(queries.shape)} and keys {tuple(keys.shape)}: last sizes differ")
    if keys.shape[-2] != values.shape[-2]:
        raise ValueError(f"keys {tuple(keys.shape)} and values {tuple(values.shape)}: row counts differ")
    if queries.dim() == 3:
        return torch.stack([_ex5_by_hand(q, k, v) for q, k, v in zip(queries, keys, values)])
    q, k, v = queries.double(), keys.double(), values.double()
    a = torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1)
    o, kbar = a @ v, a @ k
    return torch.stack([sum(a[j, i] * torch.outer(v[i] - o[j], k[i] - kbar[j]) for i in range(len(k)))
                        for j in range(len(q))]).to(queries.dtype) / math.sqrt(q.shape[-1])


def test_ch03_ex5_larger_factor_larger_jacobian_is_named():
    """Issue 40, item 5: the chapter's question (what happens to the Jacobian as the softmax saturates) is
    checked as an ordering. The guess that longer queries, hence larger scores, move the output more gets
    the hint of that kept mistake, in public and at grading."""
    def steeper(queries, keys, values, factors=None):
        if factors is not None:
            return sorted(factors, reverse=True)
        return _ex5_by_hand(queries, keys, values)

    assert_mistake("ch03_ex5", steeper, "larger scores, larger Jacobian")
    from exercise_helpers import failed_hidden_somewhere
    assert failed_hidden_somewhere("ch03_ex5", steeper)


def test_ch03_ex5_smallest_factor_first_fails_on_the_tie():
    """Ordering by the factor, the smallest first, is right on the running example but not where two keys
    tie at the top: there the Jacobian grows with the factor."""
    def smaller_first(queries, keys, values, factors=None):
        if factors is not None:
            return sorted(factors)
        return _ex5_by_hand(queries, keys, values)

    failed = failed_checks("ch03_ex5", smaller_first)
    assert [r.reason for r in failed] and all("call 2 of 2" in r.reason for r in failed), failed


def test_ch03_ex5_open_question_has_a_reference_answer_in_its_solution_block():
    cells = json.loads((ROOT / "solutions" / "03_scoring_functions.ipynb").read_text())["cells"]
    text = ["".join(c["source"]) for c in cells]
    start = next(i for i, t in enumerate(text) if "{solution-start} ch03_ex5" in t)
    end = next(i for i in range(start, len(cells)) if "{solution-end}" in text[i])
    answers = [i for i in range(start, end) if cells[i]["cell_type"] == "markdown"
               and "solution-only" in cells[i]["metadata"].get("tags", [])]
    assert len(answers) == 1, answers
    student = (ROOT / "chapters" / "03_scoring_functions.ipynb").read_text()
    assert text[answers[0]].splitlines()[0][:60] not in student


def test_ch03_ex5_check_0_is_the_case_by_hand_at_its_seed_and_turned_at_grading_seeds():
    """Issue 38 item 4: check 0's outputs ship with a release, so at grading it runs on the same case
    turned. At its own seed: the case written in the check (by hand here). At two grading seeds:
    one query in 2-D, three keys, values of size 3 again; the query and keys rotated or reflected
    (every score kept, in another order of the keys), the values redrawn; the two seeds differ."""
    from attention_course.checks.plan import hidden_seed
    check = next(e for e in all_exercises(3) if e.label == "ch03_ex5").checks[0]
    (public,) = check.make_calls(check.seed)
    q, k, v = public.args
    assert torch.equal(q, torch.tensor([[1.0, -0.5]]))
    assert torch.equal(k, torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 1.0]]))
    assert torch.equal(v, torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, -1.0], [1.0, 1.0, 0.0]]))
    scores = sorted((q @ k.T).flatten().tolist())                          # 1, -0.5, -1.5
    assert scores == [-1.5, -0.5, 1.0]
    turned = []
    for seed in (11, 2026):
        (call,) = check.make_calls(hidden_seed(seed, 0))
        tq, tk, tv = call.args
        assert (tq.shape, tk.shape, tv.shape) == ((1, 2), (3, 2), (3, 3))
        assert not torch.equal(tq, q) and not torch.equal(tv, v)
        assert sorted((tq @ tk.T).flatten().tolist()) == pytest.approx(scores, abs=1e-6)
        assert torch.allclose(tq.norm(), q.norm()) and torch.allclose(tk.norm(dim=1).sort().values,
                                                                       k.norm(dim=1).sort().values)
        turned.append(call.args)
    assert not all(torch.equal(a, b) for a, b in zip(*turned))


# The derivative the exercise asks for, in the words a hint would use to state it: no hint of
# ch03_ex5 may contain any of these (its kept mistakes' hints once stated d a_i / d q in full).
_EX7_FORMULA = ("d a_i", "a_i (1 - a_i)", "a_i a_l", "k_i - kbar", "v_i - o", "sum_i a_i", "a_i (k_i",
                "kbar)", "(k_i -", "/ d q =", "/ d s")


def test_ch03_ex5_hints_name_the_mistake_without_the_derivative():
    exercise = next(e for e in all_exercises(3) if e.label == "ch03_ex5")
    texts = [(m.name, m.hint) for m in exercise.mistakes] + [(c.name, c.hint) for c in exercise.checks]
    for name, hint in texts:
        for words in _EX7_FORMULA:
            assert words not in hint, (name, words, hint)
    # Each kept mistake's hint still says what went wrong, in words of its own.
    assert len({m.hint for m in exercise.mistakes}) == len(exercise.mistakes)


def test_ch03_ex5_statement_says_plainly_that_no_check_can_tell_autograd():
    """The contract forbids autograd, and neither check() nor the grader can tell how an answer was
    computed (it returns numbers; a stand-in that refuses autograd in the call would not stop
    torch.func either). The statement says so; it stays true: an answer written with torch.func,
    by hand here, passes the public checks."""
    from exercise_helpers import statement
    text = " ".join(statement("ch03_ex5").split())
    assert "Neither the checks nor the grader can tell how you computed your numbers" in text
    assert "not with autograd" in text

    def by_autograd(queries, keys, values, factors=None):
        if factors is not None:
            return sorted(factors, key=lambda f: -float(by_autograd(f * queries, keys, values).norm()))
        if queries.shape[-1] != keys.shape[-1]:
            raise ValueError(f"queries of shape {tuple(queries.shape)} and keys of shape {tuple(keys.shape)}")
        if keys.shape[-2] != values.shape[-2]:
            raise ValueError(f"keys of shape {tuple(keys.shape)} and values of shape {tuple(values.shape)}")
        def one(q, k, v):
            return torch.func.jacrev(lambda x: torch.softmax(k @ x / math.sqrt(x.shape[0]), dim=0) @ v)(q)
        rows = torch.vmap(one, in_dims=(0, None, None))
        if queries.dim() == 3:
            return torch.stack([rows(q, k, v) for q, k, v in zip(queries, keys, values)])
        return rows(queries, keys, values)

    assert not failed_checks("ch03_ex5", by_autograd), [r.line() for r in failed_checks("ch03_ex5", by_autograd)]


# ------------------------------------------------------------------------------------ ch03_ex6

def _ex6_reference():
    return next(e for e in all_exercises(3) if e.label == "ch03_ex6").reference


FAILURES = ("nan_weights", "weights_on_empty_row", "weight_on_masked_keys", "rows_not_normalised", "nan_gradient")


def _only(*names):
    return {name: name in names for name in FAILURES}


def _per_row(weights, valid_lens):
    """(lengths per row, masked key positions, empty rows), written here as a student would."""
    b, q, k = weights.shape
    lens = (valid_lens[:, None] if valid_lens.dim() == 1 else valid_lens).expand(b, q)
    return lens, torch.arange(k) >= lens[..., None], lens == 0


def test_ch03_ex6_reference_on_cases_made_by_hand():
    """Two sequences, 3 keys, lengths (0, 2), one query each: each finding from weights written by hand,
    several at once where several apply."""
    lens = torch.tensor([0, 2])
    good = torch.tensor([[[0.0, 0.0, 0.0]], [[0.25, 0.75, 0.0]]])
    finite = torch.zeros(2, 1, 3)
    nan_grads = finite.clone()
    nan_grads[0] = float("nan")
    diagnose = _ex6_reference()
    assert diagnose(good, finite, lens) == _only()
    assert diagnose(good.double(), finite.double(), lens[:, None]) == _only()                 # 2-D lengths
    assert diagnose(good, nan_grads, lens) == _only("nan_gradient")
    nan_weights = good.clone()
    nan_weights[0] = float("nan")                                  # NaN on the empty row is not 0 there
    assert diagnose(nan_weights, nan_grads, lens) == _only("nan_weights", "weights_on_empty_row", "nan_gradient")
    uniform = good.clone()
    uniform[0] = 1 / 3
    assert diagnose(uniform, finite, lens) == _only("weights_on_empty_row")
    leak = torch.tensor([[[0.0, 0.0, 0.0]], [[0.25, 0.75, 1e-14]]])
    assert diagnose(leak, finite, lens) == _only("weight_on_masked_keys")                    # however small
    short = torch.tensor([[[0.0, 0.0, 0.0]], [[0.25, 0.70, 0.0]]])
    assert diagnose(short, nan_grads, lens) == _only("rows_not_normalised", "nan_gradient")
    within = torch.tensor([[[0.0, 0.0, 0.0]], [[0.25, 0.75 + 5e-5, 0.0]]])
    assert diagnose(within, finite, lens) == _only()                                           # within 1e-4
    assert all(type(v) is bool for v in diagnose(short, nan_grads, lens).values())


def test_ch03_ex6_a_finite_fill_that_leaks_exactly_zero_is_correct():
    """The contract judges numbers, not methods: a -1e9 fill with the empty rows zeroed afterwards gives
    exact zeros at the masked keys and a zero gradient, so nothing is found; a -1e6 fill left alone puts
    uniform weights on the empty row."""
    g = torch.Generator().manual_seed(3)
    scores = torch.randn(2, 3, 4, generator=g)
    lens = torch.tensor([[0, 1, 4], [2, 0, 3]])
    keep = torch.arange(4) < lens[..., None]
    probe = torch.randn(2, 3, 4, generator=g)

    def observe(fill, zero_empty):
        leaf = scores.clone().requires_grad_(True)
        weights = torch.softmax(leaf.masked_fill(~keep, fill), dim=-1)
        if zero_empty:
            weights = weights.masked_fill(lens[..., None] == 0, 0.0)
        (weights * probe).sum().backward()
        return weights.detach(), leaf.grad

    assert _ex6_reference()(*observe(-1e9, True), lens) == _only()
    assert _ex6_reference()(*observe(-1e6, False), lens) == _only("weights_on_empty_row")


def test_ch03_ex6_the_old_contracts_first_label_chain_gets_the_several_failures_hint():
    """Issue 40, item 2: the exercise used to give the labels in order and ask for the first that applies.
    An if/elif chain written that way reports one failure where the -inf fill shows two (NaN weights
    on its empty row), and so do the last three implementations; the hint says that each entry is judged on its own."""
    def first_only(weights, grads, valid_lens):
        lens, masked, empty = _per_row(weights, valid_lens)
        found = dict.fromkeys(FAILURES, False)
        if torch.isnan(weights).any():
            found["nan_weights"] = True
        elif (weights[empty] != 0).any():
            found["weights_on_empty_row"] = True
        elif (weights[masked & ~empty[..., None]] != 0).any():
            found["weight_on_masked_keys"] = True
        elif ((weights.sum(-1)[~empty] - 1).abs() > 1e-4).any():
            found["rows_not_normalised"] = True
        elif torch.isnan(grads).any():
            found["nan_gradient"] = True
        return found

    assert_mistake("ch03_ex6", first_only, "only the first failure reported")
    assert len(failed_checks("ch03_ex6", first_only)) == 3


def test_ch03_ex6_finite_weights_only_gets_the_gradient_hint():
    """A student tests the weights with isfinite and never reads grads: the additive -inf mask passes
    for correct, and the hint says that the gradients are part of the diagnosis."""
    def weights_only(weights, grads, valid_lens):
        rows = weights.reshape(-1, weights.shape[-1])
        lens = valid_lens.reshape(weights.shape[0], -1).expand(weights.shape[:2]).reshape(-1)
        found = dict.fromkeys(FAILURES, False)
        found["nan_weights"] = not bool(torch.isfinite(rows).all())
        for row, n in zip(rows, lens.tolist()):
            if n == 0 and bool((row != 0).any()):
                found["weights_on_empty_row"] = True
            if n > 0 and bool((row[n:] != 0).any()):
                found["weight_on_masked_keys"] = True
            if n > 0 and abs(float(row.sum()) - 1) > 1e-4:
                found["rows_not_normalised"] = True
        return found

    assert_mistake("ch03_ex6", weights_only, "NaN looked for in the weights only")


def test_ch03_ex6_abs_on_an_empty_row_misses_its_nan():
    """`abs() > 0` is False for NaN: the -inf fill's empty row holds NaN, not zeros, and the contract says
    that a NaN is not 0."""
    def abs_positive(weights, grads, valid_lens):
        lens, masked, empty = _per_row(weights, valid_lens)
        return {"nan_weights": bool(weights.isnan().any()),
                "weights_on_empty_row": bool((weights[empty].abs() > 0).any()),
                "weight_on_masked_keys": bool((weights[masked & ~empty[..., None]] != 0).any()),
                "rows_not_normalised": bool(((weights.sum(-1)[~empty] - 1).abs() > 1e-4).any()),
                "nan_gradient": bool(grads.isnan().any())}

    assert_mistake("ch03_ex6", abs_positive, "NaN on an empty row not counted there")


def test_ch03_ex6_allclose_to_zero_at_masked_keys_gets_the_tolerance_hint():
    """torch.allclose with its default atol (1e-8) calls a leak of 1e-14 zero."""
    def allclose_zero(weights, grads, valid_lens):
        lens, pad, empty = _per_row(weights, valid_lens)
        zeros = torch.zeros_like(weights)
        on_empty = torch.where(empty[..., None], weights, zeros)
        return {"nan_weights": bool(torch.isnan(weights).any()),
                "weights_on_empty_row": not torch.allclose(on_empty, zeros),
                "weight_on_masked_keys": not torch.allclose(torch.where(pad & ~empty[..., None], weights, zeros), zeros),
                "rows_not_normalised": bool(((weights.sum(-1) - 1).abs() > 1e-4)[~empty].any()),
                "nan_gradient": bool(torch.isnan(grads).any())}

    assert_mistake("ch03_ex6", allclose_zero, "masked weights compared with a tolerance")


def test_ch03_ex6_a_tolerance_on_empty_rows_gets_its_hint():
    """Blind solver's gap: empty rows tested with a tolerance of 1e-6 (masked keys exactly). One of the
    checks' implementations scales its empty rows down instead of zeroing them, weights of about 1e-10
    there: a failure by the contract, none by the tolerant test."""
    def tolerant_on_empty_rows(weights, grads, valid_lens):
        lens, masked, empty = _per_row(weights, valid_lens)
        on_empty = weights[empty]
        return {"nan_weights": bool(torch.isnan(weights).any()),
                "weights_on_empty_row": bool(on_empty.isnan().any()) or float(on_empty.abs().max()) > 1e-6,
                "weight_on_masked_keys": bool((weights[masked & ~empty[..., None]] != 0).any()),
                "rows_not_normalised": bool(((weights.sum(-1)[~empty] - 1).abs() > 1e-4).any()),
                "nan_gradient": bool(torch.isnan(grads).any())}

    assert_mistake("ch03_ex6", tolerant_on_empty_rows, "empty rows compared with a tolerance")
    for seed in (11, 2026):
        assert failed_checks("ch03_ex6", tolerant_on_empty_rows, seed), seed


def test_ch03_ex6_set_of_findings_passes_everywhere():
    """A correct answer in another style: every finding collected per row into a set."""
    def findings(weights, grads, valid_lens):
        b, q, k = weights.shape
        lens = valid_lens.view(b, -1).expand(b, q)
        seen = set()
        for (i, j), n in zip(torch.cartesian_prod(torch.arange(b), torch.arange(q)).tolist(), lens.flatten().tolist()):
            w = weights[i, j].double()
            if w.isnan().any():
                seen.add("nan_weights")
            if n == 0 and (w != 0).any():
                seen.add("weights_on_empty_row")
            if n > 0 and w[n:].count_nonzero():
                seen.add("weight_on_masked_keys")
            if n > 0 and (w.sum() - 1).abs() > 1e-4:
                seen.add("rows_not_normalised")
            if grads[i, j].isnan().any():
                seen.add("nan_gradient")
        return {name: name in seen for name in FAILURES}

    passes_everywhere("ch03_ex6", findings)


def test_ch03_ex6_a_leak_looked_for_as_positive_only_gets_its_hint():
    """A student writes `> 0` for a leak: one implementation leaks negative weights (about -1e-14) at
    masked keys, and that call must find weight_on_masked_keys."""
    def positive_leak(weights, grads, valid_lens):
        lens, masked, empty = _per_row(weights, valid_lens)
        found = dict.fromkeys(FAILURES, False)
        found["nan_weights"] = bool(torch.isnan(weights).any())
        found["nan_gradient"] = bool(torch.isnan(grads).any())
        for i in range(weights.shape[0]):
            for j in range(weights.shape[1]):
                n = int(lens[i, j])
                if n == 0 and (weights[i, j] != 0).any():
                    found["weights_on_empty_row"] = True
                if n > 0 and (weights[i, j, n:] > 0).any():
                    found["weight_on_masked_keys"] = True
                if n > 0 and abs(float(weights[i, j].sum()) - 1) > 1e-4:
                    found["rows_not_normalised"] = True
        return found

    assert_mistake("ch03_ex6", positive_leak, "a leak looked for as a positive weight only")
    reasons = [r.reason for r in failed_checks("ch03_ex6", positive_leak)]
    assert reasons and all("'weight_on_masked_keys' should be True, got False" in r for r in reasons), reasons


def test_ch03_ex6_a_wrong_entry_is_named_with_its_call():
    """The reason of a failed check names the call and the entry that differs; a string (the old
    contract's label) or tensor booleans are named as the wrong type; a constant answer fails every
    public check."""
    def nothing_found(weights, grads, valid_lens):
        return dict.fromkeys(FAILURES, False)

    reasons = [r.reason for r in failed_checks("ch03_ex6", nothing_found)]
    assert len(reasons) == 3
    assert all(r.startswith("call 3 of ") and r.endswith("'nan_weights' should be True, got False")
               for r in reasons), reasons
    label = [r.reason for r in failed_checks("ch03_ex6", lambda weights, grads, valid_lens: "correct")]
    assert len(label) == 3 and all("returned a str, expected a dict of five bools" in r for r in label), label

    def tensor_bools(weights, grads, valid_lens):
        return {name: torch.tensor(False) for name in FAILURES}

    typed = [r.reason for r in failed_checks("ch03_ex6", tensor_bools)]
    assert typed and all("expected a Python bool" in r for r in typed), typed


# ------------------------------------------------------------- every check hint of the chapter

@pytest.mark.parametrize("exercise", all_exercises(3), ids=lambda e: e.label)
def test_ch03_check_hints_describe_rather_than_blame(exercise):
    for check in exercise.checks:
        for words in BLAMING:
            assert words not in check.hint.lower(), (exercise.label, check.name, words)
