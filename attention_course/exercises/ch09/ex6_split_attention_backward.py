r"""ch09_ex6: The backward pass of one part of split-key attention.

Split-key attention (exercise 1, and the kernels that divide the keys of a long sequence among
several workers) computes attention over each part of the keys on its own and merges the partial
results. To train through it, each worker needs the gradients for its own keys and values, and
its share of the queries' gradient. Write
`split_attention_backward(queries, keys, values, output_part, lse_part, output, lse, grad_output, grad_lse, block)`.

The inputs are float tensors of one dtype (float32 or float64) with the same leading axes `...`
(any number of them, possibly none). `queries` `(..., n_q, d)` are all the queries; `keys`
`(..., n_k, d)` and `values` `(..., n_k, d_v)` are the keys and values of one part $A$ only. The
scores are $S = QK^\top/\sqrt{d}$ (no mask), over all the keys of the sequence. The worker of $A$
saved `output_part` `(..., n_q, d_v)`, the attention output over the keys of $A$ alone (weights
that sum to 1 over $A$), and `lse_part` `(..., n_q)`, the log-sum-exp of each query's scores over
$A$. Merging every part gave `output` `(..., n_q, d_v)`, the attention output over all the keys,
and `lse` `(..., n_q)`, the log-sum-exp over all the keys. The loss depends on `output` and `lse`;
`grad_output` and `grad_lse`, of their shapes, are its gradients with respect to them. The other
parts' keys and values are not given.

Return the tuple `(grad_queries, grad_keys, grad_values)`, with the shapes and dtype of `queries`,
`keys` and `values`: the gradients of the loss with respect to $A$'s keys and values, and $A$'s
share of the gradient with respect to the queries, the part that flows through the scores of $A$'s
keys (summed over the parts, the shares give the whole gradient). They must agree with the exact
gradients to within 1e-4 relative and 1e-5 absolute, and stay finite in float32 when scores exceed
88, where `exp` of a score overflows. There float32 rounds a score $S$ by up to
$|S| \cdot 2^{-24}$, which moves $e^{S}$ as much, relatively, so the absolute tolerance grows
with the scores: 1e-4 or the largest |score| times $2^{-16}$ (about 1.5e-5), whichever is larger.

What the check enforces is memory: every tensor your function creates may hold at most
`N × max(n_q, n_k) × max(block, d, d_v)` entries, where `N` is the product of the leading sizes, so
the whole `n_q × n_k` matrix (of scores, probabilities or their gradients) never exists. A block of
`block` queries against all of $A$'s keys is fine, and so is a block of `block` keys against all
the queries. The check records the size of every tensor created while your function runs; a view
(a slice, `expand`) counts by the memory under it. Raise `ValueError` naming `block` when `block`
is not a Python `int` of at least 1 (`2.0` and `True` are not).
"""
from __future__ import annotations

import math

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import ERROR_WEIGHT, Kept, gen, randint
from ._split_backward import _backward_variant, _validate_block

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def split_attention_backward(queries, keys, values, output_part, lse_part, output, lse, grad_output, grad_lse,
                             block):
    """dQ (A's share), dK, dV of part A, tile by tile, from the merged O and L alone: A's tile of the whole
    row's P is exp(S - L), and D_i = dO_i . O_i (the merge's backward gives the same: first alternative)."""
    _validate_block(block)
    scale = 1.0 / math.sqrt(queries.shape[-1])
    shift = ((grad_output * output).sum(dim=-1) - grad_lse).unsqueeze(-1)
    d_q, d_k, d_v = torch.zeros_like(queries), torch.zeros_like(keys), torch.zeros_like(values)
    for k0 in range(0, keys.shape[-2], block):
        cols = slice(k0, k0 + block)
        kb, vb = keys[..., cols, :], values[..., cols, :]
        for q0 in range(0, queries.shape[-2], block):
            rows = slice(q0, q0 + block)
            qb, dob = queries[..., rows, :], grad_output[..., rows, :]
            p = torch.exp(qb @ kb.transpose(-2, -1) * scale - lse[..., rows, None])
            d_v[..., cols, :] += p.transpose(-2, -1) @ dob
            d_s = p * (dob @ vb.transpose(-2, -1) - shift[..., rows, :])
            d_q[..., rows, :] += d_s @ kb * scale
            d_k[..., cols, :] += d_s.transpose(-2, -1) @ qb * scale
    return d_q, d_k, d_v


