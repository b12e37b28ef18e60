"""Reusable attention building blocks (finished in Chapter 3, reused in Chapters 6-7).

Shapes follow one convention across the course::

    queries     (batch, num_queries, d)
    keys        (batch, num_keys, d)         # d_k for additive attention
    values      (batch, num_keys, d_v)
    valid_lens  None, (batch,) or (batch, num_queries), integer (or integral float) tensor
    scores      (batch, num_queries, num_keys)
    weights     (batch, num_queries, num_keys)
    output      (batch, num_queries, d_v)

``valid_lens`` says how many keys, counted from the left, each query may look at;
the keys after that are padding. A 1-D ``valid_lens`` gives one length per sequence
(shared by all its queries), a 2-D one gives a length per query.

**A valid length of 0.** A query with no valid key gets an all-zero row of weights,
so its output is the zero vector (and no NaN appears in the forward or backward
pass). It is not given uniform weights over the padding, which is what masking with
a large finite negative number (``-1e6``) silently does, and it is not NaN, which
is what masking with ``-inf`` alone gives. So the weights of a row sum to 1 when
the row has at least one valid key and to 0 when it has none.

Multi-head attention (Chapter 6) folds the heads into the batch axis, so a caller
with ``h`` heads passes ``valid_lens.repeat_interleave(h, dim=0)``.

Every function raises ``ValueError`` naming the argument(s) and their shapes when
the shapes do not fit together.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import torch
from torch import nn

__all__ = ["check_attention_inputs", "valid_mask", "masked_softmax",
           "scaled_dot_product_attention", "AdditiveAttention"]


def _shape(tensor: torch.Tensor) -> tuple:
    return tuple(tensor.shape)


def _check_valid_lens(valid_lens: torch.Tensor, batch: int, num_queries: int,
                      num_keys: int, other: str, other_shape: tuple) -> None:
    if not isinstance(valid_lens, torch.Tensor):
        raise TypeError(f"valid_lens must be a torch.Tensor or None, got {type(valid_lens).__name__}")
    if _shape(valid_lens) not in ((batch,), (batch, num_queries)):
        raise ValueError(
            f"valid_lens has shape {_shape(valid_lens)}, but {other} has shape {other_shape}: "
            f"valid_lens must have shape ({batch},) or ({batch}, {num_queries})")
    if valid_lens.numel() and (valid_lens.min() < 0 or valid_lens.max() > num_keys):
        raise ValueError(
            f"valid_lens must lie between 0 and num_keys={num_keys}, got values from "
            f"{valid_lens.min().item()} to {valid_lens.max().item()}")


def valid_mask(valid_lens: torch.Tensor, num_queries: int, num_keys: int) -> torch.Tensor:
    """Boolean mask of shape ``(batch, num_queries, num_keys)``: True where a key is valid.

    ``valid_lens`` has shape ``(batch,)`` or ``(batch, num_queries)``.
    """
    if valid_lens.dim() == 1:
        valid_lens = valid_lens[:, None].expand(-1, num_queries)
    positions = torch.arange(num_keys, device=valid_lens.device)
    return positions < valid_lens[..., None]


def masked_softmax(scores: torch.Tensor, valid_lens: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Softmax over the keys axis (the last one), ignoring keys beyond each valid length.

    ``scores``: ``(batch, num_queries, num_keys)``; ``valid_lens``: ``None`` (plain
    softmax), ``(batch,)`` or ``(batch, num_queries)``, values in ``[0, num_keys]``.
    Returns weights of the same shape and dtype as ``scores``. Masked positions get
    exactly 0; a row with valid length 0 is all zeros (see the module docstring).
    """
    if scores.dim() != 3:
        raise ValueError(f"scores must have shape (batch, num_queries, num_keys), got {_shape(scores)}")
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    batch, num_queries, num_keys = scores.shape
    _check_valid_lens(valid_lens, batch, num_queries, num_keys, "scores", _shape(scores))
    mask = valid_mask(valid_lens, num_queries, num_keys)
    # -inf gives masked keys exactly zero weight; a row that is entirely -inf comes
    # out of the softmax as NaN, and torch.where turns it into zeros. The gradient of
    # such a row is zero too: the softmax's backward pass still meets the NaN, but
    # masked_fill gives the positions it overwrote (all of that row) a zero gradient,
    # so no NaN reaches `scores`. (Adding a -inf mask instead would let it through.)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return torch.where(mask, weights, torch.zeros((), dtype=weights.dtype, device=weights.device))


