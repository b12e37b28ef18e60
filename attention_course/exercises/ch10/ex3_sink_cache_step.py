r"""ch10_ex3: One decoding step with attention sinks.

Write `sink_cache_step(q_new, k_new, v_new, k_cache, v_cache, position, window, num_sinks)`, one
decoding step of StreamingLLM's cache: the first `num_sinks >= 1` positions (the sinks) are kept
forever, and of the others only the most recent. `q_new` and `k_new` are float32 tensors of shape
`(batch, num_heads, 1, d)`, `v_new` of shape `(batch, num_heads, 1, d_v)`: the query, key and value
of the token at position `position >= 0` (the number of tokens decoded before it). `k_cache` and
`v_cache`, of shapes `(batch, num_heads, num_sinks + window, d)` and
`(batch, num_heads, num_sinks + window, d_v)` with `window >= 1`, hold the earlier tokens' keys and
values: position `p` lives in slot `p` if `p < num_sinks`, else in slot `num_sinks + p % window`;
a slot no token has reached yet holds arbitrary values, inf and NaN included (memory never written).
Write the new key and value into their slot, then attend with the new query over the positions it
keeps: the sinks, those of the positions `0` to `num_sinks - 1` that are at most `position` (the new
token's own included), and the positions `max(num_sinks, position - window + 1)` to `position`; each
kept position counts once. Scores are `q · k / sqrt(d)`, with a softmax over those keys. Return the
tuple `(output, k_cache, v_cache)`: the output of shape `(batch, num_heads, 1, d_v)` and the two
caches after the write, all float32. The step leaves its arguments as they were: the caches it
returns are new tensors, not the given ones written in place.
"""
from __future__ import annotations

import math

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, inputs_unchanged, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _slot(position, window, num_sinks):
    return position if position < num_sinks else num_sinks + position % window


def _kept_slots(position, window, num_sinks):
    """Which slots hold a position the query at `position` keeps (after its own write)."""
    sinks = torch.arange(num_sinks) <= position
    residue = torch.arange(window)
    latest = position - (position - residue) % window             # last position with that residue
    return torch.cat([sinks, latest >= num_sinks])


def sink_cache_step(q_new, k_new, v_new, k_cache, v_cache, position, window, num_sinks):
    """Write the new key/value into the sink cache, attend over the sinks and the recent window."""
    slot = _slot(position, window, num_sinks)
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    k_cache[..., slot, :] = k_new[..., 0, :]
    v_cache[..., slot, :] = v_new[..., 0, :]
    kept = _kept_slots(position, window, num_sinks)
    scores = q_new @ k_cache.transpose(-2, -1) / math.sqrt(q_new.shape[-1])
    weights = torch.softmax(scores.masked_fill(~kept, float("-inf")), dim=-1)
    return weights @ v_cache.masked_fill(~kept[:, None], 0.0), k_cache, v_cache   # unkept slots may hold NaN


# Inputs of the public and hidden checks ---------------------------------------------------


def _case(g, batch, heads, d, d_v, window, num_sinks, position, finite=True):
    """The caches as the reference leaves them after `position` tokens, unwritten slots filled with
    keys of the usual size and large values (finite: such a slot, if attended, weighs as much as a kept
    one and moves the output far), or with NaN, inf and -inf in turn, as memory never written may hold."""
    capacity = num_sinks + window
    k_cache = torch.randn(batch, heads, capacity, d, generator=g)
    v_cache = 50 * torch.randn(batch, heads, capacity, d_v, generator=g)
    if not finite:
        for cache in (k_cache, v_cache):
            cache.view(-1)[:] = torch.tensor([math.nan, math.inf, -math.inf]).repeat(cache.numel())[:cache.numel()]
    for p in range(position):
        slot = _slot(p, window, num_sinks)
        k_cache[..., slot, :] = torch.randn(batch, heads, d, generator=g)
        v_cache[..., _slot(p, window, num_sinks), :] = torch.randn(batch, heads, d_v, generator=g)
    new = [torch.randn(batch, heads, 1, size, generator=g) for size in (d, d, d_v)]
    return Call(args=(*new, k_cache, v_cache, position, window, num_sinks))


def _filling_calls(seed):
    """Before the cache is full: the first token, a token among the sinks, a token in the window while
    some of the window's slots are still empty; then one of those with the empty slots non-finite."""
    g = gen(seed)
    window, sinks = randint(g, 4, 6), randint(g, 2, 3)
    calls = [_case(g, 1, 2, 3, 2, window, sinks, position)
             for position in (0, sinks - 1, sinks + randint(g, 1, window - 2))]
    return calls + [_case(g, 1, 2, 3, 2, window, sinks, sinks + randint(g, 0, window - 2), finite=False)]


