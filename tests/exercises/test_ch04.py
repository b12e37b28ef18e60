"""Regression tests of chapter 4's exercises (self-attention), filed by exercise.

Where a newly found mistake's regression test goes: into this file, in the section of its
exercise, named ``test_ch04_exM_<what it shows>``; a test about several of the chapter's
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

from attention_course.exercises.ch04.ex1_self_attention import SelfAttention
from attention_course.checks.registry import all_exercises, get_exercise

from exercise_helpers import BLAMING, ROOT, assert_mistake, failed_checks, passes_everywhere, statement


def _solution_only_answer(label):
    """The one solution-only markdown cell inside ``label``'s solution block, and the student notebook."""
    cells = json.loads((ROOT / "solutions" / "04_self_attention.ipynb").read_text())["cells"]
    text = ["".join(c["source"]) for c in cells]
    start = next(i for i, t in enumerate(text) if f"{{solution-start}} {label}" in t)
    end = next(i for i in range(start, len(cells)) if "{solution-end}" in text[i])
    answers = [i for i in range(start, end) if cells[i]["cell_type"] == "markdown"
               and "solution-only" in cells[i]["metadata"].get("tags", [])]
    assert len(answers) == 1, answers
    return text[answers[0]], (ROOT / "chapters" / "04_self_attention.ipynb").read_text()


# ------------------------------------------------------------- ch04_ex1

class _ScaledByInputWidth(SelfAttention):
    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        d_in = self.W_query.in_features
        return torch.softmax(q @ k.transpose(-2, -1) / d_in ** 0.5, dim=-1) @ v


class _KeysQueries(SelfAttention):
    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = torch.matmul(k, q.transpose(-2, -1)) / math.sqrt(k.shape[-1])
        return torch.softmax(scores, dim=-1) @ v


def test_ch04_ex1_scaled_by_sqrt_d_in_is_named():
    assert_mistake("ch04_ex1", _ScaledByInputWidth, "scaled by sqrt(d_in)",
                    must_not=("batch", "bias", "layers with the contract"))


def test_ch04_ex1_keys_times_queries_is_named():
    assert_mistake("ch04_ex1", _KeysQueries, "keys times queries",
                    must_not=("batch axis", "bias", "layers with the contract"))


class _SumNormalised(SelfAttention):
    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])
        return scores / scores.sum(-1, keepdim=True) @ v


class _FirstTwoAxes(SelfAttention):
    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        return torch.softmax(q @ k.transpose(0, 1) / math.sqrt(k.shape[-1]), dim=-1) @ v


def test_ch04_ex1_weights_divided_by_their_sum_are_named():
    # Carried over from the retired simple_self_attention warm-up (issue 40).
    assert_mistake("ch04_ex1", _SumNormalised, "sum-normalised scores")


def test_ch04_ex1_transpose_of_the_first_two_axes_is_named():
    assert_mistake("ch04_ex1", _FirstTwoAxes, "transposed the first two axes")


def test_ch04_ex1_check_hints_blame_neither_batch_nor_layers():
    # A wrong answer that matches no kept mistake (scaled by sqrt(d_in) and by 2).
    class Other(SelfAttention):
        def forward(self, x):
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            return torch.softmax(q @ k.transpose(-2, -1) / (2 * x.shape[-1] ** 0.5), dim=-1) @ v
    failures = failed_checks("ch04_ex1", Other)
    assert failures and all(r.mistake is None for r in failures)
    for r in failures:
        assert "left alone" not in r.hint and "compare your layers" not in r.hint, r.hint


def test_ch04_ex1_folded_question_has_a_reference_answer_in_its_solution_block():
    """The transposition into nn.Linear weights (once the exercise linear_state_dict) is now the
    closing question of the module exercise, answered on the full site and not in the student's."""
    assert "load_state_dict" in statement("ch04_ex1")
    answer, student = _solution_only_answer("ch04_ex1")
    assert "W_q.T" in answer and "shape mismatch" in answer
    assert answer.splitlines()[0][:60] not in student


