"""Regression tests of chapter 7's exercises (Bahdanau attention), filed by exercise.

Where a newly found mistake's regression test goes: into this file, in the section of its
exercise, named ``test_ch07_exM_<what it shows>``; a test about several of the chapter's
exercises is parametrized so that every id carries its exercise's label
(``tests/exercises/conftest.py`` refuses a test here without one). Write each wrong answer
by hand, the way a student would (never import the kept mistake it should match, nor a
solver's files); the shared helpers are in ``tests/exercise_helpers.py``.

Found by independent solvers: a score promised as a Python float (ch07_ex4); an answer whose
output carries no gradient to the inputs is told so plainly (ch07_ex1).
"""
import torch

from attention_course.checking import run_checks


# ---- ch07_ex1: no gradient reaches the inputs

def test_ch07_ex1_no_gradient_to_the_inputs_is_said_plainly():
    from attention_course.exercises.ch07.ex1_bahdanau_decoder_step import BahdanauDecoderStep

    class NoGrad(BahdanauDecoderStep):
        @torch.no_grad()
        def forward(self, *args):
            return super().forward(*args)

    failed = [r for r in run_checks("ch07_ex1", NoGrad, hidden=True, seed=11) if not r.passed]
    assert failed and all("no gradient reaches the inputs" in r.reason for r in failed), \
        [r.line() for r in failed]


# ---- ch07_ex4: the score is a Python float

def _hard_alignment(score_as):
    def hard_alignment(weights):
        if not isinstance(weights, torch.Tensor) or weights.dim() != 2 or 0 in weights.shape:
            raise ValueError(f"weights must be a non-empty 2-D tensor, got {weights!r:.40}")
        positions = weights.argmax(dim=-1)
        pairs = positions.numel() - 1
        share = 1.0 if pairs == 0 else (positions[1:] >= positions[:-1]).sum().item() / pairs
        return positions, score_as(share)
    return hard_alignment


def test_ch07_ex4_monotonicity_must_be_a_python_float():
    as_float = _hard_alignment(float)
    assert all(r.passed for r in run_checks("ch07_ex4", as_float))
    as_tensor = _hard_alignment(lambda v: torch.tensor(v, dtype=torch.float64))
    failed = [r for r in run_checks("ch07_ex4", as_tensor) if not r.passed]
    assert [r.check for r in failed] == ["the score is a Python float"], [r.line() for r in failed]
    assert "Python float" in failed[0].reason and "tensor" in failed[0].reason


def test_ch07_ex4_a_constant_float_does_not_pass_the_type_check():
    """Issue 21: the check of the score's type accepted any float, so a constant earned its points."""
    def hard_alignment(weights):
        if weights.dim() != 2 or weights.numel() == 0:
            raise ValueError(f"weights must be a non-empty 2-D tensor, got shape {tuple(weights.shape)}")
        return weights.argmax(dim=-1), 0.5
    failed = {r.check for r in run_checks("ch07_ex4", hard_alignment) if not r.passed}
    assert "the score is a Python float" in failed