# Inputs of the public and hidden checks ---------------------------------------------------


def _case(g, lead, n_q, n_all, part, d, d_v, block, grad_lse_size=1.0, dtype=torch.float32, sharp=None,
          report=()):
    """One call: n_all keys from g, part A = keys[part[0]:part[1]]; the partial and merged outputs and lse
    exact (float64, the check's own arithmetic), rounded to dtype. sharp="inside"/"outside": query 0 and A's
    first key (or the first key outside A) are one vector of length 15: a score 225 / sqrt(d) > 88 (d <= 6)."""
    lo, hi = part
    q = torch.randn(*lead, n_q, d, generator=g, dtype=torch.float64)
    k = torch.randn(*lead, n_all, d, generator=g, dtype=torch.float64)
    v = torch.randn(*lead, n_all, d_v, generator=g, dtype=torch.float64)
    d_out = torch.randn(*lead, n_q, d_v, generator=g, dtype=torch.float64)
    d_lse = torch.randn(*lead, n_q, generator=g, dtype=torch.float64) * grad_lse_size
    if sharp:
        q[..., 0, :] = q[..., 0, :] / q[..., 0, :].norm(dim=-1, keepdim=True) * 15.0
        k[..., lo if sharp == "inside" else (hi if hi < n_all else 0), :] = q[..., 0, :]
    q, k, v, d_out, d_lse = (t.to(dtype).double() for t in (q, k, v, d_out, d_lse))  # what the answer receives
    s = q @ k.transpose(-2, -1) / math.sqrt(d)
    out, lse = torch.softmax(s, dim=-1) @ v, torch.logsumexp(s, dim=-1)
    s_a, v_a = s[..., lo:hi], v[..., lo:hi, :]
    out_a, lse_a = torch.softmax(s_a, dim=-1) @ v_a, torch.logsumexp(s_a, dim=-1)
    args = tuple(t.to(dtype) for t in (q, k[..., lo:hi, :], v_a, out_a, lse_a, out, lse, d_out, d_lse)) + (block,)
    return Call(args=args, report=report)


def _zero_grad_lse_calls(seed):
    g = gen(seed)
    return [_case(g, (2,), 7, 16, (4, 14), 4, 3, 3, grad_lse_size=0.0),
            _case(g, (1,), 6, 12, (0, 9), 3, 5, 4, grad_lse_size=0.0)]


def _grad_lse_calls(seed):
    g = gen(seed)
    return [_case(g, (2, 3), 9, 12, (5, 12), 5, 2, 4), _case(g, (3,), 5, 20, (3, 14), 2, 4, 3),
            _case(g, (), 6, 10, (2, 8), 4, 3, 4)]


def _sharp_calls(seed):
    g = gen(seed)
    n_q, n_k = randint(g, 5, 8), randint(g, 6, 10)
    return [_case(g, (2,), n_q, n_k + 5, (2, 2 + n_k), 4, 3, randint(g, 2, 4), sharp="inside"),
            _case(g, (1, 2), n_k, n_q + 4, (0, n_q), 3, 2, randint(g, 2, 4), sharp="outside")]


def _extreme_block_calls(seed):
    g = gen(seed)
    return [_case(g, (2,), 5, 9, (3, 9), 3, 2, 1, dtype=torch.float64),
            _case(g, (1,), 4, 11, (1, 8), 2, 3, 7 + randint(g, 1, 5), dtype=torch.float64),
            _case(g, (2,), 6, 8, (0, 5), 2, 4, 1)]


def _tile_calls(seed):
    g = gen(seed)
    return [_case(g, (2,), 48, 64, (16, 56), 4, 3, 8, report=("largest_tensor",))]


