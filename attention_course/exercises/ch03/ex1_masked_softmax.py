"""ch03_ex1: Masked softmax.

Write `masked_softmax(scores, valid_lens)`.

- `scores`: a float tensor of shape `(batch, num_queries, num_keys)`. Do not modify it in
  place (the checks pass scores that require grad, and autograd refuses in-place changes
  of such a tensor).
- `valid_lens`: `None`, or an integer tensor of shape `(batch,)` (one length per sequence)
  or `(batch, num_queries)` (one length per query), with values from 0 to `num_keys`.
- Return a tensor with the shape and dtype of `scores`: for every row, the softmax over the
  keys (the last axis) of the scores at key positions `j < n`, where `n` is the row's valid
  length. Positions `j >= n` get exactly 0. A row with valid length 0 is all zeros (no NaN,
  no uniform weights). With `valid_lens=None`, return the plain softmax over the keys.
- The backward pass must be free of NaN too: the checks differentiate the weights with
  respect to `scores`, and a row with valid length 0 must get a zero gradient.
- When `valid_lens` has any other shape, raise `ValueError` (with any message).
"""
from __future__ import annotations

from torch import nn
import torch

from ... import functional as F_att
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# Inputs of the public and hidden checks ---------------------------------------------------


def _ms_one_d(seed):
    g = gen(seed)
    scores = torch.randn(2, 3, 5, generator=g)
    return [Call(args=(scores, torch.tensor([2, 5]))),
            Call(args=(scores, None))]


def _ms_two_d(seed):
    g = gen(seed)
    scores = torch.randn(2, 3, 4, generator=g)
    return [Call(args=(scores, torch.tensor([[1, 2, 4], [3, 3, 2]])))]


def _ms_zero(seed):
    g = gen(seed)
    scores = torch.randn(3, 2, 4, generator=g)
    return [Call(args=(scores, torch.tensor([0, 2, 4])), grads_of=(0,)),
            Call(args=(scores, torch.tensor([[0, 1], [4, 0], [2, 3]])), grads_of=(0,))]


def _ms_bad_shape(seed):
    g = gen(seed)
    scores = torch.randn(2, 3, 4, generator=g)
    return [Call(args=(scores, torch.tensor([1, 2, 3]))),
            Call(args=(scores, torch.tensor([[1, 2, 3, 4], [1, 1, 1, 1]])))]


def _ms_random(seed):
    g = gen(seed)
    batch, num_queries, num_keys = randint(g, 3, 6), randint(g, 2, 5), randint(g, 3, 8)
    scores = 3 * torch.randn(batch, num_queries, num_keys, generator=g)
    lens_1d = torch.randint(0, num_keys + 1, (batch,), generator=g)
    lens_1d[0] = 0  # always at least one empty sequence
    lens_2d = torch.randint(0, num_keys + 1, (batch, num_queries), generator=g)
    lens_2d[-1, 0] = 0
    return [Call(args=(scores, lens_1d), grads_of=(0,)), Call(args=(scores, lens_2d), grads_of=(0,))]


def _ms_float64(seed):
    g = gen(seed)
    scores = torch.randn(2, 4, 6, generator=g, dtype=torch.float64)
    lens = torch.randint(0, 7, (2, 4), generator=g)
    lens[0, 1] = 0
    return [Call(args=(scores, lens)), Call(args=(scores, lens), grads_of=(0,))]


# Kept mistakes, each with its hint --------------------------------------------------------


def _mask(scores, valid_lens):
    return F_att.valid_mask(valid_lens, scores.shape[1], scores.shape[2])


def _validate_lens(scores, valid_lens):
    # The kept mistakes and alternatives validate exactly like the reference.
    batch, num_queries, num_keys = scores.shape
    F_att._check_valid_lens(valid_lens, batch, num_queries, num_keys, "scores", tuple(scores.shape))


@mistakes.keep("finite -1e6 mask",
               "a row whose valid length is 0 came out uniform over the padding: a large finite "
               "negative fill (like -1e6, as in d2l's masked_softmax) gives every padded key the same "
               "weight when no key is valid. Such a row must be all zeros.")
def _ms_finite_mask(scores, valid_lens):
    # d2l's masked softmax (and PR #2423's report): a finite -1e6 fill.
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    _validate_lens(scores, valid_lens)
    return torch.softmax(scores.masked_fill(~_mask(scores, valid_lens), -1e6), dim=-1)


@mistakes.keep("mask applied after the softmax",
               "the padded keys took part in the softmax: zeroing them afterwards leaves rows that "
               "no longer sum to 1. Mask the scores before normalising.")
def _ms_mask_after(scores, valid_lens):
    weights = torch.softmax(scores, dim=-1)
    if valid_lens is None:
        return weights
    _validate_lens(scores, valid_lens)
    return weights.masked_fill(~_mask(scores, valid_lens), 0.0)


def _zeros_like_where(mask, weights):
    return torch.where(mask, weights, torch.zeros((), dtype=weights.dtype))


@mistakes.keep("softmax over the queries axis",
               "your weights are normalised over the queries axis (dim 1); each query's weights must "
               "sum to 1 over the keys, the last axis.")
