"""Chapter 10: attention variants as small functions of one score -- ALiBi, soft-capping, document masks
-- in the style of PyTorch's FlexAttention, and a probe of FlexAttention on this machine's CPU.

Many of today's variants change only one score at a time, from its value and four integers: the batch
``b``, the head ``h``, the query's position ``q_idx`` and the key's ``kv_idx``. FlexAttention
(``torch.nn.attention.flex_attention``) takes them as two functions:

* a **score_mod** ``(score, b, h, q_idx, kv_idx) -> new score`` (before the softmax), and
* a **mask_mod** ``(b, h, q_idx, kv_idx) -> bool``, **True where the query may attend** (the opposite
  of the course's masks, where True = masked; :func:`mask_from_mask_mod` converts).

The functions here are written with tensor operations only, so the same function runs in
:func:`attention_with_mods` (this module's plain reference: every score materialised, the index
tensors broadcast) and in FlexAttention:

* ALiBi (Press et al., 2022): no position embedding; head ``h`` adds ``-slope_h * (q_idx - kv_idx)``,
  with slopes ``2 ** (-8 (h + 1) / num_heads)`` (:func:`alibi_slopes`; the paper's rule for a head
  count that is not a power of two is followed too).
* Soft-capping (Gemma 2, Gemma Team, 2024): ``cap * tanh(score / cap)`` keeps every score inside
  ``(-cap, cap)`` and changes small ones hardly at all (Gemma 2: 50 on attention scores, 30 on the
  final logits).
* Document masks: sequences packed into one row attend only within their own document.

:func:`probe_flex_attention` runs FlexAttention on the CPU, eagerly and (optionally) compiled,
against :func:`attention_with_mods`, and reports what happened instead of assuming it works.
Imports only torch (FlexAttention inside the probe).
"""
from __future__ import annotations

import math
import time
from typing import Callable, Optional

import torch

__all__ = ["alibi_slopes", "alibi_score_mod", "softcap", "softcap_score_mod", "causal_mask_mod",
           "sliding_window_mask_mod", "document_mask_mod", "and_mask_mods", "mask_from_mask_mod",
           "attention_with_mods", "probe_flex_attention"]


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """ALiBi's head slopes, float64 ``(num_heads,)``: ``2 ** (-8 h / num_heads)`` for ``h = 1 .. num_heads``
    when ``num_heads`` is a power of two; otherwise the slopes of the largest power of two below it,
    followed by every other slope of twice that power (the paper's rule)."""
    if num_heads < 1:
        raise ValueError(f"num_heads must be at least 1, got num_heads={num_heads}")

    def power_of_two(n):
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    below = 2 ** math.floor(math.log2(num_heads))
    slopes = power_of_two(below)
    if below < num_heads:
        slopes += power_of_two(2 * below)[0::2][: num_heads - below]
    return torch.tensor(slopes, dtype=torch.float64)


def alibi_score_mod(slopes: torch.Tensor) -> Callable:
    """``score - slopes[h] * (q_idx - kv_idx)``: a linear penalty on distance, one slope per head."""
    def alibi(score, b, h, q_idx, kv_idx):
        return score - slopes.to(score.dtype)[h] * (q_idx - kv_idx)
    return alibi


def softcap(scores: torch.Tensor, cap: float) -> torch.Tensor:
    """``cap * tanh(scores / cap)``: inside ``(-cap, cap)``, nearly the identity for ``|score| << cap``."""
    if not cap > 0:
        raise ValueError(f"cap must be positive, got cap={cap}")
    return cap * torch.tanh(scores / cap)


def softcap_score_mod(cap: float) -> Callable:
    def capped(score, b, h, q_idx, kv_idx):
        return softcap(score, cap)
    return capped


def causal_mask_mod(b, h, q_idx, kv_idx):
    """True where ``kv_idx <= q_idx``."""
    return kv_idx <= q_idx


