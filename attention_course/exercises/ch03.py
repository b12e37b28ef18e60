"""Chapter 3 exercises: attention scoring functions.

ch03_ex1  masked_softmax(scores, valid_lens)
ch03_ex2  scaled_dot_product_attention(queries, keys, values, valid_lens=None) -> (output, weights)
ch03_ex3  AdditiveAttention(query_size, key_size, num_hiddens)  (an nn.Module)
ch03_ex4  attention_shapes(queries_shape, keys_shape, values_shape, num_hiddens) -> dict of shapes
ch03_ex5  BilinearAttention(query_size, key_size)  (an nn.Module): the "general" score q^T W k

The references of ex1-ex3 are the finished building blocks of
:mod:`attention_course.functional`. A row whose valid length is 0 gets all-zero
weights (so a zero output) and a zero gradient; the checks test both, forward and
backward (``grads_of``). ``masked_softmax`` must not modify ``scores`` in place: the
gradient checks pass ``scores`` as a leaf that requires grad, and autograd refuses
an in-place change of such a tensor.

Kept mistakes include the known bugs of other courses: d2l's masked softmax fills
padding with a finite -1e6 (a row of valid length 0 comes out uniform; d2l PR #2423),
and an additive -inf mask zeroed afterwards (right forward, NaN gradients).
Kept alternatives include d2l's own masked softmax and DotProductAttention and
AdditiveAttention (LazyLinear layers) adapted to this contract, einsum, loops,
float64 inside and torch's fused ``scaled_dot_product_attention``.
"""
from __future__ import annotations

import math
from collections import namedtuple

import torch
from torch import nn
from torch.nn import functional as F

from .. import functional as F_att
from ..registry import Alternative, Call, Check, Exercise, Mistake, register


def _shape(t) -> tuple:
    return tuple(t.shape)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randint(g, low, high) -> int:
    return int(torch.randint(low, high + 1, (1,), generator=g))


# =========================================================== ch03_ex1 masked_softmax

def _mask(scores, valid_lens):
    return F_att.valid_mask(valid_lens, scores.shape[1], scores.shape[2])


def _validate_lens(scores, valid_lens):
    # The kept mistakes and alternatives validate exactly like the reference.
    batch, num_queries, num_keys = scores.shape
    F_att._check_valid_lens(valid_lens, batch, num_queries, num_keys, "scores", tuple(scores.shape))


def _zeros_like_where(mask, weights):
    return torch.where(mask, weights, torch.zeros((), dtype=weights.dtype))


# ---- kept mistakes

def _ms_finite_mask(scores, valid_lens):
    # d2l's masked softmax (and PR #2423's report): a finite -1e6 fill.
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    _validate_lens(scores, valid_lens)
    return torch.softmax(scores.masked_fill(~_mask(scores, valid_lens), -1e6), dim=-1)


def _ms_mask_after(scores, valid_lens):
    weights = torch.softmax(scores, dim=-1)
    if valid_lens is None:
        return weights
    _validate_lens(scores, valid_lens)
    return weights.masked_fill(~_mask(scores, valid_lens), 0.0)


def _ms_queries_axis(scores, valid_lens):
    if valid_lens is None:
        return torch.softmax(scores, dim=1)
    _validate_lens(scores, valid_lens)
    mask = _mask(scores, valid_lens)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=1)
    return _zeros_like_where(mask, weights)


def _ms_off_by_one(scores, valid_lens):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    _validate_lens(scores, valid_lens)
    mask = F_att.valid_mask(valid_lens + 1, scores.shape[1], scores.shape[2])
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return _zeros_like_where(mask, weights)


def _ms_additive_nan_grad(scores, valid_lens):
    # Right forward pass; the NaN of an all -inf row flows back through the addition.
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    _validate_lens(scores, valid_lens)
    mask = _mask(scores, valid_lens)
    additive = torch.zeros(mask.shape, dtype=scores.dtype).masked_fill(~mask, float("-inf"))
    return torch.softmax(scores + additive, dim=-1).masked_fill(~mask, 0.0)


def _ms_in_place(scores, valid_lens):
    # Right values, but the caller's scores are overwritten (d2l's sequence_mask does this).
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    _validate_lens(scores, valid_lens)
    mask = _mask(scores, valid_lens)
    scores.masked_fill_(~mask, float("-inf"))
    return _zeros_like_where(mask, torch.softmax(scores, dim=-1))


# ---- kept alternatives

def _ms_alt_d2l(scores, valid_lens):
    """d2l's masked_softmax (flatten to rows, repeat_interleave the lengths, a sequence
    mask), adapted: -inf on a copy instead of -1e6 in place, empty rows set to zero."""
    if valid_lens is None:
        return nn.functional.softmax(scores, dim=-1)
    shape = scores.shape
    if tuple(valid_lens.shape) not in ((shape[0],), (shape[0], shape[1])):
        raise ValueError(f"valid_lens has shape {valid_lens.shape} but scores has shape {scores.shape}")
    if valid_lens.dim() == 1:
        lens = torch.repeat_interleave(valid_lens, shape[1])
    else:
        lens = valid_lens.reshape(-1)
    rows = scores.reshape(-1, shape[-1])
    keep = torch.arange(rows.size(1), dtype=torch.float32)[None, :] < lens[:, None]
    rows = rows.masked_fill(~keep, float("-inf"))
    probs = nn.functional.softmax(rows, dim=-1)
    probs = probs.masked_fill(~keep, 0.0)   # an empty row: NaN only at masked places
    return probs.reshape(shape)