def _ms_queries_axis(scores, valid_lens):
    if valid_lens is None:
        return torch.softmax(scores, dim=1)
    _validate_lens(scores, valid_lens)
    mask = _mask(scores, valid_lens)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=1)
    return _zeros_like_where(mask, weights)


@mistakes.keep("one key too many",
               "off by one: a valid length of n keeps key positions 0 to n-1; position n is already padding.")
def _ms_off_by_one(scores, valid_lens):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    _validate_lens(scores, valid_lens)
    mask = F_att.valid_mask(valid_lens + 1, scores.shape[1], scores.shape[2])
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return _zeros_like_where(mask, weights)


@mistakes.keep("NaN-gradient additive mask",
               "the weights are right, but the gradient of a row with valid length 0 is NaN: an additive "
               "-inf mask makes that row NaN inside the softmax, and zeroing the output afterwards does not "
               "stop the NaN from flowing back through the addition into scores. Choose an operation whose "
               "backward pass gives masked positions a zero gradient.")
def _ms_additive_nan_grad(scores, valid_lens):
    # Right forward pass; the NaN of an all -inf row flows back through the addition.
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    _validate_lens(scores, valid_lens)
    mask = _mask(scores, valid_lens)
    additive = torch.zeros(mask.shape, dtype=scores.dtype).masked_fill(~mask, float("-inf"))
    return torch.softmax(scores + additive, dim=-1).masked_fill(~mask, 0.0)


@mistakes.keep("scores modified in place",
               "you overwrote the caller's scores in place (an in-place fill or assignment); the contract "
               "forbids it, and autograd refuses it when scores require grad. Fill a new tensor instead.")
def _ms_in_place(scores, valid_lens):
    # Right values, but the caller's scores are overwritten (d2l's sequence_mask does this).
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    _validate_lens(scores, valid_lens)
    mask = _mask(scores, valid_lens)
    scores.masked_fill_(~mask, float("-inf"))
    return _zeros_like_where(mask, torch.softmax(scores, dim=-1))


@mistakes.keep("no new axis for the lengths",
               "the lengths were compared with the key positions without a new axis: torch.arange(num_keys) "
               "has shape (num_keys,) and the lengths (batch, num_queries), so broadcasting lines the keys "
               "up with the queries (an error when their sizes differ, a wrong mask when they agree); give "
               "the lengths a trailing axis of size 1 (valid_lens[..., None]) so that the mask has shape "
               "(batch, num_queries, num_keys).")
def _ms_lengths_without_new_axis(scores, valid_lens):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    _validate_lens(scores, valid_lens)
    lens = valid_lens if valid_lens.dim() == 2 else valid_lens[:, None].expand(-1, scores.shape[1])
    mask = torch.arange(scores.shape[-1]) < lens                # (batch, num_queries) meets (num_keys,)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return torch.where(mask, weights, torch.zeros((), dtype=weights.dtype))


@mistakes.keep("2-D lengths repeated as if 1-D",
               "a 2-D valid_lens of shape (batch, num_queries) already holds one length per row of scores, "
               "but it was repeated like a 1-D one (repeat_interleave by num_queries): batch * num_queries * "
               "num_queries lengths for batch * num_queries rows, a shape error. Repeat the lengths of a "
               "1-D valid_lens (batch,) only, and flatten a 2-D one as it is (reshape(-1)).")
def _ms_two_d_repeated(scores, valid_lens):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    _validate_lens(scores, valid_lens)
    batch, num_queries, num_keys = scores.shape
    lens = torch.repeat_interleave(valid_lens, num_queries)                     # right for 1-D only
    rows = scores.reshape(-1, num_keys)
    keep = torch.arange(num_keys)[None, :] < lens[:, None]
    weights = torch.softmax(rows.masked_fill(~keep, float("-inf")), dim=-1)
    return torch.where(keep, weights, torch.zeros((), dtype=weights.dtype)).reshape(scores.shape)


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("d2l's masked_softmax, adapted",
                   "rows flattened, repeat_interleave'd lengths, a "
"sequence mask with -inf on a copy, empty rows zeroed")
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


@alternatives.keep("float64 exponentials by hand",
                   "max-shifted exp in float64, multiplicative mask, "
"guarded division, cast back")
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


@alternatives.keep("Python loops over rows",
                   "softmax of the first n scores of each row, zeros padded")
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


@alternatives.keep("index assignment into a clone",
                   "scores cloned, masked entries set to -inf, "
"torch.where after the softmax")
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


# Registration -----------------------------------------------------------------------------

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
        Check("valid_lens of the wrong shape raises ValueError",
              _ms_bad_shape, seed=3, weight=0.5,
              hint="accept valid_lens of shape (batch,) or (batch, num_queries) only; otherwise raise a "
                   "ValueError."),
        Check("random shapes with empty sequences, forward and backward (hidden)", _ms_random, public=False,
              hint="this check compares the weights and their gradients with respect to scores for random "
                   "shapes and lengths between 0 and num_keys, in both 1-D and 2-D form."),
        Check("float64 scores keep their dtype (hidden)", _ms_float64, public=False,
              hint="this check passes float64 scores with a 2-D valid_lens in which one row has valid "
                   "length 0: the weights (their zeros included) and the gradient are float64 too, and the "
                   "row of valid length 0 is all zeros with a zero gradient; the reason above says which "
                   "differs."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
