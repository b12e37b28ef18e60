r"""ch11_ex3: A sliding-window forward kernel that skips blocks on both sides.

Write a Triton kernel and the function `window_attention(q, k, v, window, block_m, block_n)` that
launches it. `q`, `k` and `v` are contiguous float32 tensors of shape `(heads, n, d)` with `d` 16 or
32, `window >= 1` is an `int` and `block_m`, `block_n` are powers of two (16 or more). With Chapter 10's
window, query `i` sees the keys at positions `max(0, i - window + 1) .. i` (`window` keys, itself
included, fewer at the start). Scores are divided by $\sqrt{d}$. Return `out` of shape `(heads, n, d)`,
float32, within 1e-4 of sliding-window attention.

Launch one program per block of `block_m` queries of one head (`n` need not be a multiple of either
block). A program runs the online softmax over the blocks of `block_n` keys that hold at least one key
one of its queries sees, and never loads the others: neither the blocks in its queries' future nor
the blocks that lie wholly before the window of its first query. It loads each visited block of keys
and of values whole (masking only the rows past the end), and no load covers more than
`max(block_m, block_n) * d` elements. Some queries may see no key of the first blocks a program
visits; their output must still be exact. Pass `q`, `k` and `v` to the kernel as they are. The check
runs your function on the CPU, the kernel in Triton's interpreter, and records which rows of `k` and
`v` each program read, and any load or store outside the tensors the kernel was given (such a load
reads NaN, such a store is dropped, and either fails the check).
"""
from __future__ import annotations

import math

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import blocks, jit, kernel_compare, qkv_rows

tl = None  # triton.language, set when a kernel is first launched (_common.jit)

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _window_kernel(Q, K, V, O, n, window, scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                   SKIP_LEFT: tl.constexpr = True, GUARD: tl.constexpr = True, REACH: tl.constexpr = 0):
    block, head = tl.program_id(0), tl.program_id(1)
    rows = block * BM + tl.arange(0, BM)
    dims = tl.arange(0, D)
    base = head * n * D
    q = tl.load(Q + base + rows[:, None] * D + dims[None, :], mask=rows[:, None] < n, other=0.0)
    run_max = tl.full([BM], float("-inf"), tl.float32)
    run_sum = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    reach = window + REACH                       # REACH = 1: one key too many
    start = 0
    if SKIP_LEFT:
        start = tl.maximum(block * BM - reach + 1, 0) // BN * BN
    stop = tl.minimum(n, (block + 1) * BM)
    for lo in range(start, stop, BN):
        cols = lo + tl.arange(0, BN)
        kb = tl.load(K + base + cols[:, None] * D + dims[None, :], mask=cols[:, None] < n, other=0.0)
        vb = tl.load(V + base + cols[:, None] * D + dims[None, :], mask=cols[:, None] < n, other=0.0)
        s = tl.dot(q, tl.trans(kb)) * scale
        gap = rows[:, None] - cols[None, :]
        s = tl.where((gap >= 0) & (gap < reach), s, float("-inf"))
        new_max = tl.maximum(run_max, tl.max(s, 1))
        if GUARD:
            safe = tl.where(new_max == float("-inf"), 0.0, new_max)
        else:
            safe = new_max
        p = tl.exp(s - safe[:, None])
        fade = tl.exp(run_max - safe)
        run_sum = run_sum * fade + tl.sum(p, 1)
        acc = acc * fade[:, None] + tl.dot(p, vb)
        run_max = new_max
    tl.store(O + base + rows[:, None] * D + dims[None, :], acc / run_sum[:, None], mask=rows[:, None] < n)


def _launch(q, k, v, window, block_m, block_n, **flags):
    heads, n, d = q.shape
    out = torch.empty_like(q)
    jit(_window_kernel)[(blocks(n, block_m), heads)](q, k, v, out, n, window, 1.0 / math.sqrt(d),
                                                     D=d, BM=block_m, BN=block_n, **flags)
    return out


def window_attention(q, k, v, window, block_m, block_n):
    """Sliding-window attention by blocks, loading only the key blocks inside some query's window."""
    return _launch(q, k, v, window, block_m, block_n)


# Inputs of the public and hidden checks ---------------------------------------------------


def _budget(call):
    q, _, _, _, block_m, block_n = call.args
    return max(block_m, block_n) * q.shape[-1]


_COMPARE = kernel_compare(_budget, qkv_rows)


def _calls(g, sizes, spread=2.0):
    return [Call(args=(torch.randn(h, n, d, generator=g) * spread, torch.randn(h, n, d, generator=g),
                       torch.randn(h, n, d, generator=g), w, bm, bn), report=("kernel_memory",))
            for h, n, d, w, bm, bn in sizes]


def _wide_window_calls(seed):
    return _calls(gen(seed), [(2, 70, 16, 20, 16, 16)])


