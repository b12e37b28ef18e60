"""ch08_ex2: Cross-attention with a key padding mask.

Write a class `CrossAttention(nn.Module)` with constructor `CrossAttention(d_model, num_heads)`
(`d_model` is divisible by `num_heads`; `head_dim = d_model // num_heads`) that creates exactly
the parameters `W_query`, `W_key`, `W_value` (each `nn.Linear(d_model, d_model, bias=False)`) and
`out_proj` (`nn.Linear(d_model, d_model)`).

`forward(x, memory, key_padding_mask)` takes the decoder side `x` `(batch, num_queries, d_model)`,
the encoder output `memory` `(batch, num_keys, d_model)` and a `torch.bool` tensor
`key_padding_mask` `(batch, num_keys)`, `True` at the padded keys, `False` at the keys a query may
read. The mask may have any pattern: the padding of a source may come at its end (right padding),
at its start (left padding) or at positions scattered in between, and key `j` of source `b` is
hidden exactly where `key_padding_mask[b, j]` is `True`. The queries are `W_query(x)`,
the keys `W_key(memory)`, the values `W_value(memory)`, each split into heads; each head's scores
are divided by the square root of `head_dim`; padded keys get weight exactly 0, and a query whose keys
are all padding gets all-zero weights (no NaN, in the forward or the backward pass); the heads'
weighted values are merged back in order and passed through `out_proj`. Return
`(output, weights)` with `output` `(batch, num_queries, d_model)` and `weights`
`(batch, num_heads, num_queries, num_keys)`, both in the dtype of `x`. Raise `ValueError` naming `key_padding_mask` and
giving its shape when it does not have shape `(batch, num_keys)`.
"""
from __future__ import annotations

import math

from torch import nn
import torch
import torch.nn.functional as F

from ... import transformer as tf
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint, shape_of
from ._common import _Attention, _heads_of, _kpm

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _check_kpm(key_padding_mask, batch, num_keys):
    if not isinstance(key_padding_mask, torch.Tensor) or key_padding_mask.dtype != torch.bool \
            or tuple(key_padding_mask.shape) != (batch, num_keys):
        raise ValueError(f"key_padding_mask must be a bool tensor of shape (batch, num_keys) = "
                         f"{(batch, num_keys)}, got key_padding_mask of shape {shape_of(key_padding_mask)}")


class CrossAttention(_Attention):
    """Multi-head cross-attention: queries from x, keys and values from memory. The attention
    itself (parameters, heads, scaling, hiding, merge, out_proj) is the chapter's _Attention,
    which exercise 3's decoder block uses too."""

    def __init__(self, d_model, num_heads):
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        super().__init__(d_model, num_heads)
        self.head_dim = d_model // num_heads

    def forward(self, x, memory, key_padding_mask):
        batch, _, _ = x.shape
        _check_kpm(key_padding_mask, batch, memory.shape[1])
        return self.attend(x, memory, key_padding_mask[:, None, None, :])


# Inputs of the public and hidden checks ---------------------------------------------------


def _cross_state(g, d_model, scale=0.7):
    state = {f"{name}.weight": torch.randn(d_model, d_model, generator=g) * scale
             for name in ("W_query", "W_key", "W_value", "out_proj")}
    state["out_proj.bias"] = torch.randn(d_model, generator=g) * 0.3
    return state


def _cross_main_calls(seed):
    g = gen(seed)
    d_model, heads = 6, 2
    x, memory = torch.randn(2, 3, d_model, generator=g), torch.randn(2, 5, d_model, generator=g)
    return [Call(init_args=(d_model, heads), init_seed=seed, state_dict=_cross_state(g, d_model),
                 args=(x, memory, _kpm(torch.tensor([5, 2]), 5)), report=("param_shapes",))]


def _cross_square_calls(seed):
    g = gen(seed)
    d_model, heads = 8, 4
    x, memory = torch.randn(3, 4, d_model, generator=g), torch.randn(3, 4, d_model, generator=g)
    return [Call(init_args=(d_model, heads), init_seed=seed, state_dict=_cross_state(g, d_model),
                 args=(x, memory, _kpm(torch.tensor([4, 1, 3]), 4)))]


