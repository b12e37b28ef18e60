r"""ch05_ex7: One decoding step with a key-value cache.

A model that generates text runs its causal attention layer again for every new token. The keys
and values of the tokens before it never change (each depends only on its own token, and the mask
keeps later tokens out), so they can be kept in a **cache** and reused: each step then projects
only the new token. The page never writes such a step. Write `decode_step(layer, x_new, cache)`.

- `layer`: a causal attention layer like Exercise 3's, in eval mode (the checks pass the course's
  `multihead.CausalAttention`). Use its projections `W_query`, `W_key` and `W_value`, each an
  `nn.Linear(d_in, d_out)`, with or without bias. Dropout is off in eval mode.
- `x_new`: a float32 tensor `(batch, 1, d_in)`, the embedding of the new token, at position `t`.
- `cache`: a tuple `(keys, values)` of float32 tensors, each `(batch, t, d_out)`: the keys and
  values of the `t` tokens before the new one, in order. For the first token `t = 0`: both
  have no rows.
- Return a tuple `(context, (keys, values))`: `context` `(batch, 1, d_out)` is the new token's
  context vector, and `(keys, values)` is the cache grown by one token, each `(batch, t + 1, d_out)`,
  with the new token's key and value last.

Fed a sequence `x` one token at a time (from an empty cache, each step given the keys and values
of the tokens before it), your steps must reproduce `layer(x)` row by row, and the caches they
return must be the keys and values `layer` computes for those tokens (within float32 rounding).
One check passes a cache whose keys and values were not made by `layer`: the new token must attend
to them as given.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...checks.calls import MODULE_KEY
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, qkv_state, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def decode_step(layer, x_new, cache):
    """The new token's context vector (batch, 1, d_out) and the cache grown by its key and value."""
    keys, values = cache
    query = layer.W_query(x_new)
    keys = torch.cat([keys, layer.W_key(x_new)], dim=1)
    values = torch.cat([values, layer.W_value(x_new)], dim=1)
    # The new token is the last position: every cached key and its own are in its past.
    scores = query @ keys.transpose(1, 2) / math.sqrt(keys.shape[-1])
    context = torch.softmax(scores, dim=-1) @ values
    return context, (keys, values)


# Inputs of the public and hidden checks ---------------------------------------------------


def _layer(g, d_in, d_out, context_length, bias):
    """A multihead.CausalAttention as plain data (calls.MODULE_KEY), dropout 0.5 but in eval mode,
    with its projections drawn from ``g``; also the projections, to compute the cache."""
    state = qkv_state(g, d_in, d_out, bias)
    spec = {MODULE_KEY: "multihead.CausalAttention", "init_args": (d_in, d_out, context_length, 0.5),
            "init_kwargs": {"qkv_bias": bias}, "state_dict": state, "train": False}
    return spec, state


def _project(state, name, x):
    out = x @ state[f"{name}.weight"].T
    return out + state[f"{name}.bias"] if f"{name}.bias" in state else out


def _token_by_token(g, batch, n, d_in, d_out, bias):
    """One call per position t of a random sequence of n tokens: the token and the keys and values
    of the tokens before it, as the layer computes them."""
    spec, state = _layer(g, d_in, d_out, n, bias)
    x = torch.randn(batch, n, d_in, generator=g)
    keys, values = _project(state, "W_key", x), _project(state, "W_value", x)
    return [Call(args=(spec, x[:, t:t + 1].clone(), (keys[:, :t].clone(), values[:, :t].clone())))
            for t in range(n)]


def _sequence_calls(seed):
    return _token_by_token(gen(seed), 2, 5, 4, 3, False)


def _first_token_calls(seed):
    g = gen(seed)
    spec, _ = _layer(g, 3, 5, 4, True)
    return [Call(args=(spec, torch.randn(3, 1, 3, generator=g), (torch.zeros(3, 0, 5), torch.zeros(3, 0, 5))))]