def _ms_alt_float64_exp(scores, valid_lens):
    """Exponentials by hand in float64, a multiplicative mask, a guarded division."""
    s = scores.double()
    batch, num_queries, num_keys = s.shape
    if valid_lens is None:
        keep = torch.ones(s.shape, dtype=torch.bool)
    else:
        if valid_lens.shape not in (torch.Size([batch]), torch.Size([batch, num_queries])):
            raise ValueError(f"valid_lens {list(valid_lens.shape)} does not fit scores "
                             f"{list(s.shape)}")
        lens = valid_lens.view(batch, -1, 1)
        keep = torch.arange(num_keys).view(1, 1, -1) < lens
        keep = keep.expand(batch, num_queries, num_keys)
    shifted = s.masked_fill(~keep, float("-inf"))
    top = shifted.amax(dim=-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    e = torch.where(keep, torch.exp(shifted - top), torch.zeros_like(s))
    total = e.sum(dim=-1, keepdim=True)
    return (e / total.clamp_min(1e-300)).to(scores.dtype)


def _ms_alt_loops(scores, valid_lens):
    """One row at a time: a softmax over the first n keys, zeros after them."""
    batch, num_queries, num_keys = scores.shape
    if valid_lens is not None and valid_lens.dim() not in (1, 2):
        raise ValueError(f"valid_lens of shape {tuple(valid_lens.shape)} cannot mask scores "
                         f"of shape {tuple(scores.shape)}")
    if valid_lens is not None and (valid_lens.shape[0] != batch or
                                   (valid_lens.dim() == 2 and valid_lens.shape[1] != num_queries)):
        raise ValueError(f"valid_lens of shape {tuple(valid_lens.shape)} cannot mask scores "
                         f"of shape {tuple(scores.shape)}")
    out = []
    for b in range(batch):
        rows = []
        for i in range(num_queries):
            if valid_lens is None:
                n = num_keys
            else:
                n = int(valid_lens[b] if valid_lens.dim() == 1 else valid_lens[b, i])
            head = torch.softmax(scores[b, i, :n], dim=0)
            rows.append(torch.cat([head, scores.new_zeros(num_keys - n)]))
        out.append(torch.stack(rows))
    return torch.stack(out)


def _ms_alt_clone_assign(scores, valid_lens):
    """Index assignment into a clone (never into the caller's tensor), then where()."""
    if valid_lens is None:
        return scores.softmax(-1)
    b, q, k = scores.shape
    if valid_lens.shape != (b,) and valid_lens.shape != (b, q):
        raise ValueError(f"valid_lens: got shape {tuple(valid_lens.shape)}; scores: "
                         f"{tuple(scores.shape)}")
    lens = valid_lens[:, None] if valid_lens.dim() == 1 else valid_lens
    mask = torch.arange(k)[None, None, :] < lens[:, :, None]
    mask = mask.expand(b, q, k)
    filled = scores.clone()
    filled[~mask] = float("-inf")
    return torch.where(mask, filled.softmax(-1), torch.zeros_like(scores))


# ---- checks

def _ms_one_d(seed):
    g = _gen(seed)
    scores = torch.randn(2, 3, 5, generator=g)
    return [Call(args=(scores, torch.tensor([2, 5]))),
            Call(args=(scores, None))]


def _ms_two_d(seed):
    g = _gen(seed)
    scores = torch.randn(2, 3, 4, generator=g)
    return [Call(args=(scores, torch.tensor([[1, 2, 4], [3, 3, 2]])))]


def _ms_zero(seed):
    g = _gen(seed)
    scores = torch.randn(3, 2, 4, generator=g)
    return [Call(args=(scores, torch.tensor([0, 2, 4])), grads_of=(0,)),
            Call(args=(scores, torch.tensor([[0, 1], [4, 0], [2, 3]])), grads_of=(0,))]


def _ms_bad_shape(seed):
    g = _gen(seed)
    scores = torch.randn(2, 3, 4, generator=g)
    return [Call(args=(scores, torch.tensor([1, 2, 3]))),
            Call(args=(scores, torch.tensor([[1, 2, 3, 4], [1, 1, 1, 1]])))]


def _ms_words(call):
    scores, valid_lens = call.args
    return ["valid_lens", "scores", _shape(valid_lens), _shape(scores)]


def _ms_random(seed):
    g = _gen(seed)
    batch, num_queries, num_keys = _randint(g, 3, 6), _randint(g, 2, 5), _randint(g, 3, 8)
    scores = 3 * torch.randn(batch, num_queries, num_keys, generator=g)
    lens_1d = torch.randint(0, num_keys + 1, (batch,), generator=g)
    lens_1d[0] = 0  # always at least one empty sequence
    lens_2d = torch.randint(0, num_keys + 1, (batch, num_queries), generator=g)
    lens_2d[-1, 0] = 0
    return [Call(args=(scores, lens_1d), grads_of=(0,)), Call(args=(scores, lens_2d), grads_of=(0,))]


def _ms_float64(seed):
    g = _gen(seed)
    scores = torch.randn(2, 4, 6, generator=g, dtype=torch.float64)
    lens = torch.randint(0, 7, (2, 4), generator=g)
    lens[0, 1] = 0
    return [Call(args=(scores, lens)), Call(args=(scores, lens), grads_of=(0,))]


register(Exercise(
    label="ch03_ex1", title="Masked softmax", name="masked_softmax",
    reference=F_att.masked_softmax, points=2,
    checks=[
        Check("1-D valid_lens (one length per sequence), and valid_lens=None", _ms_one_d, seed=0,
              hint="this check compares the weights for one valid length per sequence and for valid_lens=None: "
                   "row (b, i) sums to 1 over the first valid_lens[b] keys and is 0 after them; with None, "
                   "every key counts."),
        Check("2-D valid_lens (one length per query)", _ms_two_d, seed=1,
              hint="this check compares the weights for a 2-D valid_lens of shape (batch, num_queries): row "
                   "(b, i) sums to 1 over the first valid_lens[b, i] keys and is 0 after them."),
        Check("a valid length of 0: an all-zero row and finite gradients (scores require grad)",
              _ms_zero, seed=2, weight=1.5,
              hint="this check has rows with valid length 0 and also takes the gradient of the weights "
                   "with respect to scores, which require grad here: such a row is all zeros, every "
                   "gradient is finite, and the caller's scores stay as they were; the reason above says "
                   "what differs."),
        Check("valid_lens of the wrong shape raises ValueError naming valid_lens and scores and both shapes",
              _ms_bad_shape, seed=3, must_mention=_ms_words, weight=0.5,
              hint="accept valid_lens of shape (batch,) or (batch, num_queries) only; otherwise raise a "
                   "ValueError whose message contains both names and both shapes."),
        Check("random shapes with empty sequences, forward and backward (hidden)", _ms_random, public=False,
              hint="this check compares the weights and their gradients with respect to scores for random "
                   "shapes and lengths between 0 and num_keys, in both 1-D and 2-D form."),
        Check("float64 scores keep their dtype (hidden)", _ms_float64, public=False,
              hint="this check passes float64 scores: the weights (their zeros included) and the gradient "
                   "are float64 too."),
    ],
    mistakes=[
        Mistake("finite -1e6 mask",
                "a row whose valid length is 0 came out uniform over the padding: a large finite "
                "negative fill (like -1e6, as in d2l's masked_softmax) gives every padded key the same "
                "weight when no key is valid. Such a row must be all zeros.",
                _ms_finite_mask),
        Mistake("mask applied after the softmax",
                "the padded keys took part in the softmax: zeroing them afterwards leaves rows that "
                "no longer sum to 1. Mask the scores before normalising.",
                _ms_mask_after),
        Mistake("softmax over the queries axis",
                "your weights are normalised over the queries axis (dim 1); each query's weights must "
                "sum to 1 over the keys, the last axis.",
                _ms_queries_axis),
        Mistake("one key too many",
                "off by one: a valid length of n keeps key positions 0 to n-1; position n is already padding.",
                _ms_off_by_one),
        Mistake("NaN-gradient additive mask",
                "the weights are right, but the gradient of a row with valid length 0 is NaN: an additive "
                "-inf mask makes that row NaN inside the softmax, and zeroing the output afterwards does not "
                "stop the NaN from flowing back through the addition into scores. Choose an operation whose "
                "backward pass gives masked positions a zero gradient.",
                _ms_additive_nan_grad),
        Mistake("scores modified in place",
                "you overwrote the caller's scores in place (an in-place fill or assignment); the contract "
                "forbids it, and autograd refuses it when scores require grad. Fill a new tensor instead.",
                _ms_in_place),
    ],
    alternatives=[
        Alternative("d2l's masked_softmax, adapted", "rows flattened, repeat_interleave'd lengths, a "
                    "sequence mask with -inf on a copy, empty rows zeroed", _ms_alt_d2l),
        Alternative("float64 exponentials by hand", "max-shifted exp in float64, multiplicative mask, "
                    "guarded division, cast back", _ms_alt_float64_exp),
        Alternative("Python loops over rows", "softmax of the first n scores of each row, zeros padded",
                    _ms_alt_loops),
        Alternative("index assignment into a clone", "scores cloned, masked entries set to -inf, "
                    "torch.where after the softmax", _ms_alt_clone_assign),
    ],
))


# ============================================= ch03_ex2 scaled_dot_product_attention

def _sdpa_with(scale_of, use_lens=True, softmax=F_att.masked_softmax):
    def attention(queries, keys, values, valid_lens=None):
        scores = queries @ keys.transpose(1, 2) / scale_of(queries.shape[-1], values.shape[-1])
        weights = softmax(scores, valid_lens if use_lens else None)
        return weights @ values, weights
    return attention


_sdpa_by_d = _sdpa_with(lambda d, d_v: d)
_sdpa_unscaled = _sdpa_with(lambda d, d_v: 1.0)
_sdpa_no_mask = _sdpa_with(lambda d, d_v: math.sqrt(d), use_lens=False)
_sdpa_by_dv = _sdpa_with(lambda d, d_v: math.sqrt(d_v))
_sdpa_d2l_mask = _sdpa_with(lambda d, d_v: math.sqrt(d), softmax=_ms_finite_mask)


def _sdpa_swapped(queries, keys, values, valid_lens=None):
    # Right values, returned in the wrong order: (weights, output).
    output, weights = F_att.scaled_dot_product_attention(queries, keys, values, valid_lens)
    return weights, output


def _sdpa_alt_d2l(queries, keys, values, valid_lens=None):
    """d2l's DotProductAttention.forward as a function (no dropout), returning the weights too."""
    d = queries.shape[-1]
    scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
    attention_weights = F_att.masked_softmax(scores, valid_lens)
    return torch.bmm(attention_weights, values), attention_weights


def _sdpa_alt_fused(queries, keys, values, valid_lens=None):
    """torch's fused scaled_dot_product_attention for the output (a boolean mask, True = may
    attend); the weights, which it does not return, from the masked softmax."""
    batch, num_queries, _ = queries.shape
    num_keys = keys.shape[1]
    if valid_lens is None:
        allowed = None
    else:
        lens = valid_lens.reshape(batch, -1, 1)
        allowed = (torch.arange(num_keys) < lens).expand(batch, num_queries, num_keys)
    output = F.scaled_dot_product_attention(queries, keys, values, attn_mask=allowed)
    scores = queries @ keys.mT * queries.shape[-1] ** -0.5
    return output, F_att.masked_softmax(scores, valid_lens)


def _sdpa_alt_loops(queries, keys, values, valid_lens=None):
    """One sequence at a time, 2-D matrix products."""
    outputs, weights = [], []
    scale = 1 / math.sqrt(keys.shape[2])
    for b in range(queries.shape[0]):
        scores = (queries[b] @ keys[b].T * scale)[None]
        lens = None if valid_lens is None else valid_lens[b:b + 1]
        w = F_att.masked_softmax(scores, lens)[0]
        weights.append(w)
        outputs.append(w @ values[b])
    return torch.stack(outputs), torch.stack(weights)


def _sdpa_alt_float64(queries, keys, values, valid_lens=None):
    """Everything in float64, cast back to the inputs' dtype at the end."""
    q, k, v = queries.double(), keys.double(), values.double()
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.size(-1))
    w = F_att.masked_softmax(scores, valid_lens)
    return torch.matmul(w, v).to(queries.dtype), w.to(queries.dtype)