def _cross_left_calls(seed):
    g = gen(seed)
    d_model, heads = 6, 3
    x, memory = torch.randn(3, 2, d_model, generator=g), torch.randn(3, 5, d_model, generator=g)
    left = _kpm(torch.tensor([5, 3, 1]), 5).flip(-1)       # sources of lengths 5, 3, 1, padding first
    return [Call(init_args=(d_model, heads), init_seed=seed, state_dict=_cross_state(g, d_model),
                 args=(x, memory, left))]


def _cross_holes_calls(seed):
    g = gen(seed)
    d_model, heads = 4, 2
    x, memory = torch.randn(2, 3, d_model, generator=g), torch.randn(2, 6, d_model, generator=g)
    holes = torch.tensor([[False, True, False, True, True, False],
                          [True, False, False, True, False, True]])
    return [Call(init_args=(d_model, heads), init_seed=seed, state_dict=_cross_state(g, d_model),
                 args=(x, memory, holes))]


def _cross_empty_calls(seed):
    g = gen(seed)
    d_model, heads = 4, 2
    x, memory = torch.randn(2, 2, d_model, generator=g), torch.randn(2, 3, d_model, generator=g)
    return [Call(init_args=(d_model, heads), init_seed=seed, state_dict=_cross_state(g, d_model),
                 args=(x, memory, _kpm(torch.tensor([3, 0]), 3)), grads_of=(0, 1))]


def _cross_bad_calls(seed):
    g = gen(seed)
    x, memory = torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, 4, generator=g)
    state = _cross_state(g, 4)
    return [Call(init_args=(4, 2), init_seed=seed, state_dict=state,
                 args=(x, memory, torch.zeros(2, 3, dtype=torch.bool))),
            Call(init_args=(4, 2), init_seed=seed, state_dict=state,
                 args=(x, memory, torch.zeros(5, dtype=torch.bool)))]


def _cross_hidden_calls(seed):
    g = gen(seed)
    heads, head_dim = randint(g, 1, 4), randint(g, 1, 3)
    d_model = heads * head_dim
    batch, num_queries, num_keys = randint(g, 2, 4), randint(g, 1, 6), randint(g, 3, 7)
    # Any pattern: source 0 left-padded, source 1 right-padded (possibly all padding), the rest at random.
    mask = torch.rand(batch, num_keys, generator=g) < 0.4
    positions = torch.arange(num_keys)
    mask[0] = positions < randint(g, 1, num_keys - 1)
    mask[1] = positions >= randint(g, 0, num_keys)
    return [Call(init_args=(d_model, heads), init_seed=seed, state_dict=_cross_state(g, d_model),
                 args=(torch.randn(batch, num_queries, d_model, generator=g),
                       torch.randn(batch, num_keys, d_model, generator=g), mask),
                 grads_of=(0, 1))]


_CROSS_HINT = ("the output and the weights (batch, num_heads, num_queries, num_keys) are compared: queries "
               "come from x, keys and values from memory, each through its own projection; each is split "
               "into heads, each head's scores are scaled by the square root of head_dim, the keys where "
               "key_padding_mask is True (wherever they lie) are hidden before the softmax over the keys, "
               "and the heads' results are merged back in order (feature h * head_dim + i from head h) and "
               "passed through out_proj.")


# Kept mistakes, each with its hint --------------------------------------------------------


