"""ch08_ex3: A pre-LN decoder block.

Write a class `DecoderBlock(nn.Module)` with constructor `DecoderBlock(d_model, num_heads, d_ff)`
(no dropout) and exactly these submodules: `self_attn` and `cross_attn`, each with the four
parameters of an attention layer named above; `ffn` with `linear1 = nn.Linear(d_model, d_ff)` and
`linear2 = nn.Linear(d_ff, d_model)`; and `norm1`, `norm2`, `norm3`, each `nn.LayerNorm(d_model)`.
(`tf.MaskedMultiHeadAttention(d_model, num_heads)` and `tf.PositionwiseFFN(d_model, d_ff)` have
these parameter names, so you may use them as `self_attn`, `cross_attn` and `ffn`, or write your
own.)

`forward(x, memory, self_mask, key_padding_mask)` takes `x` `(batch, tgt_len, d_model)`, `memory`
`(batch, src_len, d_model)`, a `torch.bool` `self_mask` `(batch, tgt_len, tgt_len)` (`True` =
must not attend) and a `torch.bool` `key_padding_mask` `(batch, src_len)` (`True` at the source
padding, in any pattern, as in Exercise 2), and returns `(batch, tgt_len, d_model)`. The block uses `self_mask` as given: it hides
exactly the pairs `self_mask` marks `True` and adds no causal mask of its own. In a decoder,
`self_mask` is the causal mask combined with the target padding (Exercise 1 builds one for left
padding); the checks also pass masks that are not causal (the padding only). The output is computed in the pre-LN order:

1. `x = x + self_attn(...)` with queries, keys and values from `norm1(x)` and `self_mask`;
2. `x = x + cross_attn(...)` with queries from `norm2(x)`, keys and values from `memory` as it
   is, and `key_padding_mask`;
3. `x = x + ffn(norm3(x))`, where `ffn(h) = linear2(relu(linear1(h)))`.

Every attention is multi-head scaled dot-product attention (scores divided by
the square root of `head_dim`, hidden keys at weight 0) followed by `out_proj`. A row of `self_mask`
may hide every key, and so may `key_padding_mask` for a source that is all padding (left-padded
targets, Exercise 1, give such rows): that query gives weight 0 to every key, and nothing is NaN,
in the forward or the backward pass.
"""
from __future__ import annotations

import math

from torch import nn
import torch
import torch.nn.functional as F

from ... import transformer as tf
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import _Attention, _heads_of, _kpm, _lens

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


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


# Inputs of the public and hidden checks ---------------------------------------------------


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
                src_left=False, **extra):
    x = 2.0 * torch.randn(batch, tgt_len, d_model, generator=g) + 1.0
    memory = torch.randn(batch, src_len, d_model, generator=g)
    self_mask = tf.decoder_self_mask(tgt_lens, tgt_len) if causal else _padding_self_mask(tgt_lens, tgt_len)
    key_padding_mask = _kpm(src_lens, src_len)
    if src_left:                # the source padding first: key_padding_mask may have any pattern
        key_padding_mask = key_padding_mask.flip(-1)
    return Call(init_args=(d_model, heads, d_ff), init_seed=seed, state_dict=_block_state(g, d_model, d_ff),
                args=(x, memory, self_mask, key_padding_mask), **extra)


def _block_main_calls(seed):
    g = gen(seed)
    return [_block_call(g, seed, 2, 4, 5, 8, 2, 16, torch.tensor([4, 2]), torch.tensor([5, 3]),
                        report=("param_shapes",))]


def _block_grad_calls(seed):
    g = gen(seed)
    return [_block_call(g, seed, 2, 3, 4, 6, 3, 12, torch.tensor([3, 3]), torch.tensor([4, 2]), src_left=True,
                        grads_of=(0, 1))]


def _block_causal_calls(seed):
    g = gen(seed)
    return [_block_call(g, seed, 1, 6, 3, 4, 1, 8, torch.tensor([6]), torch.tensor([3]))]


def _block_not_causal_calls(seed):
    g = gen(seed)
    return [_block_call(g, seed, 2, 5, 4, 6, 2, 10, torch.tensor([5, 3]), torch.tensor([4, 2]), causal=False)]


def _block_all_hidden_calls(seed):
    g = gen(seed)
    return [_block_call(g, seed, 2, 5, 4, 6, 2, 10, torch.tensor([5, 0]), torch.tensor([0, 3]), causal=False,
                        grads_of=(0, 1)),
            _block_call(g, seed, 2, 3, 4, 4, 2, 8, torch.tensor([3, 2]), torch.tensor([4, 0]))]


def _block_hidden_calls(seed):
    g = gen(seed)
    heads, head_dim = randint(g, 1, 3), randint(g, 2, 3)
    d_model, batch = heads * head_dim, randint(g, 1, 3)
    tgt_len, src_len = randint(g, 2, 6), randint(g, 2, 6)
    calls = [_block_call(g, seed, batch, tgt_len, src_len, d_model, heads, randint(g, 4, 12),
                         _lens(g, batch, tgt_len), _lens(g, batch, src_len), grads_of=(0, 1))]
    # the same sizes with a self_mask that is not causal (padding only): the block uses self_mask as given
    calls.append(_block_call(g, seed, batch, tgt_len, src_len, d_model, heads, randint(g, 4, 12),
                             _lens(g, batch, tgt_len), _lens(g, batch, src_len), causal=False, src_left=True))
    return calls


