"""Regression tests of chapter 11's exercises (Triton kernels, run in Triton's interpreter), filed by
exercise.

Where a newly found mistake's regression test goes: into this file, in the section of its exercise,
named ``test_ch11_exM_<what it shows>``; a test about several of the chapter's exercises is
parametrized so that every id carries its exercise's label. Each wrong answer is written by hand, the
way a student would write it (never the kept mistake it should match). Issue 43 asks that a kernel with
a missing boundary mask and one that materialises the score matrix both fail with the hint that names
the mistake (ch11_ex2 below), and that the checks look at what a kernel did (which blocks it loaded),
not only at its outputs.
"""
import math

import pytest
import torch

# First: without a GPU it sets TRITON_INTERPRET, which triton reads when it is imported.
from attention_course.exercises.ch11._common import load_triton  # noqa: E402

pytest.importorskip("triton")

from attention_course.checks.checking import run_checks  # noqa: E402
from attention_course.checks.registry import all_exercises  # noqa: E402

from exercise_helpers import BLAMING, assert_mistake, check_named, failed_checks, passes_everywhere  # noqa: E402

triton = load_triton()
import triton.language as tl  # noqa: E402


@pytest.mark.parametrize("exercise", all_exercises(11), ids=lambda e: e.label)
def test_ch11_check_hints_describe_rather_than_blame(exercise):
    for check in exercise.checks:
        for words in BLAMING:
            assert words not in check.hint.lower(), (check.name, words)


# ------------------------------------------------------------- ch11_ex1

@triton.jit
def _softmax_rows(X, LENS, OUT, n, BLOCK: tl.constexpr, RESCALE: tl.constexpr):
    r = tl.program_id(0)
    length = tl.load(LENS + r)
    biggest = -float("inf")
    total = 0.0
    for j in range(0, length, BLOCK):
        cols = j + tl.arange(0, BLOCK)
        xs = tl.load(X + r * n + cols, mask=cols < length, other=-float("inf"))
        now = tl.maximum(biggest, tl.max(xs, 0))
        if RESCALE:
            total = total * tl.exp(biggest - now)
        total = total + tl.sum(tl.exp(xs - now), 0)
        biggest = now
    for j in range(0, n, BLOCK):
        cols = j + tl.arange(0, BLOCK)
        xs = tl.load(X + r * n + cols, mask=cols < length, other=-float("inf"))
        tl.store(OUT + r * n + cols, tl.where(cols < length, tl.exp(xs - biggest) / total, 0.0), mask=cols < n)


def _student_softmax(rescale=True, whole_row=False):
    def masked_row_softmax(x, valid_lens, block):
        out = torch.empty_like(x)
        width = triton.next_power_of_2(x.shape[1]) if whole_row else block
        _softmax_rows[(x.shape[0],)](x, valid_lens, out, x.shape[1], BLOCK=width, RESCALE=rescale)
        return out
    return masked_row_softmax


def test_ch11_ex1_a_correct_student_kernel_passes():
    passes_everywhere("ch11_ex1", _student_softmax())


def test_ch11_ex1_a_sum_not_rescaled_is_named():
    assert_mistake("ch11_ex1", _student_softmax(rescale=False), "max not carried between blocks")


def test_ch11_ex1_a_row_in_one_block_is_named():
    assert_mistake("ch11_ex1", _student_softmax(whole_row=True), "whole row loaded at once")


