r"""ch06_ex6: Our masks in both of SDPA's forms.

This course's boolean masks are `True` where a query must **not** attend to a key.
`F.scaled_dot_product_attention` reads a boolean `attn_mask` the other way round, and it also
accepts a floating `attn_mask`, which it **adds** to the scaled scores before the softmax. Write
`sdpa_masks(mask, dtype)` that turns one of our masks into both of SDPA's forms.

- `mask`: a `torch.bool` tensor of shape `(..., num_queries, num_keys)` with at most two leading
  axes that broadcast over `(batch, num_heads)`: `(num_queries, num_keys)` shared by every
  sequence and head, `(num_heads, num_queries, num_keys)`, a padding mask
  `(batch, 1, 1, num_keys)`, and so on; `True` where the query must not attend to the key. Every
  query sees at least one key: the checks pass no query whose keys are all hidden.
- `dtype`: the floating dtype of the queries, keys and values (`torch.float16`, `torch.float32`
  or `torch.float64`).

Return the tuple `(bool_mask, additive_mask)`, both of the shape of `mask`, `bool_mask` of dtype
`torch.bool` and `additive_mask` of dtype `dtype`, such that for any finite `q`, `k`, `v` of dtype
`dtype` and shapes `(batch, num_heads, num_queries, head_dim)`, `(batch, num_heads, num_keys,
head_dim)` and `(batch, num_heads, num_keys, d_v)`, both
`F.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask)` and
`F.scaled_dot_product_attention(q, k, v, attn_mask=additive_mask)` return the course's masked
attention: the softmax over the keys of the scores divided by the square root of `head_dim`, in
which every hidden key gets a weight of exactly zero however large its score, applied to the
values. The checks run SDPA with your two masks on random `q`, `k`, `v`, some with scores in the
tens of thousands, and compare the outputs with the course's.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...checks.checking import is_stub, stub_reason
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint, shape_of
from ._common import _PUBLIC_SEED

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def sdpa_masks(mask, dtype):
    """(bool_mask, additive_mask) for F.scaled_dot_product_attention from a course mask (True = hidden)."""
    allowed = ~mask
    additive = torch.zeros(mask.shape, dtype=dtype).masked_fill(mask, float("-inf"))
    return allowed, additive


# Inputs of the public and hidden checks ---------------------------------------------------


def _some_key_visible(mask, g):
    """Make every query row of ``mask`` show at least one key (one drawn per row)."""
    rows = mask.reshape(-1, mask.shape[-1])
    pick = torch.randint(0, mask.shape[-1], (rows.shape[0],), generator=g)
    rows[torch.arange(rows.shape[0]), pick] = False
    return rows.reshape(mask.shape)


def _causal(nq, nk):
    return torch.ones(nq, nk, dtype=torch.bool).triu(1)


def _shared_calls(seed):
    # One (num_queries, num_keys) mask for every sequence and head, float32.
    if seed == _PUBLIC_SEED:
        return [Call(args=(_causal(5, 5), torch.float32))]
    g = gen(seed)
    nq, nk = randint(g, 2, 6), randint(g, 2, 7)
    mask = _causal(nq, nk) | (torch.rand(nq, nk, generator=g) < 0.3)
    return [Call(args=(_some_key_visible(mask, g), torch.float32))]


def _per_head_calls(seed):
    # One mask per head, in float16; then a causal mask, whose key 0 every query sees (for the scores at
    # float16's extremes of _compare_masks).
    g = gen(seed)
    h, nq, nk = (3, 4, 6) if seed == _PUBLIC_SEED else (randint(g, 2, 4), randint(g, 2, 5), randint(g, 2, 7))
    mask = torch.rand(h, nq, nk, generator=g) < 0.5
    n = 4 if seed == _PUBLIC_SEED else randint(g, 3, 6)
    return [Call(args=(_some_key_visible(mask, g), torch.float16)), Call(args=(_causal(n, n), torch.float16))]


def _padding_calls(seed):
    # A padding mask (batch, 1, 1, num_keys): the last keys of each sequence are padding; float64.
    g = gen(seed)
    lengths = [5, 3] if seed == _PUBLIC_SEED else [randint(g, 1, 6) for _ in range(randint(g, 2, 3))]
    nk = max(lengths) + (0 if seed == _PUBLIC_SEED else randint(g, 0, 2))
    mask = torch.arange(nk)[None, :] >= torch.tensor(lengths)[:, None]
    return [Call(args=(mask[:, None, None, :], torch.float64))]


def _hidden_calls(seed):
    g = gen(seed)
    lead = [(), (randint(g, 2, 3),), (randint(g, 1, 3), randint(g, 1, 3))][randint(g, 0, 2)]
    nq, nk = randint(g, 1, 6), randint(g, 1, 7)
    mask = torch.rand(*lead, nq, nk, generator=g) < 0.5
    dtype = (torch.float16, torch.float32, torch.float64)[randint(g, 0, 2)]
    calls = [Call(args=(_some_key_visible(mask, g), dtype))]
    if dtype == torch.float16:
        calls.append(Call(args=(_causal(randint(g, 2, 6), randint(g, 6, 8)), dtype)))
    return calls


def _tolerance(dtype):
    return 2e-3 if dtype == torch.float16 else 1e-5 if dtype == torch.float32 else 1e-10


def _qkv(mask, dtype, index, scale):
    """q, k, v drawn for one call: (batch, num_heads) taken from mask's leading axes (2 where it broadcasts)."""
    lead = (1,) * (4 - mask.dim()) + tuple(mask.shape[:-2])
    batch, heads = (size if size > 1 else 2 for size in lead[:2])
    nq, nk = mask.shape[-2], mask.shape[-1]
    g = gen(8_000 + 97 * index + 13 * nq + nk)
    q = torch.randn(batch, heads, nq, 4, generator=g, dtype=torch.float64) * scale
    k = torch.randn(batch, heads, nk, 4, generator=g, dtype=torch.float64)
    v = torch.randn(batch, heads, nk, 3, generator=g, dtype=torch.float64)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _extremes(mask, dtype, index, hidden=40000.0, seen=-30000.0):
    """q, k, v of head size 1 whose scores span float16's range: 40,000 for every key some query may not
    see, -30,000 for the keys every query sees, so a hidden key outscores a visible one by more than 65,504
    (float16's largest number): a finite fill, even the dtype's smallest, lets that key through. None when
    no key is seen by every query or nothing is hidden."""
    always = ~mask.reshape(-1, mask.shape[-1]).any(dim=0)
    if not bool(always.any()) or not bool(mask.any()):
        return None
    lead = (1,) * (4 - mask.dim()) + tuple(mask.shape[:-2])
    batch, heads = (size if size > 1 else 2 for size in lead[:2])
    nq, nk = mask.shape[-2], mask.shape[-1]
    q = torch.ones(batch, heads, nq, 1, dtype=dtype)
    k = torch.where(always, seen, hidden).to(dtype).reshape(1, 1, nk, 1).expand(batch, heads, nk, 1)
    v = torch.randn(batch, heads, nk, 3, generator=gen(9_000 + 31 * index + nk), dtype=torch.float64).to(dtype)
    return q, k.contiguous(), v


