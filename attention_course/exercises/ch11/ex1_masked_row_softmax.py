r"""ch11_ex1: A masked softmax kernel, block by block.

Write a Triton kernel and the function `masked_row_softmax(x, valid_lens, block)` that launches it.
`x` is a contiguous float32 tensor of shape `(rows, n)`, `valid_lens` an int64 tensor of shape
`(rows,)` with values in `0 .. n`, and `block` a power of two (16 or more). Return a new float32
tensor of shape `(rows, n)` whose row `r` holds the softmax of `x[r, :valid_lens[r]]` in its first
`valid_lens[r]` entries and zeros after them; a row of valid length 0 is all zeros (Chapter 3's rule).
Launch one program per row. A program reads its row in blocks of `block` columns (`n` need not be a
multiple of `block`, and may be several blocks long), so no single load of the kernel covers more than
`block` elements; keep a running maximum and a running sum across the blocks, then write the weights.
Pass `x` to the kernel as it is: each row must be read by a program from `x` itself.
Results must agree with `torch.softmax` to within 1e-5, also for scores near +100 or near -150.
The check runs your function on the CPU, with the kernel in Triton's interpreter, and records each
load and store of the kernel: a load or store outside the tensors the kernel was given reads NaN or is
dropped, and fails the check.
"""
from __future__ import annotations

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import jit, kernel_compare

tl = None  # triton.language, set when a kernel is first launched (_common.jit)

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _softmax_rows(x_ptr, lens_ptr, out_ptr, n_cols, BLOCK: tl.constexpr, CARRY: tl.constexpr = True,
                  MAX_OF_VALID: tl.constexpr = True, ZERO_EMPTY: tl.constexpr = True):
    row = tl.program_id(0)
    length = tl.load(lens_ptr + row).to(tl.int32)
    first = tl.arange(0, BLOCK)
    top = tl.full((), float("-inf"), tl.float32)
    total = tl.zeros((), tl.float32)
    for start in range(0, length, BLOCK):
        cols = start + first
        keep = cols < length
        if MAX_OF_VALID:
            xs = tl.load(x_ptr + row * n_cols + cols, mask=keep, other=float("-inf"))
        else:
            xs = tl.load(x_ptr + row * n_cols + cols, mask=keep, other=0.0)
        new_top = tl.maximum(top, tl.max(xs, 0))
        if CARRY:
            total = total * tl.exp(top - new_top)
        total += tl.sum(tl.where(keep, tl.exp(xs - new_top), 0.0), 0)
        top = new_top
    for start in range(0, n_cols, BLOCK):
        cols = start + first
        inside = cols < n_cols
        keep = cols < length
        xs = tl.load(x_ptr + row * n_cols + cols, mask=keep, other=float("-inf"))
        w = tl.exp(xs - top) / total
        if ZERO_EMPTY:
            w = tl.where(keep, w, 0.0)
        tl.store(out_ptr + row * n_cols + cols, w, mask=inside)


def masked_row_softmax(x, valid_lens, block):
    """Softmax of each row of x over its first valid_lens[r] entries (zeros after), by a kernel."""
    out = torch.empty_like(x)
    jit(_softmax_rows)[(x.shape[0],)](x, valid_lens, out, x.shape[1], BLOCK=block)
    return out


# Inputs of the public and hidden checks ---------------------------------------------------


def _budget(call):
    return call.args[2]


def _row_size(call):
    return {0: call.args[0].shape[1]}


_COMPARE = kernel_compare(_budget, _row_size, names=("x",), atol=1e-5)


def _call(x, lens, block):
    return Call(args=(x.float().contiguous(), torch.tensor(lens, dtype=torch.int64), block),
                report=("kernel_memory",))


def _ordinary_calls(seed):
    g = gen(seed)
    x = torch.randn(5, 37, generator=g) * 3
    x[2, 20:] += torch.linspace(1, 8, 17)     # a later block raises the row's maximum
    return [_call(x, [37, 0, 29, 21, 1], 16)]


def _far_from_zero_calls(seed):
    g = gen(seed)
    x = torch.randn(4, 50, generator=g)
    x[0] += 100.0
    x[1] -= 150.0
    x[2] = x[2] * 40
    x[3, 30:] += 100.0
    return [_call(x, [45, 37, 50, 43], 16)]


def _wide_block_calls(seed):
    g = gen(seed)
    return [_call(torch.randn(3, 20, generator=g) * 2, [20, 13, 0], 32),
            _call(torch.randn(2, 70, generator=g) * 2, [70, 66], 16)]


def _hidden_calls(seed):
    g = gen(seed)
    block = 16 * randint(g, 1, 2)
    n = randint(g, 2 * block + 1, 3 * block - 1)
    rows = randint(g, 5, 7)
    x = torch.randn(rows, n, generator=g) * randint(g, 1, 4)
    x[0] -= 150.0
    x[1, block:] += 10.0 + 5 * torch.rand(n - block, generator=g)
    lens = [randint(g, 1, n) for _ in range(rows)]
    lens[0], lens[1], lens[2] = n - randint(g, 1, block - 1), n - randint(g, 1, block - 1), 0
    return [_call(x, lens, block)]


