r"""ch10_ex4: The delta rule's chunk in WY form.

Within a chunk of `C` tokens, the (ungated) delta rule
$S_t = S_{t-1}(I - \beta_t k_t k_t^\top) + \beta_t v_t k_t^\top$, with a state $S$ of shape
`(d_v, d_k)`, takes the state before the chunk, $S_0$, to the state after token $t$ of the chunk by a
map that is affine in $S_0$. The chunked algorithm stores that map in *WY form*: vectors
$w_1, \dots, w_C$ (of `d_k` numbers) and $u_1, \dots, u_C$ (of `d_v` numbers), where $w_t$ and $u_t$
depend only on the chunk's tokens $1, \dots, t$, such that for every $S_0$ and every $t$,
$S_t = S_0 \left(I - \sum_{i \le t} w_i k_i^\top\right) + \sum_{i \le t} u_i k_i^\top$.
Derive how $w_t$ and $u_t$ follow from the chunk's tokens and write
`delta_rule_wy(keys, values, beta)`. `keys` is a float32 tensor of shape `(batch, num_heads, C, d_k)`
whose rows have unit length (`C` may exceed `d_k`), `values` of shape `(batch, num_heads, C, d_v)`, and
`beta` of shape `(batch, num_heads, C)` with entries in `(0, 1)`. Return the tuple `(w, u)`, float32
tensors of shapes `(batch, num_heads, C, d_k)` and `(batch, num_heads, C, d_v)` whose row `t - 1` holds
$w_t$ and $u_t$.
"""
from __future__ import annotations

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def delta_rule_wy(keys, values, beta):
    """The WY vectors (w, u) of one chunk of the delta rule, by a unit lower-triangular solve."""
    k, v, b = keys.double(), values.double(), beta.double().unsqueeze(-1)
    chunk = k.shape[-2]
    # Row t: w_t + beta_t sum_{i<t} (k_t . k_i) w_i = beta_t k_t, and likewise for u_t with v_t.
    lower = torch.tril(b * (k @ k.transpose(-2, -1)), diagonal=-1)
    system = torch.eye(chunk, dtype=k.dtype) + lower
    w = torch.linalg.solve_triangular(system, b * k, upper=False, unitriangular=True)
    u = torch.linalg.solve_triangular(system, b * v, upper=False, unitriangular=True)
    return w.to(keys.dtype), u.to(values.dtype)


# Inputs of the public and hidden checks ---------------------------------------------------


def _case(g, batch, heads, chunk, d_k, d_v, spread=1.0, beta_range=(0.05, 0.95)):
    """Unit keys around a shared direction (spread 1: independent draws; small: nearly parallel)."""
    shared = torch.randn(batch, heads, 1, d_k, generator=g)
    keys = shared * (1 - spread) + spread * torch.randn(batch, heads, chunk, d_k, generator=g)
    keys = keys / keys.norm(dim=-1, keepdim=True)
    low, high = beta_range
    beta = low + (high - low) * torch.rand(batch, heads, chunk, generator=g)
    return Call(args=(keys, torch.randn(batch, heads, chunk, d_v, generator=g), beta))


def _small_calls(seed):
    """One head, a chunk of 4 tokens with keys of 6 numbers and values of 3."""
    g = gen(seed)
    return [_case(g, 1, 1, 4, 6, 3)]


def _long_parallel_calls(seed):
    """2 sequences of 2 heads, a chunk of 8 tokens, longer than the 5 numbers of a key, the keys
    nearly parallel (each token's update undoes much of the earlier ones)."""
    g = gen(seed)
    return [_case(g, 2, 2, 8, 5, randint(g, 2, 4), spread=0.3)]


def _extreme_beta_calls(seed):
    """Write strengths near 1 (a key's old value replaced) and near 0 (barely touched)."""
    g = gen(seed)
    return [_case(g, 1, 2, 6, 4, 3, beta_range=(0.9, 0.99)), _case(g, 1, 2, 6, 4, 3, beta_range=(0.01, 0.1))]


def _hidden_calls(seed):
    g = gen(seed)
    return [_case(g, randint(g, 1, 2), randint(g, 1, 3), randint(g, 2, 12), randint(g, 2, 8), randint(g, 1, 5),
                  spread=(1.0, 0.5, 0.2)[randint(g, 0, 2)]) for _ in range(3)]


_HINT = ("this check compares w and u with the vectors of the WY form (the reason says which of the "
         "two differs and by how much). Expand S_t from S_(t-1), using the form for t - 1, and match the terms.")


# Kept mistakes, each with its hint --------------------------------------------------------


def _wy_loop(keys, values, beta, beta_on_corrections=True, earlier=True, recursive=True):
    k, v, b = keys.double(), values.double(), beta.double()
    chunk = k.shape[-2]
    w, u = torch.zeros_like(k), torch.zeros_like(v)
    order = range(chunk) if earlier else reversed(range(chunk))
    done = []
    for t in order:
        w_t, u_t = b[..., t, None] * k[..., t, :], b[..., t, None] * v[..., t, :]
        for i in done:
            overlap = (k[..., i, :] * k[..., t, :]).sum(-1, keepdim=True)
            scale = b[..., t, None] if beta_on_corrections else 1.0
            w_i = w[..., i, :] if recursive else b[..., i, None] * k[..., i, :]
            u_i = u[..., i, :] if recursive else b[..., i, None] * v[..., i, :]
            w_t, u_t = w_t - scale * overlap * w_i, u_t - scale * overlap * u_i
        w[..., t, :], u[..., t, :] = w_t, u_t
        done.append(t)
    return w.to(keys.dtype), u.to(values.dtype)


