"""Issue 10, the findings of solver "a" on chapters 2 and 5.

Every wrong answer below is written here by hand, the way a student would (nothing is
imported from the solver's scratch files, and none of them calls the kept mistake it
should match). Three kinds of test:

* answers that the checks used to accept although they break the contract now fail a
  check (or, where the contract clause was not worth checking, the clause is gone from
  the exercise statement and the answer is correct under the new wording);
* answers that used to get a hint blaming another mistake now get their own kept
  mistake's hint, or the check's neutral hint;
* the new independence property of dropout (``dropout_checks``, ``independent_along``)
  never fails the reference or a kept alternative over 40 seeds, and always fails
  dropout that shares one draw along rows, columns or the batch.
"""
import dataclasses
import math

import nbformat
import pytest
import torch
from torch import nn

from attention_course.checking import compare_all, outcomes_for, run_checks
from attention_course.data import make_regression_1d
from attention_course.registry import get_exercise

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEEDS = (11, 2026, 7)


def _all_failures(label, obj):
    """Failures of the public checks and of the hidden checks at seeds 11, 2026, 7."""
    runs = [run_checks(label, obj)] + [run_checks(label, obj, hidden=True, seed=s) for s in SEEDS]
    return [r for results in runs for r in results if not r.passed]


def _public_failures(label, obj):
    return [r for r in run_checks(label, obj) if not r.passed]


def _mistake_hint(label, name):
    return next(m.hint for m in get_exercise(label).mistakes if m.name == name)


def _check(label, name_start):
    return next(c for c in get_exercise(label).checks if c.name.startswith(name_start))


def _statement(notebook, label):
    nb = nbformat.read(ROOT / "solutions" / notebook, 4)
    return next(c.source for c in nb.cells if c.cell_type == "markdown"
                and "{exercise}" in c.source and f":label: {label}" in c.source)


def _assert_own_hint(label, obj, mistake_name):
    failures = _public_failures(label, obj)
    assert failures, f"the wrong answer passes every public check of {label}"
    hint = _mistake_hint(label, mistake_name)
    for r in failures:
        assert r.mistake == mistake_name and r.hint == hint, (r.check, r.mistake, r.hint)


# =========================================================== answers that were accepted

# ---- ch02_ex1: a tensor width detached

def kernel_detached_width(distances, width):
    w = torch.as_tensor(width).detach().clone()
    if (w <= 0).any():
        raise ValueError("width must be positive")
    return torch.exp(-distances ** 2 / (2 * w ** 2))


def test_ch02_ex1_detached_width_fails():
    failures = _public_failures("ch02_ex1", kernel_detached_width)
    assert [r.check for r in failures] == [_check("ch02_ex1", "gradients reach").name]


# ---- ch02_ex3: n >= 2 not validated

def _loo(keys, values, s):
    logits = -(keys[:, None] - keys[None, :]) ** 2 / (2 * torch.exp(s) ** 2)
    logits = logits.masked_fill(torch.eye(len(keys), dtype=torch.bool), -math.inf)
    return ((logits.softmax(-1) @ values - values) ** 2).mean()


def fit_width_any_length(keys, values, init_width, lr, num_steps):
    if keys.dim() != 1 or values.dim() != 1 or keys.shape != values.shape:
        raise ValueError("keys and values must be 1-D of the same length")
    if init_width <= 0:
        raise ValueError("init_width must be positive")
    s = torch.tensor(math.log(init_width), requires_grad=True)
    losses = []
    for _ in range(num_steps):
        loss = _loo(keys, values, s)
        losses.append(loss.detach())
        (g,) = torch.autograd.grad(loss, s)
        s = (s - lr * g).detach().requires_grad_(True)
    return math.exp(s.item()), torch.stack(losses) if losses else torch.zeros(0)


def test_ch02_ex3_length_one_keys_fail():
    failures = _all_failures("ch02_ex3", fit_width_any_length)
    assert failures and all(r.check.startswith("bad keys") for r in failures), \
        [(r.check, r.reason) for r in failures]


