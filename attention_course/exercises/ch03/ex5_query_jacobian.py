r"""ch03_ex5: How attention pooling moves with its query.

The page shows that a saturated softmax has small gradients, but it never works out how the
*output* of scaled dot-product attention moves when the query moves. For one query
$\mathbf{q}$ of size $d$, keys $\mathbf{k}_1, \dots, \mathbf{k}_n$ and values
$\mathbf{v}_1, \dots, \mathbf{v}_n$, the weights are
$a_i = \operatorname{softmax}_i\big(\mathbf{k}_i^\top \mathbf{q} / \sqrt{d}\big)$ and the output
is $\mathbf{o} = \sum_i a_i \mathbf{v}_i$. Derive the Jacobian $\partial \mathbf{o} / \partial \mathbf{q}$,
a $d_v \times d$ matrix, with pen and paper, and write
`query_jacobian(queries, keys, values, factors=None)`,
which evaluates your formula for every query at once. The derivation is the point of the
exercise: compute the result from your formula, not with autograd (`backward`,
`torch.autograd`, `torch.func`). Neither the checks nor the grader can tell how you computed
your numbers: they compare them with the course's Jacobian, so a Jacobian produced by autograd
passes them without answering the exercise. Use autograd to test your formula, not to produce it.

- `queries`: `(m, d)`, `keys`: `(n, d)` with `n >= 1`, `values`: `(n, d_v)`, float tensors of
  one dtype (`float32` or `float64`). Or all three with one leading batch axis of the same
  size, `(batch, m, d)`, `(batch, n, d)` and `(batch, n, d_v)`: each batch entry is its own
  problem.
- Return a tensor of shape `(m, d_v, d)` (with a batch axis, `(batch, m, d_v, d)`) of the
  inputs' dtype. Entry `[j, r, c]` is the derivative of coordinate `r` of query `j`'s output
  with respect to coordinate `c` of query `j` (each output depends on its own query only).
- The result is finite for any finite inputs: the checks include scores of several hundred,
  where the softmax is one-hot to machine precision and the Jacobian is 0.
- When the last sizes of `queries` and `keys` differ, or `keys` and `values` have different
  numbers of rows, raise `ValueError` naming those two arguments and their shapes.
- The chapter's question, answered by the same function: called with `factors`, a list of positive
  numbers, and one query (`queries` of shape `(1, d)`, no batch axis), it returns instead a list of
  those factors, from the one at which the Jacobian of the query `factor * queries[0]` is largest
  to the one at which it is smallest, in Frobenius norm (the square root of the sum of the squared
  entries). The checks leave clear gaps between the sizes.

Before you call it on the keys and values of the running example's first sequence with the
query $(1, 0.5, 0, 0)$ and `factors=[1, 10, 100]`, predict the order. What happens to the
Jacobian as the softmax saturates, and what does that say about the $1/\sqrt{d}$ scale the
chapter argues for?
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ...checks.checking import tensor_problem
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import ERROR_WEIGHT, Kept, gen, randint, shape_of

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _check_sizes(queries, keys, values):
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(f"queries of shape {shape_of(queries)} and keys of shape {shape_of(keys)} "
                         "have different last sizes d")
    if keys.shape[-2] != values.shape[-2]:
        raise ValueError(f"keys of shape {shape_of(keys)} and values of shape {shape_of(values)} "
                         "have different numbers of rows n")


def _ordered_factors(queries, keys, values, factors):
    """The question's answer: the factors, from the largest Jacobian (Frobenius norm, float64) down."""
    q, k, v = queries.double(), keys.double(), values.double()
    sizes = [float(query_jacobian(f * q, k, v).norm()) for f in factors]
    return [factors[i] for i in sorted(range(len(factors)), key=lambda i: -sizes[i])]


