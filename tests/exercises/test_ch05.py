"""Regression tests of chapter 5's exercises (causal attention), filed by exercise.

Where a newly found mistake's regression test goes: into this file, in the section of its
exercise, named ``test_ch05_exM_<what it shows>``; a test about several of the chapter's
exercises is parametrized so that every id carries its exercise's label
(``tests/exercises/conftest.py`` refuses a test here without one). Write each wrong answer
by hand, the way a student would (never import the kept mistake it should match, nor a
solver's files); the shared helpers are in ``tests/exercise_helpers.py``.

From issue 10, the findings of solver "a": answers that the checks used to accept although
they break the contract now fail a check (or the clause is gone from the statement);
answers that used to get a hint blaming another mistake now get their own kept mistake's
hint, or the check's neutral hint; the independence property of dropout
(``dropout_checks``, ``independent_along``) never fails the reference or a kept alternative
over 40 seeds, and always fails dropout that shares one draw along rows, columns or the
batch.
"""
import dataclasses
import math

import pytest
import torch
from torch import nn

from attention_course.checks.checking import compare_all, outcomes_for, run_checks
from attention_course.checks.registry import get_exercise

from exercise_helpers import SEEDS, all_failures, assert_mistake, check_named, failed_checks, mistake_hint, statement


# ======================================== ch05_ex1

# ---- ch05_ex1: integer types (clause reworded, not checked)

def causal_mask_no_type_check(num_tokens):
    if num_tokens < 1:
        raise ValueError(f"num_tokens must be positive, got {num_tokens}")
    return torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1)


def test_ch05_ex1_integer_clause_reworded():
    ex1 = statement("ch05_ex1")
    assert "not a positive integer" not in ex1 and "less than 1" in ex1
    assert not all_failures("ch05_ex1", causal_mask_no_type_check)


# ======================================== ch05_ex2

# ---- ch05_ex2: drops that are not independent, and a float32 result

def _check_p(p):
    if not 0 <= p < 1:
        raise ValueError(f"p={p} is not in [0, 1)")


def dropout_per_row(weights, p, training=True):
    _check_p(p)
    if not training:
        return weights
    keep = torch.rand(weights.shape[:-1] + (1,)) >= p
    return weights * keep / (1 - p)


def dropout_per_batch(weights, p, training=True):
    _check_p(p)
    if not training:
        return weights
    keep = torch.rand(weights.shape[-2:]) >= p
    return weights * keep / (1 - p)


def dropout_per_column(weights, p, training=True):
    _check_p(p)
    if not training:
        return weights
    keep = torch.rand(weights.shape[:-2] + (1, weights.shape[-1])) >= p
    return weights * keep / (1 - p)


def dropout_always_float32(weights, p, training=True):
    _check_p(p)
    w = weights.float()
    if not training:
        return w
    return w * (torch.rand_like(w) >= p) / (1 - p)


@pytest.mark.parametrize("answer,mistake", [(dropout_per_row, "one draw per query row"),
                                            (dropout_per_batch, "one mask shared by the batch"),
                                            (dropout_per_column, "one draw per key column")])
def test_ch05_ex2_shared_drops_fail_with_their_hint(answer, mistake):
    failures = failed_checks("ch05_ex2", answer)
    assert [r.check for r in failures] == [check_named("ch05_ex2", "uniform weights").name]
    assert failures[0].mistake == mistake and failures[0].hint == mistake_hint("ch05_ex2", mistake)
    assert "identical" in failures[0].reason
    for seed in SEEDS:
        assert [r for r in run_checks("ch05_ex2", answer, hidden=True, seed=seed, first_failure=True) if not r.passed]


def test_ch05_ex2_float32_result_fails():
    assert_mistake("ch05_ex2", dropout_always_float32, "float32 output for float64 weights")
    for seed in SEEDS:
        assert [r for r in run_checks("ch05_ex2", dropout_always_float32, hidden=True, seed=seed, first_failure=True) if not r.passed]