def fit_width_losses_with_grad(keys, values, init_width, lr, num_steps):
    if keys.dim() != 1 or keys.shape != values.shape or len(keys) < 2:
        raise ValueError("keys and values must be 1-D of the same length >= 2")
    if init_width <= 0:
        raise ValueError("init_width must be positive")
    s = torch.tensor(math.log(init_width), requires_grad=True)
    losses = []
    for _ in range(num_steps):
        loss = _loo(keys, values, s)
        losses.append(loss)                      # the graph stays attached
        (g,) = torch.autograd.grad(loss, s, retain_graph=True)
        s = s - lr * g
    return math.exp(s.item()), torch.stack(losses) if losses else torch.zeros(0)


def test_ch02_ex3_no_gradient_clause_removed():
    # The checks cannot see whether a returned tensor carries a graph (outcomes are detached
    # plain data), so the clause "(no gradient attached)" left the contract; the answer is
    # correct under the new wording.
    assert "gradient attached" not in _statement("02_nadaraya_watson.ipynb", "ch02_ex3")
    assert not _all_failures("ch02_ex3", fit_width_losses_with_grad)


# ---- ch02_ex4: candidates, keys and values not validated fully

def _choices_core(keys, values, test_queries, test_targets, candidates):
    h2 = 2 * candidates.reshape(-1, 1, 1) ** 2
    loo = (-(keys[:, None] - keys) ** 2 / h2).masked_fill(torch.eye(len(keys), dtype=torch.bool), -math.inf)
    loo_err = ((loo.softmax(-1) @ values - values) ** 2).mean(-1)
    test = -(test_queries[:, None] - keys) ** 2 / h2
    test_err = ((test.softmax(-1) @ values - test_targets) ** 2).mean(-1)
    c = candidates.reshape(-1)
    return c[loo_err.argmin()].item(), c[test_err.argmin()].item(), loo_err, test_err


def choices_candidates_any_shape(keys, values, test_queries, test_targets, candidates):
    if candidates.numel() == 0 or (candidates <= 0).any():
        raise ValueError("candidates must be non-empty and positive")
    if keys.dim() != 1 or keys.shape != values.shape or len(keys) < 2:
        raise ValueError("keys and values: 1-D, same length >= 2")
    return _choices_core(keys, values, test_queries, test_targets, candidates)


def choices_any_length(keys, values, test_queries, test_targets, candidates):
    if candidates.dim() != 1 or candidates.numel() == 0 or (candidates <= 0).any():
        raise ValueError("candidates must be non-empty and positive")
    if keys.dim() != 1 or keys.shape != values.shape:
        raise ValueError("keys and values: 1-D, same length")
    return _choices_core(keys, values, test_queries, test_targets, candidates)


def choices_keys_any_dim(keys, values, test_queries, test_targets, candidates):
    if candidates.dim() != 1 or candidates.numel() == 0 or (candidates <= 0).any():
        raise ValueError("candidates must be non-empty and positive")
    if keys.shape != values.shape or keys.numel() < 2:
        raise ValueError("keys and values: same shape, >= 2")
    return _choices_core(keys.reshape(-1), values.reshape(-1), test_queries, test_targets, candidates)


@pytest.mark.parametrize("answer", [choices_candidates_any_shape, choices_any_length, choices_keys_any_dim])
def test_ch02_ex4_missing_validation_fails(answer):
    failures = _all_failures("ch02_ex4", answer)
    assert failures and all(r.check.startswith("bad candidates") for r in failures), \
        [(r.check, r.reason) for r in failures]


# ---- ch02_ex5: keys and values neither checked 1-D nor of length >= 2

def local_linear_loose(queries, keys, values, width):
    if width <= 0:
        raise ValueError("width must be positive")
    if keys.shape != values.shape:
        raise ValueError("keys and values differ in shape")
    k, v = keys.reshape(-1).double(), values.reshape(-1).double()
    u = k[None, :] - queries.double()[:, None]
    K = torch.exp(-u ** 2 / (2 * width ** 2))
    s0, s1, s2 = K.sum(1, keepdim=True), (K * u).sum(1, keepdim=True), (K * u * u).sum(1, keepdim=True)
    weights = K * (s2 - u * s1) / (s0 * s2 - s1 ** 2)
    return (weights @ v).float(), weights.float()