# ------------------------------------------------------------- ch04_ex3

def _pe_positions_from_one(num_positions, d_model):
    if num_positions < 1:
        raise ValueError(f"num_positions must be >= 1, got {num_positions}")
    if d_model < 2 or d_model % 2:
        raise ValueError(f"d_model must be even and >= 2, got {d_model}")
    pos = torch.arange(1, num_positions + 1, dtype=torch.float64)[:, None]
    angles = pos / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.empty(num_positions, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = angles.sin(), angles.cos()
    return pe.float()


def _pe_kept_float64(num_positions, d_model):
    if num_positions < 1:
        raise ValueError(f"num_positions must be >= 1, got {num_positions}")
    if d_model < 2 or d_model % 2:
        raise ValueError(f"d_model must be even and >= 2, got {d_model}")
    pos = torch.arange(num_positions, dtype=torch.float64)[:, None]
    angles = pos / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(num_positions, d_model)


def test_ch04_ex3_positions_from_one_is_named():
    assert_mistake("ch04_ex3", _pe_positions_from_one, "positions counted from 1",
                    must_not=("same frequency",))


def test_ch04_ex3_float64_is_named():
    assert_mistake("ch04_ex3", _pe_kept_float64, "float64 table", must_not=("same frequency",))


# ------------------------------------------------------------- ch04_ex5

def _rope_reference():
    return get_exercise("ch04_ex5").reference


def test_ch04_ex5_reference_on_a_case_worked_by_hand():
    # d = 4, base 100: theta_0 = 1, theta_1 = 100^(-1/2) = 0.1. At position 3 pair 0 turns by 3 rad,
    # pair 1 by 0.3 rad; (1, 0) turned by a is (cos a, sin a), (0, 1) turned by a is (-sin a, cos a).
    x = torch.tensor([[1.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
    expected = torch.tensor([[math.cos(3), math.sin(3), -math.sin(0.3), math.cos(0.3)]], dtype=torch.float64)
    assert torch.allclose(_rope_reference()(x, torch.tensor([3]), base=100.0), expected, atol=1e-12)
    # and scale 2 at position 6 is the same as position 3
    assert torch.allclose(_rope_reference()(x, torch.tensor([6]), base=100.0, scale=2.0), expected, atol=1e-12)


def _block_rotation(angle_per_pair):
    return torch.block_diag(*[torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]],
                                           dtype=torch.float64) for a in angle_per_pair])


def test_ch04_ex5_reference_is_R_m_times_each_row_and_scores_see_only_the_offset():
    """Another method: R_m as a block-diagonal matrix (column vectors), and the chapter's identity
    q_m . k_n = q . R_(n-m) k."""
    g = torch.Generator().manual_seed(4)
    d, base = 10, 10000.0
    theta = [base ** (-2 * i / d) for i in range(d // 2)]
    q, k = torch.randn(2, d, generator=g, dtype=torch.float64)
    for m, n in [(0, 7), (13, 20), (1000, 1007), (45, 2)]:
        turned = _rope_reference()(torch.stack([q, k]), torch.tensor([m, n]))
        assert torch.allclose(turned[0], _block_rotation([m * t for t in theta]) @ q, atol=1e-10)
        assert torch.allclose(turned[1], _block_rotation([n * t for t in theta]) @ k, atol=1e-10)
        offset_only = q @ _block_rotation([(n - m) * t for t in theta]) @ k
        assert abs((turned[0] @ turned[1]).item() - offset_only.item()) < 1e-9


def test_ch04_ex5_rotate_half_is_named():
    def rotate_half_rope(x, positions, base=10000.0, scale=1.0):
        # the half-split layout of GPT-NeoX / Llama code: cos and sin repeated over both halves
        d = x.shape[-1]
        inv_freq = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
        freqs = (positions.double() / scale)[..., None] * inv_freq
        emb = torch.cat([freqs, freqs], dim=-1)
        half = d // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return (x.double() * emb.cos() + rotated.double() * emb.sin()).to(x.dtype)
    assert_mistake("ch04_ex5", rotate_half_rope, "half-split pairs")


def test_ch04_ex5_scale_multiplying_the_positions_is_named():
    def stretched(x, positions, base=10000.0, scale=1.0):
        d = x.shape[-1]
        angle = (positions.double() * scale)[..., None] * base ** (-torch.arange(0, d, 2).double() / d)
        a, b = x[..., 0::2].double(), x[..., 1::2].double()
        out = torch.empty_like(x, dtype=torch.float64)
        out[..., 0::2], out[..., 1::2] = a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()
        return out.to(x.dtype)
    assert_mistake("ch04_ex5", stretched, "scale multiplies the positions")


def test_ch04_ex5_positions_from_arange_are_named():
    def counted(x, positions, base=10000.0, scale=1.0):
        d, n = x.shape[-1], x.shape[-2]
        angle = (torch.arange(n, dtype=torch.float64) / scale)[:, None] * base ** (-torch.arange(0, d, 2).double() / d)
        a, b = x[..., 0::2].double(), x[..., 1::2].double()
        return torch.stack([a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()], -1).flatten(-2).to(x.dtype)
    assert_mistake("ch04_ex5", counted, "positions 0, 1, 2, ...")


def test_ch04_ex5_a_table_cached_for_integer_positions_fails_the_interpolation_check():
    """A loophole: precompute cos and sin for integer positions 0..N and index the table with
    positions.long(). Integer positions pass; the fractional ones of interpolation do not."""
    def cached(x, positions, base=10000.0, scale=1.0):
        d = x.shape[-1]
        table = torch.arange(200001, dtype=torch.float64)[:, None] * base ** (-torch.arange(0, d, 2).double() / d)
        angle = table[(positions.double() / scale).long()]
        a, b = x[..., 0::2].double(), x[..., 1::2].double()
        return torch.stack([a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()], -1).flatten(-2).to(x.dtype)
    failed = {r.check: r for r in failed_checks("ch04_ex5", cached)}
    interpolation = next(name for name in failed if name.startswith("apply_rope(x, p, scale=s)"))
    # both calls of a pair floor the same fractional positions, so they agree with each other: the
    # reason is the gap from the expected rotation, not the interpolation property
    assert "differs from the expected rotation" in failed[interpolation].reason, failed[interpolation].reason
    assert not any(name.startswith("3 tokens") or name.startswith("float32 rows") for name in failed), list(failed)


def test_ch04_ex5_a_float64_result_for_float32_rows_fails_on_its_dtype():
    def kept_float64(x, positions, base=10000.0, scale=1.0):
        return get_exercise("ch04_ex5").alternatives[0].impl(x.double(), positions, base, scale)
    failed = failed_checks("ch04_ex5", kept_float64)
    assert failed and all("dtype" in r.reason for r in failed), [r.reason for r in failed]


def test_ch04_ex5_breaking_the_offset_property_is_reported_as_such():
    def absolute_bias(x, positions, base=10000.0, scale=1.0):
        # the right rotation, plus a little of the absolute position: no rotation any more
        right = get_exercise("ch04_ex5").alternatives[0].impl(x, positions, base, scale)
        return right + 1e-3 * positions.to(x.dtype)[..., None]
    offset = next(r for r in failed_checks("ch04_ex5", absolute_bias) if r.check.startswith("the score of q"))
    assert "depends on m, not on the offset" in offset.reason, offset.reason


def _rope_writing_into(x, positions, base=10000.0, scale=1.0):
    """A student's RoPE that turns the pairs of x where they stand (assignments into x's columns)."""
    d = x.shape[-1]
    angle = (positions.double() / scale)[..., None] * base ** (-torch.arange(0, d, 2).double() / d)
    a, b = x[..., 0::2].double().clone(), x[..., 1::2].double().clone()    # float64 x: .double() is x itself
    x[..., 0::2] = (a * angle.cos() - b * angle.sin()).to(x.dtype)
    x[..., 1::2] = (a * angle.sin() + b * angle.cos()).to(x.dtype)
    return x


def test_ch04_ex5_turning_x_in_place_is_named_with_its_argument():
    """Issue 40, item 3: an answer that writes the turned pairs into x returned the right rows, and the
    checks (which copy every input) never saw x change; now every check fails it, in public and hidden,
    with the argument named in the reason and the kept mistake's hint."""
    assert_mistake("ch04_ex5", _rope_writing_into, "turned x in place")
    for r in failed_checks("ch04_ex5", _rope_writing_into):
        assert "changed its argument x in place" in r.reason, r.reason
    for seed in (11, 2026):
        assert failed_checks("ch04_ex5", _rope_writing_into, seed), seed


def test_ch04_ex5_an_in_place_write_under_another_name_is_named_by_that_name():
    """The reason names the argument as the answer's own signature calls it."""
    def rope(rows, pos, base=10000.0, scale=1.0):
        turned = _rope_writing_into(rows.clone(), pos, base, scale)
        rows.mul_(1.0).add_(1.0)     # a stray in-place edit of the input
        return turned
    failed = failed_checks("ch04_ex5", rope)
    assert failed and all("changed its argument rows in place" in r.reason for r in failed), [r.reason for r in failed]


def test_ch04_ex5_a_copy_written_in_place_passes_everywhere():
    """Writing into a copy of x is a correct answer of any style."""
    passes_everywhere("ch04_ex5", lambda x, positions, base=10000.0, scale=1.0:
                      _rope_writing_into(x.clone(), positions, base, scale))


def test_ch04_ex5_open_question_has_a_reference_answer_in_its_solution_block():
    answer, student = _solution_only_answer("ch04_ex5")
    assert "2047.75" in answer and "fine-tuning" in answer
    assert answer.splitlines()[0][:60] not in student


# ------------------------------------------------------------- ch04_ex6

def _ths_reference():
    return get_exercise("ch04_ex6").reference


def test_ch04_ex6_reference_on_a_matrix_reordered_by_hand():
    w = torch.arange(16.0).reshape(2, 8)
    # by hand: pair i = columns (2i, 2i+1) goes to columns (i, i + 4)
    expected = torch.tensor([[0.0, 2, 4, 6, 1, 3, 5, 7], [8.0, 10, 12, 14, 9, 11, 13, 15]])
    assert torch.equal(_ths_reference()(w), expected)


def _turn_pairs(x, positions, first, second):
    """Rotary embedding written out with cos and sin: pair i is columns first[i], second[i]."""
    d = x.shape[-1]
    out = x.clone()
    for i, (a, b) in enumerate(zip(first, second)):
        angle = positions.double() * 10000.0 ** (-2 * i / d)
        out[:, a] = x[:, a] * angle.cos() - x[:, b] * angle.sin()
        out[:, b] = x[:, a] * angle.sin() + x[:, b] * angle.cos()
    return out


def test_ch04_ex6_reference_keeps_every_rope_score():
    g = torch.Generator().manual_seed(5)
    d_in, d_k = 5, 10
    w_q, w_k = (torch.randn(d_in, d_k, generator=g, dtype=torch.float64) for _ in range(2))
    x = torch.randn(9, d_in, generator=g, dtype=torch.float64)
    positions = torch.tensor([0, 3, 17, 100, 101, 512, 777, 1023, 4000])
    half = d_k // 2
    inter = lambda v: _turn_pairs(v, positions, range(0, d_k, 2), range(1, d_k, 2))  # noqa: E731
    split = lambda v: _turn_pairs(v, positions, range(half), range(half, d_k))       # noqa: E731
    before = inter(x @ w_q) @ inter(x @ w_k).T
    convert = _ths_reference()
    after = split(x @ convert(w_q)) @ split(x @ convert(w_k)).T
    assert torch.allclose(after, before, atol=1e-10)
    # and the layouts do matter: unconverted weights give other scores
    assert not torch.allclose(split(x @ w_q) @ split(x @ w_k).T, before, atol=1e-3)


def test_ch04_ex6_half_split_to_interleaved_is_named():
    def interleave_halves(w):
        d_k = w.shape[-1]
        out = torch.empty_like(w)
        for i in range(d_k // 2):
            out[..., 2 * i] = w[..., i]
            out[..., 2 * i + 1] = w[..., i + d_k // 2]
        return out
    assert_mistake("ch04_ex6", interleave_halves, "the inverse reordering", must_not=("rows", "transposed"))


def test_ch04_ex6_rows_reordered_is_named():
    def rows_even_then_odd(w):
        d_in = w.shape[-2]
        order = list(range(0, d_in, 2)) + list(range(1, d_in, 2))
        return w[..., order, :]
    assert_mistake("ch04_ex6", rows_even_then_odd, "rows reordered")


def test_ch04_ex6_pairs_turned_by_a_fixed_angle_keep_the_scores_but_not_the_matrix():
    """Turning every converted pair by one fixed angle keeps every score (rotations commute), so the
    score checks pass it; the contract asks for a reordering, and the entry-by-entry checks fail it
    with their own hints."""
    def reordered_then_turned(w):
        a, b = w[..., 0::2], w[..., 1::2]
        c, s = math.cos(0.3), math.sin(0.3)
        return torch.cat([a * c - b * s, a * s + b * c], dim=-1)
    failures = failed_checks("ch04_ex6", reordered_then_turned)
    entry_by_entry = [c.name for c in get_exercise("ch04_ex6").checks if c.public and c.compare is None]
    assert [r.check for r in failures] == entry_by_entry
    assert all(r.mistake is None for r in failures)


def test_ch04_ex6_an_in_place_reordering_passes_everywhere():
    def in_place(w):
        d_k = w.shape[-1]
        w[:] = w[..., [*range(0, d_k, 2), *range(1, d_k, 2)]]
        return w
    passes_everywhere("ch04_ex6", in_place)


def test_ch04_ex6_open_question_has_a_reference_answer_in_its_solution_block():
    cells = json.loads((ROOT / "solutions" / "04_self_attention.ipynb").read_text())["cells"]
    text = ["".join(c["source"]) for c in cells]
    start = next(i for i, t in enumerate(text) if "{solution-start} ch04_ex6" in t)
    end = next(i for i in range(start, len(cells)) if "{solution-end}" in text[i])
    answers = [i for i in range(start, end) if cells[i]["cell_type"] == "markdown"
               and "solution-only" in cells[i]["metadata"].get("tags", [])]
    assert len(answers) == 1, answers
    student = (ROOT / "chapters" / "04_self_attention.ipynb").read_text()
    assert text[answers[0]].splitlines()[0][:60] not in student


# ------------------------------------------------------------- ch04_ex7

def _oop_reference():
    return get_exercise("ch04_ex7").reference


def test_ch04_ex7_reference_on_a_matrix_worked_by_hand():
    A = torch.arange(1.0, 17.0).reshape(4, 4)
    # by hand: pair 0's block [[1, 2], [5, 6]] -> a = (1 + 6) / 2, b = (2 - 5) / 2;
    #          pair 1's block [[11, 12], [15, 16]] -> a = (11 + 16) / 2, b = (12 - 15) / 2
    expected = torch.tensor([[3.5, -1.5, 0.0, 0.0],
                             [1.5, 3.5, 0.0, 0.0],
                             [0.0, 0.0, 13.5, -1.5],
                             [0.0, 0.0, 1.5, 13.5]])
    assert torch.equal(_oop_reference()(A), expected)


def test_ch04_ex7_reference_is_the_least_squares_fit_of_matrices_commuting_with_M_1():
    """Another method: the matrices commuting with M_1 found numerically (the null space of
    X -> M_1 X - X M_1), then the least-squares fit of A in that space."""
    d = 10
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    m1 = torch.block_diag(*[torch.tensor([[math.cos(w), math.sin(w)], [-math.sin(w), math.cos(w)]],
                                         dtype=torch.float64) for w in omega.tolist()])
    eye = torch.eye(d, dtype=torch.float64)
    # row-major vec: vec(M X) = (M kron I) vec X, vec(X M) = (I kron M^T) vec X
    operator = torch.kron(m1, eye) - torch.kron(eye, m1.T.contiguous())
    _, s, vh = torch.linalg.svd(operator)
    null = vh[s < 1e-9].T                                       # (d*d, dim of the commutant)
    assert null.shape[1] == d
    g = torch.Generator().manual_seed(3)
    A = torch.randn(d, d, generator=g, dtype=torch.float64)
    fit = (null @ torch.linalg.lstsq(null, A.reshape(-1, 1)).solution).reshape(d, d)
    assert torch.allclose(_oop_reference()(A), fit, atol=1e-10)


def test_ch04_ex7_b_with_the_wrong_sign_is_named():
    def b_from_lower_minus_upper(A):
        B = torch.zeros_like(A)
        for i in range(0, A.shape[-1], 2):
            a = (A[..., i, i] + A[..., i + 1, i + 1]) / 2
            b = (A[..., i + 1, i] - A[..., i, i + 1]) / 2
            B[..., i, i] = B[..., i + 1, i + 1] = a
            B[..., i, i + 1], B[..., i + 1, i] = b, -b
        return B
    assert_mistake("ch04_ex7", b_from_lower_minus_upper, "b with the wrong sign",
                   must_not=("pair i is columns", "twice"))


def test_ch04_ex7_half_split_pairs_are_named():
    def pairs_i_and_i_plus_half(A):
        h = A.shape[-1] // 2
        B = torch.zeros_like(A)
        for i in range(h):
            j = i + h
            a, b = (A[..., i, i] + A[..., j, j]) / 2, (A[..., i, j] - A[..., j, i]) / 2
            B[..., i, i], B[..., j, j], B[..., i, j], B[..., j, i] = a, a, b, -b
        return B
    assert_mistake("ch04_ex7", pairs_i_and_i_plus_half, "half-split pairs")


def test_ch04_ex7_whole_blocks_fail_the_commuting_check_with_their_hint():
    def keep_blocks(A):
        B = torch.zeros_like(A)
        for i in range(0, A.shape[-1], 2):
            B[..., i:i + 2, i:i + 2] = A[..., i:i + 2, i:i + 2]
        return B
    assert_mistake("ch04_ex7", keep_blocks, "whole diagonal blocks kept")
    commute = next(r for r in failed_checks("ch04_ex7", keep_blocks) if r.check.startswith("B commutes"))
    assert "does not commute with M_1" in commute.reason, commute.reason


def test_ch04_ex7_an_in_place_float64_answer_passes_everywhere():
    def in_place(A):
        d = A.shape[-1]
        work = A.double()
        pair = torch.arange(d) // 2
        off_block = pair[:, None] != pair[None, :]
        turned = work.clone()
        turned[..., 0::2, :], turned[..., 1::2, :] = work[..., 1::2, :], -work[..., 0::2, :]
        rotated = turned.clone()
        rotated[..., :, 0::2], rotated[..., :, 1::2] = turned[..., :, 1::2], -turned[..., :, 0::2]
        A.copy_(((work + rotated) / 2).masked_fill(off_block, 0.0).to(A.dtype))
        return A
    passes_everywhere("ch04_ex7", in_place)


def test_ch04_ex7_a_random_matrix_keeps_about_one_over_d_model_of_its_squared_norm():
    """The figure given in the reference answer to the open question."""
    g = torch.Generator().manual_seed(0)
    for d in (8, 32):
        A = torch.randn(4000, d, d, generator=g, dtype=torch.float64)
        B = _oop_reference()(A)
        kept = (B ** 2).sum() / (A ** 2).sum()
        assert abs(kept.item() * d - 1) < 0.03, (d, kept.item())
        # and A - B is orthogonal to B, so the squared norms add up
        assert torch.allclose(((A - B) * B).sum(dim=(-2, -1)), torch.zeros(4000, dtype=torch.float64),
                              atol=1e-9)


def test_ch04_ex7_open_question_has_a_reference_answer_in_its_solution_block():
    cells = json.loads((ROOT / "solutions" / "04_self_attention.ipynb").read_text())["cells"]
    text = ["".join(c["source"]) for c in cells]
    start = next(i for i, t in enumerate(text) if "{solution-start} ch04_ex7" in t)
    end = next(i for i in range(start, len(cells)) if "{solution-end}" in text[i])
    answers = [i for i in range(start, end) if cells[i]["cell_type"] == "markdown"
               and "solution-only" in cells[i]["metadata"].get("tags", [])]
    assert len(answers) == 1, answers
    student = (ROOT / "chapters" / "04_self_attention.ipynb").read_text()
    assert text[answers[0]].splitlines()[0][:60] not in student
    assert "1/d_\\text{model}" in text[answers[0]] and "rank" in text[answers[0]]


# ------------------------------------------------------------- every check hint of the chapter

@pytest.mark.parametrize("exercise", all_exercises(4), ids=lambda e: e.label)
def test_ch04_check_hints_describe_rather_than_blame(exercise):
    for check in exercise.checks:
        for words in BLAMING:
            assert words not in check.hint.lower(), (exercise.label, check.name, words)


def test_ch04_ex7_b_from_the_symmetric_part_is_named():
    def symmetric_b(A):
        B = torch.zeros_like(A)
        for i in range(0, A.shape[-1], 2):
            a = (A[..., i, i] + A[..., i + 1, i + 1]) / 2
            b = (A[..., i, i + 1] + A[..., i + 1, i]) / 2       # should be the difference
            B[..., i, i], B[..., i + 1, i + 1], B[..., i, i + 1], B[..., i + 1, i] = a, a, b, -b
        return B

    assert_mistake("ch04_ex7", symmetric_b, "b from the symmetric part")


def test_ch04_ex7_single_entries_are_named():
    def copied(A):
        B = torch.zeros_like(A)
        for i in range(0, A.shape[-1], 2):
            a, b = A[..., i, i].clone(), A[..., i, i + 1].clone()
            B[..., i, i], B[..., i + 1, i + 1], B[..., i, i + 1], B[..., i + 1, i] = a, a, b, -b
        return B

    assert_mistake("ch04_ex7", copied, "a and b copied from single entries")


def test_ch04_ex4_graded_cases_keep_what_their_names_promise():
    """At grading, the public checks run at other seeds (issue 38, item 4): other offsets and widths,
    of the same kind as the public case (an offset of at least 2 in the chapter's 32-wide table; a
    negative offset, a zero offset and one pair; an odd, a zero and a negative width)."""
    from attention_course.checks.plan import hidden_seed
    checks = get_exercise("ch04_ex4").checks
    for seed in (11, 2026, 7, 1):
        args = [[c.args for c in checks[i].make_calls(hidden_seed(seed, i))] for i in range(4)]
        (k, d), = args[0]
        assert d == 32 and 2 <= k and (k, d) != (5, 32)
        (k_neg, _), (k_zero, _), (_, one_pair) = args[1]
        assert k_neg < 0 and k_zero == 0 and one_pair == 2
        (k_long, d_wide), = args[2]
        assert k_long >= 24 and d_wide >= 48 and d_wide % 2 == 0
        odd, zero, negative = (d for _, d in args[3])
        assert odd % 2 == 1 and odd > 0 and zero == 0 and negative < 0