_BLOCK_HINT = ("the output (batch, tgt_len, d_model) is compared. Pre-LN: each of the three sublayers "
               "(self-attention hiding what self_mask marks True, cross-attention over memory with "
               "key_padding_mask, feed-forward) reads norm_k(x) and adds its output to x itself.")


_BLOCK_ALL_HIDDEN_HINT = ("here one source is all padding and one target's self_mask hides every key: a query "
                          "with no visible key gives weight 0 to every key, so that attention sublayer adds "
                          "out_proj of a zero vector (its bias) and nothing is NaN; the rest is compared as in "
                          "the checks above.")


_BLOCK_NOT_CAUSAL_HINT = ("here self_mask is not causal: it hides the padded keys only, so a query may attend to "
                          "later valid keys. The self-attention hides exactly the pairs self_mask marks True, "
                          "nothing more; the rest is compared as in the checks above.")


# Kept mistakes, each with its hint --------------------------------------------------------


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


mistakes.add("post-LN",
             "that is the post-LN order (norm after the residual addition); a pre-LN block normalises "
             "the input of each sublayer and adds the sublayer's output to the unnormalised x.",
             _block_variant(order="post"))


mistakes.add("residual from the normalised input",
             "the residual path must carry x itself: x + sublayer(norm(x)), not norm(x) + "
             "sublayer(norm(x)).",
             _block_variant(order="residual from norm"))


mistakes.add("memory normalised again",
             "the memory comes from the encoder as it is (its final norm has been applied already); "
             "norm2 acts on the decoder's stream only, the queries of the cross-attention.",
             _block_variant(norm_memory=True))


mistakes.add("self_mask ignored",
             "your output matches a self-attention that hides nothing: it must hide exactly the pairs "
             "self_mask marks True.",
             _block_variant(use_self_mask=False))


mistakes.add("a causal mask added to self_mask",
             "your output matches a block that hides the future on top of self_mask; the block receives "
             "its mask ready-made and hides exactly what self_mask marks True (here the padding only, "
             "so a query may attend to later valid keys).",
             _block_variant(add_causal=True))


mistakes.add("cross-attention queries not normalised",
             "the cross-attention's queries are norm2(x), not x.",
             _block_variant(norm_cross_queries=False))


mistakes.add("cross-attention before self-attention",
             "the order of the sublayers is self-attention, then cross-attention, then the feed-forward "
             "network.",
             _block_variant(cross_first=True))


class _AttentionFilledNotZeroed(_Attention):
    """Hidden scores filled with -1e9 and the weights left as the softmax gives them."""

    def attend(self, queries_in, keys_in, hidden):
        batch, num_queries, d_model = queries_in.shape
        q = _heads_of(self.W_query(queries_in), self.num_heads)
        k = _heads_of(self.W_key(keys_in), self.num_heads)
        v = _heads_of(self.W_value(keys_in), self.num_heads)
        weights = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(hidden, -1e9), dim=-1)
        return self.out_proj((weights @ v).transpose(1, 2).reshape(batch, num_queries, d_model)), weights


@mistakes.keep("hidden scores filled with -1e9",
               "a query whose keys are all hidden got weights that sum to 1 (a softmax of equal -1e9 "
               "scores is uniform over the hidden keys); the contract gives hidden keys weight exactly 0, "
               "so such a row's weights are all 0.")
class _BlockFilledNotZeroed(DecoderBlock):
    def __init__(self, d_model, num_heads, d_ff):
        super().__init__(d_model, num_heads, d_ff)
        self.self_attn = _AttentionFilledNotZeroed(d_model, num_heads)
        self.cross_attn = _AttentionFilledNotZeroed(d_model, num_heads)


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("package sublayers",
                   "tf.MaskedMultiHeadAttention and tf.PositionwiseFFN as submodules")
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


@alternatives.keep("layer norm by hand, einsum",
                   "mean/variance written out, einsum attention, plain "
"nn.Module containers")
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


def _annotated_attention(query, key, value, mask=None):
    "Scaled dot product attention, in the Annotated Transformer's manner (mask: 1 = may attend)."
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = scores.softmax(dim=-1)
    if mask is not None:  # the one change the contract asks for: a row with no key to see weighs 0
        p_attn = p_attn.masked_fill(mask == 0, 0.0)
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


@alternatives.keep("Annotated Transformer layout",
                   "the Annotated Transformer's conventions: attention(query, "
"key, value, mask) with 1 = may attend and -1e9 (hidden weights then set to 0), a sublayer connection with lambdas")
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


@alternatives.keep("float64 with SDPA",
                   "every sublayer in float64, PyTorch's fused attention core")
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


alternatives.add("the course library's transformer.DecoderBlock",
                 "Chapter 8's block as the library ships it: pre-LN or post-LN by norm_first (pre-LN by "
                 "default), residual dropout, optional context_length and return_weights",
                 tf.DecoderBlock)


# Registration -----------------------------------------------------------------------------

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
        Check("a source that is all padding, and a target whose self_mask hides every key",
              _block_all_hidden_calls, hint=_BLOCK_ALL_HIDDEN_HINT),
        Check("random sizes and lengths, with gradients; a causal and a padding-only self_mask (hidden)",
              _block_hidden_calls, public=False, hint=_BLOCK_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
