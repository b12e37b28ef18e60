r"""ch09_ex6: The backward pass when the loss uses the log-sum-exp too.

Code that merges partial attention results (exercise 1, and the kernels that split the keys
among several workers) uses each query's log-sum-exp $L_i$ as well as its output, so a loss
can depend on both, and the backward pass receives a gradient for each. Write
`attention_backward_with_lse(queries, keys, values, output, lse, grad_output, grad_lse, block)`.

The inputs are float tensors of one dtype (float32 or float64) with the same leading axes `...`
(any number of them, possibly none): `queries` of shape `(..., n_q, d)`, `keys` `(..., n_k, d)`,
`values` `(..., n_k, d_v)`. With $S = QK^\top/\sqrt{d}$ and $P$ the softmax of each row of $S$ (no
mask), the forward pass saved `output` `(..., n_q, d_v)`, equal to $O = PV$, and `lse` `(..., n_q)`,
equal to $L_i = \log \sum_j e^{S_{ij}}$. `grad_output` `(..., n_q, d_v)` and `grad_lse` `(..., n_q)`
are the gradients of the loss with respect to $O$ and to $L$. Return the tuple
`(grad_queries, grad_keys, grad_values)`: the gradients of the loss with respect to the queries,
keys and values, with the shapes and dtype of `queries`, `keys` and `values`. They must agree with
the exact gradients to within 1e-4 relative and 1e-5 absolute, and stay finite in float32 when
scores exceed 88, where `exp` of a score overflows. There float32 rounds a score $S$ by up to
$|S| \cdot 2^{-24}$, which moves $e^{S - L}$ as much, relatively, so the absolute tolerance grows
with the scores: 1e-4 or the largest |score| times $2^{-16}$ (about 1.5e-5), whichever is larger.

What the check enforces is memory: every tensor your function creates may hold at most
`N × max(n_q, n_k) × max(block, d, d_v)` entries, where `N` is the product of the leading sizes, so
the whole `n_q × n_k` matrix (of scores, probabilities or their gradients) never exists. A block of
`block` queries against all the keys is fine, and so is a block of `block` keys against all the
queries. The check records the size of every tensor created while your function runs; a view (a
slice, `expand`) counts by the memory under it. Our advice, which no check enforces: work tile by
tile from the saved `output` and `lse`, as the chapter's backward loop does, rather than redo a
forward pass for each block. Raise
`ValueError` naming `block` when `block` is not a Python `int` of at least 1 (`2.0` and `True` are
not).
"""
from __future__ import annotations

import math

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import ERROR_WEIGHT, Kept, gen, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _validate_block(block):
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be a Python int of at least 1, got block={block!r}")


def attention_backward_with_lse(queries, keys, values, output, lse, grad_output, grad_lse, block):
    """dQ, dK, dV of attention whose loss depends on O and on L, one tile at a time."""
    _validate_block(block)
    scale = 1.0 / math.sqrt(queries.shape[-1])
    # dL_i / dS_ij = P_ij, so the log-sum-exp adds grad_lse[i] * P_ij to dS_ij:
    # dS = P * (dP - D + grad_lse), with D_i = dO_i . O_i as without it.
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


def _case(g, lead, n_q, n_k, d, d_v, block, grad_lse_size=1.0, dtype=torch.float32, sharp=False,
          report=()):
    """One call: inputs drawn from g; output and lse computed exactly (float64, whole matrix: the
    check's own trusted arithmetic) and rounded to dtype, as a forward pass would have saved them."""
    q = torch.randn(*lead, n_q, d, generator=g, dtype=torch.float64)
    k = torch.randn(*lead, n_k, d, generator=g, dtype=torch.float64)
    v = torch.randn(*lead, n_k, d_v, generator=g, dtype=torch.float64)
    d_out = torch.randn(*lead, n_q, d_v, generator=g, dtype=torch.float64)
    d_lse = torch.randn(*lead, n_q, generator=g, dtype=torch.float64) * grad_lse_size
    if sharp:
        # Query 0 and key 0 are the same vector of length 15: their score is 225 / sqrt(d), above
        # 88 for d <= 6, so exp of it overflows float32. The other queries keep their size, so
        # float32 rounding stays well within the checks' tolerance.
        q[..., 0, :] = q[..., 0, :] / q[..., 0, :].norm(dim=-1, keepdim=True) * 15.0
        k[..., 0, :] = q[..., 0, :]
    q, k = q.to(dtype).double(), k.to(dtype).double()          # what the answer receives, exactly
    v, d_out, d_lse = v.to(dtype).double(), d_out.to(dtype).double(), d_lse.to(dtype).double()
    s = q @ k.transpose(-2, -1) / math.sqrt(d)
    out = torch.softmax(s, dim=-1) @ v
    lse = torch.logsumexp(s, dim=-1)
    args = tuple(t.to(dtype) for t in (q, k, v, out, lse, d_out, d_lse)) + (block,)
    return Call(args=args, report=report)


