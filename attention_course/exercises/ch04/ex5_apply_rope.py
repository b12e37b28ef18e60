r"""ch04_ex5: Rotary embeddings with position interpolation.

Write `apply_rope(x, positions, base=10000.0, scale=1.0)`, the rotary embedding of the
chapter's `rotate_pairs` (interleaved pairs, the same direction of rotation) made ready for
real use in two ways the page does not print: every sequence of a batch may carry its own
positions, and `scale` applies *position interpolation* (Chen et al. 2023), which the page
describes only in words: every position is divided by the extension factor before the angles
are taken.

- `x`: a `torch.float32` or `torch.float64` tensor of shape `(..., num_tokens, d)` with `d`
  even: queries or keys, one row per token; leading axes (batch, heads) are independent.
- `positions`: an integer or floating-point tensor whose shape broadcasts to `x.shape[:-1]`:
  `(num_tokens,)` gives every sequence the same positions, `(batch, 1, num_tokens)` gives each
  sequence of an `x` of shape `(batch, heads, num_tokens, d)` its own. Positions are any
  numbers, not necessarily `0, 1, 2, ...`, and may be fractional.
- `base`, `scale`: positive Python floats.
- Return a tensor of the shape and dtype of `x` in which the row of a token at position $p$
  has each pair $i$ (columns $2i$ and $2i+1$) turned as `rotate_pairs` turns it, by the angle
  $(p / s)\,\theta_i$ with $s$ = `scale`, $\theta_i = b^{-2i/d}$ and $b$ = `base`. Compute the angles in
  `torch.float64` whatever the dtype of `x`: in float32, the angle of a position in the tens of
  thousands can be off by several thousandths of a radian. Leave `x` and `positions` as they were
  given: the turned rows go into a new tensor.

The checks compare your rotated rows with the expected ones entry by entry. When they differ,
the reason says which property fails: that the score of a query turned at $m$ and a key turned
at $n$ depends on the offset $n - m$ alone, the same at several starting positions $m$; that
`apply_rope(x, p, scale=s)` equals `apply_rope(x, p / s)` for fractional `p / s`; and that every
row keeps its length.

Then answer: a model trained with RoPE on sequences of up to 2,048 tokens is run on 8,192 tokens
with `scale=4`. Which angles does pair $i$ meet, compared with those of training, and what
becomes of the angle between two neighbouring tokens? Why does position interpolation still
want a short fine-tuning?
"""
from __future__ import annotations

import math

import torch

