"""ch06_ex3: A different mask for every head.

Heads need not share one mask: one head may see the whole past while another is restricted to a
local window. Write `per_head_masked_attention(queries, keys, values, mask)` with `queries` of
shape `(batch, num_heads, num_queries, head_dim)`, `keys` `(batch, num_heads, num_keys,
head_dim)`, `values` `(batch, num_heads, num_keys, d_v)` and `mask` a `torch.bool` tensor of
shape `(num_heads, num_queries, num_keys)`, `True` where that head's query must **not** attend
to that key (the same for every sequence of the batch). Return `(output, weights)`: `weights`
`(batch, num_heads, num_queries, num_keys)` is the softmax over the keys of the scores divided by
the square root of `head_dim`, with hidden keys removed before the softmax; a query that sees no key
at all gets all-zero weights (and so a zero output, never NaN). `output` is
`(batch, num_heads, num_queries, d_v)`; return the tuple `(output, weights)`, both with the dtype
of the inputs. Raise `ValueError` naming `mask` and giving its shape when
`mask` does not have shape `(num_heads, num_queries, num_keys)`.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint, shape_of

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def per_head_masked_attention(queries, keys, values, mask):
    """Scaled dot-product attention with one boolean mask per head; returns (output, weights)."""
    for name, t in (("queries", queries), ("keys", keys), ("values", values)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must have shape (batch, num_heads, length, size), got {name} of shape "
                             f"{shape_of(t)}")
    num_heads, num_queries, num_keys = queries.shape[1], queries.shape[2], keys.shape[2]
    expected = (num_heads, num_queries, num_keys)
    if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != expected:
        got = shape_of(mask)
        raise ValueError(f"mask must have shape (num_heads, num_queries, num_keys) = {expected}, "
                         f"got mask of shape {got}")
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    weights = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
    weights = weights.masked_fill(mask, 0.0)   # a row with no visible key: NaN -> 0
    return weights @ values, weights


# Inputs of the public and hidden checks ---------------------------------------------------


def _window_masks(n):
    pos = torch.arange(n)
    causal = pos[None, :] > pos[:, None]
    recent = causal | (pos[None, :] < pos[:, None] - 1)     # itself and the previous token only
    return torch.stack([causal, recent])


def _pm_main_calls(seed):
    g = gen(seed)
    b, h, n, d = 2, 2, 5, 3
    return [Call(args=(torch.randn(b, h, n, d, generator=g), torch.randn(b, h, n, d, generator=g),
                       torch.randn(b, h, n, 4, generator=g), _window_masks(n)))]


def _pm_empty_rows_calls(seed):
    g = gen(seed)
    b, h, nq, nk, d = 2, 3, 4, 5, 2
    mask = torch.rand(h, nq, nk, generator=g) < 0.4
    mask[0, 1] = True          # head 0, query 1 sees nothing
    mask[2, 3] = True          # head 2, query 3 sees nothing
    mask[1] = False            # head 1 sees everything
    mask[0, 0] = False
    return [Call(args=(torch.randn(b, h, nq, d, generator=g), torch.randn(b, h, nk, d, generator=g),
                       torch.randn(b, h, nk, 3, generator=g), mask))]


def _pm_bad_calls(seed):
    g = gen(seed)
    q = torch.randn(1, 2, 3, 4, generator=g)
    k = torch.randn(1, 2, 5, 4, generator=g)
    v = torch.randn(1, 2, 5, 4, generator=g)
    return [Call(args=(q, k, v, torch.zeros(3, 5, dtype=torch.bool))),
            Call(args=(q, k, v, torch.zeros(3, 3, 5, dtype=torch.bool)))]


def _pm_hidden_calls(seed):
    g = gen(seed)
    b, h, nq, nk, d = (randint(g, 1, 3), randint(g, 2, 4), randint(g, 2, 6), randint(g, 2, 7),
                       randint(g, 1, 4))
    mask = torch.rand(h, nq, nk, generator=g) < 0.5
    mask[0, 0] = True
    return [Call(args=(torch.randn(b, h, nq, d, generator=g), torch.randn(b, h, nk, d, generator=g),
                       torch.randn(b, h, nk, randint(g, 1, 4), generator=g), mask), grads_of=(0,))]


_PM_HINT = ("this check compares the tuple (output, weights) with the contract: both in the dtype of the "
            "inputs; weights = softmax over the keys of the scores divided by sqrt(head_dim), head h hiding "
            "the keys that mask[h] marks True before the softmax; output = weights @ values.")


# Kept mistakes, each with its hint --------------------------------------------------------


def _pm_checked(body):
    def impl(queries, keys, values, mask):
        expected = (queries.shape[1], queries.shape[2], keys.shape[2])
        if tuple(mask.shape) != expected:
            raise ValueError(f"mask must have shape {expected}, got mask of shape {tuple(mask.shape)}")
        scores = queries @ keys.transpose(-2, -1)
        weights = body(scores, queries.shape[-1], mask)
        return weights @ values, weights
    return impl


mistakes.add("mask inverted",
             "True in the mask marks the keys a query must NOT attend to; you hid the visible keys instead.",
             _pm_checked(lambda s, d, m: torch.softmax((s / math.sqrt(d)).masked_fill(~m, float("-inf")), -1)
                         .masked_fill(~m, 0.0)))


mistakes.add("masked after the softmax",
             "you zeroed the hidden keys after the softmax, so the rows no longer sum to 1; hide them in "
             "the scores, before the softmax.",
             _pm_checked(lambda s, d, m: torch.softmax(s / math.sqrt(d), -1).masked_fill(m, 0.0)))


mistakes.add("NaN for a query that sees nothing",
             "a row whose scores are all -inf turns into NaN in the softmax; set the weights of such a "
             "query to 0.",
             _pm_checked(lambda s, d, m: torch.softmax((s / math.sqrt(d)).masked_fill(m, float("-inf")), -1)))


mistakes.add("finite fill value",
             "filling hidden scores with a large finite negative number makes a query that sees no key "
             "spread its weight uniformly over hidden keys; its weights must be 0.",
             _pm_checked(lambda s, d, m: torch.softmax((s / math.sqrt(d)).masked_fill(m, -1e9), -1)))


mistakes.add("scores not scaled",
             "divide the scores by the square root of head_dim (the last size of queries).",
             _pm_checked(lambda s, d, m: torch.softmax(s.masked_fill(m, float("-inf")), -1).masked_fill(m, 0.0)))


def _pm_reference_weights(scores, d, mask):
    return torch.softmax((scores / math.sqrt(d)).masked_fill(mask, float("-inf")), -1).masked_fill(mask, 0.0)


@mistakes.keep("scaled by sqrt(d_v)",
               "you divided the scores by the square root of the values' size d_v; divide by the square "
               "root of head_dim, the size the queries and keys share (the last size of queries).")
def _pm_values_scaled(queries, keys, values, mask):
    expected = (queries.shape[1], queries.shape[2], keys.shape[2])
    if tuple(mask.shape) != expected:
        raise ValueError(f"mask must have shape {expected}, got mask of shape {tuple(mask.shape)}")
    weights = _pm_reference_weights(queries @ keys.transpose(-2, -1), values.shape[-1], mask)
    return weights @ values, weights


@mistakes.keep("the course's mask passed unchanged to F.scaled_dot_product_attention",
               "your weights are right but your output is not: F.scaled_dot_product_attention's boolean "
               "attn_mask marks with True the keys that take part, the opposite of this course's masks (True = "
               "hidden), so each query attended to exactly the keys it must not see; pass ~mask, or compute "
               "the output as weights @ values.")
def _pm_sdpa_mask_unchanged(queries, keys, values, mask):
    expected = (queries.shape[1], queries.shape[2], keys.shape[2])
    if tuple(mask.shape) != expected:
        raise ValueError(f"mask must have shape {expected}, got mask of shape {tuple(mask.shape)}")
    weights = _pm_reference_weights(queries @ keys.transpose(-2, -1), queries.shape[-1], mask)
    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask), weights


mistakes.add("head 0's mask for every head",
             "every head used the mask of head 0; head h must hide the keys that mask[h] marks, so index "
             "the mask per head (or broadcast the whole (num_heads, num_queries, num_keys) mask).",
             _pm_checked(lambda s, d, m: _pm_reference_weights(s, d, m[:1].expand_as(m))))


mistakes.add("a list instead of a tuple",
             "your output and weights are right but returned as a list; return the tuple "
             "(output, weights).",
             lambda q, k, v, m: list(per_head_masked_attention(q, k, v, m)))


mistakes.add("results in float64",
             "your output and weights are right but float64: both must have the dtype of the inputs "
             "(float32 here); compute in float64 if you like, then cast back.",
             lambda q, k, v, m: tuple(t.double() for t in per_head_masked_attention(q, k, v, m)))


@mistakes.keep("no mask shape check",
               "a mask that is not (num_heads, num_queries, num_keys) must raise ValueError naming mask and "
               "its shape; a (num_queries, num_keys) mask would otherwise be broadcast silently.")
def _pm_no_check(queries, keys, values, mask):
    weights = _pm_reference_weights(queries @ keys.transpose(-2, -1), queries.shape[-1], mask)
    return weights @ values, weights


# Kept alternatives (correct answers in other styles) --------------------------------------


def _pm_validate(queries, keys, mask):
    want = (queries.shape[1], queries.shape[2], keys.shape[2])
    if mask.shape != want:
        raise ValueError(f"mask has shape {mask.shape}, expected {want} (num_heads, num_queries, num_keys)")


@alternatives.keep("einsum in float64",
                   "torch.where masks, softmax by hand with a guarded sum, float64")
def _pm_alt_einsum64(queries, keys, values, mask):
    _pm_validate(queries, keys, mask)
    scores = torch.einsum("bhqd,bhkd->bhqk", queries.double(), keys.double()) / math.sqrt(queries.shape[-1])
    scores = torch.where(mask, float("-inf"), scores)
    top = scores.amax(dim=-1, keepdim=True).clamp(min=-1e300)   # all -inf rows: keep exp finite
    e = torch.where(mask, 0.0, torch.exp(scores - top))
    total = e.sum(-1, keepdim=True)
    weights = torch.where(total > 0, e / total.clamp(min=1e-300), 0.0)
    return torch.einsum("bhqk,bhkv->bhqv", weights, values.double()).to(values.dtype), weights.to(queries.dtype)


@alternatives.keep("torch's fused SDPA",
                   "SDPA with the inverted boolean mask for the output, empty rows "
"zeroed after")
def _pm_alt_sdpa(queries, keys, values, mask):
    # SDPA for the output (its boolean attn_mask marks the keys that MAY be attended), the weights beside it.
    _pm_validate(queries, keys, mask)
    visible = ~mask
    sees_some = visible.any(-1, keepdim=True)
    safe = visible | ~sees_some                     # a row that sees nothing: let SDPA see all, zero it after
    out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=safe)
    scores = queries @ keys.transpose(-2, -1) / queries.shape[-1] ** 0.5
    weights = torch.softmax(scores.masked_fill(~safe, float("-inf")), dim=-1) * sees_some
    return out * sees_some, weights


@alternatives.keep("loops over heads",
                   "bmm per head, a multiplicative mask, guarded normaliser")
def _pm_alt_loops(queries, keys, values, mask):
    # d2l-style: one head at a time, a multiplicative mask, rows that see nothing left at zero.
    _pm_validate(queries, keys, mask)
    outs, ws = [], []
    for h in range(queries.shape[1]):
        q, k, v = queries[:, h], keys[:, h], values[:, h]
        keep = (~mask[h]).to(q.dtype)
        scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(q.shape[-1])
        scores = scores - scores.masked_fill(mask[h], float("-inf")).amax(-1, keepdim=True).nan_to_num(
            neginf=0.0)
        e = torch.exp(scores.masked_fill(mask[h], 0.0)) * keep
        s = e.sum(-1, keepdim=True)
        w = e / torch.where(s > 0, s, torch.ones_like(s))
        ws.append(w)
        outs.append(torch.bmm(w, v))
    return torch.stack(outs, 1), torch.stack(ws, 1)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch06_ex3", title="A different mask for every head", name="per_head_masked_attention",
    reference=per_head_masked_attention, points=2,
    checks=[
        Check("2 heads: one causal, one that sees only the current and the previous token", _pm_main_calls,
              hint=_PM_HINT),
        Check("queries that see no key get all-zero weights and a zero output", _pm_empty_rows_calls,
              hint="this check uses masks under which some queries of some heads see no key: those queries "
                   "must get all-zero weights and a zero output (not NaN, not uniform weights); every other "
                   "query is compared as in the first check (a tuple (output, weights) in the inputs' dtype, "
                   "scores divided by sqrt(head_dim), its own head's mask)."),
        Check("a mask of the wrong shape raises ValueError naming mask and its shape", _pm_bad_calls,
              must_mention=lambda call: ["mask", tuple(call.args[3].shape)], weight=0.5,
              hint="compare mask.shape with (num_heads, num_queries, num_keys) before using it, and put mask "
                   "and its shape in the message."),
        Check("random sizes and masks, with gradients (hidden)", _pm_hidden_calls, public=False, hint=_PM_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