def _zero_grad_lse_calls(seed):
    g = gen(seed)
    return [_case(g, (2,), 7, 10, 4, 3, 3, grad_lse_size=0.0),
            _case(g, (1,), 6, 9, 3, 5, 4, grad_lse_size=0.0)]


def _grad_lse_calls(seed):
    g = gen(seed)
    return [_case(g, (2, 3), 9, 7, 5, 2, 4), _case(g, (3,), 5, 11, 2, 4, 3), _case(g, (), 6, 6, 4, 3, 4)]


def _sharp_calls(seed):
    g = gen(seed)
    n_q, n_k = randint(g, 5, 8), randint(g, 6, 10)
    return [_case(g, (2,), n_q, n_k, 4, 3, randint(g, 2, 4), sharp=True),
            _case(g, (1, 2), n_k, n_q, 3, 2, randint(g, 2, 4), sharp=True)]


def _extreme_block_calls(seed):
    g = gen(seed)
    return [_case(g, (2,), 5, 6, 3, 2, 1, dtype=torch.float64),
            _case(g, (1,), 4, 7, 2, 3, 7 + randint(g, 1, 5), dtype=torch.float64),
            _case(g, (2,), 6, 5, 2, 4, 1)]


def _tile_calls(seed):
    g = gen(seed)
    return [_case(g, (2,), 48, 40, 4, 3, 8, report=("largest_tensor",))]


def _hidden_tile_calls(seed):
    g = gen(seed)
    block = randint(g, 3, 6)
    d_v = randint(g, 2, block)
    d = randint(g, 1, block - 1)
    d += d >= d_v                       # d and d_v at most block, and different
    n_q, n_k = randint(g, 5 * block, 8 * block), randint(g, 5 * block, 8 * block)
    return [_case(g, (randint(g, 1, 2),), n_q, n_k, d, d_v, block, report=("largest_tensor",))]


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
        calls.append(_case(g, lead, randint(g, 1, 12), randint(g, 2, 12), d, d_v, randint(g, 1, 5),
                           grad_lse_size=float(randint(g, 1, 3)), dtype=dtype))
    return calls


def _bad_block_calls(seed):
    g = gen(seed)
    good = _case(g, (1,), 4, 5, 3, 2, 2)
    return [good] + [Call(args=good.args[:-1] + (bad,)) for bad in (0, 2.0, True)]


_VALUES = Check("values", lambda seed: [], hint="")  # default tolerances, for compare_all only
_BLOCK_ERROR = Check("block errors", lambda seed: [], hint="", must_mention=["block"])
_ENTRIES = "largest_tensor_entries"


def _tile_budget(call):
    """The most entries a tensor may hold: N * max(n_q, n_k) * max(block, d, d_v)."""
    queries, keys, values = call.args[:3]
    n = 1
    for size in queries.shape[:-2]:
        n *= size
    return n * max(queries.shape[-2], keys.shape[-2]) * max(call.args[-1], queries.shape[-1], values.shape[-1])