def query_jacobian(queries, keys, values, factors=None):
    """Reference: d o / d q = (1/sqrt d) sum_i a_i (v_i - o)(k_i - kbar)^T, a covariance of the
    values and the keys under the attention weights (both sides centred, as derived)."""
    _check_sizes(queries, keys, values)
    if factors is not None:
        return _ordered_factors(queries, keys, values, factors)
    scale = 1.0 / math.sqrt(queries.shape[-1])
    weights = torch.softmax(queries @ keys.transpose(-1, -2) * scale, dim=-1)     # (..., m, n)
    out = weights @ values                                                         # (..., m, d_v)
    kbar = weights @ keys                                                          # (..., m, d)
    v_centred = values.unsqueeze(-3) - out.unsqueeze(-2)                           # (..., m, n, d_v)
    k_centred = keys.unsqueeze(-3) - kbar.unsqueeze(-2)                            # (..., m, n, d)
    return torch.einsum("...jn,...jnr,...jnc->...jrc", weights, v_centred, k_centred) * scale


# Inputs of the public and hidden checks ---------------------------------------------------


def _autograd_jacobian(queries, keys, values):
    """d output / d query by autograd in float64: the hidden check's second opinion (never shipped)."""
    q, k, v = queries.double(), keys.double(), values.double()
    batched = q.dim() == 3
    if not batched:
        q, k, v = q[None], k[None], v[None]
    blocks = []
    with torch.enable_grad():
        for b in range(q.shape[0]):
            def pooled(query, b=b):
                return torch.softmax(k[b] @ query / math.sqrt(query.shape[0]), dim=0) @ v[b]
            blocks.append(torch.stack([torch.autograd.functional.jacobian(pooled, q[b, j])
                                       for j in range(q.shape[1])]))
    result = torch.stack(blocks)
    return result if batched else result[0]


def _jacobian_problem(got, want, calls, truth=None):
    """What differs between the answer's Jacobians ``got`` and ``want`` (rtol 1e-4, atol 1e-5), or None;
    ``truth(call)``, where given, a float64 second opinion an answer may agree with instead."""
    for i, (g, w, call) in enumerate(zip(got, want, calls)):
        where = "the result" if len(calls) == 1 else f"call {i + 1} of {len(calls)}: the result"
        problem = tensor_problem(g, w, where, raised="")
        if problem:
            return problem
        mine, theirs = g["value"], w["value"]
        if torch.allclose(mine.double(), theirs.double(), rtol=1e-4, atol=1e-5, equal_nan=True):
            continue
        if not bool(torch.isfinite(mine).all()):
            return f"{where} has NaN or inf entries (it must stay finite)"
        expected = theirs.double() if truth is None else truth(call)
        gap = (mine.double() - expected).abs()
        over = gap > 1e-5 + 1e-4 * expected.abs()
        if bool(over.any()):
            index = tuple(int(x) for x in torch.nonzero(over)[0])
            return (f"{where} differs from the expected Jacobian by up to {gap.max().item():.3g}; "
                    f"first at index {index}: {mine[index].item():.6g} instead of {expected[index].item():.6g}")
    return None


def _against_the_course(got, want, calls):
    """The public checks' compare: against the course's Jacobian (stored in a release); nothing recomputed."""
    return _jacobian_problem(got, want, calls)


def _against_autograd(got, want, calls):
    """The hidden check's compare (never shipped): the course's Jacobian or autograd's in float64."""
    return _jacobian_problem(got, want, calls, truth=lambda call: _autograd_jacobian(*call.args))


_SMALL_SEED = 0  # check 0's own seed: the case by hand, as it ships


def _small_calls(seed):
    """One query in 2-D, three keys, values of size 3, by hand. Graded: query and keys turned in their
    plane (every score kept), keys reordered with their values, values redrawn."""
    queries = torch.tensor([[1.0, -0.5]])
    keys = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 1.0]])
    values = torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, -1.0], [1.0, 1.0, 0.0]])
    if seed != _SMALL_SEED:
        g = gen(seed)
        angle = float(torch.rand(1, generator=g)) * 2 * math.pi
        flip = 1.0 if float(torch.rand(1, generator=g)) < 0.5 else -1.0
        turn = torch.tensor([[math.cos(angle), -math.sin(angle)], [flip * math.sin(angle), flip * math.cos(angle)]])
        order = torch.randperm(3, generator=g)
        queries, keys = queries @ turn.T, (keys @ turn.T)[order]
        values = torch.round(torch.randn(3, 3, generator=g) * 4) / 2    # halves, easy by hand
    return [Call(args=(queries, keys, values))]