def _qkv(g, batch, num_queries, num_keys, d, d_v, dtype=torch.float32):
    return (torch.randn(batch, num_queries, d, generator=g, dtype=dtype),
            torch.randn(batch, num_keys, d, generator=g, dtype=dtype),
            torch.randn(batch, num_keys, d_v, generator=g, dtype=dtype))


def _sdpa_plain(seed):
    return [Call(args=_qkv(_gen(seed), 2, 3, 5, 4, 6))]


def _sdpa_one_d(seed):
    return [Call(args=_qkv(_gen(seed), 2, 3, 5, 4, 6) + (torch.tensor([3, 1]),))]


def _sdpa_zero(seed):
    q, k, v = _qkv(_gen(seed), 2, 3, 4, 8, 2)
    return [Call(args=(q, k, v), kwargs={"valid_lens": torch.tensor([[0, 2, 4], [1, 0, 3]])})]


def _sdpa_random(seed):
    g = _gen(seed)
    batch, num_queries, num_keys = _randint(g, 2, 5), _randint(g, 1, 6), _randint(g, 2, 9)
    d, d_v = _randint(g, 16, 64), _randint(g, 1, 7)
    q, k, v = _qkv(g, batch, num_queries, num_keys, d, d_v)
    lens = torch.randint(0, num_keys + 1, (batch,), generator=g)
    lens[0] = max(1, int(lens[0]))
    return [Call(args=(q, k, v)), Call(args=(q, k, v, lens))]