def _narrow_window_calls(seed):
    return _calls(gen(seed), [(1, 75, 16, 5, 32, 16), (1, 40, 32, 1, 16, 16)])


def _long_window_calls(seed):
    return _calls(gen(seed), [(2, 45, 16, 100, 16, 32)], spread=8.0)


def _hidden_calls(seed):
    g = gen(seed)
    n = randint(g, 60, 80)
    n += n % 16 == 0
    return _calls(g, [(1, n, 16, randint(g, 3, 12), 32, 16), (1, n, 16, randint(g, 17, 30), 16, 16)],
                  spread=float(randint(g, 1, 4)))


_HINT = ("query i sees keys max(0, i - window + 1) .. i; a program visits the key blocks that hold at least one "
         "key one of its queries sees, and only those. The reason above says whether the values, the memory the "
         "kernel touched, the size of its loads or the rows of k and v each program read differ.")


# Kept mistakes, each with its hint --------------------------------------------------------


mistakes.add("blocks before the window loaded",
             "your values are right, but each program starts at the first key block and masks the keys before "
             "the window; the blocks that lie wholly before its first query's window must not be loaded at all.",
             lambda q, k, v, w, bm, bn: _launch(q, k, v, w, bm, bn, SKIP_LEFT=False))


mistakes.add("window counted without the query itself",
             "each query sees one key too many: the window counts the query itself, so query i sees keys "
             "i - window + 1 .. i, window keys in all.",
             lambda q, k, v, w, bm, bn: _launch(q, k, v, w, bm, bn, REACH=1))


mistakes.add("no guard for rows with nothing visible yet",
             "a query that sees no key of the first block its program visits has running maximum -inf after "
             "it, and exp(-inf - (-inf)) is NaN; while a row's maximum is -inf, subtract 0 (or start the "
             "maximum at a large finite negative number).",
             lambda q, k, v, w, bm, bn: _launch(q, k, v, w, bm, bn, GUARD=False))


# Kept alternatives (correct answers in other styles) --------------------------------------


def _finite_start(q_ptr, k_ptr, v_ptr, o_ptr, n_tok, win, sm_scale, HD: tl.constexpr, BQ: tl.constexpr,
                  BK: tl.constexpr):
    h = tl.program_id(0)
    b = tl.program_id(1)
    qi = b * BQ + tl.arange(0, BQ)
    hd = tl.arange(0, HD)
    off = h * n_tok * HD
    qq = tl.load(q_ptr + off + qi[:, None] * HD + hd[None, :], mask=qi[:, None] < n_tok, other=0.0) * sm_scale
    mx = tl.full([BQ], -1.0e30, tl.float32)      # finite: exp(mx - mx) never meets -inf - -inf
    den = tl.zeros([BQ], tl.float32)
    num = tl.zeros([BQ, HD], tl.float32)
    first_key = b * BQ - win + 1
    j_first = tl.where(first_key > 0, first_key, 0) // BK
    j_last = tl.cdiv(tl.minimum(n_tok, b * BQ + BQ), BK)
    for j in range(j_first, j_last):
        kj = j * BK + tl.arange(0, BK)
        kk = tl.load(k_ptr + off + kj[:, None] * HD + hd[None, :], mask=kj[:, None] < n_tok, other=0.0)
        vv = tl.load(v_ptr + off + kj[:, None] * HD + hd[None, :], mask=kj[:, None] < n_tok, other=0.0)
        sc = tl.dot(qq, tl.trans(kk))
        seen = (kj[None, :] <= qi[:, None]) & (kj[None, :] > qi[:, None] - win)
        sc = tl.where(seen, sc, -1.0e30)
        mx2 = tl.maximum(mx, tl.max(sc, 1))
        w = tl.where(seen, tl.exp(sc - mx2[:, None]), 0.0)
        den = den * tl.exp(mx - mx2) + tl.sum(w, 1)
        num = num * tl.exp(mx - mx2)[:, None] + tl.dot(w, vv)
        mx = mx2
    tl.store(o_ptr + off + qi[:, None] * HD + hd[None, :], num / den[:, None], mask=qi[:, None] < n_tok)


@alternatives.keep("finite starting maximum, heads first",
                   "running maximum starts at -1e30, weights masked by tl.where, queries pre-scaled, grid "
                   "(heads, blocks), loop over block indices")