_HINT = ("row r must be softmax(x[r, :valid_lens[r]]) followed by zeros, computed block by block with a running "
         "maximum and sum; compare your rows with torch.softmax on the valid entries, and read the reason above.")


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("whole row loaded at once",
               "your kernel loads a whole row in one block (a block as wide as the row, rounded up to a power of "
               "two), not blocks of `block` columns; a row can be longer than any block a program may hold.")
def _whole_row(x, valid_lens, block):
    out = torch.empty_like(x)
    wide = 1 << max(x.shape[1] - 1, 1).bit_length()
    jit(_softmax_rows)[(x.shape[0],)](x, valid_lens, out, x.shape[1], BLOCK=wide)
    return out


@mistakes.keep("max not carried between blocks",
               "when a later block raises the running maximum, the running sum kept so far is still in terms of "
               "the old maximum: it must be rescaled before the new block's terms are added.")
def _max_not_carried(x, valid_lens, block):
    out = torch.empty_like(x)
    jit(_softmax_rows)[(x.shape[0],)](x, valid_lens, out, x.shape[1], BLOCK=block, CARRY=False)
    return out


@mistakes.keep("masked entries enter the maximum",
               "the entries beyond a row's valid length are loaded as 0.0 and so enter the maximum: for a row "
               "whose scores are all far below 0, every exp underflows to 0 and the weights are 0/0. Masked "
               "entries must not take part in the maximum.")
def _zeros_in_max(x, valid_lens, block):
    out = torch.empty_like(x)
    jit(_softmax_rows)[(x.shape[0],)](x, valid_lens, out, x.shape[1], BLOCK=block, MAX_OF_VALID=False)
    return out


@mistakes.keep("row of length 0 gives NaN",
               "a row of valid length 0 must be all zeros; yours gives NaN (its maximum stays -inf and its sum "
               "0, so exp(-inf - (-inf)) / 0 is computed and stored).")
def _empty_row_nan(x, valid_lens, block):
    out = torch.empty_like(x)
    jit(_softmax_rows)[(x.shape[0],)](x, valid_lens, out, x.shape[1], BLOCK=block, ZERO_EMPTY=False)
    return out