def _sdpa_grad(seed):
    g = _gen(seed)
    q, k, v = _qkv(g, 2, 4, 6, 8, 3, dtype=torch.float64)
    lens = torch.tensor([[2, 6, 1, 4], [3, 3, 5, 6]])
    return [Call(args=(q, k, v, lens), grads_of=(0, 1, 2))]


register(Exercise(
    label="ch03_ex2", title="Scaled dot-product attention",
    name="scaled_dot_product_attention", reference=F_att.scaled_dot_product_attention, points=2,
    checks=[
        Check("no mask: queries (2, 3, 4), keys (2, 5, 4), values (2, 5, 6)", _sdpa_plain, seed=0,
              hint="this check compares the tuple (output, weights) without a mask, with d = 4 and d_v = 6: "
                   "output has shape (batch, num_queries, d_v), weights (batch, num_queries, num_keys), each "
                   "row of weights sums to 1; the reason above names the first item that differs."),
        Check("1-D valid_lens", _sdpa_one_d, seed=1,
              hint="this check adds one valid length per sequence: each query's weights sum to 1 over the "
                   "first valid_lens[b] keys and are 0 after them; the reason above names the first item of "
                   "(output, weights) that differs."),
        Check("2-D valid_lens with a zero length: that query's output is the zero vector", _sdpa_zero,
              seed=2, hint="this check gives each query its own valid length, one of them 0: a query with "
                           "no valid key gets all-zero weights and a zero output; the reason above names the "
                           "first item of (output, weights) that differs."),
        Check("random shapes with d up to 64 (hidden)", _sdpa_random, public=False,
              hint="this check compares output and weights for random sizes with d up to 64, with and "
                   "without valid_lens."),
        Check("gradients reach queries, keys and values (hidden)", _sdpa_grad, public=False,
              hint="this check compares the gradients of the output with respect to queries, keys and "
                   "values (float64, 2-D valid_lens) with the reference's."),
    ],
    mistakes=[
        Mistake("scaled by d", "the scores are divided by d; the variance argument gives sqrt(d).", _sdpa_by_d),
        Mistake("no scaling", "the scores are not scaled: divide the dot products by sqrt(d).", _sdpa_unscaled),
        Mistake("valid_lens ignored", "valid_lens is ignored: padded keys still get weight.", _sdpa_no_mask),
        Mistake("scaled by sqrt(d_v)",
                "the scores are divided by the square root of the values' size d_v; the scale comes "
                "from the size d that the dot product sums over (queries and keys).", _sdpa_by_dv),
        Mistake("d2l's -1e6 masked softmax",
                "a query with no valid key got uniform weights over the padding (a masked softmax that "
                "fills with a finite -1e6, like d2l's); such a query must get zero weights and a zero "
                "output, as attn.masked_softmax gives.", _sdpa_d2l_mask),
        Mistake("output and weights swapped",
                "your values are right but come back in the wrong order: you returned (weights, output); "
                "the contract asks for the tuple (output, weights).", _sdpa_swapped),
    ],
    alternatives=[
        Alternative("d2l's DotProductAttention", "torch.bmm with keys.transpose(1, 2), math.sqrt(d)",
                    _sdpa_alt_d2l),
        Alternative("torch's fused SDPA", "F.scaled_dot_product_attention with a boolean mask for the "
                    "output, the weights from the masked softmax", _sdpa_alt_fused),
        Alternative("loops over the batch", "one sequence at a time, 2-D products, torch.stack",
                    _sdpa_alt_loops),
        Alternative("float64 inside", "computed in float64, cast back", _sdpa_alt_float64),
    ],
))


# ===================================================== ch03_ex3 AdditiveAttention

