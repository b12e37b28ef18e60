"""Chapter 8: the Transformer encoder-decoder, built from the course's own pieces.

Every attention in this module is Chapter 6's efficient multi-head layer,
:class:`attention_course.multihead.MultiHeadAttention`: :class:`MaskedMultiHeadAttention`
subclasses it, keeps its parameters (``W_query``, ``W_key``, ``W_value``, ``out_proj``),
its head split and merge and its causal buffer ``mask``, and replaces only ``forward`` so
that the keys and values may come from another sequence (cross-attention) and any
boolean mask may hide keys. Nothing here is a second copy of a layer of
:mod:`attention_course.multihead` or :mod:`attention_course.functional`.

Masks follow Chapters 5 and 6 (and ``nn.MultiheadAttention``): a boolean mask is
``True`` where a query must **not** attend to a key.

* :func:`padding_mask` ``(batch, num_keys)``: True at the padding after each valid length
  (built from :func:`attention_course.functional.valid_mask`);
* :func:`causal_mask` ``(num_queries, num_keys)``: True strictly above the diagonal;
* :func:`decoder_self_mask` ``(batch, num_tokens, num_tokens)``: the two together, what a
  decoder's self-attention over a right-padded batch of targets uses.

A query whose keys are all hidden gets all-zero weights (Chapter 3's convention), never NaN.

Blocks (``norm_first=True`` is pre-LN, ``False`` post-LN):

* :class:`PositionwiseFFN` -- ``linear2(dropout(relu(linear1(x))))``, applied to every position;
* :class:`EncoderBlock` -- self-attention over the source (padding hidden), then the FFN;
* :class:`DecoderBlock` -- causal self-attention, cross-attention over the encoder output
  (its padding hidden), then the FFN.

Pre-LN: ``x = x + dropout(sublayer(norm(x)))``; post-LN: ``x = norm(x + dropout(sublayer(x)))``.

:class:`Transformer` is an encoder-decoder with the interface of Chapter 7's
:class:`attention_course.translation.Seq2Seq` (``forward(src, src_lens, tgt_in)`` returns
``(logits, None)``, ``greedy(src, src_lens, max_len)`` returns ``(tokens, weights)``), so
:func:`attention_course.translation.train_model`, :func:`~attention_course.translation.exact_match`
and :func:`~attention_course.translation.translate` work on it unchanged. Embeddings are
scaled by ``sqrt(d_model)`` and the sinusoidal positional encoding of Chapter 4
(:func:`sinusoidal_encoding`) is added. Pre-LN models end the encoder and the decoder with a
final layer norm (``enc_norm``, ``dec_norm``); the output layer ``out`` maps ``d_model`` to the
target vocabulary.

The shipped weights (``pretrained/ch08_transformer.pt``, made by ``bench/transformer.py``)
load with :func:`load_pretrained_transformer`.

This module imports only torch, :mod:`attention_course.multihead`,
:mod:`attention_course.functional` and :mod:`attention_course.translation`: it ships to
the grading child with the rest of the package and holds no check and no reference answer.
"""
from __future__ import annotations

import math
import sys
import time
import weakref
from typing import Optional

import torch
from torch import nn

from . import multihead as mh
from .functional import valid_mask
from .translation import PRETRAINED_DIR, SOURCE_VOCAB, TARGET_VOCAB, Batches, Vocab, exact_match

__all__ = ["sinusoidal_encoding", "padding_mask", "causal_mask", "decoder_self_mask",
           "MaskedMultiHeadAttention", "PositionwiseFFN", "EncoderBlock", "DecoderBlock",
           "Transformer", "build_transformer", "load_pretrained_transformer", "count_parameters",
           "learning_rate_factor", "train_scheduled"]


# ------------------------------------------------------------------ positions and masks

def sinusoidal_encoding(num_positions: int, d_model: int) -> torch.Tensor:
    """Chapter 4's table, float32 ``(num_positions, d_model)``: column ``2i`` is
    ``sin(pos / 10000^(2i/d_model))``, column ``2i + 1`` the cosine of the same angle."""
    if isinstance(num_positions, bool) or not isinstance(num_positions, int) or num_positions < 1:
        raise ValueError(f"num_positions must be a positive integer, got {num_positions!r}")
    if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model < 2 or d_model % 2:
        raise ValueError(f"d_model must be a positive even integer, got {d_model!r}")
    pos = torch.arange(num_positions, dtype=torch.float64)[:, None]
    angles = pos / 10000.0 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1).float()


