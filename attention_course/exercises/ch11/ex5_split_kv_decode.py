r"""ch11_ex5: Decoding with the keys split across programs.

When one new token is decoded, each head has a single query, and one program per head would leave
most of a GPU idle. Split the keys instead. Write a Triton kernel (or two) and the function
`split_kv_decode(q, k, v, num_splits, block_n)` that launches it. `q` is a contiguous float32 tensor
of shape `(heads, d)` (one query per head, the last position), `k` and `v` of shape `(heads, n, d)`
(the cache, every key visible), `d` 16 or 32, `num_splits >= 1` an `int` and `block_n` a power of
two (16 or more). Scores are divided by $\sqrt{d}$. Cut the keys into `num_splits` chunks of
`c = ceil(n / num_splits)` keys: chunk `s` holds keys `s * c .. min((s + 1) * c, n) - 1`, and may be
empty. Launch one program per (head, chunk); it reads only its chunk, in blocks of `block_n` keys (no
load covers more than `block_n * d` elements; `c` need not be a multiple of `block_n`), and writes its
chunk's partial result: the attention of the query over the chunk's keys alone, and their natural
log-sum-exp. Then merge the partials of each head into the attention over all its keys (in a second
kernel or in PyTorch). Return the tuple `(out, partial_out, partial_lse)`, float32: `out` of shape
`(heads, d)`, `partial_out` of shape `(heads, num_splits, d)` and `partial_lse` of shape
`(heads, num_splits)`; an empty chunk has partial output zeros and log-sum-exp `-inf`. Results must be
within 1e-4, also for scores far above 88 (where `exp` overflows in float32). Pass `q`, `k` and `v` to
the kernel as they are. The check runs your
function on the CPU, the kernel in Triton's interpreter, and records which keys and values each program
read, and any load or store outside the tensors the kernel was given (such a load reads NaN, such a store
is dropped, and either fails the check).
"""
from __future__ import annotations

import math

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import jit, kernel_compare, launches, qkv_rows, rows_by_program

tl = None  # triton.language, set when a kernel is first launched (_common.jit)

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _split_kernel(Q, K, V, PO, PL, n, chunk, num_splits, scale, D: tl.constexpr, BN: tl.constexpr,
                  CHUNK_END: tl.constexpr = True, ZERO_EMPTY: tl.constexpr = True, LOAD_TO_N: tl.constexpr = False,
                  LSE_MAX: tl.constexpr = False):
    head, split = tl.program_id(0), tl.program_id(1)
    dims = tl.arange(0, D)
    q = tl.load(Q + head * D + dims) * scale
    lo = split * chunk
    hi = tl.minimum(lo + chunk, n) if CHUNK_END else n
    run_max = tl.full((), float("-inf"), tl.float32)
    run_sum = tl.zeros((), tl.float32)
    acc = tl.zeros([D], tl.float32)
    for start in range(lo, tl.minimum(lo + chunk, n), BN):
        cols = start + tl.arange(0, BN)
        inside = cols < hi
        loaded = cols < n if LOAD_TO_N else inside
        kb = tl.load(K + head * n * D + cols[:, None] * D + dims[None, :], mask=loaded[:, None], other=0.0)
        vb = tl.load(V + head * n * D + cols[:, None] * D + dims[None, :], mask=loaded[:, None], other=0.0)
        s = tl.where(inside, tl.sum(kb * q[None, :], 1), float("-inf"))
        new_max = tl.maximum(run_max, tl.max(s, 0))
        p = tl.exp(s - new_max)
        fade = tl.exp(run_max - new_max)
        run_sum = run_sum * fade + tl.sum(p, 0)
        acc = acc * fade + tl.sum(p[:, None] * vb, 0)
        run_max = new_max
    if ZERO_EMPTY:
        tl.store(PO + (head * num_splits + split) * D + dims, acc / tl.maximum(run_sum, 1e-30))
    else:
        tl.store(PO + (head * num_splits + split) * D + dims, acc / run_sum)
    if LSE_MAX:
        tl.store(PL + head * num_splits + split, run_max)
    else:
        tl.store(PL + head * num_splits + split, run_max + tl.log(run_sum))