@mistakes.keep("beta left off the corrections",
               "each token's vectors scale its own key and value by beta_t, but the terms that correct for the "
               "earlier tokens were left without that factor; expand beta_t's update again and see which terms "
               "it multiplies.")
def _wy_no_beta_on_corrections(keys, values, beta):
    return _wy_loop(keys, values, beta, beta_on_corrections=False)


@mistakes.keep("corrections from later tokens",
               "row t was corrected by the tokens after it in the chunk; the state after token t depends only on "
               "tokens 1 to t, so only earlier rows enter row t.")
def _wy_later_tokens(keys, values, beta):
    return _wy_loop(keys, values, beta, earlier=False)


@mistakes.keep("corrections by the raw updates",
               "row t was corrected by the earlier tokens' own beta_i k_i and beta_i v_i: that keeps only the "
               "first-order term of the product of the updates, exact only when the keys are orthogonal.")
def _wy_first_order(keys, values, beta):
    return _wy_loop(keys, values, beta, recursive=False)


@mistakes.keep("own key inside the triangular system",
               "the triangular system kept its diagonal terms beta_t (k_t . k_t): row t was corrected by itself "
               "too, while only the tokens before t correct it.")
def _wy_with_diagonal(keys, values, beta):
    k, v, b = keys.double(), values.double(), beta.double().unsqueeze(-1)
    system = torch.eye(k.shape[-2], dtype=k.dtype) + torch.tril(b * (k @ k.transpose(-2, -1)))
    return (torch.linalg.solve_triangular(system, b * k, upper=False).to(keys.dtype),
            torch.linalg.solve_triangular(system, b * v, upper=False).to(values.dtype))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("row by row", "forward substitution in a Python loop over the chunk's tokens, float64")
def _wy_alt_loop(keys, values, beta):
    k, v, b = keys.double(), values.double(), beta.double()
    rows_w, rows_u = [], []
    for t in range(k.shape[-2]):
        strength = b[..., t, None]
        w_t, u_t = strength * k[..., t, :], strength * v[..., t, :]
        for i in range(t):  # every earlier token's correction, scaled by this token's strength
            dot = (k[..., i, :] * k[..., t, :]).sum(-1, keepdim=True)
            w_t, u_t = w_t - strength * dot * rows_w[i], u_t - strength * dot * rows_u[i]
        rows_w.append(w_t)
        rows_u.append(u_t)
    return torch.stack(rows_w, dim=-2).to(keys.dtype), torch.stack(rows_u, dim=-2).to(values.dtype)


@alternatives.keep("read off the running products",
                   "runs the recurrence on P_t and H_t (S_t = S_0 P_t + H_t) and reads w_t, u_t off each step")
def _wy_alt_products(keys, values, beta):
    k, v, b = keys.double(), values.double(), beta.double()
    *lead, chunk, d_k = k.shape
    eye = torch.eye(d_k, dtype=k.dtype).expand(*lead, d_k, d_k)
    p, h = eye.clone(), torch.zeros(*lead, v.shape[-1], d_k, dtype=k.dtype)
    ws, us = [], []
    for t in range(chunk):
        kt = k[..., t, :]
        step = eye - b[..., t, None, None] * kt.unsqueeze(-1) * kt.unsqueeze(-2)
        new_p = p @ step
        new_h = h @ step + b[..., t, None, None] * v[..., t, :].unsqueeze(-1) * kt.unsqueeze(-2)
        norm2 = (kt * kt).sum(-1, keepdim=True)
        ws.append(((p - new_p) @ kt.unsqueeze(-1)).squeeze(-1) / norm2)   # P_(t-1) - P_t = w_t k_t^T
        us.append(((new_h - h) @ kt.unsqueeze(-1)).squeeze(-1) / norm2)   # H_t - H_(t-1) = u_t k_t^T
        p, h = new_p, new_h
    return torch.stack(ws, -2).float(), torch.stack(us, -2).float()


@alternatives.keep("inverse of the triangular matrix",
                   "T = (I + strictly lower part of diag(beta) K K^T)^-1 diag(beta), by torch.linalg.inv, in float32")
def _wy_alt_inverse(keys, values, beta):
    gram = torch.einsum("bhtd,bhsd->bhts", keys, keys)
    a = (beta.unsqueeze(-1) * gram).tril(-1)
    t_matrix = torch.linalg.inv(torch.eye(keys.shape[-2]) + a) * beta.unsqueeze(-2)
    return t_matrix @ keys, t_matrix @ values


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch10_ex4", title="The delta rule's chunk in WY form",
    name="delta_rule_wy", reference=delta_rule_wy, points=3,
    checks=[
        Check("one head, a chunk of 4 tokens", _small_calls, seed=0, hint=_HINT, atol=1e-4),
        Check("a chunk longer than a key, nearly parallel keys, 2 sequences of 2 heads", _long_parallel_calls,
              seed=1, hint=_HINT, atol=1e-4),
        Check("write strengths near 1 and near 0", _extreme_beta_calls, seed=2, hint=_HINT, atol=1e-4),
        Check("random chunks, sizes and key spreads (hidden)", _hidden_calls, seed=3, public=False, hint=_HINT,
              atol=1e-4),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
