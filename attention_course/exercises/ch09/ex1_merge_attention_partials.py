r"""ch09_ex1: Merging two partial attention results.

Split the keys of an attention computation into two disjoint sets $A$ and $B$. For the same
queries, the result over each set is given as its normalised output and its log-sum-exp:
`out_a` (float tensor of shape `(..., num_queries, d_v)`) is the attention output over the keys of
$A$ (weights that sum to 1 over $A$), and `lse_a` (shape `(..., num_queries)`) is
$\log \sum_{j \in A} e^{s_j}$, where $s_j$ are the already scaled scores; likewise `out_b`, `lse_b`
for $B$. Write `merge_attention_partials(out_a, lse_a, out_b, lse_b)` that returns the tuple
`(out, lse)`: the attention output over $A \cup B$ (shape and dtype of `out_a`) and its log-sum-exp
(shape and dtype of `lse_a`).

It must stay exact and finite, in float32 and in float64, for log-sum-exps up to 1,000 ($e^{x}$
overflows float32 above about 88 and float64 above about 709). A set in which a query sees no key
has `lse = -inf` and an all-zero output for that query: it must contribute nothing, and a query with `-inf` in both gets an all-zero output and
`lse = -inf` (never NaN). Raise `ValueError` naming `out_a` and `out_b` and giving their shapes when
their shapes differ, and naming `lse_a` (or `lse_b`) and giving its shape when it is not
`out_a.shape[:-1]`.
"""
from __future__ import annotations

import math

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import NEG_INF

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _validate_partials(out_a, lse_a, out_b, lse_b):
    if tuple(out_a.shape) != tuple(out_b.shape):
        raise ValueError(f"out_a and out_b must have the same shape, got out_a {tuple(out_a.shape)} "
                         f"and out_b {tuple(out_b.shape)}")
    for name, lse in (("lse_a", lse_a), ("lse_b", lse_b)):
        if tuple(lse.shape) != tuple(out_a.shape[:-1]):
            raise ValueError(f"{name} must have shape {tuple(out_a.shape[:-1])} (out_a without its last "
                             f"axis), got {name} of shape {tuple(lse.shape)}")


def merge_attention_partials(out_a, lse_a, out_b, lse_b):
    """Attention over key sets A and B from the results over each: returns (out, lse)."""
    _validate_partials(out_a, lse_a, out_b, lse_b)
    lse = torch.logaddexp(lse_a, lse_b)
    # Both sets empty: lse is -inf and the weights below would be exp(-inf + inf) = NaN.
    shift = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    w_a = torch.exp(lse_a - shift)[..., None]
    w_b = torch.exp(lse_b - shift)[..., None]
    return w_a * out_a + w_b * out_b, lse


# Inputs of the public and hidden checks ---------------------------------------------------


def _partial(q, k, v):
    """Attention of q over k, v and its log-sum-exp, computed in float64 (float32 out)."""
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    out = torch.softmax(scores, dim=-1) @ v.double()
    return out.to(q.dtype), torch.logsumexp(scores, dim=-1).to(q.dtype)


def _split_call(g, lead, n_q, n_k, d, d_v, cut, scale=1.0, dtype=torch.float32):
    q = torch.randn(*lead, n_q, d, generator=g, dtype=torch.float64) * scale
    k = torch.randn(*lead, n_k, d, generator=g, dtype=torch.float64)
    v = torch.randn(*lead, n_k, d_v, generator=g, dtype=torch.float64)
    out_a, lse_a = _partial(q[..., :, :].to(dtype), k[..., :cut, :].to(dtype), v[..., :cut, :].to(dtype))
    out_b, lse_b = _partial(q.to(dtype), k[..., cut:, :].to(dtype), v[..., cut:, :].to(dtype))
    return Call(args=(out_a, lse_a, out_b, lse_b))


def _merge_main_calls(seed):
    g = gen(seed)
    return [_split_call(g, (), 3, 5, 4, 2, cut=2), _split_call(g, (2,), 4, 7, 3, 5, cut=6)]


def _merge_large_calls(seed):
    g = gen(seed)
    # Scores in the hundreds: exp(lse) overflows float32 (its largest value is about exp(88.7)).
    return [_split_call(g, (2,), 3, 8, 4, 3, cut=3, scale=120.0)]