def _hidden_tile_calls(seed):
    g = gen(seed)
    block = randint(g, 3, 6)
    d_v = randint(g, 2, block)
    d = randint(g, 1, block - 1)
    d += d >= d_v                       # d and d_v at most block, and different
    n_q, n_k = randint(g, 5 * block, 8 * block), randint(g, 5 * block, 8 * block)
    lo = randint(g, 0, 2 * block)
    return [_case(g, (randint(g, 1, 2),), n_q, n_k + lo + randint(g, 0, block), (lo, lo + n_k), d, d_v, block,
                  report=("largest_tensor",))]


def _hidden_calls(seed):
    # d != d_v in every call: with d == d_v a scale by sqrt(d_v) would be the right one.
    g = gen(seed)
    calls = []
    for _ in range(3):
        d_v = randint(g, 1, 4)
        d = randint(g, 1, 4)
        d += d >= d_v
        lead = [(), (randint(g, 1, 3),), (randint(g, 1, 2), randint(g, 1, 3))][randint(g, 0, 2)]
        dtype = (torch.float32, torch.float64)[randint(g, 0, 1)]
        n_all = randint(g, 3, 14)
        lo = randint(g, 0, n_all - 2)
        calls.append(_case(g, lead, randint(g, 1, 12), n_all, (lo, randint(g, lo + 1, n_all)), d, d_v,
                           randint(g, 1, 5), grad_lse_size=float(randint(g, 1, 3)), dtype=dtype))
    return calls


def _bad_block_calls(seed):
    g = gen(seed)
    good = _case(g, (1,), 4, 8, (2, 7), 3, 2, 2)
    return [good] + [Call(args=good.args[:-1] + (bad,)) for bad in (0, 2.0, True)]


_VALUES = Check("values", lambda seed: [], hint="")  # default tolerances, for compare_all only
_BLOCK_ERROR, _ENTRIES = Check("block errors", lambda seed: [], hint="", must_mention=["block"]), "largest_tensor_entries"


def _tile_budget(call):
    """The most entries a tensor may hold: N * max(n_q, n_k) * max(block, d, d_v)."""
    queries, keys, values = call.args[:3]
    n = 1
    for size in queries.shape[:-2]:
        n *= size
    return n * max(queries.shape[-2], keys.shape[-2]) * max(call.args[-1], queries.shape[-1], values.shape[-1])


def _close_for_the_score_size(got, want, calls):
    """The default comparison, with an absolute tolerance of max(1e-4, max|S| 2^-16), the largest |S|
    taken over A's scores and the merged log-sum-exps (a score of another part shows in them): float32
    rounds a score S by up to |S| 2^-24 and every order of the sums carries that into the gradients."""
    from ...checks.checking import compare_outcome, compare_values
    for i, (g, w, call) in enumerate(zip(got, want, calls)):
        if g["status"] != "ok" or w["status"] != "ok":
            reason = compare_outcome(g, w, _VALUES, call)
        else:
            q, k = call.args[0].double(), call.args[1].double()
            top = max(float((q @ k.transpose(-2, -1)).abs().max()) / math.sqrt(q.shape[-1]),
                      float(call.args[6].double().abs().max()))
            reason = compare_values(g["value"], w["value"], 1e-4, max(1e-4, top * 2.0 ** -16))
        if reason:
            return reason if len(calls) == 1 else f"call {i + 1} of {len(calls)}: {reason}"
    return None


def _raises_naming_block(got, want, calls):
    """Call 1 is valid and must return (its values are the other checks' business); the others raise naming block."""
    from ...checks.checking import compare_outcome
    if got[0]["status"] != "ok":             # the valid call raised: say what, as the other checks do
        return f"call 1 of {len(calls)} (block={calls[0].args[-1]!r}): " + compare_outcome(got[0], want[0], _VALUES)
    for i, (g, w, call) in enumerate(zip(got, want, calls)):
        if i and (reason := compare_outcome(g, w, _BLOCK_ERROR, call)):
            return f"call {i + 1} of {len(calls)} (block={call.args[-1]!r}): {reason}"
    return None


