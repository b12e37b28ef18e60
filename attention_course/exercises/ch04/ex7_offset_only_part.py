r"""ch04_ex7: The offset-only part of a positional score.

In the section on projections, the positional part of a score is
$\mathrm{PE}_m A\, \mathrm{PE}_n^\top$ with $A = W_q W_k^\top$, and it depends on the offset
$n - m$ alone when $A$ commutes with every offset matrix $M_k$ of {ref}`ch04_ex4`. Because the
pairs all have different frequencies, the matrices that commute with every $M_k$ are exactly
the block-diagonal ones whose $2 \times 2$ block on pair $i$ (rows and columns $2i$ and
$2i+1$, the layout of the chapter's table) has the form
$\left(\begin{smallmatrix} a_i & b_i \\ -b_i & a_i \end{smallmatrix}\right)$, every entry
outside these blocks being 0. Call them *offset-only* matrices. The page builds one by hand;
here you start from any $A$. Write `offset_only_part(A)`, which returns the offset-only matrix
$B$ closest to $A$: the one with the smallest sum of squared differences
$\sum_{r,c} (A_{rc} - B_{rc})^2$. Derive $a_i$ and $b_i$ yourself.

- `A`: a floating-point tensor of shape `(..., d_model, d_model)` with `d_model` even. Leading
  axes, if any, hold independent matrices (one per head, say).
- Return `B`, a tensor of the shape and dtype of `A`, holding the closest offset-only matrix of
  each matrix of `A`.

The checks compare `B` with the expected matrices entry by entry. When they differ, the reason
says which property of $B$ fails: that $B$ commutes with $M_k$ for several offsets $k$,
negative ones included; that $\mathrm{PE}_m B\, \mathrm{PE}_n^\top$ is the same for every
starting position $m$ at a fixed offset $n - m$; that the remainder $A - B$ is orthogonal to
every offset-only matrix (the sum of their entry-wise products is 0); and that an offset-only
$A$ comes back unchanged.

Then answer: with $d_k < d_\text{model}$, $W_q W_k^\top$ has rank at most $d_k$. How many pairs
can an offset-only $W_q W_k^\top$ use, and can training make the remainder $A - B$ vanish
while every frequency still takes part? And for an $A$ with independent standard normal
entries, what fraction of the sum of its squared entries does $B$ keep on average? Measure it
with your function for $d_\text{model} = 32$.
"""
from __future__ import annotations

import torch

from ...checks.checking import tensor_problem
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def offset_only_part(A):
    """Reference: a = mean of a pair's two diagonal entries, b = half the difference of its two
    off-diagonal ones (the Frobenius projection on span{I_i, J_i}), everything else 0."""
    d = A.shape[-1]
    first, second = torch.arange(0, d, 2), torch.arange(1, d, 2)
    a = (A[..., first, first] + A[..., second, second]) / 2
    b = (A[..., first, second] - A[..., second, first]) / 2
    B = torch.zeros_like(A)
    B[..., first, first], B[..., second, second] = a, a
    B[..., first, second], B[..., second, first] = b, -b
    return B


# Inputs of the public and hidden checks ---------------------------------------------------


def _frequencies(d):
    return 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)


def _offset_matrix(k, d):
    """M_k in float64, written from the rotation formula (pair i turned by omega_i * k)."""
    angle = k * _frequencies(d)
    m = torch.zeros(d, d, dtype=torch.float64)
    for i, (c, s) in enumerate(zip(angle.cos().tolist(), angle.sin().tolist())):
        m[2 * i, 2 * i], m[2 * i, 2 * i + 1], m[2 * i + 1, 2 * i], m[2 * i + 1, 2 * i + 1] = c, s, -s, c
    return m


def _table(num_positions, d):
    """The chapter's sinusoidal table in float64: sin in column 2i, cos in column 2i+1."""
    angle = torch.arange(num_positions, dtype=torch.float64)[:, None] * _frequencies(d)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(-2)