def _shifted(call, low, high, g):
    """The call with every query's scores raised by its own constant drawn in [low, high): the
    outputs stay the same and both log-sum-exps rise by that constant."""
    out_a, lse_a, out_b, lse_b = call.args
    lift = low + (high - low) * torch.rand(lse_a.shape, generator=g, dtype=torch.float64)
    return Call(args=(out_a, (lse_a.double() + lift).to(lse_a.dtype), out_b,
                      (lse_b.double() + lift).to(lse_b.dtype)))


def _merge_huge_calls(seed):
    g = gen(seed)
    # Log-sum-exps from 750 to 1,000, beyond even float64's exp (about exp(709.8)), in both
    # dtypes; and one float32 call from 300 to 600, where only float32's exp overflows.
    return [_shifted(_split_call(g, (2,), 3, 8, 4, 3, cut=3, scale=3.0), 760.0, 985.0, g),
            _shifted(_split_call(g, (), 4, 6, 3, 2, cut=2, scale=3.0, dtype=torch.float64), 760.0, 985.0, g),
            _shifted(_split_call(g, (), 3, 5, 4, 2, cut=3, scale=3.0), 300.0, 600.0, g)]


def _merge_hidden_huge_calls(seed):
    g = gen(seed)
    calls = []
    for dtype in (torch.float32, torch.float64):
        lead = tuple(randint(g, 1, 3) for _ in range(randint(g, 0, 2)))
        n_k = randint(g, 2, 9)
        call = _split_call(g, lead, randint(g, 1, 5), n_k, randint(g, 1, 6), randint(g, 1, 4),
                           cut=randint(g, 1, n_k - 1), scale=float(randint(g, 1, 5)), dtype=dtype)
        calls.append(_shifted(call, 760.0, 985.0, g))
    return calls


def _merge_empty_calls(seed):
    g = gen(seed)
    call = _split_call(g, (), 4, 6, 3, 2, cut=3, scale=120.0)
    out_a, lse_a, out_b, lse_b = (t.clone() for t in call.args)
    # Query 1 sees no key of A; query 2 sees no key of B; query 3 sees no key at all.
    lse_a[1], out_a[1] = NEG_INF, 0.0
    lse_b[2], out_b[2] = NEG_INF, 0.0
    lse_a[3], out_a[3], lse_b[3], out_b[3] = NEG_INF, 0.0, NEG_INF, 0.0
    return [Call(args=(out_a, lse_a, out_b, lse_b))]


def _merge_bad_calls(seed):
    g = gen(seed)
    out = torch.randn(2, 3, 4, generator=g)
    lse = torch.randn(2, 3, generator=g)
    return [Call(args=(out, lse, torch.randn(2, 3, 5, generator=g), lse)),
            Call(args=(out, lse, out, torch.randn(3, 2, generator=g)))]


def _merge_must_mention(call):
    out_a, lse_a, out_b, lse_b = call.args
    if out_a.shape != out_b.shape:
        return ["out_a", "out_b", tuple(out_a.shape), tuple(out_b.shape)]
    name, lse = ("lse_a", lse_a) if lse_a.shape != out_a.shape[:-1] else ("lse_b", lse_b)
    return [name, tuple(lse.shape)]


def _merge_hidden_calls(seed):
    g = gen(seed)
    calls = []
    for dtype in (torch.float32, torch.float32, torch.float64):
        lead = tuple(randint(g, 1, 3) for _ in range(randint(g, 0, 2)))
        n_k = randint(g, 2, 9)
        calls.append(_split_call(g, lead, randint(g, 1, 5), n_k, randint(g, 1, 6), randint(g, 1, 4),
                                 cut=randint(g, 1, n_k - 1), scale=float(randint(g, 1, 60)), dtype=dtype))
    return calls


def _merge_hidden_extreme_calls(seed):
    g = gen(seed)
    call = _split_call(g, (2,), 5, 9, 4, 3, cut=randint(g, 2, 7), scale=float(randint(g, 80, 200)))
    out_a, lse_a, out_b, lse_b = (t.clone() for t in call.args)
    rows = torch.randperm(5, generator=g)
    lse_a[0, rows[0]], out_a[0, rows[0]] = NEG_INF, 0.0
    lse_b[1, rows[1]], out_b[1, rows[1]] = NEG_INF, 0.0
    lse_a[1, rows[2]], out_a[1, rows[2]], lse_b[1, rows[2]], out_b[1, rows[2]] = NEG_INF, 0.0, NEG_INF, 0.0
    return [Call(args=(out_a, lse_a, out_b, lse_b))]