# An independent solver's two-pass kernel (it walks all n columns and guards an all-padding block),
# with the three slips whose feedback was only the check's own hint before they were kept.
@triton.jit
def _solver_softmax(x_ptr, lens_ptr, out_ptr, n_cols, BLOCK: tl.constexpr, BUG: tl.constexpr):
    row = tl.program_id(0)
    length = tl.load(lens_ptr + row)
    base = row * n_cols
    m = tl.full((), float("-inf"), tl.float32)
    total = tl.zeros((), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        if BUG == "zero padding":
            x = tl.load(x_ptr + base + cols, mask=cols < length, other=0.0)
        elif BUG == "bound by n":
            x = tl.load(x_ptr + base + cols, mask=cols < n_cols, other=float("-inf"))
        else:
            x = tl.load(x_ptr + base + cols, mask=cols < length, other=float("-inf"))
        m_next = tl.maximum(m, tl.max(x, axis=0))
        safe = tl.where(m_next == float("-inf"), 0.0, m_next)
        if BUG == "block max":
            bm = tl.max(x, axis=0)
            total = total + tl.sum(tl.exp(x - tl.where(bm == float("-inf"), 0.0, bm)), axis=0)
            m_next = bm
        else:
            total = total * tl.exp(m - safe) + tl.sum(tl.exp(x - safe), axis=0)
        m = m_next
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + cols, mask=cols < length, other=float("-inf"))
        tl.store(out_ptr + base + cols, tl.where(cols < length, tl.exp(x - m) / total, 0.0), mask=cols < n_cols)


def _solver(bug):
    def masked_row_softmax(x, valid_lens, block):
        out = torch.empty_like(x)
        _solver_softmax[(x.shape[0],)](x, valid_lens, out, x.shape[1], BLOCK=block, BUG=bug)
        return out
    return masked_row_softmax


@pytest.mark.parametrize("bug, mistake", [("zero padding", "padding loaded as 0.0"),
                                          ("block max", "each block's own maximum"),
                                          ("bound by n", "first pass bounded by n")])
def test_ch11_ex1_the_solvers_slips_are_named(bug, mistake):
    passes_everywhere("ch11_ex1", _solver(""))
    assert_mistake("ch11_ex1", _solver(bug), mistake)


def test_ch11_ex1_torch_in_the_launcher_earns_nothing():
    def masked_row_softmax(x, valid_lens, block):
        keep = torch.arange(x.shape[1])[None, :] < valid_lens[:, None]
        w = torch.softmax(x.masked_fill(~keep, -math.inf), -1)
        return torch.where(keep, w, 0.0)
    failed = failed_checks("ch11_ex1", masked_row_softmax)
    assert len(failed) == 3 and all("no Triton kernel" in r.reason for r in failed), [r.line() for r in failed]


def test_ch11_ex1_torch_weights_copied_by_a_kernel_earn_nothing():
    @triton.jit
    def copy_rows(SRC, DST, n, B: tl.constexpr):
        r = tl.program_id(0)
        for j in range(0, n, B):
            c = j + tl.arange(0, B)
            tl.store(DST + r * n + c, tl.load(SRC + r * n + c, mask=c < n), mask=c < n)

    def masked_row_softmax(x, valid_lens, block):
        keep = torch.arange(x.shape[1])[None, :] < valid_lens[:, None]
        w = torch.where(keep, torch.softmax(x.masked_fill(~keep, -math.inf), -1), 0.0)
        out = torch.empty_like(x)
        copy_rows[(x.shape[0],)](w, out, x.shape[1], B=block)
        return out
    failed = failed_checks("ch11_ex1", masked_row_softmax)
    assert len(failed) == 3 and all("no program read exactly rows" in r.reason for r in failed), \
        [r.line() for r in failed]


# ------------------------------------------------------------- ch11_ex2

