"""ch06_ex2: Merging the heads back.

Write `merge_heads(x)`, the inverse of `split_heads`: `x` has shape
`(batch, num_heads, num_tokens, head_dim)`; return a tensor of shape
`(batch, num_tokens, num_heads * head_dim)` whose entry `[b, t, h * head_dim + i]` is
`x[b, h, t, i]` (head 0's features first, then head 1's, ...), with the same dtype as `x`. It must
work for any such `x`, including one that is not contiguous in memory. Raise `ValueError` naming `x` and its shape when
`x` is not 4-D.
"""
from __future__ import annotations

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint, shape_of

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def merge_heads(x):
    """(batch, num_heads, num_tokens, head_dim) -> (batch, num_tokens, num_heads * head_dim)."""
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(f"x must have shape (batch, num_heads, num_tokens, head_dim), got x of shape "
                         f"{shape_of(x)}")
    batch, num_heads, num_tokens, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, num_tokens, num_heads * head_dim)


# Inputs of the public and hidden checks ---------------------------------------------------


def _merge_small_calls(seed):
    g = gen(seed)
    readable = torch.arange(1 * 2 * 3 * 2, dtype=torch.float32).reshape(1, 2, 3, 2)
    strided = torch.randn(2, 3, 4, 2, generator=g).transpose(1, 2)   # not contiguous: (2, 4, 3, 2)
    return [Call(args=(readable,)), Call(args=(torch.randn(2, 3, 4, 2, generator=g),)), Call(args=(strided,))]


def _merge_bad_calls(seed):
    g = gen(seed)
    return [Call(args=(torch.randn(2, 3, 4, generator=g),)),
            Call(args=(torch.randn(1, 2, 3, 4, 5, generator=g),))]


def _merge_hidden_calls(seed):
    g = gen(seed)
    return [Call(args=(torch.randn(randint(g, 1, 3), randint(g, 2, 6), randint(g, 2, 7),
                                   randint(g, 1, 5), generator=g),)) for _ in range(3)]


_MERGE_HINT = ("this check compares the merged tensor with the contract: its dtype (that of x), its shape "
               "(batch, num_tokens, num_heads * head_dim), then its values: head h's features land in "
               "columns h * head_dim ... (h + 1) * head_dim - 1 of each token, tokens in their order.")


# Kept mistakes, each with its hint --------------------------------------------------------


def _merge_checked(body):
    def impl(x):
        if x.dim() != 4:
            raise ValueError(f"x must be 4-D, got x of shape {tuple(x.shape)}")
        return body(x, *x.shape)
    return impl


mistakes.add("flattened without moving the tokens back",
             "you flattened (heads, tokens, head_dim) as it is stored: the result has the right shape, "
             "but each output row mixes several tokens. The tokens axis must come first again.",
             _merge_checked(lambda x, b, h, t, hd: x.reshape(b, t, h * hd)))


mistakes.add("view after transpose",
             "a transposed tensor is not laid out row by row in memory any more, so view cannot merge "
             "its last two axes; use an operation that is allowed to copy.",
             _merge_checked(lambda x, b, h, t, hd: x.transpose(1, 2).view(b, t, h * hd)))


mistakes.add("heads interleaved",
             "the heads are concatenated one after the other (all of head 0, then all of head 1); you "
             "interleaved them feature by feature.",
             _merge_checked(lambda x, b, h, t, hd: x.permute(0, 2, 3, 1).reshape(b, t, h * hd)))


@mistakes.keep("no shape check",
               "unpacking x.shape into four names fails with a message that names neither x nor its "
               "shape; test x.dim() first and raise your own ValueError.")
def _merge_unchecked(x):
    batch, num_heads, num_tokens, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, num_tokens, num_heads * head_dim)


mistakes.add("result in float64",
             "your values are right but the result is float64: it must have the dtype of x (float32 "
             "here); compute in float64 if you like, then cast back with .to(x.dtype).",
             _merge_checked(lambda x, b, h, t, hd: x.double().transpose(1, 2).reshape(b, t, h * hd)))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("heads concatenated",
                   "torch.cat of x.unbind(1) along the features")
def _merge_alt_cat(x):
    if x.dim() != 4:
        raise ValueError(f"merge_heads needs a 4-D x, got x.shape = {x.shape}")
    return torch.cat(x.unbind(dim=1), dim=-1)


@alternatives.keep("permute and flatten",
                   "permute(0, 2, 1, 3).flatten(2)")
def _merge_alt_flatten(x):
    if len(x.shape) != 4:
        raise ValueError(f"x must be (batch, num_heads, num_tokens, head_dim); x has shape {list(x.shape)}")
    return x.permute(0, 2, 1, 3).flatten(start_dim=2)


@alternatives.keep("einsum placement in float64",
                   "a one-hot placement tensor contracted by einsum")
def _merge_alt_einsum(x):
    # A one-hot placement tensor by einsum, in float64, cast back.
    if x.ndim != 4:
        raise ValueError("x: expected 4 axes, got shape (" + ", ".join(map(str, x.shape)) + ")")
    b, h, t, hd = x.shape
    place = torch.eye(h * hd, dtype=torch.float64).reshape(h, hd, h * hd)
    return torch.einsum("bhti,hio->bto", x.double(), place).to(x.dtype)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch06_ex2", title="Merging the heads back", name="merge_heads",
    reference=merge_heads, points=1,
    checks=[
        Check("2 heads of 3 tokens (an arange input), a random batch, a non-contiguous input", _merge_small_calls,
              hint=_MERGE_HINT),
        Check("a 3-D or 5-D input raises ValueError naming x and its shape", _merge_bad_calls, weight=0.4,
              must_mention=lambda call: ["x", tuple(call.args[0].shape)],
              hint="check x.dim() first and put x and its shape in the message."),
        Check("random sizes (hidden)", _merge_hidden_calls, public=False, hint=_MERGE_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
