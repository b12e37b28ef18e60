r"""ch05_ex3: A causal attention module.

Write a class `CausalAttention(nn.Module)` with constructor
`CausalAttention(d_in, d_out, context_length, dropout, qkv_bias=False)` that creates three
`nn.Linear(d_in, d_out, bias=qkv_bias)` layers named `W_query`, `W_key` and `W_value` (in any
order: the checks load given weights by name), a dropout with probability `dropout` (an
`nn.Dropout(dropout)` is simplest), and a **non-persistent** buffer named `mask` of shape
`(context_length, context_length)` marking the positions strictly above the diagonal (bool is
simplest; a 0/1 float mask used with `.bool()` works too). The module has no other parameters
or buffers.

`forward(x)` takes `x` of shape `(batch, num_tokens, d_in)` with
`1 <= num_tokens <= context_length` and returns the context vectors, shape
`(batch, num_tokens, d_out)`: scores `queries @ keys` transposed, divided by $\sqrt{d_{out}}$; the
future filled with $-\infty$ before a softmax over the keys (use the top-left
`num_tokens × num_tokens` block of the mask); dropout applied once, to the attention weights, in
training mode only; then the weighted sum of the values. Dropout is checked by properties of
many seeded draws, as in Exercise 2, so any correct inverted dropout passes. When `num_tokens > context_length`, `forward` raises
`ValueError` (with any message).
"""
from __future__ import annotations

import math

from torch import nn
import torch
import torch.nn.functional as F

from ... import multihead as mh
from ...checks.checking import compare_outcome
from ...checks.dropout_checks import draw_calls, dropout_compare
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, qkv_state

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