def _basis(d):
    """The offset-only matrices I_i (identity on pair i) and J_i ([[0, 1], [-1, 0]] on pair i)."""
    out = torch.zeros(d, d, d, dtype=torch.float64)
    for i in range(d // 2):
        r = 2 * i
        out[r, r, r] = out[r, r + 1, r + 1] = 1.0
        out[r + 1, r, r + 1], out[r + 1, r + 1, r] = 1.0, -1.0
    return out


def _commutes(A, B):
    d = B.shape[-1]
    for k in (1, -3, 7, 100):
        m = _offset_matrix(k, d)
        gap = (m @ B - B @ m).abs().max().item()
        if gap > 1e-5 * max(1.0, B.abs().max().item()):
            return f"B does not commute with M_{k}: M_{k} B - B M_{k} has an entry of size {gap:.3g}"
    return None


def _offset_only_scores(A, B):
    pe = _table(400, B.shape[-1])
    for k in (5, -5, 1):
        starts = [m for m in (0, 13, 50, 200, 333) if 0 <= m + k < 400]
        scores = [(pe[m] @ B @ pe[m + k]).item() for m in starts]
        if max(scores) - min(scores) > 1e-6 * max(1.0, B.abs().sum().item()):
            shown = ", ".join(f"{s:.4g}" for s in scores)
            return (f"PE_m B PE_(m+{k}) at m = {', '.join(map(str, starts))} is {shown}: "
                    f"it depends on m, not on the offset {k} alone")
    return None


def _remainder_orthogonal(A, B):
    products = torch.einsum("brc,rc->b", _basis(B.shape[-1]), A - B)
    worst = products.abs().max().item()
    if worst > 1e-4 * max(1.0, A.abs().max().item()):
        i = products.abs().argmax().item()
        which = "I" if i % 2 == 0 else "J"
        return (f"the remainder A - B is not orthogonal to the offset-only matrix {which}_{i // 2} "
                f"(1 on pair {i // 2}'s {'diagonal' if which == 'I' else 'off-diagonal, -1 below it'}): "
                f"the sum of their entry-wise products is {products[i].item():.4g}")
    return None


def _unchanged(A, B):
    gap = (A - B).abs().max().item()
    if gap > 1e-5 + 1e-4 * A.abs().max().item():
        return f"A is already offset-only, but B differs from it by up to {gap:.3g}"
    return None


def _property_compare(prop):
    """Equal to the expected matrices (within rtol 1e-4, atol 1e-5): pass. Otherwise the reason names
    the first failing property (prop(A, B) on float64 matrices) or, failing none, the largest gap."""
    def compare(got, want, calls):
        for i, (g, w) in enumerate(zip(got, want)):
            where = f"call {i + 1} of {len(calls)}: the result"
            problem = tensor_problem(g, w, where)
            if problem:
                return problem
        for i, (g, w, call) in enumerate(zip(got, want, calls)):
            mine, theirs = g["value"].double(), w["value"].double()
            if torch.allclose(mine, theirs, rtol=1e-4, atol=1e-5):
                continue
            d = mine.shape[-1]
            inputs = call.args[0].double().reshape(-1, d, d)
            for j, (A, B) in enumerate(zip(inputs, mine.reshape(-1, d, d))):
                reason = prop(A, B)
                if reason:
                    which = f", matrix {j}" if inputs.shape[0] > 1 else ""
                    return f"call {i + 1} of {len(calls)} (d_model = {d}{which}): {reason}"
            gap = (mine - theirs).abs().max().item()
            return (f"call {i + 1} of {len(calls)} (d_model = {d}): B has the property this check "
                    f"tests, but it is not the closest offset-only matrix to A; an entry differs by {gap:.3g}")
        return None
    return compare


def _hand_calls(seed):
    """The 4 x 4 matrix 1, 2, ..., 16 (row by row), then a random 8 x 8 one."""
    g = gen(seed)
    return [Call(args=(torch.arange(1.0, 17.0).reshape(4, 4),)),
            Call(args=(torch.randn(8, 8, generator=g),))]


def _commute_calls(seed):
    g = gen(seed)
    return [Call(args=(torch.randn(8, 8, generator=g),)), Call(args=(torch.randn(16, 16, generator=g),))]


def _score_calls(seed):
    g = gen(seed)
    return [Call(args=(torch.randn(6, 6, generator=g),)), Call(args=(torch.randn(32, 32, generator=g),))]


def _remainder_calls(seed):
    g = gen(seed)
    return [Call(args=(torch.randn(2, 12, 12, generator=g),)),
            Call(args=(torch.randn(10, 10, generator=g, dtype=torch.float64),))]


def _offset_only_input(g, leading, d, dtype):
    a, b = torch.randn(2, *leading, d // 2, generator=g, dtype=dtype)
    a[..., 0], b[..., 0] = 0.0, 0.0                # pair 0 unused, as in the chapter's cell
    out = torch.zeros(*leading, d, d, dtype=dtype)
    idx = torch.arange(0, d, 2)
    out[..., idx, idx] = out[..., idx + 1, idx + 1] = a
    out[..., idx, idx + 1], out[..., idx + 1, idx] = b, -b
    return out


def _unchanged_calls(seed):
    g = gen(seed)
    return [Call(args=(_offset_only_input(g, (), 8, torch.float32),)),
            Call(args=(_offset_only_input(g, (3, 2), 6, torch.float64),))]


def _random_calls(seed):
    g = gen(seed)
    calls = []
    for _ in range(3):
        leading = tuple(randint(g, 1, 3) for _ in range(randint(g, 0, 2)))
        d = 2 * randint(g, 1, 12)
        dtype = torch.float64 if randint(g, 0, 1) else torch.float32
        calls.append(Call(args=(torch.randn(*leading, d, d, generator=g, dtype=dtype),)))
    return calls


def _random_property_calls(seed):
    g = gen(seed)
    return [Call(args=(torch.randn(d, d, generator=g),)) for d in (2 * randint(g, 3, 20), 2 * randint(g, 3, 20))]


def _commutes_and_scores(A, B):
    return _commutes(A, B) or _offset_only_scores(A, B)


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("whole diagonal blocks kept",
               "your result keeps each pair's 2x2 block of A exactly as it is and zeroes the rest; such a "
               "block commutes with the rotations only when its two diagonal entries are equal and its two "
               "off-diagonal entries are opposite, so most blocks of A must change to become offset-only.")
def _oop_whole_blocks(A):
    d = A.shape[-1]
    pair = torch.arange(d) // 2
    return A * (pair[:, None] == pair[None, :]).to(A.dtype)


@mistakes.keep("b with the wrong sign",
               "the antisymmetric part of your blocks (their b) has the wrong orientation: an offset-only A "
               "does not come back unchanged but transposed, each block turning the other way. Check which "
               "off-diagonal entry of the chapter's pattern carries +b, and which of A's entries you pair "
               "it with.")
def _oop_b_sign(A):
    return offset_only_part(A).transpose(-2, -1)


@mistakes.keep("a from one entry",
               "the diagonal of each of your blocks repeats the block's upper-left entry of A; the closest "
               "value weighs both diagonal entries of the block equally.")
def _oop_a_one_entry(A):
    B = offset_only_part(A)
    first = torch.arange(0, A.shape[-1], 2)
    B[..., first, first] = A[..., first, first]
    B[..., first + 1, first + 1] = A[..., first, first]
    return B


@mistakes.keep("b from the symmetric part",
               "the off-diagonal entries of your blocks average A's two off-diagonal entries of the pair; an "
               "offset-only block has opposite entries there, [[a, b], [-b, a]], so the closest b is half of "
               "the upper one minus the lower one, and a symmetric block of A has no offset-only part off the "
               "diagonal.")
def _oop_b_symmetric(A):
    B = offset_only_part(A)
    first = torch.arange(0, A.shape[-1], 2)
    b = (A[..., first, first + 1] + A[..., first + 1, first]) / 2
    B[..., first, first + 1], B[..., first + 1, first] = b, -b
    return B


@mistakes.keep("a and b copied from single entries",
               "your blocks copy a from the block's upper-left entry of A and b from its upper-right entry; "
               "the closest block weighs the two diagonal entries equally for a and the two off-diagonal "
               "entries (the lower one negated) equally for b.")
def _oop_single_entries(A):
    B = torch.zeros_like(A)
    first = torch.arange(0, A.shape[-1], 2)
    a, b = A[..., first, first], A[..., first, first + 1]
    B[..., first, first], B[..., first + 1, first + 1] = a, a
    B[..., first, first + 1], B[..., first + 1, first] = b, -b
    return B


@mistakes.keep("sums instead of means",
               "every entry of your blocks is twice the closest value: a sum of the two entries of A where "
               "their average belongs, so an offset-only A comes back doubled.")
def _oop_sums(A):
    return 2 * offset_only_part(A)


@mistakes.keep("off-diagonal blocks kept",
               "your diagonal blocks are right, but the entries that couple two different pairs are kept "
               "from A; they mix two frequencies, so they do not commute with the rotations and must be 0.")
def _oop_off_blocks_kept(A):
    d = A.shape[-1]
    pair = torch.arange(d) // 2
    return torch.where(pair[:, None] == pair[None, :], offset_only_part(A), A)


@mistakes.keep("half-split pairs",
               "your result treats columns i and i + d_model/2 as a pair (the half-split layout of some "
               "RoPE code); in this chapter's table pair i is columns 2i and 2i+1.")
def _oop_half_split(A):
    h = A.shape[-1] // 2
    i = torch.arange(h)
    j = i + h
    a = (A[..., i, i] + A[..., j, j]) / 2
    b = (A[..., i, j] - A[..., j, i]) / 2
    B = torch.zeros_like(A)
    B[..., i, i], B[..., j, j], B[..., i, j], B[..., j, i] = a, a, b, -b
    return B


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("a loop over the pairs", "one pair at a time, four entries of A averaged into a and b")
def _oop_alt_loop(A):
    B = torch.zeros_like(A)
    for i in range(0, A.shape[-1], 2):
        a = (A[..., i, i] + A[..., i + 1, i + 1]) / 2
        b = (A[..., i, i + 1] - A[..., i + 1, i]) / 2
        B[..., i, i], B[..., i, i + 1], B[..., i + 1, i], B[..., i + 1, i + 1] = a, b, -b, a
    return B


@alternatives.keep("coefficients on an orthonormal basis in float64",
                   "inner products of A with the normalised I_i and J_i by einsum, then their combination")
def _oop_alt_basis(A):
    E = _basis(A.shape[-1]) / 2 ** 0.5
    coefficients = torch.einsum("...rc,brc->...b", A.double(), E)
    return torch.einsum("...b,brc->...rc", coefficients, E).to(A.dtype)


@alternatives.keep("average over quarter turns, then a block mask",
                   "(A + J A J^T) / 2 with J turning every pair by 90 degrees, then the diagonal blocks only")
def _oop_alt_quarter_turn(A):
    d = A.shape[-1]
    J = torch.zeros(d, d, dtype=A.dtype)
    J[torch.arange(0, d, 2), torch.arange(1, d, 2)] = 1.0
    J[torch.arange(1, d, 2), torch.arange(0, d, 2)] = -1.0
    pair = torch.arange(d) // 2
    mask = (pair[:, None] == pair[None, :]).to(A.dtype)
    return (A + J @ A @ J.T) / 2 * mask


@alternatives.keep("via the half-split layout",
                   "reorder rows and columns to pairs (i, i + d/2), take the four diagonals of the quadrants "
                   "there, reorder back")
def _oop_alt_half_split(A):
    d = A.shape[-1]
    h = d // 2
    order = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
    S = A[..., order, :][..., :, order]              # pair i is now rows/columns i and i + h
    top_left, top_right = S[..., :h, :h].diagonal(dim1=-2, dim2=-1), S[..., :h, h:].diagonal(dim1=-2, dim2=-1)
    low_left, low_right = S[..., h:, :h].diagonal(dim1=-2, dim2=-1), S[..., h:, h:].diagonal(dim1=-2, dim2=-1)
    a, b = (top_left + low_right) / 2, (top_right - low_left) / 2
    out = torch.zeros_like(S)
    out[..., :h, :h], out[..., h:, h:] = torch.diag_embed(a), torch.diag_embed(a)
    out[..., :h, h:], out[..., h:, :h] = torch.diag_embed(b), torch.diag_embed(-b)
    back = torch.argsort(order)
    return out[..., back, :][..., :, back]


@alternatives.keep("complex numbers", "each pair as one complex coordinate: a block [[a, b], [-b, a]] is "
                   "multiplication by a - ib, whose coefficient is the mean of the block's two readings")
def _oop_alt_complex(A):
    d = A.shape[-1]
    blocks = A.double().unflatten(-2, (d // 2, 2)).unflatten(-1, (d // 2, 2)).diagonal(dim1=-4, dim2=-2)
    z = torch.complex(blocks[..., 0, 0, :] + blocks[..., 1, 1, :], blocks[..., 1, 0, :] - blocks[..., 0, 1, :]) / 2
    a, b = z.real, -z.imag
    B = torch.zeros(*A.shape[:-2], d // 2, 2, d // 2, 2, dtype=torch.float64)
    own = B.diagonal(dim1=-4, dim2=-2)               # (..., 2, 2, pair): a writable view
    own[..., 0, 0, :], own[..., 1, 1, :], own[..., 0, 1, :], own[..., 1, 0, :] = a, a, b, -b
    return B.flatten(-4, -3).flatten(-2, -1).to(A.dtype)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch04_ex7", title="The offset-only part of a positional score",
    name="offset_only_part", reference=offset_only_part, points=3, kind="function",
    checks=[
        Check("the 4 x 4 matrix 1, 2, ..., 16 and a random 8 x 8 matrix", _hand_calls, seed=0,
              hint="this check compares B with the expected matrix entry by entry; the first call's entries "
                   "are 1 to 16 row by row, small enough to work out each 2x2 block by hand."),
        Check("B commutes with M_k for k = 1, -3, 7, 100 (d_model = 8 and 16)", _commute_calls, seed=1,
              compare=_property_compare(_commutes),
              hint="this check builds M_k itself and compares M_k B with B M_k, then B with the expected "
                   "matrix."),
        Check("PE_m B PE_(m+k) is the same at m = 0, 13, 50, 200, 333 (d_model = 6 and 32)", _score_calls,
              seed=2, compare=_property_compare(_offset_only_scores),
              hint="this check computes the chapter's sinusoidal table and the positional score PE_m B PE_(m+k) "
                   "at several starting positions m for k = 5, -5 and 1, then compares B with the expected "
                   "matrix."),
        Check("A - B is orthogonal to every offset-only matrix ((2, 12, 12) float32 and 10 x 10 float64)", _remainder_calls,
              seed=3, compare=_property_compare(_remainder_orthogonal),
              hint="this check takes the sum of the entry-wise products of A - B with each matrix I_i (identity "
                   "on pair i) and J_i (rotation by 90 degrees on pair i), for a (2, 12, 12) float32 A and a "
                   "10 x 10 float64 one."),
        Check("an offset-only A comes back unchanged (8 x 8, and (3, 2, 6, 6) float64)", _unchanged_calls,
              seed=4, compare=_property_compare(_unchanged),
              hint="this check gives A that are already offset-only (pair 0 left at zero) and compares B with "
                   "A itself."),
        Check("random sizes, leading axes and dtypes (hidden)", _random_calls, seed=5, public=False,
              hint="this check compares B with the expected matrices entry by entry, for random even d_model, "
                   "with and without leading axes, in float32 and float64."),
        Check("commutes with M_k and gives offset-only scores, random sizes (hidden)", _random_property_calls,
              seed=6, public=False, compare=_property_compare(_commutes_and_scores),
              hint="this check compares M_k B with B M_k and the scores PE_m B PE_(m+k) at several m, for "
                   "random even d_model, then B with the expected matrix."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