def _random_calls(seed):
    g = gen(seed)
    return [Call(args=(torch.randn(4, 5, generator=g), torch.randn(6, 5, generator=g),
                       torch.randn(6, 3, generator=g)))]


def _zero_calls(seed):
    """Three cases whose Jacobian is 0: one key; every key equal; every value equal."""
    g = gen(seed)
    queries = torch.randn(3, 4, generator=g)
    one_key = Call(args=(queries, torch.randn(1, 4, generator=g), torch.randn(1, 2, generator=g)))
    same_keys = Call(args=(queries, torch.randn(1, 4, generator=g).expand(5, 4).clone(),
                           torch.randn(5, 2, generator=g)))
    same_values = Call(args=(queries, torch.randn(5, 4, generator=g),
                             torch.randn(1, 2, generator=g).expand(5, 2).clone()))
    return [one_key, same_keys, same_values]


def _saturated_calls(seed):
    """Queries of length about 1000 against small-integer keys: each query's best score leads the
    next by at least 100 / sqrt(3), so the softmax is one-hot and the Jacobian 0 (float32)."""
    g = gen(seed)
    keys = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [-1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    queries = torch.tensor([[1000.0, -200.0, 0.0], [-100.0, 800.0, -900.0], [-600.0, 1500.0, 300.0]])
    return [Call(args=(queries, keys, torch.randn(5, 2, generator=g)))]


def _batched_calls(seed):
    g = gen(seed)
    return [Call(args=(torch.randn(2, 3, 4, generator=g, dtype=torch.float64),
                       torch.randn(2, 5, 4, generator=g, dtype=torch.float64),
                       torch.randn(2, 5, 3, generator=g, dtype=torch.float64))),
            Call(args=(torch.randn(3, 2, generator=g, dtype=torch.float64) * 2,
                       torch.randn(4, 2, generator=g, dtype=torch.float64),
                       torch.randn(4, 6, generator=g, dtype=torch.float64)))]


def _hidden_calls(seed):
    g = gen(seed)
    calls = []
    for dtype, spread in ((torch.float32, 1.0), (torch.float64, 1.0), (torch.float64, 300.0)):
        m, n, d, d_v = randint(g, 1, 5), randint(g, 1, 7), randint(g, 1, 9), randint(g, 1, 5)
        calls.append(Call(args=(torch.randn(m, d, generator=g, dtype=dtype) * spread,
                                torch.randn(n, d, generator=g, dtype=dtype),
                                torch.randn(n, d_v, generator=g, dtype=dtype))))
    batch, m, n, d, d_v = (randint(g, 1, 3), randint(g, 1, 4), randint(g, 2, 6), randint(g, 2, 6),
                           randint(g, 1, 4))
    calls.append(Call(args=(torch.randn(batch, m, d, generator=g), torch.randn(batch, n, d, generator=g),
                            torch.randn(batch, n, d_v, generator=g))))
    return calls


def _bad_calls(seed):
    g = gen(seed)
    return [Call(args=(torch.randn(2, 3, generator=g), torch.randn(4, 3, generator=g),
                       torch.randn(4, 2, generator=g))),
            Call(args=(torch.randn(2, 3, generator=g), torch.randn(4, 5, generator=g),
                       torch.randn(4, 2, generator=g))),
            Call(args=(torch.randn(2, 3, generator=g), torch.randn(4, 3, generator=g),
                       torch.randn(5, 2, generator=g)))]


def _bad_words(call):
    queries, keys, values = call.args
    pair = ((("queries", queries), ("keys", keys)) if queries.shape[-1] != keys.shape[-1]
            else (("keys", keys), ("values", values)))
    return [name for name, _ in pair] + [shape_of(tensor) for _, tensor in pair]


def _clear_gaps(queries, keys, values, factors, floor=0.0):   # sizes 0.1 % apart, none below floor
    sizes = sorted(float(query_jacobian(f * queries.double(), keys.double(), values.double()).norm()) for f in factors)
    return sizes[0] > floor and all(b > a * 1.001 for a, b in zip(sizes, sizes[1:]))


def _question_calls(seed):
    """The running example's first sequence, query (1, 0.5, 0, 0); then two keys tied at the top. Graded: turned
    (scores and norms kept), keys reordered, factors shuffled and times 1/2 or 2 (with clear gaps)."""
    cases = [(torch.tensor([[1.0, 0.5, 0.0, 0.0]]),
              torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [-1.0, 0.0, 0.0, 1.0]]),
              torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 1.0]]), [10.0, 1.0, 100.0]),
             (torch.tensor([[1.0, 1.0]]), torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]]),
              torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]), [2.0, 100.0, 0.5])]
    calls, g = [], gen(seed)
    for queries, keys, values, factors in cases:
        if seed != 3:
            turn, twist = (torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))[0]
                           for n in (keys.shape[1], values.shape[1]))
            order = torch.randperm(keys.shape[0], generator=g)
            queries, keys, values = ((t.double() @ m).float() for t, m in
                                     ((queries, turn), (keys[order], turn), (values[order], twist)))
            scales = [(0.5, 2.0)[randint(g, 0, 1)], 1.0]    # 1: if the scale drawn leaves no clear gaps
            shuffled = [factors[i] for i in torch.randperm(len(factors), generator=g).tolist()]
            factors = next([f * c for f in shuffled] for c in scales
                           if _clear_gaps(queries, keys, values, [f * c for f in shuffled]))
        calls.append(Call(args=(queries, keys, values), kwargs={"factors": factors}))
    return calls


