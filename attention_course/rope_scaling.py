"""Chapter 10: rotary position embeddings past the training length, as changes of frequencies.

A RoPE model rotates pair ``i`` of a query or key (columns ``2i`` and ``2i + 1``, Chapter 4's
interleaved layout) by the angle ``position * inv_freq[i]``, with ``inv_freq[i] = base ** (-2 i / d)``.
A model trained on ``original_context`` tokens has seen, for each pair, only the angles up to
``original_context * inv_freq[i]``. Every context-extension method below keeps the rotation and
changes only the frequencies, so each one is a function from ``inv_freq`` (shape ``(d/2,)``,
float64 so that the comparisons in the chapter are exact to many digits) to new ``inv_freq``:

* :func:`position_interpolation` (Chen et al., 2023) divides every frequency by ``scale``: position
  ``p`` then gets the angles position ``p / scale`` had, so ``scale`` times more tokens fit in the
  angles the model knows, at the price of crowding the fast pairs that tell neighbours apart.
* :func:`ntk_aware` raises the base to ``base * scale ** (d / (d - 2))``: the fastest pair is untouched,
  the slowest is divided by exactly ``scale``, and the pairs between by a geometric blend.
* :func:`yarn` (Peng et al., 2023; "NTK-by-parts") looks at how many full turns each pair makes
  over the original context, ``r = original_context / wavelength``: pairs with ``r > beta`` (many
  turns, local information) keep their frequency, pairs with ``r < alpha`` (less than a turn) are
  interpolated like position interpolation, and a linear ramp in ``r`` blends the ones between.
  :func:`yarn_attention_scale` is its second half: queries and keys are both multiplied by
  ``0.1 ln(scale) + 1`` (so the scores by its square), to sharpen a softmax spread over more keys.
* :func:`llama3` (Llama 3.1's ``rope_scaling``) is the same ramp in ``r`` with ``alpha =
  low_freq_factor``, ``beta = high_freq_factor`` and no change of the scores.

The ramp of the Hugging Face ``transformers`` YaRN code is linear in the pair *index* between rounded
boundaries rather than linear in ``r``; the two agree at the ends and differ a little between them.
This module follows the paper's formula. Imports only torch and math.
"""
from __future__ import annotations

import math
import torch

__all__ = ["rope_inverse_frequencies", "rope_angles", "apply_rope", "position_interpolation", "ntk_aware",
           "yarn", "yarn_attention_scale", "llama3", "turns_over_context"]


def rope_inverse_frequencies(head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """``inv_freq[i] = base ** (-2 i / head_dim)`` for ``i = 0 .. head_dim/2 - 1``, float64, shape ``(head_dim/2,)``."""
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"head_dim must be even and at least 2, got head_dim={head_dim}")
    return base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


def rope_angles(positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """The angle of every pair at every position: ``(num_positions, d/2)``, float64."""
    return positions.to(torch.float64)[:, None] * inv_freq.to(torch.float64)[None, :]


def apply_rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``(..., num_tokens, d)`` in Chapter 4's interleaved layout: pair ``i`` (columns
    ``2i, 2i + 1``) of token ``t`` turns by ``positions[t] * inv_freq[i]``. The angles are computed in
    float64 and the result has ``x``'s dtype."""
    d = x.shape[-1]
    if d != 2 * inv_freq.shape[-1]:
        raise ValueError(f"x has {d} features but inv_freq has {inv_freq.shape[-1]} pairs (needs {d // 2})")
    if positions.shape[-1] != x.shape[-2]:
        raise ValueError(f"positions has {positions.shape[-1]} entries for {x.shape[-2]} tokens")
    angles = rope_angles(positions, inv_freq)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def _check_scale(scale: float) -> None:
    if not scale >= 1:
        raise ValueError(f"scale must be at least 1 (the context grows by this factor), got scale={scale}")


def position_interpolation(inv_freq: torch.Tensor, scale: float) -> torch.Tensor:
    """Every frequency divided by ``scale``: position ``p`` rotates as position ``p / scale`` did."""
    _check_scale(scale)
    return inv_freq / scale


def ntk_aware(inv_freq: torch.Tensor, scale: float) -> torch.Tensor:
    """The frequencies of the base ``base * scale ** (d / (d - 2))``, computed from ``inv_freq`` alone:
    pair ``i`` is multiplied by ``scale ** (-2 i / (d - 2))`` (pair 0 unchanged, the last pair / ``scale``)."""
    _check_scale(scale)
    pairs = inv_freq.shape[-1]
    if pairs < 2:
        raise ValueError("ntk_aware needs at least two pairs (d >= 4)")
    i = torch.arange(pairs, dtype=inv_freq.dtype)
    return inv_freq * scale ** (-i / (pairs - 1))            # 2 i / (d - 2) = i / (pairs - 1)


def turns_over_context(inv_freq: torch.Tensor, original_context: int) -> torch.Tensor:
    """``r = original_context / wavelength = original_context * inv_freq / (2 pi)``: how many full turns
    each pair makes over the training context (YaRN's and Llama 3's measure of "fast" and "slow")."""
    return original_context * inv_freq / (2 * math.pi)


def _ramp_blend(inv_freq, scale, original_context, alpha, beta):
    """``(1 - gamma) * inv_freq / scale + gamma * inv_freq``, gamma = clamp((r - alpha) / (beta - alpha), 0, 1)."""
    _check_scale(scale)
    if not beta > alpha:
        raise ValueError(f"the ramp needs beta > alpha, got alpha={alpha}, beta={beta}")
    gamma = ((turns_over_context(inv_freq, original_context) - alpha) / (beta - alpha)).clamp(0.0, 1.0)
    return (1 - gamma) * inv_freq / scale + gamma * inv_freq


def yarn(inv_freq: torch.Tensor, scale: float, original_context: int, alpha: float = 1.0,
         beta: float = 32.0) -> torch.Tensor:
    """YaRN's frequencies ("NTK-by-parts"): unchanged for pairs making more than ``beta`` turns over
    ``original_context``, divided by ``scale`` for pairs making fewer than ``alpha``, a linear ramp in
    the number of turns between. Use :func:`yarn_attention_scale` on queries and keys as well."""
    return _ramp_blend(inv_freq, scale, original_context, alpha, beta)


def yarn_attention_scale(scale: float) -> float:
    """YaRN's factor ``0.1 ln(scale) + 1`` for queries and keys (the scores get its square)."""
    _check_scale(scale)
    return 0.1 * math.log(scale) + 1.0


def llama3(inv_freq: torch.Tensor, scale: float = 8.0, original_context: int = 8192,
           low_freq_factor: float = 1.0, high_freq_factor: float = 4.0) -> torch.Tensor:
    """Llama 3.1's frequencies (defaults: its published ``rope_scaling``): pairs whose wavelength is
    below ``original_context / high_freq_factor`` keep their frequency, pairs whose wavelength is above
    ``original_context / low_freq_factor`` are divided by ``scale``, and the ones between are blended
    linearly in ``original_context / wavelength``. Unlike YaRN, the scores are not rescaled."""
    return _ramp_blend(inv_freq, scale, original_context, low_freq_factor, high_freq_factor)
