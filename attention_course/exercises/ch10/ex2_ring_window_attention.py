r"""ch10_ex2: A ring-buffer window under a distance bias.

Decode a sequence token by token through a sliding-window cache kept as a ring buffer, when the
scores carry a bias that depends on how far back a key lies. `queries` and `keys` are float32
tensors of shape `(batch, num_heads, num_tokens, d)`, `values` of shape
`(batch, num_heads, num_tokens, d_v)`, `window >= 1` an `int` and `slope >= 0` a `float`. Write
`ring_window_attention(queries, keys, values, window, slope)`. Start from two zero buffers,
`k_buffer` of shape `(batch, num_heads, window, d)` and `v_buffer` of shape
`(batch, num_heads, window, d_v)`. For each position `t = 0, 1, ..., num_tokens - 1` in turn,
write key `t` and value `t` into slot `t % window` of the buffers, then compute output `t` from
query `t` and the keys at positions `max(0, t - window + 1)` to `t` (the keys query `t` sees, all
in the buffers): the key at position `p` scores `q_t · k_p / sqrt(d) - slope * (t - p)`, the scores
go through a softmax over those keys, and the output is the weighted sum of their values. Return
the tuple `(outputs, k_buffer, v_buffer)`: the outputs, of shape `(batch, num_heads, num_tokens, d_v)`,
and the two buffers after the last position (slots never written stay zero), all float32.
`num_tokens` may be smaller than `window` or many times larger.
"""
from __future__ import annotations

import math

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def ring_window_attention(queries, keys, values, window, slope):
    """Outputs of a token-by-token decode through a ring buffer of `window` slots, and the buffers."""
    num_tokens, d = queries.shape[-2], queries.shape[-1]
    positions = torch.arange(num_tokens)
    distance = positions[:, None] - positions[None, :]                  # t - p
    visible = (distance >= 0) & (distance < window)
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(d) - slope * distance.to(queries.dtype)
    weights = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
    k_buffer = keys.new_zeros(*keys.shape[:-2], window, keys.shape[-1])
    v_buffer = values.new_zeros(*values.shape[:-2], window, values.shape[-1])
    for p in range(max(0, num_tokens - window), num_tokens):           # the last writes of each slot
        k_buffer[..., p % window, :] = keys[..., p, :]
        v_buffer[..., p % window, :] = values[..., p, :]
    return weights @ values, k_buffer, v_buffer


# Inputs of the public and hidden checks ---------------------------------------------------


def _case(g, batch, heads, num_tokens, d, d_v, window, slope):
    return Call(args=(torch.randn(batch, heads, num_tokens, d, generator=g),
                      torch.randn(batch, heads, num_tokens, d, generator=g),
                      torch.randn(batch, heads, num_tokens, d_v, generator=g), window, slope))


def _no_bias_calls(seed):
    """No bias (slope 0), 3 windows and 2 tokens long: the ring wraps three times."""
    g = gen(seed)
    window = randint(g, 3, 6)
    return [_case(g, 1, 2, 3 * window + randint(g, 1, window - 1), 3, 2, window, 0.0)]


def _bias_calls(seed):
    """A distance bias (slope between 0.25 and 1) over a sequence 3 to 4 windows long."""
    g = gen(seed)
    window = randint(g, 4, 6)
    slope = randint(g, 1, 4) / 4
    return [_case(g, 2, 2, 3 * window + randint(g, 1, window - 1), 4, 3, window, slope)]


def _short_calls(seed):
    """Fewer tokens than slots (part of each buffer stays zero), with a bias."""
    g = gen(seed)
    window = randint(g, 5, 8)
    return [_case(g, 1, 3, randint(g, 2, window - 1), 3, 2, window, randint(g, 1, 3) / 4)]


