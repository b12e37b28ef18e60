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
import re

import pytest
import torch
import torch.nn.functional as F

from attention_course.checks.checking import hidden_seed, judge, outcomes_for
from attention_course.checks.registry import all_exercises, get_exercise

from exercise_helpers import (BLAMING, assert_mistake, check_named, failed_checks, failed_hidden_somewhere,
                              mistake_hint, passes_everywhere, statement)


# ------------------------------------------------------------- ch09_ex1

def _merge_in_float64_without_shift(out_a, lse_a, out_b, lse_b):
    if out_a.shape != out_b.shape:
        raise ValueError(f"out_a {tuple(out_a.shape)} and out_b {tuple(out_b.shape)} differ")
    for name, lse in (("lse_a", lse_a), ("lse_b", lse_b)):
        if lse.shape != out_a.shape[:-1]:
            raise ValueError(f"{name} has shape {tuple(lse.shape)}")
    # float64 reaches exp(709): the student trusts the wider dtype instead of shifting.
    big_a, big_b = lse_a.to(torch.float64).exp(), lse_b.to(torch.float64).exp()
    norm = big_a + big_b
    out = (big_a.unsqueeze(-1) * out_a + big_b.unsqueeze(-1) * out_b) / norm.unsqueeze(-1)
    out = torch.nan_to_num(out, nan=0.0) if bool((norm == 0).any()) else out
    return out.to(out_a.dtype), norm.log().to(lse_a.dtype)


def test_ch09_ex1_unshifted_float64_merge_is_named_by_its_overflow():
    assert_mistake("ch09_ex1", _merge_in_float64_without_shift, "exp of the log-sum-exps in float64")
    assert "709" in mistake_hint("ch09_ex1", "exp of the log-sum-exps in float64")


def test_ch09_ex1_checks_reach_the_contracts_range_in_both_dtypes():
    assert "up to 1,000" in statement("ch09_ex1") and "float64" in statement("ch09_ex1")
    top = {}
    for check in all_exercises(9)[0].checks:
        if not check.public:
            continue
        for call in check.make_calls(check.seed):
            if len(call.args) == 4 and call.args[1].shape == call.args[0].shape[:-1]:
                for lse in (call.args[1], call.args[3]):
                    finite = lse[torch.isfinite(lse)]
                    if finite.numel():
                        top[lse.dtype] = max(top.get(lse.dtype, 0.0), float(finite.max()))
    # Past float64's exp limit (about 709.8) in both dtypes, within the contract's 1,000.
    assert 750 < top[torch.float32] <= 1000 and 750 < top[torch.float64] <= 1000, top


# ------------------------------------------------------------- ch09_ex2

def _stats_with_block_index_last(blocks):
    if not blocks:
        raise ValueError("blocks is empty")
    for block in blocks:
        if block.shape[:-1] != blocks[0].shape[:-1]:
            raise ValueError(f"blocks: a block of shape {tuple(block.shape)} does not fit")
    run_max = torch.full(blocks[0].shape[:-1], -math.inf, dtype=blocks[0].dtype)
    run_sum = torch.zeros_like(run_max)
    history_max, history_sum = [], []
    for block in blocks:
        new_max = torch.maximum(run_max, block.max(dim=-1).values)
        base = new_max.masked_fill(new_max == -math.inf, 0.0)
        run_sum = run_sum * (run_max - base).exp() + (block - base.unsqueeze(-1)).exp().sum(-1)
        run_max = new_max
        history_max.append(run_max)
        history_sum.append(run_sum)
    return torch.stack(history_max, dim=-1), torch.stack(history_sum, dim=-1)


def test_ch09_ex2_history_on_the_wrong_axis_is_named_not_blamed_on_overflow():
    assert_mistake("ch09_ex2", _stats_with_block_index_last, "history stacked on the last axis",
                   must_not=("overflow", "NaN", "inf"))


# ------------------------------------------------------------- ch09_ex3

def _student_tiles(queries, keys, values, block_size, *, last_tile_first=False, guard=True, root_of=None,
                   normalise=True, strict_type=True, count_as=int, per_sequence=False):
    """A student's tile loop; the keyword arguments switch on one mistake each."""
    if (strict_type and (type(block_size) is not int)) or block_size < 1:
        raise ValueError(f"block_size must be a positive integer, got block_size={block_size!r}")
    n_q, n_k = queries.shape[1], keys.shape[1]
    if n_q > n_k:
        # The contract's words: a hint that names an error-handling mistake needs the same
        # message as the kept mistake on every call of the error check, this one included.
        raise ValueError(f"the queries must be the last positions of the keys' sequence, so need "
                         f"num_queries <= num_keys; got queries with {n_q} tokens and keys with {n_k}")
    first = n_k - n_q
    d = queries.shape[-1] if root_of is None else root_of(queries, values)
    tiles, rows = count_as(0), []
    for q_lo in range(0, n_q, block_size):
        q_hi = min(n_q, q_lo + block_size)
        top = torch.full((queries.shape[0], q_hi - q_lo), -math.inf, dtype=queries.dtype)
        total = torch.zeros_like(top)
        weighted = torch.zeros(queries.shape[0], q_hi - q_lo, values.shape[-1], dtype=values.dtype)
        starts = [k for k in range(0, n_k, block_size) if k <= first + q_hi - 1]
        for k_lo in (reversed(starts) if last_tile_first else starts):
            k_hi = min(n_k, k_lo + block_size)
            tiles += queries.shape[0] if per_sequence else 1
            s = torch.einsum("bqd,bkd->bqk", queries[:, q_lo:q_hi], keys[:, k_lo:k_hi]) / math.sqrt(d)
            hidden = torch.arange(k_lo, k_hi)[None, :] > first + torch.arange(q_lo, q_hi)[:, None]
            s = s.masked_fill(hidden, -math.inf)
            new_top = torch.maximum(top, s.max(dim=-1).values)
            base = new_top.masked_fill(new_top == -math.inf, 0.0) if guard else new_top
            w = (s - base[..., None]).exp()
            shrink = (top - base).exp()
            total = total * shrink + w.sum(-1)
            weighted = weighted * shrink[..., None] + torch.einsum("bqk,bkv->bqv", w, values[:, k_lo:k_hi])
            top = new_top
        rows.append(weighted / total[..., None] if normalise else weighted)
    return torch.cat(rows, dim=1), tiles