# ======================================== ch05_ex3

# ---- ch05_ex3: one (T, T) mask for the batch; a late length check (clause reworded)

class _Attention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.drop = nn.Dropout(dropout)
        self.register_buffer("mask", torch.ones(context_length, context_length).triu(1).bool(),
                             persistent=False)


class AttentionBatchSharedDrop(_Attention):
    def forward(self, x):
        T = x.shape[1]
        if T > self.mask.shape[0]:
            raise ValueError(f"num_tokens={T} > context_length={self.mask.shape[0]}")
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        a = (q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])).masked_fill(self.mask[:T, :T], -math.inf)
        a = a.softmax(-1)
        if self.training:
            a = a * self.drop(torch.ones(T, T))
        return a @ v


class AttentionLateCheck(_Attention):
    def forward(self, x):
        T = x.shape[1]
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        s = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
        if T > self.mask.shape[0]:
            raise ValueError(f"num_tokens={T} > context_length={self.mask.shape[0]}")
        return self.drop(s.masked_fill(self.mask[:T, :T], -math.inf).softmax(-1)) @ v


def test_ch05_ex3_batch_shared_mask_fails_with_its_hint():
    assert_mistake("ch05_ex3", AttentionBatchSharedDrop, "one dropout mask shared by the batch")
    for seed in SEEDS:
        assert [r for r in run_checks("ch05_ex3", AttentionBatchSharedDrop, hidden=True, seed=seed, first_failure=True)
                if not r.passed]


def test_ch05_ex3_before_computing_anything_removed():
    text = statement("ch05_ex3")
    assert "before computing anything" not in text
    assert not all_failures("ch05_ex3", AttentionLateCheck)


# ---- ch05_ex3: wrong values that leak nothing; qkv_bias ignored; a persistent mask

class AttentionScaledByD(_Attention):
    def forward(self, x):
        T = x.shape[1]
        if T > self.mask.shape[0]:
            raise ValueError(f"num_tokens={T} > context_length={self.mask.shape[0]}")
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        s = (q @ k.transpose(1, 2) / q.shape[-1]).masked_fill(self.mask[:T, :T], -math.inf)
        return self.drop(s.softmax(-1)) @ v


class AttentionNoBias(_Attention):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, qkv_bias=False)

    def forward(self, x):                        # correct, apart from the missing biases
        T = x.shape[1]
        if T > self.mask.shape[0]:
            raise ValueError(f"num_tokens={T} > context_length={self.mask.shape[0]}")
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        s = (q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])).masked_fill(self.mask[:T, :T], -math.inf)
        return self.drop(s.softmax(-1)) @ v


# Named as the contract names the class: load_state_dict's error messages quote the class name.
for _cls in (AttentionBatchSharedDrop, AttentionNoBias):
    _cls.__name__ = _cls.__qualname__ = "CausalAttention"


class AttentionPersistentMask(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(1))

    def forward(self, x):
        T = x.shape[1]
        if T > self.mask.shape[0]:
            raise ValueError(f"num_tokens={T} > context_length={self.mask.shape[0]}")
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        s = (q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])).masked_fill(self.mask[:T, :T], -math.inf)
        return self.dropout(s.softmax(-1)) @ v


def test_ch05_ex3_future_check_hint_is_neutral():
    future = check_named("ch05_ex3", "changing only later tokens")
    failures = {r.check: r for r in failed_checks("ch05_ex3", AttentionScaledByD)}
    assert future.name in failures
    r = failures[future.name]
    assert r.mistake is None and r.hint == future.hint and "leak" not in r.reason
    assert "may depend only" not in future.hint


def test_ch05_ex3_ignored_bias_gets_its_hint():
    assert_mistake("ch05_ex3", AttentionNoBias, "qkv_bias ignored")