def _hidden_calls(seed):
    g = gen(seed)
    calls = []
    for _ in range(3):
        window = randint(g, 1, 7)
        num_tokens = window * randint(g, 1, 5) + randint(g, 1, max(1, window - 1))
        calls.append(_case(g, randint(g, 1, 2), randint(g, 1, 3), num_tokens, randint(g, 1, 5),
                           randint(g, 1, 4), window, randint(g, 0, 8) / 8))
    window = randint(g, 3, 6)
    calls.append(_case(g, 1, 2, 2 * window + randint(g, 1, window - 1), 3, 3, window, 0.5))
    return calls


_HINT = ("this check compares the outputs (one per position) and the two buffers after the last position, "
         "position by position; the reason says which of them differs and by how much.")


# Kept mistakes, each with its hint --------------------------------------------------------


def _decode_loop(queries, keys, values, window, slope, slot_of, distances):
    """Token by token through buffers; slot_of(t) is where key t goes, distances(t, slots, where)
    gives the distance used for each filled slot."""
    num_tokens, d = queries.shape[-2], queries.shape[-1]
    k_buffer = keys.new_zeros(*keys.shape[:-2], window, d)
    v_buffer = values.new_zeros(*values.shape[:-2], window, values.shape[-1])
    where = torch.full((window,), -1)                                   # position held by each slot
    outputs = []
    for t in range(num_tokens):
        slot = slot_of(t)
        k_buffer[..., slot, :], v_buffer[..., slot, :] = keys[..., t, :], values[..., t, :]
        where[slot] = t
        filled = where >= 0
        dist = distances(t, torch.arange(window), where)
        scores = (k_buffer @ queries[..., t, :].unsqueeze(-1)).squeeze(-1) / math.sqrt(d) - slope * dist
        scores = scores.masked_fill(~filled, float("-inf"))
        outputs.append((torch.softmax(scores, -1).unsqueeze(-2) @ v_buffer).squeeze(-2))
    return torch.stack(outputs, dim=-2), k_buffer, v_buffer


@mistakes.keep("write pointer never wraps",
               "once the buffer is full, every new key lands in the last slot: the write position must come "
               "back to slot 0 after the last slot, so the oldest key is the one replaced.")
def _ring_pointer_stuck(queries, keys, values, window, slope):
    return _decode_loop(queries, keys, values, window, slope, lambda t: min(t, window - 1),
                        lambda t, slots, where: (t - where).float())


@mistakes.keep("window one key too wide",
               "each query saw window + 1 keys (positions t - window to t); the window counts the query's "
               "own key, so it reaches back window - 1 positions.")
def _ring_window_plus_one(queries, keys, values, window, slope):
    _, k_buffer, v_buffer = ring_window_attention(queries, keys, values, window, slope)
    num_tokens, d = queries.shape[-2], queries.shape[-1]
    distance = torch.arange(num_tokens)[:, None] - torch.arange(num_tokens)[None, :]
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(d) - slope * distance.float()
    scores = scores.masked_fill((distance < 0) | (distance > window), float("-inf"))
    return torch.softmax(scores, -1) @ values, k_buffer, v_buffer


@mistakes.keep("distances from slot numbers",
               "the bias measured distances between slot numbers, as if the buffer held the keys in the order "
               "of their positions; once the ring wraps, a slot's number no longer tells how far back its key "
               "lies, so the bias needs each slot's true position.")
def _ring_slot_distances(queries, keys, values, window, slope):
    return _decode_loop(queries, keys, values, window, slope, lambda t: t % window,
                        lambda t, slots, where: (t % window - slots).float())


@mistakes.keep("a shifting buffer instead of a ring",
               "the outputs are right, but the buffers hold the last keys oldest first, shifted along at each "
               "step; the ring buffer leaves every key in slot position % window.")
