"""Chapter 8 exercises: from Bahdanau to the Transformer.

ch08_ex1  decoder_self_mask(tgt_lens, num_tokens) -> bool (batch, num_tokens, num_tokens)
ch08_ex2  CrossAttention(d_model, num_heads); forward(x, memory, key_padding_mask) -> (output, weights)
ch08_ex3  DecoderBlock(d_model, num_heads, d_ff); forward(x, memory, self_mask, key_padding_mask)  (pre-LN)
ch08_ex4  encoder_decoder_shapes(batch, src_len, tgt_len, d_model, num_heads, d_ff, num_layers,
                                 src_vocab, tgt_vocab) -> dict of shapes and the parameter count
ch08_ex5  GreedyTransformer(Transformer).greedy_decode(src, src_lens, max_len) -> (tokens, weights)
ch08_ex6  head_entropy(weights, tgt_lens) -> (num_heads,) mean entropy of each head's rows

Conventions fixed by the chapter (and stated in every contract):

* A boolean mask is ``True`` where a query must **not** attend to a key (Chapters 5 and 6,
  ``nn.MultiheadAttention``); a ``key_padding_mask`` ``(batch, num_keys)`` is ``True`` at padding.
* A query whose keys are all hidden gets all-zero weights and so a zero context (Chapter 3).
* Attention modules have ``W_query``, ``W_key``, ``W_value`` (``nn.Linear(d_model, d_model,
  bias=False)``) and ``out_proj`` (``nn.Linear(d_model, d_model)``), as in Chapter 6; the checks
  load every parameter with ``load_state_dict``, so the order in which a student creates the
  layers does not matter, only their names and shapes.
* ``GreedyTransformer`` subclasses :class:`attention_course.transformer.Transformer`; its check
  builds it with ``max_encodes=1``, so encoding the source a second time raises.

Exercises 4 and 6 ask for something the chapter does not show step by step: the parameter
count of the whole model from its sizes, and a measure of how sharp each head attends.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .. import transformer as tf
from ..functional import valid_mask
from ..registry import Alternative, Call, Check, Exercise, Mistake, register


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randint(g, low, high) -> int:
    """An integer in [low, high]."""
    return int(torch.randint(low, high + 1, (1,), generator=g))


def _lens(g, batch, num_tokens, low=1):
    """Lengths in [low, num_tokens], the first one full."""
    lens = torch.randint(low, num_tokens + 1, (batch,), generator=g)
    lens[0] = num_tokens
    return lens


def _shape_of(t):
    return tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__


# ======================================================================= ch08_ex1


def _validate_tgt_lens(tgt_lens, num_tokens):
    if not isinstance(tgt_lens, torch.Tensor) or tgt_lens.dim() != 1:
        raise ValueError(f"tgt_lens must be a 1-D tensor of lengths (batch,), got tgt_lens of shape "
                         f"{_shape_of(tgt_lens)}")
    if tgt_lens.numel() and (int(tgt_lens.min()) < 0 or int(tgt_lens.max()) > num_tokens):
        raise ValueError(f"tgt_lens must lie between 0 and num_tokens={num_tokens}, got {tgt_lens.tolist()}")


def decoder_self_mask(tgt_lens, num_tokens):
    """Bool (batch, num_tokens, num_tokens): True where query i must not see key j."""
    _validate_tgt_lens(tgt_lens, num_tokens)
    pos = torch.arange(num_tokens)
    future = pos[None, :] > pos[:, None]                       # (num_tokens, num_tokens)
    padding = pos[None, :] >= tgt_lens[:, None]                 # (batch, num_tokens): padded keys
    return future[None] | padding[:, None, :]


def _mask_checked(body):
    def impl(tgt_lens, num_tokens):
        _validate_tgt_lens(tgt_lens, num_tokens)
        pos = torch.arange(num_tokens)
        return body(pos, tgt_lens)
    return impl


def _mask_unvalidated(tgt_lens, num_tokens):
    pos = torch.arange(num_tokens)
    return (pos[None, :] > pos[:, None])[None] | (pos[None, :] >= tgt_lens[:, None])[:, None, :]


def _mask_alt_loops(tgt_lens, num_tokens):
    if not isinstance(tgt_lens, torch.Tensor) or tgt_lens.dim() != 1:
        raise ValueError(f"tgt_lens should be one length per sequence; tgt_lens has shape {list(tgt_lens.shape)}")
    lengths = [int(n) for n in tgt_lens]
    if any(n < 0 or n > num_tokens for n in lengths):
        raise ValueError(f"every entry of tgt_lens must be in [0, num_tokens] with num_tokens={num_tokens}")
    out = torch.zeros(len(lengths), num_tokens, num_tokens, dtype=torch.bool)
    for b, n in enumerate(lengths):
        for i in range(num_tokens):
            for j in range(num_tokens):
                out[b, i, j] = j > i or j >= n
    return out


def _mask_alt_valid_mask(tgt_lens, num_tokens):
    # The course's functional.valid_mask (True = may attend) for the padding, triu for the future.
    if tgt_lens.dim() != 1:
        raise ValueError(f"tgt_lens: expected (batch,), got {torch.Size(tgt_lens.shape)}")
    if bool((tgt_lens < 0).any()) or bool((tgt_lens > num_tokens).any()):
        raise ValueError(f"tgt_lens {tgt_lens.tolist()} out of range for num_tokens={num_tokens}")
    visible = valid_mask(tgt_lens, num_tokens, num_tokens)
    future = torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(diagonal=1)
    return ~visible | future


def _mask_alt_float_tril(tgt_lens, num_tokens):
    # Visible = lower triangle times a 0/1 row of valid keys; hidden = where that product is 0.
    if len(tgt_lens.shape) != 1:
        raise ValueError("tgt_lens must be 1-D, got shape %s" % "x".join(map(str, tgt_lens.shape)))
    if tgt_lens.numel() and not (0 <= tgt_lens.min().item() and tgt_lens.max().item() <= num_tokens):
        raise ValueError(f"a length in tgt_lens exceeds num_tokens={num_tokens} or is negative")
    lower = torch.tril(torch.ones(num_tokens, num_tokens))
    keys_ok = (torch.arange(num_tokens).float()[None, :] < tgt_lens.float()[:, None]).float()
    return torch.einsum("ij,bj->bij", lower, keys_ok) == 0


def _mask_alt_d2l(tgt_lens, num_tokens):
    # d2l's convention: a mask is built from valid lengths (sequence_mask, True = kept). During
    # training d2l's decoder gives query i the valid length i + 1 (it sees itself and what came
    # before); here that length is also capped by the sequence's own length.
    if tgt_lens.dim() != 1:
        raise ValueError(f"tgt_lens should be (batch_size,), but tgt_lens.shape = {tuple(tgt_lens.shape)}")
    if (tgt_lens < 0).any() or (tgt_lens > num_tokens).any():
        raise ValueError(f"valid lengths tgt_lens={tgt_lens.tolist()} must be within 0..{num_tokens} (num_tokens)")
    batch_size = tgt_lens.shape[0]
    dec_valid_lens = torch.arange(1, num_tokens + 1).repeat(batch_size, 1)        # (batch_size, num_steps)
    dec_valid_lens = torch.minimum(dec_valid_lens, tgt_lens[:, None])
    maxlen = num_tokens
    kept = torch.arange(maxlen, dtype=torch.float32)[None, None, :] < dec_valid_lens[:, :, None]
    return ~kept


def _mask_alt_annotated(tgt_lens, num_tokens):
    # The Annotated Transformer's convention: a "subsequent mask" that is True where attention is
    # allowed, combined with the padding by "&"; our contract wants the opposite, so it is inverted.
    if tgt_lens.ndim != 1:
        raise ValueError("tgt_lens: expected a 1-D tensor, got one of shape " + str(list(tgt_lens.size())))
    if tgt_lens.numel() > 0 and (tgt_lens.max().item() > num_tokens or tgt_lens.min().item() < 0):
        raise ValueError("tgt_lens has a length outside [0, %d] (num_tokens = %d)" % (num_tokens, num_tokens))
    attn_shape = (1, num_tokens, num_tokens)
    subsequent_mask = torch.triu(torch.ones(attn_shape), diagonal=1).type(torch.uint8) == 0
    tgt = torch.arange(num_tokens).unsqueeze(0).expand(len(tgt_lens), -1)
    not_pad = (tgt < tgt_lens.unsqueeze(-1)).unsqueeze(-2)                       # (batch, 1, num_tokens)
    tgt_mask = not_pad & subsequent_mask
    return tgt_mask == 0


def _mask_main_calls(seed):
    return [Call(args=(torch.tensor([5, 3, 1]), 5))]


def _mask_edge_calls(seed):
    return [Call(args=(torch.tensor([4, 4]), 4)), Call(args=(torch.tensor([0, 2]), 3)),
            Call(args=(torch.tensor([1]), 1))]


def _mask_bad_calls(seed):
    # Not 1-D: a row (1, 2), a column (2, 1) and a 0-d tensor; out of range: above num_tokens, negative.
    return [Call(args=(torch.tensor([[3, 2]]), 3)), Call(args=(torch.tensor([[2], [3]]), 3)),
            Call(args=(torch.tensor(3), 3)), Call(args=(torch.tensor([2, 5]), 4)),
            Call(args=(torch.tensor([2, -1]), 4))]


def _mask_hidden_calls(seed):
    g = _gen(seed)
    calls = []
    for _ in range(3):
        n = _randint(g, 2, 9)
        calls.append(Call(args=(torch.randint(0, n + 1, (_randint(g, 1, 5),), generator=g), n)))
    return calls


def _mask_hidden_bad_calls(seed):
    g = _gen(seed)
    n = _randint(g, 2, 8)
    return [Call(args=(torch.tensor([n, n + _randint(g, 1, 3)]), n)),
            Call(args=(torch.tensor([-_randint(g, 1, 3), n]), n)),
            Call(args=(torch.full((_randint(g, 2, 4), 1), n), n))]


def _mask_mention(call):
    lens = call.args[0]
    if lens.dim() == 0:
        return ["tgt_lens"]     # a 0-d shape prints as nothing in some forms ("x".join): the name suffices
    if lens.dim() != 1:
        return ["tgt_lens", tuple(lens.shape)]
    return ["tgt_lens", str(call.args[1])]


_MASK_HINT = ("entry [b, i, j] is True when key j lies in the future of query i (j > i) or in the padding "
              "of sequence b (j >= tgt_lens[b]); the padding condition depends on the key index only.")
_MASK_ERROR_HINT = ("these calls pass a tgt_lens that is not 1-D (a row, a (batch, 1) column, a 0-d tensor) "
                    "or that holds a length outside [0, num_tokens] (above it, or negative); each must raise "
                    "ValueError, its message naming tgt_lens and giving its shape (not 1-D) or the value of "
                    "num_tokens (out of range).")

register(Exercise(
    label="ch08_ex1", title="The decoder's combined padding and causal mask", name="decoder_self_mask",
    reference=decoder_self_mask, points=2,
    checks=[
        Check("3 targets of lengths 5, 3 and 1 padded to 5 tokens", _mask_main_calls, hint=_MASK_HINT),
        Check("unpadded targets (the plain causal mask), an empty target, a single token", _mask_edge_calls,
              hint=_MASK_HINT),
        Check("tgt_lens not 1-D (a row, a column, 0-d) or out of range (too large, negative) raises ValueError "
              "naming it", _mask_bad_calls,
              must_mention=_mask_mention, hint=_MASK_ERROR_HINT, weight=0.5),
        Check("random batches and lengths (hidden)", _mask_hidden_calls, public=False, hint=_MASK_HINT),
        Check("a length above num_tokens, a negative length, a (batch, 1) column (hidden)",
              _mask_hidden_bad_calls, public=False,
              must_mention=_mask_mention, hint=_MASK_ERROR_HINT, weight=0.25),
    ],
    mistakes=[
        Mistake("causal mask only",
                "your mask hides the future but not the padding: key j must also be hidden when "
                "j >= tgt_lens[b].",
                _mask_checked(lambda pos, lens: (pos[None, :] > pos[:, None])[None].expand(len(lens), -1, -1))),
        Mistake("padding mask only",
                "your mask hides the padding but not the future: query i must not see the keys j > i.",
                _mask_checked(lambda pos, lens: (pos[None, :] >= lens[:, None])[:, None, :]
                              .expand(-1, len(pos), -1))),
        Mistake("padding hidden on the queries",
                "your mask hides the whole rows of the padded queries; the padding mask belongs on the "
                "keys (the last axis): a padded query still sees the real keys up to its own position, "
                "and only the columns of the padded keys are hidden.",
                _mask_checked(lambda pos, lens: (pos[None, :] > pos[:, None])[None]
                              | (pos[None, :] >= lens[:, None])[:, :, None])),
        Mistake("True where visible",
                "True marks the pairs a query must NOT attend to; your mask is the opposite.",
                _mask_checked(lambda pos, lens: ~((pos[None, :] > pos[:, None])[None]
                                                  | (pos[None, :] >= lens[:, None])[:, None, :]))),
        Mistake("diagonal hidden",
                "a token may attend to itself: hide only the keys strictly after the query (j > i).",
                _mask_checked(lambda pos, lens: (pos[None, :] >= pos[:, None])[None]
                              | (pos[None, :] >= lens[:, None])[:, None, :])),
        Mistake("no validation of tgt_lens",
                "a tgt_lens that is not 1-D, or a length outside [0, num_tokens], must raise ValueError "
                "naming tgt_lens, not produce a mask or fail with an unrelated error.",
                _mask_unvalidated),
    ],
    alternatives=[
        Alternative("python loops", "three nested loops over sequences, queries and keys; shapes as lists",
                    _mask_alt_loops),
        Alternative("functional.valid_mask", "the course's valid_mask for the padding, triu for the future",
                    _mask_alt_valid_mask),
        Alternative("d2l's valid lengths", "d2l's conventions: per-query valid lengths i + 1 capped by the "
                    "sequence's length, then a sequence_mask", _mask_alt_d2l),
        Alternative("Annotated Transformer's subsequent_mask", "the Annotated Transformer's conventions: "
                    "True = may attend, subsequent_mask & padding, inverted at the end", _mask_alt_annotated),
        Alternative("float tril and einsum", "0/1 lower triangle times 0/1 valid keys, hidden where 0",
                    _mask_alt_float_tril),
    ],
))

# ======================================================================= ch08_ex2


def _heads_of(t, num_heads):
    batch, length, d_model = t.shape
    return t.view(batch, length, num_heads, d_model // num_heads).transpose(1, 2)


def _check_kpm(key_padding_mask, batch, num_keys):
    if not isinstance(key_padding_mask, torch.Tensor) or key_padding_mask.dtype != torch.bool \
            or tuple(key_padding_mask.shape) != (batch, num_keys):
        raise ValueError(f"key_padding_mask must be a bool tensor of shape (batch, num_keys) = "
                         f"{(batch, num_keys)}, got key_padding_mask of shape {_shape_of(key_padding_mask)}")


class CrossAttention(nn.Module):
    """Multi-head cross-attention: queries from x, keys and values from memory."""

    def __init__(self, d_model, num_heads):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.W_query = nn.Linear(d_model, d_model, bias=False)
        self.W_key = nn.Linear(d_model, d_model, bias=False)
        self.W_value = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, memory, key_padding_mask):
        batch, num_queries, d_model = x.shape
        _check_kpm(key_padding_mask, batch, memory.shape[1])
        q = _heads_of(self.W_query(x), self.num_heads)
        k = _heads_of(self.W_key(memory), self.num_heads)
        v = _heads_of(self.W_value(memory), self.num_heads)
        hidden = key_padding_mask[:, None, None, :]
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        weights = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1).masked_fill(hidden, 0.0)
        context = (weights @ v).transpose(1, 2).reshape(batch, num_queries, d_model)
        return self.out_proj(context), weights


def _cross_variant(keys_from_queries=False, scale_by="head_dim", mask="keys", fill=float("-inf"),
                   zero_empty=True, use_out_proj=True, check_mask=True, merge="transpose"):
    class _Cross(CrossAttention):
        def forward(self, x, memory, key_padding_mask):
            batch, num_queries, d_model = x.shape
            source = x if keys_from_queries else memory
            if check_mask:
                _check_kpm(key_padding_mask, batch, memory.shape[1])
            q = _heads_of(self.W_query(x), self.num_heads)
            k = _heads_of(self.W_key(source), self.num_heads)
            v = _heads_of(self.W_value(source), self.num_heads)
            d = self.head_dim if scale_by == "head_dim" else d_model
            scores = q @ k.transpose(-2, -1) / math.sqrt(d)
            hidden = key_padding_mask[:, None, None, :]
            if mask == "inverted":
                hidden = ~hidden
            if mask == "none":
                weights = torch.softmax(scores, dim=-1)
            elif mask == "after softmax":          # hidden keys zeroed, the rest not renormalised
                weights = torch.softmax(scores, dim=-1).masked_fill(hidden, 0.0)
            else:
                weights = torch.softmax(scores.masked_fill(hidden, fill), dim=-1)
                if zero_empty:
                    weights = weights.masked_fill(hidden, 0.0)
            if merge == "transpose":
                context = (weights @ v).transpose(1, 2).reshape(batch, num_queries, d_model)
            else:                                  # (batch, heads, queries, head_dim) read as if heads came last
                context = (weights @ v).reshape(batch, num_queries, d_model)
            return (self.out_proj(context) if use_out_proj else context), weights
    return _Cross


class _CrossAltPackage(tf.MaskedMultiHeadAttention):
    """The chapter's package layer (Chapter 6's parameters), called as cross-attention."""

    def __init__(self, d_model, num_heads):
        super().__init__(d_model, num_heads)

    def forward(self, x, memory, key_padding_mask):
        if key_padding_mask.shape != (x.shape[0], memory.shape[1]):
            raise ValueError(f"key_padding_mask has shape {key_padding_mask.shape}, "
                             f"expected {torch.Size([x.shape[0], memory.shape[1]])}")
        return super().forward(x, memory, key_padding_mask=key_padding_mask, return_weights=True)


class _CrossAltEinsum64(nn.Module):
    """einsum over named axes, computed in float64 and cast back."""

    def __init__(self, d_model, num_heads):
        super().__init__()
        self.h = num_heads
        self.W_query = nn.Linear(d_model, d_model, bias=False)
        self.W_key = nn.Linear(d_model, d_model, bias=False)
        self.W_value = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, memory, key_padding_mask):
        if list(key_padding_mask.shape) != [x.shape[0], memory.shape[1]]:
            raise ValueError(f"bad key_padding_mask: shape {list(key_padding_mask.shape)} "
                             f"(batch={x.shape[0]}, num_keys={memory.shape[1]})")
        b, n, d = x.shape
        q = self.W_query(x).double().reshape(b, n, self.h, -1)
        k = self.W_key(memory).double().reshape(b, memory.shape[1], self.h, -1)
        v = self.W_value(memory).double().reshape(b, memory.shape[1], self.h, -1)
        scores = torch.einsum("bqhe,bkhe->bhqk", q, k) / (d // self.h) ** 0.5
        keep = ~key_padding_mask[:, None, None, :]
        scores = torch.where(keep, scores, torch.tensor(float("-inf"), dtype=torch.float64))
        weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
        context = torch.einsum("bhqk,bkhe->bqhe", weights, v).reshape(b, n, d)
        return self.out_proj(context.to(x.dtype)), weights.to(x.dtype)


class _CrossAltHeadLoop(nn.Module):
    """A Python loop over heads, each using its own rows of the projections (F.linear)."""

    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.out_proj = nn.Linear(d_model, d_model)
        self.W_value = nn.Linear(d_model, d_model, bias=False)
        self.W_key = nn.Linear(d_model, d_model, bias=False)
        self.W_query = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, memory, key_padding_mask):
        batch, num_keys = x.shape[0], memory.shape[1]
        if key_padding_mask.dim() != 2 or key_padding_mask.shape[0] != batch \
                or key_padding_mask.shape[1] != num_keys:
            raise ValueError(f"key_padding_mask: {batch}x{num_keys} expected, got "
                             + "x".join(str(s) for s in key_padding_mask.shape))
        size = x.shape[-1] // self.num_heads
        contexts, all_weights = [], []
        for h in range(self.num_heads):
            rows = slice(h * size, (h + 1) * size)
            q = F.linear(x, self.W_query.weight[rows])
            k = F.linear(memory, self.W_key.weight[rows])
            v = F.linear(memory, self.W_value.weight[rows])
            scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(size)
            scores = scores.masked_fill(key_padding_mask[:, None, :], float("-inf"))
            w = torch.softmax(scores, dim=-1)
            w = torch.where(key_padding_mask[:, None, :], torch.zeros_like(w), w)
            contexts.append(torch.bmm(w, v))
            all_weights.append(w)
        return self.out_proj(torch.cat(contexts, dim=-1)), torch.stack(all_weights, dim=1)


class _CrossAltSDPA(CrossAttention):
    """PyTorch's fused core for the output (its bool mask is True where attention is allowed);
    the weights computed beside it for the return value."""

    def forward(self, x, memory, key_padding_mask):
        batch, num_queries, d_model = x.shape
        _check_kpm(key_padding_mask, batch, memory.shape[1])
        q = _heads_of(self.W_query(x), self.num_heads)
        k = _heads_of(self.W_key(memory), self.num_heads)
        v = _heads_of(self.W_value(memory), self.num_heads)
        allowed = ~key_padding_mask[:, None, None, :]
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        empty = ~allowed.any(dim=-1, keepdim=True)        # a source that is padding only
        context = context.masked_fill(empty, 0.0).nan_to_num(0.0)
        logits = (q @ k.transpose(-2, -1)) * self.head_dim ** -0.5
        weights = logits.masked_fill(~allowed, float("-inf")).softmax(-1).nan_to_num(0.0)
        return self.out_proj(context.transpose(1, 2).flatten(2)), weights


class _CrossAltFromScratch(nn.Module):
    """In the conventions of Raschka's LLMs-from-scratch MultiHeadAttention (d_out, head_dim,
    view + transpose, attn_scores, in-place masked_fill_, context_vec), turned into cross-attention."""

    def __init__(self, d_in, num_heads):
        super().__init__()
        d_out = d_in
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)

    def forward(self, x, memory, key_padding_mask):
        b, num_tokens, d_in = x.shape
        num_keys = memory.shape[1]
        if key_padding_mask.shape != (b, num_keys):
            raise ValueError(f"key_padding_mask of shape {tuple(key_padding_mask.shape)} does not match "
                             f"(b, num_keys) = ({b}, {num_keys})")
        keys = self.W_key(memory)
        queries = self.W_query(x)
        values = self.W_value(memory)
        keys = keys.view(b, num_keys, self.num_heads, self.head_dim).transpose(1, 2)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        values = values.view(b, num_keys, self.num_heads, self.head_dim).transpose(1, 2)
        attn_scores = queries @ keys.transpose(2, 3)
        mask_bool = key_padding_mask[:, None, None, :]
        attn_scores.masked_fill_(mask_bool, -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        attn_weights = torch.nan_to_num(attn_weights, nan=0.0)      # a source that is all padding
        context_vec = (attn_weights @ values).transpose(1, 2)
        context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)
        return self.out_proj(context_vec), attn_weights


def _cross_state(g, d_model, scale=0.7):
    state = {f"{name}.weight": torch.randn(d_model, d_model, generator=g) * scale
             for name in ("W_query", "W_key", "W_value", "out_proj")}
    state["out_proj.bias"] = torch.randn(d_model, generator=g) * 0.3
    return state


def _kpm(lens, num_keys):
    return torch.arange(num_keys)[None, :] >= lens[:, None]


def _cross_main_calls(seed):
    g = _gen(seed)
    d_model, heads = 6, 2
    x, memory = torch.randn(2, 3, d_model, generator=g), torch.randn(2, 5, d_model, generator=g)
    return [Call(init_args=(d_model, heads), init_seed=seed, state_dict=_cross_state(g, d_model),
                 args=(x, memory, _kpm(torch.tensor([5, 2]), 5)), report=("param_shapes",))]


def _cross_square_calls(seed):
    g = _gen(seed)
    d_model, heads = 8, 4
    x, memory = torch.randn(3, 4, d_model, generator=g), torch.randn(3, 4, d_model, generator=g)
    return [Call(init_args=(d_model, heads), init_seed=seed, state_dict=_cross_state(g, d_model),
                 args=(x, memory, _kpm(torch.tensor([4, 1, 3]), 4)))]


def _cross_empty_calls(seed):
    g = _gen(seed)
    d_model, heads = 4, 2
    x, memory = torch.randn(2, 2, d_model, generator=g), torch.randn(2, 3, d_model, generator=g)
    return [Call(init_args=(d_model, heads), init_seed=seed, state_dict=_cross_state(g, d_model),
                 args=(x, memory, _kpm(torch.tensor([3, 0]), 3)), grads_of=(0, 1))]


def _cross_bad_calls(seed):
    g = _gen(seed)
    x, memory = torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, 4, generator=g)
    state = _cross_state(g, 4)
    return [Call(init_args=(4, 2), init_seed=seed, state_dict=state,
                 args=(x, memory, torch.zeros(2, 3, dtype=torch.bool))),
            Call(init_args=(4, 2), init_seed=seed, state_dict=state,
                 args=(x, memory, torch.zeros(5, dtype=torch.bool)))]


def _cross_hidden_calls(seed):
    g = _gen(seed)
    heads, head_dim = _randint(g, 1, 4), _randint(g, 1, 3)
    d_model = heads * head_dim
    batch, num_queries, num_keys = _randint(g, 1, 4), _randint(g, 1, 6), _randint(g, 2, 7)
    lens = _lens(g, batch, num_keys, low=0)
    return [Call(init_args=(d_model, heads), init_seed=seed, state_dict=_cross_state(g, d_model),
                 args=(torch.randn(batch, num_queries, d_model, generator=g),
                       torch.randn(batch, num_keys, d_model, generator=g), _kpm(lens, num_keys)),
                 grads_of=(0, 1))]


_CROSS_HINT = ("the output and the weights (batch, num_heads, num_queries, num_keys) are compared: queries "
               "come from x, keys and values from memory, each through its own projection; each is split "
               "into heads, each head's scores are scaled by the square root of head_dim, the padded keys "
               "are hidden before the softmax over the keys, and the heads' results are merged back in "
               "order (feature h * head_dim + i from head h) and passed through out_proj.")

register(Exercise(
    label="ch08_ex2", title="Cross-attention with a key padding mask", name="CrossAttention",
    reference=CrossAttention, kind="class", points=3,
    checks=[
        Check("2 heads (d_model=6): 3 queries over 5 keys, source lengths 5 and 2 (parameters too)",
              _cross_main_calls, hint=_CROSS_HINT),
        Check("4 heads: as many queries as keys, source lengths 4, 1 and 3", _cross_square_calls,
              hint=_CROSS_HINT),
        Check("a source that is all padding: zero weights, no NaN, gradients for x and memory",
              _cross_empty_calls,
              hint="this check compares the output, the weights and the gradients for x and memory on a "
                   "batch whose second source is all padding (source lengths 3 and 0): the first sequence "
                   "is computed as in the checks above, and every query of the second gets all-zero weights "
                   "(so its output is out_proj's bias), with no NaN in the forward or the backward pass."),
        Check("a key_padding_mask of the wrong shape raises ValueError naming it and its shape",
              _cross_bad_calls, must_mention=lambda call: ["key_padding_mask", tuple(call.args[2].shape)],
              hint="compare key_padding_mask.shape with (batch, num_keys) before using it; name "
                   "key_padding_mask and its shape in the message.", weight=0.5),
        Check("random sizes and source lengths, with gradients (hidden)", _cross_hidden_calls, public=False,
              hint=_CROSS_HINT),
    ],
    mistakes=[
        Mistake("keys and values from the queries",
                "in cross-attention the keys and values come from memory (the encoder output), only the "
                "queries from x; you attended over x itself.",
                _cross_variant(keys_from_queries=True)),
        Mistake("scaled by sqrt(d_model)",
                "each head's scores are dot products of head_dim-sized vectors: divide by the square root "
                "of head_dim, not of d_model.",
                _cross_variant(scale_by="d_model")),
        Mistake("padding mask inverted",
                "key_padding_mask is True at the padding, the keys to hide; you hid the valid keys instead.",
                _cross_variant(mask="inverted")),
        Mistake("padding not masked",
                "the padded keys of the source must get zero weight: hide them (True in key_padding_mask) "
                "before the softmax.",
                _cross_variant(mask="none")),
        Mistake("NaN for a source with no valid key",
                "when every key of a source is padding, the softmax of a row of -inf is NaN; set those "
                "weights to 0.",
                _cross_variant(zero_empty=False)),
        Mistake("out_proj not applied",
                "the merged heads still go through the output projection out_proj.",
                _cross_variant(use_out_proj=False)),
        Mistake("padding zeroed after the softmax",
                "your weights match a softmax over every key whose padded entries are set to 0 afterwards, "
                "so the valid keys' weights no longer sum to 1: hide the padded keys before the softmax "
                "(their scores at -inf), so that the weights are renormalised over the valid keys.",
                _cross_variant(mask="after softmax")),
        Mistake("heads merged without moving the heads axis back",
                "your output matches reshaping (batch, num_heads, num_queries, head_dim) straight to "
                "(batch, num_queries, d_model): move the heads axis next to head_dim first (transpose(1, 2)) "
                "so that feature h * head_dim + i of query q comes from head h.",
                _cross_variant(merge="reshape")),
    ],
    alternatives=[
        Alternative("package layer", "subclasses the chapter's tf.MaskedMultiHeadAttention (Chapter 6's "
                    "parameters); shapes printed as torch.Size", _CrossAltPackage),
        Alternative("einsum in float64", "einsum over named axes in float64, torch.where and nan_to_num",
                    _CrossAltEinsum64),
        Alternative("loop over heads", "F.linear with each head's rows of the weights, bmm per head",
                    _CrossAltHeadLoop),
        Alternative("LLMs-from-scratch layout", "Raschka's LLMs-from-scratch conventions (d_out, view and "
                    "transpose, masked_fill_ with -torch.inf, context_vec), nan_to_num for empty rows",
                    _CrossAltFromScratch),
        Alternative("SDPA core", "F.scaled_dot_product_attention with its True-means-allowed mask",
                    _CrossAltSDPA),
    ],
))

# ======================================================================= ch08_ex3


class _Attention(nn.Module):
    """Chapter 6's parameters; forward(queries_in, keys_in, hidden) with hidden broadcastable
    to (batch, heads, num_queries, num_keys)."""

    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.W_query = nn.Linear(d_model, d_model, bias=False)
        self.W_key = nn.Linear(d_model, d_model, bias=False)
        self.W_value = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, queries_in, keys_in, hidden):
        batch, num_queries, d_model = queries_in.shape
        q = _heads_of(self.W_query(queries_in), self.num_heads)
        k = _heads_of(self.W_key(keys_in), self.num_heads)
        v = _heads_of(self.W_value(keys_in), self.num_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        weights = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1).masked_fill(hidden, 0.0)
        return self.out_proj((weights @ v).transpose(1, 2).reshape(batch, num_queries, d_model))


class _FFN(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(torch.relu(self.linear1(x)))


class DecoderBlock(nn.Module):
    """A pre-LN decoder block: causal self-attention, cross-attention, feed-forward network."""

    def __init__(self, d_model, num_heads, d_ff):
        super().__init__()
        self.self_attn = _Attention(d_model, num_heads)
        self.cross_attn = _Attention(d_model, num_heads)
        self.ffn = _FFN(d_model, d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)

    def forward(self, x, memory, self_mask, key_padding_mask):
        h = self.norm1(x)
        x = x + self.self_attn(h, h, self_mask[:, None])
        x = x + self.cross_attn(self.norm2(x), memory, key_padding_mask[:, None, None, :])
        return x + self.ffn(self.norm3(x))


def _block_variant(order="pre", norm_memory=False, use_self_mask=True, norm_cross_queries=True,
                   cross_first=False, add_causal=False):
    class _Block(DecoderBlock):
        def forward(self, x, memory, self_mask, key_padding_mask):
            smask = self_mask[:, None] if use_self_mask else torch.zeros((), dtype=torch.bool)
            if add_causal:              # a causal mask of its own, OR-ed onto the given self_mask
                n = x.shape[1]
                smask = smask | torch.ones(n, n, dtype=torch.bool).triu(1)
            pad = key_padding_mask[:, None, None, :]

            def self_part(x):
                if order == "post":
                    return self.norm1(x + self.self_attn(x, x, smask))
                if order == "residual from norm":
                    h = self.norm1(x)
                    return h + self.self_attn(h, h, smask)
                h = self.norm1(x)
                return x + self.self_attn(h, h, smask)

            def cross_part(x):
                mem = self.norm2(memory) if norm_memory else memory
                if order == "post":
                    return self.norm2(x + self.cross_attn(x, mem, pad))
                if order == "residual from norm":
                    h = self.norm2(x)
                    return h + self.cross_attn(h, mem, pad)
                q_in = self.norm2(x) if norm_cross_queries else x
                return x + self.cross_attn(q_in, mem, pad)

            def ffn_part(x):
                if order == "post":
                    return self.norm3(x + self.ffn(x))
                if order == "residual from norm":
                    h = self.norm3(x)
                    return h + self.ffn(h)
                return x + self.ffn(self.norm3(x))

            if cross_first:
                return ffn_part(self_part(cross_part(x)))
            return ffn_part(cross_part(self_part(x)))
    return _Block


class _BlockAltPackage(nn.Module):
    """Sublayers from the package: tf.MaskedMultiHeadAttention and tf.PositionwiseFFN."""

    def __init__(self, d_model, num_heads, d_ff):
        super().__init__()
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.self_attn = tf.MaskedMultiHeadAttention(d_model, num_heads)
        self.cross_attn = tf.MaskedMultiHeadAttention(d_model, num_heads)
        self.ffn = tf.PositionwiseFFN(d_model, d_ff)

    def forward(self, x, memory, self_mask, key_padding_mask):
        x = x + self.self_attn(self.norm1(x), mask=self_mask)
        x = x + self.cross_attn(self.norm2(x), memory, key_padding_mask=key_padding_mask)
        return x + self.ffn(self.norm3(x))


class _BlockAltFunctional(nn.Module):
    """Parameters as modules, but F.layer_norm written with the module's tensors, einsum
    attention and an explicit residual list."""

    def __init__(self, d_model, num_heads, d_ff):
        super().__init__()
        self.heads = num_heads
        self.self_attn, self.cross_attn = nn.Module(), nn.Module()
        for attn in (self.self_attn, self.cross_attn):
            for name in ("W_query", "W_key", "W_value"):
                setattr(attn, name, nn.Linear(d_model, d_model, bias=False))
            attn.out_proj = nn.Linear(d_model, d_model)
        self.ffn = nn.Module()
        self.ffn.linear1, self.ffn.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        for i in (1, 2, 3):
            setattr(self, f"norm{i}", nn.LayerNorm(d_model))

    def _ln(self, x, norm):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias

    def _attend(self, attn, xq, xkv, keep):
        b, n, d = xq.shape
        e = d // self.heads
        q = attn.W_query(xq).view(b, n, self.heads, e)
        k = attn.W_key(xkv).view(b, xkv.shape[1], self.heads, e)
        v = attn.W_value(xkv).view(b, xkv.shape[1], self.heads, e)
        s = torch.einsum("bqhe,bkhe->bhqk", q, k) / math.sqrt(e)
        s = s.masked_fill(~keep, -math.inf)
        w = torch.where(keep, torch.softmax(s, -1), torch.zeros(()))
        return attn.out_proj(torch.einsum("bhqk,bkhe->bqhe", w, v).reshape(b, n, d))

    def forward(self, x, memory, self_mask, key_padding_mask):
        h = self._ln(x, self.norm1)
        x = x + self._attend(self.self_attn, h, h, ~self_mask[:, None])
        x = x + self._attend(self.cross_attn, self._ln(x, self.norm2), memory, ~key_padding_mask[:, None, None])
        hidden = F.relu(self.ffn.linear1(self._ln(x, self.norm3)))
        return x + self.ffn.linear2(hidden)


class _BlockAltSDPA64(DecoderBlock):
    """The reference's parameters, every sublayer computed in float64 with PyTorch's fused core."""

    def _sdpa(self, attn, xq, xkv, hidden):
        b, n, d = xq.shape
        w = {name: getattr(attn, name).weight.double() for name in ("W_query", "W_key", "W_value")}
        q = _heads_of(xq @ w["W_query"].T, attn.num_heads)
        k = _heads_of(xkv @ w["W_key"].T, attn.num_heads)
        v = _heads_of(xkv @ w["W_value"].T, attn.num_heads)
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=~hidden)
        return ctx.transpose(1, 2).reshape(b, n, d) @ attn.out_proj.weight.double().T + attn.out_proj.bias.double()

    def forward(self, x, memory, self_mask, key_padding_mask):
        dtype, x, memory = x.dtype, x.double(), memory.double()

        def ln(t, norm):
            return F.layer_norm(t, norm.normalized_shape, norm.weight.double(), norm.bias.double(), norm.eps)

        h = ln(x, self.norm1)
        x = x + self._sdpa(self.self_attn, h, h, self_mask[:, None])
        x = x + self._sdpa(self.cross_attn, ln(x, self.norm2), memory, key_padding_mask[:, None, None, :])
        ff = self.ffn
        hidden = torch.relu(ln(x, self.norm3) @ ff.linear1.weight.double().T + ff.linear1.bias.double())
        return (x + hidden @ ff.linear2.weight.double().T + ff.linear2.bias.double()).to(dtype)


def _annotated_attention(query, key, value, mask=None):
    "Scaled dot product attention, in the Annotated Transformer's manner (mask: 1 = may attend)."
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = scores.softmax(dim=-1)
    return torch.matmul(p_attn, value), p_attn


class _AnnotatedHeads(nn.Module):
    "Multi-head attention with the Annotated Transformer's call, attn(query, key, value, mask)."

    def __init__(self, h, d_model):
        super().__init__()
        self.d_k, self.h = d_model // h, h
        self.W_query = nn.Linear(d_model, d_model, bias=False)
        self.W_key = nn.Linear(d_model, d_model, bias=False)
        self.W_value = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask):
        nbatches = query.size(0)
        query, key, value = [lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
                             for lin, x in zip((self.W_query, self.W_key, self.W_value), (query, key, value))]
        x, self.attn = _annotated_attention(query, key, value, mask=mask)
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        return self.out_proj(x)


class _BlockAltAnnotated(nn.Module):
    """The Annotated Transformer's decoder layer: a sublayer connection x + sublayer(norm(x)) applied
    three times with lambdas; masks in its convention (1 = may attend), hence the inversions."""

    def __init__(self, d_model, num_heads, d_ff):
        super().__init__()
        self.size = d_model
        self.self_attn = _AnnotatedHeads(num_heads, d_model)
        self.cross_attn = _AnnotatedHeads(num_heads, d_model)
        self.ffn = _FFN(d_model, d_ff)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    @staticmethod
    def sublayer(x, norm, fn):
        "A residual connection around a layer norm and a sublayer (norm first)."
        return x + fn(norm(x))

    def forward(self, x, memory, self_mask, key_padding_mask):
        m = memory
        tgt_mask = (~self_mask).unsqueeze(1)                       # (batch, 1, tgt_len, tgt_len)
        src_mask = (~key_padding_mask).unsqueeze(1).unsqueeze(1)   # (batch, 1, 1, src_len)
        x = self.sublayer(x, self.norm1, lambda x: self.self_attn(x, x, x, tgt_mask))
        x = self.sublayer(x, self.norm2, lambda x: self.cross_attn(x, m, m, src_mask))
        return self.sublayer(x, self.norm3, self.ffn)


def _block_state(g, d_model, d_ff):
    template = DecoderBlock(d_model, 1, d_ff).state_dict()
    state = {}
    for name, value in template.items():
        if name.startswith("norm") and name.endswith("weight"):
            state[name] = 1.0 + 0.5 * torch.randn(value.shape, generator=g)
        elif name.startswith("norm"):
            state[name] = 0.5 * torch.randn(value.shape, generator=g)
        else:
            state[name] = torch.randn(value.shape, generator=g) / math.sqrt(value.shape[-1])
    return state


def _padding_self_mask(tgt_lens, tgt_len):
    """A self_mask that is not causal: (batch, tgt_len, tgt_len), True at the padded keys only."""
    return _kpm(tgt_lens, tgt_len)[:, None, :].expand(-1, tgt_len, -1).clone()


def _block_call(g, seed, batch, tgt_len, src_len, d_model, heads, d_ff, tgt_lens, src_lens, causal=True,
                **extra):
    x = 2.0 * torch.randn(batch, tgt_len, d_model, generator=g) + 1.0
    memory = torch.randn(batch, src_len, d_model, generator=g)
    self_mask = tf.decoder_self_mask(tgt_lens, tgt_len) if causal else _padding_self_mask(tgt_lens, tgt_len)
    return Call(init_args=(d_model, heads, d_ff), init_seed=seed, state_dict=_block_state(g, d_model, d_ff),
                args=(x, memory, self_mask, _kpm(src_lens, src_len)), **extra)


def _block_main_calls(seed):
    g = _gen(seed)
    return [_block_call(g, seed, 2, 4, 5, 8, 2, 16, torch.tensor([4, 2]), torch.tensor([5, 3]),
                        report=("param_shapes",))]


def _block_grad_calls(seed):
    g = _gen(seed)
    return [_block_call(g, seed, 2, 3, 4, 6, 3, 12, torch.tensor([3, 3]), torch.tensor([4, 2]),
                        grads_of=(0, 1))]


def _block_causal_calls(seed):
    g = _gen(seed)
    return [_block_call(g, seed, 1, 6, 3, 4, 1, 8, torch.tensor([6]), torch.tensor([3]))]


def _block_not_causal_calls(seed):
    g = _gen(seed)
    return [_block_call(g, seed, 2, 5, 4, 6, 2, 10, torch.tensor([5, 3]), torch.tensor([4, 2]), causal=False)]


def _block_hidden_calls(seed):
    g = _gen(seed)
    heads, head_dim = _randint(g, 1, 3), _randint(g, 2, 3)
    d_model, batch = heads * head_dim, _randint(g, 1, 3)
    tgt_len, src_len = _randint(g, 2, 6), _randint(g, 2, 6)
    calls = [_block_call(g, seed, batch, tgt_len, src_len, d_model, heads, _randint(g, 4, 12),
                         _lens(g, batch, tgt_len), _lens(g, batch, src_len), grads_of=(0, 1))]
    # the same sizes with a self_mask that is not causal (padding only): the block uses self_mask as given
    calls.append(_block_call(g, seed, batch, tgt_len, src_len, d_model, heads, _randint(g, 4, 12),
                             _lens(g, batch, tgt_len), _lens(g, batch, src_len), causal=False))
    return calls


_BLOCK_HINT = ("the output (batch, tgt_len, d_model) is compared. Pre-LN: each of the three sublayers "
               "(self-attention hiding what self_mask marks True, cross-attention over memory with "
               "key_padding_mask, feed-forward) reads norm_k(x) and adds its output to x itself.")
_BLOCK_NOT_CAUSAL_HINT = ("here self_mask is not causal: it hides the padded keys only, so a query may attend to "
                          "later valid keys. The self-attention hides exactly the pairs self_mask marks True, "
                          "nothing more; the rest is compared as in the checks above.")

register(Exercise(
    label="ch08_ex3", title="A pre-LN decoder block", name="DecoderBlock",
    reference=DecoderBlock, kind="class", points=3,
    checks=[
        Check("d_model=8, 2 heads, d_ff=16: targets of lengths 4 and 2, sources of 5 and 3 (parameters too)",
              _block_main_calls, hint=_BLOCK_HINT),
        Check("3 heads: gradients with respect to x and memory", _block_grad_calls, hint=_BLOCK_HINT),
        Check("one head, a target of 6 tokens without padding (the plain causal mask)", _block_causal_calls,
              hint=_BLOCK_HINT),
        Check("a self_mask that is not causal (padding only): the block uses self_mask as given",
              _block_not_causal_calls, hint=_BLOCK_NOT_CAUSAL_HINT),
        Check("random sizes and lengths, with gradients; a causal and a padding-only self_mask (hidden)",
              _block_hidden_calls, public=False, hint=_BLOCK_HINT),
    ],
    mistakes=[
        Mistake("post-LN",
                "that is the post-LN order (norm after the residual addition); a pre-LN block normalises "
                "the input of each sublayer and adds the sublayer's output to the unnormalised x.",
                _block_variant(order="post")),
        Mistake("residual from the normalised input",
                "the residual path must carry x itself: x + sublayer(norm(x)), not norm(x) + "
                "sublayer(norm(x)).",
                _block_variant(order="residual from norm")),
        Mistake("memory normalised again",
                "the memory comes from the encoder as it is (its final norm has been applied already); "
                "norm2 acts on the decoder's stream only, the queries of the cross-attention.",
                _block_variant(norm_memory=True)),
        Mistake("self_mask ignored",
                "your output matches a self-attention that hides nothing: it must hide exactly the pairs "
                "self_mask marks True.",
                _block_variant(use_self_mask=False)),
        Mistake("a causal mask added to self_mask",
                "your output matches a block that hides the future on top of self_mask; the block receives "
                "its mask ready-made and hides exactly what self_mask marks True (here the padding only, "
                "so a query may attend to later valid keys).",
                _block_variant(add_causal=True)),
        Mistake("cross-attention queries not normalised",
                "the cross-attention's queries are norm2(x), not x.",
                _block_variant(norm_cross_queries=False)),
        Mistake("cross-attention before self-attention",
                "the order of the sublayers is self-attention, then cross-attention, then the feed-forward "
                "network.",
                _block_variant(cross_first=True)),
    ],
    alternatives=[
        Alternative("package sublayers", "tf.MaskedMultiHeadAttention and tf.PositionwiseFFN as submodules",
                    _BlockAltPackage),
        Alternative("layer norm by hand, einsum", "mean/variance written out, einsum attention, plain "
                    "nn.Module containers", _BlockAltFunctional),
        Alternative("Annotated Transformer layout", "the Annotated Transformer's conventions: attention(query, "
                    "key, value, mask) with 1 = may attend and -1e9, a sublayer connection with lambdas",
                    _BlockAltAnnotated),
        Alternative("float64 with SDPA", "every sublayer in float64, PyTorch's fused attention core",
                    _BlockAltSDPA64),
    ],
))

# ======================================================================= ch08_ex4

_SHAPE_KEYS = ("src_embedded", "memory", "encoder_self_weights", "decoder_self_weights", "cross_weights",
               "queries_per_head", "ffn_hidden", "logits", "num_parameters")


def _check_heads(d_model, num_heads):
    if d_model % num_heads:
        raise ValueError(f"d_model must be divisible by num_heads, got d_model={d_model} and "
                         f"num_heads={num_heads}")


def encoder_decoder_shapes(batch, src_len, tgt_len, d_model, num_heads, d_ff, num_layers, src_vocab, tgt_vocab):
    """The shapes inside tf.Transformer's forward pass, and its number of parameters."""
    _check_heads(d_model, num_heads)
    attention = 4 * d_model * d_model + d_model           # W_query, W_key, W_value, out_proj (+ its bias)
    ffn = 2 * d_model * d_ff + d_ff + d_model
    norm = 2 * d_model
    encoder_block = attention + ffn + 2 * norm
    decoder_block = 2 * attention + ffn + 3 * norm
    params = ((src_vocab + tgt_vocab) * d_model + num_layers * (encoder_block + decoder_block)
              + 2 * norm + d_model * tgt_vocab + tgt_vocab)
    return {
        "src_embedded": (batch, src_len, d_model),
        "memory": (batch, src_len, d_model),
        "encoder_self_weights": (batch, num_heads, src_len, src_len),
        "decoder_self_weights": (batch, num_heads, tgt_len, tgt_len),
        "cross_weights": (batch, num_heads, tgt_len, src_len),
        "queries_per_head": (batch, num_heads, tgt_len, d_model // num_heads),
        "ffn_hidden": (batch, tgt_len, d_ff),
        "logits": (batch, tgt_len, tgt_vocab),
        "num_parameters": params,
    }


def _shapes_variant(**changes):
    def impl(batch, src_len, tgt_len, d_model, num_heads, d_ff, num_layers, src_vocab, tgt_vocab):
        out = encoder_decoder_shapes(batch, src_len, tgt_len, d_model, num_heads, d_ff, num_layers,
                                     src_vocab, tgt_vocab)
        sizes = dict(batch=batch, src_len=src_len, tgt_len=tgt_len, d_model=d_model, num_heads=num_heads,
                     d_ff=d_ff, num_layers=num_layers, src_vocab=src_vocab, tgt_vocab=tgt_vocab)
        for key, fn in changes.items():
            out[key] = fn(sizes, out[key])
        return out
    return impl


def _no_bias_count(s, _):
    d, f, v = s["d_model"], s["d_ff"], s["tgt_vocab"]
    return ((s["src_vocab"] + v) * d + s["num_layers"] * (3 * 4 * d * d + 2 * 2 * d * f + 5 * 2 * d)
            + 4 * d + d * v)


def _shapes_alt_measured(batch, src_len, tgt_len, d_model, num_heads, d_ff, num_layers, src_vocab, tgt_vocab):
    """Build the package's model and measure: hooks on the submodules record the shapes."""
    if d_model % num_heads != 0:
        raise ValueError(f"num_heads={num_heads} does not divide d_model={d_model}")
    model = tf.Transformer(src_vocab, tgt_vocab, d_model, num_heads, num_layers, d_ff,
                           max_len=max(src_len, tgt_len))
    seen = {}
    block = model.decoder[0]

    def record(name):
        def hook(module, inputs, output):       # a hook that returned a value would replace the output
            seen.setdefault(name, output.shape)
        return hook

    block.ffn.linear1.register_forward_hook(record("ffn_hidden"))
    block.self_attn.W_query.register_forward_hook(record("q"))
    src = torch.zeros(batch, src_len, dtype=torch.long)
    tgt = torch.zeros(batch, tgt_len, dtype=torch.long)
    lens = torch.full((batch,), src_len)
    with torch.no_grad():
        embedded = model._embed(src, model.src_embedding)
        _, enc_weights = model.encoder[0](embedded, tf.padding_mask(lens, src_len), return_weights=True)
        memory = model.encode(src, lens)
        x = model._embed(tgt, model.tgt_embedding)
        _, self_weights = block.self_attn(x, causal=True, return_weights=True)
        logits, cross = model.decode(tgt, memory, lens, return_weights=True)
    q = seen["q"]
    return {"src_embedded": embedded.shape, "memory": memory.shape, "encoder_self_weights": enc_weights.shape,
            "decoder_self_weights": self_weights.shape, "cross_weights": cross[:, 0].shape,
            "queries_per_head": torch.Size([q[0], num_heads, q[1], q[2] // num_heads]),
            "ffn_hidden": seen["ffn_hidden"], "logits": logits.shape,
            "num_parameters": sum(p.numel() for p in model.parameters())}


def _shapes_alt_modules(batch, src_len, tgt_len, d_model, num_heads, d_ff, num_layers, src_vocab, tgt_vocab):
    """Count by building each kind of sublayer once from torch.nn modules; shapes as lists turned tuples."""
    if d_model % num_heads:
        raise ValueError(f"d_model ({d_model}) % num_heads ({num_heads}) != 0")

    def count(*modules):
        return sum(p.numel() for m in modules for p in m.parameters())

    attn = count(*(nn.Linear(d_model, d_model, bias=False) for _ in range(3)), nn.Linear(d_model, d_model))
    ffn = count(nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model))
    ln = count(nn.LayerNorm(d_model))
    total = count(nn.Embedding(src_vocab, d_model), nn.Embedding(tgt_vocab, d_model),
                  nn.Linear(d_model, tgt_vocab))
    total += num_layers * ((attn + ffn + 2 * ln) + (2 * attn + ffn + 3 * ln)) + 2 * ln
    head = d_model // num_heads
    shapes = {"src_embedded": [batch, src_len, d_model], "memory": [batch, src_len, d_model],
              "encoder_self_weights": [batch, num_heads, src_len, src_len],
              "decoder_self_weights": [batch, num_heads, tgt_len, tgt_len],
              "cross_weights": [batch, num_heads, tgt_len, src_len],
              "queries_per_head": [batch, num_heads, tgt_len, head], "ffn_hidden": [batch, tgt_len, d_ff],
              "logits": [batch, tgt_len, tgt_vocab]}
    out = {key: tuple(value) for key, value in shapes.items()}
    out["num_parameters"] = total
    return out


def _shapes_alt_tensors(batch, src_len, tgt_len, d_model, num_heads, d_ff, num_layers, src_vocab, tgt_vocab):
    """Push empty tensors (meta device) through the operations and read torch.Size shapes."""
    if d_model % num_heads:
        raise ValueError("cannot split d_model=%d into num_heads=%d heads" % (d_model, num_heads))
    meta = dict(device="meta")
    src = torch.empty(batch, src_len, d_model, **meta)
    tgt = torch.empty(batch, tgt_len, d_model, **meta)
    q = tgt.view(batch, tgt_len, num_heads, -1).transpose(1, 2)
    k = src.view(batch, src_len, num_heads, -1).transpose(1, 2)
    out = {"src_embedded": src.shape, "memory": src.shape,
           "encoder_self_weights": (k @ k.transpose(-2, -1)).shape,
           "decoder_self_weights": (q @ q.transpose(-2, -1)).shape,
           "cross_weights": (q @ k.transpose(-2, -1)).shape, "queries_per_head": q.shape,
           "ffn_hidden": (tgt @ torch.empty(d_model, d_ff, **meta)).shape,
           "logits": (tgt @ torch.empty(d_model, tgt_vocab, **meta)).shape}
    per_layer = 3 * (4 * d_model ** 2 + d_model) + 2 * (2 * d_model * d_ff + d_ff + d_model) + 10 * d_model
    out["num_parameters"] = ((src_vocab + tgt_vocab + 4) * d_model + num_layers * per_layer
                             + (d_model + 1) * tgt_vocab)
    return out


def _shapes_alt_d2l(batch, src_len, tgt_len, d_model, num_heads, d_ff, num_layers, src_vocab, tgt_vocab):
    """d2l's names (num_hiddens, ffn_num_hiddens, num_blks) and its transpose_qkv, which folds the
    heads into the batch axis; the folded shapes are unfolded at the end."""
    num_hiddens, ffn_num_hiddens, num_blks = d_model, d_ff, num_layers
    if num_hiddens % num_heads:
        raise ValueError(f"num_hiddens (d_model={d_model}) must be a multiple of num_heads={num_heads}")

    def transpose_qkv(X, num_heads):
        X = X.reshape(X.shape[0], X.shape[1], num_heads, -1)
        X = X.permute(0, 2, 1, 3)
        return X.reshape(-1, X.shape[2], X.shape[3])

    def unfold(shape):          # (batch_size * num_heads, ...) -> (batch_size, num_heads, ...)
        return (shape[0] // num_heads, num_heads) + tuple(shape[1:])

    X = torch.zeros(batch, src_len, num_hiddens, device="meta")
    Y = torch.zeros(batch, tgt_len, num_hiddens, device="meta")
    queries, keys = transpose_qkv(Y, num_heads), transpose_qkv(X, num_heads)
    shapes = {"src_embedded": tuple(X.shape), "memory": tuple(X.shape),
              "encoder_self_weights": unfold(torch.bmm(keys, keys.transpose(1, 2)).shape),
              "decoder_self_weights": unfold(torch.bmm(queries, queries.transpose(1, 2)).shape),
              "cross_weights": unfold(torch.bmm(queries, keys.transpose(1, 2)).shape),
              "queries_per_head": unfold(queries.shape), "ffn_hidden": (batch, tgt_len, ffn_num_hiddens),
              "logits": (batch, tgt_len, tgt_vocab)}
    attention = 3 * num_hiddens * num_hiddens + num_hiddens * num_hiddens + num_hiddens
    positionwise_ffn = num_hiddens * ffn_num_hiddens + ffn_num_hiddens + ffn_num_hiddens * num_hiddens + num_hiddens
    add_norm = 2 * num_hiddens
    encoder_blk = attention + add_norm + positionwise_ffn + add_norm
    decoder_blk = attention + add_norm + attention + add_norm + positionwise_ffn + add_norm
    shapes["num_parameters"] = (src_vocab * num_hiddens + tgt_vocab * num_hiddens + num_blks * encoder_blk
                                + num_blks * decoder_blk + 2 * add_norm + num_hiddens * tgt_vocab + tgt_vocab)
    return shapes


def _shapes_main_calls(seed):
    return [Call(args=(2, 7, 5, 8, 2, 16, 2, 20, 12))]


def _shapes_other_calls(seed):
    return [Call(args=(3, 4, 9, 12, 4, 24, 1, 30, 15)), Call(args=(1, 1, 1, 6, 1, 5, 3, 7, 7))]


def _shapes_bad_calls(seed):
    return [Call(args=(2, 7, 5, 10, 4, 16, 2, 20, 12))]


def _shapes_hidden_calls(seed):
    g = _gen(seed)
    calls = []
    for _ in range(2):
        heads = _randint(g, 1, 4)
        calls.append(Call(args=(_randint(g, 1, 4), _randint(g, 2, 9), _randint(g, 2, 9),
                                2 * heads * _randint(g, 1, 2), heads, _randint(g, 3, 20), _randint(g, 1, 3),
                                _randint(g, 5, 40), _randint(g, 5, 40))))
    return calls


def _as_tuple_values(value):
    """Shapes given as lists compare like tuples in the value checks: the container's type is the
    business of the type check, so that a list is treated like a float or a tensor (one plain reason)."""
    if isinstance(value, dict) and "__list__" in value:
        return {"__seq__": value["__list__"]}
    return value


def _compare_shape_values(got, want, calls):
    """The values of the dict (shapes and count), whatever the type of the containers and numbers."""
    from ..checking import compare_outcome
    for i, (g, w, c) in enumerate(zip(got, want, calls)):
        if g.get("status") == "ok" and isinstance(g.get("value"), dict) and "__dict__" in g["value"]:
            g = dict(g, value={"__dict__": {k: _as_tuple_values(v) for k, v in g["value"]["__dict__"].items()}})
        reason = compare_outcome(g, w, _SHAPE_VALUES, c)
        if reason:
            return reason if len(calls) == 1 else f"call {i + 1} of {len(calls)}: {reason}"
    return None


def _describe_plain(value):
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, dict) and "__list__" in value:
        return "a list"
    if isinstance(value, dict) and "__unsupported__" in value:
        return f"a {value['__unsupported__']}"
    return f"{type(value).__name__} {value!r}"[:60]


def _compare_shape_types(got, want, calls):
    """num_parameters an int, every shape a tuple (or torch.Size) of ints; the values are the
    business of the other checks."""
    from ..checking import compare_outcome
    for g, w, c in zip(got, want, calls):
        if g.get("status") != "ok" or not (isinstance(g.get("value"), dict) and "__dict__" in g["value"]):
            reason = compare_outcome(g, w, _SHAPE_VALUES, c)
            if reason:
                return reason
            continue
        values = g["value"]["__dict__"]
        for key in _SHAPE_KEYS:
            if key not in values:
                continue            # a missing key is reported by the value checks
            value = values[key]
            if key == "num_parameters":
                if type(value) is not int:
                    return (f"result['num_parameters'] is {_describe_plain(value)}; the contract asks for a "
                            f"Python int")
                continue
            if not (isinstance(value, dict) and "__seq__" in value):
                return f"result[{key!r}] is {_describe_plain(value)}; the contract asks for a tuple of ints"
            for item in value["__seq__"]:
                if type(item) is not int:
                    return (f"result[{key!r}] holds {_describe_plain(item)}; the contract asks for a tuple of "
                            f"Python ints")
    return None


_SHAPE_VALUES = Check("shape values", lambda seed: [], hint="")     # rtol/atol for compare_outcome only


_SHAPES_HINT = ("every shape and num_parameters are compared with those of tf.Transformer's forward pass: "
                "queries come from the target, keys from the source; the weights are in the layout (batch, "
                "heads, queries, keys) and queries_per_head in (batch, heads, queries, head_dim), with "
                "head_dim = d_model // num_heads; the count includes every weight and bias, the layer norms "
                "(two per encoder block, three per decoder block, one after each stack) included.")
_SHAPES_TYPE_HINT = ("num_parameters must be a Python int (not a float or a tensor), and every shape a tuple "
                     "of Python ints (a torch.Size is one; a list, floats or tensors are not).")

register(Exercise(
    label="ch08_ex4", title="Shapes through an encoder-decoder forward pass", name="encoder_decoder_shapes",
    reference=encoder_decoder_shapes, points=2,
    checks=[
        Check("batch 2, source 7, target 5, d_model=8, 2 heads, d_ff=16, 2 layers, vocabularies 20 and 12",
              _shapes_main_calls, hint=_SHAPES_HINT, compare=_compare_shape_values),
        Check("num_parameters is an int and every shape a tuple of ints (same call)", _shapes_main_calls,
              hint=_SHAPES_TYPE_HINT, compare=_compare_shape_types, weight=0.25),
        Check("target longer than source, 4 heads, 1 layer; a one-token source and target, 3 layers",
              _shapes_other_calls, hint=_SHAPES_HINT, compare=_compare_shape_values),
        Check("d_model=10 with num_heads=4 raises ValueError naming both", _shapes_bad_calls,
              must_mention=["d_model", "num_heads", "10", "4"],
              hint="check d_model % num_heads first; name d_model and num_heads with their values.", weight=0.5),
        Check("random sizes (hidden)", _shapes_hidden_calls, public=False, hint=_SHAPES_HINT,
              compare=_compare_shape_values),
    ],
    mistakes=[
        Mistake("cross-attention over the target",
                "the cross-attention's queries come from the target and its keys from the source: its "
                "weights are (batch, num_heads, tgt_len, src_len).",
                _shapes_variant(cross_weights=lambda s, v: (s["batch"], s["num_heads"], s["tgt_len"],
                                                            s["tgt_len"]))),
        Mistake("cross weights transposed",
                "rows are queries (target positions), columns keys (source positions): (batch, num_heads, "
                "tgt_len, src_len).",
                _shapes_variant(cross_weights=lambda s, v: (s["batch"], s["num_heads"], s["src_len"],
                                                            s["tgt_len"]))),
        Mistake("heads d_model wide",
                "each head works on d_model // num_heads features, not d_model.",
                _shapes_variant(queries_per_head=lambda s, v: v[:3] + (s["d_model"],))),
        Mistake("queries_per_head before the transpose",
                "your queries_per_head is (batch, tgt_len, num_heads, head_dim), the layout right after the "
                "view that splits d_model; the contract asks for the layout in which each head's scores are "
                "computed, (batch, num_heads, tgt_len, head_dim), heads before queries as in the weights.",
                _shapes_variant(queries_per_head=lambda s, v: (v[0], v[2], v[1], v[3]))),
        Mistake("biases and norms not counted",
                "the parameter count must include every bias (out_proj, both FFN layers, the output layer) "
                "and the layer norms' weights and biases.",
                _shapes_variant(num_parameters=_no_bias_count)),
        Mistake("one cross-attention too few",
                "a decoder block has two attention layers (self and cross) and three layer norms; an "
                "encoder block has one attention layer and two norms.",
                _shapes_variant(num_parameters=lambda s, v: v - s["num_layers"] * (4 * s["d_model"] ** 2
                                                                                   + s["d_model"]))),
    ],
    alternatives=[
        Alternative("measured on the package's model", "builds tf.Transformer, records shapes with forward "
                    "hooks, counts parameters; torch.Size values", _shapes_alt_measured),
        Alternative("counted from nn modules", "counts the parameters of one nn.Linear/LayerNorm of each "
                    "kind; shapes built as lists then tuples", _shapes_alt_modules),
        Alternative("d2l's transpose_qkv", "d2l's conventions: num_hiddens, ffn_num_hiddens, num_blks, heads "
                    "folded into the batch by transpose_qkv and unfolded; AddNorm counted per sublayer",
                    _shapes_alt_d2l),
        Alternative("meta tensors", "empty tensors on the meta device pushed through the products; a "
                    "regrouped count", _shapes_alt_tensors),
    ],
))

# ======================================================================= ch08_ex5


class GreedyTransformer(tf.Transformer):
    """The chapter's Transformer with a greedy decoding loop that encodes once."""

    def greedy_decode(self, src, src_lens, max_len):
        memory = self.encode(src, src_lens)
        batch = src.shape[0]
        prefix = torch.full((batch, 1), 1, dtype=torch.long)          # <bos>
        tokens = torch.zeros(batch, max_len, dtype=torch.long)
        weights = torch.zeros(batch, self.num_layers, self.num_heads, max_len, src.shape[1])
        finished = torch.zeros(batch, dtype=torch.bool)
        for i in range(max_len):
            logits, cross = self.decode(prefix, memory, src_lens, return_weights=True)
            new = logits[:, -1].argmax(dim=-1)
            tokens[:, i] = new.masked_fill(finished, 0)
            weights[:, :, :, i] = cross[:, :, :, -1].masked_fill(finished[:, None, None, None], 0.0)
            finished = finished | (new == 2)
            prefix = torch.cat([prefix, new[:, None]], dim=1)
        return tokens, weights


def _greedy_variant(reencode=False, row="last", pad_after_eos=True, logits_at="last", head_mean=False,
                    eos_step_cleared=False):
    class _Greedy(tf.Transformer):
        def greedy_decode(self, src, src_lens, max_len):
            memory = None if reencode else self.encode(src, src_lens)
            batch = src.shape[0]
            prefix = torch.full((batch, 1), 1, dtype=torch.long)
            tokens = torch.zeros(batch, max_len, dtype=torch.long)
            weights = torch.zeros(batch, self.num_layers, self.num_heads, max_len, src.shape[1])
            finished = torch.zeros(batch, dtype=torch.bool)
            for i in range(max_len):
                mem = self.encode(src, src_lens) if reencode else memory
                logits, cross = self.decode(prefix, mem, src_lens, return_weights=True)
                new = logits[:, -1 if logits_at == "last" else 0].argmax(dim=-1)
                rows = cross[:, :, :, -1 if row == "last" else 0]
                if head_mean:
                    rows = rows.mean(dim=2, keepdim=True).expand_as(rows)
                if eos_step_cleared:        # finished updated before the step is written: <eos> itself cleared
                    finished = finished | (new == 2)
                if pad_after_eos:
                    new_out = new.masked_fill(finished, 0)
                    rows = rows.masked_fill(finished[:, None, None, None], 0.0)
                else:
                    new_out = new
                tokens[:, i] = new_out
                weights[:, :, :, i] = rows
                finished = finished | (new == 2)
                prefix = torch.cat([prefix, new[:, None]], dim=1)
            return tokens, weights
    return _Greedy


class _GreedyAltFinalPass(tf.Transformer):
    """Tokens first (the loop keeps only tokens), then one teacher-forced pass over the
    generated prefix gives every row of cross-attention weights at once."""

    def greedy_decode(self, src, src_lens, max_len):
        memory = self.encode(src, src_lens)
        seq = torch.ones(src.shape[0], 1, dtype=torch.long)
        for _ in range(max_len):
            logits = self.decode(seq, memory, src_lens)
            seq = torch.cat([seq, logits[:, -1:].argmax(-1)], dim=1)
        _, cross = self.decode(seq[:, :-1], memory, src_lens, return_weights=True)
        out = seq[:, 1:]
        eos_seen = (out == 2).long().cumsum(dim=1)
        after = (eos_seen - (out == 2).long()) > 0          # strictly after the first <eos>
        return out.masked_fill(after, 0), cross.masked_fill(after[:, None, None, :, None], 0.0)


class _GreedyAltPerSequence(tf.Transformer):
    """One source at a time (batch of one), stopping at its <eos>; results padded into place."""

    def greedy_decode(self, src, src_lens, max_len):
        memory = self.encode(src, src_lens)
        batch, num_keys = src.shape
        tokens = torch.zeros(batch, max_len, dtype=torch.long)
        weights = torch.zeros(batch, self.num_layers, self.num_heads, max_len, num_keys)
        for b in range(batch):
            seq = [1]
            for i in range(max_len):
                logits, cross = self.decode(torch.tensor([seq]), memory[b:b + 1], src_lens[b:b + 1],
                                            return_weights=True)
                token = int(logits[0, -1].argmax())
                tokens[b, i] = token
                weights[b, :, :, i] = cross[0, :, :, -1]
                if token == 2:
                    break
                seq.append(token)
        return tokens, weights


class _GreedyAltLists(tf.Transformer):
    """Python lists of per-step results, stacked at the end; a running 'alive' float mask."""

    def greedy_decode(self, src, src_lens, max_len):
        memory = self.encode(src, src_lens)
        prefix = torch.ones(src.shape[0], 1, dtype=torch.long)
        alive = torch.ones(src.shape[0])
        token_steps, weight_steps = [], []
        for _ in range(max_len):
            logits, cross = self.decode(prefix, memory, src_lens, return_weights=True)
            nxt = torch.argmax(logits[:, -1], dim=-1)
            token_steps.append(nxt * alive.long())
            weight_steps.append(cross[..., -1, :] * alive[:, None, None, None])
            alive = alive * (nxt != 2).float()
            prefix = torch.cat([prefix, nxt.unsqueeze(1)], dim=1)
        return torch.stack(token_steps, dim=1), torch.stack(weight_steps, dim=3)


class _GreedyAltFromScratch(tf.Transformer):
    """The loop of LLMs-from-scratch's generate_text_simple (idx, idx_next, probas, argmax with
    keepdim, torch.cat), with the memory computed before it and <eos> handled after each step."""

    def greedy_decode(self, src, src_lens, max_len):
        memory = self.encode(src, src_lens)
        idx = torch.full((src.shape[0], 1), 1, dtype=torch.long)       # <bos>
        token_ids, attn_rows = [], []
        stopped = torch.zeros(src.shape[0], 1, dtype=torch.bool)
        for _ in range(max_len):
            with torch.no_grad():
                logits, cross = self.decode(idx, memory, src_lens, return_weights=True)
            logits = logits[:, -1, :]
            probas = torch.softmax(logits, dim=-1)
            idx_next = torch.argmax(probas, dim=-1, keepdim=True)       # (batch, 1)
            token_ids.append(torch.where(stopped, torch.zeros_like(idx_next), idx_next))
            attn_rows.append(torch.where(stopped[:, :, None, None], torch.zeros(()), cross[:, :, :, -1, :]))
            stopped = stopped | (idx_next == 2)
            if stopped.all():
                break
            idx = torch.cat((idx, idx_next), dim=1)
        tokens = torch.zeros(src.shape[0], max_len, dtype=torch.long)
        weights = torch.zeros(src.shape[0], self.num_layers, self.num_heads, max_len, src.shape[1])
        tokens[:, :len(token_ids)] = torch.cat(token_ids, dim=1)
        weights[:, :, :, :len(attn_rows)] = torch.stack(attn_rows, dim=3)
        return tokens, weights


def _model_state(g, config, eos_bias):
    template = tf.Transformer(*config).state_dict()
    state = {}
    for name, value in template.items():
        if "norm" in name and name.endswith("weight"):
            state[name] = 1.0 + 0.3 * torch.randn(value.shape, generator=g)
        elif value.dim() == 1:
            state[name] = 0.3 * torch.randn(value.shape, generator=g)
        else:
            state[name] = 1.2 * torch.randn(value.shape, generator=g) / math.sqrt(value.shape[-1])
    state["out.bias"][2] += eos_bias            # make <eos> come up often enough to test what follows it
    return state


def _greedy_call(g, seed, config, batch, src_len, max_len, eos_bias, limit=True):
    src_vocab = config[0]
    src = torch.randint(3, src_vocab, (batch, src_len), generator=g)
    lens = _lens(g, batch, src_len)
    src = src.masked_fill(torch.arange(src_len)[None, :] >= lens[:, None], 0)
    return Call(init_args=config, init_kwargs={"max_encodes": 1} if limit else {}, init_seed=seed,
                state_dict=_model_state(g, config, eos_bias), train=False, method="greedy_decode",
                args=(src, lens, max_len))


def _greedy_main_calls(seed):
    g = _gen(seed)
    return [_greedy_call(g, seed, (11, 9, 8, 2, 2, 16), 3, 6, 7, eos_bias=0.0, limit=False)]


def _greedy_encode_once_calls(seed):
    g = _gen(seed)
    return [_greedy_call(g, seed, (10, 8, 6, 3, 1, 12), 2, 5, 4, eos_bias=0.0)]


def _greedy_eos_calls(seed):
    g = _gen(seed)
    return [_greedy_call(g, seed, (12, 7, 8, 4, 2, 16), 4, 5, 8, eos_bias=1.5, limit=False)]


def _greedy_hidden_calls(seed):
    g = _gen(seed)
    heads = _randint(g, 1, 3)
    config = (_randint(g, 6, 14), _randint(g, 5, 10), 2 * heads * _randint(g, 1, 2), heads, _randint(g, 1, 2),
              _randint(g, 6, 16))
    return [_greedy_call(g, seed, config, _randint(g, 3, 5), _randint(g, 3, 7), _randint(g, 6, 9),
                         eos_bias=1.5)]


_GREEDY_HINT = ("tokens (batch, max_len), torch.long, and weights (batch, num_layers, num_heads, max_len, "
                "src_len), float32, are compared: every sequence starts from <bos> (index 1); at step i the "
                "whole prefix is decoded, token i is the argmax of the last position's logits and row i the "
                "cross-attention weights of that last position (every layer and head); the step that emits "
                "<eos> keeps it and its row, the steps after it are 0 and zeros.")
_GREEDY_ONCE_HINT = ("the model is built with max_encodes=1, so a second call of self.encode raises "
                     "RuntimeError; apart from that, this check compares as the others: " + _GREEDY_HINT)

register(Exercise(
    label="ch08_ex5", title="Greedy decoding that caches the encoder output", name="GreedyTransformer",
    reference=GreedyTransformer, kind="class", points=3,
    checks=[
        Check("3 sources, 7 steps, 2 layers of 2 heads: tokens and cross-attention weights", _greedy_main_calls,
              hint=_GREEDY_HINT),
        Check("the source is encoded once (the model allows one call of encode)", _greedy_encode_once_calls,
              hint=_GREEDY_ONCE_HINT),
        Check("4 sources that emit <eos> early: zeros after it", _greedy_eos_calls, hint=_GREEDY_HINT),
        Check("random sizes, encoded once (hidden)", _greedy_hidden_calls, public=False, hint=_GREEDY_HINT),
    ],
    mistakes=[
        Mistake("encoder run at every step",
                "the memory does not change while decoding: encode the source once, before the loop, and "
                "reuse it at every step.",
                _greedy_variant(reencode=True)),
        Mistake("<eos> step cleared too",
                "your tokens and weights match a loop that marks a sequence finished before writing the step "
                "that emits <eos>, so that <eos> itself becomes 0 and its weight row zeros; the step that "
                "emits <eos> keeps token 2 and its row, only the steps after it are cleared.",
                _greedy_variant(eos_step_cleared=True)),
        Mistake("weights of the first position",
                "the weights of step i are those of the newest position of the prefix (the last query), "
                "not those of the first one.",
                _greedy_variant(row="first")),
        Mistake("logits of the first position",
                "the next token is the argmax of the logits at the last position of the prefix.",
                _greedy_variant(logits_at="first")),
        Mistake("nothing cleared after <eos>",
                "once a sequence has emitted <eos>, its later tokens must be 0 (<pad>) and its later weight "
                "rows zeros.",
                _greedy_variant(pad_after_eos=False)),
        Mistake("heads averaged",
                "return every head's weights separately: (batch, num_layers, num_heads, max_len, src_len).",
                _greedy_variant(head_mean=True)),
    ],
    alternatives=[
        Alternative("final teacher-forced pass", "tokens in the loop, then one decode pass over the output "
                    "for all weight rows; cumsum for what follows <eos>", _GreedyAltFinalPass),
        Alternative("one sequence at a time", "a batch of one per source, stopping at its <eos>",
                    _GreedyAltPerSequence),
        Alternative("LLMs-from-scratch's generation loop", "generate_text_simple's conventions: idx, "
                    "softmax then argmax with keepdim, torch.cat; stops when every sequence is done",
                    _GreedyAltFromScratch),
        Alternative("lists and a float mask", "per-step lists stacked at the end, an 'alive' 0/1 factor",
                    _GreedyAltLists),
    ],
))

# ======================================================================= ch08_ex6


def head_entropy(weights, tgt_lens):
    """Mean entropy (nats) of each head's attention rows over the valid query rows, (num_heads,)."""
    if not isinstance(tgt_lens, torch.Tensor) or tuple(tgt_lens.shape) != (weights.shape[0],):
        raise ValueError(f"tgt_lens must have shape (batch,) = ({weights.shape[0]},), got tgt_lens of shape "
                         f"{_shape_of(tgt_lens)}")
    plogp = torch.where(weights > 0, weights * torch.log(weights), torch.zeros((), dtype=weights.dtype))
    row_entropy = -plogp.sum(dim=-1)                                   # (batch, heads, num_queries)
    valid = torch.arange(weights.shape[2])[None, :] < tgt_lens[:, None]   # (batch, num_queries)
    total = (row_entropy * valid[:, None, :]).sum(dim=(0, 2))
    return total / valid.sum()


def _entropy_checked(body):
    def impl(weights, tgt_lens):
        if tuple(tgt_lens.shape) != (weights.shape[0],):
            raise ValueError(f"tgt_lens must have shape ({weights.shape[0]},), got tgt_lens of shape "
                             f"{tuple(tgt_lens.shape)}")
        valid = torch.arange(weights.shape[2])[None, :] < tgt_lens[:, None]
        return body(weights, tgt_lens, valid)
    return impl


def _ent_rows(w):
    return -torch.where(w > 0, w * w.log(), torch.zeros(()))


def _entropy_alt_xlogy(weights, tgt_lens):
    if tgt_lens.shape != torch.Size([weights.shape[0]]):
        raise ValueError(f"tgt_lens has shape {tgt_lens.shape}, need torch.Size([{weights.shape[0]}])")
    rows = -torch.special.xlogy(weights, weights).sum(-1)              # 0 * log 0 = 0 built in
    keep = (torch.arange(weights.shape[2]) < tgt_lens[:, None]).to(weights.dtype)
    return torch.einsum("bhq,bq->h", rows, keep) / keep.sum()


def _entropy_alt_loops(weights, tgt_lens):
    if tgt_lens.dim() != 1 or len(tgt_lens) != weights.shape[0]:
        raise ValueError(f"tgt_lens: one length per sequence expected, got shape {list(tgt_lens.shape)}")
    batch, heads = weights.shape[:2]
    sums, count = [0.0] * heads, 0
    for b in range(batch):
        for i in range(int(tgt_lens[b])):
            count += 1
            for h in range(heads):
                sums[h] += -sum(p * math.log(p) for p in weights[b, h, i].double().tolist() if p > 0)
    return torch.tensor([s / count for s in sums], dtype=weights.dtype)


def _entropy_alt_categorical(weights, tgt_lens):
    if tgt_lens.shape != (weights.shape[0],):
        raise ValueError("tgt_lens must be (batch,): got tgt_lens with shape "
                         + "x".join(map(str, tgt_lens.shape)))
    valid = torch.arange(weights.shape[2]) < tgt_lens[:, None]            # (batch, num_queries)
    per_head = weights.permute(1, 0, 2, 3)[:, valid]                      # (heads, num_valid_rows, keys)
    dist = torch.distributions.Categorical(probs=per_head.double(), validate_args=False)
    return dist.entropy().mean(dim=1).to(weights.dtype)


def _entropy_alt_d2l(weights, tgt_lens):
    # d2l's conventions: valid_lens, sequence_mask to zero what lies past them, and the heads folded
    # into the batch axis with valid_lens repeated per head (torch.repeat_interleave).
    batch_size, num_heads, num_queries, num_keys = weights.shape
    valid_lens = tgt_lens
    if valid_lens.dim() != 1 or valid_lens.shape[0] != batch_size:
        raise ValueError(f"valid lengths tgt_lens must be (batch_size,) = ({batch_size},), got {tuple(valid_lens.shape)}")

    def sequence_mask(X, valid_len, value=0.0):
        maxlen = X.size(1)
        mask = torch.arange(maxlen, dtype=torch.float32)[None, :] < valid_len[:, None]
        X = X.clone()
        X[~mask] = value
        return X

    P = weights.reshape(-1, num_queries, num_keys)                       # (batch_size * num_heads, q, k)
    logP = torch.log(torch.where(P > 0, P, torch.ones_like(P)))
    H = -(P * logP).sum(dim=-1)                                          # (batch_size * num_heads, q)
    H = sequence_mask(H, torch.repeat_interleave(valid_lens, num_heads))
    per_head = H.reshape(batch_size, num_heads, num_queries).sum(dim=(0, 2))
    return per_head / valid_lens.sum().to(weights.dtype)


def _entropy_weights(g, batch, heads, num_queries, num_keys, src_lens, sharp=3.0):
    scores = sharp * torch.randn(batch, heads, num_queries, num_keys, generator=g)
    hidden = (torch.arange(num_keys)[None, :] >= src_lens[:, None])[:, None, None, :]
    w = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)
    return w.masked_fill(hidden, 0.0)


def _entropy_main_calls(seed):
    g = _gen(seed)
    w = _entropy_weights(g, 2, 3, 4, 5, torch.tensor([5, 3]))
    w[0, 0, 0] = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0])            # a one-hot row: entropy 0
    w[1, 2, :] = torch.tensor([0.25, 0.25, 0.5, 0.0, 0.0])
    return [Call(args=(w, torch.tensor([4, 2])))]


