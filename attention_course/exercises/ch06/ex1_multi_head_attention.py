r"""ch06_ex1: The efficient multi-head attention layer.

Write a class `MultiHeadAttention(nn.Module)` with constructor
`MultiHeadAttention(d_in, d_out, context_length, dropout, num_heads, qkv_bias=False)`. Raise
`ValueError` (with any message) when `d_out` is not divisible by `num_heads`. Create exactly these parameters, in any order: three
`nn.Linear(d_in, d_out, bias=qkv_bias)` named `W_query`, `W_key`, `W_value` (each head's share is
`head_dim = d_out // num_heads` of their outputs), and `out_proj = nn.Linear(d_out, d_out)`;
a dropout with probability `dropout` (an `nn.Dropout(dropout)` is simplest); and a
**non-persistent** buffer named `mask`, built once from `context_length`, that holds the causal
mask (a bool `(context_length, context_length)` tensor, `True` strictly above the diagonal, is
simplest; the checks look at the buffer's name, not its layout, so another layout that your
`forward` uses correctly is fine); the layer has no other parameters or buffers. The checks load the parameters with `load_state_dict`, and
check dropout by properties of many seeded draws (their mean approaches the eval-mode output,
their spread is that of dropout with probability `dropout`, and with every value vector equal the
draws must vary only as dropped attention weights make them), so any correct inverted dropout on
the attention weights passes.

`forward(x)` takes `x` of shape `(batch, num_tokens, d_in)` with
`1 <= num_tokens <= context_length` and returns `(batch, num_tokens, d_out)`: project `x` once
with each of the three layers, split the result into heads (feature `h * head_dim + i` belongs to
head `h`), compute every head's scores (one batched matrix product is the efficient way), divide them by
the square root of `head_dim`, fill the future (every key after the query, as `mask` marks it) with
$-\infty$, take the softmax over the keys, apply dropout once to these attention weights (and
nowhere else), weight the values, merge the heads back in order and apply `out_proj`. When `num_tokens > context_length`,
raise `ValueError` (with any message).
"""
from __future__ import annotations

import math

from torch import nn
import torch
import torch.nn.functional as F

from ... import multihead as mh
from ...checks.dropout_checks import draw_calls, dropout_compare, multihead_placement, placement_text
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, qkv_state, randint
from ._common import _head_dim

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