def _cross_variant(keys_from_queries=False, scale_by="head_dim", mask="keys", fill=float("-inf"),
                   zero_empty=True, use_out_proj=True, check_mask=True, merge="transpose"):
    class _Cross(CrossAttention):
        def forward(self, x, memory, key_padding_mask):
            batch, num_queries, d_model = x.shape
            source = x if keys_from_queries else memory
            if check_mask:
                _check_kpm(key_padding_mask, batch, memory.shape[1])
            q = _heads_of(self.W_query(x), self.num_heads)
            k = _heads_of(self.W_key(source), self.num_heads)
            v = _heads_of(self.W_value(source), self.num_heads)
            d = self.head_dim if scale_by == "head_dim" else d_model
            scores = q @ k.transpose(-2, -1) / math.sqrt(d)
            hidden = key_padding_mask[:, None, None, :]
            if mask == "lengths":                  # the mask read as right padding: count the valid keys
                valid_lens = (~key_padding_mask).sum(dim=-1)
                hidden = (torch.arange(key_padding_mask.shape[-1])[None, :] >= valid_lens[:, None])[:, None, None, :]
            if mask == "inverted":
                hidden = ~hidden
            if mask == "none":
                weights = torch.softmax(scores, dim=-1)
            elif mask == "after softmax":          # hidden keys zeroed, the rest not renormalised
                weights = torch.softmax(scores, dim=-1).masked_fill(hidden, 0.0)
            else:
                weights = torch.softmax(scores.masked_fill(hidden, fill), dim=-1)
                if zero_empty:
                    weights = weights.masked_fill(hidden, 0.0)
            if merge == "transpose":
                context = (weights @ v).transpose(1, 2).reshape(batch, num_queries, d_model)
            else:                                  # (batch, heads, queries, head_dim) read as if heads came last
                context = (weights @ v).reshape(batch, num_queries, d_model)
            return (self.out_proj(context) if use_out_proj else context), weights
    return _Cross


mistakes.add("keys and values from the queries",
             "in cross-attention the keys and values come from memory (the encoder output), only the "
             "queries from x; you attended over x itself.",
             _cross_variant(keys_from_queries=True))


mistakes.add("scaled by sqrt(d_model)",
             "each head's scores are dot products of head_dim-sized vectors: divide by the square root "
             "of head_dim, not of d_model.",
             _cross_variant(scale_by="d_model"))


mistakes.add("padding mask inverted",
             "key_padding_mask is True at the padding, the keys to hide; you hid the valid keys instead.",
             _cross_variant(mask="inverted"))


mistakes.add("padding not masked",
             "the padded keys of the source must get zero weight: hide them (True in key_padding_mask) "
             "before the softmax.",
             _cross_variant(mask="none"))


mistakes.add("NaN for a source with no valid key",
             "when every key of a source is padding, the softmax of a row of -inf is NaN; set those "
             "weights to 0.",
             _cross_variant(zero_empty=False))


mistakes.add("out_proj not applied",
             "the merged heads still go through the output projection out_proj.",
             _cross_variant(use_out_proj=False))


mistakes.add("padding zeroed after the softmax",
             "your weights match a softmax over every key whose padded entries are set to 0 afterwards, "
             "so the valid keys' weights no longer sum to 1: hide the padded keys before the softmax "
             "(their scores at -inf), so that the weights are renormalised over the valid keys.",
             _cross_variant(mask="after softmax"))


mistakes.add("heads merged without moving the heads axis back",
             "your output matches reshaping (batch, num_heads, num_queries, head_dim) straight to "
             "(batch, num_queries, d_model): move the heads axis next to head_dim first (transpose(1, 2)) "
             "so that feature h * head_dim + i of query q comes from head h.",
             _cross_variant(merge="reshape"))


mistakes.add("mask turned into lengths",
             "your weights match a mask rebuilt from lengths (the number of valid keys of each source, "
             "hidden from that position on), which is right for right padding only; the padding may lie "
             "anywhere (at the start of a source, or scattered), so hide key j of source b exactly where "
             "key_padding_mask[b, j] is True.",
             _cross_variant(mask="lengths"))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("package layer",
                   "subclasses the chapter's tf.MaskedMultiHeadAttention (Chapter 6's "
  "parameters); shapes printed as torch.Size")