@triton.jit
def _forward_last(Q, K, V, O, L, n_q, n_k, scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                  MASK_ROWS: tl.constexpr, SCALE_Q: tl.constexpr):
    i, h = tl.program_id(0), tl.program_id(1)
    m = i * BM + tl.arange(0, BM)
    e = tl.arange(0, D)
    first = n_k - n_q
    if MASK_ROWS:
        q = tl.load(Q + h * n_q * D + m[:, None] * D + e[None, :], mask=m[:, None] < n_q, other=0.0)
    else:     # a student who tested only with multiples of the blocks
        q = tl.load(Q + h * n_q * D + m[:, None] * D + e[None, :])
    if SCALE_Q:
        q = q * scale
    mx = tl.zeros([BM], tl.float32) - float("inf")
    sm = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    for j in range(0, tl.minimum(n_k, first + (i + 1) * BM), BN):
        n = j + tl.arange(0, BN)
        if MASK_ROWS:
            k = tl.load(K + h * n_k * D + n[:, None] * D + e[None, :], mask=n[:, None] < n_k, other=0.0)
            v = tl.load(V + h * n_k * D + n[:, None] * D + e[None, :], mask=n[:, None] < n_k, other=0.0)
        else:
            k = tl.load(K + h * n_k * D + n[:, None] * D + e[None, :])
            v = tl.load(V + h * n_k * D + n[:, None] * D + e[None, :])
        s = tl.where(n[None, :] <= first + m[:, None], tl.dot(q, tl.trans(k)) * scale, -float("inf"))
        mx2 = tl.maximum(mx, tl.max(s, 1))
        p = tl.exp(s - mx2[:, None])
        sm = sm * tl.exp(mx - mx2) + tl.sum(p, 1)
        acc = acc * tl.exp(mx - mx2)[:, None] + tl.dot(p, v)
        mx = mx2
    if MASK_ROWS:
        tl.store(O + h * n_q * D + m[:, None] * D + e[None, :], acc / sm[:, None], mask=m[:, None] < n_q)
        tl.store(L + h * n_q + m, mx + tl.log(sm), mask=m < n_q)
    else:
        tl.store(O + h * n_q * D + m[:, None] * D + e[None, :], acc / sm[:, None])
        tl.store(L + h * n_q + m, mx + tl.log(sm))


def _student_forward(mask_rows=True, scale_q=False, all_keys=False):
    def causal_attention_last(q, k, v, block_m, block_n):
        heads, n_q, d = q.shape
        out, lse = torch.empty_like(q), torch.empty(heads, n_q)
        bn = triton.next_power_of_2(k.shape[1]) if all_keys else block_n
        _forward_last[(triton.cdiv(n_q, block_m), heads)](q, k, v, out, lse, n_q, k.shape[1], 1 / math.sqrt(d),
                                                          D=d, BM=block_m, BN=bn, MASK_ROWS=mask_rows,
                                                          SCALE_Q=scale_q)
        return out, lse
    return causal_attention_last


def test_ch11_ex2_a_correct_student_kernel_passes():
    passes_everywhere("ch11_ex2", _student_forward())


def test_ch11_ex2_a_missing_boundary_mask_is_named():
    assert_mistake("ch11_ex2", _student_forward(mask_rows=False), "no boundary masks")


def test_ch11_ex2_a_kernel_holding_a_whole_row_block_of_scores_is_named():
    # Its values are right: only the size of its loads gives it away.
    assert_mistake("ch11_ex2", _student_forward(all_keys=True), "all keys loaded at once")


def test_ch11_ex2_the_scale_applied_twice_is_named():
    assert_mistake("ch11_ex2", _student_forward(scale_q=True), "scale applied twice")