def test_ch05_ex3_persistent_mask_keeps_the_length_check_points():
    results = {r.check: r for r in run_checks("ch05_ex3", AttentionPersistentMask)}
    assert results[check_named("ch05_ex3", "num_tokens > context_length").name].passed


# ======================================== ch05_ex4

# ---- ch05_ex4: integer types (clause reworded, not checked)

def offset_mask_no_type_check(num_queries, num_keys):
    if not 1 <= num_queries <= num_keys:
        raise ValueError(f"num_queries={num_queries}, num_keys={num_keys}")
    return torch.ones(num_queries, num_keys, dtype=torch.bool).triu(num_keys - num_queries + 1)


def test_ch05_ex4_integer_clause_reworded():
    ex4 = statement("ch05_ex4")
    assert "(both integers)" not in ex4 and "Python ints" in ex4
    assert not all_failures("ch05_ex4", offset_mask_no_type_check)


# ======================================== ch05_ex2 and ch05_ex3: the independence property of dropout

def _shift(calls, k):
    return [dataclasses.replace(c, call_seed=None if c.call_seed is None else c.call_seed + 7919 * k)
            for c in calls]


def _judge(exercise, check, calls, impl, want):
    got = outcomes_for(impl, calls, exercise.kind)
    return compare_all(got, want, check, calls)


@pytest.mark.parametrize("label,check_start", [("ch05_ex2", "uniform weights"),
                                               ("ch05_ex3", "training mode, a batch of two")])
def test_ch05_independence_never_fails_correct_dropout_over_40_seeds(label, check_start):
    exercise = get_exercise(label)
    check = check_named(label, check_start)
    correct = [exercise.reference] + [a.impl for a in exercise.alternatives]
    shared = {"ch05_ex2": [dropout_per_row, dropout_per_batch, dropout_per_column],
              "ch05_ex3": [AttentionBatchSharedDrop]}[label]
    for k in range(40):
        calls = _shift(check.make_calls(k), k)
        want = outcomes_for(exercise.reference, _shift(calls, 1000), exercise.kind)  # another stream
        for impl in correct:
            assert _judge(exercise, check, calls, impl, want) is None, (k, impl)
        for impl in shared:
            reason = _judge(exercise, check, calls, impl, want)
            assert reason is not None and "identical" in reason, (k, impl, reason)


# ======================================== ch05_ex5

# ---- ch05_ex5: the level of the kept weights read from the mean of the outputs (issue 40, item 3)

def diagnose_by_the_mean(draws, p, tolerance=None):
    """The mean of inverted dropout is 1, of a layer that does not rescale 1 - p, of one that
    scales by 1 - p (1 - p)^2: a label from the nearest of them, within p / 5."""
    tolerance = p / 5 if tolerance is None else tolerance
    if not (draws.abs() <= 1e-4).any():
        return "switched off"
    if torch.equal(draws, draws[:1].expand_as(draws)):
        return "mask reused"
    level = draws.mean().item()
    for label, expected in (("correct", 1.0), ("not rescaled", 1.0 - p)):
        if abs(level - expected) <= tolerance:
            return label
    return "scaled by 1-p"


def _low_p_check():
    exercise = get_exercise("ch05_ex5")
    index, check = next((i, c) for i, c in enumerate(exercise.checks) if c.name.startswith("right and wrong rescaling at p = 0.1"))
    return exercise, index, check


def test_ch05_ex5_mean_threshold_is_named():
    assert_mistake("ch05_ex5", diagnose_by_the_mean, "level read from the mean")
    failures = failed_checks("ch05_ex5", diagnose_by_the_mean)
    assert [r.check for r in failures] == [_low_p_check()[2].name]
    for seed in SEEDS:
        assert failed_checks("ch05_ex5", diagnose_by_the_mean, hidden_seed=seed, first_failure=True), seed