def _close_for_the_score_size(got, want, calls):
    """The default comparison, with an absolute tolerance of max(1e-4, max|S| 2^-16): float32 rounds a
    score S by up to |S| 2^-24 and every order of the sums carries that into the gradients. The worst
    correct answer measured (D from P * dP) needed 24 |S| 2^-23 over 150 seeds: a margin of 5."""
    from ...checks.checking import compare_outcome, compare_values
    for i, (g, w, call) in enumerate(zip(got, want, calls)):
        if g["status"] != "ok" or w["status"] != "ok":
            reason = compare_outcome(g, w, _VALUES, call)
        else:
            q, k = call.args[0].double(), call.args[1].double()
            top = float((q @ k.transpose(-2, -1)).abs().max()) / math.sqrt(q.shape[-1])
            reason = compare_values(g["value"], w["value"], 1e-4, max(1e-4, top * 2.0 ** -16))
        if reason:
            return reason if len(calls) == 1 else f"call {i + 1} of {len(calls)}: {reason}"
    return None


def _raises_naming_block(got, want, calls):
    """The first call is valid and must return (its values are the other checks' business, so that a
    wrong value gets their hint, not this check's); every other call must raise ValueError naming block."""
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
    """The gradients first, as the other checks compare them; then the largest tensor created,
    which must be within the budget when the reference's is (and beyond it when want is a kept
    mistake's outcome that is, so that an answer can be matched to that mistake)."""
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
                    f"{n_q} queries, {n_k} keys and block={call.args[-1]} a tensor may hold at most {budget}"
                    if mine > budget else f"{where}no tensor exceeded {budget} entries")
    return None


_HINT = ("compare each of grad_queries, grad_keys and grad_values with autograd through a small float64 "
         "forward pass (torch.logsumexp of the scores and the softmax, with the loss "
         "(O * grad_output).sum() + (L * grad_lse).sum()), first with grad_lse zero, then not.")


# Kept mistakes, each with its hint --------------------------------------------------------


def _backward_variant(lse_sign=1.0, delta="output", probs="lse", scale_of="d", scale_grads=True,
                      validate=True, lse_times_p=True):
    """The reference's tile loop with one thing changed: grad_lse enters dS with lse_sign; D from
    the tile's P * dP (delta="tile"); probabilities exp(S) / exp(L) (probs="unshifted") or the
    tile's own softmax (probs="tile"); scores scaled by 1/sqrt(d_v) (scale_of="v"); dQ and dK
    not multiplied by the scale (scale_grads=False; "q only": dK not); block not checked
    (validate=False); grad_lse added to dS outside the factor P (lse_times_p=False)."""
    def impl(queries, keys, values, output, lse, grad_output, grad_lse, block):
        if validate:
            _validate_block(block)
        scale = 1.0 / math.sqrt(values.shape[-1] if scale_of == "v" else queries.shape[-1])
        grad_scale = scale if scale_grads else 1.0
        k_scale = 1.0 if scale_grads == "q only" else grad_scale
        d_q, d_k, d_v = torch.zeros_like(queries), torch.zeros_like(keys), torch.zeros_like(values)
        for k0 in range(0, keys.shape[-2], block):
            cols = slice(k0, k0 + block)
            kb, vb = keys[..., cols, :], values[..., cols, :]
            for q0 in range(0, queries.shape[-2], block):
                rows = slice(q0, q0 + block)
                qb, dob = queries[..., rows, :], grad_output[..., rows, :]
                s = qb @ kb.transpose(-2, -1) * scale
                if probs == "unshifted":
                    p = torch.exp(s) / torch.exp(lse[..., rows, None])
                elif probs == "tile":
                    p = torch.softmax(s, dim=-1)
                else:
                    p = torch.exp(s - lse[..., rows, None])
                d_p = dob @ vb.transpose(-2, -1)
                if delta == "tile":
                    big_d = (p * d_p).sum(dim=-1, keepdim=True)
                else:
                    big_d = (dob * output[..., rows, :]).sum(dim=-1, keepdim=True)
                lse_term = lse_sign * grad_lse[..., rows, None]
                d_s = p * (d_p - big_d + lse_term) if lse_times_p else p * (d_p - big_d) + lse_term
                d_v[..., cols, :] += p.transpose(-2, -1) @ dob
                d_q[..., rows, :] += d_s @ kb * grad_scale
                d_k[..., cols, :] += d_s.transpose(-2, -1) @ qb * k_scale
        return d_q, d_k, d_v
    return impl