def _given_cache_calls(seed):
    # Keys and values no layer made from tokens: only an answer that attends to the cache as
    # given can match.
    g = gen(seed)
    batch, t, d_in, d_out = 3, 4, 5, 2
    spec, _ = _layer(g, d_in, d_out, t + 2, True)
    cache = (torch.randn(batch, t, d_out, generator=g) * 2.0, torch.randn(batch, t, d_out, generator=g))
    return [Call(args=(spec, torch.randn(batch, 1, d_in, generator=g), cache))]


def _hidden_sequence_calls(seed):
    g = gen(seed)
    d_out = randint(g, 2, 6)
    d_in = d_out + randint(g, 1, 3)        # d_in != d_out, so the scale's size tells them apart
    return _token_by_token(g, randint(g, 1, 4), randint(g, 3, 8), d_in, d_out, bool(randint(g, 0, 1)))


def _hidden_given_cache_calls(seed):
    g = gen(seed)
    batch, t, d_out = randint(g, 1, 4), randint(g, 1, 9), randint(g, 2, 6)
    d_in = d_out + randint(g, 1, 3)
    spec, _ = _layer(g, d_in, d_out, t + 1, True)
    cache = (torch.randn(batch, t, d_out, generator=g) * 2.0, torch.randn(batch, t, d_out, generator=g))
    return [Call(args=(spec, torch.randn(batch, 1, d_in, generator=g), cache))]


# Kept mistakes, each with its hint --------------------------------------------------------


def _variant(grow=True, attend_new=True, twice=False, scale_by="d_out", top_left_row=False, front=False):
    """A decode_step that is wrong in exactly the ways switched on."""

    def decode_step(layer, x_new, cache):
        keys, values = cache
        k_new, v_new = layer.W_key(x_new), layer.W_value(x_new)
        pair = (k_new, keys) if front else (keys, k_new)
        grown_k = torch.cat(pair, dim=1)
        grown_v = torch.cat((v_new, values) if front else (values, v_new), dim=1)
        if twice:
            seen_k, seen_v = torch.cat([grown_k, k_new], dim=1), torch.cat([grown_v, v_new], dim=1)
        elif attend_new:
            seen_k, seen_v = grown_k, grown_v
        else:
            seen_k, seen_v = keys, values
        size = x_new.shape[-1] if scale_by == "d_in" else k_new.shape[-1]
        scores = layer.W_query(x_new) @ seen_k.transpose(1, 2) / math.sqrt(size)
        if top_left_row:
            scores = scores.masked_fill(layer.mask[:1, :seen_k.shape[1]], float("-inf"))
        context = torch.softmax(scores, dim=-1) @ seen_v
        return context, ((grown_k, grown_v) if grow else (keys, values))

    return decode_step


mistakes.add("cache not grown",
             "the context is right but the returned cache is the one given: it must also hold the new "
             "token's key and value, or the next step cannot see this token.",
             _variant(grow=False))


mistakes.add("new token's own key and value left out",
             "the new token attended only to the cached tokens: in a causal layer a token also sees "
             "itself (the first token has nothing else to attend to).",
             _variant(attend_new=False))


mistakes.add("new token attended twice",
             "the new token's key and value were appended to the cache and then appended again before "
             "the attention, so the token counts twice among the keys.",
             _variant(twice=True))


mistakes.add("scaled by the square root of d_in",
             "the scores were divided by the square root of the embedding size d_in; Exercise 3's layer "
             "divides by the square root of the keys' size.",
             _variant(scale_by="d_in"))


mistakes.add("top-left row of the layer's mask",
             "the scores were masked with the first row of the layer's mask: that row belongs to the "
             "token at position 0, which sees only the first key; the new token is the last position.",
             _variant(top_left_row=True))


mistakes.add("new key and value put first in the cache",
             "the context is right but the cache is out of order: the new token's key and value go "
             "after the cached ones, at position t.",
             _variant(front=True))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("einsum and a cache grown from a list", "einsum for scores and sum; torch.cat of a list")