def _question_hidden_calls(seed):
    """Random sizes, one query, three or four factors from 0.1 to 30, kept where the sizes have clear gaps."""
    g = gen(seed)
    calls = []
    while len(calls) < 3:
        d, n, d_v = randint(g, 2, 6), randint(g, 2, 7), randint(g, 1, 4)
        queries = torch.randn(1, d, generator=g) * 2
        keys, values = torch.randn(n, d, generator=g), torch.randn(n, d_v, generator=g)
        factors = [round(0.1 * 300 ** float(torch.rand((), generator=g)), 2) for _ in range(randint(g, 3, 4))]
        if len(set(factors)) == len(factors) and _clear_gaps(queries, keys, values, factors, floor=1e-6):
            calls.append(Call(args=(queries, keys, values), kwargs={"factors": factors}))
    return calls


# Kept mistakes, each with its hint --------------------------------------------------------


def _stable_weights(queries, keys, scale):
    return torch.softmax(queries @ keys.transpose(-1, -2) * scale, dim=-1)


@mistakes.keep("transposed (d, d_v)",
               "each query's block has d rows and d_v columns; the Jacobian of an output of size d_v with "
               "respect to a query of size d has d_v rows (one per output coordinate) and d columns.")
def _jac_transposed(queries, keys, values, factors=None):   # the question answered as the reference does
    return query_jacobian(queries, keys, values, factors) if factors else query_jacobian(queries, keys, values).mT


@mistakes.keep("no 1/sqrt(d) in front",
               "your Jacobian is sqrt(d) times too large: the 1/sqrt(d) that scales the scores was left out "
               "of their derivatives with respect to the query.")
def _jac_unscaled(queries, keys, values, factors=None):
    return query_jacobian(queries, keys, values, factors) if factors else \
        query_jacobian(queries, keys, values) * math.sqrt(queries.shape[-1])


@mistakes.keep("weights from unscaled scores",
               "the weights in your formula come from the softmax of q.k without the division by sqrt(d); "
               "the weights of this exercise are those of the scaled scores.")
