"""Chapter 5 exercises: causal masking and dropout on attention weights.

Conventions fixed by this chapter (stated in each exercise's contract):

* A boolean attention mask is ``True`` where a query must **not** attend to a key
  (the positions filled with ``-inf`` before the softmax), the same convention as
  ``Tensor.masked_fill`` and ``torch.nn.MultiheadAttention``'s boolean masks.
* ``CausalAttention`` keeps its mask as a **non-persistent** buffer named ``mask``:
  it is rebuilt from ``context_length`` in ``__init__``, so it stays out of
  ``state_dict()`` (checkpoints hold only the learned projections).
* ``attention_dropout`` is checked by its statistics (which weights are zeroed, by
  which factor the others are scaled), not by its random draws, so a student may
  draw the keep mask in any way; the eval-mode and ``p = 0`` calls are compared
  exactly.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..checking import compare_outcome, compare_values
from ..registry import Call, Check, Exercise, Mistake, register

# ======================================================================= ch05_ex1


def causal_mask(num_tokens):
    """Bool (num_tokens, num_tokens) mask, True where query i must not see key j (j > i)."""
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 1:
        raise ValueError(f"num_tokens must be a positive integer, got num_tokens={num_tokens!r}")
    return torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1)


def _mask_small_calls(seed):
    return [Call(args=(n,)) for n in (1, 2, 3, 5)]


def _mask_bad_calls(seed):
    return [Call(args=(0,)), Call(args=(-3,))]


def _mask_large_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=(int(n),)) for n in torch.randint(6, 40, (3,), generator=g)]


def _mask_validated(make):
    def impl(num_tokens):
        if num_tokens < 1:
            raise ValueError(f"num_tokens must be positive, got num_tokens={num_tokens}")
        return make(num_tokens)
    return impl


register(Exercise(
    label="ch05_ex1", title="The causal mask", name="causal_mask", reference=causal_mask, points=1,
    checks=[
        Check("masks for 1, 2, 3 and 5 tokens", _mask_small_calls,
              hint="row i is the query, column j the key; True marks the keys strictly after the query."),
        Check("non-positive sizes raise ValueError naming num_tokens", _mask_bad_calls,
              must_mention=["num_tokens"],
              hint="check that num_tokens is at least 1 before building anything, and name it in the message."),
        Check("larger masks (hidden)", _mask_large_calls, public=False,
              hint="row i is the query, column j the key; True marks the keys strictly after the query."),
    ],
    mistakes=[
        Mistake("diagonal masked",
                "you also hid the diagonal: a token may attend to itself, only keys strictly after it are hidden.",
                _mask_validated(lambda n: torch.ones(n, n, dtype=torch.bool).triu(0))),
        Mistake("allowed positions marked",
                "the mask is inverted: True must mark the keys a query may NOT attend to (its future).",
                _mask_validated(lambda n: torch.ones(n, n, dtype=torch.bool).tril(0))),
        Mistake("past hidden",
                "you hid the past instead of the future: rows are queries, columns are keys, and the "
                "future of query i is the keys j > i.",
                _mask_validated(lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1))),
        Mistake("0/1 numbers instead of booleans",
                "return a tensor of dtype torch.bool, not 0/1 numbers.",
                _mask_validated(lambda n: torch.ones(n, n).triu(1))),
        Mistake("no validation",
                "a size below 1 must raise ValueError naming num_tokens, not return an empty mask or fail elsewhere.",
                lambda num_tokens: torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1)),
    ],
))

# ======================================================================= ch05_ex2


def attention_dropout(weights, p, training=True):
    """Inverted dropout on attention weights: zero each with probability p, scale the rest by 1/(1-p)."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"p must satisfy 0 <= p < 1, got p={p!r}")
    if not training or p == 0:
        return weights.clone()
    return F.dropout(weights, p=p, training=True)


def _softmax_weights(g, batch, n):
    return torch.softmax(torch.randn(batch, n, n, generator=g) * 2.0, dim=-1)


def _dropout_train_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=(_softmax_weights(g, 4, 64), 0.2), kwargs={"training": True}, call_seed=seed)]


