"""Issue 10, "hints that blame the wrong mistake", for chapters 3, 4 and 9.

Each wrong answer below was written by hand the way a student would (it does not
import the kept mistake it should match). The hints printed for it must name what it
did, never another mistake; and an answer that matches no kept mistake gets the
check's own hint, which describes what the check compares without blaming a cause.
"""
import math

import pytest
import torch

from attention_course import functional as F_att
from attention_course.checking import run_checks
from attention_course.exercises.ch04 import ex3_self_attention as ch04
from attention_course.registry import all_exercises, get_exercise


def _public_failures(label, obj):
    return [r for r in run_checks(label, obj) if not r.passed]


def _assert_mistake(label, obj, mistake_name, must_not=()):
    failures = _public_failures(label, obj)
    assert failures, f"the wrong answer passes every public check of {label}"
    hint = get_exercise(label).mistakes
    expected = next(m.hint for m in hint if m.name == mistake_name)
    for r in failures:
        assert r.mistake == mistake_name and r.hint == expected, (r.check, r.mistake, r.hint)
        for words in must_not:
            assert words not in r.hint, (r.check, words, r.hint)


# ------------------------------------------------------------- ch03_ex2: swapped pair

def _sdpa_weights_first(queries, keys, values, valid_lens=None):
    d = queries.shape[-1]
    scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
    weights = F_att.masked_softmax(scores, valid_lens)
    return weights, torch.bmm(weights, values)


def test_ch03_ex2_swapped_pair_is_named():
    _assert_mistake("ch03_ex2", _sdpa_weights_first, "output and weights swapped",
                    must_not=("mask", "valid_lens reaches", "scal"))


def test_ch03_ex2_swapped_and_unscaled_gets_neutral_hints():
    def swapped_unscaled(queries, keys, values, valid_lens=None):
        weights = F_att.masked_softmax(queries @ keys.transpose(1, 2), valid_lens)
        return weights, weights @ values
    failures = _public_failures("ch03_ex2", swapped_unscaled)
    assert len(failures) == 3
    for r in failures:
        assert r.mistake is None
        assert "look at how" not in r.hint and "the masking treats" not in r.hint, r.hint


# ------------------------------------------------------------- ch04_ex3

class _ScaledByInputWidth(ch04.SelfAttention):
    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        d_in = self.W_query.in_features
        return torch.softmax(q @ k.transpose(-2, -1) / d_in ** 0.5, dim=-1) @ v


class _KeysQueries(ch04.SelfAttention):
    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = torch.matmul(k, q.transpose(-2, -1)) / math.sqrt(k.shape[-1])
        return torch.softmax(scores, dim=-1) @ v


def test_ch04_ex3_scaled_by_sqrt_d_in_is_named():
    _assert_mistake("ch04_ex3", _ScaledByInputWidth, "scaled by sqrt(d_in)",
                    must_not=("batch", "bias", "layers with the contract"))


def test_ch04_ex3_keys_times_queries_is_named():
    _assert_mistake("ch04_ex3", _KeysQueries, "keys times queries",
                    must_not=("batch axis", "bias", "layers with the contract"))


def test_ch04_ex3_check_hints_blame_neither_batch_nor_layers():
    # A wrong answer that matches no kept mistake (scaled by sqrt(d_in) and by 2).
    class Other(ch04.SelfAttention):
        def forward(self, x):
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            return torch.softmax(q @ k.transpose(-2, -1) / (2 * x.shape[-1] ** 0.5), dim=-1) @ v
    failures = _public_failures("ch04_ex3", Other)
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
    _assert_mistake("ch04_ex5", _pe_positions_from_one, "positions counted from 1",
                    must_not=("same frequency",))


def test_ch04_ex5_float64_is_named():
    _assert_mistake("ch04_ex5", _pe_kept_float64, "float64 table", must_not=("same frequency",))


# ------------------------------------------------------------- ch04_ex6

def _lsd_query_key_crossed(W_query, W_key, W_value):
    return {"W_query.weight": W_key.t().contiguous(), "W_key.weight": W_query.t().contiguous(),
            "W_value.weight": W_value.t().contiguous()}


def test_ch04_ex6_query_key_swapped_is_named():
    _assert_mistake("ch04_ex6", _lsd_query_key_crossed, "query and key swapped",
                    must_not=("stores and applies", "dtype", "shape follows"))


def test_ch04_ex6_wrong_key_names_get_a_neutral_hint():
    def short_names(W_query, W_key, W_value):
        return {f"{n}.weight": W.T for n, W in zip(("query", "key", "value"), (W_query, W_key, W_value))}
    failures = _public_failures("ch04_ex6", short_names)
    assert len(failures) == 2
    for r in failures:
        assert r.mistake is None
        assert "stores and applies" not in r.hint and "keep the matrices' dtype" not in r.hint, r.hint


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
    _assert_mistake("ch09_ex4", _step_heads_round_robin, "heads interleaved",
                    must_not=("sits at position", "old tokens first", "mask"))


# ------------------------------------------------------------- every check hint of these chapters

BLAMING = ("look at", "you forgot", "you divided", "do not ", "avoid ", "never with", "move the maximum",
           "start your sum", "compare your layers", "left alone")


@pytest.mark.parametrize("exercise", [e for ch in (3, 4, 9) for e in all_exercises(ch)], ids=lambda e: e.label)
def test_check_hints_describe_rather_than_blame(exercise):
    for check in exercise.checks:
        for words in BLAMING:
            assert words not in check.hint.lower(), (exercise.label, check.name, words)
