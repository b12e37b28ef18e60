r"""ch04_ex3: Sinusoidal positional encoding.

Write `sinusoidal_encoding(num_positions, d_model)` returning the sinusoidal
positional encoding of Vaswani et al. (2017) as a `torch.float32` tensor of shape
`(num_positions, d_model)`, with the exact formula of this chapter: column $2i$ holds
$\sin(pos / 10000^{2i/d_\text{model}})$ and column $2i+1$ holds
$\cos(pos / 10000^{2i/d_\text{model}})$, for positions $pos = 0, \dots,$
`num_positions - 1`.

- `num_positions`, `d_model`: Python `int`s.
- Raise `ValueError` (with any message) when `num_positions < 1`, and when `d_model`
  is not a positive even number (sines and cosines come in pairs).
"""
from __future__ import annotations

import math

import torch

from ... import transformer as tf
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def sinusoidal_encoding(num_positions, d_model):
    """Sinusoidal positional encoding, float32 tensor of shape (num_positions, d_model)."""
    if num_positions < 1:
        raise ValueError(f"num_positions must be a positive integer, got {num_positions}")
    if d_model < 2 or d_model % 2 != 0:
        raise ValueError(f"d_model must be a positive even integer (sin/cos pairs), got {d_model}")
    pos = torch.arange(num_positions, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angles = pos / 10000.0 ** (two_i / d_model)
    pe = torch.zeros(num_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe.float()


# Inputs of the public and hidden checks ---------------------------------------------------


def _pe_small_calls(seed):
    if seed == 0:  # the public case (a release ships its outcome)
        return [Call(args=(4, 6))]
    g = gen(seed)  # at grading: another small table
    return [Call(args=(randint(g, 5, 7), 2 * randint(g, 4, 5)))]


def _pe_table_calls(seed):
    if seed == 0:
        return [Call(args=(50, 16))]
    g = gen(seed)
    return [Call(args=(randint(g, 40, 49), 2 * randint(g, 6, 11)))]


def _pe_bad_calls(seed):
    if seed == 0:
        return [Call(args=(5, 3)), Call(args=(0, 4)), Call(args=(4, 0)), Call(args=(-2, 4)), Call(args=(6, 7)),
                Call(args=(0, 3)), Call(args=(-1, 0))]   # the last two: both wrong
    g = gen(seed)  # the same kinds of wrong sizes, other values
    good_n, even, odd = randint(g, 2, 9), 2 * randint(g, 1, 6), 2 * randint(g, 1, 6) + 1
    return [Call(args=(good_n, odd)), Call(args=(0, even)), Call(args=(good_n, 0)), Call(args=(-randint(g, 1, 5), even)),
            Call(args=(good_n + 1, 2 * randint(g, 1, 6) + 1)), Call(args=(0, odd)), Call(args=(-randint(g, 1, 5), 0))]


def _pe_random_calls(seed):
    g = gen(seed)
    n = int(torch.randint(10, 41, (1,), generator=g))
    d = 2 * int(torch.randint(2, 17, (1,), generator=g))
    return [Call(args=(n, d)), Call(args=(1, 8))]


# Kept mistakes, each with its hint --------------------------------------------------------


def _pe_validate(num_positions, d_model):
    if num_positions < 1:
        raise ValueError(f"num_positions must be positive, got {num_positions}")
    if d_model < 2 or d_model % 2 != 0:
        raise ValueError(f"d_model must be positive and even, got {d_model}")


def _pe_table(num_positions, d_model, exponent, swap=False, blocks=False):
    pos = torch.arange(num_positions, dtype=torch.float64)[:, None]
    cols = torch.arange(d_model, dtype=torch.float64)
    angles = pos / 10000.0 ** exponent(cols)
    if blocks:  # first all the sines, then all the cosines
        half = angles[:, 0::2]
        return torch.cat([torch.sin(half), torch.cos(half)], dim=1)[:, :d_model].float()
    even = (torch.arange(d_model) % 2 == 0)
    if swap:
        even = ~even
    return torch.where(even, torch.sin(angles), torch.cos(angles)).float()


@mistakes.keep("sin and cos swapped",
               "your even columns hold cosines and your odd columns sines; Vaswani et al. put the sine "
               "in column 2i and the cosine in column 2i+1.")
def _pe_swapped(num_positions, d_model):
    _pe_validate(num_positions, d_model)
    return _pe_table(num_positions, d_model, lambda c: 2 * (c // 2) / d_model, swap=True)


@mistakes.keep("exponent i/d_model",
               "your frequencies fall too slowly: the exponent of 10000 is 2i/d_model, where i counts "
               "the sin/cos pairs (so 2i is the even column index).")
def _pe_no_factor_two(num_positions, d_model):
    _pe_validate(num_positions, d_model)
    return _pe_table(num_positions, d_model, lambda c: (c // 2) / d_model)


@mistakes.keep("column index as exponent",
               "your cosine columns use their own column index in the exponent; both columns of a pair "
               "(2i and 2i+1) share the frequency of the even one, 1 / 10000^(2i/d_model).")
def _pe_column_index(num_positions, d_model):
    _pe_validate(num_positions, d_model)
    return _pe_table(num_positions, d_model, lambda c: c / d_model)


@mistakes.keep("sines and cosines in blocks",
               "you put all the sines first and all the cosines after; the formula interleaves them "
               "(sin in even columns, cos in odd columns).")
def _pe_blocks(num_positions, d_model):
    _pe_validate(num_positions, d_model)
    return _pe_table(num_positions, d_model, lambda c: 2 * (c // 2) / d_model, blocks=True)


@mistakes.keep("odd d_model accepted",
               "an odd d_model leaves a sine without its cosine partner; refuse it with a ValueError.")
def _pe_odd_accepted(num_positions, d_model):
    if num_positions < 1 or d_model < 1:
        raise ValueError(f"num_positions and d_model must be positive, got {num_positions}, {d_model}")
    return _pe_table(num_positions, d_model, lambda c: 2 * (c // 2) / d_model)


@mistakes.keep("positions counted from 1",
               "your rows are positions 1 to num_positions; positions count from 0, so row 0 holds "
               "sin(0) = 0 in the even columns and cos(0) = 1 in the odd ones.")
def _pe_from_one(num_positions, d_model):
    # Positions counted 1..num_positions instead of 0..num_positions-1.
    _pe_validate(num_positions, d_model)
    return _pe_table(num_positions + 1, d_model, lambda c: 2 * (c // 2) / d_model)[1:]


@mistakes.keep("float64 table",
               "your values are right but the table is float64; the contract asks for float32 (compute "
               "in float64 if you like, and convert the result).")
def _pe_float64(num_positions, d_model):
    # The right table, left in float64.
    _pe_validate(num_positions, d_model)
    return _pe_table(num_positions, d_model, lambda c: 2 * (c // 2) / d_model).double()


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("d2l's table",
                   "positions divided by torch.pow(10000, 2i/d_model), float32, slice "
    "assignment")
def _pe_alt_d2l(num_positions, d_model):
    # d2l's PositionalEncoding table: positions over a power of 10000, float32 throughout.
    if num_positions <= 0:
        raise ValueError(f"num_positions={num_positions} must be at least 1")
    if d_model <= 0 or d_model % 2:
        raise ValueError(f"d_model={d_model} must be even and positive")
    P = torch.zeros((num_positions, d_model))
    X = torch.arange(num_positions, dtype=torch.float32).reshape(-1, 1) / torch.pow(
        10000, torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    P[:, 0::2] = torch.sin(X)
    P[:, 1::2] = torch.cos(X)
    return P


@alternatives.keep("Annotated Transformer's frequencies",
                   "exp(-2i log(10000)/d_model), sin and cos stacked "
"and reshaped")
def _pe_alt_exp_log(num_positions, d_model):
    # The Annotated Transformer's form: frequencies as exp(-2i log(10000) / d_model), stacked.
    if not num_positions >= 1:
        raise ValueError("num_positions must be >= 1")
    if not (d_model >= 2 and d_model % 2 == 0):
        raise ValueError("d_model must be an even number >= 2")
    position = torch.arange(0, num_positions).unsqueeze(1).float()
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
    angles = position * div_term
    return torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1).reshape(num_positions, d_model)


@alternatives.keep("Python loops",
                   "math.sin and math.cos entry by entry")
def _pe_alt_loops(num_positions, d_model):
    # Every entry with Python's math, one at a time.
    if num_positions < 1:
        raise ValueError(f"expected num_positions >= 1, got {num_positions}")
    if d_model < 1 or d_model % 2 == 1:
        raise ValueError(f"expected an even d_model >= 2, got {d_model}")
    rows = []
    for pos in range(num_positions):
        row = []
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            row += [math.sin(angle), math.cos(angle)]
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float32)


alternatives.add("the course library's transformer.sinusoidal_encoding",
                 "the table Chapter 8's Transformer adds: float64 angles, sines and cosines "
                 "interleaved by stack and flatten, cast to float32",
                 tf.sinusoidal_encoding)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch04_ex3", title="Sinusoidal positional encoding",
    name="sinusoidal_encoding", reference=sinusoidal_encoding, points=1,
    checks=[
        Check("4 positions, d_model=6", _pe_small_calls, seed=0, atol=1e-4,
              hint="column 2i holds sin(pos / 10000^(2i/d_model)), column 2i+1 the cosine of the same angle; "
                   "return float32 of shape (num_positions, d_model)."),
        Check("50 positions, d_model=16", _pe_table_calls, seed=0, atol=1e-4,
              hint="this check compares the whole float32 table for 50 positions and d_model=16: row pos, "
                   "column 2i holds sin(pos / 10000^(2i/d_model)), column 2i+1 the cosine of the same "
                   "angle; the reason above gives the largest difference."),
        Check("odd or non-positive sizes raise ValueError", _pe_bad_calls, seed=0, atol=1e-4, weight=0.5,
              hint="refuse num_positions < 1 and an odd or non-positive d_model with a ValueError."),
        Check("random sizes (hidden)", _pe_random_calls, seed=12, public=False, atol=1e-4,
              hint="this check compares float32 tables of random sizes, and a single position."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
