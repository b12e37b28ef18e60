"""At grading, public checks run on inputs the release does not ship (issue 38, item 4).

A release stores the reference's outcomes of every public check on its fixed public inputs
(``public_checks/checks.pt``), so that ``check()`` works without the reference. A notebook that
looks its inputs up in those stored outcomes must earn nothing at grading: the grader runs every
check, the public ones too, at the hidden seed :func:`hidden_seed` ``(seed, i)``, and each check's
``make_calls`` must then give inputs of its own: the same case transformed (keys permuted, points
shifted and scaled, values redrawn, sizes varied) so that what the check tests still holds.

This test holds every public check of every exercise to that: at its own seed the calls are the
public case (what ships); at two grading seeds they differ from the public case and from each other.
"""
import pytest
import torch

from attention_course.checks.plan import hidden_seed
from attention_course.checks.registry import all_exercises

FIELDS = ("args", "kwargs", "init_args", "init_kwargs", "state_dict", "init_seed", "call_seed", "method")


def _same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and (torch.equal(a, b) or (  # NaN equals NaN here
            a.is_floating_point() and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def _same_calls(first: list, second: list) -> bool:
    return len(first) == len(second) and all(
        _same(getattr(x, f), getattr(y, f)) for x, y in zip(first, second) for f in FIELDS)


PUBLIC = [(ex, index, check) for ex in all_exercises() for index, check in enumerate(ex.checks) if check.public]


@pytest.mark.parametrize("exercise,index,check", PUBLIC,
                         ids=[f"{ex.label}-{i}" for ex, i, _ in PUBLIC])
def test_public_check_is_graded_on_inputs_that_do_not_ship(exercise, index, check):
    public = check.make_calls(check.seed)
    assert _same_calls(public, check.make_calls(check.seed)), "the public case must not depend on anything but its seed"
    graded = [check.make_calls(hidden_seed(seed, index)) for seed in (11, 2026)]
    for calls in graded:
        assert not _same_calls(calls, public), (
            f"{exercise.label} check {index} ({check.name!r}) is graded on its public inputs, whose "
            f"outcomes ship with a release: make_calls must transform the case at any other seed")
    assert not _same_calls(*graded), (
        f"{exercise.label} check {index} ({check.name!r}) gives the same inputs at two grading seeds")