from ...checks.checking import tensor_problem
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, inputs_unchanged, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def apply_rope(x, positions, base=10000.0, scale=1.0):
    """Reference: pair i = columns (2i, 2i+1), turned by (p / scale) * base^(-2i/d), angles in float64."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = (positions.to(torch.float64) / scale)[..., None] * theta       # (..., num_tokens, d / 2)
    cos, sin = angle.cos(), angle.sin()
    first, second = x[..., 0::2].double(), x[..., 1::2].double()
    out = torch.stack([first * cos - second * sin, first * sin + second * cos], dim=-1)
    return out.flatten(-2).to(x.dtype)


# Inputs of the public and hidden checks ---------------------------------------------------


_PUBLIC = 0   # the seed of every public check: its fixed case


def _fixed_calls(seed):
    """Three tokens of width 6 at positions 2, 0, 7 (not 0, 1, 2), then base 100 at positions 1, 5."""
    if seed == _PUBLIC:
        x = torch.tensor([[1.0, 0.0, 1.0, 0.0, 1.0, 0.0],
                          [0.0, 1.0, 0.0, 1.0, 0.0, 1.0],
                          [0.5, -1.0, 1.5, 2.0, -0.5, 1.0]])
        positions, y, other = torch.tensor([2, 0, 7]), torch.tensor([[1.0, 2.0, 3.0, 4.0]] * 2), torch.tensor([1, 5])
    else:
        g = gen(seed)
        x, y = torch.randn(3, 6, generator=g), torch.randn(2, 4, generator=g)
        positions, other = torch.randperm(3, generator=g) * randint(g, 2, 5), torch.randint(1, 40, (2,), generator=g)
    return [Call(args=(x, positions)), Call(args=(y, other), kwargs={"base": 100.0})]


_STARTS = (0, 17, 250, 3000)


def _offset_calls(seed):
    """One query and two keys at offsets +5 and -3 from it, at several starting positions m."""
    g = gen(seed)
    qk = torch.randn(3, 8, generator=g)
    starts = _STARTS if seed == _PUBLIC else tuple(sorted(torch.randperm(4000, generator=g)[:4].add(3).tolist()))
    return [Call(args=(qk, torch.tensor([m, m + 5, m - 3]))) for m in starts]


def _interpolation_calls(seed):
    """Pairs of calls: apply_rope(x, p, scale=s), then apply_rope(x, p / s) with p / s fractional."""
    g = gen(seed)
    calls = []
    for shape, s, fixed in (((4, 8), 4.0, [0, 3, 10, 21]), ((2, 5, 6), 2.5, [0, 3, 10, 21, 7])):
        x = torch.randn(*shape, generator=g)
        p = torch.tensor(fixed) if seed == _PUBLIC else torch.randperm(30, generator=g)[:shape[-2]]
        calls.append(Call(args=(x, p), kwargs={"scale": s}))
        calls.append(Call(args=(x, p.double() / s)))
    return calls


def _norm_calls(seed):
    """Per-sequence positions for (batch, heads, tokens, d) float64; float positions for float32."""
    g = gen(seed)
    x64 = torch.randn(2, 3, 5, 8, generator=g, dtype=torch.float64)
    per_sequence = torch.randint(0, 60, (2, 1, 5), generator=g)
    x32 = torch.randn(3, 4, 6, generator=g)
    fractional = torch.rand(4, generator=g, dtype=torch.float64) * 50
    return [Call(args=(x64, per_sequence)), Call(args=(x32, fractional), kwargs={"base": 500.0})]


def _far_calls(seed):
    """float32 rows at positions in the tens of thousands, base 500000."""
    g = gen(seed)
    x = torch.randn(5, 16, generator=g)
    far = (torch.tensor([0, 4095, 33333, 60000, 99999]) if seed == _PUBLIC
           else torch.randint(30000, 200000, (5,), generator=g))
    return [Call(args=(x, far), kwargs={"base": 500000.0})]


def _random_calls(seed):
    g = gen(seed)
    calls = []
    for _ in range(3):
        leading = tuple(randint(g, 1, 3) for _ in range(randint(g, 0, 2)))
        n, d = randint(g, 1, 7), 2 * randint(g, 1, 8)
        dtype = torch.float64 if randint(g, 0, 1) else torch.float32
        x = torch.randn(*leading, n, d, generator=g, dtype=dtype)
        if randint(g, 0, 1):
            positions = torch.randint(0, 5000, (n,), generator=g)
        else:
            positions = torch.rand(*leading, n, generator=g, dtype=torch.float64) * 300
        calls.append(Call(args=(x, positions), kwargs={"base": float(randint(g, 100, 50000)),
                                                       "scale": float(randint(g, 1, 8)) / 2}))
    return calls


# What the compares say when the rows differ --------------------------------------------------


def _offset_property(got, calls):
    """The scores q_m . k_(m+5) and q_m . k_(m-3) must not depend on the start m."""
    scores = [(g["value"].double()[0] @ g["value"].double()[1:].T).tolist() for g in got]
    starts = [int(c.args[1][0]) for c in calls]
    for j, offset in enumerate((5, -3)):
        column = [row[j] for row in scores]
        if max(column) - min(column) > 1e-4 * max(1.0, max(abs(v) for v in column)):
            shown = ", ".join(f"{v:.4f}" for v in column)
            return (f"the score of the query turned at m and the key turned at m{offset:+d} is {shown} at "
                    f"m = {', '.join(map(str, starts))}: it depends on m, not on the offset {offset} alone")
    return None


def _interpolation_property(got, calls):
    for j in range(0, len(calls), 2):
        a, b = got[j]["value"].double(), got[j + 1]["value"].double()
        gap = (a - b).abs().max().item()
        if gap > 1e-4:
            s = calls[j].kwargs["scale"]
            return (f"apply_rope(x, p, scale={s:g}) and apply_rope(x, p / {s:g}) (calls {j + 1} and {j + 2}) "
                    f"differ by up to {gap:.3g}: a scale of {s:g} must act like positions divided by {s:g}")
    return None


def _norm_property(got, calls):
    for j, (g, call) in enumerate(zip(got, calls)):
        before, after = call.args[0].double().norm(dim=-1), g["value"].double().norm(dim=-1)
        gap = (after - before).abs().max().item()
        if gap > 1e-4 * max(1.0, before.max().item()):
            worst = (after - before).abs().argmax()
            return (f"call {j + 1} of {len(calls)}: a row of length {before.flatten()[worst].item():.4f} comes "
                    f"back with length {after.flatten()[worst].item():.4f}; a rotation keeps every length")
    return None


def _property_compare(prop=None):
    """Equal to the expected rows (within rtol 1e-4, atol 1e-5): pass. Otherwise the reason names the
    failing property (prop(got, calls)) or, failing none, the largest gap from the expected rows."""
    def compare(got, want, calls):
        for i, (g, w) in enumerate(zip(got, want)):
            problem = tensor_problem(g, w, f"call {i + 1} of {len(calls)}: the result")
            if problem:
                return problem
        gaps = [(g["value"].double() - w["value"].double()).abs().max().item() if g["value"].numel() else 0.0
                for g, w in zip(got, want)]
        if all(torch.allclose(g["value"].double(), w["value"].double(), rtol=1e-4, atol=1e-5)
               for g, w in zip(got, want)):
            return None
        reason = prop(got, calls) if prop is not None else None
        worst = max(range(len(gaps)), key=gaps.__getitem__)
        tail = f"call {worst + 1} of {len(calls)}: an entry differs from the expected rotation by {gaps[worst]:.3g}"
        return f"{reason}; {tail}" if reason else tail
    return compare


# Kept mistakes, each with its hint --------------------------------------------------------


def _turn(first, second, angle, dtype):
    """Pairs (first, second) turned by ``angle`` as rotate_pairs turns them, cast to ``dtype``."""
    cos, sin = angle.cos(), angle.sin()
    return torch.stack([first * cos - second * sin, first * sin + second * cos], dim=-1).flatten(-2).to(dtype)


def _angles(x, positions, base, scale):
    theta = base ** (-torch.arange(0, x.shape[-1], 2, dtype=torch.float64) / x.shape[-1])
    return (positions.to(torch.float64) / scale)[..., None] * theta


@mistakes.keep("half-split pairs",
               "your result turns columns i and i + d/2 together (the half-split layout of some RoPE code); "
               "this contract pairs columns 2i and 2i+1, as rotate_pairs does.")
def _rope_half_split(x, positions, base=10000.0, scale=1.0):
    h = x.shape[-1] // 2
    angle = _angles(x, positions, base, scale)
    first, second = x[..., :h].double(), x[..., h:].double()
    cos, sin = angle.cos(), angle.sin()
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1).to(x.dtype)


@mistakes.keep("turned the other way",
               "your pairs turn in the opposite direction (the sine's sign is flipped): every score of an "
               "offset n - m becomes the score of m - n. Turn each pair the way rotate_pairs does.")
def _rope_other_way(x, positions, base=10000.0, scale=1.0):
    angle = _angles(x, positions, base, scale)
    return _turn(x[..., 0::2].double(), x[..., 1::2].double(), -angle, x.dtype)


@mistakes.keep("exponent i/d",
               "your frequencies use the exponent i/d for pair i; theta_i = base^(-2i/d), so the last pair "
               "turns almost base times slower than the first.")
def _rope_exponent_i(x, positions, base=10000.0, scale=1.0):
    d = x.shape[-1]
    theta = base ** (-torch.arange(d // 2, dtype=torch.float64) / d)
    angle = (positions.to(torch.float64) / scale)[..., None] * theta
    return _turn(x[..., 0::2].double(), x[..., 1::2].double(), angle, x.dtype)


@mistakes.keep("scale multiplies the positions",
               "your scale multiplies the positions; position interpolation divides them by the scale, so that "
               "a sequence scale times longer maps back into the positions of training.")
def _rope_scale_multiplies(x, positions, base=10000.0, scale=1.0):
    angle = _angles(x, positions, base, 1.0 / scale)
    return _turn(x[..., 0::2].double(), x[..., 1::2].double(), angle, x.dtype)


@mistakes.keep("positions 0, 1, 2, ...",
               "your result turns row t by position t, whatever positions holds; the angle of each row comes "
               "from the position given for it.")
def _rope_arange(x, positions, base=10000.0, scale=1.0):
    angle = _angles(x, torch.arange(x.shape[-2]), base, scale)
    return _turn(x[..., 0::2].double(), x[..., 1::2].double(), angle, x.dtype)


@mistakes.keep("angles in float32",
               "your angles are computed in float32: at positions in the tens of thousands they can be off "
               "by several thousandths of a radian. Compute the frequencies and angles in float64, then "
               "return x's dtype.")
def _rope_float32_angles(x, positions, base=10000.0, scale=1.0):
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    angle = (positions.to(torch.float32) / scale)[..., None] * theta
    return _turn(x[..., 0::2].float(), x[..., 1::2].float(), angle, x.dtype)


@mistakes.keep("turned x in place",
               "your answer writes the turned pairs back into x itself (an assignment into x's columns, or an "
               "in-place operation on x), so the caller's queries or keys are overwritten by the call. Build the "
               "turned rows in a new tensor and leave x as it was given.")
def _rope_in_place(x, positions, base=10000.0, scale=1.0):
    angle = _angles(x, positions, base, scale)
    first, second = x[..., 0::2].double().clone(), x[..., 1::2].double().clone()   # right values, x overwritten
    cos, sin = angle.cos(), angle.sin()
    x[..., 0::2] = (first * cos - second * sin).to(x.dtype)
    x[..., 1::2] = (first * sin + second * cos).to(x.dtype)
    return x


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("complex multiplication", "each pair as one complex number (torch.view_as_complex), "
                   "multiplied by torch.polar(1, angle) in complex128")
def _rope_alt_complex(x, positions, base=10000.0, scale=1.0):
    d = x.shape[-1]
    freqs = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.outer(positions.double().flatten() / scale, freqs).reshape(*positions.shape, d // 2)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    turned = z * torch.polar(torch.ones_like(angle), angle)
    return torch.view_as_real(turned).flatten(-2).to(x.dtype)


@alternatives.keep("a 2x2 rotation matrix per pair", "R = [[cos, -sin], [sin, cos]] for every token and "
                   "pair, applied with einsum")
def _rope_alt_matrices(x, positions, base=10000.0, scale=1.0):
    d = x.shape[-1]
    i = torch.arange(d // 2, dtype=torch.float64)
    angle = positions.double().unsqueeze(-1) / scale * torch.exp(-2 * i / d * math.log(base))
    c, s = angle.cos(), angle.sin()
    rot = torch.stack([torch.stack([c, -s], dim=-1), torch.stack([s, c], dim=-1)], dim=-2)   # (..., n, d/2, 2, 2)
    pairs = x.double().unflatten(-1, (d // 2, 2))
    return torch.einsum("...pab,...pb->...pa", rot, pairs).flatten(-2).to(x.dtype)


@alternatives.keep("cos/sin stacking with a quarter turn", "x * cos + turn90(x) * sin, with cos and sin repeated "
                   "for both columns of a pair and turn90(a, b) = (-b, a), in x's dtype (GPT-J's rotate_every_two "
                   "form)")
def _rope_alt_quarter_turn(x, positions, base=10000.0, scale=1.0):
    d = x.shape[-1]
    inv_freq = torch.tensor([base ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)
    angle = torch.einsum("...n,f->...nf", positions.double() / scale, inv_freq)
    cos = angle.cos().repeat_interleave(2, dim=-1).to(x.dtype)
    sin = angle.sin().repeat_interleave(2, dim=-1).to(x.dtype)
    turned90 = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
    return x * cos + turned90 * sin


@alternatives.keep("a loop over the pairs", "one pair at a time, with math.cos and math.sin per token")
def _rope_alt_loop(x, positions, base=10000.0, scale=1.0):
    d = x.shape[-1]
    pos = torch.broadcast_to(positions, x.shape[:-1]).double().reshape(-1).tolist()
    rows = x.double().reshape(-1, d)
    out = torch.empty_like(rows)
    for r, p in enumerate(pos):
        for i in range(d // 2):
            a = p / scale * base ** (-2 * i / d)
            u, v = rows[r, 2 * i].item(), rows[r, 2 * i + 1].item()
            out[r, 2 * i] = u * math.cos(a) - v * math.sin(a)
            out[r, 2 * i + 1] = u * math.sin(a) + v * math.cos(a)
    return out.reshape(x.shape).to(x.dtype)


@alternatives.keep("the course library's rope_scaling.apply_rope",
                   "chapter 10's library function, one sequence at a time, with the frequencies "
                   "base^(-2i/d) / scale (position interpolation as a change of frequencies)")
def _rope_alt_library(x, positions, base=10000.0, scale=1.0):
    from ... import rope_scaling                      # imported here: a later chapter's module
    d, n = x.shape[-1], x.shape[-2]
    inv_freq = rope_scaling.rope_inverse_frequencies(d, base) / scale
    rows = x.reshape(-1, n, d)
    per_row = torch.broadcast_to(positions, x.shape[:-1]).reshape(-1, n)
    turned = []
    for seq, p in zip(rows, per_row):
        turned.append(rope_scaling.apply_rope(seq, p, inv_freq))
    return torch.stack(turned).reshape(x.shape)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch04_ex5", title="Rotary embeddings with position interpolation",
    name="apply_rope", reference=apply_rope, points=3, kind="function",
    checks=[
        Check("3 tokens of width 6 at positions 2, 0, 7, then base 100 at positions 1, 5",
              inputs_unchanged(_fixed_calls),
              seed=_PUBLIC, compare=_property_compare(),
              hint="this check compares the turned rows with the expected ones entry by entry; the first "
                   "call's rows are 1 and 0 in alternate columns, so the reason shows which pair turned by "
                   "which angle."),
        Check("the score of q at m and k at m+5, m-3 is the same at m = 0, 17, 250, 3000",
              inputs_unchanged(_offset_calls),
              seed=_PUBLIC, compare=_property_compare(_offset_property),
              hint="this check turns one query and two keys placed at offsets +5 and -3 from a starting "
                   "position m, for four values of m, and compares the rows and their scores."),
        Check("apply_rope(x, p, scale=s) equals apply_rope(x, p / s), s = 4 and 2.5",
              inputs_unchanged(_interpolation_calls),
              seed=_PUBLIC, compare=_property_compare(_interpolation_property),
              hint="this check calls apply_rope with a scale and again with the positions divided by that "
                   "scale (fractional positions, default scale), and compares both with the expected rows."),
        Check("rows keep their length: per-sequence positions (2, 1, 5) in float64, fractional positions in "
              "float32",
              inputs_unchanged(_norm_calls), seed=_PUBLIC, compare=_property_compare(_norm_property),
              hint="this check turns a (2, 3, 5, 8) float64 x with one row of positions per sequence and a "
                   "(3, 4, 6) float32 x at fractional positions with base 500, and compares the rows and their "
                   "lengths."),
        Check("float32 rows at positions up to 99,999, base 500000",
              inputs_unchanged(_far_calls), seed=_PUBLIC,
              compare=_property_compare(),
              hint="this check turns float32 rows at positions in the tens of thousands and compares them with "
                   "the expected rows entry by entry (tolerance 1e-5)."),
        Check("random sizes, leading axes, dtypes, positions, bases and scales (hidden)",
              inputs_unchanged(_random_calls), seed=5,
              public=False, compare=_property_compare(),
              hint="this check compares turned rows of random sizes, with and without leading axes, integer and "
                   "fractional positions, other bases and scales, entry by entry."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