class _CrossAltPackage(tf.MaskedMultiHeadAttention):
    """The chapter's package layer (Chapter 6's parameters), called as cross-attention."""

    def __init__(self, d_model, num_heads):
        super().__init__(d_model, num_heads)

    def forward(self, x, memory, key_padding_mask):
        if key_padding_mask.shape != (x.shape[0], memory.shape[1]):
            raise ValueError(f"key_padding_mask has shape {key_padding_mask.shape}, "
                             f"expected {torch.Size([x.shape[0], memory.shape[1]])}")
        return super().forward(x, memory, key_padding_mask=key_padding_mask, return_weights=True)


@alternatives.keep("einsum in float64",
                   "einsum over named axes in float64, torch.where and nan_to_num")
class _CrossAltEinsum64(nn.Module):
    """einsum over named axes, computed in float64 and cast back."""

    def __init__(self, d_model, num_heads):
        super().__init__()
        self.h = num_heads
        self.W_query = nn.Linear(d_model, d_model, bias=False)
        self.W_key = nn.Linear(d_model, d_model, bias=False)
        self.W_value = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, memory, key_padding_mask):
        if list(key_padding_mask.shape) != [x.shape[0], memory.shape[1]]:
            raise ValueError(f"bad key_padding_mask: shape {list(key_padding_mask.shape)} "
                             f"(batch={x.shape[0]}, num_keys={memory.shape[1]})")
        b, n, d = x.shape
        q = self.W_query(x).double().reshape(b, n, self.h, -1)
        k = self.W_key(memory).double().reshape(b, memory.shape[1], self.h, -1)
        v = self.W_value(memory).double().reshape(b, memory.shape[1], self.h, -1)
        scores = torch.einsum("bqhe,bkhe->bhqk", q, k) / (d // self.h) ** 0.5
        keep = ~key_padding_mask[:, None, None, :]
        scores = torch.where(keep, scores, torch.tensor(float("-inf"), dtype=torch.float64))
        weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
        context = torch.einsum("bhqk,bkhe->bqhe", weights, v).reshape(b, n, d)
        return self.out_proj(context.to(x.dtype)), weights.to(x.dtype)


@alternatives.keep("loop over heads",
                   "F.linear with each head's rows of the weights, bmm per head")
class _CrossAltHeadLoop(nn.Module):
    """A Python loop over heads, each using its own rows of the projections (F.linear)."""

    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.out_proj = nn.Linear(d_model, d_model)
        self.W_value = nn.Linear(d_model, d_model, bias=False)
        self.W_key = nn.Linear(d_model, d_model, bias=False)
        self.W_query = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, memory, key_padding_mask):
        batch, num_keys = x.shape[0], memory.shape[1]
        if key_padding_mask.dim() != 2 or key_padding_mask.shape[0] != batch \
                or key_padding_mask.shape[1] != num_keys:
            raise ValueError(f"key_padding_mask: {batch}x{num_keys} expected, got "
                             + "x".join(str(s) for s in key_padding_mask.shape))
        size = x.shape[-1] // self.num_heads
        contexts, all_weights = [], []
        for h in range(self.num_heads):
            rows = slice(h * size, (h + 1) * size)
            q = F.linear(x, self.W_query.weight[rows])
            k = F.linear(memory, self.W_key.weight[rows])
            v = F.linear(memory, self.W_value.weight[rows])
            scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(size)
            scores = scores.masked_fill(key_padding_mask[:, None, :], float("-inf"))
            w = torch.softmax(scores, dim=-1)
            w = torch.where(key_padding_mask[:, None, :], torch.zeros_like(w), w)
            contexts.append(torch.bmm(w, v))
            all_weights.append(w)
        return self.out_proj(torch.cat(contexts, dim=-1)), torch.stack(all_weights, dim=1)


