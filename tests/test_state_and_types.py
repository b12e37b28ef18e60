"""Regressions found by independent solvers: a module's own persistent buffer, the type of a
promised Python float, gradients that do not reach the inputs."""
import torch
from torch import nn

import attention_course.exercises  # noqa: F401  (registers the exercises)
from attention_course.calls import run_call
from attention_course.checking import run_checks
from attention_course.registry import Call


class _Scale(nn.Module):
    """One parameter and, optionally, a persistent buffer of its own."""

    def __init__(self, with_buffer):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(2))
        if with_buffer:
            self.register_buffer("offset", torch.tensor(0.5))

    def forward(self, x):
        return x * self.weight + getattr(self, "offset", 0.0)


def _call(strict):
    return Call(init_args=(True,), state_dict={"weight": torch.tensor([2.0, 3.0])}, args=(torch.ones(2),),
                strict_state=strict)


def test_own_persistent_buffer_keeps_its_value_and_parameters_are_loaded():
    outcome = run_call(_Scale, _call(strict=False), "class")
    assert outcome["status"] == "ok", outcome
    assert torch.equal(outcome["value"], torch.tensor([2.5, 3.5]))


def test_strict_state_still_refuses_a_buffer_the_contract_forbids():
    outcome = run_call(_Scale, _call(strict=True), "class")
    assert outcome["status"] == "raised" and "offset" in outcome["message"], outcome


def test_a_missing_parameter_or_an_unexpected_key_still_fails():
    missing = Call(init_args=(False,), state_dict={}, args=(torch.ones(2),))
    unexpected = Call(init_args=(False,), state_dict={"weight": torch.ones(2), "bias": torch.ones(2)},
                      args=(torch.ones(2),))
    for call, word in ((missing, "weight"), (unexpected, "bias")):
        outcome = run_call(_Scale, call, "class")
        assert outcome["status"] == "raised" and word in outcome["message"], outcome


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


def test_no_gradient_to_the_inputs_is_said_plainly():
    from attention_course.exercises.ch07.ex1_bahdanau_decoder_step import BahdanauDecoderStep

    class NoGrad(BahdanauDecoderStep):
        @torch.no_grad()
        def forward(self, *args):
            return super().forward(*args)

    failed = [r for r in run_checks("ch07_ex1", NoGrad, hidden=True, seed=11) if not r.passed]
    assert failed and all("no gradient reaches the inputs" in r.reason for r in failed), \
        [r.line() for r in failed]


def test_a_check_that_promises_finite_results_says_so_when_they_are_not():
    # The finiteness test of these compares once skipped every call (it looked for a status
    # "returned"; outcomes say "ok"), and NaN fell through to a generic value message.
    from attention_course.registry import get_exercise
    for label, mistake_name in (("ch01_ex4", "exp then divide (underflow)"), ("ch02_ex2", "kernel over its sum")):
        mistake = next(m for m in get_exercise(label).mistakes if m.name == mistake_name)
        reasons = [r.reason for r in run_checks(label, mistake.impl) if not r.passed]
        assert any("NaN or inf entries" in reason for reason in reasons), (label, reasons)