@pytest.mark.parametrize("tolerance", [None, 0.015, 0.01])
def test_ch05_ex5_mean_threshold_fails_at_30_grading_seeds_and_no_correct_answer_does(tolerance):
    """At p = 0.1 with 20 draws of 20 weights the mean strays by about 0.017 (its standard error for
    inverted dropout), a third of the distance between the levels 1 and 1 - p: a tolerance of p / 5
    or less around each level mislabels some of the check's 48 layers at every seed, while every
    answer that reads the kept values is right on every layer."""
    from attention_course.checks.plan import hidden_seed
    exercise, index, check = _low_p_check()
    correct = [exercise.reference] + [a.impl for a in exercise.alternatives]
    heuristic = lambda draws, p: diagnose_by_the_mean(draws, p, tolerance)  # noqa: E731
    for seed in range(30):
        calls = check.make_calls(hidden_seed(seed, index))
        want = outcomes_for(exercise.reference, calls, exercise.kind)
        assert [o["value"] for o in want].count("correct") == len(calls) // 3
        for impl in correct:
            assert compare_all(outcomes_for(impl, calls, exercise.kind), want, check, calls) is None, (seed, impl)
        assert compare_all(outcomes_for(heuristic, calls, exercise.kind), want, check, calls) is not None, seed


# ======================================== ch05_ex6

# ---- ch05_ex6: hand-computed cases; a float path count that overflows gets its own hint

def test_ch05_ex6_reference_on_hand_computed_cases():
    from attention_course.exercises.ch05.ex6_stacked_influence import stacked_influence
    previous = torch.tensor([[False, False, False, False],
                             [True, False, False, False],
                             [False, True, False, False],
                             [False, False, True, False]])
    # Without residual, two layers of "previous token only" shift by exactly two: j = i - 2.
    shift_two = torch.tensor([[0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0]], dtype=torch.bool)
    assert torch.equal(stacked_influence(previous, 2, residual=False), shift_two)
    # With residual, two layers reach i, i - 1 and i - 2 (written out by hand).
    band = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(stacked_influence(previous, 2), band)
    assert torch.equal(stacked_influence(previous, 0), torch.eye(4, dtype=torch.bool))


def test_ch05_ex6_float_matrix_power_is_named():
    def float_power(allowed, num_layers, residual=True):
        if allowed.dim() != 2 or allowed.shape[0] != allowed.shape[1]:
            raise ValueError(f"allowed has shape {tuple(allowed.shape)}")
        step = allowed.float()
        keeps_own = (step.sum(dim=1) >= 2) | residual
        step = torch.clamp(step + torch.diag(keeps_own.float()), max=1.0)
        return torch.linalg.matrix_power(step, num_layers) > 0

    assert_mistake("ch05_ex6", float_power, "path counts overflow")