def _dropout_train_random_p_calls(seed):
    g = torch.Generator().manual_seed(seed)
    p = round(0.1 + 0.3 * torch.rand((), generator=g).item(), 3)  # away from 0.5 on purpose
    return [Call(args=(_softmax_weights(g, 3, 80), p), kwargs={"training": True}, call_seed=seed)]


def _dropout_eval_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=(_softmax_weights(g, 2, 5), 0.5), kwargs={"training": False}, call_seed=seed),
            Call(args=(_softmax_weights(g, 1, 7), 0.1), kwargs={"training": False}, call_seed=seed)]


def _dropout_p0_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=(_softmax_weights(g, 2, 6), 0.0), kwargs={"training": True}, call_seed=seed)]


def _dropout_bad_calls(seed):
    g = torch.Generator().manual_seed(seed)
    w = _softmax_weights(g, 1, 4)
    return [Call(args=(w, 1.0), kwargs={"training": True}),
            Call(args=(w, -0.25), kwargs={"training": True}),
            Call(args=(w, 1.0), kwargs={"training": False})]


def _dropout_summary(out, weights):
    """(fraction zeroed, common scale of the kept weights or None when not common)."""
    dropped = out == 0
    frac = dropped.double().mean().item()
    kept = ~dropped
    if not kept.any():
        return frac, 0.0
    ratios = out[kept].double() / weights[kept].double()
    scale = ratios.mean().item()
    if (ratios - scale).abs().max().item() > 1e-4 * abs(scale) + 1e-6:
        return frac, None
    return frac, scale


_NO_MESSAGE = Check("outcome", lambda seed: [], hint="")


def _compare_dropout_statistics(got, want, calls):
    """Compare random dropout outcomes by their statistics, not by their random draws."""
    for g, w, call in zip(got, want, calls):
        if g["status"] != "ok" or w["status"] != "ok":
            reason = compare_outcome(g, w, _NO_MESSAGE, call, require_message=False)
            if reason:
                return reason
            continue
        out, ref, weights = g["value"], w["value"], call.args[0]
        if not isinstance(out, torch.Tensor) or out.dtype != ref.dtype or out.shape != ref.shape:
            return compare_values(out, ref, 0.0, 0.0)
        frac_g, scale_g = _dropout_summary(out, weights)
        frac_w, scale_w = _dropout_summary(ref, weights)
        if abs(frac_g - frac_w) > 0.03:
            return (f"a fraction {frac_g:.3f} of the weights is zeroed, but for p={call.args[1]} "
                    f"it should be close to {frac_w:.2f}")
        if scale_g is None:
            return "the kept weights are not all multiplied by one common factor"
        if scale_w is None or not math.isclose(scale_g, scale_w, rel_tol=1e-4, abs_tol=1e-6):
            return (f"the kept weights are multiplied by {scale_g:.4g}, which does not keep the "
                    f"expected value of each weight unchanged")
    return None


class _DropoutVariant:
    """A wrong attention_dropout, wrong in one way only; validates p like the reference."""

    def __init__(self, keep_is_p=False, scale="inverse", in_eval=False):
        self.keep_is_p, self.scale, self.in_eval = keep_is_p, scale, in_eval

    def __call__(self, weights, p, training=True):
        if not 0.0 <= p < 1.0:
            raise ValueError(f"p must satisfy 0 <= p < 1, got p={p!r}")
        if (not training and not self.in_eval) or p == 0:
            return weights.clone()
        keep_prob = p if self.keep_is_p else 1.0 - p
        keep = torch.rand_like(weights) < keep_prob
        factor = {"inverse": 1.0 / keep_prob, "none": 1.0, "same": keep_prob}[self.scale]
        return weights * keep * factor


def _dropout_unvalidated(weights, p, training=True):
    return F.dropout(weights, p=p, training=training)