def check_attention_inputs(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                           valid_lens: Optional[torch.Tensor] = None, same_size: bool = True) -> None:
    """Raise ``ValueError`` naming the arguments and shapes when they do not fit together.

    With ``same_size`` (dot-product scoring) queries and keys must share their last
    size; additive attention passes ``same_size=False``.
    """
    for name, tensor in (("queries", queries), ("keys", keys), ("values", values)):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dim() != 3:
            raise ValueError(f"{name} must be 3-D (batch, length, size), got shape {_shape(tensor)}")
    if not queries.shape[0] == keys.shape[0] == values.shape[0]:
        raise ValueError(
            f"queries, keys and values must have the same batch size, got shapes "
            f"{_shape(queries)}, {_shape(keys)} and {_shape(values)}")
    if same_size and queries.shape[-1] != keys.shape[-1]:
        raise ValueError(
            f"queries and keys must have the same last size d, got queries of shape "
            f"{_shape(queries)} and keys of shape {_shape(keys)}")
    if keys.shape[1] != values.shape[1]:
        raise ValueError(
            f"keys and values must have the same number of keys, got keys of shape "
            f"{_shape(keys)} and values of shape {_shape(values)}")
    if valid_lens is not None:
        _check_valid_lens(valid_lens, queries.shape[0], queries.shape[1], keys.shape[1],
                          "queries", _shape(queries))


def scaled_dot_product_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                                 valid_lens: Optional[torch.Tensor] = None, *,
                                 dropout: Optional[Callable] = None) -> tuple:
    """Scaled dot-product attention; returns ``(output, weights)``.

    ``scores = queries @ keys^T / sqrt(d)``, ``weights = masked_softmax(scores,
    valid_lens)``, ``output = weights @ values``. ``output`` has shape
    ``(batch, num_queries, d_v)``, ``weights`` ``(batch, num_queries, num_keys)``.
    ``dropout`` (e.g. an ``nn.Dropout``) is applied to the weights before they pool
    the values; the returned weights are the ones before dropout.
    """
    check_attention_inputs(queries, keys, values, valid_lens)
    scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(queries.shape[-1])
    weights = masked_softmax(scores, valid_lens)
    pooled = dropout(weights) if dropout is not None else weights
    return torch.bmm(pooled, values), weights


class AdditiveAttention(nn.Module):
    """Additive (Bahdanau-style) attention; ``forward`` returns ``(output, weights)``.

    ``score(q, k) = w_v^T tanh(W_q q + W_k k)`` with three bias-free linear layers:
    ``W_q`` (query_size -> num_hiddens), ``W_k`` (key_size -> num_hiddens) and
    ``w_v`` (num_hiddens -> 1). Queries and keys may have different sizes.
    ``dropout`` is applied to the weights before they pool the values (training mode
    only); the returned weights are the ones before dropout.
    """

    def __init__(self, query_size: int, key_size: int, num_hiddens: int, dropout: float = 0.0):
        super().__init__()
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                valid_lens: Optional[torch.Tensor] = None) -> tuple:
        check_attention_inputs(queries, keys, values, valid_lens, same_size=False)
        # (batch, num_queries, 1, h) + (batch, 1, num_keys, h) broadcasts to every pair.
        features = torch.tanh(self.W_q(queries).unsqueeze(2) + self.W_k(keys).unsqueeze(1))
        # w_v turns each pair's features into one score: (batch, num_queries, num_keys).
        weights = masked_softmax(self.w_v(features).squeeze(-1), valid_lens)
        return torch.bmm(self.dropout(weights), values), weights