class _AddNoTanh(F_att.AdditiveAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        features = self.W_q(queries).unsqueeze(2) + self.W_k(keys).unsqueeze(1)
        weights = F_att.masked_softmax(self.w_v(features).squeeze(-1), valid_lens)
        return weights @ values, weights


class _AddTanhEachSide(F_att.AdditiveAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        features = torch.tanh(self.W_q(queries)).unsqueeze(2) + torch.tanh(self.W_k(keys)).unsqueeze(1)
        weights = F_att.masked_softmax(self.w_v(features).squeeze(-1), valid_lens)
        return weights @ values, weights


class _AddQueriesAxis(F_att.AdditiveAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        features = torch.tanh(self.W_q(queries).unsqueeze(2) + self.W_k(keys).unsqueeze(1))
        scores = self.w_v(features).squeeze(-1)
        weights = torch.softmax(scores, dim=1)
        if valid_lens is not None:
            weights = _ms_queries_axis(scores, valid_lens)
        return weights @ values, weights


class _AddNoMask(F_att.AdditiveAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        return super().forward(queries, keys, values, None)


class _AddD2lMask(F_att.AdditiveAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        features = torch.tanh(self.W_q(queries).unsqueeze(2) + self.W_k(keys).unsqueeze(1))
        weights = _ms_finite_mask(self.w_v(features).squeeze(-1), valid_lens)
        return weights @ values, weights


class _AddBiases(F_att.AdditiveAttention):
    def __init__(self, query_size, key_size, num_hiddens):
        super().__init__(query_size, key_size, num_hiddens)
        self.W_q = nn.Linear(query_size, num_hiddens)
        self.W_k = nn.Linear(key_size, num_hiddens)
        self.w_v = nn.Linear(num_hiddens, 1)


class _AddAltD2l(nn.Module):
    """d2l's AdditiveAttention: LazyLinear layers (sizes inferred at the first call)."""

    def __init__(self, query_size, key_size, num_hiddens):
        super().__init__()
        self.W_k = nn.LazyLinear(num_hiddens, bias=False)
        self.W_q = nn.LazyLinear(num_hiddens, bias=False)
        self.w_v = nn.LazyLinear(1, bias=False)

    def forward(self, queries, keys, values, valid_lens=None):
        queries, keys = self.W_q(queries), self.W_k(keys)
        features = queries.unsqueeze(2) + keys.unsqueeze(1)
        features = torch.tanh(features)
        scores = self.w_v(features).squeeze(-1)
        self.attention_weights = F_att.masked_softmax(scores, valid_lens)
        return torch.bmm(self.attention_weights, values), self.attention_weights


class _AddAltLoops(nn.Module):
    """One query at a time: its hidden vectors against all keys."""

    def __init__(self, query_size, key_size, num_hiddens):
        super().__init__()
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)

    def forward(self, queries, keys, values, valid_lens=None):
        projected_keys = self.W_k(keys)                       # (batch, num_keys, h)
        columns = []
        for i in range(queries.shape[1]):
            hidden = torch.tanh(self.W_q(queries[:, i:i + 1]) + projected_keys)
            columns.append(self.w_v(hidden)[..., 0])          # (batch, num_keys)
        scores = torch.stack(columns, dim=1)
        weights = F_att.masked_softmax(scores, valid_lens)
        return weights @ values, weights


class _AddAltEinsumFloat64(nn.Module):
    """The weight matrices used directly (einsum), computed in float64, cast back."""

    def __init__(self, query_size, key_size, num_hiddens):
        super().__init__()
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)

    def forward(self, queries, keys, values, valid_lens=None):
        wq, wk, wv = (m.weight.double() for m in (self.W_q, self.W_k, self.w_v))
        q_side = torch.einsum("bqi,hi->bqh", queries.double(), wq)
        k_side = torch.einsum("bkj,hj->bkh", keys.double(), wk)
        pairs = torch.tanh(q_side[:, :, None, :] + k_side[:, None, :, :])
        scores = torch.einsum("bqkh,h->bqk", pairs, wv[0]).to(queries.dtype)
        weights = F_att.masked_softmax(scores, valid_lens)
        return torch.einsum("bqk,bkv->bqv", weights, values), weights


class _AddAltExpand(nn.Module):
    """Queries and keys expanded to every pair first, then projected pair by pair."""

    def __init__(self, query_size, key_size, num_hiddens):
        super().__init__()
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)

    def forward(self, queries, keys, values, valid_lens=None):
        b, nq, _ = queries.shape
        nk = keys.shape[1]
        q_pairs = queries.unsqueeze(2).expand(b, nq, nk, queries.shape[-1])
        k_pairs = keys.unsqueeze(1).expand(b, nq, nk, keys.shape[-1])
        scores = (torch.tanh(self.W_q(q_pairs) + self.W_k(k_pairs)) @ self.w_v.weight.T).squeeze(-1)
        weights = F_att.masked_softmax(scores, valid_lens)
        return torch.bmm(weights, values), weights


def _add_state(g, query_size, key_size, num_hiddens):
    return {"W_q.weight": 0.5 * torch.randn(num_hiddens, query_size, generator=g),
            "W_k.weight": 0.5 * torch.randn(num_hiddens, key_size, generator=g),
            "w_v.weight": torch.randn(1, num_hiddens, generator=g)}


def _add_params(seed):
    g = _gen(seed)
    q, k, v = torch.randn(2, 3, 6, generator=g), torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 2, generator=g)
    return [Call(init_args=(6, 4, 8), init_seed=seed, args=(q, k, v), report=("param_shapes",))]


def _add_one_d(seed):
    g = _gen(seed)
    state = _add_state(g, 6, 4, 8)
    q, k, v = torch.randn(2, 3, 6, generator=g), torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 2, generator=g)
    return [Call(init_args=(6, 4, 8), init_seed=0, state_dict=state, args=(q, k, v, torch.tensor([4, 2])))]


def _add_two_d(seed):
    g = _gen(seed)
    state = _add_state(g, 3, 5, 4)
    q, k, v = torch.randn(2, 2, 3, generator=g), torch.randn(2, 4, 5, generator=g), torch.randn(2, 4, 3, generator=g)
    return [Call(init_args=(3, 5, 4), init_seed=0, state_dict=state, args=(q, k, v),
                 kwargs={"valid_lens": torch.tensor([[0, 3], [4, 1]])})]


def _add_random(seed):
    g = _gen(seed)
    batch, num_queries, num_keys = _randint(g, 2, 4), _randint(g, 2, 5), _randint(g, 3, 7)
    query_size, key_size, num_hiddens, d_v = (_randint(g, 2, 9) for _ in range(4))
    state = _add_state(g, query_size, key_size, num_hiddens)
    q = torch.randn(batch, num_queries, query_size, generator=g)
    k = torch.randn(batch, num_keys, key_size, generator=g)
    v = torch.randn(batch, num_keys, d_v, generator=g)
    lens = torch.randint(0, num_keys + 1, (batch, num_queries), generator=g)
    lens[0, 0] = 0
    init = (query_size, key_size, num_hiddens)
    return [Call(init_args=init, init_seed=1, state_dict=state, args=(q, k, v)),
            Call(init_args=init, init_seed=1, state_dict=state, args=(q, k, v, lens), grads_of=(0, 1))]


def _same_parameters(got, want, calls):
    for g, w in zip(got, want):
        if w["status"] == "raised":
            if g["status"] == "raised" and w["error_type"] in g.get("error_mro", []):
                continue
            return f"should raise {w['error_type']}"
        if g["status"] != "ok":
            return f"raised {g['error_type']}: {g['message'][:300]}"
        mine, theirs = g.get("extras", {}).get("param_shapes"), w["extras"]["param_shapes"]
        if mine != theirs:
            return f"the parameters (name: shape) are {mine}, expected {theirs}"
    return None