def _run_sdpa(q, k, v, attn_mask):
    try:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask), None
    except RuntimeError as error:
        return None, str(error).splitlines()[0]


def _compare_masks(got, want, calls):
    """Both returned masks must have want's dtype and shape and make SDPA give want's outputs."""
    for i, (g, w, c) in enumerate(zip(got, want, calls)):
        where = "" if len(calls) == 1 else f"call {i + 1} of {len(calls)}: "
        if w.get("status") != "ok":
            if g.get("status") == "raised" and g.get("error_type") == w.get("error_type") \
                    and g.get("message") == w.get("message"):
                continue
            return f"{where}expected {w.get('error_type')}"
        if is_stub(g):
            return where + stub_reason(f"NotImplementedError: {g.get('message')}")
        if g.get("status") != "ok":
            return f"{where}raised {g.get('error_type')}: {g.get('message')}"
        gv, wv = g["value"], w["value"]
        items = gv.get("__seq__") if isinstance(gv, dict) else None
        if items is None or len(items) != 2:
            return f"{where}must return the tuple (bool_mask, additive_mask), got {gv!r:.80}"
        mask, dtype = c.args
        for name, gt, wt in zip(("bool_mask", "additive_mask"), items, wv["__seq__"]):
            if not isinstance(gt, torch.Tensor):
                return f"{where}{name} must be a tensor, got {gt!r:.80}"
            if gt.dtype != wt.dtype:
                return (f"{where}{name} must have dtype {wt.dtype}, got {gt.dtype} "
                        f"(mask {shape_of(mask)}, dtype {dtype})")
            if tuple(gt.shape) != tuple(wt.shape):
                return f"{where}{name} must have the shape of mask, {shape_of(wt)}, got {shape_of(gt)}"
            if torch.equal(gt, wt):
                continue
            scales = (1.0, "large", "extremes") if dtype == torch.float16 else (1.0, 3e4)
            for scale in scales:
                drawn = (_extremes(mask, dtype, i) if scale == "extremes" else
                         _extremes(mask, dtype, i, 20000.0, -20000.0) if scale == "large" else
                         _qkv(mask, dtype, i, scale))
                if drawn is None:
                    continue
                q, k, v = drawn
                out_w, _ = _run_sdpa(q, k, v, wt)
                out_g, error = _run_sdpa(q, k, v, gt)
                scores = "" if scale == 1.0 else ", scores in the tens of thousands" + (
                    {"extremes": " (40,000 for hidden keys, -30,000 for the keys every query sees)",
                     "large": " (20,000 for hidden keys, -20,000 for the keys every query sees)"}.get(scale, ""))
                case = (f"F.scaled_dot_product_attention(q, k, v, attn_mask={name}) with q {shape_of(q)}, "
                        f"k {shape_of(k)}, v {shape_of(v)} of dtype {dtype}{scores}, mask {shape_of(mask)}")
                if out_g is None:
                    return f"{where}{case} raised RuntimeError: {error}"
                if out_w is None:
                    return f"{where}{case} should raise RuntimeError"
                bad = torch.isnan(out_g) & ~torch.isnan(out_w)
                if bool(bad.any()):
                    return f"{where}{case} gives NaN in {int(bad.sum())} entries"
                tol = _tolerance(dtype)
                if not torch.allclose(out_g, out_w, rtol=tol, atol=tol, equal_nan=True):
                    gap = (out_g.double() - out_w.double()).abs().nan_to_num(nan=0.0).max().item()
                    return f"{where}{case} differs from the course's masked attention by up to {gap:.3g}"
    return None