class MultiHeadAttention(nn.Module):
    """Efficient multi-head causal self-attention (one projection each, heads in one matmul)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.head_dim = _head_dim(d_out, num_heads)
        self.d_out, self.num_heads, self.context_length = d_out, num_heads, context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(1),
                             persistent=False)

    def forward(self, x):
        batch, num_tokens, _ = x.shape
        if num_tokens > self.context_length:
            raise ValueError(f"num_tokens={num_tokens} exceeds context_length={self.context_length}")

        def split(t):
            return t.view(batch, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)

        q, k, v = split(self.W_query(x)), split(self.W_key(x)), split(self.W_value(x))
        scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(self.mask[:num_tokens, :num_tokens], float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))
        context = (weights @ v).transpose(1, 2).reshape(batch, num_tokens, self.d_out)
        return self.out_proj(context)


# Inputs of the public and hidden checks ---------------------------------------------------


def _mha_state(g, d_in, d_out, bias=False):
    state = qkv_state(g, d_in, d_out, bias)
    state["out_proj.weight"] = torch.randn(d_out, d_out, generator=g) * 0.5
    state["out_proj.bias"] = torch.randn(d_out, generator=g) * 0.2
    return state


def _mha_main_calls(seed):
    g = gen(seed)
    d_in, d_out, ctx, heads = 4, 6, 5, 3
    return [Call(init_args=(d_in, d_out, ctx, 0.5, heads), init_seed=seed, strict_state=True, state_dict=_mha_state(g, d_in, d_out),
                 train=False, args=(torch.randn(2, ctx, d_in, generator=g),),
                 report=("param_shapes", "buffer_names"))]


def _mha_short_calls(seed):
    g = gen(seed)
    d_in, d_out, ctx, heads = 5, 8, 8, 4
    state = _mha_state(g, d_in, d_out)
    return [Call(init_args=(d_in, d_out, ctx, 0.0, heads), init_seed=seed, strict_state=True, state_dict=state, train=False,
                 args=(torch.randn(2, n, d_in, generator=g),)) for n in (3, 1)]


def _mha_causal_calls(seed):
    g = gen(seed)
    state, x = _mha_state(g, 4, 6, bias=True), torch.randn(1, 6, 4, generator=g)
    later = torch.cat([x[:, :3], 3 * torch.randn(1, 3, 4, generator=g)], dim=1)
    return [Call(init_args=(4, 6, 7, 0.0, 2), init_kwargs={"qkv_bias": True}, init_seed=seed, strict_state=True,
                 state_dict=state, train=False, args=(t,)) for t in (x, later)]


def _mha_draws(d_in, d_out, ctx, p, heads, state, x, bias=False):
    def make(train, call_seed, dropout=p):
        return Call(init_args=(d_in, d_out, ctx, dropout, heads), init_kwargs={"qkv_bias": bias}, init_seed=0, strict_state=True,
                    state_dict=state, train=train, call_seed=call_seed, args=(x,))
    return draw_calls(make, range(400, 440), p, p0_call=make(True, 7, dropout=0.0))


def _mha_train_calls(seed):
    g = gen(seed)
    d_in, d_out, ctx, heads = 4, 6, 5, 2
    return _mha_draws(d_in, d_out, ctx, 0.25, heads, _mha_state(g, d_in, d_out),
                      torch.randn(2, ctx, d_in, generator=g))


def _mha_train_hidden_calls(seed):
    g = gen(seed)
    heads, head_dim = randint(g, 2, 3), randint(g, 1, 3)
    d_in, d_out, ctx = randint(g, 2, 5), heads * head_dim, randint(g, 3, 6)
    p = round(0.2 + 0.2 * torch.rand((), generator=g).item(), 3)
    return _mha_draws(d_in, d_out, ctx, p, heads, _mha_state(g, d_in, d_out, bias=True),
                      torch.randn(2, ctx, d_in, generator=g), bias=True)

_compare_mha_dropout = dropout_compare(p_of=lambda call: call.init_args[3], is_train=lambda call: call.train)


# Where the dropout acts: see attention_course.checks.dropout_checks.multihead_placement.
_PLACEMENT_P, _PLACEMENT_HEADS, _PLACEMENT_HEAD_DIM, _PLACEMENT_CTX = 0.3, 2, 3, 6


def _mha_placement_calls(seed):
    g = gen(seed)
    d_in, heads, ctx = 3, _PLACEMENT_HEADS, _PLACEMENT_CTX
    d_out = heads * _PLACEMENT_HEAD_DIM
    state = _mha_state(g, d_in, d_out, bias=True)
    sign = torch.where(torch.rand(d_out, generator=g) < 0.5, -1.0, 1.0)
    state["W_value.weight"] = torch.zeros(d_out, d_in)
    state["W_value.bias"] = sign * (0.5 + torch.rand(d_out, generator=g))      # |v_i| >= 0.5
    state["out_proj.weight"] = torch.linalg.qr(torch.randn(d_out, d_out, generator=g, dtype=torch.float64))[0].float()
    state["out_proj.bias"] = torch.zeros(d_out)
    return _mha_draws(d_in, d_out, ctx, _PLACEMENT_P, heads, state, torch.randn(2, ctx, d_in, generator=g),
                      bias=True)


def _compare_mha_placement(got, want, calls):
    draws = [i for i, c in enumerate(calls) if c.train and c.init_args[3] > 0]
    rest = [i for i in range(len(calls)) if i not in draws]
    # Errors, and eval mode (or dropout=0) differing from the reference, are reported as usual.
    if _compare_mha_dropout([got[i] for i in rest], [want[i] for i in rest], [calls[i] for i in rest]) \
            or any(o["status"] != "ok" or not isinstance(o["value"], torch.Tensor) for o in got + want) \
            or any(g["value"].shape != w["value"].shape or g["value"].dtype != w["value"].dtype
                   for g, w in zip(got, want)):
        return _compare_mha_dropout(got, want, calls)
    call = calls[draws[0]]
    sg = multihead_placement([got[i]["value"] for i in draws], call)
    sw = multihead_placement([want[i]["value"] for i in draws], call)
    if sg["kind"] != sw["kind"]:
        return (f"with every value vector equal to one vector v and out_proj's bias 0, out_proj's input "
                f"(recovered through out_proj's weight) should, for every query and head h, be one factor "
                f"times v's share of head h in training mode ({placement_text(sw)}); yours is "
                f"{placement_text(sg)} (p={call.init_args[3]})")
    return _compare_mha_dropout(got, want, calls)


def _mha_indivisible_calls(seed):
    g = gen(seed)
    return [Call(init_args=(4, 10, 6, 0.0, 4), init_seed=seed, args=(torch.randn(1, 3, 4, generator=g),))]


def _mha_too_long_calls(seed):
    """d_out=10 with 4 heads (at __init__), then 6 tokens for a context of 4 (at forward)."""
    g = gen(seed)
    return _mha_indivisible_calls(seed) + [
        Call(init_args=(3, 4, 4, 0.0, 2), init_seed=seed, strict_state=True, state_dict=_mha_state(g, 3, 4),
             train=False, args=(torch.randn(1, 6, 3, generator=g),))]


def _mha_hidden_calls(seed):
    g = gen(seed)
    heads, head_dim = randint(g, 2, 4), randint(g, 1, 3)
    d_in, d_out = randint(g, 2, 6), heads * head_dim
    ctx = randint(g, 4, 9)
    n = randint(g, 2, ctx)
    return [Call(init_args=(d_in, d_out, ctx, 0.3, heads), init_kwargs={"qkv_bias": True}, init_seed=seed, strict_state=True,
                 state_dict=_mha_state(g, d_in, d_out, bias=True), train=False,
                 args=(torch.randn(3, n, d_in, generator=g),), grads_of=(0,),
                 report=("param_shapes", "buffer_names"))]


def _mha_hidden_bad_calls(seed):
    g = gen(seed)
    heads = randint(g, 3, 5)
    d_out = heads * randint(g, 1, 3) + randint(g, 1, heads - 1)
    return [Call(init_args=(3, d_out, 5, 0.0, heads), init_seed=seed, args=(torch.randn(1, 2, 3, generator=g),))]

_MHA_HINT = ("this check loads given weights by name (load_state_dict), lists parameter shapes and buffer "
             "names, and compares the eval-mode output: compare each step (projections, split, per-head "
             "scaled scores, causal mask, softmax, merge, out_proj) and the names with the contract.")

_MHA_DRAWS_HINT = ("this check first compares eval mode (two calls) and training mode with dropout=0 with the "
                   "contract's output, then 40 training-mode outputs, each with its own seed: their mean must "
                   "approach the eval-mode output and their summed variance must be within a factor 2 of that of "
                   "dropout with probability p on the attention weights.")

_MHA_PLACEMENT_HINT = ("this check first compares eval mode and dropout=0 with the contract's output, with every "
                       "value vector set to one vector v (W_value's weight 0, its bias v) and out_proj's bias 0; "
                       "then 40 training-mode draws. Dropout on the attention weights only rescales each query's "
                       "weights, so in every draw head h's share of out_proj's input is one number times v's share "
                       "of head h; the check recovers out_proj's input from the output through out_proj's weight "
                       "and tests that, then the mean and spread of the draws.")


# Kept mistakes, each with its hint --------------------------------------------------------


def _mha_variant(head_dim_is_d_out=False, split="correct", merge="correct", scale_by="head_dim",
                 use_out_proj=True, divisibility_check=True, persistent_float_mask=False, dropout_on="weights",
                 sdpa_with_layer_mask=False):
    """A MultiHeadAttention that is wrong in exactly the way switched on."""
    class Variant(nn.Module):
        def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
            super().__init__()
            if divisibility_check:
                _head_dim(d_out, num_heads)
            self.head_dim = d_out if head_dim_is_d_out else d_out // num_heads
            width = num_heads * self.head_dim
            self.d_out, self.num_heads, self.context_length = d_out, num_heads, context_length
            self.W_query = nn.Linear(d_in, width, bias=qkv_bias)
            self.W_key = nn.Linear(d_in, width, bias=qkv_bias)
            self.W_value = nn.Linear(d_in, width, bias=qkv_bias)
            self.out_proj = nn.Linear(width, d_out)
            self.dropout = nn.Dropout(dropout)
            mask = torch.ones(context_length, context_length, dtype=torch.bool).triu(1)
            if persistent_float_mask:   # LLMs-from-scratch: register_buffer("mask", torch.triu(ones, 1))
                self.register_buffer("mask", mask.float())
            else:
                self.register_buffer("mask", mask, persistent=False)

        def forward(self, x):
            b, n, _ = x.shape
            if n > self.context_length:
                raise ValueError(f"num_tokens={n} exceeds context_length={self.context_length}")
            h, hd = self.num_heads, self.head_dim

            def to_heads(t):
                if split == "no transpose":
                    return t.reshape(b, h, n, hd)
                if split == "interleaved":   # head h gets every num_heads-th feature
                    return t.reshape(b, n, hd, h).permute(0, 3, 1, 2)
                return t.reshape(b, n, h, hd) if split == "heads not moved" else t.reshape(b, n, h, hd).transpose(1, 2)

            q, k, v = to_heads(self.W_query(x)), to_heads(self.W_key(x)), to_heads(self.W_value(x))
            v = self.dropout(v) if dropout_on == "values" else v
            scale = math.sqrt(hd if scale_by == "head_dim" else self.d_out)
            if sdpa_with_layer_mask:   # SDPA reads a bool attn_mask as True = may attend (bool buffer here)
                ctx = F.scaled_dot_product_attention(q, k, v, self.mask[:n, :n], self.dropout.p * self.training)
            else:
                scores = (q @ k.transpose(2, 3) / scale).masked_fill(self.mask.bool()[:n, :n], float("-inf"))
                weights = torch.softmax(scores, dim=-1)
                ctx = (self.dropout(weights) if dropout_on == "weights" else weights) @ v
            if merge == "no transpose" or split == "heads not moved":
                ctx = ctx.reshape(b, n, h * hd)
            elif merge == "interleaved":
                ctx = ctx.permute(0, 2, 3, 1).reshape(b, n, h * hd)
            else:
                ctx = ctx.transpose(1, 2).reshape(b, n, h * hd)
            ctx = self.dropout(ctx) if dropout_on == "merged" else ctx
            out = self.out_proj(ctx) if use_out_proj else ctx
            return self.dropout(out) if dropout_on == "output" else out

    # Named like the answer's class: load_state_dict's errors quote the class name.
    Variant.__name__ = Variant.__qualname__ = "MultiHeadAttention"
    return Variant

mistakes.add("head_dim = d_out (d2l #2056: full-width heads)",
             "each head must be d_out // num_heads wide, so W_query, W_key and W_value map d_in to d_out "
             "in total; you gave every head the full d_out (num_heads times too many parameters).",
             _mha_variant(head_dim_is_d_out=True))

mistakes.add("view without transpose", "you reshaped the projections straight to (batch, heads, tokens, head_dim): "
             "right shape, but each head then mixes features of different tokens; split the feature axis, then "
             "swap the tokens and heads axes.", _mha_variant(split="no transpose"))
mistakes.add("view without transpose, both ways", "you reshaped straight to (batch, heads, tokens, head_dim) and "
             "back: right shapes, but each head mixes features of different tokens; split the features, then swap the "
             "tokens and heads axes (and swap back before merging).", _mha_variant(split="no transpose", merge="no transpose"))
mistakes.add("heads axis not moved", "you split the features into (batch, tokens, heads, head_dim) but left the heads "
             "axis after the tokens, so the scores compare the heads of one token instead of the tokens of one head; "
             "move the heads axis before the tokens axis.", _mha_variant(split="heads not moved"))
mistakes.add("heads split feature by feature", "head h must own features h * head_dim ... (h + 1) * head_dim - 1 of "
             "each projection; you split the feature axis as (head_dim, num_heads), giving head h every "
             "num_heads-th feature.", _mha_variant(split="interleaved"))

mistakes.add("merged without the transpose",
             "the heads were merged by reshaping (batch, heads, tokens, head_dim) straight to (batch, tokens, d_out): the "
             "right shape, but each output row then holds features of several tokens; the heads axis goes back after "
             "the tokens before the last two axes are joined.", _mha_variant(merge="no transpose"))

mistakes.add("the layer's mask passed unchanged to F.scaled_dot_product_attention",
             "the outputs are those of queries that see only later keys (the last query none), as when the mask "
             "buffer, True where a query must not attend, is given to F.scaled_dot_product_attention, which reads a "
             "boolean attn_mask as True where a query may attend; invert it, or use is_causal=True.",
             _mha_variant(sdpa_with_layer_mask=True))

mistakes.add("heads merged in the wrong order",
             "when merging, head h must fill features h * head_dim ... (h + 1) * head_dim - 1; you "
             "interleaved the heads feature by feature.", _mha_variant(merge="interleaved"))

mistakes.add("scaled by sqrt(d_out)",
             "each head's scores are dot products of head_dim-sized vectors, so divide by the square root "
             "of head_dim, not of d_out.",
             _mha_variant(scale_by="d_out"))

mistakes.add("out_proj not applied",
             "the merged heads still have to go through the output projection out_proj.", _mha_variant(use_out_proj=False))

mistakes.add("no divisibility check",
             "when d_out is not a multiple of num_heads, raise ValueError in __init__ instead of failing "
             "later in a reshape.",
             _mha_variant(divisibility_check=False))

mistakes.add("persistent float mask buffer",
             "your mask is a persistent buffer, so state_dict expects it and loading the projections alone "
             "fails (\"Missing key(s) ... mask\"); it is rebuilt from context_length, so register it with "
             "persistent=False.",
             _mha_variant(persistent_float_mask=True))

mistakes.add("dropout on out_proj's output",
             "in training mode single entries of your layer's output are exactly 0, as when the dropout "
             "is applied to the output of out_proj; the contract drops attention weights: apply the "
             "dropout once to the softmax weights, before they weight the values.",
             _mha_variant(dropout_on="output"))

mistakes.add("dropout on the merged heads",
             "in training mode single features of out_proj's input are exactly 0, as when the dropout "
             "is applied to the merged heads (or to the context vectors); the contract drops attention "
             "weights: apply the dropout once to the softmax weights, before they weight the values.",
             _mha_variant(dropout_on="merged"))

mistakes.add("dropout on the values",
             "in training mode the features of one head are rescaled by different amounts, with no "
             "single output entry zeroed, as when the dropout is applied to the value vectors; the "
             "contract drops attention weights: apply the dropout once to the softmax weights, before "
             "they weight the values.",
             _mha_variant(dropout_on="values"))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("LLMs-from-scratch's layout",
                   "float triu mask (non-persistent), masked_fill_ with "
".bool(), keys.shape[-1] ** 0.5, contiguous().view")
class _MHAAltRaschka(nn.Module):
    """LLMs-from-scratch's MultiHeadAttention layout (float triu mask, made non-persistent here;
    masked_fill_ with mask.bool(); keys.shape[-1] ** 0.5; contiguous().view to merge)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads != 0:
            raise ValueError(f"d_out ({d_out}) must be divisible by num_heads ({num_heads})")
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1),
                             persistent=False)

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        if num_tokens > self.mask.shape[0]:
            raise ValueError(f"num_tokens={num_tokens} is longer than context_length={self.mask.shape[0]}")
        keys = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        values = self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        attn_scores = queries @ keys.transpose(2, 3)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = self.dropout(torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1))
        context_vec = (attn_weights @ values).transpose(1, 2)
        return self.out_proj(context_vec.contiguous().view(b, num_tokens, self.d_out))