def test_ch09_ex3_a_correct_student_loop_passes():
    # The switches below are the only difference between this loop and the mistakes.
    passes_everywhere("ch09_ex3", _student_tiles)


@pytest.mark.parametrize("switch,mistake", [
    (dict(last_tile_first=True, guard=False), "key tiles in reverse order without a -inf guard"),
    (dict(root_of=lambda q, v: v.shape[-1]), "scores scaled by the square root of d_v"),
    (dict(normalise=False), "running output never divided by the running sum"),
    (dict(strict_type=False), "block_size's type not checked"),
    (dict(root_of=lambda q, v: 1), "scores never scaled"),
    (dict(per_sequence=True), "tiles counted once per sequence of the batch"),
    (dict(count_as=torch.tensor), "tile count returned as a tensor"),
    (dict(count_as=float), "tile count returned as a float"),
], ids=["reverse_order_no_guard", "sqrt_of_d_v", "never_divided", "block_size_type", "no_scale",
        "count_per_sequence", "count_tensor", "count_float"])
def test_ch09_ex3_each_tiling_mistake_is_named_not_blamed_on_query_positions(switch, mistake):
    def answer(queries, keys, values, block_size):
        return _student_tiles(queries, keys, values, block_size, **switch)
    assert_mistake("ch09_ex3", answer, mistake, must_not=("sits at position", "LAST"))


def test_ch09_ex3_the_contract_asks_for_an_int_count_of_the_whole_batch():
    text = " ".join(statement("ch09_ex3").split())
    assert "`tiles` is a Python `int` (not a tensor, a float or a `bool`)" in text
    assert "one count for the whole batch (a tile covers every sequence of the batch)" in text


def _random_sizes_check():
    checks = get_exercise("ch09_ex3").checks
    return next((i, c) for i, c in enumerate(checks) if c.name.startswith("random sizes"))


# 30 grading seeds, 47 among them: there the old hidden draws gave d_v = 1 in every call that
# a scale changes, so an answer that never scaled was told it had scaled by sqrt(d_v). The
# public checks' sizes are fixed (d_v >= 2); the parametrized test above covers them.
@pytest.mark.parametrize("root_of,own,other", [
    (lambda q, v: 1, "scores never scaled", "scores scaled by the square root of d_v"),
    (lambda q, v: v.shape[-1], "scores scaled by the square root of d_v", "scores never scaled"),
], ids=["no_scale", "sqrt_of_d_v"])
def test_ch09_ex3_each_scaling_mistake_gets_its_own_hint_at_every_hidden_seed(root_of, own, other):
    def answer(queries, keys, values, block_size):
        return _student_tiles(queries, keys, values, block_size, root_of=root_of)
    exercise = get_exercise("ch09_ex3")
    index, random_sizes = _random_sizes_check()
    for seed in range(40, 70):
        calls = random_sizes.make_calls(hidden_seed(seed, index))
        result = judge(exercise, random_sizes, calls, outcomes_for(answer, calls, "function"))
        assert result.mistake != other, seed
        assert result.passed or (result.mistake == own and result.hint == mistake_hint("ch09_ex3", own)), \
            (seed, result.mistake, result.hint)


def test_ch09_ex3_hidden_draws_keep_d_v_above_1_and_apart_from_d():
    index, random_sizes = _random_sizes_check()
    for seed in range(200):
        for call in random_sizes.make_calls(hidden_seed(seed, index)):
            queries, _, values, _ = call.args
            assert values.shape[-1] >= 2 and values.shape[-1] != queries.shape[-1], seed


def test_ch09_ex3_reverse_tile_order_with_a_guard_is_correct():
    passes_everywhere("ch09_ex3", lambda q, k, v, bs: _student_tiles(q, k, v, bs, last_tile_first=True))



# Issue 41: an answer that formed the whole score matrix passed every public check.
def _whole_matrix_tiles(queries, keys, values, block_size):
    """A student who masks the whole score matrix at once and counts the tiles on paper."""
    if type(block_size) is not int or block_size < 1:
        raise ValueError(f"block_size must be a positive integer, got block_size={block_size!r}")
    n_q, n_k = queries.shape[1], keys.shape[1]
    if n_q > n_k:
        raise ValueError(f"the queries must be the last positions of the keys' sequence, so need "
                         f"num_queries <= num_keys; got queries with {n_q} tokens and keys with {n_k}")
    first = n_k - n_q
    allowed = torch.ones(n_q, n_k, dtype=torch.bool).tril(first)
    out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=allowed)
    tiles = 0
    for q_lo in range(0, n_q, block_size):
        last = first + min(n_q, q_lo + block_size) - 1
        tiles += len(range(0, min(n_k, last + 1), block_size))
    return out, tiles


def test_ch09_ex3_the_whole_score_matrix_fails_only_the_tile_checks_with_its_hint():
    failed = failed_checks("ch09_ex3", _whole_matrix_tiles)
    assert [r.check for r in failed] == [check_named("ch09_ex3", "tile by tile").name], [r.line() for r in failed]
    assert failed[0].mistake == "the whole score matrix formed"
    tile_checks = {c.name for c in get_exercise("ch09_ex3").checks if c.name.startswith("tile by tile")}
    for seed in (11, 2026, 7):
        hidden = failed_checks("ch09_ex3", _whole_matrix_tiles, seed)
        assert {r.check for r in hidden} == tile_checks, (seed, [r.line() for r in hidden])
        assert all(r.mistake == "the whole score matrix formed" for r in hidden), (seed, [r.line() for r in hidden])


def test_ch09_ex3_the_tile_checks_make_the_whole_matrix_exceed_the_budget():
    exercise = get_exercise("ch09_ex3")
    found = 0
    for index, check in enumerate(exercise.checks):
        if "tile by tile" not in check.name:
            continue
        found += 1
        for seed in (check.seed, *(hidden_seed(s, index) for s in range(30))):
            for call in check.make_calls(seed):
                q, k, v, block = call.args
                budget = q.shape[0] * max(q.shape[1], k.shape[1]) * max(block, q.shape[-1], v.shape[-1])
                assert call.report == ("largest_tensor",)
                assert q.shape[0] * q.shape[1] * k.shape[1] > budget, (seed, tuple(q.shape), tuple(k.shape), block)
    assert found == 2