def _jac_unscaled_weights(queries, keys, values, factors=None):
    if factors is not None:   # a mistake in the Jacobian: the question answered as the reference does
        return _ordered_factors(queries, keys, values, factors)
    _check_sizes(queries, keys, values)
    d = queries.shape[-1]
    weights = _stable_weights(queries, keys, 1.0)
    out, kbar = weights @ values, weights @ keys
    v_centred = values.unsqueeze(-3) - out.unsqueeze(-2)
    k_centred = keys.unsqueeze(-3) - kbar.unsqueeze(-2)
    return torch.einsum("...jn,...jnr,...jnc->...jrc", weights, v_centred, k_centred) / math.sqrt(d)


@mistakes.keep("neither side centred",
               "your Jacobian behaves as if each weight a_i moved with its own score only: the softmax's "
               "denominator depends on every score, and its derivative is missing from your formula. "
               "One key, or all keys equal, must give 0.")
def _jac_uncentred(queries, keys, values, factors=None):
    if factors is not None:   # a mistake in the Jacobian: the question answered as the reference does
        return _ordered_factors(queries, keys, values, factors)
    _check_sizes(queries, keys, values)
    scale = 1.0 / math.sqrt(queries.shape[-1])
    weights = _stable_weights(queries, keys, scale)
    return torch.einsum("...jn,...nr,...nc->...jrc", weights, values, keys) * scale


@mistakes.keep("only the diagonal of the softmax's derivative",
               "your formula keeps only the derivative of each weight with respect to its own score and drops "
               "how the other scores move it: the weights share one denominator, so every score moves "
               "every weight.")
def _jac_diagonal_only(queries, keys, values, factors=None):
    if factors is not None:   # a mistake in the Jacobian: the question answered as the reference does
        return _ordered_factors(queries, keys, values, factors)
    _check_sizes(queries, keys, values)
    scale = 1.0 / math.sqrt(queries.shape[-1])
    weights = _stable_weights(queries, keys, scale)
    return torch.einsum("...jn,...nr,...nc->...jrc", weights * (1 - weights), values, keys) * scale


@mistakes.keep("keys centred by their plain mean",
               "the keys were centred by their plain average, which does not depend on the query; the "
               "centring in the Jacobian comes out of the softmax's derivative, so work out that step "
               "again to see which centre it produces.")
def _jac_plain_mean(queries, keys, values, factors=None):
    if factors is not None:   # a mistake in the Jacobian: the question answered as the reference does
        return _ordered_factors(queries, keys, values, factors)
    _check_sizes(queries, keys, values)
    scale = 1.0 / math.sqrt(queries.shape[-1])
    weights = _stable_weights(queries, keys, scale)
    k_centred = keys - keys.mean(dim=-2, keepdim=True)
    return torch.einsum("...jn,...nr,...nc->...jrc", weights, values, k_centred) * scale


@mistakes.keep("softmax without the max shift",
               "your weights are exp(score) over the sum of exp(score); with scores in the hundreds exp "
               "overflows to inf and inf / inf is NaN. Subtracting each row's largest score first (or "
               "torch.softmax, which does) leaves the weights unchanged and keeps them finite.")
def _jac_overflow(queries, keys, values, factors=None):
    if factors is not None:   # a mistake in the Jacobian: the question answered as the reference does
        return _ordered_factors(queries, keys, values, factors)
    _check_sizes(queries, keys, values)
    scale = 1.0 / math.sqrt(queries.shape[-1])
    e = torch.exp(queries @ keys.transpose(-1, -2) * scale)
    weights = e / e.sum(dim=-1, keepdim=True)
    out, kbar = weights @ values, weights @ keys
    v_centred = values.unsqueeze(-3) - out.unsqueeze(-2)
    k_centred = keys.unsqueeze(-3) - kbar.unsqueeze(-2)
    return torch.einsum("...jn,...jnr,...jnc->...jrc", weights, v_centred, k_centred) * scale


@mistakes.keep("larger scores, larger Jacobian",
               "you ordered the factors from the largest: a longer query gives larger scores, but a softmax "
               "pushed towards one key moves less, not more, when its query moves. Measure the Jacobian at "
               "each factor.")