def _check_lens(lens, num_tokens: int, name: str) -> None:
    if not isinstance(lens, torch.Tensor) or lens.dim() != 1:
        shape = tuple(lens.shape) if isinstance(lens, torch.Tensor) else type(lens).__name__
        raise ValueError(f"{name} must be a 1-D tensor of lengths (batch,), got {name} of shape {shape}")
    if lens.numel() and (int(lens.min()) < 0 or int(lens.max()) > num_tokens):
        raise ValueError(f"{name} must lie between 0 and {num_tokens}, got {lens.tolist()}")


def padding_mask(lens: torch.Tensor, num_keys: int) -> torch.Tensor:
    """Bool ``(batch, num_keys)``: True at the keys past each sequence's length (the padding)."""
    _check_lens(lens, num_keys, "lens")
    return ~valid_mask(lens, 1, num_keys)[:, 0]


def causal_mask(num_queries: int, num_keys: Optional[int] = None) -> torch.Tensor:
    """Bool ``(num_queries, num_keys)``: True strictly above the diagonal (the future)."""
    num_keys = num_queries if num_keys is None else num_keys
    return torch.ones(num_queries, num_keys, dtype=torch.bool).triu(1)


def decoder_self_mask(tgt_lens: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """Bool ``(batch, num_tokens, num_tokens)``: query ``i`` of sequence ``b`` must not see
    key ``j`` when ``j > i`` (the future) or ``j >= tgt_lens[b]`` (the padding)."""
    return causal_mask(num_tokens)[None] | padding_mask(tgt_lens, num_tokens)[:, None, :]


# ------------------------------------------------------------------ layers

class MaskedMultiHeadAttention(mh.MultiHeadAttention):
    """Chapter 6's efficient layer for self- **and** cross-attention, with any boolean mask.

    ``MaskedMultiHeadAttention(d_model, num_heads, dropout=0.0, qkv_bias=False,
    context_length=256)`` has the parameters of ``mh.MultiHeadAttention(d_model, d_model,
    context_length, dropout, num_heads, qkv_bias)``. ``forward(x, memory=None, *, mask=None,
    key_padding_mask=None, causal=False, return_weights=False)``:

    * queries come from ``x`` ``(batch, num_queries, d_model)``; keys and values from
      ``memory`` ``(batch, num_keys, d_model)``, or from ``x`` when ``memory`` is None;
    * ``mask`` (bool, ``(num_queries, num_keys)`` or ``(batch, num_queries, num_keys)``),
      ``key_padding_mask`` (bool, ``(batch, num_keys)``, True at the keys to hide, in any
      pattern: right, left or scattered padding; it is used entry by entry, never read as
      lengths) and ``causal`` (the parent's buffer) are combined with "or": a key is hidden if
      any of them hides it;
    * returns ``(batch, num_queries, d_model)``, and with ``return_weights`` also the weights
      ``(batch, num_heads, num_queries, num_keys)`` before dropout.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, qkv_bias: bool = False,
                 context_length: int = 256):
        super().__init__(d_model, d_model, context_length, dropout, num_heads, qkv_bias)

    def _hidden(self, batch, num_queries, num_keys, mask, key_padding_mask, causal):
        hidden = torch.zeros(1, 1, 1, 1, dtype=torch.bool, device=self.W_query.weight.device)
        if causal:
            if max(num_queries, num_keys) > self.context_length:
                raise ValueError(f"num_tokens={max(num_queries, num_keys)} exceeds "
                                 f"context_length={self.context_length}")
            hidden = hidden | self.mask[:num_queries, :num_keys]
        if mask is not None:
            if mask.dtype != torch.bool or tuple(mask.shape[-2:]) != (num_queries, num_keys) \
                    or mask.dim() not in (2, 3) or (mask.dim() == 3 and mask.shape[0] != batch):
                raise ValueError(f"mask must be a bool tensor of shape ({num_queries}, {num_keys}) or "
                                 f"({batch}, {num_queries}, {num_keys}), got mask of shape "
                                 f"{tuple(mask.shape)} and dtype {mask.dtype}")
            hidden = hidden | (mask[:, None] if mask.dim() == 3 else mask)
        if key_padding_mask is not None:
            if key_padding_mask.dtype != torch.bool or tuple(key_padding_mask.shape) != (batch, num_keys):
                raise ValueError(f"key_padding_mask must be a bool tensor of shape ({batch}, {num_keys}), "
                                 f"got key_padding_mask of shape {tuple(key_padding_mask.shape)} "
                                 f"and dtype {key_padding_mask.dtype}")
            hidden = hidden | key_padding_mask[:, None, None, :]
        return hidden

    def forward(self, x: torch.Tensor, memory: Optional[torch.Tensor] = None, *,
                mask: Optional[torch.Tensor] = None, key_padding_mask: Optional[torch.Tensor] = None,
                causal: bool = False, return_weights: bool = False):
        source = x if memory is None else memory
        if x.dim() != 3 or source.dim() != 3 or x.shape[0] != source.shape[0]:
            raise ValueError(f"x and memory must be (batch, tokens, d_model) with one batch size, "
                             f"got x of shape {tuple(x.shape)} and memory of shape {tuple(source.shape)}")
        batch, num_queries, num_keys = x.shape[0], x.shape[1], source.shape[1]
        hidden = self._hidden(batch, num_queries, num_keys, mask, key_padding_mask, causal)
        q = self._split(self.W_query(x))                     # (batch, heads, num_queries, head_dim)
        k = self._split(self.W_key(source))                  # (batch, heads, num_keys, head_dim)
        v = self._split(self.W_value(source))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        weights = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)
        # A query that sees no key at all: NaN after the softmax, all zeros here.
        weights = weights.masked_fill(hidden, 0.0)
        out = self.out_proj(self._merge(self.dropout(weights) @ v))
        return (out, weights) if return_weights else out


class PositionwiseFFN(nn.Module):
    """``linear2(dropout(relu(linear1(x))))``: the same two-layer network at every position."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))


class _Residual(nn.Module):
    """Shared by both blocks: one residual sublayer, pre-LN or post-LN."""

    norm_first: bool

    def _sublayer(self, x, norm, fn):
        if self.norm_first:
            return x + self.drop(fn(norm(x)))
        return norm(x + self.drop(fn(x)))


class EncoderBlock(_Residual):
    """Self-attention over the source (padding hidden), then the position-wise FFN.

    Submodules ``self_attn`` (:class:`MaskedMultiHeadAttention`), ``ffn``
    (:class:`PositionwiseFFN`), ``norm1``, ``norm2`` (``nn.LayerNorm(d_model)``).
    ``forward(x, key_padding_mask)`` maps ``(batch, src_len, d_model)`` to the same shape.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0,
                 norm_first: bool = True, context_length: int = 256):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MaskedMultiHeadAttention(d_model, num_heads, dropout, context_length=context_length)
        self.ffn = PositionwiseFFN(d_model, d_ff, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, key_padding_mask: Optional[torch.Tensor] = None,
                return_weights: bool = False):
        store = {}

        def attend(h):
            out, store["weights"] = self.self_attn(h, key_padding_mask=key_padding_mask, return_weights=True)
            return out

        x = self._sublayer(x, self.norm1, attend)
        x = self._sublayer(x, self.norm2, self.ffn)
        return (x, store["weights"]) if return_weights else x


class DecoderBlock(_Residual):
    """Causal self-attention, cross-attention over the encoder output, then the FFN.

    Submodules ``self_attn`` and ``cross_attn`` (:class:`MaskedMultiHeadAttention`), ``ffn``
    (:class:`PositionwiseFFN`), ``norm1``, ``norm2``, ``norm3`` (``nn.LayerNorm(d_model)``,
    before -- pre-LN -- or after -- post-LN -- each of the three sublayers in this order).
    ``forward(x, memory, self_mask=None, key_padding_mask=None, return_weights=False)``: ``x``
    ``(batch, tgt_len, d_model)``, ``memory`` ``(batch, src_len, d_model)``, ``self_mask`` a bool
    ``(tgt_len, tgt_len)`` or ``(batch, tgt_len, tgt_len)`` mask for the self-attention (None:
    causal only), ``key_padding_mask`` a bool ``(batch, src_len)`` mask of the source padding for
    the cross-attention. Returns ``(batch, tgt_len, d_model)``, and with ``return_weights`` also
    the cross-attention weights ``(batch, num_heads, tgt_len, src_len)``. The memory is used as it
    is (a pre-LN encoder has already normalised it).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0,
                 norm_first: bool = True, context_length: int = 256):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MaskedMultiHeadAttention(d_model, num_heads, dropout, context_length=context_length)
        self.cross_attn = MaskedMultiHeadAttention(d_model, num_heads, dropout, context_length=context_length)
        self.ffn = PositionwiseFFN(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_mask: Optional[torch.Tensor] = None,
                key_padding_mask: Optional[torch.Tensor] = None, return_weights: bool = False):
        store = {}

        def cross(h):
            out, store["weights"] = self.cross_attn(h, memory, key_padding_mask=key_padding_mask,
                                                    return_weights=True)
            return out

        x = self._sublayer(x, self.norm1, lambda h: self.self_attn(h, mask=self_mask, causal=self_mask is None))
        x = self._sublayer(x, self.norm2, cross)
        x = self._sublayer(x, self.norm3, self.ffn)
        return (x, store["weights"]) if return_weights else x