mistakes.add("grad_lse ignored",
             "your gradients are those of a loss that depends on the output only: grad_lse is not used. "
             "L_i depends on every score of row i (its derivative with respect to S_ij is P_ij), so "
             "grad_lse adds a term to dS.",
             _backward_variant(lse_sign=0.0))

mistakes.add("grad_lse with the wrong sign",
             "grad_lse enters dS with the wrong sign: since the derivative of L_i with respect to S_ij is "
             "+P_ij, the log-sum-exp adds grad_lse[i] * P_ij to dS_ij.",
             _backward_variant(lse_sign=-1.0))

mistakes.add("D from the tile's own probabilities",
             "you computed D_i = sum_j P_ij dP_ij over the keys of one tile only; D_i sums over all the keys "
             "of row i: take it as grad_output_i . output_i from the saved output, or sum P * dP over every "
             "tile in a first pass.",
             _backward_variant(delta="tile"))

mistakes.add("each tile's softmax taken as the probabilities",
             "you normalised the scores within each tile (a softmax over the tile's keys); a probability is "
             "normalised over all the keys of its row: rebuild it as exp(S_ij - L_i) from the saved lse.",
             _backward_variant(probs="tile"))

mistakes.add("exp of the score before dividing by exp(L)",
             "you computed exp(S) and exp(L) separately: above about 88 each overflows float32 to inf and "
             "inf / inf is NaN. Subtract L from the score first and take one exp of the difference.",
             _backward_variant(probs="unshifted"))

mistakes.add("dQ and dK not scaled",
             "S = Q K^T / sqrt(d), so the gradients of Q and K each carry the factor 1 / sqrt(d) once more "
             "(dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d)); yours lack it.",
             _backward_variant(scale_grads=False))

mistakes.add("grad_lse added to dS without the factor P",
             "you added grad_lse[i] to every dS_ij as it is; dL_i/dS_ij is P_ij, so the log-sum-exp's term is "
             "grad_lse[i] * P_ij, inside the factor P: dS = P * (dP - D + grad_lse).",
             _backward_variant(lse_times_p=False))

mistakes.add("dK not scaled",
             "your dQ carries the factor 1 / sqrt(d) but your dK does not: S = Q K^T / sqrt(d) holds K as "
             "it holds Q, so dK = dS^T Q / sqrt(d) just as dQ = dS K / sqrt(d).",
             _backward_variant(scale_grads="q only"))

mistakes.add("scores scaled by the square root of d_v",
             "you divided the scores by the square root of the values' size d_v; the scale is the square root "
             "of d, the size of the queries and keys.",
             _backward_variant(scale_of="v"))


@mistakes.keep("the whole score matrix formed",
               "your gradients are right, but your function forms the whole n_q x n_k matrix (of scores or "
               "probabilities, or autograd formed it for you); work with a block of queries or of keys at a "
               "time, so no tensor holds more than a block's rows of that matrix.")
def _backward_whole_matrix(queries, keys, values, output, lse, grad_output, grad_lse, block):
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


def _alt_queries_outside(queries, keys, values, output, lse, grad_output, grad_lse, block):
    # Query blocks outside: each block's dQ is finished in one go; dK and dV collect from every block.
    _validate_block(block)
    root_d = math.sqrt(queries.shape[-1])
    n_q, n_k = queries.shape[-2], keys.shape[-2]
    g_q, g_k, g_v = torch.zeros_like(queries), torch.zeros_like(keys), torch.zeros_like(values)
    for a in range(0, n_q, block):
        b = min(a + block, n_q)
        q, do = queries[..., a:b, :], grad_output[..., a:b, :]
        row_term = (do * output[..., a:b, :]).sum(-1) - grad_lse[..., a:b]
        for c in range(0, n_k, block):
            e = min(c + block, n_k)
            s = torch.einsum("...id,...jd->...ij", q, keys[..., c:e, :]) / root_d
            p = (s - lse[..., a:b].unsqueeze(-1)).exp()
            g_v[..., c:e, :] += torch.einsum("...ij,...iv->...jv", p, do)
            ds = p * (torch.einsum("...iv,...jv->...ij", do, values[..., c:e, :]) - row_term.unsqueeze(-1))
            g_q[..., a:b, :] += torch.einsum("...ij,...jd->...id", ds, keys[..., c:e, :]) / root_d
            g_k[..., c:e, :] += torch.einsum("...ij,...id->...jd", ds, q) / root_d
    return g_q, g_k, g_v