def sliding_window_mask_mod(window: int) -> Callable:
    """True where ``q_idx - window < kv_idx <= q_idx``: the course's window counts the query itself."""
    if window < 1:
        raise ValueError(f"window must be at least 1, got window={window}")

    def in_window(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (q_idx - kv_idx < window)
    return in_window


def document_mask_mod(document_ids: torch.Tensor) -> Callable:
    """True where query and key belong to the same document; ``document_ids`` ``(num_tokens,)`` or
    ``(batch, num_tokens)`` gives each packed token's document. Combine with :func:`causal_mask_mod`."""
    ids = document_ids if document_ids.dim() == 2 else document_ids[None]

    def same_document(b, h, q_idx, kv_idx):
        return ids[b, q_idx] == ids[b, kv_idx]
    return same_document


def and_mask_mods(*mask_mods: Callable) -> Callable:
    """A mask_mod that allows a pair only where every one of ``mask_mods`` does."""
    def both(b, h, q_idx, kv_idx):
        allowed = mask_mods[0](b, h, q_idx, kv_idx)
        for mod in mask_mods[1:]:
            allowed = allowed & mod(b, h, q_idx, kv_idx)
        return allowed
    return both


def _indices(batch: int, heads: int, num_queries: int, num_keys: int) -> tuple:
    """Index tensors that broadcast to ``(batch, heads, num_queries, num_keys)``."""
    return (torch.arange(batch).view(-1, 1, 1, 1), torch.arange(heads).view(1, -1, 1, 1),
            torch.arange(num_queries).view(1, 1, -1, 1), torch.arange(num_keys).view(1, 1, 1, -1))


def mask_from_mask_mod(mask_mod: Callable, batch: int, heads: int, num_queries: int, num_keys: int) -> torch.Tensor:
    """The course's mask, ``True = masked``, ``(batch, heads, num_queries, num_keys)``, from a mask_mod."""
    b, h, q, k = _indices(batch, heads, num_queries, num_keys)
    return ~mask_mod(b, h, q, k).expand(batch, heads, num_queries, num_keys)


def attention_with_mods(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                        score_mod: Optional[Callable] = None, mask_mod: Optional[Callable] = None,
                        scale: Optional[float] = None) -> torch.Tensor:
    """Attention ``(batch, heads, num_queries, head_dim)`` with every score materialised: scores
    times ``scale`` (default ``1 / sqrt(head_dim)``, as FlexAttention), then ``score_mod``, then
    ``mask_mod``, then softmax. A row with no allowed key gives zeros (as FlexAttention)."""
    batch, heads, nq, d = queries.shape
    nk = keys.shape[-2]
    scores = queries @ keys.transpose(-2, -1) * (scale if scale is not None else 1 / math.sqrt(d))
    b, h, q, k = _indices(batch, heads, nq, nk)
    if score_mod is not None:
        scores = score_mod(scores, b, h, q, k)
    if mask_mod is not None:
        masked = mask_from_mask_mod(mask_mod, batch, heads, nq, nk)
        scores = scores.masked_fill(masked, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)         # an empty row: zeros, not NaN
    else:
        weights = torch.softmax(scores, dim=-1)
    return weights @ values


def probe_flex_attention(compiled: bool = False, num_tokens: int = 128, head_dim: int = 16, seed: int = 0) -> dict:
    """Run ``flex_attention`` on the CPU (eagerly, or through ``torch.compile`` when ``compiled``) with a
    causal document mask and an ALiBi + soft-cap score_mod, and compare with :func:`attention_with_mods`.
    Returns ``{"mode", "ran", "error", "max_abs_diff", "seconds_first_call"}`` -- never raises."""
    result = {"mode": "compiled" if compiled else "eager", "ran": False, "error": "", "max_abs_diff": float("nan"),
              "seconds_first_call": float("nan")}
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 4, num_tokens, head_dim, generator=g) for _ in range(3))
    docs = torch.arange(num_tokens) * 3 // num_tokens                   # three packed documents
    mask_mod = and_mask_mods(causal_mask_mod, document_mask_mod(docs))
    slopes, cap = alibi_slopes(4).float(), 20.0

    def score_mod(score, b, h, q_idx, kv_idx):
        return softcap(score - slopes[h] * (q_idx - kv_idx), cap)
    expected = attention_with_mods(q, k, v, score_mod, mask_mod)
    try:
        import warnings

        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        fn = torch.compile(flex_attention) if compiled else flex_attention
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")                              # eager mode warns that it is unfused
            block_mask = create_block_mask(mask_mod, 1, None, num_tokens, num_tokens, device="cpu")
            out = fn(q, k, v, score_mod=score_mod, block_mask=block_mask)
        result.update(ran=True, seconds_first_call=time.perf_counter() - start,
                      max_abs_diff=(out - expected).abs().max().item())
    except Exception as error:                                          # report, do not fail
        result["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
    return result
