"""ch09_ex5: A decoding step with grouped-query attention.

Write `grouped_cached_step(q_new, k_new, v_new, k_cache, v_cache)`: one decoding step of
grouped-query attention with a key–value cache, for one new token, where `num_heads` query heads
share `num_kv_heads` key/value heads. The projections are already done:

- `q_new`: the new token's queries, shape `(batch, num_heads, 1, head_dim)`;
- `k_new`, `v_new`: the new token's keys and values, shape `(batch, num_kv_heads, 1, head_dim)`;
- `k_cache`, `v_cache`: the keys and values of the `n_past` earlier tokens, oldest first, shape
  `(batch, num_kv_heads, n_past, head_dim)`, with `n_past >= 0` (an empty cache has `n_past = 0`).

All five are float tensors of one dtype (float32 or float64). With
`group_size = num_heads // num_kv_heads`, query head `i` uses key/value head `i // group_size`:
contiguous groups, so query heads `0` to `group_size - 1` share key/value head 0, as in the GQA
paper and in Llama's `repeat_kv`. `num_kv_heads = 1` is multi-query attention and
`num_kv_heads = num_heads` is ordinary multi-head attention.

Return the tuple `(output, k_cache, v_cache)`, all in the inputs' dtype:

- the new caches, of shape `(batch, num_kv_heads, n_past + 1, head_dim)`: the old ones followed
  by `k_new` and `v_new`. They keep `num_kv_heads` heads, never one per query head: that is the
  memory grouped-query attention saves;
- `output`, of shape `(batch, num_heads, 1, head_dim)`: for each query head, the attention of its
  query over the `n_past + 1` keys of its key/value head (the cached ones and the new token's
  own), scores divided by the square root of `head_dim`, the weights averaging the values of
  the same key/value head. Heads stay separate (no merge, no output projection).

Raise `ValueError` naming `q_new` and `k_new` and giving their shapes when `num_heads` is not a
multiple of `num_kv_heads`.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import ERROR_WEIGHT, Kept, gen, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _validate_groups(q_new, k_new):
    if q_new.shape[1] % k_new.shape[1]:
        raise ValueError(f"q_new {tuple(q_new.shape)} has {q_new.shape[1]} query heads, not a multiple of the "
                         f"{k_new.shape[1]} key/value heads of k_new {tuple(k_new.shape)}")


def grouped_cached_step(q_new, k_new, v_new, k_cache, v_cache):
    """Grouped-query attention of one new token over cache + itself; returns (output, k_cache, v_cache)."""
    _validate_groups(q_new, k_new)
    keys = torch.cat([k_cache, k_new], dim=2)
    values = torch.cat([v_cache, v_new], dim=2)
    group_size = q_new.shape[1] // k_new.shape[1]
    # Each key/value head serves group_size consecutive query heads.
    wide_k = keys.repeat_interleave(group_size, dim=1)
    wide_v = values.repeat_interleave(group_size, dim=1)
    scores = q_new @ wide_k.transpose(-2, -1) / math.sqrt(q_new.shape[-1])
    return torch.softmax(scores, dim=-1) @ wide_v, keys, values


# Inputs of the public and hidden checks ---------------------------------------------------


def _gqa_call(g, batch, num_heads, num_kv_heads, n_past, head_dim, dtype=torch.float32):
    def draw(heads, tokens, scale=1.0):
        return (torch.randn(batch, heads, tokens, head_dim, generator=g) * scale).to(dtype)

    q_new = draw(num_heads, 1, 1.5)            # sharp enough that the 1/sqrt(head_dim) matters
    k_new, v_new = draw(num_kv_heads, 1), draw(num_kv_heads, 1)
    k_cache, v_cache = draw(num_kv_heads, n_past), draw(num_kv_heads, n_past)
    return Call(args=(q_new, k_new, v_new, k_cache, v_cache))


def _gqa_groups_calls(seed):
    g = gen(seed)
    return [_gqa_call(g, 2, 4, 2, 5, 3), _gqa_call(g, 1, 6, 3, 3, 4)]


def _gqa_ends_calls(seed):
    g = gen(seed)
    return [_gqa_call(g, 1, 4, 1, 4, 2), _gqa_call(g, 2, 3, 3, 2, 4)]


def _gqa_empty_float64_calls(seed):
    g = gen(seed)
    return [_gqa_call(g, 2, 4, 2, 0, 3), _gqa_call(g, 1, 6, 2, 6, 5, torch.float64)]


def _gqa_long_calls(seed):
    g = gen(seed)
    return [_gqa_call(g, 1, 8, 2, randint(g, 30, 50), 4)]


def _gqa_bad_calls(seed):
    g = gen(seed)
    return [_gqa_call(g, 1, 6, 4, 2, 3), _gqa_call(g, 2, 3, 2, 1, 2)]


def _gqa_must_mention(call):
    return ["q_new", "k_new", tuple(call.args[0].shape), tuple(call.args[1].shape)]


def _gqa_hidden_calls(seed):
    g = gen(seed)
    calls = []
    for dtype in (torch.float32, torch.float64, torch.float32):
        kv_heads, group = randint(g, 1, 3), randint(g, 1, 4)
        calls.append(_gqa_call(g, randint(g, 1, 3), kv_heads * group, kv_heads, randint(g, 0, 9),
                               randint(g, 1, 6), dtype))
    return calls


_GQA_CONTRACT = ("query head i uses key/value head i // (num_heads // num_kv_heads); scores are scaled by "
                 "1 / sqrt(head_dim); the new token attends to the cached keys and to its own; the caches "
                 "grow along dim 2, old tokens first, and keep num_kv_heads heads.")


_GQA_SAME = "The reason above names the first of (output, k_cache, v_cache) that differs. The contract: "


# Kept mistakes, each with its hint --------------------------------------------------------


def _gqa_generic(q_new, k_new, v_new, k_cache, v_cache, *, head_of=None, scale=True, expanded_cache=False,
                 attend_before_append=False, prepend=False):
    # head_of(num_heads, num_kv_heads) -> the key/value head of each query head (a LongTensor).
    h, g = q_new.shape[1], k_new.shape[1]
    keys = torch.cat([k_new, k_cache] if prepend else [k_cache, k_new], dim=2)
    values = torch.cat([v_new, v_cache] if prepend else [v_cache, v_new], dim=2)
    index = head_of(h, g) if head_of is not None else torch.arange(h) // (h // g)
    seen_k, seen_v = (k_cache, v_cache) if attend_before_append else (keys, values)
    wide_k, wide_v = seen_k[:, index], seen_v[:, index]
    scores = q_new @ wide_k.transpose(-2, -1)
    if scale == "d_model":                     # num_heads * head_dim, the model's width
        scores = scores / math.sqrt(h * q_new.shape[-1])
    elif scale:
        scores = scores / math.sqrt(q_new.shape[-1])
    output = torch.softmax(scores, dim=-1) @ wide_v
    if expanded_cache:
        return output, keys[:, index], values[:, index]
    return output, keys, values


def _gqa_checked(**options):
    def impl(q_new, k_new, v_new, k_cache, v_cache):
        _validate_groups(q_new, k_new)
        return _gqa_generic(q_new, k_new, v_new, k_cache, v_cache, **options)
    return impl


mistakes.add("groups interleaved",
             "query head i used key/value head i % num_kv_heads, the grouping that tiling the key/value heads "
             "(repeat, expand then reshape in the wrong order) gives; the contract's groups are contiguous: "
             "query heads 0 to group_size - 1 share key/value head 0, so head i uses i // group_size "
             "(what repeat_interleave gives).",
             _gqa_checked(head_of=lambda h, g: torch.arange(h) % g))


mistakes.add("head index divided by num_kv_heads",
             "query head i used key/value head i // num_kv_heads; the divisor is the group size, "
             "num_heads // num_kv_heads (the number of query heads per key/value head). The two agree only "
             "when num_heads = num_kv_heads ** 2.",
             _gqa_checked(head_of=lambda h, g: torch.arange(h) // g))


mistakes.add("scores not scaled",
             "the scores were not divided by the square root of head_dim (the last axis of q_new).",
             _gqa_checked(scale=False))


mistakes.add("scores scaled by the square root of d_model",
             "the scores were divided by the square root of num_heads * head_dim (the model's width); each head "
             "scales by the square root of its own size, head_dim (the last axis of q_new).",
             _gqa_checked(scale="d_model"))


mistakes.add("cache returned with one head per query head",
             "the returned caches were expanded to num_heads heads; they must keep num_kv_heads heads "
             "(the old cache followed by k_new and v_new): sharing key/value heads is what makes the cache "
             "smaller. Expand only the tensors you attend with.",
             _gqa_checked(expanded_cache=True))


mistakes.add("new token does not see itself",
             "the new token attended only to the cached keys and values; it must also see its own key and "
             "value (append first, then attend over n_past + 1 keys).",
             _gqa_checked(attend_before_append=True))


mistakes.add("new token put before the cache",
             "the caches must keep the old tokens first and append k_new and v_new after them, so that "
             "position p of the cache is token p of the sequence.",
             _gqa_checked(prepend=True))


@mistakes.keep("no check of the head counts",
               "when num_heads is not a multiple of num_kv_heads, raise ValueError naming q_new and k_new with "
               "their shapes, before any other error.")
def _gqa_unchecked(q_new, k_new, v_new, k_cache, v_cache):
    group_size = q_new.shape[1] // k_new.shape[1]
    keys, values = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
    wide_k, wide_v = keys.repeat_interleave(group_size, 1), values.repeat_interleave(group_size, 1)
    weights = torch.softmax(q_new @ wide_k.transpose(-2, -1) / math.sqrt(q_new.shape[-1]), dim=-1)
    return weights @ wide_v, keys, values


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("queries viewed as groups",
                   "queries reshaped to (batch, num_kv_heads, group_size, head_dim), broadcasting against the "
                   "un-expanded cache; the error names the shapes with torch.Size")
def _alt_gqa_grouped_view(q_new, k_new, v_new, k_cache, v_cache):
    b, h, _, d = q_new.shape
    g = k_new.shape[1]
    if h % g != 0:
        raise ValueError(f"cannot share {g} key/value heads among {h} query heads: "
                         f"q_new {q_new.shape}, k_new {k_new.shape}")
    keys, values = torch.cat((k_cache, k_new), -2), torch.cat((v_cache, v_new), -2)
    grouped_q = q_new.reshape(b, g, h // g, d)                # the group's queries act as its rows
    weights = torch.softmax(grouped_q @ keys.transpose(-1, -2) * d ** -0.5, dim=-1)
    return (weights @ values).reshape(b, h, 1, d), keys, values


@alternatives.keep("loop over query heads in float64",
                   "one query head at a time, float64 inside, torch.stack of the heads")
def _alt_gqa_loop64(q_new, k_new, v_new, k_cache, v_cache):
    num_heads, num_kv_heads = q_new.shape[1], k_new.shape[1]
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} (q_new of shape {list(q_new.shape)}) must be divisible by "
                         f"num_kv_heads={num_kv_heads} (k_new of shape {list(k_new.shape)})")
    keys = torch.cat([k_cache, k_new], dim=2)
    values = torch.cat([v_cache, v_new], dim=2)
    per_group = num_heads // num_kv_heads
    heads = []
    for i in range(num_heads):
        kv = i // per_group
        q = q_new[:, i].double()                              # (batch, 1, head_dim)
        s = q @ keys[:, kv].double().transpose(1, 2) / math.sqrt(q.shape[-1])
        heads.append(torch.softmax(s, dim=-1) @ values[:, kv].double())
    return torch.stack(heads, dim=1).to(q_new.dtype), keys, values


@alternatives.keep("SDPA with enable_gqa",
                   "F.scaled_dot_product_attention(..., enable_gqa=True), which groups heads like "
                   "repeat_interleave; error names the shapes as AxBxCxD")
def _alt_gqa_sdpa(q_new, k_new, v_new, k_cache, v_cache):
    if q_new.size(1) % k_new.size(1) != 0:
        shape_q, shape_k = ("x".join(map(str, t.shape)) for t in (q_new, k_new))
        raise ValueError(f"q_new {shape_q} and k_new {shape_k}: query heads must split evenly over key/value heads")
    k_all, v_all = torch.cat([k_cache, k_new], 2), torch.cat([v_cache, v_new], 2)
    return F.scaled_dot_product_attention(q_new, k_all, v_all, enable_gqa=True), k_all, v_all


@alternatives.keep("einsum with expand",
                   "key/value heads given a group axis with expand, einsum throughout")
def _alt_gqa_einsum(q_new, k_new, v_new, k_cache, v_cache):
    b, h, _, d = q_new.shape
    g = k_new.shape[1]
    if h % g:
        raise ValueError(f"q_new has shape {tuple(q_new.shape)} and k_new {tuple(k_new.shape)}: "
                         f"{h} heads cannot be grouped over {g}")
    keys, values = torch.cat([k_cache, k_new], 2), torch.cat([v_cache, v_new], 2)
    n = keys.shape[2]
    k_wide = keys[:, :, None].expand(b, g, h // g, n, d).reshape(b, h, n, d)
    v_wide = values[:, :, None].expand(b, g, h // g, n, d).reshape(b, h, n, d)
    s = torch.einsum("bhqd,bhkd->bhqk", q_new, k_wide) / math.sqrt(d)
    return torch.einsum("bhqk,bhkd->bhqd", s.softmax(-1), v_wide), keys, values


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch09_ex5", title="A decoding step with grouped-query attention", name="grouped_cached_step",
    reference=grouped_cached_step, points=3,
    checks=[
        Check("4 query heads in 2 groups after 5 cached tokens, 6 in 3 groups after 3", _gqa_groups_calls,
              hint="this check shares each key/value head among 2 query heads. " + _GQA_SAME + _GQA_CONTRACT),
        Check("one key/value head for 4 query heads (multi-query), and 3 for 3 (multi-head)", _gqa_ends_calls,
              hint="this check covers the two ends of grouping: one key/value head for all query heads, and one "
                   "per query head. " + _GQA_SAME + _GQA_CONTRACT),
        Check("an empty cache (2 groups of 2), and float64 (2 groups of 3, 6 cached tokens)",
              _gqa_empty_float64_calls,
              hint="this check starts from an empty cache (n_past = 0), then uses float64 inputs, whose dtype the "
                   "outputs keep. " + _GQA_SAME + _GQA_CONTRACT),
        Check("8 query heads in 2 groups over a long cache", _gqa_long_calls,
              hint="this check attends over 30 to 50 cached tokens. " + _GQA_SAME + _GQA_CONTRACT),
        Check("num_heads not a multiple of num_kv_heads raises ValueError naming q_new, k_new and their shapes",
              _gqa_bad_calls, must_mention=_gqa_must_mention, weight=ERROR_WEIGHT,
              hint="the calls have 6 query heads over 4 key/value heads, then 3 over 2. The error names q_new and "
                   "k_new and gives both shapes."),
        Check("random sizes and groupings, empty caches, float64 (hidden)", _gqa_hidden_calls, public=False,
              hint="this check compares (output, k_cache, v_cache) with the reference's on random sizes. "
                   + _GQA_SAME + _GQA_CONTRACT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