@alternatives.keep("LLMs-from-scratch layout",
                   "Raschka's LLMs-from-scratch conventions (d_out, view and "
"transpose, masked_fill_ with -torch.inf, context_vec), nan_to_num for empty rows")
class _CrossAltFromScratch(nn.Module):
    """In the conventions of Raschka's LLMs-from-scratch MultiHeadAttention (d_out, head_dim,
    view + transpose, attn_scores, in-place masked_fill_, context_vec), turned into cross-attention."""

    def __init__(self, d_in, num_heads):
        super().__init__()
        d_out = d_in
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)

    def forward(self, x, memory, key_padding_mask):
        b, num_tokens, d_in = x.shape
        num_keys = memory.shape[1]
        if key_padding_mask.shape != (b, num_keys):
            raise ValueError(f"key_padding_mask of shape {tuple(key_padding_mask.shape)} does not match "
                             f"(b, num_keys) = ({b}, {num_keys})")
        keys = self.W_key(memory)
        queries = self.W_query(x)
        values = self.W_value(memory)
        keys = keys.view(b, num_keys, self.num_heads, self.head_dim).transpose(1, 2)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        values = values.view(b, num_keys, self.num_heads, self.head_dim).transpose(1, 2)
        attn_scores = queries @ keys.transpose(2, 3)
        mask_bool = key_padding_mask[:, None, None, :]
        attn_scores.masked_fill_(mask_bool, -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        attn_weights = torch.nan_to_num(attn_weights, nan=0.0)      # a source that is all padding
        context_vec = (attn_weights @ values).transpose(1, 2)
        context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)
        return self.out_proj(context_vec), attn_weights


@alternatives.keep("SDPA core",
                   "F.scaled_dot_product_attention with its True-means-allowed mask")
class _CrossAltSDPA(CrossAttention):
    """PyTorch's fused core for the output (its bool mask is True where attention is allowed);
    the weights computed beside it for the return value."""

    def forward(self, x, memory, key_padding_mask):
        batch, num_queries, d_model = x.shape
        _check_kpm(key_padding_mask, batch, memory.shape[1])
        q = _heads_of(self.W_query(x), self.num_heads)
        k = _heads_of(self.W_key(memory), self.num_heads)
        v = _heads_of(self.W_value(memory), self.num_heads)
        allowed = ~key_padding_mask[:, None, None, :]
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        empty = ~allowed.any(dim=-1, keepdim=True)        # a source that is padding only
        context = context.masked_fill(empty, 0.0).nan_to_num(0.0)
        logits = (q @ k.transpose(-2, -1)) * self.head_dim ** -0.5
        weights = logits.masked_fill(~allowed, float("-inf")).softmax(-1).nan_to_num(0.0)
        return self.out_proj(context.transpose(1, 2).flatten(2)), weights


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch08_ex2", title="Cross-attention with a key padding mask", name="CrossAttention",
    reference=CrossAttention, kind="class", points=3,
    checks=[
        Check("2 heads (d_model=6): 3 queries over 5 keys, source lengths 5 and 2 (parameters too)",
              _cross_main_calls, hint=_CROSS_HINT),
        Check("4 heads: as many queries as keys, source lengths 4, 1 and 3", _cross_square_calls,
              hint=_CROSS_HINT),
        Check("3 heads: left-padded sources of lengths 5, 3 and 1 (the padding first)", _cross_left_calls,
              hint=_CROSS_HINT),
        Check("2 heads: padded keys scattered between valid ones", _cross_holes_calls, hint=_CROSS_HINT),
        Check("a source that is all padding: zero weights, no NaN, gradients for x and memory",
              _cross_empty_calls,
              hint="this check compares the output, the weights and the gradients for x and memory on a "
                   "batch whose second source is all padding (source lengths 3 and 0): the first sequence "
                   "is computed as in the checks above, and every query of the second gets all-zero weights "
                   "(so its output is out_proj's bias), with no NaN in the forward or the backward pass."),
        Check("a key_padding_mask of the wrong shape raises ValueError naming it and its shape",
              _cross_bad_calls, must_mention=lambda call: ["key_padding_mask", tuple(call.args[2].shape)],
              hint="compare key_padding_mask.shape with (batch, num_keys) before using it; name "
                   "key_padding_mask and its shape in the message.", weight=0.5),
        Check("random sizes and key padding patterns (left, right, scattered), with gradients (hidden)", _cross_hidden_calls, public=False,
              hint=_CROSS_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