# ------------------------------------------------------------------ the model

# How many times encode ran, per model: kept here, not on the model, so that a subclass resetting
# an attribute of its own cannot pass the "encoded once" check of Chapter 8's greedy decoding.
_ENCODE_CALLS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class Transformer(nn.Module):
    """A small encoder-decoder Transformer with the interface of Chapter 7's ``Seq2Seq``.

    ``Transformer(src_vocab_size, tgt_vocab_size, d_model=64, num_heads=4, num_layers=2,
    d_ff=256, dropout=0.0, norm_first=True, max_len=128, max_encodes=None)``.

    * :meth:`encode` ``(src (batch, S) long, src_lens (batch,))`` -> memory ``(batch, S, d_model)``;
    * :meth:`decode` ``(tgt_in (batch, L) long, memory, src_lens, tgt_lens=None,
      return_weights=False)`` -> logits ``(batch, L, tgt_vocab_size)`` and, with
      ``return_weights``, the cross-attention weights of every layer and head
      ``(batch, num_layers, num_heads, L, S)``. The self-attention is causal; with ``tgt_lens``
      it hides the target padding as well (:func:`decoder_self_mask`);
    * :meth:`forward` ``(src, src_lens, tgt_in)`` -> ``(logits, None)`` (teacher forcing; the
      target lengths are the non-``<pad>`` tokens of ``tgt_in``);
    * :meth:`greedy` ``(src, src_lens, max_len)`` -> ``(tokens (batch, max_len), weights
      (batch, max_len, S))``: greedy decoding from ``<bos>``, the source encoded once; the
      weights are the last layer's cross-attention averaged over its heads.

    ``max_encodes`` (default None: no limit) makes :meth:`encode` raise ``RuntimeError`` when it
    is called more than that many times on this instance; the checks of Chapter 8's greedy
    decoding exercise use it to see that the encoder output is computed once and reused.
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, d_model: int = 64, num_heads: int = 4,
                 num_layers: int = 2, d_ff: int = 256, dropout: float = 0.0, norm_first: bool = True,
                 max_len: int = 128, max_encodes: Optional[int] = None):
        super().__init__()
        mh.head_dim_of(d_model, num_heads)          # ValueError naming both when it does not divide
        self.d_model, self.num_heads, self.num_layers = d_model, num_heads, num_layers
        self.norm_first, self.max_len = norm_first, max_len
        self.max_encodes = max_encodes
        self.src_embedding = nn.Embedding(src_vocab_size, d_model)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, d_model)
        self.register_buffer("positions", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.encoder = nn.ModuleList(EncoderBlock(d_model, num_heads, d_ff, dropout, norm_first, max_len)
                                     for _ in range(num_layers))
        self.decoder = nn.ModuleList(DecoderBlock(d_model, num_heads, d_ff, dropout, norm_first, max_len)
                                     for _ in range(num_layers))
        # Pre-LN leaves the residual stream unnormalised: a final norm closes each stack.
        self.enc_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.dec_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(d_model, tgt_vocab_size)
        # nn.Embedding starts at N(0, 1); scaled by sqrt(d_model) that would drown the positional
        # encoding (entries at most 1). We start at N(0, 1/d_model^2): the scaled embedding then
        # has norm about 1 against the table's sqrt(d_model / 2), so attention starts out reading
        # positions, which the date task depends on (it learned markedly faster so).
        for table in (self.src_embedding, self.tgt_embedding):
            nn.init.normal_(table.weight, std=1.0 / d_model)

    def _embed(self, tokens: torch.Tensor, table: nn.Embedding) -> torch.Tensor:
        length = tokens.shape[1]
        if length > self.max_len:
            raise ValueError(f"a sequence of {length} tokens exceeds max_len={self.max_len}")
        return self.drop(table(tokens) * math.sqrt(self.d_model) + self.positions[:length])

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> torch.Tensor:
        calls = _ENCODE_CALLS[self] = _ENCODE_CALLS.get(self, 0) + 1
        if self.max_encodes is not None and calls > self.max_encodes:
            raise RuntimeError(f"encode was called {calls} times on this model "
                               f"(max_encodes={self.max_encodes}): the encoder output does not "
                               f"change while decoding, compute it once and reuse it")
        pad = padding_mask(src_lens, src.shape[1])
        x = self._embed(src, self.src_embedding)
        for block in self.encoder:
            x = block(x, pad)
        return self.enc_norm(x)

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_lens: torch.Tensor,
               tgt_lens: Optional[torch.Tensor] = None, return_weights: bool = False):
        length = tgt_in.shape[1]
        self_mask = None if tgt_lens is None else decoder_self_mask(tgt_lens, length)
        pad = padding_mask(src_lens, memory.shape[1])
        x = self._embed(tgt_in, self.tgt_embedding)
        weights = []
        for block in self.decoder:
            x, w = block(x, memory, self_mask, pad, return_weights=True)
            weights.append(w)
        logits = self.out(self.dec_norm(x))
        return (logits, torch.stack(weights, dim=1)) if return_weights else logits

    def forward(self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor) -> tuple:
        memory = self.encode(src, src_lens)
        tgt_lens = (tgt_in != Vocab.pad).sum(dim=1)
        return self.decode(tgt_in, memory, src_lens, tgt_lens), None

    @torch.no_grad()
    def greedy(self, src: torch.Tensor, src_lens: torch.Tensor, max_len: int) -> tuple:
        """Greedy decoding; see the class docstring. All ``max_len`` steps are run (what
        follows a sequence's first ``<eos>`` is to be ignored, as in Chapter 7)."""
        memory = self.encode(src, src_lens)            # once: it does not change while decoding
        tokens = torch.full((src.shape[0], 1), Vocab.bos, dtype=torch.long, device=src.device)
        rows = []
        for _ in range(max_len):
            logits, weights = self.decode(tokens, memory, src_lens, return_weights=True)
            tokens = torch.cat([tokens, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
            rows.append(weights[:, -1, :, -1].mean(dim=1))      # last layer, newest query, head mean
        return tokens[:, 1:], torch.stack(rows, dim=1)


def build_transformer(src_vocab: Vocab = SOURCE_VOCAB, tgt_vocab: Vocab = TARGET_VOCAB,
                      **config) -> Transformer:
    """A :class:`Transformer` for the two vocabularies (``config`` goes to its constructor);
    like Chapter 7's ``build_model``, it records ``tgt_vocab`` on the model."""
    model = Transformer(len(src_vocab), len(tgt_vocab), **config)
    model.tgt_vocab = tgt_vocab
    return model


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def load_pretrained_transformer(name: str = "ch08_transformer.pt") -> Transformer:
    """A model trained by ``bench/transformer.py`` (shipped in ``pretrained/``), in eval mode.

    The file holds the state dict in float16 and its configuration under ``"_config"``.
    """
    state = torch.load(PRETRAINED_DIR / name, weights_only=True)
    config = dict(state.pop("_config"))
    model = build_transformer(**config)
    model.load_state_dict({k: v.float() for k, v in state.items()})
    return model.eval()


def load_pretrained_bahdanau(name: str = "ch08_bahdanau.pt"):
    """The race's Bahdanau model (first seed), trained by ``bench/transformer.py --part race``
    beside :func:`load_pretrained_transformer`'s model, in eval mode."""
    from .translation import build_model
    state = torch.load(PRETRAINED_DIR / name, weights_only=True)
    config = dict(state.pop("_config"))
    model = build_model(attention=True, **{k: int(v) for k, v in config.items()})
    model.load_state_dict({k: v.float() for k, v in state.items()})
    return model.eval()


# ------------------------------------------------------------------ training with a schedule

def learning_rate_factor(progress: float, step: int, warmup: int, decay: bool = True) -> float:
    """The multiplier of the peak learning rate: a linear warm-up over ``warmup`` steps, then
    (with ``decay``) a cosine from 1 down to 0 as ``progress`` (the share of the budget used,
    steps or seconds) goes from 0 to 1 (Loshchilov and Hutter, 2017)."""
    ramp = min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0
    if not decay:
        return ramp
    return ramp * 0.5 * (1.0 + math.cos(math.pi * min(max(progress, 0.0), 1.0)))


def _epoch_batches(data: Batches, batch_size: int, generator: torch.Generator) -> list:
    # Batches of similar source length in random order, drawn as Chapter 7's train_model draws them.
    order = torch.randperm(len(data), generator=generator)
    order = order[torch.sort(data.src_lens[order], stable=True).indices]
    batches = [order[i: i + batch_size] for i in range(0, len(order) - batch_size + 1, batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


def train_scheduled(model: nn.Module, train: Batches, *, val: Optional[Batches] = None,
                    max_steps: Optional[int] = None, max_seconds: Optional[float] = None,
                    batch_size: int = 32, lr: float = 3e-3, warmup: int = 100, decay: bool = True,
                    clip: float = 1.0, eval_every: int = 100, seed: int = 0, progress: str = "none",
                    file=None, evaluate=None, label_smoothing: float = 0.0) -> list:
    """Chapter 7's training recipe with a learning-rate schedule, for any model with the
    ``Seq2Seq`` interface (the Transformer and the Bahdanau model alike).

    Teacher forcing, cross-entropy over the non-padding targets, gradient clipping to norm
    ``clip``, batches of similar source length drawn from a generator seeded with ``seed`` (as
    :func:`attention_course.translation.train_model` does), and Adam whose learning rate follows
    :func:`learning_rate_factor` times ``lr``: a warm-up, then (unless ``decay=False``) a cosine
    decay to 0 at the end of the budget, ``max_steps`` optimiser steps or ``max_seconds`` of training time (evaluations
    not counted; with both, whichever ends first; the cosine follows the one given, the steps if
    both are). Every ``eval_every`` steps and at the end the exact match on ``val`` is measured.
    Returns the history, dicts ``{"step", "seconds", "loss", "val_acc", "lr"}``. ``progress``:
    ``"lines"`` prints one line per evaluation, ``"none"`` nothing. ``evaluate``, if given, is
    called as ``evaluate(model, step)`` at every evaluation (its time not counted) and the dict
    it returns is merged into that entry of the history, as in Chapter 7's ``train_model``.
    ``label_smoothing`` goes to the cross-entropy (the recorded loss then includes it).
    """
    if max_steps is None and max_seconds is None:
        raise ValueError("give a budget: max_steps or max_seconds")
    if progress not in ("lines", "none"):
        raise ValueError(f"progress must be 'lines' or 'none', got {progress!r}")
    file = file or sys.stdout
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    history, step, seconds, running, seen, batches, cursor = [], 0, 0.0, 0.0, 0, [], 0

    def used() -> float:
        return step / max_steps if max_steps is not None else seconds / max_seconds

    def report() -> None:
        val_acc = float(exact_match(model, val).float().mean()) if val is not None else None
        model.train()
        history.append({"step": step, "seconds": seconds, "loss": running / max(seen, 1), "val_acc": val_acc,
                        "lr": optimizer.param_groups[0]["lr"]})
        if evaluate is not None:
            history[-1].update(evaluate(model, step))
            model.train()
        if progress == "lines":
            acc = "" if val_acc is None else f"  val exact match {100 * val_acc:5.1f}%"
            budget = f"step {step:>5d}/{max_steps}" if max_steps is not None else f"step {step:>5d}"
            print(f"{budget}  loss {history[-1]['loss']:.4f}{acc}", file=file, flush=True)

    model.train()
    while (max_steps is None or step < max_steps) and (max_seconds is None or seconds < max_seconds):
        start = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = lr * learning_rate_factor(used(), step, warmup, decay)
        if cursor == len(batches):
            batches, cursor = _epoch_batches(train, batch_size, generator), 0
        src, src_lens, tgt_in, tgt_out = train.batch(batches[cursor])
        cursor += 1
        logits, _ = model(src, src_lens, tgt_in)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1),
                                           ignore_index=Vocab.pad, label_smoothing=label_smoothing)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        step += 1
        seconds += time.perf_counter() - start
        running += loss.item()
        seen += 1
        if step % eval_every == 0:
            report()
            running, seen = 0.0, 0
    if not history or history[-1]["step"] != step:
        report()
    return history
