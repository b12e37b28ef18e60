"""Chapter 5 exercises: causal masking and dropout on attention weights.

Conventions fixed by this chapter (stated in each exercise's contract):

* A boolean attention mask is ``True`` where a query must **not** attend to a key
  (the positions filled with ``-inf`` before the softmax), the same convention as
  ``Tensor.masked_fill`` and ``torch.nn.MultiheadAttention``'s boolean masks.
* ``CausalAttention`` keeps its mask as a **non-persistent** buffer named ``mask``:
  it is rebuilt from ``context_length`` in ``__init__``, so it stays out of
  ``state_dict()`` (checkpoints hold only the learned projections). Its dtype is
  the student's choice (the contract no longer asks for bool: nothing could check it).
  Parameter values are always loaded with ``state_dict``, so the order in which the
  layers are created does not matter.
* Dropout (ex2, ex3) is checked by properties with
  :func:`attention_course.dropout_checks.dropout_compare`, never by one random stream:
  eval mode deterministic, ``p = 0`` equals eval mode, survivors scaled by ``1/(1-p)``
  with a fraction ``p`` zeroed, the mean of 40 seeded draws within 6 standard errors of
  the eval output, the spread of the draws that of dropout with drop probability ``p``,
  and (ex3) with every value vector equal, rows that stay multiples of it. Independence
  of the drops is checked too (``independent_along``): with uniform weights (ex2) no two
  rows, columns or batch entries, and with a batch of two equal sequences (ex3) no two
  sequences, may come out identical far more often than independent drops allow.
* Integer sizes (ex1, ex4) are stated as Python ints in the contracts and not checked:
  only sizes below 1 (and ex4's ``num_queries > num_keys``) must raise.
* Kept mistakes include LLMs-from-scratch #431 (survivors scaled by ``1/p``) and a
  persistent float mask buffer; kept alternatives include dropout drawn with
  ``torch.rand_like(w) >= p``, d2l's ``dropout_layer``, ``torch.bernoulli`` in float64,
  layers created keys first, torch's fused SDPA with its own dropout.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..checking import compare_outcome
from ..dropout_checks import draw_calls, dropout_compare
from ..registry import Alternative, Call, Check, Exercise, Mistake, register

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


def _mask_alt_arange(num_tokens):
    if num_tokens < 1:
        raise ValueError(f"num_tokens={num_tokens} must be at least 1")
    pos = torch.arange(num_tokens)
    return pos[None, :] > pos[:, None]


def _mask_alt_raschka(num_tokens):
    # LLMs-from-scratch builds torch.triu(torch.ones(n, n), diagonal=1) and uses it with .bool().
    if not isinstance(num_tokens, int) or num_tokens <= 0:
        raise ValueError("num_tokens must be a positive int, got %r" % (num_tokens,))
    return torch.triu(torch.ones(num_tokens, num_tokens), diagonal=1).bool()


def _mask_alt_loops(num_tokens):
    if num_tokens < 1:
        raise ValueError("causal_mask: num_tokens should be >= 1, not " + str(num_tokens))
    mask = torch.zeros(num_tokens, num_tokens, dtype=torch.bool)
    for i in range(num_tokens):
        for j in range(i + 1, num_tokens):
            mask[i, j] = True
    return mask


register(Exercise(
    label="ch05_ex1", title="The causal mask", name="causal_mask", reference=causal_mask, points=1,
    checks=[
        Check("masks for 1, 2, 3 and 5 tokens", _mask_small_calls,
              hint="row i is the query, column j the key; True marks the keys strictly after the query."),
        Check("non-positive sizes raise ValueError naming num_tokens", _mask_bad_calls,
              must_mention=["num_tokens"], weight=0.4,
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
    alternatives=[
        Alternative("position comparison", "arange(n)[None, :] > arange(n)[:, None]", _mask_alt_arange),
        Alternative("LLMs-from-scratch's float triu", "torch.triu(torch.ones(n, n), diagonal=1).bool()",
                    _mask_alt_raschka),
        Alternative("loops", "a bool tensor of zeros, the upper triangle set entry by entry", _mask_alt_loops),
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


_DRAWS = range(100, 140)  # 40 training-mode draws, one call seed each


def _dropout_draw_calls(weights, p):
    return draw_calls(lambda train, s: Call(args=(weights, p), kwargs={"training": train}, call_seed=s),
                      _DRAWS, p)


def _dropout_train_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return _dropout_draw_calls(_softmax_weights(g, 2, 6), 0.25)


def _dropout_big_calls(seed):
    # One large draw: the fraction of zeros and the common factor are measured precisely.
    g = torch.Generator().manual_seed(seed)
    w = _softmax_weights(g, 4, 32)
    return [Call(args=(w, 0.3), kwargs={"training": False}, call_seed=1)] + \
        [Call(args=(w, 0.3), kwargs={"training": True}, call_seed=s) for s in range(200, 232)]


def _dropout_train_random_p_calls(seed):
    # float64 weights: the draws keep the dtype of weights.
    g = torch.Generator().manual_seed(seed)
    p = round(0.2 + 0.2 * torch.rand((), generator=g).item(), 3)  # away from 0.5: 1/p differs from 1/(1-p)
    return _dropout_draw_calls(_softmax_weights(g, 3, 7).double(), p)


def _dropout_uniform_calls(seed):
    # Every weight equal (1/6) in a batch of 2: rows, columns and batch entries all have the same
    # eval values, so any shared drop pattern shows as identical slices (see dropout_checks).
    w = torch.full((2, 6, 6), 1.0 / 6)
    return _dropout_draw_calls(w, 0.3)


def _dropout_eval_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=(_softmax_weights(g, 2, 5), 0.5), kwargs={"training": False}, call_seed=seed),
            Call(args=(_softmax_weights(g, 1, 7), 0.1), kwargs={"training": False}, call_seed=seed),
            Call(args=(_softmax_weights(g, 2, 4).double(), 0.3), kwargs={"training": False}, call_seed=seed)]


def _dropout_p0_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=(_softmax_weights(g, 2, 6), 0.0), kwargs={"training": True}, call_seed=seed),
            Call(args=(_softmax_weights(g, 2, 3).double(), 0.0), kwargs={"training": True}, call_seed=seed)]


def _dropout_bad_calls(seed):
    g = torch.Generator().manual_seed(seed)
    w = _softmax_weights(g, 1, 4)
    return [Call(args=(w, 1.0), kwargs={"training": True}),
            Call(args=(w, -0.25), kwargs={"training": True}),
            Call(args=(w, 1.5), kwargs={"training": False})]


_compare_dropout = dropout_compare(p_of=lambda call: call.args[1],
                                   is_train=lambda call: call.kwargs.get("training", True),
                                   elementwise=True)
_compare_dropout_independent = dropout_compare(
    p_of=lambda call: call.args[1], is_train=lambda call: call.kwargs.get("training", True),
    elementwise=True, independent_along=(-1, -2, 0),
    axis_names={-1: "columns (same key, different queries)", -2: "rows (same query, different keys)",
                0: "batch entries"})


class _DropoutVariant:
    """A wrong attention_dropout, wrong in one way only; validates p like the reference."""

    def __init__(self, keep_is_p=False, scale="inverse", in_eval=False, shared=None):
        self.keep_is_p, self.scale, self.in_eval = keep_is_p, scale, in_eval
        self.shared = shared  # None, or the axis along which one draw is shared: "row", "column", "batch"

    def __call__(self, weights, p, training=True):
        if not 0.0 <= p < 1.0:
            raise ValueError(f"p must satisfy 0 <= p < 1, got p={p!r}")
        if (not training and not self.in_eval) or p == 0:
            return weights.clone()
        keep_prob = p if self.keep_is_p else 1.0 - p
        shape = list(weights.shape)
        if self.shared == "row":
            shape[-1] = 1
        elif self.shared == "column":
            shape[-2] = 1
        elif self.shared == "batch":
            shape = shape[-2:]
        keep = (torch.rand(shape, dtype=weights.dtype) < keep_prob).expand_as(weights)
        factor = {"inverse": 1.0 / keep_prob, "none": 1.0, "same": keep_prob, "one_over_p": 1.0 / p}[self.scale]
        return weights * keep * factor


def _dropout_unvalidated(weights, p, training=True):
    return F.dropout(weights, p=p, training=training)


def _dropout_alt_rand_ge(weights, p, training=True):
    # The chapter's method: keep where a uniform draw is >= p, scale by 1/(1-p).
    if not 0 <= p < 1:
        raise ValueError(f"dropout probability p={p} must lie in [0, 1)")
    if not training:
        return weights
    keep = torch.rand_like(weights) >= p
    return weights * keep / (1 - p)


def _dropout_alt_d2l(X, p, training=True):
    # d2l's dropout_layer: a float mask from torch.rand(X.shape) > p.
    if p < 0 or p >= 1:
        raise ValueError(f"p must be in [0, 1), got {p}")
    if not training or p == 0:
        return X.clone()
    mask = (torch.rand(X.shape) > p).float()
    return mask * X / (1.0 - p)


def _dropout_alt_bernoulli64(weights, p, training=True):
    # torch.bernoulli keep mask, arithmetic in float64, cast back.
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
        raise ValueError("attention_dropout: p=%r is not a probability below 1" % (p,))
    if not training:
        return weights.clone()
    keep = torch.bernoulli(torch.full(weights.shape, 1.0 - p, dtype=torch.float64))
    return (weights.double() * keep / (1.0 - p)).to(weights.dtype)


def _dropout_alt_module(weights, p, training=True):
    # An nn.Dropout layer switched to the requested mode.
    if not (0.0 <= p < 1.0):
        raise ValueError(f"expected 0 <= p < 1, got p={p}")
    layer = nn.Dropout(p)
    layer.train(training)
    return layer(weights)


register(Exercise(
    label="ch05_ex2", title="Dropout on attention weights", name="attention_dropout",
    reference=attention_dropout, points=1,
    checks=[
        Check("training mode, p=0.25: 40 seeded draws against eval mode (zeros, 1/(1-p), mean)",
              _dropout_train_calls, compare=_compare_dropout,
              hint="this check compares 40 training-mode draws (each with its own seed) with eval mode: "
                   "which entries are zero, by which factor the others were multiplied, and whether their "
                   "mean approaches the unchanged weights."),
        Check("uniform weights (2 x 6 x 6), p=0.3: each weight dropped on its own",
              _dropout_uniform_calls, compare=_compare_dropout_independent,
              hint="this check passes weights that are all equal (1/6) and compares 40 training-mode draws "
                   "with eval mode: besides the zeros, the factor and the mean, no two rows, columns or batch "
                   "entries may share one drop pattern, because each weight is zeroed independently."),
        Check("eval mode returns the weights unchanged (float32 and float64)", _dropout_eval_calls,
              hint="this check calls your function with training=False, also on float64 weights, and "
                   "compares with the weights: same values, dtype and shape."),
        Check("p outside [0, 1) raises ValueError showing the value of p", _dropout_bad_calls, weight=0.5,
              must_mention=lambda call: [repr(call.args[1])],
              hint="this check passes p = 1.0, -0.25 and (in eval mode) 1.5: validate p in both modes and "
                   "show its value in the message."),
        Check("4 x 32 x 32 weights, p=0.3: fraction of zeros and the common factor (hidden)", _dropout_big_calls,
              public=False, compare=_compare_dropout,
              hint="this check measures the fraction of zeroed weights and the factor of the kept ones."),
        Check("training mode with another p, float64 weights (hidden)", _dropout_train_random_p_calls,
              public=False, compare=_compare_dropout,
              hint="this check repeats the 40-draw comparison with another p on float64 weights; the "
                   "draws keep the dtype of weights."),
        Check("p=0 in training mode changes nothing (hidden)", _dropout_p0_calls, public=False,
              hint="this check calls your function with p=0 in training mode (float32 and float64 weights) "
                   "and compares with the weights: same values, dtype and shape."),
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
        Mistake("scaled by 1/p (LLMs-from-scratch #431)",
                "the kept weights are multiplied by 1/p; a weight survives with probability 1 - p, so "
                "the factor that keeps its expected value is 1/(1 - p).",
                _DropoutVariant(scale="one_over_p")),
        Mistake("p taken as the keep probability",
                "p is the probability of DROPPING a weight, not of keeping it.",
                _DropoutVariant(keep_is_p=True)),
        Mistake("dropout active in eval mode",
                "dropout is still applied when training is False; in eval mode the weights must pass "
                "through unchanged.",
                _DropoutVariant(in_eval=True)),
        Mistake("one draw per query row",
                "one random draw was shared by a whole row of weights (a mask of shape (..., num_queries, 1) "
                "broadcast over the keys), so a query keeps or loses all its weights at once; each weight "
                "is dropped on its own.",
                _DropoutVariant(shared="row")),
        Mistake("one draw per key column",
                "one random draw was shared by a whole column of weights (a mask of shape "
                "(..., 1, num_keys)), so a key is dropped for every query at once; each weight is dropped "
                "on its own.",
                _DropoutVariant(shared="column")),
        Mistake("one mask shared by the batch",
                "one (num_queries, num_keys) mask was drawn and shared by every batch entry; each weight "
                "of each batch entry is dropped on its own (draw a mask of the full shape of weights).",
                _DropoutVariant(shared="batch")),
        Mistake("float32 output for float64 weights",
                "the result is float32 although the weights are float64; return the dtype of weights.",
                lambda weights, p, training=True: attention_dropout(weights.float(), p, training)),
        Mistake("no validation of p",
                "p = 1 (or a negative p) must raise ValueError naming p: with p = 1 every weight is "
                "dropped and the rescaling factor is infinite.",
                _dropout_unvalidated),
    ],
    alternatives=[
        Alternative("rand_like >= p", "keep where torch.rand_like(w) >= p, scale by 1/(1-p)", _dropout_alt_rand_ge),
        Alternative("d2l's dropout_layer", "float mask (torch.rand(X.shape) > p) times X / (1 - p)",
                    _dropout_alt_d2l),
        Alternative("bernoulli in float64", "torch.bernoulli keep mask, float64 arithmetic, cast back",
                    _dropout_alt_bernoulli64),
        Alternative("an nn.Dropout layer", "nn.Dropout(p) switched with train(training)", _dropout_alt_module),
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
    return [Call(init_args=(d_in, d_out, ctx, 0.5), init_seed=seed, strict_state=True, state_dict=_attn_state(g, d_in, d_out),
                 train=False, call_seed=seed, args=(torch.randn(2, ctx, d_in, generator=g),),
                 report=("param_shapes", "buffer_names"))]


def _attn_short_calls(seed):
    g = torch.Generator().manual_seed(seed)
    d_in, d_out, ctx = 4, 2, 8
    state = _attn_state(g, d_in, d_out)
    return [Call(init_args=(d_in, d_out, ctx, 0.0), init_seed=seed, strict_state=True, state_dict=state, train=False,
                 call_seed=seed, args=(torch.randn(3, n, d_in, generator=g),)) for n in (5, 1)]


def _attn_future_calls(seed):
    # Two inputs equal up to position 2; only tokens 3.. differ.
    g = torch.Generator().manual_seed(seed)
    d_in, d_out, ctx = 5, 4, 7
    state = _attn_state(g, d_in, d_out)
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
    state = _attn_state(g, d_in, d_out)
    return _attn_draws(d_in, d_out, ctx, 0.25, state, torch.randn(2, ctx, d_in, generator=g))


def _attn_equal_values_calls(seed):
    # W_value = 0 with a bias b: every value vector is b, so dropout on the weights keeps rows ∝ b.
    g = torch.Generator().manual_seed(seed)
    d_in, d_out, ctx = 4, 3, 5
    state = _attn_state(g, d_in, d_out, bias=True)
    state["W_value.weight"] = torch.zeros(d_out, d_in)
    state["W_value.bias"] = torch.tensor([1.0, -2.0, 0.5])
    return _attn_draws(d_in, d_out, ctx, 0.4, state, torch.randn(2, ctx, d_in, generator=g), bias=True)


def _attn_twin_calls(seed):
    # A batch of two equal sequences: eval mode gives them equal outputs, and their training draws
    # must differ (each sequence draws its own dropout on its own attention weights).
    g = torch.Generator().manual_seed(seed)
    d_in, d_out, ctx = 4, 3, 6
    state = _attn_state(g, d_in, d_out)
    x = torch.randn(1, ctx, d_in, generator=g).expand(2, ctx, d_in).clone()
    return _attn_draws(d_in, d_out, ctx, 0.4, state, x)


def _attn_train_hidden_calls(seed):
    g = torch.Generator().manual_seed(seed)
    d_in, d_out = (int(v) for v in torch.randint(2, 6, (2,), generator=g))
    ctx = int(torch.randint(4, 8, (), generator=g))
    p = round(0.2 + 0.2 * torch.rand((), generator=g).item(), 3)
    state = _attn_state(g, d_in, d_out, bias=True)
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
                 state_dict=_attn_state(g, d_in, d_out, bias=True), train=False, call_seed=seed,
                 args=(torch.randn(3, n, d_in, generator=g),), grads_of=(0,),
                 report=("param_shapes", "buffer_names"))]


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


register(Exercise(
    label="ch05_ex3", title="A causal attention module", name="CausalAttention",
    reference=CausalAttention, points=2, kind="class",
    checks=[
        Check("2 sequences of context_length=6 tokens, eval mode (parameters, buffer)", _attn_full_calls,
              hint="this check loads given projections with load_state_dict, lists parameter shapes and "
                   "buffer names, and compares the eval-mode output: look at each step (project, score, "
                   "scale, mask, softmax, weight the values) and at the contract's names."),
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
        Check("num_tokens > context_length raises ValueError naming both", _attn_too_long_calls,
              must_mention=["num_tokens", "context_length"], weight=0.5,
              hint="this check passes 6 tokens to a module with context_length=4 (its own initial "
                   "parameters, eval mode): forward must raise ValueError naming num_tokens and "
                   "context_length."),
        Check("training mode, random sizes and p, with qkv_bias=True (hidden)", _attn_train_hidden_calls,
              public=False, compare=_compare_attn_dropout,
              hint="this check repeats the 40-draw comparison with other sizes and another p."),
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
        Mistake("persistent float mask buffer",
                "your mask is a persistent buffer, so state_dict expects it and loading the projections "
                "alone fails (\"Missing key(s) ... mask\"); it is rebuilt from context_length, so "
                "register it with persistent=False.",
                _variant(persistent=True, float_mask=True)),
        Mistake("dropout on the context vectors",
                "dropout belongs on the attention weights (after the softmax), not on the output.",
                _variant(dropout_on="context")),
        Mistake("dropout active in eval mode",
                "dropout still runs in eval mode: the functional form does not know whether the module "
                "is training unless you tell it; a dropout submodule follows train()/eval() by itself.",
                _variant(functional_dropout=True)),
        Mistake("no length check",
                "an input longer than context_length must raise ValueError naming num_tokens and "
                "context_length.",
                _variant(length_check=False)),
        Mistake("qkv_bias ignored",
                "the projections were created without bias even with qkv_bias=True, so the given "
                "state_dict's bias entries do not load; pass bias=qkv_bias to the three nn.Linear layers.",
                _variant(ignore_bias=True)),
        Mistake("one dropout mask shared by the batch",
                "one (num_tokens, num_tokens) dropout mask was drawn and applied to every sequence of the "
                "batch; dropout must act on each sequence's attention weights independently (apply it to "
                "the (batch, num_tokens, num_tokens) weights).",
                _variant(batch_shared_mask=True)),
    ],
    alternatives=[
        Alternative("keys first, float mask, dropout by hand", "layers created key, value, query; "
                    "non-persistent float triu mask used with .bool(); rand_like >= p", _CAAltKeysFirst),
        Alternative("torch's fused SDPA", "F.scaled_dot_product_attention with the inverted boolean mask "
                    "and dropout_p in training", _CAAltSDPA),
        Alternative("einsum in float64", "einsum, torch.where mask from arange comparisons, nn.Dropout on "
                    "float64 weights, cast back", _CAAltEinsum64),
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


def _offset_alt_arange(num_queries, num_keys):
    if not (isinstance(num_queries, int) and isinstance(num_keys, int) and 0 < num_queries <= num_keys):
        raise ValueError(f"expected 0 < num_queries <= num_keys, got num_queries={num_queries}, num_keys={num_keys}")
    query_pos = torch.arange(num_keys - num_queries, num_keys)
    return torch.arange(num_keys)[None, :] > query_pos[:, None]


def _offset_alt_last_rows(num_queries, num_keys):
    # The last num_queries rows of the full causal mask of num_keys tokens.
    if num_queries < 1 or num_keys < num_queries:
        raise ValueError(f"num_queries ({num_queries}) must be between 1 and num_keys ({num_keys})")
    return torch.triu(torch.ones(num_keys, num_keys, dtype=torch.bool), diagonal=1)[num_keys - num_queries:]


def _offset_alt_loops(num_queries, num_keys):
    if not 1 <= num_queries <= num_keys:
        raise ValueError("need 1 <= num_queries <= num_keys; num_queries=%d, num_keys=%d" % (num_queries, num_keys))
    offset = num_keys - num_queries
    return torch.tensor([[j > offset + i for j in range(num_keys)] for i in range(num_queries)], dtype=torch.bool)


register(Exercise(
    label="ch05_ex4", title="A causal mask for queries that come last", name="offset_causal_mask",
    reference=offset_causal_mask, points=1,
    checks=[
        Check("1 query over 5 keys, 3 over 7, 4 over 4", _offset_public_calls,
              hint="query i sits at position num_keys - num_queries + i of the sequence; it may see every "
                   "key up to and including that position."),
        Check("invalid sizes raise ValueError naming num_queries and num_keys", _offset_bad_calls,
              must_mention=["num_queries", "num_keys"], weight=0.4,
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
    alternatives=[
        Alternative("position comparison", "key positions compared with the queries' positions (arange)",
                    _offset_alt_arange),
        Alternative("last rows of the full mask", "triu of a num_keys x num_keys mask, its last num_queries rows",
                    _offset_alt_last_rows),
        Alternative("loops", "a nested list comprehension, torch.tensor(dtype=bool)", _offset_alt_loops),
    ],
))
