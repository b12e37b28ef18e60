"""ch04_ex6: From nn.Parameter matrices to nn.Linear weights.

The chapter's `CompactSelfAttention` holds its projections as `(d_in, d_out)` matrices,
used as `x @ W`; the `SelfAttention` of {ref}`ch04_ex3` holds `nn.Linear` layers.
Write `linear_state_dict(W_query, W_key, W_value)` that turns the three matrices into a
state dict for `SelfAttention(d_in, d_out)` (with `qkv_bias=False`), such that after
`load_state_dict` it computes exactly what `CompactSelfAttention(W_query, W_key, W_value)`
computes.

- `W_query`, `W_key`, `W_value`: floating-point tensors of one shape `(d_in, d_out)` and
  one dtype.
- Return a plain `dict` with exactly the keys `"W_query.weight"`, `"W_key.weight"` and
  `"W_value.weight"`, each a tensor with the dtype of the matrices and the shape that
  `nn.Linear(d_in, d_out)` gives its weight.

Once it passes, load the result into your module from exercise 3 in a scratch cell and
compare it with `CompactSelfAttention` on the chapter's sentence.
"""
from __future__ import annotations

from torch import nn
import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


_LINEAR_NAMES = ("W_query", "W_key", "W_value")


def linear_state_dict(W_query, W_key, W_value):
    """The (d_in, d_out) matrices of the nn.Parameter module as a state dict for the
    nn.Linear module of exercise 3 (qkv_bias=False): nn.Linear computes x @ weight.T and
    stores weight as (d_out, d_in), so each matrix goes in transposed."""
    return {f"{name}.weight": W.T.contiguous()
            for name, W in zip(_LINEAR_NAMES, (W_query, W_key, W_value))}


# Inputs of the public and hidden checks ---------------------------------------------------


_LSD_CHAPTER_SEED = 0   # the check's own seed: the chapter's matrices (what a release ships)


def _lsd_chapter_calls(seed):
    # At its own seed, the chapter's own matrices (the same generator and order as its cell); at a
    # grading seed, three other (3, 2) float32 matrices of the same scale, drawn from that seed.
    g = torch.Generator().manual_seed(2024 if seed == _LSD_CHAPTER_SEED else 2025 + seed)
    mats = tuple(torch.randn(3, 2, generator=g) for _ in range(3))
    return [Call(args=mats)]


def _lsd_other_calls(seed):
    g = gen(seed)
    return [Call(args=tuple(torch.randn(5, 4, generator=g, dtype=torch.float64) for _ in range(3)))]


def _lsd_random_calls(seed):
    g = gen(seed)
    d_in, d_out = int(torch.randint(2, 9, (1,), generator=g)), int(torch.randint(2, 9, (1,), generator=g))
    square = int(torch.randint(2, 7, (1,), generator=g))
    return [Call(args=tuple(torch.randn(d_in, d_out, generator=g) for _ in range(3))),
            Call(args=tuple(torch.randn(square, square, generator=g) for _ in range(3)))]


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("not transposed",
               "your weights have the matrices' own shape (d_in, d_out); nn.Linear(d_in, d_out) stores "
               "its weight as (d_out, d_in) and computes x @ weight.T, so each matrix goes in transposed.")
def _lsd_untransposed(W_query, W_key, W_value):
    return {f"{name}.weight": W.clone() for name, W in zip(_LINEAR_NAMES, (W_query, W_key, W_value))}


@mistakes.keep("reshaped instead of transposed",
               "your weights have the right shape but the wrong values: a reshape to (d_out, d_in) "
               "reorders the numbers row by row; a transpose swaps rows and columns.")
def _lsd_reshaped(W_query, W_key, W_value):
    return {f"{name}.weight": W.reshape(W.shape[1], W.shape[0])
            for name, W in zip(_LINEAR_NAMES, (W_query, W_key, W_value))}


@mistakes.keep("names without .weight",
               "the keys of a state dict name the parameter inside each layer: 'W_query.weight', not "
               "'W_query'.")
def _lsd_bare_names(W_query, W_key, W_value):
    return {name: W.T.contiguous() for name, W in zip(_LINEAR_NAMES, (W_query, W_key, W_value))}


@mistakes.keep("zero biases added",
               "exercise 3's module with qkv_bias=False has no bias parameters, so load_state_dict "
               "refuses 'W_query.bias' and friends; return the three weights only.")