def _without_extras(outcomes):
    return [{k: v for k, v in o.items() if k != "extras"} for o in outcomes]


def _within_the_tile_budget(got, want, calls):
    """The gradients first; then the largest tensor created, within the budget when want's is (beyond it
    when want is a kept mistake's outcome that is, so that an answer can be matched to that mistake)."""
    from ...checks.checking import compare_all
    reason = compare_all(_without_extras(got), _without_extras(want), _VALUES, calls)
    if reason:
        return reason
    for i, (g, w, call) in enumerate(zip(got, want, calls)):
        if w["status"] != "ok":
            continue
        budget = _tile_budget(call)
        mine = g.get("extras", {}).get(_ENTRIES)
        if not isinstance(mine, int):
            return "the size of the tensors created was not recorded"
        if (mine > budget) != (w["extras"][_ENTRIES] > budget):
            n_q, n_k = call.args[0].shape[-2], call.args[1].shape[-2]
            where = "" if len(got) == 1 else f"call {i + 1} of {len(got)}: "
            return (f"{where}the gradients are right, but a tensor of {mine} entries was created; with "
                    f"{n_q} queries, {n_k} keys in A and block={call.args[-1]} a tensor may hold at most {budget}"
                    if mine > budget else f"{where}no tensor exceeded {budget} entries")
    return None


_HINT = ("compare each of grad_queries, grad_keys and grad_values with autograd through a small float64 "
         "forward pass over all the keys (the keys outside A drawn at random, their scores detached from the "
         "queries so that only A's share of grad_queries remains), with the loss "
         "(O * grad_output).sum() + (L * grad_lse).sum(); first with grad_lse zero, then not.")


# Kept mistakes, each with its hint --------------------------------------------------------


mistakes.add("the part's own statistics",
             "your gradients are those of part A's attention on its own, as if output_part and lse_part were "
             "the final output and log-sum-exp: the loss reaches A only through the merge, which weighs A's "
             "output by A's share of the whole row's exponential mass, and that share moves with A's scores too.",
             _backward_variant(probs="part", row="part"))

mistakes.add("the merge weights held constant",
             "your probabilities are A's entries of the whole row's softmax, but the row term that the softmax's "
             "backward subtracts comes from output_part: that is what holding A's merge weight constant gives. "
             "The weight depends on lse_part, which moves with A's scores.",
             _backward_variant(row="part"))

mistakes.add("A's own probabilities with the whole row's term",
             "your probabilities are A's own softmax, normalised over A's keys alone (from lse_part), but your row "
             "term is the whole row's (from output): the two belong to different normalisations. The loss sees A's "
             "scores through the whole row's softmax, so A's merge weight, the step from one normalisation to the "
             "other, is missing from your probabilities, and from grad_values with them.",
             _backward_variant(probs="part"))

mistakes.add("the merge weight's derivative with the wrong sign",
             "the term that comes from A's merge weight (its dependence on lse_part) enters with the wrong sign: "
             "raising a score of A raises A's share of the row, and with it the pull of output_part on the "
             "merged output.",
             _backward_variant(row="reversed"))

mistakes.add("grad_lse ignored",
             "your gradients are those of a loss that depends on the merged output only: grad_lse is not used. "
             "The merged log-sum-exp depends on every score of A as well.",
             _backward_variant(lse_sign=0.0))

mistakes.add("grad_lse with the wrong sign",
             "grad_lse enters with the wrong sign: raising a score raises the log-sum-exp of its row.",
             _backward_variant(lse_sign=-1.0))

mistakes.add("D from the tile's own probabilities",
             "you summed the row term over the keys of one tile only; it belongs to the whole row, every key of "
             "every part included, so no tile of A alone holds it.",
             _backward_variant(row="tile"))

mistakes.add("each tile's softmax taken as the probabilities",
             "you normalised the scores within each tile (a softmax over the tile's keys); a probability is "
             "normalised over all the keys of its row, in every part: rebuild it from a saved log-sum-exp.",
             _backward_variant(probs="tile"))