def _wrapped_calls(seed):
    """Long after the cache filled: the window's part has wrapped several times."""
    g = gen(seed)
    window, sinks = randint(g, 3, 5), randint(g, 1, 4)
    return [_case(g, 2, 2, 4, 3, window, sinks, sinks + window * randint(g, 2, 5) + offset)
            for offset in (0, randint(g, 1, window - 1))]


def _hidden_calls(seed):
    g = gen(seed)
    calls = []
    for _ in range(5):
        window, sinks = randint(g, 1, 6), randint(g, 1, 4)
        calls.append(_case(g, randint(g, 1, 2), randint(g, 1, 3), randint(g, 1, 5), randint(g, 1, 4), window,
                           sinks, randint(g, 0, sinks + 4 * window)))
    window, sinks = randint(g, 3, 5), randint(g, 1, 4)   # one wrapped case with num_sinks % window != 0
    sinks += sinks % window == 0
    calls.append(_case(g, 1, 2, 3, 2, window, sinks, sinks + 3 * window + randint(g, 1, window - 1)))
    for finite in (True, False):     # the window reaches back over the sinks; then unwritten slots non-finite
        window, sinks = randint(g, 2, 6), randint(g, 1, 4)
        sinks += sinks % window == 0                     # so the written slots are not the first ones
        calls.append(_case(g, randint(g, 1, 2), randint(g, 1, 3), randint(g, 1, 5), randint(g, 1, 4), window,
                           sinks, sinks + randint(g, 0, window - 2), finite=finite))
    return calls


_HINT = ("this check compares the output and both caches after the step, call by call (the reason says which "
         "call and which result differs); try the step at a position inside the sinks, one inside the first "
         "window and one after the ring has wrapped, and with unwritten slots that hold inf and NaN.")


# Kept mistakes, each with its hint --------------------------------------------------------


def _step_variant(slot_rule="contract", keys="kept", in_place=False):
    """The step with one change: the slot rule, the slots attended (a list, repeats counted), or the write."""
    def step(q_new, k_new, v_new, k_cache, v_cache, position, window, num_sinks):
        def slot(p):
            if slot_rule == "after the sinks" and p >= num_sinks:
                return num_sinks + (p - num_sinks) % window
            return _slot(p, window, num_sinks)
        if not in_place:
            k_cache, v_cache = k_cache.clone(), v_cache.clone()
        k_cache[..., slot(position), :], v_cache[..., slot(position), :] = k_new[..., 0, :], v_new[..., 0, :]
        scale = math.sqrt(q_new.shape[-1])
        if keys == "zero weights":                              # masked scores, every slot's value
            scores = (q_new @ k_cache.transpose(-2, -1) / scale).masked_fill(
                ~_kept_slots(position, window, num_sinks), float("-inf"))
            return torch.softmax(scores, dim=-1) @ v_cache, k_cache, v_cache
        sinks = list(range(min(num_sinks, position + 1)))
        slots = {"kept": sinks + [slot(p) for p in range(max(num_sinks, position - window + 1), position + 1)],
                 "window only": [slot(p) for p in range(max(0, position - window + 1), position + 1)],
                 "all": list(range(num_sinks + window)),
                 "prefix": list(range(min(position + 1, num_sinks + window))),    # slots assumed to fill in order
                 "sinks twice": sinks + [slot(p) for p in range(max(0, position - window + 1), position + 1)],
                 "one too wide": sinks + [slot(p) for p in range(max(num_sinks, position - window), position + 1)],
                 }[keys]
        scores = q_new @ k_cache[..., slots, :].transpose(-2, -1) / scale
        return torch.softmax(scores, dim=-1) @ v_cache[..., slots, :], k_cache, v_cache
    return step


mistakes.add("sinks dropped from the attention",
             "the caches are right, but the query attended only over its window, leaving out the sinks once "
             "they fall behind it; StreamingLLM's query keeps attending to the sinks at every step.",
             _step_variant(keys="window only"))
mistakes.add("unwritten slots attended",
             "the query attended over every slot, those no token has reached yet included; until each slot "
             "has been written, some hold no key of the sequence.",
             _step_variant(keys="all"))
mistakes.add("slots assumed to fill in order",
             "the keys were written to the right slots, but the query attended over the first position + 1 "
             "slots, as if slots filled in order; with the ring's slot rule the window's first tokens land "
             "past slots that are still empty.",
             _step_variant(keys="prefix"))
mistakes.add("window slots counted after the sinks",
             "a token after the sinks went to the slot of its count after the sinks; the contract's slot comes "
             "from the position itself modulo window, and the two disagree when num_sinks is not a multiple of "
             "window.",
             _step_variant(slot_rule="after the sinks", keys="prefix"))
mistakes.add("window one position too wide",
             "your window holds one position too many, window + 1 recent positions where the contract keeps "
             "window of them (implementations disagree by one here, as the chapter warns); the oldest of yours "
             "shares its slot with the new token, so the new key was counted twice.",
             _step_variant(keys="one too wide"))