def test_ch09_ex3_the_contract_states_the_memory_budget():
    text = " ".join(statement("ch09_ex3").split())
    assert "`batch × N × max(block_size, d, d_v)` entries, where `N` is `max(num_queries, num_keys)` " \
           "rounded up to a whole number of blocks" in text


def test_ch09_ex3_padding_to_whole_blocks_passes_and_an_oversized_tensor_is_not_called_the_score_matrix():
    """A blind solver's answer padded its inputs to whole blocks (memory O(n d), no score matrix) and was
    refused at some grading seeds, with the hint of the kept mistake that forms the whole score matrix.
    The budget now rounds the number of tokens up to whole blocks, and an answer over it by another
    tensor than that mistake's is not matched to it."""
    from attention_course.checks.checking import run_checks
    from attention_course.exercises.ch09 import ex3_causal_tiled_attention as module
    padded = module._tiled_checked(module._alt_tiled_padded)
    for seed in range(12):
        assert all(r.passed for r in run_checks("ch09_ex3", padded, hidden=True, seed=seed)), seed

    def one_big_buffer(queries, keys, values, block_size):
        waste = queries.new_zeros(queries.shape[0], 4 * max(queries.shape[-2], keys.shape[-2]),  # noqa: F841
                                  max(block_size, queries.shape[-1], values.shape[-1]) + 1)
        return padded(queries, keys, values, block_size)

    results = run_checks("ch09_ex3", one_big_buffer)
    failed = [r for r in results if not r.passed]
    assert failed and all("tensor of" in r.reason for r in failed), [r.line() for r in results]
    assert not any(r.mistake == "the whole score matrix formed" for r in failed), [r.line() for r in failed]


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


# ------------------------------------------------------------- ch09_ex5