class CausalAttention(nn.Module):
    """Single-head causal self-attention with dropout on the attention weights."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(1),
            persistent=False)

    def forward(self, x):
        batch, num_tokens, _ = x.shape
        if num_tokens > self.context_length:
            raise ValueError(f"num_tokens={num_tokens} exceeds context_length={self.context_length}")
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(1, 2) / math.sqrt(keys.shape[-1])
        scores = scores.masked_fill(self.mask[:num_tokens, :num_tokens], float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))
        return weights @ values


# Inputs of the public and hidden checks ---------------------------------------------------


def _attn_full_calls(seed):
    g = torch.Generator().manual_seed(seed)
    d_in, d_out, ctx = 4, 3, 6
    return [Call(init_args=(d_in, d_out, ctx, 0.5), init_seed=seed, strict_state=True, state_dict=qkv_state(g, d_in, d_out),
                 train=False, call_seed=seed, args=(torch.randn(2, ctx, d_in, generator=g),),
                 report=("param_shapes", "buffer_names"))]


def _attn_short_calls(seed):
    g = torch.Generator().manual_seed(seed)
    d_in, d_out, ctx = 4, 2, 8
    state = qkv_state(g, d_in, d_out)
    return [Call(init_args=(d_in, d_out, ctx, 0.0), init_seed=seed, strict_state=True, state_dict=state, train=False,
                 call_seed=seed, args=(torch.randn(3, n, d_in, generator=g),)) for n in (5, 1)]


def _attn_future_calls(seed):
    # Two inputs equal up to position 2; only tokens 3.. differ.
    g = torch.Generator().manual_seed(seed)
    d_in, d_out, ctx = 5, 4, 7
    state = qkv_state(g, d_in, d_out)
    x = torch.randn(2, ctx, d_in, generator=g)
    changed = x.clone()
    changed[:, 3:] = torch.randn(2, ctx - 3, d_in, generator=g) * 3.0
    return [Call(init_args=(d_in, d_out, ctx, 0.1), init_seed=seed, strict_state=True, state_dict=state, train=False,
                 call_seed=seed, args=(inp,)) for inp in (x, changed)]


_FUTURE_FROM = 3


def _compare_future(got, want, calls):
    """Default comparison, with a clearer reason when earlier outputs move with later tokens."""
    check = Check("future", _attn_future_calls, hint="")
    for i, (g, w, c) in enumerate(zip(got, want, calls)):
        reason = compare_outcome(g, w, check, c, require_message=False)
        if reason:
            both = all(o["status"] == "ok" and isinstance(o["value"], torch.Tensor) for o in got)
            if both and got[0]["value"].shape == got[1]["value"].shape and got[0]["value"].dim() == 3:
                before = got[0]["value"][:, :_FUTURE_FROM]
                after = got[1]["value"][:, :_FUTURE_FROM]
                if not torch.allclose(before, after, atol=1e-6):
                    return (f"outputs at positions 0..{_FUTURE_FROM - 1} changed when only tokens from "
                            f"position {_FUTURE_FROM} on changed: information leaks from the future")
            return reason if len(calls) == 1 else f"call {i + 1} of {len(calls)}: {reason}"
    return None


_DRAW_SEEDS = range(300, 340)  # 40 training-mode draws


def _attn_draws(d_in, d_out, ctx, p, state, x, bias=False):
    def make(train, call_seed, dropout=p):
        return Call(init_args=(d_in, d_out, ctx, dropout), init_kwargs={"qkv_bias": bias}, init_seed=0, strict_state=True,
                    state_dict=state, train=train, call_seed=call_seed, args=(x,))
    return draw_calls(make, _DRAW_SEEDS, p, p0_call=make(True, 7, dropout=0.0))


def _attn_train_calls(seed):
    g = torch.Generator().manual_seed(seed)
    d_in, d_out, ctx = 4, 3, 6
    state = qkv_state(g, d_in, d_out)
    return _attn_draws(d_in, d_out, ctx, 0.25, state, torch.randn(2, ctx, d_in, generator=g))


def _attn_equal_values_calls(seed):
    # W_value = 0 with a bias b: every value vector is b, so dropout on the weights keeps rows ∝ b.
    g = torch.Generator().manual_seed(seed)
    d_in, d_out, ctx = 4, 3, 5
    state = qkv_state(g, d_in, d_out, bias=True)
    state["W_value.weight"] = torch.zeros(d_out, d_in)
    state["W_value.bias"] = torch.tensor([1.0, -2.0, 0.5])
    return _attn_draws(d_in, d_out, ctx, 0.4, state, torch.randn(2, ctx, d_in, generator=g), bias=True)


def _attn_twin_calls(seed):
    # A batch of two equal sequences: eval mode gives them equal outputs, and their training draws
    # must differ (each sequence draws its own dropout on its own attention weights).
    g = torch.Generator().manual_seed(seed)
    d_in, d_out, ctx = 4, 3, 6
    state = qkv_state(g, d_in, d_out)
    x = torch.randn(1, ctx, d_in, generator=g).expand(2, ctx, d_in).clone()
    return _attn_draws(d_in, d_out, ctx, 0.4, state, x)


def _attn_train_hidden_calls(seed):
    g = torch.Generator().manual_seed(seed)
    d_in, d_out = (int(v) for v in torch.randint(2, 6, (2,), generator=g))
    ctx = int(torch.randint(4, 8, (), generator=g))
    p = round(0.2 + 0.2 * torch.rand((), generator=g).item(), 3)
    state = qkv_state(g, d_in, d_out, bias=True)
    return _attn_draws(d_in, d_out, ctx, p, state, torch.randn(2, ctx, d_in, generator=g), bias=True)


_compare_attn_dropout = dropout_compare(p_of=lambda call: call.init_args[3], is_train=lambda call: call.train)


_compare_attn_dropout_twins = dropout_compare(
    p_of=lambda call: call.init_args[3], is_train=lambda call: call.train, independent_along=(0,),
    axis_names={0: "sequences of the batch"})


_compare_attn_dropout_rows = dropout_compare(
    p_of=lambda call: call.init_args[3], is_train=lambda call: call.train,
    proportional_to=lambda call: call.state_dict["W_value.bias"])


def _attn_too_long_calls(seed):
    # No state_dict: the module's own initial parameters will do, so nothing but the length check
    # decides this check (a persistent buffer, say, does not make loading fail here).
    g = torch.Generator().manual_seed(seed)
    return [Call(init_args=(3, 2, 4, 0.0), init_seed=seed, train=False,
                 call_seed=seed, args=(torch.randn(1, 6, 3, generator=g),))]


def _attn_hidden_calls(seed):
    g = torch.Generator().manual_seed(seed)
    d_in, d_out = (int(v) for v in torch.randint(2, 7, (2,), generator=g))
    ctx = int(torch.randint(5, 12, (), generator=g))
    n = int(torch.randint(2, ctx + 1, (), generator=g))
    return [Call(init_args=(d_in, d_out, ctx, 0.3), init_kwargs={"qkv_bias": True}, init_seed=seed, strict_state=True,
                 state_dict=qkv_state(g, d_in, d_out, bias=True), train=False, call_seed=seed,
                 args=(torch.randn(3, n, d_in, generator=g),), grads_of=(0,),
                 report=("param_shapes", "buffer_names"))]


# Kept mistakes, each with its hint --------------------------------------------------------


def _variant(after_softmax=False, diagonal=1, sliced=True, scaled=True, persistent=False,
             dropout_on="weights", length_check=True, functional_dropout=False, float_mask=False,
             ignore_bias=False, batch_shared_mask=False):
    """Build a CausalAttention that is wrong in exactly the ways switched on."""

    class Variant(nn.Module):
        def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
            super().__init__()
            self.context_length, self.p = context_length, dropout
            bias = False if ignore_bias else qkv_bias
            self.W_query = nn.Linear(d_in, d_out, bias=bias)
            self.W_key = nn.Linear(d_in, d_out, bias=bias)
            self.W_value = nn.Linear(d_in, d_out, bias=bias)
            self.dropout = nn.Dropout(dropout)
            mask = torch.ones(context_length, context_length, dtype=torch.bool).triu(diagonal)
            self.register_buffer("mask", mask.float() if float_mask else mask, persistent=persistent)

        def forward(self, x):
            num_tokens = x.shape[1]
            if length_check and num_tokens > self.context_length:
                raise ValueError(f"num_tokens={num_tokens} exceeds context_length={self.context_length}")
            queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
            scores = queries @ keys.transpose(1, 2)
            if scaled:
                scores = scores / math.sqrt(keys.shape[-1])
            mask = (self.mask[:num_tokens, :num_tokens] if sliced else self.mask).bool()
            if after_softmax:
                weights = torch.softmax(scores, dim=-1).masked_fill(mask, 0.0)
            else:
                weights = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
            if dropout_on == "weights" and batch_shared_mask:
                if self.training:
                    weights = weights * self.dropout(torch.ones(weights.shape[-2:]))
            elif dropout_on == "weights":
                weights = F.dropout(weights, self.p) if functional_dropout else self.dropout(weights)
            context = weights @ values
            if dropout_on == "context":
                context = self.dropout(context)
            return context

    # Named like the answer's class, so that errors that quote the class name (load_state_dict's)
    # read the same.
    Variant.__name__ = Variant.__qualname__ = "CausalAttention"
    return Variant


mistakes.add("masked after the softmax without renormalising",
             "the future was zeroed after the softmax, so the rows no longer sum to 1 and the future "
             "still shapes the normaliser; mask the scores before the softmax instead.",
             _variant(after_softmax=True))


mistakes.add("diagonal masked",
             "you also masked the diagonal: a token must be able to attend to itself (the first "
             "token has nothing else to attend to, hence NaN).",
             _variant(diagonal=0))


mistakes.add("mask not sliced",
             "the stored mask is context_length x context_length; a shorter input needs only its "
             "top-left num_tokens x num_tokens block.",
             _variant(sliced=False))


mistakes.add("scores not scaled",
             "the scores are not divided by the square root of the keys' size (d_out).",
             _variant(scaled=False))


mistakes.add("persistent float mask buffer",
             "your mask is a persistent buffer, so state_dict expects it and loading the projections "
             "alone fails (\"Missing key(s) ... mask\"); it is rebuilt from context_length, so "
             "register it with persistent=False.",
             _variant(persistent=True, float_mask=True))


mistakes.add("dropout on the context vectors",
             "dropout belongs on the attention weights (after the softmax), not on the output.",
             _variant(dropout_on="context"))


mistakes.add("dropout active in eval mode",
             "dropout still runs in eval mode: the functional form does not know whether the module "
             "is training unless you tell it; a dropout submodule follows train()/eval() by itself.",
             _variant(functional_dropout=True))


mistakes.add("no length check",
             "an input longer than context_length must raise ValueError.",
             _variant(length_check=False))


mistakes.add("qkv_bias ignored",
             "the projections were created without bias even with qkv_bias=True, so the given "
             "state_dict's bias entries do not load; pass bias=qkv_bias to the three nn.Linear layers.",
             _variant(ignore_bias=True))


mistakes.add("one dropout mask shared by the batch",
             "one (num_tokens, num_tokens) dropout mask was drawn and applied to every sequence of the "
             "batch; dropout must act on each sequence's attention weights independently (apply it to "
             "the (batch, num_tokens, num_tokens) weights).",
             _variant(batch_shared_mask=True))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("keys first, float mask, dropout by hand",
                   "layers created key, value, query; "
"non-persistent float triu mask used with .bool(); rand_like >= p")
class _CAAltKeysFirst(nn.Module):
    """Layers created key, value, query; a float non-persistent mask (LLMs-from-scratch's torch.triu
    of ones, used with .bool()); inverted dropout by hand with rand_like >= p."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.p = dropout
        self.context_length = context_length
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1),
                             persistent=False)

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        if num_tokens > self.context_length:
            raise ValueError(f"input has num_tokens={num_tokens} > context_length={self.context_length}")
        keys, queries, values = self.W_key(x), self.W_query(x), self.W_value(x)
        attn_scores = queries @ keys.transpose(-2, -1)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        if self.training and self.p > 0:
            attn_weights = attn_weights * (torch.rand_like(attn_weights) >= self.p) / (1 - self.p)
        return attn_weights @ values