@alternatives.keep("torch's fused SDPA",
                   "unflatten into heads, F.scaled_dot_product_attention(is_causal=True, "
"dropout_p), layers created in another order")
class _MHAAltSDPA(nn.Module):
    """Heads through torch's fused scaled_dot_product_attention (is_causal, dropout_p in training)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if num_heads < 1 or d_out % num_heads:
            raise ValueError(f"num_heads={num_heads} does not divide d_out={d_out}")
        self.heads, self.p, self.context_length = num_heads, dropout, context_length
        self.out_proj = nn.Linear(d_out, d_out)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.register_buffer("mask", torch.ones(context_length, context_length).triu(1).bool(), persistent=False)

    def forward(self, x):
        b, n, _ = x.shape
        if n > self.context_length:
            raise ValueError(f"got num_tokens={n}, but context_length is {self.context_length}")
        q, k, v = (layer(x).unflatten(-1, (self.heads, -1)).transpose(1, 2)
                   for layer in (self.W_query, self.W_key, self.W_value))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.p if self.training else 0.0)
        return self.out_proj(out.transpose(1, 2).flatten(2))


@alternatives.keep("one head at a time in float64",
                   "row blocks of the projection weights, a loop over "
"heads, torch.cat")
class _MHAAltHeadLoop(nn.Module):
    """One head at a time from row blocks of the projection weights, in float64; one dropout per head."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads:
            raise ValueError(f"d_out % num_heads != 0 (d_out={d_out}, num_heads={num_heads})")
        self.num_heads, self.context_length = num_heads, context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(1),
                             persistent=False)

    @staticmethod
    def _rows(layer, x, rows):
        y = x @ layer.weight[rows].double().T
        return y if layer.bias is None else y + layer.bias[rows].double()

    def forward(self, x):
        n = x.shape[1]
        if n > self.context_length:
            raise ValueError(f"num_tokens {n} > context_length {self.context_length}")
        x64 = x.double()
        hd = self.W_query.out_features // self.num_heads
        heads = []
        for h in range(self.num_heads):
            rows = slice(h * hd, (h + 1) * hd)
            q, k, v = (self._rows(layer, x64, rows) for layer in (self.W_query, self.W_key, self.W_value))
            scores = (q @ k.transpose(1, 2) / math.sqrt(hd)).masked_fill(self.mask[:n, :n], float("-inf"))
            heads.append(self.dropout(torch.softmax(scores, dim=-1)) @ v)
        return self.out_proj(torch.cat(heads, dim=-1).to(x.dtype))

