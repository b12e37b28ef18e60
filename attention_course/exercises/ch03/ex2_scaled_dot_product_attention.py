r"""ch03_ex2: Scaled dot-product attention.

Write `scaled_dot_product_attention(queries, keys, values, valid_lens=None)`.

- `queries`: `(batch, num_queries, d)`, `keys`: `(batch, num_keys, d)`,
  `values`: `(batch, num_keys, d_v)`, float tensors of one dtype; `valid_lens`: as in
  Exercise 1.
- Return the tuple `(output, weights)`: `weights` of shape `(batch, num_queries, num_keys)`
  are the masked softmax of the dot products of queries and keys divided by $\sqrt{d}$;
  `output` of shape `(batch, num_queries, d_v)` pools the values with these weights.
- Use `attn.masked_softmax` for the masking (the package's finished version of Exercise 1):
  the checks and the grading of this exercise then run on the course's masked softmax, so a
  mistake in your answer to Exercise 1 costs nothing here. (A release that withholds the
  package's version runs your own `masked_softmax` when you call `attn.masked_softmax` in your
  own cells.) Gradients must reach `queries`, `keys` and `values`. You may assume the shapes fit.
"""
from __future__ import annotations

import math
import warnings

from torch.nn import functional as F
import torch

from ... import functional as F_att
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from .ex1_masked_softmax import _ms_finite_mask

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# Inputs of the public and hidden checks ---------------------------------------------------


def _qkv(g, batch, num_queries, num_keys, d, d_v, dtype=torch.float32):
    return (torch.randn(batch, num_queries, d, generator=g, dtype=dtype),
            torch.randn(batch, num_keys, d, generator=g, dtype=dtype),
            torch.randn(batch, num_keys, d_v, generator=g, dtype=dtype))


def _sdpa_plain(seed):
    return [Call(args=_qkv(gen(seed), 2, 3, 5, 4, 6))]


def _sdpa_one_d(seed):
    return [Call(args=_qkv(gen(seed), 2, 3, 5, 4, 6) + (torch.tensor([3, 1]),))]


def _sdpa_zero(seed):
    q, k, v = _qkv(gen(seed), 2, 3, 4, 8, 2)
    return [Call(args=(q, k, v), kwargs={"valid_lens": torch.tensor([[0, 2, 4], [1, 0, 3]])})]


def _sdpa_random(seed):
    g = gen(seed)
    batch, num_queries, num_keys = randint(g, 2, 5), randint(g, 1, 6), randint(g, 2, 9)
    d, d_v = randint(g, 16, 64), randint(g, 1, 7)
    q, k, v = _qkv(g, batch, num_queries, num_keys, d, d_v)
    lens = torch.randint(0, num_keys + 1, (batch,), generator=g)
    lens[0] = max(1, int(lens[0]))
    return [Call(args=(q, k, v)), Call(args=(q, k, v, lens))]


def _sdpa_grad(seed):
    g = gen(seed)
    q, k, v = _qkv(g, 2, 4, 6, 8, 3, dtype=torch.float64)
    lens = torch.tensor([[2, 6, 1, 4], [3, 3, 5, 6]])
    return [Call(args=(q, k, v, lens), grads_of=(0, 1, 2))]


# Kept mistakes, each with its hint --------------------------------------------------------


def _sdpa_with(scale_of, use_lens=True, softmax=F_att.masked_softmax):
    def attention(queries, keys, values, valid_lens=None):
        scores = queries @ keys.transpose(1, 2) / scale_of(queries.shape[-1], values.shape[-1])
        weights = softmax(scores, valid_lens if use_lens else None)
        return weights @ values, weights
    return attention


_sdpa_by_d = mistakes.add("scaled by d",
                          "the scores are divided by d; the variance argument gives sqrt(d).",
                          _sdpa_with(lambda d, d_v: d))


_sdpa_unscaled = mistakes.add("no scaling",
                              "the scores are not scaled: divide the dot products by sqrt(d).",
                              _sdpa_with(lambda d, d_v: 1.0))