@alternatives.keep("torch's fused SDPA",
                   "F.scaled_dot_product_attention with the inverted boolean mask "
"and dropout_p in training")
class _CAAltSDPA(nn.Module):
    """torch's fused scaled_dot_product_attention, with its own dropout (dropout_p) in training."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout_p = dropout
        self.register_buffer("mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(1),
                             persistent=False)

    def forward(self, x):
        n = x.shape[1]
        if n > self.mask.shape[0]:
            raise ValueError(f"num_tokens ({n}) is larger than context_length ({self.mask.shape[0]})")
        allowed = ~self.mask[:n, :n]          # SDPA's boolean attn_mask marks what MAY be attended
        return F.scaled_dot_product_attention(self.W_query(x), self.W_key(x), self.W_value(x),
                                              attn_mask=allowed,
                                              dropout_p=self.dropout_p if self.training else 0.0)


@alternatives.keep("einsum in float64",
                   "einsum, torch.where mask from arange comparisons, nn.Dropout on "
"float64 weights, cast back")
class _CAAltEinsum64(nn.Module):
    """einsum in float64 with torch.where for the mask; nn.Dropout on the float64 weights."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.drop = nn.Dropout(dropout)
        self.register_buffer("mask", torch.arange(context_length)[None, :] > torch.arange(context_length)[:, None],
                             persistent=False)

    def forward(self, x):
        num_tokens = x.size(1)
        if num_tokens > self.mask.size(0):
            raise ValueError("num_tokens=%d exceeds context_length=%d" % (num_tokens, self.mask.size(0)))
        q, k, v = (layer(x).double() for layer in (self.W_query, self.W_key, self.W_value))
        scores = torch.einsum("bqd,bkd->bqk", q, k) / math.sqrt(k.shape[-1])
        scores = torch.where(self.mask[:num_tokens, :num_tokens], float("-inf"), scores)
        weights = self.drop(torch.softmax(scores, dim=-1))
        return torch.einsum("bqk,bkd->bqd", weights, v).to(x.dtype)


