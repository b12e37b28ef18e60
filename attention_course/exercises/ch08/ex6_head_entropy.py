r"""ch08_ex6: How sharply does each head attend?.

A head that copies one source character puts nearly all of a row's weight on one key; a head
that gathers context spreads it. The entropy of a row, $-\sum_j p_j \ln p_j$, measures this: 0 for
a one-hot row, $\ln n$ for a uniform row over $n$ keys. Write `head_entropy(weights, tgt_lens)`
where `weights` is a float tensor `(batch, num_heads, num_queries, num_keys)` of attention rows
(each a probability distribution; zeros allowed, e.g. at padded keys) and `tgt_lens` an integer
tensor `(batch,)`: only the first `tgt_lens[b]` query rows of sequence `b` are real (at least one
row in all is real). Return a tensor of shape `(num_heads,)` with the dtype of `weights`: for each
head, the mean entropy (natural logarithm, with $0 \ln 0 = 0$) over all real rows of all
sequences, each real row counting once. Raise `ValueError` naming `tgt_lens` and giving its shape
when it does not have shape `(batch,)`.
"""
from __future__ import annotations

import math

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint, shape_of
from ._common import _kpm, _lens

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def head_entropy(weights, tgt_lens):
    """Mean entropy (nats) of each head's attention rows over the valid query rows, (num_heads,)."""
    if not isinstance(tgt_lens, torch.Tensor) or tuple(tgt_lens.shape) != (weights.shape[0],):
        raise ValueError(f"tgt_lens must have shape (batch,) = ({weights.shape[0]},), got tgt_lens of shape "
                         f"{shape_of(tgt_lens)}")
    plogp = torch.where(weights > 0, weights * torch.log(weights), torch.zeros((), dtype=weights.dtype))
    row_entropy = -plogp.sum(dim=-1)                                   # (batch, heads, num_queries)
    valid = torch.arange(weights.shape[2])[None, :] < tgt_lens[:, None]   # (batch, num_queries)
    total = (row_entropy * valid[:, None, :]).sum(dim=(0, 2))
    return total / valid.sum()


# Inputs of the public and hidden checks ---------------------------------------------------


def _entropy_weights(g, batch, heads, num_queries, num_keys, src_lens, sharp=3.0):
    scores = sharp * torch.randn(batch, heads, num_queries, num_keys, generator=g)
    hidden = _kpm(src_lens, num_keys)[:, None, None, :]
    w = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)
    return w.masked_fill(hidden, 0.0)


def _entropy_main_calls(seed):
    g = gen(seed)
    w = _entropy_weights(g, 2, 3, 4, 5, torch.tensor([5, 3]))
    w[0, 0, 0] = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0])            # a one-hot row: entropy 0
    w[1, 2, :] = torch.tensor([0.25, 0.25, 0.5, 0.0, 0.0])
    return [Call(args=(w, torch.tensor([4, 2])))]


def _entropy_uneven_calls(seed):
    g = gen(seed)
    w = _entropy_weights(g, 3, 2, 5, 4, torch.tensor([4, 4, 2]), sharp=1.0)
    lens = torch.tensor([5, 1, 3])
    return [Call(args=(w, lens)), Call(args=(w.double(), lens))]       # the result keeps the dtype


def _entropy_bad_calls(seed):
    g = gen(seed)
    w = _entropy_weights(g, 2, 2, 3, 3, torch.tensor([3, 3]))
    return [Call(args=(w, torch.tensor([3, 3, 3]))), Call(args=(w, torch.tensor([[3], [2]])))]


def _entropy_hidden_calls(seed):
    g = gen(seed)
    batch, heads, nq, nk = randint(g, 2, 4), randint(g, 1, 4), randint(g, 2, 6), randint(g, 2, 7)
    w = _entropy_weights(g, batch, heads, nq, nk, _lens(g, batch, nk), sharp=float(randint(g, 1, 5)))
    return [Call(args=(w, _lens(g, batch, nq)))]


_ENTROPY_HINT = ("the entropy of a row is -sum p log p (natural log, 0 log 0 = 0); average it over every "
                 "valid query row of every sequence, each row counting once, separately for each head.")


# Kept mistakes, each with its hint --------------------------------------------------------


def _entropy_checked(body):
    def impl(weights, tgt_lens):
        if tuple(tgt_lens.shape) != (weights.shape[0],):
            raise ValueError(f"tgt_lens must have shape ({weights.shape[0]},), got tgt_lens of shape "
                             f"{tuple(tgt_lens.shape)}")
        valid = torch.arange(weights.shape[2])[None, :] < tgt_lens[:, None]
        return body(weights, tgt_lens, valid)
    return impl


mistakes.add("NaN from 0 log 0",
             "weights of exactly 0 (padding, one-hot rows) make p * log p = 0 * (-inf) = NaN; such terms "
             "count as 0.",
             _entropy_checked(lambda w, lens, valid: ((-(w * w.log()).sum(-1)) * valid[:, None]).sum((0, 2))
                              / valid.sum()))


def _ent_rows(w):
    return -torch.where(w > 0, w * w.log(), torch.zeros(()))


mistakes.add("padded query rows included",
             "only the first tgt_lens[b] query rows of sequence b are real; leave the padded rows out of "
             "the average.",
             _entropy_checked(lambda w, lens, valid: _ent_rows(w).sum(-1).mean(dim=(0, 2))))