@triton.jit
def _forward_by_descriptors(qd, kd, vd, O, L, n_q, n_k, scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    mb, h = tl.program_id(0), tl.program_id(1)
    q = qd.load([h, mb * BM, 0]).reshape(BM, D)
    rows = mb * BM + tl.arange(0, BM)
    m = tl.full([BM], float("-inf"), tl.float32)
    den = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    for n0 in range(0, tl.minimum(n_k, n_k - n_q + (mb + 1) * BM), BN):
        kb = kd.load([h, n0, 0]).reshape(BN, D)
        vb = vd.load([h, n0, 0]).reshape(BN, D)
        cols = n0 + tl.arange(0, BN)
        s = tl.where(cols[None, :] <= n_k - n_q + rows[:, None], tl.dot(q, tl.trans(kb)) * scale, float("-inf"))
        top = tl.maximum(m, tl.max(s, 1))
        p = tl.exp(s - top[:, None])
        den = den * tl.exp(m - top) + tl.sum(p, 1)
        acc = acc * tl.exp(m - top)[:, None] + tl.dot(p, vb)
        m = top
    e = tl.arange(0, D)
    tl.store(O + h * n_q * D + rows[:, None] * D + e[None, :], acc / den[:, None], mask=rows[:, None] < n_q)
    tl.store(L + h * n_q + rows, m + tl.log(den), mask=rows < n_q)


def test_ch11_ex2_host_side_tensor_descriptors_pass():
    # The kernel receives TensorDescriptor objects, not tensors: the record still knows what it read.
    from triton.tools.tensor_descriptor import TensorDescriptor

    def causal_attention_last(q, k, v, block_m, block_n):
        heads, n_q, d = q.shape
        out, lse = torch.empty_like(q), torch.empty(heads, n_q)
        descs = [TensorDescriptor.from_tensor(t, [1, b, d]) for t, b in ((q, block_m), (k, block_n), (v, block_n))]
        _forward_by_descriptors[(triton.cdiv(n_q, block_m), heads)](*descs, out, lse, n_q, k.shape[1],
                                                                    1 / math.sqrt(d), D=d, BM=block_m, BN=block_n)
        return out, lse
    passes_everywhere("ch11_ex2", causal_attention_last)


def test_ch11_ex2_sdpa_in_the_launcher_beside_a_kernel_that_reads_nothing_fails():
    @triton.jit
    def touch(X, n, B: tl.constexpr):
        i = tl.arange(0, B)
        tl.store(X + i, tl.load(X + i, mask=i < n), mask=i < n)

    def causal_attention_last(q, k, v, block_m, block_n):
        n_q, n_k = q.shape[1], k.shape[1]
        keep = torch.arange(n_k)[None, :] <= (n_k - n_q + torch.arange(n_q))[:, None]
        s = (q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])).masked_fill(~keep, -math.inf)
        out = torch.softmax(s, -1) @ v
        touch[(1,)](out, 4, B=16)
        return out, torch.logsumexp(s, -1)
    failed = failed_checks("ch11_ex2", causal_attention_last)
    assert len(failed) == 3, [r.line() for r in failed]
    assert all("rows" in r.reason for r in failed), [r.reason for r in failed]


def test_ch11_ex2_padded_queries_through_a_square_kernel_fail_by_the_rows_read():
    # The queries padded at the front into a square problem: the values are right, but the kernel reads a
    # copy of q and programs that exist only for the padding.
    square = _student_forward()

    def causal_attention_last(q, k, v, block_m, block_n):
        pad = k.shape[1] - q.shape[1]
        full = torch.cat([q.new_zeros(q.shape[0], pad, q.shape[2]), q], 1)
        out, lse = square(full, k, v, block_m, block_n)
        return out[:, pad:].contiguous(), lse[:, pad:].contiguous()
    failed = failed_checks("ch11_ex2", causal_attention_last)
    assert failed and all("rows" in r.reason for r in failed), [r.line() for r in failed]


# ------------------------------------------------------------- ch11_ex3

