"""Regressions found by independent solvers in the checking machinery: a module's own
persistent buffer, a NaN in a result that must stay finite. (The tests of one exercise, a
promised Python float in ch07_ex4 and gradients that do not reach the inputs in ch07_ex1,
are in tests/exercises/test_ch07.py.)"""
import torch
from torch import nn

import attention_course.exercises  # noqa: F401  (registers the exercises)
from attention_course.checks.calls import run_call
from attention_course.checks.checking import run_checks
from attention_course.checks.registry import Call


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


def test_a_check_that_promises_finite_results_says_so_when_they_are_not():
    # The finiteness test of these compares once skipped every call (it looked for a status
    # "returned"; outcomes say "ok"), and NaN fell through to a generic value message.
    from attention_course.checks.registry import get_exercise
    for label, mistake_name in (("ch01_ex4", "exp then divide (underflow)"), ("ch02_ex2", "kernel over its sum")):
        mistake = next(m for m in get_exercise(label).mistakes if m.name == mistake_name)
        reasons = [r.reason for r in run_checks(label, mistake.impl) if not r.passed]
        assert any("NaN or inf entries" in reason for reason in reasons), (label, reasons)