_sdpa_no_mask = mistakes.add("valid_lens ignored",
                             "valid_lens is ignored: padded keys still get weight.",
                             _sdpa_with(lambda d, d_v: math.sqrt(d), use_lens=False))


_sdpa_by_dv = mistakes.add("scaled by sqrt(d_v)",
                           "the scores are divided by the square root of the values' size d_v; the scale comes "
                           "from the size d that the dot product sums over (queries and keys).",
                           _sdpa_with(lambda d, d_v: math.sqrt(d_v)))


_sdpa_d2l_mask = mistakes.add("d2l's -1e6 masked softmax",
                              "a query with no valid key got uniform weights over the padding (a masked softmax that "
                              "fills with a finite -1e6, like d2l's); such a query must get zero weights and a zero "
                              "output, as attn.masked_softmax gives.",
                              _sdpa_with(lambda d, d_v: math.sqrt(d), softmax=_ms_finite_mask))


_T_HINT = ("keys.T on a 3-D tensor reverses all three axes: keys of shape (batch, num_keys, d) became "
           "(d, num_keys, batch), which cannot multiply queries of shape (batch, num_queries, d) (or pairs "
           "the wrong axes when the sizes happen to agree). The product needs keys of shape (batch, d, "
           "num_keys): swap only the last two axes, with keys.transpose(1, 2) or keys.mT.")


def _reversed(keys):
    """keys.T, without torch's deprecation warning (printed in a student's notebook whenever the
    kept mistakes run on a failed check)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return keys.T


@mistakes.keep("keys.T on 3-D keys", _T_HINT)
def _sdpa_dot_T(queries, keys, values, valid_lens=None):
    scores = queries @ _reversed(keys) / math.sqrt(queries.shape[-1])
    weights = F_att.masked_softmax(scores, valid_lens)
    return weights @ values, weights


@mistakes.keep("keys.T on 3-D keys, in torch.bmm", _T_HINT)
def _sdpa_bmm_T(queries, keys, values, valid_lens=None):
    scores = torch.bmm(queries, _reversed(keys)) / math.sqrt(queries.shape[-1])
    weights = F_att.masked_softmax(scores, valid_lens)
    return torch.bmm(weights, values), weights


@mistakes.keep("output and weights swapped",
               "your values are right but come back in the wrong order: you returned (weights, output); "
               "the contract asks for the tuple (output, weights).")
def _sdpa_swapped(queries, keys, values, valid_lens=None):
    # Right values, returned in the wrong order: (weights, output).
    output, weights = F_att.scaled_dot_product_attention(queries, keys, values, valid_lens)
    return weights, output


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("d2l's DotProductAttention",
                   "torch.bmm with keys.transpose(1, 2), math.sqrt(d)")
def _sdpa_alt_d2l(queries, keys, values, valid_lens=None):
    """d2l's DotProductAttention.forward as a function (no dropout), returning the weights too."""
    d = queries.shape[-1]
    scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
    attention_weights = F_att.masked_softmax(scores, valid_lens)
    return torch.bmm(attention_weights, values), attention_weights


@alternatives.keep("torch's fused SDPA",
                   "F.scaled_dot_product_attention with a boolean mask for the "
"output, the weights from the masked softmax")
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


@alternatives.keep("loops over the batch",
                   "one sequence at a time, 2-D products, torch.stack")
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


@alternatives.keep("float64 inside",
                   "computed in float64, cast back")
def _sdpa_alt_float64(queries, keys, values, valid_lens=None):
    """Everything in float64, cast back to the inputs' dtype at the end."""
    q, k, v = queries.double(), keys.double(), values.double()
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.size(-1))
    w = F_att.masked_softmax(scores, valid_lens)
    return torch.matmul(w, v).to(queries.dtype), w.to(queries.dtype)


# Registration -----------------------------------------------------------------------------

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
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
