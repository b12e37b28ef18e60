"""Helpers shared by the exercises of chapter 8 (one copy each)."""
from __future__ import annotations

import math

from torch import nn
import torch


def _lens(g, batch, num_tokens, low=1):
    """Lengths in [low, num_tokens], the first one full."""
    lens = torch.randint(low, num_tokens + 1, (batch,), generator=g)
    lens[0] = num_tokens
    return lens


def _kpm(lens, num_keys):
    """A key padding mask from lengths: (batch, num_keys), True at the padded keys."""
    return torch.arange(num_keys)[None, :] >= lens[:, None]


def _heads_of(t, num_heads):
    batch, length, d_model = t.shape
    return t.view(batch, length, num_heads, d_model // num_heads).transpose(1, 2)


class _Attention(nn.Module):
    """Multi-head attention with Chapter 6's parameters (W_query, W_key, W_value without bias,
    out_proj): the core of exercise 2's CrossAttention and the two attention sublayers of
    exercise 3's DecoderBlock. forward(queries_in, keys_in, hidden) returns the output,
    attend(...) the pair (output, weights); hidden, broadcastable to (batch, heads, num_queries,
    num_keys), is True at the pairs that get weight exactly 0 (a row hidden entirely gives
    zero weights, not NaN)."""

    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.W_query = nn.Linear(d_model, d_model, bias=False)
        self.W_key = nn.Linear(d_model, d_model, bias=False)
        self.W_value = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model)

    def attend(self, queries_in, keys_in, hidden):
        batch, num_queries, d_model = queries_in.shape
        q = _heads_of(self.W_query(queries_in), self.num_heads)
        k = _heads_of(self.W_key(keys_in), self.num_heads)
        v = _heads_of(self.W_value(keys_in), self.num_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        weights = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1).masked_fill(hidden, 0.0)
        context = (weights @ v).transpose(1, 2).reshape(batch, num_queries, d_model)
        return self.out_proj(context), weights

    def forward(self, queries_in, keys_in, hidden):
        return self.attend(queries_in, keys_in, hidden)[0]
