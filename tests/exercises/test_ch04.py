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
import math

import pytest
import torch

from attention_course.exercises.ch04.ex3_self_attention import SelfAttention
from attention_course.registry import all_exercises

from exercise_helpers import BLAMING, assert_mistake, failed_checks


# ------------------------------------------------------------- ch04_ex3

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


def test_ch04_ex3_scaled_by_sqrt_d_in_is_named():
    assert_mistake("ch04_ex3", _ScaledByInputWidth, "scaled by sqrt(d_in)",
                    must_not=("batch", "bias", "layers with the contract"))


def test_ch04_ex3_keys_times_queries_is_named():
    assert_mistake("ch04_ex3", _KeysQueries, "keys times queries",
                    must_not=("batch axis", "bias", "layers with the contract"))


def test_ch04_ex3_check_hints_blame_neither_batch_nor_layers():
    # A wrong answer that matches no kept mistake (scaled by sqrt(d_in) and by 2).
    class Other(SelfAttention):
        def forward(self, x):
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            return torch.softmax(q @ k.transpose(-2, -1) / (2 * x.shape[-1] ** 0.5), dim=-1) @ v
    failures = failed_checks("ch04_ex3", Other)
    assert failures and all(r.mistake is None for r in failures)
    for r in failures:
        assert "left alone" not in r.hint and "compare your layers" not in r.hint, r.hint


# ------------------------------------------------------------- ch04_ex5

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


def test_ch04_ex5_positions_from_one_is_named():
    assert_mistake("ch04_ex5", _pe_positions_from_one, "positions counted from 1",
                    must_not=("same frequency",))


def test_ch04_ex5_float64_is_named():
    assert_mistake("ch04_ex5", _pe_kept_float64, "float64 table", must_not=("same frequency",))


# ------------------------------------------------------------- ch04_ex6

def _lsd_query_key_crossed(W_query, W_key, W_value):
    return {"W_query.weight": W_key.t().contiguous(), "W_key.weight": W_query.t().contiguous(),
            "W_value.weight": W_value.t().contiguous()}


def test_ch04_ex6_query_key_swapped_is_named():
    assert_mistake("ch04_ex6", _lsd_query_key_crossed, "query and key swapped",
                    must_not=("stores and applies", "dtype", "shape follows"))


def test_ch04_ex6_wrong_key_names_get_a_neutral_hint():
    def short_names(W_query, W_key, W_value):
        return {f"{n}.weight": W.T for n, W in zip(("query", "key", "value"), (W_query, W_key, W_value))}
    failures = failed_checks("ch04_ex6", short_names)
    assert len(failures) == 2
    for r in failures:
        assert r.mistake is None
        assert "stores and applies" not in r.hint and "keep the matrices' dtype" not in r.hint, r.hint


# ------------------------------------------------------------- every check hint of the chapter

@pytest.mark.parametrize("exercise", all_exercises(4), ids=lambda e: e.label)
def test_ch04_check_hints_describe_rather_than_blame(exercise):
    for check in exercise.checks:
        for words in BLAMING:
            assert words not in check.hint.lower(), (exercise.label, check.name, words)