def test_ch02_ex5_missing_validation_fails():
    failures = _all_failures("ch02_ex5", local_linear_loose)
    assert failures and all(r.check.startswith("a non-positive width") for r in failures), \
        [(r.check, r.reason) for r in failures]


# ---- ch05_ex1 / ch05_ex4: integer types (clause reworded, not checked)

def causal_mask_no_type_check(num_tokens):
    if num_tokens < 1:
        raise ValueError(f"num_tokens must be positive, got {num_tokens}")
    return torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1)


def offset_mask_no_type_check(num_queries, num_keys):
    if not 1 <= num_queries <= num_keys:
        raise ValueError(f"num_queries={num_queries}, num_keys={num_keys}")
    return torch.ones(num_queries, num_keys, dtype=torch.bool).triu(num_keys - num_queries + 1)


def test_ch05_integer_clauses_reworded():
    ex1 = _statement("05_causal_attention.ipynb", "ch05_ex1")
    ex4 = _statement("05_causal_attention.ipynb", "ch05_ex4")
    assert "not a positive integer" not in ex1 and "less than 1" in ex1
    assert "(both integers)" not in ex4 and "Python ints" in ex4
    assert not _all_failures("ch05_ex1", causal_mask_no_type_check)
    assert not _all_failures("ch05_ex4", offset_mask_no_type_check)


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
    failures = _public_failures("ch05_ex2", answer)
    assert [r.check for r in failures] == [_check("ch05_ex2", "uniform weights").name]
    assert failures[0].mistake == mistake and failures[0].hint == _mistake_hint("ch05_ex2", mistake)
    assert "identical" in failures[0].reason
    for seed in SEEDS:
        assert [r for r in run_checks("ch05_ex2", answer, hidden=True, seed=seed) if not r.passed]


def test_ch05_ex2_float32_result_fails():
    _assert_own_hint("ch05_ex2", dropout_always_float32, "float32 output for float64 weights")
    for seed in SEEDS:
        assert [r for r in run_checks("ch05_ex2", dropout_always_float32, hidden=True, seed=seed) if not r.passed]


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
    _assert_own_hint("ch05_ex3", AttentionBatchSharedDrop, "one dropout mask shared by the batch")
    for seed in SEEDS:
        assert [r for r in run_checks("ch05_ex3", AttentionBatchSharedDrop, hidden=True, seed=seed)
                if not r.passed]


def test_ch05_ex3_before_computing_anything_removed():
    text = _statement("05_causal_attention.ipynb", "ch05_ex3")
    assert "before computing anything" not in text
    assert not _all_failures("ch05_ex3", AttentionLateCheck)


# =========================================================== misleading hints

# ---- ch02_ex2

def _nw(queries, keys, values, width, score):
    if queries.dim() != 2 or keys.dim() != 2 or values.dim() != 2:
        raise ValueError("queries, keys and values must be 2-D")
    if keys.shape != values.shape:
        raise ValueError("keys and values must have the same shape")
    if queries.shape[0] != keys.shape[0]:
        raise ValueError("queries and keys: batch sizes differ")
    if width <= 0:
        raise ValueError("width must be positive")
    diff = queries[:, :, None] - keys[:, None, :]
    weights = torch.softmax(score(diff) / (2 * width ** 2), dim=-1)
    return torch.einsum("bqk,bk->bq", weights, values), weights


def nw_absolute(queries, keys, values, width):
    return _nw(queries, keys, values, width, lambda d: -d.abs())


def nw_swapped(queries, keys, values, width):
    predictions, weights = _nw(queries, keys, values, width, lambda d: -d ** 2)
    return weights, predictions


def test_ch02_ex2_absolute_distance_and_swapped_pair_get_their_hints():
    _assert_own_hint("ch02_ex2", nw_absolute, "absolute distance")
    _assert_own_hint("ch02_ex2", nw_swapped, "(weights, predictions) swapped")


def test_ch02_ex2_check_hints_blame_nothing():
    batch = _check("ch02_ex2", "a batch of 3").hint
    narrow = _check("ch02_ex2", "a narrow width").hint
    assert "independent problems" not in batch and "this check compares" in batch
    assert "the reason above" in narrow


# ---- every ch02 error check now holds invalid calls only

