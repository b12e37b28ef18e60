"""ch05_ex2: Dropout on attention weights.

Write `attention_dropout(weights, p, training=True)` for attention weights of any shape (for
example `(batch, num_queries, num_keys)`, float dtype). In training mode, set each weight to zero
independently with probability `p` (draw the randomness from torch's global generator, e.g. with
`torch.rand_like`) and multiply every kept weight by $1/(1-p)$. When `training` is `False`,
return the weights unchanged (a tensor equal to `weights`, same dtype and shape); `p = 0`
changes nothing either. Raise `ValueError` (with any message) when `p` is not in $[0, 1)$, in
both modes. The output has the dtype and shape of
`weights`.

The checks compare *properties* of many seeded draws with eval mode: which fraction of the
weights is zero, by which factor the others were multiplied, whether the mean of the draws
approaches the unchanged weights (within 6 standard errors), how much the draws vary, and (with
weights that are all equal) whether two rows, columns or batch entries come out with the same
drop pattern far more often than independent drops allow. They also pass float64 weights. Your
random draws need not match anyone else's.
"""
from __future__ import annotations

from torch import nn
import torch
import torch.nn.functional as F

from ...checks.dropout_checks import draw_calls, dropout_compare
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def attention_dropout(weights, p, training=True):
    """Inverted dropout on attention weights: zero each with probability p, scale the rest by 1/(1-p)."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"p must satisfy 0 <= p < 1, got p={p!r}")
    if not training or p == 0:
        return weights.clone()
    return F.dropout(weights, p=p, training=True)


# Inputs of the public and hidden checks ---------------------------------------------------


def _softmax_weights(g, batch, n):
    return torch.softmax(torch.randn(batch, n, n, generator=g) * 2.0, dim=-1)


_DRAWS = range(100, 140)  # 40 training-mode draws, one call seed each


def _dropout_draw_calls(weights, p):
    return draw_calls(lambda train, s: Call(args=(weights, p), kwargs={"training": train}, call_seed=s),
                      _DRAWS, p)


def _dropout_train_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return _dropout_draw_calls(_softmax_weights(g, 2, 6), 0.25)


def _dropout_big_calls(seed):
    # One large draw: the fraction of zeros and the common factor are measured precisely.
    g = torch.Generator().manual_seed(seed)
    w = _softmax_weights(g, 4, 32)
    return [Call(args=(w, 0.3), kwargs={"training": False}, call_seed=1)] + \
        [Call(args=(w, 0.3), kwargs={"training": True}, call_seed=s) for s in range(200, 232)]


def _dropout_train_random_p_calls(seed):
    # float64 weights: the draws keep the dtype of weights.
    g = torch.Generator().manual_seed(seed)
    p = round(0.2 + 0.2 * torch.rand((), generator=g).item(), 3)  # away from 0.5: 1/p differs from 1/(1-p)
    return _dropout_draw_calls(_softmax_weights(g, 3, 7).double(), p)


def _dropout_uniform_calls(seed):
    # Every weight equal (1/6) in a batch of 2: rows, columns and batch entries all have the same
    # eval values, so any shared drop pattern shows as identical slices (see dropout_checks).
    # At its own seed (0) the draws have call seeds 100 to 139 (what a release ships); at a grading
    # seed, 40 other consecutive call seeds drawn from that seed, and other eval-mode call seeds.
    w = torch.full((2, 6, 6), 1.0 / 6)
    if seed == 0:
        return _dropout_draw_calls(w, 0.3)
    first = 1000 + int(torch.randint(0, 1_000_000, (), generator=torch.Generator().manual_seed(seed)))
    return draw_calls(lambda train, s: Call(args=(w, 0.3), kwargs={"training": train}, call_seed=s),
                      range(first, first + len(_DRAWS)), 0.3, eval_seeds=(first - 2, first - 1))


def _dropout_eval_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=(_softmax_weights(g, 2, 5), 0.5), kwargs={"training": False}, call_seed=seed),
            Call(args=(_softmax_weights(g, 1, 7), 0.1), kwargs={"training": False}, call_seed=seed),
            Call(args=(_softmax_weights(g, 2, 4).double(), 0.3), kwargs={"training": False}, call_seed=seed)]


def _dropout_p0_calls(seed):
    g = torch.Generator().manual_seed(seed)
    return [Call(args=(_softmax_weights(g, 2, 6), 0.0), kwargs={"training": True}, call_seed=seed),
            Call(args=(_softmax_weights(g, 2, 3).double(), 0.0), kwargs={"training": True}, call_seed=seed)]


def _dropout_bad_calls(seed):
    g = torch.Generator().manual_seed(seed)
    w = _softmax_weights(g, 1, 4)
    return [Call(args=(w, 1.0), kwargs={"training": True}),
            Call(args=(w, -0.25), kwargs={"training": True}),
            Call(args=(w, 1.5), kwargs={"training": False})]


_compare_dropout = dropout_compare(p_of=lambda call: call.args[1],
                                   is_train=lambda call: call.kwargs.get("training", True),
                                   elementwise=True)


_compare_dropout_independent = dropout_compare(
    p_of=lambda call: call.args[1], is_train=lambda call: call.kwargs.get("training", True),
    elementwise=True, independent_along=(-1, -2, 0),
    axis_names={-1: "columns (same key, different queries)", -2: "rows (same query, different keys)",
                0: "batch entries"})


# Kept mistakes, each with its hint --------------------------------------------------------


class _DropoutVariant:
    """A wrong attention_dropout, wrong in one way only; validates p like the reference."""

    def __init__(self, keep_is_p=False, scale="inverse", in_eval=False, shared=None):
        self.keep_is_p, self.scale, self.in_eval = keep_is_p, scale, in_eval
        self.shared = shared  # None, or the axis along which one draw is shared: "row", "column", "batch"

    def __call__(self, weights, p, training=True):
        if not 0.0 <= p < 1.0:
            raise ValueError(f"p must satisfy 0 <= p < 1, got p={p!r}")
        if (not training and not self.in_eval) or p == 0:
            return weights.clone()
        keep_prob = p if self.keep_is_p else 1.0 - p
        shape = list(weights.shape)
        if self.shared == "row":
            shape[-1] = 1
        elif self.shared == "column":
            shape[-2] = 1
        elif self.shared == "batch":
            shape = shape[-2:]
        keep = (torch.rand(shape, dtype=weights.dtype) < keep_prob).expand_as(weights)
        factor = {"inverse": 1.0 / keep_prob, "none": 1.0, "same": keep_prob, "one_over_p": 1.0 / p}[self.scale]
        return weights * keep * factor


mistakes.add("no rescaling",
             "the kept weights are not rescaled, so the expected value of each weight shrinks by the "
             "factor 1 - p; compensate for the weights that were dropped.",
             _DropoutVariant(scale="none"))


mistakes.add("scaled by the keep probability",
             "you multiplied the kept weights by the keep probability, which shrinks them further; "
             "the expected value is preserved by the opposite operation.",
             _DropoutVariant(scale="same"))


mistakes.add("scaled by 1/p (LLMs-from-scratch #431)",
             "the kept weights are multiplied by 1/p; a weight survives with probability 1 - p, so "
             "the factor that keeps its expected value is 1/(1 - p).",
             _DropoutVariant(scale="one_over_p"))


mistakes.add("p taken as the keep probability",
             "p is the probability of DROPPING a weight, not of keeping it.",
             _DropoutVariant(keep_is_p=True))


mistakes.add("dropout active in eval mode",
             "dropout is still applied when training is False; in eval mode the weights must pass "
             "through unchanged.",
             _DropoutVariant(in_eval=True))


mistakes.add("one draw per query row",
             "one random draw was shared by a whole row of weights (a mask of shape (..., num_queries, 1) "
             "broadcast over the keys), so a query keeps or loses all its weights at once; each weight "
             "is dropped on its own.",
             _DropoutVariant(shared="row"))


mistakes.add("one draw per key column",
             "one random draw was shared by a whole column of weights (a mask of shape "
             "(..., 1, num_keys)), so a key is dropped for every query at once; each weight is dropped "
             "on its own.",
             _DropoutVariant(shared="column"))


mistakes.add("one mask shared by the batch",
             "one (num_queries, num_keys) mask was drawn and shared by every batch entry; each weight "
             "of each batch entry is dropped on its own (draw a mask of the full shape of weights).",
             _DropoutVariant(shared="batch"))


mistakes.add("float32 output for float64 weights",
             "the result is float32 although the weights are float64; return the dtype of weights.",
             lambda weights, p, training=True: attention_dropout(weights.float(), p, training))


@mistakes.keep("no validation of p",
               "p = 1 (or a negative p) must raise ValueError: with p = 1 every weight is "
               "dropped and the rescaling factor is infinite.")
def _dropout_unvalidated(weights, p, training=True):
    return F.dropout(weights, p=p, training=training)


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("rand_like >= p",
                   "keep where torch.rand_like(w) >= p, scale by 1/(1-p)")
def _dropout_alt_rand_ge(weights, p, training=True):
    # The chapter's method: keep where a uniform draw is >= p, scale by 1/(1-p).
    if not 0 <= p < 1:
        raise ValueError(f"dropout probability p={p} must lie in [0, 1)")
    if not training:
        return weights
    keep = torch.rand_like(weights) >= p
    return weights * keep / (1 - p)


@alternatives.keep("d2l's dropout_layer",
                   "float mask (torch.rand(X.shape) > p) times X / (1 - p)")
def _dropout_alt_d2l(X, p, training=True):
    # d2l's dropout_layer: a float mask from torch.rand(X.shape) > p.
    if p < 0 or p >= 1:
        raise ValueError(f"p must be in [0, 1), got {p}")
    if not training or p == 0:
        return X.clone()
    mask = (torch.rand(X.shape) > p).float()
    return mask * X / (1.0 - p)


@alternatives.keep("bernoulli in float64",
                   "torch.bernoulli keep mask, float64 arithmetic, cast back")
def _dropout_alt_bernoulli64(weights, p, training=True):
    # torch.bernoulli keep mask, arithmetic in float64, cast back.
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
        raise ValueError("attention_dropout: p=%r is not a probability below 1" % (p,))
    if not training:
        return weights.clone()
    keep = torch.bernoulli(torch.full(weights.shape, 1.0 - p, dtype=torch.float64))
    return (weights.double() * keep / (1.0 - p)).to(weights.dtype)


@alternatives.keep("an nn.Dropout layer",
                   "nn.Dropout(p) switched with train(training)")
def _dropout_alt_module(weights, p, training=True):
    # An nn.Dropout layer switched to the requested mode.
    if not (0.0 <= p < 1.0):
        raise ValueError(f"expected 0 <= p < 1, got p={p}")
    layer = nn.Dropout(p)
    layer.train(training)
    return layer(weights)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch05_ex2", title="Dropout on attention weights", name="attention_dropout",
    reference=attention_dropout, points=1,
    checks=[
        Check("training mode, p=0.25: 40 seeded draws against eval mode (zeros, 1/(1-p), mean)",
              _dropout_train_calls, compare=_compare_dropout,
              hint="this check compares 40 training-mode draws (each with its own seed) with eval mode: "
                   "which entries are zero, by which factor the others were multiplied, and whether their "
                   "mean approaches the unchanged weights."),
        Check("uniform weights (2 x 6 x 6), p=0.3: each weight dropped on its own",
              _dropout_uniform_calls, compare=_compare_dropout_independent,
              hint="this check passes weights that are all equal (1/6) and compares 40 training-mode draws "
                   "with eval mode: besides the zeros, the factor and the mean, no two rows, columns or batch "
                   "entries may share one drop pattern, because each weight is zeroed independently."),
        Check("eval mode returns the weights unchanged (float32 and float64)", _dropout_eval_calls,
              hint="this check calls your function with training=False, also on float64 weights, and "
                   "compares with the weights: same values, dtype and shape."),
        Check("p outside [0, 1) raises ValueError", _dropout_bad_calls, weight=0.5,
              hint="this check passes p = 1.0, -0.25 and (in eval mode) 1.5: validate p in both modes."),
        Check("4 x 32 x 32 weights, p=0.3: fraction of zeros and the common factor (hidden)", _dropout_big_calls,
              public=False, compare=_compare_dropout,
              hint="this check measures the fraction of zeroed weights and the factor of the kept ones."),
        Check("training mode with another p, float64 weights (hidden)", _dropout_train_random_p_calls,
              public=False, compare=_compare_dropout,
              hint="this check repeats the 40-draw comparison with another p on float64 weights; the "
                   "draws keep the dtype of weights."),
        Check("p=0 in training mode changes nothing (hidden)", _dropout_p0_calls, public=False,
              hint="this check calls your function with p=0 in training mode (float32 and float64 weights) "
                   "and compares with the weights: same values, dtype and shape."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