mistakes.add("entropy in bits",
             "use the natural logarithm (nats), not log2.",
             _entropy_checked(lambda w, lens, valid: (_ent_rows(w).sum(-1) / math.log(2) * valid[:, None])
                              .sum((0, 2)) / valid.sum()))


mistakes.add("mean of per-sequence means",
             "every valid row counts once: divide the sum over all valid rows by their number, rather "
             "than averaging each sequence first.",
             _entropy_checked(lambda w, lens, valid: ((_ent_rows(w).sum(-1) * valid[:, None]).sum(-1)
                                                      / lens[:, None]).mean(0)))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("xlogy and einsum",
                   "torch.special.xlogy, einsum with a 0/1 row mask; torch.Size in the "
"message")
def _entropy_alt_xlogy(weights, tgt_lens):
    if tgt_lens.shape != torch.Size([weights.shape[0]]):
        raise ValueError(f"tgt_lens has shape {tgt_lens.shape}, need torch.Size([{weights.shape[0]}])")
    rows = -torch.special.xlogy(weights, weights).sum(-1)              # 0 * log 0 = 0 built in
    keep = (torch.arange(weights.shape[2]) < tgt_lens[:, None]).to(weights.dtype)
    return torch.einsum("bhq,bq->h", rows, keep) / keep.sum()


@alternatives.keep("python loops",
                   "pure Python over sequences, valid rows and heads, math.log")
def _entropy_alt_loops(weights, tgt_lens):
    if tgt_lens.dim() != 1 or len(tgt_lens) != weights.shape[0]:
        raise ValueError(f"tgt_lens: one length per sequence expected, got shape {list(tgt_lens.shape)}")
    batch, heads = weights.shape[:2]
    sums, count = [0.0] * heads, 0
    for b in range(batch):
        for i in range(int(tgt_lens[b])):
            count += 1
            for h in range(heads):
                sums[h] += -sum(p * math.log(p) for p in weights[b, h, i].double().tolist() if p > 0)
    return torch.tensor([s / count for s in sums], dtype=weights.dtype)


@alternatives.keep("d2l's sequence_mask",
                   "d2l's conventions: valid_lens, sequence_mask, heads folded into the "
"batch with repeat_interleave")
def _entropy_alt_d2l(weights, tgt_lens):
    # d2l's conventions: valid_lens, sequence_mask to zero what lies past them, and the heads folded
    # into the batch axis with valid_lens repeated per head (torch.repeat_interleave).
    batch_size, num_heads, num_queries, num_keys = weights.shape
    valid_lens = tgt_lens
    if valid_lens.dim() != 1 or valid_lens.shape[0] != batch_size:
        raise ValueError(f"valid lengths tgt_lens must be (batch_size,) = ({batch_size},), got {tuple(valid_lens.shape)}")

    def sequence_mask(X, valid_len, value=0.0):
        maxlen = X.size(1)
        mask = torch.arange(maxlen, dtype=torch.float32)[None, :] < valid_len[:, None]
        X = X.clone()
        X[~mask] = value
        return X

    P = weights.reshape(-1, num_queries, num_keys)                       # (batch_size * num_heads, q, k)
    logP = torch.log(torch.where(P > 0, P, torch.ones_like(P)))
    H = -(P * logP).sum(dim=-1)                                          # (batch_size * num_heads, q)
    H = sequence_mask(H, torch.repeat_interleave(valid_lens, num_heads))
    per_head = H.reshape(batch_size, num_heads, num_queries).sum(dim=(0, 2))
    return per_head / valid_lens.sum().to(weights.dtype)


@alternatives.keep("Categorical",
                   "torch.distributions.Categorical(probs).entropy() in float64 over the "
    "gathered valid rows")
def _entropy_alt_categorical(weights, tgt_lens):
    if tgt_lens.shape != (weights.shape[0],):
        raise ValueError("tgt_lens must be (batch,): got tgt_lens with shape "
                         + "x".join(map(str, tgt_lens.shape)))
    valid = torch.arange(weights.shape[2]) < tgt_lens[:, None]            # (batch, num_queries)
    per_head = weights.permute(1, 0, 2, 3)[:, valid]                      # (heads, num_valid_rows, keys)
    dist = torch.distributions.Categorical(probs=per_head.double(), validate_args=False)
    return dist.entropy().mean(dim=1).to(weights.dtype)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch08_ex6", title="How sharply does each head attend?", name="head_entropy",
    reference=head_entropy, points=2,
    checks=[
        Check("2 sequences, 3 heads, padded keys and a one-hot row", _entropy_main_calls, hint=_ENTROPY_HINT),
        Check("3 sequences with 5, 1 and 3 valid query rows, in float32 and in float64", _entropy_uneven_calls,
              hint=_ENTROPY_HINT),
        Check("tgt_lens of the wrong shape raises ValueError naming it and its shape", _entropy_bad_calls,
              must_mention=lambda call: ["tgt_lens", tuple(call.args[1].shape)],
              hint="compare tgt_lens.shape with (batch,) first; name tgt_lens and its shape.", weight=0.5),
        Check("random sizes, lengths and sharpness (hidden)", _entropy_hidden_calls, public=False,
              hint=_ENTROPY_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
