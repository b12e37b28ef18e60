r"""ch11_ex2: A causal forward kernel for queries that come last.

Write a Triton kernel and the function `causal_attention_last(q, k, v, block_m, block_n)` that
launches it. `q` is a contiguous float32 tensor of shape `(heads, n_q, d)`, `k` and `v` of shape
`(heads, n_k, d)`, with `1 <= n_q <= n_k` and `d` 16 or 32; `block_m` and `block_n` are powers of two
(16 or more). The queries are the last `n_q` positions of the sequence (Chapter 5, exercise 4): query
`i` sits at position `n_k - n_q + i` and sees the keys at positions `0 .. n_k - n_q + i`. Scores are
divided by $\sqrt{d}$. Return the tuple `(out, lse)`: `out` of shape `(heads, n_q, d)`, causal
attention of these queries, and `lse` of shape `(heads, n_q)`, the natural log-sum-exp of each query's
visible scores, both float32 and within 1e-4 of the exact values.

Launch one program per block of `block_m` queries of one head (the last block may be shorter; neither
length need be a multiple of its block). A program runs the online softmax over the blocks of
`block_n` keys, and visits only the key blocks holding at least one key its queries see: the blocks
wholly in their future are never loaded. It loads each visited block of keys and of values whole
(masking only the rows past the end of the keys), and no load covers more than
`max(block_m, block_n) * d` elements. Pass `q`, `k` and `v` to the kernel as they are. The check runs
your function on the CPU, the kernel in Triton's interpreter, and records each load and store: which
rows of `k` and `v` each program read, and any load or store outside the tensors the kernel was given
(such a load reads NaN, such a store is dropped, and either fails the check).
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


def _causal_last(Q, K, V, O, L, n_q, n_k, scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                 MASKED: tl.constexpr = True, RESCALE: tl.constexpr = True, SKIP: tl.constexpr = True,
                 SHIFT: tl.constexpr = True, PRESCALE: tl.constexpr = False):
    block, head = tl.program_id(0), tl.program_id(1)
    rows = block * BM + tl.arange(0, BM)
    dims = tl.arange(0, D)
    shift = n_k - n_q if SHIFT else 0
    q_at = Q + head * n_q * D + rows[:, None] * D + dims[None, :]
    if MASKED:
        q = tl.load(q_at, mask=rows[:, None] < n_q, other=0.0)
    else:
        q = tl.load(q_at)
    if PRESCALE:
        q = q * scale
    run_max = tl.full([BM], float("-inf"), tl.float32)
    run_sum = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    stop = tl.minimum(n_k, shift + (block + 1) * BM) if SKIP else n_k
    for start in range(0, stop, BN):
        cols = start + tl.arange(0, BN)
        k_at = K + head * n_k * D + cols[:, None] * D + dims[None, :]
        v_at = V + head * n_k * D + cols[:, None] * D + dims[None, :]
        if MASKED:
            kb = tl.load(k_at, mask=cols[:, None] < n_k, other=0.0)
            vb = tl.load(v_at, mask=cols[:, None] < n_k, other=0.0)
        else:
            kb = tl.load(k_at)
            vb = tl.load(v_at)
        s = tl.dot(q, tl.trans(kb)) * scale
        s = tl.where(cols[None, :] <= shift + rows[:, None], s, float("-inf"))
        new_max = tl.maximum(run_max, tl.max(s, 1))
        p = tl.exp(s - new_max[:, None])
        if RESCALE:
            fade = tl.exp(run_max - new_max)
            run_sum = run_sum * fade + tl.sum(p, 1)
            acc = acc * fade[:, None] + tl.dot(p, vb)
        else:
            run_sum = run_sum + tl.sum(p, 1)
            acc = acc + tl.dot(p, vb)
        run_max = new_max
    o_at = O + head * n_q * D + rows[:, None] * D + dims[None, :]
    if MASKED:
        tl.store(o_at, acc / run_sum[:, None], mask=rows[:, None] < n_q)
        tl.store(L + head * n_q + rows, run_max + tl.log(run_sum), mask=rows < n_q)
    else:
        tl.store(o_at, acc / run_sum[:, None])
        tl.store(L + head * n_q + rows, run_max + tl.log(run_sum))


def _launch(q, k, v, block_m, block_n, **flags):
    heads, n_q, d = q.shape
    out = torch.empty_like(q)
    lse = torch.empty(heads, n_q, dtype=torch.float32)
    jit(_causal_last)[(blocks(n_q, block_m), heads)](q, k, v, out, lse, n_q, k.shape[1], 1.0 / math.sqrt(d),
                                                     D=d, BM=block_m, BN=block_n, **flags)
    return out, lse


def causal_attention_last(q, k, v, block_m, block_n):
    """Causal attention of the last n_q positions, by blocks, skipping future key blocks: (out, lse)."""
    return _launch(q, k, v, block_m, block_n)


# Inputs of the public and hidden checks ---------------------------------------------------


def _budget(call):
    q, _, _, block_m, block_n = call.args
    return max(block_m, block_n) * q.shape[-1]


_COMPARE = kernel_compare(_budget, qkv_rows)


def _calls(g, sizes, spread=1.0):
    return [Call(args=(torch.randn(h, n_q, d, generator=g) * spread, torch.randn(h, n_k, d, generator=g),
                       torch.randn(h, n_k, d, generator=g), bm, bn), report=("kernel_memory",))
            for h, n_q, n_k, d, bm, bn in sizes]


def _square_calls(seed):
    return _calls(gen(seed), [(2, 37, 37, 16, 16, 16)], spread=2.0)


def _last_calls(seed):
    return _calls(gen(seed), [(2, 21, 45, 16, 16, 16), (1, 5, 40, 32, 16, 32)], spread=2.0)


def _sharp_calls(seed):
    return _calls(gen(seed), [(1, 30, 50, 16, 32, 16)], spread=12.0)


def _hidden_calls(seed):
    g = gen(seed)
    n_k = randint(g, 33, 60)
    n_k += n_k % 16 == 0
    n_q = randint(g, 17, n_k)
    n_q += n_q % 16 == 0 and n_q < n_k
    return _calls(g, [(2, n_q, n_k, 16, 16 * randint(g, 1, 2), 16)], spread=float(randint(g, 1, 4)))


_HINT = ("query i sits at position n_k - n_q + i and sees keys 0 .. n_k - n_q + i; out is its attention and lse "
         "the natural log-sum-exp of its scaled scores. The reason above says whether the values, the memory the "
         "kernel touched, the size of its loads or the rows of k and v each program read differ.")


# Kept mistakes, each with its hint --------------------------------------------------------


mistakes.add("no boundary masks",
             "your kernel loads and stores whole blocks with no mask, so a block that runs past the end of the "
             "queries or keys reads and writes memory outside the tensors (here n_q and n_k are not multiples "
             "of the blocks); mask the rows past the end.",
             lambda q, k, v, bm, bn: _launch(q, k, v, bm, bn, MASKED=False))


@mistakes.keep("all keys loaded at once",
               "your kernel loads every key of the head in one block (block_n widened to cover n_k), so each "
               "program holds a whole block-row of the score matrix; loop over blocks of block_n keys instead.")
def _all_keys(q, k, v, block_m, block_n):
    return _launch(q, k, v, block_m, 1 << max(k.shape[1] - 1, 1).bit_length())


mistakes.add("max not carried between blocks",
             "when a key block raises a query's running maximum, the running sum and the accumulated output "
             "kept so far are still scaled by the old maximum: rescale both before adding the new block.",
             lambda q, k, v, bm, bn: _launch(q, k, v, bm, bn, RESCALE=False))


mistakes.add("scale applied twice",
             "the scores are divided by sqrt(d) twice (the queries are scaled, and the scores again); scale once.",
             lambda q, k, v, bm, bn: _launch(q, k, v, bm, bn, PRESCALE=True))


mistakes.add("causal mask without the offset",
             "the queries are the LAST n_q positions: query i sits at position n_k - n_q + i, not i, so your "
             "mask (aligned with the top-left corner) hides keys it may see.",
             lambda q, k, v, bm, bn: _launch(q, k, v, bm, bn, SHIFT=False))


mistakes.add("future key blocks loaded",
             "your values are right, but every program loads every key block and masks the future ones; the "
             "blocks wholly in the future of a program's queries must not be loaded at all.",
             lambda q, k, v, bm, bn: _launch(q, k, v, bm, bn, SKIP=False))


def _base_two_lse(Q, K, V, O, L, n_q, n_k, qk_scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                  NATURAL: tl.constexpr):
    pid_m, h = tl.program_id(0), tl.program_id(1)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_d = tl.arange(0, D)
    past = n_k - n_q
    q = tl.load(Q + h * n_q * D + offs_m[:, None] * D + offs_d[None, :], mask=offs_m[:, None] < n_q, other=0.0)
    q = q * qk_scale                      # log2(e) / sqrt(d) folded into the queries
    m_i = tl.zeros([BM], tl.float32) - float("inf")
    l_i = tl.zeros([BM], tl.float32)
    o_i = tl.zeros([BM, D], tl.float32)
    for lo in range(0, tl.minimum(n_k, past + pid_m * BM + BM), BN):
        offs_n = lo + tl.arange(0, BN)
        ok = offs_n[:, None] < n_k
        kt = tl.load(K + h * n_k * D + offs_n[None, :] * D + offs_d[:, None], mask=offs_n[None, :] < n_k, other=0.0)
        vv = tl.load(V + h * n_k * D + offs_n[:, None] * D + offs_d[None, :], mask=ok, other=0.0)
        t = tl.dot(q, kt)
        t = tl.where(offs_n[None, :] <= past + offs_m[:, None], t, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(t, axis=1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(t - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        o_i = o_i * alpha[:, None] + tl.dot(p, vv)
        m_i = m_new
    tl.store(O + h * n_q * D + offs_m[:, None] * D + offs_d[None, :], o_i / l_i[:, None], mask=offs_m[:, None] < n_q)
    lse2 = m_i + tl.math.log2(l_i)
    if NATURAL:
        lse2 = lse2 * 0.6931471805599453  # ln 2: back from base 2
    tl.store(L + h * n_q + offs_m, lse2, mask=offs_m < n_q)


def _launch_base_two(q, k, v, block_m, block_n, natural):
    heads, n_q, d = q.shape
    out, lse = torch.empty_like(q), torch.empty(heads, n_q)
    jit(_base_two_lse)[(blocks(n_q, block_m), heads)](q, k, v, out, lse, n_q, k.shape[1], 1.4426950408889634 / d ** 0.5,
                                                      D=d, BM=block_m, BN=block_n, NATURAL=natural)
    return out, lse


mistakes.add("log-sum-exp left in base 2",
             "your outputs are right, but the log-sum-exp is in base 2 (computed with exp2 and log2); the contract "
             "asks for the natural logarithm: multiply a base-2 log-sum-exp by ln 2.",
             lambda q, k, v, bm, bn: _launch_base_two(q, k, v, bm, bn, False))


# Kept alternatives (correct answers in other styles) --------------------------------------


alternatives.add("exp2 with log2(e) folded into the queries",
                 "base-2 exponentials, keys loaded transposed, the log-sum-exp converted back with ln 2",
                 lambda q, k, v, bm, bn: _launch_base_two(q, k, v, bm, bn, True))


def _two_stages(q_ptr, k_ptr, v_ptr, o_ptr, l_ptr, stride_h_q, stride_h_k, nq, nk, sm_scale,
                HEAD: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr):
    h = tl.program_id(0)                 # heads on the first grid axis
    qb = tl.program_id(1)
    i = qb * BLOCK_Q + tl.arange(0, BLOCK_Q)
    c = tl.arange(0, HEAD)
    pos = nk - nq + i
    qq = tl.load(q_ptr + h * stride_h_q + i[:, None] * HEAD + c[None, :], mask=i[:, None] < nq, other=0.0)
    mx = tl.full([BLOCK_Q], -1e30, tl.float32)
    den = tl.zeros([BLOCK_Q], tl.float32)
    num = tl.zeros([BLOCK_Q, HEAD], tl.float32)
    first_pos = nk - nq + qb * BLOCK_Q
    full_end = (first_pos + 1) // BLOCK_K * BLOCK_K      # blocks before this end are visible to every query
    full_end = tl.minimum(full_end, nk // BLOCK_K * BLOCK_K)
    last = tl.minimum(nk, first_pos + BLOCK_Q)
    for j0 in range(0, full_end, BLOCK_K):              # stage 1: no mask needed
        j = j0 + tl.arange(0, BLOCK_K)
        kk = tl.load(k_ptr + h * stride_h_k + j[:, None] * HEAD + c[None, :])
        vv = tl.load(v_ptr + h * stride_h_k + j[:, None] * HEAD + c[None, :])
        sc = tl.dot(qq, tl.trans(kk)) * sm_scale
        mx2 = tl.maximum(mx, tl.max(sc, 1))
        w = tl.exp(sc - mx2[:, None])
        den = den * tl.exp(mx - mx2) + tl.sum(w, 1)
        num = num * tl.exp(mx - mx2)[:, None] + tl.dot(w, vv)
        mx = mx2
    for j0 in range(full_end, last, BLOCK_K):           # stage 2: the blocks on the diagonal, masked
        j = j0 + tl.arange(0, BLOCK_K)
        kk = tl.load(k_ptr + h * stride_h_k + j[:, None] * HEAD + c[None, :], mask=j[:, None] < nk, other=0.0)
        vv = tl.load(v_ptr + h * stride_h_k + j[:, None] * HEAD + c[None, :], mask=j[:, None] < nk, other=0.0)
        sc = tl.dot(qq, tl.trans(kk)) * sm_scale
        sc = sc + tl.where(j[None, :] <= pos[:, None], 0.0, -1e30)
        mx2 = tl.maximum(mx, tl.max(sc, 1))
        w = tl.exp(sc - mx2[:, None])
        den = den * tl.exp(mx - mx2) + tl.sum(w, 1)
        num = num * tl.exp(mx - mx2)[:, None] + tl.dot(w, vv)
        mx = mx2
    tl.store(o_ptr + h * stride_h_q + i[:, None] * HEAD + c[None, :], num / den[:, None], mask=i[:, None] < nq)
    tl.store(l_ptr + h * nq + i, mx + tl.log(den), mask=i < nq)


@alternatives.keep("two stages, heads first",
                   "unmasked blocks wholly in the past, then the diagonal blocks masked (an additive -1e30 mask); "
                   "grid (heads, query blocks); strides passed")
def _alt_two_stages(q, k, v, block_m, block_n):
    h, nq, d = q.shape
    out = torch.zeros_like(q)
    lse = q.new_zeros(h, nq)
    jit(_two_stages)[(h, (nq + block_m - 1) // block_m)](q, k, v, out, lse, q.stride(0), k.stride(0), nq, k.shape[1],
                                                          d ** -0.5, HEAD=d, BLOCK_Q=block_m, BLOCK_K=block_n)
    return out, lse


def _flat_rows(Qf, Kf, Vf, Of, Lf, n_q, n_k, scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    # q, k, v viewed as (heads * tokens, d) matrices; one flat program index for (head, block).
    pid = tl.program_id(0)
    per_head = tl.cdiv(n_q, BM)
    head = pid // per_head
    mb = pid % per_head
    r = mb * BM + tl.arange(0, BM)
    e = tl.arange(0, D)
    qrow = head * n_q + r
    qs = tl.load(Qf + qrow[:, None] * D + e[None, :], mask=(r < n_q)[:, None], other=0.0) * scale
    hi_max = tl.full([BM], float("-inf"), tl.float32)
    tot = tl.zeros([BM], tl.float32)
    agg = tl.zeros([BM, D], tl.float32)
    end = tl.minimum(n_k, n_k - n_q + (mb + 1) * BM)
    for kb in range(0, tl.cdiv(end, BN)):
        kc = kb * BN + tl.arange(0, BN)
        krow = head * n_k + kc
        kv_mask = (kc < n_k)[:, None]
        kt = tl.load(Kf + krow[:, None] * D + e[None, :], mask=kv_mask, other=0.0)
        vt = tl.load(Vf + krow[:, None] * D + e[None, :], mask=kv_mask, other=0.0)
        sc = tl.sum(qs[:, None, :] * kt[None, :, :], 2)          # no tl.dot: a broadcast product
        sc = tl.where(kc[None, :] <= (n_k - n_q) + r[:, None], sc, float("-inf"))
        top = tl.maximum(hi_max, tl.max(sc, 1))
        pr = tl.exp(sc - top[:, None])
        f = tl.exp(hi_max - top)
        tot = tot * f + tl.sum(pr, 1)
        agg = agg * f[:, None] + tl.sum(pr[:, :, None] * vt[None, :, :], 1)
        hi_max = top
    tl.store(Of + qrow[:, None] * D + e[None, :], agg / tot[:, None], mask=(r < n_q)[:, None])
    tl.store(Lf + qrow, hi_max + tl.log(tot), mask=r < n_q)


@alternatives.keep("flat grid, broadcast products",
                   "one flat grid axis split into (head, block) in the kernel, queries pre-scaled, products by "
                   "broadcasting and tl.sum instead of tl.dot, block index loop")
def _alt_flat_rows(q, k, v, block_m, block_n):
    heads, n_q, d = q.shape
    out = torch.empty(heads, n_q, d)
    lse = torch.empty(heads * n_q)
    grid = (heads * -(-n_q // block_m),)
    jit(_flat_rows)[grid](q, k, v, out, lse, n_q, k.shape[1], 1 / math.sqrt(d), D=d, BM=block_m, BN=block_n)
    return out, lse.view(heads, n_q)


def _descriptors(Q, K, V, O, L, heads, n_q, n_k, scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    # Tensor descriptors (Triton 3.9's successor of block pointers): the bounds live in the descriptor.
    m_blk, h = tl.program_id(0), tl.program_id(1)
    q_desc = tl.make_tensor_descriptor(Q, shape=[heads, n_q, D], strides=[n_q * D, D, 1], block_shape=[1, BM, D])
    k_desc = tl.make_tensor_descriptor(K, shape=[heads, n_k, D], strides=[n_k * D, D, 1], block_shape=[1, BN, D])
    v_desc = tl.make_tensor_descriptor(V, shape=[heads, n_k, D], strides=[n_k * D, D, 1], block_shape=[1, BN, D])
    q = q_desc.load([h, m_blk * BM, 0]).reshape(BM, D)
    rows = m_blk * BM + tl.arange(0, BM)
    m_run = tl.full([BM], float("-inf"), tl.float32)
    l_run = tl.zeros([BM], tl.float32)
    o_run = tl.zeros([BM, D], tl.float32)
    for n0 in range(0, tl.minimum(n_k, n_k - n_q + (m_blk + 1) * BM), BN):
        kb = k_desc.load([h, n0, 0]).reshape(BN, D)
        vb = v_desc.load([h, n0, 0]).reshape(BN, D)
        cols = n0 + tl.arange(0, BN)
        s = tl.where(cols[None, :] <= n_k - n_q + rows[:, None], tl.dot(q, tl.trans(kb)) * scale, float("-inf"))
        m_next = tl.maximum(m_run, tl.max(s, 1))
        p = tl.exp(s - m_next[:, None])
        l_run = l_run * tl.exp(m_run - m_next) + tl.sum(p, 1)
        o_run = o_run * tl.exp(m_run - m_next)[:, None] + tl.dot(p, vb)
        m_run = m_next
    d_idx = tl.arange(0, D)
    tl.store(O + h * n_q * D + rows[:, None] * D + d_idx[None, :], o_run / l_run[:, None], mask=rows[:, None] < n_q)
    tl.store(L + h * n_q + rows, m_run + tl.log(l_run), mask=rows < n_q)


@alternatives.keep("tensor descriptors", "q, k and v read through tl.make_tensor_descriptor (bounds in the "
                   "descriptor, no masks), outputs stored through pointers")
def _alt_descriptors(q, k, v, block_m, block_n):
    heads, n_q, d = q.shape
    out, lse = torch.empty_like(q), torch.empty(heads, n_q)
    jit(_descriptors)[(blocks(n_q, block_m), heads)](q, k, v, out, lse, heads, n_q, k.shape[1], 1 / math.sqrt(d),
                                                     D=d, BM=block_m, BN=block_n)
    return out, lse


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch11_ex2", title="A causal forward kernel for queries that come last", name="causal_attention_last",
    reference=causal_attention_last, points=3,
    checks=[
        Check("2 heads, 37 queries and 37 keys, blocks of 16", _square_calls, compare=_COMPARE, hint=_HINT),
        Check("the last 21 of 45 and the last 5 of 40 positions", _last_calls, seed=1, compare=_COMPARE,
              hint=_HINT),
        Check("sharp scores: 30 of 50 positions, block_m 32, block_n 16", _sharp_calls, seed=2, compare=_COMPARE,
              hint=_HINT),
        Check("random lengths and blocks (hidden)", _hidden_calls, public=False, compare=_COMPARE, hint=_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
