r"""ch10_ex6: The smallest RoPE base for a context.

Raising RoPE's base is one way models stretch their context (Code Llama and Llama 3 raised it
from 10,000 to 1,000,000 and 500,000). Pair `i` of a head of `head_dim` numbers
(`i = 0, ..., head_dim / 2 - 1`) turns by `base ** (-2 i / head_dim)` radians per position, so the
slowest pair is the last one. Call a base *enough* for a context of `context_len` positions when
the slowest pair's angle at position `context_len` is at most one full turn, `2π` radians: then no
two positions of the context give that pair the same angle. Derive the smallest base that is enough
and write `base_for_context(head_dim, context_len)`, where `head_dim >= 4` is an even `int` and
`context_len >= 7` an `int` (more than one full turn at base 1). Return the base as a Python `float`.
"""
from __future__ import annotations

import math

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import public_or_drawn

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def base_for_context(head_dim, context_len):
    """The base at which the slowest RoPE pair turns exactly once over context_len positions."""
    slowest_exponent = (head_dim - 2) / head_dim              # inverse frequency base ** -slowest_exponent
    return (context_len / (2 * math.pi)) ** (1 / slowest_exponent)


# Inputs of the public and hidden checks ---------------------------------------------------


def _llama_calls(seed):
    """Heads of 128 numbers at 4,096, 8,192 and 131,072 positions; at grading drawn heads and contexts."""
    public = [(128, 4096), (128, 8192), (128, 131072)]

    def draw(g):
        return [(2 * randint(g, 32, 80), randint(g, 1000, 200_000)) for _ in range(3)]
    return [Call(args=case) for case in public_or_drawn(seed, 0, public, draw)]


def _small_calls(seed):
    """Small heads (4, 6 and 10 numbers), where the slowest pair's exponent is far from 1, and a
    context of 7 positions."""
    public = [(4, 100), (6, 2048), (10, 7)]

    def draw(g):
        return [(2 * randint(g, 2, 6), randint(g, 7, 5000)) for _ in range(3)]
    return [Call(args=case) for case in public_or_drawn(seed, 1, public, draw)]


def _hidden_calls(seed):
    g = gen(seed)
    return [Call(args=(2 * randint(g, 2, 128), randint(g, 7, 1_000_000))) for _ in range(5)]


_HINT = ("this check compares the base with a relative tolerance of 1e-9, call by call (the reason says which "
         "call and how far off). Write the slowest pair's angle at position context_len as a function of the "
         "base.")

_TYPE_HINT = "this check reads only the type of each result: the contract asks for a Python float."


def _compare_float(got, want, calls):
    """Only the type of each result: a Python float (its value is the other checks' business)."""
    for i, mine in enumerate(got):
        if mine.get("status") != "ok":
            return f"call {i + 1} of {len(calls)} raised {mine.get('error_type')}: {mine.get('message')}"[:300]
        if type(mine["value"]) is not float:
            value = mine["value"]
            shown = (f"a tensor of shape {tuple(value.shape)}" if hasattr(value, "shape")
                     else f"{type(value).__name__} {value!r}"[:60])
            return f"call {i + 1} of {len(calls)} returned {shown}; the contract asks for a Python float"
    return None


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("exponent upside down",
               "the power applied to the ratio is upside down: the slowest pair's exponent must be undone, and "
               "the base found that way is too small for the context.")
def _base_inverted_exponent(head_dim, context_len):
    return (context_len / (2 * math.pi)) ** ((head_dim - 2) / head_dim)


@mistakes.keep("one turn as one radian",
               "the slowest pair was allowed one radian over the context instead of one full turn of 2π "
               "radians, which asks for a larger base than needed.")
def _base_one_radian(head_dim, context_len):
    return float(context_len) ** (head_dim / (head_dim - 2))


@mistakes.keep("slowest pair at exponent 1",
               "the slowest pair was given the exponent -1 (as if i ran up to head_dim / 2); the last pair is "
               "i = head_dim / 2 - 1, whose exponent is a little above -1, most of all in small heads.")
def _base_exponent_one(head_dim, context_len):
    return context_len / (2 * math.pi)


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("in logs", "log base from the log of the context")
def _base_alt_logs(head_dim, context_len):
    pairs = head_dim // 2
    return math.exp(math.log(context_len / math.tau) * pairs / (pairs - 1))


@alternatives.keep("bisection on the angle", "bisection on log base until the slowest angle is one turn")
def _base_alt_bisect(head_dim, context_len):
    def turns(log_base):
        return context_len * math.exp(-log_base * (head_dim - 2) / head_dim) / (2 * math.pi)
    low, high = 0.0, 2 * math.log(context_len) + 10
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if turns(middle) > 1 else (low, middle)
    return math.exp((low + high) / 2)


@alternatives.keep("a float64 tensor", "torch in float64, converted back with .item()")
def _base_alt_torch(head_dim, context_len):
    import torch
    ratio = torch.tensor(context_len, dtype=torch.float64) / (2 * torch.pi)
    return torch.pow(ratio, torch.tensor(head_dim / (head_dim - 2), dtype=torch.float64)).item()


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch10_ex6", title="The smallest RoPE base for a context",
    name="base_for_context", reference=base_for_context, points=2,
    checks=[
        Check("heads of 128 numbers at 4,096, 8,192 and 131,072 positions", _llama_calls, seed=0, hint=_HINT,
              rtol=1e-9, atol=0.0),
        Check("small heads, and a context of 7 positions", _small_calls, seed=1, hint=_HINT, rtol=1e-9, atol=0.0),
        Check("the base is a Python float (heads of 128 numbers)", _llama_calls, seed=0, hint=_TYPE_HINT,
              compare=_compare_float, weight=0.25),
        Check("random heads and contexts (hidden)", _hidden_calls, seed=2, public=False, hint=_HINT,
              rtol=1e-9, atol=0.0),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