_HINT = ("this check runs F.scaled_dot_product_attention on random q, k, v with each of your two masks and "
         "compares it with the course's masked attention; SDPA's boolean attn_mask and a floating attn_mask "
         "added to the scaled scores are described in the PyTorch documentation and in this chapter's "
         "warning box. Both masks keep the shape of mask; additive_mask has the dtype given.")


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("boolean mask passed as it is",
               "your bool_mask is the course's mask unchanged: SDPA's boolean attn_mask is True where a query "
               "MAY attend, so every query saw exactly the keys it must not see (the silent bug of this "
               "chapter's warning box).")
def _sm_not_inverted(mask, dtype):
    return mask.clone(), torch.zeros(mask.shape, dtype=dtype).masked_fill(mask, float("-inf"))


@mistakes.keep("large finite negative (-1e4) for hidden keys",
               "your additive_mask adds a finite negative number to hidden keys: once scores are as large as "
               "that number, a hidden key gets weight again; its weight must be exactly zero whatever the "
               "scores.")
def _sm_minus_1e4(mask, dtype):
    return ~mask, torch.zeros(mask.shape, dtype=dtype).masked_fill(mask, -1e4)


@mistakes.keep("the dtype's smallest number for hidden keys",
               "your additive_mask adds the dtype's smallest number (torch.finfo(dtype).min) to hidden keys: in "
               "float16 that is -65,504, and a hidden key whose score is more than 65,504 above a visible one's "
               "still wins; its weight must be exactly zero whatever the scores.")
