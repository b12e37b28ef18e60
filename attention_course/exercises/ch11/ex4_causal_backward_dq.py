r"""ch11_ex4: The backward kernel for the queries' gradient.

Write a Triton kernel and the function `causal_backward_dq(q, k, v, out, lse, grad_out, block_m, block_n)`
that launches it. The forward pass is the causal attention of queries that come last (exercise 2):
`q` of shape `(heads, n_q, d)`, `k` and `v` of shape `(heads, n_k, d)` with `1 <= n_q <= n_k` and `d`
16 or 32; query `i` sits at position `n_k - n_q + i` and sees keys `0 .. n_k - n_q + i`; scores are
divided by $\sqrt{d}$. `out` `(heads, n_q, d)` and `lse` `(heads, n_q)` (natural log-sum-exp) are that
forward pass's results, and `grad_out` `(heads, n_q, d)` is the gradient of a loss with respect to `out`;
all are contiguous float32 tensors, and `block_m`, `block_n` are powers of two (16 or more). Return
`dq`, the gradient of the loss with respect to `q`, of shape `(heads, n_q, d)`, float32, within 1e-4.

Launch one program per block of `block_m` queries of one head. A program recomputes its queries'
attention weights from `lse` (never a whole row of scores at once), block of `block_n` keys by block,
visiting only the key blocks that hold at least one key its queries see (the others are never loaded),
and loads each visited block of keys and of values whole (masking only the rows past the end). No load
covers more than `max(block_m, block_n) * d` elements. Pass `q`, `k` and `v` to the kernel as they are.
The check runs your function on the CPU, the kernel in Triton's interpreter, and records which rows
of `k` and `v` each program read, and any load or store outside the tensors the kernel was given (such
a load reads NaN, such a store is dropped, and either fails the check).
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


def _dq_kernel(Q, K, V, O, L, DO, DQ, n_q, n_k, scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
               SKIP: tl.constexpr = True, CAUSAL_P: tl.constexpr = True, DELTA: tl.constexpr = True,
               OUT_SCALE: tl.constexpr = 1, MASKED: tl.constexpr = True, TOP_LEFT: tl.constexpr = False):
    block, head = tl.program_id(0), tl.program_id(1)
    rows = block * BM + tl.arange(0, BM)
    dims = tl.arange(0, D)
    shift = n_k - n_q
    at = head * n_q * D + rows[:, None] * D + dims[None, :]
    if MASKED:
        live = rows[:, None] < n_q
        q = tl.load(Q + at, mask=live, other=0.0)
        g = tl.load(DO + at, mask=live, other=0.0)
        delta = tl.sum(g * tl.load(O + at, mask=live, other=0.0), 1)
        lse = tl.load(L + head * n_q + rows, mask=rows < n_q, other=0.0)
    else:
        q = tl.load(Q + at)
        g = tl.load(DO + at)
        delta = tl.sum(g * tl.load(O + at), 1)
        lse = tl.load(L + head * n_q + rows)
    if not DELTA:
        delta = delta * 0.0
    grad = tl.zeros([BM, D], tl.float32)
    stop = tl.minimum(n_k, shift + (block + 1) * BM) if SKIP else n_k
    for start in range(0, stop, BN):
        cols = start + tl.arange(0, BN)
        kv_at = head * n_k * D + cols[:, None] * D + dims[None, :]
        if MASKED:
            kb = tl.load(K + kv_at, mask=cols[:, None] < n_k, other=0.0)
            vb = tl.load(V + kv_at, mask=cols[:, None] < n_k, other=0.0)
        else:
            kb = tl.load(K + kv_at)
            vb = tl.load(V + kv_at)
        p = tl.exp(tl.dot(q, tl.trans(kb)) * scale - lse[:, None])
        if TOP_LEFT:
            p = tl.where(cols[None, :] <= rows[:, None], p, 0.0)
        elif CAUSAL_P:
            p = tl.where(cols[None, :] <= shift + rows[:, None], p, 0.0)
        else:
            p = tl.where(cols[None, :] < n_k, p, 0.0)
        ds = p * (tl.dot(g, tl.trans(vb)) - delta[:, None])
        grad += tl.dot(ds, kb)
    if OUT_SCALE > 0:
        grad = grad * scale
    if OUT_SCALE > 1:
        grad = grad * scale
    if MASKED:
        tl.store(DQ + at, grad, mask=rows[:, None] < n_q)
    else:
        tl.store(DQ + at, grad)


def _launch(q, k, v, out, lse, grad_out, block_m, block_n, **flags):
    heads, n_q, d = q.shape
    dq = torch.empty_like(q)
    jit(_dq_kernel)[(blocks(n_q, block_m), heads)](q, k, v, out, lse, grad_out, dq, n_q, k.shape[1],
                                                   1.0 / math.sqrt(d), D=d, BM=block_m, BN=block_n, **flags)
    return dq


def causal_backward_dq(q, k, v, out, lse, grad_out, block_m, block_n):
    """The gradient of the loss with respect to q, block by block, from the saved lse."""
    return _launch(q, k, v, out, lse, grad_out, block_m, block_n)


# Inputs of the public and hidden checks ---------------------------------------------------


def _budget(call):
    q, block_m, block_n = call.args[0], call.args[6], call.args[7]
    return max(block_m, block_n) * q.shape[-1]


_COMPARE = kernel_compare(_budget, qkv_rows)


def _calls(g, sizes, spread=1.5):
    calls = []
    for h, n_q, n_k, d, bm, bn in sizes:
        q = torch.randn(h, n_q, d, generator=g) * spread
        k, v = torch.randn(h, n_k, d, generator=g), torch.randn(h, n_k, d, generator=g)
        s = (q.double() @ k.double().transpose(1, 2)) / math.sqrt(d)
        hidden = torch.arange(n_k)[None, :] > (n_k - n_q + torch.arange(n_q))[:, None]
        s = s.masked_fill(hidden, float("-inf"))
        out = (torch.softmax(s, -1) @ v.double()).float()
        lse = torch.logsumexp(s, -1).float()
        calls.append(Call(args=(q, k, v, out, lse, torch.randn(h, n_q, d, generator=g), bm, bn),
                          report=("kernel_memory",)))
    return calls


def _square_calls(seed):
    return _calls(gen(seed), [(2, 37, 37, 16, 16, 16)])


def _last_calls(seed):
    return _calls(gen(seed), [(1, 21, 45, 16, 16, 16), (1, 19, 40, 32, 32, 16)])


def _hidden_calls(seed):
    g = gen(seed)
    n_k = randint(g, 33, 60)
    n_k += n_k % 16 == 0
    n_q = randint(g, 17, n_k)
    n_q += n_q % 16 == 0 and n_q < n_k
    return _calls(g, [(2, n_q, n_k, 16, 16, 16 * randint(g, 1, 2))], spread=float(randint(g, 1, 3)))


_HINT = ("dq is the gradient of the loss with respect to q through softmax(q k^T / sqrt(d)) v with the causal mask "
         "of queries that come last; compare with torch.autograd on a small case. The reason above says whether "
         "the values, the memory the kernel touched, the size of its loads or the rows read differ.")


# Kept mistakes, each with its hint --------------------------------------------------------


mistakes.add("no boundary masks",
             "your kernel loads and stores whole blocks with no mask, so a block that runs past the end of the "
             "queries or keys reads and writes memory outside the tensors; mask the rows past the end.",
             lambda *a: _launch(*a, MASKED=False))


mistakes.add("future key blocks loaded",
             "your values are right, but every program loads every key block; the blocks wholly in the "
             "future of a program's queries must not be loaded at all.",
             lambda *a: _launch(*a, SKIP=False))


mistakes.add("recomputed weights not masked",
             "exp(score - lse) is not zero for a key in a query's future: the recomputed weights need the causal "
             "mask too (in the blocks on the diagonal).",
             lambda *a: _launch(*a, CAUSAL_P=False))


mistakes.add("row term D left out",
             "the gradient of the scores is P * (dP - D), where D for a query is the sum over the head "
             "dimension of grad_out * out; yours leaves D out.",
             lambda *a: _launch(*a, DELTA=False))


mistakes.add("scale applied twice",
             "your dq is 1/sqrt(d) times too small: the scale enters the gradient once (the scores were scaled "
             "once), and yours applies it twice.",
             lambda *a: _launch(*a, OUT_SCALE=2))


mistakes.add("scale left out of dq",
             "your dq is sqrt(d) times too large: the scores were divided by sqrt(d), so that factor carries into "
             "their gradient with respect to q; yours applies it to the scores but not to dq.",
             lambda *a: _launch(*a, OUT_SCALE=0))


mistakes.add("causal mask aligned top-left",
             "your values are right when n_q = n_k and wrong when the queries come last: your causal mask lets "
             "query i see keys up to i, as if it sat at position i; it sits at n_k - n_q + i (the mask of the "
             "recomputed weights must use the queries' positions, as your choice of key blocks does).",
             lambda *a: _launch(*a, TOP_LEFT=True))


# Kept alternatives (correct answers in other styles) --------------------------------------


def _base_two(Q, K, V, O, L, DO, DQ, sh_q, sh_k, n_q, n_k, qk_scale, scale, D: tl.constexpr, BM: tl.constexpr,
              BN: tl.constexpr):
    h = tl.program_id(0)
    m0 = tl.program_id(1) * BM
    i = m0 + tl.arange(0, BM)
    c = tl.arange(0, D)
    ok = i[:, None] < n_q
    q = tl.load(Q + h * sh_q + i[:, None] * D + c[None, :], mask=ok, other=0.0)
    do = tl.load(DO + h * sh_q + i[:, None] * D + c[None, :], mask=ok, other=0.0)
    o = tl.load(O + h * sh_q + i[:, None] * D + c[None, :], mask=ok, other=0.0)
    lse2 = tl.load(L + h * n_q + i, mask=i < n_q, other=0.0) * 1.4426950408889634
    row_term = tl.sum(do * o, axis=1)
    acc = tl.zeros([BM, D], tl.float32)
    for j in range(0, tl.cdiv(tl.minimum(n_k, n_k - n_q + m0 + BM), BN)):
        jj = j * BN + tl.arange(0, BN)
        kt = tl.load(K + h * sh_k + jj[None, :] * D + c[:, None], mask=jj[None, :] < n_k, other=0.0)
        vt = tl.load(V + h * sh_k + jj[None, :] * D + c[:, None], mask=jj[None, :] < n_k, other=0.0)
        p = tl.math.exp2(tl.dot(q, kt) * qk_scale - lse2[:, None])
        p = tl.where(jj[None, :] <= (n_k - n_q) + i[:, None], p, 0.0)
        acc = acc + tl.dot(p * (tl.dot(do, vt) - row_term[:, None]), tl.trans(kt))
    tl.store(DQ + h * sh_q + i[:, None] * D + c[None, :], acc * scale, mask=ok)


@alternatives.keep("exp2 and transposed blocks, heads first",
                   "base-2 exponentials with the lse converted, keys and values loaded transposed, grid (heads, "
                   "blocks), strides passed")
def _alt_base_two(q, k, v, out, lse, grad_out, block_m, block_n):
    heads, n_q, d = q.shape
    dq = torch.zeros_like(q)
    jit(_base_two)[(heads, -(-n_q // block_m))](q, k, v, out, lse, grad_out, dq, q.stride(0), k.stride(0), n_q,
                                                k.shape[1], math.log2(math.e) / math.sqrt(d), 1 / math.sqrt(d),
                                                D=d, BM=block_m, BN=block_n)
    return dq


def _delta_given(Q, K, V, Dl, L, DO, DQ, n_q, n_k, scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    qb, hd = tl.program_id(0), tl.program_id(1)
    r = qb * BM + tl.arange(0, BM)
    e = tl.arange(0, D)
    keep = r < n_q
    qs = tl.load(Q + (hd * n_q + r)[:, None] * D + e[None, :], mask=keep[:, None], other=0.0) * scale
    gr = tl.load(DO + (hd * n_q + r)[:, None] * D + e[None, :], mask=keep[:, None], other=0.0)
    dd = tl.load(Dl + hd * n_q + r, mask=keep, other=0.0)
    ll = tl.load(L + hd * n_q + r, mask=keep, other=float("inf"))
    out = tl.zeros([BM, D], tl.float32)
    last = tl.minimum(n_k, n_k - n_q + qb * BM + BM)
    for kb in range(0, last, BN):
        kc = kb + tl.arange(0, BN)
        kt = tl.load(K + (hd * n_k + kc)[:, None] * D + e[None, :], mask=(kc < n_k)[:, None], other=0.0)
        vt = tl.load(V + (hd * n_k + kc)[:, None] * D + e[None, :], mask=(kc < n_k)[:, None], other=0.0)
        sc = tl.sum(qs[:, None, :] * kt[None, :, :], 2)
        sc = tl.where(kc[None, :] <= n_k - n_q + r[:, None], sc, float("-inf"))
        pr = tl.exp(sc - ll[:, None])
        dp = tl.sum(gr[:, None, :] * vt[None, :, :], 2)
        out += tl.sum((pr * (dp - dd[:, None]))[:, :, None] * kt[None, :, :], 1)
    tl.store(DQ + (hd * n_q + r)[:, None] * D + e[None, :], out * scale, mask=keep[:, None])


@alternatives.keep("D from the launcher, broadcast products",
                   "the row term D = (grad_out * out).sum(-1) computed in torch and passed in, the queries "
                   "pre-scaled, the scores masked to -inf before exp, products by broadcasting and tl.sum")
def _alt_delta_given(q, k, v, out, lse, grad_out, block_m, block_n):
    heads, n_q, d = q.shape
    delta = (grad_out * out).sum(-1)
    dq = torch.empty(heads, n_q, d)
    jit(_delta_given)[(blocks(n_q, block_m), heads)](q, k, v, delta, lse, grad_out, dq, n_q, k.shape[1],
                                                     1 / math.sqrt(d), D=d, BM=block_m, BN=block_n)
    return dq


def _two_stages(Q, K, V, O, L, DO, DQ, n_q, n_k, scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    pid, head = tl.program_id(0), tl.program_id(1)
    m = pid * BM + tl.arange(0, BM)
    dcol = tl.arange(0, D)
    base_q = Q + head * n_q * D
    live = m[:, None] < n_q
    q = tl.load(base_q + m[:, None] * D + dcol[None, :], mask=live, other=0.0)
    g = tl.load(DO + head * n_q * D + m[:, None] * D + dcol[None, :], mask=live, other=0.0)
    row_d = tl.sum(g * tl.load(O + head * n_q * D + m[:, None] * D + dcol[None, :], mask=live, other=0.0), 1)
    lse = tl.load(L + head * n_q + m, mask=m < n_q, other=0.0)
    first_pos = n_k - n_q + pid * BM
    clear = tl.minimum((first_pos + 1) // BN * BN, n_k // BN * BN)   # blocks every query sees whole
    end = tl.minimum(n_k, first_pos + BM)
    dq = tl.zeros([BM, D], tl.float32)
    for j0 in range(0, clear, BN):
        j = j0 + tl.arange(0, BN)
        kb = tl.load(K + head * n_k * D + j[:, None] * D + dcol[None, :])
        vb = tl.load(V + head * n_k * D + j[:, None] * D + dcol[None, :])
        p = tl.exp(tl.dot(q, tl.trans(kb)) * scale - lse[:, None])
        dq += tl.dot(p * (tl.dot(g, tl.trans(vb)) - row_d[:, None]), kb)
    for j0 in range(clear, end, BN):
        j = j0 + tl.arange(0, BN)
        kb = tl.load(K + head * n_k * D + j[:, None] * D + dcol[None, :], mask=j[:, None] < n_k, other=0.0)
        vb = tl.load(V + head * n_k * D + j[:, None] * D + dcol[None, :], mask=j[:, None] < n_k, other=0.0)
        p = tl.exp(tl.dot(q, tl.trans(kb)) * scale - lse[:, None])
        p = p * (j[None, :] <= n_k - n_q + m[:, None]).to(tl.float32)
        dq += tl.dot(p * (tl.dot(g, tl.trans(vb)) - row_d[:, None]), kb)
    tl.store(DQ + head * n_q * D + m[:, None] * D + dcol[None, :], dq * scale, mask=live)


@alternatives.keep("two stages", "key blocks every query sees whole without a mask, then the diagonal blocks "
                   "masked by multiplying with a 0/1 mask")
def _alt_two_stages(q, k, v, out, lse, grad_out, block_m, block_n):
    heads, n_q, d = q.shape
    dq = torch.empty_like(q)
    jit(_two_stages)[(blocks(n_q, block_m), heads)](q, k, v, out, lse, grad_out, dq, n_q, k.shape[1],
                                                    d ** -0.5, D=d, BM=block_m, BN=block_n)
    return dq


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch11_ex4", title="The backward kernel for the queries' gradient", name="causal_backward_dq",
    reference=causal_backward_dq, points=3,
    checks=[
        Check("2 heads, 37 queries and 37 keys, blocks of 16", _square_calls, compare=_COMPARE, hint=_HINT),
        Check("the last 21 of 45 positions (blocks of 16) and the last 19 of 40 (block_m 32, block_n 16)",
              _last_calls, seed=1,
              compare=_COMPARE, hint=_HINT),
        Check("random lengths and blocks (hidden)", _hidden_calls, public=False, compare=_COMPARE, hint=_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