def kernel_without_two(distances, width):
    if (torch.as_tensor(width) <= 0).any():
        raise ValueError("width must be positive")
    return torch.exp(-distances ** 2 / width ** 2)


def local_linear_no_kernel(queries, keys, values, width):
    if queries.dim() != 1:
        raise ValueError("queries must be 1-D")
    if keys.dim() != 1 or keys.shape != values.shape or len(keys) < 2:
        raise ValueError("keys and values must be 1-D of one length >= 2")
    if width <= 0:
        raise ValueError("width must be positive")
    u = keys.double()[None, :] - queries.double()[:, None]
    K = torch.exp(-u ** 2 / (2 * width ** 2))
    s0, s1, s2 = K.sum(1, keepdim=True), (K * u).sum(1, keepdim=True), (K * u * u).sum(1, keepdim=True)
    weights = (s2 - u * s1) / (s0 * s2 - s1 ** 2)           # the factor K_i left out
    return (weights @ values.double()).float(), weights.float()


def test_ch02_value_bugs_keep_the_error_points():
    for label, answer in (("ch02_ex1", kernel_without_two), ("ch02_ex2", nw_absolute),
                          ("ch02_ex5", local_linear_no_kernel)):
        results = run_checks(label, answer)
        errors = [r for r in results if "raise" in r.check]
        assert errors and all(r.passed for r in errors), [(r.check, r.reason) for r in errors]
        assert any(not r.passed for r in results)
    for ex in ("ch02_ex1", "ch02_ex2", "ch02_ex3", "ch02_ex4", "ch02_ex5"):
        exercise = get_exercise(ex)
        for check in exercise.checks:
            outcomes = outcomes_for(exercise.reference, check.make_calls(check.seed), exercise.kind)
            statuses = {o["status"] for o in outcomes}
            assert statuses != {"ok", "raised"}, f"{ex} check {check.name!r} mixes valid and invalid calls"


def test_ch02_ex1_value_bug_gets_its_hint_not_the_error_hint():
    _assert_own_hint("ch02_ex1", kernel_without_two, "forgot the 1/2")


# ---- ch02_ex3: log(width) returned

def fit_width_returns_log(keys, values, init_width, lr, num_steps):
    if len(keys) < 2:
        raise ValueError("keys and values need length >= 2")
    width, losses = fit_width_any_length(keys, values, init_width, lr, num_steps)
    return math.log(width), losses


def test_ch02_ex3_log_width_gets_its_hint():
    _assert_own_hint("ch02_ex3", fit_width_returns_log, "returned log(width)")
    assert "where they part" not in _check("ch02_ex3", "20 steps").hint


# ---- ch02_ex4: /(2h) instead of /(2h^2); a float32 kernel ratio

def choices_width_not_squared(keys, values, test_queries, test_targets, candidates):
    if candidates.dim() != 1 or candidates.numel() == 0 or (candidates <= 0).any():
        raise ValueError("candidates must be non-empty and positive")
    if keys.dim() != 1 or keys.shape != values.shape or len(keys) < 2:
        raise ValueError("keys and values: 1-D, same length >= 2")
    return _choices_wrong_scale(keys, values, test_queries, test_targets, candidates)


def _choices_wrong_scale(keys, values, test_queries, test_targets, candidates):
    loo, test = [], []
    eye = torch.eye(len(keys), dtype=torch.bool)
    for h in candidates:
        s = (-(keys[:, None] - keys) ** 2 / (2 * h)).masked_fill(eye, -math.inf)
        loo.append(((s.softmax(-1) @ values - values) ** 2).mean())
        t = -(test_queries[:, None] - keys) ** 2 / (2 * h)
        test.append(((t.softmax(-1) @ values - test_targets) ** 2).mean())
    loo, test = torch.stack(loo), torch.stack(test)
    return candidates[loo.argmin()].item(), candidates[test.argmin()].item(), loo, test


