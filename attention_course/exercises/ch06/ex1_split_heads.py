"""ch06_ex1: Splitting the features into heads.

A short warm-up on the chapter's reshape (the layer of Exercise 2 merges the heads back in the
reverse order). Write `split_heads(x, num_heads)` where `x` is a float tensor of shape
`(batch, num_tokens, d_out)` and `num_heads` a positive integer. Return a tensor of shape
`(batch, num_heads, num_tokens, head_dim)` with `head_dim = d_out // num_heads`, whose entry
`[b, h, t, i]` is `x[b, t, h * head_dim + i]` (same dtype as `x`). Raise `ValueError` (with any
message) when `d_out` is not divisible by `num_heads`.
"""
from __future__ import annotations

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import _head_dim

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def split_heads(x, num_heads):
    """(batch, num_tokens, d_out) -> (batch, num_heads, num_tokens, d_out // num_heads)."""
    batch, num_tokens, d_out = x.shape
    head_dim = _head_dim(d_out, num_heads)
    return x.reshape(batch, num_tokens, num_heads, head_dim).transpose(1, 2)


# Inputs of the public and hidden checks ---------------------------------------------------


def _split_small_calls(seed):
    g = gen(seed)
    readable = torch.arange(2 * 3 * 6, dtype=torch.float32).reshape(2, 3, 6)
    return [Call(args=(readable, 2)), Call(args=(torch.randn(2, 4, 6, generator=g), 3))]


def _split_edge_calls(seed):
    g = gen(seed)
    x = torch.randn(2, 3, 4, generator=g)
    return [Call(args=(x, 1)), Call(args=(x, 4)), Call(args=(x.double(), 2))]


def _split_bad_calls(seed):
    g = gen(seed)
    # No valid call here: an answer that always raises fails the value checks, and at grading an error
    # check pays only once they all pass.
    return [Call(args=(torch.randn(1, 3, 10, generator=g), 4)),
            Call(args=(torch.randn(2, 2, 6, generator=g), 4))]


def _split_hidden_calls(seed):
    g = gen(seed)
    calls = []
    for _ in range(3):
        heads, head_dim = randint(g, 2, 6), randint(g, 1, 5)
        x = torch.randn(randint(g, 1, 3), randint(g, 2, 7), heads * head_dim, generator=g)
        calls.append(Call(args=(x, heads)))
    return calls


def _split_hidden_bad_calls(seed):
    g = gen(seed)
    heads = randint(g, 3, 6)
    d_out = heads * randint(g, 1, 4) + randint(g, 1, heads - 1)
    return [Call(args=(torch.randn(2, 3, heads * 2, generator=g), heads)),
            Call(args=(torch.randn(2, 3, d_out, generator=g), heads))]


_SPLIT_HINT = ("this check compares the split tensor with the contract's layout: its dtype (that of x), then "
               "its values: feature h * head_dim + i of a token belongs to head h, and the heads axis comes "
               "before the tokens axis.")


# Kept mistakes, each with its hint --------------------------------------------------------


def _split_checked(body):
    def impl(x, num_heads):
        batch, num_tokens, d_out = x.shape
        return body(x, batch, num_tokens, num_heads, _head_dim(d_out, num_heads))
    return impl


mistakes.add("reshaped straight to (batch, heads, tokens, head_dim)",
             "you reshaped straight into the target shape: that has the right shape, but it cuts the "
             "flat memory in the wrong places and mixes features of different tokens into one head. "
             "Split the feature axis first, then swap axes.",
             _split_checked(lambda x, b, t, h, hd: x.reshape(b, h, t, hd)))


mistakes.add("heads axis not moved",
             "the heads axis must come before the tokens axis: the result is (batch, num_heads, "
             "num_tokens, head_dim), not (batch, num_tokens, num_heads, head_dim).",
             _split_checked(lambda x, b, t, h, hd: x.reshape(b, t, h, hd)))


mistakes.add("head index innermost",
             "the heads own consecutive blocks of features (head 0 the first head_dim features); you "
             "gave head h every num_heads-th feature instead, i.e. split the axis as (head_dim, "
             "num_heads).",
             _split_checked(lambda x, b, t, h, hd: x.reshape(b, t, hd, h).permute(0, 3, 1, 2)))


mistakes.add("no divisibility check",
             "when d_out is not a multiple of num_heads the reshape fails with a RuntimeError (or silently "
             "drops features); test d_out % num_heads first and raise ValueError.",
             lambda x, num_heads: x.reshape(x.shape[0], x.shape[1], num_heads,
                                            x.shape[2] // num_heads).transpose(1, 2))


mistakes.add("result in float32",
             "your values are right but the result is float32 for a float64 x: keep the dtype of x.",
             _split_checked(lambda x, b, t, h, hd: x.float().reshape(b, t, h, hd).transpose(1, 2)))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("unflatten and permute",
                   "Tensor.unflatten(-1, (num_heads, head_dim)), permute")
def _split_alt_unflatten(x, num_heads):
    d_out = x.shape[-1]
    if d_out % num_heads != 0:
        raise ValueError(f"d_out={d_out} is not divisible by num_heads={num_heads}")
    return x.unflatten(-1, (num_heads, d_out // num_heads)).permute(0, 2, 1, 3)


@alternatives.keep("chunks stacked",
                   "x.split(head_dim, dim=-1) stacked on a new heads axis")
def _split_alt_chunks(x, num_heads):
    if x.shape[2] % num_heads:
        raise ValueError("uneven heads")
    return torch.stack(x.split(x.shape[2] // num_heads, dim=-1), dim=1)


@alternatives.keep("loops over features",
                   "an empty tensor filled feature by feature")
def _split_alt_loops(x, num_heads):
    b, t, d_out = x.shape
    hd, rest = divmod(d_out, num_heads)
    if rest:
        raise ValueError(f"num_heads ({num_heads}) must divide d_out ({d_out})")
    out = torch.empty(b, num_heads, t, hd, dtype=x.dtype)
    for h in range(num_heads):
        for i in range(hd):
            out[:, h, :, i] = x[:, :, h * hd + i]
    return out


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch06_ex1", title="Splitting the features into heads", name="split_heads",
    reference=split_heads, points=1,
    checks=[
        Check("d_out=6 into 2 heads (an arange input) and into 3 heads", _split_small_calls, hint=_SPLIT_HINT),
        Check("one head, as many heads as features, and a float64 x", _split_edge_calls, hint=_SPLIT_HINT),
        Check("d_out not divisible by num_heads raises ValueError", _split_bad_calls, weight=0.2,
              hint="this check passes d_out=10 and d_out=6 with num_heads=4, which must raise ValueError."),
        Check("random sizes (hidden)", _split_hidden_calls, public=False, hint=_SPLIT_HINT),
        Check("another indivisible d_out (hidden)", _split_hidden_bad_calls, public=False, weight=0.2,
              hint="this check passes a d_out that num_heads divides, then one it does not divide, which "
                   "must raise ValueError."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