def _jac_larger_is_steeper(queries, keys, values, factors=None):
    if factors is not None:
        _check_sizes(queries, keys, values)
        return sorted(factors, reverse=True)
    return query_jacobian(queries, keys, values)


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("loops in float64",
                   "plain Python loops over batch entries, queries and keys in float64, cast back at the end")
def _jac_alt_loops(queries, keys, values, factors=None):
    if queries.shape[-1] != keys.shape[-1] or keys.shape[-2] != values.shape[-2]:
        raise ValueError(f"shapes do not fit: queries {tuple(queries.shape)}, keys {tuple(keys.shape)}, "
                         f"values {tuple(values.shape)}")
    if factors is not None:   # Python floats: the sum of squares of each Jacobian
        sizes = {f: math.sqrt(sum(x * x for x in _jac_alt_loops(f * queries, keys, values).flatten().tolist()))
                 for f in factors}
        return sorted(factors, key=lambda f: sizes[f], reverse=True)
    flat = queries.dim() == 2
    q, k, v = (t.double()[None] if flat else t.double() for t in (queries, keys, values))
    d = q.shape[-1]
    result = torch.zeros(q.shape[0], q.shape[1], v.shape[-1], d, dtype=torch.float64)
    for b in range(q.shape[0]):
        for j in range(q.shape[1]):
            scores = [float(q[b, j] @ k[b, i]) / math.sqrt(d) for i in range(k.shape[1])]
            top = max(scores)
            expo = [math.exp(s - top) for s in scores]
            a = [x / sum(expo) for x in expo]
            o = sum(a[i] * v[b, i] for i in range(k.shape[1]))
            kbar = sum(a[i] * k[b, i] for i in range(k.shape[1]))
            for i in range(k.shape[1]):
                result[b, j] += a[i] * torch.outer(v[b, i] - o, k[b, i] - kbar) / math.sqrt(d)
    return (result[0] if flat else result).to(queries.dtype)


@alternatives.keep("second moment minus the product of means",
                   "einsum of sum_i a_i v_i k_i^T, minus o kbar^T: the covariance expanded, no centring")
def _jac_alt_expanded(queries, keys, values, factors=None):
    _check_sizes(queries, keys, values)
    if factors is not None:   # all factors at once, as a batch of queries
        stack = torch.tensor(factors, dtype=queries.dtype)[:, None] * queries[0]
        sizes = torch.linalg.matrix_norm(_jac_alt_expanded(stack, keys, values))
        return [factors[i] for i in sizes.argsort(descending=True).tolist()]
    scale = queries.shape[-1] ** -0.5
    logits = torch.einsum("...jc,...nc->...jn", queries, keys) * scale
    a = torch.exp(logits - torch.logsumexp(logits, dim=-1, keepdim=True))
    moment = torch.einsum("...jn,...nr,...nc->...jrc", a, values, keys)
    o, kbar = torch.einsum("...jn,...nr->...jr", a, values), torch.einsum("...jn,...nc->...jc", a, keys)
    return (moment - o.unsqueeze(-1) * kbar.unsqueeze(-2)) * scale


@alternatives.keep("only the keys centred",
                   "sum_i a_i v_i (k_i - kbar)^T: centring one side is enough, since sum_i a_i (k_i - kbar) = 0")
def _jac_alt_keys_centred(queries, keys, values, factors=None):
    _check_sizes(queries, keys, values)
    if factors is not None:   # in float64, the smallest first, then reversed
        sizes = [_jac_alt_keys_centred(f * queries.double(), keys.double(), values.double()).square().sum()
                 for f in factors]
        return [f for _, f in sorted(zip(sizes, factors))][::-1]
    scale = 1.0 / math.sqrt(queries.shape[-1])
    weights = torch.softmax(queries @ keys.transpose(-1, -2) * scale, dim=-1)
    k_centred = keys.unsqueeze(-3) - (weights @ keys).unsqueeze(-2)              # (..., m, n, d)
    weighted_values = weights.unsqueeze(-1) * values.unsqueeze(-3)               # (..., m, n, d_v)
    return weighted_values.transpose(-1, -2) @ k_centred * scale