def _alt_finite_start(q, k, v, window, block_m, block_n):
    h, n, d = q.shape
    out = torch.zeros_like(q)
    jit(_finite_start)[(h, -(-n // block_m))](q, k, v, out, n, window, d ** -0.5, HD=d, BQ=block_m, BK=block_n)
    return out


def _right_to_left(Q, K, V, O, n, window, scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    hh = tl.program_id(1)
    m_idx = pid * BM + tl.arange(0, BM)
    d_idx = tl.arange(0, D)
    q = tl.load(Q + hh * n * D + m_idx[:, None] * D + d_idx[None, :], mask=m_idx[:, None] < n, other=0.0)
    last_block = (tl.minimum(n, pid * BM + BM) - 1) // BN
    first_block = tl.maximum(pid * BM - (window - 1), 0) // BN
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    # The diagonal block first: every query sees itself there, so no row's maximum stays -inf.
    for step in range(0, last_block - first_block + 1):
        j = last_block - step
        n_idx = j * BN + tl.arange(0, BN)
        kt = tl.load(K + hh * n * D + n_idx[None, :] * D + d_idx[:, None], mask=n_idx[None, :] < n, other=0.0)
        vb = tl.load(V + hh * n * D + n_idx[:, None] * D + d_idx[None, :], mask=n_idx[:, None] < n, other=0.0)
        s = tl.dot(q, kt) * scale
        dist = m_idx[:, None] - n_idx[None, :]
        s = tl.where((dist >= 0) & (dist <= window - 1), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)   # rows past the end see nothing at all
        alpha = tl.exp(m_i - m_use)
        p = tl.exp(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, vb)
        m_i = m_new
    tl.store(O + hh * n * D + m_idx[:, None] * D + d_idx[None, :], acc / l_i[:, None], mask=m_idx[:, None] < n)


@alternatives.keep("right to left", "key blocks from the diagonal back to the window's start, keys loaded "
                   "transposed, a distance test")
def _alt_right_to_left(q, k, v, window, block_m, block_n):
    heads, n, d = q.shape
    out = torch.empty(heads, n, d)
    jit(_right_to_left)[(blocks(n, block_m), heads)](q, k, v, out, n, window, 1 / math.sqrt(d),
                                                     D=d, BM=block_m, BN=block_n)
    return out


def _base_two(Q, K, V, O, n, window, qk_scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    i0 = tl.program_id(0) * BM
    hid = tl.program_id(1)
    r = i0 + tl.arange(0, BM)
    c = tl.arange(0, D)
    row_ok = r < n
    q = tl.load(Q + (hid * n + r)[:, None] * D + c[None, :], mask=row_ok[:, None], other=0.0)
    mx = tl.zeros([BM], tl.float32) - float("inf")
    tot = tl.zeros([BM], tl.float32)
    agg = tl.zeros([BM, D], tl.float32)
    lo = i0 - window + 1
    lo = tl.where(lo < 0, 0, lo)
    for j0 in tl.range(lo - lo % BN, tl.minimum(n, i0 + BM), BN):
        cc = j0 + tl.arange(0, BN)
        key_ok = cc < n
        kb = tl.load(K + (hid * n + cc)[:, None] * D + c[None, :], mask=key_ok[:, None], other=0.0)
        vb = tl.load(V + (hid * n + cc)[:, None] * D + c[None, :], mask=key_ok[:, None], other=0.0)
        t = tl.dot(q, tl.trans(kb)) * qk_scale          # base-2 scores
        inside = (cc[None, :] <= r[:, None]) & (r[:, None] - cc[None, :] < window)
        t = tl.where(inside, t, float("-inf"))
        mx_new = tl.maximum(mx, tl.max(t, 1))
        sub = tl.where(mx_new > float("-inf"), mx_new, 0.0)
        p = tl.math.exp2(t - sub[:, None])
        corr = tl.math.exp2(mx - sub)
        tot = tot * corr + tl.sum(p, 1)
        agg = agg * corr[:, None] + tl.dot(p, vb)
        mx = mx_new
    tl.store(O + (hid * n + r)[:, None] * D + c[None, :], agg / tot[:, None], mask=row_ok[:, None])


@alternatives.keep("exp2 with log2(e) folded", "base-2 exponentials, row masks named once, tl.range over key offsets")
def _alt_base_two(q, k, v, window, block_m, block_n):
    heads, n, d = q.shape
    out = torch.empty_like(q)
    jit(_base_two)[(blocks(n, block_m), heads)](q, k, v, out, n, window, math.log2(math.e) / math.sqrt(d),
                                                D=d, BM=block_m, BN=block_n)
    return out


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch11_ex3", title="A sliding-window forward kernel that skips blocks on both sides",
    name="window_attention", reference=window_attention, points=3,
    checks=[
        Check("2 heads, 70 tokens, window 20, blocks of 16", _wide_window_calls, compare=_COMPARE, hint=_HINT),
        Check("windows narrower than a block: 5 (block_m 32) and 1", _narrow_window_calls, seed=1,
              compare=_COMPARE, hint=_HINT),
        Check("a window longer than the sequence, block_n 32", _long_window_calls, seed=2, compare=_COMPARE,
              hint=_HINT),
        Check("random lengths and windows (hidden)", _hidden_calls, public=False, compare=_COMPARE, hint=_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