register(Exercise(
    label="ch05_ex2", title="Dropout on attention weights", name="attention_dropout",
    reference=attention_dropout, points=1,
    checks=[
        Check("training mode, p=0.2, on 4 x 64 x 64 weights", _dropout_train_calls,
              compare=_compare_dropout_statistics,
              hint="zero each weight independently with probability p and rescale the kept ones so "
                   "that each weight keeps its expected value."),
        Check("eval mode returns the weights unchanged", _dropout_eval_calls,
              hint="when training is False, dropout is switched off."),
        Check("p outside [0, 1) raises ValueError naming p", _dropout_bad_calls,
              must_mention=lambda call: ["p", repr(call.args[1])],
              hint="validate p first (also in eval mode) and name it and its value in the message."),
        Check("training mode with another p (hidden)", _dropout_train_random_p_calls, public=False,
              compare=_compare_dropout_statistics,
              hint="zero each weight independently with probability p and rescale the kept ones so "
                   "that each weight keeps its expected value."),
        Check("p=0 in training mode changes nothing (hidden)", _dropout_p0_calls, public=False,
              hint="with p = 0 nothing is dropped and the scale factor is 1."),
    ],
    mistakes=[
        Mistake("no rescaling",
                "the kept weights are not rescaled, so the expected value of each weight shrinks by the "
                "factor 1 - p; compensate for the weights that were dropped.",
                _DropoutVariant(scale="none")),
        Mistake("scaled by the keep probability",
                "you multiplied the kept weights by the keep probability, which shrinks them further; "
                "the expected value is preserved by the opposite operation.",
                _DropoutVariant(scale="same")),
        Mistake("p taken as the keep probability",
                "p is the probability of DROPPING a weight, not of keeping it.",
                _DropoutVariant(keep_is_p=True)),
        Mistake("dropout active in eval mode",
                "dropout is still applied when training is False; in eval mode the weights must pass "
                "through unchanged.",
                _DropoutVariant(in_eval=True)),
        Mistake("no validation of p",
                "p = 1 (or a negative p) must raise ValueError naming p: with p = 1 every weight is "
                "dropped and the rescaling factor is infinite.",
                _dropout_unvalidated),
    ],
))

# ======================================================================= ch05_ex3


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


def _attn_state(g, d_in, d_out, bias=False):
    state = {}
    for name in ("W_query", "W_key", "W_value"):
        state[f"{name}.weight"] = torch.randn(d_out, d_in, generator=g) * 0.6
        if bias:
            state[f"{name}.bias"] = torch.randn(d_out, generator=g) * 0.3
    return state


def _attn_full_calls(seed):
    g = torch.Generator().manual_seed(seed)
    d_in, d_out, ctx = 4, 3, 6
    return [Call(init_args=(d_in, d_out, ctx, 0.5), init_seed=seed, state_dict=_attn_state(g, d_in, d_out),
                 train=False, call_seed=seed, args=(torch.randn(2, ctx, d_in, generator=g),),
                 report=("param_shapes", "buffer_names"))]


def _attn_short_calls(seed):
    g = torch.Generator().manual_seed(seed)
    d_in, d_out, ctx = 4, 2, 8
    return [Call(init_args=(d_in, d_out, ctx, 0.0), init_seed=seed, train=False, call_seed=seed,
                 args=(torch.randn(3, n, d_in, generator=g),)) for n in (5, 1)]


def _attn_future_calls(seed):
    # Two inputs equal up to position 2; only tokens 3.. differ.
    g = torch.Generator().manual_seed(seed)
    d_in, d_out, ctx = 5, 4, 7
    x = torch.randn(2, ctx, d_in, generator=g)
    changed = x.clone()
    changed[:, 3:] = torch.randn(2, ctx - 3, d_in, generator=g) * 3.0
    return [Call(init_args=(d_in, d_out, ctx, 0.1), init_seed=seed, train=False, call_seed=seed,
                 args=(inp,)) for inp in (x, changed)]


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


def _attn_train_calls(seed):
    g = torch.Generator().manual_seed(seed)
    d_in, d_out, ctx = 4, 3, 6
    return [Call(init_args=(d_in, d_out, ctx, 0.5), init_seed=seed, state_dict=_attn_state(g, d_in, d_out),
                 train=True, call_seed=seed, args=(torch.randn(2, ctx, d_in, generator=g),))]


def _attn_too_long_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(init_args=(3, 2, 4, 0.0), init_seed=seed, train=False, call_seed=seed,
                 args=(torch.randn(1, 6, 3, generator=g),))]