_MERGE_HINT = ("this check compares the returned (out, lse) with those of attention over all keys: each "
               "part counts in proportion to its share exp(lse_part - lse) of the total, lse being the "
               "log-sum-exp of the union; the reason above names the first item that differs.")


# Kept mistakes, each with its hint --------------------------------------------------------


def _merge_checked(body):
    def impl(out_a, lse_a, out_b, lse_b):
        _validate_partials(out_a, lse_a, out_b, lse_b)
        return body(out_a, lse_a, out_b, lse_b)
    return impl


def _merge_unweighted(out_a, lse_a, out_b, lse_b):
    return out_a + out_b, torch.logaddexp(lse_a, lse_b)


mistakes.add("outputs added without weights",
             "each part's output is already normalised over its own keys; adding them counts every "
             "part fully. Weigh each by its share exp(lse_part - lse) of the union's sum.",
             _merge_checked(_merge_unweighted))


def _merge_plain_exp(out_a, lse_a, out_b, lse_b):
    e_a, e_b = torch.exp(lse_a), torch.exp(lse_b)
    total = e_a + e_b
    return (e_a / total)[..., None] * out_a + (e_b / total)[..., None] * out_b, torch.log(total)


mistakes.add("exp of the log-sum-exps",
             "you exponentiated lse_a and lse_b directly: above about 88 that is inf in float32, and "
             "inf / inf is NaN. Subtract the larger (or the merged) lse before exponentiating.",
             _merge_checked(_merge_plain_exp))


def _merge_float64_unshifted(out_a, lse_a, out_b, lse_b):
    e_a, e_b = torch.exp(lse_a.double()), torch.exp(lse_b.double())
    total = e_a + e_b
    safe = torch.where(total > 0, total, torch.ones_like(total))
    out = (e_a[..., None] * out_a.double() + e_b[..., None] * out_b.double()) / safe[..., None]
    return out.to(out_a.dtype), torch.log(total).to(lse_a.dtype)


mistakes.add("exp of the log-sum-exps in float64",
             "you exponentiated lse_a and lse_b without subtracting anything first, in float64: that "
             "holds up to about exp(709), so log-sum-exps near 800 still overflow to inf and inf / inf "
             "is NaN. A wider dtype only moves the limit; subtract the larger (or the merged) lse "
             "before exponentiating.",
             _merge_checked(_merge_float64_unshifted))


def _merge_max_lse(out_a, lse_a, out_b, lse_b):
    out, _ = merge_attention_partials(out_a, lse_a, out_b, lse_b)
    return out, torch.maximum(lse_a, lse_b)


mistakes.add("lse of the union is the larger lse",
             "the log-sum-exp of the union is log(exp(lse_a) + exp(lse_b)), not max(lse_a, lse_b): "
             "the smaller part still adds to the sum.",
             _merge_checked(_merge_max_lse))


def _merge_nan_when_empty(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_a - lse)[..., None] * out_a + torch.exp(lse_b - lse)[..., None] * out_b, lse


mistakes.add("NaN when both parts are empty",
             "when both lse are -inf, lse_a - lse is -inf - (-inf) = NaN; such a query must get a zero "
             "output and lse = -inf.",
             _merge_checked(_merge_nan_when_empty))


@mistakes.keep("no shape check",
               "shapes that do not fit must raise ValueError naming the arguments and their shapes; "
               "without the check they are broadcast silently or fail deep inside with another error.")
