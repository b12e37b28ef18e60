"""The course library answers some exercises' contracts: it must keep answering them (issue 18).

Students import finished classes and functions from the package (``functional``, ``multihead``,
``translation``, ``transformer``, ``efficient``) that implement what some exercises ask for. Where such a
library object is not the exercise's reference, it is kept among the exercise's alternatives (as
it is, or through a thin adapter that only changes the signature), so that
``tests/test_exercises.py::test_kept_alternative_passes_every_check`` runs it through every public
check and the hidden checks: a library that drifts from the contract the students are held to (a
scale, a mask convention, a parameter name) fails there.

This file makes sure none of these pairs is dropped quietly: each library object below must be
the exercise's reference, or the kept alternative named beside it (the object itself, a subclass
of it, or a function whose code calls it). Every test id carries the exercise's label.

``CONTRADICTIONS`` lists the library objects that meet an exercise's contract in meaning but not in
one of its clauses; they cannot be kept as alternatives while the difference lasts. The test
expects them to fail that exercise's public checks (strict), so that the day the library or the
contract changes, it says so, and the pair can move to ``LIBRARY_ANSWERS``.
"""
import inspect

import pytest

from attention_course import functional, multihead, rope_scaling, transformer
from attention_course.checks.checking import run_checks
from attention_course.checks.registry import get_exercise

# (label, what the alternative is called, the library object); alternative None: the reference.
LIBRARY_ANSWERS = [
    ("ch03_ex1", None, functional.masked_softmax),
    ("ch03_ex2", None, functional.AdditiveAttention),
    ("ch04_ex3", "the course library's transformer.sinusoidal_encoding", transformer.sinusoidal_encoding),
    ("ch04_ex5", "the course library's rope_scaling.apply_rope", rope_scaling.apply_rope),
    ("ch05_ex3", "the course library's multihead.CausalAttention", multihead.CausalAttention),
    ("ch06_ex1", "the course library's multihead.MultiHeadAttention", multihead.MultiHeadAttention),
    ("ch06_ex1", "the course library's multihead.SDPAMultiHeadAttention", multihead.SDPAMultiHeadAttention),
    ("ch08_ex2", "package layer", transformer.MaskedMultiHeadAttention),
    ("ch08_ex3", "the course library's transformer.DecoderBlock", transformer.DecoderBlock),
    ("ch08_ex4", "measured on the package's model", transformer.Transformer),
]

# (label, the library object, the public check it fails and why).
CONTRADICTIONS = [
    ("ch05_ex1", transformer.causal_mask,
     "non-positive sizes raise ValueError",
     "tf.causal_mask(0) returns an empty (0, 0) mask and tf.causal_mask(-2) raises RuntimeError"),
]


def _qualname(obj) -> str:
    return f"{obj.__module__.rsplit('.', 1)[-1]}.{obj.__qualname__}"


def _answers_with(impl, obj) -> bool:
    """``impl`` is ``obj``, a subclass of it (an adapter class), or a function whose code calls it."""
    if impl is obj:
        return True
    if inspect.isclass(impl) and inspect.isclass(obj):
        return issubclass(impl, obj)
    code = getattr(impl, "__code__", None)
    return code is not None and obj.__name__ in code.co_names


@pytest.mark.parametrize("label,alternative,obj", LIBRARY_ANSWERS,
                         ids=[f"{label}-{_qualname(obj)}" for label, _, obj in LIBRARY_ANSWERS])
def test_library_object_is_kept_with_its_exercise(label, alternative, obj):
    exercise = get_exercise(label)
    if alternative is None:
        assert exercise.reference is obj, \
            f"{label}'s reference is no longer {_qualname(obj)}: keep the library's object as an alternative"
        return
    kept = {a.name: a for a in exercise.alternatives}
    assert alternative in kept, (
        f"{label} no longer keeps the alternative {alternative!r} ({_qualname(obj)}): without it, nothing "
        f"notices when the course library drifts from the contract of {label}")
    assert _answers_with(kept[alternative].impl, obj), \
        f"{label}'s alternative {alternative!r} no longer runs {_qualname(obj)}"


@pytest.mark.parametrize("label,obj,check,why", CONTRADICTIONS,
                         ids=[f"{label}-{_qualname(obj)}" for label, obj, _, _ in CONTRADICTIONS])
def test_known_contradiction_is_still_there(label, obj, check, why):
    failed = [r.check for r in run_checks(label, obj) if not r.passed]
    assert failed == [check], (
        f"{_qualname(obj)} used to fail only {check!r} of {label} ({why}); it now fails {failed}. "
        "If it passes, keep it as an alternative (LIBRARY_ANSWERS) and drop it from CONTRADICTIONS.")