# A student's two-pass kernel over all n columns, with one of three slips (MODE): 1 the padding
# loaded as 0.0 enters the maximum and the sum; 2 each block's sum taken against that block's own
# maximum, none carried; 3 the first pass bounded by n instead of the row's valid length.
def _over_all_columns(x_ptr, lens_ptr, out_ptr, n_cols, BLOCK: tl.constexpr, MODE: tl.constexpr):
    row = tl.program_id(0)
    length = tl.load(lens_ptr + row)
    top = tl.full((), float("-inf"), tl.float32)
    total = tl.zeros((), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        if MODE == 1:
            xs = tl.load(x_ptr + row * n_cols + cols, mask=cols < length, other=0.0)
        elif MODE == 3:
            xs = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf"))
        else:
            xs = tl.load(x_ptr + row * n_cols + cols, mask=cols < length, other=float("-inf"))
        new_top = tl.maximum(top, tl.max(xs, 0))
        safe = tl.where(new_top == float("-inf"), 0.0, new_top)
        if MODE == 2:
            own = tl.max(xs, 0)
            total += tl.sum(tl.exp(xs - tl.where(own == float("-inf"), 0.0, own)), 0)
            new_top = own
        else:
            total = total * tl.exp(top - safe) + tl.sum(tl.exp(xs - safe), 0)
        top = new_top
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        xs = tl.load(x_ptr + row * n_cols + cols, mask=cols < length, other=float("-inf"))
        tl.store(out_ptr + row * n_cols + cols, tl.where(cols < length, tl.exp(xs - top) / total, 0.0),
                 mask=cols < n_cols)


def _slip(mode):
    def launch(x, valid_lens, block):
        out = torch.empty_like(x)
        jit(_over_all_columns)[(x.shape[0],)](x, valid_lens, out, x.shape[1], BLOCK=block, MODE=mode)
        return out
    return launch


mistakes.keep("padding loaded as 0.0",
              "the entries past a row's valid length are loaded as 0.0 (`other=0.0`), so they take part in the "
              "maximum and each adds a term to the sum: a padded entry must add nothing, so load it as -inf "
              "(or leave it out of both with tl.where), as the chapter's padding example shows.")(_slip(1))
mistakes.keep("each block's own maximum",
              "each block's terms are summed against that block's own maximum and the maximum is not carried: "
              "terms taken against different maxima cannot be added, and the weights are written against the "
              "last block's maximum only. Keep one running maximum for the row and rescale the sum when it "
              "grows.")(_slip(2))
mistakes.keep("first pass bounded by n",
              "the pass that finds the maximum and the sum reads all n entries of the row, not its first "
              "valid_lens[r]: entries past the valid length must take no part in the softmax.")(_slip(3))


# Kept alternatives (correct answers in other styles) --------------------------------------


def _three_passes(x_ptr, lens_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    n_valid = tl.load(lens_ptr + r)
    base = x_ptr + r * n_cols
    peak = float("-inf")
    for s in range(0, n_cols, BLOCK):          # pass 1: the maximum
        offs = s + tl.arange(0, BLOCK)
        peak = tl.maximum(peak, tl.max(tl.load(base + offs, mask=offs < n_valid, other=float("-inf")), 0))
    denom = 0.0
    for s in range(0, n_cols, BLOCK):          # pass 2: the sum
        offs = s + tl.arange(0, BLOCK)
        e = tl.exp(tl.load(base + offs, mask=offs < n_valid, other=float("-inf")) - peak)
        denom += tl.sum(tl.where(offs < n_valid, e, 0.0), 0)
    for s in range(0, n_cols, BLOCK):          # pass 3: the weights
        offs = s + tl.arange(0, BLOCK)
        e = tl.exp(tl.load(base + offs, mask=offs < n_valid, other=float("-inf")) - peak)
        tl.store(out_ptr + r * n_cols + offs, tl.where(offs < n_valid, e / denom, 0.0), mask=offs < n_cols)


@alternatives.keep("three passes", "a pass for the maximum, one for the sum, one for the weights")
def _alt_three_passes(x, valid_lens, block):
    y = torch.zeros_like(x)
    jit(_three_passes)[(x.shape[0],)](x, valid_lens, y, x.shape[1], BLOCK=block)
    return y


def _base_two(X, L, Y, stride, n, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    valid = tl.load(L + i)
    LOG2E: tl.constexpr = 1.4426950408889634
    m = -float("inf")
    z = 0.0
    for c0 in tl.range(0, valid, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        t = tl.load(X + i * stride + c, mask=c < valid, other=-float("inf")) * LOG2E
        m2 = tl.maximum(m, tl.max(t, axis=0))
        z = z * tl.exp2(m - m2) + tl.sum(tl.exp2(t - m2), axis=0)
        m = m2
    inv = tl.where(valid > 0, 1.0 / z, 0.0)
    for c0 in tl.range(0, n, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        t = tl.load(X + i * stride + c, mask=c < valid, other=-float("inf")) * LOG2E
        tl.store(Y + i * stride + c, tl.where(c < valid, tl.exp2(t - m) * inv, 0.0), mask=c < n)


@alternatives.keep("exp2 with log2(e) folded", "scores times log2(e), exp2, tl.range, a row stride argument")
def _alt_base_two(x, valid_lens, block):
    y = torch.empty(x.shape, dtype=torch.float32)
    jit(_base_two)[(x.shape[0], 1, 1)](x, valid_lens, y, x.stride(0), x.shape[1], BLOCK=block)
    return y


def _lane_stats(x_ptr, lens_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    limit = tl.load(lens_ptr + pid)
    lanes = tl.arange(0, BLOCK)
    m_lane = tl.full([BLOCK], float("-inf"), tl.float32)     # one running max and sum per lane
    l_lane = tl.zeros([BLOCK], tl.float32)
    for s in range(0, n_cols, BLOCK):
        idx = s + lanes
        v = tl.load(x_ptr + pid * n_cols + idx, mask=idx < n_cols, other=0.0)
        v = tl.where(idx < limit, v, float("-inf"))
        m_next = tl.maximum(m_lane, v)
        safe = tl.where(m_next == float("-inf"), 0.0, m_next)
        l_lane = l_lane * tl.exp(m_lane - safe) + tl.exp(v - safe)
        m_lane = m_next
    m_row = tl.max(m_lane, 0)
    safe_row = tl.where(m_row == float("-inf"), 0.0, m_row)
    l_row = tl.sum(l_lane * tl.exp(m_lane - safe_row), 0)
    for s in range(0, n_cols, BLOCK):
        idx = s + lanes
        v = tl.load(x_ptr + pid * n_cols + idx, mask=idx < n_cols, other=0.0)
        p = tl.exp(v - safe_row) / tl.maximum(l_row, 1e-30)
        tl.store(out_ptr + pid * n_cols + idx, tl.where(idx < limit, p, 0.0), mask=idx < n_cols)


@alternatives.keep("per-lane running statistics",
                   "a running max and sum per lane, merged at the end; masks by tl.where after loading")
def _alt_lane_stats(x, valid_lens, block):
    out = x.new_empty(x.shape)
    jit(_lane_stats)[(len(x),)](x, valid_lens, out, x.shape[1], BLOCK=block)
    return out


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch11_ex1", title="A masked softmax kernel, block by block", name="masked_row_softmax",
    reference=masked_row_softmax, points=2,
    checks=[
        Check("5 rows of 37 columns in blocks of 16, valid lengths 37, 0, 29, 21, 1", _ordinary_calls,
              compare=_COMPARE, hint=_HINT),
        Check("scores near +100, near -150 and spread wide, 50 columns", _far_from_zero_calls, seed=1,
              compare=_COMPARE, hint=_HINT),
        Check("a block wider than the row, and 70 columns in blocks of 16", _wide_block_calls, seed=2,
              compare=_COMPARE, hint=_HINT),
        Check("random sizes, blocks of 16 or 32 (hidden)", _hidden_calls, public=False, compare=_COMPARE,
              hint=_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