mistakes.add("exp of the score before dividing by exp(L)",
             "you computed exp(S) and exp(L) separately: above about 88 each overflows float32 to inf and "
             "inf / inf is NaN. Subtract the log-sum-exp from the score first and take one exp of the difference.",
             _backward_variant(probs="unshifted"))

mistakes.add("dQ and dK not scaled",
             "S = Q K^T / sqrt(d), so the gradients of Q and K each carry the factor 1 / sqrt(d) once more "
             "(dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d)); yours lack it.",
             _backward_variant(scale_grads=False))

mistakes.add("grad_lse added to dS without the factor P",
             "you added grad_lse[i] to every dS_ij as it is, the same for every key; a log-sum-exp moves with "
             "one score only as much as that score weighs in its row.",
             _backward_variant(lse_times_p=False))

mistakes.add("dK not scaled",
             "your dQ carries the factor 1 / sqrt(d) but your dK does not: S = Q K^T / sqrt(d) holds K as "
             "it holds Q, so dK = dS^T Q / sqrt(d) just as dQ = dS K / sqrt(d).",
             _backward_variant(scale_grads="q only"))

mistakes.add("dQ not scaled",
             "your dK carries the factor 1 / sqrt(d) but your dQ does not: the scores are scaled products of Q "
             "and K, and that scale reaches the gradient of each of them, Q's as much as K's.",
             _backward_variant(scale_grads="k only"))

mistakes.add("scores scaled by the square root of d_v",
             "you divided the scores by the square root of the values' size d_v; the scale is the square root "
             "of d, the size of the queries and keys.",
             _backward_variant(scale_of="v"))


@mistakes.keep("the whole score matrix formed",
               "your gradients are right, but your function forms the whole n_q x n_k matrix of A (of scores or "
               "probabilities, or autograd formed it for you); work with a block of queries or of keys at a "
               "time, so no tensor holds more than a block's rows of that matrix.")
def _backward_whole_matrix(queries, keys, values, output_part, lse_part, output, lse, grad_output, grad_lse, block):
    _validate_block(block)
    scale = 1.0 / math.sqrt(queries.shape[-1])
    p = torch.exp(queries @ keys.transpose(-2, -1) * scale - lse[..., None])
    big_d = (grad_output * output).sum(dim=-1, keepdim=True)
    d_s = p * (grad_output @ values.transpose(-2, -1) - big_d + grad_lse[..., None])
    return d_s @ keys * scale, d_s.transpose(-2, -1) @ queries * scale, p.transpose(-2, -1) @ grad_output


mistakes.add("block not checked",
             "block must be a Python int of at least 1: 0, the float 2.0 and the bool True must raise "
             "ValueError naming block.",
             _backward_variant(validate=False))


# Kept alternatives (correct answers in other styles) --------------------------------------


def _alt_through_the_merge(queries, keys, values, output_part, lse_part, output, lse, grad_output, grad_lse, block):
    # The merge's backward first: O = sum over parts of w_p O_p with w_p = exp(lse_p - L), L = logsumexp(lse_p),
    # gives A's saved pair the gradients w dO and w (dO . (O_A - O) + grad_lse); then the backward of A's own
    # attention with a loss on its output and its log-sum-exp. Query blocks outside, einsum.
    _validate_block(block)
    root_d = math.sqrt(queries.shape[-1])
    n_q, n_k = queries.shape[-2], keys.shape[-2]
    weight = torch.exp(lse_part - lse)                                           # (..., n_q), at most 1
    g_out_a = weight.unsqueeze(-1) * grad_output
    g_lse_a = weight * ((grad_output * (output_part - output)).sum(-1) + grad_lse)
    row_term = (g_out_a * output_part).sum(-1) - g_lse_a
    g_q, g_k, g_v = torch.zeros_like(queries), torch.zeros_like(keys), torch.zeros_like(values)
    for a, b in ((a, min(a + block, n_q)) for a in range(0, n_q, block)):
        q, do = queries[..., a:b, :], g_out_a[..., a:b, :]
        for c, e in ((c, min(c + block, n_k)) for c in range(0, n_k, block)):
            s = torch.einsum("...id,...jd->...ij", q, keys[..., c:e, :]) / root_d
            p = (s - lse_part[..., a:b].unsqueeze(-1)).exp()                     # A's own softmax
            g_v[..., c:e, :] += torch.einsum("...ij,...iv->...jv", p, do)
            ds = p * (torch.einsum("...iv,...jv->...ij", do, values[..., c:e, :]) - row_term[..., a:b].unsqueeze(-1))
            g_q[..., a:b, :] += torch.einsum("...ij,...jd->...id", ds, keys[..., c:e, :]) / root_d
            g_k[..., c:e, :] += torch.einsum("...ij,...id->...jd", ds, q) / root_d
    return g_q, g_k, g_v