register(Exercise(
    label="ch03_ex3", title="Additive attention as a module", name="AdditiveAttention",
    reference=F_att.AdditiveAttention, kind="class", points=2,
    checks=[
        Check("parameters W_q, W_k, w_v with the right shapes and no biases", _add_params, seed=0,
              compare=_same_parameters,
              hint="this check lists the module's parameters (names and shapes) after one call: compare "
                   "them with the contract."),
        Check("queries of size 6, keys of size 4, 1-D valid_lens (given parameters)", _add_one_d, seed=1,
              hint="this check loads given parameters and compares output and weights with one valid "
                   "length per sequence: the score of a (query, key) pair is w_v(tanh(W_q q + W_k k)), each "
                   "query's weights sum to 1 over its valid keys, output = weights times values."),
        Check("2-D valid_lens with a zero length (given parameters)", _add_two_d, seed=2,
              hint="this check gives each query its own valid length, one of them 0: a query with no "
                   "valid key gets all-zero weights and a zero output; the reason above names the first "
                   "item of (output, weights) that differs."),
        Check("random sizes, gradients reach queries and keys (hidden)", _add_random, public=False,
              hint="this check compares output, weights and the gradients with respect to queries and keys "
                   "for random sizes."),
    ],
    mistakes=[
        Mistake("forgot tanh",
                "the summed features W_q q + W_k k reach w_v without the tanh nonlinearity.", _AddNoTanh),
        Mistake("tanh on each side",
                "you applied tanh to the projected queries and the projected keys separately and added "
                "the results; the score is w_v^T tanh(W_q q + W_k k), with tanh of the sum. (Separately, "
                "the query's part is the same for every key and the softmax ignores it.)",
                _AddTanhEachSide),
        Mistake("softmax over the queries axis",
                "the weights are normalised over the queries axis; each query's weights must sum to 1 "
                "over the keys.", _AddQueriesAxis),
        Mistake("valid_lens ignored", "valid_lens is ignored: padded keys still get weight.", _AddNoMask),
        Mistake("d2l's -1e6 masked softmax",
                "a query with no valid key got uniform weights over the padding (a masked softmax that "
                "fills with a finite -1e6, like d2l's); such a query must get zero weights, as "
                "attn.masked_softmax gives.", _AddD2lMask),
        Mistake("layers with biases",
                "the module's parameters must be exactly W_q.weight, W_k.weight and w_v.weight: "
                "the layers of additive attention have no bias term.", _AddBiases),
    ],
    alternatives=[
        Alternative("d2l's AdditiveAttention", "nn.LazyLinear layers created keys first, torch.bmm",
                    _AddAltD2l),
        Alternative("a loop over the queries", "one query's hidden vectors against all keys at a time",
                    _AddAltLoops),
        Alternative("einsum on the weight matrices, float64", "the layers' weights used by einsum in "
                    "float64, cast back", _AddAltEinsumFloat64),
        Alternative("pairs expanded before projecting", "queries and keys expanded to every pair, "
                    "w_v applied as a matrix product", _AddAltExpand),
    ],
))


# ===================================================== ch03_ex4 attention_shapes

def attention_shapes(queries_shape, keys_shape, values_shape, num_hiddens):
    batch, num_queries, _ = queries_shape
    num_keys, d_v = keys_shape[1], values_shape[2]
    return {"scores": (batch, num_queries, num_keys),
            "output": (batch, num_queries, d_v),
            "additive_features": (batch, num_queries, num_keys, num_hiddens)}


def _shapes_output_like_queries(queries_shape, keys_shape, values_shape, num_hiddens):
    out = attention_shapes(queries_shape, keys_shape, values_shape, num_hiddens)
    out["output"] = tuple(queries_shape)
    return out


def _shapes_transposed(queries_shape, keys_shape, values_shape, num_hiddens):
    out = attention_shapes(queries_shape, keys_shape, values_shape, num_hiddens)
    batch, num_queries, num_keys = out["scores"]
    out["scores"] = (batch, num_keys, num_queries)
    return out


def _shapes_no_pairs(queries_shape, keys_shape, values_shape, num_hiddens):
    out = attention_shapes(queries_shape, keys_shape, values_shape, num_hiddens)
    out["additive_features"] = (queries_shape[0], queries_shape[1], num_hiddens)
    return out


def _shapes_lists(queries_shape, keys_shape, values_shape, num_hiddens):
    return {k: list(v) for k, v in attention_shapes(queries_shape, keys_shape, values_shape,
                                                     num_hiddens).items()}


def _shapes_alt_torch_size(queries_shape, keys_shape, values_shape, num_hiddens):
    """torch.Size objects (a tuple subclass)."""
    b, nq = queries_shape[0], queries_shape[1]
    nk = keys_shape[1]
    return {"scores": torch.Size([b, nq, nk]),
            "output": torch.Size([b, nq, values_shape[-1]]),
            "additive_features": torch.Size([b, nq, nk, num_hiddens])}


def _shapes_alt_meta(queries_shape, keys_shape, values_shape, num_hiddens):
    """Run the computation on the meta device (shapes only, no data) and read the shapes off."""
    q = torch.empty(queries_shape, device="meta")
    k = torch.empty(keys_shape, device="meta")
    v = torch.empty(values_shape, device="meta")
    scores = q[..., :1] @ k[..., :1].transpose(1, 2)
    output = scores @ v
    hidden = torch.empty(*queries_shape[:2], 1, num_hiddens, device="meta") + \
        torch.empty(keys_shape[0], 1, keys_shape[1], num_hiddens, device="meta")
    return {"scores": tuple(scores.shape), "output": tuple(output.shape),
            "additive_features": tuple(hidden.shape)}


_Shape3 = namedtuple("_Shape3", "batch rows cols")


def _shapes_alt_named(queries_shape, keys_shape, values_shape, num_hiddens):
    """Named tuples, and tuple concatenation."""
    scores = _Shape3(queries_shape[0], queries_shape[1], keys_shape[1])
    return dict(scores=scores, output=_Shape3(scores.batch, scores.rows, values_shape[2]),
                additive_features=tuple(scores) + (num_hiddens,))


def _shapes_example(seed):
    return [Call(args=((2, 3, 4), (2, 5, 4), (2, 5, 6), 8))]


def _shapes_one_query(seed):
    return [Call(args=((4, 1, 16), (4, 10, 16), (4, 10, 3), 5)),
            Call(args=((1, 7, 2), (1, 3, 9), (1, 3, 4), 6))]


def _shapes_random(seed):
    g = _gen(seed)
    calls = []
    for _ in range(3):
        batch, num_queries, num_keys = _randint(g, 1, 9), _randint(g, 1, 9), _randint(g, 10, 20)
        d, d_k, d_v, h = _randint(g, 1, 9), _randint(g, 1, 9), _randint(g, 10, 20), _randint(g, 1, 30)
        calls.append(Call(args=((batch, num_queries, d), (batch, num_keys, d_k), (batch, num_keys, d_v), h)))
    return calls