def _lsd_with_biases(W_query, W_key, W_value):
    out = linear_state_dict(W_query, W_key, W_value)
    for name, W in zip(_LINEAR_NAMES, (W_query, W_key, W_value)):
        out[f"{name}.bias"] = torch.zeros(W.shape[1], dtype=W.dtype)
    return out


@mistakes.keep("query and key swapped",
               "'W_query.weight' holds W_key and 'W_key.weight' holds W_query: each matrix belongs to the "
               "layer of the same name.")
def _lsd_query_key_swapped(W_query, W_key, W_value):
    return {"W_query.weight": W_key.T.contiguous(), "W_key.weight": W_query.T.contiguous(),
            "W_value.weight": W_value.T.contiguous()}


# Kept alternatives (correct answers in other styles) --------------------------------------


class _LsdLayers(nn.Module):
    def __init__(self, d_in, d_out, dtype):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=False, dtype=dtype)
        self.W_key = nn.Linear(d_in, d_out, bias=False, dtype=dtype)
        self.W_value = nn.Linear(d_in, d_out, bias=False, dtype=dtype)


@alternatives.keep("copy_ into real layers",
                   "nn.Linear layers in a module, copy_ under no_grad, "
"dict(module.state_dict())")
def _lsd_alt_copy(W_query, W_key, W_value):
    """Build the nn.Linear layers, copy the transposed matrices in under no_grad, and
    return the module's own state_dict as a plain dict."""
    d_in, d_out = W_query.shape
    layers = _LsdLayers(d_in, d_out, W_query.dtype)
    with torch.no_grad():
        layers.W_query.weight.copy_(W_query.t())
        layers.W_key.weight.copy_(W_key.t())
        layers.W_value.weight.copy_(W_value.t())
    return dict(layers.state_dict())


@alternatives.keep("weight replaced by a new Parameter",
                   "per-layer nn.Parameter assignment, "
"torch.transpose, keys prefixed from each layer's state_dict")
def _lsd_alt_parameter(W_query, W_key, W_value):
    """One nn.Linear per matrix, its weight replaced by a new nn.Parameter, keys prefixed."""
    out = {}
    for prefix, W in (("W_query", W_query), ("W_key", W_key), ("W_value", W_value)):
        layer = nn.Linear(W.shape[0], W.shape[1], bias=False)
        layer.weight = nn.Parameter(torch.transpose(W, 0, 1).clone())
        for key, value in layer.state_dict().items():
            out[prefix + "." + key] = value
    return out


@alternatives.keep("read off F.linear's definition",
                   "the identity pushed through x @ W, transposed "
"with einsum")
def _lsd_alt_identity(W_query, W_key, W_value):
    """Read each weight off nn.Linear's definition: F.linear(x, A) = x @ A.T, so A is what
    x @ W gives for x = the identity, transposed (einsum)."""
    eye = torch.eye(W_query.shape[0], dtype=W_query.dtype)
    return {"W_query.weight": torch.einsum("ij->ji", eye @ W_query),
            "W_key.weight": torch.einsum("ij->ji", eye @ W_key),
            "W_value.weight": torch.einsum("ij->ji", eye @ W_value)}


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch04_ex6", title="From nn.Parameter matrices to nn.Linear weights",
    name="linear_state_dict", reference=linear_state_dict, points=1,
    checks=[
        Check("the chapter's W_q, W_k, W_v (d_in=3, d_out=2)", _lsd_chapter_calls, seed=_LSD_CHAPTER_SEED,
              hint="this check compares your dict (its keys, and each tensor's shape, dtype and values) "
                   "with what SelfAttention(3, 2) must load so that its layers compute x @ W_q, x @ W_k "
                   "and x @ W_v; the reason above names the first entry that differs."),
        Check("float64 matrices with d_in=5, d_out=4", _lsd_other_calls, seed=1,
              hint="this check uses float64 matrices with d_in=5, d_out=4: the dict must hold what "
                   "SelfAttention(5, 4) loads to compute the same products, in float64; the reason above "
                   "names the first entry that differs."),
        Check("random sizes, one of them square (hidden)", _lsd_random_calls, public=False,
              hint="this check compares the dict for random sizes, one of them with d_in == d_out."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
