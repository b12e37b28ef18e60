"""Regression tests of chapter 9's exercises (attention at scale), filed by exercise.

Where a newly found mistake's regression test goes: into this file, in the section of its
exercise, named ``test_ch09_exM_<what it shows>``; a test about several of the chapter's
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

from attention_course.registry import all_exercises

from exercise_helpers import BLAMING, assert_mistake


# ------------------------------------------------------------- ch09_ex4

def _step_heads_round_robin(x_new, k_cache, v_cache, w_query, w_key, w_value, num_heads):
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} differ")
    b, n, _ = x_new.shape
    d_out = w_query.shape[0]
    hd = d_out // num_heads

    def heads(t):
        return t.reshape(b, n, hd, num_heads).permute(0, 3, 1, 2)

    q = heads(x_new @ w_query.T)
    k = torch.cat([k_cache, heads(x_new @ w_key.T)], dim=2)
    v = torch.cat([v_cache, heads(x_new @ w_value.T)], dim=2)
    n_past = k_cache.shape[2]
    later = torch.arange(k.shape[2])[None, :] > (n_past + torch.arange(n))[:, None]
    w = torch.softmax((q @ k.transpose(-1, -2) / math.sqrt(hd)).masked_fill(later, float("-inf")), dim=-1)
    return (w @ v).permute(0, 2, 3, 1).reshape(b, n, d_out), k, v


def test_ch09_ex4_interleaved_heads_are_named():
    assert_mistake("ch09_ex4", _step_heads_round_robin, "heads interleaved",
                    must_not=("sits at position", "old tokens first", "mask"))


# ------------------------------------------------------------- every check hint of the chapter

@pytest.mark.parametrize("exercise", all_exercises(9), ids=lambda e: e.label)
def test_ch09_check_hints_describe_rather_than_blame(exercise):
    for check in exercise.checks:
        for words in BLAMING:
            assert words not in check.hint.lower(), (exercise.label, check.name, words)