alternatives.add("query blocks outside, einsum", "query blocks in the outer loop, einsum, division by sqrt(d)",
                 _alt_queries_outside)


def _alt_autograd_per_tile(queries, keys, values, output, lse, grad_output, grad_lse, block):
    # float64 inside; each tile's share comes from autograd on a surrogate sum(P * c) whose gradient
    # with respect to S is P * (dP - D + grad_lse): c = dP - D + grad_lse with D and grad_lse constant.
    if type(block) is not int or block <= 0:
        raise ValueError(f"block={block!r}: expected a positive int")
    q64, k64, v64 = queries.double(), keys.double(), values.double()
    o64, l64, do64, dl64 = output.double(), lse.double(), grad_output.double(), grad_lse.double()
    const = (dl64 - (do64 * o64).sum(-1)).unsqueeze(-1)
    grads = [torch.zeros_like(q64), torch.zeros_like(k64), torch.zeros_like(v64)]
    q_parts = torch.split(torch.arange(q64.shape[-2]), block)
    for k_idx in torch.split(torch.arange(k64.shape[-2]), block):
        for q_idx in q_parts:
            qb = q64[..., q_idx, :].requires_grad_(True)
            kb = k64[..., k_idx, :].requires_grad_(True)
            vb = v64[..., k_idx, :].requires_grad_(True)
            with torch.enable_grad():
                p = torch.exp(qb @ kb.transpose(-2, -1) / math.sqrt(qb.shape[-1]) - l64[..., q_idx, None])
                surrogate = (p * (do64[..., q_idx, :] @ vb.transpose(-2, -1) + const[..., q_idx, :])).sum()
                gq, gk, gv = torch.autograd.grad(surrogate, (qb, kb, vb))
            grads[0][..., q_idx, :] += gq
            grads[1][..., k_idx, :] += gk
            grads[2][..., k_idx, :] += gv
    return grads[0].to(queries.dtype), grads[1].to(keys.dtype), grads[2].to(values.dtype)


alternatives.add("autograd on each tile, float64", "float64 inside, index blocks from torch.split, autograd on a "
                 "per-tile surrogate", _alt_autograd_per_tile)


def _alt_library_plus_lse_term(queries, keys, values, output, lse, grad_output, grad_lse, block):
    # The course package's tiled backward gives the part that comes from grad_output; the part that
    # comes from grad_lse is added tile by tile: dS_ij = grad_lse_i * P_ij.
    from attention_course import efficient
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be a positive integer, not {block!r}")
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(True) for t in (queries, keys, values)]
        out = efficient.tiled_attention_trainable(*leaves, block_q=block, block_k=block)
        d_q, d_k, d_v = torch.autograd.grad(out, leaves, grad_output)
    scale = queries.shape[-1] ** -0.5
    for j in range(0, keys.shape[-2], block):
        kb = keys[..., j:j + block, :]
        for i in range(0, queries.shape[-2], block):
            qb = queries[..., i:i + block, :]
            ds = grad_lse[..., i:i + block, None] * torch.exp(
                torch.matmul(qb, kb.mT) * scale - lse[..., i:i + block, None])
            d_q[..., i:i + block, :] += torch.matmul(ds, kb) * scale
            d_k[..., j:j + block, :] += torch.matmul(ds.mT, qb) * scale
    return d_q, d_k, d_v


alternatives.add("the package's tiled backward plus the log-sum-exp term",
                 "efficient.tiled_attention_trainable under autograd for grad_output, a second tile loop for "
                 "grad_lse", _alt_library_plus_lse_term)