@triton.jit
def _window_from_zero(Q, K, V, O, n, w, scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    b, h = tl.program_id(0), tl.program_id(1)
    i = b * BM + tl.arange(0, BM)
    e = tl.arange(0, D)
    q = tl.load(Q + h * n * D + i[:, None] * D + e[None, :], mask=i[:, None] < n, other=0.0)
    mx = tl.full([BM], -1e30, tl.float32)
    sm = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    for j0 in range(0, tl.minimum(n, (b + 1) * BM), BN):      # from the first block: masked, but loaded
        j = j0 + tl.arange(0, BN)
        k = tl.load(K + h * n * D + j[:, None] * D + e[None, :], mask=j[:, None] < n, other=0.0)
        v = tl.load(V + h * n * D + j[:, None] * D + e[None, :], mask=j[:, None] < n, other=0.0)
        ok = (j[None, :] <= i[:, None]) & (j[None, :] > i[:, None] - w)
        s = tl.where(ok, tl.dot(q, tl.trans(k)) * scale, -1e30)
        mx2 = tl.maximum(mx, tl.max(s, 1))
        p = tl.where(ok, tl.exp(s - mx2[:, None]), 0.0)
        sm = sm * tl.exp(mx - mx2) + tl.sum(p, 1)
        acc = acc * tl.exp(mx - mx2)[:, None] + tl.dot(p, v)
        mx = mx2
    tl.store(O + h * n * D + i[:, None] * D + e[None, :], acc / sm[:, None], mask=i[:, None] < n)


def test_ch11_ex3_loading_the_blocks_before_the_window_is_named():
    def window_attention(q, k, v, window, block_m, block_n):
        heads, n, d = q.shape
        out = torch.empty_like(q)
        _window_from_zero[(triton.cdiv(n, block_m), heads)](q, k, v, out, n, window, d ** -0.5,
                                                            D=d, BM=block_m, BN=block_n)
        return out
    assert_mistake("ch11_ex3", window_attention, "blocks before the window loaded")


# ------------------------------------------------------------- ch11_ex4

@triton.jit
def _dq_without_d(Q, K, V, L, DO, DQ, n_q, n_k, scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    b, h = tl.program_id(0), tl.program_id(1)
    i = b * BM + tl.arange(0, BM)
    e = tl.arange(0, D)
    at = h * n_q * D + i[:, None] * D + e[None, :]
    q = tl.load(Q + at, mask=i[:, None] < n_q, other=0.0)
    do = tl.load(DO + at, mask=i[:, None] < n_q, other=0.0)
    lse = tl.load(L + h * n_q + i, mask=i < n_q, other=0.0)
    dq = tl.zeros([BM, D], tl.float32)
    for j0 in range(0, tl.minimum(n_k, n_k - n_q + (b + 1) * BM), BN):
        j = j0 + tl.arange(0, BN)
        k = tl.load(K + h * n_k * D + j[:, None] * D + e[None, :], mask=j[:, None] < n_k, other=0.0)
        v = tl.load(V + h * n_k * D + j[:, None] * D + e[None, :], mask=j[:, None] < n_k, other=0.0)
        p = tl.where(j[None, :] <= n_k - n_q + i[:, None], tl.exp(tl.dot(q, tl.trans(k)) * scale - lse[:, None]), 0.0)
        dq += tl.dot(p * tl.dot(do, tl.trans(v)), k)          # dS = P * dP: the row term forgotten
    tl.store(DQ + at, dq * scale, mask=i[:, None] < n_q)


def test_ch11_ex4_the_row_term_left_out_is_named():
    def causal_backward_dq(q, k, v, out, lse, grad_out, block_m, block_n):
        heads, n_q, d = q.shape
        dq = torch.empty_like(q)
        _dq_without_d[(triton.cdiv(n_q, block_m), heads)](q, k, v, lse, grad_out, dq, n_q, k.shape[1], d ** -0.5,
                                                          D=d, BM=block_m, BN=block_n)
        return dq
    assert_mistake("ch11_ex4", causal_backward_dq, "row term D left out")


# An independent solver's kernel, with two slips whose feedback was only the check's own hint before they were
# kept: the causal mask of the weights without the queries' offset (top-left, right only when n_q = n_k; its key
# blocks stay right) and dq stored without the 1/sqrt(d) of the scores.
@triton.jit
def _solver_dq(q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr, dout_ptr, dq_ptr, n_q, n_k, scale,
               HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BUG: tl.constexpr):
    pid_m, h = tl.program_id(0), tl.program_id(1)
    offset = n_k - n_q
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    row_ok = rows < n_q
    q_offs = h * n_q * HEAD_DIM + rows[:, None] * HEAD_DIM + dims[None, :]
    q = tl.load(q_ptr + q_offs, mask=row_ok[:, None], other=0.0)
    o = tl.load(out_ptr + q_offs, mask=row_ok[:, None], other=0.0)
    do = tl.load(dout_ptr + q_offs, mask=row_ok[:, None], other=0.0)
    lse = tl.load(lse_ptr + h * n_q + rows, mask=row_ok, other=0.0)
    delta = tl.sum(o * do, axis=1)
    dq = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    for start in range(0, tl.minimum(offset + (pid_m + 1) * BLOCK_M, n_k), BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        kv_offs = h * n_k * HEAD_DIM + keys[:, None] * HEAD_DIM + dims[None, :]
        k = tl.load(k_ptr + kv_offs, mask=keys[:, None] < n_k, other=0.0)
        v = tl.load(v_ptr + kv_offs, mask=keys[:, None] < n_k, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        if BUG == "top left":
            visible = row_ok[:, None] & (keys[None, :] <= rows[:, None]) & (keys[None, :] < n_k)
        else:
            visible = row_ok[:, None] & (keys[None, :] <= offset + rows[:, None]) & (keys[None, :] < n_k)
        p = tl.where(visible, tl.exp(s - lse[:, None]), 0.0)
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - delta[:, None])
        dq += tl.dot(ds, k, input_precision="ieee")
    if BUG == "no scale":
        tl.store(dq_ptr + q_offs, dq, mask=row_ok[:, None])
    else:
        tl.store(dq_ptr + q_offs, dq * scale, mask=row_ok[:, None])


def _solver_dq_launcher(bug):
    def causal_backward_dq(q, k, v, out, lse, grad_out, block_m, block_n):
        heads, n_q, d = q.shape
        dq = torch.empty_like(q)
        _solver_dq[(triton.cdiv(n_q, block_m), heads)](q, k, v, out, lse, grad_out, dq, n_q, k.shape[1],
                                                       1 / math.sqrt(d), HEAD_DIM=d, BLOCK_M=block_m,
                                                       BLOCK_N=block_n, BUG=bug)
        return dq
    return causal_backward_dq


def test_ch11_ex4_the_solvers_kernel_passes():
    passes_everywhere("ch11_ex4", _solver_dq_launcher(""))


@pytest.mark.parametrize("bug, mistake", [("top left", "causal mask aligned top-left"),
                                          ("no scale", "scale left out of dq")])
def test_ch11_ex4_the_solvers_slips_are_named(bug, mistake):
    assert_mistake("ch11_ex4", _solver_dq_launcher(bug), mistake)


def test_ch11_ex4_the_check_of_two_block_sizes_names_both():
    assert check_named("ch11_ex4", "the last 21 of 45").name.count("block") >= 2
    calls = check_named("ch11_ex4", "the last 21 of 45").make_calls(1)
    assert [c.args[6:] for c in calls] == [(16, 16), (32, 16)]


# ------------------------------------------------------------- ch11_ex5

def test_ch11_ex5_partials_from_torch_earn_nothing():
    def split_kv_decode(q, k, v, num_splits, block_n):
        heads, n, d = k.shape
        c = -(-n // num_splits)
        po, pl = torch.zeros(heads, num_splits, d), torch.full((heads, num_splits), -math.inf)
        for s in range(num_splits):
            if s * c < n:
                sc = torch.einsum("hd,hnd->hn", q, k[:, s * c:(s + 1) * c]) / math.sqrt(d)
                po[:, s] = torch.softmax(sc, -1)[:, None, :].matmul(v[:, s * c:(s + 1) * c]).squeeze(1)
                pl[:, s] = torch.logsumexp(sc, -1)
        w = torch.softmax(pl, -1)
        return (w[..., None] * po).sum(1), po, pl
    results = run_checks("ch11_ex5", split_kv_decode)
    assert not any(r.passed for r in results)
    assert all("no Triton kernel" in r.reason for r in results), [r.line() for r in results]
    assert_mistake("ch11_ex5", split_kv_decode, "no kernel launched")   # its hint speaks of the missing kernel


# An independent solver's kernel, with the slips that passed or got only the check's own hint before they were
# caught: keys and values loaded up to n (the next chunk's keys read, masked only in the scores), and the chunk's
# maximum stored as its log-sum-exp; and the same kernel run as one program per head looping over the chunks.
@triton.jit
def _solver_chunk(q, k_ptr, v_ptr, part_out_ptr, part_lse_ptr, n, chunk, num_splits, scale, h, s, dims,
                  D: tl.constexpr, BLOCK_N: tl.constexpr, BUG: tl.constexpr):
    lo = s * chunk
    hi = tl.minimum(lo + chunk, n)
    m = tl.full((), float("-inf"), tl.float32)
    l = tl.zeros((), tl.float32)  # noqa: E741
    acc = tl.zeros((D,), tl.float32)
    for start in range(lo, hi, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        ok = keys < hi
        offs = h * n * D + keys[:, None] * D + dims[None, :]
        if BUG == "read next":
            k = tl.load(k_ptr + offs, mask=keys[:, None] < n, other=0.0)
            v = tl.load(v_ptr + offs, mask=keys[:, None] < n, other=0.0)
        else:
            k = tl.load(k_ptr + offs, mask=ok[:, None], other=0.0)
            v = tl.load(v_ptr + offs, mask=ok[:, None], other=0.0)
        sc = tl.where(ok, tl.sum(k * q[None, :], axis=1) * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(sc, axis=0))
        p = tl.exp(sc - m_new)
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, axis=0)  # noqa: E741
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m = m_new
    has = l > 0
    if BUG == "store max":
        lse = m
    else:
        lse = tl.where(has, m + tl.log(tl.where(has, l, 1.0)), float("-inf"))
    tl.store(part_out_ptr + (h * num_splits + s) * D + dims, tl.where(has, acc / tl.where(has, l, 1.0), 0.0))
    tl.store(part_lse_ptr + h * num_splits + s, lse)


@triton.jit
def _solver_split(q_ptr, k_ptr, v_ptr, part_out_ptr, part_lse_ptr, n, chunk, num_splits, scale,
                  D: tl.constexpr, BLOCK_N: tl.constexpr, BUG: tl.constexpr):
    h = tl.program_id(0)
    dims = tl.arange(0, D)
    q = tl.load(q_ptr + h * D + dims)
    if BUG == "one program":
        for s in range(0, num_splits):
            _solver_chunk(q, k_ptr, v_ptr, part_out_ptr, part_lse_ptr, n, chunk, num_splits, scale, h, s, dims,
                          D, BLOCK_N, BUG)
    else:
        _solver_chunk(q, k_ptr, v_ptr, part_out_ptr, part_lse_ptr, n, chunk, num_splits, scale, h,
                      tl.program_id(1), dims, D, BLOCK_N, BUG)


def _solver_decode(bug):
    def split_kv_decode(q, k, v, num_splits, block_n):
        heads, n, d = k.shape
        chunk = -(-n // num_splits)
        part_out = torch.empty(heads, num_splits, d)
        part_lse = torch.empty(heads, num_splits)
        grid = (heads,) if bug == "one program" else (heads, num_splits)
        _solver_split[grid](q, k, v, part_out, part_lse, n, chunk, num_splits, 1 / math.sqrt(d), D=d,
                            BLOCK_N=block_n, BUG=bug)
        w = torch.softmax(part_lse, dim=-1)
        return (w[..., None] * part_out).sum(dim=1), part_out, part_lse
    return split_kv_decode


def test_ch11_ex5_the_solvers_kernel_passes():
    passes_everywhere("ch11_ex5", _solver_decode(""))


@pytest.mark.parametrize("bug, mistake", [("read next", "keys of the next chunk loaded"),
                                          ("one program", "one program per head, looping over the chunks"),
                                          ("store max", "chunk's maximum stored as its log-sum-exp")])
def test_ch11_ex5_the_solvers_slips_are_named(bug, mistake):
    assert_mistake("ch11_ex5", _solver_decode(bug), mistake)


@pytest.mark.parametrize("bug, words", [("read next", "of head 0 in chunks 0 to "),
                                        ("one program", "2 programs of the kernel")])
def test_ch11_ex5_what_each_program_reads_is_checked_hidden_too(bug, words):
    """Right values from programs that read past their chunk, or from one program per head, fail the hidden
    check too, by what the programs read."""
    failed = failed_checks("ch11_ex5", _solver_decode(bug), hidden_seed=11)
    assert any("(hidden)" in r.check for r in failed), [r.line() for r in failed]
    assert all(words in r.reason for r in failed), [r.line() for r in failed]


# ------------------------------------------------------------- every exercise: the kernels compile

COMPILE_FOR_A_GPU = r'''
import importlib, inspect, os, sys
os.environ["TRITON_INTERPRET"] = "0"
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

module = importlib.import_module("attention_course.exercises.ch11." + sys.argv[1])
notebook = sys.argv[2]
INTS = {"S"}                                  # an int named in capitals
LENGTHS = {"lens_ptr", "LENS"}                # int64 valid lengths
SIZES = {"BLOCK": 16, "BM": 16, "BN": 16, "D": 16, "HEAD": 16, "BLOCK_Q": 16, "BLOCK_K": 16, "HD": 16, "BQ": 16,
         "BK": 16, "BS": 8, "BLOCK_M": 16, "BLOCK_N": 16, "NATURAL": True, "HEAD_DIM": 16}


def kind(fn, name, annotation):
    if "constexpr" in str(annotation):
        return "constexpr"
    if name in LENGTHS or (name == "L" and "valid" in fn.__code__.co_varnames):
        return "*i64"
    if name not in INTS and (name.endswith("_ptr") or name.isupper() or name in ("Qf", "Kf", "Vf", "Of", "Lf", "Dl")):
        return "*fp32"
    return "fp32" if name.endswith("scale") else "i32"


def compile_for_an_h100(jitted):
    fn = jitted.fn
    params = inspect.signature(fn).parameters
    signature = {n: kind(fn, n, p.annotation) for n, p in params.items()}
    constexprs = {n: SIZES.get(n, p.default) for n, p in params.items() if signature[n] == "constexpr"}
    done = triton.compile(ASTSource(fn=jitted, signature=signature, constexprs=constexprs),
                          target=GPUTarget("cuda", 90, 32))
    assert done.asm["cubin"]
    print("compiled", fn.__name__)


for name, obj in vars(module).items():
    if inspect.isfunction(obj) and obj.__module__ == module.__name__ and any(
            "constexpr" in str(p.annotation) for p in inspect.signature(obj).parameters.values()):
        obj.__globals__["tl"] = tl
        compile_for_an_h100(triton.jit(obj))
import json, linecache, torch, math
cells = [c for c in json.load(open(notebook))["cells"] if c["cell_type"] == "code"]
label = module.__doc__.split(":")[0]
index = next(i for i, c in enumerate(cells) if "check(" in "".join(c["source"]) and label in "".join(c["source"]))
code = "".join(cells[index - 1]["source"])
linecache.cache["<cell>"] = (len(code), None, code.splitlines(True), "<cell>")
space = {"triton": triton, "tl": tl, "torch": torch, "math": math}
exec(compile(code, "<cell>", "exec"), space)
for obj in list(space.values()):
    if isinstance(obj, triton.runtime.jit.JITFunction):
        compile_for_an_h100(obj)
'''


@pytest.mark.parametrize("label", [e.label for e in all_exercises(11)])
def test_ch11_kernels_compile_for_a_gpu_even_without_one(label):
    """The interpreter forgives what the compiler refuses: every kernel of the exercise (reference, kept
    mistakes' and alternatives' kernels, and the solution notebook's) is compiled for an H100 (sm_90) down
    to machine code, in float32. Nothing runs: compiling needs no GPU."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    module = next(p.stem for p in (Path(__file__).parents[2] / "attention_course/exercises/ch11").glob(
        f"ex{label.split('_ex')[1]}_*.py"))
    notebook = str(Path(__file__).parents[2] / "solutions/11_triton_kernel.ipynb")
    done = subprocess.run([sys.executable, "-c", COMPILE_FOR_A_GPU, module, notebook], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "TRITON_DEFAULT_FP_FUSION": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("compiled") >= 4, done.stdout