def _entropy_uneven_calls(seed):
    g = _gen(seed)
    w = _entropy_weights(g, 3, 2, 5, 4, torch.tensor([4, 4, 2]), sharp=1.0)
    lens = torch.tensor([5, 1, 3])
    return [Call(args=(w, lens)), Call(args=(w.double(), lens))]       # the result keeps the dtype


def _entropy_bad_calls(seed):
    g = _gen(seed)
    w = _entropy_weights(g, 2, 2, 3, 3, torch.tensor([3, 3]))
    return [Call(args=(w, torch.tensor([3, 3, 3]))), Call(args=(w, torch.tensor([[3], [2]])))]


def _entropy_hidden_calls(seed):
    g = _gen(seed)
    batch, heads, nq, nk = _randint(g, 2, 4), _randint(g, 1, 4), _randint(g, 2, 6), _randint(g, 2, 7)
    w = _entropy_weights(g, batch, heads, nq, nk, _lens(g, batch, nk), sharp=float(_randint(g, 1, 5)))
    return [Call(args=(w, _lens(g, batch, nq)))]


_ENTROPY_HINT = ("the entropy of a row is -sum p log p (natural log, 0 log 0 = 0); average it over every "
                 "valid query row of every sequence, each row counting once, separately for each head.")

register(Exercise(
    label="ch08_ex6", title="How sharply does each head attend?", name="head_entropy",
    reference=head_entropy, points=2,
    checks=[
        Check("2 sequences, 3 heads, padded keys and a one-hot row", _entropy_main_calls, hint=_ENTROPY_HINT),
        Check("3 sequences with 5, 1 and 3 valid query rows, in float32 and in float64", _entropy_uneven_calls,
              hint=_ENTROPY_HINT),
        Check("tgt_lens of the wrong shape raises ValueError naming it and its shape", _entropy_bad_calls,
              must_mention=lambda call: ["tgt_lens", tuple(call.args[1].shape)],
              hint="compare tgt_lens.shape with (batch,) first; name tgt_lens and its shape.", weight=0.5),
        Check("random sizes, lengths and sharpness (hidden)", _entropy_hidden_calls, public=False,
              hint=_ENTROPY_HINT),
    ],
    mistakes=[
        Mistake("NaN from 0 log 0",
                "weights of exactly 0 (padding, one-hot rows) make p * log p = 0 * (-inf) = NaN; such terms "
                "count as 0.",
                _entropy_checked(lambda w, lens, valid: ((-(w * w.log()).sum(-1)) * valid[:, None]).sum((0, 2))
                                 / valid.sum())),
        Mistake("padded query rows included",
                "only the first tgt_lens[b] query rows of sequence b are real; leave the padded rows out of "
                "the average.",
                _entropy_checked(lambda w, lens, valid: _ent_rows(w).sum(-1).mean(dim=(0, 2)))),
        Mistake("entropy in bits",
                "use the natural logarithm (nats), not log2.",
                _entropy_checked(lambda w, lens, valid: (_ent_rows(w).sum(-1) / math.log(2) * valid[:, None])
                                 .sum((0, 2)) / valid.sum())),
        Mistake("mean of per-sequence means",
                "every valid row counts once: divide the sum over all valid rows by their number, rather "
                "than averaging each sequence first.",
                _entropy_checked(lambda w, lens, valid: ((_ent_rows(w).sum(-1) * valid[:, None]).sum(-1)
                                                         / lens[:, None]).mean(0))),
    ],
    alternatives=[
        Alternative("xlogy and einsum", "torch.special.xlogy, einsum with a 0/1 row mask; torch.Size in the "
                    "message", _entropy_alt_xlogy),
        Alternative("python loops", "pure Python over sequences, valid rows and heads, math.log",
                    _entropy_alt_loops),
        Alternative("d2l's sequence_mask", "d2l's conventions: valid_lens, sequence_mask, heads folded into the "
                    "batch with repeat_interleave", _entropy_alt_d2l),
        Alternative("Categorical", "torch.distributions.Categorical(probs).entropy() in float64 over the "
                    "gathered valid rows", _entropy_alt_categorical),
    ],
))