mistakes.add("sinks attended twice",
             "while the window reaches back over the sinks, a sink inside it was attended twice, once as a sink "
             "and once as part of the window; the contract's window starts after the sinks, so each kept "
             "position counts once.",
             _step_variant(keys="sinks twice"))
mistakes.add("unwritten slots' inf and NaN reached the output",
             "the output is NaN where slots no token has reached hold inf or NaN, as the contract allows: a -inf "
             "score gives such a slot a zero weight, but a zero weight times inf or NaN is NaN (and so is -inf "
             "added to a NaN or inf score); leave the slots the query does not keep out of the arithmetic.",
             _step_variant(keys="zero weights"))

mistakes.add("wrote into the given caches",
             "the output and the returned caches are right, but the new key and value were written into the "
             "k_cache and v_cache passed in, so the call changed the caller's caches; the contract returns the "
             "caches after the write as new tensors and leaves its arguments as they were.",
             _step_variant(in_place=True))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("positions per slot", "a tensor of the position each slot holds, then a mask of the kept ones")
def _sink_alt_positions(q_new, k_new, v_new, k_cache, v_cache, position, window, num_sinks):
    k_cache = torch.cat([k_cache[..., :0, :], k_cache], dim=-2)          # a copy
    v_cache = v_cache.clone()
    held = torch.full((num_sinks + window,), -1)
    for p in range(position + 1):                                        # replay which position is where
        held[p if p < num_sinks else num_sinks + p % window] = p
    k_cache[..., held.tolist().index(position), :] = k_new.squeeze(-2)
    v_cache[..., held.tolist().index(position), :] = v_new.squeeze(-2)
    keep = (held >= 0) & ((held < num_sinks) | (held > position - window))
    scores = torch.einsum("bhqd,bhsd->bhqs", q_new, k_cache) / math.sqrt(q_new.shape[-1])
    scores = torch.where(keep, scores, torch.tensor(-math.inf))
    values = torch.where(keep[:, None], v_cache, torch.zeros(()))                 # unwritten slots: any values
    return torch.einsum("bhqs,bhsv->bhqv", scores.softmax(-1), values), k_cache, v_cache


@alternatives.keep("gather the kept slots", "the kept slots gathered into a short list, float64 inside")
def _sink_alt_gather(q_new, k_new, v_new, k_cache, v_cache, position, window, num_sinks):
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    if position < num_sinks:
        slot = position
    else:
        slot = num_sinks + position % window
    k_cache[:, :, slot], v_cache[:, :, slot] = k_new[:, :, 0], v_new[:, :, 0]
    first_recent = max(num_sinks, position - window + 1)
    kept = sorted({min(p, num_sinks - 1) if p < num_sinks else num_sinks + p % window
                   for p in list(range(min(num_sinks, position + 1))) + list(range(first_recent, position + 1))})
    keys, values = k_cache[:, :, kept].double(), v_cache[:, :, kept].double()
    scores = (q_new.double() @ keys.transpose(-1, -2)) * q_new.shape[-1] ** -0.5
    return (scores.softmax(-1) @ values).float(), k_cache, v_cache


@alternatives.keep("masked full pass",
                   "the StreamingLLM mask over positions 0..position, the keys looked up slot by slot, SDPA")
def _sink_alt_mask(q_new, k_new, v_new, k_cache, v_cache, position, window, num_sinks):
    k_cache, v_cache = k_cache.clone(), v_cache.clone()

    def slot_of(p):
        return p if p < num_sinks else num_sinks + p % window

    k_cache[..., slot_of(position), :] = k_new[..., 0, :]
    v_cache[..., slot_of(position), :] = v_new[..., 0, :]
    positions = [p for p in range(position + 1) if p < num_sinks or p > position - window]
    keys = torch.stack([k_cache[..., slot_of(p), :] for p in positions], dim=-2)
    values = torch.stack([v_cache[..., slot_of(p), :] for p in positions], dim=-2)
    output = torch.nn.functional.scaled_dot_product_attention(q_new, keys, values)
    return output, k_cache, v_cache


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch10_ex3", title="One decoding step with attention sinks",
    name="sink_cache_step", reference=sink_cache_step, points=2,
    checks=[
        Check("while the cache fills: the first token, a sink, a token of the window, unwritten slots of inf "
              "and NaN",
              inputs_unchanged(_filling_calls), seed=0,
              hint=_HINT),
        Check("long after the cache filled, the window's slots wrapped several times",
              inputs_unchanged(_wrapped_calls), seed=1,
              hint=_HINT),
        Check("random positions, windows and numbers of sinks (hidden)",
              inputs_unchanged(_hidden_calls), seed=2, public=False,
              hint=_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
