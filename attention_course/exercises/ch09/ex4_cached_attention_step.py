"""ch09_ex4: One decoding step with a key–value cache.

Write `cached_attention_step(x_new, k_cache, v_cache, w_query, w_key, w_value, num_heads)` for one
step of multi-head self-attention with a cache, for any number of new tokens. `x_new` has shape
`(batch, n_new, d_in)` with `n_new >= 1`: the new tokens, at positions `n_past ... n_past + n_new - 1`
right after the cached ones. `k_cache` and `v_cache` have shape
`(batch, num_heads, n_past, head_dim)` with `n_past >= 0` (an empty cache has `n_past = 0`).
`w_query`, `w_key`, `w_value` are float tensors of shape `(d_out, d_in)` in `nn.Linear`'s layout
(the projection of `x` is `x @ w.T`, no bias), with `d_out = num_heads * head_dim`; feature
`h * head_dim + i` of a projection belongs to head `h`.

Return the tuple `(context, k_cache, v_cache)`: the new caches, of shape
`(batch, num_heads, n_past + n_new, head_dim)`, are the old ones followed by the new tokens' keys and
values; `context`, of shape `(batch, n_new, d_out)`, is the multi-head attention of the new tokens'
queries over all `n_past + n_new` keys, where new token `i` sees the keys at positions up to
`n_past + i` (and none after), scores divided by the square root of `head_dim`, heads merged back in order
(no output projection). Raise `ValueError` naming `k_cache` and `v_cache` and giving their shapes
when their shapes differ.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import NEG_INF

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _validate_step(x_new, k_cache, v_cache, w_query, num_heads):
    if tuple(k_cache.shape) != tuple(v_cache.shape):
        raise ValueError(f"k_cache and v_cache must have the same shape, got k_cache {tuple(k_cache.shape)} "
                         f"and v_cache {tuple(v_cache.shape)}")


def cached_attention_step(x_new, k_cache, v_cache, w_query, w_key, w_value, num_heads):
    """Attend from the new tokens to cache + themselves; returns (context, k_cache, v_cache)."""
    _validate_step(x_new, k_cache, v_cache, w_query, num_heads)
    batch, n_new, _ = x_new.shape
    head_dim = w_query.shape[0] // num_heads

    def split(t):
        return t.view(batch, n_new, num_heads, head_dim).transpose(1, 2)

    q = split(x_new @ w_query.T)
    keys = torch.cat([k_cache, split(x_new @ w_key.T)], dim=2)
    values = torch.cat([v_cache, split(x_new @ w_value.T)], dim=2)
    n_past = k_cache.shape[2]
    scores = q @ keys.transpose(-2, -1) / math.sqrt(head_dim)
    # New token i sits at position n_past + i: Chapter 5's causal mask for queries that come last.
    future = torch.ones(n_new, n_past + n_new, dtype=torch.bool).triu(n_past + 1)
    weights = torch.softmax(scores.masked_fill(future, NEG_INF), dim=-1)
    context = (weights @ values).transpose(1, 2).reshape(batch, n_new, num_heads * head_dim)
    return context, keys, values


# Inputs of the public and hidden checks ---------------------------------------------------


def _step_call(g, batch, n_past, n_new, d_in, num_heads, head_dim, dtype=torch.float32):
    """Caches made from real past tokens with the same weights, so a correct step continues
    the sequence exactly as full causal attention would."""
    d_out = num_heads * head_dim
    w = [(torch.randn(d_out, d_in, generator=g) / math.sqrt(d_in)).to(dtype) for _ in range(3)]
    past = torch.randn(batch, n_past, d_in, generator=g).to(dtype)

    def split(t):
        return t.view(batch, n_past, num_heads, head_dim).transpose(1, 2).contiguous()

    k_cache, v_cache = split(past @ w[1].T), split(past @ w[2].T)
    x_new = torch.randn(batch, n_new, d_in, generator=g).to(dtype) * 1.5
    return Call(args=(x_new, k_cache, v_cache, w[0], w[1], w[2], num_heads))


def _step_one_calls(seed):
    g = gen(seed)
    return [_step_call(g, 2, 5, 1, 6, 2, 3), _step_call(g, 1, 1, 1, 4, 1, 4)]


def _step_prefill_calls(seed):
    g = gen(seed)
    return [_step_call(g, 2, 0, 4, 5, 2, 2)]


def _step_chunk_calls(seed):
    g = gen(seed)
    return [_step_call(g, 2, 4, 3, 5, 2, 3), _step_call(g, 1, 2, 2, 4, 4, 1)]


def _step_bad_calls(seed):
    g = gen(seed)
    call = _step_call(g, 1, 3, 1, 4, 2, 2)
    x_new, k_cache, v_cache, wq, wk, wv, h = call.args
    return [Call(args=(x_new, k_cache, v_cache[:, :, :2], wq, wk, wv, h)),
            Call(args=(x_new, k_cache, torch.randn(1, 2, 3, 3, generator=g), wq, wk, wv, h))]


def _step_must_mention(call):
    return ["k_cache", "v_cache", tuple(call.args[1].shape), tuple(call.args[2].shape)]


def _step_hidden_calls(seed):
    g = gen(seed)
    calls = []
    for dtype in (torch.float32, torch.float32, torch.float64):
        calls.append(_step_call(g, randint(g, 1, 3), randint(g, 0, 6), randint(g, 1, 4), randint(g, 2, 6),
                                randint(g, 1, 3), randint(g, 1, 4), dtype))
    return calls


def _step_hidden_long_calls(seed):
    g = gen(seed)
    return [_step_call(g, 1, randint(g, 10, 20), 1, 8, 4, 2), _step_call(g, 2, randint(g, 5, 9), 5, 6, 3, 2)]


_STEP_CONTRACT = ("feature h * head_dim + i of each projection belongs to head h (and goes back there in "
                  "the context); scores are scaled by 1 / sqrt(head_dim); new token i sits at position "
                  "n_past + i and sees the cache and the new tokens up to itself; the caches grow along "
                  "dim 2, old tokens first.")


_STEP_SAME = "The reason above names the first of (context, k_cache, v_cache) that differs. The contract: "


_STEP_HINT = "this check compares (context, k_cache, v_cache) with the reference's. " + _STEP_SAME + _STEP_CONTRACT


# Kept mistakes, each with its hint --------------------------------------------------------


def _step_checked(body):
    def impl(x_new, k_cache, v_cache, w_query, w_key, w_value, num_heads):
        _validate_step(x_new, k_cache, v_cache, w_query, num_heads)
        return body(x_new, k_cache, v_cache, w_query, w_key, w_value, num_heads)
    return impl


def _step_generic(x_new, k_cache, v_cache, w_query, w_key, w_value, num_heads, *, append, mask,
                  use_cache=True, scale_by_d_out=False, interleaved=False, merge_interleaved=False):
    # interleaved: feature f goes to head f % num_heads, as a view(..., head_dim, num_heads) does,
    # instead of the contract's (..., num_heads, head_dim); merge_interleaved merges back that way.
    batch, n_new, _ = x_new.shape
    d_out = w_query.shape[0]
    head_dim = d_out // num_heads

    def split(t):
        if interleaved:
            return t.view(batch, n_new, head_dim, num_heads).permute(0, 3, 1, 2)
        return t.view(batch, n_new, num_heads, head_dim).transpose(1, 2)

    q = split(x_new @ w_query.T)
    k_new, v_new = split(x_new @ w_key.T), split(x_new @ w_value.T)
    keys, values = append(k_cache, k_new), append(v_cache, v_new)
    att_k, att_v = (keys, values) if use_cache else (k_new, v_new)
    scores = q @ att_k.transpose(-2, -1) / math.sqrt(d_out if scale_by_d_out else head_dim)
    n_keys = att_k.shape[2]
    hidden = mask(n_new, n_keys)
    if hidden is not None:
        scores = scores.masked_fill(hidden, NEG_INF)
    per_head = torch.softmax(scores, dim=-1) @ att_v
    merged = per_head.permute(0, 2, 3, 1) if merge_interleaved else per_head.transpose(1, 2)
    return merged.reshape(batch, n_new, d_out), keys, values


def _offset_mask(n_q, n_k):
    return torch.ones(n_q, n_k, dtype=torch.bool).triu(n_k - n_q + 1)


_step_wrong_axis = mistakes.add("cache grown along the wrong axis",
                                "the caches are (batch, num_heads, tokens, head_dim): the new tokens' keys and values are "
                                "appended along the tokens axis, dim 2, not along the heads axis.",
                                _step_checked(lambda *a: _step_generic(
                 *a, append=lambda c, n: torch.cat([c, n], dim=1), mask=_offset_mask)))


_step_prepended = mistakes.add("new tokens put before the cache",
                               "the cached tokens came first: append the new keys and values after them, so that position "
                               "p of the cache is token p of the sequence.",
                               _step_checked(lambda *a: _step_generic(
                 *a, append=lambda c, n: torch.cat([n, c], dim=2), mask=_offset_mask)))


def _append_tokens(cache, new):
    return torch.cat([cache, new], dim=2)


_step_no_mask = mistakes.add("no mask among the new tokens",
                             "one new token may see everything, but with several new tokens, token i must not see the "
                             "new tokens after it: mask the keys beyond position n_past + i.",
                             _step_checked(lambda *a: _step_generic(*a, append=_append_tokens, mask=lambda q, k: None)))


_step_top_left = mistakes.add("mask aligned with the top-left corner",
                              "a (n_new, n_past + n_new) mask built as for square self-attention (like is_causal=True in "
                              "F.scaled_dot_product_attention) hides the cache; new token i sits at position n_past + i, "
                              "so shift the diagonal by n_past (Chapter 5, exercise 4).",
                              _step_checked(lambda *a: _step_generic(
                 *a, append=_append_tokens, mask=lambda q, k: torch.ones(q, k, dtype=torch.bool).triu(1))))


_step_new_only = mistakes.add("cache not attended to",
                              "you appended to the cache but attended only to the new tokens; the queries must see the "
                              "cached keys and values too.",
                              _step_checked(lambda *a: _step_generic(*a, append=_append_tokens, mask=_offset_mask,
                                                                     use_cache=False)))


_step_d_out_scale = mistakes.add("scaled by sqrt(d_out)",
                                 "each head's scores are divided by the square root of head_dim = d_out // num_heads, the "
                                 "size of the vectors in its dot products, not of d_out.",
                                 _step_checked(lambda *a: _step_generic(*a, append=_append_tokens, mask=_offset_mask,
                                                                        scale_by_d_out=True)))


_step_interleaved = mistakes.add("heads interleaved",
                                 "your split gives head h the features h, h + num_heads, h + 2 * num_heads, ... (a view as "
                                 "(head_dim, num_heads) deals the features out to the heads in turn); the contract gives "
                                 "head h the contiguous features h * head_dim to (h + 1) * head_dim - 1, both in the "
                                 "projections (the layout of the cache) and in the context.",
                                 _step_checked(lambda *a: _step_generic(
                 *a, append=_append_tokens, mask=_offset_mask, interleaved=True, merge_interleaved=True)))


# The same interleaved split, but the heads merged back in the contract's layout.
_step_interleaved_split = mistakes.add("heads interleaved when split",
                                       "your split gives head h the features h, h + num_heads, h + 2 * num_heads, ... (a view as "
                                       "(head_dim, num_heads) deals the features out to the heads in turn); the contract gives "
                                       "head h the contiguous features h * head_dim to (h + 1) * head_dim - 1, the layout of the "
                                       "cache.",
                                       _step_checked(lambda *a: _step_generic(
                 *a, append=_append_tokens, mask=_offset_mask, interleaved=True)))


@mistakes.keep("no cache shape check",
               "caches of different shapes must raise ValueError naming k_cache and v_cache with their "
               "shapes, not fail later with another error.")
def _step_unchecked(*args):
    return _step_generic(*args, append=_append_tokens, mask=_offset_mask)


# Kept alternatives (correct answers in other styles) --------------------------------------


def _alt_step_sdpa(x_new, k_cache, v_cache, w_query, w_key, w_value, num_heads):
    # SDPA's boolean attn_mask is True where a query MAY attend (the opposite of ours).
    b, n, _ = x_new.shape
    q = F.linear(x_new, w_query).unflatten(-1, (num_heads, -1)).transpose(1, 2)
    k = torch.cat((k_cache, F.linear(x_new, w_key).unflatten(-1, (num_heads, -1)).transpose(1, 2)), dim=-2)
    v = torch.cat((v_cache, F.linear(x_new, w_value).unflatten(-1, (num_heads, -1)).transpose(1, 2)), dim=-2)
    total = k.shape[-2]
    allowed = torch.arange(total)[None, :] <= (total - n + torch.arange(n))[:, None]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    return out.transpose(1, 2).flatten(2), k, v


alternatives.add("SDPA with attn_mask",
                 "F.linear, unflatten, F.scaled_dot_product_attention with a bool "
"mask of allowed pairs",
                 _step_checked(_alt_step_sdpa))


def _alt_step_einsum(x_new, k_cache, v_cache, w_query, w_key, w_value, num_heads):
    d_out, d_in = w_query.shape
    hd = d_out // num_heads
    per_head = [w.reshape(num_heads, hd, d_in) for w in (w_query, w_key, w_value)]
    q, k_new, v_new = (torch.einsum("bnd,hed->bhne", x_new, w) for w in per_head)
    keys, values = torch.cat([k_cache, k_new], 2), torch.cat([v_cache, v_new], 2)
    n_past = k_cache.shape[2]
    s = torch.einsum("bhqe,bhke->bhqk", q, keys) * hd ** -0.5
    later = torch.arange(keys.shape[2])[None, :] > n_past + torch.arange(x_new.shape[1])[:, None]
    a = torch.softmax(torch.where(later, torch.tensor(NEG_INF, dtype=s.dtype), s), dim=-1)
    ctx = torch.einsum("bhqk,bhke->bqhe", a, values)
    return ctx.reshape(x_new.shape[0], x_new.shape[1], d_out), keys, values


alternatives.add("einsum",
                 "weights viewed as (heads, head_dim, d_in), einsum throughout, torch.where mask",
                 _step_checked(_alt_step_einsum))


def _alt_step_loops64(x_new, k_cache, v_cache, w_query, w_key, w_value, num_heads):
    # float64, one head and one new token at a time; token i sees the cache and new tokens 0..i.
    batch, n_new, _ = x_new.shape
    d_out = w_query.shape[0]
    hd = d_out // num_heads
    x = x_new.double()
    proj_q, proj_k, proj_v = x @ w_query.double().T, x @ w_key.double().T, x @ w_value.double().T
    heads_k, heads_v, outputs = [], [], []
    for h in range(num_heads):
        cols = slice(h * hd, (h + 1) * hd)
        keys_h = torch.cat([k_cache[:, h].double(), proj_k[..., cols]], dim=1)      # (batch, total, hd)
        vals_h = torch.cat([v_cache[:, h].double(), proj_v[..., cols]], dim=1)
        heads_k.append(keys_h)
        heads_v.append(vals_h)
        rows = []
        for i in range(n_new):
            visible = k_cache.shape[2] + i + 1
            sc = (keys_h[:, :visible] @ proj_q[:, i, cols, None]).squeeze(-1) / math.sqrt(hd)
            rows.append((torch.softmax(sc, dim=-1)[:, None, :] @ vals_h[:, :visible]).squeeze(1))
        outputs.append(torch.stack(rows, dim=1))
    context = torch.cat(outputs, dim=-1).to(x_new.dtype)
    return context, torch.stack(heads_k, 1).to(k_cache.dtype), torch.stack(heads_v, 1).to(v_cache.dtype)


alternatives.add("loops in float64",
                 "one head and one new token at a time, float64 inside",
                 _step_checked(_alt_step_loops64))


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch09_ex4", title="One decoding step with a key-value cache", name="cached_attention_step",
    reference=cached_attention_step, points=3,
    checks=[
        Check("one new token after 5 cached ones, and after 1", _step_one_calls,
              hint="this check decodes one new token (2 heads, then 1 head), which sees every cached token. "
                   + _STEP_SAME + _STEP_CONTRACT),
        Check("an empty cache and 4 new tokens (the prompt)", _step_prefill_calls,
              hint="this check starts from an empty cache (n_past = 0) with 4 new tokens and 2 heads. "
                   + _STEP_SAME + _STEP_CONTRACT),
        Check("3 new tokens after 4 cached ones, 2 after 2 (offset causal mask)", _step_chunk_calls,
              hint="this check adds several new tokens after a non-empty cache (2 heads, then 4). "
                   + _STEP_SAME + _STEP_CONTRACT),
        Check("k_cache and v_cache of different shapes raise ValueError naming both and their shapes",
              _step_bad_calls, must_mention=_step_must_mention, weight=0.5,
              hint="compare k_cache.shape with v_cache.shape first; name both and give their shapes."),
        Check("random sizes, empty and full caches, float64 (hidden)", _step_hidden_calls, public=False,
              hint=_STEP_HINT),
        Check("long caches and longer chunks", _step_hidden_long_calls, hint=_STEP_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