def _ring_shifted(queries, keys, values, window, slope):
    outputs, _, _ = ring_window_attention(queries, keys, values, window, slope)
    num_tokens = queries.shape[-2]
    k_buffer = keys.new_zeros(*keys.shape[:-2], window, keys.shape[-1])
    v_buffer = values.new_zeros(*values.shape[:-2], window, values.shape[-1])
    kept = min(window, num_tokens)
    k_buffer[..., :kept, :] = keys[..., num_tokens - kept:, :]
    v_buffer[..., :kept, :] = values[..., num_tokens - kept:, :]
    return outputs, k_buffer, v_buffer


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("a ring with a position per slot", "token by token, a tensor of the position in each slot")
def _ring_alt_loop(queries, keys, values, window, slope):
    return _decode_loop(queries, keys, values, window, slope, lambda t: t % window,
                        lambda t, slots, where: (t - where).float())


@alternatives.keep("slot positions by arithmetic",
                   "vectorised over positions: slot s holds position t - ((t - s) % window) at step t; einsum, float64")
def _ring_alt_arithmetic(queries, keys, values, window, slope):
    num_tokens, d = queries.shape[-2], queries.shape[-1]
    t = torch.arange(num_tokens)[:, None]
    held = t - (t - torch.arange(window)[None, :]) % window              # (num_tokens, window)
    ok = held >= 0
    index = held.clamp(min=0)
    q64, k64, v64 = queries.double(), keys.double(), values.double()
    k_slots = k64[..., index, :]                                         # (..., num_tokens, window, d)
    scores = torch.einsum("...td,...tsd->...ts", q64, k_slots) / math.sqrt(d) - slope * (t - held)
    weights = torch.softmax(scores.masked_fill(~ok, float("-inf")), dim=-1)
    outputs = torch.einsum("...ts,...tsv->...tv", weights, v64[..., index, :])
    last = index[-1]
    k_buffer = torch.where(ok[-1, :, None], keys[..., last, :], torch.zeros(()))
    v_buffer = torch.where(ok[-1, :, None], values[..., last, :], torch.zeros(()))
    return outputs.float(), k_buffer, v_buffer


class _Ring:
    def __init__(self, like_k, like_v, window):
        self.k = like_k.new_zeros(*like_k.shape[:-1], window, like_k.shape[-1])
        self.v = like_v.new_zeros(*like_v.shape[:-1], window, like_v.shape[-1])
        self.window, self.count = window, 0

    def append(self, k, v):
        self.k[..., self.count % self.window, :] = k
        self.v[..., self.count % self.window, :] = v
        self.count += 1

    def attend(self, q, slope):
        t = self.count - 1
        ages = [(t - s) % self.window for s in range(self.window)]      # how far back each slot is
        mask = torch.tensor([age > t for age in ages])
        scores = torch.einsum("...d,...sd->...s", q, self.k) / math.sqrt(q.shape[-1])
        scores = scores - slope * torch.tensor(ages, dtype=q.dtype)
        return torch.einsum("...s,...sv->...v", torch.softmax(scores.masked_fill(mask, -math.inf), -1), self.v)


@alternatives.keep("a small cache class", "a ring-buffer class with append and attend; ages from the write count")
def _ring_alt_class(queries, keys, values, window, slope):
    ring = _Ring(keys[..., 0, :], values[..., 0, :], window)
    outputs = []
    for t in range(queries.shape[-2]):
        ring.append(keys[..., t, :], values[..., t, :])
        outputs.append(ring.attend(queries[..., t, :], slope))
    return torch.stack(outputs, -2), ring.k, ring.v


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch10_ex2", title="A ring-buffer window under a distance bias",
    name="ring_window_attention", reference=ring_window_attention, points=3,
    checks=[
        Check("no bias (slope 0), a sequence three windows and more long", _no_bias_calls, seed=0, hint=_HINT),
        Check("a distance bias, a sequence three windows and more long", _bias_calls, seed=1, hint=_HINT),
        Check("fewer tokens than slots, with a bias", _short_calls, seed=2, hint=_HINT),
        Check("random sizes, windows (1 included) and slopes (hidden)", _hidden_calls, seed=3, public=False,
              hint=_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