def choices_kernel_ratio32(keys, values, test_queries, test_targets, candidates):
    if candidates.dim() != 1 or candidates.numel() == 0 or (candidates <= 0).any():
        raise ValueError("candidates must be non-empty and positive")
    if keys.dim() != 1 or keys.shape != values.shape or len(keys) < 2:
        raise ValueError("keys and values: 1-D, same length >= 2")
    loo, test = [], []
    for h in candidates.tolist():
        k = torch.exp(-(keys[:, None] - keys[None, :]) ** 2 / (2 * h * h))
        k.fill_diagonal_(0.0)
        loo.append(((k @ values / k.sum(1) - values) ** 2).mean())
        kt = torch.exp(-(test_queries[:, None] - keys[None, :]) ** 2 / (2 * h * h))
        test.append(((kt @ values / kt.sum(1) - test_targets) ** 2).mean())
    loo, test = torch.stack(loo), torch.stack(test)
    return candidates[loo.argmin()].item(), candidates[test.argmin()].item(), loo, test


def test_ch02_ex4_hints_do_not_blame_the_order():
    failures = _public_failures("ch02_ex4", choices_width_not_squared)
    assert failures
    for r in failures:
        assert r.mistake is None and "no particular order; errors[j]" not in r.hint, (r.check, r.hint)
    _assert_own_hint("ch02_ex4", choices_kernel_ratio32, "float32 kernel over its sum")
    assert "numerically stable" in _statement("02_nadaraya_watson.ipynb", "ch02_ex4")


# ---- ch02_ex5: wrong weights, right predictions on a line

def local_linear_transposed(queries, keys, values, width):
    predictions, weights = local_linear_no_kernel_fixed(queries, keys, values, width)
    return predictions, weights.T


def local_linear_no_kernel_fixed(queries, keys, values, width):
    if queries.dim() != 1:
        raise ValueError("queries must be 1-D")
    if keys.dim() != 1 or keys.shape != values.shape or len(keys) < 2:
        raise ValueError("keys and values must be 1-D of one length >= 2")
    if width <= 0:
        raise ValueError("width must be positive")
    u = keys.double()[None, :] - queries.double()[:, None]
    K = torch.exp(-u ** 2 / (2 * width ** 2))
    s0, s1, s2 = K.sum(1, keepdim=True), (K * u).sum(1, keepdim=True), (K * u * u).sum(1, keepdim=True)
    weights = K * (s2 - u * s1) / (s0 * s2 - s1 ** 2)
    return (weights @ values.double()).float(), weights.float()


def test_ch02_ex5_hints_describe_both_items():
    line = _check("ch02_ex5", "a straight line")
    ends = _check("ch02_ex5", "queries at the ends")
    for r in _public_failures("ch02_ex5", local_linear_transposed):
        assert r.mistake is None and r.hint in (line.hint, ends.hint, _check("ch02_ex5", "12 queries").hint)
    assert "the weights" in line.hint and "reason above" in line.hint
    assert "one side of the query" not in ends.hint
    _assert_own_hint("ch02_ex5", local_linear_no_kernel, "kernel factor K_i left out")
    assert not _all_failures("ch02_ex5", local_linear_no_kernel_fixed)


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
    future = _check("ch05_ex3", "changing only later tokens")
    failures = {r.check: r for r in _public_failures("ch05_ex3", AttentionScaledByD)}
    assert future.name in failures
    r = failures[future.name]
    assert r.mistake is None and r.hint == future.hint and "leak" not in r.reason
    assert "may depend only" not in future.hint


def test_ch05_ex3_ignored_bias_gets_its_hint():
    _assert_own_hint("ch05_ex3", AttentionNoBias, "qkv_bias ignored")


def test_ch05_ex3_persistent_mask_keeps_the_length_check_points():
    results = {r.check: r for r in run_checks("ch05_ex3", AttentionPersistentMask)}
    assert results[_check("ch05_ex3", "num_tokens > context_length").name].passed


# =========================================================== the independence property

def _shift(calls, k):
    return [dataclasses.replace(c, call_seed=None if c.call_seed is None else c.call_seed + 7919 * k)
            for c in calls]


def _judge(exercise, check, calls, impl, want):
    got = outcomes_for(impl, calls, exercise.kind)
    return compare_all(got, want, check, calls)


@pytest.mark.parametrize("label,check_start", [("ch05_ex2", "uniform weights"),
                                               ("ch05_ex3", "training mode, a batch of two")])
def test_independence_never_fails_correct_dropout_over_40_seeds(label, check_start):
    exercise = get_exercise(label)
    check = _check(label, check_start)
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