alternatives.add("the course library's multihead.MultiHeadAttention",
                 "the layer Chapters 8-9 build on: private _split/_merge methods, defaults dropout=0.0 and "
                 "num_heads=1, forward takes an optional return_weights", mh.MultiHeadAttention)
alternatives.add("the course library's multihead.SDPAMultiHeadAttention",
                 "the same parameters with F.scaled_dot_product_attention(is_causal=True) as its core: "
                 "the mask buffer is kept but unused, dropout by dropout_p", mh.SDPAMultiHeadAttention)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch06_ex1", title="The efficient multi-head attention layer", name="MultiHeadAttention",
    reference=MultiHeadAttention, points=2, kind="class",
    checks=[
        Check("3 heads of 2 (d_in=4, d_out=6), 2 sequences of 5 tokens, eval mode (parameters, buffer)",
              _mha_main_calls, hint=_MHA_HINT),
        Check("4 heads of 2 on inputs shorter than context_length (3 and 1 of 8 tokens)", _mha_short_calls,
              hint="this check passes sequences shorter than context_length, with given weights."),
        Check("the same first 3 tokens with other later tokens (2 heads of 3, qkv_bias)", _mha_causal_calls,
              hint="this check compares the eval-mode outputs of two sequences that share their first 3 tokens and "
                   "differ after them; with the causal mask, the first 3 rows of the two outputs agree."),
        Check("training mode, dropout=0.25: 40 seeded draws against eval mode (and dropout=0)", _mha_train_calls,
              compare=_compare_mha_dropout, hint=_MHA_DRAWS_HINT),
        Check("training mode, dropout=0.3, every value vector equal: where the dropout acts (40 draws)",
              _mha_placement_calls, compare=_compare_mha_placement, hint=_MHA_PLACEMENT_HINT),
        Check("d_out=10 with num_heads=4, and num_tokens > context_length, raise ValueError", _mha_too_long_calls,
              weight=0.2, hint="this check builds a layer with d_out=10 and num_heads=4 (__init__ must raise), then "
              "passes 6 tokens to one with context_length=4 (forward must raise); each raises ValueError, as the "
              "contract asks. An assert statement raises AssertionError instead, and python -O removes it."),
        Check("random sizes with qkv_bias=True, and gradients (hidden)", _mha_hidden_calls, public=False,
              hint=_MHA_HINT),
        Check("training mode, random sizes and p (hidden)", _mha_train_hidden_calls, public=False,
              compare=_compare_mha_dropout, hint=_MHA_DRAWS_HINT),
        Check("training mode, every value vector equal, other weights (hidden)", _mha_placement_calls,
              public=False, compare=_compare_mha_placement, hint=_MHA_PLACEMENT_HINT),
        Check("another indivisible d_out (hidden)", _mha_hidden_bad_calls, public=False, weight=0.2,
              hint="check d_out % num_heads in __init__ and raise ValueError when it is not 0."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
