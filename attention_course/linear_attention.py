"""Chapter 10: linear attention as a recurrence, and the (gated) delta rule in three forms.

Drop the softmax and causal attention becomes a running sum: ``o_t = sum_{i <= t} (q_t . k_i) v_i =
S_t q_t`` with the state ``S_t = S_{t-1} + v_t k_t^T`` of shape ``(d_v, d_k)`` (Katharopoulos et al.,
2020). The state is a fixed-size memory, so decoding costs the same at every step, but adding
``v_t k_t^T`` forever only piles up associations. The **delta rule** (Schlag et al., 2021; DeltaNet,
Yang et al., 2024) first reads what the memory returns for ``k_t`` and replaces a fraction ``beta_t``
of it by ``v_t``; **Gated DeltaNet** (Yang et al., 2025) also lets the whole memory decay by
``alpha_t``::

    S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,   o_t = S_t q_t,   S_0 = 0

(``alpha_t = 1``: the ungated rule). Shapes: q, k ``(batch, heads, T, d_k)`` (keys L2-normalised by
the caller), v ``(batch, heads, T, d_v)``, beta and alpha ``(batch, heads, T)``.

Three ways to compute the same outputs:

* :func:`delta_rule_recurrent` -- one step per token, the state carried along: what decoding does.
* :func:`delta_rule_parallel` -- all tokens at once, quadratic in ``T`` like softmax attention.
  Write ``S_t = sum_{i <= t} (g_t / g_i) u_i k_i^T`` with ``g_t = alpha_1 ... alpha_t``; then
  ``u_t = beta_t (v_t - sum_{i < t} (g_t / g_i) (k_i . k_t) u_i)``, a unit lower-triangular system
  ``(I + tril(diag(beta) (K K^T * G), -1)) U = diag(beta) V`` solved at once, and
  ``O = (Q K^T * G * causal) U`` with ``G[t, i] = g_t / g_i``.
* :func:`delta_rule_chunked` -- the same solve inside chunks of ``chunk_size`` tokens, the state
  passed from chunk to chunk: the training kernels' form (quadratic work only inside a chunk,
  matrix products throughout). The state entering a chunk adds ``- g_t S k_t`` to the right-hand side
  and ``g_t S q_t`` to the outputs.

The decays are handled as logarithms (``G`` = exp of differences of cumulative sums, masked before
the exponential), so long sequences do not underflow. Imports only torch.
"""
from __future__ import annotations

from typing import Optional

import torch

__all__ = ["linear_attention_recurrent", "delta_rule_recurrent", "delta_rule_parallel", "delta_rule_chunked"]


def _check(q, k, v, beta, alpha):
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"q, k must be (batch, heads, T, d_k) and v (batch, heads, T, d_v); got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    for name, t in (("beta", beta), ("alpha", alpha)):
        if t is not None and t.shape != q.shape[:3]:
            raise ValueError(f"{name} must be (batch, heads, T) = {tuple(q.shape[:3])}, got {tuple(t.shape)}")


def linear_attention_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal linear attention without normalisation: ``S_t = S_{t-1} + v_t k_t^T``, ``o_t = S_t q_t``."""
    _check(q, k, v, None, None)
    state = q.new_zeros(*q.shape[:2], v.shape[-1], q.shape[-1])
    outputs = []
    for t in range(q.shape[2]):
        state = state + v[:, :, t, :, None] * k[:, :, t, None, :]
        outputs.append(state @ q[:, :, t, :, None])
    return torch.cat(outputs, dim=-1).transpose(-2, -1)


def delta_rule_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                         alpha: Optional[torch.Tensor] = None,
                         initial_state: Optional[torch.Tensor] = None) -> tuple:
    """The (gated) delta rule one token at a time. Returns ``(outputs (batch, heads, T, d_v),
    final state (batch, heads, d_v, d_k))``. ``alpha=None``: the ungated rule."""
    _check(q, k, v, beta, alpha)
    state = (q.new_zeros(*q.shape[:2], v.shape[-1], q.shape[-1]) if initial_state is None else initial_state)
    outputs = []
    for t in range(q.shape[2]):
        k_t, v_t, b_t = k[:, :, t], v[:, :, t], beta[:, :, t, None, None]
        if alpha is not None:
            state = alpha[:, :, t, None, None] * state
        read = state @ k_t[..., None]                                   # what the memory returns for k_t
        state = state + b_t * (v_t[..., None] - read) * k_t[..., None, :]  # = S (I - b k k^T) + b v k^T
        outputs.append((state @ q[:, :, t, :, None])[..., 0])
    return torch.stack(outputs, dim=2), state


def _chunk(q, k, v, beta, log_alpha, state):
    """One chunk of length C: outputs ``(..., C, d_v)`` and the state after it, from the state before."""
    C = q.shape[-2]
    cum = log_alpha.cumsum(-1)                                          # log g_t within the chunk
    lower = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    diff = (cum[..., :, None] - cum[..., None, :]).masked_fill(~lower, float("-inf"))
    decay = diff.exp()                                                  # G[t, i] = g_t / g_i, 0 above the diagonal
    g = cum.exp()[..., None]                                            # (..., C, 1)
    kk = (k @ k.transpose(-2, -1)) * decay
    system = torch.eye(C, dtype=q.dtype, device=q.device) + (beta[..., None] * kk).tril(-1)
    rhs = beta[..., None] * (v - g * (k @ state.transpose(-2, -1)))     # beta_t (v_t - g_t S k_t)
    u = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
    out = g * (q @ state.transpose(-2, -1)) + ((q @ k.transpose(-2, -1)) * decay) @ u
    last = cum[..., -1:]                                                # log g_C
    new_state = last.exp()[..., None] * state + (u * (last - cum).exp()[..., None]).transpose(-2, -1) @ k
    return out, new_state


def _log_alpha(alpha, beta):
    return torch.zeros_like(beta) if alpha is None else alpha.log()


def delta_rule_parallel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                        alpha: Optional[torch.Tensor] = None) -> tuple:
    """All tokens at once (one triangular solve of size ``T``): ``(outputs, final state)`` as
    :func:`delta_rule_recurrent` from ``S_0 = 0``."""
    _check(q, k, v, beta, alpha)
    state = q.new_zeros(*q.shape[:2], v.shape[-1], q.shape[-1])
    return _chunk(q, k, v, beta, _log_alpha(alpha, beta), state)


def delta_rule_chunked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                       alpha: Optional[torch.Tensor] = None, chunk_size: int = 64,
                       initial_state: Optional[torch.Tensor] = None) -> tuple:
    """Chunks of ``chunk_size`` tokens (the last may be shorter), each solved in parallel, the state
    carried between them: ``(outputs, final state)`` as :func:`delta_rule_recurrent`."""
    _check(q, k, v, beta, alpha)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, got chunk_size={chunk_size}")
    state = (q.new_zeros(*q.shape[:2], v.shape[-1], q.shape[-1]) if initial_state is None else initial_state)
    log_alpha = _log_alpha(alpha, beta)
    outputs = []
    for start in range(0, q.shape[2], chunk_size):
        part = slice(start, start + chunk_size)
        out, state = _chunk(q[:, :, part], k[:, :, part], v[:, :, part], beta[:, :, part],
                            log_alpha[:, :, part], state)
        outputs.append(out)
    return torch.cat(outputs, dim=2), state
