"""Shared by the tests that replay independent solvers' findings: run an answer through the
public checks and the hidden checks at the grading seeds the check-strength tests use."""
from attention_course.checking import run_checks
from attention_course.registry import get_exercise

SEEDS = (11, 2026, 7)


def failures(label, obj, hidden_seed=None):
    results = run_checks(label, obj) if hidden_seed is None else \
        run_checks(label, obj, hidden=True, seed=hidden_seed)
    return [r for r in results if not r.passed]


def passes_everywhere(label, obj):
    assert not failures(label, obj), [r.line() for r in failures(label, obj)]
    for seed in SEEDS:
        bad = failures(label, obj, seed)
        assert not bad, (seed, [r.line() for r in bad])


def mistake_hint(label, name):
    return next(m.hint for m in get_exercise(label).mistakes if m.name == name)
