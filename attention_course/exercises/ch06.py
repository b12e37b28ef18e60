"""Chapter 6 exercises: multi-head attention.

ch06_ex1  split_heads(x, num_heads)    (batch, tokens, d_out) -> (batch, heads, tokens, head_dim)
ch06_ex2  merge_heads(x)                (batch, heads, tokens, head_dim) -> (batch, tokens, d_out)
ch06_ex3  MultiHeadAttention(d_in, d_out, context_length, dropout, num_heads, qkv_bias=False)
ch06_ex4  fuse_head_weights(query_weights, key_weights, value_weights) -> in_proj_weight
ch06_ex5  per_head_masked_attention(queries, keys, values, mask) -> (output, weights)

Conventions fixed by this chapter (stated in each exercise's contract):

* Feature ``h * head_dim + i`` of a ``d_out``-wide projection belongs to head ``h``
  (``head_dim = d_out // num_heads``), the layout of ``nn.MultiheadAttention`` and of
  :mod:`attention_course.multihead`.
* ``d_out`` not divisible by ``num_heads`` is a ``ValueError`` whose message names
  ``d_out`` and ``num_heads`` and gives their values.
* A boolean mask is ``True`` where a query must **not** attend to a key (Chapter 5);
  a query that sees no key at all gets all-zero weights and a zero output (Chapter 3).
* ``MultiHeadAttention`` keeps its causal mask as a non-persistent buffer ``mask``;
  the checks load the parameters with ``load_state_dict``, so the order in which a
  student creates the layers does not matter, but their names and shapes do. Its
  dropout is checked by properties of 40 seeded draws
  (:mod:`attention_course.dropout_checks`), never by one random stream.
* Error-message checks weigh a fifth to two fifths of a value check, so that they carry
  less than a fifth of the chapter's points. Every exercise keeps at least three
  correct alternatives (unflatten, chunks stacked, loops over heads, SDPA, einsum in
  float64, LLMs-from-scratch's layout); kept mistakes include d2l #2056 (full-width
  heads) and a persistent float mask buffer (LLMs-from-scratch's register_buffer).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..checking import compare_outcome, mentions
from ..dropout_checks import draw_calls, dropout_compare
from ..registry import Alternative, Call, Check, Exercise, Mistake, register


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randint(g, low, high) -> int:
    """An integer in [low, high]."""
    return int(torch.randint(low, high + 1, (1,), generator=g))


def _head_dim(d_out, num_heads):
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive integer, got num_heads={num_heads!r}")
    if d_out % num_heads:
        raise ValueError(f"d_out must be divisible by num_heads, got d_out={d_out} and num_heads={num_heads}")
    return d_out // num_heads


def _mention_sizes():
    """must_mention for the divisibility error: both names and both values."""
    def words(call):
        if call.init_args is not None:
            d_out, num_heads = call.init_args[1], call.init_args[4]
        else:
            d_out, num_heads = call.args[0].shape[-1], call.args[1]
        return ["d_out", "num_heads", str(d_out), str(num_heads)]
    return words


# ======================================================================= ch06_ex1


def split_heads(x, num_heads):
    """(batch, num_tokens, d_out) -> (batch, num_heads, num_tokens, d_out // num_heads)."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise ValueError(f"x must have shape (batch, num_tokens, d_out), got x of shape "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    batch, num_tokens, d_out = x.shape
    head_dim = _head_dim(d_out, num_heads)
    return x.reshape(batch, num_tokens, num_heads, head_dim).transpose(1, 2)


def _split_small_calls(seed):
    g = _gen(seed)
    readable = torch.arange(2 * 3 * 6, dtype=torch.float32).reshape(2, 3, 6)
    return [Call(args=(readable, 2)), Call(args=(torch.randn(2, 4, 6, generator=g), 3))]


def _split_edge_calls(seed):
    g = _gen(seed)
    x = torch.randn(2, 3, 4, generator=g)
    return [Call(args=(x, 1)), Call(args=(x, 4))]


def _split_bad_calls(seed):
    g = _gen(seed)
    return [Call(args=(torch.randn(1, 3, 10, generator=g), 4)),
            Call(args=(torch.randn(2, 2, 6, generator=g), 4))]


def _split_hidden_calls(seed):
    g = _gen(seed)
    calls = []
    for _ in range(3):
        heads, head_dim = _randint(g, 2, 6), _randint(g, 1, 5)
        x = torch.randn(_randint(g, 1, 3), _randint(g, 2, 7), heads * head_dim, generator=g)
        calls.append(Call(args=(x, heads)))
    return calls


def _split_hidden_bad_calls(seed):
    g = _gen(seed)
    heads = _randint(g, 3, 6)
    d_out = heads * _randint(g, 1, 4) + _randint(g, 1, heads - 1)
    return [Call(args=(torch.randn(2, 3, d_out, generator=g), heads))]


def _split_not_3d_calls(seed):
    g = _gen(seed)
    return [Call(args=(torch.randn(3, 6, generator=g), 2)),
            Call(args=(torch.randn(1, 2, 3, 6, generator=g), 2))]


def _split_no_dim_check(x, num_heads):
    *lead, d_out = x.shape
    head_dim = _head_dim(d_out, num_heads)
    return x.reshape(*lead, num_heads, head_dim).transpose(-3, -2)


def _split_alt_unflatten(x, num_heads):
    if x.ndim != 3:
        raise ValueError(f"split_heads expects a 3-D x, got x with shape {x.shape}")
    d_out = x.shape[-1]
    if d_out % num_heads != 0:
        raise ValueError(f"d_out={d_out} is not divisible by num_heads={num_heads}")
    return x.unflatten(-1, (num_heads, d_out // num_heads)).permute(0, 2, 1, 3)


def _split_alt_chunks(x, num_heads):
    if len(x.shape) != 3:
        raise ValueError(f"x of shape {list(x.shape)} is not (batch, num_tokens, d_out)")
    if x.shape[2] % num_heads:
        raise ValueError(f"cannot split d_out = {x.shape[2]} features into num_heads = {num_heads} equal heads")
    return torch.stack(x.split(x.shape[2] // num_heads, dim=-1), dim=1)


def _split_alt_loops(x, num_heads):
    if x.dim() != 3:
        raise ValueError("x must be 3-D (batch, num_tokens, d_out), got shape " + "x".join(map(str, x.shape)))
    b, t, d_out = x.shape
    if d_out % num_heads:
        raise ValueError(f"num_heads ({num_heads}) must divide d_out ({d_out})")
    hd = d_out // num_heads
    out = torch.empty(b, num_heads, t, hd, dtype=x.dtype)
    for h in range(num_heads):
        for i in range(hd):
            out[:, h, :, i] = x[:, :, h * hd + i]
    return out


def _split_checked(body):
    def impl(x, num_heads):
        if x.dim() != 3:
            raise ValueError(f"x must be 3-D, got x of shape {tuple(x.shape)}")
        batch, num_tokens, d_out = x.shape
        return body(x, batch, num_tokens, num_heads, _head_dim(d_out, num_heads))
    return impl


_SPLIT_HINT = ("this check compares the split tensor with the contract's layout: feature h * head_dim + i "
               "of a token belongs to head h, and the heads axis comes before the tokens axis.")

register(Exercise(
    label="ch06_ex1", title="Splitting the features into heads", name="split_heads",
    reference=split_heads, points=1,
    checks=[
        Check("d_out=6 into 2 heads (an arange input) and into 3 heads", _split_small_calls, hint=_SPLIT_HINT),
        Check("one head, and as many heads as features", _split_edge_calls, hint=_SPLIT_HINT),
        Check("d_out not divisible by num_heads raises ValueError naming both and their values",
              _split_bad_calls, must_mention=_mention_sizes(), weight=0.2,
              hint="check d_out % num_heads before reshaping and give d_out, num_heads and their values "
                   "in the message."),
        Check("a 2-D or 4-D x raises ValueError naming x and its shape", _split_not_3d_calls, weight=0.2,
              must_mention=lambda call: ["x", tuple(call.args[0].shape)],
              hint="this check passes a 2-D and a 4-D x: test x.dim() first and name x and its shape in "
                   "the message."),
        Check("random sizes (hidden)", _split_hidden_calls, public=False, hint=_SPLIT_HINT),
        Check("another indivisible d_out (hidden)", _split_hidden_bad_calls, public=False,
              must_mention=_mention_sizes(), weight=0.2,
              hint="check d_out % num_heads before reshaping and give d_out, num_heads and their values "
                   "in the message."),
    ],
    mistakes=[
        Mistake("reshaped straight to (batch, heads, tokens, head_dim)",
                "you reshaped straight into the target shape: that has the right shape, but it cuts the "
                "flat memory in the wrong places and mixes features of different tokens into one head. "
                "Split the feature axis first, then swap axes.",
                _split_checked(lambda x, b, t, h, hd: x.reshape(b, h, t, hd))),
        Mistake("heads axis not moved",
                "the heads axis must come before the tokens axis: the result is (batch, num_heads, "
                "num_tokens, head_dim), not (batch, num_tokens, num_heads, head_dim).",
                _split_checked(lambda x, b, t, h, hd: x.reshape(b, t, h, hd))),
        Mistake("head index innermost",
                "the heads own consecutive blocks of features (head 0 the first head_dim features); you "
                "gave head h every num_heads-th feature instead, i.e. split the axis as (head_dim, "
                "num_heads).",
                _split_checked(lambda x, b, t, h, hd: x.reshape(b, t, hd, h).permute(0, 3, 1, 2))),
        Mistake("no divisibility check",
                "when d_out is not a multiple of num_heads the reshape fails with an unclear error; "
                "raise ValueError naming d_out and num_heads (with their values) first.",
                lambda x, num_heads: x.reshape(x.shape[0], x.shape[1], num_heads,
                                               x.shape[2] // num_heads).transpose(1, 2)),
        Mistake("no dimension check",
                "a 2-D or 4-D x must be refused with a ValueError naming x and its shape; reshaping "
                "whatever leading axes there are returns a tensor of the wrong meaning.",
                _split_no_dim_check),
    ],
    alternatives=[
        Alternative("unflatten and permute", "Tensor.unflatten(-1, (num_heads, head_dim)), permute",
                    _split_alt_unflatten),
        Alternative("chunks stacked", "x.split(head_dim, dim=-1) stacked on a new heads axis", _split_alt_chunks),
        Alternative("loops over features", "an empty tensor filled feature by feature", _split_alt_loops),
    ],
))

# ======================================================================= ch06_ex2


def merge_heads(x):
    """(batch, num_heads, num_tokens, head_dim) -> (batch, num_tokens, num_heads * head_dim)."""
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(f"x must have shape (batch, num_heads, num_tokens, head_dim), got x of shape "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    batch, num_heads, num_tokens, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, num_tokens, num_heads * head_dim)


def _merge_small_calls(seed):
    g = _gen(seed)
    readable = torch.arange(1 * 2 * 3 * 2, dtype=torch.float32).reshape(1, 2, 3, 2)
    strided = torch.randn(2, 3, 4, 2, generator=g).transpose(1, 2)   # not contiguous: (2, 4, 3, 2)
    return [Call(args=(readable,)), Call(args=(torch.randn(2, 3, 4, 2, generator=g),)), Call(args=(strided,))]


def _merge_bad_calls(seed):
    g = _gen(seed)
    return [Call(args=(torch.randn(2, 3, 4, generator=g),)),
            Call(args=(torch.randn(1, 2, 3, 4, 5, generator=g),))]


def _merge_hidden_calls(seed):
    g = _gen(seed)
    return [Call(args=(torch.randn(_randint(g, 1, 3), _randint(g, 2, 6), _randint(g, 2, 7),
                                   _randint(g, 1, 5), generator=g),)) for _ in range(3)]


def _merge_checked(body):
    def impl(x):
        if x.dim() != 4:
            raise ValueError(f"x must be 4-D, got x of shape {tuple(x.shape)}")
        return body(x, *x.shape)
    return impl


def _merge_unchecked(x):
    batch, num_heads, num_tokens, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, num_tokens, num_heads * head_dim)


_MERGE_HINT = ("this check compares the merged tensor with the contract: its dtype (that of x), its shape "
               "(batch, num_tokens, num_heads * head_dim), then its values: head h's features land in "
               "columns h * head_dim ... (h + 1) * head_dim - 1 of each token, tokens in their order.")


def _merge_alt_cat(x):
    if x.dim() != 4:
        raise ValueError(f"merge_heads needs a 4-D x, got x.shape = {x.shape}")
    return torch.cat(x.unbind(dim=1), dim=-1)


def _merge_alt_flatten(x):
    if len(x.shape) != 4:
        raise ValueError(f"x must be (batch, num_heads, num_tokens, head_dim); x has shape {list(x.shape)}")
    return x.permute(0, 2, 1, 3).flatten(start_dim=2)


def _merge_alt_einsum(x):
    # A one-hot placement tensor by einsum, in float64, cast back.
    if x.ndim != 4:
        raise ValueError("x: expected 4 axes, got shape (" + ", ".join(map(str, x.shape)) + ")")
    b, h, t, hd = x.shape
    place = torch.eye(h * hd, dtype=torch.float64).reshape(h, hd, h * hd)
    return torch.einsum("bhti,hio->bto", x.double(), place).to(x.dtype)

register(Exercise(
    label="ch06_ex2", title="Merging the heads back", name="merge_heads",
    reference=merge_heads, points=1,
    checks=[
        Check("2 heads of 3 tokens (an arange input), a random batch, a non-contiguous input", _merge_small_calls,
              hint=_MERGE_HINT),
        Check("a 3-D or 5-D input raises ValueError naming x and its shape", _merge_bad_calls, weight=0.4,
              must_mention=lambda call: ["x", tuple(call.args[0].shape)],
              hint="check x.dim() first and put x and its shape in the message."),
        Check("random sizes (hidden)", _merge_hidden_calls, public=False, hint=_MERGE_HINT),
    ],
    mistakes=[
        Mistake("flattened without moving the tokens back",
                "you flattened (heads, tokens, head_dim) as it is stored: the result has the right shape, "
                "but each output row mixes several tokens. The tokens axis must come first again.",
                _merge_checked(lambda x, b, h, t, hd: x.reshape(b, t, h * hd))),
        Mistake("view after transpose",
                "a transposed tensor is not laid out row by row in memory any more, so view cannot merge "
                "its last two axes; use an operation that is allowed to copy.",
                _merge_checked(lambda x, b, h, t, hd: x.transpose(1, 2).view(b, t, h * hd))),
        Mistake("heads interleaved",
                "the heads are concatenated one after the other (all of head 0, then all of head 1); you "
                "interleaved them feature by feature.",
                _merge_checked(lambda x, b, h, t, hd: x.permute(0, 2, 3, 1).reshape(b, t, h * hd))),
        Mistake("no shape check",
                "unpacking x.shape into four names fails with a message that names neither x nor its "
                "shape; test x.dim() first and raise your own ValueError.",
                _merge_unchecked),
        Mistake("result in float64",
                "your values are right but the result is float64: it must have the dtype of x (float32 "
                "here); compute in float64 if you like, then cast back with .to(x.dtype).",
                _merge_checked(lambda x, b, h, t, hd: x.double().transpose(1, 2).reshape(b, t, h * hd))),
    ],
    alternatives=[
        Alternative("heads concatenated", "torch.cat of x.unbind(1) along the features", _merge_alt_cat),
        Alternative("permute and flatten", "permute(0, 2, 1, 3).flatten(2)", _merge_alt_flatten),
        Alternative("einsum placement in float64", "a one-hot placement tensor contracted by einsum",
                    _merge_alt_einsum),
    ],
))

# ======================================================================= ch06_ex3


class MultiHeadAttention(nn.Module):
    """Efficient multi-head causal self-attention (one projection each, heads in one matmul)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.head_dim = _head_dim(d_out, num_heads)
        self.d_out, self.num_heads, self.context_length = d_out, num_heads, context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(1),
                             persistent=False)

    def forward(self, x):
        batch, num_tokens, _ = x.shape
        if num_tokens > self.context_length:
            raise ValueError(f"num_tokens={num_tokens} exceeds context_length={self.context_length}")

        def split(t):
            return t.view(batch, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)

        q, k, v = split(self.W_query(x)), split(self.W_key(x)), split(self.W_value(x))
        scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(self.mask[:num_tokens, :num_tokens], float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))
        context = (weights @ v).transpose(1, 2).reshape(batch, num_tokens, self.d_out)
        return self.out_proj(context)


def _mha_state(g, d_in, d_out, bias=False):
    state = {}
    for name in ("W_query", "W_key", "W_value"):
        state[f"{name}.weight"] = torch.randn(d_out, d_in, generator=g) * 0.6
        if bias:
            state[f"{name}.bias"] = torch.randn(d_out, generator=g) * 0.3
    state["out_proj.weight"] = torch.randn(d_out, d_out, generator=g) * 0.5
    state["out_proj.bias"] = torch.randn(d_out, generator=g) * 0.2
    return state


def _mha_main_calls(seed):
    g = _gen(seed)
    d_in, d_out, ctx, heads = 4, 6, 5, 3
    return [Call(init_args=(d_in, d_out, ctx, 0.5, heads), init_seed=seed, strict_state=True, state_dict=_mha_state(g, d_in, d_out),
                 train=False, args=(torch.randn(2, ctx, d_in, generator=g),),
                 report=("param_shapes", "buffer_names"))]


def _mha_short_calls(seed):
    g = _gen(seed)
    d_in, d_out, ctx, heads = 5, 8, 8, 4
    state = _mha_state(g, d_in, d_out)
    return [Call(init_args=(d_in, d_out, ctx, 0.0, heads), init_seed=seed, strict_state=True, state_dict=state, train=False,
                 args=(torch.randn(2, n, d_in, generator=g),)) for n in (3, 1)]


def _mha_draws(d_in, d_out, ctx, p, heads, state, x, bias=False):
    def make(train, call_seed, dropout=p):
        return Call(init_args=(d_in, d_out, ctx, dropout, heads), init_kwargs={"qkv_bias": bias}, init_seed=0, strict_state=True,
                    state_dict=state, train=train, call_seed=call_seed, args=(x,))
    return draw_calls(make, range(400, 440), p, p0_call=make(True, 7, dropout=0.0))


def _mha_train_calls(seed):
    g = _gen(seed)
    d_in, d_out, ctx, heads = 4, 6, 5, 2
    return _mha_draws(d_in, d_out, ctx, 0.25, heads, _mha_state(g, d_in, d_out),
                      torch.randn(2, ctx, d_in, generator=g))


def _mha_train_hidden_calls(seed):
    g = _gen(seed)
    heads, head_dim = _randint(g, 2, 3), _randint(g, 1, 3)
    d_in, d_out, ctx = _randint(g, 2, 5), heads * head_dim, _randint(g, 3, 6)
    p = round(0.2 + 0.2 * torch.rand((), generator=g).item(), 3)
    return _mha_draws(d_in, d_out, ctx, p, heads, _mha_state(g, d_in, d_out, bias=True),
                      torch.randn(2, ctx, d_in, generator=g), bias=True)


_compare_mha_dropout = dropout_compare(p_of=lambda call: call.init_args[3], is_train=lambda call: call.train)


# Where the dropout acts. With W_value's weight 0 and its bias v, every value vector is v; with
# out_proj's bias 0, out_proj's input is recovered from the output through out_proj's weight
# (orthogonal here, so exactly). Dropout on the attention weights only rescales a query's weights,
# so head h's share of out_proj's input is one factor times v_h, in every draw. Dropout on
# out_proj's output zeroes single output entries; on the merged heads, single features of
# out_proj's input; on the values, it makes the features of one head differ in scale.
_PLACEMENT_P, _PLACEMENT_HEADS, _PLACEMENT_HEAD_DIM, _PLACEMENT_CTX = 0.3, 2, 3, 6


def _mha_placement_calls(seed):
    g = _gen(seed)
    d_in, heads, ctx = 3, _PLACEMENT_HEADS, _PLACEMENT_CTX
    d_out = heads * _PLACEMENT_HEAD_DIM
    state = _mha_state(g, d_in, d_out, bias=True)
    sign = torch.where(torch.rand(d_out, generator=g) < 0.5, -1.0, 1.0)
    state["W_value.weight"] = torch.zeros(d_out, d_in)
    state["W_value.bias"] = sign * (0.5 + torch.rand(d_out, generator=g))      # |v_i| >= 0.5
    state["out_proj.weight"] = torch.linalg.qr(torch.randn(d_out, d_out, generator=g, dtype=torch.float64))[0].float()
    state["out_proj.bias"] = torch.zeros(d_out)
    return _mha_draws(d_in, d_out, ctx, _PLACEMENT_P, heads, state, torch.randn(2, ctx, d_in, generator=g),
                      bias=True)


def _placement(draws, call):
    """How the training-mode draws of one answer vary: 'weights' (head h's share of out_proj's
    input is a multiple of v_h in every draw), 'output' (single output entries are 0),
    'merged' (single features of out_proj's input are 0) or 'other'; with the numbers seen."""
    p, heads = call.init_args[3], call.init_args[4]
    w_o, v = call.state_dict["out_proj.weight"].double(), call.state_dict["W_value.bias"].double()
    out = torch.stack([d.double() for d in draws])                      # (K, batch, tokens, d_out)
    merged = out @ torch.linalg.inv(w_o).T                              # out = merged @ w_o.T
    hd = v.numel() // heads
    blocks, vs = merged.unflatten(-1, (heads, hd)), v.view(heads, hd)
    coef = (blocks * vs).sum(-1, keepdim=True) / (vs * vs).sum(-1, keepdim=True)
    off = (blocks - coef * vs).abs().amax(-1)                           # (K, batch, tokens, heads)
    bad_rows = (off > 1e-4 * (merged.abs().max().item() + 1.0)).any(-1)
    # Zeros among rows (of the output) or head blocks (of out_proj's input) that are not all zero:
    # a query whose weights are all dropped gives a zero row, which is correct.
    tiny = 1e-5 * (out.abs().max().item() + 1.0)
    out_zero = out.abs() <= tiny
    live_rows = ~out_zero.all(-1, keepdim=True)
    out_frac = float((out_zero & live_rows).sum()) / max(int(live_rows.sum()) * out.shape[-1], 1)
    blk_zero = blocks.abs() <= tiny
    live_blk = ~blk_zero.all(-1, keepdim=True)
    blk_frac = float((blk_zero & live_blk).sum()) / max(int(live_blk.sum()) * hd, 1)
    if not bool(bad_rows.any()):
        kind = "weights"
    elif out_frac > p / 2:
        kind = "output"
    elif blk_frac > p / 2:
        kind = "merged"
    else:
        kind = "other"
    return {"kind": kind, "bad_draws": int(bad_rows.flatten(1).any(1).sum()), "k": len(draws),
            "out_frac": out_frac, "blk_frac": blk_frac}


def _placement_text(st):
    if st["kind"] == "weights":
        return "in every draw"
    text = f"not in {st['bad_draws']} of {st['k']} draws"
    if st["kind"] == "output":
        text += f"; a fraction {st['out_frac']:.2f} of the output entries (in rows not all 0) is exactly 0"
    elif st["kind"] == "merged":
        text += (f"; a fraction {st['blk_frac']:.2f} of the features of out_proj's input (in head blocks "
                 f"not all 0) is exactly 0")
    else:
        text += "; no single output entry or feature of out_proj's input is zeroed"
    return text


def _compare_mha_placement(got, want, calls):
    draws = [i for i, c in enumerate(calls) if c.train and c.init_args[3] > 0]
    rest = [i for i in range(len(calls)) if i not in draws]
    # Errors, and eval mode (or dropout=0) differing from the reference, are reported as usual.
    if _compare_mha_dropout([got[i] for i in rest], [want[i] for i in rest], [calls[i] for i in rest]) \
            or any(o["status"] != "ok" or not isinstance(o["value"], torch.Tensor) for o in got + want) \
            or any(g["value"].shape != w["value"].shape or g["value"].dtype != w["value"].dtype
                   for g, w in zip(got, want)):
        return _compare_mha_dropout(got, want, calls)
    call = calls[draws[0]]
    sg = _placement([got[i]["value"] for i in draws], call)
    sw = _placement([want[i]["value"] for i in draws], call)
    if sg["kind"] != sw["kind"]:
        return (f"with every value vector equal to one vector v and out_proj's bias 0, out_proj's input "
                f"(recovered through out_proj's weight) should, for every query and head h, be one factor "
                f"times v's share of head h in training mode ({_placement_text(sw)}); yours is "
                f"{_placement_text(sg)} (p={call.init_args[3]})")
    return _compare_mha_dropout(got, want, calls)


def _mha_indivisible_calls(seed):
    g = _gen(seed)
    return [Call(init_args=(4, 10, 6, 0.0, 4), init_seed=seed, args=(torch.randn(1, 3, 4, generator=g),))]


def _mha_too_long_calls(seed):
    g = _gen(seed)
    return [Call(init_args=(3, 4, 4, 0.0, 2), init_seed=seed, strict_state=True, state_dict=_mha_state(g, 3, 4), train=False,
                 args=(torch.randn(1, 6, 3, generator=g),))]


def _mha_hidden_calls(seed):
    g = _gen(seed)
    heads, head_dim = _randint(g, 2, 4), _randint(g, 1, 3)
    d_in, d_out = _randint(g, 2, 6), heads * head_dim
    ctx = _randint(g, 4, 9)
    n = _randint(g, 2, ctx)
    return [Call(init_args=(d_in, d_out, ctx, 0.3, heads), init_kwargs={"qkv_bias": True}, init_seed=seed, strict_state=True,
                 state_dict=_mha_state(g, d_in, d_out, bias=True), train=False,
                 args=(torch.randn(3, n, d_in, generator=g),), grads_of=(0,),
                 report=("param_shapes", "buffer_names"))]


def _mha_hidden_bad_calls(seed):
    g = _gen(seed)
    heads = _randint(g, 3, 5)
    d_out = heads * _randint(g, 1, 3) + _randint(g, 1, heads - 1)
    return [Call(init_args=(3, d_out, 5, 0.0, heads), init_seed=seed, args=(torch.randn(1, 2, 3, generator=g),))]


def _mha_variant(head_dim_is_d_out=False, split="correct", merge="correct", scale_by="head_dim",
                 use_out_proj=True, divisibility_check=True, persistent_float_mask=False, dropout_on="weights"):
    """A MultiHeadAttention that is wrong in exactly the way switched on."""

    class Variant(nn.Module):
        def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
            super().__init__()
            if divisibility_check:
                _head_dim(d_out, num_heads)
            self.head_dim = d_out if head_dim_is_d_out else d_out // num_heads
            width = num_heads * self.head_dim
            self.d_out, self.num_heads, self.context_length = d_out, num_heads, context_length
            self.W_query = nn.Linear(d_in, width, bias=qkv_bias)
            self.W_key = nn.Linear(d_in, width, bias=qkv_bias)
            self.W_value = nn.Linear(d_in, width, bias=qkv_bias)
            self.out_proj = nn.Linear(width, d_out)
            self.dropout = nn.Dropout(dropout)
            mask = torch.ones(context_length, context_length, dtype=torch.bool).triu(1)
            if persistent_float_mask:   # LLMs-from-scratch: register_buffer("mask", torch.triu(ones, 1))
                self.register_buffer("mask", mask.float())
            else:
                self.register_buffer("mask", mask, persistent=False)

        def forward(self, x):
            b, n, _ = x.shape
            if n > self.context_length:
                raise ValueError(f"num_tokens={n} exceeds context_length={self.context_length}")
            h, hd = self.num_heads, self.head_dim

            def to_heads(t):
                if split == "no transpose":
                    return t.reshape(b, h, n, hd)
                return t.reshape(b, n, h, hd).transpose(1, 2)

            q, k, v = to_heads(self.W_query(x)), to_heads(self.W_key(x)), to_heads(self.W_value(x))
            if dropout_on == "values":
                v = self.dropout(v)
            scale = math.sqrt(hd if scale_by == "head_dim" else self.d_out)
            scores = (q @ k.transpose(2, 3) / scale).masked_fill(self.mask.bool()[:n, :n], float("-inf"))
            weights = torch.softmax(scores, dim=-1)
            ctx = (self.dropout(weights) if dropout_on == "weights" else weights) @ v
            if split == "no transpose":
                ctx = ctx.reshape(b, n, h * hd)
            elif merge == "interleaved":
                ctx = ctx.permute(0, 2, 3, 1).reshape(b, n, h * hd)
            else:
                ctx = ctx.transpose(1, 2).reshape(b, n, h * hd)
            if dropout_on == "merged":
                ctx = self.dropout(ctx)
            out = self.out_proj(ctx) if use_out_proj else ctx
            return self.dropout(out) if dropout_on == "output" else out

    # Named like the answer's class: load_state_dict's errors quote the class name.
    Variant.__name__ = Variant.__qualname__ = "MultiHeadAttention"
    return Variant


class _MHAAltRaschka(nn.Module):
    """LLMs-from-scratch's MultiHeadAttention layout (float triu mask, made non-persistent here;
    masked_fill_ with mask.bool(); keys.shape[-1] ** 0.5; contiguous().view to merge)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads != 0:
            raise ValueError(f"d_out ({d_out}) must be divisible by num_heads ({num_heads})")
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1),
                             persistent=False)

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        if num_tokens > self.mask.shape[0]:
            raise ValueError(f"num_tokens={num_tokens} is longer than context_length={self.mask.shape[0]}")
        keys = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        values = self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        attn_scores = queries @ keys.transpose(2, 3)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = self.dropout(torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1))
        context_vec = (attn_weights @ values).transpose(1, 2)
        return self.out_proj(context_vec.contiguous().view(b, num_tokens, self.d_out))


class _MHAAltSDPA(nn.Module):
    """Heads through torch's fused scaled_dot_product_attention (is_causal, dropout_p in training)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if num_heads < 1 or d_out % num_heads:
            raise ValueError(f"num_heads={num_heads} does not divide d_out={d_out}")
        self.heads, self.p, self.context_length = num_heads, dropout, context_length
        self.out_proj = nn.Linear(d_out, d_out)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.register_buffer("mask", torch.ones(context_length, context_length).triu(1).bool(), persistent=False)

    def forward(self, x):
        b, n, _ = x.shape
        if n > self.context_length:
            raise ValueError(f"got num_tokens={n}, but context_length is {self.context_length}")
        q, k, v = (layer(x).unflatten(-1, (self.heads, -1)).transpose(1, 2)
                   for layer in (self.W_query, self.W_key, self.W_value))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.p if self.training else 0.0)
        return self.out_proj(out.transpose(1, 2).flatten(2))


class _MHAAltHeadLoop(nn.Module):
    """One head at a time from row blocks of the projection weights, in float64; one dropout per head."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads:
            raise ValueError(f"d_out % num_heads != 0 (d_out={d_out}, num_heads={num_heads})")
        self.num_heads, self.context_length = num_heads, context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(1),
                             persistent=False)

    @staticmethod
    def _rows(layer, x, rows):
        y = x @ layer.weight[rows].double().T
        return y if layer.bias is None else y + layer.bias[rows].double()

    def forward(self, x):
        n = x.shape[1]
        if n > self.context_length:
            raise ValueError(f"num_tokens {n} > context_length {self.context_length}")
        x64 = x.double()
        hd = self.W_query.out_features // self.num_heads
        heads = []
        for h in range(self.num_heads):
            rows = slice(h * hd, (h + 1) * hd)
            q, k, v = (self._rows(layer, x64, rows) for layer in (self.W_query, self.W_key, self.W_value))
            scores = (q @ k.transpose(1, 2) / math.sqrt(hd)).masked_fill(self.mask[:n, :n], float("-inf"))
            heads.append(self.dropout(torch.softmax(scores, dim=-1)) @ v)
        return self.out_proj(torch.cat(heads, dim=-1).to(x.dtype))


_MHA_HINT = ("this check loads given weights by name (load_state_dict), lists parameter shapes and buffer "
             "names, and compares the eval-mode output: compare each step (projections, split, per-head "
             "scaled scores, causal mask, softmax, merge, out_proj) and the names with the contract.")

_MHA_DRAWS_HINT = ("this check first compares eval mode (two calls) and training mode with dropout=0 with the "
                   "contract's output, then 40 training-mode outputs, each with its own seed: their mean must "
                   "approach the eval-mode output and their summed variance must be within a factor 2 of that "
                   "of dropout with probability p on the attention weights.")

_MHA_PLACEMENT_HINT = ("this check first compares eval mode and dropout=0 with the contract's output, with every "
                       "value vector set to one vector v (W_value's weight 0, its bias v) and out_proj's bias "
                       "0; then 40 training-mode draws. Dropout on the attention weights only rescales each "
                       "query's weights, so in every draw head h's share of out_proj's input is one number "
                       "times v's share of head h; the check recovers out_proj's input from the output "
                       "through out_proj's weight and tests that, then the mean and spread of the draws.")

register(Exercise(
    label="ch06_ex3", title="The efficient multi-head attention layer", name="MultiHeadAttention",
    reference=MultiHeadAttention, points=3, kind="class",
    checks=[
        Check("3 heads of 2 (d_in=4, d_out=6), 2 sequences of 5 tokens, eval mode (parameters, buffer)",
              _mha_main_calls, hint=_MHA_HINT),
        Check("4 heads of 2 on inputs shorter than context_length (3 and 1 of 8 tokens)", _mha_short_calls,
              hint="this check passes sequences shorter than context_length, with given weights."),
        Check("training mode, dropout=0.25: 40 seeded draws against eval mode (and dropout=0)", _mha_train_calls,
              compare=_compare_mha_dropout, hint=_MHA_DRAWS_HINT),
        Check("training mode, dropout=0.3, every value vector equal: where the dropout acts (40 draws)",
              _mha_placement_calls, compare=_compare_mha_placement, hint=_MHA_PLACEMENT_HINT),
        Check("d_out=10 with num_heads=4 raises ValueError naming d_out and num_heads and their values",
              _mha_indivisible_calls, must_mention=_mention_sizes(), weight=0.2,
              hint="check d_out % num_heads in __init__ and give d_out, num_heads and their values in the "
                   "message."),
        Check("num_tokens > context_length raises ValueError naming both", _mha_too_long_calls,
              must_mention=["num_tokens", "context_length"], weight=0.2,
              hint="this check passes 6 tokens to a layer with context_length=4: compare num_tokens with "
                   "context_length at the start of forward and name both in the ValueError."),
        Check("random sizes with qkv_bias=True, and gradients (hidden)", _mha_hidden_calls, public=False,
              hint=_MHA_HINT),
        Check("training mode, random sizes and p (hidden)", _mha_train_hidden_calls, public=False,
              compare=_compare_mha_dropout, hint=_MHA_DRAWS_HINT),
        Check("training mode, every value vector equal, other weights (hidden)", _mha_placement_calls,
              public=False, compare=_compare_mha_placement, hint=_MHA_PLACEMENT_HINT),
        Check("another indivisible d_out (hidden)", _mha_hidden_bad_calls, public=False,
              must_mention=_mention_sizes(), weight=0.2,
              hint="check d_out % num_heads in __init__ and give d_out, num_heads and their values in the "
                   "message."),
    ],
    mistakes=[
        Mistake("head_dim = d_out (d2l #2056: full-width heads)",
                "each head must be d_out // num_heads wide, so W_query, W_key and W_value map d_in to d_out "
                "in total; you gave every head the full d_out (num_heads times too many parameters).",
                _mha_variant(head_dim_is_d_out=True)),
        Mistake("view without transpose",
                "you reshaped the projections straight to (batch, heads, tokens, head_dim): right shape, but "
                "each head then mixes features of different tokens. Split the feature axis, then swap the "
                "tokens and heads axes (and undo it the same way when merging).",
                _mha_variant(split="no transpose")),
        Mistake("heads merged in the wrong order",
                "when merging, head h must fill features h * head_dim ... (h + 1) * head_dim - 1; you "
                "interleaved the heads feature by feature.",
                _mha_variant(merge="interleaved")),
        Mistake("scaled by sqrt(d_out)",
                "each head's scores are dot products of head_dim-sized vectors, so divide by the square root "
                "of head_dim, not of d_out.",
                _mha_variant(scale_by="d_out")),
        Mistake("out_proj not applied",
                "the merged heads still have to go through the output projection out_proj.",
                _mha_variant(use_out_proj=False)),
        Mistake("no divisibility check",
                "when d_out is not a multiple of num_heads, raise ValueError in __init__ naming d_out and "
                "num_heads with their values, instead of failing later in a reshape.",
                _mha_variant(divisibility_check=False)),
        Mistake("persistent float mask buffer",
                "your mask is a persistent buffer, so state_dict expects it and loading the projections alone "
                "fails (\"Missing key(s) ... mask\"); it is rebuilt from context_length, so register it with "
                "persistent=False.",
                _mha_variant(persistent_float_mask=True)),
        Mistake("dropout on out_proj's output",
                "in training mode single entries of your layer's output are exactly 0, as when the dropout "
                "is applied to the output of out_proj; the contract drops attention weights: apply the "
                "dropout once to the softmax weights, before they weight the values.",
                _mha_variant(dropout_on="output")),
        Mistake("dropout on the merged heads",
                "in training mode single features of out_proj's input are exactly 0, as when the dropout "
                "is applied to the merged heads (or to the context vectors); the contract drops attention "
                "weights: apply the dropout once to the softmax weights, before they weight the values.",
                _mha_variant(dropout_on="merged")),
        Mistake("dropout on the values",
                "in training mode the features of one head are rescaled by different amounts, with no "
                "single output entry zeroed, as when the dropout is applied to the value vectors; the "
                "contract drops attention weights: apply the dropout once to the softmax weights, before "
                "they weight the values.",
                _mha_variant(dropout_on="values")),
    ],
    alternatives=[
        Alternative("LLMs-from-scratch's layout", "float triu mask (non-persistent), masked_fill_ with "
                    ".bool(), keys.shape[-1] ** 0.5, contiguous().view", _MHAAltRaschka),
        Alternative("torch's fused SDPA", "unflatten into heads, F.scaled_dot_product_attention(is_causal=True, "
                    "dropout_p), layers created in another order", _MHAAltSDPA),
        Alternative("one head at a time in float64", "row blocks of the projection weights, a loop over "
                    "heads, torch.cat", _MHAAltHeadLoop),
    ],
))

# ======================================================================= ch06_ex4


def fuse_head_weights(query_weights, key_weights, value_weights):
    """Stack per-head (num_heads, head_dim, d_in) weights into a (3 * d_out, d_in) in_proj_weight."""
    tensors = {"query_weights": query_weights, "key_weights": key_weights, "value_weights": value_weights}
    shapes = {name: tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
              for name, t in tensors.items()}
    if any(not isinstance(t, torch.Tensor) or t.dim() != 3 for t in tensors.values()) \
            or len(set(shapes.values())) != 1:
        raise ValueError("query_weights, key_weights and value_weights must be 3-D tensors of the same shape "
                         "(num_heads, head_dim, d_in), got shapes "
                         + ", ".join(f"{name} {shape}" for name, shape in shapes.items()))
    return torch.cat([t.reshape(-1, t.shape[-1]) for t in tensors.values()], dim=0)


def _fuse_main_calls(seed):
    g = _gen(seed)
    return [Call(args=tuple(torch.randn(3, 2, 4, generator=g) for _ in range(3)))]


def _fuse_bad_calls(seed):
    g = _gen(seed)
    q, k = torch.randn(2, 3, 4, generator=g), torch.randn(2, 3, 4, generator=g)
    return [Call(args=(q, k, torch.randn(2, 3, 5, generator=g))),
            Call(args=(q, torch.randn(3, 3, 4, generator=g), torch.randn(2, 3, 4, generator=g))),
            Call(args=(q.reshape(6, 4), k.reshape(6, 4), k.reshape(6, 4)))]


def _fuse_hidden_calls(seed):
    g = _gen(seed)
    calls = []
    for heads in (_randint(g, 2, 6), 1):
        shape = (heads, _randint(g, 1, 5), _randint(g, 2, 7))
        calls.append(Call(args=tuple(torch.randn(*shape, generator=g) for _ in range(3))))
    return calls


def _fuse_checked(body):
    def impl(query_weights, key_weights, value_weights):
        ws = (query_weights, key_weights, value_weights)
        if any(w.dim() != 3 for w in ws) or len({tuple(w.shape) for w in ws}) != 1:
            raise ValueError("query_weights, key_weights and value_weights must have one 3-D shape, got "
                             + ", ".join(str(tuple(w.shape)) for w in ws))
        return body(*ws)
    return impl


_FUSE_HINT = ("this check compares the fused weight with the contract: its dtype (that of the arguments), "
              "its shape (3 * d_out, d_in), then its rows: rows 0 ... d_out - 1 are the query projection "
              "(head h owns rows h * head_dim ... (h + 1) * head_dim - 1), then the keys, then the values.")


def _fuse_faulty(call):
    """The arguments a ValueError message may name: those that are not 3-D; if all three are 3-D,
    the one whose shape the other two do not share (any of them when all three differ)."""
    names = ("query_weights", "key_weights", "value_weights")
    shapes = [tuple(w.shape) for w in call.args]
    not_3d = [n for n, sh in zip(names, shapes) if len(sh) != 3]
    if not_3d:
        return not_3d
    odd = [n for n, sh in zip(names, shapes) if shapes.count(sh) == 1]
    return odd if len(odd) < 3 else list(names)


_FUSE_PLAIN = Check("fuse errors", lambda seed: [], hint="")


def _compare_fuse_errors(got, want, calls):
    for i, (g, w, c) in enumerate(zip(got, want, calls)):
        where = f"call {i + 1} of {len(calls)}"
        reason = compare_outcome(g, w, _FUSE_PLAIN, c)
        if reason:
            return f"{where}: {reason}"
        if w["status"] == "raised":
            faulty = _fuse_faulty(c)
            if not any(mentions(g.get("message", ""), name) for name in faulty):
                shapes = ", ".join(f"{n} {tuple(a.shape)}" for n, a in
                                   zip(("query_weights", "key_weights", "value_weights"), c.args))
                return (f"{where} ({shapes}): the ValueError message should name "
                        f"{' or '.join(repr(n) for n in faulty)}")
    return None


def _fuse_validate(query_weights, key_weights, value_weights):
    shapes = [tuple(w.shape) for w in (query_weights, key_weights, value_weights)]
    if any(len(sh) != 3 for sh in shapes) or len(set(shapes)) > 1:
        raise ValueError(f"query_weights {shapes[0]}, key_weights {shapes[1]} and value_weights {shapes[2]} "
                         "must share one (num_heads, head_dim, d_in) shape")


def _fuse_alt_flatten(query_weights, key_weights, value_weights):
    _fuse_validate(query_weights, key_weights, value_weights)
    return torch.cat([w.flatten(0, 1) for w in (query_weights, key_weights, value_weights)])


def _fuse_alt_loops(query_weights, key_weights, value_weights):
    _fuse_validate(query_weights, key_weights, value_weights)
    rows = []
    for w in (query_weights, key_weights, value_weights):
        for head in w:
            for row in head:
                rows.append(row)
    return torch.stack(rows)


def _fuse_alt_stack(query_weights, key_weights, value_weights):
    _fuse_validate(query_weights, key_weights, value_weights)
    stacked = torch.stack([query_weights, key_weights, value_weights])   # (3, heads, head_dim, d_in)
    return stacked.reshape(-1, stacked.shape[-1])

register(Exercise(
    label="ch06_ex4", title="From per-head weights to one fused projection", name="fuse_head_weights",
    reference=fuse_head_weights, points=1,
    checks=[
        Check("3 heads of size 2 from d_in=4", _fuse_main_calls, hint=_FUSE_HINT),
        Check("mismatched or non-3-D shapes raise ValueError naming a faulty argument", _fuse_bad_calls,
              compare=_compare_fuse_errors, weight=0.4,
              hint="this check passes a value_weights of another shape, a key_weights of another shape, and "
                   "three 2-D weights: each must raise ValueError before stacking, and the message must name "
                   "an argument that is not 3-D, or the one whose shape differs from the other two (naming "
                   "all three is fine)."),
        Check("random sizes, and a single head (hidden)", _fuse_hidden_calls, public=False, hint=_FUSE_HINT),
    ],
    mistakes=[
        Mistake("rows interleaved across heads",
                "you ordered the rows by their index inside a head first (row 0 of every head, then row 1, "
                "...); each head must keep its rows together, head 0's block first.",
                _fuse_checked(lambda q, k, v: torch.cat([w.transpose(0, 1).reshape(-1, w.shape[-1])
                                                         for w in (q, k, v)]))),
        Mistake("query, key and value blocks per head",
                "you grouped the rows per head (head 0's query, key and value, then head 1's ...); the fused "
                "weight holds all query rows first, then all key rows, then all value rows.",
                _fuse_checked(lambda q, k, v: torch.stack([q, k, v], dim=1).reshape(-1, q.shape[-1]))),
        Mistake("transposed layout",
                "nn.Linear (and in_proj_weight) store a weight as (out_features, in_features): the result is "
                "(3 * num_heads * head_dim, d_in), not its transpose.",
                _fuse_checked(lambda q, k, v: torch.cat([w.reshape(-1, w.shape[-1]) for w in (q, k, v)]).T)),
        Mistake("no shape check",
                "weights of different shapes must raise ValueError naming the faulty argument, not be "
                "stacked anyway or fail with an unclear error.",
                lambda q, k, v: torch.cat([w.reshape(-1, w.shape[-1]) for w in (q, k, v)])),
        Mistake("result in float64",
                "your rows are in the right order but the result is float64: it must have the dtype of "
                "the arguments (float32 here); compute in float64 if you like, then cast back.",
                _fuse_checked(lambda q, k, v: torch.cat([w.double().reshape(-1, w.shape[-1]) for w in (q, k, v)]))),
    ],
    alternatives=[
        Alternative("flatten and cat", "w.flatten(0, 1) for each, torch.cat", _fuse_alt_flatten),
        Alternative("loops over rows", "every row appended in order, torch.stack", _fuse_alt_loops),
        Alternative("one stack, one reshape", "torch.stack into (3, heads, head_dim, d_in), reshape", _fuse_alt_stack),
    ],
))

# ======================================================================= ch06_ex5


def per_head_masked_attention(queries, keys, values, mask):
    """Scaled dot-product attention with one boolean mask per head; returns (output, weights)."""
    for name, t in (("queries", queries), ("keys", keys), ("values", values)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must have shape (batch, num_heads, length, size), got {name} of shape "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    num_heads, num_queries, num_keys = queries.shape[1], queries.shape[2], keys.shape[2]
    expected = (num_heads, num_queries, num_keys)
    if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != expected:
        got = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"mask must have shape (num_heads, num_queries, num_keys) = {expected}, "
                         f"got mask of shape {got}")
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    weights = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
    weights = weights.masked_fill(mask, 0.0)   # a row with no visible key: NaN -> 0
    return weights @ values, weights


def _window_masks(n):
    pos = torch.arange(n)
    causal = pos[None, :] > pos[:, None]
    recent = causal | (pos[None, :] < pos[:, None] - 1)     # itself and the previous token only
    return torch.stack([causal, recent])


def _pm_main_calls(seed):
    g = _gen(seed)
    b, h, n, d = 2, 2, 5, 3
    return [Call(args=(torch.randn(b, h, n, d, generator=g), torch.randn(b, h, n, d, generator=g),
                       torch.randn(b, h, n, 4, generator=g), _window_masks(n)))]


def _pm_empty_rows_calls(seed):
    g = _gen(seed)
    b, h, nq, nk, d = 2, 3, 4, 5, 2
    mask = torch.rand(h, nq, nk, generator=g) < 0.4
    mask[0, 1] = True          # head 0, query 1 sees nothing
    mask[2, 3] = True          # head 2, query 3 sees nothing
    mask[1] = False            # head 1 sees everything
    mask[0, 0] = False
    return [Call(args=(torch.randn(b, h, nq, d, generator=g), torch.randn(b, h, nk, d, generator=g),
                       torch.randn(b, h, nk, 3, generator=g), mask))]


def _pm_bad_calls(seed):
    g = _gen(seed)
    q = torch.randn(1, 2, 3, 4, generator=g)
    k = torch.randn(1, 2, 5, 4, generator=g)
    v = torch.randn(1, 2, 5, 4, generator=g)
    return [Call(args=(q, k, v, torch.zeros(3, 5, dtype=torch.bool))),
            Call(args=(q, k, v, torch.zeros(3, 3, 5, dtype=torch.bool)))]


def _pm_hidden_calls(seed):
    g = _gen(seed)
    b, h, nq, nk, d = (_randint(g, 1, 3), _randint(g, 2, 4), _randint(g, 2, 6), _randint(g, 2, 7),
                       _randint(g, 1, 4))
    mask = torch.rand(h, nq, nk, generator=g) < 0.5
    mask[0, 0] = True
    return [Call(args=(torch.randn(b, h, nq, d, generator=g), torch.randn(b, h, nk, d, generator=g),
                       torch.randn(b, h, nk, _randint(g, 1, 4), generator=g), mask), grads_of=(0,))]


def _pm_checked(body):
    def impl(queries, keys, values, mask):
        expected = (queries.shape[1], queries.shape[2], keys.shape[2])
        if tuple(mask.shape) != expected:
            raise ValueError(f"mask must have shape {expected}, got mask of shape {tuple(mask.shape)}")
        scores = queries @ keys.transpose(-2, -1)
        weights = body(scores, queries.shape[-1], mask)
        return weights @ values, weights
    return impl


def _pm_reference_weights(scores, d, mask):
    return torch.softmax((scores / math.sqrt(d)).masked_fill(mask, float("-inf")), -1).masked_fill(mask, 0.0)


def _pm_no_check(queries, keys, values, mask):
    weights = _pm_reference_weights(queries @ keys.transpose(-2, -1), queries.shape[-1], mask)
    return weights @ values, weights


def _pm_values_scaled(queries, keys, values, mask):
    expected = (queries.shape[1], queries.shape[2], keys.shape[2])
    if tuple(mask.shape) != expected:
        raise ValueError(f"mask must have shape {expected}, got mask of shape {tuple(mask.shape)}")
    weights = _pm_reference_weights(queries @ keys.transpose(-2, -1), values.shape[-1], mask)
    return weights @ values, weights


_PM_HINT = ("this check compares the tuple (output, weights) with the contract: both in the dtype of the "
            "inputs; weights = softmax over the keys of the scores divided by sqrt(head_dim), head h hiding "
            "the keys that mask[h] marks True before the softmax; output = weights @ values.")


def _pm_validate(queries, keys, mask):
    want = (queries.shape[1], queries.shape[2], keys.shape[2])
    if mask.shape != want:
        raise ValueError(f"mask has shape {mask.shape}, expected {want} (num_heads, num_queries, num_keys)")


def _pm_alt_einsum64(queries, keys, values, mask):
    _pm_validate(queries, keys, mask)
    scores = torch.einsum("bhqd,bhkd->bhqk", queries.double(), keys.double()) / math.sqrt(queries.shape[-1])
    scores = torch.where(mask, float("-inf"), scores)
    top = scores.amax(dim=-1, keepdim=True).clamp(min=-1e300)   # all -inf rows: keep exp finite
    e = torch.where(mask, 0.0, torch.exp(scores - top))
    total = e.sum(-1, keepdim=True)
    weights = torch.where(total > 0, e / total.clamp(min=1e-300), 0.0)
    return torch.einsum("bhqk,bhkv->bhqv", weights, values.double()).to(values.dtype), weights.to(queries.dtype)


def _pm_alt_sdpa(queries, keys, values, mask):
    # SDPA for the output (its boolean attn_mask marks the keys that MAY be attended), the weights beside it.
    _pm_validate(queries, keys, mask)
    visible = ~mask
    sees_some = visible.any(-1, keepdim=True)
    safe = visible | ~sees_some                     # a row that sees nothing: let SDPA see all, zero it after
    out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=safe)
    scores = queries @ keys.transpose(-2, -1) / queries.shape[-1] ** 0.5
    weights = torch.softmax(scores.masked_fill(~safe, float("-inf")), dim=-1) * sees_some
    return out * sees_some, weights


def _pm_alt_loops(queries, keys, values, mask):
    # d2l-style: one head at a time, a multiplicative mask, rows that see nothing left at zero.
    _pm_validate(queries, keys, mask)
    outs, ws = [], []
    for h in range(queries.shape[1]):
        q, k, v = queries[:, h], keys[:, h], values[:, h]
        keep = (~mask[h]).to(q.dtype)
        scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(q.shape[-1])
        scores = scores - scores.masked_fill(mask[h], float("-inf")).amax(-1, keepdim=True).nan_to_num(
            neginf=0.0)
        e = torch.exp(scores.masked_fill(mask[h], 0.0)) * keep
        s = e.sum(-1, keepdim=True)
        w = e / torch.where(s > 0, s, torch.ones_like(s))
        ws.append(w)
        outs.append(torch.bmm(w, v))
    return torch.stack(outs, 1), torch.stack(ws, 1)

register(Exercise(
    label="ch06_ex5", title="A different mask for every head", name="per_head_masked_attention",
    reference=per_head_masked_attention, points=2,
    checks=[
        Check("2 heads: one causal, one that sees only the current and the previous token", _pm_main_calls,
              hint=_PM_HINT),
        Check("queries that see no key get all-zero weights and a zero output", _pm_empty_rows_calls,
              hint="this check uses masks under which some queries of some heads see no key: those queries "
                   "must get all-zero weights and a zero output (not NaN, not uniform weights); every other "
                   "query is compared as in the first check (a tuple (output, weights) in the inputs' dtype, "
                   "scores divided by sqrt(head_dim), its own head's mask)."),
        Check("a mask of the wrong shape raises ValueError naming mask and its shape", _pm_bad_calls,
              must_mention=lambda call: ["mask", tuple(call.args[3].shape)], weight=0.5,
              hint="compare mask.shape with (num_heads, num_queries, num_keys) before using it, and put mask "
                   "and its shape in the message."),
        Check("random sizes and masks, with gradients (hidden)", _pm_hidden_calls, public=False, hint=_PM_HINT),
    ],
    mistakes=[
        Mistake("mask inverted",
                "True in the mask marks the keys a query must NOT attend to; you hid the visible keys instead.",
                _pm_checked(lambda s, d, m: torch.softmax((s / math.sqrt(d)).masked_fill(~m, float("-inf")), -1)
                            .masked_fill(~m, 0.0))),
        Mistake("masked after the softmax",
                "you zeroed the hidden keys after the softmax, so the rows no longer sum to 1; hide them in "
                "the scores, before the softmax.",
                _pm_checked(lambda s, d, m: torch.softmax(s / math.sqrt(d), -1).masked_fill(m, 0.0))),
        Mistake("NaN for a query that sees nothing",
                "a row whose scores are all -inf turns into NaN in the softmax; set the weights of such a "
                "query to 0.",
                _pm_checked(lambda s, d, m: torch.softmax((s / math.sqrt(d)).masked_fill(m, float("-inf")), -1))),
        Mistake("finite fill value",
                "filling hidden scores with a large finite negative number makes a query that sees no key "
                "spread its weight uniformly over hidden keys; its weights must be 0.",
                _pm_checked(lambda s, d, m: torch.softmax((s / math.sqrt(d)).masked_fill(m, -1e9), -1))),
        Mistake("scores not scaled",
                "divide the scores by the square root of head_dim (the last size of queries).",
                _pm_checked(lambda s, d, m: torch.softmax(s.masked_fill(m, float("-inf")), -1).masked_fill(m, 0.0))),
        Mistake("scaled by sqrt(d_v)",
                "you divided the scores by the square root of the values' size d_v; divide by the square "
                "root of head_dim, the size the queries and keys share (the last size of queries).",
                _pm_values_scaled),
        Mistake("head 0's mask for every head",
                "every head used the mask of head 0; head h must hide the keys that mask[h] marks, so index "
                "the mask per head (or broadcast the whole (num_heads, num_queries, num_keys) mask).",
                _pm_checked(lambda s, d, m: _pm_reference_weights(s, d, m[:1].expand_as(m)))),
        Mistake("a list instead of a tuple",
                "your output and weights are right but returned as a list; return the tuple "
                "(output, weights).",
                lambda q, k, v, m: list(per_head_masked_attention(q, k, v, m))),
        Mistake("results in float64",
                "your output and weights are right but float64: both must have the dtype of the inputs "
                "(float32 here); compute in float64 if you like, then cast back.",
                lambda q, k, v, m: tuple(t.double() for t in per_head_masked_attention(q, k, v, m))),
        Mistake("no mask shape check",
                "a mask that is not (num_heads, num_queries, num_keys) must raise ValueError naming mask and "
                "its shape; a (num_queries, num_keys) mask would otherwise be broadcast silently.",
                _pm_no_check),
    ],
    alternatives=[
        Alternative("einsum in float64", "torch.where masks, softmax by hand with a guarded sum, float64",
                    _pm_alt_einsum64),
        Alternative("torch's fused SDPA", "SDPA with the inverted boolean mask for the output, empty rows "
                    "zeroed after", _pm_alt_sdpa),
        Alternative("loops over heads", "bmm per head, a multiplicative mask, guarded normaliser",
                    _pm_alt_loops),
    ],
))