def _attn_hidden_calls(seed):
    g = torch.Generator().manual_seed(seed)
    d_in, d_out = (int(v) for v in torch.randint(2, 7, (2,), generator=g))
    ctx = int(torch.randint(5, 12, (), generator=g))
    n = int(torch.randint(2, ctx + 1, (), generator=g))
    return [Call(init_args=(d_in, d_out, ctx, 0.3), init_kwargs={"qkv_bias": True}, init_seed=seed,
                 state_dict=_attn_state(g, d_in, d_out, bias=True), train=False, call_seed=seed,
                 args=(torch.randn(3, n, d_in, generator=g),), grads_of=(0,),
                 report=("param_shapes", "buffer_names"))]


def _variant(after_softmax=False, diagonal=1, sliced=True, scaled=True, persistent=False,
             dropout_on="weights", length_check=True, functional_dropout=False):
    """Build a CausalAttention that is wrong in exactly the ways switched on."""

    class Variant(nn.Module):
        def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
            super().__init__()
            self.context_length, self.p = context_length, dropout
            self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.dropout = nn.Dropout(dropout)
            self.register_buffer(
                "mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(diagonal),
                persistent=persistent)

        def forward(self, x):
            num_tokens = x.shape[1]
            if length_check and num_tokens > self.context_length:
                raise ValueError(f"num_tokens={num_tokens} exceeds context_length={self.context_length}")
            queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
            scores = queries @ keys.transpose(1, 2)
            if scaled:
                scores = scores / math.sqrt(keys.shape[-1])
            mask = self.mask[:num_tokens, :num_tokens] if sliced else self.mask
            if after_softmax:
                weights = torch.softmax(scores, dim=-1).masked_fill(mask, 0.0)
            else:
                weights = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
            if dropout_on == "weights":
                weights = F.dropout(weights, self.p) if functional_dropout else self.dropout(weights)
            context = weights @ values
            if dropout_on == "context":
                context = self.dropout(context)
            return context

    return Variant


register(Exercise(
    label="ch05_ex3", title="A causal attention module", name="CausalAttention",
    reference=CausalAttention, points=2, kind="class",
    checks=[
        Check("2 sequences of context_length=6 tokens, eval mode (parameters, buffer)", _attn_full_calls,
              hint="project, score, scale by the square root of the keys' size, mask the future, softmax "
                   "over the keys, then weight the values; the mask is a non-persistent buffer named mask."),
        Check("inputs shorter than context_length (5 tokens and 1 token of 8)", _attn_short_calls,
              hint="a sequence may be shorter than context_length: use the part of the mask that "
                   "matches num_tokens."),
        Check("changing only later tokens leaves earlier outputs unchanged", _attn_future_calls,
              compare=_compare_future,
              hint="every output may depend only on its own token and the tokens before it."),
        Check("training mode: dropout on the attention weights (seeded)", _attn_train_calls,
              hint="apply the module's dropout once, to the attention weights, after the softmax."),
        Check("num_tokens > context_length raises ValueError naming both", _attn_too_long_calls,
              must_mention=["num_tokens", "context_length"],
              hint="compare num_tokens with context_length at the start of forward and raise ValueError."),
        Check("random sizes with qkv_bias=True, and gradients (hidden)", _attn_hidden_calls, public=False,
              hint="project, score, scale by the square root of the keys' size, mask the future, softmax "
                   "over the keys, then weight the values."),
    ],
    mistakes=[
        Mistake("masked after the softmax without renormalising",
                "the future was zeroed after the softmax, so the rows no longer sum to 1 and the future "
                "still shapes the normaliser; mask the scores before the softmax instead.",
                _variant(after_softmax=True)),
        Mistake("diagonal masked",
                "you also masked the diagonal: a token must be able to attend to itself (the first "
                "token has nothing else to attend to, hence NaN).",
                _variant(diagonal=0)),
        Mistake("mask not sliced",
                "the stored mask is context_length x context_length; a shorter input needs only its "
                "top-left num_tokens x num_tokens block.",
                _variant(sliced=False)),
        Mistake("scores not scaled",
                "the scores are not divided by the square root of the keys' size (d_out).",
                _variant(scaled=False)),
        Mistake("persistent mask",
                "the mask must be a non-persistent buffer: it is rebuilt from context_length, so it must "
                "not appear in state_dict (loading the projections alone then fails).",
                _variant(persistent=True)),
        Mistake("dropout on the context vectors",
                "dropout belongs on the attention weights (after the softmax), not on the output.",
                _variant(dropout_on="context")),
        Mistake("dropout active in eval mode",
                "dropout still runs in eval mode: the functional form does not know whether the module "
                "is training unless you tell it; a dropout submodule follows train()/eval() by itself.",
                _variant(functional_dropout=True)),
        Mistake("no length check",
                "an input longer than context_length must raise ValueError naming num_tokens and "
                "context_length before any computation.",
                _variant(length_check=False)),
    ],
))