def _merge_unchecked(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    shift = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    return torch.exp(lse_a - shift)[..., None] * out_a + torch.exp(lse_b - shift)[..., None] * out_b, lse


# Kept alternatives (correct answers in other styles) --------------------------------------


def _alt_merge_softmax_of_two(out_a, lse_a, out_b, lse_b):
    # The mixing weights are a softmax over the two log-sum-exps.
    stacked = torch.stack([lse_a, lse_b])
    weights = torch.nan_to_num(torch.softmax(stacked, dim=0), nan=0.0)
    out = weights[0][..., None] * out_a + weights[1][..., None] * out_b
    return out, torch.logsumexp(stacked, dim=0)


alternatives.add("softmax of the two lse",
                 "stack the two lse, softmax over them, torch.logsumexp",
                 _merge_checked(_alt_merge_softmax_of_two))


def _alt_merge_float64_by_hand(out_a, lse_a, out_b, lse_b):
    a, b = lse_a.double(), lse_b.double()
    top = torch.maximum(a, b)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    e_a, e_b = torch.exp(a - top), torch.exp(b - top)
    total = e_a + e_b
    safe = torch.where(total > 0, total, torch.ones_like(total))
    out = (e_a[..., None] * out_a.double() + e_b[..., None] * out_b.double()) / safe[..., None]
    lse = top + torch.log(total)          # log(0) = -inf when both sets are empty
    return out.to(out_a.dtype), lse.to(lse_a.dtype)


alternatives.add("float64 by hand",
                 "explicit max shift and division, computed in float64",
                 _merge_checked(_alt_merge_float64_by_hand))


def _alt_merge_running_state(out_a, lse_a, out_b, lse_b):
    # The chapter's (m, l, acc) state: a normalised part is m = lse, l = 1, acc = out.
    m = torch.maximum(lse_a, lse_b)
    m_safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    scale_a, scale_b = torch.exp(lse_a - m_safe), torch.exp(lse_b - m_safe)
    l = scale_a + scale_b
    acc = scale_a[..., None] * out_a + scale_b[..., None] * out_b
    out = torch.where(l[..., None] > 0, acc / l.clamp_min(1e-30)[..., None], torch.zeros_like(acc))
    return out, m_safe + torch.log(l)


alternatives.add("running state",
                 "the chapter's (m, l, acc) state with m = lse and l = 1",
                 _merge_checked(_alt_merge_running_state))


def _alt_merge_sigmoid(out_a, lse_a, out_b, lse_b):
    # Two-way softmax = sigmoid of the difference; log1p for the log-sum-exp.
    diff = lse_a - lse_b
    w_a = torch.nan_to_num(torch.sigmoid(diff), nan=0.0)
    w_b = torch.where(torch.isneginf(lse_a) & torch.isneginf(lse_b), torch.zeros_like(w_a), 1 - w_a)
    big = torch.maximum(lse_a, lse_b)
    gap = torch.nan_to_num(diff.abs(), nan=float("inf"))
    lse = big + torch.log1p(torch.exp(-gap))
    return w_a[..., None] * out_a + w_b[..., None] * out_b, lse


alternatives.add("sigmoid of the difference",
                 "two-way softmax as a sigmoid, log1p for lse",
                 _merge_checked(_alt_merge_sigmoid))


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch09_ex1", title="Merging two partial attention results", name="merge_attention_partials",
    reference=merge_attention_partials, points=2,
    checks=[
        Check("keys split in two: the merge equals attention over all keys", _merge_main_calls,
              hint=_MERGE_HINT),
        Check("scores in the hundreds (lse > 150): finite and exact", _merge_large_calls, atol=1e-4,
              hint="this check uses log-sum-exps above 150 (exp of anything above about 88 is inf in "
                   "float32): out and lse must be finite and equal those of attention over all keys."),
        Check("log-sum-exps from 750 to 1,000 in float32 and float64 (and 300 to 600 in float32)",
              _merge_huge_calls, atol=2e-4,
              hint="this check raises every query's scores by a constant, so the log-sum-exps reach 750 to "
                   "1,000 (exp overflows above about 88 in float32 and about 709 in float64) while the "
                   "outputs stay those of attention over all keys: out and lse must be finite and equal."),
        Check("a part with no visible key (lse = -inf), and a query with none at all", _merge_empty_calls,
              hint="this check has a part with no visible key (lse = -inf) and a query with none at all: "
                   "an empty part weighs 0; a query with no visible key gets an all-zero output and "
                   "lse = -inf, never NaN."),
        Check("shapes that do not fit raise ValueError naming the arguments and shapes", _merge_bad_calls,
              must_mention=_merge_must_mention, weight=0.5,
              hint="compare out_a.shape with out_b.shape, and each lse's shape with out_a.shape[:-1], "
                   "before computing; name the arguments and give their shapes."),
        Check("random sizes, leading axes and float64 (hidden)", _merge_hidden_calls, public=False,
              atol=1e-4, hint=_MERGE_HINT),
        Check("log-sum-exps from 750 to 1,000, random sizes, float32 and float64 (hidden)",
              _merge_hidden_huge_calls, public=False, atol=2e-4, hint=_MERGE_HINT),
        Check("large scores with empty parts", _merge_hidden_extreme_calls,
              atol=1e-4, hint=_MERGE_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