register(Exercise(
    label="ch03_ex4", title="Shapes of the attention contract", name="attention_shapes",
    reference=attention_shapes, points=1,
    checks=[
        Check("the chapter's example: (2, 3, 4), (2, 5, 4), (2, 5, 6), num_hiddens=8", _shapes_example,
              seed=0, hint="this check compares the dict (its three keys, each a tuple of ints) for the "
                           "chapter's running example: work each shape out from the contract's table."),
        Check("one query, many keys; and queries and keys of different sizes", _shapes_one_query, seed=1,
              hint="this check uses one query against many keys, and queries and keys of different sizes: "
                   "each of the three shapes follows from the contract's table for any sizes."),
        Check("random shapes (hidden)", _shapes_random, public=False,
              hint="this check compares the three shapes for random sizes."),
    ],
    mistakes=[
        Mistake("output sized like the queries",
                "the output's last size comes from the values (d_v), not from the queries.",
                _shapes_output_like_queries),
        Mistake("scores transposed",
                "the scores have one row per query and one column per key.", _shapes_transposed),
        Mistake("additive features without the keys axis",
                "additive attention forms one hidden vector for every (query, key) pair before w_v.",
                _shapes_no_pairs),
        Mistake("lists instead of tuples",
                "the shapes are right but are lists; the contract asks for tuples (a torch.Size is a "
                "tuple too).", _shapes_lists),
    ],
    alternatives=[
        Alternative("torch.Size values", "torch.Size, a tuple subclass", _shapes_alt_torch_size),
        Alternative("meta-device tensors", "the products computed on the meta device, shapes read off",
                    _shapes_alt_meta),
        Alternative("named tuples", "a namedtuple for the 3-D shapes, tuple concatenation",
                    _shapes_alt_named),
    ],
))


# ============================================= ch03_ex5 BilinearAttention (general score)

class BilinearAttention(nn.Module):
    """Luong et al.'s "general" score ``q^T W k``; forward returns ``(output, weights)``."""

    def __init__(self, query_size, key_size):
        super().__init__()
        self.W = nn.Parameter(torch.randn(query_size, key_size) / math.sqrt(query_size * key_size))

    def forward(self, queries, keys, values, valid_lens=None):
        query_size, key_size = self.W.shape
        if queries.shape[-1] != query_size:
            raise ValueError(f"queries has shape {tuple(queries.shape)}, but its last size must be "
                             f"query_size={query_size}")
        if keys.shape[-1] != key_size:
            raise ValueError(f"keys has shape {tuple(keys.shape)}, but its last size must be "
                             f"key_size={key_size}")
        scores = torch.bmm(queries @ self.W, keys.transpose(1, 2))
        weights = F_att.masked_softmax(scores, valid_lens)
        return torch.bmm(weights, values), weights


def _bil_validate(module, queries, keys):
    query_size, key_size = module.W.shape
    if queries.shape[-1] != query_size:
        raise ValueError(f"queries has shape {tuple(queries.shape)}, expected last size {query_size}")
    if keys.shape[-1] != key_size:
        raise ValueError(f"keys has shape {tuple(keys.shape)}, expected last size {key_size}")


