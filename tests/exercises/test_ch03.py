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
import math

import pytest
import torch

from attention_course import functional as F_att
from attention_course.registry import all_exercises

from exercise_helpers import BLAMING, assert_mistake, failed_checks


# ------------------------------------------------------------- ch03_ex2: swapped pair

def _sdpa_weights_first(queries, keys, values, valid_lens=None):
    d = queries.shape[-1]
    scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
    weights = F_att.masked_softmax(scores, valid_lens)
    return weights, torch.bmm(weights, values)


def test_ch03_ex2_swapped_pair_is_named():
    assert_mistake("ch03_ex2", _sdpa_weights_first, "output and weights swapped",
                    must_not=("mask", "valid_lens reaches", "scal"))


def test_ch03_ex2_swapped_and_unscaled_gets_neutral_hints():
    def swapped_unscaled(queries, keys, values, valid_lens=None):
        weights = F_att.masked_softmax(queries @ keys.transpose(1, 2), valid_lens)
        return weights, weights @ values
    failures = failed_checks("ch03_ex2", swapped_unscaled)
    assert len(failures) == 3
    for r in failures:
        assert r.mistake is None
        assert "look at how" not in r.hint and "the masking treats" not in r.hint, r.hint


# ------------------------------------------------------------- every check hint of the chapter

@pytest.mark.parametrize("exercise", all_exercises(3), ids=lambda e: e.label)
def test_ch03_check_hints_describe_rather_than_blame(exercise):
    for check in exercise.checks:
        for words in BLAMING:
            assert words not in check.hint.lower(), (exercise.label, check.name, words)