def _gqa_student(q_new, k_new, v_new, k_cache, v_cache, *, heads_of=None, scale=True, widen_cache=False,
                 self_last=False, new_first=False, check_heads=True):
    """A student's grouped step, wrong in the one way its switches say."""
    h, g = q_new.shape[1], k_new.shape[1]
    if check_heads and h % g != 0:
        raise ValueError(f"{h} heads in q_new {tuple(q_new.shape)} do not split over k_new {tuple(k_new.shape)}")
    old_and_new_k = [k_new, k_cache] if new_first else [k_cache, k_new]
    old_and_new_v = [v_new, v_cache] if new_first else [v_cache, v_new]
    k_all, v_all = torch.cat(old_and_new_k, dim=2), torch.cat(old_and_new_v, dim=2)
    src_k, src_v = (k_cache, v_cache) if self_last else (k_all, v_all)
    if heads_of is None:
        wide_k, wide_v = src_k.repeat_interleave(h // g, dim=1), src_v.repeat_interleave(h // g, dim=1)
    else:
        wide_k, wide_v = heads_of(src_k, h, g), heads_of(src_v, h, g)
    scores = q_new @ wide_k.transpose(-1, -2)
    if scale == "d_model":                           # a solver's: sqrt(num_heads * head_dim)
        scores = scores / math.sqrt(h * q_new.shape[-1])
    elif scale:
        scores = scores / math.sqrt(q_new.shape[-1])
    out = torch.softmax(scores, dim=-1) @ wide_v
    if widen_cache:
        return out, k_all.repeat_interleave(h // g, dim=1), v_all.repeat_interleave(h // g, dim=1)
    return out, k_all, v_all


def _tiled(t, h, g):
    return t.repeat(1, h // g, 1, 1)                 # tiles the heads: query head i gets i % g


def _divided_by_kv_heads(t, h, g):
    return t[:, torch.arange(h) // g]


@pytest.mark.parametrize("options,mistake", [
    (dict(heads_of=_tiled), "groups interleaved"),
    (dict(heads_of=_divided_by_kv_heads), "head index divided by num_kv_heads"),
    (dict(scale=False), "scores not scaled"),
    (dict(scale="d_model"), "scores scaled by the square root of d_model"),
    (dict(widen_cache=True), "cache returned with one head per query head"),
    (dict(self_last=True), "new token does not see itself"),
    (dict(new_first=True), "new token put before the cache"),
    (dict(check_heads=False), "no check of the head counts"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_ch09_ex5_each_grouping_mistake_gets_its_own_hint(options, mistake):
    assert_mistake("ch09_ex5", lambda *args: _gqa_student(*args, **options), mistake)


def test_ch09_ex5_an_index_select_answer_passes():
    def by_index(q_new, k_new, v_new, k_cache, v_cache):
        h, g = q_new.shape[1], k_new.shape[1]
        if h % g:
            raise ValueError(f"q_new {list(q_new.shape)} and k_new {list(k_new.shape)}: {h} % {g} != 0")
        k_all, v_all = torch.cat([k_cache, k_new], 2), torch.cat([v_cache, v_new], 2)
        owner = torch.arange(h) // (h // g)
        wide_k, wide_v = k_all.index_select(1, owner), v_all.index_select(1, owner)
        probs = (q_new @ wide_k.mT * q_new.shape[-1] ** -0.5).softmax(-1)
        return probs @ wide_v, k_all, v_all

    passes_everywhere("ch09_ex5", by_index)


def test_ch09_ex5_the_contract_fixes_the_grouping_convention():
    text = " ".join(statement("ch09_ex5").split())
    assert "query head `i` uses key/value head `i // group_size`" in text
    assert "contiguous groups" in text and "`num_kv_heads = 1` is multi-query attention" in text


# ------------------------------------------------------------- ch09_ex6

def _split_case(lead, n_q, n_all, lo, hi, d, d_v, dtype, grad_lse_size, seed):
    """Inputs of one part A = keys[lo:hi] and the trusted gradients: autograd through a float64
    forward pass over all n_all keys whose scores outside A are detached from the queries."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*lead, n_q, d, generator=g, dtype=dtype)
    k = torch.randn(*lead, n_all, d, generator=g, dtype=dtype)
    v = torch.randn(*lead, n_all, d_v, generator=g, dtype=dtype)
    d_out = torch.randn(*lead, n_q, d_v, generator=g, dtype=dtype)
    d_lse = torch.randn(*lead, n_q, generator=g, dtype=dtype) * grad_lse_size
    q64, k64, v64 = (t.double().requires_grad_(True) for t in (q, k, v))
    inside = torch.zeros(n_all, dtype=torch.bool)
    inside[lo:hi] = True
    s_in = q64 @ k64[..., inside, :].transpose(-2, -1) / math.sqrt(d)
    s_out = q64.detach() @ k64[..., ~inside, :].transpose(-2, -1) / math.sqrt(d)
    s = torch.cat([s_out[..., :lo], s_in, s_out[..., lo:]], dim=-1)
    out, lse = torch.softmax(s, -1) @ v64, torch.logsumexp(s, -1)
    loss = (out * d_out.double()).sum() + (lse * d_lse.double()).sum()
    gq, gk, gv = torch.autograd.grad(loss, (q64, k64, v64))
    s_a = s[..., lo:hi].detach()
    out_a, lse_a = torch.softmax(s_a, -1) @ v64[..., lo:hi, :].detach(), torch.logsumexp(s_a, -1)
    args = (q, k[..., lo:hi, :], v[..., lo:hi, :], out_a.to(dtype), lse_a.to(dtype), out.detach().to(dtype),
            lse.detach().to(dtype), d_out, d_lse)
    return args, (gq, gk[..., lo:hi, :], gv[..., lo:hi, :])


@pytest.mark.parametrize("lead,n_q,n_all,lo,hi,d,d_v,block,dtype", [
    ((), 7, 9, 2, 7, 3, 2, 2, torch.float64), ((2, 3), 9, 15, 0, 11, 4, 5, 4, torch.float64),
    ((2,), 10, 12, 5, 12, 5, 3, 3, torch.float32), ((1,), 1, 8, 3, 4, 2, 4, 10, torch.float32)])
@pytest.mark.parametrize("grad_lse_size", [0.0, 2.0])
def test_ch09_ex6_the_reference_agrees_with_autograd_through_the_whole_row(lead, n_q, n_all, lo, hi, d, d_v, block,
                                                                           dtype, grad_lse_size):
    args, want = _split_case(lead, n_q, n_all, lo, hi, d, d_v, dtype, grad_lse_size, seed=n_q * 100 + n_all)
    got = get_exercise("ch09_ex6").reference(*args, block)
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    for mine, exact, like in zip(got, want, args[:3]):
        assert mine.dtype == dtype and mine.shape == like.shape
        assert torch.allclose(mine.double(), exact, rtol=tol, atol=tol), (mine - exact).abs().max()


def test_ch09_ex6_the_parts_shares_of_grad_queries_add_up_to_the_whole_gradient():
    reference = get_exercise("ch09_ex6").reference
    bounds = [(0, 4), (4, 5), (5, 11)]
    shares = [reference(*_split_case((2,), 6, 11, lo, hi, 3, 2, torch.float64, 1.0, seed=7)[0], 2)[0]
              for lo, hi in bounds]
    whole_q = _split_case((2,), 6, 11, 0, 11, 3, 2, torch.float64, 1.0, seed=7)[1][0]
    assert torch.allclose(sum(shares), whole_q, atol=1e-10)


def _student_backward(queries, keys, values, output_part, lse_part, output, lse, grad_output, grad_lse, block, *,
                      probs="merged", row="merged", lse_sign=1, lse_bare=False, grad_root=True, dk_root=True,
                      dq_root=True, root_of="d", strict=True, whole=False, key_tiles=True):
    """A student's answer: A's tile of the whole row's softmax from the merged lse, the row term from the
    merged output; each keyword switches on one mistake (key_tiles=False: query blocks against all of
    A's keys at once, which the contract allows)."""
    if strict and (type(block) is not int or block < 1):
        raise ValueError(f"block must be a Python int of at least 1, got block={block!r}")
    n_q, n_k = queries.shape[-2], keys.shape[-2]
    c = 1 / math.sqrt(values.shape[-1] if root_of == "v" else queries.shape[-1])
    step_q = n_q if whole else block
    step_k = n_k if whole or not key_tiles else block
    dq, dk, dv = torch.zeros_like(queries), torch.zeros_like(keys), torch.zeros_like(values)
    for i in range(0, n_q, step_q):
        qi, gi = queries[..., i:i + step_q, :], grad_output[..., i:i + step_q, :]
        own = (gi * output_part[..., i:i + step_q, :]).sum(-1, keepdim=True)
        merged = (gi * output[..., i:i + step_q, :]).sum(-1, keepdim=True)
        for j in range(0, n_k, step_k):
            kj, vj = keys[..., j:j + step_k, :], values[..., j:j + step_k, :]
            s = qi @ kj.transpose(-2, -1) * c
            row_lse = (lse_part if probs == "part" else lse)[..., i:i + step_q, None]
            if probs == "divide":
                p = s.exp() / row_lse.exp()
            elif probs == "tile":
                p = s.softmax(dim=-1)
            else:
                p = (s - row_lse).exp()
            dp = gi @ vj.transpose(-2, -1)
            big_d = {"merged": merged, "part": own, "reversed": own + (own - merged),
                     "tile": (p * dp).sum(-1, keepdim=True)}[row]
            g_lse = lse_sign * grad_lse[..., i:i + step_q, None]
            ds = p * (dp - big_d) + g_lse if lse_bare else p * (dp - big_d + g_lse)
            dv[..., j:j + step_k, :] += p.transpose(-2, -1) @ gi
            dq[..., i:i + step_q, :] += ds @ kj * (c if grad_root and dq_root else 1)
            dk[..., j:j + step_k, :] += ds.transpose(-2, -1) @ qi * (c if grad_root and dk_root else 1)
    return dq, dk, dv


def _merge_then_part_backward(queries, keys, values, output_part, lse_part, output, lse, grad_output, grad_lse,
                              block):
    """A solver's route: the merge's chain rule by hand (A's weight w = exp(lse_part - lse)), then A's own
    backward with a loss on its output and its log-sum-exp; key blocks outside, float64 inside."""
    if type(block) is not int or block < 1:
        raise ValueError(f"block must be a Python int of at least 1, got {block!r}")
    q, k, v = queries.double(), keys.double(), values.double()
    w = (lse_part.double() - lse.double()).exp()[..., None]
    g_o = w * grad_output.double()
    g_l = w * ((grad_output.double() * (output_part.double() - output.double())).sum(-1, keepdim=True)
               + grad_lse.double()[..., None])
    d_row = (g_o * output_part.double()).sum(-1, keepdim=True)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for j in range(0, k.shape[-2], block):
        for i in range(0, q.shape[-2], block):
            p = torch.exp(q[..., i:i + block, :] @ k[..., j:j + block, :].mT / math.sqrt(q.shape[-1])
                          - lse_part.double()[..., i:i + block, None])
            ds = p * (g_o[..., i:i + block, :] @ v[..., j:j + block, :].mT - d_row[..., i:i + block, :]
                      + g_l[..., i:i + block, :])
            dv[..., j:j + block, :] += p.mT @ g_o[..., i:i + block, :]
            dq[..., i:i + block, :] += ds @ k[..., j:j + block, :] / math.sqrt(q.shape[-1])
            dk[..., j:j + block, :] += ds.mT @ q[..., i:i + block, :] / math.sqrt(q.shape[-1])
    return dq.to(queries.dtype), dk.to(keys.dtype), dv.to(values.dtype)


def test_ch09_ex6_a_correct_student_loop_passes():
    # The switches below are the only difference between this loop and the mistakes.
    passes_everywhere("ch09_ex6", _student_backward)


def test_ch09_ex6_the_merges_chain_rule_by_hand_passes():
    passes_everywhere("ch09_ex6", _merge_then_part_backward)


def test_ch09_ex6_query_blocks_against_all_the_keys_are_within_the_budget():
    # The contract allows a block of queries against every key of A (block x n_k scores at a time).
    passes_everywhere("ch09_ex6", lambda *args: _student_backward(*args, key_tiles=False))


_SWITCHES = [
    (dict(probs="part", row="part"), "the part's own statistics"),
    (dict(row="part"), "the merge weights held constant"),
    (dict(row="reversed"), "the merge weight's derivative with the wrong sign"),
    (dict(lse_sign=0), "grad_lse ignored"),
    (dict(lse_sign=-1), "grad_lse with the wrong sign"),
    (dict(row="tile"), "D from the tile's own probabilities"),
    (dict(probs="tile"), "each tile's softmax taken as the probabilities"),
    (dict(probs="divide"), "exp of the score before dividing by exp(L)"),
    (dict(grad_root=False), "dQ and dK not scaled"),
    (dict(root_of="v"), "scores scaled by the square root of d_v"),
    (dict(whole=True), "the whole score matrix formed"),
    (dict(strict=False), "block not checked"),
    (dict(lse_bare=True), "grad_lse added to dS without the factor P"),
    (dict(dk_root=False), "dK not scaled"),
    # An independent solver's two plausible bugs that got only the check's hint: A's own softmax (from
    # lse_part) beside the whole row's term D (from output), and dQ without the 1/sqrt(d) that dK has.
    (dict(probs="part"), "A's own probabilities with the whole row's term"),
    (dict(dq_root=False), "dQ not scaled"),
]


@pytest.mark.parametrize("switch,mistake", _SWITCHES, ids=[m for _, m in _SWITCHES])
def test_ch09_ex6_each_mistake_gets_its_own_hint(switch, mistake):
    def answer(*args):
        return _student_backward(*args, **switch)
    assert_mistake("ch09_ex6", answer, mistake)


_WRONG_VALUES = [sw for sw, _ in _SWITCHES if not ({"whole", "strict"} & set(sw)) and sw.get("probs") != "divide"]


@pytest.mark.parametrize("switch", _WRONG_VALUES, ids=lambda d: "-".join(f"{k}={v}" for k, v in d.items()))
def test_ch09_ex6_a_wrong_value_never_gets_the_block_hint(switch):
    # The block check's valid call must return, but its values are the other checks' business.
    def answer(*args):
        return _student_backward(*args, **switch)
    failed = failed_checks("ch09_ex6", answer)
    assert failed
    block = check_named("ch09_ex6", "block 0, 2.0 or True")
    assert all(r.check != block.name and "before the loops" not in r.hint for r in failed), \
        [(r.check, r.hint) for r in failed]


def test_ch09_ex6_scores_above_88_tolerance_has_a_margin_of_3_and_still_fails_every_wrong_value():
    # The tolerance grows with the largest score: max(1e-4, max|S| 2^-16) absolute, 1e-4 relative.
    exercise = get_exercise("ch09_ex6")
    sharp = check_named("ch09_ex6", "scores above 88")
    index = exercise.checks.index(sharp)
    correct = [_student_backward, _merge_then_part_backward, lambda *a: _student_backward(*a, key_tiles=False)]
    wrong = [lambda *a, sw=sw: _student_backward(*a, **sw) for sw in _WRONG_VALUES + [dict(probs="divide")]]
    torch.set_num_threads(1)
    worst = 0.0
    for seed in [sharp.seed] + [hidden_seed(s, index) for s in range(20)]:
        calls = sharp.make_calls(seed)
        for call in calls:
            q, k = call.args[0].double(), call.args[1].double()
            top = max(float((q @ k.mT).abs().max()) / math.sqrt(q.shape[-1]), float(call.args[6].abs().max()))
            atol = max(1e-4, top * 2.0 ** -16)
            want = [t.double() for t in exercise.reference(*call.args)]
            for answer in correct:
                for g, w in zip(answer(*call.args), want):
                    worst = max(worst, float(((g.double() - w).abs() - 1e-4 * w.abs()).max()) / atol)
        for answer in wrong:
            assert not judge(exercise, sharp, calls, outcomes_for(answer, calls, "function")).passed, seed
    assert worst < 1 / 3, worst


def test_ch09_ex6_the_new_mistakes_fail_the_hidden_checks_too():
    for switch in (dict(probs="part"), dict(dq_root=False)):
        assert failed_hidden_somewhere("ch09_ex6", lambda *a, sw=switch: _student_backward(*a, **sw),
                                       seeds=(11, 2026, 7)), switch


def test_ch09_ex6_no_hint_has_a_sentence_that_starts_in_lowercase():
    # The >88 check's hint joined the common hint after a full stop, which began with a lowercase "compare".
    exercise = get_exercise("ch09_ex6")
    for hint in [c.hint for c in exercise.checks] + [m.hint for m in exercise.mistakes]:
        assert not re.search(r"\. [a-z]", hint.replace("e.g. ", "")), hint


def test_ch09_ex6_the_contract_says_what_the_tile_check_enforces_and_never_the_merges_backward():
    text = " ".join(statement("ch09_ex6").split())
    assert "What the check enforces is memory" in text
    assert "the largest |score| times $2^{-16}$" in text
    assert "The other parts' keys and values are not given" in text
    exercise = get_exercise("ch09_ex6")
    for hint in [text] + [c.hint for c in exercise.checks] + [m.hint for m in exercise.mistakes]:
        for derived in ("exp(lse_part - lse)", "lse_part - lse", "dP - D + grad_lse", "P * (dP", "w dO",
                        "O_A - O"):
            assert derived not in hint, (derived, hint)


def test_ch09_ex6_autograd_through_the_whole_forward_pass_is_caught_by_the_tile_check():
    # Right gradients by autograd through A's whole score matrix at once: the tile check alone fails it.
    def answer(queries, keys, values, output_part, lse_part, output, lse, grad_output, grad_lse, block):
        if type(block) is not int or block < 1:
            raise ValueError(f"block must be a Python int of at least 1, got block={block!r}")
        with torch.enable_grad():
            q, k, v = (t.detach().requires_grad_(True) for t in (queries, keys, values))
            p = torch.exp(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) - lse[..., None])
            # the loss's first-order change through A: the merged output and lse move with p
            surrogate = ((p @ v) * grad_output).sum() + (p.sum(-1) * (grad_lse - (grad_output * output).sum(-1))).sum()
            return torch.autograd.grad(surrogate, (q, k, v))
    failed = failed_checks("ch09_ex6", answer)
    assert [r.check for r in failed] == [check_named("ch09_ex6", "tile by tile").name], [r.line() for r in failed]
    assert failed[0].mistake == "the whole score matrix formed"


def test_ch09_ex6_public_checks_with_grad_lse_nonzero_and_scores_that_overflow_float32_in_and_outside_a():
    checks = [c for c in get_exercise("ch09_ex6").public_checks if c.must_mention == ()]
    assert sum(any(bool(call.args[8].abs().max() > 0.1) for call in c.make_calls(c.seed)) for c in checks) >= 3
    sharp = check_named("ch09_ex6", "scores above 88")
    for seed in (sharp.seed, 11, 2026, 7):
        inside, outside = sharp.make_calls(seed)
        for call in (inside, outside):
            assert call.args[0].dtype == torch.float32 and call.args[6].max() > 88
        q, k = inside.args[0], inside.args[1]
        assert (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).max() > 88
        q, k = outside.args[0], outside.args[1]
        assert (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).max() < 88     # the large score is not A's


def test_ch09_ex6_the_tile_checks_make_the_whole_matrix_exceed_the_budget():
    exercise = get_exercise("ch09_ex6")
    for index, check in enumerate(exercise.checks):
        if "tile by tile" not in check.name:
            continue
        for seed in (check.seed, hidden_seed(11, index), hidden_seed(2026, index)):
            for call in check.make_calls(seed):
                q, k, v = call.args[:3]
                n = math.prod(q.shape[:-2])
                budget = n * max(q.shape[-2], k.shape[-2]) * max(call.args[-1], q.shape[-1], v.shape[-1])
                assert call.report == ("largest_tensor",)
                assert n * q.shape[-2] * k.shape[-2] > budget


# ------------------------------------------------------------- ch09_ex7

_LLAMA2_70B = {"num_layers": 80, "num_heads": 64, "num_kv_heads": 8, "head_dim": 128}


def _student_accounting(config, context_len, batch, bytes_per_value, *, sequences=None, whole_floats=False,
                        flops_per_kv_head=False, page_intensity=False):
    """A student's accounting, written per layer and then scaled up."""
    layers, heads = config["num_layers"], config["num_heads"]
    kv_heads, d = config["num_kv_heads"], config["head_dim"]
    seen = context_len + 1
    seqs = batch if sequences is None else sequences
    cache = layers * seqs * (seen * kv_heads * d * 2) * bytes_per_value
    flops = 0
    for _ in range(kv_heads if flops_per_kv_head else heads):
        flops += 2 * seen * d + 2 * seen * d
    flops *= layers * seqs
    moved = cache + layers * seqs * heads * d * 2 * bytes_per_value
    intensity = 2 * heads / (kv_heads * bytes_per_value) if page_intensity else flops / moved
    counts = {"cache_bytes": cache, "attention_flops": flops, "bytes_moved": moved}
    if whole_floats:
        counts = {key: float(value) for key, value in counts.items()}
    return dict(counts, intensity=intensity)


def test_ch09_ex7_llama2_70b_matches_the_chapters_table():
    # The page prints 320 KB of cache per token for Llama 2 70B and 8 FLOP per byte for its decode
    # attention over a long cache; 8 sequences of 4,096 tokens then hold 8 * 4096 * 320 KB = 10 GB.
    calls = check_named("ch09_ex7", "Llama 2 70B").make_calls(0)
    assert [c.args for c in calls] == [(_LLAMA2_70B, 4095, 8, 2)]
    ref = get_exercise("ch09_ex7").reference(_LLAMA2_70B, 4095, 8, 2)
    assert ref["cache_bytes"] == 8 * 4096 * 320 * 2**10 == 10 * 2**30
    assert ref["attention_flops"] == 80 * 8 * 64 * 4096 * 128 * 4
    assert ref["bytes_moved"] == ref["cache_bytes"] + 80 * 8 * 64 * 128 * 2 * 2
    assert 7.98 < ref["intensity"] < 8.0 and type(ref["intensity"]) is float


def test_ch09_ex7_a_per_layer_student_answer_passes():
    passes_everywhere("ch09_ex7", _student_accounting)


def test_ch09_ex7_one_sequence_only_fails_with_the_checks_own_hint():
    failed = failed_checks("ch09_ex7", lambda *args: _student_accounting(*args, sequences=1))
    names = {r.check for r in failed}
    assert any(n.startswith("Llama 2 70B") for n in names) and any(n.startswith("a small multi-query") for n in names)
    for r in failed:
        assert r.hint == check_named("ch09_ex7", r.check[:20]).hint, r.line()


def test_ch09_ex7_whole_floats_fail_only_the_type_check():
    failed = failed_checks("ch09_ex7", lambda *args: _student_accounting(*args, whole_floats=True))
    assert [r.check for r in failed] == [check_named("ch09_ex7", "every count is a Python int").name]
    assert "Python int" in failed[0].reason


def test_ch09_ex7_flops_counted_per_kv_head_get_their_hint():
    assert_mistake("ch09_ex7", lambda *args: _student_accounting(*args, flops_per_kv_head=True),
                   "FLOPs with num_kv_heads")


def test_ch09_ex7_the_pages_long_context_intensity_is_named():
    assert_mistake("ch09_ex7", lambda *args: _student_accounting(*args, page_intensity=True),
                   "intensity from the long-context limit")


def test_ch09_ex7_the_contract_fixes_what_counts():
    text = " ".join(statement("ch09_ex7").split())
    for words in ("2 FLOPs", "`context_len + 1`", "however many query heads share it",
                  "Leave out the write of the new key and value", "Python `float`"):
        assert words in text, words


# ------------------------------------------------------------- ch09_ex8

class _CountingMemory:
    """Main memory of a tiled kernel: every read or write of rows of an array is counted in bytes.
    With real tensors the loop computes attention; with tensors on the meta device it only counts."""

    def __init__(self, bytes_per_value):
        self.bytes_per_value, self.reads, self.writes = bytes_per_value, 0, 0

    def _bytes(self, block, stats):
        return block.numel() * (4 if stats else self.bytes_per_value)   # m, l, log-sum-exp: float32

    def read(self, array, lo, hi, stats=False):
        block = array[lo:hi]
        self.reads += self._bytes(block, stats)
        return block.clone() if block.device.type != "meta" else block

    def write(self, array, lo, block, stats=False):
        self.writes += self._bytes(block, stats)
        if block.device.type != "meta":
            array[lo:lo + block.shape[0]] = block


def _instrumented_tiled_forward(num_queries, num_keys, head_dim, block_q, block_k, bytes_per_value,
                                causal=False, keys_outside=False, inputs=None):
    """Runs the contract's two loop orders through a memory that counts every load and store: on
    ``inputs`` (q, k, v in float64) it computes attention too; without them, on meta tensors, it only
    counts. Returns the counts and the output."""
    compute = inputs is not None
    if compute:
        q, k, v = inputs
        device = "cpu"
    else:
        device = "meta"
        q, k, v = (torch.empty(n, head_dim, device=device) for n in (num_queries, num_keys, num_keys))
    hbm = _CountingMemory(bytes_per_value)
    out = torch.zeros(num_queries, head_dim, dtype=torch.float64, device=device)
    lse, m_hbm, l_hbm = (torch.zeros(num_queries, 1, dtype=torch.float64, device=device) for _ in range(3))
    offset = num_keys - num_queries

    def scores(qb, kb, q0, k0):
        s = qb @ kb.T / math.sqrt(head_dim)
        if causal:
            hidden = (torch.arange(k0, k0 + kb.shape[0])[None, :]
                      > offset + torch.arange(q0, q0 + qb.shape[0])[:, None])
            s = s.masked_fill(hidden, -math.inf)
        return s

    def visible(q0, q1, k0):
        return not causal or k0 <= offset + q1 - 1

    if not keys_outside:
        for q0 in range(0, num_queries, block_q):
            q1 = min(q0 + block_q, num_queries)
            qb = hbm.read(q, q0, q1)
            m = torch.full((q1 - q0, 1), -math.inf, dtype=torch.float64)
            l, a = torch.zeros(q1 - q0, 1, dtype=torch.float64), torch.zeros(q1 - q0, head_dim, dtype=torch.float64)
            for k0 in range(0, num_keys, block_k):
                if not visible(q0, q1, k0):
                    continue
                kb, vb = hbm.read(k, k0, k0 + block_k), hbm.read(v, k0, k0 + block_k)
                if compute:
                    s = scores(qb, kb, q0, k0)
                    m_new = torch.maximum(m, s.max(dim=-1, keepdim=True).values)
                    p = torch.exp(s - m_new)
                    a = a * torch.exp(m - m_new) + p @ vb
                    l = l * torch.exp(m - m_new) + p.sum(dim=-1, keepdim=True)
                    m = m_new
            hbm.write(out, q0, a / l if compute else out[q0:q1])
            hbm.write(lse, q0, m + torch.log(l) if compute else lse[q0:q1], stats=True)
    else:
        started = set()
        for k0 in range(0, num_keys, block_k):
            kb, vb = hbm.read(k, k0, k0 + block_k), hbm.read(v, k0, k0 + block_k)
            for q0 in range(0, num_queries, block_q):
                q1 = min(q0 + block_q, num_queries)
                if not visible(q0, q1, k0):
                    continue
                qb = hbm.read(q, q0, q1)
                if q0 in started:       # FlashAttention's first order: a normalised O, m and l in memory
                    o, m, l = hbm.read(out, q0, q1), hbm.read(m_hbm, q0, q1, True), hbm.read(l_hbm, q0, q1, True)
                else:
                    o = torch.zeros(q1 - q0, head_dim, dtype=torch.float64)
                    m = torch.full((q1 - q0, 1), -math.inf, dtype=torch.float64)
                    l = torch.zeros(q1 - q0, 1, dtype=torch.float64)
                if compute:
                    s = scores(qb, kb, q0, k0)
                    m_new = torch.maximum(m, s.max(dim=-1, keepdim=True).values)
                    p = torch.exp(s - m_new)
                    l_new = l * torch.exp(m - m_new) + p.sum(dim=-1, keepdim=True)
                    o = (o * l * torch.exp(m - m_new) + p @ vb) / l_new
                    m, l = m_new, l_new
                else:
                    o, m, l = out[q0:q1], m_hbm[q0:q1], l_hbm[q0:q1]
                hbm.write(out, q0, o)
                hbm.write(m_hbm, q0, m, True)
                hbm.write(l_hbm, q0, l, True)
                started.add(q0)
    return {"reads": hbm.reads, "writes": hbm.writes}, out


def _counting_answer(*args, **kwargs):
    return _instrumented_tiled_forward(*args, **kwargs)[0]


@pytest.mark.parametrize("keys_outside", [False, True])
@pytest.mark.parametrize("case", [(300, 300, 16, 64, 48, 4, False), (100, 700, 32, 64, 48, 2, True),
                                  (7, 9, 8, 1, 1, 4, True), (1, 50, 8, 4, 7, 2, True), (37, 61, 5, 9, 10, 8, True)])
def test_ch09_ex8_an_instrumented_loop_computes_attention_and_its_counts_match(case, keys_outside):
    *sizes, causal = case
    n_q, n_k, d = sizes[:3]
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(n, d, generator=g, dtype=torch.float64) for n in (n_q, n_k, n_k))
    counts, out = _instrumented_tiled_forward(*sizes, causal=causal, keys_outside=keys_outside, inputs=(q, k, v))
    mask = torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q) if causal else None
    want = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask)[0]
    assert torch.allclose(out, want, atol=1e-10), (case, keys_outside)
    assert counts == _counting_answer(*sizes, causal=causal, keys_outside=keys_outside)
    reference = get_exercise("ch09_ex8").reference
    assert counts == reference(*sizes, causal=causal, keys_outside=keys_outside)


def test_ch09_ex8_the_instrumented_loop_passes_every_check():
    passes_everywhere("ch09_ex8", _counting_answer)


def test_ch09_ex8_theorem_2_setting_counted_by_hand():
    # 8,192 tokens of 128 numbers of 2 bytes (a row is 256 bytes), 64 blocks of 128 each way.
    ref = get_exercise("ch09_ex8").reference
    row = 128 * 2
    fa2 = ref(8192, 8192, 128, 128, 128, 2)
    assert fa2 == {"reads": 8192 * row + 64 * 2 * 8192 * row,       # Q once, K and V once per query block
                   "writes": 8192 * (row + 4)}                        # O and the log-sum-exp
    fa1 = ref(8192, 8192, 128, 128, 128, 2, keys_outside=True)
    assert fa1 == {"reads": 2 * 8192 * row + 64 * 8192 * row + 63 * 8192 * (row + 8),
                   "writes": 64 * 8192 * (row + 8)}
    # The reads nearly agree; FlashAttention's first order writes 65 times as much.
    assert 1.0 < fa1["reads"] / fa2["reads"] < 1.02 and 64 < fa1["writes"] / fa2["writes"] < 66
    # Causal self-attention over 1,024 tokens in tiles of 128: 36 of the 64 tiles, as the page says.
    assert ref(1024, 1024, 64, 128, 128, 2, causal=True)["reads"] == 1024 * 128 + 36 * 2 * 128 * 128


def _student_traffic(n_q, n_k, d, bq, bk, nbytes, causal=False, keys_outside=False, *, offset=None,
                     state_every_tile=False, causal_ignored=False):
    """A student's count, tile by tile, with one thing possibly wrong."""
    shift = n_k - n_q if offset is None else offset
    reads = writes = 0
    fresh = set()
    if keys_outside:
        reads += 2 * n_k * d * nbytes
    for k0 in range(0, n_k, bk):
        for q0 in range(0, n_q, bq):
            rows, cols = min(bq, n_q - q0), min(bk, n_k - k0)
            if causal and not causal_ignored and k0 > shift + q0 + rows - 1:
                continue
            if keys_outside:
                reads += rows * d * nbytes
                if q0 in fresh or state_every_tile:
                    reads += rows * (d * nbytes + 8)
                writes += rows * (d * nbytes + 8)
                fresh.add(q0)
            else:
                reads += 2 * cols * d * nbytes
    if not keys_outside:
        reads += n_q * d * nbytes
        writes += n_q * (d * nbytes + 4)
    return {"reads": reads, "writes": writes}


def test_ch09_ex8_a_tile_by_tile_student_answer_passes():
    passes_everywhere("ch09_ex8", _student_traffic)


@pytest.mark.parametrize("flaw,mistake", [({"offset": 0}, "queries placed first"),
                                          ({"state_every_tile": True}, "state read at the first tile")])
def test_ch09_ex8_hand_written_mistakes_get_their_hints(flaw, mistake):
    assert_mistake("ch09_ex8", lambda *a, **kw: _student_traffic(*a, **kw, **flaw), mistake)


def test_ch09_ex8_ignoring_the_mask_fails_with_the_checks_own_hint():
    # Every tile computed even with causal=True: no kept mistake does that, so the check's own hint.
    failed = failed_checks("ch09_ex8", lambda *a, **kw: _student_traffic(*a, **kw, causal_ignored=True))
    assert {r.check for r in failed} == {check_named("ch09_ex8", "causal").name, check_named("ch09_ex8", "both orders: one").name}
    for r in failed:
        assert r.mistake is None and r.hint == check_named("ch09_ex8", "causal").hint, r.line()


def test_ch09_ex8_the_contract_fixes_what_counts():
    text = " ".join(statement("ch09_ex8").split())
    for words in ("float32, 4 bytes per number", "`0 ... num_keys - num_queries + i`", "the last block of each may be shorter",
                  "it reads and writes nothing", "only a query block's first computed tile reads no state",
                  "the scores and the weights never leave the chip"):
        assert words in text, words


# ------------------------------------------------------------- every check hint of the chapter

@pytest.mark.parametrize("exercise", all_exercises(9), ids=lambda e: e.label)
def test_ch09_check_hints_describe_rather_than_blame(exercise):
    for check in exercise.checks:
        for words in BLAMING:
            assert words not in check.hint.lower(), (exercise.label, check.name, words)


def test_ch09_ex8_counts_of_another_type_fail_only_the_type_check():
    """A blind solver's float and tensor counts passed every check although the contract asks for
    Python ints. (A numpy integer is recorded as the int it holds, so it passes, as it does in ch09_ex7.)"""
    reference = get_exercise("ch09_ex8").reference
    for convert in (float, torch.tensor):
        def converted(*args, convert=convert, **kwargs):
            return {key: convert(value) for key, value in reference(*args, **kwargs).items()}
        results = failed_checks("ch09_ex8", converted)
        assert [r.check for r in results] == ["both counts are Python ints (the page's order, no mask)"], \
            [r.line() for r in results]
        assert "Python int" in results[0].reason