class _BilTransposedW(BilinearAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        _bil_validate(self, queries, keys)
        scores = torch.einsum("bqi,ji,bkj->bqk", queries, self.W, keys)
        weights = F_att.masked_softmax(scores, valid_lens)
        return weights @ values, weights


class _BilScaled(BilinearAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        _bil_validate(self, queries, keys)
        scores = (queries @ self.W) @ keys.transpose(1, 2) / math.sqrt(keys.shape[-1])
        weights = F_att.masked_softmax(scores, valid_lens)
        return weights @ values, weights


class _BilNoMask(BilinearAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        return super().forward(queries, keys, values, None)


class _BilNnBilinear(nn.Module):
    # torch's nn.Bilinear: parameters W.weight (1, query_size, key_size) and W.bias.
    def __init__(self, query_size, key_size):
        super().__init__()
        self.W = nn.Bilinear(query_size, key_size, 1)

    def forward(self, queries, keys, values, valid_lens=None):
        b, nq, nk = queries.shape[0], queries.shape[1], keys.shape[1]
        q_pairs = queries.unsqueeze(2).expand(b, nq, nk, queries.shape[-1]).contiguous()
        k_pairs = keys.unsqueeze(1).expand(b, nq, nk, keys.shape[-1]).contiguous()
        scores = self.W(q_pairs, k_pairs).squeeze(-1)
        weights = F_att.masked_softmax(scores, valid_lens)
        return weights @ values, weights


class _BilNoValidation(BilinearAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        scores = torch.bmm(queries @ self.W, keys.transpose(1, 2))
        weights = F_att.masked_softmax(scores, valid_lens)
        return torch.bmm(weights, values), weights


class _BilAltEinsum(nn.Module):
    """One three-operand einsum."""

    def __init__(self, query_size, key_size):
        super().__init__()
        self.W = nn.Parameter(torch.empty(query_size, key_size))
        nn.init.xavier_uniform_(self.W)

    def forward(self, queries, keys, values, valid_lens=None):
        qs, ks = self.W.shape
        for name, t, size in (("queries", queries, qs), ("keys", keys, ks)):
            if t.shape[-1] != size:
                raise ValueError(f"{name} {tuple(t.shape)} does not fit W {tuple(self.W.shape)}")
        scores = torch.einsum("bqi,ij,bkj->bqk", queries, self.W, keys)
        weights = F_att.masked_softmax(scores, valid_lens)
        return torch.einsum("bqk,bkv->bqv", weights, values), weights


class _BilAltKeysSide(nn.Module):
    """W applied to the keys with F.linear (k -> W k), then a plain dot product with the queries."""

    def __init__(self, query_size, key_size):
        super().__init__()
        self.W = nn.Parameter(torch.zeros(query_size, key_size))

    def forward(self, queries, keys, values, valid_lens=None):
        if queries.size(-1) != self.W.size(0):
            raise ValueError(f"the last size of queries must be {self.W.size(0)}: "
                             f"queries has shape {queries.shape}")
        if keys.size(-1) != self.W.size(1):
            raise ValueError(f"the last size of keys must be {self.W.size(1)}: keys has shape {keys.shape}")
        keys_in_query_space = F.linear(keys, self.W)          # (batch, num_keys, query_size)
        scores = torch.bmm(queries, keys_in_query_space.transpose(1, 2))
        weights = F_att.masked_softmax(scores, valid_lens)
        return torch.bmm(weights, values), weights


class _BilAltLoopsFloat64(nn.Module):
    """One sequence at a time, in float64."""

    def __init__(self, query_size, key_size):
        super().__init__()
        self.W = nn.Parameter(torch.randn(query_size, key_size) * 0.1)

    def forward(self, queries, keys, values, valid_lens=None):
        if queries.shape[2] != self.W.shape[0] or keys.shape[2] != self.W.shape[1]:
            bad, t = ("queries", queries) if queries.shape[2] != self.W.shape[0] else ("keys", keys)
            raise ValueError(f"{bad} of shape {list(t.shape)} does not fit W of shape {list(self.W.shape)}")
        w = self.W.double()
        rows = [(queries[b].double() @ w @ keys[b].double().T) for b in range(queries.shape[0])]
        scores = torch.stack(rows).to(queries.dtype)
        weights = F_att.masked_softmax(scores, valid_lens)
        return weights @ values, weights


def _bil_params(seed):
    g = _gen(seed)
    q, k, v = torch.randn(2, 3, 6, generator=g), torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 2, generator=g)
    return [Call(init_args=(6, 4), init_seed=seed, args=(q, k, v), report=("param_shapes",))]


def _bil_given(seed):
    g = _gen(seed)
    W = torch.randn(3, 5, generator=g) / 2
    q, k, v = torch.randn(2, 4, 3, generator=g), torch.randn(2, 6, 5, generator=g), torch.randn(2, 6, 2, generator=g)
    return [Call(init_args=(3, 5), init_seed=0, state_dict={"W": W}, args=(q, k, v, torch.tensor([6, 3])))]


def _bil_square(seed):
    g = _gen(seed)
    W = torch.randn(4, 4, generator=g) / 2
    q, k, v = torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 3, generator=g)
    lens = torch.tensor([[5, 0, 2], [1, 4, 3]])
    return [Call(init_args=(4, 4), init_seed=0, state_dict={"W": W}, args=(q, k, v, lens)),
            Call(init_args=(4, 4), init_seed=0, state_dict={"W": torch.eye(4)}, args=(q, k, v, lens))]


def _bil_bad(seed):
    g = _gen(seed)
    W = torch.randn(3, 5, generator=g)
    return [Call(init_args=(3, 5), init_seed=0, state_dict={"W": W},
                 args=(torch.randn(2, 4, 5, generator=g), torch.randn(2, 6, 5, generator=g),
                       torch.randn(2, 6, 2, generator=g))),
            Call(init_args=(3, 5), init_seed=0, state_dict={"W": W},
                 args=(torch.randn(2, 4, 3, generator=g), torch.randn(2, 6, 3, generator=g),
                       torch.randn(2, 6, 2, generator=g)))]


def _bil_words(call):
    queries, keys = call.args[:2]
    return ["queries", _shape(queries)] if queries.shape[-1] != call.state_dict["W"].shape[0] \
        else ["keys", _shape(keys)]


def _bil_random(seed):
    g = _gen(seed)
    batch, num_queries, num_keys = _randint(g, 2, 4), _randint(g, 2, 5), _randint(g, 3, 7)
    query_size, key_size, d_v = _randint(g, 2, 9), _randint(g, 2, 9), _randint(g, 1, 5)
    W = torch.randn(query_size, key_size, generator=g) / math.sqrt(query_size)
    q = torch.randn(batch, num_queries, query_size, generator=g)
    k = torch.randn(batch, num_keys, key_size, generator=g)
    v = torch.randn(batch, num_keys, d_v, generator=g)
    lens = torch.randint(0, num_keys + 1, (batch, num_queries), generator=g)
    lens[-1, 0] = 0
    init = (query_size, key_size)
    return [Call(init_args=init, init_seed=2, state_dict={"W": W}, args=(q, k, v)),
            Call(init_args=init, init_seed=2, state_dict={"W": W}, args=(q, k, v, lens), grads_of=(0, 1, 2))]


register(Exercise(
    label="ch03_ex5", title="Luong's general score as a module", name="BilinearAttention",
    reference=BilinearAttention, kind="class", points=2,
    checks=[
        Check("one parameter W of shape (query_size, key_size)", _bil_params, seed=0,
              compare=_same_parameters,
              hint="this check lists the module's parameters (names and shapes) after one call: compare "
                   "them with the contract."),
        Check("queries of size 3, keys of size 5, 1-D valid_lens (given W)", _bil_given, seed=1,
              hint="this check loads a given W of shape (3, 5) and compares output and weights with one "
                   "valid length per sequence: the score of a (query, key) pair is q^T W k, and each "
                   "query's weights sum to 1 over its valid keys."),
        Check("a square W with 2-D valid_lens (one 0); and W = I gives dot-product attention", _bil_square,
              seed=2, hint="this check uses a square, non-symmetric W (and then the identity) with one "
                           "valid length per query, one of them 0: the score is q^T W k, a query with no "
                           "valid key gets zero weights; the reason above names the first call that differs."),
        Check("queries or keys of the wrong size raise ValueError naming the argument and its shape",
              _bil_bad, seed=3, must_mention=_bil_words, weight=0.5,
              hint="compare the last size of queries with W's rows and that of keys with W's columns "
                   "before computing, and name the argument and its shape in the message."),
        Check("random sizes, gradients reach queries, keys and values (hidden)", _bil_random, public=False,
              weight=1.5, hint="this check compares output, weights and the gradients with respect to "
                               "queries, keys and values for random sizes, with and without valid_lens."),
    ],
    mistakes=[
        Mistake("W used transposed",
                "your score is q^T W^T k: W has one row per query feature and one column per key feature, "
                "so the query multiplies W from the left.", _BilTransposedW),
        Mistake("scaled like the Transformer",
                "you divided the scores by sqrt(d); the general score of Luong et al. is q^T W k as it is "
                "(W itself can learn any scale).", _BilScaled),
        Mistake("valid_lens ignored", "valid_lens is ignored: padded keys still get weight.", _BilNoMask),
        Mistake("nn.Bilinear",
                "nn.Bilinear brings its own parameters (W.weight of shape (1, query_size, key_size) and "
                "W.bias); the contract asks for one nn.Parameter named W of shape (query_size, key_size).",
                _BilNnBilinear),
        Mistake("no size check",
                "a query or key of the wrong size must be refused with a ValueError that names it and its "
                "shape, before any product is formed.", _BilNoValidation),
    ],
    alternatives=[
        Alternative("one einsum", "einsum('bqi,ij,bkj->bqk'), xavier-initialised W", _BilAltEinsum),
        Alternative("W applied to the keys", "F.linear(keys, W) maps keys into query space, then bmm",
                    _BilAltKeysSide),
        Alternative("loops in float64", "one sequence at a time, q W k^T in float64, cast back",
                    _BilAltLoopsFloat64),
    ],
))