alternatives.add("the course library's multihead.CausalAttention",
                 "Chapter 5's layer as the library ships it (the heads of Chapter 6's wrapper): dropout "
                 "defaults to 0.0, forward takes an optional return_weights",
                 mh.CausalAttention)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch05_ex3", title="A causal attention module", name="CausalAttention",
    reference=CausalAttention, points=2, kind="class",
    checks=[
        Check("2 sequences of context_length=6 tokens, eval mode (parameters, buffer)", _attn_full_calls,
              hint="this check loads given projections with load_state_dict, lists parameter shapes and "
                   "buffer names, and compares the eval-mode output of each step (project, score, "
                   "scale, mask, softmax, weight the values), with the contract's names."),
        Check("inputs shorter than context_length (5 tokens and 1 token of 8)", _attn_short_calls,
              hint="this check passes sequences shorter than context_length, with given projections."),
        Check("changing only later tokens leaves earlier outputs unchanged", _attn_future_calls,
              compare=_compare_future,
              hint="this check runs two inputs that agree in tokens 0 to 2 (given projections, eval mode) "
                   "and compares both outputs with the reference's: outputs 0 to 2 must be the same for "
                   "both inputs, and every output must match; the reason above says which differs."),
        Check("training mode, dropout=0.25: 40 seeded draws against eval mode (and dropout=0)",
              _attn_train_calls, compare=_compare_attn_dropout,
              hint="this check compares the eval-mode output (given projections) with the reference's, then "
                   "40 training-mode outputs (each with its own seed) with eval mode: "
                   "their mean must approach the eval output, their spread must be that of dropout with "
                   "probability p on the attention weights, and dropout=0 must change nothing."),
        Check("training mode with every value vector equal: dropout acts on the attention weights",
              _attn_equal_values_calls, compare=_compare_attn_dropout_rows,
              hint="this check builds the module with qkv_bias=True and loads W_value = 0 with a bias b, so "
                   "every value vector is b: eval mode gives rows equal to b, and with dropout on the "
                   "attention weights each training-mode row is a multiple of b."),
        Check("training mode, a batch of two equal sequences: each draws its own dropout",
              _attn_twin_calls, compare=_compare_attn_dropout_twins,
              hint="this check passes two equal sequences in one batch (given projections), compares the "
                   "eval-mode output with the reference's, then 40 training-mode draws with eval mode: "
                   "the two outputs agree in eval mode, and in training mode each "
                   "sequence's attention weights are dropped independently, so the two outputs of a draw "
                   "are almost never identical."),
        Check("num_tokens > context_length raises ValueError", _attn_too_long_calls, weight=0.5,
              hint="this check passes 6 tokens to a module with context_length=4 (its own initial "
                   "parameters, eval mode): forward must raise ValueError."),
        Check("training mode, random sizes and p, with qkv_bias=True (hidden)", _attn_train_hidden_calls,
              public=False, compare=_compare_attn_dropout,
              hint="this check repeats the 40-draw comparison with other sizes and another p."),
        Check("random sizes with qkv_bias=True, and gradients (hidden)", _attn_hidden_calls, public=False,
              hint="project, score, scale by the square root of the keys' size, mask the future, softmax "
                   "over the keys, then weight the values."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
