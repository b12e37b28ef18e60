r"""ch04_ex4: The offset matrix M_k.

Write `offset_matrix(k, d_model)` returning the matrix $M_k$ of the section on relative
positions: a `torch.float32` tensor of shape `(d_model, d_model)` such that
`M_k @ PE[pos]` equals `PE[pos + k]` for every position `pos`, where `PE` is the
sinusoidal table of {ref}`ch04_ex3` (sine in column $2i$, cosine in column
$2i+1$).

- `k`: a Python `int`, which may be negative or zero ($M_0$ is the identity).
- `d_model`: a Python `int`; raise `ValueError` naming `d_model` unless it is a positive
  even number.
- The $2 \times 2$ block of pair $i$ (rows and columns $2i$ and $2i+1$) is the rotation by
  $\omega_i k$ shown in the chapter; every entry outside these blocks is 0.

Then test the property yourself with your table from exercise 4, for a few positions and
offsets, negative ones included.
"""
from __future__ import annotations

import math

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def offset_matrix(k, d_model):
    """M_k, float32 (d_model, d_model): M_k @ PE[pos] == PE[pos + k] for every pos."""
    if d_model < 2 or d_model % 2 != 0:
        raise ValueError(f"d_model must be a positive even integer (sin/cos pairs), got {d_model}")
    pairs = torch.arange(d_model // 2, dtype=torch.float64)
    omega = 10000.0 ** (-2 * pairs / d_model)
    c, s = torch.cos(omega * k), torch.sin(omega * k)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    even = 2 * torch.arange(d_model // 2)
    M[even, even], M[even, even + 1] = c, s
    M[even + 1, even], M[even + 1, even + 1] = -s, c
    return M.float()


# Inputs of the public and hidden checks ---------------------------------------------------


# Each public check's own case is what its seed (0) gives; at a grading seed the same kind of case is
# drawn afresh (another offset, another width with the same property), never the case a release ships.

_OM_PUBLIC_SEED = 0


def _om_case(seed, public, draw):
    """``public`` (a list of (k, d_model)) at the public seed; otherwise ``draw(g)`` for a generator
    seeded from ``seed``, drawn again while it gives the public case."""
    if seed == _OM_PUBLIC_SEED:
        pairs = public
    else:
        g = gen(seed)
        pairs = draw(g)
        while pairs == public:
            pairs = draw(g)
    return [Call(args=pair) for pair in pairs]


def _om_chapter_calls(seed):
    # The chapter's table (d_model=32) at another offset of a few positions (k >= 2: with k = 1 an
    # angle without k would agree).
    return _om_case(seed, [(5, 32)], lambda g: [(randint(g, 2, 12), 32)])


def _om_negative_calls(seed):
    return _om_case(seed, [(-3, 8), (0, 8), (1, 2)],
                    lambda g: [(randint(g, -12, -1), 2 * randint(g, 2, 8)), (0, 2 * randint(g, 2, 8)),
                               (randint(g, 1, 9) * (1 - 2 * randint(g, 0, 1)), 2)])


def _om_long_calls(seed):
    return _om_case(seed, [(40, 64)], lambda g: [(randint(g, 24, 40), 2 * randint(g, 24, 40))])


def _om_bad_calls(seed):
    # An odd width, a zero width and a negative even one, at other offsets.
    return _om_case(seed, [(5, 7), (1, 0), (2, -4)],
                    lambda g: [(randint(g, -9, 9), 2 * randint(g, 0, 15) + 1), (randint(g, -9, 9), 0),
                               (randint(g, -9, 9), -2 * randint(g, 1, 10))])


def _om_random_calls(seed):
    g = gen(seed)
    k1, k2 = (int(torch.randint(-40, 41, (1,), generator=g)) for _ in range(2))
    d1, d2 = (2 * int(torch.randint(1, 25, (1,), generator=g)) for _ in range(2))
    return [Call(args=(k1, d1)), Call(args=(k2, d2))]


# Kept mistakes, each with its hint --------------------------------------------------------


def _om_validate(d_model):
    if d_model < 2 or d_model % 2:
        raise ValueError(f"d_model={d_model} must be even and positive")


def _om_blocks(k, d_model, freq_exponent, sign=1.0, angle_of=lambda w, k: w * k, half=False):
    n = d_model // 2
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(n):
        w = 10000.0 ** (-freq_exponent(i, d_model))
        a = angle_of(w, k)
        c, s = math.cos(a), sign * math.sin(a)
        r0, r1 = (i, i + n) if half else (2 * i, 2 * i + 1)
        M[r0, r0], M[r0, r1], M[r1, r0], M[r1, r1] = c, s, -s, c
    return M.float()


@mistakes.keep("blocks turn the wrong way",
               "your matrix maps PE[pos] to PE[pos - k]: the sine terms have the wrong signs. With a pair "
               "ordered (sin, cos), sin(a + b) = sin a cos b + cos a sin b fixes the first row.")
def _om_transposed(k, d_model):
    _om_validate(d_model)
    return _om_blocks(k, d_model, lambda i, d: 2 * i / d, sign=-1.0)


@mistakes.keep("exponent i/d_model",
               "your frequencies fall too slowly: pair i turns by 1 / 10000^(2i/d_model) per position.")
def _om_exponent_i(k, d_model):
    _om_validate(d_model)
    return _om_blocks(k, d_model, lambda i, d: i / d)


@mistakes.keep("rotate-half layout",
               "you paired column i with column i + d_model/2 (the layout some rotary-embedding code "
               "uses); the sinusoidal table pairs column 2i (sin) with column 2i+1 (cos).")
def _om_rotate_half(k, d_model):
    _om_validate(d_model)
    return _om_blocks(k, d_model, lambda i, d: 2 * i / d, half=True)


@mistakes.keep("angle without k",
               "every block turns by the same angle whatever k is; the angle of pair i is its frequency "
               "times k (so that k = 0 gives the identity).")
def _om_angle_without_k(k, d_model):
    _om_validate(d_model)
    return _om_blocks(k, d_model, lambda i, d: 2 * i / d, angle_of=lambda w, k: w)


@mistakes.keep("odd d_model accepted",
               "an odd d_model leaves a column without a partner; refuse it with a ValueError naming "
               "d_model.")
def _om_odd_accepted(k, d_model):
    if d_model < 1:
        raise ValueError(f"d_model must be positive, got {d_model}")
    M = torch.eye(d_model)
    M[:d_model - d_model % 2, :d_model - d_model % 2] = _om_blocks(k, d_model - d_model % 2,
                                                                     lambda i, d: 2 * i / d)
    return M


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("Python loops",
                   "math.cos and math.sin, one 2x2 block assigned at a time")
def _om_alt_loops(k, d_model):
    """Python loops and math.cos / math.sin, one 2x2 block at a time."""
    if d_model <= 0 or d_model % 2 == 1:
        raise ValueError(f"expected an even, positive d_model, got d_model = {d_model}")
    M = torch.zeros(d_model, d_model)
    for i in range(d_model // 2):
        angle = k / 10000 ** (2 * i / d_model)
        block = torch.tensor([[math.cos(angle), math.sin(angle)],
                              [-math.sin(angle), math.cos(angle)]])
        M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = block
    return M


@alternatives.keep("torch.block_diag",
                   "2x2 rotations from float32 exp-log frequencies, block_diag")
def _om_alt_block_diag(k, d_model):
    """torch.block_diag of 2x2 rotations built from float32 angles."""
    if not (isinstance(d_model, int) and d_model > 0 and d_model % 2 == 0):
        raise ValueError("d_model has to be a positive even number, not " + str(d_model))
    freqs = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    angles = freqs * k
    blocks = [torch.stack([torch.stack([a.cos(), a.sin()]), torch.stack([-a.sin(), a.cos()])])
              for a in angles]
    return torch.block_diag(*blocks)


@alternatives.keep("a matrix power",
                   "M_1 built once in float64, torch.linalg.matrix_power(M_1, k)")
def _om_alt_power(k, d_model):
    """M_1 to the power k in float64 (negative powers invert it): k steps of one."""
    if d_model % 2 or d_model < 2:
        raise ValueError(f"offset_matrix needs an even d_model >= 2; d_model={d_model}")
    one = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(0, d_model, 2):
        w = 1.0 / 10000 ** (i / d_model)
        one[i:i + 2, i:i + 2] = torch.tensor([[math.cos(w), math.sin(w)], [-math.sin(w), math.cos(w)]],
                                             dtype=torch.float64)
    return torch.linalg.matrix_power(one, k).to(torch.float32)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch04_ex4", title="The offset matrix M_k",
    name="offset_matrix", reference=offset_matrix, points=2,
    checks=[
        Check("k=5, d_model=32 (the chapter's table)", _om_chapter_calls, seed=_OM_PUBLIC_SEED, atol=1e-5,
              hint="this check compares the whole (32, 32) matrix for k=5: M_k @ PE[pos] must equal "
                   "PE[pos + k] for every position, the pair of columns 2i (sin) and 2i+1 (cos) turned by "
                   "its own angle k / 10000^(2i/d_model)."),
        Check("a negative offset, a zero offset, one pair: (k, d_model) = (-3, 8), (0, 8), (1, 2)",
              _om_negative_calls, seed=_OM_PUBLIC_SEED, atol=1e-5,
              hint="this check covers k < 0 (M_k @ PE[pos] = PE[pos + k] turns back), k = 0 (M_0 is the "
                   "identity) and d_model = 2 (one pair)."),
        Check("a long offset in a wide table: k=40, d_model=64", _om_long_calls, seed=_OM_PUBLIC_SEED, atol=1e-5,
              hint="this check compares the (64, 64) matrix for k=40: M_k @ PE[pos] must equal PE[pos + k] "
                   "there too."),
        Check("an odd or non-positive d_model raises ValueError naming d_model", _om_bad_calls, seed=_OM_PUBLIC_SEED,
              must_mention=["d_model"], weight=0.5,
              hint="refuse a d_model that is not a positive even number, and name d_model in the message."),
        Check("random offsets and widths (hidden)", _om_random_calls, public=False, atol=1e-5,
              hint="block i turns by k / 10000^(2i/d_model), for any k and any even d_model."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