alternatives.add("through the merge, query blocks outside, einsum",
                 "the merge's backward gives A's output and log-sum-exp their gradients, then A's own tiled "
                 "backward with a loss on both; query blocks outside, einsum", _alt_through_the_merge)


def _alt_autograd_per_tile(queries, keys, values, output_part, lse_part, output, lse, grad_output, grad_lse, block):
    # float64 inside; each tile's share comes from autograd on a surrogate sum(P * c), P = exp(S - L) with the
    # merged L, whose gradient with respect to S is P * c: c = dP - D + grad_lse with D and grad_lse constant.
    if type(block) is not int or block <= 0:
        raise ValueError(f"block={block!r}: expected a positive int")
    q64, k64, v64 = queries.double(), keys.double(), values.double()
    o64, l64, do64, dl64 = output.double(), lse.double(), grad_output.double(), grad_lse.double()
    const = (dl64 - (do64 * o64).sum(-1)).unsqueeze(-1)
    grads = [torch.zeros_like(q64), torch.zeros_like(k64), torch.zeros_like(v64)]
    q_parts = torch.split(torch.arange(q64.shape[-2]), block)
    for k_idx in torch.split(torch.arange(k64.shape[-2]), block):
        for q_idx in q_parts:
            qb, kb, vb = (t[..., idx, :].requires_grad_(True) for t, idx in ((q64, q_idx), (k64, k_idx), (v64, k_idx)))
            with torch.enable_grad():
                p = torch.exp(qb @ kb.transpose(-2, -1) / math.sqrt(qb.shape[-1]) - l64[..., q_idx, None])
                surrogate = (p * (do64[..., q_idx, :] @ vb.transpose(-2, -1) + const[..., q_idx, :])).sum()
                gq, gk, gv = torch.autograd.grad(surrogate, (qb, kb, vb))
            for total, idx, part in ((grads[0], q_idx, gq), (grads[1], k_idx, gk), (grads[2], k_idx, gv)):
                total[..., idx, :] += part
    return grads[0].to(queries.dtype), grads[1].to(keys.dtype), grads[2].to(values.dtype)


alternatives.add("autograd on each tile, float64", "float64 inside, index blocks from torch.split, autograd on a "
                 "per-tile surrogate with the merged log-sum-exp", _alt_autograd_per_tile)