def test_ch05_ex6_query_path_by_hand():
    """Without residual, a query with two allowed keys or more depends on its own token (its query
    moves the weights); with one allowed key it does not (the weight is 1 whatever the query)."""
    from attention_course.exercises.ch05.ex6_stacked_influence import stacked_influence
    two_before = torch.tensor([[0, 0, 0, 0],
                               [1, 0, 0, 0],
                               [1, 1, 0, 0],
                               [0, 1, 1, 0]], dtype=torch.bool)
    one_layer = torch.tensor([[0, 0, 0, 0],     # no key: output zero
                              [1, 0, 0, 0],     # one key: its value, weight 1
                              [1, 1, 1, 0],     # two keys: their values and its own query
                              [0, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(stacked_influence(two_before, 1, residual=False), one_layer)
    # Two layers: row 3 reaches through rows 1, 2 and itself, that is tokens 0 to 3.
    two_layers = torch.tensor([[0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(stacked_influence(two_before, 2, residual=False), two_layers)


@pytest.mark.parametrize("residual", [True, False])
def test_ch05_ex6_reference_and_alternatives_match_a_real_stack_over_30_masks(residual):
    """The structural answer is what the derivatives of a real stack of float64 attention layers
    show, on random masks of every density (the contract bug an independent solver found: the
    query path without residual). Without residual the rule is an upper bound (a row with no key
    outputs exact zeros; two rows copying one key output equal vectors), so there the real stack
    may depend on fewer tokens, never on more."""
    from attention_course.exercises.ch05 import ex6_stacked_influence as module
    exercise = get_exercise("ch05_ex6")
    correct = [exercise.reference] + [a.impl for a in exercise.alternatives]
    g = torch.Generator().manual_seed(5 + residual)
    for k in range(30):
        n = int(torch.randint(2, 9, (1,), generator=g))
        allowed = torch.rand(n, n, generator=g) < (0.1 + 0.8 * k / 30)
        layers = int(torch.randint(1, 4, (1,), generator=g))
        moved = module._moved_in_a_stack(allowed, layers, residual)
        for impl in correct:
            reach = impl(allowed, layers, residual=residual)
            if residual:   # exact: every intermediate row carries its own token, nothing degenerates
                assert torch.equal(reach, moved), (k, impl, allowed, layers)
            else:          # an upper bound: exact zeros and equal rows can lose a dependence
                assert not (moved & ~reach).any(), (k, impl, allowed, layers)


def test_ch05_ex6_without_residual_the_rule_is_an_upper_bound():
    """Rows 0 and 1 both copy token 0 (one allowed key each), so after one layer they hold equal
    vectors; in layer 2 row 2's two keys tie whatever its query, and its output is token 0's
    alone. The chain rule says tokens 0, 1 and 2: the contract calls it an upper bound."""
    from attention_course.exercises.ch05 import ex6_stacked_influence as module
    allowed = torch.tensor([[1, 0, 0], [1, 0, 0], [1, 1, 0]], dtype=torch.bool)
    reach = module.stacked_influence(allowed, 2, residual=False)
    moved = module._moved_in_a_stack(allowed, 2, residual=False)
    assert reach[2].tolist() == [True, True, True]
    assert moved[2].tolist() == [True, False, False]
    assert torch.equal(module.stacked_influence(allowed, 2), module._moved_in_a_stack(allowed, 2, True))


def test_ch05_ex6_stopping_after_n_layers_is_caught_on_a_cycle():
    """The independent solver's answers that stopped after min(L, n) or min(L, n - 1) layers passed
    every check (the deep checks were causal, where the reach settles); a cycle without residual
    never settles."""
    from attention_course.exercises.ch05.ex6_stacked_influence import stacked_influence

    def stops_after_n(allowed, num_layers, residual=True):
        return stacked_influence(allowed, min(num_layers, allowed.shape[0]), residual)

    def stops_after_n_minus_1(allowed, num_layers, residual=True):
        return stacked_influence(allowed, min(num_layers, allowed.shape[0] - 1), residual)

    assert_mistake("ch05_ex6", stops_after_n, "stopped after n layers", must_not=("float",))
    assert any(r.check.startswith("a cycle") for r in failed_checks("ch05_ex6", stops_after_n_minus_1))
    cycle = torch.roll(torch.eye(5, dtype=torch.bool), shifts=-1, dims=1)
    assert torch.equal(stacked_influence(cycle, 7, residual=False), torch.roll(torch.eye(5, dtype=torch.bool), -2, 1))


def test_ch05_ex6_chains_of_at_most_num_layers_steps_get_the_own_token_hint():
    """Counting chains of at most L steps is the same as letting every token stay in place in every
    layer ((A or I)^L), so the solver's "union of up to L steps" gets that kept mistake's hint,
    which names both readings."""
    from attention_course.exercises.ch05.ex6_stacked_influence import stacked_influence

    def at_most(allowed, num_layers, residual=True):
        reach = torch.eye(allowed.shape[0], dtype=torch.bool)
        total = reach.clone()
        for _ in range(num_layers):
            reach = (stacked_influence(allowed, 1, residual).long() @ reach.long()) > 0
            total |= reach
        return total

    assert_mistake("ch05_ex6", at_most, "own token always kept")
    assert "at most num_layers steps" in mistake_hint("ch05_ex6", "own token always kept")


def test_ch05_ex6_graded_cases_keep_what_their_hints_name():
    """At grading, the public checks run at other seeds (issue 38, item 4): the hand-made cases are
    relabelled or resized, but what a check's hint names stays true. Queries 2 and 5 have no key;
    a cycle goes round past its length; the first token of "previous token only" sees nothing."""
    from attention_course.checks.plan import hidden_seed
    exercise = get_exercise("ch05_ex6")
    index = {name: i for i, c in enumerate(exercise.checks) for name in ("two queries", "a cycle", "previous")
             if c.name.startswith(name)}
    for seed in (11, 2026, 7, 1):
        empty = exercise.checks[index["two queries"]].make_calls(hidden_seed(seed, index["two queries"]))
        for call in empty:
            has_key = call.args[0].any(dim=1).tolist()
            assert [i for i, k in enumerate(has_key) if not k] == [2, 5], (seed, call.args[0])
        cycle = exercise.checks[index["a cycle"]].make_calls(hidden_seed(seed, index["a cycle"]))
        five = [c.args[1] for c in cycle if c.args[0].shape == (5, 5)]
        assert all(torch.equal(c.args[0], torch.roll(torch.eye(5, dtype=torch.bool), -1, 1)) for c in cycle[:3])
        assert any(layers > 5 and layers % 5 for layers in five), five
        assert cycle[3].args[0].sum() == 7 and cycle[3].args[0].shape == (6, 6)
        previous = exercise.checks[index["previous"]].make_calls(hidden_seed(seed, index["previous"]))
        mask = previous[0].args[0]
        assert not mask[0].any() and all(mask[i].nonzero().flatten().tolist() == [i - 1] for i in range(1, len(mask)))


# ======================================== ch05_ex7

def _decode_by_hand(layer, x_new, cache):
    # Written from the statement: project the new token, grow the cache, attend over all of it.
    k = torch.cat([cache[0], layer.W_key(x_new)], dim=1)
    v = torch.cat([cache[1], layer.W_value(x_new)], dim=1)
    w = torch.softmax(layer.W_query(x_new) @ k.transpose(1, 2) / math.sqrt(k.shape[-1]), dim=-1)
    return w @ v, (k, v)


def test_ch05_ex7_steps_chained_on_their_own_caches_reproduce_the_full_causal_pass():
    """The statement's promise, checked without the reference: a hand-written step fed a random
    sequence token by token, each step given the cache the step before returned, gives layer(x)
    row by row (layer in eval mode with dropout 0.5), and the same answer passes every check."""
    from attention_course import multihead as mh
    from exercise_helpers import passes_everywhere
    for seed, (batch, n, d_in, d_out, bias) in enumerate([(2, 6, 4, 3, False), (3, 9, 5, 7, True), (1, 1, 2, 2, True)]):
        torch.manual_seed(seed)
        layer = mh.CausalAttention(d_in, d_out, n, 0.5, qkv_bias=bias).eval()
        x = torch.randn(batch, n, d_in)
        cache = (torch.zeros(batch, 0, d_out), torch.zeros(batch, 0, d_out))
        rows = []
        with torch.no_grad():
            for t in range(n):
                context, cache = _decode_by_hand(layer, x[:, t:t + 1], cache)
                assert cache[0].shape == cache[1].shape == (batch, t + 1, d_out)
                rows.append(context)
            full = layer(x)
        assert torch.allclose(torch.cat(rows, dim=1), full, atol=1e-6)
        assert torch.allclose(cache[0], layer.W_key(x), atol=1e-6)
    passes_everywhere("ch05_ex7", _decode_by_hand)


def _step_variant(kind):
    def decode_step(layer, x_new, cache):
        keys, values = cache
        k1, v1 = layer.W_key(x_new), layer.W_value(x_new)
        keys2 = torch.cat([k1, keys] if kind == "front" else [keys, k1], dim=1)
        values2 = torch.cat([v1, values] if kind == "front" else [values, v1], dim=1)
        seen_k, seen_v = (keys, values) if kind == "past only" else (keys2, values2)
        if kind == "twice":
            seen_k, seen_v = torch.cat([keys2, k1], dim=1), torch.cat([values2, v1], dim=1)
        d = x_new.shape[-1] if kind == "d_in" else seen_k.shape[-1]
        s = layer.W_query(x_new) @ seen_k.transpose(1, 2) / d ** 0.5
        if kind == "row 0":
            s = s.masked_fill(layer.mask[0, :s.shape[-1]], float("-inf"))
        out = torch.softmax(s, dim=-1) @ seen_v
        return out, ((keys, values) if kind == "not grown" else (keys2, values2))
    return decode_step


@pytest.mark.parametrize("kind,mistake", [
    ("not grown", "cache not grown"),
    ("past only", "new token's own key and value left out"),
    ("twice", "new token attended twice"),
    ("d_in", "scaled by the square root of d_in"),
    ("row 0", "top-left row of the layer's mask"),
    ("front", "new key and value put first in the cache"),
])
def test_ch05_ex7_each_mistake_written_by_hand_gets_its_own_hint(kind, mistake):
    assert_mistake("ch05_ex7", _step_variant(kind), mistake)
    for seed in (11, 2026):
        assert failed_checks("ch05_ex7", _step_variant(kind), seed), (kind, seed)


def test_ch05_ex7_the_layer_on_the_new_token_alone_fails():
    """Calling the whole layer on the new token (it then sees only itself) ignores the cache: the
    sequence check and the given-cache check fail it, with the check's neutral hint."""
    def alone(layer, x_new, cache):
        return layer(x_new), (torch.cat([cache[0], layer.W_key(x_new)], 1), torch.cat([cache[1], layer.W_value(x_new)], 1))
    lines = [r.line() for r in failed_checks("ch05_ex7", alone)]
    assert any("5 tokens" in line for line in lines) and any("not made by the layer" in line for line in lines), lines


def test_ch05_ex7_dropout_applied_although_the_layer_is_in_eval_mode_fails():
    """The layer comes in eval mode with dropout 0.5: functional dropout with its default
    training=True drops weights anyway, and the checks see it."""
    def dropped(layer, x_new, cache):
        context, grown = _decode_by_hand(layer, x_new, cache)
        k, v = grown
        w = torch.softmax(layer.W_query(x_new) @ k.transpose(1, 2) / math.sqrt(k.shape[-1]), dim=-1)
        return torch.nn.functional.dropout(w, layer.dropout.p) @ v, grown
    assert failed_checks("ch05_ex7", dropped)


def test_ch05_ex7_a_list_for_the_cache_fails_the_stated_tuple():
    def as_list(layer, x_new, cache):
        context, (k, v) = _decode_by_hand(layer, x_new, cache)
        return context, [k, v]
    assert len(failed_checks("ch05_ex7", as_list)) == 3


def test_ch05_ex7_every_drawn_case_keeps_d_in_and_d_out_apart():
    """Where d_in == d_out the scale's size could not tell the two apart: no case draws them equal,
    and the given cache is never the layer's projection of anything (it has its own size t)."""
    from attention_course.checks.plan import hidden_seed
    exercise = get_exercise("ch05_ex7")
    for index, check in enumerate(exercise.checks):
        for seed in (check.seed, hidden_seed(11, index), hidden_seed(2026, index), hidden_seed(7, index)):
            for call in check.make_calls(seed):
                layer, x_new, (keys, values) = call.args
                d_in, d_out = layer["init_args"][:2]
                assert d_in != d_out and x_new.shape[1:] == (1, d_in), (check.name, seed)
                assert keys.shape == values.shape and keys.shape[-1] == d_out
                assert keys.shape[1] < layer["init_args"][2]       # position t fits the layer's context