# ======================================================================= ch05_ex4


def offset_causal_mask(num_queries, num_keys):
    """Bool (num_queries, num_keys) mask for the LAST num_queries positions of num_keys tokens."""
    for value in (num_queries, num_keys):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"num_queries and num_keys must be integers, got "
                             f"num_queries={num_queries!r}, num_keys={num_keys!r}")
    if not 1 <= num_queries <= num_keys:
        raise ValueError(f"need 1 <= num_queries <= num_keys, got num_queries={num_queries}, "
                         f"num_keys={num_keys}")
    return torch.ones(num_queries, num_keys, dtype=torch.bool).triu(num_keys - num_queries + 1)


def _offset_public_calls(seed):
    return [Call(args=(1, 5)), Call(args=(3, 7)), Call(args=(4, 4))]


def _offset_bad_calls(seed):
    return [Call(args=(5, 3)), Call(args=(0, 4)), Call(args=(2, 0))]


def _offset_hidden_calls(seed):
    g = torch.Generator().manual_seed(seed)
    calls = []
    for _ in range(3):
        num_keys = int(torch.randint(2, 30, (), generator=g))
        num_queries = int(torch.randint(1, num_keys + 1, (), generator=g))
        calls.append(Call(args=(num_queries, num_keys)))
    calls.append(Call(args=(num_keys - 1, num_keys)))  # nearly square: a different offset
    return calls


def _offset_validated(make):
    def impl(num_queries, num_keys):
        if not 1 <= num_queries <= num_keys:
            raise ValueError(f"need 1 <= num_queries <= num_keys, got num_queries={num_queries}, "
                             f"num_keys={num_keys}")
        return make(num_queries, num_keys)
    return impl


register(Exercise(
    label="ch05_ex4", title="A causal mask for queries that come last", name="offset_causal_mask",
    reference=offset_causal_mask, points=1,
    checks=[
        Check("1 query over 5 keys, 3 over 7, 4 over 4", _offset_public_calls,
              hint="query i sits at position num_keys - num_queries + i of the sequence; it may see every "
                   "key up to and including that position."),
        Check("invalid sizes raise ValueError naming num_queries and num_keys", _offset_bad_calls,
              must_mention=["num_queries", "num_keys"],
              hint="require 1 <= num_queries <= num_keys and name both arguments in the message."),
        Check("random sizes (hidden)", _offset_hidden_calls, public=False,
              hint="query i sits at position num_keys - num_queries + i of the sequence; it may see every "
                   "key up to and including that position."),
    ],
    mistakes=[
        Mistake("aligned top-left",
                "the mask is aligned top-left, as if the queries were the FIRST num_queries tokens; they "
                "are the last ones, so the new query sees every cached key.",
                _offset_validated(lambda q, k: torch.ones(q, k, dtype=torch.bool).triu(1))),
        Mistake("own position hidden",
                "each query's own position is hidden too: a query may attend to the key at its own "
                "position.",
                _offset_validated(lambda q, k: torch.ones(q, k, dtype=torch.bool).triu(k - q))),
        Mistake("allowed positions marked",
                "the mask is inverted: True must mark the keys a query may NOT attend to.",
                _offset_validated(lambda q, k: ~torch.ones(q, k, dtype=torch.bool).triu(k - q + 1))),
        Mistake("no validation",
                "more queries than keys (or a size below 1) must raise ValueError naming num_queries "
                "and num_keys.",
                lambda num_queries, num_keys: torch.ones(num_queries, num_keys, dtype=torch.bool)
                .triu(num_keys - num_queries + 1)),
    ],
))