def _sm_finfo_min(mask, dtype):
    return ~mask, torch.zeros(mask.shape, dtype=dtype).masked_fill(mask, torch.finfo(dtype).min)


@mistakes.keep("the boolean mask converted to 1/0",
               "your additive_mask is the mask converted to numbers (1 where hidden, 0 elsewhere); SDPA adds it "
               "to the scores, so adding 1 only shifts a score a little and hides nothing.")
def _sm_one_zero(mask, dtype):
    return ~mask, mask.to(dtype)


@mistakes.keep("additive mask always float32",
               "your additive_mask is float32 whatever dtype is; it must have the dtype given (float16 and "
               "float64 queries too).")
def _sm_always_float32(mask, dtype):
    return ~mask, torch.zeros(mask.shape).masked_fill(mask, float("-inf"))


@mistakes.keep("additive mask inverted",
               "your additive_mask blocks the keys a query may see and lets through the hidden ones: our mask "
               "is True where a query must NOT attend, and that is where the large negative goes.")
def _sm_additive_inverted(mask, dtype):
    return ~mask, torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, float("-inf"))


@mistakes.keep("mask times -inf, NaN left in",
               "your additive_mask is the mask times -inf: 0 * -inf is NaN, so every visible key's entry is NaN "
               "and SDPA's output turns NaN; visible keys need an entry of exactly 0.")
def _sm_times_minus_inf(mask, dtype):
    return ~mask, mask.to(dtype) * float("-inf")


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("torch.where and logical_not", "torch.where between two scalar tensors, torch.logical_not")
def _sm_alt_where(mask, dtype):
    minus_inf = torch.tensor(float("-inf"), dtype=dtype)
    zero = torch.tensor(0.0, dtype=dtype)
    return torch.logical_not(mask), torch.where(mask, minus_inf, zero)


@alternatives.keep("arithmetic with the 0 * inf NaN removed",
                   "mask.to(dtype) * -inf, then the NaN of 0 * -inf set to 0; bool by comparison")
def _sm_alt_arithmetic(mask, dtype):
    product = mask.to(dtype) * float("-inf")
    additive = torch.nan_to_num(product, nan=0.0, neginf=float("-inf"))
    return mask == False, additive  # noqa: E712  (an elementwise comparison, not a truth test)


@alternatives.keep("log of the visible mask", "log(1) = 0 for visible keys and log(0) = -inf for hidden ones")
def _sm_alt_log(mask, dtype):
    visible = mask.logical_not()
    return visible, torch.log(visible.to(dtype))


@alternatives.keep("zeros_like and an index", "a tensor of zeros, -inf written through boolean indexing")
def _sm_alt_index(mask, dtype):
    additive = torch.zeros_like(mask, dtype=dtype)
    additive[mask] = -math.inf
    return mask ^ True, additive


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch06_ex6", title="Our masks in both of SDPA's forms", name="sdpa_masks",
    reference=sdpa_masks, points=2,
    checks=[
        Check("a causal (5, 5) mask shared by every sequence and head, float32", _shared_calls,
              compare=_compare_masks, hint=_HINT),
        Check("one (4, 6) mask for each of 3 heads, float16", _per_head_calls, compare=_compare_masks,
              hint=_HINT),
        Check("a padding mask (2, 1, 1, 5) for sequences of 5 and 3 tokens, float64", _padding_calls,
              compare=_compare_masks, hint=_HINT),
        Check("random mask shapes and dtypes (hidden)", _hidden_calls, public=False, compare=_compare_masks,
              hint=_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