def _alt_first_pass_for_d(queries, keys, values, output, lse, grad_output, grad_lse, block):
    # D_i = sum_j P_ij dP_ij, the definition, summed over all the keys in a first pass (output unused);
    # dK and dV are built transposed, (..., d, n_k), and returned as transposed views.
    if type(block) is not int or block < 1:
        raise ValueError(f"expected block to be an int >= 1, received {block!r}")
    inv_root, n_q, n_k = queries.shape[-1] ** -0.5, queries.shape[-2], keys.shape[-2]
    tiles = [((a, a + block), (c, c + block)) for a in range(0, n_q, block) for c in range(0, n_k, block)]

    def tile(a, b, c, e):
        p = torch.exp(torch.matmul(queries[..., a:b, :], keys[..., c:e, :].mT) * inv_root - lse[..., a:b, None])
        return p, torch.matmul(grad_output[..., a:b, :], values[..., c:e, :].mT)

    row_sum = torch.zeros_like(lse)
    for (a, b), (c, e) in tiles:
        p, d_p = tile(a, b, c, e)
        row_sum[..., a:b] += (p * d_p).sum(-1)
    shift = (row_sum - grad_lse)[..., None]
    d_q = torch.zeros_like(queries)
    d_k_t, d_v_t = (t.new_zeros(*t.shape[:-2], t.shape[-1], n_k) for t in (keys, values))
    for (a, b), (c, e) in tiles:
        p, d_p = tile(a, b, c, e)
        d_s = p * (d_p - shift[..., a:b, :])
        d_q[..., a:b, :] += torch.matmul(d_s, keys[..., c:e, :]) * inv_root
        d_k_t[..., c:e] += torch.matmul(queries[..., a:b, :].mT, d_s) * inv_root
        d_v_t[..., c:e] += torch.matmul(grad_output[..., a:b, :].mT, p)
    return d_q, d_k_t.mT, d_v_t.mT


alternatives.add("D from a first pass over the tiles", "D summed as P * dP over all the keys in a first pass, "
                 "dK and dV accumulated transposed and returned as views", _alt_first_pass_for_d)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch09_ex6", title="The backward pass when the loss uses the log-sum-exp too",
    name="attention_backward_with_lse", reference=attention_backward_with_lse, points=3,
    checks=[
        Check("grad_lse zero: 7 queries and 10 keys in blocks of 3, 6 and 9 in blocks of 4",
              _zero_grad_lse_calls, hint=_HINT),
        Check("grad_lse nonzero: leading axes (2, 3), (3,) and none, blocks that do not divide the tokens",
              _grad_lse_calls, seed=1, hint=_HINT),
        Check("scores above 88 in float32 (exp of a score overflows)", _sharp_calls, seed=2,
              compare=_close_for_the_score_size,
              hint="these scores exceed 88; every result must be finite and match the float64 gradients. "
                   + _HINT),
        Check("float64; block 1 and a block wider than all the tokens", _extreme_block_calls, seed=3, hint=_HINT),
        Check("tile by tile: 48 queries, 40 keys, blocks of 8, no tensor over 768 entries", _tile_calls, seed=4,
              compare=_within_the_tile_budget,
              hint="this check compares the gradients first (the reason above says which differs, if any); "
                   "once they are right, no tensor created along the way may hold more than "
                   "N x max(n_q, n_k) x max(block, d, d_v) entries, which a block of rows or columns of the "
                   "score matrix respects and the whole matrix does not."),
        Check("block 0, 2.0 or True raises ValueError naming block", _bad_block_calls, seed=5,
              must_mention=["block"], weight=ERROR_WEIGHT, compare=_raises_naming_block,
              hint="this check compares no values: block=2 must return, and block 0, 2.0 or True must raise "
                   "ValueError whose message names block. Check that block is an int (not a bool) of at least 1 "
                   "before the loops."),
        Check("random sizes, leading axes, dtypes and blocks (hidden)", _hidden_calls, public=False, hint=_HINT),
        Check("tile by tile at random sizes (hidden)", _hidden_tile_calls, public=False,
              compare=_within_the_tile_budget,
              hint="no tensor created along the way may hold more than N x max(n_q, n_k) x max(block, d, d_v) "
                   "entries; the gradients are compared first."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