def _alt_first_pass_for_d(queries, keys, values, output_part, lse_part, output, lse, grad_output, grad_lse, block):
    # Through the merge, with A's row term sum_j P^A_ij dP_ij summed over A's keys in a first pass (output_part
    # unused there); dK and dV are built transposed, (..., d, n_k), and returned as transposed views.
    if type(block) is not int or block < 1:
        raise ValueError(f"expected block to be an int >= 1, received {block!r}")
    inv_root, n_q, n_k = queries.shape[-1] ** -0.5, queries.shape[-2], keys.shape[-2]
    tiles = [((a, a + block), (c, c + block)) for a in range(0, n_q, block) for c in range(0, n_k, block)]
    share = torch.exp(lse_part - lse)[..., None]                                  # A's merge weight

    def tile(a, b, c, e):
        p = torch.exp(torch.matmul(queries[..., a:b, :], keys[..., c:e, :].mT) * inv_root - lse_part[..., a:b, None])
        return p, torch.matmul(grad_output[..., a:b, :], values[..., c:e, :].mT)

    own = torch.zeros_like(lse)
    for (a, b), (c, e) in tiles:
        p, d_p = tile(a, b, c, e)
        own[..., a:b] += (p * d_p).sum(-1)                                       # dO . O_A, from the tiles
    # the merge's backward: A's output gets share * dO, A's log-sum-exp share * (dO . O_A - dO . O + grad_lse)
    g_lse_a = share[..., 0] * (own - (grad_output * output).sum(-1) + grad_lse)
    row = (share[..., 0] * own - g_lse_a)[..., None]                             # A's D minus its grad_lse
    d_q = torch.zeros_like(queries)
    d_k_t, d_v_t = (t.new_zeros(*t.shape[:-2], t.shape[-1], n_k) for t in (keys, values))
    for (a, b), (c, e) in tiles:
        p, d_p = tile(a, b, c, e)
        d_s = p * (share[..., a:b, :] * d_p - row[..., a:b, :])
        d_q[..., a:b, :] += torch.matmul(d_s, keys[..., c:e, :]) * inv_root
        d_k_t[..., c:e] += torch.matmul(queries[..., a:b, :].mT, d_s) * inv_root
        d_v_t[..., c:e] += torch.matmul(grad_output[..., a:b, :].mT, p * share[..., a:b, :])
    return d_q, d_k_t.mT, d_v_t.mT


alternatives.add("A's row term from a first pass", "through the merge, A's own row term summed as P * dP over A's "
                 "keys in a first pass, dK and dV accumulated transposed and returned as views", _alt_first_pass_for_d)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch09_ex6", title="The backward pass of one part of split-key attention",
    name="split_attention_backward", reference=split_attention_backward, points=3,
    checks=[
        Check("grad_lse zero: A is 10 of 16 keys in blocks of 3, then the first 9 of 12 in blocks of 4",
              _zero_grad_lse_calls, hint=_HINT),
        Check("grad_lse nonzero: leading axes (2, 3), (3,) and none, blocks that do not divide A's keys",
              _grad_lse_calls, seed=1, hint=_HINT),
        Check("scores above 88 in float32, in A and in another part (exp of a score overflows)", _sharp_calls,
              seed=2, compare=_close_for_the_score_size,
              hint="these scores exceed 88, in A (call 1) or in a part outside A (call 2); every result must be "
                   "finite and match the float64 gradients. " + _HINT[0].upper() + _HINT[1:]),
        Check("float64; block 1 and a block wider than all of A's keys", _extreme_block_calls, seed=3, hint=_HINT),
        Check("tile by tile: 48 queries, 40 keys in A, blocks of 8, no tensor over 768 entries", _tile_calls, seed=4,
              compare=_within_the_tile_budget,
              hint="this check compares the gradients first (the reason above says which differs, if any); "
                   "once they are right, no tensor created along the way may hold more than "
                   "N x max(n_q, n_k) x max(block, d, d_v) entries, which a block of rows or columns of A's "
                   "score matrix respects and the whole matrix does not."),
        Check("block 0, 2.0 or True raises ValueError naming block", _bad_block_calls, seed=5,
              must_mention=["block"], weight=ERROR_WEIGHT, compare=_raises_naming_block,
              hint="this check compares no values: block=2 must return, and block 0, 2.0 or True must raise "
                   "ValueError whose message names block. Check that block is an int (not a bool) of at least 1 "
                   "before the loops."),
        Check("random sizes, parts, leading axes, dtypes and blocks (hidden)", _hidden_calls, public=False,
              hint=_HINT),
        Check("tile by tile at random sizes (hidden)", _hidden_tile_calls, public=False,
              compare=_within_the_tile_budget,
              hint="no tensor created along the way may hold more than N x max(n_q, n_k) x max(block, d, d_v) "
                   "entries; the gradients are compared first."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