@alternatives.keep("numpy in float64",
                   "NumPy arrays, a log-sum-exp softmax and np.matmul broadcasting, only the values centred; "
                   "back to a tensor of the inputs' dtype")
def _jac_alt_numpy(queries, keys, values, factors=None):
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(f"queries {tuple(queries.shape)} and keys {tuple(keys.shape)}: the query size must "
                         "equal the key size")
    if keys.shape[-2] != values.shape[-2]:
        raise ValueError(f"keys {tuple(keys.shape)} and values {tuple(values.shape)}: one value per key needed")
    q, k, v = (t.detach().double().numpy() for t in (queries, keys, values))
    s = np.matmul(q, np.swapaxes(k, -1, -2)) / np.sqrt(q.shape[-1])
    s = s - s.max(axis=-1, keepdims=True)
    a = np.exp(s)
    a /= a.sum(axis=-1, keepdims=True)
    o = np.matmul(a, v)
    spread = v[..., None, :, :] - o[..., :, None, :]                           # (..., m, n, d_v)
    jac = np.matmul(np.swapaxes(a[..., None] * spread, -1, -2), k[..., None, :, :]) / np.sqrt(q.shape[-1])
    if factors is not None:
        sizes = [np.linalg.norm(_jac_alt_numpy(f * queries, keys, values).numpy()) for f in factors]
        return [factors[i] for i in np.argsort(-np.array(sizes), kind="stable")]
    return torch.from_numpy(np.ascontiguousarray(jac)).to(queries.dtype)


# Registration -----------------------------------------------------------------------------

_HINT = ("this check compares your Jacobian, one (d_v, d) block per query, with the course's (within "
         "rtol 1e-4, atol 1e-5); the reason above gives the first entry that differs.")

register(Exercise(
    label="ch03_ex5", title="How attention pooling moves with its query",
    name="query_jacobian", reference=query_jacobian, points=3,
    checks=[
        Check("one query in 2-D, three keys, values of size 3", _small_calls, seed=_SMALL_SEED,
              compare=_against_the_course, hint=_HINT),
        Check("4 queries, 6 keys, d = 5, d_v = 3, random", _random_calls, seed=1,
              compare=_against_the_course, hint=_HINT),
        Check("a Jacobian of 0: one key; every key equal; every value equal", _zero_calls, seed=2,
              compare=_against_the_course,
              hint=_HINT + " Here the output cannot move: with one key, equal keys or equal values it "
                           "stays the same whatever the query."),
        Check("scores in the hundreds: a one-hot softmax, a finite Jacobian of 0 (float32)", _saturated_calls,
              seed=3, compare=_against_the_course,
              hint=_HINT + " Here the scores differ by hundreds, so the weights are one-hot in float32."),
        Check("float64, with a leading batch axis and without", _batched_calls, seed=4,
              compare=_against_the_course,
              hint=_HINT + " Here the inputs are float64; the first call has a batch axis."),
        Check("random sizes and dtypes, large scores, a batch axis (hidden)", _hidden_calls, seed=5,
              public=False, compare=_against_autograd, hint=_HINT),
        Check("mismatched sizes raise ValueError naming the two arguments and their shapes", _bad_calls,
              seed=6, must_mention=_bad_words, weight=ERROR_WEIGHT,
              hint="the first call is valid; the second gives queries and keys different last sizes, the third "
                   "gives keys and values different numbers of rows; the message names the two arguments "
                   "and their shapes."),
        Check("the question: the factors ordered by the size of the Jacobian (the running example; two keys tied for the top score)",
              _question_calls, seed=3, hint="with factors, the result lists them from the largest Jacobian of "
              "factor * queries[0] (Frobenius norm) to the smallest; call 2 has two keys tied at the top."),
        Check("the question on random sizes and factors (hidden)", _question_hidden_calls, seed=8, public=False,
              hint="with factors, the result lists them from the largest Jacobian (Frobenius norm) to the smallest."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