def _alt_einsum(layer, x_new, cache):
    past_k, past_v = cache
    q = layer.W_query(x_new)[:, 0]                                        # (batch, d_out)
    k = torch.cat([past_k, layer.W_key(x_new)], 1)
    v = torch.cat([past_v, layer.W_value(x_new)], 1)
    w = torch.einsum("bd,btd->bt", q, k).div(k.size(-1) ** 0.5).softmax(-1)
    return torch.einsum("bt,btd->bd", w, v).unsqueeze(1), (k, v)


@alternatives.keep("a loop over positions in float64",
                   "one score per cached position and the new one, max-subtracted softmax by hand in float64")
def _alt_loop64(layer, x_new, cache):
    keys, values = cache
    q = layer.W_query(x_new)[:, 0].double()
    k_new, v_new = layer.W_key(x_new), layer.W_value(x_new)
    ks = [keys[:, j].double() for j in range(keys.shape[1])] + [k_new[:, 0].double()]
    vs = [values[:, j].double() for j in range(values.shape[1])] + [v_new[:, 0].double()]
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = [(q * k).sum(-1) * scale for k in ks]
    top = torch.stack(scores).amax(0)
    expo = [torch.exp(s - top) for s in scores]
    total = sum(expo)
    context = sum(e[:, None] * v for e, v in zip(expo, vs)) / total[:, None]
    grown = (torch.cat([keys, k_new], dim=1), torch.cat([values, v_new], dim=1))
    return context[:, None].to(x_new.dtype), grown


@alternatives.keep("row t of the layer's own mask",
                   "the chapter's masked_fill with the mask row of position t (an offset causal mask), "
                   "nn.functional softmax")
def _alt_mask_row(layer, x_new, cache):
    t = cache[0].shape[1]
    keys = torch.cat((cache[0], layer.W_key(x_new)), dim=-2)
    values = torch.cat((cache[1], layer.W_value(x_new)), dim=-2)
    scores = layer.W_query(x_new) @ keys.mT / math.sqrt(keys.shape[-1])
    scores = scores.masked_fill(layer.mask[t:t + 1, :t + 1].bool(), -torch.inf)
    return F.softmax(scores, dim=-1) @ values, (keys, values)


@alternatives.keep("torch's fused SDPA", "F.scaled_dot_product_attention with no mask over the grown cache")
def _alt_sdpa(layer, x_new, cache):
    k = torch.cat([cache[0], layer.W_key(x_new)], dim=1)
    v = torch.cat([cache[1], layer.W_value(x_new)], dim=1)
    return F.scaled_dot_product_attention(layer.W_query(x_new), k, v), (k, v)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch05_ex7", title="One decoding step with a key-value cache", name="decode_step",
    reference=decode_step, points=2,
    checks=[
        Check("5 tokens fed one at a time (d_in=4, d_out=3, batch of 2)", _sequence_calls,
              hint="this check calls decode_step at positions 0 to 4 of one sequence, each time with the "
                   "keys and values the layer computes for the tokens before it, and compares each "
                   "context with row t of layer(x) and each returned cache with the keys and values of "
                   "tokens 0 to t."),
        Check("the first token, with an empty cache (qkv_bias=True)", _first_token_calls,
              hint="this check passes a cache with 0 rows: the context and the grown cache of one row "
                   "are compared with the reference's."),
        Check("a cache of 4 tokens not made by the layer", _given_cache_calls,
              hint="this check passes keys and values drawn at random, not projections of any tokens: "
                   "the new token attends to them as given, and to its own key and value."),
        Check("random sizes and batch, a whole sequence token by token (hidden)", _hidden_sequence_calls,
              public=False,
              hint="the same comparison as the first check, with other sizes, batch and bias."),
        Check("random sizes, a cache not made by the layer (hidden)", _hidden_given_cache_calls, public=False,
              hint="the same comparison as the third check, with other sizes."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