def _merge_kernel(PO, PL, O, num_splits, D: tl.constexpr, BS: tl.constexpr, SHIFT: tl.constexpr = True,
                  WEIGHTED: tl.constexpr = True):
    head = tl.program_id(0)
    parts = tl.arange(0, BS)
    dims = tl.arange(0, D)
    lse = tl.load(PL + head * num_splits + parts, mask=parts < num_splits, other=float("-inf"))
    po = tl.load(PO + (head * num_splits + parts)[:, None] * D + dims[None, :],
                 mask=(parts < num_splits)[:, None], other=0.0)
    top = tl.max(lse, 0) if SHIFT else 0.0
    w = tl.exp(lse - top)
    if not WEIGHTED:
        w = tl.where(lse > float("-inf"), 1.0, 0.0)
    tl.store(O + head * D + dims, tl.sum(w[:, None] * po, 0) / tl.sum(w, 0))


def _launch(q, k, v, num_splits, block_n, shift=True, weighted=True, **flags):
    heads, n, d = k.shape
    chunk = -(-n // num_splits)
    partial_out = torch.empty(heads, num_splits, d)
    partial_lse = torch.empty(heads, num_splits)
    out = torch.empty(heads, d)
    jit(_split_kernel)[(heads, num_splits)](q, k, v, partial_out, partial_lse, n, chunk, num_splits,
                                            1.0 / math.sqrt(d), D=d, BN=block_n, **flags)
    wide = 1 << max(num_splits - 1, 0).bit_length()
    jit(_merge_kernel)[(heads,)](partial_out, partial_lse, out, num_splits, D=d, BS=max(wide, 2),
                                 SHIFT=shift, WEIGHTED=weighted)
    return out, partial_out, partial_lse


def split_kv_decode(q, k, v, num_splits, block_n):
    """One decoding step with the keys cut into num_splits chunks: (out, partial_out, partial_lse)."""
    return _launch(q, k, v, num_splits, block_n)


# Inputs of the public and hidden checks ---------------------------------------------------


def _budget(call):
    return call.args[4] * call.args[0].shape[-1]


_MEMORY = kernel_compare(_budget, qkv_rows, names=("q", "k", "v"))
_VALUES = Check("values", lambda seed: [], hint="", rtol=1e-4, atol=1e-4)


def _chunks_read(outcome, call) -> dict:
    """``{program: {(head, chunk)}}``: the chunks of the keys and values each program read."""
    heads, n, d = call.args[1].shape
    c = -(-n // call.args[3])
    out: dict = {}
    for pos in (1, 2):
        for program, rows in rows_by_program(outcome, pos, d).items():
            out.setdefault(program, set()).update((r // n, r % n // c) for r in rows)
    return out


def _COMPARE(got, want, calls):
    """The kernel compare of the chapter, then the chunks each program read (one program per head and
    non-empty chunk reads keys and values, all of them in its chunk). An expected outcome that launched no
    kernel (the kept mistake in PyTorch alone) is matched by values computed with no kernel."""
    from ...checks.checking import compare_outcome
    many = len(calls) > 1
    if all(w["status"] == "ok" and not launches(w) for w in want):
        for i, (mine, theirs, call) in enumerate(zip(got, want, calls)):
            where = f"call {i + 1} of {len(calls)}: " if many else ""
            if mine["status"] == "ok" and launches(mine):
                return where + "a Triton kernel was launched where the other answer launches none"
            reason = compare_outcome(mine, theirs, _VALUES, call)
            if reason:
                return where + reason
        return None
    reason = _MEMORY(got, want, calls)
    if reason:
        return reason
    for i, (mine, theirs, call) in enumerate(zip(got, want, calls)):
        if mine["status"] != "ok" or theirs["status"] != "ok":
            continue
        where = f"call {i + 1} of {len(calls)}: " if many else ""
        m_read, t_read = _chunks_read(mine, call), _chunks_read(theirs, call)
        if len(m_read) != len(t_read):
            return (where + f"{len(m_read)} programs of the kernel read keys or values; {len(t_read)} are expected, "
                    "one per head and non-empty chunk")
        m_wide = sorted(sorted(chunks) for chunks in m_read.values() if len(chunks) > 1)
        t_wide = [chunks for chunks in t_read.values() if len(chunks) > 1]
        if m_wide and not t_wide:
            (h, first), (_, last) = m_wide[0][0], m_wide[0][-1]
            return (where + f"a program read keys or values of head {h} in chunks {first} to {last}; each program "
                    "reads only the keys and values of its own chunk")
        if t_wide and not m_wide:
            return where + "each program reads only its chunk where the other reads past it"
    return None


def _calls(g, sizes, spread=2.0):
    return [Call(args=(torch.randn(h, d, generator=g) * spread, torch.randn(h, n, d, generator=g),
                       torch.randn(h, n, d, generator=g), splits, bn), report=("kernel_memory",))
            for h, n, d, splits, bn in sizes]


def _uneven_calls(seed):
    return _calls(gen(seed), [(2, 50, 16, 4, 16)])        # chunks of 13 keys in blocks of 16


def _empty_chunk_calls(seed):
    return _calls(gen(seed), [(2, 33, 16, 8, 16), (1, 20, 32, 1, 16)])   # chunks of 5: the last is empty


def _sharp_calls(seed):
    g = gen(seed)
    q = torch.randn(2, 16, generator=g)
    q = q / q.norm(dim=-1, keepdim=True) * 600.0
    k = torch.randn(2, 60, 16, generator=g)
    k = k / k.norm(dim=-1, keepdim=True)
    k[:, randint(g, 0, 59)] = q / 600.0                  # one score of exactly 150 per head
    return [Call(args=(q, k, torch.randn(2, 60, 16, generator=g), 3, 16), report=("kernel_memory",))]


def _hidden_calls(seed):
    g = gen(seed)
    splits = randint(g, 3, 7)
    n = splits * randint(g, 5, 12) - randint(g, 1, 4)
    calls = _calls(g, [(2, n, 16, splits, 16)], spread=float(randint(g, 1, 3)))
    return calls + _calls(g, [(1, randint(g, 17, 23), 16, 8, 16)]) + _sharp_calls(seed)


_HINT = ("chunk s holds keys s*c .. min((s+1)*c, n) - 1 with c = ceil(n / num_splits); each partial is the attention "
         "over that chunk alone with its natural log-sum-exp (zeros and -inf for an empty chunk), and out merges "
         "them, each partial from one program that reads its own chunk. The reason above says which of the three "
         "differs, or which keys the programs read.")


# Kept mistakes, each with its hint --------------------------------------------------------


mistakes.add("chunk's end not masked",
             "a chunk ends at min((s + 1) * c, n), not at n: your programs mask only the end of the keys, so a "
             "block that runs past its chunk takes keys of the next chunk as well.",
             lambda *a: _launch(*a, CHUNK_END=False))


mistakes.add("empty chunk gives NaN",
             "an empty chunk has sum 0 and maximum -inf: its partial output must be zeros, not 0/0 (NaN), which "
             "also spoils the merged output.",
             lambda *a: _launch(*a, ZERO_EMPTY=False))


mistakes.add("partials averaged",
             "you averaged the partial outputs; the chunks are not equal shares: each one's weight is its share "
             "of the whole softmax sum, which its log-sum-exp tells.",
             lambda *a: _launch(*a, weighted=False))


mistakes.add("merge without the largest lse subtracted",
             "with scores far above 88, exp(lse) overflows float32 to inf and the merge gives NaN; subtract the "
             "largest partial log-sum-exp before exponentiating.",
             lambda *a: _launch(*a, shift=False))


mistakes.add("keys of the next chunk loaded",
             "your values are right, but your programs load keys and values past the end of their chunk (the "
             "mask of the loads stops at n, the mask of the scores at the chunk's end): a block that runs past its "
             "chunk must not load the next chunk's keys at all.",
             lambda *a: _launch(*a, LOAD_TO_N=True))


mistakes.add("chunk's maximum stored as its log-sum-exp",
             "your partial_lse holds each chunk's largest score, not its log-sum-exp: the running sum is left "
             "out of it, so the merge weighs the chunks wrongly too.",
             lambda *a: _launch(*a, LSE_MAX=True))


def _per_head(Q, K, V, PO, PL, n, chunk, num_splits, scale, D: tl.constexpr, BN: tl.constexpr):
    head = tl.program_id(0)                         # one program per head walks every chunk in turn
    dims = tl.arange(0, D)
    q = tl.load(Q + head * D + dims) * scale
    for split in range(0, num_splits):
        lo = split * chunk
        hi = tl.minimum(lo + chunk, n)
        run_max = tl.full((), float("-inf"), tl.float32)
        run_sum = tl.zeros((), tl.float32)
        acc = tl.zeros([D], tl.float32)
        for start in range(lo, hi, BN):
            cols = start + tl.arange(0, BN)
            inside = cols < hi
            kb = tl.load(K + head * n * D + cols[:, None] * D + dims[None, :], mask=inside[:, None], other=0.0)
            vb = tl.load(V + head * n * D + cols[:, None] * D + dims[None, :], mask=inside[:, None], other=0.0)
            sc = tl.where(inside, tl.sum(kb * q[None, :], 1), float("-inf"))
            new_max = tl.maximum(run_max, tl.max(sc, 0))
            p = tl.exp(sc - new_max)
            fade = tl.exp(run_max - new_max)
            run_sum = run_sum * fade + tl.sum(p, 0)
            acc = acc * fade + tl.sum(p[:, None] * vb, 0)
            run_max = new_max
        tl.store(PO + (head * num_splits + split) * D + dims, acc / tl.maximum(run_sum, 1e-30))
        tl.store(PL + head * num_splits + split, run_max + tl.log(run_sum))


@mistakes.keep("one program per head, looping over the chunks",
               "your values are right, but your kernel runs one program per head that walks all of its chunks; "
               "the point of the split is one program per (head, chunk): a grid of heads by chunks.")
def _one_program_per_head(q, k, v, num_splits, block_n):
    heads, n, d = k.shape
    chunk = -(-n // num_splits)
    po, pl = torch.empty(heads, num_splits, d), torch.empty(heads, num_splits)
    jit(_per_head)[(heads,)](q, k, v, po, pl, n, chunk, num_splits, 1.0 / math.sqrt(d), D=d, BN=block_n)
    w = torch.softmax(pl, dim=1)
    return (w[..., None] * po).sum(1), po, pl


@mistakes.keep("no kernel launched",
               "your function computes the attention in PyTorch and launches no Triton kernel: the exercise is the "
               "kernel. Write the chunk's partial result in a @triton.jit function and launch it from "
               "split_kv_decode over a grid of heads by chunks (the merge may stay in PyTorch).")
def _torch_only(q, k, v, num_splits, block_n):
    heads, n, d = k.shape
    c = -(-n // num_splits)
    po, pl = torch.zeros(heads, num_splits, d), torch.full((heads, num_splits), -math.inf)
    for s in range(num_splits):
        if s * c < n:
            sc = torch.einsum("hd,hnd->hn", q, k[:, s * c:(s + 1) * c]) / math.sqrt(d)
            pl[:, s] = torch.logsumexp(sc, -1)
            po[:, s] = torch.einsum("hn,hnd->hd", torch.softmax(sc, -1), v[:, s * c:(s + 1) * c])
    w = torch.softmax(pl, dim=1)
    return (w[..., None] * po).sum(1), po, pl


# Kept alternatives (correct answers in other styles) --------------------------------------


def _partials_base_two(Q, K, V, PO, PL, n, chunk, S, qk_scale, D: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)                     # one flat axis: pid = head * S + split
    h = pid // S
    s_idx = pid % S
    c = tl.arange(0, D)
    q = tl.load(Q + h * D + c) * qk_scale
    first = s_idx * chunk
    end = tl.minimum(first + chunk, n)
    m = -float("inf")
    z = 0.0
    num = tl.zeros([D], tl.float32)
    j0 = first
    while j0 < end:
        j = j0 + tl.arange(0, BN)
        live = j < end
        kk = tl.load(K + (h * n + j)[:, None] * D + c[None, :], mask=live[:, None], other=0.0)
        vv = tl.load(V + (h * n + j)[:, None] * D + c[None, :], mask=live[:, None], other=0.0)
        t = tl.sum(kk * q[None, :], axis=1)
        t = tl.where(live, t, -float("inf"))
        m2 = tl.maximum(m, tl.max(t, axis=0))
        p = tl.math.exp2(t - m2)
        a = tl.math.exp2(m - m2)
        z = z * a + tl.sum(p, axis=0)
        num = num * a + tl.sum(p[:, None] * vv, axis=0)
        m = m2
        j0 += BN
    empty = end <= first
    tl.store(PO + pid * D + c, tl.where(empty, 0.0, num / z))
    tl.store(PL + pid, tl.where(empty, -float("inf"), (m + tl.math.log2(z)) * 0.6931471805599453))


@alternatives.keep("base 2 partials, torch merge",
                   "exp2 partials on a flat grid with a while loop; the merge in PyTorch with logsumexp")
def _alt_base_two(q, k, v, num_splits, block_n):
    heads, n, d = k.shape
    chunk = math.ceil(n / num_splits)
    po = torch.zeros(heads, num_splits, d)
    pl = torch.zeros(heads, num_splits)
    jit(_partials_base_two)[(heads * num_splits,)](q, k, v, po, pl, n, chunk, num_splits,
                                                   math.log2(math.e) / math.sqrt(d), D=d, BN=block_n)
    total = torch.logsumexp(pl, dim=1, keepdim=True)
    share = torch.exp(pl - total)
    return (share[..., None] * po).sum(1), po, pl


def _split_rows(Q, K, V, PO, PL, n, chunk, num_splits, scale, D: tl.constexpr, BN: tl.constexpr):
    s = tl.program_id(0)                        # splits on the first axis, heads on the second
    h = tl.program_id(1)
    e = tl.arange(0, D)
    q = tl.load(Q + h * D + e)
    k_lo = s * chunk
    k_hi = tl.minimum(k_lo + chunk, n)
    mx = tl.full([BN], float("-inf"), tl.float32)   # statistics per lane, merged at the end
    sm = tl.zeros([BN], tl.float32)
    ac = tl.zeros([BN, D], tl.float32)
    for b in range(0, tl.cdiv(chunk, BN)):
        j = k_lo + b * BN + tl.arange(0, BN)
        ok = (j < k_hi)
        kk = tl.load(K + h * n * D + j[:, None] * D + e[None, :], mask=ok[:, None], other=0.0)
        vv = tl.load(V + h * n * D + j[:, None] * D + e[None, :], mask=ok[:, None], other=0.0)
        t = tl.where(ok, tl.sum(kk * q[None, :], 1) * scale, float("-inf"))
        mx2 = tl.maximum(mx, t)
        base = tl.where(mx2 == float("-inf"), 0.0, mx2)
        f = tl.exp(mx - base)
        p = tl.exp(t - base)
        sm = sm * f + p
        ac = ac * f[:, None] + p[:, None] * vv
        mx = mx2
    top = tl.max(mx, 0)
    top_safe = tl.where(top == float("-inf"), 0.0, top)
    f = tl.exp(mx - top_safe)
    total = tl.sum(sm * f, 0)
    num = tl.sum(ac * f[:, None], 0)
    tl.store(PO + (h * num_splits + s) * D + e, tl.where(total > 0, num / total, 0.0))
    tl.store(PL + h * num_splits + s, tl.where(total > 0, top_safe + tl.log(total), float("-inf")))


def _merge_loop(PO, PL, O, num_splits, D: tl.constexpr):
    h = tl.program_id(0)
    e = tl.arange(0, D)
    big = float("-inf")
    for s in range(0, num_splits):
        big = tl.maximum(big, tl.load(PL + h * num_splits + s))
    acc = tl.zeros([D], tl.float32)
    wsum = 0.0
    for s in range(0, num_splits):
        w = tl.exp(tl.load(PL + h * num_splits + s) - big)
        acc += w * tl.load(PO + (h * num_splits + s) * D + e)
        wsum += w
    tl.store(O + h * D + e, acc / wsum)


@alternatives.keep("per-lane statistics, merge by a loop",
                   "a running max and sum per lane merged at the chunk's end; grid (splits, heads); the merge "
                   "kernel loops over the partials one at a time")
def _alt_split_rows(q, k, v, num_splits, block_n):
    heads, n, d = k.shape
    chunk = (n + num_splits - 1) // num_splits
    po, pl, out = q.new_empty(heads, num_splits, d), q.new_empty(heads, num_splits), q.new_empty(heads, d)
    jit(_split_rows)[(num_splits, heads)](q, k, v, po, pl, n, chunk, num_splits, 1 / math.sqrt(d), D=d, BN=block_n)
    jit(_merge_loop)[(heads,)](po, pl, out, num_splits, D=d)
    return out, po, pl


def _early_exit(Q, K, V, PO, PL, n, chunk, num_splits, scale, D: tl.constexpr, BN: tl.constexpr):
    h, s = tl.program_id(0), tl.program_id(1)
    d_idx = tl.arange(0, D)
    slot = h * num_splits + s
    start = s * chunk
    if start >= n:                                  # an empty chunk: zeros and -inf, nothing loaded
        tl.store(PO + slot * D + d_idx, tl.zeros([D], tl.float32))
        tl.store(PL + slot, float("-inf"))
    else:
        stop = tl.minimum(start + chunk, n)
        q = tl.load(Q + h * D + d_idx)
        m_i = -1.0e30
        l_i = 0.0
        acc = tl.zeros([D], tl.float32)
        for off in range(start, stop, BN):
            idx = off + tl.arange(0, BN)
            kb = tl.load(K + h * n * D + idx[:, None] * D + d_idx[None, :], mask=idx[:, None] < stop, other=0.0)
            vb = tl.load(V + h * n * D + idx[:, None] * D + d_idx[None, :], mask=idx[:, None] < stop, other=0.0)
            sc = tl.sum(kb * q[None, :], 1) * scale + tl.where(idx < stop, 0.0, -1.0e30)
            m_new = tl.maximum(m_i, tl.max(sc, 0))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(sc - m_new)
            l_i = l_i * alpha + tl.sum(p, 0)
            acc = acc * alpha + tl.sum(p[:, None] * vb, 0)
            m_i = m_new
        tl.store(PO + slot * D + d_idx, acc / l_i)
        tl.store(PL + slot, m_i + tl.log(l_i))


@alternatives.keep("empty chunks handled first, additive mask",
                   "an if/else in the kernel for an empty chunk, a finite -1e30 mask added to the scores; the "
                   "merge in PyTorch with the largest lse subtracted")
def _alt_early_exit(q, k, v, num_splits, block_n):
    heads, n, d = k.shape
    chunk = -(-n // num_splits)
    po, pl = torch.empty(heads, num_splits, d), torch.empty(heads, num_splits)
    jit(_early_exit)[(heads, num_splits)](q, k, v, po, pl, n, chunk, num_splits, d ** -0.5, D=d, BN=block_n)
    top = pl.max(dim=1, keepdim=True).values
    w = torch.exp(pl - top)
    return torch.einsum("hs,hsd->hd", w, po) / w.sum(1, keepdim=True), po, pl


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch11_ex5", title="Decoding with the keys split across programs", name="split_kv_decode",
    reference=split_kv_decode, points=3,
    checks=[
        Check("2 heads, 50 keys in 4 chunks of 13, blocks of 16", _uneven_calls, compare=_COMPARE, hint=_HINT),
        Check("33 keys in 8 chunks of 5 (the last one empty), and a single chunk", _empty_chunk_calls, seed=1,
              compare=_COMPARE, hint=_HINT),
        Check("scores up to 150, 3 chunks", _sharp_calls, seed=2, compare=_COMPARE, hint=_HINT),
        Check("random lengths and numbers of chunks (hidden)", _hidden_calls, public=False, compare=_COMPARE,
              hint=_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
